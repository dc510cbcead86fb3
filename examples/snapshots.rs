//! Snapshot reads: the data as of a chosen timestamp, unchanged by later
//! commits.
//!
//! ```text
//! cargo run --example snapshots
//! ```
//!
//! `Client::current_ts` hands out a timestamp; `Client::snapshot(ts)`
//! reads the database as of it, however many commits come after, until GC
//! collects the versions it needs. `Client::get_latest` reads the newest
//! committed value without a timestamp.

use percolate::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let client = Client::open(dir.path())?;
    client.with_retry(|txn| {
        txn.put(b"price/tea".to_vec(), b"3.50".to_vec());
        txn.put(b"price/coffee".to_vec(), b"2.80".to_vec());
        Ok(())
    })?;
    let monday = client.current_ts()?;

    client.with_retry(|txn| {
        txn.put(b"price/tea".to_vec(), b"3.90".to_vec());
        txn.delete(b"price/coffee".to_vec());
        Ok(())
    })?;

    let then = client.snapshot(monday);
    let now = client.snapshot_latest()?;
    for (label, snapshot) in [("monday", &then), ("now", &now)] {
        for pair in snapshot.scan(&b"price/"[..]..&b"price0"[..]) {
            let (key, value) = pair?;
            println!(
                "{label:>6}: {} = {}",
                String::from_utf8_lossy(&key),
                String::from_utf8_lossy(&value)
            );
        }
    }
    assert_eq!(then.get(b"price/tea")?, Some(b"3.50".to_vec()));
    assert_eq!(then.get(b"price/coffee")?, Some(b"2.80".to_vec()));
    assert_eq!(now.get(b"price/coffee")?, None);
    assert_eq!(client.get_latest(b"price/tea")?, Some(b"3.90".to_vec()));
    Ok(())
}
