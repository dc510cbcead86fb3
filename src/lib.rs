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
//! * [`txn`]: Percolator transactions (actions, scheduler, client).
//!
//! # Example
//!
//! A committed write and two reads on each side of its commit timestamp, on
//! RocksDB in a temporary directory:
//!
//! ```
//! use percolate::engine::{Engine, RocksEngine, WriteOptions};
//! use percolate::mvcc::{Key, MvccTxn, PointGetterBuilder, TimeStamp, Write, WriteType};
//!
//! let engine = RocksEngine::open_temporary()?;
//! let key = Key::from_raw(b"greeting");
//! let (start_ts, commit_ts) = (TimeStamp::new(10), TimeStamp::new(11));
//!
//! // The commit record of a short value carries the value itself.
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
pub use percolate_mvcc as mvcc;
pub use percolate_txn as txn;
