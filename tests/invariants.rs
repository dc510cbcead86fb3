//! Bank and counter invariants under concurrency, with clients that die
//! mid-commit and locks that expire.
//!
//! On RocksDB over three regions (`[.., "g")`, `["g", "p")`, `["p", ..)`),
//! with the oracle on a [`ManualClock`] that a ticker thread runs at four
//! times real speed (so that the dead clients' locks, 50 ms of TTL, expire
//! within about 12 ms of real time, while the live clients' 20 s TTL never
//! runs out):
//!
//! * worker threads run random transfers between 12 accounts, increments
//!   of 6 counters, and both at once, through [`Client::with_retry_info`];
//!   their shapes give 1PC (one region), async commit (two keys over two
//!   regions) and 2PC (three keys over several regions);
//! * an injector thread plays clients that die mid-commit: each reads at
//!   its start_ts like a real transaction, then sends some or all of its
//!   prewrites straight to the regions and walks away (a bare 2PC prewrite,
//!   2PC with only the primary committed, a complete async-commit prewrite,
//!   an async-commit prewrite missing a secondary). Each also writes a
//!   marker key, so that its fate can be read afterwards;
//! * an auditor reads every account and counter at snapshots taken at
//!   random moments (and held a random while before reading), through
//!   batch gets and through scans across the regions.
//!
//! Checked: every audit sees the bank's total; the counters' sum never goes
//! down from one snapshot to a later one; each dead client's transaction is
//! committed exactly when its commit point was reached (the 2PC primary
//! committed, or every async-commit prewrite succeeded) and rolled back
//! otherwise; at the end each counter equals the increments of the workers'
//! committed transactions plus those of the dead transactions that
//! committed; no lock is left.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use percolate::mvcc::{Key, TimeStamp};
use percolate::txn::actions::prewrite::Mutation;
use percolate::txn::cluster::Cluster;
use percolate::txn::commands::Prewrite;
use percolate::txn::concurrency_manager::MaxTsLimit;
use percolate::txn::oracle::{Clock, LocalOracle, ManualClock, TimestampOracle};
use percolate::txn::storage::StorageConfig;
use percolate::{Client, ClientConfig, CommitProtocol, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const REGIONS: [&str; 3] = ["a", "h", "q"];
const ACCOUNTS_PER_REGION: usize = 4;
const COUNTERS_PER_REGION: usize = 2;
const INITIAL_BALANCE: u64 = 1_000;
const WORKERS: usize = 4;
const TXNS_PER_WORKER: usize = 300;
/// The dead clients' lock TTL (manual-clock ms).
const DEAD_TTL_MS: u64 = 50;

fn accounts() -> Vec<Vec<u8>> {
    REGIONS
        .iter()
        .flat_map(|p| (0..ACCOUNTS_PER_REGION).map(move |i| format!("{p}/acct/{i}").into_bytes()))
        .collect()
}

/// Counters sit in the regions too, after the accounts: `b/..`, `i/..`,
/// `r/..`.
fn counters() -> Vec<Vec<u8>> {
    ["b", "i", "r"]
        .iter()
        .flat_map(|p| (0..COUNTERS_PER_REGION).map(move |i| format!("{p}/ctr/{i}").into_bytes()))
        .collect()
}

/// The marker of dead client `n` (in the third region).
fn marker(n: u64) -> Vec<u8> {
    format!("x/dead/{n:06}").into_bytes()
}

fn number(value: Option<&[u8]>) -> u64 {
    value.map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap())
}

fn get_number(txn: &Transaction, key: &[u8]) -> percolate::Result<u64> {
    Ok(number(txn.get(key)?.as_deref()))
}

/// A client over the three regions of `dir`, its oracle on `clock`.
fn open_clocked(dir: &Path, clock: &Arc<ManualClock>, config: ClientConfig) -> Client {
    let oracle = Arc::new(LocalOracle::open_with_clock(dir, clock.clone()).unwrap());
    let storage = StorageConfig {
        initial_max_ts: oracle.get_ts().unwrap(),
        max_ts_limit: Some(MaxTsLimit::new(
            oracle.clone(),
            MaxTsLimit::DEFAULT_ALLOWANCE,
        )),
        ..Default::default()
    };
    let split = vec![b"g".to_vec(), b"p".to_vec()];
    let cluster = Cluster::open(dir.join("db"), split, storage).unwrap();
    Client::new(cluster, oracle, config)
}

/// What the threads share.
struct Shared {
    client: Client,
    clock: Arc<ManualClock>,
    done: AtomicBool,
    /// Committed increments of each counter by the workers.
    increments: Vec<AtomicU64>,
    /// Worker commits by protocol: 1PC, async commit, 2PC.
    protocols: [AtomicU64; 3],
    /// Worker transactions that gave up (their writes must not show).
    gave_up: Mutex<Vec<String>>,
    /// Dead clients: marker number -> (counter, committed or not).
    dead: Mutex<BTreeMap<u64, (usize, bool)>>,
    audits: AtomicU64,
    /// Every broken invariant seen by a thread.
    anomalies: Mutex<Vec<String>>,
}

impl Shared {
    fn anomaly(&self, text: String) {
        self.anomalies.lock().unwrap().push(text);
    }
}

/// A worker: random transfers, increments, and both.
fn work(s: &Shared, seed: u64) {
    let (accounts, counters) = (accounts(), counters());
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..TXNS_PER_WORKER {
        let kind = rng.random_range(0..3);
        let counter = (kind != 1).then(|| rng.random_range(0..counters.len()));
        let transfer = (kind != 0).then(|| {
            let from = rng.random_range(0..accounts.len());
            let to = (from + rng.random_range(1..accounts.len())) % accounts.len();
            (from, to, rng.random_range(1..=200))
        });
        let result = s.client.with_retry_info(|txn| {
            if let Some(c) = counter {
                let n = get_number(txn, &counters[c])?;
                txn.put(counters[c].clone(), (n + 1).to_string());
            }
            if let Some((from, to, amount)) = transfer {
                let (a, b) = (&accounts[from], &accounts[to]);
                let (balance_a, balance_b) = (get_number(txn, a)?, get_number(txn, b)?);
                let amount = amount.min(balance_a);
                txn.put(a.clone(), (balance_a - amount).to_string());
                txn.put(b.clone(), (balance_b + amount).to_string());
            }
            Ok(())
        });
        match result {
            Ok(((), info)) => {
                if let Some(c) = counter {
                    s.increments[c].fetch_add(1, Ordering::Relaxed);
                }
                let p = match info.protocol {
                    CommitProtocol::OnePc => 0,
                    CommitProtocol::AsyncCommit => 1,
                    _ => 2,
                };
                s.protocols[p].fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => s.gave_up.lock().unwrap().push(e.to_string()),
        }
    }
}

/// How a dead client dies.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// 2PC: some prewrites sent (maybe all), never committed.
    TwoPcPrewrite,
    /// 2PC: every prewrite, then the primary committed.
    TwoPcPrimaryCommitted,
    /// Async commit: every prewrite (committed by definition).
    AsyncComplete,
    /// Async commit: the primary lists a secondary never prewritten.
    AsyncMissingSecondary,
}

/// One dead client: reads like a transaction, prewrites as `death` says,
/// walks away. Returns (its counter, whether it committed).
fn die(s: &Shared, n: u64, death: Death, rng: &mut StdRng) -> (usize, bool) {
    let (accounts, counters) = (accounts(), counters());
    let client = &s.client;
    let txn = client.begin().unwrap();
    let start_ts = txn.start_ts();
    let c = rng.random_range(0..counters.len());
    let mut writes: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let read = |k: &[u8]| txn.get(k).map(|v| number(v.as_deref()));
    let Ok(count) = read(counters[c].as_slice()) else {
        return (c, false); // a lock it gave up on: it died before writing
    };
    writes.insert(counters[c].clone(), (count + 1).to_string().into_bytes());
    if rng.random_bool(0.5) {
        let n = accounts.len();
        let (from, to) = (rng.random_range(0..n), rng.random_range(0..n));
        if let (true, Ok(a), Ok(b)) = (
            from != to,
            read(accounts[from].as_slice()),
            read(accounts[to].as_slice()),
        ) {
            let amount = rng.random_range(0..=a.min(100));
            writes.insert(
                accounts[from].clone(),
                (a - amount).to_string().into_bytes(),
            );
            writes.insert(accounts[to].clone(), (b + amount).to_string().into_bytes());
        }
    }
    writes.insert(marker(n), c.to_string().into_bytes());
    let primary = writes.keys().next().unwrap().clone();
    // By region, in key order: the primary's group first.
    let mut groups: BTreeMap<usize, Vec<Mutation>> = BTreeMap::new();
    for (k, v) in &writes {
        let region = client.cluster().region_index(k);
        groups
            .entry(region)
            .or_default()
            .push(Mutation::put(Key::from_raw(k), v.clone()));
    }
    let is_async = matches!(death, Death::AsyncComplete | Death::AsyncMissingSecondary);
    let mut secondaries: Vec<Vec<u8>> = writes.keys().skip(1).cloned().collect();
    let mut send = groups.len();
    match death {
        Death::TwoPcPrewrite => send = rng.random_range(1..=groups.len()),
        Death::AsyncMissingSecondary if groups.len() > 1 => send -= 1,
        Death::AsyncMissingSecondary => secondaries.push(format!("y/never/{n}").into_bytes()),
        _ => {}
    }
    let mut all_ok = true;
    for (region, mutations) in groups.into_iter().take(send) {
        let holds_primary = region == client.cluster().region_index(&primary);
        let mut prewrite =
            Prewrite::new(mutations, primary.clone(), start_ts).lock_ttl(DEAD_TTL_MS);
        if is_async {
            let listed = if holds_primary {
                secondaries.clone()
            } else {
                Vec::new()
            };
            prewrite = prewrite.async_commit(listed, TimeStamp::zero());
        }
        let storage = client.cluster().regions()[region].storage();
        match storage.prewrite(prewrite) {
            Ok(r) if r.locks.is_empty() && (!is_async || r.min_commit_ts.is_some()) => {}
            _ => {
                all_ok = false; // conflict or lock: the client dies here
                break;
            }
        }
    }
    let committed = match death {
        Death::TwoPcPrewrite | Death::AsyncMissingSecondary => false,
        Death::AsyncComplete => all_ok,
        Death::TwoPcPrimaryCommitted => all_ok && commit_primary(client, &primary, start_ts),
    };
    (c, committed)
}

/// Commits the primary as a 2PC client would; false if its lock is gone
/// (a reader rolled the transaction back once it expired).
fn commit_primary(client: &Client, primary: &[u8], start_ts: TimeStamp) -> bool {
    let storage = client.cluster().region_for(primary).storage();
    for _ in 0..10 {
        let commit_ts = client.oracle().get_ts().unwrap();
        match storage.commit(vec![Key::from_raw(primary)], start_ts, commit_ts) {
            Ok(_) => return true,
            Err(percolate::Error::Mvcc(percolate::mvcc::Error::CommitTsExpired { .. })) => {}
            Err(_) => return false,
        }
    }
    false
}

/// The injector: a dead client every few milliseconds.
fn inject(s: &Shared, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let deaths = [
        Death::TwoPcPrewrite,
        Death::TwoPcPrimaryCommitted,
        Death::AsyncComplete,
        Death::AsyncMissingSecondary,
    ];
    let mut n = 0;
    while !s.done.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(rng.random_range(2..10)));
        let death = deaths[rng.random_range(0..deaths.len())];
        let fate = die(s, n, death, &mut rng);
        s.dead.lock().unwrap().insert(n, fate);
        n += 1;
    }
}

/// The auditor: the bank's total and the counters' growth at snapshots.
fn audit(s: &Shared, seed: u64) {
    let (accounts, counters) = (accounts(), counters());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut last_sum = 0;
    while !s.done.load(Ordering::Relaxed) {
        let txn = s.client.begin().unwrap();
        thread::sleep(Duration::from_micros(rng.random_range(0..3_000)));
        let (total, counted) = if rng.random_bool(0.5) {
            let sum = |keys: &[Vec<u8>]| -> percolate::Result<u64> {
                let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                Ok(txn
                    .batch_get(&refs)?
                    .iter()
                    .map(|v| number(v.as_deref()))
                    .sum())
            };
            (sum(accounts.as_slice()), sum(counters.as_slice()))
        } else {
            let pairs = match txn
                .scan(..&b"x"[..])
                .collect::<std::result::Result<Vec<_>, _>>()
            {
                Ok(pairs) => pairs,
                // A lock that outlasted the wait: no snapshot read.
                Err(e) if e.is_retryable() => continue,
                Err(e) => {
                    s.anomaly(format!("audit at {}: scan failed: {e}", txn.start_ts()));
                    continue;
                }
            };
            let sum = |part: &str| -> percolate::Result<u64> {
                Ok(pairs
                    .iter()
                    .filter(|(k, _)| k.windows(part.len()).any(|w| w == part.as_bytes()))
                    .map(|(_, v)| number(Some(v)))
                    .sum())
            };
            (sum("/acct/"), sum("/ctr/"))
        };
        let (total, counted) = match (total, counted) {
            (Ok(total), Ok(counted)) => (total, counted),
            // A lock that outlasted the wait: no snapshot read.
            (Err(e), _) | (_, Err(e)) if e.is_retryable() => continue,
            (Err(e), _) | (_, Err(e)) => {
                s.anomaly(format!("audit at {}: read failed: {e}", txn.start_ts()));
                continue;
            }
        };
        if total != INITIAL_BALANCE * accounts.len() as u64 {
            s.anomaly(format!("audit at {}: total {total}", txn.start_ts()));
        }
        if counted < last_sum {
            s.anomaly(format!(
                "audit at {}: counters sum to {counted}, down from {last_sum}",
                txn.start_ts()
            ));
        }
        last_sum = counted;
        s.audits.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the clock at four times real speed.
fn tick(s: &Shared) {
    while !s.done.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(5));
        s.clock.advance(20);
    }
}

#[test]
fn bank_and_counters_hold_with_dead_clients_and_expiring_locks() {
    watchdog(120);
    let seed: u64 = std::env::var("PERCOLATE_INVARIANTS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (PERCOLATE_INVARIANTS_SEED={seed} to replay the choices)");
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = ClientConfig {
        lock_ttl_ms: 20_000,
        // Three keys over two or more regions commit by 2PC.
        max_async_commit_keys: 2,
        ..ClientConfig::default()
    };
    let client = open_clocked(dir.path(), &clock, config);
    client
        .with_retry(|txn| {
            for a in accounts() {
                txn.put(a, INITIAL_BALANCE.to_string());
            }
            Ok(())
        })
        .unwrap();
    let s = Arc::new(Shared {
        client,
        clock,
        done: AtomicBool::new(false),
        increments: counters().iter().map(|_| AtomicU64::new(0)).collect(),
        protocols: Default::default(),
        gave_up: Mutex::default(),
        dead: Mutex::default(),
        audits: AtomicU64::new(0),
        anomalies: Mutex::default(),
    });
    let started = Instant::now();
    let spawn = |f: fn(&Shared, u64), salt: u64| {
        let s = s.clone();
        thread::spawn(move || f(&s, seed ^ salt))
    };
    let background = [spawn(inject, 1), spawn(audit, 2)];
    let ticker = {
        let s = s.clone();
        thread::spawn(move || tick(&s))
    };
    let workers: Vec<_> = (0..WORKERS as u64).map(|w| spawn(work, 100 + w)).collect();
    for w in workers {
        w.join().unwrap();
    }
    s.done.store(true, Ordering::Relaxed);
    for t in background {
        t.join().unwrap();
    }
    ticker.join().unwrap();
    let elapsed = started.elapsed();
    // Every dead client's lock is now long expired, once the oracle's
    // timestamps (whose physical part follows the clock on the oracle's
    // own tick) show it: before, a reader judges the last dead client's
    // lock alive, pushes it, and reads past it, leaving it in place.
    s.clock.advance(10_000);
    let advanced = s.clock.now_ms();
    while s.client.oracle().get_ts().unwrap().physical() < advanced {
        thread::sleep(Duration::from_millis(1));
    }
    final_check(&s);
    let dead = s.dead.lock().unwrap();
    eprintln!(
        "{} worker commits (1PC, async, 2PC: {:?}), {} gave up, {} dead clients ({} committed), \
         {} audits, in {elapsed:?}",
        s.protocols
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .sum::<u64>(),
        s.protocols,
        s.gave_up.lock().unwrap().len(),
        dead.len(),
        dead.values().filter(|(_, committed)| *committed).count(),
        s.audits.load(Ordering::Relaxed)
    );
    let anomalies = s.anomalies.lock().unwrap();
    assert!(anomalies.is_empty(), "{}", anomalies.join("\n"));
    assert!(s.audits.load(Ordering::Relaxed) > 0);
    for (p, name) in s.protocols.iter().zip(["1PC", "async commit", "2PC"]) {
        assert!(p.load(Ordering::Relaxed) > 0, "no worker commit by {name}");
    }
}

/// The end state: the dead clients' fates, the counters, the bank, no lock.
fn final_check(s: &Shared) {
    let txn = s.client.begin().unwrap();
    let dead = s.dead.lock().unwrap();
    let mut expected: Vec<u64> = s
        .increments
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .collect();
    for (n, (c, committed)) in dead.iter() {
        let visible = txn.get(&marker(*n)).unwrap().is_some();
        if visible != *committed {
            s.anomaly(format!(
                "dead client {n}: committed {committed}, but its marker is visible: {visible}"
            ));
        }
        if visible {
            expected[*c] += 1;
        }
    }
    for (key, want) in counters().iter().zip(&expected) {
        let got = get_number(&txn, key).unwrap();
        if got != *want {
            s.anomaly(format!(
                "counter {}: {got}, expected {want}",
                String::from_utf8_lossy(key)
            ));
        }
    }
    let total: u64 = accounts()
        .iter()
        .map(|a| get_number(&txn, a).unwrap())
        .sum();
    if total != INITIAL_BALANCE * accounts().len() as u64 {
        s.anomaly(format!("final total {total}"));
    }
    // The auditor's scan stops before the markers; every key has been read.
    let _ = txn
        .scan::<&[u8]>(..)
        .collect::<std::result::Result<Vec<_>, _>>()
        .unwrap();
    for region in s.client.cluster().regions() {
        let locks = region
            .storage()
            .scan_lock(
                Some(Key::from_raw(region.start_key())),
                region.end_key().map(Key::from_raw),
                TimeStamp::max(),
                0,
            )
            .unwrap();
        if !locks.is_empty() {
            s.anomaly(format!("region {}: locks left {locks:?}", region.id()));
        }
    }
}

/// Aborts the test process if the test is still running after `secs`: a
/// deadlock fails the run instead of hanging it.
fn watchdog(secs: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(secs));
        eprintln!("still running after {secs} s: aborting (a deadlock?)");
        std::process::abort();
    });
}
