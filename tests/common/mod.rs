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
