//! AcquirePessimisticLock: a pessimistic transaction locks a key before it
//! writes it.
//!
//! A pessimistic lock (lock type `S`) reserves the key for the
//! transaction: no other transaction can prewrite or lock it until it is
//! prewritten and committed, rolled back, or resolved. It does not block
//! readers, and it carries no value: the value comes with the pessimistic
//! prewrite that turns it into an ordinary lock.
//!
//! The transaction reads at its `for_update_ts` rather than its start_ts
//! (read committed for its locked keys): the lock is refused with a
//! `PessimisticRetry` write conflict when a commit newer than
//! `for_update_ts` exists, and the client retries the statement with a new
//! `for_update_ts` instead of the whole transaction.
//!
//! With `allow_lock_with_conflict` (TiKV's "fair locking") such a request
//! locks the key anyway, at the newer commit's ts, and answers
//! [`PessimisticLockKeyResult::LockedWithConflict`] with the value there: the
//! client reads the newest data under its lock in the same request instead
//! of a second one, the usual end of a wait for a lock whose owner then
//! committed. The lock is flagged `is_locked_with_conflict` until a later
//! request of the transaction raises it without a conflict.

use percolate_engine::Snapshot;
use percolate_mvcc::{
    Key, Lock, LockType, MvccReader, MvccTxn, TimeStamp, VersionHints, Write, WriteConflictReason,
    WriteType,
};

use super::key_is_locked;
use crate::Result;

/// What a pessimistic lock request asks for, besides its key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PessimisticLockOptions {
    /// The transaction's primary key, raw.
    pub primary: Vec<u8>,
    /// The ts the transaction reads its locked keys at; at or above its
    /// start_ts. A commit of the key newer than this is a conflict.
    pub for_update_ts: TimeStamp,
    /// Lock TTL in milliseconds; at most
    /// [`MAX_LOCK_TTL_MS`](super::MAX_LOCK_TTL_MS) is written.
    pub lock_ttl: u64,
    /// The smallest commit_ts the transaction will use (async commit).
    /// Zero when unset.
    pub min_commit_ts: TimeStamp,
    /// Return the key's value at `for_update_ts`.
    pub return_value: bool,
    /// Return whether the key has a value at `for_update_ts`.
    pub check_existence: bool,
    /// Lock the key only if it has a value; needs `return_value`.
    pub lock_only_if_exists: bool,
    /// Lock the key even above a commit newer than `for_update_ts`, at that
    /// commit's ts, instead of failing with a `PessimisticRetry` write
    /// conflict: the answer is then
    /// [`LockedWithConflict`](PessimisticLockKeyResult::LockedWithConflict).
    /// A request with it holds one key.
    pub allow_lock_with_conflict: bool,
}

/// What a pessimistic lock request answers for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PessimisticLockKeyResult {
    /// Locked; neither the value nor its existence was asked for.
    Empty,
    /// Locked (or, with `lock_only_if_exists` and no value, left alone):
    /// the value at `for_update_ts`, `None` when the key has none.
    Value(Option<Vec<u8>>),
    /// Locked: whether the key has a value at `for_update_ts`.
    Existence(bool),
    /// Locked although a commit newer than the request's `for_update_ts`
    /// exists (only with `allow_lock_with_conflict`): the lock's
    /// for_update_ts is `conflict_ts`, the newest commit's ts, and `value`
    /// the key's value there, whatever the request asked to return. The
    /// transaction reads the key at `conflict_ts`, and commits above it.
    /// No constraint (`should_not_exist`) was checked: the caller judges
    /// `value`. With `lock_only_if_exists` and no value, nothing was
    /// locked.
    LockedWithConflict {
        /// The key's value at `conflict_ts`; `None` when it has none.
        value: Option<Vec<u8>>,
        /// The commit_ts of the key's newest record, above the request's
        /// for_update_ts.
        conflict_ts: TimeStamp,
    },
}

impl PessimisticLockKeyResult {
    fn new(
        options: &PessimisticLockOptions,
        value: Option<Vec<u8>>,
        conflict_ts: Option<TimeStamp>,
    ) -> Self {
        if let Some(conflict_ts) = conflict_ts {
            PessimisticLockKeyResult::LockedWithConflict { value, conflict_ts }
        } else if options.return_value {
            PessimisticLockKeyResult::Value(value)
        } else if options.check_existence {
            PessimisticLockKeyResult::Existence(value.is_some())
        } else {
            PessimisticLockKeyResult::Empty
        }
    }
}

/// Locks `key` pessimistically for the transaction `txn.start_ts()`.
///
/// In order:
/// * `lock_only_if_exists` without `return_value` is refused
///   (`LockIfExistsFailed`);
/// * another transaction's lock: `KeyIsLocked` (the caller may wait for
///   it); this transaction's prewrite lock: `LockTypeNotMatch`; its own
///   pessimistic lock: a repeated request, whose `for_update_ts` raises the
///   lock's if larger (with `allow_lock_with_conflict`, a lock already
///   above the request's `for_update_ts` answers `LockedWithConflict` at
///   the lock's, as a repeat of the request that locked it so);
/// * a commit newer than `for_update_ts`: `WriteConflict` with reason
///   `PessimisticRetry`, naming the newest record; with
///   `allow_lock_with_conflict`, the key is locked at that commit's ts
///   (`LockedWithConflict`);
/// * the transaction's own rollback at its start_ts (a Rollback record or
///   a commit record marked overlapped): `PessimisticLockRolledBack`;
/// * `should_not_exist` (an insert) and a visible value: `AlreadyExist`
///   (not checked when locked with conflict).
pub fn acquire_pessimistic_lock<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    should_not_exist: bool,
    options: &PessimisticLockOptions,
    hints: Option<&dyn VersionHints>,
) -> Result<PessimisticLockKeyResult> {
    let start_ts = txn.start_ts();
    if options.lock_only_if_exists && !options.return_value {
        return Err(percolate_mvcc::Error::LockIfExistsFailed { start_ts, key }.into());
    }
    if let Some(lock) = reader.load_lock(&key)? {
        return lock_again(txn, reader, key, lock, should_not_exist, options);
    }
    let mut seen = Seen::default();
    if let Some(newest) = newest_record(reader, &key, start_ts, should_not_exist, options, hints)?
    {
        seen = check_newest_record(reader, &key, start_ts, newest, should_not_exist, options)?;
    }
    if options.lock_only_if_exists && seen.value.is_none() {
        return Ok(PessimisticLockKeyResult::new(options, None, seen.conflict_ts));
    }
    let mut lock = Lock::new(
        LockType::Pessimistic,
        options.primary.clone(),
        start_ts,
        super::clamp_ttl(options.lock_ttl),
    );
    lock.for_update_ts = seen.conflict_ts.unwrap_or(options.for_update_ts);
    lock.min_commit_ts = options.min_commit_ts;
    lock.is_locked_with_conflict = seen.conflict_ts.is_some();
    txn.put_lock(key, &lock);
    Ok(PessimisticLockKeyResult::new(
        options,
        seen.value,
        seen.conflict_ts,
    ))
}

/// What the checks of an unlocked key found: the value asked for (always,
/// when locked with conflict), and the ts of a newer commit locked over.
#[derive(Default)]
struct Seen {
    value: Option<Vec<u8>>,
    conflict_ts: Option<TimeStamp>,
}

/// The request meets `lock` on its key: another transaction's lock is
/// `KeyIsLocked`, this transaction's prewrite lock `LockTypeNotMatch`, and
/// its own pessimistic lock makes the request a repeat, whose
/// `for_update_ts` raises the lock's if larger. With
/// `allow_lock_with_conflict`, a lock above the request's `for_update_ts`
/// is what an earlier request locking with conflict left (whose answer may
/// have been lost): it answers the same, `LockedWithConflict` at the
/// lock's for_update_ts.
fn lock_again<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    lock: Lock,
    should_not_exist: bool,
    options: &PessimisticLockOptions,
) -> Result<PessimisticLockKeyResult> {
    let start_ts = txn.start_ts();
    if lock.ts != start_ts {
        return Err(key_is_locked(&key, lock));
    }
    if !lock.is_pessimistic_lock() {
        return Err(percolate_mvcc::Error::LockTypeNotMatch {
            start_ts,
            key,
            pessimistic: false,
        }
        .into());
    }
    let conflict_ts = (options.allow_lock_with_conflict
        && options.for_update_ts < lock.for_update_ts)
        .then_some(lock.for_update_ts);
    let for_update_ts = conflict_ts.unwrap_or(options.for_update_ts);
    if should_not_exist && conflict_ts.is_none() {
        check_not_exists(reader, &key, for_update_ts)?;
    }
    let value = if options.return_value || options.check_existence || conflict_ts.is_some() {
        let load = options.return_value || conflict_ts.is_some();
        value_at(reader, &key, for_update_ts, load)?
    } else {
        None
    };
    // A lock naming another primary was left by a statement of this
    // transaction that gave its keys back and whose release failed: the
    // request takes it over for the primary it names now (a resolver
    // judging the lock by its old primary would find that key no primary
    // of the transaction, and roll the lock back as stale).
    let new_primary = lock.primary != options.primary;
    if for_update_ts > lock.for_update_ts || new_primary {
        let raised = for_update_ts > lock.for_update_ts;
        let taken = Lock {
            primary: options.primary.clone(),
            for_update_ts: for_update_ts.max(lock.for_update_ts),
            ttl: super::clamp_ttl(options.lock_ttl),
            min_commit_ts: options.min_commit_ts,
            is_locked_with_conflict: lock.is_locked_with_conflict && !raised,
            ..lock
        };
        txn.put_lock(key, &taken);
    }
    Ok(PessimisticLockKeyResult::new(options, value, conflict_ts))
}

/// The key's newest record, for the checks of an unlocked key, or `None`
/// where they need none.
///
/// Every record the checks look for (a commit newer than for_update_ts,
/// this transaction's own rollback) has a commit_ts at or above the
/// start_ts: where the engine's ts ceiling of the key is below it, there
/// is none, and only a request that wants the value reads. A request that
/// wants the value and finds no record at or above its start_ts needs only
/// the key's newest data version: from the version hints (`reader` reads
/// the latest data), with no seek, when they have it. Records above it (a
/// Lock, a Rollback) are below the start_ts and change nothing here but
/// which version the value comes from, and the checks step over them to
/// that same version (a data version with a GC fence is left to the seek,
/// which judges the fence where it finds the version). A key written
/// since the start_ts (a hot one) needs its newest record of any type:
/// the hinted data version is that record where the engine's ts ceiling
/// of the key is not above it, and only otherwise does the request seek.
fn newest_record<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    start_ts: TimeStamp,
    should_not_exist: bool,
    options: &PessimisticLockOptions,
    hints: Option<&dyn VersionHints>,
) -> Result<Option<(TimeStamp, Write)>> {
    let wants_value = options.return_value || options.check_existence;
    let unwritten = !should_not_exist && reader.no_write_since(key, start_ts);
    let hinted = match hints {
        Some(hints) if unwritten && wants_value => reader
            .hinted_data_version(key, start_ts, hints)?
            .filter(|(_, write)| write.gc_fence.is_none()),
        // Written since the start_ts (a hot key): the newest record, of
        // any type, is the one the checks need, and the hints know it
        // where nothing in the key's bucket is newer than its data
        // version.
        Some(hints) if !unwritten && !should_not_exist => reader
            .hinted_newest_record(key, hints)?
            .filter(|(_, write)| write.gc_fence.is_none()),
        _ => None,
    };
    if hinted.is_some() {
        Ok(hinted)
    } else if unwritten && !wants_value {
        Ok(None)
    } else {
        Ok(reader.seek_write(key, TimeStamp::max())?)
    }
}

/// Checks an unlocked key's newest record (at `commit_ts`): a commit newer
/// than `for_update_ts` is a `PessimisticRetry` write conflict (or, with
/// `allow_lock_with_conflict`, the ts to lock at), this transaction's own
/// rollback `PessimisticLockRolledBack`, and a visible value of an insert
/// `AlreadyExist`. Returns the value the request asks for.
fn check_newest_record<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    start_ts: TimeStamp,
    (commit_ts, write): (TimeStamp, Write),
    should_not_exist: bool,
    options: &PessimisticLockOptions,
) -> Result<Seen> {
    let mut conflict_ts = None;
    if commit_ts > options.for_update_ts {
        if !options.allow_lock_with_conflict {
            return Err(percolate_mvcc::Error::WriteConflict {
                start_ts,
                conflict_start_ts: write.start_ts,
                conflict_commit_ts: commit_ts,
                key: key.clone(),
                primary: options.primary.clone(),
                reason: WriteConflictReason::PessimisticRetry,
            }
            .into());
        }
        conflict_ts = Some(commit_ts);
    }
    if is_own_rollback(start_ts, commit_ts, &write) {
        return Err(rolled_back(start_ts, key.clone()));
    }
    // Records newer than the start_ts may hide the rollback below them.
    // Only a record at exactly the start_ts can say so: a point get, not
    // a seek.
    if commit_ts > start_ts {
        if let Some(older) = reader.write_at(key, start_ts)? {
            if is_own_rollback(start_ts, start_ts, &older) {
                return Err(rolled_back(start_ts, key.clone()));
            }
        }
    }
    // Locked with conflict, the caller reads the value and judges it.
    if should_not_exist && conflict_ts.is_none() {
        check_not_exists(reader, key, commit_ts)?;
    }
    let load = options.return_value || conflict_ts.is_some();
    let value = if load || options.check_existence {
        visible_value(reader, key, start_ts, commit_ts, write, load)?
    } else {
        None
    };
    Ok(Seen { value, conflict_ts })
}

/// Whether the record at `commit_ts` says the transaction `start_ts` was
/// rolled back on its key.
fn is_own_rollback(start_ts: TimeStamp, commit_ts: TimeStamp, write: &Write) -> bool {
    commit_ts == start_ts
        && (write.write_type == WriteType::Rollback || write.has_overlapped_rollback)
}

fn rolled_back(start_ts: TimeStamp, key: Key) -> crate::Error {
    percolate_mvcc::Error::PessimisticLockRolledBack { start_ts, key }.into()
}

/// The value (or, without `load`, an empty marker) visible at `commit_ts`
/// given the newest record `write` there, for the transaction `start_ts`: a Put answers itself, a Delete
/// says none, a Lock or Rollback sends the read further down.
fn visible_value<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    start_ts: TimeStamp,
    commit_ts: TimeStamp,
    write: Write,
    load: bool,
) -> Result<Option<Vec<u8>>> {
    match write.write_type {
        WriteType::Put if write.as_ref().check_gc_fence_as_latest_version(start_ts) => {
            if load {
                Ok(Some(reader.load_data(key, write)?))
            } else {
                Ok(Some(Vec::new()))
            }
        }
        WriteType::Put | WriteType::Delete => Ok(None),
        // A Lock or a Rollback: the value is below it.
        _ if commit_ts.is_zero() => Ok(None),
        _ => value_at(reader, key, commit_ts.prev(), load),
    }
}

/// The value of `key` visible at `ts` (an empty marker without `load`).
fn value_at<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    ts: TimeStamp,
    load: bool,
) -> Result<Option<Vec<u8>>> {
    match reader.get_write(key, ts, Some(ts))? {
        Some(write) if load => Ok(Some(reader.load_data(key, write)?)),
        Some(_) => Ok(Some(Vec::new())),
        None => Ok(None),
    }
}

/// `AlreadyExist`, naming the Put's start_ts, if `key` has a value at `ts`.
fn check_not_exists<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    ts: TimeStamp,
) -> Result<()> {
    match reader.get_write(key, ts, Some(ts))? {
        Some(put) => Err(percolate_mvcc::Error::AlreadyExist {
            key: key.clone(),
            existing_start_ts: put.start_ts,
        }
        .into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use percolate_engine::Engine;
    use percolate_mvcc::{MvccReader, MvccTxn};

    use super::*;

    use crate::testing::TxnFixture;

    /// Locks `k` for `start_ts` at `for_update_ts` over a fresh reader of
    /// the latest data; returns the outcome and the write-CF reads made.
    fn lock_counting_reads<E: Engine>(
        f: &TxnFixture<E>,
        k: &[u8],
        start_ts: u64,
        for_update_ts: u64,
        should_not_exist: bool,
    ) -> (Result<PessimisticLockKeyResult>, usize) {
        let options = TxnFixture::<E>::lock_options(k, for_update_ts);
        let mut txn = MvccTxn::new(TimeStamp::new(start_ts));
        let mut reader = MvccReader::new(f.engine().latest());
        let outcome = acquire_pessimistic_lock(
            &mut txn,
            &mut reader,
            Key::from_raw(k),
            should_not_exist,
            &options,
            None,
        );
        (outcome, reader.statistics().write.total())
    }

    /// The conflict check reads nothing where the engine's ts ceiling of
    /// the key is below the start_ts, and still finds a newer commit or an
    /// own rollback (both at or above the start_ts) where it is not; a
    /// request that must see the data reads it whatever the ceiling says.
    fn conflict_check_reads_only_below_the_ceiling<E: Engine>(engine: E) {
        let f = TxnFixture::new(engine);
        let k = b"k";
        f.must_prewrite_put(k, b"old", k, 10);
        f.must_commit(k, 10, 20);

        let (outcome, reads) = lock_counting_reads(&f, k, 30, 30, false);
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(reads, 0, "every record is older than 30");

        let (outcome, reads) = lock_counting_reads(&f, k, 15, 15, false);
        assert!(
            matches!(
                mvcc_error(&outcome),
                percolate_mvcc::Error::WriteConflict {
                    reason: WriteConflictReason::PessimisticRetry,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert!(reads > 0);

        // A rollback record sits at the start_ts itself.
        f.must_rollback(b"r", 40);
        let (outcome, _) = lock_counting_reads(&f, b"r", 40, 40, false);
        assert!(
            matches!(
                mvcc_error(&outcome),
                percolate_mvcc::Error::PessimisticLockRolledBack { .. }
            ),
            "{outcome:?}"
        );

        // should_not_exist must see the value, ceiling or not.
        let (outcome, reads) = lock_counting_reads(&f, k, 30, 30, true);
        assert!(
            matches!(
                mvcc_error(&outcome),
                percolate_mvcc::Error::AlreadyExist { .. }
            ),
            "{outcome:?}"
        );
        assert!(reads > 0);
    }

    /// A request for the value of a key with no record at or above its
    /// start_ts takes the key's newest data version from the version hints:
    /// with the hint's record, no write-CF read at all; without it, one
    /// point get and no seek. The value is the one a seek gives, after a
    /// Delete too.
    fn value_requests_take_the_hinted_version<E: Engine>(engine: E) {
        let f = TxnFixture::new(engine);
        let hints = crate::versions::VersionCache::default();
        let k = Key::from_raw(b"k");
        let commit = |start: u64, commit: u64, value: Option<&[u8]>, record: bool| {
            match value {
                Some(v) => f.must_prewrite_put(b"k", v, b"k", start),
                None => f.must_prewrite_delete(b"k", b"k", start),
            }
            f.must_commit(b"k", start, commit);
            let write = match value {
                Some(v) => Write::new(WriteType::Put, TimeStamp::new(start), Some(v.to_vec())),
                None => Write::new(WriteType::Delete, TimeStamp::new(start), None),
            };
            let bytes = if record { write.to_bytes() } else { Vec::new() };
            let epoch = f.engine().write_epoch(k.as_encoded());
            hints.record(&k, TimeStamp::new(commit), &bytes, epoch);
        };
        let lock = |start_ts: u64| {
            let mut options = TxnFixture::<E>::lock_options(b"k", start_ts);
            options.return_value = true;
            let mut txn = MvccTxn::new(TimeStamp::new(start_ts));
            let mut reader = MvccReader::new(f.engine().latest());
            let outcome = acquire_pessimistic_lock(
                &mut txn,
                &mut reader,
                k.clone(),
                false,
                &options,
                Some(&hints),
            )
            .unwrap();
            let stats = &reader.statistics().write;
            (outcome, stats.get, stats.total() - stats.get)
        };
        let value = |v: &[u8]| PessimisticLockKeyResult::Value(Some(v.to_vec()));
        commit(10, 11, Some(b"v1"), true);
        assert_eq!(lock(20), (value(b"v1"), 0, 0));
        commit(30, 31, Some(b"v2"), false);
        assert_eq!(lock(40), (value(b"v2"), 1, 0));
        // The record it read is kept: the next request reads nothing.
        assert_eq!(lock(41), (value(b"v2"), 0, 0));
        // A Rollback record above the data, written past the hints, moves
        // the key's write epoch: the request seeks, and steps over it.
        f.must_rollback(b"k", 50);
        let (outcome, _, seeks) = lock(60);
        assert_eq!(outcome, value(b"v2"));
        assert!(seeks > 0);
        commit(70, 71, None, true);
        assert_eq!(lock(80), (PessimisticLockKeyResult::Value(None), 0, 0));
        // Where a record is at or above the start_ts (a key written since),
        // the hinted version is still the newest record while nothing in
        // the key's bucket is newer: its value, with one point get (for a
        // rollback of its own at the start_ts) and no seek.
        commit(90, 91, Some(b"v3"), true);
        let lock_at = |start_ts: u64, for_update_ts: u64| {
            let mut options = TxnFixture::<E>::lock_options(b"k", for_update_ts);
            options.return_value = true;
            let mut reader = MvccReader::new(f.engine().latest());
            let outcome = acquire_pessimistic_lock(
                &mut MvccTxn::new(TimeStamp::new(start_ts)),
                &mut reader,
                k.clone(),
                false,
                &options,
                Some(&hints),
            );
            let stats = &reader.statistics().write;
            (outcome, stats.get, stats.total() - stats.get)
        };
        let (outcome, gets, seeks) = lock_at(85, 95);
        assert_eq!(outcome.unwrap(), value(b"v3"));
        assert_eq!((gets, seeks), (1, 0));
        // A hint recorded after a newer record was written (a commit at
        // 101 whose batch applied after a Rollback record at 150) has the
        // key's current epoch, but the ceiling is above it: the request
        // seeks, and the Rollback record above its for_update_ts is a
        // conflict.
        f.must_rollback(b"k", 150);
        let epoch = f.engine().write_epoch(k.as_encoded());
        let put = Write::new(WriteType::Put, TimeStamp::new(90), Some(b"v3".to_vec()));
        hints.record(&k, TimeStamp::new(91), &put.to_bytes(), epoch);
        let (outcome, _, seeks) = lock_at(120, 140);
        assert!(
            matches!(
                mvcc_error(&outcome),
                percolate_mvcc::Error::WriteConflict {
                    conflict_commit_ts,
                    reason: WriteConflictReason::PessimisticRetry,
                    ..
                } if *conflict_commit_ts == TimeStamp::new(150)
            ),
            "{outcome:?}"
        );
        assert!(seeks > 0);
        // And this transaction's own rollback there is found.
        let (outcome, _, _) = lock_at(150, 160);
        assert!(
            matches!(
                mvcc_error(&outcome),
                percolate_mvcc::Error::PessimisticLockRolledBack { .. }
            ),
            "{outcome:?}"
        );
    }

    /// The MVCC error a request failed with; panics, showing the outcome,
    /// on any other.
    fn mvcc_error(outcome: &Result<PessimisticLockKeyResult>) -> &percolate_mvcc::Error {
        match outcome {
            Err(crate::Error::Mvcc(e)) => e,
            other => panic!("expected an MVCC error, got {other:?}"),
        }
    }

    crate::testing::on_both_engines! {
        conflict_check_reads_only_below_the_ceiling => conflict_check_reads_only_below_the_ceiling;
        value_requests_take_the_hinted_version => value_requests_take_the_hinted_version;
    }
}
