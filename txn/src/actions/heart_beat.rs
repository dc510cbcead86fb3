//! TxnHeartBeat: keep a long transaction's primary lock alive.

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, MvccReader, MvccTxn};

use super::clamp_ttl;
use crate::Result;

/// Raises the TTL of the acting transaction's lock on `primary` to
/// `advise_ttl` (never lowers it; at most [`MAX_LOCK_TTL_MS`](super::MAX_LOCK_TTL_MS)) and returns
/// the TTL now in force.
/// `TxnNotFound` if the lock is not there.
pub fn txn_heart_beat<S: Snapshot>(
    txn: &mut MvccTxn,
    reader: &mut MvccReader<S>,
    primary: Key,
    advise_ttl: u64,
) -> Result<u64> {
    let start_ts = txn.start_ts();
    let advise_ttl = clamp_ttl(advise_ttl);
    match reader.load_lock(&primary)? {
        Some(mut lock) if lock.ts == start_ts => {
            if lock.ttl < advise_ttl {
                lock.ttl = advise_ttl;
                txn.put_lock(primary, &lock);
            }
            Ok(lock.ttl)
        }
        _ => Err(percolate_mvcc::Error::TxnNotFound {
            start_ts,
            key: primary,
        }
        .into()),
    }
}
