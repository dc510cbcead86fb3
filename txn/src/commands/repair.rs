//! Repair: remove the records of a range that do not decode.

use percolate_engine::{Cf, EngineIterator, IterOptions, Snapshot, WriteBatch};
use percolate_mvcc::codec::DecodeError;
use percolate_mvcc::{Key, Lock, Write};

use super::{Footprint, WriteCommand, WriteContext, WriteResult};
use crate::Result;

/// Deletes the records of `[start, end)` (encoded keys; `None`:
/// unbounded) that do not decode.
///
/// A record whose key or value is not in TiKV's format (a disk fault, a
/// program that wrote the column families by hand) fails every read, scan
/// and GC that reaches it with [`Corruption`](percolate_mvcc::Error::Corruption),
/// and nothing in the protocol can resolve it: a lock that does not decode
/// names no transaction to check. `Repair` is the way out. It walks the
/// lock, write and default column families over a range and deletes exactly
/// the records that do not decode, returning each one, key and value as
/// stored, so that nothing is dropped without the caller holding a copy.
///
/// A record that decodes is never touched, whatever it says: repairing is
/// not resolving. A Put record whose long value is missing from the
/// default CF (`DefaultNotFound`) decodes, and is left as it is. Which
/// records fail:
///
/// * lock CF: a key that is not a memcomparable-encoded key, or a value
///   that is not a Lock record;
/// * write CF: a key without a timestamp suffix after an encoded key, or a
///   value that is not a Write record;
/// * default CF: a key without a timestamp suffix after an encoded key
///   (values there are the user's bytes, any bytes);
/// * notify CF: a key that is not an observer notification
///   (its value is ignored).
///
/// No latch is taken: every command that reaches a damaged record fails on
/// it, so none can be using one, and no command writes one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Repair {
    /// Inclusive start.
    pub start: Option<Key>,
    /// Exclusive end.
    pub end: Option<Key>,
}

/// One record [`Repair`] removed, as it was stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedRecord {
    /// The column family it was in.
    pub cf: Cf,
    /// Its key, as stored.
    pub key: Vec<u8>,
    /// Its value, as stored.
    pub value: Vec<u8>,
    /// Why it does not decode.
    pub reason: DecodeError,
}

impl WriteCommand for Repair {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Repair;

    /// The records removed, lock CF first, then write, default and
    /// notify, each in key order.
    type Output = Vec<DamagedRecord>;

    fn latch_keys(&self) -> Vec<Key> {
        Vec::new()
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::Range(self.start.as_ref(), self.end.as_ref())
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        let mut damaged = Vec::new();
        for cf in [Cf::Lock, Cf::Write, Cf::Default, Cf::Notify] {
            let mut options = IterOptions::new().fill_cache(false);
            options.lower_bound = self.start.as_ref().map(|k| k.as_encoded().clone());
            options.upper_bound = self.end.as_ref().map(|k| k.as_encoded().clone());
            let mut cursor = ctx.snapshot.iter(cf, options)?;
            let mut valid = cursor.seek_to_first()?;
            while valid {
                if let Err(reason) = check(cf, cursor.key(), cursor.value()) {
                    damaged.push(DamagedRecord {
                        cf,
                        key: cursor.key().to_vec(),
                        value: cursor.value().to_vec(),
                        reason,
                    });
                }
                valid = cursor.next()?;
            }
        }
        let mut batch = WriteBatch::new();
        for record in &damaged {
            batch.delete(record.cf, record.key.clone());
        }
        Ok(WriteResult::from_batch(batch, damaged))
    }
}

/// Whether a record of `cf` decodes.
fn check(cf: Cf, key: &[u8], value: &[u8]) -> std::result::Result<(), DecodeError> {
    match cf {
        Cf::Lock => {
            Key::from_encoded_slice(key).to_raw()?;
            Lock::parse(value)?;
        }
        Cf::Write => {
            let (user_key, _) = Key::split_on_ts_for(key)?;
            Key::from_encoded_slice(user_key).to_raw()?;
            Write::parse(value)?;
        }
        Cf::Default => {
            let (user_key, _) = Key::split_on_ts_for(key)?;
            Key::from_encoded_slice(user_key).to_raw()?;
        }
        Cf::Notify => {
            crate::notify::Notification::decode(key)?;
        }
        _ => {}
    }
    Ok(())
}
