//! Shared by the scenario test files.

/// Generates, for each scenario function `name(fixture)`, a test
/// `memory::name` on the memory engine and a test `rocks::name` on RocksDB
/// in a temporary directory. `$fixture` is the fixture type wrapping the
/// engine (`MvccFixture`, `TxnFixture`); the calling file must have it,
/// `MemoryEngine` and `temp_rocks_engine` in scope.
#[macro_export]
macro_rules! on_both_engines {
    ($fixture:ident; $($name:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $name() { super::$name(super::$fixture::new(super::MemoryEngine::new())); })*
        }
        mod rocks {
            $(#[test] fn $name() { super::$name(super::$fixture::new(super::temp_rocks_engine())); })*
        }
    };
}

/// Leaves what two dead clients left behind, through the storage of the
/// keys' region: a 2PC transaction that died after its commit point (`p`
/// committed, its secondary `s` still locked) and one that died before it
/// (`o` locked with a TTL of `orphan_ttl_ms`, its primary never
/// committed). Returns the orphan's start_ts.
#[allow(dead_code)]
pub fn leave_dead_transactions<E: percolate::engine::Engine>(
    client: &percolate::txn::client::Client<E>,
    orphan_ttl_ms: u64,
) -> percolate::mvcc::TimeStamp {
    use percolate::mvcc::Key;
    use percolate::txn::actions::prewrite::Mutation;
    use percolate::txn::commands::Prewrite;

    let storage = client.cluster().region_for(b"p").storage();
    let start_ts = client.current_ts().unwrap();
    let (p, s) = (Key::from_raw(b"p"), Key::from_raw(b"s"));
    storage
        .prewrite(Prewrite::new(
            vec![
                Mutation::put(p.clone(), b"pv".to_vec()),
                Mutation::put(s, b"sv".to_vec()),
            ],
            b"p",
            start_ts,
        ))
        .unwrap();
    let commit_ts = client.current_ts().unwrap();
    storage.commit(vec![p], start_ts, commit_ts).unwrap();
    let orphan_ts = client.current_ts().unwrap();
    let mut orphan = Prewrite::new(
        vec![Mutation::put(Key::from_raw(b"o"), b"ov".to_vec())],
        b"o",
        orphan_ts,
    );
    orphan.props.lock_ttl = orphan_ttl_ms;
    storage.prewrite(orphan).unwrap();
    orphan_ts
}

/// A client over `engine`, its regions split at `splits`, its oracle's
/// state in `dir`.
#[allow(dead_code)]
pub fn client_over<E: percolate::engine::Engine>(
    engine: E,
    dir: &std::path::Path,
    splits: Vec<Vec<u8>>,
) -> percolate::txn::client::Client<E> {
    use percolate::txn::oracle::TimestampOracle;
    let oracle = std::sync::Arc::new(percolate::txn::oracle::LocalOracle::open(dir).unwrap());
    let storage = percolate::txn::storage::StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        ..Default::default()
    };
    let cluster = percolate::txn::cluster::Cluster::new(engine, splits, storage);
    percolate::txn::client::Client::new(cluster, oracle, Default::default())
}

/// Generates, for each `test => scenario(&Client<E>)`, a test
/// `memory::test` on the memory engine and `rocks::test` on RocksDB in a
/// temporary directory, each over the calling file's
/// `client_on(engine, dir)`.
#[macro_export]
macro_rules! client_scenarios_on_both_engines {
    ($($name:ident => $scenario:ident;)*) => {
        mod memory {
            $(
                #[test]
                fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    let engine = percolate::engine::MemoryEngine::new();
                    super::$scenario(&super::client_on(engine, dir.path()));
                }
            )*
        }
        mod rocks {
            $(
                #[test]
                fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    let engine = percolate::engine::RocksEngine::open(dir.path().join("db")).unwrap();
                    super::$scenario(&super::client_on(engine, dir.path()));
                }
            )*
        }
    };
}
