//! The storage engine under percolate: an ordered key-value store with column
//! families, atomic write batches and consistent snapshots.
//!
//! Everything above this crate (MVCC records, transactions) is expressed as
//! bytes in three column families ([`Cf`]). The engine promises only what a
//! RocksDB instance promises:
//!
//! * a [`WriteBatch`] is applied atomically across all column families, or not
//!   at all;
//! * a [`Snapshot`] sees every write that finished before it was taken and
//!   none that began after, each of them whole, for as long as it lives (a
//!   write in flight as it is taken is seen whole or not at all);
//! * iterators ([`EngineIterator`]) walk a snapshot in key order, forwards or
//!   backwards, inside optional bounds, and report I/O errors as values.
//!
//! Two engines implement the traits:
//!
//! * [`RocksEngine`]: the real default, one RocksDB instance with the column
//!   families `default`, `lock` and `write` (TiKV's), `raw` and `notify`,
//!   durable across restarts;
//! * [`MemoryEngine`]: ordered maps with truly isolated snapshots, for fast
//!   tests. Every behaviour test runs on both.
//!
//! ```
//! use percolate_engine::{Cf, Engine, MemoryEngine, Snapshot, WriteBatch, WriteOptions};
//!
//! let engine = MemoryEngine::new();
//! let mut batch = WriteBatch::new();
//! batch.put(Cf::Lock, b"k".to_vec(), b"v".to_vec());
//! engine.write(&batch, WriteOptions::default())?;
//! let snapshot = engine.snapshot();
//! assert_eq!(snapshot.get(Cf::Lock, b"k")?, Some(b"v".to_vec()));
//! # Ok::<(), percolate_engine::Error>(())
//! ```

mod batch;
mod epochs;
mod error;
mod lock_mirror;
pub mod mem;
mod memory;
mod rocks;
mod stats;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
mod write_gate;

pub use batch::{Modify, WriteBatch};
pub use error::{Error, Result};
pub use memory::{MemoryEngine, MemoryIterator, MemorySnapshot};
pub use rocks::{
    COMPRESSION_PER_LEVEL, Compression, DATA_PREFIX, RocksEngine, RocksIterator, RocksOptions,
    RocksSnapshot, SalvageReport, WalRecovery, concurrent_memtable_writes_default,
};
pub use rocks::{SstEvent, SstFileInfo, SstSink};
pub use stats::EngineStats;

/// A column family. MVCC data lives in three of them; see `percolate-mvcc`
/// for what each one holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Cf {
    /// `default`: values too long to inline, keyed by user key + start_ts.
    Default,
    /// `lock`: one Lock record per locked user key.
    Lock,
    /// `write`: commit (and rollback) records, keyed by user key + commit_ts.
    Write,
    /// `raw`: the raw (non-transactional) key-value API's data, keyed by the
    /// raw key as given. A column family of its own, so no raw key can ever
    /// collide with transactional data.
    Raw,
    /// `notify`: observer notifications (see `percolate-txn`'s `observe`
    /// module): one entry per changed watched key and writer, a hint that
    /// an observer may have work there. Not transactional, and not part of
    /// TiKV's format: a TiKV store has no such column family.
    Notify,
}

impl Cf {
    /// Every column family, in a fixed order (usable as an array index via
    /// [`Cf::index`]).
    pub const ALL: [Cf; 5] = [Cf::Default, Cf::Lock, Cf::Write, Cf::Raw, Cf::Notify];

    /// The RocksDB name of the column family, as TiKV names it.
    pub const fn name(self) -> &'static str {
        match self {
            Cf::Default => "default",
            Cf::Lock => "lock",
            Cf::Write => "write",
            Cf::Raw => "raw",
            Cf::Notify => "notify",
        }
    }

    /// Position of this column family in [`Cf::ALL`].
    pub const fn index(self) -> usize {
        match self {
            Cf::Default => 0,
            Cf::Lock => 1,
            Cf::Write => 2,
            Cf::Raw => 3,
            Cf::Notify => 4,
        }
    }

    /// Whether keys in this column family end with an 8-byte timestamp that
    /// the engine may strip to form a prefix for bloom filters and
    /// [`SeekMode::Prefix`]. True for [`Cf::Write`] only.
    pub const fn has_ts_suffix_prefix(self) -> bool {
        matches!(self, Cf::Write)
    }
}

impl std::fmt::Display for Cf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Length of the timestamp suffix that [`Cf::Write`]'s prefix extractor
/// strips.
pub const TS_SUFFIX_LEN: usize = 8;

/// The prefix of a write-CF key: everything but the 8-byte timestamp suffix,
/// or `None` when the key is too short to carry one.
pub fn write_key_prefix(key: &[u8]) -> Option<&[u8]> {
    key.len().checked_sub(TS_SUFFIX_LEN).map(|n| &key[..n])
}

/// Whether a write waits for its write-ahead-log record to reach stable
/// storage before it returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// The WAL record is written to the OS but not synced: survives a process
    /// crash, may be lost on power failure. Defaults to this, as RocksDB and
    /// TiKV (whose durability comes from Raft) do.
    #[default]
    Buffered,
    /// The WAL is synced (`fsync`) before the write returns: survives power
    /// failure.
    Sync,
}

/// Options for [`Engine::write`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Defaults to [`Durability::Buffered`].
    pub durability: Durability,
}

impl WriteOptions {
    /// Options for a write that is synced before it returns.
    pub const fn durable() -> Self {
        WriteOptions {
            durability: Durability::Sync,
        }
    }
}

/// How an iterator's seeks may be answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SeekMode {
    /// Every key in the bounds is visible, in order. Defaults to this.
    #[default]
    TotalOrder,
    /// Only keys that share the seek target's prefix (the key without its
    /// 8-byte ts suffix) are visible; the iterator becomes invalid at the
    /// first key with another prefix. On [`Cf::Write`] this lets the engine
    /// skip whole files by their prefix bloom filter, which is what makes a
    /// point read one cheap lookup. Column families without a timestamp
    /// suffix treat it as [`SeekMode::TotalOrder`]. Seek targets no longer
    /// than the suffix have no prefix, and RocksDB's prefix filters assume
    /// that no key's prefix begins another's (true of MVCC keys, whose
    /// user keys are memcomparable-encoded): otherwise, or for such a
    /// target, what a seek returns is unspecified.
    Prefix,
}

/// Options for [`Snapshot::iter`].
///
/// Bounds are on the keys the caller sees: `lower_bound` inclusive,
/// `upper_bound` exclusive, both optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IterOptions {
    /// Smallest visible key (inclusive). Defaults to unbounded.
    pub lower_bound: Option<Vec<u8>>,
    /// Key just past the largest visible key (exclusive). Defaults to
    /// unbounded.
    pub upper_bound: Option<Vec<u8>>,
    /// Defaults to [`SeekMode::TotalOrder`].
    pub seek_mode: SeekMode,
    /// Whether blocks read by this iterator enter the block cache. Defaults
    /// to true; set false for one-off full scans (GC, debugging).
    pub fill_cache: bool,
    /// The most hidden entries (deleted keys, overwritten versions) one
    /// positioning call may pass on its way to a visible key. A call that
    /// would pass more fails with [`Error::Incomplete`] and leaves the
    /// cursor invalid until the next seek. Defaults to `None`, no limit.
    /// For cursors that are only worth using while they are cheap; engines
    /// that keep no hidden entries never fail.
    pub max_skipped: Option<u64>,
}

impl IterOptions {
    /// Unbounded, total order, filling the cache.
    pub fn new() -> Self {
        IterOptions {
            fill_cache: true,
            ..Default::default()
        }
    }

    /// Sets the inclusive lower bound.
    #[must_use]
    pub fn lower_bound(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.lower_bound = Some(key.into());
        self
    }

    /// Sets the exclusive upper bound.
    #[must_use]
    pub fn upper_bound(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.upper_bound = Some(key.into());
        self
    }

    /// Sets the seek mode.
    #[must_use]
    pub fn seek_mode(mut self, mode: SeekMode) -> Self {
        self.seek_mode = mode;
        self
    }

    /// Sets whether blocks read enter the block cache.
    #[must_use]
    pub fn fill_cache(mut self, fill: bool) -> Self {
        self.fill_cache = fill;
        self
    }

    /// Sets the limit of hidden entries one positioning call may pass.
    #[must_use]
    pub fn max_skipped(mut self, limit: u64) -> Self {
        self.max_skipped = Some(limit);
        self
    }

    /// Whether `key` lies inside the bounds.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.lower_bound.as_deref().is_none_or(|lower| key >= lower)
            && self.upper_bound.as_deref().is_none_or(|upper| key < upper)
    }
}

/// What the GC in an engine's compactions must know of a write-CF record
/// (see [`Engine::set_gc_safe_point`]). The engine stores MVCC records as
/// bytes and cannot read them: the layer above decodes them for it with a
/// [`GcDecoder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GcRecord {
    /// A committed put.
    Put {
        /// The transaction's start_ts: a long value lives in the default
        /// CF under the record's key prefix and this ts.
        start_ts: u64,
        /// Whether the value lives in the default CF (it was too long to
        /// be kept inline in the record).
        long_value: bool,
    },
    /// A committed delete.
    Delete,
    /// A record readers skip (a read lock or a rollback).
    Other,
}

/// Decodes a write-CF record's value for the GC of an engine's
/// compactions: `None` where the bytes do not decode (such a record is
/// kept, and so is every older one of its key).
pub type GcDecoder = fn(&[u8]) -> Option<GcRecord>;

/// A key-value engine with column families.
///
/// Cloning an engine gives another handle to the same data.
pub trait Engine: Clone + Send + Sync + 'static {
    /// The snapshot type of this engine.
    type Snap: Snapshot;

    /// A consistent view of every column family as of now: every write
    /// that finished before the call, none that begins after it returns,
    /// and each write whole.
    fn snapshot(&self) -> Self::Snap;

    /// A view of the latest data: each read through it (a get, an
    /// iterator's creation or refresh) sees every write that finished
    /// before the read began, but two reads need not see the same moment,
    /// and a read may see part of a write still in flight (RocksDB's
    /// unordered writes insert a batch record by record: see
    /// [`RocksOptions::unordered_writes`]). Lock-CF gets are the
    /// exception: they see a write's locks change only once the write
    /// finished.
    ///
    /// Cheaper than [`snapshot`](Self::snapshot) where pinning a moment
    /// costs something: a RocksDB snapshot takes the database-wide mutex
    /// when it is taken and again when it is released, which every reading
    /// thread contends for. A reader that needs one key's records in a
    /// known order (its lock before its versions, as a point read does)
    /// sees in its later reads every write that finished before its first
    /// one, as a snapshot taken then would; of the writes begun since, it
    /// sees what had landed by each read, record by record. Defaults to a
    /// snapshot.
    fn latest(&self) -> Self::Snap {
        self.snapshot()
    }

    /// The write epoch of the write-CF records under `prefix` (a write-CF
    /// key without its ts suffix): the count of finished writes (batches)
    /// that wrote or deleted such records, shared by the prefixes that hash alike, or `None` while
    /// one is in flight (begun and not yet applied). A cache of what was
    /// last written or read under a prefix compares it to learn that
    /// nothing wrote there since: two reads that give the same epoch
    /// enclose no write at all. `None` where the engine keeps no epochs,
    /// which is the default. An engine that keeps them must also give a
    /// true [`latest`](Self::latest) view (not the default snapshot):
    /// such caches take what a latest read finds as current at the epoch
    /// read just before it.
    fn write_epoch(&self, prefix: &[u8]) -> Option<u64> {
        let _ = prefix;
        None
    }

    /// A commit timestamp that no write-CF record under `prefix` (a
    /// write-CF key without its ts suffix) exceeds, as of now: raised to a
    /// record's commit ts before the record is written, shared by the
    /// prefixes that hash alike, and, for the records already there when
    /// the engine opened, at least the largest commit ts among them. A
    /// prewrite at `start_ts` above it knows, without reading, that the
    /// key has no record at or after `start_ts`: no write conflict and no
    /// rollback of its own. `None` where the engine keeps no ceilings,
    /// which is the default.
    fn write_ts_ceiling(&self, prefix: &[u8]) -> Option<u64> {
        let _ = prefix;
        None
    }

    /// Starts bringing into the CPU's caches what
    /// [`write_epoch`](Self::write_epoch) and
    /// [`write_ts_ceiling`](Self::write_ts_ceiling) of `prefix` and a write
    /// of a record under it will read, without waiting (see [`mem`]). A
    /// hint for speed only; does nothing by default.
    fn prefetch_bookkeeping(&self, prefix: &[u8]) {
        let _ = prefix;
    }

    /// The engine's own statistics (RocksDB's tickers and sizes), if it
    /// keeps any. Defaults to `None`.
    fn stats(&self) -> Option<EngineStats> {
        None
    }

    /// Whether the lock CF is known to hold no key now (a write that is
    /// applying one may not show yet). Defaults to false: not known.
    fn holds_no_locks(&self) -> bool {
        false
    }

    /// Applies every modification of `batch` atomically: after a crash either
    /// all of them are visible or none is.
    fn write(&self, batch: &WriteBatch, options: WriteOptions) -> Result<()>;

    /// [`write`](Self::write), free to move the keys and values of the
    /// lock-CF puts of `batch` out of it (leaving them empty) rather than
    /// copy them, for an engine that also keeps its locks in memory: a
    /// caller done with those records after the write saves a copy of each
    /// lock. Every other record is left as it was. Defaults to `write`.
    fn write_taking_locks(&self, batch: &mut WriteBatch, options: WriteOptions) -> Result<()> {
        self.write(batch, options)
    }

    /// The GC safe point the engine keeps (see
    /// [`set_gc_safe_point`](Self::set_gc_safe_point)), persisted across
    /// restarts where it persists data. Defaults to 0: none.
    fn gc_safe_point(&self) -> u64 {
        0
    }

    /// Hands the engine a GC safe point (every reader reads at or above
    /// it; its locks below it are resolved), for the engine to drop in its
    /// own compactions the write-CF versions no such read can see, with
    /// their default-CF values, reading the records with `decode`. The
    /// engine keeps the largest safe point it was given (a smaller one
    /// changes nothing), across restarts where it persists data. Returns
    /// whether it does such GC: false, the default, leaves the caller to
    /// delete the versions itself.
    fn set_gc_safe_point(&self, safe_point: u64, decode: GcDecoder) -> Result<bool> {
        let _ = (safe_point, decode);
        Ok(false)
    }

    /// Finishes what the GC of earlier compactions left (see
    /// [`set_gc_safe_point`](Self::set_gc_safe_point)): deletes the
    /// default-CF values of the versions they dropped, and returns the
    /// write-CF key prefixes (keys without their ts) whose newest version
    /// at or below the safe point is a Delete that a compaction could not
    /// drop itself, for the caller to collect with point deletes at the
    /// safe point. Defaults to nothing.
    fn take_gc_leftovers(&self) -> Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }
}

/// Implements, inside the `impl Engine` of a wrapper around another engine
/// (held in the field named `$inner`), the engine's bookkeeping queries by
/// asking the wrapped engine: [`Engine::write_epoch`],
/// [`Engine::write_ts_ceiling`] and [`Engine::holds_no_locks`]. Their
/// defaults answer "unknown", which is always correct but silently turns
/// off the caches and shortcuts built on them, so a wrapper that only
/// watches or delays writes should forward them, and this keeps every such
/// wrapper forwarding the same set.
///
/// ```
/// use percolate_engine::{Engine, MemoryEngine, WriteBatch, WriteOptions};
///
/// #[derive(Clone)]
/// struct Counting {
///     inner: MemoryEngine,
/// }
///
/// impl Engine for Counting {
///     type Snap = <MemoryEngine as Engine>::Snap;
///     fn snapshot(&self) -> Self::Snap {
///         self.inner.snapshot()
///     }
///     fn latest(&self) -> Self::Snap {
///         self.inner.latest()
///     }
///     fn write(&self, batch: &WriteBatch, options: WriteOptions) -> percolate_engine::Result<()> {
///         self.inner.write(batch, options)
///     }
///     percolate_engine::forward_engine_bookkeeping!(inner);
/// }
///
/// let engine = Counting { inner: MemoryEngine::new() };
/// assert_eq!(engine.write_ts_ceiling(b"k"), Some(0));
/// ```
#[macro_export]
macro_rules! forward_engine_bookkeeping {
    ($inner:ident) => {
        fn write_epoch(&self, prefix: &[u8]) -> ::core::option::Option<u64> {
            $crate::Engine::write_epoch(&self.$inner, prefix)
        }

        fn write_ts_ceiling(&self, prefix: &[u8]) -> ::core::option::Option<u64> {
            $crate::Engine::write_ts_ceiling(&self.$inner, prefix)
        }

        fn holds_no_locks(&self) -> bool {
            $crate::Engine::holds_no_locks(&self.$inner)
        }

        fn prefetch_bookkeeping(&self, prefix: &[u8]) {
            $crate::Engine::prefetch_bookkeeping(&self.$inner, prefix)
        }
    };
}

/// The [`Snapshot`] counterpart of [`forward_engine_bookkeeping!`]:
/// [`Snapshot::write_epoch`], [`Snapshot::write_ts_ceiling`] and
/// [`Snapshot::gets_from_memory`], asked of the wrapped view in the field
/// named `$inner`.
#[macro_export]
macro_rules! forward_snapshot_bookkeeping {
    ($inner:ident) => {
        fn write_epoch(&self, prefix: &[u8]) -> ::core::option::Option<u64> {
            $crate::Snapshot::write_epoch(&self.$inner, prefix)
        }

        fn write_ts_ceiling(&self, prefix: &[u8]) -> ::core::option::Option<u64> {
            $crate::Snapshot::write_ts_ceiling(&self.$inner, prefix)
        }

        fn gets_from_memory(&self, cf: $crate::Cf) -> bool {
            $crate::Snapshot::gets_from_memory(&self.$inner, cf)
        }
    };
}

/// A read-only view of an engine: consistent, at one moment, when it comes
/// from [`Engine::snapshot`]; the latest data at each read when it comes
/// from [`Engine::latest`].
///
/// Invariant: a snapshot from [`Engine::snapshot`] never observes a write
/// that finished after it was taken. Cloning is cheap and gives the same
/// view.
pub trait Snapshot: Clone + Send + Sync + 'static {
    /// The iterator type of this snapshot.
    type Iter: EngineIterator;

    /// The value of `key` in `cf`, or `None`.
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// An iterator over `cf`. It starts unpositioned: call a seek first.
    fn iter(&self, cf: Cf, options: IterOptions) -> Result<Self::Iter>;

    /// `key`'s lock where it may stop a read: what `get(Cf::Lock, key)`
    /// answers, except that the view may leave out a pessimistic lock
    /// (lock type byte `S`), which neither blocks a read nor carries a
    /// value to read. Point reads ask this instead of `get` so that a view
    /// keeping pessimistic locks apart (the RocksDB engine's, in memory)
    /// need not look there. Defaults to `get(Cf::Lock, key)`; a wrapper
    /// that watches its view's gets should keep the default.
    fn get_read_lock(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get(Cf::Lock, key)
    }

    /// The engine's current [`Engine::write_epoch`] of `prefix` (not as of
    /// the snapshot: the count of writes up to now). `None` where the
    /// engine keeps no epochs, which is the default.
    fn write_epoch(&self, prefix: &[u8]) -> Option<u64> {
        let _ = prefix;
        None
    }

    /// Whether gets of `cf` through this view are answered from memory,
    /// cheaper than a cursor's step: then a reader visiting keys in order
    /// gets each one rather than walking a cursor (over the tombstones of
    /// deleted keys). Defaults to false.
    fn gets_from_memory(&self, cf: Cf) -> bool {
        let _ = cf;
        false
    }

    /// The engine's current [`Engine::write_ts_ceiling`] of `prefix` (not
    /// as of the snapshot: a ceiling over the records up to now, which
    /// holds for the snapshot's records too). `None` where the engine keeps
    /// no ceilings, which is the default.
    fn write_ts_ceiling(&self, prefix: &[u8]) -> Option<u64> {
        let _ = prefix;
        None
    }
}

/// A cursor over one column family of a snapshot.
///
/// Every positioning method returns whether the cursor now rests on a key
/// (inside the bounds, and inside the seek prefix in [`SeekMode::Prefix`]).
/// [`key`](Self::key) and [`value`](Self::value) are meaningful only while
/// [`valid`](Self::valid) is true; otherwise they return empty slices.
pub trait EngineIterator: Send {
    /// Moves to the first key `>= key`.
    fn seek(&mut self, key: &[u8]) -> Result<bool>;
    /// Moves to the last key `<= key`.
    fn seek_for_prev(&mut self, key: &[u8]) -> Result<bool>;
    /// Moves to the first key inside the bounds.
    fn seek_to_first(&mut self) -> Result<bool>;
    /// Moves to the last key inside the bounds.
    fn seek_to_last(&mut self) -> Result<bool>;
    /// Moves to the next key. On an invalid cursor it stays invalid.
    fn next(&mut self) -> Result<bool>;
    /// Moves to the previous key. On an invalid cursor it stays invalid.
    fn prev(&mut self) -> Result<bool>;
    /// Whether the cursor rests on a key.
    fn valid(&self) -> Result<bool>;
    /// The current key.
    fn key(&self) -> &[u8];
    /// The current value.
    fn value(&self) -> &[u8];
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn memory_engine_conforms() {
        run_conformance_suite(MemoryEngine::new);
    }

    #[test]
    fn rocks_engine_conforms() {
        run_conformance_suite(temp_rocks_engine);
    }

    #[test]
    fn each_compression_reads_back_what_it_wrote_and_zstd_stores_less() {
        let mut sizes = Vec::new();
        for compression in [
            Compression::None,
            Compression::Lz4,
            Compression::Zstd,
            Compression::PerLevel,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let options = RocksOptions {
                compression,
                ..RocksOptions::default()
            };
            let engine = RocksEngine::open_with(dir.path(), &options).unwrap();
            let mut batch = WriteBatch::default();
            for i in 0..2000u32 {
                let key = format!("zk{i:06}").into_bytes();
                batch.put(
                    Cf::Default,
                    key,
                    format!("value {i} ").repeat(20).into_bytes(),
                );
            }
            engine.write(&batch, WriteOptions::default()).unwrap();
            engine.flush().unwrap();
            let snap = engine.snapshot();
            assert_eq!(
                snap.get(Cf::Default, b"zk001234").unwrap(),
                Some("value 1234 ".repeat(20).into_bytes())
            );
            sizes.push(engine.stats().unwrap().live_sst_bytes);
        }
        // Flushed files land on L0, which the per-level scheme leaves
        // uncompressed.
        let [none, lz4, zstd, per_level] = sizes[..] else {
            unreachable!()
        };
        assert!(zstd < lz4 && lz4 < none, "{sizes:?}");
        assert!(per_level > lz4, "{sizes:?}");
    }

    #[test]
    fn a_lock_cf_flushed_many_times_keeps_exactly_the_live_locks_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        // A memtable of 64 KiB: the lock CF flushes every few hundred
        // locks, so puts and their deletes land in different files.
        let options = RocksOptions {
            lock_write_buffer_bytes: 64 << 10,
            ..RocksOptions::default()
        };
        let key = |i: u32| format!("zlock{i:05}").into_bytes();
        {
            let engine = RocksEngine::open_with(dir.path(), &options).unwrap();
            for i in 0..4000u32 {
                let mut batch = WriteBatch::default();
                batch.put(Cf::Lock, key(i), vec![b'P'; 60]);
                if i % 2 == 1 {
                    // Each odd lock goes in the next write, as a commit's.
                    batch.delete(Cf::Lock, key(i - 1));
                }
                engine.write(&batch, WriteOptions::default()).unwrap();
            }
            assert!(
                engine.stats().unwrap().live_sst_bytes > 0,
                "the lock CF never flushed"
            );
        }
        let engine = RocksEngine::open_with(dir.path(), &options).unwrap();
        for view in [engine.snapshot(), engine.latest()] {
            let keys: Vec<Vec<u8>> = collect_forward(&view, Cf::Lock, IterOptions::new())
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            let live: Vec<Vec<u8>> = (0..4000u32).filter(|i| i % 2 == 1).map(key).collect();
            assert_eq!(keys, live);
            assert_eq!(view.get(Cf::Lock, &key(2)).unwrap(), None);
            assert_eq!(view.get(Cf::Lock, &key(3)).unwrap(), Some(vec![b'P'; 60]));
        }
    }

    /// Writers race, each rewriting its own keys in three CFs with one
    /// value per batch; snapshots taken meanwhile must find each writer's
    /// keys all at one batch (or all absent), by gets and by a cursor.
    fn snapshots_see_each_batch_whole<E: Engine>(engine: E) {
        const WRITERS: u32 = 3;
        const KEYS: u32 = 8;
        const BATCHES: u64 = 1500;
        let key = |t: u32, j: u32| format!("zw{t}-{j}").into_bytes();
        let cf_of = |j: u32| [Cf::Lock, Cf::Write, Cf::Default][(j % 3) as usize];
        let done = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for t in 0..WRITERS {
                let (engine, done) = (&engine, &done);
                s.spawn(move || {
                    for i in 1..=BATCHES {
                        let mut batch = WriteBatch::default();
                        for j in 0..KEYS {
                            batch.put(cf_of(j), key(t, j), i.to_be_bytes().to_vec());
                        }
                        engine.write(&batch, WriteOptions::default()).unwrap();
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
            let mut checked = 0u64;
            while done.load(std::sync::atomic::Ordering::SeqCst) < WRITERS || checked == 0 {
                let snap = engine.snapshot();
                for t in 0..WRITERS {
                    let values: Vec<Option<Vec<u8>>> = (0..KEYS)
                        .map(|j| snap.get(cf_of(j), &key(t, j)).unwrap())
                        .collect();
                    assert!(
                        values.iter().all(|v| *v == values[0]),
                        "writer {t}: a batch seen in part: {values:?}"
                    );
                }
                // The write CF's keys of every writer, by a cursor.
                let by_cursor: Vec<(Vec<u8>, Vec<u8>)> =
                    collect_forward(&snap, Cf::Write, IterOptions::new());
                for t in 0..WRITERS {
                    let mine: Vec<&Vec<u8>> = by_cursor
                        .iter()
                        .filter(|(k, _)| k.starts_with(format!("zw{t}-").as_bytes()))
                        .map(|(_, v)| v)
                        .collect();
                    assert!(
                        mine.windows(2).all(|w| w[0] == w[1]),
                        "writer {t}: {mine:?}"
                    );
                    if let (Some(first), Ok(Some(got))) =
                        (mine.first(), snap.get(Cf::Lock, &key(t, 0)))
                    {
                        assert_eq!(*first, &got, "writer {t}: cursor and get disagree");
                    }
                }
                checked += 1;
            }
        });
    }

    #[test]
    fn snapshots_see_each_batch_whole_on_memory() {
        snapshots_see_each_batch_whole(MemoryEngine::new());
    }

    #[test]
    fn snapshots_see_each_batch_whole_on_rocks_with_unordered_writes_on_or_off() {
        for unordered_writes in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let options = RocksOptions {
                unordered_writes,
                ..RocksOptions::default()
            };
            snapshots_see_each_batch_whole(RocksEngine::open_with(dir.path(), &options).unwrap());
        }
    }

    #[test]
    fn concurrent_writers_land_every_batch_with_parallel_or_unordered_memtable_inserts() {
        for (concurrent_memtable_writes, unordered_writes) in
            [(false, false), (true, false), (false, true)]
        {
            let dir = tempfile::tempdir().unwrap();
            let options = RocksOptions {
                concurrent_memtable_writes,
                unordered_writes,
                ..RocksOptions::default()
            };
            let engine = RocksEngine::open_with(dir.path(), &options).unwrap();
            std::thread::scope(|s| {
                for t in 0..4u32 {
                    let engine = &engine;
                    s.spawn(move || {
                        for i in 0..500u32 {
                            let mut batch = WriteBatch::default();
                            for cf in [Cf::Default, Cf::Write] {
                                batch.put(cf, format!("zt{t}-{i:04}").into_bytes(), vec![b'v'; 40]);
                            }
                            engine.write(&batch, WriteOptions::default()).unwrap();
                        }
                    });
                }
            });
            let snap = engine.snapshot();
            for cf in [Cf::Default, Cf::Write] {
                let mut iter = snap.iter(cf, IterOptions::default()).unwrap();
                let mut count = 0;
                let mut found = iter.seek_to_first().unwrap();
                while found {
                    count += 1;
                    found = iter.next().unwrap();
                }
                assert_eq!(
                    count, 2000,
                    "{cf:?}, concurrent: {concurrent_memtable_writes}, unordered: {unordered_writes}"
                );
            }
        }
    }

    #[test]
    fn write_cf_insert_hints_keep_every_version_in_order_on_or_off() {
        // Keys of several lengths (one too short to have a ts, so outside
        // the hint's domain), each written at descending positions (newer
        // versions sort first, as commits' do), interleaved, some
        // versions in one batch and out of order, across a flush: with
        // and without hints, the write CF holds exactly these entries in
        // key order, and every one reads back.
        let user_keys: Vec<Vec<u8>> = vec![
            b"zshort".to_vec(),
            b"zuser0000000001".to_vec(),
            b"zuser0000000002".to_vec(),
            b"zuser00000000020000".to_vec(),
            vec![b'z'; 200],
        ];
        let stored = |k: &[u8], version: u64| {
            let mut key = k.to_vec();
            key.extend_from_slice(&(!version).to_be_bytes());
            key
        };
        for (write_insert_hints, unordered_writes) in
            [(true, false), (false, false), (true, true), (false, true)]
        {
            let dir = tempfile::tempdir().unwrap();
            let options = RocksOptions {
                write_insert_hints,
                concurrent_memtable_writes: false,
                unordered_writes,
                ..RocksOptions::default()
            };
            let engine = RocksEngine::open_with(dir.path(), &options).unwrap();
            // RocksDB took the option (it records its options in the
            // directory): the write CF's hints are the glue's transform.
            let recorded = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| {
                    path.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("OPTIONS-")
                })
                .map(|path| std::fs::read_to_string(path).unwrap())
                .collect::<String>();
            assert_eq!(
                recorded.contains("memtable_insert_with_hint_prefix_extractor=percolate.StripTs"),
                write_insert_hints,
                "{recorded}"
            );
            // Concurrent inserts (unordered writes) take their hints from
            // the glue's memtable.
            assert_eq!(
                recorded.contains("memtable_factory=percolate.HintedSkipList.StripTs"),
                write_insert_hints && unordered_writes,
                "{recorded}"
            );
            let mut expected = std::collections::BTreeMap::new();
            for version in 1..=300u64 {
                let mut batch = WriteBatch::default();
                for (i, k) in user_keys.iter().enumerate() {
                    // Key i skips every (i + 2)th version; the short key
                    // goes in bare, with no ts after it.
                    if version % (i as u64 + 2) == 0 {
                        continue;
                    }
                    let key = if i == 0 {
                        format!("{}{version}", String::from_utf8_lossy(k)).into_bytes()
                    } else {
                        stored(k, version)
                    };
                    let value = format!("{i}@{version}").into_bytes();
                    batch.put(Cf::Write, key.clone(), value.clone());
                    expected.insert(key, value);
                }
                if version % 7 == 0 {
                    // An older version of every key arrives late.
                    for k in &user_keys[1..] {
                        let key = stored(k, version / 7 + 10_000);
                        batch.put(Cf::Write, key.clone(), b"late".to_vec());
                        expected.insert(key, b"late".to_vec());
                    }
                }
                engine.write(&batch, WriteOptions::default()).unwrap();
                if version == 150 {
                    engine.flush().unwrap();
                }
            }
            let snap = engine.snapshot();
            let found: Vec<(Vec<u8>, Vec<u8>)> =
                collect_forward(&snap, Cf::Write, IterOptions::new());
            let want: Vec<(Vec<u8>, Vec<u8>)> = expected.clone().into_iter().collect();
            assert_eq!(
                found, want,
                "hints: {write_insert_hints}, unordered: {unordered_writes}"
            );
            for (key, value) in &expected {
                assert_eq!(snap.get(Cf::Write, key).unwrap().as_ref(), Some(value));
            }
        }
    }

    #[test]
    fn memory_and_rocks_agree_on_random_batches() {
        for seed in 0..16 {
            check_memory_matches_rocks(seed, 60);
        }
    }

    #[test]
    fn rocks_engine_reopens_with_its_data() {
        let dir = tempfile::tempdir().unwrap();
        {
            let engine = RocksEngine::open(dir.path()).unwrap();
            let mut batch = WriteBatch::new();
            batch.put(Cf::Write, b"key-with-ts-suffix".to_vec(), b"w".to_vec());
            batch.put(Cf::Lock, b"l".to_vec(), b"lock".to_vec());
            engine.write(&batch, WriteOptions::durable()).unwrap();
            engine.flush().unwrap();
            let mut batch = WriteBatch::new();
            batch.put(Cf::Default, b"d".to_vec(), b"only in the WAL".to_vec());
            engine.write(&batch, WriteOptions::default()).unwrap();
        }
        let engine = RocksEngine::open(dir.path()).unwrap();
        let snapshot = engine.snapshot();
        assert_eq!(
            snapshot.get(Cf::Write, b"key-with-ts-suffix").unwrap(),
            Some(b"w".to_vec())
        );
        assert_eq!(
            snapshot.get(Cf::Lock, b"l").unwrap(),
            Some(b"lock".to_vec())
        );
        // The latest view's lock mirror is rebuilt from the lock CF.
        assert_eq!(
            engine.latest().get(Cf::Lock, b"l").unwrap(),
            Some(b"lock".to_vec())
        );
        assert_eq!(
            snapshot.get(Cf::Default, b"d").unwrap(),
            Some(b"only in the WAL".to_vec())
        );
        assert_eq!(engine.path(), dir.path());
    }

    #[test]
    fn write_ts_ceilings_cover_every_record_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        {
            let engine = RocksEngine::open(dir.path()).unwrap();
            // Empty: nothing to be above.
            assert_eq!(engine.write_ts_ceiling(b"a"), Some(0));
            let mut batch = WriteBatch::new();
            batch.put(Cf::Write, write_cf_key(b"a", 90), b"w".to_vec());
            batch.put(Cf::Write, write_cf_key(b"b", 40), b"w".to_vec());
            engine.write(&batch, WriteOptions::default()).unwrap();
            assert!(engine.write_ts_ceiling(b"a").unwrap() >= 90);
            assert!(engine.latest().write_ts_ceiling(b"b").unwrap() >= 40);
        }
        // Reopened: every bucket starts at the ceiling kept on disk.
        let engine = RocksEngine::open(dir.path()).unwrap();
        for prefix in [&b"a"[..], b"b", b"never written"] {
            assert!(engine.write_ts_ceiling(prefix).unwrap() >= 90);
        }
        // A database without the kept ceiling (written by another program)
        // has it found from its records.
        let default = engine.raw_db().cf_handle("default").unwrap();
        engine
            .raw_db()
            .delete_cf(default, b"\x01percolate-write-ts-ceiling")
            .unwrap();
        drop(engine);
        // A read-only open finds it from the records too, and writes nothing.
        let read_only = RocksEngine::open_read_only(dir.path(), &RocksOptions::default()).unwrap();
        assert_eq!(read_only.persisted_ts_ceiling(), 90);
        let default = read_only.raw_db().cf_handle("default").unwrap();
        assert_eq!(
            read_only
                .raw_db()
                .get_cf(default, b"\x01percolate-write-ts-ceiling")
                .unwrap(),
            None
        );
        let err = read_only
            .write(&WriteBatch::new(), WriteOptions::default())
            .unwrap_err();
        assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
        drop(read_only);
        let engine = RocksEngine::open(dir.path()).unwrap();
        assert_eq!(engine.write_ts_ceiling(b"never written"), Some(90));
        // Bytes that are not a ceiling are reported, not trusted.
        engine
            .raw_db()
            .put_cf(
                engine.raw_db().cf_handle("default").unwrap(),
                b"\x01percolate-write-ts-ceiling",
                b"bad",
            )
            .unwrap();
        drop(engine);
        let err = RocksEngine::open(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Corruption { .. }), "{err}");
    }

    /// Lock-CF gets of a latest view (answered from the lock mirror on
    /// RocksDB) see every finished write, as a new snapshot does.
    fn latest_lock_reads_follow_writes<E: Engine>(engine: E) {
        let latest = engine.latest();
        let agree = |key: &[u8], expected: Option<&[u8]>| {
            assert_eq!(latest.get(Cf::Lock, key).unwrap().as_deref(), expected);
            assert_eq!(
                engine.snapshot().get(Cf::Lock, key).unwrap().as_deref(),
                expected
            );
        };
        let write = |f: &dyn Fn(&mut WriteBatch)| {
            let mut batch = WriteBatch::new();
            f(&mut batch);
            engine.write(&batch, WriteOptions::default()).unwrap();
        };
        agree(b"a", None);
        assert!(engine.holds_no_locks());
        write(&|b| {
            b.put(Cf::Lock, b"a".to_vec(), b"1".to_vec());
            b.put(Cf::Lock, b"b".to_vec(), b"2".to_vec());
            b.put(Cf::Lock, b"c".to_vec(), b"3".to_vec());
        });
        agree(b"a", Some(b"1"));
        write(&|b| {
            b.delete(Cf::Lock, b"a".to_vec());
            b.put(Cf::Lock, b"b".to_vec(), b"2'".to_vec());
        });
        agree(b"a", None);
        agree(b"b", Some(b"2'"));
        write(&|b| b.delete_range(Cf::Lock, b"b".to_vec(), b"c".to_vec()));
        agree(b"b", None);
        agree(b"c", Some(b"3"));
        assert!(!engine.holds_no_locks());
        write(&|b| b.delete(Cf::Lock, b"c".to_vec()));
        assert!(engine.holds_no_locks());
    }

    /// Two records of one lock key in one batch end as the later one says,
    /// in RocksDB and in the lock mirror alike, whichever table (RocksDB,
    /// or memory only for a pessimistic `S` lock) held it before: a
    /// prewrite lock put then deleted leaves nothing, and one put then
    /// replaced by a memory-only lock leaves only that one; after a
    /// reopen, RocksDB holds nothing.
    fn one_batch_of_two_records_of_a_lock_ends_as_the_later_says<E: Engine>(engine: E) {
        let write = |f: &dyn Fn(&mut WriteBatch)| {
            let mut batch = WriteBatch::new();
            f(&mut batch);
            engine.write(&batch, WriteOptions::default()).unwrap();
        };
        let locks = |view: &dyn Fn() -> Vec<(Vec<u8>, Vec<u8>)>| view();
        write(&|b| b.put(Cf::Lock, b"k".to_vec(), b"S-1".to_vec()));
        write(&|b| {
            b.put(Cf::Lock, b"k".to_vec(), b"P-2".to_vec());
            b.delete(Cf::Lock, b"k".to_vec());
        });
        assert_eq!(engine.latest().get(Cf::Lock, b"k").unwrap(), None);
        let all = || testing::collect_forward(&engine.snapshot(), Cf::Lock, IterOptions::new());
        assert!(locks(&all).is_empty(), "{:?}", locks(&all));
        assert!(engine.holds_no_locks());
        write(&|b| {
            b.put(Cf::Lock, b"j".to_vec(), b"P-3".to_vec());
            b.put(Cf::Lock, b"j".to_vec(), b"S-4".to_vec());
        });
        assert_eq!(locks(&all), vec![(b"j".to_vec(), b"S-4".to_vec())]);
        assert_eq!(
            engine.latest().get(Cf::Lock, b"j").unwrap().as_deref(),
            Some(&b"S-4"[..])
        );
    }

    /// A snapshot's lock get agrees with the rest of the snapshot while
    /// another thread puts and deletes the lock: each write also sets a
    /// marker saying whether the lock is there, and every snapshot must
    /// see the two together (on RocksDB a snapshot taken while no lock is
    /// held answers lock gets without RocksDB, so this races that with the
    /// writes). A lock held when a snapshot is taken stays in it after its
    /// delete.
    fn snapshot_lock_reads_agree_with_the_snapshot<E: Engine>(engine: E) {
        let write = |locked: bool| {
            let mut batch = WriteBatch::new();
            if locked {
                batch.put(Cf::Lock, b"k".to_vec(), b"L".to_vec());
            } else {
                batch.delete(Cf::Lock, b"k".to_vec());
            }
            batch.put(Cf::Default, b"marker".to_vec(), vec![u8::from(locked)]);
            engine.write(&batch, WriteOptions::default()).unwrap();
        };
        write(true);
        let held = engine.snapshot();
        write(false);
        assert_eq!(
            held.get(Cf::Lock, b"k").unwrap().as_deref(),
            Some(&b"L"[..])
        );
        assert_eq!(engine.snapshot().get(Cf::Lock, b"k").unwrap(), None);

        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..20_000 {
                    write(i % 2 == 0);
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            let mut checked = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) || checked < 1_000 {
                let snapshot = engine.snapshot();
                let marker = snapshot.get(Cf::Default, b"marker").unwrap();
                let lock = snapshot.get(Cf::Lock, b"k").unwrap();
                assert_eq!(
                    marker == Some(vec![1]),
                    lock.is_some(),
                    "after {checked} snapshots"
                );
                checked += 1;
            }
        });
    }

    #[test]
    fn snapshot_lock_reads_agree_with_the_snapshot_on_memory() {
        snapshot_lock_reads_agree_with_the_snapshot(MemoryEngine::new());
    }

    #[test]
    fn snapshot_lock_reads_agree_with_the_snapshot_on_rocks() {
        snapshot_lock_reads_agree_with_the_snapshot(temp_rocks_engine());
    }

    #[test]
    fn latest_lock_reads_follow_writes_on_memory() {
        latest_lock_reads_follow_writes(MemoryEngine::new());
    }

    #[test]
    fn latest_lock_reads_follow_writes_on_rocks() {
        latest_lock_reads_follow_writes(temp_rocks_engine());
    }

    #[test]
    fn one_batch_of_two_records_of_a_lock_on_memory() {
        one_batch_of_two_records_of_a_lock_ends_as_the_later_says(MemoryEngine::new());
    }

    #[test]
    fn one_batch_of_two_records_of_a_lock_on_rocks() {
        let dir = tempfile::tempdir().unwrap();
        let engine = RocksEngine::open(dir.path()).unwrap();
        one_batch_of_two_records_of_a_lock_ends_as_the_later_says(engine.clone());
        drop(engine);
        // What RocksDB itself holds: no prewrite lock of either key.
        let engine = RocksEngine::open(dir.path()).unwrap();
        assert_eq!(engine.latest().get(Cf::Lock, b"k").unwrap(), None);
        assert_eq!(engine.latest().get(Cf::Lock, b"j").unwrap(), None);
    }

    /// A write-CF scan cursor of a RocksDB latest view comes from a pool
    /// and applies its bounds itself; it must move as a snapshot's cursor,
    /// whose bounds RocksDB applies, does: seeks clamped into the bounds,
    /// invalid past them in either direction, reused with other bounds.
    #[test]
    fn pooled_scan_cursors_keep_their_bounds_as_rocksdb_does() {
        let engine = temp_rocks_engine();
        let mut batch = WriteBatch::new();
        for k in [&b"a"[..], b"b", b"c", b"d", b"e", b"f"] {
            batch.put(Cf::Write, k.to_vec(), k.to_vec());
        }
        engine.write(&batch, WriteOptions::default()).unwrap();
        type Range<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);
        let bounds: [Range<'_>; 5] = [
            (Some(b"b"), Some(b"e")),
            (None, Some(b"c")),
            (Some(b"bb"), None),
            (None, None),
            (Some(b"d"), Some(b"d")),
        ];
        // Twice: the second round reuses pooled cursors.
        for (lower, upper) in bounds.iter().chain(bounds.iter()) {
            let options = || {
                let mut options = IterOptions::new();
                options.lower_bound = lower.map(<[u8]>::to_vec);
                options.upper_bound = upper.map(<[u8]>::to_vec);
                options
            };
            let mut pooled = engine.latest().iter(Cf::Write, options()).unwrap();
            let mut native = engine.snapshot().iter(Cf::Write, options()).unwrap();
            let at = |it: &RocksIterator| it.valid().unwrap().then(|| it.key().to_vec());
            type Move<'a> = &'a dyn Fn(&mut RocksIterator) -> Result<bool>;
            let moves: [Move<'_>; 10] = [
                &|it| it.seek_to_first(),
                &|it| it.next(),
                &|it| it.seek(b"0"),
                &|it| it.seek(b"cc"),
                &|it| it.seek(b"z"),
                &|it| it.seek_to_last(),
                &|it| it.prev(),
                &|it| it.seek_for_prev(b"z"),
                &|it| it.seek_for_prev(b"c"),
                &|it| it.seek_for_prev(b"0"),
            ];
            for (i, step) in moves.iter().enumerate() {
                step(&mut pooled).unwrap();
                step(&mut native).unwrap();
                assert_eq!(
                    at(&pooled),
                    at(&native),
                    "bounds {lower:?}..{upper:?}, move {i}"
                );
                // Walk on to the end.
                while pooled.valid().unwrap() {
                    assert_eq!(pooled.next().unwrap(), native.next().unwrap());
                    assert_eq!(at(&pooled), at(&native), "{lower:?}..{upper:?} {i}");
                }
            }
            step_back_to_lower(&mut pooled, &mut native, &at);
        }
    }

    /// From the last key in bounds down past the lower bound, both alike.
    fn step_back_to_lower(
        pooled: &mut RocksIterator,
        native: &mut RocksIterator,
        at: &dyn Fn(&RocksIterator) -> Option<Vec<u8>>,
    ) {
        pooled.seek_to_last().unwrap();
        native.seek_to_last().unwrap();
        assert_eq!(at(pooled), at(native));
        while pooled.valid().unwrap() {
            pooled.prev().unwrap();
            native.prev().unwrap();
            assert_eq!(at(pooled), at(native));
        }
    }

    /// Pessimistic locks (lock-CF values starting with `S`) are kept in
    /// memory only on RocksDB; every reader sees them as on the memory
    /// engine: gets of either view, and lock-CF cursors merging them with
    /// RocksDB's locks, in both directions, within bounds, turning round.
    fn memory_only_locks_read_as_any_lock<E: Engine>(engine: E) {
        let mut batch = WriteBatch::new();
        for (k, v) in [
            (&b"b"[..], &b"P-b"[..]),
            (b"d", b"S-d"),
            (b"f", b"P-f"),
            (b"g", b"S-g"),
        ] {
            batch.put(Cf::Lock, k.to_vec(), v.to_vec());
        }
        batch.put(Cf::Lock, b"a".to_vec(), b"S-a".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        let all = |snapshot: &E::Snap| {
            testing::collect_forward(snapshot, Cf::Lock, IterOptions::new())
                .into_iter()
                .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
                .collect::<Vec<_>>()
        };
        let expected: Vec<(String, String)> = [
            ("a", "S-a"),
            ("b", "P-b"),
            ("d", "S-d"),
            ("f", "P-f"),
            ("g", "S-g"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for view in [engine.snapshot(), engine.latest()] {
            assert_eq!(all(&view), expected);
            let mut backward = testing::collect_backward(&view, Cf::Lock, IterOptions::new());
            backward.reverse();
            assert_eq!(backward.len(), 5);
            assert_eq!(
                view.get(Cf::Lock, b"d").unwrap().as_deref(),
                Some(&b"S-d"[..])
            );
            // Bounds, seeks and turning round.
            let bounded = IterOptions::new()
                .lower_bound(b"b".to_vec())
                .upper_bound(b"g".to_vec());
            let keys: Vec<Vec<u8>> = testing::collect_forward(&view, Cf::Lock, bounded)
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(keys, vec![b"b".to_vec(), b"d".to_vec(), b"f".to_vec()]);
            let mut it = view.iter(Cf::Lock, IterOptions::new()).unwrap();
            assert!(it.seek(b"c").unwrap());
            assert_eq!(it.key(), b"d");
            assert!(it.next().unwrap());
            assert_eq!(it.key(), b"f");
            assert!(it.prev().unwrap());
            assert_eq!(it.key(), b"d");
            assert!(it.prev().unwrap());
            assert_eq!((it.key(), it.value()), (&b"b"[..], &b"P-b"[..]));
            assert!(it.seek_for_prev(b"e").unwrap());
            assert_eq!(it.key(), b"d");
            assert!(it.next().unwrap());
            assert_eq!(it.key(), b"f");
            assert!(it.seek_to_last().unwrap());
            assert_eq!(it.key(), b"g");
            assert!(!it.next().unwrap());
        }
        // Replaced by a lock RocksDB keeps, deleted, or deleted by range.
        let mut batch = WriteBatch::new();
        batch.put(Cf::Lock, b"d".to_vec(), b"P-d".to_vec());
        batch.delete(Cf::Lock, b"g".to_vec());
        batch.delete_range(Cf::Lock, b"a".to_vec(), b"b".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        let keys: Vec<String> = all(&engine.snapshot())
            .into_iter()
            .map(|(k, v)| k + &v)
            .collect();
        assert_eq!(keys, vec!["bP-b", "dP-d", "fP-f"]);
        assert_eq!(engine.latest().get(Cf::Lock, b"g").unwrap(), None);
    }

    #[test]
    fn memory_only_locks_read_as_any_lock_on_memory() {
        memory_only_locks_read_as_any_lock(MemoryEngine::new());
    }

    #[test]
    fn memory_only_locks_read_as_any_lock_on_rocks() {
        memory_only_locks_read_as_any_lock(temp_rocks_engine());
    }

    /// `get_read_lock` answers what `get` does for every lock a read can
    /// meet, and for a pessimistic lock (type `S`) either it or nothing;
    /// RocksDB's views, which keep those locks apart, answer nothing.
    fn read_locks_leave_out_only_pessimistic_locks<E: Engine>(engine: E, skips_pessimistic: bool) {
        let mut batch = WriteBatch::new();
        batch.put(Cf::Lock, b"d".to_vec(), b"S-d".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        let check = |view: &E::Snap, held: &[(&[u8], &[u8])]| {
            for (key, lock) in held {
                assert_eq!(view.get_read_lock(key).unwrap().as_deref(), Some(*lock));
            }
            let pessimistic = view.get_read_lock(b"d").unwrap();
            assert_eq!(
                view.get(Cf::Lock, b"d").unwrap().as_deref(),
                Some(&b"S-d"[..])
            );
            if skips_pessimistic {
                assert_eq!(pessimistic, None);
            } else {
                assert_eq!(pessimistic.as_deref(), Some(&b"S-d"[..]));
            }
            assert_eq!(view.get_read_lock(b"absent").unwrap(), None);
        };
        // Only a pessimistic lock: a snapshot knows it holds no other.
        check(&engine.snapshot(), &[]);
        check(&engine.latest(), &[]);
        let mut batch = WriteBatch::new();
        batch.put(Cf::Lock, b"b".to_vec(), b"P-b".to_vec());
        batch.put(Cf::Lock, b"f".to_vec(), b"L-f".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        let held: [(&[u8], &[u8]); 2] = [(b"b", b"P-b"), (b"f", b"L-f")];
        let before_delete = engine.snapshot();
        check(&before_delete, &held);
        check(&engine.latest(), &held);
        let mut batch = WriteBatch::new();
        batch.delete(Cf::Lock, b"b".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        // The older snapshot still reads the deleted lock; the latest does not.
        check(&before_delete, &held);
        assert_eq!(engine.latest().get_read_lock(b"b").unwrap(), None);
        check(&engine.latest(), &held[1..]);
    }

    #[test]
    fn read_locks_leave_out_only_pessimistic_locks_on_memory() {
        read_locks_leave_out_only_pessimistic_locks(MemoryEngine::new(), false);
    }

    #[test]
    fn read_locks_leave_out_only_pessimistic_locks_on_rocks() {
        read_locks_leave_out_only_pessimistic_locks(temp_rocks_engine(), true);
    }

    /// On RocksDB, pessimistic locks never reach the database: a batch of
    /// them alone writes nothing, and a reopened database holds none, while
    /// a lock it held before is replaced cleanly.
    #[test]
    fn rocks_keeps_pessimistic_locks_in_memory_only() {
        let dir = tempfile::tempdir().unwrap();
        {
            let engine = RocksEngine::open(dir.path()).unwrap();
            let mut batch = WriteBatch::new();
            batch.put(Cf::Lock, b"p".to_vec(), b"P-p".to_vec());
            batch.put(Cf::Lock, b"q".to_vec(), b"P-q".to_vec());
            engine.write(&batch, WriteOptions::default()).unwrap();
            let mut batch = WriteBatch::new();
            batch.put(Cf::Lock, b"s".to_vec(), b"S-s".to_vec());
            // A lock RocksDB holds, replaced by a memory-only one.
            batch.put(Cf::Lock, b"q".to_vec(), b"S-q".to_vec());
            engine.write(&batch, WriteOptions::default()).unwrap();
            assert_eq!(
                engine.latest().get(Cf::Lock, b"s").unwrap().as_deref(),
                Some(&b"S-s"[..])
            );
            let db = engine.raw_db();
            let lock_cf = db.cf_handle(Cf::Lock.name()).unwrap();
            assert!(db.get_cf(&lock_cf, b"zs").unwrap().is_none());
            assert!(db.get_cf(&lock_cf, b"zq").unwrap().is_none());
            assert!(db.get_cf(&lock_cf, b"zp").unwrap().is_some());
        }
        let engine = RocksEngine::open(dir.path()).unwrap();
        let keys: Vec<Vec<u8>> =
            testing::collect_forward(&engine.snapshot(), Cf::Lock, IterOptions::new())
                .into_iter()
                .map(|(k, _)| k)
                .collect();
        assert_eq!(keys, vec![b"p".to_vec()]);
        assert_eq!(engine.latest().get(Cf::Lock, b"s").unwrap(), None);
    }

    #[test]
    fn memory_engine_ceilings_follow_its_writes() {
        let engine = MemoryEngine::new();
        assert_eq!(engine.write_ts_ceiling(b"a"), Some(0));
        let mut batch = WriteBatch::new();
        batch.put(Cf::Write, write_cf_key(b"a", 7), b"w".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        assert_eq!(engine.snapshot().write_ts_ceiling(b"a"), Some(7));
    }

    #[test]
    fn rocks_engine_stores_keys_behind_the_data_prefix() {
        let engine = temp_rocks_engine();
        let mut batch = WriteBatch::new();
        batch.put(Cf::Lock, b"k".to_vec(), b"v".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        let cf = engine.raw_db().cf_handle("lock").unwrap();
        assert_eq!(
            engine.raw_db().get_cf(cf, b"zk").unwrap(),
            Some(b"v".to_vec())
        );
        assert_eq!(engine.raw_db().get_cf(cf, b"k").unwrap(), None);
    }

    #[test]
    fn rocks_iterator_gives_up_past_its_skip_limit() {
        let engine = temp_rocks_engine();
        let mut batch = WriteBatch::new();
        for i in 0..100u32 {
            batch.put(Cf::Lock, format!("k{i:03}").into_bytes(), b"v".to_vec());
        }
        engine.write(&batch, WriteOptions::default()).unwrap();
        let mut batch = WriteBatch::new();
        for i in 0..99u32 {
            batch.delete(Cf::Lock, format!("k{i:03}").into_bytes());
        }
        engine.write(&batch, WriteOptions::default()).unwrap();
        let snapshot = engine.snapshot();
        let mut it = snapshot
            .iter(Cf::Lock, IterOptions::new().max_skipped(10))
            .unwrap();
        assert!(matches!(it.seek(b"k000"), Err(Error::Incomplete)));
        assert!(!it.valid().unwrap());
        // Few hidden entries on the way: fine, and the cursor recovers.
        assert!(it.seek(b"k095").unwrap());
        assert_eq!(it.key(), b"k099");
        let mut unlimited = snapshot.iter(Cf::Lock, IterOptions::new()).unwrap();
        assert!(unlimited.seek(b"k000").unwrap());
        assert_eq!(unlimited.key(), b"k099");
    }

    #[test]
    fn second_open_of_a_live_directory_is_an_error() {
        let engine = temp_rocks_engine();
        let err = RocksEngine::open(engine.path()).unwrap_err();
        assert!(matches!(err, Error::Rocks(_)), "{err}");
    }

    #[test]
    fn snapshots_and_iterators_outlive_their_engine_handle() {
        let engine = temp_rocks_engine();
        let mut batch = WriteBatch::new();
        batch.put(Cf::Default, b"a".to_vec(), b"1".to_vec());
        engine.write(&batch, WriteOptions::default()).unwrap();
        let snapshot = engine.snapshot();
        let mut it = snapshot.iter(Cf::Default, IterOptions::new()).unwrap();
        drop(engine);
        drop(snapshot);
        assert!(it.seek_to_first().unwrap());
        assert_eq!((it.key(), it.value()), (&b"a"[..], &b"1"[..]));
    }
}
