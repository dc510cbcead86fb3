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

/// The CPU time of every live thread of this process so far, in
/// nanoseconds, from `/proc/self/task/*/schedstat` (whose first field is
/// the time the thread ran); zero where there is no such file.
#[allow(dead_code)] // Not every bench reports CPU.
pub fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Runs `run(prepare())` `rounds` times and returns the cores the process
/// kept busy meanwhile: CPU time of all its threads over wall time.
#[allow(dead_code)] // Not every bench reports CPU.
pub fn cores_used<P>(rounds: usize, mut prepare: impl FnMut() -> P, mut run: impl FnMut(P)) -> f64 {
    let (mut cpu, mut wall) = (0u64, Duration::ZERO);
    for _ in 0..rounds {
        let input = prepare();
        let (cpu_before, start) = (process_cpu_ns(), Instant::now());
        run(input);
        wall += start.elapsed();
        cpu += process_cpu_ns().saturating_sub(cpu_before);
    }
    cpu as f64 / 1e9 / wall.as_secs_f64()
}
