//! `MvccTxn`: the modifications one transaction step wants to make.
//!
//! Actions read through an [`MvccReader`](crate::MvccReader) and record what
//! they would change here; nothing in this crate writes to the engine. The
//! caller (the scheduler) turns the buffer into one [`WriteBatch`] and
//! writes it atomically, so a step either happens completely or not at all.

use percolate_engine::{Cf, Modify, WriteBatch};

use crate::{Key, Lock, TimeStamp, Write, WriteType};

/// A buffer of modifications made on behalf of the transaction `start_ts`.
#[derive(Clone, Debug)]
pub struct MvccTxn {
    start_ts: TimeStamp,
    modifies: Vec<Modify>,
    write_size: usize,
    /// The data versions committed by [`put_commit`](Self::put_commit).
    committed: Vec<CommittedVersion>,
}

/// A data version (a Put or Delete commit record) that a commit writes:
/// the key's newest once written (see [`MvccTxn::put_commit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedVersion {
    /// The user key.
    pub key: Key,
    /// The commit_ts the record is written at.
    pub commit_ts: TimeStamp,
    /// The record's bytes, as written to the write CF at `key@commit_ts`.
    pub record: Vec<u8>,
}

impl MvccTxn {
    /// An empty buffer for the transaction `start_ts`.
    pub fn new(start_ts: TimeStamp) -> Self {
        MvccTxn {
            start_ts,
            modifies: Vec::new(),
            write_size: 0,
            committed: Vec::new(),
        }
    }

    /// The transaction this buffer belongs to.
    pub fn start_ts(&self) -> TimeStamp {
        self.start_ts
    }

    fn push(&mut self, modify: Modify) {
        self.write_size += modify.size();
        self.modifies.push(modify);
    }

    /// Writes `lock` on `key` (lock CF, `key`).
    ///
    /// # Panics
    ///
    /// If the lock's `short_value` is longer than 255 bytes (see
    /// [`Lock::to_bytes`]).
    pub fn put_lock(&mut self, key: Key, lock: &Lock) {
        self.push(Modify::Put {
            cf: Cf::Lock,
            key: key.into_encoded(),
            value: lock.to_bytes(),
        });
    }

    /// Removes the lock on `key`.
    pub fn unlock_key(&mut self, key: Key) {
        self.push(Modify::Delete {
            cf: Cf::Lock,
            key: key.into_encoded(),
        });
    }

    /// Stores a long value of this transaction (default CF, `key@start_ts`).
    pub fn put_value(&mut self, key: Key, start_ts: TimeStamp, value: Vec<u8>) {
        self.push(Modify::Put {
            cf: Cf::Default,
            key: key.append_ts(start_ts).into_encoded(),
            value,
        });
    }

    /// Removes the long value at `key@start_ts`.
    pub fn delete_value(&mut self, key: Key, start_ts: TimeStamp) {
        self.push(Modify::Delete {
            cf: Cf::Default,
            key: key.append_ts(start_ts).into_encoded(),
        });
    }

    /// Writes a commit or rollback record at `key@ts` (write CF).
    ///
    /// # Panics
    ///
    /// If the record's `short_value` is longer than 255 bytes (see
    /// [`Write::to_bytes`]).
    pub fn put_write(&mut self, key: Key, ts: TimeStamp, write: &Write) {
        self.put_write_bytes(key, ts, write.to_bytes());
    }

    fn put_write_bytes(&mut self, key: Key, ts: TimeStamp, record: Vec<u8>) {
        self.push(Modify::Put {
            cf: Cf::Write,
            key: key.append_ts(ts).into_encoded(),
            value: record,
        });
    }

    /// Writes the commit record of a transaction at `key@commit_ts` (write
    /// CF), as [`put_write`](Self::put_write), and when it is a Put or a
    /// Delete notes it as the key's newest data version (see
    /// [`committed_versions`](Self::committed_versions)). For commits only:
    /// the protocol makes a commit's record newer than every Put or Delete
    /// of the key already written (a commit holds the key's lock, and its
    /// prewrite found no data committed after its start_ts).
    ///
    /// # Panics
    ///
    /// As [`put_write`](Self::put_write) does.
    pub fn put_commit(&mut self, key: Key, commit_ts: TimeStamp, write: &Write) {
        let record = write.to_bytes();
        if matches!(write.write_type, WriteType::Put | WriteType::Delete) {
            self.committed.push(CommittedVersion {
                key: key.clone(),
                commit_ts,
                record: record.clone(),
            });
        }
        self.put_write_bytes(key, commit_ts, record);
    }

    /// The newest data versions (Put or Delete records) this buffer
    /// commits, by key: what a reader of the latest data will find once the
    /// buffer is written.
    pub fn committed_versions(&self) -> &[CommittedVersion] {
        &self.committed
    }

    /// Takes the [`committed_versions`](Self::committed_versions) out.
    pub fn take_committed_versions(&mut self) -> Vec<CommittedVersion> {
        std::mem::take(&mut self.committed)
    }

    /// Removes the record at `key@ts` (write CF).
    pub fn delete_write(&mut self, key: Key, ts: TimeStamp) {
        self.push(Modify::Delete {
            cf: Cf::Write,
            key: key.append_ts(ts).into_encoded(),
        });
    }

    /// The modifications so far, in order.
    pub fn modifies(&self) -> &[Modify] {
        &self.modifies
    }

    /// Takes the modifications out.
    pub fn into_modifies(self) -> Vec<Modify> {
        self.modifies
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.modifies.is_empty()
    }

    /// Bytes of keys and values recorded so far.
    pub fn write_size(&self) -> usize {
        self.write_size
    }

    /// The modifications as one atomic batch.
    pub fn into_write_batch(self) -> WriteBatch {
        WriteBatch::from(self.modifies)
    }
}
