//! Observers: an incremental indexing pipeline, as in the Percolator
//! paper.
//!
//! ```text
//! cargo run --release --example indexer
//! cargo run --release --example indexer -- --documents 2000 --workers 2
//! ```
//!
//! A loader writes documents (`doc/<id>`); an observer, the indexer,
//! tokenises each changed document and keeps an inverted index
//! (`idx/<term>/<id>`) and per-term document counts (`count/<term>`); a
//! second observer, downstream, watches the counts and keeps a table of
//! the top terms (`top/`). Nothing is recomputed from scratch: each change
//! runs the indexer once for its document, and each count it changes runs
//! the top-terms observer once for its term (see `pipeline.rs` for the
//! keys). The loader's transactions only write documents; the observers'
//! transactions run on two worker threads while it loads, updates and
//! deletes. At the end the derived tables are compared with a full
//! recomputation from the documents, and a weak notification re-runs the
//! top-terms observer on one term without changing anything.

mod pipeline;

use std::time::Instant;

use percolate::Client;
use rand::Rng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut documents = 500usize;
    let mut workers_n = 2usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--documents" => documents = args.next().ok_or("--documents N")?.parse()?,
            "--workers" => workers_n = args.next().ok_or("--workers N")?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let dir = tempfile::tempdir()?;
    let client = Client::open(dir.path())?;
    // Observers first: a write made while nobody watches its key is not
    // notified.
    pipeline::register(&client, true)?;
    let mut workers = client.workers();
    workers.start(workers_n)?;

    let started = Instant::now();
    let mut rng = rand::rng();
    let mut writes = 0;
    for round in 0..3 {
        for i in 0..documents {
            let id = format!("{i:05}");
            // Round 0 loads; later rounds update two in three and delete
            // the rest.
            let text = if round > 0 && rng.random_ratio(1, 3) {
                None
            } else {
                let words: Vec<&str> = (0..rng.random_range(3..12))
                    .map(|_| pipeline::WORDS[rng.random_range(0..pipeline::WORDS.len())])
                    .collect();
                Some(words.join(" "))
            };
            client.with_retry(|txn| pipeline::load(txn, &id, text.as_deref()))?;
            writes += 1;
        }
    }
    let loaded = started.elapsed();
    workers.run_until_idle()?;
    workers.stop()?;
    let idle = started.elapsed();
    let metrics = client.observer_metrics()?;
    println!(
        "{writes} document writes in {:.2?}; observers idle after {:.2?}",
        loaded, idle
    );
    println!(
        "observer runs {}, collapsed notifications {}, conflicts {}, jumps {}",
        metrics.runs, metrics.collapsed, metrics.conflicts, metrics.jumps
    );

    let check = |client: &Client| -> Result<(), Box<dyn std::error::Error>> {
        client.view(|txn| {
            let docs = pipeline::documents(txn)?;
            let stored = pipeline::stored(txn)?;
            let expected = pipeline::recompute(&docs);
            assert_eq!(
                stored, expected,
                "the derived tables differ from a recomputation"
            );
            let (duplicates, behind) = pipeline::audit(txn)?;
            assert!(duplicates.is_empty(), "indexed twice: {duplicates:?}");
            assert!(behind.is_empty(), "not indexed: {behind:?}");
            println!(
                "{} documents, {} terms; derived tables equal a full recomputation",
                docs.len(),
                stored.counts.len()
            );
            for (count, term) in stored.top.iter().take(5) {
                println!("  {term:<12} in {count} documents");
            }
            Ok(())
        })?;
        Ok(())
    };
    check(&client)?;

    // A weak notification: the top-terms observer runs again for one
    // term though its count did not change (as after a change of the
    // table's layout), and leaves the same table.
    let runs = client.observer_metrics()?.runs;
    client.notify(format!("{}lock", pipeline::COUNT).as_bytes())?;
    client.workers().run_until_idle()?;
    println!(
        "weak notification of count/lock: {} more run",
        client.observer_metrics()?.runs - runs
    );
    check(&client)?;
    Ok(())
}
