//! The checks after a kill, on the reopened directory (see the parent
//! module for what they prove).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use percolate::engine::Cf;
use percolate::mvcc::{Key, LockInfo, LockType, TimeStamp, WriteType};
use percolate::{Client, Transaction};

use super::{
    Failure, INITIAL_BALANCE, REGIONS, TxnId, WriterReport, accounts, counters, marker_key, number,
    round_range, split_keys,
};

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
            if let Some((key, _)) = txn
                .scan_reverse(start.as_slice()..end.as_slice())
                .batch_size(1)
                .next()
                .transpose()?
            {
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
    /// ... of which pessimistic transactions.
    pub pessimistic: u64,
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
        client: percolate::ClientConfig {
            // A dead writer's pessimistic lock is resolved as soon as the
            // lock request meets it (its TTL has run out by now).
            lock_wait_timeout: Duration::from_millis(10),
            ..percolate::ClientConfig::default()
        },
        ..percolate::OpenOptions::default()
    };
    Ok(Client::open_with(dir, options)?)
}

/// A visible transaction's markers, as found.
#[derive(Debug, Default)]
struct Found {
    keys: Vec<Vec<u8>>,
    markers: usize,
    counter: usize,
}

/// Reopens `dir` and checks what the writer of `report` left.
pub fn check(
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
    take_over_pessimistic_locks(&client)?;
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
        for (key, value) in txn
            .scan(start.as_slice()..end.as_slice())
            .collect::<std::result::Result<Vec<_>, _>>()?
        {
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

/// The killed writer's pessimistic locks block no read, so the reads above
/// leave them, as they leave the data; the next writer of such a key
/// resolves the lock. Do as that writer: lock each key pessimistically,
/// which resolves the dead transaction's lock (rolled back if it never
/// committed, committed if its primary says so), then let go.
fn take_over_pessimistic_locks(client: &Client) -> Result<(), Failure> {
    for lock in locks_left(client)? {
        if lock.lock_type == LockType::Pessimistic {
            let mut txn = client.begin_pessimistic()?;
            txn.lock_keys([lock.key])?;
            txn.rollback()?;
        }
    }
    Ok(())
}

/// Every lock in the store, region by region.
fn locks_left(client: &Client) -> Result<Vec<LockInfo>, Failure> {
    let mut all = Vec::new();
    for region in client.cluster().regions() {
        all.extend(region.storage().scan_lock(
            Some(Key::from_raw(region.start_key())),
            region.end_key().map(Key::from_raw),
            TimeStamp::max(),
            0,
        )?);
    }
    Ok(all)
}

/// Every key the writer wrote has been read, and its pessimistic locks
/// taken over: no lock may be left.
fn check_no_locks(client: &Client, anomalies: &mut Vec<String>) -> Result<(), Failure> {
    for lock in locks_left(client)? {
        anomalies.push(format!(
            "lock left after every key was read: {}",
            String::from_utf8_lossy(&lock.key)
        ));
    }
    Ok(())
}
