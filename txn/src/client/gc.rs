//! Garbage collection and repair across the regions.
//!
//! MVCC keeps every version until something removes it. At a safe point
//! `sp`, a key's versions that no read at or above `sp` can see are garbage:
//! everything below its newest Put at or below `sp` (and that Put too if a
//! Delete hides it), and every Lock and Rollback record at or below `sp`
//! (see [`actions::gc`](crate::actions::gc)).
//!
//! As TiKV's GC worker does, each region first resolves the locks of
//! transactions that started at or below the safe point: a lock left by a
//! dead client would otherwise be resolved later, after GC, against
//! versions GC already judged. A transaction that committed is rolled
//! forward, one that expired is rolled back, one whose commit_ts was pushed
//! above the safe point can only commit above it and stays; a live one
//! stops the collection with `KeyIsLocked` (retryable: its TTL runs out or
//! its client finishes).

use percolate_engine::Engine;
use percolate_mvcc::{LockInfo, TimeStamp};

use super::{Client, key};
use crate::actions::gc::GcInfo;
use crate::cluster::Region;
use crate::commands::DamagedRecord;
use crate::{Error, Result};

/// Locks scanned per round of lock resolution.
const LOCK_BATCH: usize = 256;

impl<E: Engine> Client<E> {
    /// Collects the garbage of every region at `safe_point` and returns the
    /// totals.
    ///
    /// The caller picks a safe point below the start_ts of every
    /// transaction that may still read (TiDB keeps it ten minutes behind
    /// the clock): a read at a ts below the safe point may find its
    /// versions gone. A safe point not below the oracle's latest timestamp
    /// is `InvalidRequest`; zero collects nothing.
    ///
    /// This collects with point deletes, now; automatic GC
    /// ([`gc_once`](Self::gc_once), [`AutoGcConfig`](super::AutoGcConfig))
    /// picks its safe point itself and lets RocksDB's compactions drop the
    /// versions. Either way the engine keeps the safe point (the largest
    /// it was given, across restarts on RocksDB): an export below it is
    /// refused, as a read there could miss versions.
    pub fn gc(&self, safe_point: TimeStamp) -> Result<GcInfo> {
        self.check_writable()?;
        let mut total = GcInfo::default();
        if safe_point.is_zero() {
            return Ok(total);
        }
        if safe_point >= self.inner.oracle.get_ts()? {
            return Err(Error::InvalidRequest {
                reason: "the GC safe point must be below the oracle's latest timestamp",
                key: None,
            });
        }
        // An export that begins from here on and reads below the safe
        // point is refused (see `auto_gc`'s module docs).
        let _one_round = self.inner.auto_gc.announce_given(safe_point);
        // Every region's locks first, as automatic GC does: a lock in a
        // later region may belong to a transaction whose primary is in an
        // earlier one, and collecting that region first could delete the
        // primary's commit record (a Lock record, or a Put overwritten
        // below the safe point) that the lock's resolution needs; it would
        // then roll back a committed transaction's secondary.
        for region in self.cluster().regions() {
            self.resolve_locks_below(region, safe_point)?;
        }
        // Kept by the client and the engine before the first version goes
        // (the engine's compactions may then drop what the point deletes
        // below would, as for automatic GC): an export below it is refused
        // from here on, even if this call fails part way and an automatic
        // round then announces a lower safe point.
        self.inner.auto_gc.begin_deleting(safe_point);
        for region in self.cluster().regions() {
            region
                .storage()
                .engine()
                .set_gc_safe_point(safe_point.into_inner(), super::auto_gc::decode_write)?;
        }
        for region in self.cluster().regions() {
            let end = region.end_key().map(key);
            let info = region
                .storage()
                .gc(safe_point, Some(key(region.start_key())), end)?;
            total.found_versions += info.found_versions;
            total.deleted_versions += info.deleted_versions;
            total.deleted_values += info.deleted_values;
        }
        let deleted = u64::try_from(total.deleted_versions).unwrap_or(u64::MAX);
        self.inner
            .metrics
            .gc_round(safe_point.into_inner(), deleted);
        Ok(total)
    }

    /// Deletes the records that do not decode in every region and returns
    /// them, key and value as stored: see
    /// [`Repair`](crate::commands::Repair). Meant for a database whose
    /// reads or GC fail with `Corruption`; records that decode are never
    /// touched.
    pub fn repair(&self) -> Result<Vec<DamagedRecord>> {
        self.check_writable()?;
        let mut removed = Vec::new();
        for region in self.cluster().regions() {
            // The first region reaches down to no bound at all: a damaged
            // key may sort below every encoded one.
            let start = Some(region.start_key())
                .filter(|start| !start.is_empty())
                .map(key);
            let end = region.end_key().map(key);
            removed.extend(region.storage().repair(start, end)?);
        }
        Ok(removed)
    }

    /// Resolves the region's locks of transactions started at or below
    /// `safe_point`, `LOCK_BATCH` at a time in key order.
    pub(super) fn resolve_locks_below(
        &self,
        region: &Region<E>,
        safe_point: TimeStamp,
    ) -> Result<()> {
        let end = region.end_key().map(key);
        let mut from = key(region.start_key());
        loop {
            let locks: Vec<LockInfo> =
                region
                    .storage()
                    .scan_lock(Some(from), end.clone(), safe_point, LOCK_BATCH)?;
            let Some(last) = locks.last() else {
                return Ok(());
            };
            // The raw key right after the last lock's: where the next
            // round starts (locks pushed above the safe point stay).
            let mut next = last.key.clone();
            next.push(0);
            let mut pushed = Vec::new();
            let alive = self.inner.resolve_locks(&locks, safe_point, &mut pushed)?;
            if let Some(lock) = alive.first() {
                return Err(percolate_mvcc::Error::KeyIsLocked(Box::new((*lock).clone())).into());
            }
            if locks.len() < LOCK_BATCH {
                return Ok(());
            }
            from = key(&next);
        }
    }
}
