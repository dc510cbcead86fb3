//! Prewrite: the first phase of a Percolator commit.
//!
//! For each key the transaction writes, prewrite checks that nothing
//! happened to the key since the transaction's snapshot (no newer record, no
//! other lock) and locks it, carrying a short value inside the lock and a
//! long one into the default CF. The first key is the primary; every lock
//! names it.
//!
//! Async commit and 1PC add a commit timestamp computed here instead of
//! asked from the oracle: `min_commit_ts = max(max_ts + 1, start_ts + 1,
//! requested min_commit_ts)`, where `max_ts` is the largest timestamp any
//! reader of this region has used. A reader at `ts <= max_ts` either sees
//! the lock or read before it, so committing above `max_ts` can never change
//! what such a reader saw. If that ts would exceed the caller's
//! `max_commit_ts`, the prewrite falls back to plain 2PC.

use std::ops::ControlFlow;

use percolate_engine::Snapshot;
use percolate_mvcc::{
    Assertion, Key, Lock, LockInfo, LockType, MvccReader, MvccTxn, PessimisticLockNotFoundReason,
    TimeStamp, Write, WriteConflictReason, WriteType, is_short_value,
};

use crate::{Error, Result};

/// What a mutation does to its key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MutationKind {
    /// Sets the value.
    Put(Vec<u8>),
    /// Removes the key.
    Delete,
    /// Locks the key without changing it (to make reads of it conflict).
    Lock,
    /// Sets the value, failing with `AlreadyExist` if the key exists.
    Insert(Vec<u8>),
    /// Fails with `AlreadyExist` if the key exists; writes nothing.
    CheckNotExists,
    /// Removes the key, failing with `AlreadyExist` if it exists: what is
    /// left of an `Insert` that the same transaction then deleted. The
    /// insert's check stands (TiDB's `CheckNotExists` for such a key), and
    /// the key holds a Delete lock, so that it can be the primary or an
    /// async-commit secondary as any written key can. In a pessimistic
    /// prewrite the check is made where an `Insert`'s is: not over the
    /// transaction's own pessimistic lock, whose request checked it.
    DeleteInserted,
}

/// One key of a prewrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutation {
    /// The key.
    pub key: Key,
    /// What to do.
    pub kind: MutationKind,
    /// What the key's existence must be, if checked. Defaults to unchecked.
    pub assertion: Option<Assertion>,
    /// In a pessimistic transaction, what to check of the key's
    /// pessimistic lock. Defaults to [`PessimisticAction::SkipPessimisticCheck`];
    /// ignored by optimistic transactions.
    pub pessimistic_action: PessimisticAction,
    /// In a pessimistic transaction, the for_update_ts the key's
    /// pessimistic lock must have (`PessimisticLockNotFound` otherwise).
    /// `None`: any.
    pub expected_for_update_ts: Option<TimeStamp>,
}

/// What a pessimistic prewrite checks of a key's pessimistic lock (TiKV's
/// `PrewriteRequestPessimisticAction`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PessimisticAction {
    /// The key was not locked pessimistically, and the caller knows it
    /// cannot conflict: no lock is required, and no newer record is looked
    /// for.
    #[default]
    SkipPessimisticCheck,
    /// The key holds this transaction's pessimistic lock, which the prewrite
    /// replaces. A missing lock is taken over ("amended") when no record
    /// at or above the start_ts is on the key.
    DoPessimisticCheck,
    /// The key was not locked, and its uniqueness check was deferred to the
    /// prewrite: any record newer than the start_ts is a conflict
    /// (`LazyUniquenessCheck`), and an insert checks existence.
    DoConstraintCheck,
}

impl Mutation {
    fn new(key: Key, kind: MutationKind) -> Self {
        Mutation {
            key,
            kind,
            assertion: None,
            pessimistic_action: PessimisticAction::default(),
            expected_for_update_ts: None,
        }
    }

    /// A Put of `value`.
    pub fn put(key: Key, value: Vec<u8>) -> Self {
        Self::new(key, MutationKind::Put(value))
    }

    /// A Delete.
    pub fn delete(key: Key) -> Self {
        Self::new(key, MutationKind::Delete)
    }

    /// A lock-only mutation.
    pub fn lock(key: Key) -> Self {
        Self::new(key, MutationKind::Lock)
    }

    /// An Insert of `value`.
    pub fn insert(key: Key, value: Vec<u8>) -> Self {
        Self::new(key, MutationKind::Insert(value))
    }

    /// An existence check.
    pub fn check_not_exists(key: Key) -> Self {
        Self::new(key, MutationKind::CheckNotExists)
    }

    /// A Delete checked not to exist (see [`MutationKind::DeleteInserted`]).
    pub fn delete_inserted(key: Key) -> Self {
        Self::new(key, MutationKind::DeleteInserted)
    }

    /// Adds an existence assertion.
    #[must_use]
    pub fn with_assertion(mut self, assertion: Assertion) -> Self {
        self.assertion = Some(assertion);
        self
    }

    /// Sets what a pessimistic prewrite checks of the key's lock.
    #[must_use]
    pub fn with_pessimistic_action(mut self, action: PessimisticAction) -> Self {
        self.pessimistic_action = action;
        self
    }

    /// Requires the key's pessimistic lock to have `for_update_ts`.
    #[must_use]
    pub fn with_expected_for_update_ts(mut self, for_update_ts: TimeStamp) -> Self {
        self.expected_for_update_ts = Some(for_update_ts);
        self
    }

    fn should_not_exist(&self) -> bool {
        matches!(
            self.kind,
            MutationKind::Insert(_) | MutationKind::CheckNotExists | MutationKind::DeleteInserted
        )
    }

    /// Whether prewriting it looks at the key's existing value.
    fn checks_existence(&self) -> bool {
        self.should_not_exist() || self.assertion.is_some()
    }

    fn lock_type(&self) -> Option<LockType> {
        match self.kind {
            MutationKind::Put(_) | MutationKind::Insert(_) => Some(LockType::Put),
            MutationKind::Delete | MutationKind::DeleteInserted => Some(LockType::Delete),
            MutationKind::Lock => Some(LockType::Lock),
            MutationKind::CheckNotExists => None,
        }
    }
}

/// How the transaction will commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommitKind {
    /// Classic Percolator: commit_ts from the oracle, primary first.
    #[default]
    TwoPc,
    /// Async commit: committed once every key is prewritten, at the largest
    /// min_commit_ts. Zero `max_commit_ts` means no limit.
    Async {
        /// The largest commit_ts the client accepts.
        max_commit_ts: TimeStamp,
    },
    /// One phase: prewrite and commit in one write (one region, one batch).
    OnePc {
        /// The largest commit_ts the client accepts.
        max_commit_ts: TimeStamp,
    },
}

/// Whether the transaction locks optimistically or pessimistically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TransactionKind {
    /// Conflicts are found at prewrite: any record newer than the start_ts.
    #[default]
    Optimistic,
    /// Keys were locked before the prewrite (AcquirePessimisticLock), at
    /// `for_update_ts`: the prewrite turns those locks into ordinary ones.
    Pessimistic {
        /// The transaction's latest for_update_ts.
        for_update_ts: TimeStamp,
    },
}

impl TransactionKind {
    /// The for_update_ts of a pessimistic transaction; zero otherwise.
    pub fn for_update_ts(self) -> TimeStamp {
        match self {
            TransactionKind::Optimistic => TimeStamp::zero(),
            TransactionKind::Pessimistic { for_update_ts } => for_update_ts,
        }
    }
}

/// Everything about the transaction a prewrite needs besides its mutations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransactionProperties {
    /// The transaction's start_ts.
    pub start_ts: TimeStamp,
    /// The primary key, raw.
    pub primary: Vec<u8>,
    /// Lock TTL in milliseconds. Defaults to 0 (expires at once); at most
    /// [`MAX_LOCK_TTL_MS`](super::MAX_LOCK_TTL_MS) is written.
    pub lock_ttl: u64,
    /// Number of keys of the whole transaction, a hint for resolvers.
    pub txn_size: u64,
    /// The smallest commit_ts the client will use. Defaults to zero.
    pub min_commit_ts: TimeStamp,
    /// Defaults to [`CommitKind::TwoPc`].
    pub commit_kind: CommitKind,
    /// Defaults to [`TransactionKind::Optimistic`].
    pub kind: TransactionKind,
    /// The request is a retry of one that may have been applied (TiKV's
    /// `is_retry_request`): a pessimistic transaction's
    /// `SkipPessimisticCheck` keys are then checked for newer records too,
    /// so that a retry of a committed transaction is answered as such
    /// instead of locking (or committing) its keys again. Defaults to false.
    pub is_retry_request: bool,
    /// The region's max_ts, read after the keys were put in the in-memory
    /// lock table (async commit and 1PC only).
    pub max_ts: TimeStamp,
}

/// The outcome of prewriting one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrewriteKeyResult {
    /// The key's min_commit_ts for async commit and 1PC, zero otherwise.
    pub min_commit_ts: TimeStamp,
    /// For 1PC: the lock that would have been written, to be turned into a
    /// commit record once the commit_ts is known.
    pub one_pc_lock: Option<(Key, Lock)>,
    /// For 1PC: the key holds this transaction's pessimistic lock, which the
    /// commit removes.
    pub remove_pessimistic_lock: bool,
}

/// Prewrites one mutation of the transaction `props.start_ts`.
/// `secondaries` is given for the primary key of an async-commit
/// transaction.
///
/// A pessimistic transaction's mutation replaces its pessimistic lock (see
/// [`PessimisticAction`]): the new lock keeps the larger TTL, min_commit_ts
/// and for_update_ts of the two.
pub fn prewrite<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    props: &TransactionProperties,
    mutation: Mutation,
    secondaries: Option<&[Vec<u8>]>,
) -> Result<PrewriteKeyResult> {
    debug_assert_eq!(txn.start_ts(), props.start_ts);
    let own = match find_own_lock(reader, props, &mutation)? {
        ControlFlow::Break(done) => return Ok(done),
        ControlFlow::Continue(own) => own,
    };
    if !skips_constraint_check(props, &mutation) {
        check_constraints(reader, props, &mutation)?;
    }
    let Some(lock_type) = mutation.lock_type() else {
        return Ok(PrewriteKeyResult {
            min_commit_ts: check_only_min_commit_ts(props),
            ..Default::default()
        });
    };
    let mut lock = new_lock(props, lock_type, own.pessimistic.as_ref());
    if let MutationKind::Put(value) | MutationKind::Insert(value) = mutation.kind {
        if is_short_value(&value) {
            lock.short_value = Some(value);
        } else {
            txn.put_value(mutation.key.clone(), props.start_ts, value);
        }
    }
    let min_commit_ts = commit_ts_bound(props, &mut lock, secondaries)?;
    if matches!(props.commit_kind, CommitKind::OnePc { .. }) {
        return Ok(PrewriteKeyResult {
            min_commit_ts,
            one_pc_lock: Some((mutation.key, lock)),
            remove_pessimistic_lock: own.pessimistic.is_some(),
        });
    }
    txn.put_lock(mutation.key, &lock);
    Ok(PrewriteKeyResult {
        min_commit_ts,
        ..Default::default()
    })
}

/// Checks the key's lock: another transaction's blocks the prewrite, this
/// transaction's own prewrite lock answers a retry (`Break`), and its
/// pessimistic lock, or one it is missing and takes over, is what the
/// prewrite replaces (`Continue`).
fn find_own_lock<S: Snapshot>(
    reader: &mut MvccReader<S>,
    props: &TransactionProperties,
    mutation: &Mutation,
) -> Result<ControlFlow<PrewriteKeyResult, OwnLock>> {
    let pessimistic = matches!(props.kind, TransactionKind::Pessimistic { .. });
    if pessimistic && mutation.kind == MutationKind::CheckNotExists {
        return Err(Error::InvalidRequest {
            reason: "CheckNotExists cannot be part of a pessimistic prewrite",
            key: Some(mutation.key.clone()),
        });
    }
    let mut own = OwnLock::default();
    match reader.load_lock(&mutation.key)? {
        Some(lock) => match check_lock(props, mutation, lock)? {
            LockStatus::Prewritten(done) => return Ok(ControlFlow::Break(done)),
            LockStatus::Pessimistic(lock) => own.pessimistic = Some(lock),
        },
        None if pessimistic
            && mutation.pessimistic_action == PessimisticAction::DoPessimisticCheck =>
        {
            amend_pessimistic_lock(reader, props, &mutation.key)?;
            own.amended = true;
        }
        None => {}
    }
    Ok(ControlFlow::Continue(own))
}

/// The write-conflict and existence checks. Only an existence check needs
/// the newest record itself. The conflict check alone needs no read when
/// every record of the key is older than the start_ts: then none is newer,
/// and none is a rollback of this transaction (written at its start_ts).
fn check_constraints<S: Snapshot>(
    reader: &mut MvccReader<S>,
    props: &TransactionProperties,
    mutation: &Mutation,
) -> Result<()> {
    if mutation.checks_existence() {
        let newest = check_for_newer_version(reader, props, mutation)?;
        check_existence(reader, props, mutation, newest)?;
    } else if !reader.no_write_since(&mutation.key, props.start_ts) {
        check_for_newer_version(reader, props, mutation)?;
    }
    Ok(())
}

/// The lock the prewrite writes, before its value and commit_ts bound: a
/// replaced pessimistic lock (`held`) keeps the larger TTL, min_commit_ts
/// and for_update_ts of the two.
fn new_lock(props: &TransactionProperties, lock_type: LockType, held: Option<&Lock>) -> Lock {
    let mut lock = Lock::new(
        lock_type,
        props.primary.clone(),
        props.start_ts,
        super::clamp_ttl(props.lock_ttl),
    );
    lock.txn_size = props.txn_size;
    lock.min_commit_ts = props.min_commit_ts;
    lock.for_update_ts = props.kind.for_update_ts();
    if let Some(held) = held {
        lock.ttl = lock.ttl.max(super::clamp_ttl(held.ttl));
        lock.min_commit_ts = lock.min_commit_ts.max(held.min_commit_ts);
        lock.for_update_ts = lock.for_update_ts.max(held.for_update_ts);
    }
    lock
}

/// What the prewrite found of the transaction's own lock on the key.
#[derive(Default)]
struct OwnLock {
    /// Its pessimistic lock, replaced by the prewrite.
    pessimistic: Option<Lock>,
    /// Its pessimistic lock was missing and is taken over.
    amended: bool,
}

/// The transaction's own lock on a key, as the prewrite finds it.
enum LockStatus {
    /// Already prewritten: the request is a retry, answered as it was.
    Prewritten(PrewriteKeyResult),
    /// A pessimistic lock of a pessimistic transaction, to be replaced.
    Pessimistic(Lock),
}

/// Another transaction's lock blocks the prewrite (in a pessimistic
/// transaction, a key that should hold its pessimistic lock reports it
/// missing instead); this transaction's own prewrite lock means the request
/// is a retry; its pessimistic lock is replaced.
fn check_lock(
    props: &TransactionProperties,
    mutation: &Mutation,
    lock: Lock,
) -> Result<LockStatus> {
    let key = &mutation.key;
    let pessimistic = matches!(props.kind, TransactionKind::Pessimistic { .. });
    if lock.ts != props.start_ts {
        if pessimistic && mutation.pessimistic_action == PessimisticAction::DoPessimisticCheck {
            return Err(lock_not_found(
                props,
                key,
                PessimisticLockNotFoundReason::LockTsMismatch,
            ));
        }
        let mut locked = lock;
        if pessimistic {
            // Resolve it at once: a pessimistic transaction's key that
            // needs no pessimistic lock should not wait out a TTL.
            locked.ttl = 0;
        }
        return Err(super::key_is_locked(key, locked));
    }
    if lock.is_pessimistic_lock() {
        if !pessimistic {
            return Err(percolate_mvcc::Error::LockTypeNotMatch {
                start_ts: props.start_ts,
                key: key.clone(),
                pessimistic: true,
            }
            .into());
        }
        if mutation
            .expected_for_update_ts
            .is_some_and(|expected| expected != lock.for_update_ts)
        {
            return Err(lock_not_found(
                props,
                key,
                PessimisticLockNotFoundReason::LockForUpdateTsMismatch,
            ));
        }
        return Ok(LockStatus::Pessimistic(lock));
    }
    let min_commit_ts = if lock.use_async_commit {
        lock.min_commit_ts
    } else {
        TimeStamp::zero()
    };
    Ok(LockStatus::Prewritten(PrewriteKeyResult {
        min_commit_ts,
        ..Default::default()
    }))
}

fn lock_not_found(
    props: &TransactionProperties,
    key: &Key,
    reason: PessimisticLockNotFoundReason,
) -> Error {
    percolate_mvcc::Error::PessimisticLockNotFound {
        start_ts: props.start_ts,
        key: key.clone(),
        reason,
    }
    .into()
}

/// A key that should hold the transaction's pessimistic lock has none (its
/// lock request failed or was lost): the prewrite may take the key anyway
/// if no record at or above the start_ts is on it, which is what the lock
/// would have guaranteed.
fn amend_pessimistic_lock<S: Snapshot>(
    reader: &mut MvccReader<S>,
    props: &TransactionProperties,
    key: &Key,
) -> Result<()> {
    match reader.seek_write(key, TimeStamp::max())? {
        Some((commit_ts, _)) if commit_ts >= props.start_ts => Err(lock_not_found(
            props,
            key,
            PessimisticLockNotFoundReason::LockMissingAmendFail,
        )),
        _ => Ok(()),
    }
}

/// Whether the prewrite skips looking for newer records: a pessimistic
/// transaction's key is checked only when its uniqueness check was
/// deferred, or, for a key the caller vouches for without a pessimistic
/// lock, when the request is a retry (its pessimistic lock already vouches
/// for a `DoPessimisticCheck` key).
fn skips_constraint_check(props: &TransactionProperties, mutation: &Mutation) -> bool {
    match props.kind {
        TransactionKind::Optimistic => false,
        TransactionKind::Pessimistic { .. } => match mutation.pessimistic_action {
            PessimisticAction::DoPessimisticCheck => true,
            PessimisticAction::SkipPessimisticCheck => !props.is_retry_request,
            PessimisticAction::DoConstraintCheck => false,
        },
    }
}

/// Any record newer than the start_ts is a write conflict for an optimistic
/// transaction; for a pessimistic one a commit newer than the start_ts is
/// (`LazyUniquenessCheck`), and a record newer than its for_update_ts other
/// than a Rollback means its lock was lost. A rollback of this very
/// transaction (its own record, or another commit record marked overlapped
/// at start_ts) means it was rolled back. Returns the newest record
/// otherwise.
fn check_for_newer_version<S: Snapshot>(
    reader: &mut MvccReader<S>,
    props: &TransactionProperties,
    mutation: &Mutation,
) -> Result<Option<(TimeStamp, Write)>> {
    let key = &mutation.key;
    let mut seek_ts = TimeStamp::max();
    while let Some((commit_ts, write)) = reader.seek_write(key, seek_ts)? {
        let conflict = |reason| {
            Err(Error::from(percolate_mvcc::Error::WriteConflict {
                start_ts: props.start_ts,
                conflict_start_ts: write.start_ts,
                conflict_commit_ts: commit_ts,
                key: key.clone(),
                primary: props.primary.clone(),
                reason,
            }))
        };
        if commit_ts == props.start_ts
            && (write.write_type == WriteType::Rollback || write.has_overlapped_rollback)
        {
            return conflict(WriteConflictReason::SelfRolledBack);
        }
        match props.kind {
            TransactionKind::Optimistic => {
                if commit_ts > props.start_ts {
                    return conflict(WriteConflictReason::Optimistic);
                }
            }
            TransactionKind::Pessimistic { for_update_ts } => {
                if commit_ts > props.start_ts
                    && mutation.pessimistic_action == PessimisticAction::DoConstraintCheck
                {
                    return conflict(WriteConflictReason::LazyUniquenessCheck);
                }
                if commit_ts > for_update_ts {
                    // A newer rollback does not stop the key: rollbacks are
                    // written whether or not the key is locked.
                    if write.write_type == WriteType::Rollback && !commit_ts.is_zero() {
                        seek_ts = commit_ts.prev();
                        continue;
                    }
                    return Err(lock_not_found(
                        props,
                        key,
                        PessimisticLockNotFoundReason::NonLockKeyConflict,
                    ));
                }
            }
        }
        return Ok(Some((commit_ts, write)));
    }
    Ok(None)
}

/// The key's newest Put or Delete at the start_ts, found from the newest
/// record (walking down past Lock and Rollback records): whether it is a
/// value, with its `(start_ts, commit_ts)`.
fn newest_data_version<S: Snapshot>(
    reader: &mut MvccReader<S>,
    start_ts: TimeStamp,
    key: &Key,
    mut newest: Option<(TimeStamp, Write)>,
) -> Result<Option<(bool, TimeStamp, TimeStamp)>> {
    while let Some((commit_ts, write)) = newest {
        match write.write_type {
            WriteType::Put => {
                let exists = write.as_ref().check_gc_fence_as_latest_version(start_ts);
                return Ok(Some((exists, write.start_ts, commit_ts)));
            }
            WriteType::Delete => return Ok(Some((false, write.start_ts, commit_ts))),
            _ if commit_ts.is_zero() => return Ok(None),
            _ => newest = reader.seek_write(key, commit_ts.prev())?,
        }
    }
    Ok(None)
}

/// Insert / CheckNotExists / DeleteInserted and existence assertions. A failed assertion
/// names the key's newest Put or Delete (zeros when it has none).
fn check_existence<S: Snapshot>(
    reader: &mut MvccReader<S>,
    props: &TransactionProperties,
    mutation: &Mutation,
    newest: Option<(TimeStamp, Write)>,
) -> Result<()> {
    let version = newest_data_version(reader, props.start_ts, &mutation.key, newest)?;
    let exists = version.is_some_and(|(exists, _, _)| exists);
    if let (true, true, Some((_, existing_start_ts, _))) =
        (mutation.should_not_exist(), exists, version)
    {
        return Err(percolate_mvcc::Error::AlreadyExist {
            key: mutation.key.clone(),
            existing_start_ts,
        }
        .into());
    }
    let holds = match mutation.assertion {
        Some(Assertion::Exist) => exists,
        Some(Assertion::NotExist) => !exists,
        _ => true,
    };
    if holds {
        return Ok(());
    }
    let (existing_start_ts, existing_commit_ts) = version
        .map(|(_, start_ts, commit_ts)| (start_ts, commit_ts))
        .unwrap_or_default();
    Err(percolate_mvcc::Error::AssertionFailed {
        start_ts: props.start_ts,
        key: mutation.key.clone(),
        assertion: mutation.assertion.unwrap_or(Assertion::Exist),
        existing_start_ts,
        existing_commit_ts,
    }
    .into())
}

/// The min_commit_ts of a key that is only checked (CheckNotExists): zero
/// for 2PC; for async commit and 1PC `max(requested min_commit_ts,
/// start_ts + 1)`. max_ts plays no part: the check leaves no lock, so there
/// is nothing a reader could miss.
fn check_only_min_commit_ts(props: &TransactionProperties) -> TimeStamp {
    match props.commit_kind {
        CommitKind::TwoPc => TimeStamp::zero(),
        CommitKind::Async { .. } | CommitKind::OnePc { .. } => {
            props.min_commit_ts.max(props.start_ts.next())
        }
    }
}

/// Sets the async-commit fields of `lock` and computes its min_commit_ts
/// for async commit and 1PC. `CommitTsTooLarge` when it would exceed the
/// caller's limit or the oracle's range: the caller falls back to 2PC.
fn commit_ts_bound(
    props: &TransactionProperties,
    lock: &mut Lock,
    secondaries: Option<&[Vec<u8>]>,
) -> Result<TimeStamp> {
    let max_commit_ts = match props.commit_kind {
        CommitKind::TwoPc => return Ok(TimeStamp::zero()),
        CommitKind::Async { max_commit_ts } => {
            lock.use_async_commit = true;
            lock.secondaries = secondaries.map(<[_]>::to_vec).unwrap_or_default();
            max_commit_ts
        }
        CommitKind::OnePc { max_commit_ts } => {
            lock.use_one_pc = true;
            max_commit_ts
        }
    };
    // Bounded by the oracle's range as by the request's max_commit_ts: a
    // commit_ts beyond it would leave a reopened oracle no room above it.
    let bound = crate::oracle::last_in_range();
    let max_commit_ts = if max_commit_ts.is_zero() {
        bound
    } else {
        max_commit_ts.min(bound)
    };
    let below = props
        .max_ts
        .max(props.start_ts)
        .max(props.kind.for_update_ts());
    let min_commit_ts = if below >= bound {
        TimeStamp::max()
    } else {
        below.next().max(lock.min_commit_ts)
    };
    if min_commit_ts > max_commit_ts {
        return Err(percolate_mvcc::Error::CommitTsTooLarge {
            start_ts: props.start_ts,
            min_commit_ts,
            max_commit_ts,
        }
        .into());
    }
    lock.min_commit_ts = min_commit_ts;
    Ok(min_commit_ts)
}

/// The answer to a whole prewrite request.
#[derive(Debug, Default)]
pub struct PrewriteResult {
    /// The lock of another transaction on each key that has one (what
    /// TiKV reports as one `KeyIsLocked` error per key). When not empty,
    /// nothing was written: resolve the locks and retry.
    pub locks: Vec<LockInfo>,
    /// For async commit: the largest min_commit_ts of the keys (the
    /// transaction's commit_ts). `None` for 2PC, including a fallback from
    /// async commit, and when locks were met. (TiKV's 0.)
    pub min_commit_ts: Option<TimeStamp>,
    /// For 1PC: the commit_ts the transaction committed at. `None` when 1PC
    /// was not asked for, fell back to 2PC, or met locks. (TiKV's 0.)
    pub one_pc_commit_ts: Option<TimeStamp>,
}

/// Prewrites every mutation of a request against one snapshot and returns
/// the modifications to write atomically, with the answer.
///
/// * A key locked by another transaction does not stop the others from
///   being checked; all such keys are reported and nothing is written.
/// * A conflict or lock on a transaction that has in fact already committed
///   (a retried request) is answered with success and its commit_ts,
///   writing nothing.
/// * An async-commit or 1PC request whose commit_ts would exceed
///   `max_commit_ts` is redone as 2PC.
/// * 1PC writes commit records directly, at the largest min_commit_ts.
pub fn prewrite_mutations<S: Snapshot>(
    snapshot: &S,
    props: &TransactionProperties,
    mutations: &[Mutation],
    secondaries: Option<&[Vec<u8>]>,
) -> Result<(MvccTxn, PrewriteResult)> {
    match prewrite_all(snapshot, props, mutations, secondaries) {
        Err(Error::Mvcc(percolate_mvcc::Error::CommitTsTooLarge { .. })) => {
            let two_pc = TransactionProperties {
                commit_kind: CommitKind::TwoPc,
                ..props.clone()
            };
            prewrite_all(snapshot, &two_pc, mutations, None)
        }
        other => other,
    }
}

fn prewrite_all<S: Snapshot>(
    snapshot: &S,
    props: &TransactionProperties,
    mutations: &[Mutation],
    secondaries: Option<&[Vec<u8>]>,
) -> Result<(MvccTxn, PrewriteResult)> {
    let mut txn = MvccTxn::new(props.start_ts);
    // A sorted batch of several keys reads through forward cursors.
    let ascending = mutations.len() > 1
        && mutations
            .windows(2)
            .all(|pair| pair[0].key.as_encoded() < pair[1].key.as_encoded());
    let mut reader = MvccReader::new(snapshot.clone()).ascending(ascending);
    let mut keys = Prewritten::default();
    if matches!(props.commit_kind, CommitKind::OnePc { .. }) {
        // One allocation for a request of several keys, none for one.
        keys.one_pc_locks.reserve(mutations.len());
    }
    for mutation in mutations {
        let key = &mutation.key;
        let is_primary = key.is_encoded_from(&props.primary);
        let secondaries = secondaries.filter(|_| is_primary);
        match prewrite(&mut txn, &mut reader, props, mutation.clone(), secondaries) {
            Ok(done) => keys.add(done),
            Err(e @ Error::Mvcc(percolate_mvcc::Error::AssertionFailed { .. })) => {
                keys.assertion_failure.get_or_insert(e);
            }
            Err(e) if is_lock_or_conflict(&e) => {
                if let Some(commit_ts) = committed_ts(&mut reader, props, key)? {
                    return Ok((
                        MvccTxn::new(props.start_ts),
                        already_committed(props, commit_ts),
                    ));
                }
                match e {
                    Error::Mvcc(percolate_mvcc::Error::KeyIsLocked(lock)) => keys.locks.push(*lock),
                    _ => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    keys.finish(txn, props)
}

/// The locks a 1PC request turns into commit records, each with whether
/// it replaces a pessimistic lock: a single key's on the stack (a lock is
/// 184 bytes, and the list moves twice on its way to the commit records:
/// room for more would be copied on every commit), more on the heap.
type OnePcLocks = smallvec::SmallVec<[(Key, Lock, bool); 1]>;

/// What the keys of a request came to, as they are prewritten.
#[derive(Default)]
struct Prewritten {
    /// The locks of other transactions met.
    locks: Vec<LockInfo>,
    /// The largest min_commit_ts of the keys; zero when no key computed
    /// one.
    commit_ts: TimeStamp,
    /// For 1PC: each key's lock, and whether it replaces a pessimistic
    /// lock.
    one_pc_locks: OnePcLocks,
    /// Reported only if nothing else goes wrong: a conflict or a lock on a
    /// later key is the error the client must act on first.
    assertion_failure: Option<Error>,
}

impl Prewritten {
    fn add(&mut self, done: PrewriteKeyResult) {
        self.commit_ts = self.commit_ts.max(done.min_commit_ts);
        if let Some((key, lock)) = done.one_pc_lock {
            self.one_pc_locks
                .push((key, lock, done.remove_pessimistic_lock));
        }
    }

    /// The request's answer, with what to write: nothing when a key failed
    /// its assertion or was locked; for 1PC, the commit records.
    fn finish(self, mut txn: MvccTxn, props: &TransactionProperties) -> Result<(MvccTxn, PrewriteResult)> {
        if let Some(e) = self.assertion_failure {
            return Err(e);
        }
        let mut result = PrewriteResult {
            locks: self.locks,
            ..Default::default()
        };
        if !result.locks.is_empty() {
            return Ok((MvccTxn::new(props.start_ts), result));
        }
        // Zero when no key computed one: a retry that found only its own
        // 2PC locks (its first attempt fell back).
        let computed = Some(self.commit_ts).filter(|ts| !ts.is_zero());
        match props.commit_kind {
            CommitKind::OnePc { .. } => {
                commit_one_pc(&mut txn, self.one_pc_locks, self.commit_ts)?;
                result.one_pc_commit_ts = computed;
            }
            CommitKind::Async { .. } => result.min_commit_ts = computed,
            CommitKind::TwoPc => {}
        }
        Ok((txn, result))
    }
}

fn is_lock_or_conflict(e: &Error) -> bool {
    matches!(
        e,
        Error::Mvcc(
            percolate_mvcc::Error::KeyIsLocked(_)
                | percolate_mvcc::Error::WriteConflict { .. }
                | percolate_mvcc::Error::PessimisticLockNotFound { .. }
        )
    )
}

/// The commit_ts of the transaction on `key`, if it already committed.
fn committed_ts<S: Snapshot>(
    reader: &mut MvccReader<S>,
    props: &TransactionProperties,
    key: &Key,
) -> Result<Option<TimeStamp>> {
    Ok(reader
        .get_txn_commit_record(key, props.start_ts)?
        .committed_ts())
}

/// The answer to a retried prewrite of a transaction that committed.
fn already_committed(props: &TransactionProperties, commit_ts: TimeStamp) -> PrewriteResult {
    let mut result = PrewriteResult::default();
    match props.commit_kind {
        CommitKind::TwoPc => {}
        CommitKind::Async { .. } => result.min_commit_ts = Some(commit_ts),
        CommitKind::OnePc { .. } => result.one_pc_commit_ts = Some(commit_ts),
    }
    result
}

/// Turns the would-be locks of a 1PC transaction into commit records,
/// removing the pessimistic locks they replace.
fn commit_one_pc(
    txn: &mut MvccTxn,
    locks: OnePcLocks,
    commit_ts: TimeStamp,
) -> Result<()> {
    for (key, lock, remove_pessimistic_lock) in locks {
        if remove_pessimistic_lock {
            txn.unlock_key(key.clone());
        }
        let Some(write_type) = WriteType::from_lock_type(lock.lock_type) else {
            return Err(Error::InvalidRequest {
                reason: "a 1PC lock must be committable",
                key: Some(key),
            });
        };
        let write = Write::new(write_type, lock.ts, lock.short_value)
            .set_last_change(lock.last_change)
            .set_txn_source(lock.txn_source);
        txn.put_commit(key, commit_ts, &write);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use percolate_engine::Engine;
    use percolate_mvcc::{Key, LockType};

    use super::*;
    use crate::testing::TxnFixture;

    fn raw(i: usize) -> Vec<u8> {
        format!("key{i:03}").into_bytes()
    }

    fn batch(keys: std::ops::Range<usize>) -> Vec<Mutation> {
        keys.map(|i| Mutation::put(Key::from_raw(&raw(i)), b"v".to_vec()))
            .collect()
    }

    /// Sorted batches take the reader's forward cursors: a conflict or a
    /// lock on a key in the middle of the batch, between keys without
    /// records, is still found, and keys after it are still checked.
    fn sorted_batch_finds_what_is_in_the_middle<E: Engine>(engine: E) {
        let f = TxnFixture::new(engine);
        f.must_prewrite_put(&raw(5), b"old", &raw(5), 10);
        f.must_commit(&raw(5), 10, 20);
        f.must_prewrite_put(&raw(8), b"other", &raw(8), 12);

        // Started before the commit at 20: a write conflict on key 5.
        let err = f.assert_unchanged(|| {
            f.prewrite(&TxnFixture::<E>::props(&raw(0), 15), batch(0..10), None)
        });
        assert!(
            matches!(
                err,
                Err(Error::Mvcc(percolate_mvcc::Error::WriteConflict { ref key, .. })) if *key == Key::from_raw(&raw(5))
            ),
            "{err:?}"
        );

        // Started after it: only key 8's lock stands in the way.
        let result = f.assert_unchanged(|| {
            f.prewrite(&TxnFixture::<E>::props(&raw(0), 30), batch(0..10), None)
                .unwrap()
        });
        assert_eq!(result.locks.len(), 1, "{:?}", result.locks);
        assert!(result.locks[0].key == raw(8), "{:?}", result.locks);

        // Once it is gone every key gets its lock.
        f.must_commit(&raw(8), 12, 25);
        f.must_prewrite_mutations(&TxnFixture::<E>::props(&raw(0), 30), batch(0..10), None);
        for i in 0..10 {
            assert_eq!(f.must_locked(&raw(i), 30).lock_type, LockType::Put);
        }
        // And a retry of the same request is answered from its own locks.
        f.assert_unchanged(|| {
            f.must_prewrite_mutations(&TxnFixture::<E>::props(&raw(0), 30), batch(0..10), None)
        });
    }

    /// Prewrites `mutation` at `start_ts` over the latest data and counts
    /// the write-CF reads it made.
    fn prewrite_counting_reads<E: Engine>(
        f: &TxnFixture<E>,
        mutation: Mutation,
        start_ts: u64,
    ) -> (Result<PrewriteKeyResult>, usize) {
        let props = TxnFixture::<E>::props(&raw(0), start_ts);
        let mut txn = MvccTxn::new(props.start_ts);
        let mut reader = MvccReader::new(f.engine().latest());
        let outcome = prewrite(&mut txn, &mut reader, &props, mutation, None);
        (outcome, reader.statistics().write.total())
    }

    #[track_caller]
    fn assert_conflict(outcome: &Result<PrewriteKeyResult>, expected: WriteConflictReason) {
        assert!(
            matches!(
                outcome,
                Err(Error::Mvcc(percolate_mvcc::Error::WriteConflict { reason, .. })) if *reason == expected
            ),
            "{outcome:?}"
        );
    }

    /// The conflict check reads nothing where the engine's ts ceiling of
    /// the key is below the start_ts, and still finds a newer commit or an
    /// own rollback (both at or above the start_ts) where it is not.
    fn conflict_check_reads_only_below_the_ceiling<E: Engine>(engine: E) {
        let f = TxnFixture::new(engine);
        let k = raw(1);
        f.must_prewrite_put(&k, b"old", &k, 10);
        f.must_commit(&k, 10, 20);
        let put = || Mutation::put(Key::from_raw(&k), b"new".to_vec());

        let (outcome, reads) = prewrite_counting_reads(&f, put(), 30);
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(reads, 0, "every record is older than 30");

        let (outcome, reads) = prewrite_counting_reads(&f, put(), 15);
        assert_conflict(&outcome, WriteConflictReason::Optimistic);
        assert!(reads > 0);

        // A rollback record sits at the start_ts itself.
        let r = raw(2);
        f.must_rollback(&r, 40);
        let (outcome, _) =
            prewrite_counting_reads(&f, Mutation::put(Key::from_raw(&r), b"v".to_vec()), 40);
        assert_conflict(&outcome, WriteConflictReason::SelfRolledBack);

        // An insert must see the value, ceiling or not.
        let (outcome, reads) =
            prewrite_counting_reads(&f, Mutation::insert(Key::from_raw(&k), b"v".to_vec()), 30);
        assert!(
            matches!(
                outcome,
                Err(Error::Mvcc(percolate_mvcc::Error::AlreadyExist { .. }))
            ),
            "{outcome:?}"
        );
        assert!(reads > 0);
    }

    crate::testing::on_both_engines! {
        conflict_check_reads_only_below_the_ceiling => conflict_check_reads_only_below_the_ceiling;
        sorted_batch_finds_what_is_in_the_middle => sorted_batch_finds_what_is_in_the_middle;
    }
}
