//! MVCC read path on RocksDB, side by side with raw RocksDB.
//!
//! * `point_get`: `PointGetter::get` of a committed short value vs a raw
//!   `DB::get` of the same key and value stored plainly. Target >= 0.8x
//!   (the performance issue's; 0.6x before it).
//! * `scan_10k`: a forward `Scanner` over 10,000 committed keys vs a raw
//!   iterator over the same data stored plainly. Target >= 0.6x.
//! * `scan_10k_lent`: the same scan through `Scanner::visit`, each pair
//!   lent as slices of the scanner's buffers, vs a raw iterator whose
//!   pairs are read in place (neither copies a pair out). Target >= 0.6x.
//! * `versions`: a point get of a key with 1,000 older versions vs a key
//!   with one. Target: at most 1.2x the time.
//! * `point_get_fresh`: what a region's `Get` command does per read, a new
//!   `PointGetter` over the engine's latest view (`Engine::latest`) for
//!   each key, vs a raw `DB::get`. Target >= 0.8x.
//! * `scan_100_after_churn`: 100 keys from a random start, where every key
//!   of the range was locked and unlocked (the lock CF's memtable holds a
//!   tombstone per key, as after 2PC or async-commit traffic), vs a raw
//!   iterator reading 100 keys. Guards the scan's lock cursor: bounded by
//!   the keys the scan reads, it steps over their tombstones only; over the
//!   rest of the range, it stepped over every tombstone to the range's end.
//!
//! Criterion reports each function; after the groups, the `RATIO` lines give
//! throughput ratios measured in alternating rounds in the same process.

#![allow(missing_docs)] // criterion_group! generates undocumented items.

mod support;

use std::hint::black_box;
use std::ops::ControlFlow;

use criterion::{Criterion, criterion_group, criterion_main};
use percolate::engine::{Cf, Engine, RocksEngine, WriteBatch, WriteOptions};
use percolate::mvcc::{
    Key, MvccTxn, PointGetterBuilder, ScannerBuilder, TimeStamp, Write, WriteType,
};
use rand::seq::SliceRandom;
use rand::{SeedableRng, rngs::StdRng};

const KEYS: usize = 10_000;
const VALUE_LEN: usize = 64;
const VERSIONS: u64 = 1_000;

fn user_key(i: usize) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(VALUE_LEN, b'.');
    v
}

/// KEYS keys committed through MVCC records (start 10, commit 11), flushed.
fn mvcc_engine() -> RocksEngine {
    let engine = RocksEngine::open_temporary().unwrap();
    let mut txn = MvccTxn::new(TimeStamp::new(10));
    for i in 0..KEYS {
        let write = Write::new(WriteType::Put, TimeStamp::new(10), Some(value(i)));
        txn.put_write(Key::from_raw(&user_key(i)), TimeStamp::new(11), &write);
    }
    engine
        .write(&txn.into_write_batch(), WriteOptions::default())
        .unwrap();
    engine.flush().unwrap();
    engine
}

/// The same user data stored plainly in a raw RocksDB, flushed.
fn raw_db() -> RocksEngine {
    let engine = RocksEngine::open_temporary().unwrap();
    let db = engine.raw_db();
    let cf = db.cf_handle(Cf::Default.name()).unwrap();
    let mut batch = rocksdb::WriteBatch::default();
    for i in 0..KEYS {
        batch.put_cf(cf, user_key(i), value(i));
    }
    db.write(batch).unwrap();
    db.flush_cf(cf).unwrap();
    engine
}

/// A key with `versions` committed Puts, the newest at ts `2 * versions + 1`.
fn versions_engine(versions: u64) -> (RocksEngine, TimeStamp) {
    let engine = RocksEngine::open_temporary().unwrap();
    let key = Key::from_raw(b"hot-key");
    let mut batch = WriteBatch::new();
    for v in 0..versions {
        let mut txn = MvccTxn::new(TimeStamp::new(2 * v + 1));
        let write = Write::new(
            WriteType::Put,
            TimeStamp::new(2 * v + 1),
            Some(value(v as usize)),
        );
        txn.put_write(key.clone(), TimeStamp::new(2 * v + 2), &write);
        batch.extend(txn.into_modifies());
    }
    engine.write(&batch, WriteOptions::default()).unwrap();
    engine.flush().unwrap();
    (engine, TimeStamp::new(2 * versions + 10))
}

fn shuffled_keys() -> Vec<usize> {
    let mut order: Vec<usize> = (0..KEYS).collect();
    order.shuffle(&mut StdRng::seed_from_u64(7));
    order
}

/// Point reads of every key in a shuffled order through `get`, against raw
/// gets of the same keys stored plainly: criterion's figures in the group
/// `group` (`name` for percolate's function) and a `RATIO` line.
fn bench_point_reads(
    c: &mut Criterion,
    group: &str,
    name: &str,
    ratio: &str,
    mut get: impl FnMut(&Key) -> Vec<u8>,
) {
    let raw = raw_db();
    let order = shuffled_keys();
    let encoded: Vec<Key> = order.iter().map(|&i| Key::from_raw(&user_key(i))).collect();
    let plain: Vec<Vec<u8>> = order.iter().map(|&i| user_key(i)).collect();
    let db = raw.raw_db();
    let cf = db.cf_handle(Cf::Default.name()).unwrap();

    let mut bench = c.benchmark_group(group);
    let mut i = 0;
    bench.bench_function(name, |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(get(&encoded[i]))
        })
    });
    bench.bench_function("raw_rocksdb_get", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(db.get_cf(cf, &plain[i]).unwrap().unwrap())
        })
    });
    bench.finish();

    support::print_ratio(
        ratio,
        KEYS as u64,
        15,
        || {
            for key in &encoded {
                black_box(get(key));
            }
        },
        || {
            for key in &plain {
                black_box(db.get_cf(cf, key).unwrap().unwrap());
            }
        },
    );
}

fn bench_point_get(c: &mut Criterion) {
    let mvcc = mvcc_engine();
    let mut getter = PointGetterBuilder::new(mvcc.snapshot(), TimeStamp::new(100)).build();
    bench_point_reads(
        c,
        "point_get",
        "percolate_point_getter",
        "point_get percolate/raw (target >= 0.80)",
        |key| getter.get(key).unwrap().unwrap(),
    );
}

fn scan_mvcc(engine: &RocksEngine) -> usize {
    let mut scanner = ScannerBuilder::new(engine.snapshot(), TimeStamp::new(100))
        .build()
        .unwrap();
    let mut n = 0;
    while let Some(pair) = scanner.next().unwrap() {
        black_box(pair);
        n += 1;
    }
    n
}

/// A raw iterator over every pair, each copied out, or read in place
/// (`lent`).
fn scan_raw(engine: &RocksEngine, lent: bool) -> usize {
    let db = engine.raw_db();
    let cf = db.cf_handle(Cf::Default.name()).unwrap();
    let mut it = db.raw_iterator_cf(cf);
    it.seek_to_first();
    let mut n = 0;
    while let (Some(k), Some(v)) = (it.key(), it.value()) {
        if lent {
            black_box((k, v));
        } else {
            black_box((k.to_vec(), v.to_vec()));
        }
        n += 1;
        it.next();
    }
    n
}

fn bench_scan(c: &mut Criterion) {
    bench_scan_group(c, "scan_10k", "percolate_scanner", scan_mvcc, false);
}

/// A 10k-pair scan group: `mvcc` (named `ours`) against a raw iterator
/// that copies each pair out, or reads it in place (`lent`).
fn bench_scan_group(
    c: &mut Criterion,
    group_name: &str,
    ours: &str,
    mvcc_scan: fn(&RocksEngine) -> usize,
    lent: bool,
) {
    let mvcc = mvcc_engine();
    let raw = raw_db();
    assert_eq!(mvcc_scan(&mvcc), KEYS);
    assert_eq!(scan_raw(&raw, lent), KEYS);
    let mut group = c.benchmark_group(group_name);
    group.sample_size(20);
    group.bench_function(ours, |b| b.iter(|| mvcc_scan(&mvcc)));
    group.bench_function("raw_rocksdb_iterator", |b| b.iter(|| scan_raw(&raw, lent)));
    group.finish();
    support::print_ratio(
        &format!("{group_name} percolate/raw (target >= 0.60)"),
        KEYS as u64,
        15,
        || {
            mvcc_scan(&mvcc);
        },
        || {
            scan_raw(&raw, lent);
        },
    );
}

fn scan_mvcc_lent(engine: &RocksEngine) -> usize {
    let mut scanner = ScannerBuilder::new(engine.snapshot(), TimeStamp::new(100))
        .build()
        .unwrap();
    let mut n = 0;
    let locks = scanner
        .visit(0, |key, value| {
            black_box((key, value));
            n += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    assert!(locks.is_empty());
    n
}

fn bench_scan_lent(c: &mut Criterion) {
    bench_scan_group(
        c,
        "scan_10k_lent",
        "percolate_scanner_visit",
        scan_mvcc_lent,
        true,
    );
}

fn bench_versions(c: &mut Criterion) {
    let (many, many_ts) = versions_engine(VERSIONS);
    let (one, one_ts) = versions_engine(1);
    let key = Key::from_raw(b"hot-key");
    let mut many_getter = PointGetterBuilder::new(many.snapshot(), many_ts).build();
    let mut one_getter = PointGetterBuilder::new(one.snapshot(), one_ts).build();
    let mut group = c.benchmark_group("versions");
    group.bench_function("get_1000_versions", |b| {
        b.iter(|| black_box(many_getter.get(&key).unwrap().unwrap()))
    });
    group.bench_function("get_1_version", |b| {
        b.iter(|| black_box(one_getter.get(&key).unwrap().unwrap()))
    });
    group.finish();
    let ratio = support::print_ratio(
        "get throughput 1000 versions/1 version (target: time <= 1.2x, i.e. ratio >= 0.83)",
        10_000,
        15,
        || {
            for _ in 0..10_000 {
                black_box(many_getter.get(&key).unwrap().unwrap());
            }
        },
        || {
            for _ in 0..10_000 {
                black_box(one_getter.get(&key).unwrap().unwrap());
            }
        },
    );
    println!(
        "RATIO versions time 1000/1: {:.2}x (target <= 1.20)",
        1.0 / ratio
    );
}

fn bench_point_get_fresh(c: &mut Criterion) {
    let mvcc = mvcc_engine();
    bench_point_reads(
        c,
        "point_get_fresh",
        "percolate_new_point_getter_per_read",
        "point_get_fresh percolate/raw (target >= 0.80)",
        |key| {
            PointGetterBuilder::new(mvcc.latest(), TimeStamp::new(100))
                .build()
                .get(key)
                .unwrap()
                .unwrap()
        },
    );
}

/// The MVCC data of [`mvcc_engine`], then a lock put and deleted on every
/// key (as prewrites and commits leave the lock CF), the tombstones left in
/// the memtable.
fn churned_engine() -> RocksEngine {
    let engine = mvcc_engine();
    let mut locks = WriteBatch::new();
    let mut unlocks = WriteBatch::new();
    for i in 0..KEYS {
        let key = Key::from_raw(&user_key(i)).into_encoded();
        locks.put(Cf::Lock, key.clone(), b"placeholder".to_vec());
        unlocks.delete(Cf::Lock, key);
    }
    engine.write(&locks, WriteOptions::default()).unwrap();
    engine.write(&unlocks, WriteOptions::default()).unwrap();
    engine
}

const SHORT_SCAN: usize = 100;

fn scan_mvcc_from(engine: &RocksEngine, start: usize) -> usize {
    let mut scanner = ScannerBuilder::new(engine.snapshot(), TimeStamp::new(100))
        .range(Some(Key::from_raw(&user_key(start))), None)
        .build()
        .unwrap();
    let pairs = scanner.scan(SHORT_SCAN).unwrap();
    black_box(&pairs);
    pairs.len()
}

fn scan_raw_from(engine: &RocksEngine, start: usize) -> usize {
    let db = engine.raw_db();
    let cf = db.cf_handle(Cf::Default.name()).unwrap();
    let mut it = db.raw_iterator_cf(cf);
    it.seek(user_key(start));
    let mut n = 0;
    while let (Some(k), Some(v)) = (it.key(), it.value()) {
        black_box((k.to_vec(), v.to_vec()));
        n += 1;
        if n == SHORT_SCAN {
            break;
        }
        it.next();
    }
    n
}

fn bench_scan_after_churn(c: &mut Criterion) {
    let mvcc = churned_engine();
    let raw = raw_db();
    let starts: Vec<usize> = shuffled_keys()
        .into_iter()
        .filter(|&i| i + SHORT_SCAN <= KEYS)
        .take(1_000)
        .collect();
    assert_eq!(scan_mvcc_from(&mvcc, starts[0]), SHORT_SCAN);
    assert_eq!(scan_raw_from(&raw, starts[0]), SHORT_SCAN);
    let mut group = c.benchmark_group("scan_100_after_churn");
    let mut i = 0;
    group.bench_function("percolate_scanner", |b| {
        b.iter(|| {
            i = (i + 1) % starts.len();
            scan_mvcc_from(&mvcc, starts[i])
        })
    });
    group.bench_function("raw_rocksdb_iterator", |b| {
        b.iter(|| {
            i = (i + 1) % starts.len();
            scan_raw_from(&raw, starts[i])
        })
    });
    group.finish();
    support::print_ratio(
        "scan_100_after_churn percolate/raw (target >= 0.60)",
        starts.len() as u64,
        15,
        || {
            for &start in &starts {
                scan_mvcc_from(&mvcc, start);
            }
        },
        || {
            for &start in &starts {
                scan_raw_from(&raw, start);
            }
        },
    );
}

criterion_group!(
    benches,
    bench_point_get,
    bench_point_get_fresh,
    bench_scan,
    bench_scan_lent,
    bench_scan_after_churn,
    bench_versions
);
criterion_main!(benches);
