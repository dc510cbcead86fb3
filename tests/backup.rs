//! Online backup and restore (`Client::backup`, then `Client::open` of the
//! backup directory), on RocksDB.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use percolate::engine::{Cf, Engine, EngineIterator, IterOptions, Snapshot};
use percolate::mvcc::{Key, TimeStamp};
use percolate::{Client, ClientConfig, Error, OpenOptions};

const ACCOUNTS: usize = 40;
const BALANCE: u64 = 100;

fn account(i: usize) -> Vec<u8> {
    format!("acct/{i:03}").into_bytes()
}

fn number(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap())
}

/// Three regions, so transfers commit by 1PC, async commit and 2PC.
fn open_bank(dir: &std::path::Path, config: ClientConfig) -> Client {
    let options = OpenOptions {
        split_keys: vec![account(13), account(27)],
        client: config,
        ..Default::default()
    };
    let client = Client::open_with(dir, options).unwrap();
    client
        .with_retry(|txn| {
            for i in 0..ACCOUNTS {
                txn.put(account(i), BALANCE.to_string());
            }
            Ok(())
        })
        .unwrap();
    client
}

/// The sum of every balance, read at one snapshot.
fn total(client: &Client) -> u64 {
    client
        .view(|txn| {
            let mut sum = 0;
            for pair in txn.scan("acct/".."acct0") {
                sum += number(Some(pair?.1));
            }
            Ok(sum)
        })
        .unwrap()
}

/// Every commit ts (write-CF key suffix) and lock ts in the database.
fn newest_ts_in(client: &Client) -> TimeStamp {
    let snap = client.cluster().regions()[0].storage().engine().snapshot();
    let mut newest = TimeStamp::zero();
    let mut cursor = snap.iter(Cf::Write, IterOptions::new()).unwrap();
    let mut valid = cursor.seek_to_first().unwrap();
    while valid {
        newest = newest.max(Key::decode_ts_from(cursor.key()).unwrap());
        valid = cursor.next().unwrap();
    }
    let mut cursor = snap.iter(Cf::Lock, IterOptions::new()).unwrap();
    let mut valid = cursor.seek_to_first().unwrap();
    while valid {
        let lock = percolate::mvcc::Lock::parse(cursor.value()).unwrap();
        newest = newest.max(lock.ts).max(lock.min_commit_ts);
        valid = cursor.next().unwrap();
    }
    newest
}

/// `PERCOLATE_BACKUP_PRELOAD` keys of 100 bytes beside the accounts (none
/// by default), for measuring a backup of a larger database:
/// `PERCOLATE_BACKUP_PRELOAD=1000000 cargo test --release --test backup
/// during_transfers_opens -- --nocapture`.
fn preload(client: &Client) {
    let keys: usize = std::env::var("PERCOLATE_BACKUP_PRELOAD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for chunk in (0..keys).collect::<Vec<_>>().chunks(10_000) {
        client
            .with_retry(|txn| {
                for &i in chunk {
                    txn.put(format!("fill/{i:08}"), vec![b'x'; 100]);
                }
                Ok(())
            })
            .unwrap();
    }
}

/// Backups taken while threads move money between accounts each open to
/// the right total: every transfer is in a backup whole or not at all,
/// and the locks of transfers in flight resolve on the restored side.
fn backup_during_transfers(config: ClientConfig) {
    let data = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    let client = open_bank(data.path(), config);
    preload(&client);
    let stop = AtomicBool::new(false);
    let transfers = AtomicU64::new(0);
    let mut taken = Vec::new();
    thread::scope(|scope| {
        for t in 0..4 {
            let (client, stop, transfers) = (&client, &stop, &transfers);
            scope.spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let from = account(i * 7 % ACCOUNTS);
                    let to = account((i * 13 + 5) % ACCOUNTS);
                    i += 1;
                    if from == to {
                        continue;
                    }
                    client
                        .with_retry(|txn| {
                            let a = number(txn.get(&from)?);
                            let b = number(txn.get(&to)?);
                            let amount = a.min(3);
                            txn.put(from.clone(), (a - amount).to_string());
                            txn.put(to.clone(), (b + amount).to_string());
                            Ok(())
                        })
                        .unwrap();
                    transfers.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for n in 0..3 {
            thread::sleep(Duration::from_millis(150));
            let dir = backups.path().join(format!("b{n}"));
            let before = transfers.load(Ordering::Relaxed);
            let started = Instant::now();
            let info = client.backup(&dir).unwrap();
            eprintln!(
                "backup {n}: {:?}, {} files, {} bytes, {} transfers before it",
                started.elapsed(),
                info.files,
                info.bytes,
                before
            );
            taken.push(dir);
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(transfers.load(Ordering::Relaxed) > 0);
    assert_eq!(total(&client), ACCOUNTS as u64 * BALANCE);
    for dir in taken {
        let restored = Client::open(&dir).unwrap();
        assert_eq!(total(&restored), ACCOUNTS as u64 * BALANCE, "{dir:?}");
    }
}

#[test]
fn a_backup_during_transfers_opens_to_a_consistent_total() {
    backup_during_transfers(ClientConfig::default());
}

#[test]
fn a_backup_during_two_pc_transfers_with_background_commits_opens_to_a_consistent_total() {
    // Secondaries committed in the background leave locks of committed
    // transactions behind for a while: some backups hold them.
    backup_during_transfers(ClientConfig {
        async_commit: false,
        one_pc: false,
        secondary_commits: percolate::SecondaryCommits::Background,
        ..Default::default()
    });
}

#[test]
fn a_commit_before_backup_returned_is_in_the_backup_and_one_after_is_not() {
    let data = tempfile::tempdir().unwrap();
    let backup = tempfile::tempdir().unwrap();
    let backup = backup.path().join("b");
    let client = Client::open(data.path()).unwrap();
    let mut txn = client.begin().unwrap();
    txn.put(b"before", b"1");
    let before = txn.commit().unwrap();
    let long = vec![7u8; 4096];
    client
        .with_retry(|txn| {
            txn.put(b"long", long.clone());
            Ok(())
        })
        .unwrap();
    let info = client.backup(&backup).unwrap();
    assert!(info.ts > before.commit_ts);
    assert!(info.files > 0 && info.bytes > 0);
    client
        .with_retry(|txn| {
            txn.put(b"after", b"2");
            Ok(())
        })
        .unwrap();
    drop(client);

    let restored = Client::open(&backup).unwrap();
    assert_eq!(restored.get_latest(b"before").unwrap(), Some(b"1".to_vec()));
    assert_eq!(restored.get_latest(b"long").unwrap(), Some(long));
    assert_eq!(restored.get_latest(b"after").unwrap(), None);
    let at_commit = restored.snapshot(before.commit_ts);
    assert_eq!(at_commit.get(b"before").unwrap(), Some(b"1".to_vec()));
    let below = restored.snapshot(before.commit_ts.prev());
    assert_eq!(below.get(b"before").unwrap(), None);
    // The restored database is a database of its own: it takes writes.
    restored
        .with_retry(|txn| {
            txn.put(b"restored", b"3");
            Ok(())
        })
        .unwrap();
    assert_eq!(
        restored.get_latest(b"restored").unwrap(),
        Some(b"3".to_vec())
    );
}

#[test]
fn timestamps_after_restore_are_above_every_one_in_the_backup() {
    let data = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    // Async commit over regions: commit timestamps calculated from max_ts,
    // not taken from the oracle.
    let client = open_bank(data.path(), ClientConfig::default());
    let mut commits = Vec::new();
    for i in 0..20 {
        let info = client
            .with_retry_info(|txn| {
                txn.put(account(i), "100");
                txn.put(account(39 - i), "100");
                Ok(())
            })
            .unwrap()
            .1;
        commits.push(info.commit_ts);
    }
    // A read far ahead pushes max_ts (and so the next async commit ts)
    // above the oracle's latest timestamp.
    let ahead = TimeStamp::compose(client.current_ts().unwrap().physical() + 500, 0);
    client.snapshot(ahead).get(&account(0)).unwrap();
    let pushed = client
        .with_retry_info(|txn| {
            txn.put(account(0), "100");
            txn.put(account(39), "100");
            Ok(())
        })
        .unwrap()
        .1;
    commits.push(pushed.commit_ts);
    let dir = backups.path().join("b");
    let info = client.backup(&dir).unwrap();
    drop(client);

    let restored = Client::open(&dir).unwrap();
    let newest = newest_ts_in(&restored);
    assert!(commits.iter().all(|ts| *ts <= newest));
    for _ in 0..1000 {
        let ts = restored.current_ts().unwrap();
        assert!(ts > newest, "{ts} is not above {newest}");
        assert!(ts > info.ts, "{ts} is not above the backup's {}", info.ts);
    }
    let commit = restored
        .with_retry_info(|txn| {
            txn.put(account(1), "100");
            Ok(())
        })
        .unwrap()
        .1;
    assert!(commit.commit_ts > newest);
}

#[test]
fn locks_in_a_backup_are_resolved_by_the_restored_readers() {
    let data = tempfile::tempdir().unwrap();
    let backup = tempfile::tempdir().unwrap();
    let backup = backup.path().join("b");
    let client = Client::open(data.path()).unwrap();
    let orphan_ts = common::leave_dead_transactions(&client, 50);
    client.backup(&backup).unwrap();
    drop(client);

    let restored = Client::open(&backup).unwrap();
    assert!(newest_ts_in(&restored) >= orphan_ts);
    assert_eq!(restored.get_latest(b"s").unwrap(), Some(b"sv".to_vec()));
    assert_eq!(restored.get_latest(b"o").unwrap(), None);
    assert_eq!(restored.get_latest(b"p").unwrap(), Some(b"pv".to_vec()));
}

#[test]
fn a_backup_into_a_non_empty_directory_is_refused_and_writes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join("keep"), b"mine").unwrap();
    let client = Client::open(data.path()).unwrap();
    let err = client.backup(target.path()).unwrap_err();
    assert!(
        matches!(&err, Error::DirectoryNotEmpty { path } if path == target.path()),
        "{err:?}"
    );
    let entries: Vec<_> = std::fs::read_dir(target.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("keep")]);
    // An existing empty directory is fine.
    let empty = tempfile::tempdir().unwrap();
    client.backup(empty.path()).unwrap();
    assert!(empty.path().join("db").join("CURRENT").exists());
    // A second backup into the same directory is refused too.
    let err = client.backup(empty.path()).unwrap_err();
    assert!(matches!(err, Error::DirectoryNotEmpty { .. }), "{err:?}");
}
