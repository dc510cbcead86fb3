//! Write batches: the only way data enters an engine.

use crate::Cf;

/// One change to one column family.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Modify {
    /// Sets `key` to `value`.
    Put {
        /// Column family.
        cf: Cf,
        /// Key.
        key: Vec<u8>,
        /// New value.
        value: Vec<u8>,
    },
    /// Removes `key`.
    Delete {
        /// Column family.
        cf: Cf,
        /// Key.
        key: Vec<u8>,
    },
    /// Removes every key in `start..end`; an empty or inverted range
    /// removes nothing.
    DeleteRange {
        /// Column family.
        cf: Cf,
        /// First key removed (inclusive).
        start: Vec<u8>,
        /// First key kept (exclusive).
        end: Vec<u8>,
    },
}

impl Modify {
    /// The column family this modification touches.
    pub fn cf(&self) -> Cf {
        match self {
            Modify::Put { cf, .. } | Modify::Delete { cf, .. } | Modify::DeleteRange { cf, .. } => {
                *cf
            }
        }
    }

    /// Bytes of keys and values this modification carries.
    pub fn size(&self) -> usize {
        match self {
            Modify::Put { key, value, .. } => key.len() + value.len(),
            Modify::Delete { key, .. } => key.len(),
            Modify::DeleteRange { start, end, .. } => start.len() + end.len(),
        }
    }
}

/// An ordered list of modifications applied atomically by
/// [`Engine::write`](crate::Engine::write). Later modifications of the same
/// key win.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    modifies: Vec<Modify>,
    size: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a modification.
    pub fn push(&mut self, modify: Modify) {
        self.size += modify.size();
        self.modifies.push(modify);
    }

    /// Appends a put.
    pub fn put(&mut self, cf: Cf, key: Vec<u8>, value: Vec<u8>) {
        self.push(Modify::Put { cf, key, value });
    }

    /// Appends a delete.
    pub fn delete(&mut self, cf: Cf, key: Vec<u8>) {
        self.push(Modify::Delete { cf, key });
    }

    /// Appends a range delete of `start..end`.
    pub fn delete_range(&mut self, cf: Cf, start: Vec<u8>, end: Vec<u8>) {
        self.push(Modify::DeleteRange { cf, start, end });
    }

    /// Appends every modification of `other`.
    pub fn extend(&mut self, other: impl IntoIterator<Item = Modify>) {
        for modify in other {
            self.push(modify);
        }
    }

    /// The modifications, in order.
    pub fn modifies(&self) -> &[Modify] {
        &self.modifies
    }

    /// The modifications, to take bytes out of (an engine's
    /// [`write_taking_locks`](crate::Engine::write_taking_locks)).
    pub(crate) fn modifies_mut(&mut self) -> &mut [Modify] {
        &mut self.modifies
    }

    /// Takes the modifications out.
    pub fn into_modifies(self) -> Vec<Modify> {
        self.modifies
    }

    /// Number of modifications.
    pub fn len(&self) -> usize {
        self.modifies.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.modifies.is_empty()
    }

    /// Bytes of keys and values in the batch.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl From<Vec<Modify>> for WriteBatch {
    /// Takes the vector over as it is.
    fn from(modifies: Vec<Modify>) -> Self {
        let size = modifies.iter().map(Modify::size).sum();
        WriteBatch { modifies, size }
    }
}
