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
//! gets); a snapshot reads its own locks from RocksDB, and the locks RocksDB
//! never holds (pessimistic locks, kept here only: see
//! [`RocksEngine`](crate::RocksEngine)) from here.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound;
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

/// Whether a lock-CF record is kept in memory only: a pessimistic lock
/// (lock type `S`, the first byte of TiKV's lock encoding). See
/// [`RocksEngine`](crate::RocksEngine)'s docs.
pub(crate) fn is_memory_only(cf: Cf, value: &[u8]) -> bool {
    cf == Cf::Lock && value.first() == Some(&b'S')
}

/// The live locks: key (without the data prefix) to lock bytes.
pub(crate) struct LockMirror {
    shards: Box<[RwLock<Shard>]>,
    /// Locks held, so that a lookup while there are none takes no lock.
    len: AtomicUsize,
    /// The locks written since the database opened that RocksDB does not
    /// hold (pessimistic locks), in key order for cursors; also in
    /// `shards`.
    memory_only: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Entries of `memory_only`, so that a cursor opened while there are
    /// none takes no lock.
    memory_only_len: AtomicUsize,
}

impl LockMirror {
    /// A mirror of `locks`.
    pub(crate) fn new(locks: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Self {
        let mirror = LockMirror {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            len: AtomicUsize::new(0),
            memory_only: RwLock::default(),
            memory_only_len: AtomicUsize::new(0),
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

    /// Whether `key`'s lock is one RocksDB does not hold.
    pub(crate) fn holds_memory_only(&self, key: &[u8]) -> bool {
        self.memory_only_len.load(Ordering::SeqCst) > 0 && self.memory_only.read().contains_key(key)
    }

    /// `key`'s lock if RocksDB does not hold it.
    pub(crate) fn memory_only_get(&self, key: &[u8]) -> Option<Vec<u8>> {
        if self.memory_only_len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.memory_only.read().get(key).cloned()
    }

    /// The locks RocksDB does not hold with keys in `[lower, upper)`
    /// (unbounded where `None`), in key order; `None` when there are none
    /// at all.
    pub(crate) fn memory_only_range(
        &self,
        lower: Option<&[u8]>,
        upper: Option<&[u8]>,
    ) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        if self.memory_only_len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        if let (Some(lower), Some(upper)) = (lower, upper) {
            if lower >= upper {
                return Some(Vec::new());
            }
        }
        let start = lower.map_or(Bound::Unbounded, Bound::Included);
        let end = upper.map_or(Bound::Unbounded, Bound::Excluded);
        Some(
            self.memory_only
                .read()
                .range::<[u8], _>((start, end))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
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
                } => {
                    if is_memory_only(Cf::Lock, value) {
                        self.put_memory_only(key.clone(), value.clone());
                    } else {
                        self.remove_memory_only(key);
                    }
                    self.put(key.clone(), value.clone());
                }
                Modify::Delete { cf: Cf::Lock, key } => {
                    self.remove_memory_only(key);
                    self.remove(key);
                }
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
                    let mut memory_only = self.memory_only.write();
                    memory_only.retain(|key, _| key < start || key >= end);
                    self.memory_only_len
                        .store(memory_only.len(), Ordering::SeqCst);
                }
                _ => {}
            }
        }
    }

    fn put_memory_only(&self, key: Vec<u8>, value: Vec<u8>) {
        let mut memory_only = self.memory_only.write();
        memory_only.insert(key, value);
        self.memory_only_len
            .store(memory_only.len(), Ordering::SeqCst);
    }

    fn remove_memory_only(&self, key: &[u8]) {
        if self.memory_only_len.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut memory_only = self.memory_only.write();
        if memory_only.remove(key).is_some() {
            self.memory_only_len
                .store(memory_only.len(), Ordering::SeqCst);
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
