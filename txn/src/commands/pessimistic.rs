//! AcquirePessimisticLock and PessimisticRollback: the commands of a
//! pessimistic transaction before its prewrite.

use std::time::Duration;

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, TimeStamp};

use super::{WriteCommand, WriteContext, WriteResult, for_each_key, require_keys};
use crate::actions::ReleasedLock;
use crate::actions::acquire_pessimistic_lock::{
    PessimisticLockKeyResult, PessimisticLockOptions, acquire_pessimistic_lock,
};
use crate::actions::pessimistic_rollback::pessimistic_rollback;
use crate::{Error, Result};

/// Locks keys of a pessimistic transaction: all of them, or none.
///
/// Sent through [`Storage::write`](crate::storage::Storage::write) it runs
/// once and fails with `KeyIsLocked` on another transaction's lock;
/// through [`Storage::acquire_pessimistic_lock`](crate::storage::Storage::acquire_pessimistic_lock)
/// it waits for that lock up to `wait_timeout` first (see
/// [`LockWaits`](crate::storage::LockWaits)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquirePessimisticLock {
    /// The keys, each with whether it must not exist (an insert).
    pub keys: Vec<(Key, bool)>,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// The request's for_update_ts, primary, TTL and what to return.
    pub options: PessimisticLockOptions,
    /// How long to wait for another transaction's lock. `None`: do not
    /// wait.
    pub wait_timeout: Option<Duration>,
}

impl AcquirePessimisticLock {
    /// Locks `keys` for the transaction `start_ts` with the raw primary key
    /// `primary` at `for_update_ts`; lock TTL 3 s, nothing returned, no
    /// waiting.
    pub fn new(
        keys: Vec<Key>,
        primary: impl Into<Vec<u8>>,
        start_ts: TimeStamp,
        for_update_ts: TimeStamp,
    ) -> Self {
        AcquirePessimisticLock {
            keys: keys.into_iter().map(|key| (key, false)).collect(),
            start_ts,
            options: PessimisticLockOptions {
                primary: primary.into(),
                for_update_ts,
                lock_ttl: 3000,
                ..Default::default()
            },
            wait_timeout: None,
        }
    }

    /// Sets the lock TTL in milliseconds.
    #[must_use]
    pub fn lock_ttl(mut self, ttl_ms: u64) -> Self {
        self.options.lock_ttl = ttl_ms;
        self
    }

    /// Returns each key's value at for_update_ts.
    #[must_use]
    pub fn return_values(mut self) -> Self {
        self.options.return_value = true;
        self
    }

    /// Returns whether each key has a value at for_update_ts.
    #[must_use]
    pub fn check_existence(mut self) -> Self {
        self.options.check_existence = true;
        self
    }

    /// Locks the key even above a commit newer than for_update_ts,
    /// answering `LockedWithConflict` instead of failing with a
    /// `PessimisticRetry` write conflict; for a request of one key.
    #[must_use]
    pub fn allow_lock_with_conflict(mut self) -> Self {
        self.options.allow_lock_with_conflict = true;
        self
    }

    /// Waits up to `timeout` for another transaction's lock.
    #[must_use]
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.keys.is_empty() {
            return Err(Error::InvalidRequest {
                reason: "a pessimistic lock request needs at least one key",
                key: None,
            });
        }
        if self.options.primary.is_empty() {
            return Err(Error::InvalidRequest {
                reason: "a pessimistic lock request needs a primary key",
                key: None,
            });
        }
        // Refused before anything, as the action would (TiKV's D7): a
        // request that must wait for a lock first would otherwise wait
        // out its timeout to learn it.
        if self.options.lock_only_if_exists && !self.options.return_value {
            return Err(percolate_mvcc::Error::LockIfExistsFailed {
                start_ts: self.start_ts,
                key: self.keys[0].0.clone(),
            }
            .into());
        }
        if self.options.allow_lock_with_conflict && self.keys.len() > 1 {
            return Err(Error::InvalidRequest {
                reason: "a request locking with conflict holds one key",
                key: None,
            });
        }
        // (As `for_each_key` refuses it; checked here too, so that a
        // request that would wait first is refused before it waits.)
        if self.start_ts.is_zero() {
            return Err(Error::InvalidRequest {
                reason: "a transaction's start_ts cannot be zero",
                key: None,
            });
        }
        if crate::oracle::beyond_range(self.start_ts)
            || crate::oracle::beyond_range(self.options.for_update_ts)
        {
            return Err(Error::InvalidRequest {
                reason: "a start_ts or for_update_ts beyond the range of the timestamp oracle \
                         (such as TimeStamp::max())",
                key: None,
            });
        }
        // The conflict check relies on it: every record it looks for is at
        // or above the start_ts.
        if self.options.for_update_ts < self.start_ts {
            return Err(Error::InvalidRequest {
                reason: "a for_update_ts below the start_ts",
                key: None,
            });
        }
        Ok(())
    }
}

impl WriteCommand for AcquirePessimisticLock {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::AcquirePessimisticLock;

    /// One answer per key, in the order asked.
    type Output = Vec<PessimisticLockKeyResult>;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.iter().map(|(key, _)| key.clone()).collect()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        self.check()?;
        ctx.cm.check_limit(self.start_ts)?;
        ctx.cm.check_limit(self.options.for_update_ts)?;
        // A value read or an existence decided at for_update_ts is a read
        // there: an async-commit or 1PC transaction must commit above it.
        let reads = self.options.return_value
            || self.options.check_existence
            || self
                .keys
                .iter()
                .any(|(_, should_not_exist)| *should_not_exist);
        if reads {
            ctx.cm.update_max_ts(self.options.for_update_ts)?;
        }
        let options = self.options;
        let hints = ctx.cm.version_hints();
        let (txn, results) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            self.keys,
            |txn, reader, (key, insert)| {
                acquire_pessimistic_lock(txn, reader, key, insert, &options, Some(&*hints))
            },
        )?;
        Ok(WriteResult::new(txn, results))
    }
}

/// Removes the pessimistic locks of the transaction `start_ts` on `keys`
/// taken at or below `for_update_ts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PessimisticRollback {
    /// The keys.
    pub keys: Vec<Key>,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// Locks taken above it stay.
    pub for_update_ts: TimeStamp,
}

impl WriteCommand for PessimisticRollback {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::PessimisticRollback;

    /// The locks removed.
    type Output = Vec<ReleasedLock>;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        require_keys(&self.keys, "a pessimistic rollback needs at least one key")?;
        let for_update_ts = self.for_update_ts;
        let (txn, released) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            self.keys,
            |txn, reader, key| pessimistic_rollback(txn, reader, key, for_update_ts),
        )?;
        Ok(WriteResult::new(
            txn,
            released.into_iter().flatten().collect(),
        ))
    }
}
