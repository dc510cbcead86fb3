//! `percolate`: a command-line tool over a data directory.
//!
//! ```text
//! percolate --dir DATA put alice 100        # one transaction per command
//! percolate --dir DATA get alice
//! percolate sim --seeds 100000              # the simulator (`--features sim`)
//! percolate --dir DATA scan --start a --end z --limit 10 [--reverse]
//! percolate --dir DATA delete alice
//! percolate --dir DATA mvcc alice           # every lock, write and value of the key
//! percolate --dir DATA raw put k v          # the raw KV API (no transactions)
//! percolate --dir DATA --hex get 616c696365 # keys and values as hex
//! percolate --dir DATA gc --safe-point-age 600  # drop versions older than 10 minutes
//! percolate --dir DATA repair                # remove records that do not decode
//! percolate --dir DATA --read-only scan      # beside the process that holds DATA
//! percolate --dir DATA backup BACKUP         # online backup; `--dir BACKUP` opens it
//! percolate --dir DATA export --start a --end m --out EXPORT  # SST files in TiKV's layout
//! percolate --dir OTHER import --from EXPORT # ingest an export (checked first)
//! echo -n big | percolate --dir DATA put k -  # the value from stdin
//! ```
//!
//! **Keys and values.** Arguments are taken literally, as UTF-8 text (or
//! as hex with `--hex`); a value of `-` is read from stdin. Output is
//! escaped with Rust's `escape_ascii`: printable ASCII is printed as is,
//! and TAB, newline, backslash, quotes, control and non-ASCII bytes as
//! `\t`, `\n`, `\\`, `\'`, `\"` and `\xNN`, so a key can never forge
//! a line or reach the terminal as an escape sequence; `--hex` prints hex.
//!
//! **Directories.** Only commands that write (`put`, `delete`, `raw put`,
//! `raw delete`) create a missing directory; every other command
//! on a missing directory is an error and creates nothing.
//!
//! Transactional commands go through [`percolate::Client`], each in its own
//! transaction; `mvcc` and `raw` talk to the storage of the region holding
//! the key. A failure prints one line, `error: ...`, on stderr and exits
//! with status 1 (a malformed command line is clap's usage error, status 2).

use std::io::Write;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

// `percolate sim` (the `sim` feature): the simulator's seeds.
#[cfg(feature = "sim")]
#[path = "../sim_command.rs"]
mod sim;

use clap::{Args, Parser, Subcommand};
use percolate::{Client, CommitInfo, OpenOptions};
use percolate_engine::WalRecovery;
use percolate_mvcc::{Key, TimeStamp};
use percolate_txn::client::{ExportManifest, MAX_BATCH};
use percolate_txn::commands::RawScan;
use percolate_txn::storage::Storage;

/// Transactions, MVCC records and raw KV of a percolate data directory.
#[derive(Debug, Parser)]
#[command(name = "percolate", version)]
struct Cli {
    /// The data directory (RocksDB in DIR/db, the oracle state in
    /// DIR/TIMESTAMP); created if missing by the commands that write, an
    /// error for the others.
    #[arg(long, global = true, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keys and values are given and printed as hex instead of UTF-8
    /// (printed escaped: see `--help`).
    #[arg(long, global = true)]
    hex: bool,
    /// Open DIR for reading only: no lock taken, nothing written, so it
    /// works beside the process that holds DIR or on read-only media.
    /// Writes fail; a lock met is reported, not resolved.
    #[arg(long, global = true)]
    read_only: bool,
    /// Open a database whose write-ahead log is damaged with what the log
    /// holds before the damage (the records after it are dropped; the log
    /// files are first kept in DIR/db.wal-MS/ and the damage reported).
    /// Without it such a database does not open.
    #[arg(long, global = true)]
    salvage_wal: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sets KEY to VALUE in one transaction.
    Put {
        /// The key.
        key: String,
        /// The value; `-` reads it from stdin.
        value: String,
    },
    /// Prints the latest committed value of KEY.
    Get {
        /// The key.
        key: String,
    },
    /// Deletes KEY in one transaction.
    Delete {
        /// The key.
        key: String,
    },
    /// Prints the pairs of a key range at one snapshot, one `KEY<TAB>VALUE`
    /// per line.
    Scan(ScanArgs),
    /// Prints every lock, write record and long value of KEY, decoded.
    Mvcc {
        /// The key.
        key: String,
    },
    /// The raw KV API: no transactions, no versions.
    #[command(subcommand)]
    Raw(RawCommand),
    /// Removes the versions no read newer than a safe point can see: the
    /// safe point is AGE seconds before the oracle's latest timestamp.
    /// Locks of transactions started before it are resolved first.
    Gc {
        /// How far back the safe point is; transactions older than this
        /// may find the versions they read gone.
        #[arg(long, value_name = "SECONDS", default_value_t = 600)]
        safe_point_age: u64,
    },
    /// Removes the records that do not decode (a lock, write record or
    /// long value whose bytes are not in TiKV's format), which fail every
    /// read and GC that reaches them, and prints each one removed, as
    /// stored, in hex: `CF<TAB>KEY<TAB>VALUE<TAB>REASON`. Records that
    /// decode are never touched.
    Repair,
    /// Prints the metrics of the database in Prometheus' text format:
    /// RocksDB's sizes (live table files, memtables, block cache, pending
    /// compaction) and its counters since this open, after one read of
    /// every region, and percolate's counters of this process (the
    /// commands the open and that read ran; a long-running embedder
    /// serves `Client::metrics` itself).
    Stats,
    /// Writes a backup of the database into BACKUP (a missing or empty
    /// directory): a consistent copy taken online (hard links to the
    /// database's files where possible); `--dir BACKUP` opens it as a
    /// database of its own, which is the restore.
    Backup {
        /// The backup directory.
        backup: PathBuf,
    },
    /// Exports the MVCC data of a key range as of one timestamp into SST
    /// files in TiKV's layout (write and default CFs) and a manifest with
    /// their checksums; locks at or below the timestamp are resolved
    /// first.
    Export(ExportArgs),
    /// Ingests an export into the database (created if missing), after
    /// checking the manifest and every file: a damaged file is refused and
    /// nothing is ingested. The range must hold no data yet.
    Import {
        /// The export directory.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
    },
    /// Runs seeds of the deterministic simulator on several threads (no
    /// `--dir`): every failing seed is printed, the first one shrunk to a
    /// short trace, with the command that replays it.
    #[cfg(feature = "sim")]
    Sim(sim::SimArgs),
}

#[derive(Debug, Args)]
struct ExportArgs {
    /// First key (inclusive; default: the first key).
    #[arg(long)]
    start: Option<String>,
    /// Key after the range (exclusive; default: unbounded).
    #[arg(long)]
    end: Option<String>,
    /// The snapshot's timestamp (default: a fresh one from the oracle).
    #[arg(long)]
    ts: Option<u64>,
    /// The export directory (missing or empty).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Debug, Subcommand)]
enum RawCommand {
    /// Prints the value of a raw key.
    Get {
        /// The key.
        key: String,
    },
    /// Sets a raw key.
    Put {
        /// The key.
        key: String,
        /// The value; `-` reads it from stdin.
        value: String,
    },
    /// Deletes a raw key.
    Delete {
        /// The key.
        key: String,
    },
    /// Prints raw pairs of a key range, one `KEY<TAB>VALUE` per line.
    Scan(ScanArgs),
}

#[derive(Debug, Args)]
struct ScanArgs {
    /// First key (inclusive; default: the first key).
    #[arg(long)]
    start: Option<String>,
    /// Key after the range (exclusive; default: unbounded).
    #[arg(long)]
    end: Option<String>,
    /// Most pairs printed (0: all).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    /// From the end of the range down.
    #[arg(long)]
    reverse: bool,
}

/// A failure to report: one line on stderr.
type Failure = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    match run(cli, &mut out).and_then(|()| Ok(out.flush()?)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`percolate scan | head`).
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", one_line(&*e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its sources, joined on one line.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        source = s.source();
    }
    line.replace('\n', " ")
}

/// How the data directory is opened.
#[derive(Clone, Copy, Debug)]
struct Opening {
    read_only: bool,
    salvage_wal: bool,
}

impl Opening {
    /// Opens `dir`; only a command that `writes` may create it.
    fn open(self, dir: &Path, writes: bool) -> Result<Client, Failure> {
        if !writes && !dir.exists() {
            return Err(format!(
                "no data directory at {} (only commands that write create one)",
                dir.display()
            )
            .into());
        }
        if self.read_only {
            if self.salvage_wal {
                return Err("--salvage-wal writes; it cannot go with --read-only".into());
            }
            return Ok(Client::open_read_only(dir)?);
        }
        let mut options = OpenOptions::default();
        if self.salvage_wal {
            options.engine.wal_recovery = WalRecovery::SalvagePrefix;
        }
        let client = Client::open_with(dir, options)?;
        if let Some(report) = client.salvage_report() {
            eprintln!(
                "warning: the write-ahead log was damaged ({}); recovered through sequence {}, \
                 dropped what followed; the log as it was is kept in {}",
                report.damage.replace('\n', " "),
                report.last_sequence,
                report.logs_kept.display()
            );
        }
        Ok(client)
    }
}

fn run(cli: Cli, out: &mut impl Write) -> Result<(), Failure> {
    let codec = Codec { hex: cli.hex };
    #[cfg(feature = "sim")]
    let cli = match cli.command {
        Command::Sim(args) => return sim::run(args, out),
        command => Cli { command, ..cli },
    };
    let Some(dir) = cli.dir else {
        return Err("--dir DIR is required".into());
    };
    let opening = Opening {
        read_only: cli.read_only,
        salvage_wal: cli.salvage_wal,
    };
    let command = match cli.command {
        Command::Gc { safe_point_age } => {
            return gc(&opening.open(&dir, false)?, safe_point_age, out);
        }
        Command::Repair => return repair(&opening.open(&dir, false)?, out),
        Command::Stats => return stats(&opening.open(&dir, false)?, out),
        Command::Backup { backup } => {
            return backup_to(&opening.open(&dir, false)?, &backup, out);
        }
        Command::Export(args) => return export(&opening.open(&dir, false)?, args, codec, out),
        Command::Import { from } => {
            if cli.read_only {
                return Err("import writes; it cannot go with --read-only".into());
            }
            return import(&dir, &from, out);
        }
        command => command,
    };
    // Decode every argument before opening the directory: a typo costs
    // nothing.
    let command = Decoded::new(command, codec)?;
    let client = opening.open(&dir, command.writes())?;
    match command {
        Decoded::Put(key, value) => {
            let mut txn = client.begin()?;
            txn.put(key, value);
            print_commit(out, txn.commit()?)?;
        }
        Decoded::Get(key) => print_value(out, codec, client.begin()?.get(&key)?)?,
        Decoded::Delete(key) => {
            let mut txn = client.begin()?;
            txn.delete(key);
            print_commit(out, txn.commit()?)?;
        }
        Decoded::Scan(range) => {
            let txn = client.begin()?;
            let bounds = (
                Bound::Included(range.start.as_slice()),
                range
                    .end
                    .as_deref()
                    .map_or(Bound::Unbounded, Bound::Excluded),
            );
            let take = if range.limit == 0 {
                usize::MAX
            } else {
                range.limit
            };
            let pairs = if range.reverse {
                txn.scan_reverse::<&[u8]>(bounds)
                    .batch_size(take.min(MAX_BATCH))
                    .take(take)
                    .collect::<std::result::Result<Vec<_>, _>>()?
            } else {
                txn.scan::<&[u8]>(bounds)
                    .batch_size(take.min(MAX_BATCH))
                    .take(take)
                    .collect::<std::result::Result<Vec<_>, _>>()?
            };
            print_pairs(out, codec, &pairs)?;
        }
        Decoded::Mvcc(key) => {
            let info = storage(&client, &key).mvcc_by_key(Key::from_raw(&key))?;
            write!(out, "{info}")?;
        }
        Decoded::RawGet(key) => print_value(out, codec, storage(&client, &key).raw_get(key)?)?,
        Decoded::RawPut(key, value) => {
            storage(&client, &key).raw_put(key, value)?;
            writeln!(out, "OK")?;
        }
        Decoded::RawDelete(key) => {
            storage(&client, &key).raw_delete(key)?;
            writeln!(out, "OK")?;
        }
        Decoded::RawScan(range) => print_pairs(out, codec, &raw_scan(&client, &range)?)?,
    }
    Ok(())
}

/// A raw key and its value.
type KvPair = (Vec<u8>, Vec<u8>);

/// A raw scan across regions: each region scans its own part of the range
/// through its command API (as the client's transactional scan does), in
/// key order, or in reverse, until the limit is reached.
fn raw_scan(client: &Client, range: &Range) -> Result<Vec<KvPair>, Failure> {
    let mut regions: Vec<_> = client
        .cluster()
        .regions_in(&range.start, range.end.as_deref())
        .iter()
        .collect();
    if range.reverse {
        regions.reverse();
    }
    let mut pairs = Vec::new();
    for region in regions {
        let left = match range.limit {
            0 => 0,
            limit if pairs.len() >= limit => break,
            limit => limit - pairs.len(),
        };
        // The part of the range inside the region.
        let start = range.start.as_slice().max(region.start_key()).to_vec();
        let end = match (range.end.as_deref(), region.end_key()) {
            (Some(a), Some(b)) => Some(a.min(b).to_vec()),
            (a, b) => a.or(b).map(<[u8]>::to_vec),
        };
        pairs.extend(region.storage().raw_scan(RawScan {
            start: Some(start),
            end,
            limit: left,
            key_only: false,
            reverse: range.reverse,
        })?);
    }
    Ok(pairs)
}

/// `percolate gc`: collects at a safe point `age_s` seconds back (at
/// least one tick below the oracle's latest timestamp).
fn gc(client: &Client, age_s: u64, out: &mut impl Write) -> Result<(), Failure> {
    let latest = client.oracle().get_ts()?;
    let back = TimeStamp::compose(
        latest.physical().saturating_sub(age_s.saturating_mul(1000)),
        0,
    );
    let safe_point = back.min(latest.prev());
    let info = client.gc(safe_point)?;
    writeln!(
        out,
        "gc at safe point {safe_point}: {} versions looked at, {} deleted, {} long values deleted",
        info.found_versions, info.deleted_versions, info.deleted_values
    )?;
    Ok(())
}

/// `percolate repair`: removes the records that do not decode and prints
/// each, in hex.
fn repair(client: &Client, out: &mut impl Write) -> Result<(), Failure> {
    let removed = client.repair()?;
    for record in &removed {
        writeln!(
            out,
            "{}\t{}\t{}\t{}",
            record.cf.name(),
            hex::encode(&record.key),
            hex::encode(&record.value),
            record.reason
        )?;
    }
    writeln!(out, "{} damaged records removed", removed.len())?;
    Ok(())
}

/// `percolate backup`: an online backup into `backup`.
/// `percolate stats`: the metrics, after a key-only scan of one key in
/// each region, so that the block cache has been looked up.
fn stats(client: &Client, out: &mut impl Write) -> Result<(), Failure> {
    let snapshot = client.snapshot_latest()?;
    for region in client.cluster().regions() {
        let start = region.start_key().to_vec();
        for pair in snapshot.keys(start..).take(1) {
            pair?;
        }
    }
    out.write_all(client.metrics().to_prometheus().as_bytes())?;
    Ok(())
}

fn backup_to(client: &Client, backup: &Path, out: &mut impl Write) -> Result<(), Failure> {
    let started = std::time::Instant::now();
    let info = client.backup(backup)?;
    writeln!(
        out,
        "backup in {}: {} files, {} bytes, at ts {} ({:.3} s)",
        backup.display(),
        info.files,
        info.bytes,
        info.ts,
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}

/// `percolate export`: a key range as SST files.
fn export(
    client: &Client,
    args: ExportArgs,
    codec: Codec,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let start = match &args.start {
        Some(s) => codec.decode(s)?,
        None => Vec::new(),
    };
    let end = args.end.as_deref().map(|e| codec.decode(e)).transpose()?;
    let ts = match args.ts {
        Some(ts) => TimeStamp::new(ts),
        None => client.current_ts()?,
    };
    let started = std::time::Instant::now();
    let manifest = client.export_range(&start, end.as_deref(), ts, &args.out)?;
    print_files(out, &manifest)?;
    writeln!(
        out,
        "exported at ts {} into {} ({:.3} s)",
        manifest.ts,
        args.out.display(),
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}

/// `percolate import`: an export into the data directory.
fn import(dir: &Path, from: &Path, out: &mut impl Write) -> Result<(), Failure> {
    let started = std::time::Instant::now();
    let manifest = Client::import(dir, from)?;
    print_files(out, &manifest)?;
    writeln!(
        out,
        "imported at ts {} into {} ({:.3} s)",
        manifest.ts,
        dir.display(),
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}

/// One line per file of an export: `CF<TAB>NAME<TAB>ENTRIES<TAB>BYTES`.
fn print_files(out: &mut impl Write, manifest: &ExportManifest) -> Result<(), Failure> {
    for f in &manifest.files {
        writeln!(
            out,
            "{}\t{}\t{} entries\t{} bytes",
            f.cf.name(),
            f.name,
            f.entries,
            f.size
        )?;
    }
    Ok(())
}

/// The storage of the region holding `key`.
fn storage<'a>(client: &'a Client, key: &[u8]) -> &'a Storage {
    client.cluster().region_for(key).storage()
}

/// A command with its keys and values decoded to bytes.
enum Decoded {
    Put(Vec<u8>, Vec<u8>),
    Get(Vec<u8>),
    Delete(Vec<u8>),
    Scan(Range),
    Mvcc(Vec<u8>),
    RawGet(Vec<u8>),
    RawPut(Vec<u8>, Vec<u8>),
    RawDelete(Vec<u8>),
    RawScan(Range),
}

struct Range {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    limit: usize,
    reverse: bool,
}

impl Decoded {
    /// Whether the command writes (and so may create the directory).
    fn writes(&self) -> bool {
        matches!(
            self,
            Decoded::Put(..) | Decoded::Delete(_) | Decoded::RawPut(..) | Decoded::RawDelete(_)
        )
    }

    fn new(command: Command, codec: Codec) -> Result<Self, Failure> {
        let d = |s: &str| codec.decode(s);
        Ok(match command {
            Command::Put { key, value } => Decoded::Put(d(&key)?, codec.value(&value)?),
            Command::Get { key } => Decoded::Get(d(&key)?),
            Command::Delete { key } => Decoded::Delete(d(&key)?),
            Command::Scan(args) => Decoded::Scan(Range::new(args, codec)?),
            Command::Mvcc { key } => Decoded::Mvcc(d(&key)?),
            Command::Raw(RawCommand::Get { key }) => Decoded::RawGet(d(&key)?),
            Command::Raw(RawCommand::Put { key, value }) => {
                Decoded::RawPut(d(&key)?, codec.value(&value)?)
            }
            Command::Raw(RawCommand::Delete { key }) => Decoded::RawDelete(d(&key)?),
            Command::Raw(RawCommand::Scan(args)) => Decoded::RawScan(Range::new(args, codec)?),
            #[cfg(feature = "sim")]
            Command::Sim(_) => unreachable!("run before the directory is opened"),
            Command::Gc { .. }
            | Command::Repair
            | Command::Stats
            | Command::Backup { .. }
            | Command::Export(_)
            | Command::Import { .. } => {
                return Err("not a data command".into());
            }
        })
    }
}

impl Range {
    fn new(args: ScanArgs, codec: Codec) -> Result<Self, Failure> {
        Ok(Range {
            start: match args.start {
                Some(s) => codec.decode(&s)?,
                None => Vec::new(),
            },
            end: args.end.map(|e| codec.decode(&e)).transpose()?,
            limit: args.limit,
            reverse: args.reverse,
        })
    }
}

/// How keys and values are written on the command line and printed.
#[derive(Clone, Copy, Debug)]
struct Codec {
    hex: bool,
}

impl Codec {
    fn decode(self, arg: &str) -> Result<Vec<u8>, Failure> {
        if self.hex {
            hex::decode(arg).map_err(|e| format!("bad hex {arg:?}: {e}").into())
        } else {
            Ok(arg.as_bytes().to_vec())
        }
    }

    /// A value argument: `-` is stdin, read to its end (as is, not
    /// decoded as hex); anything else as [`decode`](Self::decode).
    fn value(self, arg: &str) -> Result<Vec<u8>, Failure> {
        if arg == "-" {
            let mut value = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut value)?;
            return Ok(value);
        }
        self.decode(arg)
    }

    /// Hex with `--hex`; otherwise escaped (see the module documentation):
    /// printable ASCII as is, every other byte as an escape, so that no
    /// key or value can forge a line or send the terminal a control
    /// sequence.
    fn encode(self, bytes: &[u8]) -> String {
        if self.hex {
            hex::encode(bytes)
        } else {
            bytes.escape_ascii().to_string()
        }
    }
}

fn print_value(out: &mut impl Write, codec: Codec, value: Option<Vec<u8>>) -> Result<(), Failure> {
    match value {
        Some(v) => writeln!(out, "{}", codec.encode(&v))?,
        None => writeln!(out, "(not found)")?,
    }
    Ok(())
}

fn print_pairs(
    out: &mut impl Write,
    codec: Codec,
    pairs: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), Failure> {
    for (k, v) in pairs {
        writeln!(out, "{}\t{}", codec.encode(k), codec.encode(v))?;
    }
    Ok(())
}

fn print_commit(out: &mut impl Write, info: CommitInfo) -> Result<(), Failure> {
    writeln!(
        out,
        "OK: committed at {} ({:?})",
        info.commit_ts, info.protocol
    )?;
    Ok(())
}
