//! Errors of the engine layer.

/// Errors an engine returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// RocksDB reported an error (I/O, corruption detected by its checksums,
    /// a busy lock file, ...).
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A file-system operation outside RocksDB failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path involved.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The database was opened without one of the column families percolate
    /// needs.
    #[error("column family {cf} is missing")]
    MissingColumnFamily {
        /// Name of the missing column family.
        cf: &'static str,
    },
    /// A cursor gave up: reaching a visible key would have passed more
    /// hidden entries than its [`IterOptions::max_skipped`](crate::IterOptions::max_skipped).
    /// Nothing is wrong with the data; seek again or read another way.
    #[error("iterator passed more than its limit of hidden entries")]
    Incomplete,
    /// A record the engine keeps for itself (outside the data key space)
    /// does not hold what the engine writes there.
    #[error("corrupt {what} at key {key:02x?}: {value:02x?}")]
    Corruption {
        /// Which record.
        what: &'static str,
        /// Its key, as stored.
        key: Vec<u8>,
        /// The bytes found.
        value: Vec<u8>,
    },
    /// RocksDB found damaged files when opening the database: most often a
    /// write-ahead-log record with a bad checksum before the log's end.
    /// Opening anyway would drop that record and everything after it
    /// (commits that were acknowledged), so the engine refuses; a torn last
    /// record (a write cut short by a power loss) is not this error, it is
    /// dropped as never acknowledged. Restore the directory from a backup,
    /// or open it with [`WalRecovery::SalvagePrefix`](crate::WalRecovery)
    /// to keep what the log holds before the damage.
    #[error("damaged database files in {}: {detail}", path.display())]
    CorruptedAtOpen {
        /// The database directory.
        path: std::path::PathBuf,
        /// What RocksDB reported.
        detail: String,
    },
    /// A write to an engine opened read-only
    /// ([`RocksEngine::open_read_only`](crate::RocksEngine::open_read_only)):
    /// nothing was written.
    #[error("the database in {} is open read-only", path.display())]
    ReadOnly {
        /// The database directory.
        path: std::path::PathBuf,
    },
    /// [`RocksEngine::ingest_ssts`](crate::RocksEngine::ingest_ssts) was
    /// given a file of a column family that takes none (only `default`
    /// and `write` do); nothing was ingested.
    #[error("SST files of column family {cf} cannot be ingested")]
    UnsupportedIngest {
        /// The column family's name.
        cf: &'static str,
    },
    /// A fault injected by a test engine.
    #[error("injected fault: {reason}")]
    Injected {
        /// Which fault was injected.
        reason: String,
    },
}

/// Result of engine operations.
pub type Result<T> = std::result::Result<T, Error>;
