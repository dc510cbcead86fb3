//! PessimisticRollback: a pessimistic transaction gives back the locks a
//! statement took, without ending the transaction.
//!
//! Only pessimistic locks of the transaction are removed, and only those
//! taken at or below the given `for_update_ts` (a newer statement's locks
//! stay). Nothing is written in their place: a pessimistic lock never had
//! a value, and the transaction may lock the key again.

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, MvccReader, MvccTxn, TimeStamp};

use super::{ReleasedLock, unlock};
use crate::Result;

/// Removes the transaction's pessimistic lock on `key` if its
/// for_update_ts is at or below `for_update_ts`; any other lock (another
/// transaction's, or this one's already prewritten) is left alone.
pub fn pessimistic_rollback<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    key: Key,
    for_update_ts: TimeStamp,
) -> Result<Option<ReleasedLock>> {
    match reader.load_lock(&key)? {
        Some(lock)
            if lock.is_pessimistic_lock()
                && lock.ts == txn.start_ts()
                && lock.for_update_ts <= for_update_ts =>
        {
            Ok(Some(unlock(txn, key, TimeStamp::zero())))
        }
        _ => Ok(None),
    }
}
