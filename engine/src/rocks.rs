//! The RocksDB engine: the real default.
//!
//! One RocksDB instance holds the column families ([`Cf::ALL`]: the three
//! of TiKV's format, `raw`, and `notify` for observers' notifications; a
//! database made before `notify` existed gets it at its next open, and a
//! read-only open of one goes without it). Like TiKV's
//! raftstore, every key is stored behind the one-byte data prefix `z`
//! ([`DATA_PREFIX`]), so the files on disk carry the same keys a TiKV store
//! would, and the key space below `z` stays free for local metadata. The
//! prefix is added and stripped here; callers never see it.
//!
//! Column family options (after TiKV's defaults):
//!
//! | CF | bloom filter | why |
//! |---|---|---|
//! | `write` | prefix bloom on the key without its 8-byte ts, in SSTs and in the memtable | a point read seeks `key+read_ts` and must skip every file that has no version of `key` |
//! | `lock` | whole-key bloom, in SSTs and in the memtable | prewrite and reads probe one lock per key, mostly absent |
//! | `default` | whole-key bloom, in SSTs and in the memtable | long values are fetched by exact `key+start_ts` |
//! | `raw`, `notify` | whole-key bloom, in SSTs and in the memtable | as `lock`: point probes, scans of few entries |
//!
//! **Pessimistic locks are kept in memory only**, as TiKV keeps them by
//! default since 6.0 ("in-memory pessimistic locks"): a lock-CF record
//! whose first byte is the pessimistic lock type `S` is held by the lock
//! mirror and never written to RocksDB, so a pessimistic lock request
//! writes nothing to the database (a lock RocksDB held for the key from
//! before is deleted in the same write, so that no key is in both). Every
//! reader still sees them: gets of either view, and lock-CF cursors, which
//! merge them into RocksDB's locks in key order (a pinned snapshot sees
//! them as they are when read, not as they were when it was taken; readers
//! never wait for a pessimistic lock, so nothing depends on the
//! difference). A pessimistic lock carries no value and is no commit point:
//! the prewrite that replaces it is written as any lock is. A crash loses
//! them, together with the transactions that held them, which are in the
//! same process: after a restart a pessimistic prewrite finds its lock
//! missing and takes the key only if nothing was committed on it since its
//! start_ts.
//!
//! Compression: none on L0-L1 (hot, rewritten soon), lz4 on L2-L4, zstd on
//! the bottom levels, as TiKV does. Every CF shares one LRU block cache.
//!
//! Memtable insert hints on the lock CF: a skip-list insert normally
//! starts from the position of the previous insert only when the new key
//! lands right next to it, and otherwise searches from the top of the
//! list. Committing a sorted batch deletes its locks in key order, and
//! each delete lands just past the previous key's lock (its tombstone
//! sorts before the lock's own entry), never right next to the previous
//! tombstone: every delete was a full search. With a hint (RocksDB's
//! `memtable_insert_with_hint_prefix_extractor`, here one hint for all
//! data keys) the insert climbs from the previous position only as far as
//! it must, a few comparisons for keys close together. Profiles of
//! `benches/txn.rs` showed the lock deletes at 17% of a 256-key
//! transaction before, 10% after.
//!
//! The write CF has a hint per user key instead
//! ([`RocksOptions::write_insert_hints`]): a commit record lands next to
//! its key's older versions, seldom near the previous insert, so one hint
//! for all keys only adds comparisons (1-key pessimistic updates, 2 cores:
//! 1.41 / 1.41 / 1.70 µs per skip-list insert with one, 1.53 / 1.34 /
//! 1.24 without; 64-key 1PC updates 4,411 / 4,811 transactions/s with it,
//! 5,102 / 4,990 without). A hint per key starts the insert where the
//! key's newest version went in, a few nodes from where the next one goes;
//! RocksDB's built-in transforms cannot strip the ts from keys of varying
//! length, so `glue/insert_hint.cc` registers one that can. YCSB-A,
//! pessimistic, 1 thread, 2 cores (CPU profiles of 3-second runs): the
//! skip-list insert and its comparisons fell from 28.8% of the samples to
//! 23.2%, the hints' own map and admission check included. The default,
//! raw and notify CFs keep the plain insert.
//!
//! **Unordered writes** ([`RocksOptions::unordered_writes`], on by
//! default). RocksDB's pipelined writes put each write group through two
//! stages, the write-ahead log and then the memtables, with the writers
//! of a group waiting for its leader at each; on a machine with fewer
//! cores than writers most of a write's time goes to those hand-offs.
//! With RocksDB's `unordered_write` a writer inserts its own batch into
//! the memtables as soon as its group's log record is written, beside the
//! other writers, and returns. The price is that RocksDB publishes a
//! write's sequence number before its records are in: a snapshot, or a
//! read of the latest data, sees a batch in flight record by record, and
//! a snapshot changes as writes below its sequence number land. Percolate
//! keeps its readers' guarantees on its own:
//!
//! * a [`snapshot`](Engine::snapshot) waits, once taken, until every
//!   write that began before it has returned (`write_gate.rs`: a count of
//!   writes in flight in two generations; no wait at all while no write
//!   is in flight, and writes never wait), so it sees each write whole or
//!   not at all, and never changes. The wait is a buffered write's
//!   few microseconds, but a synced write's log sync too, and a write
//!   stall's length; point reads of the latest data take no snapshot;
//! * the lock mirror takes a write's locks (and drops them) only after
//!   RocksDB returned, so a lock-CF get of the latest data still sees a
//!   lock until its commit record and the lock's deletion are both in;
//!   a point read reads the lock first and the versions after, and a
//!   commit in flight whose lock it did not find is above its read ts
//!   (see `percolate_txn`'s read path);
//! * write commands read only keys they hold latches on, whose writers
//!   have all returned.
//!
//! Concurrent memtable inserts skip RocksDB's insert hints, which only
//! serial inserts use; `glue/insert_hint.cc` gives them back through a
//! memtable of its own (RocksDB's skip list, wrapped), which keeps a
//! fixed table of insert positions per memtable: per user key on the
//! write CF, one for all keys on the lock CF. 2 cores, pessimistic
//! percolate alone (`percolate-bench --seconds 2`, six alternating pairs
//! of pipelined against unordered, median ratios of ops/s): YCSB-A 4
//! threads 1.31x, YCSB-F 1.20x, 4-key transfers 1.31x; at 1 thread 0.98x,
//! 0.98x and 1.01x. Without the glue's hints the 4-key transfer at 1
//! thread lost 8%. Single-threaded `benches/txn.rs` (two alternating
//! runs): 1-key and 256-key 2PC transactions within 5% either way,
//! 16-key ones 3%-9% slower.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType,
    DBRawIteratorWithThreadMode, Options, ReadOptions, SliceTransform, SnapshotWithThreadMode,
};

mod gc_filter;
mod sst;
pub use sst::{SstEvent, SstFileInfo, SstSink};

use crate::epochs::WriteEpochs;
use crate::lock_mirror::{LockMirror, is_memory_only};
use crate::write_gate::WriteGate;
use crate::{
    Cf, Durability, Engine, EngineIterator, Error, IterOptions, Modify, Result, SeekMode, Snapshot,
    TS_SUFFIX_LEN, WriteBatch, WriteOptions,
};

/// The byte in front of every stored key (TiKV's `keys::DATA_PREFIX`).
pub const DATA_PREFIX: u8 = b'z';

/// The first byte after every data key: the exclusive end of the data space.
const DATA_END: u8 = DATA_PREFIX + 1;

/// Where the write-CF ts ceiling is kept: a local key (below the data
/// space, so no data read ever meets it) of the default CF, holding a
/// commit ts as 8 bytes big-endian that no write-CF record on disk
/// exceeds (see [`Engine::write_ts_ceiling`]).
const TS_CEILING_KEY: &[u8] = b"\x01percolate-write-ts-ceiling";

/// How far above a batch's newest commit ts the persisted ceiling is
/// raised when that ts passes it: 2^26, about 256 ms of TSO timestamps
/// (milliseconds shifted left by 18 bits). The raise, one more record in
/// the batch, comes at most about four times a second; and a ceiling this
/// close to the newest commit can start a timestamp oracle that lost its
/// own state just above the data ([`RocksEngine::persisted_ts_ceiling`]).
const TS_CEILING_STEP: u64 = 1 << 26;

/// Each column family's compression, level by level: none on L0-L1 (hot,
/// rewritten soon), lz4 on L2-L4, zstd below (TiKV's choice). Public so
/// that a benchmark can configure its RocksDB peers the same way.
pub const COMPRESSION_PER_LEVEL: [DBCompressionType; 7] = [
    DBCompressionType::None,
    DBCompressionType::None,
    DBCompressionType::Lz4,
    DBCompressionType::Lz4,
    DBCompressionType::Lz4,
    DBCompressionType::Zstd,
    DBCompressionType::Zstd,
];

/// Tunables for [`RocksEngine::open_with`].
#[derive(Clone, Debug)]
pub struct RocksOptions {
    /// Size of the block cache shared by every CF. Defaults to 128 MiB.
    pub block_cache_bytes: usize,
    /// Bloom filter bits per key. Defaults to 10 (about 1% false positives).
    pub bloom_bits_per_key: f64,
    /// Background flush and compaction threads. Defaults to 2, the size of
    /// the machines this project is measured on.
    pub background_jobs: i32,
    /// Memtable size of every CF but the lock CF. Defaults to 64 MiB.
    pub write_buffer_bytes: usize,
    /// Memtable size of the lock CF. Defaults to 8 MiB: a lock lives from
    /// a transaction's prewrite to its commit, so the lock CF's memtable
    /// fills with locks and their tombstones that no reader wants, and a
    /// large one only makes every insert walk a deeper skip list, out of
    /// the CPU's caches. `percolate-bench`, 2 cores, async commit over 4
    /// regions, 64 MiB against 4 MiB (two alternating runs): single-key
    /// updates 4 threads 22.5 and 21.3 µs of CPU per transaction against
    /// 14.0 and 13.0 (+40% ops/s), 4-key transfers 1 thread +19% ops/s;
    /// 8 MiB within a few percent of 4 MiB, with a lower p99.9.
    pub lock_write_buffer_bytes: usize,
    /// What an open does with a write-ahead log damaged before its end.
    /// Defaults to [`WalRecovery::Refuse`].
    pub wal_recovery: WalRecovery,
    /// How the table files are compressed. Defaults to
    /// [`Compression::PerLevel`].
    pub compression: Compression,
    /// Keep RocksDB's tickers (block cache hits and misses, write stall
    /// time, compaction and flush bytes) for [`Engine::stats`]; counters
    /// only, no timers or histograms. Defaults to false: they cost about
    /// 4% of YCSB-A's throughput (percolate-bench, 4 threads, 2 cores);
    /// the sizes in [`Engine::stats`] come either way.
    pub statistics: bool,
    /// Let the writers of one RocksDB write group insert their batches into
    /// the memtables in parallel, each on its own thread
    /// (`allow_concurrent_memtable_write`), instead of the group's leader
    /// inserting them all. Defaults to [`concurrent_memtable_writes_default`]:
    /// on only with 8 or more CPUs. Always on with
    /// [`unordered_writes`](Self::unordered_writes).
    pub concurrent_memtable_writes: bool,
    /// Start each skip-list insert into the write CF's memtable from where
    /// the previous insert of the same user key ended, instead of from the
    /// top of the list: a key's new version sorts right before its
    /// previous one, so a key updated again and again is inserted after a
    /// few comparisons, where a search from the top walks a cold path of
    /// some twenty nodes. A hint costs the memtable about 280 bytes
    /// (RocksDB's insert position and its map entry), so only a key
    /// written before gets one (a table of 16,384 hash tags remembers the
    /// keys last written): keys written once cost it nothing but that
    /// check. Serial memtable inserts take RocksDB's own hints; with
    /// [`unordered_writes`](Self::unordered_writes) the concurrent
    /// inserts take theirs from the glue's memtable, a fixed table of
    /// 16,384 insert positions per write-CF memtable (384 KiB, and up to
    /// some 3.6 MiB more for the positions in use, outside the memtable's
    /// own accounting), each slot with a one-byte tag for the same
    /// admission check.
    /// Parallel inserts of one write group
    /// ([`concurrent_memtable_writes`](Self::concurrent_memtable_writes)
    /// without unordered writes) go without. Defaults to true. See the
    /// module docs for the measurements.
    pub write_insert_hints: bool,
    /// Let each writer insert its own batch into the memtables as soon as
    /// the batch is in the write-ahead log, alongside other writers,
    /// instead of in write groups one after another (RocksDB's
    /// `unordered_write`). It turns pipelined writes off and concurrent
    /// memtable inserts on, whatever
    /// [`concurrent_memtable_writes`](Self::concurrent_memtable_writes)
    /// says; the inserts then take their hints from a memtable of the
    /// glue's (see [`write_insert_hints`](Self::write_insert_hints)).
    ///
    /// RocksDB then no longer shows a batch to readers all at once. The
    /// engine keeps a [`snapshot`](Engine::snapshot) whole regardless: it
    /// waits, once taken, for the writes that began before it to return
    /// (only while writes are in flight: a buffered write's log append
    /// and memtable insert, some microseconds; a synced write's log sync
    /// too; and a write held up by a write stall holds up the snapshots
    /// taken meanwhile). Reads of the latest data never wait. Lock-CF gets of the [`latest`](Engine::latest)
    /// data come from the lock mirror, which takes a write's locks only
    /// once it is written; other reads of the latest data may see a write
    /// in flight in part, which percolate's readers allow for (see the
    /// module docs). Defaults to true. See the module docs for the
    /// measurements.
    pub unordered_writes: bool,
}

/// Whether [`RocksOptions::concurrent_memtable_writes`] is on by default
/// on this machine: with 8 or more CPUs. On fewer, the writers of a group
/// outnumber the cores, and handing each its own insert costs a thread
/// wake-up per writer and gains no parallelism; the leader's serial
/// insert also uses the memtable's insert hints, which a parallel insert
/// ignores. `percolate-bench`, 2 cores, 4 threads, uniform keys, 100 B
/// values, three alternating runs with this setting applied to percolate
/// and its RocksDB peers alike: 4-key transfers +8% ops/s and -6% CPU per
/// transaction for percolate, TransactionDB +1.5%; single-key updates
/// +6% (TransactionDB within its noise); YCSB-A and F unchanged.
/// RocksDB's default (on) is kept where there are cores to insert in
/// parallel.
pub fn concurrent_memtable_writes_default() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 8)
}

/// How a [`RocksEngine`]'s table files are compressed (the codecs this
/// build of RocksDB has: lz4 and zstd).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// None on the two upper levels (hot, rewritten soon), lz4 on the
    /// next three, zstd below: [`COMPRESSION_PER_LEVEL`], TiKV's choice.
    #[default]
    PerLevel,
    /// No compression on any level: the least CPU, the most disk.
    None,
    /// lz4 on every level: fast, a moderate ratio.
    Lz4,
    /// zstd on every level: the best ratio, the most CPU.
    Zstd,
}

impl Compression {
    fn per_level(self) -> [DBCompressionType; 7] {
        match self {
            Compression::PerLevel => COMPRESSION_PER_LEVEL,
            Compression::None => [DBCompressionType::None; 7],
            Compression::Lz4 => [DBCompressionType::Lz4; 7],
            Compression::Zstd => [DBCompressionType::Zstd; 7],
        }
    }
}

/// What opening a database does when its write-ahead log is damaged before
/// its end (a bad checksum in the middle of the log, not a torn last
/// record: that one is a write cut short, never acknowledged, and is always
/// dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalRecovery {
    /// Refuse to open, with [`Error::CorruptedAtOpen`]: replaying past the
    /// damage is impossible, and stopping there would drop commits that
    /// were acknowledged.
    #[default]
    Refuse,
    /// Open with what the log holds before the damage and drop the rest,
    /// as RocksDB's point-in-time recovery does, but not silently: the log
    /// files are first kept, as they were, in a directory beside the
    /// database (`<db>.wal-<unix ms>`), and
    /// [`RocksEngine::salvage_report`] says what happened. Only when the
    /// open with [`Refuse`](Self::Refuse) fails; an undamaged log opens as
    /// usual, with no report.
    SalvagePrefix,
}

/// What a [`WalRecovery::SalvagePrefix`] open did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SalvageReport {
    /// What RocksDB reported about the damage: the log file and offset.
    pub damage: String,
    /// Where the log files were kept before the records after the damage
    /// were dropped.
    pub logs_kept: PathBuf,
    /// The last write recovered: RocksDB's sequence number after the open.
    /// The kept logs hold the writes after it.
    pub last_sequence: u64,
}

impl Default for RocksOptions {
    fn default() -> Self {
        RocksOptions {
            block_cache_bytes: 128 << 20,
            bloom_bits_per_key: 10.0,
            background_jobs: 2,
            write_buffer_bytes: 64 << 20,
            lock_write_buffer_bytes: 8 << 20,
            wal_recovery: WalRecovery::Refuse,
            statistics: false,
            compression: Compression::PerLevel,
            concurrent_memtable_writes: concurrent_memtable_writes_default(),
            write_insert_hints: true,
            unordered_writes: true,
        }
    }
}

/// A RocksDB-backed engine. Cloning shares the database.
#[derive(Clone)]
pub struct RocksEngine {
    inner: Arc<Inner>,
    /// Idle write-CF cursors of [`Engine::latest`] views. Kept beside the
    /// database rather than in it: a pooled cursor holds the database open,
    /// so the pool must go when the last engine handle (or view) does.
    cursors: Arc<CursorPool>,
    /// What [`Engine::latest`] views share, so that taking one costs one
    /// reference count, not two: one copy per thread slot, each its own
    /// allocation, so that threads reading at once count references on
    /// cache lines of their own instead of all on one.
    latest: Arc<[Arc<LatestView>]>,
}

/// The database and the cursor pool, as a latest view holds them. Aligned
/// so that no two copies (nor anything else) share the cache lines of
/// their reference counts.
#[repr(align(128))]
struct LatestView {
    inner: Arc<Inner>,
    cursors: Arc<CursorPool>,
}

/// Invariant: `db` is declared before `temp_dir`, so it is closed before a
/// temporary directory is removed.
struct Inner {
    db: DB,
    path: PathBuf,
    /// Read options of point reads at the latest data (no snapshot).
    latest_read: ReadOptions,
    /// Write options of buffered and of synced writes, made once instead
    /// of per write.
    write_options: [rocksdb::WriteOptions; 2],
    /// Write-CF write epochs and ts ceilings ([`Engine::write_epoch`],
    /// [`Engine::write_ts_ceiling`]).
    epochs: WriteEpochs,
    /// The ts ceiling persisted under [`TS_CEILING_KEY`], once its write
    /// is applied: a batch whose records are all at or below it needs no
    /// raise.
    persisted_ceiling: AtomicU64,
    /// Taken by a write that raises the persisted ceiling, so that raises
    /// are written in ascending order.
    raising: Mutex<()>,
    /// The live locks, for the lock checks of latest reads.
    locks: LockMirror,
    /// Writes in flight, counted when RocksDB writes unordered
    /// ([`RocksOptions::unordered_writes`]) so that a snapshot can wait
    /// for those that began before it.
    gate: Option<WriteGate>,
    /// What a salvaging open dropped, if it did.
    salvage: Option<SalvageReport>,
    /// Opened with [`RocksEngine::open_read_only`]: every write fails.
    read_only: bool,
    /// The GC safe point and what the write CF's compaction filters left
    /// (see `gc_filter`).
    gc: Arc<gc_filter::GcShared>,
    /// Held only to be removed on drop.
    _temp_dir: Option<tempfile::TempDir>,
}

impl Drop for Inner {
    /// Deletes the default-CF values the GC of finished compactions left
    /// (best effort: see `gc_filter`).
    fn drop(&mut self) {
        if !self.read_only {
            self.gc.flush_values_on_close(&self.db);
        }
    }
}

impl std::fmt::Debug for RocksEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksEngine")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl RocksEngine {
    /// Opens (creating if needed) the database in `path` with default
    /// options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &RocksOptions::default())
    }

    /// Opens a database in a new temporary directory that is removed when
    /// the last handle (engine, snapshot or iterator) is dropped. For tests,
    /// examples and benchmarks.
    pub fn open_temporary() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("percolate-")
            .tempdir()
            .map_err(|source| Error::Io {
                op: "create temporary directory",
                path: std::env::temp_dir(),
                source,
            })?;
        let path = dir.path().to_path_buf();
        Self::open_inner(path, &RocksOptions::default(), Some(dir), false)
    }

    /// Opens (creating if needed) the database in `path`.
    pub fn open_with(path: impl AsRef<Path>, options: &RocksOptions) -> Result<Self> {
        Self::open_inner(path.as_ref().to_path_buf(), options, None, false)
    }

    /// Opens the existing database in `path` for reading only: RocksDB's
    /// read-only mode, which takes no lock on the directory and writes
    /// nothing to it, so it serves a database another process has open, or
    /// one on read-only media. It reads the data as of the open (the log
    /// replayed in memory); every [`Engine::write`] fails with
    /// [`Error::ReadOnly`]. A directory that holds no database is an error,
    /// not a new database.
    pub fn open_read_only(path: impl AsRef<Path>, options: &RocksOptions) -> Result<Self> {
        Self::open_inner(path.as_ref().to_path_buf(), options, None, true)
    }

    /// Whether the engine was opened with [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    fn open_inner(
        path: PathBuf,
        options: &RocksOptions,
        temp_dir: Option<tempfile::TempDir>,
        read_only: bool,
    ) -> Result<Self> {
        prepare_dir(&path, read_only)?;
        let gc = Arc::new(gc_filter::GcShared::default());
        let opener = Opener {
            cfs: opened_cfs(&path, read_only),
            path: &path,
            options,
            cache: Cache::new_lru_cache(options.block_cache_bytes),
            gc: &gc,
            read_only,
        };
        let (db, salvage) = opener.open_recovering()?;
        for cf in opener.cfs {
            if db.cf_handle(cf.name()).is_none() {
                return Err(Error::MissingColumnFamily { cf: cf.name() });
            }
        }
        let ceiling = persisted_ts_ceiling(&db, read_only)?;
        gc.load(&db)?;
        let locks = LockMirror::new(stored_locks(&db)?);
        let inner = Arc::new(Inner {
            db,
            path,
            latest_read: ReadOptions::default(),
            write_options: [false, true].map(|sync| {
                let mut options = rocksdb::WriteOptions::default();
                options.set_sync(sync);
                options
            }),
            epochs: WriteEpochs::new(crate::epochs::BUCKETS, ceiling),
            persisted_ceiling: AtomicU64::new(ceiling),
            raising: Mutex::new(()),
            locks,
            gate: options.unordered_writes.then(WriteGate::default),
            salvage,
            read_only,
            gc,
            _temp_dir: temp_dir,
        });
        Ok(Self::over(inner))
    }

    /// The engine over an opened database, with one latest-data view per
    /// thread slot.
    fn over(inner: Arc<Inner>) -> Self {
        let cursors = Arc::new(CursorPool::new());
        let latest = (0..thread_slots())
            .map(|_| {
                Arc::new(LatestView {
                    inner: inner.clone(),
                    cursors: cursors.clone(),
                })
            })
            .collect();
        RocksEngine {
            inner,
            cursors,
            latest,
        }
    }

    /// The directory the database lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// What the open dropped from a damaged write-ahead log, when it was
    /// opened with [`WalRecovery::SalvagePrefix`] and the log was damaged;
    /// `None` otherwise.
    pub fn salvage_report(&self) -> Option<&SalvageReport> {
        self.inner.salvage.as_ref()
    }

    /// The underlying RocksDB handle, for benchmarks and tools. Keys written
    /// through it bypass the data prefix, and the engine's own bookkeeping
    /// of what [`Engine::write`] writes (the in-memory mirror of the lock
    /// CF, the write-CF epochs and ts ceilings): write data through
    /// [`Engine::write`] only.
    pub fn raw_db(&self) -> &DB {
        &self.inner.db
    }

    /// A commit ts that no write-CF record on disk exceeds, and that
    /// exceeds the newest one by at most about 256 ms of TSO timestamps
    /// (records whose key carries no ts aside): a timestamp oracle started
    /// above it hands out no timestamp at or below a commit in the data.
    pub fn persisted_ts_ceiling(&self) -> u64 {
        self.inner.persisted_ceiling.load(Ordering::SeqCst)
    }

    /// Flushes every memtable to SST files and waits for it. Also drops
    /// the idle cursors of [`Engine::latest`] views, which would otherwise
    /// keep the flushed memtables in memory until their next use.
    pub fn flush(&self) -> Result<()> {
        for cf in Cf::ALL {
            // `notify` may be missing from a read-only open of an old
            // database.
            if let Some(cf) = self.inner.db.cf_handle(cf.name()) {
                self.inner.db.flush_cf(cf)?;
            }
        }
        self.cursors.clear();
        Ok(())
    }
}

/// Creates the directory of a new database; a read-only open checks that
/// one is there instead (RocksDB would say "IO error: No such file or
/// directory" about a file inside; this names the directory).
fn prepare_dir(path: &Path, read_only: bool) -> Result<()> {
    if read_only {
        std::fs::metadata(path.join("CURRENT")).map_err(|source| Error::Io {
            op: "open read-only (no database here)",
            path: path.to_path_buf(),
            source,
        })?;
    } else {
        std::fs::create_dir_all(path).map_err(|source| Error::Io {
            op: "create directory",
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// The column families to open. A read-only open cannot create one: a
/// database made before `notify` existed is opened without it (and holds
/// no notification).
fn opened_cfs(path: &Path, read_only: bool) -> Vec<Cf> {
    let present = if read_only {
        DB::list_cf(&Options::default(), path).unwrap_or_default()
    } else {
        Vec::new()
    };
    Cf::ALL
        .into_iter()
        .filter(|cf| !read_only || *cf != Cf::Notify || present.iter().any(|n| n == cf.name()))
        .collect()
}

/// What opening a database takes, for each try at it.
struct Opener<'a> {
    path: &'a Path,
    options: &'a RocksOptions,
    cfs: Vec<Cf>,
    cache: Cache,
    /// The GC filter's state, shared with the write CF's compaction filter.
    gc: &'a Arc<gc_filter::GcShared>,
    read_only: bool,
}

impl Opener<'_> {
    /// Opens the database, recovering its write-ahead log. A torn last
    /// record (a write cut short, never acknowledged) is dropped; a damaged
    /// record before the end fails the open. RocksDB's default,
    /// point-in-time recovery, stops at the damage and drops every record
    /// after it without a word: commits acknowledged long before the crash.
    /// It is used only when asked to ([`WalRecovery::SalvagePrefix`]), and
    /// reported.
    fn open_recovering(&self) -> Result<(DB, Option<SalvageReport>)> {
        match self.open(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords) {
            Err(Error::CorruptedAtOpen { detail, .. })
                if self.options.wal_recovery == WalRecovery::SalvagePrefix && !self.read_only =>
            {
                let logs_kept = keep_logs(self.path)?;
                // Damage elsewhere (a table file, the manifest) fails this
                // open too: the copies of the logs are then of no use.
                let db = self
                    .open(rocksdb::DBRecoveryMode::PointInTime)
                    .inspect_err(|_| {
                        let _ = std::fs::remove_dir_all(&logs_kept);
                    })?;
                let salvage = SalvageReport {
                    damage: detail,
                    logs_kept,
                    last_sequence: db.latest_sequence_number(),
                };
                Ok((db, Some(salvage)))
            }
            other => Ok((other?, None)),
        }
    }

    /// Opens the database once, recovering its log in `mode`.
    fn open(&self, mode: rocksdb::DBRecoveryMode) -> Result<DB> {
        let cfs = self
            .cfs
            .iter()
            .map(|&cf| {
                let mut opts = cf_options(cf, self.options, &self.cache)?;
                if cf == Cf::Write {
                    gc_filter::install(&mut opts, self.gc);
                }
                Ok(ColumnFamilyDescriptor::new(cf.name(), opts))
            })
            .collect::<Result<Vec<_>>>()?;
        let db_options = db_options(self.options, mode);
        let opened = if self.read_only {
            DB::open_cf_descriptors_read_only(&db_options, self.path, cfs, false)
        } else {
            DB::open_cf_descriptors(&db_options, self.path, cfs)
        };
        opened.map_err(|e| {
            if e.kind() == rocksdb::ErrorKind::Corruption {
                Error::CorruptedAtOpen {
                    path: self.path.to_path_buf(),
                    detail: e.into_string(),
                }
            } else {
                Error::from(e)
            }
        })
    }
}

/// The write-CF ts ceiling of the records on disk. A database without
/// one (made before percolate kept it, or by another program) has its
/// write CF read once to find the newest commit ts, which is then kept.
fn persisted_ts_ceiling(db: &DB, read_only: bool) -> Result<u64> {
    let default = handle(db, Cf::Default)?;
    if let Some(value) = db.get_pinned_cf(default, TS_CEILING_KEY)? {
        return match <[u8; 8]>::try_from(&value[..]) {
            Ok(bytes) => Ok(u64::from_be_bytes(bytes)),
            Err(_) => Err(Error::Corruption {
                what: "write-CF ts ceiling",
                key: TS_CEILING_KEY.to_vec(),
                value: value.to_vec(),
            }),
        };
    }
    let mut read = ReadOptions::default();
    read.set_iterate_lower_bound(vec![DATA_PREFIX]);
    read.set_iterate_upper_bound(vec![DATA_END]);
    read.set_total_order_seek(true);
    read.fill_cache(false);
    let mut iter = db.raw_iterator_cf_opt(handle(db, Cf::Write)?, read);
    iter.seek_to_first();
    let mut newest = 0;
    while let Some(key) = iter.key() {
        if crate::write_key_prefix(&key[1..]).is_some() {
            newest = newest.max(crate::epochs::commit_ts(&key[1..]));
        }
        iter.next();
    }
    iter.status()?;
    // Kept for the next open; an empty write CF needs none (the first
    // write of a record writes it), so a database that never holds a
    // transactional record never holds the key either. A read-only open
    // writes nothing: the scan serves it alone.
    if newest > 0 && !read_only {
        db.put_cf(default, TS_CEILING_KEY, newest.to_be_bytes())?;
    }
    Ok(newest)
}

/// Every lock in the lock CF, keys without the data prefix.
fn stored_locks(db: &DB) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut read = ReadOptions::default();
    read.set_iterate_lower_bound(vec![DATA_PREFIX]);
    read.set_iterate_upper_bound(vec![DATA_END]);
    read.fill_cache(false);
    let mut iter = db.raw_iterator_cf_opt(handle(db, Cf::Lock)?, read);
    iter.seek_to_first();
    let mut locks = Vec::new();
    while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
        locks.push((key[1..].to_vec(), value.to_vec()));
        iter.next();
    }
    iter.status()?;
    Ok(locks)
}

/// Keeps the write-ahead log files of the database in `path`, as they are,
/// in a new directory beside it (`<path>.wal-<unix ms>`): hard links where
/// the file system allows, copies elsewhere. Returns the directory.
fn keep_logs(path: &Path) -> Result<PathBuf> {
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { op, path, source }
    };
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".wal-{ms}"));
    let kept = path.with_file_name(name);
    std::fs::create_dir(&kept).map_err(io("create directory", &kept))?;
    for entry in std::fs::read_dir(path).map_err(io("list directory", path))? {
        let from = entry.map_err(io("list directory", path))?.path();
        if from.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let to = kept.join(from.file_name().unwrap_or_default());
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).map_err(io("copy", &from))?;
        }
    }
    Ok(kept)
}

fn db_options(options: &RocksOptions, recovery: rocksdb::DBRecoveryMode) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(options.background_jobs);
    // Smooth out write-back of SSTs and the WAL instead of large bursts.
    opts.set_bytes_per_sync(1 << 20);
    opts.set_wal_bytes_per_sync(512 << 10);
    // Concurrent writers (the scheduler's workers, the group-commit writer)
    // overlap one write group's WAL append with the previous group's
    // memtable inserts. `benches/storage.rs`, 1-key prewrites, 2 workers /
    // 1: 1.11x without, 1.25x-1.72x with (five runs a few minutes apart).
    opts.set_enable_pipelined_write(!options.unordered_writes);
    opts.set_allow_concurrent_memtable_write(
        options.concurrent_memtable_writes || options.unordered_writes,
    );
    opts.set_unordered_write(options.unordered_writes);
    opts.set_wal_recovery_mode(recovery);
    if options.statistics {
        opts.enable_statistics();
        opts.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptHistogramOrTimers);
    }
    opts
}

fn cf_options(cf: Cf, options: &RocksOptions, cache: &Cache) -> Result<Options> {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(options.bloom_bits_per_key, false);
    // Newest table format: smaller index and filter blocks.
    table.set_format_version(5);
    // Insert hints (see the module docs), for serial memtable inserts and
    // (through a memtable of the glue's) for concurrent ones. Settable
    // only by name.
    glue::register_insert_hint();
    let hints = match cf {
        Cf::Lock => Some(LOCK_INSERT_HINTS),
        Cf::Write if options.write_insert_hints => Some(WRITE_INSERT_HINTS),
        _ => None,
    };
    let mut opts = match hints {
        Some(hints) if options.unordered_writes => Options::default()
            .get_options_from_string(format!("{};{}", hints.serial, hints.concurrent))?,
        Some(hints) => Options::default().get_options_from_string(hints.serial)?,
        None => Options::default(),
    };
    opts.set_write_buffer_size(if cf == Cf::Lock {
        options.lock_write_buffer_bytes
    } else {
        options.write_buffer_bytes
    });
    opts.set_compression_per_level(&options.compression.per_level());
    if cf.has_ts_suffix_prefix() {
        // Filters are built on `z + encoded user key`; the whole key with its
        // ts is never probed on its own.
        table.set_whole_key_filtering(false);
        opts.set_prefix_extractor(SliceTransform::create(
            "percolate_strip_ts",
            strip_ts,
            Some(has_ts),
        ));
        opts.set_memtable_prefix_bloom_ratio(0.1);
    } else {
        // Most lock-CF probes are for absent keys (prewrite, reads), and
        // the memtable fills with tombstones of released locks: a memtable
        // bloom filter answers them without walking the skip list.
        opts.set_memtable_whole_key_filtering(true);
        opts.set_memtable_prefix_bloom_ratio(0.1);
    }
    opts.set_block_based_table_factory(&table);
    Ok(opts)
}

/// The options that give a CF's memtable inserts hints: one for serial
/// inserts, one for concurrent ones.
struct InsertHints {
    /// RocksDB's own hints, which only serial inserts use.
    serial: &'static str,
    /// A skip list that hands concurrent inserts a hint
    /// (`glue/insert_hint.cc`).
    concurrent: &'static str,
}

/// Memtable insert hints for the lock CF: one insert position kept for
/// all data keys (their one-byte prefix `z`).
const LOCK_INSERT_HINTS: InsertHints = InsertHints {
    serial: "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.1",
    concurrent: "memtable=percolate.HintedSkipList.One",
};

/// Memtable insert hints for the write CF: one insert position kept per
/// user key (`glue/insert_hint.cc`).
const WRITE_INSERT_HINTS: InsertHints = InsertHints {
    serial: "memtable_insert_with_hint_prefix_extractor=percolate.StripTs",
    concurrent: "memtable=percolate.HintedSkipList.StripTs",
};

/// The C++ side of [`RocksOptions::write_insert_hints`]
/// (`glue/insert_hint.cc`, compiled by `build.rs`).
#[allow(unsafe_code)]
mod glue {
    unsafe extern "C" {
        fn percolate_register_insert_hint();
    }

    /// Registers the transform `percolate.StripTs` (the stored key
    /// without its ts) with RocksDB's object registry, once per process,
    /// so that an options string can name it.
    pub(super) fn register_insert_hint() {
        // SAFETY: takes no arguments, registers at most once (under a
        // `std::call_once`) and may be called from any thread.
        unsafe { percolate_register_insert_hint() }
    }
}

/// The prefix extractor of the write CF: the stored key without its ts.
fn strip_ts(key: &[u8]) -> &[u8] {
    &key[..key.len().saturating_sub(TS_SUFFIX_LEN)]
}

/// A stored write-CF key has the data prefix, a user key and a ts.
fn has_ts(key: &[u8]) -> bool {
    key.len() > TS_SUFFIX_LEN
}

fn handle(db: &DB, cf: Cf) -> Result<&ColumnFamily> {
    db.cf_handle(cf.name())
        .ok_or(Error::MissingColumnFamily { cf: cf.name() })
}

/// A stored key built on the stack: most keys fit, and RocksDB copies
/// the key it is given, so a write or a point read allocates none for it.
type StoredKey = smallvec::SmallVec<[u8; 96]>;

/// Sets `buf` to the stored form of `key`.
fn set_data_key(buf: &mut StoredKey, key: &[u8]) {
    buf.clear();
    buf.push(DATA_PREFIX);
    buf.extend_from_slice(key);
}

/// The stored form of `key`, on the stack where it fits.
fn stored_key(key: &[u8]) -> StoredKey {
    let mut stored = StoredKey::new();
    set_data_key(&mut stored, key);
    stored
}

fn data_key(key: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(key.len() + 1);
    stored.push(DATA_PREFIX);
    stored.extend_from_slice(key);
    stored
}

impl Engine for RocksEngine {
    fn stats(&self) -> Option<crate::EngineStats> {
        Some(crate::stats::read(&self.inner.db))
    }

    fn gc_safe_point(&self) -> u64 {
        RocksEngine::gc_safe_point(self)
    }

    type Snap = RocksSnapshot;

    fn snapshot(&self) -> RocksSnapshot {
        RocksSnapshot {
            view: View::Pinned(Arc::new(SnapshotCell::new(self.inner.clone(), |inner| {
                let quiet = inner.locks.quiet();
                let snapshot = inner.db.snapshot();
                let no_locks = quiet.is_some_and(|token| inner.locks.still_quiet(token));
                if let Some(gate) = &inner.gate {
                    gate.wait_for_earlier();
                }
                let mut point_read = ReadOptions::default();
                point_read.set_snapshot(&snapshot);
                SnapshotParts {
                    point_read,
                    no_locks,
                    snapshot,
                }
            }))),
        }
    }

    /// No RocksDB snapshot: gets read the latest data, and write-CF cursors
    /// (point-read cursors in prefix mode, and total-order scan cursors,
    /// which apply their bounds themselves) come from a pool and are
    /// refreshed to the latest data (RocksDB's `Iterator::Refresh`, which
    /// only moves the read sequence number while no flush or compaction has
    /// changed the files) instead of being built anew for each read.
    fn latest(&self) -> RocksSnapshot {
        RocksSnapshot {
            view: View::Latest(self.latest[thread_slot() % self.latest.len()].clone()),
        }
    }

    fn write_epoch(&self, prefix: &[u8]) -> Option<u64> {
        self.inner.epochs.get(prefix)
    }

    fn write_ts_ceiling(&self, prefix: &[u8]) -> Option<u64> {
        Some(self.inner.epochs.ts_ceiling(prefix))
    }

    fn prefetch_bookkeeping(&self, prefix: &[u8]) {
        self.inner.epochs.prefetch(prefix);
    }

    /// From the lock mirror, which holds a lock from just after it is
    /// written until just after it is deleted.
    fn holds_no_locks(&self) -> bool {
        self.inner.locks.is_empty()
    }

    /// Persisted, and applied by a compaction filter on the write CF (see
    /// [`RocksEngine::gc_safe_point`]).
    fn set_gc_safe_point(&self, safe_point: u64, decode: crate::GcDecoder) -> Result<bool> {
        self.raise_gc_safe_point(safe_point, decode)
    }

    fn take_gc_leftovers(&self) -> Result<Vec<Vec<u8>>> {
        self.take_leftovers()
    }

    fn write(&self, batch: &WriteBatch, options: WriteOptions) -> Result<()> {
        self.write_mirrored(Mirrored::Copied(batch), options)
    }

    /// As `write`, with the lock mirror taking the locks' bytes.
    fn write_taking_locks(&self, batch: &mut WriteBatch, options: WriteOptions) -> Result<()> {
        self.write_mirrored(Mirrored::Taken(batch), options)
    }
}

/// A batch to write, and how the lock mirror gets its locks: copied, or
/// taken out of the batch.
enum Mirrored<'a> {
    Copied(&'a WriteBatch),
    Taken(&'a mut WriteBatch),
}

impl Mirrored<'_> {
    fn batch(&self) -> &WriteBatch {
        match self {
            Mirrored::Copied(batch) => batch,
            Mirrored::Taken(batch) => batch,
        }
    }
}

impl RocksEngine {
    /// Writes the batch to RocksDB and, once written, its locks to the
    /// mirror, with the bookkeeping around both.
    fn write_mirrored(&self, mut batch: Mirrored<'_>, options: WriteOptions) -> Result<()> {
        // Before the bookkeeping too: the lock mirror alone holds
        // pessimistic locks, which would otherwise be "written" there.
        if self.inner.read_only {
            return Err(Error::ReadOnly {
                path: self.inner.path.clone(),
            });
        }
        let puts_locks = self.inner.locks.begin_puts(batch.batch());
        self.inner.epochs.begin(batch.batch());
        let written = self.apply(batch.batch(), options);
        if written.is_ok() {
            match &mut batch {
                Mirrored::Copied(batch) => self.inner.locks.apply(batch),
                Mirrored::Taken(batch) => self.inner.locks.apply_taking(batch),
            }
        }
        // Only the batch's write-CF records are read again here.
        self.inner.epochs.end(batch.batch());
        if puts_locks {
            self.inner.locks.end_puts();
        }
        written
    }

    /// Writes `batch` to RocksDB, raising the persisted ts ceiling with it
    /// where its records pass it.
    fn apply(&self, batch: &WriteBatch, options: WriteOptions) -> Result<()> {
        let mut handles = Handles::new(&self.inner.db);
        let (wb, newest) = self.rocks_batch(batch, &mut handles)?;
        // A batch of memory-only locks alone writes nothing.
        let Some(mut wb) = wb else {
            return Ok(());
        };
        let inner = &self.inner;
        let opts = &inner.write_options[usize::from(options.durability == Durability::Sync)];
        // Counted until RocksDB returns, with the whole batch inserted.
        let _in_flight = inner.gate.as_ref().map(WriteGate::enter);
        if newest > inner.persisted_ceiling.load(Ordering::SeqCst) {
            // The batch's records go above the ceiling on disk: raise it in
            // the same atomic write. Writes below it need not wait for
            // this one, which a crash can only lose together with them.
            let _raising = inner.raising.lock();
            if newest > inner.persisted_ceiling.load(Ordering::SeqCst) {
                let ceiling = newest.saturating_add(TS_CEILING_STEP);
                wb.put_cf(
                    handles.get(Cf::Default)?,
                    TS_CEILING_KEY,
                    ceiling.to_be_bytes(),
                );
                inner.db.write_opt(wb, opts)?;
                inner.persisted_ceiling.store(ceiling, Ordering::SeqCst);
                return Ok(());
            }
        }
        inner.db.write_opt(wb, opts)?;
        Ok(())
    }

    /// `batch` as a RocksDB write batch (memory-only locks left to the lock
    /// mirror), with the newest commit ts it writes (0 if none); no batch
    /// when nothing is left for RocksDB (a pessimistic lock request's
    /// batch), so that such a write allocates none.
    fn rocks_batch(
        &self,
        batch: &WriteBatch,
        handles: &mut Handles<'_>,
    ) -> Result<(Option<rocksdb::WriteBatch>, u64)> {
        let mut newest = 0;
        let mut made = None;
        // Room for every record up front: the batch is one growing string,
        // re-copied at each doubling otherwise.
        let size = rocks_batch_size(batch);
        fn made_for(
            made: &mut Option<rocksdb::WriteBatch>,
            size: usize,
        ) -> &mut rocksdb::WriteBatch {
            made.get_or_insert_with(|| rocksdb::WriteBatch::with_capacity_bytes(size))
        }
        // RocksDB copies keys into the batch: one scratch buffer serves all.
        let mut stored = StoredKey::new();
        let locks = &self.inner.locks;
        let modifies = batch.modifies();
        // Lock-CF puts for RocksDB so far in this batch: the mirror's state
        // before the batch does not know of them (it takes the batch in
        // order once written), so a later record of the same key in the
        // batch looks for them here. The set is built at the first such
        // look-up, from the records before it, and kept up to date after:
        // a batch with no lock put for RocksDB (a 1PC commit) never builds
        // it, and a group of many commands builds it once.
        let mut rocks_lock_puts = false;
        let mut put_keys: Option<HashSet<&[u8]>> = None;
        for (i, modify) in modifies.iter().enumerate() {
            match modify {
                Modify::Put { cf, key, value } if is_memory_only(*cf, value) => {
                    // Kept by the lock mirror only. A lock RocksDB holds
                    // for the key (one from before this process, or one
                    // put earlier in this batch) goes, so that no key is
                    // in both.
                    if locks.holds_in_rocksdb(key)
                        || (rocks_lock_puts && put_here(&mut put_keys, modifies, i, key))
                    {
                        set_data_key(&mut stored, key);
                        made_for(&mut made, size).delete_cf(handles.get(*cf)?, &stored);
                    }
                }
                Modify::Put { cf, key, value } => {
                    if *cf == Cf::Lock {
                        rocks_lock_puts = true;
                        if let Some(put_keys) = &mut put_keys {
                            put_keys.insert(key);
                        }
                    }
                    // A key with no ts suffix is no commit (its bucket's
                    // in-memory ceiling is already the largest ts).
                    if *cf == Cf::Write && crate::write_key_prefix(key).is_some() {
                        newest = newest.max(crate::epochs::commit_ts(key));
                    }
                    set_data_key(&mut stored, key);
                    made_for(&mut made, size).put_cf(handles.get(*cf)?, &stored, value)
                }
                // Nothing to delete from RocksDB (unless put there earlier
                // in this batch).
                Modify::Delete { cf: Cf::Lock, key }
                    if locks.holds_memory_only(key)
                        && !(rocks_lock_puts && put_here(&mut put_keys, modifies, i, key)) => {}
                Modify::Delete { cf, key } => {
                    set_data_key(&mut stored, key);
                    made_for(&mut made, size).delete_cf(handles.get(*cf)?, &stored)
                }
                // RocksDB rejects an inverted range; it removes nothing.
                Modify::DeleteRange { start, end, .. } if start >= end => {}
                Modify::DeleteRange { cf, start, end } => made_for(&mut made, size)
                    .delete_range_cf(handles.get(*cf)?, data_key(start), data_key(end)),
            }
        }
        Ok((made, newest))
    }
}

/// The column family handles of one write, each looked up (by name) the
/// first time the write needs it: a write touches one or two of them.
struct Handles<'a> {
    db: &'a DB,
    found: [Option<&'a ColumnFamily>; Cf::ALL.len()],
}

impl<'a> Handles<'a> {
    fn new(db: &'a DB) -> Self {
        Handles {
            db,
            found: [None; Cf::ALL.len()],
        }
    }

    fn get(&mut self, cf: Cf) -> Result<&'a ColumnFamily> {
        let slot = &mut self.found[cf.index()];
        if let Some(found) = slot {
            return Ok(found);
        }
        Ok(*slot.insert(handle(self.db, cf)?))
    }
}

/// The bytes `batch` takes as a RocksDB write batch: a 12-byte header, and
/// per record a tag, a CF id and two lengths (up to 11 bytes together), the
/// data prefix and the key and value.
fn rocks_batch_size(batch: &WriteBatch) -> usize {
    12 + batch.size() + 14 * batch.len()
}

/// Whether a record before `modifies[i]` puts the lock of `key` into
/// RocksDB: `set` holds the keys of such puts once built (here, from the
/// records before `i`, at the first call; the caller adds later ones).
fn put_here<'a>(
    set: &mut Option<HashSet<&'a [u8]>>,
    modifies: &'a [Modify],
    i: usize,
    key: &[u8],
) -> bool {
    set.get_or_insert_with(|| {
        modifies[..i]
            .iter()
            .filter_map(|earlier| match earlier {
                Modify::Put {
                    cf: Cf::Lock,
                    key,
                    value,
                } if !is_memory_only(Cf::Lock, value) => Some(key.as_slice()),
                _ => None,
            })
            .collect()
    })
    .contains(key)
}

/// A RocksDB snapshot and the read options of its point reads.
///
/// Invariant: `point_read` refers to `snapshot`, so it is declared first
/// and dropped before the snapshot is released.
struct SnapshotParts<'a> {
    /// Read options pinned to `snapshot`, made once instead of per get.
    point_read: ReadOptions,
    /// The snapshot holds no lock in the lock CF (see
    /// `LockMirror::quiet`): a lock get answers from the memory-only locks
    /// without asking RocksDB.
    no_locks: bool,
    snapshot: SnapshotWithThreadMode<'a, DB>,
}

self_cell::self_cell!(
    /// A RocksDB snapshot that owns (a share of) its database, so that it can
    /// move between threads and outlive the engine handle it came from.
    struct SnapshotCell {
        owner: Arc<Inner>,
        #[covariant]
        dependent: SnapshotParts,
    }
);

/// A view of a [`RocksEngine`]: a snapshot ([`Engine::snapshot`]) or the
/// latest data ([`Engine::latest`]). Cloning is cheap and gives the same
/// view.
#[derive(Clone)]
pub struct RocksSnapshot {
    view: View,
}

#[derive(Clone)]
enum View {
    /// A RocksDB snapshot.
    Pinned(Arc<SnapshotCell>),
    /// The latest data, and the pool its write-CF cursors come from.
    Latest(Arc<LatestView>),
}

impl std::fmt::Debug for RocksSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.view {
            View::Pinned(_) => "snapshot",
            View::Latest(..) => "latest",
        };
        f.debug_struct("RocksSnapshot")
            .field("view", &kind)
            .finish_non_exhaustive()
    }
}

impl RocksSnapshot {
    fn inner(&self) -> &Inner {
        match &self.view {
            View::Pinned(cell) => cell.borrow_owner(),
            View::Latest(latest) => &latest.inner,
        }
    }

    fn db(&self) -> &DB {
        &self.inner().db
    }
}

/// The read options of an iterator with `options`.
fn iter_read_options(options: &IterOptions) -> ReadOptions {
    let mut read = ReadOptions::default();
    read.set_iterate_lower_bound(match &options.lower_bound {
        Some(lower) => data_key(lower),
        None => vec![DATA_PREFIX],
    });
    read.set_iterate_upper_bound(match &options.upper_bound {
        Some(upper) => data_key(upper),
        None => vec![DATA_END],
    });
    read.fill_cache(options.fill_cache);
    if let Some(limit) = options.max_skipped {
        // RocksDB reads 0 as "no limit": a limit of 0 becomes 1.
        read.set_max_skippable_internal_keys(limit.max(1));
    }
    match options.seek_mode {
        SeekMode::TotalOrder => read.set_total_order_seek(true),
        SeekMode::Prefix => read.set_prefix_same_as_start(true),
    }
    read
}

/// The kind of pooled cursor a latest view's cursor with `options` is, if
/// the pool keeps that kind: write-CF cursors with no skip limit, filling
/// the cache. In prefix mode the point-read cursor, which every point read
/// opens, with no bounds; in total order the scan cursor, whose bounds the
/// [`RocksIterator`] applies itself (a RocksDB cursor's bounds are fixed
/// when it is built), so that one cursor serves scans of any range.
fn pooled_kind(cf: Cf, options: &IterOptions) -> Option<PooledKind> {
    if cf != Cf::Write || options.max_skipped.is_some() || !options.fill_cache {
        return None;
    }
    match options.seek_mode {
        SeekMode::Prefix if options.lower_bound.is_none() && options.upper_bound.is_none() => {
            Some(PooledKind::PointRead)
        }
        SeekMode::Prefix => None,
        SeekMode::TotalOrder => Some(PooledKind::Scan),
    }
}

/// A cursor of `kind` for a latest view: an idle one from the pool,
/// refreshed, or a new one. Built without bounds: the iterator applies
/// `options`' bounds itself.
fn pooled_cell(
    latest: &LatestView,
    kind: PooledKind,
    cf: Cf,
    options: &IterOptions,
) -> Result<IterCell> {
    let mut unbounded = options.clone();
    (unbounded.lower_bound, unbounded.upper_bound) = (None, None);
    if let Some(mut cell) = latest.cursors.take(kind) {
        if cell.with_dependent_mut(|_, it| it.refresh()).is_ok() {
            return Ok(cell);
        }
        // Build a new one instead.
    }
    IterCell::open(IterSource::Latest(latest.inner.clone()), cf, &unbounded)
}

/// The kinds of cursor a [`CursorPool`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PooledKind {
    PointRead = 0,
    Scan = 1,
}

impl Snapshot for RocksSnapshot {
    type Iter = RocksIterator;

    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let read = match &self.view {
            View::Pinned(cell) if cf == Cf::Lock && cell.borrow_dependent().no_locks => {
                return Ok(cell.borrow_owner().locks.memory_only_get(key));
            }
            View::Pinned(cell) => &cell.borrow_dependent().point_read,
            View::Latest(latest) if cf == Cf::Lock => return Ok(latest.inner.locks.get(key)),
            View::Latest(latest) => &latest.inner.latest_read,
        };
        let db = self.db();
        let handle = handle(db, cf)?;
        let value = db.get_pinned_cf_opt(handle, stored_key(key), read)?;
        Ok(match value {
            Some(value) => Some(value.to_vec()),
            // A snapshot sees memory-only locks as they are now.
            None if cf == Cf::Lock => self.inner().locks.memory_only_get(key),
            None => None,
        })
    }

    /// Pessimistic locks are the memory-only ones: RocksDB and the
    /// mirror's other half hold every lock that can stop a read.
    fn get_read_lock(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let read = match &self.view {
            View::Pinned(cell) if cell.borrow_dependent().no_locks => return Ok(None),
            View::Pinned(cell) => &cell.borrow_dependent().point_read,
            View::Latest(latest) => return Ok(latest.inner.locks.get_held_in_rocksdb(key)),
        };
        let db = self.db();
        let value = db.get_pinned_cf_opt(handle(db, Cf::Lock)?, stored_key(key), read)?;
        Ok(value.map(|value| value.to_vec()))
    }

    fn write_epoch(&self, prefix: &[u8]) -> Option<u64> {
        self.inner().epochs.get(prefix)
    }

    /// Lock-CF gets of a latest view come from the lock mirror.
    fn gets_from_memory(&self, cf: Cf) -> bool {
        cf == Cf::Lock && matches!(self.view, View::Latest(..))
    }

    fn write_ts_ceiling(&self, prefix: &[u8]) -> Option<u64> {
        Some(self.inner().epochs.ts_ceiling(prefix))
    }

    fn iter(&self, cf: Cf, options: IterOptions) -> Result<RocksIterator> {
        let pooled = pooled_kind(cf, &options);
        let (cell, pool) = match &self.view {
            View::Pinned(cell) => (
                IterCell::open(IterSource::Snapshot(cell.clone()), cf, &options)?,
                None,
            ),
            View::Latest(latest) if let Some(kind) = pooled => {
                let cell = pooled_cell(latest, kind, cf, &options)?;
                (cell, Some((latest.cursors.clone(), kind)))
            }
            View::Latest(latest) => (
                IterCell::open(IterSource::Latest(latest.inner.clone()), cf, &options)?,
                None,
            ),
        };
        // Lock-CF cursors see memory-only locks as they are when opened.
        let overlay = if cf == Cf::Lock {
            self.inner()
                .locks
                .memory_only_range(
                    options.lower_bound.as_deref(),
                    options.upper_bound.as_deref(),
                )
                .map(|entries| Overlay {
                    entries,
                    at: None,
                    forward: true,
                    valid: false,
                    on_overlay: false,
                })
        } else {
            None
        };
        let bounds = match pool {
            Some((_, PooledKind::Scan)) => Some(Bounds {
                lower: options.lower_bound,
                upper: options.upper_bound,
            }),
            _ => None,
        };
        Ok(RocksIterator {
            cell: Some(cell),
            pool,
            target: Vec::new(),
            valid: false,
            overlay,
            bounds,
        })
    }
}

/// What an iterator reads and keeps alive.
enum IterSource {
    /// A snapshot.
    Snapshot(Arc<SnapshotCell>),
    /// The latest data of the database.
    Latest(Arc<Inner>),
}

type DbIterator<'a> = DBRawIteratorWithThreadMode<'a, DB>;

self_cell::self_cell!(
    /// A raw RocksDB iterator together with what it reads.
    struct IterCell {
        owner: IterSource,
        #[covariant]
        dependent: DbIterator,
    }
);

impl IterCell {
    fn open(source: IterSource, cf: Cf, options: &IterOptions) -> Result<IterCell> {
        let read = iter_read_options(options);
        IterCell::try_new(source, |source| {
            Ok::<_, Error>(match source {
                IterSource::Snapshot(cell) => {
                    let handle = handle(&cell.borrow_owner().db, cf)?;
                    cell.borrow_dependent()
                        .snapshot
                        .raw_iterator_cf_opt(handle, read)
                }
                IterSource::Latest(inner) => {
                    let handle = handle(&inner.db, cf)?;
                    inner.db.raw_iterator_cf_opt(handle, read)
                }
            })
        })
    }
}

/// Idle write-CF cursors of latest views, for the next point read to
/// refresh instead of building its own.
///
/// Sharded by thread, so that threads reading at once do not contend on
/// one lock, and bounded: an idle cursor pins the memtables and files that
/// were current when it was last used (RocksDB frees them when it is next
/// refreshed or dropped), so the pool keeps few. [`RocksEngine::flush`]
/// empties it.
struct CursorPool {
    /// Per thread slot, the idle cursors of each [`PooledKind`].
    shards: Box<[CachePadded<Mutex<IdleCursors>>]>,
}

/// A shard's idle cursors, by [`PooledKind`].
type IdleCursors = [Vec<IterCell>; 2];

/// Idle cursors of one kind one shard keeps.
const CURSORS_PER_SHARD: usize = 2;

impl CursorPool {
    fn new() -> Self {
        CursorPool {
            shards: (0..thread_slots())
                .map(|_| CachePadded::default())
                .collect(),
        }
    }

    fn shard(&self) -> &Mutex<IdleCursors> {
        &self.shards[thread_slot() % self.shards.len()]
    }

    fn take(&self, kind: PooledKind) -> Option<IterCell> {
        self.shard().lock()[kind as usize].pop()
    }

    fn put(&self, kind: PooledKind, cell: IterCell) {
        let mut shard = self.shard().lock();
        let idle = &mut shard[kind as usize];
        if idle.len() < CURSORS_PER_SHARD {
            idle.push(cell);
        }
    }

    fn clear(&self) {
        for shard in self.shards.iter() {
            for idle in shard.lock().iter_mut() {
                idle.clear();
            }
        }
    }
}

/// How many per-thread copies of a shared structure to keep: the machine's
/// threads, at least 2 and at most 64.
fn thread_slots() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get().clamp(2, 64))
}

/// A small number that tells this thread from the others.
fn thread_slot() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

/// An iterator over a [`RocksSnapshot`].
pub struct RocksIterator {
    /// Always `Some` until dropped.
    cell: Option<IterCell>,
    /// Where the cursor goes back when dropped, for a pooled one.
    pool: Option<(Arc<CursorPool>, PooledKind)>,
    /// Scratch buffer for `z + seek target`.
    target: Vec<u8>,
    /// Whether the cursor rests on a key, as of its last move. Cached: the
    /// MVCC readers ask far more often than they move.
    valid: bool,
    /// A lock-CF cursor's memory-only locks, merged with RocksDB's.
    overlay: Option<Overlay>,
    /// The bounds a pooled scan cursor applies itself.
    bounds: Option<Bounds>,
}

/// A cursor's bounds in user keys, applied as RocksDB's
/// `iterate_lower_bound` and `iterate_upper_bound` are: a seek below the
/// lower bound lands at it, a backward seek at or above the upper bound
/// lands below it, and the cursor is invalid outside them.
struct Bounds {
    /// Inclusive.
    lower: Option<Vec<u8>>,
    /// Exclusive.
    upper: Option<Vec<u8>>,
}

impl Drop for RocksIterator {
    fn drop(&mut self) {
        if let (Some((pool, kind)), Some(cell)) = (&self.pool, self.cell.take()) {
            pool.put(*kind, cell);
        }
    }
}

impl RocksIterator {
    fn cell(&self) -> &IterCell {
        self.cell
            .as_ref()
            .expect("an iterator holds its cell until dropped")
    }

    fn cell_mut(&mut self) -> &mut IterCell {
        self.cell
            .as_mut()
            .expect("an iterator holds its cell until dropped")
    }

    fn set_target(&mut self, key: &[u8]) {
        self.target.clear();
        self.target.push(DATA_PREFIX);
        self.target.extend_from_slice(key);
    }

    /// Records whether the cursor rests on a key after a move; an invalid
    /// cursor reports the error that stopped it, if any. (A valid cursor
    /// has no error, so the common case costs one call.)
    fn status(&mut self) -> Result<bool> {
        let it = self
            .cell
            .as_ref()
            .expect("an iterator holds its cell until dropped")
            .borrow_dependent();
        self.valid = it.valid();
        if !self.valid {
            it.status().map_err(|e| match e.kind() {
                rocksdb::ErrorKind::Incomplete => Error::Incomplete,
                _ => Error::Rocks(e),
            })?;
        }
        Ok(self.valid)
    }
}

/// The RocksDB cursor's own moves, without the overlay.
impl RocksIterator {
    fn raw_seek(&mut self, key: &[u8]) -> Result<bool> {
        match self.bounds.as_ref().and_then(|b| b.lower.as_ref()) {
            Some(lower) if key < lower.as_slice() => {
                let lower = lower.clone();
                self.set_target(&lower);
            }
            _ => self.set_target(key),
        }
        let (cell, target) = (self.cell.as_mut(), &self.target);
        cell.expect("an iterator holds its cell until dropped")
            .with_dependent_mut(|_, it| it.seek(target));
        self.status()?;
        Ok(self.within_bounds())
    }

    fn raw_seek_for_prev(&mut self, key: &[u8]) -> Result<bool> {
        match self.bounds.as_ref().and_then(|b| b.upper.as_ref()) {
            Some(upper) if key >= upper.as_slice() => {
                let upper = upper.clone();
                self.seek_below(&upper)?;
            }
            _ => {
                self.set_target(key);
                let (cell, target) = (self.cell.as_mut(), &self.target);
                cell.expect("an iterator holds its cell until dropped")
                    .with_dependent_mut(|_, it| it.seek_for_prev(target));
                self.status()?;
            }
        }
        Ok(self.within_bounds())
    }

    /// To the last key below `key`.
    fn seek_below(&mut self, key: &[u8]) -> Result<()> {
        self.set_target(key);
        let (cell, target) = (self.cell.as_mut(), &self.target);
        cell.expect("an iterator holds its cell until dropped")
            .with_dependent_mut(|_, it| it.seek(target));
        if self.status()? {
            self.cell_mut().with_dependent_mut(|_, it| it.prev());
        } else {
            self.cell_mut()
                .with_dependent_mut(|_, it| it.seek_to_last());
        }
        self.status().map(drop)
    }

    fn raw_seek_to_first(&mut self) -> Result<bool> {
        if let Some(lower) = self.bounds.as_ref().and_then(|b| b.lower.clone()) {
            return self.raw_seek(&lower);
        }
        self.cell_mut()
            .with_dependent_mut(|_, it| it.seek_to_first());
        self.status()?;
        Ok(self.within_bounds())
    }

    fn raw_seek_to_last(&mut self) -> Result<bool> {
        if let Some(upper) = self.bounds.as_ref().and_then(|b| b.upper.clone()) {
            self.seek_below(&upper)?;
            return Ok(self.within_bounds());
        }
        self.cell_mut()
            .with_dependent_mut(|_, it| it.seek_to_last());
        self.status()?;
        Ok(self.within_bounds())
    }

    fn raw_next(&mut self) -> Result<bool> {
        if !self.valid {
            return Ok(false);
        }
        self.cell_mut().with_dependent_mut(|_, it| it.next());
        self.status()?;
        Ok(self.within_bound(true))
    }

    fn raw_prev(&mut self) -> Result<bool> {
        if !self.valid {
            return Ok(false);
        }
        self.cell_mut().with_dependent_mut(|_, it| it.prev());
        self.status()?;
        Ok(self.within_bound(false))
    }

    /// [`within_bounds`](Self::within_bounds) after a step from a key
    /// within them: only the bound ahead (the upper one going forward) can
    /// have been crossed, so only it is compared (a scan steps far more
    /// often than it seeks).
    fn within_bound(&mut self, forward: bool) -> bool {
        if let (true, Some(bounds)) = (self.valid, &self.bounds) {
            let key = self.raw_key();
            self.valid = if forward {
                bounds.upper.as_ref().is_none_or(|u| key < u.as_slice())
            } else {
                bounds.lower.as_ref().is_none_or(|l| key >= l.as_slice())
            };
        }
        self.valid
    }

    /// Marks the cursor invalid if it rests outside the bounds it applies
    /// itself; returns whether it is valid.
    fn within_bounds(&mut self) -> bool {
        if let (true, Some(bounds)) = (self.valid, &self.bounds) {
            let key = self.raw_key();
            let below = bounds.lower.as_ref().is_some_and(|l| key < l.as_slice());
            let above = bounds.upper.as_ref().is_some_and(|u| key >= u.as_slice());
            self.valid = !(below || above);
        }
        self.valid
    }

    fn raw_valid(&self) -> Result<bool> {
        Ok(self.valid)
    }

    fn raw_key(&self) -> &[u8] {
        if !self.valid {
            return &[];
        }
        // Stored keys always carry the data prefix: strip it.
        self.cell()
            .borrow_dependent()
            .key()
            .and_then(|k| k.get(1..))
            .unwrap_or(&[])
    }

    fn raw_value(&self) -> &[u8] {
        if !self.valid {
            return &[];
        }
        self.cell().borrow_dependent().value().unwrap_or(&[])
    }
}

/// The cursor's moves: RocksDB's, merged with the overlay of memory-only
/// locks where there is one.
impl EngineIterator for RocksIterator {
    fn seek(&mut self, key: &[u8]) -> Result<bool> {
        self.raw_seek(key)?;
        Ok(self.reposition(true, |o| o.first_at_or_after(key)))
    }

    fn seek_for_prev(&mut self, key: &[u8]) -> Result<bool> {
        self.raw_seek_for_prev(key)?;
        Ok(self.reposition(false, |o| o.last_at_or_before(key)))
    }

    fn seek_to_first(&mut self) -> Result<bool> {
        self.raw_seek_to_first()?;
        Ok(self.reposition(true, |o| (!o.entries.is_empty()).then_some(0)))
    }

    fn seek_to_last(&mut self) -> Result<bool> {
        self.raw_seek_to_last()?;
        Ok(self.reposition(false, |o| o.entries.len().checked_sub(1)))
    }

    fn next(&mut self) -> Result<bool> {
        let Some(o) = &self.overlay else {
            return self.raw_next();
        };
        if !o.valid {
            return Ok(false);
        }
        if !o.forward {
            // Turn around: both sources to the first key after this one.
            let current = self.key().to_vec();
            self.raw_seek(&current)?;
            if self.valid && self.raw_key() == current.as_slice() {
                self.raw_next()?;
            }
            let o = self.overlay.as_mut().expect("checked above");
            o.at = o.first_after(&current);
            o.forward = true;
        } else if o.on_overlay {
            let o = self.overlay.as_mut().expect("checked above");
            o.at = o.at.map(|i| i + 1).filter(|&i| i < o.entries.len());
        } else {
            self.raw_next()?;
        }
        Ok(self.settle())
    }

    fn prev(&mut self) -> Result<bool> {
        let Some(o) = &self.overlay else {
            return self.raw_prev();
        };
        if !o.valid {
            return Ok(false);
        }
        if o.forward {
            // Turn around: both sources to the last key before this one.
            let current = self.key().to_vec();
            self.raw_seek_for_prev(&current)?;
            if self.valid && self.raw_key() == current.as_slice() {
                self.raw_prev()?;
            }
            let o = self.overlay.as_mut().expect("checked above");
            o.at = o.last_before(&current);
            o.forward = false;
        } else if o.on_overlay {
            let o = self.overlay.as_mut().expect("checked above");
            o.at = o.at.and_then(|i| i.checked_sub(1));
        } else {
            self.raw_prev()?;
        }
        Ok(self.settle())
    }

    fn valid(&self) -> Result<bool> {
        match &self.overlay {
            None => self.raw_valid(),
            Some(o) => Ok(o.valid),
        }
    }

    fn key(&self) -> &[u8] {
        match &self.overlay {
            Some(o) if o.valid && o.on_overlay => &o.entries[o.at.expect("on the overlay")].0,
            Some(o) if !o.valid => &[],
            _ => self.raw_key(),
        }
    }

    fn value(&self) -> &[u8] {
        match &self.overlay {
            Some(o) if o.valid && o.on_overlay => &o.entries[o.at.expect("on the overlay")].1,
            Some(o) if !o.valid => &[],
            _ => self.raw_value(),
        }
    }
}

/// Memory-only locks merged into a lock-CF cursor: the ones within its
/// bounds when it was opened, in key order. Their keys are never in
/// RocksDB too (see [`RocksEngine`]'s writes).
struct Overlay {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// The overlay's candidate in the direction of travel: the next entry
    /// going forward, the previous going backward.
    at: Option<usize>,
    forward: bool,
    /// Whether the merged cursor rests on a key, and on which source.
    valid: bool,
    on_overlay: bool,
}

impl Overlay {
    fn first_at_or_after(&self, key: &[u8]) -> Option<usize> {
        let i = self.entries.partition_point(|(k, _)| k.as_slice() < key);
        (i < self.entries.len()).then_some(i)
    }

    fn first_after(&self, key: &[u8]) -> Option<usize> {
        let i = self.entries.partition_point(|(k, _)| k.as_slice() <= key);
        (i < self.entries.len()).then_some(i)
    }

    fn last_at_or_before(&self, key: &[u8]) -> Option<usize> {
        self.entries
            .partition_point(|(k, _)| k.as_slice() <= key)
            .checked_sub(1)
    }

    fn last_before(&self, key: &[u8]) -> Option<usize> {
        self.entries
            .partition_point(|(k, _)| k.as_slice() < key)
            .checked_sub(1)
    }
}

impl RocksIterator {
    /// After a seek of the RocksDB cursor: puts the overlay's candidate
    /// where `at` says, travelling `forward` or not, and settles. Without
    /// an overlay, whether the RocksDB cursor is valid.
    fn reposition(&mut self, forward: bool, at: impl FnOnce(&Overlay) -> Option<usize>) -> bool {
        let Some(o) = self.overlay.as_mut() else {
            return self.valid;
        };
        o.at = at(o);
        o.forward = forward;
        self.settle()
    }

    /// After a move of either source: the merged cursor rests on the
    /// nearer of RocksDB's key and the overlay's candidate in the
    /// direction of travel.
    fn settle(&mut self) -> bool {
        let raw = self.valid.then(|| self.raw_key().to_vec());
        let Some(o) = self.overlay.as_mut() else {
            return self.valid;
        };
        let candidate = o.at.map(|i| o.entries[i].0.as_slice());
        o.on_overlay = match (raw.as_deref(), candidate) {
            (None, None) => false,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some(r), Some(c)) => {
                if o.forward {
                    c < r
                } else {
                    c > r
                }
            }
        };
        o.valid = raw.is_some() || candidate.is_some();
        o.valid
    }
}
