//! The embedder's API on both engines, three regions: streaming scans
//! (forward, reverse, keys only, every batch size) against a model with the
//! transaction's own writes merged in; read-only snapshots at chosen
//! timestamps; raw key-value access routed across regions.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use percolate::Error;
use percolate::engine::Engine;
use percolate::txn::client::{Client, TxnError};

/// A client over regions [.., "g"), ["g", "p"), ["p", ..) on `engine`.
fn client_on<E: Engine>(engine: E, dir: &std::path::Path) -> Client<E> {
    common::client_over(engine, dir, vec![b"g".to_vec(), b"p".to_vec()])
}

client_scenarios_on_both_engines! {
    scans_match_a_model_with_own_writes_at_every_batch_size => scans_match_a_model;
    a_scan_holds_one_batch_of_a_large_range => a_scan_reads_lazily;
    snapshots_read_at_their_timestamp => snapshots_read_at_their_timestamp;
    raw_access_is_routed_across_regions => raw_access_is_routed_across_regions;
    raw_scans_and_range_deletes_cross_regions => raw_scans_and_range_deletes_cross_regions;
    a_closure_aborts_with_its_own_error_and_is_never_retried => abort_is_not_retried;
    damaged_records_are_removed_by_repair_and_handed_back => damaged_records_are_repaired;
    gc_resolves_every_region_before_collecting_any => gc_resolves_before_it_collects;
    commits_after_a_read_ahead_of_the_oracle_are_seen_by_later_transactions => commits_after_a_read_ahead_are_seen;
    an_insert_undone_by_a_delete_or_overwritten_keeps_its_check_that_the_key_is_absent => an_undone_insert_keeps_its_check;
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn collect<E: Engine>(scan: percolate::txn::client::Scan<'_, E>) -> Pairs {
    scan.collect::<Result<Pairs, _>>().unwrap()
}

/// The model's pairs in `range`, in key order.
fn expected(model: &BTreeMap<Vec<u8>, Vec<u8>>, range: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Pairs {
    if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
        range
    {
        if s > e {
            return Vec::new();
        }
    }
    model
        .range::<Vec<u8>, _>((range.0.as_ref(), range.1.as_ref()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Keys a000..z007: eight per letter, across the three regions.
fn keys() -> Vec<Vec<u8>> {
    (b'a'..=b'z')
        .flat_map(|letter| (0..8).map(move |i| format!("{}{i:03}", letter as char).into_bytes()))
        .collect()
}

fn scans_match_a_model<E: Engine>(client: &Client<E>) {
    let mut model = BTreeMap::new();
    client
        .with_retry(|txn| {
            for key in keys() {
                txn.put(key.clone(), [b"v-".as_slice(), &key].concat());
            }
            Ok(())
        })
        .unwrap();
    for key in keys() {
        model.insert(key.clone(), [b"v-".as_slice(), &key].concat());
    }
    let mut txn = client.begin().unwrap();
    // Own writes: new keys between committed ones and past both ends,
    // overwrites, deletes (one of a key never written), and a lock, which
    // writes nothing.
    for (key, value) in [
        ("a", "own"),
        ("c003x", "own"),
        ("g000", "over"),
        ("p", "own"),
        ("zz", "own"),
    ] {
        txn.put(key, value);
        model.insert(key.as_bytes().to_vec(), value.as_bytes().to_vec());
    }
    for key in ["b000", "b001", "f007", "g001", "q004", "nothing"] {
        txn.delete(key);
        model.remove(key.as_bytes());
    }
    txn.lock_keys([b"h003".to_vec()]);
    let b = |s: &str| s.as_bytes().to_vec();
    let ranges = [
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Included(b("c")), Bound::Excluded(b("r"))),
        (Bound::Included(b("f007")), Bound::Included(b("p"))),
        (Bound::Excluded(b("g000")), Bound::Unbounded),
        (Bound::Unbounded, Bound::Excluded(b("g"))),
        (Bound::Included(b("q")), Bound::Excluded(b("c"))),
    ];
    for range in &ranges {
        let ascending = expected(&model, range);
        let descending: Pairs = ascending.iter().rev().cloned().collect();
        let bounds = || (range.0.clone(), range.1.clone());
        assert_eq!(collect(txn.scan(bounds())), ascending, "{range:?}");
        assert_eq!(collect(txn.scan_reverse(bounds())), descending, "{range:?}");
        for batch in [1, 2, 3, 7, 64] {
            assert_eq!(
                collect(txn.scan(bounds()).batch_size(batch)),
                ascending,
                "{range:?} in batches of {batch}"
            );
            assert_eq!(
                collect(txn.scan_reverse(bounds()).batch_size(batch)),
                descending,
                "{range:?} reverse in batches of {batch}"
            );
        }
        let keys: Vec<Vec<u8>> = txn.keys(bounds()).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            keys,
            ascending.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()
        );
        let keys: Vec<Vec<u8>> = txn
            .keys_reverse(bounds())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            keys,
            descending
                .iter()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        );
        // A limit is the iterator's take.
        let first: Pairs = txn
            .scan(bounds())
            .take(5)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(first, ascending.iter().take(5).cloned().collect::<Pairs>());
    }
    // The snapshot alone, without own writes, after the commit.
    let committed: BTreeMap<Vec<u8>, Vec<u8>> = keys()
        .into_iter()
        .map(|k| (k.clone(), [b"v-".as_slice(), &k].concat()))
        .collect();
    txn.rollback().unwrap();
    let fresh = client.begin().unwrap();
    assert_eq!(
        collect(fresh.scan::<&[u8]>(..).batch_size(5)),
        expected(&committed, &(Bound::Unbounded, Bound::Unbounded))
    );
}

/// A scan of a range much larger than a batch returns its first pairs
/// without reading the rest: each storage read is bounded by the batch
/// size, so a reader that stops early never pays for the range.
fn a_scan_reads_lazily<E: Engine>(client: &Client<E>) {
    let keys: Vec<Vec<u8>> = (0..3000).map(|i| format!("k{i:05}").into_bytes()).collect();
    for chunk in keys.chunks(500) {
        client
            .with_retry(|txn| {
                for key in chunk {
                    txn.put(key.clone(), b"x".to_vec());
                }
                Ok(())
            })
            .unwrap();
    }
    let txn = client.begin().unwrap();
    let mut scan = txn.scan::<&[u8]>(..).batch_size(10);
    for key in keys.iter().take(25) {
        assert_eq!(scan.next().unwrap().unwrap().0, *key);
    }
    // The same for a snapshot, and for the whole range in default batches.
    let snapshot = client.snapshot_latest().unwrap();
    assert_eq!(snapshot.scan("k01000"..).count(), 2000);
    assert_eq!(
        snapshot
            .scan_reverse::<&[u8]>(..)
            .next()
            .unwrap()
            .unwrap()
            .0,
        b"k02999"
    );
}

fn snapshots_read_at_their_timestamp<E: Engine>(client: &Client<E>) {
    let before_all = client.current_ts().unwrap();
    let put = |key: &str, value: &str| {
        let mut txn = client.begin().unwrap();
        txn.put(key, value);
        txn.commit().unwrap().commit_ts
    };
    let first = put("h", "1");
    put("a", "x");
    let second = put("h", "2");
    let at_first = client.snapshot(first);
    assert_eq!(at_first.ts(), first);
    assert_eq!(at_first.get(b"h").unwrap(), Some(b"1".to_vec()));
    assert_eq!(at_first.get(b"a").unwrap(), None);
    assert_eq!(
        client.snapshot(second).get(b"h").unwrap(),
        Some(b"2".to_vec())
    );
    assert_eq!(client.snapshot(before_all).get(b"h").unwrap(), None);
    // A snapshot of the latest data sees every commit acknowledged before
    // it (a 1PC commit_ts may be the very next timestamp) and none after.
    let latest = client.snapshot_latest().unwrap();
    assert!(latest.ts() >= second);
    put("q", "3");
    assert_eq!(
        latest.batch_get(&[b"q", b"h", b"a"]).unwrap(),
        vec![None, Some(b"2".to_vec()), Some(b"x".to_vec())]
    );
    let pairs: Pairs = latest.scan::<&[u8]>(..).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        pairs,
        vec![
            (b"a".to_vec(), b"x".to_vec()),
            (b"h".to_vec(), b"2".to_vec())
        ]
    );
    let keys: Vec<Vec<u8>> = latest
        .keys_reverse::<&[u8]>(..)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(keys, vec![b"h".to_vec(), b"a".to_vec()]);
    assert!(client.current_ts().unwrap() > latest.ts());
}

fn raw_access_is_routed_across_regions<E: Engine>(client: &Client<E>) {
    let raw = client.raw();
    // One key per region, and a batch across all three.
    raw.put("a", "1").unwrap();
    raw.put("h", "2").unwrap();
    raw.put("q", "3").unwrap();
    assert_eq!(raw.get(b"h").unwrap(), Some(b"2".to_vec()));
    raw.batch_put(vec![
        (b"z".to_vec(), b"26".to_vec()),
        (b"b".to_vec(), b"2b".to_vec()),
        (b"i".to_vec(), b"9".to_vec()),
    ])
    .unwrap();
    assert_eq!(
        raw.batch_get(&[b"z", b"nothing", b"a", b"i", b"q"])
            .unwrap(),
        vec![
            Some(b"26".to_vec()),
            None,
            Some(b"1".to_vec()),
            Some(b"9".to_vec()),
            Some(b"3".to_vec())
        ]
    );
    // Raw and transactional data never meet.
    assert_eq!(client.get_latest(b"a").unwrap(), None);
    client
        .with_retry(|txn| {
            txn.put(b"a", b"txn");
            Ok(())
        })
        .unwrap();
    assert_eq!(raw.get(b"a").unwrap(), Some(b"1".to_vec()));
    // Compare and swap: on the value found, absent, and to a delete.
    assert_eq!(
        raw.compare_and_swap(b"h", Some(b"wrong"), Some(b"x"))
            .unwrap(),
        (false, Some(b"2".to_vec()))
    );
    assert_eq!(
        raw.compare_and_swap(b"h", Some(b"2"), Some(b"x")).unwrap(),
        (true, Some(b"2".to_vec()))
    );
    assert_eq!(
        raw.compare_and_swap(b"new", None, Some(b"n")).unwrap(),
        (true, None)
    );
    assert_eq!(
        raw.compare_and_swap(b"new", None, Some(b"again")).unwrap(),
        (false, Some(b"n".to_vec()))
    );
    assert_eq!(
        raw.compare_and_swap(b"new", Some(b"n"), None).unwrap(),
        (true, Some(b"n".to_vec()))
    );
    assert_eq!(raw.get(b"new").unwrap(), None);
    raw.delete("q").unwrap();
    raw.batch_delete(vec![b"a".to_vec(), b"z".to_vec()])
        .unwrap();
    assert_eq!(
        raw.batch_get(&[b"a", b"b", b"h", b"i", b"q", b"z"])
            .unwrap(),
        vec![
            None,
            Some(b"2b".to_vec()),
            Some(b"x".to_vec()),
            Some(b"9".to_vec()),
            None,
            None
        ]
    );
    // An empty key is refused.
    assert!(matches!(
        raw.put("", "v"),
        Err(Error::InvalidRequest { .. })
    ));
}

fn raw_scans_and_range_deletes_cross_regions<E: Engine>(client: &Client<E>) {
    let raw = client.raw();
    let mut model = BTreeMap::new();
    let pairs: Pairs = keys()
        .into_iter()
        .map(|k| (k.clone(), [b"r-".as_slice(), &k].concat()))
        .collect();
    raw.batch_put(pairs.clone()).unwrap();
    model.extend(pairs);
    let b = |s: &str| s.as_bytes().to_vec();
    let ranges = [
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Included(b("c")), Bound::Excluded(b("r"))),
        (Bound::Excluded(b("g000")), Bound::Included(b("p003"))),
    ];
    for range in &ranges {
        let ascending = expected(&model, range);
        let descending: Pairs = ascending.iter().rev().cloned().collect();
        let bounds = || (range.0.clone(), range.1.clone());
        for batch in [1, 3, 1000] {
            let forward: Pairs = raw
                .scan(bounds())
                .batch_size(batch)
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(forward, ascending, "{range:?} in batches of {batch}");
            let reverse: Pairs = raw
                .scan_reverse(bounds())
                .batch_size(batch)
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(
                reverse, descending,
                "{range:?} reverse in batches of {batch}"
            );
        }
    }
    // A bounded deletion across the first two regions, then an unbounded
    // one across the last two.
    raw.delete_range("e003"..="h001").unwrap();
    model
        .retain(|k, _| !(k.as_slice() >= b"e003".as_slice() && k.as_slice() <= b"h001".as_slice()));
    let all: Pairs = raw.scan::<&[u8]>(..).collect::<Result<_, _>>().unwrap();
    assert_eq!(all, expected(&model, &(Bound::Unbounded, Bound::Unbounded)));
    raw.delete_range("o005"..).unwrap();
    model.retain(|k, _| k.as_slice() < b"o005".as_slice());
    let all: Pairs = raw.scan::<&[u8]>(..).collect::<Result<_, _>>().unwrap();
    assert_eq!(all, expected(&model, &(Bound::Unbounded, Bound::Unbounded)));
    assert_eq!(all.last().unwrap().0, b"o004");
    // An empty range deletes nothing.
    raw.delete_range("c".."c").unwrap();
    raw.delete_range("zzz"..).unwrap();
    assert_eq!(raw.scan::<&[u8]>(..).count(), model.len());
}

#[derive(Debug, PartialEq)]
struct Overdraft {
    balance: u64,
}

fn abort_is_not_retried<E: Engine>(client: &Client<E>) {
    client
        .with_retry(|txn| {
            txn.put(b"alice", b"5");
            Ok(())
        })
        .unwrap();
    // The closure's own error: returned as given, after one run, nothing
    // written.
    let mut runs = 0;
    let outcome = client.with_retry_or_abort(|txn| {
        runs += 1;
        txn.put(b"bob", b"10");
        let balance: u64 = String::from_utf8(txn.get(b"alice")?.unwrap())
            .unwrap()
            .parse()
            .unwrap();
        if balance < 10 {
            return Err(TxnError::Abort(Overdraft { balance }));
        }
        Ok(())
    });
    assert_eq!(runs, 1);
    assert_eq!(
        outcome.unwrap_err().into_abort(),
        Some(Overdraft { balance: 5 })
    );
    assert_eq!(client.get_latest(b"bob").unwrap(), None);
    // A conflict is still retried: another transaction commits the key
    // this one writes after its start, during its first run.
    let mut runs = 0;
    let out = client
        .with_retry_or_abort::<_, Overdraft>(|txn| {
            runs += 1;
            if runs == 1 {
                let mut other = client.begin()?;
                other.put(b"alice", b"7");
                other.commit()?;
            }
            let balance = txn.get(b"alice")?;
            txn.put(b"alice", b"8");
            Ok(balance)
        })
        .unwrap();
    assert_eq!(runs, 2);
    assert_eq!(out, Some(b"7".to_vec()));
    assert_eq!(client.get_latest(b"alice").unwrap(), Some(b"8".to_vec()));
    // Percolate's error that is not retryable comes back as Storage.
    let outcome = client.with_retry_or_abort::<(), Overdraft>(|txn| {
        txn.insert(b"alice", b"again");
        Ok(())
    });
    assert!(
        matches!(outcome, Err(TxnError::Storage(ref e)) if !e.is_retryable()),
        "{outcome:?}"
    );
}

/// `Client::open_with` reaches RocksDB's tuning and shares its workers out
/// among the regions.
#[test]
fn open_with_tunes_rocksdb_and_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let options = percolate::OpenOptions {
        split_keys: vec![b"g".to_vec(), b"p".to_vec()],
        engine: percolate::engine::RocksOptions {
            block_cache_bytes: 8 << 20,
            write_buffer_bytes: 1 << 20,
            background_jobs: 1,
            ..Default::default()
        },
        worker_threads: Some(6),
        ..Default::default()
    };
    let client = Client::open_with(dir.path(), options).unwrap();
    // A memtable of 1 MiB: 4 MiB of writes flush several times on the way.
    for round in 0..4 {
        client
            .with_retry(|txn| {
                for i in 0..256 {
                    txn.put(
                        format!("{}{i:03}", (b'a' + round * 6) as char),
                        vec![7u8; 4096],
                    );
                }
                Ok(())
            })
            .unwrap();
    }
    let snapshot = client.snapshot_latest().unwrap();
    assert_eq!(snapshot.keys::<&[u8]>(..).count(), 1024);
    let engine = client.cluster().regions()[0].storage().engine().clone();
    let flushed = engine.raw_db().live_files().unwrap().len();
    assert!(flushed > 0, "the small memtable was flushed to files");
}

/// Records that do not decode, planted in three regions: a lock value that
/// is not a Lock, a write key without a timestamp, a default-CF key below
/// every encoded key. Scans and GC fail on them; `repair` removes exactly
/// those, returns them as stored, and the good data reads as before.
fn damaged_records_are_repaired<E: Engine>(client: &Client<E>) {
    use percolate::engine::{Cf, WriteBatch};
    use percolate::mvcc::Key;

    client
        .with_retry(|txn| {
            for k in ["apple", "kiwi", "zebra"] {
                txn.put(k, format!("{k}-value"));
            }
            Ok(())
        })
        .unwrap();
    let planted = [
        (
            Cf::Lock,
            Key::from_raw(b"lemon").into_encoded(),
            b"\xffnot a lock".to_vec(),
        ),
        (
            Cf::Write,
            Key::from_raw(b"banana").into_encoded(),
            b"P".to_vec(),
        ),
        (Cf::Default, b"\x00".to_vec(), b"orphan".to_vec()),
    ];
    let mut batch = WriteBatch::new();
    for (cf, key, value) in &planted {
        batch.put(*cf, key.clone(), value.clone());
    }
    client.cluster().regions()[0]
        .storage()
        .engine()
        .write(&batch, percolate::engine::WriteOptions::default())
        .unwrap();

    let scan = || -> percolate::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let txn = client.begin()?;
        txn.scan::<&[u8]>(..).collect()
    };
    let err = scan().expect_err("a damaged record fails the scan");
    assert!(
        matches!(err, Error::Mvcc(percolate::mvcc::Error::Corruption { .. })),
        "{err:?}"
    );

    let mut removed: Vec<(Cf, Vec<u8>, Vec<u8>)> = client
        .repair()
        .unwrap()
        .into_iter()
        .map(|r| (r.cf, r.key, r.value))
        .collect();
    removed.sort();
    let mut expected = planted.to_vec();
    expected.sort();
    assert_eq!(removed, expected);

    let pairs = scan().unwrap();
    let keys: Vec<&[u8]> = pairs.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(keys, [&b"apple"[..], b"kiwi", b"zebra"]);
    assert_eq!(
        client.get_latest(b"kiwi").unwrap(),
        Some(b"kiwi-value".to_vec())
    );
    assert!(
        client.repair().unwrap().is_empty(),
        "nothing left to remove"
    );
}

/// A transaction whose primary ("a", in the first region) only locked its
/// key and whose secondary ("z", in the last) is still locked after the
/// primary's commit (its client died there). `Client::gc` at a safe point
/// above the commit resolves every region's locks before collecting any:
/// collecting the first region first would delete the primary's Lock
/// commit record, and the secondary's resolution would then find no
/// commit and roll a committed transaction's write back. Found by the
/// deterministic simulator (percolate-sim, seed 918).
fn gc_resolves_before_it_collects<E: Engine>(client: &Client<E>) {
    use percolate::mvcc::Key;
    use percolate::txn::actions::prewrite::Mutation;
    use percolate::txn::commands::Prewrite;
    let regions = client.cluster().regions();
    let (first, last) = (regions[0].storage(), regions[regions.len() - 1].storage());
    let start_ts = client.current_ts().unwrap();
    let prewrite = |storage: &percolate::txn::storage::Storage<E>, mutation| {
        let result = storage
            .prewrite(Prewrite::new(vec![mutation], b"a".to_vec(), start_ts))
            .unwrap();
        assert!(result.locks.is_empty());
    };
    prewrite(first, Mutation::lock(Key::from_raw(b"a")));
    prewrite(
        last,
        Mutation::put(Key::from_raw(b"z"), b"committed".to_vec()),
    );
    let commit_ts = client.current_ts().unwrap();
    first
        .commit(vec![Key::from_raw(b"a")], start_ts, commit_ts)
        .unwrap();
    let safe_point = client.current_ts().unwrap();
    client.gc(safe_point).unwrap();
    assert_eq!(
        client.get_latest(b"z").unwrap(),
        Some(b"committed".to_vec())
    );
    assert_eq!(
        client.snapshot(commit_ts).get(b"z").unwrap(),
        Some(b"committed".to_vec())
    );
}

/// A pessimistic transaction that locks a key over a commit computed ahead
/// of the oracle (an async-commit or 1PC commit_ts above a read at a
/// future ts) commits above that commit, also by 2PC, whose commit_ts
/// comes from the oracle: otherwise its write would land below the value
/// it read and be lost.
fn a_pessimistic_write_lands_above_a_commit_ahead_of_the_oracle<E: Engine>(engine: E) {
    use percolate::mvcc::{Key, TimeStamp};
    use percolate::txn::actions::prewrite::Mutation;
    use percolate::txn::commands::Prewrite;
    use percolate::txn::oracle::TimestampOracle;
    let dir = tempfile::tempdir().unwrap();
    let oracle =
        std::sync::Arc::new(percolate::txn::oracle::LocalOracle::open(dir.path()).unwrap());
    let storage = percolate::txn::storage::StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..Default::default()
    };
    let cluster = percolate::txn::cluster::Cluster::new(engine, vec![], storage);
    let config = percolate::txn::client::ClientConfig {
        one_pc: false,
        async_commit: false,
        ..Default::default()
    };
    let client = Client::new(cluster, oracle.clone(), config);
    let s = client.cluster().region_for(b"k").storage();
    // A read 30 s ahead, then a 1PC commit computed above it.
    let now = oracle.get_ts().unwrap();
    let ahead = TimeStamp::compose(now.physical() + 30_000, 0);
    assert_eq!(s.get(Key::from_raw(b"k"), ahead).unwrap(), None);
    let start_ts = oracle.get_ts().unwrap();
    let one_pc = Prewrite::new(
        vec![Mutation::put(Key::from_raw(b"k"), b"1".to_vec())],
        b"k",
        start_ts,
    )
    .one_pc(TimeStamp::zero());
    let committed_at = s.prewrite(one_pc).unwrap().one_pc_commit_ts.unwrap();
    assert!(committed_at > ahead);
    let mut txn = client.begin_pessimistic().unwrap();
    assert_eq!(txn.get_for_update(b"k").unwrap(), Some(b"1".to_vec()));
    assert!(txn.for_update_ts() >= committed_at);
    txn.put(b"k".to_vec(), b"2".to_vec()).unwrap();
    let info = txn.commit().unwrap();
    assert!(
        info.commit_ts > committed_at,
        "{info:?} at or below {committed_at}"
    );
    assert_eq!(client.get_latest(b"k").unwrap(), Some(b"2".to_vec()));
}

#[test]
fn a_pessimistic_write_lands_above_a_commit_ahead_of_the_oracle_memory() {
    a_pessimistic_write_lands_above_a_commit_ahead_of_the_oracle(percolate::MemoryEngine::new());
}

#[test]
fn a_pessimistic_write_lands_above_a_commit_ahead_of_the_oracle_rocks() {
    a_pessimistic_write_lands_above_a_commit_ahead_of_the_oracle(
        percolate::engine::testing::temp_rocks_engine(),
    );
}

/// A snapshot read at a timestamp the oracle has not reached raises
/// `max_ts` there, so the 1PC and async commits after it are computed
/// above it: the oracle is moved past it first, so that a transaction
/// beginning after those commits returned reads above them and sees them.
fn commits_after_a_read_ahead_are_seen<E: Engine>(client: &Client<E>) {
    use percolate::mvcc::TimeStamp;
    let now = client.current_ts().unwrap();
    let ahead = TimeStamp::compose(now.physical() + 30_000, 0);
    assert_eq!(client.snapshot(ahead).get(b"a").unwrap(), None);
    // One region: 1PC.
    let mut txn = client.begin().unwrap();
    txn.put(b"a", b"1");
    let one_pc = txn.commit().unwrap();
    assert_eq!(one_pc.protocol, percolate::CommitProtocol::OnePc);
    assert!(one_pc.commit_ts > ahead, "{one_pc:?}");
    let later = client.begin().unwrap();
    assert!(later.start_ts() >= one_pc.commit_ts, "{later:?} {one_pc:?}");
    assert_eq!(later.get(b"a").unwrap(), Some(b"1".to_vec()));
    // Three regions: async commit, read ahead of the oracle again.
    let ahead = TimeStamp::compose(client.current_ts().unwrap().physical() + 30_000, 0);
    let pairs: Vec<_> = client.snapshot(ahead).scan::<&[u8]>(..).collect();
    assert_eq!(pairs.len(), 1);
    let mut txn = client.begin().unwrap();
    for k in [&b"b"[..], b"h", b"q"] {
        txn.put(k, b"2");
    }
    let async_commit = txn.commit().unwrap();
    assert_eq!(
        async_commit.protocol,
        percolate::CommitProtocol::AsyncCommit
    );
    assert!(async_commit.commit_ts > ahead, "{async_commit:?}");
    let later = client.begin().unwrap();
    for k in [&b"b"[..], b"h", b"q"] {
        assert_eq!(later.get(k).unwrap(), Some(b"2".to_vec()));
    }
}

/// A read at a timestamp beyond the regions' `max_ts` limit (an hour
/// ahead, where `Client::open` allows a minute) is refused, and the
/// oracle stays where it was: a bogus timestamp does not drag every later
/// one with it. One within the limit moves it.
#[test]
fn a_read_too_far_ahead_is_refused_and_leaves_the_oracle_alone() {
    use percolate::mvcc::TimeStamp;
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let now = client.current_ts().unwrap();
    let far = TimeStamp::compose(now.physical() + 3_600_000, 0);
    assert!(
        matches!(
            client.snapshot(far).get(b"k"),
            Err(Error::InvalidMaxTsUpdate { .. })
        ),
        "a read an hour ahead"
    );
    assert!(client.current_ts().unwrap() < TimeStamp::compose(now.physical() + 60_000, 0));
    let near = TimeStamp::compose(now.physical() + 20_000, 0);
    assert_eq!(client.snapshot(near).get(b"k").unwrap(), None);
    assert!(client.current_ts().unwrap() > near);
    // Reads that each step most of a minute past the oracle do not walk
    // it away from the clock (the limit follows the clock, and a read is
    // refused where the oracle cannot follow): it moves at most a minute
    // ahead of it.
    for _ in 0..5 {
        let ahead = TimeStamp::compose(client.current_ts().unwrap().physical() + 50_000, 0);
        let _ = client.snapshot(ahead).get(b"k");
    }
    let wall_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let oracle_ms = client.current_ts().unwrap().physical();
    assert!(oracle_ms < wall_ms + 65_000, "{oracle_ms} vs {wall_ms}");
}

/// With the oracle moved most of a minute ahead of the clock by a read, a
/// read further ahead still (within a minute of the moved oracle, but
/// not of the clock) is refused: accepted, it would raise `max_ts` past
/// where the oracle can be moved, and a 1PC commit computed above it
/// would be missed by a transaction beginning after it. A commit after
/// the refusal is seen by the next transaction.
#[test]
fn a_read_beyond_the_clock_is_refused_after_the_oracle_moved_ahead() {
    use percolate::mvcc::TimeStamp;
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let wall_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let near = TimeStamp::compose(wall_ms() + 50_000, 0);
    assert_eq!(client.snapshot(near).get(b"k").unwrap(), None);
    assert!(client.current_ts().unwrap() > near);
    let beyond = TimeStamp::compose(wall_ms() + 90_000, 0);
    assert!(
        matches!(
            client.snapshot(beyond).get(b"k"),
            Err(Error::InvalidMaxTsUpdate { .. })
        ),
        "a read 90 s ahead of the clock, 40 s ahead of the oracle"
    );
    let info = client
        .with_retry_info(|txn| {
            txn.put(b"k", b"v");
            Ok(())
        })
        .unwrap()
        .1;
    assert!(info.commit_ts < beyond, "{info:?}");
    let txn = client.begin().unwrap();
    assert!(txn.start_ts() >= info.commit_ts);
    assert_eq!(txn.get(b"k").unwrap(), Some(b"v".to_vec()));
}

/// An insert the transaction then deleted, or overwrote with a put, still
/// fails on a key that exists (TiDB's CheckNotExists, and its
/// presume-not-exists flag): the commit is refused with `AlreadyExist` and
/// writes nothing, whether the key is the commit's primary, a 1PC key or a
/// secondary of another region. Over an absent key the commit goes through
/// and the key stays absent (or takes the put's value).
fn an_undone_insert_keeps_its_check<E: Engine>(client: &Client<E>) {
    use percolate::Key;
    use percolate::mvcc::Error as MvccError;
    let mut txn = client.begin().unwrap();
    for (k, v) in [(&b"a"[..], &b"1"[..]), (b"h", b"1"), (b"q", b"1")] {
        txn.put(k, v);
    }
    txn.commit().unwrap();
    let already_exist = |outcome: Result<_, Error>, key: &[u8]| match outcome {
        Err(Error::Mvcc(MvccError::AlreadyExist { key: k, .. })) => {
            assert_eq!(k, Key::from_raw(key))
        }
        other => panic!("expected AlreadyExist on {key:?}, got {other:?}"),
    };
    // The only key (1PC), the primary of a commit across regions, and a
    // secondary in another region.
    for (undone, others) in [
        (&b"a"[..], &[][..]),
        (b"a", &[&b"b"[..], b"z"][..]),
        (b"q", &[&b"b"[..], b"i"][..]),
    ] {
        let mut txn = client.begin().unwrap();
        txn.insert(undone, b"2");
        txn.delete(undone);
        for k in others {
            txn.put(*k, b"2");
        }
        already_exist(txn.commit(), undone);
        assert_eq!(client.get_latest(undone).unwrap(), Some(b"1".to_vec()));
        for k in others {
            assert_eq!(client.get_latest(k).unwrap(), None, "{k:?}");
        }
    }
    // A put over the insert (deleted since or not) keeps its check too.
    for delete_first in [false, true] {
        let mut txn = client.begin().unwrap();
        txn.insert(b"h", b"2");
        if delete_first {
            txn.delete(b"h");
        }
        txn.put(b"h", b"3");
        already_exist(txn.commit(), b"h");
        assert_eq!(client.get_latest(b"h").unwrap(), Some(b"1".to_vec()));
    }
    let mut txn = client.begin().unwrap();
    txn.insert(b"e", b"2");
    txn.put(b"e", b"3");
    txn.commit().unwrap();
    assert_eq!(client.get_latest(b"e").unwrap(), Some(b"3".to_vec()));
    // Absent: committed, and still absent.
    let mut txn = client.begin().unwrap();
    txn.insert(b"c", b"2");
    txn.delete(b"c");
    txn.put(b"r", b"2");
    txn.commit().unwrap();
    assert_eq!(client.get_latest(b"c").unwrap(), None);
    assert_eq!(client.get_latest(b"r").unwrap(), Some(b"2".to_vec()));
}
