//! Export of a key range to SST files in TiKV's layout
//! (`Client::export_range`) and their import (`Client::import`), on
//! RocksDB.
//!
//! `PERCOLATE_EXPORT_KEYS=100000 cargo test --release --test export
//! round_trip -- --nocapture` prints the sizes and times of a larger round
//! trip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use percolate::engine::{
    Cf, DATA_PREFIX, Engine, EngineIterator, IterOptions, RocksEngine, Snapshot,
};
use percolate::mvcc::{Key, TimeStamp, WriteRef, WriteType};
use percolate::txn::client::{ExportManifest, MANIFEST_FILE};
use percolate::{Client, Error};

fn key(i: usize) -> Vec<u8> {
    format!("k{i:07}").into_bytes()
}

/// Long (default CF) for every fifth key, short (inlined) otherwise.
fn value(i: usize, round: usize) -> Vec<u8> {
    let v = format!("v{i}-r{round}");
    if i % 5 == 0 {
        v.repeat(40).into_bytes()
    } else {
        v.into_bytes()
    }
}

/// A history of the `rounds` over `keys` keys: each round rewrites
/// some keys and deletes others. Returns the commit ts after each round.
fn write_history(client: &Client, keys: usize, rounds: std::ops::Range<usize>) -> Vec<TimeStamp> {
    let mut after = Vec::new();
    for round in rounds {
        for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
            client
                .with_retry(|txn| {
                    for &i in chunk {
                        match (i + round) % 4 {
                            0 if round > 0 => txn.delete(key(i)),
                            1 if round > 0 => {}
                            _ => txn.put(key(i), value(i, round)),
                        }
                    }
                    Ok(())
                })
                .unwrap();
        }
        after.push(client.current_ts().unwrap());
    }
    after
}

/// Every pair of `[start, end)` at `ts`.
fn read_all(
    client: &Client,
    ts: TimeStamp,
    start: &[u8],
    end: &[u8],
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    client
        .snapshot(ts)
        .scan(start..end)
        .collect::<Result<_, _>>()
        .unwrap()
}

struct Exported {
    _source_dir: tempfile::TempDir,
    source: Client,
    out: tempfile::TempDir,
    manifest: ExportManifest,
    rounds: Vec<TimeStamp>,
}

const START: usize = 100;

/// A source database with a history over `keys` keys, exported over
/// `[key(START), key(keys - 100))` at a ts between the third and the
/// fourth (last) round.
fn export(keys: usize) -> Exported {
    let source_dir = tempfile::tempdir().unwrap();
    let source = Client::open(source_dir.path()).unwrap();
    let mut rounds = write_history(&source, keys, 0..3);
    let ts = source.current_ts().unwrap();
    rounds.extend(write_history(&source, keys, 3..4));
    let out = tempfile::tempdir().unwrap();
    let end = key(keys - 100);
    let started = Instant::now();
    let manifest = source
        .export_range(&key(START), Some(&end), ts, out.path())
        .unwrap();
    let bytes: u64 = manifest.files.iter().map(|f| f.size).sum();
    let entries: u64 = manifest.files.iter().map(|f| f.entries).sum();
    eprintln!(
        "export of {} keys ({} entries in {} files, {bytes} bytes): {:?}",
        keys - 100 - START,
        entries,
        manifest.files.len(),
        started.elapsed()
    );
    Exported {
        _source_dir: source_dir,
        source,
        out,
        manifest,
        rounds,
    }
}

fn keys_from_env(default: usize) -> usize {
    std::env::var("PERCOLATE_EXPORT_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn round_trip_answers_every_read_at_or_below_the_export_ts_the_same() {
    let keys = keys_from_env(3000);
    let e = export(keys);
    assert_eq!(e.manifest.files.len(), 2, "{:?}", e.manifest);
    let target = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let imported = Client::import(target.path(), e.out.path()).unwrap();
    eprintln!("import: {:?}", started.elapsed());
    assert_eq!(imported, e.manifest);
    let restored = Client::open(target.path()).unwrap();
    assert!(restored.current_ts().unwrap() > e.manifest.ts);

    let (start, end) = (key(START), key(keys - 100));
    let ts = e.manifest.ts;
    let mut samples = vec![ts, ts.prev(), TimeStamp::new(1)];
    for round in &e.rounds[..3] {
        samples.extend([*round, round.prev()]);
    }
    for at in samples {
        let expected = read_all(&e.source, at, &start, &end);
        let found = read_all(&restored, at, &start, &end);
        assert_eq!(found.len(), expected.len(), "at {at}");
        assert!(found == expected, "reads at {at} differ");
    }
    // The export ts saw the third round, not the fourth.
    let at_ts = read_all(&restored, ts, &start, &end);
    assert!(!at_ts.is_empty());
    assert!(
        at_ts
            .values()
            .all(|v| !String::from_utf8_lossy(v).contains("-r3"))
    );
    assert_ne!(
        read_all(&e.source, e.rounds[3], &start, &end),
        at_ts,
        "the last round changed nothing"
    );
    // Nothing outside the range came along.
    assert_eq!(restored.get_latest(&key(START - 1)).unwrap(), None);
    assert_eq!(restored.get_latest(&end).unwrap(), None);
    // A point read of a long value and a deleted key agree too.
    for i in [START, START + 1, START + 5, START + 7] {
        assert_eq!(
            restored.snapshot(ts).get(&key(i)).unwrap(),
            e.source.snapshot(ts).get(&key(i)).unwrap()
        );
    }
}

/// Reads every entry of a file back with RocksDB (a scratch database the
/// file is ingested into), keys as stored.
fn read_back(cf: Cf, path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut entries = Vec::new();
    RocksEngine::read_sst(cf, path, |k, v| {
        entries.push((k.to_vec(), v.to_vec()));
        Ok::<_, percolate::engine::Error>(())
    })
    .unwrap();
    entries
}

#[test]
fn exported_files_read_back_and_every_key_decodes_with_the_tikv_codec() {
    let keys = 1000;
    let e = export(keys);
    let (start, end) = (key(START), key(keys - 100));
    let mut long_values = Vec::new();
    let mut defaults = Vec::new();
    for file in &e.manifest.files {
        let entries = read_back(file.cf, &e.out.path().join(&file.name));
        assert_eq!(entries.len() as u64, file.entries, "{}", file.name);
        for (stored, value) in entries {
            assert_eq!(
                stored[0], DATA_PREFIX,
                "every key behind TiKV's data prefix"
            );
            let (user, ts) = Key::split_on_ts_for(&stored[1..]).unwrap();
            let raw = Key::from_encoded_slice(user).into_raw().unwrap();
            assert!(raw >= start && raw < end, "{raw:?} outside the range");
            match file.cf {
                Cf::Write => {
                    assert!(ts <= e.manifest.ts, "a version above the export ts");
                    let write = WriteRef::parse(&value).unwrap();
                    assert!(matches!(
                        write.write_type,
                        WriteType::Put | WriteType::Delete
                    ));
                    if write.write_type == WriteType::Put && write.short_value.is_none() {
                        long_values
                            .push(Key::from_raw(&raw).append_ts(write.start_ts).into_encoded());
                    }
                }
                Cf::Default => {
                    assert!(value.len() > 255, "only long values in the default CF");
                    defaults.push(stored[1..].to_vec());
                }
                cf => panic!("unexpected CF {cf}"),
            }
        }
    }
    long_values.sort();
    assert!(!long_values.is_empty());
    assert_eq!(long_values, defaults, "each long value and nothing else");
}

/// A copy of the export directory.
fn copy_export(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.path().join(entry.file_name())).unwrap();
    }
    to
}

/// The export's write-CF file in `dir`.
/// A copy of `e`'s export and the path of the write CF's file in it.
fn copy_with_write_file(e: &Exported) -> (tempfile::TempDir, PathBuf) {
    let copy = copy_export(e.out.path());
    let file = write_file(e, copy.path());
    (copy, file)
}

fn write_file(e: &Exported, dir: &Path) -> PathBuf {
    let file = e.manifest.files.iter().find(|f| f.cf == Cf::Write).unwrap();
    dir.join(&file.name)
}

/// Imports `from` into a fresh directory, expecting `ExportCorrupted`
/// naming `bad`, and checks that nothing came in.
fn assert_refused(from: &Path, bad: &Path) {
    let target = tempfile::tempdir().unwrap();
    let err = Client::import(target.path(), from).unwrap_err();
    match &err {
        Error::ExportCorrupted { path, reason } => {
            assert_eq!(path, bad, "{reason}");
            assert!(!reason.is_empty());
        }
        other => panic!("expected ExportCorrupted, got {other:?}"),
    }
    let client = Client::open(target.path()).unwrap();
    let snap = client.cluster().regions()[0].storage().engine().snapshot();
    for cf in [Cf::Default, Cf::Write, Cf::Lock] {
        let mut cursor = snap.iter(cf, IterOptions::new()).unwrap();
        assert!(
            !cursor.seek_to_first().unwrap(),
            "something was ingested into {cf}"
        );
    }
}

/// Flips bytes in the middle of `path`.
fn flip(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 3;
    for b in &mut bytes[mid..mid + 4] {
        *b ^= 0x5a;
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_corrupt_or_truncated_file_is_refused_and_nothing_is_imported() {
    let e = export(1000);

    let (flipped, bad) = copy_with_write_file(&e);
    flip(&bad);
    assert_refused(flipped.path(), &bad);

    let (truncated, bad) = copy_with_write_file(&e);
    let len = std::fs::metadata(&bad).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&bad)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    assert_refused(truncated.path(), &bad);

    // A missing file.
    let (missing, bad) = copy_with_write_file(&e);
    std::fs::remove_file(&bad).unwrap();
    assert_refused(missing.path(), &bad);

    // The default CF's file damaged: the write CF's, which is fine, does
    // not come in alone.
    let default_bad = copy_export(e.out.path());
    let file = e
        .manifest
        .files
        .iter()
        .find(|f| f.cf == Cf::Default)
        .unwrap();
    let bad = default_bad.path().join(&file.name);
    flip(&bad);
    assert_refused(default_bad.path(), &bad);
}

#[test]
fn damage_behind_a_matching_manifest_is_still_refused() {
    let e = export(1000);
    // The file is damaged and the manifest's size and CRC-32 made to match
    // it (the manifest rewritten with a valid checksum): RocksDB's block
    // checksums or the content checksum still catch it.
    let (dir, bad) = copy_with_write_file(&e);
    flip(&bad);
    let bytes = std::fs::read(&bad).unwrap();
    let mut manifest = ExportManifest::read(dir.path()).unwrap();
    for f in &mut manifest.files {
        if f.cf == Cf::Write {
            f.crc32 = crc32fast::hash(&bytes);
            f.size = bytes.len() as u64;
        }
    }
    std::fs::write(dir.path().join(MANIFEST_FILE), manifest.to_text()).unwrap();
    assert_refused(dir.path(), &bad);

    // A manifest edited by hand (its checksum no longer matches).
    let edited = copy_export(e.out.path());
    let path = edited.path().join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let first_file = text.find("entries=").unwrap();
    let mut changed = text.clone();
    changed.replace_range(first_file..first_file + 9, "entries=9");
    assert_ne!(changed, text);
    std::fs::write(&path, changed).unwrap();
    assert_refused(edited.path(), &path);
}

#[test]
fn an_import_into_a_range_that_holds_data_is_refused() {
    let e = export(1000);
    let target = tempfile::tempdir().unwrap();
    {
        let client = Client::open(target.path()).unwrap();
        client
            .with_retry(|txn| {
                txn.put(key(START + 1), b"mine".to_vec());
                Ok(())
            })
            .unwrap();
    }
    let err = Client::import(target.path(), e.out.path()).unwrap_err();
    assert!(matches!(err, Error::ImportRangeNotEmpty { .. }), "{err:?}");
    let client = Client::open(target.path()).unwrap();
    assert_eq!(
        client.get_latest(&key(START + 1)).unwrap(),
        Some(b"mine".to_vec())
    );
    assert_eq!(client.get_latest(&key(START)).unwrap(), None);
    drop(client);
    // While a client has the directory open, the import is refused too.
    let other = tempfile::tempdir().unwrap();
    let open = Client::open(other.path()).unwrap();
    let err = Client::import(other.path(), e.out.path()).unwrap_err();
    assert!(matches!(err, Error::DirectoryLocked { .. }), "{err:?}");
    drop(open);
    Client::import(other.path(), e.out.path()).unwrap();
}

#[test]
fn an_export_into_a_non_empty_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("x"), b"x").unwrap();
    let ts = client.current_ts().unwrap();
    let err = client.export_range(b"", None, ts, out.path()).unwrap_err();
    assert!(matches!(err, Error::DirectoryNotEmpty { .. }), "{err:?}");
    // An empty range exports a manifest and no file, and imports as
    // nothing.
    let empty = tempfile::tempdir().unwrap();
    let manifest = client.export_range(b"", None, ts, empty.path()).unwrap();
    assert!(manifest.files.is_empty());
    let target = tempfile::tempdir().unwrap();
    Client::import(target.path(), empty.path()).unwrap();
    assert!(Client::open(target.path()).unwrap().current_ts().unwrap() > ts);
}

#[test]
fn an_export_below_the_gc_safe_point_is_refused() {
    use percolate::txn::client::{AutoGcConfig, ClientConfig, OpenOptions};
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions {
        client: ClientConfig {
            gc: AutoGcConfig {
                enabled: false,
                life_time: std::time::Duration::ZERO,
                ..AutoGcConfig::default()
            },
            ..ClientConfig::default()
        },
        ..OpenOptions::default()
    };
    let client = Client::open_with(dir.path(), options).unwrap();
    let tss = write_history(&client, 10, 0..2);
    let old = tss[0];
    // A round moves the safe point to about now: above `old`.
    let round = client.gc_once().unwrap();
    assert!(round.safe_point > old, "{round:?}");
    let out = dir.path().join("export");
    assert_refused_below_safe_point(&client, old, &out);
    // At or above the safe point it exports.
    let now = client.current_ts().unwrap();
    client.export_range(b"", None, now, &out).unwrap();
}

/// An export at `ts`, below the GC safe point, is refused and writes
/// nothing to `out`.
fn assert_refused_below_safe_point(client: &Client, ts: TimeStamp, out: &Path) {
    match client.export_range(b"", None, ts, out) {
        Err(Error::InvalidRequest { reason, .. }) => assert!(reason.contains("safe point")),
        other => panic!("{other:?}"),
    }
    assert!(!out.exists(), "nothing was written");
}

/// A safe point given to `Client::gc` (point deletes, now) bounds exports
/// as automatic GC's does: an export below it, which would miss the
/// versions GC deleted, is refused.
#[test]
fn an_export_below_a_manual_gc_safe_point_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path()).unwrap();
    let tss = write_history(&client, 10, 0..2);
    let old = tss[0];
    let safe_point = client.current_ts().unwrap();
    let info = client.gc(safe_point).unwrap();
    assert!(info.deleted_versions > 0, "{info:?}");
    let out = dir.path().join("export");
    assert_refused_below_safe_point(&client, old, &out);
    drop(client);
    // Kept across a restart.
    let client = Client::open(dir.path()).unwrap();
    assert_refused_below_safe_point(&client, old, &out);
    let now = client.current_ts().unwrap();
    client.export_range(b"", None, now, &out).unwrap();
}

/// A version whose GC fence names a newer version above the export ts (a
/// protected rollback overlapped its commit record, and a newer commit
/// followed): that newer version is not exported, so the fence is
/// exported as zero; copied as it was, every read of the restored database
/// above the fence would take the key for deleted.
#[test]
fn a_gc_fence_above_the_export_ts_is_not_exported() {
    use percolate::engine::{WriteBatch, WriteOptions};
    let source_dir = tempfile::tempdir().unwrap();
    let source = Client::open(source_dir.path()).unwrap();
    let commit = |v: &[u8]| {
        let mut txn = source.begin().unwrap();
        txn.put(b"k".to_vec(), v.to_vec());
        txn.commit().unwrap().commit_ts
    };
    let first = commit(b"v1");
    let ts = source.current_ts().unwrap();
    let second = commit(b"v2");
    // The record at k@first as an overlapping protected rollback leaves
    // it: fenced at the next version's commit_ts.
    let engine = source.cluster().regions()[0].storage().engine();
    let stored = Key::from_raw(b"k").append_ts(first).into_encoded();
    let snapshot = engine.snapshot();
    let record = snapshot.get(Cf::Write, &stored).unwrap().unwrap();
    let fenced = WriteRef::parse(&record)
        .unwrap()
        .to_owned()
        .set_overlapped_rollback(true, Some(second));
    let mut batch = WriteBatch::new();
    batch.put(Cf::Write, stored, fenced.to_bytes());
    engine.write(&batch, WriteOptions::default()).unwrap();
    assert_eq!(source.snapshot(ts).get(b"k").unwrap(), Some(b"v1".to_vec()));
    let out = tempfile::tempdir().unwrap();
    source.export_range(b"", None, ts, out.path()).unwrap();
    let target = tempfile::tempdir().unwrap();
    Client::import(target.path(), out.path()).unwrap();
    let restored = Client::open(target.path()).unwrap();
    assert_eq!(restored.get_latest(b"k").unwrap(), Some(b"v1".to_vec()));
    assert_eq!(
        restored.snapshot(ts).get(b"k").unwrap(),
        Some(b"v1".to_vec())
    );
}
