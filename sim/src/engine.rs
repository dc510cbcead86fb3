//! The engine under the simulation: the real [`MemoryEngine`], wrapped to
//! record every commit record ever written (the history the checker
//! judges, which GC cannot erase) and to let a read race a write command
//! between its processing and its engine write.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use percolate_engine::{Cf, Engine, MemoryEngine, Modify, WriteBatch, WriteOptions};
use percolate_mvcc::{Key, TimeStamp, Write, WriteType};

/// A commit or rollback record as it was written to the write CF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitRecord {
    /// The raw user key.
    pub key: Vec<u8>,
    /// The record's timestamp (its commit_ts; a rollback's start_ts).
    pub commit_ts: TimeStamp,
    /// The transaction it belongs to.
    pub start_ts: TimeStamp,
    /// Put, Delete, Lock or Rollback.
    pub write_type: WriteType,
    /// The simulation step that wrote it.
    pub step: u64,
}

impl CommitRecord {
    /// Whether the record commits something (not a rollback).
    pub fn is_commit(&self) -> bool {
        self.write_type != WriteType::Rollback
    }
}

/// A hook run inside an engine write, before the batch is applied: it sees
/// the engine as it was, the batch about to land.
pub type WriteHook = Box<dyn FnMut(&MemoryEngine, &WriteBatch) + Send>;

/// What the engine wrapper records, shared by its clones.
#[derive(Default)]
pub struct EngineLog {
    /// The current simulation step, stamped on each record.
    pub step: u64,
    /// Every commit record written, in write order.
    pub records: Vec<CommitRecord>,
    /// The record in the engine per (raw key, ts), while it is there:
    /// where it is in `records`.
    slots: BTreeMap<(Vec<u8>, u64), usize>,
    /// Records that replaced another transaction's commit record.
    pub violations: Vec<String>,
}

impl EngineLog {
    /// Notes the write-CF puts of a written batch.
    fn note(&mut self, batch: &WriteBatch) {
        for modify in batch.modifies() {
            let (key, value) = match modify {
                Modify::Put {
                    cf: Cf::Write,
                    key,
                    value,
                } => (key, value),
                // A record GC (or a rollback's collapse) deleted: what is
                // written at its place later replaces nothing.
                Modify::Delete { cf: Cf::Write, key } => {
                    if let Ok((user, ts)) = Key::split_on_ts_for(key) {
                        let raw = Key::from_encoded_slice(user)
                            .into_raw()
                            .unwrap_or_else(|_| user.to_vec());
                        self.slots.remove(&(raw, ts.into_inner()));
                    }
                    continue;
                }
                _ => continue,
            };
            let (Ok((user, ts)), Ok(write)) = (Key::split_on_ts_for(key), Write::parse(value))
            else {
                self.violations
                    .push(format!("undecodable write record {key:?}"));
                continue;
            };
            let raw = Key::from_encoded_slice(user)
                .into_raw()
                .unwrap_or_else(|_| user.to_vec());
            let record = CommitRecord {
                key: raw.clone(),
                commit_ts: ts,
                start_ts: write.start_ts,
                write_type: write.write_type,
                step: self.step,
            };
            let slot = (raw, ts.into_inner());
            if let Some(&at) = self.slots.get(&slot) {
                let old = &self.records[at];
                if old.is_commit() && (old.start_ts != record.start_ts || !record.is_commit()) {
                    self.violations.push(format!(
                        "the commit record of {} at {} (txn {}) was replaced by a {:?} of txn {}",
                        String::from_utf8_lossy(&old.key),
                        old.commit_ts,
                        old.start_ts,
                        record.write_type,
                        record.start_ts
                    ));
                }
                if old == &record || (old.is_commit() && !record.is_commit()) {
                    continue;
                }
            }
            self.slots.insert(slot, self.records.len());
            self.records.push(record);
        }
    }
}

/// The memory engine with a recorder and a write hook.
#[derive(Clone, Default)]
pub struct SimEngine {
    inner: MemoryEngine,
    log: Arc<Mutex<EngineLog>>,
    hook: Arc<Mutex<Option<WriteHook>>>,
}

impl SimEngine {
    /// An empty engine.
    pub fn new() -> Self {
        SimEngine::default()
    }

    /// The recorder.
    pub fn log(&self) -> &Arc<Mutex<EngineLog>> {
        &self.log
    }

    /// Installs (or, with `None`, removes) the write hook.
    pub fn set_hook(&self, hook: Option<WriteHook>) {
        *self.hook.lock() = hook;
    }

    /// The engine without the wrapper (reads only).
    pub fn inner(&self) -> &MemoryEngine {
        &self.inner
    }
}

impl Engine for SimEngine {
    type Snap = <MemoryEngine as Engine>::Snap;

    fn snapshot(&self) -> Self::Snap {
        self.inner.snapshot()
    }

    fn latest(&self) -> Self::Snap {
        self.inner.latest()
    }

    fn write(&self, batch: &WriteBatch, options: WriteOptions) -> percolate_engine::Result<()> {
        // Taken out while it runs: the hook's own reads never write, but it
        // must not find itself installed if they did.
        let hook = self.hook.lock().take();
        if let Some(mut hook) = hook {
            hook(&self.inner, batch);
            let mut slot = self.hook.lock();
            if slot.is_none() {
                *slot = Some(hook);
            }
        }
        self.inner.write(batch, options)?;
        self.log.lock().note(batch);
        Ok(())
    }

    percolate_engine::forward_engine_bookkeeping!(inner);
}
