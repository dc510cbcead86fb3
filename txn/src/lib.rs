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
//! * **commands**: a request of one region (a batch of keys for one action)
//!   with its argument checks, run by a **scheduler** that latches the keys,
//!   takes a snapshot, runs the action and writes its buffer atomically.
//!   Latches serialize commands, not transactions: isolation between
//!   transactions comes from the protocol's checks in the actions.
//! * **client**: the coordinator (timestamps, parallel prewrite, 2PC /
//!   async commit / 1PC, lock resolution).
//!
//! The actions, latches ([`scheduler::latches`]) and the
//! [`concurrency_manager`] exist; commands, the scheduler itself, `Storage`
//! and the client are being built (see the project's open issues).

pub mod actions;
pub mod commands;
pub mod concurrency_manager;
mod errors;
pub mod read;
pub mod scheduler;
pub mod storage;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;

pub use errors::{Error, Result};

pub use percolate_engine as engine;
pub use percolate_mvcc as mvcc;
