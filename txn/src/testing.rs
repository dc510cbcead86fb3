//! `must_*` helpers for action tests, so that a scenario reads as its
//! description: `must_prewrite_put(b"k", b"v", b"k", 5); must_commit(b"k",
//! 5, 10); must_written(b"k", 5, 10, WriteType::Put);`.
//!
//! Each helper takes a fresh snapshot, runs one action (or one prewrite
//! request), writes its modifications atomically when it succeeds, and
//! panics with the error otherwise; the `*_err` forms return the error and
//! check that nothing was written.

use percolate_engine::{Engine, WriteOptions};
use percolate_mvcc::testing::ts;
use percolate_mvcc::{
    Key, Lock, LockType, MvccReader, MvccTxn, PointGetterBuilder, TimeStamp, Write, WriteType,
};

use crate::actions::acquire_pessimistic_lock::{
    PessimisticLockKeyResult, PessimisticLockOptions, acquire_pessimistic_lock,
};
use crate::actions::check_secondary_locks::{SecondaryLockStatus, check_secondary_lock};
use crate::actions::check_txn_status::{CheckTxnStatusOptions, check_txn_status};
use crate::actions::cleanup::{CleanupKind, cleanup};
use crate::actions::commit::commit;
use crate::actions::gc::{GcInfo, gc};
use crate::actions::heart_beat::txn_heart_beat;
use crate::actions::mvcc_by_key::{MvccInfo, mvcc_by_key};
use crate::actions::pessimistic_rollback::pessimistic_rollback;
use crate::actions::prewrite::{
    CommitKind, Mutation, PessimisticAction, PrewriteResult, TransactionKind,
    TransactionProperties, prewrite_mutations,
};
use crate::actions::resolve_lock::{resolve_lock_batch, resolve_lock_key};
use crate::actions::{ReleasedLock, TxnStatus};
use crate::{Error, Result};

/// The timestamps of an async-commit prewrite.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsyncTs {
    /// The transaction's start_ts.
    pub start_ts: u64,
    /// The region's max_ts.
    pub max_ts: u64,
    /// The client's limit (0 = none).
    pub max_commit_ts: u64,
}

/// Runs actions against an engine, one atomic write per call.
#[derive(Clone, Debug)]
pub struct TxnFixture<E: Engine> {
    engine: E,
}

fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

impl<E: Engine> TxnFixture<E> {
    /// A fixture over `engine`.
    pub fn new(engine: E) -> Self {
        TxnFixture { engine }
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    fn write(&self, txn: MvccTxn) {
        if !txn.is_empty() {
            self.engine
                .write(&txn.into_write_batch(), WriteOptions::default())
                .expect("engine write");
        }
    }

    /// A reader over a fresh snapshot.
    pub fn reader(&self) -> MvccReader<E::Snap> {
        MvccReader::new(self.engine.snapshot())
    }

    /// Runs `action` for the transaction `start_ts` on a fresh snapshot and
    /// writes its modifications if it succeeds.
    pub fn run<T>(
        &self,
        start_ts: u64,
        action: impl FnOnce(&mut MvccTxn, &mut MvccReader<E::Snap>) -> Result<T>,
    ) -> Result<T> {
        let mut txn = MvccTxn::new(ts(start_ts));
        let mut reader = self.reader();
        let out = action(&mut txn, &mut reader)?;
        self.write(txn);
        Ok(out)
    }

    /// Like [`run`](Self::run) for an action expected to fail; checks that
    /// it recorded nothing and returns its error.
    #[track_caller]
    pub fn run_err<T: std::fmt::Debug>(
        &self,
        start_ts: u64,
        action: impl FnOnce(&mut MvccTxn, &mut MvccReader<E::Snap>) -> Result<T>,
    ) -> Error {
        let mut txn = MvccTxn::new(ts(start_ts));
        let mut reader = self.reader();
        match action(&mut txn, &mut reader) {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => {
                assert!(
                    txn.is_empty(),
                    "a failed action recorded {:?}",
                    txn.modifies()
                );
                e
            }
        }
    }

    /// Runs `op` and asserts that it changed no record of any CF.
    #[track_caller]
    pub fn assert_unchanged<T>(&self, op: impl FnOnce() -> T) -> T {
        let before = self.dump();
        let out = op();
        assert_eq!(before, self.dump(), "expected no change");
        out
    }

    // ------------------------------------------------------------ prewrite

    /// Properties of a plain optimistic 2PC transaction.
    pub fn props(primary: &[u8], start_ts: u64) -> TransactionProperties {
        TransactionProperties {
            start_ts: ts(start_ts),
            primary: primary.to_vec(),
            ..Default::default()
        }
    }

    /// Runs one prewrite request and writes its result.
    pub fn prewrite(
        &self,
        props: &TransactionProperties,
        mutations: Vec<Mutation>,
        secondaries: Option<&[Vec<u8>]>,
    ) -> Result<PrewriteResult> {
        let (txn, result) =
            prewrite_mutations(&self.engine.snapshot(), props, &mutations, secondaries)?;
        if let Some(lock) = result.locks.first() {
            assert!(txn.is_empty(), "a prewrite that met locks writes nothing");
            if result.locks.len() == 1 && mutations.len() == 1 {
                return Err(percolate_mvcc::Error::KeyIsLocked(Box::new(lock.clone())).into());
            }
        }
        self.write(txn);
        Ok(result)
    }

    /// Properties of a transaction that computes its commit_ts from the
    /// region's `max_ts` (async commit or 1PC, per `commit_kind`).
    fn computed_commit_props(
        primary: &[u8],
        start_ts: u64,
        max_ts: u64,
        commit_kind: CommitKind,
    ) -> TransactionProperties {
        TransactionProperties {
            commit_kind,
            max_ts: ts(max_ts),
            ..Self::props(primary, start_ts)
        }
    }

    /// Properties of an async-commit transaction: `max_ts` is the region's
    /// max_ts the concurrency manager would give, `max_commit_ts` the
    /// client's limit (0 = none).
    pub fn async_props(
        primary: &[u8],
        start_ts: u64,
        max_ts: u64,
        max_commit_ts: u64,
    ) -> TransactionProperties {
        let max_commit_ts = ts(max_commit_ts);
        Self::computed_commit_props(
            primary,
            start_ts,
            max_ts,
            CommitKind::Async { max_commit_ts },
        )
    }

    /// Properties of a 1PC transaction; see [`async_props`](Self::async_props).
    pub fn one_pc_props(
        primary: &[u8],
        start_ts: u64,
        max_ts: u64,
        max_commit_ts: u64,
    ) -> TransactionProperties {
        let max_commit_ts = ts(max_commit_ts);
        Self::computed_commit_props(
            primary,
            start_ts,
            max_ts,
            CommitKind::OnePc { max_commit_ts },
        )
    }

    /// Runs one prewrite request that must succeed without meeting locks;
    /// returns its result.
    #[track_caller]
    pub fn must_prewrite_mutations(
        &self,
        props: &TransactionProperties,
        mutations: Vec<Mutation>,
        secondaries: Option<&[Vec<u8>]>,
    ) -> PrewriteResult {
        let result = self
            .prewrite(props, mutations, secondaries)
            .unwrap_or_else(|e| panic!("prewrite failed: {e}"));
        assert!(
            result.locks.is_empty(),
            "prewrite met locks: {:?}",
            result.locks
        );
        result
    }

    /// Prewrites one mutation in a 2PC transaction; panics on error.
    #[track_caller]
    pub fn must_prewrite(&self, mutation: Mutation, primary: &[u8], start_ts: u64) {
        let result = self.prewrite(&Self::props(primary, start_ts), vec![mutation], None);
        expect_no_locks(result, "prewrite");
    }

    /// Prewrites one mutation in a 2PC transaction, expecting an error.
    #[track_caller]
    pub fn must_prewrite_err(&self, mutation: Mutation, primary: &[u8], start_ts: u64) -> Error {
        let before = self.dump();
        let err = match self.prewrite(&Self::props(primary, start_ts), vec![mutation], None) {
            Ok(r) => panic!("expected a prewrite error, got {r:?}"),
            Err(e) => e,
        };
        assert_eq!(before, self.dump(), "a failed prewrite must write nothing");
        err
    }

    /// `must_prewrite(Mutation::put(..))`.
    #[track_caller]
    pub fn must_prewrite_put(&self, k: &[u8], value: &[u8], primary: &[u8], start_ts: u64) {
        self.must_prewrite(Mutation::put(key(k), value.to_vec()), primary, start_ts);
    }

    /// `must_prewrite(Mutation::delete(..))`.
    #[track_caller]
    pub fn must_prewrite_delete(&self, k: &[u8], primary: &[u8], start_ts: u64) {
        self.must_prewrite(Mutation::delete(key(k)), primary, start_ts);
    }

    /// `must_prewrite(Mutation::lock(..))`.
    #[track_caller]
    pub fn must_prewrite_lock(&self, k: &[u8], primary: &[u8], start_ts: u64) {
        self.must_prewrite(Mutation::lock(key(k)), primary, start_ts);
    }

    /// Prewrites a Put with every property given; returns the result.
    #[track_caller]
    pub fn must_prewrite_put_with(
        &self,
        k: &[u8],
        value: &[u8],
        props: &TransactionProperties,
        secondaries: Option<&[Vec<u8>]>,
    ) -> PrewriteResult {
        self.must_prewrite_mutations(
            props,
            vec![Mutation::put(key(k), value.to_vec())],
            secondaries,
        )
    }

    /// Prewrites an async-commit Put and returns its min_commit_ts (`None`
    /// if it fell back to 2PC).
    #[track_caller]
    pub fn must_prewrite_put_async(
        &self,
        k: &[u8],
        value: &[u8],
        primary: &[u8],
        secondaries: Option<&[Vec<u8>]>,
        timestamps: AsyncTs,
    ) -> Option<TimeStamp> {
        let props = Self::async_props(
            primary,
            timestamps.start_ts,
            timestamps.max_ts,
            timestamps.max_commit_ts,
        );
        self.must_prewrite_put_with(k, value, &props, secondaries)
            .min_commit_ts
    }

    /// Prewrites and commits a Put of `k` (its own primary).
    #[track_caller]
    pub fn must_put_committed(&self, k: &[u8], value: &[u8], start_ts: u64, commit_ts: u64) {
        self.must_prewrite_put(k, value, k, start_ts);
        self.must_commit(k, start_ts, commit_ts);
    }

    /// Prewrites and commits a Delete of `k` (its own primary).
    #[track_caller]
    pub fn must_delete_committed(&self, k: &[u8], start_ts: u64, commit_ts: u64) {
        self.must_prewrite_delete(k, k, start_ts);
        self.must_commit(k, start_ts, commit_ts);
    }

    /// Prewrites and commits a lock-only mutation of `k` (its own primary).
    #[track_caller]
    pub fn must_lock_committed(&self, k: &[u8], start_ts: u64, commit_ts: u64) {
        self.must_prewrite_lock(k, k, start_ts);
        self.must_commit(k, start_ts, commit_ts);
    }

    // --------------------------------------------------------- pessimistic

    /// Options of a pessimistic lock request of the transaction with
    /// primary `primary` at `for_update_ts`, TTL 3 s, returning nothing.
    pub fn lock_options(primary: &[u8], for_update_ts: u64) -> PessimisticLockOptions {
        PessimisticLockOptions {
            primary: primary.to_vec(),
            for_update_ts: ts(for_update_ts),
            lock_ttl: 3000,
            ..Default::default()
        }
    }

    /// Runs AcquirePessimisticLock on `k` for the transaction `start_ts`
    /// and writes its result.
    pub fn acquire_pessimistic_lock(
        &self,
        k: &[u8],
        start_ts: u64,
        should_not_exist: bool,
        options: &PessimisticLockOptions,
    ) -> Result<PessimisticLockKeyResult> {
        self.run(start_ts, |txn, reader| {
            acquire_pessimistic_lock(txn, reader, key(k), should_not_exist, options, None)
        })
    }

    /// Locks `k` pessimistically (primary `primary`, `for_update_ts`);
    /// panics on error.
    #[track_caller]
    pub fn must_acquire_pessimistic_lock(
        &self,
        k: &[u8],
        primary: &[u8],
        start_ts: u64,
        for_update_ts: u64,
    ) {
        self.acquire_pessimistic_lock(
            k,
            start_ts,
            false,
            &Self::lock_options(primary, for_update_ts),
        )
        .unwrap_or_else(|e| panic!("acquire_pessimistic_lock failed: {e}"));
    }

    /// Locks `k` pessimistically, expecting an error; checks that nothing
    /// was written.
    #[track_caller]
    pub fn must_acquire_pessimistic_lock_err(
        &self,
        k: &[u8],
        primary: &[u8],
        start_ts: u64,
        for_update_ts: u64,
    ) -> Error {
        let options = Self::lock_options(primary, for_update_ts);
        self.run_err(start_ts, |txn, reader| {
            acquire_pessimistic_lock(txn, reader, key(k), false, &options, None)
        })
    }

    /// Properties of a pessimistic 2PC transaction at `for_update_ts`.
    pub fn pessimistic_props(
        primary: &[u8],
        start_ts: u64,
        for_update_ts: u64,
    ) -> TransactionProperties {
        TransactionProperties {
            kind: TransactionKind::Pessimistic {
                for_update_ts: ts(for_update_ts),
            },
            ..Self::props(primary, start_ts)
        }
    }

    /// Prewrites a Put of `k` in a pessimistic 2PC transaction with
    /// `action`; returns the request's answer.
    pub fn pessimistic_prewrite_put(
        &self,
        k: &[u8],
        value: &[u8],
        primary: &[u8],
        start_ts: u64,
        for_update_ts: u64,
        action: PessimisticAction,
    ) -> Result<PrewriteResult> {
        let mutation = Mutation::put(key(k), value.to_vec()).with_pessimistic_action(action);
        self.prewrite(
            &Self::pessimistic_props(primary, start_ts, for_update_ts),
            vec![mutation],
            None,
        )
    }

    /// [`pessimistic_prewrite_put`](Self::pessimistic_prewrite_put) with
    /// `DoPessimisticCheck`; panics on error or locks.
    #[track_caller]
    pub fn must_pessimistic_prewrite_put(
        &self,
        k: &[u8],
        value: &[u8],
        primary: &[u8],
        start_ts: u64,
        for_update_ts: u64,
    ) {
        let result = self.pessimistic_prewrite_put(
            k,
            value,
            primary,
            start_ts,
            for_update_ts,
            PessimisticAction::DoPessimisticCheck,
        );
        expect_no_locks(result, "pessimistic prewrite");
    }

    /// Rolls back the pessimistic lock of `start_ts` on `k` taken at or
    /// below `for_update_ts`; returns whether one was removed.
    pub fn must_pessimistic_rollback(&self, k: &[u8], start_ts: u64, for_update_ts: u64) -> bool {
        self.run(start_ts, |txn, reader| {
            pessimistic_rollback(txn, reader, key(k), ts(for_update_ts))
        })
        .unwrap_or_else(|e| panic!("pessimistic rollback failed: {e}"))
        .is_some()
    }

    // ------------------------------------------------- records, directly

    /// A pessimistic lock (type `S`) of `start_ts` with `for_update_ts`
    /// and a TTL of 3 s, as AcquirePessimisticLock leaves it.
    pub fn pessimistic_lock(primary: &[u8], start_ts: u64, for_update_ts: u64) -> Lock {
        Lock {
            for_update_ts: ts(for_update_ts),
            ..Lock::new(LockType::Pessimistic, primary.to_vec(), ts(start_ts), 3000)
        }
    }

    /// Writes `lock` on `k` as it is, through [`MvccTxn::put_lock`]: for
    /// states no action here reaches (a pessimistic lock, a pessimistic
    /// prewrite).
    pub fn must_put_lock(&self, k: &[u8], lock: &Lock) {
        self.run(lock.ts.into_inner(), |txn, _| {
            txn.put_lock(key(k), lock);
            Ok(())
        })
        .expect("put_lock records only");
    }

    /// Writes `write` at `k@commit_ts` as it is.
    pub fn must_put_write(&self, k: &[u8], commit_ts: u64, write: &Write) {
        self.run(write.start_ts.into_inner(), |txn, _| {
            txn.put_write(key(k), ts(commit_ts), write);
            Ok(())
        })
        .expect("put_write records only");
    }

    // ------------------------------------------------------ other actions

    /// Commits `k` of `start_ts` at `commit_ts`; panics on error.
    #[track_caller]
    pub fn must_commit(&self, k: &[u8], start_ts: u64, commit_ts: u64) -> Option<ReleasedLock> {
        self.run(start_ts, |txn, reader| {
            commit(txn, reader, key(k), ts(commit_ts))
        })
        .unwrap_or_else(|e| panic!("commit failed: {e}"))
    }

    /// Commits, expecting an error.
    #[track_caller]
    pub fn must_commit_err(&self, k: &[u8], start_ts: u64, commit_ts: u64) -> Error {
        self.run_err(start_ts, |txn, reader| {
            commit(txn, reader, key(k), ts(commit_ts))
        })
    }

    /// Batch-rolls back `k` of `start_ts`; panics on error.
    #[track_caller]
    pub fn must_rollback(&self, k: &[u8], start_ts: u64) {
        self.run(start_ts, |txn, reader| {
            crate::actions::cleanup::rollback(txn, reader, key(k))
        })
        .unwrap_or_else(|e| panic!("rollback failed: {e}"));
    }

    /// Batch-rolls back, expecting an error.
    #[track_caller]
    pub fn must_rollback_err(&self, k: &[u8], start_ts: u64) -> Error {
        self.run_err(start_ts, |txn, reader| {
            crate::actions::cleanup::rollback(txn, reader, key(k))
        })
    }

    /// Cleans up `k` of `start_ts` (TTL checked against `current_ts` unless
    /// zero); panics on error.
    #[track_caller]
    pub fn must_cleanup(&self, k: &[u8], start_ts: u64, current_ts: u64) {
        self.run(start_ts, |txn, reader| {
            cleanup(txn, reader, key(k), ts(current_ts), CleanupKind::Cleanup)
        })
        .unwrap_or_else(|e| panic!("cleanup failed: {e}"));
    }

    /// Cleans up, expecting an error.
    #[track_caller]
    pub fn must_cleanup_err(&self, k: &[u8], start_ts: u64, current_ts: u64) -> Error {
        self.run_err(start_ts, |txn, reader| {
            cleanup(txn, reader, key(k), ts(current_ts), CleanupKind::Cleanup)
        })
    }

    /// Checks the status of `start_ts` on `primary`.
    pub fn check_txn_status(
        &self,
        primary: &[u8],
        start_ts: u64,
        options: &CheckTxnStatusOptions,
    ) -> Result<TxnStatus> {
        self.run(start_ts, |txn, reader| {
            check_txn_status(txn, reader, key(primary), options)
        })
        .map(|(status, _)| status)
    }

    /// Checks a transaction's status with the common options; panics on
    /// error.
    #[track_caller]
    pub fn must_check_txn_status(
        &self,
        primary: &[u8],
        start_ts: u64,
        caller_start_ts: u64,
        current_ts: u64,
        rollback_if_not_exist: bool,
    ) -> TxnStatus {
        let options = CheckTxnStatusOptions {
            caller_start_ts: ts(caller_start_ts),
            current_ts: ts(current_ts),
            rollback_if_not_exist,
            ..Default::default()
        };
        self.check_txn_status(primary, start_ts, &options)
            .unwrap_or_else(|e| panic!("check_txn_status failed: {e}"))
    }

    /// Sends a heart beat; returns the TTL in force.
    pub fn heart_beat(&self, primary: &[u8], start_ts: u64, advise_ttl: u64) -> Result<u64> {
        self.run(start_ts, |txn, reader| {
            txn_heart_beat(txn, reader, key(primary), advise_ttl)
        })
    }

    /// Sends a heart beat that must succeed; returns the TTL in force.
    #[track_caller]
    pub fn must_heart_beat(&self, primary: &[u8], start_ts: u64, advise_ttl: u64) -> u64 {
        self.heart_beat(primary, start_ts, advise_ttl)
            .unwrap_or_else(|e| panic!("heart beat failed: {e}"))
    }

    /// ResolveLockLite: commits (`commit_ts` non-zero) or rolls back each
    /// of `keys` for `start_ts`, in one write.
    #[track_caller]
    pub fn must_resolve_lock_lite(&self, keys: &[&[u8]], start_ts: u64, commit_ts: u64) {
        self.run(start_ts, |txn, reader| {
            keys.iter()
                .try_for_each(|k| resolve_lock_key(txn, reader, key(k), ts(commit_ts)).map(drop))
        })
        .unwrap_or_else(|e| panic!("resolve_lock_lite failed: {e}"));
    }

    /// ResolveLock over the raw key range `[start, end)` (unbounded where
    /// `None`) in batches of `batch_size` locks (0 = all at once), each
    /// batch on a fresh snapshot and written before the next is read.
    /// Returns the number of locks of each batch; on error, the batches
    /// before it stay written.
    pub fn resolve_lock_range(
        &self,
        start_ts: u64,
        commit_ts: u64,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        batch_size: usize,
    ) -> Result<Vec<usize>> {
        let end = end.map(key);
        let mut next = start.map(key);
        let mut batches = Vec::new();
        loop {
            let batch = resolve_lock_batch(
                &self.engine.snapshot(),
                ts(start_ts),
                ts(commit_ts),
                next.as_ref(),
                end.as_ref(),
                batch_size,
            )?;
            batches.push(batch.resolved);
            self.write(batch.txn);
            match batch.next_start {
                Some(key) => next = Some(key),
                None => return Ok(batches),
            }
        }
    }

    /// Checks one secondary lock of `start_ts`.
    #[track_caller]
    pub fn must_check_secondary_lock(&self, k: &[u8], start_ts: u64) -> SecondaryLockStatus {
        self.run(start_ts, |txn, reader| {
            check_secondary_lock(txn, reader, key(k))
        })
        .unwrap_or_else(|e| panic!("check_secondary_locks failed: {e}"))
        .0
    }

    /// Collects `k`'s garbage below `safe_point`.
    #[track_caller]
    pub fn must_gc(&self, k: &[u8], safe_point: u64) -> GcInfo {
        self.run(0, |txn, reader| gc(txn, reader, key(k), ts(safe_point)))
            .unwrap_or_else(|e| panic!("gc failed: {e}"))
    }

    // --------------------------------------------------------- inspection

    /// The lock on `k`, which must belong to `start_ts`.
    #[track_caller]
    pub fn must_locked(&self, k: &[u8], start_ts: u64) -> Lock {
        let lock = self
            .reader()
            .load_lock(&key(k))
            .unwrap()
            .unwrap_or_else(|| panic!("{} is not locked", String::from_utf8_lossy(k)));
        assert_eq!(lock.ts, ts(start_ts), "lock of another txn");
        lock
    }

    /// Asserts that `k` has no lock.
    #[track_caller]
    pub fn must_unlocked(&self, k: &[u8]) {
        let lock = self.reader().load_lock(&key(k)).unwrap();
        assert!(lock.is_none(), "unexpected lock {lock:?}");
    }

    /// The record at `k@commit_ts`, which must be of `write_type` and
    /// belong to `start_ts`.
    #[track_caller]
    pub fn must_written(
        &self,
        k: &[u8],
        start_ts: u64,
        commit_ts: u64,
        write_type: WriteType,
    ) -> Write {
        let write = self.must_have_write(k, commit_ts);
        assert_eq!(write.start_ts, ts(start_ts), "record of another txn");
        assert_eq!(write.write_type, write_type);
        write
    }

    /// The record exactly at `k@commit_ts`.
    #[track_caller]
    pub fn must_have_write(&self, k: &[u8], commit_ts: u64) -> Write {
        match self.reader().seek_write(&key(k), ts(commit_ts)).unwrap() {
            Some((found, write)) if found == ts(commit_ts) => write,
            other => panic!("no record at {commit_ts}: {other:?}"),
        }
    }

    /// Asserts that there is no record exactly at `k@commit_ts`.
    #[track_caller]
    pub fn must_not_have_write(&self, k: &[u8], commit_ts: u64) {
        if let Some((found, write)) = self.reader().seek_write(&key(k), ts(commit_ts)).unwrap() {
            assert_ne!(found, ts(commit_ts), "unexpected record {write:?}");
        }
    }

    /// The Rollback record of `start_ts` on `k`; checks its protection.
    #[track_caller]
    pub fn must_get_rollback(&self, k: &[u8], start_ts: u64, protected: bool) -> Write {
        let write = self.must_written(k, start_ts, start_ts, WriteType::Rollback);
        assert_eq!(write.is_protected(), protected, "protection of {write:?}");
        write
    }

    /// Every record of `k` (lock, write records, long values), as
    /// MvccGetByKey shows them.
    pub fn mvcc_info(&self, k: &[u8]) -> MvccInfo {
        mvcc_by_key(&mut self.reader(), &key(k)).expect("read the records of a key")
    }

    /// Every record of `k`, newest first.
    pub fn writes(&self, k: &[u8]) -> Vec<(TimeStamp, Write)> {
        self.reader()
            .scan_writes(&key(k), TimeStamp::max())
            .unwrap()
    }

    /// A point read at `read_ts` (SI).
    pub fn get(&self, k: &[u8], read_ts: u64) -> percolate_mvcc::Result<Option<Vec<u8>>> {
        PointGetterBuilder::new(self.engine.snapshot(), ts(read_ts))
            .build()
            .get(&key(k))
    }

    /// Asserts a read at `read_ts` returns `value`.
    #[track_caller]
    pub fn must_get(&self, k: &[u8], read_ts: u64, value: &[u8]) {
        assert_eq!(self.get(k, read_ts).unwrap().as_deref(), Some(value));
    }

    /// Asserts a read at `read_ts` finds nothing.
    #[track_caller]
    pub fn must_get_none(&self, k: &[u8], read_ts: u64) {
        assert_eq!(self.get(k, read_ts).unwrap(), None);
    }

    /// Every record of every CF, for before/after comparisons.
    pub fn dump(&self) -> Vec<(percolate_engine::Cf, Vec<u8>, Vec<u8>)> {
        let snapshot = self.engine.snapshot();
        percolate_engine::Cf::ALL
            .iter()
            .flat_map(|&cf| {
                percolate_engine::testing::collect_forward(
                    &snapshot,
                    cf,
                    percolate_engine::IterOptions::new(),
                )
                .into_iter()
                .map(move |(k, v)| (cf, k, v))
            })
            .collect()
    }
}

mod faulty;
pub use faulty::FaultyEngine;

/// Panics unless `result` is a prewrite that succeeded without meeting
/// locks; `what` names it in the message.
#[track_caller]
fn expect_no_locks(result: Result<PrewriteResult>, what: &str) {
    match result {
        Ok(r) if r.locks.is_empty() => {}
        Ok(r) => panic!("{what} met locks: {:?}", r.locks),
        Err(e) => panic!("{what} failed: {e}"),
    }
}

/// Each scenario, a function of an engine, as two tests: `name::memory` on
/// the memory engine and `name::rocks` on RocksDB in a temporary
/// directory. For this crate's unit tests; `tests/` has its own.
#[cfg(test)]
macro_rules! on_both_engines {
    ($($name:ident => $scenario:ident;)*) => {$(
        mod $name {
            #[test]
            fn memory() {
                super::$scenario(percolate_engine::MemoryEngine::new());
            }

            #[test]
            fn rocks() {
                super::$scenario(percolate_engine::testing::temp_rocks_engine());
            }
        }
    )*};
}
#[cfg(test)]
pub(crate) use on_both_engines;
