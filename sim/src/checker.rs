//! The checker: judges one seed's history against snapshot isolation.
//!
//! The ground truth is the engine's own record of every commit record ever
//! written (`engine::EngineLog`, which GC cannot erase): a transaction
//! committed exactly where a commit record with its start_ts exists. From
//! it the checker derives, for every key, the committed versions ordered by
//! commit_ts, and then requires:
//!
//! * **oracle**: every timestamp handed out is above every earlier one,
//!   across crashes; no two transactions share a start_ts;
//! * **records**: no commit record is ever replaced by another
//!   transaction's record or a rollback;
//! * **atomicity** (no transaction half visible): a committed transaction
//!   has a commit record on every key it prewrote, all at one commit_ts,
//!   above its start_ts (and its for_update_ts), of the type of its write;
//!   and none on any other key;
//! * **acknowledgement**: a commit the client was told of is there, at the
//!   commit_ts it was told; a transaction whose client was told it failed
//!   before its commit point is committed nowhere;
//! * **inserts**: a committed insert (or a delete or put that kept an
//!   insert's check) found its key without a value: the newest committed
//!   version below its commit_ts is none or a delete;
//! * **first committer wins** (no G0, no lost update): of two committed
//!   transactions writing a key, the later commit's snapshot of that key
//!   (its start_ts; a pessimistic transaction's for_update_ts of its lock)
//!   is at or above the earlier one's commit_ts;
//! * **reads**: every snapshot read (a transaction's at its start_ts, a
//!   pessimistic lock's at its for_update_ts, a snapshot's at any ts)
//!   returned exactly the newest committed version at or below its ts in
//!   the final history: not an aborted write (G1a), not an intermediate
//!   one (values name their writer, and each writes a key once: G1b), not
//!   a version committed above its ts nor one older than a commit at or
//!   below it (read skew, G1c: every read of a transaction sees one cut
//!   of a single total order by commit_ts, so no cycle of reads can
//!   form); an acknowledged commit is therefore visible at its commit_ts
//!   from then on. Read-committed reads return the newest commit at or
//!   below their ts among the records already written when they ran;
//!   `u64::MAX` reads the newest of all records written by then. Scans,
//!   both ways, return exactly the keys and values of that state, in
//!   order, up to their limit;
//! * **quiescence**: after every client finished or died and the locks
//!   expired and were resolved, no lock is left in any region, in the
//!   engine or in memory.

use std::collections::BTreeMap;

use percolate_mvcc::{TimeStamp, WriteType};

use crate::engine::CommitRecord;
use crate::history::{History, Observation, Op, Outcome, Read, ReadKind, show};
use crate::world::World;

/// The committed versions of every key, by commit_ts.
struct Truth<'a> {
    by_key: BTreeMap<&'a [u8], Vec<&'a CommitRecord>>,
    /// start_ts -> transaction index.
    txn_of: BTreeMap<u64, usize>,
    history: &'a History,
}

impl Truth<'_> {
    /// The value of `key` a read at `ts` must see, counting only records
    /// written at or before `step` when given.
    fn value_at(&self, key: &[u8], ts: TimeStamp, step: Option<u64>) -> Option<&[u8]> {
        let records = self.by_key.get(key)?;
        let newest = records
            .iter()
            .filter(|r| r.commit_ts <= ts && step.is_none_or(|s| r.step <= s))
            .filter(|r| matches!(r.write_type, WriteType::Put | WriteType::Delete))
            .max_by_key(|r| r.commit_ts)?;
        let txn = self.txn_of.get(&newest.start_ts.into_inner())?;
        self.history.txns[*txn].writes.get(key).and_then(Op::value)
    }

    /// The writer named by a value's tag (`t{id}.key`).
    fn writer(value: &[u8]) -> Option<usize> {
        let tag = value.strip_prefix(b"t")?;
        let end = tag.iter().position(|b| *b == b'.')?;
        std::str::from_utf8(&tag[..end]).ok()?.parse().ok()
    }

    /// Why `seen` is wrong where `want` was right, for a read at `ts`.
    fn explain(&self, seen: Option<&[u8]>, ts: TimeStamp) -> &'static str {
        let Some(writer) = seen.and_then(Self::writer) else {
            return "a stale or skewed read";
        };
        let start_ts = self.history.txns.get(writer).map(|t| t.start_ts);
        let committed = self
            .by_key
            .values()
            .flatten()
            .filter(|r| Some(r.start_ts) == start_ts && r.is_commit())
            .map(|r| r.commit_ts)
            .next();
        match committed {
            None => "G1a: it read a write that never committed",
            Some(c) if c > ts => "it read a version committed above its ts",
            Some(_) => "a stale or skewed read",
        }
    }
}

/// Checks one seed; returns the violations found.
pub(crate) fn check(w: &World, leftover_locks: &[String], memory_locks: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    out.extend(w.oracle_log.lock().violations.iter().cloned());
    let log = w.engine.log().lock();
    out.extend(log.violations.iter().cloned());
    let history = &w.history;
    let mut txn_of = BTreeMap::new();
    for (i, txn) in history.txns.iter().enumerate() {
        if let Some(other) = txn_of.insert(txn.start_ts.into_inner(), i) {
            out.push(format!(
                "t{other} and t{i} began at the same start_ts {}",
                txn.start_ts
            ));
        }
    }
    let mut by_key: BTreeMap<&[u8], Vec<&CommitRecord>> = BTreeMap::new();
    for record in log.records.iter().filter(|r| r.is_commit()) {
        by_key.entry(&record.key).or_default().push(record);
    }
    for records in by_key.values_mut() {
        records.sort_by_key(|r| r.commit_ts);
    }
    let truth = Truth {
        by_key,
        txn_of,
        history,
    };
    check_transactions(&truth, &mut out);
    check_write_order(&truth, &mut out);
    for obs in &history.observations {
        check_read(&truth, &w.params.keys, obs, &mut out);
    }
    for lock in leftover_locks {
        out.push(format!("lock left after quiescence: {lock}"));
    }
    if memory_locks {
        out.push("memory lock left after quiescence".into());
    }
    out
}

/// Atomicity and acknowledgement, transaction by transaction.
fn check_transactions(truth: &Truth<'_>, out: &mut Vec<String>) {
    let mut commits: BTreeMap<usize, Vec<&CommitRecord>> = BTreeMap::new();
    for record in truth.by_key.values().flatten() {
        match truth.txn_of.get(&record.start_ts.into_inner()) {
            Some(i) => commits.entry(*i).or_default().push(record),
            None => out.push(format!(
                "commit record of {} at {} by an unknown start_ts {}",
                String::from_utf8_lossy(&record.key),
                record.commit_ts,
                record.start_ts
            )),
        }
    }
    for (i, txn) in truth.history.txns.iter().enumerate() {
        let records = commits.get(&i).map(Vec::as_slice).unwrap_or_default();
        let name = format!("t{i}");
        if let Outcome::Aborted(why) = &txn.outcome {
            if !records.is_empty() {
                out.push(format!(
                    "{name} was told it failed ({why}) but committed at {}",
                    records[0].commit_ts
                ));
            }
            continue;
        }
        if let Outcome::Committed(c) = txn.outcome {
            if !txn.writes.is_empty() && !records.iter().any(|r| r.commit_ts == c) {
                out.push(format!(
                    "{name} was acknowledged at {c} but is not committed there"
                ));
            }
        }
        let Some(first) = records.first() else {
            continue;
        };
        let commit_ts = first.commit_ts;
        if records.iter().any(|r| r.commit_ts != commit_ts) {
            out.push(format!("{name} committed at more than one commit_ts"));
        }
        if commit_ts <= txn.start_ts || (txn.pessimistic && commit_ts <= txn.for_update_ts) {
            out.push(format!(
                "{name} committed at {commit_ts}, not above its start_ts {} / for_update_ts {}",
                txn.start_ts, txn.for_update_ts
            ));
        }
        let mut seen: BTreeMap<&[u8], WriteType> = BTreeMap::new();
        for r in records {
            seen.insert(&r.key, r.write_type);
        }
        for (key, op) in &txn.writes {
            let want = match op {
                Op::Put(_) | Op::Insert(_) => WriteType::Put,
                Op::Delete | Op::DeleteInserted => WriteType::Delete,
                Op::Lock => WriteType::Lock,
            };
            // An insert (kept by a later delete or put) found the key
            // without a value: none just below its commit_ts.
            if matches!(op, Op::Insert(_) | Op::DeleteInserted) {
                let below = TimeStamp::new(commit_ts.into_inner().saturating_sub(1));
                if let Some(value) = truth.value_at(key, below, None) {
                    out.push(format!(
                        "{name} inserted {}, which held {} below its commit_ts {commit_ts}",
                        String::from_utf8_lossy(key),
                        show(Some(value))
                    ));
                }
            }
            match seen.remove(key.as_slice()) {
                Some(t) if t == want => {}
                Some(t) => out.push(format!(
                    "{name} committed {} as {t:?}, not {want:?}",
                    String::from_utf8_lossy(key)
                )),
                None => out.push(format!(
                    "{name} is half visible: committed at {commit_ts}, but not on {}",
                    String::from_utf8_lossy(key)
                )),
            }
        }
        for key in seen.keys() {
            out.push(format!(
                "{name} committed {}, which it never wrote",
                String::from_utf8_lossy(key)
            ));
        }
    }
}

/// First committer wins, key by key.
fn check_write_order(truth: &Truth<'_>, out: &mut Vec<String>) {
    for (key, records) in &truth.by_key {
        for pair in records.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.start_ts == b.start_ts {
                continue;
            }
            let Some(&tb) = truth.txn_of.get(&b.start_ts.into_inner()) else {
                continue;
            };
            let txn = &truth.history.txns[tb];
            let snapshot = if txn.pessimistic {
                txn.locked_at.get(*key).copied().unwrap_or(txn.start_ts)
            } else {
                txn.start_ts
            };
            if snapshot < a.commit_ts {
                out.push(format!(
                    "lost update (G0) on {}: t{tb} (snapshot {snapshot}) committed at {} over a commit at {} it never saw",
                    String::from_utf8_lossy(key),
                    b.commit_ts,
                    a.commit_ts
                ));
            }
        }
    }
}

/// One read against the truth.
fn check_read(truth: &Truth<'_>, keys: &[Vec<u8>], obs: &Observation, out: &mut Vec<String>) {
    let (ts, step) = match obs.kind {
        ReadKind::Si => (obs.ts, None),
        ReadKind::Rc => (obs.ts, Some(obs.step)),
        ReadKind::Latest => (TimeStamp::max(), Some(obs.step)),
    };
    let who = obs
        .txn
        .map_or("a snapshot".to_string(), |t| format!("t{t}"));
    match &obs.read {
        Read::Get { key, value } => {
            let want = truth.value_at(key, ts, step);
            if want != value.as_deref() {
                out.push(format!(
                    "{who}: {} at step {}, expected {}: {}",
                    obs.describe(),
                    obs.step,
                    show(want),
                    truth.explain(value.as_deref(), ts)
                ));
            }
        }
        Read::Scan {
            start,
            end,
            limit,
            reverse,
            pairs,
        } => {
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = keys
                .iter()
                .filter(|k| k.as_slice() >= start.as_slice() && k.as_slice() < end.as_slice())
                .filter_map(|k| truth.value_at(k, ts, step).map(|v| (k.clone(), v.to_vec())))
                .collect();
            want.sort();
            if *reverse {
                want.reverse();
            }
            if *limit != 0 {
                want.truncate(*limit);
            }
            if &want != pairs {
                let shown: Vec<String> = want
                    .iter()
                    .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), show(Some(v))))
                    .collect();
                out.push(format!(
                    "{who}: {} at step {}, expected [{}]",
                    obs.describe(),
                    obs.step,
                    shown.join(" ")
                ));
            }
        }
    }
}
