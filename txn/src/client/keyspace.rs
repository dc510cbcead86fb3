//! Keyspaces: named, isolated key spaces over one client (see [`Keyspace`]).

use std::ops::{Bound, ControlFlow, RangeBounds};

use percolate_engine::Engine;

use super::{Client, PessimisticTransaction, Scan, Snapshot, Transaction};
use crate::{Error, Result};

/// The first byte of every keyspace's stored keys.
pub const KEYSPACE_MARKER: u8 = 0xFE;

/// The longest keyspace name, in bytes.
pub const MAX_KEYSPACE_NAME: usize = 255;

/// Keyspaces: named, isolated key spaces over one client, in the manner of
/// fjall's keyspaces and redb's tables, usable together in one transaction.
///
/// A keyspace is a prefix. Its key `k` is stored as
/// `KEYSPACE_MARKER ++ memcomparable(name) ++ k`: the name is encoded as
/// TiKV encodes keys (groups of eight bytes, each followed by a marker
/// byte, the last group padded), an encoding in which no name's encoding
/// is a prefix of another's. So two keyspaces never share a stored key,
/// whatever their names or keys, and a keyspace's keys are one contiguous
/// range, in the order of `k`: a scan of a keyspace reads only its own
/// keys. The records themselves are TiKV's (the prefix is part of the raw
/// key, as a TiKV keyspace's `x` prefix is).
///
/// Keys written without a keyspace (`txn.put(k, v)`) form the default key
/// space. They share the stored key space with the keyspaces: a plain key
/// that starts with [`KEYSPACE_MARKER`] can coincide with a keyspace's
/// stored key, so an application that uses keyspaces keeps its plain keys
/// off that prefix (or keeps all its data in keyspaces).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let client = percolate_txn::client::Client::open(dir.path())?;
/// let users = client.keyspace("users")?;
/// let orders = client.keyspace("orders")?;
/// client.with_retry(|txn| {
///     users.put(txn, b"alice", b"Alice Liddell")?;
///     orders.put(txn, b"alice", b"1 teapot")?; // the same key, another keyspace
///     Ok(())
/// })?;
/// client.view(|txn| {
///     assert_eq!(users.get(txn, b"alice")?, Some(b"Alice Liddell".to_vec()));
///     let all: Vec<_> = orders.iter(txn).collect::<Result<_, _>>()?;
///     assert_eq!(all, vec![(b"alice".to_vec(), b"1 teapot".to_vec())]);
///     Ok(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A handle holds no connection, only the name and its prefix: cheap to
/// clone, and one handle serves any transaction of any client over the
/// same data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Keyspace {
    name: String,
    prefix: Vec<u8>,
}

impl<E: Engine> Client<E> {
    /// The keyspace `name` (1 to [`MAX_KEYSPACE_NAME`] bytes). Nothing is
    /// written: a keyspace exists by its keys.
    pub fn keyspace(&self, name: &str) -> Result<Keyspace> {
        Keyspace::new(name)
    }
}

impl Keyspace {
    /// The keyspace `name` (1 to [`MAX_KEYSPACE_NAME`] bytes); the same as
    /// [`Client::keyspace`].
    pub fn new(name: &str) -> Result<Keyspace> {
        if name.is_empty() || name.len() > MAX_KEYSPACE_NAME {
            return Err(Error::InvalidRequest {
                reason: "a keyspace name is 1 to 255 bytes",
                key: None,
            });
        }
        let mut prefix = vec![KEYSPACE_MARKER];
        percolate_mvcc::codec::encode_bytes(&mut prefix, name.as_bytes());
        Ok(Keyspace {
            name: name.to_string(),
            prefix,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The prefix of its stored keys.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The stored key of its key `key`.
    pub fn key(&self, key: &[u8]) -> Vec<u8> {
        [&self.prefix[..], key].concat()
    }

    /// Its key in `stored`, if `stored` is one of its stored keys.
    pub fn strip<'k>(&self, stored: &'k [u8]) -> Option<&'k [u8]> {
        stored.strip_prefix(&self.prefix[..])
    }

    /// The stored keys of its keys in `range`, as a range any reader's
    /// `scan` takes: `txn.scan(users.range(..))`. Its end, for an
    /// unbounded range, is the first key past the keyspace.
    pub fn range<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
    ) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let start = match range.start_bound() {
            Bound::Included(k) => Bound::Included(self.key(k.as_ref())),
            Bound::Excluded(k) => Bound::Excluded(self.key(k.as_ref())),
            Bound::Unbounded => Bound::Included(self.prefix.clone()),
        };
        let end = match range.end_bound() {
            Bound::Included(k) => Bound::Included(self.key(k.as_ref())),
            Bound::Excluded(k) => Bound::Excluded(self.key(k.as_ref())),
            Bound::Unbounded => Bound::Excluded(self.end()),
        };
        (start, end)
    }

    /// The first stored key past every key of the keyspace. The encoded
    /// name ends with a group marker below 0xFF, so adding one to the last
    /// byte is the successor of the whole prefix.
    fn end(&self) -> Vec<u8> {
        let mut end = self.prefix.clone();
        let last = end.last_mut().expect("a marker byte and an encoded name");
        debug_assert!(*last < 0xFF);
        *last += 1;
        end
    }

    /// The value of `key` in this keyspace, as `reader` sees it.
    pub fn get<E: Engine>(
        &self,
        reader: &impl KeyspaceRead<E>,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        reader.read_key(&self.key(key))
    }

    /// The pairs of this keyspace with keys in `range`, in key order, its
    /// keys without the prefix: `reader`'s lazy [`Scan`] (its own writes
    /// included).
    pub fn scan<'r, K: AsRef<[u8]>, E: Engine>(
        &self,
        reader: &'r impl KeyspaceRead<E>,
        range: impl RangeBounds<K>,
    ) -> KeyspaceScan<'r, E> {
        self.stripped(reader.read_range(self.range(range), false))
    }

    /// Every pair of this keyspace, in key order: [`scan`](Self::scan) of
    /// the whole keyspace.
    pub fn iter<'r, E: Engine>(&self, reader: &'r impl KeyspaceRead<E>) -> KeyspaceScan<'r, E> {
        self.scan::<&[u8], E>(reader, ..)
    }

    /// Like [`scan`](Self::scan), from the end of the range down.
    pub fn scan_reverse<'r, K: AsRef<[u8]>, E: Engine>(
        &self,
        reader: &'r impl KeyspaceRead<E>,
        range: impl RangeBounds<K>,
    ) -> KeyspaceScan<'r, E> {
        self.stripped(reader.read_range(self.range(range), true))
    }

    /// `scan`'s pairs with their keys stripped of the prefix.
    fn stripped<'r, E: Engine>(&self, scan: Scan<'r, E>) -> KeyspaceScan<'r, E> {
        KeyspaceScan {
            scan,
            prefix_len: self.prefix.len(),
        }
    }

    /// Sets `key` to `value` in this keyspace, in `txn`.
    pub fn put(
        &self,
        txn: &mut impl KeyspaceWrite,
        key: &[u8],
        value: impl Into<Vec<u8>>,
    ) -> Result<()> {
        txn.write_put(self.key(key), value.into())
    }

    /// Inserts `key`, which must not exist, in this keyspace, in `txn`
    /// (the commit fails with `AlreadyExist` if it does).
    pub fn insert(
        &self,
        txn: &mut impl KeyspaceWrite,
        key: &[u8],
        value: impl Into<Vec<u8>>,
    ) -> Result<()> {
        txn.write_insert(self.key(key), value.into())
    }

    /// Deletes `key` from this keyspace, in `txn`.
    pub fn delete(&self, txn: &mut impl KeyspaceWrite, key: &[u8]) -> Result<()> {
        txn.write_delete(self.key(key))
    }
}

/// A keyspace's pairs, keys without its prefix: [`Keyspace::scan`].
pub struct KeyspaceScan<'r, E: Engine> {
    scan: Scan<'r, E>,
    prefix_len: usize,
}

impl<E: Engine> KeyspaceScan<'_, E> {
    /// Hands the pairs to `visit` as borrowed slices, the keys without
    /// the prefix, instead of returning them: see [`Scan::visit`]. Returns
    /// how many pairs `visit` got.
    pub fn visit(self, mut visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>) -> Result<usize> {
        let prefix_len = self.prefix_len;
        self.scan
            .visit(|key, value| visit(&key[prefix_len..], value))
    }
}

impl<E: Engine> Iterator for KeyspaceScan<'_, E> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.scan.next()?.map(|(mut key, value)| {
            key.drain(..self.prefix_len);
            (key, value)
        }))
    }
}

mod sealed {
    pub trait Sealed {}
}

/// What reads a keyspace: [`Transaction`], [`PessimisticTransaction`] and
/// [`Snapshot`].
pub trait KeyspaceRead<E: Engine>: sealed::Sealed {
    /// The reader's `get` of a stored key.
    fn read_key(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The reader's `scan` (or `scan_reverse`) of stored keys.
    fn read_range(&self, range: (Bound<Vec<u8>>, Bound<Vec<u8>>), reverse: bool) -> Scan<'_, E>;
}

/// What writes a keyspace: [`Transaction`] (buffered, never fails) and
/// [`PessimisticTransaction`] (locks as it goes, may fail).
pub trait KeyspaceWrite: sealed::Sealed {
    /// The transaction's `put` of a stored key.
    fn write_put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()>;

    /// The transaction's `insert` of a stored key.
    fn write_insert(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()>;

    /// The transaction's `delete` of a stored key.
    fn write_delete(&mut self, key: Vec<u8>) -> Result<()>;
}

impl<E: Engine> sealed::Sealed for Transaction<E> {}
impl<E: Engine> sealed::Sealed for PessimisticTransaction<E> {}
impl<E: Engine> sealed::Sealed for Snapshot<E> {}

/// The three readers' methods have the same names and shapes.
macro_rules! keyspace_read {
    ($($reader:ident),*) => {$(
        impl<E: Engine> KeyspaceRead<E> for $reader<E> {
            fn read_key(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
                self.get(key)
            }

            fn read_range(
                &self,
                range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
                reverse: bool,
            ) -> Scan<'_, E> {
                if reverse {
                    self.scan_reverse(range)
                } else {
                    self.scan(range)
                }
            }
        }
    )*};
}

keyspace_read!(Transaction, PessimisticTransaction, Snapshot);

impl<E: Engine> KeyspaceWrite for Transaction<E> {
    fn write_put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.put(key, value);
        Ok(())
    }

    fn write_insert(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.insert(key, value);
        Ok(())
    }

    fn write_delete(&mut self, key: Vec<u8>) -> Result<()> {
        self.delete(key);
        Ok(())
    }
}

impl<E: Engine> KeyspaceWrite for PessimisticTransaction<E> {
    fn write_put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.put(key, value)
    }

    fn write_insert(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.insert(key, value)
    }

    fn write_delete(&mut self, key: Vec<u8>) -> Result<()> {
        self.delete(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_keyspace_prefix_is_a_prefix_of_another() {
        let names = [
            "a",
            "ab",
            "abcdefgh",
            "abcdefghi",
            "b",
            "a\0",
            "a\0\0",
            "\u{ff}",
        ];
        for x in names {
            for y in names {
                let (px, py) = (Keyspace::new(x).unwrap(), Keyspace::new(y).unwrap());
                if x != y {
                    assert!(!py.prefix().starts_with(px.prefix()), "{x:?} / {y:?}");
                }
                // A keyspace's range holds its keys and no other's.
                let (start, end) = px.range::<&[u8]>(..);
                let inside = |k: &[u8]| {
                    let after = match &start {
                        Bound::Included(s) => k >= &s[..],
                        _ => unreachable!(),
                    };
                    let before = match &end {
                        Bound::Excluded(e) => k < &e[..],
                        _ => unreachable!(),
                    };
                    after && before
                };
                for key in [&b""[..], b"k", b"\xff\xff\xff"] {
                    assert_eq!(inside(&py.key(key)), x == y, "{x:?} / {y:?} / {key:?}");
                }
            }
        }
    }

    #[test]
    fn a_name_must_be_1_to_255_bytes() {
        assert!(matches!(
            Keyspace::new(""),
            Err(Error::InvalidRequest { .. })
        ));
        assert!(Keyspace::new(&"n".repeat(255)).is_ok());
        assert!(matches!(
            Keyspace::new(&"n".repeat(256)),
            Err(Error::InvalidRequest { .. })
        ));
    }
}
