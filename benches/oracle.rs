//! The timestamp oracle: `LocalOracle::get_ts` from one thread and from two,
//! and `get_ts_batch(64)`, on the system clock with the state file in a
//! temporary directory. Target: get_ts >= 20M timestamps per second from
//! one thread (the `RATE` line, from a timed loop of a few million calls).

#![allow(missing_docs)] // criterion_group! generates undocumented items.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use percolate::txn::oracle::{LocalOracle, TimestampOracle};

/// Calls in the timed loop behind the `RATE` line.
const RATE_CALLS: u64 = 5_000_000;

/// Times `iters` calls of `get_ts` split across `threads` threads.
fn get_ts_threads(oracle: &Arc<LocalOracle>, threads: u64, iters: u64) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let calls = iters / threads + u64::from(t < iters % threads);
            s.spawn(move || {
                for _ in 0..calls {
                    black_box(oracle.get_ts().unwrap());
                }
            });
        }
    });
    start.elapsed()
}

/// Prints the single-thread `get_ts` rate: the best of three timed loops.
fn print_rate(oracle: &LocalOracle) {
    let best = (0..3)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..RATE_CALLS {
                black_box(oracle.get_ts().unwrap());
            }
            start.elapsed()
        })
        .min()
        .unwrap_or_default();
    println!(
        "RATE oracle get_ts: {:.0} timestamps/s from one thread (target >= 20M)",
        RATE_CALLS as f64 / best.as_secs_f64()
    );
}

fn bench_oracle(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let oracle = Arc::new(LocalOracle::open(dir.path()).unwrap());
    let mut group = c.benchmark_group("oracle");
    group.throughput(Throughput::Elements(1));
    group.bench_function("get_ts", |b| b.iter(|| oracle.get_ts().unwrap()));
    group.throughput(Throughput::Elements(64));
    group.bench_function("get_ts_batch_64", |b| {
        b.iter(|| oracle.get_ts_batch(64).unwrap())
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("get_ts_2_threads", |b| {
        b.iter_custom(|iters| get_ts_threads(&oracle, 2, iters))
    });
    group.finish();
    print_rate(&oracle);
}

criterion_group!(benches, bench_oracle);
criterion_main!(benches);
