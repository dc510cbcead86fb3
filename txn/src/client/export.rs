//! Export of a key range's MVCC data to SST files in TiKV's layout, and
//! their import into a percolate database. `docs/EXPORT.md` explains the
//! layout and why it was chosen.
//!
//! An export directory holds one SST file per column family (`write`,
//! and `default` when some value is too long to be inlined; none for a CF
//! with nothing to export) and the manifest [`MANIFEST_FILE`]:
//!
//! * **Keys and values** are exactly as TiKV (and percolate) store them:
//!   the data prefix `z`, the memcomparable user key, the commit_ts
//!   (write CF) or start_ts (default CF) as `!ts` big-endian; write records
//!   and values byte for byte as stored. TiKV's BR writes its backup files
//!   the same way.
//! * **What is exported**: every `Put` and `Delete` version of a key in
//!   the range with `commit_ts <= ts`, and the long value of every such
//!   `Put`, from one engine snapshot taken after every lock in the range at
//!   or below `ts` was resolved (read through [`Snapshot`](super::Snapshot),
//!   which resolves locks as any reader does). `Lock` and `Rollback`
//!   records change no read and are left out, as BR leaves them out; so
//!   are locks, and versions above `ts`. Every read at a ts `<= ts` gives
//!   the same answer on the imported data as on the source.
//! * **The manifest** is a line-oriented text file (below). Each file has
//!   its entry count, its key+value byte count and BR's content checksum,
//!   crc64-xor (the XOR over entries of the CRC-64/XZ of key then value,
//!   keys as stored); its size and a CRC-32 of its bytes; the manifest
//!   ends with a CRC-64/XZ of everything above that line.
//!
//! ```text
//! percolate-export 1
//! start 616263                (hex of the raw start key)
//! end -                       (hex of the raw end key; - for unbounded)
//! ts 449384739283763200
//! file write 449384739283763200_write.sst entries=3 kv_bytes=97 crc64xor=0123456789abcdef size=1234 crc32=89abcdef
//! file default 449384739283763200_default.sst entries=1 kv_bytes=1042 crc64xor=... size=... crc32=...
//! checksum 0123456789abcdef
//! ```
//!
//! The import ([`Client::import`]) checks everything before anything is
//! ingested: the manifest's checksum, each file's size and CRC-32, then
//! every entry of every file read back through RocksDB (block checksums
//! verified): key inside the range, decodable with percolate's TiKV codec,
//! write records at or below `ts`, counts and crc64-xor as the manifest
//! says. A file that fails any of it is refused with
//! [`Error::ExportCorrupted`] and nothing is ingested.

use std::io::Read as _;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use percolate_engine::{
    Cf, DATA_PREFIX, Engine, EngineIterator, IterOptions, RocksEngine, RocksOptions, Snapshot as _,
    SstEvent, SstSink,
};
use percolate_mvcc::{Key, TimeStamp, WriteRef, WriteType};

use super::backup::{prepare_empty_dir, sync_dir};
use super::{Client, Snapshot, create_data_dir, lock_directory};
use crate::errors::io_error;
use crate::{Error, Result};

/// The manifest's file name in an export directory.
pub const MANIFEST_FILE: &str = "EXPORT_MANIFEST";

/// The manifest's first line: format name and version.
const MAGIC_LINE: &str = "percolate-export 1";

/// An export: what [`Client::export_range`] wrote and what
/// [`Client::import`] reads (see the module documentation for its text
/// form).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportManifest {
    /// The range's first key, raw (inclusive).
    pub start: Vec<u8>,
    /// The range's end, raw (exclusive; `None`: unbounded).
    pub end: Option<Vec<u8>>,
    /// The snapshot's timestamp: every version with `commit_ts <= ts` is in
    /// the export, none above.
    pub ts: TimeStamp,
    /// The SST files, write CF's first.
    pub files: Vec<ExportedFile>,
}

/// One SST file of an export.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportedFile {
    /// Its name in the export directory (no directory part).
    pub name: String,
    /// The column family its entries belong to.
    pub cf: Cf,
    /// How many entries it holds.
    pub entries: u64,
    /// Bytes of keys (as stored) and values over its entries (BR's
    /// `total_bytes`).
    pub kv_bytes: u64,
    /// BR's checksum of the contents: the XOR over entries of the
    /// CRC-64/XZ of the key as stored followed by the value.
    pub crc64xor: u64,
    /// The file's size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of the file's bytes.
    pub crc32: u32,
}

/// Entries and checksum of a file's contents, as they are added or read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    entries: u64,
    kv_bytes: u64,
    crc64xor: u64,
}

impl Tally {
    /// Counts an entry whose stored key is `stored_key`.
    fn add(&mut self, stored_key: &[u8], value: &[u8]) {
        self.entries += 1;
        self.kv_bytes += (stored_key.len() + value.len()) as u64;
        let crc = crc64::update(crc64::update(!0, stored_key), value);
        self.crc64xor ^= !crc;
    }

    /// Counts an entry whose key, without the data prefix, is `key`.
    fn add_data(&mut self, key: &[u8], value: &[u8]) {
        self.entries += 1;
        self.kv_bytes += (1 + key.len() + value.len()) as u64;
        let crc = crc64::update(crc64::update(crc64::update(!0, &[DATA_PREFIX]), key), value);
        self.crc64xor ^= !crc;
    }
}

impl Client<RocksEngine> {
    /// Exports the MVCC data of the raw key range `[start, end)` (`None`:
    /// unbounded) as of `ts` into `out`, a missing or empty directory
    /// ([`Error::DirectoryNotEmpty`] otherwise): SST files in TiKV's layout
    /// and a manifest (see the module documentation of `export`).
    ///
    /// Locks in the range at or below `ts` are resolved first, as a read
    /// at `ts` resolves them (a live transaction's lock is waited for, up
    /// to [`ClientConfig::resolve_timeout`](super::ClientConfig)); the data
    /// is then read from one engine snapshot. Transactions go on meanwhile;
    /// none of them can commit at or below `ts` once the read has begun.
    /// A `ts` far ahead of the oracle is refused as any read at it is.
    pub fn export_range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        ts: TimeStamp,
        out: impl AsRef<Path>,
    ) -> Result<ExportManifest> {
        let out = out.as_ref();
        if end.is_some_and(|end| end <= start) {
            return Err(Error::InvalidRequest {
                reason: "an export's end key must be above its start key",
                key: None,
            });
        }
        // An import raises the target's ts ceiling to it.
        if crate::oracle::beyond_range(ts) {
            return Err(Error::InvalidRequest {
                reason: "an export's ts must be within the range of the timestamp oracle",
                key: None,
            });
        }
        // Registered as a live snapshot for the whole export, so that no
        // GC round passes `ts` meanwhile; one already past it, or about to
        // set a safe point past it (announced before it looked at the
        // registrations), may have dropped versions the export should hold.
        let reader = self.snapshot(ts);
        let engine = self.cluster().regions()[0].storage().engine();
        let safe_point = engine
            .gc_safe_point()
            .max(self.gc_safe_point_announced().into_inner());
        if ts.into_inner() < safe_point {
            return Err(Error::InvalidRequest {
                reason: "an export's ts must not be below the GC safe point",
                key: None,
            });
        }
        prepare_empty_dir(out)?;
        resolve_range(&reader, start, end)?;
        let files = write_files(&engine.snapshot(), &encoded_bounds(start, end), ts, out)?;
        let manifest = ExportManifest {
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
            ts,
            files,
        };
        manifest.write(out)?;
        Ok(manifest)
    }

    /// Imports an export directory `from` ([`Client::export_range`]'s, or
    /// SST files in the same layout with such a manifest) into the data
    /// directory `dir`, created if missing, and returns its manifest.
    ///
    /// The directory must not be open (the import takes its lock:
    /// [`Error::DirectoryLocked`] otherwise), and its database must hold
    /// nothing in the export's range ([`Error::ImportRangeNotEmpty`]).
    /// Everything is checked before anything is ingested (see the module
    /// documentation of `export`): a damaged, truncated or mismatched file
    /// is [`Error::ExportCorrupted`] and the database is left as it was.
    /// The files are copied in, left as they are. A client opened on `dir`
    /// afterwards starts its oracle above the export's `ts`, so every read
    /// at or below it sees exactly the exported data.
    pub fn import(dir: impl AsRef<Path>, from: impl AsRef<Path>) -> Result<ExportManifest> {
        let (dir, from) = (dir.as_ref(), from.as_ref());
        let manifest = ExportManifest::read(from)?;
        // The import raises the target's ts ceiling to it: one beyond the
        // oracle's range would leave the target unopenable.
        if crate::oracle::beyond_range(manifest.ts) {
            return Err(Error::ExportCorrupted {
                path: from.join(MANIFEST_FILE),
                reason: format!(
                    "ts {} is beyond the range of the timestamp oracle",
                    manifest.ts
                ),
            });
        }
        for file in &manifest.files {
            file.check_bytes(&from.join(&file.name))?;
        }
        create_data_dir(dir)?;
        let _lock = lock_directory(dir)?;
        let engine = RocksEngine::open_with(dir.join("db"), &RocksOptions::default())?;
        manifest.check_target_empty(&engine)?;
        let paths: Vec<(Cf, PathBuf)> = manifest
            .files
            .iter()
            .map(|f| (f.cf, from.join(&f.name)))
            .collect();
        let mut checker = Checker::new(&manifest, &paths);
        engine.ingest_ssts(&paths, manifest.ts.into_inner(), |event| {
            checker.check(event)
        })?;
        Ok(manifest)
    }
}

/// Writes the export's SST files of the data in `bounds` as of `ts` (the
/// write CF's, then the values too long to live in it), leaving out a file
/// with no entry.
fn write_files<S: percolate_engine::Snapshot>(
    snap: &S,
    bounds: &IterOptions,
    ts: TimeStamp,
    out: &Path,
) -> Result<Vec<ExportedFile>> {
    let prefix = ts.into_inner();
    let write_name = format!("{prefix}_write.sst");
    let ((long_values, write_tally), _) =
        RocksEngine::write_sst(Cf::Write, &out.join(&write_name), |sink| {
            export_writes(snap, bounds, ts, sink)
        })?;
    let default_name = format!("{prefix}_default.sst");
    let (default_tally, _) =
        RocksEngine::write_sst(Cf::Default, &out.join(&default_name), |sink| {
            export_values(snap, long_values, sink)
        })?;
    let mut files = Vec::new();
    for (name, cf, tally) in [
        (write_name, Cf::Write, write_tally),
        (default_name, Cf::Default, default_tally),
    ] {
        if tally.entries > 0 {
            let (size, crc32) = file_crc32(&out.join(&name))?;
            files.push(ExportedFile {
                name,
                cf,
                entries: tally.entries,
                kv_bytes: tally.kv_bytes,
                crc64xor: tally.crc64xor,
                size,
                crc32,
            });
        }
    }
    Ok(files)
}

/// The encoded bounds of the raw range `[start, end)`: every version of
/// every key in the range (write CF: key + commit_ts; default CF: key +
/// start_ts) sorts inside them, since no encoded key is a prefix of
/// another.
fn encoded_bounds(start: &[u8], end: Option<&[u8]>) -> IterOptions {
    let options = IterOptions::new()
        .fill_cache(false)
        .lower_bound(Key::from_raw(start).into_encoded());
    match end {
        Some(end) => options.upper_bound(Key::from_raw(end).into_encoded()),
        None => options,
    }
}

/// Writes the `Put` and `Delete` records of `bounds` with `commit_ts <=
/// ts` into `sink`; returns the default-CF keys of the long values they
/// point to (sorted) and the tally.
fn export_writes<S: percolate_engine::Snapshot>(
    snap: &S,
    bounds: &IterOptions,
    ts: TimeStamp,
    sink: &mut SstSink<'_>,
) -> Result<(Vec<Vec<u8>>, Tally)> {
    let mut cursor = snap.iter(Cf::Write, bounds.clone())?;
    let mut long_values = Vec::new();
    let mut tally = Tally::default();
    let mut valid = cursor.seek_to_first()?;
    while valid {
        let (key, value) = (cursor.key(), cursor.value());
        let corrupt = |e| percolate_mvcc::Error::corruption(Cf::Write, key, e);
        let (user_key, commit_ts) = Key::split_on_ts_for(key).map_err(corrupt)?;
        if commit_ts <= ts {
            let write = WriteRef::parse(value).map_err(corrupt)?;
            if matches!(write.write_type, WriteType::Put | WriteType::Delete) {
                if write.write_type == WriteType::Put && write.short_value.is_none() {
                    let default_key = Key::from_encoded_slice(user_key).append_ts(write.start_ts);
                    long_values.push(default_key.into_encoded());
                }
                if write.gc_fence.is_some_and(|fence| fence > ts) {
                    // Its fence names the next data version's commit_ts,
                    // above `ts` and so not exported: in the export none
                    // is newer (a fence of zero), or every read above the
                    // fence would take the version for one GC removed.
                    let mut unfenced = write.to_owned();
                    unfenced.gc_fence = Some(TimeStamp::zero());
                    let bytes = unfenced.to_bytes();
                    sink.put(key, &bytes)?;
                    tally.add_data(key, &bytes);
                } else {
                    sink.put(key, value)?;
                    tally.add_data(key, value);
                }
            }
        }
        valid = cursor.next()?;
    }
    long_values.sort_unstable();
    long_values.dedup();
    Ok((long_values, tally))
}

/// Writes the long values at `keys` (default CF, sorted) into `sink`.
fn export_values<S: percolate_engine::Snapshot>(
    snap: &S,
    keys: Vec<Vec<u8>>,
    sink: &mut SstSink<'_>,
) -> Result<Tally> {
    let mut tally = Tally::default();
    for key in keys {
        let Some(value) = snap.get(Cf::Default, &key)? else {
            let (user_key, start_ts) = Key::split_on_ts_for(&key)
                .map_err(|e| percolate_mvcc::Error::corruption(Cf::Default, &key, e))?;
            return Err(percolate_mvcc::Error::DefaultNotFound {
                key: Key::from_encoded_slice(user_key),
                start_ts,
            }
            .into());
        };
        sink.put(&key, &value)?;
        tally.add_data(&key, &value);
    }
    Ok(tally)
}

/// The size and CRC-32 of the file at `path`.
fn file_crc32(path: &Path) -> Result<(u64, u32)> {
    let io = io_error("read", path);
    let mut file = std::fs::File::open(path).map_err(&io)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0; 1 << 16];
    let mut size = 0;
    loop {
        let n = file.read(&mut buf).map_err(&io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hasher.finalize()))
}

impl ExportedFile {
    /// Checks the file's size and CRC-32 against the manifest.
    fn check_bytes(&self, path: &Path) -> Result<()> {
        let corrupted = |reason: String| Error::ExportCorrupted {
            path: path.to_path_buf(),
            reason,
        };
        let size = std::fs::metadata(path)
            .map_err(|e| corrupted(format!("cannot read it: {e}")))?
            .len();
        if size != self.size {
            return Err(corrupted(format!(
                "{size} bytes, the manifest says {} (truncated or overwritten)",
                self.size
            )));
        }
        let (size, crc32) = file_crc32(path)?;
        if size != self.size || crc32 != self.crc32 {
            return Err(corrupted(format!(
                "CRC-32 {crc32:08x}, the manifest says {:08x}",
                self.crc32
            )));
        }
        Ok(())
    }
}

/// Checks every entry [`RocksEngine::ingest_ssts`] reads against the
/// manifest.
struct Checker<'a> {
    manifest: &'a ExportManifest,
    paths: &'a [(Cf, PathBuf)],
    bounds: IterOptions,
    tally: Tally,
}

impl<'a> Checker<'a> {
    fn new(manifest: &'a ExportManifest, paths: &'a [(Cf, PathBuf)]) -> Self {
        Checker {
            manifest,
            paths,
            bounds: encoded_bounds(&manifest.start, manifest.end.as_deref()),
            tally: Tally::default(),
        }
    }

    fn check(&mut self, event: SstEvent<'_>) -> Result<()> {
        match event {
            SstEvent::Entry { file, key, value } => {
                self.tally.add(key, value);
                self.check_entry(file, key, value)
                    .map_err(|reason| self.corrupted(file, reason))
            }
            SstEvent::Unreadable { file, error } => Err(self.corrupted(
                file,
                format!("RocksDB cannot read it as an SST file: {error}"),
            )),
            SstEvent::End { file, entries } => {
                let tally = std::mem::take(&mut self.tally);
                let expected = &self.manifest.files[file];
                let found = (entries, tally.entries, tally.kv_bytes, tally.crc64xor);
                let wanted = (
                    expected.entries,
                    expected.entries,
                    expected.kv_bytes,
                    expected.crc64xor,
                );
                if found != wanted {
                    return Err(self.corrupted(
                        file,
                        format!(
                            "{entries} entries, {} key+value bytes, crc64xor {:016x}; \
                             the manifest says {}, {}, {:016x}",
                            tally.kv_bytes,
                            tally.crc64xor,
                            expected.entries,
                            expected.kv_bytes,
                            expected.crc64xor
                        ),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Whether one entry is a record of the export: inside the range,
    /// decodable, and (write CF) a Put or Delete at or below the ts.
    fn check_entry(
        &self,
        file: usize,
        stored: &[u8],
        value: &[u8],
    ) -> std::result::Result<(), String> {
        let key = stored
            .strip_prefix(&[DATA_PREFIX])
            .ok_or_else(|| format!("key {} lacks the data prefix", hex(stored)))?;
        if !self.bounds.contains(key) {
            return Err(format!("key {} is outside the export's range", hex(stored)));
        }
        let (user_key, ts) =
            Key::split_on_ts_for(key).map_err(|e| format!("key {}: {e}", hex(stored)))?;
        Key::from_encoded_slice(user_key)
            .into_raw()
            .map_err(|e| format!("key {}: {e}", hex(stored)))?;
        if self.paths[file].0 == Cf::Write {
            if ts > self.manifest.ts {
                return Err(format!(
                    "record at commit_ts {ts}, above the export's ts {}",
                    self.manifest.ts
                ));
            }
            let write = WriteRef::parse(value)
                .map_err(|e| format!("write record at key {}: {e}", hex(stored)))?;
            if !matches!(write.write_type, WriteType::Put | WriteType::Delete) {
                return Err(format!(
                    "{:?} record at key {}: an export holds puts and deletes only",
                    write.write_type,
                    hex(stored)
                ));
            }
        }
        Ok(())
    }

    fn corrupted(&self, file: usize, reason: String) -> Error {
        Error::ExportCorrupted {
            path: self.paths[file].1.clone(),
            reason,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ExportManifest {
    /// The manifest's text (see the module documentation).
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "{MAGIC_LINE}\nstart {}\nend {}\nts {}\n",
            hex(&self.start),
            self.end.as_deref().map_or_else(|| "-".to_string(), hex),
            self.ts.into_inner()
        );
        for f in &self.files {
            text.push_str(&format!(
                "file {} {} entries={} kv_bytes={} crc64xor={:016x} size={} crc32={:08x}\n",
                f.cf.name(),
                f.name,
                f.entries,
                f.kv_bytes,
                f.crc64xor,
                f.size,
                f.crc32
            ));
        }
        let checksum = !crc64::update(!0, text.as_bytes());
        text.push_str(&format!("checksum {checksum:016x}\n"));
        text
    }

    /// Parses a manifest's text; the error is what is wrong with it.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let body_len = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or("not a manifest: fewer than two lines")?;
        let (body, last) = text.split_at(body_len);
        let stored = last
            .strip_prefix("checksum ")
            .map(|s| s.trim_end_matches('\n'))
            .ok_or("the last line is not the checksum")?;
        let actual = !crc64::update(!0, body.as_bytes());
        if u64::from_str_radix(stored, 16).ok() != Some(actual) {
            return Err(format!(
                "checksum {stored}, computed {actual:016x} (the manifest was changed)"
            ));
        }
        let mut lines = body.lines();
        if lines.next() != Some(MAGIC_LINE) {
            return Err(format!("the first line is not {MAGIC_LINE:?}"));
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .ok_or(format!("missing line {name:?}"))
        };
        let start = unhex(field("start")?)?;
        let end = match field("end")? {
            "-" => None,
            end => Some(unhex(end)?),
        };
        let ts = field("ts")?
            .parse::<u64>()
            .map_err(|e| format!("bad ts: {e}"))?;
        let files = lines
            .map(parse_file_line)
            .collect::<std::result::Result<_, _>>()?;
        Ok(ExportManifest {
            start,
            end,
            ts: TimeStamp::new(ts),
            files,
        })
    }

    /// Reads and checks the manifest of the export directory `dir`.
    pub fn read(dir: impl AsRef<Path>) -> Result<Self> {
        let path = dir.as_ref().join(MANIFEST_FILE);
        let corrupted = |reason: String| Error::ExportCorrupted {
            path: path.clone(),
            reason,
        };
        let bytes = std::fs::read(&path).map_err(|e| corrupted(format!("cannot read it: {e}")))?;
        let text = String::from_utf8(bytes).map_err(|_| corrupted("not UTF-8 text".into()))?;
        Self::parse(&text).map_err(corrupted)
    }

    /// Writes the manifest into `dir` durably: a temporary file, synced,
    /// renamed over the name, the directory synced.
    fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
        let io = |path: &Path| io_error("write manifest", path);
        {
            use std::io::Write as _;
            let mut file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            file.write_all(self.to_text().as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        sync_dir(dir)
    }

    /// Fails with [`Error::ImportRangeNotEmpty`] when `engine` holds a
    /// lock, write record or value in the range.
    fn check_target_empty(&self, engine: &RocksEngine) -> Result<()> {
        let snap = engine.snapshot();
        let bounds = encoded_bounds(&self.start, self.end.as_deref());
        for cf in [Cf::Lock, Cf::Write, Cf::Default] {
            if snap.iter(cf, bounds.clone())?.seek_to_first()? {
                return Err(Error::ImportRangeNotEmpty {
                    start: self.start.clone(),
                    end: self.end.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Parses a `file CF NAME k=v...` line.
fn parse_file_line(line: &str) -> std::result::Result<ExportedFile, String> {
    let bad = || format!("bad file line {line:?}");
    let mut words = line.split(' ');
    if words.next() != Some("file") {
        return Err(bad());
    }
    let cf = match words.next() {
        Some("write") => Cf::Write,
        Some("default") => Cf::Default,
        _ => return Err(format!("{}: only write and default CF files", bad())),
    };
    let name = words.next().ok_or_else(bad)?.to_string();
    // A plain name inside the export directory, nothing that leads out.
    if name.is_empty() || name.contains('/') || name.contains('\\') || name.starts_with('.') {
        return Err(format!("{}: file name {name:?}", bad()));
    }
    let mut value = |key: &str| {
        words
            .next()
            .and_then(|w| w.strip_prefix(key))
            .and_then(|w| w.strip_prefix('='))
            .ok_or_else(bad)
    };
    let dec = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let entries = dec(value("entries")?)?;
    let kv_bytes = dec(value("kv_bytes")?)?;
    let crc64xor = u64::from_str_radix(value("crc64xor")?, 16).map_err(|_| bad())?;
    let size = dec(value("size")?)?;
    let crc32 = u32::from_str_radix(value("crc32")?, 16).map_err(|_| bad())?;
    if words.next().is_some() {
        return Err(bad());
    }
    Ok(ExportedFile {
        name,
        cf,
        entries,
        kv_bytes,
        crc64xor,
        size,
        crc32,
    })
}

fn unhex(s: &str) -> std::result::Result<Vec<u8>, String> {
    if s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("bad hex {s:?}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// CRC-64/XZ (ECMA-182 polynomial, reflected, initial value and final XOR
/// all ones): Go's `crc64.ECMA` checksum and the `crc64fast` crate's, the
/// CRC that TiKV's BR and TiDB's `ADMIN CHECKSUM` XOR over key-value
/// pairs.
mod crc64 {
    /// The reflected ECMA-182 polynomial.
    const POLY: u64 = 0xC96C_5795_D787_0F42;

    /// The table of one byte's contribution.
    const TABLE: [u64; 256] = {
        let mut table = [0u64; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u64;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };

    /// Feeds `bytes` to the running register `crc` (start from `!0`; the
    /// checksum is the final register inverted).
    pub(super) fn update(mut crc: u64, bytes: &[u8]) -> u64 {
        for &b in bytes {
            crc = TABLE[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
        crc
    }

    #[cfg(test)]
    mod tests {
        /// The standard check value of CRC-64/XZ.
        #[test]
        fn check_value() {
            assert_eq!(!super::update(!0, b"123456789"), 0x995D_C9BB_DF19_39FA);
        }
    }
}

/// Resolves every lock in `[start, end)` at or below the read ts of
/// `reader`: a key-only read of the range meets each of them and resolves
/// it (and raises the regions' `max_ts` to the ts, so nothing commits at
/// or below it afterwards).
fn resolve_range<E: Engine>(reader: &Snapshot<E>, start: &[u8], end: Option<&[u8]>) -> Result<()> {
    let bounds = (
        Bound::Included(start),
        end.map_or(Bound::Unbounded, Bound::Excluded),
    );
    for key in reader.keys::<&[u8]>(bounds) {
        key?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ExportManifest {
        ExportManifest {
            start: b"a".to_vec(),
            end: None,
            ts: TimeStamp::new(42),
            files: vec![ExportedFile {
                name: "42_write.sst".into(),
                cf: Cf::Write,
                entries: 3,
                kv_bytes: 60,
                crc64xor: 0xdead_beef,
                size: 1000,
                crc32: 7,
            }],
        }
    }

    #[test]
    fn manifest_round_trips() {
        let m = sample();
        assert_eq!(ExportManifest::parse(&m.to_text()), Ok(m));
    }

    #[test]
    fn a_changed_manifest_is_refused() {
        let text = sample().to_text().replace("entries=3", "entries=4");
        let err = ExportManifest::parse(&text).unwrap_err();
        assert!(err.contains("checksum"), "{err}");
        let truncated = &sample().to_text()[..20];
        assert!(ExportManifest::parse(truncated).is_err());
    }

    #[test]
    fn a_file_name_that_leads_out_is_refused() {
        let line = "file write ../x.sst entries=1 kv_bytes=1 crc64xor=0 size=1 crc32=0";
        assert!(parse_file_line(line).is_err());
    }
}
