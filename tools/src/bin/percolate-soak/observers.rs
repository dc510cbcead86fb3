//! The observer writer: the process `tools/tests/observers_crash.rs` kills.
//!
//! It opens the directory, registers the indexer pipeline of
//! `examples/indexer` (with its audit: a version of a document indexed
//! twice leaves a `dup/` key), starts worker threads, prints `READY`, and
//! then loads, updates and deletes random documents as fast as it can
//! while the workers index them, until it is killed (or has written
//! `--writes` documents, then waits for the workers to finish and exits).

use std::io::Write;
use std::path::Path;

use percolate::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[path = "../../../../examples/indexer/pipeline.rs"]
pub mod pipeline;

/// The words documents are made of: few, so that terms are shared and the
/// indexer's transactions conflict on their counts.
const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
];

/// What the observer writer does.
#[derive(Clone, Copy, Debug)]
pub struct ObserverWriterArgs {
    /// Seeds the documents.
    pub seed: u64,
    /// Document ids are 0 to this, excluded.
    pub documents: u32,
    /// Worker threads.
    pub workers: usize,
    /// Exit after this many document writes (default: run until killed).
    pub writes: Option<u64>,
}

/// Runs the observer writer on `dir`.
pub fn run(dir: &Path, args: &ObserverWriterArgs) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::open(dir)?;
    pipeline::register(&client, true)?;
    let mut workers = client.workers();
    workers.start(args.workers)?;
    ready()?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut written = 0;
    while args.writes.is_none_or(|n| written < n) {
        let id = format!("{:03}", rng.random_range(0..args.documents.max(1)));
        let text = (!rng.random_ratio(1, 5)).then(|| {
            let words: Vec<&str> = (0..rng.random_range(1..10))
                .map(|_| WORDS[rng.random_range(0..WORDS.len())])
                .collect();
            words.join(" ")
        });
        client.with_retry(|txn| pipeline::load(txn, &id, text.as_deref()))?;
        written += 1;
    }
    workers.run_until_idle()?;
    workers.stop()?;
    Ok(())
}

fn ready() -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY")?;
    out.flush()
}
