//! Percolator transactions over the MVCC layer: the layer behind
//! `percolate`.
//!
//! Programs embed the `percolate` crate, which re-exports what they use
//! from here: the client at its top, and the storage level under
//! `percolate::storage`. This crate's own public surface is what
//! `percolate` and this workspace's tools (the `percolate` command, the
//! workload runner, the crash harness, the simulator) are built on, and
//! nothing more:
//!
//! * [`client`]: the coordinator of Percolator: start_ts from the oracle,
//!   buffered writes, reads that resolve the locks they meet, and the
//!   commit (prewrite batches sent to every region at once, then 1PC,
//!   async commit or 2PC). Stateless between transactions, as in the
//!   paper: everything a crashed client leaves behind is resolved by
//!   whoever meets its locks.
//! * [`storage`]: [`Storage`](storage::Storage), the command API of one
//!   region, blocking or not, over RocksDB by default (also raw,
//!   non-transactional, key-value commands in a column family of their
//!   own), with its configuration.
//! * [`commands`]: the requests a `Storage` serves, with what they carry
//!   and answer: a request of one region (a batch of keys for one
//!   action) and its argument checks.
//! * [`cluster`]: the key space split by boundary keys into regions, one
//!   `Storage` (latches, scheduler, concurrency manager) each, all over
//!   one engine. Nothing above a region reaches past its command API.
//! * [`oracle`]: timestamps `physical_ms << 18 | logical`, strictly
//!   increasing, with a durable high-water mark.
//! * [`metrics`]: the counters a client and its regions keep.
//! * [`Error`], [`Result`], [`Limit`].
//!
//! # Internals
//!
//! The layers under a region's command API are private to this crate:
//!
//! * **actions** (`actions`): one function per Percolator step on one key
//!   (prewrite, commit, rollback, check_txn_status, ...). Each reads a
//!   snapshot through an `MvccReader` and records modifications in an
//!   `MvccTxn`; none writes. Their behaviour is TiKV's, scenario by
//!   scenario (`tests/txn_behaviour.rs`), and a randomized model test
//!   drives them against a reference model (`tests/txn_model.rs`).
//! * **scheduler** (`scheduler`): runs each command: it latches the keys,
//!   takes a snapshot, runs the action and writes the buffer atomically
//!   (grouping concurrent synced writes into one). Latches serialize
//!   commands, not transactions: isolation between transactions comes from
//!   the protocol's checks in the actions.
//! * **concurrency manager** (`concurrency_manager`): the region's `max_ts`
//!   and in-memory lock table, which let async commit and 1PC compute a
//!   commit_ts no reader can miss.
//! * **lock waits** (`lock_wait`), **reads** (`read`) and **change
//!   notifications** (`notify`): pessimistic lock requests waiting for a
//!   release, the snapshot reads behind `Get`, `BatchGet` and `Scan`, and
//!   the format of the notify column family the client's observers follow.
//!
//! The types of theirs that the API names (a command's `Mutation`, a
//! storage's `SchedulerConfig`, ...) are re-exported where the API uses
//! them, in [`commands`] and [`storage`].
//!
//! # Features
//!
//! * `test-util`: this workspace's tests reach the internals (public and
//!   hidden from these docs), the `must_*` helpers of `testing`, and the
//!   fail points. Not for embedders.
//! * `failpoints`: named places in the client and the scheduler where a
//!   test can inject an error, a panic or a client's death (`fail`).
//!   Compiled out without it.
//! * `sim`: the deterministic simulator's seams (`percolate-sim`),
//!   which reach a region's concurrency manager too.

/// Declares internal modules: private to this crate, and public (hidden
/// from the docs) with the `test-util` feature, for this workspace's tests.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "test-util")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "test-util"))]
        mod $name;
    )*};
}

// The API for `percolate` and the tools.
pub mod client;
pub mod cluster;
pub mod commands;
pub mod metrics;
pub mod oracle;
pub mod storage;

internal_modules!(actions, lock_wait, notify, read, scheduler);
// The simulator reaches a region's memory locks too.
#[cfg(any(feature = "test-util", feature = "sim"))]
#[doc(hidden)]
pub mod concurrency_manager;
#[cfg(not(any(feature = "test-util", feature = "sim")))]
mod concurrency_manager;

mod errors;
#[cfg(any(test, feature = "failpoints"))]
pub mod fail;
#[cfg(not(any(test, feature = "failpoints")))]
#[path = "fail_off.rs"]
mod fail;
mod slots;
mod spin;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
mod versions;

pub use errors::{Error, Limit, Result};

/// `timeout` from now, or a year from now where that would not fit in an
/// `Instant` (a caller's `Duration::MAX` means "no limit", not a panic).
pub(crate) fn deadline_after(timeout: std::time::Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(std::time::Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(now)
}

pub use percolate_engine as engine;
pub use percolate_mvcc as mvcc;
