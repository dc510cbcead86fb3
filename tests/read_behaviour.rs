//! docs/BEHAVIOUR.md groups A (point get) and B (scan), one named test per
//! scenario, each run on the memory engine and on RocksDB.
//!
//! The data is written record by record with `MvccFixture` (a prewrite puts
//! a lock, a commit turns it into a write record, a rollback leaves a
//! Rollback record): these tests are about what readers make of the records.
//!
//! A20, B2 and B13 concern the region's read path (`percolate::txn::read`:
//! max_ts and in-memory locks of the concurrency manager, KvScan's argument
//! order). A10's push through CheckTxnStatus is done by rewriting the lock
//! (CheckTxnStatus itself is tested in txn_behaviour.rs, G3).

mod common;

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Engine, MemoryEngine};
use percolate::mvcc::testing::{MvccFixture, scan_shown, show_entry, ts};
use percolate::mvcc::{
    Error, IsolationLevel, Key, Lock, LockType, PointGetterBuilder, RollbackProtection, TimeStamp,
    TsSet, Write, WriteConflictReason, WriteType,
};
use percolate::txn::concurrency_manager::ConcurrencyManager;
use percolate::txn::read::{self, ReadOptions, ScanRequest};

const MAX: TimeStamp = TimeStamp::max();

fn get_with<E: Engine>(
    f: &MvccFixture<E>,
    key: &[u8],
    read_ts: u64,
    configure: impl FnOnce(PointGetterBuilder<E::Snap>) -> PointGetterBuilder<E::Snap>,
) -> Result<Option<Vec<u8>>, Error> {
    configure(PointGetterBuilder::new(f.engine().snapshot(), ts(read_ts)))
        .build()
        .get(&Key::from_raw(key))
}

fn set<const N: usize>(tss: [u64; N]) -> TsSet {
    tss.into_iter().collect()
}

/// Forward or backward scan results as `key=value` or `key=locked@ts`.
fn scan<E: Engine>(
    f: &MvccFixture<E>,
    read_ts: u64,
    reverse: bool,
    configure: impl FnOnce(
        percolate::mvcc::ScannerBuilder<E::Snap>,
    ) -> percolate::mvcc::ScannerBuilder<E::Snap>,
) -> Vec<String> {
    scan_shown(configure(f.scanner(ts(read_ts)).reverse(reverse)), 0)
}

fn reversed(mut v: Vec<String>) -> Vec<String> {
    v.reverse();
    v
}

fn pessimistic_lock(primary: &[u8], start_ts: u64, for_update_ts: u64) -> Lock {
    Lock {
        for_update_ts: ts(for_update_ts),
        ..Lock::new(LockType::Pessimistic, primary.to_vec(), ts(start_ts), 3000)
    }
}

// ---------------------------------------------------------------- group A

/// A1: an empty key reads as none; a rolled-back prewrite leaves nothing
/// visible.
fn a1_empty_key_and_rollback_are_invisible<E: Engine>(f: MvccFixture<E>) {
    f.must_get_none(b"k", 1);
    f.prewrite_put(b"k", b"v", b"k", 2);
    f.rollback(b"k", 2, RollbackProtection::Protected);
    f.must_get_none(b"k", 3);
    assert!(f.load_lock(b"k").is_none());
}

/// A2: a committed Lock record is not data; a read steps over it to the
/// older Put.
fn a2_lock_records_are_not_data<E: Engine>(f: MvccFixture<E>) {
    f.lock_committed(b"k", 3, 4);
    f.must_get_none(b"k", 5);
    f.put_committed(b"k2", b"v0", 1, 2);
    f.lock_committed(b"k2", 3, 4);
    f.must_get(b"k2", 5, b"v0");
}

/// A3's setup: txn 5 prewrites k1 (primary) and k2 (secondary).
fn a3_setup<E: Engine>(f: &MvccFixture<E>) {
    f.prewrite_put(b"k1", b"v", b"k1", 5);
    f.prewrite_put(b"k2", b"v", b"k1", 5);
}

/// A4: a read at u64::MAX skips a plain 2PC primary lock but not a
/// secondary, and not an async-commit or 1PC primary.
fn a4_max_ts_read_skips_only_plain_primary_lock<E: Engine>(f: MvccFixture<E>) {
    a3_setup(&f);
    assert_eq!(f.get(b"k1", MAX).unwrap(), None);
    f.must_get_locked(b"k2", MAX, 5);
    // An async-commit primary may already count as committed.
    let (mut lock, _) = MvccFixture::<E>::prewrite_lock(LockType::Put, b"k3", 6, Some(b"v"));
    lock.use_async_commit = true;
    lock.secondaries = vec![b"k4".to_vec()];
    f.put_lock(b"k3", lock, None);
    f.must_get_locked(b"k3", MAX, 6);
    // A lock the read ts is above blocks at SI as usual.
    f.must_get_locked(b"k1", ts(6), 5);
}

/// A5: visibility is commit_ts <= read_ts, whatever the start_ts.
fn a5_visibility_is_commit_ts_at_or_below_read_ts<E: Engine>(f: MvccFixture<E>) {
    a3_setup(&f);
    f.commit(b"k1", 5, 10);
    f.commit(b"k2", 5, 10);
    f.must_get_none(b"k1", 3);
    f.must_get_none(b"k1", 7);
    f.must_get(b"k1", 10, b"v");
    f.must_get(b"k1", 13, b"v");
    assert_eq!(f.get(b"k1", MAX).unwrap().as_deref(), Some(&b"v"[..]));
    f.must_get(b"k2", 10, b"v");
}

/// A7: a pessimistic lock never blocks reads; once prewritten it does, but
/// a MAX read still skips it as a primary.
fn a7_pessimistic_lock_never_blocks_reads<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"k", b"v", 25, 27);
    f.put_lock(b"k", pessimistic_lock(b"k", 23, 29), None);
    f.must_get(b"k", 30, b"v");
    // The pessimistic prewrite of a Delete replaces the lock.
    let delete = Lock {
        for_update_ts: ts(29),
        ..Lock::new(LockType::Delete, b"k".to_vec(), ts(23), 3000)
    };
    f.put_lock(b"k", delete, None);
    f.must_get_locked(b"k", ts(30), 23);
    assert_eq!(f.get(b"k", MAX).unwrap().as_deref(), Some(&b"v"[..]));
    f.commit(b"k", 23, 31);
    f.must_get(b"k", 30, b"v");
    f.must_get_none(b"k", 32);
}

/// A8: a lock whose ts equals the read ts blocks; an older read does not
/// see it.
fn a8_lock_ts_equal_to_read_ts_blocks<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"foo2", b"old", 1, 2);
    f.prewrite_put(b"foo2", b"new", b"foo2", 4);
    f.must_get_locked(b"foo2", ts(4), 4);
    f.must_get(b"foo2", 3, b"old");
}

/// A10: a lock with min_commit_ts > read_ts is ignored (strictly greater);
/// once pushed above the read ts, it stops blocking.
fn a10_min_commit_ts_above_read_ts_is_ignored<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"k", b"old", 1, 2);
    let (mut lock, _) = MvccFixture::<E>::prewrite_lock(LockType::Put, b"k", 80, Some(b"new"));
    lock.min_commit_ts = ts(100);
    f.put_lock(b"k", lock, None);
    f.must_get(b"k", 85, b"old");
    f.must_get(b"k", 99, b"old");
    f.must_get_locked(b"k", ts(100), 80);

    // A large transaction's lock, then the same lock after a status check
    // pushed its min_commit_ts past the reader.
    let start = TimeStamp::compose(5, 0);
    let reader = TimeStamp::compose(6, 0);
    f.put_committed(b"big", b"old", 1, 2);
    let mut lock = Lock::new(LockType::Put, b"big".to_vec(), start, 100);
    lock.min_commit_ts = TimeStamp::compose(5, 1);
    lock.short_value = Some(b"new".to_vec());
    f.put_lock(b"big", lock.clone(), None);
    f.must_get_locked(b"big", reader, start.into_inner());
    lock.min_commit_ts = reader.next();
    f.put_lock(b"big", lock, None);
    assert_eq!(f.get(b"big", reader).unwrap().as_deref(), Some(&b"old"[..]));
}

/// A11: locks of transactions in bypass_locks are ignored; others block.
fn a11_bypass_locks<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"k", b"v", 10, 20);
    f.prewrite_delete(b"k", b"k", 30);
    let got = get_with(&f, b"k", 60, |b| b.bypass_locks(set([30, 40, 50]))).unwrap();
    assert_eq!(got.as_deref(), Some(&b"v"[..]));
    let err = get_with(&f, b"k", 60, |b| b.bypass_locks(set([29, 31]))).unwrap_err();
    assert!(
        matches!(err, Error::KeyIsLocked(ref info) if info.lock_version == ts(30)),
        "{err}"
    );
}

/// A13: access_locks is used only when the lock would otherwise block;
/// then the lock's own value is returned (none for a Delete).
fn a13_access_locks_only_when_the_lock_would_block<E: Engine>(f: MvccFixture<E>) {
    let access = || set([30, 40, 50, 60, 70, 80]);
    let keys: [&[u8]; 7] = [
        b"above",
        b"locktype",
        b"pessimistic",
        b"pushed",
        b"bypassed",
        b"put",
        b"delete",
    ];
    for key in keys {
        f.put_committed(key, b"old", 10, 20);
    }
    f.prewrite_put(b"above", b"new", b"above", 70);
    f.prewrite_lock_only(b"locktype", b"locktype", 30);
    f.put_lock(
        b"pessimistic",
        pessimistic_lock(b"pessimistic", 40, 40),
        None,
    );
    let (mut pushed, _) =
        MvccFixture::<E>::prewrite_lock(LockType::Put, b"pushed", 50, Some(b"new"));
    pushed.min_commit_ts = ts(66);
    f.put_lock(b"pushed", pushed, None);
    f.prewrite_put(b"bypassed", b"new", b"bypassed", 60);
    f.prewrite_put(b"put", b"new", b"put", 80);
    f.put_lock(
        b"delete",
        Lock::new(LockType::Delete, b"delete".to_vec(), ts(80), 0),
        None,
    );
    let read = |key: &[u8], bypass: TsSet| {
        get_with(&f, key, 65, |b| {
            b.access_locks(access()).bypass_locks(bypass)
        })
        .unwrap()
    };
    for key in [&b"above"[..], b"locktype", b"pessimistic", b"pushed"] {
        assert_eq!(
            read(key, TsSet::new()).as_deref(),
            Some(&b"old"[..]),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
    assert_eq!(read(b"bypassed", set([60])).as_deref(), Some(&b"old"[..]));
    let late = |key: &[u8]| get_with(&f, key, 90, |b| b.access_locks(access())).unwrap();
    assert_eq!(late(b"put").as_deref(), Some(&b"new"[..]));
    assert_eq!(late(b"delete"), None);
    // A long value is read from the default CF at the lock's start_ts.
    let long = vec![b'L'; 300];
    f.prewrite_put(b"long", &long, b"long", 80);
    assert_eq!(late(b"long"), Some(long));
}

/// A14: RC ignores locks entirely; SI is blocked.
fn a14_rc_ignores_locks<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"k", b"v1", 5, 10);
    f.prewrite_put(b"k", b"v2", b"k", 15);
    let rc = get_with(&f, b"k", 20, |b| b.isolation_level(IsolationLevel::Rc)).unwrap();
    assert_eq!(rc.as_deref(), Some(&b"v1"[..]));
    f.must_get_locked(b"k", ts(20), 15);
}

/// A16: at RcCheckTs any Put/Delete lock conflicts, even above the read ts;
/// Lock-type and pessimistic locks do not.
fn a16_rc_check_ts_conflicts_on_any_put_or_delete_lock<E: Engine>(f: MvccFixture<E>) {
    f.prewrite_put(b"k3", b"v3", b"k3", 50);
    let err = get_with(&f, b"k3", 45, |b| {
        b.isolation_level(IsolationLevel::RcCheckTs)
    })
    .unwrap_err();
    match err {
        Error::WriteConflict {
            conflict_start_ts,
            conflict_commit_ts,
            reason,
            ..
        } => {
            assert_eq!((conflict_start_ts, conflict_commit_ts), (ts(50), ts(0)));
            assert_eq!(reason, WriteConflictReason::RcCheckTs);
        }
        other => panic!("expected WriteConflict, got {other}"),
    }
    f.put_committed(b"k4", b"v4", 1, 2);
    f.prewrite_lock_only(b"k4", b"k4", 60);
    f.put_committed(b"k5", b"v5", 3, 4);
    f.put_lock(b"k5", pessimistic_lock(b"k5", 65, 65), None);
    for (key, value) in [(&b"k4"[..], &b"v4"[..]), (b"k5", b"v5")] {
        let got = get_with(&f, key, 70, |b| {
            b.isolation_level(IsolationLevel::RcCheckTs)
        })
        .unwrap();
        assert_eq!(got.as_deref(), Some(value));
    }
}

/// A16, newer records: at RcCheckTs a record committed above the read ts
/// fails the read whatever its type (a Put, a Delete, a Lock record or a
/// Rollback), reported as TiKV does: conflict_start_ts 0 and the record's
/// commit_ts.
fn a16_rc_check_ts_reports_any_newer_record_without_its_start_ts<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"put", b"v", 50, 55);
    f.put_committed(b"del", b"v", 1, 2);
    f.delete_committed(b"del", 50, 56);
    f.put_committed(b"lock", b"v", 1, 2);
    f.lock_committed(b"lock", 50, 57);
    f.put_committed(b"rb", b"v", 1, 2);
    f.rollback(b"rb", 58, RollbackProtection::Protected);
    for (key, commit_ts) in [(&b"put"[..], 55), (b"del", 56), (b"lock", 57), (b"rb", 58)] {
        let err = get_with(&f, key, 45, |b| {
            b.isolation_level(IsolationLevel::RcCheckTs)
        })
        .unwrap_err();
        match err {
            Error::WriteConflict {
                start_ts,
                conflict_start_ts,
                conflict_commit_ts,
                key: conflict_key,
                reason,
                ..
            } => {
                assert_eq!(
                    (start_ts, conflict_start_ts, conflict_commit_ts),
                    (ts(45), ts(0), ts(commit_ts))
                );
                assert_eq!(conflict_key, Key::from_raw(key));
                assert_eq!(reason, WriteConflictReason::RcCheckTs);
            }
            other => panic!("expected WriteConflict, got {other}"),
        }
        // At or above the newest record there is nothing to report.
        let read = get_with(&f, key, commit_ts, |b| {
            b.isolation_level(IsolationLevel::RcCheckTs)
        });
        assert!(read.is_ok(), "{read:?}");
    }
}

/// A17: many Lock records with nothing underneath read as none.
fn a17_many_lock_records_with_nothing_underneath<E: Engine>(f: MvccFixture<E>) {
    for i in 0..15 {
        f.lock_committed(b"k", 2 * i + 1, 2 * i + 2);
    }
    f.must_get_none(b"k", 40);
    // And with a Put underneath, it is found through all of them.
    f.put_committed(b"k2", b"v", 1, 2);
    for i in 1..15 {
        f.lock_committed(b"k2", 2 * i + 1, 2 * i + 2);
    }
    f.must_get(b"k2", 40, b"v");
}

/// The A19 grid: records rewritten with a gc_fence.
fn a19_setup<E: Engine>(f: &MvccFixture<E>) -> Vec<(&'static [u8], Option<&'static [u8]>)> {
    let put = |key: &[u8], start: u64, commit: u64, fence: Option<u64>| {
        let value = [&b"v"[..], &key[1..]].concat();
        let write = Write::new(WriteType::Put, ts(start), Some(value))
            .set_overlapped_rollback(true, fence.map(ts));
        f.put_write(key, commit, &write);
    };
    let record = |key: &[u8], write_type: WriteType, commit: u64, fence: Option<u64>| {
        let write = Write::new(write_type, ts(commit - 1), None);
        let write = match fence {
            Some(fence) => write.set_overlapped_rollback(true, Some(ts(fence))),
            None => write,
        };
        f.put_write(key, commit, &write);
    };
    put(b"k1", 19, 20, Some(50));
    put(b"k2", 19, 20, Some(40));
    put(b"k3", 19, 20, Some(30));
    put(b"k4", 13, 14, Some(20));
    put(b"k4", 19, 20, Some(30));
    put(b"k5", 13, 14, Some(20));
    record(b"k5", WriteType::Delete, 20, Some(30));
    put(b"k6", 19, 20, Some(50));
    record(b"k6", WriteType::Lock, 26, None);
    record(b"k6", WriteType::Lock, 29, None);
    put(b"k7", 19, 20, Some(27));
    record(b"k7", WriteType::Lock, 26, None);
    record(b"k7", WriteType::Lock, 29, None);
    put(b"k8", 29, 30, Some(0));
    put(b"k9", 19, 20, Some(27));
    record(b"k9", WriteType::Lock, 26, None);
    vec![
        (b"k1", Some(b"v1")),
        (b"k2", None),
        (b"k3", None),
        (b"k4", None),
        (b"k5", None),
        (b"k6", Some(b"v6")),
        (b"k7", None),
        (b"k8", Some(b"v8")),
        (b"k9", None),
    ]
}

/// A19: a record whose gc_fence is non-zero and at or below the read ts is
/// treated as gone, by point gets and by scans in both directions.
fn a19_gc_fence_is_honoured_on_read<E: Engine>(f: MvccFixture<E>) {
    let expected = a19_setup(&f);
    for (key, value) in &expected {
        assert_eq!(
            f.get(key, ts(40)).unwrap().as_deref(),
            *value,
            "{}",
            String::from_utf8_lossy(key)
        );
    }
    let visible: Vec<String> = expected
        .iter()
        .filter_map(|(k, v)| {
            v.map(|v| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v)
                )
            })
        })
        .collect();
    assert_eq!(scan(&f, 40, false, |b| b), visible);
    assert_eq!(scan(&f, 40, true, |b| b), reversed(visible));
}

// ---------------------------------------------------------------- group B

/// B1's data: keys [1]..[6], versions committed at 1 (""), 7 ([i]) and 14
/// (""), read at 10.
fn b1_setup<E: Engine>(f: &MvccFixture<E>) {
    for i in 1u8..=6 {
        for (commit, value) in [(1, vec![]), (7, vec![b'0' + i]), (14, vec![])] {
            let write = Write::new(WriteType::Put, ts(commit), Some(value));
            f.put_write(&[b'0' + i], commit, &write);
        }
    }
}

/// B1: lower bound inclusive, upper exclusive, in both directions.
fn b1_scan_bounds<E: Engine>(f: MvccFixture<E>) {
    b1_setup(&f);
    let range = |lo: Option<&[u8]>, hi: Option<&[u8]>, reverse| {
        scan(&f, 10, reverse, |b| {
            b.range(lo.map(Key::from_raw), hi.map(Key::from_raw))
        })
    };
    let pairs = |keys: &[u8]| {
        keys.iter()
            .map(|k| format!("{0}={0}", *k as char))
            .collect::<Vec<_>>()
    };
    assert_eq!(range(Some(b"3"), Some(b"5"), false), pairs(b"34"));
    assert_eq!(range(Some(b"3"), Some(b"5"), true), pairs(b"43"));
    assert_eq!(range(None, Some(b"3"), false), pairs(b"12"));
    assert_eq!(range(None, Some(b"3"), true), pairs(b"21"));
    assert_eq!(range(Some(b"5"), None, false), pairs(b"56"));
    assert_eq!(range(Some(b"5"), None, true), pairs(b"65"));
    assert_eq!(range(None, None, false), pairs(b"123456"));
    assert_eq!(range(None, None, true), pairs(b"654321"));
    // At 14 every value is empty; at 0 nothing is visible.
    assert_eq!(scan(&f, 14, false, |b| b).len(), 6);
    assert!(scan(&f, 0, true, |b| b).is_empty());
}

/// B4: locked keys yield per-key KeyIsLocked entries that count toward the
/// limit, and the scan goes on; any other error fails the scan.
fn b4_locked_keys_are_per_key_entries<E: Engine>(f: MvccFixture<E>) {
    for key in [b"a", b"b", b"c"] {
        f.prewrite_put(key, b"v", b"a", 1);
    }
    let all = vec!["a=locked@1", "b=locked@1", "c=locked@1"];
    assert_eq!(scan(&f, 5, false, |b| b), all);
    assert_eq!(
        scan(&f, 5, true, |b| b),
        reversed(all.iter().map(|s| s.to_string()).collect())
    );
    let mut scanner = f.scanner(ts(5)).build().unwrap();
    let limited = scanner.scan(2).unwrap();
    assert_eq!(limited.len(), 2);
    assert!(
        limited
            .iter()
            .all(|e| matches!(e, Err(Error::KeyIsLocked(_))))
    );
    // Bad bytes in the lock CF are not a per-key entry.
    let mut batch = percolate::engine::WriteBatch::new();
    batch.put(
        percolate::engine::Cf::Lock,
        Key::from_raw(b"b").into_encoded(),
        vec![b'X', 1, 2],
    );
    f.engine().write(&batch, Default::default()).unwrap();
    let err = f.scanner(ts(5)).build().unwrap().scan(0).unwrap_err();
    assert!(err.is_corruption(), "{err}");
}

/// B5: lock filtering in scans matches point gets.
fn b5_scan_lock_filtering_matches_point_get<E: Engine>(f: MvccFixture<E>) {
    for i in 0u8..5 {
        let key = [b'0' + i];
        f.put_committed(&key, format!("old{i}").as_bytes(), 1, 2);
        f.put_committed(&key, format!("new{i}").as_bytes(), 10, 100);
    }
    f.put_lock(b"1", pessimistic_lock(b"1", 20, 20), None);
    f.put_lock(b"2", pessimistic_lock(b"2", 50, 50), None);
    f.put_lock(b"3", pessimistic_lock(b"3", 105, 105), None);
    f.prewrite_put(b"4", b"pending", b"4", 105);
    let values = |v: &str| (0..5).map(|i| format!("{i}={v}{i}")).collect::<Vec<_>>();
    for (read_ts, v) in [(30, "old"), (70, "old"), (103, "new")] {
        assert_eq!(scan(&f, read_ts, false, |b| b), values(v));
        assert_eq!(scan(&f, read_ts, true, |b| b), reversed(values(v)));
    }
    let mut expected = values("new");
    expected[4] = "4=locked@105".to_string();
    assert_eq!(scan(&f, 106, false, |b| b), expected);
    assert_eq!(scan(&f, 106, true, |b| b), reversed(expected));
    for i in 0..4u8 {
        assert!(f.get(&[b'0' + i], ts(106)).is_ok());
    }
    f.must_get_locked(b"4", ts(106), 105);
}

/// B7: bypass_locks in scans.
fn b7_scan_bypass_locks<E: Engine>(f: MvccFixture<E>) {
    for i in 0u8..5 {
        let key = [b'0' + i];
        f.put_committed(&key, format!("v{i}").as_bytes(), 10, 20);
        f.prewrite_put(&key, b"pending", &key, 30 + 10 * i as u64);
    }
    let expected = vec!["0=v0", "1=locked@40", "2=v2", "3=locked@60", "4=v4"];
    let expected: Vec<String> = expected.into_iter().map(String::from).collect();
    assert_eq!(
        scan(&f, 65, false, |b| b.bypass_locks(set([30, 41, 50]))),
        expected
    );
    assert_eq!(
        scan(&f, 65, true, |b| b.bypass_locks(set([30, 41, 50]))),
        reversed(expected)
    );
}

/// B8: access_locks in scans: committed transactions' pending values are
/// read where their locks would block; a Delete hides the key.
fn b8_scan_access_locks<E: Engine>(f: MvccFixture<E>) {
    for i in 0u8..9 {
        f.put_committed(&[b'0' + i], b"old", 10, 20);
    }
    f.prewrite_put(b"0", b"new", b"0", 30);
    f.prewrite_put(b"1", &[b'N'; 300], b"1", 40);
    f.prewrite_delete(b"2", b"2", 50);
    f.prewrite_lock_only(b"3", b"3", 60);
    f.prewrite_put(b"4", b"new", b"4", 70);
    f.prewrite_put(b"5", b"new", b"5", 80);
    f.prewrite_put(b"6", b"new", b"6", 100);
    f.prewrite_put(b"8", b"new", b"8", 90);
    let long_new = format!("1={}", "N".repeat(300));
    let expected: Vec<String> = [
        "0=new",
        &long_new,
        "3=old",
        "4=locked@70",
        "5=old",
        "6=old",
        "7=old",
        "8=new",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let configure = |b: percolate::mvcc::ScannerBuilder<E::Snap>| {
        b.access_locks(set([30, 40, 50, 60, 90]))
            .bypass_locks(set([80]))
    };
    assert_eq!(scan(&f, 95, false, configure), expected);
    assert_eq!(scan(&f, 95, true, configure), reversed(expected));
}

/// B10: an RC scan never reads the lock CF.
fn b10_rc_scan_never_reads_the_lock_cf<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"foo1", b"bar1", 10, 20);
    f.put_committed(b"foo2", b"bar2", 30, 40);
    f.prewrite_put(b"foo1", b"bar3", b"foo1", 50);
    for reverse in [false, true] {
        let mut scanner = f
            .scanner(ts(60))
            .reverse(reverse)
            .isolation_level(IsolationLevel::Rc)
            .build()
            .unwrap();
        let got: Vec<_> = scanner
            .scan(0)
            .unwrap()
            .into_iter()
            .map(|e| e.unwrap().1)
            .collect();
        let mut want = vec![b"bar1".to_vec(), b"bar2".to_vec()];
        if reverse {
            want.reverse();
        }
        assert_eq!(got, want);
        assert_eq!(scanner.statistics().lock.total(), 0);
    }
}

/// B11: an RcCheckTs scan fails at the first newer commit or Put/Delete
/// lock; Lock-type and pessimistic locks do not count.
fn b11_rc_check_ts_scan_fails_on_first_conflict<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"k0", b"v0", 1, 2);
    f.put_committed(b"k1", b"v1", 3, 4);
    f.put_committed(b"k2", b"v2", 40, 42);
    f.put_committed(b"k3", b"v3", 5, 6);
    f.prewrite_lock_only(b"k3", b"k3", 60);
    f.put_committed(b"k4", b"v4", 7, 8);
    f.put_lock(b"k4", pessimistic_lock(b"k4", 65, 65), None);
    f.put_committed(b"k5", b"v5", 9, 10);
    f.put_committed(b"k6", b"v6", 11, 12);
    f.prewrite_put(b"k6", b"v6new", b"k6", 75);
    let walk = |read_ts: u64, reverse: bool| {
        let mut scanner = f
            .scanner(ts(read_ts))
            .reverse(reverse)
            .isolation_level(IsolationLevel::RcCheckTs)
            .build()
            .unwrap();
        let mut keys = Vec::new();
        loop {
            match scanner.next() {
                Ok(Some((key, _))) => keys.push(key.to_raw().unwrap()),
                Ok(None) => return (keys, None),
                Err(Error::WriteConflict {
                    key,
                    conflict_start_ts,
                    conflict_commit_ts,
                    reason,
                    ..
                }) => {
                    assert_eq!(reason, WriteConflictReason::RcCheckTs);
                    let conflict = (conflict_start_ts, conflict_commit_ts);
                    return (keys, Some((key.to_raw().unwrap(), conflict)));
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    let keys = |names: &[&str]| {
        names
            .iter()
            .map(|n| n.as_bytes().to_vec())
            .collect::<Vec<_>>()
    };
    // A newer commit is reported without its start_ts, as TiKV does; a
    // lock with its start_ts and no commit_ts.
    assert_eq!(
        walk(35, false),
        (keys(&["k0", "k1"]), Some((b"k2".to_vec(), (ts(0), ts(42)))))
    );
    assert_eq!(
        walk(70, false),
        (
            keys(&["k0", "k1", "k2", "k3", "k4", "k5"]),
            Some((b"k6".to_vec(), (ts(75), ts(0))))
        )
    );
    let k6_locked = Some((b"k6".to_vec(), (ts(75), ts(0))));
    assert_eq!(walk(70, true), (vec![], k6_locked.clone()));
    assert_eq!(walk(35, true).1, k6_locked);
    // Any newer record counts, a Rollback too (TiKV's check_rc_newer_write).
    f.rollback(b"k6", 75, RollbackProtection::Protected);
    let k6_rolled_back = Some((b"k6".to_vec(), (ts(0), ts(75))));
    assert_eq!(walk(70, true), (vec![], k6_rolled_back.clone()));
    assert_eq!(walk(70, false).1, k6_rolled_back);
    assert_eq!(
        walk(80, true),
        (keys(&["k6", "k5", "k4", "k3", "k2", "k1", "k0"]), None)
    );
    assert_eq!(walk(35, true), (vec![], k6_rolled_back));
}

/// A20: reads advance max_ts; stale reads and reads at MAX do not.
fn a20_reads_advance_max_ts<E: Engine>(f: MvccFixture<E>) {
    let cm = ConcurrencyManager::new(ts(50));
    let key = Key::from_raw(b"k");
    let get = |read_ts: TimeStamp, stale_read: bool| {
        let options = ReadOptions {
            stale_read,
            ..Default::default()
        };
        read::get(f.engine(), &cm, &key, read_ts, &options).unwrap()
    };
    assert_eq!(get(ts(100), false), None);
    assert_eq!(cm.max_ts(), ts(100));
    get(ts(200), true);
    assert_eq!(cm.max_ts(), ts(100));
    get(MAX, false);
    assert_eq!(cm.max_ts(), ts(100));
    cm.update_max_ts(MAX).unwrap();
    assert_eq!(cm.max_ts(), ts(100));
}

/// B2: a reverse KvScan takes `start_key` as the exclusive upper bound and
/// `end_key` as the inclusive lower bound.
fn b2_reverse_scan_argument_order<E: Engine>(f: MvccFixture<E>) {
    for key in [b"a", b"b", b"c"] {
        f.put_committed(key, key, 1, 2);
    }
    let cm = ConcurrencyManager::new(ts(1));
    let keys = |start: &[u8], end: &[u8], reverse: bool| {
        let request = ScanRequest {
            start_key: Key::from_raw(start),
            end_key: Some(Key::from_raw(end)),
            limit: 0,
            ts: ts(10),
            key_only: false,
            reverse,
        };
        read::scan(f.engine(), &cm, &request, &ReadOptions::default())
            .unwrap()
            .into_iter()
            .map(|e| e.unwrap().0.to_raw().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(b"\xff", b"b", true),
        vec![b"c".to_vec(), b"b".to_vec()]
    );
    assert_eq!(
        keys(b"\x00", b"c", false),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
}

/// B13: an in-memory lock in the range fails the whole scan (not a per-key
/// entry), in both directions, unless its transaction is bypassed.
fn b13_memory_lock_fails_the_whole_scan<E: Engine>(f: MvccFixture<E>) {
    for key in [&b"a"[..], b"b", b"key", b"z"] {
        f.put_committed(key, b"v", 1, 2);
    }
    let cm = ConcurrencyManager::new(ts(1));
    let guards = cm.lock_keys([Key::from_raw(b"key")]);
    guards[0].set_lock(Lock::new(LockType::Put, b"key".to_vec(), ts(10), 3000));
    let scan = |start: &[u8], reverse: bool, bypass: TsSet| {
        let request = ScanRequest {
            start_key: Key::from_raw(start),
            end_key: None,
            limit: 0,
            ts: ts(100),
            key_only: false,
            reverse,
        };
        let options = ReadOptions {
            bypass_locks: bypass,
            ..Default::default()
        };
        read::scan(f.engine(), &cm, &request, &options)
    };
    for (start, reverse) in [(&b"a"[..], false), (&b"\xff"[..], true)] {
        match scan(start, reverse, TsSet::new()) {
            Err(percolate::txn::Error::Mvcc(Error::KeyIsLocked(info))) => {
                assert_eq!(info.key, b"key")
            }
            other => panic!("expected a request-level KeyIsLocked, got {other:?}"),
        }
        assert_eq!(scan(start, reverse, set([10])).unwrap().len(), 4);
    }
    // A point get of the key is blocked too; of another key, not.
    let get = |key: &[u8]| {
        read::get(
            f.engine(),
            &cm,
            &Key::from_raw(key),
            ts(100),
            &ReadOptions::default(),
        )
    };
    assert!(matches!(
        get(b"key"),
        Err(percolate::txn::Error::Mvcc(Error::KeyIsLocked(_)))
    ));
    assert_eq!(get(b"b").unwrap().as_deref(), Some(&b"v"[..]));
    drop(guards);
    assert_eq!(scan(b"a", false, TsSet::new()).unwrap().len(), 4);
}

/// A16 with A11 / A13 / B7 / B8, and B13: at RcCheckTs a Put or Delete
/// lock whose transaction is in `bypass_locks` is ignored and one in
/// `access_locks` is read through, in point gets and scans, as at SI
/// (TiKV's `check_ts_conflict_rc_check_ts` and its getter and scanner);
/// and the memory lock of a prewrite in flight fails the read at once with
/// its `WriteConflict` (TiKV checks memory locks at SI and RcCheckTs).
fn a16_rc_check_ts_honours_bypass_and_access_locks_and_memory_locks<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"k", b"v1", 10, 20);
    f.prewrite_put(b"k", b"v2", b"k", 30);
    let rc = |b: PointGetterBuilder<E::Snap>| b.isolation_level(IsolationLevel::RcCheckTs);
    let got = get_with(&f, b"k", 40, |b| rc(b).bypass_locks(set([30]))).unwrap();
    assert_eq!(got.as_deref(), Some(&b"v1"[..]));
    let got = get_with(&f, b"k", 40, |b| rc(b).access_locks(set([30]))).unwrap();
    assert_eq!(got.as_deref(), Some(&b"v2"[..]));
    assert!(matches!(
        get_with(&f, b"k", 40, |b| rc(b).access_locks(set([31]))),
        Err(Error::WriteConflict { .. })
    ));
    for reverse in [false, true] {
        let bypassed = scan(&f, 40, reverse, |b| {
            b.isolation_level(IsolationLevel::RcCheckTs)
                .bypass_locks(set([30]))
        });
        assert_eq!(bypassed, vec!["k=v1".to_string()]);
        let accessed = scan(&f, 40, reverse, |b| {
            b.isolation_level(IsolationLevel::RcCheckTs)
                .access_locks(set([30]))
        });
        assert_eq!(accessed, vec!["k=v2".to_string()]);
    }

    // The memory lock of a prewrite in flight on "m".
    f.put_committed(b"m", b"v", 1, 2);
    let cm = ConcurrencyManager::new(ts(1));
    let guards = cm.lock_keys([Key::from_raw(b"m")]);
    guards[0].set_lock(Lock::new(LockType::Put, b"m".to_vec(), ts(50), 3000));
    let options = |bypass: TsSet| ReadOptions {
        isolation_level: IsolationLevel::RcCheckTs,
        bypass_locks: bypass,
        ..Default::default()
    };
    let conflict = |result: Result<_, percolate::txn::Error>| match result {
        Err(percolate::txn::Error::Mvcc(Error::WriteConflict {
            conflict_start_ts,
            conflict_commit_ts,
            reason,
            ..
        })) => {
            assert_eq!((conflict_start_ts, conflict_commit_ts), (ts(50), ts(0)));
            assert_eq!(reason, WriteConflictReason::RcCheckTs);
        }
        other => panic!("expected the memory lock's WriteConflict, got {other:?}"),
    };
    let m = Key::from_raw(b"m");
    conflict(read::get(f.engine(), &cm, &m, ts(45), &options(TsSet::new())).map(drop));
    let request = ScanRequest {
        start_key: Key::from_raw(b"l"),
        end_key: Some(Key::from_raw(b"n")),
        limit: 0,
        ts: ts(45),
        key_only: false,
        reverse: false,
    };
    conflict(read::scan(f.engine(), &cm, &request, &options(TsSet::new())).map(drop));
    let got = read::get(f.engine(), &cm, &m, ts(45), &options(set([50]))).unwrap();
    assert_eq!(got.as_deref(), Some(&b"v"[..]));
    assert_eq!(
        read::scan(f.engine(), &cm, &request, &options(set([50])))
            .unwrap()
            .len(),
        1
    );
    drop(guards);
}

// ------------------------------------------------ beyond the catalogue

/// Key-only scans never read the default CF; long values are loaded from
/// it otherwise.
fn scan_key_only_and_long_values<E: Engine>(f: MvccFixture<E>) {
    let long = vec![b'x'; 1000];
    f.put_committed(b"long", &long, 1, 2);
    f.put_committed(b"short", b"s", 3, 4);
    for reverse in [false, true] {
        let mut scanner = f
            .scanner(ts(10))
            .reverse(reverse)
            .key_only(true)
            .build()
            .unwrap();
        let got = scanner.scan(0).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|e| e.as_ref().unwrap().1.is_empty()));
        assert_eq!(scanner.statistics().data.get, 0);
        let mut scanner = f.scanner(ts(10)).reverse(reverse).build().unwrap();
        let got: Vec<_> = scanner
            .scan(0)
            .unwrap()
            .into_iter()
            .map(|e| e.unwrap().1)
            .collect();
        let want = if reverse {
            vec![b"s".to_vec(), long.clone()]
        } else {
            vec![long.clone(), b"s".to_vec()]
        };
        assert_eq!(got, want);
    }
}

/// A short value costs exactly one write-CF seek and one lock-CF get; a
/// long one adds one default-CF get.
fn point_get_costs_one_write_cf_lookup<E: Engine>(f: MvccFixture<E>) {
    f.put_committed(b"short", b"v", 1, 2);
    f.put_committed(b"long", &[b'v'; 256], 3, 4);
    let mut getter = PointGetterBuilder::new(f.engine().snapshot(), ts(10)).build();
    assert_eq!(
        getter.get(&Key::from_raw(b"short")).unwrap().as_deref(),
        Some(&b"v"[..])
    );
    let stats = *getter.statistics();
    assert_eq!(
        (
            stats.write.seek,
            stats.write.next,
            stats.lock.get,
            stats.data.get
        ),
        (1, 0, 1, 0)
    );
    assert_eq!(
        getter
            .get(&Key::from_raw(b"long"))
            .unwrap()
            .map(|v| v.len()),
        Some(256)
    );
    assert_eq!(getter.statistics().data.get, 1);
}

/// Many versions above and below the read ts, in both directions: the
/// scanners seek over long runs and still land on the right version.
fn scan_many_versions<E: Engine>(f: MvccFixture<E>) {
    for key in [b"a", b"b", b"c"] {
        for v in 0..20u64 {
            f.put_committed(key, format!("{v}").as_bytes(), 10 * v + 1, 10 * v + 2);
            f.lock_committed(key, 10 * v + 5, 10 * v + 6);
        }
    }
    f.delete_committed(b"b", 300, 301);
    for (read_ts, want) in [(95, "9"), (100, "9"), (102, "10"), (500, "19")] {
        let expect_b = if read_ts >= 301 { None } else { Some(want) };
        let mut expected = vec![format!("a={want}")];
        if let Some(b) = expect_b {
            expected.push(format!("b={b}"));
        }
        expected.push(format!("c={want}"));
        assert_eq!(scan(&f, read_ts, false, |b| b), expected, "at {read_ts}");
        assert_eq!(
            scan(&f, read_ts, true, |b| b),
            reversed(expected),
            "at {read_ts}"
        );
    }
}

/// A Put whose long value is missing from the default CF is reported as
/// DefaultNotFound, and bad record bytes as Corruption naming the CF and
/// key; neither panics.
fn damaged_records_are_errors<E: Engine>(f: MvccFixture<E>) {
    let write = Write::new(WriteType::Put, ts(1), None);
    f.put_write(b"nodata", 2, &write);
    let err = f.get(b"nodata", ts(5)).unwrap_err();
    assert!(
        matches!(err, Error::DefaultNotFound { start_ts, .. } if start_ts == ts(1)),
        "{err}"
    );
    let mut batch = percolate::engine::WriteBatch::new();
    batch.put(
        percolate::engine::Cf::Write,
        Key::from_raw(b"bad").append_ts(ts(3)).into_encoded(),
        vec![b'P'],
    );
    batch.put(
        percolate::engine::Cf::Lock,
        Key::from_raw(b"badlock").into_encoded(),
        vec![b'P', 0x7f],
    );
    f.engine().write(&batch, Default::default()).unwrap();
    let err = f.get(b"bad", ts(5)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corruption {
                cf: percolate::engine::Cf::Write,
                ..
            }
        ),
        "{err}"
    );
    let err = f.get(b"badlock", ts(5)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corruption {
                cf: percolate::engine::Cf::Lock,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("lock"), "{err}");
    let err = f.scanner(ts(5)).build().unwrap().scan(0).unwrap_err();
    assert!(err.is_corruption());
}

/// Scans read their range in chunks (a chunk of keys from the write CF,
/// then the locks of the key range it spans): on a range of 300 keys,
/// longer than several chunks, with committed versions, deletes, locks of
/// every kind on keys with and without data, and lock tombstones left by
/// released locks, every scan (both directions, several ranges and
/// limits, several read timestamps) returns exactly what point gets of
/// each key in the range say, in order.
fn scans_agree_with_point_gets_across_chunks<E: Engine>(f: MvccFixture<E>) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261123);
    let key = |i: usize| format!("k{i:04}").into_bytes();
    const KEYS: usize = 300;
    let mut next_ts = 10;
    for i in 0..KEYS {
        let k = key(i);
        for _ in 0..rng.random_range(0..3) {
            let (start, commit) = (next_ts, next_ts + 1);
            next_ts += 2;
            if rng.random_bool(0.8) {
                let value = format!("v{i}-{start}");
                f.put_committed(&k, value.as_bytes(), start, commit);
            } else {
                f.delete_committed(&k, start, commit);
            }
        }
        // A lock released by a rollback: a tombstone in the lock CF.
        if rng.random_bool(0.3) {
            f.prewrite_put(&k, b"rolled back", &k, next_ts);
            f.rollback(&k, next_ts, RollbackProtection::Protected);
            next_ts += 2;
        }
    }
    for i in 0..KEYS {
        if rng.random_bool(0.15) {
            let k = key(i);
            let start = rng.random_range(10..next_ts + 10);
            match rng.random_range(0..4) {
                0 => f.prewrite_put(&k, b"pending", &k, start),
                1 => f.prewrite_delete(&k, &k, start),
                2 => f.prewrite_lock_only(&k, &k, start),
                _ => f.put_lock(&k, pessimistic_lock(&k, start, start), None),
            }
        }
    }
    let point = |i: usize, read_ts: u64| -> Option<String> {
        match get_with(&f, &key(i), read_ts, |b| b) {
            Ok(Some(v)) => Some(show_entry(Ok((Key::from_raw(&key(i)), v)))),
            Ok(None) => None,
            Err(e) => Some(show_entry(Err(e))),
        }
    };
    for read_ts in [next_ts / 3, next_ts / 2, next_ts + 100] {
        let expected: Vec<String> = (0..KEYS).filter_map(|i| point(i, read_ts)).collect();
        // The data is what the test means it to be: many readable keys,
        // and at the newest read ts, keys locked by pending transactions.
        assert!(expected.len() > 40, "{} entries", expected.len());
        if read_ts > next_ts {
            let locked = expected.iter().filter(|e| e.contains("=locked@")).count();
            assert!(locked > 10, "{locked} locked entries");
        }
        for (lo, hi) in [(0, KEYS), (17, 250), (100, 101), (299, 300)] {
            let in_range: Vec<String> = (lo..hi).filter_map(|i| point(i, read_ts)).collect();
            for reverse in [false, true] {
                for limit in [0, 1, 15, 16, 17, 40, 1000] {
                    let lower = (lo > 0).then(|| Key::from_raw(&key(lo)));
                    let upper = (hi < KEYS).then(|| Key::from_raw(&key(hi)));
                    let got = scan_shown(
                        f.scanner(ts(read_ts)).range(lower, upper).reverse(reverse),
                        limit,
                    );
                    let mut want = in_range.clone();
                    if reverse {
                        want.reverse();
                    }
                    if limit > 0 {
                        want.truncate(limit);
                    }
                    assert_eq!(
                        got, want,
                        "read_ts {read_ts}, range {lo}..{hi}, reverse {reverse}, limit {limit}"
                    );
                }
            }
        }
        // Streaming with `next` (chunks sized without a limit) agrees too.
        let mut scanner = f.scanner(ts(read_ts)).build().unwrap();
        let mut streamed = Vec::new();
        loop {
            match scanner.next() {
                Ok(None) => break,
                entry => streamed.push(show_entry(entry.map(|pair| pair.expect("some")))),
            }
        }
        assert_eq!(streamed, expected, "streamed at read_ts {read_ts}");
    }
}

on_both_engines!(
    MvccFixture;
    a1_empty_key_and_rollback_are_invisible,
    a2_lock_records_are_not_data,
    a4_max_ts_read_skips_only_plain_primary_lock,
    a5_visibility_is_commit_ts_at_or_below_read_ts,
    a7_pessimistic_lock_never_blocks_reads,
    a8_lock_ts_equal_to_read_ts_blocks,
    a10_min_commit_ts_above_read_ts_is_ignored,
    a11_bypass_locks,
    a13_access_locks_only_when_the_lock_would_block,
    a14_rc_ignores_locks,
    a16_rc_check_ts_conflicts_on_any_put_or_delete_lock,
    a16_rc_check_ts_reports_any_newer_record_without_its_start_ts,
    a17_many_lock_records_with_nothing_underneath,
    a19_gc_fence_is_honoured_on_read,
    b1_scan_bounds,
    b4_locked_keys_are_per_key_entries,
    b5_scan_lock_filtering_matches_point_get,
    b7_scan_bypass_locks,
    b8_scan_access_locks,
    b10_rc_scan_never_reads_the_lock_cf,
    b11_rc_check_ts_scan_fails_on_first_conflict,
    a20_reads_advance_max_ts,
    b2_reverse_scan_argument_order,
    b13_memory_lock_fails_the_whole_scan,
    a16_rc_check_ts_honours_bypass_and_access_locks_and_memory_locks,
    scan_key_only_and_long_values,
    point_get_costs_one_write_cf_lookup,
    scan_many_versions,
    damaged_records_are_errors,
    scans_agree_with_point_gets_across_chunks,
);

/// An engine whose views run a hook just before the first lock-CF get of a
/// chosen key: a write that lands between two reads of one request.
#[derive(Clone)]
struct HookEngine {
    inner: percolate::engine::RocksEngine,
    hook: std::sync::Arc<std::sync::Mutex<Option<Hook>>>,
}

type Hook = (Vec<u8>, Box<dyn FnOnce() + Send>);

#[derive(Clone)]
struct HookView {
    inner: percolate::engine::RocksSnapshot,
    hook: std::sync::Arc<std::sync::Mutex<Option<Hook>>>,
}

impl percolate::engine::Snapshot for HookView {
    type Iter = percolate::engine::RocksIterator;

    fn get(
        &self,
        cf: percolate::engine::Cf,
        key: &[u8],
    ) -> percolate::engine::Result<Option<Vec<u8>>> {
        if cf == percolate::engine::Cf::Lock {
            let due = {
                let mut hook = self.hook.lock().unwrap();
                if hook.as_ref().is_some_and(|(k, _)| k.as_slice() == key) {
                    hook.take()
                } else {
                    None
                }
            };
            if let Some((_, run)) = due {
                run();
            }
        }
        self.inner.get(cf, key)
    }

    fn iter(
        &self,
        cf: percolate::engine::Cf,
        options: percolate::engine::IterOptions,
    ) -> percolate::engine::Result<Self::Iter> {
        self.inner.iter(cf, options)
    }

    percolate::engine::forward_snapshot_bookkeeping!(inner);
}

impl Engine for HookEngine {
    type Snap = HookView;

    fn snapshot(&self) -> HookView {
        HookView {
            inner: self.inner.snapshot(),
            hook: self.hook.clone(),
        }
    }

    fn latest(&self) -> HookView {
        HookView {
            inner: self.inner.latest(),
            hook: self.hook.clone(),
        }
    }

    fn write(
        &self,
        batch: &percolate::engine::WriteBatch,
        options: percolate::engine::WriteOptions,
    ) -> percolate::engine::Result<()> {
        self.inner.write(batch, options)
    }

    percolate::engine::forward_engine_bookkeeping!(inner);
}

/// A batch get reads each key as a point get does, over the latest data:
/// the second key's versions are read after its lock is checked. Here a
/// transaction commits k2 at 95 (its lock gone with the same write) just
/// before the batch checks k2's lock; the read at 100 must return that
/// commit. (A getter reused from the first key read k2's versions through
/// a cursor opened before the commit, and returned the older value.)
#[test]
fn batch_get_reads_each_key_after_its_own_lock_check() {
    let engine = HookEngine {
        inner: temp_rocks_engine(),
        hook: Default::default(),
    };
    let f = MvccFixture::new(engine.clone());
    f.put_committed(b"k1", b"a", 10, 11);
    f.put_committed(b"k2", b"old", 10, 11);
    let k2 = Key::from_raw(b"k2");
    let committer = f.engine().inner.clone();
    let committed_key = k2.clone();
    *engine.hook.lock().unwrap() = Some((
        k2.as_encoded().clone(),
        Box::new(move || {
            let mut txn = percolate::mvcc::MvccTxn::new(ts(90));
            let write = Write::new(WriteType::Put, ts(90), Some(b"new".to_vec()));
            txn.put_write(committed_key, ts(95), &write);
            committer
                .write(&txn.into_write_batch(), Default::default())
                .unwrap();
        }),
    ));
    let cm = ConcurrencyManager::new(ts(1));
    let keys = [Key::from_raw(b"k1"), k2.clone()];
    let pairs = read::batch_get(&engine, &cm, &keys, ts(100), &ReadOptions::default()).unwrap();
    let values: Vec<(Key, Vec<u8>)> = pairs.into_iter().map(Result::unwrap).collect();
    assert!(engine.hook.lock().unwrap().is_none(), "the commit ran");
    assert_eq!(
        values,
        vec![(keys[0].clone(), b"a".to_vec()), (k2, b"new".to_vec())]
    );
}
