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
//!    on the answer (a blocking command, the client's last prewrite batch)
//!    runs it with `Scheduler::run_inline`: it is processed and written on
//!    the caller's thread, saving two thread wake-ups, the boxed job and
//!    the reply slot; if it waited for a latch, the command releasing it
//!    hands the latches to the blocked caller instead of to a worker.
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
pub(crate) use self::pending::{Completer, pending};
use crate::concurrency_manager::{ConcurrencyManager, KeyGuards};
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

/// What a write command produced: its modifications and the memory locks
/// to hold until they are written.
#[derive(Default)]
pub(crate) struct Finish {
    pub(crate) batch: WriteBatch,
    pub(crate) guards: KeyGuards,
    /// The versions the batch writes as the newest of their keys, recorded
    /// in the version hints here once it is written.
    pub(crate) committed: Vec<CommittedVersion>,
    /// The command's own durability, where it overrides the scheduler's.
    pub(crate) durability: Option<Durability>,
}

/// How a queued command answers, called with the outcome of its engine
/// write (`Ok` when there was nothing to write).
pub(crate) type Reply = Box<dyn FnOnce(Result<()>) + Send>;

/// What a worker hands a write command: the engine to take a snapshot of,
/// or the reason it must not run.
pub(crate) enum JobInput<'a, E> {
    Run {
        engine: &'a E,
        cm: &'a ConcurrencyManager,
    },
    Abort(Error),
}

pub(crate) type Job<E> = Box<dyn for<'a> FnOnce(JobInput<'a, E>) -> (Finish, Reply) + Send>;
type Work = Box<dyn FnOnce() + Send>;

/// How long a write command may wait for its latches: one that does not
/// hold them by `until` fails with [`Error::DeadlineExceeded`] instead of
/// running.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitLimit {
    sent: Instant,
    until: Instant,
}

impl WaitLimit {
    /// For a command sent now that may wait up to `max`.
    pub(crate) fn from_now(max: std::time::Duration) -> Self {
        let sent = Instant::now();
        WaitLimit {
            sent,
            until: sent + max,
        }
    }
}

/// A write command waiting for, or holding, its latches.
struct Task<E> {
    lock: latches::Lock,
    limit: Option<WaitLimit>,
    runner: Runner<E>,
}

/// Who runs a command once it holds its latches.
enum Runner<E> {
    /// A worker, with the job submitted.
    Worker(Job<E>),
    /// The thread that called [`Scheduler::run_inline`], blocked until it
    /// is handed the latches.
    Caller(Completer<latches::Lock>),
}

/// A processed command whose modifications are being written.
struct Written {
    cid: CommandId,
    lock: latches::Lock,
    finish: Finish,
    reply: Reply,
}

const TASK_SHARDS: usize = 64;

/// One shard of the waiting write commands, on cache lines of its own.
type TaskShard<E> = CachePadded<Mutex<HashMap<CommandId, Task<E>>>>;

struct Inner<E> {
    engine: E,
    cm: ConcurrencyManager,
    latches: Latches,
    /// Write commands between submit and dispatch, by id. A command that
    /// may wait acquires its latches under its shard's mutex, so a wake-up
    /// cannot slip between a failed acquire and the task's return here. (A
    /// command run on its caller's thread first tries without the mutex; a
    /// wake-up that comes before it is here finds no task and is dropped,
    /// and the command, trying again under the mutex, takes the latch it
    /// was for itself.)
    ///
    /// The counters every command changes are on cache lines of their own,
    /// as are the shards: commands from many threads at once would
    /// otherwise take the lines the others read their fields from.
    tasks: Vec<TaskShard<E>>,
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
    /// latches are held, or is handed [`JobInput::Abort`] if its wait
    /// limit passed first; its `Finish` is written and answered as the module
    /// documentation describes. Refused (`Err`, nothing run) when too busy.
    pub(crate) fn submit_write(
        &self,
        keys: &[Key],
        limit: Option<WaitLimit>,
        job: Job<E>,
    ) -> Result<()> {
        self.inner.admit()?;
        let cid = next_cid();
        let task = Task {
            lock: self
                .inner
                .latches
                .gen_lock(keys.iter().map(Key::as_encoded)),
            limit,
            runner: Runner::Worker(job),
        };
        self.inner.tasks[shard(cid)].lock().insert(cid, task);
        if !Inner::try_dispatch(&self.inner, cid) {
            self.inner.latch_waits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Runs a write command on the calling thread: processed, written (or
    /// handed to the group-commit writer) and answered here, without
    /// boxing `job` or a reply slot. A command that finds a latch taken
    /// waits for it in arrival order as a submitted one does, blocked here
    /// until the command releasing the last latch it waits for hands the
    /// latches over, and then runs here too. For callers that block on the
    /// answer anyway: it saves the hand-off to a worker and back (two
    /// thread wake-ups; one, after a latch wait). `job` returns what to
    /// write and the answer once it is written.
    pub(crate) fn run_inline<'k, T, F>(
        &self,
        keys: impl IntoIterator<Item = &'k Key>,
        limit: Option<WaitLimit>,
        job: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(JobInput<'a, E>) -> (Finish, Result<T>),
    {
        self.run_inline_latched(self.latch_lock(keys), limit, job)
    }

    /// The latches a command on `keys` takes, for
    /// [`run_inline_latched`](Self::run_inline_latched): made before the
    /// command is, so that keys the command then owns need not be copied.
    pub(crate) fn latch_lock<'k>(&self, keys: impl IntoIterator<Item = &'k Key>) -> latches::Lock {
        self.inner
            .latches
            .gen_lock(keys.into_iter().map(Key::as_encoded))
    }

    /// [`run_inline`](Self::run_inline) under `lock`, from
    /// [`latch_lock`](Self::latch_lock).
    pub(crate) fn run_inline_latched<T, F>(
        &self,
        mut lock: latches::Lock,
        limit: Option<WaitLimit>,
        job: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(JobInput<'a, E>) -> (Finish, Result<T>),
    {
        let inner = &self.inner;
        inner.admit()?;
        let cid = next_cid();
        // Latches free (almost always): taken without the shard's mutex,
        // since no release looks for a command that queued behind no one.
        // Otherwise they are taken again under it (see `tasks`), and a
        // command that must wait goes into the shard before the mutex is
        // released, so the wake-up of its releaser finds it.
        if !inner.latches.acquire(&mut lock, cid) {
            let mut tasks = inner.tasks[shard(cid)].lock();
            if !inner.latches.acquire(&mut lock, cid) {
                let (completer, granted) = pending();
                let runner = Runner::Caller(completer);
                tasks.insert(cid, Task { lock, limit, runner });
                drop(tasks);
                inner.latch_waits.fetch_add(1, Ordering::Relaxed);
                // Only a release hands the latches over (`try_dispatch`):
                // the task leaves the table only there while the scheduler,
                // borrowed here, lives, so its completer always answers. An
                // error here would leak the latches and the in-flight count.
                lock = granted
                    .wait()
                    .expect("a waiting caller's task is only removed by try_dispatch");
            }
        }
        let Some(((mut finish, output), injected)) = inner.run_job(limit, job) else {
            inner.release(cid, &lock);
            return Err(Error::Aborted {
                reason: "the command panicked",
            });
        };
        let written = match injected.map(|()| inner.group_for(&finish)) {
            Err(e) => Err(e),
            Ok(Some(tx)) => {
                let (completer, answer) = pending();
                let reply = answer_with(completer, output);
                inner.send_to_group(tx, cid, lock, finish, reply);
                return answer.wait();
            }
            Ok(None) => inner.write_direct(&mut finish),
        };
        inner.complete(cid, &lock, finish, &written);
        written.and(output)
    }

    /// Runs one write job on each of several schedulers over **one
    /// engine** (the regions of one cluster), on the calling thread, and
    /// writes what they produce in one engine write: each job under its own
    /// scheduler's latches, processed with its own concurrency manager,
    /// answered with its own outcome, as if run by
    /// [`run_inline`](Self::run_inline) one after another, but with one
    /// write instead of one per scheduler. The write is synced if any job's
    /// would be.
    ///
    /// Runs nothing, and returns the jobs, when a scheduler is too busy or
    /// a latch is taken: the caller runs them one by one instead (waiting
    /// for latches there, where no other latch is held). Latches are taken
    /// in `parts` order without waiting, so joint runs never wait for each
    /// other.
    pub(crate) fn run_joint<'k, T, F, K>(
        parts: Vec<(&Self, K, F)>,
    ) -> std::result::Result<Vec<Result<T>>, Vec<F>>
    where
        F: for<'a> FnOnce(JobInput<'a, E>) -> (Finish, Result<T>),
        K: IntoIterator<Item = &'k Key>,
    {
        let mut held: Vec<(&Arc<Inner<E>>, CommandId, latches::Lock)> = Vec::new();
        let mut jobs = Vec::with_capacity(parts.len());
        let mut refused = false;
        for (scheduler, keys, job) in parts {
            jobs.push(job);
            if refused {
                continue;
            }
            let inner = &scheduler.inner;
            let taken = inner.admit().is_ok() && {
                let cid = next_cid();
                let mut lock = inner.latches.gen_lock(keys.into_iter().map(Key::as_encoded));
                let acquired = inner.latches.acquire(&mut lock, cid);
                held.push((inner, cid, lock));
                acquired
            };
            refused = !taken;
        }
        if refused {
            for (inner, cid, lock) in held {
                inner.release(cid, &lock);
            }
            return Err(jobs);
        }
        let mut runs = Vec::with_capacity(jobs.len());
        for (job, (inner, ..)) in jobs.into_iter().zip(&held) {
            runs.push(match inner.run_job(None, job) {
                Some(((finish, output), Ok(()))) => (finish, output),
                Some(((_, _), Err(e))) => (Finish::default(), Err(e)),
                None => (
                    Finish::default(),
                    Err(Error::Aborted {
                        reason: "the command panicked",
                    }),
                ),
            });
        }
        let (written, finishes) = write_jointly(held[0].0, runs.iter_mut().map(|(f, _)| f));
        let mut answers = Vec::with_capacity(held.len());
        for ((inner, cid, lock), ((_, output), finish)) in held.into_iter().zip(runs.into_iter().zip(finishes)) {
            let written = written.clone().map_err(Error::Engine);
            inner.complete(cid, &lock, finish, &written);
            answers.push(written.and(output));
        }
        Ok(answers)
    }

    /// Starts bringing into the CPU's caches what a write command on `key`
    /// will touch in the scheduler and the engine (see
    /// [`percolate_engine::mem`]).
    pub(crate) fn prefetch(&self, key: &Key) {
        self.inner.latches.prefetch(key.as_encoded());
        self.inner.engine.prefetch_bookkeeping(key.as_encoded());
        self.inner.cm.prefetch(key);
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

/// Writes the batches of `finishes` (processed over `inner`'s engine) in
/// one engine write, synced if any would be, and hands each back its own
/// batch. An empty combination writes nothing.
fn write_jointly<'f, E: Engine>(
    inner: &Inner<E>,
    finishes: impl Iterator<Item = &'f mut Finish>,
) -> (std::result::Result<(), Arc<percolate_engine::Error>>, Vec<Finish>) {
    let mut taken: Vec<Finish> = finishes.map(std::mem::take).collect();
    let mut sync = false;
    let mut combined = WriteBatch::new();
    let mut lengths = Vec::with_capacity(taken.len());
    for finish in &mut taken {
        if !finish.batch.is_empty() {
            let durability = finish
                .durability
                .unwrap_or(inner.write_options.durability);
            sync |= durability == Durability::Sync;
        }
        let batch = std::mem::take(&mut finish.batch);
        lengths.push(batch.len());
        combined.extend(batch.into_modifies());
    }
    let written = if combined.is_empty() {
        Ok(())
    } else {
        let durability = if sync {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        inner
            .engine
            .write(&combined, WriteOptions { durability })
            .map_err(Arc::new)
    };
    // Each part's own modifications back, for what follows its write.
    let mut rest = combined.into_modifies().into_iter();
    for (finish, len) in taken.iter_mut().zip(lengths) {
        let mut batch = WriteBatch::new();
        batch.extend(rest.by_ref().take(len));
        finish.batch = batch;
    }
    (written, taken)
}

/// The reply of a command run for a caller that waits on a [`Pending`]:
/// `output`, once its write succeeded, or the write's error.
fn answer_with<T: Send + 'static>(completer: Completer<T>, output: Result<T>) -> Reply {
    Box::new(move |written: Result<()>| completer.complete(written.and(output)))
}

/// Decrements a counter when dropped, on every path.
struct CountDown<'a>(&'a AtomicUsize);

impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A command id no other command in the process holds: the calling
/// thread's number in the top 24 bits and its own count below, so that
/// threads submitting at once share no counter.
fn next_cid() -> CommandId {
    use std::cell::Cell;
    const COUNT_BITS: u32 = 40;
    static THREADS: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: Cell<(u64, u64)> = const { Cell::new((u64::MAX, 0)) };
    }
    NEXT.with(|next| {
        let (mut thread, count) = next.get();
        if thread == u64::MAX {
            thread = THREADS.fetch_add(1, Ordering::Relaxed) & ((1 << (64 - COUNT_BITS)) - 1);
        }
        next.set((thread, count.wrapping_add(1) & ((1 << COUNT_BITS) - 1)));
        (thread << COUNT_BITS) | count
    })
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
    /// the command to a worker, or hands the latches to the caller blocked
    /// on it. Whether it was sent or handed over.
    fn try_dispatch(this: &Arc<Self>, cid: CommandId) -> bool {
        let Some(Task { lock, limit, runner }) = Inner::try_acquire(this, cid) else {
            return false;
        };
        match runner {
            Runner::Worker(job) => {
                let inner = this.clone();
                this.spawn(Box::new(move || inner.process(cid, lock, limit, job)));
            }
            Runner::Caller(completer) => completer.complete(Ok(lock)),
        }
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

    /// Runs a submitted command that holds its latches, writes what it
    /// produced and answers.
    fn process(self: &Arc<Self>, cid: CommandId, lock: latches::Lock, limit: Option<WaitLimit>, job: Job<E>) {
        let Some(((mut finish, reply), injected)) = self.run_job(limit, job) else {
            // The job's reply was dropped while unwinding (answered
            // Aborted), and its memory-lock guards with it.
            self.release(cid, &lock);
            return;
        };
        let written = match injected.map(|()| self.group_for(&finish)) {
            Err(e) => Err(e),
            Ok(Some(tx)) => {
                self.send_to_group(tx, cid, lock, finish, reply);
                return;
            }
            Ok(None) => self.write_direct(&mut finish),
        };
        self.complete(cid, &lock, finish, &written);
        reply(written);
    }

    /// Runs `job` for a command that holds its latches: handed the engine,
    /// or the error of its passed wait limit. Returns what it returned with
    /// the error a fail point injected after it (tests), or `None` if it
    /// panicked. Fail points: `SCHED_PROCESS` fails or panics the command
    /// before it runs, `SCHED_BEFORE_WRITE` after it ran; a panic of either
    /// is caught here like the command's own.
    fn run_job<R>(
        &self,
        limit: Option<WaitLimit>,
        job: impl for<'a> FnOnce(JobInput<'a, E>) -> R,
    ) -> Option<(R, Result<()>)> {
        let input = match limit {
            Some(limit) if Instant::now() > limit.until => {
                JobInput::Abort(Error::DeadlineExceeded {
                    waited: limit.sent.elapsed(),
                })
            }
            _ => JobInput::Run {
                engine: &self.engine,
                cm: &self.cm,
            },
        };
        let run = || {
            let input = match crate::fail::check(crate::fail::SCHED_PROCESS) {
                Ok(()) => input,
                Err(e) => JobInput::Abort(e),
            };
            let output = job(input);
            (output, crate::fail::check(crate::fail::SCHED_BEFORE_WRITE))
        };
        catch_unwind(AssertUnwindSafe(run)).ok()
    }

    /// The group-commit writer, when it writes `finish`: a command's own
    /// durability picks the path (the writer syncs, a direct write syncs
    /// only if told to); an empty batch is never written.
    fn group_for(&self, finish: &Finish) -> Option<&Sender<GroupMsg>> {
        if finish.batch.is_empty() {
            return None;
        }
        match finish.durability {
            Some(Durability::Buffered) => None,
            Some(Durability::Sync) | None => self.group_tx.as_ref(),
        }
    }

    /// Writes `finish` on this thread (nothing for an empty batch). The
    /// engine may take the bytes of its lock puts: only its lock deletes
    /// are read again (`complete`).
    fn write_direct(&self, finish: &mut Finish) -> Result<()> {
        if finish.batch.is_empty() {
            return Ok(());
        }
        let options = WriteOptions {
            durability: finish.durability.unwrap_or(self.write_options.durability),
        };
        self.engine
            .write_taking_locks(&mut finish.batch, options)
            .map_err(Error::from)
    }

    /// Hands a processed command to the group-commit writer; if the writer
    /// has stopped, completes it with `Aborted` here.
    fn send_to_group(
        self: &Arc<Self>,
        tx: &Sender<GroupMsg>,
        cid: CommandId,
        lock: latches::Lock,
        finish: Finish,
        reply: Reply,
    ) {
        let written = Written {
            cid,
            lock,
            finish,
            reply,
        };
        if let Err(unsent) = tx.send(GroupMsg::Write(written)) {
            let GroupMsg::Write(Written {
                cid,
                lock,
                finish,
                reply,
            }) = unsent.0
            else {
                unreachable!("sent a write");
            };
            let err = Err(Error::Aborted {
                reason: "the storage shut down before the command was written",
            });
            self.complete(cid, &lock, finish, &err);
            reply(err);
        }
    }

    /// After the write: the version hints and lock waiters learn of it,
    /// then the memory locks go, then the latches (the caller answers
    /// after).
    fn complete(
        self: &Arc<Self>,
        cid: CommandId,
        lock: &latches::Lock,
        finish: Finish,
        result: &Result<()>,
    ) {
        let Finish {
            batch,
            guards,
            committed,
            durability: _,
        } = finish;
        if result.is_ok() {
            self.cm.record_committed(&self.engine, &committed);
            // Locks the batch deleted wake their waiters (see `LockWaits`).
            self.cm.lock_waits().release_deleted_locks(&batch);
        }
        drop(batch);
        drop(guards);
        self.release(cid, lock);
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
        let result = if let [only] = &mut group[..] {
            inner
                .engine
                .write_taking_locks(&mut only.finish.batch, inner.write_options)
        } else {
            let mut batch = WriteBatch::new();
            for written in &mut group {
                batch.extend(std::mem::take(&mut written.finish.batch).into_modifies());
            }
            let result = inner.engine.write_taking_locks(&mut batch, inner.write_options);
            if result.is_ok() {
                // Each command's completion below sees an empty batch: the
                // locks the group deleted wake their waiters here.
                inner.cm.lock_waits().release_deleted_locks(&batch);
            }
            result
        };
        let result = result.map_err(Arc::new);
        for Written {
            cid,
            lock,
            finish,
            reply,
        } in group
        {
            let result = result.clone().map_err(Error::Engine);
            inner.complete(cid, &lock, finish, &result);
            reply(result);
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
