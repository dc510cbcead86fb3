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
//! * `COMMITTED <R/S> <commit_ts> <protocol>`: printed after `commit`
//!   returned;
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

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use percolate::engine::Cf;
use percolate::mvcc::{Key, TimeStamp, WriteType};
use percolate::txn::cluster::Cluster;
use percolate::txn::oracle::{LocalOracle, TimestampOracle};
use percolate::txn::storage::StorageConfig;
use percolate::{Client, ClientConfig, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
// The writer.

/// An oracle that prints every timestamp it hands out (`TS <ts>`) before
/// handing it out, so that the parent knows a bound the next oracle must
/// stay above.
struct PrintingOracle {
    inner: LocalOracle,
}

impl TimestampOracle for PrintingOracle {
    fn get_ts(&self) -> percolate::Result<TimeStamp> {
        let ts = self.inner.get_ts()?;
        line(format_args!("TS {}", ts.into_inner()));
        Ok(ts)
    }

    fn get_ts_batch(&self, count: u32) -> percolate::Result<TimeStamp> {
        let first = self.inner.get_ts_batch(count)?;
        line(format_args!(
            "TS {}",
            first.into_inner() + u64::from(count) - 1
        ));
        Ok(first)
    }
}

/// The writer's stdout: a duplicate of file descriptor 1, written without
/// a buffer or `std::io::Stdout`'s lock (which the CLI's `main` holds).
static OUT: OnceLock<File> = OnceLock::new();

/// Writes one line to stdout in one `write(2)`, which a pipe keeps whole
/// (a line is far below `PIPE_BUF`), so that a kill never cuts a line and
/// threads never interleave theirs. Errors are ignored: the parent reading
/// us is gone, and so shall we be.
fn line(args: std::fmt::Arguments<'_>) {
    let text = format!("{args}\n");
    let out = OUT.get_or_init(|| {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .expect("duplicating stdout");
        File::from(fd)
    });
    let _ = (&*out).write_all(text.as_bytes());
}

/// What the writer is told.
#[derive(Clone, Debug)]
pub struct WriterArgs {
    /// Its round: the first part of its transactions' ids.
    pub round: u64,
    /// Threads running transactions.
    pub threads: usize,
    /// Seeds the choice of transactions (each thread's is derived).
    pub seed: u64,
    /// Exit (status 0) after this many transactions; `None`: run until
    /// killed.
    pub transactions: Option<u64>,
}

/// Opens `dir` as the writer's client: the three regions, the printing
/// oracle.
fn open_writer(dir: &Path) -> Result<Client, Failure> {
    std::fs::create_dir_all(dir)?;
    let oracle = Arc::new(PrintingOracle {
        inner: LocalOracle::open(dir)?,
    });
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts()?,
        ..StorageConfig::default()
    };
    let cluster = Cluster::open(dir.join("db"), split_keys(), storage)?;
    Ok(Client::new(cluster, oracle, client_config()))
}

/// Creates every account, in one transaction, unless they exist.
fn open_bank(client: &Client) -> Result<(), Failure> {
    let accounts = accounts();
    client.with_retry(|txn| {
        if txn.get(&accounts[0])?.is_none() {
            for account in &accounts {
                txn.put(account.clone(), INITIAL_BALANCE.to_string());
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// The writer process: runs transactions until killed (or done).
pub fn run_writer(dir: &Path, args: &WriterArgs) -> Result<(), Failure> {
    let client = open_writer(dir)?;
    open_bank(&client)?;
    line(format_args!("READY"));
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<JoinHandle<()>> = (0..args.threads.max(1))
        .map(|t| {
            let (client, next, args) = (client.clone(), next.clone(), args.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(args.seed ^ (t as u64).wrapping_mul(0x9E37));
                loop {
                    let seq = next.fetch_add(1, Ordering::Relaxed);
                    if args.transactions.is_some_and(|n| seq >= n) {
                        return;
                    }
                    let id = TxnId {
                        round: args.round,
                        seq,
                    };
                    run_one(&client, id, &Plan::random(&mut rng));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().map_err(|_| "a writer thread panicked")?;
    }
    line(format_args!("DONE"));
    Ok(())
}

/// What one writer transaction writes.
#[derive(Clone, Debug)]
struct Plan {
    /// Markers per region (0: none in that region).
    markers: [usize; 3],
    /// The counter incremented (index into [`counters`]).
    counter: usize,
    /// A transfer: from, to (indexes into [`accounts`]), amount.
    transfer: Option<(usize, usize, u64)>,
}

impl Plan {
    /// A random plan: one region and few keys (1PC), several regions and
    /// few keys (async commit) or many keys (2PC).
    fn random(rng: &mut impl Rng) -> Plan {
        let mut markers = [0; 3];
        let shape = rng.random_range(0..4);
        match shape {
            0 => markers[rng.random_range(0..3)] = 1,
            1 | 2 => {
                let skip = rng.random_range(0..4); // 3: none skipped
                for (r, m) in markers.iter_mut().enumerate() {
                    *m = usize::from(r != skip);
                }
            }
            _ => markers = [3, 3, 3],
        }
        let regions: Vec<usize> = (0..3).filter(|r| markers[*r] > 0).collect();
        let counter = Self::pick(rng, &regions, COUNTERS_PER_REGION);
        let transfer = if rng.random_bool(0.5) {
            let from = Self::pick(rng, &regions, ACCOUNTS_PER_REGION);
            let to = Self::pick(rng, &regions, ACCOUNTS_PER_REGION);
            Some((from, to, rng.random_range(1..=100))).filter(|_| from != to)
        } else {
            None
        };
        Plan {
            markers,
            counter,
            transfer,
        }
    }

    /// One of `per_region` keys of one of `regions`: an index into
    /// [`accounts`] or [`counters`]. Keys stay in the regions the markers
    /// use, so that a one-region plan stays 1PC.
    fn pick(rng: &mut impl Rng, regions: &[usize], per_region: usize) -> usize {
        let r = regions[rng.random_range(0..regions.len())];
        r * per_region + rng.random_range(0..per_region)
    }

    fn marker_count(&self) -> usize {
        self.markers.iter().sum()
    }
}

/// Runs transaction `id` (retrying conflicts) and reports it.
fn run_one(client: &Client, id: TxnId, plan: &Plan) {
    let (accounts, counters) = (accounts(), counters());
    let value = format!("{id} {} {}", plan.marker_count(), plan.counter);
    let result = client.with_retry_info(|txn| {
        for (r, prefix) in REGIONS.iter().enumerate() {
            for j in 0..plan.markers[r] {
                txn.put(marker_key(prefix, id, j), value.clone());
            }
        }
        let counter = &counters[plan.counter];
        let n = read_number(txn, counter)?;
        txn.put(counter.clone(), (n + 1).to_string());
        if let Some((from, to, amount)) = plan.transfer {
            let (a, b) = (&accounts[from], &accounts[to]);
            let (balance_a, balance_b) = (read_number(txn, a)?, read_number(txn, b)?);
            let amount = amount.min(balance_a);
            txn.put(a.clone(), (balance_a - amount).to_string());
            txn.put(b.clone(), (balance_b + amount).to_string());
        }
        Ok(())
    });
    match result {
        Ok(((), info)) => line(format_args!(
            "COMMITTED {id} {} {:?}",
            info.commit_ts.into_inner(),
            info.protocol
        )),
        // Retries exhausted, or an error no retry helps with: reported, and
        // the writer goes on. Its fate is not claimed either way.
        Err(e) => line(format_args!(
            "FAILED {id} {}",
            e.to_string().replace('\n', " ")
        )),
    }
}

/// A number stored as decimal text (absent, or not a number: 0; the
/// checker tells such a value apart).
fn read_number(txn: &Transaction, key: &[u8]) -> percolate::Result<u64> {
    let value = txn.get(key)?;
    Ok(value
        .as_deref()
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0))
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
        let [id, ts, protocol] = words[..] else {
            return None;
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

// ---------------------------------------------------------------------------
// The checks.

/// What the checker carries from one round to the next.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// Each counter's value after the last check.
    pub counters: Vec<u64>,
    /// Whether the bank existed at the last check.
    pub bank_open: bool,
    /// The largest timestamp the last checker took from the oracle.
    pub checker_ts: u64,
    /// The next round to run.
    pub next_round: u64,
}

impl State {
    /// The state of an existing directory (a fresh one: all zero): counter
    /// values, whether the bank exists, and a round after every round
    /// whose markers are there.
    pub fn load(dir: &Path) -> Result<State, Failure> {
        let client = open_checker(dir)?;
        let txn = client.begin()?;
        let counters = counters()
            .iter()
            .map(|k| number(txn.get(k)?.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;
        let bank_open = txn.get(&accounts()[0])?.is_some();
        let mut next_round = 0;
        for prefix in REGIONS {
            let start = format!("{prefix}/t/").into_bytes();
            let end = format!("{prefix}/t0").into_bytes();
            if let Some((key, _)) = txn.scan_reverse(&start, Some(&end), 1)?.pop() {
                let round: u64 = std::str::from_utf8(&key[4..10])?.parse()?;
                next_round = next_round.max(round + 1);
            }
        }
        Ok(State {
            counters,
            bank_open,
            checker_ts: client.oracle().get_ts()?.into_inner(),
            next_round,
        })
    }
}

/// What one round found.
#[derive(Debug, Default)]
pub struct RoundOutcome {
    /// The round.
    pub round: u64,
    /// How long the writer ran before the kill (or its exit).
    pub ran: Duration,
    /// Whether the writer had printed READY when it died.
    pub ready: bool,
    /// Transactions the writer reported committed.
    pub committed: u64,
    /// ... by protocol: 1PC, async commit, 2PC.
    pub protocols: [u64; 3],
    /// Transactions that gave up.
    pub failed: u64,
    /// The first few of their FAILED lines.
    pub failures: Vec<String>,
    /// Transactions visible after the reopen (committed, reported or not).
    pub visible: u64,
    /// How long the checker waited for RocksDB's pending compactions.
    pub compaction_wait: Duration,
    /// Every invariant the round broke (must be empty).
    pub anomalies: Vec<String>,
}

/// The checker's client: the regions of the writer, default config.
fn open_checker(dir: &Path) -> Result<Client, Failure> {
    let options = percolate::OpenOptions {
        split_keys: split_keys(),
        ..percolate::OpenOptions::default()
    };
    Ok(Client::open_with(dir, options)?)
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
    check(dir, &report, state, &mut outcome)?;
    state.next_round += 1;
    Ok(outcome)
}

/// A visible transaction's markers, as found.
#[derive(Debug, Default)]
struct Found {
    keys: Vec<Vec<u8>>,
    markers: usize,
    counter: usize,
}

/// Reopens `dir` and checks what the writer of `report` left.
fn check(
    dir: &Path,
    report: &WriterReport,
    state: &mut State,
    outcome: &mut RoundOutcome,
) -> Result<(), Failure> {
    let client = open_checker(dir)?;
    let txn = client.begin()?;
    let start_ts = txn.start_ts().into_inner();
    if start_ts <= report.max_ts {
        outcome.anomalies.push(format!(
            "oracle went back: start_ts {start_ts} after the restart, the writer had {}",
            report.max_ts
        ));
    }
    let found = read_markers(&txn, outcome.round, &mut outcome.anomalies)?;
    outcome.visible = found.len() as u64;
    check_markers(&client, report, &found, &mut outcome.anomalies)?;
    check_counters(&txn, &found, state, &mut outcome.anomalies)?;
    check_bank(&txn, state, &mut outcome.anomalies)?;
    check_no_locks(&client, &mut outcome.anomalies)?;
    state.checker_ts = client.oracle().get_ts()?.into_inner();
    outcome.compaction_wait = settle_compactions(&client)?;
    Ok(())
}

/// Lets RocksDB finish the compactions it has pending, and returns how long
/// that took.
///
/// NB: every open flushes the recovered WAL into new L0 files, and a kill
/// throws away the compaction in progress. Killed every second or so, the
/// writers never finish one: after a few hundred kills L0 reaches RocksDB's
/// stop-writes trigger and a new writer is stopped for longer than it
/// lives (no transaction commits any more). The checker is not killed, so
/// it waits for them here, as a process that lives longer would.
fn settle_compactions(client: &Client) -> Result<Duration, Failure> {
    let started = Instant::now();
    let db = client.cluster().regions()[0].storage().engine().raw_db();
    loop {
        let mut busy = db
            .property_int_value("rocksdb.num-running-compactions")?
            .unwrap_or(0)
            > 0;
        for cf in Cf::ALL {
            let handle = db
                .cf_handle(cf.name())
                .ok_or("a column family is missing")?;
            busy |= db
                .property_int_value_cf(handle, "rocksdb.compaction-pending")?
                .unwrap_or(0)
                > 0;
        }
        if !busy {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err("compactions still pending after 10 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every marker of `round` visible to `txn`, by transaction.
fn read_markers(
    txn: &Transaction,
    round: u64,
    anomalies: &mut Vec<String>,
) -> Result<BTreeMap<TxnId, Found>, Failure> {
    let mut found: BTreeMap<TxnId, Found> = BTreeMap::new();
    for prefix in REGIONS {
        let (start, end) = round_range(prefix, round);
        for (key, value) in txn.scan(&start, Some(&end), 0)? {
            let text = String::from_utf8(value)?;
            let parsed: Option<(TxnId, usize, usize)> = (|| {
                let mut words = text.split(' ');
                let id = words.next()?.parse().ok()?;
                Some((id, words.next()?.parse().ok()?, words.next()?.parse().ok()?))
            })();
            let Some((id, markers, counter)) = parsed else {
                anomalies.push(format!("bad marker value {text:?}"));
                continue;
            };
            if !key.starts_with(&marker_key(prefix, id, 0)[..key.len().saturating_sub(2)]) {
                anomalies.push(format!("marker {key:?} holds {text:?}"));
            }
            let entry = found.entry(id).or_default();
            entry.keys.push(key);
            entry.markers = markers;
            entry.counter = counter;
        }
    }
    Ok(found)
}

/// Atomicity, and no reported commit lost (at its reported commit_ts).
fn check_markers(
    client: &Client,
    report: &WriterReport,
    found: &BTreeMap<TxnId, Found>,
    anomalies: &mut Vec<String>,
) -> Result<(), Failure> {
    for (id, f) in found {
        if f.keys.len() != f.markers {
            anomalies.push(format!(
                "partial transaction {id}: {} of its {} markers visible",
                f.keys.len(),
                f.markers
            ));
        }
    }
    for (id, commit_ts) in &report.committed {
        let Some(f) = found.get(id) else {
            anomalies.push(format!(
                "lost commit: {id} (commit_ts {commit_ts}) not visible"
            ));
            continue;
        };
        for key in &f.keys {
            let info = client
                .cluster()
                .region_for(key)
                .storage()
                .mvcc_by_key(Key::from_raw(key))?;
            let put = info
                .writes
                .iter()
                .find(|(_, w)| w.write_type == WriteType::Put);
            if put.map(|(ts, _)| ts.into_inner()) != Some(*commit_ts) {
                anomalies.push(format!(
                    "{id}: {} committed at {put:?}, the writer reported {commit_ts}",
                    String::from_utf8_lossy(key)
                ));
            }
        }
    }
    Ok(())
}

/// Each counter grew by the round's visible increments of it.
fn check_counters(
    txn: &Transaction,
    found: &BTreeMap<TxnId, Found>,
    state: &mut State,
    anomalies: &mut Vec<String>,
) -> Result<(), Failure> {
    let keys = counters();
    state.counters.resize(keys.len(), 0);
    let mut expected = state.counters.clone();
    for f in found.values() {
        match expected.get_mut(f.counter) {
            Some(n) => *n += 1,
            None => anomalies.push(format!("a marker names counter {}", f.counter)),
        }
    }
    for (i, key) in keys.iter().enumerate() {
        let value = number(txn.get(key)?.as_deref())?;
        if value != expected[i] {
            anomalies.push(format!(
                "counter {}: {value}, expected {} (+{} visible increments)",
                String::from_utf8_lossy(key),
                expected[i],
                expected[i] - state.counters[i]
            ));
        }
        state.counters[i] = value;
    }
    Ok(())
}

/// The accounts all exist or none does, and hold the same total.
fn check_bank(
    txn: &Transaction,
    state: &mut State,
    anomalies: &mut Vec<String>,
) -> Result<(), Failure> {
    let keys = accounts();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let values = txn.batch_get(&refs)?;
    let present = values.iter().filter(|v| v.is_some()).count();
    if present == 0 && !state.bank_open {
        return Ok(());
    }
    if present != keys.len() {
        anomalies.push(format!("bank: {present} of {} accounts exist", keys.len()));
        return Ok(());
    }
    let total: u64 = values
        .iter()
        .map(|v| number(v.as_deref()))
        .sum::<Result<u64, _>>()?;
    let expected = INITIAL_BALANCE * keys.len() as u64;
    if total != expected {
        anomalies.push(format!("bank: total {total}, expected {expected}"));
    }
    state.bank_open = true;
    Ok(())
}

/// Every key the writer wrote has been read: no lock may be left.
fn check_no_locks(client: &Client, anomalies: &mut Vec<String>) -> Result<(), Failure> {
    for region in client.cluster().regions() {
        let locks = region.storage().scan_lock(
            Some(Key::from_raw(region.start_key())),
            region.end_key().map(Key::from_raw),
            TimeStamp::max(),
            0,
        )?;
        for lock in locks {
            anomalies.push(format!(
                "lock left after every key was read: {}",
                String::from_utf8_lossy(&lock.key)
            ));
        }
    }
    Ok(())
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
        "soak done in {elapsed:.0?}: {} transactions committed ({} 1PC, {} async commit, {} 2PC), \
         {} visible after recovery, {} gave up; {} crashes survived (kill -9), {} of them before READY; \
         {} anomalies",
        t.committed,
        t.protocols[0],
        t.protocols[1],
        t.protocols[2],
        t.visible,
        t.failed,
        t.crashes,
        t.startup_kills,
        t.anomalies
    )?;
    Ok(())
}
