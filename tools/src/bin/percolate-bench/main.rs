//! `percolate-bench`: YCSB-style workloads run side by side on raw RocksDB,
//! RocksDB's TransactionDB, fjall and percolate (1PC, 2PC, async commit),
//! in one process on one machine, each system in its own temporary
//! directory. Prints ops/s, latency percentiles, retries and aborts, and
//! ratios against TransactionDB and against raw RocksDB.
//!
//! ```text
//! cargo build --release -p percolate-tools --bin percolate-bench
//! target/release/percolate-bench --workload a --distribution zipfian --value-size 100
//! target/release/percolate-bench --suite issue          # every scenario of docs/BENCHMARKS.md
//! target/release/percolate-bench --workload transfer --systems two-pc,async --threads 1
//! target/release/percolate-bench --workload c --read latest,snapshot,txn
//! target/release/percolate-bench --workload get --threads 1,4,16   # point reads, thread sweep
//! target/release/percolate-bench --workload a --no-flush
//! ```
//!
//! * `--read latest|snapshot|txn` (comma-separated for several; default
//!   `snapshot`): how the single-record reads of workloads A, B, C and F
//!   are made. `latest`: a plain read of the latest data (raw and
//!   TransactionDB `get_pinned`, fjall's keyspace `get`, percolate
//!   `Client::get_latest`); `snapshot`: a read at an explicit snapshot
//!   without a transaction (raw: the same plain get, the runner takes no
//!   snapshot for it; TransactionDB `snapshot()` and a get at it; fjall `read_tx().get`;
//!   percolate `Client::view(|txn| txn.get)`); `txn`: a read inside a full
//!   transaction (raw: the same plain get; TransactionDB begin, get,
//!   commit; fjall `write_tx`, get, commit; percolate
//!   `with_retry_info(|txn| txn.get)`). F's
//!   read-modify-writes are transactions in every mode. The scenario's name
//!   shows the mode: `C-latest zipf 100B 4t buffered`.
//! * `--workload get`: the point-read workload, `c` with `--read latest`
//!   whatever `--read` says (shown as `C-latest`).
//! * `--threads 1,4,16`: every scenario at each thread count; after the
//!   table, a `SCALING` line per system and scenario (ops/s at the most
//!   threads / at the fewest).
//! * `--no-flush`: by default every system, once loaded, flushes its
//!   memtables and waits for its compactions before anything is measured
//!   (the header says which was done); this skips it.
//!
//! Every system of a scenario group (same value size and durability) is
//! opened, loaded and flushed first; then each scenario runs on each system
//! in turn, so all see the same machine state. See docs/BENCHMARKS.md for
//! what the figures mean.

mod observers;
mod report;
mod run;
mod systems;
mod workload;

use std::time::Duration;

use clap::Parser;

use crate::report::Report;
use crate::run::{Measurement, RunLimit, Scenario};
use crate::systems::{BoxError, Kind, Setup};
use crate::workload::{KeyDistribution, ReadMode, Workload};

/// YCSB-style workloads on percolate and its peers, side by side.
#[derive(Debug, Parser)]
#[command(name = "percolate-bench")]
struct Args {
    /// Run a preset list of scenarios instead of `--workload` x `--read` x
    /// `--value-size` x `--threads`: `issue` is the list docs/BENCHMARKS.md
    /// reports.
    #[arg(long, value_enum)]
    suite: Option<Suite>,
    /// Workloads to run, comma-separated (`get`: point reads, `c` with
    /// `--read latest`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "a")]
    workload: Vec<Workload>,
    /// How the single-record reads of A, B, C and F are made,
    /// comma-separated to run each workload with reads in several modes:
    /// `latest` (a plain read of the latest data), `snapshot` (at an
    /// explicit snapshot, no transaction), `txn` (in a full transaction).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "snapshot")]
    read: Vec<ReadMode>,
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
    /// Client threads, comma-separated for a sweep (every scenario at each
    /// count, then each system's scaling).
    #[arg(long, value_delimiter = ',', default_value = "4")]
    threads: Vec<usize>,
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
    /// Systems to run, comma-separated, in this order. fjall runs last by
    /// default: its background work may outlast its turn (one YCSB-E run
    /// took it 476 µs of CPU per operation), and it should not fall on the
    /// systems compared with TransactionDB.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "raw,txndb,one-pc,two-pc,async,fjall"
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
    /// Measure right after the load, without flushing the memtables and
    /// waiting for compactions first.
    #[arg(long)]
    no_flush: bool,
    /// Run the observer benchmark instead (issue 17: observer throughput
    /// with 1 and 2 workers beside the same work done inline, and the
    /// latency from a commit to its observer's run; see
    /// `observers.rs`).
    #[arg(long)]
    observers: bool,
    /// Distinct documents each system of `--observers` writes.
    #[arg(long, default_value_t = 20_000)]
    observer_docs: u64,
    /// Words in the vocabulary of `--observers`' documents: few make the
    /// per-term counts hot (observer transactions conflict on them), many
    /// keep them apart.
    #[arg(long, default_value_t = 32)]
    observer_words: u64,
    /// Documents per second the loader writes while `--observers` measures
    /// latency (for `--seconds`).
    #[arg(long, default_value_t = 1_000)]
    observer_rate: u64,
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
    /// The scenarios behind issue 6's targets and docs/BENCHMARKS.md: A, B,
    /// C (latest, snapshot and txn reads), E and F, zipfian, 100 B, 4
    /// threads; updates, 4-key transfers (4 threads) and 4-key multi-updates
    /// (1 thread), uniform; A with 1 KiB values; synced updates, 8 threads.
    Issue,
}

fn scenarios(args: &Args) -> Vec<Scenario> {
    let base = Scenario {
        workload: Workload::A,
        read: ReadMode::Snapshot,
        distribution: args.distribution,
        value_len: 100,
        threads: 4,
        durable: args.durable,
        txn_keys: args.txn_keys,
        max_scan: args.max_scan,
    };
    match args.suite {
        None => {
            // value size x workload x read mode x threads, without repeats:
            // a workload without reads runs once whatever `--read` says, and
            // `get` is C with latest reads.
            let mut list: Vec<Scenario> = Vec::new();
            for &value_len in &args.value_size {
                for &workload in &args.workload {
                    let (workload, reads) = match workload {
                        Workload::Get => (Workload::C, vec![ReadMode::Latest]),
                        w if w.has_reads() => (w, args.read.clone()),
                        w => (w, vec![ReadMode::Snapshot]),
                    };
                    for &read in &reads {
                        for &threads in &args.threads {
                            let s = Scenario {
                                workload,
                                read,
                                value_len,
                                threads,
                                ..base
                            };
                            if !list.contains(&s) {
                                list.push(s);
                            }
                        }
                    }
                }
            }
            list
        }
        Some(Suite::Issue) => {
            let zipf = |workload, read, value_len| Scenario {
                workload,
                read,
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
            let snapshot = ReadMode::Snapshot;
            vec![
                zipf(Workload::A, snapshot, 100),
                zipf(Workload::B, snapshot, 100),
                zipf(Workload::C, ReadMode::Latest, 100),
                zipf(Workload::C, snapshot, 100),
                zipf(Workload::C, ReadMode::Txn, 100),
                zipf(Workload::E, snapshot, 100),
                zipf(Workload::F, snapshot, 100),
                uniform(Workload::Update, 4, false),
                uniform(Workload::Transfer, 4, false),
                uniform(Workload::MultiUpdate, 1, false),
                zipf(Workload::A, snapshot, 1024),
                uniform(Workload::Update, 8, true),
            ]
        }
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.observers {
        return observers::run(
            args.observer_docs,
            args.observer_words,
            args.observer_rate,
            args.seconds,
        );
    }
    if args.records == 0 || args.threads.contains(&0) {
        return Err("need at least 1 record and 1 thread".into());
    }
    let limit = match args.ops {
        Some(ops) => RunLimit::Ops(ops),
        None => RunLimit::Time(Duration::from_secs_f64(args.seconds)),
    };
    let warmup = Duration::from_secs_f64(args.warmup);
    let scenarios = scenarios(&args);
    // The read modes of the run's workloads with reads, for the header.
    let reads: Vec<ReadMode> = [ReadMode::Latest, ReadMode::Snapshot, ReadMode::Txn]
        .into_iter()
        .filter(|&mode| {
            scenarios
                .iter()
                .any(|s| s.workload.has_reads() && s.read == mode)
        })
        .collect();
    let flush = !args.no_flush;
    let load_threads = args.threads.iter().copied().max().unwrap_or(4);
    let mut report = Report::new(&args.systems, args.regions);
    report.print_header(
        args.records,
        limit,
        warmup,
        args.rounds.max(1),
        &reads,
        flush,
    );

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
        let loaded = run::open_and_load(&args.systems, setup, value_len, load_threads, flush)?;
        report.print_load(args.records, value_len, durable, &loaded.timings);
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
            let by_round: Vec<(Kind, Vec<f64>)> = loaded
                .systems
                .iter()
                .zip(&rounds)
                .map(|((kind, _), measured)| {
                    (
                        *kind,
                        measured.iter().map(Measurement::ops_per_sec).collect(),
                    )
                })
                .collect();
            for ((kind, _), measured) in loaded.systems.iter().zip(rounds) {
                report.add(scenario, *kind, median(measured));
            }
            report.print_round_ratios(&by_round);
        }
    }
    report.print_summary();
    Ok(())
}
