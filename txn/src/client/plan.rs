//! How a commit lays out its writes: the primary, the secondaries an
//! async-commit primary lock lists, the mutations of each region in
//! prewrite batches, and the protocol. One piece of code for the client's
//! commit and for the deterministic simulator's model of it
//! (`percolate-sim`), so that the model cannot drift from the client.
//!
//! The plan proposes a protocol; once every prewrite has answered,
//! [`decide`] settles the protocol the commit ends with and its commit_ts.

use percolate_mvcc::{Key, TimeStamp};

use super::{CommitInfo, CommitProtocol};
use crate::actions::prewrite::{Mutation, PessimisticAction, PrewriteResult, TransactionKind};
use crate::commands::{Prewrite, PrewriteRef};

/// What a [`CommitPlan`] follows: the parts of
/// [`ClientConfig`](super::ClientConfig) that shape a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanLimits {
    /// Commit in one phase when everything fits one batch of one region.
    pub one_pc: bool,
    /// Commit asynchronously when there are at most
    /// `max_async_commit_keys` keys.
    pub async_commit: bool,
    /// The most keys an async commit may have.
    pub max_async_commit_keys: usize,
    /// The most mutations per prewrite batch (0 counts as 1).
    pub max_batch_keys: usize,
}

/// A commit's layout (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPlan {
    /// The primary key, raw.
    pub primary: Vec<u8>,
    /// Every key but the primary, raw, in key order, for an async-commit
    /// primary lock; empty for the other protocols.
    pub secondaries: Vec<Vec<u8>>,
    /// The prewrite batches: a region index and at most
    /// [`PlanLimits::max_batch_keys`] of its mutations each.
    pub batches: Vec<(usize, Vec<Mutation>)>,
    /// 1PC when there is one batch and the limits allow it, else async
    /// commit when they allow it, else 2PC.
    pub protocol: CommitProtocol,
    /// How many keys are written.
    pub key_count: usize,
}

impl CommitPlan {
    /// The plan of `writes` (raw key and mutation, in key order, not
    /// empty), each key in the region `region_of` says. A pessimistic
    /// transaction gives its primary: every mutation then checks its
    /// pessimistic lock ([`PessimisticAction::DoPessimisticCheck`]: every
    /// key was locked as it was written). Otherwise the first key is the
    /// primary.
    pub fn new(
        writes: Vec<(Vec<u8>, Mutation)>,
        region_of: impl Fn(&[u8]) -> usize,
        pessimistic_primary: Option<Vec<u8>>,
        limits: PlanLimits,
    ) -> Self {
        let pessimistic = pessimistic_primary.is_some();
        let key_count = writes.len();
        let may_commit_async = limits.async_commit && key_count <= limits.max_async_commit_keys;
        // Without a pessimistic primary the first key is the primary: its
        // raw key moves there rather than being copied.
        let mut primary = pessimistic_primary;
        let mut secondaries = Vec::new();
        let mut by_region: Vec<(usize, Vec<Mutation>)> = Vec::new();
        for (raw, mut mutation) in writes {
            let region = region_of(&raw);
            match &primary {
                None => primary = Some(raw),
                Some(primary) if may_commit_async && raw != *primary => secondaries.push(raw),
                Some(_) => {}
            }
            if pessimistic {
                mutation = mutation.with_pessimistic_action(PessimisticAction::DoPessimisticCheck);
            }
            match by_region.last_mut() {
                Some((r, mutations)) if *r == region => mutations.push(mutation),
                _ => by_region.push((region, vec![mutation])),
            }
        }
        let primary = primary.unwrap_or_default();
        let batches = into_batches(by_region, limits.max_batch_keys);
        let protocol = if batches.len() == 1 && limits.one_pc {
            CommitProtocol::OnePc
        } else if may_commit_async {
            CommitProtocol::AsyncCommit
        } else {
            CommitProtocol::TwoPc
        };
        if protocol != CommitProtocol::AsyncCommit {
            secondaries = Vec::new();
        }
        CommitPlan {
            primary,
            secondaries,
            batches,
            protocol,
            key_count,
        }
    }
}

#[cfg(any(test, feature = "sim"))]
impl CommitPlan {
    /// Each region's keys, in key order, by region index.
    pub fn keys_by_region(&self) -> Vec<(usize, Vec<Key>)> {
        keys_by_region(self.batches.iter().map(|(r, ms)| (*r, ms.as_slice())))
    }
}

/// The keys of `batches` (a region index and its mutations each, in
/// order), grouped by region: a region's batches are consecutive.
pub(crate) fn keys_by_region<'a>(
    batches: impl IntoIterator<Item = (usize, &'a [Mutation])>,
) -> Vec<(usize, Vec<Key>)> {
    let mut by_region: Vec<(usize, Vec<Key>)> = Vec::new();
    for (region, mutations) in batches {
        let keys = mutations.iter().map(|m| m.key.clone());
        match by_region.last_mut() {
            Some((r, all)) if *r == region => all.extend(keys),
            _ => by_region.push((region, keys.collect())),
        }
    }
    by_region
}

/// Each region's mutations cut into batches of at most `max_batch_keys`
/// (at least 1), in order.
fn into_batches(
    by_region: Vec<(usize, Vec<Mutation>)>,
    max_batch_keys: usize,
) -> Vec<(usize, Vec<Mutation>)> {
    let max_batch_keys = max_batch_keys.max(1);
    if by_region.iter().all(|(_, m)| m.len() <= max_batch_keys) {
        // One batch per region (every small commit): the list as it is.
        return by_region;
    }
    let mut batches = Vec::with_capacity(by_region.len());
    for (region, mutations) in by_region {
        if mutations.len() <= max_batch_keys {
            // One batch: the region's mutations as they are.
            batches.push((region, mutations));
            continue;
        }
        let mut rest = mutations.into_iter().peekable();
        while rest.peek().is_some() {
            let chunk = rest.by_ref().take(max_batch_keys).collect();
            batches.push((region, chunk));
        }
    }
    batches
}

/// What every prewrite command of one commit shares, under the protocol
/// the commit follows now (a fallback to 2PC changes it).
#[derive(Clone, Copy, Debug)]
pub struct PrewriteShape<'a> {
    /// The primary key, raw.
    pub primary: &'a [u8],
    /// The async-commit secondaries ([`CommitPlan::secondaries`]).
    pub secondaries: &'a [Vec<u8>],
    /// The transaction.
    pub start_ts: TimeStamp,
    /// A pessimistic transaction's for_update_ts.
    pub for_update_ts: Option<TimeStamp>,
    /// The TTL of its locks.
    pub lock_ttl_ms: u64,
    /// How many keys the transaction writes.
    pub txn_size: u64,
    /// The protocol.
    pub protocol: CommitProtocol,
}

impl PrewriteShape<'_> {
    /// The prewrite command of one batch's `mutations`: 1PC, or async
    /// commit (the batch holding the primary lists the secondaries), or
    /// 2PC, as the protocol says.
    pub fn command(&self, mutations: Vec<Mutation>) -> Prewrite {
        let request = self.request(&mutations, &[]);
        let (props, secondaries) = (request.props, request.secondaries.map(<[_]>::to_vec));
        Prewrite {
            mutations,
            props,
            secondaries,
            notify: Vec::new(),
        }
    }

    /// The prewrite of [`command`](Self::command), over `mutations` and
    /// `notify` borrowed.
    pub(crate) fn request<'m>(
        &'m self,
        mutations: &'m [Mutation],
        notify: &'m [Key],
    ) -> PrewriteRef<'m> {
        let mut prewrite = Prewrite::new(Vec::new(), self.primary.to_vec(), self.start_ts)
            .lock_ttl(self.lock_ttl_ms)
            .txn_size(self.txn_size);
        if let Some(for_update_ts) = self.for_update_ts {
            prewrite.props.kind = TransactionKind::Pessimistic { for_update_ts };
        }
        let holds_primary = || {
            mutations
                .iter()
                .any(|m| m.key.is_encoded_from(self.primary))
        };
        let secondaries = match self.protocol {
            CommitProtocol::OnePc => {
                prewrite = prewrite.one_pc(TimeStamp::zero());
                None
            }
            CommitProtocol::AsyncCommit => {
                prewrite = prewrite.async_commit(Vec::new(), TimeStamp::zero());
                Some(if holds_primary() {
                    self.secondaries
                } else {
                    &[]
                })
            }
            _ => None,
        };
        PrewriteRef {
            mutations,
            props: prewrite.props,
            secondaries,
            notify,
        }
    }
}

/// What a commit's prewrite answers decide: see [`decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The prewrites committed the transaction, by 1PC or async commit, at
    /// this commit_ts: the commit point has passed. An async commit still
    /// writes its commit records, after the fact.
    Committed(CommitInfo),
    /// Every lock is written and nothing is committed: the commit goes on
    /// in two phases, the primary first, at a commit_ts from the oracle.
    TwoPhase,
}

/// The protocol a commit ends with and its commit_ts: the one place that
/// decides both, from the protocol the [`CommitPlan`] chose and every
/// prewrite batch's answer (all of them, each without locks met).
///
/// | planned | the answers | protocol | commit_ts |
/// |---|---|---|---|
/// | 1PC | `one_pc_commit_ts: Some(ts)` (one batch) | 1PC | `ts` |
/// | async commit | every batch's `min_commit_ts` is `Some` | async commit | the largest of them |
/// | 1PC or async commit | otherwise: a region redid its prewrite as 2PC (the commit_ts would have passed the request's `max_commit_ts`) | 2PC | from the oracle |
/// | 2PC | any | 2PC | from the oracle |
///
/// "From the oracle" ([`Decision::TwoPhase`]) means a timestamp taken after
/// every prewrite answered, when the primary is committed, and taken again
/// while a reader has pushed the primary lock's min_commit_ts past it.
pub fn decide<'a>(
    planned: CommitProtocol,
    results: impl IntoIterator<Item = &'a PrewriteResult>,
) -> Decision {
    let mut results = results.into_iter();
    let commit_ts = match planned {
        CommitProtocol::OnePc => results.next().and_then(|r| r.one_pc_commit_ts),
        CommitProtocol::AsyncCommit => {
            results.try_fold(TimeStamp::zero(), |max, r| Some(max.max(r.min_commit_ts?)))
        }
        _ => None,
    };
    match commit_ts {
        Some(commit_ts) => Decision::Committed(CommitInfo {
            commit_ts,
            protocol: planned,
        }),
        None => Decision::TwoPhase,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(one_pc: bool, max_batch_keys: usize) -> PlanLimits {
        PlanLimits {
            one_pc,
            async_commit: true,
            max_async_commit_keys: 3,
            max_batch_keys,
        }
    }

    fn writes(keys: &[&str]) -> Vec<(Vec<u8>, Mutation)> {
        keys.iter()
            .map(|k| {
                (
                    k.as_bytes().to_vec(),
                    Mutation::put(Key::from_raw(k.as_bytes()), b"v".to_vec()),
                )
            })
            .collect()
    }

    /// Regions split at "m": keys below it in region 0.
    fn region_of(raw: &[u8]) -> usize {
        usize::from(raw >= b"m".as_slice())
    }

    #[test]
    fn one_batch_of_one_region_commits_in_one_phase() {
        let plan = CommitPlan::new(writes(&["a", "b"]), region_of, None, limits(true, 8));
        assert_eq!(plan.protocol, CommitProtocol::OnePc);
        assert_eq!(plan.primary, b"a");
        assert!(plan.secondaries.is_empty());
        assert_eq!(plan.batches.len(), 1);
        assert_eq!(plan.key_count, 2);
    }

    #[test]
    fn regions_and_batch_limits_split_the_writes() {
        let plan = CommitPlan::new(writes(&["a", "b", "x"]), region_of, None, limits(true, 1));
        assert_eq!(plan.protocol, CommitProtocol::AsyncCommit);
        assert_eq!(plan.secondaries, vec![b"b".to_vec(), b"x".to_vec()]);
        let regions: Vec<usize> = plan.batches.iter().map(|(r, _)| *r).collect();
        assert_eq!(regions, vec![0, 0, 1]);
        assert_eq!(plan.keys_by_region().len(), 2);
        assert_eq!(plan.keys_by_region()[0].1.len(), 2);
        // Too many keys for async commit: 2PC, no secondaries listed.
        let plan = CommitPlan::new(
            writes(&["a", "b", "c", "x"]),
            region_of,
            None,
            limits(true, 8),
        );
        assert_eq!(plan.protocol, CommitProtocol::TwoPc);
        assert!(plan.secondaries.is_empty());
    }

    #[test]
    fn a_pessimistic_primary_is_kept_and_every_key_checks_its_lock() {
        let plan = CommitPlan::new(
            writes(&["a", "x"]),
            region_of,
            Some(b"x".to_vec()),
            limits(false, 8),
        );
        assert_eq!(plan.primary, b"x");
        assert_eq!(plan.secondaries, vec![b"a".to_vec()]);
        assert!(
            plan.batches
                .iter()
                .flat_map(|(_, ms)| ms)
                .all(|m| { m.pessimistic_action == PessimisticAction::DoPessimisticCheck })
        );
    }

    fn answered(min_commit_ts: Option<u64>, one_pc_commit_ts: Option<u64>) -> PrewriteResult {
        PrewriteResult {
            min_commit_ts: min_commit_ts.map(TimeStamp::new),
            one_pc_commit_ts: one_pc_commit_ts.map(TimeStamp::new),
            ..PrewriteResult::default()
        }
    }

    fn committed(commit_ts: u64, protocol: CommitProtocol) -> Decision {
        Decision::Committed(CommitInfo {
            commit_ts: TimeStamp::new(commit_ts),
            protocol,
        })
    }

    #[test]
    fn the_answers_decide_the_protocol_and_the_commit_ts() {
        use CommitProtocol::{AsyncCommit, OnePc, TwoPc};
        let one_pc = [answered(None, Some(7))];
        assert_eq!(decide(OnePc, &one_pc), committed(7, OnePc));
        let fell_back = [answered(None, None)];
        assert_eq!(decide(OnePc, &fell_back), Decision::TwoPhase);
        let both = [answered(Some(5), None), answered(Some(9), None)];
        assert_eq!(decide(AsyncCommit, &both), committed(9, AsyncCommit));
        let one_fell_back = [answered(Some(5), None), answered(None, None)];
        assert_eq!(decide(AsyncCommit, &one_fell_back), Decision::TwoPhase);
        assert_eq!(decide(TwoPc, &fell_back), Decision::TwoPhase);
    }
}
