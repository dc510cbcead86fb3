//! Regions: the key space cut at boundary keys, each range served by its
//! own [`Storage`] (its own scheduler, latches and concurrency manager).
//!
//! A region is the unit a distributed deployment would replicate and move:
//! nothing above it talks to a region except through its command API, and
//! every cross-region guarantee comes from the protocol (the primary lock,
//! async commit's secondaries list), never from sharing memory.
//!
//! Here all regions of a process share one engine, as all regions of a TiKV
//! store share one RocksDB: one WAL, one block cache, one set of background
//! threads, and keys that never overlap because the ranges do not. Sharing
//! the engine gives no shortcut: each region's `Storage` knows its range
//! ([`StorageConfig::key_range`]) and refuses a command for a key, or a
//! range reaching, outside it (`KeyNotInRegion`, as TiKV does), so a
//! request sent to the wrong region fails here as it would across machines.

use std::path::Path;

use percolate_engine::{Engine, RocksEngine};
use percolate_mvcc::TimeStamp;

use crate::Result;
use crate::storage::{KeyRange, Storage, StorageConfig};

/// One region: a key range and the storage serving it.
pub struct Region<E: Engine = RocksEngine> {
    id: u64,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    storage: Storage<E>,
}

impl<E: Engine> std::fmt::Debug for Region<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("id", &self.id)
            .field("start", &self.start.escape_ascii().to_string())
            .field(
                "end",
                &self.end.as_ref().map(|e| e.escape_ascii().to_string()),
            )
            .finish_non_exhaustive()
    }
}

impl<E: Engine> Region<E> {
    /// The region's id (its position, from 1).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The first raw key of the range.
    pub fn start_key(&self) -> &[u8] {
        &self.start
    }

    /// The raw key after the range (`None`: the range is unbounded above).
    pub fn end_key(&self) -> Option<&[u8]> {
        self.end.as_deref()
    }

    /// Whether the raw key `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }

    /// The region's command API.
    pub fn storage(&self) -> &Storage<E> {
        &self.storage
    }
}

/// Regions covering the whole key space, in key order.
pub struct Cluster<E: Engine = RocksEngine> {
    regions: Vec<Region<E>>,
}

impl<E: Engine> std::fmt::Debug for Cluster<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.regions).finish()
    }
}

impl Cluster<RocksEngine> {
    /// Opens (or creates) a RocksDB directory and splits it into regions at
    /// `split_keys`.
    pub fn open(
        path: impl AsRef<Path>,
        split_keys: Vec<Vec<u8>>,
        config: StorageConfig,
    ) -> Result<Self> {
        Ok(Self::new(RocksEngine::open(path)?, split_keys, config))
    }
}

impl<E: Engine> Cluster<E> {
    /// Regions over one engine: `[.., k1), [k1, k2), ..., [kn, ..)` for the
    /// sorted, deduplicated, non-empty `split_keys`. Every region's `max_ts`
    /// starts at `config.initial_max_ts` (pass a fresh timestamp from the
    /// oracle).
    pub fn new(engine: E, mut split_keys: Vec<Vec<u8>>, config: StorageConfig) -> Self {
        split_keys.retain(|k| !k.is_empty());
        split_keys.sort();
        split_keys.dedup();
        let starts = std::iter::once(Vec::new()).chain(split_keys.iter().cloned());
        let ends = split_keys
            .iter()
            .cloned()
            .map(Some)
            .chain(std::iter::once(None));
        let regions = starts
            .zip(ends)
            .zip(1..)
            .map(|((start, end), id)| {
                let config = StorageConfig {
                    key_range: Some(KeyRange {
                        start: start.clone(),
                        end: end.clone(),
                    }),
                    ..config.clone()
                };
                Region {
                    id,
                    start,
                    end,
                    storage: Storage::new(engine.clone(), config),
                }
            })
            .collect();
        Cluster { regions }
    }

    /// Every region, in key order.
    pub fn regions(&self) -> &[Region<E>] {
        &self.regions
    }

    /// The region holding the raw key `key`.
    pub fn region_for(&self, key: &[u8]) -> &Region<E> {
        &self.regions[self.region_index(key)]
    }

    /// The index (into [`regions`](Self::regions)) of the region holding
    /// the raw key `key`.
    pub fn region_index(&self, key: &[u8]) -> usize {
        // One region (an embedded store's usual case) holds every key.
        if self.regions.len() == 1 {
            return 0;
        }
        self.regions
            .partition_point(|region| region.start.as_slice() <= key)
            - 1
    }

    /// The regions overlapping the raw range `[start, end)` (`end` `None`:
    /// unbounded), in key order.
    pub fn regions_in(&self, start: &[u8], end: Option<&[u8]>) -> &[Region<E>] {
        let first = self.region_index(start);
        let last = match end {
            Some(end) => self
                .regions
                .partition_point(|region| region.start.as_slice() < end)
                .max(first + 1),
            None => self.regions.len(),
        };
        &self.regions[first..last]
    }

    /// The part of the raw range `[start, end)` in each region it
    /// overlaps, in key order: the region, and the range clipped to it
    /// (never empty).
    pub(crate) fn pieces<'a>(
        &'a self,
        start: &'a [u8],
        end: Option<&'a [u8]>,
    ) -> impl DoubleEndedIterator<Item = (&'a Region<E>, &'a [u8], Option<&'a [u8]>)> {
        self.regions_in(start, end)
            .iter()
            .filter_map(move |region| {
                let lower = start.max(region.start_key());
                let upper = match (end, region.end_key()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                match upper {
                    Some(upper) if upper <= lower => None,
                    _ => Some((region, lower, upper)),
                }
            })
    }

    /// The largest `max_ts` of any region (for tests and tools).
    pub fn max_ts(&self) -> TimeStamp {
        self.regions
            .iter()
            .map(|r| r.storage.concurrency_manager().max_ts())
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use percolate_engine::MemoryEngine;

    use super::*;

    #[test]
    fn keys_route_to_the_region_whose_range_holds_them() {
        let cluster = Cluster::new(
            MemoryEngine::new(),
            vec![b"m".to_vec(), b"g".to_vec(), Vec::new(), b"m".to_vec()],
            StorageConfig::default(),
        );
        let ids: Vec<u64> = cluster.regions().iter().map(Region::id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        for (key, id) in [
            (&b""[..], 1),
            (b"a", 1),
            (b"g", 2),
            (b"lzz", 2),
            (b"m", 3),
            (b"\xff", 3),
        ] {
            let region = cluster.region_for(key);
            assert_eq!(region.id(), id, "{key:?}");
            assert!(region.contains(key));
        }
        let ids = |start: &[u8], end: Option<&[u8]>| -> Vec<u64> {
            cluster
                .regions_in(start, end)
                .iter()
                .map(Region::id)
                .collect()
        };
        assert_eq!(ids(b"a", Some(b"g")), vec![1]);
        assert_eq!(ids(b"a", Some(b"g\0")), vec![1, 2]);
        assert_eq!(ids(b"h", None), vec![2, 3]);
        assert_eq!(ids(b"z", Some(b"z")), vec![3]);
    }
}
