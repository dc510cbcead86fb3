//! ScanLock: list the locks of a range, for resolvers and GC.

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, LockInfo, MvccReader, TimeStamp};

use super::raw_key;
use crate::Result;

/// Locks in `[start, end)` of transactions with `start_ts <= max_ts`, at
/// most `limit` (0 = all), in key order.
pub fn scan_lock<S: Snapshot>(
    reader: &mut MvccReader<S>,
    start: Option<&Key>,
    end: Option<&Key>,
    max_ts: TimeStamp,
    limit: usize,
) -> Result<Vec<LockInfo>> {
    let (locks, _) = reader.scan_locks(start, end, |_, lock| lock.ts <= max_ts, limit)?;
    locks
        .into_iter()
        .map(|(key, lock)| Ok(lock.into_lock_info(raw_key(&key)?)))
        .collect()
}
