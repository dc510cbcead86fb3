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

/// Buckets of write-CF prefixes of a RocksDB engine: 1,048,576 of 32
/// bytes (32 MiB). A version hint is good only while its key's bucket has
/// not moved, so the more keys share a bucket, the more hints a write of
/// one of them spoils: uniform 4-key transfers over 100,000 keys spent 43%
/// of their CPU in seeks with 65,536 buckets, 26% with 262,144, and ran
/// about a quarter faster again with 1,048,576 (2 cores).
pub(crate) const BUCKETS: usize = 1 << 20;

/// Buckets of the memory engine, which serves tests: few enough that
/// opening one costs nothing worth counting (2 MiB).
pub(crate) const SMALL_BUCKETS: usize = 1 << 16;

/// One bucket of write-CF prefixes, in one cache line with its
/// neighbours (never across two).
#[repr(align(32))]
struct Bucket {
    /// Bumped before every write of a record in the bucket is applied.
    begun: AtomicU64,
    /// Bumped after it is applied (or failed). Equal to `begun` while no
    /// write of the bucket is in flight, and then the bucket's epoch.
    done: AtomicU64,
    /// No record in the bucket has a larger commit ts.
    ts_ceiling: AtomicU64,
}

/// Per-bucket epochs and commit-ts ceilings of write-CF records.
pub(crate) struct WriteEpochs {
    buckets: Box<[Bucket]>,
}

impl WriteEpochs {
    /// `count` buckets (a power of two) at epoch 0 whose ts ceiling is
    /// `floor`: no record already in the engine may have a commit ts
    /// above it.
    pub(crate) fn new(count: usize, floor: u64) -> Self {
        debug_assert!(count.is_power_of_two());
        WriteEpochs {
            buckets: (0..count)
                .map(|_| Bucket {
                    begun: AtomicU64::new(0),
                    done: AtomicU64::new(0),
                    ts_ceiling: AtomicU64::new(floor),
                })
                .collect(),
        }
    }

    /// Starts a write: bumps `begun` of the bucket of every write-CF
    /// record `batch` writes or deletes (of every bucket for a range
    /// deletion of the write CF), and raises the ts ceiling of every record
    /// it writes to that record's commit ts. Called before the batch is
    /// applied; [`end`](Self::end) must follow, whether it applied or not.
    pub(crate) fn begin(&self, batch: &WriteBatch) {
        self.each_bucket(batch, |bucket, key| {
            bucket.begun.fetch_add(1, Ordering::SeqCst);
            if let Some(key) = key {
                bucket
                    .ts_ceiling
                    .fetch_max(commit_ts(key), Ordering::SeqCst);
            }
        });
    }

    /// Ends a write begun by [`begin`](Self::begin): bumps `done` of the
    /// same buckets.
    pub(crate) fn end(&self, batch: &WriteBatch) {
        self.each_bucket(batch, |bucket, _| {
            bucket.done.fetch_add(1, Ordering::SeqCst);
        });
    }

    /// Calls `f` once per write-CF modification of `batch` with its
    /// bucket and, for a put, its key; for a range deletion, with every
    /// bucket.
    fn each_bucket(&self, batch: &WriteBatch, mut f: impl FnMut(&Bucket, Option<&[u8]>)) {
        for modify in batch.modifies() {
            match modify {
                Modify::Put {
                    cf: Cf::Write, key, ..
                } => f(self.bucket(write_key_prefix(key).unwrap_or(key)), Some(key)),
                Modify::Delete { cf: Cf::Write, key } => {
                    f(self.bucket(write_key_prefix(key).unwrap_or(key)), None)
                }
                Modify::DeleteRange { cf: Cf::Write, .. } => {
                    for bucket in self.buckets.iter() {
                        f(bucket, None);
                    }
                }
                _ => {}
            }
        }
    }

    /// The epoch of `prefix`'s bucket: the count of its finished writes,
    /// or `None` while one is in flight (begun, not ended). `done` is read
    /// before `begun`, so equal counts mean that no write was in flight
    /// when `begun` was read and none ended between the two reads.
    pub(crate) fn get(&self, prefix: &[u8]) -> Option<u64> {
        let bucket = self.bucket(prefix);
        let done = bucket.done.load(Ordering::SeqCst);
        (bucket.begun.load(Ordering::SeqCst) == done).then_some(done)
    }

    /// Starts bringing `prefix`'s bucket into the CPU's caches.
    pub(crate) fn prefetch(&self, prefix: &[u8]) {
        crate::mem::prefetch(self.bucket(prefix));
    }

    /// The ts ceiling of `prefix`'s bucket.
    pub(crate) fn ts_ceiling(&self, prefix: &[u8]) -> u64 {
        self.bucket(prefix).ts_ceiling.load(Ordering::SeqCst)
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
    /// The bucket of a prefix: its hash, folded.
    fn bucket(&self, prefix: &[u8]) -> &Bucket {
        &self.buckets[(crate::mem::key_hash(prefix) as usize) & (self.buckets.len() - 1)]
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
        assert_eq!(epochs.get(b"k"), Some(2));
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
        assert_eq!(epochs.get(b"k"), Some(3));
    }

    #[test]
    fn a_key_without_a_ts_suffix_counts_as_the_newest() {
        assert_eq!(commit_ts(b"short"), u64::MAX);
        assert_eq!(commit_ts(&write_key(b"", 7)), 7);
    }
}
