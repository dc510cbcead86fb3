//! The forward scanner.
//!
//! Invariant between chunks: the write cursor rests on the first (newest)
//! record of the next user key to visit, or is invalid.

use percolate_engine::{Cf, EngineIterator, Snapshot, TS_SUFFIX_LEN};

use super::{Committed, SEEK_BOUND, ScannerCore, Span};
use crate::codec::encode_u64_desc;
use crate::reader::mvcc_reader::parse_version;
use crate::reader::rc_check_ts_conflict;
use crate::{Error, Key, Result, TimeStamp, WriteRef, WriteType};

/// Scans ascending keys. Built by [`ScannerBuilder`](super::ScannerBuilder).
pub struct ForwardScanner<S: Snapshot> {
    pub(super) core: ScannerCore<S>,
}

impl<S: Snapshot> ForwardScanner<S> {
    pub(super) fn new(core: ScannerCore<S>) -> Self {
        ForwardScanner { core }
    }

    /// See [`Scanner::next`](super::Scanner::next).
    pub fn next(&mut self) -> Result<Option<(Key, Vec<u8>)>> {
        self.core.next_entry()
    }
}

/// What the newest visible record of a key says.
enum Visible {
    /// Not decided yet (Lock/Rollback records so far).
    Unknown,
    /// A Put: its short value (if inlined, in the arena) and start_ts.
    Put(Option<Span>, TimeStamp),
    /// A Delete, or a record fenced off by GC.
    Nothing,
}

impl<S: Snapshot> ScannerCore<S> {
    fn step_write(&mut self) -> Result<bool> {
        self.statistics.write.next += 1;
        Ok(self.write.next()?)
    }

    fn seek_write(&mut self, key: Span, ts: TimeStamp) -> Result<bool> {
        self.statistics.write.seek += 1;
        let mut target = Vec::with_capacity(key.len() + 8);
        target.extend_from_slice(&self.arena[key]);
        encode_u64_desc(&mut target, ts.into_inner());
        Ok(self.write.seek(&target)?)
    }

    /// What the write CF says of the user key at `key` in the arena, whose
    /// first record is under the write cursor; leaves the cursor on the
    /// next user key. `first_ts` is the commit_ts of that first record,
    /// already read. An inlined value goes to the arena.
    pub(super) fn read_key(&mut self, key: Span, first_ts: TimeStamp) -> Result<Committed> {
        let ts = self.config.ts;
        let mut visible = Visible::Unknown;
        let mut steps = 0;
        let mut known_ts = Some(first_ts);
        while self.write.valid()? {
            let cursor = &self.write;
            let version = match known_ts.take() {
                Some(commit_ts) => WriteRef::parse(cursor.value())
                    .map(|write| Some((commit_ts, write)))
                    .map_err(|e| Error::corruption(Cf::Write, cursor.key(), e))?,
                None => parse_version(&self.arena[key.clone()], cursor.key(), cursor.value())?,
            };
            let Some((commit_ts, write)) = version else {
                break;
            };
            if commit_ts > ts {
                if self.checks_newer_writes() {
                    let user = Key::from_encoded(self.arena[key.clone()].to_vec());
                    let conflict = rc_check_ts_conflict(&user, ts, commit_ts);
                    self.skip_rest_of(key)?;
                    return Err(conflict);
                }
                if steps >= SEEK_BOUND {
                    // Many versions above the read ts: jump over them.
                    self.seek_write(key.clone(), ts)?;
                    steps = 0;
                    continue;
                }
            } else if !write.check_gc_fence_as_latest_version(ts) {
                visible = Visible::Nothing;
            } else {
                visible = match write.write_type {
                    WriteType::Put => {
                        let value = match write.short_value {
                            Some(_) if self.config.key_only => Some(0..0),
                            Some(value) => Some(Self::stash(&mut self.arena, value)),
                            None => None,
                        };
                        Visible::Put(value, write.start_ts)
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
        Ok(match visible {
            Visible::Put(_, _) if self.config.key_only => Committed::Value(0..0),
            Visible::Put(Some(value), _) => Committed::Value(value),
            Visible::Put(None, start_ts) => Committed::Long(start_ts),
            Visible::Unknown | Visible::Nothing => Committed::Nothing,
        })
    }

    /// Moves the write cursor past every remaining record of the user key
    /// at `key` in the arena.
    fn skip_rest_of(&mut self, key: Span) -> Result<()> {
        let mut steps = 0;
        while self.on_key(key.clone())? {
            if steps >= SEEK_BOUND {
                // `key@0` is the last position a version of `key` can take.
                self.seek_write(key.clone(), TimeStamp::zero())?;
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

    /// Whether the write cursor rests on a record of the user key at `key`
    /// in the arena.
    fn on_key(&mut self, key: Span) -> Result<bool> {
        let cursor = &self.write;
        if !cursor.valid()? {
            return Ok(false);
        }
        // A stored key is the encoded user key and an 8-byte ts: no need
        // to split it (one too short to hold a ts is reported as corrupt
        // where the next key is read).
        let (stored, user) = (cursor.key(), &self.arena[key]);
        Ok(stored.len() == user.len() + TS_SUFFIX_LEN && stored.starts_with(user))
    }
}
