//! Compiles `glue/insert_hint.cc` (see there) against the RocksDB headers
//! of the `librocksdb-sys` crate that links RocksDB, with the C++ standard
//! that crate builds RocksDB with.

fn main() {
    println!("cargo:rerun-if-changed=glue/insert_hint.cc");
    // Set by `librocksdb-sys` (its `links = "rocksdb"`) for its dependents.
    let sys = std::env::var("DEP_ROCKSDB_CARGO_MANIFEST_DIR")
        .expect("librocksdb-sys tells its dependents where its sources are");
    let std = std::env::var("ROCKSDB_CXX_STD").unwrap_or_else(|_| "-std=c++20".to_owned());
    println!("cargo:rerun-if-env-changed=ROCKSDB_CXX_STD");
    cc::Build::new()
        .cpp(true)
        .file("glue/insert_hint.cc")
        .include(format!("{sys}/rocksdb/include"))
        .flag(std)
        .define("NDEBUG", Some("1"))
        .warnings(true)
        .compile("percolate_glue");
}
