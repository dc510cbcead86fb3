//! The simulator's seeds: a bounded run for CI, the replay of one seed
//! from the environment, and the proof that a seed replays byte for byte.
//!
//! * `PERCOLATE_SIM_SEEDS=<n>`: how many seeds `bounded_seeds_pass` runs
//!   (default 200: seconds in a release build, well under a minute in a
//!   debug one); `PERCOLATE_SIM_FIRST_SEED`
//!   where they start (default 0).
//! * `PERCOLATE_SIM_SEED=<seed>` (and `PERCOLATE_SIM_CONFIG=<config>`):
//!   `replay` runs that seed, prints its trace and fails if it fails.

use percolate_sim::{SimConfig, run_seed, run_seed_traced, shrink};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[test]
fn a_seed_replays_byte_for_byte() {
    let config = SimConfig::default();
    for seed in [3, 17] {
        let first = run_seed_traced(seed, config);
        let again = run_seed_traced(seed, config);
        let (a, b) = (first.trace.expect("traced"), again.trace.expect("traced"));
        assert!(a.len() > 50, "a real schedule: {} lines", a.len());
        assert_eq!(a, b, "seed {seed} replayed differently");
        assert_eq!(first.violations, again.violations);
    }
    let other = run_seed_traced(4, config).trace.expect("traced");
    assert_ne!(run_seed_traced(3, config).trace.expect("traced"), other);
}

#[test]
fn bounded_seeds_pass() {
    let count = env_u64("PERCOLATE_SIM_SEEDS", 200);
    let first = env_u64("PERCOLATE_SIM_FIRST_SEED", 0);
    let config = SimConfig::default();
    let (mut txns, mut reads) = (0, 0);
    for seed in first..first + count {
        let outcome = run_seed(seed, config);
        txns += outcome.txns;
        reads += outcome.reads;
        if !outcome.passed() {
            let shrunk = shrink(seed, config, 200);
            let trace = shrunk.trace.clone().unwrap_or_default().join("\n");
            panic!(
                "seed {seed} failed:\n  {}\nshrunk to {}:\n  {}\n{trace}\nreplay: {}",
                outcome.violations.join("\n  "),
                shrunk.config,
                shrunk.violations.join("\n  "),
                shrunk.replay_command()
            );
        }
    }
    assert!(
        txns > count as usize,
        "{txns} transactions in {count} seeds"
    );
    assert!(reads > count as usize, "{reads} reads in {count} seeds");
}

#[test]
fn replay() {
    let Some(request) = percolate_sim::replay_from_env() else {
        return;
    };
    let (seed, config) = request.expect("PERCOLATE_SIM_SEED / PERCOLATE_SIM_CONFIG");
    let outcome = run_seed_traced(seed, config);
    println!("{}", outcome.trace.clone().unwrap_or_default().join("\n"));
    assert!(
        outcome.passed(),
        "seed {seed} ({config}) failed:\n  {}",
        outcome.violations.join("\n  ")
    );
}
