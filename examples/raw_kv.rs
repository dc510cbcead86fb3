//! Raw key-value access: no transactions, no versions, beside the
//! transactional data.
//!
//! ```text
//! cargo run --example raw_kv
//! ```
//!
//! `Client::raw` writes and reads plain pairs in a column family of their
//! own, routed to the regions by key, as TiKV's raw API does: a cache or a
//! counter that needs no snapshot isolation, at the cost of one RocksDB
//! write per call. `compare_and_swap` is the one atomic read-modify-write.

use percolate::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let client = Client::open(dir.path())?;
    let raw = client.raw();

    raw.put(b"session/42".to_vec(), b"alice".to_vec())?;
    raw.batch_put(vec![
        (b"session/43".to_vec(), b"bob".to_vec()),
        (b"session/44".to_vec(), b"carol".to_vec()),
    ])?;
    println!(
        "session/42 = {:?}",
        raw.get(b"session/42")?.map(String::from_utf8)
    );

    // A counter: retry the swap until no one else changed it in between.
    for _ in 0..3 {
        loop {
            let now = raw.get(b"visits")?;
            let next = match &now {
                Some(v) => String::from_utf8_lossy(v).parse::<u64>()? + 1,
                None => 1,
            };
            let (swapped, _) =
                raw.compare_and_swap(b"visits", now.as_deref(), Some(next.to_string().as_bytes()))?;
            if swapped {
                break;
            }
        }
    }
    assert_eq!(raw.get(b"visits")?, Some(b"3".to_vec()));

    raw.delete_range(&b"session/43"[..]..)?;
    let left: Vec<_> = raw.scan::<&[u8]>(..).collect::<Result<_, _>>()?;
    for (key, value) in &left {
        println!(
            "{} = {}",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(value)
        );
    }
    assert_eq!(
        left.len(),
        1,
        "session/42; visits sorts after session/ and went too"
    );
    // Raw pairs are not transactional data: a transaction does not see them.
    assert_eq!(client.get_latest(b"session/42")?, None);
    Ok(())
}
