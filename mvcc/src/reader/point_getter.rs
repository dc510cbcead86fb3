//! `PointGetter`: reads single keys at one timestamp.
//!
//! A point read at `ts` makes at most three engine lookups, usually one:
//!
//! 1. the lock CF, `key` (skipped at RC): does a pending transaction block
//!    the read? See [`check_lock_conflict`](super::check_lock_conflict);
//! 2. the write CF, a prefix seek to `key@ts`: the newest record at or below
//!    `ts`; Lock and Rollback records are stepped over;
//! 3. the default CF, `key@start_ts`, only when the value was too long to be
//!    inlined into the write record.
//!
//! With [`VersionHints`], step 2 is a point get of the key's newest data
//! version instead of a seek, or no lookup at all when the hint carries
//! the version's record.

use percolate_engine::Snapshot;

use super::{
    IsolationLevel, LockDecision, LockPolicy, MvccReader, Statistics, TsSet, check_lock_conflict,
    check_rc_newer_write,
};
use crate::{Key, LockType, Result, TimeStamp, WriteType};

/// Where a point read can learn a key's newest data version without a
/// cursor: a region keeps one for the keys its commits wrote or its reads
/// found recently.
///
/// A hint is the commit_ts of the newest Put or Delete record of the key
/// and the engine's write epoch of the key's records
/// ([`Engine::write_epoch`]) at which it was known to be the newest: a
/// commit records its version at the epoch read once it is written, before
/// it lets go of the key (no other commit of the key can write in
/// between); a read offers the Put its seek found, at the
/// epoch read before the seek, when the engine's ts ceiling of the key
/// ([`Engine::write_ts_ceiling`]) was then at or below the read ts (no
/// newer record anywhere). The getter asks after it has judged the key's
/// lock, uses the hint only while the epoch is still the engine's (no
/// record of the key, or of a key hashing alike, was written since), and
/// looks the record up by point get, or not at all when the hint carries
/// it (below). The engine moves a key's epoch before a write of its
/// records can be read, so a hint older than a version the read could see
/// no longer matches. Hints are only for reads of the latest data
/// ([`Engine::latest`](percolate_engine::Engine::latest)): a pinned
/// snapshot may be older than the version a hint names.
///
/// [`Engine::write_epoch`]: percolate_engine::Engine::write_epoch
/// [`Engine::write_ts_ceiling`]: percolate_engine::Engine::write_ts_ceiling
///
/// A hint may also carry the version's record (the bytes at
/// `key@commit_ts` in the write CF), so that the read makes no engine
/// lookup at all. A record is rewritten only by an overlapped rollback
/// (which sets a flag on it that reads ignore, and moves the epoch);
/// GC may remove it only when it is a Delete at or below the safe point,
/// whose answer ("no value") is the same with or without it. A getter that
/// looked a record up hands its bytes back ([`fill`](Self::fill)).
/// Pessimistic lock requests that want the value ask too, through
/// [`MvccReader::hinted_data_version`](crate::MvccReader::hinted_data_version).
pub trait VersionHints: Send + Sync {
    /// The newest data version of `key` known and the write epoch it was
    /// known at, if any. When its record is known too, its bytes are
    /// put in `record` (cleared first); `record` is left empty otherwise.
    fn newest_data_version(&self, key: &Key, record: &mut Vec<u8>) -> Option<(TimeStamp, u64)>;

    /// A read found `version` to be the newest data version of `key` while
    /// the write epoch was `epoch`. Kept unless the same or a newer version
    /// of the key is already held (the same one is taken at a newer
    /// epoch).
    fn offer(&self, key: &Key, version: TimeStamp, epoch: u64);

    /// A read looked up the `record` of the hint (`version`, `epoch`) of
    /// `key`, which came without one: kept while that is still the hint.
    /// Does nothing by default.
    fn fill(&self, key: &Key, version: TimeStamp, epoch: u64, record: &[u8]) {
        let _ = (key, version, epoch, record);
    }
}

/// Builds a [`PointGetter`].
#[must_use]
pub struct PointGetterBuilder<S: Snapshot> {
    snapshot: S,
    ts: TimeStamp,
    policy: LockPolicy,
    fill_cache: bool,
    omit_value: bool,
    hints: Option<std::sync::Arc<dyn VersionHints>>,
}

impl<S: Snapshot> PointGetterBuilder<S> {
    /// A getter over `snapshot` reading at `ts`.
    pub fn new(snapshot: S, ts: TimeStamp) -> Self {
        PointGetterBuilder {
            snapshot,
            ts,
            policy: LockPolicy::default(),
            fill_cache: true,
            omit_value: false,
            hints: None,
        }
    }

    /// Defaults to [`IsolationLevel::Si`].
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.policy.isolation_level = level;
        self
    }

    /// Transactions whose locks are ignored (the caller knows they cannot
    /// commit at or below the read ts). Defaults to none.
    pub fn bypass_locks(mut self, locks: TsSet) -> Self {
        self.policy.bypass_locks = locks;
        self
    }

    /// Transactions known to have committed: where one of their locks would
    /// block, its pending value is returned instead. Defaults to none.
    pub fn access_locks(mut self, locks: TsSet) -> Self {
        self.policy.access_locks = locks;
        self
    }

    /// Whether blocks read enter the block cache. Defaults to true.
    pub fn fill_cache(mut self, fill_cache: bool) -> Self {
        self.fill_cache = fill_cache;
        self
    }

    /// Returns an empty value instead of loading it: an existence check that
    /// never touches the default CF. Defaults to false.
    pub fn omit_value(mut self, omit_value: bool) -> Self {
        self.omit_value = omit_value;
        self
    }

    /// Where the getter may learn a key's newest data version, to read it
    /// with a point get instead of a seek, and where it offers what its
    /// seeks find (see [`VersionHints`]). Only for a getter over the latest
    /// data ([`Engine::latest`](percolate_engine::Engine::latest)): what a
    /// snapshot's seek finds may be older than the epoch read beside it.
    /// Defaults to none.
    pub fn version_hints(mut self, hints: std::sync::Arc<dyn VersionHints>) -> Self {
        self.hints = Some(hints);
        self
    }

    /// The getter.
    pub fn build(self) -> PointGetter<S> {
        PointGetter {
            reader: MvccReader::new(self.snapshot).fill_cache(self.fill_cache),
            ts: self.ts,
            policy: self.policy,
            omit_value: self.omit_value,
            hints: self.hints,
        }
    }
}

/// Reads single keys of one snapshot at one timestamp. Over a snapshot from
/// [`Engine::snapshot`](percolate_engine::Engine::snapshot), reuse it for
/// many keys: its write-CF cursor stays open between reads. Over the latest
/// data ([`Engine::latest`](percolate_engine::Engine::latest)), build one
/// per key: a cursor reads the data as of its first use, so a reused one
/// would read a later key's versions from before that key's lock was
/// checked.
pub struct PointGetter<S: Snapshot> {
    reader: MvccReader<S>,
    ts: TimeStamp,
    policy: LockPolicy,
    omit_value: bool,
    hints: Option<std::sync::Arc<dyn VersionHints>>,
}

impl<S: Snapshot> PointGetter<S> {
    /// The value of `key` visible at the read ts, `None` if the key does not
    /// exist (never written, deleted, or fenced off by GC), or
    /// `KeyIsLocked` / `WriteConflict` as the isolation level says.
    pub fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        if self.policy.isolation_level != IsolationLevel::Rc {
            // Pessimistic locks never stop a read: their lookup is skipped.
            if let Some(lock) = self.reader.load_read_lock(key)? {
                match check_lock_conflict(lock, key, self.ts, &self.policy)? {
                    LockDecision::Ignore => {}
                    LockDecision::ReadLock(lock) => return self.read_from_lock(key, *lock),
                }
            }
        }
        self.read_committed(key)
    }

    /// Engine operations made so far.
    pub fn statistics(&self) -> &Statistics {
        self.reader.statistics()
    }

    /// The newest committed value at or below the read ts.
    fn read_committed(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        let ts = self.ts;
        // Before anything opens the write cursor: what a cursor opened
        // earlier finds may be older than the epoch (an RcCheckTs read's
        // check below opens it).
        let offer_at = self.offer_epoch(key);
        check_rc_newer_write(&mut self.reader, key, ts, self.policy.isolation_level)?;
        if let Some(found) = self.read_hinted(key)? {
            return Ok(found);
        }
        let Some((write, commit_ts)) = self.reader.get_write_with_commit_ts(key, ts, Some(ts))?
        else {
            return Ok(None);
        };
        if let (Some(epoch), Some(hints)) = (offer_at, &self.hints) {
            hints.offer(key, commit_ts, epoch);
        }
        if self.omit_value {
            return Ok(Some(Vec::new()));
        }
        debug_assert_eq!(write.write_type, WriteType::Put);
        self.reader.load_data(key, write).map(Some)
    }

    /// The newest committed value by a point get of the key's hinted newest
    /// data version, when there is a hint at or below the read ts and its
    /// record answers: every record above the data version is a Lock or a
    /// Rollback, which a read steps over, so that version is the one the
    /// seek would find. `None`: no answer here, seek as usual.
    fn read_hinted(&mut self, key: &Key) -> Result<Option<Option<Vec<u8>>>> {
        let Some(hints) = &self.hints else {
            return Ok(None);
        };
        let Some((_, write)) = self.reader.hinted_data_version(key, self.ts, &**hints)? else {
            return Ok(None);
        };
        if !write.as_ref().check_gc_fence_as_latest_version(self.ts) {
            return Ok(None);
        }
        match write.write_type {
            WriteType::Delete => Ok(Some(None)),
            WriteType::Put if self.omit_value => Ok(Some(Some(Vec::new()))),
            WriteType::Put => self.reader.load_data(key, write).map(|v| Some(Some(v))),
            WriteType::Lock | WriteType::Rollback => Ok(None),
        }
    }

    /// The write epoch at which what the coming seek finds may be offered
    /// as the key's newest data version: read before the write cursor is
    /// opened (none may be open yet), while no
    /// write of the key's bucket is in flight and no record in it is newer
    /// than the read ts (its ts ceiling, read after the epoch, is not
    /// above it). `None`: nothing to offer.
    fn offer_epoch(&self, key: &Key) -> Option<u64> {
        self.hints.as_ref()?;
        if self.reader.has_write_cursor() {
            // A getter reused for another key: its cursor reads the data
            // as of its first use.
            return None;
        }
        let snapshot = self.reader.snapshot();
        let epoch = snapshot.write_epoch(key.as_encoded())?;
        let ceiling = snapshot.write_ts_ceiling(key.as_encoded())?;
        (ceiling <= self.ts.into_inner()).then_some(epoch)
    }

    /// The pending value of an access lock: its transaction committed, so
    /// this is what the read must see.
    fn read_from_lock(&mut self, key: &Key, lock: crate::Lock) -> Result<Option<Vec<u8>>> {
        match lock.lock_type {
            LockType::Put if self.omit_value => Ok(Some(Vec::new())),
            LockType::Put => match lock.short_value {
                Some(value) => Ok(Some(value)),
                None => self.reader.load_long_value(key, lock.ts).map(Some),
            },
            LockType::Delete => Ok(None),
            // Lock and Pessimistic locks never block, so they are never read
            // through; fall back to committed data to stay correct.
            _ => self.read_committed(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use percolate_engine::{Cf, Engine, IterOptions, MemoryEngine, MemorySnapshot, Snapshot};

    use super::*;
    use crate::testing::MvccFixture;

    /// A latest view that logs when the write epoch is read and when a
    /// write-CF cursor is opened.
    #[derive(Clone)]
    struct Logged {
        inner: MemorySnapshot,
        log: Arc<Mutex<Vec<&'static str>>>,
    }

    impl Snapshot for Logged {
        type Iter = <MemorySnapshot as Snapshot>::Iter;

        fn get(&self, cf: Cf, key: &[u8]) -> percolate_engine::Result<Option<Vec<u8>>> {
            if cf == Cf::Write {
                self.log.lock().unwrap().push("get");
            }
            self.inner.get(cf, key)
        }

        fn iter(&self, cf: Cf, options: IterOptions) -> percolate_engine::Result<Self::Iter> {
            if cf == Cf::Write {
                self.log.lock().unwrap().push("cursor");
            }
            self.inner.iter(cf, options)
        }

        fn write_epoch(&self, prefix: &[u8]) -> Option<u64> {
            self.log.lock().unwrap().push("epoch");
            self.inner.write_epoch(prefix)
        }

        fn write_ts_ceiling(&self, prefix: &[u8]) -> Option<u64> {
            self.inner.write_ts_ceiling(prefix)
        }
    }

    /// Hints that keep what is offered.
    #[derive(Default)]
    struct Offers(Mutex<Vec<(TimeStamp, u64)>>);

    impl VersionHints for Offers {
        fn newest_data_version(&self, _: &Key, _: &mut Vec<u8>) -> Option<(TimeStamp, u64)> {
            None
        }

        fn offer(&self, _: &Key, version: TimeStamp, epoch: u64) {
            self.0.lock().unwrap().push((version, epoch));
        }
    }

    /// What a read offers as the key's newest version was found by a
    /// cursor opened after the epoch it is offered at was read, at every
    /// isolation level (an RcCheckTs read opens the cursor for its own
    /// check first; a cursor older than the epoch could offer a version
    /// older than one written in between). A getter whose cursor is already
    /// open offers nothing.
    #[test]
    fn offers_come_from_cursors_opened_after_the_epoch_read() {
        let engine = MemoryEngine::new();
        let f = MvccFixture::new(engine.clone());
        f.put_committed(b"k", b"v", 10, 11);
        let key = Key::from_raw(b"k");
        for level in [IsolationLevel::Si, IsolationLevel::RcCheckTs] {
            let log = Arc::new(Mutex::new(Vec::new()));
            let view = Logged {
                inner: engine.latest(),
                log: log.clone(),
            };
            let offers = Arc::new(Offers::default());
            let mut getter = PointGetterBuilder::new(view, TimeStamp::new(20))
                .isolation_level(level)
                .version_hints(offers.clone())
                .build();
            assert_eq!(getter.get(&key).unwrap(), Some(b"v".to_vec()));
            let log = log.lock().unwrap().clone();
            assert_eq!(log.first(), Some(&"epoch"), "{level:?}: {log:?}");
            assert!(log.contains(&"cursor"), "{level:?}: {log:?}");
            assert_eq!(offers.0.lock().unwrap().len(), 1, "{level:?}");
            // Reused: its cursor is open from the first read.
            assert_eq!(getter.get(&key).unwrap(), Some(b"v".to_vec()));
            assert_eq!(offers.0.lock().unwrap().len(), 1, "{level:?}");
        }
    }

    /// Hints that hold one key's version and, once filled, its record.
    #[derive(Default)]
    struct OneHint(Mutex<Option<(TimeStamp, u64, Vec<u8>)>>);

    impl VersionHints for OneHint {
        fn newest_data_version(&self, _: &Key, record: &mut Vec<u8>) -> Option<(TimeStamp, u64)> {
            let held = self.0.lock().unwrap();
            let (version, epoch, held_record) = held.as_ref()?;
            record.clear();
            record.extend_from_slice(held_record);
            Some((*version, *epoch))
        }

        fn offer(&self, _: &Key, version: TimeStamp, epoch: u64) {
            *self.0.lock().unwrap() = Some((version, epoch, Vec::new()));
        }

        fn fill(&self, _: &Key, version: TimeStamp, epoch: u64, record: &[u8]) {
            let mut held = self.0.lock().unwrap();
            if let Some((v, e, r)) = held.as_mut() {
                if (*v, *e) == (version, epoch) {
                    *r = record.to_vec();
                }
            }
        }
    }

    /// A hint without its record costs a point get of the record, which
    /// the getter hands back; a hint with it costs no lookup at all, and
    /// answers as the seek does: a Put's value, a Delete's nothing.
    #[test]
    fn a_hint_with_its_record_reads_nothing_from_the_engine() {
        let engine = MemoryEngine::new();
        let f = MvccFixture::new(engine.clone());
        f.put_committed(b"k", b"v", 10, 11);
        let key = Key::from_raw(b"k");
        let hints = Arc::new(OneHint::default());
        let epoch = engine.latest().write_epoch(key.as_encoded()).unwrap();
        hints.offer(&key, TimeStamp::new(11), epoch);
        let read = |hints: &Arc<OneHint>| {
            let log = Arc::new(Mutex::new(Vec::new()));
            let view = Logged {
                inner: engine.latest(),
                log: log.clone(),
            };
            let value = PointGetterBuilder::new(view, TimeStamp::new(20))
                .version_hints(hints.clone())
                .build()
                .get(&key)
                .unwrap();
            let log = log.lock().unwrap().clone();
            (value, log)
        };
        let (value, log) = read(&hints);
        assert_eq!(value, Some(b"v".to_vec()));
        assert!(log.contains(&"get") && !log.contains(&"cursor"), "{log:?}");
        let filled = hints.0.lock().unwrap().clone().unwrap().2;
        assert_eq!(
            crate::WriteRef::parse(&filled).unwrap().short_value,
            Some(&b"v"[..])
        );
        let (value, log) = read(&hints);
        assert_eq!(value, Some(b"v".to_vec()));
        assert!(!log.contains(&"get") && !log.contains(&"cursor"), "{log:?}");
        // A Delete's record answers "no value" by itself.
        f.delete_committed(b"k", 30, 31);
        let epoch = engine.latest().write_epoch(key.as_encoded()).unwrap();
        let delete = crate::Write::new(WriteType::Delete, TimeStamp::new(30), None);
        *hints.0.lock().unwrap() = Some((TimeStamp::new(31), epoch, delete.to_bytes()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let view = Logged {
            inner: engine.latest(),
            log: log.clone(),
        };
        let value = PointGetterBuilder::new(view, TimeStamp::new(40))
            .version_hints(hints.clone())
            .build()
            .get(&key)
            .unwrap();
        assert_eq!(value, None);
        assert!(!log.lock().unwrap().contains(&"get"));
    }
}
