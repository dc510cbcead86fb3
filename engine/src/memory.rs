//! An in-memory engine for fast tests.
//!
//! The data is one immutable set of ordered maps behind an `Arc`. A snapshot
//! clones the `Arc`; a write copies the maps if a snapshot still shares them
//! (copy-on-write), then applies the whole batch before publishing the new
//! version. So a snapshot truly never sees a later write, exactly like a
//! RocksDB snapshot, and a batch is visible all at once or not at all. The
//! price is a full copy per write while snapshots are alive: fine for tests,
//! which is all this engine is for.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::epochs::WriteEpochs;

use crate::{
    Cf, Engine, EngineIterator, IterOptions, Modify, Result, SeekMode, Snapshot, WriteBatch,
    WriteOptions, write_key_prefix,
};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// One map per column family, indexed by [`Cf::index`].
type Maps = [Map; Cf::ALL.len()];

/// An engine that keeps everything in memory. Cloning shares the data.
#[derive(Clone)]
pub struct MemoryEngine {
    current: Arc<RwLock<Arc<Maps>>>,
    /// Write-CF write epochs and ts ceilings ([`Engine::write_epoch`],
    /// [`Engine::write_ts_ceiling`]).
    epochs: Arc<WriteEpochs>,
}

impl Default for MemoryEngine {
    fn default() -> Self {
        MemoryEngine {
            current: Arc::default(),
            // Empty: no record to be above.
            epochs: Arc::new(WriteEpochs::new(crate::epochs::SMALL_BUCKETS, 0)),
        }
    }
}

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for MemoryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let maps = self.current.read();
        f.debug_struct("MemoryEngine")
            .field(
                "keys_per_cf",
                &maps.iter().map(Map::len).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Engine for MemoryEngine {
    type Snap = MemorySnapshot;

    fn snapshot(&self) -> MemorySnapshot {
        MemorySnapshot {
            view: View::Pinned(self.current.read().clone()),
            epochs: self.epochs.clone(),
        }
    }

    /// Each get, and each iterator when it is made, reads the data current
    /// then.
    fn latest(&self) -> MemorySnapshot {
        MemorySnapshot {
            view: View::Latest(self.current.clone()),
            epochs: self.epochs.clone(),
        }
    }

    fn write_epoch(&self, prefix: &[u8]) -> Option<u64> {
        self.epochs.get(prefix)
    }

    fn write_ts_ceiling(&self, prefix: &[u8]) -> Option<u64> {
        Some(self.epochs.ts_ceiling(prefix))
    }

    fn holds_no_locks(&self) -> bool {
        self.current.read()[Cf::Lock.index()].is_empty()
    }

    fn write(&self, batch: &WriteBatch, _options: WriteOptions) -> Result<()> {
        self.epochs.begin(batch);
        {
            let mut current = self.current.write();
            let maps = Arc::make_mut(&mut current);
            for modify in batch.modifies() {
                apply(maps, modify);
            }
        }
        self.epochs.end(batch);
        Ok(())
    }
}

fn apply(maps: &mut Maps, modify: &Modify) {
    match modify {
        Modify::Put { cf, key, value } => {
            maps[cf.index()].insert(key.clone(), value.clone());
        }
        Modify::Delete { cf, key } => {
            maps[cf.index()].remove(key);
        }
        Modify::DeleteRange { cf, start, end } => {
            let map = &mut maps[cf.index()];
            let doomed: Vec<Vec<u8>> = range(map, Bound::Included(start), Bound::Excluded(end))
                .map(|(k, _)| k.clone())
                .collect();
            for key in doomed {
                map.remove(&key);
            }
        }
    }
}

/// `map.range`, but empty instead of panicking when the bounds are inverted.
fn range<'a>(
    map: &'a Map,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
) -> impl DoubleEndedIterator<Item = (&'a Vec<u8>, &'a Vec<u8>)> {
    let inverted = match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u)) => l >= u,
        _ => false,
    };
    (!inverted)
        .then(|| map.range::<[u8], _>((lower, upper)))
        .into_iter()
        .flatten()
}

/// A view of a [`MemoryEngine`]: consistent, at one moment
/// ([`Engine::snapshot`]), or the latest data at each read
/// ([`Engine::latest`]).
#[derive(Clone)]
pub struct MemorySnapshot {
    view: View,
    epochs: Arc<WriteEpochs>,
}

#[derive(Clone)]
enum View {
    /// The maps as they were when the snapshot was taken.
    Pinned(Arc<Maps>),
    /// The engine's current maps, looked up at each read.
    Latest(Arc<RwLock<Arc<Maps>>>),
}

impl MemorySnapshot {
    /// The maps a read starting now sees.
    fn maps(&self) -> Arc<Maps> {
        match &self.view {
            View::Pinned(maps) => maps.clone(),
            View::Latest(current) => current.read().clone(),
        }
    }
}

impl std::fmt::Debug for MemorySnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySnapshot").finish_non_exhaustive()
    }
}

impl Snapshot for MemorySnapshot {
    type Iter = MemoryIterator;

    fn write_epoch(&self, prefix: &[u8]) -> Option<u64> {
        self.epochs.get(prefix)
    }

    fn write_ts_ceiling(&self, prefix: &[u8]) -> Option<u64> {
        Some(self.epochs.ts_ceiling(prefix))
    }

    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(match &self.view {
            View::Pinned(maps) => maps[cf.index()].get(key).cloned(),
            // Under the read lock, without a share of the maps that would
            // make the next write copy them.
            View::Latest(current) => current.read()[cf.index()].get(key).cloned(),
        })
    }

    fn iter(&self, cf: Cf, options: IterOptions) -> Result<MemoryIterator> {
        Ok(MemoryIterator {
            maps: self.maps(),
            cf,
            options,
            prefix: None,
            current: None,
        })
    }
}

/// An iterator over a [`MemorySnapshot`]. It emulates RocksDB's bounds and
/// [`SeekMode::Prefix`] so that code which misuses prefix seeks fails on
/// memory as it would on disk.
pub struct MemoryIterator {
    maps: Arc<Maps>,
    cf: Cf,
    options: IterOptions,
    /// In prefix mode: the prefix of the last seek target.
    prefix: Option<Vec<u8>>,
    current: Option<(Vec<u8>, Vec<u8>)>,
}

impl MemoryIterator {
    fn map(&self) -> &Map {
        &self.maps[self.cf.index()]
    }

    fn lower(&self) -> Bound<&[u8]> {
        self.options
            .lower_bound
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Included)
    }

    fn upper(&self) -> Bound<&[u8]> {
        self.options
            .upper_bound
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Excluded)
    }

    fn set_prefix(&mut self, target: Option<&[u8]>) {
        self.prefix = match (self.options.seek_mode, target) {
            (SeekMode::Prefix, Some(target)) if self.cf.has_ts_suffix_prefix() => {
                write_key_prefix(target).map(<[u8]>::to_vec)
            }
            _ => None,
        };
    }

    /// Rests on `entry` if it is inside the seek prefix.
    fn land(&mut self, entry: Option<(&Vec<u8>, &Vec<u8>)>) -> Result<bool> {
        let entry = entry.filter(|(key, _)| match &self.prefix {
            Some(prefix) => write_key_prefix(key) == Some(prefix.as_slice()),
            None => true,
        });
        self.current = entry.map(|(k, v)| (k.clone(), v.clone()));
        Ok(self.current.is_some())
    }

    fn first_from(&mut self, from: Bound<&[u8]>) -> Result<bool> {
        let entry = range(self.map(), from, self.upper()).next();
        let entry = entry.map(|(k, v)| (k.clone(), v.clone()));
        self.land(entry.as_ref().map(|(k, v)| (k, v)))
    }

    fn last_until(&mut self, until: Bound<&[u8]>) -> Result<bool> {
        let entry = range(self.map(), self.lower(), until).next_back();
        let entry = entry.map(|(k, v)| (k.clone(), v.clone()));
        self.land(entry.as_ref().map(|(k, v)| (k, v)))
    }
}

impl EngineIterator for MemoryIterator {
    fn seek(&mut self, key: &[u8]) -> Result<bool> {
        self.set_prefix(Some(key));
        let from = match self.options.lower_bound.as_deref() {
            Some(lower) if lower > key => lower.to_vec(),
            _ => key.to_vec(),
        };
        self.first_from(Bound::Included(&from))
    }

    fn seek_for_prev(&mut self, key: &[u8]) -> Result<bool> {
        self.set_prefix(Some(key));
        let until = key.to_vec();
        match self.options.upper_bound.as_deref() {
            Some(upper) if upper <= key => {
                let upper = upper.to_vec();
                self.last_until(Bound::Excluded(&upper))
            }
            _ => self.last_until(Bound::Included(&until)),
        }
    }

    fn seek_to_first(&mut self) -> Result<bool> {
        self.set_prefix(None);
        let lower = self.options.lower_bound.clone();
        self.first_from(lower.as_deref().map_or(Bound::Unbounded, Bound::Included))
    }

    fn seek_to_last(&mut self) -> Result<bool> {
        self.set_prefix(None);
        let upper = self.options.upper_bound.clone();
        self.last_until(upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded))
    }

    fn next(&mut self) -> Result<bool> {
        match self.current.take() {
            Some((key, _)) => self.first_from(Bound::Excluded(&key)),
            None => Ok(false),
        }
    }

    fn prev(&mut self) -> Result<bool> {
        match self.current.take() {
            Some((key, _)) => self.last_until(Bound::Excluded(&key)),
            None => Ok(false),
        }
    }

    fn valid(&self) -> Result<bool> {
        Ok(self.current.is_some())
    }

    fn key(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |(k, _)| k)
    }

    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |(_, v)| v)
    }
}
