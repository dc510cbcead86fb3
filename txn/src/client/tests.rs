//! The client over three regions on the memory engine: commit protocols,
//! own-write reads, conflicts, and lock resolution after a client "died".

use std::sync::Arc;
use std::time::Duration;

use percolate_engine::MemoryEngine;

use super::*;
use crate::actions::prewrite::Mutation;
use crate::commands::{AcquirePessimisticLock, Prewrite};
use crate::oracle::{LocalOracle, ManualClock};

struct Setup {
    client: Client<MemoryEngine>,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

/// Regions [.., "g"), ["g", "p"), ["p", ..); an oracle on a manual clock.
fn setup(config: ClientConfig) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let oracle = Arc::new(LocalOracle::open_with_clock(dir.path(), clock.clone()).unwrap());
    Setup {
        client: client_with(oracle, config),
        clock,
        _dir: dir,
    }
}

/// A client over the regions [.., "g"), ["g", "p"), ["p", ..) of a memory
/// engine, on `oracle`.
fn client_with(oracle: Arc<dyn TimestampOracle>, config: ClientConfig) -> Client<MemoryEngine> {
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..Default::default()
    };
    let cluster = Cluster::new(
        MemoryEngine::new(),
        vec![b"g".to_vec(), b"p".to_vec()],
        storage,
    );
    Client::new(cluster, oracle, config)
}

fn client() -> Setup {
    setup(ClientConfig::default())
}

fn commit<E: Engine>(client: &Client<E>, writes: &[(&str, &str)]) -> CommitInfo {
    let mut txn = client.begin().unwrap();
    for (k, v) in writes {
        txn.put(k.as_bytes(), v.as_bytes());
    }
    txn.commit().unwrap()
}

#[test]
fn the_protocol_follows_the_shape_of_the_transaction() {
    let s = client();
    assert_eq!(
        commit(&s.client, &[("a", "1"), ("b", "2")]).protocol,
        CommitProtocol::OnePc
    );
    let info = commit(&s.client, &[("a", "3"), ("h", "4"), ("q", "5")]);
    assert_eq!(info.protocol, CommitProtocol::AsyncCommit);
    let txn = s.client.begin().unwrap();
    assert!(
        txn.start_ts() >= info.commit_ts,
        "a commit_ts never runs ahead of the oracle"
    );
    assert_eq!(txn.get(b"q").unwrap(), Some(b"5".to_vec()));
    assert_eq!(txn.get(b"a").unwrap(), Some(b"3".to_vec()));
    assert_eq!(
        s.client.begin().unwrap().commit().unwrap().protocol,
        CommitProtocol::ReadOnly
    );

    let two_pc = setup(ClientConfig {
        async_commit: false,
        ..Default::default()
    });
    let info = commit(&two_pc.client, &[("a", "1"), ("h", "2")]);
    assert_eq!(info.protocol, CommitProtocol::TwoPc);
    assert_eq!(two_pc.client.get_latest(b"h").unwrap(), Some(b"2".to_vec()));

    let small_batches = setup(ClientConfig {
        max_batch_keys: 2,
        max_async_commit_keys: 4,
        ..Default::default()
    });
    let keys: Vec<(String, String)> = (0..5).map(|i| (format!("a{i}"), format!("{i}"))).collect();
    let writes: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let info = commit(&small_batches.client, &writes);
    assert_eq!(
        info.protocol,
        CommitProtocol::TwoPc,
        "too many keys for async commit"
    );
    let info = commit(&small_batches.client, &writes[..3]);
    assert_eq!(
        info.protocol,
        CommitProtocol::AsyncCommit,
        "one region, two batches"
    );
}

#[test]
fn reads_see_own_writes_over_the_snapshot_in_both_directions() {
    let s = client();
    commit(
        &s.client,
        &[("a", "1"), ("c", "3"), ("h", "8"), ("q", "17")],
    );
    let mut txn = s.client.begin().unwrap();
    txn.put(b"b".to_vec(), b"2".to_vec());
    txn.delete(b"h".to_vec());
    txn.put(b"r".to_vec(), b"18".to_vec());
    txn.lock_keys([b"c".to_vec()]);
    let keys = |pairs: Vec<(Vec<u8>, Vec<u8>)>| -> Vec<String> {
        pairs
            .into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect()
    };
    assert_eq!(
        keys(
            txn.scan::<&[u8]>(..)
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        ["a", "b", "c", "q", "r"]
    );
    assert_eq!(
        keys(
            txn.scan("b".."r")
                .take(3)
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        ["b", "c", "q"]
    );
    assert_eq!(
        keys(
            txn.scan_reverse::<&[u8]>(..)
                .take(2)
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        ["r", "q"]
    );
    assert_eq!(
        keys(
            txn.scan_reverse("a".."q")
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        ["c", "b", "a"]
    );
    assert_eq!(
        txn.batch_get(&[b"h", b"c", b"b", b"zz"]).unwrap(),
        vec![None, Some(b"3".to_vec()), Some(b"2".to_vec()), None]
    );
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"h").unwrap(), None);
    assert_eq!(
        s.client.get_latest(b"c").unwrap(),
        Some(b"3".to_vec()),
        "lock_keys wrote nothing"
    );
}

#[test]
fn a_write_conflict_fails_the_later_commit_and_with_retry_redoes_it() {
    let s = client();
    let mut first = s.client.begin().unwrap();
    let mut second = s.client.begin().unwrap();
    // The read at second's start_ts puts first's (1PC) commit_ts above it:
    // the two overlap, and the later committer loses.
    assert_eq!(second.get(b"k").unwrap(), None);
    first.put(b"k".to_vec(), b"first".to_vec());
    second.put(b"k".to_vec(), b"second".to_vec());
    first.commit().unwrap();
    let err = second.commit().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!(s.client.get_latest(b"k").unwrap(), Some(b"first".to_vec()));

    let mut attempts = 0;
    s.client
        .with_retry(|txn| {
            attempts += 1;
            if attempts == 1 {
                // A concurrent writer commits between our read and commit.
                commit(&s.client, &[("k", "sneaky")]);
            }
            let v = txn.get(b"k")?.unwrap();
            txn.put(b"k".to_vec(), [v.as_slice(), b"+1"].concat());
            Ok(())
        })
        .unwrap();
    assert_eq!(attempts, 2);
    assert_eq!(
        s.client.get_latest(b"k").unwrap(),
        Some(b"sneaky+1".to_vec())
    );
}

#[test]
fn insert_fails_on_an_existing_key() {
    let s = client();
    commit(&s.client, &[("k", "v")]);
    let mut txn = s.client.begin().unwrap();
    txn.insert(b"k".to_vec(), b"again".to_vec());
    let err = txn.commit().unwrap_err();
    assert!(
        matches!(err, Error::Mvcc(percolate_mvcc::Error::AlreadyExist { .. })),
        "{err}"
    );
    let mut txn = s.client.begin().unwrap();
    txn.insert(b"new".to_vec(), b"v".to_vec());
    txn.commit().unwrap();
}

#[test]
fn the_empty_key_cannot_be_written() {
    let s = client();
    let mut txn = s.client.begin().unwrap();
    txn.put(b"".to_vec(), b"v".to_vec());
    txn.put(b"a".to_vec(), b"v".to_vec());
    let err = txn.commit().unwrap_err();
    assert!(matches!(err, Error::InvalidRequest { .. }), "{err}");
    assert_eq!(
        s.client.get_latest(b"a").unwrap(),
        None,
        "nothing was written"
    );
}

/// Prewrites like a client that then dies: locks on `keys` with `primary`.
fn dead_client_prewrite(s: &Setup, keys: &[&str], async_commit: bool) -> TimeStamp {
    let start_ts = s.client.oracle().get_ts().unwrap();
    let cluster = s.client.cluster();
    let secondaries: Vec<Vec<u8>> = keys[1..].iter().map(|k| k.as_bytes().to_vec()).collect();
    for k in keys {
        let mut prewrite = Prewrite::new(
            vec![Mutation::put(
                Key::from_raw(k.as_bytes()),
                format!("{k}-dead").into_bytes(),
            )],
            keys[0],
            start_ts,
        )
        .lock_ttl(100);
        if async_commit {
            prewrite = prewrite.async_commit(secondaries.clone(), TimeStamp::zero());
        }
        cluster
            .region_for(k.as_bytes())
            .storage()
            .prewrite(prewrite)
            .unwrap();
    }
    start_ts
}

#[test]
fn a_reader_rolls_back_the_locks_of_a_client_that_died_after_prewrite() {
    let s = client();
    commit(&s.client, &[("a", "old"), ("h", "old")]);
    dead_client_prewrite(&s, &["a", "h"], false);
    // After the TTL the reader rolls the transaction back and reads on.
    s.clock.advance(1_000);
    std::thread::sleep(Duration::from_millis(20));
    let txn = s.client.begin().unwrap();
    assert_eq!(txn.get(b"h").unwrap(), Some(b"old".to_vec()));
    assert_eq!(txn.get(b"a").unwrap(), Some(b"old".to_vec()));
}

#[test]
fn a_reader_rolls_forward_a_transaction_whose_primary_committed() {
    let s = client();
    let start_ts = dead_client_prewrite(&s, &["a", "h", "q"], false);
    let commit_ts = s.client.oracle().get_ts().unwrap();
    let primary_region = s.client.cluster().region_for(b"a").storage();
    primary_region
        .commit(vec![Key::from_raw(b"a")], start_ts, commit_ts)
        .unwrap();
    let txn = s.client.begin().unwrap();
    assert_eq!(txn.get(b"q").unwrap(), Some(b"q-dead".to_vec()));
    assert_eq!(txn.scan("g"..).count(), 2);
    let q_region = s.client.cluster().region_for(b"q").storage();
    assert!(
        q_region
            .mvcc_by_key(Key::from_raw(b"q"))
            .unwrap()
            .lock
            .is_none()
    );
}

#[test]
fn a_reader_decides_a_dead_async_commit_transaction_from_its_secondaries() {
    let s = client();
    dead_client_prewrite(&s, &["a", "h", "q"], true);
    s.clock.advance(1_000);
    std::thread::sleep(Duration::from_millis(20));
    // Every key was prewritten: the transaction committed.
    let txn = s.client.begin().unwrap();
    assert_eq!(txn.get(b"h").unwrap(), Some(b"h-dead".to_vec()));
    for k in ["a", "h", "q"] {
        let storage = s.client.cluster().region_for(k.as_bytes()).storage();
        assert!(
            storage
                .mvcc_by_key(Key::from_raw(k.as_bytes()))
                .unwrap()
                .lock
                .is_none(),
            "{k}"
        );
    }

    // One secondary was never prewritten: rolled back.
    let start_ts = s.client.oracle().get_ts().unwrap();
    let prewrite = Prewrite::new(
        vec![Mutation::put(Key::from_raw(b"a"), b"never".to_vec())],
        b"a",
        start_ts,
    )
    .lock_ttl(100)
    .async_commit(vec![b"zz".to_vec()], TimeStamp::zero());
    s.client
        .cluster()
        .region_for(b"a")
        .storage()
        .prewrite(prewrite)
        .unwrap();
    s.clock.advance(1_000);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"a-dead".to_vec()));
}

#[test]
fn a_live_lock_makes_a_reader_wait_until_its_deadline() {
    let s = setup(ClientConfig {
        resolve_timeout: Duration::from_millis(50),
        ..Default::default()
    });
    let start_ts = dead_client_prewrite(&s, &["a"], true);
    let txn = s.client.begin().unwrap();
    let err = txn.get(b"a").unwrap_err();
    assert!(
        matches!(&err, Error::ResolveLockTimeout { lock_ts, .. } if *lock_ts == start_ts),
        "{err}"
    );
    assert!(err.is_retryable());
    // A 2PC lock of a live transaction is pushed instead: no wait.
    let s = client();
    dead_client_prewrite(&s, &["b"], false);
    let txn = s.client.begin().unwrap();
    assert_eq!(txn.get(b"b").unwrap(), None);
}

/// A lock's TTL counts from its start_ts, so a transaction kept open longer
/// than the TTL before committing must not write locks that are expired
/// from the start (any reader could roll it back before its first heart
/// beat): its locks get the time it was open on top of the TTL.
#[test]
fn locks_of_a_long_open_transaction_get_the_time_it_was_open() {
    let _scenario = crate::fail::scenario();
    let s = setup(ClientConfig {
        lock_ttl_ms: 100,
        ..ClientConfig::default()
    });
    let mut txn = s.client.begin().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    txn.put(b"a".to_vec(), b"1".to_vec());
    txn.put(b"h".to_vec(), b"2".to_vec());
    // Die once every prewrite is in, leaving the locks to look at.
    crate::fail::cfg_thread(
        crate::fail::CLIENT_PREWRITE_ALL,
        crate::fail::Action::Die,
        0,
        Some(1),
    );
    let err = txn.commit().unwrap_err();
    assert!(crate::fail::is_death(&err), "{err:?}");
    for k in [&b"a"[..], b"h"] {
        let storage = s.client.cluster().region_for(k).storage();
        let lock = storage.mvcc_by_key(key(k)).unwrap().lock.expect("locked");
        assert!(lock.ttl >= 400, "ttl {} of {k:?}", lock.ttl);
    }
}

/// A pessimistic commit that panics (here at a fail point once every
/// prewrite is in) stops its heart beats as any other end of the commit
/// does, so that its locks go with their TTL instead of being kept alive
/// for as long as the client lives.
#[test]
fn a_pessimistic_commit_that_panics_stops_its_heart_beats() {
    let _scenario = crate::fail::scenario();
    let s = client();
    let mut txn = s.client.begin_pessimistic().unwrap();
    txn.put(b"a".to_vec(), b"1".to_vec()).unwrap();
    txn.put(b"h".to_vec(), b"2".to_vec()).unwrap();
    let start_ts = txn.start_ts();
    assert!(s.client.inner.heartbeats.keeps(start_ts));
    crate::fail::cfg_thread(
        crate::fail::CLIENT_PREWRITE_ALL,
        crate::fail::Action::Panic,
        0,
        Some(1),
    );
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| txn.commit()));
    assert!(panicked.is_err());
    assert!(!s.client.inner.heartbeats.keeps(start_ts));
}

/// An async-commit transaction one of whose batches fell back to 2PC (its
/// lock is a plain one) is decided by its primary alone, checked as a 2PC
/// primary (TiKV's `force_sync_commit`): once the primary expired, a
/// reader rolls the transaction back instead of committing it at the
/// largest min_commit_ts of its locks, a commit_ts the client never chose.
#[test]
fn an_async_commit_with_a_batch_fallen_back_to_2pc_is_decided_by_its_primary() {
    let s = client();
    let start_ts = s.client.oracle().get_ts().unwrap();
    let primary = s.client.cluster().region_for(b"a").storage();
    let secondary = s.client.cluster().region_for(b"h").storage();
    let asynchronous = Prewrite::new(
        vec![Mutation::put(key(b"a"), b"1".to_vec())],
        b"a".to_vec(),
        start_ts,
    )
    .lock_ttl(100)
    .async_commit(vec![b"h".to_vec()], TimeStamp::zero());
    assert!(
        primary
            .prewrite(asynchronous)
            .unwrap()
            .min_commit_ts
            .is_some()
    );
    // The batch of "h" as a fallen-back one writes it: a 2PC lock.
    let fallen_back = Prewrite::new(
        vec![Mutation::put(key(b"h"), b"2".to_vec())],
        b"a".to_vec(),
        start_ts,
    )
    .lock_ttl(100);
    secondary.prewrite(fallen_back).unwrap();
    s.clock.advance(10_000);
    assert_eq!(s.client.get_latest(b"h").unwrap(), None);
    assert_eq!(s.client.get_latest(b"a").unwrap(), None);
    for (storage, k) in [(primary, &b"a"[..]), (secondary, b"h")] {
        let info = storage.mvcc_by_key(key(k)).unwrap();
        assert!(info.lock.is_none(), "{k:?} still locked");
        assert!(
            info.writes
                .iter()
                .all(|(_, w)| w.write_type == percolate_mvcc::WriteType::Rollback),
            "{k:?}: {info:?}"
        );
    }
}

/// The versions of `k` in the write CF, newest first: (commit_ts, type).
fn versions(s: &Setup, k: &[u8]) -> Vec<(TimeStamp, percolate_mvcc::WriteType)> {
    let storage = s.client.cluster().region_for(k).storage();
    let info = storage.mvcc_by_key(Key::from_raw(k)).unwrap();
    info.writes
        .iter()
        .map(|(ts, w)| (*ts, w.write_type))
        .collect()
}

#[test]
fn gc_keeps_what_reads_above_the_safe_point_see_and_resolves_old_locks_first() {
    let s = client();
    // Three versions of "a" and of "q" (another region), then a delete of
    // "h" over an old value.
    for v in ["1", "2", "3"] {
        commit(&s.client, &[("a", v), ("q", v)]);
    }
    commit(&s.client, &[("h", "old")]);
    let mut txn = s.client.begin().unwrap();
    txn.delete(b"h".to_vec());
    txn.commit().unwrap();
    // A client died after prewriting "a" and "q"; its locks expire.
    dead_client_prewrite(&s, &["a", "q"], false);
    s.clock.advance(1_000);
    // The oracle's physical time follows the clock at its next tick.
    std::thread::sleep(Duration::from_millis(20));
    let safe_point = s.client.oracle().get_ts().unwrap();
    // Newer than the safe point: must survive whatever happens below it.
    commit(&s.client, &[("q", "4")]);

    let info = s.client.gc(safe_point).unwrap();
    // "a": 3 Puts and the dead txn's Rollback; "q": the same below the safe
    // point; "h": a Put and a Delete.
    assert_eq!(info.found_versions, 10, "{info:?}");
    assert_eq!(versions(&s, b"a").len(), 1, "the newest Put alone");
    assert_eq!(versions(&s, b"q").len(), 2, "the newest Put below and 4");
    assert!(versions(&s, b"h").is_empty(), "a Delete hides everything");
    for k in [&b"a"[..], b"q"] {
        let storage = s.client.cluster().region_for(k).storage();
        assert!(
            storage
                .mvcc_by_key(Key::from_raw(k))
                .unwrap()
                .lock
                .is_none()
        );
    }
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"3".to_vec()));
    assert_eq!(s.client.get_latest(b"q").unwrap(), Some(b"4".to_vec()));
    assert_eq!(s.client.get_latest(b"h").unwrap(), None);
    // Nothing left to collect at the same safe point.
    assert_eq!(s.client.gc(safe_point).unwrap().deleted_versions, 0);
}

#[test]
fn gc_stops_at_a_live_lock_below_the_safe_point_and_refuses_a_future_safe_point() {
    let s = client();
    commit(&s.client, &[("a", "1")]);
    // A live 2PC lock is pushed above the safe point (it can only commit
    // above it): GC goes on around it.
    let start_ts = dead_client_prewrite(&s, &["b"], false);
    let safe_point = s.client.oracle().get_ts().unwrap();
    s.client.gc(safe_point).unwrap();
    let storage = s.client.cluster().region_for(b"b").storage();
    let lock = storage.mvcc_by_key(Key::from_raw(b"b")).unwrap().lock;
    assert!(lock.is_some_and(|l| l.ts == start_ts && l.min_commit_ts > safe_point));
    // A live async-commit lock cannot be pushed: it may commit at or below
    // the safe point, so GC stops there until its TTL runs out.
    dead_client_prewrite(&s, &["h", "i"], true);
    let safe_point = s.client.oracle().get_ts().unwrap();
    let err = s.client.gc(safe_point).unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(
        matches!(err.as_mvcc(), Some(percolate_mvcc::Error::KeyIsLocked(info)) if info.key == b"h"),
        "{err:?}"
    );
    // Once it has, the collection goes through.
    s.clock.advance(1_000);
    std::thread::sleep(Duration::from_millis(20));
    s.client.gc(safe_point).unwrap();
    let future = TimeStamp::compose(s.client.oracle().get_ts().unwrap().physical() + 60_000, 0);
    assert!(matches!(
        s.client.gc(future),
        Err(Error::InvalidRequest { .. })
    ));
    assert_eq!(
        s.client.gc(TimeStamp::zero()).unwrap(),
        crate::actions::gc::GcInfo::default()
    );
}

/// Inline secondary commits leave no lock behind once `commit` returns;
/// background ones are written by the regions' workers soon after. Either
/// way, with async commit and with 2PC, every key reads its new value.
#[test]
fn secondary_commits_are_written_inline_or_in_the_background() {
    use percolate_engine::{Cf, Engine, Snapshot};
    for mode in [SecondaryCommits::Inline, SecondaryCommits::Background] {
        for async_commit in [true, false] {
            let s = setup(ClientConfig {
                secondary_commits: mode,
                async_commit,
                ..Default::default()
            });
            let writes = [("a", "1"), ("h", "2"), ("q", "3")];
            let info = commit(&s.client, &writes);
            assert_ne!(info.protocol, CommitProtocol::OnePc);
            let locked = || {
                writes.iter().any(|(k, _)| {
                    let storage = s.client.cluster().region_for(k.as_bytes()).storage();
                    let lock_key = Key::from_raw(k.as_bytes());
                    storage
                        .engine()
                        .snapshot()
                        .get(Cf::Lock, lock_key.as_encoded())
                        .unwrap()
                        .is_some()
                })
            };
            match mode {
                SecondaryCommits::Inline => assert!(!locked(), "{mode:?} {async_commit}"),
                _ => {
                    let deadline = std::time::Instant::now() + Duration::from_secs(10);
                    while locked() {
                        assert!(std::time::Instant::now() < deadline, "never committed");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
            for (k, v) in writes {
                assert_eq!(
                    s.client.get_latest(k.as_bytes()).unwrap(),
                    Some(v.as_bytes().to_vec())
                );
            }
        }
    }
}

/// Parallel prewrite is real: with [`ParallelPrewrite::Always`] every batch
/// of a transaction over three regions is in an engine write at once; with
/// `Never` one at a time; `WhenSynced` is parallel only over regions that
/// sync their writes.
#[test]
fn prewrite_batches_run_at_once_or_one_after_another() {
    let cases = [
        (
            ParallelPrewrite::Always,
            percolate_engine::Durability::Buffered,
            3,
        ),
        (
            ParallelPrewrite::Never,
            percolate_engine::Durability::Sync,
            1,
        ),
        (
            ParallelPrewrite::WhenSynced,
            percolate_engine::Durability::Buffered,
            1,
        ),
        (
            ParallelPrewrite::WhenSynced,
            percolate_engine::Durability::Sync,
            3,
        ),
    ];
    for (mode, durability, at_once) in cases {
        let config = ClientConfig {
            parallel_prewrite: mode,
            ..Default::default()
        };
        let (client, engine, _dir) = faulty_client(durability, config);
        let gate = engine.hold_writes();
        std::thread::scope(|s| {
            let committer = s.spawn(|| {
                let mut txn = client.begin().unwrap();
                for k in ["a", "h", "q"] {
                    txn.put(k.as_bytes().to_vec(), b"v".to_vec());
                }
                txn.commit().unwrap()
            });
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while engine.writes_waiting() < at_once {
                assert!(std::time::Instant::now() < deadline, "{mode:?}: stuck");
                std::thread::sleep(Duration::from_millis(1));
            }
            // No further batch arrives while these wait.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(engine.writes_waiting(), at_once, "{mode:?} {durability:?}");
            drop(gate);
            let info = committer.join().unwrap();
            assert_eq!(info.protocol, CommitProtocol::AsyncCommit);
        });
        assert_eq!(client.get_latest(b"q").unwrap(), Some(b"v".to_vec()));
    }
}

/// A client over the three regions on a
/// [`FaultyEngine`](crate::testing::FaultyEngine) over memory, the regions
/// writing with `durability`.
fn faulty_client(
    durability: percolate_engine::Durability,
    config: ClientConfig,
) -> (
    Client<crate::testing::FaultyEngine<MemoryEngine>>,
    crate::testing::FaultyEngine<MemoryEngine>,
    tempfile::TempDir,
) {
    let engine = crate::testing::FaultyEngine::new(MemoryEngine::new());
    let dir = tempfile::tempdir().unwrap();
    let oracle = Arc::new(LocalOracle::open(dir.path()).unwrap());
    let mut storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..Default::default()
    };
    storage.scheduler.durability = durability;
    let cluster = Cluster::new(engine.clone(), vec![b"g".to_vec(), b"p".to_vec()], storage);
    (Client::new(cluster, oracle, config), engine, dir)
}

/// The regions of a cluster share one engine: a commit run on the
/// caller's thread writes all its regions' prewrites in one engine write,
/// and all their commit records in another (async commit: 2 writes for 3
/// regions, not 6; 2PC: the primary's commit on its own, then the
/// secondaries' together). Each region still answers for its own keys: a
/// lock in one region holds back that region's prewrite, which is resolved
/// and sent again, and the commit goes through.
#[test]
fn a_commit_across_regions_writes_each_phase_once() {
    use percolate_engine::Durability;
    for (async_commit, writes) in [(true, 2), (false, 3)] {
        let config = ClientConfig {
            async_commit,
            ..Default::default()
        };
        let (client, engine, _dir) = faulty_client(Durability::Buffered, config);
        let before = engine.writes();
        let mut txn = client.begin().unwrap();
        for k in ["a", "b", "h", "i", "q"] {
            txn.put(k.as_bytes(), k.as_bytes());
        }
        let info = txn.commit().unwrap();
        assert_eq!(
            engine.writes() - before,
            writes,
            "async commit: {async_commit}"
        );
        let expected = if async_commit {
            CommitProtocol::AsyncCommit
        } else {
            CommitProtocol::TwoPc
        };
        assert_eq!(info.protocol, expected);
        for k in ["a", "b", "h", "i", "q"] {
            assert_eq!(
                client.get_latest(k.as_bytes()).unwrap(),
                Some(k.as_bytes().to_vec())
            );
        }
    }
    // An expired lock in the middle region: that region's prewrite meets
    // it, the others' are written meanwhile; it is resolved, that prewrite
    // sent again, and the commit completes.
    let (client, _engine, _dir) = faulty_client(Durability::Buffered, ClientConfig::default());
    let region = client.cluster().region_for(b"h").storage();
    let start_ts = client.oracle().get_ts().unwrap();
    let stale = Prewrite::new(
        vec![Mutation::put(Key::from_raw(b"h"), b"stale".to_vec())],
        b"h".to_vec(),
        start_ts,
    )
    .lock_ttl(1);
    region.write(stale).unwrap();
    // Expired by the time the commit meets it: resolved, not given way to.
    std::thread::sleep(Duration::from_millis(10));
    let mut txn = client.begin().unwrap();
    for k in ["a", "h", "q"] {
        txn.put(k.as_bytes(), b"new".to_vec());
    }
    txn.commit().unwrap();
    for k in ["a", "h", "q"] {
        assert_eq!(
            client.get_latest(k.as_bytes()).unwrap(),
            Some(b"new".to_vec())
        );
    }
}

/// A commit across regions whose joint prewrite finds one region's latch
/// taken does not wait for it holding the other regions' latches: it lets
/// them go and prewrites region by region, so the free regions' prewrites
/// reach the engine while the busy one waits. Here the busy region then
/// finds a newer commit: the commit fails whole, and its other regions'
/// locks go.
#[test]
fn a_joint_prewrite_that_meets_a_taken_latch_goes_region_by_region() {
    use percolate_engine::Durability;
    let (client, engine, _dir) = faulty_client(Durability::Buffered, ClientConfig::default());
    // Begun before the first commit: its start_ts is below that commit.
    let mut second = client.begin().unwrap();
    for k in ["a", "h", "q"] {
        second.put(k.as_bytes().to_vec(), b"second".to_vec());
    }
    let gate = engine.hold_writes();
    std::thread::scope(|s| {
        // Holds the latch of "h" while its write waits at the gate.
        let first = s.spawn(|| {
            let mut txn = client.begin().unwrap();
            txn.put(b"h".to_vec(), b"first".to_vec());
            txn.commit()
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while engine.writes_waiting() < 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the first commit never wrote"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let second = s.spawn(move || second.commit());
        // The second commit's prewrite of "a" alone reaches the engine: a
        // joint run would have waited for every latch first.
        while engine.writes_waiting() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no prewrite went alone"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(gate);
        assert_eq!(
            first.join().unwrap().unwrap().protocol,
            CommitProtocol::OnePc
        );
        let e = second.join().unwrap().unwrap_err();
        assert!(
            matches!(
                e,
                Error::Mvcc(percolate_mvcc::Error::WriteConflict { ref key, .. })
                    if *key == Key::from_raw(b"h")
            ),
            "{e}"
        );
    });
    assert_eq!(client.get_latest(b"h").unwrap(), Some(b"first".to_vec()));
    // The failed commit's locks on "a" and "q" are rolled back (by the
    // committer, in the background): reads find nothing there.
    for k in ["a", "q"] {
        let read = client.with_retry(|txn| txn.get(k.as_bytes())).unwrap();
        assert_eq!(read, None, "{k}");
    }
}

/// A commit's own durability overrides the regions': `commit_with(sync)`
/// writes every command of the commit synced on buffered regions (1PC,
/// async commit and 2PC alike, secondaries included), `buffered()` none on
/// synced ones, and the client-wide default applies to plain `commit`.
#[test]
fn a_commit_chooses_its_durability() {
    use percolate_engine::Durability;
    // (keys, options): 1PC, async commit across three regions, 2PC.
    let commits: [(&[&str], ClientConfig); 3] = [
        (&["a", "b"], ClientConfig::default()),
        (&["a", "h", "q"], ClientConfig::default()),
        (
            &["a", "h", "q"],
            ClientConfig {
                async_commit: false,
                ..Default::default()
            },
        ),
    ];
    for (keys, shape) in commits {
        for (region, client_default, options, synced) in [
            (Durability::Buffered, None, CommitOptions::default(), false),
            (Durability::Buffered, None, CommitOptions::sync(), true),
            (
                Durability::Buffered,
                Some(Durability::Sync),
                CommitOptions::default(),
                true,
            ),
            (Durability::Sync, None, CommitOptions::default(), true),
            (Durability::Sync, None, CommitOptions::buffered(), false),
            (
                Durability::Sync,
                Some(Durability::Buffered),
                CommitOptions::sync(),
                true,
            ),
        ] {
            let config = ClientConfig {
                durability: client_default,
                ..shape.clone()
            };
            let (client, engine, _dir) = faulty_client(region, config);
            let before = (engine.writes(), engine.synced_writes());
            let mut txn = client.begin().unwrap();
            for k in keys {
                txn.put(k.as_bytes().to_vec(), b"v".to_vec());
            }
            let info = txn.commit_with(options).unwrap();
            // Background work (none with inline secondary commits) done.
            let writes = engine.writes() - before.0;
            let synced_writes = engine.synced_writes() - before.1;
            assert!(writes > 0);
            let case = format!(
                "{keys:?} {:?}, {region:?} regions, client {client_default:?}, {options:?}",
                info.protocol
            );
            if synced {
                assert_eq!(synced_writes, writes, "{case}: every write synced");
            } else {
                assert_eq!(synced_writes, 0, "{case}: no write synced");
            }
            for k in keys {
                assert_eq!(
                    client.get_latest(k.as_bytes()).unwrap(),
                    Some(b"v".to_vec())
                );
            }
        }
    }
}

// ------------------------------------------------------------ pessimistic

/// The pessimistic lock of the transaction on `k`, if any.
fn pessimistic_lock_on(client: &Client<MemoryEngine>, k: &[u8]) -> Option<percolate_mvcc::Lock> {
    let storage = client.cluster().region_for(k).storage();
    storage
        .mvcc_by_key(key(k))
        .unwrap()
        .lock
        .filter(|lock| lock.is_pessimistic_lock())
}

#[test]
fn a_pessimistic_transaction_locks_as_it_goes_and_commits() {
    let s = client();
    commit(&s.client, &[("a", "1")]);
    let mut txn = s.client.begin_pessimistic().unwrap();
    // Committed after the start_ts: the snapshot does not see it, the
    // locking read does.
    commit(&s.client, &[("h", "2")]);
    assert_eq!(txn.get(b"h").unwrap(), None);
    assert_eq!(txn.get_for_update(b"h").unwrap(), Some(b"2".to_vec()));
    txn.put(b"a", b"10").unwrap();
    txn.put(b"q", b"20").unwrap();
    for k in [&b"a"[..], b"h", b"q"] {
        let lock = pessimistic_lock_on(&s.client, k).expect("locked as it went");
        assert_eq!(
            (lock.ts, lock.primary.as_slice()),
            (txn.start_ts(), &b"h"[..])
        );
    }
    // An optimistic writer of a locked key cannot commit meanwhile.
    let mut other = s.client.begin().unwrap();
    other.put(b"q", b"x");
    assert!(other.commit().is_err());
    assert_eq!(txn.get(b"a").unwrap(), Some(b"10".to_vec()));
    let info = txn.commit().unwrap();
    assert_eq!(info.protocol, CommitProtocol::AsyncCommit);
    for (k, v) in [(&b"a"[..], &b"10"[..]), (b"h", b"2"), (b"q", b"20")] {
        assert_eq!(s.client.get_latest(k).unwrap().as_deref(), Some(v));
        assert_eq!(pessimistic_lock_on(&s.client, k), None);
    }
}

/// A client whose lock requests give up soon: a wait for a lock ends
/// after 5 ms and a statement after 30 ms (the oracle's clock is manual,
/// so a lock held in a test never expires meanwhile).
fn impatient() -> Setup {
    setup(ClientConfig {
        lock_wait_timeout: Duration::from_millis(5),
        resolve_timeout: Duration::from_millis(30),
        ..ClientConfig::default()
    })
}

/// `lock_keys` is all or nothing across regions: when a region's request
/// fails (here a wait for another transaction's lock that times out), the
/// keys the call locked in the other regions are released and leave the
/// buffer, and a primary the call chose is chosen anew by the next
/// statement; keys locked by earlier statements stay locked.
#[test]
fn lock_keys_gives_back_what_it_locked_when_a_region_fails() {
    let s = impatient();
    let mut holder = s.client.begin_pessimistic().unwrap();
    holder.lock_keys([b"q".to_vec()]).unwrap();
    let mut txn = s.client.begin_pessimistic().unwrap();
    // The call chooses the primary ("a"), locks "h", then fails on "q".
    let refused = txn.lock_keys([b"a".to_vec(), b"h".to_vec(), b"q".to_vec()]);
    assert!(refused.is_err(), "{refused:?}");
    for k in [&b"a"[..], b"h"] {
        assert_eq!(pessimistic_lock_on(&s.client, k), None, "{k:?} kept");
    }
    assert_eq!(
        pessimistic_lock_on(&s.client, b"q").unwrap().ts,
        holder.start_ts()
    );
    // A later statement chooses its own primary; a failing one after it
    // gives back only its own keys.
    txn.lock_keys([b"h".to_vec()]).unwrap();
    let refused = txn.lock_keys([b"b".to_vec(), b"q".to_vec()]);
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(pessimistic_lock_on(&s.client, b"b"), None);
    let primary = pessimistic_lock_on(&s.client, b"h").expect("kept");
    assert_eq!(
        (primary.ts, primary.primary.as_slice()),
        (txn.start_ts(), &b"h"[..])
    );
    // Once the holder is gone the statement goes through, and only the
    // locked keys are committed (as Lock records).
    holder.rollback().unwrap();
    txn.lock_keys([b"b".to_vec(), b"q".to_vec()]).unwrap();
    txn.put(b"q", b"1").unwrap();
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"q").unwrap(), Some(b"1".to_vec()));
    for k in [&b"a"[..], b"b", b"h", b"q"] {
        let storage = s.client.cluster().region_for(k).storage();
        assert!(storage.mvcc_by_key(key(k)).unwrap().lock.is_none(), "{k:?}");
    }
    let a = s.client.cluster().region_for(b"a").storage();
    assert!(
        a.mvcc_by_key(key(b"a")).unwrap().writes.is_empty(),
        "a was given back"
    );
}

#[test]
fn pessimistic_increments_of_one_key_lose_nothing_and_never_abort() {
    let s = client();
    commit(&s.client, &[("counter", "0")]);
    let threads = 4;
    let per_thread = 25;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                for _ in 0..per_thread {
                    let mut txn = s.client.begin_pessimistic().unwrap();
                    let value = txn.get_for_update(b"counter").unwrap().unwrap();
                    let n: u64 = String::from_utf8(value).unwrap().parse().unwrap();
                    txn.put(b"counter", (n + 1).to_string()).unwrap();
                    txn.commit()
                        .expect("a pessimistic commit meets no conflict");
                }
            });
        }
    });
    assert_eq!(
        s.client.get_latest(b"counter").unwrap(),
        Some((threads * per_thread).to_string().into_bytes())
    );
}

/// A locking read that waited for a holder who then committed locks over
/// that commit in the same request and reads the committed value: one
/// request after the wait, not a write conflict and a second one.
#[test]
fn a_locking_read_after_a_wait_locks_over_the_commit_it_waited_for() {
    let s = client();
    commit(&s.client, &[("k", "1")]);
    let mut holder = s.client.begin_pessimistic().unwrap();
    assert_eq!(holder.get_for_update(b"k").unwrap(), Some(b"1".to_vec()));
    let lock_requests = |client: &Client<MemoryEngine>| {
        let m = client.metrics();
        let c = m.command(crate::metrics::CommandKind::AcquirePessimisticLock);
        c.map(|c| (c.ok, c.failed)).unwrap_or_default()
    };
    let storage = s.client.cluster().region_for(b"k").storage();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let mut txn = s.client.begin_pessimistic().unwrap();
            let value = txn.get_for_update(b"k").unwrap();
            txn.put(b"k", b"3").unwrap();
            (value, txn.for_update_ts(), txn.commit().unwrap())
        });
        let waits = storage.concurrency_manager().lock_waits();
        while waits.wait_for_edges().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        holder.put(b"k", b"2").unwrap();
        let held = holder.commit().unwrap();
        let (value, for_update_ts, _) = waiter.join().unwrap();
        assert_eq!(value, Some(b"2".to_vec()));
        assert!(for_update_ts >= held.commit_ts);
    });
    // A transaction beginning after the waiter's commit reads it: its
    // commit_ts, computed above its for_update_ts, is not past the oracle's
    // next timestamp.
    let after = s.client.begin().unwrap();
    assert_eq!(after.get(b"k").unwrap(), Some(b"3".to_vec()));
    // The holder's request, and the waiter's one after the wait: the
    // waiter found the key held and waited before running a request.
    assert_eq!(lock_requests(&s.client), (2, 0));
    assert_eq!(s.client.get_latest(b"k").unwrap(), Some(b"3".to_vec()));
}

#[test]
fn a_pessimistic_transaction_dropped_or_rolled_back_releases_its_locks() {
    let s = client();
    let mut dropped = s.client.begin_pessimistic().unwrap();
    dropped.put(b"a", b"1").unwrap();
    dropped.lock_keys([&b"h"[..]]).unwrap();
    assert!(pessimistic_lock_on(&s.client, b"h").is_some());
    drop(dropped);
    let mut rolled_back = s.client.begin_pessimistic().unwrap();
    rolled_back.get_for_update(b"a").unwrap();
    rolled_back.put(b"q", b"1").unwrap();
    rolled_back.rollback().unwrap();
    for k in [&b"a"[..], b"h", b"q"] {
        assert_eq!(pessimistic_lock_on(&s.client, k), None, "{k:?}");
        assert_eq!(s.client.get_latest(k).unwrap(), None);
    }
    // An insert over an existing key fails without locking it.
    commit(&s.client, &[("a", "1")]);
    let mut txn = s.client.begin_pessimistic().unwrap();
    let err = txn.insert(b"a", b"2").unwrap_err();
    assert!(
        matches!(err, Error::Mvcc(percolate_mvcc::Error::AlreadyExist { .. })),
        "{err}"
    );
    txn.insert(b"b", b"2").unwrap();
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"b").unwrap(), Some(b"2".to_vec()));
}

#[test]
fn pessimistic_transactions_in_a_deadlock_fail_one_at_once() {
    // Long lock waits: the first transaction must still be waiting (its
    // edge in the graph) when the second closes the cycle.
    let s = setup(ClientConfig {
        lock_wait_timeout: Duration::from_secs(60),
        ..ClientConfig::default()
    });
    let mut first = s.client.begin_pessimistic().unwrap();
    let mut second = s.client.begin_pessimistic().unwrap();
    first.put(b"a", b"1").unwrap();
    second.put(b"q", b"2").unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(move || {
            first.put(b"q", b"1")?;
            first.commit()
        });
        let waits = s.client.cluster().regions()[0]
            .storage()
            .concurrency_manager()
            .lock_waits()
            .clone();
        while waits.wait_for_edges().is_empty() {
            std::thread::yield_now();
        }
        let err = second.put(b"a", b"2").unwrap_err();
        assert!(matches!(err, Error::Deadlock { .. }), "{err}");
        second.rollback().unwrap();
        waiting.join().unwrap().unwrap();
    });
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.client.get_latest(b"q").unwrap(), Some(b"1".to_vec()));
}

#[test]
fn a_dead_clients_pessimistic_lock_is_resolved_once_it_expires() {
    let s = setup(ClientConfig {
        lock_wait_timeout: Duration::from_millis(5),
        ..ClientConfig::default()
    });
    // A client that locked `k` and died: no heart beat keeps it alive.
    let dead_ts = s.client.oracle().get_ts().unwrap();
    let storage = s.client.cluster().region_for(b"k").storage();
    storage
        .acquire_pessimistic_lock(
            AcquirePessimisticLock::new(vec![key(b"k")], b"k".to_vec(), dead_ts, dead_ts)
                .lock_ttl(100),
        )
        .unwrap();
    let mut txn = s.client.begin_pessimistic().unwrap();
    s.clock.advance(200);
    txn.put(b"k", b"mine").unwrap();
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"k").unwrap(), Some(b"mine".to_vec()));
}

#[test]
fn a_read_for_update_of_a_locked_key_reads_the_latest_commit() {
    let s = client();
    commit(&s.client, &[("k", "1")]);
    let mut txn = s.client.begin_pessimistic().unwrap();
    // Committed after the start_ts, before the lock; then locked, not
    // written: a read for update reads that commit.
    commit(&s.client, &[("h", "2")]);
    txn.lock_keys([&b"h"[..]]).unwrap();
    assert_eq!(txn.get(b"h").unwrap(), None, "the snapshot is older");
    assert_eq!(txn.get_for_update(b"h").unwrap(), Some(b"2".to_vec()));
    txn.put(b"h", b"3").unwrap();
    assert_eq!(txn.get_for_update(b"h").unwrap(), Some(b"3".to_vec()));
    // Inserted, deleted and inserted again: locked all along, a put.
    txn.insert(b"j".to_vec(), b"1".to_vec()).unwrap();
    txn.delete(b"j".to_vec()).unwrap();
    txn.insert(b"j".to_vec(), b"2".to_vec()).unwrap();
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"j").unwrap(), Some(b"2".to_vec()));
    assert_eq!(s.client.get_latest(b"h").unwrap(), Some(b"3".to_vec()));
}

/// A statement whose lock request fails gives back what it locked, as
/// TiKV's client does (the keys rolled back, a primary it chose reset):
/// the transaction goes on as if the statement had not run.
#[test]
fn a_failed_lock_request_gives_back_the_keys_its_statement_locked() {
    let s = impatient();
    let mut holder = s.client.begin_pessimistic().unwrap();
    holder.lock_keys([&b"q"[..]]).unwrap();
    // `a` (which would have been the primary) is locked, `q` is not to be
    // had: `a` is given back, and the next key locked is the primary.
    let mut txn = s.client.begin_pessimistic().unwrap();
    assert!(txn.lock_keys([&b"a"[..], b"q"]).is_err());
    assert_eq!(pessimistic_lock_on(&s.client, b"a"), None);
    txn.put(b"h", b"1").unwrap();
    let info = txn.commit().unwrap();
    assert!(
        s.client.cluster().regions()[0]
            .storage()
            .mvcc_by_key(key(b"a"))
            .unwrap()
            .writes
            .is_empty(),
        "nothing committed on the key given back"
    );
    let h = s.client.cluster().region_for(b"h").storage();
    assert_eq!(
        h.mvcc_by_key(key(b"h"))
            .unwrap()
            .writes
            .first()
            .map(|(commit_ts, _)| *commit_ts),
        Some(info.commit_ts)
    );
    assert_eq!(s.client.get_latest(b"h").unwrap(), Some(b"1".to_vec()));
    // The same with nothing written: nothing is left locked.
    let mut txn = s.client.begin_pessimistic().unwrap();
    assert!(txn.lock_keys([&b"b"[..], b"q"]).is_err());
    assert_eq!(pessimistic_lock_on(&s.client, b"b"), None);
    txn.commit().unwrap();
    assert_eq!(pessimistic_lock_on(&s.client, b"b"), None);
    holder.rollback().unwrap();
}

#[test]
fn workers_are_shared_out_among_the_regions() {
    assert_eq!(workers_per_region(Some(16), 4), 4);
    assert_eq!(workers_per_region(Some(16), 1), 16);
    // At least two per region.
    assert_eq!(workers_per_region(Some(2), 4), 2);
    assert_eq!(workers_per_region(Some(0), 3), 2);
    assert!(workers_per_region(None, 1) >= 2);
}

/// The client's heart beats keep a transaction's primary lock alive past
/// its TTL: with the clock 10 s past a 300 ms TTL, the lock's TTL is raised
/// to cover the time passed, so a younger writer that meets it finds its
/// owner alive and gives way, and the owner commits. (Without heart beats
/// the TTL stays at 300 ms: the writer would roll the lock back, and the
/// owner's commit would fail.)
#[test]
fn heart_beats_keep_a_long_transactions_primary_alive() {
    let setup = setup(ClientConfig {
        lock_ttl_ms: 300,
        resolve_timeout: Duration::from_millis(200),
        ..Default::default()
    });
    let client = &setup.client;
    let mut owner = client.begin_pessimistic().unwrap();
    owner.put(b"k".to_vec(), b"owner".to_vec()).unwrap();
    setup.clock.advance(10_000);

    let storage = client.cluster().region_for(b"k").storage();
    let ttl = || {
        storage
            .mvcc_by_key(key(b"k"))
            .unwrap()
            .lock
            .map_or(0, |lock| lock.ttl)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while ttl() < 10_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "no heart beat raised the TTL: {} ms",
            ttl()
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    let mut writer = client.begin().unwrap();
    writer.put(b"k".to_vec(), b"writer".to_vec());
    let err = writer.commit().expect_err("the owner is alive");
    assert!(
        matches!(err, Error::Mvcc(percolate_mvcc::Error::KeyIsLocked(_))),
        "{err:?}"
    );
    owner.commit().unwrap();
    assert_eq!(client.get_latest(b"k").unwrap(), Some(b"owner".to_vec()));
}

/// An oracle that counts the timestamps asked of it.
struct CountingOracle {
    inner: LocalOracle,
    calls: std::sync::atomic::AtomicUsize,
}

impl crate::oracle::TimestampOracle for CountingOracle {
    fn get_ts(&self) -> Result<TimeStamp> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get_ts()
    }

    fn get_ts_batch(&self, count: u32) -> Result<TimeStamp> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get_ts_batch(count)
    }
}

/// `get_latest` reads without a timestamp: no oracle call at all, for a
/// key that exists, one that does not, and one in each region.
#[test]
fn get_latest_asks_the_oracle_for_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = Arc::new(CountingOracle {
        inner: LocalOracle::open(dir.path()).unwrap(),
        calls: Default::default(),
    });
    let client = client_with(oracle.clone(), ClientConfig::default());
    let mut txn = client.begin().unwrap();
    for k in ["a", "h", "q"] {
        txn.put(k.as_bytes().to_vec(), b"v".to_vec());
    }
    txn.commit().unwrap();

    let before = oracle.calls.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..10 {
        for k in ["a", "h", "q"] {
            assert_eq!(
                client.get_latest(k.as_bytes()).unwrap(),
                Some(b"v".to_vec())
            );
        }
        assert_eq!(client.get_latest(b"missing").unwrap(), None);
    }
    assert_eq!(
        oracle.calls.load(std::sync::atomic::Ordering::SeqCst),
        before
    );
    // A read at a snapshot does ask, once.
    client.snapshot_latest().unwrap().get(b"a").unwrap();
    assert_eq!(
        oracle.calls.load(std::sync::atomic::Ordering::SeqCst),
        before + 1
    );
}

/// A stale pessimistic lock names as its primary a key its transaction
/// has since prewritten as a secondary (its statement gave the lock back
/// and chose another primary; the release failed). The resolver checks
/// the named key as a primary (TiKV's `verify_is_primary`, BEHAVIOUR G13):
/// the secondary there answers PrimaryMismatch and is left alone, though
/// its TTL ran out, so the transaction's commit at its real primary
/// completes on it (tidb#42937); the stale lock is rolled back, as TiKV's
/// client does, and only it: the transaction's other locks met in the
/// same round (its live secondary "d") are not judged by it.
#[test]
fn a_stale_pessimistic_lock_does_not_roll_back_a_secondary_its_primary_names() {
    let s = impatient();
    let storage = s.client.cluster().region_for(b"a").storage();
    let start_ts = s.client.oracle().get_ts().unwrap();
    // "a": the stale pessimistic lock, naming "b" as its primary.
    storage
        .acquire_pessimistic_lock(
            AcquirePessimisticLock::new(vec![key(b"a")], b"b".to_vec(), start_ts, start_ts)
                .lock_ttl(100),
        )
        .unwrap();
    // "b", "c" and "d": the transaction's prewrite, primary "c" (kept
    // alive, as heart beats would).
    for (k, ttl) in [(&b"b"[..], 100), (b"c", 60_000), (b"d", 100)] {
        let prewrite = Prewrite::new(
            vec![Mutation::put(key(k), b"written".to_vec())],
            b"c".to_vec(),
            start_ts,
        )
        .lock_ttl(ttl);
        storage.write(prewrite).unwrap();
    }
    s.clock.advance(10_000);
    let mut other = s.client.begin_pessimistic().unwrap();
    other.put(b"a", b"other").unwrap();
    other.commit().unwrap();
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"other".to_vec()));
    // Another stale lock, "e", names "f", where the transaction never
    // locked anything. A writer meeting it and the live "d" in one round
    // of resolution rolls "e" back (its primary has no lock: nothing of
    // the transaction there) and leaves "d" alone: "f"'s answer is not
    // the transaction's fate.
    storage
        .acquire_pessimistic_lock(
            AcquirePessimisticLock::new(vec![key(b"e")], b"f".to_vec(), start_ts, start_ts)
                .lock_ttl(100),
        )
        .unwrap();
    let lock_info = |k: &[u8]| {
        storage
            .mvcc_by_key(key(k))
            .unwrap()
            .lock
            .unwrap()
            .into_lock_info(k.to_vec())
    };
    let locks = [lock_info(b"e"), lock_info(b"d")];
    let mut pushed = Vec::new();
    let caller = s.client.oracle().get_ts().unwrap();
    let alive = s
        .client
        .inner
        .resolve_locks(&locks, caller, &mut pushed)
        .unwrap();
    assert!(
        alive.iter().any(|l| l.key == b"d") || pushed.contains(&start_ts),
        "the live secondary is in the way: {alive:?} {pushed:?}"
    );
    assert_eq!(storage.mvcc_by_key(key(b"e")).unwrap().lock, None);
    for k in [&b"b"[..], b"d"] {
        let lock = storage.mvcc_by_key(key(k)).unwrap().lock;
        assert_eq!(lock.map(|l| l.ts), Some(start_ts), "the secondary's lock");
    }
    let commit_ts = s.client.oracle().get_ts().unwrap();
    for k in [&b"c"[..], b"b", b"d"] {
        storage.commit(vec![key(k)], start_ts, commit_ts).unwrap();
    }
    for k in [&b"b"[..], b"c", b"d"] {
        assert_eq!(s.client.get_latest(k).unwrap(), Some(b"written".to_vec()));
    }
}

/// An insert reads the transaction's own writes first, as TiDB's does: a
/// key the transaction deleted does not exist for it (the insert puts it),
/// one it put already exists (`AlreadyExist` naming the transaction; an
/// optimistic transaction learns it at commit, where nothing is written, a
/// pessimistic one at once, its earlier write kept).
#[test]
fn an_insert_reads_the_transactions_own_writes_first() {
    let s = client();
    commit(&s.client, &[("a", "1"), ("h", "1")]);
    // Optimistic.
    let mut txn = s.client.begin().unwrap();
    txn.delete(b"a".to_vec());
    txn.insert(b"a".to_vec(), b"2".to_vec());
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"2".to_vec()));
    let mut txn = s.client.begin().unwrap();
    let start_ts = txn.start_ts();
    txn.put(b"b".to_vec(), b"1".to_vec());
    txn.insert(b"b".to_vec(), b"2".to_vec());
    txn.put(b"q".to_vec(), b"1".to_vec());
    match txn.commit() {
        Err(Error::Mvcc(percolate_mvcc::Error::AlreadyExist {
            key,
            existing_start_ts,
        })) => {
            assert_eq!(key, Key::from_raw(b"b"));
            assert_eq!(existing_start_ts, start_ts);
        }
        other => panic!("expected AlreadyExist, got {other:?}"),
    }
    assert_eq!(s.client.get_latest(b"b").unwrap(), None);
    assert_eq!(s.client.get_latest(b"q").unwrap(), None);
    // An insert undone by a delete, of an absent key, commits a delete;
    // inserted again, it is an insert again, checked not to exist.
    let mut txn = s.client.begin().unwrap();
    txn.insert(b"c".to_vec(), b"1".to_vec());
    txn.delete(b"c".to_vec());
    assert_eq!(txn.get(b"c").unwrap(), None);
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"c").unwrap(), None);
    let mut txn = s.client.begin().unwrap();
    txn.insert(b"a".to_vec(), b"5".to_vec());
    txn.delete(b"a".to_vec());
    txn.insert(b"a".to_vec(), b"6".to_vec());
    assert!(matches!(
        txn.commit(),
        Err(Error::Mvcc(percolate_mvcc::Error::AlreadyExist { .. }))
    ));
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"2".to_vec()));
    // An insert undone by a delete keeps its check: over an existing key
    // the commit fails and writes nothing.
    let mut txn = s.client.begin().unwrap();
    txn.insert(b"a".to_vec(), b"7".to_vec());
    txn.delete(b"a".to_vec());
    txn.put(b"q".to_vec(), b"1".to_vec());
    match txn.commit() {
        Err(Error::Mvcc(percolate_mvcc::Error::AlreadyExist { key, .. })) => {
            assert_eq!(key, Key::from_raw(b"a"));
        }
        other => panic!("expected AlreadyExist, got {other:?}"),
    }
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"2".to_vec()));
    assert_eq!(s.client.get_latest(b"q").unwrap(), None);
    // Across regions (async commit), an undone insert first among the keys
    // (the primary): committed whole.
    let mut txn = s.client.begin().unwrap();
    txn.insert(b"0".to_vec(), b"1".to_vec());
    txn.delete(b"0".to_vec());
    txn.put(b"k".to_vec(), b"1".to_vec());
    txn.put(b"r".to_vec(), b"1".to_vec());
    assert_eq!(txn.commit().unwrap().protocol, CommitProtocol::AsyncCommit);
    assert_eq!(s.client.get_latest(b"0").unwrap(), None);
    assert_eq!(s.client.get_latest(b"k").unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.client.get_latest(b"r").unwrap(), Some(b"1".to_vec()));
    // Pessimistic.
    let mut txn = s.client.begin_pessimistic().unwrap();
    txn.delete(b"h".to_vec()).unwrap();
    txn.insert(b"h".to_vec(), b"3".to_vec()).unwrap();
    txn.put(b"i".to_vec(), b"1".to_vec()).unwrap();
    match txn.insert(b"i".to_vec(), b"2".to_vec()) {
        Err(Error::Mvcc(percolate_mvcc::Error::AlreadyExist {
            existing_start_ts, ..
        })) => assert_eq!(existing_start_ts, txn.start_ts()),
        other => panic!("expected AlreadyExist, got {other:?}"),
    }
    assert!(matches!(
        txn.insert(b"a".to_vec(), b"4".to_vec()),
        Err(Error::Mvcc(percolate_mvcc::Error::AlreadyExist { .. }))
    ));
    txn.commit().unwrap();
    assert_eq!(s.client.get_latest(b"h").unwrap(), Some(b"3".to_vec()));
    assert_eq!(s.client.get_latest(b"i").unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.client.get_latest(b"a").unwrap(), Some(b"2".to_vec()));
}

/// A GC round announces its safe point before it reads the registry of
/// live timestamps. An export whose ts is below it, begun in between
/// (registered too late for the round to see), is refused rather than
/// read while the round drops its versions; a snapshot registered in the
/// same window holds the round below it.
#[test]
fn an_export_racing_a_gc_round_is_refused_or_holds_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let gc = AutoGcConfig {
        enabled: false,
        life_time: Duration::ZERO,
        ..Default::default()
    };
    let client = Client::open_with(
        dir.path(),
        OpenOptions {
            client: ClientConfig {
                gc,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    let put = |value: &'static [u8]| {
        client
            .with_retry(|txn| {
                txn.put(b"k".to_vec(), value.to_vec());
                Ok(())
            })
            .unwrap()
    };
    put(b"v1");
    let old = client.current_ts().unwrap();
    put(b"v2");
    let out = tempfile::tempdir().unwrap();
    let mut export = None;
    let round = client
        .gc_round(|| export = Some(client.export_range(b"", None, old, out.path().join("e"))))
        .unwrap();
    match export.unwrap() {
        Err(Error::InvalidRequest { reason, .. }) => {
            assert!(reason.contains("safe point"), "{reason}")
        }
        other => panic!("expected the export refused, got {other:?}"),
    }
    assert!(round.safe_point > old, "{round:?}");

    put(b"v3");
    let held = client.current_ts().unwrap();
    let mut snapshot = None;
    let round = client
        .gc_round(|| snapshot = Some(client.snapshot(held)))
        .unwrap();
    assert!(round.advanced && round.safe_point < held, "{round:?}");
    assert_eq!(snapshot.unwrap().get(b"k").unwrap(), Some(b"v3".to_vec()));
    assert_eq!(client.gc_safe_point_announced(), round.safe_point);

    // A GC run at a given safe point announces it as a round does.
    let given = client.current_ts().unwrap();
    client.gc(given).unwrap();
    assert_eq!(client.gc_safe_point_announced(), given);
    let err = client
        .export_range(b"", None, held, out.path().join("f"))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRequest { .. }), "{err}");
}

/// A snapshot refused for being too far ahead of the clock, read again
/// once the clock has caught up: the read now passes the regions' limit,
/// and it must move the oracle past the snapshot's ts as a first read
/// would have. (It was decided once, when the snapshot was taken: the
/// later read raised `max_ts` far above the oracle, and a 1PC commit
/// computed above it was invisible to a transaction begun after it.)
#[test]
fn a_snapshot_read_once_the_clock_caught_up_moves_the_oracle_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let oracle: Arc<dyn TimestampOracle> =
        Arc::new(LocalOracle::open_with_clock(dir.path(), clock.clone()).unwrap());
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        max_ts_limit: Some(
            MaxTsLimit::new(oracle.clone(), MaxTsLimit::DEFAULT_ALLOWANCE)
                .with_wall_clock(clock.clone()),
        ),
        ..Default::default()
    };
    let cluster = Cluster::new(MemoryEngine::new(), Vec::new(), storage);
    let client = Client::new(cluster, oracle, ClientConfig::default());

    let ahead = TimeStamp::compose(1_090_000, 0);
    let snapshot = client.snapshot(ahead);
    for refused in [
        snapshot.get(b"k").map(drop),
        snapshot.batch_get(&[b"k"]).map(drop),
        snapshot.scan("a".."z").next().unwrap().map(drop),
    ] {
        assert!(
            matches!(refused, Err(Error::InvalidMaxTsUpdate { attempted_ts, .. }) if attempted_ts == ahead),
            "90 s ahead of the clock: {refused:?}"
        );
    }
    assert!(client.current_ts().unwrap() < ahead);

    clock.advance(40_000);
    assert_eq!(snapshot.get(b"k").unwrap(), None);
    assert!(
        client.current_ts().unwrap() > ahead,
        "the read moved the oracle"
    );
    let info = commit(&client, &[("k", "v")]);
    assert_eq!(info.protocol, CommitProtocol::OnePc, "{info:?}");
    assert!(info.commit_ts > ahead, "computed above the read: {info:?}");
    let txn = client.begin().unwrap();
    assert!(txn.start_ts() >= info.commit_ts, "{info:?}");
    assert_eq!(txn.get(b"k").unwrap(), Some(b"v".to_vec()));
    // A clone of the cleared snapshot reads without asking again.
    assert_eq!(snapshot.clone().get(b"k").unwrap(), None);
    // A snapshot at the largest ts reads the latest data (it raises no
    // `max_ts`, so the oracle need not move).
    let latest = client.snapshot(TimeStamp::max());
    assert_eq!(latest.get(b"k").unwrap(), Some(b"v".to_vec()));
    assert!(client.current_ts().unwrap().physical() < 1_200_000);
}

/// `Client::gc` failing part way, after it deleted in one region: the
/// safe point it gave stays announced through a later automatic round
/// that announces a lower one (an export at a ts between the two would
/// have read the region with its versions gone).
#[test]
fn a_gc_that_failed_part_way_stays_announced() {
    use percolate_engine::Durability;
    let (client, engine, _dir) = faulty_client(Durability::Buffered, ClientConfig::default());
    commit(&client, &[("a", "1"), ("h", "1")]);
    let between = client.current_ts().unwrap();
    commit(&client, &[("a", "2"), ("h", "2")]);
    let safe_point = client.current_ts().unwrap();
    engine.fail_writes_after(1, 1);
    assert!(matches!(client.gc(safe_point), Err(Error::Engine(_))));
    assert_eq!(client.gc_safe_point_announced(), safe_point);
    // The first region's old version went, the second's did not.
    let old = client.snapshot(between);
    assert_eq!(old.get(b"a").unwrap(), None);
    assert_eq!(old.get(b"h").unwrap(), Some(b"1".to_vec()));

    // An automatic round: ten minutes' life time puts its safe point far
    // below the one given.
    let round = client.gc_once().unwrap();
    assert!(round.safe_point < safe_point, "{round:?}");
    assert_eq!(client.gc_safe_point_announced(), safe_point);
}

/// An oracle that cannot be moved (its `advance_past` is the trait's
/// no-op): a snapshot ahead of it is refused, as a read there would raise
/// `max_ts` where the oracle does not follow.
#[test]
fn a_snapshot_ahead_of_an_oracle_that_cannot_move_is_refused() {
    struct Fixed(crate::oracle::CounterOracle);
    impl TimestampOracle for Fixed {
        fn get_ts(&self) -> Result<TimeStamp> {
            self.0.get_ts()
        }
        fn get_ts_batch(&self, count: u32) -> Result<TimeStamp> {
            self.0.get_ts_batch(count)
        }
    }
    let now_ms = crate::oracle::Clock::now_ms(&crate::oracle::SystemClock);
    let oracle = Arc::new(Fixed(crate::oracle::CounterOracle::new(
        TimeStamp::compose(now_ms, 0).into_inner(),
    )));
    let client = client_with(oracle, ClientConfig::default());
    let ahead = TimeStamp::compose(now_ms + 30_000, 0);
    assert!(matches!(
        client.snapshot(ahead).get(b"k"),
        Err(Error::InvalidMaxTsUpdate { attempted_ts, .. }) if attempted_ts == ahead
    ));
    // Behind the oracle: read as before.
    let behind = client.current_ts().unwrap();
    assert_eq!(client.snapshot(behind).get(b"k").unwrap(), None);
    // The oracle was asked once, above `behind`: another snapshot at or
    // below it asks nothing.
    let calls = client.metrics().oracle_calls;
    assert_eq!(client.snapshot(behind).get(b"k").unwrap(), None);
    assert_eq!(client.metrics().oracle_calls, calls);
}
