//! Writes, commits and reads a small transaction through the MVCC layer on
//! RocksDB, printing every record it leaves on disk.
//!
//! ```text
//! cargo run --example mvcc_by_hand [DATA_DIR]
//! ```
//!
//! Without `DATA_DIR` it works in a temporary directory that is removed at
//! the end. The transaction steps here are spelled out record by record (a
//! prewrite puts locks, a commit turns them into write records); the
//! `percolate-txn` actions wrap exactly these steps with their checks.

use std::process::ExitCode;

use percolate::engine::{
    Cf, Engine, EngineIterator, IterOptions, RocksEngine, Snapshot, WriteOptions,
};
use percolate::mvcc::{
    Error, Key, Lock, LockType, MvccReader, MvccTxn, PointGetterBuilder, ScannerBuilder, TimeStamp,
    Write, WriteType,
};
use percolate::txn::actions::mvcc_by_key::mvcc_by_key;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mvcc_by_hand: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let engine = match std::env::args_os().nth(1) {
        Some(dir) => RocksEngine::open(dir)?,
        None => RocksEngine::open_temporary()?,
    };
    println!("RocksDB at {}", engine.path().display());

    let start_ts = TimeStamp::compose(1_700_000_000_000, 0);
    let commit_ts = TimeStamp::compose(1_700_000_000_000, 5);
    let long_value = vec![b'x'; 1000];
    let mutations: [(&[u8], &[u8]); 3] = [
        (b"alice", b"100"),
        (b"bob", b"250"),
        (b"carol", &long_value),
    ];

    // Prewrite: lock every key; the first one is the primary.
    let primary = mutations[0].0.to_vec();
    let mut txn = MvccTxn::new(start_ts);
    for (raw, value) in mutations {
        let key = Key::from_raw(raw);
        let mut lock = Lock::new(LockType::Put, primary.clone(), start_ts, 3000);
        if percolate::mvcc::is_short_value(value) {
            lock.short_value = Some(value.to_vec());
        } else {
            txn.put_value(key.clone(), start_ts, value.to_vec());
        }
        txn.put_lock(key, &lock);
    }
    engine.write(&txn.into_write_batch(), WriteOptions::durable())?;
    println!("prewritten at start_ts {start_ts}");

    // A reader after start_ts cannot tell yet whether the txn commits.
    let later = commit_ts.next();
    match PointGetterBuilder::new(engine.snapshot(), later)
        .build()
        .get(&Key::from_raw(b"bob"))
    {
        Err(Error::KeyIsLocked(info)) => println!(
            "read of bob at {later}: locked by txn {} (primary {})",
            info.lock_version,
            String::from_utf8_lossy(&info.primary_lock)
        ),
        other => return Err(format!("expected a lock on bob, got {other:?}").into()),
    }

    // Commit: the primary first (the commit point), then the secondaries.
    for (raw, _) in mutations {
        commit(&engine, &Key::from_raw(raw), start_ts, commit_ts)?;
    }
    println!("committed at commit_ts {commit_ts}");

    // Reads before and after the commit_ts.
    let mut before = PointGetterBuilder::new(engine.snapshot(), start_ts).build();
    let mut after = PointGetterBuilder::new(engine.snapshot(), later).build();
    for (raw, value) in mutations {
        let key = Key::from_raw(raw);
        assert_eq!(before.get(&key)?, None);
        assert_eq!(after.get(&key)?.as_deref(), Some(value));
    }
    println!("reads at {start_ts} see nothing; reads at {later} see all three values");

    let mut scanner = ScannerBuilder::new(engine.snapshot(), later)
        .reverse(true)
        .build()?;
    print!("reverse scan:");
    while let Some((key, value)) = scanner.next()? {
        print!(" {}={}B", key, value.len());
    }
    println!();

    dump(&engine)?;
    Ok(())
}

fn commit(
    engine: &RocksEngine,
    key: &Key,
    start_ts: TimeStamp,
    commit_ts: TimeStamp,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut reader = MvccReader::new(engine.snapshot());
    let lock = reader
        .load_lock(key)?
        .filter(|lock| lock.ts == start_ts)
        .ok_or_else(|| format!("lock on {key} is gone"))?;
    let write_type = WriteType::from_lock_type(lock.lock_type).ok_or("not a committable lock")?;
    let mut txn = MvccTxn::new(start_ts);
    txn.put_write(
        key.clone(),
        commit_ts,
        &Write::new(write_type, start_ts, lock.short_value),
    );
    txn.unlock_key(key.clone());
    engine.write(&txn.into_write_batch(), WriteOptions::durable())?;
    Ok(())
}

/// Prints every record of every CF as stored (hex), then each key's
/// records decoded, as `percolate-txn`'s MvccByKey debug view shows them.
fn dump(engine: &RocksEngine) -> Result<(), Box<dyn std::error::Error>> {
    let snapshot = engine.snapshot();
    let mut keys = std::collections::BTreeSet::new();
    println!("stored records (key bytes as on disk, without the `z` data prefix):");
    for cf in Cf::ALL {
        let mut it = snapshot.iter(cf, IterOptions::new())?;
        let mut valid = it.seek_to_first()?;
        while valid {
            let user = match cf {
                Cf::Lock => it.key(),
                _ => Key::split_on_ts_for(it.key())?.0,
            };
            keys.insert(Key::from_encoded_slice(user));
            println!(
                "  {cf:>7} {} ({} value bytes)",
                hex(it.key()),
                it.value().len()
            );
            valid = it.next()?;
        }
    }
    let mut reader = MvccReader::new(snapshot);
    for key in keys {
        println!("{key}:");
        for line in mvcc_by_key(&mut reader, &key)?.to_string().lines() {
            println!("  {line}");
        }
    }
    Ok(())
}
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
