//! Commands through `Storage` (scheduler, latches, one engine write per
//! command) on RocksDB.
//!
//! * Worker scaling: one client thread keeps a window of 1-key (and
//!   16-key) prewrite commands on disjoint keys in flight (the non-blocking
//!   API), against a Storage with 1 worker, one with 2 and one with 8.
//!   Targets: 2 workers >= 1.7x the commands per second of 1 (1.8x on 16
//!   cores), 8 workers >= 5x. The 1-key ratios again with four client
//!   threads sharing the window: one thread that submits every command and
//!   waits for every answer bounds what 8 workers can show. A `CPU` line gives the cores each keeps busy
//!   (all threads: client, workers, RocksDB's): a ratio cannot exceed the
//!   cores available over the cores the 1-worker run uses, so on 2 cores
//!   the 8-worker figure says nothing of scaling.
//! * Commit protocols for a 4-key transaction in one region, each measured
//!   until the client knows the transaction committed: 2PC (prewrite, then
//!   commit of the primary; the secondaries' commit is sent without waiting),
//!   async commit (prewrite; all commits sent without waiting) and 1PC
//!   (prewrite alone). Printed as throughput ratios against 2PC.

#![allow(missing_docs)] // criterion_group! generates undocumented items.

mod support;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use percolate::engine::RocksEngine;
use percolate::mvcc::{Key, TimeStamp};
use percolate::txn::actions::prewrite::Mutation;
use percolate::txn::commands::{Commit, Prewrite};
use percolate::txn::scheduler::{Pending, SchedulerConfig};
use percolate::txn::storage::{Storage, StorageConfig};

const VALUE_LEN: usize = 64;
/// Commands one client keeps in flight.
const WINDOW: usize = 128;

/// A Storage on a temporary RocksDB, with a timestamp counter standing in
/// for the oracle.
struct Region {
    storage: Storage<RocksEngine>,
    clock: AtomicU64,
}

impl Region {
    fn new(workers: usize) -> Self {
        let config = StorageConfig {
            scheduler: SchedulerConfig {
                worker_threads: workers,
                ..Default::default()
            },
            ..Default::default()
        };
        Region {
            storage: Storage::new(RocksEngine::open_temporary().unwrap(), config),
            clock: AtomicU64::new(1),
        }
    }

    fn ts(&self) -> TimeStamp {
        TimeStamp::new(self.clock.fetch_add(1, Ordering::Relaxed))
    }

    fn keys(&self, n: usize) -> (TimeStamp, Vec<Key>) {
        let start_ts = self.ts();
        let keys = (0..n)
            .map(|i| Key::from_raw(format!("t{:012}-{i}", start_ts.into_inner()).as_bytes()))
            .collect();
        (start_ts, keys)
    }

    fn prewrite(&self, start_ts: TimeStamp, keys: &[Key]) -> Prewrite {
        let mutations = keys
            .iter()
            .map(|k| Mutation::put(k.clone(), vec![b'v'; VALUE_LEN]))
            .collect();
        let primary = keys[0].to_raw().unwrap();
        Prewrite::new(mutations, primary, start_ts)
    }

    /// `n` prewrites of `keys` new keys each (built here, outside the
    /// timing).
    fn prewrites(&self, n: usize, keys: usize) -> Vec<Prewrite> {
        (0..n)
            .map(|_| {
                let (start_ts, keys) = self.keys(keys);
                self.prewrite(start_ts, &keys)
            })
            .collect()
    }

    /// Sends `commands` with `WINDOW` of them in flight.
    fn pipelined(&self, commands: Vec<Prewrite>) {
        self.window(commands, WINDOW);
    }

    /// Sends `commands` with `window` of them in flight, from this thread.
    fn window(&self, commands: Vec<Prewrite>, window: usize) {
        let mut in_flight = VecDeque::with_capacity(window);
        for command in commands {
            if in_flight.len() == window {
                wait(in_flight.pop_front());
            }
            in_flight.push_back(self.storage.sched_write(command));
        }
        in_flight.into_iter().for_each(|p| wait(Some(p)));
    }

    /// Sends `commands` from `clients` threads, each with its share of the
    /// `WINDOW` in flight (the same number of commands in flight as
    /// [`pipelined`](Self::pipelined), without one thread submitting and
    /// collecting every one of them).
    fn pipelined_from(&self, clients: usize, mut commands: Vec<Prewrite>) {
        let share = commands.len().div_ceil(clients);
        let mut parts = Vec::with_capacity(clients);
        while !commands.is_empty() {
            let rest = commands.split_off(share.min(commands.len()));
            parts.push(std::mem::replace(&mut commands, rest));
        }
        std::thread::scope(|scope| {
            for part in parts {
                scope.spawn(move || self.window(part, WINDOW / clients));
            }
        });
    }

    fn two_pc(&self, background: &mut Vec<Pending<Vec<percolate::txn::actions::ReleasedLock>>>) {
        let (start_ts, keys) = self.keys(4);
        self.storage
            .prewrite(self.prewrite(start_ts, &keys))
            .unwrap();
        let commit_ts = self.ts();
        self.storage
            .commit(keys[..1].to_vec(), start_ts, commit_ts)
            .unwrap();
        background.push(self.storage.sched_write(Commit {
            keys: keys[1..].to_vec(),
            start_ts,
            commit_ts,
        }));
    }

    fn async_commit(
        &self,
        background: &mut Vec<Pending<Vec<percolate::txn::actions::ReleasedLock>>>,
    ) {
        let (start_ts, keys) = self.keys(4);
        let secondaries = keys[1..].iter().map(|k| k.to_raw().unwrap()).collect();
        let prewrite = self
            .prewrite(start_ts, &keys)
            .async_commit(secondaries, TimeStamp::zero());
        let commit_ts = self
            .storage
            .prewrite(prewrite)
            .unwrap()
            .min_commit_ts
            .unwrap_or_default();
        assert!(!commit_ts.is_zero());
        background.push(self.storage.sched_write(Commit {
            keys,
            start_ts,
            commit_ts,
        }));
    }

    fn one_pc(&self) {
        let (start_ts, keys) = self.keys(4);
        let prewrite = self.prewrite(start_ts, &keys).one_pc(TimeStamp::zero());
        let result = self.storage.prewrite(prewrite).unwrap();
        assert!(result.one_pc_commit_ts.is_some());
    }

    /// `n` transactions of one protocol, then waits for their background
    /// commits.
    fn transactions(&self, kind: Protocol, n: usize) {
        let mut background = Vec::new();
        for _ in 0..n {
            match kind {
                Protocol::TwoPc => self.two_pc(&mut background),
                Protocol::Async => self.async_commit(&mut background),
                Protocol::OnePc => self.one_pc(),
            }
        }
        background.into_iter().for_each(|p| wait(Some(p)));
    }
}

fn wait<T>(pending: Option<Pending<T>>) {
    if let Some(p) = pending {
        p.wait().unwrap();
    }
}

#[derive(Clone, Copy, Debug)]
enum Protocol {
    TwoPc,
    Async,
    OnePc,
}

fn bench_workers(c: &mut Criterion) {
    const COMMANDS: usize = 2048;
    const CLIENTS: usize = 4;
    let one = Region::new(1);
    let more = [(2, Region::new(2), 1.7), (8, Region::new(8), 5.0)];
    for keys in [1, 16] {
        for (workers, region, target) in &more {
            support::print_ratio_prepared(
                &format!(
                    "Storage {keys}-key prewrite commands/s, {workers} workers / 1 worker, disjoint keys (target >= {target})"
                ),
                COMMANDS as u64,
                9,
                (
                    || region.prewrites(COMMANDS, keys),
                    |cmds| region.pipelined(cmds),
                ),
                (|| one.prewrites(COMMANDS, keys), |cmds| one.pipelined(cmds)),
            );
        }
        if keys == 1 {
            // The same with four client threads: what the workers do when
            // one submitting thread is not what bounds them.
            for (workers, region, target) in &more {
                support::print_ratio_prepared(
                    &format!(
                        "Storage 1-key prewrite commands/s from {CLIENTS} client threads, {workers} workers / 1 worker, disjoint keys (target >= {target})"
                    ),
                    COMMANDS as u64,
                    9,
                    (
                        || region.prewrites(COMMANDS, 1),
                        |cmds| region.pipelined_from(CLIENTS, cmds),
                    ),
                    (
                        || one.prewrites(COMMANDS, 1),
                        |cmds| one.pipelined_from(CLIENTS, cmds),
                    ),
                );
            }
        }
        // What bounds the ratio on a small machine: the cores the whole
        // process (client thread, workers, RocksDB's threads) keeps busy.
        let cores = |region: &Region| {
            support::cores_used(
                9,
                || region.prewrites(COMMANDS, keys),
                |cmds| region.pipelined(cmds),
            )
        };
        let busy: Vec<String> = std::iter::once((1, cores(&one)))
            .chain(
                more.iter()
                    .map(|(workers, region, _)| (*workers, cores(region))),
            )
            .map(|(workers, cores)| format!("{workers} worker(s) keep {cores:.2}"))
            .collect();
        println!(
            "CPU Storage {keys}-key prewrite commands: cores busy: {} (of {} available)",
            busy.join(", "),
            std::thread::available_parallelism().map_or(0, usize::from)
        );
    }
    let mut group = c.benchmark_group("storage_pipelined_prewrite");
    group.sample_size(10);
    let regions = std::iter::once((1, &one)).chain(more.iter().map(|(w, region, _)| (*w, region)));
    for (workers, region) in regions {
        group.bench_with_input(BenchmarkId::new("workers", workers), &workers, |b, _| {
            b.iter_batched(
                || region.prewrites(WINDOW, 1),
                |cmds| region.pipelined(cmds),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn bench_protocols(c: &mut Criterion) {
    const TXNS: usize = 256;
    let region = Region::new(2);
    for (name, kind) in [("1PC", Protocol::OnePc), ("async commit", Protocol::Async)] {
        support::print_ratio(
            &format!("4-key transactions/s, {name} / 2PC (one region)"),
            TXNS as u64,
            9,
            || region.transactions(kind, TXNS),
            || region.transactions(Protocol::TwoPc, TXNS),
        );
    }
    let mut group = c.benchmark_group("storage_4_key_txn");
    for kind in [Protocol::TwoPc, Protocol::Async, Protocol::OnePc] {
        group.bench_function(format!("{kind:?}"), |b| {
            b.iter(|| region.transactions(kind, 1))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_workers, bench_protocols);
criterion_main!(benches);
