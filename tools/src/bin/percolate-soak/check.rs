//! The checks after a kill, on the reopened directory, and the ledger they
//! compare with (see the parent module for what they prove).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use percolate::{Client, Snapshot};
use percolate_engine::Cf;
use percolate_mvcc::{Key, LockInfo, LockType, TimeStamp, WriteType};
use percolate_txn::client::MAX_BATCH;

use super::{
    DoomedValue, Failure, INITIAL_BALANCE, MarkerValue, REGIONS, TxnId, WriterReport, accounts,
    counters, doomed_range, key_id, marker_key, markers_range, number, split_keys,
};

/// The ledger's file name in the data directory.
pub const LEDGER_FILE: &str = "SOAK-LEDGER";
/// The ledger's first line.
const LEDGER_MAGIC: &str = "percolate soak ledger 1";

/// What the ledger holds of one checked round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundRecord {
    /// Transactions of the round visible when it was checked.
    pub visible: u64,
    /// The wrapping sum of their [`TxnId::fingerprint`]s.
    pub fingerprint: u64,
}

/// What the checker carries from one round to the next: the ledger
/// (`DIR/SOAK-LEDGER`, rewritten after every check) and the reports of
/// rounds not checked yet.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// The next round to run.
    pub next_round: u64,
    /// Rounds below this one are recorded: a round missing from `rounds`
    /// had no visible transaction.
    pub recorded_below: u64,
    /// Each recorded round's visible transactions.
    pub rounds: BTreeMap<u64, RoundRecord>,
    /// Whether the bank existed at the last check.
    pub bank_open: bool,
    /// The largest timestamp handed out so far (by a writer or a checker).
    pub last_ts: u64,
    /// The newest GC safe point a writer started a collection at.
    pub safe_point: u64,
    /// The first round whose check found an anomaly: from then on the
    /// data is no baseline, and [`State::load`] refuses the directory.
    pub damaged_at: Option<u64>,
    /// Reports of writers whose rounds are not checked yet.
    pub pending: Vec<WriterReport>,
    /// The ledger's path.
    ledger: PathBuf,
}

impl State {
    /// The state of a directory: its ledger, or, for a directory without
    /// soak data, a new one (written at once). A directory holding soak
    /// data (markers or the bank) but no ledger is refused: its data
    /// cannot be trusted as the baseline.
    pub fn load(dir: &Path) -> Result<State, Failure> {
        let ledger = dir.join(LEDGER_FILE);
        let client = open_checker(dir)?;
        let snapshot = client.snapshot_latest()?;
        let mut newest_round = None;
        for prefix in REGIONS {
            let (start, end) = markers_range(prefix);
            if let Some((key, _)) = snapshot
                .scan_reverse(start.as_slice()..end.as_slice())
                .batch_size(1)
                .next()
                .transpose()?
            {
                let (_, id) = key_id(&key).ok_or("a marker key that does not parse")?;
                newest_round = newest_round.max(Some(id.round));
            }
        }
        let bank = snapshot.get(&accounts()[0])?.is_some();
        let ts = client.current_ts()?.into_inner();
        let mut state = match std::fs::symlink_metadata(&ledger) {
            Ok(_) => {
                let state = State::read_ledger(&ledger)?;
                if let Some(round) = state.damaged_at {
                    return Err(format!(
                        "{}: the check after round {round} found anomalies; damaged data \
                         cannot be the baseline of a new soak",
                        dir.display()
                    )
                    .into());
                }
                state
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if newest_round.is_some() || bank {
                    return Err(format!(
                        "{} holds soak data but no ledger ({LEDGER_FILE}): its state cannot be \
                         taken as the baseline; soak on an empty directory",
                        dir.display()
                    )
                    .into());
                }
                State {
                    ledger,
                    ..State::default()
                }
            }
            Err(e) => return Err(e.into()),
        };
        // Rounds run after the last check (the soak stopped before it):
        // checked, and recorded, with the next round.
        if let Some(round) = newest_round {
            state.next_round = state.next_round.max(round + 1);
        }
        state.last_ts = state.last_ts.max(ts);
        state.write_ledger()?;
        Ok(state)
    }

    fn read_ledger(path: &Path) -> Result<State, Failure> {
        let meta = std::fs::symlink_metadata(path)?;
        if !meta.is_file() || meta.len() > 64 << 20 {
            return Err(format!("{}: not a soak ledger", path.display()).into());
        }
        let text = std::fs::read_to_string(path)?;
        let mut lines = text.lines();
        if lines.next() != Some(LEDGER_MAGIC) {
            return Err(format!("{}: not a soak ledger", path.display()).into());
        }
        let mut state = State {
            ledger: path.to_path_buf(),
            ..State::default()
        };
        let bad = |line: &str| format!("{}: bad line {line:?}", path.display());
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            let n = |i: usize| -> Result<u64, Failure> {
                Ok(words.get(i).ok_or_else(|| bad(line))?.parse()?)
            };
            match words[..] {
                ["next_round", _] => state.next_round = n(1)?,
                ["recorded_below", _] => state.recorded_below = n(1)?,
                ["last_ts", _] => state.last_ts = n(1)?,
                ["safe_point", _] => state.safe_point = n(1)?,
                ["bank", _] => state.bank_open = n(1)? != 0,
                ["damaged_at", _] => state.damaged_at = Some(n(1)?),
                ["round", _, _, fingerprint] => {
                    let record = RoundRecord {
                        visible: n(2)?,
                        fingerprint: u64::from_str_radix(fingerprint, 16).map_err(|_| bad(line))?,
                    };
                    state.rounds.insert(n(1)?, record);
                }
                _ => return Err(bad(line).into()),
            }
        }
        Ok(state)
    }

    /// Writes the ledger: a new file, fsynced, renamed over the old one
    /// (a planted link is replaced, never followed), the directory fsynced.
    fn write_ledger(&self) -> Result<(), Failure> {
        let mut text = format!(
            "{LEDGER_MAGIC}\nnext_round {}\nrecorded_below {}\nlast_ts {}\nsafe_point {}\nbank {}\n",
            self.next_round,
            self.recorded_below,
            self.last_ts,
            self.safe_point,
            u8::from(self.bank_open)
        );
        if let Some(round) = self.damaged_at {
            text.push_str(&format!("damaged_at {round}\n"));
        }
        for (round, r) in &self.rounds {
            text.push_str(&format!(
                "round {round} {} {:016x}\n",
                r.visible, r.fingerprint
            ));
        }
        let dir = self.ledger.parent().ok_or("the ledger has no directory")?;
        let tmp = dir.join(format!("{LEDGER_FILE}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &self.ledger)?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
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
    /// The first few of their FAILED lines (and GC-FAILED lines).
    pub failures: Vec<String>,
    /// Collections the writer finished.
    pub gc_runs: u64,
    /// Write records they deleted.
    pub gc_deleted: u64,
    /// Locks of earlier processes the writer's resolver found.
    pub resolver_found: u64,
    /// Whether the writer died before its resolver went through them.
    pub resolver_killed: bool,
    /// Whether the directory was checked after this round (see
    /// [`run_round`](super::run_round)).
    pub checked: bool,
    /// Transactions of the rounds checked now (this one and any unchecked
    /// one before it) visible after the reopen (committed, reported or not).
    pub visible: u64,
    /// Transactions visible in the whole directory (every round).
    pub audited: u64,
    /// ... of which the markers hold long values.
    pub audited_long: u64,
    /// Doomed keys visible, and deleted by a visible transaction.
    pub audited_doomed: (u64, u64),
    /// Whether the directory was audited at a GC safe point too.
    pub safe_point_audited: bool,
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
#[derive(Debug)]
struct Found {
    /// Markers found per region.
    per_region: [usize; 3],
    /// What they hold (all the same).
    value: MarkerValue,
}

impl Found {
    fn keys(&self, id: TxnId) -> impl Iterator<Item = Vec<u8>> + '_ {
        REGIONS
            .iter()
            .zip(self.per_region)
            .flat_map(move |(prefix, n)| (0..n).map(move |j| marker_key(prefix, id, j)))
    }
}

/// Key-value pairs, as a scan returns them.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The whole directory as one snapshot sees it.
#[derive(Default)]
struct Audit {
    found: BTreeMap<TxnId, Found>,
    doomed_present: u64,
    deleted: u64,
}

/// Reopens `dir`, audits the whole directory and checks what the writers
/// of `state.pending` reported; records the rounds in the ledger.
pub fn check(dir: &Path, state: &mut State, outcome: &mut RoundOutcome) -> Result<(), Failure> {
    let reports = std::mem::take(&mut state.pending);
    let client = open_checker(dir)?;
    let snapshot = client.snapshot_latest()?;
    let start_ts = snapshot.ts().into_inner();
    if start_ts <= state.last_ts {
        outcome.anomalies.push(format!(
            "oracle went back: ts {start_ts} after the restart, {} was handed out before",
            state.last_ts
        ));
    }
    let anomalies = &mut outcome.anomalies;
    let audit = audit(&snapshot, "latest", true, state.bank_open, anomalies)?;
    outcome.audited = audit.found.len() as u64;
    outcome.audited_long = audit.found.values().filter(|f| f.value.len > 0).count() as u64;
    outcome.audited_doomed = (audit.doomed_present, audit.deleted);
    state.bank_open = state.bank_open || snapshot.get(&accounts()[0])?.is_some();

    // Every round against the ledger; the rounds not recorded yet are new.
    let mut by_round: BTreeMap<u64, RoundRecord> = BTreeMap::new();
    for id in audit.found.keys() {
        let r = by_round.entry(id.round).or_default();
        r.visible += 1;
        r.fingerprint = r.fingerprint.wrapping_add(id.fingerprint());
    }
    for round in 0..state.recorded_below {
        let expected = state.rounds.get(&round).copied().unwrap_or_default();
        let now = by_round.get(&round).copied().unwrap_or_default();
        if now != expected {
            anomalies.push(format!(
                "round {round} changed since it was checked: {} transactions visible \
                 (fingerprint {:016x}), the ledger has {} ({:016x})",
                now.visible, now.fingerprint, expected.visible, expected.fingerprint
            ));
        }
    }
    if let Some((&round, _)) = by_round.range(state.next_round..).next() {
        anomalies.push(format!(
            "transactions of round {round}, which never ran, are visible"
        ));
    }
    outcome.visible = by_round
        .range(state.recorded_below..)
        .map(|(_, r)| r.visible)
        .sum();
    for report in &reports {
        check_reported(&client, report, &audit.found, anomalies)?;
    }
    take_over_pessimistic_locks(&client)?;
    check_no_locks(&client, anomalies)?;

    // What GC left must be what a read at its safe point sees.
    let safe_point = reports
        .iter()
        .map(|r| r.gc_safe_point)
        .fold(state.safe_point, u64::max);
    if safe_point > 0 {
        let at = client.snapshot(TimeStamp::new(safe_point));
        audit_at_safe_point(&at, anomalies)?;
        outcome.safe_point_audited = true;
    }

    // The new rounds go into the ledger as they are now.
    for round in state.recorded_below..state.next_round {
        match by_round.get(&round) {
            Some(r) => state.rounds.insert(round, *r),
            None => state.rounds.remove(&round),
        };
    }
    if !anomalies.is_empty() && state.damaged_at.is_none() {
        state.damaged_at = Some(state.next_round.saturating_sub(1));
    }
    state.recorded_below = state.next_round;
    state.safe_point = safe_point;
    state.last_ts = client.current_ts()?.into_inner();
    state.write_ledger()?;
    outcome.compaction_wait = settle_compactions(&client)?;
    Ok(())
}

/// The audit at the safe point, its anomalies marked as such.
fn audit_at_safe_point(at: &Snapshot, anomalies: &mut Vec<String>) -> Result<(), Failure> {
    let mut found = Vec::new();
    audit(at, "at the GC safe point", false, false, &mut found)?;
    anomalies.extend(found);
    Ok(())
}

/// Reads every marker and doomed key `snapshot` sees and checks them
/// against each other, the counters and the bank (see the parent module).
/// `bank_open`: the bank must exist.
fn audit(
    snapshot: &Snapshot,
    at: &str,
    latest: bool,
    bank_open: bool,
    anomalies: &mut Vec<String>,
) -> Result<Audit, Failure> {
    let mut audit = Audit::default();
    let scan = |range: (Vec<u8>, Vec<u8>)| -> Result<Pairs, Failure> {
        Ok(snapshot
            .scan(range.0.as_slice()..range.1.as_slice())
            .batch_size(MAX_BATCH)
            .collect::<Result<Vec<_>, _>>()?)
    };
    for (r, prefix) in REGIONS.iter().enumerate() {
        for (key, value) in scan(markers_range(prefix))? {
            let parsed = key_id(&key).zip(MarkerValue::decode(&value));
            let Some(((_, id), value)) = parsed.filter(|((_, id), v)| *id == v.id) else {
                anomalies.push(format!(
                    "{at}: marker {} holds {:?}",
                    String::from_utf8_lossy(&key),
                    String::from_utf8_lossy(&value)
                ));
                continue;
            };
            let found = audit.found.entry(id).or_insert(Found {
                per_region: [0; 3],
                value,
            });
            if found.value != value {
                anomalies.push(format!("{at}: {id}'s markers differ"));
            }
            found.per_region[r] += 1;
        }
    }
    for (id, f) in &audit.found {
        let seen: usize = f.per_region.iter().sum();
        if seen != f.value.markers {
            anomalies.push(format!(
                "{at}: partial transaction {id}: {seen} of its {} markers visible",
                f.value.markers
            ));
        }
    }
    check_doomed(&scan, &mut audit, at, anomalies)?;
    check_counters(snapshot, &audit.found, at, anomalies)?;
    check_bank(snapshot, bank_open && latest, at, anomalies)?;
    Ok(audit)
}

/// A doomed key is visible if and only if its transaction is, wrote it,
/// and no visible transaction deleted it; none is deleted twice.
fn check_doomed(
    scan: &impl Fn((Vec<u8>, Vec<u8>)) -> Result<Pairs, Failure>,
    audit: &mut Audit,
    at: &str,
    anomalies: &mut Vec<String>,
) -> Result<(), Failure> {
    let mut present = BTreeMap::new();
    for prefix in REGIONS {
        for (key, value) in scan(doomed_range(prefix))? {
            match key_id(&key).zip(DoomedValue::decode(&value)) {
                Some(((r, id), (owner, _))) if id == owner && r == id.doomed_region() => {
                    present.insert(id, ());
                }
                _ => anomalies.push(format!(
                    "{at}: doomed key {} holds {:?}",
                    String::from_utf8_lossy(&key),
                    String::from_utf8_lossy(&value)
                )),
            }
        }
    }
    let mut deleted: BTreeMap<TxnId, TxnId> = BTreeMap::new();
    for (id, f) in &audit.found {
        let Some(victim) = f.value.deleted else {
            continue;
        };
        if let Some(other) = deleted.insert(victim, *id) {
            anomalies.push(format!(
                "{at}: {victim}'s doomed key deleted twice, by {other} and {id}"
            ));
        }
        if !audit.found.get(&victim).is_some_and(|v| v.value.doomed) {
            anomalies.push(format!(
                "{at}: {id} deleted {victim}'s doomed key, which no visible transaction wrote"
            ));
        }
        if present.contains_key(&victim) {
            anomalies.push(format!(
                "{at}: {victim}'s doomed key is visible, {id} deleted it"
            ));
        }
    }
    for (id, f) in &audit.found {
        if f.value.doomed && !deleted.contains_key(id) && !present.contains_key(id) {
            anomalies.push(format!(
                "{at}: {id}'s doomed key is gone, no visible transaction deleted it"
            ));
        }
    }
    for id in present.keys() {
        if !audit.found.get(id).is_some_and(|f| f.value.doomed) {
            anomalies.push(format!(
                "{at}: {id}'s doomed key is visible, its transaction is not (or wrote none)"
            ));
        }
    }
    audit.doomed_present = present.len() as u64;
    audit.deleted = deleted.len() as u64;
    Ok(())
}

/// No reported commit lost (at its reported commit_ts).
fn check_reported(
    client: &Client,
    report: &WriterReport,
    found: &BTreeMap<TxnId, Found>,
    anomalies: &mut Vec<String>,
) -> Result<(), Failure> {
    for (id, commit_ts) in &report.committed {
        if id.round != report.round {
            anomalies.push(format!("round {}'s writer reported {id}", report.round));
            continue;
        }
        let Some(f) = found.get(id) else {
            anomalies.push(format!(
                "lost commit: {id} (commit_ts {commit_ts}) not visible"
            ));
            continue;
        };
        for key in f.keys(*id) {
            let info = client
                .cluster()
                .region_for(&key)
                .storage()
                .mvcc_by_key(Key::from_raw(&key))?;
            let put = info
                .writes
                .iter()
                .find(|(_, w)| w.write_type == WriteType::Put);
            if put.map(|(ts, _)| ts.into_inner()) != Some(*commit_ts) {
                anomalies.push(format!(
                    "{id}: {} committed at {put:?}, the writer reported {commit_ts}",
                    String::from_utf8_lossy(&key)
                ));
            }
        }
    }
    Ok(())
}

/// Each counter equals the number of visible transactions (of every
/// round) that incremented it.
fn check_counters(
    snapshot: &Snapshot,
    found: &BTreeMap<TxnId, Found>,
    at: &str,
    anomalies: &mut Vec<String>,
) -> Result<(), Failure> {
    let keys = counters();
    let mut expected = vec![0u64; keys.len()];
    for (id, f) in found {
        match expected.get_mut(f.value.counter) {
            Some(n) => *n += 1,
            None => anomalies.push(format!("{at}: {id} names counter {}", f.value.counter)),
        }
    }
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    for ((key, value), expected) in keys.iter().zip(snapshot.batch_get(&refs)?).zip(expected) {
        let value = number(value.as_deref())?;
        if value != expected {
            anomalies.push(format!(
                "{at}: counter {}: {value}, but {expected} visible transactions incremented it",
                String::from_utf8_lossy(key),
            ));
        }
    }
    Ok(())
}

/// The accounts all exist or none does (`must_exist`: all), and hold the
/// same total.
fn check_bank(
    snapshot: &Snapshot,
    must_exist: bool,
    at: &str,
    anomalies: &mut Vec<String>,
) -> Result<(), Failure> {
    let keys = accounts();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let values = snapshot.batch_get(&refs)?;
    let present = values.iter().filter(|v| v.is_some()).count();
    if present == 0 && !must_exist {
        return Ok(());
    }
    if present != keys.len() {
        anomalies.push(format!(
            "{at}: bank: {present} of {} accounts exist",
            keys.len()
        ));
        return Ok(());
    }
    let total: u64 = values
        .iter()
        .map(|v| number(v.as_deref()))
        .sum::<Result<u64, _>>()?;
    let expected = INITIAL_BALANCE * keys.len() as u64;
    if total != expected {
        anomalies.push(format!("{at}: bank: total {total}, expected {expected}"));
    }
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
pub fn locks_left(client: &Client) -> Result<Vec<LockInfo>, Failure> {
    locks_below(client, TimeStamp::max())
}

/// Every lock of a transaction started at or below `max_ts`, region by
/// region.
pub fn locks_below(client: &Client, max_ts: TimeStamp) -> Result<Vec<LockInfo>, Failure> {
    let mut all = Vec::new();
    for region in client.cluster().regions() {
        all.extend(region.storage().scan_lock(
            Some(Key::from_raw(region.start_key())),
            region.end_key().map(Key::from_raw),
            max_ts,
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
