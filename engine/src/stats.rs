//! The engine's own statistics, as [`Engine::stats`](crate::Engine::stats)
//! reads them: RocksDB's tickers (kept when
//! [`RocksOptions::statistics`](crate::RocksOptions::statistics) is on) and
//! its size properties.

use rocksdb::DB;

use crate::Cf;

/// RocksDB's counters and sizes at one moment. Counters count from the
/// open; sizes are what the database holds now (every column family).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Block cache lookups that hit (0 with statistics off).
    pub block_cache_hits: u64,
    /// Block cache lookups that missed (0 with statistics off).
    pub block_cache_misses: u64,
    /// Microseconds writes were stalled or slowed down for compaction to
    /// catch up (0 with statistics off).
    pub write_stall_micros: u64,
    /// Bytes compactions read (0 with statistics off).
    pub compaction_read_bytes: u64,
    /// Bytes compactions wrote (0 with statistics off).
    pub compaction_write_bytes: u64,
    /// Bytes flushes wrote (0 with statistics off).
    pub flush_write_bytes: u64,
    /// Bytes of the block cache in use.
    pub block_cache_usage_bytes: u64,
    /// Bytes of the memtables, active and waiting to be flushed.
    pub memtable_bytes: u64,
    /// Bytes of the live table files.
    pub live_sst_bytes: u64,
    /// Bytes compaction estimates it still has to rewrite.
    pub pending_compaction_bytes: u64,
}

impl EngineStats {
    /// Hits over lookups of the block cache; `None` before any lookup.
    pub fn block_cache_hit_rate(&self) -> Option<f64> {
        let lookups = self.block_cache_hits + self.block_cache_misses;
        (lookups > 0).then(|| self.block_cache_hits as f64 / lookups as f64)
    }

    /// Each field as (metric name, whether it is a counter rather than a
    /// gauge, help text, value), for exposition formats.
    pub fn fields(&self) -> [(&'static str, bool, &'static str, u64); 10] {
        [
            (
                "block_cache_hits_total",
                true,
                "Block cache lookups that hit.",
                self.block_cache_hits,
            ),
            (
                "block_cache_misses_total",
                true,
                "Block cache lookups that missed.",
                self.block_cache_misses,
            ),
            (
                "write_stall_micros_total",
                true,
                "Microseconds writes were stalled or slowed.",
                self.write_stall_micros,
            ),
            (
                "compaction_read_bytes_total",
                true,
                "Bytes compactions read.",
                self.compaction_read_bytes,
            ),
            (
                "compaction_write_bytes_total",
                true,
                "Bytes compactions wrote.",
                self.compaction_write_bytes,
            ),
            (
                "flush_write_bytes_total",
                true,
                "Bytes flushes wrote.",
                self.flush_write_bytes,
            ),
            (
                "block_cache_usage_bytes",
                false,
                "Bytes of the block cache in use.",
                self.block_cache_usage_bytes,
            ),
            (
                "memtable_bytes",
                false,
                "Bytes of the memtables.",
                self.memtable_bytes,
            ),
            (
                "live_sst_bytes",
                false,
                "Bytes of the live table files.",
                self.live_sst_bytes,
            ),
            (
                "pending_compaction_bytes",
                false,
                "Bytes compaction estimates it still has to rewrite.",
                self.pending_compaction_bytes,
            ),
        ]
    }
}

/// Reads `db`'s statistics. A property RocksDB does not answer reads 0.
pub(crate) fn read(db: &DB) -> EngineStats {
    let mut stats = EngineStats::default();
    // "rocksdb.block.cache.miss COUNT : 12" lines; absent without
    // statistics.
    if let Ok(Some(text)) = db.property_value(rocksdb::properties::OPTIONS_STATISTICS) {
        for line in text.lines() {
            let mut parts = line.split(" COUNT : ");
            let (Some(name), Some(count)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(count) = count.trim().parse::<u64>() else {
                continue;
            };
            let field = match name.trim() {
                "rocksdb.block.cache.hit" => &mut stats.block_cache_hits,
                "rocksdb.block.cache.miss" => &mut stats.block_cache_misses,
                "rocksdb.stall.micros" => &mut stats.write_stall_micros,
                "rocksdb.compact.read.bytes" => &mut stats.compaction_read_bytes,
                "rocksdb.compact.write.bytes" => &mut stats.compaction_write_bytes,
                "rocksdb.flush.write.bytes" => &mut stats.flush_write_bytes,
                _ => continue,
            };
            *field = count;
        }
    }
    // The block cache is shared by every CF: one read of it.
    stats.block_cache_usage_bytes = db
        .property_int_value(rocksdb::properties::BLOCK_CACHE_USAGE)
        .ok()
        .flatten()
        .unwrap_or(0);
    for cf in Cf::ALL {
        let Some(handle) = db.cf_handle(cf.name()) else {
            continue;
        };
        let int = |name: &rocksdb::properties::PropName| {
            db.property_int_value_cf(&handle, name)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        stats.memtable_bytes += int(rocksdb::properties::CUR_SIZE_ALL_MEM_TABLES);
        stats.live_sst_bytes += int(rocksdb::properties::LIVE_SST_FILES_SIZE);
        stats.pending_compaction_bytes +=
            int(rocksdb::properties::ESTIMATE_PENDING_COMPACTION_BYTES);
    }
    stats
}
