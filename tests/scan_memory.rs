//! A streaming scan holds one batch, not the range: the heap a scan of a
//! large range grows by is bounded by its batch, measured with a counting
//! allocator, on both engines.
//!
//! The allocator is the one piece of `unsafe` in the test suite: a
//! `GlobalAlloc` cannot be written without it. It only counts, then hands
//! every call to the system allocator unchanged.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use percolate::engine::{Engine, MemoryEngine, RocksEngine};
use percolate::txn::client::{Client, ClientConfig};
use percolate::txn::cluster::Cluster;
use percolate::txn::oracle::{LocalOracle, TimestampOracle};
use percolate::txn::storage::StorageConfig;

/// Counts the bytes allocated now, and the most since the last reset.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to `System` with the caller's arguments; the
// counters are only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The counters are the process's: one measurement at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const KEYS: usize = 40_000;
const VALUE: usize = 500;

/// Scans `KEYS` pairs of `VALUE` bytes (20 MB) one at a time and returns
/// how far the heap rose above where it stood when the scan began.
fn scan_growth<E: Engine>(engine: E, dir: &std::path::Path) -> usize {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let oracle = Arc::new(LocalOracle::open(dir).unwrap());
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..Default::default()
    };
    // Two regions, so the scan crosses one.
    let split = format!("k{:06}", KEYS / 2).into_bytes();
    let client = Client::new(
        Cluster::new(engine, vec![split], storage),
        oracle,
        ClientConfig::default(),
    );
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(2000) {
        client
            .with_retry(|txn| {
                for i in chunk {
                    txn.put(format!("k{i:06}").into_bytes(), vec![b'v'; VALUE]);
                }
                Ok(())
            })
            .unwrap();
    }
    let txn = client.begin().unwrap();
    let before = CURRENT.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let mut seen = 0;
    let mut bytes = 0;
    for pair in txn.scan::<&[u8]>(..) {
        let (key, value) = pair.unwrap();
        assert_eq!(key, format!("k{seen:06}").into_bytes());
        seen += 1;
        bytes += value.len();
    }
    assert_eq!(seen, KEYS);
    assert_eq!(bytes, KEYS * VALUE);
    PEAK.load(Ordering::Relaxed) - before
}

/// The largest batch holds 1,024 pairs of about 510 bytes (about 0.5 MB,
/// twice that while one batch is converted into the next); the range is 20
/// MB. Allow 4 MB for the engine's iterators and the scan's own buffers.
const BOUND: usize = 4 << 20;

#[test]
fn a_scan_of_20_mb_grows_the_heap_by_at_most_a_few_batches_memory() {
    let dir = tempfile::tempdir().unwrap();
    let growth = scan_growth(MemoryEngine::new(), dir.path());
    assert!(growth < BOUND, "the heap grew by {growth} bytes");
}

#[test]
fn a_scan_of_20_mb_grows_the_heap_by_at_most_a_few_batches_rocks() {
    let dir = tempfile::tempdir().unwrap();
    let engine = RocksEngine::open(dir.path().join("db")).unwrap();
    let growth = scan_growth(engine, dir.path());
    assert!(growth < BOUND, "the heap grew by {growth} bytes");
}
