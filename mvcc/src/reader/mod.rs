//! Readers over a snapshot: [`MvccReader`] for transaction actions,
//! [`PointGetter`] for point reads, [`Scanner`] for range reads.
//!
//! All three share the lock rule of snapshot isolation in
//! `check_lock_conflict`: a reader at `read_ts` must not guess what a
//! pending transaction will do, so a lock that might commit at or below
//! `read_ts` blocks it.

mod mvcc_reader;
mod point_getter;
mod scanner;

pub use mvcc_reader::{MvccReader, OverlappedWrite, TxnCommitRecord};
pub use point_getter::{PointGetter, PointGetterBuilder, VersionHints};
pub use scanner::{KvPair, PairVisitor, Scanner, ScannerBuilder};

use crate::{Error, Key, Lock, LockType, Result, TimeStamp};

/// How a read treats pending locks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// Snapshot isolation: a lock that may commit at or below the read ts
    /// blocks the read with `KeyIsLocked`. Defaults to this.
    #[default]
    Si,
    /// Read committed: locks are ignored and the lock CF is never read.
    Rc,
    /// Read committed, but any Put or Delete lock (whatever its ts) fails the
    /// read with a `WriteConflict`, so the caller retries at a fresh ts.
    RcCheckTs,
}

/// A small set of transaction start_ts (the bypass and access lists of a
/// read). Usually empty or tiny, so a sorted vector beats a hash set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TsSet(Vec<TimeStamp>);

impl TsSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `ts` is in the set.
    pub fn contains(&self, ts: TimeStamp) -> bool {
        self.0.binary_search(&ts).is_ok()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<T: Into<TimeStamp>> FromIterator<T> for TsSet {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v: Vec<TimeStamp> = iter.into_iter().map(Into::into).collect();
        v.sort_unstable();
        v.dedup();
        TsSet(v)
    }
}

/// Counters of engine operations, per column family, made by one reader.
/// Tests use them to prove that a read took the path it should (one
/// write-CF seek for a short value, no lock-CF access at RC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Operations on the lock CF.
    pub lock: CfStatistics,
    /// Operations on the write CF.
    pub write: CfStatistics,
    /// Operations on the default CF.
    pub data: CfStatistics,
}

/// Counters of one column family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CfStatistics {
    /// Point gets.
    pub get: usize,
    /// Seeks (forward or backward).
    pub seek: usize,
    /// Steps (next or prev).
    pub next: usize,
}

impl CfStatistics {
    /// Total operations.
    pub fn total(&self) -> usize {
        self.get + self.seek + self.next
    }
}

/// The lock options of one read.
#[derive(Clone, Debug, Default)]
pub(crate) struct LockPolicy {
    pub isolation_level: IsolationLevel,
    /// Locks of these transactions are ignored: the caller knows they cannot
    /// commit at or below the read ts (it pushed or resolved them).
    pub bypass_locks: TsSet,
    /// Locks of these transactions are read through: the caller knows they
    /// committed, so their pending value is the value to return.
    pub access_locks: TsSet,
}

/// What a reader must do about a lock on the key it reads.
#[derive(Debug)]
pub(crate) enum LockDecision {
    /// Ignore the lock and read committed data.
    Ignore,
    /// Return the lock's own pending value (an access lock).
    ReadLock(Box<Lock>),
}

/// Applies the isolation rule to `lock` found on `key` by a read at `ts`.
///
/// At SI the lock blocks (`KeyIsLocked`) unless one of these holds:
/// * `lock.ts > ts`: it will commit above `ts`;
/// * it is a Lock or Pessimistic lock: it will not change the value;
/// * `lock.min_commit_ts > ts`: it was pushed above `ts`;
/// * its transaction is in `bypass_locks`;
/// * `ts` is `TimeStamp::max()` (read the latest) and the lock is a plain 2PC
///   primary: its transaction has not committed, since committing the primary
///   removes this very lock. Async-commit and 1PC locks may be committed
///   before their primary lock goes, so they still block.
///
/// A lock that would block but whose transaction is in `access_locks` is
/// read through instead.
pub(crate) fn check_lock_conflict(
    lock: Lock,
    key: &Key,
    ts: TimeStamp,
    policy: &LockPolicy,
) -> Result<LockDecision> {
    match policy.isolation_level {
        IsolationLevel::Rc => Ok(LockDecision::Ignore),
        IsolationLevel::RcCheckTs => check_rc_ts(lock, key, ts, policy),
        IsolationLevel::Si => check_si(lock, key, ts, policy),
    }
}

fn never_blocks(lock: &Lock) -> bool {
    matches!(lock.lock_type, LockType::Lock | LockType::Pessimistic)
}

fn check_si(lock: Lock, key: &Key, ts: TimeStamp, policy: &LockPolicy) -> Result<LockDecision> {
    if lock.ts > ts
        || never_blocks(&lock)
        || lock.min_commit_ts > ts
        || policy.bypass_locks.contains(lock.ts)
    {
        return Ok(LockDecision::Ignore);
    }
    let raw_key = raw_key_of(key)?;
    if ts.is_max() && raw_key == lock.primary && !lock.use_async_commit && !lock.use_one_pc {
        return Ok(LockDecision::Ignore);
    }
    if policy.access_locks.contains(lock.ts) {
        return Ok(LockDecision::ReadLock(Box::new(lock)));
    }
    Err(Error::KeyIsLocked(Box::new(lock.into_lock_info(raw_key))))
}

/// At RcCheckTs any Put or Delete lock conflicts, above the read ts too,
/// unless its transaction is in `bypass_locks` (resolved: it cannot commit
/// at or below the read ts) or in `access_locks` (committed: its value is
/// read), as at SI.
fn check_rc_ts(lock: Lock, key: &Key, ts: TimeStamp, policy: &LockPolicy) -> Result<LockDecision> {
    if never_blocks(&lock) || policy.bypass_locks.contains(lock.ts) {
        return Ok(LockDecision::Ignore);
    }
    if policy.access_locks.contains(lock.ts) {
        return Ok(LockDecision::ReadLock(Box::new(lock)));
    }
    Err(Error::WriteConflict {
        start_ts: ts,
        conflict_start_ts: lock.ts,
        conflict_commit_ts: TimeStamp::zero(),
        key: key.clone(),
        primary: lock.primary,
        reason: crate::WriteConflictReason::RcCheckTs,
    })
}

/// Whether `lock` on `key` blocks a snapshot-isolation read at `ts`, by the
/// rule of [`PointGetter`] (locks of transactions in `bypass_locks` never
/// do). For locks that are not in the lock CF, such as the in-memory locks
/// of prewrites in flight.
pub fn check_lock_blocks_read(
    lock: &Lock,
    key: &Key,
    ts: TimeStamp,
    bypass_locks: &TsSet,
) -> Result<()> {
    check_lock_blocks_read_at(lock, key, ts, IsolationLevel::Si, bypass_locks)
}

/// [`check_lock_blocks_read`] at `isolation_level`: at RcCheckTs a Put or
/// Delete lock not in `bypass_locks` fails the read with a `WriteConflict`
/// (reason RcCheckTs) whatever its ts; at RC nothing blocks.
pub fn check_lock_blocks_read_at(
    lock: &Lock,
    key: &Key,
    ts: TimeStamp,
    isolation_level: IsolationLevel,
    bypass_locks: &TsSet,
) -> Result<()> {
    let policy = LockPolicy {
        isolation_level,
        bypass_locks: bypass_locks.clone(),
        access_locks: TsSet::new(),
    };
    check_lock_conflict(lock.clone(), key, ts, &policy).map(|_| ())
}

/// At RcCheckTs, a Put or Delete committed above the read ts fails the read:
/// the caller must retry at a newer ts. Other levels never check.
pub(crate) fn check_rc_newer_write<S: percolate_engine::Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    ts: TimeStamp,
    level: IsolationLevel,
) -> Result<()> {
    if level != IsolationLevel::RcCheckTs {
        return Ok(());
    }
    match reader.seek_write(key, TimeStamp::max())? {
        Some((commit_ts, _)) if commit_ts > ts => Err(rc_check_ts_conflict(key, ts, commit_ts)),
        _ => Ok(()),
    }
}

/// The error of an RcCheckTs read at `ts` that met a record committed above
/// it (of any type, as TiKV counts them). As in TiKV, the record's start_ts
/// is not reported: `conflict_start_ts` is zero.
pub(crate) fn rc_check_ts_conflict(
    key: &Key,
    ts: TimeStamp,
    conflict_commit_ts: TimeStamp,
) -> Error {
    Error::WriteConflict {
        start_ts: ts,
        conflict_start_ts: TimeStamp::zero(),
        conflict_commit_ts,
        key: key.clone(),
        primary: Vec::new(),
        reason: crate::WriteConflictReason::RcCheckTs,
    }
}

/// The raw form of a key read from the lock CF.
fn raw_key_of(key: &Key) -> Result<Vec<u8>> {
    key.to_raw()
        .map_err(|e| Error::corruption(percolate_engine::Cf::Lock, key.as_encoded(), e))
}
