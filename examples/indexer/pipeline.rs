//! An incremental indexing pipeline of two observers, in the spirit of the
//! Percolator paper's indexer: shared by the `indexer` example, the
//! observer tests (`tests/observers_indexer.rs`) and the crash harness
//! (`percolate-soak observer-writer`).
//!
//! | key | value | written by |
//! |---|---|---|
//! | `doc/<id>` | the document's text | the loader |
//! | `docver/<id>` | how many times the loader wrote `doc/<id>` | the loader, with it |
//! | `terms/<id>` | the terms `doc/<id>` was last indexed with | the indexer |
//! | `idx/<term>/<id>` | empty: a posting of the inverted index | the indexer |
//! | `count/<term>` | how many documents hold the term | the indexer |
//! | `seen/<id>` | the `docver/<id>` the indexer last indexed (audit) | the indexer |
//! | `dup/<id>/<ver>` | empty: the indexer ran twice for one version (audit) | the indexer |
//! | `top/<10^10 - count>/<term>` | empty: terms by count, largest first | the top-terms observer |
//! | `topof/<term>` | the term's current `top/` key | the top-terms observer |
//!
//! The indexer watches `doc/` and keeps the index and the counts; the
//! top-terms observer watches `count/` (the indexer's output) and keeps the
//! table of terms by count. Each is a diff against what it wrote last, so
//! each change costs work in proportion to the change, not to the corpus.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use percolate::{Client, Engine, Result, Transaction, Watch};

/// A vocabulary for documents: the example's and the benchmark's.
pub const WORDS: &[&str] = &[
    "percolator",
    "bigtable",
    "observer",
    "notify",
    "transaction",
    "snapshot",
    "lock",
    "write",
    "commit",
    "primary",
    "timestamp",
    "oracle",
    "index",
    "crawl",
    "document",
    "page",
    "link",
    "anchor",
    "rank",
    "cluster",
    "tablet",
    "column",
    "row",
    "acknowledge",
    "worker",
    "scan",
];

/// The documents.
pub const DOC: &str = "doc/";
/// The loader's version of each document.
pub const DOC_VERSION: &str = "docver/";
/// The terms each document was last indexed with.
pub const DOC_TERMS: &str = "terms/";
/// The inverted index.
pub const POSTING: &str = "idx/";
/// Documents per term.
pub const COUNT: &str = "count/";
/// The version of each document the indexer last indexed.
pub const SEEN: &str = "seen/";
/// A version indexed twice (must never exist).
pub const DUPLICATE: &str = "dup/";
/// Terms by count, largest first.
pub const TOP: &str = "top/";
/// Each term's `top/` key.
pub const TOP_OF: &str = "topof/";

/// What the two observers derive from the documents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Derived {
    /// `term -> ids`.
    pub postings: BTreeMap<String, BTreeSet<String>>,
    /// `term -> documents holding it`.
    pub counts: BTreeMap<String, u64>,
    /// Terms by count, largest first, ties by term.
    pub top: Vec<(u64, String)>,
}

/// The distinct lowercase words of `text`.
pub fn tokenize(text: &[u8]) -> BTreeSet<String> {
    String::from_utf8_lossy(text)
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Registers the indexer and the top-terms observer on `client`. With
/// `audit`, the indexer also checks that it never indexes one version of a
/// document twice (`seen/`, `dup/`).
pub fn register<E: Engine>(client: &Client<E>, audit: bool) -> Result<()> {
    client.observe("indexer", Watch::prefix(DOC), move |txn, key| {
        index_document(txn, key, audit)
    })?;
    client.observe("top-terms", Watch::prefix(COUNT), update_top)
}

/// Writes (or deletes, `None`) the document `id` and bumps its version.
pub fn load<E: Engine>(txn: &mut Transaction<E>, id: &str, text: Option<&str>) -> Result<()> {
    let version = read_u64(txn, &format!("{DOC_VERSION}{id}"))?;
    txn.put(format!("{DOC_VERSION}{id}"), (version + 1).to_string());
    match text {
        Some(text) => txn.put(format!("{DOC}{id}"), text),
        None => txn.delete(format!("{DOC}{id}")),
    }
    Ok(())
}

/// The indexer: brings the postings and counts of the document at `key`
/// from the terms it was last indexed with to its current ones.
pub fn index_document<E: Engine>(txn: &mut Transaction<E>, key: &[u8], audit: bool) -> Result<()> {
    let id = String::from_utf8_lossy(&key[DOC.len()..]).into_owned();
    let terms_key = format!("{DOC_TERMS}{id}");
    let new = txn
        .get(key)?
        .map(|text| tokenize(&text))
        .unwrap_or_default();
    let old: BTreeSet<String> = match txn.get(terms_key.as_bytes())? {
        Some(v) => String::from_utf8_lossy(&v)
            .split(' ')
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
        None => BTreeSet::new(),
    };
    for gone in old.difference(&new) {
        txn.delete(format!("{POSTING}{gone}/{id}"));
        add_to_count(txn, gone, -1)?;
    }
    for added in new.difference(&old) {
        txn.put(format!("{POSTING}{added}/{id}"), "");
        add_to_count(txn, added, 1)?;
    }
    if new.is_empty() {
        txn.delete(terms_key);
    } else {
        let joined: Vec<&str> = new.iter().map(String::as_str).collect();
        txn.put(terms_key, joined.join(" "));
    }
    if audit {
        let version = read_u64(txn, &format!("{DOC_VERSION}{id}"))?;
        let seen = read_u64(txn, &format!("{SEEN}{id}"))?;
        if version <= seen {
            txn.put(format!("{DUPLICATE}{id}/{version}"), "");
        }
        txn.put(format!("{SEEN}{id}"), version.to_string());
    }
    Ok(())
}

fn add_to_count<E: Engine>(txn: &mut Transaction<E>, term: &str, delta: i64) -> Result<()> {
    let key = format!("{COUNT}{term}");
    let count = read_u64(txn, &key)?.saturating_add_signed(delta);
    if count == 0 {
        txn.delete(key);
    } else {
        txn.put(key, count.to_string());
    }
    Ok(())
}

/// The top-terms observer: moves the term of the count at `key` to its
/// place in `top/`.
pub fn update_top<E: Engine>(txn: &mut Transaction<E>, key: &[u8]) -> Result<()> {
    let term = String::from_utf8_lossy(&key[COUNT.len()..]).into_owned();
    let count = read_u64(txn, &format!("{COUNT}{term}"))?;
    let top_of = format!("{TOP_OF}{term}");
    if let Some(old) = txn.get(top_of.as_bytes())? {
        txn.delete(old);
    }
    if count == 0 {
        txn.delete(top_of);
    } else {
        let entry = top_key(count, &term);
        txn.put(top_of, entry.clone());
        txn.put(entry, "");
    }
    Ok(())
}

/// The `top/` key of a term with `count` documents.
fn top_key(count: u64, term: &str) -> String {
    format!(
        "{TOP}{:010}/{term}",
        10_000_000_000u64.saturating_sub(count)
    )
}

fn read_u64<E: Engine>(txn: &Transaction<E>, key: &str) -> Result<u64> {
    Ok(match txn.get(key.as_bytes())? {
        Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
        None => 0,
    })
}

/// Every document, `id -> text`, at `txn`'s snapshot.
pub fn documents<E: Engine>(txn: &Transaction<E>) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut docs = BTreeMap::new();
    for pair in txn.scan(prefix_range(DOC)) {
        let (key, text) = pair?;
        docs.insert(
            String::from_utf8_lossy(&key[DOC.len()..]).into_owned(),
            text,
        );
    }
    Ok(docs)
}

/// What the observers should have derived from `docs`: the full
/// recomputation.
pub fn recompute(docs: &BTreeMap<String, Vec<u8>>) -> Derived {
    let mut derived = Derived::default();
    for (id, text) in docs {
        for term in tokenize(text) {
            derived
                .postings
                .entry(term.clone())
                .or_default()
                .insert(id.clone());
            *derived.counts.entry(term).or_default() += 1;
        }
    }
    derived.top = by_count(&derived.counts);
    derived
}

fn by_count(counts: &BTreeMap<String, u64>) -> Vec<(u64, String)> {
    let mut top: Vec<(u64, String)> = counts.iter().map(|(t, c)| (*c, t.clone())).collect();
    top.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    top
}

/// What the observers derived, as stored at `txn`'s snapshot.
pub fn stored<E: Engine>(txn: &Transaction<E>) -> Result<Derived> {
    let mut derived = Derived::default();
    for pair in txn.scan(prefix_range(POSTING)) {
        let (key, _) = pair?;
        let rest = String::from_utf8_lossy(&key[POSTING.len()..]).into_owned();
        let (term, id) = rest.split_once('/').unwrap_or((&rest, ""));
        derived
            .postings
            .entry(term.to_string())
            .or_default()
            .insert(id.to_string());
    }
    for pair in txn.scan(prefix_range(COUNT)) {
        let (key, value) = pair?;
        let term = String::from_utf8_lossy(&key[COUNT.len()..]).into_owned();
        derived
            .counts
            .insert(term, String::from_utf8_lossy(&value).parse().unwrap_or(0));
    }
    for pair in txn.scan(prefix_range(TOP)) {
        let (key, _) = pair?;
        let rest = String::from_utf8_lossy(&key[TOP.len()..]).into_owned();
        let (inverted, term) = rest.split_once('/').unwrap_or((&rest, ""));
        let count = 10_000_000_000u64.saturating_sub(inverted.parse().unwrap_or(0));
        derived.top.push((count, term.to_string()));
    }
    Ok(derived)
}

/// A document whose last version was not indexed: id, version, the
/// version indexed.
pub type Behind = (String, u64, u64);

/// The audit's findings at `txn`'s snapshot: versions indexed twice (their
/// `dup/` keys), and documents whose last version was not indexed.
pub fn audit<E: Engine>(txn: &Transaction<E>) -> Result<(Vec<String>, Vec<Behind>)> {
    let mut duplicates = Vec::new();
    for pair in txn.scan(prefix_range(DUPLICATE)) {
        duplicates.push(String::from_utf8_lossy(&pair?.0).into_owned());
    }
    let mut behind = Vec::new();
    for pair in txn.scan(prefix_range(DOC_VERSION)) {
        let (key, value) = pair?;
        let id = String::from_utf8_lossy(&key[DOC_VERSION.len()..]).into_owned();
        let version: u64 = String::from_utf8_lossy(&value).parse().unwrap_or(0);
        let seen = read_u64(txn, &format!("{SEEN}{id}"))?;
        if seen != version {
            behind.push((id, version, seen));
        }
    }
    Ok((duplicates, behind))
}

/// The keys that start with `prefix`.
fn prefix_range(prefix: &str) -> std::ops::Range<Vec<u8>> {
    let start = prefix.as_bytes().to_vec();
    let mut end = start.clone();
    // Every prefix here ends in '/', which is not 0xff.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    start..end
}
