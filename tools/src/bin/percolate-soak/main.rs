//! `percolate-soak`: the crash harness, kept out of the user's `percolate`
//! command.
//!
//! ```text
//! percolate-soak --dir DATA soak --transactions 1000000 --kill-every 2
//! ```
//!
//! `soak` runs the crash writer (the hidden `crash-writer` command of this
//! same binary) in a child process, kills it with SIGKILL over and over and
//! checks the whole directory after each kill against a ledger of what the
//! writers reported committed (see `crash.rs`). It exits with status 1 if
//! any check failed. `tools/tests/crash.rs` drives the same writer and
//! checks.

#[path = "crash.rs"]
mod crash;
mod observers;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Runs percolate writer processes, kills them, and checks what survives.
#[derive(Debug, Parser)]
#[command(name = "percolate-soak", version)]
struct Cli {
    /// The data directory (created if missing).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs writer processes on DIR, kills each with SIGKILL at a random
    /// moment, and checks after every kill that no commit was lost, none is
    /// half visible, the bank and counters add up and timestamps never go
    /// back.
    Soak(SoakArgs),
    /// The writer that `soak` and the crash tests kill (an internal
    /// command).
    #[command(hide = true)]
    CrashWriter(CrashWriterArgs),
    /// The observer writer that `tools/tests/observers_crash.rs` kills
    /// (an internal command).
    #[command(hide = true)]
    ObserverWriter(ObserverWriterArgs),
}

#[derive(Debug, Args)]
struct ObserverWriterArgs {
    /// Seeds the documents.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many document ids.
    #[arg(long, default_value_t = 40)]
    documents: u32,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Exit after this many document writes (default: run until killed).
    #[arg(long)]
    writes: Option<u64>,
}

#[derive(Debug, Args)]
struct SoakArgs {
    /// Stop once this many transactions were reported committed.
    #[arg(long, default_value_t = 1_000_000)]
    transactions: u64,
    /// Mean seconds a writer runs before it is killed: a finite number
    /// above zero.
    #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
    kill_every: f64,
    /// Threads of each writer.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Seeds the kill points and the writers (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Debug, Args)]
struct CrashWriterArgs {
    /// The round: the first part of every transaction id.
    #[arg(long)]
    round: u64,
    /// Threads running transactions.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Seeds the choice of transactions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Exit after this many transactions (default: run until killed).
    #[arg(long)]
    transactions: Option<u64>,
}

/// A failure to report: one line on stderr.
type Failure = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    let outcome = match cli.command {
        Command::Soak(args) => soak(&cli.dir, &args, &mut out),
        Command::CrashWriter(args) => {
            let args = crash::writer::WriterArgs {
                round: args.round,
                threads: args.threads,
                seed: args.seed,
                transactions: args.transactions,
            };
            crash::writer::run_writer(&cli.dir, &args).map_err(|e| e as Failure)
        }
        Command::ObserverWriter(args) => {
            let args = observers::ObserverWriterArgs {
                seed: args.seed,
                documents: args.documents,
                workers: args.workers,
                writes: args.writes,
            };
            observers::run(&cli.dir, &args)
        }
    };
    match outcome.and_then(|()| Ok(out.flush()?)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.to_string().replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// `soak`: see `crash::soak`.
fn soak(dir: &std::path::Path, args: &SoakArgs, out: &mut impl Write) -> Result<(), Failure> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let exe = std::env::current_exe()?;
    let args = crash::SoakArgs {
        transactions: args.transactions,
        kill_every: args.kill_every,
        threads: args.threads,
        seed,
    };
    let totals = crash::soak(&exe, dir, &args, out).map_err(|e| e as Failure)?;
    if totals.anomalies > 0 {
        return Err(format!("soak found {} anomalies", totals.anomalies).into());
    }
    Ok(())
}

/// `--kill-every`: a finite number of seconds above zero.
fn positive_seconds(arg: &str) -> Result<f64, String> {
    let seconds: f64 = arg.parse().map_err(|e| format!("{e}"))?;
    if seconds.is_finite() && seconds > 0.0 {
        Ok(seconds)
    } else {
        Err(format!(
            "{arg} is not a finite number of seconds above zero"
        ))
    }
}
