//! A client transaction: buffered writes, snapshot reads, and the commit
//! protocol (parallel prewrite, then 1PC, async commit or 2PC).

use std::collections::BTreeMap;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::time::{Duration, Instant};

use percolate_engine::{Durability, Engine, RocksEngine};
use percolate_mvcc::{Key, LockInfo, TimeStamp};
use smallvec::SmallVec;

use super::plan::{CommitPlan, Decision, PlanLimits, PrewriteShape, decide};
use super::scan::{ByteRange, Keys, Scan, ScanKind, ScanSource};
use super::{Backoff, Deadline, Inner, ParallelPrewrite, SecondaryCommits, key};
use crate::actions::prewrite::{Mutation, PrewriteResult};
use crate::commands::{Commit, Prewrite, Unlock};
use crate::fail;
use crate::metrics::ProtocolKind;
use crate::read::ReadOptions;
use crate::scheduler::Pending;
use crate::storage::{CommandOptions, Storage};
use crate::{Error, Result};

/// A buffered write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Put(Vec<u8>),
    Delete,
    Insert(Vec<u8>),
    Lock,
    /// A delete of a key this transaction inserted: committed as a delete
    /// that keeps the insert's check (`AlreadyExist` if the key exists),
    /// and an insert over it is an insert again.
    DeleteInserted,
}

impl Op {
    /// The prewrite mutation of this write to `key`.
    fn into_mutation(self, key: Key) -> Mutation {
        match self {
            Op::Put(v) => Mutation::put(key, v),
            Op::Delete => Mutation::delete(key),
            Op::Insert(v) => Mutation::insert(key, v),
            Op::Lock => Mutation::lock(key),
            Op::DeleteInserted => Mutation::delete_inserted(key),
        }
    }
}

/// How one commit is made: [`Transaction::commit_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitOptions {
    /// How every write of the commit reaches the disk, overriding
    /// [`ClientConfig::durability`](super::ClientConfig::durability) and
    /// the regions' own: [`Durability::Sync`] (the commit survives a power
    /// loss once `commit` returns; each write waits for an fsync) or
    /// [`Durability::Buffered`] (it survives a crash of the process, not
    /// of the machine). `None`: the client's default.
    pub durability: Option<Durability>,
}

impl CommitOptions {
    /// Options that make the commit durable on disk before it returns.
    pub fn sync() -> Self {
        CommitOptions {
            durability: Some(Durability::Sync),
        }
    }

    /// Options that leave the commit in the operating system's buffers
    /// when it returns (survives a process crash, not a power loss).
    pub fn buffered() -> Self {
        CommitOptions {
            durability: Some(Durability::Buffered),
        }
    }
}

/// How a transaction committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitProtocol {
    /// Nothing to write: no command was sent.
    ReadOnly,
    /// Prewrite and commit in one command (one region, one batch).
    OnePc,
    /// Committed once every prewrite succeeded, at the largest
    /// min_commit_ts; the commit records are written in the background.
    AsyncCommit,
    /// Two phases: commit_ts from the oracle, the primary committed first
    /// (the commit point), the secondaries in the background.
    TwoPc,
}

/// The outcome of a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit_ts (the start_ts for a read-only transaction).
    pub commit_ts: TimeStamp,
    /// How it committed.
    pub protocol: CommitProtocol,
}

/// An optimistic transaction at snapshot isolation.
///
/// Reads see the snapshot at the start_ts plus the transaction's own
/// writes. Writes are buffered until [`commit`](Self::commit), which checks
/// for conflicts (another transaction committed a key this one writes
/// after its start_ts: `WriteConflict`). `commit` and
/// [`rollback`](Self::rollback) consume the transaction; dropping it
/// uncommitted discards its writes (nothing was sent).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let client = percolate_txn::client::Client::open(dir.path())?;
/// let mut txn = client.begin()?;
/// txn.put(b"alice", b"10");
/// txn.put(b"bob", b"5");
/// // Its own writes, merged into its snapshot.
/// assert_eq!(txn.get(b"alice")?, Some(b"10".to_vec()));
/// let keys: Vec<_> = txn.keys(&b"a"[..]..&b"c"[..]).collect::<Result<_, _>>()?;
/// assert_eq!(keys, vec![b"alice".to_vec(), b"bob".to_vec()]);
/// let info = txn.commit()?;
/// // A later transaction starts at or above its commit_ts, and reads it.
/// let later = client.begin()?;
/// assert!(later.start_ts() >= info.commit_ts);
/// assert_eq!(later.get(b"bob")?, Some(b"5".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Transaction<E: Engine = RocksEngine> {
    client: Arc<Inner<E>>,
    start_ts: TimeStamp,
    /// When the start_ts was taken, by this process's coarse clock
    /// ([`coarse_ms`]): a lock's TTL counts from its start_ts, so the locks
    /// of a transaction that stayed open for a while get that time on top
    /// of the configured TTL. `None` for a
    /// [`Client::view`](super::Client::view), which cannot commit: a
    /// read-only snapshot spares the clock read.
    began: Option<u64>,
    buffer: BTreeMap<Vec<u8>, Op>,
    /// The first key [`insert`](Self::insert)ed over this transaction's
    /// own put or insert of it: the commit fails with `AlreadyExist`.
    duplicate: Option<Vec<u8>>,
    /// Holds automatic GC's safe point below the start_ts while alive.
    _live: super::auto_gc::LiveTs,
}

impl<E: Engine> std::fmt::Debug for Transaction<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("start_ts", &self.start_ts)
            .field("buffered", &self.buffer.len())
            .finish()
    }
}

/// One prewrite command's mutations, for one region.
struct Batch {
    region: usize,
    mutations: Vec<Mutation>,
    /// The watched keys among them (see [`Prewrite::notify`]); empty
    /// unless the client has observers.
    notify: Vec<Key>,
}

impl Batch {
    /// The batch of `mutations` in `region`, notifying those in `watched`
    /// (sorted).
    fn new(region: usize, mutations: Vec<Mutation>, watched: &[Key]) -> Self {
        let notify = if watched.is_empty() {
            Vec::new()
        } else {
            mutations
                .iter()
                .filter(|m| watched.binary_search(&m.key).is_ok())
                .map(|m| m.key.clone())
                .collect()
        };
        Batch {
            region,
            mutations,
            notify,
        }
    }
}

impl<E: Engine> Transaction<E> {
    pub(super) fn new(
        client: Arc<Inner<E>>,
        start_ts: TimeStamp,
        live: super::auto_gc::LiveTs,
    ) -> Self {
        Transaction {
            began: Some(coarse_ms()),
            ..Self::read_only(client, start_ts, live)
        }
    }

    /// A transaction that is only read through a shared reference (see
    /// [`Client::view`](super::Client::view)): it never commits, so it needs
    /// no begin time.
    pub(super) fn read_only(
        client: Arc<Inner<E>>,
        start_ts: TimeStamp,
        live: super::auto_gc::LiveTs,
    ) -> Self {
        Transaction {
            client,
            start_ts,
            began: None,
            buffer: BTreeMap::new(),
            duplicate: None,
            _live: live,
        }
    }

    /// The transaction's start_ts: its snapshot.
    pub fn start_ts(&self) -> TimeStamp {
        self.start_ts
    }

    /// The value of `key`: this transaction's own write if it made one,
    /// otherwise the snapshot's.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.buffer.get(key) {
            Some(Op::Put(value) | Op::Insert(value)) => Ok(Some(value.clone())),
            Some(Op::Delete | Op::DeleteInserted) => Ok(None),
            Some(Op::Lock) | None => self.client.get(key, self.start_ts, &ReadOptions::default()),
        }
    }

    /// The values of `keys`, in the order asked (`None` where a key does
    /// not exist).
    pub fn batch_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let unbuffered: Vec<&[u8]> = keys
            .iter()
            .copied()
            .filter(|k| matches!(self.buffer.get(*k), None | Some(Op::Lock)))
            .collect();
        let mut found: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for (k, v) in self.client.batch_get(&unbuffered, self.start_ts)? {
            found.insert(raw(k)?, v);
        }
        keys.iter()
            .map(|k| match self.buffer.get(*k) {
                Some(Op::Put(v) | Op::Insert(v)) => Ok(Some(v.clone())),
                Some(Op::Delete | Op::DeleteInserted) => Ok(None),
                Some(Op::Lock) | None => Ok(found.get(*k).cloned()),
            })
            .collect()
    }

    super::scan::range_reads!();

    /// What its scans read: the client, the snapshot's ts, and the own
    /// writes merged in; never refused (the start_ts is the oracle's).
    fn scan_source(&self) -> ScanSource<'_, E> {
        (&self.client, self.start_ts, Some(&self.buffer), None)
    }

    /// Sets `key` to `value` at commit. Over an earlier
    /// [`insert`](Self::insert) of the key by this transaction (deleted
    /// since or not), it stays an insert with the new value, as in TiDB:
    /// the commit still fails with `AlreadyExist` if the key exists then.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let key = key.into();
        let op = match self.buffer.get(&key) {
            Some(Op::Insert(_) | Op::DeleteInserted) => Op::Insert(value.into()),
            _ => Op::Put(value.into()),
        };
        self.buffer.insert(key, op);
    }

    /// Deletes `key` at commit. It replaces an earlier [`insert`](Self::insert)
    /// of the key by this transaction, whose check that the key does not
    /// exist stands, as TiDB keeps it: the commit fails with
    /// `AlreadyExist` if the key exists then, and otherwise writes a
    /// delete of the absent key. An insert after the delete is an insert
    /// again.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        let key = key.into();
        let op = match self.buffer.get(&key) {
            Some(Op::Insert(_) | Op::DeleteInserted) => Op::DeleteInserted,
            _ => Op::Delete,
        };
        self.buffer.insert(key, op);
    }

    /// Sets `key` to `value` at commit, which fails with `AlreadyExist` if
    /// the key exists then.
    ///
    /// The transaction's own writes come first, as in TiDB: a key this
    /// transaction deleted does not exist for it, so the insert is a put
    /// (an insert again where the delete undid the transaction's own
    /// insert: its check that the key does not exist stands); a key it put
    /// or inserted already exists, so the commit fails with `AlreadyExist`
    /// (naming this transaction's start_ts) and the earlier write stays
    /// buffered.
    pub fn insert(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let key = key.into();
        match self.buffer.get(&key) {
            Some(Op::Delete) => {
                self.buffer.insert(key, Op::Put(value.into()));
            }
            Some(Op::Put(_) | Op::Insert(_)) => {
                self.duplicate.get_or_insert(key);
            }
            Some(Op::Lock | Op::DeleteInserted) | None => {
                self.buffer.insert(key, Op::Insert(value.into()));
            }
        }
    }

    /// Deletes `key` at commit, a key the caller (a pessimistic
    /// transaction) holds the lock of: whatever this transaction wrote to
    /// it before, a delete (a key it inserted was checked not to exist when
    /// it was locked, and no one else can have written it since).
    pub(super) fn delete_locked(&mut self, key: Vec<u8>) {
        self.buffer.insert(key, Op::Delete);
    }

    /// Whether `key` is buffered as a delete (the caller, a pessimistic
    /// transaction, holds its lock).
    pub(super) fn buffers_delete(&self, key: &[u8]) -> bool {
        matches!(self.buffer.get(key), Some(Op::Delete))
    }

    /// The error of an insert over this transaction's own put or insert of
    /// `key`.
    pub(super) fn duplicate_error(&self, key: &[u8]) -> Error {
        percolate_mvcc::Error::AlreadyExist {
            key: Key::from_raw(key),
            existing_start_ts: self.start_ts,
        }
        .into()
    }

    /// Makes the commit fail with a write conflict if another transaction
    /// commits a write to any of `keys` after this one's start_ts, without
    /// writing them (guards a read against concurrent writers).
    pub fn lock_keys<K: Into<Vec<u8>>>(&mut self, keys: impl IntoIterator<Item = K>) {
        for key in keys {
            self.buffer.entry(key.into()).or_insert(Op::Lock);
        }
    }

    /// Discards the transaction's writes. Nothing was sent before commit,
    /// so nothing needs undoing.
    pub fn rollback(self) -> Result<()> {
        Ok(())
    }

    /// Commits: see the module documentation of [`client`](super) for the
    /// protocol. On error nothing of the transaction is visible, and its
    /// locks are being rolled back.
    ///
    /// Before anything is sent, the writes are checked: no empty key
    /// (`InvalidRequest`), and every key, value and the whole transaction
    /// within the [`Limit`](crate::Limit)s (`LimitExceeded`).
    ///
    /// `commit` consumes the transaction, so it cannot be used afterwards:
    ///
    /// ```compile_fail,E0382
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let client = percolate_txn::client::Client::open(dir.path()).unwrap();
    /// let mut txn = client.begin().unwrap();
    /// txn.put(b"k", b"v");
    /// txn.commit().unwrap();
    /// txn.put(b"k", b"again"); // error[E0382]: borrow of moved value: `txn`
    /// ```
    pub fn commit(mut self) -> Result<CommitInfo> {
        self.commit_buffer(None, CommitOptions::default())
    }

    /// Commits as [`commit`](Self::commit) does, with `options`: for
    /// example durable on disk before it returns, whatever the regions'
    /// default (see [`CommitOptions`]).
    pub fn commit_with(mut self, options: CommitOptions) -> Result<CommitInfo> {
        self.commit_buffer(None, options)
    }

    /// Commits the buffered writes, as a pessimistic transaction's with
    /// `pessimism`.
    pub(super) fn commit_buffer(
        &mut self,
        pessimism: Option<Pessimism>,
        options: CommitOptions,
    ) -> Result<CommitInfo> {
        self.check_buffer()?;
        let buffer = std::mem::take(&mut self.buffer);
        if buffer.is_empty() {
            return Ok(CommitInfo {
                commit_ts: self.start_ts,
                protocol: CommitProtocol::ReadOnly,
            });
        }
        self.client.check_writable()?;
        // Without the time already spent, a transaction kept open longer
        // than the TTL would write locks that are expired from the start,
        // and any reader could roll it back before its first heart beat.
        let lock_ttl_ms = self
            .client
            .config
            .lock_ttl_ms
            .saturating_add(self.open_ms());
        let durability = options.durability.or(self.client.config.durability);
        let metrics = &self.client.metrics;
        let start = metrics.is_enabled().then(Instant::now);
        let pessimistic = pessimism.is_some();
        let outcome = Committer::new(&self.client, self.start_ts, lock_ttl_ms, buffer, pessimism)
            .durability(durability)
            .run();
        match &outcome {
            Ok(info) => {
                let protocol = match info.protocol {
                    CommitProtocol::OnePc => Some(ProtocolKind::OnePc),
                    CommitProtocol::AsyncCommit => Some(ProtocolKind::AsyncCommit),
                    CommitProtocol::TwoPc => Some(ProtocolKind::TwoPc),
                    CommitProtocol::ReadOnly => None,
                };
                if let Some(protocol) = protocol {
                    metrics.committed(protocol, pessimistic, start);
                }
            }
            Err(e) if e.is_retryable() => metrics.conflict(),
            Err(_) => {}
        }
        outcome
    }

    /// Whether `key` is in the buffer (a write or a lock).
    pub(super) fn buffers(&self, key: &[u8]) -> bool {
        self.buffer.contains_key(key)
    }

    /// Takes `keys` out of the buffer where they are only locked (a
    /// pessimistic statement that failed gives its locks back).
    pub(super) fn forget_locks<'k>(&mut self, keys: impl IntoIterator<Item = &'k [u8]>) {
        for key in keys {
            if matches!(self.buffer.get(key), Some(Op::Lock)) {
                self.buffer.remove(key);
            }
        }
    }

    /// The buffered keys, in key order.
    pub(super) fn buffered_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.buffer.keys().map(Vec::as_slice)
    }

    /// How many keys are buffered.
    pub(super) fn buffered_len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether `key` has a buffered write (a Put, an Insert or a Delete;
    /// not a lock).
    pub(super) fn buffers_write(&self, key: &[u8]) -> bool {
        matches!(
            self.buffer.get(key),
            Some(Op::Put(_) | Op::Insert(_) | Op::Delete | Op::DeleteInserted)
        )
    }

    /// The checks `commit` makes before it sends anything: no empty key,
    /// every size within the [`Limit`](crate::Limit)s.
    pub(super) fn check_buffer(&self) -> Result<()> {
        if let Some(key) = &self.duplicate {
            return Err(self.duplicate_error(key));
        }
        if self.buffer.contains_key(&[][..]) {
            return Err(Error::InvalidRequest {
                reason: "a transaction cannot write the empty key",
                key: None,
            });
        }
        crate::errors::check_write_size(self.buffer.iter().map(|(k, op)| {
            let value_len = match op {
                Op::Put(v) | Op::Insert(v) => v.len(),
                Op::Delete | Op::Lock | Op::DeleteInserted => 0,
            };
            (k.len(), value_len)
        }))
    }

    /// The client.
    pub(super) fn client(&self) -> &Arc<Inner<E>> {
        &self.client
    }

    /// How long the transaction has been open, in milliseconds, by the
    /// coarse clock: up to one of its ticks short.
    pub(super) fn open_ms(&self) -> u64 {
        self.began
            .map_or(0, |began| coarse_ms().saturating_sub(began))
    }
}

/// What a pessimistic transaction's commit adds: its primary (the key it
/// locked first) and its latest for_update_ts. Every key it writes holds
/// its pessimistic lock.
#[derive(Clone, Debug)]
pub(super) struct Pessimism {
    pub(super) primary: Vec<u8>,
    pub(super) for_update_ts: TimeStamp,
}

/// Sends a command without waiting for its answer: it runs all the same.
/// Used for work after the commit point (secondary commits) and for
/// cleaning up after a failed commit; a failure there only leaves locks
/// that readers resolve.
fn forget<T>(pending: Pending<T>) {
    drop(pending);
}

/// Milliseconds of the kernel's coarse monotonic clock
/// (`CLOCK_MONOTONIC_COARSE`: the time of its last tick, a few
/// milliseconds apart at most, read from the vDSO without a system call or
/// a read of the CPU's time stamp counter). What a lock's TTL adds for the
/// time a transaction was open is counted by it: milliseconds, where a
/// tick's error is no matter, on the path of every commit and lock
/// request.
pub(super) fn coarse_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    u64::try_from(now.tv_sec).map_or(0, |secs| {
        secs.saturating_mul(1000) + u64::try_from(now.tv_nsec / 1_000_000).unwrap_or(0)
    })
}

pub(super) fn raw(key: Key) -> Result<Vec<u8>> {
    key.try_into_raw().map_err(|(key, e)| {
        percolate_mvcc::Error::corruption(percolate_engine::Cf::Write, key.as_encoded(), e).into()
    })
}

/// Runs the commit protocol of one transaction: prewrites every batch,
/// then commits as [`decide`] rules from the answers (1PC, async commit, or
/// 2PC at a commit_ts from the oracle).
struct Committer<'a, E: Engine> {
    client: &'a Inner<E>,
    start_ts: TimeStamp,
    /// A pessimistic transaction's latest for_update_ts.
    for_update_ts: Option<TimeStamp>,
    primary: Vec<u8>,
    /// One for every 1PC commit: kept inline.
    batches: SmallVec<[Batch; 1]>,
    /// The protocol the prewrites ask for ([`CommitPlan::protocol`]); the
    /// one the commit ends with is [`decide`]d from their answers.
    planned: CommitProtocol,
    key_count: usize,
    /// The TTL of every lock: the configured one plus the time the
    /// transaction was open before its commit began.
    lock_ttl_ms: u64,
    /// Every key but the primary, raw, for an async-commit primary lock;
    /// empty for the other protocols.
    secondaries: Vec<Vec<u8>>,
    /// Set once the transaction is committed (its commit point passed):
    /// from then on an error must not unlock anything.
    committed: bool,
    /// Set once a prewrite of the commit wrote (it met no lock; a prewrite
    /// that fails or meets locks writes nothing). Until then a failed
    /// optimistic commit has no lock to remove: a 1PC commit that met a
    /// write conflict sends no unlock (one more command on a hot key's
    /// latches, and a worker woken for it).
    wrote: std::cell::Cell<bool>,
    /// Whether the primary lock is kept alive by heart beats.
    heart_beating: bool,
    /// How every command of the commit is written (`None`: each region's
    /// durability).
    durability: Option<Durability>,
    /// How many watched keys it writes (observers' notifications).
    notifies: usize,
    /// Set once a prewrite of the commit waited for an async-commit lock
    /// to go (see [`ClientConfig::async_commit_prewrite_wait`]).
    ///
    /// [`ClientConfig::async_commit_prewrite_wait`]: super::ClientConfig::async_commit_prewrite_wait
    waited_for_commit: std::cell::Cell<bool>,
}

impl<'a, E: Engine> Committer<'a, E> {
    fn new(
        client: &'a Inner<E>,
        start_ts: TimeStamp,
        lock_ttl_ms: u64,
        buffer: BTreeMap<Vec<u8>, Op>,
        pessimism: Option<Pessimism>,
    ) -> Self {
        let (writes, watched) = mutations(client, buffer);
        let (pessimistic_primary, for_update_ts) = match pessimism {
            Some(p) => (Some(p.primary), Some(p.for_update_ts)),
            None => (None, None),
        };
        let plan = CommitPlan::new(
            writes,
            |raw| client.cluster.region_index(raw),
            pessimistic_primary,
            plan_limits(&client.config),
        );
        let regions = client.cluster.regions();
        for (region, mutations) in &plan.batches {
            regions[*region]
                .storage()
                .prefetch(mutations.iter().map(|m| &m.key));
        }
        let batches = plan
            .batches
            .into_iter()
            .map(|(region, mutations)| Batch::new(region, mutations, &watched))
            .collect();
        Committer {
            client,
            start_ts,
            for_update_ts,
            primary: plan.primary,
            batches,
            planned: plan.protocol,
            key_count: plan.key_count,
            lock_ttl_ms,
            secondaries: plan.secondaries,
            committed: false,
            wrote: std::cell::Cell::new(false),
            heart_beating: false,
            durability: None,
            notifies: watched.len(),
            waited_for_commit: std::cell::Cell::new(false),
        }
    }

    fn durability(mut self, durability: Option<Durability>) -> Self {
        self.durability = durability;
        self
    }

    /// The options of every command the commit sends.
    fn command_options(&self) -> CommandOptions {
        CommandOptions {
            durability: self.durability,
            ..CommandOptions::default()
        }
    }

    fn shape(&self) -> PrewriteShape<'_> {
        PrewriteShape {
            primary: &self.primary,
            secondaries: &self.secondaries,
            start_ts: self.start_ts,
            for_update_ts: self.for_update_ts,
            lock_ttl_ms: self.lock_ttl_ms,
            txn_size: self.key_count as u64,
            protocol: self.planned,
        }
    }

    fn prewrite_command(&self, batch: &Batch) -> Prewrite {
        let mut prewrite = self.shape().command(batch.mutations.clone());
        if !batch.notify.is_empty() {
            prewrite.notify = batch.notify.clone();
        }
        prewrite
    }

    fn run(mut self) -> Result<CommitInfo> {
        // A 1PC prewrite leaves no lock behind unless it falls back to 2PC,
        // and then the heart beats start (see `commit_in_two_phases`).
        if self.planned != CommitProtocol::OnePc {
            self.keep_alive();
        }
        let outcome = self.prewrite_and_commit();
        if self.heart_beating {
            self.client.heartbeats.stop(self.start_ts);
        }
        if self.notifies > 0 && outcome.is_ok() {
            self.client.observers.notified(self.notifies);
        }
        // A client dying at a fail point leaves its locks as they are.
        if let Err(e) = &outcome {
            if !self.committed && !crate::fail::is_death(e) {
                self.rollback_in_background();
            }
        }
        outcome
    }

    /// Prewrites every batch, then commits as [`decide`] rules.
    fn prewrite_and_commit(&mut self) -> Result<CommitInfo> {
        let results = self.prewrite_all()?;
        let decision = decide(self.planned, &results);
        self.committed = decision != Decision::TwoPhase;
        fail::check(fail::CLIENT_PREWRITE_ALL)?;
        match decision {
            Decision::Committed(info) => {
                if info.protocol == CommitProtocol::AsyncCommit {
                    // Committed now; the records follow.
                    self.commit_secondaries(info.commit_ts, None)?;
                }
                Ok(info)
            }
            Decision::TwoPhase => self.commit_in_two_phases(),
        }
    }

    /// 2PC, once every lock is written: the primary's commit is the commit
    /// point, the secondaries follow.
    fn commit_in_two_phases(&mut self) -> Result<CommitInfo> {
        // A 1PC prewrite that fell back left its locks: keep them alive.
        if !self.heart_beating {
            self.keep_alive();
        }
        let primary = key(&self.primary);
        let commit_ts = self.commit_primary(&primary)?;
        fail::check(fail::CLIENT_COMMIT_PRIMARY)?;
        self.commit_secondaries(commit_ts, Some(&primary))?;
        Ok(CommitInfo {
            commit_ts,
            protocol: CommitProtocol::TwoPc,
        })
    }

    /// Commits the primary at a commit_ts from the oracle, and returns it:
    /// the transaction is committed.
    fn commit_primary(&mut self, primary: &Key) -> Result<TimeStamp> {
        let region = self.client.cluster.region_index(&self.primary);
        let storage = self.client.cluster.regions()[region].storage();
        // Above every commit a pessimistic transaction locked over, which
        // its for_update_ts is at or above even where such a commit was
        // computed ahead of the oracle (see `PessimisticTransaction`'s
        // `locked`); otherwise the oracle's timestamp is the larger.
        let floor = self
            .for_update_ts
            .map_or(TimeStamp::zero(), TimeStamp::next);
        loop {
            let commit_ts = self.client.oracle.get_ts()?.max(floor);
            let commit = Commit {
                keys: vec![primary.clone()],
                start_ts: self.start_ts,
                commit_ts,
            };
            // On this thread: the caller waits for the answer anyway.
            match storage.write_with(commit, self.command_options()) {
                Ok(_) => {
                    self.committed = true;
                    return Ok(commit_ts);
                }
                // A reader that started after this commit_ts was taken pushed
                // the lock's min_commit_ts past it: a newer ts from the
                // oracle is above that reader's.
                Err(Error::Mvcc(percolate_mvcc::Error::CommitTsExpired { .. })) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the commit records of every key but `committed` (the
    /// primary, when 2PC committed it first), region by region, after the
    /// commit point.
    fn commit_secondaries(&self, commit_ts: TimeStamp, committed: Option<&Key>) -> Result<()> {
        let mut by_region = self.keys_by_region();
        if let Some(committed) = committed {
            for (_, keys) in &mut by_region {
                keys.retain(|k| k != committed);
            }
            by_region.retain(|(_, keys)| !keys.is_empty());
        }
        // Inline, the regions' commits go as one engine write (unless the
        // fail point must be able to stop the client between them).
        if by_region.len() > 1
            && self.client.config.secondary_commits == SecondaryCommits::Inline
            && !fail::is_armed(fail::CLIENT_COMMIT_SECONDARIES)
        {
            let regions = self.client.cluster.regions();
            let parts = by_region
                .into_iter()
                .map(|(region, keys)| {
                    let commit = Commit {
                        keys,
                        start_ts: self.start_ts,
                        commit_ts,
                    };
                    (regions[region].storage(), commit)
                })
                .collect();
            // A failure only leaves locks, which readers resolve.
            let _ = Storage::write_joint(parts, self.command_options());
            return Ok(());
        }
        for (region, keys) in by_region {
            self.commit_after_commit_point(region, keys, commit_ts);
            fail::check(fail::CLIENT_COMMIT_SECONDARIES)?;
        }
        Ok(())
    }

    /// Writes the commit records of `keys`, all in one region, after the
    /// commit point: on this thread or by the region's workers, as
    /// [`ClientConfig::secondary_commits`] says. A failure only leaves
    /// locks, which readers resolve: the transaction is committed.
    fn commit_after_commit_point(&self, region: usize, keys: Vec<Key>, commit_ts: TimeStamp) {
        let storage = self.client.cluster.regions()[region].storage();
        let commit = Commit {
            keys,
            start_ts: self.start_ts,
            commit_ts,
        };
        match self.client.config.secondary_commits {
            SecondaryCommits::Inline => {
                let _ = storage.write_with(commit, self.command_options());
            }
            SecondaryCommits::Background => {
                forget(storage.sched_write_with(commit, self.command_options()))
            }
        }
    }

    /// Every key, grouped by region index (built when needed: a 1PC commit
    /// that succeeds never asks).
    fn keys_by_region(&self) -> Vec<(usize, Vec<Key>)> {
        super::plan::keys_by_region(
            self.batches
                .iter()
                .map(|batch| (batch.region, batch.mutations.as_slice())),
        )
    }

    /// Keeps the primary lock alive with heart beats until the commit ends.
    fn keep_alive(&mut self) {
        self.client
            .heartbeats
            .keep_alive(self.start_ts, self.primary.clone());
        self.heart_beating = true;
    }

    /// Sends every batch at once and waits for all; batches blocked by other
    /// transactions' locks are resolved and sent again until the deadline.
    /// Returns one result per batch.
    fn prewrite_all(&self) -> Result<SmallVec<[PrewriteResult; 1]>> {
        let deadline = Deadline::after(self.client.config.resolve_timeout);
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        // With the fail point armed, batches go one at a time, so that it
        // can stop the client between them.
        let one_by_one = fail::is_armed(fail::CLIENT_PREWRITE_BATCH);
        if let ([batch], false) = (self.batches.as_slice(), one_by_one) {
            // One batch (every 1PC commit): on this thread, with none of
            // the bookkeeping of batches answering apart.
            let storage = self.client.cluster.regions()[batch.region].storage();
            let shape = self.shape();
            loop {
                // The batch's mutations lent, not copied: they stay here
                // for the next attempt.
                let request = shape.request(&batch.mutations, &batch.notify);
                let result = storage.prewrite_in_place(request, self.command_options())?;
                if result.locks.is_empty() {
                    self.wrote.set(true);
                    return Ok(smallvec::smallvec![result]);
                }
                self.wait_for(&result.locks, &deadline, &mut backoff)?;
            }
        }
        let mut results: Vec<Option<PrewriteResult>> = self.batches.iter().map(|_| None).collect();
        loop {
            let locks = self.prewrite_round(&mut results, one_by_one)?;
            if !locks.is_empty() {
                self.wait_for(&locks, &deadline, &mut backoff)?;
                continue;
            }
            if one_by_one {
                fail::check(fail::CLIENT_PREWRITE_BATCH)?;
            }
            if results.iter().all(Option::is_some) {
                return Ok(results.into_iter().flatten().collect());
            }
        }
    }

    /// Sends the batches without a result yet (only the first of them,
    /// `one_by_one`), waits for every answer and records the results of
    /// those that met no lock. Returns the locks met.
    fn prewrite_round(
        &self,
        results: &mut [Option<PrewriteResult>],
        one_by_one: bool,
    ) -> Result<Vec<LockInfo>> {
        let unsent: Vec<usize> = (0..results.len())
            .filter(|&i| results[i].is_none())
            .take(if one_by_one { 1 } else { usize::MAX })
            .collect();
        let mut locks = Vec::new();
        let mut first_error = None;
        // Every reply is awaited even after an error, so that an Unlock
        // sent afterwards finds every prewrite finished.
        for (i, pending) in self.send_prewrites(unsent) {
            match pending.wait() {
                Ok(result) if result.locks.is_empty() => {
                    self.wrote.set(true);
                    results[i] = Some(result);
                }
                Ok(result) => locks.extend(result.locks),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(locks),
        }
    }

    /// Sends the prewrites of the batches `indexes`. In parallel, every
    /// batch but the last goes to its region's workers; the last runs on
    /// this thread meanwhile (it would only wait). Otherwise this thread
    /// runs them all.
    fn send_prewrites(&self, indexes: Vec<usize>) -> Vec<(usize, Pending<PrewriteResult>)> {
        let parallel = self.prewrites_in_parallel();
        if !parallel && indexes.len() > 1 {
            // All on this thread: as one engine write, the batches'
            // mutations lent, not copied.
            let regions = self.client.cluster.regions();
            let shape = self.shape();
            let parts = indexes
                .iter()
                .map(|&i| {
                    let batch = &self.batches[i];
                    (
                        regions[batch.region].storage(),
                        shape.request(&batch.mutations, &batch.notify),
                    )
                })
                .collect();
            let answers = Storage::prewrite_joint_in_place(parts, self.command_options());
            return indexes
                .into_iter()
                .zip(answers)
                .map(|(i, answer)| (i, Pending::ready(answer)))
                .collect();
        }
        let last = indexes.last().copied();
        indexes
            .into_iter()
            .map(|i| {
                let batch = &self.batches[i];
                let storage = self.client.cluster.regions()[batch.region].storage();
                let command = self.prewrite_command(batch);
                let pending = if Some(i) == last || !parallel {
                    Pending::ready(storage.write_with(command, self.command_options()))
                } else {
                    storage.sched_write_with(command, self.command_options())
                };
                (i, pending)
            })
            .collect()
    }

    /// Resolves the `locks` a prewrite met, and backs off while some stay
    /// (until the deadline). A prewrite never reads past a lock: it
    /// resolves them, it does not push them.
    fn wait_for(
        &self,
        locks: &[LockInfo],
        deadline: &Deadline,
        backoff: &mut Backoff,
    ) -> Result<()> {
        if self.wait_for_commit(locks)? {
            return Ok(());
        }
        let mut pushed = Vec::new();
        let alive = self
            .client
            .resolve_locks(locks, TimeStamp::zero(), &mut pushed)?;
        // Wait-die: wait only for younger transactions; give way to an
        // older one at once. Two committers whose prewrites cross then
        // never wait for each other: the younger aborts (unlocking its
        // keys without rollback records) and the older goes on.
        if let Some(older) = alive.iter().find(|lock| lock.lock_version < self.start_ts) {
            return Err(percolate_mvcc::Error::KeyIsLocked(Box::new((*older).clone())).into());
        }
        if let Some(lock) = alive.first() {
            deadline.check(&lock.key, lock)?;
            backoff.sleep();
        }
        Ok(())
    }

    /// Handles an unexpired async-commit lock among `locks` without
    /// resolving it (see [`ClientConfig::async_commit_prewrite_wait`]):
    /// gives up at once with `KeyIsLocked` when its transaction commits
    /// above this one's start_ts, and otherwise waits (once per commit) for
    /// the lock to go. Returns whether it waited; `false` leaves the locks
    /// to be resolved.
    ///
    /// [`ClientConfig::async_commit_prewrite_wait`]: super::ClientConfig::async_commit_prewrite_wait
    fn wait_for_commit(&self, locks: &[LockInfo]) -> Result<bool> {
        let wait = self.client.config.async_commit_prewrite_wait;
        // A pessimistic transaction's conflicts are at its for_update_ts.
        if wait.is_zero() || self.for_update_ts.is_some() {
            return Ok(false);
        }
        let Some(lock) = locks.iter().find(|lock| lock.use_async_commit) else {
            return Ok(false);
        };
        // An expired lock may be an abandoned one: resolve it.
        let now = self.client.oracle.get_ts()?;
        if crate::actions::ttl_ran_out(lock.lock_version, lock.lock_ttl, now) {
            return Ok(false);
        }
        // Its commit_ts will be at least its min_commit_ts (an async-commit
        // lock's is fixed at prewrite): above the start_ts, this prewrite
        // meets the commit as a write conflict once the lock goes.
        if lock.min_commit_ts > self.start_ts {
            return Err(percolate_mvcc::Error::KeyIsLocked(Box::new(lock.clone())).into());
        }
        if self.waited_for_commit.replace(true) {
            return Ok(false);
        }
        let storage = self.client.cluster.region_for(&lock.key).storage();
        let waits = storage.concurrency_manager().lock_waits();
        let watched = key(&lock.key);
        let ticket = waits.watch(std::slice::from_ref(&watched));
        // Watched first, then looked for: a removal in between is seen.
        let still_there = percolate_mvcc::MvccReader::new(storage.engine().latest())
            .load_lock(&watched)?
            .is_some_and(|held| held.ts == lock.lock_version);
        if still_there {
            waits.wait_for_release(&ticket, &watched, wait);
        }
        Ok(true)
    }

    /// Whether the prewrite batches go out at once
    /// ([`ClientConfig::parallel_prewrite`](super::ClientConfig::parallel_prewrite)).
    fn prewrites_in_parallel(&self) -> bool {
        match self.client.config.parallel_prewrite {
            ParallelPrewrite::Always => true,
            ParallelPrewrite::Never => false,
            ParallelPrewrite::WhenSynced => self.batches.iter().any(|batch| {
                let storage = self.client.cluster.regions()[batch.region].storage();
                self.durability.unwrap_or(storage.durability()) == Durability::Sync
            }),
        }
    }

    /// Removes this transaction's locks, without waiting, after it gave up
    /// before its commit point (every prewrite has answered by then: see
    /// [`Unlock`]), so they do not linger until they expire.
    fn rollback_in_background(&self) {
        self.client.metrics.rolled_back();
        // A pessimistic transaction's locks were taken before its commit.
        if !self.wrote.get() && self.for_update_ts.is_none() {
            return;
        }
        for (region, keys) in self.keys_by_region() {
            let storage = self.client.cluster.regions()[region].storage();
            forget(storage.sched_write(Unlock {
                keys,
                start_ts: self.start_ts,
            }));
        }
    }
}

/// The mutations of `buffer` with their raw keys, in key order, and the
/// watched keys among them (only a client with observers looks).
fn mutations<E: Engine>(
    client: &Inner<E>,
    buffer: BTreeMap<Vec<u8>, Op>,
) -> (Vec<(Vec<u8>, Mutation)>, Vec<Key>) {
    let mut watched: Vec<Key> = Vec::new();
    let watching = client.observers.is_active();
    let writes = buffer
        .into_iter()
        .map(|(raw, op)| {
            let k = key(&raw);
            if watching && op != Op::Lock && client.observers.watches(&raw) {
                watched.push(k.clone());
            }
            (raw, op.into_mutation(k))
        })
        .collect();
    (writes, watched)
}

/// The parts of the client's configuration that shape a [`CommitPlan`].
fn plan_limits(config: &super::ClientConfig) -> PlanLimits {
    PlanLimits {
        one_pc: config.one_pc,
        async_commit: config.async_commit,
        max_async_commit_keys: config.max_async_commit_keys,
        max_batch_keys: config.max_batch_keys,
    }
}
