//! A deterministic simulator for percolate (issue 18).
//!
//! One seed is one schedule: on one thread, with every random choice taken
//! from one seeded generator ([`Rng`]), simulated clients run transactions
//! against the real regions while a seeded scheduler decides, step by
//! step, which client moves next, when time passes, when a snapshot reads,
//! when GC runs, and when faults strike. At the end every client finishes
//! or dies, the locks expire and are resolved, and a checker judges the
//! whole history against snapshot isolation. Nothing in a run depends on
//! the wall clock, threads or hash order, so a seed replays byte for byte:
//! [`run_seed_traced`] prints the schedule, and a failing seed is shrunk
//! ([`shrink`]) to a short trace in the golden-script style.
//!
//! # Real code and modelled code
//!
//! **Real** (percolate's own code, called as a program calls it):
//!
//! * the regions ([`Cluster`](percolate_txn::cluster::Cluster)), each a
//!   real `Storage` with its scheduler, latches and concurrency manager
//!   (`max_ts`, memory locks); every write command goes through
//!   `Storage::write`, which runs it inline on the calling thread (its
//!   latches are always free: one command at a time), and every read
//!   through `Storage::read`;
//! * every command and action: `Prewrite` (optimistic, pessimistic, async
//!   commit, 1PC and their fall-backs), `Commit`, `Unlock`,
//!   `AcquirePessimisticLock`, `PessimisticRollback`, `TxnHeartBeat`,
//!   `CheckTxnStatus`, `CheckSecondaryLocks`, `ResolveLockLite`, `Get`,
//!   `Scan` (both ways), `ScanLock`, GC;
//! * the client's lock resolver (`resolve_locks`: transaction fates, TTL
//!   expiry, pushing min_commit_ts, async-commit resolution from the
//!   secondaries), one round per call through the `sim` feature's seam
//!   `Client::resolve_locks_once`, and the client's GC
//!   ([`Client::gc`](percolate_txn::client::Client::gc): lock resolution
//!   below the safe point, then collection);
//! * the timestamp oracle ([`LocalOracle`](percolate_txn::oracle::LocalOracle))
//!   with its persisted high-water mark in a real file, on a
//!   [`ManualClock`](percolate_txn::oracle::ManualClock); its ticker is
//!   called by the simulation instead of a thread (`sim` feature seam
//!   `LocalOracle::open_manual`/`tick`), and a crash skips its clean close
//!   (`LocalOracle::crash`);
//! * the memory engine ([`MemoryEngine`](percolate_engine::MemoryEngine)),
//!   wrapped by [`SimEngine`] only to record the commit records written
//!   and to run a racing read inside a write.
//!
//! **Modelled** (mirrored from the client, which runs a commit in one call
//! on threads and so cannot be stepped): the client's transaction buffer,
//! the `Committer` (primary, batches, protocol choice, prewrite commands,
//! commit point, secondaries, unlock after a failure), the pessimistic
//! lock requests, the heart beats, and the read loop around the resolver;
//! see the `client` module's documentation for the list, and keep it in
//! step with `txn/src/client/transaction.rs`. Also modelled: the restart
//! (`Client::open`'s sequence over the engine, with the oracle opened
//! above the data's largest timestamp) and the merge of a scan across
//! regions.
//!
//! # Faults
//!
//! * a client dies before any of its steps: with its reads or pessimistic
//!   locks held, before, between and after its prewrite batches, after
//!   the primary's commit, between secondary commits, while unlocking
//!   after a failure, or between rounds of resolving a lock;
//! * the process crashes: every client and every region's memory
//!   (`max_ts`, memory locks) is lost, the oracle keeps only its file; the
//!   world reopens from the engine;
//! * time passes in steps that expire TTLs; some clients' heart beats
//!   stall; the wall clock steps backwards;
//! * a read races a prewrite or commit: it runs inside the engine write,
//!   after the command computed its commit_ts and before its locks land
//!   (the window the memory locks guard);
//! * reads at random timestamps, fresh ones, `u64::MAX`, read-committed,
//!   scans forward and backward with limits; GC at a random safe point
//!   below every live transaction.
//!
//! The mix: 1PC, async commit, 2PC and pessimistic transactions, with
//! batches of one to three keys, over one to four regions, TTLs from 50 ms
//! to 3 s, values short and long (in the default CF).
//!
//! # The checks
//!
//! See the `checker` module: oracle monotonic across crashes; no commit
//! record replaced; atomicity (no transaction half visible); every
//! acknowledged commit there at its commit_ts, no failed one anywhere;
//! every committed insert (kept by a later delete or put of its
//! transaction) found its key without a value; first committer wins (no G0, no lost update); every read exactly the
//! state of one cut of the commit order (no G1a, G1b, G1c, read skew; every
//! acknowledged commit visible at its commit_ts from then on); no lock,
//! in the engine or in memory, after quiescence.
//!
//! # Replay and shrinking
//!
//! A failure prints its seed and configuration; `PERCOLATE_SIM_SEED=<seed>`
//! (and `PERCOLATE_SIM_CONFIG=<config>` as printed) replays it exactly, and
//! [`shrink`] reduces it (fewer clients, steps, keys and fault kinds) to a
//! short trace.
//!
//! # Bug hunt
//!
//! Known-bad changes, each re-introduced in the working tree (never
//! committed) and run through `percolate sim --seeds 3000` (the default
//! configuration, seeds from 0): the seeds needed to reach the first
//! failure, and how many of the 3000 failed.
//!
//! | known-bad change | where | seeds to the first failure | failed of 3000 |
//! |---|---|---|---|
//! | forget the memory lock (async commit and 1PC prewrites put no key in the memory lock table) | `txn/src/commands/prewrite.rs` | 1 (seed 0) | 1709 |
//! | drop the oracle's persisted high-water mark (open as if the file said 0) | `txn/src/oracle.rs` | 1 (seed 0) | 1680 |
//! | async commit and 1PC ignore `max_ts` (min_commit_ts from start_ts alone) | `txn/src/actions/prewrite.rs` | 2 (seed 1) | 1967 |
//! | commit the secondaries before the primary (2PC) | the modelled client, `client.rs` | 16 (seed 15) | 483 |
//! | the resolver commits an async-commit transaction at its primary's min_commit_ts, ignoring the secondaries' | `txn/src/client/resolver.rs` | 26 (seed 25) | 39 |
//! | skip the rollback record when a lock is rolled back (`rollback_lock`) | `txn/src/actions/mod.rs` | 2736 (seed 2735) | 1 |
//! | commit ignores the lock's min_commit_ts (no `CommitTsExpired`) | `txn/src/actions/commit.rs` | not caught in 3000 | 0 |
//!
//! The last one is out of the simulator's reach by construction: a
//! reader pushes a 2PC lock's min_commit_ts only up to its own ts, which
//! is never above what the oracle handed out, and a 2PC commit_ts is a
//! fresh timestamp above that anyway. Reads at timestamps ahead of the
//! oracle would reach it, but such a snapshot is not stable by contract.
//!
//! A real bug found on the way (fixed in the same change as the
//! simulator, seed 918 before the fix): [`Client::gc`](percolate_txn::client::Client::gc)
//! resolved each region's locks and collected that region before it went
//! on to the next, so a region collected early could lose the commit
//! record (a Lock record) of a primary whose secondary, in a later region
//! and left by a crashed client, was then rolled back: a committed
//! transaction became half visible. It now resolves every region's locks
//! first, as automatic GC does.
//!
//! # Mutation testing
//!
//! `cargo mutants` (v27.1) over the transaction actions' decision code, a
//! timed subset: `txn/src/actions/{commit,cleanup,check_txn_status,mod,
//! check_secondary_locks,pessimistic_rollback}.rs`, every mutant of those
//! six files, each tested against the txn and mvcc unit tests and the
//! action-level behaviour tests (release profile, incremental, in place):
//!
//! ```text
//! cargo mutants --in-place --profile release --baseline skip --workspace \
//!   --timeout 180 --build-timeout 900 \
//!   --test-package percolate-mvcc --test-package percolate-txn --test-package percolate \
//!   -C=--lib -C=--test=txn_behaviour -C=--test=pessimistic_behaviour \
//!   -C=--test=goldenscripts -C=--test=storage_behaviour -C=--test=read_behaviour \
//!   -C=--test=txn_model \
//!   -f txn/src/actions/commit.rs -f txn/src/actions/cleanup.rs \
//!   -f txn/src/actions/check_txn_status.rs -f txn/src/actions/mod.rs \
//!   -f txn/src/actions/check_secondary_locks.rs -f txn/src/actions/pessimistic_rollback.rs
//! ```
//!
//! Before: 130 mutants, 102 caught, 6 missed, 22 unviable, 0 timeouts (26
//! minutes on 2 shared cores). Three of the six missed were real behaviour
//! changes and now have tests (F13, G14, and
//! `check_txn_status_on_a_stale_locked_with_conflict_primary_rolled_back`);
//! the other three are equivalent (a `>=` for a `>` that no reachable state
//! tells apart, an extra delete of a default-CF value that is never there,
//! and a record check on a pessimistic lock without TiKV's
//! locked-with-conflict flag, a state no action here writes). After, the
//! six re-run: 3 caught, 3 missed (those three).
//!
//! `prewrite.rs`, the same command with `-f txn/src/actions/prewrite.rs`:
//! stopped at its time limit after 69 of its 100 mutants (all up to
//! `newest_data_version`; not run: `check_existence`, `commit_ts_bound`,
//! `prewrite_mutations`, `prewrite_all`, `commit_one_pc` and the rest of
//! the file, 31 mutants). Of the 69: 52 caught, 5 missed, 12 unviable, 0
//! timeouts. Four of the five missed were real and now have tests in
//! `tests/pessimistic_behaviour.rs`, each checked by applying the mutant
//! by hand: `skip_pessimistic_check_looks_for_newer_records_only_on_a_retry`
//! (`skips_constraint_check` always false; `delete !` in the newer-rollback
//! skip) and `c24_do_constraint_check_at_the_start_ts` (`>=` for `>` in the
//! `LazyUniquenessCheck` and the for_update_ts checks: a commit exactly at
//! the start_ts is in the snapshot). The fifth is equivalent: the
//! `commit_ts.is_zero()` guard in `newest_data_version` only matters for a
//! record at commit_ts 0, which no action writes. Not run: the 31 above,
//! `acquire_pessimistic_lock.rs`, the other actions, the mvcc readers and
//! the client's commit path.

mod checker;
mod client;
mod engine;
mod history;
mod rng;
mod run;
mod world;

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

pub use engine::{CommitRecord, EngineLog, SimEngine, WriteHook};
pub use rng::Rng;

/// Which fault kinds a run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// Clients die at any step.
    pub client_death: bool,
    /// The process crashes and reopens.
    pub crash: bool,
    /// The wall clock steps backwards.
    pub clock_back: bool,
    /// Reads race prewrites and commits inside their engine write.
    pub racing_reads: bool,
    /// Some clients' heart beats never come.
    pub stalled_heart_beats: bool,
    /// GC runs at random safe points.
    pub gc: bool,
}

impl Faults {
    /// Every fault kind.
    pub const ALL: Faults = Faults {
        client_death: true,
        crash: true,
        clock_back: true,
        racing_reads: true,
        stalled_heart_beats: true,
        gc: true,
    };

    /// No fault at all.
    pub const NONE: Faults = Faults {
        client_death: false,
        crash: false,
        clock_back: false,
        racing_reads: false,
        stalled_heart_beats: false,
        gc: false,
    };

    const NAMES: [&'static str; 6] = ["death", "crash", "clock_back", "race", "stall", "gc"];

    fn flags(&self) -> [bool; 6] {
        [
            self.client_death,
            self.crash,
            self.clock_back,
            self.racing_reads,
            self.stalled_heart_beats,
            self.gc,
        ]
    }

    fn from_flags(f: [bool; 6]) -> Self {
        Faults {
            client_death: f[0],
            crash: f[1],
            clock_back: f[2],
            racing_reads: f[3],
            stalled_heart_beats: f[4],
            gc: f[5],
        }
    }
}

impl fmt::Display for Faults {
    /// The kinds on, joined by `+` (`none` for none).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on: Vec<&str> = Self::NAMES
            .iter()
            .zip(self.flags())
            .filter(|(_, on)| *on)
            .map(|(name, _)| *name)
            .collect();
        if on.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&on.join("+"))
        }
    }
}

/// The size of a run: what the shrinker reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Clients running transactions at once. Defaults to 4.
    pub clients: usize,
    /// Scheduler steps before quiescence. Defaults to 150.
    pub steps: usize,
    /// Keys the transactions use. Defaults to 6.
    pub keys: usize,
    /// The fault kinds. Defaults to all.
    pub faults: Faults,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            clients: 4,
            steps: 150,
            keys: 6,
            faults: Faults::ALL,
        }
    }
}

impl fmt::Display for SimConfig {
    /// `clients=4,steps=150,keys=6,faults=death+crash+...`: what
    /// [`SimConfig::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "clients={},steps={},keys={},faults={}",
            self.clients, self.steps, self.keys, self.faults
        )
    }
}

impl SimConfig {
    /// Reads the form [`Display`](fmt::Display) writes; fields left out
    /// keep their defaults.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut cfg = SimConfig::default();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not name=value"))?;
            let number = || value.parse::<usize>().map_err(|e| format!("{name}: {e}"));
            match name {
                "clients" => cfg.clients = number()?.max(1),
                "steps" => cfg.steps = number()?,
                "keys" => cfg.keys = number()?.max(1),
                "faults" => {
                    let mut flags = [false; 6];
                    for kind in value.split('+').filter(|k| *k != "none") {
                        let i = Faults::NAMES
                            .iter()
                            .position(|n| *n == kind)
                            .ok_or_else(|| format!("unknown fault kind `{kind}`"))?;
                        flags[i] = true;
                    }
                    cfg.faults = Faults::from_flags(flags);
                }
                _ => return Err(format!("unknown field `{name}`")),
            }
        }
        Ok(cfg)
    }
}

/// What one seed did.
#[derive(Clone, Debug)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Its configuration.
    pub config: SimConfig,
    /// What the checker found (empty: the seed passed).
    pub violations: Vec<String>,
    /// The schedule, one line per event, when traced.
    pub trace: Option<Vec<String>>,
    /// Transactions begun.
    pub txns: usize,
    /// Reads checked.
    pub reads: usize,
}

impl SeedOutcome {
    /// Whether the checker found nothing wrong.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// How to replay it: the environment of the seeds test.
    pub fn replay_command(&self) -> String {
        format!(
            "PERCOLATE_SIM_SEED={} PERCOLATE_SIM_CONFIG={} cargo test --release -p percolate-sim --test seeds replay",
            self.seed, self.config
        )
    }
}

fn run(seed: u64, config: SimConfig, trace: bool) -> SeedOutcome {
    let outcome = catch_unwind(AssertUnwindSafe(|| run::simulate(seed, config, trace)));
    match outcome {
        Ok((world, violations)) => SeedOutcome {
            seed,
            config,
            violations,
            txns: world.history.txns.len(),
            reads: world.history.observations.len(),
            trace: world.trace,
        },
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            SeedOutcome {
                seed,
                config,
                violations: vec![format!("panic: {message}")],
                trace: None,
                txns: 0,
                reads: 0,
            }
        }
    }
}

/// Runs one seed without keeping its trace (the fast form).
pub fn run_seed(seed: u64, config: SimConfig) -> SeedOutcome {
    run(seed, config, false)
}

/// Runs one seed and keeps its trace.
pub fn run_seed_traced(seed: u64, config: SimConfig) -> SeedOutcome {
    run(seed, config, true)
}

/// Reduces a failing seed's configuration (fewer steps, clients, keys and
/// fault kinds) while it still fails, and returns the smallest failing
/// run, traced. `budget` bounds the runs tried. A seed that passes comes
/// back as it is.
pub fn shrink(seed: u64, config: SimConfig, budget: usize) -> SeedOutcome {
    let mut best = config;
    let mut tries = 0;
    let fails = |cfg: SimConfig, tries: &mut usize| {
        *tries += 1;
        !run_seed(seed, cfg).passed()
    };
    if !fails(best, &mut tries) {
        return run_seed_traced(seed, config);
    }
    loop {
        let before = best;
        // Fewer steps: the schedule's prefix is the same, so a binary
        // search finds the shortest failing one.
        let (mut low, mut high) = (0, best.steps);
        while low < high && tries < budget {
            let mid = (low + high) / 2;
            if fails(SimConfig { steps: mid, ..best }, &mut tries) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        best.steps = high;
        for clients in 1..best.clients {
            if tries < budget && fails(SimConfig { clients, ..best }, &mut tries) {
                best.clients = clients;
                break;
            }
        }
        for keys in 1..best.keys {
            if tries < budget && fails(SimConfig { keys, ..best }, &mut tries) {
                best.keys = keys;
                break;
            }
        }
        for i in 0..6 {
            let mut flags = best.faults.flags();
            if !flags[i] {
                continue;
            }
            flags[i] = false;
            let cfg = SimConfig {
                faults: Faults::from_flags(flags),
                ..best
            };
            if tries < budget && fails(cfg, &mut tries) {
                best = cfg;
            }
        }
        if best == before || tries >= budget {
            break;
        }
    }
    run_seed_traced(seed, best)
}

/// The seed and configuration a replay asks for in the environment
/// (`PERCOLATE_SIM_SEED`, `PERCOLATE_SIM_CONFIG`), if any.
pub fn replay_from_env() -> Option<Result<(u64, SimConfig), String>> {
    let seed = std::env::var("PERCOLATE_SIM_SEED").ok()?;
    let parsed = seed
        .trim()
        .parse::<u64>()
        .map_err(|e| format!("PERCOLATE_SIM_SEED: {e}"))
        .and_then(|seed| {
            let config = match std::env::var("PERCOLATE_SIM_CONFIG") {
                Ok(text) => SimConfig::parse(&text)?,
                Err(_) => SimConfig::default(),
            };
            Ok((seed, config))
        });
    Some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_through_its_text() {
        let config = SimConfig {
            clients: 2,
            steps: 17,
            keys: 3,
            faults: Faults {
                crash: false,
                gc: false,
                ..Faults::ALL
            },
        };
        assert_eq!(SimConfig::parse(&config.to_string()), Ok(config));
        assert_eq!(SimConfig::parse(""), Ok(SimConfig::default()));
        assert_eq!(
            SimConfig::parse("faults=none").map(|c| c.faults),
            Ok(Faults::NONE)
        );
        assert!(SimConfig::parse("faults=meteor").is_err());
    }

    #[test]
    fn a_planted_bug_is_caught_and_shrunk_to_a_short_trace() {
        world::planted::set_lose_values(true);
        let config = SimConfig::default();
        let failing = (0..50)
            .map(|seed| run_seed(seed, config))
            .find(|o| !o.passed())
            .expect("reads that lose values fail some seed");
        let shrunk = shrink(failing.seed, config, 300);
        world::planted::set_lose_values(false);
        assert!(!shrunk.passed(), "the shrunk run still fails");
        assert!(shrunk.config.steps < config.steps, "{}", shrunk.config);
        let trace = shrunk.trace.expect("traced");
        assert!(trace.len() < 60, "a short trace:\n{}", trace.join("\n"));
        assert!(
            shrunk.violations.iter().any(|v| v.contains("expected")),
            "{:?}",
            shrunk.violations
        );
        // Without the bug the same seed and configuration pass.
        assert!(run_seed(shrunk.seed, shrunk.config).passed());
    }
}
