//! Observers: the Percolator paper's incremental processing (its section
//! 2.4) over percolate's transactions.
//!
//! An **observer** is a function and the keys it [`Watch`]es. It runs, in a
//! transaction of its own, after a transaction changed one of those keys,
//! and what it writes may be watched by observers downstream: a chain of
//! incremental computations, each step transactional.
//!
//! # How it works
//!
//! * **Notifications.** A transaction that writes a watched key (a put, an
//!   insert or a delete) also writes a *notification* for it in the
//!   `notify` column family ([`Cf::Notify`],
//!   the paper's notify column in its own locality group), in the same
//!   atomic engine write as the key's lock (2PC, async commit) or its
//!   commit record (1PC): a committed change always has one. The client
//!   knows the watches and hands the watched keys to its prewrite
//!   commands; a transaction that writes no watched key sends and writes
//!   nothing more (one relaxed atomic load decides it). A notification is
//!   only a hint: one for a transaction that then rolls back costs a look
//!   and is cleared. Its format is in the crate's `notify` module.
//! * **Acknowledgements.** Each observer keeps, per key, the start_ts of
//!   its last run on it: an ordinary transactional key in a reserved
//!   keyspace ([`ACK_KEYSPACE`]). A worker that finds a notification runs,
//!   for each observer of the key, a transaction that reads the key (locks
//!   in the way are resolved as any read resolves them), the commit_ts of
//!   its latest change and the acknowledgement. If the key changed after
//!   the acknowledgement, it calls the observer in that transaction and
//!   writes the acknowledgement, its own start_ts, with the observer's
//!   writes; otherwise it only clears the notification. Two workers that
//!   run an observer for the same change both write its acknowledgement,
//!   so snapshot isolation lets at most one of them commit: **at most one
//!   observer transaction commits per change**. Several changes before a
//!   run are seen by one run (**message collapsing**).
//! * **Clearing.** A key's notifications are deleted after its observers'
//!   transactions committed (or found nothing to do), and only those the
//!   worker read and found covered: each writer has its own entry, and an
//!   entry whose writer still holds its lock on the key, or a key changed
//!   after the observer's snapshot, keeps its entries for a later run. A
//!   worker killed before that leaves them in place; the next run finds
//!   the acknowledgement up to date and clears them. **No change is ever
//!   missed**, whatever dies when.
//! * **Weak notifications** ([`Client::notify`]): a notification written
//!   outside any transaction, at a fresh timestamp, which runs every
//!   observer of the key once (unless one ran since) whether or not the
//!   key changed: the paper's way for a writer to ask for an observer run
//!   without writing, and so without conflicting on, a hot watched key.
//!   Only the system writes the `notify` column family.
//! * **Workers** ([`Workers`]): threads that scan the `notify` column
//!   family from random positions, each taking an in-process advisory lock
//!   on the key it processes; a thread that reaches a key another one holds
//!   has caught up with it, and jumps to a new random position instead of
//!   following it (the paper's cure for scanner clumping).
//!
//! # Columns
//!
//! The paper's observers watch a *column*: a Bigtable row has many. Here a
//! row and a column are one key, and a column is whatever part of the key
//! the watch names:
//!
//! * [`Watch::prefix`] (or [`Watch::keyspace`]): the column first,
//!   `column ++ row`, as `doc/42`. A column is then one contiguous range of
//!   keys, as the paper's locality group is: its scans read only it. The
//!   layout the example and the tests use.
//! * [`Watch::suffix`]: the row first, `row ++ column`, as `42/doc`: the
//!   columns of a row sit together, as in a Bigtable row.
//!
//! # What an application must do
//!
//! Register its observers ([`Client::observe`]) right after it opens the
//! client, before its first write and before its workers run, in every
//! process that writes: a write made while no observer watches its key
//! gets no notification (nothing slows down a client that has none), and
//! a worker that finds a notification no registered observer matches
//! removes it (the notifications of an observer no longer registered go
//! so; those written before a restart wait for the observers registered
//! after it only if the workers start after them). An observer must be deterministic
//! enough to run again: the transaction it runs in may be retried, or
//! rolled back by a conflict, and it may run again for a later change. An
//! observer that writes keys it watches itself runs forever.
//!
//! The acknowledgements live under [`ACK_KEYSPACE`]: never watched, and not
//! for the application to write.
//!
//! One limit: a run finds a change by the key's newest Put or Delete record,
//! and garbage collection removes a deleted key's records once the delete
//! is older than the GC life time (ten minutes by default). A delete whose
//! notification no worker reaches within that time (workers stopped while
//! the client collects) is then not observed. Keep workers running, or
//! lengthen [`AutoGcConfig::life_time`](super::AutoGcConfig::life_time).
//!
//! Raw writes ([`RawClient`](super::RawClient)) are not transactional and
//! notify nothing.

mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use percolate_engine::{Cf, Engine, EngineIterator, IterOptions, Snapshot, WriteBatch};
use percolate_mvcc::{Key, TimeStamp};

pub use self::worker::{WorkerConfig, Workers};
use super::{Client, Keyspace, Transaction};
use crate::notify::{Notification, NotifyKind};
use crate::{Error, Result};

/// The name of the keyspace the acknowledgements live in: key
/// `memcomparable(observer name) ++ watched key`, value the 8-byte
/// big-endian start_ts of the observer's last run on the key.
pub const ACK_KEYSPACE: &str = "percolate.observers.ack";

/// The keys an observer watches: a column of the paper (see the
/// [module documentation](self) for the mapping).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Watch {
    /// Every key that starts with these bytes.
    Prefix(Vec<u8>),
    /// Every key that ends with these bytes.
    Suffix(Vec<u8>),
}

impl Watch {
    /// Every key that starts with `prefix` (`column ++ row` keys).
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        Watch::Prefix(prefix.into())
    }

    /// Every key of `keyspace`.
    pub fn keyspace(keyspace: &Keyspace) -> Self {
        Watch::Prefix(keyspace.prefix().to_vec())
    }

    /// Every key that ends with `suffix` (`row ++ column` keys).
    pub fn suffix(suffix: impl Into<Vec<u8>>) -> Self {
        Watch::Suffix(suffix.into())
    }

    /// Whether it watches the raw key `key`. The acknowledgements' keys
    /// are never watched.
    pub fn matches(&self, key: &[u8]) -> bool {
        let watched = match self {
            Watch::Prefix(prefix) => key.starts_with(prefix),
            Watch::Suffix(suffix) => key.ends_with(suffix),
        };
        watched && !key.starts_with(ack_keyspace().prefix())
    }
}

/// An observer's function: called with the observer's transaction and the
/// watched key (raw) that changed.
type ObserverFn<E> = dyn Fn(&mut Transaction<E>, &[u8]) -> Result<()> + Send + Sync;

/// A registered observer.
pub(crate) struct Observer<E: Engine> {
    name: String,
    watch: Watch,
    /// `ack keyspace prefix ++ memcomparable(name)`: its acknowledgements.
    ack_prefix: Vec<u8>,
    run: Box<ObserverFn<E>>,
}

impl<E: Engine> Observer<E> {
    /// The key of its acknowledgement for the watched key `key`.
    fn ack_key(&self, key: &[u8]) -> Vec<u8> {
        [&self.ack_prefix[..], key].concat()
    }
}

/// The acknowledgements' keyspace.
fn ack_keyspace() -> &'static Keyspace {
    static ACK: std::sync::OnceLock<Keyspace> = std::sync::OnceLock::new();
    ACK.get_or_init(|| Keyspace::new(ACK_KEYSPACE).expect("a valid keyspace name"))
}

/// The observers of one client, and what its workers share.
///
/// Invariant: `active` is true whenever `observers` is not empty, so a
/// committer that reads it false may skip the watches (an observer
/// registered while a transaction commits sees the writes that commit
/// after its registration returned).
pub(crate) struct Registry<E: Engine> {
    active: AtomicBool,
    observers: RwLock<Vec<Arc<Observer<E>>>>,
    pub(crate) counters: Counters,
    /// Bumped (and the workers woken) by every commit that notified.
    wake: Mutex<u64>,
    woken: Condvar,
}

impl<E: Engine> Registry<E> {
    pub(crate) fn new() -> Self {
        Registry {
            active: AtomicBool::new(false),
            observers: RwLock::new(Vec::new()),
            counters: Counters::default(),
            wake: Mutex::new(0),
            woken: Condvar::new(),
        }
    }

    /// Whether any observer is registered: the one check a commit makes.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether an observer watches the raw key `key`.
    pub(crate) fn watches(&self, key: &[u8]) -> bool {
        self.observers.read().iter().any(|o| o.watch.matches(key))
    }

    /// The observers of the raw key `key`.
    fn matching(&self, key: &[u8]) -> Vec<Arc<Observer<E>>> {
        self.observers
            .read()
            .iter()
            .filter(|o| o.watch.matches(key))
            .cloned()
            .collect()
    }

    /// Called after a commit that wrote `count` notifications: wakes the
    /// idle workers.
    pub(crate) fn notified(&self, count: usize) {
        self.counters
            .notifications
            .fetch_add(count as u64, Ordering::Relaxed);
        *self.wake.lock() += 1;
        self.woken.notify_all();
    }

    /// The wake-up generation: changes with every notifying commit.
    fn generation(&self) -> u64 {
        *self.wake.lock()
    }

    /// Waits until a commit notifies after `generation`, or `timeout`.
    fn wait(&self, generation: u64, timeout: Duration) {
        let mut current = self.wake.lock();
        if *current == generation {
            self.woken.wait_for(&mut current, timeout);
        }
    }
}

/// The counters behind [`ObserverMetrics`].
#[derive(Default)]
pub(crate) struct Counters {
    notifications: AtomicU64,
    weak: AtomicU64,
    runs: AtomicU64,
    collapsed: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    jumps: AtomicU64,
}

/// What the observers of a client did since it was opened
/// ([`Client::observer_metrics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObserverMetrics {
    /// Notifications in the `notify` column family now (read when the
    /// metrics are taken).
    pub pending: u64,
    /// Strong notifications written by this client's commits.
    pub notifications: u64,
    /// Weak notifications written ([`Client::notify`]).
    pub weak_notifications: u64,
    /// Observer transactions committed.
    pub runs: u64,
    /// Notifications cleared without a run of their own: covered by a
    /// run for another notification of the key (several writes, one run),
    /// or finding the key unchanged since the observer's last run.
    pub collapsed: u64,
    /// Observer transactions that failed with a retryable error (a
    /// conflict, with another worker on the acknowledgement or with a
    /// writer on the observer's own keys): their notifications stay.
    pub conflicts: u64,
    /// Observer transactions that failed otherwise (their function's
    /// error), and notifications that did not decode.
    pub errors: u64,
    /// Times a worker caught up with another and jumped to a new random
    /// position.
    pub jumps: u64,
}

impl<E: Engine> Client<E> {
    /// Registers an observer: from now on, every transaction this client
    /// commits that writes a key `watch` matches notifies it, and this
    /// client's [`Workers`] run `observer(txn, key)` in a transaction of its
    /// own for each change (see the [module documentation](self)).
    ///
    /// `name` identifies its acknowledgements on disk: keep it across
    /// restarts, and register every observer again after each open before
    /// the first write. A name already registered is an `InvalidRequest`.
    ///
    /// ```
    /// use percolate_txn::client::{Client, Watch};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let client = Client::open(dir.path())?;
    /// // Keeps `len/<id>` equal to the length of `doc/<id>`.
    /// client.observe("length", Watch::prefix("doc/"), |txn, key| {
    ///     let len_key = [&b"len/"[..], &key[4..]].concat();
    ///     match txn.get(key)? {
    ///         Some(doc) => txn.put(len_key, doc.len().to_string()),
    ///         None => txn.delete(len_key),
    ///     }
    ///     Ok(())
    /// })?;
    /// client.with_retry(|txn| {
    ///     txn.put(b"doc/1", b"hello");
    ///     Ok(())
    /// })?;
    /// client.workers().run_until_idle()?;
    /// assert_eq!(client.get_latest(b"len/1")?, Some(b"5".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn observe(
        &self,
        name: &str,
        watch: Watch,
        observer: impl Fn(&mut Transaction<E>, &[u8]) -> Result<()> + Send + Sync + 'static,
    ) -> Result<()> {
        let registry = &self.inner.observers;
        let mut observers = registry.observers.write();
        if observers.iter().any(|o| o.name == name) {
            return Err(Error::InvalidRequest {
                reason: "an observer of that name is registered already",
                key: None,
            });
        }
        let mut ack_prefix = ack_keyspace().prefix().to_vec();
        percolate_mvcc::codec::encode_bytes(&mut ack_prefix, name.as_bytes());
        observers.push(Arc::new(Observer {
            name: name.to_string(),
            watch,
            ack_prefix,
            run: Box::new(observer),
        }));
        registry.active.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Sets a weak notification on `key`, outside any transaction: every
    /// observer of the key runs once more (unless one runs anyway after
    /// this returns), whether or not the key changes. For a writer that
    /// wants an observer to look again without writing a hot watched key
    /// itself; also to run observers over data written before they were
    /// registered.
    pub fn notify(&self, key: &[u8]) -> Result<()> {
        self.check_writable()?;
        let ts = self.inner.oracle.get_ts()?;
        let mut batch = WriteBatch::new();
        batch.put(
            Cf::Notify,
            Notification::stored_key(&Key::from_raw(key), ts, NotifyKind::Weak),
            Vec::new(),
        );
        notify_engine(self).write(&batch, Default::default())?;
        let registry = &self.inner.observers;
        registry.counters.weak.fetch_add(1, Ordering::Relaxed);
        *registry.wake.lock() += 1;
        registry.woken.notify_all();
        Ok(())
    }

    /// Workers for this client's observers, not started: see [`Workers`].
    pub fn workers(&self) -> Workers<E> {
        Workers::new(self.clone(), WorkerConfig::default())
    }

    /// What the observers did, and how many notifications are pending (a
    /// scan of the `notify` column family).
    pub fn observer_metrics(&self) -> Result<ObserverMetrics> {
        let c = &self.inner.observers.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Ok(ObserverMetrics {
            pending: pending_notifications(self)?,
            notifications: get(&c.notifications),
            weak_notifications: get(&c.weak),
            runs: get(&c.runs),
            collapsed: get(&c.collapsed),
            conflicts: get(&c.conflicts),
            errors: get(&c.errors),
            jumps: get(&c.jumps),
        })
    }
}

/// The engine that holds the notifications (every region shares one).
fn notify_engine<E: Engine>(client: &Client<E>) -> &E {
    client.cluster().regions()[0].storage().engine()
}

/// The number of entries in the `notify` column family.
fn pending_notifications<E: Engine>(client: &Client<E>) -> Result<u64> {
    let snapshot = notify_engine(client).latest();
    let mut cursor = snapshot.iter(Cf::Notify, IterOptions::new().fill_cache(false))?;
    let mut count = 0;
    let mut valid = cursor.seek_to_first()?;
    while valid {
        count += 1;
        valid = cursor.next()?;
    }
    Ok(count)
}

/// Decodes an acknowledgement's value.
fn parse_ack(key: &[u8], value: &[u8]) -> Result<TimeStamp> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| {
        percolate_mvcc::Error::corruption(
            Cf::Write,
            key,
            percolate_mvcc::codec::DecodeError::UnexpectedEof {
                what: "an observer acknowledgement (8 bytes)",
            },
        )
    })?;
    Ok(TimeStamp::new(u64::from_be_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_match_their_column_and_never_an_acknowledgement() {
        let prefix = Watch::prefix("doc/");
        assert!(prefix.matches(b"doc/1"));
        assert!(!prefix.matches(b"do"));
        let suffix = Watch::suffix("/doc");
        assert!(suffix.matches(b"1/doc"));
        assert!(!suffix.matches(b"1/docs"));
        let everything = Watch::prefix("");
        assert!(everything.matches(b"anything"));
        assert!(!everything.matches(&ack_keyspace().key(b"x")));
        let ks = Keyspace::new("docs").unwrap();
        assert!(Watch::keyspace(&ks).matches(&ks.key(b"1")));
    }

    #[test]
    fn an_acknowledgement_of_the_wrong_length_is_corruption() {
        assert_eq!(
            parse_ack(b"k", &7u64.to_be_bytes()).unwrap(),
            TimeStamp::new(7)
        );
        assert!(matches!(
            parse_ack(b"k", b"short"),
            Err(Error::Mvcc(percolate_mvcc::Error::Corruption { .. }))
        ));
    }
}
