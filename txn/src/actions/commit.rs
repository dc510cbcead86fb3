//! Commit: turn the transaction's lock on a key into a commit record.
//!
//! The lock at `key` becomes a write record at `key@commit_ts` of the lock's
//! type (Put, Delete or Lock), carrying the short value; the lock goes. The
//! first key committed is the primary: once its record exists the whole
//! transaction is committed, and every secondary lock can be rolled forward
//! by anyone who finds it.

use percolate_engine::Snapshot;
use percolate_mvcc::{
    Key, LockType, MvccReader, MvccTxn, TimeStamp, TxnCommitRecord, Write, WriteType,
};

use super::{ReleasedLock, check_commit_ts, unlock};
use crate::Result;

/// Commits the acting transaction (`txn.start_ts()`) on `key` at
/// `commit_ts`.
///
/// * Idempotent: if the transaction already committed on `key`, at this or
///   any other commit_ts, nothing changes.
/// * A lock whose `min_commit_ts` is above `commit_ts` gives
///   `CommitTsExpired`.
/// * A bare pessimistic lock (never prewritten) is removed without a record.
/// * No lock and no commit record gives `TxnLockNotFound`.
pub fn commit<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    commit_ts: TimeStamp,
) -> Result<Option<ReleasedLock>> {
    let start_ts = txn.start_ts();
    check_commit_ts(start_ts, commit_ts)?;
    let lock = match reader.load_lock(&key)? {
        Some(lock) if lock.ts == start_ts => lock,
        _ => return already_committed(reader, key, start_ts, commit_ts),
    };
    if commit_ts < lock.min_commit_ts {
        return Err(percolate_mvcc::Error::CommitTsExpired {
            start_ts,
            commit_ts,
            key,
            min_commit_ts: lock.min_commit_ts,
        }
        .into());
    }
    let Some(write_type) = WriteType::from_lock_type(lock.lock_type) else {
        debug_assert_eq!(lock.lock_type, LockType::Pessimistic);
        // Committing a key that was locked but never prewritten: the key is
        // not part of the transaction's writes. Writing a Lock record here
        // could overwrite another transaction's record at commit_ts.
        return Ok(Some(unlock(txn, key, TimeStamp::zero())));
    };
    let mut write = Write::new(write_type, start_ts, lock.short_value)
        .set_last_change(lock.last_change)
        .set_txn_source(lock.txn_source);
    if lock.rollback_ts.contains(&commit_ts) {
        // Another transaction's protected rollback claimed this very ts.
        write = write.set_overlapped_rollback(true, None);
    }
    txn.put_commit(key.clone(), commit_ts, &write);
    Ok(Some(unlock(txn, key, commit_ts)))
}

/// The lock is gone: fine if the transaction's commit record is there.
fn already_committed<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: Key,
    start_ts: TimeStamp,
    commit_ts: TimeStamp,
) -> Result<Option<ReleasedLock>> {
    match reader.get_txn_commit_record(&key, start_ts)? {
        record @ TxnCommitRecord::SingleRecord { .. } if record.committed_ts().is_some() => {
            Ok(None)
        }
        _ => Err(percolate_mvcc::Error::TxnLockNotFound {
            start_ts,
            commit_ts,
            key,
        }
        .into()),
    }
}
