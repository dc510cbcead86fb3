//! `MvccReader`: the read primitives transaction actions are built from.

use std::ops::ControlFlow;

use percolate_engine::{Cf, EngineIterator, IterOptions, SeekMode, Snapshot};

use super::{CfStatistics, Statistics};
use crate::codec::{DecodeError, encode_u64_desc};
use crate::{Error, Key, Lock, Result, TimeStamp, Write, WriteRef, WriteType};

/// What the write CF says about the transaction `start_ts` on one key.
///
/// Exhaustive on purpose: these are the only answers the format allows, and
/// every action must handle each of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnCommitRecord {
    /// No record of the transaction. `overlapped_write` is another
    /// transaction's commit record whose commit_ts equals `start_ts`: a
    /// rollback of `start_ts` must mark it instead of overwriting it.
    None {
        /// The commit record sitting at `key@start_ts`, if any.
        overlapped_write: Option<OverlappedWrite>,
    },
    /// The transaction's own record: a commit (Put, Delete, Lock) at
    /// `commit_ts`, or a Rollback at `commit_ts == start_ts`.
    SingleRecord {
        /// Where the record sits.
        commit_ts: TimeStamp,
        /// The record.
        write: Write,
    },
    /// Another transaction's commit record at `start_ts` already carries the
    /// rollback of this one (`has_overlapped_rollback`).
    OverlappedRollback {
        /// The ts of that record (equal to `start_ts`).
        commit_ts: TimeStamp,
    },
}

impl TxnCommitRecord {
    /// The commit_ts if the transaction committed on this key.
    pub fn committed_ts(&self) -> Option<TimeStamp> {
        match self {
            TxnCommitRecord::SingleRecord { commit_ts, write }
                if write.write_type != WriteType::Rollback =>
            {
                Some(*commit_ts)
            }
            _ => None,
        }
    }

    /// Whether the transaction was rolled back on this key.
    pub fn is_rolled_back(&self) -> bool {
        match self {
            TxnCommitRecord::SingleRecord { write, .. } => write.write_type == WriteType::Rollback,
            TxnCommitRecord::OverlappedRollback { .. } => true,
            TxnCommitRecord::None { .. } => false,
        }
    }
}

/// Another transaction's commit record found at `key@start_ts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverlappedWrite {
    /// The record.
    pub write: Write,
    /// The commit_ts of the next newer Put or Delete of the key (zero if
    /// there is none): the GC fence to set when the record is rewritten.
    pub gc_fence: TimeStamp,
}

/// Reads MVCC records of one snapshot for transaction actions.
///
/// The reader keeps a write-CF cursor in prefix mode between calls, so a
/// sequence of lookups on one key costs seeks, never a re-open.
///
/// # Ascending mode
///
/// A caller that looks keys up in ascending order (a command over a sorted
/// batch of several keys) can say so with [`ascending`](Self::ascending).
/// The reader then keeps a total-order cursor per CF and answers from where
/// it rests whenever that position proves the answer:
///
/// * lock CF: a key's lock is found by stepping forward from the previous
///   key's position (a seek only when the key is not within a couple of
///   steps), and a cursor resting beyond the key proves it has no lock;
/// * write CF: a cursor resting beyond all of a key's records proves it has
///   none. Otherwise the lookup takes the prefix-mode cursor as usual (one
///   bloom-filtered seek), so keys with records cost what they always did.
///
/// A batch of new keys above the existing data thus costs one seek per CF
/// instead of two lookups per key, and committing a sorted batch reads each
/// lock with one step. Opening the cursors costs more than a point lookup,
/// so a single-key command should not ask for this mode.
///
/// Both cursors are created with a limit of 32 hidden entries (deleted
/// keys, overwritten locks) that one move may pass: a lock CF full of the
/// tombstones of released locks would otherwise make a step or seek walk
/// all of them, where a point get answers from its bloom filter. A cursor
/// that hits the limit is dropped and the reader goes back to point lookups
/// for that CF.
pub struct MvccReader<S: Snapshot> {
    snapshot: S,
    write_cursor: Option<S::Iter>,
    fill_cache: bool,
    statistics: Statistics,
    /// Scratch buffer for `encoded key + ts` seek targets.
    seek_buf: Vec<u8>,
    /// Whether the caller promised ascending lookups.
    ascending: bool,
    lock_forward: Forward<S::Iter>,
    write_forward: Forward<S::Iter>,
}

impl<S: Snapshot> MvccReader<S> {
    /// A reader over `snapshot`.
    pub fn new(snapshot: S) -> Self {
        MvccReader {
            snapshot,
            write_cursor: None,
            fill_cache: true,
            statistics: Statistics::default(),
            seek_buf: Vec::new(),
            ascending: false,
            lock_forward: Forward::default(),
            write_forward: Forward::default(),
        }
    }

    /// Whether blocks read enter the block cache. Defaults to true.
    #[must_use]
    pub fn fill_cache(mut self, fill_cache: bool) -> Self {
        self.fill_cache = fill_cache;
        self
    }

    /// Tells the reader that its caller looks several keys up in ascending
    /// order, so that forward cursors can answer most lookups without a
    /// seek (see the [type docs](Self#ascending-mode)). Defaults to false.
    ///
    /// Only a hint: answers are exact in any order, since a forward cursor
    /// answers only where its position proves the answer. Keys out of order
    /// cost a seek each instead of a point get.
    #[must_use]
    pub fn ascending(mut self, ascending: bool) -> Self {
        self.ascending = ascending;
        self
    }

    /// The snapshot read.
    pub fn snapshot(&self) -> &S {
        &self.snapshot
    }

    /// Engine operations made so far.
    pub fn statistics(&self) -> &Statistics {
        &self.statistics
    }

    /// The lock on `key`, if any.
    pub fn load_lock(&mut self, key: &Key) -> Result<Option<Lock>> {
        self.load_lock_with(key, |snapshot, key| snapshot.get(Cf::Lock, key))
    }

    /// The lock on `key` where it may stop a read: as
    /// [`load_lock`](Self::load_lock), except that a pessimistic lock,
    /// which no read waits for or reads through, may be left out
    /// ([`Snapshot::get_read_lock`]).
    pub fn load_read_lock(&mut self, key: &Key) -> Result<Option<Lock>> {
        self.load_lock_with(key, |snapshot, key| snapshot.get_read_lock(key))
    }

    fn load_lock_with(
        &mut self,
        key: &Key,
        get: impl FnOnce(&S, &[u8]) -> percolate_engine::Result<Option<Vec<u8>>>,
    ) -> Result<Option<Lock>> {
        if self.ascending
            && !self.lock_forward.disabled
            && !self.snapshot.gets_from_memory(Cf::Lock)
        {
            match self.load_lock_forward(key) {
                Err(Error::Engine(percolate_engine::Error::Incomplete)) => {
                    self.lock_forward.disable()
                }
                answer => return answer,
            }
        }
        self.statistics.lock.get += 1;
        match get(&self.snapshot, key.as_encoded())? {
            Some(bytes) => parse_lock(key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// [`load_lock`](Self::load_lock) through the forward lock cursor.
    fn load_lock_forward(&mut self, key: &Key) -> Result<Option<Lock>> {
        let cursor = self
            .lock_forward
            .cursor(&self.snapshot, Cf::Lock, self.fill_cache)?;
        let target = key.as_encoded().as_slice();
        if !cursor.near_seek(target, &mut self.statistics.lock)? || cursor.iter.key() != target {
            return Ok(None);
        }
        parse_lock(key, cursor.iter.value()).map(Some)
    }

    /// The value a Put record stands for: its short value, or the long value
    /// in the default CF at `key@write.start_ts`.
    pub fn load_data(&mut self, key: &Key, write: Write) -> Result<Vec<u8>> {
        debug_assert_eq!(write.write_type, WriteType::Put, "only a Put has data");
        match write.short_value {
            Some(value) => Ok(value),
            None => self.load_long_value(key, write.start_ts),
        }
    }

    /// The long value written by `start_ts` at `key@start_ts`.
    pub(crate) fn load_long_value(&mut self, key: &Key, start_ts: TimeStamp) -> Result<Vec<u8>> {
        self.statistics.data.get += 1;
        let data_key = key.clone().append_ts(start_ts);
        self.snapshot
            .get(Cf::Default, data_key.as_encoded())?
            .ok_or_else(|| Error::DefaultNotFound {
                key: key.clone(),
                start_ts,
            })
    }

    /// The record at exactly `key@commit_ts`, by point lookup (no cursor),
    /// if there is one.
    pub fn write_at(&mut self, key: &Key, commit_ts: TimeStamp) -> Result<Option<Write>> {
        match self.write_record_at(key, commit_ts)? {
            Some(bytes) => self.parse_write(key, commit_ts, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The newest data version of `key` (its Put or Delete record) and its
    /// commit_ts, when `hints` know it, it is at or below `ts`, and the
    /// engine's write epoch of the key is still the one it was known
    /// at; read from the hint's record or, without one, by a point get
    /// (whose record is handed back to `hints`). `None`: no answer here.
    /// Only over the latest data (see [`VersionHints`]). Records above the
    /// data version (Lock, Rollback) are not looked at: the caller steps
    /// over them as a seek would.
    ///
    /// [`VersionHints`]: crate::VersionHints
    pub fn hinted_data_version(
        &mut self,
        key: &Key,
        ts: TimeStamp,
        hints: &dyn crate::VersionHints,
    ) -> Result<Option<(TimeStamp, Write)>> {
        self.hinted(key, hints, |_, commit_ts| commit_ts <= ts)
    }

    /// The newest record of `key` of any type and its commit_ts, when
    /// `hints` know the key's newest data version, the engine's write
    /// epoch of the key is still the one it was known at, and the engine's
    /// ts ceiling of the key is at or below that version's commit_ts: no
    /// record of the key (a Lock or Rollback record written after it
    /// included) is newer then, so the data version is the newest record,
    /// as a seek would find it. `None`: no answer here. Only over the
    /// latest data, for a key no other writer can write meanwhile (under
    /// its latch).
    pub fn hinted_newest_record(
        &mut self,
        key: &Key,
        hints: &dyn crate::VersionHints,
    ) -> Result<Option<(TimeStamp, Write)>> {
        self.hinted(key, hints, |snapshot, commit_ts| {
            snapshot
                .write_ts_ceiling(key.as_encoded())
                .is_some_and(|ceiling| ceiling <= commit_ts.into_inner())
        })
    }

    /// The hinted data version of `key` where its bucket's epoch is the
    /// hint's and `accept` takes it (checked after the epoch).
    fn hinted(
        &mut self,
        key: &Key,
        hints: &dyn crate::VersionHints,
        accept: impl FnOnce(&S, TimeStamp) -> bool,
    ) -> Result<Option<(TimeStamp, Write)>> {
        let mut record = ScratchRecord::take();
        let Some((commit_ts, epoch)) = hints.newest_data_version(key, &mut record.0) else {
            return Ok(None);
        };
        if self.snapshot.write_epoch(key.as_encoded()) != Some(epoch)
            || !accept(&self.snapshot, commit_ts)
        {
            return Ok(None);
        }
        if record.0.is_empty() {
            let Some(found) = self.write_record_at(key, commit_ts)? else {
                return Ok(None);
            };
            hints.fill(key, commit_ts, epoch, &found);
            record.0 = found;
        }
        let write = self.parse_write(key, commit_ts, &record.0)?;
        Ok(Some((commit_ts, write)))
    }

    /// The bytes of the record at exactly `key@commit_ts`, unparsed.
    pub(crate) fn write_record_at(
        &mut self,
        key: &Key,
        commit_ts: TimeStamp,
    ) -> Result<Option<Vec<u8>>> {
        self.seek_buf.clear();
        self.seek_buf.extend_from_slice(key.as_encoded());
        encode_u64_desc(&mut self.seek_buf, commit_ts.into_inner());
        self.statistics.write.get += 1;
        Ok(self.snapshot.get(Cf::Write, &self.seek_buf)?)
    }

    /// `record`, the bytes of the record at `key@commit_ts`, parsed; a
    /// `Corruption` error naming that key if they do not decode.
    pub(crate) fn parse_write(
        &self,
        key: &Key,
        commit_ts: TimeStamp,
        record: &[u8],
    ) -> Result<Write> {
        Write::parse(record).map_err(|e| {
            Error::corruption(Cf::Write, key.clone().append_ts(commit_ts).as_encoded(), e)
        })
    }

    /// Whether the write-CF cursor of point reads is open: it reads the
    /// data as of when it opened (or, over a snapshot, as of the snapshot).
    pub(crate) fn has_write_cursor(&self) -> bool {
        self.write_cursor.is_some()
    }

    /// Whether `key` is known, without reading, to have no write-CF record
    /// with a commit_ts at or after `ts`: the engine's
    /// [`write_ts_ceiling`](percolate_engine::Engine::write_ts_ceiling) of
    /// the key is below `ts`. `false` when the engine cannot tell.
    pub fn no_write_since(&self, key: &Key, ts: TimeStamp) -> bool {
        self.snapshot
            .write_ts_ceiling(key.as_encoded())
            .is_some_and(|ceiling| ceiling < ts.into_inner())
    }

    /// The newest record of `key` with commit_ts `<= ts`, of any type, and
    /// its commit_ts.
    pub fn seek_write(&mut self, key: &Key, ts: TimeStamp) -> Result<Option<(TimeStamp, Write)>> {
        self.walk_versions(key, ts, |commit_ts, write| {
            Ok(ControlFlow::Break((commit_ts, write.to_owned())))
        })
    }

    /// The newest Put visible at `ts`, skipping Lock and Rollback records;
    /// `None` if the newest Put/Delete is a Delete or there is none. With a
    /// `gc_fence_limit`, a record fenced at or below it counts as gone.
    pub fn get_write(
        &mut self,
        key: &Key,
        ts: TimeStamp,
        gc_fence_limit: Option<TimeStamp>,
    ) -> Result<Option<Write>> {
        Ok(self
            .get_write_with_commit_ts(key, ts, gc_fence_limit)?
            .map(|(write, _)| write))
    }

    /// [`get_write`](Self::get_write), with the commit_ts of the Put.
    pub fn get_write_with_commit_ts(
        &mut self,
        key: &Key,
        ts: TimeStamp,
        gc_fence_limit: Option<TimeStamp>,
    ) -> Result<Option<(Write, TimeStamp)>> {
        let found = self.walk_versions(key, ts, |commit_ts, write| {
            if let Some(limit) = gc_fence_limit {
                if !write.check_gc_fence_as_latest_version(limit) {
                    return Ok(ControlFlow::Break(None));
                }
            }
            Ok(match write.write_type {
                WriteType::Put => ControlFlow::Break(Some((write.to_owned(), commit_ts))),
                WriteType::Delete => ControlFlow::Break(None),
                WriteType::Lock | WriteType::Rollback => ControlFlow::Continue(()),
            })
        })?;
        Ok(found.flatten())
    }

    /// Looks for the record the transaction `start_ts` left on `key`:
    /// walks down from the newest version to `start_ts`.
    pub fn get_txn_commit_record(
        &mut self,
        key: &Key,
        start_ts: TimeStamp,
    ) -> Result<TxnCommitRecord> {
        let mut gc_fence = TimeStamp::zero();
        let found = self.walk_versions(key, TimeStamp::max(), |commit_ts, write| {
            if write.start_ts == start_ts {
                let write = write.to_owned();
                return Ok(ControlFlow::Break(TxnCommitRecord::SingleRecord {
                    commit_ts,
                    write,
                }));
            }
            if commit_ts == start_ts {
                if write.start_ts > commit_ts {
                    // A rollback of `start_ts` would mark it overlapped as
                    // if another transaction's commit were there.
                    let e = DecodeError::CommitBeforeStart {
                        start_ts: write.start_ts.into_inner(),
                        commit_ts: commit_ts.into_inner(),
                    };
                    let stored = key.clone().append_ts(commit_ts);
                    return Err(Error::corruption(Cf::Write, stored.as_encoded(), e));
                }
                return Ok(ControlFlow::Break(if write.has_overlapped_rollback {
                    TxnCommitRecord::OverlappedRollback { commit_ts }
                } else {
                    let write = write.to_owned();
                    let overlapped_write = Some(OverlappedWrite { write, gc_fence });
                    TxnCommitRecord::None { overlapped_write }
                }));
            }
            if commit_ts < start_ts {
                return Ok(ControlFlow::Break(TxnCommitRecord::None {
                    overlapped_write: None,
                }));
            }
            if matches!(write.write_type, WriteType::Put | WriteType::Delete) {
                gc_fence = commit_ts;
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(found.unwrap_or(TxnCommitRecord::None {
            overlapped_write: None,
        }))
    }

    /// Every record of `key` with commit_ts `<= ts`, newest first.
    pub fn scan_writes(&mut self, key: &Key, ts: TimeStamp) -> Result<Vec<(TimeStamp, Write)>> {
        let mut all = Vec::new();
        self.walk_versions(key, ts, |commit_ts, write| {
            all.push((commit_ts, write.to_owned()));
            Ok(ControlFlow::<()>::Continue(()))
        })?;
        Ok(all)
    }

    /// Every long value of `key` in the default CF, newest start_ts first.
    pub fn scan_values(&mut self, key: &Key) -> Result<Vec<(TimeStamp, Vec<u8>)>> {
        let options = IterOptions::new()
            .seek_mode(SeekMode::Prefix)
            .fill_cache(self.fill_cache);
        let mut cursor = self.snapshot.iter(Cf::Default, options)?;
        let mut values = Vec::new();
        let mut valid = cursor.seek(key.clone().append_ts(TimeStamp::max()).as_encoded())?;
        while valid {
            let (user, start_ts) = split_stored_key(Cf::Default, cursor.key())?;
            if user != key.as_encoded().as_slice() {
                break;
            }
            values.push((start_ts, cursor.value().to_vec()));
            valid = cursor.next()?;
        }
        Ok(values)
    }

    /// Locks in `[start, end)` (unbounded where `None`) that pass `filter`,
    /// at most `limit` of them (0 = no limit). The flag tells whether the
    /// scan stopped at the limit with more locks possibly left.
    pub fn scan_locks(
        &mut self,
        start: Option<&Key>,
        end: Option<&Key>,
        mut filter: impl FnMut(&Key, &Lock) -> bool,
        limit: usize,
    ) -> Result<(Vec<(Key, Lock)>, bool)> {
        let mut options = IterOptions::new().fill_cache(self.fill_cache);
        options.lower_bound = start.map(|k| k.as_encoded().clone());
        options.upper_bound = end.map(|k| k.as_encoded().clone());
        let mut cursor = self.snapshot.iter(Cf::Lock, options)?;
        self.statistics.lock.seek += 1;
        let mut valid = cursor.seek_to_first()?;
        let mut locks = Vec::new();
        while valid {
            let key = Key::from_encoded_slice(cursor.key());
            let lock = Lock::parse(cursor.value())
                .map_err(|e| Error::corruption(Cf::Lock, cursor.key(), e))?;
            if filter(&key, &lock) {
                if limit > 0 && locks.len() == limit {
                    return Ok((locks, true));
                }
                locks.push((key, lock));
            }
            self.statistics.lock.next += 1;
            valid = cursor.next()?;
        }
        Ok((locks, false))
    }

    /// Visits the records of `key` from the newest with commit_ts `<=
    /// from_ts` downwards, until `visit` breaks (its value is returned) or
    /// the key has no more records (`None`).
    fn walk_versions<R>(
        &mut self,
        key: &Key,
        from_ts: TimeStamp,
        mut visit: impl FnMut(TimeStamp, WriteRef<'_>) -> Result<ControlFlow<R>>,
    ) -> Result<Option<R>> {
        self.seek_buf.clear();
        self.seek_buf.extend_from_slice(key.as_encoded());
        encode_u64_desc(&mut self.seek_buf, from_ts.into_inner());
        if self.ascending && !self.write_forward.disabled {
            match self.has_no_versions(key) {
                Ok(true) => return Ok(None),
                Ok(false) => {}
                Err(Error::Engine(percolate_engine::Error::Incomplete)) => {
                    self.write_forward.disable()
                }
                Err(e) => return Err(e),
            }
        }
        let cursor = match &mut self.write_cursor {
            Some(cursor) => cursor,
            slot @ None => {
                let options = IterOptions::new()
                    .seek_mode(SeekMode::Prefix)
                    .fill_cache(self.fill_cache);
                slot.insert(self.snapshot.iter(Cf::Write, options)?)
            }
        };
        let stats = &mut self.statistics.write;
        stats.seek += 1;
        let mut valid = cursor.seek(&self.seek_buf)?;
        while valid {
            let Some((commit_ts, write)) =
                parse_version(key.as_encoded(), cursor.key(), cursor.value())?
            else {
                break;
            };
            if let ControlFlow::Break(found) = visit(commit_ts, write)? {
                return Ok(Some(found));
            }
            stats.next += 1;
            valid = cursor.next()?;
        }
        Ok(None)
    }
}

impl<S: Snapshot> MvccReader<S> {
    /// Whether the forward write cursor proves that `key` has no record at
    /// or below the ts in `seek_buf` (the walk's seek target). Positions
    /// the cursor with one total-order seek the first time; after that it
    /// never moves, since stepping through other keys' versions to catch up
    /// costs more than the prefix-mode seek it would save.
    fn has_no_versions(&mut self, key: &Key) -> Result<bool> {
        let cursor = self
            .write_forward
            .cursor(&self.snapshot, Cf::Write, self.fill_cache)?;
        let target = self.seek_buf.as_slice();
        let valid = if cursor.positioned {
            if !cursor.settles(target)? {
                return Ok(false);
            }
            cursor.iter.valid()?
        } else {
            cursor.seek(target, &mut self.statistics.write)?
        };
        // Resting where a seek to the target would: on the key's first
        // record at or below the ts, on a later key, or at the end. (An
        // encoded key is self-delimiting: a stored key that starts with it
        // is one of its records, or corrupt, which the walk reports.)
        Ok(!valid || !cursor.iter.key().starts_with(key.as_encoded()))
    }
}

/// Most hidden entries one move of a forward cursor may pass before the
/// reader gives it up for point lookups. Small: the cursor only pays while
/// a move is a step or two.
pub(crate) const FORWARD_SKIP_LIMIT: u64 = 32;

/// How many steps a forward cursor takes towards a key before it seeks.
const NEAR_STEPS: usize = 2;

/// One CF's forward cursor in ascending mode: opened at the first lookup,
/// dropped for good when a move hits [`FORWARD_SKIP_LIMIT`].
struct Forward<I> {
    cursor: Option<ForwardCursor<I>>,
    disabled: bool,
}

impl<I> Default for Forward<I> {
    fn default() -> Self {
        Forward {
            cursor: None,
            disabled: false,
        }
    }
}

impl<I: EngineIterator> Forward<I> {
    fn disable(&mut self) {
        self.disabled = true;
        self.cursor = None;
    }

    fn cursor<S: Snapshot<Iter = I>>(
        &mut self,
        snapshot: &S,
        cf: Cf,
        fill_cache: bool,
    ) -> Result<&mut ForwardCursor<I>> {
        Ok(match &mut self.cursor {
            Some(cursor) => cursor,
            slot @ None => {
                let options = IterOptions::new()
                    .fill_cache(fill_cache)
                    .max_skipped(FORWARD_SKIP_LIMIT);
                slot.insert(ForwardCursor::new(snapshot.iter(cf, options)?))
            }
        })
    }
}

/// A total-order cursor for lookups of ascending keys.
///
/// Invariant: when `positioned`, the cursor rests on the first key `>=
/// low`, or is invalid when there is none. So for a target `t >= low`, a
/// cursor resting on a key `>= t` (or invalid) is exactly where a seek to
/// `t` would put it, and the lookup costs nothing.
struct ForwardCursor<I> {
    iter: I,
    low: Vec<u8>,
    positioned: bool,
}

impl<I: EngineIterator> ForwardCursor<I> {
    fn new(iter: I) -> Self {
        ForwardCursor {
            iter,
            low: Vec::new(),
            positioned: false,
        }
    }

    /// Whether the cursor rests where a seek to `target` would put it.
    fn settles(&self, target: &[u8]) -> Result<bool> {
        if !self.positioned || self.low.as_slice() > target {
            return Ok(false);
        }
        Ok(!self.iter.valid()? || self.iter.key() >= target)
    }

    /// Seeks to the first key `>= target`.
    fn seek(&mut self, target: &[u8], stats: &mut CfStatistics) -> Result<bool> {
        stats.seek += 1;
        // Unpositioned until the seek succeeds: a failed one (too many
        // hidden entries) leaves the cursor nowhere in particular.
        self.positioned = false;
        let valid = self.iter.seek(target)?;
        self.low.clear();
        self.low.extend_from_slice(target);
        self.positioned = true;
        Ok(valid)
    }

    /// Moves to the first key `>= target`: free when the cursor is there
    /// already, a step or two when it is just behind, a seek otherwise.
    fn near_seek(&mut self, target: &[u8], stats: &mut CfStatistics) -> Result<bool> {
        if self.positioned && self.low.as_slice() <= target {
            let mut valid = self.iter.valid()?;
            let mut steps = 0;
            loop {
                if !valid || self.iter.key() >= target {
                    if steps > 0 {
                        // Stepped from a key below `target` to the next
                        // one, which is `>= target` (or there is none).
                        self.low.clear();
                        self.low.extend_from_slice(target);
                    }
                    return Ok(valid);
                }
                if steps == NEAR_STEPS {
                    break;
                }
                steps += 1;
                stats.next += 1;
                self.positioned = false;
                valid = self.iter.next()?;
                self.positioned = true;
            }
        }
        self.seek(target, stats)
    }
}

fn parse_lock(key: &Key, bytes: &[u8]) -> Result<Lock> {
    Lock::parse(bytes).map_err(|e| Error::corruption(Cf::Lock, key.as_encoded(), e))
}

/// Splits a stored `encoded key + ts` of `cf`, reporting a key too short to
/// hold a ts as corruption.
pub(crate) fn split_stored_key(cf: Cf, stored: &[u8]) -> Result<(&[u8], TimeStamp)> {
    Key::split_on_ts_for(stored).map_err(|e| Error::corruption(cf, stored, e))
}

/// The record at a write-CF cursor position if it belongs to the user key
/// `key` (encoded).
pub(crate) fn parse_version<'a>(
    key: &[u8],
    stored_key: &[u8],
    value: &'a [u8],
) -> Result<Option<(TimeStamp, WriteRef<'a>)>> {
    let (user, commit_ts) = split_stored_key(Cf::Write, stored_key)?;
    if user != key {
        return Ok(None);
    }
    let write = WriteRef::parse(value).map_err(|e| Error::corruption(Cf::Write, stored_key, e))?;
    Ok(Some((commit_ts, write)))
}

thread_local! {
    /// The buffer a hinted read copies a record into, kept per thread so
    /// that a read allocates none for it.
    static RECORD_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// This thread's record buffer, taken for one read and given back (empty,
/// with its capacity) when dropped.
struct ScratchRecord(Vec<u8>);

impl ScratchRecord {
    fn take() -> Self {
        ScratchRecord(RECORD_BUF.with(std::cell::Cell::take))
    }
}

impl Drop for ScratchRecord {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.0);
        buf.clear();
        RECORD_BUF.with(|cell| cell.set(buf));
    }
}

#[cfg(test)]
mod tests {
    use percolate_engine::testing::temp_rocks_engine;
    use percolate_engine::{Engine, MemoryEngine, WriteOptions};
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::testing::{MvccFixture, ts};
    use crate::{MvccTxn, RollbackProtection};

    const KEYS: usize = 40;

    fn raw(i: usize) -> Vec<u8> {
        format!("k{i:03}").into_bytes()
    }

    /// Random histories on `KEYS` keys: committed Puts, Deletes, Lock and
    /// Rollback records at random ts, pending and released locks. Keys
    /// come in runs, so some neighbours have records and some have none.
    fn random_history<E: Engine>(f: &MvccFixture<E>, rng: &mut StdRng) {
        let mut next_ts = 1;
        for i in 0..KEYS {
            if rng.random_bool(0.4) {
                continue;
            }
            let k = raw(i);
            for _ in 0..rng.random_range(0..4) {
                let (start, commit) = (next_ts, next_ts + 1);
                next_ts += 2;
                match rng.random_range(0..5) {
                    0 => f.delete_committed(&k, start, commit),
                    1 => f.lock_committed(&k, start, commit),
                    2 => f.rollback(&k, start, RollbackProtection::Protected),
                    _ => f.put_committed(&k, format!("v{start}").as_bytes(), start, commit),
                }
            }
            if rng.random_bool(0.3) {
                // Pending, or prewritten and rolled back (a tombstone).
                f.prewrite_put(&k, b"pending", &k, next_ts);
                if rng.random_bool(0.5) {
                    f.rollback(&k, next_ts, RollbackProtection::Unprotected);
                }
                next_ts += 2;
            }
        }
    }

    /// The answers of the lookups actions make, key by key in `order`:
    /// a prewrite's two, then (`all`) those of other actions.
    fn lookups<S: Snapshot>(reader: &mut MvccReader<S>, order: &[usize], all: bool) -> Vec<String> {
        let mut out = Vec::new();
        for &i in order {
            let k = Key::from_raw(&raw(i));
            out.push(format!("{i} lock {:?}", reader.load_lock(&k)));
            if !all {
                out.push(format!(
                    "{i} newest {:?}",
                    reader.seek_write(&k, TimeStamp::max())
                ));
                continue;
            }
            out.push(format!(
                "{i} newest {:?}",
                reader.seek_write(&k, TimeStamp::max())
            ));
            out.push(format!("{i} at 30 {:?}", reader.seek_write(&k, ts(30))));
            out.push(format!(
                "{i} put 40 {:?}",
                reader.get_write(&k, ts(40), None)
            ));
            out.push(format!(
                "{i} record of 9 {:?}",
                reader.get_txn_commit_record(&k, ts(9))
            ));
            out.push(format!("{i} lock again {:?}", reader.load_lock(&k)));
        }
        out
    }

    fn ascending_answers_like_point_lookups<E: Engine>(
        engine: E,
        seed: u64,
        flush: impl FnOnce(&E),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let f = MvccFixture::new(engine);
        random_history(&f, &mut rng);
        flush(f.engine());
        let snapshot = f.engine().snapshot();
        let mut order: Vec<usize> = (0..KEYS).filter(|_| rng.random_bool(0.6)).collect();
        for all in [false, true] {
            let want = lookups(&mut MvccReader::new(snapshot.clone()), &order, all);
            let got = lookups(
                &mut MvccReader::new(snapshot.clone()).ascending(true),
                &order,
                all,
            );
            assert_eq!(got, want, "seed {seed}");
        }
        // Out of order (a broken promise) the answers stay exact.
        order.shuffle(&mut rng);
        let want = lookups(&mut MvccReader::new(snapshot.clone()), &order, true);
        let got = lookups(&mut MvccReader::new(snapshot).ascending(true), &order, true);
        assert_eq!(got, want, "seed {seed}, shuffled");
    }

    #[test]
    fn ascending_answers_like_point_lookups_on_memory() {
        for seed in 0..32 {
            ascending_answers_like_point_lookups(MemoryEngine::new(), seed, |_| {});
        }
    }

    #[test]
    fn ascending_answers_like_point_lookups_on_rocks() {
        for seed in 0..8 {
            // In memtables, and (odd seeds) in SSTs, where a flush has
            // dropped the locks hidden under tombstones.
            ascending_answers_like_point_lookups(temp_rocks_engine(), seed, |engine| {
                if seed % 2 == 1 {
                    engine.flush().unwrap();
                }
            });
        }
    }

    /// New keys above all data: one seek per CF answers every lookup of a
    /// prewrite, and a step reads each lock of a commit.
    #[test]
    fn ascending_new_keys_cost_one_seek_per_cf() {
        let f = MvccFixture::new(temp_rocks_engine());
        for i in 0..10 {
            f.put_committed(&raw(i), b"old", 1, 2);
        }
        let fresh: Vec<Key> = (100..110).map(|i| Key::from_raw(&raw(i))).collect();
        let mut reader = MvccReader::new(f.engine().snapshot()).ascending(true);
        for k in &fresh {
            assert_eq!(reader.load_lock(k).unwrap(), None);
            assert_eq!(reader.seek_write(k, TimeStamp::max()).unwrap(), None);
        }
        let stats = *reader.statistics();
        assert_eq!((stats.lock.get, stats.lock.seek), (0, 1));
        assert_eq!((stats.write.seek, stats.write.next), (1, 0));

        for i in 100..110 {
            f.prewrite_put(&raw(i), b"new", &raw(100), 5);
        }
        let mut reader = MvccReader::new(f.engine().snapshot()).ascending(true);
        for k in &fresh {
            assert_eq!(reader.load_lock(k).unwrap().map(|l| l.ts), Some(ts(5)));
        }
        let stats = reader.statistics().lock;
        assert_eq!((stats.get, stats.seek, stats.next), (0, 1, 9));
    }

    /// A lock CF full of tombstones of released locks (and a write CF
    /// with deleted records): the forward cursors give up at their skip
    /// limit and the reader answers with point lookups, correctly.
    #[test]
    fn ascending_gives_up_on_tombstones() {
        let f = MvccFixture::new(temp_rocks_engine());
        let tombstones = 4 * FORWARD_SKIP_LIMIT as usize;
        let mut txn = MvccTxn::new(ts(1));
        for i in 0..tombstones {
            f.prewrite_put(&raw(i), b"v", &raw(i), 1);
            txn.unlock_key(Key::from_raw(&raw(i)));
            f.put_committed(&raw(i), b"v", 3, 4);
            txn.delete_write(Key::from_raw(&raw(i)), ts(4));
        }
        f.engine()
            .write(&txn.into_write_batch(), WriteOptions::default())
            .unwrap();
        let last = raw(tombstones);
        f.put_committed(&last, b"v", 5, 6);
        f.prewrite_put(&last, b"w", &last, 7);

        let mut reader = MvccReader::new(f.engine().snapshot()).ascending(true);
        for i in 0..tombstones {
            let k = Key::from_raw(&raw(i));
            assert_eq!(reader.load_lock(&k).unwrap(), None, "{i}");
            assert_eq!(
                reader.seek_write(&k, TimeStamp::max()).unwrap(),
                None,
                "{i}"
            );
        }
        let k = Key::from_raw(&last);
        assert_eq!(reader.load_lock(&k).unwrap().map(|l| l.ts), Some(ts(7)));
        assert_eq!(
            reader
                .seek_write(&k, TimeStamp::max())
                .unwrap()
                .map(|(c, _)| c),
            Some(ts(6))
        );
        let stats = *reader.statistics();
        assert!(reader.lock_forward.disabled && reader.write_forward.disabled);
        // After one failed seek, point lookups.
        assert_eq!((stats.lock.get, stats.lock.seek), (tombstones + 1, 1));
    }
}
