//! docs/BEHAVIOUR.md group D and C18-C25: pessimistic locks and the
//! pessimistic prewrite, one named test per scenario, each run on the
//! memory engine and on RocksDB; then the pessimistic sides of
//! CheckTxnStatus, TxnHeartBeat and PessimisticRollback.
//!
//! As in `txn_behaviour.rs`, every call runs one action on a fresh snapshot
//! through `TxnFixture` and writes what it recorded. Lock waiting and
//! deadlocks, which need the region's commands, are in
//! `storage_behaviour.rs`.

mod common;

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Engine, MemoryEngine};
use percolate::mvcc::testing::ts;
use percolate::mvcc::{
    Error as MvccError, Key, LockType, PessimisticLockNotFoundReason, TimeStamp,
    WriteConflictReason, WriteType,
};
use percolate::txn::Error;
use percolate::txn::actions::TxnStatus;
use percolate::txn::actions::acquire_pessimistic_lock::{
    PessimisticLockKeyResult, PessimisticLockOptions,
};
use percolate::txn::actions::check_txn_status::CheckTxnStatusOptions;
use percolate::txn::actions::prewrite::{
    CommitKind, Mutation, PessimisticAction, TransactionProperties,
};
use percolate::txn::testing::TxnFixture;

use PessimisticAction::{DoConstraintCheck, DoPessimisticCheck, SkipPessimisticCheck};

fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

#[track_caller]
fn mvcc_err(err: &Error) -> &MvccError {
    err.as_mvcc()
        .unwrap_or_else(|| panic!("expected an MVCC error, got {err}"))
}

/// A write conflict with `(start_ts, conflict_start_ts, conflict_commit_ts)`
/// and `reason`.
#[track_caller]
fn assert_conflict(err: &Error, (start, cs, cc): (u64, u64, u64), reason: WriteConflictReason) {
    match mvcc_err(err) {
        MvccError::WriteConflict {
            start_ts,
            conflict_start_ts,
            conflict_commit_ts,
            reason: found,
            ..
        } => {
            assert_eq!(
                (*start_ts, *conflict_start_ts, *conflict_commit_ts),
                (ts(start), ts(cs), ts(cc)),
                "{err}"
            );
            assert_eq!(*found, reason);
        }
        other => panic!("expected WriteConflict, got {other}"),
    }
}

/// `AlreadyExist`, naming the existing version written by `existing_start`.
#[track_caller]
fn assert_already_exists(err: &Error, existing_start: u64) {
    assert!(
        matches!(
            mvcc_err(err),
            MvccError::AlreadyExist { existing_start_ts, .. } if *existing_start_ts == ts(existing_start)
        ),
        "{err}"
    );
}

/// The error of a pessimistic prewrite inserting `k` with
/// `DoConstraintCheck` at `start_ts` and `for_update_ts`, which must fail
/// and change nothing.
#[track_caller]
fn insert_with_constraint_check<E: Engine>(
    f: &TxnFixture<E>,
    start_ts: u64,
    for_update_ts: u64,
) -> Error {
    let props = pessimistic_props(b"k", start_ts, for_update_ts, 3000);
    let insert =
        Mutation::insert(key(b"k"), b"v".to_vec()).with_pessimistic_action(DoConstraintCheck);
    f.assert_unchanged(|| f.prewrite(&props, vec![insert], None))
        .unwrap_err()
}

#[track_caller]
fn assert_lock_not_found(err: &Error, expected: PessimisticLockNotFoundReason) {
    match mvcc_err(err) {
        MvccError::PessimisticLockNotFound { reason, .. } => assert_eq!(*reason, expected),
        other => panic!("expected PessimisticLockNotFound, got {other}"),
    }
}

#[track_caller]
fn assert_rolled_back(err: &Error, k: &[u8], start: u64) {
    match mvcc_err(err) {
        MvccError::PessimisticLockRolledBack { start_ts, key: at } => {
            assert_eq!((*start_ts, at), (ts(start), &key(k)));
        }
        other => panic!("expected PessimisticLockRolledBack, got {other}"),
    }
}

/// A pessimistic prewrite of a Put of `k` (DoPessimisticCheck) that must
/// fail and write nothing; its error.
#[track_caller]
fn must_pessimistic_prewrite_err<E: Engine>(
    f: &TxnFixture<E>,
    k: &[u8],
    primary: &[u8],
    start_ts: u64,
    for_update_ts: u64,
) -> Error {
    f.assert_unchanged(|| {
        f.pessimistic_prewrite_put(
            k,
            b"v",
            primary,
            start_ts,
            for_update_ts,
            DoPessimisticCheck,
        )
    })
    .unwrap_err()
}

/// The options of a request asking for the value (and more, by `tweak`).
fn options_with(
    primary: &[u8],
    for_update_ts: u64,
    tweak: impl FnOnce(&mut PessimisticLockOptions),
) -> PessimisticLockOptions {
    let mut options = TxnFixture::<MemoryEngine>::lock_options(primary, for_update_ts);
    tweak(&mut options);
    options
}

/// A pessimistic prewrite of one mutation, TTL and min_commit_ts as given.
fn pessimistic_props(
    primary: &[u8],
    start_ts: u64,
    for_update_ts: u64,
    lock_ttl: u64,
) -> TransactionProperties {
    TransactionProperties {
        lock_ttl,
        ..TxnFixture::<MemoryEngine>::pessimistic_props(primary, start_ts, for_update_ts)
    }
}

/// `props` committed by `commit_kind` (async commit or 1PC), with the
/// region's max_ts at `max_ts`.
fn computing_commit_ts(
    commit_kind: CommitKind,
    max_ts: u64,
    props: TransactionProperties,
) -> TransactionProperties {
    TransactionProperties {
        commit_kind,
        max_ts: ts(max_ts),
        ..props
    }
}

/// A pessimistic transaction's properties (lock TTL 3000) that compute its
/// commit_ts as `kind` does (no max_commit_ts) above a `max_ts`.
fn pessimistic_computing(
    kind: fn(TimeStamp) -> CommitKind,
    max_ts: u64,
    primary: &[u8],
    start_ts: u64,
    for_update_ts: u64,
) -> TransactionProperties {
    computing_commit_ts(
        kind(TimeStamp::zero()),
        max_ts,
        pessimistic_props(primary, start_ts, for_update_ts, 3000),
    )
}

fn async_commit(max_commit_ts: TimeStamp) -> CommitKind {
    CommitKind::Async { max_commit_ts }
}

fn one_pc(max_commit_ts: TimeStamp) -> CommitKind {
    CommitKind::OnePc { max_commit_ts }
}

fn pessimistic_put(k: &[u8], value: &[u8], action: PessimisticAction) -> Mutation {
    Mutation::put(key(k), value.to_vec()).with_pessimistic_action(action)
}

// ---------------------------------------------------------------- group D

/// D1: a pessimistic lock is taken, a repeated request with a smaller
/// for_update_ts changes nothing, a larger one raises it; the lock never
/// blocks a read.
fn d1_acquire_repeat_and_raise_for_update_ts<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"old", 1, 2);
    f.must_acquire_pessimistic_lock(b"k", b"k", 35, 36);
    let lock = f.must_locked(b"k", 35);
    assert_eq!(
        (lock.lock_type, lock.for_update_ts),
        (LockType::Pessimistic, ts(36))
    );
    f.assert_unchanged(|| f.must_acquire_pessimistic_lock(b"k", b"k", 35, 35));
    assert_eq!(f.must_locked(b"k", 35).for_update_ts, ts(36));
    f.must_acquire_pessimistic_lock(b"k", b"k", 35, 37);
    assert_eq!(f.must_locked(b"k", 35).for_update_ts, ts(37));
    f.must_get(b"k", 40, b"old");
    assert!(f.writes(b"k").len() == 1, "no record was written");
    // A request naming another primary at the same for_update_ts (the
    // transaction chose a new one after giving a statement's keys back)
    // takes the lock over for it, for_update_ts kept.
    f.must_acquire_pessimistic_lock(b"k", b"p", 35, 37);
    let lock = f.must_locked(b"k", 35);
    assert_eq!(
        (lock.primary.as_slice(), lock.for_update_ts),
        (&b"p"[..], ts(37))
    );
    f.must_acquire_pessimistic_lock(b"k", b"q", 35, 36);
    let lock = f.must_locked(b"k", 35);
    assert_eq!(
        (lock.primary.as_slice(), lock.for_update_ts),
        (&b"q"[..], ts(37))
    );
}

/// D2: a commit newer than for_update_ts is a PessimisticRetry conflict;
/// with for_update_ts at that commit the lock is taken, and the
/// transaction prewrites and commits.
fn d2_newer_commit_than_for_update_ts<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v7", 7, 9);
    let err = f.must_acquire_pessimistic_lock_err(b"k", b"k", 8, 8);
    assert_conflict(&err, (8, 7, 9), WriteConflictReason::PessimisticRetry);
    f.must_unlocked(b"k");
    f.must_acquire_pessimistic_lock(b"k", b"k", 8, 9);
    f.must_pessimistic_prewrite_put(b"k", b"v8", b"k", 8, 9);
    f.must_commit(b"k", 8, 10);
    f.must_get(b"k", 10, b"v8");
}

/// D2 with `allow_lock_with_conflict` (TiKV's fair locking): the newer
/// commit is locked over at its commit_ts, the lock flagged, and the value
/// there answered whatever was asked; the transaction commits above it.
fn d2_lock_with_conflict<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v7", 7, 9);
    let allowed = options_with(b"k", 8, |o| o.allow_lock_with_conflict = true);
    let locked = f
        .acquire_pessimistic_lock(b"k", 8, false, &allowed)
        .unwrap();
    assert_eq!(
        locked,
        PessimisticLockKeyResult::LockedWithConflict {
            value: Some(b"v7".to_vec()),
            conflict_ts: ts(9),
        }
    );
    let lock = f.must_locked(b"k", 8);
    assert!(lock.is_pessimistic_lock() && lock.is_locked_with_conflict);
    assert_eq!(lock.for_update_ts, ts(9));
    // The same request again (its answer lost) answers the same, writing
    // nothing.
    let again = f
        .assert_unchanged(|| f.acquire_pessimistic_lock(b"k", 8, false, &allowed))
        .unwrap();
    assert_eq!(again, locked);
    // A later request above the conflict raises the lock, unflagged.
    let later = options_with(b"k", 12, |o| o.allow_lock_with_conflict = true);
    assert_eq!(
        f.acquire_pessimistic_lock(b"k", 8, false, &later).unwrap(),
        PessimisticLockKeyResult::Empty
    );
    let lock = f.must_locked(b"k", 8);
    assert!(!lock.is_locked_with_conflict);
    assert_eq!(lock.for_update_ts, ts(12));
    f.must_pessimistic_prewrite_put(b"k", b"v8", b"k", 8, 12);
    f.must_commit(b"k", 8, 13);
    f.must_get(b"k", 13, b"v8");
    f.must_get(b"k", 12, b"v7");
}

/// Locking with conflict keeps the other checks: the transaction's own
/// rollback still refuses the lock, an insert's constraint is left to the
/// caller (the value is answered), and `lock_only_if_exists` locks nothing
/// when the newest commit is a Delete. A request of several keys may not
/// lock with conflict.
fn d2_lock_with_conflict_and_the_other_checks<E: Engine>(f: TxnFixture<E>) {
    f.must_rollback(b"r", 18);
    f.must_put_committed(b"r", b"v", 19, 20);
    let allowed =
        |for_update_ts| options_with(b"r", for_update_ts, |o| o.allow_lock_with_conflict = true);
    let err = f
        .assert_unchanged(|| f.acquire_pessimistic_lock(b"r", 18, false, &allowed(18)))
        .unwrap_err();
    assert_rolled_back(&err, b"r", 18);

    f.must_put_committed(b"i", b"there", 5, 6);
    let inserted = f
        .acquire_pessimistic_lock(b"i", 4, true, &allowed(4))
        .unwrap();
    assert_eq!(
        inserted,
        PessimisticLockKeyResult::LockedWithConflict {
            value: Some(b"there".to_vec()),
            conflict_ts: ts(6),
        }
    );
    assert!(f.must_locked(b"i", 4).is_locked_with_conflict);

    f.must_put_committed(b"d", b"v", 1, 2);
    f.must_prewrite_delete(b"d", b"d", 3);
    f.must_commit(b"d", 3, 4);
    let only_if_exists = options_with(b"d", 2, |o| {
        o.allow_lock_with_conflict = true;
        o.lock_only_if_exists = true;
        o.return_value = true;
    });
    let deleted = f
        .assert_unchanged(|| f.acquire_pessimistic_lock(b"d", 2, false, &only_if_exists))
        .unwrap();
    assert_eq!(
        deleted,
        PessimisticLockKeyResult::LockedWithConflict {
            value: None,
            conflict_ts: ts(4),
        }
    );
}

/// D4: the transaction's own rollback refuses the lock, even below newer
/// versions.
fn d4_own_rollback_refuses_the_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"k", b"k", 18, 18);
    f.must_rollback(b"k", 18);
    f.must_unlocked(b"k");
    f.must_put_committed(b"k", b"v", 19, 20);
    let err = f.must_acquire_pessimistic_lock_err(b"k", b"k", 18, 21);
    assert_rolled_back(&err, b"k", 18);
    // Directly on the rollback record too.
    f.must_rollback(b"r", 30);
    let err = f.must_acquire_pessimistic_lock_err(b"r", b"r", 30, 30);
    assert_rolled_back(&err, b"r", 30);
}

/// D5: a commit record at the start_ts marked as an overlapped rollback of
/// it refuses the lock.
fn d5_overlapped_rollback_at_start_ts<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 50);
    f.must_commit(b"k", 50, 60);
    f.must_cleanup(b"k", 60, 0);
    assert!(f.must_have_write(b"k", 60).has_overlapped_rollback);
    let err = f.must_acquire_pessimistic_lock_err(b"k", b"k", 60, 60);
    assert_rolled_back(&err, b"k", 60);
}

/// D7: lock_only_if_exists without return_value is refused; with it, an
/// absent key is left unlocked and a present one is locked.
fn d7_lock_only_if_exists<E: Engine>(f: TxnFixture<E>) {
    let refused = options_with(b"k", 10, |o| o.lock_only_if_exists = true);
    let err = f
        .assert_unchanged(|| f.acquire_pessimistic_lock(b"k", 10, false, &refused))
        .unwrap_err();
    match mvcc_err(&err) {
        MvccError::LockIfExistsFailed { start_ts, key: at } => {
            assert_eq!((*start_ts, at), (ts(10), &key(b"k")));
        }
        other => panic!("expected LockIfExistsFailed, got {other}"),
    }
    let asked = options_with(b"k", 10, |o| {
        o.lock_only_if_exists = true;
        o.return_value = true;
    });
    let absent = f
        .assert_unchanged(|| f.acquire_pessimistic_lock(b"absent", 10, false, &asked))
        .unwrap();
    assert_eq!(absent, PessimisticLockKeyResult::Value(None));
    f.must_put_committed(b"there", b"v", 1, 2);
    let there = f
        .acquire_pessimistic_lock(b"there", 10, false, &asked)
        .unwrap();
    assert_eq!(there, PessimisticLockKeyResult::Value(Some(b"v".to_vec())));
    assert!(f.must_locked(b"there", 10).is_pessimistic_lock());
}

/// D8: after two non-protected rollbacks the second collapses the first, so
/// a lock request of the first transaction above both succeeds: a known
/// weakness kept as TiKV keeps it.
fn d8_collapsed_rollbacks<E: Engine>(f: TxnFixture<E>) {
    f.must_rollback(b"k", 32);
    f.must_rollback(b"k", 33);
    f.must_not_have_write(b"k", 32);
    let err = f.must_acquire_pessimistic_lock_err(b"k", b"k", 32, 32);
    assert_conflict(&err, (32, 33, 33), WriteConflictReason::PessimisticRetry);
    f.must_acquire_pessimistic_lock(b"k", b"k", 32, 34);
    assert_eq!(f.must_locked(b"k", 32).for_update_ts, ts(34));
}

/// Locks and their holders: another transaction's lock is `KeyIsLocked`
/// (its TTL shown as it is), the transaction's own prewrite lock is
/// `LockTypeNotMatch`.
fn d_existing_locks<E: Engine>(f: TxnFixture<E>) {
    f.must_put_lock(b"o", &TxnFixture::<E>::pessimistic_lock(b"o", 10, 10));
    let err = f.must_acquire_pessimistic_lock_err(b"o", b"k", 20, 20);
    match mvcc_err(&err) {
        MvccError::KeyIsLocked(info) => {
            assert_eq!((info.lock_version, info.lock_ttl), (ts(10), 3000));
        }
        other => panic!("expected KeyIsLocked, got {other}"),
    }
    f.must_prewrite_put(b"k", b"v", b"k", 10);
    let err = f.must_acquire_pessimistic_lock_err(b"k", b"k", 10, 10);
    assert!(
        matches!(
            mvcc_err(&err),
            MvccError::LockTypeNotMatch {
                pessimistic: false,
                ..
            }
        ),
        "{err}"
    );
}

/// Values and existence at for_update_ts, through Lock and Rollback
/// records, and `AlreadyExist` for an insert.
fn d_return_values_existence_and_inserts<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 1, 2);
    f.must_lock_committed(b"k", 3, 4);
    f.must_rollback(b"k", 5);
    f.must_put_committed(b"d", b"v", 1, 2);
    f.must_delete_committed(b"d", 3, 4);
    let value = options_with(b"k", 10, |o| o.return_value = true);
    let exists = options_with(b"k", 10, |o| o.check_existence = true);
    for (k, expected) in [(&b"k"[..], Some(b"v".to_vec())), (b"d", None), (b"x", None)] {
        let got = f.acquire_pessimistic_lock(k, 10, false, &value).unwrap();
        assert_eq!(
            got,
            PessimisticLockKeyResult::Value(expected.clone()),
            "{k:?}"
        );
        // The repeated request answers the same.
        let got = f.acquire_pessimistic_lock(k, 10, false, &exists).unwrap();
        assert_eq!(got, PessimisticLockKeyResult::Existence(expected.is_some()));
        f.must_pessimistic_rollback(k, 10, 10);
    }
    let plain = TxnFixture::<E>::lock_options(b"k", 10);
    let err = f
        .assert_unchanged(|| f.acquire_pessimistic_lock(b"k", 10, true, &plain))
        .unwrap_err();
    assert_already_exists(&err, 1);
    assert_eq!(
        f.acquire_pessimistic_lock(b"d", 10, true, &plain).unwrap(),
        PessimisticLockKeyResult::Empty
    );
}

// ------------------------------------------------------- group C: C16-C25

/// C16, pessimistic path: a transaction rolled back on a key, whose key
/// another transaction locked since, cannot prewrite it.
fn c16_pessimistic_prewrite_of_rolled_back_txn_fails<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"k1", b"k1", 10, 10);
    f.must_rollback(b"k1", 10);
    f.must_acquire_pessimistic_lock(b"k1", b"k1", 15, 15);
    let err = must_pessimistic_prewrite_err(&f, b"k1", b"k1", 10, 10);
    assert_lock_not_found(&err, PessimisticLockNotFoundReason::LockTsMismatch);
    // With the lock gone, the own rollback stops the amend.
    f.must_pessimistic_rollback(b"k1", 15, 15);
    let err = must_pessimistic_prewrite_err(&f, b"k1", b"k1", 10, 10);
    assert_lock_not_found(&err, PessimisticLockNotFoundReason::LockMissingAmendFail);
}

/// C18: the prewrite keeps the larger TTL and min_commit_ts of the request
/// and the pessimistic lock.
fn c18_pessimistic_prewrite_over_own_lock<E: Engine>(f: TxnFixture<E>) {
    for (request_ttl, expected_ttl) in [(110, 110), (90, 100)] {
        let k = format!("k{request_ttl}").into_bytes();
        let options = options_with(&k, 10, |o| {
            o.lock_ttl = 100;
            o.min_commit_ts = ts(30);
        });
        f.acquire_pessimistic_lock(&k, 10, false, &options).unwrap();
        let props = TransactionProperties {
            min_commit_ts: ts(20),
            ..pessimistic_props(&k, 10, 10, request_ttl)
        };
        f.must_prewrite_mutations(
            &props,
            vec![pessimistic_put(&k, b"v", DoPessimisticCheck)],
            None,
        );
        let lock = f.must_locked(&k, 10);
        assert_eq!(
            (
                lock.lock_type,
                lock.ttl,
                lock.min_commit_ts,
                lock.for_update_ts
            ),
            (LockType::Put, expected_ttl, ts(30), ts(10))
        );
        // A retry of the same request is answered from the lock.
        f.assert_unchanged(|| {
            f.must_prewrite_mutations(
                &props,
                vec![pessimistic_put(&k, b"v", DoPessimisticCheck)],
                None,
            )
        });
    }
}

/// C19: DoPessimisticCheck over another transaction's lock, pessimistic or
/// prewritten: `PessimisticLockNotFound(LockTsMismatch)`.
fn c19_do_pessimistic_check_over_another_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"p", b"p", 5, 5);
    f.must_prewrite_put(b"w", b"v", b"w", 5);
    for k in [&b"p"[..], b"w"] {
        let err = must_pessimistic_prewrite_err(&f, k, k, 10, 10);
        assert_lock_not_found(&err, PessimisticLockNotFoundReason::LockTsMismatch);
    }
}

/// C21: an optimistic prewrite over its own pessimistic lock.
fn c21_optimistic_prewrite_over_own_pessimistic_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"k", b"k", 10, 10);
    let err = f.must_prewrite_err(Mutation::put(key(b"k"), b"v".to_vec()), b"k", 10);
    assert!(
        matches!(
            mvcc_err(&err),
            MvccError::LockTypeNotMatch {
                pessimistic: true,
                ..
            }
        ),
        "{err}"
    );
}

/// C22: a pessimistic transaction's key without a pessimistic lock meets
/// another transaction's lock: `KeyIsLocked` with the TTL hidden (0), so
/// the client resolves it at once.
fn c22_skip_pessimistic_check_meets_another_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 5);
    assert_eq!(f.must_locked(b"k", 5).ttl, 0);
    let lock = TxnFixture::<E>::pessimistic_lock(b"other", 6, 6);
    f.must_put_lock(b"j", &lock);
    for (k, owner) in [(&b"k"[..], 5), (b"j", 6)] {
        let err = f
            .assert_unchanged(|| {
                f.pessimistic_prewrite_put(k, b"v", b"p", 10, 10, SkipPessimisticCheck)
            })
            .unwrap_err();
        match mvcc_err(&err) {
            MvccError::KeyIsLocked(info) => {
                assert_eq!((info.lock_version, info.lock_ttl), (ts(owner), 0));
            }
            other => panic!("expected KeyIsLocked, got {other}"),
        }
    }
    // The lock itself keeps its TTL.
    assert_eq!(f.must_locked(b"j", 6).ttl, 3000);
}

/// C24: a deferred uniqueness check: a commit newer than the start_ts is a
/// `LazyUniquenessCheck` conflict, an insert over a value `AlreadyExist`.
fn c24_do_constraint_check<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 12, 15);
    let err = f
        .assert_unchanged(|| {
            f.pessimistic_prewrite_put(b"k", b"v", b"k", 10, 20, DoConstraintCheck)
        })
        .unwrap_err();
    assert_conflict(&err, (10, 12, 15), WriteConflictReason::LazyUniquenessCheck);
    assert_already_exists(&insert_with_constraint_check(&f, 30, 30), 12);
    // Nothing newer and no value: the key is prewritten without a lock.
    let insert =
        Mutation::insert(key(b"new"), b"v".to_vec()).with_pessimistic_action(DoConstraintCheck);
    f.must_prewrite_mutations(&pessimistic_props(b"k", 30, 30, 3000), vec![insert], None);
    assert_eq!(f.must_locked(b"new", 30).for_update_ts, ts(30));
}

/// C25: the pessimistic lock must have the expected for_update_ts.
fn c25_expected_for_update_ts<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"k", b"k", 10, 20);
    let props = pessimistic_props(b"k", 10, 20, 3000);
    let with = |expected: u64| {
        pessimistic_put(b"k", b"v", DoPessimisticCheck).with_expected_for_update_ts(ts(expected))
    };
    let err = f
        .assert_unchanged(|| f.prewrite(&props, vec![with(15)], None))
        .unwrap_err();
    assert_lock_not_found(&err, PessimisticLockNotFoundReason::LockForUpdateTsMismatch);
    f.must_prewrite_mutations(&props, vec![with(20)], None);
    assert_eq!(f.must_locked(b"k", 10).lock_type, LockType::Put);
}

/// A Delete of a key the transaction inserted (`DeleteInserted`) is checked
/// where an Insert is: over the transaction's own pessimistic lock not at
/// all (its lock request made the check), with `DoConstraintCheck` against
/// the data (`AlreadyExist` over a value); it writes a Delete lock, and its
/// commit leaves the key deleted.
fn c24_delete_inserted_checked_where_an_insert_is<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"old", 2, 5);
    let delete_inserted =
        |raw: &[u8], action| Mutation::delete_inserted(key(raw)).with_pessimistic_action(action);
    // Deferred to the prewrite: the value the key holds refuses it, as it
    // refuses an insert.
    let props = pessimistic_props(b"k", 10, 10, 3000);
    let err = f
        .assert_unchanged(|| {
            f.prewrite(&props, vec![delete_inserted(b"k", DoConstraintCheck)], None)
        })
        .unwrap_err();
    assert_already_exists(&err, 2);
    assert_already_exists(&insert_with_constraint_check(&f, 10, 10), 2);
    // Over its own pessimistic lock: no check at the prewrite.
    f.must_acquire_pessimistic_lock(b"k", b"k", 20, 20);
    let props = pessimistic_props(b"k", 20, 20, 3000);
    f.must_prewrite_mutations(
        &props,
        vec![delete_inserted(b"k", DoPessimisticCheck)],
        None,
    );
    let lock = f.must_locked(b"k", 20);
    assert_eq!(
        (lock.lock_type, lock.for_update_ts),
        (LockType::Delete, ts(20))
    );
    f.must_commit(b"k", 20, 25);
    f.must_get_none(b"k", 30);
    // Deferred on an absent key: it passes, and the commit deletes nothing
    // that was there.
    let props = pessimistic_props(b"n", 40, 40, 3000);
    f.must_prewrite_mutations(&props, vec![delete_inserted(b"n", DoConstraintCheck)], None);
    assert_eq!(f.must_locked(b"n", 40).lock_type, LockType::Delete);
    f.must_commit(b"n", 40, 45);
    f.must_get_none(b"n", 50);
    f.must_get(b"k", 22, b"old");
}

// ------------------------------------------- the pessimistic prewrite, more

/// A key that should hold the pessimistic lock but has none is taken over
/// when nothing at or above the start_ts is on it.
fn pessimistic_prewrite_amends_a_missing_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"old", 1, 5);
    f.must_pessimistic_prewrite_put(b"k", b"v", b"k", 10, 12);
    let lock = f.must_locked(b"k", 10);
    assert_eq!(
        (lock.lock_type, lock.for_update_ts),
        (LockType::Put, ts(12))
    );
    f.must_commit(b"k", 10, 15);
    f.must_get(b"k", 15, b"v");
    // A commit at or above the start_ts stops it.
    f.must_put_committed(b"j", b"old", 20, 25);
    let err = must_pessimistic_prewrite_err(&f, b"j", b"j", 22, 30);
    assert_lock_not_found(&err, PessimisticLockNotFoundReason::LockMissingAmendFail);
}

/// The prewrite writes the larger of the request's and the lock's
/// for_update_ts; CheckNotExists has no place in a pessimistic prewrite.
fn pessimistic_prewrite_for_update_ts_and_check_not_exists<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"k", b"k", 10, 25);
    f.must_pessimistic_prewrite_put(b"k", b"v", b"k", 10, 20);
    assert_eq!(f.must_locked(b"k", 10).for_update_ts, ts(25));
    let props = pessimistic_props(b"k", 10, 20, 3000);
    let err = f
        .assert_unchanged(|| f.prewrite(&props, vec![Mutation::check_not_exists(key(b"c"))], None))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRequest { .. }), "{err}");
}

/// Async commit from a pessimistic transaction: the commit_ts is above the
/// for_update_ts as well as max_ts. 1PC commits and removes the pessimistic
/// locks in one write.
fn pessimistic_async_commit_and_one_pc<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"a", b"a", 10, 40);
    let props = pessimistic_computing(async_commit, 30, b"a", 10, 40);
    let result = f.must_prewrite_mutations(
        &props,
        vec![pessimistic_put(b"a", b"v", DoPessimisticCheck)],
        Some(&[]),
    );
    assert_eq!(result.min_commit_ts, Some(ts(41)));
    assert!(f.must_locked(b"a", 10).use_async_commit);

    f.must_acquire_pessimistic_lock(b"x", b"x", 50, 55);
    f.must_acquire_pessimistic_lock(b"y", b"x", 50, 55);
    let props = pessimistic_computing(one_pc, 60, b"x", 50, 55);
    let result = f.must_prewrite_mutations(
        &props,
        vec![
            pessimistic_put(b"x", b"vx", DoPessimisticCheck),
            pessimistic_put(b"y", b"vy", DoPessimisticCheck),
        ],
        None,
    );
    assert_eq!(result.one_pc_commit_ts, Some(ts(61)));
    for (k, v) in [(&b"x"[..], &b"vx"[..]), (b"y", b"vy")] {
        f.must_unlocked(k);
        f.must_written(k, 50, 61, WriteType::Put);
        f.must_get(k, 61, v);
    }
}

/// A retried pessimistic prewrite whose keys need no pessimistic lock
/// (SkipPessimisticCheck) checks them when marked as a retry: a transaction
/// that committed is answered with its commit, not locked again.
fn retried_skip_pessimistic_check_prewrite_finds_its_commit<E: Engine>(f: TxnFixture<E>) {
    let props = pessimistic_computing(one_pc, 5, b"k", 5, 5);
    let request = || vec![pessimistic_put(b"k", b"v", SkipPessimisticCheck)];
    let result = f.must_prewrite_mutations(&props, request(), None);
    assert_eq!(result.one_pc_commit_ts, Some(ts(6)));
    let retry = TransactionProperties {
        is_retry_request: true,
        max_ts: ts(100),
        ..props
    };
    let again = f.assert_unchanged(|| f.must_prewrite_mutations(&retry, request(), None));
    assert_eq!(again.one_pc_commit_ts, Some(ts(6)));
    assert_eq!(f.writes(b"k").len(), 1);
}

/// A key the caller vouches for without a pessimistic lock
/// (SkipPessimisticCheck) is not checked for newer records: a commit above
/// the for_update_ts does not stop it. The same request marked as a retry
/// does check it, and that commit means the key's lock was lost.
fn skip_pessimistic_check_looks_for_newer_records_only_on_a_retry<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"old", 12, 15);
    let props = pessimistic_props(b"k", 10, 10, 3000);
    let request = || vec![pessimistic_put(b"k", b"v", SkipPessimisticCheck)];
    let retry = TransactionProperties {
        is_retry_request: true,
        ..props.clone()
    };
    let err = f
        .assert_unchanged(|| f.prewrite(&retry, request(), None))
        .unwrap_err();
    assert_lock_not_found(&err, PessimisticLockNotFoundReason::NonLockKeyConflict);
    f.must_prewrite_mutations(&props, request(), None);
    assert_eq!(f.must_locked(b"k", 10).lock_type, LockType::Put);
    // Another transaction's newer rollback does not stop even the retry.
    f.must_rollback(b"r", 15);
    let request = vec![pessimistic_put(b"r", b"v", SkipPessimisticCheck)];
    f.must_prewrite_mutations(&retry, request, None);
    f.must_locked(b"r", 10);
}

/// C24 at the boundary: a commit exactly at the start_ts (an async-commit
/// or 1PC commit_ts may equal another transaction's start_ts) is in the
/// snapshot, not a `LazyUniquenessCheck` conflict: a Put locks the key, an
/// Insert finds the value.
fn c24_do_constraint_check_at_the_start_ts<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 5, 10);
    assert_already_exists(&insert_with_constraint_check(&f, 10, 10), 5);
    f.must_prewrite_mutations(
        &pessimistic_props(b"k", 10, 10, 3000),
        vec![pessimistic_put(b"k", b"v2", DoConstraintCheck)],
        None,
    );
    assert_eq!(f.must_locked(b"k", 10).lock_type, LockType::Put);
}

// --------------------------------------------- other actions, pessimistic

/// PessimisticRollback removes only the transaction's pessimistic locks
/// taken at or below its for_update_ts, and writes no record.
fn pessimistic_rollback_removes_only_its_own_older_locks<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"a", b"a", 10, 12);
    f.must_acquire_pessimistic_lock(b"b", b"a", 10, 20);
    f.must_acquire_pessimistic_lock(b"c", b"a", 10, 12);
    f.must_pessimistic_prewrite_put(b"c", b"v", b"a", 10, 12);
    f.must_acquire_pessimistic_lock(b"o", b"o", 11, 11);
    assert!(f.must_pessimistic_rollback(b"a", 10, 15));
    f.must_unlocked(b"a");
    assert!(f.writes(b"a").is_empty());
    for k in [&b"b"[..], b"c"] {
        assert!(!f.must_pessimistic_rollback(k, 10, 15));
        f.must_locked(k, 10);
    }
    assert!(!f.must_pessimistic_rollback(b"o", 10, 15));
    f.must_locked(b"o", 11);
    // The transaction may lock the key again.
    f.must_acquire_pessimistic_lock(b"a", b"a", 10, 16);
}

/// CheckTxnStatus on a pessimistic primary flagged locked-with-conflict
/// whose transaction in fact committed: the commit record answers, and the
/// stale lock goes.
fn check_txn_status_on_a_stale_locked_with_conflict_primary<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 10);
    f.must_commit(b"k", 10, 15);
    let stale = percolate::mvcc::Lock {
        is_locked_with_conflict: true,
        ..TxnFixture::<E>::pessimistic_lock(b"k", 10, 20)
    };
    f.must_put_lock(b"k", &stale);
    let status = f.must_check_txn_status(b"k", 10, 30, 30, true);
    assert_eq!(status, TxnStatus::Committed { commit_ts: ts(15) });
    f.must_unlocked(b"k");
    f.must_get(b"k", 30, b"v");
}

/// CheckTxnStatus on a pessimistic primary flagged locked-with-conflict
/// whose transaction was in fact rolled back: the Rollback record answers
/// RolledBack (never Committed), and the stale lock goes without a value
/// appearing.
fn check_txn_status_on_a_stale_locked_with_conflict_primary_rolled_back<E: Engine>(
    f: TxnFixture<E>,
) {
    f.must_prewrite_put(b"k", b"v", b"k", 10);
    f.must_rollback(b"k", 10);
    let stale = percolate::mvcc::Lock {
        is_locked_with_conflict: true,
        ..TxnFixture::<E>::pessimistic_lock(b"k", 10, 20)
    };
    f.must_put_lock(b"k", &stale);
    let status = f.must_check_txn_status(b"k", 10, 30, 30, true);
    assert_eq!(status, TxnStatus::RolledBack);
    f.must_unlocked(b"k");
    f.must_get_rollback(b"k", 10, true);
    f.must_get_none(b"k", 30);
}

/// CheckTxnStatus called at u64::MAX (a point read without a timestamp)
/// pushes nothing and reports min_commit_ts pushed, so the reader may read
/// past the lock.
fn check_txn_status_from_a_max_ts_caller<E: Engine>(f: TxnFixture<E>) {
    // A lock a reader could push (min_commit_ts set), with a long TTL.
    let props = TransactionProperties {
        min_commit_ts: ts(11),
        lock_ttl: 60_000,
        ..TxnFixture::<E>::props(b"k", 10)
    };
    f.must_prewrite_mutations(&props, vec![Mutation::put(key(b"k"), b"v".to_vec())], None);
    let before = f.must_locked(b"k", 10);
    assert_eq!(before.min_commit_ts, ts(11));
    let options = CheckTxnStatusOptions {
        caller_start_ts: TimeStamp::max(),
        current_ts: ts(11),
        ..Default::default()
    };
    match f.check_txn_status(b"k", 10, &options).unwrap() {
        TxnStatus::Uncommitted {
            lock,
            min_commit_ts_pushed,
        } => {
            assert!(min_commit_ts_pushed);
            assert_eq!(*lock, before);
        }
        other => panic!("expected Uncommitted, got {other:?}"),
    }
    assert_eq!(f.must_locked(b"k", 10), before);
}

/// A resolver of a pessimistic lock finding the pessimistic primary expired
/// removes it without a rollback record; any other caller rolls it back.
fn check_txn_status_on_an_expired_pessimistic_primary<E: Engine>(f: TxnFixture<E>) {
    let current = TimeStamp::compose(10_000, 0).into_inner();
    let lock_ts = TimeStamp::compose(1, 0).into_inner();
    for (k, resolving) in [(&b"r"[..], true), (b"o", false)] {
        f.must_put_lock(k, &TxnFixture::<E>::pessimistic_lock(k, lock_ts, lock_ts));
        let options = CheckTxnStatusOptions {
            current_ts: ts(current),
            resolving_pessimistic_lock: resolving,
            rollback_if_not_exist: true,
            ..Default::default()
        };
        let status = f.check_txn_status(k, lock_ts, &options).unwrap();
        f.must_unlocked(k);
        if resolving {
            assert_eq!(status, TxnStatus::PessimisticRollBack);
            assert!(f.writes(k).is_empty());
        } else {
            assert_eq!(status, TxnStatus::TtlExpire);
            f.must_get_rollback(k, lock_ts, true);
        }
    }
}

/// TxnHeartBeat extends a pessimistic primary's TTL.
fn heart_beat_on_a_pessimistic_primary<E: Engine>(f: TxnFixture<E>) {
    f.must_acquire_pessimistic_lock(b"k", b"k", 10, 10);
    assert_eq!(f.must_heart_beat(b"k", 10, 8000), 8000);
    let lock = f.must_locked(b"k", 10);
    assert_eq!((lock.lock_type, lock.ttl), (LockType::Pessimistic, 8000));
}

/// A pessimistic transaction run end to end through the actions: lock,
/// prewrite, commit; its values visible at the commit_ts, its locks gone.
fn pessimistic_transaction_end_to_end<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"a", b"1", 1, 2);
    f.must_acquire_pessimistic_lock(b"a", b"a", 10, 10);
    f.must_acquire_pessimistic_lock(b"b", b"a", 10, 10);
    // Another writer is stopped by the locks.
    let err = f.must_prewrite_err(Mutation::put(key(b"b"), b"x".to_vec()), b"b", 11);
    assert!(matches!(mvcc_err(&err), MvccError::KeyIsLocked(_)), "{err}");
    let props = pessimistic_props(b"a", 10, 10, 3000);
    f.must_prewrite_mutations(
        &props,
        vec![
            pessimistic_put(b"a", b"2", DoPessimisticCheck),
            pessimistic_put(b"b", b"3", DoPessimisticCheck),
        ],
        None,
    );
    f.must_commit(b"a", 10, 20);
    f.must_commit(b"b", 10, 20);
    f.must_get(b"a", 19, b"1");
    f.must_get(b"a", 20, b"2");
    f.must_get(b"b", 20, b"3");
}

on_both_engines!(
    TxnFixture;
    d1_acquire_repeat_and_raise_for_update_ts,
    d2_newer_commit_than_for_update_ts,
    d2_lock_with_conflict,
    d2_lock_with_conflict_and_the_other_checks,
    d4_own_rollback_refuses_the_lock,
    d5_overlapped_rollback_at_start_ts,
    d7_lock_only_if_exists,
    d8_collapsed_rollbacks,
    d_existing_locks,
    d_return_values_existence_and_inserts,
    c16_pessimistic_prewrite_of_rolled_back_txn_fails,
    c18_pessimistic_prewrite_over_own_lock,
    c19_do_pessimistic_check_over_another_lock,
    c21_optimistic_prewrite_over_own_pessimistic_lock,
    c22_skip_pessimistic_check_meets_another_lock,
    c24_do_constraint_check,
    c24_delete_inserted_checked_where_an_insert_is,
    c25_expected_for_update_ts,
    pessimistic_prewrite_amends_a_missing_lock,
    pessimistic_prewrite_for_update_ts_and_check_not_exists,
    pessimistic_async_commit_and_one_pc,
    retried_skip_pessimistic_check_prewrite_finds_its_commit,
    skip_pessimistic_check_looks_for_newer_records_only_on_a_retry,
    c24_do_constraint_check_at_the_start_ts,
    pessimistic_rollback_removes_only_its_own_older_locks,
    check_txn_status_on_a_stale_locked_with_conflict_primary,
    check_txn_status_on_a_stale_locked_with_conflict_primary_rolled_back,
    check_txn_status_from_a_max_ts_caller,
    check_txn_status_on_an_expired_pessimistic_primary,
    heart_beat_on_a_pessimistic_primary,
    pessimistic_transaction_end_to_end,
);
