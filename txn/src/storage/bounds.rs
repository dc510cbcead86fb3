//! The key range a region serves, and the check that a command stays in it
//! (TiKV's `KeyNotInRegion`).
//!
//! A region is the unit a distributed deployment would replicate and move:
//! a command sent to the wrong region must fail rather than read or write
//! data that belongs to another one, even while every region of this
//! process shares one engine.

use percolate_mvcc::Key;

use crate::commands::Footprint;
use crate::{Error, Result};

/// Raw keys `[start, end)`; `end` `None` is unbounded. The default is the
/// whole key space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// The first key (inclusive); empty: from the first key.
    pub start: Vec<u8>,
    /// The end (exclusive); `None`: to the last key.
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// Whether the raw key `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }
}

/// A [`KeyRange`] with its bounds also in encoded form, for transactional
/// keys (memcomparable encoding keeps the order of raw keys).
///
/// Invariant: `start` and `end` encode `range.start` and `range.end`.
#[derive(Clone, Debug)]
pub(crate) struct Bounds {
    range: KeyRange,
    start: Key,
    end: Option<Key>,
}

impl Bounds {
    pub(crate) fn new(range: KeyRange) -> Self {
        Bounds {
            start: Key::from_raw(&range.start),
            end: range.end.as_deref().map(Key::from_raw),
            range,
        }
    }

    fn error(&self, key: &[u8]) -> Error {
        Error::KeyNotInRegion {
            key: key.to_vec(),
            start: self.range.start.clone(),
            end: self.range.end.clone(),
        }
    }

    pub(crate) fn check_key(&self, key: &Key) -> Result<()> {
        let inside = *key >= self.start && self.end.as_ref().is_none_or(|end| key < end);
        if inside {
            return Ok(());
        }
        Err(self.error(&key.to_raw().unwrap_or_else(|_| key.as_encoded().clone())))
    }

    /// `[lower, upper)` of encoded keys must lie in the region; an unbounded
    /// side only where the region is unbounded too.
    fn check_range(&self, lower: Option<&Key>, upper: Option<&Key>) -> Result<()> {
        match lower {
            Some(lower) => self.check_key(lower)?,
            None if !self.range.start.is_empty() => return Err(self.error(b"")),
            None => {}
        }
        match (upper, &self.end) {
            (Some(upper), Some(end)) if upper > end => Err(self.error(
                &upper
                    .to_raw()
                    .unwrap_or_else(|_| upper.as_encoded().clone()),
            )),
            (None, Some(_)) => Err(self.error(b"")),
            _ => Ok(()),
        }
    }

    fn check_raw_range(&self, lower: Option<&[u8]>, upper: Option<&[u8]>) -> Result<()> {
        match lower {
            Some(lower) if !self.range.contains(lower) => return Err(self.error(lower)),
            None if !self.range.start.is_empty() => return Err(self.error(b"")),
            _ => {}
        }
        match (upper, self.range.end.as_deref()) {
            (Some(upper), Some(end)) if upper > end => Err(self.error(upper)),
            (None, Some(_)) => Err(self.error(b"")),
            _ => Ok(()),
        }
    }

    /// Checks what a command touches; `latch_keys` stands for
    /// [`Footprint::LatchKeys`].
    pub(crate) fn check(&self, footprint: Footprint<'_>, latch_keys: &[Key]) -> Result<()> {
        match footprint {
            Footprint::LatchKeys => latch_keys.iter().try_for_each(|k| self.check_key(k)),
            Footprint::Keys(keys) => keys.into_iter().try_for_each(|k| self.check_key(k)),
            Footprint::Range(lower, upper) => self.check_range(lower, upper),
            Footprint::RawKeys(keys) => keys.into_iter().try_for_each(|k| {
                if self.range.contains(k) {
                    Ok(())
                } else {
                    Err(self.error(k))
                }
            }),
            Footprint::RawRange(lower, upper) => self.check_raw_range(lower, upper),
            Footprint::Unchecked => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(start: &[u8], end: Option<&[u8]>) -> Bounds {
        Bounds::new(KeyRange {
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
        })
    }

    #[test]
    fn keys_and_ranges_inside_pass_and_outside_fail() {
        let b = bounds(b"g", Some(b"p"));
        let k = |raw: &[u8]| Key::from_raw(raw);
        let (g, h, o, p, a) = (k(b"g"), k(b"h"), k(b"o"), k(b"p"), k(b"a"));
        assert!(b.check(Footprint::Keys(vec![&g, &h, &o]), &[]).is_ok());
        assert!(b.check(Footprint::Keys(vec![&h, &p]), &[]).is_err());
        assert!(
            b.check(Footprint::LatchKeys, std::slice::from_ref(&a))
                .is_err()
        );
        assert!(b.check(Footprint::Range(Some(&g), Some(&p)), &[]).is_ok());
        assert!(b.check(Footprint::Range(Some(&a), Some(&p)), &[]).is_err());
        assert!(b.check(Footprint::Range(Some(&h), None), &[]).is_err());
        assert!(b.check(Footprint::Range(None, Some(&o)), &[]).is_err());
        assert!(b.check(Footprint::RawKeys(vec![b"g", b"oz"]), &[]).is_ok());
        assert!(b.check(Footprint::RawKeys(vec![b"p"]), &[]).is_err());
        assert!(
            b.check(Footprint::RawRange(Some(b"h"), Some(b"p")), &[])
                .is_ok()
        );
        assert!(
            b.check(Footprint::RawRange(Some(b"h"), Some(b"q")), &[])
                .is_err()
        );
        assert!(b.check(Footprint::Unchecked, &[a]).is_ok());
        match b.check(Footprint::RawKeys(vec![b"z"]), &[]) {
            Err(Error::KeyNotInRegion { key, start, end }) => {
                assert_eq!(
                    (key, start, end),
                    (b"z".to_vec(), b"g".to_vec(), Some(b"p".to_vec()))
                );
            }
            other => panic!("expected KeyNotInRegion, got {other:?}"),
        }
    }

    #[test]
    fn the_first_and_last_regions_are_open_on_their_outer_side() {
        let first = bounds(b"", Some(b"g"));
        let last = bounds(b"g", None);
        let (a, g, z) = (
            Key::from_raw(b"a"),
            Key::from_raw(b"g"),
            Key::from_raw(b"z"),
        );
        assert!(first.check(Footprint::Range(None, Some(&g)), &[]).is_ok());
        assert!(first.check(Footprint::Range(None, None), &[]).is_err());
        assert!(last.check(Footprint::Range(Some(&g), None), &[]).is_ok());
        assert!(last.check(Footprint::Keys(vec![&z]), &[]).is_ok());
        assert!(last.check(Footprint::Keys(vec![&a]), &[]).is_err());
        assert!(
            first
                .check(Footprint::RawRange(None, Some(b"g")), &[])
                .is_ok()
        );
    }
}
