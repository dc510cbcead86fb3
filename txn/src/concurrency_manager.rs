//! The concurrency manager of a region: `max_ts` and the in-memory lock
//! table.
//!
//! Async commit and 1PC compute a commit_ts instead of asking the oracle,
//! from `max_ts`: the largest timestamp any reader of the region has read
//! at. The race to close is a reader at `ts` that misses a lock being
//! prewritten and a commit_ts then computed at or below `ts`. So a prewrite
//! first puts its keys into the memory lock table ([`lock_keys`]), and only
//! then reads `max_ts`; a reader first raises `max_ts`, and only then checks
//! the memory table ([`read_key`]). Whatever the interleaving, either
//! the reader sees the memory lock, or the prewrite sees the reader's ts.
//!
//! `max_ts` only grows, so one read at an absurd timestamp (a stale read
//! retried with a made-up ts, a bug in a caller) would push every later
//! async-commit and 1PC commit_ts of the region past it: commits that no
//! reader with an oracle timestamp could see for a long time. A
//! [`MaxTsLimit`] bounds it, as TiKV bounds it by PD's latest timestamp:
//! an update above the oracle's latest timestamp plus an allowance is
//! refused with [`Error::InvalidMaxTsUpdate`] (docs/BEHAVIOUR.md O1).
//!
//! [`lock_keys`]: ConcurrencyManager::lock_keys
//! [`read_key`]: ConcurrencyManager::read_key

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex, MutexGuard};
use percolate_mvcc::{CommittedVersion, Key, Lock, TimeStamp, VersionHints};
use smallvec::SmallVec;

use crate::Error;
use crate::lock_wait::LockWaits;
use crate::oracle::{Clock, TimestampOracle};
use crate::slots::{thread_slot, thread_slots};
use crate::versions::VersionCache;

/// The upper bound on a region's `max_ts`: the latest timestamp of the
/// oracle plus an allowance for clock drift between the oracle and the
/// callers.
///
/// The bound is cached. An update at or below it costs one atomic load; one
/// above it asks the oracle for a fresh timestamp and moves the bound up
/// first, so a caller whose timestamps come from the same oracle is never
/// refused.
///
/// [`with_wall_clock`](Self::with_wall_clock) bounds it by the wall clock
/// instead, for an oracle that reads may move ahead of the clock (see
/// [`Client::snapshot`](crate::client::Client::snapshot)).
#[derive(Clone)]
pub struct MaxTsLimit {
    oracle: Arc<dyn TimestampOracle>,
    allowance: Duration,
    wall: Option<Arc<dyn Clock>>,
}

impl MaxTsLimit {
    /// TiKV's default allowance (`max-ts-drift-allowance`): 60 s.
    pub const DEFAULT_ALLOWANCE: Duration = Duration::from_secs(60);

    /// Bounds `max_ts` by `oracle`'s latest timestamp plus `allowance`
    /// (on its physical part).
    pub fn new(oracle: Arc<dyn TimestampOracle>, allowance: Duration) -> Self {
        MaxTsLimit {
            oracle,
            allowance,
            wall: None,
        }
    }

    /// Bounds `max_ts` by `clock`'s time plus the allowance, or by the
    /// oracle's latest timestamp where that is higher, instead of by the
    /// oracle's latest plus the allowance.
    ///
    /// The same where the oracle follows the clock, as a [`LocalOracle`]
    /// does. It differs once reads at chosen timestamps have moved the
    /// oracle ahead of the clock (which a client does for a read ahead
    /// of the oracle, up to the clock plus the allowance): the bound then
    /// stays where a read can still move the oracle past its timestamp,
    /// rather than an allowance beyond the moved oracle. A read above
    /// that would raise `max_ts` beyond the oracle for good, and the
    /// async-commit and 1PC commits computed above it would be invisible
    /// to transactions beginning after them. The oracle's own timestamps
    /// stay within the bound even with the clock set back.
    ///
    /// [`LocalOracle`]: crate::oracle::LocalOracle
    #[must_use]
    pub fn with_wall_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.wall = Some(clock);
        self
    }

    /// The bound now, from a fresh timestamp (see [`new`](Self::new) and
    /// [`with_wall_clock`](Self::with_wall_clock)).
    fn fresh(&self) -> crate::Result<TimeStamp> {
        let latest = self.oracle.get_ts()?;
        let allowance_ms = u64::try_from(self.allowance.as_millis()).unwrap_or(u64::MAX);
        let base_ms = match &self.wall {
            Some(clock) => clock.now_ms(),
            None => latest.physical(),
        };
        let physical = base_ms.saturating_add(allowance_ms);
        // Past the 46 bits of the physical part: no bound to speak of.
        let bound = if physical >= 1 << 46 {
            TimeStamp::max()
        } else {
            TimeStamp::compose(physical, 0)
        };
        Ok(bound.max(latest))
    }
}

impl std::fmt::Debug for MaxTsLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxTsLimit")
            .field("allowance", &self.allowance)
            .field("wall_clock", &self.wall.is_some())
            .finish_non_exhaustive()
    }
}

/// Two limits are equal when they ask the same oracle with the same
/// allowance, and the same wall clock or none.
impl PartialEq for MaxTsLimit {
    fn eq(&self, other: &Self) -> bool {
        let same_wall = match (&self.wall, &other.wall) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        Arc::ptr_eq(&self.oracle, &other.oracle) && self.allowance == other.allowance && same_wall
    }
}

impl Eq for MaxTsLimit {}

/// `max_ts` and the memory locks of one region. A cheap handle: clones
/// share the same state, and every method takes `&self`.
#[derive(Clone, Debug, Default)]
pub struct ConcurrencyManager {
    inner: Arc<Inner>,
}

///
/// Every read and every write of the region passes through here, from
/// every thread, so what they touch is laid out for it: `max_ts` on a
/// cache line of its own (written only when a read raises it), the memory
/// lock table in shards by key hash, each with its own count on its own
/// line, and the version hints behind one handle per thread slot, so that
/// taking a handle counts a reference on a line no other thread writes.
#[derive(Debug)]
struct Inner {
    max_ts: CachePadded<AtomicU64>,
    /// The memory lock table, by [`shard_of`] the key.
    shards: Box<[Arc<LockShard>]>,
    limit: Option<MaxTsLimit>,
    /// The last bound `limit` gave (0: not asked yet). Only grows.
    cached_limit: AtomicU64,
    /// The newest data versions of recently committed keys.
    versions: Arc<VersionCache>,
    /// `versions` once per thread slot (see [`ConcurrencyManager::version_hints`]).
    hints: Box<[Arc<HintsHandle>]>,
    /// Where pessimistic lock requests wait (shared by a cluster's
    /// regions).
    lock_waits: LockWaits,
    /// How long [`ConcurrencyManager::read_key`] and its kin wait out a
    /// blocking memory lock when asked to ([`MemoryLockWait::Configured`]).
    memory_lock_wait: Duration,
}

impl Default for Inner {
    fn default() -> Self {
        Self::new(
            TimeStamp::zero(),
            None,
            LockWaits::default(),
            crate::versions::DEFAULT_BYTES,
        )
    }
}

impl Inner {
    fn new(
        latest_ts: TimeStamp,
        limit: Option<MaxTsLimit>,
        lock_waits: LockWaits,
        version_hint_bytes: usize,
    ) -> Self {
        let versions = Arc::new(VersionCache::with_bytes(version_hint_bytes));
        let slots = thread_slots();
        // A start beyond the oracle's range (a misconfigured
        // `initial_max_ts`) would put every computed commit_ts there too:
        // it starts at the top of the range instead, where async commit and
        // 1PC fall back to 2PC.
        let latest_ts = latest_ts.min(crate::oracle::last_in_range());
        Inner {
            max_ts: CachePadded::new(AtomicU64::new(latest_ts.into_inner())),
            shards: (0..LOCK_SHARDS).map(|_| Arc::default()).collect(),
            limit,
            cached_limit: AtomicU64::new(0),
            hints: (0..slots)
                .map(|_| Arc::new(HintsHandle(versions.clone())))
                .collect(),
            versions,
            lock_waits,
            memory_lock_wait: DEFAULT_MEMORY_LOCK_WAIT,
        }
    }

    fn shard(&self, key: &Key) -> &Arc<LockShard> {
        &self.shards[shard_of(key)]
    }
}

/// Shards of the memory lock table.
const LOCK_SHARDS: usize = 32;

/// How long a read waits out a blocking memory lock by default (see
/// [`StorageConfig::memory_lock_wait`](crate::storage::StorageConfig::memory_lock_wait)).
pub const DEFAULT_MEMORY_LOCK_WAIT: Duration = Duration::from_millis(5);

/// The shard of `key`, from the high bits of its hash (the best mixed).
fn shard_of(key: &Key) -> usize {
    (percolate_engine::mem::key_hash(key.as_encoded()) >> 58) as usize % LOCK_SHARDS
}

/// One shard of the memory lock table. Aligned so that shards (and their
/// reference counts, which key guards take) do not share cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct LockShard {
    /// Invariant: an entry lives exactly as long as its [`KeyGuard`].
    table: Mutex<BTreeSet<Entry>>,
    /// The number of entries in `table`, stored while its mutex is held,
    /// so that a reader who finds it zero can skip the mutex (see
    /// [`ConcurrencyManager::read_key`]).
    entries: AtomicUsize,
}

/// Whether a read that meets a blocking memory lock (an async-commit or
/// 1PC prewrite between taking its keys and writing them) waits for it to
/// leave the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLockWait {
    /// Answers at once with the check's error, as TiKV does (ScanLock,
    /// and checks that must not block).
    Never,
    /// Waits up to the manager's memory lock wait
    /// ([`StorageConfig::memory_lock_wait`](crate::storage::StorageConfig::memory_lock_wait)),
    /// then checks again.
    Configured,
}

/// A handle on the region's version hints; one per thread slot, aligned
/// so that each handle's reference count has its cache line to itself.
#[derive(Debug)]
#[repr(align(128))]
struct HintsHandle(Arc<VersionCache>);

impl VersionHints for HintsHandle {
    fn newest_data_version(&self, key: &Key, record: &mut Vec<u8>) -> Option<(TimeStamp, u64)> {
        self.0.newest_data_version(key, record)
    }

    fn offer(&self, key: &Key, version: TimeStamp, epoch: u64) {
        self.0.offer(key, version, epoch)
    }

    fn fill(&self, key: &Key, version: TimeStamp, epoch: u64, record: &[u8]) {
        self.0.fill(key, version, epoch, record)
    }
}

/// An entry of a shard's table: a key's memory lock, ordered by the key
/// it holds (so that the key is stored once, in the lock).
#[derive(Debug)]
struct Entry(Arc<MemoryLock>);

impl std::borrow::Borrow<Key> for Entry {
    fn borrow(&self) -> &Key {
        &self.0.key
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

/// The slot of one key in the memory lock table.
#[derive(Debug)]
pub struct MemoryLock {
    /// The key held.
    key: Key,
    slot: Mutex<Slot>,
    /// Signalled when the key leaves the table, if `slot.waiters` is not
    /// zero.
    released: Condvar,
    /// `slot.released`, for a reader that spins before it sleeps.
    released_flag: AtomicBool,
}

/// What a [`MemoryLock`]'s mutex guards.
#[derive(Debug, Default)]
struct Slot {
    /// The lock being written, once published.
    lock: Option<Lock>,
    /// The guard dropped: the prewrite's write is in the engine (or
    /// failed), and the key left the table.
    released: bool,
    /// Readers waiting for `released`.
    waiters: u32,
}

impl MemoryLock {
    fn new(key: Key) -> Self {
        MemoryLock {
            key,
            slot: Mutex::default(),
            released: Condvar::new(),
            released_flag: AtomicBool::new(false),
        }
    }

    /// Runs `check` on the lock held here, if one is published.
    fn check<E>(&self, check: &impl Fn(&Lock, &Key) -> Result<(), E>) -> Result<(), E> {
        match &self.slot.lock().lock {
            Some(lock) => check(lock, &self.key),
            None => Ok(()),
        }
    }

    /// Waits until this key leaves the table or `deadline` passes; whether
    /// it left.
    fn wait_released(&self, deadline: Instant) -> bool {
        // The write in flight usually ends within microseconds: see `spin`.
        if crate::spin::IN_FLIGHT_WAITS.until_set(&self.released_flag) {
            return true;
        }
        let mut slot = self.slot.lock();
        slot.waiters += 1;
        while !slot.released && !self.released.wait_until(&mut slot, deadline).timed_out() {}
        slot.waiters -= 1;
        slot.released
    }
}

/// The guards of one command's keys: those of one or two keys inline (the
/// guards travel with the command's result to its completion), more on
/// the heap.
pub type KeyGuards = SmallVec<[KeyGuard; 2]>;

/// Holds a key in the memory lock table; dropping it removes the key, on
/// every path (success, error, panic).
#[derive(Debug)]
pub struct KeyGuard {
    shard: Arc<LockShard>,
    handle: Arc<MemoryLock>,
}

impl KeyGuard {
    /// The key held.
    #[cfg(any(test, feature = "test-util"))]
    pub fn key(&self) -> &Key {
        &self.handle.key
    }

    /// Publishes the lock being written for this key, for readers to see.
    #[cfg(any(test, feature = "test-util"))]
    pub fn set_lock(&self, lock: Lock) {
        self.handle.slot.lock().lock = Some(lock);
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        let mut table = self.shard.table.lock();
        if table
            .get(&self.handle.key)
            .is_some_and(|entry| Arc::ptr_eq(&entry.0, &self.handle))
        {
            table.remove(&self.handle.key);
            self.shard.entries.store(table.len(), Ordering::SeqCst);
        }
        drop(table);
        // After the key left the table: a woken reader looks again and
        // does not find this handle.
        let mut slot = self.handle.slot.lock();
        slot.released = true;
        self.handle.released_flag.store(true, Ordering::Release);
        if slot.waiters > 0 {
            self.handle.released.notify_all();
        }
    }
}

/// The memory locks of a set of guards, held exclusively while a prewrite
/// reads `max_ts` and decides its locks: a reader checking one of these
/// keys waits until [`publish`](Self::publish) and then sees the lock. See
/// [`ConcurrencyManager::lock_for_publish`].
pub struct PublishGuard<'a> {
    slots: SmallVec<[(&'a Key, MutexGuard<'a, Slot>); 4]>,
}

impl std::fmt::Debug for PublishGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishGuard")
            .field("keys", &self.slots.len())
            .finish()
    }
}

impl PublishGuard<'_> {
    /// Sets the memory lock of each held key to what `lock_of` says
    /// (`None` leaves the key unlocked) and lets readers in.
    pub fn publish(mut self, mut lock_of: impl FnMut(&Key) -> Option<Lock>) {
        for (key, slot) in &mut self.slots {
            slot.lock = lock_of(key);
        }
    }
}

impl ConcurrencyManager {
    /// A manager whose `max_ts` starts at `latest_ts` (a fresh timestamp
    /// from the oracle, so that commits computed here are never below a read
    /// served before a restart).
    #[cfg(any(test, feature = "test-util"))]
    pub fn new(latest_ts: TimeStamp) -> Self {
        Self::with_limit(latest_ts, None)
    }

    /// A manager whose `max_ts` starts at `latest_ts` and, with a `limit`,
    /// never goes above it (see [`MaxTsLimit`]).
    #[cfg(any(test, feature = "test-util"))]
    pub fn with_limit(latest_ts: TimeStamp, limit: Option<MaxTsLimit>) -> Self {
        Self::with_lock_waits(latest_ts, limit, LockWaits::default())
    }

    /// [`with_limit`](Self::with_limit), with pessimistic lock requests
    /// waiting in `lock_waits` (a table shared with other regions).
    #[cfg(any(test, feature = "test-util"))]
    pub fn with_lock_waits(
        latest_ts: TimeStamp,
        limit: Option<MaxTsLimit>,
        lock_waits: LockWaits,
    ) -> Self {
        Self::with_parts(latest_ts, limit, lock_waits, crate::versions::DEFAULT_BYTES)
    }

    /// A manager whose `max_ts` starts at `latest_ts` and, with a `limit`,
    /// never goes above it (see [`MaxTsLimit`]); pessimistic lock requests
    /// wait in `lock_waits` (a table shared with other regions), and version
    /// hints take at most `version_hint_bytes` (see
    /// [`StorageConfig::version_hint_bytes`](crate::storage::StorageConfig::version_hint_bytes)).
    #[cfg(any(test, feature = "test-util"))]
    pub fn with_parts(
        latest_ts: TimeStamp,
        limit: Option<MaxTsLimit>,
        lock_waits: LockWaits,
        version_hint_bytes: usize,
    ) -> Self {
        ConcurrencyManager {
            inner: Arc::new(Inner::new(latest_ts, limit, lock_waits, version_hint_bytes)),
        }
    }

    /// The manager of a storage opened with `config`: `max_ts`, its
    /// limit, the lock-wait table and the version hints from its fields
    /// (as `with_parts` takes them), and reads waiting out a blocking memory lock for
    /// [`StorageConfig::memory_lock_wait`].
    ///
    /// [`StorageConfig::memory_lock_wait`]: crate::storage::StorageConfig::memory_lock_wait
    pub fn for_storage(config: &crate::storage::StorageConfig) -> Self {
        let mut inner = Inner::new(
            config.initial_max_ts,
            config.max_ts_limit.clone(),
            config.lock_waits.clone(),
            config.version_hint_bytes,
        );
        inner.memory_lock_wait = config.memory_lock_wait;
        ConcurrencyManager {
            inner: Arc::new(inner),
        }
    }

    /// The table pessimistic lock requests wait in.
    pub fn lock_waits(&self) -> &LockWaits {
        &self.inner.lock_waits
    }

    /// Starts bringing into the CPU's caches what a write command on `key`
    /// will touch here: its shard of the memory lock table and its version
    /// hint (see [`percolate_engine::mem`]).
    pub fn prefetch(&self, key: &Key) {
        percolate_engine::mem::prefetch(&**self.inner.shard(key));
        self.inner.versions.prefetch(key);
    }

    /// Records the newest data versions a write command has just written
    /// (its commits' Put and Delete records), at `engine`'s write epochs
    /// read now, while the command still holds its latches: see
    /// [`VersionHints`].
    pub fn record_committed<E: percolate_engine::Engine>(
        &self,
        engine: &E,
        versions: &[CommittedVersion],
    ) {
        for version in versions {
            let epoch = engine.write_epoch(version.key.as_encoded());
            self.inner
                .versions
                .record(&version.key, version.commit_ts, &version.record, epoch);
        }
    }

    /// The newest data versions of the keys this region committed
    /// recently, for point reads (and pessimistic lock requests that want
    /// the value) to fetch with a point get, or from the hint's own copy
    /// of the record (see
    /// [`VersionHints`]).
    pub fn version_hints(&self) -> Arc<dyn VersionHints> {
        let hints = &self.inner.hints;
        hints[thread_slot() % hints.len()].clone()
    }

    /// The largest read timestamp seen.
    pub fn max_ts(&self) -> TimeStamp {
        TimeStamp::new(self.inner.max_ts.load(Ordering::SeqCst))
    }

    /// Raises `max_ts` to `ts`. `TimeStamp::max()` ("read the latest") is
    /// not a real timestamp and is ignored. Any other `ts` beyond the
    /// oracle's range ([`beyond_range`](crate::oracle::beyond_range)) is
    /// refused with [`Error::InvalidMaxTsUpdate`], as is one above the
    /// [`MaxTsLimit`] where there is one; `max_ts` then stays as it was (a
    /// commit_ts computed above it would be beyond the range).
    pub fn update_max_ts(&self, ts: TimeStamp) -> crate::Result<()> {
        if ts.is_max() {
            return Ok(());
        }
        if crate::oracle::beyond_range(ts) {
            return Err(Error::InvalidMaxTsUpdate {
                attempted_ts: ts,
                limit: crate::oracle::last_in_range(),
            });
        }
        self.check_limit(ts)?;
        // Most reads are at or below a max_ts some read already raised it
        // to: a load leaves the cache line shared, where a read-modify-write
        // would take it from every other core.
        if self.inner.max_ts.load(Ordering::SeqCst) < ts.into_inner() {
            self.inner
                .max_ts
                .fetch_max(ts.into_inner(), Ordering::SeqCst);
        }
        Ok(())
    }

    /// Whether `max_ts` is limited by the wall clock
    /// ([`MaxTsLimit::with_wall_clock`]).
    pub fn limit_follows_clock(&self) -> bool {
        self.inner
            .limit
            .as_ref()
            .is_some_and(|limit| limit.wall.is_some())
    }

    /// Fails with [`Error::InvalidMaxTsUpdate`] when `ts` is above the
    /// [`MaxTsLimit`] (when there is one), without touching `max_ts`: a
    /// transaction's timestamps are checked so before its locks are
    /// written, since a lock's TTL counts from its start_ts and a start_ts
    /// far in the future would hold the key for as long.
    pub fn check_limit(&self, ts: TimeStamp) -> crate::Result<()> {
        let Some(limit) = &self.inner.limit else {
            return Ok(());
        };
        if ts.into_inner() <= self.inner.cached_limit.load(Ordering::Relaxed) {
            return Ok(());
        }
        let fresh = limit.fresh()?;
        self.inner
            .cached_limit
            .fetch_max(fresh.into_inner(), Ordering::Relaxed);
        if ts > fresh {
            return Err(Error::InvalidMaxTsUpdate {
                attempted_ts: ts,
                limit: fresh,
            });
        }
        Ok(())
    }

    /// Puts `keys` (owned or borrowed) into the memory lock table (sorted
    /// first, so concurrent callers cannot deadlock). Keys are held until
    /// the guards drop.
    pub fn lock_keys<K: std::borrow::Borrow<Key>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> KeyGuards {
        // (A commit of a few keys sorts them without a heap allocation.)
        let mut keys: SmallVec<[K; 4]> = keys.into_iter().collect();
        keys.sort_unstable_by(|a, b| a.borrow().cmp(b.borrow()));
        keys.dedup_by(|a, b| a.borrow() == b.borrow());
        keys.iter()
            .map(|key| {
                let key: &Key = key.borrow();
                let shard = self.inner.shard(key);
                let handle = Arc::new(MemoryLock::new(key.clone()));
                let mut table = shard.table.lock();
                // A key still held by another command's guard (which then
                // leaves the table alone) is taken over.
                table.replace(Entry(handle.clone()));
                shard.entries.store(table.len(), Ordering::SeqCst);
                drop(table);
                KeyGuard {
                    shard: shard.clone(),
                    handle,
                }
            })
            .collect()
    }

    /// Whether `shard` of the memory lock table is empty, read without its
    /// mutex.
    ///
    /// Sound for a reader that raised `max_ts` before asking (both are
    /// sequentially consistent): a prewrite that puts its keys in the table
    /// stores each shard's new count before it reads `max_ts`, so either
    /// the reader sees the count and takes the mutex (which the prewrite
    /// held while inserting), or the prewrite's read of `max_ts` comes
    /// after the reader's update and its commit_ts lands above the read.
    fn is_empty(shard: &LockShard) -> bool {
        shard.entries.load(Ordering::SeqCst) == 0
    }

    /// Takes the memory locks of `guards` exclusively (in key order) and
    /// returns `max_ts` read while holding them.
    ///
    /// This is the prewrite's half of the protocol: a reader raises
    /// `max_ts` and then checks the memory lock under the same mutex. A
    /// reader that checks before this call has already raised the `max_ts`
    /// returned here; one that checks later waits for
    /// [`PublishGuard::publish`] and sees the lock.
    pub fn lock_for_publish<'a>(&self, guards: &'a [KeyGuard]) -> (TimeStamp, PublishGuard<'a>) {
        let slots = guards
            .iter()
            .map(|g| (&g.handle.key, g.handle.slot.lock()))
            .collect();
        (self.max_ts(), PublishGuard { slots })
    }

    /// Runs `check` on the memory lock of `key`, if one is published.
    ///
    /// With [`MemoryLockWait::Configured`], a memory lock that fails it is
    /// waited out first, for up to the manager's memory lock wait (see
    /// [`StorageConfig::memory_lock_wait`](crate::storage::StorageConfig::memory_lock_wait)),
    /// and the key checked again once it leaves the table: such a lock
    /// lasts one engine write, and once it is gone the read finds the
    /// prewrite's outcome in the engine (a 1PC commit, or a lock in the
    /// lock CF). `check`'s error if a blocking lock is still there when
    /// the wait runs out, or at once with [`MemoryLockWait::Never`].
    pub fn read_key<E>(
        &self,
        key: &Key,
        wait: MemoryLockWait,
        check: impl Fn(&Lock, &Key) -> Result<(), E>,
    ) -> Result<(), E> {
        self.waiting(wait, || self.key_blocker(key, &check))
    }

    /// [`read_key`](Self::read_key) for each of `keys`, with one wait for
    /// them all: after each wait every key is checked again, and the wait
    /// runs out at the same moment whichever key it waits for.
    pub fn read_keys<E>(
        &self,
        keys: &[Key],
        wait: MemoryLockWait,
        check: impl Fn(&Lock, &Key) -> Result<(), E>,
    ) -> Result<(), E> {
        self.waiting(wait, || {
            keys.iter()
                .try_for_each(|key| self.key_blocker(key, &check))
        })
    }

    /// Runs `find` (which answers the first memory lock that blocks, with
    /// its handle) until nothing blocks, waiting for each blocking lock to
    /// leave the table, until `wait` runs out.
    fn waiting<E>(
        &self,
        wait: MemoryLockWait,
        mut find: impl FnMut() -> Result<(), (E, Arc<MemoryLock>)>,
    ) -> Result<(), E> {
        let mut deadline = None;
        loop {
            let (e, handle) = match find() {
                Ok(()) => return Ok(()),
                Err(blocked) => blocked,
            };
            let wait = match wait {
                MemoryLockWait::Never => Duration::ZERO,
                MemoryLockWait::Configured => self.inner.memory_lock_wait,
            };
            let deadline = *deadline.get_or_insert_with(|| crate::deadline_after(wait));
            if wait.is_zero() || !handle.wait_released(deadline) {
                return Err(e);
            }
        }
    }

    /// The memory lock of `key` if it is published and fails `check`.
    fn key_blocker<E>(
        &self,
        key: &Key,
        check: &impl Fn(&Lock, &Key) -> Result<(), E>,
    ) -> Result<(), (E, Arc<MemoryLock>)> {
        let shard = self.inner.shard(key);
        if Self::is_empty(shard) {
            return Ok(());
        }
        let Some(handle) = shard.table.lock().get(key).map(|entry| entry.0.clone()) else {
            return Ok(());
        };
        handle.check(check).map_err(|e| (e, handle))
    }

    /// Runs `check` on every published memory lock with a key in `[start,
    /// end)` (unbounded where `None`), in key order, stopping at the first
    /// error; with [`MemoryLockWait::Configured`], a blocking memory lock
    /// is waited out as [`read_key`](Self::read_key) waits, and the whole
    /// range checked again once it is gone.
    pub fn read_range<E>(
        &self,
        start: Option<&Key>,
        end: Option<&Key>,
        wait: MemoryLockWait,
        check: impl Fn(&Lock, &Key) -> Result<(), E>,
    ) -> Result<(), E> {
        self.waiting(wait, || self.range_blocker(start, end, &check))
    }

    /// The first memory lock in `[start, end)`, in key order, that is
    /// published and fails `check`.
    fn range_blocker<E>(
        &self,
        start: Option<&Key>,
        end: Option<&Key>,
        check: &impl Fn(&Lock, &Key) -> Result<(), E>,
    ) -> Result<(), (E, Arc<MemoryLock>)> {
        if start.zip(end).is_some_and(|(s, e)| s >= e) {
            return Ok(());
        }
        let lower = start.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Included);
        let upper = end.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let mut handles: Vec<Arc<MemoryLock>> = Vec::new();
        for shard in self.inner.shards.iter() {
            if Self::is_empty(shard) {
                continue;
            }
            let table = shard.table.lock();
            handles.extend(
                table
                    .range::<Key, _>((lower, upper))
                    .map(|entry| entry.0.clone()),
            );
        }
        handles.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        for handle in handles {
            handle.check(check).map_err(|e| (e, handle.clone()))?;
        }
        Ok(())
    }

    /// The smallest start_ts among published memory locks.
    #[cfg(any(test, feature = "test-util", feature = "sim"))]
    pub fn global_min_lock_ts(&self) -> Option<TimeStamp> {
        let handles: Vec<Arc<MemoryLock>> = self
            .inner
            .shards
            .iter()
            .flat_map(|shard| {
                let table = shard.table.lock();
                table
                    .iter()
                    .map(|entry| entry.0.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        handles
            .iter()
            .filter_map(|h| h.slot.lock().lock.as_ref().map(|l| l.ts))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use percolate_mvcc::LockType;

    use super::*;

    fn ts(v: u64) -> TimeStamp {
        TimeStamp::new(v)
    }

    #[test]
    fn o1_max_ts_only_grows_and_ignores_max() {
        let cm = ConcurrencyManager::new(ts(50));
        cm.update_max_ts(ts(100)).unwrap();
        assert_eq!(cm.max_ts(), ts(100));
        cm.update_max_ts(ts(70)).unwrap();
        assert_eq!(cm.max_ts(), ts(100));
        cm.update_max_ts(TimeStamp::max()).unwrap();
        assert_eq!(cm.max_ts(), ts(100));
    }

    /// `cm` takes `bound` as its max_ts and refuses one above it, naming
    /// the bound; the refusal changes nothing.
    fn assert_bound(cm: &ConcurrencyManager, bound: TimeStamp) {
        cm.update_max_ts(bound).unwrap();
        assert_eq!(cm.max_ts(), bound);
        match cm.update_max_ts(bound.next()) {
            Err(Error::InvalidMaxTsUpdate {
                attempted_ts,
                limit,
            }) => assert_eq!((attempted_ts, limit), (bound.next(), bound)),
            other => panic!("expected InvalidMaxTsUpdate, got {other:?}"),
        }
        assert_eq!(cm.max_ts(), bound, "a refused update changes nothing");
    }

    #[test]
    fn o1_updates_above_the_oracle_limit_are_refused() {
        use crate::oracle::{CounterOracle, TimestampOracle};
        // The oracle is at physical 1,000 ms; the allowance is 2 s.
        let oracle = Arc::new(CounterOracle::new(
            TimeStamp::compose(1_000, 0).into_inner(),
        ));
        let limit = MaxTsLimit::new(oracle.clone(), Duration::from_secs(2));
        let cm = ConcurrencyManager::with_limit(ts(1), Some(limit));
        let bound = TimeStamp::compose(3_000, 0);
        assert_bound(&cm, bound);
        cm.update_max_ts(TimeStamp::max()).unwrap();
        // The oracle moves on: the bound follows it.
        oracle.get_ts_batch(1_000 << 18).unwrap();
        cm.update_max_ts(bound.next()).unwrap();
        assert_eq!(cm.max_ts(), bound.next());
    }

    /// With a wall clock, the bound is the clock plus the allowance, not
    /// the oracle plus the allowance, once the oracle is ahead of the
    /// clock; the oracle's own timestamps stay within it whatever the
    /// clock says.
    #[test]
    fn o1_a_wall_clock_limit_follows_the_clock_not_an_oracle_moved_ahead() {
        use crate::oracle::{CounterOracle, ManualClock, TimestampOracle};
        // The clock at 10 s, the oracle moved to 50 s; the allowance 60 s.
        let clock = Arc::new(ManualClock::new(10_000));
        let oracle = Arc::new(CounterOracle::new(
            TimeStamp::compose(50_000, 0).into_inner(),
        ));
        let limit =
            MaxTsLimit::new(oracle.clone(), Duration::from_secs(60)).with_wall_clock(clock.clone());
        let cm = ConcurrencyManager::with_limit(ts(1), Some(limit));
        // The oracle's limit would take anything up to 110 s.
        assert_bound(&cm, TimeStamp::compose(70_000, 0));
        // The clock set far back: the oracle's own timestamps still pass.
        clock.set(0);
        oracle.advance_past(TimeStamp::compose(100_000, 0)).unwrap();
        let own = oracle.get_ts().unwrap();
        cm.update_max_ts(own).unwrap();
        assert_eq!(cm.max_ts(), own);
        assert!(matches!(
            cm.update_max_ts(TimeStamp::compose(own.physical() + 1, 0)),
            Err(Error::InvalidMaxTsUpdate { .. })
        ));
    }

    #[test]
    fn o2_memory_locks_are_visible_until_the_guard_drops() {
        let cm = ConcurrencyManager::new(ts(1));
        let (a, b, c) = (
            Key::from_raw(b"a"),
            Key::from_raw(b"b"),
            Key::from_raw(b"c"),
        );
        let guards = cm.lock_keys([&c, &a, &c]);
        assert_eq!(guards.len(), 2);
        assert_eq!(guards[0].key(), &a, "sorted");
        // Held but not yet published: readers pass.
        assert_eq!(
            cm.read_key(&a, MemoryLockWait::Never, |_, _| Err(())),
            Ok(())
        );
        guards[0].set_lock(Lock::new(LockType::Put, b"a".to_vec(), ts(10), 0));
        guards[1].set_lock(Lock::new(LockType::Put, b"a".to_vec(), ts(12), 0));
        let locked = |lock: &Lock, key: &Key| Err((key.clone(), lock.ts));
        assert_eq!(
            cm.read_key(&a, MemoryLockWait::Never, locked),
            Err((a.clone(), ts(10)))
        );
        assert_eq!(cm.read_key(&b, MemoryLockWait::Never, locked), Ok(()));
        assert_eq!(
            cm.read_range(Some(&b), None, MemoryLockWait::Never, locked),
            Err((c.clone(), ts(12)))
        );
        assert_eq!(
            cm.read_range(Some(&b), Some(&c), MemoryLockWait::Never, locked),
            Ok(())
        );
        assert_eq!(cm.global_min_lock_ts(), Some(ts(10)));
        drop(guards);
        assert_eq!(
            cm.read_range(None, None, MemoryLockWait::Never, locked),
            Ok(())
        );
        assert_eq!(cm.global_min_lock_ts(), None);
    }

    #[test]
    fn guards_are_released_when_a_command_panics() {
        let cm = ConcurrencyManager::new(ts(1));
        let key = Key::from_raw(b"k");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Owned keys as well as borrowed ones.
            let guards = cm.lock_keys([key.clone()]);
            guards[0].set_lock(Lock::new(LockType::Put, b"k".to_vec(), ts(5), 0));
            panic!("action failed");
        }));
        assert!(result.is_err());
        assert_eq!(
            cm.read_key(&key, MemoryLockWait::Never, |_, _| Err(())),
            Ok(())
        );
    }
}
