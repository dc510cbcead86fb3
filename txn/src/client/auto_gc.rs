//! Automatic GC: a safe point that advances by itself, as TiDB's GC worker
//! advances TiKV's, and old versions dropped by the engine's compactions.
//!
//! Each round (a background thread of the client runs one every
//! [`AutoGcConfig::interval`]; [`Client::gc_once`] runs one now):
//!
//! 1. **Safe point**: now (a fresh timestamp of the oracle) minus
//!    [`AutoGcConfig::life_time`], and below the start_ts of the oldest
//!    transaction or snapshot this client handed out that is still alive
//!    (the client keeps a registry of them, see [`LiveTimestamps`]). It
//!    only moves forward; a round that would not move it only finishes
//!    leftovers (step 4).
//! 2. **Locks** of transactions started at or below it are resolved in
//!    every region as [`Client::gc`] resolves them, so that no commit at or
//!    below the safe point is still to come. A live one (another client's)
//!    stops the round with `KeyIsLocked`; the next round tries again.
//! 3. **Hand-over**: the safe point goes to each region's engine
//!    ([`Engine::set_gc_safe_point`]). RocksDB persists it and drops old
//!    write-CF versions (and their default-CF values) in its compactions
//!    (see the engine's `gc_filter`); an engine that does no such thing
//!    (the memory engine) has its region collected with point deletes, as
//!    [`Client::gc`] does.
//! 4. **Leftovers** ([`Engine::take_gc_leftovers`]): keys whose newest
//!    version at or below the safe point is a Delete that a compaction
//!    could not drop are collected with point deletes (TiKV's `GcKeys`).
//!
//! Why the registry bounds the safe point exactly: a new transaction takes
//! its start_ts from the oracle while it holds its registry shard's lock,
//! and a round reads the registry only after taking its own fresh
//! timestamp. A transaction whose start_ts is below the round's timestamp
//! took it earlier, so the round finds it registered (or waits on the
//! shard's lock until it is); one above it is above the safe point anyway.
//! A [`Snapshot`](super::Snapshot) at a chosen timestamp is registered when
//! taken: one older than the life time may find versions gone.
//!
//! A reader that must not read below the safe point (an export) registers
//! its timestamp and then checks it against the safe point a round has
//! announced ([`Client::gc_safe_point_announced`]): a round announces its
//! safe point before it reads the registry, so that either the round finds
//! the registration (and stays below it) or the reader finds the
//! announcement (and refuses to read), each taking the registry shard's
//! lock after the other's write. A GC run at a safe point the caller gives
//! ([`Client::gc`]) announces it too, before it deletes anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use percolate_engine::{Engine, GcRecord};
use percolate_mvcc::{Key, TSO_PHYSICAL_SHIFT_BITS, TimeStamp, WriteRef, WriteType};

use super::{Client, Inner, key};
use crate::Result;
use crate::actions::gc::GcInfo;
use crate::commands::Gc;
use crate::oracle::TimestampOracle;
use crate::slots::{thread_slot, thread_slots};

/// How the client collects garbage by itself ([`ClientConfig::gc`](super::ClientConfig::gc)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoGcConfig {
    /// Whether a background thread of the client runs a round every
    /// `interval`. Switched off, the safe point moves only when
    /// [`Client::gc_once`] is called. Defaults to true. Only a client
    /// from [`Client::open`] or [`Client::open_with`], which owns its
    /// directory, starts the thread: one from [`Client::new`] may share
    /// its engine with other clients, whose transactions and snapshots
    /// its safe point would not wait for, so it collects only when
    /// `gc_once` is called.
    pub enabled: bool,
    /// How long a version stays readable after a newer one hides it: the
    /// safe point is this far behind the clock (TiDB's
    /// `tidb_gc_life_time`). Defaults to 10 minutes, TiDB's default.
    pub life_time: Duration,
    /// Time between two rounds of the background thread. Defaults to 1
    /// minute: a round is cheap (it scans the lock CF, small, and persists
    /// one key; the versions go in compactions), and a short interval
    /// keeps the safe point close to its life time.
    pub interval: Duration,
}

impl Default for AutoGcConfig {
    fn default() -> Self {
        AutoGcConfig {
            enabled: true,
            life_time: Duration::from_secs(10 * 60),
            interval: Duration::from_secs(60),
        }
    }
}

/// What one round of automatic GC did ([`Client::gc_once`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcRound {
    /// The safe point after the round.
    pub safe_point: TimeStamp,
    /// Whether the round moved the safe point forward.
    pub advanced: bool,
    /// What point deletes collected: the regions of engines that do no GC
    /// in compaction, and the keys compactions handed back.
    pub point_deleted: GcInfo,
}

impl<E: Engine> Client<E> {
    /// Runs one round of automatic GC now (see [`AutoGcConfig`]), whether
    /// or not the background thread is on: advances the safe point to now
    /// minus the life time, bounded by the oldest live transaction or
    /// snapshot of this client, resolves the locks below it and hands it
    /// to the engines. RocksDB then drops the old versions in its
    /// compactions, as they come (`RocksEngine::raw_db`'s
    /// `compact_range_cf` forces one).
    ///
    /// A live lock of another client below the new safe point fails the
    /// round with `KeyIsLocked` and leaves the safe point where it was.
    ///
    /// ```
    /// use std::time::Duration;
    /// use percolate_txn::client::{AutoGcConfig, Client, ClientConfig, OpenOptions};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let gc = AutoGcConfig { enabled: false, life_time: Duration::ZERO, ..Default::default() };
    /// let client = Client::open_with(dir.path(), OpenOptions {
    ///     client: ClientConfig { gc, ..Default::default() },
    ///     ..Default::default()
    /// })?;
    /// client.with_retry(|txn| { txn.put(b"k", b"v1"); Ok(()) })?;
    /// let reader = client.begin()?;
    /// client.with_retry(|txn| { txn.put(b"k", b"v2"); Ok(()) })?;
    /// let round = client.gc_once()?;
    /// // Never past a live transaction: it still reads its version.
    /// assert!(round.safe_point < reader.start_ts());
    /// assert_eq!(reader.get(b"k")?, Some(b"v1".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gc_once(&self) -> Result<GcRound> {
        self.gc_round(|| {})
    }

    /// [`gc_once`](Self::gc_once), calling `announced` once the round has
    /// announced its safe point and before it reads the registry of live
    /// timestamps (a test's window into the race it closes).
    pub(super) fn gc_round(&self, announced: impl FnOnce()) -> Result<GcRound> {
        self.check_writable()?;
        let gc = &self.inner.auto_gc;
        let _one_round = gc.round.lock();
        let current = TimeStamp::new(gc.safe_point.load(Ordering::SeqCst));
        let mut round = GcRound {
            safe_point: current,
            ..GcRound::default()
        };
        let by_time = self.safe_point_by_time()?;
        if by_time > current {
            gc.announced.store(by_time.into_inner(), Ordering::SeqCst);
            announced();
            let candidate = match gc.live.oldest() {
                Some(oldest) => by_time.min(TimeStamp::new(oldest.into_inner().saturating_sub(1))),
                None => by_time,
            };
            // What the round will set, or the safe point as it stays.
            gc.announced
                .store(candidate.max(current).into_inner(), Ordering::SeqCst);
            if candidate > current {
                let advanced = self.advance_safe_point(candidate, &mut round);
                if advanced.is_err() {
                    // What the round may have dropped before it failed is
                    // covered by `deleting`.
                    gc.announced.store(current.into_inner(), Ordering::SeqCst);
                }
                advanced?;
            }
        }
        if !round.safe_point.is_zero() {
            let info = self.collect_leftovers(round.safe_point)?;
            add(&mut round.point_deleted, info);
        }
        let deleted = u64::try_from(round.point_deleted.deleted_versions).unwrap_or(u64::MAX);
        self.inner
            .metrics
            .gc_round(round.safe_point.into_inner(), deleted);
        Ok(round)
    }

    /// Resolves the locks below `candidate`, hands it to the engines (or
    /// collects their regions), and makes it the safe point.
    fn advance_safe_point(&self, candidate: TimeStamp, round: &mut GcRound) -> Result<()> {
        for region in self.cluster().regions() {
            self.resolve_locks_below(region, candidate)?;
        }
        self.inner.auto_gc.begin_deleting(candidate);
        for region in self.cluster().regions() {
            let storage = region.storage();
            if !storage
                .engine()
                .set_gc_safe_point(candidate.into_inner(), decode_write)?
            {
                let end = region.end_key().map(key);
                let info = storage.gc(candidate, Some(key(region.start_key())), end)?;
                add(&mut round.point_deleted, info);
            }
        }
        self.inner
            .auto_gc
            .safe_point
            .store(candidate.into_inner(), Ordering::SeqCst);
        round.safe_point = candidate;
        round.advanced = true;
        Ok(())
    }

    /// The safe point a GC round in flight is about to set, or the safe
    /// point if none is, or the largest one below which some GC began to
    /// delete if that is higher: a reader that registered its timestamp (as a
    /// [`Snapshot`](super::Snapshot)) and then finds it at or above this
    /// can read there until it drops the registration (see the module
    /// docs).
    pub(crate) fn gc_safe_point_announced(&self) -> TimeStamp {
        let gc = &self.inner.auto_gc;
        TimeStamp::new(
            gc.announced
                .load(Ordering::SeqCst)
                .max(gc.safe_point.load(Ordering::SeqCst))
                .max(gc.deleting.load(Ordering::SeqCst)),
        )
    }

    /// The safe point of automatic GC: versions that no read at or above
    /// it can see may be gone. Zero until a round advanced it.
    pub fn gc_safe_point(&self) -> TimeStamp {
        TimeStamp::new(self.inner.auto_gc.safe_point.load(Ordering::SeqCst))
    }

    /// Now minus the life time, and below now. The registry is read after
    /// `now` was taken (see the module doc), by the caller.
    fn safe_point_by_time(&self) -> Result<TimeStamp> {
        let now = self.inner.oracle.get_ts()?;
        let life_ms = u64::try_from(self.inner.config.gc.life_time.as_millis()).unwrap_or(u64::MAX);
        // In timestamp units: `life_ms` of physical time, the logical part
        // kept.
        let life = life_ms.saturating_mul(1 << TSO_PHYSICAL_SHIFT_BITS);
        let candidate = TimeStamp::new(now.into_inner().saturating_sub(life));
        Ok(candidate.min(TimeStamp::new(now.into_inner().saturating_sub(1))))
    }

    /// Collects with point deletes the keys the engines' compactions
    /// handed back.
    fn collect_leftovers(&self, safe_point: TimeStamp) -> Result<GcInfo> {
        let regions = self.cluster().regions();
        let mut by_region: Vec<Vec<Key>> = vec![Vec::new(); regions.len()];
        for region in regions {
            for prefix in region.storage().engine().take_gc_leftovers()? {
                let encoded = Key::from_encoded(prefix);
                // A key that does not decode is no transactional key.
                let Ok(raw) = encoded.to_raw() else {
                    continue;
                };
                let index = regions.partition_point(|r| r.start_key() <= raw.as_slice());
                by_region[index.saturating_sub(1)].push(encoded);
            }
        }
        let mut total = GcInfo::default();
        for (region, mut keys) in regions.iter().zip(by_region) {
            keys.sort();
            keys.dedup();
            for chunk in keys.chunks(LEFTOVER_BATCH) {
                let info = region.storage().write(Gc {
                    keys: chunk.to_vec(),
                    safe_point,
                })?;
                add(&mut total, info);
            }
        }
        Ok(total)
    }
}

/// Keys handed back by compactions collected per command.
const LEFTOVER_BATCH: usize = 256;

fn add(total: &mut GcInfo, info: GcInfo) {
    total.found_versions += info.found_versions;
    total.deleted_versions += info.deleted_versions;
    total.deleted_values += info.deleted_values;
}

/// Reads a write-CF record for the engine's GC in compaction.
pub(super) fn decode_write(value: &[u8]) -> Option<GcRecord> {
    let write = WriteRef::parse(value).ok()?;
    Some(match write.write_type {
        WriteType::Put => GcRecord::Put {
            start_ts: write.start_ts.into_inner(),
            long_value: write.short_value.is_none(),
        },
        WriteType::Delete => GcRecord::Delete,
        _ => GcRecord::Other,
    })
}

/// The client's side of automatic GC: the registry of live timestamps, the
/// safe point, and the background thread.
pub(crate) struct AutoGc {
    /// The start_ts of every live transaction and snapshot.
    pub(crate) live: Arc<LiveTimestamps>,
    /// The safe point of the last round that advanced it.
    safe_point: AtomicU64,
    /// The safe point the round in flight is about to set (announced
    /// before it reads the registry); after a round, the safe point.
    announced: AtomicU64,
    /// The largest safe point below which some GC has begun to drop
    /// versions, whether it then finished or failed part way (a round,
    /// or [`Client::gc`]); never lowered.
    deleting: AtomicU64,
    /// Held by a round: one at a time.
    round: Mutex<()>,
    stop: Arc<Stop>,
}

/// Tells the background thread to stop, and wakes it.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Stop {
    /// Stops the background thread and waits for it to end (a round in
    /// flight finishes first), unless called on that thread.
    fn halt(&self) {
        *self.stopped.lock() = true;
        self.wake.notify_all();
        let thread = self.thread.lock().take();
        if let Some(thread) = thread {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// Shared by a client's [`Client`] handles: when the last of them is
/// dropped, the background thread is stopped and joined before the drop
/// returns. The thread holds the client only during a round, but a round
/// in flight when the user's last handle goes would otherwise hold the
/// last reference and drop the client (its engine, its directory lock)
/// later, on the GC thread: a reopen of the directory right after the drop
/// would find it still locked.
pub(crate) struct Handles(Option<Arc<Stop>>);

impl Handles {
    /// The handles of `client`'s users: their last stops its GC thread.
    pub(crate) fn of<E: Engine>(client: &Inner<E>) -> Arc<Self> {
        Arc::new(Handles(Some(client.auto_gc.stop.clone())))
    }

    /// For the GC thread's own handle, which stops nothing.
    fn none() -> Arc<Self> {
        Arc::new(Handles(None))
    }
}

impl Drop for Handles {
    fn drop(&mut self) {
        if let Some(stop) = &self.0 {
            stop.halt();
        }
    }
}

impl AutoGc {
    pub(crate) fn new() -> Self {
        AutoGc {
            live: Arc::new(LiveTimestamps::new()),
            safe_point: AtomicU64::new(0),
            announced: AtomicU64::new(0),
            deleting: AtomicU64::new(0),
            round: Mutex::new(()),
            stop: Arc::default(),
        }
    }

    /// Announces the safe point of a GC run with a safe point given by the
    /// caller ([`Client::gc`]) before it deletes anything, one round at a
    /// time with the automatic ones: the run holds the returned guard.
    pub(crate) fn announce_given(&self, safe_point: TimeStamp) -> parking_lot::MutexGuard<'_, ()> {
        let one_round = self.round.lock();
        self.announced
            .fetch_max(safe_point.into_inner(), Ordering::SeqCst);
        one_round
    }

    /// Records that GC at `safe_point` is about to drop versions (its
    /// locks below are resolved): from here on it counts as announced,
    /// even if the run fails part way and a later round announces less.
    pub(crate) fn begin_deleting(&self, safe_point: TimeStamp) {
        self.deleting
            .fetch_max(safe_point.into_inner(), Ordering::SeqCst);
    }

    /// Starts from `safe_point`, the engine's persisted one, if it is
    /// ahead.
    pub(crate) fn resume_from(&self, safe_point: u64) {
        self.safe_point.fetch_max(safe_point, Ordering::SeqCst);
    }

    /// Starts the background thread of `client` if its configuration asks
    /// for it. It holds the client weakly (strongly during a round), and
    /// is stopped and joined when the last [`Client`] handle is dropped
    /// (see [`Handles`]).
    pub(crate) fn start<E: Engine>(client: &Arc<Inner<E>>) {
        let config = &client.config.gc;
        if !config.enabled || client.read_only.is_some() {
            return;
        }
        let (weak, stop, interval) = (
            Arc::downgrade(client),
            client.auto_gc.stop.clone(),
            config.interval,
        );
        let thread = std::thread::Builder::new()
            .name("percolate-gc".into())
            .spawn(move || run(&weak, &stop, interval))
            .expect("spawning the GC thread");
        *client.auto_gc.stop.thread.lock() = Some(thread);
    }
}

impl Drop for AutoGc {
    fn drop(&mut self) {
        // Usually stopped already by the last `Client` handle; otherwise
        // (transactions outlived it) here, on the thread that drops the
        // client last, which may be the GC thread itself.
        self.stop.halt();
    }
}

/// The background thread: a round every `interval` until stopped.
fn run<E: Engine>(client: &Weak<Inner<E>>, stop: &Stop, interval: Duration) {
    loop {
        {
            let mut stopped = stop.stopped.lock();
            if !*stopped {
                stop.wake.wait_for(&mut stopped, interval);
            }
            if *stopped {
                return;
            }
        }
        let Some(inner) = client.upgrade() else {
            return;
        };
        // A failed round (a live lock, an I/O error) is tried again at the
        // next one.
        let client = Client {
            handles: Handles::none(),
            inner,
        };
        let _ = client.gc_once();
    }
}

/// The start_ts of the live transactions and snapshots of a client, with
/// how many hold each, sharded by thread so that threads beginning
/// transactions at once rarely share a lock.
pub(crate) struct LiveTimestamps {
    /// Per shard, the registered timestamps (a multiset, unordered: a
    /// shard holds the few transactions of the threads that share it, and
    /// a vector that keeps its capacity allocates nothing per
    /// registration).
    shards: Box<[CachePadded<Mutex<Vec<TimeStamp>>>]>,
}

impl LiveTimestamps {
    fn new() -> Self {
        LiveTimestamps {
            shards: (0..thread_slots())
                .map(|_| CachePadded::default())
                .collect(),
        }
    }

    /// A fresh timestamp from `oracle`, registered while this thread's
    /// shard is locked (see the module doc).
    pub(crate) fn fresh(
        self: &Arc<Self>,
        oracle: &dyn TimestampOracle,
    ) -> Result<(TimeStamp, LiveTs)> {
        let shard = thread_slot() % self.shards.len();
        let mut map = self.shards[shard].lock();
        let ts = oracle.get_ts()?;
        map.push(ts);
        drop(map);
        Ok((ts, self.guard(shard, ts)))
    }

    /// Registers `ts` until the returned guard is dropped.
    pub(crate) fn register(self: &Arc<Self>, ts: TimeStamp) -> LiveTs {
        let shard = thread_slot() % self.shards.len();
        self.shards[shard].lock().push(ts);
        self.guard(shard, ts)
    }

    fn guard(self: &Arc<Self>, shard: usize, ts: TimeStamp) -> LiveTs {
        LiveTs {
            registry: self.clone(),
            shard,
            ts,
        }
    }

    /// The oldest registered timestamp.
    fn oldest(&self) -> Option<TimeStamp> {
        self.shards
            .iter()
            .filter_map(|shard| shard.lock().iter().min().copied())
            .min()
    }
}

/// A registration in [`LiveTimestamps`], removed when dropped; a clone is
/// another registration of the same timestamp.
pub(crate) struct LiveTs {
    registry: Arc<LiveTimestamps>,
    shard: usize,
    ts: TimeStamp,
}

impl Clone for LiveTs {
    fn clone(&self) -> Self {
        self.registry.register(self.ts)
    }
}

impl Drop for LiveTs {
    fn drop(&mut self) {
        let mut live = self.registry.shards[self.shard].lock();
        if let Some(at) = live.iter().position(|ts| *ts == self.ts) {
            live.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_tracks_the_oldest_live_timestamp() {
        let live = Arc::new(LiveTimestamps::new());
        assert_eq!(live.oldest(), None);
        let a = live.register(TimeStamp::new(20));
        let b = live.register(TimeStamp::new(10));
        let b2 = b.clone();
        assert_eq!(live.oldest(), Some(TimeStamp::new(10)));
        drop(b);
        assert_eq!(live.oldest(), Some(TimeStamp::new(10)));
        drop(b2);
        assert_eq!(live.oldest(), Some(TimeStamp::new(20)));
        let from_another_thread = {
            let live = live.clone();
            std::thread::spawn(move || live.register(TimeStamp::new(5)))
                .join()
                .unwrap()
        };
        assert_eq!(live.oldest(), Some(TimeStamp::new(5)));
        drop((a, from_another_thread));
        assert_eq!(live.oldest(), None);
    }
}
