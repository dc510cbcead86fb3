//! Raw key-value access through the client, routed across regions.

use std::ops::RangeBounds;
use std::sync::Arc;

use percolate_engine::{Engine, RocksEngine};

use super::Inner;
use super::scan::{ByteRange, FIRST_BATCH, MAX_BATCH};
use crate::Result;
use crate::commands::RawScan;

/// Raw key-value access: no transactions, no timestamps, no versions; a
/// read sees the latest write. Raw data lives in its own column family, so
/// raw keys never collide with transactional ones (a raw `get` of a key
/// written by a transaction finds nothing). Taken with
/// [`Client::raw`](super::Client::raw); cheap to clone.
///
/// Each call goes to the regions its keys fall in. A write within one
/// region is atomic; a batch across regions is written region by region
/// (atomic in each). [`compare_and_swap`](Self::compare_and_swap) is atomic
/// against every other raw write of its key. Keys must not be empty.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let client = percolate_txn::client::Client::open(dir.path())?;
/// let raw = client.raw();
/// raw.put(b"counter", b"1")?;
/// let (swapped, found) = raw.compare_and_swap(b"counter", Some(b"1"), Some(b"2"))?;
/// assert!(swapped);
/// assert_eq!(found, Some(b"1".to_vec()));
/// raw.batch_put(vec![(b"a".to_vec(), b"x".to_vec()), (b"b".to_vec(), b"y".to_vec())])?;
/// let keys: Vec<Vec<u8>> = raw
///     .scan("a".."c")
///     .map(|pair| pair.map(|(k, _)| k))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
/// raw.delete_range("a".."c")?;
/// assert_eq!(raw.get(b"a")?, None);
/// // Transactional data is elsewhere.
/// assert_eq!(client.get_latest(b"counter")?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RawClient<E: Engine = RocksEngine> {
    client: Arc<Inner<E>>,
}

impl<E: Engine> Clone for RawClient<E> {
    fn clone(&self) -> Self {
        RawClient {
            client: self.client.clone(),
        }
    }
}

impl<E: Engine> std::fmt::Debug for RawClient<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawClient").finish_non_exhaustive()
    }
}

impl<E: Engine> RawClient<E> {
    pub(super) fn new(client: Arc<Inner<E>>) -> Self {
        RawClient { client }
    }

    fn storage(&self, key: &[u8]) -> &crate::storage::Storage<E> {
        self.client.cluster.region_for(key).storage()
    }

    /// `items` grouped by the region of the key `key_of` gives, in region
    /// order: (region index, items).
    fn by_region<T>(&self, items: Vec<T>, key_of: impl Fn(&T) -> &[u8]) -> Vec<(usize, Vec<T>)> {
        let mut groups: Vec<(usize, Vec<T>)> = Vec::new();
        for item in items {
            let index = self.client.cluster.region_index(key_of(&item));
            match groups.iter_mut().find(|(i, _)| *i == index) {
                Some((_, group)) => group.push(item),
                None => groups.push((index, vec![item])),
            }
        }
        groups.sort_by_key(|(index, _)| *index);
        groups
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.storage(key).raw_get(key.to_vec())
    }

    /// The values of `keys`, in the order asked (`None` where a key does
    /// not exist).
    pub fn batch_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let owned: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        let mut found = std::collections::HashMap::with_capacity(keys.len());
        for (index, group) in self.by_region(owned, |k| k) {
            let storage = self.client.cluster.regions()[index].storage();
            found.extend(storage.raw_batch_get(group)?);
        }
        Ok(keys.iter().map(|k| found.get(*k).cloned()).collect())
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        self.client.check_writable()?;
        let key = key.into();
        self.storage(&key).raw_put(key, value.into())
    }

    /// Sets every pair (atomically within each region).
    pub fn batch_put(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.client.check_writable()?;
        for (index, group) in self.by_region(pairs, |(k, _)| k) {
            self.client.cluster.regions()[index]
                .storage()
                .raw_batch_put(group)?;
        }
        Ok(())
    }

    /// Deletes `key` (a missing key is not an error).
    pub fn delete(&self, key: impl Into<Vec<u8>>) -> Result<()> {
        self.client.check_writable()?;
        let key = key.into();
        self.storage(&key).raw_delete(key)
    }

    /// Deletes every key of `keys` (atomically within each region).
    pub fn batch_delete(&self, keys: Vec<Vec<u8>>) -> Result<()> {
        self.client.check_writable()?;
        for (index, group) in self.by_region(keys, |k| k) {
            self.client.cluster.regions()[index]
                .storage()
                .raw_batch_delete(group)?;
        }
        Ok(())
    }

    /// Deletes every key in `range` (one range deletion per region it
    /// covers). Raw writes made meanwhile inside the range may or may not
    /// survive it.
    pub fn delete_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<()> {
        self.client.check_writable()?;
        let mut range = ByteRange::new(range);
        if range.end.is_none() {
            // A range deletion needs an end: just past the last key now.
            match self
                .scan_reverse(range.start.as_slice()..)
                .batch_size(1)
                .next()
            {
                Some(last) => {
                    let mut end = last?.0;
                    end.push(0);
                    range.end = Some(end);
                }
                None => return Ok(()),
            }
        }
        if range.is_empty() {
            return Ok(());
        }
        let end = range.end.as_deref();
        for (region, lower, upper) in self.client.cluster.pieces(&range.start, end) {
            let upper = upper.expect("the range has an end");
            region
                .storage()
                .raw_delete_range(lower.to_vec(), upper.to_vec())?;
        }
        Ok(())
    }

    /// Sets `key` to `value` (deletes it, when `value` is `None`) only if
    /// its value now is `expected` (`None`: the key must be absent).
    /// Returns whether it did, and the value it found.
    pub fn compare_and_swap(
        &self,
        key: &[u8],
        expected: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<(bool, Option<Vec<u8>>)> {
        self.client.check_writable()?;
        self.storage(key).raw_compare_and_swap(
            key.to_vec(),
            expected.map(<[u8]>::to_vec),
            value.map(<[u8]>::to_vec),
        )
    }

    /// The pairs with keys in `range`, in key order: a lazy iterator that
    /// reads a batch at a time, region after region.
    pub fn scan<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> RawScanIter<'_, E> {
        RawScanIter::new(self, ByteRange::new(range), false)
    }

    /// Like [`scan`](Self::scan), from the end of the range down.
    pub fn scan_reverse<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> RawScanIter<'_, E> {
        RawScanIter::new(self, ByteRange::new(range), true)
    }
}

/// A lazy scan of raw pairs (see [`RawClient::scan`]): an iterator of
/// `(key, value)`, each a [`Result`]; after an error it returns nothing
/// more.
pub struct RawScanIter<'a, E: Engine = RocksEngine> {
    raw: &'a RawClient<E>,
    left: ByteRange,
    reverse: bool,
    drained: bool,
    /// The last batch's pairs not returned yet, the next one last.
    batch: Vec<(Vec<u8>, Vec<u8>)>,
    next_batch: usize,
    max_batch: usize,
}

impl<E: Engine> std::fmt::Debug for RawScanIter<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawScanIter")
            .field("reverse", &self.reverse)
            .finish_non_exhaustive()
    }
}

impl<'a, E: Engine> RawScanIter<'a, E> {
    fn new(raw: &'a RawClient<E>, range: ByteRange, reverse: bool) -> Self {
        RawScanIter {
            raw,
            drained: range.is_empty(),
            left: range,
            reverse,
            batch: Vec::new(),
            next_batch: FIRST_BATCH,
            max_batch: MAX_BATCH,
        }
    }

    /// Reads `n` pairs per storage read (at least one).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.next_batch = n.max(1);
        self.max_batch = n.max(1);
        self
    }

    fn fill(&mut self) -> Result<()> {
        let limit = self.next_batch;
        self.next_batch = self.next_batch.saturating_mul(2).min(self.max_batch);
        let cluster = &self.raw.client.cluster;
        let mut pieces: Vec<_> = cluster
            .pieces(&self.left.start, self.left.end.as_deref())
            .collect();
        if self.reverse {
            pieces.reverse();
        }
        let mut batch = Vec::new();
        for (region, lower, upper) in pieces {
            if batch.len() >= limit {
                break;
            }
            batch.extend(region.storage().raw_scan(RawScan {
                start: Some(lower.to_vec()),
                end: upper.map(<[u8]>::to_vec),
                limit: limit - batch.len(),
                key_only: false,
                reverse: self.reverse,
            })?);
        }
        if batch.len() < limit {
            self.drained = true;
        }
        if let Some((last, _)) = batch.last() {
            if self.reverse {
                self.left.end = Some(last.clone());
            } else {
                self.left.start.clone_from(last);
                self.left.start.push(0);
            }
        }
        batch.reverse();
        self.batch = batch;
        Ok(())
    }
}

impl<E: Engine> Iterator for RawScanIter<'_, E> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.batch.is_empty() && !self.drained {
            if let Err(e) = self.fill() {
                self.drained = true;
                return Some(Err(e));
            }
        }
        self.batch.pop().map(Ok)
    }
}
