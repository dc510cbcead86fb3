//! Heart beats: a committing client keeps its primary lock alive.
//!
//! A lock's TTL counts from its transaction's start_ts. A transaction whose
//! commit takes longer than that (a large prewrite, a slow region) would be
//! rolled back by the first reader to meet one of its locks. So while a
//! transaction commits, one background thread per client extends its
//! primary lock's TTL every third of the TTL.

use std::collections::HashMap;
use std::sync::{OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use percolate_engine::Engine;
use percolate_engine::mem::BuildKeyHasher;
use percolate_mvcc::TimeStamp;

use super::{Inner, key};

/// The primary locks to keep alive, by start_ts.
pub(crate) struct HeartBeats {
    shared: std::sync::Arc<Shared>,
    /// Started by the first transaction to need it.
    thread: OnceLock<JoinHandle<()>>,
    start: Box<dyn Fn(std::sync::Arc<Shared>) -> JoinHandle<()> + Send + Sync>,
}

/// Shards of the primaries: every transaction that commits in two phases
/// (or locks pessimistically) adds and removes one, so that concurrent
/// ones seldom meet on a mutex.
const SHARDS: usize = 16;

/// Primary keys, by start_ts (hashed by a multiply, not SipHash: every
/// pessimistic transaction adds and removes one).
type Primaries = HashMap<TimeStamp, Vec<u8>, BuildKeyHasher>;

struct Shared {
    primaries: Box<[CachePadded<Mutex<Primaries>>]>,
    /// Set when the client goes; the thread waits on it between rounds.
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn shard(&self, start_ts: TimeStamp) -> &Mutex<Primaries> {
        &self.primaries[start_ts.into_inner() as usize % SHARDS]
    }
}

impl HeartBeats {
    pub(crate) fn new<E: Engine>(client: Weak<Inner<E>>, lock_ttl_ms: u64) -> Self {
        let interval = Duration::from_millis((lock_ttl_ms / 3).max(1));
        HeartBeats {
            shared: std::sync::Arc::new(Shared {
                primaries: (0..SHARDS).map(|_| CachePadded::default()).collect(),
                stop: Mutex::new(false),
                wake: Condvar::new(),
            }),
            thread: OnceLock::new(),
            start: Box::new(move |shared| {
                let client = client.clone();
                std::thread::Builder::new()
                    .name("percolate-heartbeat".into())
                    .spawn(move || beat(&client, &shared, interval, lock_ttl_ms))
                    .expect("spawning the heart beat thread")
            }),
        }
    }

    /// Keeps the primary lock of `start_ts` alive until [`stop`](Self::stop).
    pub(crate) fn keep_alive(&self, start_ts: TimeStamp, primary: Vec<u8>) {
        self.shared.shard(start_ts).lock().insert(start_ts, primary);
        self.thread
            .get_or_init(|| (self.start)(self.shared.clone()));
    }

    /// Stops keeping `start_ts`'s primary lock alive.
    pub(crate) fn stop(&self, start_ts: TimeStamp) {
        self.shared.shard(start_ts).lock().remove(&start_ts);
    }

    /// Whether `start_ts`'s primary lock is kept alive.
    #[cfg(test)]
    pub(crate) fn keeps(&self, start_ts: TimeStamp) -> bool {
        self.shared.shard(start_ts).lock().contains_key(&start_ts)
    }
}

impl Drop for HeartBeats {
    fn drop(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn beat<E: Engine>(client: &Weak<Inner<E>>, shared: &Shared, interval: Duration, lock_ttl_ms: u64) {
    loop {
        {
            let mut stop = shared.stop.lock();
            if !*stop {
                shared.wake.wait_for(&mut stop, interval);
            }
            if *stop {
                return;
            }
        }
        let due: Vec<(TimeStamp, Vec<u8>)> = shared
            .primaries
            .iter()
            .flat_map(|shard| {
                let shard = shard.lock();
                shard
                    .iter()
                    .map(|(ts, p)| (*ts, p.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let Some(client) = client.upgrade() else {
            return;
        };
        let Ok(now) = client.oracle.get_ts() else {
            continue;
        };
        for (start_ts, primary) in due {
            // The TTL counts from start_ts: ask for what has passed plus
            // one more TTL.
            let advise_ttl = now
                .physical()
                .saturating_sub(start_ts.physical())
                .saturating_add(lock_ttl_ms);
            let storage = client.cluster.region_for(&primary).storage();
            // A failure (the lock is gone: committed or rolled back) is the
            // committing thread's to find out.
            let _ = storage.txn_heart_beat(key(&primary), start_ts, advise_ttl);
        }
    }
}
