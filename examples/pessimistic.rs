//! Pessimistic transactions: locks taken as the transaction goes, so a hot
//! key's writers queue instead of conflicting at commit.
//!
//! ```text
//! cargo run --example pessimistic
//! ```
//!
//! Eight threads each add 1 to one counter 100 times. `get_for_update`
//! locks the key as it reads it; a writer that finds it locked waits for
//! the holder's commit (woken when the lock goes, not by polling), so no
//! increment is lost and none is retried from scratch.

use percolate::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let client = Client::open(dir.path())?;
    const THREADS: u64 = 8;
    const EACH: u64 = 100;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let client = client.clone();
                s.spawn(move || -> percolate::Result<()> {
                    for _ in 0..EACH {
                        // Retried only on a deadlock or a lost lock, not on
                        // a write conflict: the lock is held from the read
                        // to the commit.
                        client.with_retry_pessimistic(|txn| {
                            let count = txn.get_for_update(b"counter")?.map_or(0, |v| {
                                String::from_utf8_lossy(&v).parse::<u64>().unwrap_or(0)
                            });
                            txn.put(b"counter".to_vec(), (count + 1).to_string())?;
                            Ok(())
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a worker panicked"))
    })?;
    let total = client.get_latest(b"counter")?.unwrap_or_default();
    let total = String::from_utf8_lossy(&total);
    println!("counter = {total} after {} increments", THREADS * EACH);
    if total != (THREADS * EACH).to_string() {
        return Err("an increment was lost".into());
    }
    Ok(())
}
