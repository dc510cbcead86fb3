//! The simulated world: the engine, the oracle on a manual clock, the
//! regions and a real [`Client`] over them, rebuilt from the engine's state
//! after a crash; the history the checker reads; and the reads the
//! simulation makes (through the real region read commands and the
//! client's real resolver).

use std::sync::Arc;

use parking_lot::Mutex;
use percolate_engine::{Cf, Engine, EngineIterator, IterOptions, Snapshot};
use percolate_mvcc::{IsolationLevel, Key, Lock, LockInfo, TimeStamp, TsSet};
use percolate_txn::client::{Client, ClientConfig};
use percolate_txn::cluster::Cluster;
use percolate_txn::commands::{Get, ReadCommand, ReadContext, Scan};
use percolate_txn::oracle::{Clock, LocalOracle, ManualClock, TimestampOracle};
use percolate_txn::storage::{
    MaxTsLimit, ReadOptions, ScanRequest, SchedulerConfig, Storage, StorageConfig,
};
use percolate_txn::{Error, Result};

use crate::SimConfig;
use crate::engine::{SimEngine, WriteHook};
use crate::history::{History, Observation, Read, ReadKind};
use crate::rng::Rng;

/// The raw pairs a range read returns.
pub(crate) type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The clock's reading when a simulation starts (ms); traces print times
/// relative to it.
pub(crate) const BASE_MS: u64 = 1_700_000_000_000;

/// What the oracle handed out, across restarts.
#[derive(Default)]
pub(crate) struct OracleLog {
    last: TimeStamp,
    pub(crate) violations: Vec<String>,
}

/// The real oracle, checked: every timestamp it hands out must be above
/// every one before, across crashes.
pub(crate) struct CheckedOracle {
    inner: LocalOracle,
    log: Arc<Mutex<OracleLog>>,
}

impl CheckedOracle {
    fn check(&self, first: TimeStamp, count: u64) {
        let mut log = self.log.lock();
        if first <= log.last {
            let message = format!("oracle went back: handed out {first} after {}", log.last);
            log.violations.push(message);
        }
        log.last = log.last.max(TimeStamp::new(first.into_inner() + count - 1));
    }
}

impl TimestampOracle for CheckedOracle {
    fn get_ts(&self) -> Result<TimeStamp> {
        let ts = self.inner.get_ts()?;
        self.check(ts, 1);
        Ok(ts)
    }

    fn get_ts_batch(&self, count: u32) -> Result<TimeStamp> {
        let ts = self.inner.get_ts_batch(count)?;
        self.check(ts, u64::from(count));
        Ok(ts)
    }

    /// Advanced past `ts`, the oracle has in effect handed it out: what it
    /// hands out next must be above it.
    fn advance_past(&self, ts: TimeStamp) -> Result<()> {
        self.inner.advance_past(ts)?;
        let mut log = self.log.lock();
        log.last = log.last.max(ts);
        Ok(())
    }
}

/// The choices a seed makes once, before the first step.
#[derive(Clone, Debug)]
pub(crate) struct Params {
    /// The raw keys the transactions use.
    pub(crate) keys: Vec<Vec<u8>>,
    /// Where the regions split.
    pub(crate) splits: Vec<Vec<u8>>,
    /// The lock TTL of every transaction (ms).
    pub(crate) ttl_ms: u64,
}

impl Params {
    fn draw(rng: &mut Rng, cfg: &SimConfig) -> Self {
        let keys: Vec<Vec<u8>> = (0..cfg.keys.max(1))
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        let regions = rng.range(1, 4) as usize;
        let mut splits: Vec<Vec<u8>> = (1..regions)
            .map(|_| keys[rng.index(keys.len())].clone())
            .collect();
        splits.sort();
        splits.dedup();
        let ttl_ms = [50, 200, 1000, 3000][rng.index(4)];
        Params {
            keys,
            splits,
            ttl_ms,
        }
    }
}

/// The world of one seed.
pub(crate) struct World {
    pub(crate) rng: Rng,
    pub(crate) cfg: SimConfig,
    pub(crate) params: Params,
    pub(crate) clock: Arc<ManualClock>,
    dir: tempfile::TempDir,
    pub(crate) engine: SimEngine,
    pub(crate) oracle_log: Arc<Mutex<OracleLog>>,
    oracle: Option<Arc<CheckedOracle>>,
    client: Option<Client<SimEngine>>,
    pub(crate) history: History,
    /// Reads made by the write hook (racing a write), drained each step.
    raced: Arc<Mutex<Vec<Observation>>>,
    /// Whether the next write carrying a lock races a read.
    race_next: Arc<Mutex<bool>>,
    /// No read below it: GC may have collected what it would see.
    pub(crate) safe_point: TimeStamp,
    /// The first timestamp of the run: random read timestamps and safe
    /// points are drawn above it.
    pub(crate) first_ts: TimeStamp,
    pub(crate) step: u64,
    pub(crate) trace: Option<Vec<String>>,
    /// Setup or harness failures (not the system's): reported as such.
    pub(crate) harness_errors: Vec<String>,
}

/// A place for the oracle's state file: memory where there is a tmpfs.
fn oracle_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix("percolate-sim-");
        b
    };
    if shm.is_dir() {
        if let Ok(dir) = builder.tempdir_in(shm) {
            return dir;
        }
    }
    builder
        .tempdir()
        .expect("a temporary directory for the oracle")
}

impl World {
    /// A fresh world for `seed`: empty engine, oracle, regions, client.
    pub(crate) fn new(seed: u64, cfg: SimConfig, trace: bool) -> Self {
        let mut rng = Rng::new(seed);
        let params = Params::draw(&mut rng, &cfg);
        let mut world = World {
            rng,
            cfg,
            params,
            clock: Arc::new(ManualClock::new(BASE_MS)),
            dir: oracle_dir(),
            engine: SimEngine::new(),
            oracle_log: Arc::default(),
            oracle: None,
            client: None,
            history: History::default(),
            raced: Arc::default(),
            race_next: Arc::default(),
            safe_point: TimeStamp::zero(),
            first_ts: TimeStamp::zero(),
            step: 0,
            trace: trace.then(Vec::new),
            harness_errors: Vec::new(),
        };
        let splits: Vec<String> = world
            .params
            .splits
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        world.note(format!(
            "# seed {seed}: {} clients, {} steps, {} keys, splits [{}], ttl {} ms, faults {}",
            world.cfg.clients,
            world.cfg.steps,
            world.cfg.keys,
            splits.join(","),
            world.params.ttl_ms,
            world.cfg.faults
        ));
        world.open();
        world
    }

    /// Appends a line to the trace (when tracing).
    pub(crate) fn note(&mut self, line: String) {
        if let Some(trace) = &mut self.trace {
            trace.push(line);
        }
    }

    /// Whether the trace is kept (lines are only formatted then).
    pub(crate) fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    /// A timestamp as traces print it: ms since the start, then the
    /// logical part.
    pub(crate) fn fmt_ts(ts: TimeStamp) -> String {
        if ts.is_max() {
            "max".into()
        } else if ts.is_zero() {
            "0".into()
        } else {
            format!("{}.{}", ts.physical() as i64 - BASE_MS as i64, ts.logical())
        }
    }

    /// Opens the oracle (above the engine's data, as `Client::open` does
    /// with RocksDB's persisted ceiling), the regions and the client.
    fn open(&mut self) {
        let floor = self.timestamp_floor();
        let clock: Arc<dyn Clock> = self.clock.clone();
        let inner = LocalOracle::open_manual(self.dir.path(), clock, floor)
            .expect("the oracle opens in its temporary directory");
        let oracle = Arc::new(CheckedOracle {
            inner,
            log: self.oracle_log.clone(),
        });
        let dyn_oracle: Arc<dyn TimestampOracle> = oracle.clone();
        let initial_max_ts = dyn_oracle.get_ts().expect("a first timestamp");
        if self.first_ts.is_zero() {
            self.first_ts = initial_max_ts;
        }
        let storage = StorageConfig {
            scheduler: SchedulerConfig {
                worker_threads: 1,
                ..SchedulerConfig::default()
            },
            initial_max_ts,
            max_ts_limit: Some(MaxTsLimit::new(
                dyn_oracle.clone(),
                MaxTsLimit::DEFAULT_ALLOWANCE,
            )),
            // The race hook reads inside a prewrite's engine write, on the
            // thread that holds the memory lock: waiting for it could only
            // run out. TiKV's immediate answer.
            memory_lock_wait: std::time::Duration::ZERO,
            ..StorageConfig::default()
        };
        let cluster = Cluster::new(self.engine.clone(), self.params.splits.clone(), storage);
        self.client = Some(Client::new(cluster, dyn_oracle, ClientConfig::default()));
        self.oracle = Some(oracle);
        self.install_race_hook();
    }

    /// The largest timestamp in the engine's data: every commit record's,
    /// every lock's and the GC safe point (what `Client::open` takes from
    /// RocksDB).
    fn timestamp_floor(&self) -> TimeStamp {
        let snapshot = self.engine.snapshot();
        let mut floor = TimeStamp::zero();
        let scan = |cf: Cf, each: &mut dyn FnMut(&[u8], &[u8])| {
            let mut it = snapshot
                .iter(cf, IterOptions::new())
                .expect("memory iterators do not fail");
            let mut valid = it.seek_to_first().expect("memory iterators do not fail");
            while valid {
                each(it.key(), it.value());
                valid = it.next().expect("memory iterators do not fail");
            }
        };
        scan(Cf::Write, &mut |key, _| {
            if let Ok(ts) = Key::decode_ts_from(key) {
                floor = floor.max(ts);
            }
        });
        scan(Cf::Lock, &mut |_, value| {
            if let Ok(lock) = Lock::parse(value) {
                floor = floor.max(lock.ts).max(lock.min_commit_ts);
            }
        });
        floor.max(TimeStamp::new(self.engine.gc_safe_point()))
    }

    /// The client over the regions.
    pub(crate) fn client(&self) -> &Client<SimEngine> {
        self.client.as_ref().expect("the world is open")
    }

    /// The region command API for raw `key`.
    pub(crate) fn storage(&self, key: &[u8]) -> &Storage<SimEngine> {
        self.client().cluster().region_for(key).storage()
    }

    /// A fresh timestamp from the oracle.
    pub(crate) fn get_ts(&mut self) -> TimeStamp {
        match self.client().oracle().get_ts() {
            Ok(ts) => ts,
            Err(e) => {
                self.harness_errors.push(format!("oracle: {e}"));
                TimeStamp::zero()
            }
        }
    }

    /// The process crashes: everything in memory is gone (the regions'
    /// `max_ts` and memory locks, every client), the oracle keeps only its
    /// file; then it reopens from the engine and the file.
    pub(crate) fn crash(&mut self) {
        self.engine.set_hook(None);
        drop(self.client.take());
        let oracle = self.oracle.take().expect("open");
        match Arc::try_unwrap(oracle) {
            Ok(oracle) => oracle.inner.crash(),
            Err(_) => self
                .harness_errors
                .push("the oracle is still shared at a crash".into()),
        }
        self.open();
    }

    /// The write hook: when armed, the next write carrying a lock or a
    /// commit record is raced by a point read of one of its keys at a
    /// fresh timestamp, run by the real `Get` command against the engine
    /// before the write lands (the moment a thread reading concurrently
    /// could see): it must either be blocked by the region's memory lock,
    /// or read what the commit's timestamp makes right.
    fn install_race_hook(&mut self) {
        let regions: Vec<(
            Vec<u8>,
            percolate_txn::concurrency_manager::ConcurrencyManager,
        )> = self
            .client()
            .cluster()
            .regions()
            .iter()
            .map(|r| {
                (
                    r.start_key().to_vec(),
                    r.storage().concurrency_manager().clone(),
                )
            })
            .collect();
        let oracle: Arc<dyn TimestampOracle> = self.oracle.clone().expect("open");
        let (armed, raced, log) = (
            self.race_next.clone(),
            self.raced.clone(),
            self.engine.log().clone(),
        );
        let hook: WriteHook = Box::new(move |engine, batch| {
            if !*armed.lock() {
                return;
            }
            let target = batch.modifies().iter().find_map(|m| match m {
                percolate_engine::Modify::Put {
                    cf: Cf::Lock, key, ..
                } => Key::from_encoded_slice(key).into_raw().ok(),
                percolate_engine::Modify::Put {
                    cf: Cf::Write, key, ..
                } => Key::split_on_ts_for(key)
                    .ok()
                    .and_then(|(user, _)| Key::from_encoded_slice(user).into_raw().ok()),
                _ => None,
            });
            let Some(raw) = target else { return };
            *armed.lock() = false;
            let Ok(ts) = oracle.get_ts() else { return };
            let cm = &regions
                .iter()
                .rev()
                .find(|(start, _)| start.as_slice() <= raw.as_slice())
                .expect("the first region starts at the empty key")
                .1;
            let get = Get {
                key: Key::from_raw(&raw),
                ts,
                options: ReadOptions::default(),
            };
            if let Ok(value) = get.process(ReadContext::new(engine, cm)) {
                let step = log.lock().step;
                raced.lock().push(Observation {
                    step,
                    ts,
                    kind: ReadKind::Si,
                    read: Read::Get { key: raw, value },
                    txn: None,
                });
            }
        });
        self.engine.set_hook(Some(hook));
    }

    /// Arms (or disarms) the race of the next write.
    pub(crate) fn arm_race(&self, armed: bool) {
        *self.race_next.lock() = armed;
    }

    /// Moves the raced reads into the history (and the trace).
    pub(crate) fn collect_raced(&mut self) {
        let raced: Vec<Observation> = std::mem::take(&mut *self.raced.lock());
        for obs in raced {
            if self.tracing() {
                let line = format!("  (a read races the write) {}", obs.describe());
                self.note(line);
            }
            self.history.observations.push(obs);
        }
    }

    /// Starts step `step`: commit records written from now on carry it.
    pub(crate) fn begin_step(&mut self, step: u64) {
        self.step = step;
        self.engine.log().lock().step = step;
    }

    /// One round of the client's real resolver over `locks`, for a caller
    /// at `caller_ts`. Returns (alive locks, pushed transactions).
    pub(crate) fn resolve(
        &mut self,
        locks: &[LockInfo],
        caller_ts: TimeStamp,
    ) -> Result<(Vec<LockInfo>, Vec<TimeStamp>)> {
        let round = self.client().resolve_locks_once(locks, caller_ts)?;
        if self.tracing() {
            let owners: Vec<String> = locks
                .iter()
                .map(|l| {
                    format!(
                        "{}@{}",
                        String::from_utf8_lossy(&l.key),
                        Self::fmt_ts(l.lock_version)
                    )
                })
                .collect();
            self.note(format!(
                "  resolve {} caller={} -> alive {} pushed {}",
                owners.join(" "),
                Self::fmt_ts(caller_ts),
                round.alive.len(),
                round.pushed.len()
            ));
        }
        Ok((round.alive, round.pushed))
    }

    /// A point read of raw `key` at `ts`, resolving the locks it meets as
    /// the client does (a few rounds; then it gives up as blocked). The
    /// answer, or why there is none.
    pub(crate) fn read_get(
        &mut self,
        key: &[u8],
        ts: TimeStamp,
        kind: ReadKind,
    ) -> std::result::Result<Option<Vec<u8>>, String> {
        self.resolving_reads(ts, kind, |world, options| {
            let get = Get {
                key: Key::from_raw(key),
                ts,
                options: options.clone(),
            };
            match world.storage(key).read(get) {
                Ok(value) if planted::lose_values() => Ok(Ok(value.and(None))),
                Ok(value) => Ok(Ok(value)),
                Err(e) => match into_lock(e) {
                    Ok(lock) => Ok(Err(vec![lock])),
                    Err(e) => Err(format!("error: {e}")),
                },
            }
        })
    }

    /// Runs a read `attempt` (its answer, or the locks it met) as the
    /// client does: the locks met are resolved and bypassed from then on,
    /// for a few rounds; then it gives up as blocked, as it does at once
    /// when a lock's owner is alive.
    fn resolving_reads<T>(
        &mut self,
        ts: TimeStamp,
        kind: ReadKind,
        mut attempt: impl FnMut(
            &mut Self,
            &ReadOptions,
        )
            -> std::result::Result<std::result::Result<T, Vec<LockInfo>>, String>,
    ) -> std::result::Result<T, String> {
        let mut options = read_options(kind);
        let mut pushed: Vec<TimeStamp> = Vec::new();
        for _ in 0..4 {
            let locks = match attempt(self, &options)? {
                Ok(answer) => return Ok(answer),
                Err(locks) => locks,
            };
            let (alive, more) = self
                .resolve(&locks, ts)
                .map_err(|e| format!("error: {e}"))?;
            if !alive.is_empty() {
                return Err("blocked".into());
            }
            pushed.extend(more);
            options.bypass_locks = pushed.iter().copied().collect::<TsSet>();
        }
        Err("blocked".into())
    }

    /// A range read of `[start, end)` at `ts`, forward or from `end` down,
    /// at most `limit` pairs (0: all), across regions, resolving locks.
    pub(crate) fn read_scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
        ts: TimeStamp,
        kind: ReadKind,
    ) -> std::result::Result<Pairs, String> {
        let mut pieces: Vec<(Vec<u8>, Vec<u8>)> = self
            .client()
            .cluster()
            .regions_in(start, Some(end))
            .iter()
            .filter_map(|r| {
                let lower = start.max(r.start_key()).to_vec();
                let upper = match r.end_key() {
                    Some(e) => end.min(e).to_vec(),
                    None => end.to_vec(),
                };
                (lower < upper).then_some((lower, upper))
            })
            .collect();
        if reverse {
            pieces.reverse();
        }
        let mut pairs = Vec::new();
        for (lower, upper) in pieces {
            if limit != 0 && pairs.len() >= limit {
                break;
            }
            let request = ScanRequest {
                start_key: Key::from_raw(if reverse { &upper } else { &lower }),
                end_key: Some(Key::from_raw(if reverse { &lower } else { &upper })),
                limit: if limit == 0 { 0 } else { limit - pairs.len() },
                ts,
                key_only: false,
                reverse,
            };
            pairs.extend(self.scan_piece(&lower, request, kind)?);
        }
        Ok(pairs)
    }

    /// One region's part of a range read.
    fn scan_piece(
        &mut self,
        lower: &[u8],
        request: ScanRequest,
        kind: ReadKind,
    ) -> std::result::Result<Pairs, String> {
        let ts = request.ts;
        self.resolving_reads(ts, kind, |world, options| {
            let scan = Scan {
                request: request.clone(),
                options: options.clone(),
            };
            let mut locks = Vec::new();
            let mut pairs = Vec::new();
            match world.storage(lower).read(scan) {
                Ok(entries) => {
                    for entry in entries {
                        match entry {
                            Ok((key, value)) => pairs
                                .push((key.into_raw().map_err(|e| format!("error: {e}"))?, value)),
                            Err(e) => locks.push(into_lock(e).map_err(|e| format!("error: {e}"))?),
                        }
                    }
                }
                Err(e) => locks.push(into_lock(e).map_err(|e| format!("error: {e}"))?),
            }
            Ok(if locks.is_empty() {
                Ok(pairs)
            } else {
                Err(locks)
            })
        })
    }

    /// The locks left in every region, and whether any region still holds
    /// a memory lock.
    pub(crate) fn leftover_locks(&self) -> (Vec<LockInfo>, bool) {
        let mut locks = Vec::new();
        let mut memory = false;
        for region in self.client().cluster().regions() {
            let storage = region.storage();
            let start = Some(Key::from_raw(region.start_key()));
            let end = region.end_key().map(Key::from_raw);
            match storage.scan_lock(start, end, TimeStamp::max(), 0) {
                Ok(found) => locks.extend(found),
                Err(e) => panic!("scan_lock failed: {e}"),
            }
            memory |= storage.concurrency_manager().global_min_lock_ts().is_some();
        }
        (locks, memory)
    }

    /// Moves the clock and lets the oracle's ticker follow it.
    pub(crate) fn set_clock(&mut self, ms: u64) {
        self.clock.set(ms);
        if let Some(oracle) = &self.oracle {
            oracle.inner.tick();
        }
    }

    /// The clock's reading (ms).
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}

/// The options of a read of `kind`.
fn read_options(kind: ReadKind) -> ReadOptions {
    ReadOptions {
        isolation_level: match kind {
            ReadKind::Rc => IsolationLevel::Rc,
            _ => IsolationLevel::Si,
        },
        ..ReadOptions::default()
    }
}

/// The lock of a `KeyIsLocked` error, or the error itself.
pub(crate) fn into_lock(e: Error) -> std::result::Result<LockInfo, Error> {
    match e {
        Error::Mvcc(percolate_mvcc::Error::KeyIsLocked(info)) => Ok(*info),
        other => Err(other),
    }
}

/// A bug planted for the simulator's own tests: point reads lose every
/// value they find. Never set outside them.
pub(crate) mod planted {
    #[cfg(test)]
    thread_local! {
        static LOSE_VALUES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Whether point reads lose their values (only ever in tests).
    pub(crate) fn lose_values() -> bool {
        #[cfg(test)]
        return LOSE_VALUES.with(std::cell::Cell::get);
        #[cfg(not(test))]
        false
    }

    /// Plants (or removes) the bug on this thread.
    #[cfg(test)]
    pub(crate) fn set_lose_values(on: bool) {
        LOSE_VALUES.with(|c| c.set(on));
    }
}
