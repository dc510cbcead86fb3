//! The byte codecs of the MVCC layer, on their own (no engine).
//!
//! * `key`: `Key::from_raw` (memcomparable encoding) followed by
//!   `append_ts`, for a 16-byte and a 64-byte user key, and the way back
//!   (`TimestampedKey::truncate_ts` then `Key::to_raw`). Baseline: copying
//!   the raw key and the 8 timestamp bytes into a new buffer, the least any
//!   encoding has to do.
//! * `lock`: `Lock::to_bytes` and `Lock::parse` of a 1PC-style lock with a
//!   64-byte short value, and of an async-commit primary lock listing 3
//!   secondaries. Baseline: copying the encoded bytes.
//! * `write`: `Write::to_bytes`, `Write::parse` (owned) and
//!   `WriteRef::parse` (borrowing) of a commit record with a 64-byte short
//!   value. Baseline: copying the encoded bytes.
//!
//! Criterion reports each function; the `RATIO` lines give the throughput
//! of each codec as a fraction of its baseline, measured in alternating
//! rounds in the same process (so 0.25x: the codec costs four copies).

#![allow(missing_docs)] // criterion_group! generates undocumented items.

mod support;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use percolate::mvcc::{Key, Lock, LockType, TimeStamp, TimestampedKey, Write, WriteRef, WriteType};

/// Codec calls per ratio round.
const OPS: u64 = 100_000;
const ROUNDS: usize = 11;

fn raw_key(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

fn encode_key(raw: &[u8]) -> TimestampedKey {
    Key::from_raw(raw).append_ts(TimeStamp::new(424_242))
}

/// The baseline of a key encoding: the raw bytes and the ts in a new buffer.
fn copy_key(raw: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(raw.len() + 8);
    v.extend_from_slice(raw);
    v.extend_from_slice(&424_242u64.to_be_bytes());
    v
}

fn decode_key(encoded: &TimestampedKey) -> Vec<u8> {
    encoded.clone().truncate_ts().to_raw().unwrap()
}

fn one_pc_lock() -> Lock {
    let mut lock = Lock::new(
        LockType::Put,
        b"user000000000042".to_vec(),
        TimeStamp::new(424_242),
        3000,
    );
    lock.short_value = Some(vec![b'v'; 64]);
    lock.txn_size = 1;
    lock
}

fn async_commit_lock() -> Lock {
    let mut lock = one_pc_lock();
    lock.use_async_commit = true;
    lock.min_commit_ts = TimeStamp::new(424_243);
    lock.secondaries = (0..3)
        .map(|i| format!("user{i:012}").into_bytes())
        .collect();
    lock.txn_size = 4;
    lock
}

fn commit_record() -> Write {
    Write::new(
        WriteType::Put,
        TimeStamp::new(424_242),
        Some(vec![b'v'; 64]),
    )
}

fn bench_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("key");
    for len in [16usize, 64] {
        let raw = raw_key(len);
        let encoded = encode_key(&raw);
        group.bench_function(format!("from_raw+append_ts/{len}"), |b| {
            b.iter(|| encode_key(black_box(&raw)))
        });
        group.bench_function(format!("truncate_ts+to_raw/{len}"), |b| {
            b.iter(|| decode_key(black_box(&encoded)))
        });
        group.bench_function(format!("copy/{len}"), |b| {
            b.iter(|| copy_key(black_box(&raw)))
        });
        support::print_ratio(
            &format!("key encode {len} B: from_raw+append_ts / copy"),
            OPS,
            ROUNDS,
            || (0..OPS).for_each(|_| drop(black_box(encode_key(black_box(&raw))))),
            || (0..OPS).for_each(|_| drop(black_box(copy_key(black_box(&raw))))),
        );
        support::print_ratio(
            &format!("key decode {len} B: truncate_ts+to_raw / copy"),
            OPS,
            ROUNDS,
            || (0..OPS).for_each(|_| drop(black_box(decode_key(black_box(&encoded))))),
            || (0..OPS).for_each(|_| drop(black_box(copy_key(black_box(&raw))))),
        );
    }
    group.finish();
}

fn bench_lock(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock");
    for (name, lock) in [
        ("1pc", one_pc_lock()),
        ("async_primary", async_commit_lock()),
    ] {
        let bytes = lock.to_bytes();
        group.bench_function(format!("to_bytes/{name}"), |b| {
            b.iter(|| black_box(&lock).to_bytes())
        });
        group.bench_function(format!("parse/{name}"), |b| {
            b.iter(|| Lock::parse(black_box(&bytes)).unwrap())
        });
        group.bench_function(format!("copy/{name}"), |b| {
            b.iter(|| black_box(&bytes).to_vec())
        });
        support::print_ratio(
            &format!("lock {name} ({} B): to_bytes / copy", bytes.len()),
            OPS,
            ROUNDS,
            || (0..OPS).for_each(|_| drop(black_box(black_box(&lock).to_bytes()))),
            || (0..OPS).for_each(|_| drop(black_box(black_box(&bytes).to_vec()))),
        );
        support::print_ratio(
            &format!("lock {name} ({} B): parse / copy", bytes.len()),
            OPS,
            ROUNDS,
            || (0..OPS).for_each(|_| drop(black_box(Lock::parse(black_box(&bytes))))),
            || (0..OPS).for_each(|_| drop(black_box(black_box(&bytes).to_vec()))),
        );
    }
    group.finish();
}

fn bench_write(c: &mut Criterion) {
    let mut group = c.benchmark_group("write");
    let write = commit_record();
    let bytes = write.to_bytes();
    group.bench_function("to_bytes", |b| b.iter(|| black_box(&write).to_bytes()));
    group.bench_function("parse", |b| {
        b.iter(|| Write::parse(black_box(&bytes)).unwrap())
    });
    group.bench_function("parse_ref", |b| {
        b.iter(|| WriteRef::parse(black_box(&bytes)).unwrap().start_ts)
    });
    group.bench_function("copy", |b| b.iter(|| black_box(&bytes).to_vec()));
    let len = bytes.len();
    support::print_ratio(
        &format!("write record ({len} B): to_bytes / copy"),
        OPS,
        ROUNDS,
        || (0..OPS).for_each(|_| drop(black_box(black_box(&write).to_bytes()))),
        || (0..OPS).for_each(|_| drop(black_box(black_box(&bytes).to_vec()))),
    );
    support::print_ratio(
        &format!("write record ({len} B): parse / copy"),
        OPS,
        ROUNDS,
        || (0..OPS).for_each(|_| drop(black_box(Write::parse(black_box(&bytes))))),
        || (0..OPS).for_each(|_| drop(black_box(black_box(&bytes).to_vec()))),
    );
    support::print_ratio(
        &format!("write record ({len} B): WriteRef::parse (borrowing) / copy"),
        OPS,
        ROUNDS,
        || {
            (0..OPS).for_each(|_| {
                black_box(WriteRef::parse(black_box(&bytes)).map(|w| w.start_ts).ok());
            })
        },
        || (0..OPS).for_each(|_| drop(black_box(black_box(&bytes).to_vec()))),
    );
    group.finish();
}

criterion_group!(benches, bench_key, bench_lock, bench_write);
criterion_main!(benches);
