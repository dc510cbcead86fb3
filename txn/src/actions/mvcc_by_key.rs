//! MvccByKey: every record of one key, decoded, for debugging.

use std::fmt;

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, Lock, MvccReader, TimeStamp, Write};

use crate::Result;

/// Every lock, write record and long value of a key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MvccInfo {
    /// The lock, if any.
    pub lock: Option<Lock>,
    /// Write records, newest commit_ts first.
    pub writes: Vec<(TimeStamp, Write)>,
    /// Long values in the default CF, newest start_ts first.
    pub values: Vec<(TimeStamp, Vec<u8>)>,
}

/// Reads every record of `key`.
pub fn mvcc_by_key<S: Snapshot>(reader: &mut MvccReader<S>, key: &Key) -> Result<MvccInfo> {
    Ok(MvccInfo {
        lock: reader.load_lock(key)?,
        writes: reader.scan_writes(key, TimeStamp::max())?,
        values: reader.scan_values(key)?,
    })
}

fn bytes(f: &mut fmt::Formatter<'_>, b: &[u8]) -> fmt::Result {
    match std::str::from_utf8(b) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => write!(f, "{s:?}"),
        _ => {
            f.write_str("0x")?;
            b.iter().try_for_each(|x| write!(f, "{x:02x}"))
        }
    }
}

impl fmt::Display for MvccInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.lock {
            Some(lock) => {
                write!(
                    f,
                    "lock: {:?} start_ts={} ttl={} primary=",
                    lock.lock_type, lock.ts, lock.ttl
                )?;
                bytes(f, &lock.primary)?;
                if let Some(v) = &lock.short_value {
                    f.write_str(" value=")?;
                    bytes(f, v)?;
                }
                if !lock.min_commit_ts.is_zero() {
                    write!(f, " min_commit_ts={}", lock.min_commit_ts)?;
                }
                if lock.use_async_commit {
                    write!(f, " async_commit secondaries={}", lock.secondaries.len())?;
                }
                writeln!(f)?;
            }
            None => writeln!(f, "lock: none")?,
        }
        for (commit_ts, write) in &self.writes {
            write!(
                f,
                "write @{commit_ts}: {:?} start_ts={}",
                write.write_type, write.start_ts
            )?;
            if write.is_protected() {
                // TiKV marks a protected rollback by a short value "p".
                f.write_str(" protected")?;
            } else if let Some(v) = &write.short_value {
                f.write_str(" value=")?;
                bytes(f, v)?;
            }
            if write.has_overlapped_rollback {
                f.write_str(" overlapped_rollback")?;
            }
            if let Some(fence) = write.gc_fence {
                write!(f, " gc_fence={fence}")?;
            }
            writeln!(f)?;
        }
        for (start_ts, value) in &self.values {
            writeln!(f, "value @{start_ts}: {} bytes", value.len())?;
        }
        Ok(())
    }
}
