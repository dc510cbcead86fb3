//! The raw (non-transactional) key-value commands.
//!
//! Raw data lives in its own column family ([`Cf::Raw`]), keyed by the raw
//! key as given, so it can never collide with transactional data. Raw
//! writes are latched like any write command, which makes
//! [`RawCompareAndSwap`] atomic with respect to every other raw write of
//! its key. There are no timestamps, locks or versions: a raw read sees the
//! latest write.

use percolate_engine::{Cf, Engine, EngineIterator, IterOptions, Snapshot, WriteBatch};
use percolate_mvcc::Key;

use super::{Footprint, ReadCommand, ReadContext, WriteCommand, WriteContext, WriteResult};
use crate::{Error, Result};

/// The latch key of a raw key.
fn latch_key(raw: &[u8]) -> Key {
    Key::from_encoded_slice(raw)
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidRequest {
            reason: "a raw key must not be empty",
            key: None,
        });
    }
    Ok(())
}

/// Writes key-value pairs atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawPut {
    /// The pairs; keys must not be empty. Their sizes are checked against
    /// every [`Limit`](crate::Limit).
    pub pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl WriteCommand for RawPut {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::RawPut;

    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        self.pairs.iter().map(|(k, _)| latch_key(k)).collect()
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::RawKeys(self.pairs.iter().map(|(k, _)| k.as_slice()).collect())
    }

    fn process<S: Snapshot>(self, _ctx: WriteContext<'_, S>) -> Result<WriteResult<()>> {
        crate::errors::check_write_size(self.pairs.iter().map(|(k, v)| (k.len(), v.len())))?;
        let mut batch = WriteBatch::new();
        for (key, value) in self.pairs {
            check_key(&key)?;
            batch.put(Cf::Raw, key, value);
        }
        Ok(WriteResult::from_batch(batch, ()))
    }
}

/// Deletes keys atomically (a missing key is not an error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDelete {
    /// The keys.
    pub keys: Vec<Vec<u8>>,
}

impl WriteCommand for RawDelete {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::RawDelete;

    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        self.keys.iter().map(|k| latch_key(k)).collect()
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::RawKeys(self.keys.iter().map(Vec::as_slice).collect())
    }

    fn process<S: Snapshot>(self, _ctx: WriteContext<'_, S>) -> Result<WriteResult<()>> {
        let mut batch = WriteBatch::new();
        for key in self.keys {
            check_key(&key)?;
            batch.delete(Cf::Raw, key);
        }
        Ok(WriteResult::from_batch(batch, ()))
    }
}

/// Deletes every raw key in `[start, end)`. It latches no key (a range has
/// no key list), so it is atomic as one engine write but not ordered
/// against concurrent raw writes inside the range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDeleteRange {
    /// Inclusive start.
    pub start: Vec<u8>,
    /// Exclusive end; must be above `start`.
    pub end: Vec<u8>,
}

impl WriteCommand for RawDeleteRange {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::RawDeleteRange;

    type Output = ();

    fn latch_keys(&self) -> Vec<Key> {
        Vec::new()
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::RawRange(Some(&self.start), Some(&self.end))
    }

    fn process<S: Snapshot>(self, _ctx: WriteContext<'_, S>) -> Result<WriteResult<()>> {
        if self.start >= self.end {
            return Err(Error::InvalidRequest {
                reason: "raw_delete_range needs start < end",
                key: None,
            });
        }
        let mut batch = WriteBatch::new();
        batch.delete_range(Cf::Raw, self.start, self.end);
        Ok(WriteResult::from_batch(batch, ()))
    }
}

/// Sets `key` to `value` (or deletes it, when `value` is `None`) only if
/// its current value is `expected` (`None`: the key must be absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCompareAndSwap {
    /// The key.
    pub key: Vec<u8>,
    /// The value the key must have now.
    pub expected: Option<Vec<u8>>,
    /// The new value; `None` deletes.
    pub value: Option<Vec<u8>>,
}

impl WriteCommand for RawCompareAndSwap {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::RawCompareAndSwap;

    /// Whether the swap happened, and the value found.
    type Output = (bool, Option<Vec<u8>>);

    fn latch_keys(&self) -> Vec<Key> {
        vec![latch_key(&self.key)]
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::RawKeys(vec![&self.key])
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<Self::Output>> {
        check_key(&self.key)?;
        let value_len = self.value.as_ref().map_or(0, Vec::len);
        crate::errors::check_write_size([(self.key.len(), value_len)])?;
        let current = ctx.snapshot.get(Cf::Raw, &self.key)?;
        let mut batch = WriteBatch::new();
        let swapped = current == self.expected;
        if swapped {
            match self.value {
                Some(value) => batch.put(Cf::Raw, self.key, value),
                None => batch.delete(Cf::Raw, self.key),
            }
        }
        Ok(WriteResult::from_batch(batch, (swapped, current)))
    }
}

/// The latest value of a raw key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawGet {
    /// The key.
    pub key: Vec<u8>,
}

impl ReadCommand for RawGet {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::RawGet;

    type Output = Option<Vec<u8>>;

    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output> {
        Ok(ctx.engine.snapshot().get(Cf::Raw, &self.key)?)
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::RawKeys(vec![&self.key])
    }
}

/// The latest values of several raw keys, from one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawBatchGet {
    /// The keys.
    pub keys: Vec<Vec<u8>>,
}

impl ReadCommand for RawBatchGet {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::RawBatchGet;

    /// A pair per key that exists, in the order asked.
    type Output = Vec<(Vec<u8>, Vec<u8>)>;

    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output> {
        let snapshot = ctx.engine.snapshot();
        let mut pairs = Vec::with_capacity(self.keys.len());
        for key in self.keys {
            if let Some(value) = snapshot.get(Cf::Raw, &key)? {
                pairs.push((key, value));
            }
        }
        Ok(pairs)
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::RawKeys(self.keys.iter().map(Vec::as_slice).collect())
    }
}

/// The raw pairs of a range, in key order (or reverse order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawScan {
    /// Inclusive start (`None`: from the first key).
    pub start: Option<Vec<u8>>,
    /// Exclusive end (`None`: to the last key).
    pub end: Option<Vec<u8>>,
    /// Most pairs returned (0 = no limit).
    pub limit: usize,
    /// Return keys with empty values.
    pub key_only: bool,
    /// From the end of the range down.
    pub reverse: bool,
}

impl ReadCommand for RawScan {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::RawScan;

    type Output = Vec<(Vec<u8>, Vec<u8>)>;

    fn process<E: Engine>(self, ctx: ReadContext<'_, E>) -> Result<Self::Output> {
        let mut options = IterOptions::new();
        options.lower_bound = self.start;
        options.upper_bound = self.end;
        let mut cursor = ctx.engine.snapshot().iter(Cf::Raw, options)?;
        let mut valid = if self.reverse {
            cursor.seek_to_last()?
        } else {
            cursor.seek_to_first()?
        };
        let mut pairs = Vec::new();
        while valid && (self.limit == 0 || pairs.len() < self.limit) {
            let value = if self.key_only {
                Vec::new()
            } else {
                cursor.value().to_vec()
            };
            pairs.push((cursor.key().to_vec(), value));
            valid = if self.reverse {
                cursor.prev()?
            } else {
                cursor.next()?
            };
        }
        Ok(pairs)
    }

    fn footprint(&self) -> Footprint<'_> {
        Footprint::RawRange(self.start.as_deref(), self.end.as_deref())
    }
}
