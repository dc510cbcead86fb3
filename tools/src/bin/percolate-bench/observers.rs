//! `percolate-bench --observers`: what incremental processing by observers
//! costs, next to the same derived-table maintenance done inline.
//!
//! The work is the indexer of `examples/indexer`: a document write makes
//! its terms' postings and per-term counts follow (a read of the document's
//! previously indexed terms, and a read-modify-write of each changed term's
//! count). Each system writes `--observer-docs` distinct documents (so no
//! two changes collapse into one run) on RocksDB, in a fresh directory:
//!
//! * `inline`: each loader transaction writes the document and maintains
//!   the index itself (one transaction per document, 1PC).
//! * `observer-1`, `observer-2`: each loader transaction writes only the
//!   document (and its notification); then 1 or 2 worker threads run the
//!   indexer, one observer transaction per document. Throughput: documents
//!   indexed per second of the workers' run, from the first to the last
//!   notification cleared.
//!
//! The three run in 5 rounds, each writing a fifth of the documents per
//! round, in alternating order, so that the machine's other load weighs on
//! all of them alike. Then 1PC transactions of 4 unwatched keys on a client
//! with no observer and on one with an observer of another prefix,
//! alternating too (what a transaction that writes no watched key pays).
//!
//! Then the latency from a loader's commit to the start of the observer
//! run for its document, with the loader writing at a steady
//! `--observer-rate` documents per second while 1 or 2 workers run.

#[path = "../../../../examples/indexer/pipeline.rs"]
mod pipeline;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use percolate::{Client, Watch};

use crate::systems::BoxError;

/// The text of document `i`: 8 words of a vocabulary of `vocabulary`
/// (`pipeline::WORDS`, then `w<n>`), chosen by `i`.
fn text(i: u64, vocabulary: u64) -> String {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let words: Vec<String> = (0..8)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = x % vocabulary.max(1);
            match pipeline::WORDS.get(n as usize) {
                Some(word) => word.to_string(),
                None => format!("w{n}"),
            }
        })
        .collect();
    words.join(" ")
}

fn id(i: u64) -> String {
    format!("{i:08}")
}

/// Runs the observer benchmark and prints its figures and ratios.
pub fn run(docs: u64, vocabulary: u64, rate: u64, latency_seconds: f64) -> Result<(), BoxError> {
    println!(
        "# Observers: {docs} distinct documents of 8 words ({vocabulary}-word vocabulary), RocksDB"
    );
    let t = throughput(docs, vocabulary)?;
    println!(
        "inline       : {:>9.0} docs/s (write + index in one transaction), CPU {:.0} µs/doc",
        t.inline, t.cpu_micros[0]
    );
    for (i, indexed) in t.observed.iter().enumerate() {
        let workers = i + 1;
        let m = &t.metrics[i];
        println!(
            "observer-{workers}   : {indexed:>9.0} docs/s indexed by {workers} worker(s), CPU {:.0} µs/doc; \
             loader alone {:>9.0} docs/s; runs {}, conflicts {}, jumps {}",
            t.cpu_micros[workers], t.loader[i], m.runs, m.conflicts, m.jumps
        );
    }
    for (i, indexed) in t.observed.iter().enumerate() {
        println!(
            "RATIO observer-{} / inline: {:.2}x",
            i + 1,
            indexed / t.inline
        );
    }
    println!(
        "RATIO observer-2 / observer-1: {:.2}x",
        t.observed[1] / t.observed[0]
    );
    for i in 1..3 {
        println!(
            "RATIO CPU per doc observer-{i} / inline: {:.2}x",
            t.cpu_micros[i] / t.cpu_micros[0]
        );
    }
    let (none, other) = unwatched(docs)?;
    println!(
        "unwatched writes: {none:>9.0} txn/s with no observer, {other:>9.0} txn/s with an observer of another prefix"
    );
    println!(
        "RATIO unwatched with an observer / with none: {:.2}x",
        other / none
    );
    for workers in [1, 2] {
        let (p50, p99, max, n) = latency(rate, vocabulary, latency_seconds, workers)?;
        println!(
            "latency commit -> observer run, {workers} worker(s), {rate} docs/s: \
             p50 {p50:.2?}, p99 {p99:.2?}, max {max:.2?} ({n} documents)"
        );
    }
    Ok(())
}

/// The throughputs, in documents per second.
struct Throughput {
    /// Written and indexed inline.
    inline: f64,
    /// Indexed by 1 and 2 workers.
    observed: [f64; 2],
    /// Written by the loader of the observed systems (notifications
    /// included, indexing not).
    loader: [f64; 2],
    /// The observed systems' metrics at the end.
    metrics: [percolate::ObserverMetrics; 2],
    /// CPU time of the process per document: inline (write and index),
    /// then the workers' phase of observer-1 and observer-2 (index only).
    cpu_micros: [f64; 3],
}

/// Rounds of the throughput measurement: each system writes (and indexes)
/// a fifth of the documents per round, in alternating order, so that the
/// machine's other load weighs on all alike.
const ROUNDS: u64 = 5;

/// Measures the three systems, each on its own RocksDB directory.
fn throughput(docs: u64, vocabulary: u64) -> Result<Throughput, BoxError> {
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let inline = Client::open(dirs[0].path())?;
    let observed = [Client::open(dirs[1].path())?, Client::open(dirs[2].path())?];
    let calls = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    for (client, calls) in observed.iter().zip(&calls) {
        register_indexer(client, calls.clone())?;
    }
    let chunk = docs / ROUNDS;
    let (mut t_inline, mut t_loader, mut t_workers) =
        (Duration::ZERO, [Duration::ZERO; 2], [Duration::ZERO; 2]);
    let mut cpu = [Duration::ZERO; 3];
    for round in 0..ROUNDS {
        let ids = round * chunk..(round + 1) * chunk;
        let mut order = [0, 1, 2];
        if round % 2 == 1 {
            order.reverse();
        }
        for system in order {
            if system == 0 {
                let cpu_before = crate::run::process_cpu();
                t_inline += inline_chunk(&inline, ids.clone(), vocabulary)?;
                cpu[0] += crate::run::process_cpu().saturating_sub(cpu_before);
            } else {
                let i = system - 1;
                let (load, work, work_cpu) =
                    observed_chunk(&observed[i], &calls[i], system, ids.clone(), vocabulary)?;
                t_loader[i] += load;
                t_workers[i] += work;
                cpu[system] += work_cpu;
            }
        }
    }
    check(&inline)?;
    let n = (chunk * ROUNDS) as f64;
    let mut metrics = [percolate::ObserverMetrics::default(); 2];
    for (i, client) in observed.iter().enumerate() {
        check(client)?;
        metrics[i] = client.observer_metrics()?;
    }
    Ok(Throughput {
        inline: n / t_inline.as_secs_f64(),
        observed: t_workers.map(|t| n / t.as_secs_f64()),
        loader: t_loader.map(|t| n / t.as_secs_f64()),
        metrics,
        cpu_micros: cpu.map(|c| c.as_secs_f64() * 1e6 / n),
    })
}

/// Writes and indexes the documents `ids` inline; the time it took.
fn inline_chunk(
    client: &Client,
    ids: std::ops::Range<u64>,
    vocabulary: u64,
) -> Result<Duration, BoxError> {
    let started = Instant::now();
    for i in ids {
        let (id, text) = (id(i), text(i, vocabulary));
        let key = format!("{}{id}", pipeline::DOC);
        client.with_retry(|txn| {
            pipeline::load(txn, &id, Some(&text))?;
            pipeline::index_document(txn, key.as_bytes(), false)
        })?;
    }
    Ok(started.elapsed())
}

/// Registers the indexer; the counter counts its calls (read while the
/// workers run: `observer_metrics` would scan the notifications).
fn register_indexer(client: &Client, calls: Arc<AtomicU64>) -> percolate::Result<()> {
    client.observe("indexer", Watch::prefix(pipeline::DOC), move |txn, key| {
        calls.fetch_add(1, Ordering::Relaxed);
        pipeline::index_document(txn, key, false)
    })
}

/// Writes the documents `ids`, then indexes them with `workers` worker
/// threads; the time each took, and the CPU time of the second.
fn observed_chunk(
    client: &Client,
    calls: &AtomicU64,
    workers: usize,
    ids: std::ops::Range<u64>,
    vocabulary: u64,
) -> Result<(Duration, Duration, Duration), BoxError> {
    let target = calls.load(Ordering::Relaxed) + (ids.end - ids.start);
    let started = Instant::now();
    for i in ids {
        let (id, text) = (id(i), text(i, vocabulary));
        client.with_retry(|txn| pipeline::load(txn, &id, Some(&text)))?;
    }
    let load = started.elapsed();
    let mut handle = client.workers();
    let (started, cpu_before) = (Instant::now(), crate::run::process_cpu());
    handle.start(workers)?;
    // Every document's run called (a conflict calls again), then the last
    // commits.
    while calls.load(Ordering::Relaxed) < target {
        std::thread::sleep(Duration::from_millis(1));
    }
    handle.run_until_idle()?;
    let work = started.elapsed();
    handle.stop()?;
    let cpu = crate::run::process_cpu().saturating_sub(cpu_before);
    Ok((load, work, cpu))
}

/// What observers cost a transaction that writes no watched key: 1PC
/// transactions of 4 keys, on a client with no observer and on one with an
/// observer of another prefix, in alternating rounds. Transactions per
/// second of each.
fn unwatched(txns: u64) -> Result<(f64, f64), BoxError> {
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let none = Client::open(dir_a.path())?;
    let other = Client::open(dir_b.path())?;
    other.observe("elsewhere", Watch::prefix("watched/"), |_, _| Ok(()))?;
    let mut elapsed = [Duration::ZERO; 2];
    let rounds = 8;
    for round in 0..rounds {
        for (i, client) in [&none, &other].into_iter().enumerate() {
            let started = Instant::now();
            for t in 0..txns / rounds {
                client.with_retry(|txn| {
                    for k in 0..4 {
                        txn.put(format!("user/{:08}/{k}", round * txns + t), "value");
                    }
                    Ok(())
                })?;
            }
            elapsed[i] += started.elapsed();
        }
    }
    let per_second = |d: Duration| (txns / rounds * rounds) as f64 / d.as_secs_f64();
    Ok((per_second(elapsed[0]), per_second(elapsed[1])))
}

/// The index must match the documents (the benchmark measures the right
/// thing).
fn check(client: &Client) -> Result<(), BoxError> {
    let (stored, expected) = client.view(|txn| {
        let docs = pipeline::documents(txn)?;
        Ok((pipeline::stored(txn)?, pipeline::recompute(&docs)))
    })?;
    if stored.postings != expected.postings || stored.counts != expected.counts {
        return Err("the index differs from a recomputation".into());
    }
    Ok(())
}

/// p50, p99 and max of commit-to-run latency, and the documents measured.
fn latency(
    rate: u64,
    vocabulary: u64,
    seconds: f64,
    workers: usize,
) -> Result<(Duration, Duration, Duration, usize), BoxError> {
    let dir = tempfile::tempdir()?;
    let client = Client::open(dir.path())?;
    let runs: Arc<Mutex<HashMap<Vec<u8>, Instant>>> = Arc::default();
    let seen = runs.clone();
    client.observe("indexer", Watch::prefix(pipeline::DOC), move |txn, key| {
        seen.lock()
            .expect("not poisoned")
            .entry(key.to_vec())
            .or_insert_with(Instant::now);
        pipeline::index_document(txn, key, false)
    })?;
    let mut handle = client.workers();
    handle.start(workers)?;
    let total = (rate as f64 * seconds) as u64;
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut committed = HashMap::new();
    let started = Instant::now();
    for i in 0..total {
        let due = started + interval * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (id, text) = (id(i), text(i, vocabulary));
        client.with_retry(|txn| pipeline::load(txn, &id, Some(&text)))?;
        committed.insert(
            format!("{}{id}", pipeline::DOC).into_bytes(),
            Instant::now(),
        );
    }
    handle.run_until_idle()?;
    handle.stop()?;
    let runs = runs.lock().expect("not poisoned");
    let mut latencies: Vec<Duration> = committed
        .iter()
        .filter_map(|(key, at)| runs.get(key).map(|run| run.saturating_duration_since(*at)))
        .collect();
    latencies.sort();
    let pick = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Ok((pick(0.5), pick(0.99), pick(1.0), latencies.len()))
}
