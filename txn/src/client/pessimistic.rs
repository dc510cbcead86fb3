//! A pessimistic transaction: keys are locked as they are read for update
//! or written, so that the commit cannot meet a write conflict on them.

use std::ops::RangeBounds;
use std::time::Duration;

use percolate_engine::{Engine, RocksEngine};
use percolate_mvcc::{Key, TimeStamp, WriteConflictReason};

use super::resolver::into_lock;
use super::scan::{Keys, Scan};
use super::transaction::{CommitInfo, CommitOptions, Pessimism, Transaction};
use super::{Backoff, Deadline, Inner, key};
use crate::actions::acquire_pessimistic_lock::{PessimisticLockKeyResult, PessimisticLockOptions};
use crate::commands::{AcquirePessimisticLock, PessimisticRollback, Unlock};
use crate::{Error, Result};

/// A pessimistic transaction at snapshot isolation for its plain reads.
///
/// [`get_for_update`](Self::get_for_update), [`lock_keys`](Self::lock_keys)
/// and the writes ([`put`](Self::put), [`delete`](Self::delete),
/// [`insert`](Self::insert)) lock their keys at once, with a pessimistic
/// lock at the transaction's `for_update_ts` (a one-key request goes at
/// the latest one, a request of several keys at a fresh one from the
/// oracle; either way the key is read at its newest commit): another
/// transaction's lock in the way
/// is waited for (up to [`ClientConfig::lock_wait_timeout`](super::ClientConfig::lock_wait_timeout)
/// per round, resolved if its owner is gone), a deadlock fails at once with
/// [`Error::Deadlock`], and a commit newer than the `for_update_ts` (the
/// usual end of a wait) is locked over in the same request, which then
/// reads the key at that commit (TiKV's lock with conflict; a request
/// locking several keys of a region at once takes a newer `for_update_ts`
/// and tries again): the statement is retried, not the transaction. A
/// locked key is this transaction's until it commits or rolls back, so the
/// commit meets no write conflict on it.
///
/// Plain reads ([`get`](Self::get), [`scan`](Self::scan)) read the snapshot
/// at the start_ts, as an optimistic transaction's do, and lock nothing;
/// `get_for_update` reads the latest committed value (at its
/// `for_update_ts`).
///
/// The first key locked is the primary. Its lock is kept alive by heart
/// beats while the transaction is open. [`commit`](Self::commit) prewrites
/// every key over its pessimistic lock (1PC or async commit where they
/// apply); [`rollback`](Self::rollback), a failed commit, or dropping the
/// transaction releases the locks.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let client = percolate_txn::client::Client::open(dir.path())?;
/// let mut txn = client.begin_pessimistic()?;
/// // Locked from here on, at its latest committed value.
/// let old = txn.get_for_update(b"counter")?;
/// let n: u64 = old.map_or(0, |v| String::from_utf8_lossy(&v).parse().unwrap_or(0));
/// txn.put(b"counter", (n + 1).to_string())?;
/// txn.commit()?;
/// assert_eq!(client.get_latest(b"counter")?, Some(b"1".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PessimisticTransaction<E: Engine = RocksEngine> {
    txn: Transaction<E>,
    /// The primary, once a key is locked.
    primary: Option<Vec<u8>>,
    /// The for_update_ts of the latest lock request.
    for_update_ts: TimeStamp,
    /// Set once the transaction committed or rolled back.
    finished: bool,
}

impl<E: Engine> std::fmt::Debug for PessimisticTransaction<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PessimisticTransaction")
            .field("start_ts", &self.txn.start_ts())
            .field("for_update_ts", &self.for_update_ts)
            .field("locked", &self.txn.buffered_len())
            .finish()
    }
}

impl<E: Engine> PessimisticTransaction<E> {
    pub(super) fn new(txn: Transaction<E>) -> Self {
        let start_ts = txn.start_ts();
        PessimisticTransaction {
            txn,
            primary: None,
            for_update_ts: start_ts,
            finished: false,
        }
    }

    /// The transaction's start_ts: the snapshot of its plain reads.
    pub fn start_ts(&self) -> TimeStamp {
        self.txn.start_ts()
    }

    /// The newest for_update_ts its locked keys were read at: the start_ts
    /// until a lock request meets a commit newer than it, then a fresh
    /// timestamp above that commit.
    pub fn for_update_ts(&self) -> TimeStamp {
        self.for_update_ts
    }

    /// The value of `key` at the snapshot (or this transaction's own
    /// write); locks nothing.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.txn.get(key)
    }

    /// The values of `keys` at the snapshot (or own writes), in the order
    /// asked; locks nothing.
    pub fn batch_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.txn.batch_get(keys)
    }

    /// The pairs with keys in `range` at the snapshot, in key order, own
    /// writes included; locks nothing (see [`Transaction::scan`]).
    pub fn scan<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Scan<'_, E> {
        self.txn.scan(range)
    }

    /// Like [`scan`](Self::scan), from the end of the range down.
    pub fn scan_reverse<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Scan<'_, E> {
        self.txn.scan_reverse(range)
    }

    /// The keys in `range` at the snapshot, own writes included; locks
    /// nothing.
    pub fn keys<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Keys<'_, E> {
        self.txn.keys(range)
    }

    /// Locks `key` and returns its latest committed value (or this
    /// transaction's own write): `SELECT ... FOR UPDATE`.
    pub fn get_for_update(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // Its own write is the value; a key only locked is read again (at
        // a fresh for_update_ts: a commit since its lock request is none of
        // this transaction's, and the lock request reads it).
        // (Every buffered key is locked.)
        if self.txn.buffers_write(key) {
            return self.txn.get(key);
        }
        let value = self.lock_one(key, true, false)?;
        self.txn.lock_keys([key]);
        Ok(value)
    }

    /// Locks `keys`: no other transaction can write them until this one
    /// ends. They are committed as Lock records if not written.
    ///
    /// All or nothing: on an error (a wait that timed out, a deadlock),
    /// the keys this call locked are released again, so that a
    /// transaction waiting for them (the other side of a deadlock) can go
    /// on, and a retry of the statement starts from where it began.
    pub fn lock_keys<K: Into<Vec<u8>>>(&mut self, keys: impl IntoIterator<Item = K>) -> Result<()> {
        let keys: Vec<Vec<u8>> = keys.into_iter().map(Into::into).collect();
        let unlocked: Vec<&[u8]> = keys
            .iter()
            .map(Vec::as_slice)
            .filter(|k| !self.txn.buffers(k))
            .collect();
        if unlocked.is_empty() {
            return Ok(());
        }
        check_keys(&unlocked)?;
        let mut rest = &unlocked[..];
        let chose_primary = self.primary.is_none();
        if chose_primary {
            self.lock_primary(rest[0], false, false)?;
            self.txn.lock_keys([rest[0]]);
            rest = &rest[1..];
        }
        let client = self.txn.client().clone();
        let mut locked: Vec<&[u8]> = unlocked[..unlocked.len() - rest.len()].to_vec();
        for (_, keys) in by_region(&client, rest) {
            if let Err(e) = self.lock_region(&client, &keys, false, false) {
                // (The failed region's own keys were released by
                // `lock_region`.)
                self.give_back(&client, &locked, chose_primary);
                return Err(e);
            }
            self.txn.lock_keys(keys.iter().copied());
            locked.extend(keys);
        }
        Ok(())
    }

    /// Releases `keys`, locked by a statement that then failed, and takes
    /// them out of the buffer; the primary too when the statement chose it
    /// (it locked nothing before), whose heart beats then stop.
    fn give_back(&mut self, client: &Inner<E>, keys: &[&[u8]], chose_primary: bool) {
        for (region, keys) in by_region(client, keys) {
            let keys = keys.iter().map(|k| key(k)).collect();
            let storage = client.cluster.regions()[region].storage();
            let _ = storage.pessimistic_rollback(keys, self.start_ts(), TimeStamp::max());
        }
        self.txn.forget_locks(keys.iter().copied());
        if chose_primary {
            client.heartbeats.stop(self.start_ts());
            self.primary = None;
        }
    }

    /// Locks `key` and sets it to `value` at commit.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        let key = key.into();
        self.lock_unlocked(&key)?;
        self.txn.put(key, value);
        Ok(())
    }

    /// Locks `key` and deletes it at commit.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> Result<()> {
        let key = key.into();
        self.lock_unlocked(&key)?;
        self.txn.delete_locked(key);
        Ok(())
    }

    /// Locks `key`, failing with `AlreadyExist` if it has a value, and sets
    /// it to `value` at commit.
    ///
    /// The transaction's own writes come first, as in TiDB: a key it
    /// deleted does not exist for it (already locked, it is put), and a
    /// key it put or inserted exists (`AlreadyExist` naming this
    /// transaction's start_ts; the earlier write stays).
    pub fn insert(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        let key = key.into();
        if self.txn.buffers_delete(&key) {
            self.txn.put(key, value);
            return Ok(());
        }
        if self.txn.buffers_write(&key) {
            return Err(self.txn.duplicate_error(&key));
        }
        self.lock_one(&key, false, true)?;
        self.txn.insert(key, value);
        Ok(())
    }

    /// Commits: every written or locked key is prewritten over its
    /// pessimistic lock, then committed as an optimistic transaction is
    /// (see [`Transaction::commit`]). On error nothing is visible and the
    /// locks are released.
    pub fn commit(self) -> Result<CommitInfo> {
        self.commit_with(CommitOptions::default())
    }

    /// Commits as [`commit`](Self::commit) does, with `options` (see
    /// [`CommitOptions`]).
    pub fn commit_with(mut self, options: CommitOptions) -> Result<CommitInfo> {
        self.finished = true;
        // (Finished: nothing reads the primary again.)
        let Some(primary) = self.primary.take() else {
            // Nothing locked, so nothing written.
            return self.txn.commit_buffer(None, options);
        };
        // Refused before anything is sent: nothing was prewritten, so the
        // pessimistic locks are released here.
        if let Err(e) = self.txn.check_buffer() {
            // (The refusal is the error to report; a lock left by a failed
            // release goes with its TTL.)
            let _ = self.release_locks();
            return Err(e);
        }
        let pessimism = Pessimism {
            primary,
            for_update_ts: self.for_update_ts,
        };
        // Every locked key is in the buffer, the primary first among them:
        // the commit prewrites them all, and on a failure before its commit
        // point unlocks them all (and on a failure after it, leaves them to
        // be rolled forward). The heart beats stop however it ends, a
        // panic included (its locks then go with their TTL).
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.txn.commit_buffer(Some(pessimism), options)
        }));
        self.txn.client().heartbeats.stop(self.start_ts());
        outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// Releases the locks; nothing was written. Every region is asked
    /// even when one fails; the first failure is returned (its locks then
    /// go when their TTL runs out, the heart beats having stopped).
    pub fn rollback(mut self) -> Result<()> {
        self.finished = true;
        self.release_locks()
    }

    /// Locks `key` unless this transaction holds its lock already (every
    /// key in its buffer). The caller buffers it.
    fn lock_unlocked(&mut self, key: &[u8]) -> Result<()> {
        if self.txn.buffers(key) {
            return Ok(());
        }
        self.lock_one(key, false, false).map(drop)
    }

    /// Locks `key` (again, if held: a locking read is a fresh read at a new
    /// for_update_ts), returning its value when `want_value`. The caller
    /// buffers it.
    fn lock_one(
        &mut self,
        key: &[u8],
        want_value: bool,
        should_not_exist: bool,
    ) -> Result<Option<Vec<u8>>> {
        check_keys(&[key])?;
        if self.primary.is_none() {
            return self.lock_primary(key, want_value, should_not_exist);
        }
        let client = self.txn.client().clone();
        self.lock_region(&client, &[key], want_value, should_not_exist)
    }

    /// Locks the first key of the transaction, its primary, on its own, so
    /// that every later lock names a primary that exists; returns its value
    /// when `want_value`. Its heart beats start.
    fn lock_primary(
        &mut self,
        primary: &[u8],
        want_value: bool,
        should_not_exist: bool,
    ) -> Result<Option<Vec<u8>>> {
        let client = self.txn.client().clone();
        self.primary = Some(primary.to_vec());
        let value = match self.lock_region(&client, &[primary], want_value, should_not_exist) {
            Ok(value) => value,
            Err(e) => {
                self.primary = None;
                return Err(e);
            }
        };
        client
            .heartbeats
            .keep_alive(self.start_ts(), primary.to_vec());
        Ok(value)
    }

    /// Locks `keys`, all in one region: waits for locks in the way,
    /// resolves those whose owners are gone, and retries with a newer
    /// for_update_ts after a conflict, until the client's resolve timeout.
    /// Returns the value of the last key when `want_values` (a request
    /// that wants a value locks one key).
    fn lock_region(
        &mut self,
        client: &Inner<E>,
        keys: &[&[u8]],
        want_values: bool,
        should_not_exist: bool,
    ) -> Result<Option<Vec<u8>>> {
        let storage = client.cluster.region_for(keys[0]).storage();
        let deadline = Deadline::after(client.config.resolve_timeout);
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        let mut conflicts = 0u32;
        // A request that locks with conflict reads the newest committed
        // data at any for_update_ts: a commit above it is locked over and
        // read (and only then is a fresh timestamp taken, see `locked`). It
        // goes first at the transaction's latest for_update_ts, with no
        // oracle call. Any other attempt takes a fresh one, which the
        // newest committed data is below.
        let mut reuse = keys.len() == 1 && !should_not_exist;
        loop {
            let for_update_ts = if std::mem::take(&mut reuse) {
                self.for_update_ts
            } else {
                let fresh = client.oracle.get_ts()?;
                self.for_update_ts = self.for_update_ts.max(fresh);
                fresh
            };
            let request =
                self.lock_request(client, keys, for_update_ts, want_values, should_not_exist);
            // The latch slots, bookkeeping buckets and version hints the
            // request reads: their cache misses overlap instead of adding up.
            storage.prefetch(request.keys.iter().map(|(key, _)| key));
            // Made again, rather than copied, only for a retry after a wait.
            let mut first = Some(request);
            let requested = storage.acquire_pessimistic_lock_from(|| {
                first.take().unwrap_or_else(|| {
                    self.lock_request(client, keys, for_update_ts, want_values, should_not_exist)
                })
            });
            match requested {
                Ok(results) => {
                    return self.locked(client, results, want_values).inspect_err(|_| {
                        // The caller keeps no record of these locks: they
                        // go now rather than at their TTL.
                        let keys = keys.iter().map(|k| key(k)).collect();
                        let _ =
                            storage.pessimistic_rollback(keys, self.start_ts(), TimeStamp::max());
                    });
                }
                // A commit newer than the for_update_ts: again at once,
                // above it (the usual end of a wait for a lock whose owner
                // then committed). Only a key that keeps being committed
                // under the request backs off.
                Err(
                    e @ Error::Mvcc(percolate_mvcc::Error::WriteConflict {
                        reason: WriteConflictReason::PessimisticRetry,
                        ..
                    }),
                ) => {
                    deadline.check_conflict(e)?;
                    conflicts += 1;
                    if conflicts > IMMEDIATE_RETRIES {
                        backoff.sleep();
                    }
                }
                Err(e) => {
                    let lock = into_lock(e)?;
                    let mut pushed = Vec::new();
                    let locks = [lock];
                    let alive = client.resolve_locks(&locks, TimeStamp::zero(), &mut pushed)?;
                    if let Some(lock) = alive.first() {
                        deadline.check(&lock.key, lock)?;
                        backoff.sleep();
                    }
                }
            }
        }
    }

    /// The value of the last key of a lock request that succeeded (`None`
    /// where not `want_values`; a request that wants a value locks one
    /// key).
    ///
    /// A key locked with conflict was locked above a commit newer than the
    /// request's for_update_ts, and its value is that commit's: the
    /// transaction must commit above it. The commit's ts may be one past
    /// the oracle's latest (an async-commit or 1PC commit_ts is computed,
    /// not asked for), so the transaction's for_update_ts becomes a fresh
    /// timestamp rather than the commit's own: a commit_ts computed from
    /// it stays at or below the oracle's next, which every transaction
    /// beginning after this one commits reads at. The key's value is the
    /// same there, under the lock. Only a commit further ahead of the
    /// oracle (computed above a read at a future ts) leaves the fresh
    /// timestamp below it: the for_update_ts is then the commit's ts, so
    /// that the transaction's commit_ts, computed or taken (see
    /// `Committer::commit_primary`), is above it too.
    fn locked(
        &mut self,
        client: &Inner<E>,
        results: Vec<PessimisticLockKeyResult>,
        want_values: bool,
    ) -> Result<Option<Vec<u8>>> {
        let mut last = None;
        let mut conflicted: Option<TimeStamp> = None;
        for result in results {
            last = match result {
                PessimisticLockKeyResult::Value(value) => value,
                PessimisticLockKeyResult::LockedWithConflict { value, conflict_ts } => {
                    conflicted = conflicted.max(Some(conflict_ts));
                    value.filter(|_| want_values)
                }
                _ => None,
            };
        }
        if let Some(conflict_ts) = conflicted {
            let fresh = client.oracle.get_ts()?;
            self.for_update_ts = self.for_update_ts.max(fresh).max(conflict_ts);
        }
        Ok(last)
    }

    /// The request locking `keys` at `for_update_ts`.
    fn lock_request(
        &self,
        client: &Inner<E>,
        keys: &[&[u8]],
        for_update_ts: TimeStamp,
        want_values: bool,
        should_not_exist: bool,
    ) -> AcquirePessimisticLock {
        let primary = self
            .primary
            .as_deref()
            .expect("the primary is chosen first");
        // Built whole, each key with its insert flag, rather than through
        // `AcquirePessimisticLock::new` and its setters: one list of keys
        // allocated, not two.
        AcquirePessimisticLock {
            keys: keys.iter().map(|k| (key(k), should_not_exist)).collect(),
            start_ts: self.start_ts(),
            options: PessimisticLockOptions {
                primary: primary.to_vec(),
                for_update_ts,
                lock_ttl: client.config.lock_ttl_ms.saturating_add(self.txn.open_ms()),
                return_value: want_values,
                // An insert's constraint is checked at the newest commit by
                // a retry instead (a lock with conflict leaves it
                // unchecked). (`lock_region` relies on these conditions.)
                allow_lock_with_conflict: keys.len() == 1 && !should_not_exist,
                ..PessimisticLockOptions::default()
            },
            wait_timeout: Some(client.config.lock_wait_timeout),
        }
    }

    /// Releases every pessimistic lock of the transaction, without waiting:
    /// pessimistic locks taken by it, and any lock a failed prewrite left.
    /// Every region is asked; the first failure is returned.
    fn release_locks(&mut self) -> Result<()> {
        let client = self.txn.client().clone();
        client.heartbeats.stop(self.start_ts());
        let locked: Vec<&[u8]> = self.txn.buffered_keys().collect();
        if !locked.is_empty() {
            client.metrics.rolled_back();
        }
        let by_region: Vec<(usize, Vec<Key>)> = by_region(&client, &locked)
            .into_iter()
            .map(|(region, keys)| (region, keys.into_iter().map(key).collect()))
            .collect();
        let mut outcome = Ok(());
        for (region, keys) in by_region {
            let storage = client.cluster.regions()[region].storage();
            // Pessimistic locks first (only up to this transaction's
            // for_update_ts), then anything a prewrite left.
            let rolled_back = storage
                .write(PessimisticRollback {
                    keys: keys.clone(),
                    start_ts: self.start_ts(),
                    for_update_ts: TimeStamp::max(),
                })
                .map(drop);
            let unlocked = storage
                .write(Unlock {
                    keys,
                    start_ts: self.start_ts(),
                })
                .map(drop);
            for released in [rolled_back, unlocked] {
                if outcome.is_ok() {
                    outcome = released;
                }
            }
        }
        outcome
    }
}

/// Write conflicts a lock request retries at once, each with a fresh
/// for_update_ts, before it backs off between retries.
const IMMEDIATE_RETRIES: u32 = 4;

/// `keys` grouped by region, in the order given within each: one lock
/// request per region.
fn by_region<'k, E: Engine>(client: &Inner<E>, keys: &[&'k [u8]]) -> Vec<(usize, Vec<&'k [u8]>)> {
    let mut by_region: Vec<(usize, Vec<&[u8]>)> = Vec::new();
    for k in keys {
        let region = client.cluster.region_index(k);
        match by_region.iter_mut().find(|(r, _)| *r == region) {
            Some((_, ks)) => ks.push(k),
            None => by_region.push((region, vec![k])),
        }
    }
    by_region
}

/// Refuses the empty key, which no transaction can write.
fn check_keys(keys: &[&[u8]]) -> Result<()> {
    if keys.iter().any(|k| k.is_empty()) {
        return Err(Error::InvalidRequest {
            reason: "a transaction cannot write the empty key",
            key: None,
        });
    }
    Ok(())
}

impl<E: Engine> Drop for PessimisticTransaction<E> {
    /// A transaction dropped without commit or rollback releases its locks.
    fn drop(&mut self) {
        if !self.finished {
            // Nobody to tell of a failure: its locks go with their TTL.
            let _ = self.release_locks();
        }
    }
}
