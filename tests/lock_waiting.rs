//! Pessimistic lock requests through the region's command API: waiting for
//! a lock until its holder releases it, the wait timeout, and deadlock
//! detection (two and three transactions, and across regions); then two
//! region commands that meet pessimistic or in-memory locks (ResolveLock,
//! ScanLock). Each test runs on the memory engine and on RocksDB.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Engine, MemoryEngine};
use percolate::mvcc::testing::ts;
use percolate::mvcc::{Error as MvccError, Key, Lock, LockType, WriteConflictReason};
use percolate::txn::Error;
use percolate::txn::actions::acquire_pessimistic_lock::PessimisticLockKeyResult;
use percolate::txn::actions::prewrite::{Mutation, PessimisticAction, TransactionKind};
use percolate::txn::cluster::Cluster;
use percolate::txn::commands::{AcquirePessimisticLock, Prewrite, ResolveLock, ResolveLockLite};
use percolate::txn::lock_wait::WaitForEntry;
use percolate::txn::metrics::LockWaitOutcome;
use percolate::txn::storage::{Storage, StorageConfig};

/// Long enough that a test never passes by timing out.
const LONG: Duration = Duration::from_secs(30);

fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

/// The engine under test; each test builds its storage or cluster over it.
struct Bare<E>(E);

impl<E> Bare<E> {
    fn new(engine: E) -> Self {
        Bare(engine)
    }
}

fn storage<E: Engine>(engine: E) -> Storage<E> {
    Storage::new(engine, StorageConfig::default())
}

/// A lock request of the transaction `start_ts` (primary: the key) at
/// `for_update_ts`, waiting up to `wait`.
fn lock_request(
    k: &[u8],
    start_ts: u64,
    for_update_ts: u64,
    wait: Duration,
) -> AcquirePessimisticLock {
    AcquirePessimisticLock::new(vec![key(k)], k.to_vec(), ts(start_ts), ts(for_update_ts))
        .wait_timeout(wait)
}

fn must_lock<E: Engine>(s: &Storage<E>, k: &[u8], start_ts: u64) {
    s.acquire_pessimistic_lock(lock_request(k, start_ts, start_ts, Duration::ZERO))
        .unwrap_or_else(|e| panic!("locking {k:?} for {start_ts}: {e}"));
}

fn lock_on<E: Engine>(s: &Storage<E>, k: &[u8]) -> Option<Lock> {
    s.mvcc_by_key(key(k)).unwrap().lock
}

/// The edges of the wait-for graph now.
fn edges<E: Engine>(s: &Storage<E>) -> Vec<WaitForEntry> {
    s.concurrency_manager().lock_waits().wait_for_edges()
}

/// Waits until the wait-for graph has `count` edges.
fn until_waiting<E: Engine>(s: &Storage<E>, count: usize) {
    let deadline = Instant::now() + LONG;
    while edges(s).len() < count {
        assert!(Instant::now() < deadline, "nobody started waiting");
        thread::sleep(Duration::from_millis(1));
    }
}

/// How many lock waits the storage's metrics counted with `outcome`, and
/// how long they took together.
fn waits_counted<E: Engine>(s: &Storage<E>, outcome: LockWaitOutcome) -> (u64, Duration) {
    let m = s.metrics().snapshot();
    let h = m.lock_wait(outcome).expect("every outcome is listed");
    (h.count, Duration::from_micros(h.sum_us))
}

/// Prewrites and commits the pessimistic transaction `start_ts` on `k`.
fn commit_pessimistic<E: Engine>(s: &Storage<E>, k: &[u8], start_ts: u64, commit_ts: u64) {
    let mut prewrite = Prewrite::new(
        vec![
            Mutation::put(key(k), b"v".to_vec())
                .with_pessimistic_action(PessimisticAction::DoPessimisticCheck),
        ],
        k.to_vec(),
        ts(start_ts),
    );
    prewrite.props.kind = TransactionKind::Pessimistic {
        for_update_ts: ts(start_ts),
    };
    s.prewrite(prewrite).unwrap();
    s.commit(vec![key(k)], ts(start_ts), ts(commit_ts)).unwrap();
}

/// A request that meets another transaction's lock waits until the lock
/// is rolled back, then takes it.
fn a_waiter_takes_the_lock_once_it_is_released<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    must_lock(&s, b"k", 10);
    thread::scope(|scope| {
        let waiter = scope.spawn(|| s.acquire_pessimistic_lock(lock_request(b"k", 20, 20, LONG)));
        until_waiting(&s, 1);
        assert_eq!(
            edges(&s),
            vec![WaitForEntry {
                txn: ts(20),
                wait_for_txn: ts(10),
                key_hash: percolate::txn::lock_wait::key_hash(&key(b"k")),
                key: b"k".to_vec(),
            }]
        );
        assert!(!waiter.is_finished());
        s.pessimistic_rollback(vec![key(b"k")], ts(10), ts(10))
            .unwrap();
        assert_eq!(
            waiter.join().unwrap().unwrap(),
            vec![PessimisticLockKeyResult::Empty]
        );
    });
    assert_eq!(lock_on(&s, b"k").unwrap().ts, ts(20));
    assert!(edges(&s).is_empty());
    // One wait, ended by the release, counted in the metrics.
    assert_eq!(waits_counted(&s, LockWaitOutcome::Released).0, 1);
    assert_eq!(s.metrics().snapshot().lock_waits_total(), 1);
}

/// A waiter woken by a commit above its for_update_ts fails with a
/// PessimisticRetry conflict (the statement retries with a newer
/// for_update_ts); one whose for_update_ts is above the commit locks.
fn a_waiter_woken_by_a_commit<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    for (k, waiter_for_update_ts) in [(&b"a"[..], 20), (b"b", 40)] {
        must_lock(&s, k, 10);
        thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                s.acquire_pessimistic_lock(lock_request(k, 20, waiter_for_update_ts, LONG))
            });
            until_waiting(&s, 1);
            commit_pessimistic(&s, k, 10, 30);
            match waiter.join().unwrap() {
                Err(e) if waiter_for_update_ts < 30 => match e.as_mvcc() {
                    Some(MvccError::WriteConflict {
                        conflict_start_ts,
                        conflict_commit_ts,
                        reason,
                        ..
                    }) => {
                        assert_eq!((*conflict_start_ts, *conflict_commit_ts), (ts(10), ts(30)));
                        assert_eq!(*reason, WriteConflictReason::PessimisticRetry);
                    }
                    _ => panic!("expected a PessimisticRetry conflict, got {e}"),
                },
                Ok(_) if waiter_for_update_ts > 30 => {
                    assert_eq!(lock_on(&s, k).unwrap().ts, ts(20));
                }
                other => panic!("unexpected answer {other:?}"),
            }
        });
    }
}

/// A waiter allowed to lock with conflict, woken by a commit above its
/// for_update_ts, takes the lock in the same request, at the commit's ts,
/// with the committed value; a request of several keys may not ask for it.
fn a_waiter_woken_by_a_commit_locks_with_conflict<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    must_lock(&s, b"k", 10);
    thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            s.acquire_pessimistic_lock(lock_request(b"k", 20, 20, LONG).allow_lock_with_conflict())
        });
        until_waiting(&s, 1);
        commit_pessimistic(&s, b"k", 10, 30);
        assert_eq!(
            waiter.join().unwrap().unwrap(),
            vec![PessimisticLockKeyResult::LockedWithConflict {
                value: Some(b"v".to_vec()),
                conflict_ts: ts(30),
            }]
        );
    });
    let lock = lock_on(&s, b"k").unwrap();
    assert_eq!((lock.ts, lock.for_update_ts), (ts(20), ts(30)));
    assert!(lock.is_locked_with_conflict);
    assert!(edges(&s).is_empty());

    let two =
        AcquirePessimisticLock::new(vec![key(b"x"), key(b"y")], b"x".to_vec(), ts(40), ts(40))
            .allow_lock_with_conflict();
    assert!(matches!(
        s.acquire_pessimistic_lock(two),
        Err(Error::InvalidRequest { .. })
    ));
    assert!(lock_on(&s, b"x").is_none());
}

/// Without a release the wait ends at its timeout, with the lock it met;
/// a request without a timeout does not wait at all.
fn a_wait_times_out_with_the_lock<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    must_lock(&s, b"k", 10);
    for wait in [Duration::from_millis(30), Duration::ZERO] {
        let started = Instant::now();
        let err = s
            .acquire_pessimistic_lock(lock_request(b"k", 20, 20, wait))
            .unwrap_err();
        assert!(started.elapsed() >= wait);
        match err.as_mvcc() {
            Some(MvccError::KeyIsLocked(info)) => assert_eq!(info.lock_version, ts(10)),
            _ => panic!("expected KeyIsLocked, got {err}"),
        }
    }
    let mut no_wait = lock_request(b"k", 20, 20, LONG);
    no_wait.wait_timeout = None;
    assert!(s.acquire_pessimistic_lock(no_wait).is_err());
    assert_eq!(lock_on(&s, b"k").unwrap().ts, ts(10));
    assert!(edges(&s).is_empty());
    // The metrics count the one wait that had time to wait, for that time.
    let (timed_out, took) = waits_counted(&s, LockWaitOutcome::TimedOut);
    assert_eq!(timed_out, 1);
    assert!(took >= Duration::from_millis(30), "{took:?}");
    assert_eq!(s.metrics().snapshot().lock_waits_total(), 1);
}

/// A request for a key another transaction holds waits at once, without
/// running its command first (no latches, no command counted until the
/// run after the wait), yet as the command would have: a request that
/// reads raises `max_ts` to its for_update_ts, and the wait ends with the
/// lock it met. A request that would fail for another reason (here: a key
/// outside the region) runs, and fails as before.
fn a_request_for_a_held_key_waits_before_running<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    must_lock(&s, b"k", 10);
    let runs = |s: &Storage<E>| {
        let m = s.metrics().snapshot();
        let c = m.command(percolate::txn::metrics::CommandKind::AcquirePessimisticLock);
        c.map(|c| (c.ok, c.failed)).unwrap_or_default()
    };
    let before = runs(&s);
    let err = s
        .acquire_pessimistic_lock(
            lock_request(b"k", 20, 30, Duration::from_millis(20)).return_values(),
        )
        .unwrap_err();
    match err.as_mvcc() {
        Some(MvccError::KeyIsLocked(info)) => assert_eq!(info.lock_version, ts(10)),
        _ => panic!("expected KeyIsLocked, got {err}"),
    }
    assert_eq!(
        runs(&s),
        before,
        "the request ran although the key was held"
    );
    assert_eq!(s.concurrency_manager().max_ts(), ts(30));
    // Once the holder is gone the request runs, and takes the lock.
    thread::scope(|scope| {
        let waiter = scope.spawn(|| s.acquire_pessimistic_lock(lock_request(b"k", 20, 40, LONG)));
        until_waiting(&s, 1);
        s.pessimistic_rollback(vec![key(b"k")], ts(10), ts(10))
            .unwrap();
        waiter.join().unwrap().unwrap();
    });
    assert_eq!(lock_on(&s, b"k").unwrap().ts, ts(20));
    assert_eq!(runs(&s), (before.0 + 1, before.1), "one run after the wait");

    let bounded = Storage::new(
        s.engine().clone(),
        StorageConfig {
            key_range: Some(percolate::txn::storage::KeyRange {
                start: b"a".to_vec(),
                end: Some(b"b".to_vec()),
            }),
            ..StorageConfig::default()
        },
    );
    let err = bounded
        .acquire_pessimistic_lock(lock_request(b"k", 50, 50, LONG))
        .unwrap_err();
    assert!(
        !matches!(err.as_mvcc(), Some(MvccError::KeyIsLocked(_))),
        "{err}"
    );
}

/// The chain of a `Deadlock` as (txn, wait_for_txn, key) triples.
fn deadlock_chain(err: &Error, start: u64, lock: u64) -> Vec<(u64, u64, Vec<u8>)> {
    match err {
        Error::Deadlock {
            start_ts,
            lock_ts,
            wait_chain,
            deadlock_key_hash,
            ..
        } => {
            assert_eq!((*start_ts, *lock_ts), (ts(start), ts(lock)));
            // The last edge is the request's own; the key hash is that of
            // the edge before it, the wait for the requester's lock.
            let last = wait_chain.last().expect("a chain");
            assert_eq!((last.txn, last.wait_for_txn), (ts(start), ts(lock)));
            assert_eq!(
                *deadlock_key_hash,
                wait_chain[wait_chain.len() - 2].key_hash
            );
            wait_chain
                .iter()
                .map(|e| {
                    (
                        e.txn.into_inner(),
                        e.wait_for_txn.into_inner(),
                        e.key.clone(),
                    )
                })
                .collect()
        }
        other => panic!("expected Deadlock, got {other}"),
    }
}

/// Two transactions each wait for the other's lock: the second request
/// fails at once with `Deadlock`; once it rolls back, the first goes on.
fn a_two_party_deadlock_is_detected<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    must_lock(&s, b"a", 10);
    must_lock(&s, b"b", 20);
    thread::scope(|scope| {
        let first = scope.spawn(|| s.acquire_pessimistic_lock(lock_request(b"b", 10, 10, LONG)));
        until_waiting(&s, 1);
        let started = Instant::now();
        let err = s
            .acquire_pessimistic_lock(lock_request(b"a", 20, 20, LONG))
            .unwrap_err();
        assert!(started.elapsed() < LONG / 2, "the deadlock was waited out");
        assert_eq!(
            deadlock_chain(&err, 20, 10),
            vec![(10, 20, b"b".to_vec()), (20, 10, b"a".to_vec())]
        );
        assert!(err.is_retryable());
        s.pessimistic_rollback(vec![key(b"b")], ts(20), ts(20))
            .unwrap();
        first.join().unwrap().unwrap();
    });
    assert_eq!(lock_on(&s, b"b").unwrap().ts, ts(10));
    // The refused wait and the one that ended by the rollback.
    assert_eq!(waits_counted(&s, LockWaitOutcome::Deadlock).0, 1);
    assert_eq!(waits_counted(&s, LockWaitOutcome::Released).0, 1);
}

/// Three transactions in a ring: the request closing it fails naming the
/// two others' waits; a request that closes no cycle waits, then proceeds.
fn a_three_party_deadlock_is_detected<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    for (k, start) in [(&b"a"[..], 10), (b"b", 20), (b"c", 30)] {
        must_lock(&s, k, start);
    }
    thread::scope(|scope| {
        let ten = scope.spawn(|| s.acquire_pessimistic_lock(lock_request(b"b", 10, 10, LONG)));
        until_waiting(&s, 1);
        let twenty = scope.spawn(|| s.acquire_pessimistic_lock(lock_request(b"c", 20, 20, LONG)));
        until_waiting(&s, 2);
        let err = s
            .acquire_pessimistic_lock(lock_request(b"a", 30, 30, LONG))
            .unwrap_err();
        assert_eq!(
            deadlock_chain(&err, 30, 10),
            vec![
                (10, 20, b"b".to_vec()),
                (20, 30, b"c".to_vec()),
                (30, 10, b"a".to_vec())
            ]
        );
        // 30 gives up: 20 gets c, then rolls back, and 10 gets b.
        s.pessimistic_rollback(vec![key(b"c")], ts(30), ts(30))
            .unwrap();
        twenty.join().unwrap().unwrap();
        assert_eq!(lock_on(&s, b"c").unwrap().ts, ts(20));
        assert!(!ten.is_finished());
        s.pessimistic_rollback(vec![key(b"b"), key(b"c")], ts(20), ts(20))
            .unwrap();
        ten.join().unwrap().unwrap();
    });
    assert_eq!(lock_on(&s, b"b").unwrap().ts, ts(10));
}

/// The regions of a cluster share one wait table: a cycle through two
/// regions is found as one within a region is.
fn a_deadlock_across_regions_is_detected<E: Engine>(Bare(engine): Bare<E>) {
    let cluster = Cluster::new(engine, vec![b"m".to_vec()], StorageConfig::default());
    let left = cluster.region_for(b"a").storage();
    let right = cluster.region_for(b"x").storage();
    must_lock(left, b"a", 10);
    must_lock(right, b"x", 20);
    thread::scope(|scope| {
        let first =
            scope.spawn(|| right.acquire_pessimistic_lock(lock_request(b"x", 10, 10, LONG)));
        until_waiting(left, 1);
        let err = left
            .acquire_pessimistic_lock(lock_request(b"a", 20, 20, LONG))
            .unwrap_err();
        assert_eq!(
            deadlock_chain(&err, 20, 10),
            vec![(10, 20, b"x".to_vec()), (20, 10, b"a".to_vec())]
        );
        right
            .pessimistic_rollback(vec![key(b"x")], ts(20), ts(20))
            .unwrap();
        first.join().unwrap().unwrap();
    });
}

/// ResolveLock commits the locks its read found; a pessimistic one that is
/// gone by the time it writes is skipped, where ResolveLockLite reports
/// `TxnLockNotFound`.
fn resolve_lock_skips_a_pessimistic_lock_gone_since_its_read<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    let seen = Lock {
        for_update_ts: ts(10),
        ..Lock::new(LockType::Pessimistic, b"k".to_vec(), ts(10), 3000)
    };
    let resolved = s
        .write(ResolveLock {
            key_locks: vec![(key(b"k"), seen.clone())],
            start_ts: ts(10),
            commit_ts: ts(20),
        })
        .unwrap();
    assert!(resolved.is_empty());
    let err = s
        .write(ResolveLockLite {
            keys: vec![key(b"k")],
            start_ts: ts(10),
            commit_ts: ts(20),
        })
        .unwrap_err();
    assert!(
        matches!(err.as_mvcc(), Some(MvccError::TxnLockNotFound { .. })),
        "{err}"
    );
    // A prewrite lock that disappeared is still an error.
    let prewritten = Lock {
        lock_type: LockType::Put,
        ..seen
    };
    assert!(
        s.write(ResolveLock {
            key_locks: vec![(key(b"k"), prewritten)],
            start_ts: ts(10),
            commit_ts: ts(20),
        })
        .is_err()
    );
}

/// ScanLock fails with `KeyIsLocked` on an in-memory lock (an async-commit
/// or 1PC prewrite in flight) at or below its max_ts, having raised max_ts
/// first (TiKV issue 9526).
fn scan_lock_fails_on_a_memory_lock_below_its_ts<E: Engine>(Bare(engine): Bare<E>) {
    let s = storage(engine);
    let cm = s.concurrency_manager();
    let guards = cm.lock_keys([key(b"m")]);
    guards[0].set_lock(Lock::new(LockType::Put, b"m".to_vec(), ts(10), 3000));
    let err = s.scan_lock(None, None, ts(20), 0).unwrap_err();
    match err.as_mvcc() {
        Some(MvccError::KeyIsLocked(info)) => {
            assert_eq!(
                (info.key.as_slice(), info.lock_version),
                (&b"m"[..], ts(10))
            );
        }
        _ => panic!("expected KeyIsLocked, got {err}"),
    }
    assert_eq!(cm.max_ts(), ts(20));
    assert!(s.scan_lock(None, None, ts(5), 0).unwrap().is_empty());
    assert!(
        s.scan_lock(Some(key(b"n")), None, ts(20), 0)
            .unwrap()
            .is_empty()
    );
    drop(guards);
    assert!(s.scan_lock(None, None, ts(20), 0).unwrap().is_empty());
}

/// `lock_only_if_exists` without `return_value` is refused at once with
/// `LockIfExistsFailed` (TiKV's D7), also by a request that would
/// otherwise wait for another transaction's lock on its key first.
fn lock_only_if_exists_without_a_value_fails_at_once_even_on_a_held_key<E: Engine>(
    Bare(engine): Bare<E>,
) {
    let s = storage(engine);
    must_lock(&s, b"k", 10);
    let mut request = lock_request(b"k", 20, 20, LONG);
    request.options.lock_only_if_exists = true;
    let started = Instant::now();
    match s.acquire_pessimistic_lock(request) {
        Err(Error::Mvcc(MvccError::LockIfExistsFailed { start_ts, key: k })) => {
            assert_eq!((start_ts, k), (ts(20), key(b"k")));
        }
        other => panic!("expected LockIfExistsFailed, got {other:?}"),
    }
    assert!(started.elapsed() < LONG / 2, "it waited");
    assert!(edges(&s).is_empty());
    assert_eq!(lock_on(&s, b"k").unwrap().ts, ts(10));
}

on_both_engines!(
    Bare;
    lock_only_if_exists_without_a_value_fails_at_once_even_on_a_held_key,
    a_waiter_takes_the_lock_once_it_is_released,
    a_waiter_woken_by_a_commit,
    a_waiter_woken_by_a_commit_locks_with_conflict,
    a_wait_times_out_with_the_lock,
    a_request_for_a_held_key_waits_before_running,
    a_two_party_deadlock_is_detected,
    a_three_party_deadlock_is_detected,
    a_deadlock_across_regions_is_detected,
    resolve_lock_skips_a_pessimistic_lock_gone_since_its_read,
    scan_lock_fails_on_a_memory_lock_below_its_ts,
);
