//! The storage level: TiKV's command API of one region, for a program that
//! brings its own transaction coordinator (as TiDB does for TiKV).
//!
//! A [`Storage`] runs commands on keys and timestamps the caller chooses:
//! [`Prewrite`] then [`Commit`] (or one [`Prewrite`] by 1PC), reads at a
//! timestamp ([`Get`], [`BatchGet`], [`Scan`]), and the commands a
//! coordinator resolves others' locks with ([`CheckTxnStatus`],
//! [`ResolveLock`], [`CheckSecondaryLocks`], [`Cleanup`]). Each command
//! is a struct with public fields; [`Storage::write`] and
//! [`Storage::read`] run one and wait, [`Storage::sched_write`] returns a
//! [`Pending`] answer. Keys are [`Key`]s (encoded user keys:
//! [`Key::from_raw`]); timestamps come from a [`TimestampOracle`].
//!
//! Semantics, errors and byte format are TiKV's: a lock in the way is
//! `KeyIsLocked` with its [`LockInfo`], a newer commit is `WriteConflict`,
//! and the records on disk are the ones TiKV writes.
//!
//! ```
//! use percolate::storage::{Mutation, Prewrite, Storage};
//! use percolate::{Key, TimeStamp};
//!
//! let dir = tempfile::tempdir()?;
//! let storage = Storage::open(dir.path())?;
//! let (start_ts, commit_ts) = (TimeStamp::new(10), TimeStamp::new(11));
//! let key = Key::from_raw(b"k");
//!
//! let prewrite = Prewrite::new(vec![Mutation::put(key.clone(), b"v".to_vec())], b"k", start_ts);
//! assert!(storage.prewrite(prewrite)?.locks.is_empty());
//! storage.commit(vec![key.clone()], start_ts, commit_ts)?;
//!
//! assert_eq!(storage.get(key.clone(), start_ts)?, None);
//! assert_eq!(storage.get(key, commit_ts)?, Some(b"v".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Underneath, a committed write is TiKV's records (`percolate-mvcc`):
//! the commit record of a short value carries the value itself.
//!
//! ```
//! use percolate_engine::{Engine, RocksEngine, WriteOptions};
//! use percolate_mvcc::{Key, MvccTxn, PointGetterBuilder, TimeStamp, Write, WriteType};
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

pub use percolate_mvcc::{Key, KvPair, LockInfo, LockType, TimeStamp};
pub use percolate_txn::cluster::{Cluster, Region};
pub use percolate_txn::commands::{
    AcquirePessimisticLock, BatchGet, BatchRollback, CheckSecondaryLocks, CheckTxnStatus,
    CheckTxnStatusOptions, Cleanup, Commit, CommitKind, DamagedRecord, Gc, GcInfo, Get,
    MAX_LOCK_TTL_MS, Mutation, MutationKind, MvccByKey, MvccInfo, PessimisticAction,
    PessimisticLockKeyResult, PessimisticLockOptions, PessimisticRollback, Prewrite,
    PrewriteResult, RawBatchGet, RawCompareAndSwap, RawDelete, RawDeleteRange, RawGet, RawPut,
    RawScan, ReadCommand, ReleasedLock, Repair, ResolveLock, ResolveLockLite, Scan, ScanLock,
    SecondaryLocksStatus, TransactionKind, TransactionProperties, TxnHeartBeat, TxnStatus, Unlock,
    WriteCommand,
};
pub use percolate_txn::oracle::{LocalOracle, TimestampOracle};
pub use percolate_txn::storage::{
    CommandOptions, KeyRange, LockWaits, MaxTsLimit, Pending, ReadOptions, ScanRequest,
    SchedulerConfig, Storage, StorageConfig, WaitForEntry, key_hash,
};
