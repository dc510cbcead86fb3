//! Test fixtures for reader tests: write MVCC records directly.
//!
//! The transaction actions (prewrite, commit, rollback) live in
//! `percolate-txn`, above this crate. Reader tests here need only the records
//! those actions leave behind, so [`MvccFixture`] writes exactly those
//! records: a prewrite puts a lock (and a long value in the default CF), a
//! commit turns the lock into a write record, a rollback replaces it with a
//! Rollback record. It checks nothing a real action would check; tests of
//! the actions themselves live with the actions.

use percolate_engine::{Engine, Snapshot, WriteOptions};

use crate::{
    Error, Key, KvPair, Lock, LockType, MvccReader, MvccTxn, PointGetterBuilder,
    RollbackProtection, ScannerBuilder, TimeStamp, Write, WriteType, is_short_value,
};

/// Writes MVCC records straight into an engine and reads them back.
#[derive(Clone, Debug)]
pub struct MvccFixture<E: Engine> {
    engine: E,
}

/// Shorthand for a timestamp.
pub fn ts(ts: u64) -> TimeStamp {
    TimeStamp::new(ts)
}

/// A read's answer about one key as text, to compare scans with point
/// reads: `key=value` (the key as [`Key`] displays it), or
/// `key=locked@lock_ts` for a key a pending transaction locks. Panics on any
/// other error.
pub fn show_entry(entry: Result<KvPair, Error>) -> String {
    match entry {
        Ok((key, value)) => format!("{key}={}", String::from_utf8_lossy(&value)),
        Err(Error::KeyIsLocked(info)) => format!(
            "{}=locked@{}",
            String::from_utf8_lossy(&info.key),
            info.lock_version
        ),
        Err(e) => panic!("unexpected error {e}"),
    }
}

/// Up to `limit` entries (0: all) of the scan `builder` builds, each as
/// [`show_entry`] shows it.
pub fn scan_shown<S: Snapshot>(builder: ScannerBuilder<S>, limit: usize) -> Vec<String> {
    builder
        .build()
        .unwrap()
        .scan(limit)
        .unwrap()
        .into_iter()
        .map(show_entry)
        .collect()
}

/// A visit ([`Scanner::visit`](crate::Scanner::visit)) of the scan
/// `builder` builds: the pairs handed out (up to `limit`, 0: all) and the
/// locks that stopped it, each as [`show_entry`] shows it.
pub fn visit_shown<S: Snapshot>(
    builder: ScannerBuilder<S>,
    limit: usize,
) -> (Vec<String>, Vec<String>) {
    let mut pairs = Vec::new();
    let locks = builder
        .build()
        .unwrap()
        .visit(limit, |key, value| {
            pairs.push(show_entry(Ok((
                Key::from_encoded(key.to_vec()),
                value.to_vec(),
            ))));
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    (
        pairs,
        locks.into_iter().map(|e| show_entry(Err(e))).collect(),
    )
}

impl<E: Engine> MvccFixture<E> {
    /// A fixture over `engine`.
    pub fn new(engine: E) -> Self {
        MvccFixture { engine }
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    fn write(&self, txn: MvccTxn) {
        self.engine
            .write(&txn.into_write_batch(), WriteOptions::default())
            .unwrap();
    }

    /// Puts `lock` on `key` as it is (any type, any fields), and the long
    /// value of a Put lock without a short value.
    pub fn put_lock(&self, key: &[u8], lock: Lock, long_value: Option<Vec<u8>>) {
        let key = Key::from_raw(key);
        let mut txn = MvccTxn::new(lock.ts);
        if let Some(value) = long_value {
            txn.put_value(key.clone(), lock.ts, value);
        }
        txn.put_lock(key, &lock);
        self.write(txn);
    }

    /// The lock a prewrite of `lock_type` by `start_ts` with `primary`
    /// leaves, with `value` inlined when short.
    pub fn prewrite_lock(
        lock_type: LockType,
        primary: &[u8],
        start_ts: u64,
        value: Option<&[u8]>,
    ) -> (Lock, Option<Vec<u8>>) {
        let mut lock = Lock::new(lock_type, primary.to_vec(), ts(start_ts), 0);
        let long_value = match value {
            Some(v) if is_short_value(v) => {
                lock.short_value = Some(v.to_vec());
                None
            }
            Some(v) => Some(v.to_vec()),
            None => None,
        };
        (lock, long_value)
    }

    /// The records of a prewritten Put of `key = value`.
    pub fn prewrite_put(&self, key: &[u8], value: &[u8], primary: &[u8], start_ts: u64) {
        let (lock, long) = Self::prewrite_lock(LockType::Put, primary, start_ts, Some(value));
        self.put_lock(key, lock, long);
    }

    /// The records of a prewritten Delete of `key`.
    pub fn prewrite_delete(&self, key: &[u8], primary: &[u8], start_ts: u64) {
        let (lock, _) = Self::prewrite_lock(LockType::Delete, primary, start_ts, None);
        self.put_lock(key, lock, None);
    }

    /// The records of a prewritten lock-only mutation of `key`.
    pub fn prewrite_lock_only(&self, key: &[u8], primary: &[u8], start_ts: u64) {
        let (lock, _) = Self::prewrite_lock(LockType::Lock, primary, start_ts, None);
        self.put_lock(key, lock, None);
    }

    /// Turns the lock of `start_ts` on `key` into a commit record at
    /// `commit_ts`. Panics if the lock is not there.
    pub fn commit(&self, key: &[u8], start_ts: u64, commit_ts: u64) {
        let encoded = Key::from_raw(key);
        let lock = self.load_lock(key).expect("commit needs the lock");
        assert_eq!(lock.ts, ts(start_ts), "lock belongs to another txn");
        let write_type = WriteType::from_lock_type(lock.lock_type).expect("a committable lock");
        let write = Write::new(write_type, lock.ts, lock.short_value);
        let mut txn = MvccTxn::new(ts(start_ts));
        txn.put_write(encoded.clone(), ts(commit_ts), &write);
        txn.unlock_key(encoded);
        self.write(txn);
    }

    /// Prewrites and commits `key = value` in one go.
    pub fn put_committed(&self, key: &[u8], value: &[u8], start_ts: u64, commit_ts: u64) {
        self.prewrite_put(key, value, key, start_ts);
        self.commit(key, start_ts, commit_ts);
    }

    /// Prewrites and commits a Delete of `key`.
    pub fn delete_committed(&self, key: &[u8], start_ts: u64, commit_ts: u64) {
        self.prewrite_delete(key, key, start_ts);
        self.commit(key, start_ts, commit_ts);
    }

    /// Prewrites and commits a lock-only mutation of `key`.
    pub fn lock_committed(&self, key: &[u8], start_ts: u64, commit_ts: u64) {
        self.prewrite_lock_only(key, key, start_ts);
        self.commit(key, start_ts, commit_ts);
    }

    /// Removes the lock of `start_ts` on `key` (if it is there) with its long
    /// value, and writes a Rollback record at `start_ts`.
    pub fn rollback(&self, key: &[u8], start_ts: u64, protection: RollbackProtection) {
        let encoded = Key::from_raw(key);
        let mut txn = MvccTxn::new(ts(start_ts));
        if let Some(lock) = self.load_lock(key).filter(|l| l.ts == ts(start_ts)) {
            if lock.lock_type == LockType::Put && lock.short_value.is_none() {
                txn.delete_value(encoded.clone(), lock.ts);
            }
            txn.unlock_key(encoded.clone());
        }
        txn.put_write(
            encoded,
            ts(start_ts),
            &Write::new_rollback(ts(start_ts), protection),
        );
        self.write(txn);
    }

    /// Writes `write` at `key@commit_ts` as it is.
    pub fn put_write(&self, key: &[u8], commit_ts: u64, write: &Write) {
        let mut txn = MvccTxn::new(write.start_ts);
        txn.put_write(Key::from_raw(key), ts(commit_ts), write);
        self.write(txn);
    }

    /// The lock on `key`, if any.
    pub fn load_lock(&self, key: &[u8]) -> Option<Lock> {
        MvccReader::new(self.engine.snapshot())
            .load_lock(&Key::from_raw(key))
            .unwrap()
    }

    /// A point read at `read_ts` (SI, no bypass or access locks).
    pub fn get(&self, key: &[u8], read_ts: TimeStamp) -> Result<Option<Vec<u8>>, Error> {
        PointGetterBuilder::new(self.engine.snapshot(), read_ts)
            .build()
            .get(&Key::from_raw(key))
    }

    /// Asserts that a read at `read_ts` returns `expected`.
    #[track_caller]
    pub fn must_get(&self, key: &[u8], read_ts: u64, expected: &[u8]) {
        assert_eq!(
            self.get(key, ts(read_ts)).unwrap().as_deref(),
            Some(expected)
        );
    }

    /// Asserts that a read at `read_ts` finds no value.
    #[track_caller]
    pub fn must_get_none(&self, key: &[u8], read_ts: u64) {
        assert_eq!(self.get(key, ts(read_ts)).unwrap(), None);
    }

    /// Asserts that a read at `read_ts` is blocked by the lock of
    /// `lock_ts`.
    #[track_caller]
    pub fn must_get_locked(&self, key: &[u8], read_ts: TimeStamp, lock_ts: u64) {
        match self.get(key, read_ts) {
            Err(Error::KeyIsLocked(info)) => {
                assert_eq!(info.key, key);
                assert_eq!(info.lock_version, ts(lock_ts));
            }
            other => panic!("expected KeyIsLocked by {lock_ts}, got {other:?}"),
        }
    }

    /// A scanner builder over a fresh snapshot at `read_ts`.
    pub fn scanner(&self, read_ts: TimeStamp) -> ScannerBuilder<E::Snap> {
        ScannerBuilder::new(self.engine.snapshot(), read_ts)
    }
}
