//! Streaming range reads: [`Scan`], the iterator behind
//! [`Transaction::scan`](super::Transaction::scan),
//! [`Snapshot::scan`](super::Snapshot::scan) and their reverse and key-only
//! forms.
//!
//! A scan reads the snapshot a batch at a time, region after region, and
//! holds one batch at once: a scan over a million keys costs the memory of
//! a batch, not of the range. A transaction's own buffered writes are
//! merged in as the scan passes them (its puts added or put over the
//! snapshot's value, its deletes hiding the snapshot's pair).

use std::cmp::Ordering;
use std::collections::btree_map;
use std::ops::{Bound, ControlFlow, RangeBounds};

use percolate_engine::{Engine, RocksEngine};
use percolate_mvcc::{PairVisitor, TimeStamp};

use super::Inner;
use super::transaction::Op;
use crate::Result;

/// Pairs the first storage read of a scan fetches by default; each later
/// read fetches twice as many as the one before, up to
/// [`MAX_BATCH`].
pub const FIRST_BATCH: usize = 32;

/// The most pairs one storage read of a scan fetches, unless
/// [`Scan::batch_size`] says otherwise.
pub const MAX_BATCH: usize = 1024;

/// A byte range as the storage reads it: an inclusive start (empty: from
/// the first key) and an exclusive end (`None`: to the last key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ByteRange {
    pub(crate) start: Vec<u8>,
    pub(crate) end: Option<Vec<u8>>,
}

impl ByteRange {
    /// The range `range` covers, whatever its bound kinds: the key right
    /// after `k` is `k` followed by a zero byte.
    pub(crate) fn new<K: AsRef<[u8]>>(range: impl RangeBounds<K>) -> ByteRange {
        let after = |k: &[u8]| {
            let mut next = Vec::with_capacity(k.len() + 1);
            next.extend_from_slice(k);
            next.push(0);
            next
        };
        let start = match range.start_bound() {
            Bound::Included(k) => k.as_ref().to_vec(),
            Bound::Excluded(k) => after(k.as_ref()),
            Bound::Unbounded => Vec::new(),
        };
        let end = match range.end_bound() {
            Bound::Included(k) => Some(after(k.as_ref())),
            Bound::Excluded(k) => Some(k.as_ref().to_vec()),
            Bound::Unbounded => None,
        };
        ByteRange { start, end }
    }

    /// Cuts off the part of the range up to `key` in scan order (`key`
    /// included): what is left after a scan returned `key`.
    fn after(&mut self, key: &[u8], reverse: bool) {
        if reverse {
            self.end = Some(key.to_vec());
        } else {
            self.start.clear();
            self.start.extend_from_slice(key);
            self.start.push(0);
        }
    }

    /// Whether no key is in the range.
    pub(crate) fn is_empty(&self) -> bool {
        self.end.as_ref().is_some_and(|end| *end <= self.start)
    }

    /// The range as `BTreeMap::range` takes it (which panics on a start
    /// past the end: check [`is_empty`](Self::is_empty) first).
    fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (
            Bound::Included(self.start.as_slice()),
            self.end
                .as_deref()
                .map_or(Bound::Unbounded, Bound::Excluded),
        )
    }
}

/// What a reader's scans read: its client, its read ts, and the writes of
/// its own to merge in.
pub(super) type ScanSource<'a, E> = (
    &'a Inner<E>,
    TimeStamp,
    Option<&'a btree_map::BTreeMap<Vec<u8>, Op>>,
    Option<crate::Error>,
);

/// The four range reads (`scan`, `scan_reverse`, `keys`, `keys_reverse`)
/// of a reader with a `scan_source()` method (its client, read ts and own
/// writes).
macro_rules! range_reads {
    () => {
        /// The pairs with keys in `range`, in key order (a transaction's
        /// own writes included): a lazy iterator that reads a batch at a
        /// time (see [`Scan`]).
        ///
        /// Any [`RangeBounds`] over byte keys: `"a".."m"`, `vec![1]..`,
        /// `&key[..]..=&end[..]`; the whole key space is
        /// `scan::<&[u8]>(..)`.
        pub fn scan<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Scan<'_, E> {
            self.scan_with(range, false, false)
        }

        /// Like [`scan`](Self::scan), from the end of the range down.
        pub fn scan_reverse<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Scan<'_, E> {
            self.scan_with(range, true, false)
        }

        /// The keys in `range`, in key order (a transaction's own writes
        /// included): a key-only [`Scan`] (values are not read).
        pub fn keys<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Keys<'_, E> {
            Keys::new(self.scan_with(range, false, true))
        }

        /// Like [`keys`](Self::keys), from the end of the range down.
        pub fn keys_reverse<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Keys<'_, E> {
            Keys::new(self.scan_with(range, true, true))
        }

        fn scan_with<K: AsRef<[u8]>>(
            &self,
            range: impl RangeBounds<K>,
            reverse: bool,
            key_only: bool,
        ) -> Scan<'_, E> {
            let (client, ts, own, refused) = self.scan_source();
            Scan::new(
                client,
                ts,
                ByteRange::new(range),
                ScanKind { reverse, key_only },
                own,
            )
            .refused(refused)
        }
    };
}
pub(super) use range_reads;

/// Which way a scan walks its range, and what it returns of each pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScanKind {
    pub(crate) reverse: bool,
    pub(crate) key_only: bool,
}

/// A lazy range read at one snapshot, in key order or from the end of the
/// range down: an iterator of `(key, value)` pairs (values empty for a
/// key-only scan), each a [`Result`]. After an error it returns nothing
/// more.
///
/// Nothing is read until the first call to `next`. Each storage read
/// fetches a batch: [`FIRST_BATCH`] pairs, then twice as many each time,
/// up to [`MAX_BATCH`]; a scan that will take only a few pairs can say so
/// with [`batch_size`](Self::batch_size), so that it reads no more than
/// it returns. A limit is the iterator's `take`.
///
/// Locks met on the way are resolved as any read resolves them (waiting
/// for live transactions up to the client's `resolve_timeout`).
///
/// Each pair the iterator returns is two new `Vec`s; [`visit`](Self::visit)
/// lends the same pairs to a closure instead, without allocating per pair.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let client = percolate_txn::client::Client::open(dir.path())?;
/// let mut txn = client.begin()?;
/// for i in 0..10u8 {
///     txn.put(vec![b'k', i], vec![i]);
/// }
/// txn.commit()?;
///
/// let txn = client.begin()?;
/// // The first three keys from k\x04 on.
/// let first: Vec<(Vec<u8>, Vec<u8>)> = txn
///     .scan(vec![b'k', 4]..)
///     .take(3)
///     .collect::<Result<_, _>>()?;
/// assert_eq!(first[0], (vec![b'k', 4], vec![4]));
/// assert_eq!(first.len(), 3);
/// // Keys only, from the end down.
/// let last = txn.keys_reverse::<&[u8]>(..).next().transpose()?;
/// assert_eq!(last, Some(vec![b'k', 9]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Scan<'a, E: Engine = RocksEngine> {
    client: &'a Inner<E>,
    ts: TimeStamp,
    kind: ScanKind,
    /// What the snapshot has not returned yet: forward, from its start on;
    /// reverse, below its end.
    left: ByteRange,
    /// The snapshot has nothing more in `left`.
    drained: bool,
    /// Pairs of the last batch not returned yet, the next one last.
    batch: Vec<(Vec<u8>, Vec<u8>)>,
    /// The size of the next batch.
    next_batch: usize,
    /// The largest batch.
    max_batch: usize,
    /// The transaction's own writes in the range, and the next one.
    own: Option<btree_map::Range<'a, Vec<u8>, Op>>,
    own_next: Option<(&'a Vec<u8>, &'a Op)>,
    failed: bool,
    /// Why the snapshot may not be read at all, returned by the first
    /// read of a batch.
    refused: Option<crate::Error>,
}

impl<E: Engine> std::fmt::Debug for Scan<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan")
            .field("ts", &self.ts)
            .field("reverse", &self.kind.reverse)
            .field("key_only", &self.kind.key_only)
            .finish_non_exhaustive()
    }
}

impl<'a, E: Engine> Scan<'a, E> {
    /// A scan of `range` at `ts`, with `own` writes merged in.
    pub(super) fn new(
        client: &'a Inner<E>,
        ts: TimeStamp,
        range: ByteRange,
        kind: ScanKind,
        own: Option<&'a btree_map::BTreeMap<Vec<u8>, Op>>,
    ) -> Self {
        let empty = range.is_empty();
        let own = own
            .filter(|own| !empty && !own.is_empty())
            .map(|own| own.range::<[u8], _>(range.bounds()));
        Scan {
            client,
            ts,
            kind,
            left: range,
            drained: empty,
            batch: Vec::new(),
            next_batch: FIRST_BATCH,
            max_batch: MAX_BATCH,
            own,
            own_next: None,
            failed: false,
            refused: None,
        }
        .with_own_advanced()
    }

    /// A scan whose first storage read fails with `refused` (where that
    /// is `Some`) instead of reading.
    pub(super) fn refused(mut self, refused: Option<crate::Error>) -> Self {
        self.refused = refused;
        self
    }

    /// Reads `n` pairs per storage read (at least one): the size to give a
    /// scan that will take `n` pairs, so that it reads no more than it
    /// returns. A transaction's own deletes can make it read more batches.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.next_batch = n.max(1);
        self.max_batch = n.max(1);
        self
    }

    /// Hands the scan's pairs (those [`next`](Iterator::next) has not
    /// returned) to `visit` in order, as borrowed slices, instead of
    /// returning them: a key and a value allocated per pair is what a scan
    /// costs most after the reading itself, and here a short scan
    /// allocates nothing per pair. `visit` returns
    /// [`ControlFlow::Break`] to stop (a scan that wants `n` pairs also
    /// says so with [`batch_size`](Self::batch_size), so that it reads no
    /// more). Returns how many pairs `visit` got.
    ///
    /// The pairs are the same as the iterator's, the transaction's own
    /// writes merged in; locks in the way are resolved the same way. On an
    /// error, the pairs before it have been visited.
    ///
    /// ```
    /// # use std::ops::ControlFlow;
    /// # let dir = tempfile::tempdir()?;
    /// # let client = percolate_txn::client::Client::open(dir.path())?;
    /// let mut txn = client.begin()?;
    /// for i in 0..10u8 {
    ///     txn.put(vec![b'k', i], vec![i]);
    /// }
    /// txn.commit()?;
    ///
    /// // The sum of the first three values from k\x04 on.
    /// let (mut sum, mut seen) = (0, 0);
    /// let snapshot = client.snapshot_latest()?;
    /// snapshot.scan(vec![b'k', 4]..).batch_size(3).visit(|_key, value| {
    ///     sum += value[0];
    ///     seen += 1;
    ///     if seen == 3 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    /// })?;
    /// assert_eq!(sum, 4 + 5 + 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn visit(
        mut self,
        mut visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<usize> {
        let mut visited = 0;
        // What an earlier `next` read and did not return yet.
        while !self.batch.is_empty() {
            let Some(pair) = self.next() else { break };
            let (key, value) = pair?;
            visited += 1;
            if visit(&key, &value).is_break() {
                return Ok(visited);
            }
        }
        if self.failed {
            return Ok(visited);
        }
        let mut merged = Merged {
            own: self.own.take(),
            own_next: self.own_next.take(),
            kind: self.kind,
            visit: &mut visit,
            visited,
            stopped: false,
        };
        while !self.drained && !merged.stopped {
            self.read_batch(&mut |key, value| merged.snapshot_pair(key, value))?;
        }
        while !merged.stopped && merged.own_next.is_some() {
            merged.own_before(None);
        }
        Ok(merged.visited)
    }

    fn with_own_advanced(mut self) -> Self {
        self.advance_own();
        self
    }

    /// Moves to the transaction's next own write (locks aside: they write
    /// nothing).
    fn advance_own(&mut self) {
        self.own_next = next_own(&mut self.own, self.kind.reverse);
    }

    /// Reads the next batch of the snapshot, each pair copied out.
    fn fill(&mut self) -> Result<()> {
        let mut batch = std::mem::take(&mut self.batch);
        self.read_batch(&mut |key, value| {
            batch.push((key.to_vec(), value.to_vec()));
            ControlFlow::Continue(())
        })?;
        batch.reverse();
        self.batch = batch;
        Ok(())
    }

    /// Hands the snapshot's next batch of pairs to `visit` (a batch of
    /// the current size, which then doubles up to the largest), and moves
    /// what is left of the range past them.
    fn read_batch(&mut self, visit: &mut PairVisitor<'_>) -> Result<()> {
        if let Some(refused) = self.refused.take() {
            return Err(refused);
        }
        let limit = self.next_batch;
        self.next_batch = self.next_batch.saturating_mul(2).min(self.max_batch);
        let mut last = Vec::new();
        let (got, broke) = self.client.scan_visit(
            &self.left.start,
            self.left.end.as_deref(),
            limit,
            self.kind,
            self.ts,
            &mut |key, value| {
                last.clear();
                last.extend_from_slice(key);
                visit(key, value)
            },
        )?;
        self.drained = !broke && got < limit;
        if got > 0 {
            self.left.after(&last, self.kind.reverse);
        }
        Ok(())
    }

    /// Whether `own` comes before `snapshot` in scan order.
    fn before(&self, own: &[u8], snapshot: &[u8]) -> std::cmp::Ordering {
        if self.kind.reverse {
            snapshot.cmp(own)
        } else {
            own.cmp(snapshot)
        }
    }

    fn pair(&self, key: Vec<u8>, value: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        if self.kind.key_only {
            (key, Vec::new())
        } else {
            (key, value)
        }
    }
}

impl<E: Engine> Iterator for Scan<'_, E> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            if self.batch.is_empty() && !self.drained {
                if let Err(e) = self.fill() {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
            let own = self.own_next;
            let take_own = match (self.batch.last(), own) {
                (None, None) => return None,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((snapshot, _)), Some((own, _))) => match self.before(own, snapshot) {
                    Ordering::Less => true,
                    // The transaction's own write replaces the snapshot's.
                    Ordering::Equal => {
                        self.batch.pop();
                        true
                    }
                    Ordering::Greater => false,
                },
            };
            if !take_own {
                let (key, value) = self.batch.pop()?;
                return Some(Ok(self.pair(key, value)));
            }
            self.advance_own();
            match own {
                Some((key, Op::Put(value) | Op::Insert(value))) => {
                    return Some(Ok(self.pair(key.clone(), value.clone())));
                }
                // A delete hides the key; a lock is skipped by advance_own.
                _ => continue,
            }
        }
    }
}

/// A visit's merge of the snapshot's pairs with the transaction's own
/// writes, in scan order: an own write replaces the snapshot's pair of its
/// key, an own delete hides it.
struct Merged<'a, 'v> {
    own: Option<btree_map::Range<'a, Vec<u8>, Op>>,
    own_next: Option<(&'a Vec<u8>, &'a Op)>,
    kind: ScanKind,
    visit: &'v mut PairVisitor<'v>,
    visited: usize,
    /// `visit` broke.
    stopped: bool,
}

impl Merged<'_, '_> {
    /// The snapshot's next pair, after the own writes before it.
    fn snapshot_pair(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()> {
        if self.own_before(Some(key)) || self.stopped {
            return self.flow();
        }
        let value = if self.kind.key_only { &[][..] } else { value };
        self.hand(key, value)
    }

    /// Hands out the next own write if it comes before `snapshot` in scan
    /// order (or there is no snapshot key), or is at `snapshot` (the
    /// snapshot's pair is then replaced or hidden: returns true).
    fn own_before(&mut self, snapshot: Option<&[u8]>) -> bool {
        while let Some((key, op)) = self.own_next {
            let order = match snapshot {
                None => Ordering::Less,
                Some(snapshot) if self.kind.reverse => snapshot.cmp(key.as_slice()),
                Some(snapshot) => key.as_slice().cmp(snapshot),
            };
            if order == Ordering::Greater || self.stopped {
                return false;
            }
            self.own_next = next_own(&mut self.own, self.kind.reverse);
            if let Op::Put(value) | Op::Insert(value) = op {
                let value = if self.kind.key_only { &[][..] } else { value };
                let _ = self.hand(key, value);
            }
            if order == Ordering::Equal {
                return true;
            }
        }
        false
    }

    fn hand(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()> {
        self.visited += 1;
        self.stopped = (self.visit)(key, value).is_break();
        self.flow()
    }

    fn flow(&self) -> ControlFlow<()> {
        if self.stopped {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// The transaction's next own write in scan order (locks aside: they
/// write nothing).
fn next_own<'a>(
    own: &mut Option<btree_map::Range<'a, Vec<u8>, Op>>,
    reverse: bool,
) -> Option<(&'a Vec<u8>, &'a Op)> {
    let own = own.as_mut()?;
    loop {
        let next = if reverse { own.next_back() } else { own.next() };
        match next {
            Some((_, Op::Lock)) => continue,
            other => return other,
        }
    }
}

/// The keys of a key-only [`Scan`]: an iterator of keys, each a
/// [`Result`] (values are not read).
pub struct Keys<'a, E: Engine = RocksEngine>(Scan<'a, E>);

impl<E: Engine> std::fmt::Debug for Keys<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Keys").field(&self.0).finish()
    }
}

impl<'a, E: Engine> Keys<'a, E> {
    /// The keys of `scan`, a key-only scan.
    pub(super) fn new(scan: Scan<'a, E>) -> Self {
        debug_assert!(scan.kind.key_only);
        Keys(scan)
    }

    /// Reads `n` keys per storage read: see [`Scan::batch_size`].
    pub fn batch_size(self, n: usize) -> Self {
        Keys(self.0.batch_size(n))
    }

    /// Hands the keys to `visit` as borrowed slices instead of returning
    /// them: see [`Scan::visit`]. Returns how many keys `visit` got.
    pub fn visit(self, mut visit: impl FnMut(&[u8]) -> ControlFlow<()>) -> Result<usize> {
        self.0.visit(|key, _| visit(key))
    }
}

impl<E: Engine> Iterator for Keys<'_, E> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|pair| pair.map(|(key, _)| key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_of_every_bound_kind_become_start_and_end() {
        let r = |start: &[u8], end: Option<&[u8]>| ByteRange {
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
        };
        assert_eq!(ByteRange::new::<&[u8]>(..), r(b"", None));
        assert_eq!(ByteRange::new(&b"a"[..]..&b"c"[..]), r(b"a", Some(b"c")));
        assert_eq!(ByteRange::new("a"..="c"), r(b"a", Some(b"c\0")));
        assert_eq!(ByteRange::new("b"..), r(b"b", None));
        assert_eq!(ByteRange::new(..="b"), r(b"", Some(b"b\0")));
        assert_eq!(
            ByteRange::new::<&str>((Bound::Excluded("a"), Bound::Unbounded)),
            r(b"a\0", None)
        );
        assert!(ByteRange::new("c".."a").is_empty());
        assert!(ByteRange::new("a".."a").is_empty());
        assert!(!ByteRange::new("a"..="a").is_empty());
    }
}
