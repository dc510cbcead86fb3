//! The lock CF, mirrored in memory: a hash lookup instead of a RocksDB get
//! for the lock check of every point read and prewrite.
//!
//! Locks are few and short-lived: a transaction writes them at prewrite
//! and deletes them at commit, so the lock CF's memtable and files fill
//! with tombstones, and a RocksDB get of an absent lock must look past
//! them (the bloom filters know the keys, not that they were deleted).
//! The mirror holds only the live locks, rebuilt from the lock CF when the
//! database opens and then kept by every [`Engine::write`](crate::Engine::write)
//! after its batch is applied:
//!
//! * a lock appears in the mirror just after it is in RocksDB. A reader
//!   that misses it in between reads as if it had come a moment earlier:
//!   the prewrite that wrote it has not returned yet, so its transaction
//!   cannot have committed (an async-commit or 1PC prewrite also holds the
//!   key in the memory-lock table until then);
//! * a lock leaves the mirror just after its deletion, and with it the
//!   commit or rollback record written in the same batch, is in RocksDB: a
//!   reader that finds no lock finds the record.
//!
//! Only reads of the latest data use it ([`Engine::latest`](crate::Engine::latest)
//! gets); a snapshot reads its own locks from RocksDB.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;

use crate::{Cf, Modify, WriteBatch};

/// Shards of the table, each behind its own lock.
const SHARDS: usize = 64;

/// FNV-1a: keys are short, and a lookup should cost less than the RocksDB
/// get it replaces.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = hash;
    }
}

type Shard = HashMap<Vec<u8>, Vec<u8>, BuildHasherDefault<Fnv>>;

/// The live locks: key (without the data prefix) to lock bytes.
pub(crate) struct LockMirror {
    shards: Box<[RwLock<Shard>]>,
    /// Locks held, so that a lookup while there are none takes no lock.
    len: AtomicUsize,
}

impl LockMirror {
    /// A mirror of `locks`.
    pub(crate) fn new(locks: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Self {
        let mirror = LockMirror {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            len: AtomicUsize::new(0),
        };
        for (key, value) in locks {
            mirror.put(key, value);
        }
        mirror
    }

    /// Whether no lock is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::SeqCst) == 0
    }

    /// The lock stored under `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        self.shards[shard(key)].read().get(key).cloned()
    }

    /// Applies the lock-CF modifications of `batch`, in order. Called
    /// after the batch is applied to the engine.
    pub(crate) fn apply(&self, batch: &WriteBatch) {
        for modify in batch.modifies() {
            match modify {
                Modify::Put {
                    cf: Cf::Lock,
                    key,
                    value,
                } => self.put(key.clone(), value.clone()),
                Modify::Delete { cf: Cf::Lock, key } => self.remove(key),
                Modify::DeleteRange {
                    cf: Cf::Lock,
                    start,
                    end,
                } => {
                    for shard in self.shards.iter() {
                        let mut shard = shard.write();
                        let before = shard.len();
                        shard.retain(|key, _| key < start || key >= end);
                        self.len.fetch_sub(before - shard.len(), Ordering::SeqCst);
                    }
                }
                _ => {}
            }
        }
    }

    fn remove(&self, key: &[u8]) {
        if self.shards[shard(key)].write().remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn put(&self, key: Vec<u8>, value: Vec<u8>) {
        if self.shards[shard(&key)]
            .write()
            .insert(key, value)
            .is_none()
        {
            self.len.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn shard(key: &[u8]) -> usize {
    let mut hasher = Fnv::default();
    hasher.write(key);
    // The low bits pick the slot inside the shard's table: take high ones.
    (hasher.finish() >> 58) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_puts_deletes_and_range_deletes() {
        let mirror = LockMirror::new([(b"a".to_vec(), b"1".to_vec())]);
        assert_eq!(mirror.get(b"a"), Some(b"1".to_vec()));
        let mut batch = WriteBatch::new();
        batch.put(Cf::Lock, b"b".to_vec(), b"2".to_vec());
        batch.put(Cf::Lock, b"c".to_vec(), b"3".to_vec());
        batch.put(Cf::Lock, b"a".to_vec(), b"1'".to_vec());
        // Other CFs are not mirrored.
        batch.put(Cf::Write, b"d".to_vec(), b"4".to_vec());
        batch.delete(Cf::Lock, b"absent".to_vec());
        mirror.apply(&batch);
        assert_eq!(mirror.get(b"a"), Some(b"1'".to_vec()));
        assert_eq!(mirror.get(b"d"), None);
        assert_eq!(mirror.len.load(Ordering::SeqCst), 3);
        let mut batch = WriteBatch::new();
        batch.delete(Cf::Lock, b"a".to_vec());
        batch.delete_range(Cf::Lock, b"b".to_vec(), b"c".to_vec());
        mirror.apply(&batch);
        assert_eq!(mirror.get(b"a"), None);
        assert_eq!(mirror.get(b"b"), None);
        assert_eq!(mirror.get(b"c"), Some(b"3".to_vec()));
        assert_eq!(mirror.len.load(Ordering::SeqCst), 1);
    }
}
