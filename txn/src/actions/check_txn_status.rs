//! CheckTxnStatus: decide a transaction's fate from its primary key.
//!
//! A reader blocked by a lock asks the lock's primary: committed (roll the
//! lock forward), rolled back or expired (roll it back), or still running
//! (wait, or read past it once its min_commit_ts was pushed above the
//! reader's start_ts).

use percolate_engine::Snapshot;
use percolate_mvcc::{
    Key, Lock, LockType, MvccReader, MvccTxn, TimeStamp, TxnCommitRecord, WriteType,
};

use super::{
    MissingLockAction, ReleasedLock, TxnStatus, check_txn_status_missing_lock, is_expired,
    is_primary, raw_key, rollback_lock, unlock,
};
use crate::Result;

/// The inputs of a status check, beyond the transaction (`txn.start_ts()`)
/// and its primary key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckTxnStatusOptions {
    /// The start_ts of the reader that asks: the lock's min_commit_ts is
    /// pushed above it so that the reader may go on. Zero: no push.
    pub caller_start_ts: TimeStamp,
    /// Now, by the oracle: the lock's TTL is judged against its physical
    /// part.
    pub current_ts: TimeStamp,
    /// Write a protected rollback if neither lock nor record is found
    /// (otherwise report `TxnNotFound`).
    pub rollback_if_not_exist: bool,
    /// Treat an async-commit lock like a 2PC one (roll it back if expired).
    pub force_sync_commit: bool,
    /// The caller resolves a pessimistic lock: a missing transaction is
    /// left alone.
    pub resolving_pessimistic_lock: bool,
    /// Fail with `PrimaryMismatch` if the key is not the lock's primary.
    pub verify_is_primary: bool,
}

/// Checks the status of the acting transaction on its primary key, rolling
/// it back if its lock expired and pushing its min_commit_ts for the caller.
pub fn check_txn_status<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    primary: Key,
    options: &CheckTxnStatusOptions,
) -> Result<(TxnStatus, Option<ReleasedLock>)> {
    let start_ts = txn.start_ts();
    let missing_action = if options.rollback_if_not_exist {
        MissingLockAction::ProtectedRollback
    } else {
        MissingLockAction::ReturnError
    };
    match reader.load_lock(&primary)? {
        Some(lock) if lock.ts == start_ts => {
            if options.verify_is_primary && !is_primary(&primary, &lock) {
                return wrong_primary(txn, reader, primary, lock, options, missing_action);
            }
            lock_exists(txn, reader, primary, lock, options)
        }
        other => {
            let status = check_txn_status_missing_lock(
                txn,
                reader,
                primary,
                other,
                missing_action,
                options.resolving_pessimistic_lock,
            )?;
            Ok((status, None))
        }
    }
}

/// The lock on `key` names another primary. A prewrite lock, or any lock
/// when resolving a pessimistic lock, is reported as `PrimaryMismatch`. A
/// stray pessimistic lock is removed and the key judged as if it were not
/// there.
fn wrong_primary<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    lock: Lock,
    options: &CheckTxnStatusOptions,
    missing_action: MissingLockAction,
) -> Result<(TxnStatus, Option<ReleasedLock>)> {
    if options.resolving_pessimistic_lock || lock.lock_type != LockType::Pessimistic {
        let info = lock.into_lock_info(raw_key(&key)?);
        return Err(percolate_mvcc::Error::PrimaryMismatch(Box::new(info)).into());
    }
    let status =
        check_txn_status_missing_lock(txn, reader, key.clone(), None, missing_action, false)?;
    let released = unlock(txn, key, TimeStamp::zero());
    Ok((status, Some(released)))
}

fn lock_exists<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    primary: Key,
    mut lock: Lock,
    options: &CheckTxnStatusOptions,
) -> Result<(TxnStatus, Option<ReleasedLock>)> {
    // An async-commit transaction may already count as committed while its
    // locks are still there; only ResolveLock (after checking every
    // secondary) may decide it.
    if lock.use_async_commit && !options.force_sync_commit {
        return Ok((uncommitted(lock, false), None));
    }
    if lock.is_pessimistic_lock() && lock.is_locked_with_conflict {
        // Taken despite a conflict, this lock may outlive its transaction:
        // its commit or rollback record decides, and the lock is stale.
        if let Some(status) = determined_status(reader, &primary, txn.start_ts())? {
            let released = unlock(txn, primary, TimeStamp::zero());
            return Ok((status, Some(released)));
        }
    }
    if is_expired(&lock, options.current_ts) {
        if options.resolving_pessimistic_lock && lock.lock_type == LockType::Pessimistic {
            let released = unlock(txn, primary, TimeStamp::zero());
            return Ok((TxnStatus::PessimisticRollBack, Some(released)));
        }
        let released = rollback_lock(txn, reader, primary, &lock, true)?;
        return Ok((TxnStatus::TtlExpire, released));
    }
    let caller = options.caller_start_ts;
    // A min_commit_ts of zero marks a client that computes its commit_ts
    // itself without this field: pushing it would block that commit.
    if !lock.min_commit_ts.is_zero() && !caller.is_max() && caller >= lock.min_commit_ts {
        lock.min_commit_ts = caller.next().max(options.current_ts);
        txn.put_lock(primary, &lock);
    }
    // A caller at u64::MAX (a point read without a timestamp) pushes
    // nothing, and may always read past the lock.
    let pushed = caller.is_max() || (!caller.is_zero() && lock.min_commit_ts > caller);
    Ok((uncommitted(lock, pushed), None))
}

/// The transaction's outcome if its commit or rollback record is on `key`.
fn determined_status<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    start_ts: TimeStamp,
) -> Result<Option<TxnStatus>> {
    Ok(match reader.get_txn_commit_record(key, start_ts)? {
        TxnCommitRecord::SingleRecord { commit_ts, write }
            if write.write_type != WriteType::Rollback =>
        {
            Some(TxnStatus::Committed { commit_ts })
        }
        TxnCommitRecord::SingleRecord { .. } | TxnCommitRecord::OverlappedRollback { .. } => {
            Some(TxnStatus::RolledBack)
        }
        TxnCommitRecord::None { .. } => None,
    })
}

fn uncommitted(lock: Lock, min_commit_ts_pushed: bool) -> TxnStatus {
    TxnStatus::Uncommitted {
        lock: Box::new(lock),
        min_commit_ts_pushed,
    }
}
