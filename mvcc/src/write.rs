//! [`Write`] / [`WriteRef`]: the value stored in the write CF (one commit or
//! rollback record per version), byte-compatible with TiKV's
//! `txn_types::WriteRef::to_bytes` / `WriteRef::parse`.
//!
//! The write-CF key is `Key::from_raw(user_key).append_ts(commit_ts)`; a
//! rollback record uses its `start_ts` as the key's ts. The value is a fixed
//! header followed by optional tagged fields, written in this order and only
//! when the condition holds:
//!
//! | # | tag | payload | written when | field | added in |
//! |---|---|---|---|---|---|
//! | 1 | — | write type: `P` 0x50, `D` 0x44, `L` 0x4C, `R` 0x52 | always | [`Write::write_type`] | baseline |
//! | 2 | — | varint | always | [`Write::start_ts`] | baseline |
//! | 3 | `v` 0x76 | `len: u8`, `len` bytes | `short_value.is_some()` | [`Write::short_value`] | baseline |
//! | 4 | `R` 0x52 | none (flag) | `has_overlapped_rollback` | [`Write::has_overlapped_rollback`] | baseline |
//! | 5 | `F` 0x46 | u64 BE | `gc_fence.is_some()` (`Some(0)` is 8 zero bytes) | [`Write::gc_fence`] | baseline |
//! | 6 | `l` 0x6C | u64 BE ts, varint versions | `last_change` is not `Unknown` | [`Write::last_change`] | v6.4.0 |
//! | 7 | `S` 0x53 | varint | `txn_source != 0` | [`Write::txn_source`] | v6.5.0 |
//!
//! "Baseline" fields predate v6.4.0, the oldest version this format tracks.
//! Pitfalls when comparing with [`Lock`](crate::Lock): here txn_source is
//! **uppercase** `S` (lowercase `s` in a lock), and `F` is the GC fence with
//! an 8-byte payload (a payload-less flag in a lock). An `R` after the
//! start_ts is the overlapped-rollback flag, not a type.
//!
//! Parsing ([`WriteRef::parse`]) accepts optional fields in any order and
//! **stops silently at the first unknown tag** (forward compatibility).
//! Every malformed input is a [`DecodeError`], including a short value that
//! overruns the input, where TiKV panics.

use crate::codec::{self, DecodeError, DecodeResult, read_u8, read_u64, read_var_u64};
use crate::lock::{LAST_CHANGE_PREFIX, LastChange, LockType, encode_last_change, read_last_change};
use crate::timestamp::TimeStamp;

/// The longest value kept inline (`v` field) in a Lock or Write record.
/// It is the largest length the 1-byte length prefix can hold; longer
/// values go to the default CF at `key.append_ts(start_ts)`.
pub const SHORT_VALUE_MAX_LEN: usize = 255;

const SHORT_VALUE_PREFIX: u8 = b'v';
const OVERLAPPED_ROLLBACK_PREFIX: u8 = b'R';
const GC_FENCE_PREFIX: u8 = b'F';
const TXN_SOURCE_PREFIX: u8 = b'S';

/// The short value of a protected rollback.
const PROTECTED_ROLLBACK_SHORT_VALUE: &[u8] = b"p";

/// Whether `value` is short enough to be stored inline in the lock and
/// write records rather than in the default CF.
pub fn is_short_value(value: &[u8]) -> bool {
    value.len() <= SHORT_VALUE_MAX_LEN
}

/// Appends `tag`, the 1-byte length and `value`.
///
/// # Panics
///
/// If `value` is longer than [`SHORT_VALUE_MAX_LEN`]: the length byte would
/// be truncated and the record silently corrupted. Writers must send such
/// values to the default CF ([`is_short_value`]).
pub(crate) fn encode_short_value(buf: &mut Vec<u8>, tag: u8, value: &[u8]) {
    let Ok(len) = u8::try_from(value.len()) else {
        panic!(
            "invariant violated: short value of {} bytes exceeds SHORT_VALUE_MAX_LEN",
            value.len()
        );
    };
    buf.push(tag);
    buf.push(len);
    buf.extend_from_slice(value);
}

/// Reads the payload of a `v` field: a 1-byte length and that many bytes.
pub(crate) fn read_short_value<'a>(data: &mut &'a [u8]) -> DecodeResult<&'a [u8]> {
    let mut rest = *data;
    let len = usize::from(read_u8(&mut rest, "short value length")?);
    let (value, after) = rest
        .split_at_checked(len)
        .ok_or(DecodeError::ShortValueOverrun {
            len,
            remaining: rest.len(),
        })?;
    *data = after;
    Ok(value)
}

/// The kind of a write record, stored as its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteType {
    /// `P`: a committed put. The value is the short value or lives in the
    /// default CF at `key.append_ts(start_ts)`.
    Put,
    /// `D`: a committed delete.
    Delete,
    /// `L`: a committed read lock; carries no data, readers skip it.
    Lock,
    /// `R`: a rollback of the transaction at `start_ts`; readers skip it.
    Rollback,
}

impl WriteType {
    /// The type's tag byte.
    pub const fn to_u8(self) -> u8 {
        match self {
            WriteType::Put => b'P',
            WriteType::Delete => b'D',
            WriteType::Lock => b'L',
            WriteType::Rollback => b'R',
        }
    }

    /// The type for a tag byte, or `None` if unknown.
    pub const fn from_u8(b: u8) -> Option<Self> {
        match b {
            b'P' => Some(WriteType::Put),
            b'D' => Some(WriteType::Delete),
            b'L' => Some(WriteType::Lock),
            b'R' => Some(WriteType::Rollback),
            _ => None,
        }
    }

    /// What a lock of type `lock_type` commits to. `None` for a bare
    /// pessimistic lock, which cannot be committed.
    pub const fn from_lock_type(lock_type: LockType) -> Option<WriteType> {
        match lock_type {
            LockType::Put => Some(WriteType::Put),
            LockType::Delete => Some(WriteType::Delete),
            LockType::Lock => Some(WriteType::Lock),
            LockType::Pessimistic => None,
        }
    }
}

/// Whether a rollback record must survive being collapsed or overwritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollbackProtection {
    /// Keep it: it guards against a late prewrite of the rolled-back
    /// transaction (typically the primary key). Stored as short value `p`.
    Protected,
    /// It may be collapsed away by later rollbacks.
    Unprotected,
}

/// An owned write-CF record. See [`WriteRef`] for the borrowed form the
/// codec works on.
///
/// Invariants: `short_value` is at most [`SHORT_VALUE_MAX_LEN`] bytes
/// (enforced by a panic when encoding), and `last_change` follows the
/// [`LastChange`] invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The record's type.
    pub write_type: WriteType,
    /// start_ts of the transaction that wrote it (the key carries commit_ts).
    pub start_ts: TimeStamp,
    /// Inline value of a Put (≤ 255 bytes), or `p` on a protected rollback.
    pub short_value: Option<Vec<u8>>,
    /// A rollback with ts equal to this record's commit_ts was folded in
    /// here, since both would have the same key.
    pub has_overlapped_rollback: bool,
    /// `None`: never rewritten. `Some(0)`: rewritten, no newer version
    /// existed. `Some(ts)`: rewritten when the next version was committed
    /// at `ts`; readers at or after `ts` must ignore this record as latest.
    pub gc_fence: Option<TimeStamp>,
    /// Where the key's last Put/Delete is.
    pub last_change: LastChange,
    /// Origin of the transaction (CDC / replication). Zero by default.
    pub txn_source: u64,
}

impl Write {
    /// A record with no overlapped rollback, no GC fence, `Unknown` last
    /// change and txn_source 0.
    pub fn new(write_type: WriteType, start_ts: TimeStamp, short_value: Option<Vec<u8>>) -> Write {
        Write {
            write_type,
            start_ts,
            short_value,
            has_overlapped_rollback: false,
            gc_fence: None,
            last_change: LastChange::Unknown,
            txn_source: 0,
        }
    }

    /// A rollback record of the transaction at `start_ts`.
    ///
    /// ```
    /// # use percolate_mvcc::{RollbackProtection, TimeStamp, Write};
    /// let w = Write::new_rollback(TimeStamp::new(3), RollbackProtection::Protected);
    /// assert_eq!(w.to_bytes(), [b'R', 3, b'v', 1, b'p']);
    /// assert!(w.is_protected());
    /// ```
    pub fn new_rollback(start_ts: TimeStamp, protection: RollbackProtection) -> Write {
        let short_value = match protection {
            RollbackProtection::Protected => Some(PROTECTED_ROLLBACK_SHORT_VALUE.to_vec()),
            RollbackProtection::Unprotected => None,
        };
        Write::new(WriteType::Rollback, start_ts, short_value)
    }

    /// Sets the overlapped-rollback flag and the GC fence.
    #[must_use]
    pub fn set_overlapped_rollback(
        mut self,
        has_overlapped_rollback: bool,
        gc_fence: Option<TimeStamp>,
    ) -> Self {
        self.has_overlapped_rollback = has_overlapped_rollback;
        self.gc_fence = gc_fence;
        self
    }

    /// Sets `last_change`.
    #[must_use]
    pub fn set_last_change(mut self, last_change: LastChange) -> Self {
        self.last_change = last_change;
        self
    }

    /// Sets `txn_source`.
    #[must_use]
    pub fn set_txn_source(mut self, txn_source: u64) -> Self {
        self.txn_source = txn_source;
        self
    }

    /// Whether this is a protected rollback (type `R`, short value `p`).
    pub fn is_protected(&self) -> bool {
        self.as_ref().is_protected()
    }

    /// Borrows the record.
    pub fn as_ref(&self) -> WriteRef<'_> {
        WriteRef {
            write_type: self.write_type,
            start_ts: self.start_ts,
            short_value: self.short_value.as_deref(),
            has_overlapped_rollback: self.has_overlapped_rollback,
            gc_fence: self.gc_fence,
            last_change: self.last_change,
            txn_source: self.txn_source,
        }
    }

    /// Encodes the record; see [`WriteRef::to_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        self.as_ref().to_bytes()
    }

    /// Decodes a write-CF value into an owned record; see [`WriteRef::parse`].
    pub fn parse(b: &[u8]) -> DecodeResult<Write> {
        WriteRef::parse(b).map(|w| w.to_owned())
    }
}

/// A write-CF record borrowing its short value from the input bytes.
/// Field meanings are documented on [`Write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRef<'a> {
    /// See [`Write::write_type`].
    pub write_type: WriteType,
    /// See [`Write::start_ts`].
    pub start_ts: TimeStamp,
    /// See [`Write::short_value`].
    pub short_value: Option<&'a [u8]>,
    /// See [`Write::has_overlapped_rollback`].
    pub has_overlapped_rollback: bool,
    /// See [`Write::gc_fence`].
    pub gc_fence: Option<TimeStamp>,
    /// See [`Write::last_change`].
    pub last_change: LastChange,
    /// See [`Write::txn_source`].
    pub txn_source: u64,
}

impl<'a> WriteRef<'a> {
    /// Decodes a write-CF value without copying the short value.
    ///
    /// An empty input, an unknown type byte or a bad start_ts is an error;
    /// so is a truncated or overrunning optional field. Unknown tags end the
    /// parse silently.
    ///
    /// ```
    /// # use percolate_mvcc::{RollbackProtection, TimeStamp, Write, WriteRef};
    /// let w = WriteRef::parse(&[b'R', 3]).unwrap();
    /// assert_eq!(w.to_owned(), Write::new_rollback(TimeStamp::new(3), RollbackProtection::Unprotected));
    /// ```
    pub fn parse(b: &'a [u8]) -> DecodeResult<WriteRef<'a>> {
        let write_type = Self::parse_type(b)?;
        let mut data = b.get(1..).unwrap_or_default();
        let start_ts = read_var_u64(&mut data, "write start_ts")?;
        let mut write = WriteRef {
            write_type,
            start_ts: start_ts.into(),
            short_value: None,
            has_overlapped_rollback: false,
            gc_fence: None,
            last_change: LastChange::Unknown,
            txn_source: 0,
        };
        while let Some((&tag, rest)) = data.split_first() {
            data = rest;
            if !write.parse_field(tag, &mut data)? {
                break;
            }
        }
        Ok(write)
    }

    /// Reads the payload of the optional field tagged `tag`. Returns
    /// `Ok(false)`, consuming nothing more, if the tag is unknown.
    fn parse_field(&mut self, tag: u8, data: &mut &'a [u8]) -> DecodeResult<bool> {
        match tag {
            SHORT_VALUE_PREFIX => self.short_value = Some(read_short_value(data)?),
            OVERLAPPED_ROLLBACK_PREFIX => self.has_overlapped_rollback = true,
            GC_FENCE_PREFIX => self.gc_fence = Some(read_u64(data, "write gc_fence")?.into()),
            LAST_CHANGE_PREFIX => self.last_change = read_last_change(data)?,
            TXN_SOURCE_PREFIX => self.txn_source = read_var_u64(data, "write txn_source")?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The write type alone, from the first byte.
    pub fn parse_type(b: &[u8]) -> DecodeResult<WriteType> {
        let (&tag, _) = b.split_first().ok_or(DecodeError::Empty {
            what: "write record",
        })?;
        WriteType::from_u8(tag).ok_or(DecodeError::BadWriteType(tag))
    }

    /// Encodes the record as stored in the write CF (see the module table).
    ///
    /// # Panics
    ///
    /// If `short_value` is longer than 255 bytes (see
    /// [`SHORT_VALUE_MAX_LEN`]).
    ///
    /// ```
    /// # use percolate_mvcc::{TimeStamp, Write, WriteType};
    /// let w = Write::new(WriteType::Put, TimeStamp::new(456), Some(b"v".to_vec()));
    /// assert_eq!(w.as_ref().to_bytes(), [b'P', 0xc8, 0x03, b'v', 1, b'v']);
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let value_len = self.short_value.map_or(0, |v| v.len() + 2);
        let mut buf = Vec::with_capacity(40 + value_len);
        buf.push(self.write_type.to_u8());
        codec::encode_var_u64(&mut buf, self.start_ts.into_inner());
        if let Some(value) = self.short_value {
            encode_short_value(&mut buf, SHORT_VALUE_PREFIX, value);
        }
        if self.has_overlapped_rollback {
            buf.push(OVERLAPPED_ROLLBACK_PREFIX);
        }
        if let Some(fence) = self.gc_fence {
            buf.push(GC_FENCE_PREFIX);
            codec::encode_u64(&mut buf, fence.into_inner());
        }
        encode_last_change(&mut buf, self.last_change);
        if self.txn_source != 0 {
            buf.push(TXN_SOURCE_PREFIX);
            codec::encode_var_u64(&mut buf, self.txn_source);
        }
        buf
    }

    /// Copies into an owned [`Write`].
    pub fn to_owned(&self) -> Write {
        Write {
            write_type: self.write_type,
            start_ts: self.start_ts,
            short_value: self.short_value.map(<[u8]>::to_vec),
            has_overlapped_rollback: self.has_overlapped_rollback,
            gc_fence: self.gc_fence,
            last_change: self.last_change,
            txn_source: self.txn_source,
        }
    }

    /// Whether this is a protected rollback (type `R`, short value `p`).
    pub fn is_protected(&self) -> bool {
        self.write_type == WriteType::Rollback
            && self.short_value == Some(PROTECTED_ROLLBACK_SHORT_VALUE)
    }

    /// Whether this record may serve as the latest version for a read at
    /// `read_ts`: `false` when its GC fence is a non-zero ts at or below
    /// `read_ts`, meaning a newer version existed at that point and has
    /// since been garbage-collected.
    pub fn check_gc_fence_as_latest_version(&self, read_ts: TimeStamp) -> bool {
        match self.gc_fence {
            Some(fence) => fence.is_zero() || fence > read_ts,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_hex as hex;

    fn ts(v: u64) -> TimeStamp {
        TimeStamp::new(v)
    }

    fn check(write: &Write, bytes: &[u8]) {
        assert_eq!(write.to_bytes(), bytes);
        assert_eq!(&Write::parse(bytes).unwrap(), write);
        assert_eq!(WriteRef::parse(bytes).unwrap(), write.as_ref());
        let mut extended = bytes.to_vec();
        extended.extend_from_slice(b"unknown");
        assert_eq!(&Write::parse(&extended).unwrap(), write);
    }

    /// docs/FORMAT.md, "Worked examples".
    #[test]
    fn spec_breakdown_put_overlapped_gc_fence() {
        let w = Write::new(WriteType::Put, ts(456), Some(b"short_value".to_vec()))
            .set_overlapped_rollback(true, Some(ts(421397468076048385)));
        check(
            &w,
            &hex("50 c803 76 0b 73686f72745f76616c7565 52 46 05d91ac3b9ec0001"),
        );
    }

    /// docs/FORMAT.md, "Worked examples" and "Byte literals from TiKV's
    /// tests": `vec![b'R', 3]` from TiKV's `test_seek_write`.
    #[test]
    fn tikv_rollback_literals() {
        for t in [3u8, 7] {
            let w = Write::parse(&[b'R', t]).unwrap();
            assert_eq!(
                w,
                Write::new_rollback(ts(t.into()), RollbackProtection::Unprotected)
            );
            assert!(!w.is_protected());
        }
        let p = Write::new_rollback(ts(3), RollbackProtection::Protected);
        check(&p, &hex("52 03 76 01 70"));
        assert!(p.is_protected());
        // `p` on a non-rollback is not a protection.
        assert!(!Write::new(WriteType::Put, ts(3), Some(b"p".to_vec())).is_protected());
    }

    #[test]
    fn all_optional_fields() {
        let w = Write::new(WriteType::Lock, ts(456), Some(vec![]))
            .set_overlapped_rollback(true, Some(ts(0)))
            .set_last_change(LastChange::Exist {
                last_change_ts: ts(345),
                estimated_versions_to_last_change: 11,
            })
            .set_txn_source(1);
        check(
            &w,
            &hex("4c c803 76 00 52 46 0000000000000000 6c 0000000000000159 0b 53 01"),
        );
        let w = Write::new(WriteType::Delete, ts(1), None).set_last_change(LastChange::NotExist);
        check(&w, &hex("44 01 6c 0000000000000000 01"));
    }

    #[test]
    fn fields_in_any_order_and_stop_at_unknown() {
        let w = Write::parse(&hex("50 01 53 05 52 76 01 61 ee 46 00")).unwrap();
        assert_eq!(w.txn_source, 5);
        assert!(w.has_overlapped_rollback);
        assert_eq!(w.short_value.as_deref(), Some(&b"a"[..]));
        assert_eq!(w.gc_fence, None);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let cases: &[(&str, DecodeError)] = &[
            (
                "",
                DecodeError::Empty {
                    what: "write record",
                },
            ),
            ("53 01", DecodeError::BadWriteType(b'S')),
            (
                "50",
                DecodeError::UnexpectedEof {
                    what: "write start_ts",
                },
            ),
            (
                "50 ff",
                DecodeError::UnexpectedEof {
                    what: "write start_ts",
                },
            ),
            ("50 ffffffffffffffffff02", DecodeError::VarintOverflow),
            (
                "50 01 76",
                DecodeError::UnexpectedEof {
                    what: "short value length",
                },
            ),
            (
                "50 01 76 ff 00",
                DecodeError::ShortValueOverrun {
                    len: 255,
                    remaining: 1,
                },
            ),
            (
                "50 01 46 00000000000000",
                DecodeError::UnexpectedEof {
                    what: "write gc_fence",
                },
            ),
            (
                "50 01 6c 0000000000000001 00",
                DecodeError::BadLastChange { ts: 1, versions: 0 },
            ),
            (
                "50 01 53",
                DecodeError::UnexpectedEof {
                    what: "write txn_source",
                },
            ),
        ];
        for (input, err) in cases {
            assert_eq!(
                WriteRef::parse(&hex(input)).as_ref(),
                Err(err),
                "input {input}"
            );
            assert_eq!(
                Write::parse(&hex(input)).as_ref(),
                Err(err),
                "input {input}"
            );
        }
        assert_eq!(WriteRef::parse_type(b"Rxyz"), Ok(WriteType::Rollback));
        assert_eq!(
            WriteRef::parse_type(b""),
            Err(DecodeError::Empty {
                what: "write record"
            })
        );
    }

    #[test]
    fn gc_fence_visibility() {
        let w =
            |fence| Write::new(WriteType::Put, ts(1), None).set_overlapped_rollback(false, fence);
        assert!(w(None).as_ref().check_gc_fence_as_latest_version(ts(100)));
        assert!(
            w(Some(ts(0)))
                .as_ref()
                .check_gc_fence_as_latest_version(ts(100))
        );
        assert!(
            w(Some(ts(101)))
                .as_ref()
                .check_gc_fence_as_latest_version(ts(100))
        );
        assert!(
            !w(Some(ts(100)))
                .as_ref()
                .check_gc_fence_as_latest_version(ts(100))
        );
        assert!(
            !w(Some(ts(99)))
                .as_ref()
                .check_gc_fence_as_latest_version(ts(100))
        );
    }

    #[test]
    fn types_and_short_values() {
        for t in [
            WriteType::Put,
            WriteType::Delete,
            WriteType::Lock,
            WriteType::Rollback,
        ] {
            assert_eq!(WriteType::from_u8(t.to_u8()), Some(t));
        }
        assert_eq!(WriteType::from_u8(b'S'), None);
        assert_eq!(
            WriteType::from_lock_type(LockType::Put),
            Some(WriteType::Put)
        );
        assert_eq!(
            WriteType::from_lock_type(LockType::Delete),
            Some(WriteType::Delete)
        );
        assert_eq!(
            WriteType::from_lock_type(LockType::Lock),
            Some(WriteType::Lock)
        );
        assert_eq!(WriteType::from_lock_type(LockType::Pessimistic), None);
        assert!(is_short_value(&[0; 255]));
        assert!(!is_short_value(&[0; 256]));
        let max = Write::new(WriteType::Put, ts(1), Some(vec![7; 255]));
        assert_eq!(Write::parse(&max.to_bytes()).unwrap(), max);
    }

    #[test]
    #[should_panic(expected = "short value")]
    fn oversized_short_value_is_refused() {
        let _ = Write::new(WriteType::Put, ts(1), Some(vec![0; 256])).to_bytes();
    }
}
