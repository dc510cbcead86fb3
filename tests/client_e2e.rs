//! End to end through the client, on RocksDB in a temporary directory, over
//! three regions `[.., "g")`, `["g", "p")`, `["p", ..)`:
//!
//! * snapshot isolation: no dirty read, no non-repeatable read, no phantom,
//!   no lost update (one hot counter, and counters spread over regions
//!   incremented together); write skew is possible, as SI allows;
//! * a client that dies mid-commit is finished by the next reader: rolled
//!   back after a bare 2PC prewrite, committed after a complete
//!   async-commit prewrite, rolled forward after a committed primary, and
//!   rolled back when an async-commit secondary was never prewritten; no
//!   lock is left behind;
//! * cross-region transfers are seen whole by every snapshot; every kind of
//!   read waits out a prewrite in flight (a region's memory lock); two
//!   committers whose prewrites cross do not wait for each other;
//! * 1PC only for transactions of one region and one batch;
//! * timestamps never go back across a restart, even with the clock set
//!   back, and committed data survives a restart;
//! * scans over the three regions, both ways, with limits and own writes,
//!   match a model.
//!
//! Tests that expire locks run the oracle on a [`ManualClock`]; the others
//! use [`Client::open_with`] on the system clock.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use percolate::mvcc::{Key, Lock, LockType, TimeStamp, WriteType};
use percolate::txn::actions::prewrite::{Mutation, PrewriteResult};
use percolate::txn::cluster::Cluster;
use percolate::txn::commands::Prewrite;
use percolate::txn::concurrency_manager::MaxTsLimit;
use percolate::txn::oracle::{Clock, LocalOracle, ManualClock, TimestampOracle};
use percolate::txn::storage::{Storage, StorageConfig};
use percolate::{Client, ClientConfig, CommitInfo, CommitProtocol, Error, OpenOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tempfile::TempDir;

/// The split keys: regions `[.., "g")`, `["g", "p")`, `["p", ..)`.
fn split_keys() -> Vec<Vec<u8>> {
    vec![b"g".to_vec(), b"p".to_vec()]
}

/// A client over the three regions on the system clock.
struct Db {
    client: Client,
    _dir: TempDir,
}

fn open(config: ClientConfig) -> Db {
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions {
        split_keys: split_keys(),
        client: config,
        ..Default::default()
    };
    Db {
        client: Client::open_with(dir.path(), options).unwrap(),
        _dir: dir,
    }
}

/// A client over the three regions of `dir` (RocksDB in `dir/db`), its
/// oracle on `clock`.
fn open_clocked(dir: &Path, clock: &Arc<ManualClock>, config: ClientConfig) -> Client {
    let oracle = Arc::new(LocalOracle::open_with_clock(dir, clock.clone()).unwrap());
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        max_ts_limit: Some(MaxTsLimit::new(
            oracle.clone(),
            MaxTsLimit::DEFAULT_ALLOWANCE,
        )),
        ..Default::default()
    };
    let cluster = Cluster::open(dir.join("db"), split_keys(), storage).unwrap();
    Client::new(cluster, oracle, config)
}

/// A client on a manual clock, with its directory.
struct Clocked {
    client: Client,
    clock: Arc<ManualClock>,
    _dir: TempDir,
}

fn clocked() -> Clocked {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    Clocked {
        client: open_clocked(dir.path(), &clock, ClientConfig::default()),
        clock,
        _dir: dir,
    }
}

impl Clocked {
    /// Moves the clock forward and waits until the oracle's timestamps
    /// follow it (its ticker runs every millisecond), so that lock TTLs
    /// are judged at the new time.
    fn advance(&self, ms: u64) {
        self.clock.advance(ms);
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.client.oracle().get_ts().unwrap().physical() < self.clock.now_ms() {
            assert!(
                Instant::now() < deadline,
                "the oracle never followed the clock"
            );
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Commits `writes` in one transaction.
fn commit(client: &Client, writes: &[(&str, &str)]) -> CommitInfo {
    let mut txn = client.begin().unwrap();
    for (k, v) in writes {
        txn.put(k.as_bytes(), v.as_bytes());
    }
    txn.commit().unwrap()
}

fn bytes(s: &str) -> Option<Vec<u8>> {
    Some(s.as_bytes().to_vec())
}

/// The keys and values of `pairs` as strings.
fn strings(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
        .collect()
}

/// A counter's value (absent: 0).
fn number(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap())
}

/// Asserts that no region holds a lock of any transaction.
fn assert_no_locks(client: &Client) {
    for region in client.cluster().regions() {
        let locks = region
            .storage()
            .scan_lock(
                Some(Key::from_raw(region.start_key())),
                region.end_key().map(Key::from_raw),
                TimeStamp::max(),
                0,
            )
            .unwrap();
        assert!(locks.is_empty(), "region {}: {locks:?}", region.id());
    }
}

/// The newest write record of `key`: (commit_ts, type, start_ts).
fn newest_write(client: &Client, key: &str) -> (TimeStamp, WriteType, TimeStamp) {
    let info = client
        .cluster()
        .region_for(key.as_bytes())
        .storage()
        .mvcc_by_key(Key::from_raw(key.as_bytes()))
        .unwrap();
    let (commit_ts, write) = info.writes.first().expect("a write record");
    (*commit_ts, write.write_type, write.start_ts)
}

/// Whether `key` carries a rollback of the transaction that started at
/// `start_ts`: a Rollback record at `start_ts`, or, when another
/// transaction committed at that very ts (a 1PC or async-commit commit_ts
/// may equal a later start_ts), the rollback folded into that record.
fn rolled_back(client: &Client, key: &str, start_ts: TimeStamp) -> bool {
    let info = client
        .cluster()
        .region_for(key.as_bytes())
        .storage()
        .mvcc_by_key(Key::from_raw(key.as_bytes()))
        .unwrap();
    info.writes.iter().any(|(commit_ts, w)| {
        *commit_ts == start_ts && (w.write_type == WriteType::Rollback || w.has_overlapped_rollback)
    })
}

// ---------------------------------------------------------------------------
// 1. Snapshot isolation.

#[test]
fn no_dirty_read_of_buffered_or_prewritten_writes() {
    let db = open(ClientConfig::default());
    let client = &db.client;
    commit(client, &[("a", "old"), ("h", "old")]);

    // Buffered in another transaction: nothing was sent.
    let mut writer = client.begin().unwrap();
    writer.put(b"a".to_vec(), b"buffered".to_vec());
    let reader = client.begin().unwrap();
    assert_eq!(reader.get(b"a").unwrap(), bytes("old"));

    // Prewritten by a live 2PC transaction (long TTL), not committed: the
    // reader pushes it past its snapshot and reads the old values.
    let start_ts = client.oracle().get_ts().unwrap();
    for k in ["a", "h"] {
        let prewrite = Prewrite::new(
            vec![Mutation::put(Key::from_raw(k.as_bytes()), b"new".to_vec())],
            b"a",
            start_ts,
        )
        .lock_ttl(60_000);
        let storage = client.cluster().region_for(k.as_bytes()).storage();
        assert!(storage.prewrite(prewrite).unwrap().locks.is_empty());
    }
    let reader = client.begin().unwrap();
    assert_eq!(reader.get(b"h").unwrap(), bytes("old"));
    assert_eq!(reader.get(b"a").unwrap(), bytes("old"));
    assert_eq!(
        strings(
            reader
                .scan::<&[u8]>(..)
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        [("a".into(), "old".into()), ("h".into(), "old".into())]
    );

    // The prewritten transaction now commits, after the reader started:
    // still invisible to it, visible to a later one.
    let commit_ts = client.oracle().get_ts().unwrap();
    assert!(commit_ts > reader.start_ts());
    client
        .cluster()
        .region_for(b"a")
        .storage()
        .commit(vec![Key::from_raw(b"a")], start_ts, commit_ts)
        .unwrap();
    assert_eq!(reader.get(b"a").unwrap(), bytes("old"));
    assert_eq!(reader.get(b"h").unwrap(), bytes("old"));
    let later = client.begin().unwrap();
    assert_eq!(later.get(b"h").unwrap(), bytes("new"));
    assert_eq!(later.get(b"a").unwrap(), bytes("new"));
    drop(writer);
    assert_eq!(client.get_latest(b"a").unwrap(), bytes("new"));
    assert_no_locks(client);
}

#[test]
fn no_non_repeatable_read() {
    let db = open(ClientConfig::default());
    let client = &db.client;
    commit(client, &[("a", "1"), ("h", "1"), ("q", "1")]);

    let reader = client.begin().unwrap();
    assert_eq!(reader.get(b"a").unwrap(), bytes("1"));
    assert_eq!(reader.get(b"h").unwrap(), bytes("1"));
    // Committed after the reader began: an async-commit transaction over
    // all three regions, then a 1PC one on a single key.
    let info = commit(client, &[("a", "2"), ("h", "2"), ("q", "2")]);
    assert_eq!(info.protocol, CommitProtocol::AsyncCommit);
    assert!(info.commit_ts > reader.start_ts());
    let info = commit(client, &[("a", "3")]);
    assert_eq!(info.protocol, CommitProtocol::OnePc);

    // Read again, and "q" for the first time: all from the snapshot.
    assert_eq!(reader.get(b"a").unwrap(), bytes("1"));
    assert_eq!(reader.get(b"h").unwrap(), bytes("1"));
    assert_eq!(reader.get(b"q").unwrap(), bytes("1"));
    assert_eq!(
        reader.batch_get(&[b"q", b"h", b"a"]).unwrap(),
        vec![bytes("1"), bytes("1"), bytes("1")]
    );
    let later = client.begin().unwrap();
    assert_eq!(
        later.batch_get(&[b"a", b"h", b"q"]).unwrap(),
        vec![bytes("3"), bytes("2"), bytes("2")]
    );
}

#[test]
fn no_phantom() {
    let db = open(ClientConfig::default());
    let client = &db.client;
    commit(client, &[("b", "0"), ("h", "0"), ("m", "0"), ("pb", "0")]);

    let reader = client.begin().unwrap();
    let forward = strings(
        reader
            .scan("c".."r")
            .collect::<std::result::Result<Vec<_>, _>>()
            .unwrap(),
    );
    let reverse = strings(
        reader
            .scan_reverse("c".."r")
            .collect::<std::result::Result<Vec<_>, _>>()
            .unwrap(),
    );
    let keys = |pairs: &[(String, String)]| -> Vec<String> {
        pairs.iter().map(|(k, _)| k.clone()).collect()
    };
    assert_eq!(keys(&forward), ["h", "m", "pb"]);

    // Another transaction inserts into the range in two regions, deletes
    // one key and changes another.
    let mut writer = client.begin().unwrap();
    writer.insert(b"i".to_vec(), b"1".to_vec());
    writer.insert(b"pa".to_vec(), b"1".to_vec());
    writer.delete(b"m".to_vec());
    writer.put(b"h".to_vec(), b"1".to_vec());
    assert_eq!(
        writer.commit().unwrap().protocol,
        CommitProtocol::AsyncCommit
    );

    assert_eq!(
        strings(
            reader
                .scan("c".."r")
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        forward
    );
    assert_eq!(
        strings(
            reader
                .scan_reverse("c".."r")
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        reverse
    );
    assert_eq!(
        keys(&strings(
            reader
                .scan("c".."r")
                .take(2)
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        )),
        ["h", "m"]
    );
    let later = client.begin().unwrap();
    assert_eq!(
        keys(&strings(
            later
                .scan("c".."r")
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        )),
        ["h", "i", "pa", "pb"]
    );
}

const THREADS: usize = 8;
const INCREMENTS: usize = 20;

/// `THREADS` threads increment one counter `INCREMENTS` times each,
/// committing by `protocol`.
fn hot_counter(config: ClientConfig, protocol: CommitProtocol) {
    let db = open(config);
    let client = &db.client;
    let succeeded = AtomicU64::new(0);
    thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..INCREMENTS {
                    let ((), info) = client
                        .with_retry_info(|txn| {
                            let n = number(txn.get(b"counter")?);
                            txn.put(b"counter".to_vec(), (n + 1).to_string());
                            Ok(())
                        })
                        .unwrap();
                    assert_eq!(info.protocol, protocol);
                    succeeded.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let succeeded = succeeded.load(Ordering::Relaxed);
    assert_eq!(succeeded, (THREADS * INCREMENTS) as u64);
    assert_eq!(number(client.get_latest(b"counter").unwrap()), succeeded);
    // The committed versions, oldest first, count 1, 2, 3, ...: every
    // increment read the one before it.
    let info = client
        .cluster()
        .region_for(b"counter")
        .storage()
        .mvcc_by_key(Key::from_raw(b"counter"))
        .unwrap();
    let versions: Vec<u64> = info
        .writes
        .iter()
        .rev()
        .filter(|(_, w)| w.write_type == WriteType::Put)
        .map(|(_, w)| number(w.short_value.clone()))
        .collect();
    assert_eq!(versions, (1..=succeeded).collect::<Vec<_>>());
    assert_no_locks(client);
}

#[test]
fn no_lost_update_on_a_hot_counter_one_pc() {
    hot_counter(ClientConfig::default(), CommitProtocol::OnePc);
}

#[test]
fn no_lost_update_on_a_hot_counter_async_commit() {
    let config = ClientConfig {
        one_pc: false,
        ..Default::default()
    };
    hot_counter(config, CommitProtocol::AsyncCommit);
}

#[test]
fn no_lost_update_on_a_hot_counter_two_pc() {
    let config = ClientConfig {
        one_pc: false,
        async_commit: false,
        ..Default::default()
    };
    hot_counter(config, CommitProtocol::TwoPc);
}

/// Two counters per region.
const COUNTERS: [&str; 6] = ["a0", "a1", "h0", "h1", "q0", "q1"];

/// `THREADS` threads run `INCREMENTS` transactions each that increment two
/// or three of [`COUNTERS`], each in a different region, committing by
/// `protocol`.
fn spread_counters(config: ClientConfig, protocol: CommitProtocol) {
    let db = open(config);
    let client = &db.client;
    let tally: Vec<AtomicU64> = COUNTERS.iter().map(|_| AtomicU64::new(0)).collect();
    thread::scope(|scope| {
        for t in 0..THREADS {
            let tally = &tally;
            scope.spawn(move || {
                for i in 0..INCREMENTS {
                    let pick = t + i;
                    let mut chosen = vec![pick % 2, 2 + (pick / 2) % 2];
                    if pick % 3 == 0 {
                        chosen.push(4 + (pick / 3) % 2);
                    }
                    let ((), info) = client
                        .with_retry_info(|txn| {
                            for &c in &chosen {
                                let n = number(txn.get(COUNTERS[c].as_bytes())?);
                                txn.put(COUNTERS[c].as_bytes(), (n + 1).to_string());
                            }
                            Ok(())
                        })
                        .unwrap();
                    assert_eq!(info.protocol, protocol);
                    for &c in &chosen {
                        tally[c].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let reader = client.begin().unwrap();
    let mut total = 0;
    for (c, name) in COUNTERS.iter().enumerate() {
        let value = number(reader.get(name.as_bytes()).unwrap());
        assert_eq!(value, tally[c].load(Ordering::Relaxed), "{name}");
        total += value;
    }
    let expected: u64 = tally.iter().map(|t| t.load(Ordering::Relaxed)).sum();
    assert_eq!(total, expected);
    assert!(total >= (2 * THREADS * INCREMENTS) as u64);
    assert_no_locks(client);
}

#[test]
fn no_lost_update_on_counters_spread_over_regions_async_commit() {
    spread_counters(ClientConfig::default(), CommitProtocol::AsyncCommit);
}

#[test]
fn no_lost_update_on_counters_spread_over_regions_two_pc() {
    let config = ClientConfig {
        async_commit: false,
        ..Default::default()
    };
    spread_counters(config, CommitProtocol::TwoPc);
}

/// Transfers between accounts in all three regions while readers check,
/// in every snapshot (by point reads and by a scan over the regions), that
/// the total never changes: a cross-region commit is seen whole or not at
/// all.
#[test]
fn transfers_across_regions_are_seen_whole_by_every_snapshot() {
    const ACCOUNTS: [&str; 6] = ["a0", "f9", "g0", "o9", "p0", "z9"];
    const TOTAL: u64 = 600;
    let db = open(ClientConfig::default());
    let client = &db.client;
    let initial: Vec<(&str, &str)> = ACCOUNTS.iter().map(|a| (*a, "100")).collect();
    commit(client, &initial);
    let done = AtomicBool::new(false);
    let snapshots = AtomicU64::new(0);
    thread::scope(|scope| {
        let writers: Vec<_> = (0..4)
            .map(|t| {
                scope.spawn(move || {
                    for i in 0..15 {
                        let from = ACCOUNTS[(t + i) % 6];
                        let to = ACCOUNTS[(t + 2 * i + 1) % 6];
                        if from == to {
                            continue;
                        }
                        client
                            .with_retry(|txn| {
                                let a = number(txn.get(from.as_bytes())?);
                                let b = number(txn.get(to.as_bytes())?);
                                let amount = a.min(7);
                                txn.put(from.as_bytes(), (a - amount).to_string());
                                txn.put(to.as_bytes(), (b + amount).to_string());
                                Ok(())
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for _ in 0..2 {
            scope.spawn(|| {
                let keys: Vec<&[u8]> = ACCOUNTS.iter().map(|a| a.as_bytes()).collect();
                // Until the writers are done, and one snapshot at least:
                // the writers may finish while a reader backs off from
                // their locks.
                let mut checked = 0;
                while !done.load(Ordering::Relaxed) || checked == 0 {
                    let txn = client.begin().unwrap();
                    let sums = txn.batch_get(&keys).and_then(|values| {
                        let pairs = txn
                            .scan::<&[u8]>(..)
                            .collect::<std::result::Result<Vec<_>, _>>()?;
                        Ok((
                            values.into_iter().map(number).sum::<u64>(),
                            pairs.into_iter().map(|(_, v)| number(Some(v))).sum(),
                        ))
                    });
                    match sums {
                        Ok(sums) => assert_eq!(sums, (TOTAL, TOTAL), "at {:?}", txn.start_ts()),
                        // A lock of a writer stuck behind another writer
                        // outlasted the short lock-wait deadline.
                        Err(e) if e.is_retryable() => continue,
                        Err(e) => panic!("{e}"),
                    }
                    snapshots.fetch_add(1, Ordering::Relaxed);
                    checked += 1;
                }
            });
        }
        let joined: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::Relaxed);
        for writer in joined {
            writer.unwrap();
        }
    });
    assert!(snapshots.load(Ordering::Relaxed) > 0);
    let total: u64 = ACCOUNTS
        .iter()
        .map(|a| number(client.get_latest(a.as_bytes()).unwrap()))
        .sum();
    assert_eq!(total, TOTAL);
}

/// Holds a memory lock on "h" as an async-commit prewrite in flight does
/// (published, not yet written), releases it after a while, and runs
/// `read` meanwhile: the read must wait for the release, then answer.
fn read_past_a_prewrite_in_flight<T: std::fmt::Debug + PartialEq>(
    client: &Client,
    read: impl FnOnce(&percolate::Transaction) -> Result<T, Error>,
    expected: T,
) {
    let lock_ts = client.oracle().get_ts().unwrap();
    let mut lock = Lock::new(LockType::Put, b"h".to_vec(), lock_ts, 3_000);
    lock.use_async_commit = true;
    lock.min_commit_ts = lock_ts.next();
    let cm = client
        .cluster()
        .region_for(b"h")
        .storage()
        .concurrency_manager()
        .clone();
    let guards = cm.lock_keys([Key::from_raw(b"h")]);
    guards[0].set_lock(lock);
    let reader = client.begin().unwrap();
    let released = AtomicBool::new(false);
    thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(Duration::from_millis(100));
            released.store(true, Ordering::SeqCst);
            drop(guards);
        });
        let answer = read(&reader);
        assert!(
            released.load(Ordering::SeqCst),
            "answered before the prewrite finished: {answer:?}"
        );
        assert_eq!(answer.unwrap(), expected);
    });
}

/// A region's in-memory lock (an async-commit or 1PC prewrite between
/// reading `max_ts` and writing its locks) fails a whole read command with
/// `KeyIsLocked`; every client read waits it out like a lock on disk.
#[test]
fn every_read_waits_out_a_prewrite_in_flight() {
    let db = open(ClientConfig::default());
    let client = &db.client;
    commit(client, &[("a", "1"), ("h", "1"), ("q", "1")]);
    let all = || -> Vec<(String, String)> {
        ["a", "h", "q"]
            .iter()
            .map(|k| (k.to_string(), "1".to_string()))
            .collect()
    };
    read_past_a_prewrite_in_flight(client, |t| t.get(b"h"), bytes("1"));
    read_past_a_prewrite_in_flight(
        client,
        |t| t.batch_get(&[b"a", b"h", b"q"]),
        vec![bytes("1"), bytes("1"), bytes("1")],
    );
    read_past_a_prewrite_in_flight(
        client,
        |t| {
            t.scan::<&[u8]>(..)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map(strings)
        },
        all(),
    );
    let mut reversed = all();
    reversed.reverse();
    read_past_a_prewrite_in_flight(
        client,
        |t| {
            t.scan_reverse::<&[u8]>(..)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map(strings)
        },
        reversed.clone(),
    );
    read_past_a_prewrite_in_flight(client, |t| Ok(visited(t.scan::<&[u8]>(..), 0)), all());
    read_past_a_prewrite_in_flight(
        client,
        |t| Ok(visited(t.scan_reverse::<&[u8]>(..), 0)),
        reversed,
    );
}

/// What [`meet_a_committing_async_commit`] saw.
struct Met<T> {
    db: Db,
    /// Whether the client waited (its wait setting was not zero).
    waits: bool,
    /// What the operation returned.
    outcome: T,
    /// Whether the lock's commit had begun when the operation returned.
    committed_first: bool,
    /// How many locks the client resolved.
    resolved: u64,
}

/// Runs `meet`, with a transaction that begins after its commit point,
/// against a committing async-commit transaction: `h` = 1 committed, then
/// an async-commit prewrite of `h` = 2, committed by another thread 100 ms
/// later. Twice: with the wait `set_wait` sets at 10 s, and at zero (no
/// wait); `check` judges each.
fn meet_a_committing_async_commit<T>(
    set_wait: impl Fn(&mut ClientConfig, Duration),
    meet: impl Fn(percolate::Transaction) -> T,
    check: impl Fn(Met<T>),
) {
    for wait in [Duration::from_secs(10), Duration::ZERO] {
        let mut config = ClientConfig::default();
        set_wait(&mut config, wait);
        let db = open(config);
        let client = &db.client;
        commit(client, &[("h", "1")]);
        let (start_ts, min_commit_ts) = prewrite_async(client, b"h", b"2", 3000);
        let txn = client.begin().unwrap();
        assert!(txn.start_ts() >= min_commit_ts);
        let committed = AtomicBool::new(false);
        let (outcome, committed_first) = thread::scope(|scope| {
            scope.spawn(|| {
                thread::sleep(Duration::from_millis(100));
                committed.store(true, Ordering::SeqCst);
                let storage = client.cluster().region_for(b"h").storage();
                storage
                    .commit(vec![Key::from_raw(b"h")], start_ts, min_commit_ts)
                    .unwrap();
            });
            let outcome = meet(txn);
            (outcome, committed.load(Ordering::SeqCst))
        });
        let resolved = resolved(client);
        check(Met {
            db,
            waits: !wait.is_zero(),
            outcome,
            committed_first,
            resolved,
        });
    }
}

/// An async-commit transaction past its prewrite (its commit point) is
/// committing: a read that meets its lock waits for the commit to remove
/// it (`ClientConfig::async_commit_read_wait`) rather than resolving it,
/// and reads the committed value. No lock is resolved, so no
/// `CheckTxnStatus` is sent. With the wait off, the same read resolves the
/// lock (finding the transaction alive, as it is) and backs off until the
/// commit; it reads the same value.
#[test]
fn a_read_waits_for_an_async_commit_to_finish() {
    meet_a_committing_async_commit(
        |config, wait| config.async_commit_read_wait = wait,
        |reader| reader.get(b"h").unwrap(),
        |met| {
            assert_eq!(met.outcome, Some(b"2".to_vec()));
            assert!(met.committed_first, "read before the commit");
            if met.waits {
                assert_eq!(
                    met.resolved, 0,
                    "the reader resolved the lock instead of waiting"
                );
            } else {
                assert!(met.resolved > 0, "the lock was not resolved");
            }
        },
    );
}

/// An async-commit lock of a prewrite that committed at or below a
/// writer's start_ts: the writer's prewrite meets it, waits for the commit
/// to remove it (`ClientConfig::async_commit_prewrite_wait`) and commits
/// over it, resolving nothing. With the wait off it resolves the lock,
/// finds its (older) transaction alive, and gives way with `KeyIsLocked`.
#[test]
fn a_commit_waits_for_an_async_commit_below_its_start_ts() {
    meet_a_committing_async_commit(
        |config, wait| config.async_commit_prewrite_wait = wait,
        |mut writer| {
            writer.put(b"h", b"3");
            writer.commit()
        },
        |met| {
            let (outcome, client) = (&met.outcome, &met.db.client);
            if met.waits {
                assert!(outcome.is_ok(), "{outcome:?}");
                assert!(met.committed_first, "committed before the lock went");
                assert_eq!(
                    met.resolved, 0,
                    "the lock was resolved instead of waited for"
                );
                assert_eq!(client.get_latest(b"h").unwrap(), Some(b"3".to_vec()));
            } else {
                assert!(is_locked(outcome), "{outcome:?}");
                assert!(met.resolved > 0, "the lock was not resolved");
                assert_eq!(client.get_latest(b"h").unwrap(), Some(b"2".to_vec()));
            }
        },
    );
}

/// An async-commit lock whose transaction commits above a writer's
/// start_ts: the writer could only meet that commit as a write conflict,
/// so its commit gives up at once with `KeyIsLocked`, resolving nothing
/// and not waiting for the lock (which is never committed here). Once the
/// lock has expired it is resolved (committed, since every key of its
/// transaction is prewritten), and a writer that began after its commit
/// goes on.
#[test]
fn a_commit_gives_way_at_once_to_an_async_commit_above_its_start_ts() {
    let db = open(ClientConfig::default());
    let client = &db.client;
    let mut writer = client.begin().unwrap();
    writer.put(b"h", b"mine");
    let (_, min_commit_ts) = prewrite_async(client, b"h", b"theirs", 50);
    assert!(min_commit_ts > writer.start_ts());
    let outcome = writer.commit();
    assert!(is_locked(&outcome), "{outcome:?}");
    assert_eq!(resolved(client), 0, "a CheckTxnStatus was sent");

    thread::sleep(Duration::from_millis(100));
    client
        .with_retry(|txn| {
            txn.put(b"h", b"later");
            Ok(())
        })
        .unwrap();
    assert!(resolved(client) > 0, "the expired lock was not resolved");
    assert_eq!(client.get_latest(b"h").unwrap(), Some(b"later".to_vec()));
}

/// Prewrites `key` = `value` by async commit, as a client that then stops
/// would leave it: returns the transaction's start_ts and min_commit_ts.
fn prewrite_async(
    client: &Client,
    key: &[u8],
    value: &[u8],
    ttl_ms: u64,
) -> (TimeStamp, TimeStamp) {
    let storage = client.cluster().region_for(key).storage();
    let start_ts = client.oracle().get_ts().unwrap();
    let prewrite = Prewrite::new(
        vec![Mutation::put(Key::from_raw(key), value.to_vec())],
        key,
        start_ts,
    )
    .lock_ttl(ttl_ms)
    .async_commit(vec![], TimeStamp::zero());
    let min_commit_ts = storage.prewrite(prewrite).unwrap().min_commit_ts.unwrap();
    (start_ts, min_commit_ts)
}

/// How many locks the client resolved (each a `CheckTxnStatus`).
fn resolved(client: &Client) -> u64 {
    client.metrics().resolved.iter().map(|(_, n)| n).sum()
}

fn is_locked(outcome: &percolate::Result<CommitInfo>) -> bool {
    matches!(
        outcome,
        Err(Error::Mvcc(percolate::mvcc::Error::KeyIsLocked(_)))
    )
}

/// Write skew is **allowed** under snapshot isolation: two transactions
/// read the same two keys, each writes the key the other did not, and
/// neither write conflicts with the other's, so both commit, although no
/// serial order of the two produces the result. Here the "invariant"
/// `x + y >= 1` is broken: each transaction saw `x = y = 1` and set one of
/// them to 0. Guarding the reads with `lock_keys` turns the read keys into
/// writes and makes the second committer fail.
#[test]
fn write_skew_is_allowed_under_snapshot_isolation() {
    let db = open(ClientConfig::default());
    let client = &db.client;
    commit(client, &[("x", "1"), ("b", "1")]);
    let (x, y): (&[u8], &[u8]) = (b"x", b"b"); // Different regions.

    let mut t1 = client.begin().unwrap();
    let mut t2 = client.begin().unwrap();
    for t in [&t1, &t2] {
        assert_eq!(number(t.get(x).unwrap()) + number(t.get(y).unwrap()), 2);
    }
    t1.put(x.to_vec(), b"0".to_vec());
    t2.put(y.to_vec(), b"0".to_vec());
    t1.commit().unwrap();
    t2.commit().unwrap();
    let after = client.begin().unwrap();
    assert_eq!(
        number(after.get(x).unwrap()) + number(after.get(y).unwrap()),
        0,
        "both committed: the skew happened"
    );

    // The same with the reads guarded: the second committer conflicts.
    commit(client, &[("x", "1"), ("b", "1")]);
    let mut t1 = client.begin().unwrap();
    let mut t2 = client.begin().unwrap();
    for t in [&t1, &t2] {
        assert_eq!(number(t.get(x).unwrap()) + number(t.get(y).unwrap()), 2);
    }
    t1.put(x.to_vec(), b"0".to_vec());
    t1.lock_keys([y.to_vec()]);
    t2.put(y.to_vec(), b"0".to_vec());
    t2.lock_keys([x.to_vec()]);
    t1.commit().unwrap();
    let err = t2.commit().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let after = client.begin().unwrap();
    assert_eq!(after.get(x).unwrap(), bytes("0"));
    assert_eq!(after.get(y).unwrap(), bytes("1"));
}

/// Two transactions writing the same keys in two regions, started together
/// many times: their prewrites race, each may lock one key before the
/// other. Neither may then wait for the other until its lock-wait
/// deadline: at least one commits, promptly.
///
/// Each committer may meet the other's lock in its second region with the
/// owner alive (heart beats keep its primary alive; an async-commit lock is
/// never pushed). Without a rule they would both back off until the
/// deadline, and the first to give up would leave rollback records that
/// fail the other with a write conflict. The client's rule is wait-die: the
/// younger gives way at once and unlocks its keys without rollback records
/// (`Committer::prewrite_all` in `txn/src/client/transaction.rs`).
#[test]
fn crossing_prewrites_of_two_transactions_do_not_wait_for_each_other() {
    let db = open(ClientConfig {
        resolve_timeout: Duration::from_secs(1),
        ..Default::default()
    });
    let client = &db.client;
    for round in 0..50 {
        let barrier = Barrier::new(2);
        let started = Instant::now();
        let outcomes: Vec<Result<CommitInfo, Error>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|t| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let mut txn = client.begin().unwrap();
                        txn.put(b"a".to_vec(), format!("{round}-{t}").into_bytes());
                        txn.put(b"q".to_vec(), format!("{round}-{t}").into_bytes());
                        barrier.wait();
                        txn.commit()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let elapsed = started.elapsed();
        let committed = outcomes.iter().filter(|o| o.is_ok()).count();
        assert!(
            committed >= 1 && elapsed < Duration::from_millis(900),
            "round {round}: {committed} committed in {elapsed:?}: {outcomes:?}"
        );
        // Both keys hold the same winner's value.
        let txn = client.begin().unwrap();
        assert_eq!(txn.get(b"a").unwrap(), txn.get(b"q").unwrap());
    }
}

// ---------------------------------------------------------------------------
// 2. A client that dies mid-commit.

/// Sends the prewrites of a transaction writing `"{key}-new"` to `keys`
/// (the first one the primary), one command per key, as a client that then
/// dies. `async_secondaries`: `None` for 2PC, or the secondaries its primary
/// lock lists (which may include keys never prewritten).
fn dead_client_prewrite(
    client: &Client,
    keys: &[&str],
    async_secondaries: Option<&[&str]>,
) -> (TimeStamp, Vec<PrewriteResult>) {
    let start_ts = client.oracle().get_ts().unwrap();
    let results = keys
        .iter()
        .map(|k| {
            let mutation =
                Mutation::put(Key::from_raw(k.as_bytes()), format!("{k}-new").into_bytes());
            let mut prewrite = Prewrite::new(vec![mutation], keys[0], start_ts).lock_ttl(100);
            if let Some(secondaries) = async_secondaries {
                let listed = if *k == keys[0] {
                    secondaries.iter().map(|s| s.as_bytes().to_vec()).collect()
                } else {
                    Vec::new()
                };
                prewrite = prewrite.async_commit(listed, TimeStamp::zero());
            }
            let storage = client.cluster().region_for(k.as_bytes()).storage();
            let result = storage.prewrite(prewrite).unwrap();
            assert!(result.locks.is_empty());
            result
        })
        .collect();
    (start_ts, results)
}

/// The committed values of "a", "h" and "q", read by one new transaction
/// that meets the secondaries' locks first.
fn read_ahq(client: &Client) -> Vec<String> {
    let txn = client.begin().unwrap();
    let mut values: Vec<String> = ["q", "h", "a"]
        .iter()
        .map(|k| String::from_utf8(txn.get(k.as_bytes()).unwrap().unwrap()).unwrap())
        .collect();
    values.reverse();
    assert_eq!(
        strings(
            txn.scan::<&[u8]>(..)
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        )
        .into_iter()
        .map(|(_, v)| v)
        .collect::<Vec<_>>(),
        values
    );
    values
}

#[test]
fn a_client_dead_after_a_2pc_prewrite_is_rolled_back_by_the_next_reader() {
    let s = clocked();
    let client = &s.client;
    commit(client, &[("a", "a-old"), ("h", "h-old"), ("q", "q-old")]);
    let (start_ts, _) = dead_client_prewrite(client, &["a", "h", "q"], None);
    s.advance(1_000);

    assert_eq!(read_ahq(client), ["a-old", "h-old", "q-old"]);
    assert_no_locks(client);
    // The primary carries a (protected) rollback: the transaction can never
    // commit now. The secondaries need none: their fate is the primary's.
    assert!(rolled_back(client, "a", start_ts));
    let commit_ts = client.oracle().get_ts().unwrap();
    let late = client.cluster().region_for(b"a").storage().commit(
        vec![Key::from_raw(b"a")],
        start_ts,
        commit_ts,
    );
    assert!(late.is_err(), "a late commit of the primary: {late:?}");
    assert_eq!(client.get_latest(b"a").unwrap(), bytes("a-old"));
}

#[test]
fn a_client_dead_after_a_complete_async_commit_prewrite_counts_as_committed() {
    let s = clocked();
    let client = &s.client;
    commit(client, &[("a", "a-old"), ("h", "h-old"), ("q", "q-old")]);
    let (start_ts, results) = dead_client_prewrite(client, &["a", "h", "q"], Some(&["h", "q"]));
    // What the client would have reported as its commit_ts.
    let commit_ts = results
        .iter()
        .map(|r| r.min_commit_ts.unwrap_or_default())
        .max()
        .unwrap();
    assert!(commit_ts > start_ts);
    s.advance(1_000);

    assert_eq!(read_ahq(client), ["a-new", "h-new", "q-new"]);
    assert_no_locks(client);
    for k in ["a", "h", "q"] {
        assert_eq!(
            newest_write(client, k),
            (commit_ts, WriteType::Put, start_ts),
            "{k} committed at the commit_ts the client computed"
        );
    }
}

#[test]
fn a_client_dead_after_committing_the_primary_is_rolled_forward() {
    let s = clocked();
    let client = &s.client;
    commit(client, &[("a", "a-old"), ("h", "h-old"), ("q", "q-old")]);
    let (start_ts, _) = dead_client_prewrite(client, &["a", "h", "q"], None);
    let commit_ts = client.oracle().get_ts().unwrap();
    client
        .cluster()
        .region_for(b"a")
        .storage()
        .commit(vec![Key::from_raw(b"a")], start_ts, commit_ts)
        .unwrap();

    // The secondaries' locks have not expired: the committed primary is
    // enough to roll them forward.
    assert_eq!(read_ahq(client), ["a-new", "h-new", "q-new"]);
    assert_no_locks(client);
    for k in ["a", "h", "q"] {
        assert_eq!(
            newest_write(client, k),
            (commit_ts, WriteType::Put, start_ts),
            "{k}"
        );
    }
}

#[test]
fn an_async_commit_transaction_with_a_secondary_never_prewritten_is_rolled_back() {
    let s = clocked();
    let client = &s.client;
    commit(client, &[("a", "a-old"), ("h", "h-old"), ("q", "q-old")]);
    // The primary lists "h" and "q"; the client died before "q" was sent.
    let (start_ts, _) = dead_client_prewrite(client, &["a", "h"], Some(&["h", "q"]));
    s.advance(1_000);

    assert_eq!(read_ahq(client), ["a-old", "h-old", "q-old"]);
    assert_no_locks(client);
    // The primary, and the key never prewritten, carry protected
    // rollbacks: no late prewrite can make every key locked again.
    assert!(rolled_back(client, "a", start_ts));
    assert!(rolled_back(client, "q", start_ts));
    // The missing prewrite, arriving late, cannot lock "q" any more.
    let late = Prewrite::new(
        vec![Mutation::put(Key::from_raw(b"q"), b"q-new".to_vec())],
        b"a",
        start_ts,
    )
    .lock_ttl(100)
    .async_commit(Vec::new(), TimeStamp::zero());
    let late = client.cluster().region_for(b"q").storage().prewrite(late);
    assert!(late.is_err(), "a late prewrite of q: {late:?}");
    assert_no_locks(client);
    assert_eq!(client.get_latest(b"q").unwrap(), bytes("q-old"));
}

// ---------------------------------------------------------------------------
// 3. The commit protocol follows the regions.

/// Commits `keys` (value `"{key}={round}"`) and checks the protocol, the
/// data and every key's commit record.
fn commit_and_check(client: &Client, keys: &[&str], round: usize) -> CommitProtocol {
    let mut txn = client.begin().unwrap();
    let start_ts = txn.start_ts();
    for k in keys {
        txn.put(k.as_bytes(), format!("{k}={round}"));
    }
    let info = txn.commit().unwrap();
    let reader = client.begin().unwrap();
    assert!(reader.start_ts() >= info.commit_ts);
    for k in keys {
        assert_eq!(
            reader.get(k.as_bytes()).unwrap(),
            bytes(&format!("{k}={round}"))
        );
        assert_eq!(
            newest_write(client, k),
            (info.commit_ts, WriteType::Put, start_ts),
            "{k}: one commit_ts for the whole transaction"
        );
    }
    assert_no_locks(client);
    info.protocol
}

#[test]
fn one_pc_only_for_transactions_of_one_region_and_one_batch() {
    use CommitProtocol::{AsyncCommit, OnePc, TwoPc};
    let db = open(ClientConfig::default());
    let c = &db.client;
    assert_eq!(commit_and_check(c, &["a", "b", "c"], 1), OnePc);
    assert_eq!(commit_and_check(c, &["g", "h", "o"], 2), OnePc);
    assert_eq!(commit_and_check(c, &["p", "zz"], 3), OnePc);
    assert_eq!(commit_and_check(c, &["f", "g"], 4), AsyncCommit);
    assert_eq!(commit_and_check(c, &["a", "h", "q"], 5), AsyncCommit);
    assert_eq!(commit_and_check(c, &["o", "p"], 6), AsyncCommit);

    let db = open(ClientConfig {
        async_commit: false,
        ..Default::default()
    });
    let c = &db.client;
    assert_eq!(commit_and_check(c, &["a", "b"], 1), OnePc);
    assert_eq!(commit_and_check(c, &["a", "h"], 2), TwoPc);
    assert_eq!(commit_and_check(c, &["a", "h", "q"], 3), TwoPc);

    let db = open(ClientConfig {
        max_async_commit_keys: 2,
        max_batch_keys: 2,
        ..Default::default()
    });
    let c = &db.client;
    assert_eq!(commit_and_check(c, &["a", "b"], 1), OnePc);
    assert_eq!(commit_and_check(c, &["a", "h"], 2), AsyncCommit);
    assert_eq!(
        commit_and_check(c, &["a", "h", "q"], 3),
        TwoPc,
        "too many keys"
    );
    assert_eq!(
        commit_and_check(c, &["a", "b", "c"], 4),
        TwoPc,
        "one region, two batches: not 1PC"
    );

    let db = open(ClientConfig {
        max_batch_keys: 2,
        ..Default::default()
    });
    assert_eq!(
        commit_and_check(&db.client, &["a", "b", "c"], 1),
        AsyncCommit,
        "one region, two batches: not 1PC"
    );

    let db = open(ClientConfig {
        one_pc: false,
        ..Default::default()
    });
    assert_eq!(commit_and_check(&db.client, &["a", "b"], 1), AsyncCommit);
}

// ---------------------------------------------------------------------------
// 4. Restarts.

#[test]
fn the_oracle_never_goes_back_across_restarts_with_the_clock_set_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let mut last = TimeStamp::zero();
    /// Takes `n` single timestamps and a batch of 100, each above `last`;
    /// `last` becomes the largest.
    fn take(oracle: &LocalOracle, n: usize, last: &mut TimeStamp) {
        for _ in 0..n {
            let ts = oracle.get_ts().unwrap();
            assert!(ts > *last, "{ts:?} after {last:?}");
            *last = ts;
        }
        let first = oracle.get_ts_batch(100).unwrap();
        assert!(first > *last);
        *last = TimeStamp::new(first.into_inner() + 99);
    }
    for restart in 0..3 {
        let oracle = LocalOracle::open_with_clock(dir.path(), clock.clone()).unwrap();
        take(&oracle, 1_000, &mut last);
        // Time passes while timestamps are handed out.
        for _ in 0..5 {
            clock.advance(2_000);
            thread::sleep(Duration::from_millis(5));
            take(&oracle, 100, &mut last);
        }
        drop(oracle);
        // The clock is set back an hour before the next start.
        clock.set(clock.now_ms() - 3_600_000);
        let reopened = LocalOracle::open_with_clock(dir.path(), clock.clone()).unwrap();
        let ts = reopened.get_ts().unwrap();
        assert!(ts > last, "restart {restart}: {ts:?} after {last:?}");
        last = ts;
    }
}

#[test]
fn data_survives_a_client_restart_and_timestamps_move_on() {
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions {
        split_keys: split_keys(),
        ..Default::default()
    };
    let client = Client::open_with(dir.path(), options).unwrap();
    let one_pc = commit(&client, &[("a", "1"), ("b", "1")]);
    let async_commit = commit(&client, &[("b", "2"), ("h", "2"), ("q", "2")]);
    assert_eq!(one_pc.protocol, CommitProtocol::OnePc);
    assert_eq!(async_commit.protocol, CommitProtocol::AsyncCommit);
    let last_commit_ts = async_commit.commit_ts;
    // Dropped at once: async commit's commit records may still be on their
    // way; the transaction is committed all the same.
    drop(client);

    let client = Client::open(dir.path()).unwrap();
    let txn = client.begin().unwrap();
    assert!(txn.start_ts() > last_commit_ts);
    assert_eq!(
        strings(
            txn.scan::<&[u8]>(..)
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        ),
        [
            ("a".into(), "1".into()),
            ("b".into(), "2".into()),
            ("h".into(), "2".into()),
            ("q".into(), "2".into())
        ]
    );
    let info = commit(&client, &[("a", "3"), ("q", "3")]);
    assert!(info.commit_ts > last_commit_ts);
    assert_eq!(client.get_latest(b"q").unwrap(), bytes("3"));
}

#[test]
fn a_restart_with_the_clock_set_back_keeps_commits_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let client = open_clocked(dir.path(), &clock, ClientConfig::default());
    let mut last = commit(&client, &[("a", "1"), ("h", "1")]).commit_ts;
    let one_pc = commit(&client, &[("q", "1")]);
    assert_eq!(one_pc.protocol, CommitProtocol::OnePc);
    last = last.max(one_pc.commit_ts);
    drop(client);

    clock.set(clock.now_ms() - 3_600_000);
    let client = open_clocked(dir.path(), &clock, ClientConfig::default());
    let txn = client.begin().unwrap();
    assert!(txn.start_ts() > last);
    assert_eq!(
        txn.batch_get(&[b"a", b"h", b"q"]).unwrap(),
        vec![bytes("1"), bytes("1"), bytes("1")]
    );
    // New commits, by each protocol, land above the old ones: the latest
    // value is the new one.
    let one_pc = commit(&client, &[("q", "2")]);
    let async_commit = commit(&client, &[("a", "2"), ("h", "2")]);
    assert_eq!(one_pc.protocol, CommitProtocol::OnePc);
    assert_eq!(async_commit.protocol, CommitProtocol::AsyncCommit);
    assert!(one_pc.commit_ts > last && async_commit.commit_ts > last);
    for k in ["a", "h", "q"] {
        assert_eq!(client.get_latest(k.as_bytes()).unwrap(), bytes("2"), "{k}");
    }
    assert_eq!(txn.get(b"a").unwrap(), bytes("1"), "the old snapshot");
}

// ---------------------------------------------------------------------------
// 5. Scans across regions.

/// Bounds around and on the split keys "g" and "p".
const BOUNDS: [&str; 11] = ["", "a", "c", "f", "g", "g0", "m", "p", "pa", "z", "zz"];
const LIMITS: [usize; 6] = [0, 1, 2, 3, 5, 100];

/// Checks every scan of `txn` over [`BOUNDS`] x [`LIMITS`], both ways,
/// against `model`.
fn check_scans(txn: &percolate::Transaction, model: &BTreeMap<String, String>) {
    for start in BOUNDS {
        let ends = BOUNDS.iter().map(|e| Some(*e)).chain([None]);
        for end in ends {
            let in_range = model
                .iter()
                .filter(|(k, _)| k.as_str() >= start && end.is_none_or(|e| k.as_str() < e))
                .map(|(k, v)| (k.clone(), v.clone()));
            let ascending: Vec<(String, String)> = in_range.collect();
            let descending: Vec<(String, String)> = ascending.iter().rev().cloned().collect();
            for limit in LIMITS {
                let take = if limit == 0 { usize::MAX } else { limit };
                let bounds = (
                    Bound::Included(start.as_bytes()),
                    end.map_or(Bound::Unbounded, |e| Bound::Excluded(e.as_bytes())),
                );
                let forward = strings(
                    txn.scan::<&[u8]>(bounds)
                        .take(take)
                        .collect::<std::result::Result<Vec<_>, _>>()
                        .unwrap(),
                );
                let expected: Vec<_> = ascending.iter().take(take).cloned().collect();
                assert_eq!(forward, expected, "scan [{start:?}, {end:?}) limit {limit}");
                let reverse = strings(
                    txn.scan_reverse::<&[u8]>(bounds)
                        .take(take)
                        .collect::<std::result::Result<Vec<_>, _>>()
                        .unwrap(),
                );
                let expected: Vec<_> = descending.iter().take(take).cloned().collect();
                assert_eq!(
                    reverse, expected,
                    "reverse scan [{start:?}, {end:?}) limit {limit}"
                );
                check_visits(txn, bounds, limit, (&ascending, &descending));
            }
        }
    }
}

/// Pairs of strings, in the order a scan gives them.
type Pairs = [(String, String)];

/// The pairs `scan` hands to `Scan::visit`, stopping after `limit` (0:
/// none).
fn visited(scan: percolate::Scan<'_>, limit: usize) -> Vec<(String, String)> {
    collect_visit(limit, |visit| scan.visit(visit))
}

/// The pairs a visit hands out, as strings, stopping after `limit` (0:
/// none): `run` starts the visit with the visitor it is given, and
/// returns the count the visit returns.
fn collect_visit(
    limit: usize,
    run: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>) -> Result<usize, Error>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let got = run(&mut |k, v| {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        out.push((text(k), text(v)));
        if out.len() == limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(got, out.len(), "the count visit returns");
    out
}

/// Checks that visiting scans of `bounds` (the whole way through, in
/// batches of two, and after one pair taken by `next`) hand out the
/// pairs of `expected` (ascending, descending), up to `limit`.
fn check_visits(
    txn: &percolate::Transaction,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    limit: usize,
    expected: (&Pairs, &Pairs),
) {
    let take = if limit == 0 { usize::MAX } else { limit };
    for (reverse, all) in [(false, expected.0), (true, expected.1)] {
        let scan = || {
            if reverse {
                txn.scan_reverse::<&[u8]>(bounds)
            } else {
                txn.scan::<&[u8]>(bounds)
            }
        };
        let want: Vec<_> = all.iter().take(take).cloned().collect();
        let what = format!("visit {bounds:?} limit {limit} reverse {reverse}");
        assert_eq!(visited(scan(), limit), want, "{what}");
        assert_eq!(
            visited(scan().batch_size(2), limit),
            want,
            "{what}, batches of 2"
        );
        let mut scan = scan().batch_size(3);
        let mut both = strings(scan.next().map(|p| p.unwrap()).into_iter().collect());
        if limit != 1 {
            // 0 stays 0: no limit.
            both.extend(visited(scan, limit.saturating_sub(1)));
        }
        assert_eq!(both, want, "{what}, after one `next`");
        let keys = if reverse {
            txn.keys_reverse::<&[u8]>(bounds)
        } else {
            txn.keys::<&[u8]>(bounds)
        };
        let lent: Vec<String> = collect_visit(limit, |visit| keys.visit(|k| visit(k, &[])))
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let want_keys: Vec<_> = want.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(lent, want_keys, "{what}, keys only");
    }
}

#[test]
fn scans_across_three_regions_match_a_model_both_ways_with_own_writes() {
    let db = open(ClientConfig::default());
    let client = &db.client;
    let committed = [
        "a", "b", "c", "d", "f", "fz", "g", "g0", "h", "k", "o", "oz", "p", "pa", "q", "y", "z",
    ];
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut txn = client.begin().unwrap();
    for k in committed {
        txn.put(k.as_bytes(), format!("{k}-v1"));
        model.insert(k.into(), format!("{k}-v1"));
    }
    txn.commit().unwrap();

    let txn = client.begin().unwrap();
    check_scans(&txn, &model);

    // Own writes in every region: new keys, overwrites, deletes (at the
    // split keys too), and a lock that writes nothing.
    let mut txn = client.begin().unwrap();
    for k in ["0", "bb", "g", "ga", "n", "p", "pb", "zzz"] {
        txn.put(k.as_bytes(), format!("{k}-own"));
        model.insert(k.into(), format!("{k}-own"));
    }
    for k in ["a", "f", "fz", "h", "o", "pa", "z", "nothing"] {
        txn.delete(k.as_bytes());
        model.remove(k);
    }
    txn.lock_keys([b"q".to_vec(), b"e".to_vec()]);
    check_scans(&txn, &model);
    txn.commit().unwrap();

    // Committed: a new transaction sees the same.
    let txn = client.begin().unwrap();
    check_scans(&txn, &model);
}

/// Visiting scans (`Scan::visit`) meet the locks of dead clients in every
/// region, several in a row: each lock stops the visit at its key, is
/// resolved (rolled forward after a committed primary, back after an
/// expired one), and the visit goes on from that key, both ways, with the
/// iterator's pairs.
#[test]
fn visiting_scans_resolve_the_locks_they_meet_and_go_on_from_them() {
    let s = clocked();
    let client = &s.client;
    let keys = ["a", "b", "c", "d", "h", "i", "q", "r"];
    let old: Vec<(String, String)> = keys
        .iter()
        .map(|k| (k.to_string(), format!("{k}-old")))
        .collect();
    let writes: Vec<(&str, &str)> = old.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    commit(client, &writes);
    let value = |k: &str, new: bool| {
        (
            k.to_string(),
            format!("{k}-{}", if new { "new" } else { "old" }),
        )
    };

    // Forward: a committed primary, its secondaries in all three regions.
    let rolled_forward = ["b", "c", "d", "i", "q"];
    let (start_ts, _) = dead_client_prewrite(client, &rolled_forward, None);
    let commit_ts = client.oracle().get_ts().unwrap();
    let primary = client.cluster().region_for(b"b").storage();
    primary
        .commit(vec![Key::from_raw(b"b")], start_ts, commit_ts)
        .unwrap();
    let expected: Vec<_> = keys
        .iter()
        .map(|k| value(k, rolled_forward.contains(k)))
        .collect();
    let txn = client.begin().unwrap();
    assert_eq!(visited(txn.scan::<&[u8]>(..).batch_size(2), 0), expected);
    assert_no_locks(client);

    // Backward: an expired primary, rolled back.
    let (_, _) = dead_client_prewrite(client, &["r", "h", "a"], None);
    s.advance(1_000);
    let txn = client.begin().unwrap();
    let mut descending = expected.clone();
    descending.reverse();
    assert_eq!(visited(txn.scan_reverse::<&[u8]>(..), 5), &descending[..5]);
    assert_eq!(visited(txn.scan_reverse::<&[u8]>(..), 0), descending);
    assert_no_locks(client);
}

/// A visit that stops at its limit resolves only the locks a scan of that
/// limit meets: locks further on, in the same chunk, stay for the readers
/// that get there.
#[test]
fn a_visit_resolves_no_lock_past_its_limit() {
    let s = clocked();
    let client = &s.client;
    commit(
        client,
        &[
            ("a", "a-old"),
            ("b", "b-old"),
            ("c", "c-old"),
            ("d", "d-old"),
        ],
    );
    // c and d: an expired dead client's; b: a dead client's whose primary
    // (x, in another region) committed.
    dead_client_prewrite(client, &["c", "d"], None);
    s.advance(1_000);
    let (start_ts, _) = dead_client_prewrite(client, &["x", "b"], None);
    let commit_ts = client.oracle().get_ts().unwrap();
    let primary = client.cluster().region_for(b"x").storage();
    primary
        .commit(vec![Key::from_raw(b"x")], start_ts, commit_ts)
        .unwrap();
    let locks_in_first_region = || {
        let storage = client.cluster().region_for(b"a").storage();
        let locks = storage.scan_lock(None, Some(Key::from_raw(b"g")), TimeStamp::max(), 0);
        let keys: Vec<Vec<u8>> = locks.unwrap().into_iter().map(|l| l.key).collect();
        keys
    };
    assert_eq!(locks_in_first_region(), [b"b", b"c", b"d"]);

    let txn = client.begin().unwrap();
    let got = visited(txn.scan::<&[u8]>(..).batch_size(2), 2);
    assert_eq!(got, [value("a", "a-old"), value("b", "b-new")]);
    assert_eq!(
        locks_in_first_region(),
        [b"c", b"d"],
        "c and d are past the limit"
    );
}

/// Keys of the randomized visit test: around the split keys "g" and "p",
/// and as long as one and two encoding groups (8 and 16 bytes), where a
/// resume bound meets the group markers.
const VISIT_KEYS: [&str; 22] = [
    "a",
    "aa",
    "abcdefg",
    "abcdefga",
    "abcdefgh",
    "abcdefgh0",
    "b",
    "f",
    "fzzzzzz",
    "g",
    "g0",
    "gabcdefgh",
    "h",
    "n",
    "o",
    "ozzzzzzz",
    "p",
    "pp",
    "pqrstuvwxyz12345",
    "q",
    "z",
    "zz",
];

/// One round of the randomized visit test: what it scans and how.
#[derive(Debug)]
struct VisitRound {
    reverse: bool,
    batch: usize,
    limit: usize,
    range: (&'static str, Option<&'static str>),
    key_only: bool,
    after_next: bool,
}

/// The pairs `round` should visit, given the data as `txn` sees it.
fn visit_expected(round: &VisitRound, data: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let (lo, hi) = round.range;
    let in_range = data
        .iter()
        .filter(|(k, _)| k.as_str() >= lo && hi.is_none_or(|h| k.as_str() < h));
    let mut want: Vec<(String, String)> = in_range
        .map(|(k, v)| {
            (
                k.clone(),
                if round.key_only {
                    String::new()
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    if round.reverse {
        want.reverse();
    }
    if round.limit > 0 {
        want.truncate(round.limit);
    }
    want
}

/// `$txn`'s range read of `$bounds` (`$forward` or `$reverse`, as the
/// round goes) with the round's batch size: a `Scan` or a `Keys`.
macro_rules! round_scan {
    ($txn:expr, $round:expr, $bounds:expr, $forward:ident, $reverse:ident) => {{
        let scan = if $round.reverse {
            $txn.$reverse::<&[u8]>($bounds)
        } else {
            $txn.$forward::<&[u8]>($bounds)
        };
        if $round.batch > 0 {
            scan.batch_size($round.batch)
        } else {
            scan
        }
    }};
}

/// What `txn` visits in `round`.
fn visit_round(txn: &percolate::Transaction, round: &VisitRound) -> Vec<(String, String)> {
    let (lo, hi) = round.range;
    let bounds = (
        Bound::Included(lo.as_bytes()),
        hi.map_or(Bound::Unbounded, |h| Bound::Excluded(h.as_bytes())),
    );
    if round.key_only {
        return visit_keys_round(txn, round, bounds);
    }
    let mut scan = round_scan!(txn, round, bounds, scan, scan_reverse);
    if !round.after_next || round.limit == 1 {
        return visited(scan, round.limit);
    }
    let mut got = strings(scan.next().map(|p| p.unwrap()).into_iter().collect());
    got.extend(visited(scan, round.limit.saturating_sub(1)));
    got
}

/// What `txn` visits of `round`'s keys only (`Keys::visit`, from the
/// start: `after_next` is for pairs).
fn visit_keys_round(
    txn: &percolate::Transaction,
    round: &VisitRound,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
) -> Vec<(String, String)> {
    let keys = round_scan!(txn, round, bounds, keys, keys_reverse);
    collect_visit(round.limit, |visit| keys.visit(|k| visit(k, &[])))
}

/// Visits (every direction, batch size and limit, own writes or none,
/// key-only or not, after a `next` or not, random ranges) over data that
/// fresh locks of a dead client cover at random before each one, rolled
/// forward or back as the visit meets them, agree with a model.
#[test]
fn visits_over_random_locks_and_own_writes_agree_with_a_model() {
    let s = clocked();
    let client = &s.client;
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let initial: Vec<(String, String)> = VISIT_KEYS
        .iter()
        .step_by(2)
        .map(|k| (k.to_string(), format!("{k}-old")))
        .collect();
    let writes: Vec<(&str, &str)> = initial
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    commit(client, &writes);
    model.extend(initial);
    let mut rng = StdRng::seed_from_u64(0x5ca7);
    for reverse in [false, true] {
        for batch in [0, 1, 2, 4] {
            for limit in [0, 1, 2, 3, 5, 8] {
                for own in [false, true] {
                    let keys: Vec<&str> = VISIT_KEYS
                        .iter()
                        .copied()
                        .filter(|_| rng.random_bool(0.3))
                        .collect();
                    if !keys.is_empty() {
                        leave_locks(&s, &keys, rng.random_bool(0.5), &mut model);
                    }
                    let mut txn = client.begin().unwrap();
                    let mut expected = model.clone();
                    if own {
                        own_writes(&mut txn, &mut rng, &mut expected);
                    }
                    let round = random_round(&mut rng, reverse, batch, limit);
                    let want = visit_expected(&round, &expected);
                    assert_eq!(
                        visit_round(&txn, &round),
                        want,
                        "{round:?}, locks on {keys:?}"
                    );
                    // The locks past what the visit read: resolved by a
                    // whole scan before the next round's.
                    let rest = client.begin().unwrap().scan::<&[u8]>(..).count();
                    assert_eq!(rest, model.len());
                    assert_no_locks(client);
                }
            }
        }
    }
}

/// A round of `reverse`, `batch` and `limit`, its range and kind drawn.
fn random_round(rng: &mut StdRng, reverse: bool, batch: usize, limit: usize) -> VisitRound {
    let bounds = [
        "",
        "a",
        "abcdefgh",
        "abcdefgh0",
        "b",
        "g",
        "g0",
        "o",
        "p",
        "pp",
        "zz",
    ];
    let lo = bounds[rng.random_range(0..bounds.len())];
    let hi = bounds[rng.random_range(0..bounds.len())];
    VisitRound {
        reverse,
        batch,
        limit,
        range: (lo, Some(hi).filter(|_| rng.random_bool(0.7))),
        key_only: rng.random_bool(0.3),
        after_next: rng.random_bool(0.3),
    }
}

/// Puts or deletes a random quarter of the keys in `txn`, and in `model`.
fn own_writes(
    txn: &mut percolate::Transaction,
    rng: &mut StdRng,
    model: &mut BTreeMap<String, String>,
) {
    let chosen: Vec<&str> = VISIT_KEYS
        .iter()
        .copied()
        .filter(|_| rng.random_bool(0.25))
        .collect();
    for k in chosen {
        if rng.random_bool(0.5) {
            txn.put(k.as_bytes(), format!("{k}-own"));
            model.insert(k.to_string(), format!("{k}-own"));
        } else {
            txn.delete(k.as_bytes());
            model.remove(k);
        }
    }
}

/// Leaves a dead client's locks on `keys` (the first its primary):
/// committed (`forward`, and then `model` takes its writes) or expired.
fn leave_locks(s: &Clocked, keys: &[&str], forward: bool, model: &mut BTreeMap<String, String>) {
    let client = &s.client;
    let (start_ts, _) = dead_client_prewrite(client, keys, None);
    if forward {
        let commit_ts = client.oracle().get_ts().unwrap();
        let primary = client.cluster().region_for(keys[0].as_bytes()).storage();
        primary
            .commit(vec![Key::from_raw(keys[0].as_bytes())], start_ts, commit_ts)
            .unwrap();
        for k in keys {
            model.insert(k.to_string(), format!("{k}-new"));
        }
    } else {
        s.advance(1_000);
    }
}

/// `(key, value)` as strings.
fn value(key: &str, value: &str) -> (String, String) {
    (key.to_string(), value.to_string())
}

/// Commits `k = value` in the data directory `dir` through an oracle whose
/// clock runs an hour ahead of the system's; returns the commit_ts.
fn commit_an_hour_ahead(dir: &Path, value: &str) -> TimeStamp {
    let now_ms = percolate::txn::oracle::SystemClock.now_ms();
    let ahead = Arc::new(ManualClock::new(now_ms + 3_600_000));
    let _lock = percolate::txn::client::lock_directory(dir).unwrap();
    let engine = percolate::engine::RocksEngine::open(dir.join("db")).unwrap();
    let oracle = Arc::new(LocalOracle::open_with_clock(dir, ahead).unwrap());
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..StorageConfig::default()
    };
    let client = Client::new(
        Cluster::new(engine, Vec::new(), storage),
        oracle,
        ClientConfig::default(),
    );
    commit(&client, &[("k", value)]).commit_ts
}

/// Reopens `dir` as a client and checks that its first transaction starts
/// above `newest` and reads `k = value`.
fn reopened_above(dir: &Path, newest: TimeStamp, value: &str) -> Client {
    let client = Client::open(dir).unwrap();
    let txn = client.begin().unwrap();
    assert!(
        txn.start_ts() > newest,
        "{:?} <= {newest:?}",
        txn.start_ts()
    );
    assert_eq!(txn.get(b"k").unwrap(), Some(value.as_bytes().to_vec()));
    client
}

/// The oracle starts above every commit in the data even when its own
/// state file is gone and the clock runs behind the one the data was
/// written under: a reopened client reads the newest commit, and writes
/// over it without a conflict. (Before, the oracle restarted from the clock,
/// below the commit: reads missed it and writes conflicted with it.)
#[test]
fn a_client_without_its_oracle_file_starts_above_the_data() {
    let dir = tempfile::tempdir().unwrap();
    // The data is written under a clock an hour ahead.
    let committed = commit_an_hour_ahead(dir.path(), "v1");
    std::fs::remove_file(dir.path().join("TIMESTAMP")).unwrap();
    let client = reopened_above(dir.path(), committed, "v1");
    client
        .with_retry(|txn| {
            txn.put(b"k".to_vec(), b"v2".to_vec());
            Ok(())
        })
        .unwrap();
    assert_eq!(client.get_latest(b"k").unwrap(), Some(b"v2".to_vec()));
}

/// And for an old `TIMESTAMP` put back (a restore of the oracle's file
/// from before the newest commits): the file is behind the data, and the
/// data wins.
#[test]
fn a_client_with_an_old_oracle_file_starts_above_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let old_file = {
        let client = Client::open(dir.path()).unwrap();
        commit(&client, &[("k", "v1")]);
        drop(client);
        std::fs::read(dir.path().join("TIMESTAMP")).unwrap()
    };
    // More commits under a clock an hour ahead.
    let committed = commit_an_hour_ahead(dir.path(), "v2");
    std::fs::write(dir.path().join("TIMESTAMP"), old_file).unwrap();
    reopened_above(dir.path(), committed, "v2");
}

/// The same for a lock: a transaction that prewrote under a clock ahead
/// and died leaves a lock whose start_ts is above every commit. A reopened
/// client without its oracle file must not hand that start_ts (or any
/// below it) out again, or a new transaction would take the dead one's
/// identity and its lock.
#[test]
fn a_client_without_its_oracle_file_starts_above_the_locks() {
    let dir = tempfile::tempdir().unwrap();
    let now_ms = percolate::txn::oracle::SystemClock.now_ms();
    let ahead = Arc::new(ManualClock::new(now_ms + 3_600_000));
    let locked_ts = {
        let engine = percolate::engine::RocksEngine::open(dir.path().join("db")).unwrap();
        let oracle = Arc::new(LocalOracle::open_with_clock(dir.path(), ahead).unwrap());
        let storage = Storage::new(engine, StorageConfig::default());
        let start_ts = oracle.get_ts().unwrap();
        let prewrite = Prewrite::new(
            vec![Mutation::put(Key::from_raw(b"k"), b"v".to_vec())],
            b"k",
            start_ts,
        );
        assert!(storage.prewrite(prewrite).unwrap().locks.is_empty());
        start_ts
    };
    std::fs::remove_file(dir.path().join("TIMESTAMP")).unwrap();
    let client = Client::open(dir.path()).unwrap();
    let ts = client.current_ts().unwrap();
    assert!(ts > locked_ts, "{ts:?} <= {locked_ts:?}");
}

/// A second open of a data directory in use is refused by percolate's own
/// lock, even once RocksDB's LOCK file is deleted under the first (RocksDB
/// alone would then let the second in, and it would delete the first one's
/// files as obsolete); the lock goes with the client that held it.
#[test]
fn a_directory_in_use_is_refused_even_without_rocksdbs_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let first = Client::open(dir.path()).unwrap();
    commit(&first, &[("k", "v")]);
    std::fs::remove_file(dir.path().join("db").join("LOCK")).unwrap();
    match Client::open(dir.path()) {
        Err(Error::DirectoryLocked { path }) => assert_eq!(path, dir.path()),
        Err(other) => panic!("expected DirectoryLocked, got {other}"),
        Ok(_) => panic!("a second client opened a directory in use"),
    }
    assert_eq!(first.get_latest(b"k").unwrap(), bytes("v"));
    drop(first);
    let again = Client::open(dir.path()).unwrap();
    assert_eq!(again.get_latest(b"k").unwrap(), bytes("v"));
}
