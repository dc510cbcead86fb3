//! The backward scanner.
//!
//! Invariant between chunks: the write cursor rests on the last (oldest)
//! record of the next user key to visit, or is invalid. Records of one key
//! sort newest first, so walking backwards meets them oldest first; instead
//! of stepping through them, the scanner reads each key with a point lookup
//! at the read ts and then seeks to just before the key.

use percolate_engine::{EngineIterator, Snapshot};

use super::{Committed, ScannerCore, Span};
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
    /// Visits the user key under the write cursor going backward: its key
    /// (in the arena) and what the write CF says of it at the read ts, by
    /// point lookup, the cursor left on the previous key. `None` before the
    /// first key; `Err` when the cursor failed.
    pub(super) fn step_backward(&mut self) -> Result<Option<(Span, Result<Committed>)>> {
        let Some((user, _)) = Self::write_head(&self.write)? else {
            return Ok(None);
        };
        let key = Self::stash(&mut self.arena, user);
        let user = self.take_scratch(key.clone());
        let committed = self.committed_at_ts(&user);
        // The encoded key alone sorts before `key@ts` for every ts.
        self.statistics.write.seek += 1;
        let moved = self.write.seek_for_prev(user.as_encoded());
        self.scratch = user;
        moved?;
        Ok(Some((key, committed)))
    }
}
