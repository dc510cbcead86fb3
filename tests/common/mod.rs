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
