//! Read commands: Get, BatchGet, Scan, ScanLock and MvccByKey.

use percolate_engine::Engine;
use percolate_mvcc::{Key, KvPair, LockInfo, MvccReader, TimeStamp};

use super::{Footprint, ReadCommand, ReadContext};
use crate::Result;
use crate::actions::mvcc_by_key::{MvccInfo, mvcc_by_key};
use crate::actions::scan_lock::scan_lock;
use crate::concurrency_manager::MemoryLockWait;
use crate::read::{self, ReadOptions, ScanRequest};

/// The value of one key at `ts`.
#[derive(Clone, Debug)]
pub struct Get {
    /// The key.
    pub key: Key,
    /// The read ts.
    pub ts: TimeStamp,
    /// Isolation level and lock handling.
    pub options: ReadOptions,
}

impl ReadCommand for Get {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Get;

    /// The value, if the key exists at `ts`.
    type Output = Option<Vec<u8>>;

    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output> {
        read::get(ctx.engine, ctx.cm, &self.key, self.ts, &self.options)
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::Keys(vec![&self.key])
    }
}

/// The values of several keys at one `ts`.
#[derive(Clone, Debug)]
pub struct BatchGet {
    /// The keys.
    pub keys: Vec<Key>,
    /// The read ts.
    pub ts: TimeStamp,
    /// Isolation level and lock handling.
    pub options: ReadOptions,
}

impl ReadCommand for BatchGet {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::BatchGet;

    /// One entry per key that exists (in the order asked), or per key that
    /// is locked (`Err(KeyIsLocked)`).
    type Output = Vec<Result<KvPair>>;

    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output> {
        read::batch_get(ctx.engine, ctx.cm, &self.keys, self.ts, &self.options)
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::Keys(self.keys.iter().collect())
    }
}

/// A range read.
#[derive(Clone, Debug)]
pub struct Scan {
    /// Range, ts, limit, direction.
    pub request: ScanRequest,
    /// Isolation level and lock handling.
    pub options: ReadOptions,
}

impl ReadCommand for Scan {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Scan;

    /// Pairs in scan order, with one `Err(KeyIsLocked)` per locked key.
    type Output = Vec<Result<KvPair>>;

    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output> {
        read::scan(ctx.engine, ctx.cm, &self.request, &self.options)
    }

    fn footprint(&self) -> Footprint<'_> {
        Scan::range_of(&self.request)
    }
}

impl Scan {
    /// The key range `request` reads.
    pub(crate) fn range_of(r: &ScanRequest) -> Footprint<'_> {
        if r.reverse {
            // From `start_key` (exclusive; empty: the end) down to `end_key`.
            let upper = Some(&r.start_key).filter(|k| !k.is_empty());
            Footprint::Range(r.end_key.as_ref(), upper)
        } else {
            Footprint::Range(Some(&r.start_key), r.end_key.as_ref())
        }
    }
}

/// The locks in `[start, end)` of transactions with start_ts at or below
/// `max_ts`. Raises the region's `max_ts` to `max_ts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanLock {
    /// Inclusive start (`None`: from the first key).
    pub start: Option<Key>,
    /// Exclusive end (`None`: to the last key).
    pub end: Option<Key>,
    /// Only locks of transactions started at or before this ts.
    pub max_ts: TimeStamp,
    /// Most locks returned (0 = no limit).
    pub limit: usize,
}

impl ReadCommand for ScanLock {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::ScanLock;

    /// The locks, in key order.
    type Output = Vec<LockInfo>;

    /// A memory lock (an async-commit or 1PC prewrite in flight) at or below
    /// `max_ts` fails the whole scan with its `KeyIsLocked`: it is not in the
    /// lock CF yet, so the scan could not list it, and a caller such as GC
    /// must not go on as if it were not there (TiKV issue 9526). Raising
    /// `max_ts` first makes any later such prewrite commit above it.
    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output> {
        ctx.cm.update_max_ts(self.max_ts)?;
        ctx.cm.read_range(
            self.start.as_ref(),
            self.end.as_ref(),
            MemoryLockWait::Never,
            |lock, key| {
                if lock.ts <= self.max_ts {
                    Err(crate::actions::key_is_locked(key, lock.clone()))
                } else {
                    Ok(())
                }
            },
        )?;
        let mut reader = MvccReader::new(ctx.engine.snapshot());
        scan_lock(
            &mut reader,
            self.start.as_ref(),
            self.end.as_ref(),
            self.max_ts,
            self.limit,
        )
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::Range(self.start.as_ref(), self.end.as_ref())
    }
}

/// Every lock, write record and value of one key, decoded (a debugging
/// view, like tikv-ctl's `mvcc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MvccByKey {
    /// The key.
    pub key: Key,
}

impl ReadCommand for MvccByKey {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::MvccByKey;

    /// Everything stored for the key.
    type Output = MvccInfo;

    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<MvccInfo> {
        let mut reader = MvccReader::new(ctx.engine.snapshot());
        mvcc_by_key(&mut reader, &self.key)
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::Keys(vec![&self.key])
    }
}
