//! Errors of the transaction layer.

use std::sync::Arc;
use std::time::Duration;

use percolate_mvcc::{Key, TimeStamp};

/// An error of a transaction action, a command, or the client.
///
/// MVCC outcomes (locks, conflicts, missing transactions, corruption) keep
/// their structured form in [`Error::Mvcc`]; this layer adds the errors of
/// bad requests, of scheduling, and of the client.
///
/// One variant per cause:
///
/// * An engine failure, whether it happened reading or writing, is
///   [`Error::Engine`]. Invariant: [`Error::Mvcc`] never holds
///   [`percolate_mvcc::Error::Engine`]; the `From` conversions move it out.
/// * Keys: the key a failure is about is a [`Key`] (the encoded user key,
///   as in [`percolate_mvcc::Error`]; its `Display` shows the raw key and
///   [`Key::to_raw`] gives the bytes back). Raw `Vec<u8>` appears only
///   where a field mirrors what TiKV reports raw (a lock's
///   [`LockInfo`](percolate_mvcc::LockInfo), a primary, the `Deadlock`
///   message) and for bounds of regions and ranges
///   ([`Error::KeyNotInRegion`], [`Error::ImportRangeNotEmpty`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An MVCC-level outcome: see [`percolate_mvcc::Error`] (never its
    /// `Engine` variant: that is [`Error::Engine`]).
    #[error(transparent)]
    Mvcc(percolate_mvcc::Error),

    /// The engine failed: a read, or a write of a command's modifications
    /// (shared by every command of a group commit, hence the `Arc`; nothing
    /// of the group was written).
    #[error("engine: {0}")]
    Engine(Arc<percolate_engine::Error>),

    /// A commit_ts that is not above the start_ts.
    #[error("invalid commit_ts {commit_ts} for txn {start_ts}: must be greater than start_ts")]
    InvalidTxnTso {
        /// The transaction.
        start_ts: TimeStamp,
        /// The commit_ts given.
        commit_ts: TimeStamp,
    },

    /// A timestamp too far ahead of the oracle to be counted in a region's
    /// `max_ts` (see [`MaxTsLimit`](crate::concurrency_manager::MaxTsLimit)),
    /// or to start a lock (a prewrite's or pessimistic lock's start_ts or
    /// for_update_ts): the request was refused and nothing was read or
    /// written.
    #[error("invalid max_ts update: {attempted_ts} is above the limit {limit}")]
    InvalidMaxTsUpdate {
        /// The timestamp the request carried.
        attempted_ts: TimeStamp,
        /// The bound: the oracle's latest timestamp or the wall clock
        /// plus the allowance (see
        /// [`MaxTsLimit`](crate::concurrency_manager::MaxTsLimit)), or, for
        /// a snapshot read ahead of an oracle that did not move past it,
        /// the oracle's latest timestamp.
        limit: TimeStamp,
    },

    /// A command reached a region that does not hold its key (or all of
    /// its range): nothing was read or written. The sender's idea of the
    /// regions is wrong; send it again to the right one.
    #[error("key {} is not in the region [{}, {})", crate::errors::Shown(key), crate::errors::Shown(start), crate::errors::ShownEnd(end.as_deref()))]
    KeyNotInRegion {
        /// The key, raw (empty for a range unbounded on the side that
        /// leaves the region).
        key: Vec<u8>,
        /// The region's first key.
        start: Vec<u8>,
        /// The region's end (exclusive; `None`: unbounded).
        end: Option<Vec<u8>>,
    },

    /// A request that breaks a rule of the protocol before any data is read.
    #[error("invalid request: {reason}")]
    InvalidRequest {
        /// What is wrong.
        reason: &'static str,
        /// The key concerned, if any.
        key: Option<Key>,
    },

    /// The scheduler already holds as many commands as it may; nothing was
    /// done. Retry later.
    #[error("scheduler too busy: {pending} commands in flight (limit {limit})")]
    SchedTooBusy {
        /// Commands in flight when this one arrived.
        pending: usize,
        /// The configured limit.
        limit: usize,
    },

    /// The command's deadline passed while it waited for its latches;
    /// nothing was done.
    #[error("deadline exceeded: the command waited {waited:?} for its latches")]
    DeadlineExceeded {
        /// How long it waited.
        waited: Duration,
    },

    /// The command ended without answering: it panicked, or the storage
    /// shut down before it ran. Its latches and memory locks were released
    /// and nothing it computed was written.
    #[error("command aborted: {reason}")]
    Aborted {
        /// Why.
        reason: &'static str,
    },

    /// A read or prewrite kept meeting a lock of a live transaction until
    /// its deadline. Retrying later (with a new transaction) may succeed.
    #[error(
        "gave up after {waited:?} on the lock of txn {lock_ts} (primary {primary:?}) on key {key}"
    )]
    ResolveLockTimeout {
        /// The locked key.
        key: Key,
        /// The lock owner's start_ts.
        lock_ts: TimeStamp,
        /// The lock owner's raw primary key.
        primary: Vec<u8>,
        /// How long the caller waited.
        waited: Duration,
    },

    /// Waiting for the lock would close a cycle of transactions each
    /// waiting for the next: the request fails at once instead of waiting
    /// out its timeout. Roll the transaction back (or retry the statement)
    /// so the others can go on.
    #[error(
        "deadlock: txn {start_ts} would wait for txn {lock_ts} on key {lock_key:?}, which waits for it ({} edges)",
        wait_chain.len()
    )]
    Deadlock {
        /// The transaction whose request closed the cycle.
        start_ts: TimeStamp,
        /// The lock owner it would have waited for.
        lock_ts: TimeStamp,
        /// The locked raw key.
        lock_key: Vec<u8>,
        /// The hash ([`crate::lock_wait::key_hash`]) of the key on which the
        /// cycle closes: the one whose lock `start_ts` holds and the
        /// transaction before it in the chain waits on.
        deadlock_key_hash: u64,
        /// The cycle, as TiKV reports it: the waits from `lock_ts` on, one
        /// edge per waiting transaction, up to the one waiting for
        /// `start_ts`, then this request's own (`start_ts` for `lock_ts` on
        /// `lock_key`).
        wait_chain: Vec<crate::lock_wait::WaitForEntry>,
    },

    /// Another process (or another client of this one) has the data
    /// directory open: percolate's lock on it is held. Nothing was opened.
    #[error("data directory {} is in use by another process", path.display())]
    DirectoryLocked {
        /// The data directory.
        path: std::path::PathBuf,
    },

    /// The timestamp oracle could not read or persist its state file.
    #[error("timestamp oracle file {path}: {source}")]
    OracleIo {
        /// The file.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },

    /// The timestamp oracle's state file is damaged. The oracle refuses to
    /// start rather than risk handing out timestamps it handed out before.
    #[error("timestamp oracle file {path} is corrupted: {reason}")]
    OracleCorrupted {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A timestamp beyond the range of the timestamp oracle: in the data a
    /// client opens (a persisted ts ceiling or a lock at or past about the
    /// year 4199, which no command writes: damaged bytes or a tool that
    /// wrote them), so that a reopened oracle would have no room above
    /// it; or an oracle that has handed out its last timestamp. Nothing
    /// was opened or handed out.
    #[error("timestamp {ts} is beyond the range of the timestamp oracle")]
    TimestampBeyondRange {
        /// The timestamp.
        ts: TimeStamp,
    },

    /// A key, a value or a whole transaction is larger than the engine
    /// accepts (see [`Limit`]); nothing was sent or written.
    #[error("{limit} is {size}, above the limit of {max}")]
    LimitExceeded {
        /// Which limit.
        limit: Limit,
        /// The size found (bytes, or keys for [`Limit::TxnKeys`]).
        size: usize,
        /// The limit ([`Limit::max`]).
        max: usize,
    },

    /// A write through a client opened with
    /// [`Client::open_read_only`](crate::client::Client::open_read_only):
    /// nothing was written.
    #[error("{} is open read-only", path.display())]
    ReadOnly {
        /// The data directory.
        path: std::path::PathBuf,
    },

    /// A backup or an export was pointed at a directory that already
    /// holds something: nothing was written into it.
    #[error("{} exists and is not empty", path.display())]
    DirectoryNotEmpty {
        /// The directory.
        path: std::path::PathBuf,
    },

    /// An export's manifest or one of its SST files is damaged, truncated,
    /// or does not match what the manifest says of it: nothing was
    /// imported.
    #[error("export file {} is corrupted: {reason}", path.display())]
    ExportCorrupted {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// An import into a key range that already holds transactional data
    /// (a lock, a write record or a value): nothing was imported. An
    /// import restores a range; it does not merge histories.
    #[error("the range [{}, {}) already holds data", crate::errors::Shown(start), crate::errors::ShownEnd(end.as_deref()))]
    ImportRangeNotEmpty {
        /// The range's first key, raw.
        start: Vec<u8>,
        /// Its end, raw and exclusive (`None`: unbounded).
        end: Option<Vec<u8>>,
    },

    /// An observer's transaction failed on `key` (its function returned an
    /// error, or the transaction did not commit): the notification stays,
    /// and the observer runs again later.
    #[error("observer {name} failed on key {key}: {source}")]
    Observer {
        /// The observer's name.
        name: String,
        /// The watched key.
        key: Key,
        /// What failed.
        #[source]
        source: Box<Error>,
    },

    /// [`Workers::run_until_idle`](crate::client::Workers::run_until_idle)
    /// gave up: notifications were still pending after `waited` (their
    /// writers' locks did not go away, or their observers kept
    /// conflicting).
    #[error("{pending} observer notifications still pending after {waited:?}")]
    ObserversNotIdle {
        /// Notifications left.
        pending: usize,
        /// How long it tried.
        waited: std::time::Duration,
    },

    /// A fail point fired (see [`crate::fail`]): an injected failure, for
    /// tests. Only in builds with the `failpoints` feature.
    #[cfg(any(test, feature = "failpoints"))]
    #[error("fail point {name} fired ({action:?})")]
    FailPoint {
        /// The point.
        name: &'static str,
        /// What it was configured to do.
        action: crate::fail::Action,
    },
}

/// The size limits every write is checked against, by the client's
/// [`commit`](crate::client::Transaction::commit) before anything is sent,
/// and by the region's write commands (`Prewrite`, the raw puts) for
/// callers below the client.
///
/// | limit | max | why |
/// |---|---|---|
/// | [`KeySize`](Limit::KeySize) | 8 KiB (8192 bytes) of raw key | TiKV's `max-key-size` default |
/// | [`ValueSize`](Limit::ValueSize) | 8 MiB of value | TiKV's `raft-entry-max-size` default: a larger value could never be replicated |
/// | [`TxnKeys`](Limit::TxnKeys) | 300,000 keys in one transaction (or one prewrite / raw batch) | TiDB's former `txn-entry-count-limit` |
/// | [`TxnBytes`](Limit::TxnBytes) | 100 MiB of keys and values in one transaction (or one prewrite / raw batch) | TiDB's `txn-total-size-limit` default |
///
/// Each is checked with `size > max`: a key of exactly 8192 bytes is fine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// Bytes of one raw key.
    KeySize,
    /// Bytes of one value.
    ValueSize,
    /// Keys written by one transaction or command.
    TxnKeys,
    /// Bytes of keys and values written by one transaction or command.
    TxnBytes,
}

impl Limit {
    /// The largest size allowed.
    pub const fn max(self) -> usize {
        match self {
            Limit::KeySize => 8 * 1024,
            Limit::ValueSize => 8 * 1024 * 1024,
            Limit::TxnKeys => 300_000,
            Limit::TxnBytes => 100 * 1024 * 1024,
        }
    }

    /// `Err(LimitExceeded)` when `size` is above this limit.
    pub fn check(self, size: usize) -> Result<()> {
        if size > self.max() {
            return Err(Error::LimitExceeded {
                limit: self,
                size,
                max: self.max(),
            });
        }
        Ok(())
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limit::KeySize => "key size",
            Limit::ValueSize => "value size",
            Limit::TxnKeys => "transaction key count",
            Limit::TxnBytes => "transaction size",
        })
    }
}

/// Checks a write of `pairs` (raw key length, value length) against every
/// [`Limit`].
pub(crate) fn check_write_size(pairs: impl IntoIterator<Item = (usize, usize)>) -> Result<()> {
    let (mut keys, mut bytes) = (0usize, 0usize);
    for (key_len, value_len) in pairs {
        Limit::KeySize.check(key_len)?;
        Limit::ValueSize.check(value_len)?;
        keys += 1;
        bytes = bytes.saturating_add(key_len.saturating_add(value_len));
    }
    Limit::TxnKeys.check(keys)?;
    Limit::TxnBytes.check(bytes)
}

impl From<percolate_engine::Error> for Error {
    fn from(e: percolate_engine::Error) -> Self {
        Error::Engine(Arc::new(e))
    }
}

impl From<percolate_mvcc::Error> for Error {
    /// Keeps the MVCC outcome, except an engine failure, which becomes
    /// [`Error::Engine`] (one form for every engine failure).
    fn from(e: percolate_mvcc::Error) -> Self {
        match e {
            percolate_mvcc::Error::Engine(e) => e.into(),
            other => Error::Mvcc(other),
        }
    }
}

impl Error {
    /// Whether the transaction may succeed if retried: see
    /// [`percolate_mvcc::Error::is_retryable`].
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Mvcc(e) => e.is_retryable(),
            Error::SchedTooBusy { .. }
            | Error::DeadlineExceeded { .. }
            | Error::Deadlock { .. }
            | Error::ResolveLockTimeout { .. } => true,
            Error::Observer { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// Whether this is a write conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Mvcc(e) if e.is_conflict())
    }

    /// The engine's error, if the engine failed.
    pub fn as_engine(&self) -> Option<&percolate_engine::Error> {
        match self {
            Error::Engine(e) => Some(e),
            _ => None,
        }
    }

    /// The MVCC-level error, if this is one.
    pub fn as_mvcc(&self) -> Option<&percolate_mvcc::Error> {
        match self {
            Error::Mvcc(e) => Some(e),
            _ => None,
        }
    }
}

/// Result of transaction actions.
pub type Result<T> = std::result::Result<T, Error>;

/// Bytes in an error message: as text when printable, else hex.
struct Shown<'a>(&'a [u8]);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match std::str::from_utf8(self.0) {
            Ok(s) if s.chars().all(|c| !c.is_control()) => write!(f, "{s:?}"),
            _ => {
                f.write_str("0x")?;
                self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

/// A region's end in an error message: `+inf` when unbounded.
struct ShownEnd<'a>(Option<&'a [u8]>);

impl std::fmt::Display for ShownEnd<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(end) => Shown(end).fmt(f),
            None => f.write_str("+inf"),
        }
    }
}

/// What maps an I/O failure of `op` on `path` to an [`Error`] (the
/// engine's `Io` variant, with the path): `.map_err(io_error(op, path))`.
pub(crate) fn io_error(
    op: &'static str,
    path: &std::path::Path,
) -> impl Fn(std::io::Error) -> Error + use<> {
    let path = path.to_path_buf();
    move |source| {
        Error::from(percolate_engine::Error::Io {
            op,
            path: path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_failure_reaches_callers_in_one_form() {
        let read: Error = percolate_mvcc::Error::Engine(percolate_engine::Error::Incomplete).into();
        let written: Error = percolate_engine::Error::Incomplete.into();
        for e in [read, written] {
            assert!(
                matches!(e.as_engine(), Some(percolate_engine::Error::Incomplete)),
                "{e:?}"
            );
            assert!(e.as_mvcc().is_none(), "{e:?}");
        }
    }
}
