//! Errors of the MVCC layer.
//!
//! One enum for everything a transaction step can report about the data it
//! read, with the structured fields a caller needs to react (resolve a lock,
//! retry with a new start_ts, give up). The variants and their fields follow
//! TiKV's `mvcc::ErrorInner`, so a TiKV client's handling maps onto them.

use percolate_engine::Cf;

use crate::codec::DecodeError;
use crate::{Key, LockInfo, TimeStamp};

/// Why a write conflict was reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteConflictReason {
    /// An optimistic prewrite met a record newer than its start_ts.
    Optimistic,
    /// A pessimistic lock request met a commit newer than its for_update_ts.
    PessimisticRetry,
    /// The transaction's own rollback record was found: it was rolled back
    /// (by a resolver) before this request arrived.
    SelfRolledBack,
    /// A read at the RcCheckTs isolation level met a newer lock or commit.
    RcCheckTs,
    /// A deferred uniqueness check found a newer commit.
    LazyUniquenessCheck,
}

/// Why a pessimistic prewrite did not find the pessimistic lock it expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PessimisticLockNotFoundReason {
    /// Another transaction's lock is on the key.
    LockTsMismatch,
    /// The lock's for_update_ts differs from the expected one.
    LockForUpdateTsMismatch,
    /// No lock, and a non-lock conflict was found instead.
    NonLockKeyConflict,
    /// No lock, and it could not be taken over in the prewrite ("amended"):
    /// a record at or above the start_ts is on the key.
    LockMissingAmendFail,
}

/// What a prewrite asserted about a key's existence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Assertion {
    /// The key must have a visible value.
    Exist,
    /// The key must not have a visible value.
    NotExist,
}

/// An error of the MVCC layer.
///
/// Keys are [`Key`]s (encoded user keys; `Display` shows the raw key);
/// primaries are raw keys, as stored in locks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another transaction's lock is in the way; resolve it and retry.
    #[error(
        "key {} is locked by txn {} (primary {})",
        RawKey(&.0.key),
        .0.lock_version,
        RawKey(&.0.primary_lock)
    )]
    KeyIsLocked(Box<LockInfo>),

    /// A record newer than the transaction's snapshot is on the key.
    #[error(
        "write conflict on {key}: txn {start_ts} meets the record of txn {conflict_start_ts} at {conflict_commit_ts} ({reason:?}), primary {}",
        RawKey(primary)
    )]
    WriteConflict {
        /// The transaction that hit the conflict.
        start_ts: TimeStamp,
        /// The transaction that wrote the conflicting record.
        conflict_start_ts: TimeStamp,
        /// Its commit_ts (0 when the conflict is a lock).
        conflict_commit_ts: TimeStamp,
        /// The key.
        key: Key,
        /// The primary key of the transaction that hit the conflict (raw).
        primary: Vec<u8>,
        /// Why this counts as a conflict.
        reason: WriteConflictReason,
    },

    /// An insert or existence check found a visible value.
    #[error("key {key} already exists (written by txn {existing_start_ts})")]
    AlreadyExist {
        /// The key.
        key: Key,
        /// start_ts of the transaction that wrote the existing value.
        existing_start_ts: TimeStamp,
    },

    /// A commit found neither the transaction's lock nor its commit record.
    #[error("txn {start_ts}: lock on {key} not found when committing at {commit_ts}")]
    TxnLockNotFound {
        /// The transaction.
        start_ts: TimeStamp,
        /// The commit_ts it tried.
        commit_ts: TimeStamp,
        /// The key.
        key: Key,
    },

    /// A status check or heart beat found no trace of the transaction.
    #[error("txn {start_ts} not found on its primary {key}")]
    TxnNotFound {
        /// The transaction.
        start_ts: TimeStamp,
        /// The primary key that was checked.
        key: Key,
    },

    /// A commit_ts below the lock's min_commit_ts was tried.
    #[error(
        "txn {start_ts}: commit_ts {commit_ts} on {key} is below min_commit_ts {min_commit_ts}"
    )]
    CommitTsExpired {
        /// The transaction.
        start_ts: TimeStamp,
        /// The commit_ts that was tried.
        commit_ts: TimeStamp,
        /// The key.
        key: Key,
        /// The lowest commit_ts the lock accepts.
        min_commit_ts: TimeStamp,
    },

    /// A rollback of a transaction that has already committed.
    #[error("txn {start_ts} already committed at {commit_ts} on {key}")]
    Committed {
        /// The transaction.
        start_ts: TimeStamp,
        /// Its commit_ts.
        commit_ts: TimeStamp,
        /// The key.
        key: Key,
    },

    /// A pessimistic lock request of a transaction already rolled back.
    #[error("txn {start_ts} was rolled back on {key}")]
    PessimisticLockRolledBack {
        /// The transaction.
        start_ts: TimeStamp,
        /// The key.
        key: Key,
    },

    /// A pessimistic prewrite did not find the pessimistic lock it expected.
    #[error("txn {start_ts}: pessimistic lock on {key} not found ({reason:?})")]
    PessimisticLockNotFound {
        /// The transaction.
        start_ts: TimeStamp,
        /// The key.
        key: Key,
        /// What was found instead.
        reason: PessimisticLockNotFoundReason,
    },

    /// A pessimistic lock request with `lock_only_if_exists` that does not
    /// also ask for the value: the key's existence would be decided without
    /// telling the caller, so the request is refused.
    #[error("txn {start_ts}: lock_only_if_exists on {key} needs return_value")]
    LockIfExistsFailed {
        /// The transaction.
        start_ts: TimeStamp,
        /// The key.
        key: Key,
    },

    /// The lock on the key is of the wrong kind for the request.
    #[error("txn {start_ts}: lock on {key} has the wrong type (pessimistic: {pessimistic})")]
    LockTypeNotMatch {
        /// The transaction.
        start_ts: TimeStamp,
        /// The key.
        key: Key,
        /// Whether the lock found is pessimistic.
        pessimistic: bool,
    },

    /// An async-commit or 1PC commit_ts would exceed the caller's limit.
    #[error("txn {start_ts}: min_commit_ts {min_commit_ts} exceeds max_commit_ts {max_commit_ts}")]
    CommitTsTooLarge {
        /// The transaction.
        start_ts: TimeStamp,
        /// The commit_ts that would be needed.
        min_commit_ts: TimeStamp,
        /// The caller's limit.
        max_commit_ts: TimeStamp,
    },

    /// An existence assertion of a prewrite did not hold.
    #[error(
        "txn {start_ts}: assertion {assertion:?} failed on {key} (existing txn {existing_start_ts}, committed at {existing_commit_ts})"
    )]
    AssertionFailed {
        /// The transaction.
        start_ts: TimeStamp,
        /// The key.
        key: Key,
        /// What was asserted.
        assertion: Assertion,
        /// start_ts of the existing record (0 if none).
        existing_start_ts: TimeStamp,
        /// commit_ts of the existing record (0 if none).
        existing_commit_ts: TimeStamp,
    },

    /// A status check on a key that is not the lock's primary.
    #[error(
        "key {} is not the primary of txn {} (primary {})",
        RawKey(&.0.key),
        .0.lock_version,
        RawKey(&.0.primary_lock)
    )]
    PrimaryMismatch(Box<LockInfo>),

    /// A committed Put has no short value and no value in the default CF:
    /// the data is damaged.
    #[error("value of {key} written by txn {start_ts} is missing from the default CF")]
    DefaultNotFound {
        /// The key.
        key: Key,
        /// start_ts of the Put whose value is missing.
        start_ts: TimeStamp,
    },

    /// Bytes read from the engine could not be decoded.
    #[error("corrupted record in CF {cf} at key {}: {source}", hex(.key))]
    Corruption {
        /// Column family of the record.
        cf: Cf,
        /// The stored key (as read from the engine, possibly with a ts).
        key: Vec<u8>,
        /// What is wrong with it.
        #[source]
        source: DecodeError,
    },

    /// The engine failed.
    #[error("engine: {0}")]
    Engine(#[from] percolate_engine::Error),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Error {
    /// Whether the transaction may succeed if retried (after resolving the
    /// lock in the way, or with a new start_ts).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::KeyIsLocked(_)
                | Error::WriteConflict { .. }
                | Error::TxnLockNotFound { .. }
                | Error::CommitTsExpired { .. }
                | Error::CommitTsTooLarge { .. }
        )
    }

    /// Whether the error reports a conflict with another transaction's
    /// record (as opposed to a lock, bad input or damage).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::WriteConflict { .. })
    }

    /// Whether the error reports damaged data.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corruption { .. } | Error::DefaultNotFound { .. }
        )
    }

    /// Wraps a decode error of a record read from `cf` at `key`.
    pub fn corruption(cf: Cf, key: &[u8], source: DecodeError) -> Self {
        Error::Corruption {
            cf,
            key: key.to_vec(),
            source,
        }
    }
}

/// Result of MVCC operations.
pub type Result<T> = std::result::Result<T, Error>;

/// Shows a raw key the way [`Key`]'s `Display` does.
pub(crate) struct RawKey<'a>(pub &'a [u8]);

impl std::fmt::Display for RawKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::key::fmt_raw(self.0, f)
    }
}
