//! Range reads at one timestamp, forwards ([`forward`]) or backwards
//! ([`backward`]).
//!
//! A scanner reads the write CF and the lock CF of its range in chunks (see
//! `ScannerCore`): the newest visible Put/Delete of each user key, then
//! the locks of the key range the chunk spans, merged by key, each lock
//! judged by the lock rule. A key locked by a pending transaction is
//! reported as its own `KeyIsLocked` error and the scan goes on past it: a
//! caller gets every readable pair plus the list of locks to resolve, in
//! one pass.

mod backward;
mod forward;

use std::collections::VecDeque;
use std::ops::ControlFlow;

use percolate_engine::{Cf, EngineIterator, IterOptions, Snapshot};

use super::{
    IsolationLevel, LockDecision, LockPolicy, MvccReader, Statistics, TsSet, check_lock_conflict,
    check_rc_newer_write,
};
use crate::{Error, Key, Lock, LockType, Result, TimeStamp};

use backward::BackwardScanner;
use forward::ForwardScanner;

/// How many `next`/`prev` steps a scanner takes over versions of one key
/// before it gives up stepping and seeks. Small in tests so that the seek
/// path runs in ordinary scenarios.
const SEEK_BOUND: usize = if cfg!(test) { 2 } else { 8 };

/// A key and its value, as a scan returns them.
pub type KvPair = (Key, Vec<u8>);

/// What a visiting scan hands each pair to: the key and the value, lent
/// (the encoded key at this layer, [`Scanner::visit`]; the raw key where
/// the client visits); it returns [`ControlFlow::Break`] to stop the
/// scan.
pub type PairVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// Builds a [`Scanner`].
#[must_use]
pub struct ScannerBuilder<S: Snapshot> {
    snapshot: S,
    config: ScanConfig,
}

/// What a scan reads and how.
#[derive(Clone, Debug)]
struct ScanConfig {
    ts: TimeStamp,
    policy: LockPolicy,
    lower_bound: Option<Key>,
    upper_bound: Option<Key>,
    reverse: bool,
    key_only: bool,
    fill_cache: bool,
    /// The lock CF is not read (see [`ScannerBuilder::skip_lock_cf`]).
    skip_lock_cf: bool,
}

impl<S: Snapshot> ScannerBuilder<S> {
    /// A scanner over `snapshot` reading at `ts`.
    pub fn new(snapshot: S, ts: TimeStamp) -> Self {
        ScannerBuilder {
            snapshot,
            config: ScanConfig {
                ts,
                policy: LockPolicy::default(),
                lower_bound: None,
                upper_bound: None,
                reverse: false,
                key_only: false,
                fill_cache: true,
                skip_lock_cf: false,
            },
        }
    }

    /// The user-key range: `lower` inclusive, `upper` exclusive, whatever
    /// the direction. Defaults to unbounded on both sides.
    pub fn range(mut self, lower: Option<Key>, upper: Option<Key>) -> Self {
        self.config.lower_bound = lower;
        self.config.upper_bound = upper;
        self
    }

    /// Whether to scan from the upper bound down. Defaults to false.
    pub fn reverse(mut self, reverse: bool) -> Self {
        self.config.reverse = reverse;
        self
    }

    /// Whether to return keys with empty values, never reading the default
    /// CF. Defaults to false.
    pub fn key_only(mut self, key_only: bool) -> Self {
        self.config.key_only = key_only;
        self
    }

    /// Defaults to [`IsolationLevel::Si`].
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.config.policy.isolation_level = level;
        self
    }

    /// Transactions whose locks are ignored. Defaults to none.
    pub fn bypass_locks(mut self, locks: TsSet) -> Self {
        self.config.policy.bypass_locks = locks;
        self
    }

    /// Transactions known to have committed, whose pending values are read
    /// where their locks would block. Defaults to none.
    pub fn access_locks(mut self, locks: TsSet) -> Self {
        self.config.policy.access_locks = locks;
        self
    }

    /// Whether blocks read enter the block cache. Defaults to true.
    pub fn fill_cache(mut self, fill_cache: bool) -> Self {
        self.config.fill_cache = fill_cache;
        self
    }

    /// Reads no lock from the lock CF, as at RC, but keeps the read's
    /// isolation level otherwise. For a caller that found the lock CF
    /// empty after raising the region's max_ts to the read ts and checking
    /// the in-memory locks, and before taking the snapshot: any lock the
    /// snapshot holds was written after that, by a transaction that
    /// commits above the read ts (a 2PC commit_ts comes from the oracle
    /// after its prewrite answers; an async-commit or 1PC prewrite that had
    /// not yet put its keys in the memory-lock table reads a max_ts at
    /// least the read ts). For the same reason such a scanner may read a
    /// latest view (`Engine::latest`) rather than a snapshot: its write
    /// cursor sees a moment after the check. Defaults to false.
    pub fn skip_lock_cf(mut self, skip: bool) -> Self {
        self.config.skip_lock_cf = skip;
        self
    }

    /// The scanner.
    pub fn build(self) -> Result<Scanner<S>> {
        let inner = ScannerCore::new(self.snapshot, self.config)?;
        Ok(if inner.config.reverse {
            Scanner::Backward(BackwardScanner::new(inner))
        } else {
            Scanner::Forward(ForwardScanner::new(inner))
        })
    }
}

/// A range read at one timestamp.
#[non_exhaustive]
pub enum Scanner<S: Snapshot> {
    /// Ascending keys.
    Forward(ForwardScanner<S>),
    /// Descending keys.
    Backward(BackwardScanner<S>),
}

impl<S: Snapshot> Scanner<S> {
    /// The next visible pair. A `KeyIsLocked` (or, at RcCheckTs,
    /// `WriteConflict`) error concerns one key only: the scanner has already
    /// moved past it and the next call goes on. Other errors end the scan.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<KvPair>> {
        match self {
            Scanner::Forward(s) => s.next(),
            Scanner::Backward(s) => s.next(),
        }
    }

    /// Up to `limit` entries (0 = no limit): pairs, and one `KeyIsLocked`
    /// entry per locked key, each counting toward the limit. Any other error
    /// fails the whole scan.
    pub fn scan(&mut self, limit: usize) -> Result<Vec<Result<KvPair>>> {
        let mut out = Vec::new();
        while limit == 0 || out.len() < limit {
            // Read ahead no further than the limit asks.
            self.core_mut().wanted = limit.saturating_sub(out.len());
            match self.next() {
                Ok(Some(pair)) => out.push(Ok(pair)),
                Ok(None) => break,
                Err(e @ Error::KeyIsLocked(_)) => out.push(Err(e)),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Hands up to `limit` pairs (0 = no limit) to `visit` in scan order,
    /// as slices of the scanner's own buffers: the encoded key and the
    /// value. Nothing is copied out, so a short scan allocates nothing per
    /// pair. Stops early where `visit` breaks.
    ///
    /// A key locked by a pending transaction stops the visit before it:
    /// the pairs after it are not visited, and the locks of the chunk in
    /// hand are returned, the first one the key where the visit stopped
    /// (resolve them and scan again from it), as far as [`scan`](Self::scan)
    /// would have gone with the same limit (its limit counts locks and
    /// pairs alike). The scanner is then finished: later calls return
    /// nothing. An empty list: the visit ended at the limit, at the end of
    /// the range, or where `visit` broke. Any other error fails the visit.
    pub fn visit(
        &mut self,
        limit: usize,
        mut visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<Vec<Error>> {
        self.core_mut().visit(limit, &mut visit)
    }

    fn core_mut(&mut self) -> &mut ScannerCore<S> {
        match self {
            Scanner::Forward(s) => &mut s.core,
            Scanner::Backward(s) => &mut s.core,
        }
    }

    /// Engine operations made so far.
    pub fn statistics(&self) -> Statistics {
        let core = match self {
            Scanner::Forward(s) => &s.core,
            Scanner::Backward(s) => &s.core,
        };
        let mut total = core.statistics;
        let reader = core.reader.statistics();
        total.data.get += reader.data.get;
        total.write.seek += reader.write.seek;
        total.write.next += reader.write.next;
        total
    }
}

/// Keys a scanner reads ahead per chunk when its caller gave no hint (the
/// first chunk; each next one doubles, up to [`MAX_CHUNK`]).
const FIRST_CHUNK: usize = if cfg!(test) { 2 } else { 16 };

/// The most user keys one chunk reads.
const MAX_CHUNK: usize = if cfg!(test) { 8 } else { 1024 };

/// A byte range of a scanner's arena.
type Span = std::ops::Range<usize>;

/// What the write CF says a key's value is at the read ts, before its lock
/// is judged. A long value is only located, not loaded: a lock may decide
/// that the committed value is not the one to return.
enum Committed {
    /// Deleted, never written at or below the read ts, or fenced off by GC.
    Nothing,
    /// An inlined value, in the arena (empty in a key-only scan).
    Value(Span),
    /// A long value in the default CF, written by this start_ts.
    Long(TimeStamp),
    /// An error about this key only (RcCheckTs found newer data).
    Failed(Box<Error>),
}

/// A lock as the lock CF holds it: the encoded key and the record's bytes.
type RawLock = (Vec<u8>, Vec<u8>);

/// A user key of a chunk (in the arena) and what the write CF says of it.
struct ChunkKey {
    key: Span,
    committed: Committed,
}

/// A merged entry waiting to be handed out. Keys and inlined values stay in
/// the arena until then: a chunk holds hundreds of them, and copying each
/// out only when it is handed out keeps the allocator on its fast path.
enum Entry {
    /// A key and value in the arena.
    InArena { key: Span, value: Span },
    /// A pair read from elsewhere (a lock's value, a long value).
    Owned(KvPair),
    /// A per-key error.
    Failed(Box<Error>),
}

/// State shared by both directions.
///
/// # Chunks
///
/// A scan reads its range in chunks. The write cursor visits up to a chunk's
/// worth of user keys and finds each one's committed value; then one lock-CF
/// cursor, bounded to exactly the key range those keys span, lists the
/// locks there, and the two are merged: a key's lock, where it has one, is
/// judged by the lock rule before its committed value counts. The merged
/// entries wait in a buffer for [`Scanner::next`] to hand out; a chunk
/// whose range holds no lock (the common case) is handed out as it was
/// read, without the copy into the buffer.
///
/// The lock cursor's bounds are what make this cheap. A lock CF holds a
/// tombstone for every lock a commit or rollback released, until compaction
/// drops them; a cursor over the whole remaining range steps over every
/// tombstone up to the next live lock, which for a short scan of a busy
/// region means every tombstone to the region's end. Bounded by the chunk,
/// it steps over the tombstones of the keys the scan reads anyway.
struct ScannerCore<S: Snapshot> {
    config: ScanConfig,
    write: S::Iter,
    reader: MvccReader<S>,
    statistics: Statistics,
    started: bool,
    /// Entries merged but not handed out yet, in scan order, after those
    /// of `ready`.
    buffer: VecDeque<Entry>,
    /// A chunk met no lock: its keys, handed out from `ready_at` on as
    /// they are (each key's entry is what the write CF said of it), before
    /// anything in `buffer`.
    ready: Vec<ChunkKey>,
    /// The next key of `ready` to hand out.
    ready_at: usize,
    /// The keys of the chunk being read (kept for its allocation).
    chunk: Vec<ChunkKey>,
    /// The keys and inlined values of the chunk and of the buffer, which
    /// is empty whenever a chunk starts.
    arena: Vec<u8>,
    /// A key buffer reused from key to key.
    scratch: Key,
    /// Where the next chunk's lock range starts (forward: its inclusive
    /// lower bound; backward: its exclusive upper bound). `None`: the
    /// scan's own bound.
    resume: Option<Vec<u8>>,
    /// Nothing is left to read: every chunk is merged, or a cursor failed.
    done: bool,
    /// Entries the caller still wants (0: no hint).
    wanted: usize,
    /// The size of the last chunk read without a hint.
    last_chunk: usize,
}

/// Arena bytes reserved per key a chunk visits: a short key and an
/// inlined value. Longer rows grow the arena as they come.
const ARENA_BYTES_PER_KEY: usize = 128;

impl<S: Snapshot> ScannerCore<S> {
    fn new(snapshot: S, config: ScanConfig) -> Result<Self> {
        let mut options = IterOptions::new().fill_cache(config.fill_cache);
        options.lower_bound = config.lower_bound.as_ref().map(|k| k.as_encoded().clone());
        options.upper_bound = config.upper_bound.as_ref().map(|k| k.as_encoded().clone());
        let write = snapshot.iter(Cf::Write, options)?;
        Ok(ScannerCore {
            reader: MvccReader::new(snapshot).fill_cache(config.fill_cache),
            config,
            write,
            statistics: Statistics::default(),
            started: false,
            buffer: VecDeque::new(),
            ready: Vec::new(),
            ready_at: 0,
            chunk: Vec::new(),
            arena: Vec::new(),
            scratch: Key::from_encoded(Vec::new()),
            resume: None,
            done: false,
            wanted: 0,
            last_chunk: 0,
        })
    }

    /// User keys the next chunk visits: what the caller still wants (plus
    /// one, for a key that turns out deleted), or a doubling size.
    fn chunk_keys(&mut self) -> usize {
        if self.wanted > 0 {
            return self.wanted.saturating_add(1).min(MAX_CHUNK);
        }
        self.last_chunk = if self.last_chunk == 0 {
            FIRST_CHUNK
        } else {
            (self.last_chunk * 2).min(MAX_CHUNK)
        };
        self.last_chunk
    }

    /// The next entry: from the buffer, reading chunks while it is empty
    /// and something is left. A failed chunk ends the scan.
    fn next_entry(&mut self) -> Result<Option<KvPair>> {
        loop {
            match self.pop_entry() {
                Some(Entry::InArena { key, value }) => {
                    let key = Key::from_encoded(self.arena[key].to_vec());
                    return Ok(Some((key, self.arena[value].to_vec())));
                }
                Some(Entry::Owned(pair)) => return Ok(Some(pair)),
                Some(Entry::Failed(e)) => return Err(*e),
                None => {}
            }
            if self.done {
                return Ok(None);
            }
            if let Err(e) = self.fill() {
                self.done = true;
                return Err(e);
            }
        }
    }

    /// See [`Scanner::visit`].
    fn visit(&mut self, limit: usize, visit: &mut PairVisitor<'_>) -> Result<Vec<Error>> {
        let mut visited = 0;
        while limit == 0 || visited < limit {
            self.wanted = limit.saturating_sub(visited);
            let Some(entry) = self.pop_entry() else {
                if self.done {
                    break;
                }
                if let Err(e) = self.fill() {
                    self.done = true;
                    return Err(e);
                }
                continue;
            };
            let flow = match entry {
                Entry::InArena { key, value } => visit(&self.arena[key], &self.arena[value]),
                Entry::Owned((key, value)) => visit(key.as_encoded(), &value),
                Entry::Failed(e) if matches!(*e, Error::KeyIsLocked(_)) => {
                    let room = if limit == 0 {
                        usize::MAX
                    } else {
                        limit - visited
                    };
                    return Ok(self.locks_in_hand(*e, room));
                }
                Entry::Failed(e) => return Err(*e),
            };
            visited += 1;
            if flow.is_break() {
                break;
            }
        }
        Ok(Vec::new())
    }

    /// `first` and the other locks of the chunk in hand, in scan order,
    /// among the first `room` entries from `first` on (pairs and locks
    /// alike, as `scan` counts them), up to the first other failure; the
    /// scan ends here.
    fn locks_in_hand(&mut self, first: Error, room: usize) -> Vec<Error> {
        self.done = true;
        // Locks come through the buffer only (`ready` holds a chunk without
        // any), so none is left there.
        debug_assert!(self.ready_at == self.ready.len());
        let mut locks = vec![first];
        for entry in self.buffer.drain(..).take(room - 1) {
            match entry {
                Entry::Failed(e) if matches!(*e, Error::KeyIsLocked(_)) => locks.push(*e),
                Entry::Failed(_) => break,
                _ => {}
            }
        }
        self.buffer.clear();
        locks
    }

    /// Reads the next chunk: the committed values of up to a chunk's worth
    /// of user keys in scan order, then the locks of the key range from
    /// where the last chunk ended to the last of these keys (to the end of
    /// the scan's range when the write cursor ran out), merged into the
    /// buffer.
    fn fill(&mut self) -> Result<()> {
        let reverse = self.config.reverse;
        if !self.started {
            self.started = true;
            self.statistics.write.seek += 1;
            if reverse {
                self.write.seek_to_last()?;
            } else {
                self.write.seek_to_first()?;
            }
        }
        self.arena.clear();
        let wanted = self.chunk_keys();
        // Room for a chunk of short rows at once, rather than a dozen
        // doublings from empty on a scan's first chunk.
        self.arena
            .reserve(wanted.saturating_mul(ARENA_BYTES_PER_KEY));
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.clear();
        // A new scanner's first chunk, or a larger one: room for all its
        // keys at once, not a doubling per few keys.
        chunk.reserve(wanted);
        let mut failure = self.read_chunk(&mut chunk, wanted);
        let mut exhausted = failure.is_none() && chunk.len() < wanted;
        let mut edge = self.chunk_edge(&chunk, exhausted);
        let locks = if exhausted || !chunk.is_empty() {
            let (lower, upper) = if reverse {
                (edge.clone(), self.resume.clone())
            } else {
                (self.resume.clone(), edge.clone())
            };
            let (locks, full) = self.locks_in(lower, upper, MAX_CHUNK)?;
            if full {
                // More locks than a chunk takes (a large transaction's
                // locks on keys without data, say): end the chunk at the
                // last lock taken and read on from there next time.
                let last = locks.last().map(|(key, _)| key.clone()).expect("full");
                edge = Some(self.cut_chunk(&mut chunk, &last)?);
                exhausted = false;
                failure = None;
            }
            locks
        } else {
            Vec::new()
        };
        self.resume = edge;
        self.merge(chunk, locks)?;
        if let Some(e) = failure {
            self.buffer.push_back(Entry::Failed(Box::new(e)));
            self.done = true;
        } else if exhausted {
            self.done = true;
        }
        Ok(())
    }

    /// Reads up to `wanted` user keys with their committed values into
    /// `chunk`, in scan order; a key's own failure (see `is_per_key`) is
    /// kept as its entry. Returns the failure that ends the chunk early.
    fn read_chunk(&mut self, chunk: &mut Vec<ChunkKey>, wanted: usize) -> Option<Error> {
        while chunk.len() < wanted {
            match self.step() {
                Ok(None) => break,
                Ok(Some((key, Ok(committed)))) => chunk.push(ChunkKey { key, committed }),
                Ok(Some((key, Err(e)))) if Self::is_per_key(&e) => chunk.push(ChunkKey {
                    key,
                    committed: Committed::Failed(Box::new(e)),
                }),
                Ok(Some((_, Err(e)))) | Err(e) => return Some(e),
            }
        }
        None
    }

    /// Where this chunk's lock range ends and the next one's begins: just
    /// past the last key going forward, at it going backward; the end of
    /// the scan's range (`None`) when nothing is left to read; and, after a
    /// failure before the first key, where it began (no range at all).
    fn chunk_edge(&self, chunk: &[ChunkKey], exhausted: bool) -> Option<Vec<u8>> {
        match chunk.last() {
            _ if exhausted => None,
            Some(last) => {
                let mut edge = self.arena[last.key.clone()].to_vec();
                if !self.config.reverse {
                    edge.push(0);
                }
                Some(edge)
            }
            None => self.resume.clone(),
        }
    }

    /// Drops the keys of `chunk` past `last_lock` in scan order and puts the
    /// write cursor back on the first of them (the first record past every
    /// version of `last_lock`), so that the next chunk reads them again.
    /// Returns the chunk's new edge.
    fn cut_chunk(&mut self, chunk: &mut Vec<ChunkKey>, last_lock: &[u8]) -> Result<Vec<u8>> {
        let reverse = self.config.reverse;
        chunk.retain(|k| {
            let key = &self.arena[k.key.clone()];
            if reverse {
                key >= last_lock
            } else {
                key <= last_lock
            }
        });
        self.statistics.write.seek += 1;
        if reverse {
            // The encoded key alone sorts before `key@ts` for every ts.
            self.write.seek_for_prev(last_lock)?;
            Ok(last_lock.to_vec())
        } else {
            // `key@0` is the last position a version of `key` can take.
            let mut past = Key::from_encoded(last_lock.to_vec())
                .append_ts(TimeStamp::zero())
                .into_encoded();
            past.push(0);
            self.write.seek(&past)?;
            let mut edge = last_lock.to_vec();
            edge.push(0);
            Ok(edge)
        }
    }

    /// Visits the user key under the write cursor: its key (in the arena)
    /// and what the write CF says of it, the cursor left on the next key in
    /// scan order. `None` past the last key; `Err` when the cursor failed.
    fn step(&mut self) -> Result<Option<(Span, Result<Committed>)>> {
        let Some((user, first_ts)) = Self::write_head(&self.write)? else {
            return Ok(None);
        };
        let key = Self::stash(&mut self.arena, user);
        let visited = if self.config.reverse {
            let user = self.take_scratch(key.clone());
            let visited = self.read_key_backward(&user);
            self.scratch = user;
            visited
        } else {
            Ok(self.read_key(key.clone(), first_ts))
        };
        Ok(Some((key, visited?)))
    }

    /// The user key and commit_ts of the record under the write cursor.
    fn write_head(write: &S::Iter) -> Result<Option<(&[u8], TimeStamp)>> {
        if !write.valid()? {
            return Ok(None);
        }
        super::mvcc_reader::split_stored_key(Cf::Write, write.key()).map(Some)
    }

    /// Copies `bytes` to the end of the arena.
    fn stash(arena: &mut Vec<u8>, bytes: &[u8]) -> Span {
        let start = arena.len();
        arena.extend_from_slice(bytes);
        start..arena.len()
    }

    /// Sets the scratch key to the arena's `span` and takes it out (give
    /// it back with `self.scratch = key`).
    fn take_scratch(&mut self, span: Span) -> Key {
        let mut buf =
            std::mem::replace(&mut self.scratch, Key::from_encoded(Vec::new())).into_encoded();
        buf.clear();
        buf.extend_from_slice(&self.arena[span]);
        Key::from_encoded(buf)
    }

    /// The locks with a key in `[lower, upper)` (the scan's own bound where
    /// `None`), in scan order, read through one cursor bounded to that
    /// range: at most `most` of them, and whether more are left. Nothing at
    /// RC, which never reads the lock CF, or when told to skip it.
    fn locks_in(
        &mut self,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        most: usize,
    ) -> Result<(Vec<RawLock>, bool)> {
        if self.config.policy.isolation_level == IsolationLevel::Rc || self.config.skip_lock_cf {
            return Ok((Vec::new(), false));
        }
        let mut options = IterOptions::new().fill_cache(self.config.fill_cache);
        options.lower_bound = lower.or_else(|| {
            self.config
                .lower_bound
                .as_ref()
                .map(|k| k.as_encoded().clone())
        });
        options.upper_bound = upper.or_else(|| {
            self.config
                .upper_bound
                .as_ref()
                .map(|k| k.as_encoded().clone())
        });
        if let (Some(lower), Some(upper)) = (&options.lower_bound, &options.upper_bound) {
            if lower >= upper {
                return Ok((Vec::new(), false));
            }
        }
        let reverse = self.config.reverse;
        let mut cursor = self.reader.snapshot().iter(Cf::Lock, options)?;
        self.statistics.lock.seek += 1;
        let mut locks = Vec::new();
        let mut valid = if reverse {
            cursor.seek_to_last()?
        } else {
            cursor.seek_to_first()?
        };
        while valid {
            if locks.len() == most {
                return Ok((locks, true));
            }
            locks.push((cursor.key().to_vec(), cursor.value().to_vec()));
            self.statistics.lock.next += 1;
            valid = if reverse {
                cursor.prev()?
            } else {
                cursor.next()?
            };
        }
        Ok((locks, false))
    }

    /// Merges a chunk of user keys (in scan order, with what the write CF
    /// says of each) with the locks of the range they span (in scan order)
    /// into the buffer.
    fn merge(&mut self, mut chunk: Vec<ChunkKey>, locks: Vec<RawLock>) -> Result<()> {
        if locks.is_empty() {
            // The common case, with nothing to interleave: the chunk is
            // handed out as it is (`fill` runs only once every entry before
            // it is out).
            debug_assert!(self.buffer.is_empty() && self.ready_at == self.ready.len());
            std::mem::swap(&mut self.ready, &mut chunk);
            self.ready_at = 0;
            chunk.clear();
            self.chunk = chunk;
            return Ok(());
        }
        let reverse = self.config.reverse;
        let mut locks = locks.into_iter().peekable();
        for ChunkKey { key, committed } in chunk.drain(..) {
            // Locks on keys without data, before this key in scan order.
            while let Some((lock_key, _)) = locks.peek() {
                let encoded = &self.arena[key.clone()];
                let before = if reverse {
                    lock_key.as_slice() > encoded
                } else {
                    lock_key.as_slice() < encoded
                };
                if !before {
                    break;
                }
                let (lock_key, bytes) = locks.next().expect("peeked");
                let lock_key = Key::from_encoded(lock_key);
                let entry = self.locked_value(&lock_key, &bytes, None);
                self.push_owned(lock_key, entry);
            }
            let own_lock = locks
                .next_if(|(lock_key, _)| lock_key.as_slice() == &self.arena[key.clone()])
                .map(|(_, bytes)| bytes);
            match own_lock {
                None => self.push_committed(key, committed),
                Some(bytes) => {
                    let owned = Key::from_encoded(self.arena[key].to_vec());
                    let entry = self.locked_value(&owned, &bytes, Some(committed));
                    self.push_owned(owned, entry);
                }
            }
        }
        // Locks past the last key (or, with no key, anywhere in the range).
        for (lock_key, bytes) in locks {
            let lock_key = Key::from_encoded(lock_key);
            let entry = self.locked_value(&lock_key, &bytes, None);
            self.push_owned(lock_key, entry);
        }
        self.chunk = chunk;
        Ok(())
    }

    /// The next entry to hand out: from `ready`, then from the buffer.
    fn pop_entry(&mut self) -> Option<Entry> {
        while let Some(ChunkKey { key, committed }) = self.ready.get_mut(self.ready_at) {
            self.ready_at += 1;
            match std::mem::replace(committed, Committed::Nothing) {
                Committed::Nothing => {}
                Committed::Value(value) => {
                    let key = key.clone();
                    return Some(Entry::InArena { key, value });
                }
                Committed::Failed(e) => return Some(Entry::Failed(e)),
                committed @ Committed::Long(_) => {
                    let owned = Key::from_encoded(self.arena[key.clone()].to_vec());
                    match self.committed_value(&owned, Some(committed)) {
                        Ok(Some(value)) => return Some(Entry::Owned((owned, value))),
                        Ok(None) => {}
                        Err(e) => return Some(Entry::Failed(Box::new(e))),
                    }
                }
            }
        }
        self.buffer.pop_front()
    }

    /// Buffers the entry of a chunk's key without a lock: what the write
    /// CF says of it.
    fn push_committed(&mut self, key: Span, committed: Committed) {
        match committed {
            Committed::Nothing => {}
            Committed::Value(value) => self.buffer.push_back(Entry::InArena { key, value }),
            Committed::Failed(e) => self.buffer.push_back(Entry::Failed(e)),
            committed @ Committed::Long(_) => {
                let owned = Key::from_encoded(self.arena[key].to_vec());
                let entry = self.committed_value(&owned, Some(committed));
                self.push_owned(owned, entry);
            }
        }
    }

    /// The entry of a key with a lock: the lock rule first, then the
    /// access lock's value or the committed one.
    fn locked_value(
        &mut self,
        key: &Key,
        lock: &[u8],
        committed: Option<Committed>,
    ) -> Result<Option<Vec<u8>>> {
        match self.judge_lock(key, lock)? {
            Some(lock) => self.value_from_lock(key, *lock),
            None => self.committed_value(key, committed),
        }
    }

    /// Buffers `key`'s entry, if it has one.
    fn push_owned(&mut self, key: Key, entry: Result<Option<Vec<u8>>>) {
        match entry {
            Ok(Some(value)) => self.buffer.push_back(Entry::Owned((key, value))),
            Ok(None) => {}
            Err(e) => self.buffer.push_back(Entry::Failed(Box::new(e))),
        }
    }

    /// Applies the lock rule to `key`'s lock. `Ok(Some(lock))` means: read
    /// this access lock's value.
    fn judge_lock(&self, key: &Key, bytes: &[u8]) -> Result<Option<Box<Lock>>> {
        let lock =
            Lock::parse(bytes).map_err(|e| Error::corruption(Cf::Lock, key.as_encoded(), e))?;
        match check_lock_conflict(lock, key, self.config.ts, &self.config.policy)? {
            LockDecision::Ignore => Ok(None),
            LockDecision::ReadLock(lock) => Ok(Some(lock)),
        }
    }

    /// The committed value the write CF gave for `key` (`None` when the key
    /// has no record there: only a lock brought it into the scan).
    fn committed_value(
        &mut self,
        key: &Key,
        committed: Option<Committed>,
    ) -> Result<Option<Vec<u8>>> {
        match committed {
            None | Some(Committed::Nothing) => Ok(None),
            Some(Committed::Value(value)) => Ok(Some(self.arena[value].to_vec())),
            Some(Committed::Long(start_ts)) => self.reader.load_long_value(key, start_ts).map(Some),
            Some(Committed::Failed(e)) => Err(*e),
        }
    }

    /// The value an access lock stands for (`None` for a Delete).
    fn value_from_lock(&mut self, key: &Key, lock: Lock) -> Result<Option<Vec<u8>>> {
        match lock.lock_type {
            LockType::Put if self.config.key_only => Ok(Some(Vec::new())),
            LockType::Put => match lock.short_value {
                Some(value) => Ok(Some(value)),
                None => self.reader.load_long_value(key, lock.ts).map(Some),
            },
            _ => Ok(None),
        }
    }

    /// Whether every record above the read ts must be looked at (RcCheckTs
    /// fails on newer data), which rules out seeking over them.
    fn checks_newer_writes(&self) -> bool {
        self.config.policy.isolation_level == IsolationLevel::RcCheckTs
    }

    /// What the write CF says of `key` at the read ts, by point lookup
    /// (used going backward).
    fn committed_at_ts(&mut self, key: &Key) -> Result<Committed> {
        let ts = self.config.ts;
        check_rc_newer_write(
            &mut self.reader,
            key,
            ts,
            self.config.policy.isolation_level,
        )?;
        Ok(match self.reader.get_write(key, ts, Some(ts))? {
            Some(_) if self.config.key_only => Committed::Value(0..0),
            Some(write) => match write.short_value {
                Some(value) => Committed::Value(Self::stash(&mut self.arena, &value)),
                None => Committed::Long(write.start_ts),
            },
            None => Committed::Nothing,
        })
    }

    /// Whether `e` concerns one key only (the scan goes on past it), rather
    /// than the state of the cursors.
    fn is_per_key(e: &Error) -> bool {
        matches!(e, Error::KeyIsLocked(_) | Error::WriteConflict { .. })
    }
}

#[cfg(test)]
mod tests {
    use percolate_engine::MemoryEngine;
    use percolate_engine::testing::temp_rocks_engine;

    use crate::TimeStamp;
    use crate::testing::{MvccFixture, scan_shown, show_entry, ts, visit_shown};
    use crate::{Key, Lock, LockType};

    /// With chunks of at most 8 keys and 8 locks (the test sizes), scans
    /// over keys with data, runs of locks on keys without data (longer than
    /// a chunk takes), locks of every outcome (blocking, ignored, read
    /// through as an access lock) and released locks agree with point gets
    /// of every key, in both directions and at several limits.
    fn scans_cut_chunks_at_the_lock_limit<E: percolate_engine::Engine>(f: MvccFixture<E>) {
        let key = |i: usize| format!("k{i:03}").into_bytes();
        for i in (0..120).step_by(3) {
            f.put_committed(&key(i), format!("v{i}").as_bytes(), 10, 11);
        }
        // A large transaction's locks on keys without data: 20 in a row.
        for i in 40..80 {
            if i % 3 != 0 {
                f.prewrite_put(&key(i), b"pending", &key(40), 20);
            }
        }
        // Locks above the read ts, Lock-type locks, and an access lock.
        f.prewrite_put(&key(90), b"later", &key(90), 500);
        f.prewrite_lock_only(&key(91), &key(91), 30);
        f.put_lock(
            &key(93),
            Lock::new(LockType::Delete, key(93), ts(25), 3000),
            None,
        );
        let read_ts = ts(100);
        let expected: Vec<String> = (0..130)
            .filter_map(|i| match f.get(&key(i), read_ts) {
                Ok(Some(v)) => Some(show_entry(Ok((Key::from_raw(&key(i)), v)))),
                Ok(None) => None,
                Err(e) => Some(show_entry(Err(e))),
            })
            .collect();
        assert!(expected.iter().filter(|e| e.contains("=locked@")).count() > 20);
        for reverse in [false, true] {
            let mut want = expected.clone();
            if reverse {
                want.reverse();
            }
            for limit in [0, 1, 5, 9, 14, 15, 16, 30, 200] {
                let got = scan_shown(f.scanner(read_ts).reverse(reverse), limit);
                let mut truncated = want.clone();
                if limit > 0 {
                    truncated.truncate(limit);
                }
                assert_eq!(got, truncated, "reverse {reverse}, limit {limit}");
                check_visit(&f, read_ts, reverse, limit, &want);
            }
        }
    }

    /// A visit of the scan sees the pairs of `all` (the whole scan,
    /// shown) up to `limit` of them or to the first lock, and then returns
    /// that lock first and after it a prefix of the locks among the
    /// scan's first `limit` entries (pairs and locks alike), in order.
    fn check_visit<E: percolate_engine::Engine>(
        f: &MvccFixture<E>,
        read_ts: TimeStamp,
        reverse: bool,
        limit: usize,
        all: &[String],
    ) {
        let (pairs, locks) = visit_shown(f.scanner(read_ts).reverse(reverse), limit);
        let locked = |e: &&String| e.contains("=locked@");
        let first_lock = all.iter().position(|e| locked(&e)).unwrap_or(all.len());
        let mut want = all[..first_lock].to_vec();
        if limit > 0 {
            want.truncate(limit);
        }
        let what = format!("visit, reverse {reverse}, limit {limit}");
        assert_eq!(pairs, want, "{what}");
        let end = if limit == 0 { all.len() } else { limit };
        if want.len() == first_lock && first_lock < end {
            let in_limit: Vec<&String> = all[first_lock..end.min(all.len())]
                .iter()
                .filter(locked)
                .collect();
            assert!(!locks.is_empty(), "{what}");
            assert!(locks.len() <= in_limit.len(), "{what}: {locks:?}");
            let prefix: Vec<&String> = locks.iter().collect();
            assert_eq!(prefix, in_limit[..locks.len()], "{what}");
        } else {
            assert!(locks.is_empty(), "{what}: {locks:?}");
        }
    }

    /// Told to skip the lock CF, a scan reads no lock (none is reported,
    /// and the lock CF is never touched) and otherwise reads as it would.
    fn scans_told_to_skip_the_lock_cf_read_none<E: percolate_engine::Engine>(f: MvccFixture<E>) {
        let key = |i: usize| format!("k{i}").into_bytes();
        for i in 0..4 {
            f.put_committed(&key(i), b"v", 10, 11);
        }
        f.prewrite_put(&key(2), b"pending", &key(2), 20);
        let checked = scan_shown(f.scanner(ts(100)), 0);
        assert!(
            checked.iter().any(|e| e.contains("=locked@")),
            "{checked:?}"
        );
        let mut skipping = f.scanner(ts(100)).skip_lock_cf(true).build().unwrap();
        let pairs = skipping.scan(0).unwrap();
        assert_eq!(pairs.len(), 4);
        assert!(pairs.iter().all(Result::is_ok));
        assert_eq!(skipping.statistics().lock.total(), 0);
    }

    #[test]
    fn scans_told_to_skip_the_lock_cf_read_none_memory() {
        scans_told_to_skip_the_lock_cf_read_none(MvccFixture::new(MemoryEngine::new()));
    }

    #[test]
    fn scans_told_to_skip_the_lock_cf_read_none_rocks() {
        scans_told_to_skip_the_lock_cf_read_none(MvccFixture::new(temp_rocks_engine()));
    }

    #[test]
    fn scans_cut_chunks_at_the_lock_limit_memory() {
        scans_cut_chunks_at_the_lock_limit(MvccFixture::new(MemoryEngine::new()));
    }

    #[test]
    fn scans_cut_chunks_at_the_lock_limit_rocks() {
        scans_cut_chunks_at_the_lock_limit(MvccFixture::new(temp_rocks_engine()));
    }
}
