//! The bank: money moves between accounts in concurrent transactions while
//! an auditor checks, at snapshots, that none is created or lost.
//!
//! ```text
//! cargo run --release --example bank -- --seconds 10
//! cargo run --release --example bank -- --accounts 100 --threads 8 --transfers 50000 --dir /tmp/bank
//! ```
//!
//! `--accounts` accounts (`acct/00000000`, ...) start with 1,000 each, in
//! `--regions` regions split at account boundaries. `--threads` threads
//! each move a random amount between two random accounts, one
//! [`Client::with_retry_info`] transaction per transfer: one that touches
//! one region commits in one phase (1PC), one that crosses regions by
//! async commit. Meanwhile an auditor scans every account in read-only
//! transactions, across all regions at one snapshot, and checks the total.
//! Snapshot isolation says the total never changes: the program exits with
//! status 1 if any audit, or the final one, sees another.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use percolate::mvcc::TimeStamp;
use percolate::{Client, CommitProtocol, OpenOptions};

/// Each account's balance at the start.
const INITIAL_BALANCE: u64 = 1_000;
/// The largest amount of one transfer.
const MAX_AMOUNT: u64 = 100;

/// Concurrent transfers between accounts, audited at snapshots.
#[derive(Debug, Parser)]
struct Args {
    /// Number of accounts.
    #[arg(long, default_value_t = 1000)]
    accounts: u64,
    /// Regions the accounts are split into.
    #[arg(long, default_value_t = 4)]
    regions: u64,
    /// Threads doing transfers.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// How long to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Stop after this many transfers instead of after `--seconds`.
    #[arg(long)]
    transfers: Option<u64>,
    /// Data directory, kept afterwards (default: a temporary one, deleted).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.accounts < 2 || args.threads == 0 {
        return Err("need at least 2 accounts and 1 thread".into());
    }
    let temp = tempfile::tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let client = Client::open_with(
        &dir,
        OpenOptions {
            split_keys: split_keys(args.accounts, args.regions),
            ..OpenOptions::default()
        },
    )?;
    println!(
        "bank: {} accounts x {INITIAL_BALANCE} in {} regions, {} threads, in {}",
        args.accounts,
        client.cluster().regions().len(),
        args.threads,
        dir.display()
    );
    open_accounts(&client, args.accounts)?;

    let bank = Arc::new(Bank::new(client, &args));
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let bank = bank.clone();
            std::thread::spawn(move || bank.transfer_until_done())
        })
        .collect();
    let auditor = {
        let bank = bank.clone();
        std::thread::spawn(move || bank.audit_until_done())
    };
    let elapsed = bank.report_until_done();
    for worker in workers {
        worker.join().expect("transfer thread panicked")?;
    }
    auditor.join().expect("auditor thread panicked")?;

    let final_audit = bank.audit()?;
    bank.print_summary(elapsed, &final_audit);
    if bank.bad_audits.load(Ordering::Relaxed) > 0 || !final_audit.ok {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The key of account `n`: zero-padded, so keys sort like numbers.
fn account(n: u64) -> Vec<u8> {
    format!("acct/{n:08}").into_bytes()
}

/// Keys cutting the accounts into `regions` ranges of equal size.
fn split_keys(accounts: u64, regions: u64) -> Vec<Vec<u8>> {
    (1..regions.max(1))
        .map(|i| account(i * accounts / regions))
        .collect()
}

/// A balance is stored as a decimal string, so that the CLI shows it
/// (`percolate --dir DIR get acct/00000042`).
fn balance(value: Option<&[u8]>) -> u64 {
    let value = value.expect("every account exists");
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("a balance is a decimal number")
}

/// Sets every account to the initial balance, in one transaction (by 2PC
/// when it has more keys than async commit takes, 256 by default).
fn open_accounts(client: &Client, accounts: u64) -> percolate::Result<()> {
    let started = Instant::now();
    let ((), info) = client.with_retry_info(|txn| {
        for n in 0..accounts {
            txn.put(account(n), INITIAL_BALANCE.to_string());
        }
        Ok(())
    })?;
    println!(
        "opened {accounts} accounts in {:.0?} ({:?}, commit_ts {})",
        started.elapsed(),
        info.protocol,
        info.commit_ts
    );
    Ok(())
}

/// What one audit saw.
struct Audit {
    /// The read-only transaction's start_ts.
    snapshot: TimeStamp,
    /// Accounts found.
    accounts: u64,
    /// Their balances, summed.
    total: u64,
    /// Every account found, and the total what they started with.
    ok: bool,
}

/// The shared state of a run: the client, when to stop, and counters.
struct Bank {
    client: Client,
    accounts: u64,
    started: Instant,
    deadline: Option<Instant>,
    /// `--transfers`, and how many of them are still to start.
    target: Option<u64>,
    budget: Option<AtomicU64>,
    done: AtomicBool,
    transfers: AtomicU64,
    /// Attempts beyond the first: conflicts and locks that made
    /// `with_retry_info` start over.
    retries: AtomicU64,
    /// Transfers that gave up (out of retries, or a non-retryable error).
    failed: AtomicU64,
    one_pc: AtomicU64,
    async_commit: AtomicU64,
    two_pc: AtomicU64,
    audits: AtomicU64,
    bad_audits: AtomicU64,
    /// Transfer latencies (µs) since the last progress line.
    latencies: Mutex<Vec<u32>>,
}

impl Bank {
    fn new(client: Client, args: &Args) -> Self {
        let started = Instant::now();
        Bank {
            client,
            accounts: args.accounts,
            started,
            deadline: match args.transfers {
                Some(_) => None,
                None => Some(started + Duration::from_secs(args.seconds)),
            },
            target: args.transfers,
            budget: args.transfers.map(AtomicU64::new),
            done: AtomicBool::new(false),
            transfers: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            one_pc: AtomicU64::new(0),
            async_commit: AtomicU64::new(0),
            two_pc: AtomicU64::new(0),
            audits: AtomicU64::new(0),
            bad_audits: AtomicU64::new(0),
            latencies: Mutex::new(Vec::new()),
        }
    }

    fn done(&self) -> bool {
        self.done.load(Ordering::Relaxed)
    }

    /// Claims the right to start one more transfer.
    fn next_transfer(&self) -> bool {
        if self.done() {
            return false;
        }
        match &self.budget {
            Some(budget) => budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
            None => true,
        }
    }

    fn transfer_until_done(&self) -> percolate::Result<()> {
        while self.next_transfer() {
            let from = rand::random_range(0..self.accounts);
            let to = (from + rand::random_range(1..self.accounts)) % self.accounts;
            let amount = rand::random_range(1..=MAX_AMOUNT);
            let started = Instant::now();
            match self.transfer(from, to, amount) {
                Ok(protocol) => {
                    self.transfers.fetch_add(1, Ordering::Relaxed);
                    self.count_protocol(protocol);
                    let micros = started.elapsed().as_micros().min(u32::MAX.into()) as u32;
                    self.latencies.lock().unwrap().push(micros);
                }
                // Another run of retries would likely meet the same: count
                // it and go on with another transfer.
                Err(e) if e.is_retryable() => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.done.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Moves up to `amount` (what `from` has) from one account to another.
    /// The reads are at the transaction's snapshot; the commit fails with
    /// a write conflict, and `with_retry_info` starts over, if another
    /// transfer committed to either account since.
    fn transfer(&self, from: u64, to: u64, amount: u64) -> percolate::Result<CommitProtocol> {
        let mut attempts = 0;
        let (_, info) = self.client.with_retry_info(|txn| {
            attempts += 1;
            let (from, to) = (account(from), account(to));
            let balances = txn.batch_get(&[&from, &to])?;
            let from_balance = balance(balances[0].as_deref());
            let to_balance = balance(balances[1].as_deref());
            let amount = amount.min(from_balance);
            txn.put(from, (from_balance - amount).to_string());
            txn.put(to, (to_balance + amount).to_string());
            Ok(())
        })?;
        self.retries.fetch_add(attempts - 1, Ordering::Relaxed);
        Ok(info.protocol)
    }

    fn count_protocol(&self, protocol: CommitProtocol) {
        let counter = match protocol {
            CommitProtocol::OnePc => &self.one_pc,
            CommitProtocol::AsyncCommit => &self.async_commit,
            _ => &self.two_pc,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn audit_until_done(&self) -> percolate::Result<()> {
        while !self.done() {
            match self.audit() {
                Ok(audit) if !audit.ok => {
                    self.bad_audits.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "AUDIT FAILED: total {} over {} accounts at snapshot ts {}, expected {}",
                        audit.total,
                        audit.accounts,
                        audit.snapshot,
                        self.expected_total()
                    );
                }
                Ok(_) => {}
                // A lock of a transfer that did not go away in time: audit
                // again at a new snapshot.
                Err(e) if e.is_retryable() => continue,
                Err(e) => {
                    self.done.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
            self.audits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sums every account at one snapshot: a read-only transaction whose
    /// scan crosses every region, each balance read where the scan holds
    /// it (`Scan::visit`).
    fn audit(&self) -> percolate::Result<Audit> {
        let txn = self.client.begin()?;
        let mut total = 0;
        let accounts = txn
            .scan(account(0)..account(self.accounts))
            .visit(|_, value| {
                total += balance(Some(value));
                std::ops::ControlFlow::Continue(())
            })? as u64;
        let audit = Audit {
            snapshot: txn.start_ts(),
            accounts,
            total,
            ok: accounts == self.accounts && total == self.expected_total(),
        };
        txn.rollback()?;
        Ok(audit)
    }

    fn expected_total(&self) -> u64 {
        self.accounts * INITIAL_BALANCE
    }

    /// Prints a progress line every second until the run is over (the
    /// deadline passed, or every transfer of `--transfers` finished).
    /// Returns how long the run took.
    fn report_until_done(&self) -> Duration {
        let mut line = ProgressLine::default();
        let mut last_line = Instant::now();
        let mut all_latencies = Vec::new();
        while !self.done() {
            std::thread::sleep(Duration::from_millis(50));
            let over = match (&self.deadline, &self.budget) {
                (Some(deadline), _) => Instant::now() >= *deadline,
                (None, Some(_)) => {
                    let finished = self.transfers.load(Ordering::Relaxed)
                        + self.failed.load(Ordering::Relaxed);
                    Some(finished) >= self.target
                }
                (None, None) => unreachable!("a run has a deadline or a budget"),
            };
            if over {
                self.done.store(true, Ordering::Relaxed);
            } else if last_line.elapsed() >= Duration::from_secs(1) {
                let mut window = std::mem::take(&mut *self.latencies.lock().unwrap());
                line.print(self, &mut window, last_line.elapsed());
                all_latencies.append(&mut window);
                last_line = Instant::now();
            }
        }
        let elapsed = self.started.elapsed();
        let mut latencies = self.latencies.lock().unwrap();
        latencies.append(&mut all_latencies);
        elapsed
    }

    fn print_summary(&self, elapsed: Duration, final_audit: &Audit) {
        let elapsed = elapsed.as_secs_f64();
        let transfers = self.transfers.load(Ordering::Relaxed);
        let p99 = percentile(&mut self.latencies.lock().unwrap(), 0.99);
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        println!("---");
        println!(
            "transfers    {transfers} in {elapsed:.1} s: {:.0}/s, p99 latency {:.1} ms",
            transfers as f64 / elapsed,
            p99 as f64 / 1000.0
        );
        println!(
            "commits      1PC {}, async commit {}, 2PC {}",
            count(&self.one_pc),
            count(&self.async_commit),
            count(&self.two_pc)
        );
        println!(
            "aborts       {} retried (conflicts, locks), {} gave up",
            count(&self.retries),
            count(&self.failed)
        );
        println!(
            "audits       {}, {} with a wrong total",
            count(&self.audits),
            count(&self.bad_audits)
        );
        println!(
            "final total  {} over {} accounts at snapshot ts {}: {}",
            final_audit.total,
            final_audit.accounts,
            final_audit.snapshot,
            if final_audit.ok {
                "ok".to_owned()
            } else {
                format!("WRONG, expected {}", self.expected_total())
            }
        );
    }
}

/// Counters at the previous progress line.
#[derive(Default)]
struct ProgressLine {
    transfers: u64,
    retries: u64,
}

impl ProgressLine {
    fn print(&mut self, bank: &Bank, latencies: &mut [u32], elapsed: Duration) {
        let transfers = bank.transfers.load(Ordering::Relaxed);
        let retries = bank.retries.load(Ordering::Relaxed);
        println!(
            "[{:>3}s] {:>6.0} transfers/s  {:>4} retries  {} gave up  {:>5} audits  p99 {:.1} ms",
            bank.started.elapsed().as_secs(),
            (transfers - self.transfers) as f64 / elapsed.as_secs_f64(),
            retries - self.retries,
            bank.failed.load(Ordering::Relaxed),
            bank.audits.load(Ordering::Relaxed),
            f64::from(percentile(latencies, 0.99)) / 1000.0,
        );
        self.transfers = transfers;
        self.retries = retries;
    }
}

/// The `q` quantile of `values` (0 when empty); sorts them.
fn percentile(values: &mut [u32], q: f64) -> u32 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}
