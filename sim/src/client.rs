//! A simulated client: one transaction as a state machine that follows the
//! commit protocol of `percolate_txn::client` step by step, one region
//! command per step, so that the simulation can interleave it with other
//! clients, time, reads and faults, and stop it anywhere.
//!
//! What it models, mirrored from `txn/src/client/transaction.rs` and
//! `pessimistic.rs` (keep them in step):
//!
//! * the buffer (put, delete, insert, lock_keys; reads see own writes);
//! * `Committer::new`: not modelled but shared, the client's own
//!   [`CommitPlan`](percolate_txn::client::CommitPlan) (the primary, the
//!   keys grouped by region and cut into batches, the protocol, the
//!   async-commit secondaries list);
//! * the prewrite commands (`prewrite_command`), each batch sent in a step
//!   of its own in a seeded order (the real client sends them at once, so
//!   any order is one it can take); a batch that meets locks resolves them
//!   with the client's real resolver and, wait-die, gives up at once on an
//!   older live transaction, else retries until its deadline (a count of
//!   blocked steps here);
//! * the commit point: 1PC and async commit decided by the prewrite
//!   results (with their fall-backs to 2PC), 2PC by the primary's commit at
//!   a fresh commit_ts (again on `CommitTsExpired`); then the secondaries,
//!   one region per step; after a failure before the commit point, the
//!   `Unlock` of every key, one region per step;
//! * the pessimistic lock requests (`lock_region`: the primary locked
//!   alone first, a fresh for_update_ts per attempt, resolve and retry on
//!   a lock, retry on `PessimisticRetry`), and `release_locks`;
//! * the heart beats of the primary lock (`heartbeat.rs`: every third of
//!   the TTL, advising the time since start_ts plus the TTL), sent by the
//!   world when simulated time passes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use percolate_mvcc::{Key, TimeStamp, WriteConflictReason};
use percolate_txn::Error;
use percolate_txn::client::{
    CommitPlan, CommitProtocol, Decision, PlanLimits, PrewriteShape, decide,
};
use percolate_txn::commands::{
    AcquirePessimisticLock, Commit, Mutation, PessimisticLockKeyResult, PessimisticRollback,
    Prewrite, PrewriteResult, Unlock,
};

use crate::history::{Observation, Op, Outcome, Read, ReadKind, TxnRecord, show};
use crate::world::{World, into_lock};

/// Steps a request may stay blocked by live locks before it gives up (the
/// client's `resolve_timeout`, in steps).
const MAX_BLOCKED: u32 = 12;

/// The protocol knobs of one transaction's client
/// (`ClientConfig`'s `async_commit`, `one_pc`, `max_batch_keys`,
/// `max_async_commit_keys`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TxnOptions {
    pub(crate) async_commit: bool,
    pub(crate) one_pc: bool,
    pub(crate) max_batch_keys: usize,
    pub(crate) max_async_commit_keys: usize,
}

/// What a transaction does before it commits.
#[derive(Clone, Debug)]
pub(crate) enum Planned {
    Get(Vec<u8>),
    Scan {
        start: Vec<u8>,
        end: Vec<u8>,
        limit: usize,
        reverse: bool,
    },
    Put(Vec<u8>),
    Delete(Vec<u8>),
    Insert(Vec<u8>),
    LockKey(Vec<u8>),
    /// Pessimistic only: lock and read the latest value.
    GetForUpdate(Vec<u8>),
}

/// One prewrite command's mutations, for one region.
struct Batch {
    region: usize,
    mutations: Vec<Mutation>,
}

/// The commit in progress (the model of the client's `Committer`).
struct Committer {
    primary: Vec<u8>,
    keys_by_region: Vec<(usize, Vec<Key>)>,
    batches: Vec<Batch>,
    /// The protocol the prewrites ask for; the one the commit ends with is
    /// [`decide`]d from their answers.
    planned: CommitProtocol,
    key_count: usize,
    lock_ttl_ms: u64,
    secondaries: Vec<Vec<u8>>,
    for_update_ts: Option<TimeStamp>,
    results: Vec<Option<PrewriteResult>>,
}

enum Phase {
    Ops,
    Prewrite,
    CommitPrimary,
    CommitSecondaries {
        commit_ts: TimeStamp,
        left: VecDeque<(usize, Vec<Key>)>,
    },
    /// Removing its locks after a failure; `pessimistic`: pessimistic
    /// rollback first.
    Unlock {
        left: VecDeque<(usize, Vec<Key>)>,
        pessimistic: bool,
    },
    Done,
}

/// What a step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    Stepped,
    Blocked,
    Finished,
}

/// A transaction's client.
pub(crate) struct SimTxn {
    /// Index into the history's transactions; printed as `t{id}`.
    pub(crate) id: usize,
    pub(crate) start_ts: TimeStamp,
    pessimistic: bool,
    opts: TxnOptions,
    plan: VecDeque<Planned>,
    buffer: BTreeMap<Vec<u8>, Op>,
    /// Values are long (kept in the default CF) for this transaction.
    long_values: bool,
    primary: Option<Vec<u8>>,
    for_update_ts: TimeStamp,
    locked: BTreeSet<Vec<u8>>,
    commit: Option<Committer>,
    phase: Phase,
    blocked: u32,
    began_ms: u64,
    pub(crate) last_beat_ms: u64,
    /// Its heart beats never come (a stalled client).
    pub(crate) beats_stalled: bool,
    heart_beating: bool,
    /// An optimistic insert over this transaction's own put or insert:
    /// the commit fails with `AlreadyExist` before it sends anything, as
    /// `Transaction::insert` makes it.
    duplicate: bool,
}

impl SimTxn {
    /// Begins a transaction: start_ts from the oracle, and a plan.
    pub(crate) fn begin(w: &mut World) -> SimTxn {
        let start_ts = w.get_ts();
        let id = w.history.txns.len();
        let pessimistic = w.rng.chance(300);
        let opts = TxnOptions {
            async_commit: w.rng.chance(600),
            one_pc: w.rng.chance(600),
            max_batch_keys: w.rng.range(1, 3) as usize,
            max_async_commit_keys: w.rng.range(1, 4) as usize,
        };
        let mut plan = VecDeque::new();
        for _ in 0..w.rng.range(1, 5) {
            let key = w.params.keys[w.rng.index(w.params.keys.len())].clone();
            let op = match w.rng.below(100) {
                0..=29 => Planned::Get(key),
                30..=37 => {
                    let n = w.params.keys.len();
                    let (a, b) = (w.rng.index(n), w.rng.index(n + 1));
                    let start = w.params.keys[a.min(b)].clone();
                    let end = w
                        .params
                        .keys
                        .get(a.max(b))
                        .cloned()
                        .unwrap_or(b"l".to_vec());
                    Planned::Scan {
                        start,
                        end,
                        limit: w.rng.below(3) as usize,
                        reverse: w.rng.chance(500),
                    }
                }
                38..=74 => Planned::Put(key),
                75..=82 => Planned::Delete(key),
                83..=87 => Planned::Insert(key),
                88..=93 => Planned::LockKey(key),
                _ if pessimistic => Planned::GetForUpdate(key),
                _ => Planned::Put(key),
            };
            plan.push_back(op);
        }
        let txn = SimTxn {
            id,
            start_ts,
            pessimistic,
            opts,
            plan,
            buffer: BTreeMap::new(),
            long_values: w.rng.chance(150),
            primary: None,
            for_update_ts: start_ts,
            locked: BTreeSet::new(),
            commit: None,
            phase: Phase::Ops,
            blocked: 0,
            began_ms: w.now_ms(),
            last_beat_ms: w.now_ms(),
            beats_stalled: w.cfg.faults.stalled_heart_beats && w.rng.chance(100),
            heart_beating: false,
            duplicate: false,
        };
        w.history.txns.push(TxnRecord {
            start_ts,
            pessimistic,
            writes: BTreeMap::new(),
            locked_at: BTreeMap::new(),
            for_update_ts: start_ts,
            outcome: Outcome::Open,
        });
        if w.tracing() {
            let o = &txn.opts;
            w.note(format!(
                "> t{id}: begin{}{}{} batch={} async_keys={}{} -> start_ts={}",
                if pessimistic { " pessimistic" } else { "" },
                if o.async_commit { " async" } else { "" },
                if o.one_pc { " one_pc" } else { "" },
                o.max_batch_keys,
                o.max_async_commit_keys,
                if txn.beats_stalled {
                    " stalled_heart_beats"
                } else {
                    ""
                },
                World::fmt_ts(start_ts)
            ));
        }
        txn
    }

    /// The value this transaction writes to `key`: its tag, so that a
    /// read names its writer.
    fn value(&self, key: &[u8]) -> Vec<u8> {
        let mut v = format!("t{}.{}", self.id, String::from_utf8_lossy(key)).into_bytes();
        if self.long_values {
            v.resize(300, b'#');
        }
        v
    }

    /// The primary whose lock its heart beats keep alive, while they run.
    fn beating_primary(&self) -> Option<&[u8]> {
        if !self.heart_beating {
            return None;
        }
        match &self.commit {
            Some(c) => Some(&c.primary),
            None => self.primary.as_deref(),
        }
    }

    /// One step: one region command (or a buffered write).
    pub(crate) fn step(&mut self, w: &mut World) -> Progress {
        let progress = match self.phase {
            Phase::Ops => self.step_ops(w),
            Phase::Prewrite => self.step_prewrite(w),
            Phase::CommitPrimary => self.step_commit_primary(w),
            Phase::CommitSecondaries { .. } => self.step_commit_secondaries(w),
            Phase::Unlock { .. } => self.step_unlock(w),
            Phase::Done => Progress::Finished,
        };
        if progress == Progress::Blocked {
            self.blocked += 1;
        } else {
            self.blocked = 0;
        }
        if matches!(self.phase, Phase::Done) {
            self.heart_beating = false;
            return Progress::Finished;
        }
        progress
    }

    /// The heart beat of its primary lock, when one is due.
    pub(crate) fn heart_beat(&mut self, w: &mut World, ttl_ms: u64) {
        let now_ms = w.now_ms();
        if self.beats_stalled || now_ms.saturating_sub(self.last_beat_ms) < (ttl_ms / 3).max(1) {
            return;
        }
        let Some(primary) = self.beating_primary().map(<[u8]>::to_vec) else {
            return;
        };
        self.last_beat_ms = now_ms;
        let now = w.get_ts();
        let advise_ttl = now.physical().saturating_sub(self.start_ts.physical()) + ttl_ms;
        let result =
            w.storage(&primary)
                .txn_heart_beat(Key::from_raw(&primary), self.start_ts, advise_ttl);
        if w.tracing() {
            let answer = match result {
                Ok(ttl) => format!("ok: ttl={ttl}"),
                Err(e) => format!("error: {e}"),
            };
            w.note(format!(
                "> t{}: heart_beat primary={} advise_ttl={advise_ttl} -> {answer}",
                self.id,
                String::from_utf8_lossy(&primary)
            ));
        }
    }

    fn step_ops(&mut self, w: &mut World) -> Progress {
        let Some(op) = self.plan.pop_front() else {
            self.start_commit(w);
            return Progress::Stepped;
        };
        let done = match &op {
            Planned::Get(key) => self.get(w, key),
            Planned::Scan {
                start,
                end,
                limit,
                reverse,
            } => self.scan(w, start, end, *limit, *reverse),
            Planned::Put(key)
            | Planned::Delete(key)
            | Planned::Insert(key)
            | Planned::LockKey(key)
                if !self.pessimistic =>
            {
                let new = match &op {
                    Planned::Put(_) => Op::Put(self.value(key)),
                    Planned::Insert(_) => Op::Insert(self.value(key)),
                    Planned::Delete(_) => Op::Delete,
                    _ => Op::Lock,
                };
                let own = self.buffer.get(key);
                if new == Op::Lock {
                    self.buffer.entry(key.clone()).or_insert(Op::Lock);
                } else if matches!(new, Op::Insert(_))
                    && matches!(own, Some(Op::Put(_) | Op::Insert(_)))
                {
                    // The earlier write stays; the commit will fail.
                    self.duplicate = true;
                } else {
                    let new = Op::buffered(own, new);
                    self.buffer.insert(key.clone(), new);
                }
                if w.tracing() {
                    w.note(format!("> t{}: {}", self.id, describe(&op)));
                }
                Ok(true)
            }
            _ => self.pessimistic_op(w, &op),
        };
        match done {
            Ok(true) => Progress::Stepped,
            Ok(false) => {
                self.plan.push_front(op);
                if self.blocked + 1 >= MAX_BLOCKED {
                    self.give_up(w, "gave up waiting for a lock".into());
                    return Progress::Stepped;
                }
                Progress::Blocked
            }
            Err(reason) => {
                self.give_up(w, reason);
                Progress::Stepped
            }
        }
    }

    /// A point read at the start_ts (own writes first). Ok(false): blocked.
    fn get(&mut self, w: &mut World, key: &[u8]) -> Result<bool, String> {
        if let Some(op) = self.buffer.get(key).filter(|op| **op != Op::Lock) {
            if w.tracing() {
                let own = show(op.value());
                w.note(format!(
                    "> t{}: get {} -> {own} (own write)",
                    self.id,
                    String::from_utf8_lossy(key)
                ));
            }
            return Ok(true);
        }
        match w.read_get(key, self.start_ts, ReadKind::Si) {
            Ok(value) => {
                self.observe(
                    w,
                    Read::Get {
                        key: key.to_vec(),
                        value,
                    },
                    self.start_ts,
                );
                Ok(true)
            }
            Err(why) => self.read_failed(w, &format!("get {}", String::from_utf8_lossy(key)), why),
        }
    }

    /// A range read at the start_ts; recorded only when no own write
    /// falls in the range (the client merges those in; not modelled).
    fn scan(
        &mut self,
        w: &mut World,
        start: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<bool, String> {
        match w.read_scan(start, end, limit, reverse, self.start_ts, ReadKind::Si) {
            Ok(pairs) => {
                let own = self
                    .buffer
                    .range(start.to_vec()..end.to_vec())
                    .any(|(_, op)| *op != Op::Lock);
                if !own {
                    let read = Read::Scan {
                        start: start.to_vec(),
                        end: end.to_vec(),
                        limit,
                        reverse,
                        pairs,
                    };
                    self.observe(w, read, self.start_ts);
                }
                Ok(true)
            }
            Err(why) => self.read_failed(w, "scan", why),
        }
    }

    fn observe(&self, w: &mut World, read: Read, ts: TimeStamp) {
        let obs = Observation {
            step: w.step,
            ts,
            kind: ReadKind::Si,
            read,
            txn: Some(self.id),
        };
        if w.tracing() {
            w.note(format!("> t{}: {}", self.id, obs.describe()));
        }
        w.history.observations.push(obs);
    }

    fn read_failed(&self, w: &mut World, what: &str, why: String) -> Result<bool, String> {
        if w.tracing() {
            w.note(format!("> t{}: {what} -> {why}", self.id));
        }
        if why == "blocked" {
            Ok(false)
        } else {
            Err(why)
        }
    }

    /// A pessimistic write, lock or get_for_update: the lock first.
    fn pessimistic_op(&mut self, w: &mut World, op: &Planned) -> Result<bool, String> {
        let (key, want_value, should_not_exist) = match op {
            Planned::Put(k) | Planned::Delete(k) | Planned::LockKey(k) => (k, false, false),
            Planned::Insert(k) => (k, false, true),
            Planned::GetForUpdate(k) => (k, true, false),
            _ => unreachable!("reads are not pessimistic ops"),
        };
        let buffers_write = self.buffer.get(key).is_some_and(|op| *op != Op::Lock);
        if matches!(op, Planned::GetForUpdate(_)) && buffers_write && self.locked.contains(key) {
            return Ok(true);
        }
        let needed = want_value || should_not_exist || !self.locked.contains(key);
        if needed {
            let Some(value) = self.lock_key(w, key, want_value, should_not_exist)? else {
                return Ok(false);
            };
            self.locked.insert(key.clone());
            self.buffer.entry(key.clone()).or_insert(Op::Lock);
            if want_value && !buffers_write {
                let fut = w.history.txns[self.id].locked_at[key];
                let obs = Observation {
                    step: w.step,
                    ts: fut,
                    kind: ReadKind::Si,
                    read: Read::Get {
                        key: key.clone(),
                        value,
                    },
                    txn: Some(self.id),
                };
                if w.tracing() {
                    w.note(format!("  for update: {}", obs.describe()));
                }
                w.history.observations.push(obs);
            }
        }
        match op {
            Planned::Put(k) => {
                // As `Transaction::put`; a delete is a plain delete here
                // (the insert's check was made when its key was locked).
                let v = self.value(k);
                let new = Op::buffered(self.buffer.get(k), Op::Put(v));
                self.buffer.insert(k.clone(), new);
            }
            Planned::Insert(k) => {
                let v = self.value(k);
                self.buffer.insert(k.clone(), Op::Insert(v));
            }
            Planned::Delete(k) => {
                self.buffer.insert(k.clone(), Op::Delete);
            }
            _ => {}
        }
        Ok(true)
    }

    /// One attempt of a pessimistic lock request on `key`:
    /// `Ok(Some(value))` locked, `Ok(None)` try again later.
    fn lock_key(
        &mut self,
        w: &mut World,
        key: &[u8],
        want_value: bool,
        should_not_exist: bool,
    ) -> Result<Option<Option<Vec<u8>>>, String> {
        let first = self.primary.is_none();
        let primary = self.primary.get_or_insert_with(|| key.to_vec()).clone();
        // As the client's: a request that may lock with conflict goes at
        // the transaction's latest for_update_ts, any other at a fresh one.
        let for_update_ts = if should_not_exist {
            w.get_ts()
        } else {
            self.for_update_ts
        };
        self.for_update_ts = self.for_update_ts.max(for_update_ts);
        w.history.txns[self.id].for_update_ts = self.for_update_ts;
        let ttl = w.params.ttl_ms + w.now_ms().saturating_sub(self.began_ms);
        let mut request = AcquirePessimisticLock::new(
            vec![Key::from_raw(key)],
            primary,
            self.start_ts,
            for_update_ts,
        )
        .lock_ttl(ttl);
        if want_value {
            request = request.return_values();
        }
        // As the client's: a newer commit is locked over and read (an
        // insert's constraint is checked by a retry instead).
        if !should_not_exist {
            request = request.allow_lock_with_conflict();
        }
        for (_, insert) in &mut request.keys {
            *insert = should_not_exist;
        }
        let result = w.storage(key).acquire_pessimistic_lock(request);
        if w.tracing() {
            let answer = match &result {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("error: {e}"),
            };
            w.note(format!(
                "> t{}: lock {}{} for_update_ts={} -> {answer}",
                self.id,
                String::from_utf8_lossy(key),
                if want_value { " return_value" } else { "" },
                World::fmt_ts(for_update_ts)
            ));
        }
        match result {
            Ok(results) => {
                if first {
                    self.heart_beating = true;
                    self.last_beat_ms = w.now_ms();
                }
                let (value, read_at) = match results.into_iter().next() {
                    Some(PessimisticLockKeyResult::Value(v)) => (v, for_update_ts),
                    // Read at the newer commit; the transaction commits
                    // above a fresh timestamp, as the client's does.
                    Some(PessimisticLockKeyResult::LockedWithConflict { value, conflict_ts }) => {
                        self.for_update_ts = self.for_update_ts.max(w.get_ts());
                        w.history.txns[self.id].for_update_ts = self.for_update_ts;
                        (value.filter(|_| want_value), conflict_ts)
                    }
                    _ => (None, for_update_ts),
                };
                w.history.txns[self.id]
                    .locked_at
                    .insert(key.to_vec(), read_at);
                Ok(Some(value))
            }
            Err(e) => {
                if first {
                    self.primary = None;
                }
                match e {
                    Error::Mvcc(percolate_mvcc::Error::WriteConflict {
                        reason: WriteConflictReason::PessimisticRetry,
                        ..
                    }) => Ok(None),
                    e => {
                        let lock = into_lock(e).map_err(|e| format!("error: {e}"))?;
                        w.resolve(&[lock], TimeStamp::zero())
                            .map_err(|e| format!("error: {e}"))?;
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Fails the transaction before its commit point: its locks go.
    fn give_up(&mut self, w: &mut World, reason: String) {
        if w.tracing() {
            w.note(format!("  t{} aborts: {reason}", self.id));
        }
        w.history.txns[self.id].outcome = Outcome::Aborted(reason);
        self.heart_beating = false;
        match &self.commit {
            Some(commit) => {
                // Committer::rollback_in_background.
                self.phase = Phase::Unlock {
                    left: commit.keys_by_region.iter().cloned().collect(),
                    pessimistic: false,
                };
            }
            None => {
                // PessimisticTransaction::release_locks (nothing for an
                // optimistic one: nothing was sent).
                let mut by_region: Vec<(usize, Vec<Key>)> = Vec::new();
                for k in std::mem::take(&mut self.locked) {
                    let region = w.client().cluster().region_index(&k);
                    match by_region.iter_mut().find(|(r, _)| *r == region) {
                        Some((_, ks)) => ks.push(Key::from_raw(&k)),
                        None => by_region.push((region, vec![Key::from_raw(&k)])),
                    }
                }
                self.phase = if by_region.is_empty() {
                    Phase::Done
                } else {
                    Phase::Unlock {
                        left: by_region.into(),
                        pessimistic: true,
                    }
                };
            }
        }
    }

    /// The commit begins (`Committer::new`).
    fn start_commit(&mut self, w: &mut World) {
        if self.duplicate {
            // `Transaction::check_buffer`: nothing is sent.
            self.give_up(w, "AlreadyExist: an insert over its own write".into());
            return;
        }
        if self.buffer.is_empty() {
            if w.tracing() {
                w.note(format!("> t{}: commit -> read only", self.id));
            }
            w.history.txns[self.id].outcome = Outcome::Committed(self.start_ts);
            self.phase = Phase::Done;
            return;
        }
        let buffer = std::mem::take(&mut self.buffer);
        // The client's own plan: primary, secondaries, batches, protocol.
        let writes = buffer
            .iter()
            .map(|(raw, op)| {
                let k = Key::from_raw(raw);
                let mutation = match op {
                    Op::Put(v) => Mutation::put(k, v.clone()),
                    Op::Delete => Mutation::delete(k),
                    Op::Insert(v) => Mutation::insert(k, v.clone()),
                    Op::DeleteInserted => Mutation::delete_inserted(k),
                    Op::Lock => Mutation::lock(k),
                };
                (raw.clone(), mutation)
            })
            .collect();
        let limits = PlanLimits {
            one_pc: self.opts.one_pc,
            async_commit: self.opts.async_commit,
            max_async_commit_keys: self.opts.max_async_commit_keys,
            max_batch_keys: self.opts.max_batch_keys,
        };
        let plan = CommitPlan::new(
            writes,
            |raw| w.client().cluster().region_index(raw),
            self.primary.clone(),
            limits,
        );
        let planned = plan.protocol;
        let keys_by_region = plan.keys_by_region();
        let batches: Vec<Batch> = plan
            .batches
            .into_iter()
            .map(|(region, mutations)| Batch { region, mutations })
            .collect();
        let (primary, secondaries) = (plan.primary, plan.secondaries);
        let key_count = plan.key_count;
        let record = &mut w.history.txns[self.id];
        record.writes = buffer;
        let lock_ttl_ms = w.params.ttl_ms + w.now_ms().saturating_sub(self.began_ms);
        let results = batches.iter().map(|_| None).collect();
        self.commit = Some(Committer {
            primary,
            keys_by_region,
            batches,
            planned,
            key_count,
            lock_ttl_ms,
            secondaries,
            for_update_ts: self.primary.as_ref().map(|_| self.for_update_ts),
            results,
        });
        if planned != CommitProtocol::OnePc && !self.heart_beating {
            self.heart_beating = true;
            self.last_beat_ms = w.now_ms();
        }
        if w.tracing() {
            let c = self.commit.as_ref().expect("just set");
            w.note(format!(
                "> t{}: commit {:?} primary={} batches={} ttl={}",
                self.id,
                c.planned,
                String::from_utf8_lossy(&c.primary),
                c.batches.len(),
                c.lock_ttl_ms
            ));
        }
        self.phase = Phase::Prewrite;
    }

    /// The prewrite command of batch `i` (`Committer::prewrite_command`).
    fn prewrite_command(&self, i: usize) -> Prewrite {
        let c = self.commit.as_ref().expect("committing");
        let shape = PrewriteShape {
            primary: &c.primary,
            secondaries: &c.secondaries,
            start_ts: self.start_ts,
            for_update_ts: c.for_update_ts,
            lock_ttl_ms: c.lock_ttl_ms,
            txn_size: c.key_count as u64,
            protocol: c.planned,
        };
        shape.command(c.batches[i].mutations.clone())
    }

    fn step_prewrite(&mut self, w: &mut World) -> Progress {
        let c = self.commit.as_ref().expect("committing");
        let unsent: Vec<usize> = (0..c.batches.len())
            .filter(|&i| c.results[i].is_none())
            .collect();
        let i = unsent[w.rng.index(unsent.len())];
        let region = c.batches[i].region;
        let command = self.prewrite_command(i);
        let race = w.cfg.faults.racing_reads && w.rng.chance(250);
        w.arm_race(race);
        let storage = &w.client().cluster().regions()[region];
        let result = storage.storage().write(command);
        w.arm_race(false);
        if w.tracing() {
            let keys: Vec<String> = c.batches[i]
                .mutations
                .iter()
                .map(|m| {
                    let raw = m.key.to_raw().unwrap_or_default();
                    String::from_utf8_lossy(&raw).into_owned()
                })
                .collect();
            let answer = match &result {
                Ok(r) if !r.locks.is_empty() => format!("locked ({})", r.locks.len()),
                Ok(r) => match (r.one_pc_commit_ts, r.min_commit_ts) {
                    (Some(ts), _) => format!("ok: one_pc_commit_ts={}", World::fmt_ts(ts)),
                    (None, Some(ts)) => format!("ok: min_commit_ts={}", World::fmt_ts(ts)),
                    (None, None) => "ok".into(),
                },
                Err(e) => format!("error: {e}"),
            };
            w.note(format!(
                "> t{}: prewrite {} start={} -> {answer}",
                self.id,
                keys.join(" "),
                World::fmt_ts(self.start_ts)
            ));
        }
        w.collect_raced();
        let result = match result {
            Ok(result) => result,
            Err(e) => {
                self.give_up(w, format!("prewrite: {e}"));
                return Progress::Stepped;
            }
        };
        if !result.locks.is_empty() {
            let alive = match w.resolve(&result.locks, TimeStamp::zero()) {
                Ok((alive, _)) => alive,
                Err(e) => {
                    self.give_up(w, format!("resolve: {e}"));
                    return Progress::Stepped;
                }
            };
            // Wait-die: give way to an older transaction at once.
            if alive.iter().any(|lock| lock.lock_version < self.start_ts) {
                self.give_up(w, "an older transaction holds a key".into());
                return Progress::Stepped;
            }
            if alive.is_empty() {
                return Progress::Stepped;
            }
            if self.blocked + 1 >= MAX_BLOCKED {
                self.give_up(w, "resolve timeout".into());
                return Progress::Stepped;
            }
            return Progress::Blocked;
        }
        self.commit.as_mut().expect("committing").results[i] = Some(result);
        if self
            .commit
            .as_ref()
            .is_some_and(|c| c.results.iter().all(Option::is_some))
        {
            self.prewrites_done(w);
        }
        Progress::Stepped
    }

    /// Every batch prewritten: 1PC and async commit are committed now
    /// (unless they fell back), 2PC goes on to its primary.
    fn prewrites_done(&mut self, w: &mut World) {
        let c = self.commit.as_mut().expect("committing");
        match decide(c.planned, c.results.iter().flatten()) {
            Decision::Committed(info) if info.protocol == CommitProtocol::OnePc => {
                self.acknowledge(w, info.commit_ts, "1PC");
                self.phase = Phase::Done;
            }
            Decision::Committed(info) => {
                let commit_ts = info.commit_ts;
                let left = c.keys_by_region.iter().cloned().collect();
                self.acknowledge(w, commit_ts, "async commit");
                self.phase = Phase::CommitSecondaries { commit_ts, left };
            }
            Decision::TwoPhase => {
                // A 1PC prewrite that fell back left its locks.
                if !self.heart_beating {
                    self.heart_beating = true;
                    self.last_beat_ms = w.now_ms();
                }
                self.phase = Phase::CommitPrimary;
            }
        }
    }

    fn acknowledge(&self, w: &mut World, commit_ts: TimeStamp, how: &str) {
        if w.tracing() {
            w.note(format!(
                "  t{} committed ({how}) at {}",
                self.id,
                World::fmt_ts(commit_ts)
            ));
        }
        w.history.txns[self.id].outcome = Outcome::Committed(commit_ts);
    }

    fn step_commit_primary(&mut self, w: &mut World) -> Progress {
        let c = self.commit.as_ref().expect("committing");
        let primary = Key::from_raw(&c.primary);
        for _ in 0..8 {
            let commit_ts = w.get_ts();
            let commit = Commit {
                keys: vec![primary.clone()],
                start_ts: self.start_ts,
                commit_ts,
            };
            let result = w.storage(&c.primary).write(commit);
            if w.tracing() {
                let answer = match &result {
                    Ok(_) => "ok".to_string(),
                    Err(e) => format!("error: {e}"),
                };
                w.note(format!(
                    "> t{}: commit {} start={} commit={} -> {answer}",
                    self.id,
                    String::from_utf8_lossy(&c.primary),
                    World::fmt_ts(self.start_ts),
                    World::fmt_ts(commit_ts)
                ));
            }
            match result {
                Ok(_) => {
                    let left = c
                        .keys_by_region
                        .iter()
                        .map(|(r, keys)| {
                            (
                                *r,
                                keys.iter().filter(|k| **k != primary).cloned().collect(),
                            )
                        })
                        .filter(|(_, keys): &(usize, Vec<Key>)| !keys.is_empty())
                        .collect();
                    self.acknowledge(w, commit_ts, "2PC");
                    self.phase = Phase::CommitSecondaries { commit_ts, left };
                    return Progress::Stepped;
                }
                Err(Error::Mvcc(percolate_mvcc::Error::CommitTsExpired { .. })) => continue,
                Err(e) => {
                    self.give_up(w, format!("commit: {e}"));
                    return Progress::Stepped;
                }
            }
        }
        w.harness_errors
            .push("CommitTsExpired eight times in a row".into());
        self.give_up(w, "commit ts kept expiring".into());
        Progress::Stepped
    }

    fn step_commit_secondaries(&mut self, w: &mut World) -> Progress {
        let Phase::CommitSecondaries { commit_ts, left } = &mut self.phase else {
            unreachable!("in the phase");
        };
        let commit_ts = *commit_ts;
        let Some((region, keys)) = left.pop_front() else {
            self.phase = Phase::Done;
            return Progress::Finished;
        };
        let storage = w.client().cluster().regions()[region].storage();
        let shown = w.tracing().then(|| show_keys(&keys));
        let result = storage.write(Commit {
            keys,
            start_ts: self.start_ts,
            commit_ts,
        });
        if let Some(shown) = shown {
            let answer = match result {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("error: {e}"),
            };
            w.note(format!(
                "> t{}: commit {shown} start={} commit={} -> {answer}",
                self.id,
                World::fmt_ts(self.start_ts),
                World::fmt_ts(commit_ts)
            ));
        }
        if matches!(&self.phase, Phase::CommitSecondaries { left, .. } if left.is_empty()) {
            self.phase = Phase::Done;
        }
        Progress::Stepped
    }

    fn step_unlock(&mut self, w: &mut World) -> Progress {
        let Phase::Unlock { left, pessimistic } = &mut self.phase else {
            unreachable!("in the phase");
        };
        let pessimistic = *pessimistic;
        let Some((region, keys)) = left.pop_front() else {
            self.phase = Phase::Done;
            return Progress::Finished;
        };
        let storage = w.client().cluster().regions()[region].storage();
        let shown = w.tracing().then(|| show_keys(&keys));
        if pessimistic {
            let _ = storage.write(PessimisticRollback {
                keys: keys.clone(),
                start_ts: self.start_ts,
                for_update_ts: TimeStamp::max(),
            });
        }
        let _ = storage.write(Unlock {
            keys,
            start_ts: self.start_ts,
        });
        if let Some(shown) = shown {
            w.note(format!(
                "> t{}: unlock {shown}{}",
                self.id,
                if pessimistic { " (pessimistic)" } else { "" }
            ));
        }
        if matches!(&self.phase, Phase::Unlock { left, .. } if left.is_empty()) {
            self.phase = Phase::Done;
        }
        Progress::Stepped
    }
}

fn show_keys(keys: &[Key]) -> String {
    keys.iter()
        .map(|k| String::from_utf8_lossy(&k.to_raw().unwrap_or_default()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn describe(op: &Planned) -> String {
    let k = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    match op {
        Planned::Get(key) => format!("get {}", k(key)),
        Planned::Scan { start, end, .. } => format!("scan {}..{}", k(start), k(end)),
        Planned::Put(key) => format!("put {}", k(key)),
        Planned::Delete(key) => format!("delete {}", k(key)),
        Planned::Insert(key) => format!("insert {}", k(key)),
        Planned::LockKey(key) => format!("lock_keys {}", k(key)),
        Planned::GetForUpdate(key) => format!("get_for_update {}", k(key)),
    }
}
