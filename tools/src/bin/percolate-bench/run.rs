//! Loading the systems (then flushing them and waiting for their
//! compactions) and measuring one scenario on one system.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tempfile::TempDir;

use crate::systems::{self, BoxError, Kind, OpError, Setup, System};
use crate::workload::{KeyDistribution, OpGenerator, ReadMode, Workload};

/// One measured configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scenario {
    /// The operation mix.
    pub workload: Workload,
    /// How its single-record reads are made (for workloads with reads).
    pub read: ReadMode,
    /// How records are chosen.
    pub distribution: KeyDistribution,
    /// Bytes per value.
    pub value_len: usize,
    /// Client threads.
    pub threads: usize,
    /// Synced commits.
    pub durable: bool,
    /// Keys per transfer.
    pub txn_keys: usize,
    /// Longest scan.
    pub max_scan: usize,
}

/// When a measurement stops.
#[derive(Clone, Copy, Debug)]
pub enum RunLimit {
    /// After this long.
    Time(Duration),
    /// After this many operations over all threads.
    Ops(u64),
}

/// What one scenario on one system measured.
#[derive(Debug)]
pub struct Measurement {
    /// Operations completed (aborted ones included) in the window.
    pub ops: u64,
    /// The measured window.
    pub elapsed: Duration,
    /// Latency of every operation, retries included, in nanoseconds.
    pub latency: Histogram<u64>,
    /// Conflicts retried.
    pub retries: u64,
    /// Operations given up after too many conflicts.
    pub aborts: u64,
    /// Percolate's commits by protocol during the window: 1PC, async, 2PC.
    pub protocols: Option<[u32; 3]>,
    /// Percolate's counters during the warm-up and the window.
    pub counters: Option<crate::systems::Counters>,
    /// CPU time the whole process used during the warm-up and the window
    /// (every thread: clients, workers, the engine's background jobs).
    pub cpu: Duration,
    /// Operations during the warm-up and the window.
    pub cpu_ops: u64,
}

impl Measurement {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU microseconds the process spent per operation: on a machine
    /// shared with other work this says more than ops/s.
    pub fn cpu_micros_per_op(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.cpu_ops.max(1) as f64
    }

    /// A latency percentile in microseconds.
    pub fn micros(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }
}

/// Systems opened and loaded, each in its own temporary directory.
pub struct Loaded {
    /// In `--systems` order. Declared before `_dirs`: closed first.
    pub systems: Vec<(Kind, Box<dyn System>)>,
    /// For each system, how long its load took and how long its flush and
    /// the wait for its compactions (`None`: not flushed).
    pub timings: Vec<(Duration, Option<Duration>)>,
    _dirs: Vec<TempDir>,
}

/// Keys each load step writes (percolate splits it into transactions of
/// its prewrite batch size).
const LOAD_CHUNK: u64 = 1024;

/// Opens every kind and loads `setup.records` records, with a progress bar;
/// with `flush`, then flushes each system's memtables and waits for its
/// compactions ([`System::settle`]) before the next one is loaded.
pub fn open_and_load(
    kinds: &[Kind],
    setup: Setup,
    value_len: usize,
    threads: usize,
    flush: bool,
) -> Result<Loaded, BoxError> {
    let mut systems = Vec::new();
    let mut timings = Vec::new();
    let mut dirs = Vec::new();
    for &kind in kinds {
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix(&format!("percolate-bench-{}-", kind.name()))
            .tempdir()?;
        let system = systems::open(kind, dir.path(), setup)?;
        let bar = progress(setup.records, &format!("load {}", kind.name()), "records");
        let next = AtomicU64::new(0);
        std::thread::scope(|s| -> Result<(), BoxError> {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<(), BoxError> {
                        loop {
                            let first = next.fetch_add(LOAD_CHUNK, Ordering::Relaxed);
                            if first >= setup.records {
                                return Ok(());
                            }
                            let count = LOAD_CHUNK.min(setup.records - first);
                            system.load(first, count, value_len)?;
                            bar.inc(count);
                        }
                    })
                })
                .collect();
            for worker in workers {
                worker.join().expect("load thread panicked")?;
            }
            Ok(())
        })?;
        bar.finish_and_clear();
        let loaded = started.elapsed();
        let mut settled = None;
        if flush {
            let started = Instant::now();
            let spinner = ProgressBar::new_spinner().with_message(format!(
                "{}: flushing, waiting for compactions",
                kind.name()
            ));
            spinner.enable_steady_tick(Duration::from_millis(100));
            system.settle()?;
            spinner.finish_and_clear();
            settled = Some(started.elapsed());
        }
        timings.push((loaded, settled));
        systems.push((kind, system));
        dirs.push(dir);
    }
    Ok(Loaded {
        systems,
        timings,
        _dirs: dirs,
    })
}

/// A progress bar: `unit` follows the position (records loaded, ms or
/// operations measured).
fn progress(len: u64, prefix: &str, unit: &str) -> ProgressBar {
    let template =
        format!("{{prefix:>24}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{msg}} ({{elapsed}})");
    let style = ProgressStyle::with_template(&template)
        .expect("valid template")
        .progress_chars("=> ");
    ProgressBar::new(len)
        .with_style(style)
        .with_prefix(prefix.to_string())
}

/// New records of workload E are numbered from here on, in every system.
static INSERTED: AtomicU64 = AtomicU64::new(0);

/// Per-thread results.
struct ThreadResult {
    ops: u64,
    latency: Histogram<u64>,
    retries: u64,
    aborts: u64,
    /// Operations including the warm-up's.
    all_ops: u64,
    finished: Instant,
}

/// Runs `scenario` on `system`: a warm-up, then the measured window.
pub fn measure(
    system: &dyn System,
    scenario: &Scenario,
    records: u64,
    limit: RunLimit,
    warmup: Duration,
    name: &str,
) -> Result<Measurement, BoxError> {
    let generator = OpGenerator::new(
        scenario.workload,
        scenario.distribution,
        records,
        scenario.max_scan,
        scenario.txn_keys,
        scenario.read,
    );
    let started = Instant::now();
    let window_start = started + warmup;
    let (bar_len, deadline) = match limit {
        RunLimit::Time(d) => (d.as_millis() as u64, Some(window_start + d)),
        RunLimit::Ops(n) => (n, None),
    };
    let remaining = AtomicU64::new(match limit {
        RunLimit::Ops(n) => n,
        RunLimit::Time(_) => u64::MAX,
    });
    let done_ops = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let protocols_before = system.protocols();
    let counters_before = system.counters();
    let unit = match limit {
        RunLimit::Time(_) => "ms",
        RunLimit::Ops(_) => "ops",
    };
    let bar = progress(bar_len, name, unit);
    let cpu_before = process_cpu();
    let results = std::thread::scope(|s| -> Result<Vec<ThreadResult>, BoxError> {
        let workers: Vec<_> = (0..scenario.threads)
            .map(|_| {
                s.spawn(|| {
                    worker(
                        system,
                        &generator,
                        scenario.value_len,
                        records,
                        Window {
                            start: window_start,
                            deadline,
                            remaining: &remaining,
                            done: &done_ops,
                            stop: &stop,
                        },
                    )
                })
            })
            .collect();
        while workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            let now = Instant::now();
            let elapsed = now.saturating_duration_since(window_start);
            match limit {
                RunLimit::Time(_) => bar.set_position(elapsed.as_millis() as u64),
                RunLimit::Ops(_) => bar.set_position(done_ops.load(Ordering::Relaxed)),
            }
            if !elapsed.is_zero() {
                let rate = done_ops.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64();
                bar.set_message(format!("{rate:.0} ops/s"));
            }
        }
        let mut results = Vec::new();
        for w in workers {
            results.push(w.join().expect("worker panicked")?);
        }
        Ok(results)
    });
    let cpu = process_cpu().saturating_sub(cpu_before);
    bar.finish_and_clear();
    let results = results?;
    let mut latency = new_histogram();
    let (mut ops, mut retries, mut aborts, mut cpu_ops) = (0, 0, 0, 0);
    let mut finished = window_start;
    for r in results {
        latency.add(&r.latency).expect("same bounds");
        ops += r.ops;
        retries += r.retries;
        aborts += r.aborts;
        cpu_ops += r.all_ops;
        finished = finished.max(r.finished);
    }
    let protocols = match (protocols_before, system.protocols()) {
        (Some(before), Some(after)) => Some([0, 1, 2].map(|i| after[i] - before[i])),
        _ => None,
    };
    let counters = match (counters_before, system.counters()) {
        (Some(before), Some(after)) => Some(after.since(before)),
        _ => None,
    };
    Ok(Measurement {
        ops,
        elapsed: finished.saturating_duration_since(window_start),
        latency,
        retries,
        aborts,
        protocols,
        counters,
        cpu,
        cpu_ops,
    })
}

/// The CPU time (user and system) of this process so far, from
/// /proc/self/stat (in clock ticks of 10 ms); zero where there is none.
pub(crate) fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The command name (field 2) may hold spaces: count from its `)`.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn new_histogram() -> Histogram<u64> {
    // 1 ns to 10 min, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds")
}

/// The measured window, shared by the threads of one measurement.
struct Window<'a> {
    start: Instant,
    deadline: Option<Instant>,
    remaining: &'a AtomicU64,
    done: &'a AtomicU64,
    stop: &'a AtomicBool,
}

fn worker(
    system: &dyn System,
    generator: &OpGenerator,
    value_len: usize,
    records: u64,
    window: Window<'_>,
) -> Result<ThreadResult, BoxError> {
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let mut result = ThreadResult {
        ops: 0,
        latency: new_histogram(),
        retries: 0,
        aborts: 0,
        all_ops: 0,
        finished: window.start,
    };
    loop {
        if window.stop.load(Ordering::Relaxed) {
            break;
        }
        let begin = Instant::now();
        let measured = begin >= window.start;
        if window.deadline.is_some_and(|d| begin >= d) {
            break;
        }
        if measured
            && window
                .remaining
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
        {
            break;
        }
        let op = generator.next(&mut rng, || {
            records + INSERTED.fetch_add(1, Ordering::Relaxed)
        });
        let outcome = system.execute(&op, value_len);
        let end = Instant::now();
        result.all_ops += 1;
        if !measured {
            if let Err(OpError::Failed(e)) = outcome {
                window.stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
            continue;
        }
        match outcome {
            Ok(retries) => result.retries += u64::from(retries),
            Err(OpError::Aborted) => {
                result.retries += u64::from(systems::MAX_ATTEMPTS - 1);
                result.aborts += 1;
            }
            Err(OpError::Failed(e)) => {
                window.stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        let nanos = (end - begin).as_nanos().clamp(1, 600_000_000_000) as u64;
        result.latency.record(nanos).expect("in bounds");
        result.ops += 1;
        result.finished = end;
        window.done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(result)
}
