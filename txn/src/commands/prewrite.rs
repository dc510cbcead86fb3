//! The Prewrite command: the actions' prewrite plus the memory-lock
//! protocol of async commit and 1PC.

use std::collections::HashMap;

use percolate_engine::Snapshot;
use percolate_mvcc::{Key, Lock, LockType, MvccTxn, TimeStamp};

use super::{WriteCommand, WriteContext, WriteResult};
use crate::actions::prewrite::{
    CommitKind, Mutation, MutationKind, PrewriteResult, TransactionProperties, prewrite_mutations,
};
use crate::concurrency_manager::PublishGuard;
use crate::{Error, Result};

/// Prewrites mutations of one transaction in one region.
///
/// For async commit and 1PC the commit_ts is computed here from `max_ts`,
/// and a reader must never be able to miss a lock whose commit_ts ends up
/// at or below its read ts. So the keys first go into the memory lock
/// table, `max_ts` is read while their memory locks are held exclusively,
/// and the locks are published before any reader may look; they stay there
/// until the locks (or, for 1PC, the commit records) are in the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prewrite {
    /// What to write; keys must be distinct.
    pub mutations: Vec<Mutation>,
    /// The transaction; `props.max_ts` is ignored (read from the region).
    pub props: TransactionProperties,
    /// Async commit: the raw secondary keys, recorded on the primary's lock
    /// when the primary is among the mutations.
    pub secondaries: Option<Vec<Vec<u8>>>,
    /// Watched keys among the mutations: each gets a strong observer
    /// notification (in [`Cf::Notify`](percolate_engine::Cf::Notify)) in
    /// the same atomic write as its lock (or, for 1PC, its commit). Empty
    /// for a transaction that writes no watched key, which then pays
    /// nothing for observers.
    pub notify: Vec<Key>,
}

impl Prewrite {
    /// A 2PC prewrite of `mutations` for the transaction `start_ts` with
    /// the raw primary key `primary`, lock TTL 3 s, and min_commit_ts
    /// `start_ts + 1` (as TiKV's client sends it: a lock with a zero
    /// min_commit_ts can never be pushed by a reader).
    pub fn new(mutations: Vec<Mutation>, primary: impl Into<Vec<u8>>, start_ts: TimeStamp) -> Self {
        let txn_size = mutations.len() as u64;
        Prewrite {
            mutations,
            props: TransactionProperties {
                start_ts,
                primary: primary.into(),
                lock_ttl: 3000,
                txn_size,
                // MAX is refused by `check`; no panic building the request.
                min_commit_ts: if start_ts.is_max() {
                    start_ts
                } else {
                    start_ts.next()
                },
                ..Default::default()
            },
            secondaries: None,
            notify: Vec::new(),
        }
    }

    /// Sets the lock TTL in milliseconds.
    #[must_use]
    pub fn lock_ttl(mut self, ttl_ms: u64) -> Self {
        self.props.lock_ttl = ttl_ms;
        self
    }

    /// Sets the number of keys of the whole transaction.
    #[must_use]
    pub fn txn_size(mut self, txn_size: u64) -> Self {
        self.props.txn_size = txn_size;
        self
    }

    /// Sets the smallest commit_ts the client will use.
    #[must_use]
    pub fn min_commit_ts(mut self, ts: TimeStamp) -> Self {
        self.props.min_commit_ts = ts;
        self
    }

    /// Uses async commit; `secondaries` are the raw keys of the whole
    /// transaction other than the primary. A zero `max_commit_ts` means no
    /// limit.
    #[must_use]
    pub fn async_commit(mut self, secondaries: Vec<Vec<u8>>, max_commit_ts: TimeStamp) -> Self {
        self.props.commit_kind = CommitKind::Async { max_commit_ts };
        self.secondaries = Some(secondaries);
        self
    }

    /// Marks the request as a retry of one that may have been applied
    /// (see [`TransactionProperties::is_retry_request`]).
    #[must_use]
    pub fn retry_request(mut self) -> Self {
        self.props.is_retry_request = true;
        self
    }

    /// Uses 1PC: the mutations are the whole transaction, committed by this
    /// command. A zero `max_commit_ts` means no limit.
    #[must_use]
    pub fn one_pc(mut self, max_commit_ts: TimeStamp) -> Self {
        self.props.commit_kind = CommitKind::OnePc { max_commit_ts };
        self
    }
}

/// A prewrite request whose mutations are borrowed: what a [`Prewrite`]
/// runs, and what the client sends without copying the mutations it
/// keeps for a retry (see `Storage::prewrite_in_place`).
pub(crate) struct PrewriteRef<'a> {
    /// As [`Prewrite::mutations`].
    pub mutations: &'a [Mutation],
    /// As [`Prewrite::props`].
    pub props: TransactionProperties,
    /// As [`Prewrite::secondaries`].
    pub secondaries: Option<&'a [Vec<u8>]>,
    /// As [`Prewrite::notify`].
    pub notify: &'a [Key],
}

impl PrewriteRef<'_> {
    /// Checks the arguments, the sizes among them (see
    /// [`Limit`](crate::Limit)).
    pub(crate) fn check(&self) -> Result<()> {
        if self.mutations.is_empty() {
            return Err(invalid("prewrite needs at least one mutation", None));
        }
        if self.props.start_ts.is_zero() {
            return Err(invalid("prewrite needs a non-zero start_ts", None));
        }
        if crate::oracle::beyond_range(self.props.start_ts) {
            return Err(invalid(
                "a start_ts beyond the range of the timestamp oracle (such as TimeStamp::max())",
                None,
            ));
        }
        // A lock carries these, and a commit_ts goes above them: from
        // the oracle's range only (see `oracle::beyond_range`).
        if crate::oracle::beyond_range(self.props.kind.for_update_ts())
            || crate::oracle::beyond_range(self.props.min_commit_ts)
        {
            return Err(invalid(
                "a for_update_ts or min_commit_ts beyond the range of the timestamp oracle",
                None,
            ));
        }
        if self.props.primary.is_empty() {
            return Err(invalid("prewrite needs a primary key", None));
        }
        crate::errors::Limit::KeySize.check(self.props.primary.len())?;
        crate::errors::check_write_size(
            self.mutations
                .iter()
                .map(|m| (raw_len(&m.key), value_len(&m.kind))),
        )?;
        match first_repeated(self.mutations.iter().map(|m| &m.key)) {
            Some(dup) => Err(invalid(
                "a key appears twice among the mutations",
                Some(dup.clone()),
            )),
            None => Ok(()),
        }
    }
}

/// The first of `keys` (in order) that an earlier one repeats, if any:
/// compared pairwise for the few keys of most commands, through a hash set
/// of references for more, never copying a key.
fn first_repeated<'k>(keys: impl ExactSizeIterator<Item = &'k Key> + Clone) -> Option<&'k Key> {
    if keys.len() <= 16 {
        let all = keys.clone();
        return keys.enumerate().find_map(|(i, key)| {
            all.clone()
                .take(i)
                .any(|earlier| earlier == key)
                .then_some(key)
        });
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.into_iter().find(|key| !seen.insert(*key))
}

/// The length of the raw key `key` encodes, read from its last marker
/// byte without decoding (each group of 8 raw bytes is encoded as 9 bytes,
/// the last of which is `0xff` minus the padding); the encoded length for
/// bytes that are not an encoded key.
fn raw_len(key: &Key) -> usize {
    let encoded = key.as_encoded();
    match encoded.last() {
        Some(&marker) if encoded.len() % 9 == 0 && marker >= 0xff - 8 => {
            encoded.len() / 9 * 8 - usize::from(0xff - marker)
        }
        _ => encoded.len(),
    }
}

/// The length of the value a mutation writes.
fn value_len(kind: &MutationKind) -> usize {
    match kind {
        MutationKind::Put(v) | MutationKind::Insert(v) => v.len(),
        MutationKind::Delete
        | MutationKind::DeleteInserted
        | MutationKind::Lock
        | MutationKind::CheckNotExists => 0,
    }
}

fn invalid(reason: &'static str, key: Option<Key>) -> Error {
    Error::InvalidRequest { reason, key }
}

/// The lock type a mutation leaves, if any.
fn lock_type(kind: &MutationKind) -> Option<LockType> {
    match kind {
        MutationKind::Put(_) | MutationKind::Insert(_) => Some(LockType::Put),
        MutationKind::Delete | MutationKind::DeleteInserted => Some(LockType::Delete),
        MutationKind::Lock => Some(LockType::Lock),
        MutationKind::CheckNotExists => None,
    }
}

impl WriteCommand for Prewrite {
    const KIND: crate::metrics::CommandKind = crate::metrics::CommandKind::Prewrite;

    type Output = PrewriteResult;

    fn latch_keys(&self) -> Vec<Key> {
        self.mutations.iter().map(|m| m.key.clone()).collect()
    }

    fn process<S: Snapshot>(self, ctx: WriteContext<'_, S>) -> Result<WriteResult<PrewriteResult>> {
        let Prewrite {
            mutations,
            props,
            secondaries,
            notify,
        } = self;
        PrewriteRef {
            mutations: &mutations,
            props,
            secondaries: secondaries.as_deref(),
            notify: &notify,
        }
        .process(ctx)
    }
}

impl PrewriteRef<'_> {
    /// Runs the request: see [`Prewrite`].
    pub(crate) fn process<S: Snapshot>(
        self,
        ctx: WriteContext<'_, S>,
    ) -> Result<WriteResult<PrewriteResult>> {
        self.check()?;
        ctx.cm.check_limit(self.props.start_ts)?;
        let PrewriteRef {
            mutations,
            mut props,
            secondaries,
            notify,
        } = self;
        // An existence check is a read at start_ts (tikv#11315).
        if mutations.iter().any(|m| {
            matches!(
                m.kind,
                MutationKind::Insert(_)
                    | MutationKind::CheckNotExists
                    | MutationKind::DeleteInserted
            )
        }) {
            ctx.cm.update_max_ts(props.start_ts)?;
        }
        if props.commit_kind == CommitKind::TwoPc {
            let (txn, result) = prewrite_mutations(&ctx.snapshot, &props, mutations, secondaries)?;
            let mut written = WriteResult::new(txn, result);
            if !notify.is_empty() {
                notify_with(&mut written, notify, props.start_ts);
            }
            return Ok(written);
        }
        let guards = ctx.cm.lock_keys(mutations.iter().map(|m| &m.key));
        let (max_ts, publish) = ctx.cm.lock_for_publish(&guards);
        props.max_ts = max_ts;
        // On error `publish` drops unpublished and `guards` leave the table.
        let (txn, result) = prewrite_mutations(&ctx.snapshot, &props, mutations, secondaries)?;
        publish_locks(publish, &props, mutations, &txn, &result);
        let mut txn = txn;
        let mut written = WriteResult {
            committed: txn.take_committed_versions(),
            batch: txn.into_write_batch(),
            output: result,
            guards,
        };
        if !notify.is_empty() {
            notify_with(&mut written, notify, props.start_ts);
        }
        Ok(written)
    }
}

/// Publishes the memory locks of an async-commit or 1PC prewrite, with
/// the commit_ts it computed, for readers to see until its write lands.
fn publish_locks(
    publish: PublishGuard<'_>,
    props: &TransactionProperties,
    mutations: &[Mutation],
    txn: &MvccTxn,
    result: &PrewriteResult,
) {
    let commit_bound = match (result.one_pc_commit_ts, result.min_commit_ts) {
        (Some(commit_ts), _) => Some((commit_ts, CommitBound::OnePc)),
        (None, min_commit_ts) => min_commit_ts.map(|ts| (ts, CommitBound::Async)),
    };
    match commit_bound.filter(|_| result.locks.is_empty() && !txn.is_empty()) {
        // Fell back to 2PC, blocked by other locks, or a retry with
        // nothing to write: no computed commit_ts to protect.
        None => publish.publish(|_| None),
        Some((min_commit_ts, bound)) => {
            let kind_of = kind_lookup(mutations);
            publish.publish(|key| {
                let lock_type = lock_type(kind_of(key)?)?;
                Some(memory_lock(props, lock_type, min_commit_ts, bound))
            });
        }
    }
}

/// The kind of the mutation of a key among `mutations`: searched in
/// place for the few of most commands, through a hash map for more.
fn kind_lookup<'m>(mutations: &'m [Mutation]) -> impl Fn(&Key) -> Option<&'m MutationKind> {
    let index: Option<HashMap<&Key, &MutationKind>> =
        (mutations.len() > 16).then(|| mutations.iter().map(|m| (&m.key, &m.kind)).collect());
    move |key| match &index {
        Some(index) => index.get(key).copied(),
        None => mutations.iter().find(|m| &m.key == key).map(|m| &m.kind),
    }
}

/// What the commit_ts a prewrite computed bounds.
#[derive(Clone, Copy)]
enum CommitBound {
    /// The commit_ts of a 1PC commit.
    OnePc,
    /// The min_commit_ts of an async commit.
    Async,
}

/// The memory lock that keeps readers from missing a prewrite's computed
/// commit_ts while its write is in flight.
fn memory_lock(
    props: &TransactionProperties,
    lock_type: LockType,
    min_commit_ts: TimeStamp,
    bound: CommitBound,
) -> Lock {
    let mut lock = Lock::new(
        lock_type,
        props.primary.clone(),
        props.start_ts,
        props.lock_ttl,
    );
    lock.min_commit_ts = min_commit_ts;
    lock.use_async_commit = matches!(bound, CommitBound::Async);
    lock.use_one_pc = matches!(bound, CommitBound::OnePc);
    lock
}

/// Adds the notifications of the watched keys `notify` to a prewrite that
/// writes something (its locks, or its 1PC commit). One that writes some
/// locks and is blocked by others' notifies every key all the same (a
/// notification of a key that then does not change is only a wasted look);
/// a retry with nothing left to write adds none, its first attempt did.
fn notify_with(written: &mut WriteResult<PrewriteResult>, notify: &[Key], start_ts: TimeStamp) {
    if !written.batch.is_empty() {
        crate::notify::put_strong(&mut written.batch, notify, start_ts);
    }
}
