//! GC in compaction: old MVCC versions are dropped by RocksDB's own
//! compactions of the write CF, as TiKV's GC compaction filter drops them,
//! instead of by point deletes (which write a tombstone per version, that
//! compactions must then carry down to the bottom level).
//!
//! The layer above hands the engine a safe point
//! ([`Engine::set_gc_safe_point`](crate::Engine::set_gc_safe_point)):
//! every reader reads at or above it, and every lock below it was resolved
//! first, so no commit at or below it is still to come. The engine keeps
//! it in an atomic that each compaction's filter reads when the compaction
//! starts, and persists it (a local key of the default CF, synced) before
//! publishing it, so that it never goes back after a reopen.
//!
//! A compaction meets each key's versions newest first (the write-CF key
//! ends with `!commit_ts`). Per key, the filter:
//!
//! * keeps every record with commit_ts above the safe point;
//! * of those at or below it, drops Lock and Rollback records until the
//!   first Put or Delete (readers skip them);
//! * keeps that Put (the version a read at the safe point sees) and drops
//!   everything older;
//! * drops everything older than that Delete too; the Delete itself is
//!   dropped only in a full compaction (every SST file is an input). In any
//!   other compaction an older version of the key may sit in a file that is
//!   not an input (a lower level) and would show through: the Delete is
//!   kept, and when nothing of its key under it was in the compaction, the
//!   key is handed back ([`Engine::take_gc_leftovers`](crate::Engine::take_gc_leftovers))
//!   for a point GC that sees the whole database, as TiKV hands such keys
//!   to its GC worker (`GcKeys`). A Delete with versions under it in the
//!   compaction waits for a later compaction, as in TiKV.
//!
//! Dropping the newest Put's elders needs no knowledge of other files: a
//! version newer than the kept Put elsewhere hides the same elders. Records
//! newer in commit_ts than a dropped one are never needed to decide: a read
//! at or above the safe point stops at the newest version at or below its
//! ts, which is the kept Put, the kept Delete, or one above the safe point.
//! What this relies on, as TiKV's filter does: no version of a key is
//! written with a commit_ts below one already written, except Rollback
//! records (which readers skip). Percolator's locks give that: a key's
//! commits follow its locks, and the locks of transactions at or below the
//! safe point are resolved before the safe point is handed over.
//!
//! A record that does not decode is kept, and so is every older record of
//! its key: it may be the newest Put.
//!
//! **Default-CF values.** The long value of a dropped Put lives in the
//! default CF under the key and the Put's start_ts. A compaction filter
//! cannot write to its own database safely here (it would need a handle
//! that owns the database, which the closing of the last engine handle
//! from a compaction thread would then deadlock on), so each filter
//! collects the value keys of the Puts it drops and hands them, when the
//! compaction's filter is dropped, to a queue the engine deletes them
//! from at the next [`take_gc_leftovers`](crate::Engine::take_gc_leftovers)
//! (and, best effort, when the last handle closes the database). A value is
//! thus deleted only after a filter decided to drop the record that points
//! to it, never while a kept record does: a Put's value key is unique to
//! it (one Put per key and start_ts), and the filter only queues the values
//! of records it drops. A crash between the compaction and the next
//! collection leaves the values behind as unreferenced garbage, never a
//! record without its value; so does a compaction that fails after its
//! filter ran (its dropped records, all older than a kept version, stay
//! without their values and are dropped again by the next compaction).

use std::ffi::CStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{DB, Options};

use super::{DATA_PREFIX, RocksEngine, handle};
use crate::{
    Cf, Engine, Error, GcDecoder, GcRecord, Result, TS_SUFFIX_LEN, WriteBatch, WriteOptions,
};

/// Where the GC safe point is kept: a local key (below the data space) of
/// the default CF, holding the ts as 8 bytes big-endian.
const GC_SAFE_POINT_KEY: &[u8] = b"\x01percolate-gc-safe-point";

/// What the engine and the write CF's compaction filters share.
#[derive(Default)]
pub(super) struct GcShared {
    /// The safe point compactions started from now on drop versions
    /// below; 0, none yet. Raised only after it is persisted.
    safe_point: AtomicU64,
    /// How to read a write-CF record; `None` until a safe point is handed
    /// over, and filters drop nothing until then.
    decode: Mutex<Option<GcDecoder>>,
    /// Taken by a raise of the safe point, so that raises are persisted in
    /// ascending order.
    raising: Mutex<()>,
    /// What the filters of finished compactions left to do.
    leftovers: Mutex<Leftovers>,
}

/// What filters leave for [`Engine::take_gc_leftovers`].
#[derive(Default)]
struct Leftovers {
    /// Default-CF keys (without the data prefix) of the long values of
    /// dropped Puts.
    values: Vec<Vec<u8>>,
    /// Write-CF key prefixes (without the data prefix and the ts) whose
    /// newest version at or below the safe point is a Delete kept alone.
    deletes: Vec<Vec<u8>>,
}

impl GcShared {
    /// Reads the persisted safe point of `db` into the shared one.
    pub(super) fn load(&self, db: &DB) -> Result<()> {
        let value = db.get_pinned_cf(handle(db, Cf::Default)?, GC_SAFE_POINT_KEY)?;
        if let Some(value) = value {
            let bytes = <[u8; 8]>::try_from(&value[..]).map_err(|_| Error::Corruption {
                what: "GC safe point",
                key: GC_SAFE_POINT_KEY.to_vec(),
                value: value.to_vec(),
            })?;
            self.safe_point
                .store(u64::from_be_bytes(bytes), Ordering::SeqCst);
        }
        Ok(())
    }

    /// Deletes the queued default-CF values from `db` directly: for the
    /// close of the database, when no engine handle is left to write with.
    pub(super) fn flush_values_on_close(&self, db: &DB) {
        let values = std::mem::take(&mut self.leftovers.lock().values);
        let Ok(default) = handle(db, Cf::Default) else {
            return;
        };
        let mut wb = rocksdb::WriteBatch::default();
        for key in values {
            wb.delete_cf(default, super::data_key(&key));
        }
        if !wb.is_empty() {
            // Best effort: values not deleted are garbage left behind.
            let _ = db.write(wb);
        }
    }
}

/// Sets the write CF's compaction filter factory, which filters with what
/// `shared` holds.
pub(super) fn install(opts: &mut Options, shared: &Arc<GcShared>) {
    opts.set_compaction_filter_factory(GcFilterFactory {
        shared: shared.clone(),
    });
}

impl RocksEngine {
    /// The GC safe point the write CF's compactions drop old versions
    /// below: the largest one handed to
    /// [`Engine::set_gc_safe_point`](crate::Engine::set_gc_safe_point),
    /// kept across reopens; 0 when none was.
    pub fn gc_safe_point(&self) -> u64 {
        self.inner.gc.safe_point.load(Ordering::SeqCst)
    }

    /// [`Engine::set_gc_safe_point`] of the RocksDB engine: persisted
    /// (synced) first, then published to the compactions that start
    /// afterwards.
    pub(super) fn raise_gc_safe_point(&self, safe_point: u64, decode: GcDecoder) -> Result<bool> {
        if self.inner.read_only {
            return Err(Error::ReadOnly {
                path: self.inner.path.clone(),
            });
        }
        let gc = &self.inner.gc;
        *gc.decode.lock() = Some(decode);
        let _raising = gc.raising.lock();
        if safe_point > gc.safe_point.load(Ordering::SeqCst) {
            let db = &self.inner.db;
            let mut opts = rocksdb::WriteOptions::default();
            opts.set_sync(true);
            db.put_cf_opt(
                handle(db, Cf::Default)?,
                GC_SAFE_POINT_KEY,
                safe_point.to_be_bytes(),
                &opts,
            )?;
            gc.safe_point.store(safe_point, Ordering::SeqCst);
        }
        Ok(true)
    }

    /// [`Engine::take_gc_leftovers`] of the RocksDB engine.
    pub(super) fn take_leftovers(&self) -> Result<Vec<Vec<u8>>> {
        let Leftovers { values, deletes } = std::mem::take(&mut *self.inner.gc.leftovers.lock());
        if !values.is_empty() {
            let mut batch = WriteBatch::new();
            for key in &values {
                batch.delete(Cf::Default, key.clone());
            }
            if let Err(e) = self.write(&batch, WriteOptions::default()) {
                // Kept for the next try, with the deletes.
                let mut leftovers = self.inner.gc.leftovers.lock();
                leftovers.values.extend(values);
                leftovers.deletes.extend(deletes);
                return Err(e);
            }
        }
        Ok(deletes)
    }
}

/// Makes one [`GcFilter`] per (sub)compaction of the write CF.
struct GcFilterFactory {
    shared: Arc<GcShared>,
}

impl CompactionFilterFactory for GcFilterFactory {
    type Filter = GcFilter;

    fn create(&mut self, context: CompactionFilterContext) -> GcFilter {
        GcFilter {
            safe_point: self.shared.safe_point.load(Ordering::SeqCst),
            decode: *self.shared.decode.lock(),
            full: context.is_full_compaction,
            shared: self.shared.clone(),
            key: Vec::new(),
            state: KeyState::Newer,
            found: Leftovers::default(),
        }
    }

    fn name(&self) -> &CStr {
        c"percolate-gc-filter-factory"
    }
}

/// Where a compaction is in the current key's versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyState {
    /// No Put or Delete at or below the safe point met yet.
    Newer,
    /// A Delete at or below the safe point was kept, and nothing older of
    /// the key met since.
    LoneDelete,
    /// The newest Put or Delete at or below the safe point was met: every
    /// older record goes.
    DropOlder,
    /// A record that does not decode was met: every older record stays.
    KeepRest,
}

/// The GC filter of one compaction of the write CF (see the module doc).
struct GcFilter {
    /// The safe point when the compaction started; 0 filters nothing.
    safe_point: u64,
    /// `None` filters nothing.
    decode: Option<GcDecoder>,
    /// Whether every SST file is an input of the compaction.
    full: bool,
    shared: Arc<GcShared>,
    /// The current key as stored, without its ts.
    key: Vec<u8>,
    state: KeyState,
    /// What this compaction leaves, handed over when it is dropped.
    found: Leftovers,
}

impl GcFilter {
    fn decide(&mut self, key: &[u8], value: &[u8]) -> Decision {
        let Some(decode) = self.decode else {
            return Decision::Keep;
        };
        let Some((prefix, commit_ts)) = split_stored_key(key) else {
            return Decision::Keep;
        };
        if prefix != self.key.as_slice() {
            self.finish_key();
            self.key.clear();
            self.key.extend_from_slice(prefix);
            self.state = KeyState::Newer;
        }
        if self.safe_point == 0 || commit_ts > self.safe_point {
            return Decision::Keep;
        }
        match self.state {
            KeyState::KeepRest => Decision::Keep,
            KeyState::Newer => self.decide_newest(decode(value)),
            KeyState::LoneDelete | KeyState::DropOlder => {
                self.state = KeyState::DropOlder;
                match decode(value) {
                    // Kept: it may be a Put whose value only its start_ts
                    // finds.
                    None => Decision::Keep,
                    Some(record) => {
                        if let GcRecord::Put {
                            start_ts,
                            long_value: true,
                        } = record
                        {
                            self.found.values.push(value_key(&self.key[1..], start_ts));
                        }
                        Decision::Remove
                    }
                }
            }
        }
    }

    /// The decision on a record at or below the safe point while no Put or
    /// Delete there was met.
    fn decide_newest(&mut self, record: Option<GcRecord>) -> Decision {
        match record {
            None => {
                self.state = KeyState::KeepRest;
                Decision::Keep
            }
            Some(GcRecord::Put { .. }) => {
                self.state = KeyState::DropOlder;
                Decision::Keep
            }
            Some(GcRecord::Delete) if self.full => {
                self.state = KeyState::DropOlder;
                Decision::Remove
            }
            Some(GcRecord::Delete) => {
                self.state = KeyState::LoneDelete;
                Decision::Keep
            }
            Some(GcRecord::Other) => Decision::Remove,
        }
    }

    /// Ends the current key: a Delete kept alone is handed back.
    fn finish_key(&mut self) {
        if self.state == KeyState::LoneDelete {
            self.found.deletes.push(self.key[1..].to_vec());
        }
        self.state = KeyState::Newer;
    }
}

impl CompactionFilter for GcFilter {
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        self.decide(key, value)
    }

    fn name(&self) -> &CStr {
        c"percolate-gc-filter"
    }
}

impl Drop for GcFilter {
    fn drop(&mut self) {
        self.finish_key();
        let found = std::mem::take(&mut self.found);
        if !found.values.is_empty() || !found.deletes.is_empty() {
            let mut leftovers = self.shared.leftovers.lock();
            leftovers.values.extend(found.values);
            leftovers.deletes.extend(found.deletes);
        }
    }
}

/// A stored write-CF key's prefix (the data prefix and the encoded user
/// key) and commit ts; `None` for a key outside the data space or too
/// short to carry a ts.
fn split_stored_key(key: &[u8]) -> Option<(&[u8], u64)> {
    if key.first() != Some(&DATA_PREFIX) {
        return None;
    }
    let prefix = crate::write_key_prefix(key).filter(|p| p.len() > 1)?;
    Some((prefix, crate::epochs::commit_ts(&key[1..])))
}

/// The default-CF key (without the data prefix) of the long value a Put
/// of `prefix` (an encoded user key) at `start_ts` wrote: the key and
/// `!start_ts` big-endian, as every ts in a key.
fn value_key(prefix: &[u8], start_ts: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + TS_SUFFIX_LEN);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&(!start_ts).to_be_bytes());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy record format for these tests: a type byte (`P` a Put with a
    /// long value, `p` with a short one, `D`, `L`, `R`), then the start_ts
    /// as 8 bytes big-endian for a Put.
    fn decode(value: &[u8]) -> Option<GcRecord> {
        let start_ts = || Some(u64::from_be_bytes(value.get(1..9)?.try_into().ok()?));
        match value.first()? {
            b'P' => Some(GcRecord::Put {
                start_ts: start_ts()?,
                long_value: true,
            }),
            b'p' => Some(GcRecord::Put {
                start_ts: start_ts()?,
                long_value: false,
            }),
            b'D' => Some(GcRecord::Delete),
            b'L' | b'R' => Some(GcRecord::Other),
            _ => None,
        }
    }

    fn stored(user: &[u8], ts: u64) -> Vec<u8> {
        let mut key = vec![DATA_PREFIX];
        key.extend_from_slice(&value_key(user, ts));
        key
    }

    fn put(start_ts: u64) -> Vec<u8> {
        let mut v = vec![b'P'];
        v.extend_from_slice(&start_ts.to_be_bytes());
        v
    }

    fn filter(safe_point: u64, full: bool) -> GcFilter {
        GcFilter {
            safe_point,
            decode: Some(decode),
            full,
            shared: Arc::new(GcShared::default()),
            key: Vec::new(),
            state: KeyState::Newer,
            found: Leftovers::default(),
        }
    }

    /// Runs `records` (commit ts, value) of each key through a filter and
    /// returns the commit ts of those it keeps, and what it leaves.
    /// A user key and its records, newest first: (commit ts, value).
    type KeyRecords<'a> = (&'a [u8], &'a [(u64, Vec<u8>)]);

    fn run(f: &mut GcFilter, keys: &[KeyRecords<'_>]) -> Vec<(Vec<u8>, u64)> {
        let mut kept = Vec::new();
        for (user, records) in keys {
            for (ts, value) in records.iter() {
                if matches!(f.decide(&stored(user, *ts), value), Decision::Keep) {
                    kept.push((user.to_vec(), *ts));
                }
            }
        }
        f.finish_key();
        kept
    }

    #[test]
    fn keeps_the_newest_put_below_the_safe_point_and_newer_records() {
        let mut f = filter(50, false);
        let records = [
            (60, put(59)),
            (40, b"R".to_vec()),
            (30, put(29)),
            (20, b"L".to_vec()),
            (10, put(9)),
        ];
        let kept = run(&mut f, &[(b"a", &records)]);
        assert_eq!(kept, vec![(b"a".to_vec(), 60), (b"a".to_vec(), 30)]);
        // The dropped Put's long value goes; the kept ones' stay.
        assert_eq!(f.found.values, vec![value_key(b"a", 9)]);
        assert!(f.found.deletes.is_empty());
    }

    #[test]
    fn short_values_leave_nothing_in_the_default_cf() {
        let mut f = filter(50, false);
        let short = |ts: u64| {
            let mut v = vec![b'p'];
            v.extend_from_slice(&ts.to_be_bytes());
            v
        };
        let kept = run(&mut f, &[(b"a", &[(30, short(29)), (10, short(9))])]);
        assert_eq!(kept, vec![(b"a".to_vec(), 30)]);
        assert!(f.found.values.is_empty());
    }

    #[test]
    fn a_delete_is_dropped_in_a_full_compaction_only() {
        let records = [(30, b"D".to_vec()), (10, put(9))];
        let mut full = filter(50, true);
        assert!(run(&mut full, &[(b"a", &records)]).is_empty());
        assert_eq!(full.found.values, vec![value_key(b"a", 9)]);

        // Elsewhere the Delete stays (an older version may be in a file
        // outside the compaction) and everything under it goes.
        let mut partial = filter(50, false);
        assert_eq!(
            run(&mut partial, &[(b"a", &records)]),
            vec![(b"a".to_vec(), 30)]
        );
        // Not handed back: versions under it were in this compaction.
        assert!(partial.found.deletes.is_empty());

        // Alone, it is handed back for a point GC.
        let mut alone = filter(50, false);
        let records = [(40, b"R".to_vec()), (30, b"D".to_vec())];
        let kept = run(&mut alone, &[(b"a", &records), (b"b", &[(20, put(19))])]);
        assert_eq!(kept, vec![(b"a".to_vec(), 30), (b"b".to_vec(), 20)]);
        assert_eq!(alone.found.deletes, vec![b"a".to_vec()]);
    }

    #[test]
    fn records_that_do_not_decode_are_kept_with_everything_older() {
        let mut f = filter(50, false);
        let records = [(40, b"?".to_vec()), (30, put(29)), (20, b"R".to_vec())];
        let kept = run(&mut f, &[(b"a", &records)]);
        assert_eq!(
            kept,
            vec![
                (b"a".to_vec(), 40),
                (b"a".to_vec(), 30),
                (b"a".to_vec(), 20)
            ]
        );
        // Under a kept Put, a record that does not decode stays too.
        let mut f = filter(50, false);
        let records = [(30, put(29)), (20, b"?".to_vec()), (10, put(9))];
        let kept = run(&mut f, &[(b"a", &records)]);
        assert_eq!(kept, vec![(b"a".to_vec(), 30), (b"a".to_vec(), 20)]);
    }

    #[test]
    fn keys_outside_the_data_space_and_without_a_safe_point_are_kept() {
        let mut f = filter(50, true);
        assert!(matches!(f.decide(b"\x01local", b"D"), Decision::Keep));
        assert!(matches!(f.decide(b"zshort", b"D"), Decision::Keep));
        let mut none = filter(0, true);
        assert!(matches!(
            none.decide(&stored(b"a", 10), b"D"),
            Decision::Keep
        ));
    }

    #[test]
    fn compaction_drops_versions_and_the_safe_point_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let engine = RocksEngine::open(dir.path()).unwrap();
            let mut batch = WriteBatch::new();
            for (ts, value) in [(30, put(29)), (20, b"R".to_vec()), (10, put(9))] {
                batch.put(Cf::Write, value_key(b"a", ts), value);
            }
            batch.put(Cf::Default, value_key(b"a", 29), b"new".to_vec());
            batch.put(Cf::Default, value_key(b"a", 9), b"old".to_vec());
            engine.write(&batch, WriteOptions::default()).unwrap();
            assert!(engine.set_gc_safe_point(50, decode).unwrap());
            // A lower one changes nothing.
            assert!(engine.set_gc_safe_point(40, decode).unwrap());
            assert_eq!(engine.gc_safe_point(), 50);
            engine.flush().unwrap();
            let db = engine.raw_db();
            db.compact_range_cf(handle(db, Cf::Write).unwrap(), None::<&[u8]>, None::<&[u8]>);
            assert!(engine.take_gc_leftovers().unwrap().is_empty());
            let snapshot = engine.snapshot();
            use crate::Snapshot;
            assert!(
                snapshot
                    .get(Cf::Write, &value_key(b"a", 30))
                    .unwrap()
                    .is_some()
            );
            assert_eq!(snapshot.get(Cf::Write, &value_key(b"a", 20)).unwrap(), None);
            assert_eq!(snapshot.get(Cf::Write, &value_key(b"a", 10)).unwrap(), None);
            assert!(
                snapshot
                    .get(Cf::Default, &value_key(b"a", 29))
                    .unwrap()
                    .is_some()
            );
            assert_eq!(
                snapshot.get(Cf::Default, &value_key(b"a", 9)).unwrap(),
                None
            );
        }
        let engine = RocksEngine::open(dir.path()).unwrap();
        assert_eq!(engine.gc_safe_point(), 50);
    }
}
