//! Latches: one command at a time per key.
//!
//! Every write command hashes its keys. A command may run once, for each of
//! its key hashes, it is the earliest waiting command with that hash; it
//! then runs alone on those keys, and on release the next command with each
//! hash moves up, in arrival order.
//!
//! The hashes live in a fixed number of slots (`hash & mask`), each a FIFO
//! of `(hash, command)` entries. Distinct hashes sharing a slot do not block
//! each other: a slot only saves memory and spreads the mutexes. Only equal
//! hashes queue (distinct keys with equal 64-bit hashes serialize, which
//! costs parallelism, never correctness).
//!
//! Invariant: a command enters the queues of its hashes in ascending hash
//! order and only enters hash `i + 1` after it became the first of hash
//! `i`. Two commands therefore never wait for each other in a cycle (no
//! deadlock), and commands with disjoint hashes never wait at all.
//!
//! Latches make each command atomic; they say nothing about transactions.
//! Two transactions interleave freely between their commands: isolation
//! comes from the checks the actions make (locks, write conflicts).

use std::collections::VecDeque;

use parking_lot::Mutex;
use percolate_engine::mem::{key_hash, prefetch};
use smallvec::SmallVec;

/// Hashes a command's keys are held in without a heap allocation: most
/// write commands (a lock request, a single-key commit) have one key.
const INLINE_HASHES: usize = 4;

/// Identifies a command while it holds or waits for latches.
pub type CommandId = u64;

/// The key hashes one command needs, and how many of them it already owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    /// Key hashes, ascending, without duplicates.
    required_hashes: SmallVec<[u64; INLINE_HASHES]>,
    /// `required_hashes[..owned]` are owned (the command is the first
    /// entry with each of them).
    owned: usize,
}

impl Lock {
    /// Whether every hash is owned: the command may run.
    pub fn acquired(&self) -> bool {
        self.owned == self.required_hashes.len()
    }

    /// Whether the command needs no latch at all.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.required_hashes.is_empty()
    }
}

/// The FIFO of `(hash, command)` entries of one slot: its first entry
/// inline (the common case, one command on the slot's keys, then touches
/// only the slot's own cache line), the others behind it. Invariant:
/// `rest` is empty while `first` is.
#[derive(Default)]
struct Queue {
    first: Option<(u64, CommandId)>,
    rest: VecDeque<(u64, CommandId)>,
}

impl Queue {
    fn iter(&self) -> impl Iterator<Item = &(u64, CommandId)> {
        self.first.iter().chain(&self.rest)
    }

    fn contains(&self, entry: &(u64, CommandId)) -> bool {
        self.iter().any(|e| e == entry)
    }

    fn push_back(&mut self, entry: (u64, CommandId)) {
        if self.first.is_none() {
            self.first = Some(entry);
        } else {
            self.rest.push_back(entry);
        }
    }

    /// Removes the entry at `pos` (in FIFO order), which exists.
    fn remove(&mut self, pos: usize) {
        if pos == 0 {
            self.first = self.rest.pop_front();
        } else {
            self.rest.remove(pos - 1);
        }
    }
}

/// One slot, on a cache line of its own.
#[derive(Default)]
#[repr(align(64))]
struct Slot(Mutex<Queue>);

/// The first command waiting in `slot` with `hash`.
fn first_with(slot: &Queue, hash: u64) -> Option<CommandId> {
    slot.iter().find(|(h, _)| *h == hash).map(|&(_, cid)| cid)
}

/// A fixed set of slots the key hashes of waiting and running commands
/// live in.
pub struct Latches {
    slots: Vec<Slot>,
}

impl std::fmt::Debug for Latches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latches")
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl Latches {
    /// Latches with `size` slots, rounded up to a power of two.
    pub fn new(size: usize) -> Self {
        let size = size.max(1).next_power_of_two();
        Latches {
            slots: (0..size).map(|_| Slot::default()).collect(),
        }
    }

    /// The lock a command on `keys` (their bytes) must acquire.
    pub fn gen_lock<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) -> Lock {
        let mut required_hashes: SmallVec<[u64; INLINE_HASHES]> =
            keys.into_iter().map(|key| key_hash(key.as_ref())).collect();
        required_hashes.sort_unstable();
        required_hashes.dedup();
        Lock {
            required_hashes,
            owned: 0,
        }
    }

    fn slot(&self, hash: u64) -> &Mutex<Queue> {
        &self.slots[(hash as usize) & (self.slots.len() - 1)].0
    }

    /// Starts bringing the slot of the key `bytes` into the CPU's caches.
    pub fn prefetch(&self, bytes: &[u8]) {
        prefetch(self.slot(key_hash(bytes)));
    }

    /// Takes as many of `lock`'s hashes as possible for command `cid`, in
    /// order. Returns whether all are now owned; if not, the command waits
    /// behind the first hash it does not own and must call again when
    /// [`release`](Self::release) names it.
    pub fn acquire(&self, lock: &mut Lock, cid: CommandId) -> bool {
        while let Some(&hash) = lock.required_hashes.get(lock.owned) {
            let mut slot = self.slot(hash).lock();
            match first_with(&slot, hash) {
                Some(first) if first == cid => {}
                Some(_) => {
                    if !slot.contains(&(hash, cid)) {
                        slot.push_back((hash, cid));
                    }
                    return false;
                }
                None => slot.push_back((hash, cid)),
            }
            lock.owned += 1;
        }
        true
    }

    /// Releases every hash `cid` owns, and the one it waits for. Returns
    /// the commands now first for a released hash: they may be able to go
    /// on and should call [`acquire`](Self::acquire) again.
    pub fn release(&self, lock: &Lock, cid: CommandId) -> Vec<CommandId> {
        let mut wake = Vec::new();
        for (i, &hash) in lock.required_hashes.iter().enumerate() {
            let mut slot = self.slot(hash).lock();
            let Some(pos) = slot.iter().position(|&entry| entry == (hash, cid)) else {
                debug_assert!(i >= lock.owned, "an owned hash has its entry");
                break;
            };
            let was_first = first_with(&slot, hash) == Some(cid);
            slot.remove(pos);
            if was_first {
                wake.extend(first_with(&slot, hash));
            }
        }
        wake.sort_unstable();
        wake.dedup();
        wake
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Commands 1, 2 and 3 on one key, in that order: 1 runs, 2 and 3 wait.
    fn three_queued_on_one_key(latches: &Latches) -> [Lock; 3] {
        let mut locks = [(); 3].map(|_| latches.gen_lock([b"k"]));
        assert!(latches.acquire(&mut locks[0], 1));
        assert!(!latches.acquire(&mut locks[1], 2));
        assert!(!latches.acquire(&mut locks[2], 3));
        locks
    }

    #[test]
    fn same_key_commands_run_one_after_another_in_arrival_order() {
        let latches = Latches::new(256);
        let [a, mut b, mut c] = three_queued_on_one_key(&latches);
        assert_eq!(latches.release(&a, 1), vec![2]);
        assert!(!latches.acquire(&mut c, 3), "3 arrived after 2");
        assert!(latches.acquire(&mut b, 2));
        assert_eq!(latches.release(&b, 2), vec![3]);
        assert!(latches.acquire(&mut c, 3));
        assert!(latches.release(&c, 3).is_empty());
    }

    #[test]
    fn a_woken_command_that_gives_up_wakes_the_next() {
        let latches = Latches::new(8);
        let [a, b, mut c] = three_queued_on_one_key(&latches);
        assert_eq!(latches.release(&a, 1), vec![2]);
        assert_eq!(latches.release(&b, 2), vec![3], "2 was first, never ran");
        assert!(latches.acquire(&mut c, 3));
    }

    #[test]
    fn disjoint_commands_overlap_and_a_spanning_one_waits_for_both() {
        let latches = Latches::new(1 << 16);
        let mut a = latches.gen_lock([b"k1", b"k2", b"k3"]);
        let mut b = latches.gen_lock([b"k4", b"k5", b"k6"]);
        assert!(latches.acquire(&mut a, 1));
        assert!(latches.acquire(&mut b, 2), "disjoint keys do not wait");
        let mut c = latches.gen_lock([b"k3", b"k4"]);
        assert!(!latches.acquire(&mut c, 3));
        let woken = latches.release(&a, 1);
        // Whether 3 is woken by A depends on which of its slots comes first.
        if woken.contains(&3) {
            assert!(!latches.acquire(&mut c, 3), "still waits for B");
        }
        assert!(latches.release(&b, 2).contains(&3) || woken.contains(&3));
        assert!(latches.acquire(&mut c, 3));
    }

    /// N5: distinct key hashes that share a slot don't block each other;
    /// only equal hashes queue, first in first out.
    #[test]
    fn n5_distinct_hashes_in_one_slot_do_not_block_each_other() {
        let latches = Latches::new(1);
        let mut a = latches.gen_lock([b"x"]);
        let mut b = latches.gen_lock([b"y"]);
        assert!(latches.acquire(&mut a, 1));
        assert!(
            latches.acquire(&mut b, 2),
            "y shares x's slot, not its hash"
        );
        let mut c = latches.gen_lock([b"x"]);
        let mut d = latches.gen_lock([b"x"]);
        assert!(!latches.acquire(&mut c, 3));
        assert!(!latches.acquire(&mut d, 4));
        assert_eq!(latches.release(&b, 2), Vec::<CommandId>::new());
        assert_eq!(latches.release(&a, 1), vec![3], "4 queues behind 3 on x");
        assert!(latches.acquire(&mut c, 3));
        assert!(!latches.acquire(&mut d, 4));
        assert_eq!(latches.release(&c, 3), vec![4]);
        assert!(latches.acquire(&mut d, 4));
    }

    #[test]
    fn commands_with_overlapping_keys_in_any_order_never_deadlock() {
        let latches = Latches::new(1);
        let mut a = latches.gen_lock([b"x", b"y"]);
        let mut b = latches.gen_lock([b"y", b"x"]);
        assert!(latches.acquire(&mut a, 1));
        assert!(!latches.acquire(&mut b, 2));
        assert_eq!(latches.release(&a, 1), vec![2]);
        assert!(latches.acquire(&mut b, 2));
    }

    #[test]
    fn a_waiting_command_can_give_up() {
        let latches = Latches::new(8);
        let [a, b, mut c] = three_queued_on_one_key(&latches);
        assert!(latches.release(&b, 2).is_empty(), "2 was not in front");
        assert_eq!(latches.release(&a, 1), vec![3]);
        assert!(latches.acquire(&mut c, 3));
    }

    #[test]
    fn no_keys_need_no_latches() {
        let latches = Latches::new(8);
        let mut lock = latches.gen_lock(Vec::<&[u8]>::new());
        assert!(lock.is_empty());
        assert!(latches.acquire(&mut lock, 1));
        assert!(latches.release(&lock, 1).is_empty());
    }
}
