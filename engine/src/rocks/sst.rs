//! Files outside the live database: checkpoints, and SST files written,
//! read and ingested in the database's own key layout.
//!
//! * [`RocksEngine::checkpoint`]: RocksDB's checkpoint, a consistent copy
//!   of the whole database (every column family at one moment, since every
//!   percolate write is one atomic cross-CF batch) made of hard links to the
//!   live SST files where the file system allows, copies elsewhere.
//! * [`RocksEngine::write_sst`]: an SST file of one column family, written
//!   with RocksDB's `SstFileWriter` and the column family's own table
//!   options (bloom filters, prefix extractor), the keys behind the data
//!   prefix `z` exactly as the database (and a TiKV store) keeps them.
//! * [`RocksEngine::read_sst`]: every entry of such a file, as stored. The
//!   Rust binding has no `SstFileReader`, so the file is copied into a
//!   scratch database (ingested, not moved: the file is left as it is) and
//!   read back with RocksDB's block checksums verified.
//! * [`RocksEngine::ingest_ssts`]: ingests such files into the live
//!   database, all of them or none: every file is read and checked first.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rocksdb::{
    Cache, ColumnFamilyDescriptor, DB, DBCompressionType, IngestExternalFileOptions, Options,
    ReadOptions, SstFileWriter, checkpoint::Checkpoint,
};

use super::{DATA_PREFIX, RocksEngine, RocksOptions, TS_CEILING_KEY, cf_options, handle};
use crate::{Cf, Error, Result, WriteBatch};

/// Block cache of the options an SST file is written or read with: the
/// files are streamed once, nothing is worth caching.
const SCRATCH_CACHE_BYTES: usize = 1 << 20;

/// What the check of [`RocksEngine::ingest_ssts`] is shown, file by
/// file (files numbered as given, from 0).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum SstEvent<'a> {
    /// An entry of the file, in key order.
    Entry {
        /// The file.
        file: usize,
        /// The key as stored, with the data prefix.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// The file's end: every entry was read, block checksums verified.
    End {
        /// The file.
        file: usize,
        /// How many entries it held.
        entries: u64,
    },
    /// RocksDB could not read the file (a damaged block, a bad footer, not
    /// an SST file): the ingest fails with the check's error, or with
    /// this one if the check passes it.
    Unreadable {
        /// The file.
        file: usize,
        /// What RocksDB reported.
        error: &'a Error,
    },
}

/// Why reading a file for [`RocksEngine::ingest_ssts`] stopped.
enum ReadStop<X> {
    /// The check refused an entry.
    Check(X),
    /// RocksDB failed to read the file.
    Engine(Error),
}

impl<X> From<Error> for ReadStop<X> {
    fn from(e: Error) -> Self {
        ReadStop::Engine(e)
    }
}

/// What [`RocksEngine::write_sst`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SstFileInfo {
    /// The file (absent when `entries` is 0: RocksDB writes no empty SST
    /// file).
    pub path: PathBuf,
    /// The column family its entries belong to.
    pub cf: Cf,
    /// How many entries it holds.
    pub entries: u64,
    /// Its size in bytes.
    pub file_bytes: u64,
}

/// The writer [`RocksEngine::write_sst`] hands its closure: entries go in
/// in strictly ascending key order (RocksDB refuses anything else).
pub struct SstSink<'a> {
    writer: SstFileWriter<'a>,
    /// The stored key being added (data prefix + key).
    stored: super::StoredKey,
    entries: u64,
}

impl std::fmt::Debug for SstSink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SstSink")
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

impl SstSink<'_> {
    /// Adds `key` (as the engine's callers see keys: without the data
    /// prefix, which is added here) with `value`. A key not above the
    /// previous one is an error.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        super::set_data_key(&mut self.stored, key);
        self.writer.put(&self.stored, value)?;
        self.entries += 1;
        Ok(())
    }

    /// Entries added so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }
}

/// The options SST files of `cf` are written and read with: the column
/// family's own (so filters are built as the database builds them), and
/// zstd for every block, as TiKV's BR writes its backup files (the
/// column family's per-level choice does not apply to a file that is not
/// in a level yet, and RocksDB's default, snappy, is not built in).
fn sst_options(cf: Cf) -> Result<Options> {
    let cache = Cache::new_lru_cache(SCRATCH_CACHE_BYTES);
    let mut opts = cf_options(cf, &RocksOptions::default(), &cache)?;
    opts.set_compression_type(DBCompressionType::Zstd);
    Ok(opts)
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

impl RocksEngine {
    /// Writes a consistent copy of the whole database into `path`, a
    /// directory that must not exist yet: RocksDB's checkpoint, after a
    /// flush of the memtables, with hard links to the live SST files
    /// where `path` is on the same file system and copies elsewhere. The
    /// copy opens as a database of its own ([`RocksEngine::open`]). Writes
    /// go on meanwhile; the copy holds each atomic write batch whole or not
    /// at all, and every batch that finished before the call. Pessimistic
    /// locks, kept in memory only, are not in it (as after a crash).
    pub fn checkpoint(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let checkpoint = Checkpoint::new(&self.inner.db)?;
        // 0: flush first, so the copy is the data as of now in SST files.
        checkpoint.create_checkpoint_with_log_size(path, 0)?;
        Ok(())
    }

    /// Writes an SST file of `cf` at `path` (replacing any file there):
    /// `fill` adds the entries through the [`SstSink`] it is given, keys
    /// without the data prefix, in ascending order; the file holds them
    /// behind the prefix, as the database stores them. No file is left
    /// when `fill` fails or adds nothing (RocksDB writes no empty SST).
    pub fn write_sst<T, X: From<Error>>(
        cf: Cf,
        path: &Path,
        fill: impl FnOnce(&mut SstSink<'_>) -> std::result::Result<T, X>,
    ) -> std::result::Result<(T, SstFileInfo), X> {
        let opts = sst_options(cf)?;
        let mut sink = SstSink {
            writer: SstFileWriter::create(&opts),
            stored: super::StoredKey::new(),
            entries: 0,
        };
        sink.writer.open(path).map_err(Error::from)?;
        let filled = fill(&mut sink);
        let finished = match filled {
            Ok(out) if sink.entries > 0 => sink.writer.finish().map(|()| out).map_err(Error::from),
            Ok(out) => Ok(out),
            Err(e) => {
                drop(sink);
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        let entries = sink.entries;
        drop(sink);
        let out = finished.inspect_err(|_| {
            let _ = std::fs::remove_file(path);
        })?;
        let file_bytes = if entries == 0 {
            let _ = std::fs::remove_file(path);
            0
        } else {
            std::fs::metadata(path)
                .map_err(io("stat written SST file", path))?
                .len()
        };
        let info = SstFileInfo {
            path: path.to_path_buf(),
            cf,
            entries,
            file_bytes,
        };
        Ok((out, info))
    }

    /// Reads every entry of the SST file of `cf` at `path` in key order,
    /// keys as stored (with the data prefix), and returns how many there
    /// were. The file is copied into a scratch database that is removed
    /// afterwards, and read with RocksDB's block checksums verified: a
    /// damaged file fails with RocksDB's error. The file itself is left as
    /// it is.
    pub fn read_sst<X: From<Error>>(
        cf: Cf,
        path: &Path,
        mut visit: impl FnMut(&[u8], &[u8]) -> std::result::Result<(), X>,
    ) -> std::result::Result<u64, X> {
        let scratch = tempfile::Builder::new()
            .prefix("percolate-sst-")
            .tempdir()
            .map_err(io("create temporary directory", &std::env::temp_dir()))?;
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        let descriptor = ColumnFamilyDescriptor::new(cf.name(), sst_options(cf)?);
        let db =
            DB::open_cf_descriptors(&db_opts, scratch.path(), [descriptor]).map_err(Error::from)?;
        let scratch_cf = db
            .cf_handle(cf.name())
            .ok_or(Error::MissingColumnFamily { cf: cf.name() })?;
        db.ingest_external_file_cf_opts(scratch_cf, &copy_ingest(), vec![path])
            .map_err(Error::from)?;
        let mut read = ReadOptions::default();
        read.set_verify_checksums(true);
        read.set_total_order_seek(true);
        read.fill_cache(false);
        let mut iter = db.raw_iterator_cf_opt(scratch_cf, read);
        iter.seek_to_first();
        let mut entries = 0;
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            visit(key, value)?;
            entries += 1;
            iter.next();
        }
        iter.status().map_err(Error::from)?;
        Ok(entries)
    }

    /// Ingests SST files written by [`write_sst`](Self::write_sst) (or by
    /// TiKV: the same layout) into the database: all of them or, when a
    /// check fails, none.
    ///
    /// Every file is read first ([`read_sst`](Self::read_sst)) and `check`
    /// sees each entry, key as stored, then the end of the file with its
    /// count ([`SstEvent`]); it may refuse any of them. Only when every
    /// file reads back whole and passes are they ingested, copied (the
    /// files are left as they are), the default CF's first and the write
    /// CF's last, so that a failure between the two leaves only long values
    /// that no write record points to. Only the default and write CFs take
    /// files ([`Error::UnsupportedIngest`] otherwise): the lock CF is
    /// mirrored in memory, and ingesting behind the mirror would hide locks
    /// from readers.
    ///
    /// The engine's bookkeeping follows, as for a write of the same
    /// records: the persisted write-CF ts ceiling is raised to at least
    /// `ts_floor` and the newest commit ts ingested (durably, before the
    /// files go in), and the write epoch and in-memory ceiling of every
    /// ingested key move. The timestamp oracle serving the data is the
    /// caller's concern: it must hand out no timestamp at or below an
    /// ingested commit ts (one started above
    /// [`persisted_ts_ceiling`](Self::persisted_ts_ceiling) does not).
    pub fn ingest_ssts<X: From<Error>>(
        &self,
        files: &[(Cf, PathBuf)],
        ts_floor: u64,
        mut check: impl FnMut(SstEvent<'_>) -> std::result::Result<(), X>,
    ) -> std::result::Result<(), X> {
        if self.inner.read_only {
            return Err(Error::ReadOnly {
                path: self.inner.path.clone(),
            }
            .into());
        }
        if let Some((cf, _)) = files
            .iter()
            .find(|(cf, _)| !matches!(cf, Cf::Default | Cf::Write))
        {
            return Err(Error::UnsupportedIngest { cf: cf.name() }.into());
        }
        // One mark per write-CF key prefix (its newest version first), for
        // the epochs and in-memory ceilings; never applied.
        let mut marks = WriteBatch::new();
        let mut newest = ts_floor;
        for (file, (cf, path)) in files.iter().enumerate() {
            let mut last_prefix: Vec<u8> = Vec::new();
            let read = Self::read_sst(*cf, path, |key, value| {
                check(SstEvent::Entry { file, key, value }).map_err(ReadStop::Check)?;
                let key = key.strip_prefix(&[DATA_PREFIX]).unwrap_or(key);
                let prefix = crate::write_key_prefix(key).filter(|_| *cf == Cf::Write);
                if let Some(prefix) = prefix {
                    newest = newest.max(crate::epochs::commit_ts(key));
                    if prefix != last_prefix.as_slice() {
                        last_prefix = prefix.to_vec();
                        marks.put(Cf::Write, key.to_vec(), Vec::new());
                    }
                }
                Ok(())
            });
            let entries = match read {
                Ok(entries) => entries,
                Err(ReadStop::Check(e)) => return Err(e),
                Err(ReadStop::Engine(error)) => {
                    check(SstEvent::Unreadable {
                        file,
                        error: &error,
                    })?;
                    return Err(error.into());
                }
            };
            check(SstEvent::End { file, entries })?;
        }
        self.raise_persisted_ceiling(newest)?;
        self.inner.epochs.begin(&marks);
        let ingested = self.ingest_in_order(files);
        self.inner.epochs.end(&marks);
        ingested.map_err(X::from)
    }

    /// Ingests `files`, the default CF's before the write CF's, one
    /// RocksDB call per column family.
    fn ingest_in_order(&self, files: &[(Cf, PathBuf)]) -> Result<()> {
        for cf in [Cf::Default, Cf::Write] {
            let paths: Vec<&PathBuf> = files
                .iter()
                .filter(|(c, _)| *c == cf)
                .map(|(_, p)| p)
                .collect();
            if paths.is_empty() {
                continue;
            }
            let db = &self.inner.db;
            db.ingest_external_file_cf_opts(handle(db, cf)?, &copy_ingest(), paths)?;
        }
        // Cursors pooled for latest reads were built on the files before.
        self.cursors.clear();
        Ok(())
    }

    /// Raises the persisted write-CF ts ceiling to at least `ts`, durably.
    fn raise_persisted_ceiling(&self, ts: u64) -> Result<()> {
        let inner = &self.inner;
        let _raising = inner.raising.lock();
        if ts <= inner.persisted_ceiling.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut opts = rocksdb::WriteOptions::default();
        opts.set_sync(true);
        let default = handle(&inner.db, Cf::Default)?;
        inner
            .db
            .put_cf_opt(default, TS_CEILING_KEY, ts.to_be_bytes(), &opts)?;
        inner.persisted_ceiling.store(ts, Ordering::SeqCst);
        Ok(())
    }
}

/// Ingestion that copies the files (they stay where they are, untouched)
/// and may place them above data already in the database.
fn copy_ingest() -> IngestExternalFileOptions {
    let mut opts = IngestExternalFileOptions::default();
    opts.set_move_files(false);
    opts.set_snapshot_consistency(true);
    opts.set_allow_global_seqno(true);
    opts.set_allow_blocking_flush(true);
    opts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, Snapshot};

    /// A write-CF key: `key` and the commit ts as `!ts` big-endian.
    fn write_key(key: &[u8], commit_ts: u64) -> Vec<u8> {
        let mut k = key.to_vec();
        k.extend_from_slice(&(!commit_ts).to_be_bytes());
        k
    }

    #[test]
    fn written_files_read_back_and_ingest_with_the_ceiling_raised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sst");
        let entries = [
            (write_key(b"a", 7), b"P1".to_vec()),
            (write_key(b"b", 9), b"P2".to_vec()),
        ];
        let ((), info) = RocksEngine::write_sst(Cf::Write, &path, |sink| {
            for (k, v) in &entries {
                sink.put(k, v)?;
            }
            Ok::<(), Error>(())
        })
        .unwrap();
        assert_eq!(info.entries, 2);
        assert!(info.file_bytes > 0);
        let mut read = Vec::new();
        RocksEngine::read_sst(Cf::Write, &path, |k, v| {
            read.push((k.to_vec(), v.to_vec()));
            Ok::<(), Error>(())
        })
        .unwrap();
        let stored: Vec<_> = entries
            .iter()
            .map(|(k, v)| ([&[DATA_PREFIX], &k[..]].concat(), v.clone()))
            .collect();
        assert_eq!(read, stored);

        let engine = RocksEngine::open_temporary().unwrap();
        let mut seen = 0;
        engine
            .ingest_ssts(&[(Cf::Write, path.clone())], 5, |event| {
                if let SstEvent::Entry { .. } = event {
                    seen += 1;
                }
                Ok::<(), Error>(())
            })
            .unwrap();
        assert_eq!(seen, 2);
        assert_eq!(engine.persisted_ts_ceiling(), 9);
        assert_eq!(engine.write_ts_ceiling(b"b"), Some(9));
        let snap = engine.snapshot();
        assert_eq!(
            snap.get(Cf::Write, &entries[0].0).unwrap(),
            Some(b"P1".to_vec())
        );
        // The file is left where it was.
        assert!(path.exists());
    }

    #[test]
    fn a_refused_entry_or_a_lock_file_ingests_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sst");
        RocksEngine::write_sst(Cf::Default, &path, |sink| sink.put(b"k", b"v")).unwrap();
        let engine = RocksEngine::open_temporary().unwrap();
        let refused = engine.ingest_ssts(&[(Cf::Default, path.clone())], 0, |_| {
            Err(Error::Injected {
                reason: "no".into(),
            })
        });
        assert!(matches!(refused, Err(Error::Injected { .. })));
        let locks = engine.ingest_ssts(&[(Cf::Lock, path.clone())], 0, |_| Ok::<(), Error>(()));
        assert!(matches!(
            locks,
            Err(Error::UnsupportedIngest { cf: "lock" })
        ));
        assert_eq!(engine.snapshot().get(Cf::Default, b"k").unwrap(), None);
        // An empty file is not written at all.
        let empty = dir.path().join("e.sst");
        let ((), info) =
            RocksEngine::write_sst(Cf::Write, &empty, |_| Ok::<(), Error>(())).unwrap();
        assert_eq!(info.entries, 0);
        assert!(!empty.exists());
    }

    #[test]
    fn a_checkpoint_opens_as_a_database() {
        let engine = RocksEngine::open_temporary().unwrap();
        let mut batch = WriteBatch::new();
        batch.put(Cf::Default, b"k".to_vec(), b"v".to_vec());
        engine
            .write(&batch, crate::WriteOptions::default())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        engine.checkpoint(dir.path().join("copy")).unwrap();
        let copy = RocksEngine::open(dir.path().join("copy")).unwrap();
        assert_eq!(
            copy.snapshot().get(Cf::Default, b"k").unwrap(),
            Some(b"v".to_vec())
        );
        // Into an existing directory: RocksDB refuses.
        assert!(engine.checkpoint(dir.path().join("copy")).is_err());
    }
}
