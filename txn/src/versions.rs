//! Version hints: the newest data version of recently committed or read
//! keys, so that a point read can fetch it with a point get instead of a
//! seek.
//!
//! A RocksDB point get stops at the first level that holds the key (for a
//! key updated recently, the memtable), guided by bloom filters; a seek for
//! `key@ts` must position a cursor in every level. A region records the
//! commit_ts of every Put or Delete its commits write, once written and
//! before the commit lets go of the key's latches (see
//! [`MvccTxn::put_commit`](percolate_mvcc::MvccTxn::put_commit) for why a
//! commit's record is the key's newest data version); a read that had to
//! seek offers the Put it found when the engine vouches that no record of
//! the key is newer; and readers ask here once they have judged the key's
//! lock (the argument is on [`VersionHints`]).
//!
//! A hint counts only once its record is written and only while the
//! engine's write epoch of the key is the one read then: a record of the
//! key written by anything else since (a write straight to the engine, say)
//! moves the epoch on, and the read seeks as it would without hints.
//!
//! A hint also holds its version's record when it is short enough (up to
//! [`RECORD_WORDS`] words: a Put whose value is inlined up to about 145
//! bytes, any Delete, any Put of a long value), so that a read of a hinted
//! key makes no engine lookup at all: commits hand over the records they
//! write, and a read that looked a record up fills it in. A record at
//! `key@commit_ts` changes only by an overlapped rollback's flag, which
//! reads ignore and whose write moves the epoch (see [`VersionHints`],
//! also for GC), so a copy is as good as the engine's.
//!
//! The table is a fixed array of slots, each holding one key (inline, up to
//! [`KEY_WORDS`] words of its encoded bytes), its version and its record, a
//! key going to one of the [`WAYS`] slots side by side that its hash
//! picks: a key with no slot of its own takes an empty one or pushes out
//! the one with the oldest version, and a key that is in none of them, or
//! too long to be held, is simply read with a seek. A slot's length word
//! also holds 32 bits of its key's hash, so a lookup passes over another
//! key's slot having read one word of it. (With one slot per key, the hot
//! keys of YCSB-A over 100,000 records found no hint in 14% of reads, with
//! two in 9.7%; uniform 4-key transfers over 100,000 records found none in
//! 7.7% of their reads with two, and in 2.4% with four. A seek costs
//! several times a hinted read.) Its memory is
//! bounded by [`StorageConfig::version_hint_bytes`](crate::storage::StorageConfig::version_hint_bytes):
//! by default 262,144 slots of 256 bytes per region (64 MiB), zeroed
//! memory from the kernel ([`ZeroedTable`](percolate_engine::mem::ZeroedTable),
//! in huge pages where it can) that takes room as keys touch it, so a
//! region that has seen a few thousand keys has most of it; a client of N
//! regions holds up to N x 64 MiB. (At 16 MiB, uniform point reads over 100,000 keys found a
//! hint in about half their reads and ran at 0.66x TransactionDB's gets;
//! at 64 MiB, 1.2x: a seek of an unhinted key costs several hinted reads.)
//!
//! Every point read asks here, from every thread, so a lookup writes
//! nothing shared: each slot is a sequence lock. Writers (one per shard at
//! a time, under the shard's mutex) make the slot's sequence odd, change
//! it, and make it even again; a reader reads the sequence, the slot and
//! the sequence again, and takes what it read only if the sequence was even
//! and unchanged. A reader that meets a writer gets no hint and seeks.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use parking_lot::{Mutex, MutexGuard};
use percolate_mvcc::{Key, TimeStamp, VersionHints};

/// Shards of the slot array, each allocated on first use and written under
/// its own mutex.
const SHARDS: usize = 64;

/// The table's size unless configured otherwise: 262,144 slots (64 MiB),
/// room for the newest version of a quarter of a million keys.
pub(crate) const DEFAULT_BYTES: usize = 64 << 20;

/// Words of a key held inline: encoded keys of up to 56 bytes (raw keys of
/// up to 47 bytes) can have hints.
const KEY_WORDS: usize = 7;

/// Words of a version's record held inline: records of up to 160 bytes.
const RECORD_WORDS: usize = 20;

/// The slots side by side that a key may be held in.
const WAYS: usize = 4;

/// The epoch of a slot whose version's epoch is not known (a write of its
/// bucket was in flight when its commit read it): no read takes the hint
/// until a read offers the version at a known epoch.
const NO_EPOCH: u64 = u64::MAX;

/// One key's hint: four cache lines, its fields in this order (`repr(C)`:
/// left to the compiler, the sequence may land in a line that a prefetch
/// of the slot's first lines misses; see [`Slot::lines`]).
#[derive(Default)]
#[repr(C, align(64))]
struct Slot {
    /// Odd while a writer changes the slot; bumped twice per change.
    seq: AtomicU64,
    /// The key's length in bytes plus one, and 32 bits of its hash above
    /// (see [`Packed::len`]); 0 for an empty slot.
    len: AtomicU64,
    /// Its newest data version.
    version: AtomicU64,
    /// The engine's write epoch at which that version was known to be the
    /// newest, or [`NO_EPOCH`].
    epoch: AtomicU64,
    /// The length in bytes of the version's record; 0: not held (a record
    /// is never empty).
    record_len: AtomicU64,
    /// Its encoded bytes, eight to a word, the last word padded with zeros.
    key: [AtomicU64; KEY_WORDS],
    /// The record's bytes, packed as the key's.
    record: [AtomicU64; RECORD_WORDS],
}

/// What a slot holds, read consistently (without the record's bytes).
struct Held {
    len: u64,
    version: u64,
    epoch: u64,
    record_len: u64,
    key: [u64; KEY_WORDS],
}

/// Packs `bytes` eight to a word, the last word padded with zeros.
fn pack<const N: usize>(bytes: &[u8]) -> [u64; N] {
    let mut words = [0u64; N];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut buf = [0u8; 8];
        buf[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_le_bytes(buf);
    }
    words
}

/// A record short enough to be held, packed.
struct PackedRecord {
    len: u64,
    words: [u64; RECORD_WORDS],
}

impl PackedRecord {
    fn new(record: &[u8]) -> Option<PackedRecord> {
        (!record.is_empty() && record.len() <= RECORD_WORDS * 8).then(|| PackedRecord {
            len: record.len() as u64,
            words: pack(record),
        })
    }
}

/// A key as the table compares it: its packed words, its length word
/// and its slots.
struct Packed {
    /// Its length in bytes plus one, and above, from bit 32, the high half
    /// of its hash: a slot holding another key almost never has the same
    /// length word.
    len: u64,
    key: [u64; KEY_WORDS],
    shard: usize,
    /// The first of its [`WAYS`] slots in the shard.
    slot: usize,
}

/// The key hash of the encoded key `bytes`, its shard and the first of its
/// [`WAYS`] slots there (a multiple of `WAYS`), in a table of
/// `slots_per_shard` slots per shard (a multiple of `WAYS`, not 0): the
/// shard from the hash's top bits, the set of slots from its low 32 bits
/// scaled to the shard's sets (no division).
fn slots_of(bytes: &[u8], slots_per_shard: usize) -> (u64, usize, usize) {
    const _: () = assert!(SHARDS.is_power_of_two());
    let hash = percolate_engine::mem::key_hash(bytes);
    let shard = (hash >> (64 - SHARDS.trailing_zeros())) as usize;
    let sets = (slots_per_shard / WAYS) as u64;
    let set = ((hash & 0xffff_ffff) * sets) >> 32;
    (hash, shard, set as usize * WAYS)
}

impl Packed {
    /// `None` for a key too long to be held inline.
    /// `None` also for a table without slots.
    fn new(key: &Key, slots_per_shard: usize) -> Option<Packed> {
        let bytes = key.as_encoded();
        if bytes.len() > KEY_WORDS * 8 || slots_per_shard == 0 {
            return None;
        }
        let (hash, shard, slot) = slots_of(bytes, slots_per_shard);
        Some(Packed {
            len: (hash & !0xffff_ffff) | (bytes.len() as u64 + 1),
            key: pack(bytes),
            shard,
            slot,
        })
    }

    fn is_held_in(&self, held: &Held) -> bool {
        held.len == self.len && held.key == self.key
    }
}

impl Slot {
    /// A word in each of the slot's cache lines, for prefetching. (The
    /// slot is `repr(C)`: with its fields in this order, the header and
    /// the key share the first two lines with the record's head, so a
    /// lookup reads two lines.)
    fn lines(&self) -> [&AtomicU64; 4] {
        const _: () = {
            use std::mem::{offset_of, size_of};
            assert!(size_of::<Slot>() == 4 * 64);
            assert!(offset_of!(Slot, seq) == 0);
            assert!(offset_of!(Slot, key) + 3 * 8 == 64);
            assert!(offset_of!(Slot, record) + 4 * 8 == 2 * 64);
            assert!(offset_of!(Slot, record) + 12 * 8 == 3 * 64);
        };
        [&self.seq, &self.key[3], &self.record[4], &self.record[12]]
    }

    /// What the slot holds, or `None` if a writer was changing it. With
    /// `want`, also the record's bytes when held and the slot holds that
    /// key (appended to the buffer).
    fn read(&self, mut want: Option<(&Packed, &mut Vec<u8>)>) -> Option<Held> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 == 1 {
            return None;
        }
        let held = Held {
            len: self.len.load(Ordering::Relaxed),
            version: self.version.load(Ordering::Relaxed),
            epoch: self.epoch.load(Ordering::Relaxed),
            record_len: self.record_len.load(Ordering::Relaxed),
            key: std::array::from_fn(|i| self.key[i].load(Ordering::Relaxed)),
        };
        let mut words = [0u64; RECORD_WORDS];
        let record_words = (held.record_len as usize).div_ceil(8).min(RECORD_WORDS);
        let copy = want.as_ref().is_some_and(|(key, _)| key.is_held_in(&held));
        if copy {
            for (word, atomic) in words[..record_words].iter_mut().zip(&self.record) {
                *word = atomic.load(Ordering::Relaxed);
            }
        }
        // Orders the reads above before the second read of the sequence.
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != seq {
            return None;
        }
        if let (true, Some((_, record))) = (copy, want.as_mut()) {
            let len = (held.record_len as usize).min(RECORD_WORDS * 8);
            let mut bytes = [0u8; RECORD_WORDS * 8];
            for (chunk, word) in bytes.chunks_exact_mut(8).zip(&words[..record_words]) {
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            record.extend_from_slice(&bytes[..len]);
        }
        Some(held)
    }

    /// Replaces what the slot holds; its record only with `Some`. Only
    /// under its shard's mutex.
    fn write(&self, key: &Packed, version: u64, epoch: u64, record: Option<&PackedRecord>) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        // Orders the odd sequence before the changes below.
        fence(Ordering::Release);
        self.len.store(key.len, Ordering::Relaxed);
        self.version.store(version, Ordering::Relaxed);
        self.epoch.store(epoch, Ordering::Relaxed);
        for (word, value) in self.key.iter().zip(key.key) {
            word.store(value, Ordering::Relaxed);
        }
        match record {
            Some(record) => {
                let words = (record.len as usize).div_ceil(8);
                for (word, value) in self.record.iter().zip(&record.words[..words]) {
                    word.store(*value, Ordering::Relaxed);
                }
                self.record_len.store(record.len, Ordering::Relaxed);
            }
            None => self.record_len.store(0, Ordering::Relaxed),
        }
        self.seq.store(seq + 2, Ordering::Release);
    }

    /// Changes only the slot's epoch. Only under its shard's mutex.
    fn set_epoch(&self, epoch: u64) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.epoch.store(epoch, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }

    /// What the slot holds, for its writer (under the shard's mutex).
    fn held(&self) -> Held {
        self.read(None).expect("writers hold the shard's mutex")
    }
}

// SAFETY: a slot is `repr(C)` atomics and arrays of them; all zeros is
// an empty slot (sequence 0, length 0), as `Slot::default()`.
#[allow(unsafe_code)]
unsafe impl percolate_engine::mem::Zeroable for Slot {}

/// The newest data versions of recently committed keys.
pub(crate) struct VersionCache {
    /// Every shard's slots, shard after shard: zeroed memory that the
    /// kernel backs (with huge pages where it can) as keys touch it.
    slots: percolate_engine::mem::ZeroedTable<Slot>,
    /// The mutex each shard's writers take.
    writers: Box<[Mutex<()>]>,
    /// Slots per shard: a multiple of [`WAYS`], or 0 for a table that
    /// holds nothing.
    slots_per_shard: usize,
}

impl Default for VersionCache {
    fn default() -> Self {
        Self::with_bytes(DEFAULT_BYTES)
    }
}

impl std::fmt::Debug for VersionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionCache").finish_non_exhaustive()
    }
}

impl VersionCache {
    /// A table of at most `bytes` (rounded down to whole sets of [`WAYS`]
    /// slots per shard; below one set per shard, a table that holds
    /// nothing and answers every read with no hint).
    pub(crate) fn with_bytes(bytes: usize) -> Self {
        let sets = bytes / std::mem::size_of::<Slot>() / SHARDS / WAYS;
        // A size the machine cannot map leaves the storage without hints
        // (every read seeks) rather than failing it.
        let (slots, sets) = match percolate_engine::mem::ZeroedTable::try_new(SHARDS * sets * WAYS)
        {
            Some(slots) => (slots, sets),
            None => (percolate_engine::mem::ZeroedTable::new(0), 0),
        };
        VersionCache {
            slots,
            writers: (0..SHARDS).map(|_| Mutex::new(())).collect(),
            slots_per_shard: sets * WAYS,
        }
    }

    /// `key` packed, with its slots in this table.
    fn pack(&self, key: &Key) -> Option<Packed> {
        Packed::new(key, self.slots_per_shard)
    }

    /// Starts bringing `key`'s slots into the CPU's caches, every line of
    /// them (a commit writes one whole).
    pub(crate) fn prefetch(&self, key: &Key) {
        let bytes = key.as_encoded();
        if bytes.len() > KEY_WORDS * 8 || self.slots_per_shard == 0 {
            return;
        }
        let (_, shard, first) = slots_of(bytes, self.slots_per_shard);
        for slot in self.shard_slots(shard)[first..first + WAYS].iter() {
            for word in slot.lines() {
                percolate_engine::mem::prefetch(word);
            }
        }
    }

    /// The slots of shard `shard`.
    fn shard_slots(&self, shard: usize) -> &[Slot] {
        let start = shard * self.slots_per_shard;
        &self.slots[start..start + self.slots_per_shard]
    }

    /// `key`'s slots, for a writer: under the shard's mutex, taken
    /// here; `None` only with `wait` false when another writer holds it
    /// (what readers hand over, offers and records, is only ever an
    /// optimisation, and a reader that waited for a writer preempted under
    /// the mutex would wait out its time slice).
    fn ways_mut(&self, key: &Packed, wait: bool) -> Option<(Ways<'_>, MutexGuard<'_, ()>)> {
        let writer = &self.writers[key.shard];
        let guard = if wait {
            writer.lock()
        } else {
            writer.try_lock()?
        };
        Some((Ways::new(self.shard_slots(key.shard), key), guard))
    }

    /// Records that `key`'s newest data version is now `commit_ts`, whose
    /// `record` a commit has just written, at the engine's write epoch of
    /// the key read after the write (`None`: a write of the key's bucket
    /// was in flight, or the engine keeps no epochs; the hint is not used
    /// until a read offers it at a known epoch).
    ///
    /// Only while the commit still holds the key's latches: no other
    /// commit of the key can write between the commit's write and this
    /// call, so the epoch read after the write vouches for this version
    /// and no newer one. Readers need no note before the write: the
    /// engine moves the key's epoch before the write is applied, so a
    /// hint held from before no longer matches once the write can be seen.
    pub(crate) fn record(
        &self,
        key: &Key,
        commit_ts: TimeStamp,
        record: &[u8],
        write_epoch: Option<u64>,
    ) {
        let Some(key) = self.pack(key) else {
            return;
        };
        let (ways, _writer) = self.ways_mut(&key, true).expect("waited");
        let (slot, held) = ways.place(&key);
        // Commits of one key write ascending versions; a retried commit
        // writes its version again, perhaps with other bytes (an
        // overlapped rollback's flag), which it brings here.
        if key.is_held_in(&held) && commit_ts.into_inner() < held.version {
            return;
        }
        let record = PackedRecord::new(record);
        slot.write(
            &key,
            commit_ts.into_inner(),
            write_epoch.unwrap_or(NO_EPOCH),
            record.as_ref(),
        );
    }
}

/// The slots a key may be held in, side by side in its shard, so that
/// a few busy keys whose hashes pick the same slots do not push each
/// other out.
struct Ways<'a>([&'a Slot; WAYS]);

impl<'a> Ways<'a> {
    fn new(slots: &'a [Slot], key: &Packed) -> Self {
        Ways(std::array::from_fn(|way| &slots[key.slot + way]))
    }

    /// The slot holding `key`, and what it holds. Under the shard's mutex:
    /// a key is held in at most one of its slots.
    fn find(&self, key: &Packed) -> Option<(&'a Slot, Held)> {
        self.0.iter().find_map(|slot| {
            let held = slot.held();
            key.is_held_in(&held).then_some((*slot, held))
        })
    }

    /// Where `key` goes: the slot holding it, else an empty one, else the
    /// one whose version is the oldest (the smallest commit_ts: a key read
    /// often but written long ago goes before one written recently).
    /// Under the shard's mutex.
    fn place(&self, key: &Packed) -> (&'a Slot, Held) {
        if let Some(found) = self.find(key) {
            return found;
        }
        self.0
            .map(|slot| (slot, slot.held()))
            .into_iter()
            .min_by_key(|(_, held)| (held.len != 0, held.version))
            .expect("a key has slots")
    }
}

impl VersionHints for VersionCache {
    fn newest_data_version(&self, key: &Key, record: &mut Vec<u8>) -> Option<(TimeStamp, u64)> {
        let key = self.pack(key)?;
        for slot in &self.shard_slots(key.shard)[key.slot..key.slot + WAYS] {
            // Another key's slot, almost surely: passed over on one word.
            // (A writer may be changing it: if to this key, no other slot
            // holds it, and no hint is a fine answer.)
            if slot.len.load(Ordering::Relaxed) != key.len {
                continue;
            }
            record.clear();
            match slot.read(Some((&key, record))) {
                Some(held) if key.is_held_in(&held) => {
                    if held.epoch == NO_EPOCH {
                        break;
                    }
                    return Some((TimeStamp::new(held.version), held.epoch));
                }
                // Another key: the key may be in another of its slots (a
                // key is held in one at a time). A writer changing the
                // slot: if it held or takes this key, no other slot holds
                // it, and no hint is the answer; if not, another may.
                Some(_) | None => {}
            }
        }
        record.clear();
        None
    }

    fn offer(&self, key: &Key, version: TimeStamp, epoch: u64) {
        let Some(key) = self.pack(key) else {
            return;
        };
        let Some((ways, _writer)) = self.ways_mut(&key, false) else {
            return;
        };
        let (slot, held) = ways.place(&key);
        if key.is_held_in(&held) {
            // A commit recorded this version or a newer one, or a read
            // offered it. The same version at an older epoch or none (a
            // write of another record in the key's bucket moved the epoch
            // on since, or was in flight when the commit read it): it is
            // still the newest at this read's epoch, so the hint lives
            // again from there, with the record it holds (a record at
            // `key@version` changes only by a flag reads ignore).
            if held.version == version.into_inner() {
                if held.epoch == NO_EPOCH || held.epoch < epoch {
                    slot.set_epoch(epoch);
                }
                return;
            }
            if held.version > version.into_inner() {
                return;
            }
        }
        slot.write(&key, version.into_inner(), epoch, None);
    }

    fn fill(&self, key: &Key, version: TimeStamp, epoch: u64, record: &[u8]) {
        let (Some(key), Some(record)) = (self.pack(key), PackedRecord::new(record)) else {
            return;
        };
        let Some((ways, _writer)) = self.ways_mut(&key, false) else {
            return;
        };
        if let Some((slot, held)) = ways.find(&key) {
            if held.version == version.into_inner() && held.epoch == epoch && held.record_len == 0 {
                slot.write(&key, held.version, held.epoch, Some(&record));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit of `key` at `version` writing `record`, recorded at the
    /// write's `epoch`.
    fn commit(cache: &VersionCache, key: &Key, version: u64, record: &[u8], epoch: u64) {
        cache.record(key, TimeStamp::new(version), record, Some(epoch));
    }

    /// The hint of `key`, without its record.
    fn hint(cache: &VersionCache, key: &Key) -> Option<(TimeStamp, u64)> {
        cache.newest_data_version(key, &mut Vec::new())
    }

    /// The hint of `key` and its record.
    fn hint_and_record(cache: &VersionCache, key: &Key) -> Option<(TimeStamp, u64, Vec<u8>)> {
        let mut record = Vec::new();
        let (version, epoch) = cache.newest_data_version(key, &mut record)?;
        Some((version, epoch, record))
    }

    #[test]
    fn a_commit_recorded_while_its_bucket_was_busy_waits_for_a_read() {
        // A write of another record of a's bucket was in flight when the
        // commit of a@20 read the epoch: no hint until a read that found
        // a@20 the newest offers it at an epoch it read, and then with the
        // record the commit brought.
        let cache = VersionCache::default();
        let a = Key::from_raw(b"a");
        commit(&cache, &a, 10, b"a@10", 3);
        cache.record(&a, TimeStamp::new(20), b"a@20", None);
        assert_eq!(hint(&cache, &a), None);
        // A read that found the older version changes nothing.
        cache.offer(&a, TimeStamp::new(10), 5);
        assert_eq!(hint(&cache, &a), None);
        cache.offer(&a, TimeStamp::new(20), 5);
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(20), 5, b"a@20".to_vec()))
        );
    }

    #[test]
    fn an_offer_revives_a_hint_whose_epoch_moved_on() {
        let cache = VersionCache::default();
        let a = Key::from_raw(b"a");
        commit(&cache, &a, 10, b"a@10", 3);
        // Another record of the bucket moved the epoch to 5; a read that
        // found a@10 the newest at epoch 5 offers it, and the hint keeps
        // its record.
        cache.offer(&a, TimeStamp::new(10), 5);
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(10), 5, b"a@10".to_vec()))
        );
        // An offer at an older epoch changes nothing.
        cache.offer(&a, TimeStamp::new(10), 4);
        assert_eq!(hint(&cache, &a), Some((TimeStamp::new(10), 5)));
        // A retried commit of the version brings the bytes it writes now.
        commit(&cache, &a, 10, b"a@10, again", 10);
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(10), 10, b"a@10, again".to_vec()))
        );
    }

    #[test]
    fn a_hint_carries_the_record_its_commit_wrote_or_a_read_filled() {
        let cache = VersionCache::default();
        let a = Key::from_raw(b"a");
        commit(&cache, &a, 10, b"record@10", 3);
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(10), 3, b"record@10".to_vec()))
        );
        // A read's offer of a newer version comes without a record; a
        // fill for another version or epoch is ignored, one for the hint
        // is kept.
        cache.offer(&a, TimeStamp::new(20), 4);
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(20), 4, Vec::new()))
        );
        cache.fill(&a, TimeStamp::new(10), 4, b"record@10");
        cache.fill(&a, TimeStamp::new(20), 5, b"stale");
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(20), 4, Vec::new()))
        );
        cache.fill(&a, TimeStamp::new(20), 4, b"record@20");
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(20), 4, b"record@20".to_vec()))
        );
        // A newer commit's record replaces it; a record too long to hold
        // leaves only the version.
        let long = vec![7u8; RECORD_WORDS * 8 + 1];
        commit(&cache, &a, 30, &long, 6);
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(30), 6, Vec::new()))
        );
        let longest = vec![9u8; RECORD_WORDS * 8];
        commit(&cache, &a, 40, &longest, 7);
        assert_eq!(
            hint_and_record(&cache, &a),
            Some((TimeStamp::new(40), 7, longest))
        );
    }

    #[test]
    fn a_key_reads_its_newest_recorded_version() {
        let cache = VersionCache::default();
        let (a, b) = (Key::from_raw(b"a"), Key::from_raw(b"b"));
        assert_eq!(hint(&cache, &a), None);
        commit(&cache, &a, 10, b"", 5);
        commit(&cache, &a, 30, b"", 7);
        assert_eq!(hint(&cache, &a), Some((TimeStamp::new(30), 7)));
        // A record of an older version changes nothing.
        commit(&cache, &a, 20, b"", 9);
        assert_eq!(hint(&cache, &a), Some((TimeStamp::new(30), 7)));
        assert_eq!(hint(&cache, &b), None);
    }

    #[test]
    fn a_read_offers_versions_but_never_over_a_newer_commit() {
        let cache = VersionCache::default();
        let a = Key::from_raw(b"a");
        cache.offer(&a, TimeStamp::new(10), 3);
        assert_eq!(hint(&cache, &a), Some((TimeStamp::new(10), 3)));
        // A commit records a newer version: a read that found an older one
        // (it sought before the commit's write) leaves it alone.
        commit(&cache, &a, 20, b"", 4);
        cache.offer(&a, TimeStamp::new(10), 9);
        assert_eq!(hint(&cache, &a), Some((TimeStamp::new(20), 4)));
        // The same version at a newer epoch: taken from there.
        cache.offer(&a, TimeStamp::new(20), 9);
        assert_eq!(hint(&cache, &a), Some((TimeStamp::new(20), 9)));
        // A newer version found by a read replaces it.
        cache.offer(&a, TimeStamp::new(30), 5);
        assert_eq!(hint(&cache, &a), Some((TimeStamp::new(30), 5)));
    }

    #[test]
    fn a_key_pushed_out_of_its_slots_has_no_hint() {
        // One key more than a set of slots holds: the last pushes out the
        // one written longest ago; a key already held stays where it is.
        let cache = VersionCache::default();
        let keys = keys_of_one_set(WAYS + 1);
        let (first, second, third) = (&keys[0], &keys[1], &keys[WAYS]);
        let commit_at = |key: &Key, version: u64| {
            commit(&cache, key, version, b"", version);
        };
        commit_at(first, 5);
        commit_at(second, 7);
        for (i, other) in keys[2..WAYS].iter().enumerate() {
            commit_at(other, 20 + i as u64);
        }
        commit_at(first, 8);
        assert_eq!(hint(&cache, first), Some((TimeStamp::new(8), 8)));
        assert_eq!(hint(&cache, second), Some((TimeStamp::new(7), 7)));
        commit_at(third, 9);
        assert_eq!(hint(&cache, second), None);
        assert_eq!(hint(&cache, first), Some((TimeStamp::new(8), 8)));
        assert_eq!(hint(&cache, third), Some((TimeStamp::new(9), 9)));
        // A read's offer takes a slot the same way.
        cache.offer(second, TimeStamp::new(10), 10);
        assert_eq!(hint(&cache, first), None);
        assert_eq!(hint(&cache, second), Some((TimeStamp::new(10), 10)));
    }

    /// `n` keys whose hash picks the same set of slots.
    fn keys_of_one_set(n: usize) -> Vec<Key> {
        let cache = VersionCache::default();
        let place = |k: &Key| cache.pack(k).map(|p| (p.shard, p.slot));
        let first = Key::from_raw(b"first");
        let mut keys = vec![first.clone()];
        keys.extend(
            (0u32..)
                .map(|i| Key::from_raw(format!("other-{i}").as_bytes()))
                .filter(|k| place(k) == place(&first))
                .take(n - 1),
        );
        keys
    }

    #[test]
    fn a_key_too_long_to_hold_inline_never_has_a_hint() {
        let cache = VersionCache::default();
        let long = Key::from_raw(&[7u8; 60]);
        assert!(long.as_encoded().len() > KEY_WORDS * 8);
        commit(&cache, &long, 5, b"", 1);
        cache.offer(&long, TimeStamp::new(6), 2);
        assert_eq!(hint(&cache, &long), None);
        // The longest key held inline has hints.
        let longest = Key::from_raw(&[7u8; 47]);
        assert!(longest.as_encoded().len() <= KEY_WORDS * 8);
        cache.offer(&longest, TimeStamp::new(6), 2);
        assert_eq!(hint(&cache, &longest), Some((TimeStamp::new(6), 2)));
    }

    #[test]
    fn a_table_sized_below_one_set_per_shard_holds_nothing() {
        let cache = VersionCache::with_bytes(1000);
        let key = Key::from_raw(b"k");
        commit(&cache, &key, 5, b"record", 1);
        cache.offer(&key, TimeStamp::new(5), 1);
        assert_eq!(hint(&cache, &key), None);
        // One set per shard is a table.
        let small = VersionCache::with_bytes(SHARDS * WAYS * std::mem::size_of::<Slot>());
        small.offer(&key, TimeStamp::new(5), 1);
        assert_eq!(hint(&small, &key), Some((TimeStamp::new(5), 1)));
    }

    #[test]
    fn keys_differing_only_in_length_are_told_apart() {
        // "a" and "a\0" pack to the same words (zero padding): the length
        // tells them apart.
        let cache = VersionCache::default();
        let short = Key::from_encoded(b"a".to_vec());
        let padded = Key::from_encoded(b"a\0".to_vec());
        cache.offer(&short, TimeStamp::new(3), 1);
        assert_eq!(hint(&cache, &padded), None);
        assert_eq!(hint(&cache, &short), Some((TimeStamp::new(3), 1)));
    }

    #[test]
    fn readers_on_other_threads_never_see_a_torn_slot() {
        // Keys of one set of slots, one more than it holds, written in turn by one thread
        // while others read: every hint read is one that was written for
        // that key, with that version's record if any. Records of versions differ in
        // length and bytes.
        fn record_of(version: u64) -> Vec<u8> {
            let digits = version.to_string().into_bytes();
            digits
                .iter()
                .copied()
                .cycle()
                .take(1 + (version % 160) as usize)
                .collect()
        }
        let cache = std::sync::Arc::new(VersionCache::default());
        let keys = keys_of_one_set(WAYS + 1);
        let n = keys.len() as u64;
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let seen = std::sync::Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (cache, stop, seen) = (cache.clone(), stop.clone(), seen.clone());
                let keys = keys.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // Key `j` is written with versions `n i + j` and
                        // epoch = version + 1; its record, when there is
                        // one, is the version's.
                        for (j, key) in keys.iter().enumerate() {
                            if let Some((v, e, record)) = hint_and_record(&cache, key) {
                                let v = v.into_inner();
                                assert!(v % n == j as u64 && e == v + 1);
                                assert!(record.is_empty() || record == record_of(v));
                                seen.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        // Writes until the readers have read hints while it wrote (on a
        // busy machine they may start late).
        let mut i = 0u64;
        while (seen.load(Ordering::Relaxed) < 10_000 || i < 20_000) && i < 100_000_000 {
            let j = (i % n) as usize;
            let (key, version) = (&keys[j], n * i + j as u64);
            let ts = TimeStamp::new(version);
            if i % 2 == 0 {
                cache.offer(key, ts, version + 1);
                cache.fill(key, ts, version + 1, &record_of(version));
            } else {
                cache.record(key, ts, &record_of(version), Some(version + 1));
            }
            i += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().expect("no reader saw a torn slot");
        }
        assert!(seen.load(Ordering::Relaxed) > 0, "the readers read hints");
    }

    #[test]
    fn keys_of_one_pattern_spread_over_the_slots() {
        // As many keys as sets of slots, differing only in their digits,
        // pick most of the sets, as random placement would (1 - 1/e of
        // them, 63%).
        let cache = VersionCache::default();
        let sets = SHARDS * cache.slots_per_shard / WAYS;
        let mut used = std::collections::HashSet::new();
        for i in 0..sets as u64 {
            let key = Key::from_raw(format!("user{i:012}").as_bytes());
            let p = cache.pack(&key).expect("short");
            assert_eq!(p.slot % WAYS, 0);
            used.insert((p.shard, p.slot));
        }
        assert!(used.len() > sets * 6 / 10, "{} sets used", used.len());
    }
}
