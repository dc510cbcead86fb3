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

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use crate::mem::{BuildKeyHasher, key_hash};
use crate::{Cf, Modify, WriteBatch};

/// Shards of the table, each behind its own lock.
const SHARDS: usize = 64;

/// Hashed a word at a time: a lookup should cost less than the RocksDB get
/// it replaces.
type Shard = HashMap<Vec<u8>, Vec<u8>, BuildKeyHasher>;

/// A shard of memory-only locks, in key order.
type OrderedShard = BTreeMap<Vec<u8>, Vec<u8>>;

/// Whether a lock-CF record is kept in memory only: a pessimistic lock
/// (lock type `S`, the first byte of TiKV's lock encoding). See
/// [`RocksEngine`](crate::RocksEngine)'s docs.
pub(crate) fn is_memory_only(cf: Cf, value: &[u8]) -> bool {
    cf == Cf::Lock && value.first() == Some(&b'S')
}

/// Shards of the memory-only locks. Fewer than [`SHARDS`]: a lock-CF
/// cursor opened while any exist visits each of them.
const MEMORY_SHARDS: usize = 16;

/// The live locks: key (without the data prefix) to lock bytes.
///
/// A lock RocksDB holds is in `shards`; a memory-only one in
/// `memory_only`, never in both. Both are sharded by the key's hash, so
/// that writers on different keys seldom meet on a lock.
pub(crate) struct LockMirror {
    shards: Box<[RwLock<Shard>]>,
    /// Entries of `shards`.
    len: AtomicUsize,
    /// The locks written since the database opened that RocksDB does not
    /// hold (pessimistic locks), in key order within each shard, for
    /// cursors.
    memory_only: Box<[RwLock<OrderedShard>]>,
    /// Entries of `memory_only`, so that a lookup or a cursor while there
    /// are none takes no lock.
    memory_only_len: AtomicUsize,
    /// Writes that put locks RocksDB holds: counted before RocksDB applies
    /// them ([`begin_puts`](Self::begin_puts)) and after the mirror does
    /// ([`end_puts`](Self::end_puts)), so that a snapshot can tell it holds
    /// none of those locks ([`quiet`](Self::quiet)).
    puts_begun: AtomicU64,
    puts_done: AtomicU64,
}

impl LockMirror {
    /// A mirror of `locks`, which RocksDB holds.
    pub(crate) fn new(locks: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Self {
        let mirror = LockMirror {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            len: AtomicUsize::new(0),
            memory_only: (0..MEMORY_SHARDS).map(|_| RwLock::default()).collect(),
            memory_only_len: AtomicUsize::new(0),
            puts_begun: AtomicU64::new(0),
            puts_done: AtomicU64::new(0),
        };
        for (key, value) in locks {
            mirror.put(key, value);
        }
        mirror
    }

    /// Counts a write of `batch` as begun if it puts a lock RocksDB holds
    /// (not a memory-only one); returns whether it did. Called before
    /// RocksDB applies the batch; [`end_puts`](Self::end_puts) must follow
    /// a `true`, after the mirror applied it (or the write failed).
    pub(crate) fn begin_puts(&self, batch: &WriteBatch) -> bool {
        let puts = batch.modifies().iter().any(|modify| {
            matches!(modify, Modify::Put { cf: Cf::Lock, value, .. } if !is_memory_only(Cf::Lock, value))
        });
        if puts {
            self.puts_begun.fetch_add(1, Ordering::SeqCst);
        }
        puts
    }

    /// Ends a write [`begin_puts`](Self::begin_puts) counted.
    pub(crate) fn end_puts(&self) {
        self.puts_done.fetch_add(1, Ordering::SeqCst);
    }

    /// Called just before a RocksDB snapshot is taken: `Some(token)` when
    /// no write putting locks is under way and the mirror holds none that
    /// RocksDB holds. The snapshot then holds none either if
    /// [`still_quiet`](Self::still_quiet)`(token)` holds just after it was
    /// taken.
    ///
    /// Why: a lock in the snapshot was put by a write that began before
    /// the snapshot. If it began after `puts_begun` was read here, the
    /// count moved before `still_quiet` reads it again. If it began
    /// before, it was also done before `puts_done` was read (done equals
    /// begun, and done never passes begun), so the mirror had the lock
    /// before `len` was read; the mirror holding none then, the lock's
    /// delete was applied to RocksDB before, and before the snapshot. (A
    /// memory-only lock never replaces one RocksDB holds: a pessimistic
    /// lock is only taken on a key without another lock, or over the
    /// transaction's own pessimistic lock.)
    pub(crate) fn quiet(&self) -> Option<u64> {
        let done = self.puts_done.load(Ordering::SeqCst);
        let begun = self.puts_begun.load(Ordering::SeqCst);
        (done == begun && self.len.load(Ordering::SeqCst) == 0).then_some(begun)
    }

    /// See [`quiet`](Self::quiet).
    pub(crate) fn still_quiet(&self, token: u64) -> bool {
        self.puts_begun.load(Ordering::SeqCst) == token
    }

    /// Whether no lock is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::SeqCst) == 0 && self.memory_only_len.load(Ordering::SeqCst) == 0
    }

    /// The lock stored under `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.get_held_in_rocksdb(key)
            .or_else(|| self.memory_only_get(key))
    }

    /// The lock stored under `key` if RocksDB holds it (not a memory-only
    /// one).
    pub(crate) fn get_held_in_rocksdb(&self, key: &[u8]) -> Option<Vec<u8>> {
        if self.len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.shards[shard(key)].read().get(key).cloned()
    }

    /// Whether RocksDB holds a lock for `key`.
    pub(crate) fn holds_in_rocksdb(&self, key: &[u8]) -> bool {
        self.len.load(Ordering::SeqCst) > 0 && self.shards[shard(key)].read().contains_key(key)
    }

    /// Whether `key`'s lock is one RocksDB does not hold.
    pub(crate) fn holds_memory_only(&self, key: &[u8]) -> bool {
        self.memory_only_len.load(Ordering::SeqCst) > 0
            && self.memory_only[memory_shard(key)].read().contains_key(key)
    }

    /// `key`'s lock if RocksDB does not hold it.
    pub(crate) fn memory_only_get(&self, key: &[u8]) -> Option<Vec<u8>> {
        if self.memory_only_len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.memory_only[memory_shard(key)].read().get(key).cloned()
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
        let mut entries = Vec::new();
        let mut shards_with_entries = 0;
        for shard in self.memory_only.iter() {
            let before = entries.len();
            entries.extend(
                shard
                    .read()
                    .range::<[u8], _>((start, end))
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            shards_with_entries += usize::from(entries.len() > before);
        }
        // Each shard's run is sorted; runs from several shards interleave.
        if shards_with_entries > 1 {
            entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        Some(entries)
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
                } => self.put_lock(Cow::Borrowed(key), value.clone()),
                other => self.apply_removal(other),
            }
        }
    }

    /// [`apply`](Self::apply), moving the keys and values of `batch`'s lock
    /// puts into the mirror instead of copying them (those records are left
    /// empty).
    pub(crate) fn apply_taking(&self, batch: &mut WriteBatch) {
        for modify in batch.modifies_mut() {
            match modify {
                Modify::Put {
                    cf: Cf::Lock,
                    key,
                    value,
                } => self.put_lock(Cow::Owned(std::mem::take(key)), std::mem::take(value)),
                other => self.apply_removal(other),
            }
        }
    }

    /// A lock put: into the table of memory-only locks or of those RocksDB
    /// holds, as its bytes say. The new lock goes in before an old one
    /// leaves the other table: a reader meanwhile finds one or the other.
    /// `key` is copied when borrowed, or when the other table holds it too.
    fn put_lock(&self, key: Cow<'_, [u8]>, value: Vec<u8>) {
        if is_memory_only(Cf::Lock, &value) {
            if self.holds_in_rocksdb(&key) {
                self.put_memory_only(key.to_vec(), value);
                self.remove(&key);
            } else {
                self.put_memory_only(key.into_owned(), value);
            }
        } else if self.holds_memory_only(&key) {
            self.put(key.to_vec(), value);
            self.remove_memory_only(&key);
        } else {
            self.put(key.into_owned(), value);
        }
    }

    /// A lock delete or a lock range delete of a written batch; nothing
    /// for any other record.
    fn apply_removal(&self, modify: &Modify) {
        match modify {
            Modify::Delete { cf: Cf::Lock, key } => {
                self.remove_memory_only(key);
                self.remove(key);
            }
            Modify::DeleteRange {
                cf: Cf::Lock,
                start,
                end,
            } => self.delete_range(start, end),
            _ => {}
        }
    }

    fn delete_range(&self, start: &[u8], end: &[u8]) {
        let outside = |key: &Vec<u8>| key.as_slice() < start || key.as_slice() >= end;
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            let before = shard.len();
            shard.retain(|key, _| outside(key));
            self.len.fetch_sub(before - shard.len(), Ordering::SeqCst);
        }
        for shard in self.memory_only.iter() {
            let mut shard = shard.write();
            let before = shard.len();
            shard.retain(|key, _| outside(key));
            self.memory_only_len
                .fetch_sub(before - shard.len(), Ordering::SeqCst);
        }
    }

    fn put_memory_only(&self, key: Vec<u8>, value: Vec<u8>) {
        let mut shard = self.memory_only[memory_shard(&key)].write();
        if shard.insert(key, value).is_none() {
            self.memory_only_len.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn remove_memory_only(&self, key: &[u8]) {
        if self.memory_only_len.load(Ordering::SeqCst) == 0 {
            return;
        }
        if self.memory_only[memory_shard(key)]
            .write()
            .remove(key)
            .is_some()
        {
            self.memory_only_len.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn remove(&self, key: &[u8]) {
        if self.len.load(Ordering::SeqCst) == 0 {
            return;
        }
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
    // The shard's table hashes the key again (with the length first):
    // the high bits of this one pick the shard.
    (key_hash(key) >> 58) as usize % SHARDS
}

fn memory_shard(key: &[u8]) -> usize {
    shard(key) % MEMORY_SHARDS
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

    #[test]
    fn keeps_memory_only_locks_apart_and_lists_them_in_key_order() {
        keeps_memory_only_locks_apart(|mirror, batch| mirror.apply(batch));
    }

    #[test]
    fn keeps_memory_only_locks_apart_when_taking_their_bytes() {
        keeps_memory_only_locks_apart(LockMirror::apply_taking);
    }

    #[test]
    fn taking_empties_only_the_lock_puts() {
        let mirror = LockMirror::new([(b"a".to_vec(), b"P-on-disk".to_vec())]);
        let mut batch = WriteBatch::new();
        batch.put(Cf::Lock, b"a".to_vec(), b"S-over-disk".to_vec());
        batch.put(Cf::Lock, b"b".to_vec(), b"P".to_vec());
        batch.put(Cf::Write, b"w".to_vec(), b"kept".to_vec());
        batch.delete(Cf::Lock, b"c".to_vec());
        mirror.apply_taking(&mut batch);
        // Every lock put's bytes moved into the mirror (the key also in
        // the other table too, after its removal there); the rest stays.
        let left: Vec<(&[u8], &[u8])> = batch
            .modifies()
            .iter()
            .map(|m| match m {
                Modify::Put { key, value, .. } => (key.as_slice(), value.as_slice()),
                Modify::Delete { key, .. } => (key.as_slice(), &b"-"[..]),
                Modify::DeleteRange { .. } => unreachable!("none put"),
            })
            .collect();
        assert_eq!(
            left,
            [
                (&b""[..], &b""[..]),
                (&b""[..], &b""[..]),
                (&b"w"[..], &b"kept"[..]),
                (&b"c"[..], &b"-"[..]),
            ]
        );
        assert_eq!(mirror.get(b"a"), Some(b"S-over-disk".to_vec()));
        assert!(mirror.holds_memory_only(b"a") && !mirror.holds_in_rocksdb(b"a"));
        assert_eq!(mirror.get(b"b"), Some(b"P".to_vec()));
        assert_eq!(mirror.get(b"w"), None);
    }

    fn keeps_memory_only_locks_apart(apply: fn(&LockMirror, &mut WriteBatch)) {
        let mirror = LockMirror::new([(vec![b'k', 0], b"P-from-disk".to_vec())]);
        let mut batch = WriteBatch::new();
        // Enough keys to land in several shards.
        for i in (0..40u8).rev() {
            batch.put(Cf::Lock, vec![b'k', i], vec![b'S', i]);
        }
        apply(&mirror, &mut batch);
        // The memory-only lock replaced the one RocksDB held.
        assert!(!mirror.holds_in_rocksdb(&[b'k', 0]));
        assert!(mirror.holds_memory_only(&[b'k', 0]));
        assert_eq!(mirror.get(&[b'k', 7]), Some(vec![b'S', 7]));
        assert_eq!(mirror.memory_only_get(&[b'k', 7]), Some(vec![b'S', 7]));
        let listed = mirror
            .memory_only_range(Some(&[b'k', 5]), Some(&[b'k', 30]))
            .unwrap();
        let keys: Vec<Vec<u8>> = listed.into_iter().map(|(k, _)| k).collect();
        let expected: Vec<Vec<u8>> = (5..30u8).map(|i| vec![b'k', i]).collect();
        assert_eq!(keys, expected);
        // A prewrite lock replaces a pessimistic one; RocksDB holds it.
        let mut batch = WriteBatch::new();
        batch.put(Cf::Lock, vec![b'k', 7], b"P".to_vec());
        batch.delete(Cf::Lock, vec![b'k', 8]);
        batch.delete_range(Cf::Lock, vec![b'k', 20], vec![b'k', 40]);
        apply(&mirror, &mut batch);
        assert!(mirror.holds_in_rocksdb(&[b'k', 7]));
        assert!(!mirror.holds_memory_only(&[b'k', 7]));
        assert_eq!(mirror.get(&[b'k', 7]), Some(b"P".to_vec()));
        assert_eq!(mirror.get(&[b'k', 8]), None);
        assert_eq!(mirror.memory_only_len.load(Ordering::SeqCst), 40 - 2 - 20);
        assert_eq!(mirror.len.load(Ordering::SeqCst), 1);
        let all = mirror.memory_only_range(None, None).unwrap();
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(all.len(), 18);
        assert!(!mirror.is_empty());
    }
}
