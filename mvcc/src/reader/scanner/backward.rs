//! The backward scanner.
//!
//! Invariant between calls: the write cursor rests on the last (oldest)
//! record of the next user key to visit, or is invalid; the lock cursor rests
//! on the next lock to visit, or is invalid. Records of one key sort newest
//! first, so walking backwards meets them oldest first; instead of stepping
//! through them, the scanner reads each key with a point lookup at the read
//! ts and then seeks to just before the key.

use percolate_engine::{EngineIterator, Snapshot};

use super::ScannerCore;
use crate::{Key, Result};

/// Scans descending keys. Built by [`ScannerBuilder`](super::ScannerBuilder).
pub struct BackwardScanner<S: Snapshot> {
    pub(super) core: ScannerCore<S>,
}

impl<S: Snapshot> BackwardScanner<S> {
    pub(super) fn new(core: ScannerCore<S>) -> Self {
        BackwardScanner { core }
    }

    /// See [`Scanner::next`](super::Scanner::next).
    pub fn next(&mut self) -> Result<Option<(Key, Vec<u8>)>> {
        self.start()?;
        loop {
            let heads = self.core.heads()?;
            let current = match (heads.write.as_ref(), heads.lock.as_ref()) {
                (None, None) => return Ok(None),
                (Some(w), Some(l)) => w.max(l).clone(),
                (Some(k), None) | (None, Some(k)) => k.clone(),
            };
            let has_write = heads.write.as_ref() == Some(&current);
            let has_lock = heads.lock.as_ref() == Some(&current);
            let key = Key::from_encoded(current);
            let mut access_lock = None;
            if has_lock {
                let checked = self.core.check_lock(&key);
                self.step_lock()?;
                match checked {
                    Ok(lock) => access_lock = lock,
                    Err(e) => {
                        if has_write {
                            self.skip_before(&key)?;
                        }
                        return Err(e);
                    }
                }
            }
            let value = match access_lock {
                Some(lock) => self.core.value_from_lock(&key, lock),
                None if has_write => self.core.read_key_at_ts(&key),
                None => Ok(None),
            };
            if has_write {
                self.skip_before(&key)?;
            }
            if let Some(value) = value? {
                return Ok(Some((key, value)));
            }
        }
    }

    fn start(&mut self) -> Result<()> {
        if self.core.started {
            return Ok(());
        }
        self.core.started = true;
        self.core.statistics.write.seek += 1;
        self.core.cursors.write.seek_to_last()?;
        if let Some(lock) = &mut self.core.cursors.lock {
            self.core.statistics.lock.seek += 1;
            lock.seek_to_last()?;
        }
        Ok(())
    }

    fn step_lock(&mut self) -> Result<()> {
        if let Some(lock) = &mut self.core.cursors.lock {
            self.core.statistics.lock.next += 1;
            lock.prev()?;
        }
        Ok(())
    }

    /// Moves the write cursor to the last record before every version of
    /// `key`: the encoded key alone sorts before `key@ts` for every ts.
    fn skip_before(&mut self, key: &Key) -> Result<()> {
        self.core.statistics.write.seek += 1;
        self.core.cursors.write.seek_for_prev(key.as_encoded())?;
        Ok(())
    }
}
