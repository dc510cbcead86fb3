//! The crash writer: the process that is killed (see the parent module for
//! its transactions and its output).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use percolate::{Client, CommitInfo, PessimisticTransaction, Transaction};
use percolate_engine::RocksEngine;
use percolate_mvcc::{Key, LockType, TimeStamp};
use percolate_txn::client::{lock_directory, timestamp_floor};
use percolate_txn::cluster::Cluster;
use percolate_txn::oracle::{LocalOracle, SystemClock, TimestampOracle};
use percolate_txn::storage::{MaxTsLimit, StorageConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{
    ACCOUNTS_PER_REGION, COUNTERS_PER_REGION, DoomedValue, Failure, GC_EVERY, GC_LAG,
    INITIAL_BALANCE, LONG_VALUE, MarkerValue, REGIONS, TxnId, accounts, check::locks_below,
    client_config, counters, doomed_key, marker_key, split_keys,
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

    fn advance_past(&self, ts: TimeStamp) -> percolate::Result<()> {
        self.inner.advance_past(ts)?;
        line(format_args!("TS {}", ts.into_inner()));
        Ok(())
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
/// oracle. Returns the directory's lock too, to be held as long as the
/// client.
fn open_writer(dir: &Path) -> Result<(Client, File), Failure> {
    std::fs::create_dir_all(dir)?;
    // As `Client::open_with` does: percolate's own lock on the directory
    // first (RocksDB's LOCK file alone can be deleted under a running
    // process), then RocksDB, and the oracle starts above every commit
    // and every lock in the data.
    let dir_lock = lock_directory(dir)?;
    let engine = RocksEngine::open(dir.join("db"))?;
    let floor = timestamp_floor(&engine)?;
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
    Ok((Client::new(cluster, oracle, client_config()), dir_lock))
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

/// The writer process: runs transactions until killed (or done), with a
/// GC thread and a lock resolver beside them.
pub fn run_writer(dir: &Path, args: &WriterArgs) -> Result<(), Failure> {
    let (client, _dir_lock) = open_writer(dir)?;
    // Every lock below this ts was left by an earlier process.
    let first_ts = client.current_ts()?;
    {
        let client = client.clone();
        std::thread::spawn(move || resolve_dead_locks(&client, first_ts));
    }
    open_bank(&client)?;
    line(format_args!("READY"));
    {
        let client = client.clone();
        std::thread::spawn(move || collect_garbage(&client));
    }
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
                    run_one(&client, id, &Plan::random(&mut rng, id));
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

/// The lock resolver: reads every key that an earlier (dead) process left
/// locked, which resolves the lock (its transaction rolled forward or
/// back), and takes over its pessimistic locks. A read pushes a lock whose
/// TTL has not run out yet rather than wait for it, so the resolver
/// reads again until the lock is gone (at most [`RESOLVE_FOR`]): it runs
/// until the dead writer's locks expired and were resolved, and the soak
/// kills the writer while it does.
fn resolve_dead_locks(client: &Client, below: TimeStamp) {
    let locks = match locks_below(client, below) {
        Ok(locks) => locks,
        Err(e) => {
            line(format_args!("RESOLVE-FAILED {e}"));
            return;
        }
    };
    line(format_args!("RESOLVE {}", locks.len()));
    let mut failed = 0;
    for lock in &locks {
        let started = Instant::now();
        let result = loop {
            let result = if lock.lock_type == LockType::Pessimistic {
                client.begin_pessimistic().and_then(|mut txn| {
                    txn.lock_keys([lock.key.clone()])?;
                    txn.rollback()
                })
            } else {
                client
                    .snapshot_latest()
                    .and_then(|snapshot| snapshot.get(&lock.key).map(drop))
            };
            let storage = client.cluster().region_for(&lock.key).storage();
            let left = storage
                .mvcc_by_key(Key::from_raw(&lock.key))
                .map(|info| info.lock.is_some_and(|l| l.ts == lock.lock_version));
            match left {
                Ok(true) if started.elapsed() < RESOLVE_FOR => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(true) => break Err(()),
                Ok(false) => break result.map_err(drop),
                Err(_) => break Err(()),
            }
        };
        failed += u64::from(result.is_err());
    }
    line(format_args!("RESOLVED {} {failed}", locks.len()));
}

/// How long the lock resolver waits for one lock to expire (well over the
/// writer's lock TTL).
const RESOLVE_FOR: Duration = Duration::from_secs(5);

/// The GC thread: every [`GC_EVERY`], collects the garbage at a safe point
/// [`GC_LAG`] behind the oracle (never moving back).
fn collect_garbage(client: &Client) {
    let mut last = TimeStamp::zero();
    loop {
        let Ok(now) = client.current_ts() else {
            return;
        };
        let lag = GC_LAG.as_millis() as u64;
        let safe_point = TimeStamp::compose(now.physical().saturating_sub(lag), 0);
        if safe_point > last {
            last = safe_point;
            line(format_args!("GC {}", safe_point.into_inner()));
            match client.gc(safe_point) {
                Ok(info) => line(format_args!(
                    "GC-DONE {} {}",
                    safe_point.into_inner(),
                    info.deleted_versions
                )),
                Err(e) => line(format_args!(
                    "GC-FAILED {} {}",
                    safe_point.into_inner(),
                    e.to_string().replace('\n', " ")
                )),
            }
        }
        std::thread::sleep(GC_EVERY);
    }
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
    /// The markers' length (0: short values; else one of [`LONG_VALUE`]).
    len: usize,
    /// Write the doomed key, with a value this long (0: short).
    doomed: Option<usize>,
    /// Delete this transaction's doomed key, if a read finds it.
    victim: Option<TxnId>,
}

impl Plan {
    /// A random plan for transaction `id`: one region and few keys (1PC),
    /// several regions and few keys (async commit) or many keys (2PC).
    fn random(rng: &mut impl Rng, id: TxnId) -> Plan {
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
        let long = |rng: &mut dyn rand::RngCore, p: f64| {
            if rng.random_bool(p) {
                rng.random_range(LONG_VALUE)
            } else {
                0
            }
        };
        let len = long(rng, 0.2);
        // Doomed keys stay in the regions the markers use, so that a
        // one-region plan stays 1PC.
        let doomed =
            (markers[id.doomed_region()] > 0 && rng.random_bool(0.5)).then(|| long(rng, 0.5));
        let victim = if rng.random_bool(0.5) {
            let region = regions[rng.random_range(0..regions.len())];
            Self::victim(rng, id, region)
        } else {
            None
        };
        Plan {
            markers,
            counter,
            transfer,
            pessimistic: rng.random_bool(1.0 / 3.0),
            len,
            doomed,
            victim,
        }
    }

    /// A transaction before `id` (of its round, or of the round before)
    /// whose doomed key is in region `region`.
    fn victim(rng: &mut impl Rng, id: TxnId, region: usize) -> Option<TxnId> {
        let (round, around) = if id.round > 0 && rng.random_bool(0.5) {
            (id.round - 1, id.seq + 200)
        } else {
            (id.round, id.seq)
        };
        let candidate = rng.random_range(around.saturating_sub(200)..=around);
        let seq = candidate - candidate % 3 + region as u64;
        let victim = TxnId { round, seq };
        (victim < id).then_some(victim)
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

    /// What the markers hold, `deleted` being the victim whose doomed key
    /// was found and deleted.
    fn value(&self, id: TxnId, deleted: Option<TxnId>) -> Vec<u8> {
        MarkerValue {
            id,
            markers: self.marker_count(),
            counter: self.counter,
            doomed: self.doomed.is_some(),
            deleted,
            len: self.len,
        }
        .encode()
    }
}

/// Runs transaction `id` (retrying conflicts) and reports it.
fn run_one(client: &Client, id: TxnId, plan: &Plan) {
    let (accounts, counters) = (accounts(), counters());
    if plan.pessimistic {
        return report(
            id,
            run_pessimistic(client, id, plan, &accounts, &counters),
            " pessimistic",
        );
    }
    let result = client.with_retry_info(|txn| {
        let mut deleted = None;
        if let Some(victim) = plan.victim {
            let key = doomed_key(victim);
            if txn.get(&key)?.is_some() {
                txn.delete(key);
                deleted = Some(victim);
            }
        }
        let value = plan.value(id, deleted);
        for (r, prefix) in REGIONS.iter().enumerate() {
            for j in 0..plan.markers[r] {
                txn.put(marker_key(prefix, id, j), value.clone());
            }
        }
        if let Some(len) = plan.doomed {
            txn.put(doomed_key(id), DoomedValue::encode(id, len));
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
    accounts: &[Vec<u8>],
    counters: &[Vec<u8>],
) -> percolate::Result<CommitInfo> {
    let work = |txn: &mut PessimisticTransaction| -> percolate::Result<()> {
        let mut deleted = None;
        if let Some(victim) = plan.victim {
            let key = doomed_key(victim);
            if txn.get_for_update(&key)?.is_some() {
                txn.delete(key)?;
                deleted = Some(victim);
            }
        }
        let value = plan.value(id, deleted);
        for (r, prefix) in REGIONS.iter().enumerate() {
            for j in 0..plan.markers[r] {
                txn.put(marker_key(prefix, id, j), value.clone())?;
            }
        }
        if let Some(len) = plan.doomed {
            txn.put(doomed_key(id), DoomedValue::encode(id, len))?;
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
