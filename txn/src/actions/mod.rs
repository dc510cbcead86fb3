//! Transaction actions: one Percolator step on one key.
//!
//! Every action has the same shape: it reads one snapshot through an
//! [`MvccReader`], decides, and records what it would change in an
//! [`MvccTxn`] (whose `start_ts` names the transaction acting). It never
//! writes: the caller writes the buffer atomically, with the keys latched so
//! that no other command changes them in between. An action that fails
//! leaves nothing to write for its key.
//!
//! The shared pieces of rollback live here, because four actions roll back:
//! cleanup, batch rollback, check_txn_status (on an expired lock) and
//! check_secondary_locks.

pub mod acquire_pessimistic_lock;
pub mod check_secondary_locks;
pub mod check_txn_status;
pub mod cleanup;
pub mod commit;
pub mod gc;
pub mod heart_beat;
pub mod mvcc_by_key;
pub mod pessimistic_rollback;
pub mod prewrite;
pub mod resolve_lock;
pub mod scan_lock;

use percolate_engine::Snapshot;
use percolate_mvcc::reader::OverlappedWrite;
use percolate_mvcc::{
    Key, Lock, LockType, MvccReader, MvccTxn, RollbackProtection, TimeStamp, TxnCommitRecord,
    Write, WriteType,
};

use crate::Result;

/// The raw form of `key`, for errors and lock infos.
pub(crate) fn raw_key(key: &Key) -> Result<Vec<u8>> {
    key.to_raw().map_err(|e| {
        percolate_mvcc::Error::corruption(percolate_engine::Cf::Lock, key.as_encoded(), e).into()
    })
}

/// Whether `key` is the primary named by `lock`.
pub(crate) fn is_primary(key: &Key, lock: &Lock) -> bool {
    key.is_encoded_from(&lock.primary)
}

/// The longest TTL a lock can hold, in milliseconds: one hour, TiDB's
/// default `max-txn-ttl`. A lock's TTL counts from its start_ts, so a
/// heart beat can keep a transaction alive for at most an hour after it
/// began; after that, any reader that meets its locks may roll it back.
///
/// Prewrite, pessimistic locks and heart beats clamp the TTL they write to
/// this, and an expiry check reads a larger TTL found on disk (written by
/// another program) as this one, so no lock can block a key (or GC) for
/// longer, whatever a request asked for.
pub const MAX_LOCK_TTL_MS: u64 = 60 * 60 * 1000;

/// `ttl` clamped to [`MAX_LOCK_TTL_MS`].
pub(crate) fn clamp_ttl(ttl: u64) -> u64 {
    ttl.min(MAX_LOCK_TTL_MS)
}

/// Whether `lock`'s TTL has run out at `current_ts`. TTLs are milliseconds
/// and compare with the physical parts only; a TTL above
/// [`MAX_LOCK_TTL_MS`] counts as that.
pub fn is_expired(lock: &Lock, current_ts: TimeStamp) -> bool {
    ttl_ran_out(lock.ts, lock.ttl, current_ts)
}

/// Whether a TTL of `ttl` ms from the lock of `lock_ts` has run out at
/// `current_ts`, as [`is_expired`] judges it (for the `LockInfo` a client
/// holds).
pub(crate) fn ttl_ran_out(lock_ts: TimeStamp, ttl: u64, current_ts: TimeStamp) -> bool {
    lock_ts.physical().saturating_add(clamp_ttl(ttl)) < current_ts.physical()
}

/// The `KeyIsLocked` error for `lock` on `key`.
pub(crate) fn key_is_locked(key: &Key, lock: Lock) -> crate::Error {
    match raw_key(key) {
        Ok(raw) => percolate_mvcc::Error::KeyIsLocked(Box::new(lock.into_lock_info(raw))).into(),
        Err(e) => e,
    }
}

/// The state of a transaction as seen from its primary key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxnStatus {
    /// The lock was there but expired; it was rolled back now.
    TtlExpire,
    /// No lock and no record: a rollback record was written now so that a
    /// late prewrite fails.
    LockNotExist,
    /// No lock and no record, and nothing was written (a resolver of a
    /// pessimistic lock asked).
    LockNotExistDoNothing,
    /// The transaction was rolled back before.
    RolledBack,
    /// A resolver of a pessimistic lock found the primary's pessimistic
    /// lock expired and removed it (no rollback record).
    PessimisticRollBack,
    /// The transaction committed at `commit_ts`.
    Committed {
        /// Its commit_ts.
        commit_ts: TimeStamp,
    },
    /// The transaction is still running: its lock, after any push of
    /// min_commit_ts.
    Uncommitted {
        /// The primary lock as it is now.
        lock: Box<Lock>,
        /// Whether the lock's min_commit_ts is above the caller's start_ts,
        /// so the caller may read past this transaction's locks.
        min_commit_ts_pushed: bool,
    },
}

/// A lock removed by an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleasedLock {
    /// The key.
    pub key: Key,
    /// The start_ts of the lock's transaction.
    pub start_ts: TimeStamp,
    /// The commit_ts, zero when the lock was rolled back.
    pub commit_ts: TimeStamp,
}

/// What to do when the lock of the transaction is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MissingLockAction {
    /// Write a non-protected rollback, collapsing the previous one.
    Rollback,
    /// Write a protected rollback.
    ProtectedRollback,
    /// Report `TxnNotFound`.
    ReturnError,
}

impl MissingLockAction {
    fn protection(self) -> RollbackProtection {
        match self {
            MissingLockAction::ProtectedRollback => RollbackProtection::Protected,
            _ => RollbackProtection::Unprotected,
        }
    }
}

/// Removes `key`'s lock and reports it released.
pub(crate) fn unlock(txn: &mut MvccTxn, key: Key, commit_ts: TimeStamp) -> ReleasedLock {
    let start_ts = txn.start_ts();
    txn.unlock_key(key.clone());
    ReleasedLock {
        key,
        start_ts,
        commit_ts,
    }
}

/// The record a rollback of `start_ts` leaves: a Rollback record, or, when
/// another transaction committed at exactly `start_ts`, that commit record
/// marked as overlapped (only for a protected rollback: a non-protected one
/// leaves the record alone and writes nothing).
pub(crate) fn make_rollback(
    start_ts: TimeStamp,
    protection: RollbackProtection,
    overlapped_write: Option<OverlappedWrite>,
) -> Option<Write> {
    match overlapped_write {
        Some(OverlappedWrite { write, gc_fence }) => {
            // (A record claiming a start_ts above its commit_ts is
            // refused as corrupt by the reader that found it.)
            (protection == RollbackProtection::Protected)
                .then(|| write.set_overlapped_rollback(true, Some(gc_fence)))
        }
        None => Some(Write::new_rollback(start_ts, protection)),
    }
}

/// Deletes the newest record of `key` at or below the acting start_ts if it
/// is a non-protected Rollback: only one such record per key is kept.
pub(crate) fn collapse_prev_rollback<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: &Key,
) -> Result<()> {
    if let Some((commit_ts, write)) = reader.seek_write(key, txn.start_ts())? {
        if write.write_type == WriteType::Rollback && !write.is_protected() {
            txn.delete_write(key.clone(), commit_ts);
        }
    }
    Ok(())
}

/// Marks an async-commit lock of another transaction with a protected
/// rollback of the acting start_ts, when that start_ts is at or above the
/// lock's min_commit_ts: the other transaction might otherwise commit at
/// exactly this ts and overwrite the rollback record.
pub(crate) fn mark_rollback_on_mismatching_lock(
    txn: &mut MvccTxn,
    key: &Key,
    mut lock: Lock,
    protection: RollbackProtection,
) {
    debug_assert_ne!(lock.ts, txn.start_ts(), "the lock must be another txn's");
    if protection != RollbackProtection::Protected
        || !lock.use_async_commit
        || txn.start_ts() < lock.min_commit_ts
    {
        return;
    }
    lock.rollback_ts.push(txn.start_ts());
    txn.put_lock(key.clone(), &lock);
}

/// Rolls back the acting transaction's own `lock` on `key`: removes the
/// lock and its long value, writes a Rollback record (protected on the
/// primary key) and, if asked, collapses the previous non-protected
/// rollback.
pub(crate) fn rollback_lock<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    lock: &Lock,
    collapse: bool,
) -> Result<Option<ReleasedLock>> {
    let start_ts = txn.start_ts();
    let overlapped_write = match reader.get_txn_commit_record(&key, start_ts)? {
        TxnCommitRecord::None { overlapped_write } => overlapped_write,
        TxnCommitRecord::SingleRecord { commit_ts, write }
            if write.write_type != WriteType::Rollback =>
        {
            // A lock and a commit record of one transaction on one key: the
            // data contradicts itself. Refuse rather than roll back a commit.
            return Err(percolate_mvcc::Error::Committed {
                start_ts,
                commit_ts,
                key,
            }
            .into());
        }
        // Already rolled back (a pessimistic secondary can get here): unlock.
        _ => return Ok(Some(unlock(txn, key, TimeStamp::zero()))),
    };
    if lock.lock_type == LockType::Put && lock.short_value.is_none() {
        txn.delete_value(key.clone(), lock.ts);
    }
    let protection = if is_primary(&key, lock) {
        RollbackProtection::Protected
    } else {
        RollbackProtection::Unprotected
    };
    if let Some(write) = make_rollback(start_ts, protection, overlapped_write) {
        txn.put_write(key.clone(), start_ts, &write);
    }
    if collapse {
        collapse_prev_rollback(txn, reader, &key)?;
    }
    Ok(Some(unlock(txn, key, TimeStamp::zero())))
}

/// Decides the acting transaction's fate on `key` when its lock is not
/// there (`mismatch_lock` is another transaction's lock on the key, if any).
pub(crate) fn check_txn_status_missing_lock<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    mismatch_lock: Option<Lock>,
    action: MissingLockAction,
    resolving_pessimistic_lock: bool,
) -> Result<TxnStatus> {
    let start_ts = txn.start_ts();
    match reader.get_txn_commit_record(&key, start_ts)? {
        TxnCommitRecord::SingleRecord { commit_ts, write } => {
            if write.write_type == WriteType::Rollback {
                Ok(TxnStatus::RolledBack)
            } else {
                Ok(TxnStatus::Committed { commit_ts })
            }
        }
        TxnCommitRecord::OverlappedRollback { .. } => Ok(TxnStatus::RolledBack),
        TxnCommitRecord::None { overlapped_write } => {
            if action == MissingLockAction::ReturnError {
                return Err(percolate_mvcc::Error::TxnNotFound { start_ts, key }.into());
            }
            if resolving_pessimistic_lock {
                return Ok(TxnStatus::LockNotExistDoNothing);
            }
            if action == MissingLockAction::Rollback {
                collapse_prev_rollback(txn, reader, &key)?;
            }
            if let (Some(lock), None) = (mismatch_lock, overlapped_write.as_ref()) {
                mark_rollback_on_mismatching_lock(txn, &key, lock, action.protection());
            }
            if let Some(write) = make_rollback(start_ts, action.protection(), overlapped_write) {
                txn.put_write(key, start_ts, &write);
            }
            Ok(TxnStatus::LockNotExist)
        }
    }
}

/// Rejects a commit_ts that is not above the start_ts, or that is beyond
/// the oracle's range (see [`beyond_range`](crate::oracle::beyond_range)).
pub(crate) fn check_commit_ts(start_ts: TimeStamp, commit_ts: TimeStamp) -> Result<()> {
    if commit_ts <= start_ts {
        return Err(crate::Error::InvalidTxnTso {
            start_ts,
            commit_ts,
        });
    }
    if crate::oracle::beyond_range(commit_ts) {
        return Err(crate::Error::InvalidRequest {
            reason: "a commit_ts beyond the range of the timestamp oracle",
            key: None,
        });
    }
    Ok(())
}
