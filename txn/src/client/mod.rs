//! The client: what an embedding program uses. Open a directory, begin
//! transactions from many threads, commit them, never think about locks.
//!
//! The client is Percolator's coordinator. It keeps no state that matters
//! for correctness: a transaction's fate is decided by its primary lock,
//! and anyone who meets one of its locks can find that fate out and finish
//! the job (roll the transaction forward or back). A client that dies at
//! any point leaves nothing that later readers and writers cannot resolve.
//!
//! ```
//! use percolate_txn::client::Client;
//!
//! let dir = tempfile::tempdir()?;
//! let client = Client::open(dir.path())?;
//! let mut txn = client.begin()?;
//! txn.put(b"alice", b"10");
//! txn.put(b"bob", b"5");
//! txn.commit()?;
//!
//! let txn = client.begin()?;
//! assert_eq!(txn.get(b"alice")?, Some(b"10".to_vec()));
//! assert_eq!(client.get_latest(b"bob")?, Some(b"5".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod auto_gc;
mod backup;
mod export;
mod gc;
mod heartbeat;
mod keyspace;
pub mod observe;
mod pessimistic;
mod plan;
mod raw;
mod resolver;
mod scan;
// The deterministic simulator's seam: builds with the `sim` feature only.
#[cfg(any(test, feature = "sim"))]
mod sim_seam;
mod snapshot;
mod transaction;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use percolate_engine::{Engine, RocksEngine, RocksOptions};
use percolate_mvcc::{Key, TimeStamp};

pub use self::auto_gc::{AutoGcConfig, GcRound};
pub use self::backup::BackupInfo;
pub use self::export::{ExportManifest, ExportedFile, MANIFEST_FILE};
use self::heartbeat::HeartBeats;
pub use self::keyspace::{
    KEYSPACE_MARKER, Keyspace, KeyspaceRead, KeyspaceScan, KeyspaceWrite, MAX_KEYSPACE_NAME,
};
pub use self::observe::{ACK_KEYSPACE, ObserverMetrics, Watch, WorkerConfig, Workers};
pub use self::pessimistic::PessimisticTransaction;
// The commit's layout and protocol rule, for the simulator's model of it.
#[cfg(any(test, feature = "sim"))]
pub use self::plan::{CommitPlan, Decision, PlanLimits, PrewriteShape, decide};
pub use self::raw::{RawClient, RawScanIter};
pub use self::scan::{FIRST_BATCH, Keys, MAX_BATCH, Scan};
#[cfg(any(test, feature = "sim"))]
pub use self::sim_seam::ResolveRound;
pub use self::snapshot::Snapshot;
pub use self::transaction::{CommitInfo, CommitOptions, CommitProtocol, Transaction};

use crate::cluster::Cluster;
use crate::concurrency_manager::MaxTsLimit;
use crate::errors::io_error;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::oracle::{LocalOracle, TimestampOracle};
use crate::read::ReadOptions;
use crate::storage::StorageConfig;
use crate::{Error, Result};

/// How the client commits and waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Commit by async commit when a transaction spans several prewrite
    /// batches but has at most `max_async_commit_keys` keys. Defaults to
    /// true.
    pub async_commit: bool,
    /// Commit in one phase when every mutation fits in one prewrite batch of
    /// one region. Defaults to true.
    pub one_pc: bool,
    /// TTL of the transaction's locks in milliseconds; a live client keeps
    /// its primary lock alive with heart beats. Defaults to 3000.
    pub lock_ttl_ms: u64,
    /// Most mutations in one prewrite command. Defaults to 64.
    pub max_batch_keys: usize,
    /// Largest transaction (in keys) that uses async commit: the primary
    /// lock lists every secondary. Defaults to 256.
    pub max_async_commit_keys: usize,
    /// How long a read or prewrite waits for a live transaction's lock
    /// before giving up with [`Error::ResolveLockTimeout`]. Defaults to
    /// 10 s.
    pub resolve_timeout: Duration,
    /// How long a read that meets an async-commit lock waits for the
    /// lock's transaction to remove it before resolving it. Such a
    /// transaction is committing (its commit point was its prewrite) and
    /// cannot be pushed past the read; its commit records normally follow
    /// within moments, and the read then sees the new value with no lock
    /// resolution (a timestamp, a `CheckTxnStatus`) and no back-off.
    /// Zero resolves at once, as TiKV's client does. Defaults to 5 ms.
    pub async_commit_read_wait: Duration,
    /// How long an optimistic commit whose prewrite meets another
    /// transaction's async-commit lock waits for that lock to go before it
    /// resolves it (once per commit). The lock's transaction is committing:
    /// when it commits at or below this transaction's start_ts (its lock's
    /// min_commit_ts is not above it), the prewrite goes on once the lock
    /// is gone, with no `CheckTxnStatus` on the lock's primary (a command
    /// on the latches of the very key being committed) and no back-off;
    /// when it commits above, this commit could only end in a write
    /// conflict, and gives up at once with `KeyIsLocked`, to be retried.
    /// An expired lock is resolved as before. Zero resolves every lock at
    /// once, as TiKV's client does. Defaults to 5 ms.
    pub async_commit_prewrite_wait: Duration,
    /// Attempts [`Client::with_retry`] makes. Defaults to 64.
    pub max_retries: usize,
    /// Whether a transaction's prewrite batches (several when it spans
    /// regions or has more than `max_batch_keys` keys) run at once.
    /// Defaults to [`ParallelPrewrite::WhenSynced`].
    pub parallel_prewrite: ParallelPrewrite,
    /// Who writes the commit records that follow a transaction's commit
    /// point (a 2PC transaction's secondaries, every key of an async-commit
    /// one). Defaults to [`SecondaryCommits::Inline`].
    pub secondary_commits: SecondaryCommits,
    /// How long a pessimistic transaction's lock request waits for another
    /// transaction's lock before it checks whether that transaction is
    /// still alive (and waits again until `resolve_timeout`). Defaults to
    /// 1 s, TiKV's `wait-for-lock-timeout`.
    pub lock_wait_timeout: Duration,
    /// How every commit's writes reach the disk unless
    /// [`CommitOptions::durability`] says otherwise: `Some(Sync)`, durable
    /// on disk when `commit` returns (survives a power loss);
    /// `Some(Buffered)`, in the operating system's buffers (survives a
    /// crash of the process only). Defaults to `None`: each region's own
    /// ([`StorageConfig`]'s scheduler durability, buffered unless set).
    pub durability: Option<percolate_engine::Durability>,
    /// Automatic garbage collection: a safe point ten minutes behind the
    /// clock by default, advanced by a background thread (see
    /// [`AutoGcConfig`] and [`Client::gc_once`]).
    pub gc: AutoGcConfig,
}

/// Whether a transaction's prewrite batches run at once (TiKV's parallel
/// prewrite: no batch waits for another, the primary's included) or one
/// after another on the committing thread. The protocol is the same either
/// way: batches may land in any order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParallelPrewrite {
    /// In parallel where the batches' regions sync their writes, one after
    /// another where they do not. A synced write waits for the disk, and
    /// batches written at once join one RocksDB write group (one sync); a
    /// buffered write costs about what handing it to another thread and
    /// back does, so the committing thread writes each itself. Measured
    /// with `percolate-bench`, async commit over 4 regions, 4-key
    /// transfers: buffered, one after another 0.29x TransactionDB against
    /// 0.19x in parallel; synced (8 threads), in parallel 0.30x against
    /// 0.20x.
    #[default]
    WhenSynced,
    /// Always in parallel: every batch but the last goes to its region's
    /// workers, the last runs on the committing thread meanwhile.
    Always,
    /// Always one after another on the committing thread.
    Never,
}

/// Who writes the commit records after a transaction's commit point. Either
/// way the transaction is committed once `commit` passes that point, and a
/// record not written (the client died) is written by whichever reader meets
/// the lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecondaryCommits {
    /// The committing thread, before `commit` returns, region after
    /// region: no hand-off to another thread and back, so the least CPU per
    /// transaction, at the price of one engine write per region in the
    /// commit's latency. The choice for an embedded engine, where a hand-off
    /// costs about what the write does.
    #[default]
    Inline,
    /// Each region's workers, while `commit` returns at the commit point:
    /// the shortest commit latency, as TiKV's client does over the network,
    /// for two thread wake-ups per region.
    Background,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            async_commit: true,
            one_pc: true,
            lock_ttl_ms: 3000,
            max_batch_keys: 64,
            max_async_commit_keys: 256,
            resolve_timeout: Duration::from_secs(10),
            async_commit_read_wait: Duration::from_millis(5),
            async_commit_prewrite_wait: Duration::from_millis(5),
            max_retries: 64,
            parallel_prewrite: ParallelPrewrite::default(),
            secondary_commits: SecondaryCommits::default(),
            lock_wait_timeout: Duration::from_secs(1),
            durability: None,
            gc: AutoGcConfig::default(),
        }
    }
}

/// How [`Client::open_with`] sets up a data directory.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// The raw keys the key space is split at into regions (none: one
    /// region).
    pub split_keys: Vec<Vec<u8>>,
    /// The client's behaviour.
    pub client: ClientConfig,
    /// Every region's storage (its `initial_max_ts` is set from the
    /// oracle).
    pub storage: StorageConfig,
    /// RocksDB's tuning: block cache, bloom filters, memtable size,
    /// background jobs.
    pub engine: RocksOptions,
    /// Worker threads for the regions' commands, shared out among the
    /// regions (each gets at least two): `None`, the machine's available
    /// parallelism. Overrides `storage.scheduler.worker_threads`. Most
    /// commands of a [`Client`] run on the calling thread; the workers take
    /// those that wait for latches and the background work.
    pub worker_threads: Option<usize>,
}

/// A handle on a set of regions and a timestamp oracle. Cheap to clone;
/// share it between threads.
pub struct Client<E: Engine = RocksEngine> {
    /// Dropped first: the last handle stops the GC thread, so that the
    /// client goes with it (see [`auto_gc::Handles`]).
    handles: Arc<auto_gc::Handles>,
    inner: Arc<Inner<E>>,
}

impl<E: Engine> Clone for Client<E> {
    fn clone(&self) -> Self {
        Client {
            handles: self.handles.clone(),
            inner: self.inner.clone(),
        }
    }
}

impl<E: Engine> Client<E> {
    /// The first handle on `inner`.
    fn from_inner(inner: Arc<Inner<E>>) -> Self {
        Client {
            handles: auto_gc::Handles::of(&inner),
            inner,
        }
    }
}

impl<E: Engine> std::fmt::Debug for Client<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cluster", &self.inner.cluster)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Aligned so that its reference count, which every transaction and
/// snapshot takes, is on a cache line of its own, not on the fields every
/// operation reads.
#[repr(align(128))]
pub(crate) struct Inner<E: Engine> {
    pub(crate) cluster: Cluster<E>,
    pub(crate) oracle: Arc<dyn TimestampOracle>,
    pub(crate) config: ClientConfig,
    pub(crate) heartbeats: HeartBeats,
    /// Automatic GC: live timestamps, safe point, background thread.
    pub(crate) auto_gc: auto_gc::AutoGc,
    /// Shared with the regions' storages ([`Client::metrics`]).
    pub(crate) metrics: Arc<Metrics>,
    /// The observers ([`Client::observe`]) and what their workers share.
    pub(crate) observers: observe::Registry<E>,
    /// The data directory's lock, held while the client lives (see
    /// [`Client::open_with`]); `None` for a client built from parts.
    _dir_lock: Option<std::fs::File>,
    /// The directory of a client from [`Client::open_read_only`]: it
    /// writes nothing, and a lock met is an error, not resolved.
    pub(crate) read_only: Option<std::path::PathBuf>,
    /// A timestamp the oracle is known to have handed out (or been moved
    /// past): a snapshot at or below it needs no move (`read_ahead`).
    handed_out: std::sync::atomic::AtomicU64,
}

impl Client<RocksEngine> {
    /// Opens (or creates) a data directory with one region: RocksDB in
    /// `dir/db`, the oracle's state file in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, OpenOptions::default())
    }

    /// Opens (or creates) a data directory.
    ///
    /// The client holds an exclusive lock on the directory (an advisory
    /// `flock` on `PERCOLATE.LOCK`) until it is dropped or the process
    /// exits: another open fails with [`Error::DirectoryLocked`], even if
    /// RocksDB's own LOCK file was deleted.
    pub fn open_with(dir: impl AsRef<Path>, options: OpenOptions) -> Result<Self> {
        let dir = dir.as_ref();
        create_data_dir(dir)?;
        // Percolate's own lock first, then RocksDB's: a second process on
        // the directory would race this one on the oracle's state file,
        // and RocksDB's LOCK file alone can be deleted under a running
        // process (RocksDB then lets a second one in, which deletes the
        // first one's files as obsolete).
        let dir_lock = lock_directory(dir)?;
        let engine = RocksEngine::open_with(dir.join("db"), &options.engine)?;
        // Above every commit and lock in the data, whatever the oracle's
        // own state file says (or if it is gone).
        let floor = timestamp_floor(&engine)?;
        let clock: Arc<dyn crate::oracle::Clock> = Arc::new(crate::oracle::SystemClock);
        let oracle: Arc<dyn TimestampOracle> =
            Arc::new(LocalOracle::open_above(dir, clock.clone(), floor)?);
        // By the clock: a snapshot's read moves the oracle up to the clock
        // plus the allowance (`read_ahead`), and one above that is refused.
        let max_ts_limit = options.storage.max_ts_limit.clone().or_else(|| {
            Some(
                MaxTsLimit::new(oracle.clone(), MaxTsLimit::DEFAULT_ALLOWANCE)
                    .with_wall_clock(clock),
            )
        });
        let mut storage = StorageConfig {
            initial_max_ts: oracle.get_ts()?,
            max_ts_limit,
            ..options.storage
        };
        let regions = options.split_keys.len() + 1;
        storage.scheduler.worker_threads = workers_per_region(options.worker_threads, regions);
        let cluster = Cluster::new(engine, options.split_keys, storage);
        Ok(Client::with_dir_lock(
            cluster,
            oracle,
            options.client,
            Some(dir_lock),
        ))
    }
}

impl Client<RocksEngine> {
    /// Opens a data directory for reading only, for inspecting a database
    /// another process has open, or one on read-only media.
    ///
    /// Nothing in `dir` is written or locked: RocksDB is opened in its
    /// read-only mode (the data as of the open), percolate's directory lock
    /// is not taken and the oracle's state file is not touched; the
    /// client's timestamps start above every commit and lock in the data
    /// and above the clock, and live only in memory. Reads see every
    /// commit made before the open. A read that meets a lock fails at once
    /// with `KeyIsLocked` (resolving it would be a write), and every write
    /// (a commit with writes, a pessimistic transaction, raw writes, GC,
    /// repair) fails with [`Error::ReadOnly`]. A directory without a
    /// database is an error.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let engine = RocksEngine::open_read_only(dir.join("db"), &RocksOptions::default())?;
        let now = TimeStamp::compose(crate::oracle::Clock::now_ms(&crate::oracle::SystemClock), 0);
        let floor = timestamp_floor(&engine)?.max(now);
        if crate::oracle::beyond_range(floor) {
            return Err(Error::TimestampBeyondRange { ts: floor });
        }
        let oracle: Arc<dyn TimestampOracle> =
            Arc::new(crate::oracle::CounterOracle::new(floor.into_inner() + 1));
        let storage = StorageConfig {
            initial_max_ts: oracle.get_ts()?,
            ..StorageConfig::default()
        };
        let cluster = Cluster::new(engine, Vec::new(), storage);
        let inner = Inner::new(
            cluster,
            oracle,
            ClientConfig::default(),
            None,
            Some(dir.to_path_buf()),
        );
        Ok(Client::from_inner(inner))
    }

    /// What the open dropped from a damaged write-ahead log, when the
    /// client was opened with
    /// [`WalRecovery::SalvagePrefix`](percolate_engine::WalRecovery) in
    /// [`OpenOptions::engine`] and the log was damaged; `None` otherwise.
    pub fn salvage_report(&self) -> Option<&percolate_engine::SalvageReport> {
        self.inner.cluster.regions()[0]
            .storage()
            .engine()
            .salvage_report()
    }
}

impl<E: Engine> Inner<E> {
    /// Fails with [`Error::ReadOnly`] on a client from
    /// [`Client::open_read_only`].
    pub(crate) fn check_writable(&self) -> Result<()> {
        match &self.read_only {
            Some(dir) => Err(Error::ReadOnly { path: dir.clone() }),
            None => Ok(()),
        }
    }

    /// Before a read at `ts`, a timestamp the oracle may not have handed
    /// out: makes sure the oracle hands out only timestamps above `ts`
    /// from now on, or fails. A read at `ts` raises the regions' `max_ts`
    /// to it, the async-commit and 1PC commits after it are computed
    /// above it, and the transactions that begin after those commits must
    /// read above them.
    ///
    /// Nothing to do for a `ts` at or below a timestamp the oracle
    /// handed out (the largest this asked for is kept: no call for a
    /// snapshot at an older one), or for
    /// `TimeStamp::max()` (a read of the latest data, which raises no
    /// `max_ts`). Above, the
    /// regions' `max_ts` limit must accept `ts`, and it must be within
    /// [`MaxTsLimit::DEFAULT_ALLOWANCE`] of the wall clock (which the
    /// limit of a client from [`Client::open`] checks itself:
    /// [`MaxTsLimit::with_wall_clock`]): a bogus far `ts` must not drag
    /// every later timestamp with it, and reads that each step a little
    /// past the oracle must not walk it away from the clock. Then the
    /// oracle moves past `ts`, and a fresh timestamp must show it did (an
    /// oracle whose [`advance_past`](TimestampOracle::advance_past) does
    /// nothing cannot serve such reads). A `ts` refused is
    /// [`Error::InvalidMaxTsUpdate`]; a move the oracle fails to persist
    /// is its error. A read-only client ([`Client::open_read_only`])
    /// commits nothing, so nothing is asked of it.
    pub(crate) fn read_ahead(&self, ts: TimeStamp) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.read_only.is_some()
            || ts.is_max()
            || ts.into_inner() <= self.handed_out.load(Ordering::Relaxed)
        {
            return Ok(());
        }
        let fresh = self.oracle.get_ts()?;
        self.handed_out
            .fetch_max(fresh.into_inner(), Ordering::Relaxed);
        if ts <= fresh {
            return Ok(());
        }
        let mut clock_bounded = true;
        for region in self.cluster.regions() {
            let cm = region.storage().concurrency_manager();
            cm.check_limit(ts)?;
            clock_bounded &= cm.limit_follows_clock();
        }
        if !clock_bounded {
            let allowance_ms = MaxTsLimit::DEFAULT_ALLOWANCE.as_millis() as u64;
            let now_ms = crate::oracle::Clock::now_ms(&crate::oracle::SystemClock);
            let bound_ms = now_ms.saturating_add(allowance_ms);
            if ts.physical() > bound_ms {
                return Err(Error::InvalidMaxTsUpdate {
                    attempted_ts: ts,
                    limit: TimeStamp::compose(bound_ms.min((1 << 46) - 1), 0),
                });
            }
        }
        self.oracle.advance_past(ts)?;
        let moved = self.oracle.get_ts()?;
        self.handed_out
            .fetch_max(moved.into_inner(), Ordering::Relaxed);
        if moved <= ts {
            return Err(Error::InvalidMaxTsUpdate {
                attempted_ts: ts,
                limit: moved,
            });
        }
        Ok(())
    }
}

/// A timestamp at or above every one in `engine`'s data: the newest
/// commit (the engine's persisted ts ceiling), the newest timestamp the
/// locks carry (start_ts, for_update_ts, min_commit_ts; an oracle that
/// handed one of those out again would give a new transaction the identity
/// of the lock's), and the GC safe point (a read below it may find
/// versions gone). An oracle serving this data starts above it, whatever
/// its own state file says; [`Client::open_with`] starts it so, and a tool
/// that opens the engine itself should too. A value beyond the oracle's
/// range here (damaged, or written by a tool) makes that open fail with
/// [`Error::TimestampBeyondRange`] rather than start below it.
///
/// Locks are few (each lives from a prewrite to its commit), so this reads
/// them all. One that does not decode is skipped here: every read that
/// reaches it reports it, and [`Client::repair`] removes it.
pub fn timestamp_floor(engine: &RocksEngine) -> Result<TimeStamp> {
    Ok(TimeStamp::new(engine.persisted_ts_ceiling())
        .max(TimeStamp::new(engine.gc_safe_point()))
        .max(newest_lock_ts(engine)?))
}

/// The newest timestamp the locks on disk carry: see [`timestamp_floor`].
fn newest_lock_ts(engine: &RocksEngine) -> Result<TimeStamp> {
    use percolate_engine::{Cf, EngineIterator, IterOptions, Snapshot};
    let mut cursor = engine
        .snapshot()
        .iter(Cf::Lock, IterOptions::new().fill_cache(false))?;
    let mut newest = TimeStamp::zero();
    let mut valid = cursor.seek_to_first()?;
    while valid {
        if let Ok(lock) = percolate_mvcc::Lock::parse(cursor.value()) {
            newest = newest
                .max(lock.ts)
                .max(lock.for_update_ts)
                .max(lock.min_commit_ts);
        }
        valid = cursor.next()?;
    }
    Ok(newest)
}

/// Each region's share of `total` worker threads (the machine's available
/// parallelism when `None`), at least two.
fn workers_per_region(total: Option<usize>, regions: usize) -> usize {
    let total =
        total.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    (total / regions.max(1)).max(2)
}

/// The name of percolate's lock file in a data directory.
const DIR_LOCK_FILE: &str = "PERCOLATE.LOCK";

/// Takes an exclusive advisory lock (`flock`) on `dir/PERCOLATE.LOCK`,
/// held as long as the returned file is open: the process's exit, however
/// it ends, releases it. Fails with [`Error::DirectoryLocked`] when another
/// process (or another client of this one) holds it.
///
/// [`Client::open_with`] takes it before RocksDB opens; a tool that opens
/// a data directory's engine itself (to build a [`Client`] from parts with
/// [`Client::new`]) takes it first too, and keeps the file open as long as
/// the engine.
pub fn lock_directory(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join(DIR_LOCK_FILE);
    let io = io_error("lock the data directory", &path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(&io)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(Error::DirectoryLocked {
            path: dir.to_path_buf(),
        }),
        Err(e) => Err(io(e.into())),
    }
}

impl<E: Engine> Client<E> {
    /// A client over `cluster`, taking timestamps from `oracle`. Every
    /// region's `max_ts` must have started at a timestamp from this oracle
    /// (see [`StorageConfig::initial_max_ts`]).
    ///
    /// Such a client writes: over an engine opened read-only
    /// ([`RocksEngine::open_read_only`]) a commit, or a read that must roll
    /// a lock forward or back, fails with the engine's `ReadOnly` error (in
    /// [`Error::Engine`]). [`Client::open_read_only`] is the client
    /// that knows it reads only: it refuses writes up front and reports a
    /// lock as `KeyIsLocked` instead of resolving it.
    pub fn new(
        cluster: Cluster<E>,
        oracle: Arc<dyn TimestampOracle>,
        config: ClientConfig,
    ) -> Self {
        Self::with_dir_lock(cluster, oracle, config, None)
    }

    fn with_dir_lock(
        cluster: Cluster<E>,
        oracle: Arc<dyn TimestampOracle>,
        config: ClientConfig,
        dir_lock: Option<std::fs::File>,
    ) -> Self {
        // Only a client that owns its directory collects by itself: one
        // built from parts may share its engine with other clients, whose
        // transactions and snapshots its safe point would not wait for.
        let owns_its_data = dir_lock.is_some();
        let inner = Inner::new(cluster, oracle, config, dir_lock, None);
        if owns_its_data {
            auto_gc::AutoGc::start(&inner);
        }
        Client::from_inner(inner)
    }

    /// Fails with [`Error::ReadOnly`] on a client from
    /// [`Client::open_read_only`].
    pub(crate) fn check_writable(&self) -> Result<()> {
        self.inner.check_writable()
    }

    /// The regions.
    pub fn cluster(&self) -> &Cluster<E> {
        &self.inner.cluster
    }

    /// Every counter and histogram of the client and its regions
    /// ([`crate::metrics`]), with the engine's own statistics (RocksDB's
    /// block cache hits, write stalls, compaction bytes, sizes) where it
    /// keeps them. [`MetricsSnapshot::to_prometheus`] renders it for a
    /// Prometheus scrape.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let client = percolate_txn::client::Client::open(dir.path())?;
    /// client.with_retry(|txn| {
    ///     txn.put(b"k", b"v");
    ///     Ok(())
    /// })?;
    /// let metrics = client.metrics();
    /// assert_eq!(metrics.commits_total(), 1);
    /// assert!(metrics.to_prometheus().contains("percolate_commits_total"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metrics(&self) -> MetricsSnapshot {
        let mut snapshot = self.inner.metrics.snapshot();
        let regions = self.inner.cluster.regions();
        snapshot.latch_waits = regions
            .iter()
            .map(|r| r.storage().scheduler().latch_waits())
            .sum();
        snapshot.engine = regions.first().and_then(|r| r.storage().engine().stats());
        snapshot
    }

    /// The timestamp oracle.
    pub fn oracle(&self) -> &dyn TimestampOracle {
        &*self.inner.oracle
    }

    /// The client's configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Begins an optimistic transaction at a fresh start_ts (snapshot
    /// isolation).
    pub fn begin(&self) -> Result<Transaction<E>> {
        let (start_ts, live) = self.inner.auto_gc.live.fresh(&*self.inner.oracle)?;
        Ok(Transaction::new(self.inner.clone(), start_ts, live))
    }

    /// Begins a pessimistic transaction at a fresh start_ts: its writes
    /// and [`get_for_update`](PessimisticTransaction::get_for_update) lock
    /// keys as they go (see [`PessimisticTransaction`]).
    pub fn begin_pessimistic(&self) -> Result<PessimisticTransaction<E>> {
        self.check_writable()?;
        Ok(PessimisticTransaction::new(self.begin()?))
    }

    /// Runs `work` in a new pessimistic transaction and commits it, retrying
    /// the whole transaction after a jittered backoff on a retryable error
    /// (a deadlock, a lock that did not go away), up to
    /// [`ClientConfig::max_retries`] times. Conflicts on the keys it locks
    /// are retried inside each lock request, not here.
    pub fn with_retry_pessimistic<T>(
        &self,
        mut work: impl FnMut(&mut PessimisticTransaction<E>) -> Result<T>,
    ) -> Result<T> {
        let mut retries = Retries::new(self.inner.config.max_retries);
        loop {
            let mut txn = self.begin_pessimistic()?;
            match work(&mut txn).and_then(|out| txn.commit().map(|_| out)) {
                Err(e) if retries.again(&e, &self.inner.metrics) => {}
                other => return other,
            }
        }
    }

    /// The latest committed value of `key`, read without a timestamp: no
    /// oracle call, and the read does not hold back future commits. Locks
    /// in the way are resolved as for any read.
    pub fn get_latest(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner
            .get(key, TimeStamp::max(), &ReadOptions::default())
    }

    /// A fresh timestamp from the oracle: at or above the commit_ts of
    /// every commit acknowledged so far (a 1PC or async commit computes
    /// its commit_ts from the regions' `max_ts`, which may be the oracle's
    /// next timestamp), so a read at it sees them all.
    pub fn current_ts(&self) -> Result<TimeStamp> {
        self.inner.oracle.get_ts()
    }

    /// A read-only snapshot at `ts`: it sees exactly the transactions that
    /// committed at or below `ts`. A `ts` from [`current_ts`](Self::current_ts)
    /// (or a transaction's start_ts) gives a snapshot whose answers never
    /// change. Versions below the last GC safe point may be gone.
    ///
    /// A `ts` the oracle has not handed out yet is read only after the
    /// oracle has been moved past it, which the snapshot's first read
    /// does: a read there raises the regions' `max_ts` to `ts`, the
    /// async-commit and 1PC commits after it are computed above `ts`, and
    /// the transactions that begin after those commits must read above
    /// them. The move is refused for a `ts` above the regions' `max_ts`
    /// limit (for a client from [`Client::open`], more than a minute
    /// ahead of the wall clock), or one the oracle does not move past,
    /// and then every read of the snapshot fails with
    /// [`Error::InvalidMaxTsUpdate`] (each tries again: the clock moves
    /// on). A read-only client moves nothing: it commits nothing.
    pub fn snapshot(&self, ts: TimeStamp) -> Snapshot<E> {
        Snapshot::new(
            self.inner.clone(),
            ts,
            self.inner.auto_gc.live.register(ts),
            false,
        )
    }

    /// A read-only snapshot of the latest data: at a fresh timestamp from
    /// the oracle.
    pub fn snapshot_latest(&self) -> Result<Snapshot<E>> {
        let (ts, live) = self.inner.auto_gc.live.fresh(&*self.inner.oracle)?;
        Ok(Snapshot::new(self.inner.clone(), ts, live, true))
    }

    /// Raw key-value access, beside the transactional data and separate
    /// from it (see [`RawClient`]).
    pub fn raw(&self) -> RawClient<E> {
        RawClient::new(self.inner.clone())
    }

    /// Runs the read-only `work` in a new transaction: every read sees one
    /// snapshot (the transaction's start_ts). The transaction is borrowed
    /// immutably, so `work` cannot write; nothing is committed.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let client = percolate_txn::client::Client::open(dir.path())?;
    /// client.with_retry(|txn| {
    ///     txn.put(b"alice", b"10");
    ///     txn.put(b"bob", b"5");
    ///     Ok(())
    /// })?;
    /// let total: u64 = client.view(|txn| {
    ///     let mut total = 0;
    ///     for pair in txn.scan::<&[u8]>(..) {
    ///         let (_, balance) = pair?;
    ///         total += String::from_utf8_lossy(&balance).parse::<u64>().unwrap_or(0);
    ///     }
    ///     Ok(total)
    /// })?;
    /// assert_eq!(total, 15);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn view<T>(&self, work: impl FnOnce(&Transaction<E>) -> Result<T>) -> Result<T> {
        let (start_ts, live) = self.inner.auto_gc.live.fresh(&*self.inner.oracle)?;
        work(&Transaction::read_only(self.inner.clone(), start_ts, live))
    }

    /// Runs `work` in a new transaction and commits it; on a retryable
    /// error (a conflict, a lock that did not go away, a busy region) it
    /// starts over with a new transaction after a jittered backoff, up to
    /// [`ClientConfig::max_retries`] times.
    pub fn with_retry<T>(&self, work: impl FnMut(&mut Transaction<E>) -> Result<T>) -> Result<T> {
        self.with_retry_info(work).map(|(out, _)| out)
    }

    /// Like [`with_retry`](Self::with_retry), for a closure that may give up
    /// with an error of its own: `Err(TxnError::Abort(reason))` rolls the
    /// transaction back and returns at once, never retried; percolate's
    /// errors convert with `?` and are retried as `with_retry` retries
    /// them.
    ///
    /// ```
    /// use percolate_txn::client::{Client, TxnError};
    ///
    /// #[derive(Debug, PartialEq)]
    /// struct Overdraft { balance: u64 }
    ///
    /// # let dir = tempfile::tempdir()?;
    /// # let client = Client::open(dir.path())?;
    /// client.with_retry(|txn| { txn.put(b"alice", b"5"); Ok(()) })?;
    /// let spent = client.with_retry_or_abort(|txn| {
    ///     let balance: u64 = match txn.get(b"alice")? {
    ///         Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
    ///         None => 0,
    ///     };
    ///     if balance < 10 {
    ///         return Err(TxnError::Abort(Overdraft { balance }));
    ///     }
    ///     txn.put(b"alice", (balance - 10).to_string());
    ///     Ok(10)
    /// });
    /// assert_eq!(spent.unwrap_err().into_abort(), Some(Overdraft { balance: 5 }));
    /// assert_eq!(client.get_latest(b"alice")?, Some(b"5".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_retry_or_abort<T, U>(
        &self,
        mut work: impl FnMut(&mut Transaction<E>) -> std::result::Result<T, TxnError<U>>,
    ) -> std::result::Result<T, TxnError<U>> {
        let mut retries = Retries::new(self.inner.config.max_retries);
        loop {
            let mut txn = self.begin()?;
            let result = match work(&mut txn) {
                Ok(out) => txn.commit().map(|_| out).map_err(TxnError::Storage),
                // Dropped uncommitted: nothing was sent.
                Err(e) => Err(e),
            };
            match result {
                Err(TxnError::Storage(e)) if retries.again(&e, &self.inner.metrics) => {}
                other => return other,
            }
        }
    }

    /// Like [`with_retry`](Self::with_retry), and also returns how the
    /// successful attempt committed.
    pub fn with_retry_info<T>(
        &self,
        mut work: impl FnMut(&mut Transaction<E>) -> Result<T>,
    ) -> Result<(T, CommitInfo)> {
        let mut retries = Retries::new(self.inner.config.max_retries);
        loop {
            let mut txn = self.begin()?;
            match work(&mut txn).and_then(|out| txn.commit().map(|info| (out, info))) {
                Err(e) if retries.again(&e, &self.inner.metrics) => {}
                other => return other,
            }
        }
    }
}

/// What a closure given to [`Client::with_retry_or_abort`] fails with:
/// percolate's own error, or the caller's reason to give up.
#[derive(Debug)]
pub enum TxnError<U> {
    /// The closure gave up with its own error (an overdraft, a validation
    /// failure): the transaction is rolled back and not retried, and the
    /// error comes back as it was given.
    Abort(U),
    /// Percolate's error: a retryable one (a conflict, a lock that did not
    /// go away) is retried before it gets here.
    Storage(Error),
}

impl<U> TxnError<U> {
    /// The caller's error, if the closure aborted.
    pub fn into_abort(self) -> Option<U> {
        match self {
            TxnError::Abort(u) => Some(u),
            TxnError::Storage(_) => None,
        }
    }
}

impl<U> From<Error> for TxnError<U> {
    fn from(e: Error) -> Self {
        TxnError::Storage(e)
    }
}

impl<U: std::fmt::Display> std::fmt::Display for TxnError<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxnError::Abort(u) => write!(f, "transaction aborted: {u}"),
            TxnError::Storage(e) => e.fmt(f),
        }
    }
}

impl<U: std::error::Error + 'static> std::error::Error for TxnError<U> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TxnError::Abort(u) => Some(u),
            TxnError::Storage(e) => e.source(),
        }
    }
}

/// Exponential backoff with full jitter.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Backoff { next: first, max }
    }

    pub(crate) fn sleep(&mut self) {
        let nanos = self.next.as_nanos().min(u128::from(u64::MAX)) as u64;
        std::thread::sleep(Duration::from_nanos(rand::random_range(0..=nanos)));
        self.next = (self.next * 2).min(self.max);
    }
}

/// The retry policy of [`Client::with_retry`] and its kin: up to
/// `max_retries` attempts in all, a jittered backoff (2 ms, doubling to
/// 200 ms) before each retry.
///
/// Not even the first retry after a write conflict goes at once: on a hot
/// key the next start_ts usually lands below the commit of a writer
/// already in flight, and an immediate retry met a second conflict about
/// half the time (YCSB-A zipfian, 4 threads: conflicts per operation
/// doubled, throughput unchanged).
struct Retries {
    backoff: Backoff,
    attempt: usize,
    max: usize,
}

impl Retries {
    fn new(max: usize) -> Self {
        Retries {
            backoff: Backoff::new(Duration::from_millis(2), Duration::from_millis(200)),
            attempt: 1,
            max,
        }
    }

    /// Whether to run again after `e`; if so, counts the retry and waits
    /// as the policy says first.
    fn again(&mut self, e: &Error, metrics: &crate::metrics::Metrics) -> bool {
        if !e.is_retryable() || self.attempt >= self.max {
            return false;
        }
        self.attempt += 1;
        metrics.retry();
        self.backoff.sleep();
        true
    }
}

/// A deadline for waiting on other transactions' locks.
pub(crate) struct Deadline {
    /// When the first live lock was met: the clock starts there, so that
    /// an operation that meets none never reads it.
    started: std::cell::Cell<Option<Instant>>,
    timeout: Duration,
}

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Self {
        Deadline {
            started: std::cell::Cell::new(None),
            timeout,
        }
    }

    /// Fails with `conflict` once `timeout` has passed since the first
    /// check: a request that keeps meeting newer commits gives up as one
    /// that keeps meeting locks does.
    pub(crate) fn check_conflict(&self, conflict: Error) -> Result<()> {
        let started = self.started.get().unwrap_or_else(Instant::now);
        self.started.set(Some(started));
        if started.elapsed() > self.timeout {
            return Err(conflict);
        }
        Ok(())
    }

    /// Fails once `timeout` has passed since the first check.
    pub(crate) fn check(&self, key: &[u8], lock: &percolate_mvcc::LockInfo) -> Result<()> {
        let started = self.started.get().unwrap_or_else(Instant::now);
        self.started.set(Some(started));
        let waited = started.elapsed();
        if waited > self.timeout {
            return Err(Error::ResolveLockTimeout {
                key: Key::from_raw(key),
                lock_ts: lock.lock_version,
                primary: lock.primary_lock.clone(),
                waited,
            });
        }
        Ok(())
    }
}

/// The encoded form of a raw key.
pub(crate) fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

#[cfg(test)]
mod tests;

impl<E: Engine> Inner<E> {
    /// The client's shared state. It counts into its first region's
    /// metrics, which a cluster's regions share, and through an oracle
    /// that counts its calls there (when they record).
    fn new(
        cluster: Cluster<E>,
        oracle: Arc<dyn TimestampOracle>,
        config: ClientConfig,
        dir_lock: Option<std::fs::File>,
        read_only: Option<std::path::PathBuf>,
    ) -> Arc<Self> {
        let metrics = match cluster.regions().first() {
            Some(region) => region.storage().metrics().clone(),
            None => Arc::new(Metrics::new()),
        };
        let oracle: Arc<dyn TimestampOracle> = if metrics.is_enabled() {
            Arc::new(CountedOracle {
                inner: oracle,
                metrics: metrics.clone(),
            })
        } else {
            oracle
        };
        // Where the engine's persisted safe point stands: a reopened
        // client reports it, and its first round starts from it.
        let auto_gc = auto_gc::AutoGc::new();
        if let Some(region) = cluster.regions().first() {
            auto_gc.resume_from(region.storage().engine().gc_safe_point());
        }
        Arc::new_cyclic(|weak| Inner {
            cluster,
            oracle,
            metrics,
            heartbeats: HeartBeats::new(weak.clone(), config.lock_ttl_ms),
            config,
            auto_gc,
            observers: observe::Registry::new(),
            _dir_lock: dir_lock,
            read_only,
            handed_out: std::sync::atomic::AtomicU64::new(0),
        })
    }
}

/// Creates the data directory `dir` if missing.
pub(crate) fn create_data_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_error("create directory", dir))
}

/// The client's oracle, counting its calls in the metrics.
struct CountedOracle {
    inner: Arc<dyn TimestampOracle>,
    metrics: Arc<Metrics>,
}

impl TimestampOracle for CountedOracle {
    fn get_ts(&self) -> Result<TimeStamp> {
        self.metrics.oracle_call();
        self.inner.get_ts()
    }

    fn get_ts_batch(&self, count: u32) -> Result<TimeStamp> {
        self.metrics.oracle_call();
        self.inner.get_ts_batch(count)
    }

    fn advance_past(&self, ts: TimeStamp) -> Result<()> {
        self.inner.advance_past(ts)
    }
}
