//! The commands of lock resolution: Cleanup, CheckTxnStatus,
//! CheckSecondaryLocks and ResolveLockLite.

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, Lock, LockInfo, TimeStamp};

use super::{WriteCommand, WriteContext, WriteResult, for_each_key, require_keys};
use crate::actions::check_secondary_locks::{SecondaryLockStatus, check_secondary_lock};
use crate::actions::check_txn_status::{CheckTxnStatusOptions, check_txn_status};
use crate::actions::cleanup::{CleanupKind, cleanup};
use crate::actions::resolve_lock::resolve_lock_key;
use crate::actions::{ReleasedLock, TxnStatus, raw_key};
use crate::{Error, Result};

/// Rolls back the transaction `start_ts` on `key` if its lock expired by
/// `current_ts` (zero: unconditionally). Raises `max_ts` to `start_ts`, so
/// no async-commit or 1PC transaction can later commit at `start_ts` over
/// the rollback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cleanup {
    /// The key.
    pub key: Key,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// Now, by the oracle; zero rolls back regardless of the TTL.
    pub current_ts: TimeStamp,
}

impl WriteCommand for Cleanup {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Cleanup;

    /// The lock removed, if there was one.
    type Output = Option<ReleasedLock>;

    fn latch_keys(&self) -> Vec<Key> {
        vec![self.key.clone()]
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        ctx.cm.update_max_ts(self.start_ts)?;
        let current_ts = self.current_ts;
        let (txn, mut released) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            vec![self.key],
            |txn, reader, key| cleanup(txn, reader, key, current_ts, CleanupKind::Cleanup),
        )?;
        Ok(WriteResult::new(txn, released.pop().flatten()))
    }
}

/// Checks the transaction `start_ts` on its primary key: rolls it back if
/// its lock expired, pushes its min_commit_ts above the caller's start_ts,
/// and reports its status. Raises `max_ts` to the largest of `start_ts`,
/// the caller's start_ts and `current_ts` (TiKV's rule, docs/BEHAVIOUR.md G15):
/// the caller has seen time up to `current_ts`, so no async-commit or 1PC
/// transaction may later commit at or below it unseen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTxnStatus {
    /// The transaction's primary key.
    pub primary: Key,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// The caller's view: see [`CheckTxnStatusOptions`].
    pub options: CheckTxnStatusOptions,
}

impl WriteCommand for CheckTxnStatus {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::CheckTxnStatus;

    /// The transaction's status.
    type Output = TxnStatus;

    fn latch_keys(&self) -> Vec<Key> {
        vec![self.primary.clone()]
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<TxnStatus>> {
        ctx.cm.update_max_ts(self.start_ts)?;
        ctx.cm.update_max_ts(self.options.caller_start_ts)?;
        ctx.cm.update_max_ts(self.options.current_ts)?;
        let options = self.options;
        let (txn, mut status) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            vec![self.primary],
            |txn, reader, key| {
                check_txn_status(txn, reader, key, &options).map(|(status, _)| status)
            },
        )?;
        let status = status.pop().expect("one key checked");
        Ok(WriteResult::new(txn, status))
    }
}

/// What the secondaries of an async-commit transaction say, together.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecondaryLocksStatus {
    /// Every key is still locked by the transaction: the locks. The
    /// transaction committed at the largest min_commit_ts of all its locks.
    Locked(Vec<LockInfo>),
    /// A key has the transaction's commit record at this ts.
    Committed(TimeStamp),
    /// A key was rolled back (or was never prewritten, and now never will
    /// be): the transaction is rolled back.
    RolledBack,
}

/// Checks the secondary keys of the async-commit transaction `start_ts`,
/// stopping at the first key that is not locked. A key found neither
/// locked nor committed gets a protected rollback. Raises `max_ts` to
/// `start_ts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckSecondaryLocks {
    /// The secondary keys.
    pub keys: Vec<Key>,
    /// The transaction.
    pub start_ts: TimeStamp,
}

impl WriteCommand for CheckSecondaryLocks {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::CheckSecondaryLocks;

    /// The combined status.
    type Output = SecondaryLocksStatus;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        require_keys(&self.keys, "check_secondary_locks needs at least one key")?;
        ctx.cm.update_max_ts(self.start_ts)?;
        let mut outcome = Some(Vec::new());
        let mut decided = None;
        let (txn, _) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            self.keys,
            |txn, reader, key| {
                if decided.is_some() {
                    return Ok(());
                }
                let raw = raw_key(&key)?;
                match check_secondary_lock(txn, reader, key)?.0 {
                    SecondaryLockStatus::Locked(lock) => {
                        if let Some(locks) = &mut outcome {
                            locks.push(lock.into_lock_info(raw));
                        }
                    }
                    SecondaryLockStatus::Committed(ts) => {
                        decided = Some(SecondaryLocksStatus::Committed(ts));
                        outcome = None;
                    }
                    SecondaryLockStatus::RolledBack => {
                        decided = Some(SecondaryLocksStatus::RolledBack);
                        outcome = None;
                    }
                }
                Ok(())
            },
        )?;
        let status = decided.unwrap_or_else(|| {
            SecondaryLocksStatus::Locked(outcome.expect("no key decided the transaction"))
        });
        Ok(WriteResult::new(txn, status))
    }
}

/// Resolves the given keys of the transaction `start_ts`: commits them at
/// `commit_ts`, or rolls them back when it is zero. The range form is
/// [`Storage::resolve_lock`](crate::storage::Storage::resolve_lock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveLockLite {
    /// Keys whose locks to resolve.
    pub keys: Vec<Key>,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// Its commit_ts, or zero to roll back.
    pub commit_ts: TimeStamp,
}

impl WriteCommand for ResolveLockLite {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::ResolveLockLite;

    /// The locks removed.
    type Output = Vec<ReleasedLock>;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        check_resolve_ts(self.start_ts, self.commit_ts)?;
        let commit_ts = self.commit_ts;
        let (txn, released) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            self.keys,
            |txn, reader, key| resolve_lock_key(txn, reader, key, commit_ts),
        )?;
        Ok(WriteResult::new(
            txn,
            released.into_iter().flatten().collect(),
        ))
    }
}

/// Resolves locks of the transaction `start_ts` found by a read without
/// latches (the read phase of
/// [`Storage::resolve_lock`](crate::storage::Storage::resolve_lock)): as
/// [`ResolveLockLite`], except that a pessimistic lock that disappeared
/// since it was read (its transaction rolled it back, or committed without
/// it) is skipped instead of failing the commit with `TxnLockNotFound`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveLock {
    /// The keys and the locks the read found on them.
    pub key_locks: Vec<(Key, Lock)>,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// Its commit_ts, or zero to roll back.
    pub commit_ts: TimeStamp,
}

impl WriteCommand for ResolveLock {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::ResolveLock;

    /// The locks removed.
    type Output = Vec<ReleasedLock>;

    fn latch_keys(&self) -> Vec<Key> {
        self.key_locks.iter().map(|(key, _)| key.clone()).collect()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        check_resolve_ts(self.start_ts, self.commit_ts)?;
        let commit_ts = self.commit_ts;
        let (keys, locks): (Vec<Key>, Vec<Lock>) = self.key_locks.into_iter().unzip();
        // `for_each_key` visits the keys in order.
        let mut locks = locks.into_iter();
        let (txn, released) =
            for_each_key(ctx.snapshot, self.start_ts, keys, |txn, reader, key| {
                let was_pessimistic = locks.next().is_some_and(|lock| lock.is_pessimistic_lock());
                match resolve_lock_key(txn, reader, key, commit_ts) {
                    Err(Error::Mvcc(percolate_mvcc::Error::TxnLockNotFound { .. }))
                        if was_pessimistic =>
                    {
                        Ok(None)
                    }
                    other => other,
                }
            })?;
        Ok(WriteResult::new(
            txn,
            released.into_iter().flatten().collect(),
        ))
    }
}

/// A resolve commits at `commit_ts` above `start_ts`, or rolls back (zero).
fn check_resolve_ts(start_ts: TimeStamp, commit_ts: TimeStamp) -> Result<()> {
    if commit_ts.is_zero() {
        return Ok(());
    }
    crate::actions::check_commit_ts(start_ts, commit_ts)
}
