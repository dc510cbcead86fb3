//! Transaction actions on RocksDB, side by side with a raw RocksDB
//! WriteBatch of the same user data.
//!
//! One transaction = prewrite of N keys (one atomic write of the locks)
//! followed by commit of the N keys (one atomic write of the commit
//! records), each through the actions over a fresh snapshot. The baseline
//! writes the same N key/value pairs with one raw WriteBatch. Every round
//! uses new keys, so both sides insert. Target: prewrite+commit >= 0.35x
//! the raw batch's keys per second.
//!
//! A third side writes the very records of a transaction in the same two
//! engine writes, built without any read or check: the floor the format
//! sets (three memtable records per key and two WAL writes, against one
//! and one), printed as its own ratio to the raw batch.

#![allow(missing_docs)] // criterion_group! generates undocumented items.

mod support;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use percolate::engine::{Cf, Engine, RocksEngine, WriteOptions};
use percolate::mvcc::{Key, Lock, LockType, MvccReader, MvccTxn, TimeStamp, Write, WriteType};
use percolate::txn::actions::commit::commit;
use percolate::txn::actions::prewrite::{Mutation, TransactionProperties, prewrite_mutations};

const VALUE_LEN: usize = 64;

/// Writes transactions of `n` new keys; `next` numbers them.
struct Workload {
    engine: RocksEngine,
    raw: RocksEngine,
    next: u64,
}

impl Workload {
    fn new() -> Self {
        Workload {
            engine: RocksEngine::open_temporary().unwrap(),
            raw: RocksEngine::open_temporary().unwrap(),
            next: 1,
        }
    }

    fn keys(&mut self, n: usize) -> (u64, Vec<Vec<u8>>) {
        let id = self.next;
        self.next += 1;
        (
            id,
            (0..n)
                .map(|i| format!("txn{id:012}-key{i:04}").into_bytes())
                .collect(),
        )
    }

    fn transaction(&mut self, n: usize) {
        let (id, keys) = self.keys(n);
        let (start_ts, commit_ts) = (TimeStamp::new(id * 2), TimeStamp::new(id * 2 + 1));
        let mutations: Vec<Mutation> = keys
            .iter()
            .map(|k| Mutation::put(Key::from_raw(k), vec![b'v'; VALUE_LEN]))
            .collect();
        let props = TransactionProperties {
            start_ts,
            primary: keys[0].clone(),
            lock_ttl: 3000,
            txn_size: n as u64,
            ..Default::default()
        };
        let (txn, result) =
            prewrite_mutations(&self.engine.snapshot(), &props, &mutations, None).unwrap();
        assert!(result.locks.is_empty());
        self.engine
            .write(&txn.into_write_batch(), WriteOptions::default())
            .unwrap();
        // As a command committing a sorted batch would read.
        let mut reader = MvccReader::new(self.engine.snapshot()).ascending(n > 1);
        let mut txn = MvccTxn::new(start_ts);
        for mutation in mutations {
            black_box(commit(&mut txn, &mut reader, mutation.key, commit_ts).unwrap());
        }
        self.engine
            .write(&txn.into_write_batch(), WriteOptions::default())
            .unwrap();
    }

    /// The records of [`transaction`](Self::transaction), written the same
    /// way (two engine writes: the locks, then the commit records and lock
    /// deletions) but built without reading anything: what the Percolator
    /// format costs before any check. The gap to `transaction` is the
    /// reads and the actions; the gap to `raw_batch` is the format.
    fn records_only(&mut self, n: usize) {
        let (id, keys) = self.keys(n);
        let (start_ts, commit_ts) = (TimeStamp::new(id * 2), TimeStamp::new(id * 2 + 1));
        let mut txn = MvccTxn::new(start_ts);
        for key in &keys {
            let mut lock = Lock::new(LockType::Put, keys[0].clone(), start_ts, 3000);
            lock.txn_size = n as u64;
            lock.min_commit_ts = start_ts.next();
            lock.short_value = Some(vec![b'v'; VALUE_LEN]);
            txn.put_lock(Key::from_raw(key), &lock);
        }
        self.engine
            .write(&txn.into_write_batch(), WriteOptions::default())
            .unwrap();
        let mut txn = MvccTxn::new(start_ts);
        for key in &keys {
            let key = Key::from_raw(key);
            let write = Write::new(WriteType::Put, start_ts, Some(vec![b'v'; VALUE_LEN]));
            txn.put_write(key.clone(), commit_ts, &write);
            txn.unlock_key(key);
        }
        self.engine
            .write(&txn.into_write_batch(), WriteOptions::default())
            .unwrap();
    }

    fn raw_batch(&mut self, n: usize) {
        let (_, keys) = self.keys(n);
        let db = self.raw.raw_db();
        let cf = db.cf_handle(Cf::Default.name()).unwrap();
        let mut batch = rocksdb::WriteBatch::default();
        for key in keys {
            batch.put_cf(cf, key, vec![b'v'; VALUE_LEN]);
        }
        db.write(batch).unwrap();
    }
}

fn bench_prewrite_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("prewrite_commit");
    for n in [1usize, 16, 256] {
        let mut workload = Workload::new();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("percolate_2pc", n), &n, |b, &n| {
            b.iter(|| workload.transaction(n))
        });
        group.bench_with_input(BenchmarkId::new("records_only", n), &n, |b, &n| {
            b.iter(|| workload.records_only(n))
        });
        group.bench_with_input(BenchmarkId::new("raw_write_batch", n), &n, |b, &n| {
            b.iter(|| workload.raw_batch(n))
        });
        let txns = (2048 / n).max(4);
        let mut ours = Workload::new();
        let mut base = Workload::new();
        support::print_ratio(
            &format!("prewrite+commit {n} keys percolate/raw batch (target >= 0.35)"),
            (txns * n) as u64,
            11,
            || (0..txns).for_each(|_| ours.transaction(n)),
            || (0..txns).for_each(|_| base.raw_batch(n)),
        );
        let mut floor = Workload::new();
        let mut base = Workload::new();
        support::print_ratio(
            &format!(
                "{n} keys, the same records written without reads/raw batch (the format's floor)"
            ),
            (txns * n) as u64,
            11,
            || (0..txns).for_each(|_| floor.records_only(n)),
            || (0..txns).for_each(|_| base.raw_batch(n)),
        );
    }
    group.finish();
}

criterion_group!(benches, bench_prewrite_commit);
criterion_main!(benches);
