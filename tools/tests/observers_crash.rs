//! Observers across process crashes: the observer writer
//! (`percolate-soak observer-writer`, a hidden command of the crash
//! harness) loads, updates and deletes documents on a RocksDB directory
//! while its worker threads run the indexer pipeline of
//! `examples/indexer`, and is killed with SIGKILL at a random moment, over
//! and over: in the middle of loader transactions, of observer
//! transactions, between an observer's commit and the deletion of its
//! notifications. Every few kills, and at the end, the directory is
//! reopened, the observers run until nothing is pending, and:
//!
//! * the derived tables (inverted index, counts, top terms) equal a full
//!   recomputation from the documents: no change was missed;
//! * every document's last version was indexed, and no version was
//!   indexed twice (the indexer's audit keys): no observer transaction
//!   committed twice for one change.
//!
//! `PERCOLATE_CRASH_SEED=<seed>` replays the kill points.

#[path = "../../examples/indexer/pipeline.rs"]
mod pipeline;

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use percolate::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Kills per run.
const KILLS: usize = 12;
/// Check after every this many kills (and after the last).
const CHECK_EVERY: usize = 4;

/// Runs one writer and kills it: a quarter of the time during its start
/// (RocksDB's recovery, the workers' first scans of what the last one
/// left), otherwise up to 1.5 s after it said READY. Returns whether it
/// was READY.
fn kill_round(exe: &Path, dir: &Path, rng: &mut StdRng) -> bool {
    let mut child = Command::new(exe)
        .arg("--dir")
        .arg(dir)
        .arg("observer-writer")
        .arg("--seed")
        .arg(rng.random::<u64>().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the observer writer");
    let early = rng.random_ratio(1, 4);
    let delay = Duration::from_millis(rng.random_range(0..if early { 300 } else { 1_500 }));
    let ready = if early {
        std::thread::sleep(delay);
        false
    } else {
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read READY");
        assert_eq!(line.trim(), "READY", "the writer did not start");
        std::thread::sleep(delay);
        true
    };
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the writer exited by itself: {status}");
    ready
}

/// Reopens the directory, lets the observers finish, and checks the
/// derived tables and the audit. Returns (documents, observer runs).
fn check(dir: &Path) -> (usize, u64) {
    let client = Client::open(dir).expect("reopen");
    pipeline::register(&client, true).unwrap();
    client.workers().run_until_idle().expect("observers finish");
    client
        .view(|txn| {
            let docs = pipeline::documents(txn)?;
            let stored = pipeline::stored(txn)?;
            assert_eq!(
                stored,
                pipeline::recompute(&docs),
                "the derived tables differ from a recomputation"
            );
            let (duplicates, behind) = pipeline::audit(txn)?;
            assert!(duplicates.is_empty(), "indexed twice: {duplicates:?}");
            assert!(
                behind.is_empty(),
                "not indexed (id, version, seen): {behind:?}"
            );
            assert_eq!(client.observer_metrics()?.pending, 0);
            Ok((docs.len(), client.observer_metrics()?.runs))
        })
        .unwrap()
}

#[test]
fn observers_survive_kill_9_without_missing_or_repeating_a_change() {
    let exe = Path::new(env!("CARGO_BIN_EXE_percolate-soak"));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(support::seed("observer crash test"));
    let started = Instant::now();
    let mut ready = 0;
    for kill in 1..=KILLS {
        ready += usize::from(kill_round(exe, dir.path(), &mut rng));
        if kill % CHECK_EVERY == 0 {
            let (docs, runs) = check(dir.path());
            eprintln!(
                "after kill {kill}: {docs} documents, derived tables right ({runs} runs to catch up)"
            );
        }
    }
    eprintln!(
        "{KILLS} kills ({ready} after READY) in {:.1?}",
        started.elapsed()
    );
    assert!(ready > 0, "no writer ever got to work");
    // Something was written and indexed.
    let client = Client::open(dir.path()).unwrap();
    let versions = client
        .view(|txn| {
            let mut total = 0u64;
            for pair in txn.scan(b"docver/".to_vec()..b"docver0".to_vec()) {
                total += String::from_utf8_lossy(&pair?.1)
                    .parse::<u64>()
                    .unwrap_or(0);
            }
            Ok(total)
        })
        .unwrap();
    assert!(versions > 0, "no document was ever written");
    eprintln!("{versions} document writes survived");
}
