//! `percolate sim`: runs seeds of the deterministic simulator
//! (`percolate-sim`) on several threads, with a progress bar; prints the
//! seeds per second and every failing seed, the first one shrunk to a
//! short trace. Built only with the `sim` feature of `percolate-tools`
//! (it turns on the `sim` seams of `percolate-txn`, which no other
//! build of the tools carries):
//!
//! ```text
//! cargo run --release -p percolate-tools --features sim --bin percolate -- sim --seeds 100000
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use percolate_sim::{SeedOutcome, SimConfig, run_seed, shrink};

/// The arguments of `percolate sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// How many seeds to run.
    #[arg(long, default_value_t = 10_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Threads running seeds (default: the machine's parallelism).
    #[arg(long)]
    threads: Option<usize>,
    /// The run's size and faults, as a failure prints it
    /// (`clients=4,steps=150,keys=6,faults=death+crash+...`).
    #[arg(long, default_value = "")]
    config: String,
}

/// Runs the seeds; an error when one fails.
pub fn run(args: SimArgs, out: &mut impl Write) -> Result<(), Box<dyn std::error::Error>> {
    let config = SimConfig::parse(&args.config)?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let bar = ProgressBar::new(args.seeds).with_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:40}] {pos}/{len} seeds {per_sec} eta {eta} {msg}",
        )?
        .progress_chars("=> "),
    );
    bar.set_prefix("sim");
    let next = AtomicU64::new(0);
    let failures: Mutex<Vec<SeedOutcome>> = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= args.seeds {
                        return;
                    }
                    let outcome = run_seed(args.first + i, config);
                    if !outcome.passed() {
                        let mut failures = failures.lock();
                        failures.push(outcome);
                        bar.set_message(format!("{} failed", failures.len()));
                    }
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish();
    let elapsed = start.elapsed().as_secs_f64();
    let mut failures = failures.into_inner();
    failures.sort_by_key(|f| f.seed);
    writeln!(
        out,
        "{} seeds ({}..{}) in {elapsed:.1} s on {threads} threads: {:.0} seeds/s, {} failed ({config})",
        args.seeds,
        args.first,
        args.first + args.seeds,
        args.seeds as f64 / elapsed.max(1e-9),
        failures.len()
    )?;
    for failure in &failures {
        writeln!(out, "seed {} failed:", failure.seed)?;
        for violation in &failure.violations {
            writeln!(out, "  {violation}")?;
        }
    }
    let Some(first) = failures.first() else {
        return Ok(());
    };
    let shrunk = shrink(first.seed, first.config, 300);
    writeln!(out, "seed {} shrunk to {}:", shrunk.seed, shrunk.config)?;
    for line in shrunk.trace.iter().flatten() {
        writeln!(out, "{line}")?;
    }
    for violation in &shrunk.violations {
        writeln!(out, "  {violation}")?;
    }
    writeln!(out, "replay: {}", shrunk.replay_command())?;
    Err(format!("{} of {} seeds failed", failures.len(), args.seeds).into())
}
