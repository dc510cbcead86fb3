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
    print_ratio_prepared(
        name,
        ops,
        rounds,
        (|| (), |()| ours()),
        (|| (), |()| baseline()),
    )
}

/// [`print_ratio`] for operations that need input prepared outside the
/// timed part: each side is `(prepare, run)`, and only `run(prepare())` is
/// timed.
#[allow(dead_code)] // Not every bench prepares its input.
pub fn print_ratio_prepared<P, Q>(
    name: &str,
    ops: u64,
    rounds: usize,
    mut ours: (impl FnMut() -> P, impl FnMut(P)),
    mut baseline: (impl FnMut() -> Q, impl FnMut(Q)),
) -> f64 {
    let mut ours_times = Vec::with_capacity(rounds);
    let mut base_times = Vec::with_capacity(rounds);
    // One warm-up round each.
    ours.1(ours.0());
    baseline.1(baseline.0());
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

fn time<P>((prepare, run): &mut (impl FnMut() -> P, impl FnMut(P))) -> Duration {
    let input = prepare();
    let start = Instant::now();
    run(input);
    black_box(start.elapsed())
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}
