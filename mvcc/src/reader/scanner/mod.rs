//! Range reads at one timestamp, forwards ([`forward`]) or backwards
//! ([`backward`]).
//!
//! A scanner walks two cursors side by side: one over the lock CF and one
//! over the write CF, both bounded by the user-key range. At each user key
//! (the smaller of the two cursors' keys going forward, the larger going
//! backward) it applies the lock rule, then finds the newest visible
//! Put/Delete. A key locked by a pending transaction is reported as its own
//! `KeyIsLocked` error and the scan goes on past it: a caller gets every
//! readable pair plus the list of locks to resolve, in one pass.

mod backward;
mod forward;

use percolate_engine::{Cf, EngineIterator, IterOptions, Snapshot};

use super::{
    IsolationLevel, LockDecision, LockPolicy, MvccReader, Statistics, TsSet, check_lock_conflict,
    check_rc_newer_write, rc_check_ts_conflict,
};
use crate::{Error, Key, Lock, LockType, Result, TimeStamp, WriteRef, WriteType};

use backward::BackwardScanner;
use forward::ForwardScanner;

/// How many `next`/`prev` steps a scanner takes over versions of one key
/// before it gives up stepping and seeks. Small in tests so that the seek
/// path runs in ordinary scenarios.
const SEEK_BOUND: usize = if cfg!(test) { 2 } else { 8 };

/// A key and its value, as a scan returns them.
pub type KvPair = (Key, Vec<u8>);

/// Builds a [`Scanner`].
#[must_use]
pub struct ScannerBuilder<S: Snapshot> {
    snapshot: S,
    config: ScanConfig,
}

/// What a scan reads and how.
#[derive(Clone, Debug)]
struct ScanConfig {
    ts: TimeStamp,
    policy: LockPolicy,
    lower_bound: Option<Key>,
    upper_bound: Option<Key>,
    reverse: bool,
    key_only: bool,
    fill_cache: bool,
}

impl<S: Snapshot> ScannerBuilder<S> {
    /// A scanner over `snapshot` reading at `ts`.
    pub fn new(snapshot: S, ts: TimeStamp) -> Self {
        ScannerBuilder {
            snapshot,
            config: ScanConfig {
                ts,
                policy: LockPolicy::default(),
                lower_bound: None,
                upper_bound: None,
                reverse: false,
                key_only: false,
                fill_cache: true,
            },
        }
    }

    /// The user-key range: `lower` inclusive, `upper` exclusive, whatever
    /// the direction. Defaults to unbounded on both sides.
    pub fn range(mut self, lower: Option<Key>, upper: Option<Key>) -> Self {
        self.config.lower_bound = lower;
        self.config.upper_bound = upper;
        self
    }

    /// Whether to scan from the upper bound down. Defaults to false.
    pub fn reverse(mut self, reverse: bool) -> Self {
        self.config.reverse = reverse;
        self
    }

    /// Whether to return keys with empty values, never reading the default
    /// CF. Defaults to false.
    pub fn key_only(mut self, key_only: bool) -> Self {
        self.config.key_only = key_only;
        self
    }

    /// Defaults to [`IsolationLevel::Si`].
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.config.policy.isolation_level = level;
        self
    }

    /// Transactions whose locks are ignored. Defaults to none.
    pub fn bypass_locks(mut self, locks: TsSet) -> Self {
        self.config.policy.bypass_locks = locks;
        self
    }

    /// Transactions known to have committed, whose pending values are read
    /// where their locks would block. Defaults to none.
    pub fn access_locks(mut self, locks: TsSet) -> Self {
        self.config.policy.access_locks = locks;
        self
    }

    /// Whether blocks read enter the block cache. Defaults to true.
    pub fn fill_cache(mut self, fill_cache: bool) -> Self {
        self.config.fill_cache = fill_cache;
        self
    }

    /// The scanner.
    pub fn build(self) -> Result<Scanner<S>> {
        let cursors = Cursors::new(&self.snapshot, &self.config)?;
        let reader = MvccReader::new(self.snapshot).fill_cache(self.config.fill_cache);
        let inner = ScannerCore {
            config: self.config,
            cursors,
            reader,
            statistics: Statistics::default(),
            started: false,
            write_head: None,
        };
        Ok(if inner.config.reverse {
            Scanner::Backward(BackwardScanner::new(inner))
        } else {
            Scanner::Forward(ForwardScanner::new(inner))
        })
    }
}

/// A range read at one timestamp.
#[non_exhaustive]
pub enum Scanner<S: Snapshot> {
    /// Ascending keys.
    Forward(ForwardScanner<S>),
    /// Descending keys.
    Backward(BackwardScanner<S>),
}

impl<S: Snapshot> Scanner<S> {
    /// The next visible pair. A `KeyIsLocked` (or, at RcCheckTs,
    /// `WriteConflict`) error concerns one key only: the scanner has already
    /// moved past it and the next call goes on. Other errors end the scan.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<KvPair>> {
        match self {
            Scanner::Forward(s) => s.next(),
            Scanner::Backward(s) => s.next(),
        }
    }

    /// Up to `limit` entries (0 = no limit): pairs, and one `KeyIsLocked`
    /// entry per locked key, each counting toward the limit. Any other error
    /// fails the whole scan.
    pub fn scan(&mut self, limit: usize) -> Result<Vec<Result<KvPair>>> {
        let mut out = Vec::new();
        while limit == 0 || out.len() < limit {
            match self.next() {
                Ok(Some(pair)) => out.push(Ok(pair)),
                Ok(None) => break,
                Err(e @ Error::KeyIsLocked(_)) => out.push(Err(e)),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Engine operations made so far.
    pub fn statistics(&self) -> Statistics {
        let core = match self {
            Scanner::Forward(s) => &s.core,
            Scanner::Backward(s) => &s.core,
        };
        let mut total = core.statistics;
        let reader = core.reader.statistics();
        total.data.get += reader.data.get;
        total.write.seek += reader.write.seek;
        total.write.next += reader.write.next;
        total
    }
}

/// The two cursors of a scan.
struct Cursors<I> {
    write: I,
    /// `None` at RC: the lock CF is never read.
    lock: Option<I>,
}

impl<I: EngineIterator> Cursors<I> {
    fn new<S: Snapshot<Iter = I>>(snapshot: &S, config: &ScanConfig) -> Result<Self> {
        let mut options = IterOptions::new().fill_cache(config.fill_cache);
        options.lower_bound = config.lower_bound.as_ref().map(|k| k.as_encoded().clone());
        options.upper_bound = config.upper_bound.as_ref().map(|k| k.as_encoded().clone());
        let lock = match config.policy.isolation_level {
            IsolationLevel::Rc => None,
            _ => Some(snapshot.iter(Cf::Lock, options.clone())?),
        };
        Ok(Cursors {
            write: snapshot.iter(Cf::Write, options)?,
            lock,
        })
    }
}

/// State shared by both directions.
struct ScannerCore<S: Snapshot> {
    config: ScanConfig,
    cursors: Cursors<S::Iter>,
    reader: MvccReader<S>,
    statistics: Statistics,
    started: bool,
    /// The user key of the record under the write cursor, when a scanner
    /// already read it since the cursor last moved (so the next position
    /// need not read it again). Cleared by every move of the write cursor.
    write_head: Option<(Vec<u8>, TimeStamp)>,
}

/// The user keys under the two cursors.
struct Heads {
    /// The user key and commit_ts of the record under the write cursor.
    write: Option<(Vec<u8>, TimeStamp)>,
    lock: Option<Vec<u8>>,
}

/// The next user key a scan visits.
struct Position {
    key: Key,
    /// The commit_ts of the record of `key` under the write cursor, if the
    /// cursor rests on one.
    write_ts: Option<TimeStamp>,
    /// The verdict on `key`'s lock: `Ok(Some(lock))` to read an access
    /// lock, `Ok(None)` to read committed data, `Err` when the lock blocks.
    lock: Result<Option<Box<Lock>>>,
}

impl<S: Snapshot> ScannerCore<S> {
    /// The next user key in scan order (the smaller of the two cursors' keys
    /// going forward, the larger going backward), with its lock judged and
    /// the lock cursor moved past it.
    fn next_position(&mut self) -> Result<Option<Position>> {
        let Heads { write, lock } = self.heads()?;
        let (current, write_ts, has_lock) = match (write, lock) {
            (None, None) => return Ok(None),
            (Some((w, ts)), None) => (w, Some(ts), false),
            (None, Some(l)) => (l, None, true),
            (Some((w, ts)), Some(l)) => match (w.cmp(&l), self.config.reverse) {
                (std::cmp::Ordering::Equal, _) => (w, Some(ts), true),
                (std::cmp::Ordering::Less, false) | (std::cmp::Ordering::Greater, true) => {
                    (w, Some(ts), false)
                }
                _ => (l, None, true),
            },
        };
        let key = Key::from_encoded(current);
        let lock = if has_lock {
            let checked = self.check_lock(&key);
            self.step_lock()?;
            checked
        } else {
            Ok(None)
        };
        Ok(Some(Position {
            key,
            write_ts,
            lock,
        }))
    }

    fn step_lock(&mut self) -> Result<()> {
        if let Some(lock) = &mut self.cursors.lock {
            self.statistics.lock.next += 1;
            if self.config.reverse {
                lock.prev()?;
            } else {
                lock.next()?;
            }
        }
        Ok(())
    }

    fn heads(&mut self) -> Result<Heads> {
        let write = if let Some(head) = self.write_head.take() {
            Some(head)
        } else if self.cursors.write.valid()? {
            let stored = self.cursors.write.key();
            let (user, commit_ts) = super::mvcc_reader::split_stored_key(Cf::Write, stored)?;
            Some((user.to_vec(), commit_ts))
        } else {
            None
        };
        let lock = match &self.cursors.lock {
            Some(cursor) if cursor.valid()? => Some(cursor.key().to_vec()),
            _ => None,
        };
        Ok(Heads { write, lock })
    }

    /// Applies the lock rule to the lock under the lock cursor, which sits
    /// on `key`. `Ok(Some(lock))` means: read this access lock's value.
    fn check_lock(&self, key: &Key) -> Result<Option<Box<Lock>>> {
        let Some(cursor) = &self.cursors.lock else {
            return Ok(None);
        };
        let lock = Lock::parse(cursor.value())
            .map_err(|e| Error::corruption(Cf::Lock, cursor.key(), e))?;
        match check_lock_conflict(lock, key, self.config.ts, &self.config.policy)? {
            LockDecision::Ignore => Ok(None),
            LockDecision::ReadLock(lock) => Ok(Some(lock)),
        }
    }

    /// The value an access lock stands for (`None` for a Delete).
    fn value_from_lock(&mut self, key: &Key, lock: Lock) -> Result<Option<Vec<u8>>> {
        match lock.lock_type {
            LockType::Put if self.config.key_only => Ok(Some(Vec::new())),
            LockType::Put => match lock.short_value {
                Some(value) => Ok(Some(value)),
                None => self.reader.load_long_value(key, lock.ts).map(Some),
            },
            _ => Ok(None),
        }
    }

    /// Whether every record above the read ts must be looked at (RcCheckTs
    /// fails on newer data), which rules out seeking over them.
    fn checks_newer_writes(&self) -> bool {
        self.config.policy.isolation_level == IsolationLevel::RcCheckTs
    }

    /// At RcCheckTs, a Put or Delete committed above the read ts fails the
    /// read.
    fn rc_check_ts_conflict(
        &self,
        key: &Key,
        commit_ts: TimeStamp,
        write: &WriteRef<'_>,
    ) -> Result<()> {
        if self.checks_newer_writes()
            && commit_ts > self.config.ts
            && matches!(write.write_type, WriteType::Put | WriteType::Delete)
        {
            return Err(rc_check_ts_conflict(
                key,
                self.config.ts,
                write.start_ts,
                commit_ts,
            ));
        }
        Ok(())
    }

    /// The visible value of `key` by point lookup (used going backward).
    fn read_key_at_ts(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        let ts = self.config.ts;
        check_rc_newer_write(
            &mut self.reader,
            key,
            ts,
            self.config.policy.isolation_level,
        )?;
        match self.reader.get_write(key, ts, Some(ts))? {
            Some(_) if self.config.key_only => Ok(Some(Vec::new())),
            Some(write) => self.reader.load_data(key, write).map(Some),
            None => Ok(None),
        }
    }
}
