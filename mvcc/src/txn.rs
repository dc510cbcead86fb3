//! `MvccTxn`: the modifications one transaction step wants to make.
//!
//! Actions read through an [`MvccReader`](crate::MvccReader) and record what
//! they would change here; nothing in this crate writes to the engine. The
//! caller (the scheduler) turns the buffer into one [`WriteBatch`] and
//! writes it atomically, so a step either happens completely or not at all.

use percolate_engine::{Cf, Modify, WriteBatch};

use crate::{Key, Lock, TimeStamp, Write};

/// A buffer of modifications made on behalf of the transaction `start_ts`.
#[derive(Clone, Debug)]
pub struct MvccTxn {
    start_ts: TimeStamp,
    modifies: Vec<Modify>,
    write_size: usize,
}

impl MvccTxn {
    /// An empty buffer for the transaction `start_ts`.
    pub fn new(start_ts: TimeStamp) -> Self {
        MvccTxn {
            start_ts,
            modifies: Vec::new(),
            write_size: 0,
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
    pub fn put_write(&mut self, key: Key, ts: TimeStamp, write: &Write) {
        self.push(Modify::Put {
            cf: Cf::Write,
            key: key.append_ts(ts).into_encoded(),
            value: write.to_bytes(),
        });
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
