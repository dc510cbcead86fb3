//! Property and randomized tests for the byte formats in `percolate::mvcc`.
//!
//! * proptest round trips: keys (raw ↔ encoded, order preservation, ts
//!   suffix), Lock and Write records (`to_bytes` → `parse` is the identity,
//!   except that `Lock::use_one_pc` is never serialized).
//! * A seeded random decoder test: valid encodings, mutated (bit flips,
//!   byte edits, inserted tag bytes, truncation at every length, random
//!   tails) or fully random, are fed to every decoder. None may panic, and
//!   whatever decodes must re-encode consistently.
//!
//! The decoder test runs `DEFAULT_FUZZ_CASES` inputs by default (a few
//! seconds in a debug build). Set `PERCOLATE_FUZZ_CASES=N` for a long run and
//! `PERCOLATE_FUZZ_SEED=S` to replay a failure; the seed is printed when a
//! case fails.

use std::panic::{AssertUnwindSafe, catch_unwind};

use percolate::mvcc::{
    Key, LastChange, Lock, LockType, SHORT_VALUE_MAX_LEN, TimeStamp, TimestampedKey, Write,
    WriteRef, WriteType, codec,
};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------
// proptest strategies

/// Raw keys over a small alphabet, so that prefixes, zero bytes and 0xff
/// (the group marker) collide often; plus arbitrary bytes.
fn raw_key() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![Just(0u8), Just(1u8), Just(0xffu8), Just(b'a'), any::<u8>()];
    prop::collection::vec(byte, 0..26)
}

fn timestamp() -> impl Strategy<Value = TimeStamp> {
    prop_oneof![Just(0u64), Just(u64::MAX), 0..1000u64, any::<u64>()].prop_map(TimeStamp::new)
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=max)
}

fn short_value() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop::option::of(bytes(SHORT_VALUE_MAX_LEN))
}

fn last_change() -> impl Strategy<Value = LastChange> {
    prop_oneof![
        Just(LastChange::Unknown),
        Just(LastChange::NotExist),
        (1..=u64::MAX, 1..=u64::MAX).prop_map(|(ts, versions)| LastChange::Exist {
            last_change_ts: TimeStamp::new(ts),
            estimated_versions_to_last_change: versions,
        }),
    ]
}

fn lock_type() -> impl Strategy<Value = LockType> {
    prop_oneof![
        Just(LockType::Put),
        Just(LockType::Delete),
        Just(LockType::Lock),
        Just(LockType::Pessimistic),
    ]
}

fn write_type() -> impl Strategy<Value = WriteType> {
    prop_oneof![
        Just(WriteType::Put),
        Just(WriteType::Delete),
        Just(WriteType::Lock),
        Just(WriteType::Rollback),
    ]
}

/// Any valid lock: short value ≤ 255 bytes, secondaries only with async
/// commit (`None` means no async commit), `LastChange` per its invariant.
fn lock() -> impl Strategy<Value = Lock> {
    let header = (
        lock_type(),
        bytes(40),
        timestamp(),
        any::<u64>(),
        short_value(),
    );
    let optional = (
        (timestamp(), any::<u64>(), timestamp(), any::<bool>()),
        prop::option::of(prop::collection::vec(bytes(20), 0..5)),
        prop::collection::vec(timestamp(), 0..5),
        (last_change(), any::<u64>(), any::<bool>(), any::<u64>()),
    );
    (header, optional).prop_map(|(header, optional)| {
        let (lock_type, primary, ts, ttl, short_value) = header;
        let ((for_update_ts, txn_size, min_commit_ts, use_one_pc), secondaries, rollback_ts, rest) =
            optional;
        let (last_change, txn_source, is_locked_with_conflict, generation) = rest;
        Lock {
            short_value,
            for_update_ts,
            txn_size,
            min_commit_ts,
            use_async_commit: secondaries.is_some(),
            use_one_pc,
            secondaries: secondaries.unwrap_or_default(),
            rollback_ts,
            last_change,
            txn_source,
            is_locked_with_conflict,
            generation,
            ..Lock::new(lock_type, primary, ts, ttl)
        }
    })
}

fn write() -> impl Strategy<Value = Write> {
    (
        (write_type(), timestamp(), short_value()),
        (any::<bool>(), prop::option::of(timestamp())),
        (last_change(), any::<u64>()),
    )
        .prop_map(
            |((kind, start_ts, value), (overlapped, fence), (last_change, source))| {
                let mut write =
                    Write::new(kind, start_ts, value).set_overlapped_rollback(overlapped, fence);
                write.last_change = last_change;
                write.txn_source = source;
                write
            },
        )
}

proptest! {
    #[test]
    fn key_raw_round_trip(raw in raw_key()) {
        let key = Key::from_raw(&raw);
        prop_assert_eq!(key.len(), codec::max_encoded_bytes_size(raw.len()));
        prop_assert!(key.is_encoded_from(&raw));
        prop_assert_eq!(key.to_raw(), Ok(raw.clone()));
        let mut data = &key.as_encoded()[..];
        prop_assert_eq!(codec::decode_bytes(&mut data), Ok(raw.clone()));
        prop_assert!(data.is_empty());
        let mut desc = vec![];
        codec::encode_bytes_desc(&mut desc, &raw);
        prop_assert_eq!(codec::decode_bytes_desc(&mut &desc[..]), Ok(raw));
    }

    #[test]
    fn key_order_matches_raw_then_newest_first(
        a in raw_key(), b in raw_key(), ta in timestamp(), tb in timestamp(),
    ) {
        let (ka, kb) = (Key::from_raw(&a), Key::from_raw(&b));
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        prop_assert_eq!(ka.is_encoded_from(&b), a == b);
        let (va, vb) = (ka.append_ts(ta), kb.append_ts(tb));
        prop_assert_eq!(va.cmp(&vb), a.cmp(&b).then(tb.cmp(&ta)));
        let mut desc_a = vec![];
        let mut desc_b = vec![];
        codec::encode_bytes_desc(&mut desc_a, &a);
        codec::encode_bytes_desc(&mut desc_b, &b);
        prop_assert_eq!(desc_a.cmp(&desc_b), b.cmp(&a));
    }

    #[test]
    fn key_append_ts_and_split(raw in raw_key(), ts in timestamp()) {
        let key = Key::from_raw(&raw);
        let versioned = key.clone().append_ts(ts);
        let bytes = versioned.as_encoded().clone();
        prop_assert_eq!(versioned.ts(), ts);
        prop_assert_eq!(versioned.user_key(), &key.as_encoded()[..]);
        prop_assert_eq!(Key::split_on_ts_for(&bytes), Ok((&key.as_encoded()[..], ts)));
        prop_assert_eq!(Key::decode_ts_from(&bytes), Ok(ts));
        prop_assert_eq!(Key::truncate_ts_for(&bytes), Ok(&key.as_encoded()[..]));
        prop_assert!(Key::is_user_key_eq(&bytes, key.as_encoded()));
        prop_assert!(!Key::from_encoded(bytes.clone()).is_encoded_from(&raw));
        prop_assert_eq!(TimestampedKey::from_encoded(bytes.clone()), Ok(versioned.clone()));
        prop_assert_eq!(Key::from_encoded(bytes).truncate_ts(), Ok(key.clone()));
        prop_assert_eq!(versioned.truncate_ts(), key);
    }

    #[test]
    fn lock_round_trip(lock in lock(), tail in bytes(8)) {
        let bytes = lock.to_bytes();
        let expected = Lock { use_one_pc: false, ..lock };
        prop_assert_eq!(Lock::parse(&bytes), Ok(expected.clone()));
        // A field from a future version (unknown tag) and whatever follows is ignored.
        let mut extended = bytes;
        extended.push(b'Z');
        extended.extend_from_slice(&tail);
        prop_assert_eq!(Lock::parse(&extended), Ok(expected));
    }

    #[test]
    fn write_round_trip(write in write(), tail in bytes(8)) {
        let bytes = write.to_bytes();
        prop_assert_eq!(WriteRef::parse(&bytes), Ok(write.as_ref()));
        prop_assert_eq!(Write::parse(&bytes), Ok(write.clone()));
        prop_assert_eq!(WriteRef::parse_type(&bytes), Ok(write.write_type));
        let mut extended = bytes;
        extended.push(b'Z');
        extended.extend_from_slice(&tail);
        prop_assert_eq!(Write::parse(&extended), Ok(write));
    }

    #[test]
    fn varint_and_compact_bytes_round_trip(v in any::<u64>(), i in any::<i64>(), data in bytes(300)) {
        let mut buf = vec![];
        codec::encode_var_u64(&mut buf, v);
        codec::encode_var_i64(&mut buf, i);
        codec::encode_compact_bytes(&mut buf, &data);
        codec::encode_u64_desc(&mut buf, v);
        let mut rest = &buf[..];
        prop_assert_eq!(codec::decode_var_u64(&mut rest), Ok(v));
        prop_assert_eq!(codec::decode_var_i64(&mut rest), Ok(i));
        prop_assert_eq!(codec::decode_compact_bytes(&mut rest), Ok(&data[..]));
        prop_assert_eq!(codec::decode_u64_desc(&mut rest), Ok(v));
        prop_assert!(rest.is_empty());
    }
}

// ---------------------------------------------------------------------------
// Randomized decoder test

/// Inputs checked in the default (CI) run.
const DEFAULT_FUZZ_CASES: u64 = 200_000;

/// Tag bytes of every Lock/Write field and type, inserted by mutations so
/// random inputs reach the field parsers.
const INTERESTING: &[u8] = b"PDLSRHvftcarlsFgTS\x00\x01\x7f\x80\xf7\xf8\xfe\xff";

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a u64")),
    )
}

fn random_u64(rng: &mut StdRng) -> u64 {
    match rng.random_range(0..6) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.random_range(0..300),
        3 => 1 << rng.random_range(0..64),
        _ => rng.random(),
    }
}

fn random_bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let len = rng.random_range(0..=max);
    (0..len).map(|_| rng.random()).collect()
}

fn maybe<T>(rng: &mut StdRng, f: impl FnOnce(&mut StdRng) -> T) -> Option<T> {
    rng.random_bool(0.5).then(|| f(rng))
}

fn random_last_change(rng: &mut StdRng) -> LastChange {
    match rng.random_range(0..3) {
        0 => LastChange::Unknown,
        1 => LastChange::NotExist,
        _ => LastChange::Exist {
            last_change_ts: TimeStamp::new(random_u64(rng).max(1)),
            estimated_versions_to_last_change: random_u64(rng).max(1),
        },
    }
}

fn random_lock(rng: &mut StdRng) -> Lock {
    let types = [
        LockType::Put,
        LockType::Delete,
        LockType::Lock,
        LockType::Pessimistic,
    ];
    let lock_type = types[rng.random_range(0..types.len())];
    let primary = random_bytes(rng, 12);
    let mut lock = Lock::new(lock_type, primary, random_u64(rng).into(), random_u64(rng));
    lock.short_value = maybe(rng, |r| random_bytes(r, 20));
    lock.for_update_ts = maybe(rng, random_u64).unwrap_or(0).into();
    lock.txn_size = maybe(rng, random_u64).unwrap_or(0);
    lock.min_commit_ts = maybe(rng, random_u64).unwrap_or(0).into();
    if let Some(secondaries) = maybe(rng, |r| {
        (0..r.random_range(0..4))
            .map(|_| random_bytes(r, 6))
            .collect()
    }) {
        lock.use_async_commit = true;
        lock.secondaries = secondaries;
    }
    lock.rollback_ts = (0..rng.random_range(0..3))
        .map(|_| random_u64(rng).into())
        .collect();
    lock.last_change = random_last_change(rng);
    lock.txn_source = maybe(rng, random_u64).unwrap_or(0);
    lock.is_locked_with_conflict = rng.random_bool(0.3);
    lock.generation = maybe(rng, random_u64).unwrap_or(0);
    lock
}

fn random_write(rng: &mut StdRng) -> Write {
    let types = [
        WriteType::Put,
        WriteType::Delete,
        WriteType::Lock,
        WriteType::Rollback,
    ];
    let write_type = types[rng.random_range(0..types.len())];
    let value = maybe(rng, |r| random_bytes(r, 20));
    let fence = maybe(rng, random_u64).map(TimeStamp::new);
    let mut write = Write::new(write_type, random_u64(rng).into(), value)
        .set_overlapped_rollback(rng.random_bool(0.3), fence);
    write.last_change = random_last_change(rng);
    write.txn_source = maybe(rng, random_u64).unwrap_or(0);
    write
}

/// A valid encoding of one of the formats.
fn random_valid(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..6) {
        0 | 1 => random_lock(rng).to_bytes(),
        2 | 3 => random_write(rng).to_bytes(),
        4 => {
            let key = Key::from_raw(&random_bytes(rng, 20));
            match maybe(rng, random_u64) {
                Some(ts) => key.append_ts(ts.into()).into_encoded(),
                None => key.into_encoded(),
            }
        }
        _ => {
            let mut buf = vec![];
            codec::encode_var_u64(&mut buf, random_u64(rng));
            codec::encode_compact_bytes(&mut buf, &random_bytes(rng, 10));
            buf
        }
    }
}

/// Applies one random mutation.
fn mutate(rng: &mut StdRng, input: &mut Vec<u8>) {
    let len = input.len();
    match rng.random_range(0..7) {
        0 if len > 0 => input[rng.random_range(0..len)] ^= 1 << rng.random_range(0..8),
        1 if len > 0 => input[rng.random_range(0..len)] = rng.random(),
        2 => input.truncate(rng.random_range(0..=len)),
        3 => input.extend(random_bytes(rng, 12)),
        4 => input.insert(
            rng.random_range(0..=len),
            INTERESTING[rng.random_range(0..INTERESTING.len())],
        ),
        5 if len > 0 => {
            input.remove(rng.random_range(0..len));
        }
        _ => {
            let at = rng.random_range(0..=len);
            input.splice(at..at, random_bytes(rng, 10));
        }
    }
}

/// Feeds `input` to every decoder. Panics (the failure) if a decoder panics
/// or a decoded value does not re-encode consistently.
fn decode_all(input: &[u8]) {
    if let Ok(lock) = Lock::parse(input) {
        assert_eq!(Lock::parse(&lock.to_bytes()), Ok(lock), "lock re-encodes");
    }
    if let Ok(write) = WriteRef::parse(input) {
        assert_eq!(
            WriteRef::parse(&write.to_bytes()),
            Ok(write),
            "write re-encodes"
        );
        assert_eq!(WriteRef::parse_type(input), Ok(write.write_type));
    }
    let _ = Write::parse(input);
    let key = Key::from_encoded_slice(input);
    if let Ok(raw) = key.to_raw() {
        // The strict decoder accepts exactly one encoding per raw key.
        assert!(
            key.is_encoded_from(&raw),
            "key decodes only from its encoding"
        );
        assert_eq!(Key::from_raw(&raw), key, "key re-encodes");
    }
    let _ = key.to_string();
    let mut data = input;
    if let Ok(raw) = codec::decode_bytes(&mut data) {
        assert!(raw.len() <= input.len());
    }
    let _ = codec::decode_bytes_desc(&mut &input[..]);
    decode_numbers(input);
    if let Ok(versioned) = TimestampedKey::from_encoded(input.to_vec()) {
        assert_eq!(
            Key::split_on_ts_for(input),
            Ok((versioned.user_key(), versioned.ts()))
        );
        let _ = versioned.to_string();
        let _ = versioned.truncate_ts().to_raw();
    }
}

fn decode_numbers(input: &[u8]) {
    let mut data = input;
    if let Ok(v) = codec::decode_var_u64(&mut data) {
        let mut buf = vec![];
        codec::encode_var_u64(&mut buf, v);
        assert!(
            buf.len() <= input.len() - data.len(),
            "minimal varint is no longer"
        );
    }
    let mut data = input;
    if let Ok(bytes) = codec::decode_compact_bytes(&mut data) {
        assert!(bytes.len() < input.len());
    }
    let _ = codec::decode_var_i64(&mut &input[..]);
    let _ = codec::decode_u64(&mut &input[..]);
    let _ = codec::decode_u64_desc(&mut &input[..]);
}

/// Runs `decode_all`, turning a panic into a failure that names the seed,
/// the case number and the input.
fn check_case(seed: u64, case: u64, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| decode_all(input))).is_err() {
        panic!(
            "decoder failure: PERCOLATE_FUZZ_SEED={seed}, case {case}, input {}",
            hex::encode(input)
        );
    }
}

#[test]
fn random_inputs_never_panic_decoders() {
    let cases = env_u64("PERCOLATE_FUZZ_CASES").unwrap_or(DEFAULT_FUZZ_CASES);
    let seed = env_u64("PERCOLATE_FUZZ_SEED").unwrap_or_else(rand::random);
    eprintln!("decoder fuzz: {cases} cases, PERCOLATE_FUZZ_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut case = 0;
    while case < cases {
        let mut input = match rng.random_range(0..10) {
            0 => random_bytes(&mut rng, 40),
            _ => random_valid(&mut rng),
        };
        if rng.random_range(0..16) == 0 {
            // Every prefix of a valid encoding (each counts as a case).
            for len in 0..input.len() {
                check_case(seed, case, &input[..len]);
                case += 1;
            }
        }
        for _ in 0..rng.random_range(0..4) {
            mutate(&mut rng, &mut input);
        }
        check_case(seed, case, &input);
        case += 1;
    }
}
