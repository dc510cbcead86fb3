//! A data directory opened for reading only: beside a client that holds
//! it, it reads what was committed, writes nothing (every write is
//! `Error::ReadOnly`), resolves no lock (a lock met is `KeyIsLocked`), and
//! leaves the directory as it found it.

use std::collections::BTreeMap;
use std::path::Path;

use percolate::mvcc::Key;
use percolate::txn::actions::prewrite::Mutation;
use percolate::txn::commands::Prewrite;
use percolate::{Client, Error};

/// Every file under `dir` with its contents.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            for (name, bytes) in contents(&path) {
                files.insert(format!("{}/{name}", path.display()), bytes);
            }
        } else {
            files.insert(path.display().to_string(), std::fs::read(&path).unwrap());
        }
    }
    files
}

fn is_read_only(e: &Error) -> bool {
    matches!(e, Error::ReadOnly { .. })
}

#[test]
fn a_read_only_client_reads_beside_the_owner_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Client::open(dir.path()).unwrap();
    for i in 0..100 {
        let mut txn = owner.begin().unwrap();
        txn.put(format!("k{i:03}"), format!("v{i}"));
        txn.commit().unwrap();
    }
    owner.raw().put(b"raw".to_vec(), b"r".to_vec()).unwrap();
    // A dead client's lock on "locked".
    let storage = owner.cluster().region_for(b"locked").storage();
    let start_ts = owner.current_ts().unwrap();
    let prewrite = Prewrite::new(
        vec![Mutation::put(Key::from_raw(b"locked"), b"x".to_vec())],
        b"locked",
        start_ts,
    );
    assert!(storage.prewrite(prewrite).unwrap().locks.is_empty());

    let reader = Client::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.get_latest(b"k042").unwrap(), Some(b"v42".to_vec()));
    let txn = reader.begin().unwrap();
    assert!(txn.start_ts() > start_ts, "above every lock in the data");
    let keys: Vec<Vec<u8>> = txn.keys("k".."l").collect::<Result<_, _>>().unwrap();
    assert_eq!(keys.len(), 100);
    assert_eq!(reader.raw().get(b"raw").unwrap(), Some(b"r".to_vec()));

    // A lock is reported, not resolved.
    let err = txn.get(b"locked").unwrap_err();
    assert!(
        matches!(err, Error::Mvcc(percolate::mvcc::Error::KeyIsLocked(_))),
        "{err:?}"
    );

    // Every write is refused.
    let mut write = reader.begin().unwrap();
    write.put(b"k000".to_vec(), b"new".to_vec());
    assert!(is_read_only(&write.commit().unwrap_err()));
    assert!(is_read_only(
        &reader
            .raw()
            .put(b"raw".to_vec(), b"x".to_vec())
            .unwrap_err()
    ));
    assert!(is_read_only(
        &reader.raw().delete_range::<&[u8]>(..).unwrap_err()
    ));
    assert!(is_read_only(&reader.begin_pessimistic().unwrap_err()));
    assert!(is_read_only(&reader.gc(start_ts).unwrap_err()));
    assert!(is_read_only(&reader.repair().unwrap_err()));
    // A read-only commit (no writes) is fine.
    assert!(reader.begin().unwrap().commit().is_ok());
    drop(reader);
    assert_eq!(owner.get_latest(b"k000").unwrap(), Some(b"v0".to_vec()));

    // With the owner gone (its background work done), a read-only client
    // leaves every file as it was.
    drop(owner);
    let before = contents(dir.path());
    let reader = Client::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.get_latest(b"k099").unwrap(), Some(b"v99".to_vec()));
    drop(reader);
    assert_eq!(contents(dir.path()), before, "the directory is untouched");
}

#[test]
fn a_read_only_open_of_a_missing_database_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    assert!(Client::open_read_only(&missing).is_err());
    assert!(!missing.exists());
}
