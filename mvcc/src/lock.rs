//! [`Lock`]: the value stored in the lock CF, byte-compatible with TiKV's
//! `txn_types::Lock` (`Lock::to_bytes` / `Lock::parse`).
//!
//! The lock-CF key is `Key::from_raw(user_key)` with no timestamp. The value
//! is a fixed header followed by optional fields, each introduced by a tag
//! byte. [`Lock::to_bytes`] writes them in the table's order, and only when
//! the condition holds:
//!
//! | # | tag | payload | written when | field | added in |
//! |---|---|---|---|---|---|
//! | 1 | — | lock type: `P` 0x50, `D` 0x44, `L` 0x4C, `S` 0x53 | always | [`Lock::lock_type`] | baseline |
//! | 2 | — | compact bytes: zig-zag varint length + raw key | always | [`Lock::primary`] | baseline |
//! | 3 | — | varint | always | [`Lock::ts`] (start_ts) | baseline |
//! | 4 | — | varint | always (optional on input) | [`Lock::ttl`] | baseline |
//! | 5 | `v` 0x76 | `len: u8`, `len` bytes | `short_value.is_some()` | [`Lock::short_value`] | baseline |
//! | 6 | `f` 0x66 | u64 BE | `for_update_ts != 0` | [`Lock::for_update_ts`] | baseline |
//! | 7 | `t` 0x74 | u64 BE | `txn_size != 0` | [`Lock::txn_size`] | baseline |
//! | 8 | `c` 0x63 | u64 BE | `min_commit_ts != 0` | [`Lock::min_commit_ts`] | baseline |
//! | 9 | `a` 0x61 | varint count, `count ×` compact bytes | `use_async_commit` (count may be 0) | [`Lock::secondaries`] | baseline |
//! | 10 | `r` 0x72 | varint count, `count ×` u64 BE | `rollback_ts` non-empty | [`Lock::rollback_ts`] | baseline |
//! | 11 | `l` 0x6C | u64 BE ts, varint versions | `last_change` is not `Unknown` | [`Lock::last_change`] | v6.4.0 |
//! | 12 | `s` 0x73 | varint | `txn_source != 0` | [`Lock::txn_source`] | v6.5.0 |
//! | 13 | `F` 0x46 | none (flag) | `is_locked_with_conflict` | [`Lock::is_locked_with_conflict`] | v7.2.0 |
//! | 14 | `g` 0x67 | u64 BE | `generation != 0` | [`Lock::generation`] | v8.0.0 |
//!
//! "Baseline" fields predate v6.4.0, the oldest version this format tracks.
//! Note the mix of widths: `start_ts`, `ttl`, counts and `txn_source` are
//! varints, while the other timestamps, `txn_size` and `generation` are
//! fixed 8-byte big-endian. The lowercase `s` and the payload-less `F` differ
//! from the [`Write`](crate::Write) record, where `S` is txn_source and `F`
//! carries 8 bytes. `T` 0x54 is reserved by TiKV and never written.
//! [`Lock::use_one_pc`] lives in memory only.
//!
//! Parsing ([`Lock::parse`]) accepts optional fields in any order (a repeated
//! field overwrites the earlier one) and **stops silently at the first
//! unknown tag**, so records from newer writers still parse. Every malformed
//! input is a [`DecodeError`]; nothing panics, including the two cases where
//! TiKV does (a short value overrunning the input and a `last_change` with a
//! timestamp but no versions). Lock type `H` (TiKV's shared-lock container,
//! v8.5.6+) is rejected as [`DecodeError::BadLockType`].

use crate::codec::{
    self, DecodeError, DecodeResult, read_compact_bytes, read_u8, read_u64, read_var_u64,
};
use crate::timestamp::TimeStamp;
use crate::write::{encode_short_value, read_short_value};

const SHORT_VALUE_PREFIX: u8 = b'v';
const FOR_UPDATE_TS_PREFIX: u8 = b'f';
const TXN_SIZE_PREFIX: u8 = b't';
const MIN_COMMIT_TS_PREFIX: u8 = b'c';
const ASYNC_COMMIT_PREFIX: u8 = b'a';
const ROLLBACK_TS_PREFIX: u8 = b'r';
pub(crate) const LAST_CHANGE_PREFIX: u8 = b'l';
const TXN_SOURCE_PREFIX: u8 = b's';
const LOCKED_WITH_CONFLICT_PREFIX: u8 = b'F';
const GENERATION_PREFIX: u8 = b'g';

/// The kind of a lock, stored as its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockType {
    /// `P`: prewrite of a put; commits to [`WriteType::Put`](crate::WriteType::Put).
    Put,
    /// `D`: prewrite of a delete; commits to [`WriteType::Delete`](crate::WriteType::Delete).
    Delete,
    /// `L`: a read lock (`SELECT … FOR UPDATE` in an optimistic txn);
    /// commits to [`WriteType::Lock`](crate::WriteType::Lock).
    Lock,
    /// `S`: a pessimistic lock taken before prewrite. It cannot be
    /// committed as is; prewrite turns it into one of the other types.
    Pessimistic,
}

impl LockType {
    /// The type's tag byte.
    pub const fn to_u8(self) -> u8 {
        match self {
            LockType::Put => b'P',
            LockType::Delete => b'D',
            LockType::Lock => b'L',
            LockType::Pessimistic => b'S',
        }
    }

    /// The type for a tag byte, or `None` for an unknown byte (including
    /// `H`, TiKV's shared locks, which this crate does not support).
    pub const fn from_u8(b: u8) -> Option<Self> {
        match b {
            b'P' => Some(LockType::Put),
            b'D' => Some(LockType::Delete),
            b'L' => Some(LockType::Lock),
            b'S' => Some(LockType::Pessimistic),
            _ => None,
        }
    }
}

/// Where the last change (Put or Delete) of a key is, as seen from the
/// newest version, so that readers can skip runs of `Lock`/`Rollback`
/// records. Stored as `l` in both Lock and Write records.
///
/// Invariant: in `Exist`, both fields are non-zero. `(ts, 0)` is rejected
/// on input and cannot be encoded faithfully.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LastChange {
    /// Not recorded (older writer, or feature off). Not written to disk.
    #[default]
    Unknown,
    /// The key has no Put/Delete below this record. Written as ts 0,
    /// versions 1 (older writers may store any non-zero count).
    NotExist,
    /// The last Put/Delete was committed at `last_change_ts`.
    Exist {
        /// Commit ts of the last Put/Delete.
        last_change_ts: TimeStamp,
        /// Roughly how many versions to skip to reach it.
        estimated_versions_to_last_change: u64,
    },
}

impl LastChange {
    /// Interprets the stored pair: `(0, 0)` is `Unknown`, `(0, >0)` is
    /// `NotExist`, `(>0, >0)` is `Exist`, and `(>0, 0)` is
    /// [`DecodeError::BadLastChange`] (TiKV panics on it).
    pub fn from_parts(ts: TimeStamp, versions: u64) -> DecodeResult<Self> {
        match (ts.is_zero(), versions) {
            (true, 0) => Ok(LastChange::Unknown),
            (true, _) => Ok(LastChange::NotExist),
            (false, 0) => Err(DecodeError::BadLastChange {
                ts: ts.into_inner(),
                versions,
            }),
            (false, _) => Ok(LastChange::Exist {
                last_change_ts: ts,
                estimated_versions_to_last_change: versions,
            }),
        }
    }

    /// The stored pair: `Unknown` is `(0, 0)`, `NotExist` is `(0, 1)`.
    pub fn to_parts(self) -> (TimeStamp, u64) {
        match self {
            LastChange::Unknown => (TimeStamp::zero(), 0),
            LastChange::NotExist => (TimeStamp::zero(), 1),
            LastChange::Exist {
                last_change_ts,
                estimated_versions_to_last_change,
            } => {
                debug_assert!(
                    !last_change_ts.is_zero() && estimated_versions_to_last_change != 0,
                    "LastChange::Exist needs a non-zero ts and version count"
                );
                (last_change_ts, estimated_versions_to_last_change)
            }
        }
    }
}

/// Appends the `l` field unless `last_change` is `Unknown`.
pub(crate) fn encode_last_change(buf: &mut Vec<u8>, last_change: LastChange) {
    if last_change == LastChange::Unknown {
        return;
    }
    let (ts, versions) = last_change.to_parts();
    buf.push(LAST_CHANGE_PREFIX);
    codec::encode_u64(buf, ts.into_inner());
    codec::encode_var_u64(buf, versions);
}

/// Reads the payload of an `l` field.
pub(crate) fn read_last_change(data: &mut &[u8]) -> DecodeResult<LastChange> {
    let ts = read_u64(data, "last_change ts")?;
    let versions = read_var_u64(data, "last_change versions")?;
    LastChange::from_parts(ts.into(), versions)
}

/// A transaction's lock on one key: the lock-CF value.
///
/// Invariants (kept by the writer; checked by `debug_assert!` in
/// [`Lock::to_bytes`] where cheap):
/// * `short_value` is at most [`SHORT_VALUE_MAX_LEN`](crate::SHORT_VALUE_MAX_LEN)
///   bytes (longer values go to the default CF); enforced with a panic.
/// * `secondaries` is empty unless `use_async_commit` (otherwise they would
///   not be written).
/// * `last_change` follows the [`LastChange`] invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    /// What the lock commits to (or `Pessimistic`).
    pub lock_type: LockType,
    /// The transaction's primary key, raw (not memcomparable-encoded).
    pub primary: Vec<u8>,
    /// The transaction's start_ts.
    pub ts: TimeStamp,
    /// Time to live in milliseconds, counted from `ts`'s physical time.
    pub ttl: u64,
    /// The value of a Put of at most 255 bytes, inlined here instead of the
    /// default CF. `Some(vec![])` (an empty value) differs from `None`.
    pub short_value: Option<Vec<u8>>,
    /// Pessimistic transactions only: the for_update_ts. Zero otherwise.
    pub for_update_ts: TimeStamp,
    /// Number of keys in the transaction, if large; a hint for lock
    /// resolution. Zero when unknown.
    pub txn_size: u64,
    /// The smallest commit_ts this transaction may use. Zero when unset.
    pub min_commit_ts: TimeStamp,
    /// Async commit: the primary lock lists all secondaries.
    pub use_async_commit: bool,
    /// One-phase commit. In memory only: never serialized, so a parsed
    /// lock always has `false`.
    pub use_one_pc: bool,
    /// Async commit primary only: the raw keys of the secondaries.
    pub secondaries: Vec<Vec<u8>>,
    /// Start timestamps of rollbacks that collided with this lock, to be
    /// recorded as overlapped rollbacks when it commits.
    pub rollback_ts: Vec<TimeStamp>,
    /// Where the key's last Put/Delete is.
    pub last_change: LastChange,
    /// Origin of the transaction (CDC / replication). Zero by default.
    pub txn_source: u64,
    /// Pessimistic lock acquired despite a write conflict (fair locking).
    pub is_locked_with_conflict: bool,
    /// Pipelined DML flush generation. Zero for ordinary transactions.
    pub generation: u64,
}

impl Lock {
    /// A lock with the given header and every optional field
    /// zero, empty, `false` or `Unknown`. Set the others by field.
    pub fn new(lock_type: LockType, primary: Vec<u8>, ts: TimeStamp, ttl: u64) -> Lock {
        Lock {
            lock_type,
            primary,
            ts,
            ttl,
            short_value: None,
            for_update_ts: TimeStamp::zero(),
            txn_size: 0,
            min_commit_ts: TimeStamp::zero(),
            use_async_commit: false,
            use_one_pc: false,
            secondaries: Vec::new(),
            rollback_ts: Vec::new(),
            last_change: LastChange::Unknown,
            txn_source: 0,
            is_locked_with_conflict: false,
            generation: 0,
        }
    }

    /// Whether this is a pessimistic lock (type `S`), not yet prewritten.
    pub fn is_pessimistic_lock(&self) -> bool {
        self.lock_type == LockType::Pessimistic
    }

    /// Encodes the lock as stored in the lock CF (see the module table).
    ///
    /// # Panics
    ///
    /// If `short_value` is longer than 255 bytes: it cannot be encoded
    /// without corrupting the record, and the writer must have sent such a
    /// value to the default CF instead.
    ///
    /// ```
    /// # use percolate_mvcc::{Lock, LockType, TimeStamp};
    /// let lock = Lock::new(LockType::Put, b"pk".to_vec(), TimeStamp::new(1), 10);
    /// assert_eq!(lock.to_bytes(), [b'P', 0x04, b'p', b'k', 0x01, 0x0a]);
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        debug_assert!(
            self.use_async_commit || self.secondaries.is_empty(),
            "secondaries are only stored for async-commit locks"
        );
        let mut buf = Vec::with_capacity(self.encoded_len_hint());
        self.encode_header(&mut buf);
        self.encode_value_and_timestamps(&mut buf);
        self.encode_async_commit(&mut buf);
        encode_last_change(&mut buf, self.last_change);
        self.encode_newer_fields(&mut buf);
        buf
    }

    fn encoded_len_hint(&self) -> usize {
        let keys: usize = self.secondaries.iter().map(|s| s.len() + 2).sum();
        let value = self.short_value.as_ref().map_or(0, |v| v.len() + 2);
        64 + self.primary.len() + value + keys + 8 * self.rollback_ts.len()
    }

    /// Fields 1–4: type, primary, start_ts, ttl.
    fn encode_header(&self, buf: &mut Vec<u8>) {
        buf.push(self.lock_type.to_u8());
        codec::encode_compact_bytes(buf, &self.primary);
        codec::encode_var_u64(buf, self.ts.into_inner());
        codec::encode_var_u64(buf, self.ttl);
    }

    /// Fields 5–8: `v`, `f`, `t`, `c`.
    fn encode_value_and_timestamps(&self, buf: &mut Vec<u8>) {
        if let Some(value) = &self.short_value {
            encode_short_value(buf, SHORT_VALUE_PREFIX, value);
        }
        let fixed = [
            (FOR_UPDATE_TS_PREFIX, self.for_update_ts.into_inner()),
            (TXN_SIZE_PREFIX, self.txn_size),
            (MIN_COMMIT_TS_PREFIX, self.min_commit_ts.into_inner()),
        ];
        for (tag, v) in fixed {
            if v != 0 {
                buf.push(tag);
                codec::encode_u64(buf, v);
            }
        }
    }

    /// Fields 9–10: `a` (secondaries) and `r` (rollback_ts).
    fn encode_async_commit(&self, buf: &mut Vec<u8>) {
        if self.use_async_commit {
            buf.push(ASYNC_COMMIT_PREFIX);
            codec::encode_var_u64(buf, self.secondaries.len() as u64);
            for key in &self.secondaries {
                codec::encode_compact_bytes(buf, key);
            }
        }
        if !self.rollback_ts.is_empty() {
            buf.push(ROLLBACK_TS_PREFIX);
            codec::encode_var_u64(buf, self.rollback_ts.len() as u64);
            for ts in &self.rollback_ts {
                codec::encode_u64(buf, ts.into_inner());
            }
        }
    }

    /// Fields 12–14: `s`, `F`, `g`.
    fn encode_newer_fields(&self, buf: &mut Vec<u8>) {
        if self.txn_source != 0 {
            buf.push(TXN_SOURCE_PREFIX);
            codec::encode_var_u64(buf, self.txn_source);
        }
        if self.is_locked_with_conflict {
            buf.push(LOCKED_WITH_CONFLICT_PREFIX);
        }
        if self.generation != 0 {
            buf.push(GENERATION_PREFIX);
            codec::encode_u64(buf, self.generation);
        }
    }

    /// Decodes a lock-CF value. See the module docs for the rules; every
    /// malformed input is an error, never a panic.
    ///
    /// ```
    /// # use percolate_mvcc::{Lock, LockType, TimeStamp};
    /// // ttl is optional on input; unknown trailing fields are ignored.
    /// let lock = Lock::parse(&[b'P', 0x04, b'p', b'k', 0x01]).unwrap();
    /// assert_eq!(lock, Lock::new(LockType::Put, b"pk".to_vec(), TimeStamp::new(1), 0));
    /// let lock = Lock::parse(b"P\x04pk\x01\x0aunknown").unwrap();
    /// assert_eq!(lock.ttl, 10);
    /// ```
    pub fn parse(b: &[u8]) -> DecodeResult<Lock> {
        let mut data = b;
        let mut lock = Self::parse_header(&mut data)?;
        while let Some((&tag, rest)) = data.split_first() {
            data = rest;
            if !lock.parse_field(tag, &mut data)? {
                break;
            }
        }
        Ok(lock)
    }

    /// Fields 1–4. A missing ttl is 0.
    fn parse_header(data: &mut &[u8]) -> DecodeResult<Lock> {
        if data.is_empty() {
            return Err(DecodeError::Empty {
                what: "lock record",
            });
        }
        let tag = read_u8(data, "lock type")?;
        let lock_type = LockType::from_u8(tag).ok_or(DecodeError::BadLockType(tag))?;
        let primary = read_compact_bytes(data, "lock primary")?.to_vec();
        let ts = read_var_u64(data, "lock start_ts")?;
        let ttl = if data.is_empty() {
            0
        } else {
            read_var_u64(data, "lock ttl")?
        };
        Ok(Lock::new(lock_type, primary, ts.into(), ttl))
    }

    /// Reads the payload of the field tagged `tag`. Returns `Ok(false)`,
    /// consuming nothing more, if the tag is unknown.
    fn parse_field(&mut self, tag: u8, data: &mut &[u8]) -> DecodeResult<bool> {
        match tag {
            SHORT_VALUE_PREFIX => self.short_value = Some(read_short_value(data)?.to_vec()),
            FOR_UPDATE_TS_PREFIX => {
                self.for_update_ts = read_u64(data, "lock for_update_ts")?.into()
            }
            TXN_SIZE_PREFIX => self.txn_size = read_u64(data, "lock txn_size")?,
            MIN_COMMIT_TS_PREFIX => {
                self.min_commit_ts = read_u64(data, "lock min_commit_ts")?.into()
            }
            ASYNC_COMMIT_PREFIX => {
                self.secondaries = read_secondaries(data)?;
                self.use_async_commit = true;
            }
            ROLLBACK_TS_PREFIX => self.rollback_ts = read_rollback_ts(data)?,
            LAST_CHANGE_PREFIX => self.last_change = read_last_change(data)?,
            TXN_SOURCE_PREFIX => self.txn_source = read_var_u64(data, "lock txn_source")?,
            LOCKED_WITH_CONFLICT_PREFIX => self.is_locked_with_conflict = true,
            GENERATION_PREFIX => self.generation = read_u64(data, "lock generation")?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The lock as reported to a client that ran into it on `raw_key`.
    pub fn into_lock_info(self, raw_key: Vec<u8>) -> LockInfo {
        LockInfo {
            primary_lock: self.primary,
            lock_version: self.ts,
            key: raw_key,
            lock_ttl: self.ttl,
            txn_size: self.txn_size,
            lock_type: self.lock_type,
            lock_for_update_ts: self.for_update_ts,
            use_async_commit: self.use_async_commit,
            min_commit_ts: self.min_commit_ts,
            secondaries: self.secondaries,
        }
    }
}

/// Payload of `a`: varint count, then that many compact-bytes keys.
fn read_secondaries(data: &mut &[u8]) -> DecodeResult<Vec<Vec<u8>>> {
    let count = read_var_u64(data, "lock secondaries count")?;
    // Each key takes at least one byte; never trust the count for capacity.
    let mut keys = Vec::with_capacity(capacity_for(count, data.len()));
    for _ in 0..count {
        keys.push(read_compact_bytes(data, "lock secondary key")?.to_vec());
    }
    Ok(keys)
}

/// Payload of `r`: varint count, then that many u64 BE timestamps.
fn read_rollback_ts(data: &mut &[u8]) -> DecodeResult<Vec<TimeStamp>> {
    let count = read_var_u64(data, "lock rollback_ts count")?;
    let mut ts = Vec::with_capacity(capacity_for(count, data.len() / 8));
    for _ in 0..count {
        ts.push(read_u64(data, "lock rollback_ts")?.into());
    }
    Ok(ts)
}

/// A capacity for `count` items of which at most `max_possible` can fit in
/// the remaining input.
fn capacity_for(count: u64, max_possible: usize) -> usize {
    usize::try_from(count).map_or(max_possible, |c| c.min(max_possible))
}

/// A lock as reported to clients (TiKV's `kvrpcpb::LockInfo`), e.g. in a
/// "key is locked" error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock owner's primary key, raw.
    pub primary_lock: Vec<u8>,
    /// The lock owner's start_ts.
    pub lock_version: TimeStamp,
    /// The locked key, raw.
    pub key: Vec<u8>,
    /// The lock's TTL in milliseconds.
    pub lock_ttl: u64,
    /// The owner's transaction size hint.
    pub txn_size: u64,
    /// The lock's type.
    pub lock_type: LockType,
    /// The owner's for_update_ts (pessimistic transactions).
    pub lock_for_update_ts: TimeStamp,
    /// Whether the owner uses async commit.
    pub use_async_commit: bool,
    /// The owner's min_commit_ts.
    pub min_commit_ts: TimeStamp,
    /// Async commit primary only: the raw secondary keys.
    pub secondaries: Vec<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_hex as hex;

    fn ts(v: u64) -> TimeStamp {
        TimeStamp::new(v)
    }

    fn check(lock: &Lock, bytes: &[u8]) {
        assert_eq!(lock.to_bytes(), bytes);
        assert_eq!(&Lock::parse(bytes).unwrap(), lock);
        let mut extended = bytes.to_vec();
        extended.extend_from_slice(b"unknown");
        assert_eq!(&Lock::parse(&extended).unwrap(), lock);
    }

    /// docs/FORMAT.md, "Worked examples": the full header plus f/t/c breakdown.
    #[test]
    fn spec_breakdown_put_with_timestamps() {
        let mut lock = Lock::new(LockType::Put, b"pkpkpk".to_vec(), ts(111), 222);
        lock.for_update_ts = ts(333);
        lock.txn_size = 444;
        lock.min_commit_ts = ts(555);
        check(
            &lock,
            &hex("50 0c706b706b706b 6f de01
                  66 000000000000014d 74 00000000000001bc 63 000000000000022b"),
        );
    }

    /// docs/FORMAT.md, "Worked examples": async-commit secondaries and rollback_ts.
    #[test]
    fn spec_breakdown_secondaries_and_rollback_ts() {
        let mut lock = Lock::new(LockType::Put, b"pk".to_vec(), ts(1), 10);
        lock.use_async_commit = true;
        lock.secondaries = vec![
            b"k1".to_vec(),
            b"kkkkk2".to_vec(),
            b"k3k3k3k3k3k3".to_vec(),
            b"k".to_vec(),
        ];
        lock.rollback_ts = vec![ts(12), ts(24), ts(13)];
        let tail = hex(
            "61 04 04 6b31 0c 6b6b6b6b6b32 18 6b336b336b336b336b336b33 02 6b
                        72 03 000000000000000c 0000000000000018 000000000000000d",
        );
        let mut bytes = hex("50 04706b 01 0a");
        bytes.extend_from_slice(&tail);
        check(&lock, &bytes);
    }

    #[test]
    fn every_field_in_order() {
        let mut lock = Lock::new(LockType::Pessimistic, b"p".to_vec(), ts(5), 0);
        lock.short_value = Some(vec![]);
        lock.use_async_commit = true;
        lock.last_change = LastChange::NotExist;
        lock.txn_source = 300;
        lock.is_locked_with_conflict = true;
        lock.generation = 7;
        check(
            &lock,
            &hex(
                "53 02 70 05 00 76 00 61 00 6c 0000000000000000 01 73 ac02 46 67 0000000000000007",
            ),
        );
    }

    #[test]
    fn use_one_pc_is_not_serialized() {
        let mut lock = Lock::new(LockType::Put, b"pk".to_vec(), ts(1), 10);
        let plain = lock.to_bytes();
        lock.use_one_pc = true;
        assert_eq!(lock.to_bytes(), plain);
        assert!(!Lock::parse(&plain).unwrap().use_one_pc);
    }

    #[test]
    fn fields_in_any_order_and_stop_at_unknown() {
        // `c` before `f`, then an unknown tag hiding a would-be `t` field.
        let bytes =
            hex("50 04706b 01 0a 63 0000000000000002 66 0000000000000001 ff 74 0000000000000009");
        let lock = Lock::parse(&bytes).unwrap();
        assert_eq!(lock.min_commit_ts, ts(2));
        assert_eq!(lock.for_update_ts, ts(1));
        assert_eq!(lock.txn_size, 0);
    }

    #[test]
    fn last_change_parts() {
        assert_eq!(LastChange::from_parts(ts(0), 0), Ok(LastChange::Unknown));
        assert_eq!(LastChange::from_parts(ts(0), 5), Ok(LastChange::NotExist));
        assert_eq!(
            LastChange::from_parts(ts(8), 2),
            Ok(LastChange::Exist {
                last_change_ts: ts(8),
                estimated_versions_to_last_change: 2
            })
        );
        assert_eq!(
            LastChange::from_parts(ts(8), 0),
            Err(DecodeError::BadLastChange { ts: 8, versions: 0 })
        );
        assert_eq!(LastChange::NotExist.to_parts(), (ts(0), 1));
        assert_eq!(LastChange::Unknown.to_parts(), (ts(0), 0));
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let cases: &[(&str, DecodeError)] = &[
            (
                "",
                DecodeError::Empty {
                    what: "lock record",
                },
            ),
            ("58 04706b 01", DecodeError::BadLockType(b'X')),
            ("48 04706b 01", DecodeError::BadLockType(b'H')),
            (
                "50",
                DecodeError::UnexpectedEof {
                    what: "lock primary",
                },
            ),
            (
                "50 06706b",
                DecodeError::CompactBytesLength {
                    len: 3,
                    remaining: 2,
                },
            ),
            (
                "50 04706b",
                DecodeError::UnexpectedEof {
                    what: "lock start_ts",
                },
            ),
            (
                "50 04706b 01 80",
                DecodeError::UnexpectedEof { what: "lock ttl" },
            ),
            (
                "50 04706b 01 0a 76",
                DecodeError::UnexpectedEof {
                    what: "short value length",
                },
            ),
            (
                "50 04706b 01 0a 76 05 6162",
                DecodeError::ShortValueOverrun {
                    len: 5,
                    remaining: 2,
                },
            ),
            (
                "50 04706b 01 0a 66 00000000",
                DecodeError::UnexpectedEof {
                    what: "lock for_update_ts",
                },
            ),
            (
                "50 04706b 01 0a 61 02 02 61",
                DecodeError::UnexpectedEof {
                    what: "lock secondary key",
                },
            ),
            (
                "50 04706b 01 0a 72 02 0000000000000001",
                DecodeError::UnexpectedEof {
                    what: "lock rollback_ts",
                },
            ),
            (
                "50 04706b 01 0a 6c 0000000000000008 00",
                DecodeError::BadLastChange { ts: 8, versions: 0 },
            ),
            (
                "50 04706b 01 0a 6c 0000000000000008",
                DecodeError::UnexpectedEof {
                    what: "last_change versions",
                },
            ),
            (
                "50 04706b 01 0a 73 ffffffffffffffffff7f",
                DecodeError::VarintOverflow,
            ),
            (
                "50 04706b 01 0a 67 01",
                DecodeError::UnexpectedEof {
                    what: "lock generation",
                },
            ),
        ];
        for (input, err) in cases {
            assert_eq!(Lock::parse(&hex(input)).as_ref(), Err(err), "input {input}");
        }
        // A huge declared count must not allocate or loop long.
        let bytes = hex("50 04706b 01 0a 72 ffffffffffffffffff01");
        assert!(Lock::parse(&bytes).is_err());
    }

    #[test]
    #[should_panic(expected = "short value")]
    fn oversized_short_value_is_refused() {
        let mut lock = Lock::new(LockType::Put, b"pk".to_vec(), ts(1), 10);
        lock.short_value = Some(vec![0; 256]);
        let _ = lock.to_bytes();
    }

    #[test]
    fn lock_info_and_type_bytes() {
        let mut lock = Lock::new(LockType::Put, b"pk".to_vec(), ts(3), 100);
        lock.for_update_ts = ts(4);
        lock.min_commit_ts = ts(5);
        lock.txn_size = 6;
        lock.use_async_commit = true;
        lock.secondaries = vec![b"s".to_vec()];
        let info = lock.into_lock_info(b"k".to_vec());
        assert_eq!(
            info,
            LockInfo {
                primary_lock: b"pk".to_vec(),
                lock_version: ts(3),
                key: b"k".to_vec(),
                lock_ttl: 100,
                txn_size: 6,
                lock_type: LockType::Put,
                lock_for_update_ts: ts(4),
                use_async_commit: true,
                min_commit_ts: ts(5),
                secondaries: vec![b"s".to_vec()],
            }
        );
        for t in [
            LockType::Put,
            LockType::Delete,
            LockType::Lock,
            LockType::Pessimistic,
        ] {
            assert_eq!(LockType::from_u8(t.to_u8()), Some(t));
        }
        assert_eq!(LockType::from_u8(b'H'), None);
        assert!(Lock::new(LockType::Pessimistic, vec![], ts(1), 0).is_pessimistic_lock());
    }
}
