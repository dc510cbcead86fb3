//! Crash testing with `kill -9`: a writer process, the checks after it
//! dies, and the soak loop that does both over and over.
//!
//! # The writer (`percolate --dir D crash-writer --round R ...`)
//!
//! Opens `D` over three regions (`[.., "g")`, `["g", "p")`, `["p", ..)`)
//! and runs transactions from several threads until it is killed (or has
//! run `--transactions`). Transaction `R/S` (round `R`, sequence number
//! `S`) writes, all in one transaction:
//!
//! * marker keys `{p}/t/{R:06}/{S:010}/{j:02}` in one, two or three
//!   regions (`p` is `a`, `h` or `q`), each with the value
//!   `"{R}/{S} {markers} {counter}"`: the transaction's id, how many
//!   markers it wrote, and which counter it incremented;
//! * one counter `{p}/ctr/{i}`, incremented (decimal text);
//! * half the time, a transfer between two bank accounts `{p}/acct/{i}`
//!   (the bank is created, atomically, by the first writer).
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
//!   exhausted); its fate is not claimed either way.
//!
//! # The checks (after each kill, on a reopened directory)
//!
//! * **No lost commit**: every `COMMITTED` transaction is visible in full,
//!   and each of its markers was committed at the reported `commit_ts`.
//! * **Atomicity**: every transaction with any marker visible has all of
//!   them (reads resolve the dead writer's locks: roll forward or back).
//! * **Counters**: each counter grew by exactly the number of visible
//!   transactions of the round that incremented it.
//! * **Bank**: the accounts all exist or none does, and hold the same total.
//! * **No lock left** once every key written has been read.
//! * **The oracle never goes back**: the checker's first timestamp is above
//!   every timestamp the writer printed, and the writer's first is above
//!   the checker's last.
//!
//! # Durability
//!
//! The client's default durability is a buffered WAL: each write batch is
//! in the operating system's page cache when the command answers, not yet
//! fsynced. That survives the death of the process (which is what `kill -9`
//! tests: the kernel still writes the pages out) but not a power loss or a
//! kernel crash. A power-loss test needs [`Durability::Sync`]
//! (`percolate::engine::Durability`) and a machine to pull the plug on.
//!
//! [`Durability::Sync`]: percolate::engine::Durability::Sync

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

/// The range of every marker key of `round` in region `prefix`.
fn round_range(prefix: &str, round: u64) -> (Vec<u8>, Vec<u8>) {
    (
        format!("{prefix}/t/{round:06}/").into_bytes(),
        format!("{prefix}/t/{round:06}0").into_bytes(), // '0' follows '/'
    )
}

fn number(value: Option<&[u8]>) -> Result<u64, Failure> {
    match value {
        None => Ok(0),
        Some(v) => Ok(std::str::from_utf8(v)?.parse()?),
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
    /// Never: the writer runs this many transactions and exits.
    Never {
        /// Transactions to run.
        transactions: u64,
    },
}

/// What a writer printed before it died.
#[derive(Debug, Default)]
pub struct WriterReport {
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
    /// The first few FAILED lines.
    pub failures: Vec<String>,
    /// Lines that made no sense (a bug of the writer).
    pub garbage: Vec<String>,
}

impl WriterReport {
    fn read_line(&mut self, text: &str) {
        let mut words = text.split(' ');
        let ok = match words.next() {
            Some("TS") => words.next().and_then(|w| w.parse().ok()).map(|ts: u64| {
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
                if self.failures.len() < 10 {
                    self.failures.push(text.to_string());
                }
                Some(())
            }
            Some("DONE") => Some(()),
            _ => None,
        };
        if ok.is_none() {
            self.garbage.push(text.to_string());
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
        let report = Arc::new(Mutex::new(WriterReport::default()));
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let stdout = {
            let report = report.clone();
            std::thread::spawn(move || {
                for text in out.lines().map_while(Result::ok) {
                    report.lock().expect("report").read_line(&text);
                }
            })
        };
        let mut err = child.stderr.take().expect("piped");
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
        let exited = loop {
            if let Some(status) = self.child.try_wait()? {
                break Some(status);
            }
            if ready_at.is_none() && self.report.lock().expect("report").ready {
                ready_at = Some(Instant::now());
            }
            let due = match kill {
                Kill::AfterSpawn(after) => spawned.elapsed() >= after,
                Kill::AfterReady(after) => ready_at.is_some_and(|t| t.elapsed() >= after),
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
            std::thread::sleep(Duration::from_millis(1));
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
        let report = std::mem::take(&mut *self.report.lock().expect("report"));
        Ok((report, ran))
    }
}

/// Runs one round: spawns a writer for round `state.next_round`, kills it
/// as `kill` says, reopens the directory and checks it. Only a failure to
/// run or to read is an `Err`; broken invariants are in the outcome's
/// `anomalies`.
pub fn run_round(
    exe: &Path,
    dir: &Path,
    state: &mut State,
    threads: usize,
    seed: u64,
    kill: Kill,
) -> Result<RoundOutcome, Failure> {
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
        ..RoundOutcome::default()
    };
    for text in &report.garbage {
        outcome
            .anomalies
            .push(format!("the writer printed {text:?}"));
    }
    if report.min_ts != 0 && report.min_ts <= state.checker_ts {
        outcome.anomalies.push(format!(
            "oracle went back: the writer got ts {} at or below the checker's {}",
            report.min_ts, state.checker_ts
        ));
    }
    check::check(dir, &report, state, &mut outcome)?;
    state.next_round += 1;
    Ok(outcome)
}

// ---------------------------------------------------------------------------
// The soak loop.

/// What `percolate soak` is told.
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

/// The totals of a soak run.
#[derive(Debug, Default)]
pub struct SoakTotals {
    /// Rounds run (one writer process each).
    pub rounds: u64,
    /// Writers killed with SIGKILL (every round).
    pub crashes: u64,
    /// Kills before the writer was READY (during recovery or start).
    pub startup_kills: u64,
    /// Transactions reported committed.
    pub committed: u64,
    /// ... by protocol: 1PC, async commit, 2PC.
    pub protocols: [u64; 3],
    /// ... of which pessimistic transactions.
    pub pessimistic: u64,
    /// Transactions visible after the reopens.
    pub visible: u64,
    /// Transactions that gave up.
    pub failed: u64,
    /// Broken invariants (must be 0).
    pub anomalies: u64,
    /// Every kill point: milliseconds from the writer's spawn to its kill.
    pub kill_points_ms: Vec<u64>,
}

/// Kills the writer (re-spawned as `exe`) over and over until `args.
/// transactions` were committed, checking after every kill; prints one
/// line per round and the totals to `out`.
pub fn soak(
    exe: &Path,
    dir: &Path,
    args: &SoakArgs,
    out: &mut impl Write,
) -> Result<SoakTotals, Failure> {
    let mut state = State::load(dir)?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut totals = SoakTotals::default();
    writeln!(
        out,
        "soak: {} transactions, kill every ~{}s, {} threads, seed {}, in {}",
        args.transactions,
        args.kill_every,
        args.threads,
        args.seed,
        dir.display()
    )?;
    let started = Instant::now();
    let mut last = false;
    while !last {
        // Once enough were committed, one last writer that is not killed:
        // a clean exit must check out too.
        last = totals.committed >= args.transactions;
        let kill = if last {
            Kill::Never {
                transactions: 1_000,
            }
        } else {
            soak_kill_point(&mut rng, args.kill_every)
        };
        let outcome = run_round(
            exe,
            dir,
            &mut state,
            args.threads,
            rng.random::<u64>(),
            kill,
        )?;
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
        self.committed += outcome.committed;
        self.visible += outcome.visible;
        self.failed += outcome.failed;
        for (t, n) in self.protocols.iter_mut().zip(outcome.protocols) {
            *t += n;
        }
        self.pessimistic += outcome.pessimistic;
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
    writeln!(
        out,
        "round {}: {how} ({} ms after spawn{}), committed {}, visible {}, gave up {}, anomalies {}; \
         compactions waited {:.1?}; total {} in {elapsed:.0?}",
        outcome.round,
        outcome.ran.as_millis(),
        if outcome.ready { "" } else { ", before READY" },
        outcome.committed,
        outcome.visible,
        outcome.failed,
        outcome.anomalies.len(),
        outcome.compaction_wait,
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
fn soak_kill_point(rng: &mut StdRng, kill_every: f64) -> Kill {
    if rng.random_ratio(1, 8) {
        Kill::AfterSpawn(Duration::from_millis(rng.random_range(0..100)))
    } else {
        let secs = kill_every * rng.random_range(0.5..1.5);
        Kill::AfterReady(Duration::from_secs_f64(secs.max(0.0)))
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
        "soak done in {elapsed:.0?}: {} transactions committed ({} 1PC, {} async commit, {} 2PC; \
         {} pessimistic), \
         {} visible after recovery, {} gave up; {} crashes survived (kill -9), {} of them before READY; \
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
        t.anomalies
    )?;
    Ok(())
}
