//! Bad input: every public API rejects misuse with a clear, typed error and
//! writes nothing; bad bytes on disk are reported as `Corruption` naming
//! the key, never a panic; a damaged oracle file stops the client from
//! opening rather than letting time go back.
//!
//! The size limits are those of [`Limit`]: keys up to 8 KiB, values up to
//! 8 MiB, a transaction (or one prewrite or raw batch) up to 300,000 keys
//! and 100 MiB. A transaction used after `commit` does not compile: see the
//! `compile_fail` example on `Transaction::commit`.

use percolate::engine::{Cf, Engine, EngineIterator, Snapshot, WriteBatch, WriteOptions};
use percolate::mvcc::{Key, TimeStamp};
use percolate::txn::Limit;
use percolate::txn::actions::prewrite::{Mutation, TransactionKind};
use percolate::txn::commands::Prewrite;
use percolate::txn::storage::Storage;
use percolate::{Client, Error, OpenOptions};
use tempfile::TempDir;

struct Db {
    client: Client,
    dir: TempDir,
}

fn open() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions {
        split_keys: vec![b"g".to_vec(), b"p".to_vec()],
        ..Default::default()
    };
    Db {
        client: Client::open_with(dir.path(), options).unwrap(),
        dir,
    }
}

fn storage<'a>(client: &'a Client, key: &[u8]) -> &'a Storage {
    client.cluster().region_for(key).storage()
}

/// Asserts that no region holds any lock, write record or raw pair.
fn assert_nothing_written(client: &Client) {
    let snapshot = client.cluster().regions()[0].storage().engine().snapshot();
    for cf in [Cf::Lock, Cf::Write, Cf::Default, Cf::Raw] {
        let mut iter = snapshot.iter(cf, Default::default()).unwrap();
        assert!(!iter.seek_to_first().unwrap(), "CF {cf:?} holds data");
    }
}

fn assert_limit(result: percolate::Result<impl std::fmt::Debug>, limit: Limit, size: usize) {
    match result {
        Err(Error::LimitExceeded {
            limit: l,
            size: s,
            max,
        }) => {
            assert_eq!((l, s, max), (limit, size, limit.max()));
            let message = Error::LimitExceeded {
                limit: l,
                size: s,
                max,
            }
            .to_string();
            assert!(message.contains(&max.to_string()), "{message}");
        }
        other => panic!("expected {limit:?} exceeded, got {other:?}"),
    }
}

fn assert_invalid(result: percolate::Result<impl std::fmt::Debug>) {
    assert!(
        matches!(result, Err(Error::InvalidRequest { .. })),
        "expected InvalidRequest, got {result:?}"
    );
}

// ---------------------------------------------------------------------------
// Timestamps.

#[test]
fn a_commit_ts_not_above_the_start_ts_is_refused_and_writes_nothing() {
    let db = open();
    let s = storage(&db.client, b"k");
    let start_ts = db.client.oracle().get_ts().unwrap();
    let key = Key::from_raw(b"k");
    s.prewrite(Prewrite::new(
        vec![Mutation::put(key.clone(), b"v".to_vec())],
        b"k",
        start_ts,
    ))
    .unwrap();
    for commit_ts in [start_ts, start_ts.prev(), TimeStamp::zero()] {
        let err = s
            .commit(vec![key.clone()], start_ts, commit_ts)
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidTxnTso { start_ts: s, commit_ts: c } if s == start_ts && c == commit_ts),
            "{err:?}"
        );
    }
    let info = s.mvcc_by_key(key).unwrap();
    assert!(info.lock.is_some(), "the lock is untouched");
    assert!(
        info.writes.is_empty(),
        "no commit record: {:?}",
        info.writes
    );
}

/// docs/BEHAVIOUR.md O1: a read at a timestamp far beyond the oracle is refused
/// (InvalidMaxTsUpdate) instead of pushing the region's max_ts, and with
/// it every later async-commit and 1PC commit_ts, out of the oracle's
/// reach. A timestamp within the allowance is accepted.
#[test]
fn a_read_far_ahead_of_the_oracle_cannot_poison_max_ts() {
    let db = open();
    let s = storage(&db.client, b"k");
    let key = Key::from_raw(b"k");
    let before = s.concurrency_manager().max_ts();
    let latest = db.client.oracle().get_ts().unwrap();
    let far = TimeStamp::compose(latest.physical() + 3_600_000, 0);
    let checks: Vec<percolate::Result<()>> = vec![
        s.get(key.clone(), far).map(drop),
        s.batch_get(vec![key.clone()], far).map(drop),
        s.scan_lock(Some(Key::from_raw(b"g")), Some(Key::from_raw(b"p")), far, 0)
            .map(drop),
        s.cleanup(key.clone(), far, TimeStamp::zero()).map(drop),
        s.check_secondary_locks(vec![key.clone()], far).map(drop),
        s.prewrite(Prewrite::new(
            vec![Mutation::insert(key.clone(), b"v".to_vec())],
            b"k",
            far,
        ))
        .map(drop),
    ];
    for result in checks {
        match result {
            Err(Error::InvalidMaxTsUpdate {
                attempted_ts,
                limit,
            }) => {
                assert_eq!(attempted_ts, far);
                assert!(limit < far && limit > latest, "limit {limit}");
            }
            other => panic!("expected InvalidMaxTsUpdate, got {other:?}"),
        }
    }
    assert_eq!(s.concurrency_manager().max_ts(), before);
    assert_nothing_written(&db.client);
    // Ten seconds ahead is within the 60 s allowance.
    let near = TimeStamp::compose(latest.physical() + 10_000, 0);
    assert_eq!(s.get(key, near).unwrap(), None);
    assert_eq!(s.concurrency_manager().max_ts(), near);
}

/// Every transactional write command for the one key `key()` and the
/// transaction `start_ts`, run on `s`: each answer, named.
fn each_write_command(
    s: &Storage,
    key: impl Fn() -> Key,
    start_ts: TimeStamp,
) -> Vec<(&'static str, percolate::Result<()>)> {
    use percolate::txn::actions::check_txn_status::CheckTxnStatusOptions;
    use percolate::txn::commands::AcquirePessimisticLock;
    let later = TimeStamp::new(start_ts.into_inner() + 10);
    let options = CheckTxnStatusOptions {
        rollback_if_not_exist: true,
        current_ts: later,
        ..Default::default()
    };
    let put = Mutation::put(key(), b"v".to_vec());
    let lock = AcquirePessimisticLock::new(vec![key()], b"k".to_vec(), start_ts, start_ts);
    vec![
        (
            "prewrite",
            s.prewrite(Prewrite::new(vec![put], b"k".to_vec(), start_ts))
                .map(drop),
        ),
        (
            "acquire_pessimistic_lock",
            s.acquire_pessimistic_lock(lock).map(drop),
        ),
        ("commit", s.commit(vec![key()], start_ts, later).map(drop)),
        ("cleanup", s.cleanup(key(), start_ts, later).map(drop)),
        (
            "batch_rollback",
            s.batch_rollback(vec![key()], start_ts).map(drop),
        ),
        (
            "check_txn_status",
            s.check_txn_status(key(), start_ts, options).map(drop),
        ),
        (
            "check_secondary_locks",
            s.check_secondary_locks(vec![key()], start_ts).map(drop),
        ),
        (
            "txn_heart_beat",
            s.txn_heart_beat(key(), start_ts, 10).map(drop),
        ),
        (
            "resolve_lock_lite",
            s.resolve_lock_lite(vec![key()], start_ts, TimeStamp::zero())
                .map(drop),
        ),
    ]
}

/// A zero start_ts names no transaction: every command that acts for one
/// refuses it (InvalidRequest) and writes nothing; before, a cleanup or a
/// rollback at ts 0 recorded a Rollback there.
#[test]
fn commands_refuse_a_zero_start_ts_and_write_nothing() {
    let db = open();
    let s = storage(&db.client, b"k");
    let zero = TimeStamp::zero();
    for (command, result) in each_write_command(s, || Key::from_raw(b"k"), zero) {
        assert!(
            matches!(result, Err(Error::InvalidRequest { .. })),
            "{command}: {result:?}"
        );
    }
    assert_invalid(s.resolve_lock(zero, zero, None, None));
    assert_nothing_written(&db.client);
}

/// A key made with `Key::from_encoded` of bytes that are not a
/// memcomparable encoding is refused by every write command
/// (InvalidRequest naming it) before anything is written: stored, it would
/// make every later scan over it fail as corrupt.
#[test]
fn write_commands_refuse_a_key_that_is_not_an_encoding() {
    let db = open();
    let s = storage(&db.client, b"");
    let start_ts = db.client.oracle().get_ts().unwrap();
    for bytes in [&b"k"[..], b"k\0\0\0\0\0\0\0\xf8trailing", b"kkkkkkkk\xff"] {
        let bad = || Key::from_encoded(bytes.to_vec());
        for (command, result) in each_write_command(s, bad, start_ts) {
            match result {
                Err(Error::InvalidRequest { key: Some(key), .. }) => {
                    assert_eq!(key, bad(), "{command}")
                }
                other => panic!("{command}: expected InvalidRequest naming the key, got {other:?}"),
            }
        }
    }
    assert_nothing_written(&db.client);
}

/// A pessimistic lock request at start_ts 0 is refused at once, also when
/// another transaction holds its key and it asks to wait: it does not wait
/// out its timeout first to learn that it names no transaction.
#[test]
fn a_lock_request_at_a_zero_start_ts_is_refused_without_waiting() {
    use percolate::txn::commands::AcquirePessimisticLock;
    let db = open();
    let s = storage(&db.client, b"k");
    let holder = db.client.oracle().get_ts().unwrap();
    let key = || Key::from_raw(b"k");
    s.acquire_pessimistic_lock(AcquirePessimisticLock::new(
        vec![key()],
        b"k".to_vec(),
        holder,
        holder,
    ))
    .unwrap();
    let began = std::time::Instant::now();
    let request =
        AcquirePessimisticLock::new(vec![key()], b"k".to_vec(), TimeStamp::zero(), holder)
            .wait_timeout(std::time::Duration::from_secs(5));
    assert_invalid(s.acquire_pessimistic_lock(request));
    assert!(
        began.elapsed() < std::time::Duration::from_secs(2),
        "it waited"
    );
}

/// A command sent to a region that does not hold its keys (a client with
/// a stale idea of the regions) fails with KeyNotInRegion and does
/// nothing, whatever the command: the regions share one engine here, but a
/// region must behave as if it were alone on its own machine.
#[test]
fn a_command_for_keys_outside_its_region_is_refused() {
    let db = open();
    // The middle region: ["g", "p").
    let s = storage(&db.client, b"k");
    let (inside, outside) = (Key::from_raw(b"k"), Key::from_raw(b"z"));
    let ts = db.client.oracle().get_ts().unwrap();
    let not_in_region = |result: percolate::Result<()>, key: &[u8]| match result {
        Err(Error::KeyNotInRegion { key: k, start, end }) => {
            assert_eq!(k, key);
            assert_eq!((start, end), (b"g".to_vec(), Some(b"p".to_vec())));
        }
        other => panic!("expected KeyNotInRegion, got {other:?}"),
    };
    not_in_region(s.get(outside.clone(), ts).map(drop), b"z");
    not_in_region(
        s.batch_get(vec![inside.clone(), outside.clone()], ts)
            .map(drop),
        b"z",
    );
    not_in_region(s.mvcc_by_key(outside.clone()).map(drop), b"z");
    let prewrite = Prewrite::new(
        vec![
            Mutation::put(inside.clone(), b"v".to_vec()),
            Mutation::put(outside.clone(), b"v".to_vec()),
        ],
        b"k",
        ts,
    );
    not_in_region(s.prewrite(prewrite).map(drop), b"z");
    not_in_region(
        s.commit(vec![outside.clone()], ts, ts.next()).map(drop),
        b"z",
    );
    not_in_region(s.raw_put(b"a".to_vec(), b"v".to_vec()), b"a");
    not_in_region(s.raw_get(b"z".to_vec()).map(drop), b"z");
    // Ranges: one reaching past either end, or unbounded on a side the
    // region is not.
    not_in_region(
        s.scan_lock(Some(inside.clone()), None, ts, 0).map(drop),
        b"",
    );
    not_in_region(s.gc(ts, None, Some(inside.clone())).map(drop), b"");
    not_in_region(
        s.raw_scan(percolate::txn::commands::RawScan {
            start: Some(b"h".to_vec()),
            end: Some(b"q".to_vec()),
            ..Default::default()
        })
        .map(drop),
        b"q",
    );
    assert_nothing_written(&db.client);
    // The same requests inside the region are served.
    assert_eq!(s.get(inside.clone(), ts).unwrap(), None);
    s.raw_put(b"h".to_vec(), b"v".to_vec()).unwrap();
    let locks = s.scan_lock(Some(Key::from_raw(b"g")), Some(Key::from_raw(b"p")), ts, 0);
    assert!(locks.unwrap().is_empty());
}

/// `TimeStamp::max()` is not a start_ts: a prewrite at it is refused (it
/// used to panic computing its min_commit_ts).
#[test]
fn a_prewrite_at_the_max_timestamp_is_refused() {
    let db = open();
    let s = storage(&db.client, b"k");
    let key = Key::from_raw(b"k");
    let prewrite = || {
        Prewrite::new(
            vec![Mutation::put(key.clone(), b"v".to_vec())],
            b"k",
            TimeStamp::max(),
        )
    };
    assert_invalid(s.prewrite(prewrite()));
    assert_invalid(s.prewrite(prewrite().one_pc(TimeStamp::zero())));
    assert_invalid(s.prewrite(prewrite().async_commit(vec![], TimeStamp::zero())));
    assert_nothing_written(&db.client);
}

/// Timestamps at the top of the range (about the year 4199 and above,
/// `TimeStamp::max()` among them) leave a reopened oracle no room above
/// them: no command writes one into a lock or a commit record, and an
/// export refuses to be taken at one.
#[test]
fn timestamps_beyond_the_oracles_range_are_never_written() {
    let db = open();
    let s = storage(&db.client, b"k");
    let key = Key::from_raw(b"k");
    let start_ts = db.client.oracle().get_ts().unwrap();
    let top = TimeStamp::compose(TimeStamp::max().physical() - 1_000, 0);
    assert!(percolate::txn::oracle::beyond_range(top));
    s.prewrite(Prewrite::new(
        vec![Mutation::put(key.clone(), b"v".to_vec())],
        b"k",
        start_ts,
    ))
    .unwrap();
    for commit_ts in [top, TimeStamp::max()] {
        assert_invalid(s.commit(vec![key.clone()], start_ts, commit_ts));
        assert_invalid(s.resolve_lock_lite(vec![key.clone()], start_ts, commit_ts));
    }
    let info = s.mvcc_by_key(key.clone()).unwrap();
    assert!(info.lock.is_some() && info.writes.is_empty(), "{info:?}");
    s.batch_rollback(vec![key.clone()], start_ts).unwrap();
    // A prewrite whose lock would carry such a ts, and a pessimistic lock.
    let other = Key::from_raw(b"k2");
    let at = db.client.oracle().get_ts().unwrap();
    for prewrite in [
        Prewrite::new(
            vec![Mutation::put(other.clone(), b"v".to_vec())],
            b"k2",
            top,
        ),
        {
            let mut p = Prewrite::new(vec![Mutation::put(other.clone(), b"v".to_vec())], b"k2", at);
            p.props.kind = TransactionKind::Pessimistic { for_update_ts: top };
            p
        },
        Prewrite::new(vec![Mutation::put(other.clone(), b"v".to_vec())], b"k2", at)
            .min_commit_ts(top),
    ] {
        assert_invalid(s.prewrite(prewrite));
    }
    assert!(s.mvcc_by_key(other).unwrap().lock.is_none());
    let dir = tempfile::tempdir().unwrap();
    assert_invalid(
        db.client
            .export_range(b"", None, TimeStamp::max(), dir.path().join("out")),
    );
}

/// Refused as a request beyond the oracle's range: `InvalidRequest`, or
/// `InvalidMaxTsUpdate` where the command raises `max_ts` with the ts
/// first.
fn assert_refused_beyond_range(result: percolate::Result<impl std::fmt::Debug>) {
    assert!(
        matches!(
            result,
            Err(Error::InvalidRequest { .. } | Error::InvalidMaxTsUpdate { .. })
        ),
        "expected the ts refused, got {result:?}"
    );
}

/// No command acts for a transaction whose start_ts is beyond the
/// oracle's range: such a transaction could not have prewritten, and a
/// rollback recorded at its start_ts (a cleanup, a batch rollback, a
/// status check that rolls back a missing lock) would raise the engine's
/// persisted ts ceiling past the range, so that the database could not be
/// opened again.
#[test]
fn commands_refuse_a_start_ts_beyond_the_oracles_range_and_write_nothing() {
    let db = open();
    let s = storage(&db.client, b"k");
    let key = || Key::from_raw(b"k");
    let top = TimeStamp::compose(TimeStamp::max().physical() - 1_000, 0);
    let now = db.client.oracle().get_ts().unwrap();
    for start_ts in [top, TimeStamp::max()] {
        let options = percolate::txn::actions::check_txn_status::CheckTxnStatusOptions {
            rollback_if_not_exist: true,
            current_ts: now,
            ..Default::default()
        };
        assert_refused_beyond_range(s.batch_rollback(vec![key()], start_ts));
        assert_refused_beyond_range(s.cleanup(key(), start_ts, TimeStamp::zero()));
        assert_refused_beyond_range(s.check_txn_status(key(), start_ts, options));
        assert_refused_beyond_range(s.check_secondary_locks(vec![key()], start_ts));
        assert_refused_beyond_range(s.resolve_lock_lite(vec![key()], start_ts, TimeStamp::zero()));
        assert_refused_beyond_range(s.resolve_lock(
            start_ts,
            TimeStamp::zero(),
            Some(Key::from_raw(b"g")),
            Some(Key::from_raw(b"p")),
        ));
        assert_refused_beyond_range(s.pessimistic_rollback(vec![key()], start_ts, start_ts));
    }
    assert_nothing_written(&db.client);
    assert!(s.concurrency_manager().max_ts() < top);
    // The database opens again.
    let Db { client, dir } = db;
    drop(client);
    Client::open(dir.path()).unwrap();
}

/// A storage that knows no oracle (no `MaxTsLimit`) still never computes
/// an async-commit or 1PC commit_ts beyond the oracle's range: a read
/// beyond it is refused, a `max_ts` at the top of the range sends async
/// commit and 1PC back to 2PC, and an `initial_max_ts` beyond the range
/// (`TimeStamp::max()` included) counts as the top of the range instead of
/// making every such prewrite fail.
#[test]
fn a_storage_without_an_oracle_never_computes_a_commit_ts_beyond_the_range() {
    fn check<E: Engine>(engine: impl Fn() -> E) {
        use percolate::txn::storage::StorageConfig;
        let top = percolate::txn::oracle::last_in_range();
        assert!(!percolate::txn::oracle::beyond_range(top));
        assert!(percolate::txn::oracle::beyond_range(top.next()));
        let s = Storage::new(engine(), StorageConfig::default());
        let key = Key::from_raw(b"k");
        for far in [top.next(), TimeStamp::max().prev()] {
            match s.get(key.clone(), far) {
                Err(Error::InvalidMaxTsUpdate {
                    attempted_ts,
                    limit,
                }) => assert_eq!((attempted_ts, limit), (far, top)),
                other => panic!("expected InvalidMaxTsUpdate, got {other:?}"),
            }
        }
        assert_eq!(s.get(key.clone(), top).unwrap(), None);
        assert_eq!(s.concurrency_manager().max_ts(), top);
        let fell_back = |s: &Storage<E>, key: &Key, start_ts: TimeStamp| {
            let mutation = || vec![Mutation::put(key.clone(), b"v".to_vec())];
            let raw = key.to_raw().unwrap();
            let one_pc = Prewrite::new(mutation(), raw.clone(), start_ts).one_pc(TimeStamp::zero());
            let result = s.prewrite(one_pc).unwrap();
            assert_eq!(result.one_pc_commit_ts, None, "1PC falls back to 2PC");
            let info = s.mvcc_by_key(key.clone()).unwrap();
            let lock = info.lock.expect("a 2PC lock");
            assert!(!lock.use_one_pc && !lock.use_async_commit, "{lock:?}");
            assert!(info.writes.is_empty());
            s.batch_rollback(vec![key.clone()], start_ts).unwrap();
            let asynchronous = Prewrite::new(mutation(), raw.clone(), start_ts.next())
                .async_commit(vec![], TimeStamp::zero());
            let result = s.prewrite(asynchronous).unwrap();
            assert_eq!(result.min_commit_ts, None, "async commit falls back to 2PC");
            s.batch_rollback(vec![key.clone()], start_ts.next())
                .unwrap();
        };
        fell_back(&s, &key, TimeStamp::new(10));
        for initial in [top.next(), TimeStamp::max()] {
            let config = StorageConfig {
                initial_max_ts: initial,
                ..StorageConfig::default()
            };
            let s = Storage::new(engine(), config);
            assert_eq!(s.concurrency_manager().max_ts(), top);
            fell_back(&s, &Key::from_raw(b"j"), TimeStamp::new(20));
        }
    }
    check(percolate::MemoryEngine::new);
    check(|| percolate::RocksEngine::open_temporary().unwrap());
}

/// Version hints larger than the machine can map leave the storage
/// without hints (every read seeks) instead of failing or aborting it.
#[test]
fn version_hints_too_large_to_map_leave_the_storage_working() {
    use percolate::txn::storage::StorageConfig;
    for bytes in [usize::MAX, usize::MAX / 2, 1 << 60] {
        let config = StorageConfig {
            version_hint_bytes: bytes,
            ..StorageConfig::default()
        };
        let s = Storage::new(percolate::MemoryEngine::new(), config);
        let key = Key::from_raw(b"k");
        s.prewrite(Prewrite::new(
            vec![Mutation::put(key.clone(), b"v".to_vec())],
            b"k",
            TimeStamp::new(10),
        ))
        .unwrap();
        s.commit(vec![key.clone()], TimeStamp::new(10), TimeStamp::new(11))
            .unwrap();
        assert_eq!(s.get(key, TimeStamp::new(12)).unwrap(), Some(b"v".to_vec()));
    }
}

/// A lock on disk whose ts is beyond the oracle's range (damaged bytes,
/// or a tool that wrote it) stops the client from opening, read-write or
/// read-only, instead of starting an oracle below it.
#[test]
fn a_lock_beyond_the_oracles_range_stops_the_client_from_opening() {
    let db = open();
    let top = TimeStamp::compose(TimeStamp::max().physical() - 1_000, 0);
    let lock =
        percolate::mvcc::Lock::new(percolate::mvcc::LockType::Put, b"h".to_vec(), top, 3_000);
    poke(
        &db.client,
        Cf::Lock,
        Key::from_raw(b"h").into_encoded(),
        &lock.to_bytes(),
    );
    assert_reopen_refused_beyond_range(db, top);
}

/// Closes `db` and asserts that opening it again, read-write or
/// read-only, fails with `TimestampBeyondRange` naming `top`.
fn assert_reopen_refused_beyond_range(db: Db, top: TimeStamp) {
    let Db { client, dir } = db;
    drop(client);
    for result in [
        Client::open(dir.path()).map(drop),
        Client::open_read_only(dir.path()).map(drop),
    ] {
        match result {
            Err(Error::TimestampBeyondRange { ts }) => assert_eq!(ts, top),
            other => panic!("expected TimestampBeyondRange, got {other:?}"),
        }
    }
}

/// The GC safe point bounds the oracle from below, as the newest commit
/// does: a safe point ahead of the oracle's own state (a tool that set
/// it, a clock that went back) is where a reopened oracle starts above,
/// and one beyond the oracle's range stops the client from opening
/// instead of leaving automatic GC stuck above every timestamp.
#[test]
fn the_gc_safe_point_bounds_the_oracle_from_below() {
    let ahead = {
        let db = open();
        let latest = db.client.oracle().get_ts().unwrap();
        let ahead = TimeStamp::compose(latest.physical() + 3_600_000, 0);
        let engine = db.client.cluster().regions()[0].storage().engine().clone();
        engine
            .set_gc_safe_point(ahead.into_inner(), |_| None)
            .unwrap();
        let Db { client, dir } = db;
        drop((client, engine));
        let client = Client::open(dir.path()).unwrap();
        assert!(client.oracle().get_ts().unwrap() > ahead);
        ahead
    };
    let db = open();
    let top = TimeStamp::compose(TimeStamp::max().physical() - 1_000, 0);
    assert!(top > ahead);
    db.client.cluster().regions()[0]
        .storage()
        .engine()
        .set_gc_safe_point(top.into_inner(), |_| None)
        .unwrap();
    assert_reopen_refused_beyond_range(db, top);
}

/// A scan that asks for every pair in one read (a limit or batch size of
/// `usize::MAX`) gets them all, not an overflow.
#[test]
fn a_scan_may_ask_for_every_pair_at_once() {
    let db = open();
    let mut txn = db.client.begin().unwrap();
    for k in [&b"a"[..], b"b", b"c"] {
        txn.put(k.to_vec(), b"v".to_vec());
    }
    txn.commit().unwrap();
    let reader = db.client.begin().unwrap();
    let pairs: Vec<_> = reader
        .scan(&b"a"[..]..&b"d"[..])
        .batch_size(usize::MAX)
        .collect::<std::result::Result<_, _>>()
        .unwrap();
    assert_eq!(pairs.len(), 3);
    let s = storage(&db.client, b"a");
    let request = percolate::txn::read::ScanRequest {
        start_key: Key::from_raw(b"a"),
        end_key: Some(Key::from_raw(b"d")),
        limit: usize::MAX,
        ts: reader.start_ts(),
        key_only: false,
        reverse: false,
    };
    assert_eq!(s.scan(request).unwrap().len(), 3);
}

// ---------------------------------------------------------------------------
// Empty keys and empty requests.

#[test]
fn empty_keys_are_refused_where_not_allowed() {
    let db = open();
    let mut txn = db.client.begin().unwrap();
    txn.put(b"".to_vec(), b"v".to_vec());
    txn.put(b"a".to_vec(), b"v".to_vec());
    assert_invalid(txn.commit());

    let s = storage(&db.client, b"");
    let ts = db.client.oracle().get_ts().unwrap();
    assert_invalid(s.raw_put(Vec::new(), b"v".to_vec()));
    assert_invalid(s.raw_batch_put(vec![
        (b"a".to_vec(), b"v".to_vec()),
        (Vec::new(), b"v".to_vec()),
    ]));
    assert_invalid(s.raw_delete(Vec::new()));
    assert_invalid(s.raw_compare_and_swap(Vec::new(), None, Some(b"v".to_vec())));
    assert_invalid(s.raw_delete_range(b"b".to_vec(), b"a".to_vec()));
    // A prewrite with no primary, or no mutation, or a zero start_ts.
    let put = || vec![Mutation::put(Key::from_raw(b"a"), b"v".to_vec())];
    assert_invalid(s.prewrite(Prewrite::new(put(), b"", ts)));
    assert_invalid(s.prewrite(Prewrite::new(Vec::new(), b"a", ts)));
    assert_invalid(s.prewrite(Prewrite::new(put(), b"a", TimeStamp::zero())));
    assert_invalid(s.commit(Vec::new(), ts, ts.next()));
    assert_nothing_written(&db.client);
}

// ---------------------------------------------------------------------------
// Size limits.

#[test]
fn the_client_refuses_oversized_keys_and_values_before_sending_anything() {
    let db = open();
    let max_key = Limit::KeySize.max();
    let max_value = Limit::ValueSize.max();

    let mut txn = db.client.begin().unwrap();
    txn.put(vec![b'k'; max_key + 1], b"v".to_vec());
    assert_limit(txn.commit(), Limit::KeySize, max_key + 1);

    let mut txn = db.client.begin().unwrap();
    txn.put(b"k".to_vec(), vec![0; max_value + 1]);
    assert_limit(txn.commit(), Limit::ValueSize, max_value + 1);

    // A delete or a lock of an oversized key is refused as well.
    let mut txn = db.client.begin().unwrap();
    txn.lock_keys([vec![b'k'; max_key + 1]]);
    assert_limit(txn.commit(), Limit::KeySize, max_key + 1);
    assert_nothing_written(&db.client);

    // Exactly at the limits is fine.
    let mut txn = db.client.begin().unwrap();
    txn.put(vec![b'k'; max_key], vec![7; max_value]);
    txn.commit().unwrap();
    let txn = db.client.begin().unwrap();
    assert_eq!(
        txn.get(&vec![b'k'; max_key]).unwrap().map(|v| v.len()),
        Some(max_value)
    );
}

#[test]
fn the_client_refuses_oversized_transactions() {
    let db = open();
    let max_keys = Limit::TxnKeys.max();
    let mut txn = db.client.begin().unwrap();
    for i in 0..=max_keys {
        txn.put(format!("k{i:07}").into_bytes(), Vec::new());
    }
    assert_limit(txn.commit(), Limit::TxnKeys, max_keys + 1);

    // Thirteen values of 8 MiB (allocated zeroed, never touched): 104 MiB.
    let mut txn = db.client.begin().unwrap();
    for i in 0..13u8 {
        txn.put(vec![b'a', i], vec![0; Limit::ValueSize.max()]);
    }
    let size = 13 * (2 + Limit::ValueSize.max());
    assert_limit(txn.commit(), Limit::TxnBytes, size);
    assert_nothing_written(&db.client);
}

#[test]
fn storage_write_commands_refuse_oversized_keys_and_values() {
    let db = open();
    let s = storage(&db.client, b"k");
    let ts = db.client.oracle().get_ts().unwrap();
    let max_key = Limit::KeySize.max();
    let max_value = Limit::ValueSize.max();
    let long_key = vec![b'k'; max_key + 1];

    let prewrite =
        |mutation: Mutation, primary: &[u8]| s.prewrite(Prewrite::new(vec![mutation], primary, ts));
    assert_limit(
        prewrite(Mutation::put(Key::from_raw(&long_key), b"v".to_vec()), b"k"),
        Limit::KeySize,
        max_key + 1,
    );
    assert_limit(
        prewrite(Mutation::delete(Key::from_raw(&long_key)), b"k"),
        Limit::KeySize,
        max_key + 1,
    );
    assert_limit(
        prewrite(
            Mutation::put(Key::from_raw(b"k"), vec![0; max_value + 1]),
            b"k",
        ),
        Limit::ValueSize,
        max_value + 1,
    );
    assert_limit(
        prewrite(Mutation::put(Key::from_raw(b"k"), b"v".to_vec()), &long_key),
        Limit::KeySize,
        max_key + 1,
    );
    assert_limit(
        s.raw_put(long_key.clone(), b"v".to_vec()),
        Limit::KeySize,
        max_key + 1,
    );
    assert_limit(
        s.raw_put(b"k".to_vec(), vec![0; max_value + 1]),
        Limit::ValueSize,
        max_value + 1,
    );
    assert_limit(
        s.raw_compare_and_swap(b"k".to_vec(), None, Some(vec![0; max_value + 1])),
        Limit::ValueSize,
        max_value + 1,
    );
    assert_nothing_written(&db.client);

    // At the limits: accepted (the raw key length is read from the
    // encoded key exactly, for every padding).
    for len in max_key - 8..=max_key {
        let key = vec![b'k'; len];
        s.prewrite(Prewrite::new(
            vec![Mutation::put(Key::from_raw(&key), b"v".to_vec())],
            key.clone(),
            ts,
        ))
        .unwrap();
    }
    s.raw_put(vec![b'k'; max_key], vec![0; max_value]).unwrap();
}

// ---------------------------------------------------------------------------
// Corruption on disk.

/// Writes `value` under `key` in `cf`, behind the transaction layer's back.
fn poke(client: &Client, cf: Cf, key: Vec<u8>, value: &[u8]) {
    let mut batch = WriteBatch::new();
    batch.put(cf, key, value.to_vec());
    client.cluster().regions()[0]
        .storage()
        .engine()
        .write(&batch, WriteOptions::default())
        .unwrap();
}

fn assert_corruption(result: percolate::Result<impl std::fmt::Debug>, cf: Cf, key: &Key) {
    match result {
        Err(Error::Mvcc(e @ percolate::mvcc::Error::Corruption { .. })) => {
            let percolate::mvcc::Error::Corruption { cf: c, key: k, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*c, cf);
            assert!(k.starts_with(key.as_encoded()), "names the key: {e}");
            let message = e.to_string();
            let hex: String = key
                .as_encoded()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert!(message.contains(&hex), "{message}");
        }
        other => panic!("expected a corruption in {cf:?}, got {other:?}"),
    }
}

#[test]
fn a_corrupted_lock_record_is_reported_with_its_key_never_a_panic() {
    let db = open();
    let mut txn = db.client.begin().unwrap();
    txn.put(b"h".to_vec(), b"v".to_vec());
    txn.commit().unwrap();
    let key = Key::from_raw(b"h");
    for garbage in [&b""[..], b"\xff", b"P\x05\x01", b"Pzzzzzzzzzzzzzzzzz"] {
        poke(&db.client, Cf::Lock, key.as_encoded().clone(), garbage);
        let txn = db.client.begin().unwrap();
        assert_corruption(txn.get(b"h"), Cf::Lock, &key);
        assert_corruption(
            txn.scan("a"..).collect::<std::result::Result<Vec<_>, _>>(),
            Cf::Lock,
            &key,
        );
        assert_corruption(txn.batch_get(&[b"h"]), Cf::Lock, &key);
        let mut writer = db.client.begin().unwrap();
        writer.put(b"h".to_vec(), b"w".to_vec());
        assert_corruption(writer.commit(), Cf::Lock, &key);
    }
}

/// A commit record on disk at `key@ts` that claims its transaction
/// started after `ts` (damaged, or written by another program): a rollback
/// of `ts` there, which would mark it as another transaction's commit that
/// overlaps, reports it as `Corruption` naming the key instead.
#[test]
fn a_commit_record_that_started_after_its_commit_ts_is_corruption_to_a_rollback() {
    use percolate::mvcc::{Write, WriteType};
    use percolate::txn::actions::check_txn_status::CheckTxnStatusOptions;
    let db = open();
    let now = db.client.oracle().get_ts().unwrap();
    let key = Key::from_raw(b"h");
    let record = Write::new(WriteType::Put, now.next(), Some(b"v".to_vec()));
    poke(
        &db.client,
        Cf::Write,
        key.clone().append_ts(now).into_encoded(),
        &record.to_bytes(),
    );
    let storage = storage(&db.client, b"h");
    let current_ts = db.client.oracle().get_ts().unwrap();
    assert_corruption(
        storage.cleanup(key.clone(), now, current_ts),
        Cf::Write,
        &key,
    );
    let options = CheckTxnStatusOptions {
        current_ts,
        rollback_if_not_exist: true,
        ..Default::default()
    };
    assert_corruption(
        storage.check_txn_status(key.clone(), now, options),
        Cf::Write,
        &key,
    );
}

/// A lock on disk with a TTL beyond what any lock may live (written by
/// another program, or damaged), whose primary was never prewritten, is
/// judged by the longest TTL a lock may have
/// ([`MAX_LOCK_TTL_MS`](percolate::txn::actions::MAX_LOCK_TTL_MS)): once
/// that has passed, readers resolve it instead of finding it alive forever.
#[test]
fn a_lock_with_an_endless_ttl_is_resolved_once_the_longest_ttl_has_passed() {
    use percolate::mvcc::{Lock, LockType};
    let db = open();
    let now = db.client.oracle().get_ts().unwrap();
    let max_ttl = percolate::txn::actions::MAX_LOCK_TTL_MS;
    let lock_ts = TimeStamp::compose(now.physical() - 2 * max_ttl, 0);
    let lock = Lock::new(LockType::Put, b"p0".to_vec(), lock_ts, u64::MAX);
    let key = Key::from_raw(b"h");
    poke(
        &db.client,
        Cf::Lock,
        key.as_encoded().clone(),
        &lock.to_bytes(),
    );
    let txn = db.client.begin().unwrap();
    assert_eq!(txn.get(b"h").unwrap(), None);
    assert!(
        storage(&db.client, b"h")
            .mvcc_by_key(key)
            .unwrap()
            .lock
            .is_none()
    );
    // The primary is rolled back, so the transaction can never commit.
    let primary = storage(&db.client, b"p0")
        .mvcc_by_key(Key::from_raw(b"p0"))
        .unwrap();
    assert!(
        primary
            .writes
            .iter()
            .any(|(_, w)| w.write_type == percolate::mvcc::WriteType::Rollback),
        "{primary:?}"
    );
}

#[test]
fn a_corrupted_write_record_is_reported_with_its_key_never_a_panic() {
    let db = open();
    let mut txn = db.client.begin().unwrap();
    txn.put(b"h".to_vec(), b"v".to_vec());
    txn.commit().unwrap();
    let key = Key::from_raw(b"h");
    // A newer commit record of garbage.
    let commit_ts = db.client.oracle().get_ts().unwrap();
    let stored = key.clone().append_ts(commit_ts).into_encoded();
    for garbage in [
        &b""[..],
        b"P",
        b"P\x80",
        b"Q\x01",
        b"L\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    ] {
        poke(&db.client, Cf::Write, stored.clone(), garbage);
        let txn = db.client.begin().unwrap();
        assert_corruption(txn.get(b"h"), Cf::Write, &key);
        assert_corruption(
            txn.scan("a"..).collect::<std::result::Result<Vec<_>, _>>(),
            Cf::Write,
            &key,
        );
        assert_corruption(db.client.get_latest(b"h"), Cf::Write, &key);
    }
}

#[test]
fn a_corrupted_oracle_file_stops_the_client_from_opening() {
    let db = open();
    let dir = db.dir.path().to_path_buf();
    drop(db.client);
    let file = dir.join("TIMESTAMP");
    let good = std::fs::read(&file).unwrap();
    let mut flipped = good.clone();
    flipped[10] ^= 0x01;
    for (what, bytes) in [
        ("empty", Vec::new()),
        ("truncated", good[..good.len() - 1].to_vec()),
        ("bit flip", flipped),
        ("garbage", b"not a timestamp file".to_vec()),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        let err = Client::open(&dir).unwrap_err();
        assert!(
            matches!(&err, Error::OracleCorrupted { path, .. } if *path == file),
            "{what}: {err:?}"
        );
        assert!(err.to_string().contains("TIMESTAMP"), "{what}: {err}");
    }
    // Repaired, it opens again.
    std::fs::write(&file, &good).unwrap();
    Client::open(&dir).unwrap();
}
