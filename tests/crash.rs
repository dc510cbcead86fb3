//! Process crashes: a writer process (`percolate crash-writer`, the hidden
//! command of the CLI binary) runs transactions on a RocksDB directory and
//! is killed with SIGKILL at random moments; after each kill the directory
//! is reopened and checked (see `src/bin/percolate/crash.rs`, shared with
//! `percolate soak`, for the writer's transactions and every check):
//!
//! * every transaction the writer reported committed is visible in full,
//!   at the commit_ts it reported;
//! * no transaction is visible in part (the reads that check resolve the
//!   dead writer's locks: roll forward or back), and no lock is left;
//! * counters grew by exactly the visible increments; the bank's total
//!   holds;
//! * the oracle never hands out a timestamp at or below one handed out
//!   before the crash, by the writer or by the checker before it.
//!
//! What `kill -9` tests is the death of the process, not of the machine:
//! the client's default durability is a buffered WAL (written to the page
//! cache, not fsynced), which the kernel writes out after the process dies
//! but which a power loss could lose.
//!
//! The kill points are random; the seed is printed, and
//! `PERCOLATE_CRASH_SEED=<seed>` replays the same choices (the moments
//! themselves still depend on the machine's speed).

#[allow(dead_code)]
#[path = "../src/bin/percolate/crash.rs"]
mod crash;

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crash::{Kill, RoundOutcome, State};

/// Kills per run, at most.
const KILLS: usize = 10;
/// No new kill round starts after this long (a slow, loaded machine still
/// finishes in about this time plus one round).
const BUDGET: Duration = Duration::from_secs(60);
/// Writer threads.
const THREADS: usize = 3;

fn seed() -> u64 {
    let seed = std::env::var("PERCOLATE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("crash test seed: {seed} (PERCOLATE_CRASH_SEED={seed} to replay)");
    seed
}

/// A kill point: one time in four at a random moment of the writer's start
/// (RocksDB's recovery, the oracle's start, the bank's creation), otherwise
/// up to a second after it is ready.
fn kill_point(rng: &mut StdRng) -> Kill {
    if rng.random_ratio(1, 4) {
        Kill::AfterSpawn(Duration::from_millis(rng.random_range(0..400)))
    } else {
        Kill::AfterReady(Duration::from_millis(rng.random_range(0..1_000)))
    }
}

fn run(exe: &Path, dir: &Path, state: &mut State, rng: &mut StdRng, kill: Kill) -> RoundOutcome {
    let outcome = crash::run_round(exe, dir, state, THREADS, rng.random(), kill)
        .unwrap_or_else(|e| panic!("round {}: {e}", state.next_round));
    eprintln!(
        "round {}: {kill:?}, ran {} ms{}, committed {} (1PC {}, async {}, 2PC {}; pessimistic {}), gave up {}, visible {}",
        outcome.round,
        outcome.ran.as_millis(),
        if outcome.ready {
            ""
        } else {
            " (killed before READY)"
        },
        outcome.committed,
        outcome.protocols[0],
        outcome.protocols[1],
        outcome.protocols[2],
        outcome.pessimistic,
        outcome.failed,
        outcome.visible,
    );
    for failure in &outcome.failures {
        eprintln!("  {failure}");
    }
    assert!(
        outcome.anomalies.is_empty(),
        "round {} ({kill:?}) broke invariants:\n{}",
        outcome.round,
        outcome.anomalies.join("\n")
    );
    assert!(
        outcome.visible >= outcome.committed,
        "more transactions reported committed than visible"
    );
    outcome
}

#[test]
fn kill_9_at_random_moments_loses_no_commit_and_shows_no_partial_transaction() {
    watchdog(300);
    let exe = Path::new(env!("CARGO_BIN_EXE_percolate"));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed());
    let mut state = State::load(dir.path()).unwrap();
    let started = Instant::now();
    let mut committed = 0;
    let mut kills = 0;
    while kills < KILLS && (kills < 2 || started.elapsed() < BUDGET) {
        let kill = kill_point(&mut rng);
        committed += run(exe, dir.path(), &mut state, &mut rng, kill).committed;
        kills += 1;
    }
    // A last writer that is not killed: its transactions all commit, and
    // the directory it leaves after all those crashes checks out too.
    let last = run(
        exe,
        dir.path(),
        &mut state,
        &mut rng,
        Kill::Never { transactions: 40 },
    );
    assert!(last.committed + last.failed == 40, "{last:?}");
    assert!(last.committed > 0);
    assert!(
        last.pessimistic > 0,
        "pessimistic transactions are a third of the mix: {last:?}"
    );
    committed += last.committed;
    eprintln!(
        "{kills} kills, {committed} transactions committed, in {:?}",
        started.elapsed()
    );
    assert!(state.bank_open, "the bank was never created");
}

/// Aborts the test process if the test is still running after `secs`: a
/// deadlock fails the run instead of hanging it.
fn watchdog(secs: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(secs));
        eprintln!("still running after {secs} s: aborting (a deadlock?)");
        std::process::abort();
    });
}
