//! Thread slots: a small number per thread, for structures that keep one
//! copy (a stripe, a shard, a handle) per thread so that threads on
//! different cores write to cache lines of their own.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many copies to keep: the machine's hardware threads, at least 2 and
/// at most 64. Threads are numbered in the order they first ask, so up to
/// this many threads started together get copies of their own.
pub(crate) fn thread_slots() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get().clamp(2, 64))
}

/// The calling thread's number (to be taken modulo the copies kept).
pub(crate) fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}
