//! Commit, BatchRollback, TxnHeartBeat and Gc.

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, LockType, TimeStamp};

use super::{
    WriteCommand, WriteContext, WriteResult, for_each_key, for_each_key_unchecked, require_keys,
};
use crate::Result;
use crate::actions::ReleasedLock;
use crate::actions::cleanup::rollback;
use crate::actions::commit::commit;
use crate::actions::gc::{GcInfo, gc};
use crate::actions::heart_beat::txn_heart_beat;

/// Commits the keys of the transaction `start_ts` at `commit_ts`: each
/// lock becomes a commit record. Committing the primary is the commit
/// point of a 2PC transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Keys to commit.
    pub keys: Vec<Key>,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// Its commit_ts; must be above `start_ts`.
    pub commit_ts: TimeStamp,
}

impl WriteCommand for Commit {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Commit;

    /// The locks removed (a key already committed releases none).
    type Output = Vec<ReleasedLock>;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        require_keys(&self.keys, "commit needs at least one key")?;
        let commit_ts = self.commit_ts;
        let (txn, released) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            self.keys,
            |txn, reader, key| commit(txn, reader, key, commit_ts),
        )?;
        Ok(WriteResult::new(
            txn,
            released.into_iter().flatten().collect(),
        ))
    }
}

/// Rolls back the keys of the transaction `start_ts`: locks removed,
/// Rollback records written (also where no lock was, so a late prewrite
/// fails). Fails with `Committed` if the transaction committed on a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchRollback {
    /// Keys to roll back.
    pub keys: Vec<Key>,
    /// The transaction.
    pub start_ts: TimeStamp,
}

impl WriteCommand for BatchRollback {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::BatchRollback;

    /// The locks removed.
    type Output = Vec<ReleasedLock>;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        require_keys(&self.keys, "rollback needs at least one key")?;
        let (txn, released) = for_each_key(ctx.snapshot, self.start_ts, self.keys, rollback)?;
        Ok(WriteResult::new(
            txn,
            released.into_iter().flatten().collect(),
        ))
    }
}

/// Removes the transaction's own locks from `keys` **without** writing
/// rollback records: the abort of a coordinator that gave up before its
/// commit point.
///
/// Only the transaction's own coordinator may send it, and only once every
/// one of its prewrites has answered: then no request of the transaction
/// is in flight that could lock a key again, and it will never commit, so
/// the records [`BatchRollback`] leaves (to stop a late prewrite) are not
/// needed. Leaving none matters: a rollback record at this start_ts is a
/// write conflict for every older transaction that prewrites the key
/// later, so an aborting transaction would take down the one it gave way
/// to. A key locked by another transaction, or not locked, is left alone.
/// Anyone else who finds the transaction's locks resolves them as usual.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unlock {
    /// Keys the transaction prewrote (or tried to).
    pub keys: Vec<Key>,
    /// The transaction.
    pub start_ts: TimeStamp,
}

impl WriteCommand for Unlock {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Unlock;

    /// The locks removed.
    type Output = Vec<ReleasedLock>;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        let start_ts = self.start_ts;
        let (txn, released) =
            for_each_key(ctx.snapshot, start_ts, self.keys, |txn, reader, key| {
                let Some(lock) = reader.load_lock(&key)? else {
                    return Ok(None);
                };
                if lock.ts != start_ts {
                    return Ok(None);
                }
                if lock.lock_type == LockType::Put && lock.short_value.is_none() {
                    txn.delete_value(key.clone(), start_ts);
                }
                txn.unlock_key(key.clone());
                Ok(Some(ReleasedLock {
                    key,
                    start_ts,
                    commit_ts: TimeStamp::zero(),
                }))
            })?;
        Ok(WriteResult::new(
            txn,
            released.into_iter().flatten().collect(),
        ))
    }
}

/// Extends the TTL of the transaction's primary lock to `advise_ttl` (never
/// shortens it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnHeartBeat {
    /// The primary key.
    pub primary: Key,
    /// The transaction.
    pub start_ts: TimeStamp,
    /// The TTL asked for, in milliseconds.
    pub advise_ttl: u64,
}

impl WriteCommand for TxnHeartBeat {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::TxnHeartBeat;

    /// The lock's TTL after the call.
    type Output = u64;

    fn latch_keys(&self) -> Vec<Key> {
        vec![self.primary.clone()]
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<u64>> {
        let advise_ttl = self.advise_ttl;
        let (txn, mut ttl) = for_each_key(
            ctx.snapshot,
            self.start_ts,
            vec![self.primary],
            |txn, reader, key| txn_heart_beat(txn, reader, key, advise_ttl),
        )?;
        Ok(WriteResult::new(txn, ttl.pop().unwrap_or_default()))
    }
}

/// Drops the versions of `keys` that no reader at or above `safe_point`
/// can see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gc {
    /// Keys to collect.
    pub keys: Vec<Key>,
    /// Every reader reads at or above it.
    pub safe_point: TimeStamp,
}

impl WriteCommand for Gc {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Gc;

    /// Totals over the keys.
    type Output = GcInfo;

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<GcInfo>> {
        let safe_point = self.safe_point;
        let (txn, infos) = for_each_key_unchecked(
            ctx.snapshot,
            TimeStamp::zero(),
            self.keys,
            |txn, reader, key| gc(txn, reader, key, safe_point),
        )?;
        let total = infos.iter().fold(GcInfo::default(), |mut total, info| {
            total.found_versions += info.found_versions;
            total.deleted_versions += info.deleted_versions;
            total.deleted_values += info.deleted_values;
            total
        });
        Ok(WriteResult::new(txn, total))
    }
}
