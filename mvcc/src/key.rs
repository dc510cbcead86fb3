//! Encoded keys: [`Key`] (a user key) and [`TimestampedKey`] (a user key
//! with a version suffix), byte-compatible with TiKV's `txn_types::Key`.
//!
//! A user key is stored memcomparable-encoded ([`codec::encode_bytes`]),
//! which keeps raw order and is self-delimiting. A version is appended as
//! `!ts` big-endian ([`codec::encode_u64_desc`]) with no separator:
//!
//! ```text
//! lock CF:    encode_bytes(user_key)                     (Key)
//! write CF:   encode_bytes(user_key) ++ !commit_ts (BE)  (TimestampedKey)
//! default CF: encode_bytes(user_key) ++ !start_ts (BE)   (TimestampedKey)
//! ```
//!
//! So, comparing plain bytes, all versions of one user key sit together,
//! user keys keep their raw order, and within a user key the newest version
//! comes first. Seeking to `key.append_ts(read_ts)` lands on the newest
//! version at or below `read_ts`; `key.append_ts(TimeStamp::zero())` is just
//! past the key's oldest possible version.
//!
//! TiKV uses one `Key` type for both shapes and leaves "is there a ts?" to the
//! caller. Here the two shapes are two types; the slice helpers on [`Key`]
//! (`split_on_ts_for` and friends) remain for raw engine bytes.

use std::fmt;

use crate::codec::{self, DecodeError, DecodeResult};
use crate::timestamp::TimeStamp;

/// Length of the timestamp suffix of a [`TimestampedKey`].
const TS_LEN: usize = 8;

/// A memcomparable-encoded user key, **without** a timestamp suffix.
///
/// Invariant: the bytes are meant to be exactly `encode_bytes(raw)` for some
/// raw key. [`Key::from_raw`] guarantees it; [`Key::from_encoded`] trusts the
/// caller, and the decoding methods ([`Key::to_raw`]) report a violation as
/// an error rather than panicking.
///
/// `Ord` compares the encoded bytes, which is the same as comparing the raw
/// keys.
#[derive(PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Vec<u8>);

impl Clone for Key {
    /// Copies the bytes with room for a timestamp: clones are mostly turned
    /// into versioned keys (`key.clone().append_ts(ts)`), which then need
    /// no second allocation.
    fn clone(&self) -> Key {
        let mut encoded = Vec::with_capacity(self.0.len() + TS_LEN);
        encoded.extend_from_slice(&self.0);
        Key(encoded)
    }
}

impl Key {
    /// Encodes a raw user key.
    ///
    /// ```
    /// # use percolate_mvcc::Key;
    /// assert_eq!(Key::from_raw(b"key1").as_encoded(), b"key1\0\0\0\0\xfb");
    /// ```
    pub fn from_raw(raw: &[u8]) -> Key {
        let mut encoded = Vec::with_capacity(codec::max_encoded_bytes_size(raw.len()) + TS_LEN);
        codec::encode_bytes(&mut encoded, raw);
        Key(encoded)
    }

    /// Wraps bytes that are already encoded (for example a lock-CF key read
    /// from the engine). Not checked.
    pub fn from_encoded(encoded: Vec<u8>) -> Key {
        Key(encoded)
    }

    /// Like [`Key::from_encoded`], copying the bytes.
    pub fn from_encoded_slice(encoded: &[u8]) -> Key {
        Key(encoded.to_vec())
    }

    /// The encoded bytes.
    pub fn as_encoded(&self) -> &Vec<u8> {
        &self.0
    }

    /// The encoded bytes, by value.
    pub fn into_encoded(self) -> Vec<u8> {
        self.0
    }

    /// Length of the encoded bytes (always a multiple of 9 for a valid key).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the encoded bytes are empty. An empty buffer is not a valid
    /// encoding: even the empty raw key encodes to 9 bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Decodes the raw user key.
    ///
    /// Unlike TiKV, bytes after the terminating group are an error
    /// ([`DecodeError::TrailingBytes`]): a `Key` has no timestamp suffix, so
    /// leftover bytes mean the value was built from the wrong shape. Use
    /// [`TimestampedKey::truncate_ts`] first for versioned keys.
    ///
    /// ```
    /// # use percolate_mvcc::Key;
    /// assert_eq!(Key::from_raw(b"k").to_raw().unwrap(), b"k");
    /// assert!(Key::from_encoded(vec![1, 2, 3]).to_raw().is_err());
    /// ```
    pub fn to_raw(&self) -> DecodeResult<Vec<u8>> {
        let mut data = self.0.as_slice();
        let raw = codec::decode_bytes(&mut data)?;
        if !data.is_empty() {
            return Err(DecodeError::TrailingBytes { len: data.len() });
        }
        Ok(raw)
    }

    /// Like [`Key::to_raw`], consuming the key: decoded in place, in the
    /// key's own buffer, without allocating.
    pub fn into_raw(self) -> DecodeResult<Vec<u8>> {
        self.try_into_raw().map_err(|(_, e)| e)
    }

    /// Like [`Key::into_raw`], giving the key back, unchanged, with the
    /// error when it does not decode (to name it in a `Corruption`).
    ///
    /// ```
    /// # use percolate_mvcc::Key;
    /// assert_eq!(Key::from_raw(b"k").try_into_raw().unwrap(), b"k");
    /// let (key, _) = Key::from_encoded(vec![1, 2, 3]).try_into_raw().unwrap_err();
    /// assert_eq!(key.as_encoded(), &[1, 2, 3]);
    /// ```
    pub fn try_into_raw(self) -> Result<Vec<u8>, (Key, DecodeError)> {
        let mut buf = self.0;
        match codec::decode_bytes_in_place(&mut buf) {
            Ok(()) => Ok(buf),
            Err(e) => Err((Key(buf), e)),
        }
    }

    /// Appends `ts` as `!ts` big-endian, giving the key of one version.
    ///
    /// ```
    /// # use percolate_mvcc::{Key, TimeStamp};
    /// let k = Key::from_encoded(b"abc".to_vec()).append_ts(TimeStamp::new(100));
    /// assert_eq!(k.as_encoded(), b"abc\xff\xff\xff\xff\xff\xff\xff\x9b");
    /// ```
    pub fn append_ts(mut self, ts: TimeStamp) -> TimestampedKey {
        codec::encode_u64_desc(&mut self.0, ts.into_inner());
        TimestampedKey(self.0)
    }

    /// Drops the last 8 bytes, for a key that the caller knows ends in a
    /// timestamp (TiKV's `Key::truncate_ts`). Prefer
    /// [`TimestampedKey::truncate_ts`], where the type knows.
    ///
    /// Fails with [`DecodeError::KeyLength`] if there are fewer than 8 bytes.
    pub fn truncate_ts(mut self) -> DecodeResult<Key> {
        let len = Self::truncate_ts_for(&self.0)?.len();
        self.0.truncate(len);
        Ok(self)
    }

    /// The timestamp in the last 8 bytes of an encoded versioned key.
    ///
    /// Fails with [`DecodeError::KeyLength`] if there are fewer than 8 bytes;
    /// the key part is not checked.
    pub fn decode_ts_from(encoded_key_with_ts: &[u8]) -> DecodeResult<TimeStamp> {
        Self::split_on_ts_for(encoded_key_with_ts).map(|(_, ts)| ts)
    }

    /// Splits an encoded versioned key into its key part and timestamp.
    ///
    /// Fails with [`DecodeError::KeyLength`] if there are fewer than 8 bytes;
    /// the key part is not checked.
    ///
    /// ```
    /// # use percolate_mvcc::{Key, TimeStamp};
    /// let k = Key::from_raw(b"a").append_ts(TimeStamp::new(7));
    /// let (key, ts) = Key::split_on_ts_for(k.as_encoded()).unwrap();
    /// assert_eq!((key, ts), (&Key::from_raw(b"a").as_encoded()[..], TimeStamp::new(7)));
    /// ```
    pub fn split_on_ts_for(encoded_key_with_ts: &[u8]) -> DecodeResult<(&[u8], TimeStamp)> {
        let (key, ts) =
            encoded_key_with_ts
                .split_last_chunk::<TS_LEN>()
                .ok_or(DecodeError::KeyLength {
                    len: encoded_key_with_ts.len(),
                })?;
        Ok((key, TimeStamp::new(!u64::from_be_bytes(*ts))))
    }

    /// The key part of an encoded versioned key (all but the last 8 bytes).
    ///
    /// Fails with [`DecodeError::KeyLength`] if there are fewer than 8 bytes.
    pub fn truncate_ts_for(encoded_key_with_ts: &[u8]) -> DecodeResult<&[u8]> {
        Self::split_on_ts_for(encoded_key_with_ts).map(|(key, _)| key)
    }

    /// Whether `ts_encoded_key` is `user_key` (encoded) followed by exactly
    /// 8 timestamp bytes.
    pub fn is_user_key_eq(ts_encoded_key: &[u8], user_key: &[u8]) -> bool {
        ts_encoded_key
            .strip_prefix(user_key)
            .is_some_and(|ts| ts.len() == TS_LEN)
    }

    /// Whether this key is exactly `encode_bytes(raw)`: same number of
    /// groups, same data, markers and zero padding. A key with a timestamp
    /// appended, or an empty buffer, is never encoded from anything.
    /// Does not allocate.
    ///
    /// ```
    /// # use percolate_mvcc::{Key, TimeStamp};
    /// assert!(Key::from_raw(b"abc").is_encoded_from(b"abc"));
    /// assert!(!Key::from_raw(b"abc").is_encoded_from(b"abd"));
    /// ```
    pub fn is_encoded_from(&self, raw: &[u8]) -> bool {
        self.0.len() == codec::max_encoded_bytes_size(raw.len())
            && self
                .0
                .chunks_exact(9)
                .zip(codec::encoded_groups(raw))
                .all(|(have, want)| have == want)
    }
}

/// Writes `raw` with printable ASCII as is (`\` doubled) and every other
/// byte as `\xNN`.
pub(crate) fn fmt_raw(raw: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for &b in raw {
        match b {
            b'\\' => f.write_str("\\\\")?,
            0x20..=0x7E => fmt::Write::write_char(f, char::from(b))?,
            _ => write!(f, "\\x{b:02x}")?,
        }
    }
    Ok(())
}

/// Writes an encoded user key as its raw form, or `encoded:<hex>` if it
/// does not decode.
fn fmt_encoded(encoded: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match Key::from_encoded_slice(encoded).to_raw() {
        Ok(raw) => fmt_raw(&raw, f),
        Err(_) => {
            f.write_str("encoded:")?;
            encoded.iter().try_for_each(|b| write!(f, "{b:02x}"))
        }
    }
}

/// The raw user key, e.g. `k\x00` (or `encoded:<hex>` if not decodable).
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_encoded(&self.0, f)
    }
}

/// `Key(<Display>)`.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

/// An encoded user key followed by an 8-byte descending timestamp: the key
/// of one version in the write or default CF.
///
/// Invariant: at least 8 bytes long ([`TimestampedKey::from_encoded`] checks
/// it; [`Key::append_ts`] guarantees it). The key part is not validated.
///
/// `Ord` compares bytes, so versions of one user key are ordered newest
/// first, and user keys in raw order.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimestampedKey(Vec<u8>);

impl TimestampedKey {
    /// Wraps bytes read from the engine. Fails with
    /// [`DecodeError::KeyLength`] if shorter than 8 bytes.
    pub fn from_encoded(encoded: Vec<u8>) -> DecodeResult<Self> {
        if encoded.len() < TS_LEN {
            return Err(DecodeError::KeyLength { len: encoded.len() });
        }
        Ok(TimestampedKey(encoded))
    }

    /// The encoded bytes, timestamp included.
    pub fn as_encoded(&self) -> &Vec<u8> {
        &self.0
    }

    /// The encoded bytes, by value.
    pub fn into_encoded(self) -> Vec<u8> {
        self.0
    }

    /// The version's timestamp.
    pub fn ts(&self) -> TimeStamp {
        self.split().1
    }

    /// The encoded user key part (without the timestamp).
    pub fn user_key(&self) -> &[u8] {
        self.split().0
    }

    /// Drops the timestamp, giving the user key.
    pub fn truncate_ts(mut self) -> Key {
        let len = self.user_key().len();
        self.0.truncate(len);
        Key(self.0)
    }

    fn split(&self) -> (&[u8], TimeStamp) {
        match Key::split_on_ts_for(&self.0) {
            Ok(parts) => parts,
            Err(_) => panic!("invariant violated: a TimestampedKey holds at least 8 bytes"),
        }
    }
}

/// The raw user key and the timestamp, e.g. `k@100`.
impl fmt::Display for TimestampedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (key, ts) = self.split();
        fmt_encoded(key, f)?;
        write!(f, "@{ts}")
    }
}

/// `TimestampedKey(<Display>)`.
impl fmt::Debug for TimestampedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimestampedKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(v: u64) -> TimeStamp {
        TimeStamp::new(v)
    }

    /// docs/FORMAT.md, "Worked examples" and "Byte literals from TiKV's tests".
    #[test]
    fn tikv_literals() {
        let k = Key::from_raw(b"123456789").append_ts(TimeStamp::max());
        assert_eq!(
            k.as_encoded(),
            b"12345678\xff9\0\0\0\0\0\0\0\xf8\0\0\0\0\0\0\0\0"
        );
        let k = Key::from_encoded(b"abc".to_vec()).append_ts(ts(100));
        assert_eq!(k.as_encoded(), b"abc\xff\xff\xff\xff\xff\xff\xff\x9b");
        let k = Key::from_raw(b"z").append_ts(ts(1000));
        assert_eq!(
            k.as_encoded(),
            b"z\0\0\0\0\0\0\0\xf8\xff\xff\xff\xff\xff\xff\xfc\x17"
        );
        assert_eq!(Key::from_raw(b"").as_encoded(), b"\0\0\0\0\0\0\0\0\xf7");
        assert_eq!(Key::from_raw(b"r").as_encoded(), b"r\0\0\0\0\0\0\0\xf8");
        let k = Key::from_raw(b"r").append_ts(ts(2));
        assert_eq!(
            k.as_encoded(),
            b"r\0\0\0\0\0\0\0\xf8\xff\xff\xff\xff\xff\xff\xff\xfd"
        );
        let k = Key::from_raw(b"r234567890").append_ts(ts(3));
        assert_eq!(
            k.as_encoded(),
            b"r2345678\xff90\0\0\0\0\0\0\xf9\xff\xff\xff\xff\xff\xff\xff\xfc"
        );
        let k = Key::from_raw(b"").append_ts(ts(0));
        assert_eq!(&k.as_encoded()[9..], [0xff; 8]);
    }

    #[test]
    fn raw_round_trip() {
        for raw in [
            &b""[..],
            b"\0",
            b"k",
            b"12345678",
            b"123456789",
            b"\xff\xff",
        ] {
            let key = Key::from_raw(raw);
            assert_eq!(key.len() % 9, 0);
            assert_eq!(key.to_raw().unwrap(), raw);
            assert_eq!(key.clone().into_raw().unwrap(), raw);
            let tk = key.clone().append_ts(ts(42));
            assert_eq!(tk.ts(), ts(42));
            assert_eq!(tk.user_key(), &key.as_encoded()[..]);
            assert_eq!(tk.clone().truncate_ts(), key);
            assert_eq!(
                Key::from_encoded(tk.into_encoded()).truncate_ts().unwrap(),
                key
            );
        }
    }

    #[test]
    fn to_raw_rejects_trailing_and_bad_bytes() {
        let tk = Key::from_raw(b"k").append_ts(ts(1));
        assert_eq!(
            Key::from_encoded(tk.into_encoded()).to_raw(),
            Err(DecodeError::TrailingBytes { len: 8 })
        );
        assert_eq!(
            Key::from_encoded(vec![0, 0, 0, 0, 0, 0, 0, 0, 0xf6]).to_raw(),
            Err(DecodeError::KeyPadding)
        );
        assert!(matches!(
            Key::from_encoded(vec![]).to_raw(),
            Err(DecodeError::UnexpectedEof { .. })
        ));
    }

    #[test]
    fn ordering_matches_raw_then_newest_first() {
        let raws: [&[u8]; 7] = [b"", b"\0", b"a", b"a\0", b"abcdefgh", b"abcdefgh\0", b"b"];
        for a in raws {
            for b in raws {
                assert_eq!(Key::from_raw(a).cmp(&Key::from_raw(b)), a.cmp(b));
                for (t1, t2) in [(1, 2), (2, 1), (5, 5), (0, u64::MAX)] {
                    let ka = Key::from_raw(a).append_ts(ts(t1));
                    let kb = Key::from_raw(b).append_ts(ts(t2));
                    // Raw key ascending, then ts descending.
                    let want = a.cmp(b).then(t2.cmp(&t1));
                    assert_eq!(ka.cmp(&kb), want, "{ka:?} vs {kb:?}");
                }
            }
        }
        // append_ts(0) sorts after every version of the key, before the next key.
        let last = Key::from_raw(b"a").append_ts(TimeStamp::zero());
        assert!(Key::from_raw(b"a").append_ts(ts(1)) < last);
        assert!(last < Key::from_raw(b"a\0").append_ts(TimeStamp::max()));
    }

    #[test]
    fn ts_slice_helpers() {
        let tk = Key::from_raw(b"k").append_ts(ts(123));
        let bytes = tk.as_encoded();
        assert_eq!(Key::decode_ts_from(bytes), Ok(ts(123)));
        assert_eq!(Key::truncate_ts_for(bytes), Ok(&bytes[..9]));
        assert!(Key::is_user_key_eq(bytes, Key::from_raw(b"k").as_encoded()));
        assert!(!Key::is_user_key_eq(
            bytes,
            Key::from_raw(b"j").as_encoded()
        ));
        assert!(!Key::is_user_key_eq(
            &bytes[..16],
            Key::from_raw(b"k").as_encoded()
        ));
        for short in [&[][..], &[1, 2, 3, 4, 5, 6, 7]] {
            let len = short.len();
            assert_eq!(
                Key::decode_ts_from(short),
                Err(DecodeError::KeyLength { len })
            );
            assert_eq!(
                Key::split_on_ts_for(short),
                Err(DecodeError::KeyLength { len })
            );
            assert_eq!(
                Key::truncate_ts_for(short),
                Err(DecodeError::KeyLength { len })
            );
            assert_eq!(
                Key::from_encoded_slice(short).truncate_ts(),
                Err(DecodeError::KeyLength { len })
            );
            assert_eq!(
                TimestampedKey::from_encoded(short.to_vec()),
                Err(DecodeError::KeyLength { len })
            );
        }
        let eight = TimestampedKey::from_encoded(vec![0xff; 8]).unwrap();
        assert_eq!(eight.ts(), TimeStamp::zero());
        assert!(eight.user_key().is_empty());
    }

    #[test]
    fn is_encoded_from_cases() {
        let cases: [&[u8]; 6] = [
            b"",
            b"\0",
            b"abc",
            b"12345678",
            b"123456789",
            b"1234567812345678",
        ];
        for a in cases {
            for b in cases {
                assert_eq!(
                    Key::from_raw(a).is_encoded_from(b),
                    a == b,
                    "{a:?} vs {b:?}"
                );
            }
            // A ts suffix, an empty buffer, or a bad pad/marker is never "encoded from".
            let tk = Key::from_raw(a).append_ts(ts(1));
            assert!(!Key::from_encoded(tk.into_encoded()).is_encoded_from(a));
        }
        assert!(!Key::from_encoded(vec![]).is_encoded_from(b""));
        assert!(!Key::from_encoded(vec![0, 0, 0, 0, 0, 0, 0, 1, 0xf7]).is_encoded_from(b""));
        assert!(!Key::from_encoded(vec![0, 0, 0, 0, 0, 0, 0, 0, 0xf8]).is_encoded_from(b""));
        assert!(!Key::from_encoded(vec![b'a', 0, 0, 0, 0, 0, 0, 0, 0xf7]).is_encoded_from(b"a"));
    }

    #[test]
    fn display_and_debug() {
        let k = Key::from_raw(b"ab\x00\\\n~");
        assert_eq!(k.to_string(), "ab\\x00\\\\\\x0a~");
        assert_eq!(format!("{k:?}"), "Key(ab\\x00\\\\\\x0a~)");
        assert_eq!(
            Key::from_encoded(vec![0xab, 0x01]).to_string(),
            "encoded:ab01"
        );
        let tk = Key::from_raw(b"k").append_ts(ts(100));
        assert_eq!(tk.to_string(), "k@100");
        assert_eq!(format!("{tk:?}"), "TimestampedKey(k@100)");
        let odd =
            TimestampedKey::from_encoded(vec![1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe])
                .unwrap();
        assert_eq!(odd.to_string(), "encoded:01@1");
    }
}
