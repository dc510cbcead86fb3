//! What the runner prints: the machine and its load, what each system
//! guarantees, a line per measurement as it finishes, and at the end a
//! Markdown table of every figure with its ratios and the targets.

use std::time::Duration;

use crate::run::{Measurement, RunLimit, Scenario};
use crate::systems::Kind;
use crate::workload::{KeyDistribution, Workload, ZIPFIAN_THETA};

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

fn scenario_name(s: &Scenario) -> String {
    let dist = match s.distribution {
        KeyDistribution::Uniform => "uniform",
        KeyDistribution::Zipfian => "zipf",
    };
    let durability = if s.durable { "sync" } else { "buffered" };
    format!(
        "{} {dist} {}B {}t {durability}",
        s.workload.name(s.txn_keys),
        s.value_len,
        s.threads
    )
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

    /// The machine, the run's limits and what each system guarantees.
    pub fn print_header(&self, records: u64, limit: RunLimit, warmup: Duration, rounds: usize) {
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
    }

    /// The header of one scenario.
    pub fn print_scenario(&self, s: &Scenario, records: u64) {
        let dist = match s.distribution {
            KeyDistribution::Uniform => "uniform".to_string(),
            KeyDistribution::Zipfian => format!("scrambled zipfian θ={ZIPFIAN_THETA}"),
        };
        println!();
        println!(
            "== {}, {dist}, {records} records x {} B, {} threads, {} (load average {})",
            s.workload.describe(s.txn_keys),
            s.value_len,
            s.threads,
            if s.durable { "sync" } else { "buffered" },
            load_average()
        );
        println!(
            "  {:<17} {:>10} {:>9} {:>9} {:>9} {:>8} {:>6} {:>8} {:>8}",
            "system",
            "ops/s",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "retries",
            "aborts",
            "/txndb",
            "/raw"
        );
    }

    fn ratio(&self, s: &Scenario, kind: Kind, m: &Measurement) -> String {
        self.rows
            .iter()
            .find(|r| r.scenario == *s && r.kind == kind)
            .map(|r| format!("{:.2}x", m.ops_per_sec() / r.m.ops_per_sec()))
            .unwrap_or_else(|| "-".into())
    }

    /// Records a measurement and prints its line.
    pub fn add(&mut self, s: &Scenario, kind: Kind, m: Measurement) {
        let protocols = m
            .protocols
            .map(|[one, asynchronous, two]| {
                format!("  (commits: 1pc {one}, async {asynchronous}, 2pc {two})")
            })
            .unwrap_or_default();
        println!(
            "  {:<17} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>6} {:>8} {:>8} {:>10.1}{protocols}",
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
    }

    fn throughput_target(
        &self,
        what: &str,
        ours: Kind,
        base: Kind,
        goal: f64,
        pick: impl Fn(&Scenario) -> bool + Copy,
    ) {
        if let (Some(a), Some(b)) = (self.find(ours, pick), self.find(base, pick)) {
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
        let update = |s: &Scenario| s.workload == Workload::Update && !s.durable;
        let durable = |s: &Scenario| s.durable && s.threads == 8;
        self.throughput_target(
            "1PC / TransactionDB, YCSB-A zipfian small values",
            Kind::OnePc,
            Kind::Txndb,
            1.0,
            ycsb_a,
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
