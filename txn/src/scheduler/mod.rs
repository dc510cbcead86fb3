//! The scheduler: runs commands concurrently, one at a time per key.
//!
//! A write command goes through these steps:
//!
//! 1. **Submit**: refused with [`Error::SchedTooBusy`] if the scheduler
//!    already holds `max_pending` commands; otherwise it gets an id and its
//!    latches (`latches.rs`) are generated from its keys.
//! 2. **Latches**: if every latch is free it goes to the worker pool at
//!    once; otherwise it waits, and the command releasing the latch ahead
//!    of it wakes it (arrival order per key).
//! 3. **Process** on a worker: a snapshot taken after the latches, the
//!    command's action over it, the modifications buffered. An error or a
//!    panic ends here: nothing is written. A caller that would only block
//!    on the answer (the client's last prewrite batch) submits with
//!    `Scheduler::submit_write_inline`: when its latches are free at once
//!    it is processed on the caller's thread, saving two thread wake-ups.
//! 4. **Write**: all the modifications in one atomic engine write. With
//!    [`Durability::Sync`], writes go to a single writer thread that groups
//!    the writes of concurrent commands into one synced engine write (group
//!    commit); their keys are disjoint, since each holds its latches.
//! 5. **Release** the memory locks (only now that the locks are in the
//!    engine), then the latches, waking the next command of each; then
//!    answer.
//!
//! Read commands take no latches: they run on a worker over a snapshot.

pub(crate) mod latches;
mod pending;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::{JoinHandle, ThreadId};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use percolate_engine::{Durability, Engine, WriteBatch, WriteOptions};
use percolate_mvcc::{CommittedVersion, Key};

use self::latches::{CommandId, Latches};
pub use self::pending::Pending;
pub(crate) use self::pending::pending;
use crate::concurrency_manager::{ConcurrencyManager, KeyGuard};
use crate::{Error, Result};

/// How a scheduler runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Worker threads that process commands. Defaults to the machine's
    /// available parallelism.
    pub worker_threads: usize,
    /// Most commands in flight (waiting for latches, queued, running or
    /// writing) before new ones are refused with [`Error::SchedTooBusy`].
    /// Defaults to 8192.
    pub max_pending: usize,
    /// Latch slots (rounded up to a power of two). Defaults to 16384.
    pub latch_slots: usize,
    /// Whether each command's write is synced to the WAL before it
    /// answers. Defaults to [`Durability::Buffered`].
    pub durability: Durability,
    /// Most commands one group commit writes at once. Defaults to 256.
    pub max_group_size: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            worker_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_pending: 8192,
            latch_slots: 16384,
            durability: Durability::Buffered,
            max_group_size: 256,
        }
    }
}

/// What a write command produced: its modifications, the memory locks to
/// hold until they are written, and how to answer once they are.
pub(crate) struct Finish {
    pub(crate) batch: WriteBatch,
    pub(crate) guards: Vec<KeyGuard>,
    /// The versions the batch writes as the newest of their keys, noted in
    /// the version hints before it is written and confirmed here after.
    pub(crate) committed: Vec<CommittedVersion>,
    /// The command's own durability, where it overrides the scheduler's.
    pub(crate) durability: Option<Durability>,
    /// Called with the outcome of the engine write (`Ok` when there was
    /// nothing to write).
    pub(crate) reply: Box<dyn FnOnce(Result<()>) + Send>,
}

/// What a worker hands a write command: the engine to take a snapshot of,
/// or the reason it must not run.
pub(crate) enum JobInput<'a, E> {
    Run {
        engine: &'a E,
        cm: &'a ConcurrencyManager,
    },
    Abort(Error),
}

type Job<E> = Box<dyn for<'a> FnOnce(JobInput<'a, E>) -> Finish + Send>;
type Work = Box<dyn FnOnce() + Send>;

/// A write command waiting for, or holding, its latches.
struct Task<E> {
    lock: latches::Lock,
    submitted: Instant,
    deadline: Option<Instant>,
    job: Job<E>,
}

/// A processed command whose modifications are being written.
struct Written {
    cid: CommandId,
    lock: latches::Lock,
    finish: Finish,
}

/// Runs a command's job, with the fail points around it (tests):
/// `SCHED_PROCESS` fails or panics the command before it runs,
/// `SCHED_BEFORE_WRITE` after it ran. The caller catches a panic of either
/// like the command's own.
fn run_job<E>(job: Job<E>, input: JobInput<'_, E>) -> (Finish, Result<()>) {
    let input = match crate::fail::check(crate::fail::SCHED_PROCESS) {
        Ok(()) => input,
        Err(e) => JobInput::Abort(e),
    };
    let finish = job(input);
    (finish, crate::fail::check(crate::fail::SCHED_BEFORE_WRITE))
}

const TASK_SHARDS: usize = 64;

/// One shard of the waiting write commands, on cache lines of its own.
type TaskShard<E> = CachePadded<Mutex<HashMap<CommandId, Task<E>>>>;

struct Inner<E> {
    engine: E,
    cm: ConcurrencyManager,
    latches: Latches,
    /// Write commands between submit and dispatch, by id. A command's
    /// latches are only ever acquired under its shard's mutex, so a wake-up
    /// cannot slip between a failed acquire and the task's return here.
    ///
    /// The counters every command changes are on cache lines of their own,
    /// as are the shards: commands from many threads at once would
    /// otherwise take the lines the others read their fields from.
    tasks: Vec<TaskShard<E>>,
    next_cid: CachePadded<AtomicU64>,
    /// Write commands that waited for a latch.
    latch_waits: CachePadded<AtomicU64>,
    in_flight: CachePadded<AtomicUsize>,
    max_pending: usize,
    write_options: WriteOptions,
    work_tx: Sender<Work>,
    group_tx: Option<Sender<GroupMsg>>,
}

enum GroupMsg {
    Write(Written),
    Stop,
}

/// Runs commands on a pool of worker threads. Dropping it stops the
/// workers behind the commands already handed to them (those run to the
/// end); a command still waiting for its latches then, or submitted
/// afterwards through a surviving handle, is answered `Aborted`. The drop
/// joins the threads, after the group-commit writer wrote what it holds.
pub struct Scheduler<E: Engine> {
    inner: Arc<Inner<E>>,
    threads: Vec<JoinHandle<()>>,
    thread_ids: Vec<ThreadId>,
    stop_tx: Vec<Sender<Work>>,
}

impl<E: Engine> std::fmt::Debug for Scheduler<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("threads", &self.threads.len())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

/// A marker work item that stops the worker receiving it.
fn stop_marker() -> Work {
    Box::new(|| std::panic::resume_unwind(Box::new(StopWorker)))
}

struct StopWorker;

impl<E: Engine> Scheduler<E> {
    /// Starts the worker threads (and, for synced writes, the group-commit
    /// writer) over `engine`.
    pub fn new(engine: E, cm: ConcurrencyManager, config: &SchedulerConfig) -> Self {
        let (work_tx, work_rx) = crossbeam_channel::unbounded::<Work>();
        let (group_tx, group_rx) = match config.durability {
            Durability::Sync => {
                let (tx, rx) = crossbeam_channel::unbounded::<GroupMsg>();
                (Some(tx), Some(rx))
            }
            Durability::Buffered => (None, None),
        };
        let inner = Arc::new(Inner {
            engine,
            cm,
            latches: Latches::new(config.latch_slots),
            tasks: (0..TASK_SHARDS).map(|_| CachePadded::default()).collect(),
            next_cid: CachePadded::new(AtomicU64::new(1)),
            latch_waits: CachePadded::default(),
            in_flight: CachePadded::default(),
            max_pending: config.max_pending.max(1),
            write_options: WriteOptions {
                durability: config.durability,
            },
            work_tx: work_tx.clone(),
            group_tx,
        });
        let mut threads = Vec::new();
        let mut stop_tx = Vec::new();
        for i in 0..config.worker_threads.max(1) {
            let rx = work_rx.clone();
            threads.push(spawn(format!("percolate-sched-{i}"), move || {
                worker_loop(&rx)
            }));
            stop_tx.push(work_tx.clone());
        }
        if let Some(rx) = group_rx {
            let weak = Arc::downgrade(&inner);
            let max_group = config.max_group_size.max(1);
            threads.push(spawn("percolate-group-commit".into(), move || {
                group_commit_loop(&weak, &rx, max_group)
            }));
        }
        let thread_ids = threads.iter().map(|t| t.thread().id()).collect();
        Scheduler {
            inner,
            threads,
            thread_ids,
            stop_tx,
        }
    }

    /// The engine commands run on.
    pub fn engine(&self) -> &E {
        &self.inner.engine
    }

    /// The concurrency manager commands use.
    pub fn concurrency_manager(&self) -> &ConcurrencyManager {
        &self.inner.cm
    }

    /// Write commands that found a latch taken when submitted and waited
    /// for it, since the start.
    pub fn latch_waits(&self) -> u64 {
        self.inner.latch_waits.load(Ordering::Relaxed)
    }

    /// Commands submitted and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Submits a write command on `keys`. `job` runs on a worker once the
    /// latches are held, or is handed [`JobInput::Abort`] if the deadline
    /// passed first; its `Finish` is written and answered as the module
    /// documentation describes. Refused (`Err`, nothing run) when too busy.
    pub(crate) fn submit_write(
        &self,
        keys: &[Key],
        deadline: Option<Instant>,
        job: Job<E>,
    ) -> Result<()> {
        self.inner.admit()?;
        let cid = self.inner.next_cid.fetch_add(1, Ordering::Relaxed);
        let task = Task {
            lock: self.inner.latches.gen_lock(keys),
            submitted: Instant::now(),
            deadline,
            job,
        };
        self.inner.tasks[shard(cid)].lock().insert(cid, task);
        if !Inner::try_dispatch(&self.inner, cid) {
            self.inner.latch_waits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Like [`submit_write`](Self::submit_write), but a command whose
    /// latches are all free at once is processed on the calling thread,
    /// which returns once it is written (or handed to the group-commit
    /// writer). A command that waits for latches is processed by a worker,
    /// as any other. For callers that block on the answer anyway: it saves
    /// the hand-off to a worker and back (two thread wake-ups).
    pub(crate) fn submit_write_inline(
        &self,
        keys: &[Key],
        deadline: Option<Instant>,
        job: Job<E>,
    ) -> Result<()> {
        self.inner.admit()?;
        let cid = self.inner.next_cid.fetch_add(1, Ordering::Relaxed);
        let task = Task {
            lock: self.inner.latches.gen_lock(keys),
            submitted: Instant::now(),
            deadline,
            job,
        };
        self.inner.tasks[shard(cid)].lock().insert(cid, task);
        match Inner::try_acquire(&self.inner, cid) {
            Some(task) => self.inner.process(cid, task),
            None => {
                self.inner.latch_waits.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Whether each command's write is synced before it answers.
    pub(crate) fn durability(&self) -> Durability {
        self.inner.write_options.durability
    }

    /// Submits a read: `work` runs on a worker without latches. Refused
    /// when too busy.
    pub(crate) fn submit_read(
        &self,
        work: impl FnOnce(&E, &ConcurrencyManager) + Send + 'static,
    ) -> Result<()> {
        self.inner.admit()?;
        let inner = self.inner.clone();
        self.inner.spawn(Box::new(move || {
            let _done = CountDown(&inner.in_flight);
            // A panic drops the reply inside `work` (answered Aborted).
            let _ = catch_unwind(AssertUnwindSafe(|| work(&inner.engine, &inner.cm)));
        }));
        Ok(())
    }
}

/// Decrements a counter when dropped, on every path.
struct CountDown<'a>(&'a AtomicUsize);

impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn shard(cid: CommandId) -> usize {
    (cid as usize) % TASK_SHARDS
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .expect("spawning a scheduler thread")
}

fn worker_loop(rx: &Receiver<Work>) {
    while let Ok(work) = rx.recv() {
        // Commands catch their own panics; only the stop marker unwinds
        // this far.
        if catch_unwind(AssertUnwindSafe(work)).is_err() {
            return;
        }
    }
}

impl<E: Engine> Inner<E> {
    fn admit(&self) -> Result<()> {
        let pending = self.in_flight.fetch_add(1, Ordering::SeqCst);
        if pending >= self.max_pending {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::SchedTooBusy {
                pending,
                limit: self.max_pending,
            });
        }
        Ok(())
    }

    fn spawn(&self, work: Work) {
        // The receivers live as long as the workers; after shutdown the
        // work is dropped, and with it any reply it held (answered Aborted).
        let _ = self.work_tx.send(work);
    }

    /// Acquires what it can of `cid`'s latches; once all are held, sends
    /// the command to a worker. Whether it was sent.
    fn try_dispatch(this: &Arc<Self>, cid: CommandId) -> bool {
        let Some(task) = Inner::try_acquire(this, cid) else {
            return false;
        };
        let inner = this.clone();
        this.spawn(Box::new(move || inner.process(cid, task)));
        true
    }

    /// Acquires what it can of `cid`'s latches; once all are held, takes
    /// the command out of the waiting tasks for the caller to process.
    fn try_acquire(this: &Arc<Self>, cid: CommandId) -> Option<Task<E>> {
        let mut tasks = this.tasks[shard(cid)].lock();
        let task = tasks.get_mut(&cid)?;
        if !this.latches.acquire(&mut task.lock, cid) {
            return None;
        }
        debug_assert!(
            task.lock.acquired(),
            "a command runs only holding every latch"
        );
        Some(tasks.remove(&cid).expect("present above"))
    }

    /// Runs a command that holds its latches.
    fn process(self: &Arc<Self>, cid: CommandId, task: Task<E>) {
        let Task {
            lock,
            submitted,
            deadline,
            job,
        } = task;
        let input = match deadline {
            Some(deadline) if Instant::now() > deadline => {
                JobInput::Abort(Error::DeadlineExceeded {
                    waited: submitted.elapsed(),
                })
            }
            _ => JobInput::Run {
                engine: &self.engine,
                cm: &self.cm,
            },
        };
        let finish = match catch_unwind(AssertUnwindSafe(|| run_job(job, input))) {
            Ok((finish, Err(injected))) => {
                self.complete(cid, &lock, finish, Err(injected));
                return;
            }
            Ok((finish, Ok(()))) => finish,
            Err(_) => {
                // The job's reply was dropped while unwinding (answered
                // Aborted), and its memory-lock guards with it.
                self.release(cid, &lock);
                return;
            }
        };
        if finish.batch.is_empty() {
            self.complete(cid, &lock, finish, Ok(()));
            return;
        }
        self.write(cid, lock, finish);
    }

    /// Writes a processed command's batch. A command's own durability
    /// picks the path: the group-commit writer syncs, a direct write syncs
    /// only if told to.
    fn write(self: &Arc<Self>, cid: CommandId, lock: latches::Lock, finish: Finish) {
        let group_tx = match finish.durability {
            Some(Durability::Buffered) => None,
            Some(Durability::Sync) | None => self.group_tx.as_ref(),
        };
        match group_tx {
            Some(tx) => {
                let written = Written { cid, lock, finish };
                if let Err(unsent) = tx.send(GroupMsg::Write(written)) {
                    let GroupMsg::Write(Written { cid, lock, finish }) = unsent.0 else {
                        unreachable!("sent a write");
                    };
                    let err = Error::Aborted {
                        reason: "the storage shut down before the command was written",
                    };
                    self.complete(cid, &lock, finish, Err(err));
                }
            }
            None => {
                let options = WriteOptions {
                    durability: finish.durability.unwrap_or(self.write_options.durability),
                };
                let result = self
                    .engine
                    .write(&finish.batch, options)
                    .map_err(Error::from);
                self.complete(cid, &lock, finish, result);
            }
        }
    }

    /// After the write: memory locks, then latches, then the answer.
    fn complete(
        self: &Arc<Self>,
        cid: CommandId,
        lock: &latches::Lock,
        finish: Finish,
        result: Result<()>,
    ) {
        let Finish {
            batch,
            guards,
            committed,
            reply,
            durability: _,
        } = finish;
        if result.is_ok() {
            self.cm.confirm_committed(&self.engine, &committed);
            // Locks the batch deleted wake their waiters (see `LockWaits`).
            self.cm.lock_waits().release_deleted_locks(&batch);
        }
        drop(batch);
        drop(guards);
        self.release(cid, lock);
        reply(result);
    }

    fn release(self: &Arc<Self>, cid: CommandId, lock: &latches::Lock) {
        for woken in self.latches.release(lock, cid) {
            let _ = Inner::try_dispatch(self, woken);
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The group-commit writer: takes every command waiting to be written (up
/// to `max_group`), writes them all in one synced engine write, and
/// completes them. Stops at [`GroupMsg::Stop`], after the writes queued
/// before it.
fn group_commit_loop<E: Engine>(
    inner: &std::sync::Weak<Inner<E>>,
    rx: &Receiver<GroupMsg>,
    max_group: usize,
) {
    let mut stop = false;
    while !stop {
        let Ok(GroupMsg::Write(first)) = rx.recv() else {
            return;
        };
        let mut group = vec![first];
        while group.len() < max_group {
            match rx.try_recv() {
                Ok(GroupMsg::Write(next)) => group.push(next),
                Ok(GroupMsg::Stop) => {
                    stop = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let result = if let [only] = &group[..] {
            inner.engine.write(&only.finish.batch, inner.write_options)
        } else {
            let mut batch = WriteBatch::new();
            for written in &mut group {
                batch.extend(std::mem::take(&mut written.finish.batch).into_modifies());
            }
            inner.engine.write(&batch, inner.write_options)
        };
        let result = result.map_err(Arc::new);
        for Written { cid, lock, finish } in group {
            let result = result.clone().map_err(Error::Engine);
            inner.complete(cid, &lock, finish, result);
        }
    }
}

impl<E: Engine> Drop for Scheduler<E> {
    fn drop(&mut self) {
        for tx in self.stop_tx.drain(..) {
            let _ = tx.send(stop_marker());
        }
        let current = std::thread::current().id();
        if self.thread_ids.contains(&current) {
            // Dropped from one of our own threads (by a callback holding the
            // last handle): joining would wait for ourselves.
            return;
        }
        let has_writer = self.inner.group_tx.is_some();
        let workers = self.threads.len() - usize::from(has_writer);
        for thread in self.threads.drain(..workers) {
            let _ = thread.join();
        }
        // The workers are gone, so nothing new reaches the writer: let it
        // write what it has, then stop.
        if let Some(tx) = &self.inner.group_tx {
            let _ = tx.send(GroupMsg::Stop);
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests;
