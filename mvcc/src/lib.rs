//! Multi-version concurrency control over three column families, in TiKV's
//! byte format.
//!
//! # Layout
//!
//! Every user key is stored memcomparably encoded ([`Key::from_raw`]); a
//! timestamp is appended as `!ts` big-endian ([`Key::append_ts`]), so the
//! versions of one key sit together, newest first.
//!
//! | CF | key | value |
//! |---|---|---|
//! | `lock` | `key` | [`Lock`]: a pending transaction's claim on the key |
//! | `write` | `key{commit_ts desc}` | [`Write`]: a commit (Put / Delete / Lock) or a Rollback (at its start_ts) |
//! | `default` | `key{start_ts desc}` | the value of a Put longer than [`SHORT_VALUE_MAX_LEN`] |
//!
//! A value of at most 255 bytes never touches the default CF: prewrite
//! carries it in the lock, commit moves it into the write record, and a read
//! finds it with one seek in the write CF.
//!
//! # Visibility
//!
//! A read at `ts` sees, for each key, the newest Put or Delete with
//! `commit_ts <= ts`, stepping over Lock records (a transaction that only
//! locked the key) and Rollback records. A Delete, or nothing, means the key
//! does not exist. Before that, a read at snapshot isolation checks the lock
//! CF: a Put or Delete lock with `start_ts <= ts` belongs to a transaction
//! that may still commit below `ts`, so the read cannot answer yet and
//! reports `KeyIsLocked` (the caller resolves the lock and retries).
//!
//! # Example: one key's history
//!
//! Time runs down, keys run across. `a` was written by txn 1 (committed at
//! 2) and deleted by txn 5 (committed at 6); `b` was written at 3→4 and has a
//! pending Put from txn 7; `c` holds a rolled-back write of txn 8.
//!
//! ```text
//! ts  | a              | b                | c
//! ----+----------------+------------------+---------------
//!  2  | Put(1) "a1"    |                  |
//!  4  |                | Put(3) "b1"      |
//!  6  | Delete(5)      |                  |
//!  7  |                | lock: Put "b2"   |
//!  8  |                |                  | Rollback(8)
//! ```
//!
//! | read at | a | b | c |
//! |---|---|---|---|
//! | 1 | none | none | none |
//! | 3 | "a1" | none | none |
//! | 5 | "a1" | "b1" | none |
//! | 9 | none | KeyIsLocked (txn 7) | none |
//!
//! The same in code, through the MVCC layer on an in-memory engine (the
//! write buffer is what a commit would produce):
//!
//! ```
//! use percolate_engine::{Engine, MemoryEngine, WriteOptions};
//! use percolate_mvcc::{Key, MvccTxn, PointGetterBuilder, TimeStamp, Write, WriteType};
//!
//! let engine = MemoryEngine::new();
//! let key = Key::from_raw(b"a");
//! let mut txn = MvccTxn::new(TimeStamp::new(1));
//! let commit = Write::new(WriteType::Put, TimeStamp::new(1), Some(b"a1".to_vec()));
//! txn.put_write(key.clone(), TimeStamp::new(2), &commit);
//! engine.write(&txn.into_write_batch(), WriteOptions::default())?;
//!
//! let read = |ts| PointGetterBuilder::new(engine.snapshot(), TimeStamp::new(ts)).build().get(&key);
//! assert_eq!(read(1)?, None);
//! assert_eq!(read(3)?, Some(b"a1".to_vec()));
//! # Ok::<(), percolate_mvcc::Error>(())
//! ```
//!
//! # What lives where
//!
//! * Format: [`TimeStamp`], [`Key`], [`Lock`], [`Write`] and the [`codec`]
//!   primitives, byte-compatible with TiKV.
//! * Writing: [`MvccTxn`] only buffers modifications; nothing in this crate
//!   writes to an engine.
//! * Reading: [`MvccReader`] (primitives for transaction actions),
//!   [`PointGetter`] and [`Scanner`] (user reads).

pub mod codec;
mod errors;
mod key;
mod lock;
pub mod reader;
mod timestamp;
mod txn;
mod write;

pub use errors::{Assertion, Error, PessimisticLockNotFoundReason, Result, WriteConflictReason};
pub use key::{Key, TimestampedKey};
pub use lock::{LastChange, Lock, LockInfo, LockType};
pub use reader::{
    IsolationLevel, KvPair, MvccReader, PairVisitor, PointGetter, PointGetterBuilder, Scanner,
    ScannerBuilder, TsSet, TxnCommitRecord, VersionHints,
};
pub use timestamp::{TSO_PHYSICAL_SHIFT_BITS, TimeStamp};
pub use txn::{CommittedVersion, MvccTxn};
pub use write::{
    RollbackProtection, SHORT_VALUE_MAX_LEN, Write, WriteRef, WriteType, is_short_value,
};
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
