//! Percolator transactions over the MVCC layer.
//!
//! The layer is built from the bottom up:
//!
//! * **actions** ([`actions`]): one function per Percolator step on one key
//!   (prewrite, commit, rollback, check_txn_status, ...). Each reads a
//!   snapshot through an `MvccReader` and records modifications in an
//!   `MvccTxn`; none writes. Their behaviour is TiKV's, scenario by scenario
//!   (`tests/txn_behaviour.rs`), and a randomized model test drives them
//!   against a reference model (`tests/txn_model.rs`).
//! * **commands** ([`commands`]): a request of one region (a batch of keys
//!   for one action) with its argument checks, run by the [`scheduler`]:
//!   it latches the keys, takes a snapshot, runs the action and writes the
//!   buffer atomically (grouping concurrent synced writes into one).
//!   Latches serialize commands, not transactions: isolation between
//!   transactions comes from the protocol's checks in the actions.
//! * **concurrency manager** ([`concurrency_manager`]): the region's
//!   `max_ts` and in-memory lock table, which let async commit and 1PC
//!   compute a commit_ts no reader can miss.
//! * **storage** ([`storage::Storage`]): the command API of one region,
//!   blocking or not, over RocksDB by default; also raw (non-transactional)
//!   key-value commands in a column family of their own.
//! * **regions** ([`cluster`]): the key space split by boundary keys, one
//!   `Storage` (latches, scheduler, concurrency manager) per region, all
//!   over one engine. Nothing above a region reaches past its command API.
//! * **oracle** ([`oracle`]): timestamps `physical_ms << 18 | logical`,
//!   strictly increasing, with a durable high-water mark.
//! * **client** ([`client`]): the coordinator of Percolator: start_ts from
//!   the oracle, buffered writes, reads that resolve the locks they meet,
//!   and the commit (prewrite batches sent to every region at once, then
//!   1PC, async commit or 2PC). Stateless between transactions, as in the
//!   paper: everything a crashed client leaves behind is resolved by
//!   whoever meets its locks.

pub mod actions;
pub mod client;
pub mod cluster;
pub mod commands;
pub mod concurrency_manager;
mod errors;
#[cfg(any(test, feature = "failpoints"))]
pub mod fail;
#[cfg(not(any(test, feature = "failpoints")))]
#[path = "fail_off.rs"]
mod fail;
pub mod lock_wait;
pub mod metrics;
pub mod notify;
pub mod oracle;
pub mod read;
pub mod scheduler;
mod slots;
pub mod storage;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
mod versions;

pub use errors::{Error, Limit, Result};

pub use percolate_engine as engine;
pub use percolate_mvcc as mvcc;
