//! Write epochs: per-bucket counters of write-CF writes (see
//! [`Engine::write_epoch`](crate::Engine::write_epoch)).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Cf, Modify, WriteBatch, write_key_prefix};

/// Buckets of write-CF prefixes.
const BUCKETS: usize = 1 << 16;

/// One counter per bucket of write-CF prefixes.
pub(crate) struct WriteEpochs {
    buckets: Box<[AtomicU64]>,
}

impl Default for WriteEpochs {
    fn default() -> Self {
        WriteEpochs {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl WriteEpochs {
    /// Bumps the bucket of every write-CF record `batch` writes or deletes
    /// (every bucket for a range deletion of the write CF). Called before
    /// the batch is applied.
    pub(crate) fn bump(&self, batch: &WriteBatch) {
        for modify in batch.modifies() {
            match modify {
                Modify::Put {
                    cf: Cf::Write, key, ..
                }
                | Modify::Delete { cf: Cf::Write, key } => {
                    let prefix = write_key_prefix(key).unwrap_or(key);
                    self.buckets[bucket(prefix)].fetch_add(1, Ordering::SeqCst);
                }
                Modify::DeleteRange { cf: Cf::Write, .. } => {
                    for epoch in self.buckets.iter() {
                        epoch.fetch_add(1, Ordering::SeqCst);
                    }
                }
                _ => {}
            }
        }
    }

    /// The epoch of `prefix`'s bucket.
    pub(crate) fn get(&self, prefix: &[u8]) -> u64 {
        self.buckets[bucket(prefix)].load(Ordering::SeqCst)
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
