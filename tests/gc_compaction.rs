//! Automatic GC on RocksDB: the safe point advances by itself (never past
//! a live transaction or snapshot of the client), and old versions go in
//! RocksDB's compactions of the write CF, their long values with them.
//! On the memory engine, which has no compactions, the same rounds collect
//! with point deletes.
//!
//! The figure of automatic GC's effect on disk is the ignored test at the
//! end: `cargo test --release -p percolate --test gc_compaction -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use percolate::engine::{Cf, MemoryEngine, RocksEngine};
use percolate::mvcc::{Key, TimeStamp, WriteType};
use percolate::txn::client::{AutoGcConfig, Client, ClientConfig, OpenOptions};
use percolate::txn::cluster::Cluster;
use percolate::txn::oracle::{LocalOracle, TimestampOracle};
use percolate::txn::storage::StorageConfig;

/// Automatic GC with no life time, run by hand only.
fn manual_gc() -> AutoGcConfig {
    AutoGcConfig {
        enabled: false,
        life_time: Duration::ZERO,
        ..AutoGcConfig::default()
    }
}

/// Automatic GC in the background every `interval`, with no life time.
fn background_gc(interval: Duration) -> AutoGcConfig {
    AutoGcConfig {
        enabled: true,
        life_time: Duration::ZERO,
        interval,
    }
}

fn open(dir: &std::path::Path, gc: AutoGcConfig) -> Client {
    Client::open_with(
        dir,
        OpenOptions {
            client: ClientConfig {
                gc,
                ..ClientConfig::default()
            },
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

/// A client with GC rounds only by hand, in a new directory (kept as long
/// as the returned guard).
fn manual_client() -> (tempfile::TempDir, Client) {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), manual_gc());
    (dir, client)
}

/// Asserts that `key`'s only record is its Put at `put_ts`, of `value`.
fn only_the_put_is_left(client: &Client, key: &[u8], put_ts: TimeStamp, value: &[u8]) {
    assert_eq!(writes(client, key), vec![(put_ts, WriteType::Put)]);
    assert_eq!(client.get_latest(key).unwrap(), Some(value.to_vec()));
}

fn engine(client: &Client) -> &RocksEngine {
    client.cluster().regions()[0].storage().engine()
}

/// Flushes the memtables and compacts the write and default CFs whole.
fn compact(client: &Client) {
    let engine = engine(client);
    engine.flush().unwrap();
    let db = engine.raw_db();
    for cf in [Cf::Write, Cf::Default] {
        let handle = db.cf_handle(cf.name()).unwrap();
        db.compact_range_cf(handle, None::<&[u8]>, None::<&[u8]>);
    }
}

/// `gc_once`, then compactions, then `gc_once` again (which finishes
/// what the compactions handed back), then compactions again.
fn collect(client: &Client) {
    client.gc_once().unwrap();
    compact(client);
    client.gc_once().unwrap();
    compact(client);
}

fn put(client: &Client, key: &[u8], value: &[u8]) -> TimeStamp {
    let (_, info) = client
        .with_retry_info(|txn| {
            txn.put(key, value);
            Ok(())
        })
        .unwrap();
    info.commit_ts
}

fn delete(client: &Client, key: &[u8]) -> TimeStamp {
    let (_, info) = client
        .with_retry_info(|txn| {
            txn.delete(key);
            Ok(())
        })
        .unwrap();
    info.commit_ts
}

/// Waits for the oracle to pass `ts`. A 1PC or async commit's ts is
/// computed from the regions' `max_ts`, not asked of the oracle, whose next
/// timestamp may equal it; a snapshot or safe point meant to be above such
/// a commit is taken after this.
fn pass(client: &Client, ts: TimeStamp) {
    while client.current_ts().unwrap() <= ts {}
}

/// Every record of `key`, from its region.
fn mvcc(client: &Client, key: &[u8]) -> percolate::txn::actions::mvcc_by_key::MvccInfo {
    let storage = client.cluster().region_for(key).storage();
    storage.mvcc_by_key(Key::from_raw(key)).unwrap()
}

/// The write records of `key`, newest first: (commit_ts, type).
fn writes(client: &Client, key: &[u8]) -> Vec<(TimeStamp, WriteType)> {
    let info = mvcc(client, key);
    info.writes
        .into_iter()
        .map(|(ts, w)| (ts, w.write_type))
        .collect()
}

/// The start_ts of the Puts of `key` whose value lives in the default CF,
/// and the start_ts of the values the default CF holds for it.
fn long_values(client: &Client, key: &[u8]) -> (Vec<TimeStamp>, Vec<TimeStamp>) {
    let info = mvcc(client, key);
    let pointed = info
        .writes
        .iter()
        .filter(|(_, w)| w.write_type == WriteType::Put && w.short_value.is_none())
        .map(|(_, w)| w.start_ts)
        .collect();
    let held = info.values.iter().map(|(ts, _)| *ts).collect();
    (pointed, held)
}

#[test]
fn versions_below_the_safe_point_disappear_after_a_compaction() {
    let (_dir, client) = manual_client();
    let mut last = TimeStamp::zero();
    for i in 0..5 {
        last = put(&client, b"k", format!("v{i}").as_bytes());
    }
    pass(&client, last);
    let round = client.gc_once().unwrap();
    assert!(round.advanced);
    assert!(round.safe_point >= last);
    assert_eq!(
        TimeStamp::new(engine(&client).gc_safe_point()),
        round.safe_point
    );
    // No point deletes: the versions are still there until a compaction.
    assert_eq!(round.point_deleted.deleted_versions, 0);
    assert_eq!(writes(&client, b"k").len(), 5);
    compact(&client);
    only_the_put_is_left(&client, b"k", last, b"v4");
}

#[test]
fn versions_live_readers_can_see_survive() {
    let (_dir, client) = manual_client();
    put(&client, b"k", b"v0");
    let v1 = put(&client, b"k", b"v1");
    pass(&client, v1);
    let snapshot = client.snapshot_latest().unwrap();
    let txn = client.begin().unwrap();
    let v2 = put(&client, b"k", b"v2");
    pass(&client, v2);
    let v3 = put(&client, b"k", b"v3");
    pass(&client, v3);
    // A snapshot at a chosen timestamp between v2 and v3 holds v2.
    let chosen = client.snapshot(v3.prev());

    let round = client.gc_once().unwrap();
    assert!(round.safe_point < snapshot.ts());
    compact(&client);
    // v0 went; v1 is what the snapshot and the transaction read.
    let expected = vec![
        (v3, WriteType::Put),
        (v2, WriteType::Put),
        (v1, WriteType::Put),
    ];
    assert_eq!(writes(&client, b"k"), expected);
    assert_eq!(snapshot.get(b"k").unwrap(), Some(b"v1".to_vec()));
    assert_eq!(txn.get(b"k").unwrap(), Some(b"v1".to_vec()));
    assert_eq!(chosen.get(b"k").unwrap(), Some(b"v2".to_vec()));

    // Once they are gone, so are the versions only they could see.
    drop((snapshot, txn));
    collect(&client);
    assert_eq!(writes(&client, b"k"), expected[..2]);
    assert_eq!(chosen.get(b"k").unwrap(), Some(b"v2".to_vec()));
    drop(chosen);
    collect(&client);
    assert_eq!(writes(&client, b"k"), expected[..1]);
}

#[test]
fn rollback_and_lock_records_are_dropped_and_the_latest_put_kept() {
    let (_dir, client) = manual_client();
    let put_ts = put(&client, b"k", b"v");
    pass(&client, put_ts);
    let mut txn = client.begin().unwrap();
    txn.lock_keys([b"k".to_vec()]);
    let lock_ts = txn.commit().unwrap().commit_ts;
    // A 1PC commit's ts is computed, not asked of the oracle: the oracle's
    // next one may be the same.
    let mut rollback_ts = client.current_ts().unwrap();
    while rollback_ts <= lock_ts {
        rollback_ts = client.current_ts().unwrap();
    }
    let storage = client.cluster().region_for(b"k").storage();
    storage
        .batch_rollback(vec![Key::from_raw(b"k")], rollback_ts)
        .unwrap();
    assert_eq!(
        writes(&client, b"k"),
        vec![
            (rollback_ts, WriteType::Rollback),
            (lock_ts, WriteType::Lock),
            (put_ts, WriteType::Put),
        ]
    );
    collect(&client);
    only_the_put_is_left(&client, b"k", put_ts, b"v");
}

#[test]
fn a_delete_at_the_latest_position_goes_with_everything_under_it() {
    let (_dir, client) = manual_client();
    put(&client, b"gone", &[1; 300]);
    put(&client, b"gone", b"short");
    delete(&client, b"gone");
    // Another key: deleted below the safe point, put again above it (a
    // snapshot holds the safe point between the two).
    put(&client, b"back", &[2; 300]);
    let deleted = delete(&client, b"back");
    pass(&client, deleted);
    let snapshot = client.snapshot_latest().unwrap();
    let again = put(&client, b"back", b"again");

    collect(&client);
    assert_eq!(writes(&client, b"gone"), vec![]);
    assert_eq!(long_values(&client, b"gone"), (vec![], vec![]));
    assert_eq!(writes(&client, b"back"), vec![(again, WriteType::Put)]);
    assert_eq!(long_values(&client, b"back"), (vec![], vec![]));
    assert_eq!(client.get_latest(b"gone").unwrap(), None);
    assert_eq!(snapshot.get(b"back").unwrap(), None);
    assert_eq!(client.get_latest(b"back").unwrap(), Some(b"again".to_vec()));
}

/// Compacts the write and default CFs over the raw keys `[start, end)`
/// only.
fn compact_range(client: &Client, start: &[u8], end: &[u8]) {
    let engine = engine(client);
    engine.flush().unwrap();
    let db = engine.raw_db();
    let stored = |raw: &[u8]| {
        let mut key = vec![percolate::engine::DATA_PREFIX];
        key.extend_from_slice(Key::from_raw(raw).as_encoded());
        key
    };
    for cf in [Cf::Write, Cf::Default] {
        let handle = db.cf_handle(cf.name()).unwrap();
        db.compact_range_cf(handle, Some(stored(start)), Some(stored(end)));
    }
}

#[test]
fn a_delete_a_partial_compaction_keeps_is_handed_back_and_collected() {
    let (_dir, client) = manual_client();
    // A file outside the compacted range: no compaction below is full.
    put(&client, b"x", b"elsewhere");
    engine(&client).flush().unwrap();
    put(&client, b"gone", &[1; 300]);
    put(&client, b"gone", b"short");
    let deleted = delete(&client, b"gone");
    pass(&client, deleted);
    let round = client.gc_once().unwrap();
    assert!(round.safe_point >= deleted);

    // Everything under the Delete goes; the Delete stays (an older
    // version could be in a file outside the compaction).
    compact_range(&client, b"a", b"m");
    assert_eq!(writes(&client, b"gone"), vec![(deleted, WriteType::Delete)]);
    let round = client.gc_once().unwrap();
    assert_eq!(round.point_deleted.deleted_versions, 0);
    assert_eq!(long_values(&client, b"gone"), (vec![], vec![]));

    // Met alone, it is handed back and collected with a point delete.
    compact_range(&client, b"a", b"m");
    let round = client.gc_once().unwrap();
    assert_eq!(round.point_deleted.deleted_versions, 1);
    assert_eq!(writes(&client, b"gone"), vec![]);
    assert_eq!(client.get_latest(b"gone").unwrap(), None);
    assert_eq!(
        client.get_latest(b"x").unwrap(),
        Some(b"elsewhere".to_vec())
    );
}

#[test]
fn long_values_go_with_their_puts_and_never_without() {
    let (_dir, client) = manual_client();
    let keys: Vec<Vec<u8>> = (0..50).map(|i| format!("key{i:03}").into_bytes()).collect();
    let mut snapshot = None;
    for round in 0..6u8 {
        for (i, key) in keys.iter().enumerate() {
            // Long and short values in turn, some keys deleted.
            let value = vec![
                round;
                if (i + usize::from(round)) % 2 == 0 {
                    400
                } else {
                    8
                }
            ];
            if i % 7 == 3 && round == 4 {
                delete(&client, key);
            } else {
                put(&client, key, &value);
            }
        }
        if round == 2 {
            snapshot = Some(client.snapshot_latest().unwrap());
        }
        client.gc_once().unwrap();
        compact(&client);
        for key in &keys {
            let (pointed, held) = long_values(&client, key);
            // Every kept Put's value is there...
            for start_ts in &pointed {
                assert!(held.contains(start_ts), "{key:?}: value of {start_ts} gone");
            }
        }
    }
    let snapshot = snapshot.unwrap();
    for (i, key) in keys.iter().enumerate() {
        let expected = vec![2; if (i + 2) % 2 == 0 { 400 } else { 8 }];
        assert_eq!(snapshot.get(key).unwrap(), Some(expected));
    }
    drop(snapshot);
    collect(&client);
    for (i, key) in keys.iter().enumerate() {
        // ...and once a round has finished, no other value is.
        let (pointed, held) = long_values(&client, key);
        assert_eq!(pointed, held, "{key:?}");
        assert_eq!(writes(&client, key).len(), 1);
        let expected = vec![5; if (i + 5) % 2 == 0 { 400 } else { 8 }];
        assert_eq!(client.get_latest(key).unwrap(), Some(expected));
    }
}

#[test]
fn the_safe_point_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let safe_point = {
        let client = open(dir.path(), manual_gc());
        put(&client, b"k", b"v");
        client.gc_once().unwrap().safe_point
    };
    let client = open(dir.path(), manual_gc());
    assert_eq!(TimeStamp::new(engine(&client).gc_safe_point()), safe_point);
    // The reopened client starts from it too: it reports it, and a round
    // never moves it back.
    assert_eq!(client.gc_safe_point(), safe_point);
    assert!(client.gc_once().unwrap().safe_point >= safe_point);
}

#[test]
fn the_background_thread_advances_the_safe_point_and_stops_with_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let gc = background_gc(Duration::from_millis(20));
    {
        let client = open(dir.path(), gc.clone());
        let commit_ts = put(&client, b"k", b"v");
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.gc_safe_point() < commit_ts {
            assert!(Instant::now() < deadline, "the safe point never advanced");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Dropped with the client: the directory opens again at once.
    let client = open(dir.path(), manual_gc());
    assert!(engine(&client).gc_safe_point() > 0);
}

#[test]
fn switched_off_nothing_advances_by_itself() {
    let (_dir, client) = manual_client();
    put(&client, b"k", b"v");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(client.gc_safe_point(), TimeStamp::zero());
    assert_eq!(engine(&client).gc_safe_point(), 0);
}

#[test]
fn on_the_memory_engine_rounds_collect_with_point_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = Arc::new(LocalOracle::open(dir.path()).unwrap());
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..Default::default()
    };
    let cluster = Cluster::new(MemoryEngine::new(), vec![b"m".to_vec()], storage);
    let config = ClientConfig {
        gc: manual_gc(),
        ..ClientConfig::default()
    };
    let client = Client::new(cluster, oracle, config);
    let mut last = TimeStamp::zero();
    for key in [b"a", b"z"] {
        for i in 0..3 {
            let (_, info) = client
                .with_retry_info(|txn| {
                    txn.put(key.as_slice(), vec![i; 300]);
                    Ok(())
                })
                .unwrap();
            last = info.commit_ts;
        }
    }
    while client.current_ts().unwrap() <= last {}
    let snapshot = client.snapshot_latest().unwrap();
    client
        .with_retry(|txn| {
            txn.put(b"a".as_slice(), b"new".as_slice());
            Ok(())
        })
        .unwrap();
    let round = client.gc_once().unwrap();
    // Two old versions of each key, with their values.
    assert_eq!(round.point_deleted.deleted_versions, 4);
    assert_eq!(round.point_deleted.deleted_values, 4);
    assert_eq!(snapshot.get(b"a").unwrap(), Some(vec![2; 300]));
    assert_eq!(client.get_latest(b"a").unwrap(), Some(b"new".to_vec()));
}

/// The bytes of the SST files of a RocksDB directory.
fn sst_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

/// An update-heavy run (`KEYS` keys rewritten `ROUNDS` times, long values)
/// with a small memtable so that RocksDB flushes and compacts as it goes:
/// the SST bytes at the end, with automatic GC (life time 0, a round every
/// 50 ms) and without. Returns (bytes after the run, bytes after a final
/// full compaction, seconds).
fn update_heavy_run(gc: bool) -> (u64, u64, f64) {
    const KEYS: usize = 2_000;
    const ROUNDS: usize = 40;
    const VALUE: usize = 512;
    let dir = tempfile::tempdir().unwrap();
    let gc_config = AutoGcConfig {
        enabled: gc,
        life_time: Duration::ZERO,
        interval: Duration::from_millis(50),
    };
    let mut options = OpenOptions::default();
    options.client.gc = gc_config;
    options.engine.write_buffer_bytes = 1 << 20;
    let client = Client::open_with(dir.path(), options).unwrap();
    let started = Instant::now();
    for round in 0..ROUNDS {
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(16) {
            client
                .with_retry(|txn| {
                    for i in chunk {
                        let mut value = vec![(round % 251) as u8; VALUE];
                        value[..8].copy_from_slice(&(*i as u64).to_be_bytes());
                        txn.put(format!("key{i:06}").into_bytes(), value);
                    }
                    Ok(())
                })
                .unwrap();
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    engine(&client).flush().unwrap();
    let db_dir = dir.path().join("db");
    let after_run = sst_bytes(&db_dir);
    if gc {
        client.gc_once().unwrap();
    }
    compact(&client);
    if gc {
        // Deletes the default-CF values the compaction dropped, and
        // compacts their tombstones away.
        client.gc_once().unwrap();
        compact(&client);
    }
    (after_run, sst_bytes(&db_dir), seconds)
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn gc_disk_size_of_an_update_heavy_run() {
    let (without_run, without_compacted, without_s) = update_heavy_run(false);
    let (with_run, with_compacted, with_s) = update_heavy_run(true);
    println!(
        "update-heavy run, SST bytes: without GC {without_run} ({without_s:.1} s), with automatic GC {with_run} ({with_s:.1} s): ratio {:.3}",
        with_run as f64 / without_run as f64
    );
    println!(
        "after a final full compaction: without GC {without_compacted}, with automatic GC {with_compacted}: ratio {:.3}",
        with_compacted as f64 / without_compacted as f64
    );
    assert!(with_compacted < without_compacted);
}

/// The last handle's drop waits out a round in flight: with rounds back to
/// back, a client dropped and its directory opened again at once, many
/// times, never finds the directory still locked.
#[test]
fn a_dropped_client_frees_its_directory_even_mid_round() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..50 {
        let client = open(dir.path(), background_gc(Duration::from_micros(1)));
        put(&client, b"k", round.to_string().as_bytes());
        let copy = client.clone();
        drop(client);
        // Another handle keeps the background thread going.
        put(&copy, b"k", b"again");
        drop(copy);
    }
}
