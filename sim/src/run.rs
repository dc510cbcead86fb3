//! The seeded scheduler: which client steps, read, tick of time or fault
//! comes next, then quiescence and the check.

use percolate_mvcc::TimeStamp;

use crate::SimConfig;
use crate::client::{Progress, SimTxn};
use crate::history::{Observation, Outcome, Read, ReadKind};
use crate::world::World;

/// Runs one seed to the end; returns the world (history and trace) and
/// the violations.
pub(crate) fn simulate(seed: u64, cfg: SimConfig, trace: bool) -> (World, Vec<String>) {
    let mut w = World::new(seed, cfg, trace);
    let mut slots: Vec<Option<SimTxn>> = (0..w.cfg.clients.max(1)).map(|_| None).collect();
    for step in 0..w.cfg.steps as u64 {
        w.begin_step(step);
        let faults = w.cfg.faults;
        match w.rng.below(1000) {
            0..=549 => client_step(&mut w, &mut slots, true),
            550..=699 => snapshot_read(&mut w),
            700..=899 => advance_time(&mut w, &mut slots),
            900..=924 if faults.gc => gc(&mut w, &slots),
            925..=934 if faults.crash => crash(&mut w, &mut slots),
            935..=954 if faults.clock_back => clock_back(&mut w),
            _ => client_step(&mut w, &mut slots, true),
        }
    }
    let (locks, memory) = quiesce(&mut w, &mut slots);
    let mut violations = crate::checker::check(&w, &locks, memory);
    violations.extend(w.harness_errors.iter().map(|e| format!("harness: {e}")));
    (w, violations)
}

/// A client's step: a new transaction in an empty slot, else the next
/// step of the one there, or (a fault) its client's death.
fn client_step(w: &mut World, slots: &mut [Option<SimTxn>], faults: bool) {
    let i = w.rng.index(slots.len());
    let Some(mut txn) = slots[i].take() else {
        slots[i] = Some(SimTxn::begin(w));
        return;
    };
    if faults && w.cfg.faults.client_death && w.rng.chance(40) {
        die(w, txn);
        return;
    }
    if txn.step(w) != Progress::Finished {
        slots[i] = Some(txn);
    }
}

/// The client of `txn` dies where it stands: its locks stay behind.
fn die(w: &mut World, txn: SimTxn) {
    if w.tracing() {
        w.note(format!("  t{} dies", txn.id));
    }
    let record = &mut w.history.txns[txn.id];
    if record.outcome == Outcome::Open {
        record.outcome = Outcome::Unknown;
    }
}

/// A read outside any transaction: a point read or a scan, at a random ts
/// (never below the GC safe point nor above what the oracle handed out),
/// a fresh one, `u64::MAX`, or read-committed.
fn snapshot_read(w: &mut World) {
    let fresh = w.get_ts();
    let low = w
        .safe_point
        .max(w.first_ts)
        .into_inner()
        .min(fresh.into_inner());
    let random = TimeStamp::new(w.rng.range(low, fresh.into_inner()));
    let roll = w.rng.below(100);
    let (kind, ts) = match roll {
        0..=34 | 80..=89 => (ReadKind::Si, random),
        35..=49 | 90..=99 => (ReadKind::Si, fresh),
        50..=64 => (ReadKind::Latest, TimeStamp::max()),
        _ => (ReadKind::Rc, if w.rng.chance(500) { random } else { fresh }),
    };
    let keys = w.params.keys.clone();
    let read = if roll >= 80 {
        let (a, b) = (w.rng.index(keys.len()), w.rng.index(keys.len() + 1));
        let start = keys[a.min(b)].clone();
        let end = keys.get(a.max(b)).cloned().unwrap_or(b"l".to_vec());
        let (limit, reverse) = (w.rng.below(4) as usize, w.rng.chance(500));
        w.read_scan(&start, &end, limit, reverse, ts, kind)
            .map(|pairs| Read::Scan {
                start,
                end,
                limit,
                reverse,
                pairs,
            })
    } else {
        let key = keys[w.rng.index(keys.len())].clone();
        w.read_get(&key, ts, kind)
            .map(|value| Read::Get {
                key: key.clone(),
                value,
            })
            .map_err(|why| {
                format!(
                    "get {} ts={} -> {why}",
                    String::from_utf8_lossy(&key),
                    World::fmt_ts(ts)
                )
            })
    };
    match read {
        Ok(read) => {
            let obs = Observation {
                step: w.step,
                ts,
                kind,
                read,
                txn: None,
            };
            if w.tracing() {
                w.note(format!("> {}", obs.describe()));
            }
            w.history.observations.push(obs);
        }
        Err(why) => {
            if w.tracing() {
                w.note(format!("> read: {why}"));
            }
        }
    }
}

/// Time passes (mostly a little, sometimes past a TTL); the heart beats
/// due meanwhile are sent.
fn advance_time(w: &mut World, slots: &mut [Option<SimTxn>]) {
    let ttl = w.params.ttl_ms;
    let ms = match w.rng.below(10) {
        0..=5 => w.rng.range(1, 20),
        6..=8 => w.rng.range(1, ttl / 2 + 1),
        _ => w.rng.range(ttl, 2 * ttl + 10),
    };
    pass_time(w, slots, ms);
}

/// Moves the clock `ms` forward, then sends the heart beats due.
fn pass_time(w: &mut World, slots: &mut [Option<SimTxn>], ms: u64) {
    let now = w.now_ms() + ms;
    w.set_clock(now);
    if w.tracing() {
        w.note(format!("> time +{ms}ms"));
    }
    let ttl = w.params.ttl_ms;
    for txn in slots.iter_mut().flatten() {
        txn.heart_beat(w, ttl);
    }
}

/// A fault: the wall clock steps back.
fn clock_back(w: &mut World) {
    let back = w.rng.range(1, 2 * w.params.ttl_ms);
    let now = w.now_ms().saturating_sub(back);
    w.set_clock(now);
    if w.tracing() {
        w.note(format!("> time -{back}ms (the clock steps back)"));
    }
}

/// A fault: the process crashes and restarts.
fn crash(w: &mut World, slots: &mut [Option<SimTxn>]) {
    for slot in slots.iter_mut() {
        if let Some(txn) = slot.take() {
            let record = &mut w.history.txns[txn.id];
            if record.outcome == Outcome::Open {
                record.outcome = Outcome::Unknown;
            }
        }
    }
    w.note("> crash (every client and the regions' memory are lost; reopen)".into());
    w.crash();
    if w.tracing() {
        let (locks, _) = w.leftover_locks();
        let shown: Vec<String> = locks
            .iter()
            .map(|l| {
                format!(
                    "{}@{}",
                    String::from_utf8_lossy(&l.key),
                    World::fmt_ts(l.lock_version)
                )
            })
            .collect();
        w.note(format!("  locks after the restart: [{}]", shown.join(" ")));
    }
}

/// GC at a safe point below every live transaction's start_ts.
fn gc(w: &mut World, slots: &[Option<SimTxn>]) {
    let fresh = w.get_ts();
    let bound = slots
        .iter()
        .flatten()
        .map(|t| t.start_ts)
        .chain(std::iter::once(fresh))
        .min()
        .expect("fresh is there")
        .into_inner()
        .saturating_sub(1);
    let low = w.safe_point.max(w.first_ts).into_inner() + 1;
    if bound < low {
        return;
    }
    let safe_point = TimeStamp::new(w.rng.range(low, bound));
    w.safe_point = safe_point;
    let result = w.client().gc(safe_point);
    if w.tracing() {
        let answer = match result {
            Ok(info) => format!("ok: deleted {} versions", info.deleted_versions),
            Err(e) => format!("error: {e}"),
        };
        w.note(format!(
            "> gc safe_point={} -> {answer}",
            World::fmt_ts(safe_point)
        ));
    }
}

/// Lets every live client finish (time passes when all are blocked), then
/// kills the rest, lets every lock expire, resolves them all, and reads
/// every key. Returns the locks left and whether a memory lock is.
fn quiesce(w: &mut World, slots: &mut [Option<SimTxn>]) -> (Vec<String>, bool) {
    w.note("# quiescence".into());
    let mut step = w.cfg.steps as u64;
    for _ in 0..60 {
        step += 1;
        w.begin_step(step);
        let mut live = false;
        let mut progressed = false;
        for slot in slots.iter_mut() {
            let Some(mut txn) = slot.take() else { continue };
            live = true;
            match txn.step(w) {
                Progress::Finished => progressed = true,
                Progress::Stepped => {
                    progressed = true;
                    *slot = Some(txn);
                }
                Progress::Blocked => *slot = Some(txn),
            }
        }
        if !live {
            break;
        }
        if !progressed {
            let ttl = w.params.ttl_ms;
            pass_time(w, slots, ttl + 1);
        }
    }
    for slot in slots.iter_mut() {
        if let Some(txn) = slot.take() {
            die(w, txn);
        }
    }
    step += 1;
    w.begin_step(step);
    for _ in 0..8 {
        let (locks, _) = w.leftover_locks();
        if locks.is_empty() {
            break;
        }
        // Past every lock's TTL, counted from its start_ts on the oracle's
        // timestamps (whose physical part runs up to a persist window
        // ahead of the clock after a crash).
        let expired_at = locks
            .iter()
            .map(|l| l.lock_version.physical() + l.lock_ttl + 1)
            .max()
            .unwrap_or_default();
        let oracle_ms = w.get_ts().physical();
        let now = w.now_ms().max(oracle_ms).max(expired_at) + 1;
        w.set_clock(now);
        let ts = w.get_ts();
        if let Err(e) = w.resolve(&locks, ts) {
            w.note(format!("  resolve failed: {e}"));
        }
    }
    let (locks, memory) = w.leftover_locks();
    let left: Vec<String> = locks
        .iter()
        .map(|l| format!("{}@{}", String::from_utf8_lossy(&l.key), l.lock_version))
        .collect();
    step += 1;
    w.begin_step(step);
    let keys = w.params.keys.clone();
    for key in &keys {
        for (kind, ts) in [
            (ReadKind::Latest, TimeStamp::max()),
            (ReadKind::Si, w.get_ts()),
        ] {
            match w.read_get(key, ts, kind) {
                Ok(value) => {
                    let obs = Observation {
                        step,
                        ts,
                        kind,
                        read: Read::Get {
                            key: key.clone(),
                            value,
                        },
                        txn: None,
                    };
                    if w.tracing() {
                        w.note(format!("> {}", obs.describe()));
                    }
                    w.history.observations.push(obs);
                }
                Err(why) if locks.is_empty() => {
                    w.harness_errors.push(format!("a final read failed: {why}"))
                }
                Err(_) => {}
            }
        }
    }
    (left, memory)
}
