//! Cleanup and rollback: undo the transaction on a key.
//!
//! Rolling back writes a Rollback record at `key@start_ts` (not just a lock
//! removal), so that a prewrite of the same transaction arriving late fails
//! instead of resurrecting it. Two flavours:
//!
//! * **protected**: kept forever (until GC). Used on primary keys and by
//!   resolvers (cleanup, check_txn_status): the primary's record is the
//!   transaction's fate and must never vanish.
//! * **non-protected**: on secondaries of a batch rollback. Only the newest
//!   one per key is kept: writing one deletes the previous (collapsing), so
//!   a key rolled back many times does not pile up records.

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, MvccReader, MvccTxn, TimeStamp};

use super::{
    MissingLockAction, ReleasedLock, TxnStatus, check_txn_status_missing_lock, is_expired,
    key_is_locked, rollback_lock,
};
use crate::Result;

/// Whether a cleanup's rollback record must survive collapsing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanupKind {
    /// KvCleanup: a resolver's rollback, always protected, never collapses.
    Cleanup,
    /// KvBatchRollback: the transaction's own rollback; protected only on
    /// the primary, collapses the previous non-protected rollback.
    Rollback,
}

/// Rolls back the acting transaction on `key`.
///
/// With a non-zero `current_ts`, a lock whose TTL has not run out at
/// `current_ts` is not touched: `KeyIsLocked`. A transaction already
/// committed on `key` gives `Committed`; one already rolled back is a no-op.
pub fn cleanup<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    current_ts: TimeStamp,
    kind: CleanupKind,
) -> Result<Option<ReleasedLock>> {
    let start_ts = txn.start_ts();
    match reader.load_lock(&key)? {
        Some(lock) if lock.ts == start_ts => {
            if !current_ts.is_zero() && !is_expired(&lock, current_ts) {
                return Err(key_is_locked(&key, lock));
            }
            rollback_lock(txn, reader, key, &lock, kind == CleanupKind::Rollback)
        }
        other => {
            let action = match kind {
                CleanupKind::Cleanup => MissingLockAction::ProtectedRollback,
                CleanupKind::Rollback => MissingLockAction::Rollback,
            };
            match check_txn_status_missing_lock(txn, reader, key.clone(), other, action, false)? {
                TxnStatus::Committed { commit_ts } => Err(percolate_mvcc::Error::Committed {
                    start_ts,
                    commit_ts,
                    key,
                }
                .into()),
                _ => Ok(None),
            }
        }
    }
}

/// KvBatchRollback of one key: [`cleanup`] without a TTL check.
pub fn rollback<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
) -> Result<Option<ReleasedLock>> {
    cleanup(txn, reader, key, TimeStamp::zero(), CleanupKind::Rollback)
}
