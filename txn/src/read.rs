//! The read path of a region: point gets and scans that first count their
//! timestamp in the region's `max_ts` and check the in-memory locks of
//! prewrites in flight, then read a snapshot.
//!
//! The order matters (see [`ConcurrencyManager`]): raising `max_ts` before
//! looking at the memory locks guarantees that an async-commit or 1PC
//! prewrite racing with this read either is seen here as a lock, or
//! computes its commit_ts above this read's ts. The engine is read only
//! after the check: a prewrite whose memory lock is already gone has
//! written its locks, and the read sees them.
//!
//! Point reads read the engine's latest data ([`Engine::latest`]) instead
//! of a snapshot, key by key, lock first. That is enough: a commit at or
//! below the read ts that the version lookup could see but a snapshot
//! taken at the lock check could not belongs to a transaction whose lock
//! the check found (and judged), since a transaction that prewrites a key
//! after the check commits above the read ts (2PC takes its commit_ts from
//! the oracle after its prewrites; async commit and 1PC compute it above
//! `max_ts`, which this read raised first). It holds too where the engine
//! shows a write in flight in part (RocksDB's unordered writes): a lock
//! check of the latest data sees a commit's lock until the commit's
//! write is whole. Scans read their versions before their locks, so they
//! keep a snapshot, which the engine keeps whole.
//!
//! Point reads also take the region's version hints (the newest data
//! version of recently committed keys, recorded once each commit is
//! written, at the engine's write epoch of the key): the getter asks for
//! one after judging the key's lock, uses it only while the key's epoch is
//! still the one recorded, and fetches that version with a point get
//! instead of a seek, or takes it from the hint itself when the hint
//! carries its record. A version written since moved the epoch before it
//! could be read, so a hint older than it is never used.

use percolate_engine::Engine;
use percolate_mvcc::reader::check_lock_blocks_read_at;
use percolate_mvcc::{
    IsolationLevel, Key, KvPair, PointGetter, PointGetterBuilder, Scanner, ScannerBuilder, TimeStamp,
    TsSet,
};
use std::ops::ControlFlow;

use crate::Result;
use crate::concurrency_manager::{ConcurrencyManager, MemoryLockWait};

/// How a read treats locks and `max_ts`.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Defaults to [`IsolationLevel::Si`].
    pub isolation_level: IsolationLevel,
    /// Transactions whose locks the caller resolved or pushed: ignored.
    pub bypass_locks: TsSet,
    /// Transactions known committed: their pending values are read.
    pub access_locks: TsSet,
    /// A read at a timestamp chosen by the caller rather than the oracle
    /// (a stale read): it does not raise `max_ts`. Defaults to false.
    pub stale_read: bool,
}

/// A scan in KvScan's vocabulary.
#[derive(Clone, Debug)]
pub struct ScanRequest {
    /// Forward: the inclusive lower bound. Reverse: the exclusive upper
    /// bound (as TiKV's KvScan takes it), where an empty key means no
    /// bound.
    pub start_key: Key,
    /// Forward: the exclusive upper bound. Reverse: the inclusive lower
    /// bound. `None`: unbounded.
    pub end_key: Option<Key>,
    /// Most entries returned (0 = no limit).
    pub limit: usize,
    /// The read ts.
    pub ts: TimeStamp,
    /// Return keys with empty values.
    pub key_only: bool,
    /// Scan from `start_key` down.
    pub reverse: bool,
}

/// Counts a read at `ts` in `max_ts`. RC reads never check locks, so they
/// need not be counted; stale reads use a ts the oracle did not hand out.
/// Fails, reading nothing, when `ts` is beyond the region's
/// [`MaxTsLimit`](crate::concurrency_manager::MaxTsLimit).
fn note_read(cm: &ConcurrencyManager, ts: TimeStamp, options: &ReadOptions) -> Result<()> {
    if !options.stale_read && options.isolation_level != IsolationLevel::Rc {
        cm.update_max_ts(ts)?;
    }
    Ok(())
}

/// How a read checks the memory locks of async-commit and 1PC prewrites
/// in flight, as it checks the lock CF: at SI it waits one out (it lasts
/// one engine write, and the read then finds its outcome); at RcCheckTs a
/// Put or Delete one fails the read at once with a `WriteConflict`, as
/// TiKV's `need_check_locks` has it; `None` at RC, which ignores locks.
fn memory_lock_wait(options: &ReadOptions) -> Option<MemoryLockWait> {
    match options.isolation_level {
        IsolationLevel::Si => Some(MemoryLockWait::Configured),
        IsolationLevel::RcCheckTs => Some(MemoryLockWait::Never),
        // RC (the enum is open to levels that ignore locks).
        _ => None,
    }
}

/// The value of `key` at `ts`.
pub fn get<E: Engine>(
    engine: &E,
    cm: &ConcurrencyManager,
    key: &Key,
    ts: TimeStamp,
    options: &ReadOptions,
) -> Result<Option<Vec<u8>>> {
    prefetch(engine, cm, key);
    note_read(cm, ts, options)?;
    if let Some(wait) = memory_lock_wait(options) {
        cm.read_key(key, wait, |lock, key| {
            check_lock_blocks_read_at(lock, key, ts, options.isolation_level, &options.bypass_locks)
        })?;
    }
    Ok(point_getter(engine, cm, ts, options).get(key)?)
}

/// Starts bringing into the CPU's caches what a point read of `key` will
/// look at outside RocksDB (its memory-lock shard, its version hint, its
/// write epoch), so that these misses overlap instead of following one
/// another (see [`percolate_engine::mem`]).
fn prefetch<E: Engine>(engine: &E, cm: &ConcurrencyManager, key: &Key) {
    engine.prefetch_bookkeeping(key.as_encoded());
    cm.prefetch(key);
}

/// A getter over the latest data, with the region's version hints.
fn point_getter<E: Engine>(
    engine: &E,
    cm: &ConcurrencyManager,
    ts: TimeStamp,
    options: &ReadOptions,
) -> PointGetter<E::Snap> {
    PointGetterBuilder::new(engine.latest(), ts)
        .isolation_level(options.isolation_level)
        .bypass_locks(options.bypass_locks.clone())
        .access_locks(options.access_locks.clone())
        .version_hints(cm.version_hints())
        .build()
}

/// The values of `keys` at `ts`, each read as [`get`] reads: a pair per key that
/// exists, in the order asked, and one `KeyIsLocked` entry per key locked
/// in the lock CF. A blocking in-memory lock fails the whole request, as in
/// [`scan`].
pub fn batch_get<E: Engine>(
    engine: &E,
    cm: &ConcurrencyManager,
    keys: &[Key],
    ts: TimeStamp,
    options: &ReadOptions,
) -> Result<Vec<Result<KvPair>>> {
    for key in keys {
        prefetch(engine, cm, key);
    }
    note_read(cm, ts, options)?;
    if let Some(wait) = memory_lock_wait(options) {
        cm.read_keys(keys, wait, |lock, key| {
            check_lock_blocks_read_at(lock, key, ts, options.isolation_level, &options.bypass_locks)
        })?;
    }
    let mut pairs = Vec::with_capacity(keys.len());
    for key in keys {
        // A getter per key: over the latest data, a reused getter's write
        // cursor would read versions as of its first key, from before this
        // key's lock was checked (its cursor comes from the engine's pool,
        // so a new getter costs a refresh, not a new cursor).
        match point_getter(engine, cm, ts, options).get(key) {
            Ok(Some(value)) => pairs.push(Ok((key.clone(), value))),
            Ok(None) => {}
            Err(e @ percolate_mvcc::Error::KeyIsLocked(_)) => pairs.push(Err(e.into())),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(pairs)
}

/// A range read: pairs, and one `KeyIsLocked` entry per key locked in the
/// lock CF. A blocking in-memory lock anywhere in the range fails the whole
/// request instead: its key is not in the lock CF yet, so the scan could
/// not report it per key.
pub fn scan<E: Engine>(
    engine: &E,
    cm: &ConcurrencyManager,
    request: &ScanRequest,
    options: &ReadOptions,
) -> Result<Vec<Result<KvPair>>> {
    Ok(scanner(engine, cm, request, options)?
        .scan(request.limit)?
        .into_iter()
        .map(|entry| entry.map_err(Into::into))
        .collect())
}

/// The range read of [`scan`], handing each pair to `visit` as borrowed
/// slices (the encoded key, the value) instead of returning it: see
/// [`Scanner::visit`](percolate_mvcc::Scanner::visit). Returns the locks
/// that stopped it (`KeyIsLocked` errors, the first one where it
/// stopped), or none; a blocking in-memory lock fails it whole, before
/// any pair is visited, as it fails [`scan`].
pub fn scan_visit<E: Engine>(
    engine: &E,
    cm: &ConcurrencyManager,
    request: &ScanRequest,
    options: &ReadOptions,
    visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
) -> Result<Vec<crate::Error>> {
    let locks = scanner(engine, cm, request, options)?.visit(request.limit, visit)?;
    Ok(locks.into_iter().map(Into::into).collect())
}

/// The scanner of `request`, after its ts is counted in `max_ts` and the
/// memory locks of its range are checked.
fn scanner<E: Engine>(
    engine: &E,
    cm: &ConcurrencyManager,
    request: &ScanRequest,
    options: &ReadOptions,
) -> Result<Scanner<E::Snap>> {
    let (lower, upper) = if request.reverse {
        let upper = Some(request.start_key.clone()).filter(|k| !k.is_empty());
        (request.end_key.clone(), upper)
    } else {
        (Some(request.start_key.clone()), request.end_key.clone())
    };
    note_read(cm, request.ts, options)?;
    if let Some(wait) = memory_lock_wait(options) {
        cm.read_range(lower.as_ref(), upper.as_ref(), wait, |lock, key| {
            let level = options.isolation_level;
            check_lock_blocks_read_at(lock, key, request.ts, level, &options.bypass_locks)
        })?;
    }
    // Checked now, after max_ts and the memory locks, before the snapshot
    // is taken: see `ScannerBuilder::skip_lock_cf` for why locks written
    // after this cannot matter to this read.
    // Only at SI: an RcCheckTs scan reads the lock CF (its memory-lock
    // check answers at once rather than waiting a prewrite out, and this
    // path is kept to the level reads use most).
    let no_locks = options.isolation_level == IsolationLevel::Si && engine.holds_no_locks();
    // Without locks to read, the write-CF cursor may see any moment after
    // that check, as a snapshot taken then would: it reads the latest
    // data, with no snapshot to pin (and on RocksDB a pooled cursor).
    // Otherwise the lock and write cursors must see one moment, or a lock
    // read late could miss a commit that the earlier write cursor missed.
    let snapshot = if no_locks {
        engine.latest()
    } else {
        engine.snapshot()
    };
    let scanner = ScannerBuilder::new(snapshot, request.ts)
        .skip_lock_cf(no_locks)
        .range(lower, upper)
        .reverse(request.reverse)
        .key_only(request.key_only)
        .isolation_level(options.isolation_level)
        .bypass_locks(options.bypass_locks.clone())
        .access_locks(options.access_locks.clone())
        .build()?;
    Ok(scanner)
}
