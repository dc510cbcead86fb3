//! The workers: threads that find notifications and run the observers.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use percolate_engine::{
    Cf, Engine, EngineIterator, IterOptions, RocksEngine, Snapshot, WriteBatch,
};
use percolate_mvcc::{Key, MvccReader, TimeStamp, WriteType};

use super::{Observer, notify_engine, parse_ack, pending_notifications};
use crate::client::Client;
use crate::notify::{Notification, NotifyKind, key_end};
use crate::{Error, Result};

/// How [`Workers`] scan and wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// How long an idle worker waits before it scans again, if no commit
    /// wakes it first (a commit of this client that notifies wakes the
    /// idle workers at once; the wait catches notifications left by
    /// another process, or by a crash). Defaults to 100 ms.
    pub poll_interval: Duration,
    /// How long [`Workers::run_until_idle`] keeps trying before it gives
    /// up with [`Error::ObserversNotIdle`]. Defaults to 60 s.
    pub idle_timeout: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            poll_interval: Duration::from_millis(100),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// The workers of a client's observers: threads that scan the `notify`
/// column family and run the observers (see [`Client::observe`] and the
/// [module documentation](super)).
///
/// [`start`](Self::start) starts threads that run until
/// [`stop`](Self::stop) (or until the handle is dropped);
/// [`run_until_idle`](Self::run_until_idle) works on the calling thread
/// until nothing is pending, for tests and batch jobs. Several handles (or
/// processes, one after another) may work on the same data: the
/// acknowledgements keep every change to one observer run.
///
/// Invariant: a key is processed by at most one thread of a handle at a
/// time (`busy`, the paper's advisory lock per row); two handles may both
/// process one, and then at most one observer transaction commits.
pub struct Workers<E: Engine = RocksEngine> {
    shared: Arc<Shared<E>>,
    threads: Vec<JoinHandle<()>>,
}

struct Shared<E: Engine> {
    client: Client<E>,
    config: WorkerConfig,
    stop: AtomicBool,
    /// The encoded keys being processed now.
    busy: Mutex<HashSet<Vec<u8>>>,
    /// The first error of a background thread, for [`Workers::stop`].
    first_error: Mutex<Option<Error>>,
    /// Rows processed by this handle's threads (any outcome).
    rows: AtomicU64,
}

impl<E: Engine> std::fmt::Debug for Workers<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.threads.len())
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<E: Engine> Workers<E> {
    /// Workers for `client`'s observers, with `config`; none started.
    pub fn new(client: Client<E>, config: WorkerConfig) -> Self {
        Workers {
            shared: Arc::new(Shared {
                client,
                config,
                stop: AtomicBool::new(false),
                busy: Mutex::new(HashSet::new()),
                first_error: Mutex::new(None),
                rows: AtomicU64::new(0),
            }),
            threads: Vec::new(),
        }
    }

    /// Starts `threads` more worker threads. Each scans from a random
    /// position, processes what it finds, and waits for a notifying commit
    /// (or [`WorkerConfig::poll_interval`]) when a whole turn found
    /// nothing. An observer that fails is retried on a later turn (its
    /// notification stays); the first such error is kept for
    /// [`stop`](Self::stop).
    pub fn start(&mut self, threads: usize) -> Result<()> {
        self.shared.client.check_writable()?;
        for i in 0..threads {
            let shared = self.shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("percolate-observer-{i}"))
                .spawn(move || shared.work())
                .map_err(crate::errors::io_error(
                    "start an observer worker thread",
                    std::path::Path::new("."),
                ))?;
            self.threads.push(thread);
        }
        Ok(())
    }

    /// Stops the threads and waits for them (each finishes the key it is
    /// on). Returns the first error an observer failed with, if any (it
    /// was retried: its notification stays until a run succeeds).
    pub fn stop(&mut self) -> Result<()> {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.client.inner.observers.notified(0);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        self.shared.stop.store(false, Ordering::SeqCst);
        match self.shared.first_error.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Works on the calling thread (beside any started threads) until no
    /// notification is left: scans the `notify` column family from its
    /// start over and over, running the observers, until a scan finds it
    /// empty. An observer's non-retryable error is returned at once (its
    /// notification stays); conflicts are retried. Gives up with
    /// [`Error::ObserversNotIdle`] after [`WorkerConfig::idle_timeout`]
    /// (a writer's lock that does not go away, an observer that keeps
    /// conflicting).
    pub fn run_until_idle(&self) -> Result<()> {
        self.shared.client.check_writable()?;
        let started = Instant::now();
        let mut rng = rand::rng();
        loop {
            let mut position = Vec::new();
            let mut progressed = false;
            while let Some(row) = self.shared.next_row(&position)? {
                match self.shared.process(&row)? {
                    Processed::Busy => {}
                    Processed::Done { kept } => progressed |= !kept,
                }
                position = key_end(&row);
            }
            if self.shared.first_row()?.is_none() {
                return Ok(());
            }
            if started.elapsed() > self.shared.config.idle_timeout {
                return Err(Error::ObserversNotIdle {
                    pending: usize::try_from(pending_notifications(&self.shared.client)?)
                        .unwrap_or(usize::MAX),
                    waited: started.elapsed(),
                });
            }
            if !progressed {
                // Locks of writers still at work, or conflicts: give them
                // a moment.
                let ms = rand::Rng::random_range(&mut rng, 1..=10);
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
    }

    /// Keys processed by this handle (by its threads and
    /// [`run_until_idle`](Self::run_until_idle)), whatever came of them.
    pub fn rows_processed(&self) -> u64 {
        self.shared.rows.load(Ordering::Relaxed)
    }
}

impl<E: Engine> Drop for Workers<E> {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// What became of a key's notifications.
enum Processed {
    /// Another thread of this handle holds the key.
    Busy,
    /// Its observers ran (or had nothing to do); `kept`: some notifications
    /// stayed for a later run (a writer's lock, a newer change, a
    /// conflict).
    Done { kept: bool },
}

/// What one observer's transaction did.
enum Run {
    /// It ran and committed, at this start_ts.
    Ran(TimeStamp),
    /// The key had not changed since its last run; read at this start_ts.
    Unchanged(TimeStamp),
    /// It failed with a retryable error (a conflict).
    Conflict,
}

impl<E: Engine> Shared<E> {
    /// A background thread's loop.
    fn work(&self) {
        let registry = &self.client.inner.observers;
        let mut position = self.random_position().unwrap_or_default();
        let mut progressed = false;
        let mut reached_end = false;
        while !self.stop.load(Ordering::SeqCst) {
            let generation = registry.generation();
            match self.step(&position) {
                Ok(Step::End) => {
                    if reached_end && !progressed {
                        // A whole turn found nothing to do.
                        registry.wait(generation, self.config.poll_interval);
                        reached_end = false;
                    } else {
                        reached_end = true;
                    }
                    progressed = false;
                    position = Vec::new();
                }
                Ok(Step::Row { row, outcome }) => match outcome {
                    Processed::Busy => {
                        // Caught up with another thread: jump ahead of it.
                        registry.counters.jumps.fetch_add(1, Ordering::Relaxed);
                        position = self.random_position().unwrap_or_default();
                        std::thread::yield_now();
                    }
                    Processed::Done { kept } => {
                        progressed |= !kept;
                        position = key_end(&row);
                    }
                },
                Err((row, e)) => {
                    self.first_error.lock().get_or_insert(e);
                    // Past the failing key; it is tried again next turn.
                    position = match row {
                        Some(row) => key_end(&row),
                        None => self.random_position().unwrap_or_default(),
                    };
                    std::thread::sleep(self.config.poll_interval.min(Duration::from_millis(10)));
                }
            }
        }
    }

    /// Finds the next key with notifications at or after `position` and
    /// processes it.
    fn step(&self, position: &[u8]) -> std::result::Result<Step, (Option<Vec<u8>>, Error)> {
        let row = match self.next_row(position) {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(Step::End),
            Err(e) => return Err((None, e)),
        };
        match self.process(&row) {
            Ok(outcome) => Ok(Step::Row { row, outcome }),
            Err(e) => Err((Some(row), e)),
        }
    }

    /// The encoded key of the first notification at or after `position`.
    fn next_row(&self, position: &[u8]) -> Result<Option<Vec<u8>>> {
        let snapshot = notify_engine(&self.client).latest();
        let mut cursor = snapshot.iter(Cf::Notify, IterOptions::new().lower_bound(position))?;
        if !cursor.seek(position)? {
            return Ok(None);
        }
        row_of(cursor.key()).map(Some)
    }

    /// The encoded key of the first notification.
    fn first_row(&self) -> Result<Option<Vec<u8>>> {
        self.next_row(&[])
    }

    /// A random position between the first and the last notification,
    /// where a thread starts (or jumps to): spread over the keys that
    /// have some, whatever their prefix.
    fn random_position(&self) -> Result<Vec<u8>> {
        let snapshot = notify_engine(&self.client).latest();
        let mut cursor = snapshot.iter(Cf::Notify, IterOptions::new())?;
        if !cursor.seek_to_first()? {
            return Ok(Vec::new());
        }
        let first = cursor.key().to_vec();
        cursor.seek_to_last()?;
        let last = cursor.key().to_vec();
        Ok(random_between(&first, &last))
    }

    /// Runs the observers of the key `row` (encoded) for its
    /// notifications, then deletes those they covered.
    fn process(&self, row: &[u8]) -> Result<Processed> {
        let Some(_busy) = BusyRow::take(&self.busy, row) else {
            return Ok(Processed::Busy);
        };
        self.rows.fetch_add(1, Ordering::Relaxed);
        let counters = &self.client.inner.observers.counters;
        // One snapshot for the notifications and their writers' locks.
        let snapshot = notify_engine(&self.client).snapshot();
        let notifications = self.notifications_of(&snapshot, row)?;
        if notifications.is_empty() {
            // Another handle cleared them.
            return Ok(Processed::Done { kept: false });
        }
        let key = Key::from_encoded_slice(row);
        let raw = key
            .to_raw()
            .map_err(|e| percolate_mvcc::Error::corruption(Cf::Notify, row, e))?;
        let newest_weak = notifications
            .iter()
            .filter(|(_, n)| n.kind == NotifyKind::Weak)
            .map(|(_, n)| n.ts)
            .max();
        let mut covered_below = TimeStamp::max();
        let mut ran = false;
        for observer in self.client.inner.observers.matching(&raw) {
            match self.run_observer(&observer, &key, &raw, newest_weak) {
                Ok(Run::Ran(start_ts)) => {
                    counters.runs.fetch_add(1, Ordering::Relaxed);
                    ran = true;
                    covered_below = covered_below.min(start_ts);
                }
                Ok(Run::Unchanged(start_ts)) => covered_below = covered_below.min(start_ts),
                Ok(Run::Conflict) => {
                    counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    return Ok(Processed::Done { kept: true });
                }
                Err(e) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(Error::Observer {
                        name: observer.name.clone(),
                        key: Key::from_raw(&raw),
                        source: Box::new(e),
                    });
                }
            }
        }
        let (deleted, kept) = self.clear(&snapshot, &key, &notifications, covered_below)?;
        let collapsed = deleted.saturating_sub(usize::from(ran));
        counters
            .collapsed
            .fetch_add(collapsed as u64, Ordering::Relaxed);
        Ok(Processed::Done { kept })
    }

    /// Every notification of the encoded key `row` in `snapshot`, with its
    /// stored key.
    fn notifications_of(
        &self,
        snapshot: &E::Snap,
        row: &[u8],
    ) -> Result<Vec<(Vec<u8>, Notification)>> {
        let options = IterOptions::new()
            .lower_bound(row)
            .upper_bound(key_end(row));
        let mut cursor = snapshot.iter(Cf::Notify, options)?;
        let mut found = Vec::new();
        let mut valid = cursor.seek(row)?;
        while valid {
            let stored = cursor.key().to_vec();
            let notification = Notification::parse(&stored).inspect_err(|_| {
                self.client
                    .inner
                    .observers
                    .counters
                    .errors
                    .fetch_add(1, Ordering::Relaxed);
            })?;
            found.push((stored, notification));
            valid = cursor.next()?;
        }
        Ok(found)
    }

    /// One observer's transaction for the key: runs it if the key changed
    /// after its acknowledgement, or a weak notification came after it.
    fn run_observer(
        &self,
        observer: &Observer<E>,
        key: &Key,
        raw: &[u8],
        newest_weak: Option<TimeStamp>,
    ) -> Result<Run> {
        let mut txn = self.client.begin()?;
        let start_ts = txn.start_ts();
        let outcome = (|| -> Result<bool> {
            // Resolves (or waits for) the locks on the key at start_ts:
            // after it, every commit at or below start_ts is on disk.
            txn.get(raw)?;
            let storage = self.client.cluster().region_for(raw).storage();
            let mut reader = MvccReader::new(storage.engine().latest());
            let changed_at = latest_change(&mut reader, key, start_ts)?;
            let ack_key = observer.ack_key(raw);
            let ack = match txn.get(&ack_key)? {
                Some(value) => Some(parse_ack(&ack_key, &value)?),
                None => None,
            };
            let after_ack = |ts: Option<TimeStamp>| ts.is_some_and(|ts| ack.is_none_or(|a| ts > a));
            if !after_ack(changed_at) && !after_ack(newest_weak) {
                return Ok(false);
            }
            (observer.run)(&mut txn, raw)?;
            txn.put(ack_key, start_ts.into_inner().to_be_bytes().to_vec());
            Ok(true)
        })();
        match outcome {
            Ok(true) => match txn.commit() {
                Ok(_) => Ok(Run::Ran(start_ts)),
                Err(e) if e.is_retryable() => Ok(Run::Conflict),
                Err(e) => Err(e),
            },
            Ok(false) => Ok(Run::Unchanged(start_ts)),
            Err(e) if e.is_retryable() => Ok(Run::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Deletes the notifications the observers' runs at or after
    /// `covered_below` covered; returns how many went and whether some
    /// stayed.
    ///
    /// A weak one is covered: every run started after it was read. A
    /// strong one, of the writer `ts`, is covered unless that writer still
    /// held its lock on the key in `snapshot`, where the notification was
    /// read (it had not committed: its commit_ts may end up above the
    /// runs'), or the key changed after `covered_below` (the writer may
    /// have committed after the runs read). A notification is written in
    /// the same write as its writer's lock (or, by 1PC, its commit
    /// record), and a snapshot sees a write whole or not at all: a
    /// notification read there has its lock there until the writer's
    /// commit, whose record the latest data then holds.
    fn clear(
        &self,
        snapshot: &E::Snap,
        key: &Key,
        notifications: &[(Vec<u8>, Notification)],
        covered_below: TimeStamp,
    ) -> Result<(usize, bool)> {
        let engine = notify_engine(&self.client);
        let lock_ts = MvccReader::new(snapshot.clone())
            .load_lock(key)?
            .map(|lock| lock.ts);
        let mut reader = MvccReader::new(engine.latest());
        let newer_change =
            latest_change(&mut reader, key, TimeStamp::max())?.is_some_and(|ts| ts > covered_below);
        let mut batch = WriteBatch::new();
        let mut kept = false;
        for (stored, n) in notifications {
            let covered = match n.kind {
                NotifyKind::Weak => true,
                _ => !newer_change && lock_ts != Some(n.ts),
            };
            if covered {
                batch.delete(Cf::Notify, stored.clone());
            } else {
                kept = true;
            }
        }
        let deleted = batch.modifies().len();
        if deleted > 0 {
            engine.write(&batch, Default::default())?;
        }
        Ok((deleted, kept))
    }
}

/// What a background thread's step found.
enum Step {
    /// No notification at or after the position.
    End,
    /// The key `row` (encoded) and what became of it.
    Row { row: Vec<u8>, outcome: Processed },
}

/// The commit_ts of the newest change (Put or Delete) of `key` at or
/// below `ts`, skipping Lock and Rollback records.
fn latest_change<S: Snapshot>(
    reader: &mut MvccReader<S>,
    key: &Key,
    mut ts: TimeStamp,
) -> Result<Option<TimeStamp>> {
    while let Some((commit_ts, write)) = reader.seek_write(key, ts)? {
        match write.write_type {
            WriteType::Put | WriteType::Delete => return Ok(Some(commit_ts)),
            // A Lock or a Rollback record: no change.
            _ if !commit_ts.is_zero() => ts = commit_ts.prev(),
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// The encoded key a stored notification key is for.
fn row_of(stored: &[u8]) -> Result<Vec<u8>> {
    Ok(Notification::parse(stored)?.key.into_encoded())
}

/// A random byte string between `low` and `high` (inclusive), which share
/// their first bytes: those, then 8 random bytes between theirs.
fn random_between(low: &[u8], high: &[u8]) -> Vec<u8> {
    let common = low.iter().zip(high).take_while(|(a, b)| a == b).count();
    let word = |bytes: &[u8]| {
        let mut word = [0u8; 8];
        for (i, b) in bytes.iter().skip(common).take(8).enumerate() {
            word[i] = *b;
        }
        u64::from_be_bytes(word)
    };
    let (lo, hi) = (word(low), word(high));
    let pick = if lo < hi {
        rand::random_range(lo..=hi)
    } else {
        lo
    };
    let mut position = low[..common].to_vec();
    position.extend_from_slice(&pick.to_be_bytes());
    position
}

/// The advisory lock on a key being processed, released on drop.
struct BusyRow<'a> {
    busy: &'a Mutex<HashSet<Vec<u8>>>,
    row: Vec<u8>,
}

impl<'a> BusyRow<'a> {
    fn take(busy: &'a Mutex<HashSet<Vec<u8>>>, row: &[u8]) -> Option<Self> {
        busy.lock().insert(row.to_vec()).then(|| BusyRow {
            busy,
            row: row.to_vec(),
        })
    }
}

impl Drop for BusyRow<'_> {
    fn drop(&mut self) {
        self.busy.lock().remove(&self.row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_position_lies_between_its_bounds() {
        let (low, high) = (b"doc/0001".to_vec(), b"doc/9999".to_vec());
        for _ in 0..1000 {
            let p = random_between(&low, &high);
            assert!(p >= low[..4].to_vec() && p <= high, "{p:?}");
        }
        assert_eq!(
            random_between(b"same", b"same"),
            b"same\0\0\0\0\0\0\0\0".to_vec()
        );
    }
}
