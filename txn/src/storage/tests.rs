//! The range operations and argument checks of `Storage`, on the memory
//! engine (the behaviour scenarios run on both engines in `tests/`).

use percolate_engine::MemoryEngine;
use percolate_mvcc::WriteType;

use super::*;
use crate::actions::prewrite::Mutation;

fn ts(v: u64) -> TimeStamp {
    TimeStamp::new(v)
}

fn key(raw: &str) -> Key {
    Key::from_raw(raw.as_bytes())
}

fn storage() -> Storage<MemoryEngine> {
    Storage::new(MemoryEngine::new(), StorageConfig::default())
}

fn prewrite_puts(storage: &Storage<MemoryEngine>, keys: &[String], start_ts: u64) {
    let mutations = keys
        .iter()
        .map(|k| Mutation::put(key(k), format!("{k}@{start_ts}").into_bytes()))
        .collect();
    let result = storage
        .prewrite(Prewrite::new(mutations, keys[0].as_bytes(), ts(start_ts)))
        .unwrap();
    assert!(result.locks.is_empty());
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("k{i:04}")).collect()
}

#[test]
fn resolve_lock_commits_every_lock_of_the_txn_in_the_range_in_batches() {
    let storage = storage();
    let all = keys(600);
    prewrite_puts(&storage, &all, 10);
    prewrite_puts(&storage, &["other".to_string()], 11);
    let resolved = storage
        .resolve_lock(ts(10), ts(20), Some(key("k0100")), None)
        .unwrap();
    assert_eq!(resolved, 500, "three batches of at most 256");
    let locks = storage.scan_lock(None, None, TimeStamp::max(), 0).unwrap();
    let locked: Vec<Vec<u8>> = locks.iter().map(|l| l.key.clone()).collect();
    let mut expected: Vec<Vec<u8>> = all[..100].iter().map(|k| k.clone().into_bytes()).collect();
    expected.push(b"other".to_vec());
    assert_eq!(locked, expected);
    assert_eq!(
        storage.get(key("k0599"), ts(20)).unwrap(),
        Some(b"k0599@10".to_vec())
    );
    assert_eq!(storage.get(key("k0100"), ts(19)).unwrap(), None);
}

#[test]
fn resolve_lock_rolls_back_with_a_zero_commit_ts_and_checks_the_ts() {
    let storage = storage();
    prewrite_puts(&storage, &keys(3), 10);
    let err = storage
        .resolve_lock(ts(10), ts(10), None, None)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidTxnTso { .. }), "{err}");
    assert_eq!(
        storage
            .resolve_lock(ts(10), TimeStamp::zero(), None, None)
            .unwrap(),
        3
    );
    for k in keys(3) {
        let info = storage.mvcc_by_key(key(&k)).unwrap();
        assert!(info.lock.is_none());
        assert_eq!(info.writes[0].1.write_type, WriteType::Rollback);
    }
}

#[test]
fn gc_walks_every_key_of_the_range() {
    let storage = storage();
    let all = keys(300);
    for (start_ts, commit_ts) in [(10, 11), (20, 21)] {
        prewrite_puts(&storage, &all, start_ts);
        let keys = all.iter().map(|k| key(k)).collect();
        storage.commit(keys, ts(start_ts), ts(commit_ts)).unwrap();
    }
    let info = storage.gc(ts(25), None, Some(key("k0200"))).unwrap();
    assert_eq!(info.found_versions, 400);
    assert_eq!(info.deleted_versions, 200);
    assert_eq!(storage.mvcc_by_key(key("k0199")).unwrap().writes.len(), 1);
    assert_eq!(storage.mvcc_by_key(key("k0200")).unwrap().writes.len(), 2);
    assert_eq!(
        storage.get(key("k0000"), ts(30)).unwrap(),
        Some(b"k0000@20".to_vec())
    );
}

#[test]
fn batch_get_reports_values_and_locks_in_the_order_asked() {
    let storage = storage();
    prewrite_puts(&storage, &["a".to_string()], 5);
    storage.commit(vec![key("a")], ts(5), ts(6)).unwrap();
    prewrite_puts(&storage, &["b".to_string()], 7);
    let got = storage
        .batch_get(vec![key("b"), key("missing"), key("a")], ts(10))
        .unwrap();
    assert_eq!(got.len(), 2);
    assert!(matches!(
        &got[0],
        Err(Error::Mvcc(percolate_mvcc::Error::KeyIsLocked(info))) if info.key == b"b"
    ));
    assert_eq!(got[1].as_ref().unwrap(), &(key("a"), b"a@5".to_vec()));
}

#[test]
fn malformed_prewrites_are_refused_before_anything_is_read() {
    let storage = storage();
    let put = |k: &str| Mutation::put(key(k), b"v".to_vec());
    let cases = [
        Prewrite::new(vec![], b"k", ts(5)),
        Prewrite::new(vec![put("k")], b"k", TimeStamp::zero()),
        Prewrite::new(vec![put("k")], b"", ts(5)),
        Prewrite::new(vec![put("k"), put("j"), put("k")], b"k", ts(5)),
    ];
    for case in cases {
        let err = storage.prewrite(case.clone()).unwrap_err();
        assert!(
            matches!(err, Error::InvalidRequest { .. }),
            "{case:?}: {err}"
        );
    }
    assert!(
        storage
            .scan_lock(None, None, TimeStamp::max(), 0)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn check_secondary_locks_stops_at_the_first_decided_key() {
    let storage = storage();
    let prewrite = Prewrite::new(
        vec![
            Mutation::put(key("s1"), b"1".to_vec()),
            Mutation::put(key("s2"), b"2".to_vec()),
        ],
        b"p",
        ts(10),
    )
    .async_commit(vec![], TimeStamp::zero());
    storage.prewrite(prewrite).unwrap();
    match storage
        .check_secondary_locks(vec![key("s1"), key("s2")], ts(10))
        .unwrap()
    {
        SecondaryLocksStatus::Locked(locks) => assert_eq!(locks.len(), 2),
        other => panic!("{other:?}"),
    }
    // s3 was never prewritten: it is rolled back (protected), and so is
    // the transaction.
    let status = storage
        .check_secondary_locks(vec![key("s1"), key("s3"), key("s2")], ts(10))
        .unwrap();
    assert_eq!(status, SecondaryLocksStatus::RolledBack);
    assert_eq!(storage.concurrency_manager().max_ts(), ts(10));
    storage.commit(vec![key("s1")], ts(10), ts(15)).unwrap();
    let status = storage
        .check_secondary_locks(vec![key("s1"), key("s2")], ts(10))
        .unwrap();
    assert_eq!(status, SecondaryLocksStatus::Committed(ts(15)));
}

#[test]
fn raw_data_lives_beside_transactional_data_without_touching_it() {
    let storage = storage();
    prewrite_puts(&storage, &["k".to_string()], 5);
    storage.commit(vec![key("k")], ts(5), ts(6)).unwrap();
    // The raw key spelled like the transactional one's stored forms.
    let txn_default_key = key("k").append_ts(ts(5)).into_encoded();
    storage.raw_put(b"k".to_vec(), b"raw".to_vec()).unwrap();
    storage
        .raw_put(txn_default_key.clone(), b"raw2".to_vec())
        .unwrap();
    assert_eq!(
        storage.get(key("k"), ts(10)).unwrap(),
        Some(b"k@5".to_vec())
    );
    assert_eq!(
        storage.raw_get(b"k".to_vec()).unwrap(),
        Some(b"raw".to_vec())
    );
    storage.raw_delete_range(vec![0], vec![0xff]).unwrap();
    assert_eq!(storage.raw_get(txn_default_key).unwrap(), None);
    assert_eq!(
        storage.get(key("k"), ts(10)).unwrap(),
        Some(b"k@5".to_vec())
    );
}

#[test]
fn raw_batch_operations_scan_and_compare_and_swap() {
    let storage = storage();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..5u8).map(|i| (vec![b'a' + i], vec![i])).collect();
    storage.raw_batch_put(pairs.clone()).unwrap();
    let got = storage
        .raw_batch_get(vec![b"e".to_vec(), b"x".to_vec(), b"a".to_vec()])
        .unwrap();
    assert_eq!(
        got,
        vec![(b"e".to_vec(), vec![4]), (b"a".to_vec(), vec![0])]
    );
    let scan = |start: &[u8], end: &[u8], limit, reverse| {
        storage
            .raw_scan(RawScan {
                start: Some(start.to_vec()),
                end: Some(end.to_vec()),
                limit,
                reverse,
                key_only: false,
            })
            .unwrap()
    };
    assert_eq!(scan(b"b", b"e", 0, false), pairs[1..4].to_vec());
    assert_eq!(
        scan(b"b", b"e", 2, true),
        vec![pairs[3].clone(), pairs[2].clone()]
    );
    storage
        .raw_batch_delete(vec![b"a".to_vec(), b"b".to_vec()])
        .unwrap();
    assert_eq!(scan(b"a", b"z", 1, false), vec![pairs[2].clone()]);

    let cas = |expected: Option<&[u8]>, value: Option<&[u8]>| {
        storage
            .raw_compare_and_swap(
                b"c".to_vec(),
                expected.map(<[u8]>::to_vec),
                value.map(<[u8]>::to_vec),
            )
            .unwrap()
    };
    assert_eq!(cas(Some(b"wrong"), Some(b"new")), (false, Some(vec![2])));
    assert_eq!(cas(Some(&[2]), Some(b"new")), (true, Some(vec![2])));
    assert_eq!(cas(Some(b"new"), None), (true, Some(b"new".to_vec())));
    assert_eq!(cas(None, Some(b"again")), (true, None));
    assert_eq!(
        storage.raw_get(b"c".to_vec()).unwrap(),
        Some(b"again".to_vec())
    );
    let err = storage.raw_put(Vec::new(), b"v".to_vec()).unwrap_err();
    assert!(matches!(err, Error::InvalidRequest { .. }), "{err}");
}

#[test]
fn concurrent_compare_and_swap_increments_lose_no_update() {
    let storage = std::sync::Arc::new(storage());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let storage = storage.clone();
            std::thread::spawn(move || {
                let mut done = 0;
                while done < 50 {
                    let current = storage.raw_get(b"n".to_vec()).unwrap();
                    let n = current
                        .as_deref()
                        .map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap()));
                    let (swapped, _) = storage
                        .raw_compare_and_swap(
                            b"n".to_vec(),
                            current,
                            Some((n + 1).to_be_bytes().to_vec()),
                        )
                        .unwrap();
                    done += usize::from(swapped);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let n = storage.raw_get(b"n".to_vec()).unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(n.try_into().unwrap()), 200);
}

#[test]
fn unlock_removes_only_the_transactions_own_locks_and_leaves_no_record() {
    let storage = storage();
    let long = vec![b'x'; 300];
    let mutations = vec![
        Mutation::put(key("a"), long),
        Mutation::put(key("b"), b"short".to_vec()),
    ];
    storage
        .prewrite(Prewrite::new(mutations, b"a", ts(10)))
        .unwrap();
    prewrite_puts(&storage, &["c".to_string()], 11);
    let released = storage
        .write(crate::commands::Unlock {
            keys: vec![key("a"), key("b"), key("c"), key("d")],
            start_ts: ts(10),
        })
        .unwrap();
    assert_eq!(released.len(), 2);
    for k in ["a", "b"] {
        let info = storage.mvcc_by_key(key(k)).unwrap();
        assert!(
            info.lock.is_none() && info.writes.is_empty() && info.values.is_empty(),
            "{k}: {info}"
        );
    }
    assert_eq!(
        storage.mvcc_by_key(key("c")).unwrap().lock.unwrap().ts,
        ts(11)
    );
}

/// The newest data version `storage`'s version hints hold for `key`.
fn hinted_version<E: Engine>(storage: &Storage<E>, key: &Key) -> Option<TimeStamp> {
    storage
        .concurrency_manager()
        .version_hints()
        .newest_data_version(key, &mut Vec::new())
        .map(|(version, _)| version)
}

/// Point reads fetch a key's newest data version by point get when the
/// region recorded it at commit (version hints): every answer equals what a
/// seek gives, over a Rollback and a Lock record above the data, a Delete,
/// reads below the newest version, and a 1PC commit whose write failed.
/// Checked against a region without hints reading the same engine.
#[test]
fn point_reads_with_version_hints_answer_as_seeks_do() {
    use crate::testing::FaultyEngine;
    let engine = FaultyEngine::new(percolate_engine::testing::temp_rocks_engine());
    let storage = Storage::new(engine.clone(), StorageConfig::default());
    let k = key("k");
    // A getter without hints always seeks.
    let seek = |read_ts: u64| {
        percolate_mvcc::PointGetterBuilder::new(engine.snapshot(), ts(read_ts))
            .build()
            .get(&k)
            .unwrap()
    };
    let agree = |read_ts: u64, expected: Option<&str>| {
        let hinted = storage.get(k.clone(), ts(read_ts)).unwrap();
        let sought = seek(read_ts);
        assert_eq!(hinted, sought, "read at {read_ts}");
        assert_eq!(
            hinted,
            expected.map(|v| v.as_bytes().to_vec()),
            "read at {read_ts}"
        );
    };
    let commit = |mutation: Mutation, start: u64, commit: u64| {
        let prewrite = Prewrite::new(vec![mutation], b"k", ts(start));
        storage.prewrite(prewrite).unwrap();
        storage
            .commit(vec![k.clone()], ts(start), ts(commit))
            .unwrap();
    };
    let put = |start: u64, commit_ts: u64, value: &str| {
        commit(
            Mutation::put(k.clone(), value.as_bytes().to_vec()),
            start,
            commit_ts,
        )
    };
    let hint = || hinted_version(&storage, &k);
    put(10, 11, "v1");
    assert_eq!(hint(), Some(ts(11)));
    agree(12, Some("v1"));
    agree(10, None);
    // A Rollback record above the data version.
    storage.batch_rollback(vec![k.clone()], ts(20)).unwrap();
    agree(25, Some("v1"));
    // A Lock record above it.
    commit(Mutation::lock(k.clone()), 30, 31);
    agree(40, Some("v1"));
    // A Delete, and reads below it.
    commit(Mutation::delete(k.clone()), 50, 51);
    agree(60, None);
    agree(45, Some("v1"));
    put(70, 71, "v2");
    agree(80, Some("v2"));
    agree(60, None);
    assert_eq!(hint(), Some(ts(71)));
    // A 1PC commit whose write failed: nothing recorded, and the failed
    // write moved the key's epoch, so the read seeks.
    engine.fail_next_writes(1);
    let one_pc = Prewrite::new(
        vec![Mutation::put(k.clone(), b"lost".to_vec())],
        b"k",
        ts(90),
    )
    .one_pc(TimeStamp::zero());
    assert!(storage.prewrite(one_pc).is_err());
    assert_eq!(hint(), Some(ts(71)));
    agree(200, Some("v2"));
    put(210, 211, "v3");
    assert_eq!(hint(), Some(ts(211)));
    // A newer record written straight to the engine, behind the region's
    // back: the write epoch moves, and the read seeks and finds it.
    let mut txn = percolate_mvcc::MvccTxn::new(ts(220));
    let write = percolate_mvcc::Write::new(WriteType::Put, ts(220), Some(b"v4".to_vec()));
    txn.put_write(k.clone(), ts(221), &write);
    engine
        .write(&txn.into_write_batch(), Default::default())
        .unwrap();
    agree(230, Some("v4"));
}

/// A read that had to seek offers the Put it found as the key's newest
/// data version when no record of the key can be newer than its read ts,
/// and the next read fetches that version by point get; a read below a
/// newer record offers nothing. The reads go through a second storage over
/// the same engine, which writes nothing and so has no notes of its own.
#[test]
fn reads_offer_the_versions_they_sought() {
    let engine = percolate_engine::testing::temp_rocks_engine();
    let writer = Storage::new(engine.clone(), StorageConfig::default());
    let reader = Storage::new(engine, StorageConfig::default());
    let k = key("k");
    let hint = || hinted_version(&reader, &k);
    let put = |start: u64, commit: u64, value: &[u8]| {
        let prewrite = Prewrite::new(
            vec![Mutation::put(k.clone(), value.to_vec())],
            b"k",
            ts(start),
        );
        writer.prewrite(prewrite).unwrap();
        writer
            .commit(vec![k.clone()], ts(start), ts(commit))
            .unwrap();
    };
    put(10, 11, b"v1");
    assert_eq!(hint(), None);
    assert_eq!(reader.get(k.clone(), ts(5)).unwrap(), None);
    assert_eq!(hint(), None, "a record above the read ts: nothing known");
    assert_eq!(reader.get(k.clone(), ts(20)).unwrap(), Some(b"v1".to_vec()));
    assert_eq!(hint(), Some(ts(11)));
    assert_eq!(reader.get(k.clone(), ts(20)).unwrap(), Some(b"v1".to_vec()));
    // A newer commit moves the write epoch: the hint is not used, the
    // read seeks, finds the new version and offers it.
    put(30, 31, b"v2");
    assert_eq!(reader.get(k.clone(), ts(40)).unwrap(), Some(b"v2".to_vec()));
    assert_eq!(hint(), Some(ts(31)));
    assert_eq!(reader.get(k.clone(), ts(25)).unwrap(), Some(b"v1".to_vec()));
}

/// A timestamp whose physical part is `ms`.
fn at_ms(ms: u64) -> TimeStamp {
    TimeStamp::compose(ms, 0)
}

#[test]
fn a_lock_ttl_above_the_cap_is_written_as_the_cap() {
    let storage = storage();
    let start_ts = at_ms(1_000);
    let prewrite = Prewrite::new(vec![Mutation::put(key("k"), b"v".to_vec())], b"k", start_ts)
        .lock_ttl(u64::MAX);
    assert!(storage.prewrite(prewrite).unwrap().locks.is_empty());
    let lock = storage.mvcc_by_key(key("k")).unwrap().lock.unwrap();
    assert_eq!(lock.ttl, crate::actions::MAX_LOCK_TTL_MS);
    // A heart beat cannot raise it past the cap either.
    let ttl = storage
        .txn_heart_beat(key("k"), start_ts, u64::MAX)
        .unwrap();
    assert_eq!(ttl, crate::actions::MAX_LOCK_TTL_MS);
    // An hour and a moment after its start, anyone may roll it back.
    let status = storage
        .check_txn_status(
            key("k"),
            start_ts,
            CheckTxnStatusOptions {
                caller_start_ts: at_ms(1_000 + crate::actions::MAX_LOCK_TTL_MS + 1),
                current_ts: at_ms(1_000 + crate::actions::MAX_LOCK_TTL_MS + 1),
                rollback_if_not_exist: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(status, TxnStatus::TtlExpire);
    assert!(storage.mvcc_by_key(key("k")).unwrap().lock.is_none());
}

#[test]
fn a_lock_with_an_endless_ttl_on_disk_expires_after_the_cap() {
    // Written by another program, bypassing the clamp.
    let storage = storage();
    let start_ts = at_ms(1_000);
    let lock = percolate_mvcc::Lock::new(
        percolate_mvcc::LockType::Put,
        b"k".to_vec(),
        start_ts,
        u64::MAX,
    );
    let mut batch = percolate_engine::WriteBatch::new();
    batch.put(
        percolate_engine::Cf::Lock,
        key("k").into_encoded(),
        lock.to_bytes(),
    );
    storage
        .engine()
        .write(&batch, percolate_engine::WriteOptions::default())
        .unwrap();
    assert!(!crate::actions::is_expired(&lock, at_ms(1_000_000)));
    let after_the_cap = at_ms(1_000 + crate::actions::MAX_LOCK_TTL_MS + 1);
    assert!(crate::actions::is_expired(&lock, after_the_cap));
}

#[test]
fn a_lock_cannot_start_beyond_the_oracle_allowance() {
    let oracle: std::sync::Arc<dyn crate::oracle::TimestampOracle> =
        std::sync::Arc::new(crate::oracle::CounterOracle::new(100));
    let config = StorageConfig {
        max_ts_limit: Some(MaxTsLimit::new(oracle, std::time::Duration::from_secs(1))),
        ..Default::default()
    };
    let storage = Storage::new(MemoryEngine::new(), config);
    // Far beyond the allowance, within the oracle's range (beyond it, a
    // request is refused before the allowance is asked).
    let far = TimeStamp::compose(1 << 40, 0);
    let err = storage
        .prewrite(Prewrite::new(
            vec![Mutation::put(key("k"), b"v".to_vec())],
            b"k",
            far,
        ))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidMaxTsUpdate { .. }), "{err}");
    let err = storage
        .acquire_pessimistic_lock(AcquirePessimisticLock::new(vec![key("k")], b"k", far, far))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidMaxTsUpdate { .. }), "{err}");
    let info = storage.mvcc_by_key(key("k")).unwrap();
    assert!(info.lock.is_none() && info.writes.is_empty());
    // A for_update_ts below the start_ts is no request at all.
    let err = storage
        .acquire_pessimistic_lock(AcquirePessimisticLock::new(
            vec![key("k")],
            b"k",
            at_ms(500),
            at_ms(400),
        ))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRequest { .. }), "{err}");
    // Within the allowance, the same request goes through.
    let near = at_ms(500);
    assert!(
        storage
            .prewrite(Prewrite::new(
                vec![Mutation::put(key("k"), b"v".to_vec())],
                b"k",
                near,
            ))
            .unwrap()
            .locks
            .is_empty()
    );
}
