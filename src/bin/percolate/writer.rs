//! The crash writer: the process that is killed (see the parent module for
//! its transactions and its output).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use percolate::mvcc::TimeStamp;
use percolate::txn::cluster::Cluster;
use percolate::txn::concurrency_manager::MaxTsLimit;
use percolate::txn::oracle::{LocalOracle, SystemClock, TimestampOracle};
use percolate::txn::storage::StorageConfig;
use percolate::{Client, CommitInfo, PessimisticTransaction, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{
    ACCOUNTS_PER_REGION, COUNTERS_PER_REGION, Failure, INITIAL_BALANCE, REGIONS, TxnId, accounts,
    client_config, counters, marker_key, split_keys,
};

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
    // RocksDB first, as `Client::open` does: its LOCK file refuses a second
    // process, and the oracle starts above every commit in the data.
    let engine = percolate::engine::RocksEngine::open(dir.join("db"))?;
    let floor = TimeStamp::new(engine.persisted_ts_ceiling());
    let oracle = Arc::new(PrintingOracle {
        inner: LocalOracle::open_above(dir, Arc::new(SystemClock), floor)?,
    });
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts()?,
        max_ts_limit: Some(MaxTsLimit::new(
            oracle.clone(),
            MaxTsLimit::DEFAULT_ALLOWANCE,
        )),
        ..StorageConfig::default()
    };
    let cluster = Cluster::new(engine, split_keys(), storage);
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
    /// Run as a pessimistic transaction (reads for update, writes that
    /// lock as they go).
    pessimistic: bool,
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
            pessimistic: rng.random_bool(1.0 / 3.0),
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
    if plan.pessimistic {
        return report(
            id,
            run_pessimistic(client, id, plan, &value, &accounts, &counters),
            " pessimistic",
        );
    }
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
    report(id, result.map(|((), info)| info), "");
}

/// The plan run as a pessimistic transaction, retried (whole) on retryable
/// errors such as a deadlock, at most 64 times.
fn run_pessimistic(
    client: &Client,
    id: TxnId,
    plan: &Plan,
    value: &str,
    accounts: &[Vec<u8>],
    counters: &[Vec<u8>],
) -> percolate::Result<CommitInfo> {
    let work = |txn: &mut PessimisticTransaction| -> percolate::Result<()> {
        for (r, prefix) in REGIONS.iter().enumerate() {
            for j in 0..plan.markers[r] {
                txn.put(marker_key(prefix, id, j), value)?;
            }
        }
        let counter = &counters[plan.counter];
        let n = number(txn.get_for_update(counter)?);
        txn.put(counter.clone(), (n + 1).to_string())?;
        if let Some((from, to, amount)) = plan.transfer {
            let (a, b) = (&accounts[from], &accounts[to]);
            let balance_a = number(txn.get_for_update(a)?);
            let balance_b = number(txn.get_for_update(b)?);
            let amount = amount.min(balance_a);
            txn.put(a.clone(), (balance_a - amount).to_string())?;
            txn.put(b.clone(), (balance_b + amount).to_string())?;
        }
        Ok(())
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut txn = client.begin_pessimistic()?;
        match work(&mut txn).and_then(|()| txn.commit()) {
            Err(e) if e.is_retryable() && attempt < 64 => {
                std::thread::sleep(std::time::Duration::from_millis(rand::random_range(1..=20)));
            }
            other => return other,
        }
    }
}

/// Reports transaction `id`'s outcome; `mode` follows the protocol of a
/// commit (empty, or " pessimistic").
fn report(id: TxnId, result: percolate::Result<CommitInfo>, mode: &str) {
    match result {
        Ok(info) => line(format_args!(
            "COMMITTED {id} {} {:?}{mode}",
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
    Ok(number(txn.get(key)?))
}

fn number(value: Option<Vec<u8>>) -> u64 {
    value
        .as_deref()
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0)
}
