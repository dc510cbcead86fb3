//! The systems side by side: raw RocksDB (the floor), RocksDB's
//! TransactionDB, fjall's optimistic transactions, and percolate committing
//! by 1PC, 2PC and async commit. Each runs every [`Op`] as one transaction
//! (raw RocksDB: one read or one write batch), retrying conflicts with the
//! same backoff percolate's `Client::with_retry` uses; single-record reads
//! are made as their [`ReadMode`] says ([`Kind::read_semantics`]). After the
//! load, [`System::settle`] flushes each store and waits for its
//! compactions.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use percolate::{Client, ClientConfig, CommitProtocol, OpenOptions, PessimisticTransaction};
use percolate_engine::Durability;
use percolate_txn::storage::{SchedulerConfig, StorageConfig};
use rocksdb::{
    BlockBasedOptions, Cache, DB, ErrorKind, MultiThreaded, Options, ReadOptions, TransactionDB,
    TransactionDBOptions, TransactionOptions, WaitForCompactOptions, WriteBatch,
    WriteBatchWithTransaction, WriteOptions,
};

use crate::workload::{INITIAL_COUNTER, Op, ReadMode, counter, record_key, transfer, value};

/// Any error that stops a run.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Attempts at one operation before it counts as aborted (percolate's
/// `ClientConfig::max_retries` default).
pub const MAX_ATTEMPTS: u32 = 64;

/// How one operation ended.
#[derive(Debug)]
pub enum OpError {
    /// Gave up after [`MAX_ATTEMPTS`] conflicts.
    Aborted,
    /// Anything else: the run stops.
    Failed(BoxError),
}

/// The systems the runner knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Kind {
    /// `rocksdb::DB` and `WriteBatch`, no transactions.
    Raw,
    /// `rocksdb::TransactionDB`, pessimistic, with a snapshot per
    /// transaction.
    Txndb,
    /// fjall's `OptimisticTxDatabase`.
    Fjall,
    /// percolate, one region: 1PC.
    OnePc,
    /// percolate, one region, 1PC, with its metrics and RocksDB's
    /// statistics switched off: what recording them costs.
    OnePcNoMetrics,
    /// percolate, several regions, 1PC and async commit off: 2PC.
    TwoPc,
    /// percolate, several regions, 1PC off: async commit.
    Async,
    /// percolate, one region, pessimistic transactions (1PC).
    Pessimistic,
}

impl Kind {
    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Raw => "rocksdb-raw",
            Kind::Txndb => "rocksdb-txndb",
            Kind::Fjall => "fjall-optimistic",
            Kind::OnePc => "percolate-1pc",
            Kind::OnePcNoMetrics => "percolate-1pc-nometrics",
            Kind::TwoPc => "percolate-2pc",
            Kind::Async => "percolate-async",
            Kind::Pessimistic => "percolate-pessimistic",
        }
    }

    /// What a transaction on it guarantees, and how the runner uses it.
    pub fn guarantee(self, regions: usize) -> String {
        match self {
            Kind::Raw => "no transactions: each WriteBatch is atomic, reads see the latest \
                          data, a read-modify-write or transfer can lose updates (the floor)"
                .into(),
            Kind::Txndb => "snapshot isolation: pessimistic TransactionDB, set_snapshot at \
                            begin, reads in it at the snapshot, get_for_update for \
                            read-modify-write and transfers, a write to a key written since \
                            the snapshot fails (Busy) and the transaction is retried; scans at \
                            the transaction's snapshot"
                .into(),
            Kind::Fjall => "serializable: fjall 3 OptimisticTxDatabase, read and write sets \
                            checked at commit (SSI), Conflict retried; scans on read_tx \
                            snapshots"
                .into(),
            Kind::OnePc => "snapshot isolation: Percolator/TiKV MVCC on RocksDB, 1 region, \
                            prewrite and commit in one atomic write (1PC), commit_ts from \
                            max_ts; conflicts retried by Client::with_retry; scans visit \
                            their pairs in place (Scan::visit)"
                .into(),
            Kind::OnePcNoMetrics => "as percolate-1pc, with Client::metrics and RocksDB's \
                                     statistics switched off"
                .into(),
            Kind::TwoPc => format!(
                "snapshot isolation across {regions} regions: Percolator 2PC (prewrite \
                 batches in parallel when synced, else on the committing thread; commit_ts \
                 from the oracle, primary commit is the commit point, secondaries committed \
                 by the committing thread; scans visit their pairs in place)"
            ),
            Kind::Async => format!(
                "snapshot isolation across {regions} regions: async commit (committed when \
                 every prewrite succeeded, commit_ts = max min_commit_ts, no oracle call; \
                 commit records written by the committing thread before commit returns; \
                 scans visit their pairs in place)"
            ),
            Kind::Pessimistic => "snapshot isolation, pessimistic: 1 region, \
                                  Client::begin_pessimistic, get_for_update for \
                                  read-modify-write and transfers and writes that lock as \
                                  they go (lock waits, deadlock detection), committed by 1PC \
                                  over the pessimistic locks; deadlocks retried; scans \
                                  visit their pairs in place"
                .into(),
        }
    }

    /// How it makes a single-record read in `mode`.
    pub fn read_semantics(self, mode: ReadMode) -> &'static str {
        match (self, mode) {
            (Kind::Raw, ReadMode::Latest) => "DB::get_pinned",
            (Kind::Raw, ReadMode::Snapshot | ReadMode::Txn) => {
                "DB::get_pinned (raw RocksDB has no transactions; the runner takes no \
                 snapshot for it)"
            }
            (Kind::Txndb, ReadMode::Latest) => {
                "TransactionDB::get_pinned (no transaction, no snapshot)"
            }
            (Kind::Txndb, ReadMode::Snapshot) => {
                "TransactionDB::snapshot, then get_pinned_opt with ReadOptions::set_snapshot \
                 (no transaction)"
            }
            (Kind::Txndb, ReadMode::Txn) => {
                "transaction_opt (set_snapshot), get_pinned_opt at its snapshot, commit"
            }
            (Kind::Fjall, ReadMode::Latest) => {
                "OptimisticTxKeyspace::get (reads the latest sequence number, no snapshot \
                 registered)"
            }
            (Kind::Fjall, ReadMode::Snapshot) => "read_tx() (a snapshot), then get",
            (Kind::Fjall, ReadMode::Txn) => {
                "write_tx(), get, commit (a read-only optimistic transaction; Conflict retried)"
            }
            (
                Kind::OnePc | Kind::OnePcNoMetrics | Kind::TwoPc | Kind::Async | Kind::Pessimistic,
                ReadMode::Latest,
            ) => "Client::get_latest (the point read without a timestamp: no oracle call)",
            (
                Kind::OnePc | Kind::OnePcNoMetrics | Kind::TwoPc | Kind::Async | Kind::Pessimistic,
                ReadMode::Snapshot,
            ) => {
                "Client::view(|txn| txn.get) (a read-only transaction: start_ts from the \
                 oracle, get at it, nothing committed)"
            }
            (Kind::OnePc | Kind::OnePcNoMetrics | Kind::TwoPc | Kind::Async, ReadMode::Txn) => {
                "Client::with_retry_info(|txn| txn.get) (begin, get, commit)"
            }
            (Kind::Pessimistic, ReadMode::Txn) => {
                "begin_pessimistic, get at the start_ts (no lock), commit"
            }
        }
    }

    /// How [`System::settle`] makes its store quiet.
    pub fn settle_semantics(self) -> &'static str {
        match self {
            Kind::Raw => "DB::flush, then DB::wait_for_compact",
            Kind::Txndb => {
                "TransactionDB::flush, then polls rocksdb.{mem-table-flush-pending, \
                 compaction-pending, num-running-flushes, num-running-compactions} until all \
                 are 0 (TransactionDB has no wait_for_compact in rust-rocksdb 0.25)"
            }
            Kind::Fjall => {
                "persist(SyncAll), rotates the keyspace's memtable and waits for its flush, \
                 then polls until no flush is queued and no compaction ran for 100 ms \
                 (fjall 3 has no wait for compactions)"
            }
            Kind::OnePc | Kind::OnePcNoMetrics | Kind::TwoPc | Kind::Async | Kind::Pessimistic => {
                "RocksEngine::flush (every CF), then wait_for_compact on its raw_db"
            }
        }
    }
}

/// How every system is opened.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Sync the log before a commit returns.
    pub durable: bool,
    /// Regions of the several-region percolate systems.
    pub regions: usize,
    /// Records loaded (the regions split them evenly).
    pub records: u64,
}

/// A system under test.
pub trait System: Send + Sync {
    /// Writes records `[first, first + count)` with `value_len`-byte values.
    fn load(&self, first: u64, count: u64, value_len: usize) -> Result<(), BoxError>;

    /// Runs `op` as one transaction; returns the conflicts retried.
    fn execute(&self, op: &Op, value_len: usize) -> Result<u32, OpError>;

    /// Flushes the memtables to disk and waits until no flush or
    /// compaction is running or pending (after the load, before any
    /// measurement).
    fn settle(&self) -> Result<(), BoxError>;

    /// Commits by protocol so far (percolate only): 1PC, async, 2PC.
    fn protocols(&self) -> Option<[u32; 3]> {
        None
    }

    /// Percolate's own counters so far, where it records them (see
    /// [`Counters`]).
    fn counters(&self) -> Option<Counters> {
        None
    }
}

/// Percolate's counters ([`Client::metrics`]) the runner prints after a
/// measurement, as differences over it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// Commands run by the regions.
    pub commands: u64,
    /// Commits failed by a conflict.
    pub conflicts: u64,
    /// Retries of `with_retry`.
    pub retries: u64,
    /// Locks resolved.
    pub resolved: u64,
    /// Write commands that waited for latches.
    pub latch_waits: u64,
    /// Calls to the oracle.
    pub oracle_calls: u64,
    /// Pessimistic lock requests' waits for others' locks.
    pub lock_waits: u64,
    /// Microseconds those waits took, all together.
    pub lock_wait_us: u64,
}

impl Counters {
    /// What `self` counted since `before`.
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            commands: self.commands - before.commands,
            conflicts: self.conflicts - before.conflicts,
            retries: self.retries - before.retries,
            resolved: self.resolved - before.resolved,
            latch_waits: self.latch_waits - before.latch_waits,
            oracle_calls: self.oracle_calls - before.oracle_calls,
            lock_waits: self.lock_waits - before.lock_waits,
            lock_wait_us: self.lock_wait_us - before.lock_wait_us,
        }
    }
}

/// Opens `kind` in `dir`.
pub fn open(kind: Kind, dir: &Path, setup: Setup) -> Result<Box<dyn System>, BoxError> {
    Ok(match kind {
        Kind::Raw => Box::new(Raw::open(dir, setup)?),
        Kind::Txndb => Box::new(TxnDb::open(dir, setup)?),
        Kind::Fjall => Box::new(Fjall::open(dir, setup)?),
        Kind::OnePc | Kind::OnePcNoMetrics | Kind::TwoPc | Kind::Async | Kind::Pessimistic => {
            Box::new(Percolate::open(kind, dir, setup)?)
        }
    })
}

/// RocksDB options as percolate's `RocksEngine` sets its CFs: a 128 MiB
/// shared LRU block cache, 10-bit bloom filters, 64 MiB memtables, no
/// compression on L0-L1, lz4 on L2-L4, zstd below, 2 background jobs.
/// The write path is RocksDB's pipelined one, with concurrent memtable
/// inserts only with 8 or more CPUs, where percolate writes unordered:
/// TransactionDB's write-committed policy refuses unordered writes, and
/// a raw database's batches would no longer appear to its readers at
/// once.
fn rocks_options() -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&Cache::new_lru_cache(128 << 20));
    table.set_bloom_filter(10.0, false);
    table.set_format_version(5);
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_max_background_jobs(2);
    opts.set_bytes_per_sync(1 << 20);
    opts.set_wal_bytes_per_sync(512 << 10);
    opts.set_enable_pipelined_write(true);
    opts.set_allow_concurrent_memtable_write(percolate_engine::concurrent_memtable_writes_default());
    opts.set_write_buffer_size(64 << 20);
    // The same as percolate's own RocksDB.
    opts.set_compression_per_level(&percolate_engine::COMPRESSION_PER_LEVEL);
    opts.set_block_based_table_factory(&table);
    opts
}

fn write_options(durable: bool) -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.set_sync(durable);
    opts
}

/// Runs `attempt` until it succeeds, fails for good, or conflicted
/// [`MAX_ATTEMPTS`] times; sleeps a jittered, doubling backoff (2 ms to
/// 200 ms, as `Client::with_retry`) between attempts. `attempt` answers
/// `Ok(None)` for a conflict.
fn retry(mut attempt: impl FnMut() -> Result<Option<()>, BoxError>) -> Result<u32, OpError> {
    let mut backoff = Duration::from_millis(2);
    for retries in 0..MAX_ATTEMPTS {
        match attempt() {
            Ok(Some(())) => return Ok(retries),
            Ok(None) => {
                let nanos = backoff.as_nanos() as u64;
                std::thread::sleep(Duration::from_nanos(rand::random_range(0..=nanos)));
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
            Err(e) => return Err(OpError::Failed(e)),
        }
    }
    Err(OpError::Aborted)
}

/// Raw RocksDB: the floor.
struct Raw {
    db: DB,
    write: WriteOptions,
}

impl Raw {
    fn open(dir: &Path, setup: Setup) -> Result<Self, BoxError> {
        Ok(Raw {
            db: DB::open(&rocks_options(), dir)?,
            write: write_options(setup.durable),
        })
    }

    fn write(&self, pairs: impl IntoIterator<Item = (u64, Vec<u8>)>) -> Result<(), BoxError> {
        let mut batch = WriteBatch::default();
        for (k, v) in pairs {
            batch.put(record_key(k), v);
        }
        Ok(self.db.write_opt(batch, &self.write)?)
    }
}

impl System for Raw {
    fn load(&self, first: u64, count: u64, value_len: usize) -> Result<(), BoxError> {
        self.write((first..first + count).map(|k| (k, value(INITIAL_COUNTER, value_len))))
    }

    fn execute(&self, op: &Op, value_len: usize) -> Result<u32, OpError> {
        let run = || -> Result<(), BoxError> {
            match op {
                // No snapshots or transactions in raw RocksDB: every mode is
                // a plain read of the latest data.
                Op::Read { key, mode: _ } => {
                    std::hint::black_box(self.db.get_pinned(record_key(*key))?);
                }
                Op::Update(_) | Op::Insert(_) | Op::UpdateMany(_) => self.write(
                    op.blind_keys()
                        .iter()
                        .map(|k| (*k, value(INITIAL_COUNTER, value_len))),
                )?,
                Op::Scan { start, len } => read_raw(self.db.raw_iterator(), *start, *len)?,
                Op::ReadModifyWrite(k) => {
                    let c = counter(self.db.get_pinned(record_key(*k))?.as_deref());
                    self.write([(*k, value(c.wrapping_add(1), value_len))])?;
                }
                Op::Transfer(keys) => {
                    let mut counters = Vec::with_capacity(keys.len());
                    for k in keys {
                        counters.push(counter(self.db.get_pinned(record_key(*k))?.as_deref()));
                    }
                    let moved = transfer(&counters);
                    self.write(
                        keys.iter()
                            .zip(moved)
                            .map(|(k, c)| (*k, value(c, value_len))),
                    )?;
                }
            }
            Ok(())
        };
        run().map(|()| 0).map_err(OpError::Failed)
    }

    fn settle(&self) -> Result<(), BoxError> {
        self.db.flush()?;
        self.db
            .wait_for_compact(&WaitForCompactOptions::default())?;
        Ok(())
    }
}

/// RocksDB's TransactionDB (pessimistic), each transaction with a snapshot
/// taken at begin: reads at the snapshot, and a write to a key someone
/// wrote after it fails with `Busy` (snapshot isolation).
struct TxnDb {
    db: TransactionDB<MultiThreaded>,
    write: WriteOptions,
    txn: TransactionOptions,
}

/// Conflicts and lock timeouts are retried; other errors are not.
fn txndb_conflict(e: rocksdb::Error) -> Result<Option<()>, BoxError> {
    match e.kind() {
        ErrorKind::Busy | ErrorKind::TimedOut | ErrorKind::TryAgain => Ok(None),
        _ => Err(e.into()),
    }
}

impl TxnDb {
    fn open(dir: &Path, setup: Setup) -> Result<Self, BoxError> {
        let mut txn = TransactionOptions::default();
        txn.set_snapshot(true);
        Ok(TxnDb {
            db: TransactionDB::open(&rocks_options(), &TransactionDBOptions::default(), dir)?,
            write: write_options(setup.durable),
            txn,
        })
    }

    fn attempt(&self, op: &Op, value_len: usize) -> Result<(), rocksdb::Error> {
        let txn = self.db.transaction_opt(&self.write, &self.txn);
        let snapshot = txn.snapshot();
        let mut read = ReadOptions::default();
        read.set_snapshot(&snapshot);
        match op {
            Op::Read { key, mode: _ } => {
                std::hint::black_box(txn.get_pinned_opt(record_key(*key), &read)?);
            }
            Op::Update(_) | Op::Insert(_) | Op::UpdateMany(_) => {
                for k in op.blind_keys() {
                    txn.put(record_key(*k), value(INITIAL_COUNTER, value_len))?;
                }
            }
            Op::Scan { start, len } => read_raw(txn.raw_iterator_opt(read), *start, *len)?,
            Op::ReadModifyWrite(k) => {
                let key = record_key(*k);
                let c = counter(txn.get_pinned_for_update_opt(&key, true, &read)?.as_deref());
                txn.put(key, value(c.wrapping_add(1), value_len))?;
            }
            Op::Transfer(keys) => {
                let mut counters = Vec::with_capacity(keys.len());
                for k in keys {
                    let v = txn.get_pinned_for_update_opt(record_key(*k), true, &read)?;
                    counters.push(counter(v.as_deref()));
                }
                for (k, c) in keys.iter().zip(transfer(&counters)) {
                    txn.put(record_key(*k), value(c, value_len))?;
                }
            }
        }
        drop(snapshot);
        txn.commit()
    }
}

impl System for TxnDb {
    fn load(&self, first: u64, count: u64, value_len: usize) -> Result<(), BoxError> {
        let mut batch = WriteBatchWithTransaction::<true>::default();
        for k in first..first + count {
            batch.put(record_key(k), value(INITIAL_COUNTER, value_len));
        }
        Ok(self.db.write_opt(batch, &self.write)?)
    }

    fn execute(&self, op: &Op, value_len: usize) -> Result<u32, OpError> {
        match op {
            Op::Read {
                key,
                mode: ReadMode::Latest,
            } => {
                let v = self.db.get_pinned(record_key(*key));
                std::hint::black_box(v.map_err(|e| OpError::Failed(e.into()))?);
                Ok(0)
            }
            Op::Read {
                key,
                mode: ReadMode::Snapshot,
            } => {
                let snapshot = self.db.snapshot();
                let mut read = ReadOptions::default();
                read.set_snapshot(&snapshot);
                let v = self.db.get_pinned_opt(record_key(*key), &read);
                std::hint::black_box(v.map_err(|e| OpError::Failed(e.into()))?);
                Ok(0)
            }
            _ => retry(|| match self.attempt(op, value_len) {
                Ok(()) => Ok(Some(())),
                Err(e) => txndb_conflict(e),
            }),
        }
    }

    fn settle(&self) -> Result<(), BoxError> {
        self.db.flush()?;
        // What DB::wait_for_compact waits for, which TransactionDB lacks.
        const BUSY: [&str; 4] = [
            "rocksdb.mem-table-flush-pending",
            "rocksdb.compaction-pending",
            "rocksdb.num-running-flushes",
            "rocksdb.num-running-compactions",
        ];
        loop {
            let mut busy = false;
            for property in BUSY {
                busy |= self.db.property_int_value(property)?.unwrap_or(0) > 0;
            }
            if !busy {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// fjall 3's optimistic transactions over one keyspace.
struct Fjall {
    db: fjall::OptimisticTxDatabase,
    table: fjall::OptimisticTxKeyspace,
    persist: Option<fjall::PersistMode>,
}

impl Fjall {
    fn open(dir: &Path, setup: Setup) -> Result<Self, BoxError> {
        let db = fjall::OptimisticTxDatabase::builder(dir)
            .cache_size(128 << 20)
            .open()?;
        let table = db.keyspace("usertable", fjall::KeyspaceCreateOptions::default)?;
        Ok(Fjall {
            db,
            table,
            // Buffered is fjall's default for a transaction (flushed to the
            // OS at commit); SyncData is its fdatasync mode.
            persist: Some(if setup.durable {
                fjall::PersistMode::SyncData
            } else {
                fjall::PersistMode::Buffer
            }),
        })
    }

    fn write_tx(&self) -> Result<fjall::OptimisticWriteTx, BoxError> {
        Ok(self.db.write_tx()?.durability(self.persist))
    }

    fn commit(tx: fjall::OptimisticWriteTx) -> Result<Option<()>, BoxError> {
        Ok(tx.commit()?.ok())
    }

    fn attempt(&self, op: &Op, value_len: usize) -> Result<Option<()>, BoxError> {
        use fjall::Readable as _;
        match op {
            Op::Read {
                key,
                mode: ReadMode::Latest,
            } => {
                std::hint::black_box(self.table.get(record_key(*key))?);
                Ok(Some(()))
            }
            Op::Read {
                key,
                mode: ReadMode::Snapshot,
            } => {
                std::hint::black_box(self.db.read_tx().get(&self.table, record_key(*key))?);
                Ok(Some(()))
            }
            Op::Read {
                key,
                mode: ReadMode::Txn,
            } => {
                let tx = self.write_tx()?;
                std::hint::black_box(tx.get(&self.table, record_key(*key))?);
                Self::commit(tx)
            }
            Op::Scan { start, len } => {
                let snapshot = self.db.read_tx();
                for guard in snapshot.range(&self.table, record_key(*start)..).take(*len) {
                    std::hint::black_box(guard.into_inner()?);
                }
                Ok(Some(()))
            }
            Op::Update(_) | Op::Insert(_) | Op::UpdateMany(_) => {
                let mut tx = self.write_tx()?;
                for k in op.blind_keys() {
                    tx.insert(
                        &self.table,
                        record_key(*k),
                        value(INITIAL_COUNTER, value_len),
                    );
                }
                Self::commit(tx)
            }
            Op::ReadModifyWrite(k) => {
                let mut tx = self.write_tx()?;
                let key = record_key(*k);
                let c = counter(tx.get(&self.table, &key)?.as_deref());
                tx.insert(&self.table, key, value(c.wrapping_add(1), value_len));
                Self::commit(tx)
            }
            Op::Transfer(keys) => {
                let mut tx = self.write_tx()?;
                let mut counters = Vec::with_capacity(keys.len());
                for k in keys {
                    counters.push(counter(tx.get(&self.table, record_key(*k))?.as_deref()));
                }
                for (k, c) in keys.iter().zip(transfer(&counters)) {
                    tx.insert(&self.table, record_key(*k), value(c, value_len));
                }
                Self::commit(tx)
            }
        }
    }
}

impl System for Fjall {
    fn load(&self, first: u64, count: u64, value_len: usize) -> Result<(), BoxError> {
        let mut tx = self.write_tx()?;
        for k in first..first + count {
            tx.insert(
                &self.table,
                record_key(k),
                value(INITIAL_COUNTER, value_len),
            );
        }
        Self::commit(tx)?.ok_or_else(|| "load conflicted".into())
    }

    fn execute(&self, op: &Op, value_len: usize) -> Result<u32, OpError> {
        retry(|| self.attempt(op, value_len))
    }

    fn settle(&self) -> Result<(), BoxError> {
        self.db.persist(fjall::PersistMode::SyncAll)?;
        self.table.inner().rotate_memtable_and_wait()?;
        // Compactions follow flushes as messages to fjall's workers, which
        // it does not count: wait until none has run for a while.
        let db = self.db.inner();
        let quiet_for = Duration::from_millis(100);
        let mut completed = db.compactions_completed();
        let mut quiet_since = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let now = db.compactions_completed();
            if now != completed
                || db.active_compactions() > 0
                || db.outstanding_flushes() > 0
                || self.table.inner().sealed_memtable_count() > 0
            {
                completed = now;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= quiet_for {
                return Ok(());
            }
        }
    }
}

/// percolate through its client.
struct Percolate {
    client: Client,
    /// Runs write transactions pessimistically.
    pessimistic: bool,
    /// Commits by protocol: 1PC, async commit, 2PC.
    protocols: [AtomicU32; 3],
}

impl Percolate {
    fn open(kind: Kind, dir: &Path, setup: Setup) -> Result<Self, BoxError> {
        let one_pc = matches!(kind, Kind::OnePc | Kind::OnePcNoMetrics | Kind::Pessimistic);
        let regions = if one_pc {
            1
        } else {
            setup.regions.max(1) as u64
        };
        let split_keys = (1..regions)
            .map(|i| record_key(i * setup.records / regions))
            .collect();
        let client = ClientConfig {
            one_pc,
            async_commit: kind != Kind::TwoPc,
            ..ClientConfig::default()
        };
        let durability = if setup.durable {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        let storage = StorageConfig {
            scheduler: SchedulerConfig {
                durability,
                ..SchedulerConfig::default()
            },
            ..StorageConfig::default()
        };
        let mut options = OpenOptions {
            split_keys,
            client,
            storage,
            ..OpenOptions::default()
        };
        if kind == Kind::OnePcNoMetrics {
            options.storage.metrics =
                std::sync::Arc::new(percolate_txn::metrics::Metrics::disabled());
            options.engine.statistics = false;
        }
        Ok(Percolate {
            client: Client::open_with(dir, options)?,
            pessimistic: kind == Kind::Pessimistic,
            protocols: Default::default(),
        })
    }

    /// A read outside `with_retry`: retried (with the runner's backoff,
    /// which is `Client::with_retry`'s) on a retryable error such as a lock
    /// that did not go away.
    fn read(&self, read: impl Fn() -> percolate::Result<Option<Vec<u8>>>) -> Result<u32, OpError> {
        retry(|| match read() {
            Ok(v) => {
                std::hint::black_box(v);
                Ok(Some(()))
            }
            Err(e) if e.is_retryable() => Ok(None),
            Err(e) => Err(e.into()),
        })
    }

    /// One operation in a pessimistic transaction, retried (with the
    /// runner's backoff) on a retryable error such as a deadlock.
    fn execute_pessimistic(&self, op: &Op, value_len: usize) -> Result<u32, OpError> {
        let work = |txn: &mut PessimisticTransaction| -> percolate::Result<()> {
            match op {
                Op::Read { key, mode: _ } => {
                    std::hint::black_box(txn.get(&record_key(*key))?);
                }
                Op::Update(_) | Op::Insert(_) | Op::UpdateMany(_) => {
                    for k in op.blind_keys() {
                        txn.put(record_key(*k), value(INITIAL_COUNTER, value_len))?;
                    }
                }
                Op::Scan { start, len } => read_through(txn.scan(record_key(*start)..), *len)?,
                Op::ReadModifyWrite(k) => {
                    let key = record_key(*k);
                    let c = counter(txn.get_for_update(&key)?.as_deref());
                    txn.put(key, value(c.wrapping_add(1), value_len))?;
                }
                Op::Transfer(keys) => {
                    // As TransactionDB's: get_for_update in the order drawn.
                    let mut counters = Vec::with_capacity(keys.len());
                    for k in keys {
                        counters.push(counter(txn.get_for_update(&record_key(*k))?.as_deref()));
                    }
                    for (k, c) in keys.iter().zip(transfer(&counters)) {
                        txn.put(record_key(*k), value(c, value_len))?;
                    }
                }
            }
            Ok(())
        };
        retry(|| {
            let mut txn = self.client.begin_pessimistic()?;
            match work(&mut txn).and_then(|()| txn.commit()) {
                Ok(info) => {
                    self.count(info.protocol);
                    Ok(Some(()))
                }
                Err(e) if e.is_retryable() => Ok(None),
                Err(e) => Err(e.into()),
            }
        })
    }

    fn count(&self, protocol: CommitProtocol) {
        let slot = match protocol {
            CommitProtocol::OnePc => 0,
            CommitProtocol::AsyncCommit => 1,
            CommitProtocol::TwoPc => 2,
            _ => return,
        };
        self.protocols[slot].fetch_add(1, Ordering::Relaxed);
    }
}

impl System for Percolate {
    fn load(&self, first: u64, count: u64, value_len: usize) -> Result<(), BoxError> {
        // One transaction per prewrite batch (64 keys by default).
        let batch = self.client.config().max_batch_keys as u64;
        let mut k = first;
        while k < first + count {
            let end = (k + batch).min(first + count);
            self.client.with_retry(|txn| {
                for n in k..end {
                    txn.put(record_key(n), value(INITIAL_COUNTER, value_len));
                }
                Ok(())
            })?;
            k = end;
        }
        Ok(())
    }

    fn execute(&self, op: &Op, value_len: usize) -> Result<u32, OpError> {
        match op {
            Op::Read {
                key,
                mode: ReadMode::Latest,
            } => {
                let key = record_key(*key);
                return self.read(|| self.client.get_latest(&key));
            }
            Op::Read {
                key,
                mode: ReadMode::Snapshot,
            } => {
                let key = record_key(*key);
                return self.read(|| self.client.view(|txn| txn.get(&key)));
            }
            _ => {}
        }
        if self.pessimistic {
            return self.execute_pessimistic(op, value_len);
        }
        let mut attempts = 0u32;
        let outcome = self.client.with_retry_info(|txn| {
            attempts += 1;
            match op {
                Op::Read { key, mode: _ } => {
                    std::hint::black_box(txn.get(&record_key(*key))?);
                }
                Op::Update(_) | Op::Insert(_) | Op::UpdateMany(_) => {
                    for k in op.blind_keys() {
                        txn.put(record_key(*k), value(INITIAL_COUNTER, value_len));
                    }
                }
                Op::Scan { start, len } => read_through(txn.scan(record_key(*start)..), *len)?,
                Op::ReadModifyWrite(k) => {
                    let key = record_key(*k);
                    let c = counter(txn.get(&key)?.as_deref());
                    txn.put(key, value(c.wrapping_add(1), value_len));
                }
                Op::Transfer(keys) => {
                    let raw: Vec<Vec<u8>> = keys.iter().map(|k| record_key(*k)).collect();
                    let refs: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
                    let counters: Vec<u64> = txn
                        .batch_get(&refs)?
                        .iter()
                        .map(|v| counter(v.as_deref()))
                        .collect();
                    for (key, c) in raw.into_iter().zip(transfer(&counters)) {
                        txn.put(key, value(c, value_len));
                    }
                }
            }
            Ok(())
        });
        match outcome {
            Ok(((), info)) => {
                self.count(info.protocol);
                Ok(attempts.saturating_sub(1))
            }
            Err(e) if e.is_retryable() => Err(OpError::Aborted),
            Err(e) => Err(OpError::Failed(e.into())),
        }
    }

    fn protocols(&self) -> Option<[u32; 3]> {
        Some(self.protocols.each_ref().map(|c| c.load(Ordering::Relaxed)))
    }

    fn counters(&self) -> Option<Counters> {
        let m = self.client.metrics();
        if m.commands.is_empty() {
            return None;
        }
        Some(Counters {
            commands: m.commands.iter().map(|c| c.ok + c.failed).sum(),
            conflicts: m.conflicts,
            retries: m.retries,
            resolved: m.resolved.iter().map(|(_, n)| n).sum(),
            latch_waits: m.latch_waits,
            oracle_calls: m.oracle_calls,
            lock_waits: m.lock_waits_total(),
            lock_wait_us: m.lock_waits.iter().map(|(_, h)| h.sum_us).sum(),
        })
    }

    fn settle(&self) -> Result<(), BoxError> {
        // Every region of the cluster shares one engine.
        let Some(region) = self.client.cluster().regions().first() else {
            return Ok(());
        };
        let engine = region.storage().engine();
        engine.flush()?;
        engine
            .raw_db()
            .wait_for_compact(&WaitForCompactOptions::default())?;
        Ok(())
    }
}

/// Reads the first `len` pairs from `start` through a RocksDB iterator, as
/// YCSB-E does (raw RocksDB and TransactionDB alike).
fn read_raw<D: rocksdb::DBAccess>(
    mut it: rocksdb::DBRawIteratorWithThreadMode<'_, D>,
    start: u64,
    len: usize,
) -> Result<(), rocksdb::Error> {
    it.seek(record_key(start));
    for _ in 0..len {
        if !it.valid() {
            break;
        }
        std::hint::black_box((it.key(), it.value()));
        it.next();
    }
    it.status()
}

/// Reads the first `len` pairs of a percolate scan (one storage read of
/// `len`, as a caller that knows its limit asks), as YCSB-E does: each
/// pair borrowed, as the peers' iterators lend theirs (`Scan::visit`).
fn read_through(scan: percolate::Scan<'_>, len: usize) -> percolate::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let mut left = len;
    scan.batch_size(len).visit(|key, value| {
        std::hint::black_box((key, value));
        left -= 1;
        if left == 0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    Ok(())
}
