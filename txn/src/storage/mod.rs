//! `Storage`: the command API of one region.
//!
//! Every write command goes through the region's scheduler (latches, one
//! atomic engine write, group commit when durable); reads take no latches.
//! Each command has a blocking method named in TiKV's vocabulary
//! ([`prewrite`](Storage::prewrite), [`commit`](Storage::commit), ...),
//! and every command can also be sent without blocking
//! ([`sched_write`](Storage::sched_write),
//! [`sched_read`](Storage::sched_read)), which returns a [`Pending`] to
//! wait on or `.await`, so a client can have many commands in flight.
//!
//! ```
//! use percolate_txn::commands::{Mutation, Prewrite};
//! use percolate_txn::mvcc::{Key, TimeStamp};
//! use percolate_txn::storage::Storage;
//!
//! let dir = tempfile::tempdir()?;
//! let storage = Storage::open(dir.path())?;
//! let key = Key::from_raw(b"k");
//! let (start_ts, commit_ts) = (TimeStamp::new(10), TimeStamp::new(11));
//! let prewrite = Prewrite::new(vec![Mutation::put(key.clone(), b"v".to_vec())], b"k", start_ts);
//! storage.prewrite(prewrite)?;
//! storage.commit(vec![key.clone()], start_ts, commit_ts)?;
//! assert_eq!(storage.get(key, TimeStamp::new(12))?, Some(b"v".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use percolate_engine::{
    Cf, Durability, Engine, EngineIterator, IterOptions, RocksEngine, Snapshot,
};
use percolate_mvcc::{Key, KvPair, LockInfo, MvccReader, TimeStamp};

use crate::actions::acquire_pessimistic_lock::PessimisticLockKeyResult;
use crate::actions::check_txn_status::CheckTxnStatusOptions;
use crate::actions::gc::GcInfo;
use crate::actions::mvcc_by_key::MvccInfo;
use crate::actions::prewrite::{Mutation, PrewriteResult};
use crate::actions::{ReleasedLock, TxnStatus};
use crate::commands::PrewriteRef;
use crate::commands::{
    AcquirePessimisticLock, BatchGet, BatchRollback, CheckSecondaryLocks, CheckTxnStatus, Cleanup,
    Commit, DamagedRecord, Footprint, Gc, Get, MvccByKey, PessimisticRollback, Prewrite,
    RawBatchGet, RawCompareAndSwap, RawDelete, RawDeleteRange, RawGet, RawPut, RawScan,
    ReadCommand, ReadContext, Repair, ResolveLock, ResolveLockLite, Scan, ScanLock,
    SecondaryLocksStatus, TxnHeartBeat, WriteCommand, WriteContext, WriteResult,
};
use crate::concurrency_manager::ConcurrencyManager;
use crate::lock_wait::WaitOutcome;
use crate::metrics::{LockWaitOutcome, Metrics};
use crate::scheduler::{Finish, Job, JobInput, Reply, Scheduler, WaitLimit, pending};
use crate::{Error, Result};

mod bounds;
use self::bounds::Bounds;
pub use self::bounds::KeyRange;
// What a storage is set up with and answers, defined with the parts that
// use them.
pub use crate::concurrency_manager::MaxTsLimit;
pub use crate::lock_wait::{LockWaits, WaitForEntry, key_hash};
pub use crate::read::{ReadOptions, ScanRequest};
pub use crate::scheduler::{Pending, SchedulerConfig};

/// How a `Storage` is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    /// The scheduler: workers, queue bound, latches, durability.
    pub scheduler: SchedulerConfig,
    /// The region's `max_ts` at start: a fresh timestamp from the oracle,
    /// so that async-commit and 1PC transactions never commit below a read
    /// served before a restart. One beyond the oracle's range counts as
    /// the last timestamp in it. Defaults to zero.
    pub initial_max_ts: TimeStamp,
    /// The bound on the region's `max_ts`, from the oracle: a read or
    /// check at a timestamp beyond it is refused with
    /// [`Error::InvalidMaxTsUpdate`]. Defaults to `None` (no bound: this
    /// storage knows no oracle); [`Client::open`](crate::client::Client::open)
    /// sets one with its oracle, [`MaxTsLimit::DEFAULT_ALLOWANCE`] and the
    /// system clock ([`MaxTsLimit::with_wall_clock`]).
    pub max_ts_limit: Option<MaxTsLimit>,
    /// The raw keys this storage serves, as a region of a
    /// [`Cluster`](crate::cluster::Cluster): a command touching a key (or a
    /// range reaching) outside it fails with [`Error::KeyNotInRegion`] and
    /// does nothing. Defaults to `None`: the whole key space, no check.
    pub key_range: Option<KeyRange>,
    /// The table pessimistic lock requests wait in. Storages given clones
    /// of one table (a [`Cluster`](crate::cluster::Cluster)'s regions) see
    /// each other's waits, so deadlocks across them are found. Defaults to
    /// a new table.
    pub lock_waits: LockWaits,
    /// The memory of the region's version hints: the newest version (and,
    /// when short, its record) of recently written or read keys, so that a
    /// point read of such a key makes no engine seek. 256 bytes a key;
    /// allocated in 64 pieces as keys arrive. 0 turns the hints off (every
    /// point read seeks), and so does a size this machine cannot map.
    /// Defaults to 64 MiB, about 262,000 keys.
    pub version_hint_bytes: usize,
    /// How long a read that meets a blocking in-memory lock (an
    /// async-commit or 1PC prewrite between taking its keys and writing
    /// them) waits for that prewrite's write before it fails with
    /// `KeyIsLocked`. Such a lock lasts one engine write; once it is gone
    /// the read goes on and finds the prewrite's outcome (a 1PC commit, or
    /// a lock in the lock CF to resolve), which spares the caller a lock
    /// resolution and a back-off for a lock that was about to go. Zero
    /// fails at once, as TiKV does; `Duration::MAX` waits as long as it
    /// takes. One wait per read, whatever the number of keys; a read
    /// submitted to the workers holds its worker while it waits. `ScanLock`
    /// never waits. Defaults to 5 ms.
    pub memory_lock_wait: Duration,
    /// Where the storage counts its commands ([`crate::metrics`]).
    /// Storages given clones of one `Arc` (a
    /// [`Cluster`](crate::cluster::Cluster)'s regions, a client's) count
    /// into one table. Defaults to a new, recording table.
    pub metrics: Arc<Metrics>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            scheduler: SchedulerConfig::default(),
            initial_max_ts: TimeStamp::zero(),
            max_ts_limit: None,
            key_range: None,
            lock_waits: LockWaits::default(),
            version_hint_bytes: crate::versions::DEFAULT_BYTES,
            memory_lock_wait: crate::concurrency_manager::DEFAULT_MEMORY_LOCK_WAIT,
            metrics: Arc::default(),
        }
    }
}

/// Per-command options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandOptions {
    /// Fail with [`Error::DeadlineExceeded`] instead of running if the
    /// command is still waiting for its latches this long after it was
    /// sent. `None`: wait as long as it takes.
    pub max_execution_duration: Option<Duration>,
    /// Writes the command's batch with this durability instead of the
    /// region's ([`SchedulerConfig::durability`](crate::scheduler::SchedulerConfig::durability)):
    /// `Sync` makes it durable before it answers on a buffered region;
    /// `Buffered` skips the sync (and the group commit) on a synced one.
    /// `None`: the region's.
    pub durability: Option<percolate_engine::Durability>,
}

impl CommandOptions {
    /// How long a command sent now may wait for its latches.
    fn wait_limit(&self) -> Option<WaitLimit> {
        self.max_execution_duration.map(WaitLimit::from_now)
    }
}

/// The region's command API over an engine (RocksDB by default).
///
/// Several storages may share one engine, as a [`Cluster`]'s regions do,
/// only if they serve disjoint key ranges: each keeps its own latches,
/// memory locks, `max_ts` and version hints for the keys it serves.
///
/// [`Cluster`]: crate::cluster::Cluster
pub struct Storage<E: Engine = RocksEngine> {
    scheduler: Scheduler<E>,
    metrics: Arc<Metrics>,
    /// `None`: the whole key space.
    bounds: Option<Bounds>,
}

impl<E: Engine> std::fmt::Debug for Storage<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("scheduler", &self.scheduler)
            .finish()
    }
}

/// Locks resolved, or keys collected, per write command of a range
/// operation.
const RANGE_BATCH_KEYS: usize = 256;

impl Storage<RocksEngine> {
    /// Opens (or creates) a RocksDB directory with the default
    /// configuration.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, StorageConfig::default())
    }

    /// Opens (or creates) a RocksDB directory.
    pub fn open_with(path: impl AsRef<Path>, config: StorageConfig) -> Result<Self> {
        Ok(Self::new(RocksEngine::open(path)?, config))
    }
}

impl<E: Engine> Storage<E> {
    /// A storage over `engine`.
    pub fn new(engine: E, config: StorageConfig) -> Self {
        let cm = ConcurrencyManager::for_storage(&config);
        Storage {
            scheduler: Scheduler::new(engine, cm, &config.scheduler),
            metrics: config.metrics,
            // The whole key space holds every key: nothing to check.
            bounds: config
                .key_range
                .filter(|range| *range != KeyRange::default())
                .map(Bounds::new),
        }
    }

    /// The engine underneath. Read it freely; a write made to it directly
    /// bypasses the region's latches, memory locks and version hints, so
    /// transactional data must be written through the commands.
    pub fn engine(&self) -> &E {
        self.scheduler.engine()
    }

    /// The region's `max_ts` and memory locks: for this workspace's tests
    /// and the simulator.
    #[cfg(any(feature = "test-util", feature = "sim"))]
    pub fn concurrency_manager(&self) -> &ConcurrencyManager {
        self.scheduler.concurrency_manager()
    }

    /// The region's `max_ts` and memory locks.
    #[cfg(not(any(feature = "test-util", feature = "sim")))]
    pub(crate) fn concurrency_manager(&self) -> &ConcurrencyManager {
        self.scheduler.concurrency_manager()
    }

    /// The scheduler, for its counters: for this workspace's tests.
    #[cfg(feature = "test-util")]
    pub fn scheduler(&self) -> &Scheduler<E> {
        &self.scheduler
    }

    /// The scheduler, for its counters.
    #[cfg(not(feature = "test-util"))]
    pub(crate) fn scheduler(&self) -> &Scheduler<E> {
        &self.scheduler
    }

    /// Where this storage counts its commands.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Sends a write command without waiting for it.
    pub fn sched_write<C: WriteCommand>(&self, cmd: C) -> Pending<C::Output> {
        self.sched_write_with(cmd, CommandOptions::default())
    }

    /// Sends a write command with options, without waiting for it.
    pub fn sched_write_with<C: WriteCommand>(
        &self,
        cmd: C,
        options: CommandOptions,
    ) -> Pending<C::Output> {
        let keys = cmd.latch_keys();
        if let Err(e) = self.check_write(&cmd, &keys) {
            return Pending::ready(Err(e));
        }
        let (completer, answer) = pending::<C::Output>();
        let (metrics, start) = (self.metrics.clone(), self.metrics.start());
        let durability = options.durability;
        let job: Job<E> = Box::new(move |input: JobInput<'_, E>| {
            let (finish, output) = process_write(cmd, durability, input);
            let reply: Reply = Box::new(move |written: Result<()>| {
                let answer = written.and(output);
                metrics.command(C::KIND, start, answer.is_ok());
                completer.complete(answer);
            });
            (finish, reply)
        });
        match self
            .scheduler
            .submit_write(&keys, options.wait_limit(), job)
        {
            Ok(()) => answer,
            Err(e) => Pending::ready(Err(e)),
        }
    }

    /// The checks of a write command on `keys` before it runs: a
    /// transactional key must be a valid encoding (a key made by
    /// `Key::from_encoded` is not checked there, and one written would
    /// fail every later scan over it as corrupt), and within the region.
    fn check_write<C: WriteCommand>(&self, cmd: &C, keys: &[Key]) -> Result<()> {
        let footprint = cmd.footprint();
        if footprint == Footprint::LatchKeys {
            check_encoded(keys)?;
        }
        match &self.bounds {
            Some(bounds) => bounds.check(footprint, keys),
            None => Ok(()),
        }
    }

    /// Sends a read command to a worker without waiting for it.
    pub fn sched_read<C: ReadCommand>(&self, cmd: C) -> Pending<C::Output> {
        if let Err(e) = self.check_read(&cmd) {
            return Pending::ready(Err(e));
        }
        let (completer, answer) = pending::<C::Output>();
        let (metrics, start) = (self.metrics.clone(), self.metrics.start());
        let submitted = self.scheduler.submit_read(move |engine, cm| {
            let output = cmd.process(ReadContext { engine, cm });
            metrics.command(C::KIND, start, output.is_ok());
            completer.complete(output)
        });
        match submitted {
            Ok(()) => answer,
            Err(e) => Pending::ready(Err(e)),
        }
    }

    /// Runs a write command and waits for its answer. The command runs on
    /// the calling thread, which would only wait for a worker meanwhile:
    /// at once when its latches are free, and otherwise once the command
    /// releasing the last of them hands them over;
    /// [`sched_write`](Self::sched_write) is the form that does not wait.
    pub fn write<C: WriteCommand>(&self, cmd: C) -> Result<C::Output> {
        self.write_with(cmd, CommandOptions::default())
    }

    /// Like [`write`](Self::write), with options.
    pub fn write_with<C: WriteCommand>(
        &self,
        cmd: C,
        options: CommandOptions,
    ) -> Result<C::Output> {
        let keys = cmd.latch_keys();
        self.check_write(&cmd, &keys)?;
        let lock = self.scheduler.latch_lock(&keys);
        self.run_write(cmd, lock, options)
    }

    /// Runs `cmd`, checked, under `lock` (its latches): the rest of
    /// [`write_with`](Self::write_with).
    fn run_write<C: WriteCommand>(
        &self,
        cmd: C,
        lock: crate::scheduler::latches::Lock,
        options: CommandOptions,
    ) -> Result<C::Output> {
        let start = self.metrics.start();
        let durability = options.durability;
        let answer = self
            .scheduler
            .run_inline_latched(lock, options.wait_limit(), move |input| {
                process_write(cmd, durability, input)
            });
        if !matches!(answer, Err(Error::SchedTooBusy { .. })) {
            self.metrics.command(C::KIND, start, answer.is_ok());
        }
        answer
    }

    /// [`write`](Self::write) of a lock request; one for a single key
    /// (most are) lends its key to the checks and latches instead of
    /// copying it.
    fn write_lock_request(
        &self,
        cmd: AcquirePessimisticLock,
    ) -> Result<Vec<PessimisticLockKeyResult>> {
        let lock = match cmd.keys.as_slice() {
            [(key, _)] => {
                let key = std::slice::from_ref(key);
                self.check_write(&cmd, key)?;
                self.scheduler.latch_lock(key)
            }
            _ => return self.write(cmd),
        };
        self.run_write(cmd, lock, CommandOptions::default())
    }

    /// A prewrite as [`write_with`](Self::write_with) runs a
    /// [`Prewrite`](crate::commands::Prewrite), over mutations it borrows:
    /// the client keeps its mutations for a retry and sends them without
    /// copying them (the command runs on this thread, so it need not own
    /// them).
    pub(crate) fn prewrite_in_place(
        &self,
        request: PrewriteRef<'_>,
        options: CommandOptions,
    ) -> Result<PrewriteResult> {
        if let Some(bounds) = &self.bounds {
            bounds.check(
                Footprint::Keys(request.mutations.iter().map(|m| &m.key).collect()),
                &[],
            )?;
        }
        let start = self.metrics.start();
        let keys = request.mutations.iter().map(mutation_key);
        let answer = self.scheduler.run_inline(
            keys,
            options.wait_limit(),
            prewrite_job(request, options.durability),
        );
        if !matches!(answer, Err(Error::SchedTooBusy { .. })) {
            self.metrics
                .command(crate::metrics::CommandKind::Prewrite, start, answer.is_ok());
        }
        answer
    }

    /// Prewrites on several storages that share one engine, as
    /// [`write_joint`](Self::write_joint) runs [`Prewrite`](crate::commands::Prewrite)s,
    /// over mutations it borrows (see
    /// [`prewrite_in_place`](Self::prewrite_in_place)): one engine write
    /// for all, or one by one when a latch is taken.
    pub(crate) fn prewrite_joint_in_place(
        parts: Vec<(&Self, PrewriteRef<'_>)>,
        options: CommandOptions,
    ) -> Vec<Result<PrewriteResult>> {
        // Outside its region, a part fails on its own (there).
        let checked = parts
            .iter()
            .all(|(storage, request)| match &storage.bounds {
                Some(bounds) => request
                    .mutations
                    .iter()
                    .all(|m| bounds.check_key(&m.key).is_ok()),
                None => true,
            });
        if !checked || parts.len() < 2 {
            return parts
                .into_iter()
                .map(|(storage, request)| storage.prewrite_in_place(request, options))
                .collect();
        }
        let parts = parts
            .into_iter()
            .map(|(storage, request)| {
                let keys = request.mutations.iter().map(mutation_key);
                (storage, keys, prewrite_job(request, options.durability))
            })
            .collect();
        Self::run_jointly(parts, crate::metrics::CommandKind::Prewrite, options)
    }

    /// Runs one job per storage (each latched on its keys) as one engine
    /// write ([`Scheduler::run_joint`]), or one after another where a latch
    /// is taken or a storage is too busy; records each answer as a command
    /// of `kind`.
    fn run_jointly<'k, T, F, K>(
        parts: Vec<(&Self, K, F)>,
        kind: crate::metrics::CommandKind,
        options: CommandOptions,
    ) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(JobInput<'a, E>) -> (Finish, Result<T>),
        K: IntoIterator<Item = &'k Key> + Clone,
    {
        let start = parts[0].0.metrics.start();
        let storages: Vec<(&Self, K)> = parts
            .iter()
            .map(|(storage, keys, _)| (*storage, keys.clone()))
            .collect();
        let jobs = parts
            .into_iter()
            .map(|(storage, keys, job)| (&storage.scheduler, keys, job))
            .collect();
        let answers = match Scheduler::run_joint(jobs) {
            Ok(answers) => answers,
            Err(jobs) => storages
                .iter()
                .zip(jobs)
                .map(|((storage, keys), job)| {
                    storage
                        .scheduler
                        .run_inline(keys.clone(), options.wait_limit(), job)
                })
                .collect(),
        };
        for ((storage, _), answer) in storages.iter().zip(&answers) {
            if !matches!(answer, Err(Error::SchedTooBusy { .. })) {
                storage.metrics.command(kind, start, answer.is_ok());
            }
        }
        answers
    }

    /// Runs one write command on each of several storages that share
    /// **one engine** (regions of one [`Cluster`](crate::cluster::Cluster)),
    /// on the calling thread, with one engine write for all of them: each
    /// command under its own region's latches and checks, answered as
    /// [`write_with`](Self::write_with) would answer it. Where a latch is
    /// taken (or a region is too busy), each runs through `write_with`
    /// instead, one after another.
    pub(crate) fn write_joint<C: WriteCommand>(
        parts: Vec<(&Self, C)>,
        options: CommandOptions,
    ) -> Vec<Result<C::Output>> {
        let keys: Vec<Vec<Key>> = parts.iter().map(|(_, cmd)| cmd.latch_keys()).collect();
        let checked = parts
            .iter()
            .zip(&keys)
            .all(|((storage, cmd), keys)| storage.check_write(cmd, keys).is_ok());
        if !checked || parts.len() < 2 {
            return parts
                .into_iter()
                .map(|(storage, cmd)| storage.write_with(cmd, options))
                .collect();
        }
        let durability = options.durability;
        let parts = parts
            .into_iter()
            .zip(&keys)
            .map(|((storage, cmd), keys)| {
                let job = move |input: JobInput<'_, E>| process_write(cmd, durability, input);
                (storage, keys.iter(), job)
            })
            .collect();
        Self::run_jointly(parts, C::KIND, options)
    }

    /// Starts bringing into the CPU's caches what a write command on
    /// `keys` will touch (its latches, memory locks, version hints and the
    /// engine's bookkeeping), so that their cache misses overlap each other
    /// and the work before the command instead of adding up (see
    /// [`percolate_engine::mem`]). Only a hint for speed.
    pub(crate) fn prefetch<'k>(&self, keys: impl IntoIterator<Item = &'k Key>) {
        for key in keys {
            self.scheduler.prefetch(key);
        }
    }

    /// Whether each write command's write is synced before it answers
    /// ([`SchedulerConfig::durability`](crate::scheduler::SchedulerConfig::durability)).
    pub fn durability(&self) -> percolate_engine::Durability {
        self.scheduler.durability()
    }

    /// Runs a read command on the calling thread.
    pub fn read<C: ReadCommand>(&self, cmd: C) -> Result<C::Output> {
        self.check_read(&cmd)?;
        let start = self.metrics.start();
        let output = cmd.process(ReadContext {
            engine: self.engine(),
            cm: self.concurrency_manager(),
        });
        self.metrics.command(C::KIND, start, output.is_ok());
        output
    }

    /// A [`Scan`] that hands each pair to `visit` (the encoded key, the
    /// value) as slices of the scanner's buffers instead of returning it:
    /// no allocation per pair. `visit` breaks to stop early. Returns the
    /// locks of the lock CF in the way, the first one where the visit
    /// stopped (the pairs after it were not visited): resolve them and
    /// scan again from it. A blocking in-memory lock in the range (a
    /// prewrite in flight) fails the whole call with `KeyIsLocked` before
    /// any pair is visited, as it fails a [`Scan`]. Counted as a `Scan`
    /// command.
    pub fn scan_visit(
        &self,
        request: &crate::read::ScanRequest,
        options: &crate::read::ReadOptions,
        visit: impl FnMut(&[u8], &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<Vec<Error>> {
        let footprint = Scan::range_of(request);
        if let Some(bounds) = &self.bounds {
            bounds.check(footprint, &[])?;
        }
        let start = self.metrics.start();
        let output = crate::read::scan_visit(
            self.engine(),
            self.concurrency_manager(),
            request,
            options,
            visit,
        );
        self.metrics
            .command(crate::metrics::CommandKind::Scan, start, output.is_ok());
        output
    }

    /// The region's bounds check of a read command.
    fn check_read<C: ReadCommand>(&self, cmd: &C) -> Result<()> {
        match &self.bounds {
            Some(bounds) => bounds.check(cmd.footprint(), &[]),
            None => Ok(()),
        }
    }

    /// The region's bounds check of a range operation.
    fn check_range(&self, start: Option<&Key>, end: Option<&Key>) -> Result<()> {
        match &self.bounds {
            Some(bounds) => bounds.check(Footprint::Range(start, end), &[]),
            None => Ok(()),
        }
    }

    /// The value of `key` at `ts` (snapshot isolation).
    pub fn get(&self, key: Key, ts: TimeStamp) -> Result<Option<Vec<u8>>> {
        self.read(Get {
            key,
            ts,
            options: ReadOptions::default(),
        })
    }

    /// The values of `keys` at `ts`: see [`BatchGet`].
    pub fn batch_get(&self, keys: Vec<Key>, ts: TimeStamp) -> Result<Vec<Result<KvPair>>> {
        self.read(BatchGet {
            keys,
            ts,
            options: ReadOptions::default(),
        })
    }

    /// A range read: see [`ScanRequest`].
    pub fn scan(&self, request: ScanRequest) -> Result<Vec<Result<KvPair>>> {
        self.read(Scan {
            request,
            options: ReadOptions::default(),
        })
    }

    /// Prewrites: see [`Prewrite`].
    pub fn prewrite(&self, cmd: Prewrite) -> Result<PrewriteResult> {
        self.write(cmd)
    }

    /// Locks keys of a pessimistic transaction: see
    /// [`AcquirePessimisticLock`]. With a `wait_timeout`, a request that
    /// meets another transaction's lock waits for it to be released (see
    /// [`LockWaits`]) and runs again, until the timeout (counted from the
    /// first lock met) passes (then it fails with that lock's
    /// `KeyIsLocked`) or waiting would close a cycle (`Deadlock`, at once).
    /// A request for one key that another transaction's lock is on waits
    /// before it first runs, since running would only find that lock (it
    /// raises `max_ts` all the same when it reads). Without a timeout it
    /// runs once.
    pub fn acquire_pessimistic_lock(
        &self,
        cmd: AcquirePessimisticLock,
    ) -> Result<Vec<PessimisticLockKeyResult>> {
        if cmd.wait_timeout.is_none() {
            return self.write_lock_request(cmd);
        }
        self.acquire_pessimistic_lock_from(|| cmd.clone())
    }

    /// [`acquire_pessimistic_lock`](Self::acquire_pessimistic_lock) of the
    /// request `request` makes, called once for the first attempt and again
    /// only if that one meets a lock: a caller that can make the request
    /// afresh saves copying it for a retry that rarely comes.
    pub(crate) fn acquire_pessimistic_lock_from(
        &self,
        mut request: impl FnMut() -> AcquirePessimisticLock,
    ) -> Result<Vec<PessimisticLockKeyResult>> {
        let first = request();
        let Some(timeout) = first.wait_timeout else {
            return self.write_lock_request(first);
        };
        // Most requests meet no lock: the first goes without watching (or
        // reading the clock). One for a key another transaction holds
        // would only find that lock, so it waits at once instead.
        let mut info = match self.lock_in_the_way(&first)? {
            Some(info) => info,
            None => match self.write_lock_request(first) {
                Err(Error::Mvcc(percolate_mvcc::Error::KeyIsLocked(info))) => info,
                other => return other,
            },
        };
        let deadline = crate::deadline_after(timeout);
        let cmd = request();
        let waits = self.concurrency_manager().lock_waits();
        let keys = cmd.latch_keys();
        loop {
            // Watched, then the lock looked at again: a release after the
            // look ends the wait at once, and one before it sends the
            // request again without waiting.
            let ticket = waits.watch(&keys);
            let locked = Key::from_raw(&info.key);
            if self.holds_lock(&locked, info.lock_version) {
                let started = self.metrics.start();
                let remaining = deadline.saturating_duration_since(Instant::now());
                let waited =
                    waits.wait(&ticket, cmd.start_ts, &locked, info.lock_version, remaining);
                // (A request with no time left that times out does not
                // count as a wait; one the release beat, or that would
                // close a cycle, does.)
                let outcome = match &waited {
                    Ok(WaitOutcome::Released) => Some(LockWaitOutcome::Released),
                    Ok(WaitOutcome::TimedOut) if remaining.is_zero() => None,
                    Ok(WaitOutcome::TimedOut) => Some(LockWaitOutcome::TimedOut),
                    Err(Error::Deadlock { .. }) => Some(LockWaitOutcome::Deadlock),
                    Err(_) => None,
                };
                if let Some(outcome) = outcome {
                    self.metrics.lock_wait(outcome, started);
                }
                if waited? == WaitOutcome::TimedOut {
                    return Err(percolate_mvcc::Error::KeyIsLocked(info).into());
                }
            }
            drop(ticket);
            info = match self.write_lock_request(cmd.clone()) {
                Err(Error::Mvcc(percolate_mvcc::Error::KeyIsLocked(info))) => info,
                other => return other,
            };
        }
    }

    /// Another transaction's lock on the one key of `cmd`, as the latest
    /// data say: the lock that running `cmd` would meet and answer with
    /// `KeyIsLocked`. It then has the effects the command would have had
    /// (a request that reads raises `max_ts` to its for_update_ts even when
    /// it meets a lock), without its latches, snapshot and engine reads.
    /// `None` (the command runs) for a request that would fail otherwise, of
    /// several keys, or whose key no one else holds.
    fn lock_in_the_way(
        &self,
        cmd: &AcquirePessimisticLock,
    ) -> Result<Option<Box<percolate_mvcc::LockInfo>>> {
        let [(key, should_not_exist)] = cmd.keys.as_slice() else {
            return Ok(None);
        };
        if cmd.check().is_err()
            || self.check_write(cmd, std::slice::from_ref(key)).is_err()
            || self
                .concurrency_manager()
                .check_limit(cmd.start_ts)
                .is_err()
            || self
                .concurrency_manager()
                .check_limit(cmd.options.for_update_ts)
                .is_err()
        {
            return Ok(None);
        }
        let mut reader = MvccReader::new(self.engine().latest());
        let Ok(Some(lock)) = reader.load_lock(key) else {
            return Ok(None);
        };
        let Ok(raw) = key.to_raw() else {
            return Ok(None);
        };
        if lock.ts == cmd.start_ts {
            return Ok(None);
        }
        if cmd.options.return_value || cmd.options.check_existence || *should_not_exist {
            self.concurrency_manager()
                .update_max_ts(cmd.options.for_update_ts)?;
        }
        Ok(Some(Box::new(lock.into_lock_info(raw))))
    }

    /// Whether the lock of the transaction `lock_ts` is on `key` now, as the
    /// latest data (and the memory-only locks) say; `false` where the lock
    /// cannot be read, so that the caller asks again rather than waits.
    fn holds_lock(&self, key: &Key, lock_ts: TimeStamp) -> bool {
        let mut reader = MvccReader::new(self.engine().latest());
        matches!(reader.load_lock(key), Ok(Some(lock)) if lock.ts == lock_ts)
    }

    /// Removes the pessimistic locks of the transaction `start_ts` on `keys`
    /// taken at or below `for_update_ts`: see [`PessimisticRollback`].
    pub fn pessimistic_rollback(
        &self,
        keys: Vec<Key>,
        start_ts: TimeStamp,
        for_update_ts: TimeStamp,
    ) -> Result<Vec<ReleasedLock>> {
        self.write(PessimisticRollback {
            keys,
            start_ts,
            for_update_ts,
        })
    }

    /// Commits `keys` of the transaction `start_ts` at `commit_ts`.
    pub fn commit(
        &self,
        keys: Vec<Key>,
        start_ts: TimeStamp,
        commit_ts: TimeStamp,
    ) -> Result<Vec<ReleasedLock>> {
        self.write(Commit {
            keys,
            start_ts,
            commit_ts,
        })
    }

    /// Rolls back the transaction on `key` if its lock expired by
    /// `current_ts` (zero: regardless): see [`Cleanup`].
    pub fn cleanup(
        &self,
        key: Key,
        start_ts: TimeStamp,
        current_ts: TimeStamp,
    ) -> Result<Option<ReleasedLock>> {
        self.write(Cleanup {
            key,
            start_ts,
            current_ts,
        })
    }

    /// Rolls back `keys` of the transaction `start_ts`.
    pub fn batch_rollback(&self, keys: Vec<Key>, start_ts: TimeStamp) -> Result<Vec<ReleasedLock>> {
        self.write(BatchRollback { keys, start_ts })
    }

    /// The status of the transaction `start_ts` on its primary: see
    /// [`CheckTxnStatus`].
    pub fn check_txn_status(
        &self,
        primary: Key,
        start_ts: TimeStamp,
        options: CheckTxnStatusOptions,
    ) -> Result<TxnStatus> {
        self.write(CheckTxnStatus {
            primary,
            start_ts,
            options,
        })
    }

    /// What the secondaries of an async-commit transaction say: see
    /// [`CheckSecondaryLocks`].
    pub fn check_secondary_locks(
        &self,
        keys: Vec<Key>,
        start_ts: TimeStamp,
    ) -> Result<SecondaryLocksStatus> {
        self.write(CheckSecondaryLocks { keys, start_ts })
    }

    /// Extends the primary lock's TTL; returns the TTL now.
    pub fn txn_heart_beat(
        &self,
        primary: Key,
        start_ts: TimeStamp,
        advise_ttl: u64,
    ) -> Result<u64> {
        self.write(TxnHeartBeat {
            primary,
            start_ts,
            advise_ttl,
        })
    }

    /// Commits (at `commit_ts`) or rolls back (`commit_ts` zero) the given
    /// keys of the transaction `start_ts`.
    pub fn resolve_lock_lite(
        &self,
        keys: Vec<Key>,
        start_ts: TimeStamp,
        commit_ts: TimeStamp,
    ) -> Result<Vec<ReleasedLock>> {
        self.write(ResolveLockLite {
            keys,
            start_ts,
            commit_ts,
        })
    }

    /// Commits (at `commit_ts`) or rolls back (`commit_ts` zero) every lock
    /// of the transaction `start_ts` in `[start, end)`, in batches of 256
    /// locks: each batch is found on a snapshot without latches, then
    /// resolved by a latched write command that checks each lock again.
    /// Returns how many locks were resolved.
    pub fn resolve_lock(
        &self,
        start_ts: TimeStamp,
        commit_ts: TimeStamp,
        start: Option<Key>,
        end: Option<Key>,
    ) -> Result<usize> {
        if start_ts.is_zero() {
            return Err(Error::InvalidRequest {
                reason: "a transaction's start_ts cannot be zero",
                key: None,
            });
        }
        if crate::oracle::beyond_range(start_ts) {
            return Err(Error::InvalidRequest {
                reason: "a start_ts beyond the range of the timestamp oracle (such as TimeStamp::max())",
                key: None,
            });
        }
        if !commit_ts.is_zero() && commit_ts <= start_ts {
            return Err(Error::InvalidTxnTso {
                start_ts,
                commit_ts,
            });
        }
        self.check_range(start.as_ref(), end.as_ref())?;
        let mut from = start;
        let mut resolved = 0;
        loop {
            let mut reader = MvccReader::new(self.engine().snapshot());
            let (locks, has_more) = reader.scan_locks(
                from.as_ref(),
                end.as_ref(),
                |_, lock| lock.ts == start_ts,
                RANGE_BATCH_KEYS,
            )?;
            let Some(next) = locks.last().map(|(key, _)| next_key(key)) else {
                return Ok(resolved);
            };
            resolved += self
                .write(ResolveLock {
                    key_locks: locks,
                    start_ts,
                    commit_ts,
                })?
                .len();
            if !has_more {
                return Ok(resolved);
            }
            from = Some(next);
        }
    }

    /// The locks in `[start, end)` of transactions started at or before
    /// `max_ts`: see [`ScanLock`].
    pub fn scan_lock(
        &self,
        start: Option<Key>,
        end: Option<Key>,
        max_ts: TimeStamp,
        limit: usize,
    ) -> Result<Vec<LockInfo>> {
        self.read(ScanLock {
            start,
            end,
            max_ts,
            limit,
        })
    }

    /// Deletes the records of `[start, end)` that do not decode and returns
    /// them: see [`Repair`].
    pub fn repair(&self, start: Option<Key>, end: Option<Key>) -> Result<Vec<DamagedRecord>> {
        self.check_range(start.as_ref(), end.as_ref())?;
        self.write(Repair { start, end })
    }

    /// Every lock, write record and value of `key`, decoded.
    pub fn mvcc_by_key(&self, key: Key) -> Result<MvccInfo> {
        self.read(MvccByKey { key })
    }

    /// Collects the garbage of every key with a write record in `[start,
    /// end)` at `safe_point`, 256 keys per latched command. Returns the
    /// totals.
    pub fn gc(
        &self,
        safe_point: TimeStamp,
        start: Option<Key>,
        end: Option<Key>,
    ) -> Result<GcInfo> {
        self.check_range(start.as_ref(), end.as_ref())?;
        let mut total = GcInfo::default();
        let mut from = start;
        loop {
            let (keys, next) = self.write_cf_keys(from.as_ref(), end.as_ref(), RANGE_BATCH_KEYS)?;
            if !keys.is_empty() {
                let info = self.write(Gc { keys, safe_point })?;
                total.found_versions += info.found_versions;
                total.deleted_versions += info.deleted_versions;
                total.deleted_values += info.deleted_values;
            }
            match next {
                Some(next) => from = Some(next),
                None => return Ok(total),
            }
        }
    }

    /// The latest value of a raw key (raw data is separate from
    /// transactional data: see [`RawPut`]).
    pub fn raw_get(&self, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        self.read(RawGet { key })
    }

    /// The latest values of raw keys: a pair per key that exists.
    pub fn raw_batch_get(&self, keys: Vec<Vec<u8>>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.read(RawBatchGet { keys })
    }

    /// Raw pairs of a range: see [`RawScan`].
    pub fn raw_scan(&self, scan: RawScan) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.read(scan)
    }

    /// Writes one raw pair.
    pub fn raw_put(&self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.write(RawPut {
            pairs: vec![(key, value)],
        })
    }

    /// Writes raw pairs atomically.
    pub fn raw_batch_put(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.write(RawPut { pairs })
    }

    /// Deletes one raw key.
    pub fn raw_delete(&self, key: Vec<u8>) -> Result<()> {
        self.write(RawDelete { keys: vec![key] })
    }

    /// Deletes raw keys atomically.
    pub fn raw_batch_delete(&self, keys: Vec<Vec<u8>>) -> Result<()> {
        self.write(RawDelete { keys })
    }

    /// Deletes every raw key in `[start, end)`: see [`RawDeleteRange`].
    pub fn raw_delete_range(&self, start: Vec<u8>, end: Vec<u8>) -> Result<()> {
        self.write(RawDeleteRange { start, end })
    }

    /// Sets (or deletes, when `value` is `None`) a raw key only if its
    /// value is `expected` now. Returns whether it did, and the value found.
    pub fn raw_compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
    ) -> Result<(bool, Option<Vec<u8>>)> {
        self.write(RawCompareAndSwap {
            key,
            expected,
            value,
        })
    }

    /// Up to `limit` distinct user keys with write records in `[start,
    /// end)`, and where to continue (`None`: the range is done).
    fn write_cf_keys(
        &self,
        start: Option<&Key>,
        end: Option<&Key>,
        limit: usize,
    ) -> Result<(Vec<Key>, Option<Key>)> {
        let mut options = IterOptions::new().fill_cache(false);
        options.lower_bound = start.map(|k| k.as_encoded().clone());
        options.upper_bound = end.map(|k| k.as_encoded().clone());
        let mut cursor = self.engine().snapshot().iter(Cf::Write, options)?;
        let mut keys = Vec::new();
        let mut valid = cursor.seek_to_first()?;
        while valid {
            let user_key = Key::truncate_ts_for(cursor.key())
                .map_err(|e| percolate_mvcc::Error::corruption(Cf::Write, cursor.key(), e))?;
            if keys.len() == limit {
                return Ok((keys, Some(Key::from_encoded_slice(user_key))));
            }
            let key = Key::from_encoded_slice(user_key);
            // Past every version of `key`: its oldest possible version is
            // the key with an all-ones ts suffix.
            let mut past = key.clone().append_ts(TimeStamp::zero()).into_encoded();
            past.push(0);
            keys.push(key);
            valid = cursor.seek(&past)?;
        }
        Ok((keys, None))
    }
}

/// The smallest encoded key after `key`.
fn next_key(key: &Key) -> Key {
    let mut next = key.as_encoded().clone();
    next.push(0);
    Key::from_encoded(next)
}

/// Processes a write command that holds its latches over the engine's
/// latest view: what to write, and its answer once written (on error, an
/// empty [`Finish`] and the error). The versions it commits go into the
/// version hints once written (see `VersionHints`).
fn process_write<C: WriteCommand, E: Engine>(
    cmd: C,
    durability: Option<Durability>,
    input: JobInput<'_, E>,
) -> (Finish, Result<C::Output>) {
    let processed = match input {
        JobInput::Run { engine, cm } => cmd.process(WriteContext {
            snapshot: engine.latest(),
            cm,
        }),
        JobInput::Abort(e) => Err(e),
    };
    finish_write(processed, durability)
}

/// What a processed write command leaves the scheduler to write, and its
/// answer once written.
/// The key of a mutation: what a prewrite latches.
fn mutation_key(mutation: &Mutation) -> &Key {
    &mutation.key
}

/// The scheduler's job that runs a borrowed prewrite.
fn prewrite_job<E: Engine>(
    request: PrewriteRef<'_>,
    durability: Option<Durability>,
) -> impl for<'a> FnOnce(JobInput<'a, E>) -> (Finish, Result<PrewriteResult>) + '_ {
    move |input| {
        finish_write(
            match input {
                JobInput::Run { engine, cm } => request.process(WriteContext {
                    snapshot: engine.latest(),
                    cm,
                }),
                JobInput::Abort(e) => Err(e),
            },
            durability,
        )
    }
}

fn finish_write<T>(
    processed: Result<WriteResult<T>>,
    durability: Option<Durability>,
) -> (Finish, Result<T>) {
    match processed {
        Ok(result) => (
            Finish {
                batch: result.batch,
                guards: result.guards,
                committed: result.committed,
                durability,
            },
            Ok(result.output),
        ),
        Err(e) => (Finish::default(), Err(e)),
    }
}

#[cfg(test)]
mod tests;

/// Fails with `InvalidRequest` naming the first of `keys` that is not one
/// memcomparable-encoded key (see [`Key::from_raw`]).
fn check_encoded(keys: &[Key]) -> Result<()> {
    let bad = keys
        .iter()
        .find(|key| percolate_mvcc::codec::check_encoded_bytes(key.as_encoded()).is_err());
    match bad {
        Some(key) => Err(Error::InvalidRequest {
            reason: "a key that is not a memcomparable encoding (Key::from_encoded of bytes \
                     that Key::from_raw did not make)",
            key: Some(key.clone()),
        }),
        None => Ok(()),
    }
}
