//! Primitive byte encodings shared by [`Key`](crate::Key), [`Lock`](crate::Lock)
//! and [`Write`](crate::Write), byte-compatible with TiKV's `tikv_util::codec`.
//!
//! | encoding | width | used for |
//! |---|---|---|
//! | [`encode_u64`] | 8 bytes, big-endian | fixed-width optional fields (`for_update_ts`, `gc_fence`, …) |
//! | [`encode_u64_desc`] | 8 bytes, big-endian of `!v` | the timestamp suffix of keys (newest first) |
//! | [`encode_var_u64`] | 1–10 bytes, LEB128 | `start_ts`, `ttl`, counts, `txn_source` |
//! | [`encode_var_i64`] | 1–10 bytes, zig-zag LEB128 | the length prefix of compact bytes |
//! | [`encode_compact_bytes`] | zig-zag length + bytes | primary and secondary keys inside a lock |
//! | [`encode_bytes`] | `9 * (len / 8 + 1)` bytes | memcomparable user keys |
//!
//! Every decoder takes `&mut &[u8]`, reads from the front and advances the
//! slice past what it consumed. On error the slice is left unchanged.
//!
//! Decoders never panic: input comes from disk and may be corrupt, so every
//! malformed shape is a [`DecodeError`] variant carrying what was wrong.

/// What went wrong while decoding bytes produced by (or claiming to be from)
/// TiKV's encoders.
///
/// Every variant carries the offending values rather than a preformatted
/// message, so callers can report or match on them.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended in the middle of a field.
    #[error("unexpected end of input while reading {what}")]
    UnexpectedEof {
        /// The field being read.
        what: &'static str,
    },
    /// A varint did not end within 10 bytes, or its 10th byte carries more
    /// than the single bit left in a `u64`.
    #[error("varint does not fit in a u64")]
    VarintOverflow,
    /// A memcomparable group has a marker saying more than 8 pad bytes, or
    /// its pad bytes are not all zero.
    #[error("invalid padding in a memcomparable-encoded key")]
    KeyPadding,
    /// Bytes follow the terminating group of a memcomparable key that must
    /// stand alone (for example a timestamp left on a [`Key`](crate::Key)).
    #[error("{len} unexpected bytes after the end of a memcomparable key")]
    TrailingBytes {
        /// How many bytes were left over.
        len: usize,
    },
    /// A key is too short to end in an 8-byte timestamp.
    #[error("key of {len} bytes is too short to carry an 8-byte timestamp")]
    KeyLength {
        /// The key's length in bytes.
        len: usize,
    },
    /// The first byte of a lock record is not a supported lock type.
    /// (`H`, TiKV's shared-lock container, is deliberately unsupported.)
    #[error("unknown lock type byte {0:#04x}")]
    BadLockType(u8),
    /// The first byte of a write record is not a write type.
    #[error("unknown write type byte {0:#04x}")]
    BadWriteType(u8),
    /// A short value's length byte claims more bytes than remain.
    #[error("short value of {len} bytes overruns the {remaining} remaining bytes")]
    ShortValueOverrun {
        /// The length claimed by the length byte.
        len: usize,
        /// The bytes actually left in the input.
        remaining: usize,
    },
    /// A compact-bytes length is negative or claims more bytes than remain.
    #[error("compact bytes length {len} is invalid with {remaining} bytes remaining")]
    CompactBytesLength {
        /// The decoded (zig-zag) length.
        len: i64,
        /// The bytes actually left in the input.
        remaining: usize,
    },
    /// A `last_change` field with a non-zero timestamp but zero versions
    /// (TiKV panics on this; it cannot be produced by a correct writer).
    #[error("last_change has ts {ts} but {versions} versions")]
    BadLastChange {
        /// The stored `last_change_ts`.
        ts: u64,
        /// The stored `estimated_versions_to_last_change`.
        versions: u64,
    },
    /// The last byte of an observer notification key (the `notify`
    /// column family, see `percolate-txn`'s `notify` module) is not a
    /// notification kind.
    #[error("unknown notification kind byte {0:#04x}")]
    BadNotifyKind(u8),
    /// A commit record whose transaction started after the commit_ts in
    /// its key: a correct writer commits above the start_ts.
    #[error("a commit record at commit_ts {commit_ts} of a transaction started at {start_ts}")]
    CommitBeforeStart {
        /// The start_ts the record holds.
        start_ts: u64,
        /// The commit_ts in its key.
        commit_ts: u64,
    },
    /// The input was empty where a record was expected.
    #[error("empty {what}")]
    Empty {
        /// The record that was expected.
        what: &'static str,
    },
}

/// The result type of every decoder in this crate.
pub type DecodeResult<T> = Result<T, DecodeError>;

/// Bytes per memcomparable group, before the marker byte.
const GROUP_SIZE: usize = 8;
/// Marker of a full group that is followed by another group.
const GROUP_MARKER: u8 = 0xFF;
/// Longest varint encoding of a `u64`.
const MAX_VARINT_LEN: usize = 10;

/// Splits a fixed-size array off the front of `data`, advancing it.
fn take_array<'a, const N: usize>(
    data: &mut &'a [u8],
    what: &'static str,
) -> DecodeResult<&'a [u8; N]> {
    let (head, rest) = data
        .split_first_chunk::<N>()
        .ok_or(DecodeError::UnexpectedEof { what })?;
    *data = rest;
    Ok(head)
}

/// Reads one byte from the front of `data`, advancing it.
pub(crate) fn read_u8(data: &mut &[u8], what: &'static str) -> DecodeResult<u8> {
    take_array::<1>(data, what).map(|[b]| *b)
}

// ---------------------------------------------------------------------------
// Fixed-width integers

/// Appends `v` as 8 big-endian bytes.
///
/// ```
/// # use percolate_mvcc::codec::encode_u64;
/// let mut buf = vec![];
/// encode_u64(&mut buf, 333);
/// assert_eq!(buf, [0, 0, 0, 0, 0, 0, 0x01, 0x4d]);
/// ```
pub fn encode_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// Reads 8 big-endian bytes written by [`encode_u64`].
///
/// ```
/// # use percolate_mvcc::codec::decode_u64;
/// let mut data: &[u8] = &[0, 0, 0, 0, 0, 0, 0x01, 0x4d, 0xaa];
/// assert_eq!(decode_u64(&mut data), Ok(333));
/// assert_eq!(data, [0xaa]);
/// ```
pub fn decode_u64(data: &mut &[u8]) -> DecodeResult<u64> {
    read_u64(data, "u64")
}

/// [`decode_u64`] naming the field in the EOF error.
pub(crate) fn read_u64(data: &mut &[u8], what: &'static str) -> DecodeResult<u64> {
    take_array::<8>(data, what).map(|b| u64::from_be_bytes(*b))
}

/// Appends `!v` as 8 big-endian bytes, so that larger values sort first.
/// This is how a timestamp is appended to a key.
///
/// ```
/// # use percolate_mvcc::codec::encode_u64_desc;
/// let mut buf = vec![];
/// encode_u64_desc(&mut buf, 3);
/// assert_eq!(buf, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc]);
/// ```
pub fn encode_u64_desc(buf: &mut Vec<u8>, v: u64) {
    encode_u64(buf, !v);
}

/// Reads 8 bytes written by [`encode_u64_desc`].
///
/// ```
/// # use percolate_mvcc::codec::decode_u64_desc;
/// let mut data: &[u8] = &[0xff; 8];
/// assert_eq!(decode_u64_desc(&mut data), Ok(0));
/// ```
pub fn decode_u64_desc(data: &mut &[u8]) -> DecodeResult<u64> {
    read_u64(data, "descending u64").map(|v| !v)
}

// ---------------------------------------------------------------------------
// Varints

/// Appends `v` as an unsigned LEB128 varint: 7 bits per byte, least
/// significant group first, high bit set on every byte but the last.
/// Identical to protobuf's `uint64` encoding; 1 to 10 bytes.
///
/// ```
/// # use percolate_mvcc::codec::encode_var_u64;
/// let mut buf = vec![];
/// encode_var_u64(&mut buf, 456);
/// assert_eq!(buf, [0xc8, 0x03]);
/// ```
pub fn encode_var_u64(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        // Truncation to the low 7 bits is the point of the encoding.
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Reads a varint written by [`encode_var_u64`].
///
/// Like TiKV, it accepts non-minimal encodings (`80 00` is 0). It rejects a
/// varint whose 10th byte is above 1 ([`DecodeError::VarintOverflow`]) and a
/// varint cut short ([`DecodeError::UnexpectedEof`]).
///
/// ```
/// # use percolate_mvcc::codec::{decode_var_u64, DecodeError};
/// let mut data: &[u8] = &[0xde, 0x01];
/// assert_eq!(decode_var_u64(&mut data), Ok(222));
/// assert!(data.is_empty());
/// let mut cut: &[u8] = &[0xde];
/// assert!(matches!(decode_var_u64(&mut cut), Err(DecodeError::UnexpectedEof { .. })));
/// ```
pub fn decode_var_u64(data: &mut &[u8]) -> DecodeResult<u64> {
    read_var_u64(data, "varint")
}

/// [`decode_var_u64`] naming the field in the EOF error.
pub(crate) fn read_var_u64(data: &mut &[u8], what: &'static str) -> DecodeResult<u64> {
    let input = *data;
    let mut v = 0u64;
    for (i, &b) in input.iter().take(MAX_VARINT_LEN).enumerate() {
        let shift = 7 * i as u32;
        if b < 0x80 {
            if i == MAX_VARINT_LEN - 1 && b > 1 {
                return Err(DecodeError::VarintOverflow);
            }
            *data = input.get(i + 1..).unwrap_or_default();
            return Ok(v | (u64::from(b) << shift));
        }
        v |= u64::from(b & 0x7F) << shift;
    }
    if input.len() >= MAX_VARINT_LEN {
        Err(DecodeError::VarintOverflow)
    } else {
        Err(DecodeError::UnexpectedEof { what })
    }
}

/// Appends `v` zig-zag encoded (`v << 1`, bit-inverted when negative) as a
/// varint, so small magnitudes of either sign stay short.
///
/// ```
/// # use percolate_mvcc::codec::encode_var_i64;
/// let mut buf = vec![];
/// encode_var_i64(&mut buf, 64);
/// encode_var_i64(&mut buf, -1);
/// assert_eq!(buf, [0x80, 0x01, 0x01]);
/// ```
pub fn encode_var_i64(buf: &mut Vec<u8>, v: i64) {
    let zigzag = ((v as u64) << 1) ^ ((v >> 63) as u64);
    encode_var_u64(buf, zigzag);
}

/// Reads a varint written by [`encode_var_i64`].
///
/// ```
/// # use percolate_mvcc::codec::decode_var_i64;
/// let mut data: &[u8] = &[0x80, 0x01, 0x01];
/// assert_eq!(decode_var_i64(&mut data), Ok(64));
/// assert_eq!(decode_var_i64(&mut data), Ok(-1));
/// ```
pub fn decode_var_i64(data: &mut &[u8]) -> DecodeResult<i64> {
    read_var_i64(data, "signed varint")
}

/// [`decode_var_i64`] naming the field in the EOF error.
fn read_var_i64(data: &mut &[u8], what: &'static str) -> DecodeResult<i64> {
    let zigzag = read_var_u64(data, what)?;
    Ok(((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64))
}

// ---------------------------------------------------------------------------
// Compact bytes

/// Appends `data` prefixed with its length as a **zig-zag** varint
/// ([`encode_var_i64`]): length 2 is written `04`, not `02`.
///
/// ```
/// # use percolate_mvcc::codec::encode_compact_bytes;
/// let mut buf = vec![];
/// encode_compact_bytes(&mut buf, b"pk");
/// assert_eq!(buf, [0x04, b'p', b'k']);
/// ```
pub fn encode_compact_bytes(buf: &mut Vec<u8>, data: &[u8]) {
    // A slice is at most isize::MAX bytes long, so its length fits in i64.
    encode_var_i64(buf, data.len() as i64);
    buf.extend_from_slice(data);
}

/// Reads bytes written by [`encode_compact_bytes`], borrowing them from the
/// input. A negative length or one longer than the remaining input is
/// [`DecodeError::CompactBytesLength`].
///
/// ```
/// # use percolate_mvcc::codec::decode_compact_bytes;
/// let mut data: &[u8] = &[0x04, b'p', b'k', 0x01];
/// assert_eq!(decode_compact_bytes(&mut data), Ok(&b"pk"[..]));
/// assert_eq!(data, [0x01]);
/// ```
pub fn decode_compact_bytes<'a>(data: &mut &'a [u8]) -> DecodeResult<&'a [u8]> {
    read_compact_bytes(data, "compact bytes length")
}

/// [`decode_compact_bytes`] naming the field in the EOF error.
pub(crate) fn read_compact_bytes<'a>(
    data: &mut &'a [u8],
    what: &'static str,
) -> DecodeResult<&'a [u8]> {
    let mut rest = *data;
    let len = read_var_i64(&mut rest, what)?;
    let bytes = usize::try_from(len)
        .ok()
        .and_then(|n| rest.get(..n))
        .ok_or(DecodeError::CompactBytesLength {
            len,
            remaining: rest.len(),
        })?;
    *data = rest.get(bytes.len()..).unwrap_or_default();
    Ok(bytes)
}

// ---------------------------------------------------------------------------
// Memcomparable bytes

/// The encoded length of a raw key of `n` bytes under [`encode_bytes`]:
/// one 9-byte group per started 8 bytes, plus one when `n` is a multiple of
/// 8 (there is always a final, padded group).
///
/// ```
/// # use percolate_mvcc::codec::max_encoded_bytes_size;
/// assert_eq!(max_encoded_bytes_size(0), 9);
/// assert_eq!(max_encoded_bytes_size(7), 9);
/// assert_eq!(max_encoded_bytes_size(8), 18);
/// ```
pub fn max_encoded_bytes_size(n: usize) -> usize {
    (n / GROUP_SIZE + 1) * (GROUP_SIZE + 1)
}

/// The 9-byte groups of `raw` under [`encode_bytes`], in order.
///
/// Each full 8 raw bytes become a group with marker `0xFF`. The 0–7 bytes
/// left over become a final group padded with `pad` zero bytes and marked
/// `0xFF - pad` (so the final marker is `0xF7..=0xFE`, never `0xFF`).
pub(crate) fn encoded_groups(raw: &[u8]) -> impl Iterator<Item = [u8; GROUP_SIZE + 1]> + '_ {
    let full = raw.chunks_exact(GROUP_SIZE);
    let tail = full.remainder();
    let full = full.map(|chunk| group(chunk, GROUP_MARKER));
    // `tail.len() < 8`, so the pad is 1..=8 and the marker 0xF7..=0xFE.
    let pad = (GROUP_SIZE - tail.len()) as u8;
    full.chain(std::iter::once(group(tail, GROUP_MARKER - pad)))
}

/// One group: `data` (at most 8 bytes), zero padding, then `marker`.
fn group(data: &[u8], marker: u8) -> [u8; GROUP_SIZE + 1] {
    let mut g = [0u8; GROUP_SIZE + 1];
    for (dst, src) in g.iter_mut().zip(data) {
        *dst = *src;
    }
    g[GROUP_SIZE] = marker;
    g
}

/// Appends `raw` in TiKV's memcomparable ascending form: the encoded bytes
/// compare (as plain byte strings) exactly as the raw bytes do, and the
/// encoding is self-delimiting, so anything may be appended after it.
///
/// The raw bytes are cut into groups of 8, each followed by a marker byte
/// (see [`max_encoded_bytes_size`] for the length):
///
/// ```
/// # use percolate_mvcc::codec::encode_bytes;
/// let mut buf = vec![];
/// encode_bytes(&mut buf, &[1, 2, 3]);
/// assert_eq!(buf, [1, 2, 3, 0, 0, 0, 0, 0, 0xfa]); // 5 pad bytes: 0xff - 5
///
/// let mut buf = vec![];
/// encode_bytes(&mut buf, b"12345678"); // a full group, then an empty one
/// assert_eq!(buf, b"12345678\xff\0\0\0\0\0\0\0\0\xf7");
/// ```
pub fn encode_bytes(buf: &mut Vec<u8>, raw: &[u8]) {
    buf.reserve(max_encoded_bytes_size(raw.len()));
    for g in encoded_groups(raw) {
        buf.extend_from_slice(&g);
    }
}

/// Appends `raw` in the memcomparable *descending* form: [`encode_bytes`]
/// with every byte inverted, so encoded keys sort in reverse raw order.
/// [`Key`](crate::Key) never uses it; it is here for codec fidelity.
///
/// ```
/// # use percolate_mvcc::codec::encode_bytes_desc;
/// let mut buf = vec![];
/// encode_bytes_desc(&mut buf, &[]);
/// assert_eq!(buf, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x08]);
/// ```
pub fn encode_bytes_desc(buf: &mut Vec<u8>, raw: &[u8]) {
    buf.reserve(max_encoded_bytes_size(raw.len()));
    for g in encoded_groups(raw) {
        buf.extend(g.iter().map(|b| !b));
    }
}

/// Reads one key written by [`encode_bytes`] and returns the raw bytes,
/// leaving `data` just after the terminating group (a timestamp that
/// follows is not read).
///
/// A marker meaning more than 8 pad bytes, or non-zero pad bytes, is
/// [`DecodeError::KeyPadding`]; input ending before the terminating group
/// is [`DecodeError::UnexpectedEof`].
///
/// ```
/// # use percolate_mvcc::codec::{decode_bytes, DecodeError};
/// let mut data: &[u8] = &[1, 2, 3, 0, 0, 0, 0, 0, 0xfa, 0xee];
/// assert_eq!(decode_bytes(&mut data), Ok(vec![1, 2, 3]));
/// assert_eq!(data, [0xee]);
///
/// let mut bad: &[u8] = &[0, 0, 0, 0, 0, 0, 0, 0, 0xf6]; // 9 pad bytes
/// assert_eq!(decode_bytes(&mut bad), Err(DecodeError::KeyPadding));
/// ```
pub fn decode_bytes(data: &mut &[u8]) -> DecodeResult<Vec<u8>> {
    decode_groups(data, false)
}

/// Reads one key written by [`encode_bytes_desc`]; otherwise like
/// [`decode_bytes`].
///
/// ```
/// # use percolate_mvcc::codec::decode_bytes_desc;
/// let mut data: &[u8] = &[0xfe, 0xfd, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0x04];
/// assert_eq!(decode_bytes_desc(&mut data), Ok(vec![1, 2, 3, 0]));
/// ```
pub fn decode_bytes_desc(data: &mut &[u8]) -> DecodeResult<Vec<u8>> {
    decode_groups(data, true)
}

/// Decodes, in place and without allocating, a buffer that holds exactly
/// one key written by [`encode_bytes`]: the raw bytes are moved to the
/// front and the buffer cut to their length. The raw form is never longer
/// than the encoded one (8 bytes of every 9), so each group moves down.
///
/// The whole buffer is checked before a byte moves: on error it is left
/// as it was. Bytes after the terminating group are
/// [`DecodeError::TrailingBytes`]; otherwise the errors of
/// [`decode_bytes`].
///
/// ```
/// # use percolate_mvcc::codec::{decode_bytes_in_place, encode_bytes};
/// let mut buf = Vec::new();
/// encode_bytes(&mut buf, b"a key longer than one group");
/// decode_bytes_in_place(&mut buf).unwrap();
/// assert_eq!(buf, b"a key longer than one group");
/// ```
pub fn decode_bytes_in_place(buf: &mut Vec<u8>) -> DecodeResult<()> {
    let mut rest = buf.as_slice();
    let raw_len = decoded_len(&mut rest)?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes { len: rest.len() });
    }
    let mut written = 0;
    let mut read = 0;
    while written < raw_len {
        let take = GROUP_SIZE.min(raw_len - written);
        buf.copy_within(read..read + take, written);
        written += take;
        read += GROUP_SIZE + 1;
    }
    buf.truncate(raw_len);
    Ok(())
}

/// Checks that `encoded` is exactly one key written by [`encode_bytes`],
/// without decoding it: the errors of [`decode_bytes_in_place`].
///
/// ```
/// # use percolate_mvcc::codec::{check_encoded_bytes, encode_bytes, DecodeError};
/// let mut buf = Vec::new();
/// encode_bytes(&mut buf, b"key");
/// assert_eq!(check_encoded_bytes(&buf), Ok(()));
/// assert_eq!(check_encoded_bytes(b"key"), Err(DecodeError::UnexpectedEof { what: "memcomparable key group" }));
/// ```
pub fn check_encoded_bytes(encoded: &[u8]) -> DecodeResult<()> {
    let mut rest = encoded;
    decoded_len(&mut rest)?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes { len: rest.len() });
    }
    Ok(())
}

/// Checks one ascending key as [`decode_bytes`] would and returns the
/// length of its raw form, leaving `data` just after it.
fn decoded_len(data: &mut &[u8]) -> DecodeResult<usize> {
    let mut rest = *data;
    let mut len = 0;
    loop {
        let [bytes @ .., marker] =
            take_array::<{ GROUP_SIZE + 1 }>(&mut rest, "memcomparable key group")?;
        let pad = usize::from(GROUP_MARKER - marker);
        if pad == 0 {
            len += GROUP_SIZE;
            continue;
        }
        if pad > GROUP_SIZE {
            return Err(DecodeError::KeyPadding);
        }
        if bytes[GROUP_SIZE - pad..].iter().any(|&b| b != 0) {
            return Err(DecodeError::KeyPadding);
        }
        *data = rest;
        return Ok(len + GROUP_SIZE - pad);
    }
}

/// Shared body of [`decode_bytes`] and [`decode_bytes_desc`]. Bytes are
/// un-inverted as they are read when `desc` is set.
fn decode_groups(data: &mut &[u8], desc: bool) -> DecodeResult<Vec<u8>> {
    let flip = if desc { 0xFF } else { 0x00 };
    let mut rest = *data;
    let mut raw = Vec::with_capacity(rest.len() / (GROUP_SIZE + 1) * GROUP_SIZE);
    loop {
        let [bytes @ .., marker] =
            take_array::<{ GROUP_SIZE + 1 }>(&mut rest, "memcomparable key group")?;
        let pad = usize::from(GROUP_MARKER - (marker ^ flip));
        if pad == 0 {
            raw.extend(bytes.iter().map(|b| b ^ flip));
            continue;
        }
        if pad > GROUP_SIZE {
            return Err(DecodeError::KeyPadding);
        }
        let (kept, padding) = bytes.split_at(GROUP_SIZE - pad);
        if padding.iter().any(|&b| b != flip) {
            return Err(DecodeError::KeyPadding);
        }
        raw.extend(kept.iter().map(|b| b ^ flip));
        *data = rest;
        return Ok(raw);
    }
}

/// Bytes from a hex string that may contain spaces, for tests.
#[cfg(test)]
pub(crate) fn test_hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var_u64(v: u64) -> Vec<u8> {
        let mut buf = vec![];
        encode_var_u64(&mut buf, v);
        buf
    }

    #[test]
    fn var_u64_spec_examples() {
        let cases: &[(u64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (222, &[0xde, 0x01]),
            (456, &[0xc8, 0x03]),
            (1 << 20, &[0x80, 0x80, 0x40]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ];
        for &(v, bytes) in cases {
            assert_eq!(var_u64(v), bytes, "encode {v}");
            let mut data = bytes;
            assert_eq!(decode_var_u64(&mut data), Ok(v), "decode {v}");
            assert!(data.is_empty());
        }
    }

    #[test]
    fn var_u64_rejects_overflow_and_eof() {
        let mut ten = [0xffu8; 10];
        ten[9] = 0x02;
        assert_eq!(
            decode_var_u64(&mut &ten[..]),
            Err(DecodeError::VarintOverflow)
        );
        let eleven = [0x80u8; 11];
        assert_eq!(
            decode_var_u64(&mut &eleven[..]),
            Err(DecodeError::VarintOverflow)
        );
        for cut in [&[][..], &[0x80], &[0xff; 9]] {
            let mut data = cut;
            assert!(matches!(
                decode_var_u64(&mut data),
                Err(DecodeError::UnexpectedEof { .. })
            ));
            assert_eq!(data, cut, "input untouched on error");
        }
        // Non-minimal encodings are accepted, as in TiKV.
        assert_eq!(decode_var_u64(&mut &[0x80, 0x00][..]), Ok(0));
    }

    #[test]
    fn var_i64_zigzag() {
        for (v, bytes) in [
            (0i64, vec![0x00]),
            (-1, vec![0x01]),
            (1, vec![0x02]),
            (64, vec![0x80, 0x01]),
        ] {
            let mut buf = vec![];
            encode_var_i64(&mut buf, v);
            assert_eq!(buf, bytes);
            assert_eq!(decode_var_i64(&mut &buf[..]), Ok(v));
        }
        for v in [i64::MIN, i64::MAX, -12345, 12345] {
            let mut buf = vec![];
            encode_var_i64(&mut buf, v);
            assert_eq!(decode_var_i64(&mut &buf[..]), Ok(v));
        }
    }

    #[test]
    fn compact_bytes_lengths_are_zigzag() {
        for (len, prefix) in [
            (2usize, vec![0x04]),
            (6, vec![0x0c]),
            (64, vec![0x80, 0x01]),
        ] {
            let data = vec![b'x'; len];
            let mut buf = vec![];
            encode_compact_bytes(&mut buf, &data);
            assert_eq!(buf[..prefix.len()], prefix[..]);
            let mut rest = &buf[..];
            assert_eq!(decode_compact_bytes(&mut rest), Ok(&data[..]));
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn compact_bytes_rejects_bad_lengths() {
        // Length 3 with 2 bytes left.
        assert_eq!(
            decode_compact_bytes(&mut &[0x06, 1, 2][..]),
            Err(DecodeError::CompactBytesLength {
                len: 3,
                remaining: 2
            })
        );
        // Length -1.
        assert_eq!(
            decode_compact_bytes(&mut &[0x01, 1][..]),
            Err(DecodeError::CompactBytesLength {
                len: -1,
                remaining: 1
            })
        );
        assert!(matches!(
            decode_compact_bytes(&mut &[][..]),
            Err(DecodeError::UnexpectedEof { .. })
        ));
    }

    #[test]
    fn u64_fixed_and_desc() {
        let mut buf = vec![];
        encode_u64(&mut buf, 0x0102_0304_0506_0708);
        encode_u64_desc(&mut buf, 3);
        assert_eq!(
            buf,
            [
                1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc
            ]
        );
        let mut data = &buf[..];
        assert_eq!(decode_u64(&mut data), Ok(0x0102_0304_0506_0708));
        assert_eq!(decode_u64_desc(&mut data), Ok(3));
        assert!(matches!(
            decode_u64(&mut data),
            Err(DecodeError::UnexpectedEof { .. })
        ));
        assert!(matches!(
            decode_u64(&mut &[0u8; 7][..]),
            Err(DecodeError::UnexpectedEof { .. })
        ));
    }

    /// `test_enc_dec_bytes` in TiKV's `tikv_util/src/codec/bytes.rs`
    /// (docs/FORMAT.md, "Byte literals from TiKV's tests").
    #[test]
    fn enc_dec_bytes_tikv_literals() {
        let cases: &[(&[u8], &[u8], &[u8])] = &[
            (
                &[],
                &[0, 0, 0, 0, 0, 0, 0, 0, 247],
                &[255, 255, 255, 255, 255, 255, 255, 255, 8],
            ),
            (
                &[0],
                &[0, 0, 0, 0, 0, 0, 0, 0, 248],
                &[255, 255, 255, 255, 255, 255, 255, 255, 7],
            ),
            (
                &[1, 2, 3],
                &[1, 2, 3, 0, 0, 0, 0, 0, 250],
                &[254, 253, 252, 255, 255, 255, 255, 255, 5],
            ),
            (
                &[1, 2, 3, 0],
                &[1, 2, 3, 0, 0, 0, 0, 0, 251],
                &[254, 253, 252, 255, 255, 255, 255, 255, 4],
            ),
            (
                &[1, 2, 3, 4, 5, 6, 7],
                &[1, 2, 3, 4, 5, 6, 7, 0, 254],
                &[254, 253, 252, 251, 250, 249, 248, 255, 1],
            ),
            (
                &[0, 0, 0, 0, 0, 0, 0, 0],
                &[0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0, 0, 0, 0, 0, 0, 247],
                &[
                    255, 255, 255, 255, 255, 255, 255, 255, 0, 255, 255, 255, 255, 255, 255, 255,
                    255, 8,
                ],
            ),
            (
                &[1, 2, 3, 4, 5, 6, 7, 8],
                &[1, 2, 3, 4, 5, 6, 7, 8, 255, 0, 0, 0, 0, 0, 0, 0, 0, 247],
                &[
                    254, 253, 252, 251, 250, 249, 248, 247, 0, 255, 255, 255, 255, 255, 255, 255,
                    255, 8,
                ],
            ),
            (
                &[1, 2, 3, 4, 5, 6, 7, 8, 9],
                &[1, 2, 3, 4, 5, 6, 7, 8, 255, 9, 0, 0, 0, 0, 0, 0, 0, 248],
                &[
                    254, 253, 252, 251, 250, 249, 248, 247, 0, 246, 255, 255, 255, 255, 255, 255,
                    255, 7,
                ],
            ),
        ];
        for &(raw, asc, desc) in cases {
            let mut buf = vec![];
            encode_bytes(&mut buf, raw);
            assert_eq!(buf, asc, "asc {raw:?}");
            assert_eq!(buf.len(), max_encoded_bytes_size(raw.len()));
            let mut buf = vec![];
            encode_bytes_desc(&mut buf, raw);
            assert_eq!(buf, desc, "desc {raw:?}");

            let mut data = asc;
            assert_eq!(decode_bytes(&mut data).as_deref(), Ok(raw));
            assert!(data.is_empty());
            let mut in_place = asc.to_vec();
            assert_eq!(decode_bytes_in_place(&mut in_place), Ok(()));
            assert_eq!(in_place, raw);
            let mut data = desc;
            assert_eq!(decode_bytes_desc(&mut data).as_deref(), Ok(raw));
            assert!(data.is_empty());
        }
    }

    /// Inputs of the kind `test_dec_bytes_fail` rejects (docs/FORMAT.md,
    /// "Memcomparable key encoding").
    #[test]
    fn dec_bytes_fail() {
        let invalid: &[&[u8]] = &[
            &[1, 2, 3, 4],
            &[0, 0, 0, 0, 0, 0, 0, 247],
            &[0, 0, 0, 0, 0, 0, 0, 0, 246],
            &[0, 0, 0, 0, 0, 0, 0, 1, 247],
            &[1, 2, 3, 4, 5, 6, 7, 8, 0],
            &[1, 2, 3, 4, 5, 6, 7, 8, 255, 1],
            &[1, 2, 3, 4, 5, 6, 7, 8, 255, 1, 2, 3, 4, 5, 6, 7, 8],
            &[1, 2, 3, 4, 5, 6, 7, 8, 255, 1, 2, 3, 4, 5, 6, 7, 8, 255],
            &[1, 2, 3, 4, 5, 6, 7, 8, 255, 1, 2, 3, 4, 5, 6, 7, 8, 0],
            &[],
        ];
        for &bad in invalid {
            let mut data = bad;
            assert!(decode_bytes(&mut data).is_err(), "{bad:?} must be rejected");
            assert_eq!(data, bad, "input untouched on error");
            let mut in_place = bad.to_vec();
            assert!(decode_bytes_in_place(&mut in_place).is_err(), "{bad:?}");
            assert_eq!(in_place, bad, "buffer untouched on error");
        }
        assert_eq!(
            decode_bytes(&mut &[0, 0, 0, 0, 0, 0, 0, 0, 0xf6][..]),
            Err(DecodeError::KeyPadding)
        );
        assert_eq!(
            decode_bytes(&mut &[0, 0, 0, 0, 0, 0, 0, 1, 0xf7][..]),
            Err(DecodeError::KeyPadding)
        );
        assert_eq!(
            decode_bytes(&mut &[1, 2, 3, 4, 5, 6, 7, 8, 0][..]),
            Err(DecodeError::KeyPadding)
        );
        // Desc padding must be 0xff.
        assert_eq!(
            decode_bytes_desc(&mut &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0x08][..]),
            Err(DecodeError::KeyPadding)
        );
    }

    proptest::proptest! {
        /// Decoding in place answers as decoding into a new buffer does,
        /// for any raw key, with or without bytes after it.
        #[test]
        fn in_place_decoding_agrees(raw in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
                                    tail in proptest::collection::vec(proptest::num::u8::ANY, 0..3)) {
            let mut buf = Vec::new();
            encode_bytes(&mut buf, &raw);
            buf.extend_from_slice(&tail);
            let mut data = buf.as_slice();
            let copied = decode_bytes(&mut data).map(|raw| (raw, data.len()));
            let mut in_place = buf.clone();
            match decode_bytes_in_place(&mut in_place) {
                Ok(()) => proptest::prop_assert_eq!(copied, Ok((in_place, 0))),
                Err(DecodeError::TrailingBytes { len }) => {
                    proptest::prop_assert_eq!(copied.map(|(_, rest)| rest), Ok(len));
                    proptest::prop_assert_eq!(in_place, buf);
                }
                Err(e) => proptest::prop_assert!(false, "{e:?}"),
            }
        }
    }

    #[test]
    fn encoded_bytes_sort_like_raw() {
        let raws: &[&[u8]] = &[
            b"",
            b"\0",
            b"\0\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0",
            b"a\0\0\0\0\0\0\0\0",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"b",
            b"\xff",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        let enc = |r: &[u8]| {
            let mut b = vec![];
            encode_bytes(&mut b, r);
            b
        };
        for a in raws {
            for b in raws {
                assert_eq!(a.cmp(b), enc(a).cmp(&enc(b)), "{a:?} vs {b:?}");
            }
        }
    }
}
