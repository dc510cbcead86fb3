//! What the runner prints: the machine and its load, what each system
//! guarantees, how each read mode reads on each system, whether the stores
//! were flushed after the load, a line per measurement as it finishes, and
//! at the end a Markdown table of every figure with its ratios, the issue's
//! targets (`TARGET` lines) and, for a thread sweep, each system's scaling
//! (`SCALING` lines).

use std::time::Duration;

use crate::run::{Measurement, RunLimit, Scenario};
use crate::systems::Kind;
use crate::workload::{KeyDistribution, ReadMode, Workload, ZIPFIAN_THETA};

/// One measurement of one system in one scenario.
struct Row {
    scenario: Scenario,
    kind: Kind,
    m: Measurement,
}

/// Collects the measurements and prints them.
pub struct Report {
    kinds: Vec<Kind>,
    regions: usize,
    rows: Vec<Row>,
}

/// The machine's load averages (1, 5 and 15 minutes), from /proc/loadavg.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The UTC time from `date`, if there is one.
fn now_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The workload's name, with the read mode for workloads with reads
/// (`C-latest`).
fn workload_name(s: &Scenario) -> String {
    if s.workload.has_reads() {
        format!("{}-{}", s.workload.name(s.txn_keys), s.read.name())
    } else {
        s.workload.name(s.txn_keys)
    }
}

/// The scenario's name in tables: `C-latest zipf 100B 4t buffered`.
fn scenario_name(s: &Scenario) -> String {
    let dist = match s.distribution {
        KeyDistribution::Uniform => "uniform",
        KeyDistribution::Zipfian => "zipf",
    };
    let durability = if s.durable { "sync" } else { "buffered" };
    format!(
        "{} {dist} {}B {}t {durability}",
        workload_name(s),
        s.value_len,
        s.threads
    )
}

/// The scenario's name without its thread count, for the scaling lines.
fn sweep_name(s: &Scenario) -> String {
    let dist = match s.distribution {
        KeyDistribution::Uniform => "uniform",
        KeyDistribution::Zipfian => "zipf",
    };
    let durability = if s.durable { "sync" } else { "buffered" };
    format!("{} {dist} {}B {durability}", workload_name(s), s.value_len)
}

impl Report {
    /// A report over `kinds`.
    pub fn new(kinds: &[Kind], regions: usize) -> Self {
        Report {
            kinds: kinds.to_vec(),
            regions,
            rows: Vec::new(),
        }
    }

    /// The machine, the run's limits, what each system guarantees, what each
    /// of the run's read modes (`reads`) means on each system, and whether
    /// the stores were flushed after the load.
    pub fn print_header(
        &self,
        records: u64,
        limit: RunLimit,
        warmup: Duration,
        rounds: usize,
        reads: &[ReadMode],
        flushed: bool,
    ) {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        println!("percolate-bench at {}", now_utc());
        println!(
            "machine: {cores} cores; load average at start: {}",
            load_average()
        );
        let limit = match limit {
            RunLimit::Time(d) => format!("{:.1} s", d.as_secs_f64()),
            RunLimit::Ops(n) => format!("{n} ops"),
        };
        println!(
            "{records} records per system; each measurement: {:.1} s warm-up, then {limit}; \
             {rounds} round(s) per system and scenario in alternating order, the median \
             (by ops/s) reported",
            warmup.as_secs_f64()
        );
        println!("systems (each in its own temporary directory):");
        for kind in &self.kinds {
            println!("  {:<17} {}", kind.name(), kind.guarantee(self.regions));
        }
        println!(
            "durability: `buffered` = log written to the OS at commit, not synced (survives a \
             process crash); `sync` = log synced before commit returns (RocksDB sync=true, \
             fjall PersistMode::SyncData, percolate Durability::Sync with group commit)"
        );
        if !reads.is_empty() {
            println!(
                "reads (`--read`): the single-record reads of A, B, C and F (F's \
                 read-modify-writes are transactions in every mode); the scenario's name \
                 shows the mode (C-latest, C-snapshot, C-txn):"
            );
            for &mode in reads {
                println!("  {:<8} = {}:", mode.name(), mode.describe());
                for kind in &self.kinds {
                    println!("    {:<17} {}", kind.name(), kind.read_semantics(mode));
                }
            }
        }
        if flushed {
            println!(
                "after the load: store flushed and compactions waited for, in every system, \
                 before any measurement:"
            );
            for kind in &self.kinds {
                println!("  {:<17} {}", kind.name(), kind.settle_semantics());
            }
        } else {
            println!(
                "after the load: not flushed (--no-flush): measurements start with the load \
                 in the memtables and its compactions possibly running"
            );
        }
    }

    /// How long each system took to load `records` records of `value_len`
    /// bytes, and to flush and wait for its compactions.
    pub fn print_load(
        &self,
        records: u64,
        value_len: usize,
        durable: bool,
        timings: &[(Duration, Option<Duration>)],
    ) {
        let each: Vec<String> = self
            .kinds
            .iter()
            .zip(timings)
            .map(|(kind, (load, settle))| match settle {
                Some(settle) => format!(
                    "{} {:.2} s + flush {:.2} s",
                    kind.name(),
                    load.as_secs_f64(),
                    settle.as_secs_f64()
                ),
                None => format!("{} {:.2} s", kind.name(), load.as_secs_f64()),
            })
            .collect();
        println!();
        println!(
            "loaded {records} records x {value_len} B ({}): {}",
            if durable { "sync" } else { "buffered" },
            each.join(", ")
        );
    }

    /// The header of one scenario.
    pub fn print_scenario(&self, s: &Scenario, records: u64) {
        let dist = match s.distribution {
            KeyDistribution::Uniform => "uniform".to_string(),
            KeyDistribution::Zipfian => format!("scrambled zipfian θ={ZIPFIAN_THETA}"),
        };
        let read = if s.workload.has_reads() {
            format!(" (reads: {}, {})", s.read.name(), s.read.describe())
        } else {
            String::new()
        };
        println!();
        println!(
            "== {}{read}, {dist}, {records} records x {} B, {} threads, {} (load average {})",
            s.workload.describe(s.txn_keys),
            s.value_len,
            s.threads,
            if s.durable { "sync" } else { "buffered" },
            load_average()
        );
        println!(
            "  {:<17} {:>10} {:>9} {:>9} {:>9} {:>8} {:>6} {:>8} {:>8} {:>10}",
            "system",
            "ops/s",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "retries",
            "aborts",
            "/txndb",
            "/raw",
            "CPU µs/op"
        );
    }

    fn ratio(&self, s: &Scenario, kind: Kind, m: &Measurement) -> String {
        self.rows
            .iter()
            .find(|r| r.scenario == *s && r.kind == kind)
            .map(|r| format!("{:.2}x", m.ops_per_sec() / r.m.ops_per_sec()))
            .unwrap_or_else(|| "-".into())
    }

    /// Prints, for each system but TransactionDB, its throughput over
    /// TransactionDB's round by round (the two ran one after the other in
    /// each round), as the median and the range over the rounds: on a
    /// host whose speed drifts between rounds, a ratio of neighbours moves
    /// less than the ratio of the two medians in the table, and the range
    /// shows how far one run can be from the next. Nothing without
    /// TransactionDB or with a single round.
    pub fn print_round_ratios(&self, by_round: &[(Kind, Vec<f64>)]) {
        let Some((_, txndb)) = by_round.iter().find(|(kind, _)| *kind == Kind::Txndb) else {
            return;
        };
        if txndb.len() < 2 {
            return;
        }
        for (kind, ops) in by_round.iter().filter(|(kind, _)| *kind != Kind::Txndb) {
            let mut ratios: Vec<f64> = ops.iter().zip(txndb).map(|(a, b)| a / b).collect();
            ratios.sort_by(f64::total_cmp);
            let (Some(low), Some(high)) = (ratios.first(), ratios.last()) else {
                continue;
            };
            println!(
                "  {:<17} /txndb round by round: median {:.2}x, range {:.2}x-{:.2}x over {} rounds",
                kind.name(),
                ratios[ratios.len() / 2],
                low,
                high,
                ratios.len(),
            );
        }
    }

    /// Records a measurement and prints its line.
    pub fn add(&mut self, s: &Scenario, kind: Kind, m: Measurement) {
        let protocols = m
            .protocols
            .map(|[one, asynchronous, two]| {
                format!("  (commits: 1pc {one}, async {asynchronous}, 2pc {two})")
            })
            .unwrap_or_default();
        let per_op = |n: u64| n as f64 / m.cpu_ops.max(1) as f64;
        let counters = m
            .counters
            .map(|c| {
                format!(
                    "\n  {:<17} per op: {:.2} commands, {:.2} oracle calls, {:.3} latch waits, \
                     {:.4} conflicts, {:.4} retries, {:.4} locks resolved, {:.4} lock waits \
                     (mean {:.0} µs)",
                    "",
                    per_op(c.commands),
                    per_op(c.oracle_calls),
                    per_op(c.latch_waits),
                    per_op(c.conflicts),
                    per_op(c.retries),
                    per_op(c.resolved),
                    per_op(c.lock_waits),
                    c.lock_wait_us as f64 / c.lock_waits.max(1) as f64,
                )
            })
            .unwrap_or_default();
        println!(
            "  {:<17} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>6} {:>8} {:>8} {:>10.1}{protocols}{counters}",
            kind.name(),
            m.ops_per_sec(),
            m.micros(0.5),
            m.micros(0.99),
            m.micros(0.999),
            m.retries,
            m.aborts,
            self.ratio(s, Kind::Txndb, &m),
            self.ratio(s, Kind::Raw, &m),
            m.cpu_micros_per_op(),
        );
        self.rows.push(Row {
            scenario: *s,
            kind,
            m,
        });
    }

    fn find(&self, kind: Kind, pick: impl Fn(&Scenario) -> bool) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.kind == kind && pick(&r.scenario))
    }

    /// The distinct scenarios `pick` chooses, in the order they ran.
    fn scenarios(&self, pick: impl Fn(&Scenario) -> bool) -> Vec<Scenario> {
        let mut found: Vec<Scenario> = Vec::new();
        for r in &self.rows {
            if pick(&r.scenario) && !found.contains(&r.scenario) {
                found.push(r.scenario);
            }
        }
        found
    }

    /// The Markdown table of every measurement, then the targets.
    pub fn print_summary(&self) {
        println!();
        println!(
            "## All measurements (load average at end: {})",
            load_average()
        );
        println!();
        println!(
            "| scenario | system | ops/s | p50 µs | p99 µs | p99.9 µs | retries | aborts | vs TransactionDB | vs raw RocksDB | CPU µs/op |"
        );
        println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        for r in &self.rows {
            println!(
                "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {:.1} |",
                scenario_name(&r.scenario),
                r.kind.name(),
                r.m.ops_per_sec(),
                r.m.micros(0.5),
                r.m.micros(0.99),
                r.m.micros(0.999),
                r.m.retries,
                r.m.aborts,
                self.ratio(&r.scenario, Kind::Txndb, &r.m),
                self.ratio(&r.scenario, Kind::Raw, &r.m),
                r.m.cpu_micros_per_op(),
            );
        }
        self.print_targets();
        self.print_scaling();
    }

    /// For every scenario measured at several thread counts, each system's
    /// ops/s at the most threads over its ops/s at the fewest (1 in a sweep
    /// that includes it).
    fn print_scaling(&self) {
        let mut sweeps: Vec<(String, Vec<usize>)> = Vec::new();
        for r in &self.rows {
            let name = sweep_name(&r.scenario);
            match sweeps.iter_mut().find(|(n, _)| *n == name) {
                Some((_, threads)) => {
                    if !threads.contains(&r.scenario.threads) {
                        threads.push(r.scenario.threads);
                    }
                }
                None => sweeps.push((name, vec![r.scenario.threads])),
            }
        }
        for (name, mut threads) in sweeps {
            if threads.len() < 2 {
                continue;
            }
            threads.sort_unstable();
            let (fewest, most) = (threads[0], threads[threads.len() - 1]);
            for &kind in &self.kinds {
                let at = |t: usize| {
                    self.find(kind, |s| s.threads == t && sweep_name(s) == name)
                        .map(|r| r.m.ops_per_sec())
                };
                let (Some(low), Some(high)) = (at(fewest), at(most)) else {
                    continue;
                };
                let each: Vec<String> = threads
                    .iter()
                    .filter_map(|&t| at(t).map(|ops| format!("{t}t {ops:.0}")))
                    .collect();
                println!(
                    "SCALING [{name}] {}: {:.2}x at {most}t / {fewest}t ({} ops/s)",
                    kind.name(),
                    high / low,
                    each.join(", ")
                );
            }
        }
    }

    /// A `TARGET` line for every scenario `pick` chooses that both `ours`
    /// and `base` ran (one per read mode and thread count measured).
    fn throughput_target(
        &self,
        what: &str,
        ours: Kind,
        base: Kind,
        goal: f64,
        pick: impl Fn(&Scenario) -> bool + Copy,
    ) {
        for scenario in self.scenarios(pick) {
            let (Some(a), Some(b)) = (
                self.find(ours, |s| *s == scenario),
                self.find(base, |s| *s == scenario),
            ) else {
                continue;
            };
            let ratio = a.m.ops_per_sec() / b.m.ops_per_sec();
            let verdict = if ratio >= goal { "met" } else { "NOT met" };
            println!(
                "TARGET {what} [{}]: {ratio:.2}x ({:.0} vs {:.0} ops/s; goal >= {goal}x: {verdict})",
                scenario_name(&a.scenario),
                a.m.ops_per_sec(),
                b.m.ops_per_sec()
            );
        }
    }

    fn print_targets(&self) {
        println!();
        let ycsb_a = |s: &Scenario| {
            s.workload == Workload::A
                && s.distribution == KeyDistribution::Zipfian
                && s.value_len <= 255
                && !s.durable
        };
        let ycsb_f = |s: &Scenario| {
            s.workload == Workload::F
                && s.distribution == KeyDistribution::Zipfian
                && s.value_len <= 255
                && !s.durable
        };
        let update = |s: &Scenario| s.workload == Workload::Update && !s.durable;
        let durable = |s: &Scenario| s.durable && s.threads == 8;
        // A's updates are blind writes; F's are read-modify-writes (reads
        // with get_for_update in TransactionDB): both, against the same goal.
        self.throughput_target(
            "1PC / TransactionDB, YCSB-A zipfian small values",
            Kind::OnePc,
            Kind::Txndb,
            1.0,
            ycsb_a,
        );
        self.throughput_target(
            "1PC / TransactionDB, YCSB-F zipfian small values (read-modify-write updates)",
            Kind::OnePc,
            Kind::Txndb,
            1.0,
            ycsb_f,
        );
        self.throughput_target(
            "1PC / fjall, YCSB-A zipfian small values",
            Kind::OnePc,
            Kind::Fjall,
            1.2,
            ycsb_a,
        );
        self.throughput_target(
            "1PC / raw WriteBatch, single-key updates",
            Kind::OnePc,
            Kind::Raw,
            0.7,
            update,
        );
        self.throughput_target(
            "durable 1PC / TransactionDB, 8 threads",
            Kind::OnePc,
            Kind::Txndb,
            1.0,
            durable,
        );
        for r in self
            .rows
            .iter()
            .filter(|r| r.kind == Kind::Async && r.scenario.txn_keys > 1)
            .filter(|r| {
                matches!(
                    r.scenario.workload,
                    Workload::Transfer | Workload::MultiUpdate
                )
            })
        {
            let Some(two) = self.find(Kind::TwoPc, |s| *s == r.scenario) else {
                continue;
            };
            let (p50, mean) = (
                r.m.micros(0.5) / two.m.micros(0.5),
                r.m.latency.mean() / two.m.latency.mean(),
            );
            let verdict = if p50 <= 0.6 { "met" } else { "NOT met" };
            println!(
                "TARGET async commit / 2PC latency, {}-key {} across {} regions [{}]: p50 {p50:.2}x ({:.1} vs {:.1} µs), mean {mean:.2}x; goal <= 0.6x: {verdict}",
                r.scenario.txn_keys,
                if r.scenario.workload == Workload::Transfer {
                    "transfers (reads included)"
                } else {
                    "blind updates"
                },
                self.regions,
                scenario_name(&r.scenario),
                r.m.micros(0.5),
                two.m.micros(0.5),
            );
        }
    }
}
