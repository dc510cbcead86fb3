//! Writes in flight, counted so that a snapshot can wait for the ones
//! that began before it.
//!
//! With RocksDB's unordered writes ([`RocksOptions::unordered_writes`](crate::RocksOptions::unordered_writes))
//! a write's sequence number is published as soon as its batch is in the
//! write-ahead log, and the batch then goes into the memtables record by
//! record, alongside other writers' batches. A RocksDB snapshot taken
//! meanwhile covers the batch's sequence number but sees only the records
//! inserted so far, and more of them as the insert goes on: neither
//! atomic nor repeatable. A snapshot becomes both again once every write
//! that began before it has returned, since RocksDB returns from a write
//! only after its whole batch is inserted; writes that begin later get
//! sequence numbers above the snapshot's and stay out of it.
//!
//! The gate counts writes in two generations. A write joins the current
//! one before it calls RocksDB and leaves it after RocksDB returns. A
//! snapshot, once taken, waits: at once if no write is in flight at all;
//! otherwise it moves the generation on (one snapshot at a time) and
//! waits until the generation it left has emptied, which holds every
//! write that joined before the move, so every write that began before
//! the snapshot was taken. Writes never wait.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Spins before each yield while a snapshot waits: a memtable insert
/// takes a few microseconds.
const SPINS: u32 = 64;

/// Writes in flight, in two generations.
#[derive(Default)]
pub(crate) struct WriteGate {
    /// The generation a write joins: its parity picks the counter.
    generation: CachePadded<AtomicU64>,
    /// Writes in flight per generation parity, each on its own cache line.
    in_flight: [CachePadded<AtomicUsize>; 2],
    /// Held by a snapshot while it moves the generation and waits, so
    /// that a generation is emptied before its counter is used again.
    mover: Mutex<()>,
}

/// A write in flight: leaves the gate when dropped.
pub(crate) struct InFlight<'a> {
    counter: &'a AtomicUsize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::SeqCst);
    }
}

impl WriteGate {
    /// Joins the current generation; the write must begin after this
    /// returns and end before the guard is dropped.
    pub(crate) fn enter(&self) -> InFlight<'_> {
        loop {
            let generation = self.generation.load(Ordering::SeqCst);
            let counter = &self.in_flight[parity(generation)];
            counter.fetch_add(1, Ordering::SeqCst);
            // Counted in the generation that is still current: a snapshot
            // moving it on from here waits for this write. Otherwise a
            // snapshot moved it in between and may not wait for this
            // counter: join the new generation instead (nothing was
            // written yet).
            if self.generation.load(Ordering::SeqCst) == generation {
                return InFlight { counter };
            }
            counter.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Waits until every write that joined before this call has left.
    /// Called just after a snapshot is taken: the writes that began
    /// before it are then wholly in the memtables.
    pub(crate) fn wait_for_earlier(&self) {
        // No write in flight: none that began before is left. (A write
        // counted after its counter was read here began after the
        // snapshot; a write counted before cannot leave and come back as
        // the same write.)
        if self.in_flight[0].load(Ordering::SeqCst) == 0
            && self.in_flight[1].load(Ordering::SeqCst) == 0
        {
            return;
        }
        let _moving = self.mover.lock();
        // Every write that joined an earlier generation was waited out by
        // the snapshot that moved past it, under `mover`.
        let left = self.generation.fetch_add(1, Ordering::SeqCst);
        let counter = &self.in_flight[parity(left)];
        let mut spins = 0;
        while counter.load(Ordering::SeqCst) != 0 {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                spins = 0;
                std::thread::yield_now();
            }
        }
    }
}

fn parity(generation: u64) -> usize {
    (generation & 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_snapshot_waits_for_a_write_in_flight_and_not_for_a_later_one() {
        let gate = Arc::new(WriteGate::default());
        let done = Arc::new(AtomicBool::new(false));
        let earlier = gate.enter();
        let waiter = {
            let (gate, done) = (gate.clone(), done.clone());
            std::thread::spawn(move || {
                gate.wait_for_earlier();
                done.store(true, Ordering::SeqCst);
            })
        };
        // The waiter has moved the generation on once a write joins the
        // other counter; that write, begun after, is not waited for.
        while gate.generation.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let later = gate.enter();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !done.load(Ordering::SeqCst),
            "returned with a write in flight"
        );
        drop(earlier);
        waiter.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        drop(later);
        assert_eq!(gate.in_flight[0].load(Ordering::SeqCst), 0);
        assert_eq!(gate.in_flight[1].load(Ordering::SeqCst), 0);
    }

    #[test]
    fn with_no_write_in_flight_a_snapshot_does_not_wait() {
        let gate = WriteGate::default();
        drop(gate.enter());
        gate.wait_for_earlier();
        assert_eq!(gate.generation.load(Ordering::SeqCst), 0);
    }
}
