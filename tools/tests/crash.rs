//! Process crashes: a writer process (`percolate-soak crash-writer`, the
//! hidden command of the crash harness) runs transactions on a RocksDB
//! directory and is killed with SIGKILL at random moments; after each kill
//! the directory is reopened and checked (see
//! `tools/src/bin/percolate-soak/crash.rs`, shared with `percolate-soak
//! soak`, for the writer's transactions and every check):
//!
//! * every transaction the writer reported committed is visible in full,
//!   at the commit_ts it reported;
//! * in the whole directory (every round, not only the newest), no
//!   transaction is visible in part (the reads that check resolve the
//!   dead writers' locks: roll forward or back), no lock is left, and each
//!   round still has the transactions its first check recorded in the
//!   ledger;
//! * counters equal the visible increments; the bank's total holds;
//!   deleted keys read as absent, and values over 255 bytes (default CF)
//!   and shorter ones (inlined) read back whole;
//! * the same holds at the newest GC safe point the writers collected at;
//! * the oracle never hands out a timestamp at or below one handed out
//!   before the crash, by the writer or by the checker before it.
//!
//! Some kills are left unchecked: the next writer's lock resolver meets the
//! dead writer's locks, and is killed while it resolves them.
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
#[path = "../src/bin/percolate-soak/crash.rs"]
mod crash;

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crash::{Kill, MarkerValue, RoundOutcome, State, TxnId};

/// Kills per run, at most.
const KILLS: usize = 10;
/// No new kill round starts after this long (a slow, loaded machine still
/// finishes in about this time plus one round).
const BUDGET: Duration = Duration::from_secs(60);
/// Writer threads.
const THREADS: usize = 3;

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
    run_maybe_unchecked(exe, dir, state, rng, kill, false)
}

fn run_maybe_unchecked(
    exe: &Path,
    dir: &Path,
    state: &mut State,
    rng: &mut StdRng,
    kill: Kill,
    unchecked: bool,
) -> RoundOutcome {
    let outcome = crash::run_round(exe, dir, state, THREADS, rng.random(), kill, !unchecked)
        .unwrap_or_else(|e| panic!("round {}: {e}", state.next_round));
    eprintln!(
        "round {}: {kill:?}, ran {} ms{}, committed {} (1PC {}, async {}, 2PC {}; pessimistic {}), gave up {}, \
         gc {}, resolver {} locks{}, {}visible {}, audited {} (long {}, doomed {:?}){}",
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
        outcome.gc_runs,
        outcome.resolver_found,
        if outcome.resolver_killed {
            " (killed resolving)"
        } else {
            ""
        },
        if outcome.checked { "" } else { "unchecked, " },
        outcome.visible,
        outcome.audited,
        outcome.audited_long,
        outcome.audited_doomed,
        if outcome.safe_point_audited {
            ", audited at the safe point"
        } else {
            ""
        },
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
        !outcome.checked || outcome.visible >= outcome.committed,
        "more transactions reported committed than visible"
    );
    outcome
}

#[test]
fn kill_9_at_random_moments_loses_no_commit_and_shows_no_partial_transaction() {
    watchdog(300);
    let exe = Path::new(env!("CARGO_BIN_EXE_percolate-soak"));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(support::seed("crash test"));
    let mut state = State::load(dir.path()).unwrap();
    let started = Instant::now();
    let mut committed = 0;
    let mut kills = 0;
    let mut gc_runs = 0;
    let mut resolver_locks = 0;
    let mut after_unchecked = false;
    while kills < KILLS && (kills < 2 || started.elapsed() < BUDGET) {
        // The second kill, and one in four after it, is left unchecked:
        // the next writer's resolver meets the dead one's locks and is
        // killed early.
        let unchecked = !after_unchecked && (kills == 1 || rng.random_ratio(1, 4));
        let kill = if after_unchecked {
            Kill::WhileResolving(Duration::from_micros(rng.random_range(0..3_000)))
        } else {
            kill_point(&mut rng)
        };
        let outcome = run_maybe_unchecked(exe, dir.path(), &mut state, &mut rng, kill, unchecked);
        committed += outcome.committed;
        gc_runs += outcome.gc_runs;
        resolver_locks += outcome.resolver_found;
        after_unchecked = unchecked;
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
    gc_runs += last.gc_runs;
    eprintln!(
        "{kills} kills, {committed} transactions committed, {gc_runs} collections, \
         {resolver_locks} dead locks met by resolvers, in {:?}",
        started.elapsed()
    );
    assert!(state.bank_open, "the bank was never created");
    // The last audit covered every round, and the workload's parts all
    // showed up in it.
    assert_eq!(
        last.audited,
        state.rounds.values().map(|r| r.visible).sum::<u64>()
    );
    assert!(last.audited >= committed, "{last:?}");
    assert!(
        last.audited_long > 0 && last.audited_long < last.audited,
        "long (default CF) and short (inlined) values both: {last:?}"
    );
    assert!(
        last.audited_doomed.0 > 0 && last.audited_doomed.1 > 0,
        "doomed keys both kept and deleted: {last:?}"
    );
    assert!(gc_runs > 0, "no writer finished a collection");
    assert!(last.safe_point_audited, "{last:?}");
}

/// Runs two rounds to their end, erases write records of round 0's first
/// transaction with RocksDB directly (behind percolate's back): its first
/// marker's (`all`: every marker's), and returns the anomalies of the next
/// round of a soak started afresh on the directory.
fn erase_and_check(all: bool) -> (TxnId, Vec<String>) {
    let exe = Path::new(env!("CARGO_BIN_EXE_percolate-soak"));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(support::seed("crash test"));
    let mut state = State::load(dir.path()).unwrap();
    for _ in 0..2 {
        let outcome = run(
            exe,
            dir.path(),
            &mut state,
            &mut rng,
            Kill::Never { transactions: 30 },
        );
        assert!(outcome.committed > 0, "{outcome:?}");
    }
    drop(state);

    let id = {
        let engine = percolate_engine::RocksEngine::open(dir.path().join("db")).unwrap();
        let db = engine.raw_db();
        let cf = db.cf_handle("write").unwrap();
        // Every marker write record of round 0: stored key, raw key, id.
        let markers: Vec<(Vec<u8>, String, TxnId)> = db
            .iterator_cf(cf, rocksdb::IteratorMode::Start)
            .map(Result::unwrap)
            .filter_map(|(stored, value)| {
                let encoded = stored.strip_prefix(&[percolate_engine::DATA_PREFIX][..])?;
                let user_key = percolate_mvcc::Key::truncate_ts_for(encoded).ok()?;
                let raw = percolate_mvcc::Key::from_encoded_slice(user_key)
                    .to_raw()
                    .ok()?;
                let text = String::from_utf8(raw).ok()?;
                let mut parts = text.split('/');
                let (_, kind, round, seq) =
                    (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                let id = TxnId {
                    round: round.parse().ok()?,
                    seq: seq.parse().ok()?,
                };
                let record = percolate_mvcc::Write::parse(&value).ok()?;
                let put = record.write_type == percolate_mvcc::WriteType::Put;
                (kind == "t" && id.round == 0 && put).then(|| (stored.to_vec(), text, id))
            })
            .collect();
        let id = markers.first().expect("a marker of round 0").2;
        for (stored, text, _) in
            markers
                .iter()
                .filter(|m| m.2 == id)
                .take(if all { usize::MAX } else { 1 })
        {
            eprintln!("erasing the write record of {text}");
            db.delete_cf(cf, stored).unwrap();
        }
        id
    };

    // A new soak on the directory: its first check finds the loss.
    let mut state = State::load(dir.path()).unwrap();
    assert_eq!(state.next_round, 2, "the ledger's next round");
    let outcome = crash::run_round(
        exe,
        dir.path(),
        &mut state,
        THREADS,
        rng.random(),
        Kill::Never { transactions: 10 },
        true,
    )
    .unwrap();
    eprintln!("{:#?}", outcome.anomalies);
    // The ledger now says so: no later soak takes this data as its
    // baseline.
    drop(state);
    let refused = State::load(dir.path()).unwrap_err().to_string();
    assert!(refused.contains("found anomalies"), "{refused}");
    (id, outcome.anomalies)
}

/// One write record of an early round's transaction erased behind
/// percolate's back is an anomaly for the next check, even for a soak
/// started afresh on the directory (the old checker looked at the newest
/// round only, and took the counters it found as its baseline).
#[test]
fn an_erased_write_record_of_an_early_round_is_an_anomaly_for_a_new_soak() {
    watchdog(300);
    let (id, anomalies) = erase_and_check(false);
    assert!(
        anomalies.iter().any(|a| a.contains(&format!(" {id}:"))
            || a.contains("round 0 changed since it was checked")),
        "{id} is partial, or gone from its round: {anomalies:?}"
    );
}

/// Every marker of an early round's transaction erased: no marker says
/// anything is missing, but the ledger's count of the round does (and the
/// counter it incremented is one too high).
#[test]
fn an_early_transaction_erased_whole_is_missing_from_its_round() {
    watchdog(300);
    let (id, anomalies) = erase_and_check(true);
    assert!(
        anomalies
            .iter()
            .any(|a| a.starts_with("round 0 changed since it was checked")),
        "{id} is gone from round 0: {anomalies:?}"
    );
    assert!(
        anomalies.iter().any(|a| a.contains("latest: counter")),
        "{anomalies:?}"
    );
}

/// A directory with soak data but no ledger is refused, not adopted.
#[test]
fn soak_data_without_its_ledger_is_refused() {
    let exe = Path::new(env!("CARGO_BIN_EXE_percolate-soak"));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(support::seed("crash test"));
    let mut state = State::load(dir.path()).unwrap();
    let outcome = run(
        exe,
        dir.path(),
        &mut state,
        &mut rng,
        Kill::Never { transactions: 10 },
    );
    assert!(outcome.committed > 0);
    drop(state);
    std::fs::remove_file(dir.path().join(crash::check::LEDGER_FILE)).unwrap();
    let error = State::load(dir.path()).unwrap_err().to_string();
    assert!(error.contains("no ledger"), "{error}");
}

/// Marker values: short ones (inlined in the write record) and long ones
/// (over 255 bytes: the default CF) decode to what was encoded; a changed
/// byte of the padding, or a cut value, does not decode.
#[test]
fn marker_values_decode_only_whole() {
    let id = TxnId { round: 3, seq: 17 };
    for (len, deleted) in [(0, None), (700, Some(TxnId { round: 2, seq: 9 }))] {
        let value = MarkerValue {
            id,
            markers: 9,
            counter: 4,
            doomed: true,
            deleted,
            len,
        };
        let bytes = value.encode();
        assert_eq!(bytes.len() > 255, len > 0);
        assert_eq!(MarkerValue::decode(&bytes), Some(value));
        if len > 0 {
            let mut changed = bytes.clone();
            changed[500] ^= 1;
            assert_eq!(MarkerValue::decode(&changed), None);
            assert_eq!(MarkerValue::decode(&bytes[..600]), None);
        }
    }
    assert_eq!(MarkerValue::decode(b"3/17 9 4 1 - 0 x"), None);
    assert_eq!(MarkerValue::decode(b"3/17 9 4"), None);
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
