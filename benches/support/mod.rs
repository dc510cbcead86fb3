//! Helpers shared by the benchmarks: side-by-side ratio measurement.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Times `ours` and `baseline` in alternating rounds (so both see the same
/// machine state) and prints the throughput of `ours` as a fraction of the
/// baseline's. Each closure runs `ops` operations per call. Returns the ratio
/// (ours / baseline, higher is better for ours).
pub fn print_ratio<A, B>(name: &str, ops: u64, rounds: usize, mut ours: A, mut baseline: B) -> f64
where
    A: FnMut(),
    B: FnMut(),
{
    let mut ours_times = Vec::with_capacity(rounds);
    let mut base_times = Vec::with_capacity(rounds);
    // One warm-up round each.
    ours();
    baseline();
    for _ in 0..rounds {
        ours_times.push(time(&mut ours));
        base_times.push(time(&mut baseline));
    }
    let (ours_t, base_t) = (median(&mut ours_times), median(&mut base_times));
    let ratio = base_t.as_secs_f64() / ours_t.as_secs_f64();
    println!(
        "RATIO {name}: {ratio:.2}x ({:.0} vs {:.0} ops/s, median of {rounds} alternating rounds of {ops} ops)",
        ops as f64 / ours_t.as_secs_f64(),
        ops as f64 / base_t.as_secs_f64(),
    );
    ratio
}

fn time(f: &mut impl FnMut()) -> Duration {
    let start = Instant::now();
    f();
    black_box(start.elapsed())
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}
