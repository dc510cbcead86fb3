//! ResolveLock: finish every lock a decided transaction left in a range.
//!
//! Once a transaction's fate is known (from its primary, or from all its
//! secondaries for async commit), a resolver commits or rolls back each of
//! its locks. A range is resolved in batches, each one atomic write:
//! `Storage::resolve_lock` scans a batch of locks and sends it as one
//! `ResolveLock` command, which calls [`resolve_lock_key`] on each.
//! [`resolve_lock_batch`], the same loop over a snapshot, is the action
//! tests' form (with `test-util`).

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, MvccReader, MvccTxn, TimeStamp};

use super::cleanup::{CleanupKind, cleanup};
use super::commit::commit;
use super::ReleasedLock;
use crate::Result;

/// Commits (`commit_ts` non-zero) or rolls back (`commit_ts` zero) the
/// acting transaction's lock on one key.
pub fn resolve_lock_key<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    commit_ts: TimeStamp,
) -> Result<Option<ReleasedLock>> {
    if commit_ts.is_zero() {
        cleanup(txn, reader, key, TimeStamp::zero(), CleanupKind::Rollback)
    } else {
        commit(txn, reader, key, commit_ts)
    }
}

/// One batch of a range resolve: what to write, and where the next batch
/// starts (`None` when the range is done).
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug)]
pub struct ResolveBatch {
    /// The modifications of this batch.
    pub txn: MvccTxn,
    /// Locks resolved in this batch.
    pub resolved: usize,
    /// The first key of the next batch.
    pub next_start: Option<Key>,
}

/// Resolves up to `batch_size` locks of the transaction `start_ts` in
/// `[start, end)`. Write the batch, then call again from `next_start` on a
/// new snapshot until it is `None`.
#[cfg(any(test, feature = "test-util"))]
pub fn resolve_lock_batch<S: Snapshot>(
    snapshot: &S,
    start_ts: TimeStamp,
    commit_ts: TimeStamp,
    start: Option<&Key>,
    end: Option<&Key>,
    batch_size: usize,
) -> Result<ResolveBatch> {
    if !commit_ts.is_zero() {
        super::check_commit_ts(start_ts, commit_ts)?;
    }
    let mut reader = MvccReader::new(snapshot.clone());
    let (locks, has_more) =
        reader.scan_locks(start, end, |_, lock| lock.ts == start_ts, batch_size)?;
    let next_start = if has_more {
        locks.last().map(|(key, _)| next_key(key))
    } else {
        None
    };
    let mut txn = MvccTxn::new(start_ts);
    let resolved = locks.len();
    for (key, _) in locks {
        resolve_lock_key(&mut txn, &mut reader, key, commit_ts)?;
    }
    Ok(ResolveBatch {
        txn,
        resolved,
        next_start,
    })
}

/// The smallest encoded key after `key`.
#[cfg(any(test, feature = "test-util"))]
fn next_key(key: &Key) -> Key {
    let mut next = key.as_encoded().clone();
    next.push(0);
    Key::from_encoded(next)
}
