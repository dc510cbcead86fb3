//! `MvccReader`: the read primitives transaction actions are built from.

use std::ops::ControlFlow;

use percolate_engine::{Cf, EngineIterator, IterOptions, SeekMode, Snapshot};

use super::Statistics;
use crate::codec::encode_u64_desc;
use crate::{Error, Key, Lock, Result, TimeStamp, Write, WriteRef, WriteType};

/// What the write CF says about the transaction `start_ts` on one key.
///
/// Exhaustive on purpose: these are the only answers the format allows, and
/// every action must handle each of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnCommitRecord {
    /// No record of the transaction. `overlapped_write` is another
    /// transaction's commit record whose commit_ts equals `start_ts`: a
    /// rollback of `start_ts` must mark it instead of overwriting it.
    None {
        /// The commit record sitting at `key@start_ts`, if any.
        overlapped_write: Option<OverlappedWrite>,
    },
    /// The transaction's own record: a commit (Put, Delete, Lock) at
    /// `commit_ts`, or a Rollback at `commit_ts == start_ts`.
    SingleRecord {
        /// Where the record sits.
        commit_ts: TimeStamp,
        /// The record.
        write: Write,
    },
    /// Another transaction's commit record at `start_ts` already carries the
    /// rollback of this one (`has_overlapped_rollback`).
    OverlappedRollback {
        /// The ts of that record (equal to `start_ts`).
        commit_ts: TimeStamp,
    },
}

impl TxnCommitRecord {
    /// The commit_ts if the transaction committed on this key.
    pub fn committed_ts(&self) -> Option<TimeStamp> {
        match self {
            TxnCommitRecord::SingleRecord { commit_ts, write }
                if write.write_type != WriteType::Rollback =>
            {
                Some(*commit_ts)
            }
            _ => None,
        }
    }

    /// Whether the transaction was rolled back on this key.
    pub fn is_rolled_back(&self) -> bool {
        match self {
            TxnCommitRecord::SingleRecord { write, .. } => write.write_type == WriteType::Rollback,
            TxnCommitRecord::OverlappedRollback { .. } => true,
            TxnCommitRecord::None { .. } => false,
        }
    }
}

/// Another transaction's commit record found at `key@start_ts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverlappedWrite {
    /// The record.
    pub write: Write,
    /// The commit_ts of the next newer Put or Delete of the key (zero if
    /// there is none): the GC fence to set when the record is rewritten.
    pub gc_fence: TimeStamp,
}

/// Reads MVCC records of one snapshot for transaction actions.
///
/// The reader keeps a write-CF cursor in prefix mode between calls, so a
/// sequence of lookups on one key costs seeks, never a re-open.
pub struct MvccReader<S: Snapshot> {
    snapshot: S,
    write_cursor: Option<S::Iter>,
    fill_cache: bool,
    statistics: Statistics,
    /// Scratch buffer for `encoded key + ts` seek targets.
    seek_buf: Vec<u8>,
}

impl<S: Snapshot> MvccReader<S> {
    /// A reader over `snapshot`.
    pub fn new(snapshot: S) -> Self {
        MvccReader {
            snapshot,
            write_cursor: None,
            fill_cache: true,
            statistics: Statistics::default(),
            seek_buf: Vec::new(),
        }
    }

    /// Whether blocks read enter the block cache. Defaults to true.
    #[must_use]
    pub fn fill_cache(mut self, fill_cache: bool) -> Self {
        self.fill_cache = fill_cache;
        self
    }

    /// The snapshot read.
    pub fn snapshot(&self) -> &S {
        &self.snapshot
    }

    /// Engine operations made so far.
    pub fn statistics(&self) -> &Statistics {
        &self.statistics
    }

    /// The lock on `key`, if any.
    pub fn load_lock(&mut self, key: &Key) -> Result<Option<Lock>> {
        self.statistics.lock.get += 1;
        match self.snapshot.get(Cf::Lock, key.as_encoded())? {
            Some(bytes) => Lock::parse(&bytes)
                .map(Some)
                .map_err(|e| Error::corruption(Cf::Lock, key.as_encoded(), e)),
            None => Ok(None),
        }
    }

    /// The value a Put record stands for: its short value, or the long value
    /// in the default CF at `key@write.start_ts`.
    pub fn load_data(&mut self, key: &Key, write: Write) -> Result<Vec<u8>> {
        debug_assert_eq!(write.write_type, WriteType::Put, "only a Put has data");
        match write.short_value {
            Some(value) => Ok(value),
            None => self.load_long_value(key, write.start_ts),
        }
    }

    /// The long value written by `start_ts` at `key@start_ts`.
    pub(crate) fn load_long_value(&mut self, key: &Key, start_ts: TimeStamp) -> Result<Vec<u8>> {
        self.statistics.data.get += 1;
        let data_key = key.clone().append_ts(start_ts);
        self.snapshot
            .get(Cf::Default, data_key.as_encoded())?
            .ok_or_else(|| Error::DefaultNotFound {
                key: key.clone(),
                start_ts,
            })
    }

    /// The newest record of `key` with commit_ts `<= ts`, of any type, and
    /// its commit_ts.
    pub fn seek_write(&mut self, key: &Key, ts: TimeStamp) -> Result<Option<(TimeStamp, Write)>> {
        self.walk_versions(key, ts, |commit_ts, write| {
            Ok(ControlFlow::Break((commit_ts, write.to_owned())))
        })
    }

    /// The newest Put visible at `ts`, skipping Lock and Rollback records;
    /// `None` if the newest Put/Delete is a Delete or there is none. With a
    /// `gc_fence_limit`, a record fenced at or below it counts as gone.
    pub fn get_write(
        &mut self,
        key: &Key,
        ts: TimeStamp,
        gc_fence_limit: Option<TimeStamp>,
    ) -> Result<Option<Write>> {
        Ok(self
            .get_write_with_commit_ts(key, ts, gc_fence_limit)?
            .map(|(write, _)| write))
    }

    /// [`get_write`](Self::get_write), with the commit_ts of the Put.
    pub fn get_write_with_commit_ts(
        &mut self,
        key: &Key,
        ts: TimeStamp,
        gc_fence_limit: Option<TimeStamp>,
    ) -> Result<Option<(Write, TimeStamp)>> {
        let found = self.walk_versions(key, ts, |commit_ts, write| {
            if let Some(limit) = gc_fence_limit {
                if !write.check_gc_fence_as_latest_version(limit) {
                    return Ok(ControlFlow::Break(None));
                }
            }
            Ok(match write.write_type {
                WriteType::Put => ControlFlow::Break(Some((write.to_owned(), commit_ts))),
                WriteType::Delete => ControlFlow::Break(None),
                WriteType::Lock | WriteType::Rollback => ControlFlow::Continue(()),
            })
        })?;
        Ok(found.flatten())
    }

    /// Looks for the record the transaction `start_ts` left on `key`:
    /// walks down from the newest version to `start_ts`.
    pub fn get_txn_commit_record(
        &mut self,
        key: &Key,
        start_ts: TimeStamp,
    ) -> Result<TxnCommitRecord> {
        let mut gc_fence = TimeStamp::zero();
        let found = self.walk_versions(key, TimeStamp::max(), |commit_ts, write| {
            if write.start_ts == start_ts {
                let write = write.to_owned();
                return Ok(ControlFlow::Break(TxnCommitRecord::SingleRecord {
                    commit_ts,
                    write,
                }));
            }
            if commit_ts == start_ts {
                return Ok(ControlFlow::Break(if write.has_overlapped_rollback {
                    TxnCommitRecord::OverlappedRollback { commit_ts }
                } else {
                    let write = write.to_owned();
                    let overlapped_write = Some(OverlappedWrite { write, gc_fence });
                    TxnCommitRecord::None { overlapped_write }
                }));
            }
            if commit_ts < start_ts {
                return Ok(ControlFlow::Break(TxnCommitRecord::None {
                    overlapped_write: None,
                }));
            }
            if matches!(write.write_type, WriteType::Put | WriteType::Delete) {
                gc_fence = commit_ts;
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(found.unwrap_or(TxnCommitRecord::None {
            overlapped_write: None,
        }))
    }

    /// The newest Put or Delete of `key` committed above `ts`, as
    /// `(commit_ts, start_ts)`: data a reader at `ts` cannot see.
    pub fn newer_data_write(
        &mut self,
        key: &Key,
        ts: TimeStamp,
    ) -> Result<Option<(TimeStamp, TimeStamp)>> {
        self.walk_versions(key, TimeStamp::max(), |commit_ts, write| {
            Ok(if commit_ts <= ts {
                ControlFlow::Break(None)
            } else if matches!(write.write_type, WriteType::Put | WriteType::Delete) {
                ControlFlow::Break(Some((commit_ts, write.start_ts)))
            } else {
                ControlFlow::Continue(())
            })
        })
        .map(Option::flatten)
    }

    /// Every record of `key` with commit_ts `<= ts`, newest first.
    pub fn scan_writes(&mut self, key: &Key, ts: TimeStamp) -> Result<Vec<(TimeStamp, Write)>> {
        let mut all = Vec::new();
        self.walk_versions(key, ts, |commit_ts, write| {
            all.push((commit_ts, write.to_owned()));
            Ok(ControlFlow::<()>::Continue(()))
        })?;
        Ok(all)
    }

    /// Every long value of `key` in the default CF, newest start_ts first.
    pub fn scan_values(&mut self, key: &Key) -> Result<Vec<(TimeStamp, Vec<u8>)>> {
        let options = IterOptions::new()
            .seek_mode(SeekMode::Prefix)
            .fill_cache(self.fill_cache);
        let mut cursor = self.snapshot.iter(Cf::Default, options)?;
        let mut values = Vec::new();
        let mut valid = cursor.seek(key.clone().append_ts(TimeStamp::max()).as_encoded())?;
        while valid {
            let (user, start_ts) = split_stored_key(Cf::Default, cursor.key())?;
            if user != key.as_encoded().as_slice() {
                break;
            }
            values.push((start_ts, cursor.value().to_vec()));
            valid = cursor.next()?;
        }
        Ok(values)
    }

    /// Locks in `[start, end)` (unbounded where `None`) that pass `filter`,
    /// at most `limit` of them (0 = no limit). The flag tells whether the
    /// scan stopped at the limit with more locks possibly left.
    pub fn scan_locks(
        &mut self,
        start: Option<&Key>,
        end: Option<&Key>,
        mut filter: impl FnMut(&Key, &Lock) -> bool,
        limit: usize,
    ) -> Result<(Vec<(Key, Lock)>, bool)> {
        let mut options = IterOptions::new().fill_cache(self.fill_cache);
        options.lower_bound = start.map(|k| k.as_encoded().clone());
        options.upper_bound = end.map(|k| k.as_encoded().clone());
        let mut cursor = self.snapshot.iter(Cf::Lock, options)?;
        self.statistics.lock.seek += 1;
        let mut valid = cursor.seek_to_first()?;
        let mut locks = Vec::new();
        while valid {
            let key = Key::from_encoded_slice(cursor.key());
            let lock = Lock::parse(cursor.value())
                .map_err(|e| Error::corruption(Cf::Lock, cursor.key(), e))?;
            if filter(&key, &lock) {
                if limit > 0 && locks.len() == limit {
                    return Ok((locks, true));
                }
                locks.push((key, lock));
            }
            self.statistics.lock.next += 1;
            valid = cursor.next()?;
        }
        Ok((locks, false))
    }

    /// Visits the records of `key` from the newest with commit_ts `<=
    /// from_ts` downwards, until `visit` breaks (its value is returned) or
    /// the key has no more records (`None`).
    fn walk_versions<R>(
        &mut self,
        key: &Key,
        from_ts: TimeStamp,
        mut visit: impl FnMut(TimeStamp, WriteRef<'_>) -> Result<ControlFlow<R>>,
    ) -> Result<Option<R>> {
        let cursor = match &mut self.write_cursor {
            Some(cursor) => cursor,
            slot @ None => {
                let options = IterOptions::new()
                    .seek_mode(SeekMode::Prefix)
                    .fill_cache(self.fill_cache);
                slot.insert(self.snapshot.iter(Cf::Write, options)?)
            }
        };
        self.seek_buf.clear();
        self.seek_buf.extend_from_slice(key.as_encoded());
        encode_u64_desc(&mut self.seek_buf, from_ts.into_inner());
        let stats = &mut self.statistics.write;
        stats.seek += 1;
        let mut valid = cursor.seek(&self.seek_buf)?;
        while valid {
            let Some((commit_ts, write)) = parse_version(key, cursor.key(), cursor.value())? else {
                break;
            };
            if let ControlFlow::Break(found) = visit(commit_ts, write)? {
                return Ok(Some(found));
            }
            stats.next += 1;
            valid = cursor.next()?;
        }
        Ok(None)
    }
}

/// Splits a stored `encoded key + ts` of `cf`, reporting a key too short to
/// hold a ts as corruption.
pub(crate) fn split_stored_key(cf: Cf, stored: &[u8]) -> Result<(&[u8], TimeStamp)> {
    Key::split_on_ts_for(stored).map_err(|e| Error::corruption(cf, stored, e))
}

/// The record at a write-CF cursor position if it belongs to `key`.
pub(crate) fn parse_version<'a>(
    key: &Key,
    stored_key: &[u8],
    value: &'a [u8],
) -> Result<Option<(TimeStamp, WriteRef<'a>)>> {
    let (user, commit_ts) = split_stored_key(Cf::Write, stored_key)?;
    if user != key.as_encoded().as_slice() {
        return Ok(None);
    }
    let write = WriteRef::parse(value).map_err(|e| Error::corruption(Cf::Write, stored_key, e))?;
    Ok(Some((commit_ts, write)))
}
