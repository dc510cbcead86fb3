//! The forward scanner.
//!
//! Invariant between calls: the write cursor rests on the first (newest)
//! record of the next user key to visit, or is invalid; the lock cursor rests
//! on the next lock to visit, or is invalid.

use percolate_engine::{Cf, EngineIterator, Snapshot};

use super::{SEEK_BOUND, ScannerCore};
use crate::codec::encode_u64_desc;
use crate::reader::mvcc_reader::{parse_version, split_stored_key};
use crate::{Error, Key, Result, TimeStamp, WriteRef, WriteType};

/// Scans ascending keys. Built by [`ScannerBuilder`](super::ScannerBuilder).
pub struct ForwardScanner<S: Snapshot> {
    pub(super) core: ScannerCore<S>,
}

/// What the newest visible record of a key says.
enum Visible {
    /// Not decided yet (Lock/Rollback records so far).
    Unknown,
    /// A Put: its short value (if inlined) and start_ts.
    Put(Option<Vec<u8>>, TimeStamp),
    /// A Delete, or a record fenced off by GC.
    Nothing,
}

impl<S: Snapshot> ForwardScanner<S> {
    pub(super) fn new(core: ScannerCore<S>) -> Self {
        ForwardScanner { core }
    }

    /// See [`Scanner::next`](super::Scanner::next).
    pub fn next(&mut self) -> Result<Option<(Key, Vec<u8>)>> {
        self.start()?;
        while let Some(position) = self.core.next_position()? {
            let key = position.key;
            let value = match position.lock {
                Err(e) => {
                    if position.write_ts.is_some() {
                        self.skip_rest_of(&key)?;
                    }
                    return Err(e);
                }
                Ok(Some(lock)) => {
                    if position.write_ts.is_some() {
                        self.skip_rest_of(&key)?;
                    }
                    self.core.value_from_lock(&key, *lock)?
                }
                Ok(None) => match position.write_ts {
                    Some(first_ts) => self.read_key(&key, first_ts)?,
                    None => None,
                },
            };
            if let Some(value) = value {
                return Ok(Some((key, value)));
            }
        }
        Ok(None)
    }

    fn start(&mut self) -> Result<()> {
        if self.core.started {
            return Ok(());
        }
        self.core.started = true;
        self.core.statistics.write.seek += 1;
        self.core.cursors.write.seek_to_first()?;
        if let Some(lock) = &mut self.core.cursors.lock {
            self.core.statistics.lock.seek += 1;
            lock.seek_to_first()?;
        }
        Ok(())
    }

    fn step_write(&mut self) -> Result<bool> {
        self.core.write_head = None;
        self.core.statistics.write.next += 1;
        Ok(self.core.cursors.write.next()?)
    }

    fn seek_write(&mut self, key: &Key, ts: TimeStamp) -> Result<bool> {
        self.core.write_head = None;
        self.core.statistics.write.seek += 1;
        let mut target = Vec::with_capacity(key.len() + 8);
        target.extend_from_slice(key.as_encoded());
        encode_u64_desc(&mut target, ts.into_inner());
        Ok(self.core.cursors.write.seek(&target)?)
    }

    /// Reads the visible value of `key`, whose first record is under the
    /// write cursor, and leaves the cursor on the next user key.
    /// `first_ts` is the commit_ts of that first record, already read.
    fn read_key(&mut self, key: &Key, first_ts: TimeStamp) -> Result<Option<Vec<u8>>> {
        let ts = self.core.config.ts;
        let mut visible = Visible::Unknown;
        let mut steps = 0;
        let mut known_ts = Some(first_ts);
        while self.core.cursors.write.valid()? {
            let cursor = &self.core.cursors.write;
            let version = match known_ts.take() {
                Some(commit_ts) => WriteRef::parse(cursor.value())
                    .map(|write| Some((commit_ts, write)))
                    .map_err(|e| Error::corruption(Cf::Write, cursor.key(), e))?,
                None => parse_version(key, cursor.key(), cursor.value())?,
            };
            let Some((commit_ts, write)) = version else {
                break;
            };
            if commit_ts > ts {
                if let Err(e) = self.core.rc_check_ts_conflict(key, commit_ts, &write) {
                    self.skip_rest_of(key)?;
                    return Err(e);
                }
                if steps >= SEEK_BOUND && !self.core.checks_newer_writes() {
                    // Many versions above the read ts: jump over them.
                    self.seek_write(key, ts)?;
                    steps = 0;
                    continue;
                }
            } else if !write.check_gc_fence_as_latest_version(ts) {
                visible = Visible::Nothing;
            } else {
                visible = match write.write_type {
                    WriteType::Put => {
                        Visible::Put(write.short_value.map(<[u8]>::to_vec), write.start_ts)
                    }
                    WriteType::Delete => Visible::Nothing,
                    WriteType::Lock | WriteType::Rollback => Visible::Unknown,
                };
            }
            self.step_write()?;
            steps += 1;
            if !matches!(visible, Visible::Unknown) {
                break;
            }
        }
        self.skip_rest_of(key)?;
        match visible {
            Visible::Put(_, _) if self.core.config.key_only => Ok(Some(Vec::new())),
            Visible::Put(Some(value), _) => Ok(Some(value)),
            Visible::Put(None, start_ts) => {
                self.core.reader.load_long_value(key, start_ts).map(Some)
            }
            Visible::Unknown | Visible::Nothing => Ok(None),
        }
    }

    /// Moves the write cursor past every remaining record of `key`.
    fn skip_rest_of(&mut self, key: &Key) -> Result<()> {
        let mut steps = 0;
        while self.on_key(key)? {
            if steps >= SEEK_BOUND {
                // `key@0` is the last position a version of `key` can take.
                self.seek_write(key, TimeStamp::zero())?;
                if self.on_key(key)? {
                    self.step_write()?;
                }
                break;
            }
            self.step_write()?;
            steps += 1;
        }
        Ok(())
    }

    /// Whether the write cursor rests on a record of `key`. When it rests
    /// on another key, that key is kept as the next position's head.
    fn on_key(&mut self, key: &Key) -> Result<bool> {
        let cursor = &self.core.cursors.write;
        if !cursor.valid()? {
            return Ok(false);
        }
        let (user, commit_ts) = split_stored_key(Cf::Write, cursor.key())?;
        if user == key.as_encoded().as_slice() {
            return Ok(true);
        }
        self.core.write_head = Some((user.to_vec(), commit_ts));
        Ok(false)
    }
}
