//! Counters and latency histograms: per command, per commit protocol, and
//! for what a transaction meets on its way (conflicts, retries, lock
//! resolutions, latch waits, pessimistic lock waits, oracle calls, GC).
//!
//! One [`Metrics`] is shared by a client and its regions (a clone of the
//! `Arc` in [`StorageConfig::metrics`](crate::storage::StorageConfig::metrics)
//! goes to each region). Recording is a few relaxed atomic additions on
//! counters no reader waits for; [`Metrics::disabled`] records nothing, for
//! the benchmark that measures what recording costs. [`Metrics::snapshot`]
//! reads everything at once into a [`MetricsSnapshot`], which renders as
//! Prometheus text ([`MetricsSnapshot::to_prometheus`]);
//! [`Client::metrics`](crate::client::Client::metrics) adds the engine's own
//! statistics.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use percolate_engine::EngineStats;

use crate::slots::{thread_slot, thread_slots};

/// What a command is, for its counters: one per command of
/// [`commands`](crate::commands), and `Other` for commands defined
/// elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CommandKind {
    /// [`Prewrite`](crate::commands::Prewrite).
    Prewrite,
    /// [`Commit`](crate::commands::Commit).
    Commit,
    /// [`Cleanup`](crate::commands::Cleanup).
    Cleanup,
    /// [`BatchRollback`](crate::commands::BatchRollback).
    BatchRollback,
    /// [`CheckTxnStatus`](crate::commands::CheckTxnStatus).
    CheckTxnStatus,
    /// [`CheckSecondaryLocks`](crate::commands::CheckSecondaryLocks).
    CheckSecondaryLocks,
    /// [`ResolveLock`](crate::commands::ResolveLock).
    ResolveLock,
    /// [`ResolveLockLite`](crate::commands::ResolveLockLite).
    ResolveLockLite,
    /// [`TxnHeartBeat`](crate::commands::TxnHeartBeat).
    TxnHeartBeat,
    /// [`AcquirePessimisticLock`](crate::commands::AcquirePessimisticLock).
    AcquirePessimisticLock,
    /// [`PessimisticRollback`](crate::commands::PessimisticRollback).
    PessimisticRollback,
    /// [`Unlock`](crate::commands::Unlock).
    Unlock,
    /// [`Gc`](crate::commands::Gc).
    Gc,
    /// [`Repair`](crate::commands::Repair).
    Repair,
    /// [`Get`](crate::commands::Get).
    Get,
    /// [`BatchGet`](crate::commands::BatchGet).
    BatchGet,
    /// [`Scan`](crate::commands::Scan).
    Scan,
    /// [`ScanLock`](crate::commands::ScanLock).
    ScanLock,
    /// [`MvccByKey`](crate::commands::MvccByKey).
    MvccByKey,
    /// [`RawGet`](crate::commands::RawGet).
    RawGet,
    /// [`RawBatchGet`](crate::commands::RawBatchGet).
    RawBatchGet,
    /// [`RawScan`](crate::commands::RawScan).
    RawScan,
    /// [`RawPut`](crate::commands::RawPut).
    RawPut,
    /// [`RawDelete`](crate::commands::RawDelete).
    RawDelete,
    /// [`RawDeleteRange`](crate::commands::RawDeleteRange).
    RawDeleteRange,
    /// [`RawCompareAndSwap`](crate::commands::RawCompareAndSwap).
    RawCompareAndSwap,
    /// A command defined outside this crate.
    Other,
}

impl CommandKind {
    /// Every kind, in the order of their counters.
    pub const ALL: [CommandKind; 27] = [
        CommandKind::Prewrite,
        CommandKind::Commit,
        CommandKind::Cleanup,
        CommandKind::BatchRollback,
        CommandKind::CheckTxnStatus,
        CommandKind::CheckSecondaryLocks,
        CommandKind::ResolveLock,
        CommandKind::ResolveLockLite,
        CommandKind::TxnHeartBeat,
        CommandKind::AcquirePessimisticLock,
        CommandKind::PessimisticRollback,
        CommandKind::Unlock,
        CommandKind::Gc,
        CommandKind::Repair,
        CommandKind::Get,
        CommandKind::BatchGet,
        CommandKind::Scan,
        CommandKind::ScanLock,
        CommandKind::MvccByKey,
        CommandKind::RawGet,
        CommandKind::RawBatchGet,
        CommandKind::RawScan,
        CommandKind::RawPut,
        CommandKind::RawDelete,
        CommandKind::RawDeleteRange,
        CommandKind::RawCompareAndSwap,
        CommandKind::Other,
    ];

    /// Its name in snake case, as TiKV's metrics label commands.
    pub fn name(self) -> &'static str {
        match self {
            CommandKind::Prewrite => "prewrite",
            CommandKind::Commit => "commit",
            CommandKind::Cleanup => "cleanup",
            CommandKind::BatchRollback => "batch_rollback",
            CommandKind::CheckTxnStatus => "check_txn_status",
            CommandKind::CheckSecondaryLocks => "check_secondary_locks",
            CommandKind::ResolveLock => "resolve_lock",
            CommandKind::ResolveLockLite => "resolve_lock_lite",
            CommandKind::TxnHeartBeat => "txn_heart_beat",
            CommandKind::AcquirePessimisticLock => "acquire_pessimistic_lock",
            CommandKind::PessimisticRollback => "pessimistic_rollback",
            CommandKind::Unlock => "unlock",
            CommandKind::Gc => "gc",
            CommandKind::Repair => "repair",
            CommandKind::Get => "get",
            CommandKind::BatchGet => "batch_get",
            CommandKind::Scan => "scan",
            CommandKind::ScanLock => "scan_lock",
            CommandKind::MvccByKey => "mvcc_by_key",
            CommandKind::RawGet => "raw_get",
            CommandKind::RawBatchGet => "raw_batch_get",
            CommandKind::RawScan => "raw_scan",
            CommandKind::RawPut => "raw_put",
            CommandKind::RawDelete => "raw_delete",
            CommandKind::RawDeleteRange => "raw_delete_range",
            CommandKind::RawCompareAndSwap => "raw_compare_and_swap",
            CommandKind::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How a transaction committed, for its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProtocolKind {
    /// One phase: prewrite and commit in one write.
    OnePc,
    /// Async commit: committed once every prewrite is written.
    AsyncCommit,
    /// Two-phase commit: committed by the primary's commit record.
    TwoPc,
}

impl ProtocolKind {
    /// Every kind, in the order of their counters.
    pub const ALL: [ProtocolKind; 3] = [
        ProtocolKind::OnePc,
        ProtocolKind::AsyncCommit,
        ProtocolKind::TwoPc,
    ];

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolKind::OnePc => "1pc",
            ProtocolKind::AsyncCommit => "async_commit",
            ProtocolKind::TwoPc => "2pc",
        }
    }
}

/// How a pessimistic lock request's wait for another transaction's lock
/// ended, for its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockWaitOutcome {
    /// The lock was released (or the request found it released at once):
    /// the request ran again.
    Released,
    /// The request's wait timeout passed first.
    TimedOut,
    /// Waiting would have closed a cycle of waiting transactions: the
    /// request failed at once with a deadlock.
    Deadlock,
}

impl LockWaitOutcome {
    /// Every outcome, in the order of their counters.
    pub const ALL: [LockWaitOutcome; 3] = [
        LockWaitOutcome::Released,
        LockWaitOutcome::TimedOut,
        LockWaitOutcome::Deadlock,
    ];

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            LockWaitOutcome::Released => "released",
            LockWaitOutcome::TimedOut => "timed_out",
            LockWaitOutcome::Deadlock => "deadlock",
        }
    }
}

/// How a lock a reader or writer met was resolved, for its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResolveOutcome {
    /// Its transaction had committed: the lock was rolled forward.
    Committed,
    /// Its transaction was rolled back (its TTL expired, or it had
    /// already been rolled back).
    RolledBack,
    /// Its transaction was alive: the reader pushed it (or waited).
    Alive,
}

impl ResolveOutcome {
    /// Every outcome, in the order of their counters.
    pub const ALL: [ResolveOutcome; 3] = [
        ResolveOutcome::Committed,
        ResolveOutcome::RolledBack,
        ResolveOutcome::Alive,
    ];

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            ResolveOutcome::Committed => "committed",
            ResolveOutcome::RolledBack => "rolled_back",
            ResolveOutcome::Alive => "alive",
        }
    }
}

/// Upper bounds of the histogram buckets, in microseconds: powers of two
/// from 1 µs to about 8.4 s; a last bucket takes everything above.
const BUCKETS: usize = 24;

/// A latency histogram of relaxed atomic counters.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    fn record(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        // Bucket i holds (2^(i-1), 2^i] µs; bucket 0 holds [0, 1].
        let bucket = (u64::BITS - us.saturating_sub(1).leading_zeros()) as usize;
        self.buckets[bucket.min(BUCKETS)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            count: counts.iter().sum(),
            counts,
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// A histogram as read: counts per bucket, where bucket `i < 24` holds the
/// latencies up to `2^i` µs (above the previous bucket's bound) and the
/// last bucket everything longer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistogramSnapshot {
    /// Latencies recorded.
    pub count: u64,
    /// Their sum in microseconds.
    pub sum_us: u64,
    /// Per bucket (not cumulative), `BUCKETS + 1` of them.
    pub counts: Vec<u64>,
}

impl HistogramSnapshot {
    /// The upper bound in microseconds of bucket `i`; `None` for the last,
    /// unbounded one.
    pub fn bucket_bound_us(i: usize) -> Option<u64> {
        (i < BUCKETS).then(|| 1u64 << i)
    }

    /// An upper bound of the `q` quantile (0.0 to 1.0), in microseconds:
    /// the bound of the bucket it falls in. `None` when nothing was
    /// recorded or it falls in the unbounded bucket.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::bucket_bound_us(i);
            }
        }
        None
    }
}

/// One command kind's counters.
#[derive(Debug, Default)]
struct CommandStats {
    ok: AtomicU64,
    failed: AtomicU64,
    latency: Histogram,
}

/// One commit protocol's counters.
#[derive(Debug, Default)]
struct ProtocolStats {
    optimistic: AtomicU64,
    pessimistic: AtomicU64,
    latency: Histogram,
}

/// One stripe of the hot counters, on cache lines of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe {
    commands: [CommandStats; CommandKind::ALL.len()],
    protocols: [ProtocolStats; ProtocolKind::ALL.len()],
    resolved: [AtomicU64; ResolveOutcome::ALL.len()],
    lock_waits: [Histogram; LockWaitOutcome::ALL.len()],
    conflicts: AtomicU64,
    retries: AtomicU64,
    rolled_back: AtomicU64,
    oracle_calls: AtomicU64,
}

/// Counters and histograms shared by a client and its regions. Aligned so
/// that its reference count, which every write command takes, is not on
/// the cache line of the fields every operation reads.
#[derive(Debug)]
#[repr(align(128))]
pub struct Metrics {
    enabled: bool,
    stripes: Box<[Stripe]>,
    gc_runs: AtomicU64,
    gc_safe_point: AtomicU64,
    gc_versions_deleted: AtomicU64,
}

/// Two handles are equal when they are the same table (as clones of one
/// `Arc` in [`StorageConfig`](crate::storage::StorageConfig) are).
impl PartialEq for Metrics {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Metrics {}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics that record.
    pub fn new() -> Self {
        Metrics {
            enabled: true,
            stripes: (0..thread_slots()).map(|_| Stripe::default()).collect(),
            gc_runs: AtomicU64::new(0),
            gc_safe_point: AtomicU64::new(0),
            gc_versions_deleted: AtomicU64::new(0),
        }
    }

    /// Metrics that record nothing: every snapshot reads zero (and the
    /// latch waits, which the scheduler keeps apart, still count).
    pub fn disabled() -> Self {
        Metrics {
            enabled: false,
            ..Metrics::new()
        }
    }

    /// Whether this records.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// A start time for a latency to be recorded, `None` when disabled
    /// (no clock read).
    pub(crate) fn start(&self) -> Option<std::time::Instant> {
        self.enabled.then(std::time::Instant::now)
    }

    /// A command of `kind`, started at `start` (from [`start`](Self::start)),
    /// answered `ok` or not.
    pub(crate) fn command(&self, kind: CommandKind, start: Option<std::time::Instant>, ok: bool) {
        let Some(start) = start else { return };
        let stats = &self.stripe().commands[kind.index()];
        if ok { &stats.ok } else { &stats.failed }.fetch_add(1, Ordering::Relaxed);
        stats.latency.record(start.elapsed());
    }

    /// A transaction committed by `protocol`, its commit started at `start`.
    pub(crate) fn committed(
        &self,
        protocol: ProtocolKind,
        pessimistic: bool,
        start: Option<std::time::Instant>,
    ) {
        let Some(start) = start else { return };
        let stats = &self.stripe().protocols[protocol as usize];
        if pessimistic {
            &stats.pessimistic
        } else {
            &stats.optimistic
        }
        .fetch_add(1, Ordering::Relaxed);
        stats.latency.record(start.elapsed());
    }

    /// The calling thread's stripe.
    /// The stripe of the calling thread: one per thread slot, so that
    /// threads on different cores do not fight over the counters' cache
    /// lines; a snapshot sums them.
    fn stripe(&self) -> &Stripe {
        &self.stripes[thread_slot() % self.stripes.len()]
    }

    /// Adds one to the counter `pick` chooses in the calling thread's
    /// stripe.
    fn add(&self, pick: impl FnOnce(&Stripe) -> &AtomicU64) {
        if self.enabled {
            pick(self.stripe()).fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A commit failed with a conflict (a write conflict, a lock it could
    /// not get past, a lost pessimistic lock).
    pub(crate) fn conflict(&self) {
        self.add(|s| &s.conflicts);
    }

    /// A transaction failed and was rolled back (by the client: a failed
    /// commit or a dropped transaction).
    pub(crate) fn rolled_back(&self) {
        self.add(|s| &s.rolled_back);
    }

    /// [`Client::with_retry`](crate::client::Client::with_retry) ran its
    /// work again.
    pub(crate) fn retry(&self) {
        self.add(|s| &s.retries);
    }

    /// A lock met was resolved with `outcome`.
    pub(crate) fn resolved(&self, outcome: ResolveOutcome) {
        self.add(|s| &s.resolved[outcome as usize]);
    }

    /// A pessimistic lock request waited for another transaction's lock,
    /// from `start` (from [`start`](Self::start)), until `outcome`.
    pub(crate) fn lock_wait(&self, outcome: LockWaitOutcome, start: Option<std::time::Instant>) {
        if let Some(start) = start {
            self.stripe().lock_waits[outcome as usize].record(start.elapsed());
        }
    }

    /// Timestamps were asked of the oracle (one call, whatever the count).
    pub(crate) fn oracle_call(&self) {
        self.add(|s| &s.oracle_calls);
    }

    /// A GC round up to `safe_point` deleted `versions` records.
    pub(crate) fn gc_round(&self, safe_point: u64, versions: u64) {
        if self.enabled {
            self.gc_runs.fetch_add(1, Ordering::Relaxed);
            self.gc_safe_point.fetch_max(safe_point, Ordering::Relaxed);
            self.gc_versions_deleted
                .fetch_add(versions, Ordering::Relaxed);
        }
    }

    /// Everything recorded so far. `latch_waits` and `engine` come from
    /// elsewhere (the regions' schedulers, the engine) and are given.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            commands: CommandKind::ALL
                .iter()
                .map(|&kind| {
                    let i = kind.index();
                    CommandMetrics {
                        kind,
                        ok: self.sum(&|s| &s.commands[i].ok),
                        failed: self.sum(&|s| &s.commands[i].failed),
                        latency: self.histogram(&|s| &s.commands[i].latency),
                    }
                })
                .filter(|c| c.ok + c.failed > 0)
                .collect(),
            commits: ProtocolKind::ALL
                .iter()
                .map(|&protocol| {
                    let i = protocol as usize;
                    CommitMetrics {
                        protocol,
                        optimistic: self.sum(&|s| &s.protocols[i].optimistic),
                        pessimistic: self.sum(&|s| &s.protocols[i].pessimistic),
                        latency: self.histogram(&|s| &s.protocols[i].latency),
                    }
                })
                .collect(),
            resolved: ResolveOutcome::ALL
                .iter()
                .map(|&outcome| (outcome, self.sum(&|s| &s.resolved[outcome as usize])))
                .collect(),
            lock_waits: LockWaitOutcome::ALL
                .iter()
                .map(|&outcome| {
                    (
                        outcome,
                        self.histogram(&|s| &s.lock_waits[outcome as usize]),
                    )
                })
                .collect(),
            conflicts: self.sum(&|s| &s.conflicts),
            retries: self.sum(&|s| &s.retries),
            rolled_back: self.sum(&|s| &s.rolled_back),
            oracle_calls: self.sum(&|s| &s.oracle_calls),
            latch_waits: 0,
            gc_runs: load(&self.gc_runs),
            gc_safe_point: load(&self.gc_safe_point),
            gc_versions_deleted: load(&self.gc_versions_deleted),
            engine: None,
        }
    }

    /// One counter summed over the stripes.
    fn sum(&self, pick: &dyn Fn(&Stripe) -> &AtomicU64) -> u64 {
        self.stripes
            .iter()
            .map(|s| pick(s).load(Ordering::Relaxed))
            .sum()
    }

    /// One histogram merged over the stripes.
    fn histogram(&self, pick: &dyn Fn(&Stripe) -> &Histogram) -> HistogramSnapshot {
        let mut total = HistogramSnapshot {
            counts: vec![0; BUCKETS + 1],
            ..HistogramSnapshot::default()
        };
        for stripe in self.stripes.iter() {
            let h = pick(stripe).snapshot();
            total.count += h.count;
            total.sum_us += h.sum_us;
            for (t, n) in total.counts.iter_mut().zip(h.counts) {
                *t += n;
            }
        }
        total
    }
}

/// One command kind's counters, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandMetrics {
    /// The command.
    pub kind: CommandKind,
    /// Answered with success.
    pub ok: u64,
    /// Answered with an error.
    pub failed: u64,
    /// From submission to answer.
    pub latency: HistogramSnapshot,
}

/// One commit protocol's counters, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitMetrics {
    /// The protocol.
    pub protocol: ProtocolKind,
    /// Optimistic transactions committed by it.
    pub optimistic: u64,
    /// Pessimistic transactions committed by it.
    pub pessimistic: u64,
    /// The commit's latency (from `commit` to its answer).
    pub latency: HistogramSnapshot,
}

/// Every counter at one moment, from [`Metrics::snapshot`] or
/// [`Client::metrics`](crate::client::Client::metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// The command kinds that ran at least once.
    pub commands: Vec<CommandMetrics>,
    /// Commits per protocol.
    pub commits: Vec<CommitMetrics>,
    /// Locks resolved, per outcome.
    pub resolved: Vec<(ResolveOutcome, u64)>,
    /// Pessimistic lock requests' waits for other transactions' locks, per
    /// outcome: how many (the histogram's count) and how long each took.
    pub lock_waits: Vec<(LockWaitOutcome, HistogramSnapshot)>,
    /// Commits failed by a conflict.
    pub conflicts: u64,
    /// Attempts [`Client::with_retry`](crate::client::Client::with_retry)
    /// made after the first.
    pub retries: u64,
    /// Transactions the client rolled back (failed commits, dropped
    /// transactions holding locks).
    pub rolled_back: u64,
    /// Calls to the timestamp oracle.
    pub oracle_calls: u64,
    /// Write commands that waited for another's latches.
    pub latch_waits: u64,
    /// GC rounds run.
    pub gc_runs: u64,
    /// The newest GC safe point.
    pub gc_safe_point: u64,
    /// Records GC deleted.
    pub gc_versions_deleted: u64,
    /// The engine's own statistics, where it keeps them (RocksDB).
    pub engine: Option<EngineStats>,
}

impl MetricsSnapshot {
    /// Commits of every protocol.
    pub fn commits_total(&self) -> u64 {
        self.commits
            .iter()
            .map(|c| c.optimistic + c.pessimistic)
            .sum()
    }

    /// The counters of command `kind`, if it ran.
    pub fn command(&self, kind: CommandKind) -> Option<&CommandMetrics> {
        self.commands.iter().find(|c| c.kind == kind)
    }

    /// Lock waits of every outcome.
    pub fn lock_waits_total(&self) -> u64 {
        self.lock_waits.iter().map(|(_, h)| h.count).sum()
    }

    /// The lock waits that ended with `outcome`.
    pub fn lock_wait(&self, outcome: LockWaitOutcome) -> Option<&HistogramSnapshot> {
        self.lock_waits
            .iter()
            .find(|(o, _)| *o == outcome)
            .map(|(_, h)| h)
    }

    /// The Prometheus text exposition format (version 0.0.4): counters
    /// with a `_total` suffix, latencies as histograms in seconds, every
    /// name prefixed `percolate_` (the engine's `percolate_rocksdb_`).
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        self.write_labelled_counters(&mut out);
        self.write_counters(&mut out);
        self.write_engine_stats(&mut out);
        self.write_histograms(&mut out);
        out
    }

    /// The counters by command, by commit protocol and by resolved lock.
    fn write_labelled_counters(&self, out: &mut String) {
        let mut counters = Family::new(out, "counter");
        counters.write(
            "percolate_commands_total",
            "Commands answered, by command and outcome.",
            self.commands.iter().flat_map(|c| {
                let name = c.kind.name();
                [
                    (format!("command=\"{name}\",outcome=\"ok\""), c.ok),
                    (format!("command=\"{name}\",outcome=\"failed\""), c.failed),
                ]
            }),
        );
        counters.write(
            "percolate_commits_total",
            "Transactions committed, by protocol and mode.",
            self.commits.iter().flat_map(|c| {
                let p = c.protocol.name();
                [
                    (
                        format!("protocol=\"{p}\",mode=\"optimistic\""),
                        c.optimistic,
                    ),
                    (
                        format!("protocol=\"{p}\",mode=\"pessimistic\""),
                        c.pessimistic,
                    ),
                ]
            }),
        );
        counters.write(
            "percolate_locks_resolved_total",
            "Locks met and resolved, by their transaction's outcome.",
            self.resolved
                .iter()
                .map(|(o, n)| (format!("outcome=\"{}\"", o.name()), *n)),
        );
        counters.write(
            "percolate_lock_waits_total",
            "Pessimistic lock requests' waits for another transaction's lock, by outcome.",
            self.lock_waits
                .iter()
                .map(|(o, h)| (format!("outcome=\"{}\"", o.name()), h.count)),
        );
    }

    /// The counters and gauges without labels.
    fn write_counters(&self, out: &mut String) {
        let mut counters = Family::new(out, "counter");
        for (name, help, value) in [
            (
                "percolate_conflicts_total",
                "Commits failed by a conflict.",
                self.conflicts,
            ),
            (
                "percolate_retries_total",
                "Attempts with_retry made after the first.",
                self.retries,
            ),
            (
                "percolate_rollbacks_total",
                "Transactions the client rolled back.",
                self.rolled_back,
            ),
            (
                "percolate_oracle_calls_total",
                "Calls to the timestamp oracle.",
                self.oracle_calls,
            ),
            (
                "percolate_latch_waits_total",
                "Write commands that waited for latches.",
                self.latch_waits,
            ),
            ("percolate_gc_runs_total", "GC rounds run.", self.gc_runs),
            (
                "percolate_gc_deleted_versions_total",
                "Records GC deleted.",
                self.gc_versions_deleted,
            ),
        ] {
            counters.write(name, help, [(String::new(), value)]);
        }
        Family::new(out, "gauge").write(
            "percolate_gc_safe_point",
            "The newest GC safe point (a timestamp).",
            [(String::new(), self.gc_safe_point)],
        );
    }

    /// The engine's own statistics, when there are any.
    fn write_engine_stats(&self, out: &mut String) {
        if let Some(engine) = &self.engine {
            for (name, counter, help, value) in engine.fields() {
                let kind = if counter { "counter" } else { "gauge" };
                Family::new(out, kind).write(
                    &format!("percolate_rocksdb_{name}"),
                    help,
                    [(String::new(), value)],
                );
            }
        }
    }

    /// The latencies of commands and of commits.
    fn write_histograms(&self, out: &mut String) {
        histograms(
            out,
            "percolate_command_duration_seconds",
            "From a command's submission to its answer.",
            self.commands
                .iter()
                .map(|c| (format!("command=\"{}\"", c.kind.name()), &c.latency)),
        );
        histograms(
            out,
            "percolate_commit_duration_seconds",
            "A transaction's commit, by protocol.",
            self.commits
                .iter()
                .map(|c| (format!("protocol=\"{}\"", c.protocol.name()), &c.latency)),
        );
        histograms(
            out,
            "percolate_lock_wait_duration_seconds",
            "A pessimistic lock request's wait for another transaction's lock, by outcome.",
            self.lock_waits
                .iter()
                .map(|(o, h)| (format!("outcome=\"{}\"", o.name()), h)),
        );
    }
}

/// Writes metric families of one type: the `# HELP` and `# TYPE` lines,
/// then a sample per label set (an empty label set: a bare name).
struct Family<'o> {
    out: &'o mut String,
    kind: &'static str,
}

impl<'o> Family<'o> {
    fn new(out: &'o mut String, kind: &'static str) -> Self {
        Family { out, kind }
    }

    fn write(&mut self, name: &str, help: &str, samples: impl IntoIterator<Item = (String, u64)>) {
        header(self.out, name, self.kind, help);
        for (labels, value) in samples {
            let _ = if labels.is_empty() {
                writeln!(self.out, "{name} {value}")
            } else {
                writeln!(self.out, "{name}{{{labels}}} {value}")
            };
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A histogram family: per label set, cumulative `_bucket` lines with `le`
/// in seconds (`+Inf` last), `_sum` in seconds and `_count`.
fn histograms<'h>(
    out: &mut String,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, &'h HistogramSnapshot)>,
) {
    header(out, name, "histogram", help);
    for (labels, h) in samples {
        let mut cumulative = 0;
        for (i, n) in h.counts.iter().enumerate() {
            cumulative += n;
            let le = match HistogramSnapshot::bucket_bound_us(i) {
                Some(us) => format!("{}", us as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_us as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_puts_each_latency_in_the_bucket_of_its_power_of_two() {
        let h = Histogram::default();
        for us in [0, 1, 2, 3, 4, 5, 1000, 10_000_000_000] {
            h.record(Duration::from_micros(us));
        }
        let s = h.snapshot();
        assert_eq!(s.count, 8);
        // [0, 1] -> 0; 2 -> 1; (2, 4] -> 2; 5 -> 3 (up to 8); 1000 -> 10
        // (up to 1024); 10^10 µs -> the unbounded bucket.
        assert_eq!(&s.counts[..4], &[2, 1, 2, 1]);
        assert_eq!(s.counts[10], 1);
        assert_eq!(s.counts[BUCKETS], 1);
        assert_eq!(s.quantile_us(0.5), Some(4));
        assert_eq!(s.quantile_us(0.75), Some(8));
        assert_eq!(s.quantile_us(1.0), None);
    }

    #[test]
    fn disabled_metrics_record_nothing() {
        let m = Metrics::disabled();
        m.command(CommandKind::Prewrite, m.start(), true);
        m.committed(ProtocolKind::OnePc, false, m.start());
        m.conflict();
        m.retry();
        m.oracle_call();
        m.gc_round(7, 3);
        m.lock_wait(LockWaitOutcome::Released, m.start());
        let s = m.snapshot();
        assert!(s.commands.is_empty());
        assert_eq!(s.lock_waits_total(), 0);
        assert_eq!(s.commits_total(), 0);
        assert_eq!(
            (s.conflicts, s.retries, s.oracle_calls, s.gc_runs),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn prometheus_text_has_a_type_line_per_family_and_cumulative_buckets() {
        let m = Metrics::new();
        let start = m.start();
        m.command(CommandKind::Prewrite, start, true);
        m.command(CommandKind::Prewrite, start, false);
        m.committed(ProtocolKind::AsyncCommit, true, start);
        m.resolved(ResolveOutcome::Committed);
        m.lock_wait(LockWaitOutcome::Deadlock, start);
        let text = m.snapshot().to_prometheus();
        assert!(text.contains("percolate_lock_waits_total{outcome=\"deadlock\"} 1"));
        assert!(text.contains("percolate_lock_waits_total{outcome=\"released\"} 0"));
        assert!(
            text.contains("percolate_lock_wait_duration_seconds_count{outcome=\"deadlock\"} 1")
        );
        assert!(text.contains("percolate_commands_total{command=\"prewrite\",outcome=\"ok\"} 1"));
        assert!(
            text.contains("percolate_commands_total{command=\"prewrite\",outcome=\"failed\"} 1")
        );
        assert!(
            text.contains(
                "percolate_commits_total{protocol=\"async_commit\",mode=\"pessimistic\"} 1"
            )
        );
        assert!(text.contains("percolate_locks_resolved_total{outcome=\"committed\"} 1"));
        assert!(text.contains(
            "percolate_command_duration_seconds_bucket{command=\"prewrite\",le=\"+Inf\"} 2"
        ));
        assert!(text.contains("percolate_command_duration_seconds_count{command=\"prewrite\"} 2"));
        // Every sample line belongs to a family declared before it.
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap().to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(*f)))
                    .unwrap_or(name);
                assert!(declared.contains(family), "{line} has no TYPE line");
            }
        }
    }
}
