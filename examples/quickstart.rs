//! Percolate as an application embeds it: open a directory, run
//! transactions, scan, read a snapshot, use the raw key-value space, and
//! handle the errors a caller meets.
//!
//! ```text
//! cargo run --example quickstart [DATA_DIR]
//! ```
//!
//! Without `DATA_DIR` it works in a temporary directory that is removed at
//! the end. (`examples/mvcc_by_hand.rs` shows the records underneath, one
//! prewrite and commit at a time.)

use std::process::ExitCode;

use percolate::mvcc::Error as MvccError;
use percolate::{Client, Error};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let dir = match std::env::args_os().nth(1) {
        Some(dir) => dir.into(),
        None => temp.path().to_path_buf(),
    };
    // RocksDB under DIR/db; the timestamp oracle's state beside it. The
    // client holds the directory until it is dropped.
    let client = Client::open(&dir)?;

    // A transaction: reads see one snapshot, writes are buffered and
    // committed atomically. `with_retry` runs the closure again after a
    // conflict with another transaction.
    client.with_retry(|txn| {
        txn.put(b"account/alice", b"100");
        txn.put(b"account/bob", b"50");
        txn.put(b"account/carol", b"0");
        Ok(())
    })?;

    // Move 30 from alice to bob: read, then write, in one transaction.
    client.with_retry(|txn| {
        let alice = balance(txn.get(b"account/alice")?);
        let bob = balance(txn.get(b"account/bob")?);
        txn.put(b"account/alice", (alice - 30).to_string());
        txn.put(b"account/bob", (bob + 30).to_string());
        Ok(())
    })?;

    // A scan is a lazy iterator over any range of byte keys.
    let txn = client.begin()?;
    for pair in txn.scan("account/".."account0") {
        let (key, value) = pair?;
        println!(
            "{} = {}",
            String::from_utf8_lossy(&key),
            String::from_utf8_lossy(&value)
        );
    }
    let total: u64 = txn
        .scan("account/".."account0")
        .map(|pair| pair.map(|(_, v)| balance(Some(v))))
        .sum::<Result<u64, Error>>()?;
    println!("total: {total}");
    // The same sum over pairs lent in place (no allocation per pair).
    let mut lent = 0;
    txn.scan("account/".."account0").visit(|_key, value| {
        let text = std::str::from_utf8(value).unwrap_or("0");
        lent += text.parse::<u64>().unwrap_or(0);
        std::ops::ControlFlow::Continue(())
    })?;
    assert_eq!(lent, total);
    drop(txn);

    // A snapshot keeps reading the data as of its timestamp.
    let before = client.snapshot_latest()?;
    client.with_retry(|txn| {
        txn.delete(b"account/carol");
        Ok(())
    })?;
    println!(
        "carol then: {:?}, now: {:?}",
        before.get(b"account/carol")?.map(String::from_utf8),
        client.get_latest(b"account/carol")?
    );

    // An insert of a key that exists fails at commit with a typed error.
    let mut txn = client.begin()?;
    txn.insert(b"account/alice", b"1");
    match txn.commit() {
        Err(Error::Mvcc(MvccError::AlreadyExist { key, .. })) => {
            println!("insert refused: {key:?} exists")
        }
        other => println!("insert: {other:?}"),
    }

    // Raw key-value access: no transactions, a space of its own.
    let raw = client.raw();
    raw.put("hits", "1")?;
    let (swapped, _) = raw.compare_and_swap(b"hits", Some(b"1"), Some(b"2"))?;
    println!("raw hits swapped: {swapped}, now {:?}", raw.get(b"hits")?);
    Ok(())
}

fn balance(value: Option<Vec<u8>>) -> u64 {
    value
        .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0)
}
