//! Keyspaces on both engines, over three regions: the same key in two
//! keyspaces is two keys; a keyspace's scans (both ways, any bounds) see
//! its keys only, even beside a keyspace whose name extends its own; one
//! transaction writes several keyspaces atomically, optimistic or
//! pessimistic; snapshots read them.

mod common;

use std::ops::ControlFlow;

use percolate::engine::Engine;
use percolate::txn::client::{Client, Keyspace};

/// A client over regions split inside the keyspaces' stored keys.
fn client_on<E: Engine>(engine: E, dir: &std::path::Path) -> Client<E> {
    let splits = vec![
        Keyspace::new("a").unwrap().key(b"m"),
        Keyspace::new("b").unwrap().key(b""),
    ];
    common::client_over(engine, dir, splits)
}

client_scenarios_on_both_engines! {
    the_same_key_in_two_keyspaces_is_two_keys => the_same_key_in_two_keyspaces_is_two_keys;
    a_keyspace_scan_sees_only_its_own_keys => a_keyspace_scan_sees_only_its_own_keys;
    one_transaction_writes_several_keyspaces_atomically => one_transaction_writes_several_keyspaces_atomically;
    pessimistic_transactions_and_snapshots_use_keyspaces => pessimistic_transactions_and_snapshots_use_keyspaces;
}

fn pairs(items: &[(&[u8], &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
    items
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

/// Keyspaces "a" and "b".
fn a_and_b<E: Engine>(client: &Client<E>) -> (Keyspace, Keyspace) {
    (client.keyspace("a").unwrap(), client.keyspace("b").unwrap())
}

fn the_same_key_in_two_keyspaces_is_two_keys<E: Engine>(client: &Client<E>) {
    let (a, b) = a_and_b(client);
    client
        .with_retry(|txn| {
            a.put(txn, b"k", b"in a")?;
            b.put(txn, b"k", b"in b")?;
            Ok(())
        })
        .unwrap();
    client
        .with_retry(|txn| {
            assert_eq!(a.get(txn, b"k")?, Some(b"in a".to_vec()));
            assert_eq!(b.get(txn, b"k")?, Some(b"in b".to_vec()));
            // Not in the default key space.
            assert_eq!(txn.get(b"k")?, None);
            a.delete(txn, b"k")?;
            Ok(())
        })
        .unwrap();
    client
        .view(|txn| {
            assert_eq!(a.get(txn, b"k")?, None);
            assert_eq!(b.get(txn, b"k")?, Some(b"in b".to_vec()));
            Ok(())
        })
        .unwrap();
    // Insert refuses a key of its own keyspace only.
    client
        .with_retry(|txn| b.insert(txn, b"new", b"1"))
        .unwrap();
    let dup = client.with_retry(|txn| b.insert(txn, b"new", b"2"));
    assert!(dup.is_err(), "{dup:?}");
    client
        .with_retry(|txn| a.insert(txn, b"new", b"3"))
        .unwrap();
}

fn a_keyspace_scan_sees_only_its_own_keys<E: Engine>(client: &Client<E>) {
    // "ab" extends "a"; "a\0" sorts right after it.
    let names = ["a", "ab", "a\0", "b"];
    let spaces: Vec<Keyspace> = names.iter().map(|n| client.keyspace(n).unwrap()).collect();
    let keys: [&[u8]; 6] = [b"", b"\x00", b"a", b"m", b"z", b"\xff\xff"];
    client
        .with_retry(|txn| {
            for (space, name) in spaces.iter().zip(names) {
                for key in keys {
                    space.put(txn, key, name.as_bytes())?;
                }
            }
            txn.put(b"plain".to_vec(), b"default".to_vec());
            Ok(())
        })
        .unwrap();
    for (space, name) in spaces.iter().zip(names) {
        let all: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (*k, name.as_bytes())).collect();
        client
            .view(|txn| {
                let forward: Vec<_> = space.iter(txn).collect::<Result<_, _>>()?;
                assert_eq!(forward, pairs(&all), "{name:?}");
                let mut reverse: Vec<_> = space
                    .scan_reverse::<&[u8], E>(txn, ..)
                    .collect::<Result<_, _>>()?;
                reverse.reverse();
                assert_eq!(reverse, pairs(&all), "{name:?}");
                let middle: Vec<_> = space
                    .scan(txn, &b"a"[..]..=&b"z"[..])
                    .collect::<Result<_, _>>()?;
                assert_eq!(middle, pairs(&all[2..5]), "{name:?}");
                let tail: Vec<_> = space.scan(txn, &b"m"[..]..).collect::<Result<_, _>>()?;
                assert_eq!(tail, pairs(&all[3..]), "{name:?}");
                let head: Vec<_> = space
                    .scan_reverse(txn, ..&b"m"[..])
                    .take(2)
                    .collect::<Result<_, _>>()?;
                assert_eq!(head, pairs(&[all[2], all[1]]), "{name:?}");
                let mut lent = Vec::new();
                let got = space.scan(txn, &b"a"[..]..).visit(|key, value| {
                    lent.push((key.to_vec(), value.to_vec()));
                    ControlFlow::Continue(())
                })?;
                assert_eq!((got, lent), (4, pairs(&all[2..])), "{name:?} visited");
                // The range works with the reader's own scan too.
                let stored: Vec<_> = txn
                    .keys(space.range::<&[u8]>(..))
                    .collect::<Result<_, _>>()?;
                assert_eq!(stored.len(), keys.len());
                assert!(stored.iter().all(|k| space.strip(k).is_some()));
                Ok(())
            })
            .unwrap();
    }
}

fn one_transaction_writes_several_keyspaces_atomically<E: Engine>(client: &Client<E>) {
    let (accounts, log) = a_and_b(client);
    client
        .with_retry(|txn| {
            accounts.put(txn, b"alice", b"10")?;
            accounts.put(txn, b"zed", b"0")?;
            Ok(())
        })
        .unwrap();
    // A transfer that writes both keyspaces (and spans the regions).
    let before = client.current_ts().unwrap();
    let mut txn = client.begin().unwrap();
    accounts.put(&mut txn, b"alice", b"5").unwrap();
    accounts.put(&mut txn, b"zed", b"5").unwrap();
    log.put(&mut txn, b"1", b"alice->zed 5").unwrap();
    // A concurrent writer of one of its keys commits first: the whole
    // transaction fails, in every keyspace.
    client
        .with_retry(|other| accounts.put(other, b"zed", b"1"))
        .unwrap();
    assert!(txn.commit().is_err());
    client
        .view(|txn| {
            assert_eq!(accounts.get(txn, b"alice")?, Some(b"10".to_vec()));
            assert_eq!(accounts.get(txn, b"zed")?, Some(b"1".to_vec()));
            assert_eq!(log.get(txn, b"1")?, None);
            Ok(())
        })
        .unwrap();
    // Retried, it commits everywhere at once.
    client
        .with_retry(|txn| {
            accounts.put(txn, b"alice", b"5")?;
            accounts.put(txn, b"zed", b"6")?;
            log.put(txn, b"1", b"alice->zed 5")
        })
        .unwrap();
    let old = client.snapshot(before);
    assert_eq!(accounts.get(&old, b"alice").unwrap(), Some(b"10".to_vec()));
    assert_eq!(log.get(&old, b"1").unwrap(), None);
    let now = client.snapshot_latest().unwrap();
    assert_eq!(accounts.get(&now, b"alice").unwrap(), Some(b"5".to_vec()));
    assert_eq!(accounts.get(&now, b"zed").unwrap(), Some(b"6".to_vec()));
    assert_eq!(log.get(&now, b"1").unwrap(), Some(b"alice->zed 5".to_vec()));
}

fn pessimistic_transactions_and_snapshots_use_keyspaces<E: Engine>(client: &Client<E>) {
    let (a, b) = a_and_b(client);
    let mut txn = client.begin_pessimistic().unwrap();
    a.put(&mut txn, b"k", b"1").unwrap();
    b.put(&mut txn, b"k", b"2").unwrap();
    assert_eq!(a.get(&txn, b"k").unwrap(), Some(b"1".to_vec()));
    let seen: Vec<_> = b.iter(&txn).collect::<Result<_, _>>().unwrap();
    assert_eq!(seen, pairs(&[(b"k", b"2")]));
    // Its pessimistic lock is on the keyspace's key: an optimistic writer
    // of the same key in the same keyspace cannot commit meanwhile, one in
    // another keyspace can.
    let mut other = client.begin().unwrap();
    a.put(&mut other, b"k", b"x").unwrap();
    assert!(other.commit().is_err());
    client
        .with_retry(|t| client.keyspace("c")?.put(t, b"k", b"3"))
        .unwrap();
    txn.commit().unwrap();
    let snap = client.snapshot_latest().unwrap();
    assert_eq!(a.get(&snap, b"k").unwrap(), Some(b"1".to_vec()));
    assert_eq!(b.get(&snap, b"k").unwrap(), Some(b"2".to_vec()));
}
