//! What a commit survives, chosen per commit or for the whole client.
//!
//! ```text
//! cargo run --example durability
//! ```
//!
//! By default a commit is written to RocksDB's log in the operating
//! system's buffers: it survives the process crashing (the kernel still
//! writes it out), not a power loss. `CommitOptions::sync()` waits for an
//! fsync of the log before `commit` returns (concurrent synced commits
//! share one); `ClientConfig::durability` makes that every commit's
//! default, and `CommitOptions::buffered()` opts one commit out again.

use std::time::Instant;

use percolate::{Client, ClientConfig, CommitOptions, Durability, OpenOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let client = Client::open(dir.path())?;
    let timed = |options: CommitOptions| -> percolate::Result<f64> {
        let started = Instant::now();
        for i in 0..100 {
            let mut txn = client.begin()?;
            txn.put(format!("key{i}"), "value");
            txn.commit_with(options)?;
        }
        Ok(started.elapsed().as_secs_f64() * 1e6 / 100.0)
    };
    println!(
        "buffered (the default): {:.0} µs a commit",
        timed(CommitOptions::default())?
    );
    println!(
        "synced:                 {:.0} µs a commit",
        timed(CommitOptions::sync())?
    );
    drop(client);

    // Every commit synced unless it says otherwise.
    let options = OpenOptions {
        client: ClientConfig {
            durability: Some(Durability::Sync),
            ..Default::default()
        },
        ..Default::default()
    };
    let client = Client::open_with(dir.path(), options)?;
    let mut txn = client.begin()?;
    txn.put(b"audit/1".to_vec(), b"must survive a power loss".to_vec());
    let info = txn.commit()?;
    println!("synced by default: committed at {}", info.commit_ts);
    let mut txn = client.begin()?;
    txn.put(b"cache/1".to_vec(), b"can be recomputed".to_vec());
    txn.commit_with(CommitOptions::buffered())?;
    Ok(())
}
