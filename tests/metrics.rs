//! `Client::metrics` on RocksDB over two regions: each commit protocol,
//! command, conflict, retry, lock resolution and oracle call is counted
//! where it happens; RocksDB's own statistics come with them; metrics
//! switched off count nothing.

mod common;

use std::sync::Arc;

use percolate::engine::RocksOptions;
use percolate::txn::client::{Client, ClientConfig, CommitProtocol, OpenOptions};
use percolate::txn::metrics::{CommandKind, Metrics, ProtocolKind, ResolveOutcome};
use percolate::txn::storage::StorageConfig;

/// Regions [.., "m") and ["m", ..); transactions of more than two keys
/// commit by 2PC.
fn open(dir: &std::path::Path, metrics: Metrics, statistics: bool) -> Client {
    Client::open_with(
        dir,
        OpenOptions {
            split_keys: vec![b"m".to_vec()],
            client: ClientConfig {
                max_async_commit_keys: 2,
                ..ClientConfig::default()
            },
            storage: StorageConfig {
                metrics: Arc::new(metrics),
                ..StorageConfig::default()
            },
            engine: RocksOptions {
                statistics,
                ..RocksOptions::default()
            },
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

fn commits(client: &Client, protocol: ProtocolKind) -> (u64, u64) {
    let m = client.metrics();
    let c = m.commits.iter().find(|c| c.protocol == protocol).unwrap();
    (c.optimistic, c.pessimistic)
}

fn resolved(client: &Client, outcome: ResolveOutcome) -> u64 {
    client
        .metrics()
        .resolved
        .iter()
        .find(|(o, _)| *o == outcome)
        .unwrap()
        .1
}

#[test]
fn each_commit_is_counted_under_its_protocol_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), Metrics::new(), true);
    let commit = |keys: &[&[u8]]| {
        let mut txn = client.begin().unwrap();
        for k in keys {
            txn.put(k.to_vec(), b"v".to_vec());
        }
        txn.commit().unwrap().protocol
    };
    assert_eq!(commit(&[b"a"]), CommitProtocol::OnePc);
    assert_eq!(commit(&[b"a", b"z"]), CommitProtocol::AsyncCommit);
    assert_eq!(commit(&[b"a", b"b", b"z"]), CommitProtocol::TwoPc);
    let mut pessimistic = client.begin_pessimistic().unwrap();
    pessimistic.put(b"c".to_vec(), b"v".to_vec()).unwrap();
    assert_eq!(
        pessimistic.commit().unwrap().protocol,
        CommitProtocol::OnePc
    );
    // A read-only commit counts under no protocol.
    client.view(|txn| txn.get(b"a")).unwrap();
    client.begin().unwrap().commit().unwrap();

    assert_eq!(commits(&client, ProtocolKind::OnePc), (1, 1));
    assert_eq!(commits(&client, ProtocolKind::AsyncCommit), (1, 0));
    assert_eq!(commits(&client, ProtocolKind::TwoPc), (1, 0));
    let m = client.metrics();
    assert_eq!(m.commits_total(), 4);
    for c in &m.commits {
        assert_eq!(c.latency.count, c.optimistic + c.pessimistic);
    }
    // Prewrites: 1 (1PC) + 2 (async, one per region) + 2 (2PC) + 1
    // (pessimistic 1PC); the 2PC commit writes its primary with a Commit
    // command (its secondaries' commits may still be in flight).
    let prewrite = m.command(CommandKind::Prewrite).unwrap();
    assert_eq!((prewrite.ok, prewrite.failed), (6, 0));
    assert_eq!(prewrite.latency.count, 6);
    assert!(m.command(CommandKind::Commit).unwrap().ok >= 1);
    assert_eq!(
        m.command(CommandKind::AcquirePessimisticLock).unwrap().ok,
        1
    );
    assert!(m.command(CommandKind::Get).unwrap().ok >= 1);
    // Every begin asks the oracle; so does the 2PC commit_ts.
    assert!(m.oracle_calls >= 7, "{} oracle calls", m.oracle_calls);
    assert_eq!((m.conflicts, m.retries, m.rolled_back), (0, 0, 0));
}

#[test]
fn a_conflict_and_its_retry_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), Metrics::new(), true);
    client
        .with_retry(|txn| {
            txn.put(b"k".to_vec(), b"0".to_vec());
            Ok(())
        })
        .unwrap();
    let mut attempts = 0;
    client
        .with_retry(|txn| {
            attempts += 1;
            let seen = txn.get(b"k")?;
            if attempts == 1 {
                // Another transaction commits the key after this one
                // began: this commit's prewrite meets a newer write.
                client.with_retry(|other| {
                    other.put(b"k".to_vec(), b"other".to_vec());
                    Ok(())
                })?;
            }
            txn.put(
                b"k".to_vec(),
                [seen.unwrap_or_default(), b"+1".to_vec()].concat(),
            );
            Ok(())
        })
        .unwrap();
    assert_eq!(attempts, 2);
    assert_eq!(client.get_latest(b"k").unwrap(), Some(b"other+1".to_vec()));
    let m = client.metrics();
    assert_eq!((m.conflicts, m.retries), (1, 1));
    assert_eq!(commits(&client, ProtocolKind::OnePc), (3, 0));
    assert_eq!(m.command(CommandKind::Prewrite).unwrap().failed, 1);
    // The failed 1PC prewrite wrote nothing: no unlock follows it.
    assert_eq!(unlocks(&client), 0);
}

/// Unlock commands run so far (a failed commit sends them in the
/// background).
fn unlocks(client: &Client) -> u64 {
    client
        .metrics()
        .command(CommandKind::Unlock)
        .map_or(0, |c| c.ok + c.failed)
}

#[test]
fn a_lock_resolved_by_a_reader_is_counted_by_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), Metrics::new(), true);
    common::leave_dead_transactions(&client, 1);
    std::thread::sleep(std::time::Duration::from_millis(20));

    assert_eq!(client.get_latest(b"s").unwrap(), Some(b"sv".to_vec()));
    assert_eq!(resolved(&client, ResolveOutcome::Committed), 1);
    // A read without a timestamp steps over a lock on its own primary;
    // one at a snapshot resolves it.
    assert_eq!(client.view(|txn| txn.get(b"o")).unwrap(), None);
    assert_eq!(resolved(&client, ResolveOutcome::RolledBack), 1);
    assert_eq!(resolved(&client, ResolveOutcome::Alive), 0);
    let m = client.metrics();
    assert!(m.command(CommandKind::CheckTxnStatus).unwrap().ok >= 2);
    assert_eq!(m.command(CommandKind::ResolveLockLite).unwrap().ok, 2);
}

#[test]
fn rocksdb_statistics_come_with_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), Metrics::new(), true);
    for i in 0..200u32 {
        client
            .with_retry(|txn| {
                txn.put(format!("key{i:04}").into_bytes(), vec![b'x'; 300]);
                Ok(())
            })
            .unwrap();
    }
    let engine = client.cluster().regions()[0].storage().engine();
    engine.flush().unwrap();
    for i in 0..200u32 {
        assert!(
            client
                .get_latest(format!("key{i:04}").as_bytes())
                .unwrap()
                .is_some()
        );
    }
    let m = client.metrics();
    let stats = m.engine.as_ref().expect("RocksDB keeps statistics");
    assert!(
        stats.block_cache_hits + stats.block_cache_misses > 0,
        "{stats:?}"
    );
    assert!(stats.block_cache_hit_rate().is_some());
    assert!(stats.flush_write_bytes > 0, "{stats:?}");
    assert!(stats.live_sst_bytes > 0, "{stats:?}");
    assert!(stats.block_cache_usage_bytes > 0, "{stats:?}");
    let text = m.to_prometheus();
    assert!(text.contains("# TYPE percolate_rocksdb_block_cache_hits_total counter"));
    assert!(text.contains(&format!(
        "percolate_rocksdb_live_sst_bytes {}",
        stats.live_sst_bytes
    )));
    assert!(text.contains("percolate_commits_total{protocol=\"1pc\",mode=\"optimistic\"} 200"));
}

#[test]
fn switched_off_metrics_and_statistics_count_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), Metrics::disabled(), false);
    for k in [&b"a"[..], b"z"] {
        client
            .with_retry(|txn| {
                txn.put(k.to_vec(), b"v".to_vec());
                Ok(())
            })
            .unwrap();
        assert!(client.get_latest(k).unwrap().is_some());
    }
    client.cluster().regions()[0]
        .storage()
        .engine()
        .flush()
        .unwrap();
    assert!(client.get_latest(b"a").unwrap().is_some());
    let m = client.metrics();
    assert!(m.commands.is_empty());
    assert_eq!((m.commits_total(), m.oracle_calls), (0, 0));
    let stats = m.engine.unwrap();
    assert_eq!((stats.block_cache_hits, stats.block_cache_misses), (0, 0));
    // The sizes are RocksDB's properties, kept either way.
    assert!(stats.live_sst_bytes > 0);
}

#[test]
fn a_transaction_given_up_is_counted_as_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let client = open(dir.path(), Metrics::new(), false);
    // A pessimistic transaction dropped with its locks.
    let mut txn = client.begin_pessimistic().unwrap();
    txn.put(b"a".to_vec(), b"1".to_vec()).unwrap();
    drop(txn);
    assert_eq!(client.metrics().rolled_back, 1);
    // One with no lock taken rolls nothing back.
    drop(client.begin_pessimistic().unwrap());
    assert_eq!(client.metrics().rolled_back, 1);
    // An optimistic one whose prewrite met a conflict on one region after
    // the other's prewrite landed: its locks are removed.
    let mut loser = client.begin().unwrap();
    loser.put(b"b".to_vec(), b"x".to_vec());
    loser.put(b"z".to_vec(), b"x".to_vec());
    client
        .with_retry(|txn| {
            txn.put(b"z".to_vec(), b"winner".to_vec());
            Ok(())
        })
        .unwrap();
    assert!(loser.commit().is_err());
    let m = client.metrics();
    assert_eq!(m.conflicts, 1);
    assert_eq!(m.rolled_back, 2);
    assert_eq!(client.get_latest(b"b").unwrap(), None);
    // The unlock goes in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while unlocks(&client) == 0 {
        assert!(std::time::Instant::now() < deadline, "no unlock sent");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
