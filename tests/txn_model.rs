//! A randomized model test of the transaction actions, on both engines.
//!
//! Each seed runs a random interleaving of 2PC transactions on 2-4 keys:
//! clients begin transactions (Put, Delete or lock-only mutations of 1-3
//! keys, short or long values, some with a pushable min_commit_ts, TTLs of
//! 0-200 ms) and prewrite (in any order), take a commit_ts, commit (slowly)
//! or roll back their keys one action at a time; resolvers meet their locks
//! and run CheckTxnStatus (pushing, or rolling back what expired) then
//! ResolveLock; others send KvCleanup, heart beats, or GC below every live
//! transaction. Timestamps come from one increasing clock that moves on by
//! 0, 5 or 10 ms a step, so TTLs run out, often exactly at a step.
//!
//! After every step the engine is checked against a reference model that
//! knows each transaction's fate (decided by its primary):
//! * no committed write is lost: a read at any ts from the GC safe point on
//!   sees the value of the last transaction committed at or below it (or is
//!   blocked by a lock that started at or below it), and never a value that
//!   was rolled back or not yet committed;
//! * every lock belongs to a transaction that prewrote that key, and only a
//!   secondary may stay locked once its transaction is decided (the primary
//!   then holds the decision);
//! * a protected rollback on a primary stays (until GC), and status checks
//!   keep answering RolledBack; a lock is rolled back for expiry exactly
//!   when `physical(start_ts) + ttl < physical(now)`;
//! * commit records agree with the fates: a committed transaction has its
//!   record at its commit_ts on the primary and on every key no longer
//!   locked; others have none;
//! * what a read at a ts up to now returned never changes (snapshots are
//!   stable: a commit at or below a ts some reader already read past must
//!   fail, e.g. below a pushed min_commit_ts);
//! * a status check's push is stored; no long value outlives both the lock
//!   and the record of its transaction;
//! * committed transactions writing a common key never overlap;
//! * a commit after a rollback fails, and a rollback (or cleanup) after a
//!   commit fails with `Committed`.
//!
//! A final drain finishes every client, then no lock may remain.
//!
//! CI runs `SEEDS` seeds of `STEPS` steps per engine, plus `REGRESSIONS`,
//! and checks that every outcome worth testing (commit, expiry, push,
//! conflicts, GC, ...) happened at least once.
//! `PERCOLATE_MODEL_SEEDS=N` runs seeds 0..N instead; `PERCOLATE_MODEL_SEED=S`
//! replays seed S alone; `PERCOLATE_MODEL_STEPS=N` sets the steps per seed.
//! A failing run prints its seed and its last steps; `MODEL_DEBUG=1` (with
//! `--nocapture`) prints every step and the coverage.

use std::collections::{BTreeMap, VecDeque};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Engine, MemoryEngine};
use percolate::mvcc::{Error as MvccError, Key, Lock, LockType, MvccReader, MvccTxn, TimeStamp};
use percolate::txn::Error;
use percolate::txn::actions::TxnStatus;
use percolate::txn::actions::check_txn_status::CheckTxnStatusOptions;
use percolate::txn::actions::cleanup::{CleanupKind, cleanup, rollback};
use percolate::txn::actions::commit::commit;
use percolate::txn::actions::gc::gc;
use percolate::txn::actions::prewrite::{Mutation, TransactionProperties};
use percolate::txn::actions::resolve_lock::resolve_lock_key;
use percolate::txn::testing::TxnFixture;

/// Seeds run by default, per engine.
const SEEDS: u64 = 12;
/// Random steps per seed, before the drain.
const STEPS: usize = 200;
/// Seeds of past failures, always run.
const REGRESSIONS: &[u64] = &[];
/// At most this many clients at once.
const MAX_CLIENTS: usize = 4;
/// Lines of history printed when a run fails.
const HISTORY: usize = 60;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Put(Vec<u8>),
    Delete,
    Lock,
}

/// A transaction's fate, as its primary decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Undecided,
    Committed(TimeStamp),
    RolledBack,
}

/// What the transaction's client does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Prewrite mutation `next`; when all are done, take a commit_ts.
    Prewrite,
    /// Commit the primary at this commit_ts.
    CommitPrimary(TimeStamp),
    /// Commit secondary `next`.
    CommitSecondaries,
    /// Roll back mutation `next` (the primary first).
    Abort,
    Done,
}

#[derive(Debug)]
struct Txn {
    start_ts: TimeStamp,
    /// The first one is the primary.
    mutations: Vec<(Vec<u8>, Op)>,
    ttl: u64,
    /// Zero, or start_ts + 1 for a transaction whose primary lock status
    /// checks may push.
    min_commit_ts: TimeStamp,
    /// The order of the prewrites (as parallel requests may land).
    prewrite_order: Vec<usize>,
    prewritten: Vec<bool>,
    fate: Fate,
    /// The primary's rollback record is protected: it must stay until GC.
    /// (A client rolling back a primary it never locked writes a
    /// non-protected one, which a later rollback may collapse.)
    protected_rollback: bool,
    phase: Phase,
    next: usize,
}

impl Txn {
    /// A resolver found this transaction's primary lock expired and rolled
    /// it back (protected).
    fn expired_and_rolled_back(&mut self, lock: &Lock, now: TimeStamp) {
        assert!(
            is_expired(lock, now),
            "txn {}: a live lock was rolled back",
            self.start_ts
        );
        assert_eq!(self.fate, Fate::Undecided);
        self.fate = Fate::RolledBack;
        self.protected_rollback = true;
    }

    fn primary(&self) -> &[u8] {
        &self.mutations[0].0
    }

    fn index_of(&self, key: &[u8]) -> Option<usize> {
        self.mutations.iter().position(|(k, _)| k == key)
    }

    fn writes_key(&self, key: &[u8]) -> bool {
        self.index_of(key).is_some()
    }
}

fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

fn is_expired(lock: &Lock, now: TimeStamp) -> bool {
    lock.ts.physical() + lock.ttl < now.physical()
}

fn show(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if s.len() > 24 {
        format!("{}..({} bytes)", &s[..16], bytes.len())
    } else {
        s.into_owned()
    }
}

struct Model<E: Engine> {
    f: TxnFixture<E>,
    engine_name: &'static str,
    seed: u64,
    rng: StdRng,
    physical: u64,
    logical: u64,
    keys: Vec<Vec<u8>>,
    txns: Vec<Txn>,
    /// The largest GC safe point so far: reads below it are not checked.
    safe_point: TimeStamp,
    /// What reads at a ts at or below the clock returned: a snapshot never
    /// changes, so they must keep returning it.
    observed: BTreeMap<(Vec<u8>, TimeStamp), Option<Vec<u8>>>,
    /// In the final drain, a prewrite that meets a lock gives up.
    draining: bool,
    history: VecDeque<String>,
    /// Print every step as it happens (`MODEL_DEBUG`).
    verbose: bool,
    /// How often each interesting outcome happened.
    coverage: BTreeMap<&'static str, usize>,
}

impl<E: Engine> Drop for Model<E> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "txn model failed on {} with seed {} (replay: PERCOLATE_MODEL_SEED={}); last steps:",
                self.engine_name, self.seed, self.seed
            );
            for line in &self.history {
                eprintln!("  {line}");
            }
        }
    }
}

impl<E: Engine> Model<E> {
    fn new(engine: E, engine_name: &'static str, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.random_range(2..=4);
        let keys = (0..n).map(|i| vec![b'a' + i as u8]).collect();
        Model {
            f: TxnFixture::new(engine),
            engine_name,
            seed,
            rng,
            physical: 1,
            logical: 0,
            keys,
            txns: Vec::new(),
            safe_point: TimeStamp::zero(),
            observed: BTreeMap::new(),
            draining: false,
            history: VecDeque::new(),
            verbose: std::env::var_os("MODEL_DEBUG").is_some(),
            coverage: BTreeMap::new(),
        }
    }

    fn log(&mut self, line: String) {
        if self.verbose {
            eprintln!("{line}");
        }
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(line);
    }

    fn saw(&mut self, outcome: &'static str) {
        *self.coverage.entry(outcome).or_default() += 1;
    }

    /// A new timestamp, above every one before.
    fn now(&mut self) -> TimeStamp {
        self.logical += 1;
        TimeStamp::compose(self.physical, self.logical)
    }

    fn txn_index(&self, start_ts: TimeStamp) -> usize {
        self.txns
            .iter()
            .position(|t| t.start_ts == start_ts)
            .unwrap_or_else(|| panic!("a lock or record of unknown txn {start_ts}"))
    }

    fn lock_of(&self, k: &[u8], start_ts: TimeStamp) -> Option<Lock> {
        self.f
            .reader()
            .load_lock(&key(k))
            .unwrap()
            .filter(|l| l.ts == start_ts)
    }

    fn all_locks(&self) -> Vec<(Key, Lock)> {
        self.f
            .reader()
            .scan_locks(None, None, |_, _| true, 0)
            .unwrap()
            .0
    }

    /// Runs `steps` random steps and the drain; returns the coverage.
    fn run(mut self, steps: usize) -> BTreeMap<&'static str, usize> {
        for step in 0..steps {
            // Multiples of 5 ms, like the TTLs, so that expiry boundaries
            // (physical(start_ts) + ttl == physical(now)) come up often.
            let advance = 5 * self.rng.random_range(0..=2);
            if advance > 0 {
                self.physical += advance;
                self.logical = 0;
            }
            self.log(format!("-- step {step}, physical {}", self.physical));
            match self.rng.random_range(0..100) {
                0..12 => self.begin(),
                12..55 => self.client_step(None),
                55..75 => self.resolve_a_lock(),
                75..82 => self.cleanup_a_primary(),
                82..86 => self.heart_beat(),
                86..91 => self.probe_rollback_after_commit(),
                91..96 => self.probe_commit_after_rollback(),
                _ => self.gc(),
            }
            self.check();
        }
        self.drain();
        std::mem::take(&mut self.coverage)
    }

    // ------------------------------------------------------------ clients

    fn begin(&mut self) {
        if self.txns.iter().filter(|t| t.phase != Phase::Done).count() >= MAX_CLIENTS {
            return self.client_step(None);
        }
        let start_ts = self.now();
        let mut keys = self.keys.clone();
        keys.shuffle(&mut self.rng);
        keys.truncate(self.rng.random_range(1..=keys.len().min(3)));
        let mutations: Vec<_> = keys
            .into_iter()
            .map(|k| {
                let op = match self.rng.random_range(0..10) {
                    0 => Op::Delete,
                    1 => Op::Lock,
                    _ => {
                        let mut value = format!("{}@{start_ts}", show(&k)).into_bytes();
                        if self.rng.random_bool(0.2) {
                            value.resize(300, b'.');
                        }
                        Op::Put(value)
                    }
                };
                (k, op)
            })
            .collect();
        let ttl = [0, 50, 200, 200][self.rng.random_range(0..4)];
        let min_commit_ts = if self.rng.random_bool(0.5) {
            start_ts.next()
        } else {
            TimeStamp::zero()
        };
        let line = format!(
            "begin {start_ts}: {:?} ttl {ttl} min_commit_ts {min_commit_ts}",
            mutations
                .iter()
                .map(|(k, op)| match op {
                    Op::Put(v) => format!("put {}={}", show(k), show(v)),
                    Op::Delete => format!("delete {}", show(k)),
                    Op::Lock => format!("lock {}", show(k)),
                })
                .collect::<Vec<_>>()
        );
        self.log(line);
        let n = mutations.len();
        let mut prewrite_order: Vec<_> = (0..n).collect();
        prewrite_order.shuffle(&mut self.rng);
        self.txns.push(Txn {
            start_ts,
            mutations,
            ttl,
            min_commit_ts,
            prewrite_order,
            prewritten: vec![false; n],
            fate: Fate::Undecided,
            protected_rollback: false,
            phase: Phase::Prewrite,
            next: 0,
        });
    }

    /// One step of a client: `which`, or a random unfinished one.
    fn client_step(&mut self, which: Option<usize>) {
        let i = match which {
            Some(i) => i,
            None => {
                let active: Vec<_> = (0..self.txns.len())
                    .filter(|&i| self.txns[i].phase != Phase::Done)
                    .collect();
                if active.is_empty() {
                    return self.begin();
                }
                active[self.rng.random_range(0..active.len())]
            }
        };
        match self.txns[i].phase {
            Phase::Prewrite => self.client_prewrite(i),
            Phase::CommitPrimary(commit_ts) => {
                // A slow commit request: resolvers may push the primary
                // past its commit_ts meanwhile.
                if self.draining || self.rng.random_bool(0.3) {
                    self.client_commit_primary(i, commit_ts);
                }
            }
            Phase::CommitSecondaries => self.client_commit_secondary(i),
            Phase::Abort => self.client_rollback(i),
            Phase::Done => unreachable!("a finished client takes no step"),
        }
    }

    fn client_prewrite(&mut self, i: usize) {
        let t = &self.txns[i];
        let start_ts = t.start_ts;
        if t.next == t.mutations.len() {
            let commit_ts = self.now();
            self.log(format!("{start_ts}: all prewritten, commit_ts {commit_ts}"));
            self.txns[i].phase = Phase::CommitPrimary(commit_ts);
            return;
        }
        let idx = t.prewrite_order[t.next];
        let (k, op) = t.mutations[idx].clone();
        let props = TransactionProperties {
            lock_ttl: t.ttl,
            min_commit_ts: t.min_commit_ts,
            ..TxnFixture::<E>::props(t.primary(), start_ts.into_inner())
        };
        let mutation = match op {
            Op::Put(value) => Mutation::put(key(&k), value),
            Op::Delete => Mutation::delete(key(&k)),
            Op::Lock => Mutation::lock(key(&k)),
        };
        let result = self.f.prewrite(&props, vec![mutation], None);
        self.log(format!(
            "{start_ts}: prewrite {} -> {:?}",
            show(&k),
            result.as_ref().map(|_| ()).map_err(|e| e.to_string())
        ));
        let t = &mut self.txns[i];
        match result {
            Ok(r) => {
                assert!(r.locks.is_empty(), "a single-key prewrite reports its lock");
                assert!(
                    idx != 0 || t.fate != Fate::RolledBack,
                    "txn {start_ts}: prewrite of its rolled-back primary succeeded"
                );
                t.prewritten[idx] = true;
                t.next += 1;
            }
            Err(e) => match e.as_mvcc() {
                Some(MvccError::KeyIsLocked(info)) => {
                    assert_ne!(info.lock_version, start_ts, "own lock reported");
                    self.saw("prewrite met a lock");
                    if self.draining || self.rng.random_bool(0.3) {
                        self.abort(i);
                    }
                }
                Some(MvccError::WriteConflict { .. }) => {
                    // Justified only by a record at or above the start_ts.
                    let newest = self.f.reader().seek_write(&key(&k), TimeStamp::max());
                    let (commit_ts, _) = newest.unwrap().expect("a conflict needs a record");
                    assert!(commit_ts >= start_ts, "conflict with an older record: {e}");
                    self.saw("prewrite conflict");
                    self.abort(i);
                }
                _ => panic!("txn {start_ts}: unexpected prewrite error {e}"),
            },
        }
    }

    fn abort(&mut self, i: usize) {
        let t = &mut self.txns[i];
        t.phase = Phase::Abort;
        t.next = 0;
    }

    fn client_commit_primary(&mut self, i: usize, commit_ts: TimeStamp) {
        let t = &self.txns[i];
        let (start_ts, primary) = (t.start_ts, t.primary().to_vec());
        let result = self.f.run(start_ts.into_inner(), |txn, reader| {
            commit(txn, reader, key(&primary), commit_ts)
        });
        self.log(format!(
            "{start_ts}: commit primary {} at {commit_ts} -> {:?}",
            show(&primary),
            result.as_ref().map(|_| ()).map_err(|e| e.to_string())
        ));
        let fate = self.txns[i].fate;
        match result {
            Ok(_) => {
                assert_eq!(
                    fate,
                    Fate::Undecided,
                    "txn {start_ts}: commit after its fate"
                );
                self.check_no_overlap(i, commit_ts);
                self.saw("commit");
                let t = &mut self.txns[i];
                t.fate = Fate::Committed(commit_ts);
                t.next = 1;
                t.phase = if t.mutations.len() == 1 {
                    Phase::Done
                } else {
                    Phase::CommitSecondaries
                };
            }
            Err(e) => match e.as_mvcc() {
                Some(MvccError::TxnLockNotFound { .. }) => {
                    assert_eq!(
                        fate,
                        Fate::RolledBack,
                        "txn {start_ts}: the primary lock of an undecided txn is gone"
                    );
                    self.saw("commit after rollback");
                    self.abort(i);
                }
                Some(MvccError::CommitTsExpired { min_commit_ts, .. }) => {
                    assert_eq!(fate, Fate::Undecided);
                    assert!(!self.txns[i].min_commit_ts.is_zero(), "an unpushable lock");
                    assert!(*min_commit_ts > commit_ts);
                    self.saw("commit below pushed min_commit_ts");
                    let retry = self.now();
                    self.txns[i].phase = Phase::CommitPrimary(retry);
                }
                _ => panic!("txn {start_ts}: unexpected commit error {e}"),
            },
        }
    }

    /// Committed transactions writing a common key must not overlap.
    fn check_no_overlap(&self, i: usize, commit_ts: TimeStamp) {
        let t = &self.txns[i];
        for u in &self.txns {
            let Fate::Committed(u_commit) = u.fate else {
                continue;
            };
            let common = t.mutations.iter().find(|(k, _)| u.writes_key(k));
            if let Some((k, _)) = common {
                assert!(
                    u_commit < t.start_ts || commit_ts < u.start_ts,
                    "txn {}..{commit_ts} and txn {}..{u_commit} both wrote {}",
                    t.start_ts,
                    u.start_ts,
                    show(k)
                );
            }
        }
    }

    /// Runs an action of the transaction `start_ts` that must succeed, and
    /// logs it as `what`.
    fn must_run<T>(
        &mut self,
        start_ts: TimeStamp,
        what: String,
        action: impl FnOnce(&mut MvccTxn, &mut MvccReader<E::Snap>) -> percolate::txn::Result<T>,
    ) -> T {
        let result = self.f.run(start_ts.into_inner(), action);
        self.log(format!("{what} -> {:?}", result.as_ref().map(|_| ())));
        result.unwrap_or_else(|e| panic!("{what} failed: {e}"))
    }

    fn client_commit_secondary(&mut self, i: usize) {
        let t = &self.txns[i];
        let Fate::Committed(commit_ts) = t.fate else {
            panic!("committing secondaries of an uncommitted txn");
        };
        let (start_ts, k) = (t.start_ts, t.mutations[t.next].0.clone());
        self.must_run(
            start_ts,
            format!("{start_ts}: commit of secondary {}", show(&k)),
            |txn, reader| commit(txn, reader, key(&k), commit_ts),
        );
        let t = &mut self.txns[i];
        t.next += 1;
        if t.next == t.mutations.len() {
            t.phase = Phase::Done;
        }
    }

    fn client_rollback(&mut self, i: usize) {
        let t = &self.txns[i];
        let (start_ts, k, fate) = (t.start_ts, t.mutations[t.next].0.clone(), t.fate);
        assert!(
            !matches!(fate, Fate::Committed(_)),
            "txn {start_ts}: a client aborts only before committing"
        );
        let was_locked = self.lock_of(&k, start_ts).is_some();
        self.must_run(
            start_ts,
            format!("{start_ts}: rollback {}", show(&k)),
            |txn, reader| rollback(txn, reader, key(&k)),
        );
        let t = &mut self.txns[i];
        if t.next == 0 {
            t.fate = Fate::RolledBack;
            t.protected_rollback |= was_locked;
        }
        t.next += 1;
        if t.next == t.mutations.len() {
            t.phase = Phase::Done;
        }
    }

    // ---------------------------------------------------------- resolvers

    /// A reader meets a random lock: it checks the primary, then resolves
    /// the lock if the transaction is decided.
    fn resolve_a_lock(&mut self) {
        let locks = self.all_locks();
        if locks.is_empty() {
            return;
        }
        let (lock_key, lock) = locks[self.rng.random_range(0..locks.len())].clone();
        let i = self.txn_index(lock.ts);
        let start_ts = lock.ts;
        let primary = self.txns[i].primary().to_vec();
        let now = self.now();
        let primary_lock = self.lock_of(&primary, start_ts);
        let options = CheckTxnStatusOptions {
            caller_start_ts: now,
            current_ts: now,
            rollback_if_not_exist: true,
            ..Default::default()
        };
        let status = self
            .f
            .check_txn_status(&primary, start_ts.into_inner(), &options)
            .unwrap_or_else(|e| panic!("check_txn_status of {start_ts} failed: {e}"));
        self.log(format!(
            "resolver at {now}: status of {start_ts} on {} -> {status:?}",
            show(&primary)
        ));
        if let TxnStatus::Uncommitted { lock, .. } = &status {
            let stored = self.lock_of(&primary, start_ts);
            assert_eq!(
                stored.as_ref(),
                Some(&**lock),
                "the pushed lock is not stored"
            );
        }
        let Some(commit_ts) = self.judge_status(i, primary_lock, now, status) else {
            return;
        };
        self.saw(if commit_ts.is_zero() {
            "resolved by rollback"
        } else {
            "resolved by commit"
        });
        let raw = lock_key.to_raw().unwrap();
        self.must_run(
            start_ts,
            format!(
                "resolver: resolve {} of {start_ts} at {commit_ts}",
                show(&raw)
            ),
            |txn, reader| resolve_lock_key(txn, reader, lock_key, commit_ts),
        );
    }

    /// Checks a status against the model and records a decision; returns
    /// the commit_ts to resolve with (zero: roll back) once decided.
    fn judge_status(
        &mut self,
        i: usize,
        primary_lock: Option<Lock>,
        now: TimeStamp,
        status: TxnStatus,
    ) -> Option<TimeStamp> {
        let outcome = match &status {
            TxnStatus::TtlExpire => "status TtlExpire",
            TxnStatus::Uncommitted {
                min_commit_ts_pushed: true,
                ..
            } => "status pushed",
            TxnStatus::Uncommitted { .. } => "status Uncommitted",
            TxnStatus::LockNotExist => "status LockNotExist",
            TxnStatus::RolledBack => "status RolledBack",
            TxnStatus::Committed { .. } => "status Committed",
            _ => "status other",
        };
        self.saw(outcome);
        let t = &mut self.txns[i];
        let start_ts = t.start_ts;
        match (primary_lock, status) {
            (Some(lock), TxnStatus::TtlExpire) => {
                t.expired_and_rolled_back(&lock, now);
                Some(TimeStamp::zero())
            }
            (
                Some(lock),
                TxnStatus::Uncommitted {
                    lock: now_lock,
                    min_commit_ts_pushed,
                },
            ) => {
                assert!(!is_expired(&lock, now), "txn {start_ts}: expired lock kept");
                assert_eq!(t.fate, Fate::Undecided);
                if lock.min_commit_ts.is_zero() {
                    assert!(!min_commit_ts_pushed && now_lock.min_commit_ts.is_zero());
                } else {
                    assert!(min_commit_ts_pushed && now_lock.min_commit_ts > now);
                }
                None
            }
            (None, TxnStatus::Committed { commit_ts }) => {
                assert_eq!(t.fate, Fate::Committed(commit_ts), "txn {start_ts}");
                Some(commit_ts)
            }
            (None, TxnStatus::RolledBack) => {
                assert_eq!(t.fate, Fate::RolledBack, "txn {start_ts}");
                Some(TimeStamp::zero())
            }
            (None, TxnStatus::LockNotExist) => {
                assert!(
                    !matches!(t.fate, Fate::Committed(_)),
                    "txn {start_ts}: committed, but judged missing"
                );
                assert!(
                    !t.protected_rollback,
                    "txn {start_ts}: its protected rollback is gone"
                );
                t.fate = Fate::RolledBack;
                t.protected_rollback = true;
                Some(TimeStamp::zero())
            }
            (lock, status) => {
                panic!("txn {start_ts}: status {status:?} with primary lock {lock:?}")
            }
        }
    }

    /// KvCleanup of a random transaction's primary, with a TTL check.
    fn cleanup_a_primary(&mut self) {
        let candidates: Vec<_> = (0..self.txns.len())
            .filter(|&i| self.txns[i].start_ts > self.safe_point)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let i = candidates[self.rng.random_range(0..candidates.len())];
        let (start_ts, primary) = (self.txns[i].start_ts, self.txns[i].primary().to_vec());
        let now = self.now();
        let primary_lock = self.lock_of(&primary, start_ts);
        let result = self.f.run(start_ts.into_inner(), |txn, reader| {
            cleanup(txn, reader, key(&primary), now, CleanupKind::Cleanup)
        });
        self.log(format!(
            "cleanup {} of {start_ts} at {now} -> {:?}",
            show(&primary),
            result.as_ref().map(|_| ()).map_err(|e| e.to_string())
        ));
        if primary_lock.is_some() && result.is_ok() {
            self.saw("cleanup of expired lock");
        }
        let t = &mut self.txns[i];
        match (primary_lock, result) {
            (Some(lock), Ok(_)) => t.expired_and_rolled_back(&lock, now),
            (Some(lock), Err(e)) => {
                assert!(!is_expired(&lock, now), "expired lock kept: {e}");
                assert!(
                    matches!(e.as_mvcc(), Some(MvccError::KeyIsLocked(_))),
                    "{e}"
                );
            }
            (None, Ok(_)) => {
                assert!(
                    !matches!(t.fate, Fate::Committed(_)),
                    "txn {start_ts}: cleanup after commit succeeded"
                );
                // A rollback already there is left as it is; otherwise
                // cleanup writes a protected one.
                if t.fate == Fate::Undecided {
                    t.protected_rollback = true;
                }
                t.fate = Fate::RolledBack;
            }
            (None, Err(e)) => match (e.as_mvcc(), t.fate) {
                (Some(MvccError::Committed { commit_ts, .. }), Fate::Committed(c)) => {
                    assert_eq!(*commit_ts, c);
                }
                _ => panic!("txn {start_ts} ({:?}): cleanup failed: {e}", t.fate),
            },
        }
    }

    fn heart_beat(&mut self) {
        let candidates: Vec<_> = (0..self.txns.len())
            .filter(|&i| {
                matches!(
                    self.txns[i].phase,
                    Phase::Prewrite | Phase::CommitPrimary(_)
                )
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        let i = candidates[self.rng.random_range(0..candidates.len())];
        let (start_ts, primary) = (self.txns[i].start_ts, self.txns[i].primary().to_vec());
        let advise = self.txns[i].ttl + 5 * self.rng.random_range(1..=10);
        let primary_lock = self.lock_of(&primary, start_ts);
        let result = self.f.heart_beat(&primary, start_ts.into_inner(), advise);
        self.log(format!(
            "{start_ts}: heart beat {advise} -> {:?}",
            result.as_ref().map_err(|e| e.to_string())
        ));
        match (primary_lock, result) {
            (Some(lock), Ok(ttl)) => {
                assert_eq!(ttl, lock.ttl.max(advise));
                self.txns[i].ttl = ttl;
            }
            (None, Err(Error::Mvcc(MvccError::TxnNotFound { .. }))) => {}
            (lock, result) => panic!("heart beat of {start_ts} with {lock:?}: {result:?}"),
        }
    }

    // ------------------------------------------------------------- probes

    /// A rollback or cleanup of a key a committed transaction already
    /// committed must fail with Committed, writing nothing.
    fn probe_rollback_after_commit(&mut self) {
        let mut targets = Vec::new();
        for t in &self.txns {
            let Fate::Committed(commit_ts) = t.fate else {
                continue;
            };
            if commit_ts <= self.safe_point {
                continue;
            }
            for (k, _) in &t.mutations {
                if self.lock_of(k, t.start_ts).is_none() {
                    targets.push((t.start_ts, commit_ts, k.clone()));
                }
            }
        }
        if targets.is_empty() {
            return;
        }
        let (start_ts, commit_ts, k) = targets[self.rng.random_range(0..targets.len())].clone();
        let now = self.now();
        let use_cleanup = self.rng.random_bool(0.5);
        let err = self.f.run_err(start_ts.into_inner(), |txn, reader| {
            if use_cleanup {
                cleanup(txn, reader, key(&k), now, CleanupKind::Cleanup)
            } else {
                rollback(txn, reader, key(&k))
            }
        });
        self.log(format!(
            "probe: {} {} of committed {start_ts} -> {err}",
            if use_cleanup { "cleanup" } else { "rollback" },
            show(&k)
        ));
        match err.as_mvcc() {
            Some(MvccError::Committed { commit_ts: c, .. }) => assert_eq!(*c, commit_ts),
            _ => panic!("rollback after commit of {start_ts}: {err}"),
        }
        self.saw("rollback after commit");
    }

    /// A commit of a rolled-back transaction on a key it holds no lock on
    /// must fail, writing nothing.
    fn probe_commit_after_rollback(&mut self) {
        let mut targets = Vec::new();
        for t in self.txns.iter().filter(|t| t.fate == Fate::RolledBack) {
            for (k, _) in &t.mutations {
                if self.lock_of(k, t.start_ts).is_none() {
                    targets.push((t.start_ts, k.clone()));
                }
            }
        }
        if targets.is_empty() {
            return;
        }
        let (start_ts, k) = targets[self.rng.random_range(0..targets.len())].clone();
        let commit_ts = self.now();
        let err = self.f.run_err(start_ts.into_inner(), |txn, reader| {
            commit(txn, reader, key(&k), commit_ts)
        });
        self.log(format!(
            "probe: commit {} of rolled-back {start_ts} -> {err}",
            show(&k)
        ));
        assert!(
            matches!(err.as_mvcc(), Some(MvccError::TxnLockNotFound { .. })),
            "commit after rollback of {start_ts}: {err}"
        );
    }

    // ----------------------------------------------------------------- GC

    /// GC every key at a safe point below every transaction still running
    /// or holding a lock.
    fn gc(&mut self) {
        let bound = self
            .txns
            .iter()
            .filter(|t| t.phase != Phase::Done)
            .map(|t| t.start_ts)
            .chain(self.all_locks().into_iter().map(|(_, l)| l.ts))
            .min()
            .unwrap_or_else(|| self.now());
        if bound.into_inner() <= self.safe_point.into_inner() + 1 {
            return;
        }
        let safe_point = TimeStamp::new(
            self.rng
                .random_range(self.safe_point.into_inner()..bound.into_inner()),
        );
        self.gc_at(safe_point);
    }

    fn gc_at(&mut self, safe_point: TimeStamp) {
        for k in self.keys.clone() {
            let info = self
                .f
                .run(0, |txn, reader| gc(txn, reader, key(&k), safe_point))
                .unwrap_or_else(|e| panic!("gc failed: {e}"));
            self.log(format!("gc {} at {safe_point} -> {info:?}", show(&k)));
            if info.deleted_versions > 0 {
                self.saw("gc deleted versions");
            }
        }
        self.safe_point = self.safe_point.max(safe_point);
        let safe_point = self.safe_point;
        self.observed
            .retain(|(_, read_ts), _| *read_ts >= safe_point);
    }

    // ------------------------------------------------------------- drain

    /// Finishes every client (a prewrite that meets a lock aborts), then
    /// checks that no lock is left and GC at the end keeps the last values.
    fn drain(&mut self) {
        self.draining = true;
        self.log("-- drain".to_string());
        for i in 0..self.txns.len() {
            let mut steps = 0;
            while self.txns[i].phase != Phase::Done {
                self.client_step(Some(i));
                self.check();
                steps += 1;
                assert!(steps < 100, "txn {} does not finish", self.txns[i].start_ts);
            }
        }
        let locks = self.all_locks();
        assert!(
            locks.is_empty(),
            "locks left after every txn finished: {locks:?}"
        );
        let now = self.now();
        self.gc_at(now);
        self.check();
    }

    // ------------------------------------------------------------- checks

    fn check(&mut self) {
        self.check_locks();
        self.check_records();
        self.check_values();
        self.check_reads();
    }

    /// Every long value in the default CF belongs to a lock or a commit
    /// record of its transaction: rollback and GC leave none behind.
    fn check_values(&self) {
        for k in &self.keys {
            for (start_ts, value) in self.f.mvcc_info(k).values {
                let t = &self.txns[self.txn_index(start_ts)];
                let idx = t.index_of(k).expect("a value of a key the txn never wrote");
                assert_eq!(t.mutations[idx].1, Op::Put(value), "value of {}", show(k));
                let record = self
                    .f
                    .reader()
                    .get_txn_commit_record(&key(k), start_ts)
                    .unwrap();
                assert!(
                    self.lock_of(k, start_ts).is_some() || record.committed_ts().is_some(),
                    "txn {start_ts} ({:?}) left its value on {} without lock or record",
                    t.fate,
                    show(k)
                );
            }
        }
    }

    fn check_locks(&self) {
        for (lock_key, lock) in self.all_locks() {
            let raw = lock_key.to_raw().unwrap();
            let t = &self.txns[self.txn_index(lock.ts)];
            let idx = t.index_of(&raw).unwrap_or_else(|| {
                panic!("txn {} locked {} it never wrote", t.start_ts, show(&raw))
            });
            assert_eq!(lock.primary, t.primary(), "lock on {}", show(&raw));
            assert!(t.prewritten[idx], "lock on {} never prewritten", show(&raw));
            let expected_type = match &t.mutations[idx].1 {
                Op::Put(value) => {
                    if value.len() <= 255 {
                        assert_eq!(lock.short_value.as_ref(), Some(value));
                    }
                    LockType::Put
                }
                Op::Delete => LockType::Delete,
                Op::Lock => LockType::Lock,
            };
            assert_eq!(lock.lock_type, expected_type);
            assert!(
                idx != 0 || t.fate == Fate::Undecided,
                "txn {} is {:?} but its primary {} is still locked",
                t.start_ts,
                t.fate,
                show(&raw)
            );
        }
    }

    fn check_records(&self) {
        for t in &self.txns {
            let horizon = match t.fate {
                Fate::Committed(commit_ts) => commit_ts,
                _ => t.start_ts,
            };
            if horizon <= self.safe_point {
                continue;
            }
            if t.fate == Fate::RolledBack && t.protected_rollback {
                let record = self
                    .f
                    .reader()
                    .get_txn_commit_record(&key(t.primary()), t.start_ts)
                    .unwrap();
                assert!(
                    record.is_rolled_back(),
                    "txn {}: the protected rollback on its primary {} is gone: {record:?}",
                    t.start_ts,
                    show(t.primary())
                );
            }
            for (idx, (k, _)) in t.mutations.iter().enumerate() {
                let record = self
                    .f
                    .reader()
                    .get_txn_commit_record(&key(k), t.start_ts)
                    .unwrap()
                    .committed_ts();
                match t.fate {
                    Fate::Committed(commit_ts) => {
                        let locked = idx != 0 && self.lock_of(k, t.start_ts).is_some();
                        assert!(
                            record == Some(commit_ts) || (locked && record.is_none()),
                            "txn {} committed at {commit_ts}: {} has record {record:?}",
                            t.start_ts,
                            show(k)
                        );
                    }
                    _ => assert_eq!(
                        record,
                        None,
                        "txn {} is {:?} but committed on {}",
                        t.start_ts,
                        t.fate,
                        show(k)
                    ),
                }
            }
        }
    }

    /// The committed versions of `k` that change its value, oldest first.
    fn versions(&self, k: &[u8]) -> Vec<(TimeStamp, Option<Vec<u8>>)> {
        let mut versions: Vec<_> = self
            .txns
            .iter()
            .filter_map(|t| {
                let Fate::Committed(commit_ts) = t.fate else {
                    return None;
                };
                match &t.mutations[t.index_of(k)?].1 {
                    Op::Put(value) => Some((commit_ts, Some(value.clone()))),
                    Op::Delete => Some((commit_ts, None)),
                    Op::Lock => None,
                }
            })
            .collect();
        versions.sort_by_key(|(commit_ts, _)| *commit_ts);
        versions
    }

    fn check_reads(&mut self) {
        let now = TimeStamp::compose(self.physical, self.logical);
        for k in self.keys.clone() {
            let k = &k;
            let versions = self.versions(k);
            let mut points: Vec<TimeStamp> = versions
                .iter()
                .flat_map(|(commit_ts, _)| [*commit_ts, commit_ts.prev()])
                .chain([now, TimeStamp::max()])
                .filter(|&read_ts| read_ts >= self.safe_point)
                .collect();
            points.sort();
            points.dedup();
            for read_ts in points {
                let expected = versions
                    .iter()
                    .rev()
                    .find(|(commit_ts, _)| *commit_ts <= read_ts)
                    .and_then(|(_, value)| value.clone());
                match self.f.get(k, read_ts.into_inner()) {
                    Ok(value) => {
                        assert_eq!(
                            value.as_deref().map(show),
                            expected.as_deref().map(show),
                            "read of {} at {read_ts}",
                            show(k)
                        );
                        if read_ts <= now {
                            let seen = self
                                .observed
                                .entry((k.clone(), read_ts))
                                .or_insert_with(|| value.clone());
                            assert_eq!(
                                seen.as_deref().map(show),
                                value.as_deref().map(show),
                                "read of {} at {read_ts} changed",
                                show(k)
                            );
                        }
                    }
                    Err(MvccError::KeyIsLocked(info)) => {
                        let lock = self.f.reader().load_lock(&key(k)).unwrap();
                        let lock = lock.expect("blocked by a lock that is not there");
                        assert_eq!(info.lock_version, lock.ts);
                        assert!(lock.ts <= read_ts, "blocked by a later lock");
                    }
                    Err(e) => panic!("read of {} at {read_ts}: {e}", show(k)),
                }
            }
        }
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("PERCOLATE_MODEL_SEED") {
        return vec![seed.parse().expect("PERCOLATE_MODEL_SEED is a number")];
    }
    let count = std::env::var("PERCOLATE_MODEL_SEEDS")
        .map(|n| n.parse().expect("PERCOLATE_MODEL_SEEDS is a number"))
        .unwrap_or(SEEDS);
    (0..count).chain(REGRESSIONS.iter().copied()).collect()
}

/// Runs every seed on engines from `new_engine`. Over the default seeds,
/// every interesting outcome must have happened: otherwise the model has
/// drifted into testing nothing.
fn run_seeds<E: Engine>(engine_name: &'static str, new_engine: impl Fn() -> E) {
    let seeds = seeds();
    let steps = std::env::var("PERCOLATE_MODEL_STEPS")
        .map(|n| n.parse().expect("PERCOLATE_MODEL_STEPS is a number"))
        .unwrap_or(STEPS);
    let mut coverage = BTreeMap::new();
    for &seed in &seeds {
        for (outcome, n) in Model::new(new_engine(), engine_name, seed).run(steps) {
            *coverage.entry(outcome).or_insert(0) += n;
        }
    }
    if std::env::var_os("MODEL_DEBUG").is_some() {
        eprintln!("coverage: {coverage:?}");
    }
    if seeds.len() as u64 >= SEEDS {
        let expected = [
            "commit",
            "commit after rollback",
            "commit below pushed min_commit_ts",
            "prewrite conflict",
            "prewrite met a lock",
            "status TtlExpire",
            "status pushed",
            "status Uncommitted",
            "status LockNotExist",
            "status RolledBack",
            "status Committed",
            "resolved by commit",
            "resolved by rollback",
            "cleanup of expired lock",
            "rollback after commit",
            "gc deleted versions",
        ];
        for outcome in expected {
            assert!(
                coverage.contains_key(outcome),
                "{outcome:?} never happened: {coverage:?}"
            );
        }
    }
}

#[test]
fn model_memory() {
    run_seeds("memory", MemoryEngine::new);
}

#[test]
fn model_rocks() {
    run_seeds("rocks", temp_rocks_engine);
}
