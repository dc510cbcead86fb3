//! A short spin before a thread sleeps.
//!
//! Two waits in a command's path usually end within one engine write, a
//! few microseconds: a command waiting for a latch that another command
//! holds through its write, and a read waiting for a 1PC or async-commit
//! write in flight on its key. Parking the waiter and waking it costs two
//! context switches and a cross-core wake-up, which on a small virtual
//! machine cost more CPU than the wait itself (docs/BENCHMARKS.md, session
//! 33). So the waiter first watches a flag for [`SPIN_FOR`], and sleeps
//! only if the wait outlasts that. Where there is one CPU, the thread
//! being waited for cannot run while the waiter spins, and it sleeps at
//! once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a waiter watches before it sleeps: about two engine writes.
pub(crate) const SPIN_FOR: Duration = Duration::from_micros(12);

/// CPU pause hints between looks at the flag and the clock.
const PAUSES: u32 = 16;

/// Whether another CPU can run the thread being waited for.
fn several_cpus() -> bool {
    static SEVERAL: OnceLock<bool> = OnceLock::new();
    *SEVERAL.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Watches `flag` for up to [`SPIN_FOR`]; whether it was set (with
/// acquire ordering, so what was written before it was set is seen).
pub(crate) fn until_set(flag: &AtomicBool) -> bool {
    if flag.load(Ordering::Acquire) {
        return true;
    }
    if !several_cpus() {
        return false;
    }
    let start = Instant::now();
    loop {
        for _ in 0..PAUSES {
            std::hint::spin_loop();
        }
        if flag.load(Ordering::Acquire) {
            return true;
        }
        if start.elapsed() >= SPIN_FOR {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_set_flag_ends_the_spin_and_an_unset_one_gives_up() {
        assert!(until_set(&AtomicBool::new(true)));
        let started = Instant::now();
        assert!(!until_set(&AtomicBool::new(false)));
        if several_cpus() {
            assert!(started.elapsed() >= SPIN_FOR);
        }
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || flag.store(true, Ordering::Release))
        };
        setter.join().unwrap();
        assert!(until_set(&flag));
    }
}
