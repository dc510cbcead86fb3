//! A pessimistic transaction: keys are locked as they are read for update
//! or written, so that the commit cannot meet a write conflict on them.

use std::collections::BTreeSet;
use std::ops::RangeBounds;
use std::time::Duration;

use percolate_engine::{Engine, RocksEngine};
use percolate_mvcc::{Key, TimeStamp, WriteConflictReason};

use super::resolver::into_lock;
use super::scan::{Keys, Scan};
use super::transaction::{CommitInfo, CommitOptions, Pessimism, Transaction};
use super::{Backoff, Deadline, Inner, key};
use crate::actions::acquire_pessimistic_lock::PessimisticLockKeyResult;
use crate::commands::{AcquirePessimisticLock, PessimisticRollback, Unlock};
use crate::{Error, Result};

/// A pessimistic transaction at snapshot isolation for its plain reads.
///
/// [`get_for_update`](Self::get_for_update), [`lock_keys`](Self::lock_keys)
/// and the writes ([`put`](Self::put), [`delete`](Self::delete),
/// [`insert`](Self::insert)) lock their keys at once, with a pessimistic
/// lock at a fresh `for_update_ts`: another transaction's lock in the way
/// is waited for (up to [`ClientConfig::lock_wait_timeout`](super::ClientConfig::lock_wait_timeout)
/// per round, resolved if its owner is gone), a deadlock fails at once with
/// [`Error::Deadlock`], and a commit newer than the `for_update_ts` makes
/// the request take a newer one and try again: the statement is retried,
/// not the transaction. A locked key is this transaction's until it
/// commits or rolls back, so the commit meets no write conflict on it.
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
    /// Keys holding this transaction's pessimistic lock.
    locked: BTreeSet<Vec<u8>>,
    /// Set once the transaction committed or rolled back.
    finished: bool,
}

impl<E: Engine> std::fmt::Debug for PessimisticTransaction<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PessimisticTransaction")
            .field("start_ts", &self.txn.start_ts())
            .field("for_update_ts", &self.for_update_ts)
            .field("locked", &self.locked.len())
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
            locked: BTreeSet::new(),
            finished: false,
        }
    }

    /// The transaction's start_ts: the snapshot of its plain reads.
    pub fn start_ts(&self) -> TimeStamp {
        self.txn.start_ts()
    }

    /// The for_update_ts of its latest lock request (the start_ts before
    /// the first).
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
        if self.txn.buffers_write(key) && self.locked.contains(key) {
            return self.txn.get(key);
        }
        let values = self.lock(&[key.to_vec()], true)?;
        if self.txn.buffers_write(key) {
            return self.txn.get(key);
        }
        Ok(values.into_iter().next().flatten())
    }

    /// Locks `keys`: no other transaction can write them until this one
    /// ends. They are committed as Lock records if not written.
    pub fn lock_keys<K: Into<Vec<u8>>>(&mut self, keys: impl IntoIterator<Item = K>) -> Result<()> {
        let keys: Vec<Vec<u8>> = keys.into_iter().map(Into::into).collect();
        self.lock(&keys, false).map(drop)
    }

    /// Locks `key` and sets it to `value` at commit.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        let key = key.into();
        self.lock(std::slice::from_ref(&key), false)?;
        self.txn.put(key, value);
        Ok(())
    }

    /// Locks `key` and deletes it at commit.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> Result<()> {
        let key = key.into();
        self.lock(std::slice::from_ref(&key), false)?;
        self.txn.delete(key);
        Ok(())
    }

    /// Locks `key`, failing with `AlreadyExist` if it has a value, and sets
    /// it to `value` at commit.
    pub fn insert(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        let key = key.into();
        self.lock_with(std::slice::from_ref(&key), false, true)?;
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
        let Some(primary) = self.primary.clone() else {
            // Nothing locked, so nothing written.
            return self.txn.commit_buffer(None, options);
        };
        // Refused before anything is sent: nothing was prewritten, so the
        // pessimistic locks are released here.
        if let Err(e) = self.txn.check_buffer() {
            self.release_locks();
            return Err(e);
        }
        let pessimism = Pessimism {
            primary,
            for_update_ts: self.for_update_ts,
        };
        // Every locked key is in the buffer, the primary first among them:
        // the commit prewrites them all, and on a failure before its commit
        // point unlocks them all (and on a failure after it, leaves them to
        // be rolled forward).
        let outcome = self.txn.commit_buffer(Some(pessimism), options);
        self.txn.client().heartbeats.stop(self.start_ts());
        outcome
    }

    /// Releases the locks; nothing was written.
    pub fn rollback(mut self) -> Result<()> {
        self.finished = true;
        self.release_locks();
        Ok(())
    }

    /// Locks `keys` (those not locked yet), returning their values when
    /// `want_values`.
    fn lock(&mut self, keys: &[Vec<u8>], want_values: bool) -> Result<Vec<Option<Vec<u8>>>> {
        self.lock_with(keys, want_values, false)
    }

    fn lock_with(
        &mut self,
        keys: &[Vec<u8>],
        want_values: bool,
        should_not_exist: bool,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let client = self.txn.client().clone();
        let needed: Vec<&Vec<u8>> = keys
            .iter()
            .filter(|k| want_values || should_not_exist || !self.locked.contains(*k))
            .collect();
        if needed.is_empty() {
            return Ok(keys.iter().map(|_| None).collect());
        }
        if needed.iter().any(|k| k.is_empty()) {
            return Err(Error::InvalidRequest {
                reason: "a transaction cannot write the empty key",
                key: None,
            });
        }
        let mut values = std::collections::HashMap::new();
        let mut rest = &needed[..];
        if self.primary.is_none() {
            let primary = needed[0].clone();
            let value =
                self.lock_primary(&client, primary.clone(), want_values, should_not_exist)?;
            values.insert(primary, value);
            rest = &needed[1..];
        }
        for (_, ks) in by_region(&client, rest) {
            let got = self.lock_region(&client, &ks, want_values, should_not_exist)?;
            for (k, v) in ks.into_iter().zip(got) {
                self.locked.insert(k.clone());
                self.txn.lock_keys([k.clone()]);
                values.insert(k, v);
            }
        }
        Ok(keys.iter().map(|k| values.remove(k).flatten()).collect())
    }

    /// Locks the first key of the transaction, its primary, on its own, so
    /// that every later lock names a primary that exists; returns its value
    /// when `want_values`.
    fn lock_primary(
        &mut self,
        client: &Inner<E>,
        primary: Vec<u8>,
        want_values: bool,
        should_not_exist: bool,
    ) -> Result<Option<Vec<u8>>> {
        self.primary = Some(primary.clone());
        let value = match self.lock_region(
            client,
            std::slice::from_ref(&primary),
            want_values,
            should_not_exist,
        ) {
            Ok(mut value) => value.pop().flatten(),
            Err(e) => {
                self.primary = None;
                return Err(e);
            }
        };
        self.locked.insert(primary.clone());
        // Buffered as soon as locked (committed as a Lock record unless
        // written), so that the commit prewrites it whatever follows.
        self.txn.lock_keys([primary.clone()]);
        client.heartbeats.keep_alive(self.start_ts(), primary);
        Ok(value)
    }

    /// Locks `keys`, all in one region: waits for locks in the way,
    /// resolves those whose owners are gone, and retries with a newer
    /// for_update_ts after a conflict, until the client's resolve timeout.
    fn lock_region(
        &mut self,
        client: &Inner<E>,
        keys: &[Vec<u8>],
        want_values: bool,
        should_not_exist: bool,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let storage = client.cluster.region_for(&keys[0]).storage();
        let deadline = Deadline::after(client.config.resolve_timeout);
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        loop {
            // A fresh for_update_ts per attempt: the newest committed data
            // is what the locked keys are read at.
            let for_update_ts = client.oracle.get_ts()?;
            self.for_update_ts = self.for_update_ts.max(for_update_ts);
            let request =
                self.lock_request(client, keys, for_update_ts, want_values, should_not_exist);
            match storage.acquire_pessimistic_lock(request) {
                Ok(results) => {
                    return Ok(results
                        .into_iter()
                        .map(|result| match result {
                            PessimisticLockKeyResult::Value(value) => value,
                            _ => None,
                        })
                        .collect());
                }
                // A commit newer than the for_update_ts: again, above it.
                Err(
                    e @ Error::Mvcc(percolate_mvcc::Error::WriteConflict {
                        reason: WriteConflictReason::PessimisticRetry,
                        ..
                    }),
                ) => {
                    deadline.check_conflict(e)?;
                    backoff.sleep();
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

    /// The request locking `keys` at `for_update_ts`.
    fn lock_request(
        &self,
        client: &Inner<E>,
        keys: &[Vec<u8>],
        for_update_ts: TimeStamp,
        want_values: bool,
        should_not_exist: bool,
    ) -> AcquirePessimisticLock {
        let primary = self.primary.clone().expect("the primary is chosen first");
        let mut request = AcquirePessimisticLock::new(
            keys.iter().map(|k| key(k)).collect(),
            primary,
            self.start_ts(),
            for_update_ts,
        )
        .lock_ttl(
            client
                .config
                .lock_ttl_ms
                .saturating_add(self.txn.open_for().as_millis() as u64),
        )
        .wait_timeout(client.config.lock_wait_timeout);
        if want_values {
            request = request.return_values();
        }
        for (_, insert) in &mut request.keys {
            *insert = should_not_exist;
        }
        request
    }

    /// Releases every pessimistic lock of the transaction, without waiting:
    /// pessimistic locks taken by it, and any lock a failed prewrite left.
    fn release_locks(&mut self) {
        let client = self.txn.client().clone();
        client.heartbeats.stop(self.start_ts());
        if !self.locked.is_empty() {
            client.metrics.rolled_back();
        }
        let mut by_region: Vec<(usize, Vec<Key>)> = Vec::new();
        for k in std::mem::take(&mut self.locked) {
            let region = client.cluster.region_index(&k);
            match by_region.iter_mut().find(|(r, _)| *r == region) {
                Some((_, ks)) => ks.push(key(&k)),
                None => by_region.push((region, vec![key(&k)])),
            }
        }
        for (region, keys) in by_region {
            let storage = client.cluster.regions()[region].storage();
            // Pessimistic locks first (only up to this transaction's
            // for_update_ts), then anything a prewrite left.
            let _ = storage.write(PessimisticRollback {
                keys: keys.clone(),
                start_ts: self.start_ts(),
                for_update_ts: TimeStamp::max(),
            });
            let _ = storage.write(Unlock {
                keys,
                start_ts: self.start_ts(),
            });
        }
    }
}

/// `keys` grouped by region, in key order: one lock request per region.
fn by_region<E: Engine>(client: &Inner<E>, keys: &[&Vec<u8>]) -> Vec<(usize, Vec<Vec<u8>>)> {
    let mut by_region: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for k in keys {
        let region = client.cluster.region_index(k);
        match by_region.iter_mut().find(|(r, _)| *r == region) {
            Some((_, ks)) => ks.push((*k).clone()),
            None => by_region.push((region, vec![(*k).clone()])),
        }
    }
    by_region
}

impl<E: Engine> Drop for PessimisticTransaction<E> {
    /// A transaction dropped without commit or rollback releases its locks.
    fn drop(&mut self) {
        if !self.finished {
            self.release_locks();
        }
    }
}
