//! Observer notifications: the entries of the `notify` column family
//! ([`Cf::Notify`]), the Percolator paper's notify column.
//!
//! A notification says "an observer may have work on this key": it is a
//! hint, not transactional, and never read by a transaction. The
//! [observers](crate::client::Watch) and their workers are in
//! `client::observe`; this module is the format, shared by the client and
//! by the [`Prewrite`](crate::commands::Prewrite) command that writes the
//! strong ones.
//!
//! | bytes | field |
//! |---|---|
//! | `0 .. n` | the watched key, encoded ([`Key`]'s memcomparable form) |
//! | `n .. n+8` | ts, big-endian: the writer's start_ts (strong) or a fresh ts (weak) |
//! | `n+8` | kind: `s` strong, `w` weak |
//!
//! The value is empty. The engine stores the key behind its data prefix
//! `z`, as every other key.
//!
//! A key's notifications are one contiguous range (no encoded key is a
//! prefix of another), so a worker reads them all with one short scan, and
//! each writer's entry is its own key: a worker deletes exactly the entries
//! it saw, never one written after it looked (see `client::observe` for
//! when it may).

use percolate_engine::{Cf, WriteBatch};
use percolate_mvcc::codec::DecodeError;
use percolate_mvcc::{Key, TimeStamp};

/// The bytes after the encoded key: the ts and the kind.
const SUFFIX_LEN: usize = 8 + 1;
/// The shortest encoded key: one group of 8 bytes and its marker.
const MIN_ENCODED_LEN: usize = 9;

/// How a notification was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotifyKind {
    /// By a transaction that wrote the watched key, in the same atomic
    /// write as its lock (2PC, async commit) or its commit (1PC); the ts is
    /// its start_ts. An observer runs for it if the key changed after the
    /// observer's acknowledgement.
    Strong,
    /// By [`Client::notify`](crate::client::Client::notify), outside any
    /// transaction; the ts is a fresh one from the oracle. Every observer
    /// of the key runs for it once (if none ran since), changed or not.
    Weak,
}

impl NotifyKind {
    /// The kind's byte.
    pub const fn byte(self) -> u8 {
        match self {
            NotifyKind::Strong => b's',
            NotifyKind::Weak => b'w',
        }
    }

    fn from_byte(byte: u8) -> Result<Self, DecodeError> {
        match byte {
            b's' => Ok(NotifyKind::Strong),
            b'w' => Ok(NotifyKind::Weak),
            other => Err(DecodeError::BadNotifyKind(other)),
        }
    }
}

/// A decoded notification entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The watched key (encoded).
    pub key: Key,
    /// The writer's start_ts (strong) or the ts it was set at (weak).
    pub ts: TimeStamp,
    /// How it was set.
    pub kind: NotifyKind,
}

impl Notification {
    /// The stored key of the notification of `key` at `ts`.
    pub fn stored_key(key: &Key, ts: TimeStamp, kind: NotifyKind) -> Vec<u8> {
        let encoded = key.as_encoded();
        let mut stored = Vec::with_capacity(encoded.len() + SUFFIX_LEN);
        stored.extend_from_slice(encoded);
        stored.extend_from_slice(&ts.into_inner().to_be_bytes());
        stored.push(kind.byte());
        stored
    }

    /// Decodes a stored key: a [`Corruption`](percolate_mvcc::Error::Corruption)
    /// error naming the `notify` CF when the bytes are not a notification
    /// (too short, an unknown kind, an encoded key that does not decode).
    pub fn parse(stored: &[u8]) -> Result<Notification, percolate_mvcc::Error> {
        Self::decode(stored).map_err(|e| percolate_mvcc::Error::corruption(Cf::Notify, stored, e))
    }

    /// Decodes a stored key, saying what is wrong with one that is not a
    /// notification.
    pub fn decode(stored: &[u8]) -> Result<Notification, DecodeError> {
        let Some(key_len) = stored
            .len()
            .checked_sub(SUFFIX_LEN)
            .filter(|n| *n >= MIN_ENCODED_LEN)
        else {
            return Err(DecodeError::KeyLength { len: stored.len() });
        };
        let (encoded, suffix) = stored.split_at(key_len);
        let key = Key::from_encoded_slice(encoded);
        key.to_raw()?;
        let mut ts = [0; 8];
        ts.copy_from_slice(&suffix[..8]);
        Ok(Notification {
            key,
            ts: TimeStamp::new(u64::from_be_bytes(ts)),
            kind: NotifyKind::from_byte(suffix[8])?,
        })
    }
}

/// The first stored key past every notification of the encoded key
/// `encoded`: an upper bound for the scan of its notifications.
pub fn key_end(encoded: &[u8]) -> Vec<u8> {
    let mut end = encoded.to_vec();
    // The successor of the prefix: the last byte that can grow grows, the
    // 0xff bytes after it go.
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (not an encoded key): past it is past every notification
    // key that starts with it; the longest possible one is an upper bound.
    let mut all = encoded.to_vec();
    all.extend_from_slice(&[u8::MAX; SUFFIX_LEN + 1]);
    all
}

/// Adds the strong notifications of `keys`, written by the transaction
/// `start_ts`, to `batch`.
pub(crate) fn put_strong(batch: &mut WriteBatch, keys: &[Key], start_ts: TimeStamp) {
    for key in keys {
        batch.put(
            Cf::Notify,
            Notification::stored_key(key, start_ts, NotifyKind::Strong),
            Vec::new(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_key_round_trips_and_bad_bytes_are_corruption() {
        let key = Key::from_raw(b"doc/1");
        let stored = Notification::stored_key(&key, TimeStamp::new(42), NotifyKind::Weak);
        assert_eq!(stored.len(), key.as_encoded().len() + 9);
        assert_eq!(
            Notification::parse(&stored).unwrap(),
            Notification {
                key: key.clone(),
                ts: TimeStamp::new(42),
                kind: NotifyKind::Weak
            }
        );
        let mut bad_kind = stored.clone();
        *bad_kind.last_mut().unwrap() = b'x';
        let short = &stored[..12];
        let mut bad_key = stored.clone();
        bad_key[8] = 0x01; // a marker byte that says 0xfe pad bytes
        for bad in [&bad_kind[..], short, &bad_key[..], &[][..]] {
            let err = Notification::parse(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    percolate_mvcc::Error::Corruption { cf: Cf::Notify, .. }
                ),
                "{err:?}"
            );
        }
    }

    #[test]
    fn key_end_bounds_exactly_the_keys_notifications() {
        let a = Key::from_raw(b"a");
        let end = key_end(a.as_encoded());
        let own = Notification::stored_key(&a, TimeStamp::max(), NotifyKind::Weak);
        assert!(own < end);
        // The next keys in order start at or past the end.
        for next in [&b"a\0"[..], b"aa", b"b"] {
            let other = Notification::stored_key(
                &Key::from_raw(next),
                TimeStamp::zero(),
                NotifyKind::Strong,
            );
            assert!(other >= end, "{next:?}");
        }
        assert_eq!(key_end(&[1, 0xff]), vec![2]);
        assert!(key_end(&[0xff, 0xff]) > vec![0xff, 0xff, 0xff]);
    }
}
