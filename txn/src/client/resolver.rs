//! Reads through the regions, and lock resolution: what a reader (or a
//! prewrite) does when it meets another transaction's lock.
//!
//! The lock names its primary. The primary's region says the
//! transaction's fate ([`CheckTxnStatus`](crate::commands::CheckTxnStatus)):
//! committed (roll this lock forward at the same commit_ts), rolled back or
//! expired (roll it back), or alive. An alive 2PC transaction has its
//! min_commit_ts pushed above the reader's ts, and then the reader may
//! ignore its locks; otherwise the reader backs off and retries until its
//! deadline. An async-commit transaction is never pushed: once its primary
//! lock expired, its fate is read from its secondaries
//! ([`CheckSecondaryLocks`](crate::commands::CheckSecondaryLocks)):
//! committed at the largest min_commit_ts if all are still locked, rolled
//! back if any is not.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Duration;

use percolate_engine::{Cf, Engine};
use percolate_mvcc::codec::decode_bytes_in_place;
use percolate_mvcc::{Key, KvPair, LockInfo, LockType, PairVisitor, TimeStamp, TsSet};

use super::scan::ScanKind;
use super::{Backoff, Deadline, Inner, key};
use crate::actions::TxnStatus;
use crate::actions::check_txn_status::CheckTxnStatusOptions;
use crate::commands::{BatchGet, Get, SecondaryLocksStatus};
use crate::metrics::ResolveOutcome;
use crate::read::{ReadOptions, ScanRequest};
use crate::{Error, Result};

/// A region and its part `[lower, upper)` of a range.
type Piece<'a, E> = (&'a crate::cluster::Region<E>, &'a [u8], Option<&'a [u8]>);

/// What a read attempt found.
pub(crate) enum Attempt<T> {
    /// The answer.
    Done(T),
    /// Locks of other transactions in the way.
    Locked(Vec<LockInfo>),
}

/// The fate of a transaction, as far as a resolver can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Committed(TimeStamp),
    RolledBack,
    /// Alive, with its min_commit_ts above the caller's ts: its locks may be
    /// ignored by this caller.
    Pushed,
    /// Alive: wait.
    Alive,
    /// The lock names as its primary a key where its transaction holds a
    /// lock that is not its primary (`PrimaryMismatch`): a stale
    /// pessimistic lock, left by a statement that gave its keys back and
    /// chose another primary (its release failed). It says nothing of the
    /// transaction, only of this lock.
    Stale,
}

/// Splits a read's entries into pairs and locks. A whole read failing with
/// `KeyIsLocked` (a region's in-memory lock: a prewrite in flight) is a
/// lock like the others.
fn split_locked(read: Result<Vec<Result<KvPair>>>) -> Result<Attempt<Vec<KvPair>>> {
    let entries = match read {
        Ok(entries) => entries,
        Err(e) => return into_lock(e).map(|lock| Attempt::Locked(vec![lock])),
    };
    let mut pairs = Vec::with_capacity(entries.len());
    let mut locks = Vec::new();
    for entry in entries {
        match entry {
            Ok(pair) => pairs.push(pair),
            Err(e) => match into_lock(e) {
                Ok(lock) => locks.push(lock),
                Err(e) => return Err(e),
            },
        }
    }
    Ok(if locks.is_empty() {
        Attempt::Done(pairs)
    } else {
        Attempt::Locked(locks)
    })
}

/// The scan of one region's piece `[lower, upper)` of a range.
fn piece_request(
    lower: &[u8],
    upper: Option<&[u8]>,
    kind: ScanKind,
    ts: TimeStamp,
    limit: usize,
) -> ScanRequest {
    let (lower, upper) = (key(lower), upper.map(key));
    let (start_key, end_key) = if kind.reverse {
        (
            upper.unwrap_or_else(|| Key::from_encoded(Vec::new())),
            Some(lower),
        )
    } else {
        (lower, upper)
    };
    ScanRequest {
        start_key,
        end_key,
        limit,
        ts,
        key_only: kind.key_only,
        reverse: kind.reverse,
    }
}

/// Moves `request` on to the locked key `raw` where its visit stopped,
/// which the next attempt reads first: forward from it, backward from
/// below the raw key just after it (`raw` and a zero byte: no key lies
/// between, and the encoded form sorts after every version of `raw`).
fn resume_at(request: &mut ScanRequest, raw: &[u8]) {
    request.start_key = if request.reverse {
        let mut after = Vec::with_capacity(raw.len() + 1);
        after.extend_from_slice(raw);
        after.push(0);
        key(&after)
    } else {
        key(raw)
    };
}

/// The lock of a `KeyIsLocked` error, or the error itself.
pub(crate) fn into_lock(e: Error) -> std::result::Result<LockInfo, Error> {
    match e {
        Error::Mvcc(percolate_mvcc::Error::KeyIsLocked(info)) => Ok(*info),
        other => Err(other),
    }
}

impl<E: Engine> Inner<E> {
    /// The value of raw `key` at `ts`, resolving locks in the way.
    pub(crate) fn get(
        &self,
        raw: &[u8],
        ts: TimeStamp,
        options: &ReadOptions,
    ) -> Result<Option<Vec<u8>>> {
        let storage = self.cluster.region_for(raw).storage();
        self.retry_locked(ts, options, |options| {
            let get = Get {
                key: key(raw),
                ts,
                options: options.clone(),
            };
            match storage.read(get) {
                Ok(value) => Ok(Attempt::Done(value)),
                Err(e) => into_lock(e).map(|lock| Attempt::Locked(vec![lock])),
            }
        })
    }

    /// The values of raw `keys` at `ts` (a pair per key that exists, in
    /// region order), resolving locks in the way.
    pub(crate) fn batch_get(&self, raws: &[&[u8]], ts: TimeStamp) -> Result<Vec<KvPair>> {
        let mut by_region: Vec<(usize, Vec<Key>)> = Vec::new();
        for raw in raws {
            let index = self.cluster.region_index(raw);
            match by_region.iter_mut().find(|(i, _)| *i == index) {
                Some((_, keys)) => keys.push(key(raw)),
                None => by_region.push((index, vec![key(raw)])),
            }
        }
        let mut pairs = Vec::with_capacity(raws.len());
        for (index, keys) in by_region {
            let storage = self.cluster.regions()[index].storage();
            pairs.extend(self.retry_locked(ts, &ReadOptions::default(), |options| {
                split_locked(storage.read(BatchGet {
                    keys: keys.clone(),
                    ts,
                    options: options.clone(),
                }))
            })?);
        }
        Ok(pairs)
    }

    /// Hands the pairs of the raw range `[start, end)` at `ts` to `visit`
    /// in scan order (up to `limit`, 0: no limit; values empty when
    /// key-only), across regions, resolving locks in the way, without
    /// collecting them: each key is decoded into one reused buffer, each
    /// value is a slice of the scanner's. A lock stops a region's visit at
    /// its key, and once it is resolved the visit goes on from there.
    /// `visit` breaks to stop. Returns how many pairs it got, and whether
    /// `visit` broke.
    pub(crate) fn scan_visit(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        kind: ScanKind,
        ts: TimeStamp,
        visit: &mut PairVisitor<'_>,
    ) -> Result<(usize, bool)> {
        let mut got = 0;
        let mut raw = Vec::new();
        for (region, lower, upper) in self.pieces_in_scan_order(start, end, kind) {
            if limit != 0 && got >= limit {
                break;
            }
            let storage = region.storage();
            let mut request = piece_request(lower, upper, kind, ts, 0);
            let broke = self.retry_locked(ts, &ReadOptions::default(), |options| {
                request.limit = if limit == 0 { 0 } else { limit - got };
                let (mut broke, mut bad) = (false, None);
                let read = storage.scan_visit(&request, options, |key, value| {
                    raw.clear();
                    raw.extend_from_slice(key);
                    if let Err(e) = decode_bytes_in_place(&mut raw) {
                        bad = Some(percolate_mvcc::Error::corruption(Cf::Write, key, e));
                        return ControlFlow::Break(());
                    }
                    got += 1;
                    let flow = visit(&raw, value);
                    broke = flow.is_break();
                    flow
                });
                if let Some(e) = bad {
                    return Err(e.into());
                }
                let locks = match read {
                    Ok(locks) if broke || locks.is_empty() => return Ok(Attempt::Done(broke)),
                    Ok(locks) => locks,
                    // A memory lock in the range, found before any pair.
                    Err(e) => return into_lock(e).map(|lock| Attempt::Locked(vec![lock])),
                };
                let locks = locks
                    .into_iter()
                    .map(into_lock)
                    .collect::<Result<Vec<_>>>()?;
                resume_at(&mut request, &locks[0].key);
                Ok(Attempt::Locked(locks))
            })?;
            if broke {
                return Ok((got, true));
            }
        }
        Ok((got, false))
    }

    /// The regions' pieces of `[start, end)`, in the order a scan of
    /// `kind` reads them.
    fn pieces_in_scan_order<'a>(
        &'a self,
        start: &'a [u8],
        end: Option<&'a [u8]>,
        kind: ScanKind,
    ) -> Vec<Piece<'a, E>> {
        let mut pieces: Vec<_> = self.cluster.pieces(start, end).collect();
        if kind.reverse {
            pieces.reverse();
        }
        pieces
    }

    /// Runs `attempt` until it is not blocked by locks: each time, the locks
    /// it met are resolved; transactions pushed past `ts` are bypassed from
    /// then on; if nothing could be done about a lock, back off. Gives up at
    /// the configured deadline.
    pub(crate) fn retry_locked<T>(
        &self,
        ts: TimeStamp,
        options: &ReadOptions,
        mut attempt: impl FnMut(&ReadOptions) -> Result<Attempt<T>>,
    ) -> Result<T> {
        let deadline = Deadline::after(self.config.resolve_timeout);
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        let mut options = options.clone();
        let mut pushed: Vec<TimeStamp> = Vec::new();
        let mut waited = false;
        loop {
            let locks = match attempt(&options)? {
                Attempt::Done(out) => return Ok(out),
                Attempt::Locked(locks) => locks,
            };
            if self.read_only.is_some() {
                // Resolving would write.
                if let Some(lock) = locks.into_iter().next() {
                    return Err(percolate_mvcc::Error::KeyIsLocked(Box::new(lock)).into());
                }
                continue;
            }
            let wait = !waited && !self.config.async_commit_read_wait.is_zero();
            if wait && let Some(lock) = locks.iter().find(|l| l.use_async_commit) {
                waited = true;
                if let Attempt::Done(out) = self.wait_for_commit(lock, &options, &mut attempt)? {
                    return Ok(out);
                }
                continue;
            }
            let before = pushed.len();
            let alive = self.resolve_locks(&locks, ts, &mut pushed)?;
            if pushed.len() != before {
                options.bypass_locks = pushed.iter().copied().collect::<TsSet>();
            }
            if let Some(lock) = alive.first() {
                deadline.check(&lock.key, lock)?;
                backoff.sleep();
            }
        }
    }

    /// Waits (once per read, [`ClientConfig::async_commit_read_wait`] at
    /// most) for the async-commit `lock` to be removed by its transaction's
    /// commit: such a transaction is past its commit point and cannot be
    /// pushed, and its commit records normally follow at once, so waiting
    /// beats resolving. The key is watched first and read again, so that a
    /// removal between the first read and the wait is not missed. Returns
    /// that second read's answer if it found no lock.
    ///
    /// [`ClientConfig::async_commit_read_wait`]: super::ClientConfig::async_commit_read_wait
    fn wait_for_commit<T>(
        &self,
        lock: &LockInfo,
        options: &ReadOptions,
        attempt: &mut impl FnMut(&ReadOptions) -> Result<Attempt<T>>,
    ) -> Result<Attempt<T>> {
        let storage = self.cluster.region_for(&lock.key).storage();
        let waits = storage.concurrency_manager().lock_waits();
        let watched = key(&lock.key);
        let ticket = waits.watch(std::slice::from_ref(&watched));
        let again = attempt(options)?;
        if let Attempt::Locked(locks) = &again
            && locks
                .iter()
                .any(|l| l.key == lock.key && l.lock_version == lock.lock_version)
        {
            waits.wait_for_release(&ticket, &watched, self.config.async_commit_read_wait);
        }
        Ok(again)
    }

    /// Resolves what can be resolved of `locks` for a caller at
    /// `caller_ts`. Transactions pushed past it are added to `pushed`.
    /// Returns the locks of live transactions, which are still in the way
    /// (none: the caller may retry at once).
    pub(crate) fn resolve_locks<'l>(
        &self,
        locks: &'l [LockInfo],
        caller_ts: TimeStamp,
        pushed: &mut Vec<TimeStamp>,
    ) -> Result<Vec<&'l LockInfo>> {
        let mut fates: HashMap<TimeStamp, Fate> = HashMap::new();
        let mut alive = Vec::new();
        for lock in locks {
            // A prewrite lock's primary decides its transaction, for every
            // lock of it met here. A pessimistic lock's answer is its own:
            // its primary may be a stale one (see `Fate::Stale`), whose
            // missing lock says nothing of the transaction's other locks,
            // live secondaries of its real primary among them.
            let pessimistic = lock.lock_type == LockType::Pessimistic;
            let fate = match fates.get(&lock.lock_version) {
                Some(fate) if !pessimistic => *fate,
                _ => {
                    let fate = self.txn_fate(lock, caller_ts)?;
                    if !pessimistic {
                        fates.insert(lock.lock_version, fate);
                    }
                    fate
                }
            };
            self.metrics.resolved(match fate {
                Fate::Committed(_) => ResolveOutcome::Committed,
                Fate::RolledBack => ResolveOutcome::RolledBack,
                Fate::Stale if pessimistic => ResolveOutcome::RolledBack,
                Fate::Pushed | Fate::Alive | Fate::Stale => ResolveOutcome::Alive,
            });
            let commit_ts = match fate {
                Fate::Committed(commit_ts) => commit_ts,
                Fate::RolledBack => TimeStamp::zero(),
                Fate::Pushed => {
                    if !pushed.contains(&lock.lock_version) {
                        pushed.push(lock.lock_version);
                    }
                    continue;
                }
                Fate::Alive => {
                    alive.push(lock);
                    continue;
                }
                // Given back by its statement, so its transaction holds it
                // no more: removed, as TiKV's client rolls back such a lock
                // (BEHAVIOUR G13). (A prewrite lock is never stale: its
                // primary is the commit's.)
                Fate::Stale if pessimistic => {
                    self.cluster
                        .region_for(&lock.key)
                        .storage()
                        .pessimistic_rollback(
                            vec![key(&lock.key)],
                            lock.lock_version,
                            lock.lock_for_update_ts,
                        )?;
                    continue;
                }
                Fate::Stale => {
                    alive.push(lock);
                    continue;
                }
            };
            self.cluster
                .region_for(&lock.key)
                .storage()
                .resolve_lock_lite(vec![key(&lock.key)], lock.lock_version, commit_ts)?;
        }
        Ok(alive)
    }

    /// Asks the primary's region what became of the transaction that owns
    /// `lock`, rolling it back there if it expired.
    fn txn_fate(&self, lock: &LockInfo, caller_ts: TimeStamp) -> Result<Fate> {
        let storage = self.cluster.region_for(&lock.primary_lock).storage();
        let current_ts = self.oracle.get_ts()?;
        let mut options = CheckTxnStatusOptions {
            // A read at MAX ("the latest") has nothing to push past.
            caller_start_ts: if caller_ts.is_max() {
                TimeStamp::zero()
            } else {
                caller_ts
            },
            current_ts,
            // The key a lock names as primary may hold a lock of the same
            // transaction that is not its primary: a stale pessimistic lock
            // (given back by a failed statement, its release failed) names
            // the primary that statement chose, and the transaction may
            // since have chosen another and prewritten the old one as a
            // secondary, whose TTL runs out without heart beats. Judged as
            // a primary, that secondary would be rolled back under a
            // transaction that then commits (tidb#42937): checked, it
            // answers PrimaryMismatch instead (BEHAVIOUR G13, as TiKV's
            // client always asks).
            verify_is_primary: true,
            // A pessimistic lock never commits: its primary, if missing
            // or itself a bare pessimistic lock, is left without a
            // rollback record (G9).
            resolving_pessimistic_lock: lock.lock_type == LockType::Pessimistic,
            ..Default::default()
        };
        let primary = key(&lock.primary_lock);
        let status = match storage.check_txn_status(primary.clone(), lock.lock_version, options) {
            // The key the lock names holds a lock of its transaction that
            // is not the primary: the lock is stale.
            Err(Error::Mvcc(percolate_mvcc::Error::PrimaryMismatch(_))) => return Ok(Fate::Stale),
            Err(Error::Mvcc(percolate_mvcc::Error::TxnNotFound { .. })) => {
                // The primary is not prewritten (yet: prewrites run in
                // parallel) and was never committed. Once this lock has
                // expired the owner is gone: make sure it never commits.
                // (A TTL read from another writer's lock counts up to the
                // longest any lock may live.)
                let expired =
                    crate::actions::ttl_ran_out(lock.lock_version, lock.lock_ttl, current_ts);
                if !expired {
                    return Ok(Fate::Alive);
                }
                options.rollback_if_not_exist = true;
                storage.check_txn_status(primary, lock.lock_version, options)?
            }
            other => other?,
        };
        Ok(match status {
            TxnStatus::Committed { commit_ts } => Fate::Committed(commit_ts),
            TxnStatus::Uncommitted {
                lock: primary_lock,
                min_commit_ts_pushed,
            } => {
                let expired = crate::actions::is_expired(&primary_lock, current_ts);
                if primary_lock.use_async_commit && expired {
                    self.resolve_async_commit(&lock.primary_lock, &primary_lock, current_ts)?
                } else if min_commit_ts_pushed {
                    Fate::Pushed
                } else {
                    Fate::Alive
                }
            }
            // Rolled back now (expired) or before, or never prewritten.
            _ => Fate::RolledBack,
        })
    }

    /// Decides an async-commit transaction whose primary lock expired, from
    /// all its keys, and resolves them all. A key whose lock is not an
    /// async-commit one belongs to a batch that fell back to 2PC: then the
    /// transaction commits (if at all) as 2PC does, at a commit_ts of the
    /// client's, and only its primary decides, checked as a 2PC primary
    /// (TiKV's `force_sync_commit`, BEHAVIOUR G10).
    fn resolve_async_commit(
        &self,
        primary: &[u8],
        primary_lock: &percolate_mvcc::Lock,
        current_ts: TimeStamp,
    ) -> Result<Fate> {
        let start_ts = primary_lock.ts;
        let mut keys: Vec<Vec<u8>> = primary_lock.secondaries.clone();
        keys.push(primary.to_vec());
        let groups = self.group_keys(keys);
        let mut commit_ts = primary_lock.min_commit_ts;
        let mut fate = None;
        for (index, keys) in &groups {
            let storage = self.cluster.regions()[*index].storage();
            match storage.check_secondary_locks(keys.clone(), start_ts)? {
                SecondaryLocksStatus::Locked(locks) => {
                    if locks.iter().any(|lock| !lock.use_async_commit) {
                        let options = CheckTxnStatusOptions {
                            current_ts,
                            force_sync_commit: true,
                            rollback_if_not_exist: true,
                            ..Default::default()
                        };
                        let storage = self.cluster.region_for(primary).storage();
                        match storage.check_txn_status(key(primary), start_ts, options)? {
                            TxnStatus::Committed { commit_ts } => {
                                fate = Some(Fate::Committed(commit_ts));
                            }
                            // Not expired as a 2PC primary: nothing to
                            // resolve yet.
                            TxnStatus::Uncommitted { .. } => return Ok(Fate::Alive),
                            _ => fate = Some(Fate::RolledBack),
                        }
                        break;
                    }
                    for lock in locks {
                        commit_ts = commit_ts.max(lock.min_commit_ts);
                    }
                }
                SecondaryLocksStatus::Committed(ts) => {
                    fate = Some(Fate::Committed(ts));
                    break;
                }
                SecondaryLocksStatus::RolledBack => {
                    fate = Some(Fate::RolledBack);
                    break;
                }
            }
        }
        let fate = fate.unwrap_or(Fate::Committed(commit_ts));
        let resolve_ts = match fate {
            Fate::Committed(ts) => ts,
            _ => TimeStamp::zero(),
        };
        for (index, keys) in groups {
            let storage = self.cluster.regions()[index].storage();
            storage.resolve_lock_lite(keys, start_ts, resolve_ts)?;
        }
        Ok(fate)
    }

    /// Raw keys grouped by region index, as encoded keys.
    pub(crate) fn group_keys(&self, raws: Vec<Vec<u8>>) -> Vec<(usize, Vec<Key>)> {
        let mut groups: Vec<(usize, Vec<Key>)> = Vec::new();
        for raw in raws {
            let index = self.cluster.region_index(&raw);
            match groups.iter_mut().find(|(i, _)| *i == index) {
                Some((_, keys)) => keys.push(key(&raw)),
                None => groups.push((index, vec![key(&raw)])),
            }
        }
        groups
    }
}
