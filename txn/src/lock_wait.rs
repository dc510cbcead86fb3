//! Waiting for pessimistic locks, and deadlock detection.
//!
//! A pessimistic lock request that meets another transaction's lock does
//! not fail at once: it waits until that lock is released (committed,
//! rolled back, resolved) or its wait timeout passes, and then runs again.
//! [`LockWaits`] is the table it waits in, shared by every region of a
//! cluster so that waits across regions meet in one wait-for graph.
//!
//! **Waking.** Every write command that deletes locks reports their keys
//! here once its write is in the engine (only while someone waits: one
//! atomic load otherwise). A request registers its keys *before* it reads
//! them ([`LockWaits::watch`]), so a lock released between its read and
//! its wait still wakes it: the key's release count has moved on and the
//! wait returns at once. Keys are known by a 64-bit hash; two keys with the
//! same hash only cost a spurious retry.
//!
//! **Order.** When a key's lock is released, its oldest waiter (smallest
//! start_ts) is woken at once, and only it: the others may run again
//! [`LockWaits::wake_up_delay`] later (if no release let them sooner), by
//! when the oldest has normally taken the lock, and they go back to waiting
//! on it. They are not woken for that: a waiter looks at its state again
//! at the latest one wake-up delay after the release, so it runs about
//! one delay after it. A waiter that is not the oldest does not starve: if the oldest
//! gave up or did not take the lock, the delay bounds how long the others
//! sleep.
//!
//! **Deadlocks.** Each waiting transaction is an edge of the wait-for graph
//! (`start_ts` waits for `lock_ts`, on a key). A request whose edge would
//! close a cycle fails at once with [`Error::Deadlock`], naming the cycle;
//! no transaction of a deadlock waits out its timeout. Edges exist only
//! while their transaction waits.
//!
//! **Sharding.** The watched keys are spread over 64 shards by
//! hash, each behind its own mutex (and its waiters sleep on it): a commit
//! that reports its released keys, and a request that watches its keys,
//! lock only the shards of those keys, so requests on different hot keys
//! do not queue behind one mutex. The wait-for graph has a mutex of its
//! own, taken only by a request that is about to wait (to look for a cycle
//! and add its edge in one step) and when its wait ends; it is always taken
//! after a shard's, never before.
//!
//! **Unlike TiKV**, a woken request runs again rather than failing: TiKV
//! answers a woken (non-resumable) waiter with a `PessimisticRetry` write
//! conflict naming the released lock, and its client retries the statement.
//! Here the request retries itself: if the lock's owner committed above
//! the request's for_update_ts it meets that conflict anyway, and if it
//! rolled back the request takes the lock without a round trip. Key hashes
//! are FNV-1a of the encoded key, not TiKV's farmhash of the raw key.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex, MutexGuard};
use percolate_engine::{Cf, Modify, WriteBatch};
use percolate_mvcc::{Key, TimeStamp};

use crate::{Error, Result};

/// The hash lock waits know a key by: FNV-1a over its encoded bytes.
pub fn key_hash(key: &Key) -> u64 {
    encoded_hash(key.as_encoded())
}

fn encoded_hash(encoded: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in encoded {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// One edge of the wait-for graph: `txn` waits for `wait_for_txn`'s lock
/// on `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitForEntry {
    /// The waiting transaction.
    pub txn: TimeStamp,
    /// The transaction holding the lock.
    pub wait_for_txn: TimeStamp,
    /// [`key_hash`] of the key.
    pub key_hash: u64,
    /// The key, raw.
    pub key: Vec<u8>,
}

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The lock was released (or may have been): run the request again.
    Released,
    /// The timeout passed first.
    TimedOut,
}

/// The wait table of pessimistic lock requests: see the module docs.
///
/// A handle: clones share one table. Two handles are equal when they
/// share it.
#[derive(Clone)]
pub struct LockWaits {
    inner: Arc<Inner>,
}

struct Inner {
    /// Live [`WatchTicket`]s: writers report released keys only while
    /// there are some.
    watchers: AtomicUsize,
    /// The watched keys, by [`shard_of`] their hash.
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// The wait-for graph: the edges of each waiting transaction. Taken
    /// after a shard's mutex, never before.
    graph: Mutex<HashMap<TimeStamp, Vec<WaitForEntry>>>,
    next_waiter: AtomicU64,
    wake_up_delay: Duration,
}

/// How many shards the watched keys are spread over: a power of two.
const SHARDS: usize = 64;

/// The shard of the key whose hash is `hash`.
fn shard_of(hash: u64) -> usize {
    // FNV-1a's high bits are its best mixed; the shard's own map hashes
    // the whole value again.
    (hash >> 58) as usize % SHARDS
}

/// One shard of the watched keys.
#[derive(Default)]
struct Shard {
    /// Watched keys by hash.
    keys: HashMap<u64, Watched>,
}

#[derive(Default)]
struct Watched {
    /// Releases of the key seen since it was first watched.
    releases: u64,
    /// Tickets watching it; the entry goes when the last one does.
    tickets: usize,
    waiters: Vec<Waiter>,
}

struct Waiter {
    id: u64,
    start_ts: TimeStamp,
    /// A reader ([`LockWaits::wait_for_release`]): woken at every release
    /// of the key, and never the oldest waiter.
    reader: bool,
    /// Set by a release: when the waiter may run again.
    wake_at: Option<Instant>,
    /// What it sleeps on (with its shard's mutex), so that a release
    /// wakes the one waiter it lets run, not every waiter of the key.
    /// Shared: the entry moves when the table grows.
    wake: Arc<Wake>,
}

/// A waiter's wake-up: a condition variable to sleep on, and a flag a
/// release sets when it lets the waiter run, watched for a moment before
/// the waiter sleeps (see `spin`).
#[derive(Default)]
struct Wake {
    condvar: Condvar,
    woken: AtomicBool,
}

impl Default for LockWaits {
    fn default() -> Self {
        Self::new(Self::DEFAULT_WAKE_UP_DELAY)
    }
}

impl PartialEq for LockWaits {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for LockWaits {}

impl std::fmt::Debug for LockWaits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let watched_keys: usize = self.inner.shards.iter().map(|s| s.lock().keys.len()).sum();
        let waiting_txns = self.inner.graph.lock().len();
        f.debug_struct("LockWaits")
            .field("watched_keys", &watched_keys)
            .field("waiting_txns", &waiting_txns)
            .field("wake_up_delay", &self.inner.wake_up_delay)
            .finish()
    }
}

/// Keys a request watches from before it reads them until its wait ends:
/// see [`LockWaits::watch`].
#[must_use = "a ticket watches its keys only while it lives"]
pub struct WatchTicket {
    waits: LockWaits,
    /// Each watched key's hash and its release count when watched.
    seen: Vec<(u64, u64)>,
}

impl std::fmt::Debug for WatchTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchTicket")
            .field("keys", &self.seen.len())
            .finish()
    }
}

impl LockWaits {
    /// How long waiters other than the oldest sleep after a release
    /// before they run again: 20 ms, TiKV's default.
    pub const DEFAULT_WAKE_UP_DELAY: Duration = Duration::from_millis(20);

    /// An empty table whose non-oldest waiters wake `wake_up_delay` after a
    /// release (at most a day later: a longer delay is a day).
    pub fn new(wake_up_delay: Duration) -> Self {
        LockWaits {
            inner: Arc::new(Inner {
                watchers: AtomicUsize::new(0),
                shards: (0..SHARDS).map(|_| CachePadded::default()).collect(),
                graph: Mutex::default(),
                next_waiter: AtomicU64::new(0),
                wake_up_delay: wake_up_delay.min(Duration::from_secs(24 * 3600)),
            }),
        }
    }

    /// How long waiters other than the oldest sleep after a release.
    pub fn wake_up_delay(&self) -> Duration {
        self.inner.wake_up_delay
    }

    /// Starts watching `keys` for releases. Call it before the request
    /// reads them, and keep the ticket until its wait ends: a release
    /// after this call makes [`wait`](Self::wait) return at once.
    pub(crate) fn watch(&self, keys: &[Key]) -> WatchTicket {
        // Counted before the keys are read: a writer that deletes a lock
        // after that read checks this count after its write and reports.
        self.inner.watchers.fetch_add(1, Ordering::SeqCst);
        // Key by key: each key's release count is its own, so the keys of
        // one request need not be watched under one mutex.
        let seen = keys
            .iter()
            .map(|key| {
                let hash = key_hash(key);
                let mut shard = self.inner.shard(hash);
                let watched = shard.keys.entry(hash).or_default();
                watched.tickets += 1;
                (hash, watched.releases)
            })
            .collect();
        WatchTicket {
            waits: self.clone(),
            seen,
        }
    }

    /// Whether anyone watches keys now.
    pub(crate) fn has_watchers(&self) -> bool {
        self.inner.watchers.load(Ordering::SeqCst) > 0
    }

    /// Reports that the locks of `hashes`' keys were released: wakes their
    /// oldest waiters now and the others after the wake-up delay.
    pub(crate) fn release(&self, hashes: &[u64]) {
        let now = Instant::now();
        let later = now + self.inner.wake_up_delay;
        let mut woken: Vec<Arc<Wake>> = Vec::new();
        for hash in hashes {
            let mut shard = self.inner.shard(*hash);
            let Some(watched) = shard.keys.get_mut(hash) else {
                continue;
            };
            watched.releases += 1;
            let oldest = watched
                .waiters
                .iter()
                .filter(|w| !w.reader)
                .map(|w| w.start_ts)
                .min();
            for waiter in &mut watched.waiters {
                // The others are not woken: they look again by themselves
                // (see `sleep`).
                let at = if waiter.reader || Some(waiter.start_ts) == oldest {
                    woken.push(waiter.wake.clone());
                    now
                } else {
                    later
                };
                waiter.wake_at = Some(waiter.wake_at.map_or(at, |before| before.min(at)));
            }
        }
        for wake in woken {
            wake.woken.store(true, Ordering::Release);
            wake.condvar.notify_all();
        }
    }

    /// Reports the locks a written batch deleted, if anyone watches.
    pub(crate) fn release_deleted_locks(&self, batch: &WriteBatch) {
        if self.has_watchers() {
            let hashes = deleted_lock_hashes(batch);
            if !hashes.is_empty() {
                self.release(&hashes);
            }
        }
    }

    /// Waits, as the transaction `start_ts`, for the lock of `lock_ts` on
    /// `key` (one of the ticket's keys) to be released, at most `timeout`.
    ///
    /// Returns [`WaitOutcome::Released`] at once if the key was released
    /// since the ticket was taken. Fails with [`Error::Deadlock`], without
    /// waiting, if `lock_ts` waits (directly or through others) for
    /// `start_ts`.
    pub(crate) fn wait(
        &self,
        ticket: &WatchTicket,
        start_ts: TimeStamp,
        key: &Key,
        lock_ts: TimeStamp,
        timeout: Duration,
    ) -> Result<WaitOutcome> {
        let hash = key_hash(key);
        let Some(&(_, seen)) = ticket.seen.iter().find(|(h, _)| *h == hash) else {
            return Ok(WaitOutcome::Released);
        };
        let deadline = crate::deadline_after(timeout);
        let raw = key.to_raw().unwrap_or_else(|_| key.as_encoded().clone());
        let mut shard = self.inner.shard(hash);
        if shard.keys.get(&hash).map_or(seen, |w| w.releases) != seen {
            return Ok(WaitOutcome::Released);
        }
        let edge = WaitForEntry {
            txn: start_ts,
            wait_for_txn: lock_ts,
            key_hash: hash,
            key: raw.clone(),
        };
        // The cycle is looked for and the edge added under one lock of the
        // graph: of two requests that would close a cycle together, the
        // second finds the first's edge.
        let mut graph = self.inner.graph.lock();
        if let Some(mut chain) = cycle_through(&graph, &edge) {
            // The key on which the last waiter waits for this transaction.
            let deadlock_key_hash = chain.last().map_or(hash, |e| e.key_hash);
            chain.push(edge);
            return Err(Error::Deadlock {
                start_ts,
                lock_ts,
                lock_key: raw,
                deadlock_key_hash,
                wait_chain: chain,
            });
        }
        let id = self.inner.next_waiter.fetch_add(1, Ordering::Relaxed);
        graph.entry(start_ts).or_default().push(edge);
        drop(graph);
        shard.add_waiter(hash, id, start_ts, false);
        let outcome = self.sleep(&mut shard, hash, id, deadline);
        // The edge goes first, still under the shard's mutex: no request
        // finds it once the waiter is gone.
        let mut graph = self.inner.graph.lock();
        if let Some(edges) = graph.get_mut(&start_ts) {
            if let Some(at) = edges
                .iter()
                .position(|e| e.wait_for_txn == lock_ts && e.key_hash == hash)
            {
                edges.swap_remove(at);
            }
            if edges.is_empty() {
                graph.remove(&start_ts);
            }
        }
        drop(graph);
        shard.remove_waiter(hash, id);
        Ok(outcome)
    }

    /// Waits, as a reader, for the lock on `key` (one of the ticket's keys)
    /// to be released, at most `timeout`: [`WaitOutcome::Released`] at once
    /// if it was released since the ticket was taken.
    ///
    /// Unlike [`wait`](Self::wait), a reader is no edge of the wait-for
    /// graph (it holds up no one: a transaction whose lock a reader meets
    /// is committing, not waiting for the reader), and every release of
    /// the key wakes it at once.
    pub(crate) fn wait_for_release(
        &self,
        ticket: &WatchTicket,
        key: &Key,
        timeout: Duration,
    ) -> WaitOutcome {
        let hash = key_hash(key);
        let Some(&(_, seen)) = ticket.seen.iter().find(|(h, _)| *h == hash) else {
            return WaitOutcome::Released;
        };
        let deadline = crate::deadline_after(timeout);
        let mut shard = self.inner.shard(hash);
        if shard.keys.get(&hash).map_or(seen, |w| w.releases) != seen {
            return WaitOutcome::Released;
        }
        let id = self.inner.next_waiter.fetch_add(1, Ordering::Relaxed);
        shard.add_waiter(hash, id, TimeStamp::zero(), true);
        let outcome = self.sleep(&mut shard, hash, id, deadline);
        shard.remove_waiter(hash, id);
        outcome
    }

    /// Sleeps until the waiter `id` on the key `hash` is woken by a release,
    /// or `deadline` passes.
    fn sleep(
        &self,
        state: &mut MutexGuard<'_, Shard>,
        hash: u64,
        id: u64,
        deadline: Instant,
    ) -> WaitOutcome {
        let mut spun = false;
        loop {
            let now = Instant::now();
            let waiter = state.keys[&hash]
                .waiters
                .iter()
                .find(|w| w.id == id)
                .expect("a waiter stays until it leaves");
            let (wake_at, wake) = (waiter.wake_at, waiter.wake.clone());
            if wake_at.is_some_and(|at| at <= now) {
                return WaitOutcome::Released;
            }
            if now >= deadline {
                return WaitOutcome::TimedOut;
            }
            // A short transaction's lock goes within microseconds: watch
            // for the release a moment before sleeping (see `spin`), with
            // the shard unlocked so that the release can come.
            if !spun && wake_at.is_none() {
                spun = true;
                MutexGuard::unlocked(state, || crate::spin::LOCK_WAITS.until_set(&wake.woken));
                continue;
            }
            // A release wakes only the oldest waiter and gives the others a
            // later time, which they find when they look again: at most a
            // wake-up delay apart.
            let until = wake_at
                .unwrap_or(now + self.inner.wake_up_delay)
                .min(deadline);
            wake.condvar.wait_until(state, until);
        }
    }

    /// The wait-for edges now, for tests and diagnostics.
    pub fn wait_for_edges(&self) -> Vec<WaitForEntry> {
        let graph = self.inner.graph.lock();
        graph.values().flatten().cloned().collect()
    }
}

impl Inner {
    /// The shard of the key whose hash is `hash`, locked.
    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        self.shards[shard_of(hash)].lock()
    }
}

impl Shard {
    /// Adds the waiter `id` (of the transaction `start_ts`, or a reader)
    /// to the key `hash`, which a ticket watches.
    fn add_waiter(&mut self, hash: u64, id: u64, start_ts: TimeStamp, reader: bool) {
        self.keys
            .get_mut(&hash)
            .expect("a ticket keeps its keys watched")
            .waiters
            .push(Waiter {
                id,
                start_ts,
                reader,
                wake_at: None,
                wake: Arc::default(),
            });
    }

    /// Takes the waiter `id` off the key `hash`.
    fn remove_waiter(&mut self, hash: u64, id: u64) {
        if let Some(watched) = self.keys.get_mut(&hash) {
            watched.waiters.retain(|w| w.id != id);
        }
    }
}

/// The path of waiting edges in `graph` from `edge`'s `wait_for_txn` back
/// to its `txn`, if there is one: the cycle `edge` would close, less
/// `edge`.
fn cycle_through(
    graph: &HashMap<TimeStamp, Vec<WaitForEntry>>,
    edge: &WaitForEntry,
) -> Option<Vec<WaitForEntry>> {
    // Depth-first from the lock owner, remembering the path.
    let mut visited = HashSet::new();
    let mut path: Vec<&WaitForEntry> = Vec::new();
    let mut stack: Vec<(usize, &WaitForEntry)> = graph
        .get(&edge.wait_for_txn)
        .into_iter()
        .flatten()
        .map(|e| (0, e))
        .collect();
    visited.insert(edge.wait_for_txn);
    while let Some((depth, next)) = stack.pop() {
        path.truncate(depth);
        path.push(next);
        if next.wait_for_txn == edge.txn {
            return Some(path.into_iter().cloned().collect());
        }
        if visited.insert(next.wait_for_txn) {
            for further in graph.get(&next.wait_for_txn).into_iter().flatten() {
                stack.push((depth + 1, further));
            }
        }
    }
    None
}

impl Drop for WatchTicket {
    fn drop(&mut self) {
        for (hash, _) in &self.seen {
            let mut shard = self.waits.inner.shard(*hash);
            if let Some(watched) = shard.keys.get_mut(hash) {
                watched.tickets -= 1;
                if watched.tickets == 0 {
                    shard.keys.remove(hash);
                }
            }
        }
        self.waits.inner.watchers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The hashes of the lock-CF keys `batch` deletes: the locks it releases.
/// Allocates nothing for a batch that deletes none.
fn deleted_lock_hashes(batch: &WriteBatch) -> Vec<u64> {
    batch
        .modifies()
        .iter()
        .filter_map(|modify| match modify {
            Modify::Delete { cf: Cf::Lock, key } => Some(encoded_hash(key)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    fn ts(v: u64) -> TimeStamp {
        TimeStamp::new(v)
    }

    fn k(raw: &[u8]) -> Key {
        Key::from_raw(raw)
    }

    #[test]
    fn a_release_after_the_watch_ends_the_wait_at_once() {
        let waits = LockWaits::default();
        let ticket = waits.watch(&[k(b"a")]);
        waits.release(&[key_hash(&k(b"a"))]);
        let outcome = waits
            .wait(&ticket, ts(10), &k(b"a"), ts(5), Duration::from_secs(60))
            .unwrap();
        assert_eq!(outcome, WaitOutcome::Released);
    }

    #[test]
    fn a_wait_times_out_without_a_release() {
        let waits = LockWaits::default();
        let ticket = waits.watch(&[k(b"a")]);
        let outcome = waits
            .wait(&ticket, ts(10), &k(b"a"), ts(5), Duration::from_millis(10))
            .unwrap();
        assert_eq!(outcome, WaitOutcome::TimedOut);
        assert!(waits.wait_for_edges().is_empty());
        drop(ticket);
        assert!(!waits.has_watchers());
    }

    #[test]
    fn the_oldest_waiter_wakes_first() {
        let waits = LockWaits::new(Duration::from_secs(30));
        let woken = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = [30u64, 20]
            .into_iter()
            .map(|start| {
                let (waits, woken) = (waits.clone(), woken.clone());
                let ticket = waits.watch(&[k(b"a")]);
                thread::spawn(move || {
                    let outcome = waits
                        .wait(&ticket, ts(start), &k(b"a"), ts(5), Duration::from_secs(60))
                        .unwrap();
                    woken.lock().push((start, outcome));
                })
            })
            .collect();
        while waits.wait_for_edges().len() < 2 {
            thread::yield_now();
        }
        waits.release(&[key_hash(&k(b"a"))]);
        while woken.lock().is_empty() {
            thread::yield_now();
        }
        // Txn 30 sleeps out the 30 s delay; only 20 ran.
        assert_eq!(*woken.lock(), vec![(20, WaitOutcome::Released)]);
        // A second release wakes the next oldest at once.
        waits.release(&[key_hash(&k(b"a"))]);
        for handle in handles {
            handle.join().unwrap();
        }
        assert_eq!(woken.lock()[1], (30, WaitOutcome::Released));
    }

    /// The waiters a release does not let run at once are not woken, and
    /// still run after the wake-up delay with no other release (a woken
    /// oldest that never takes the lock starves nobody).
    #[test]
    fn the_other_waiters_run_after_the_delay_without_another_release() {
        let delay = Duration::from_millis(50);
        let waits = LockWaits::new(delay);
        let handles: Vec<_> = [10u64, 20, 30]
            .into_iter()
            .map(|start| {
                let waits = waits.clone();
                let ticket = waits.watch(&[k(b"a")]);
                thread::spawn(move || {
                    let outcome = waits
                        .wait(&ticket, ts(start), &k(b"a"), ts(5), Duration::from_secs(60))
                        .unwrap();
                    (start, outcome, Instant::now())
                })
            })
            .collect();
        while waits.wait_for_edges().len() < 3 {
            thread::yield_now();
        }
        let released = Instant::now();
        waits.release(&[key_hash(&k(b"a"))]);
        let mut ran: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        ran.sort_by_key(|(_, _, at)| *at);
        assert_eq!(ran[0].0, 10, "the oldest runs first: {ran:?}");
        for (start, outcome, at) in &ran {
            assert_eq!(*outcome, WaitOutcome::Released, "{start}");
            if *start != 10 {
                assert!(*at >= released + delay, "{start} ran before the delay");
            }
        }
        assert!(waits.wait_for_edges().is_empty());
    }

    #[test]
    fn a_wait_that_closes_a_cycle_fails_naming_it() {
        let waits = LockWaits::default();
        // 10 waits for 20 on a; 20 waits for 30 on b; 30 asks to wait for 10 on c.
        let spawn_wait = |start: u64, lock: u64, key: &'static [u8]| {
            let waits = waits.clone();
            let ticket = waits.watch(&[k(key)]);
            thread::spawn(move || {
                waits.wait(
                    &ticket,
                    ts(start),
                    &k(key),
                    ts(lock),
                    Duration::from_secs(60),
                )
            })
        };
        let first = spawn_wait(10, 20, b"a");
        let second = spawn_wait(20, 30, b"b");
        while waits.wait_for_edges().len() < 2 {
            thread::yield_now();
        }
        let ticket = waits.watch(&[k(b"c")]);
        let err = waits
            .wait(&ticket, ts(30), &k(b"c"), ts(10), Duration::from_secs(60))
            .unwrap_err();
        match err {
            Error::Deadlock {
                start_ts,
                lock_ts,
                lock_key,
                deadlock_key_hash,
                wait_chain,
            } => {
                assert_eq!(
                    (start_ts, lock_ts, lock_key),
                    (ts(30), ts(10), b"c".to_vec())
                );
                let chain: Vec<_> = wait_chain
                    .iter()
                    .map(|e| {
                        (
                            e.txn.into_inner(),
                            e.wait_for_txn.into_inner(),
                            e.key.clone(),
                        )
                    })
                    .collect();
                // TiKV's order: the waits from the lock owner on, then
                // the request's own.
                assert_eq!(
                    chain,
                    vec![
                        (10, 20, b"a".to_vec()),
                        (20, 30, b"b".to_vec()),
                        (30, 10, b"c".to_vec())
                    ]
                );
                assert_eq!(deadlock_key_hash, key_hash(&k(b"b")));
            }
            other => panic!("expected Deadlock, got {other}"),
        }
        // No edge was added for the refused wait; the others still wait.
        assert_eq!(waits.wait_for_edges().len(), 2);
        waits.release(&[key_hash(&k(b"a")), key_hash(&k(b"b"))]);
        assert_eq!(first.join().unwrap().unwrap(), WaitOutcome::Released);
        assert_eq!(second.join().unwrap().unwrap(), WaitOutcome::Released);
    }

    /// Two keys in different shards: a cycle through both is still found
    /// (the graph is one, whatever the shards), and a release of one key
    /// wakes its waiter only.
    #[test]
    fn a_cycle_across_shards_is_found_and_releases_stay_in_their_shard() {
        let (a, b) = (k(b"a"), k(b"b"));
        assert_ne!(shard_of(key_hash(&a)), shard_of(key_hash(&b)));
        let waits = LockWaits::new(Duration::from_secs(60));
        let ticket_a = waits.watch(std::slice::from_ref(&a));
        let first = {
            let (waits, a) = (waits.clone(), a.clone());
            thread::spawn(move || waits.wait(&ticket_a, ts(10), &a, ts(20), Duration::from_secs(60)))
        };
        while waits.wait_for_edges().is_empty() {
            thread::yield_now();
        }
        let ticket_b = waits.watch(std::slice::from_ref(&b));
        let err = waits
            .wait(&ticket_b, ts(20), &b, ts(10), Duration::from_secs(60))
            .unwrap_err();
        assert!(matches!(err, Error::Deadlock { start_ts, lock_ts, .. }
            if start_ts == ts(20) && lock_ts == ts(10)), "{err}");
        // b's release does not reach a's waiter; a's does.
        waits.release(&[key_hash(&b)]);
        thread::sleep(Duration::from_millis(20));
        assert!(!first.is_finished());
        waits.release(&[key_hash(&a)]);
        assert_eq!(first.join().unwrap().unwrap(), WaitOutcome::Released);
        assert!(waits.wait_for_edges().is_empty());
    }

    /// Many waiters on many keys, released from other threads while they
    /// come and go: every wait ends by its release (the wake-up delay is
    /// far longer than the test), none is lost between the shards.
    #[test]
    fn concurrent_waits_and_releases_over_many_keys_lose_no_wake_up() {
        let waits = LockWaits::new(Duration::from_secs(600));
        let keys: Vec<Key> = (0..200u32).map(|i| k(&i.to_be_bytes())).collect();
        let waiters: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let (waits, key) = (waits.clone(), key.clone());
                let ticket = waits.watch(std::slice::from_ref(&key));
                thread::spawn(move || {
                    waits.wait(&ticket, ts(1000 + i as u64), &key, ts(1), Duration::from_secs(60))
                })
            })
            .collect();
        let releasers: Vec<_> = (0..4)
            .map(|r| {
                let waits = waits.clone();
                let hashes: Vec<u64> = keys.iter().skip(r).step_by(4).map(key_hash).collect();
                thread::spawn(move || {
                    for hash in hashes {
                        waits.release(&[hash]);
                    }
                })
            })
            .collect();
        for releaser in releasers {
            releaser.join().unwrap();
        }
        for waiter in waiters {
            assert_eq!(waiter.join().unwrap().unwrap(), WaitOutcome::Released);
        }
        assert!(waits.wait_for_edges().is_empty());
        assert!(!waits.has_watchers());
    }

}
