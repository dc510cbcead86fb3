//! Many threads through one `Storage`, on the memory engine and on RocksDB:
//! what the scheduler promises under concurrency.
//!
//! * same-key commands serialize (read-modify-write increments lose no
//!   update), disjoint-key commands overlap;
//! * a reader racing async-commit and 1PC prewrites (get, batch get,
//!   scan) never misses a version whose commit_ts is at or below its read
//!   ts;
//! * every way a command can end badly (an action error, a command's own
//!   error, a panic, a failed engine write) releases its latches and its
//!   memory locks;
//! * a full scheduler refuses at once (`SchedTooBusy`) and recovers;
//! * group commit (synced writes) loses nothing, across a reopen.
//!
//! Timestamps come from a shared counter standing in for the oracle. Each
//! test bounds its threads and iterations to stay well under a few seconds
//! in debug builds, and every wait that could hang has a timeout.

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Durability, Engine, MemoryEngine, Snapshot};
use percolate::mvcc::testing::ts;
use percolate::mvcc::{Error as MvccError, Key, Lock, LockType, MvccTxn, TimeStamp, WriteType};
use percolate::txn::Error;
use percolate::txn::actions::prewrite::{Mutation, PrewriteResult};
use percolate::txn::commands::{Commit, Get, Prewrite, WriteCommand, WriteContext, WriteResult};
use percolate::txn::concurrency_manager::MemoryLockWait;
use percolate::txn::read::{ReadOptions, ScanRequest};
use percolate::txn::scheduler::{Pending, SchedulerConfig};
use percolate::txn::storage::{Storage, StorageConfig};
use percolate::txn::testing::{FaultyEngine, TxnFixture};

/// How long a test waits for something that must happen before calling it
/// a hang.
const HANG: Duration = Duration::from_secs(10);

/// How long a blocked command is given to (wrongly) run before the test
/// asserts that it has not.
const GRACE: Duration = Duration::from_millis(50);

fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

fn put(k: &[u8], v: &[u8]) -> Mutation {
    Mutation::put(key(k), v.to_vec())
}

/// A stand-in for the timestamp oracle: strictly increasing timestamps.
struct Oracle(AtomicU64);

impl Oracle {
    fn new() -> Self {
        Oracle(AtomicU64::new(1))
    }

    fn next(&self) -> TimeStamp {
        TimeStamp::new(self.0.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

fn is_locked(e: &Error) -> bool {
    matches!(e, Error::Mvcc(MvccError::KeyIsLocked(_)))
}

/// Whether a prewrite lost to another transaction (conflict or lock) and
/// should be retried from a new start_ts; panics on any other error.
#[track_caller]
fn prewrite_won(result: Result<PrewriteResult, Error>) -> Option<PrewriteResult> {
    match result {
        Ok(r) if r.locks.is_empty() => Some(r),
        Ok(_) => None,
        Err(e) if e.is_conflict() || is_locked(&e) => None,
        Err(e) => panic!("prewrite failed: {e:?}"),
    }
}

fn config(workers: usize) -> SchedulerConfig {
    SchedulerConfig {
        worker_threads: workers,
        ..Default::default()
    }
}

/// The engine under test; each test builds the storage it needs over it.
struct EngineFixture<E: Engine> {
    engine: E,
}

impl<E: Engine> EngineFixture<E> {
    fn new(engine: E) -> Self {
        EngineFixture { engine }
    }

    fn storage(&self, scheduler: SchedulerConfig) -> Storage<E> {
        Storage::new(
            self.engine.clone(),
            StorageConfig {
                scheduler,
                ..Default::default()
            },
        )
    }

    fn txn(&self) -> TxnFixture<E> {
        TxnFixture::new(self.engine.clone())
    }
}

#[track_caller]
fn must_have_no_memory_lock<E: Engine>(storage: &Storage<E>, k: &[u8]) {
    let found =
        storage
            .concurrency_manager()
            .read_key(&key(k), MemoryLockWait::Never, |lock, _| Err(lock.ts));
    assert_eq!(found, Ok(()), "memory lock of that txn left on {k:?}");
}

/// Waits for an answer that must come, without hanging the test run.
#[track_caller]
fn answer<T>(pending: Pending<T>) -> Result<T, Error> {
    match pending.wait_timeout(HANG) {
        Ok(result) => result,
        Err(_) => panic!("the command never answered (latch or worker leaked?)"),
    }
}

// ------------------------------------------------------------ test doubles

/// A write command that holds its latches inside `process` until released.
struct Hold {
    keys: Vec<Key>,
    entered: Sender<()>,
    release: Receiver<()>,
}

impl WriteCommand for Hold {
    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(
        self,
        _ctx: WriteContext<'_, S>,
    ) -> percolate::txn::Result<WriteResult<()>> {
        let _ = self.entered.send(());
        let _ = self.release.recv();
        Ok(WriteResult::new(MvccTxn::new(TimeStamp::zero()), ()))
    }
}

/// A submitted [`Hold`]: hears when it is inside `process`, releases it.
struct Held {
    answer: Pending<()>,
    entered: Receiver<()>,
    release: Sender<()>,
}

fn submit_hold<E: Engine>(storage: &Storage<E>, keys: &[&[u8]]) -> Held {
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let answer = storage.sched_write(Hold {
        keys: keys.iter().map(|k| key(k)).collect(),
        entered: entered_tx,
        release: release_rx,
    });
    Held {
        answer,
        entered,
        release,
    }
}

impl Held {
    /// Whether the command gets inside `process` within `timeout`.
    fn enters_within(&self, timeout: Duration) -> bool {
        self.entered.recv_timeout(timeout).is_ok()
    }

    fn release(self) {
        self.release.send(()).unwrap();
        answer(self.answer).unwrap();
    }
}

/// Submits a [`Hold`] and waits until it is inside `process`.
#[track_caller]
fn hold<E: Engine>(storage: &Storage<E>, keys: &[&[u8]]) -> Held {
    let held = submit_hold(storage, keys);
    assert!(held.enters_within(HANG), "the holding command never ran");
    held
}

/// A write command that counts how many commands are inside `process` at
/// once, staying there a moment to give an overlap the chance to happen.
struct Exclusive {
    keys: Vec<Key>,
    inside: Arc<AtomicUsize>,
    most_inside: Arc<AtomicUsize>,
}

impl WriteCommand for Exclusive {
    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: Snapshot>(
        self,
        _ctx: WriteContext<'_, S>,
    ) -> percolate::txn::Result<WriteResult<()>> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_inside.fetch_max(now, Ordering::SeqCst);
        thread::sleep(Duration::from_micros(200));
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(WriteResult::new(MvccTxn::new(TimeStamp::zero()), ()))
    }
}

/// How [`FailAfterLocking`] ends.
#[derive(Clone, Copy, Debug)]
enum Failure {
    Error,
    Panic,
}

/// A write command that publishes a memory lock on its key, as an
/// async-commit prewrite does, and then fails.
struct FailAfterLocking {
    key: Key,
    failure: Failure,
}

impl WriteCommand for FailAfterLocking {
    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        vec![self.key.clone()]
    }

    fn process<S: Snapshot>(
        self,
        ctx: WriteContext<'_, S>,
    ) -> percolate::txn::Result<WriteResult<()>> {
        let guards = ctx.concurrency_manager().lock_keys([self.key.clone()]);
        let mut lock = Lock::new(LockType::Put, b"primary".to_vec(), ts(40), 3000);
        lock.use_async_commit = true;
        lock.min_commit_ts = ts(41);
        guards[0].set_lock(lock);
        match self.failure {
            Failure::Error => Err(Error::InvalidRequest {
                reason: "injected by the test",
                key: Some(self.key),
            }),
            Failure::Panic => panic!("injected by the test (expected in this test's output)"),
        }
    }
}

// ------------------------------------------------------------------ tests

/// Same-key commands serialize: 8 threads increment one counter with
/// read-modify-write transactions (get at start_ts, prewrite, commit),
/// retrying on a lock or a write conflict. No increment is lost: the final
/// value is the number of commits, and the history holds every value from
/// 1 up, in commit order.
fn same_key_increments_lose_no_update<E: Engine>(f: EngineFixture<E>) {
    const THREADS: usize = 8;
    const INCREMENTS: usize = 8;
    let storage = f.storage(config(4));
    let oracle = Oracle::new();
    let k = b"counter";
    let read = |at| -> Result<u64, Error> {
        let value = storage.get(key(k), at)?;
        Ok(value.map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap()))
    };
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let (mut done, mut attempts) = (0, 0);
                while done < INCREMENTS {
                    attempts += 1;
                    assert!(attempts < 100_000, "no progress");
                    let start_ts = oracle.next();
                    let current = match read(start_ts) {
                        Ok(v) => v,
                        Err(e) if is_locked(&e) => {
                            thread::yield_now();
                            continue;
                        }
                        Err(e) => panic!("get failed: {e:?}"),
                    };
                    let next = (current + 1).to_string().into_bytes();
                    let prewrite = Prewrite::new(vec![put(k, &next)], &k[..], start_ts);
                    if prewrite_won(storage.prewrite(prewrite)).is_none() {
                        thread::yield_now();
                        continue;
                    }
                    storage
                        .commit(vec![key(k)], start_ts, oracle.next())
                        .unwrap();
                    done += 1;
                }
            });
        }
    });
    let total = (THREADS * INCREMENTS) as u64;
    assert_eq!(read(oracle.next()).unwrap(), total);
    let history = f.txn().writes(k);
    assert_eq!(history.len() as u64, total);
    for (i, (_, write)) in history.iter().rev().enumerate() {
        assert_eq!(write.write_type, WriteType::Put);
        assert_eq!(write.short_value, Some((i + 1).to_string().into_bytes()));
    }
    assert_eq!(storage.scheduler().in_flight(), 0);
}

/// Disjoint-key commands overlap and same-key commands never do: two
/// commands on different keys are inside `process` at the same time; one on
/// the same key does not get in until the first is done; and 8 threads
/// hammering one key (alone or with a key of their own) never have two
/// commands inside at once.
fn disjoint_keys_overlap_same_key_never_does<E: Engine>(f: EngineFixture<E>) {
    let storage = f.storage(config(4));
    let x = hold(&storage, &[b"x"]);
    // Both inside at once.
    let y = hold(&storage, &[b"y"]);
    let x_again = submit_hold(&storage, &[b"z", b"x"]);
    assert!(
        !x_again.enters_within(GRACE),
        "two commands on x inside process at once"
    );
    x.release();
    assert!(x_again.enters_within(HANG));
    y.release();
    x_again.release();

    let inside = Arc::new(AtomicUsize::new(0));
    let most_inside = Arc::new(AtomicUsize::new(0));
    thread::scope(|s| {
        for t in 0..8 {
            let (storage, inside, most_inside) = (&storage, &inside, &most_inside);
            s.spawn(move || {
                for i in 0..15 {
                    let mut keys = vec![key(b"shared")];
                    if i % 2 == 0 {
                        keys.push(key(format!("own{t}").as_bytes()));
                    }
                    let cmd = Exclusive {
                        keys,
                        inside: inside.clone(),
                        most_inside: most_inside.clone(),
                    };
                    answer(storage.sched_write(cmd)).unwrap();
                }
            });
        }
    });
    assert_eq!(most_inside.load(Ordering::SeqCst), 1);
}

/// A reader racing async-commit and 1PC prewrites never misses a version
/// whose commit_ts is at or below its read ts. Writers alternate: async
/// commit (prewrite, then commit at the returned min_commit_ts) and 1PC;
/// readers read at fresh timestamps by get, batch get and scan (each
/// waiting out a prewrite in flight, `StorageConfig::memory_lock_wait`),
/// and skip a read that still meets a lock. Afterwards, every read must
/// have seen exactly the newest version with commit_ts ≤ its read ts in the
/// final history: a version it did not see must have committed above its
/// ts, and it saw nothing that was not committed at or below it.
fn readers_never_miss_async_or_one_pc_commits<E: Engine>(f: EngineFixture<E>) {
    const WRITERS: usize = 3;
    const COMMITS: usize = 30;
    const READERS: usize = 3;
    let keys: [&[u8]; 2] = [b"k0", b"k1"];
    let storage = f.storage(config(4));
    let oracle = Oracle::new();
    let writers_done = AtomicUsize::new(0);
    let observations = Mutex::new(Vec::new());
    let blocked_reads = AtomicUsize::new(0);
    thread::scope(|s| {
        for w in 0..WRITERS {
            let (storage, oracle, writers_done) = (&storage, &oracle, &writers_done);
            s.spawn(move || {
                let mut attempts = 0;
                for i in 0..COMMITS {
                    let k = keys[(w + i) % keys.len()];
                    let value = format!("w{w}-{i}").into_bytes();
                    loop {
                        attempts += 1;
                        assert!(attempts < 100_000, "no progress");
                        let start_ts = oracle.next();
                        let prewrite = Prewrite::new(vec![put(k, &value)], k, start_ts);
                        if (w + i) % 2 == 0 {
                            let prewrite = prewrite.one_pc(TimeStamp::zero());
                            if let Some(won) = prewrite_won(storage.prewrite(prewrite)) {
                                assert!(won.one_pc_commit_ts.is_some_and(|c| c > start_ts));
                                break;
                            }
                        } else {
                            let prewrite = prewrite.async_commit(vec![], TimeStamp::zero());
                            if let Some(won) = prewrite_won(storage.prewrite(prewrite)) {
                                let min_commit_ts = won.min_commit_ts.unwrap_or_default();
                                assert!(min_commit_ts > start_ts);
                                storage
                                    .commit(vec![key(k)], start_ts, min_commit_ts)
                                    .unwrap();
                                break;
                            }
                        }
                        thread::yield_now();
                    }
                }
                writers_done.fetch_add(1, Ordering::SeqCst);
            });
        }
        for r in 0..READERS {
            let (storage, oracle, writers_done) = (&storage, &oracle, &writers_done);
            let (observations, blocked_reads) = (&observations, &blocked_reads);
            s.spawn(move || {
                let mut seen = Vec::new();
                let mut i = r;
                // Until the writers are done, and 20 reads after that,
                // which must see their commits: writers that run on their
                // own threads (the synchronous Storage API) can finish
                // before a reader gets past their locks. At most 5,000
                // reads kept while they write.
                let mut after_done = 0;
                loop {
                    let done = writers_done.load(Ordering::SeqCst) == WRITERS;
                    if done && after_done >= 20 {
                        break;
                    }
                    i += 1;
                    let read_ts = oracle.next();
                    match read_every_way(storage, &keys, i, read_ts) {
                        Ok(values) if done => {
                            after_done += 1;
                            seen.extend(values);
                        }
                        Ok(values) if seen.len() < 5_000 => seen.extend(values),
                        Ok(_) => {}
                        Err(e) if is_locked(&e) => {
                            blocked_reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("read failed: {e:?}"),
                    }
                }
                observations.lock().unwrap().extend(seen);
            });
        }
    });

    let txn = f.txn();
    let histories: Vec<_> = keys.iter().map(|k| txn.writes(k)).collect();
    assert_eq!(
        histories.iter().map(Vec::len).sum::<usize>(),
        WRITERS * COMMITS
    );
    let observations = observations.into_inner().unwrap();
    assert!(!observations.is_empty());
    let mut saw_values = 0;
    for (k, read_ts, value) in &observations {
        let history = &histories[keys.iter().position(|x| x == k).unwrap()];
        let expected = history
            .iter()
            .find(|(commit_ts, _)| commit_ts <= read_ts)
            .and_then(|(_, write)| write.short_value.clone());
        assert_eq!(
            value.as_deref(),
            expected.as_deref(),
            "a read of {k:?} at {read_ts} disagrees with the final history"
        );
        saw_values += usize::from(value.is_some());
    }
    assert!(
        saw_values > 0,
        "no read saw any commit ({} reads were blocked by locks)",
        blocked_reads.load(Ordering::Relaxed)
    );
}

/// A read's answer for one key: the key, the read ts, the value seen.
type Observation<'k> = (&'k [u8], TimeStamp, Option<Vec<u8>>);

/// The `n`-th read of [`readers_never_miss_async_or_one_pc_commits`] at
/// `read_ts`, by get, batch get or scan in turn: what it saw of each key it
/// read (`None`: absent). A lock met anywhere is an error (`KeyIsLocked`).
fn read_every_way<'k, E: Engine>(
    storage: &Storage<E>,
    keys: &[&'k [u8]],
    n: usize,
    read_ts: TimeStamp,
) -> Result<Vec<Observation<'k>>, Error> {
    let value_of = |pairs: &[(Key, Vec<u8>)], k: &[u8]| {
        pairs
            .iter()
            .find(|(found, _)| *found == key(k))
            .map(|(_, v)| v.clone())
    };
    let pairs = match n % 3 {
        0 => {
            let k = keys[n / 3 % keys.len()];
            return Ok(vec![(k, read_ts, storage.get(key(k), read_ts)?)]);
        }
        1 => storage.batch_get(keys.iter().map(|k| key(k)).collect(), read_ts)?,
        _ => storage.scan(ScanRequest {
            start_key: key(b""),
            end_key: None,
            limit: 0,
            ts: read_ts,
            key_only: false,
            reverse: false,
        })?,
    };
    let pairs = pairs.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(keys
        .iter()
        .map(|k| (*k, read_ts, value_of(&pairs, k)))
        .collect())
}

/// Every failure path releases latches and memory locks: an action error
/// (commit_ts ≤ start_ts), an async-commit prewrite that fails after
/// taking its memory locks, a command returning an error after publishing
/// a memory lock, and one panicking there (answered `Aborted`). After each,
/// a command on the same key runs, and reads are not blocked. One worker,
/// so a worker lost to the panic would show as a hang.
fn errors_and_panics_release_latches_and_memory_locks<E: Engine>(f: EngineFixture<E>) {
    let storage = f.storage(config(1));
    let txn = f.txn();

    // An action error.
    storage
        .prewrite(Prewrite::new(vec![put(b"a", b"v")], b"a", ts(10)))
        .unwrap();
    let err = storage.commit(vec![key(b"a")], ts(10), ts(10)).unwrap_err();
    assert!(matches!(err, Error::InvalidTxnTso { .. }), "{err:?}");
    answer(storage.sched_write(Commit {
        keys: vec![key(b"a")],
        start_ts: ts(10),
        commit_ts: ts(11),
    }))
    .unwrap();

    // An async-commit prewrite that conflicts after locking its keys in
    // memory.
    storage
        .prewrite(Prewrite::new(vec![put(b"b", b"v")], b"b", ts(20)))
        .unwrap();
    storage.commit(vec![key(b"b")], ts(20), ts(21)).unwrap();
    let late = Prewrite::new(vec![put(b"b", b"late")], b"b", ts(15))
        .async_commit(vec![], TimeStamp::zero());
    assert!(storage.prewrite(late).unwrap_err().is_conflict());
    must_have_no_memory_lock(&storage, b"b");
    assert_eq!(
        storage.get(key(b"b"), ts(100)).unwrap().as_deref(),
        Some(&b"v"[..])
    );

    // A command's own error, and a panic, after publishing a memory lock.
    for (k, failure) in [(&b"c"[..], Failure::Error), (b"d", Failure::Panic)] {
        let failed = answer(storage.sched_write(FailAfterLocking {
            key: key(k),
            failure,
        }));
        match (failure, failed) {
            (Failure::Error, Err(Error::InvalidRequest { .. }))
            | (Failure::Panic, Err(Error::Aborted { .. })) => {}
            (_, other) => panic!("{failure:?} answered {other:?}"),
        }
        must_have_no_memory_lock(&storage, k);
        assert_eq!(storage.get(key(k), ts(100)).unwrap(), None);
        let prewrite = storage.sched_write(Prewrite::new(vec![put(k, b"v")], k, ts(50)));
        answer(prewrite).unwrap();
        storage.commit(vec![key(k)], ts(50), ts(51)).unwrap();
        txn.must_written(k, 50, 51, WriteType::Put);
    }
    assert_eq!(storage.scheduler().in_flight(), 0);
}

/// A failed engine write (direct, and through group commit) answers
/// `Engine`, writes nothing, and releases the latches and the memory
/// locks of the async-commit prewrite that wrote it; the retry succeeds.
fn write_failure_releases_latches_and_memory_locks<E: Engine>(f: EngineFixture<E>) {
    for (i, durability) in [Durability::Buffered, Durability::Sync]
        .into_iter()
        .enumerate()
    {
        let engine = FaultyEngine::new(f.engine.clone());
        let storage = Storage::new(
            engine.clone(),
            StorageConfig {
                scheduler: SchedulerConfig {
                    durability,
                    ..config(2)
                },
                ..Default::default()
            },
        );
        let k = format!("k{i}").into_bytes();
        let prewrite =
            || Prewrite::new(vec![put(&k, b"v")], &k[..], ts(10)).async_commit(vec![], ts(0));
        engine.fail_next_writes(1);
        let err = storage.prewrite(prewrite()).unwrap_err();
        assert!(matches!(err, Error::Engine(_)), "{err:?}");
        must_have_no_memory_lock(&storage, &k);
        f.txn().must_unlocked(&k);
        let min_commit_ts = answer(storage.sched_write(prewrite()))
            .unwrap()
            .min_commit_ts
            .unwrap_or_default();
        storage
            .commit(vec![key(&k)], ts(10), min_commit_ts)
            .unwrap();
        assert_eq!(
            storage.get(key(&k), ts(100)).unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }
}

/// A full scheduler refuses new commands at once with `SchedTooBusy`
/// (writes and reads sent to it alike), and works again once the commands
/// in flight are done.
fn sched_too_busy_refuses_at_once_and_recovers<E: Engine>(f: EngineFixture<E>) {
    let storage = f.storage(SchedulerConfig {
        max_pending: 2,
        ..config(2)
    });
    let held = hold(&storage, &[b"k"]);
    let queued = storage.sched_write(Prewrite::new(vec![put(b"k", b"v")], b"k", ts(10)));
    let refused = storage.sched_write(Prewrite::new(vec![put(b"j", b"v")], b"j", ts(10)));
    assert!(refused.is_ready(), "a refusal must not wait");
    match refused.wait() {
        Err(Error::SchedTooBusy { pending, limit }) => assert_eq!((pending, limit), (2, 2)),
        other => panic!("expected SchedTooBusy, got {other:?}"),
    }
    let read = storage.sched_read(Get {
        key: key(b"j"),
        ts: ts(20),
        options: ReadOptions::default(),
    });
    assert!(matches!(read.wait(), Err(Error::SchedTooBusy { .. })));
    assert!(!queued.is_ready());
    f.txn().must_unlocked(b"j");

    held.release();
    answer(queued).unwrap();
    assert_eq!(storage.scheduler().in_flight(), 0);
    storage
        .prewrite(Prewrite::new(vec![put(b"j", b"v")], b"j", ts(10)))
        .unwrap();
    storage
        .commit(vec![key(b"k"), key(b"j")], ts(10), ts(11))
        .unwrap();
    let read = storage.sched_read(Get {
        key: key(b"j"),
        ts: ts(20),
        options: ReadOptions::default(),
    });
    assert_eq!(answer(read).unwrap().as_deref(), Some(&b"v"[..]));
}

/// Runs 8 threads × 10 two-key transactions (prewrite + commit) through
/// `storage`; returns every key and value written.
fn commit_from_many_threads<E: Engine>(storage: &Storage<E>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let oracle = Oracle::new();
    let written = Mutex::new(Vec::new());
    thread::scope(|s| {
        for t in 0..8 {
            let (oracle, written) = (&oracle, &written);
            s.spawn(move || {
                for i in 0..10 {
                    let primary = format!("t{t}-{i}-p").into_bytes();
                    let secondary = format!("t{t}-{i}-s").into_bytes();
                    let value = format!("v{t}-{i}").into_bytes();
                    let start_ts = oracle.next();
                    let prewrite = Prewrite::new(
                        vec![put(&primary, &value), put(&secondary, &value)],
                        &primary[..],
                        start_ts,
                    );
                    let result = storage.prewrite(prewrite).unwrap();
                    assert!(result.locks.is_empty());
                    storage
                        .commit(
                            vec![key(&primary), key(&secondary)],
                            start_ts,
                            oracle.next(),
                        )
                        .unwrap();
                    let mut written = written.lock().unwrap();
                    written.push((primary, value.clone()));
                    written.push((secondary, value));
                }
            });
        }
    });
    written.into_inner().unwrap()
}

#[track_caller]
fn must_read_all<E: Engine>(storage: &Storage<E>, written: &[(Vec<u8>, Vec<u8>)]) {
    for (k, v) in written {
        let read = storage.get(key(k), TimeStamp::new(1 << 40)).unwrap();
        assert_eq!(read.as_deref(), Some(&v[..]), "{k:?}");
    }
    assert!(
        storage
            .scan_lock(None, None, ts(1 << 40), 0)
            .unwrap()
            .is_empty(),
        "locks left"
    );
}

/// Group commit: with synced writes, 8 threads committing at once all
/// succeed and every value is there.
fn group_commit_from_many_threads<E: Engine>(f: EngineFixture<E>) {
    let storage = f.storage(SchedulerConfig {
        durability: Durability::Sync,
        ..config(4)
    });
    let written = commit_from_many_threads(&storage);
    assert_eq!(written.len(), 160);
    must_read_all(&storage, &written);
}

on_both_engines!(
    EngineFixture;
    same_key_increments_lose_no_update,
    disjoint_keys_overlap_same_key_never_does,
    readers_never_miss_async_or_one_pc_commits,
    errors_and_panics_release_latches_and_memory_locks,
    write_failure_releases_latches_and_memory_locks,
    sched_too_busy_refuses_at_once_and_recovers,
    group_commit_from_many_threads,
);

/// Group commit on RocksDB: what 8 threads committed with synced writes is
/// all there after the directory is closed and reopened.
#[test]
fn group_commit_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        scheduler: SchedulerConfig {
            durability: Durability::Sync,
            ..config(4)
        },
        ..Default::default()
    };
    let written = {
        let storage = Storage::open_with(dir.path(), config).unwrap();
        commit_from_many_threads(&storage)
    };
    let reopened = Storage::open(dir.path()).unwrap();
    must_read_all(&reopened, &written);
}
