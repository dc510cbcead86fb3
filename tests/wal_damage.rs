//! A damaged write-ahead log is an error at open, not a silent rollback of
//! acknowledged commits; a torn last record (a write cut short) is dropped
//! and the rest recovered.

use std::path::{Path, PathBuf};

use percolate::engine::Error as EngineError;
use percolate::{Client, Error};

/// Commits `count` transactions of one key each, then closes the client.
/// Nothing is flushed: every commit lives only in the log.
fn commit_many(dir: &Path, count: usize) {
    let client = Client::open(dir).unwrap();
    for i in 0..count {
        let mut txn = client.begin().unwrap();
        txn.put(format!("key{i:05}"), vec![b'v'; 100]);
        txn.commit().unwrap();
    }
}

/// The database's write-ahead log file that holds the commits.
fn log_file(dir: &Path) -> PathBuf {
    let mut logs: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join("db"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .map(|path| (std::fs::metadata(&path).unwrap().len(), path))
        .collect();
    logs.sort();
    logs.pop().expect("a log file").1
}

/// Flips 8 bytes in the middle of the log file `log`, as a disk fault
/// would; returns the damaged contents.
fn garble_the_middle_of(log: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(log).unwrap();
    assert!(bytes.len() > 100_000, "the commits are in the log");
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 8] {
        *b ^= 0x5a;
    }
    std::fs::write(log, &bytes).unwrap();
    bytes
}

fn is_corrupted_at_open(e: &Error) -> bool {
    matches!(e.as_engine(), Some(EngineError::CorruptedAtOpen { .. }))
}

#[test]
fn garbled_bytes_in_the_middle_of_the_log_fail_the_open() {
    let dir = tempfile::tempdir().unwrap();
    commit_many(dir.path(), 2000);
    garble_the_middle_of(&log_file(dir.path()));
    let err = Client::open(dir.path()).expect_err("a damaged log must not open");
    assert!(is_corrupted_at_open(&err), "{err:?}");
}

#[test]
fn a_torn_last_record_is_dropped_and_the_rest_recovered() {
    let dir = tempfile::tempdir().unwrap();
    commit_many(dir.path(), 2000);
    let log = log_file(dir.path());
    let len = std::fs::metadata(&log).unwrap().len();
    // Cut the last record short, as a power loss during its write would.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 20)
        .unwrap();
    let client = Client::open(dir.path()).unwrap();
    let txn = client.begin().unwrap();
    let found = txn.keys("key".."kez").count();
    // The last commit may be gone with its record; every other is there.
    assert!((1999..=2000).contains(&found), "{found} of 2000 commits");
    assert!(txn.get(b"key01998").unwrap().is_some());
}

#[test]
fn a_salvaging_open_keeps_the_prefix_and_reports_what_it_dropped() {
    let dir = tempfile::tempdir().unwrap();
    commit_many(dir.path(), 2000);
    let log = log_file(dir.path());
    let bytes = garble_the_middle_of(&log);

    let salvage = percolate::OpenOptions {
        engine: percolate::engine::RocksOptions {
            wal_recovery: percolate::engine::WalRecovery::SalvagePrefix,
            ..Default::default()
        },
        ..Default::default()
    };
    let client = Client::open_with(dir.path(), salvage).unwrap();
    let engine = client.cluster().regions()[0].storage().engine();
    let report = engine
        .salvage_report()
        .expect("the damage is reported")
        .clone();
    assert!(!report.damage.is_empty());
    // The log, as it was before the open dropped its tail, is kept.
    let kept = report.logs_kept.join(log.file_name().unwrap());
    assert_eq!(std::fs::read(&kept).unwrap(), bytes);

    // What is left is a prefix of the commits: the ones before the damage.
    let txn = client.begin().unwrap();
    let found: Vec<Vec<u8>> = txn.keys("key".."kez").collect::<Result<_, _>>().unwrap();
    assert!(
        !found.is_empty() && found.len() < 2000,
        "{} commits",
        found.len()
    );
    let expected: Vec<Vec<u8>> = (0..found.len())
        .map(|i| format!("key{i:05}").into_bytes())
        .collect();
    assert_eq!(found, expected);
    drop(txn);
    drop(client);

    // The salvaged database opens normally from then on, with no report.
    let client = Client::open_with(
        dir.path(),
        percolate::OpenOptions {
            engine: percolate::engine::RocksOptions {
                wal_recovery: percolate::engine::WalRecovery::SalvagePrefix,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert!(client.salvage_report().is_none());
}
