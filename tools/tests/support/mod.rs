//! What the crash tests of this directory share.

/// The seed of a randomised crash test: `PERCOLATE_CRASH_SEED` when set
/// (to replay a run), else a random one, printed with how to replay it.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("PERCOLATE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("{test} seed: {seed} (PERCOLATE_CRASH_SEED={seed} to replay)");
    seed
}
