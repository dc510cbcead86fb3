//! `percolate-bench`: YCSB-style workloads run side by side on raw RocksDB,
//! RocksDB's TransactionDB, fjall and percolate (1PC, 2PC, async commit),
//! in one process on one machine, each system in its own temporary
//! directory. Prints ops/s, latency percentiles, retries and aborts, and
//! ratios against TransactionDB and against raw RocksDB.
//!
//! ```text
//! cargo build --release --bin percolate-bench
//! target/release/percolate-bench --workload a --distribution zipfian --value-size 100
//! target/release/percolate-bench --suite issue          # every scenario of docs/BENCHMARKS.md
//! target/release/percolate-bench --workload transfer --systems two-pc,async --threads 1
//! ```
//!
//! Every system of a scenario group is opened and loaded first; then each
//! scenario runs on each system in turn, so all see the same machine
//! state. See docs/BENCHMARKS.md for what the figures mean.

mod report;
mod run;
mod systems;
mod workload;

use std::time::Duration;

use clap::Parser;

use crate::report::Report;
use crate::run::{Measurement, RunLimit, Scenario};
use crate::systems::{BoxError, Kind, Setup};
use crate::workload::{KeyDistribution, Workload};

/// YCSB-style workloads on percolate and its peers, side by side.
#[derive(Debug, Parser)]
#[command(name = "percolate-bench")]
struct Args {
    /// Run a preset list of scenarios instead of `--workload` x
    /// `--value-size`: `issue` is the list docs/BENCHMARKS.md reports.
    #[arg(long, value_enum)]
    suite: Option<Suite>,
    /// Workloads to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "a")]
    workload: Vec<Workload>,
    /// How records are chosen.
    #[arg(long, value_enum, default_value_t = KeyDistribution::Zipfian)]
    distribution: KeyDistribution,
    /// Records loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Value sizes in bytes, comma-separated (percolate inlines values of
    /// at most 255 bytes into the commit record).
    #[arg(long, value_delimiter = ',', default_value = "100")]
    value_size: Vec<usize>,
    /// Client threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Measured seconds per system and scenario.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Stop after this many operations (over all threads) instead of after
    /// `--seconds`.
    #[arg(long)]
    ops: Option<u64>,
    /// Unmeasured warm-up seconds before each measurement.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Sync the write-ahead log before every commit returns (RocksDB
    /// sync=true, fjall PersistMode::SyncData, percolate Durability::Sync).
    #[arg(long)]
    durable: bool,
    /// Systems to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "raw,txndb,fjall,one-pc,two-pc,async"
    )]
    systems: Vec<Kind>,
    /// Regions of percolate's 2PC and async-commit systems.
    #[arg(long, default_value_t = 4)]
    regions: usize,
    /// Keys each transfer reads and writes.
    #[arg(long, default_value_t = 4)]
    txn_keys: usize,
    /// Longest scan of workload E (each scan reads 1 to this many records).
    #[arg(long, default_value_t = 100)]
    max_scan: usize,
    /// Measurements of each system per scenario, in alternating order; the
    /// one with the median ops/s is reported.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

/// The measurement with the median throughput (the upper one of an even
/// count).
fn median(mut measured: Vec<Measurement>) -> Measurement {
    measured.sort_by(|a, b| a.ops_per_sec().total_cmp(&b.ops_per_sec()));
    let middle = measured.len() / 2;
    measured.swap_remove(middle)
}

/// Preset scenario lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Suite {
    /// The scenarios behind issue 6's targets and docs/BENCHMARKS.md.
    Issue,
}

fn scenarios(args: &Args) -> Vec<Scenario> {
    let base = Scenario {
        workload: Workload::A,
        distribution: args.distribution,
        value_len: 100,
        threads: args.threads,
        durable: args.durable,
        txn_keys: args.txn_keys,
        max_scan: args.max_scan,
    };
    match args.suite {
        None => args
            .value_size
            .iter()
            .flat_map(|&value_len| {
                args.workload.iter().map(move |&workload| Scenario {
                    workload,
                    value_len,
                    ..base
                })
            })
            .collect(),
        Some(Suite::Issue) => {
            let zipf = |workload, value_len| Scenario {
                workload,
                value_len,
                distribution: KeyDistribution::Zipfian,
                threads: 4,
                durable: false,
                ..base
            };
            let uniform = |workload, threads, durable| Scenario {
                workload,
                threads,
                durable,
                distribution: KeyDistribution::Uniform,
                value_len: 100,
                ..base
            };
            vec![
                zipf(Workload::A, 100),
                zipf(Workload::B, 100),
                zipf(Workload::C, 100),
                zipf(Workload::E, 100),
                zipf(Workload::F, 100),
                uniform(Workload::Update, 4, false),
                uniform(Workload::Transfer, 4, false),
                uniform(Workload::MultiUpdate, 1, false),
                zipf(Workload::A, 1024),
                uniform(Workload::Update, 8, true),
            ]
        }
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.records == 0 || args.threads == 0 {
        return Err("need at least 1 record and 1 thread".into());
    }
    let limit = match args.ops {
        Some(ops) => RunLimit::Ops(ops),
        None => RunLimit::Time(Duration::from_secs_f64(args.seconds)),
    };
    let warmup = Duration::from_secs_f64(args.warmup);
    let scenarios = scenarios(&args);
    let mut report = Report::new(&args.systems, args.regions);
    report.print_header(args.records, limit, warmup, args.rounds.max(1));

    // Scenarios sharing a value size and durability share loaded systems.
    let mut groups: Vec<(usize, bool, Vec<Scenario>)> = Vec::new();
    for s in scenarios {
        match groups
            .iter_mut()
            .find(|(v, d, _)| *v == s.value_len && *d == s.durable)
        {
            Some((_, _, list)) => list.push(s),
            None => groups.push((s.value_len, s.durable, vec![s])),
        }
    }
    for (value_len, durable, list) in groups {
        let setup = Setup {
            durable,
            regions: args.regions,
            records: args.records,
        };
        let loaded = run::open_and_load(&args.systems, setup, value_len, args.threads)?;
        for scenario in &list {
            report.print_scenario(scenario, args.records);
            let mut rounds: Vec<Vec<Measurement>> =
                loaded.systems.iter().map(|_| Vec::new()).collect();
            for round in 0..args.rounds.max(1) {
                // Alternate the order, so that no system always runs first.
                let mut order: Vec<usize> = (0..loaded.systems.len()).collect();
                if round % 2 == 1 {
                    order.reverse();
                }
                for i in order {
                    let (kind, system) = &loaded.systems[i];
                    let label = format!("{} {}/{}", kind.name(), round + 1, args.rounds.max(1));
                    rounds[i].push(run::measure(
                        system.as_ref(),
                        scenario,
                        args.records,
                        limit,
                        warmup,
                        &label,
                    )?);
                }
            }
            for ((kind, _), measured) in loaded.systems.iter().zip(rounds) {
                report.add(scenario, *kind, median(measured));
            }
        }
    }
    report.print_summary();
    Ok(())
}
