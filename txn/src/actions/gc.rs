//! GC: drop the versions no reader can see any more.
//!
//! Below the safe point every reader reads at or above it, so for each key
//! only the newest version at or below the safe point can still be seen.
//! Walking down from the safe point: Lock and Rollback records are dropped
//! until the first Put or Delete; a Put is kept and everything older goes;
//! a Delete goes too, with everything older (the key then has no version at
//! or below the safe point, which reads the same as the Delete). Long
//! values of dropped Puts are removed from the default CF. Versions above
//! the safe point and the lock CF are never touched.

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, MvccReader, MvccTxn, TimeStamp, WriteType};

use crate::Result;

/// What GC did to one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcInfo {
    /// Records looked at (at or below the safe point).
    pub found_versions: usize,
    /// Write records deleted.
    pub deleted_versions: usize,
    /// Default-CF values deleted.
    pub deleted_values: usize,
}

/// Collects `key`'s garbage at `safe_point` into `txn`.
pub fn gc<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    safe_point: TimeStamp,
) -> Result<GcInfo> {
    let mut info = GcInfo::default();
    let mut newest_data_seen = false;
    for (commit_ts, write) in reader.scan_writes(&key, safe_point)? {
        info.found_versions += 1;
        let is_data = matches!(write.write_type, WriteType::Put | WriteType::Delete);
        if !newest_data_seen && write.write_type == WriteType::Put {
            newest_data_seen = true;
            continue;
        }
        newest_data_seen |= is_data;
        txn.delete_write(key.clone(), commit_ts);
        info.deleted_versions += 1;
        if write.write_type == WriteType::Put && write.short_value.is_none() {
            txn.delete_value(key.clone(), write.start_ts);
            info.deleted_values += 1;
        }
    }
    Ok(info)
}
