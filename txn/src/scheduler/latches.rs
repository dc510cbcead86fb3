//! Latches: one command at a time per key.
//!
//! Every write command hashes its keys to slots. A command may run once it
//! is at the front of the queue of every one of its slots; it then runs
//! alone on those keys, and on release each slot's queue moves on to the
//! next command, in arrival order.
//!
//! Invariant: a command enters its slots' queues in ascending slot order
//! and only enters slot `i + 1` after it reached the front of slot `i`.
//! Two commands therefore never wait for each other in a cycle (no
//! deadlock), and commands with disjoint slots never wait at all.
//!
//! Latches make each command atomic; they say nothing about transactions.
//! Two transactions interleave freely between their commands: isolation
//! comes from the checks the actions make (locks, write conflicts).
//! Distinct keys that hash to one slot queue behind each other; that costs
//! parallelism, never correctness.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};

use parking_lot::Mutex;

/// Identifies a command while it holds or waits for latches.
pub type CommandId = u64;

/// The slots one command needs, and how many of them it already owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    /// Slot indexes, ascending, without duplicates.
    required_slots: Vec<usize>,
    /// `required_slots[..owned]` are owned (the command is at their front).
    owned: usize,
}

impl Lock {
    /// Whether every slot is owned: the command may run.
    pub fn acquired(&self) -> bool {
        self.owned == self.required_slots.len()
    }

    /// Whether the command needs no latch at all.
    pub fn is_empty(&self) -> bool {
        self.required_slots.is_empty()
    }
}

/// A fixed set of FIFO slots keys hash to.
pub struct Latches {
    slots: Vec<Mutex<VecDeque<CommandId>>>,
    hasher: std::hash::RandomState,
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
            slots: (0..size).map(|_| Mutex::new(VecDeque::new())).collect(),
            hasher: std::hash::RandomState::new(),
        }
    }

    /// The lock a command on `keys` must acquire.
    pub fn gen_lock<K: Hash>(&self, keys: impl IntoIterator<Item = K>) -> Lock {
        let mask = self.slots.len() - 1;
        let mut required_slots: Vec<usize> = keys
            .into_iter()
            .map(|key| (self.hasher.hash_one(key) as usize) & mask)
            .collect();
        required_slots.sort_unstable();
        required_slots.dedup();
        Lock {
            required_slots,
            owned: 0,
        }
    }

    /// Takes as many of `lock`'s slots as possible for command `cid`, in
    /// order. Returns whether all are now owned; if not, the command waits
    /// in the queue of the first slot it does not own and must call again
    /// when [`release`](Self::release) names it.
    pub fn acquire(&self, lock: &mut Lock, cid: CommandId) -> bool {
        while let Some(&slot) = lock.required_slots.get(lock.owned) {
            let mut queue = self.slots[slot].lock();
            if queue.back() != Some(&cid) && !queue.contains(&cid) {
                queue.push_back(cid);
            }
            if queue.front() != Some(&cid) {
                return false;
            }
            lock.owned += 1;
        }
        true
    }

    /// Releases every slot `cid` owns, and those it waits in. Returns the
    /// commands now at the front of a released slot: they may be able to go
    /// on and should call [`acquire`](Self::acquire) again.
    pub fn release(&self, lock: &Lock, cid: CommandId) -> Vec<CommandId> {
        let mut wake = Vec::new();
        for (i, &slot) in lock.required_slots.iter().enumerate() {
            let mut queue = self.slots[slot].lock();
            if i < lock.owned {
                let front = queue.pop_front();
                debug_assert_eq!(front, Some(cid), "an owned slot has its owner in front");
                wake.extend(queue.front().copied());
            } else if let Some(pos) = queue.iter().position(|&c| c == cid) {
                queue.remove(pos);
                if pos == 0 {
                    wake.extend(queue.front().copied());
                }
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

    #[test]
    fn one_slot_serializes_everything_but_never_deadlocks() {
        let latches = Latches::new(1);
        let mut a = latches.gen_lock([b"x", b"y"]);
        let mut b = latches.gen_lock([b"y", b"x"]);
        assert_eq!(a.required_slots, vec![0]);
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
