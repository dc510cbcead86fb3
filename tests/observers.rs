//! Observers (issue 17): notifications, acknowledgements, collapsing,
//! chains, weak notifications, concurrent workers, and what a failed or
//! repeated run leaves. Every scenario runs on the memory engine and on
//! RocksDB.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use percolate::engine::{Cf, Engine, WriteBatch, WriteOptions};
use percolate::mvcc::{Key, TimeStamp};
use percolate::txn::actions::prewrite::Mutation;
use percolate::txn::client::Client;
use percolate::txn::commands::Prewrite;
use percolate::txn::notify::{Notification, NotifyKind};
use percolate::txn::storage::Storage;
use percolate::{Error, Watch, WorkerConfig, Workers};

/// A client over `engine` with two regions (split at `m`), so observer
/// transactions and notifications span regions.
fn client_on<E: Engine>(engine: E, dir: &Path) -> Client<E> {
    common::client_over(engine, dir, vec![b"m".to_vec()])
}

/// Workers that give up after 20 s instead of a minute.
fn workers<E: Engine>(client: &Client<E>) -> Workers<E> {
    Workers::new(
        client.clone(),
        WorkerConfig {
            poll_interval: Duration::from_millis(5),
            idle_timeout: Duration::from_secs(20),
        },
    )
}

fn put<E: Engine>(client: &Client<E>, key: &str, value: &str) {
    client
        .with_retry(|txn| {
            txn.put(key, value);
            Ok(())
        })
        .unwrap();
}

fn get<E: Engine>(client: &Client<E>, key: &str) -> Option<String> {
    client
        .get_latest(key.as_bytes())
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap())
}

/// Registers an observer of `watch` that copies the key's value, upper
/// case, to `out ++ key`, and counts its runs per key in `runs`.
fn upper_case<E: Engine>(
    client: &Client<E>,
    name: &str,
    watch: Watch,
    out: &'static str,
) -> Arc<parking_counts::Counts> {
    let runs = Arc::new(parking_counts::Counts::default());
    let counted = runs.clone();
    client
        .observe(name, watch, move |txn, key| {
            let target = [out.as_bytes(), key].concat();
            match txn.get(key)? {
                Some(v) => txn.put(target, v.to_ascii_uppercase()),
                None => txn.delete(target),
            }
            counted.add(key);
            Ok(())
        })
        .unwrap();
    runs
}

/// Runs per key, counted by an observer's function (a run that then
/// fails to commit counts too).
mod parking_counts {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    #[derive(Default)]
    pub struct Counts(Mutex<BTreeMap<Vec<u8>, u64>>);

    impl Counts {
        pub fn add(&self, key: &[u8]) {
            *self.0.lock().unwrap().entry(key.to_vec()).or_default() += 1;
        }

        pub fn total(&self) -> u64 {
            self.0.lock().unwrap().values().sum()
        }
    }
}

fn a_write_to_a_watched_key_runs_its_observer_once<E: Engine>(client: &Client<E>) {
    let runs = upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    put(client, "doc/a", "hello");
    put(client, "doc/z", "world"); // the other region
    put(client, "other", "not watched");
    let metrics = client.observer_metrics().unwrap();
    assert_eq!(metrics.notifications, 2);
    assert_eq!(metrics.pending, 2);
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "up/doc/a").as_deref(), Some("HELLO"));
    assert_eq!(get(client, "up/doc/z").as_deref(), Some("WORLD"));
    let metrics = client.observer_metrics().unwrap();
    assert_eq!((metrics.runs, metrics.pending), (2, 0));
    // Nothing changed since: another pass runs nothing.
    workers(client).run_until_idle().unwrap();
    assert_eq!(client.observer_metrics().unwrap().runs, 2);
    assert_eq!(runs.total(), 2);
    // A delete is a change too.
    client
        .with_retry(|txn| {
            txn.delete(b"doc/a");
            Ok(())
        })
        .unwrap();
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "up/doc/a"), None);
    assert_eq!(runs.total(), 3);
}

fn a_transaction_that_writes_no_watched_key_writes_no_notification<E: Engine>(client: &Client<E>) {
    upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    put(client, "note/1", "x");
    client
        .with_retry(|txn| {
            // A lock on a watched key is no change.
            txn.lock_keys([b"doc/1".to_vec()]);
            txn.put(b"note/2", b"y");
            Ok(())
        })
        .unwrap();
    let metrics = client.observer_metrics().unwrap();
    assert_eq!((metrics.notifications, metrics.pending), (0, 0));
}

fn a_hundred_writes_collapse_into_one_run<E: Engine>(client: &Client<E>) {
    let runs = upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    for i in 0..100 {
        put(client, "doc/hot", &format!("version {i}"));
    }
    assert_eq!(client.observer_metrics().unwrap().pending, 100);
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "up/doc/hot").as_deref(), Some("VERSION 99"));
    let metrics = client.observer_metrics().unwrap();
    assert_eq!(
        (metrics.runs, metrics.collapsed, metrics.pending),
        (1, 99, 0)
    );
    assert_eq!(runs.total(), 1);
}

fn writes_while_workers_run_collapse_and_end_right<E: Engine>(client: &Client<E>) {
    upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    let mut workers = workers(client);
    workers.start(2).unwrap();
    for i in 0..100 {
        put(client, &format!("doc/{}", i % 5), &format!("v{i}"));
    }
    workers.run_until_idle().unwrap();
    workers.stop().unwrap();
    for k in 0..5 {
        let last = 95 + k;
        assert_eq!(
            get(client, &format!("up/doc/{k}")),
            Some(format!("V{last}"))
        );
    }
    let metrics = client.observer_metrics().unwrap();
    assert!(metrics.runs <= 100, "{metrics:?}");
    assert_eq!(metrics.pending, 0);
}

fn concurrent_workers_commit_at_most_one_run_per_change<E: Engine>(client: &Client<E>) {
    // The observer counts its committed runs per key in the data itself:
    // a second committed run for one change would count twice.
    client
        .observe("counter", Watch::prefix("doc/"), |txn, key| {
            let count_key = [b"runs/", key].concat();
            let runs: u64 = match txn.get(&count_key)? {
                Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
                None => 0,
            };
            txn.put(count_key, (runs + 1).to_string());
            // Long enough for the other workers to start on the same key.
            std::thread::sleep(Duration::from_millis(2));
            Ok(())
        })
        .unwrap();
    let keys = 8;
    let rounds = 3;
    for round in 0..rounds {
        for k in 0..keys {
            put(client, &format!("doc/{k}"), &format!("round {round}"));
        }
        // Four handles: no advisory lock between them, so they race on
        // every key and only the acknowledgement keeps the runs apart.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| workers(client).run_until_idle().unwrap());
            }
        });
    }
    for k in 0..keys {
        assert_eq!(
            get(client, &format!("runs/doc/{k}")),
            Some(rounds.to_string())
        );
    }
    let metrics = client.observer_metrics().unwrap();
    assert_eq!(metrics.runs, keys * rounds as u64, "{metrics:?}");
    assert_eq!(metrics.pending, 0);
}

fn observers_chain<E: Engine>(client: &Client<E>) {
    // doc/ -> up/doc/ -> rev/up/doc/: the second watches the first's
    // output.
    upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    client
        .observe("reverse", Watch::prefix("up/"), |txn, key| {
            let target = [b"rev/", key].concat();
            match txn.get(key)? {
                Some(mut v) => {
                    v.reverse();
                    txn.put(target, v)
                }
                None => txn.delete(target),
            }
            Ok(())
        })
        .unwrap();
    put(client, "doc/1", "abc");
    put(client, "doc/2", "xyz");
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "rev/up/doc/1").as_deref(), Some("CBA"));
    assert_eq!(get(client, "rev/up/doc/2").as_deref(), Some("ZYX"));
    client
        .with_retry(|txn| {
            txn.put(b"doc/1", b"hello");
            txn.delete(b"doc/2");
            Ok(())
        })
        .unwrap();
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "rev/up/doc/1").as_deref(), Some("OLLEH"));
    assert_eq!(get(client, "rev/up/doc/2"), None);
    // Two changes, each through both observers, twice.
    assert_eq!(client.observer_metrics().unwrap().runs, 8);
}

fn a_suffix_watch_sees_row_first_keys<E: Engine>(client: &Client<E>) {
    // Rows first (`<row>/<column>`): the observer of the `title` column
    // writes the row's `shout` column (not watched: an observer that
    // wrote a key it watches would run forever).
    client
        .observe("shout", Watch::suffix("/title"), |txn, key| {
            let row = &key[..key.len() - b"/title".len()];
            let target = [row, b"/shout"].concat();
            match txn.get(key)? {
                Some(v) => txn.put(target, v.to_ascii_uppercase()),
                None => txn.delete(target),
            }
            Ok(())
        })
        .unwrap();
    put(client, "42/title", "dune");
    put(client, "42/body", "sand");
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "42/shout").as_deref(), Some("DUNE"));
    let metrics = client.observer_metrics().unwrap();
    assert_eq!((metrics.notifications, metrics.runs), (1, 1));
}

fn a_weak_notification_runs_the_observers_without_a_change<E: Engine>(client: &Client<E>) {
    let runs = upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    put(client, "doc/1", "a");
    workers(client).run_until_idle().unwrap();
    assert_eq!(runs.total(), 1);
    // Unchanged, but notified: one more run.
    client.notify(b"doc/1").unwrap();
    let metrics = client.observer_metrics().unwrap();
    assert_eq!((metrics.weak_notifications, metrics.pending), (1, 1));
    workers(client).run_until_idle().unwrap();
    assert_eq!(runs.total(), 2);
    // Three weak notifications and a write before a run: one run.
    for _ in 0..3 {
        client.notify(b"doc/1").unwrap();
    }
    put(client, "doc/1", "b");
    workers(client).run_until_idle().unwrap();
    assert_eq!(runs.total(), 3);
    assert_eq!(get(client, "up/doc/1").as_deref(), Some("B"));
    // A key that never existed: the observer runs and finds nothing.
    client.notify(b"doc/none").unwrap();
    workers(client).run_until_idle().unwrap();
    assert_eq!(runs.total(), 4);
    assert_eq!(client.observer_metrics().unwrap().pending, 0);
}

fn a_failed_run_keeps_its_notification_until_a_run_succeeds<E: Engine>(client: &Client<E>) {
    let failing = Arc::new(AtomicBool::new(true));
    let attempts = Arc::new(AtomicU64::new(0));
    let (f, a) = (failing.clone(), attempts.clone());
    client
        .observe("flaky", Watch::prefix("doc/"), move |txn, key| {
            a.fetch_add(1, Ordering::SeqCst);
            txn.put([b"out/", key].concat(), b"done");
            if f.load(Ordering::SeqCst) {
                return Err(Error::InvalidRequest {
                    reason: "the observer's own failure",
                    key: None,
                });
            }
            Ok(())
        })
        .unwrap();
    put(client, "doc/1", "x");
    let err = workers(client).run_until_idle().unwrap_err();
    match &err {
        Error::Observer { name, key, source } => {
            assert_eq!((name.as_str(), key), ("flaky", &Key::from_raw(b"doc/1")));
            assert!(matches!(**source, Error::InvalidRequest { .. }));
        }
        other => panic!("{other:?}"),
    }
    // Nothing of the failed run is visible; the notification stays.
    assert_eq!(get(client, "out/doc/1"), None);
    assert_eq!(client.observer_metrics().unwrap().pending, 1);
    assert_eq!(client.observer_metrics().unwrap().errors, 1);
    failing.store(false, Ordering::SeqCst);
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "out/doc/1").as_deref(), Some("done"));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(client.observer_metrics().unwrap().pending, 0);
}

fn a_notification_left_after_its_run_committed_is_only_cleared<E: Engine>(client: &Client<E>) {
    // As after a worker killed between its commit and the delete: the
    // acknowledgement says the change was seen.
    let runs = upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    put(client, "doc/1", "x");
    workers(client).run_until_idle().unwrap();
    let stale = Notification::stored_key(
        &Key::from_raw(b"doc/1"),
        TimeStamp::new(1),
        NotifyKind::Strong,
    );
    let mut batch = WriteBatch::new();
    batch.put(Cf::Notify, stale, Vec::new());
    let engine = client.cluster().regions()[0].storage().engine();
    engine.write(&batch, WriteOptions::default()).unwrap();
    assert_eq!(client.observer_metrics().unwrap().pending, 1);
    workers(client).run_until_idle().unwrap();
    assert_eq!(runs.total(), 1);
    let metrics = client.observer_metrics().unwrap();
    assert_eq!(
        (metrics.runs, metrics.collapsed, metrics.pending),
        (1, 1, 0)
    );
}

fn a_writer_that_commits_after_the_observer_read_is_not_missed<E: Engine>(client: &Client<E>) {
    // The writer prewrites (its notification is written), the worker's
    // transaction starts, then the writer commits above the worker's
    // start_ts: the worker's read waits for the lock and sees the value
    // before it. The notification must survive that run.
    let runs = upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    put(client, "doc/1", "old");
    workers(client).run_until_idle().unwrap();
    let (storage, start_ts, key) = prewrite_notifying(client, "doc/1", "new");
    assert_eq!(client.observer_metrics().unwrap().pending, 1);
    std::thread::scope(|s| {
        let worker = s.spawn(|| workers(client).run_until_idle());
        // Let the worker start and meet the lock, then commit above it.
        std::thread::sleep(Duration::from_millis(100));
        let commit_ts = client.current_ts().unwrap();
        storage
            .commit(vec![key.clone()], start_ts, commit_ts)
            .unwrap();
        worker.join().unwrap().unwrap();
    });
    assert_eq!(get(client, "up/doc/1").as_deref(), Some("NEW"));
    assert!(runs.total() >= 2);
    assert_eq!(client.observer_metrics().unwrap().pending, 0);
}

/// A writer caught between its prewrite and its commit: `value` prewritten
/// at `raw` (its own primary) through the key's region, with the strong
/// notification a client would write. Returns the region's storage, the
/// writer's start_ts and the key, for the test to commit or roll back.
fn prewrite_notifying<'c, E: Engine>(
    client: &'c Client<E>,
    raw: &str,
    value: &str,
) -> (&'c Storage<E>, TimeStamp, Key) {
    let storage = client.cluster().region_for(raw.as_bytes()).storage();
    let start_ts = client.current_ts().unwrap();
    let key = Key::from_raw(raw.as_bytes());
    let mut prewrite = Prewrite::new(
        vec![Mutation::put(key.clone(), value.as_bytes().to_vec())],
        raw.as_bytes(),
        start_ts,
    );
    prewrite.notify = vec![key.clone()];
    storage.prewrite(prewrite).unwrap();
    (storage, start_ts, key)
}

fn a_rolled_back_writer_leaves_a_notification_that_is_cleared<E: Engine>(client: &Client<E>) {
    let runs = upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    let (storage, start_ts, key) = prewrite_notifying(client, "doc/1", "never");
    storage.batch_rollback(vec![key], start_ts).unwrap();
    workers(client).run_until_idle().unwrap();
    assert_eq!(runs.total(), 0);
    assert_eq!(get(client, "up/doc/1"), None);
    let metrics = client.observer_metrics().unwrap();
    assert_eq!(
        (metrics.runs, metrics.collapsed, metrics.pending),
        (0, 1, 0)
    );
}

fn pessimistic_writes_notify_too<E: Engine>(client: &Client<E>) {
    upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    client
        .with_retry_pessimistic(|txn| {
            txn.put(b"doc/p", b"locked first")?;
            Ok(())
        })
        .unwrap();
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "up/doc/p").as_deref(), Some("LOCKED FIRST"));
}

fn background_workers_process_what_commits_wake_them_for<E: Engine>(client: &Client<E>) {
    upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    let mut workers = Workers::new(
        client.clone(),
        WorkerConfig {
            // Long: only the commits' wake-ups make this test quick.
            poll_interval: Duration::from_secs(30),
            ..WorkerConfig::default()
        },
    );
    workers.start(2).unwrap();
    let mut expected = BTreeMap::new();
    for i in 0..50 {
        let key = format!("doc/{i:02}");
        put(client, &key, &format!("v{i}"));
        expected.insert(format!("up/{key}"), format!("V{i}"));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while client.observer_metrics().unwrap().pending > 0 {
        assert!(std::time::Instant::now() < deadline, "still pending");
        std::thread::sleep(Duration::from_millis(5));
    }
    workers.stop().unwrap();
    for (key, value) in expected {
        assert_eq!(get(client, &key), Some(value));
    }
}

fn a_duplicate_observer_name_is_refused<E: Engine>(client: &Client<E>) {
    upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    let again = client.observe("upper", Watch::prefix("x/"), |_, _| Ok(()));
    assert!(matches!(again, Err(Error::InvalidRequest { .. })));
}

fn a_notification_that_does_not_decode_is_corruption<E: Engine>(client: &Client<E>) {
    upper_case(client, "upper", Watch::prefix("doc/"), "up/");
    let mut batch = WriteBatch::new();
    batch.put(Cf::Notify, b"short".to_vec(), Vec::new());
    let engine = client.cluster().regions()[0].storage().engine();
    engine.write(&batch, WriteOptions::default()).unwrap();
    let err = workers(client).run_until_idle().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Mvcc(percolate::mvcc::Error::Corruption { cf: Cf::Notify, .. })
        ),
        "{err:?}"
    );
    // Repair removes it (and nothing else), and the workers go on.
    put(client, "doc/1", "x");
    let removed = client.repair().unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(
        (removed[0].cf, removed[0].key.as_slice()),
        (Cf::Notify, &b"short"[..])
    );
    workers(client).run_until_idle().unwrap();
    assert_eq!(get(client, "up/doc/1").as_deref(), Some("X"));
}

client_scenarios_on_both_engines! {
    a_write_to_a_watched_key_runs_its_observer_once => a_write_to_a_watched_key_runs_its_observer_once;
    a_transaction_that_writes_no_watched_key_writes_no_notification => a_transaction_that_writes_no_watched_key_writes_no_notification;
    a_hundred_writes_collapse_into_one_run => a_hundred_writes_collapse_into_one_run;
    writes_while_workers_run_collapse_and_end_right => writes_while_workers_run_collapse_and_end_right;
    concurrent_workers_commit_at_most_one_run_per_change => concurrent_workers_commit_at_most_one_run_per_change;
    observers_chain => observers_chain;
    a_suffix_watch_sees_row_first_keys => a_suffix_watch_sees_row_first_keys;
    a_weak_notification_runs_the_observers_without_a_change => a_weak_notification_runs_the_observers_without_a_change;
    a_failed_run_keeps_its_notification_until_a_run_succeeds => a_failed_run_keeps_its_notification_until_a_run_succeeds;
    a_notification_left_after_its_run_committed_is_only_cleared => a_notification_left_after_its_run_committed_is_only_cleared;
    a_writer_that_commits_after_the_observer_read_is_not_missed => a_writer_that_commits_after_the_observer_read_is_not_missed;
    a_rolled_back_writer_leaves_a_notification_that_is_cleared => a_rolled_back_writer_leaves_a_notification_that_is_cleared;
    pessimistic_writes_notify_too => pessimistic_writes_notify_too;
    background_workers_process_what_commits_wake_them_for => background_workers_process_what_commits_wake_them_for;
    a_duplicate_observer_name_is_refused => a_duplicate_observer_name_is_refused;
    a_notification_that_does_not_decode_is_corruption => a_notification_that_does_not_decode_is_corruption;
}

/// An old data directory (no `notify` column family) opens, read-write
/// (the column family is created) and read-only (without it).
#[test]
fn a_directory_made_before_the_notify_column_family_opens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let old = rocksdb::DB::open_cf(&options, &db, ["default", "lock", "write", "raw"]).unwrap();
        drop(old);
    }
    {
        let client = Client::open_read_only(dir.path()).unwrap();
        assert_eq!(client.get_latest(b"k").unwrap(), None);
    }
    let client = Client::open(dir.path()).unwrap();
    upper_case(&client, "upper", Watch::prefix("doc/"), "up/");
    put(&client, "doc/1", "x");
    workers(&client).run_until_idle().unwrap();
    assert_eq!(get(&client, "up/doc/1").as_deref(), Some("X"));
}
