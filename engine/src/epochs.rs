//! What the engine knows of its write-CF records per bucket of key
//! prefixes: a write epoch ([`Engine::write_epoch`](crate::Engine::write_epoch))
//! and a ceiling on their commit timestamps
//! ([`Engine::write_ts_ceiling`](crate::Engine::write_ts_ceiling)).
//!
//! Both move before a batch is applied, so a reader that finds a record in
//! the engine also finds its bucket already moved; and while a write of a
//! bucket is in flight the bucket has no epoch at all, so that nobody
//! takes as settled what a write is still changing.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Cf, Modify, TS_SUFFIX_LEN, WriteBatch, write_key_prefix};

/// Buckets of write-CF prefixes of a RocksDB engine: 2,097,152 of 16
/// bytes (32 MiB). A version hint is good only while its key's bucket has
/// not moved, so the more keys share a bucket, the more hints a write of
/// one of them spoils: uniform 4-key transfers over 100,000 keys spent 43%
/// of their CPU in seeks with 65,536 buckets, 26% with 262,144, and ran
/// about a quarter faster again with 1,048,576 (2 cores); with 1,048,576,
/// 5.5% of their reads still found their hint's bucket moved by another
/// key's write.
pub(crate) const BUCKETS: usize = 1 << 21;

/// Buckets of the memory engine, which serves tests: few enough that
/// opening one costs nothing worth counting (1 MiB).
pub(crate) const SMALL_BUCKETS: usize = 1 << 16;

/// Bits of a bucket's state that count its writes in flight.
const IN_FLIGHT_BITS: u32 = 16;

/// Writes of a bucket that may be in flight at once: one per writing
/// thread (a batch counts each bucket once), far below this.
const IN_FLIGHT_MASK: u64 = (1 << IN_FLIGHT_BITS) - 1;

/// What ends a write in a bucket's state: one more finished, one fewer in
/// flight, in one atomic add.
const END: u64 = (1 << IN_FLIGHT_BITS) - 1;

/// One bucket of write-CF prefixes, in one cache line with its
/// neighbours (never across two).
#[repr(align(16))]
struct Bucket {
    /// The bucket's finished writes (its epoch) shifted left by
    /// [`IN_FLIGHT_BITS`], plus its writes in flight: begun, not yet
    /// applied. The epoch has 48 bits: at ten million writes a second
    /// into one bucket it comes back to a value it had after about ten
    /// months of them.
    state: AtomicU64,
    /// No record in the bucket has a larger commit ts.
    ts_ceiling: AtomicU64,
}

// SAFETY: a bucket is two atomic integers; all zeros is epoch 0 with no
// write in flight and a ceiling of 0 (below any floor).
#[allow(unsafe_code)]
unsafe impl crate::mem::Zeroable for Bucket {}

/// Per-bucket epochs and commit-ts ceilings of write-CF records.
pub(crate) struct WriteEpochs {
    /// Zeroed memory from the kernel (in huge pages where it can), taking
    /// room as keys touch it.
    buckets: crate::mem::ZeroedTable<Bucket>,
    /// The ceiling of every bucket that no write raised above it.
    floor: u64,
}

/// Distinct buckets a batch writes up to which they are told apart on the
/// stack; a larger batch sorts them on the heap.
const INLINE_BUCKETS: usize = 16;

impl WriteEpochs {
    /// `count` buckets (a power of two) at epoch 0 whose ts ceiling is
    /// `floor`: no record already in the engine may have a commit ts
    /// above it.
    pub(crate) fn new(count: usize, floor: u64) -> Self {
        debug_assert!(count.is_power_of_two());
        WriteEpochs {
            buckets: crate::mem::ZeroedTable::new(count),
            floor,
        }
    }

    /// Starts a write: counts a write in flight in the bucket of every
    /// write-CF record `batch` writes or deletes (once per bucket; every
    /// bucket for a range deletion of the write CF), and raises the ts
    /// ceiling of every record it writes to that record's commit ts.
    /// Called before the batch is applied; [`end`](Self::end) must follow,
    /// whether it applied or not.
    pub(crate) fn begin(&self, batch: &WriteBatch) {
        for modify in batch.modifies() {
            if let Modify::Put {
                cf: Cf::Write, key, ..
            } = modify
            {
                self.bucket(write_key_prefix(key).unwrap_or(key))
                    .ts_ceiling
                    .fetch_max(commit_ts(key), Ordering::SeqCst);
            }
        }
        self.each_bucket(batch, |bucket| {
            bucket.state.fetch_add(1, Ordering::SeqCst);
        });
    }

    /// Ends a write begun by [`begin`](Self::begin): in the same buckets,
    /// one write fewer in flight and one more finished.
    pub(crate) fn end(&self, batch: &WriteBatch) {
        self.each_bucket(batch, |bucket| {
            bucket.state.fetch_add(END, Ordering::SeqCst);
        });
    }

    /// Calls `f` once per bucket that a write-CF modification of `batch`
    /// falls in (every bucket, once, if it deletes a range of the write
    /// CF): the count of writes in flight stays below one per thread.
    fn each_bucket(&self, batch: &WriteBatch, mut f: impl FnMut(&Bucket)) {
        let mut inline = [0usize; INLINE_BUCKETS];
        let mut seen = 0;
        let mut spilled: Vec<usize> = Vec::new();
        for modify in batch.modifies() {
            let key = match modify {
                Modify::Put {
                    cf: Cf::Write, key, ..
                }
                | Modify::Delete { cf: Cf::Write, key } => key,
                Modify::DeleteRange { cf: Cf::Write, .. } => {
                    self.buckets.iter().for_each(f);
                    return;
                }
                _ => continue,
            };
            let index = self.index(write_key_prefix(key).unwrap_or(key));
            if !spilled.is_empty() {
                spilled.push(index);
            } else if !inline[..seen].contains(&index) {
                if seen < INLINE_BUCKETS {
                    inline[seen] = index;
                    seen += 1;
                } else {
                    spilled.extend_from_slice(&inline);
                    spilled.push(index);
                }
            }
        }
        if spilled.is_empty() {
            inline[..seen].iter().for_each(|&i| f(&self.buckets[i]));
        } else {
            spilled.sort_unstable();
            spilled.dedup();
            spilled.iter().for_each(|&i| f(&self.buckets[i]));
        }
    }

    /// The epoch of `prefix`'s bucket: the count of its finished writes,
    /// or `None` while one is in flight (begun, not ended).
    pub(crate) fn get(&self, prefix: &[u8]) -> Option<u64> {
        let state = self.bucket(prefix).state.load(Ordering::SeqCst);
        (state & IN_FLIGHT_MASK == 0).then_some(state >> IN_FLIGHT_BITS)
    }

    /// Starts bringing `prefix`'s bucket into the CPU's caches.
    pub(crate) fn prefetch(&self, prefix: &[u8]) {
        crate::mem::prefetch(self.bucket(prefix));
    }

    /// The ts ceiling of `prefix`'s bucket.
    pub(crate) fn ts_ceiling(&self, prefix: &[u8]) -> u64 {
        let raised = self.bucket(prefix).ts_ceiling.load(Ordering::SeqCst);
        raised.max(self.floor)
    }
}

/// The commit ts a write-CF key carries (its suffix holds `!ts`
/// big-endian); the largest ts for a key too short to carry one, so that
/// its bucket never looks older than it may be.
pub(crate) fn commit_ts(key: &[u8]) -> u64 {
    match write_key_prefix(key) {
        Some(prefix) => {
            let mut suffix = [0; TS_SUFFIX_LEN];
            suffix.copy_from_slice(&key[prefix.len()..]);
            !u64::from_be_bytes(suffix)
        }
        None => u64::MAX,
    }
}

impl WriteEpochs {
    /// The index of a prefix's bucket: its hash, folded.
    fn index(&self, prefix: &[u8]) -> usize {
        (crate::mem::key_hash(prefix) as usize) & (self.buckets.len() - 1)
    }

    /// The bucket of a prefix.
    fn bucket(&self, prefix: &[u8]) -> &Bucket {
        &self.buckets[self.index(prefix)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::write_cf_key as write_key;

    #[test]
    fn a_written_record_raises_its_bucket_and_no_other() {
        let epochs = WriteEpochs::new(SMALL_BUCKETS, 5);
        assert_eq!(epochs.ts_ceiling(b"k"), 5);
        let mut batch = WriteBatch::new();
        batch.put(Cf::Write, write_key(b"k", 40), b"v".to_vec());
        // Other CFs and deletions leave the ceiling where it is.
        batch.put(Cf::Lock, write_key(b"k", 90), b"v".to_vec());
        batch.delete(Cf::Write, write_key(b"k", 80));
        epochs.begin(&batch);
        assert_eq!(epochs.ts_ceiling(b"k"), 40);
        // In flight: no epoch.
        assert_eq!(epochs.get(b"k"), None);
        epochs.end(&batch);
        // One write, however many of its records share the bucket.
        assert_eq!(epochs.get(b"k"), Some(1));
        let other = (0u32..)
            .map(|i| format!("other-{i}").into_bytes())
            .find(|p| !std::ptr::eq(epochs.bucket(p), epochs.bucket(b"k")))
            .expect("another bucket");
        assert_eq!(epochs.ts_ceiling(&other), 5);
        // An older record does not lower it.
        let mut older = WriteBatch::new();
        older.put(Cf::Write, write_key(b"k", 10), b"v".to_vec());
        epochs.begin(&older);
        epochs.end(&older);
        assert_eq!(epochs.ts_ceiling(b"k"), 40);
        assert_eq!(epochs.get(b"k"), Some(2));
    }

    #[test]
    fn overlapping_writes_leave_no_epoch_until_the_last_ends() {
        let epochs = WriteEpochs::new(SMALL_BUCKETS, 0);
        let mut first = WriteBatch::new();
        first.put(Cf::Write, write_key(b"k", 10), b"v".to_vec());
        let mut second = WriteBatch::new();
        second.delete(Cf::Write, write_key(b"k", 10));
        epochs.begin(&first);
        epochs.begin(&second);
        epochs.end(&first);
        assert_eq!(epochs.get(b"k"), None);
        epochs.end(&second);
        assert_eq!(epochs.get(b"k"), Some(2));
    }

    #[test]
    fn a_large_batch_moves_each_of_its_buckets_once() {
        let epochs = WriteEpochs::new(SMALL_BUCKETS, 0);
        // More distinct keys than are told apart on the stack, each
        // written twice, and a key whose many versions share a bucket.
        let keys: Vec<Vec<u8>> = (0..3 * INLINE_BUCKETS)
            .map(|i| format!("key-{i}").into_bytes())
            .collect();
        let mut batch = WriteBatch::new();
        for ts in 1..=2 {
            for key in &keys {
                batch.put(Cf::Write, write_key(key, ts), b"v".to_vec());
            }
        }
        for ts in 1..=100 {
            batch.delete(Cf::Write, write_key(b"old", ts));
        }
        epochs.begin(&batch);
        assert!(keys.iter().all(|key| epochs.get(key).is_none()));
        epochs.end(&batch);
        // A bucket moves once per batch, however many of its records the
        // batch writes.
        for key in keys.iter().map(Vec::as_slice).chain([&b"old"[..]]) {
            assert_eq!(epochs.get(key), Some(1));
        }
        // A range deletion moves every bucket, once.
        let mut range = WriteBatch::new();
        range.delete_range(Cf::Write, b"a".to_vec(), b"z".to_vec());
        epochs.begin(&range);
        assert_eq!(epochs.get(b"elsewhere"), None);
        epochs.end(&range);
        assert_eq!(epochs.get(b"elsewhere"), Some(1));
        assert_eq!(epochs.get(b"old"), Some(2));
    }

    #[test]
    fn a_key_without_a_ts_suffix_counts_as_the_newest() {
        assert_eq!(commit_ts(b"short"), u64::MAX);
        assert_eq!(commit_ts(&write_key(b"", 7)), 7);
    }
}
