//! Byte-exact compatibility with TiKV: every vector in `tests/data/vectors.json`
//! (vectors described in `docs/FORMAT.md`, whose bytes were checked
//! against TiKV's own encoder and parser) is checked in both directions:
//!
//! * encode: build the value from `inputs`, encode it, compare with `hex`;
//! * decode: decode `hex`, compare with the value built from `inputs`.
//!
//! `decode_only` rows (inputs followed by unknown trailing bytes) are checked
//! in the decode direction, plus "the encoding is `hex` minus the unknown
//! tail". Any unrecognized kind, op or input field fails the test, so no
//! vector or field can be skipped silently.

use percolate::mvcc::{
    Key, LastChange, Lock, LockType, RollbackProtection, TimeStamp, TimestampedKey, Write,
    WriteRef, WriteType, codec,
};
use serde_json::{Map, Value};

const VECTORS: &str = include_str!("data/vectors.json");

type Check = Result<(), String>;

/// The `inputs` object of one vector. Every field must be taken exactly
/// once; [`Inputs::finish`] fails on fields nobody looked at.
struct Inputs(Map<String, Value>);

impl Inputs {
    fn take(&mut self, name: &str) -> Option<Value> {
        self.0.remove(name)
    }

    fn u64(&mut self, name: &str) -> Result<Option<u64>, String> {
        self.take(name)
            .map(|v| v.as_u64().ok_or(format!("{name}: not a u64: {v}")))
            .transpose()
    }

    fn req_u64(&mut self, name: &str) -> Result<u64, String> {
        self.u64(name)?.ok_or(format!("missing {name}"))
    }

    fn ts(&mut self, name: &str) -> Result<TimeStamp, String> {
        Ok(TimeStamp::new(self.u64(name)?.unwrap_or(0)))
    }

    fn bool(&mut self, name: &str) -> Result<bool, String> {
        self.take(name)
            .map(|v| v.as_bool().ok_or(format!("{name}: not a bool: {v}")))
            .transpose()
            .map(|b| b.unwrap_or(false))
    }

    fn str(&mut self, name: &str) -> Result<Option<String>, String> {
        self.take(name)
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or(format!("{name}: not a string: {v}"))
            })
            .transpose()
    }

    fn req_str(&mut self, name: &str) -> Result<String, String> {
        self.str(name)?.ok_or(format!("missing {name}"))
    }

    /// A UTF-8 string field as bytes.
    fn bytes(&mut self, name: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(self.str(name)?.map(String::into_bytes))
    }

    fn hex(&mut self, name: &str) -> Result<Option<Vec<u8>>, String> {
        self.str(name)?
            .map(|s| hex::decode(&s).map_err(|e| format!("{name}: {e}")))
            .transpose()
    }

    /// The raw key: `raw` (UTF-8) or `raw_hex`.
    fn raw_key(&mut self) -> Result<Vec<u8>, String> {
        match (self.bytes("raw")?, self.hex("raw_hex")?) {
            (Some(raw), None) | (None, Some(raw)) => Ok(raw),
            _ => Err("need exactly one of raw / raw_hex".into()),
        }
    }

    fn last_change(&mut self) -> Result<LastChange, String> {
        match self.take("last_change") {
            None => Ok(LastChange::Unknown),
            Some(Value::String(s)) if s == "NotExist" => Ok(LastChange::NotExist),
            Some(Value::Object(obj)) => {
                let mut parts = Inputs(obj);
                let ts = parts.req_u64("ts")?;
                let versions = parts.req_u64("versions")?;
                parts.finish()?;
                Ok(LastChange::Exist {
                    last_change_ts: TimeStamp::new(ts),
                    estimated_versions_to_last_change: versions,
                })
            }
            Some(other) => Err(format!("bad last_change {other}")),
        }
    }

    fn finish(self) -> Check {
        if self.0.is_empty() {
            Ok(())
        } else {
            let names: Vec<_> = self.0.keys().collect();
            Err(format!("unrecognized input fields {names:?}"))
        }
    }
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Check {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn expect_hex(what: &str, got: &[u8], want: &[u8]) -> Check {
    expect_eq(what, hex::encode(got), hex::encode(want))
}

fn check_key(mut inputs: Inputs, bytes: &[u8]) -> Check {
    let op = inputs.req_str("op")?;
    match op.as_str() {
        "from_raw" => check_key_from_raw(inputs.raw_key()?, bytes)?,
        "from_raw+append_ts" => {
            let raw = inputs.raw_key()?;
            let ts = inputs.ts("ts")?;
            check_ts_parts(&mut inputs, ts)?;
            let encoded = Key::from_raw(&raw).append_ts(ts);
            expect_hex("encode", encoded.as_encoded(), bytes)?;
            let decoded =
                TimestampedKey::from_encoded(bytes.to_vec()).map_err(|e| e.to_string())?;
            expect_eq("decode ts", decoded.ts(), ts)?;
            expect_eq("decode raw", decoded.truncate_ts().to_raw(), Ok(raw))?;
        }
        "from_encoded+append_ts" => {
            let encoded = inputs.hex("encoded_hex")?.ok_or("missing encoded_hex")?;
            let ts = inputs.ts("ts")?;
            let key = Key::from_encoded(encoded.clone()).append_ts(ts);
            expect_hex("encode", key.as_encoded(), bytes)?;
            expect_eq(
                "decode",
                Key::split_on_ts_for(bytes),
                Ok((&encoded[..], ts)),
            )?;
        }
        "encode_bytes_desc" => {
            let raw = inputs.raw_key()?;
            let mut buf = vec![];
            codec::encode_bytes_desc(&mut buf, &raw);
            expect_hex("encode", &buf, bytes)?;
            let mut data = bytes;
            expect_eq("decode", codec::decode_bytes_desc(&mut data), Ok(raw))?;
            expect_eq("decode leftover", data.len(), 0)?;
        }
        other => return Err(format!("unrecognized key op {other:?}")),
    }
    inputs.finish()
}

fn check_key_from_raw(raw: Vec<u8>, bytes: &[u8]) -> Check {
    let key = Key::from_raw(&raw);
    expect_hex("encode", key.as_encoded(), bytes)?;
    let mut plain = vec![];
    codec::encode_bytes(&mut plain, &raw);
    expect_hex("codec::encode_bytes", &plain, bytes)?;
    let decoded = Key::from_encoded_slice(bytes);
    expect_eq("is_encoded_from", decoded.is_encoded_from(&raw), true)?;
    expect_eq("decode", decoded.to_raw(), Ok(raw))
}

/// `physical_ms` / `logical`, when given, must compose to `ts`.
fn check_ts_parts(inputs: &mut Inputs, ts: TimeStamp) -> Check {
    match (inputs.u64("physical_ms")?, inputs.u64("logical")?) {
        (None, None) => Ok(()),
        (Some(physical), Some(logical)) => {
            expect_eq("compose", TimeStamp::compose(physical, logical), ts)?;
            expect_eq("split", (ts.physical(), ts.logical()), (physical, logical))
        }
        _ => Err("physical_ms and logical come together".into()),
    }
}

fn lock_type(name: &str) -> Result<LockType, String> {
    match name {
        "Put" => Ok(LockType::Put),
        "Delete" => Ok(LockType::Delete),
        "Lock" => Ok(LockType::Lock),
        "Pessimistic" => Ok(LockType::Pessimistic),
        other => Err(format!("unrecognized lock_type {other:?}")),
    }
}

fn build_lock(inputs: &mut Inputs) -> Result<Lock, String> {
    let kind = lock_type(&inputs.req_str("lock_type")?)?;
    let primary = inputs.bytes("primary")?.ok_or("missing primary")?;
    let mut lock = Lock::new(
        kind,
        primary,
        inputs.ts("ts")?,
        inputs.u64("ttl")?.unwrap_or(0),
    );
    lock.short_value = inputs.bytes("short_value")?;
    lock.for_update_ts = inputs.ts("for_update_ts")?;
    lock.txn_size = inputs.u64("txn_size")?.unwrap_or(0);
    lock.min_commit_ts = inputs.ts("min_commit_ts")?;
    lock.use_async_commit = inputs.bool("use_async_commit")?;
    if let Some(secondaries) = inputs.take("secondaries") {
        let list = secondaries.as_array().ok_or("secondaries: not a list")?;
        lock.use_async_commit = true;
        lock.secondaries = list
            .iter()
            .map(|s| {
                s.as_str()
                    .map(|s| s.as_bytes().to_vec())
                    .ok_or("secondary: not a string")
            })
            .collect::<Result<_, _>>()?;
    }
    lock.last_change = inputs.last_change()?;
    Ok(lock)
}

fn check_lock(mut inputs: Inputs, bytes: &[u8]) -> Check {
    let decode_only = inputs.bool("decode_only")?;
    let lock = build_lock(&mut inputs)?;
    inputs.finish()?;
    let encoded = lock.to_bytes();
    if decode_only {
        expect_eq(
            "encoding is a prefix of hex",
            bytes.starts_with(&encoded),
            true,
        )?;
    } else {
        expect_hex("encode", &encoded, bytes)?;
    }
    expect_eq("decode", Lock::parse(bytes), Ok(lock))
}

fn write_type(name: &str) -> Result<WriteType, String> {
    match name {
        "Put" => Ok(WriteType::Put),
        "Delete" => Ok(WriteType::Delete),
        "Lock" => Ok(WriteType::Lock),
        "Rollback" => Ok(WriteType::Rollback),
        other => Err(format!("unrecognized write_type {other:?}")),
    }
}

fn build_write(inputs: &mut Inputs) -> Result<Write, String> {
    let kind = write_type(&inputs.req_str("write_type")?)?;
    let start_ts = inputs.ts("start_ts")?;
    let mut write = if inputs.bool("protected")? {
        expect_eq("protected write_type", kind, WriteType::Rollback)?;
        Write::new_rollback(start_ts, RollbackProtection::Protected)
    } else {
        Write::new(kind, start_ts, inputs.bytes("short_value")?)
    };
    let gc_fence = inputs.u64("gc_fence")?.map(TimeStamp::new);
    let overlapped = inputs.bool("has_overlapped_rollback")?;
    write = write.set_overlapped_rollback(overlapped, gc_fence);
    write.last_change = inputs.last_change()?;
    write.txn_source = inputs.u64("txn_source")?.unwrap_or(0);
    Ok(write)
}

fn check_write(mut inputs: Inputs, bytes: &[u8]) -> Check {
    let decode_only = inputs.bool("decode_only")?;
    let write = build_write(&mut inputs)?;
    inputs.finish()?;
    let encoded = write.to_bytes();
    if decode_only {
        expect_eq(
            "encoding is a prefix of hex",
            bytes.starts_with(&encoded),
            true,
        )?;
    } else {
        expect_hex("encode", &encoded, bytes)?;
        expect_hex("encode (WriteRef)", &write.as_ref().to_bytes(), bytes)?;
    }
    expect_eq(
        "decode (WriteRef)",
        WriteRef::parse(bytes),
        Ok(write.as_ref()),
    )?;
    expect_eq("decode", Write::parse(bytes), Ok(write))
}

fn check_vector(vector: &Value) -> Check {
    let obj = vector.as_object().ok_or("vector is not an object")?;
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("missing kind")?;
    let hex_str = obj
        .get("hex")
        .and_then(Value::as_str)
        .ok_or("missing hex")?;
    let bytes = hex::decode(hex_str).map_err(|e| format!("bad hex: {e}"))?;
    let inputs = obj
        .get("inputs")
        .and_then(Value::as_object)
        .ok_or("missing inputs")?;
    let inputs = Inputs(inputs.clone());
    match kind {
        "key" => check_key(inputs, &bytes),
        "lock" => check_lock(inputs, &bytes),
        "write" => check_write(inputs, &bytes),
        other => Err(format!("unrecognized kind {other:?}")),
    }
}

#[test]
fn every_vector_round_trips_byte_exact() {
    let vectors: Vec<Value> = serde_json::from_str(VECTORS).expect("vectors.json parses");
    assert!(!vectors.is_empty());
    let mut failures = vec![];
    let mut checked = 0;
    let mut ids = std::collections::BTreeSet::new();
    for vector in &vectors {
        let id = vector.get("id").map_or("?".to_owned(), Value::to_string);
        assert!(ids.insert(id.clone()), "duplicate vector id {id}");
        match check_vector(vector) {
            Ok(()) => checked += 1,
            Err(e) => failures.push(format!("vector {id}: {e}\n  {vector}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(checked, vectors.len(), "every vector is checked");
    eprintln!("checked {checked} vectors");
}
