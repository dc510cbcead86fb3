//! CheckSecondaryLocks: the fate of an async-commit transaction.
//!
//! An async-commit transaction counts as committed as soon as every key is
//! prewritten, before any commit record exists. A resolver therefore asks
//! every secondary: if all are still locked, it commits the transaction at
//! the largest min_commit_ts; if any was rolled back or never prewritten
//! (this check then writes a protected rollback so it never will be), the
//! transaction is rolled back.

use percolate_engine::Snapshot;
use percolate_mvcc::{
    Key, Lock, LockType, MvccReader, MvccTxn, RollbackProtection, TimeStamp, TxnCommitRecord,
    WriteType,
};

use super::{ReleasedLock, make_rollback, mark_rollback_on_mismatching_lock, unlock};
use crate::Result;

/// What one secondary key says about the transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecondaryLockStatus {
    /// Still prewritten: its lock.
    Locked(Box<Lock>),
    /// Committed at this ts.
    Committed(TimeStamp),
    /// Rolled back (now or before).
    RolledBack,
}

/// Checks the acting transaction's lock on the secondary `key`, rolling the
/// transaction back on `key` (protected) if neither lock nor record is
/// there.
pub fn check_secondary_lock<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
) -> Result<(SecondaryLockStatus, Option<ReleasedLock>)> {
    let start_ts = txn.start_ts();
    let mut released = None;
    let mismatch_lock = match reader.load_lock(&key)? {
        Some(lock) if lock.ts == start_ts && lock.lock_type != LockType::Pessimistic => {
            return Ok((SecondaryLockStatus::Locked(Box::new(lock)), None));
        }
        Some(lock) if lock.ts == start_ts => {
            // A pessimistic lock that was never prewritten: the prewrite did
            // not happen, so the transaction cannot have committed.
            released = Some(unlock(txn, key.clone(), TimeStamp::zero()));
            None
        }
        other => other,
    };
    let overlapped_write = match reader.get_txn_commit_record(&key, start_ts)? {
        TxnCommitRecord::SingleRecord { commit_ts, write }
            if write.write_type != WriteType::Rollback =>
        {
            return Ok((SecondaryLockStatus::Committed(commit_ts), released));
        }
        TxnCommitRecord::None { overlapped_write } => overlapped_write,
        _ => return Ok((SecondaryLockStatus::RolledBack, released)),
    };
    if let (Some(lock), None) = (mismatch_lock, overlapped_write.as_ref()) {
        mark_rollback_on_mismatching_lock(txn, &key, lock, RollbackProtection::Protected);
    }
    if let Some(write) = make_rollback(start_ts, RollbackProtection::Protected, overlapped_write) {
        txn.put_write(key, start_ts, &write);
    }
    Ok((SecondaryLockStatus::RolledBack, released))
}
