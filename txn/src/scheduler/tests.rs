//! The scheduler's own guarantees, through `Storage` on the memory engine:
//! failed writes, group commit, shutdown, the non-blocking forms.

use std::sync::mpsc;
use std::time::Duration;

use percolate_engine::{Durability, MemoryEngine};
use percolate_mvcc::{Key, LockType, TimeStamp};

use super::*;
use crate::actions::prewrite::Mutation;
use crate::concurrency_manager::MemoryLockWait;
use crate::commands::{
    AcquirePessimisticLock, Commit, Get, PessimisticRollback, Prewrite, WriteResult,
};
use crate::read::ReadOptions;
use crate::storage::{Storage, StorageConfig};
use crate::testing::FaultyEngine;

fn ts(v: u64) -> TimeStamp {
    TimeStamp::new(v)
}

fn key(raw: &str) -> Key {
    Key::from_raw(raw.as_bytes())
}

fn storage_with(
    config: SchedulerConfig,
) -> (
    Storage<FaultyEngine<MemoryEngine>>,
    FaultyEngine<MemoryEngine>,
) {
    let engine = FaultyEngine::new(MemoryEngine::new());
    let storage = Storage::new(
        engine.clone(),
        StorageConfig {
            scheduler: config,
            ..Default::default()
        },
    );
    (storage, engine)
}

/// A storage whose writes are synced (through the group-commit writer),
/// with two workers.
fn synced_storage() -> (
    Storage<FaultyEngine<MemoryEngine>>,
    FaultyEngine<MemoryEngine>,
) {
    storage_with(SchedulerConfig {
        worker_threads: 2,
        durability: Durability::Sync,
        ..Default::default()
    })
}

fn put(k: &str, start_ts: u64) -> Prewrite {
    Prewrite::new(vec![Mutation::put(key(k), b"v".to_vec())], k, ts(start_ts))
}

#[test]
fn a_failed_write_answers_the_error_and_releases_latches_and_memory_locks() {
    let (storage, engine) = storage_with(SchedulerConfig::default());
    engine.fail_next_writes(1);
    let async_put = put("k", 10).async_commit(vec![], TimeStamp::zero());
    let err = storage.prewrite(async_put.clone()).unwrap_err();
    assert!(matches!(err, Error::Engine(_)), "{err}");
    let cm = storage.concurrency_manager();
    assert_eq!(cm.read_key(&key("k"), MemoryLockWait::Never, |_, _| Err(())), Ok(()));
    assert_eq!(cm.global_min_lock_ts(), None);
    assert_eq!(storage.scheduler().in_flight(), 0);
    // Nothing was written, and the same request now succeeds.
    assert_eq!(storage.get(key("k"), ts(100)).unwrap(), None);
    let result = storage.prewrite(async_put).unwrap();
    assert_eq!(result.min_commit_ts, Some(ts(101)), "above the get at 100");
    storage.commit(vec![key("k")], ts(10), ts(101)).unwrap();
    assert_eq!(storage.get(key("k"), ts(101)).unwrap(), Some(b"v".to_vec()));
}

#[test]
fn synced_writes_of_concurrent_commands_are_grouped() {
    const COMMANDS: u64 = 32;
    let (storage, engine) = synced_storage();
    let held = engine.hold_writes();
    let answers: Vec<_> = (0..COMMANDS)
        .map(|i| storage.sched_write(put(&format!("k{i}"), 10 + i)))
        .collect();
    // Every command is processed while the first write is held; the rest
    // pile up behind it for the writer.
    std::thread::sleep(Duration::from_millis(100));
    drop(held);
    for answer in answers {
        answer.wait().unwrap();
    }
    assert_eq!(engine.modifies_written(), COMMANDS as usize);
    assert!(
        engine.writes() < COMMANDS as usize,
        "{} engine writes for {COMMANDS} commands",
        engine.writes()
    );
    for i in 0..COMMANDS {
        let info = storage.mvcc_by_key(key(&format!("k{i}"))).unwrap();
        assert_eq!(info.lock.map(|l| l.lock_type), Some(LockType::Put));
    }
}

/// Waits (up to 30 s) until `done` holds.
fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_grouped_write_that_removes_a_lock_wakes_its_waiters() {
    let (storage, engine) = synced_storage();
    let lock = |start_ts| {
        AcquirePessimisticLock::new(vec![key("k")], b"k".to_vec(), ts(start_ts), ts(start_ts))
    };
    storage.acquire_pessimistic_lock(lock(10)).unwrap();
    std::thread::scope(|s| {
        // Without the wake-up it would wait out its 30 s and fail.
        let waiter = s.spawn(|| {
            storage.acquire_pessimistic_lock(lock(20).wait_timeout(Duration::from_secs(30)))
        });
        let waits = storage.concurrency_manager().lock_waits();
        until("20 waits for 10", || !waits.wait_for_edges().is_empty());
        // A write held at the gate; the rollback of 10's lock and another
        // command pile up behind it and are written as one group.
        let held = engine.hold_writes();
        let first = storage.sched_write(put("x", 30));
        until("the first write is held", || engine.writes_waiting() == 1);
        let writes_before = engine.writes();
        let rollback = storage.sched_write(PessimisticRollback {
            keys: vec![key("k")],
            start_ts: ts(10),
            for_update_ts: ts(10),
        });
        let other = storage.sched_write(put("j", 31));
        until("both are sent", || storage.scheduler().in_flight() == 3);
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        first.wait().unwrap();
        rollback.wait().unwrap();
        other.wait().unwrap();
        waiter.join().unwrap().unwrap();
        assert_eq!(
            engine.writes() - writes_before,
            3,
            "the first, a group of two, then the waiter's lock"
        );
    });
    assert_eq!(
        storage.mvcc_by_key(key("k")).unwrap().lock.map(|l| l.ts),
        Some(ts(20))
    );
}

#[test]
fn a_failed_group_write_fails_every_command_of_the_group() {
    let (storage, engine) = synced_storage();
    let held = engine.hold_writes();
    engine.fail_next_writes(2);
    let answers: Vec<_> = (0..8)
        .map(|i| storage.sched_write(put(&format!("k{i}"), 10 + i)))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    drop(held);
    let failed = answers
        .into_iter()
        .map(Pending::wait)
        .filter(|r| matches!(r, Err(Error::Engine(_))))
        .count();
    // Two engine writes failed; each took at least one command with it, and
    // exactly the commands that were not written report failure.
    assert!(failed >= 2, "{failed}");
    let written = (0..8)
        .filter(|i| {
            storage
                .mvcc_by_key(key(&format!("k{i}")))
                .unwrap()
                .lock
                .is_some()
        })
        .count();
    assert_eq!(written + failed, 8);
}

/// A command on `keys` that runs `body` inside `process`, on whichever
/// thread processes it.
struct Probe {
    keys: Vec<Key>,
    body: Box<dyn FnOnce() + Send>,
}

impl crate::commands::WriteCommand for Probe {
    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: percolate_engine::Snapshot>(
        self,
        _ctx: crate::commands::WriteContext<'_, S>,
    ) -> Result<WriteResult<()>> {
        (self.body)();
        Ok(WriteResult::new(percolate_mvcc::MvccTxn::new(ts(1)), ()))
    }
}

fn keys(raw: &[&str]) -> Vec<Key> {
    raw.iter().map(|k| key(k)).collect()
}

/// A command that blocks inside `process` until told to go on: it sends on
/// the first channel once inside, and waits for the second.
fn gate(raw: &[&str]) -> (Probe, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let gate = Probe {
        keys: keys(raw),
        body: Box::new(move || {
            entered_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        }),
    };
    (gate, entered_rx, go_tx)
}

#[test]
fn a_full_queue_refuses_commands_until_it_drains() {
    let (storage, _) = storage_with(SchedulerConfig {
        worker_threads: 1,
        max_pending: 2,
        ..Default::default()
    });
    let (blocker, entered, go) = gate(&["a"]);
    let blocked = storage.sched_write(blocker);
    entered.recv().unwrap();
    let queued = storage.sched_write(put("b", 5));
    let refused = storage.sched_write(put("c", 6)).wait();
    assert!(
        matches!(
            refused,
            Err(Error::SchedTooBusy {
                pending: 2,
                limit: 2
            })
        ),
        "{refused:?}"
    );
    assert!(refused.unwrap_err().is_retryable());
    go.send(()).unwrap();
    blocked.wait().unwrap();
    queued.wait().unwrap();
    storage.prewrite(put("c", 6)).unwrap();
}

#[test]
fn reads_run_on_workers_and_can_be_awaited() {
    let (storage, _) = storage_with(SchedulerConfig::default());
    storage.prewrite(put("k", 5)).unwrap();
    storage
        .sched_write(Commit {
            keys: vec![key("k")],
            start_ts: ts(5),
            commit_ts: ts(6),
        })
        .wait()
        .unwrap();
    let get = Get {
        key: key("k"),
        ts: ts(7),
        options: ReadOptions::default(),
    };
    let value = block_on(storage.sched_read(get)).unwrap();
    assert_eq!(value, Some(b"v".to_vec()));
    assert_eq!(storage.concurrency_manager().max_ts(), ts(7));
}

/// Polls a future to completion on this thread.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[test]
fn dropping_the_storage_finishes_queued_commands_and_stops_its_threads() {
    let (storage, engine) = synced_storage();
    let answers: Vec<_> = (0..16)
        .map(|i| storage.sched_write(put(&format!("k{i}"), 10 + i)))
        .collect();
    drop(storage);
    for answer in answers {
        answer.wait().unwrap();
    }
    assert_eq!(engine.modifies_written(), 16);
}

#[test]
fn a_blocking_write_that_waits_for_a_latch_runs_on_its_own_thread_once_released() {
    let (storage, _) = storage_with(SchedulerConfig {
        worker_threads: 2,
        ..Default::default()
    });
    let storage = Arc::new(storage);
    let (blocker, entered, go) = gate(&["a"]);
    let blocked = storage.sched_write(blocker);
    entered.recv().unwrap();
    let (thread_tx, ran_on) = mpsc::channel();
    let waiter = {
        let storage = storage.clone();
        std::thread::spawn(move || {
            let cmd = Probe {
                keys: keys(&["b", "a"]),
                body: Box::new(move || thread_tx.send(std::thread::current().id()).unwrap()),
            };
            storage.write(cmd).unwrap();
            std::thread::current().id()
        })
    };
    until("the write waits for the latch", || {
        storage.scheduler().latch_waits() == 1
    });
    assert!(
        ran_on.try_recv().is_err(),
        "ran while the latch was held"
    );
    go.send(()).unwrap();
    blocked.wait().unwrap();
    let waiter_thread = waiter.join().unwrap();
    assert_eq!(ran_on.recv().unwrap(), waiter_thread, "not on a worker");
    assert_eq!(storage.scheduler().in_flight(), 0);
    // Its latches were released: both keys take a write at once.
    storage.prewrite(put("a", 20)).unwrap();
    storage.prewrite(put("b", 21)).unwrap();
}

#[test]
fn blocking_writes_on_overlapping_keys_from_many_threads_exclude_each_other_and_all_finish() {
    // Commands on the caller's thread take free latches without the
    // shard's mutex; one that then finds a latch taken queues behind it,
    // and a release may come before its task is in the shard. Every
    // command must still run alone on its keys, and none may be left
    // waiting for a wake-up that went nowhere.
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    let (storage, _) = storage_with(SchedulerConfig {
        worker_threads: 1,
        // Few slots: distinct keys share latches too.
        latch_slots: 4,
        ..Default::default()
    });
    let storage = Arc::new(storage);
    const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];
    let busy: Arc<[AtomicBool; 5]> = Arc::new(Default::default());
    let ran = Arc::new(AtomicUsize::new(0));
    let (threads, per_thread) = (4, 2_000);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (storage, busy, ran) = (storage.clone(), busy.clone(), ran.clone());
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    // One, two or three keys, overlapping the other threads'.
                    let picked: Vec<usize> = (0..=((t + i) % 3)).map(|j| (t + i + 2 * j) % 5).collect();
                    let (busy, ran) = (busy.clone(), ran.clone());
                    let cmd = Probe {
                        keys: picked.iter().map(|&k| key(KEYS[k])).collect(),
                        body: Box::new(move || {
                            let mut held = Vec::new();
                            for k in picked {
                                if !held.contains(&k) {
                                    assert!(!busy[k].swap(true, Ordering::SeqCst), "two commands on one key");
                                    held.push(k);
                                }
                            }
                            std::thread::yield_now();
                            for k in held {
                                busy[k].store(false, Ordering::SeqCst);
                            }
                            ran.fetch_add(1, Ordering::SeqCst);
                        }),
                    };
                    storage.write(cmd).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(ran.load(Ordering::SeqCst), threads * per_thread);
    assert!(
        storage.scheduler().latch_waits() > 0,
        "no command waited for a latch"
    );
    assert_eq!(storage.scheduler().in_flight(), 0);
}
