//! The deterministic simulator's seam (`percolate-sim`), in builds with
//! the `sim` feature only: the client's real lock resolver, called one round at a time, so
//! that a simulated client which meets a lock resolves it exactly as a
//! [`Client`] does, without the backoff loop (which sleeps on the wall
//! clock) around it.

use percolate_engine::Engine;
use percolate_mvcc::{LockInfo, TimeStamp};

use super::Client;
use crate::Result;

/// What one round of lock resolution left: see
/// [`Client::resolve_locks_once`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolveRound {
    /// The locks of transactions still alive (and not pushed): still in
    /// the way.
    pub alive: Vec<LockInfo>,
    /// Transactions pushed past the caller's ts: a read at that ts may
    /// bypass their locks.
    pub pushed: Vec<TimeStamp>,
}

impl<E: Engine> Client<E> {
    /// One round of the client's lock resolution for a caller at
    /// `caller_ts` (zero: a prewrite or a lock request, which never
    /// pushes): asks each lock's primary what became of its transaction,
    /// rolls the lock forward or back where that is decided, pushes a live
    /// 2PC transaction past `caller_ts`. The same code every read,
    /// prewrite and GC of the client runs when it meets locks.
    pub fn resolve_locks_once(
        &self,
        locks: &[LockInfo],
        caller_ts: TimeStamp,
    ) -> Result<ResolveRound> {
        let mut pushed = Vec::new();
        let alive = self.inner.resolve_locks(locks, caller_ts, &mut pushed)?;
        Ok(ResolveRound {
            alive: alive.into_iter().cloned().collect(),
            pushed,
        })
    }
}
