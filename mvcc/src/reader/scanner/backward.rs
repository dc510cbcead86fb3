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
        while let Some(position) = self.core.next_position()? {
            let key = position.key;
            let value = match position.lock {
                Err(e) => Err(e),
                Ok(Some(lock)) => self.core.value_from_lock(&key, *lock),
                Ok(None) if position.write_ts.is_some() => self.core.read_key_at_ts(&key),
                Ok(None) => Ok(None),
            };
            if position.write_ts.is_some() {
                self.skip_before(&key)?;
            }
            if let Some(value) = value? {
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
        self.core.cursors.write.seek_to_last()?;
        if let Some(lock) = &mut self.core.cursors.lock {
            self.core.statistics.lock.seek += 1;
            lock.seek_to_last()?;
        }
        Ok(())
    }

    /// Moves the write cursor to the last record before every version of
    /// `key`: the encoded key alone sorts before `key@ts` for every ts.
    fn skip_before(&mut self, key: &Key) -> Result<()> {
        self.core.write_head = None;
        self.core.statistics.write.seek += 1;
        self.core.cursors.write.seek_for_prev(key.as_encoded())?;
        Ok(())
    }
}
