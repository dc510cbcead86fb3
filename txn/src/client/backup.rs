//! Online backup: a copy of a live data directory that opens as a
//! database of its own.
//!
//! A backup directory has the layout of a data directory: RocksDB's
//! checkpoint of the database in `db/`, and the timestamp oracle's state
//! file `TIMESTAMP`. [`Client::open`] of it is the restore (open it in
//! place, or copy it where the data should live first).
//!
//! * **Consistency.** Every percolate write is one atomic RocksDB batch
//!   across the column families, and the checkpoint holds each batch whole
//!   or not at all: a backup is the database as a crash at that moment
//!   would have left it. Transactions in flight leave locks in it; the
//!   restored database resolves them as any reader does (a lock whose
//!   primary committed is rolled forward, one whose primary is gone or
//!   whose TTL ran out is rolled back). A transaction whose `commit`
//!   returned before `backup` was called is in the backup.
//! * **Timestamps.** The restored oracle must start above every timestamp
//!   in the backup. The checkpoint carries the engine's persisted write-CF
//!   ts ceiling (written in the same batches as the commits it covers) and
//!   the locks, from which [`Client::open`] takes its floor
//!   ([`timestamp_floor`](super::timestamp_floor)); and the backup's
//!   `TIMESTAMP` is written after the checkpoint, above a timestamp the
//!   live oracle handed out then, so the restored oracle also starts above
//!   every timestamp taken before the backup finished.
//! * **Cost.** The checkpoint flushes the memtables and hard-links the
//!   SST files when the backup directory is on the same file system as the
//!   data (copies them elsewhere): taking it is quick and, until compaction
//!   replaces the linked files, takes almost no space.
//! * **What is not in it.** Pessimistic locks live in memory only; they
//!   are not in a backup, as they do not survive a crash. Their
//!   transactions cannot commit in the restored database.

use std::path::Path;
use std::sync::Arc;

use percolate_engine::RocksEngine;

use super::Client;
use crate::errors::io_error;
use crate::oracle::{LocalOracle, SystemClock};
use crate::{Error, Result};

/// What [`Client::backup`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupInfo {
    /// A timestamp the live oracle handed out once the checkpoint was
    /// taken: every transaction that committed before it is in the backup,
    /// and the restored oracle starts above it.
    pub ts: percolate_mvcc::TimeStamp,
    /// Files in the backup's `db/` directory.
    pub files: usize,
    /// Their total size in bytes (shared with the live database where they
    /// are hard links).
    pub bytes: u64,
}

impl Client<RocksEngine> {
    /// Writes a backup of the database into `dir` while transactions go on:
    /// a directory that [`Client::open`] opens as a database of its own,
    /// holding every transaction committed before the call (see the
    /// module documentation of `backup` for what it holds and why it is
    /// consistent).
    ///
    /// `dir` must not exist or be an empty directory
    /// ([`Error::DirectoryNotEmpty`] otherwise, and nothing is written);
    /// it is created with its parents. A backup that fails half-way leaves
    /// a directory to delete: RocksDB makes the checkpoint under a
    /// temporary name (`db.tmp`) and renames it to `db` only when it is
    /// whole; the oracle's file is written after it (a backup whose `db`
    /// is there but whose `TIMESTAMP` is not still opens above every
    /// timestamp in its data, from the engine's own ceiling).
    pub fn backup(&self, dir: impl AsRef<Path>) -> Result<BackupInfo> {
        let dir = dir.as_ref();
        prepare_empty_dir(dir)?;
        let engine = self.cluster().regions()[0].storage().engine();
        engine.checkpoint(dir.join("db"))?;
        // Above every commit that finished before the checkpoint.
        let ts = self.current_ts()?;
        // The restored oracle's state: opened above `ts`, and closed at
        // once, which leaves its limit on disk just above it.
        drop(LocalOracle::open_above(dir, Arc::new(SystemClock), ts)?);
        sync_dir(dir)?;
        let (files, bytes) = dir_size(&dir.join("db"))?;
        Ok(BackupInfo { ts, files, bytes })
    }
}

/// Creates `dir` (and its parents) if it is missing; fails with
/// [`Error::DirectoryNotEmpty`] if it holds anything.
pub(crate) fn prepare_empty_dir(dir: &Path) -> Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::DirectoryNotEmpty {
                    path: dir.to_path_buf(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io_error("create directory", dir))
        }
        Err(e) => Err(io_error("list directory", dir)(e)),
    }
}

/// Makes the entries of `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("sync directory", dir))
}

/// The number and total size of the files in `dir` (not recursive).
fn dir_size(dir: &Path) -> Result<(usize, u64)> {
    let io = io_error("list directory", dir);
    let mut files = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).map_err(&io)? {
        let meta = entry.and_then(|e| e.metadata()).map_err(&io)?;
        if meta.is_file() {
            files += 1;
            bytes += meta.len();
        }
    }
    Ok((files, bytes))
}
