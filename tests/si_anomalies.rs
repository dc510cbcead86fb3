//! Snapshot-isolation anomalies, through [`percolate::Client`] on RocksDB
//! over three regions `[.., "g")`, `["g", "p")`, `["p", ..)`.
//!
//! Each test constructs one anomaly's interleaving deterministically (the
//! steps run in the order written, on one thread unless said otherwise),
//! after Adya's definitions ("Weak Consistency", 1999) and the Hermitage
//! test suite (Kleppmann, <https://github.com/ept/hermitage>). Every test
//! runs twice: with the client's defaults (async commit across regions,
//! 1PC inside one) and with 2PC only, since the two compute commit
//! timestamps differently. The keys `x` and `y` sit in different regions
//! (`"c"` in the first, `"t"` in the third), so no test is saved by a
//! single region's atomic write.
//!
//! Snapshot isolation forbids G0, G1a, G1b, G1c, lost update (P4) and read
//! skew (G-single); it allows write skew (G2-item), and the last test shows
//! that it happens, and that `Transaction::lock_keys` prevents it.
//!
//! The last five tests run the anomalies again with pessimistic
//! transactions (`Client::begin_pessimistic`), whose writes and reads for
//! update lock keys as they go.

use std::sync::Barrier;
use std::thread;

use percolate::{Client, ClientConfig, Error, OpenOptions, PessimisticTransaction, Transaction};
use tempfile::TempDir;

const X: &[u8] = b"c";
const Y: &[u8] = b"t";

struct Db {
    client: Client,
    _dir: TempDir,
}

fn open(config: ClientConfig) -> Db {
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions {
        split_keys: vec![b"g".to_vec(), b"p".to_vec()],
        client: config,
        ..Default::default()
    };
    Db {
        client: Client::open_with(dir.path(), options).unwrap(),
        _dir: dir,
    }
}

/// Runs `test` on a client with the defaults, then on one with 2PC only.
fn both_protocols(test: impl Fn(&Client)) {
    both_protocols_with(|config| config, test);
}

/// [`both_protocols`], each configuration changed by `tweak` first.
fn both_protocols_with(tweak: impl Fn(ClientConfig) -> ClientConfig, test: impl Fn(&Client)) {
    for config in [
        ClientConfig::default(),
        ClientConfig {
            async_commit: false,
            one_pc: false,
            ..Default::default()
        },
    ] {
        let db = open(tweak(config));
        test(&db.client);
    }
}

fn setup(client: &Client, x: u64, y: u64) {
    let mut txn = client.begin().unwrap();
    txn.put(X, x.to_string());
    txn.put(Y, y.to_string());
    txn.commit().unwrap();
}

fn num(txn: &Transaction, key: &[u8]) -> u64 {
    let value = txn.get(key).unwrap().expect("set up");
    String::from_utf8(value).unwrap().parse().unwrap()
}

/// The values of x and y in a new snapshot.
fn latest(client: &Client) -> (u64, u64) {
    let txn = client.begin().unwrap();
    (num(&txn, X), num(&txn, Y))
}

/// Twenty rounds of two threads each running `write(value, barrier)`, a
/// write of the thread's own value to both x and y (the barrier lines the
/// two up where `write` waits on it); after each round x and y must hold
/// one writer's value.
fn race_writers_of_x_and_y(client: &Client, write: impl Fn(String, &Barrier) + Sync) {
    for round in 0..20u64 {
        let barrier = Barrier::new(2);
        thread::scope(|s| {
            for t in 1..=2u64 {
                let (barrier, write) = (&barrier, &write);
                s.spawn(move || write((round * 10 + t).to_string(), barrier));
            }
        });
        let (x, y) = latest(client);
        assert_eq!(x, y, "round {round}: x and y from different writers");
    }
}

fn assert_conflict(result: percolate::Result<percolate::CommitInfo>) {
    match result {
        Err(e) if e.is_conflict() => {}
        Err(Error::Mvcc(percolate::mvcc::Error::KeyIsLocked(_))) => {}
        other => panic!("expected a write conflict, got {other:?}"),
    }
}

/// **G0, dirty write**: a cycle of write-write dependencies — T1 and T2
/// both write x and y, and T1's write of x is ordered before T2's while
/// T2's write of y is ordered before T1's, leaving x from one transaction
/// and y from the other. Hermitage's interleaving: `w1(x) w2(x) w2(y) c2
/// w1(y) c1` (writes are buffered here, so "w" is a `put` and the order
/// that matters is the commits'). The second committer must fail, and
/// x and y must come from one transaction. Then the same with both
/// commits racing, many times.
#[test]
fn g0_dirty_write_never_happens() {
    both_protocols(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin().unwrap();
        let mut t2 = client.begin().unwrap();
        t1.put(X, "11");
        t2.put(X, "12");
        t2.put(Y, "22");
        t2.commit().unwrap();
        t1.put(Y, "21");
        assert_conflict(t1.commit());
        assert_eq!(latest(client), (12, 22));

        race_writers_of_x_and_y(client, |value, barrier| {
            let mut txn = client.begin().unwrap();
            txn.put(X, value.clone());
            txn.put(Y, value);
            barrier.wait();
            let _ = txn.commit();
        });
    });
}

/// **G1a, aborted read**: T2 reads a value written by T1, which then
/// aborts. Here T1 writes x and y but aborts: once by rollback (its
/// buffered writes were never sent), once by failing at commit after its
/// prewrite of x may have landed (y conflicts with T3, committed after
/// T1 began). A reader before and after the abort sees only the old x.
#[test]
fn g1a_aborted_read_never_happens() {
    both_protocols(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin().unwrap();
        t1.put(X, "11");
        let t2 = client.begin().unwrap();
        assert_eq!(num(&t2, X), 10);
        t1.rollback().unwrap();
        assert_eq!(num(&t2, X), 10);
        assert_eq!(latest(client).0, 10);

        let mut t1 = client.begin().unwrap();
        t1.put(X, "11");
        t1.put(Y, "21");
        let mut t3 = client.begin().unwrap();
        t3.put(Y, "23");
        t3.commit().unwrap();
        assert_conflict(t1.commit());
        let t2 = client.begin().unwrap();
        assert_eq!((num(&t2, X), num(&t2, Y)), (10, 23));
    });
}

/// **G1b, intermediate read**: T2 reads a version of x that T1 wrote but
/// then overwrote before committing. T1 sets x to 11, then 12, and
/// commits; readers before and after its commit see 10 or 12, never 11
/// (T1 itself sees its own latest write).
#[test]
fn g1b_intermediate_read_never_happens() {
    both_protocols(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin().unwrap();
        t1.put(X, "11");
        assert_eq!(num(&t1, X), 11);
        let before = client.begin().unwrap();
        assert_eq!(num(&before, X), 10);
        t1.put(X, "12");
        t1.put(Y, "22");
        t1.commit().unwrap();
        assert_eq!(num(&before, X), 10);
        assert_eq!(latest(client), (12, 22));
    });
}

/// **G1c, circular information flow**: a cycle of write-read (and
/// write-write) dependencies among committed transactions — T1 reads
/// T2's write and T2 reads T1's. Hermitage: `w1(x=11) w2(y=22) r1(y) r2(x)
/// c1 c2`, where each read must return the old value (each snapshot
/// predates the other transaction), so both commit and neither saw the
/// other.
#[test]
fn g1c_circular_information_flow_never_happens() {
    both_protocols(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin().unwrap();
        let mut t2 = client.begin().unwrap();
        t1.put(X, "11");
        t2.put(Y, "22");
        assert_eq!(num(&t1, Y), 20);
        assert_eq!(num(&t2, X), 10);
        t1.commit().unwrap();
        // T2 still reads the snapshot from before T1's commit.
        assert_eq!(num(&t2, X), 10);
        t2.commit().unwrap();
        assert_eq!(latest(client), (11, 22));
    });
}

/// **Lost update (P4)**: T1 and T2 both read x, both write x based on what
/// they read, and both commit, so one increment is lost. Hermitage:
/// `r1(x) r2(x) w1(x) w2(x) c1 c2`. The second committer must fail.
#[test]
fn lost_update_never_happens() {
    both_protocols(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin().unwrap();
        let mut t2 = client.begin().unwrap();
        let (v1, v2) = (num(&t1, X), num(&t2, X));
        t1.put(X, (v1 + 1).to_string());
        t2.put(X, (v2 + 1).to_string());
        t1.commit().unwrap();
        assert_conflict(t2.commit());
        assert_eq!(latest(client).0, 11);
    });
}

/// **Read skew (G-single)**: T1 reads x, T2 then updates x and y and
/// commits, and T1 reads the new y: T1 saw x before T2 and y after it,
/// a state that never existed. Hermitage: `r1(x) w2(x) w2(y) c2 r1(y)`;
/// here with x + y constant, and once more with T2 having begun before T1
/// (its async-commit commit_ts is computed from the regions' max_ts then,
/// and must still land after T1's snapshot, since T1 read x first).
#[test]
fn read_skew_never_happens() {
    both_protocols(|client| {
        for writer_first in [false, true] {
            setup(client, 10, 20);
            let early = writer_first.then(|| client.begin().unwrap());
            let t1 = client.begin().unwrap();
            let mut t2 = early.unwrap_or_else(|| client.begin().unwrap());
            let x = num(&t1, X);
            t2.put(X, "5");
            t2.put(Y, "25");
            let info = t2.commit().unwrap();
            assert!(info.commit_ts > t1.start_ts(), "{info:?}");
            let y = num(&t1, Y);
            assert_eq!((x, y), (10, 20), "writer began first: {writer_first}");
            assert_eq!(latest(client), (5, 25));
        }
    });
}

/// **Write skew (G2-item)** is allowed by snapshot isolation: T1 and T2
/// each read x and y (both 1, the constraint being x + y >= 1), T1 sets
/// x = 0 and T2 sets y = 0; their write sets are disjoint, so both
/// commit and the constraint is broken. This test documents that it
/// happens. Adding the read keys to the write sets with
/// `Transaction::lock_keys` makes the two conflict, and prevents it.
#[test]
fn write_skew_happens_and_lock_keys_prevents_it() {
    both_protocols(|client| {
        setup(client, 1, 1);
        let mut t1 = client.begin().unwrap();
        let mut t2 = client.begin().unwrap();
        assert_eq!(num(&t1, X) + num(&t1, Y), 2);
        assert_eq!(num(&t2, X) + num(&t2, Y), 2);
        t1.put(X, "0");
        t2.put(Y, "0");
        t1.commit().unwrap();
        t2.commit().unwrap();
        assert_eq!(latest(client), (0, 0), "write skew: both committed");

        setup(client, 1, 1);
        let mut t1 = client.begin().unwrap();
        let mut t2 = client.begin().unwrap();
        assert_eq!(num(&t1, X) + num(&t1, Y), 2);
        assert_eq!(num(&t2, X) + num(&t2, Y), 2);
        t1.put(X, "0");
        t1.lock_keys([Y]);
        t2.put(Y, "0");
        t2.lock_keys([X]);
        t1.commit().unwrap();
        assert_conflict(t2.commit());
        assert_eq!(latest(client), (0, 1));
    });
}

// ------------------------------------------------------------ pessimistic
//
// The same anomalies with pessimistic transactions: a write or a locking
// read takes its key's lock at once, so the second writer of a key is
// stopped when it writes (here, on one thread, by a short lock-wait and
// resolve timeout), not when it commits. Plain reads still read the
// snapshot at the start_ts; `get_for_update` reads the latest commit.

/// Runs `test` with pessimistic-friendly timeouts, on the defaults and
/// then with 2PC only.
fn both_protocols_pessimistic(test: impl Fn(&Client)) {
    let short = |config: ClientConfig| ClientConfig {
        lock_wait_timeout: std::time::Duration::from_millis(5),
        resolve_timeout: std::time::Duration::from_millis(30),
        ..config
    };
    both_protocols_with(short, test);
}

fn pnum(txn: &mut PessimisticTransaction, key: &[u8]) -> u64 {
    let value = txn.get_for_update(key).unwrap().expect("set up");
    String::from_utf8(value).unwrap().parse().unwrap()
}

/// The error of a write or locking read stopped by another transaction's
/// lock: the lock did not go away in time.
#[track_caller]
fn assert_stopped<T: std::fmt::Debug>(result: percolate::Result<T>) {
    match result {
        Err(Error::ResolveLockTimeout { .. }) => {}
        Err(Error::Mvcc(percolate::mvcc::Error::KeyIsLocked(_))) => {}
        other => panic!("expected the lock to stop it, got {other:?}"),
    }
}

/// **G0** with pessimistic transactions: T2's write of x is stopped by
/// T1's lock; whoever commits wrote both keys. Racing writers that lock x
/// then y, retried on deadlocks, always leave x and y from one of them.
#[test]
fn pessimistic_g0_dirty_write_never_happens() {
    both_protocols_pessimistic(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin_pessimistic().unwrap();
        let mut t2 = client.begin_pessimistic().unwrap();
        t1.put(X, "11").unwrap();
        assert_stopped(t2.put(X, "12"));
        t2.put(Y, "22").unwrap();
        assert_stopped(t1.put(Y, "21"));
        t2.rollback().unwrap();
        t1.put(Y, "21").unwrap();
        t1.commit().unwrap();
        assert_eq!(latest(client), (11, 21));

        race_writers_of_x_and_y(client, |value, barrier| {
            barrier.wait();
            client
                .with_retry_pessimistic(|txn| {
                    txn.put(X, value.clone())?;
                    txn.put(Y, value.clone())
                })
                .unwrap();
        });
    });
}

/// **G1a** with pessimistic transactions: T1's locks do not block readers,
/// who see the old x before and after T1 rolls back.
#[test]
fn pessimistic_g1a_aborted_read_never_happens() {
    both_protocols_pessimistic(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin_pessimistic().unwrap();
        t1.put(X, "11").unwrap();
        t1.put(Y, "21").unwrap();
        let t2 = client.begin().unwrap();
        assert_eq!(num(&t2, X), 10);
        assert_eq!(client.get_latest(X).unwrap(), Some(b"10".to_vec()));
        t1.rollback().unwrap();
        assert_eq!(num(&t2, X), 10);
        assert_eq!(latest(client), (10, 20));
    });
}

/// **Lost update** with pessimistic transactions: the second read for
/// update waits for the first transaction, and then reads its result; two
/// racing increments both count.
#[test]
fn pessimistic_lost_update_never_happens() {
    both_protocols_pessimistic(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin_pessimistic().unwrap();
        let mut t2 = client.begin_pessimistic().unwrap();
        let v1 = pnum(&mut t1, X);
        assert_stopped(t2.get_for_update(X));
        t1.put(X, (v1 + 1).to_string()).unwrap();
        t1.commit().unwrap();
        let v2 = pnum(&mut t2, X);
        t2.put(X, (v2 + 1).to_string()).unwrap();
        t2.commit().unwrap();
        assert_eq!(latest(client).0, 12);

        let barrier = Barrier::new(2);
        thread::scope(|s| {
            for _ in 0..2 {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    client
                        .with_retry_pessimistic(|txn| {
                            let v = pnum(txn, X);
                            txn.put(X, (v + 1).to_string())
                        })
                        .unwrap();
                });
            }
        });
        assert_eq!(latest(client).0, 14);
    });
}

/// **Read skew** with pessimistic transactions: plain reads keep the
/// snapshot, so T1 sees x and y from before T2; a locking read of y sees
/// T2's commit (as `SELECT ... FOR UPDATE` does) and holds it from then on.
#[test]
fn pessimistic_read_skew_never_happens_in_plain_reads() {
    both_protocols_pessimistic(|client| {
        setup(client, 10, 20);
        let mut t1 = client.begin_pessimistic().unwrap();
        let x = num_p(&t1, X);
        let mut t2 = client.begin_pessimistic().unwrap();
        t2.put(X, "5").unwrap();
        t2.put(Y, "25").unwrap();
        t2.commit().unwrap();
        assert_eq!((x, num_p(&t1, Y)), (10, 20));
        assert_eq!(pnum(&mut t1, Y), 25);
        let mut t3 = client.begin_pessimistic().unwrap();
        assert_stopped(t3.put(Y, "0"));
        t1.commit().unwrap();
        assert_eq!(latest(client), (5, 25));
    });
}

/// **Write skew** with pessimistic transactions: reading both keys for
/// update makes the second transaction wait for the first, and then see
/// its write, so the constraint holds.
#[test]
fn pessimistic_write_skew_is_prevented_by_reads_for_update() {
    both_protocols_pessimistic(|client| {
        setup(client, 1, 1);
        let mut t1 = client.begin_pessimistic().unwrap();
        let mut t2 = client.begin_pessimistic().unwrap();
        assert_eq!(pnum(&mut t1, X) + pnum(&mut t1, Y), 2);
        assert_stopped(t2.get_for_update(X));
        t1.put(X, "0").unwrap();
        t1.commit().unwrap();
        let sum = pnum(&mut t2, X) + pnum(&mut t2, Y);
        assert_eq!(sum, 1, "t2 sees t1's write");
        t2.rollback().unwrap();
        assert_eq!(latest(client), (0, 1));
    });
}

fn num_p(txn: &PessimisticTransaction, key: &[u8]) -> u64 {
    let value = txn.get(key).unwrap().expect("set up");
    String::from_utf8(value).unwrap().parse().unwrap()
}
