//! percolate: an embeddable, Percolator-style transactional key-value engine
//! over RocksDB, with TiKV's on-disk format.
//!
//! The crate ties three layers together:
//!
//! * [`engine`]: the storage engine (RocksDB by default, an in-memory one for
//!   tests) with atomic write batches across the `default`, `lock` and
//!   `write` column families;
//! * [`mvcc`]: TiKV's byte format for keys, locks and commit records, and the
//!   readers that give snapshot isolation over them;
//! * [`txn`]: Percolator transactions: actions, commands, the scheduler,
//!   `Storage` (one region's command API), regions, the timestamp oracle
//!   and the client.
//!
//! The types an embedding program needs most are re-exported here:
//! [`Client`] (open a directory, begin transactions) and [`Transaction`].
//!
//! # Example
//!
//! Transactions on RocksDB in a data directory:
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
//! Underneath, a committed write is TiKV's records: the commit record of a
//! short value carries the value itself.
//!
//! ```
//! use percolate::engine::{Engine, RocksEngine, WriteOptions};
//! use percolate::mvcc::{Key, MvccTxn, PointGetterBuilder, TimeStamp, Write, WriteType};
//!
//! let engine = RocksEngine::open_temporary()?;
//! let key = Key::from_raw(b"greeting");
//! let (start_ts, commit_ts) = (TimeStamp::new(10), TimeStamp::new(11));
//!
//! let mut txn = MvccTxn::new(start_ts);
//! let record = Write::new(WriteType::Put, start_ts, Some(b"hello".to_vec()));
//! txn.put_write(key.clone(), commit_ts, &record);
//! engine.write(&txn.into_write_batch(), WriteOptions::durable())?;
//!
//! let get = |ts| PointGetterBuilder::new(engine.snapshot(), ts).build().get(&key);
//! assert_eq!(get(start_ts)?, None);
//! assert_eq!(get(commit_ts)?.as_deref(), Some(&b"hello"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use percolate_engine as engine;
pub use percolate_engine::Durability;
pub use percolate_mvcc as mvcc;
pub use percolate_txn as txn;
pub use percolate_txn::client::{
    AutoGcConfig, Client, ClientConfig, CommitInfo, CommitOptions, CommitProtocol, Keys, Keyspace,
    ObserverMetrics, OpenOptions, ParallelPrewrite, PessimisticTransaction, RawClient, RawScanIter,
    Scan, SecondaryCommits, Snapshot, Transaction, TxnError, Watch, WorkerConfig, Workers,
};
pub use percolate_txn::{Error, Result};
