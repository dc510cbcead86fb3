//! Looking at a database another process holds, and getting out of bad
//! bytes on disk.
//!
//! ```text
//! cargo run --example damage
//! ```
//!
//! `Client::open_read_only` reads beside the process that holds a data
//! directory (or on read-only media): no lock taken, nothing written.
//! `Client::repair` removes the records whose bytes are not in TiKV's
//! format, which would fail every read that reaches them, and hands each
//! one back.

use percolate::engine::{Cf, Engine, WriteBatch, WriteOptions};
use percolate::mvcc::Key;
use percolate::{Client, Error};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let owner = Client::open(dir.path())?;
    owner.with_retry(|txn| {
        txn.put(b"greeting".to_vec(), b"hello".to_vec());
        Ok(())
    })?;

    // A second process could not open the directory; a reader can.
    assert!(matches!(
        Client::open(dir.path()),
        Err(Error::DirectoryLocked { .. })
    ));
    let reader = Client::open_read_only(dir.path())?;
    let greeting = reader.get_latest(b"greeting")?.unwrap_or_default();
    println!(
        "read-only: greeting = {}",
        String::from_utf8_lossy(&greeting)
    );
    drop(reader);

    // Bytes that are not a Lock record where a lock belongs (a disk
    // fault, or a program writing the column families by hand).
    let mut batch = WriteBatch::new();
    batch.put(
        Cf::Lock,
        Key::from_raw(b"greeting").into_encoded(),
        b"\xff\xfe".to_vec(),
    );
    owner.cluster().regions()[0]
        .storage()
        .engine()
        .write(&batch, WriteOptions::default())?;
    match owner.get_latest(b"greeting") {
        Err(e) => println!("a read now fails: {e}"),
        Ok(_) => return Err("the damaged lock went unnoticed".into()),
    }
    for record in owner.repair()? {
        println!(
            "repair removed a {:?} record, key {:02x?}: {}",
            record.cf, record.key, record.reason
        );
    }
    let greeting = owner.get_latest(b"greeting")?.unwrap_or_default();
    println!(
        "after repair: greeting = {}",
        String::from_utf8_lossy(&greeting)
    );
    Ok(())
}
