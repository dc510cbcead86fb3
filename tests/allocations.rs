//! Heap allocations per operation on the hot paths, counted on the calling
//! thread by a counting global allocator (RocksDB's own C++ allocations
//! are not seen): a deterministic measure of work per operation, with a
//! budget each path must stay within, so that a change that adds copies
//! or boxes to a commit or a read shows up here and not only as noise in
//! a benchmark. Each count is the mean over many operations on a RocksDB
//! engine, after a warm-up (shared tables grow now and then, so a single
//! operation's count can differ by one). Each budget is the count
//! measured when it was set plus one: room for a table that grows
//! differently elsewhere, none for a new copy on the path.
//!
//! Run with `--nocapture` to see the counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use percolate::{Client, ClientConfig, CommitInfo, CommitProtocol, OpenOptions};

/// Counts the allocations of the thread that asks.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// count is a thread-local integer (const-initialised, so touching it never
// allocates).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as the caller's contract for `GlobalAlloc::alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as the caller's contract for `GlobalAlloc::alloc_zeroed`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const KEYS: u64 = 1_000;
const WARM_UP: u64 = 2_000;
const MEASURED: u64 = 4_000;

fn key(i: u64) -> Vec<u8> {
    format!("user{:012}", i % KEYS).into_bytes()
}

/// One region (so that commits take 1PC), keys loaded.
fn open(dir: &std::path::Path) -> Client {
    let options = OpenOptions {
        client: ClientConfig {
            one_pc: true,
            ..ClientConfig::default()
        },
        ..OpenOptions::default()
    };
    let client = Client::open_with(dir, options).unwrap();
    for start in (0..KEYS).step_by(100) {
        client
            .with_retry(|txn| {
                for i in start..start + 100 {
                    txn.put(key(i), vec![b'v'; 100]);
                }
                Ok(())
            })
            .unwrap();
    }
    client
}

/// The mean allocations of `op` over the measured operations, after the
/// warm-up. Its input (keys, values) is made by `input` before the count
/// starts.
fn per_op<T>(input: impl Fn(u64) -> T, mut op: impl FnMut(T)) -> f64 {
    for i in 0..WARM_UP {
        op(input(i));
    }
    let mut counted = 0;
    for i in WARM_UP..WARM_UP + MEASURED {
        let input = input(i.wrapping_mul(7919));
        let before = allocations();
        op(input);
        counted += allocations() - before;
    }
    counted as f64 / MEASURED as f64
}

/// A key and a value to write.
fn write(i: u64) -> (Vec<u8>, Vec<u8>) {
    (key(i), vec![b'w'; 100])
}

fn within(what: &str, measured: f64, budget: f64) {
    println!("{what}: {measured:.2} allocations per operation (budget {budget})");
    assert!(
        measured <= budget,
        "{what}: {measured:.2} allocations per operation, over the budget of {budget}"
    );
}

/// The mean allocations of a one-key transaction that `commit` begins,
/// writes and commits, on a fresh database; each must commit by 1PC.
fn single_key_updates(
    commit: impl Fn(&Client, Vec<u8>, Vec<u8>) -> percolate::Result<CommitInfo>,
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path());
    per_op(write, |(k, v)| {
        let info = commit(&client, k, v).unwrap();
        assert_eq!(info.protocol, CommitProtocol::OnePc);
    })
}

#[test]
fn a_pessimistic_single_key_update_stays_within_its_allocations() {
    let measured = single_key_updates(|client, k, v| {
        let mut txn = client.begin_pessimistic()?;
        txn.put(k, v)?;
        txn.commit()
    });
    within("pessimistic 1PC update", measured, 29.0);
}

#[test]
fn an_optimistic_single_key_update_stays_within_its_allocations() {
    let measured = single_key_updates(|client, k, v| {
        let mut txn = client.begin()?;
        txn.put(k, v);
        txn.commit()
    });
    within("optimistic 1PC update", measured, 18.0);
}

#[test]
fn a_point_read_stays_within_its_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path());
    let measured = per_op(key, |k| {
        let value = client.view(|txn| txn.get(&k)).unwrap();
        assert_eq!(value.map(|v| v.len()), Some(100));
    });
    within("point read in a view", measured, 3.0);
    let latest = per_op(key, |k| {
        assert!(client.get_latest(&k).unwrap().is_some());
    });
    within("point read of the latest data", latest, 3.0);
}

#[test]
fn a_pessimistic_four_key_transfer_stays_within_its_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path());
    // Four distinct keys, read for update and written back, as the
    // benchmark's transfer does.
    let transfer = |i: u64| {
        let keys: Vec<Vec<u8>> = (0..4).map(|j| key(i + j * 250)).collect();
        let values = vec![vec![b'w'; 100]; 4];
        (keys, values)
    };
    let measured = per_op(transfer, |(keys, values)| {
        let mut txn = client.begin_pessimistic().unwrap();
        for key in &keys {
            assert!(txn.get_for_update(key).unwrap().is_some());
        }
        for (key, value) in keys.into_iter().zip(values) {
            txn.put(key, value).unwrap();
        }
        let info = txn.commit().unwrap();
        assert_eq!(info.protocol, CommitProtocol::OnePc);
    });
    within("pessimistic 4-key transfer", measured, 99.5);
}
