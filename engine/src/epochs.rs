//! What the engine knows of its write-CF records per bucket of key
//! prefixes: a write epoch ([`Engine::write_epoch`](crate::Engine::write_epoch))
//! and a ceiling on their commit timestamps
//! ([`Engine::write_ts_ceiling`](crate::Engine::write_ts_ceiling)).
//!
//! Both are updated before a batch is applied, so a reader that finds a
//! record in the engine also finds its bucket already moved.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Cf, Modify, TS_SUFFIX_LEN, WriteBatch, write_key_prefix};

/// Buckets of write-CF prefixes.
const BUCKETS: usize = 1 << 16;

/// One bucket of write-CF prefixes.
struct Bucket {
    /// Bumped before every write of a record in the bucket.
    epoch: AtomicU64,
    /// No record in the bucket has a larger commit ts.
    ts_ceiling: AtomicU64,
}

/// Per-bucket epochs and commit-ts ceilings of write-CF records.
pub(crate) struct WriteEpochs {
    buckets: Box<[Bucket]>,
}

impl WriteEpochs {
    /// Buckets at epoch 0 whose ts ceiling is `floor`: no record already
    /// in the engine may have a commit ts above it.
    pub(crate) fn new(floor: u64) -> Self {
        WriteEpochs {
            buckets: (0..BUCKETS)
                .map(|_| Bucket {
                    epoch: AtomicU64::new(0),
                    ts_ceiling: AtomicU64::new(floor),
                })
                .collect(),
        }
    }

    /// Bumps the bucket of every write-CF record `batch` writes or deletes
    /// (every bucket for a range deletion of the write CF), and raises the
    /// ts ceiling of every record it writes to that record's commit ts.
    /// Called before the batch is applied.
    pub(crate) fn bump(&self, batch: &WriteBatch) {
        for modify in batch.modifies() {
            match modify {
                Modify::Put {
                    cf: Cf::Write, key, ..
                } => {
                    let bucket = &self.buckets[bucket(write_key_prefix(key).unwrap_or(key))];
                    bucket.epoch.fetch_add(1, Ordering::SeqCst);
                    bucket
                        .ts_ceiling
                        .fetch_max(commit_ts(key), Ordering::SeqCst);
                }
                Modify::Delete { cf: Cf::Write, key } => {
                    let prefix = write_key_prefix(key).unwrap_or(key);
                    self.buckets[bucket(prefix)]
                        .epoch
                        .fetch_add(1, Ordering::SeqCst);
                }
                Modify::DeleteRange { cf: Cf::Write, .. } => {
                    for bucket in self.buckets.iter() {
                        bucket.epoch.fetch_add(1, Ordering::SeqCst);
                    }
                }
                _ => {}
            }
        }
    }

    /// The epoch of `prefix`'s bucket.
    pub(crate) fn get(&self, prefix: &[u8]) -> u64 {
        self.buckets[bucket(prefix)].epoch.load(Ordering::SeqCst)
    }

    /// The ts ceiling of `prefix`'s bucket.
    pub(crate) fn ts_ceiling(&self, prefix: &[u8]) -> u64 {
        self.buckets[bucket(prefix)]
            .ts_ceiling
            .load(Ordering::SeqCst)
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

/// FNV-1a over the prefix, folded to a bucket.
fn bucket(prefix: &[u8]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in prefix {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash as usize) % BUCKETS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_key(prefix: &[u8], ts: u64) -> Vec<u8> {
        let mut key = prefix.to_vec();
        key.extend_from_slice(&(!ts).to_be_bytes());
        key
    }

    #[test]
    fn a_written_record_raises_its_bucket_and_no_other() {
        let epochs = WriteEpochs::new(5);
        assert_eq!(epochs.ts_ceiling(b"k"), 5);
        let mut batch = WriteBatch::new();
        batch.put(Cf::Write, write_key(b"k", 40), b"v".to_vec());
        // Other CFs and deletions leave the ceiling where it is.
        batch.put(Cf::Lock, write_key(b"k", 90), b"v".to_vec());
        batch.delete(Cf::Write, write_key(b"k", 80));
        epochs.bump(&batch);
        assert_eq!(epochs.ts_ceiling(b"k"), 40);
        assert_eq!(epochs.get(b"k"), 2);
        let other = (0u32..)
            .map(|i| format!("other-{i}").into_bytes())
            .find(|p| bucket(p) != bucket(b"k"))
            .expect("another bucket");
        assert_eq!(epochs.ts_ceiling(&other), 5);
        // An older record does not lower it.
        let mut older = WriteBatch::new();
        older.put(Cf::Write, write_key(b"k", 10), b"v".to_vec());
        epochs.bump(&older);
        assert_eq!(epochs.ts_ceiling(b"k"), 40);
    }

    #[test]
    fn a_key_without_a_ts_suffix_counts_as_the_newest() {
        assert_eq!(commit_ts(b"short"), u64::MAX);
        assert_eq!(commit_ts(&write_key(b"", 7)), 7);
    }
}
