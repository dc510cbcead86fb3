//! docs/BEHAVIOUR.md groups C, E, F, G, H, I, J, K, L and M: the transaction
//! actions, one named test per scenario, each run on the memory engine and
//! on RocksDB.
//!
//! Each scenario drives the actions through `TxnFixture`: every call takes a
//! fresh snapshot, runs one action (or one prewrite request) and writes its
//! modifications atomically, as a command would.
//!
//! Not here, because the layer they need comes later:
//! * pessimistic transactions (C18-C25, D): where a scenario needs a
//!   pessimistic lock, or the lock a pessimistic prewrite leaves, the lock
//!   record is written directly;
//! * max_ts (the concurrency manager's): async-commit and 1PC prewrites are
//!   given `TransactionProperties::max_ts` explicitly, and a commit_ts that
//!   a pushed max_ts would give (C13) is chosen directly;
//! * the command-level parts (C3's "no locks" answer of a whole request is
//!   here; J2's "processing stops at that key" is the command's loop).

mod common;

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Engine, MemoryEngine};
use percolate::mvcc::WriteConflictReason::{self, Optimistic, SelfRolledBack};
use percolate::mvcc::testing::ts;
use percolate::mvcc::{
    Assertion, Error as MvccError, Key, Lock, LockType, RollbackProtection, TimeStamp, Write,
    WriteType,
};
use percolate::txn::Error;
use percolate::txn::actions::TxnStatus;
use percolate::txn::actions::check_secondary_locks::SecondaryLockStatus;
use percolate::txn::actions::check_txn_status::CheckTxnStatusOptions;
use percolate::txn::actions::prewrite::{Mutation, TransactionProperties};
use percolate::txn::actions::resolve_lock::{resolve_lock_batch, resolve_lock_key};
use percolate::txn::testing::{AsyncTs, TxnFixture};

const MAX: u64 = u64::MAX;

fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

/// `ts(physical, logical)` as the u64 the fixture takes.
fn tsc(physical: u64, logical: u64) -> u64 {
    TimeStamp::compose(physical, logical).into_inner()
}

fn put(k: &[u8], value: &[u8]) -> Mutation {
    Mutation::put(key(k), value.to_vec())
}

fn insert(k: &[u8], value: &[u8]) -> Mutation {
    Mutation::insert(key(k), value.to_vec())
}

fn check_not_exists(k: &[u8]) -> Mutation {
    Mutation::check_not_exists(key(k))
}

fn props<E: Engine>(primary: &[u8], start_ts: u64) -> TransactionProperties {
    TxnFixture::<E>::props(primary, start_ts)
}

/// A status check's options: the common ones plus a tweak.
fn cts_options(
    caller_start_ts: u64,
    current_ts: u64,
    rollback_if_not_exist: bool,
    tweak: impl FnOnce(&mut CheckTxnStatusOptions),
) -> CheckTxnStatusOptions {
    let mut options = CheckTxnStatusOptions {
        caller_start_ts: ts(caller_start_ts),
        current_ts: ts(current_ts),
        rollback_if_not_exist,
        ..Default::default()
    };
    tweak(&mut options);
    options
}

#[track_caller]
fn mvcc_err(err: &Error) -> &MvccError {
    err.as_mvcc()
        .unwrap_or_else(|| panic!("expected an MVCC error, got {err}"))
}

/// A write conflict on `k` of a transaction whose primary is `k`, with
/// `(start_ts, conflict_start_ts, conflict_commit_ts)`.
#[track_caller]
fn assert_write_conflict(
    err: &Error,
    k: &[u8],
    (start, conflict_start, conflict_commit): (u64, u64, u64),
    expected_reason: WriteConflictReason,
) {
    match mvcc_err(err) {
        MvccError::WriteConflict {
            start_ts,
            conflict_start_ts,
            conflict_commit_ts,
            key: conflict_key,
            primary,
            reason,
        } => {
            assert_eq!(
                (*start_ts, *conflict_start_ts, *conflict_commit_ts),
                (ts(start), ts(conflict_start), ts(conflict_commit)),
                "{err}"
            );
            assert_eq!((conflict_key, primary.as_slice()), (&key(k), k));
            assert_eq!(*reason, expected_reason);
        }
        other => panic!("expected WriteConflict, got {other}"),
    }
}

#[track_caller]
fn assert_already_exist(err: &Error, k: &[u8], existing: u64) {
    match mvcc_err(err) {
        MvccError::AlreadyExist {
            key: existing_key,
            existing_start_ts,
        } => {
            assert_eq!(existing_key, &key(k));
            assert_eq!(*existing_start_ts, ts(existing));
        }
        other => panic!("expected AlreadyExist, got {other}"),
    }
}

#[track_caller]
fn assert_key_is_locked(err: &Error, k: &[u8], lock_ts: u64) -> percolate::mvcc::LockInfo {
    match mvcc_err(err) {
        MvccError::KeyIsLocked(info) => {
            assert_eq!(info.key, k);
            assert_eq!(info.lock_version, ts(lock_ts));
            (**info).clone()
        }
        other => panic!("expected KeyIsLocked, got {other}"),
    }
}

#[track_caller]
fn assert_txn_not_found(err: &Error, k: &[u8], start: u64) {
    match mvcc_err(err) {
        MvccError::TxnNotFound {
            start_ts,
            key: missing,
        } => {
            assert_eq!(*start_ts, ts(start));
            assert_eq!(missing, &key(k));
        }
        other => panic!("expected TxnNotFound, got {other}"),
    }
}

#[track_caller]
fn assert_invalid_txn_tso(err: &Error, start: u64, commit: u64) {
    match err {
        Error::InvalidTxnTso {
            start_ts,
            commit_ts,
        } => assert_eq!((*start_ts, *commit_ts), (ts(start), ts(commit))),
        other => panic!("expected InvalidTxnTso, got {other}"),
    }
}

#[track_caller]
fn assert_commit_ts_expired(err: &Error, k: &[u8], (start, commit, min): (u64, u64, u64)) {
    match mvcc_err(err) {
        MvccError::CommitTsExpired {
            start_ts,
            commit_ts,
            key: expired,
            min_commit_ts,
        } => {
            assert_eq!(
                (*start_ts, *commit_ts, *min_commit_ts),
                (ts(start), ts(commit), ts(min))
            );
            assert_eq!(expired, &key(k));
        }
        other => panic!("expected CommitTsExpired, got {other}"),
    }
}

#[track_caller]
fn assert_committed_err(err: &Error, k: &[u8], start: u64, commit: u64) {
    match mvcc_err(err) {
        MvccError::Committed {
            start_ts,
            commit_ts,
            key: committed,
        } => {
            assert_eq!((*start_ts, *commit_ts), (ts(start), ts(commit)));
            assert_eq!(committed, &key(k));
        }
        other => panic!("expected Committed, got {other}"),
    }
}

/// The status of an undecided transaction: its lock's min_commit_ts and
/// whether it was pushed past the caller.
#[track_caller]
fn uncommitted(status: TxnStatus) -> (Lock, bool) {
    match status {
        TxnStatus::Uncommitted {
            lock,
            min_commit_ts_pushed,
        } => (*lock, min_commit_ts_pushed),
        other => panic!("expected Uncommitted, got {other:?}"),
    }
}

// ---------------------------------------------------------------- group C

/// C1: a prewrite locks the key with the value inline, and a retried
/// prewrite changes nothing. A long value goes to the default CF at
/// start_ts instead, and a rollback removes it.
fn c1_prewrite_and_idempotent_retry<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 5);
    let lock = f.must_locked(b"k", 5);
    assert_eq!(lock.lock_type, LockType::Put);
    assert_eq!(lock.primary, b"k");
    assert_eq!(lock.short_value.as_deref(), Some(&b"v"[..]));
    assert!(f.mvcc_info(b"k").values.is_empty());
    f.assert_unchanged(|| f.must_prewrite_put(b"k", b"v", b"k", 5));

    let long = vec![b'x'; 300];
    f.must_prewrite_put(b"long", &long, b"long", 5);
    assert_eq!(f.must_locked(b"long", 5).short_value, None);
    assert_eq!(f.mvcc_info(b"long").values, vec![(ts(5), long.clone())]);
    f.assert_unchanged(|| f.must_prewrite_put(b"long", &long, b"long", 5));
    f.must_rollback(b"long", 5);
    f.must_unlocked(b"long");
    assert!(f.mvcc_info(b"long").values.is_empty());
    f.must_get_none(b"long", 20);
}

/// C3: a prewrite retried after its transaction committed succeeds without
/// writing anything: no lock comes back, one record stays. 2PC answers
/// zero, async commit the real commit_ts, 1PC the original commit_ts.
fn c3_stale_prewrite_after_own_commit<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 5);
    f.must_commit(b"k", 5, 10);
    let retry = |props: &TransactionProperties| {
        f.assert_unchanged(|| f.must_prewrite_mutations(props, vec![put(b"k", b"v")], None))
    };
    let r = retry(&props::<E>(b"k", 5));
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, None));
    let r = retry(&TxnFixture::<E>::async_props(b"k", 5, 0, 0));
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (Some(ts(10)), None));
    f.must_unlocked(b"k");
    assert_eq!(f.writes(b"k").len(), 1);
    f.must_written(b"k", 5, 10, WriteType::Put);

    // A 1PC transaction committed at max_ts + 1 = 31; the retry, with
    // max_ts moved on, answers 31 again.
    let one_pc = TxnFixture::<E>::one_pc_props(b"one", 20, 30, 0);
    let r = f.must_prewrite_mutations(&one_pc, vec![put(b"one", b"v")], None);
    assert_eq!(r.one_pc_commit_ts, Some(ts(31)));
    let later = TxnFixture::<E>::one_pc_props(b"one", 20, 50, 0);
    let r = f.assert_unchanged(|| f.must_prewrite_mutations(&later, vec![put(b"one", b"v")], None));
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, Some(ts(31))));
    f.must_unlocked(b"one");
    assert_eq!(f.writes(b"one").len(), 1);
}

/// C4: a prewrite below the latest commit is a write conflict naming both
/// transactions; one above it locks.
fn c4_write_conflict<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 5, 10);
    let err = f.must_prewrite_err(Mutation::lock(key(b"k")), b"k", 6);
    assert_write_conflict(&err, b"k", (6, 5, 10), Optimistic);
    f.must_unlocked(b"k");
    f.must_prewrite_lock(b"k", b"k", 12);
    f.must_locked(b"k", 12);
}

/// C6: a rollback that comes before the prewrite leaves a Rollback record;
/// the late prewrite then finds its own transaction rolled back.
fn c6_rollback_before_prewrite<E: Engine>(f: TxnFixture<E>) {
    f.must_rollback(b"key", 5);
    f.must_get_rollback(b"key", 5, false);
    let err = f.must_prewrite_err(Mutation::lock(key(b"key")), b"key", 5);
    assert_write_conflict(&err, b"key", (5, 5, 5), SelfRolledBack);
    f.must_unlocked(b"key");
}

/// C7: another transaction's Rollback record newer than the start_ts
/// conflicts with an optimistic prewrite like any newer record.
fn c7_newer_rollback_of_another_txn_conflicts<E: Engine>(f: TxnFixture<E>) {
    f.must_rollback(b"k", 15);
    let err = f.must_prewrite_err(put(b"k", b"v"), b"k", 10);
    assert_write_conflict(&err, b"k", (10, 15, 15), Optimistic);
}

/// C9: Insert fails on an existing key, reports a pending lock before
/// looking at existence, and succeeds once the key is deleted.
fn c9_insert<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v1", 1, 2);
    let err = f.must_prewrite_err(insert(b"k", b"v2"), b"k", 3);
    assert_already_exist(&err, b"k", 1);
    f.must_prewrite_delete(b"k", b"k", 4);
    let err = f.must_prewrite_err(insert(b"k", b"v2"), b"k", 6);
    let info = assert_key_is_locked(&err, b"k", 4);
    assert_eq!(
        (info.primary_lock.as_slice(), info.lock_type),
        (&b"k"[..], LockType::Delete)
    );
    f.must_commit(b"k", 4, 5);
    f.must_prewrite(insert(b"k", b"v2"), b"k", 6);
    f.must_commit(b"k", 6, 7);
    f.must_written(b"k", 6, 7, WriteType::Put);
    f.must_get(b"k", 8, b"v2");
}

/// C10: the existence check of Insert looks through Rollback and Lock
/// records to the newest Put or Delete underneath.
fn c10_insert_looks_through_rollback_and_lock_records<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 6, 7);
    f.must_prewrite_put(b"k", b"x", b"k", 8);
    f.must_rollback(b"k", 8);
    let err = f.must_prewrite_err(insert(b"k", b"y"), b"k", 9);
    assert_already_exist(&err, b"k", 6);
    f.must_delete_committed(b"k", 10, 11);
    f.must_prewrite_put(b"k", b"x", b"k", 12);
    f.must_rollback(b"k", 12);
    f.must_prewrite(insert(b"k", b"y"), b"k", 13);
    f.must_locked(b"k", 13);

    // The same through Lock records.
    f.must_put_committed(b"k2", b"v", 1, 2);
    f.must_lock_committed(b"k2", 3, 4);
    let err = f.must_prewrite_err(insert(b"k2", b"y"), b"k2", 5);
    assert_already_exist(&err, b"k2", 1);
    f.must_delete_committed(b"k2", 6, 7);
    f.must_lock_committed(b"k2", 8, 9);
    f.must_prewrite(insert(b"k2", b"y"), b"k2", 10);
    f.must_locked(b"k2", 10);
}

/// A delete of a key the same transaction inserted (`DeleteInserted`):
/// checked as an insert is (through Rollback and Lock records to the
/// newest Put or Delete), then locked and committed as a Delete.
fn c12_delete_of_an_undone_insert<E: Engine>(f: TxnFixture<E>) {
    let delete_inserted = |k: &[u8]| Mutation::delete_inserted(key(k));
    f.must_put_committed(b"k", b"v", 6, 7);
    f.must_rollback(b"k", 8);
    let err = f.must_prewrite_err(delete_inserted(b"k"), b"k", 9);
    assert_already_exist(&err, b"k", 6);
    f.must_unlocked(b"k");
    f.must_delete_committed(b"k", 10, 11);
    f.must_prewrite(delete_inserted(b"k"), b"k", 12);
    assert_eq!(f.must_locked(b"k", 12).lock_type, LockType::Delete);
    f.must_commit(b"k", 12, 13);
    f.must_written(b"k", 12, 13, WriteType::Delete);
    f.must_get_none(b"k", 14);
    f.must_get_none(b"absent", 14);
    f.must_prewrite(delete_inserted(b"absent"), b"absent", 15);
    assert_eq!(f.must_locked(b"absent", 15).lock_type, LockType::Delete);
}

/// C12: CheckNotExists follows Insert's existence rules but never writes a
/// lock. In async commit and 1PC its min_commit_ts is
/// `max(request min_commit_ts, start_ts + 1)`, not derived from max_ts.
fn c12_check_not_exists<E: Engine>(f: TxnFixture<E>) {
    f.assert_unchanged(|| f.must_prewrite(check_not_exists(b"k"), b"k", 5));
    f.must_put_committed(b"k", b"v", 6, 7);
    let err = f.must_prewrite_err(check_not_exists(b"k"), b"k", 8);
    assert_already_exist(&err, b"k", 6);
    f.must_delete_committed(b"k", 9, 10);
    f.assert_unchanged(|| f.must_prewrite(check_not_exists(b"k"), b"k", 11));
    f.must_unlocked(b"k");

    // max_ts 41, start_ts 10, requested min_commit_ts 11: the answer lies
    // in (10, 41).
    for props in [
        TxnFixture::<E>::async_props(b"a", 10, 41, 0),
        TxnFixture::<E>::one_pc_props(b"a", 10, 41, 0),
    ] {
        let props = TransactionProperties {
            min_commit_ts: ts(11),
            ..props
        };
        let r = f.assert_unchanged(|| {
            f.must_prewrite_mutations(&props, vec![check_not_exists(b"a")], None)
        });
        let commit_ts = r.min_commit_ts.max(r.one_pc_commit_ts).unwrap_or_default();
        assert!(
            ts(10) < commit_ts && commit_ts < ts(41),
            "{:?}: {r:?}",
            props.commit_kind
        );
    }
}

/// C13: existence checks are linearizable: once a Delete committed at 16,
/// a check at start_ts 10 is a write conflict, not a success (the commit at
/// 16 stands for max_ts + 1 after the first check pushed max_ts to 15).
fn c13_existence_checks_are_linearizable<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 4, 5);
    let err = f.must_prewrite_err(check_not_exists(b"k"), b"k", 15);
    assert_already_exist(&err, b"k", 4);
    f.must_prewrite_delete(b"k", b"k", 8);
    f.must_commit(b"k", 8, 16);
    let err = f.must_prewrite_err(check_not_exists(b"k"), b"k", 10);
    assert_write_conflict(&err, b"k", (10, 8, 16), Optimistic);
}

/// C15: a retried prewrite of a committed transaction that meets a newer
/// transaction's lock still succeeds, with the commit_ts, writing nothing.
fn c15_retried_prewrite_of_committed_txn_meets_newer_lock<E: Engine>(f: TxnFixture<E>) {
    let props = TransactionProperties {
        min_commit_ts: ts(10),
        ..TxnFixture::<E>::async_props(b"k1", 5, 0, 0)
    };
    let r = f.must_prewrite_mutations(&props, vec![put(b"k1", b"v1")], Some(&[]));
    assert_eq!(r.min_commit_ts, Some(ts(10)));
    f.must_commit(b"k1", 5, 15);
    f.must_prewrite_put(b"k1", b"v2", b"k1", 20);
    let r = f
        .assert_unchanged(|| f.must_prewrite_mutations(&props, vec![put(b"k1", b"v1")], Some(&[])));
    assert_eq!(r.min_commit_ts, Some(ts(15)));
    f.must_locked(b"k1", 20);
}

/// C16: a retried prewrite of a rolled-back transaction fails, even with
/// newer versions above its rollback record.
fn c16_retried_prewrite_of_rolled_back_txn_fails<E: Engine>(f: TxnFixture<E>) {
    f.must_put_lock(b"k1", &TxnFixture::<E>::pessimistic_lock(b"k1", 1, 1));
    f.must_rollback(b"k1", 1);
    f.must_get_rollback(b"k1", 1, true);
    f.must_put_committed(b"k1", b"v", 5, 6);
    let props = TxnFixture::<E>::async_props(b"k1", 1, 0, 0);
    let err = f.assert_unchanged(|| {
        f.prewrite(&props, vec![put(b"k1", b"v1")], Some(&[]))
            .unwrap_err()
    });
    assert_write_conflict(&err, b"k1", (1, 5, 6), Optimistic);
    f.must_unlocked(b"k1");
}

/// Existence assertions (docs/BEHAVIOUR.md §2, AssertionFailed): a prewrite may
/// assert that a key has, or has not, a visible value at its start_ts. A
/// true assertion prewrites as usual; a false one fails with the existing
/// record's timestamps (zero when there is none) and writes nothing. A
/// newest Delete or a Lock record above an older Put are seen through, as
/// Insert sees them.
fn c_existence_assertions<E: Engine>(f: TxnFixture<E>) {
    let assert = |k: &[u8], a| put(k, b"new").with_assertion(a);
    f.must_put_committed(b"there", b"v", 5, 10);
    f.must_lock_committed(b"there", 11, 12);
    f.must_put_committed(b"gone", b"v", 5, 10);
    f.must_delete_committed(b"gone", 11, 12);

    f.must_prewrite(assert(b"there", Assertion::Exist), b"there", 20);
    f.must_prewrite(assert(b"absent", Assertion::NotExist), b"there", 20);
    f.must_prewrite(assert(b"gone", Assertion::NotExist), b"there", 20);
    f.must_locked(b"there", 20);
    f.must_locked(b"absent", 20);
    f.must_locked(b"gone", 20);

    let failed = |k: &[u8], a, expected: (u64, u64)| match f.must_prewrite_err(assert(k, a), k, 30)
    {
        Error::Mvcc(MvccError::AssertionFailed {
            start_ts,
            key: failed_key,
            assertion,
            existing_start_ts,
            existing_commit_ts,
        }) => {
            assert_eq!((start_ts, failed_key, assertion), (ts(30), key(k), a));
            assert_eq!(
                (existing_start_ts, existing_commit_ts),
                (ts(expected.0), ts(expected.1))
            );
        }
        other => panic!("expected AssertionFailed, got {other:?}"),
    };
    f.must_rollback(b"there", 20);
    f.must_rollback(b"absent", 20);
    f.must_rollback(b"gone", 20);
    failed(b"there", Assertion::NotExist, (5, 10));
    failed(b"absent", Assertion::Exist, (0, 0));
    // A key whose newest record is a Delete names that Delete, as TiKV does.
    failed(b"gone", Assertion::Exist, (11, 12));
}

/// In a multi-key prewrite a failed assertion is held back: a write
/// conflict on a later key is the error reported (TiKV orders them so), and
/// with no other error the assertion failure is.
fn c_assertion_failure_yields_to_a_later_conflict<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"a", b"v", 5, 10);
    f.must_put_committed(b"b", b"v", 5, 40);
    let mutations = || {
        vec![
            put(b"a", b"new").with_assertion(Assertion::NotExist),
            put(b"b", b"new"),
        ]
    };
    let err = f
        .assert_unchanged(|| f.prewrite(&props::<E>(b"b", 30), mutations(), None))
        .unwrap_err();
    assert_write_conflict(&err, b"b", (30, 5, 40), Optimistic);
    let err = f
        .assert_unchanged(|| f.prewrite(&props::<E>(b"b", 50), mutations(), None))
        .unwrap_err();
    assert!(
        matches!(
            mvcc_err(&err),
            MvccError::AssertionFailed { key: failed, .. } if *failed == key(b"a")
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------- group E

/// E1: commit turns Put, Lock and Delete locks into records of the same
/// type carrying the start_ts, removes the locks, and is idempotent.
fn e1_commit_writes_record_of_lock_type<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"put", b"v", b"put", 10);
    f.must_prewrite_lock(b"lock", b"put", 10);
    f.must_prewrite_delete(b"delete", b"put", 10);
    let keys: [(&[u8], WriteType); 3] = [
        (b"put", WriteType::Put),
        (b"lock", WriteType::Lock),
        (b"delete", WriteType::Delete),
    ];
    for (k, write_type) in keys {
        let released = f.must_commit(k, 10, 15).expect("a lock was released");
        assert_eq!((released.start_ts, released.commit_ts), (ts(10), ts(15)));
        f.must_written(k, 10, 15, write_type);
        f.must_unlocked(k);
    }
    let put_record = f.must_written(b"put", 10, 15, WriteType::Put);
    assert_eq!(put_record.short_value.as_deref(), Some(&b"v"[..]));
    for (k, _) in keys {
        assert_eq!(f.assert_unchanged(|| f.must_commit(k, 10, 15)), None);
    }
    f.must_get(b"put", 15, b"v");
}

/// E2: a commit_ts at or below the start_ts is rejected before anything is
/// read, whether or not the lock is there.
fn e2_commit_ts_not_above_start_ts<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 10);
    for commit_ts in [10, 5] {
        assert_invalid_txn_tso(&f.must_commit_err(b"k", 10, commit_ts), 10, commit_ts);
        assert_invalid_txn_tso(&f.must_commit_err(b"none", 10, commit_ts), 10, commit_ts);
    }
    f.must_locked(b"k", 10);
}

/// E4: committing again at another commit_ts succeeds and changes nothing:
/// the record stays at the first commit_ts.
fn e4_recommit_at_another_ts_is_a_noop<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 10);
    f.must_commit(b"k", 10, 20);
    assert_eq!(f.assert_unchanged(|| f.must_commit(b"k", 10, 25)), None);
    let (commit_ts, write) = f
        .reader()
        .seek_write(&key(b"k"), ts(30))
        .unwrap()
        .expect("a record");
    assert_eq!((commit_ts, write.start_ts), (ts(20), ts(10)));
    f.must_not_have_write(b"k", 25);
}

/// E5: a commit below the lock's min_commit_ts fails with CommitTsExpired
/// and leaves the lock; a commit exactly at it succeeds.
fn e5_commit_below_min_commit_ts<E: Engine>(f: TxnFixture<E>) {
    let props = TransactionProperties {
        min_commit_ts: ts(20),
        ..props::<E>(b"k", 10)
    };
    f.must_prewrite_mutations(&props, vec![put(b"k", b"v")], None);
    let err = f.must_commit_err(b"k", 10, 19);
    assert_commit_ts_expired(&err, b"k", (10, 19, 20));
    f.must_locked(b"k", 10);
    f.must_commit(b"k", 10, 20);
    f.must_written(b"k", 10, 20, WriteType::Put);
}

/// E7: committing a pessimistic lock that was never prewritten removes it
/// and writes no record at all (upstream #14551).
fn e7_commit_of_bare_pessimistic_lock_rolls_it_back<E: Engine>(f: TxnFixture<E>) {
    f.must_put_lock(b"k2", &TxnFixture::<E>::pessimistic_lock(b"k1", 10, 10));
    f.must_commit(b"k2", 10, 20);
    f.must_unlocked(b"k2");
    assert!(f.writes(b"k2").is_empty(), "{:?}", f.writes(b"k2"));
    assert_eq!(f.mvcc_info(b"k2"), Default::default());
}

/// E8: a pessimistic transaction's commit_ts is not checked against its
/// for_update_ts (lock written as a pessimistic prewrite leaves it).
fn e8_commit_below_for_update_ts_is_not_checked<E: Engine>(f: TxnFixture<E>) {
    let lock = Lock {
        for_update_ts: ts(37),
        short_value: Some(b"v".to_vec()),
        ..Lock::new(LockType::Put, b"k".to_vec(), ts(35), 3000)
    };
    f.must_put_lock(b"k", &lock);
    f.must_commit(b"k", 35, 36);
    f.must_written(b"k", 35, 36, WriteType::Put);
    f.must_get(b"k", 36, b"v");
}

/// E10: a commit retried after its own commit, while another transaction
/// now holds the lock, succeeds as a no-op: the own record is found first.
fn e10_commit_after_own_commit_with_another_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 10, 20);
    f.must_prewrite_put(b"k", b"v2", b"k", 30);
    for commit_ts in [20, 25] {
        assert_eq!(
            f.assert_unchanged(|| f.must_commit(b"k", 10, commit_ts)),
            None
        );
    }
    f.must_locked(b"k", 30);
}

// ---------------------------------------------------------------- group F

/// F1: rollback unlocks, leaves a Rollback record and is idempotent; the
/// rolled-back value is never visible.
fn f1_rollback_is_idempotent_and_unlocks<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 5);
    f.must_rollback(b"k", 5);
    f.assert_unchanged(|| f.must_rollback(b"k", 5));
    f.must_unlocked(b"k");
    f.must_get_rollback(b"k", 5, true);
    f.must_prewrite_lock(b"k", b"k", 10);
    f.must_rollback(b"k", 10);
    f.must_get_none(b"k", 20);
}

/// F3: rollbacks of other start_ts next to a pending lock write their
/// records and leave the lock, which then commits. Upstream's test uses
/// protected rollbacks (KvCleanup without TTL check); with batch rollbacks
/// the one at 36 collapses the one at 34 (F6), and the lock still stays.
fn f3_rollback_beside_another_txns_lock<E: Engine>(f: TxnFixture<E>) {
    for k in [&b"k"[..], b"batch"] {
        f.must_put_committed(k, b"v", 1, 2);
        f.must_prewrite_delete(k, k, 35);
    }
    f.must_cleanup(b"k", 34, 0);
    f.must_cleanup(b"k", 36, 0);
    f.must_get_rollback(b"k", 34, true);
    f.must_get_rollback(b"k", 36, true);
    f.must_rollback(b"batch", 34);
    f.must_rollback(b"batch", 36);
    f.must_not_have_write(b"batch", 34);
    f.must_get_rollback(b"batch", 36, false);
    for k in [&b"k"[..], b"batch"] {
        f.must_locked(k, 35);
        f.must_commit(k, 35, 40);
        f.must_get(k, 39, b"v");
        f.must_get_none(k, 41);
    }
}

/// F4: rollbacks at other timestamps do not stop a commit; afterwards a
/// rollback of the committed transaction fails with Committed.
fn f4_rollbacks_at_other_ts_then_commit<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 1);
    f.must_rollback(b"k", 10);
    f.must_rollback(b"k", 10);
    f.must_rollback(b"k", 30);
    f.must_commit(b"k", 1, 20);
    let err = f.must_rollback_err(b"k", 1);
    assert_committed_err(&err, b"k", 1, 20);
    f.must_get(b"k", 30, b"v");
}

/// F6: a non-protected rollback deletes the newest rollback at or below its
/// start_ts if that one is non-protected too. Cleanup, CheckSecondaryLocks
/// and CheckTxnStatus on a missing lock never collapse; CheckTxnStatus
/// rolling back an expired lock does.
fn f6_collapsing_non_protected_rollbacks<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"pk", 1);
    f.must_rollback(b"k", 1);
    f.must_get_rollback(b"k", 1, false);
    f.must_prewrite_put(b"k", b"v", b"pk", 2);
    f.must_rollback(b"k", 2);
    f.must_get_rollback(b"k", 2, false);
    f.must_not_have_write(b"k", 1);
    f.must_rollback(b"k", 3);
    f.must_get_rollback(b"k", 3, false);
    f.must_not_have_write(b"k", 2);
    assert_eq!(f.writes(b"k").len(), 1);

    // Only the newest one is looked at, and a protected one stays.
    f.must_cleanup(b"k", 4, 0);
    f.must_rollback(b"k", 5);
    let kept: Vec<_> = f.writes(b"k").into_iter().map(|(c, _)| c).collect();
    assert_eq!(kept, [ts(5), ts(4), ts(3)]);

    // The rollbacks that never collapse.
    for k in [&b"cleanup"[..], b"csl", b"cts"] {
        f.must_rollback(k, 1);
    }
    f.must_cleanup(b"cleanup", 2, 0);
    assert_eq!(
        f.must_check_secondary_lock(b"csl", 2),
        SecondaryLockStatus::RolledBack
    );
    assert_eq!(
        f.must_check_txn_status(b"cts", 2, 0, tsc(1, 0), true),
        TxnStatus::LockNotExist
    );
    for k in [&b"cleanup"[..], b"csl", b"cts"] {
        f.must_get_rollback(k, 1, false);
        f.must_get_rollback(k, 2, true);
    }

    // CheckTxnStatus rolling back an expired lock collapses.
    f.must_rollback(b"expired", 1);
    f.must_prewrite_put(b"expired", b"v", b"expired", 2);
    assert_eq!(
        f.must_check_txn_status(b"expired", 2, 0, tsc(1, 0), true),
        TxnStatus::TtlExpire
    );
    f.must_not_have_write(b"expired", 1);
    f.must_get_rollback(b"expired", 2, true);
}

/// F7: a protected rollback at another transaction's commit_ts marks that
/// commit record (overlapped rollback, GC fence) and the value still
/// reads; a non-protected one leaves it and writes nothing.
fn f7_overlapped_rollback_on_a_commit_record<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k1", b"v1", b"k1", 10);
    f.must_commit(b"k1", 10, 20);
    f.must_prewrite_put(b"k2", b"v2", b"k2", 11);
    f.must_commit(b"k2", 11, 20);
    let before = f.must_have_write(b"k1", 20);
    f.must_cleanup(b"k1", 20, 0);
    let after = f.must_written(b"k1", 10, 20, WriteType::Put);
    assert_eq!(after, before.set_overlapped_rollback(true, Some(ts(0))));
    f.must_get(b"k1", 30, b"v1");
    // The rollback holds: a late prewrite of txn 20 fails.
    let err = f.must_prewrite_err(put(b"k1", b"x"), b"k1", 20);
    assert_write_conflict(&err, b"k1", (20, 10, 20), SelfRolledBack);

    f.assert_unchanged(|| f.must_rollback(b"k2", 20));
    assert!(!f.must_have_write(b"k2", 20).has_overlapped_rollback);
}

/// F9: a protected rollback appends its ts to another transaction's lock
/// only when that lock is async-commit and the ts is at or above its
/// min_commit_ts; a later commit at that ts is then flagged.
fn f9_protected_rollback_marks_an_async_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"2pc", b"v", b"2pc", 50);
    f.must_cleanup(b"2pc", 55, 0);
    f.must_get_rollback(b"2pc", 55, true);
    assert!(f.must_locked(b"2pc", 50).rollback_ts.is_empty());

    let below = AsyncTs {
        start_ts: 60,
        ..Default::default()
    };
    let min = f.must_prewrite_put_async(b"below", b"v", b"below", Some(&[]), below);
    assert_eq!(min, Some(ts(61)));
    f.must_cleanup(b"below", 59, 0);
    f.must_get_rollback(b"below", 59, true);
    assert!(f.must_locked(b"below", 60).rollback_ts.is_empty());

    let props = TransactionProperties {
        min_commit_ts: ts(75),
        ..TxnFixture::<E>::async_props(b"k", 70, 0, 0)
    };
    f.must_prewrite_mutations(&props, vec![put(b"k", b"v")], Some(&[]));
    f.must_cleanup(b"k", 74, 0);
    assert!(f.must_locked(b"k", 70).rollback_ts.is_empty());
    f.must_cleanup(b"k", 75, 0);
    assert_eq!(f.must_locked(b"k", 70).rollback_ts, [ts(75)]);
    f.must_get_rollback(b"k", 75, true);
    // A non-protected rollback never marks.
    f.must_rollback(b"k", 76);
    assert_eq!(f.must_locked(b"k", 70).rollback_ts, [ts(75)]);

    f.must_commit(b"k", 70, 75);
    let write = f.must_written(b"k", 70, 75, WriteType::Put);
    assert!(write.has_overlapped_rollback, "{write:?}");
    f.must_get(b"k", 75, b"v");
}

/// F10: cleanup checks the TTL against the physical part of current_ts:
/// a live lock is reported and kept; another start_ts gets a protected
/// rollback beside it; once expired the lock goes. current_ts 0 skips the
/// check.
fn f10_cleanup_ttl_check<E: Engine>(f: TxnFixture<E>) {
    let s = tsc(10, 0);
    f.must_prewrite_put(b"k", b"v", b"k", s);
    assert_eq!(f.must_heart_beat(b"k", s, 100), 100);
    let info = assert_key_is_locked(&f.must_cleanup_err(b"k", s, tsc(20, 0)), b"k", s);
    assert_eq!(
        (info.lock_ttl, info.primary_lock.as_slice()),
        (100, &b"k"[..])
    );
    // Expiry is strictly physical(ts) + ttl < physical(current_ts).
    assert_key_is_locked(&f.must_cleanup_err(b"k", s, tsc(110, 7)), b"k", s);
    f.must_locked(b"k", s);

    f.must_cleanup(b"k", tsc(10, 1), tsc(120, 0));
    f.must_get_rollback(b"k", tsc(10, 1), true);
    f.must_locked(b"k", s);

    f.must_cleanup(b"k", s, tsc(120, 0));
    f.must_unlocked(b"k");
    f.must_get_rollback(b"k", s, true);

    let s2 = tsc(200, 0);
    f.must_prewrite_put(b"k2", b"v", b"k2", s2);
    f.must_heart_beat(b"k2", s2, 100_000);
    f.must_cleanup(b"k2", s2, 0);
    f.must_unlocked(b"k2");
    f.must_get_rollback(b"k2", s2, true);
}

/// F12: rolling back a lock whose transaction already has its rollback
/// record (a pessimistic secondary can get there) just unlocks: no error,
/// no new record. Through batch rollback, cleanup and a status check.
fn f12_rollback_of_lock_with_existing_rollback_record<E: Engine>(f: TxnFixture<E>) {
    let rollback = |start_ts: u64, protection| Write::new_rollback(ts(start_ts), protection);
    f.must_put_lock(b"k", &TxnFixture::<E>::pessimistic_lock(b"pk", 5, 5));
    f.must_put_write(b"k", 5, &rollback(5, RollbackProtection::Unprotected));
    f.must_rollback(b"k", 5);

    f.must_prewrite_put(b"c", b"v", b"c", 6);
    f.must_put_write(b"c", 6, &rollback(6, RollbackProtection::Protected));
    f.must_cleanup(b"c", 6, 0);

    f.must_prewrite_put(b"s", b"v", b"s", 7);
    f.must_put_write(b"s", 7, &rollback(7, RollbackProtection::Protected));
    assert_eq!(
        f.must_check_txn_status(b"s", 7, 0, tsc(1, 0), true),
        TxnStatus::TtlExpire
    );

    for (k, start_ts, protected) in [(&b"k"[..], 5, false), (b"c", 6, true), (b"s", 7, true)] {
        f.must_unlocked(k);
        f.must_get_rollback(k, start_ts, protected);
        assert_eq!(f.writes(k).len(), 1);
    }
}

/// F13: a lock of the transaction beside its own commit record on the same
/// key (data that contradicts itself) is not rolled back: a rollback, a
/// cleanup and a status check that finds the lock expired all refuse with
/// Committed, and leave the lock and the commit record as they were.
fn f13_rollback_refuses_a_lock_beside_its_own_commit_record<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 5);
    f.must_put_write(
        b"k",
        6,
        &Write::new(WriteType::Put, ts(5), Some(b"v".to_vec())),
    );
    let err = f.assert_unchanged(|| f.must_rollback_err(b"k", 5));
    assert_committed_err(&err, b"k", 5, 6);
    let err = f.assert_unchanged(|| f.must_cleanup_err(b"k", 5, 0));
    assert_committed_err(&err, b"k", 5, 6);
    let expired = cts_options(0, TimeStamp::max().into_inner(), true, |_| {});
    let err = f.assert_unchanged(|| f.check_txn_status(b"k", 5, &expired).unwrap_err());
    assert_committed_err(&err, b"k", 5, 6);
    f.must_locked(b"k", 5);
    assert_eq!(f.writes(b"k").len(), 1);
}

// ---------------------------------------------------------------- group G

/// G1: with neither lock nor record, a status check reports TxnNotFound,
/// or, when asked to, writes a protected rollback (LockNotExist).
fn g1_missing_txn<E: Engine>(f: TxnFixture<E>) {
    let (s, caller, current) = (tsc(3, 0), tsc(3, 1), tsc(3, 2));
    let err = f.assert_unchanged(|| {
        f.check_txn_status(b"k", s, &cts_options(caller, current, false, |_| ()))
            .unwrap_err()
    });
    assert_txn_not_found(&err, b"k", s);
    assert_eq!(
        f.must_check_txn_status(b"k", s, caller, current, true),
        TxnStatus::LockNotExist
    );
    f.must_get_rollback(b"k", s, true);
}

/// G3: a status check pushes a large transaction's min_commit_ts to
/// `max(caller + 1, current_ts)`, persisted, only when the caller is at or
/// above the lock's min_commit_ts; logical parts count.
fn g3_push_min_commit_ts<E: Engine>(f: TxnFixture<E>) {
    let s = tsc(5, 0);
    let props = TransactionProperties {
        lock_ttl: 100,
        min_commit_ts: ts(tsc(5, 1)),
        ..props::<E>(b"k", s)
    };
    f.must_prewrite_mutations(&props, vec![put(b"k", b"v")], None);
    let cases = [
        ((6, 0), (7, 0), (7, 0)),
        ((9, 0), (8, 0), (9, 1)),
        ((8, 0), (10, 0), (9, 1)),
        ((12, 0), (12, 0), (12, 1)),
        ((13, 1), (13, 3), (13, 3)),
    ];
    for ((cp, cl), (np, nl), (mp, ml)) in cases {
        let status = f.must_check_txn_status(b"k", s, tsc(cp, cl), tsc(np, nl), true);
        let (lock, pushed) = uncommitted(status);
        assert_eq!(lock.min_commit_ts, ts(tsc(mp, ml)), "caller ts({cp},{cl})");
        assert!(pushed, "caller ts({cp},{cl})");
        assert_eq!(f.must_locked(b"k", s).min_commit_ts, ts(tsc(mp, ml)));
    }
}

/// G4: a lock with min_commit_ts 0 (a plain prewrite, a pessimistic lock)
/// is never pushed, and the caller is told so.
fn g4_zero_min_commit_ts_is_never_pushed<E: Engine>(f: TxnFixture<E>) {
    let s = tsc(5, 0);
    let props = TransactionProperties {
        lock_ttl: 100,
        ..props::<E>(b"k", s)
    };
    f.must_prewrite_mutations(&props, vec![put(b"k", b"v")], None);
    let pessimistic = Lock {
        ttl: 100,
        ..TxnFixture::<E>::pessimistic_lock(b"p", s, s)
    };
    f.must_put_lock(b"p", &pessimistic);
    for k in [&b"k"[..], b"p"] {
        let status =
            f.assert_unchanged(|| f.must_check_txn_status(k, s, tsc(6, 0), tsc(7, 0), true));
        let (lock, pushed) = uncommitted(status);
        assert_eq!((lock.min_commit_ts, pushed), (ts(0), false));
    }
}

/// G6: a committed transaction is reported with its commit_ts, also while
/// another transaction's lock is on the key.
fn g6_committed<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 5);
    f.must_commit(b"k", 5, 15);
    let committed = TxnStatus::Committed { commit_ts: ts(15) };
    for rollback_if_not_exist in [false, true] {
        let status = f.assert_unchanged(|| {
            f.must_check_txn_status(b"k", 5, 0, tsc(1, 0), rollback_if_not_exist)
        });
        assert_eq!(status, committed);
    }
    f.must_prewrite_put(b"k", b"v2", b"k", 20);
    let status = f.assert_unchanged(|| f.must_check_txn_status(b"k", 5, 25, tsc(1, 0), true));
    assert_eq!(status, committed);
}

/// G7: the TTL compares physical milliseconds only; an expired lock is
/// rolled back with a protected record; current_ts u64::MAX expires any
/// lock that is not async-commit.
fn g7_ttl_uses_physical_ms<E: Engine>(f: TxnFixture<E>) {
    let s = tsc(20, 0);
    let large = TransactionProperties {
        lock_ttl: 100,
        min_commit_ts: ts(tsc(20, 1)),
        ..props::<E>(b"k", s)
    };
    f.must_prewrite_mutations(&large, vec![put(b"k", b"v")], None);
    let now = tsc(21, 105);
    let (lock, _) = uncommitted(f.must_check_txn_status(b"k", s, now, now, true));
    assert_eq!(lock.min_commit_ts, ts(tsc(21, 106)));
    let (_, _) = uncommitted(f.must_check_txn_status(b"k", s, 0, tsc(120, 100), true));
    assert_eq!(
        f.must_check_txn_status(b"k", s, 0, tsc(121, 0), true),
        TxnStatus::TtlExpire
    );
    f.must_unlocked(b"k");
    f.must_get_rollback(b"k", s, true);

    let live = TransactionProperties {
        lock_ttl: 100,
        ..props::<E>(b"k2", 270)
    };
    f.must_prewrite_mutations(&live, vec![put(b"k2", b"v")], None);
    f.must_put_lock(b"k3", &TxnFixture::<E>::pessimistic_lock(b"k3", 280, 280));
    for (k, start_ts) in [(&b"k2"[..], 270), (b"k3", 280)] {
        assert_eq!(
            f.must_check_txn_status(k, start_ts, 0, MAX, true),
            TxnStatus::TtlExpire
        );
        f.must_unlocked(k);
        f.must_get_rollback(k, start_ts, true);
    }
}

/// G9: a resolver of a pessimistic lock that finds nothing gets
/// LockNotExistDoNothing and nothing is written; without
/// rollback_if_not_exist TxnNotFound comes first.
fn g9_resolving_pessimistic_lock_with_nothing_found<E: Engine>(f: TxnFixture<E>) {
    let resolving = |o: &mut CheckTxnStatusOptions| o.resolving_pessimistic_lock = true;
    let options = cts_options(11, tsc(1, 0), true, resolving);
    let status = f.assert_unchanged(|| f.check_txn_status(b"k", 10, &options).unwrap());
    assert_eq!(status, TxnStatus::LockNotExistDoNothing);
    let options = cts_options(11, tsc(1, 0), false, resolving);
    let err = f.assert_unchanged(|| f.check_txn_status(b"k", 10, &options).unwrap_err());
    assert_txn_not_found(&err, b"k", 10);
}

/// G10: a status check never decides an async-commit primary, whatever the
/// caller and current ts: the lock is unchanged and not pushed. Only
/// force_sync_commit rolls an expired one back. Pessimistic async primaries
/// (lock written directly) and primaries prewritten after their secondary
/// behave the same.
fn g10_async_commit_primary_is_never_decided<E: Engine>(f: TxnFixture<E>) {
    let async_ts = |start_ts| AsyncTs {
        start_ts,
        ..Default::default()
    };
    f.must_prewrite_put_async(b"k", b"v", b"k", Some(&[b"k2".to_vec()]), async_ts(1));
    f.must_prewrite_put_async(b"k2", b"v", b"k", None, async_ts(1));
    // Txn 3: the secondary is prewritten first.
    f.must_prewrite_put_async(b"s2", b"v", b"s1", None, async_ts(3));
    f.must_prewrite_put_async(b"s1", b"v", b"s1", Some(&[b"s2".to_vec()]), async_ts(3));
    // Txn 5: an async pessimistic prewrite of the primary.
    let pessimistic = Lock {
        for_update_ts: ts(6),
        min_commit_ts: ts(7),
        use_async_commit: true,
        secondaries: vec![b"p2".to_vec()],
        short_value: Some(b"v".to_vec()),
        ..Lock::new(LockType::Put, b"p1".to_vec(), ts(5), 0)
    };
    f.must_put_lock(b"p1", &pessimistic);

    for (primary, start_ts) in [(&b"k"[..], 1), (b"s1", 3), (b"p1", 5)] {
        let lock = f.must_locked(primary, start_ts);
        assert!(lock.use_async_commit);
        for (caller, current) in [(0, 0), (5, 5), (8, 8), (10, 12), (MAX, MAX), (0, MAX)] {
            let status = f.assert_unchanged(|| {
                f.must_check_txn_status(primary, start_ts, caller, current, true)
            });
            let expected = TxnStatus::Uncommitted {
                lock: Box::new(lock.clone()),
                min_commit_ts_pushed: false,
            };
            assert_eq!(status, expected, "caller {caller}, current {current}");
        }
        let force = cts_options(0, MAX, true, |o| o.force_sync_commit = true);
        let status = f.check_txn_status(primary, start_ts, &force).unwrap();
        assert_eq!(status, TxnStatus::TtlExpire);
        f.must_unlocked(primary);
        f.must_get_rollback(primary, start_ts, true);
    }
}

/// G12: an optimistic primary rolled back at a ts where another transaction
/// committed marks that record (overlapped, GC fence 0); the late prewrite
/// then finds itself rolled back.
fn g12_optimistic_rollback_at_another_commit_ts<E: Engine>(f: TxnFixture<E>) {
    let (t1, t2) = (tsc(1, 0), tsc(2, 0));
    let t1_async = AsyncTs {
        start_ts: t1,
        ..Default::default()
    };
    f.must_prewrite_put_async(b"k", b"v1", b"k", Some(&[]), t1_async);
    f.must_commit(b"k", t1, t2);
    f.must_prewrite_put(b"k", b"v2", b"k", t2);
    assert_eq!(
        f.must_check_txn_status(b"k", t2, 0, tsc(3, 0), true),
        TxnStatus::TtlExpire
    );
    f.must_unlocked(b"k");
    let write = f.must_written(b"k", t1, t2, WriteType::Put);
    assert!(write.has_overlapped_rollback);
    assert_eq!(write.gc_fence, Some(ts(0)));
    let err = f.must_prewrite_err(put(b"k", b"v2"), b"k", t2);
    assert_write_conflict(&err, b"k", (t2, t1, t2), SelfRolledBack);
    f.must_get(b"k", tsc(3, 0), b"v1");
}

/// G13: with verify_is_primary, a lock naming another primary is reported
/// as PrimaryMismatch (a prewrite lock, or any lock when resolving a
/// pessimistic lock) and kept. A stray pessimistic lock is otherwise
/// judged as missing: TxnNotFound, or removed with a protected rollback.
fn g13_verify_is_primary<E: Engine>(f: TxnFixture<E>) {
    let verify = |resolving: bool, rollback_if_not_exist: bool| {
        cts_options(0, tsc(1, 0), rollback_if_not_exist, |o| {
            o.verify_is_primary = true;
            o.resolving_pessimistic_lock = resolving;
        })
    };
    let mismatch = |options: CheckTxnStatusOptions, lock_type: LockType| {
        let err = f.assert_unchanged(|| f.check_txn_status(b"k1", 1, &options).unwrap_err());
        match mvcc_err(&err) {
            MvccError::PrimaryMismatch(info) => {
                assert_eq!(
                    (info.key.as_slice(), info.primary_lock.as_slice()),
                    (&b"k1"[..], &b"k2"[..])
                );
                assert_eq!(info.lock_type, lock_type);
            }
            other => panic!("expected PrimaryMismatch, got {other}"),
        }
    };
    f.must_put_lock(b"k1", &TxnFixture::<E>::pessimistic_lock(b"k2", 1, 1));
    mismatch(verify(true, true), LockType::Pessimistic);
    f.must_locked(b"k1", 1);
    let prewritten = Lock {
        for_update_ts: ts(1),
        short_value: Some(b"v".to_vec()),
        ..Lock::new(LockType::Put, b"k2".to_vec(), ts(1), 0)
    };
    f.must_put_lock(b"k1", &prewritten);
    mismatch(verify(true, true), LockType::Put);
    mismatch(verify(false, true), LockType::Put);
    f.must_locked(b"k1", 1);

    f.must_put_lock(b"k3", &TxnFixture::<E>::pessimistic_lock(b"k4", 5, 5));
    let err = f
        .check_txn_status(b"k3", 5, &verify(false, false))
        .unwrap_err();
    assert_txn_not_found(&err, b"k3", 5);
    f.must_locked(b"k3", 5);
    let status = f.check_txn_status(b"k3", 5, &verify(false, true)).unwrap();
    assert_eq!(status, TxnStatus::LockNotExist);
    f.must_unlocked(b"k3");
    f.must_get_rollback(b"k3", 5, true);
}

/// G14: verify_is_primary lets the transaction's own primary through (its
/// lock is judged as usual), and without it a lock is judged on whatever
/// key it was asked about, primary or not: Uncommitted, lock kept, no
/// PrimaryMismatch either way.
fn g14_primary_check_only_when_asked_and_only_for_another_primary<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"p", b"v", b"p", 5);
    f.must_prewrite_put(b"s", b"v", b"p", 5);
    let primary_verified = cts_options(0, 0, false, |o| o.verify_is_primary = true);
    let status = f.check_txn_status(b"p", 5, &primary_verified).unwrap();
    assert_eq!(uncommitted(status).0.primary, b"p".to_vec());
    let unverified = cts_options(0, 0, false, |_| {});
    let status = f.check_txn_status(b"s", 5, &unverified).unwrap();
    assert_eq!(uncommitted(status).0.primary, b"p".to_vec());
    f.must_locked(b"p", 5);
    f.must_locked(b"s", 5);
}

// ---------------------------------------------------------------- group H

/// H1: a heart beat finds nothing, and changes nothing, without the
/// transaction's lock: on an empty key, at a neighbouring start_ts, and
/// after commit (for the start_ts or the commit_ts).
fn h1_heart_beat_txn_not_found<E: Engine>(f: TxnFixture<E>) {
    let not_found = |start_ts: u64| {
        let err = f.assert_unchanged(|| f.heart_beat(b"k", start_ts, 100).unwrap_err());
        assert_txn_not_found(&err, b"k", start_ts);
    };
    not_found(5);
    f.must_prewrite_put(b"k", b"v", b"k", 5);
    not_found(4);
    not_found(6);
    assert_eq!(f.must_locked(b"k", 5).ttl, 0);
    assert_eq!(f.must_heart_beat(b"k", 5, 100), 100);
    assert_eq!(f.must_heart_beat(b"k", 5, 50), 100);
    f.must_commit(b"k", 5, 10);
    not_found(5);
    not_found(10);
}

// ---------------------------------------------------------------- group I

/// I1: an async-commit prewrite's min_commit_ts is max_ts + 1; the primary
/// lists the secondaries, which carry the flag but no list. A retry answers
/// from the stored lock, even with a larger max_ts.
fn i1_async_min_commit_ts_from_max_ts<E: Engine>(f: TxnFixture<E>) {
    let secondaries = vec![b"key1".to_vec(), b"key2".to_vec(), b"key3".to_vec()];
    let mutations = || {
        [&b"key"[..], b"key1", b"key2", b"key3"]
            .into_iter()
            .map(|k| put(k, b"v"))
            .collect::<Vec<_>>()
    };
    let props = TxnFixture::<E>::async_props(b"key", 2, 42, 0);
    let r = f.must_prewrite_mutations(&props, mutations(), Some(&secondaries));
    assert_eq!(r.min_commit_ts, Some(ts(43)));
    let primary = f.must_locked(b"key", 2);
    assert!(primary.use_async_commit);
    assert_eq!(primary.secondaries, secondaries);
    assert_eq!(primary.min_commit_ts, ts(43));
    for k in &secondaries {
        let lock = f.must_locked(k, 2);
        assert!(lock.use_async_commit);
        assert!(lock.secondaries.is_empty());
        assert_eq!(lock.min_commit_ts, ts(43));
    }
    let later = TxnFixture::<E>::async_props(b"key", 2, 100, 0);
    let r =
        f.assert_unchanged(|| f.must_prewrite_mutations(&later, mutations(), Some(&secondaries)));
    assert_eq!(r.min_commit_ts, Some(ts(43)));
}

/// I2: min_commit_ts = max(max_ts + 1, start_ts + 1, request min_commit_ts)
/// (the pessimistic terms come later), and the answer is the largest over
/// the request's keys.
fn i2_min_commit_ts_formula<E: Engine>(f: TxnFixture<E>) {
    let async_put = |k: &[u8], start_ts, max_ts, min_commit_ts| {
        let props = TransactionProperties {
            min_commit_ts: ts(min_commit_ts),
            ..TxnFixture::<E>::async_props(k, start_ts, max_ts, 0)
        };
        f.must_prewrite_mutations(&props, vec![put(k, b"v")], Some(&[]))
            .min_commit_ts
    };
    assert_eq!(async_put(b"start", 44, 41, 0), Some(ts(45)));
    assert_eq!(async_put(b"max_ts", 30, 41, 0), Some(ts(42)));
    assert_eq!(async_put(b"request", 30, 41, 46), Some(ts(46)));

    // d was prewritten with max_ts 0 (min 61); the request {d, e} comes
    // with max_ts 70: d answers 61 from its lock, e 71.
    assert_eq!(async_put(b"d", 60, 0, 0), Some(ts(61)));
    let props = TxnFixture::<E>::async_props(b"d", 60, 70, 0);
    let r = f.must_prewrite_mutations(&props, vec![put(b"d", b"v"), put(b"e", b"v")], Some(&[]));
    assert_eq!(r.min_commit_ts, Some(ts(71)));
    assert_eq!(f.must_locked(b"d", 60).min_commit_ts, ts(61));
    assert_eq!(f.must_locked(b"e", 60).min_commit_ts, ts(71));
}

/// I5: when the computed commit_ts would exceed max_commit_ts, the prewrite
/// falls back to 2PC: success with min_commit_ts 0, locks without async
/// commit; a repeat gives the same answer.
fn i5_async_fallback_above_max_commit_ts<E: Engine>(f: TxnFixture<E>) {
    let props = TransactionProperties {
        min_commit_ts: ts(21),
        ..TxnFixture::<E>::async_props(b"k1", 20, 50, 40)
    };
    let secondaries = [b"k2".to_vec()];
    let mutations = || vec![put(b"k1", b"v1"), put(b"k2", b"v2")];
    let r = f.must_prewrite_mutations(&props, mutations(), Some(&secondaries));
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, None));
    for k in [&b"k1"[..], b"k2"] {
        let lock = f.must_locked(k, 20);
        assert!(!lock.use_async_commit, "{lock:?}");
        assert!(lock.secondaries.is_empty());
    }
    let r =
        f.assert_unchanged(|| f.must_prewrite_mutations(&props, mutations(), Some(&secondaries)));
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, None));
}

// ---------------------------------------------------------------- group K

/// K3: a 1PC prewrite whose commit_ts would exceed max_commit_ts falls back
/// to 2PC: both answers 0, a normal lock without use_one_pc; idempotent.
fn k3_one_pc_fallback<E: Engine>(f: TxnFixture<E>) {
    let props = TxnFixture::<E>::one_pc_props(b"k", 20, 50, 30);
    let r = f.must_prewrite_mutations(&props, vec![put(b"k", b"v")], None);
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, None));
    let lock = f.must_locked(b"k", 20);
    assert!(!lock.use_one_pc && !lock.use_async_commit, "{lock:?}");
    assert!(f.writes(b"k").is_empty());
    let r = f.assert_unchanged(|| f.must_prewrite_mutations(&props, vec![put(b"k", b"v")], None));
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, None));
    f.must_commit(b"k", 20, 60);
    f.must_get(b"k", 60, b"v");
}

/// K5: 1PC commits every key at max_ts + 1 without locks; a repeat after
/// max_ts moved past that answers the original commit_ts and writes
/// nothing.
fn k5_repeated_one_pc_returns_original_commit_ts<E: Engine>(f: TxnFixture<E>) {
    let mutations = || vec![put(b"k1", b"v1"), put(b"k2", b"v2")];
    let props = TxnFixture::<E>::one_pc_props(b"k1", 5, 10, 0);
    let r = f.must_prewrite_mutations(&props, mutations(), None);
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, Some(ts(11))));
    for k in [&b"k1"[..], b"k2"] {
        f.must_unlocked(k);
        f.must_written(k, 5, 11, WriteType::Put);
    }
    let later = TxnFixture::<E>::one_pc_props(b"k1", 5, 100, 0);
    let r = f.assert_unchanged(|| f.must_prewrite_mutations(&later, mutations(), None));
    assert_eq!((r.min_commit_ts, r.one_pc_commit_ts), (None, Some(ts(11))));
    f.must_get(b"k2", 11, b"v2");
}

// ---------------------------------------------------------------- group J

/// J2: a key with the transaction's commit record answers Committed with
/// its commit_ts, whatever is above it, and nothing is written.
fn j2_secondary_committed<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 5, 10);
    f.must_put_committed(b"k", b"v2", 12, 15);
    f.must_prewrite_put(b"k", b"v3", b"k", 20);
    let status = f.assert_unchanged(|| f.must_check_secondary_lock(b"k", 5));
    assert_eq!(status, SecondaryLockStatus::Committed(ts(10)));
}

/// J3: an existing rollback answers RolledBack without writing; nothing at
/// all answers RolledBack and writes a protected rollback.
fn j3_secondary_rolled_back<E: Engine>(f: TxnFixture<E>) {
    f.must_rollback(b"k", 5);
    let status = f.assert_unchanged(|| f.must_check_secondary_lock(b"k", 5));
    assert_eq!(status, SecondaryLockStatus::RolledBack);
    assert_eq!(
        f.must_check_secondary_lock(b"k2", 6),
        SecondaryLockStatus::RolledBack
    );
    f.must_get_rollback(b"k2", 6, true);
}

/// J5: another transaction's lock gets a protected rollback beside it (and
/// an async lock is marked as in F9); another transaction's commit record
/// at exactly this ts is marked overlapped with GC fence 0.
fn j5_secondary_meets_another_txn<E: Engine>(f: TxnFixture<E>) {
    let async_20 = AsyncTs {
        start_ts: 20,
        ..Default::default()
    };
    f.must_prewrite_put_async(b"async", b"v", b"async", Some(&[]), async_20);
    f.must_prewrite_put(b"2pc", b"v", b"2pc", 20);
    for (k, marked) in [(&b"async"[..], true), (b"2pc", false)] {
        assert_eq!(
            f.must_check_secondary_lock(k, 25),
            SecondaryLockStatus::RolledBack
        );
        f.must_get_rollback(k, 25, true);
        let lock = f.must_locked(k, 20);
        assert_eq!(lock.rollback_ts == [ts(25)], marked, "{lock:?}");
    }

    f.must_put_committed(b"k3", b"v", 30, 40);
    assert_eq!(
        f.must_check_secondary_lock(b"k3", 40),
        SecondaryLockStatus::RolledBack
    );
    let write = f.must_written(b"k3", 30, 40, WriteType::Put);
    assert!(write.has_overlapped_rollback);
    assert_eq!(write.gc_fence, Some(ts(0)));
    f.must_get(b"k3", 40, b"v");
}

/// J6: a stale pessimistic lock of the transaction (locked with conflict:
/// its for_update_ts above the commit) is removed; the answer comes from
/// the write CF: Committed with the commit_ts when the commit record is
/// there, RolledBack (protected) when nothing is.
fn j6_stale_pessimistic_lock<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"k", b"v", 5, 10);
    f.must_put_lock(b"k", &TxnFixture::<E>::pessimistic_lock(b"k", 5, 12));
    assert_eq!(
        f.must_check_secondary_lock(b"k", 5),
        SecondaryLockStatus::Committed(ts(10))
    );
    f.must_unlocked(b"k");
    f.must_get(b"k", 10, b"v");

    f.must_put_lock(b"k2", &TxnFixture::<E>::pessimistic_lock(b"k2", 20, 25));
    assert_eq!(
        f.must_check_secondary_lock(b"k2", 20),
        SecondaryLockStatus::RolledBack
    );
    f.must_unlocked(b"k2");
    f.must_get_rollback(b"k2", 20, true);
}

/// J, the reference sequence of upstream's
/// test_check_async_commit_secondary_locks, all on k1.
fn j_reference_sequence<E: Engine>(f: TxnFixture<E>) {
    let csl = |start_ts| f.must_check_secondary_lock(b"k1", start_ts);
    f.must_lock_committed(b"k1", 1, 3);
    f.must_rollback(b"k1", 5);
    f.must_lock_committed(b"k1", 7, 9);
    assert_eq!(csl(7), SecondaryLockStatus::Committed(ts(9)));
    assert_eq!(csl(5), SecondaryLockStatus::RolledBack);
    assert_eq!(csl(1), SecondaryLockStatus::Committed(ts(3)));
    assert_eq!(csl(6), SecondaryLockStatus::RolledBack);
    f.must_get_rollback(b"k1", 6, true);

    f.must_put_lock(b"k1", &TxnFixture::<E>::pessimistic_lock(b"k1", 11, 11));
    assert_eq!(csl(11), SecondaryLockStatus::RolledBack);
    f.must_unlocked(b"k1");
    f.must_get_rollback(b"k1", 11, true);

    f.must_prewrite_put(b"k1", b"v", b"k1", 13);
    match csl(13) {
        SecondaryLockStatus::Locked(lock) => assert_eq!(lock.ts, ts(13)),
        other => panic!("expected Locked, got {other:?}"),
    }

    f.must_commit(b"k1", 13, 15);
    assert_eq!(csl(14), SecondaryLockStatus::RolledBack);
    f.must_get_rollback(b"k1", 14, true);
    assert_eq!(csl(15), SecondaryLockStatus::RolledBack);
    let write = f.must_written(b"k1", 13, 15, WriteType::Put);
    assert!(write.has_overlapped_rollback);
    assert_eq!(write.gc_fence, Some(ts(0)));
}

// ---------------------------------------------------------------- group L

/// L2: resolving with a non-zero commit_ts at or below the lock's start_ts
/// is InvalidTxnTso, for a range and for one key; the locks stay.
fn l2_resolve_with_commit_ts_not_above_start_ts<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k", b"v", b"k", 10);
    for commit_ts in [10, 5] {
        let err = f
            .resolve_lock_range(10, commit_ts, None, None, 0)
            .unwrap_err();
        assert_invalid_txn_tso(&err, 10, commit_ts);
        let err = f.run_err(10, |txn, reader| {
            resolve_lock_key(txn, reader, key(b"k"), ts(commit_ts))
        });
        assert_invalid_txn_tso(&err, 10, commit_ts);
    }
    f.must_locked(b"k", 10);
}

/// L3: committing an async lock below its min_commit_ts fails the whole
/// resolve (no lock of the batch is committed); at min_commit_ts it works.
fn l3_resolve_async_lock_below_min_commit_ts<E: Engine>(f: TxnFixture<E>) {
    let props = TxnFixture::<E>::async_props(b"k1", 10, 20, 0);
    let secondaries = [b"k2".to_vec()];
    let mutations = vec![put(b"k1", b"v"), put(b"k2", b"v")];
    let r = f.must_prewrite_mutations(&props, mutations, Some(&secondaries));
    assert_eq!(r.min_commit_ts, Some(ts(21)));
    let err = f.assert_unchanged(|| {
        let snapshot = f.engine().snapshot();
        resolve_lock_batch(&snapshot, ts(10), ts(15), None, None, 0).unwrap_err()
    });
    assert_commit_ts_expired(&err, b"k1", (10, 15, 21));
    f.must_locked(b"k1", 10);
    f.must_locked(b"k2", 10);
    assert_eq!(f.resolve_lock_range(10, 21, None, None, 0).unwrap(), [2]);
    for k in [&b"k1"[..], b"k2"] {
        f.must_written(k, 10, 21, WriteType::Put);
    }
}

/// L5: ResolveLockLite commits the given keys when commit_ts is non-zero,
/// and otherwise rolls them back like a batch rollback: non-protected on a
/// secondary, collapsing the previous non-protected rollback.
fn l5_resolve_lock_lite<E: Engine>(f: TxnFixture<E>) {
    f.must_prewrite_put(b"k1", b"v", b"p", 5);
    f.must_prewrite_put(b"k2", b"v", b"p", 5);
    f.must_resolve_lock_lite(&[b"k1", b"k2"], 5, 10);
    for k in [&b"k1"[..], b"k2"] {
        f.must_unlocked(k);
        f.must_written(k, 5, 10, WriteType::Put);
    }

    f.must_rollback(b"k3", 3);
    f.must_prewrite_put(b"k3", b"v", b"p", 6);
    f.must_prewrite_put(b"k4", b"v", b"p", 6);
    f.must_resolve_lock_lite(&[b"k3", b"k4"], 6, 0);
    for k in [&b"k3"[..], b"k4"] {
        f.must_unlocked(k);
        f.must_get_rollback(k, 6, false);
        f.must_get_none(k, 20);
    }
    f.must_not_have_write(b"k3", 3);
}

/// L6: resolving a range batch by batch (each batch written before the next
/// is read) leaves exactly what resolving it at once does. Two identical
/// ranges, a/.. and b/.., hold the locks of txn 5 (committed at 10), txn 6
/// (rolled back) and txn 7 (left alone); a/.. is resolved in batches, b/..
/// at once, and every key of a/.. must then match its twin in b/...
fn l6_batched_resolve_equals_resolving_at_once<E: Engine>(f: TxnFixture<E>) {
    const KEYS: usize = 11;
    let name = |prefix: &str, i: usize| format!("{prefix}/{i:02}").into_bytes();
    for prefix in ["a", "b"] {
        for i in 0..KEYS {
            let k = name(prefix, i);
            f.must_put_committed(&k, b"old", 1, 2);
            f.must_rollback(&k, 3);
            let start_ts = 5 + (i % 3) as u64;
            let value = vec![b'v'; 100 * i];
            f.must_prewrite_put(&k, &value, b"p", start_ts);
        }
    }
    let per_txn = |start_ts: usize| (0..KEYS).filter(|i| 5 + i % 3 == start_ts).count();

    let batches = f
        .resolve_lock_range(5, 10, Some(b"a/"), Some(b"a0"), 2)
        .unwrap();
    assert!(batches.len() > 1, "{batches:?}");
    assert_eq!(batches.iter().sum::<usize>(), per_txn(5));
    let batches = f
        .resolve_lock_range(6, 0, Some(b"a/"), Some(b"a0"), 3)
        .unwrap();
    assert!(batches.len() > 1, "{batches:?}");
    assert_eq!(batches.iter().sum::<usize>(), per_txn(6));
    for (start_ts, commit_ts) in [(5, 10), (6, 0)] {
        let at_once = f
            .resolve_lock_range(start_ts, commit_ts, Some(b"b/"), Some(b"b0"), 0)
            .unwrap();
        assert_eq!(at_once, [per_txn(start_ts as usize)]);
    }

    for i in 0..KEYS {
        let (a, b) = (name("a", i), name("b", i));
        assert_eq!(f.mvcc_info(&a), f.mvcc_info(&b), "key {i}");
        let info = f.mvcc_info(&a);
        match i % 3 {
            0 => {
                assert!(info.lock.is_none());
                f.must_written(&a, 5, 10, WriteType::Put);
            }
            1 => {
                assert!(info.lock.is_none());
                f.must_get_rollback(&a, 6, false);
                f.must_not_have_write(&a, 3);
            }
            _ => assert_eq!(info.lock.map(|l| l.ts), Some(ts(7))),
        }
    }
}

// ---------------------------------------------------------------- group M

/// M2: GC leaves versions above the safe point alone; below it, Lock and
/// Rollback records go down to the first Put (kept, everything older goes,
/// long values included) or Delete (goes too, with everything older); with
/// neither, every Lock and Rollback goes.
fn m2_gc_rule<E: Engine>(f: TxnFixture<E>) {
    let long = vec![b'l'; 300];
    f.must_put_committed(b"put", &long, 1, 2);
    f.must_put_committed(b"put", b"v4", 3, 4);
    f.must_lock_committed(b"put", 5, 6);
    f.must_rollback(b"put", 7);
    f.must_put_committed(b"put", b"v22", 21, 22);

    f.must_put_committed(b"delete", b"v", 1, 2);
    f.must_delete_committed(b"delete", 3, 4);
    f.must_lock_committed(b"delete", 5, 6);

    f.must_lock_committed(b"none", 1, 2);
    f.must_rollback(b"none", 3);
    f.must_put_committed(b"none", b"v26", 25, 26);

    let commits =
        |k: &[u8]| -> Vec<TimeStamp> { f.writes(k).into_iter().map(|(c, _)| c).collect() };

    let info = f.must_gc(b"put", 20);
    assert_eq!(
        (
            info.found_versions,
            info.deleted_versions,
            info.deleted_values
        ),
        (4, 3, 1)
    );
    assert_eq!(commits(b"put"), [ts(22), ts(4)]);
    assert!(f.mvcc_info(b"put").values.is_empty());
    f.must_get(b"put", 20, b"v4");
    f.must_get(b"put", 22, b"v22");

    let info = f.must_gc(b"delete", 20);
    assert_eq!((info.found_versions, info.deleted_versions), (3, 3));
    assert!(commits(b"delete").is_empty());
    f.must_get_none(b"delete", 20);

    let info = f.must_gc(b"none", 20);
    assert_eq!((info.found_versions, info.deleted_versions), (2, 2));
    assert_eq!(commits(b"none"), [ts(26)]);
    f.must_get_none(b"none", 20);
    f.must_get(b"none", 26, b"v26");
}

/// M3: GC never touches the lock CF (nor a pending lock's long value) and
/// never removes the newest Put at or below the safe point; afterwards
/// deleted keys read as none and live ones still read.
fn m3_gc_keeps_locks_and_newest_put<E: Engine>(f: TxnFixture<E>) {
    f.must_put_committed(b"live", b"v1", 1, 2);
    f.must_put_committed(b"live", b"v2", 3, 4);
    f.must_put_committed(b"dead", b"v", 1, 2);
    f.must_delete_committed(b"dead", 3, 4);
    f.must_put_committed(b"locked", b"v", 1, 2);
    let long = vec![b'p'; 300];
    f.must_prewrite_put(b"locked", &long, b"locked", 5);
    f.must_put_committed(b"edge", b"v", 9, 10);

    for k in [&b"live"[..], b"dead", b"locked", b"edge"] {
        f.must_gc(k, 10);
    }
    assert_eq!(f.writes(b"live").len(), 1);
    assert_eq!(f.get(b"live", MAX).unwrap().as_deref(), Some(&b"v2"[..]));
    assert!(f.writes(b"dead").is_empty());
    assert_eq!(f.get(b"dead", MAX).unwrap(), None);
    f.must_locked(b"locked", 5);
    assert_eq!(f.mvcc_info(b"locked").values, vec![(ts(5), long)]);
    f.must_get(b"locked", 4, b"v");
    f.must_written(b"edge", 9, 10, WriteType::Put);
    f.must_get(b"edge", 10, b"v");
}

on_both_engines!(
    TxnFixture;
    c1_prewrite_and_idempotent_retry,
    c3_stale_prewrite_after_own_commit,
    c4_write_conflict,
    c6_rollback_before_prewrite,
    c7_newer_rollback_of_another_txn_conflicts,
    c9_insert,
    c10_insert_looks_through_rollback_and_lock_records,
    c12_check_not_exists,
    c12_delete_of_an_undone_insert,
    c13_existence_checks_are_linearizable,
    c15_retried_prewrite_of_committed_txn_meets_newer_lock,
    c16_retried_prewrite_of_rolled_back_txn_fails,
    c_existence_assertions,
    c_assertion_failure_yields_to_a_later_conflict,
    e1_commit_writes_record_of_lock_type,
    e2_commit_ts_not_above_start_ts,
    e4_recommit_at_another_ts_is_a_noop,
    e5_commit_below_min_commit_ts,
    e7_commit_of_bare_pessimistic_lock_rolls_it_back,
    e8_commit_below_for_update_ts_is_not_checked,
    e10_commit_after_own_commit_with_another_lock,
    f1_rollback_is_idempotent_and_unlocks,
    f3_rollback_beside_another_txns_lock,
    f4_rollbacks_at_other_ts_then_commit,
    f6_collapsing_non_protected_rollbacks,
    f7_overlapped_rollback_on_a_commit_record,
    f9_protected_rollback_marks_an_async_lock,
    f10_cleanup_ttl_check,
    f12_rollback_of_lock_with_existing_rollback_record,
    f13_rollback_refuses_a_lock_beside_its_own_commit_record,
    g1_missing_txn,
    g3_push_min_commit_ts,
    g4_zero_min_commit_ts_is_never_pushed,
    g6_committed,
    g7_ttl_uses_physical_ms,
    g9_resolving_pessimistic_lock_with_nothing_found,
    g10_async_commit_primary_is_never_decided,
    g12_optimistic_rollback_at_another_commit_ts,
    g13_verify_is_primary,
    g14_primary_check_only_when_asked_and_only_for_another_primary,
    h1_heart_beat_txn_not_found,
    i1_async_min_commit_ts_from_max_ts,
    i2_min_commit_ts_formula,
    i5_async_fallback_above_max_commit_ts,
    k3_one_pc_fallback,
    k5_repeated_one_pc_returns_original_commit_ts,
    j2_secondary_committed,
    j3_secondary_rolled_back,
    j5_secondary_meets_another_txn,
    j6_stale_pessimistic_lock,
    j_reference_sequence,
    l2_resolve_with_commit_ts_not_above_start_ts,
    l3_resolve_async_lock_below_min_commit_ts,
    l5_resolve_lock_lite,
    l6_batched_resolve_equals_resolving_at_once,
    m2_gc_rule,
    m3_gc_keeps_locks_and_newest_put,
);
