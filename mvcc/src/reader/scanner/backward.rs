//! The backward scanner.
//!
//! Invariant between chunks: the write cursor rests on the last (oldest)
//! record of the next user key to visit, or is invalid. Records of one key
//! sort newest first, so walking backwards meets them oldest first; instead
//! of stepping through them, the scanner reads each key with a point lookup
//! at the read ts and then seeks to just before the key.

use percolate_engine::{EngineIterator, Snapshot};

use super::{ChunkKey, Committed, Entry, ScannerCore};
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
        self.arena.clear();
        let wanted = self.chunk_keys();
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.clear();
        let mut failure = None;
        while chunk.len() < wanted {
            let key = match Self::write_head(&self.write) {
                Ok(Some((user, _))) => Self::stash(&mut self.arena, user),
                Ok(None) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            let user = self.take_scratch(key.clone());
            let committed = self.committed_at_ts(&user);
            // The encoded key alone sorts before `key@ts` for every ts.
            self.statistics.write.seek += 1;
            let moved = self.write.seek_for_prev(user.as_encoded());
            self.scratch = user;
            if let Err(e) = moved {
                failure = Some(e.into());
                break;
            }
            match committed {
                Err(e) if !Self::is_per_key(&e) => {
                    failure = Some(e);
                    break;
                }
                Err(e) => chunk.push(ChunkKey {
                    key,
                    committed: Committed::Failed(Box::new(e)),
                }),
                Ok(committed) => chunk.push(ChunkKey { key, committed }),
            }
        }
        // The locks of the keys read: from the last one, or from the start
        // of the range when nothing is left to read.
        let exhausted = failure.is_none() && chunk.len() < wanted;
        let lower = match chunk.last() {
            Some(last) if !exhausted => Some(self.arena[last.key.clone()].to_vec()),
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
            self.buffer.push_back(Entry::Failed(Box::new(e)));
            self.done = true;
        } else if exhausted {
            self.done = true;
        }
        Ok(())
    }
}
