//! Version hints: the newest data version of recently committed or read
//! keys, so that a point read can fetch it with a point get instead of a
//! seek.
//!
//! A RocksDB point get stops at the first level that holds the key (for a
//! key updated recently, the memtable), guided by bloom filters; a seek for
//! `key@ts` must position a cursor in every level. A region notes the
//! commit_ts of every Put or Delete its commits write, before writing it
//! (see [`MvccTxn::put_commit`](percolate_mvcc::MvccTxn::put_commit) for
//! why a commit's record is the key's newest data version); a read that
//! had to seek offers the Put it found when the engine vouches that no
//! record of the key is newer; and readers ask here once they have judged
//! the key's lock (the argument is on [`VersionHints`]).
//!
//! A hint counts only once its record is written and only while the
//! engine's write epoch of the key is the one read then: a record of the
//! key written by anything else since (a write straight to the engine, say)
//! moves the epoch on, and the read seeks as it would without hints.
//!
//! The table is a fixed array of slots, each holding one key and its
//! version, a key going to the slot its hash picks: a newer key in the
//! same slot pushes the older one out, and a key that is not in its slot
//! is simply read with a seek. Its memory is bounded: 65,536 slots per
//! region (about 2 MiB with short keys).

use parking_lot::Mutex;
use percolate_mvcc::{Key, TimeStamp, VersionHints};

/// Shards of the slot array, each behind its own lock.
const SHARDS: usize = 64;

/// Slots per shard.
const SLOTS_PER_SHARD: usize = 1024;

/// A key, its newest data version, and the engine's write epoch once the
/// version is written (`None` until then); or nothing.
type Slot = Option<(Key, TimeStamp, Option<u64>)>;

/// The newest data versions of recently committed keys.
pub(crate) struct VersionCache {
    shards: Box<[Mutex<Vec<Slot>>]>,
}

impl std::fmt::Debug for VersionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionCache").finish_non_exhaustive()
    }
}

impl Default for VersionCache {
    fn default() -> Self {
        VersionCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }
}

impl VersionCache {
    /// Notes that `key`'s newest data version is (about to be) `commit_ts`,
    /// unconfirmed. Called before the record is written.
    pub(crate) fn note(&self, key: &Key, commit_ts: TimeStamp) {
        let (shard, slot) = place(key);
        let mut slots = self.shards[shard].lock();
        if slots.is_empty() {
            slots.resize(SLOTS_PER_SHARD, None);
        }
        match &mut slots[slot] {
            // Commits of one key write ascending versions; a retried
            // command may note an old one again, which changes nothing.
            Some((held, version, epoch)) if held == key => {
                if commit_ts > *version {
                    *version = commit_ts;
                    *epoch = None;
                }
            }
            // Another key's slot: take it over.
            Some((held, version, epoch)) => {
                take_over(held, key);
                *version = commit_ts;
                *epoch = None;
            }
            empty @ None => *empty = Some((key.clone(), commit_ts, None)),
        }
    }

    /// Confirms `key`'s noted version `commit_ts` once its record is
    /// written, at the engine's write epoch of the key read after the write
    /// (`None`: the engine keeps none, and the hint is never used).
    pub(crate) fn confirm(&self, key: &Key, commit_ts: TimeStamp, write_epoch: Option<u64>) {
        let (shard, slot) = place(key);
        let mut slots = self.shards[shard].lock();
        if let Some(Some((held, version, epoch))) = slots.get_mut(slot) {
            if held == key && *version == commit_ts {
                *epoch = write_epoch;
            }
        }
    }
}

impl VersionHints for VersionCache {
    fn newest_data_version(&self, key: &Key) -> Option<(TimeStamp, u64)> {
        let (shard, slot) = place(key);
        let slots = self.shards[shard].lock();
        match slots.get(slot)? {
            Some((held, version, Some(epoch))) if held == key => Some((*version, *epoch)),
            _ => None,
        }
    }

    fn offer(&self, key: &Key, version: TimeStamp, epoch: u64) {
        let (shard, slot) = place(key);
        let mut slots = self.shards[shard].lock();
        if slots.is_empty() {
            slots.resize(SLOTS_PER_SHARD, None);
        }
        match &mut slots[slot] {
            // A commit noted this version or a newer one: its confirmation
            // (or its failure) decides.
            Some((held, noted, _)) if held == key && *noted >= version => {}
            Some((held, noted, confirmed)) if held == key => {
                *noted = version;
                *confirmed = Some(epoch);
            }
            Some((held, noted, confirmed)) => {
                take_over(held, key);
                *noted = version;
                *confirmed = Some(epoch);
            }
            empty @ None => *empty = Some((key.clone(), version, Some(epoch))),
        }
    }
}

/// Makes a slot's key `key`, reusing the buffer of the key it held.
fn take_over(held: &mut Key, key: &Key) {
    let mut buf = std::mem::replace(held, Key::from_encoded(Vec::new())).into_encoded();
    buf.clear();
    buf.extend_from_slice(key.as_encoded());
    *held = Key::from_encoded(buf);
}

/// The shard and slot of `key`: FNV-1a over its encoded bytes.
fn place(key: &Key) -> (usize, usize) {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.as_encoded() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let slot = (hash as usize) % (SHARDS * SLOTS_PER_SHARD);
    (slot / SLOTS_PER_SHARD, slot % SLOTS_PER_SHARD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_its_newest_noted_version() {
        let cache = VersionCache::default();
        let (a, b) = (Key::from_raw(b"a"), Key::from_raw(b"b"));
        assert_eq!(cache.newest_data_version(&a), None);
        cache.note(&a, TimeStamp::new(10));
        cache.note(&a, TimeStamp::new(30));
        // Not confirmed yet: no hint.
        assert_eq!(cache.newest_data_version(&a), None);
        cache.confirm(&a, TimeStamp::new(30), Some(7));
        cache.note(&a, TimeStamp::new(20));
        assert_eq!(cache.newest_data_version(&a), Some((TimeStamp::new(30), 7)));
        // A confirmation of an older version changes nothing.
        cache.confirm(&a, TimeStamp::new(20), Some(9));
        assert_eq!(cache.newest_data_version(&a), Some((TimeStamp::new(30), 7)));
        // A newer version is unconfirmed until written.
        cache.note(&a, TimeStamp::new(40));
        assert_eq!(cache.newest_data_version(&a), None);
        assert_eq!(cache.newest_data_version(&b), None);
    }

    #[test]
    fn a_read_offers_versions_but_never_over_a_newer_note() {
        let cache = VersionCache::default();
        let a = Key::from_raw(b"a");
        cache.offer(&a, TimeStamp::new(10), 3);
        assert_eq!(cache.newest_data_version(&a), Some((TimeStamp::new(10), 3)));
        // A commit notes a newer version: a read that found an older one
        // (it sought before the commit's write) leaves it alone, confirmed
        // or not.
        cache.note(&a, TimeStamp::new(20));
        cache.offer(&a, TimeStamp::new(10), 3);
        assert_eq!(cache.newest_data_version(&a), None);
        cache.confirm(&a, TimeStamp::new(20), Some(4));
        cache.offer(&a, TimeStamp::new(20), 9);
        assert_eq!(cache.newest_data_version(&a), Some((TimeStamp::new(20), 4)));
        // A newer version found by a read replaces it.
        cache.offer(&a, TimeStamp::new(30), 5);
        assert_eq!(cache.newest_data_version(&a), Some((TimeStamp::new(30), 5)));
    }

    #[test]
    fn a_key_pushed_out_of_its_slot_has_no_hint() {
        let cache = VersionCache::default();
        let first = Key::from_raw(b"first");
        let slot = place(&first);
        let other = (0u32..)
            .map(|i| Key::from_raw(format!("other-{i}").as_bytes()))
            .find(|k| place(k) == slot)
            .expect("some key shares the slot");
        cache.note(&first, TimeStamp::new(5));
        cache.confirm(&first, TimeStamp::new(5), Some(1));
        cache.note(&other, TimeStamp::new(7));
        cache.confirm(&other, TimeStamp::new(7), Some(2));
        assert_eq!(cache.newest_data_version(&first), None);
        assert_eq!(
            cache.newest_data_version(&other),
            Some((TimeStamp::new(7), 2))
        );
    }
}
