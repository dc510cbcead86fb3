//! The indexer pipeline of `examples/indexer` (two chained observers: an
//! inverted index with per-term counts, and a top-terms table over the
//! counts): after random inserts, updates and deletes, made while worker
//! threads run, the derived tables equal a full recomputation from the
//! documents, on both engines. The crash version (kill -9 in the middle)
//! is `tools/tests/observers_crash.rs`.

mod common;

#[path = "../examples/indexer/pipeline.rs"]
mod pipeline;

use std::path::Path;
use std::time::Duration;

use percolate::engine::Engine;
use percolate::txn::client::Client;
use percolate::{WorkerConfig, Workers};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn client_on<E: Engine>(engine: E, dir: &Path) -> Client<E> {
    common::client_over(engine, dir, vec![b"doc/5".to_vec(), b"idx/m".to_vec()])
}

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "omega", "pi", "rho", "tau",
];

fn random_text(rng: &mut StdRng) -> String {
    let words: Vec<&str> = (0..rng.random_range(1..8))
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect();
    words.join(" ")
}

/// Checks the derived tables against a recomputation, and the audit.
fn check<E: Engine>(client: &Client<E>) {
    client
        .view(|txn| {
            let docs = pipeline::documents(txn)?;
            assert_eq!(pipeline::stored(txn)?, pipeline::recompute(&docs));
            let (duplicates, behind) = pipeline::audit(txn)?;
            assert!(duplicates.is_empty(), "indexed twice: {duplicates:?}");
            assert!(behind.is_empty(), "not indexed: {behind:?}");
            Ok(())
        })
        .unwrap();
}

fn derived_tables_equal_a_recomputation_after_random_changes<E: Engine>(client: &Client<E>) {
    pipeline::register(client, true).unwrap();
    let mut workers = Workers::new(
        client.clone(),
        WorkerConfig {
            poll_interval: Duration::from_millis(5),
            idle_timeout: Duration::from_secs(30),
        },
    );
    workers.start(2).unwrap();
    let seed = rand::random();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..300 {
        let id = format!("{:02}", rng.random_range(0..30));
        let text = (!rng.random_ratio(1, 4)).then(|| random_text(&mut rng));
        client
            .with_retry(|txn| pipeline::load(txn, &id, text.as_deref()))
            .unwrap();
        if step % 100 == 99 {
            // Midway too, while the workers run on.
            workers.run_until_idle().unwrap();
            check(client);
        }
    }
    workers.run_until_idle().unwrap();
    workers.stop().unwrap();
    check(client);
    let metrics = client.observer_metrics().unwrap();
    assert_eq!(metrics.pending, 0);
    assert!(metrics.runs > 0 && metrics.errors == 0, "{metrics:?}");
}

fn a_document_written_in_one_transaction_with_others_is_indexed<E: Engine>(client: &Client<E>) {
    pipeline::register(client, true).unwrap();
    // One transaction, many documents (several regions and batches): 2PC
    // or async commit, each key's notification with its lock.
    client
        .with_retry(|txn| {
            for i in 0..100 {
                pipeline::load(txn, &format!("{i:03}"), Some("alpha beta"))?;
            }
            Ok(())
        })
        .unwrap();
    Workers::new(client.clone(), WorkerConfig::default())
        .run_until_idle()
        .unwrap();
    check(client);
    let counts = client.view(pipeline::stored).unwrap().counts;
    assert_eq!(counts.get("alpha"), Some(&100));
}

client_scenarios_on_both_engines! {
    derived_tables_equal_a_recomputation_after_random_changes => derived_tables_equal_a_recomputation_after_random_changes;
    a_document_written_in_one_transaction_with_others_is_indexed => a_document_written_in_one_transaction_with_others_is_indexed;
}
