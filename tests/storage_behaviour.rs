//! docs/BEHAVIOUR.md groups I (async commit), K (1PC), N (latches and
//! scheduling) and O (concurrency manager), plus the §3 checks that concern
//! the region's command API, one named test per scenario, each run on the
//! memory engine and on RocksDB.
//!
//! Unlike `txn_behaviour.rs`, which drives the actions one by one with an
//! explicit `max_ts`, every step here goes through [`Storage`]: the
//! scheduler latches the keys, the commands read and raise the region's
//! `max_ts` and publish memory locks through the concurrency manager.
//! `TxnFixture` is only used to look at the records afterwards.
//!
//! Two test doubles make the in-between states observable:
//! * [`Hold`], a write command that blocks inside `process` (holding its
//!   latches) until the test releases it;
//! * [`GatedEngine`], an engine whose next write can be held, so that a real
//!   prewrite is caught after publishing its memory locks and before its
//!   locks reach the engine.
//!
//! Skipped scenarios, and why:
//! * I10 (MaxTimestampNotSynced): this model has no leader changes or
//!   merges, so `max_ts` is always synced.
//! * N5 (hash-slot sharing) is a unit test of `latches.rs`.
//! * O1/O2 as unit-level checks are in `concurrency_manager.rs`; here they
//!   are checked through the commands that must raise `max_ts` or honour
//!   memory locks.

mod common;

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Engine, MemoryEngine, WriteBatch, WriteOptions};
use percolate::mvcc::testing::ts;
use percolate::mvcc::{Error as MvccError, Key, Lock, LockType, MvccTxn, TimeStamp, WriteType};
use percolate::txn::Error;
use percolate::txn::actions::TxnStatus;
use percolate::txn::actions::check_txn_status::CheckTxnStatusOptions;
use percolate::txn::actions::prewrite::{
    Mutation, PessimisticAction, PrewriteResult, TransactionKind,
};
use percolate::txn::commands::{
    AcquirePessimisticLock, BatchRollback, CheckSecondaryLocks, CheckTxnStatus, Cleanup, Commit,
    Gc, Get, Prewrite, ResolveLockLite, SecondaryLocksStatus, TxnHeartBeat, WriteCommand,
    WriteContext, WriteResult,
};
use percolate::txn::concurrency_manager::{KeyGuard, MemoryLockWait};
use percolate::txn::read::{ReadOptions, ScanRequest};
use percolate::txn::scheduler::{Pending, SchedulerConfig};
use percolate::txn::storage::{CommandOptions, Storage, StorageConfig};
use percolate::txn::testing::TxnFixture;

use PessimisticAction::{DoPessimisticCheck, SkipPessimisticCheck};

const MAX: TimeStamp = TimeStamp::max();

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

// ------------------------------------------------------------ test doubles

/// The hold set on a [`GatedEngine`]'s next write.
struct WriteHold {
    arrived: Sender<()>,
    release: Receiver<()>,
}

/// An engine whose next write can be held: it signals its arrival, then
/// waits for the test before it is applied.
#[derive(Clone)]
struct GatedEngine<E> {
    inner: E,
    hold: Arc<Mutex<Option<WriteHold>>>,
}

impl<E: Engine> GatedEngine<E> {
    fn new(inner: E) -> Self {
        GatedEngine {
            inner,
            hold: Arc::default(),
        }
    }

    /// Holds the next write: the first receiver hears when it arrives, the
    /// sender lets it through.
    fn hold_next_write(&self) -> (Receiver<()>, Sender<()>) {
        let (arrived_tx, arrived_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        *self.hold.lock().unwrap() = Some(WriteHold {
            arrived: arrived_tx,
            release: release_rx,
        });
        (arrived_rx, release_tx)
    }
}

impl<E: Engine> Engine for GatedEngine<E> {
    type Snap = E::Snap;

    fn snapshot(&self) -> E::Snap {
        self.inner.snapshot()
    }

    fn latest(&self) -> E::Snap {
        self.inner.latest()
    }

    percolate::engine::forward_engine_bookkeeping!(inner);

    fn write(&self, batch: &WriteBatch, options: WriteOptions) -> percolate::engine::Result<()> {
        let hold = self.hold.lock().unwrap().take();
        if let Some(hold) = hold {
            let _ = hold.arrived.send(());
            // A dropped sender releases too, so a failing test cannot hang.
            let _ = hold.release.recv();
        }
        self.inner.write(batch, options)
    }
}

/// A write command that holds its latches inside `process` until released,
/// writing nothing.
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

    fn process<S: percolate::engine::Snapshot>(
        self,
        _ctx: WriteContext<'_, S>,
    ) -> percolate::txn::Result<WriteResult<()>> {
        let _ = self.entered.send(());
        let _ = self.release.recv();
        Ok(WriteResult::new(MvccTxn::new(TimeStamp::zero()), ()))
    }
}

/// A [`Hold`] that is inside `process`.
struct Held {
    answer: Pending<()>,
    release: Sender<()>,
}

impl Held {
    /// Lets the command finish and checks its answer.
    fn release(self) {
        self.release.send(()).unwrap();
        self.answer.wait().unwrap();
    }
}

/// Submits a [`Hold`] on `keys` and waits until it is inside `process`.
#[track_caller]
fn hold<E: Engine>(storage: &Storage<E>, keys: &[&[u8]]) -> Held {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let answer = storage.sched_write(Hold {
        keys: keys.iter().map(|k| key(k)).collect(),
        entered: entered_tx,
        release: release_rx,
    });
    entered_rx
        .recv_timeout(HANG)
        .expect("the holding command never ran");
    Held {
        answer,
        release: release_tx,
    }
}

/// A write command that appends its id to a log when it runs.
struct Record {
    keys: Vec<Key>,
    id: usize,
    log: Arc<Mutex<Vec<usize>>>,
}

impl WriteCommand for Record {
    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    fn process<S: percolate::engine::Snapshot>(
        self,
        _ctx: WriteContext<'_, S>,
    ) -> percolate::txn::Result<WriteResult<()>> {
        self.log.lock().unwrap().push(self.id);
        Ok(WriteResult::new(MvccTxn::new(TimeStamp::zero()), ()))
    }
}

/// A command in flight whose answer type does not matter to the test.
trait Answer {
    fn ready(&self) -> bool;
    fn answer(self: Box<Self>) -> Result<(), Error>;
}

impl<T> Answer for Pending<T> {
    fn ready(&self) -> bool {
        self.is_ready()
    }

    fn answer(self: Box<Self>) -> Result<(), Error> {
        (*self).wait().map(|_| ())
    }
}

// ----------------------------------------------------------------- fixture

/// A `Storage` over a [`GatedEngine`] with four workers, and a `TxnFixture`
/// over the same engine to inspect the records.
struct StorageFixture<E: Engine> {
    storage: Storage<GatedEngine<E>>,
    txn: TxnFixture<GatedEngine<E>>,
}

impl<E: Engine> StorageFixture<E> {
    fn new(engine: E) -> Self {
        let engine = GatedEngine::new(engine);
        StorageFixture {
            txn: TxnFixture::new(engine.clone()),
            storage: Storage::new(engine, Self::config()),
        }
    }

    fn config() -> StorageConfig {
        StorageConfig {
            scheduler: SchedulerConfig {
                worker_threads: 4,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The same engine under a new storage whose reads wait out a
    /// blocking memory lock for up to `wait`.
    fn with_memory_lock_wait(self, wait: Duration) -> Self {
        let config = StorageConfig {
            memory_lock_wait: wait,
            ..Self::config()
        };
        StorageFixture {
            storage: Storage::new(self.storage.engine().clone(), config),
            txn: self.txn,
        }
    }

    fn gate(&self) -> &GatedEngine<E> {
        self.storage.engine()
    }

    fn max_ts(&self) -> TimeStamp {
        self.storage.concurrency_manager().max_ts()
    }

    /// Raises `max_ts` the way a client does: a read at `to` (of a key no
    /// scenario uses).
    #[track_caller]
    fn read_at(&self, to: u64) {
        assert_eq!(self.storage.get(key(b"unrelated"), ts(to)).unwrap(), None);
        assert!(self.max_ts() >= ts(to));
    }

    #[track_caller]
    fn must_prewrite(&self, cmd: Prewrite) -> PrewriteResult {
        let result = self
            .storage
            .prewrite(cmd)
            .unwrap_or_else(|e| panic!("prewrite failed: {e}"));
        assert!(result.locks.is_empty(), "blocked by {:?}", result.locks);
        result
    }

    /// A 2PC transaction `k=v` from `start_ts` to `commit_ts`.
    #[track_caller]
    fn must_put_committed(&self, k: &[u8], v: &[u8], start_ts: u64, commit_ts: u64) {
        self.must_prewrite(Prewrite::new(vec![put(k, v)], k, ts(start_ts)));
        self.storage
            .commit(vec![key(k)], ts(start_ts), ts(commit_ts))
            .unwrap();
    }

    #[track_caller]
    fn must_get(&self, k: &[u8], read_ts: u64, v: &[u8]) {
        assert_eq!(
            self.storage.get(key(k), ts(read_ts)).unwrap().as_deref(),
            Some(v)
        );
    }

    #[track_caller]
    fn must_get_none(&self, k: &[u8], read_ts: u64) {
        assert_eq!(self.storage.get(key(k), ts(read_ts)).unwrap(), None);
    }

    /// Holds `k` in the memory-lock table with a published lock of the
    /// transaction s=10 (min_commit_ts 11), as a prewrite does before its
    /// write reaches the engine: async-commit, or 1PC with `one_pc`.
    fn hold_memory_lock(&self, k: &[u8], one_pc: bool) -> KeyGuard {
        let mut guards = self.storage.concurrency_manager().lock_keys([key(k)]);
        let mut lock = Lock::new(LockType::Put, k.to_vec(), ts(10), 3000);
        lock.use_async_commit = !one_pc;
        lock.use_one_pc = one_pc;
        lock.min_commit_ts = ts(11);
        guards[0].set_lock(lock);
        guards.remove(0)
    }

    /// Sends `prewrite` and holds it inside its engine write, its memory
    /// locks published and nothing written yet; the sender lets it through.
    fn prewrite_held_in_its_write(
        &self,
        prewrite: Prewrite,
    ) -> (Pending<PrewriteResult>, Sender<()>) {
        let (arrived, release) = self.gate().hold_next_write();
        let pending = self.storage.sched_write(prewrite);
        arrived
            .recv_timeout(HANG)
            .expect("the prewrite never wrote");
        (pending, release)
    }

    /// Asserts that no memory lock is left on any of `keys`.
    #[track_caller]
    fn must_have_no_memory_lock(&self, keys: &[&[u8]]) {
        for k in keys {
            let found = self.storage.concurrency_manager().read_key(
                &key(k),
                MemoryLockWait::Never,
                |lock, _| Err(lock.ts),
            );
            assert_eq!(found, Ok(()), "memory lock of that txn left on {k:?}");
        }
    }
}

/// A forward scan of every key at `read_ts`, without a limit.
fn scan_all(read_ts: u64) -> ScanRequest {
    ScanRequest {
        start_key: key(b""),
        end_key: None,
        limit: 0,
        ts: ts(read_ts),
        key_only: false,
        reverse: false,
    }
}

#[track_caller]
fn must_locked_by(result: Result<impl std::fmt::Debug, Error>, start_ts: u64, k: &[u8]) {
    match result {
        Err(Error::Mvcc(MvccError::KeyIsLocked(info))) => {
            assert_eq!(info.lock_version, ts(start_ts));
            assert_eq!(info.key, k);
        }
        other => panic!("expected KeyIsLocked by {start_ts}, got {other:?}"),
    }
}

// ---------------------------------------------------------------- group I

/// I1: with max_ts at 42, an async-commit prewrite at s=2 of `key`, its own
/// primary, naming key1, key2 and key3 as secondaries (no max_commit_ts) is
/// answered min_commit_ts 43; its lock is async-commit, has min_commit_ts 43
/// and lists the three secondaries. Prewriting each secondary also answers 43
/// and leaves an async-commit lock with an empty list. Sent again after
/// max_ts has reached 100, the primary's request still answers 43, taken from
/// the stored lock, and changes nothing.
fn i1_min_commit_ts_from_max_ts_secondaries_on_primary_only<E: Engine>(f: StorageFixture<E>) {
    f.read_at(42);
    let secondaries = vec![b"key1".to_vec(), b"key2".to_vec(), b"key3".to_vec()];
    let request = |k: &[u8]| {
        Prewrite::new(vec![put(k, b"v")], b"key", ts(2))
            .async_commit(secondaries.clone(), TimeStamp::zero())
    };
    assert_eq!(f.must_prewrite(request(b"key")).min_commit_ts, Some(ts(43)));
    let lock = f.txn.must_locked(b"key", 2);
    assert!(lock.use_async_commit);
    assert_eq!(lock.secondaries, secondaries);
    assert_eq!(lock.min_commit_ts, ts(43));
    for secondary in &secondaries {
        assert_eq!(
            f.must_prewrite(request(secondary)).min_commit_ts,
            Some(ts(43))
        );
        let lock = f.txn.must_locked(secondary, 2);
        assert!(lock.use_async_commit);
        assert!(lock.secondaries.is_empty());
        assert_eq!(lock.min_commit_ts, ts(43));
    }
    // max_ts has moved on since; the duplicate answers from the stored lock
    // and writes nothing.
    f.read_at(100);
    let again = f.txn.assert_unchanged(|| f.must_prewrite(request(b"key")));
    assert_eq!(again.min_commit_ts, Some(ts(43)));
    f.must_have_no_memory_lock(&[b"key", b"key1", b"key2", b"key3"]);
}

/// I2, the inputs without pessimistic locks: an async-commit prewrite answers
/// the largest of max_ts + 1, its start_ts + 1 and the min_commit_ts it asks
/// for. With max_ts at 41: s=44 gets 45, s=10 asking for 46 gets 46, s=10
/// asking for nothing gets 42 (the prewrites themselves leave max_ts at 41),
/// and a two-key request asking for 50 gets 50, on both of its locks.
fn i2_min_commit_ts_formula<E: Engine>(f: StorageFixture<E>) {
    f.read_at(41);
    let async_put = |k: &[u8], s: u64| {
        Prewrite::new(vec![put(k, b"v")], k, ts(s)).async_commit(vec![], TimeStamp::zero())
    };
    // start_ts dominates max_ts.
    assert_eq!(
        f.must_prewrite(async_put(b"a", 44)).min_commit_ts,
        Some(ts(45))
    );
    // The request's min_commit_ts dominates both.
    let min = async_put(b"b", 10).min_commit_ts(ts(46));
    assert_eq!(f.must_prewrite(min).min_commit_ts, Some(ts(46)));
    // max_ts dominates a small start_ts; and a prewrite is not a read.
    assert_eq!(f.max_ts(), ts(41));
    assert_eq!(
        f.must_prewrite(async_put(b"c", 10)).min_commit_ts,
        Some(ts(42))
    );
    // The response is the maximum over the request's keys.
    let both = Prewrite::new(vec![put(b"d", b"v"), put(b"e", b"v")], b"d", ts(12))
        .async_commit(vec![b"e".to_vec()], TimeStamp::zero())
        .min_commit_ts(ts(50));
    assert_eq!(f.must_prewrite(both).min_commit_ts, Some(ts(50)));
    assert_eq!(f.txn.must_locked(b"e", 12).min_commit_ts, ts(50));
}

/// A pessimistic lock request of `k` (primary `primary`) by `start_ts` at
/// `for_update_ts`, with `min_commit_ts`.
fn apl(k: &[u8], primary: &[u8], start_ts: u64, for_update_ts: u64) -> AcquirePessimisticLock {
    AcquirePessimisticLock::new(
        vec![key(k)],
        primary.to_vec(),
        ts(start_ts),
        ts(for_update_ts),
    )
}

/// A pessimistic prewrite of `mutations` (each with its action).
fn pessimistic_prewrite(
    mutations: Vec<(Mutation, PessimisticAction)>,
    primary: &[u8],
    start_ts: u64,
    for_update_ts: u64,
) -> Prewrite {
    let mutations = mutations
        .into_iter()
        .map(|(m, action)| m.with_pessimistic_action(action))
        .collect();
    let mut prewrite = Prewrite::new(mutations, primary, ts(start_ts));
    prewrite.props.kind = TransactionKind::Pessimistic {
        for_update_ts: ts(for_update_ts),
    };
    prewrite
}

/// A pessimistic prewrite of k1 = v1 (the primary) and k2 = v2, with the
/// actions given in that order.
fn k1_k2_pessimistic_prewrite(
    [k1, k2]: [PessimisticAction; 2],
    start_ts: u64,
    for_update_ts: u64,
) -> Prewrite {
    pessimistic_prewrite(
        vec![(put(b"k1", b"v1"), k1), (put(b"k2", b"v2"), k2)],
        b"k1",
        start_ts,
        for_update_ts,
    )
}

/// I2, pessimistic part: an async-commit pessimistic prewrite commits above
/// its for_update_ts too.
fn i2_min_commit_ts_above_for_update_ts<E: Engine>(f: StorageFixture<E>) {
    f.read_at(41);
    f.storage
        .acquire_pessimistic_lock(apl(b"k", b"k", 44, 45))
        .unwrap();
    let prewrite = pessimistic_prewrite(vec![(put(b"k", b"v"), DoPessimisticCheck)], b"k", 44, 45)
        .async_commit(vec![], TimeStamp::zero());
    assert_eq!(f.must_prewrite(prewrite).min_commit_ts, Some(ts(46)));
}

/// I4: a pessimistic lock whose min_commit_ts was pushed to 100 dominates
/// max_ts, the start_ts and the for_update_ts (#8657).
fn i4_pushed_pessimistic_lock_dominates<E: Engine>(f: StorageFixture<E>) {
    f.read_at(42);
    let mut request = apl(b"k", b"k", 2, 4);
    request.options.min_commit_ts = ts(100);
    f.storage.acquire_pessimistic_lock(request).unwrap();
    let prewrite = pessimistic_prewrite(vec![(put(b"k", b"v"), DoPessimisticCheck)], b"k", 2, 4)
        .async_commit(vec![], TimeStamp::zero());
    assert_eq!(f.must_prewrite(prewrite).min_commit_ts, Some(ts(100)));
    assert_eq!(f.txn.must_locked(b"k", 2).min_commit_ts, ts(100));
}

/// I5, pessimistic variant: the fallback to 2PC leaves plain locks in
/// place of the pessimistic ones, and a repeat answers the same.
fn i5_pessimistic_fallback_when_commit_ts_exceeds_max_commit_ts<E: Engine>(f: StorageFixture<E>) {
    f.read_at(50);
    f.storage
        .acquire_pessimistic_lock(apl(b"k1", b"k1", 20, 20))
        .unwrap();
    let request = || {
        k1_k2_pessimistic_prewrite([DoPessimisticCheck, SkipPessimisticCheck], 20, 20)
            .min_commit_ts(ts(21))
            .async_commit(vec![b"k2".to_vec()], ts(40))
    };
    for _ in 0..2 {
        let result = f.must_prewrite(request());
        assert_eq!(result.min_commit_ts, None);
        for k in [&b"k1"[..], b"k2"] {
            let lock = f.txn.must_locked(k, 20);
            assert_eq!(lock.lock_type, LockType::Put);
            assert!(!lock.use_async_commit, "{lock:?}");
        }
    }
}

/// I11: a rollback before the prewrite pushes the async commit ts past it:
/// T2 is rolled back on k2 at 10 by a status check that raised max_ts; T1's
/// async-commit prewrite of k1 and k2 then gets min_commit_ts above 10 on
/// every lock, so T1 can never commit at 10 over T2's rollback.
fn i11_rollback_before_prewrite_pushes_the_commit_ts<E: Engine>(f: StorageFixture<E>) {
    f.storage
        .acquire_pessimistic_lock(apl(b"k1", b"k1", 1, 3))
        .unwrap();
    f.storage
        .acquire_pessimistic_lock(apl(b"k2", b"k2", 10, 15).lock_ttl(0))
        .unwrap();
    let t2 = pessimistic_prewrite(vec![(put(b"k2", b"v2"), DoPessimisticCheck)], b"k2", 10, 15)
        .lock_ttl(0);
    f.must_prewrite(t2);
    let caller = TimeStamp::compose(1, 8);
    let options = CheckTxnStatusOptions {
        caller_start_ts: caller,
        current_ts: caller,
        rollback_if_not_exist: true,
        ..Default::default()
    };
    let status = f
        .storage
        .check_txn_status(key(b"k2"), ts(10), options)
        .unwrap();
    assert_eq!(status, TxnStatus::TtlExpire);
    f.txn.must_get_rollback(b"k2", 10, true);
    let t1 = k1_k2_pessimistic_prewrite([DoPessimisticCheck, SkipPessimisticCheck], 1, 3)
        .async_commit(vec![b"k2".to_vec()], TimeStamp::zero());
    let result = f.must_prewrite(t1);
    assert!(result.min_commit_ts > Some(ts(10)), "{result:?}");
    match f
        .storage
        .check_secondary_locks(vec![key(b"k1"), key(b"k2")], ts(1))
        .unwrap()
    {
        SecondaryLocksStatus::Locked(locks) => {
            assert_eq!(locks.len(), 2);
            assert!(locks.iter().all(|l| l.min_commit_ts > ts(10)), "{locks:?}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }
}

/// I5: with max_ts at 50, an async-commit prewrite of k1 (the primary) and k2
/// at s=20, asking for min_commit_ts 21 but capped at max_commit_ts 40, cannot
/// commit at or below 40 and falls back to 2PC: it succeeds, answers
/// min_commit_ts 0 (and one_pc_commit_ts 0), and leaves two plain locks, not
/// async-commit and without secondaries. The same request again answers 0 and
/// writes nothing; the transaction then commits as 2PC at 55.
fn i5_fallback_when_commit_ts_exceeds_max_commit_ts<E: Engine>(f: StorageFixture<E>) {
    f.read_at(50);
    let request = || {
        Prewrite::new(vec![put(b"k1", b"v1"), put(b"k2", b"v2")], b"k1", ts(20))
            .min_commit_ts(ts(21))
            .async_commit(vec![b"k2".to_vec()], ts(40))
    };
    let result = f.must_prewrite(request());
    assert_eq!(result.min_commit_ts, None);
    assert_eq!(result.one_pc_commit_ts, None);
    for k in [&b"k1"[..], b"k2"] {
        let lock = f.txn.must_locked(k, 20);
        assert!(!lock.use_async_commit, "{lock:?}");
        assert!(lock.secondaries.is_empty(), "{lock:?}");
    }
    let again = f.txn.assert_unchanged(|| f.must_prewrite(request()));
    assert_eq!(again.min_commit_ts, None);
    // A fallen-back transaction publishes no memory lock and commits as 2PC.
    f.must_have_no_memory_lock(&[b"k1", b"k2"]);
    f.storage
        .commit(vec![key(b"k1"), key(b"k2")], ts(20), ts(55))
        .unwrap();
    f.must_get(b"k2", 55, b"v2");
}

/// I7, with the prewrite simulated: an async-commit lock of x at s=10 is put
/// into the concurrency manager only, as a prewrite does before its write
/// reaches the engine. A get of x at 100 fails with KeyIsLocked naming s=10,
/// and so do a batch get and a scan that cover x (§3.3: the whole request
/// fails, with no partial answer) and a get of x at MAX (§3.1). A get of x at
/// 5 and reads of other keys are unaffected; once the guard is dropped, x
/// reads its committed value at 100 again.
fn i7_memory_lock_blocks_reads<E: Engine>(f: StorageFixture<E>) {
    f.must_put_committed(b"x", b"v0", 1, 2);
    f.must_put_committed(b"y", b"y0", 1, 2);
    let guard = f.hold_memory_lock(b"x", false);

    must_locked_by(f.storage.get(key(b"x"), ts(100)), 10, b"x");
    must_locked_by(
        f.storage.batch_get(vec![key(b"y"), key(b"x")], ts(100)),
        10,
        b"x",
    );
    let scan = scan_all(100);
    must_locked_by(f.storage.scan(scan.clone()), 10, b"x");
    // §3.1: an async-commit primary blocks a read at MAX too.
    must_locked_by(f.storage.get(key(b"x"), MAX), 10, b"x");
    // Below the lock's start_ts nothing blocks; other keys read as usual.
    f.must_get(b"x", 5, b"v0");
    f.must_get(b"y", 100, b"y0");

    drop(guard);
    f.must_get(b"x", 100, b"v0");
    assert_eq!(f.storage.scan(scan).unwrap().len(), 2);
}

/// I7, with a real prewrite: an async-commit prewrite of x at s=10 is stopped
/// inside its engine write, when its memory lock is published but the lock CF
/// holds nothing yet. A get of x at 100 already fails with KeyIsLocked naming
/// s=10, from the memory lock alone. Let through, the prewrite answers
/// min_commit_ts 11, its memory lock is gone and the stored lock blocks the
/// same get; after the commit at 11 a get at 100 reads the new value and one
/// at 10 the old.
fn i7_prewrite_in_flight_blocks_reads<E: Engine>(f: StorageFixture<E>) {
    f.must_put_committed(b"x", b"v0", 1, 2);
    let (prewrite, release) = f.prewrite_held_in_its_write(
        Prewrite::new(vec![put(b"x", b"v1")], b"x", ts(10)).async_commit(vec![], ts(0)),
    );
    f.txn.must_unlocked(b"x");
    must_locked_by(f.storage.get(key(b"x"), ts(100)), 10, b"x");
    assert!(!prewrite.is_ready());

    release.send(()).unwrap();
    let min_commit_ts = prewrite.wait().unwrap().min_commit_ts.unwrap_or_default();
    // max_ts was 2 when the prewrite read it; the read at 100 came later
    // and was blocked, so it cannot be missed by a commit at 11.
    assert_eq!(min_commit_ts, ts(11));
    f.must_have_no_memory_lock(&[b"x"]);
    must_locked_by(f.storage.get(key(b"x"), ts(100)), 10, b"x");
    f.storage
        .commit(vec![key(b"x")], ts(10), min_commit_ts)
        .unwrap();
    f.must_get(b"x", 100, b"v1");
    f.must_get(b"x", 10, b"v0");
}

/// I7, waited out: a 1PC prewrite of x at s=10 is stopped inside its engine
/// write, its memory lock published with min_commit_ts 11. A get of x at
/// 100 and a scan over it, with reads waiting out memory locks, neither
/// fail nor answer while it is held. Let through, the prewrite commits at
/// 11, and both read its value: the answer a read arriving just after the
/// prewrite gets, with no lock to resolve in between.
fn i7_read_waits_out_a_one_pc_prewrite_in_flight<E: Engine>(f: StorageFixture<E>) {
    let f = f.with_memory_lock_wait(HANG);
    f.must_put_committed(b"x", b"v0", 1, 2);
    let (prewrite, release) = f.prewrite_held_in_its_write(
        Prewrite::new(vec![put(b"x", b"v1")], b"x", ts(10)).one_pc(ts(0)),
    );
    thread::scope(|scope| {
        let get = scope.spawn(|| f.storage.get(key(b"x"), ts(100)));
        let scan = scope.spawn(|| f.storage.scan(scan_all(100)));
        thread::sleep(GRACE);
        assert!(
            !get.is_finished(),
            "the get answered past a prewrite in flight"
        );
        assert!(
            !scan.is_finished(),
            "the scan answered past a prewrite in flight"
        );
        release.send(()).unwrap();
        assert_eq!(prewrite.wait().unwrap().one_pc_commit_ts, Some(ts(11)));
        assert_eq!(get.join().unwrap().unwrap().as_deref(), Some(&b"v1"[..]));
        let pairs: Vec<_> = scan
            .join()
            .unwrap()
            .unwrap()
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(pairs, vec![(key(b"x"), b"v1".to_vec())]);
    });
    f.must_get(b"x", 10, b"v0");
}

/// I7, waited out for an async-commit prewrite: once its write lands, its
/// memory lock is gone and the stored lock is what the waiting get meets,
/// so it fails with KeyIsLocked naming s=10, as a get sent after the
/// prewrite does.
fn i7_read_waits_out_an_async_commit_prewrite_then_meets_its_lock<E: Engine>(f: StorageFixture<E>) {
    let f = f.with_memory_lock_wait(HANG);
    f.must_put_committed(b"x", b"v0", 1, 2);
    let (prewrite, release) = f.prewrite_held_in_its_write(
        Prewrite::new(vec![put(b"x", b"v1")], b"x", ts(10)).async_commit(vec![], ts(0)),
    );
    thread::scope(|scope| {
        let get = scope.spawn(|| f.storage.get(key(b"x"), ts(100)));
        thread::sleep(GRACE);
        assert!(
            !get.is_finished(),
            "the get answered past a prewrite in flight"
        );
        release.send(()).unwrap();
        assert_eq!(prewrite.wait().unwrap().min_commit_ts, Some(ts(11)));
        must_locked_by(get.join().unwrap(), 10, b"x");
    });
    f.txn.must_locked(b"x", 10);
}

/// I7, with no wait: a storage whose reads do not wait out memory locks
/// answers KeyIsLocked at once (TiKV's answer), and one with a short wait
/// answers it once the wait has run out while the lock is still held.
fn i7_memory_lock_wait_bounds_the_read<E: Engine>(f: StorageFixture<E>) {
    f.must_put_committed(b"x", b"v0", 1, 2);
    let mut f = f;
    for wait in [Duration::ZERO, Duration::from_millis(20)] {
        f = f.with_memory_lock_wait(wait);
        let guard = f.hold_memory_lock(b"x", true);
        let started = Instant::now();
        must_locked_by(f.storage.get(key(b"x"), ts(100)), 10, b"x");
        assert!(
            started.elapsed() >= wait,
            "gave up before its wait: {wait:?}"
        );
        drop(guard);
        f.must_get(b"x", 100, b"v0");
    }
}

/// I7, one wait per read: a batch get of four memory-locked keys whose
/// locks go 40 ms apart, with reads waiting 50 ms at most, fails with
/// KeyIsLocked once its 50 ms have run out, as a scan over the same keys
/// does; it does not wait 50 ms per key.
fn i7_batch_get_waits_once_for_all_its_keys<E: Engine>(f: StorageFixture<E>) {
    let f = f.with_memory_lock_wait(Duration::from_millis(50));
    let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
    let guards: Vec<_> = keys.iter().map(|k| f.hold_memory_lock(k, false)).collect();
    thread::scope(|scope| {
        scope.spawn(move || {
            for guard in guards {
                thread::sleep(Duration::from_millis(40));
                drop(guard);
            }
        });
        let read = f
            .storage
            .batch_get(keys.iter().map(|k| key(k)).collect(), ts(100));
        assert!(
            matches!(read, Err(Error::Mvcc(MvccError::KeyIsLocked(_)))),
            "waited past its 50 ms: {read:?}"
        );
    });
}

/// I7, an unbounded wait: `Duration::MAX` as the memory lock wait means no
/// limit, not an overflow: the read waits for the lock to go and answers.
fn i7_an_unbounded_memory_lock_wait_does_not_overflow<E: Engine>(f: StorageFixture<E>) {
    let f = f.with_memory_lock_wait(Duration::MAX);
    f.must_put_committed(b"x", b"v0", 1, 2);
    let guard = f.hold_memory_lock(b"x", true);
    thread::scope(|scope| {
        scope.spawn(move || {
            thread::sleep(GRACE);
            drop(guard);
        });
        f.must_get(b"x", 100, b"v0");
    });
}

/// I8: max_ts starts at 10. A get of the empty key k at 50 raises it to 50,
/// and an async-commit prewrite of k at s=20 sent afterwards is answered
/// min_commit_ts 51. Committed there, the value is still absent at 50 and
/// present from 51 on: the earlier read's answer stays true.
fn i8_reads_bound_future_commit_ts<E: Engine>(f: StorageFixture<E>) {
    f.read_at(10);
    f.must_get_none(b"k", 50);
    assert_eq!(f.max_ts(), ts(50));
    let result = f.must_prewrite(
        Prewrite::new(vec![put(b"k", b"v")], b"k", ts(20)).async_commit(vec![], ts(0)),
    );
    assert_eq!(result.min_commit_ts, Some(ts(51)));
    f.storage
        .commit(
            vec![key(b"k")],
            ts(20),
            result.min_commit_ts.unwrap_or_default(),
        )
        .unwrap();
    f.must_get_none(b"k", 50);
    f.must_get(b"k", 51, b"v");
}

// ---------------------------------------------------------------- group K

/// 1PC basics (the group's premise, not a numbered scenario): a 1PC prewrite commits the whole transaction at
/// `max(max_ts+1, start_ts+1)`: no lock is left, commit records sit at
/// one_pc_commit_ts and are readable from there on, and no memory lock
/// remains.
fn k_one_pc_commits_without_locks<E: Engine>(f: StorageFixture<E>) {
    f.read_at(20);
    let result = f.must_prewrite(
        Prewrite::new(vec![put(b"k1", b"v1"), put(b"k2", b"v2")], b"k1", ts(10))
            .one_pc(TimeStamp::zero()),
    );
    assert_eq!(result.one_pc_commit_ts, Some(ts(21)));
    for (k, v) in [(&b"k1"[..], &b"v1"[..]), (b"k2", b"v2")] {
        f.txn.must_unlocked(k);
        f.txn.must_written(k, 10, 21, WriteType::Put);
        f.must_get_none(k, 20);
        f.must_get(k, 21, v);
    }
    f.must_have_no_memory_lock(&[b"k1", b"k2"]);
}

/// K3: with max_ts at 50, a 1PC prewrite of k at s=20 capped at max_commit_ts
/// 30 cannot commit and falls back to 2PC: it answers one_pc_commit_ts 0 and
/// min_commit_ts 0, writes no commit record and leaves an ordinary lock at 20
/// (neither 1PC nor async-commit). Repeating it answers the same and changes
/// nothing; the client then commits the lock as 2PC at 60.
fn k3_one_pc_fallback<E: Engine>(f: StorageFixture<E>) {
    f.read_at(50);
    let request = || Prewrite::new(vec![put(b"k", b"v")], b"k", ts(20)).one_pc(ts(30));
    let result = f.must_prewrite(request());
    assert_eq!(result.one_pc_commit_ts, None);
    assert_eq!(result.min_commit_ts, None);
    let lock = f.txn.must_locked(b"k", 20);
    assert!(!lock.use_one_pc && !lock.use_async_commit, "{lock:?}");
    assert!(f.txn.writes(b"k").is_empty());
    let again = f.txn.assert_unchanged(|| f.must_prewrite(request()));
    assert_eq!(again.one_pc_commit_ts, None);
    f.must_have_no_memory_lock(&[b"k"]);
    // The client goes on with 2PC.
    f.storage.commit(vec![key(b"k")], ts(20), ts(60)).unwrap();
    f.must_get(b"k", 60, b"v");
}

/// K5, in its optimistic form: a 1PC
/// prewrite of k1 and k2 at s=5 commits at 6. Sent again once max_ts has
/// moved to 100, the same request is answered one_pc_commit_ts 6, the first
/// commit's, and writes nothing: no lock, still a single record per key.
fn k5_repeated_one_pc_returns_original_commit_ts<E: Engine>(f: StorageFixture<E>) {
    let request = || {
        Prewrite::new(vec![put(b"k1", b"v1"), put(b"k2", b"v2")], b"k1", ts(5))
            .one_pc(TimeStamp::zero())
    };
    assert_eq!(repeated_one_pc_commit_ts(&f, request), ts(6));
    f.txn.must_unlocked(b"k1");
    assert_eq!(f.txn.writes(b"k2").len(), 1);
    f.must_have_no_memory_lock(&[b"k1", b"k2"]);
}

/// K2: a pessimistic 1PC prewrite of k1 (over its pessimistic lock) and k2
/// (never locked) commits both at max(max_ts, for_update_ts) + 1 = 13 and
/// removes the pessimistic lock in the same write.
fn k2_pessimistic_one_pc<E: Engine>(f: StorageFixture<E>) {
    f.storage
        .acquire_pessimistic_lock(apl(b"k1", b"k1", 8, 12))
        .unwrap();
    let request = k1_k2_pessimistic_prewrite([DoPessimisticCheck, SkipPessimisticCheck], 8, 12)
        .one_pc(ts(15));
    assert_eq!(f.must_prewrite(request).one_pc_commit_ts, Some(ts(13)));
    for (k, v) in [(&b"k1"[..], &b"v1"[..]), (b"k2", b"v2")] {
        f.txn.must_unlocked(k);
        f.txn.must_written(k, 8, 13, WriteType::Put);
        f.must_get(k, 13, v);
    }
    f.must_have_no_memory_lock(&[b"k1", b"k2"]);
}

/// K5: a repeated pessimistic 1PC ({k1 Skip, k2 Do} at s=5) answers the
/// first commit's commit_ts once max_ts has moved on, and writes nothing.
fn k5_repeated_pessimistic_one_pc_returns_original_commit_ts<E: Engine>(f: StorageFixture<E>) {
    f.storage
        .acquire_pessimistic_lock(apl(b"k2", b"k1", 5, 5))
        .unwrap();
    let request = || {
        k1_k2_pessimistic_prewrite([SkipPessimisticCheck, DoPessimisticCheck], 5, 5)
            .one_pc(TimeStamp::zero())
    };
    assert_eq!(repeated_one_pc_commit_ts(&f, request), ts(6));
    for k in [&b"k1"[..], b"k2"] {
        f.txn.must_unlocked(k);
        assert_eq!(f.txn.writes(k).len(), 1);
    }
}

/// Sends the 1PC `request`, then again once max_ts has moved to 100: the
/// repeat must write nothing and answer the first commit's commit_ts,
/// which is returned.
#[track_caller]
fn repeated_one_pc_commit_ts<E: Engine>(
    f: &StorageFixture<E>,
    request: impl Fn() -> Prewrite,
) -> TimeStamp {
    let c = f.must_prewrite(request()).one_pc_commit_ts;
    f.read_at(100);
    let again = f.txn.assert_unchanged(|| f.must_prewrite(request()));
    assert_eq!(again.one_pc_commit_ts, c);
    c.unwrap_or_default()
}

/// K6: a cleanup of s=30 on the empty key k writes a protected rollback
/// record at 30 and raises max_ts to 30. A 1PC prewrite from the older s=10
/// then commits another key at 31, but on k itself it is a write conflict. A
/// 1PC prewrite of k at s=35 commits above 30, and the protected rollback at
/// 30 is still there afterwards.
fn k6_one_pc_commits_above_a_cleanup<E: Engine>(f: StorageFixture<E>) {
    assert_eq!(f.storage.cleanup(key(b"k"), ts(30), ts(0)).unwrap(), None);
    assert_eq!(f.max_ts(), ts(30));
    f.txn.must_get_rollback(b"k", 30, true);
    // A 1PC from an older start_ts commits above the rollback's ts ...
    let other = f.must_prewrite(Prewrite::new(vec![put(b"j", b"v")], b"j", ts(10)).one_pc(ts(0)));
    assert_eq!(other.one_pc_commit_ts, Some(ts(31)));
    // ... and on k itself the newer rollback is a conflict, not a record to
    // overwrite.
    let err = f
        .storage
        .prewrite(Prewrite::new(vec![put(b"k", b"v")], b"k", ts(10)).one_pc(ts(0)))
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    let late = f.must_prewrite(Prewrite::new(vec![put(b"k", b"v")], b"k", ts(35)).one_pc(ts(0)));
    assert!(late.one_pc_commit_ts > Some(ts(30)));
    f.txn.must_get_rollback(b"k", 30, true);
    f.must_get_none(b"k", 30);
    f.must_get(
        b"k",
        late.one_pc_commit_ts.unwrap_or_default().into_inner(),
        b"v",
    );
}

// ---------------------------------------------------------------- group N

/// N1: while one command holds k's latch, each write command sent for k
/// (prewrite, commit, cleanup, rollback, CheckTxnStatus, CheckSecondaryLocks,
/// ResolveLockLite, heartbeat, GC) waits without running, whereas a get and
/// an MVCC debug read of k, which take no latch, answer at once. When the
/// holder finishes, the queued commands run in the order they were sent: the
/// prewrite at 10 and its commit at 11 succeed, the cleanup of 12 leaves a
/// protected rollback, and only the heartbeat (no lock of s=17) fails.
fn n1_same_key_serializes<E: Engine>(f: StorageFixture<E>) {
    let a = hold(&f.storage, &[b"k"]);
    let s = &f.storage;
    let k = || key(b"k");
    let options = CheckTxnStatusOptions {
        rollback_if_not_exist: true,
        ..Default::default()
    };
    let waiting: Vec<(&str, Box<dyn Answer>)> = vec![
        (
            "prewrite",
            Box::new(s.sched_write(Prewrite::new(vec![put(b"k", b"v")], b"k", ts(10)))),
        ),
        (
            "commit",
            Box::new(s.sched_write(Commit {
                keys: vec![k()],
                start_ts: ts(10),
                commit_ts: ts(11),
            })),
        ),
        (
            "cleanup",
            Box::new(s.sched_write(Cleanup {
                key: k(),
                start_ts: ts(12),
                current_ts: ts(0),
            })),
        ),
        (
            "batch_rollback",
            Box::new(s.sched_write(BatchRollback {
                keys: vec![k()],
                start_ts: ts(13),
            })),
        ),
        (
            "check_txn_status",
            Box::new(s.sched_write(CheckTxnStatus {
                primary: k(),
                start_ts: ts(14),
                options,
            })),
        ),
        (
            "check_secondary_locks",
            Box::new(s.sched_write(CheckSecondaryLocks {
                keys: vec![k()],
                start_ts: ts(15),
            })),
        ),
        (
            "resolve_lock_lite",
            Box::new(s.sched_write(ResolveLockLite {
                keys: vec![k()],
                start_ts: ts(16),
                commit_ts: ts(0),
            })),
        ),
        (
            "txn_heart_beat",
            Box::new(s.sched_write(TxnHeartBeat {
                primary: k(),
                start_ts: ts(17),
                advise_ttl: 100,
            })),
        ),
        (
            "gc",
            Box::new(s.sched_write(Gc {
                keys: vec![k()],
                safe_point: ts(1),
            })),
        ),
    ];
    // Reads take no latch: they answer while k is held.
    f.must_get_none(b"k", 20);
    assert!(f.storage.mvcc_by_key(k()).unwrap().writes.is_empty());
    std::thread::sleep(GRACE);
    for (name, answer) in &waiting {
        assert!(!answer.ready(), "{name} ran while k was latched");
    }
    f.txn.must_unlocked(b"k");

    a.release();
    let answers: Vec<_> = waiting
        .into_iter()
        .map(|(name, answer)| (name, answer.answer()))
        .collect();
    // They ran in arrival order: the prewrite before the commit, the commit
    // before the rollbacks.
    assert!(answers[0].1.is_ok() && answers[1].1.is_ok(), "{answers:?}");
    f.txn.must_written(b"k", 10, 11, WriteType::Put);
    f.txn.must_get_rollback(b"k", 12, true);
    // The heart beat found no lock of txn 17; everything else succeeded.
    for (name, answer) in &answers {
        assert_eq!(
            answer.is_err(),
            *name == "txn_heart_beat",
            "{name}: {answer:?}"
        );
    }
}

/// N1, order: behind a held latch on k, ten transactions are sent without
/// waiting, each as a prewrite at s=10+2i, a command that logs i, and a commit
/// at 11+2i. Released, all thirty succeed, the log reads 0 to 9 and k has ten
/// commit records in turn, ending in v9: the chain only works if each
/// finishing command hands the latch to the next one that arrived.
fn n1_queued_commands_run_in_arrival_order<E: Engine>(f: StorageFixture<E>) {
    let a = hold(&f.storage, &[b"k"]);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut answers: Vec<Box<dyn Answer>> = Vec::new();
    for i in 0..10u64 {
        let (start_ts, commit_ts) = (10 + 2 * i, 11 + 2 * i);
        let value = format!("v{i}").into_bytes();
        answers.push(Box::new(f.storage.sched_write(Prewrite::new(
            vec![put(b"k", &value)],
            b"k",
            ts(start_ts),
        ))));
        answers.push(Box::new(f.storage.sched_write(Record {
            keys: vec![key(b"k")],
            id: i as usize,
            log: log.clone(),
        })));
        answers.push(Box::new(f.storage.sched_write(Commit {
            keys: vec![key(b"k")],
            start_ts: ts(start_ts),
            commit_ts: ts(commit_ts),
        })));
    }
    std::thread::sleep(GRACE);
    assert!(log.lock().unwrap().is_empty(), "ran past the held latch");
    a.release();
    for answer in answers {
        answer.answer().unwrap();
    }
    assert_eq!(*log.lock().unwrap(), (0..10).collect::<Vec<_>>());
    let writes = f.txn.writes(b"k");
    assert_eq!(writes.len(), 10);
    for (i, (commit_ts, write)) in writes.iter().rev().enumerate() {
        assert_eq!(*commit_ts, ts(11 + 2 * i as u64));
        assert_eq!(write.short_value, Some(format!("v{i}").into_bytes()));
    }
    f.must_get(b"k", 100, b"v9");
}

/// N2: two commands on disjoint key sets, {k1,k2,k3} and {k4,k5,k6}, are both
/// inside `process` at the same time. A third on {k3,k4} does not run while
/// they hold their latches, nor once only the first has finished; it runs
/// after the second finishes too.
fn n2_disjoint_keys_run_in_parallel<E: Engine>(f: StorageFixture<E>) {
    // B gets inside `process` while A is still there.
    let a = hold(&f.storage, &[b"k1", b"k2", b"k3"]);
    let b = hold(&f.storage, &[b"k4", b"k5", b"k6"]);
    let log = Arc::new(Mutex::new(Vec::new()));
    let c = f.storage.sched_write(Record {
        keys: vec![key(b"k3"), key(b"k4")],
        id: 3,
        log: log.clone(),
    });
    std::thread::sleep(GRACE);
    assert!(!c.is_ready(), "C ran while A and B held its keys");
    a.release();
    std::thread::sleep(GRACE);
    assert!(!c.is_ready(), "C ran while B held k4");
    b.release();
    c.wait().unwrap();
    assert_eq!(*log.lock().unwrap(), vec![3]);
}

/// N4: with b's latch held, a rollback of a, b and c at s=30 given a
/// max_execution_duration of 100 ms has no answer after 200 ms. When the
/// latch is freed it answers DeadlineExceeded (having waited at least 100 ms)
/// and has written nothing; sent again, the same rollback succeeds and leaves
/// a rollback record at 30 on each of the three keys.
fn n4_latch_wait_respects_the_deadline<E: Engine>(f: StorageFixture<E>) {
    let options = CommandOptions {
        max_execution_duration: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let rollback = || BatchRollback {
        keys: vec![key(b"a"), key(b"b"), key(b"c")],
        start_ts: ts(30),
    };
    let held = hold(&f.storage, &[b"b"]);
    let waiting = f
        .storage
        .sched_write_with(rollback(), options)
        .wait_timeout(Duration::from_millis(200))
        .expect_err("the rollback ran while b was latched");
    held.release();
    match waiting.wait() {
        Err(Error::DeadlineExceeded { waited }) => {
            assert!(waited >= Duration::from_millis(100), "{waited:?}")
        }
        other => panic!("expected DeadlineExceeded, got {other:?}"),
    }
    for k in [&b"a"[..], b"b", b"c"] {
        assert!(f.txn.writes(k).is_empty(), "the expired rollback wrote");
    }
    f.storage
        .sched_write_with(rollback(), options)
        .wait()
        .unwrap();
    for k in [&b"a"[..], b"b", b"c"] {
        f.txn.must_written(k, 30, 30, WriteType::Rollback);
    }
}

// ---------------------------------------------------------------- group O

/// O1 (through the commands): every command that reads at a timestamp
/// counts it in `max_ts` (get, batch_get, scan, scan_lock, cleanup,
/// check_txn_status with caller_start_ts, check_secondary_locks, and a
/// failing Insert or CheckNotExists prewrite, §3.4); writes, reads at
/// `TimeStamp::max()` and stale reads (§3.18) do not.
fn o1_every_read_raises_max_ts<E: Engine>(f: StorageFixture<E>) {
    let s = &f.storage;
    let k = || key(b"k");
    assert_eq!(f.max_ts(), ts(0));
    s.get(k(), ts(10)).unwrap();
    assert_eq!(f.max_ts(), ts(10));
    s.batch_get(vec![k()], ts(20)).unwrap();
    assert_eq!(f.max_ts(), ts(20));
    let scan = |at| ScanRequest {
        start_key: k(),
        end_key: None,
        limit: 0,
        ts: at,
        key_only: false,
        reverse: false,
    };
    s.scan(scan(ts(30))).unwrap();
    assert_eq!(f.max_ts(), ts(30));
    s.scan_lock(None, None, ts(40), 0).unwrap();
    assert_eq!(f.max_ts(), ts(40));
    s.cleanup(k(), ts(50), ts(0)).unwrap();
    assert_eq!(f.max_ts(), ts(50));
    let options = CheckTxnStatusOptions {
        caller_start_ts: ts(60),
        current_ts: ts(60),
        rollback_if_not_exist: true,
        ..Default::default()
    };
    let status = s.check_txn_status(k(), ts(55), options).unwrap();
    assert_eq!(status, TxnStatus::LockNotExist);
    assert_eq!(f.max_ts(), ts(60));
    let status = s.check_secondary_locks(vec![k()], ts(70)).unwrap();
    assert_eq!(status, SecondaryLocksStatus::RolledBack);
    assert_eq!(f.max_ts(), ts(70));

    // Writes are not reads.
    f.must_put_committed(b"k", b"v", 71, 72);
    assert_eq!(f.max_ts(), ts(70));
    // A failing existence check is a read at its start_ts.
    let insert = Prewrite::new(vec![Mutation::insert(k(), b"w".to_vec())], b"k", ts(80));
    let err = s.prewrite(insert).unwrap_err();
    assert!(
        matches!(err, Error::Mvcc(MvccError::AlreadyExist { .. })),
        "{err:?}"
    );
    assert_eq!(f.max_ts(), ts(80));
    let check = Prewrite::new(vec![Mutation::check_not_exists(k())], b"k", ts(90));
    let err = s.prewrite(check).unwrap_err();
    assert!(
        matches!(err, Error::Mvcc(MvccError::AlreadyExist { .. })),
        "{err:?}"
    );
    assert_eq!(f.max_ts(), ts(90));

    // MAX means "the latest", not a timestamp; stale reads use the
    // caller's ts.
    f.must_get(b"k", u64::MAX, b"v");
    s.batch_get(vec![k()], MAX).unwrap();
    s.scan(scan(MAX)).unwrap();
    s.read(Get {
        key: k(),
        ts: ts(200),
        options: ReadOptions {
            stale_read: true,
            ..Default::default()
        },
    })
    .unwrap();
    assert_eq!(f.max_ts(), ts(90));
}

/// C13, through the storage: k committed at 5 and max_ts at 5. A
/// CheckNotExists prewrite at s=15 fails with AlreadyExist but still raises
/// max_ts to 15, so a 1PC Delete of k from s=8 commits at 16. A
/// CheckNotExists at s=10 then fails with a write conflict, since the Delete
/// at 16 is newer than 10, instead of succeeding, and leaves k unlocked.
fn o2_c13_existence_checks_are_linearizable<E: Engine>(f: StorageFixture<E>) {
    existence_check_is_linearizable(&f, Mutation::check_not_exists);
}

/// The C13 scenario with `check` as the existence check of k.
fn existence_check_is_linearizable<E: Engine>(f: &StorageFixture<E>, check: fn(Key) -> Mutation) {
    f.must_put_committed(b"k", b"v", 4, 5);
    f.read_at(5);
    let prewrite = |s| Prewrite::new(vec![check(key(b"k"))], b"k", ts(s));
    let err = f.storage.prewrite(prewrite(15)).unwrap_err();
    assert!(
        matches!(err, Error::Mvcc(MvccError::AlreadyExist { .. })),
        "{err:?}"
    );
    assert_eq!(f.max_ts(), ts(15));
    // The delete's commit_ts comes from max_ts (1PC).
    let delete = f
        .must_prewrite(Prewrite::new(vec![Mutation::delete(key(b"k"))], b"k", ts(8)).one_pc(ts(0)));
    assert_eq!(delete.one_pc_commit_ts, Some(ts(16)));
    let err = f.storage.prewrite(prewrite(10)).unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    f.txn.must_unlocked(b"k");
}

/// C13 for a delete of an undone insert (`DeleteInserted`), through the
/// storage: its existence check is a read at its start_ts as
/// CheckNotExists's is (the same scenario). Over an absent key, as an
/// async-commit primary, it is locked and answered min_commit_ts
/// start_ts + 1, and a retry of the prewrite answers the same.
fn o2_c13_a_delete_of_an_undone_insert_is_an_existence_check<E: Engine>(f: StorageFixture<E>) {
    existence_check_is_linearizable(&f, Mutation::delete_inserted);
    let primary = |s| {
        Prewrite::new(
            vec![
                Mutation::delete_inserted(key(b"a")),
                Mutation::put(key(b"b"), b"1".to_vec()),
            ],
            b"a",
            ts(s),
        )
        .async_commit(vec![b"b".to_vec()], ts(0))
    };
    assert_eq!(f.must_prewrite(primary(20)).min_commit_ts, Some(ts(21)));
    assert_eq!(f.must_prewrite(primary(20)).min_commit_ts, Some(ts(21)));
    assert_eq!(f.txn.must_locked(b"a", 20).lock_type, LockType::Delete);
}

// ---------------------------------------------------------------- §3

/// §3.1: a read at MAX steps over a plain 2PC primary lock but not over an
/// async-commit one. p and q are committed at 2, then p is prewritten as its
/// own primary at s=5 (2PC) and q at s=6 (async commit). A get of p at MAX
/// reads the committed p0; a get of q at MAX fails with KeyIsLocked naming
/// s=6.
fn s3_1_max_ts_read_skips_only_plain_primary_locks<E: Engine>(f: StorageFixture<E>) {
    f.must_put_committed(b"p", b"p0", 1, 2);
    f.must_put_committed(b"q", b"q0", 1, 2);
    f.must_prewrite(Prewrite::new(vec![put(b"p", b"p1")], b"p", ts(5)));
    f.must_prewrite(Prewrite::new(vec![put(b"q", b"q1")], b"q", ts(6)).async_commit(vec![], ts(0)));
    f.must_get(b"p", u64::MAX, b"p0");
    must_locked_by(f.storage.get(key(b"q"), MAX), 6, b"q");
}

/// G15: CheckTxnStatus raises max_ts to the largest of its lock ts,
/// caller_start_ts and current_ts, ignoring any of them that is MAX. The
/// calls below (on a key without a lock, each answered LockNotExist) make
/// each of the three the largest in turn, then pass a MAX caller_start_ts and
/// a MAX current_ts; max_ts ends at 500, and a 1PC commit from s=440 that
/// follows lands at 501.
fn g15_check_txn_status_pushes_max_ts<E: Engine>(f: StorageFixture<E>) {
    let check = |lock_ts: u64, caller: TimeStamp, current: TimeStamp| {
        let options = CheckTxnStatusOptions {
            caller_start_ts: caller,
            current_ts: current,
            rollback_if_not_exist: true,
            ..Default::default()
        };
        let status = f.storage.check_txn_status(key(b"k"), ts(lock_ts), options);
        assert_eq!(status.unwrap(), TxnStatus::LockNotExist);
    };
    check(10, ts(20), ts(150));
    assert_eq!(f.max_ts(), ts(150), "current_ts the largest");
    check(30, ts(300), ts(250));
    assert_eq!(f.max_ts(), ts(300), "caller_start_ts the largest");
    check(400, ts(0), ts(0));
    assert_eq!(f.max_ts(), ts(400), "lock_ts the largest");
    check(410, MAX, ts(500));
    assert_eq!(f.max_ts(), ts(500), "a MAX caller_start_ts is left out");
    check(420, ts(430), MAX);
    assert_eq!(f.max_ts(), ts(500), "a MAX current_ts is left out");
    // A later 1PC commit lands above every timestamp the checks carried.
    let one_pc = f.must_prewrite(Prewrite::new(vec![put(b"c", b"v")], b"c", ts(440)).one_pc(ts(0)));
    assert_eq!(one_pc.one_pc_commit_ts, Some(ts(501)));
}

/// §3.9: a ScanLock for the locks of transactions started at or before 100
/// reports the lock of s=3 and raises max_ts to 100. An async-commit prewrite
/// and a 1PC prewrite sent afterwards from s=10 both get commit timestamp
/// 101, above everything the scan covered, so a get at 100 does not see the
/// 1PC write.
fn s3_9_scan_lock_bounds_later_async_commits<E: Engine>(f: StorageFixture<E>) {
    f.must_prewrite(Prewrite::new(vec![put(b"a", b"v")], b"a", ts(3)));
    let locks = f.storage.scan_lock(None, None, ts(100), 0).unwrap();
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].lock_version, ts(3));
    assert_eq!(f.max_ts(), ts(100));
    let async_commit = f.must_prewrite(
        Prewrite::new(vec![put(b"b", b"v")], b"b", ts(10)).async_commit(vec![], ts(0)),
    );
    assert_eq!(async_commit.min_commit_ts, Some(ts(101)));
    let one_pc = f.must_prewrite(Prewrite::new(vec![put(b"c", b"v")], b"c", ts(10)).one_pc(ts(0)));
    assert_eq!(one_pc.one_pc_commit_ts, Some(ts(101)));
    f.must_get_none(b"c", 100);
}

on_both_engines!(
    StorageFixture;
    i1_min_commit_ts_from_max_ts_secondaries_on_primary_only,
    i2_min_commit_ts_formula,
    i2_min_commit_ts_above_for_update_ts,
    i4_pushed_pessimistic_lock_dominates,
    i5_pessimistic_fallback_when_commit_ts_exceeds_max_commit_ts,
    i11_rollback_before_prewrite_pushes_the_commit_ts,
    k2_pessimistic_one_pc,
    k5_repeated_pessimistic_one_pc_returns_original_commit_ts,
    i5_fallback_when_commit_ts_exceeds_max_commit_ts,
    i7_memory_lock_blocks_reads,
    i7_prewrite_in_flight_blocks_reads,
    i7_read_waits_out_a_one_pc_prewrite_in_flight,
    i7_read_waits_out_an_async_commit_prewrite_then_meets_its_lock,
    i7_memory_lock_wait_bounds_the_read,
    i7_batch_get_waits_once_for_all_its_keys,
    i7_an_unbounded_memory_lock_wait_does_not_overflow,
    i8_reads_bound_future_commit_ts,
    k_one_pc_commits_without_locks,
    k3_one_pc_fallback,
    k5_repeated_one_pc_returns_original_commit_ts,
    k6_one_pc_commits_above_a_cleanup,
    n1_same_key_serializes,
    n1_queued_commands_run_in_arrival_order,
    n2_disjoint_keys_run_in_parallel,
    n4_latch_wait_respects_the_deadline,
    o1_every_read_raises_max_ts,
    g15_check_txn_status_pushes_max_ts,
    o2_c13_existence_checks_are_linearizable,
    o2_c13_a_delete_of_an_undone_insert_is_an_existence_check,
    s3_1_max_ts_read_skips_only_plain_primary_locks,
    s3_9_scan_lock_bounds_later_async_commits,
);
