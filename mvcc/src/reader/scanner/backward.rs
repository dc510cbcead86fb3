//! The backward scanner.
//!
//! Invariant between chunks: the write cursor rests on the last (oldest)
//! record of the next user key to visit, or is invalid. Records of one key
//! sort newest first, so walking backwards meets them oldest first; instead
//! of stepping through them, the scanner reads each key with a point lookup
//! at the read ts and then seeks to just before the key.

use percolate_engine::{EngineIterator, Snapshot};

use super::{Committed, ScannerCore};
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
    /// What the write CF says of `key` at the read ts, by point lookup;
    /// then moves the write cursor to the last record before every version
    /// of `key` (the outer `Err` when that move failed).
    pub(super) fn read_key_backward(&mut self, key: &Key) -> Result<Result<Committed>> {
        let committed = self.committed_at_ts(key);
        // The encoded key alone sorts before `key@ts` for every ts.
        self.statistics.write.seek += 1;
        self.write.seek_for_prev(key.as_encoded())?;
        Ok(committed)
    }
}
