//! Fault injection through the fail points of `percolate::txn::fail` and
//! the test engine `FaultyEngine`, on RocksDB over three regions
//! `[.., "g")`, `["g", "p")`, `["p", ..)`, the oracle on a manual clock so
//! that a dead client's locks can be made to expire.
//!
//! Each test stops a commit at one step of the protocol — after some
//! prewrite batches, after all of them, after the primary's commit, in the
//! middle of the secondaries' commits, or in a region (a command that
//! fails before its write, a command that panics, an engine write that
//! fails) — then checks that later readers and writers resolve what was
//! left: the transaction is rolled forward or back, never half visible (a
//! reader sees all of its writes or none), a later writer of the same keys
//! succeeds, and no lock remains once resolved.
//!
//! A client "dies" with [`Action::Die`]: the commit returns
//! `Error::FailPoint` and runs no cleanup, exactly the state a killed
//! process leaves. Fail points are process-wide: every test holds a
//! [`fail::scenario`], which serializes them.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use percolate::engine::{Engine, RocksEngine};
use percolate::mvcc::{Key, TimeStamp};
use percolate::txn::cluster::Cluster;
use percolate::txn::fail::{self, Action};
use percolate::txn::oracle::{Clock, LocalOracle, ManualClock, TimestampOracle};
use percolate::txn::storage::StorageConfig;
use percolate::txn::testing::FaultyEngine;
use percolate::{Client, ClientConfig, Error};
use rand::Rng;
use tempfile::TempDir;

/// The split keys: regions `[.., "g")`, `["g", "p")`, `["p", ..)`.
fn split_keys() -> Vec<Vec<u8>> {
    vec![b"g".to_vec(), b"p".to_vec()]
}

/// A client over three regions of one engine, its oracle on a manual clock.
struct Db<E: Engine = RocksEngine> {
    client: Client<E>,
    clock: Arc<ManualClock>,
    _dir: TempDir,
}

fn open_on<E: Engine>(dir: TempDir, engine: E, config: ClientConfig) -> Db<E> {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let oracle = Arc::new(LocalOracle::open_with_clock(dir.path(), clock.clone()).unwrap());
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..Default::default()
    };
    let cluster = Cluster::new(engine, split_keys(), storage);
    Db {
        client: Client::new(cluster, oracle, config),
        clock,
        _dir: dir,
    }
}

fn rocks(dir: &Path) -> RocksEngine {
    RocksEngine::open(dir.join("db")).unwrap()
}

fn open(config: ClientConfig) -> Db {
    let dir = tempfile::tempdir().unwrap();
    let engine = rocks(dir.path());
    open_on(dir, engine, config)
}

/// A client over RocksDB behind a [`FaultyEngine`], with the engine to
/// make its writes fail.
fn open_faulty(config: ClientConfig) -> (FaultyEngine<RocksEngine>, Db<FaultyEngine<RocksEngine>>) {
    let dir = tempfile::tempdir().unwrap();
    let engine = FaultyEngine::new(rocks(dir.path()));
    let db = open_on(dir, engine.clone(), config);
    (engine, db)
}

/// 2PC for every transaction of more than one batch.
fn two_pc() -> ClientConfig {
    ClientConfig {
        async_commit: false,
        ..Default::default()
    }
}

/// 2PC, with a lock TTL long enough that no heart beat (a write command,
/// which would meet the scheduler's fail points) is sent during a test.
fn quiet_two_pc() -> ClientConfig {
    ClientConfig {
        lock_ttl_ms: 30_000,
        ..two_pc()
    }
}

/// Async commit for every transaction of more than one batch.
fn async_commit() -> ClientConfig {
    ClientConfig::default()
}

impl<E: Engine> Db<E> {
    /// Moves the clock past every lock's TTL and waits until the oracle
    /// follows (its ticker runs every millisecond).
    fn expire_locks(&self) {
        self.clock.advance(60_000);
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.client.oracle().get_ts().unwrap().physical() < self.clock.now_ms() {
            assert!(Instant::now() < deadline, "the oracle never followed");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until every region has answered every command sent (the
    /// commands a client sends without waiting: secondary commits,
    /// cleanups).
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(3);
        for region in self.client.cluster().regions() {
            while region.storage().scheduler().in_flight() > 0 {
                assert!(
                    Instant::now() < deadline,
                    "region {} never idle",
                    region.id()
                );
                thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// The raw keys locked now, in every region.
    fn locked_keys(&self) -> Vec<String> {
        self.settle();
        let mut keys = Vec::new();
        for region in self.client.cluster().regions() {
            let locks = region
                .storage()
                .scan_lock(
                    Some(Key::from_raw(region.start_key())),
                    region.end_key().map(Key::from_raw),
                    TimeStamp::max(),
                    0,
                )
                .unwrap();
            keys.extend(
                locks
                    .into_iter()
                    .map(|l| String::from_utf8(l.key.clone()).unwrap()),
            );
        }
        keys
    }

    /// Commits `key = value` for each key, and waits for the commit
    /// records sent in the background (so that they do not meet a fail
    /// point configured next).
    fn write(&self, keys: &[&str], value: &str) {
        let mut txn = self.client.begin().unwrap();
        for k in keys {
            txn.put(k.as_bytes(), value.as_bytes());
        }
        txn.commit().unwrap();
        self.settle();
    }

    /// The values of `keys` in one new snapshot, by point reads (the last
    /// key first, so secondaries are met before the primary) and by a scan,
    /// which must agree.
    fn read(&self, keys: &[&str]) -> Vec<String> {
        let txn = self.client.begin().unwrap();
        let mut values: Vec<String> = keys
            .iter()
            .rev()
            .map(|k| {
                let v = txn.get(k.as_bytes()).unwrap().unwrap_or_default();
                String::from_utf8(v).unwrap()
            })
            .collect();
        values.reverse();
        let scanned: Vec<String> = keys
            .iter()
            .map(|k| {
                let v = txn
                    .scan(k.as_bytes()..)
                    .take(1)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .unwrap()
                    .into_iter()
                    .find(|(key, _)| key == k.as_bytes())
                    .map(|(_, v)| v)
                    .unwrap_or_default();
                String::from_utf8(v).unwrap()
            })
            .collect();
        assert_eq!(values, scanned, "point reads and scans disagree");
        values
    }
}

/// The keys the tests write: the primary "a" and "b" in the first region,
/// "h" in the second, "q" in the third.
const KEYS: [&str; 4] = ["a", "b", "h", "q"];

/// Commits "old" everywhere, then configures a fail point with `arm` and
/// commits a transaction writing "new" to [`KEYS`], which meets it;
/// returns the commit's error.
fn doomed_commit<E: Engine>(db: &Db<E>, arm: impl FnOnce()) -> Error {
    db.write(&KEYS, "old");
    arm();
    let mut txn = db.client.begin().unwrap();
    for k in KEYS {
        txn.put(k.as_bytes(), b"new".to_vec());
    }
    txn.commit().unwrap_err()
}

fn assert_died(err: &Error, point: &str) {
    assert!(
        matches!(err, Error::FailPoint { name, action: Action::Die } if *name == point),
        "{err:?}"
    );
}

/// After the left-behind state was resolved: nothing locked, and a new
/// writer of the same keys commits and is read back.
fn assert_writable<E: Engine>(db: &Db<E>) {
    assert_eq!(db.locked_keys(), Vec::<String>::new());
    db.write(&KEYS, "later");
    assert_eq!(db.read(&KEYS), ["later"; 4]);
    assert_eq!(db.locked_keys(), Vec::<String>::new());
}

/// The transaction left locks that expire: once they have, it is rolled
/// back.
fn assert_rolled_back_after_expiry<E: Engine>(db: &Db<E>) {
    db.expire_locks();
    assert_eq!(db.read(&KEYS), ["old"; 4]);
    assert_writable(db);
}

// ---------------------------------------------------------------------------
// Client deaths.

#[test]
fn death_after_the_primary_batch_of_a_2pc_prewrite_is_rolled_back() {
    let _scenario = fail::scenario();
    let db = open(two_pc());
    let err = doomed_commit(&db, || {
        fail::cfg_thread(fail::CLIENT_PREWRITE_BATCH, Action::Die, 0, Some(1))
    });
    assert_died(&err, fail::CLIENT_PREWRITE_BATCH);
    // The first batch (region 1: "a", "b") is locked, the others never sent.
    assert_eq!(db.locked_keys(), ["a", "b"]);
    // Before the locks expire a reader pushes the live-looking transaction
    // and reads around it.
    assert_eq!(db.read(&KEYS), ["old"; 4]);
    assert_rolled_back_after_expiry(&db);
}

#[test]
fn death_after_two_of_three_async_commit_batches_is_rolled_back() {
    let _scenario = fail::scenario();
    let db = open(async_commit());
    let err = doomed_commit(&db, || {
        fail::cfg_thread(fail::CLIENT_PREWRITE_BATCH, Action::Die, 1, Some(1))
    });
    assert_died(&err, fail::CLIENT_PREWRITE_BATCH);
    // "q" was never prewritten although the primary lists it.
    assert_eq!(db.locked_keys(), ["a", "b", "h"]);
    assert_rolled_back_after_expiry(&db);
}

#[test]
fn death_after_the_primary_batch_of_an_async_commit_is_rolled_back() {
    let _scenario = fail::scenario();
    let db = open(async_commit());
    assert_died(
        &doomed_commit(&db, || {
            fail::cfg_thread(fail::CLIENT_PREWRITE_BATCH, Action::Die, 0, Some(1))
        }),
        fail::CLIENT_PREWRITE_BATCH,
    );
    assert_eq!(db.locked_keys(), ["a", "b"]);
    assert_rolled_back_after_expiry(&db);
}

#[test]
fn death_after_all_2pc_prewrites_is_rolled_back() {
    let _scenario = fail::scenario();
    let db = open(two_pc());
    assert_died(
        &doomed_commit(&db, || {
            fail::cfg_thread(fail::CLIENT_PREWRITE_ALL, Action::Die, 0, Some(1))
        }),
        fail::CLIENT_PREWRITE_ALL,
    );
    assert_eq!(db.locked_keys(), KEYS);
    assert_rolled_back_after_expiry(&db);
}

#[test]
fn death_after_all_async_commit_prewrites_is_committed() {
    let _scenario = fail::scenario();
    let db = open(async_commit());
    assert_died(
        &doomed_commit(&db, || {
            fail::cfg_thread(fail::CLIENT_PREWRITE_ALL, Action::Die, 0, Some(1))
        }),
        fail::CLIENT_PREWRITE_ALL,
    );
    assert_eq!(db.locked_keys(), KEYS);
    // Every key is prewritten: the transaction is committed, and once its
    // primary lock expired, readers find that out from the secondaries.
    db.expire_locks();
    assert_eq!(db.read(&KEYS), ["new"; 4]);
    assert_writable(&db);
}

#[test]
fn death_after_a_one_pc_commit_leaves_it_committed() {
    let _scenario = fail::scenario();
    let db = open(async_commit());
    db.write(&["a", "b"], "old");
    fail::cfg_thread(fail::CLIENT_PREWRITE_ALL, Action::Die, 0, Some(1));
    let mut txn = db.client.begin().unwrap();
    txn.put(b"a".to_vec(), b"new".to_vec());
    txn.put(b"b".to_vec(), b"new".to_vec());
    assert_died(&txn.commit().unwrap_err(), fail::CLIENT_PREWRITE_ALL);
    assert_eq!(db.locked_keys(), Vec::<String>::new());
    assert_eq!(db.read(&["a", "b"]), ["new", "new"]);
}

#[test]
fn death_after_the_2pc_primary_commit_is_rolled_forward() {
    let _scenario = fail::scenario();
    let db = open(two_pc());
    assert_died(
        &doomed_commit(&db, || {
            fail::cfg_thread(fail::CLIENT_COMMIT_PRIMARY, Action::Die, 0, Some(1))
        }),
        fail::CLIENT_COMMIT_PRIMARY,
    );
    assert_eq!(db.locked_keys(), ["b", "h", "q"]);
    // No expiry needed: the committed primary decides.
    assert_eq!(db.read(&KEYS), ["new"; 4]);
    assert_writable(&db);
}

#[test]
fn death_in_the_middle_of_2pc_secondary_commits_is_rolled_forward() {
    let _scenario = fail::scenario();
    let db = open(two_pc());
    // The first region's secondaries ("b") are sent, the others are not.
    assert_died(
        &doomed_commit(&db, || {
            fail::cfg_thread(fail::CLIENT_COMMIT_SECONDARIES, Action::Die, 0, Some(1))
        }),
        fail::CLIENT_COMMIT_SECONDARIES,
    );
    assert_eq!(db.locked_keys(), ["h", "q"]);
    assert_eq!(db.read(&KEYS), ["new"; 4]);
    assert_writable(&db);
}

#[test]
fn death_in_the_middle_of_async_commit_secondary_commits_is_rolled_forward() {
    let _scenario = fail::scenario();
    let db = open(async_commit());
    // Regions 1 and 2 get their commits, region 3 does not.
    assert_died(
        &doomed_commit(&db, || {
            fail::cfg_thread(fail::CLIENT_COMMIT_SECONDARIES, Action::Die, 1, Some(1))
        }),
        fail::CLIENT_COMMIT_SECONDARIES,
    );
    assert_eq!(db.locked_keys(), ["q"]);
    db.expire_locks();
    assert_eq!(db.read(&KEYS), ["new"; 4]);
    assert_writable(&db);
}

#[test]
fn an_error_before_the_commit_point_cleans_up_at_once() {
    let _scenario = fail::scenario();
    let db = open(two_pc());
    // `Return`, not `Die`: the client is alive and unlocks what it locked.
    let err = doomed_commit(&db, || {
        fail::cfg_thread(fail::CLIENT_PREWRITE_BATCH, Action::Return, 1, Some(1))
    });
    assert!(
        matches!(
            err,
            Error::FailPoint {
                action: Action::Return,
                ..
            }
        ),
        "{err:?}"
    );
    // No clock advance: the locks are gone already.
    assert_eq!(db.locked_keys(), Vec::<String>::new());
    assert_eq!(db.read(&KEYS), ["old"; 4]);
    assert_writable(&db);
}

#[test]
fn an_error_after_the_commit_point_leaves_the_transaction_committed() {
    let _scenario = fail::scenario();
    let db = open(two_pc());
    // An ordinary error after the primary committed must not unlock the
    // secondaries of a committed transaction.
    let err = doomed_commit(&db, || {
        fail::cfg_thread(fail::CLIENT_COMMIT_PRIMARY, Action::Return, 0, Some(1))
    });
    assert!(matches!(err, Error::FailPoint { .. }), "{err:?}");
    assert_eq!(db.read(&KEYS), ["new"; 4]);
    assert_writable(&db);
}

// ---------------------------------------------------------------------------
// Region failures.

#[test]
fn a_prewrite_failing_before_its_write_fails_the_commit_and_writes_nothing() {
    let _scenario = fail::scenario();
    let db = open(quiet_two_pc());
    db.write(&KEYS, "old");
    fail::cfg_with(fail::SCHED_BEFORE_WRITE, Action::Return, 0, Some(1));
    let mut txn = db.client.begin().unwrap();
    for k in KEYS {
        txn.put(k.as_bytes(), b"new".to_vec());
    }
    let err = txn.commit().unwrap_err();
    assert!(
        matches!(
            err,
            Error::FailPoint {
                name: fail::SCHED_BEFORE_WRITE,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(db.locked_keys(), Vec::<String>::new());
    assert_eq!(db.read(&KEYS), ["old"; 4]);
    assert_writable(&db);
}

#[test]
fn a_failed_primary_commit_fails_the_transaction_whole() {
    let _scenario = fail::scenario();
    let db = open(quiet_two_pc());
    db.write(&KEYS, "old");
    // Three prewrites pass, the primary's commit fails.
    fail::cfg_with(fail::SCHED_BEFORE_WRITE, Action::Return, 3, Some(1));
    let mut txn = db.client.begin().unwrap();
    for k in KEYS {
        txn.put(k.as_bytes(), b"new".to_vec());
    }
    let err = txn.commit().unwrap_err();
    assert!(matches!(err, Error::FailPoint { .. }), "{err:?}");
    assert_eq!(db.locked_keys(), Vec::<String>::new());
    assert_eq!(db.read(&KEYS), ["old"; 4]);
    assert_writable(&db);
}

#[test]
fn a_command_that_panics_is_aborted_and_releases_its_latches() {
    let _scenario = fail::scenario();
    let db = open(quiet_two_pc());
    db.write(&KEYS, "old");
    fail::cfg_with(fail::SCHED_PROCESS, Action::Panic, 0, Some(1));
    let mut txn = db.client.begin().unwrap();
    for k in KEYS {
        txn.put(k.as_bytes(), b"new".to_vec());
    }
    let err = txn.commit().unwrap_err();
    assert!(matches!(err, Error::Aborted { .. }), "{err:?}");
    // Latches and memory locks were released: the same keys are writable.
    assert_eq!(db.read(&KEYS), ["old"; 4]);
    assert_writable(&db);
}

#[test]
fn engine_write_failures_fail_commits_and_leave_nothing_half_done() {
    let _scenario = fail::scenario();
    let (engine, db) = open_faulty(two_pc());
    db.write(&KEYS, "old");
    for failing in 1..=3 {
        engine.fail_next_writes(failing);
        let mut txn = db.client.begin().unwrap();
        for k in KEYS {
            txn.put(k.as_bytes(), b"new".to_vec());
        }
        let err = txn.commit().unwrap_err();
        assert!(matches!(err, Error::Engine(_)), "{err:?}");
        engine.fail_next_writes(0);
        // Unlocks of the prewrites that succeeded ran, or may themselves
        // have failed: then the locks expire.
        db.settle();
        assert_eq!(db.read(&KEYS), ["old"; 4], "{failing} failed writes");
    }
    db.expire_locks();
    assert_eq!(db.read(&KEYS), ["old"; 4]);
    assert_writable(&db);
}

// ---------------------------------------------------------------------------
// The bank invariant with client deaths.

/// Accounts spread over the three regions.
const ACCOUNTS: [&str; 9] = ["c1", "c2", "c3", "k1", "k2", "k3", "t1", "t2", "t3"];
const BALANCE: u64 = 100;

fn balance(value: Option<Vec<u8>>) -> u64 {
    String::from_utf8(value.expect("every account exists"))
        .unwrap()
        .parse()
        .unwrap()
}

/// The client fail points a transfer may die at.
const DEATHS: [&str; 4] = [
    fail::CLIENT_PREWRITE_BATCH,
    fail::CLIENT_PREWRITE_ALL,
    fail::CLIENT_COMMIT_PRIMARY,
    fail::CLIENT_COMMIT_SECONDARIES,
];

/// One transfer among two or three random accounts; every third
/// transaction dies at a random fail point. Returns whether it committed
/// for sure.
fn transfer(client: &Client, rng: &mut impl Rng) -> bool {
    let n = rng.random_range(2..=3);
    let mut accounts: Vec<&str> = Vec::new();
    while accounts.len() < n {
        let a = ACCOUNTS[rng.random_range(0..ACCOUNTS.len())];
        if !accounts.contains(&a) {
            accounts.push(a);
        }
    }
    let die = rng
        .random_ratio(1, 3)
        .then(|| DEATHS[rng.random_range(0..DEATHS.len())]);
    if let Some(point) = die {
        fail::cfg_thread(point, Action::Die, rng.random_range(0..2), Some(1));
    }
    let outcome = (|| {
        let mut txn = client.begin()?;
        let mut balances = Vec::new();
        for a in &accounts {
            balances.push(balance(txn.get(a.as_bytes())?));
        }
        let amount = rng.random_range(0..=balances[0].min(10));
        // From the first account to the others, split.
        txn.put(accounts[0].as_bytes(), (balances[0] - amount).to_string());
        let share = amount / (n as u64 - 1);
        let mut left = amount;
        for (i, a) in accounts.iter().enumerate().skip(1) {
            let got = if i == n - 1 { left } else { share };
            left -= got;
            txn.put(a.as_bytes(), (balances[i] + got).to_string());
        }
        txn.commit()
    })();
    if let Some(point) = die {
        fail::remove(point);
    }
    outcome.is_ok()
}

/// The total of every account in one snapshot.
fn audit(client: &Client) -> percolate::Result<u64> {
    let txn = client.begin()?;
    let pairs = txn
        .scan::<&[u8]>(..)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    assert_eq!(pairs.len(), ACCOUNTS.len(), "an account vanished");
    Ok(pairs.into_iter().map(|(_, v)| balance(Some(v))).sum())
}

/// Transfers from three threads, a third of them dying at random protocol
/// steps, while a fourth thread moves the clock so that dead clients' (and
/// slow live clients') locks expire, and a fifth audits: every audit sees
/// the same total, and so does the final read, after which no lock is
/// left.
#[test]
fn bank_total_holds_with_client_deaths_and_lock_expiry() {
    let _scenario = fail::scenario();
    let db = open(ClientConfig {
        resolve_timeout: Duration::from_secs(2),
        // 2PC for the three-account transfers, async commit or 1PC for the
        // others.
        max_async_commit_keys: 2,
        ..Default::default()
    });
    let total = BALANCE * ACCOUNTS.len() as u64;
    let balances: Vec<(&str, String)> =
        ACCOUNTS.iter().map(|a| (*a, BALANCE.to_string())).collect();
    let mut txn = db.client.begin().unwrap();
    for (a, b) in &balances {
        txn.put(a.as_bytes(), b.as_bytes());
    }
    txn.commit().unwrap();

    let stop = AtomicBool::new(false);
    let (committed, audits) = (AtomicUsize::new(0), AtomicUsize::new(0));
    thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut rng = rand::rng();
                    for _ in 0..40 {
                        if transfer(&db.client, &mut rng) {
                            committed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                db.clock.advance(1_000);
                thread::sleep(Duration::from_millis(5));
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                match audit(&db.client) {
                    Ok(sum) => {
                        assert_eq!(sum, total, "an audit saw money created or lost");
                        audits.fetch_add(1, Ordering::Relaxed);
                    }
                    // A dead client's lock not yet expired.
                    Err(e) if e.is_retryable() => {}
                    Err(e) => panic!("audit: {e}"),
                }
            }
        });
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    db.expire_locks();
    assert_eq!(audit(&db.client).unwrap(), total);
    db.settle();
    // Resolution of the last locks may still have been running.
    assert_eq!(audit(&db.client).unwrap(), total);
    assert_eq!(db.locked_keys(), Vec::<String>::new());
    assert!(committed.load(Ordering::Relaxed) > 0);
    assert!(audits.load(Ordering::Relaxed) > 0);
}

/// A pessimistic rollback whose release fails in one region reports the
/// failure instead of success, after asking every region: the other
/// region's lock is gone, the failed one's stays until its TTL runs out
/// (the heart beats have stopped), and then a writer gets past it.
#[test]
fn a_pessimistic_rollback_reports_a_release_that_failed() {
    let _scenario = fail::scenario();
    let (engine, db) = open_faulty(quiet_two_pc());
    let mut txn = db.client.begin_pessimistic().unwrap();
    txn.lock_keys([b"a".to_vec(), b"h".to_vec()]).unwrap();
    // Both releases of the first region ("a") fail.
    engine.fail_next_writes(2);
    let err = txn.rollback().unwrap_err();
    assert!(matches!(err, Error::Engine(_)), "{err:?}");
    engine.fail_next_writes(0);
    let lock_on = |k: &[u8]| {
        let storage = db.client.cluster().region_for(k).storage();
        storage.mvcc_by_key(Key::from_raw(k)).unwrap().lock
    };
    assert!(lock_on(b"a").is_some_and(|l| l.is_pessimistic_lock()));
    assert_eq!(lock_on(b"h"), None);
    db.expire_locks();
    db.write(&["a", "h"], "new");
    assert_eq!(db.read(&["a", "h"]), ["new", "new"]);
    assert_eq!((lock_on(b"a"), lock_on(b"h")), (None, None));
}
