//! `PointGetter`: reads single keys at one timestamp.
//!
//! A point read at `ts` makes at most three engine lookups, usually one:
//!
//! 1. the lock CF, `key` (skipped at RC): does a pending transaction block
//!    the read? See [`check_lock_conflict`](super::check_lock_conflict);
//! 2. the write CF, a prefix seek to `key@ts`: the newest record at or below
//!    `ts`; Lock and Rollback records are stepped over;
//! 3. the default CF, `key@start_ts`, only when the value was too long to be
//!    inlined into the write record.

use percolate_engine::Snapshot;

use super::{
    IsolationLevel, LockDecision, LockPolicy, MvccReader, Statistics, TsSet, check_lock_conflict,
    check_rc_newer_write,
};
use crate::{Key, LockType, Result, TimeStamp, WriteType};

/// Builds a [`PointGetter`].
#[must_use]
pub struct PointGetterBuilder<S: Snapshot> {
    snapshot: S,
    ts: TimeStamp,
    policy: LockPolicy,
    fill_cache: bool,
    omit_value: bool,
}

impl<S: Snapshot> PointGetterBuilder<S> {
    /// A getter over `snapshot` reading at `ts`.
    pub fn new(snapshot: S, ts: TimeStamp) -> Self {
        PointGetterBuilder {
            snapshot,
            ts,
            policy: LockPolicy::default(),
            fill_cache: true,
            omit_value: false,
        }
    }

    /// Defaults to [`IsolationLevel::Si`].
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.policy.isolation_level = level;
        self
    }

    /// Transactions whose locks are ignored (the caller knows they cannot
    /// commit at or below the read ts). Defaults to none.
    pub fn bypass_locks(mut self, locks: TsSet) -> Self {
        self.policy.bypass_locks = locks;
        self
    }

    /// Transactions known to have committed: where one of their locks would
    /// block, its pending value is returned instead. Defaults to none.
    pub fn access_locks(mut self, locks: TsSet) -> Self {
        self.policy.access_locks = locks;
        self
    }

    /// Whether blocks read enter the block cache. Defaults to true.
    pub fn fill_cache(mut self, fill_cache: bool) -> Self {
        self.fill_cache = fill_cache;
        self
    }

    /// Returns an empty value instead of loading it: an existence check that
    /// never touches the default CF. Defaults to false.
    pub fn omit_value(mut self, omit_value: bool) -> Self {
        self.omit_value = omit_value;
        self
    }

    /// The getter.
    pub fn build(self) -> PointGetter<S> {
        PointGetter {
            reader: MvccReader::new(self.snapshot).fill_cache(self.fill_cache),
            ts: self.ts,
            policy: self.policy,
            omit_value: self.omit_value,
        }
    }
}

/// Reads single keys of one snapshot at one timestamp. Reuse it for many
/// keys: its write-CF cursor stays open between reads.
pub struct PointGetter<S: Snapshot> {
    reader: MvccReader<S>,
    ts: TimeStamp,
    policy: LockPolicy,
    omit_value: bool,
}

impl<S: Snapshot> PointGetter<S> {
    /// The value of `key` visible at the read ts, `None` if the key does not
    /// exist (never written, deleted, or fenced off by GC), or
    /// `KeyIsLocked` / `WriteConflict` as the isolation level says.
    pub fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        if self.policy.isolation_level != IsolationLevel::Rc {
            if let Some(lock) = self.reader.load_lock(key)? {
                match check_lock_conflict(lock, key, self.ts, &self.policy)? {
                    LockDecision::Ignore => {}
                    LockDecision::ReadLock(lock) => return self.read_from_lock(key, *lock),
                }
            }
        }
        self.read_committed(key)
    }

    /// Engine operations made so far.
    pub fn statistics(&self) -> &Statistics {
        self.reader.statistics()
    }

    /// The newest committed value at or below the read ts.
    fn read_committed(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        let ts = self.ts;
        check_rc_newer_write(&mut self.reader, key, ts, self.policy.isolation_level)?;
        let Some(write) = self.reader.get_write(key, ts, Some(ts))? else {
            return Ok(None);
        };
        if self.omit_value {
            return Ok(Some(Vec::new()));
        }
        debug_assert_eq!(write.write_type, WriteType::Put);
        self.reader.load_data(key, write).map(Some)
    }

    /// The pending value of an access lock: its transaction committed, so
    /// this is what the read must see.
    fn read_from_lock(&mut self, key: &Key, lock: crate::Lock) -> Result<Option<Vec<u8>>> {
        match lock.lock_type {
            LockType::Put if self.omit_value => Ok(Some(Vec::new())),
            LockType::Put => match lock.short_value {
                Some(value) => Ok(Some(value)),
                None => self.reader.load_long_value(key, lock.ts).map(Some),
            },
            LockType::Delete => Ok(None),
            // Lock and Pessimistic locks never block, so they are never read
            // through; fall back to committed data to stay correct.
            _ => self.read_committed(key),
        }
    }
}
