//! Crash testing with `kill -9`: a writer process, the checks after it
//! dies, and the soak loop that does both over and over.
//!
//! # The writer (`percolate-soak --dir D crash-writer --round R ...`)
//!
//! Takes the directory's lock (as [`Client::open_with`] does), opens `D`
//! over three regions (`[.., "g")`, `["g", "p")`, `["p", ..)`) and runs
//! transactions from several threads until it is killed (or has run
//! `--transactions`). Transaction `R/S` (round `R`, sequence number `S`)
//! writes, all in one transaction:
//!
//! * marker keys `{p}/t/{R:06}/{S:010}/{j:02}` in one, two or three
//!   regions (`p` is `a`, `h` or `q`), each holding a [`MarkerValue`]:
//!   the transaction's id, how many markers it wrote, which counter it
//!   incremented, whether it wrote a doomed key, whose doomed key it
//!   deleted, and, one transaction in five, padding to 256..=1024 bytes
//!   (a value over [`SHORT_VALUE_MAX_LEN`] bytes goes to the default CF;
//!   a shorter one is inlined in the write record: both paths are used);
//! * one counter `{p}/ctr/{i}`, incremented (decimal text);
//! * half the time, a transfer between two bank accounts `{p}/acct/{i}`
//!   (the bank is created, atomically, by the first writer);
//! * half the time, if its markers use region `S % 3`, a *doomed key*
//!   `{p}/x/{R:06}/{S:010}` there (a [`DoomedValue`], long half the time);
//! * half the time, the delete of an earlier transaction's doomed key (of
//!   its own round or of the round before, in a region it uses), if a read
//!   finds it: the markers name the victim.
//!
//! Besides the transaction threads, each writer runs
//!
//! * a **GC thread**: every [`GC_EVERY`] it collects the garbage at a
//!   safe point [`GC_LAG`] behind the oracle, moving forward;
//! * a **lock resolver**: at its start it lists the locks that earlier
//!   (killed) processes left and reads (or, for pessimistic locks, takes
//!   over) each key, which resolves the lock: rolls its transaction
//!   forward or back. The soak leaves one kill in four unchecked, so that
//!   the next writer meets the dead one's locks, and kills that writer
//!   while it resolves them ([`Kill::WhileResolving`]).
//!
//! The shapes give every commit protocol: one region and a few keys is
//! 1PC, up to [`MAX_ASYNC_KEYS`] keys over several regions async commit,
//! more keys 2PC. On stdout, in lines written whole (one `write(2)` each,
//! so a kill never cuts one):
//!
//! * `TS <ts>`: every timestamp the oracle handed out, printed before
//!   `get_ts` returns it;
//! * `READY`: opened, bank created;
//! * `COMMITTED <R/S> <commit_ts> <protocol> [pessimistic]`: printed
//!   after `commit` returned (`pessimistic`: a pessimistic transaction);
//! * `FAILED <R/S> <error>`: a transaction that gave up (retries
//!   exhausted); its fate is not claimed either way;
//! * `GC <safe_point>` before a collection starts, then `GC-DONE
//!   <safe_point> <versions deleted>` or `GC-FAILED <safe_point> <error>`;
//! * `RESOLVE <n>`: the resolver found `n` locks of earlier processes;
//!   `RESOLVED <n> <failed>` once it went through them (`RESOLVE-FAILED
//!   <error>`: it could not list them).
//!
//! # The checks (after each checked kill, on a reopened directory)
//!
//! The checker audits the **whole directory**, every round's markers, not
//! only the newest, at the latest timestamp:
//!
//! * **Atomicity**: every transaction with any marker visible has all of
//!   them (reads resolve the dead writer's locks: roll forward or back),
//!   and every marker value is exactly what its transaction wrote
//!   (padding included).
//! * **No lost commit**: every transaction reported `COMMITTED` is
//!   visible in full, and each of its markers was committed at the
//!   reported `commit_ts`.
//! * **Nothing lost later**: each round's visible transactions (count and
//!   fingerprint of the set) equal what the [`ledger`](State) recorded
//!   when the round was first checked; no old round gains or loses one.
//! * **Counters**: each counter equals the number of visible transactions
//!   (of every round) that incremented it.
//! * **Deletes**: a doomed key is visible if and only if its transaction
//!   is visible, wrote it, and no visible transaction deleted it: a
//!   deleted key reads as absent; no key is deleted twice.
//! * **Bank**: the accounts all exist or none does, and hold the same total.
//! * **No lock left** once every key written has been read.
//! * **The oracle never goes back**: every process's first timestamp is
//!   above every timestamp handed out before (by the writers and the
//!   checkers before it).
//! * **GC keeps what it must**: the same audit (atomicity, counters,
//!   deletes, bank) at the newest safe point any writer started a GC at:
//!   a version visible at or above the safe point that GC removed shows.
//!
//! # The ledger
//!
//! The checks of one round are only as good as what they are compared
//! with. The soak parent keeps a ledger, `D/SOAK-LEDGER` (outside RocksDB,
//! written by create-and-rename and fsynced after every check): per round,
//! how many transactions were visible when it was checked and a
//! fingerprint of which; the next round; the newest timestamp handed out;
//! the newest GC safe point; whether the bank exists. A soak on an
//! existing directory starts from its ledger, never from the data: a
//! record lost in between shows as a lost transaction of its round. A
//! directory holding soak data but no ledger is refused.
//!
//! # Durability
//!
//! The client's default durability is a buffered WAL: each write batch is
//! in the operating system's page cache when the command answers, not yet
//! fsynced. That survives the death of the process (which is what `kill -9`
//! tests: the kernel still writes the pages out) but not a power loss or a
//! kernel crash. A power-loss test needs [`Durability::Sync`]
//! (`percolate_engine::Durability`) and a machine to pull the plug on.
//!
//! [`Durability::Sync`]: percolate_engine::Durability::Sync
//! [`Client::open_with`]: percolate::Client::open_with
//! [`SHORT_VALUE_MAX_LEN`]: percolate_mvcc::SHORT_VALUE_MAX_LEN

pub mod check;
pub mod writer;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use percolate::ClientConfig;
use percolate_mvcc::SHORT_VALUE_MAX_LEN;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use self::check::{RoundOutcome, State};
use self::writer::WriterArgs;

/// An error of the writer or the checker.
pub type Failure = Box<dyn std::error::Error + Send + Sync>;

/// The first key of each region: the prefixes of its keys.
pub const REGIONS: [&str; 3] = ["a", "h", "q"];
/// Bank accounts per region.
pub const ACCOUNTS_PER_REGION: usize = 4;
/// Counters per region.
pub const COUNTERS_PER_REGION: usize = 2;
/// Each account's balance when the bank is created.
pub const INITIAL_BALANCE: u64 = 1_000;
/// The most keys of one prewrite command: transactions with more keys in a
/// region send several, so async commit and 2PC both get used.
pub const MAX_BATCH_KEYS: usize = 4;
/// The most keys of an async-commit transaction; larger ones commit by 2PC.
pub const MAX_ASYNC_KEYS: usize = 8;
/// The writer's lock TTL. Short, so that the checker's reads, whose
/// timestamps start above the oracle's persisted limit (at least 1.5 s past
/// the kill), find the dead writer's locks expired and need not wait.
pub const WRITER_LOCK_TTL_MS: u64 = 1_000;
/// How far the writer's GC safe point stays behind the oracle: well over
/// the lock TTL and the life of a writer transaction.
pub const GC_LAG: Duration = Duration::from_secs(3);
/// How often the writer collects garbage.
pub const GC_EVERY: Duration = Duration::from_millis(250);
/// The lengths of a long value: all over [`SHORT_VALUE_MAX_LEN`].
pub const LONG_VALUE: std::ops::RangeInclusive<usize> = 256..=1024;

const _: () = assert!(*LONG_VALUE.start() > SHORT_VALUE_MAX_LEN);

/// The split keys of the three regions.
pub fn split_keys() -> Vec<Vec<u8>> {
    vec![b"g".to_vec(), b"p".to_vec()]
}

/// How the writer's client commits (see the constants).
pub fn client_config() -> ClientConfig {
    ClientConfig {
        lock_ttl_ms: WRITER_LOCK_TTL_MS,
        max_batch_keys: MAX_BATCH_KEYS,
        max_async_commit_keys: MAX_ASYNC_KEYS,
        ..ClientConfig::default()
    }
}

/// Every bank account's key.
pub fn accounts() -> Vec<Vec<u8>> {
    REGIONS
        .iter()
        .flat_map(|p| (0..ACCOUNTS_PER_REGION).map(move |i| format!("{p}/acct/{i}").into_bytes()))
        .collect()
}

/// Every counter's key; a transaction names its counter by index here.
pub fn counters() -> Vec<Vec<u8>> {
    REGIONS
        .iter()
        .flat_map(|p| (0..COUNTERS_PER_REGION).map(move |i| format!("{p}/ctr/{i}").into_bytes()))
        .collect()
}

/// The identity of one writer transaction: its round (one per writer
/// process) and its sequence number in the round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId {
    /// The writer process's round.
    pub round: u64,
    /// The transaction's number in its round.
    pub seq: u64,
}

impl TxnId {
    /// The region of the transaction's doomed key (an index into
    /// [`REGIONS`]).
    pub fn doomed_region(self) -> usize {
        (self.seq % REGIONS.len() as u64) as usize
    }

    /// A well-mixed 64-bit hash of the id; a round's fingerprint is the
    /// wrapping sum of its visible transactions' hashes.
    pub fn fingerprint(self) -> u64 {
        // splitmix64 of the id.
        let mut z = self
            .round
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(self.seq)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.round, self.seq)
    }
}

impl std::str::FromStr for TxnId {
    type Err = Failure;
    fn from_str(s: &str) -> Result<Self, Failure> {
        let (round, seq) = s.split_once('/').ok_or("a txn id is ROUND/SEQ")?;
        Ok(TxnId {
            round: round.parse()?,
            seq: seq.parse()?,
        })
    }
}

/// The key of marker `j` of transaction `id` in region `prefix`.
fn marker_key(prefix: &str, id: TxnId, j: usize) -> Vec<u8> {
    format!("{prefix}/t/{:06}/{:010}/{j:02}", id.round, id.seq).into_bytes()
}

/// The key of transaction `id`'s doomed key (in region
/// [`TxnId::doomed_region`]).
fn doomed_key(id: TxnId) -> Vec<u8> {
    let prefix = REGIONS[id.doomed_region()];
    format!("{prefix}/x/{:06}/{:010}", id.round, id.seq).into_bytes()
}

/// The range of every marker key of region `prefix` (`'0'` follows `'/'`).
fn markers_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    (
        format!("{prefix}/t/").into_bytes(),
        format!("{prefix}/t0").into_bytes(),
    )
}

/// The range of every doomed key of region `prefix`.
fn doomed_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    (
        format!("{prefix}/x/").into_bytes(),
        format!("{prefix}/x0").into_bytes(),
    )
}

/// The transaction id in a marker or doomed key (`{p}/t/R/S/j` or
/// `{p}/x/R/S`), and the region's index.
fn key_id(key: &[u8]) -> Option<(usize, TxnId)> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.split('/');
    let first = parts.next()?;
    let region = REGIONS.iter().position(|p| *p == first)?;
    parts.next()?;
    let round = parts.next().filter(|w| w.len() == 6)?.parse().ok()?;
    let seq = parts.next().filter(|w| w.len() == 10)?.parse().ok()?;
    Some((region, TxnId { round, seq }))
}

fn number(value: Option<&[u8]>) -> Result<u64, Failure> {
    match value {
        None => Ok(0),
        Some(v) => Ok(std::str::from_utf8(v)?.parse()?),
    }
}

/// The padding of a long value: `header`, a space, then letters that
/// depend on `seq`, to `len` bytes in all (`len` 0: `header` alone).
fn pad(header: String, seq: u64, len: usize) -> Vec<u8> {
    let mut value = header.into_bytes();
    if len > 0 {
        value.push(b' ');
        let start = value.len();
        value.extend((start..len.max(start)).map(|i| filler(seq, i)));
    }
    value
}

fn filler(seq: u64, i: usize) -> u8 {
    b'a' + ((seq as usize).wrapping_add(i) % 26) as u8
}

/// Splits a padded value into its `words` header words and checks the
/// padding the last one announces. `None`: not a value [`pad`] made.
fn unpad(value: &[u8], seq_of: impl Fn(&[&str]) -> Option<u64>, words: usize) -> Option<Vec<&str>> {
    let text = std::str::from_utf8(value).ok()?;
    let parts: Vec<&str> = text.splitn(words + 1, ' ').collect();
    let header: Vec<&str> = parts.iter().take(words).copied().collect();
    if header.len() != words {
        return None;
    }
    let len: usize = header[words - 1].parse().ok()?;
    let seq = seq_of(&header)?;
    if len == 0 {
        return (parts.len() == words).then_some(header);
    }
    if value.len() != len || parts.len() != words + 1 {
        return None;
    }
    let start = len - parts[words].len();
    let ok = parts[words]
        .bytes()
        .enumerate()
        .all(|(i, b)| b == filler(seq, start + i));
    ok.then_some(header)
}

/// What every marker of one writer transaction holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerValue {
    /// The transaction.
    pub id: TxnId,
    /// How many markers it wrote (in all regions).
    pub markers: usize,
    /// The counter it incremented (index into [`counters`]).
    pub counter: usize,
    /// Whether it wrote its doomed key.
    pub doomed: bool,
    /// The transaction whose doomed key it deleted.
    pub deleted: Option<TxnId>,
    /// The value's length: 0 for a short value (the header alone), or one
    /// of [`LONG_VALUE`].
    pub len: usize,
}

impl MarkerValue {
    /// The value as stored: `"{id} {markers} {counter} {0|1} {victim|-}
    /// {len}"`, padded to `len` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let deleted = self.deleted.map_or("-".to_string(), |v| v.to_string());
        let header = format!(
            "{} {} {} {} {deleted} {}",
            self.id,
            self.markers,
            self.counter,
            u8::from(self.doomed),
            self.len
        );
        pad(header, self.id.seq, self.len)
    }

    /// The value [`encode`](Self::encode) made, or `None`.
    pub fn decode(value: &[u8]) -> Option<MarkerValue> {
        let seq_of = |h: &[&str]| Some(h[0].parse::<TxnId>().ok()?.seq);
        let header = unpad(value, seq_of, 6)?;
        Some(MarkerValue {
            id: header[0].parse().ok()?,
            markers: header[1].parse().ok()?,
            counter: header[2].parse().ok()?,
            doomed: match header[3] {
                "0" => false,
                "1" => true,
                _ => return None,
            },
            deleted: match header[4] {
                "-" => None,
                victim => Some(victim.parse().ok()?),
            },
            len: header[5].parse().ok()?,
        })
    }
}

/// What a doomed key holds: `"{id} {len}"`, padded to `len` bytes (0:
/// short).
pub struct DoomedValue;

impl DoomedValue {
    /// The value of `id`'s doomed key.
    pub fn encode(id: TxnId, len: usize) -> Vec<u8> {
        pad(format!("{id} {len}"), id.seq, len)
    }

    /// The id and length in a value [`encode`](Self::encode) made.
    pub fn decode(value: &[u8]) -> Option<(TxnId, usize)> {
        let seq_of = |h: &[&str]| Some(h[0].parse::<TxnId>().ok()?.seq);
        let header = unpad(value, seq_of, 2)?;
        Some((header[0].parse().ok()?, header[1].parse().ok()?))
    }
}

// ---------------------------------------------------------------------------
// The parent: spawn, kill, read the report.

/// When the parent kills the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// This long after the spawn, READY or not (a kill during RocksDB's
    /// recovery or the oracle's start is fair game).
    AfterSpawn(Duration),
    /// This long after the writer printed READY.
    AfterReady(Duration),
    /// This long after the writer's lock resolver said it found locks of
    /// earlier processes (`RESOLVE n`, `n` > 0): while it resolves them.
    /// If it found none, this long after READY.
    WhileResolving(Duration),
    /// Never: the writer runs this many transactions and exits.
    Never {
        /// Transactions to run.
        transactions: u64,
    },
}

/// What a writer printed before it died.
#[derive(Clone, Debug, Default)]
pub struct WriterReport {
    /// Its round.
    pub round: u64,
    /// The largest timestamp it printed (zero: none).
    pub max_ts: u64,
    /// The smallest timestamp it printed (zero: none).
    pub min_ts: u64,
    /// Whether it printed READY.
    pub ready: bool,
    /// Transactions reported committed, with their commit_ts.
    pub committed: BTreeMap<TxnId, u64>,
    /// Committed transactions by protocol (1PC, async commit, 2PC).
    pub protocols: [u64; 3],
    /// Committed pessimistic transactions (counted in `protocols` too).
    pub pessimistic: u64,
    /// Transactions that gave up.
    pub failed: u64,
    /// The first few FAILED and GC-FAILED lines.
    pub failures: Vec<String>,
    /// The newest safe point a GC was started at (zero: none).
    pub gc_safe_point: u64,
    /// Collections that finished.
    pub gc_runs: u64,
    /// Write records those collections deleted.
    pub gc_deleted: u64,
    /// Locks of earlier processes the resolver found (`None`: it did not
    /// get to count them).
    pub resolver_found: Option<u64>,
    /// Whether the resolver went through all of them.
    pub resolver_done: bool,
    /// Lines that made no sense (a bug of the writer).
    pub garbage: Vec<String>,
}

impl WriterReport {
    fn read_line(&mut self, text: &str) {
        let mut words = text.split(' ');
        let number = |w: Option<&str>| w.and_then(|w| w.parse::<u64>().ok());
        let ok = match words.next() {
            Some("TS") => number(words.next()).map(|ts| {
                self.max_ts = self.max_ts.max(ts);
                self.min_ts = if self.min_ts == 0 {
                    ts
                } else {
                    self.min_ts.min(ts)
                };
            }),
            Some("READY") => {
                self.ready = true;
                Some(())
            }
            Some("COMMITTED") => self.read_committed(words.collect()),
            Some("FAILED") => {
                self.failed += 1;
                self.note_failure(text);
                Some(())
            }
            Some("GC") => number(words.next()).map(|sp| {
                self.gc_safe_point = self.gc_safe_point.max(sp);
            }),
            Some("GC-DONE") => number(words.nth(1)).map(|deleted| {
                self.gc_runs += 1;
                self.gc_deleted += deleted;
            }),
            Some("GC-FAILED") => {
                self.note_failure(text);
                Some(())
            }
            Some("RESOLVE") => number(words.next()).map(|n| self.resolver_found = Some(n)),
            Some("RESOLVE-FAILED") => {
                self.note_failure(text);
                Some(())
            }
            Some("RESOLVED") => {
                self.resolver_done = true;
                Some(())
            }
            Some("DONE") => Some(()),
            _ => None,
        };
        if ok.is_none() {
            self.garbage.push(text.to_string());
        }
    }

    fn note_failure(&mut self, text: &str) {
        if self.failures.len() < 10 {
            self.failures.push(text.to_string());
        }
    }

    fn read_committed(&mut self, words: Vec<&str>) -> Option<()> {
        let (id, ts, protocol) = match words[..] {
            [id, ts, protocol] => (id, ts, protocol),
            [id, ts, protocol, "pessimistic"] => {
                self.pessimistic += 1;
                (id, ts, protocol)
            }
            _ => return None,
        };
        let ts: u64 = ts.parse().ok()?;
        self.committed.insert(id.parse().ok()?, ts);
        self.max_ts = self.max_ts.max(ts);
        let p = match protocol {
            "OnePc" => 0,
            "AsyncCommit" => 1,
            _ => 2,
        };
        self.protocols[p] += 1;
        Some(())
    }
}

/// A running writer and the threads reading its output.
struct Writer {
    child: Child,
    report: Arc<Mutex<WriterReport>>,
    stdout: JoinHandle<()>,
    stderr: JoinHandle<String>,
}

impl Writer {
    fn spawn(exe: &Path, dir: &Path, args: &WriterArgs) -> Result<Writer, Failure> {
        let mut command = Command::new(exe);
        command
            .arg("--dir")
            .arg(dir)
            .arg("crash-writer")
            .args(["--round", &args.round.to_string()])
            .args(["--threads", &args.threads.to_string()])
            .args(["--seed", &args.seed.to_string()]);
        if let Some(n) = args.transactions {
            command.args(["--transactions", &n.to_string()]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let report = Arc::new(Mutex::new(WriterReport {
            round: args.round,
            ..WriterReport::default()
        }));
        let out = BufReader::new(child.stdout.take().ok_or("no stdout pipe")?);
        let stdout = {
            let report = report.clone();
            std::thread::spawn(move || {
                for text in out.lines().map_while(Result::ok) {
                    if let Ok(mut report) = report.lock() {
                        report.read_line(&text);
                    }
                }
            })
        };
        let mut err = child.stderr.take().ok_or("no stderr pipe")?;
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        Ok(Writer {
            child,
            report,
            stdout,
            stderr,
        })
    }

    /// Whether the writer printed READY, and whether its resolver said
    /// how many dead locks it found (and whether any).
    fn progress(&self) -> (bool, Option<bool>) {
        self.report.lock().map_or((false, None), |r| {
            (r.ready, r.resolver_found.map(|n| n > 0))
        })
    }

    /// Waits until `kill` says, then kills the writer with SIGKILL
    /// (`Child::kill` on Unix), or waits for it to exit for
    /// [`Kill::Never`]. Returns the report and how long the writer ran.
    fn finish(
        mut self,
        kill: Kill,
        give_up: Duration,
    ) -> Result<(WriterReport, Duration), Failure> {
        let spawned = Instant::now();
        let mut ready_at = None;
        let mut resolving_at = None;
        let exited = loop {
            if let Some(status) = self.child.try_wait()? {
                break Some(status);
            }
            let (ready, resolving) = self.progress();
            if ready_at.is_none() && ready {
                ready_at = Some(Instant::now());
            }
            if resolving_at.is_none() && resolving == Some(true) {
                resolving_at = Some(Instant::now());
            }
            let due = match kill {
                Kill::AfterSpawn(after) => spawned.elapsed() >= after,
                Kill::AfterReady(after) => ready_at.is_some_and(|t| t.elapsed() >= after),
                Kill::WhileResolving(after) => match resolving {
                    Some(true) => resolving_at.is_some_and(|t| t.elapsed() >= after),
                    _ => resolving == Some(false) && ready_at.is_some_and(|t| t.elapsed() >= after),
                },
                Kill::Never { .. } => false,
            };
            if due {
                break None;
            }
            if spawned.elapsed() > give_up {
                self.child.kill()?;
                self.child.wait()?;
                return Err(format!("the writer was not done after {give_up:?}").into());
            }
            std::thread::sleep(match kill {
                Kill::WhileResolving(_) => Duration::from_micros(100),
                _ => Duration::from_millis(1),
            });
        };
        let ran = spawned.elapsed();
        if exited.is_none() {
            self.child.kill()?; // SIGKILL
        }
        let status = self.child.wait()?;
        self.stdout.join().map_err(|_| "stdout reader panicked")?;
        let stderr = self.stderr.join().map_err(|_| "stderr reader panicked")?;
        let expected_exit = matches!(kill, Kill::Never { .. });
        if exited.is_some() && !(expected_exit && status.success()) {
            return Err(format!("the writer exited by itself ({status}): {stderr}").into());
        }
        let report = std::mem::take(&mut *self.report.lock().map_err(|_| "report poisoned")?);
        Ok((report, ran))
    }
}

/// Runs one round: spawns a writer for round `state.next_round` and kills
/// it as `kill` says. With `checked`, then reopens the directory and checks
/// it (the whole directory, and what this writer and any unchecked one
/// before it reported), and records the result in the ledger. Without, the
/// round is left unchecked: the dead writer's locks stay for the next
/// writer's lock resolver, and the next checked round checks this round's
/// report too. Only a failure to run, to read or to write the ledger is an
/// `Err`; broken invariants are in the outcome's `anomalies`.
pub fn run_round(
    exe: &Path,
    dir: &Path,
    state: &mut State,
    threads: usize,
    seed: u64,
    kill: Kill,
    checked: bool,
) -> Result<RoundOutcome, Failure> {
    let (report, mut outcome) = run_writer(exe, dir, state, threads, seed, kill)?;
    state.pending.push(report);
    if checked {
        outcome.checked = true;
        check::check(dir, state, &mut outcome)?;
    }
    Ok(outcome)
}

/// Spawns and kills (or waits for) the writer of `state.next_round`.
fn run_writer(
    exe: &Path,
    dir: &Path,
    state: &mut State,
    threads: usize,
    seed: u64,
    kill: Kill,
) -> Result<(WriterReport, RoundOutcome), Failure> {
    let args = WriterArgs {
        round: state.next_round,
        threads,
        seed,
        transactions: match kill {
            Kill::Never { transactions } => Some(transactions),
            _ => None,
        },
    };
    let writer = Writer::spawn(exe, dir, &args)?;
    let (report, ran) = writer.finish(kill, Duration::from_secs(600))?;
    let mut outcome = RoundOutcome {
        round: args.round,
        ran,
        ready: report.ready,
        committed: report.committed.len() as u64,
        protocols: report.protocols,
        pessimistic: report.pessimistic,
        failed: report.failed,
        failures: report.failures.clone(),
        gc_runs: report.gc_runs,
        gc_deleted: report.gc_deleted,
        resolver_found: report.resolver_found.unwrap_or(0),
        resolver_killed: report.resolver_found.is_some_and(|n| n > 0) && !report.resolver_done,
        ..RoundOutcome::default()
    };
    for text in &report.garbage {
        outcome
            .anomalies
            .push(format!("the writer printed {text:?}"));
    }
    if report.min_ts != 0 && report.min_ts <= state.last_ts {
        outcome.anomalies.push(format!(
            "oracle went back: the writer got ts {} at or below {}, handed out before it",
            report.min_ts, state.last_ts
        ));
    }
    state.last_ts = state.last_ts.max(report.max_ts);
    state.next_round += 1;
    Ok((report, outcome))
}

// ---------------------------------------------------------------------------
// The soak loop.

/// What `percolate-soak soak` is told.
#[derive(Clone, Debug)]
pub struct SoakArgs {
    /// Stop once the writers reported this many commits.
    pub transactions: u64,
    /// Mean seconds between the writer's READY and its kill.
    pub kill_every: f64,
    /// Writer threads.
    pub threads: usize,
    /// Seeds the kill points and the writers.
    pub seed: u64,
}

/// The longest `kill_every` taken, in seconds (a day).
pub const MAX_KILL_EVERY: f64 = 86_400.0;

/// The totals of a soak run.
#[derive(Debug, Default)]
pub struct SoakTotals {
    /// Rounds run (one writer process each).
    pub rounds: u64,
    /// Writers killed with SIGKILL (every round but the last).
    pub crashes: u64,
    /// Kills before the writer was READY (during recovery or start).
    pub startup_kills: u64,
    /// Kills left unchecked for the next writer's lock resolver.
    pub unchecked_kills: u64,
    /// Locks of dead writers the resolvers found.
    pub resolver_locks: u64,
    /// Writers killed while their resolver was resolving.
    pub resolver_kills: u64,
    /// Transactions reported committed.
    pub committed: u64,
    /// ... by protocol: 1PC, async commit, 2PC.
    pub protocols: [u64; 3],
    /// ... of which pessimistic transactions.
    pub pessimistic: u64,
    /// Transactions of the checked rounds visible after the reopens.
    pub visible: u64,
    /// Transactions that gave up.
    pub failed: u64,
    /// Collections the writers finished.
    pub gc_runs: u64,
    /// Write records they deleted.
    pub gc_deleted: u64,
    /// The last whole-directory audit: transactions visible in all rounds.
    pub audited: u64,
    /// ... of which the markers were long values (in the default CF).
    pub audited_long: u64,
    /// ... doomed keys visible, and deleted by a visible transaction.
    pub audited_doomed: (u64, u64),
    /// Broken invariants (must be 0).
    pub anomalies: u64,
    /// Every kill point: milliseconds from the writer's spawn to its kill.
    pub kill_points_ms: Vec<u64>,
}

/// Kills the writer (re-spawned as `exe`) over and over until `args.
/// transactions` were committed, checking after every kill but one in
/// four (left to the next writer's lock resolver, and checked with the
/// next one); prints one line per round and the totals to `out`.
pub fn soak(
    exe: &Path,
    dir: &Path,
    args: &SoakArgs,
    out: &mut impl Write,
) -> Result<SoakTotals, Failure> {
    if !(args.kill_every.is_finite() && (0.0..=MAX_KILL_EVERY).contains(&args.kill_every)) {
        return Err(format!(
            "--kill-every must be a number of seconds from 0 to {MAX_KILL_EVERY}, not {}",
            args.kill_every
        )
        .into());
    }
    let mut state = State::load(dir)?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut totals = SoakTotals::default();
    writeln!(
        out,
        "soak: {} transactions, kill every ~{}s, {} threads, seed {}, in {} (ledger: round {}, {} rounds recorded)",
        args.transactions,
        args.kill_every,
        args.threads,
        args.seed,
        dir.display(),
        state.next_round,
        state.rounds.len(),
    )?;
    let started = Instant::now();
    let mut last = false;
    let mut after_unchecked = false;
    while !last {
        // Once enough were committed, one last writer that is not killed:
        // a clean exit must check out too.
        last = totals.committed >= args.transactions;
        let kill = if last {
            Kill::Never {
                transactions: 1_000,
            }
        } else {
            soak_kill_point(&mut rng, args.kill_every, after_unchecked)
        };
        let unchecked = !last && !after_unchecked && rng.random_ratio(1, 4);
        let seed = rng.random::<u64>();
        let outcome = run_round(exe, dir, &mut state, args.threads, seed, kill, !unchecked)?;
        after_unchecked = unchecked;
        totals.add(&outcome, !last);
        print_round(out, &outcome, kill, &totals, started.elapsed())?;
    }
    print_totals(out, &totals, started.elapsed())?;
    Ok(totals)
}

impl SoakTotals {
    fn add(&mut self, outcome: &RoundOutcome, killed: bool) {
        self.rounds += 1;
        self.crashes += u64::from(killed);
        if killed {
            self.kill_points_ms.push(outcome.ran.as_millis() as u64);
        }
        self.startup_kills += u64::from(killed && !outcome.ready);
        self.unchecked_kills += u64::from(!outcome.checked);
        self.resolver_locks += outcome.resolver_found;
        self.resolver_kills += u64::from(killed && outcome.resolver_killed);
        self.committed += outcome.committed;
        self.visible += outcome.visible;
        self.failed += outcome.failed;
        self.gc_runs += outcome.gc_runs;
        self.gc_deleted += outcome.gc_deleted;
        for (t, n) in self.protocols.iter_mut().zip(outcome.protocols) {
            *t += n;
        }
        self.pessimistic += outcome.pessimistic;
        if outcome.checked {
            self.audited = outcome.audited;
            self.audited_long = outcome.audited_long;
            self.audited_doomed = outcome.audited_doomed;
        }
        self.anomalies += outcome.anomalies.len() as u64;
    }
}

fn print_round(
    out: &mut impl Write,
    outcome: &RoundOutcome,
    kill: Kill,
    totals: &SoakTotals,
    elapsed: Duration,
) -> Result<(), Failure> {
    let how = match kill {
        Kill::Never { .. } => "ran to the end".to_string(),
        _ => format!("kill point {kill:?}"),
    };
    let resolver = match (outcome.resolver_found, outcome.resolver_killed) {
        (0, _) => String::new(),
        (n, true) => format!(", killed resolving {n} dead locks"),
        (n, false) => format!(", resolved {n} dead locks"),
    };
    let check = if outcome.checked {
        format!(
            "visible {}, audited {} in all rounds{}, anomalies {}; compactions waited {:.1?}",
            outcome.visible,
            outcome.audited,
            if outcome.safe_point_audited {
                " (and at the GC safe point)"
            } else {
                ""
            },
            outcome.anomalies.len(),
            outcome.compaction_wait,
        )
    } else {
        format!(
            "unchecked (left to the next writer's resolver), anomalies {}",
            outcome.anomalies.len()
        )
    };
    writeln!(
        out,
        "round {}: {how} ({} ms after spawn{}), committed {}, gave up {}, gc {}{resolver}, {check}; \
         total {} in {elapsed:.0?}",
        outcome.round,
        outcome.ran.as_millis(),
        if outcome.ready { "" } else { ", before READY" },
        outcome.committed,
        outcome.failed,
        outcome.gc_runs,
        totals.committed,
    )?;
    for anomaly in &outcome.anomalies {
        writeln!(out, "ANOMALY round {}: {anomaly}", outcome.round)?;
    }
    for failure in &outcome.failures {
        writeln!(out, "  gave up in round {}: {failure}", outcome.round)?;
    }
    out.flush()?;
    Ok(())
}

/// A random kill point: mostly a while after READY (0.5 to 1.5 times
/// `kill_every`), one time in eight at most 100 ms after the spawn (often
/// during the writer's start: RocksDB's recovery, the oracle's start).
/// After an unchecked kill, mostly while the resolver works: within 3 ms
/// of its finding the dead writer's locks (the new writer's oracle starts
/// after their TTL ran out, so resolving them takes a few milliseconds).
fn soak_kill_point(rng: &mut StdRng, kill_every: f64, after_unchecked: bool) -> Kill {
    if rng.random_ratio(1, 8) {
        Kill::AfterSpawn(Duration::from_millis(rng.random_range(0..100)))
    } else if after_unchecked {
        Kill::WhileResolving(Duration::from_micros(rng.random_range(0..3_000)))
    } else {
        let secs = kill_every * rng.random_range(0.5..1.5);
        Kill::AfterReady(Duration::try_from_secs_f64(secs).unwrap_or(Duration::ZERO))
    }
}

fn print_totals(out: &mut impl Write, t: &SoakTotals, elapsed: Duration) -> Result<(), Failure> {
    let mut points = t.kill_points_ms.clone();
    points.sort_unstable();
    if let (Some(min), Some(max)) = (points.first(), points.last()) {
        writeln!(
            out,
            "kill points: {} (ms after spawn: min {min}, median {}, max {max})",
            points.len(),
            points[points.len() / 2]
        )?;
    }
    writeln!(
        out,
        "last audit: {} transactions visible in all rounds ({} with long values), {} doomed keys \
         visible, {} deleted; gc: {} runs, {} versions deleted; lock resolvers: {} dead locks \
         found, {} writers killed while resolving",
        t.audited,
        t.audited_long,
        t.audited_doomed.0,
        t.audited_doomed.1,
        t.gc_runs,
        t.gc_deleted,
        t.resolver_locks,
        t.resolver_kills,
    )?;
    writeln!(
        out,
        "soak done in {elapsed:.0?}: {} transactions committed ({} 1PC, {} async commit, {} 2PC; \
         {} pessimistic), \
         {} visible after recovery, {} gave up; {} crashes survived (kill -9), {} of them before READY, \
         {} left unchecked for the next writer's resolver; \
         {} anomalies",
        t.committed,
        t.protocols[0],
        t.protocols[1],
        t.protocols[2],
        t.pessimistic,
        t.visible,
        t.failed,
        t.crashes,
        t.startup_kills,
        t.unchecked_kills,
        t.anomalies
    )?;
    Ok(())
}
