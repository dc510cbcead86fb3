//! The backward scanner.
//!
//! Invariant between chunks: the write cursor rests on the last (oldest)
//! record of the next user key to visit, or is invalid. Records of one key
//! sort newest first, so walking backwards meets them oldest first; instead
//! of stepping through them, the scanner reads each key with a point lookup
//! at the read ts and then seeks to just before the key.

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
        self.core.next_entry()
    }
}

impl<S: Snapshot> ScannerCore<S> {
    /// Reads the next chunk going backward: the committed values of up to a
    /// chunk's worth of user keys, then the locks from the last of these
    /// keys (from the scan's start when the write cursor ran out) up to
    /// where the last chunk ended, merged into the buffer.
    pub(super) fn fill_backward(&mut self) -> Result<()> {
        if !self.started {
            self.started = true;
            self.statistics.write.seek += 1;
            self.write.seek_to_last()?;
        }
        let wanted = self.chunk_keys();
        let mut chunk = Vec::with_capacity(wanted);
        let mut failure = None;
        while chunk.len() < wanted {
            let user = match self.write_head() {
                Ok(Some((user, _))) => user,
                Ok(None) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            let key = Key::from_encoded(user);
            let committed = self.committed_at_ts(&key);
            // The encoded key alone sorts before `key@ts` for every ts.
            self.write_head = None;
            self.statistics.write.seek += 1;
            if let Err(e) = self.write.seek_for_prev(key.as_encoded()) {
                failure = Some(e.into());
                chunk.push((key, committed));
                break;
            }
            match committed {
                Err(e) if !Self::is_per_key(&e) => {
                    failure = Some(e);
                    break;
                }
                committed => chunk.push((key, committed)),
            }
        }
        // The locks of the keys read: from the last one, or from the start
        // of the range when nothing is left to read.
        let exhausted = failure.is_none() && chunk.len() < wanted;
        let lower = match chunk.last() {
            Some((last, _)) if !exhausted => Some(last.as_encoded().clone()),
            _ if exhausted => None,
            _ => self.resume.clone(),
        };
        let locks = if exhausted || !chunk.is_empty() {
            self.locks_in(lower.clone(), self.resume.clone())?
        } else {
            Vec::new()
        };
        self.resume = lower;
        self.merge(chunk, locks)?;
        if let Some(e) = failure {
            self.buffer.push_back(Err(e));
            self.done = true;
        } else if exhausted {
            self.done = true;
        }
        Ok(())
    }
}
