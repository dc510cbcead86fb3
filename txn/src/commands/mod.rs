//! Commands: the requests a region's [`Storage`](crate::storage::Storage)
//! serves, in TiKV's vocabulary.
//!
//! A **write command** ([`WriteCommand`]) names its keys (the scheduler
//! latches them), then runs over a snapshot taken after the latches: it
//! checks its arguments, runs its action on each key and returns the
//! modifications to write atomically, with its answer. A **read command**
//! ([`ReadCommand`]) takes no latch and writes nothing.
//!
//! Every command that reads at a timestamp counts it in the region's
//! `max_ts` (kept by its concurrency manager) before it looks at data, so
//! that an async-commit or 1PC transaction computing its commit_ts later
//! cannot commit below it.

mod pessimistic;
mod prewrite;
mod raw;
mod read;
mod repair;
mod resolve;
mod write;

use percolate_engine::{Engine, Snapshot, WriteBatch};
use percolate_mvcc::{CommittedVersion, Key, MvccReader, MvccTxn, TimeStamp};

pub use self::pessimistic::{AcquirePessimisticLock, PessimisticRollback};
pub use self::prewrite::Prewrite;
pub(crate) use self::prewrite::PrewriteRef;
pub use self::raw::{
    RawBatchGet, RawCompareAndSwap, RawDelete, RawDeleteRange, RawGet, RawPut, RawScan,
};
pub use self::read::{BatchGet, Get, MvccByKey, Scan, ScanLock};
pub use self::repair::{DamagedRecord, Repair};
pub use self::resolve::{
    CheckSecondaryLocks, CheckTxnStatus, Cleanup, ResolveLock, ResolveLockLite,
    SecondaryLocksStatus,
};
pub use self::write::{BatchRollback, Commit, Gc, TxnHeartBeat, Unlock};
use crate::Result;
// What the commands carry and answer, defined with the actions that use
// them.
pub use crate::actions::acquire_pessimistic_lock::{
    PessimisticLockKeyResult, PessimisticLockOptions,
};
pub use crate::actions::check_txn_status::CheckTxnStatusOptions;
pub use crate::actions::gc::GcInfo;
pub use crate::actions::mvcc_by_key::MvccInfo;
pub use crate::actions::prewrite::{
    CommitKind, Mutation, MutationKind, PessimisticAction, PrewriteResult, TransactionKind,
    TransactionProperties,
};
pub use crate::actions::{MAX_LOCK_TTL_MS, ReleasedLock, TxnStatus};
use crate::concurrency_manager::{ConcurrencyManager, KeyGuards};

/// What a write command works with: a view of the engine read after its
/// latches were acquired, and the region's concurrency manager.
#[derive(Debug)]
pub struct WriteContext<'a, S> {
    /// The view to read: the engine's latest data ([`Engine::latest`]). No
    /// other command writes the keys this one holds latches on until it is
    /// done, so for those keys it reads exactly what a snapshot would,
    /// without the cost of pinning one; keys outside the latches may change
    /// between two reads.
    pub snapshot: S,
    /// The region's `max_ts` and memory locks.
    pub(crate) cm: &'a ConcurrencyManager,
}

impl<S> WriteContext<'_, S> {
    /// The region's `max_ts` and memory locks: for this workspace's tests'
    /// own commands.
    #[cfg(feature = "test-util")]
    pub fn concurrency_manager(&self) -> &ConcurrencyManager {
        self.cm
    }
}

/// What a read command works with: the engine, and the region's
/// concurrency manager, whose `max_ts` a read raises and whose memory locks
/// it checks before it takes a snapshot.
#[derive(Debug)]
pub struct ReadContext<'a, E> {
    /// The engine to take snapshots of.
    pub engine: &'a E,
    /// The region's `max_ts` and memory locks.
    pub(crate) cm: &'a ConcurrencyManager,
}

impl<'a, E> ReadContext<'a, E> {
    /// A read of `engine` under the region's `cm`: for the simulator, which
    /// runs a read command beside a write, outside the storage.
    #[cfg(any(feature = "test-util", feature = "sim"))]
    pub fn new(engine: &'a E, cm: &'a ConcurrencyManager) -> Self {
        ReadContext { engine, cm }
    }
}

/// What a write command produced.
#[derive(Debug)]
pub struct WriteResult<T> {
    /// Modifications to write in one atomic engine write.
    pub batch: WriteBatch,
    /// The answer, given once the modifications are written.
    pub output: T,
    /// Memory locks to hold until the modifications are in the engine.
    pub(crate) guards: KeyGuards,
    /// The data versions (Put and Delete commit records) the batch writes,
    /// each the newest of its key ([`MvccTxn::committed_versions`]): the
    /// region records them as version hints once the batch is written.
    pub committed: Vec<CommittedVersion>,
}

impl<T> WriteResult<T> {
    /// The modifications buffered in `txn`, with no memory locks.
    pub fn new(mut txn: MvccTxn, output: T) -> Self {
        let committed = txn.take_committed_versions();
        WriteResult {
            committed,
            ..Self::from_batch(txn.into_write_batch(), output)
        }
    }

    /// A batch of modifications, with no memory locks and no commits.
    pub fn from_batch(batch: WriteBatch, output: T) -> Self {
        WriteResult {
            batch,
            output,
            guards: KeyGuards::new(),
            committed: Vec::new(),
        }
    }
}

/// The keys a command touches, for the check that they lie in the region
/// it was sent to (see [`StorageConfig::key_range`]).
///
/// [`StorageConfig::key_range`]: crate::storage::StorageConfig::key_range
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Footprint<'a> {
    /// The command's latch keys, transactional: the default of a
    /// [`WriteCommand`].
    LatchKeys,
    /// Transactional keys (memcomparable-encoded).
    Keys(Vec<&'a Key>),
    /// Transactional keys in `[start, end)`; `None` is unbounded.
    Range(Option<&'a Key>, Option<&'a Key>),
    /// Raw keys (the raw KV column family).
    RawKeys(Vec<&'a [u8]>),
    /// Raw keys in `[start, end)`; `None` is unbounded.
    RawRange(Option<&'a [u8]>, Option<&'a [u8]>),
    /// Not checked: the default of a [`ReadCommand`], for commands defined
    /// outside this crate.
    Unchecked,
}

/// A command that modifies data: latched on its keys, run over a snapshot,
/// written atomically.
pub trait WriteCommand: Send + 'static {
    /// The answer.
    type Output: Send + 'static;

    /// What the command is, for its counters ([`crate::metrics`]).
    /// Defaults to [`CommandKind::Other`](crate::metrics::CommandKind::Other).
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Other;

    /// The keys to latch: every key the command may modify.
    fn latch_keys(&self) -> Vec<Key>;

    /// The keys the command touches. Defaults to its latch keys, which for
    /// a transactional command are every key it reads or writes.
    fn footprint(&self) -> Footprint<'_> {
        Footprint::LatchKeys
    }

    /// Checks the arguments, reads the snapshot and returns what to write.
    /// Nothing is written if this fails.
    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>>;
}

/// A command that only reads: no latches, nothing written.
pub trait ReadCommand: Send + 'static {
    /// The answer.
    type Output: Send + 'static;

    /// What the command is, for its counters ([`crate::metrics`]).
    /// Defaults to [`CommandKind::Other`](crate::metrics::CommandKind::Other).
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Other;

    /// Runs the read. Snapshots are taken inside, after `max_ts` was raised
    /// and memory locks checked.
    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output>;

    /// The keys the command reads. Defaults to [`Footprint::Unchecked`].
    fn footprint(&self) -> Footprint<'_> {
        Footprint::Unchecked
    }
}

/// Runs `action` on each of `keys` (keys, or keys with what the action
/// needs of each) in turn over one reader and one buffer
/// of the transaction `start_ts`, collecting the answers. A zero
/// `start_ts` names no transaction (the oracle never hands it out), and
/// one beyond the oracle's range none that could have prewritten (see
/// [`beyond_range`](crate::oracle::beyond_range)): either is
/// `InvalidRequest`, before anything is read or written (a rollback at
/// such a ts would otherwise be recorded, and one beyond the range would
/// leave a reopened oracle no room above it).
fn for_each_key<S: Snapshot, K, T>(
    snapshot: S,
    start_ts: TimeStamp,
    keys: Vec<K>,
    action: impl FnMut(&mut MvccTxn, &mut MvccReader<S>, K) -> Result<T>,
) -> Result<(MvccTxn, Vec<T>)> {
    if start_ts.is_zero() {
        return Err(crate::Error::InvalidRequest {
            reason: "a transaction's start_ts cannot be zero",
            key: None,
        });
    }
    if crate::oracle::beyond_range(start_ts) {
        return Err(crate::Error::InvalidRequest {
            reason: "a start_ts beyond the range of the timestamp oracle (such as TimeStamp::max())",
            key: None,
        });
    }
    for_each_key_unchecked(snapshot, start_ts, keys, action)
}

/// [`for_each_key`] for work that acts for no transaction (GC), with a
/// buffer at `start_ts` zero.
fn for_each_key_unchecked<S: Snapshot, K, T>(
    snapshot: S,
    start_ts: TimeStamp,
    keys: Vec<K>,
    mut action: impl FnMut(&mut MvccTxn, &mut MvccReader<S>, K) -> Result<T>,
) -> Result<(MvccTxn, Vec<T>)> {
    let mut txn = MvccTxn::new(start_ts);
    let mut reader = MvccReader::new(snapshot);
    let answers = keys
        .into_iter()
        .map(|key| action(&mut txn, &mut reader, key))
        .collect::<Result<Vec<T>>>()?;
    Ok((txn, answers))
}

/// Fails with `InvalidRequest` when `keys` is empty.
fn require_keys(keys: &[Key], reason: &'static str) -> Result<()> {
    if keys.is_empty() {
        return Err(crate::Error::InvalidRequest { reason, key: None });
    }
    Ok(())
}
