//! Transactions through `Client` (one region on RocksDB: 1PC), side by side
//! with a raw RocksDB `WriteBatch` of the same user data.
//!
//! * `commit/N`: a transaction that puts N new keys (64-byte values, so the
//!   values are inlined into the commit records) and commits, for N = 1 and
//!   4: begin (a timestamp), buffer, 1PC prewrite through the region's
//!   scheduler (latches, memory locks, a conflict check, one atomic write).
//!   Baseline: one raw `WriteBatch` of the same N pairs.
//! * `get`: a transaction that reads one committed key (begin, a snapshot
//!   read of the write CF, short value inline). Baseline: a raw `DB::get`.
//!
//! One thread; every round writes new keys on both sides. The `RATIO` lines
//! give percolate's transactions per second as a fraction of the
//! baseline's, in alternating rounds in the same process.

#![allow(missing_docs)] // criterion_group! generates undocumented items.

mod support;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use percolate::Client;
use percolate::engine::{Cf, RocksEngine};

const VALUE_LEN: usize = 64;
/// Transactions per ratio round.
const TXNS: u64 = 2_000;
const ROUNDS: usize = 11;
/// Keys loaded for the read comparison.
const READ_KEYS: u64 = 10_000;

/// A client on a temporary directory, and a raw RocksDB with percolate's
/// options beside it; `next` numbers new keys.
struct Pair {
    client: Client,
    _dir: tempfile::TempDir,
    raw: RocksEngine,
    next: u64,
}

impl Pair {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Pair {
            client: Client::open(dir.path()).unwrap(),
            _dir: dir,
            raw: RocksEngine::open_temporary().unwrap(),
            next: 0,
        }
    }

    fn keys(&mut self, n: usize) -> Vec<Vec<u8>> {
        let first = self.next;
        self.next += n as u64;
        (first..first + n as u64)
            .map(|i| format!("key{i:012}").into_bytes())
            .collect()
    }

    fn transaction(&mut self, n: usize) {
        let keys = self.keys(n);
        let mut txn = self.client.begin().unwrap();
        for key in keys {
            txn.put(key, vec![b'v'; VALUE_LEN]);
        }
        black_box(txn.commit().unwrap());
    }

    fn raw_batch(&mut self, n: usize) {
        let keys = self.keys(n);
        let db = self.raw.raw_db();
        let cf = db.cf_handle(Cf::Default.name()).unwrap();
        let mut batch = rocksdb::WriteBatch::default();
        for key in keys {
            batch.put_cf(cf, key, vec![b'v'; VALUE_LEN]);
        }
        db.write(batch).unwrap();
    }

    /// Writes keys `0..READ_KEYS` on both sides.
    fn load(&mut self) {
        self.next = 0;
        while self.next < READ_KEYS {
            self.transaction(64);
        }
        self.next = 0;
        while self.next < READ_KEYS {
            self.raw_batch(64);
        }
    }

    fn read_key(i: u64) -> Vec<u8> {
        format!("key{:012}", i % READ_KEYS).into_bytes()
    }

    fn get(&self, i: u64) {
        let txn = self.client.begin().unwrap();
        black_box(txn.get(&Self::read_key(i)).unwrap());
    }

    fn raw_get(&self, i: u64) {
        let db = self.raw.raw_db();
        let cf = db.cf_handle(Cf::Default.name()).unwrap();
        black_box(db.get_pinned_cf(cf, Self::read_key(i)).unwrap());
    }
}

fn bench_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("commit");
    for n in [1usize, 4] {
        let mut pair = Pair::new();
        group.bench_with_input(BenchmarkId::new("client_1pc", n), &n, |b, &n| {
            b.iter(|| pair.transaction(n))
        });
        group.bench_with_input(BenchmarkId::new("raw_write_batch", n), &n, |b, &n| {
            b.iter(|| pair.raw_batch(n))
        });
        let mut ours = Pair::new();
        let mut base = Pair::new();
        support::print_ratio(
            &format!("{n}-key transaction: Client 1PC / raw WriteBatch"),
            TXNS,
            ROUNDS,
            || (0..TXNS).for_each(|_| ours.transaction(n)),
            || (0..TXNS).for_each(|_| base.raw_batch(n)),
        );
    }
    group.finish();
}

fn bench_get(c: &mut Criterion) {
    let mut pair = Pair::new();
    pair.load();
    let mut group = c.benchmark_group("get");
    let mut i = 0u64;
    group.bench_function("client", |b| {
        b.iter(|| {
            i += 7919;
            pair.get(i)
        })
    });
    group.bench_function("raw_get", |b| {
        b.iter(|| {
            i += 7919;
            pair.raw_get(i)
        })
    });
    group.finish();
    let mut j = 0u64;
    let mut k = 0u64;
    support::print_ratio(
        "1-key read transaction: Client begin+get / raw DB::get",
        TXNS * 10,
        ROUNDS,
        || {
            (0..TXNS * 10).for_each(|_| {
                j += 7919;
                pair.get(j)
            })
        },
        || {
            (0..TXNS * 10).for_each(|_| {
                k += 7919;
                pair.raw_get(k)
            })
        },
    );
}

criterion_group!(benches, bench_commit, bench_get);
criterion_main!(benches);
