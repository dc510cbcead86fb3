//! Read-only snapshots: every read at one timestamp, nothing to commit.

use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use percolate_engine::{Engine, RocksEngine};
use percolate_mvcc::TimeStamp;

use super::Inner;
use super::scan::{ByteRange, Keys, Scan, ScanKind, ScanSource};
use super::transaction::raw;
use crate::Result;
use crate::read::ReadOptions;

/// A read-only view of the data as of one timestamp: what every
/// transaction that committed at or below it wrote, and nothing else.
/// Taken with [`Client::snapshot`](super::Client::snapshot) (at a chosen
/// timestamp) or [`Client::snapshot_latest`](super::Client::snapshot_latest)
/// (at a fresh one). Cheap to keep and to clone; reads from many threads
/// at once are fine.
///
/// A read of a snapshot at a timestamp from the oracle raises the regions'
/// `max_ts` as any read does, so that no transaction can commit below it
/// afterwards: the snapshot's answers never change.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let client = percolate_txn::client::Client::open(dir.path())?;
/// client.with_retry(|txn| {
///     txn.put(b"k", b"old");
///     Ok(())
/// })?;
/// let before = client.snapshot_latest()?;
/// client.with_retry(|txn| {
///     txn.put(b"k", b"new");
///     Ok(())
/// })?;
/// assert_eq!(before.get(b"k")?, Some(b"old".to_vec()));
/// assert_eq!(client.snapshot_latest()?.get(b"k")?, Some(b"new".to_vec()));
/// let pairs: Vec<_> = before.scan("a".."z").collect::<Result<_, _>>()?;
/// assert_eq!(pairs, vec![(b"k".to_vec(), b"old".to_vec())]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Snapshot<E: Engine = RocksEngine> {
    client: Arc<Inner<E>>,
    ts: TimeStamp,
    /// Holds automatic GC's safe point below `ts` while alive.
    live: super::auto_gc::LiveTs,
    /// The oracle is known to hand out only timestamps above `ts` from now
    /// on (it handed `ts` out, or a read moved it past): reads may raise
    /// `max_ts` to `ts`.
    cleared: AtomicBool,
}

impl<E: Engine> Clone for Snapshot<E> {
    fn clone(&self) -> Self {
        Snapshot {
            client: self.client.clone(),
            ts: self.ts,
            live: self.live.clone(),
            cleared: AtomicBool::new(self.cleared.load(Ordering::Acquire)),
        }
    }
}

impl<E: Engine> std::fmt::Debug for Snapshot<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("ts", &self.ts).finish()
    }
}

impl<E: Engine> Snapshot<E> {
    /// A snapshot at `ts`; `cleared` where `ts` came from the oracle.
    pub(super) fn new(
        client: Arc<Inner<E>>,
        ts: TimeStamp,
        live: super::auto_gc::LiveTs,
        cleared: bool,
    ) -> Self {
        Snapshot {
            client,
            ts,
            live,
            cleared: AtomicBool::new(cleared),
        }
    }

    /// Before a read: a `ts` the oracle may not have handed out is read
    /// only once the oracle has been moved past it (see
    /// [`Client::snapshot`](super::Client::snapshot)); until then every
    /// read fails, and each tries the move again.
    fn check_ahead(&self) -> Result<()> {
        if !self.cleared.load(Ordering::Acquire) {
            self.client.read_ahead(self.ts)?;
            self.cleared.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// The timestamp the snapshot reads at.
    pub fn ts(&self) -> TimeStamp {
        self.ts
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_ahead()?;
        self.client.get(key, self.ts, &ReadOptions::default())
    }

    /// The values of `keys`, in the order asked (`None` where a key does
    /// not exist).
    pub fn batch_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_ahead()?;
        let mut found = std::collections::HashMap::with_capacity(keys.len());
        for (k, v) in self.client.batch_get(keys, self.ts)? {
            found.insert(raw(k)?, v);
        }
        Ok(keys.iter().map(|k| found.get(*k).cloned()).collect())
    }

    super::scan::range_reads!();

    /// What its scans read: the client, the snapshot's ts, no writes of
    /// its own, and why it may not be read yet (if so).
    fn scan_source(&self) -> ScanSource<'_, E> {
        (&self.client, self.ts, None, self.check_ahead().err())
    }
}
