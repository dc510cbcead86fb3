//! What the simulation records for the checker: every transaction (its
//! writes and what became of it, as its client saw it) and every read
//! (where, when, and what it returned).

use std::collections::BTreeMap;

use percolate_mvcc::TimeStamp;

use crate::world::World;

/// A buffered write, as the client's own buffer holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Put(Vec<u8>),
    Insert(Vec<u8>),
    Delete,
    /// A delete of a key this transaction inserted: the insert's check
    /// that the key is absent stands.
    DeleteInserted,
    Lock,
}

impl Op {
    /// What a transaction's optimistic buffer holds for `key` after a
    /// write `new` over `old`, by the client's rules
    /// (`Transaction::put`, `delete`, `insert`): a put or a delete over
    /// the transaction's own insert keeps the insert's check (an insert
    /// with the new value, or `DeleteInserted`), and an insert over its own
    /// delete is a put.
    pub(crate) fn buffered(old: Option<&Op>, new: Op) -> Op {
        let inserted = matches!(old, Some(Op::Insert(_) | Op::DeleteInserted));
        match new {
            Op::Put(v) if inserted => Op::Insert(v),
            Op::Delete if inserted => Op::DeleteInserted,
            Op::Insert(v) if old == Some(&Op::Delete) => Op::Put(v),
            new => new,
        }
    }

    /// The value a committed write of this op leaves (`None`: no value).
    pub(crate) fn value(&self) -> Option<&[u8]> {
        match self {
            Op::Put(v) | Op::Insert(v) => Some(v),
            Op::Delete | Op::DeleteInserted | Op::Lock => None,
        }
    }
}

/// What a transaction's client last knew of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Still running when the simulation stopped (it never does: clients
    /// finish or die before the check).
    Open,
    /// Acknowledged: the client was told it committed at this commit_ts.
    Committed(TimeStamp),
    /// The client was told it failed before its commit point: it must not
    /// be committed anywhere.
    Aborted(String),
    /// The client died (or the process crashed) with the outcome unknown
    /// to it: either is allowed, but all or nothing.
    Unknown,
}

/// One transaction.
#[derive(Clone, Debug)]
pub(crate) struct TxnRecord {
    pub(crate) start_ts: TimeStamp,
    pub(crate) pessimistic: bool,
    /// Every key it prewrote (or was about to), with its op. Empty until
    /// the commit began (a transaction that never got there wrote nothing).
    pub(crate) writes: BTreeMap<Vec<u8>, Op>,
    /// A pessimistic transaction's for_update_ts of each key it locked.
    pub(crate) locked_at: BTreeMap<Vec<u8>, TimeStamp>,
    /// Its latest for_update_ts.
    pub(crate) for_update_ts: TimeStamp,
    pub(crate) outcome: Outcome,
}

/// How a read treats locks and time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadKind {
    /// Snapshot isolation at its ts: must see exactly the commits at or
    /// below it, now and forever.
    Si,
    /// Read committed at its ts: locks ignored; must see the newest commit
    /// at or below the ts already written when it ran.
    Rc,
    /// At `u64::MAX` ("the latest"): the newest commit written when it ran.
    Latest,
}

/// What a read returned.
#[derive(Clone, Debug)]
pub(crate) enum Read {
    Get {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
    Scan {
        start: Vec<u8>,
        end: Vec<u8>,
        limit: usize,
        reverse: bool,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
}

/// A read that answered.
#[derive(Clone, Debug)]
pub(crate) struct Observation {
    /// The step it ran in.
    pub(crate) step: u64,
    pub(crate) ts: TimeStamp,
    pub(crate) kind: ReadKind,
    pub(crate) read: Read,
    /// The transaction that read (index into `History::txns`).
    pub(crate) txn: Option<usize>,
}

/// A value as traces print it.
pub(crate) fn show(value: Option<&[u8]>) -> String {
    match value {
        None => "none".into(),
        Some(v) => {
            // Long values are a writer's tag padded out: print the tag.
            let tag = v.split(|b| *b == b'#').next().unwrap_or(v);
            if tag.len() < v.len() {
                format!("{}(+{})", String::from_utf8_lossy(tag), v.len() - tag.len())
            } else {
                String::from_utf8_lossy(v).into_owned()
            }
        }
    }
}

impl Observation {
    /// The read and its answer, one line.
    pub(crate) fn describe(&self) -> String {
        let kind = match self.kind {
            ReadKind::Si => "",
            ReadKind::Rc => " rc",
            ReadKind::Latest => "",
        };
        match &self.read {
            Read::Get { key, value } => format!(
                "get {} ts={}{kind} -> {}",
                String::from_utf8_lossy(key),
                World::fmt_ts(self.ts),
                show(value.as_deref())
            ),
            Read::Scan {
                start,
                end,
                limit,
                reverse,
                pairs,
            } => {
                let found: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), show(Some(v))))
                    .collect();
                format!(
                    "scan{} {}..{} limit={limit} ts={}{kind} -> [{}]",
                    if *reverse { "_reverse" } else { "" },
                    String::from_utf8_lossy(start),
                    String::from_utf8_lossy(end),
                    World::fmt_ts(self.ts),
                    found.join(" ")
                )
            }
        }
    }
}

/// The whole history of one seed.
#[derive(Default)]
pub(crate) struct History {
    pub(crate) txns: Vec<TxnRecord>,
    pub(crate) observations: Vec<Observation>,
}
