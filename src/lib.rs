//! percolate: an embeddable, Percolator-style transactional key-value engine
//! over RocksDB, with TiKV's on-disk format.
//!
//! Open a data directory with a [`Client`], begin [`Transaction`]s from any
//! number of threads, and commit them: snapshot isolation, conflicts
//! reported as retryable [`Error`]s, crashes left for the next reader to
//! resolve.
//!
//! ```
//! use percolate::Client;
//!
//! let dir = tempfile::tempdir()?;
//! let client = Client::open(dir.path())?;
//!
//! let mut txn = client.begin()?;
//! txn.put(b"alice", b"100");
//! txn.put(b"bob", b"0");
//! txn.commit()?;
//!
//! // Move 30 from alice to bob, retrying on conflicts.
//! client.with_retry(|txn| {
//!     let balance = |v: Option<Vec<u8>>| -> u64 {
//!         String::from_utf8(v.unwrap_or_default()).unwrap().parse().unwrap()
//!     };
//!     let alice = balance(txn.get(b"alice")?);
//!     let bob = balance(txn.get(b"bob")?);
//!     txn.put(b"alice", (alice - 30).to_string());
//!     txn.put(b"bob", (bob + 30).to_string());
//!     Ok(())
//! })?;
//! assert_eq!(client.get_latest(b"bob")?, Some(b"30".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Two levels of API
//!
//! * **The client** (the items at the top of this crate): [`Client`],
//!   [`Transaction`] and [`PessimisticTransaction`], [`Snapshot`] reads,
//!   [`RawClient`], and their options ([`ClientConfig`], [`OpenOptions`],
//!   [`CommitOptions`]). It runs the commit protocol (1PC, async commit or
//!   2PC) and resolves the locks it meets. Its counters are in [`metrics`]
//!   ([`Client::metrics`]).
//! * **The storage** ([`storage`]): TiKV's command API of one region, for a
//!   program that brings its own coordinator, as TiDB does for TiKV:
//!   `Prewrite`, `Commit`, `CheckTxnStatus`, `ResolveLock` and the rest, on
//!   keys and timestamps the caller chooses.
//!
//! Underneath are three crates, each documented on its own:
//! `percolate-engine` (RocksDB and an in-memory engine), `percolate-mvcc`
//! (TiKV's byte format for keys, locks and commit records) and
//! `percolate-txn` (actions, commands, scheduler, regions, oracle, client).

pub mod storage;

pub use percolate_txn::metrics;

pub use percolate_engine::{Durability, Engine, MemoryEngine, RocksEngine, RocksOptions};
pub use percolate_mvcc::{Key, TimeStamp};
pub use percolate_txn::client::observe;
pub use percolate_txn::client::{
    AutoGcConfig, Client, ClientConfig, CommitInfo, CommitOptions, CommitProtocol, Keys, Keyspace,
    ObserverMetrics, OpenOptions, ParallelPrewrite, PessimisticTransaction, RawClient, RawScanIter,
    Scan, SecondaryCommits, Snapshot, Transaction, TxnError, Watch, WorkerConfig, Workers,
};
pub use percolate_txn::{Error, Limit, Result};

// The layers whole, for the tests, benchmarks and tools of this workspace.
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use percolate_engine as engine;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use percolate_mvcc as mvcc;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use percolate_txn as txn;
