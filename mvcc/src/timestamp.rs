//! [`TimeStamp`]: the hybrid physical/logical timestamps handed out by the
//! timestamp oracle, as in TiKV's `txn_types::TimeStamp`.
//!
//! A timestamp packs milliseconds since the Unix epoch in its high 46 bits
//! and a logical counter in its low [`TSO_PHYSICAL_SHIFT_BITS`] (18) bits:
//!
//! ```text
//!  63                          18 17               0
//! +------------------------------+------------------+
//! |        physical (ms)         |     logical      |
//! +------------------------------+------------------+
//! ```
//!
//! On disk a timestamp appears in three forms: a varint (`start_ts` inside
//! Lock and Write records), 8 big-endian bytes (the optional fixed-width
//! fields), and 8 big-endian bytes of `!ts` (the suffix of write-CF and
//! default-CF keys, so newer versions sort first).

use std::fmt;

/// Number of low bits of a [`TimeStamp`] that hold the logical counter.
pub const TSO_PHYSICAL_SHIFT_BITS: u64 = 18;

/// Mask of the logical counter bits.
const LOGICAL_MASK: u64 = (1 << TSO_PHYSICAL_SHIFT_BITS) - 1;

/// A transaction timestamp (`start_ts`, `commit_ts`, `for_update_ts`, …).
///
/// Two values have special meaning: [`TimeStamp::zero`] is "unset" in the
/// optional fields of Lock and Write records (such fields are not written
/// at all when zero), and [`TimeStamp::max`] means "read the latest".
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct TimeStamp(u64);

impl TimeStamp {
    /// Wraps a raw timestamp.
    pub const fn new(ts: u64) -> Self {
        TimeStamp(ts)
    }

    /// The zero timestamp: "unset" wherever a timestamp is optional.
    pub const fn zero() -> Self {
        TimeStamp(0)
    }

    /// The largest timestamp (`u64::MAX`): a read at `max` sees the latest
    /// committed version.
    pub const fn max() -> Self {
        TimeStamp(u64::MAX)
    }

    /// Builds a timestamp from milliseconds and a logical counter:
    /// `(physical << 18) + logical`.
    ///
    /// The caller keeps `logical < 2^18` and `physical < 2^46` (a TSO always
    /// does); outside that range the parts overlap or wrap, which is checked
    /// in debug builds only.
    ///
    /// ```
    /// # use percolate_mvcc::TimeStamp;
    /// let ts = TimeStamp::compose(1568700549751, 108);
    /// assert_eq!(ts.into_inner(), 411225436913926252);
    /// assert_eq!((ts.physical(), ts.logical()), (1568700549751, 108));
    /// ```
    pub const fn compose(physical: u64, logical: u64) -> Self {
        debug_assert!(logical <= LOGICAL_MASK, "logical part exceeds 18 bits");
        debug_assert!(
            physical >> (64 - TSO_PHYSICAL_SHIFT_BITS) == 0,
            "physical part exceeds 46 bits"
        );
        TimeStamp((physical << TSO_PHYSICAL_SHIFT_BITS).wrapping_add(logical))
    }

    /// The physical part: milliseconds since the Unix epoch.
    pub const fn physical(self) -> u64 {
        self.0 >> TSO_PHYSICAL_SHIFT_BITS
    }

    /// The logical part: the low 18 bits.
    pub const fn logical(self) -> u64 {
        self.0 & LOGICAL_MASK
    }

    /// The raw `u64`.
    pub const fn into_inner(self) -> u64 {
        self.0
    }

    /// Whether this is [`TimeStamp::zero`].
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Whether this is [`TimeStamp::max`].
    pub const fn is_max(self) -> bool {
        self.0 == u64::MAX
    }

    /// The timestamp right after this one.
    ///
    /// # Panics
    ///
    /// On [`TimeStamp::max`]: no timestamp follows it, and asking for one is
    /// a logic error in the caller.
    #[must_use]
    pub fn next(self) -> Self {
        match self.0.checked_add(1) {
            Some(ts) => TimeStamp(ts),
            None => panic!("invariant violated: TimeStamp::next called on TimeStamp::max"),
        }
    }

    /// The timestamp right before this one.
    ///
    /// # Panics
    ///
    /// On [`TimeStamp::zero`]: no timestamp precedes it, and asking for one
    /// is a logic error in the caller.
    #[must_use]
    pub fn prev(self) -> Self {
        match self.0.checked_sub(1) {
            Some(ts) => TimeStamp(ts),
            None => panic!("invariant violated: TimeStamp::prev called on TimeStamp::zero"),
        }
    }
}

impl From<u64> for TimeStamp {
    fn from(ts: u64) -> Self {
        TimeStamp(ts)
    }
}

impl From<TimeStamp> for u64 {
    fn from(ts: TimeStamp) -> Self {
        ts.0
    }
}

impl fmt::Display for TimeStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for TimeStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TiKV's `test_ts` literal (docs/FORMAT.md, "Timestamps").
    #[test]
    fn compose_and_split() {
        let ts = TimeStamp::compose(1568700549751, 108);
        assert_eq!(ts, TimeStamp::new(411225436913926252));
        assert_eq!(ts.physical(), 1568700549751);
        assert_eq!(ts.logical(), 108);
        let top = TimeStamp::compose((1 << 46) - 1, (1 << 18) - 1);
        assert!(top.is_max());
    }

    #[test]
    fn zero_max_and_conversions() {
        assert!(TimeStamp::zero().is_zero());
        assert_eq!(TimeStamp::default(), TimeStamp::zero());
        assert!(TimeStamp::max().is_max());
        assert_eq!(u64::from(TimeStamp::from(42)), 42);
        assert_eq!(TimeStamp::new(7).into_inner(), 7);
        assert!(TimeStamp::new(1) < TimeStamp::new(2));
        assert_eq!(
            format!("{} {:?}", TimeStamp::new(5), TimeStamp::new(6)),
            "5 6"
        );
    }

    #[test]
    fn next_and_prev() {
        assert_eq!(TimeStamp::new(5).next(), TimeStamp::new(6));
        assert_eq!(TimeStamp::new(5).prev(), TimeStamp::new(4));
        assert_eq!(TimeStamp::zero().next().prev(), TimeStamp::zero());
    }

    #[test]
    #[should_panic(expected = "TimeStamp::next")]
    fn next_overflow_panics() {
        let _ = TimeStamp::max().next();
    }

    #[test]
    #[should_panic(expected = "TimeStamp::prev")]
    fn prev_underflow_panics() {
        let _ = TimeStamp::zero().prev();
    }
}
