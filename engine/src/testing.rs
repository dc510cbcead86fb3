//! The engine conformance suite and test fixtures.
//!
//! Every [`Engine`] must pass [`run_conformance_suite`]; this crate runs it on
//! [`MemoryEngine`](crate::MemoryEngine) and [`RocksEngine`](crate::RocksEngine),
//! plus a differential test that drives both with the same random batches and
//! compares every read.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{
    Cf, Engine, EngineIterator, IterOptions, MemoryEngine, RocksEngine, SeekMode, Snapshot,
    WriteBatch, WriteOptions,
};

/// Which engine a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// [`MemoryEngine`].
    Memory,
    /// [`RocksEngine`] in a temporary directory.
    Rocks,
}

impl EngineKind {
    /// Both kinds.
    pub const ALL: [EngineKind; 2] = [EngineKind::Memory, EngineKind::Rocks];
}

/// A write-CF key: `prefix` (an encoded user key) and `ts` as the key
/// codec appends it (`!ts`, big-endian).
pub fn write_cf_key(prefix: &[u8], ts: u64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(&(!ts).to_be_bytes());
    key
}

/// A new empty RocksDB engine in a temporary directory.
pub fn temp_rocks_engine() -> RocksEngine {
    RocksEngine::open_temporary().expect("open a temporary RocksDB")
}

/// Collects every `(key, value)` of `cf` inside `options`, forwards.
pub fn collect_forward<S: Snapshot>(
    snapshot: &S,
    cf: Cf,
    options: IterOptions,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = snapshot.iter(cf, options).unwrap();
    let mut out = Vec::new();
    let mut valid = it.seek_to_first().unwrap();
    while valid {
        out.push((it.key().to_vec(), it.value().to_vec()));
        valid = it.next().unwrap();
    }
    out
}

/// Collects every `(key, value)` of `cf` inside `options`, backwards.
pub fn collect_backward<S: Snapshot>(
    snapshot: &S,
    cf: Cf,
    options: IterOptions,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = snapshot.iter(cf, options).unwrap();
    let mut out = Vec::new();
    let mut valid = it.seek_to_last().unwrap();
    while valid {
        out.push((it.key().to_vec(), it.value().to_vec()));
        valid = it.prev().unwrap();
    }
    out
}

fn kv(key: &[u8], value: &[u8]) -> (Vec<u8>, Vec<u8>) {
    (key.to_vec(), value.to_vec())
}

fn write<E: Engine>(engine: &E, batch: WriteBatch) {
    engine.write(&batch, WriteOptions::default()).unwrap();
}

fn put_all<E: Engine>(engine: &E, cf: Cf, keys: &[&[u8]]) {
    let mut batch = WriteBatch::new();
    for key in keys {
        batch.put(cf, key.to_vec(), [b"v-", *key].concat());
    }
    write(engine, batch);
}

/// Runs every conformance check on engines made by `new_engine` (one fresh
/// engine per check).
pub fn run_conformance_suite<E: Engine>(new_engine: impl Fn() -> E) {
    put_get_delete(&new_engine());
    column_families_are_separate(&new_engine());
    batch_is_atomic_and_ordered(&new_engine());
    snapshot_is_isolated(&new_engine());
    delete_range_removes_half_open_range(&new_engine());
    iterates_both_ways_within_bounds(&new_engine());
    seeks_clamp_to_bounds(&new_engine());
    prefix_seek_stays_in_prefix(&new_engine());
    empty_and_binary_keys(&new_engine());
}

/// Put, get, overwrite and delete one key.
pub fn put_get_delete<E: Engine>(engine: &E) {
    let mut batch = WriteBatch::new();
    batch.put(Cf::Default, b"k".to_vec(), b"v1".to_vec());
    write(engine, batch);
    assert_eq!(
        engine.snapshot().get(Cf::Default, b"k").unwrap(),
        Some(b"v1".to_vec())
    );
    let mut batch = WriteBatch::new();
    batch.put(Cf::Default, b"k".to_vec(), b"v2".to_vec());
    write(engine, batch);
    assert_eq!(
        engine.snapshot().get(Cf::Default, b"k").unwrap(),
        Some(b"v2".to_vec())
    );
    let mut batch = WriteBatch::new();
    batch.delete(Cf::Default, b"k".to_vec());
    write(engine, batch);
    assert_eq!(engine.snapshot().get(Cf::Default, b"k").unwrap(), None);
    assert_eq!(
        engine.snapshot().get(Cf::Default, b"missing").unwrap(),
        None
    );
}

/// The same key in different CFs holds different values.
pub fn column_families_are_separate<E: Engine>(engine: &E) {
    let mut batch = WriteBatch::new();
    for cf in Cf::ALL {
        batch.put(cf, b"key".to_vec(), cf.name().as_bytes().to_vec());
    }
    write(engine, batch);
    let snapshot = engine.snapshot();
    for cf in Cf::ALL {
        assert_eq!(
            snapshot.get(cf, b"key").unwrap(),
            Some(cf.name().as_bytes().to_vec())
        );
        assert_eq!(
            collect_forward(&snapshot, cf, IterOptions::new()),
            vec![kv(b"key", cf.name().as_bytes())]
        );
    }
}

/// A batch lands all at once, and later modifications of a key win.
pub fn batch_is_atomic_and_ordered<E: Engine>(engine: &E) {
    let before = engine.snapshot();
    let mut batch = WriteBatch::new();
    batch.put(Cf::Lock, b"a".to_vec(), b"1".to_vec());
    batch.put(Cf::Write, b"b".to_vec(), b"2".to_vec());
    batch.put(Cf::Lock, b"a".to_vec(), b"3".to_vec());
    batch.put(Cf::Default, b"c".to_vec(), b"4".to_vec());
    batch.delete(Cf::Default, b"c".to_vec());
    assert_eq!(batch.len(), 5);
    write(engine, batch);
    let after = engine.snapshot();
    assert_eq!(after.get(Cf::Lock, b"a").unwrap(), Some(b"3".to_vec()));
    assert_eq!(after.get(Cf::Write, b"b").unwrap(), Some(b"2".to_vec()));
    assert_eq!(after.get(Cf::Default, b"c").unwrap(), None);
    for cf in Cf::ALL {
        assert!(collect_forward(&before, cf, IterOptions::new()).is_empty());
    }
    write(engine, WriteBatch::new());
    assert_eq!(
        engine.snapshot().get(Cf::Lock, b"a").unwrap(),
        Some(b"3".to_vec())
    );
}

/// A snapshot sees neither later puts nor later deletes, through gets and
/// through iterators created before or after the write.
pub fn snapshot_is_isolated<E: Engine>(engine: &E) {
    put_all(engine, Cf::Write, &[b"a", b"b"]);
    let snapshot = engine.snapshot();
    let mut early = snapshot.iter(Cf::Write, IterOptions::new()).unwrap();
    let mut batch = WriteBatch::new();
    batch.put(Cf::Write, b"a".to_vec(), b"new".to_vec());
    batch.delete(Cf::Write, b"b".to_vec());
    batch.put(Cf::Write, b"c".to_vec(), b"new".to_vec());
    write(engine, batch);
    let old = vec![kv(b"a", b"v-a"), kv(b"b", b"v-b")];
    assert_eq!(
        snapshot.get(Cf::Write, b"a").unwrap(),
        Some(b"v-a".to_vec())
    );
    assert_eq!(snapshot.get(Cf::Write, b"c").unwrap(), None);
    assert_eq!(
        collect_forward(&snapshot, Cf::Write, IterOptions::new()),
        old
    );
    assert!(early.seek_to_first().unwrap());
    assert_eq!(early.value(), b"v-a");
    assert!(early.next().unwrap());
    assert_eq!(early.key(), b"b");
    assert!(!early.next().unwrap());
    let clone = snapshot.clone();
    drop(snapshot);
    assert_eq!(collect_forward(&clone, Cf::Write, IterOptions::new()), old);
    assert_eq!(
        collect_forward(&engine.snapshot(), Cf::Write, IterOptions::new()),
        vec![kv(b"a", b"new"), kv(b"c", b"new")]
    );
}

/// `delete_range(start, end)` removes `start..end` and nothing else.
pub fn delete_range_removes_half_open_range<E: Engine>(engine: &E) {
    put_all(engine, Cf::Default, &[b"a", b"b", b"c", b"d"]);
    put_all(engine, Cf::Lock, &[b"b"]);
    let mut batch = WriteBatch::new();
    batch.delete_range(Cf::Default, b"b".to_vec(), b"d".to_vec());
    write(engine, batch);
    let snapshot = engine.snapshot();
    assert_eq!(
        collect_forward(&snapshot, Cf::Default, IterOptions::new()),
        vec![kv(b"a", b"v-a"), kv(b"d", b"v-d")]
    );
    assert_eq!(snapshot.get(Cf::Lock, b"b").unwrap(), Some(b"v-b".to_vec()));
    // An empty or inverted range is a no-op, not an error.
    let mut batch = WriteBatch::new();
    batch.delete_range(Cf::Default, b"d".to_vec(), b"a".to_vec());
    batch.delete_range(Cf::Default, b"a".to_vec(), b"a".to_vec());
    write(engine, batch);
    assert_eq!(
        collect_forward(&engine.snapshot(), Cf::Default, IterOptions::new()).len(),
        2
    );
}

/// Forward and backward walks honour an inclusive lower and an exclusive
/// upper bound; `next`/`prev` stop at the edges and stay invalid.
pub fn iterates_both_ways_within_bounds<E: Engine>(engine: &E) {
    put_all(engine, Cf::Write, &[b"1", b"2", b"3", b"4", b"5"]);
    let snapshot = engine.snapshot();
    let bounded = || {
        IterOptions::new()
            .lower_bound(b"2".to_vec())
            .upper_bound(b"4".to_vec())
    };
    let keys = |rows: Vec<(Vec<u8>, Vec<u8>)>| rows.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    assert_eq!(
        keys(collect_forward(&snapshot, Cf::Write, bounded())),
        vec![b"2".to_vec(), b"3".to_vec()]
    );
    assert_eq!(
        keys(collect_backward(&snapshot, Cf::Write, bounded())),
        vec![b"3".to_vec(), b"2".to_vec()]
    );
    assert_eq!(
        collect_forward(&snapshot, Cf::Write, IterOptions::new()).len(),
        5
    );
    assert_eq!(
        collect_backward(&snapshot, Cf::Write, IterOptions::new()).len(),
        5
    );

    let mut it = snapshot.iter(Cf::Write, bounded()).unwrap();
    assert!(!it.valid().unwrap());
    assert!(!it.next().unwrap());
    assert!(it.seek(b"3").unwrap());
    assert_eq!(it.key(), b"3");
    assert!(it.prev().unwrap());
    assert_eq!(it.key(), b"2");
    assert!(!it.prev().unwrap());
    assert!(!it.valid().unwrap());
    assert_eq!(it.key(), b"");
    assert!(!it.prev().unwrap());
    assert!(it.seek_for_prev(b"25").unwrap());
    assert_eq!(it.key(), b"2");
    assert_eq!(it.value(), b"v-2");
    assert!(
        !it.seek(b"35").unwrap(),
        "35 < 4 but there is no key before the bound"
    );
    assert!(!it.seek_for_prev(b"1").unwrap());
}

/// A seek below the lower bound lands on the first key in bounds; a
/// seek_for_prev above the upper bound lands on the last one.
pub fn seeks_clamp_to_bounds<E: Engine>(engine: &E) {
    put_all(engine, Cf::Lock, &[b"a", b"c", b"e", b"g"]);
    let snapshot = engine.snapshot();
    let options = IterOptions::new()
        .lower_bound(b"b".to_vec())
        .upper_bound(b"f".to_vec());
    let mut it = snapshot.iter(Cf::Lock, options).unwrap();
    assert!(it.seek(b"a").unwrap());
    assert_eq!(it.key(), b"c");
    assert!(it.seek_for_prev(b"z").unwrap());
    assert_eq!(it.key(), b"e");
    assert!(it.seek_for_prev(b"e").unwrap());
    assert_eq!(it.key(), b"e");
    assert!(it.seek(b"e").unwrap());
    assert_eq!(it.key(), b"e");
    assert!(!it.next().unwrap());
    assert!(it.seek_to_first().unwrap());
    assert_eq!(it.key(), b"c");
    assert!(it.seek_to_last().unwrap());
    assert_eq!(it.key(), b"e");
}

/// In [`SeekMode::Prefix`] on the write CF the iterator never leaves the
/// seek target's `key without ts` prefix, in either direction.
pub fn prefix_seek_stays_in_prefix<E: Engine>(engine: &E) {
    let key = |user: &[u8], ts: u64| [user, &(!ts).to_be_bytes()].concat();
    let mut batch = WriteBatch::new();
    for user in [&b"aaaaaaaa"[..], b"bbbbbbbb", b"cccccccc"] {
        for ts in [5u64, 3, 1] {
            batch.put(Cf::Write, key(user, ts), vec![user[0], ts as u8]);
        }
    }
    write(engine, batch);
    let snapshot = engine.snapshot();
    let mut it = snapshot
        .iter(Cf::Write, IterOptions::new().seek_mode(SeekMode::Prefix))
        .unwrap();
    assert!(it.seek(&key(b"bbbbbbbb", 4)).unwrap());
    assert_eq!(it.value(), &[b'b', 3]);
    assert!(it.next().unwrap());
    assert_eq!(it.value(), &[b'b', 1]);
    assert!(!it.next().unwrap(), "must not step into the next user key");
    assert!(
        !it.seek(&key(b"bbbbbbbb", 0)).unwrap(),
        "no version of b at or below ts 0"
    );
    assert!(!it.seek(&key(b"bbbbbbba", 9)).unwrap(), "no such user key");
    assert!(it.seek_for_prev(&key(b"bbbbbbbb", 4)).unwrap());
    assert_eq!(it.value(), &[b'b', 5]);
    assert!(
        !it.prev().unwrap(),
        "must not step into the previous user key"
    );
    // Total order crosses user keys.
    let mut it = snapshot.iter(Cf::Write, IterOptions::new()).unwrap();
    assert!(it.seek(&key(b"bbbbbbbb", 0)).unwrap());
    assert_eq!(it.value(), &[b'c', 5]);
}

/// Empty keys, empty values and every byte value are stored faithfully, and
/// keys sort as unsigned bytes.
pub fn empty_and_binary_keys<E: Engine>(engine: &E) {
    let mut batch = WriteBatch::new();
    batch.put(Cf::Default, Vec::new(), b"empty key".to_vec());
    batch.put(Cf::Default, vec![0xff, 0x00], Vec::new());
    batch.put(Cf::Default, vec![0x00], vec![0xff; 3]);
    batch.put(Cf::Default, vec![0x7f], vec![1]);
    write(engine, batch);
    let snapshot = engine.snapshot();
    assert_eq!(
        snapshot.get(Cf::Default, b"").unwrap(),
        Some(b"empty key".to_vec())
    );
    assert_eq!(
        snapshot.get(Cf::Default, &[0xff, 0x00]).unwrap(),
        Some(Vec::new())
    );
    let keys: Vec<Vec<u8>> = collect_forward(&snapshot, Cf::Default, IterOptions::new())
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, vec![vec![], vec![0x00], vec![0x7f], vec![0xff, 0x00]]);
}

/// Applies the same random batches to two engines and checks after each one
/// that gets, forward and backward scans with random bounds, and prefix
/// seeks agree. `seed` makes a failure reproducible.
pub fn check_engines_agree<A: Engine, B: Engine>(a: &A, b: &B, seed: u64, rounds: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..rounds {
        let batch = random_batch(&mut rng);
        a.write(&batch, WriteOptions::default()).unwrap();
        b.write(&batch, WriteOptions::default()).unwrap();
        let (sa, sb) = (a.snapshot(), b.snapshot());
        for cf in Cf::ALL {
            let options = check_reads_agree(&sa, &sb, cf, &mut rng, (seed, round));
            check_seeks_agree(&sa, &sb, cf, options, &mut rng, (seed, round));
        }
        // Views of the latest data too: their cursors may come from a pool
        // and apply the bounds themselves (RocksEngine).
        let (la, lb) = (a.latest(), b.latest());
        for cf in Cf::ALL {
            let options = check_reads_agree(&la, &lb, cf, &mut rng, (seed, round));
            check_seeks_agree(&la, &lb, cf, options, &mut rng, (seed, round));
        }
    }
}

/// A key of up to 11 bytes from a small alphabet, so that keys collide.
fn random_key(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.random_range(0..12);
    (0..len)
        .map(|_| rng.random_range(b'a'..=b'e'))
        .collect::<Vec<u8>>()
}

/// A key to store in `cf`: in the write CF, shaped as MVCC stores its
/// keys there (a 3-byte user key, standing in for a memcomparable one, and
/// an 8-byte ts), so that no key's prefix begins another's, which
/// [`SeekMode::Prefix`] assumes; elsewhere any [`random_key`].
fn random_stored_key(cf: Cf, rng: &mut StdRng) -> Vec<u8> {
    if cf != Cf::Write {
        return random_key(rng);
    }
    (0..3 + crate::TS_SUFFIX_LEN)
        .map(|_| rng.random_range(b'a'..=b'e'))
        .collect::<Vec<u8>>()
}

/// Up to 7 puts, deletes and range deletes in random column families.
fn random_batch(rng: &mut StdRng) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for _ in 0..rng.random_range(0..8) {
        let cf = Cf::ALL[rng.random_range(0..Cf::ALL.len())];
        match rng.random_range(0..10) {
            0 => batch.delete_range(cf, random_key(rng), random_key(rng)),
            1..=3 => batch.delete(cf, random_stored_key(cf, rng)),
            _ => batch.put(cf, random_stored_key(cf, rng), random_key(rng)),
        }
    }
    batch
}

/// Checks that a get and forward and backward scans within random bounds
/// agree on `cf` (at `(seed, round)` of [`check_engines_agree`]); returns
/// the bounds.
fn check_reads_agree<SA: Snapshot, SB: Snapshot>(
    sa: &SA,
    sb: &SB,
    cf: Cf,
    rng: &mut StdRng,
    (seed, round): (u64, usize),
) -> IterOptions {
    let key = random_stored_key(cf, rng);
    assert_eq!(
        sa.get(cf, &key).unwrap(),
        sb.get(cf, &key).unwrap(),
        "seed {seed} round {round}"
    );
    let mut options = IterOptions::new();
    if rng.random_bool(0.5) {
        options = options.lower_bound(random_key(rng));
    }
    if rng.random_bool(0.5) {
        options = options.upper_bound(random_key(rng));
    }
    assert_eq!(
        collect_forward(sa, cf, options.clone()),
        collect_forward(sb, cf, options.clone()),
        "seed {seed} round {round} cf {cf} {options:?}"
    );
    assert_eq!(
        collect_backward(sa, cf, options.clone()),
        collect_backward(sb, cf, options.clone()),
        "seed {seed} round {round} cf {cf} {options:?}"
    );
    options
}

/// Checks that a seek (prefix or total order, forward or back) to a random
/// target within `options`' bounds, and up to 4 random steps from it,
/// agree on `cf`.
fn check_seeks_agree<SA: Snapshot, SB: Snapshot>(
    sa: &SA,
    sb: &SB,
    cf: Cf,
    options: IterOptions,
    rng: &mut StdRng,
    (seed, round): (u64, usize),
) {
    let target = if rng.random_bool(0.5) {
        random_stored_key(cf, rng)
    } else {
        random_key(rng)
    };
    // Prefix seeks are defined for targets that carry a ts suffix after
    // a key (see `SeekMode::Prefix`), inside the bounds (a seek below the
    // lower bound lands on the bound, whose prefix is not the target's).
    let seek_mode =
        if target.len() > crate::TS_SUFFIX_LEN && options.contains(&target) && rng.random_bool(0.5)
        {
            SeekMode::Prefix
        } else {
            SeekMode::TotalOrder
        };
    let options = options.seek_mode(seek_mode);
    let (mut ia, mut ib) = (
        sa.iter(cf, options.clone()).unwrap(),
        sb.iter(cf, options.clone()).unwrap(),
    );
    let forward = rng.random_bool(0.5);
    let (va, vb) = if forward {
        (ia.seek(&target).unwrap(), ib.seek(&target).unwrap())
    } else {
        (
            ia.seek_for_prev(&target).unwrap(),
            ib.seek_for_prev(&target).unwrap(),
        )
    };
    assert_eq!(
        va, vb,
        "seed {seed} round {round} cf {cf} seek {target:?} forward {forward} {options:?}"
    );
    let mut steps = 0;
    while ia.valid().unwrap() && steps < 4 {
        assert!(ib.valid().unwrap());
        assert_eq!(
            (ia.key(), ia.value()),
            (ib.key(), ib.value()),
            "seed {seed} round {round}"
        );
        let forward = rng.random_bool(0.5);
        let (na, nb) = if forward {
            (ia.next().unwrap(), ib.next().unwrap())
        } else {
            (ia.prev().unwrap(), ib.prev().unwrap())
        };
        assert_eq!(na, nb, "seed {seed} round {round} cf {cf}");
        steps += 1;
    }
}

/// A [`MemoryEngine`] and a [`RocksEngine`] agree on random workloads.
pub fn check_memory_matches_rocks(seed: u64, rounds: usize) {
    check_engines_agree(&MemoryEngine::new(), &temp_rocks_engine(), seed, rounds);
}
