//! A short spin before a thread sleeps, where spinning has been paying.
//!
//! Two waits in a command's path usually end within one engine write, a
//! few microseconds: a command waiting for a latch that another command
//! holds through its write, and a read waiting for a 1PC or async-commit
//! write in flight on its key; so does a lock request waiting for a short
//! transaction's lock. Parking the waiter and waking it costs two context
//! switches and a cross-core wake-up, which on a small virtual machine
//! cost more CPU than the wait itself (docs/BENCHMARKS.md, session 33). So
//! the waiter first watches a flag for [`SPIN_FOR`], and sleeps only if
//! the wait outlasts that.
//!
//! The same waits last milliseconds where commits sync their log: there a
//! spin only burns CPU that the other threads could use. Each kind of
//! wait keeps a [`SpinSite`] that tallies whether its spins end in time.
//! Spinning pays even when most spins run out (a 4-key transfer at 4
//! threads on 2 cores ended 27% of its spins in time, and ran faster with
//! them: a waiter that spins takes its key as soon as it is free, and hot
//! keys' queues stay short), so one spin that ends in time buys several
//! that run out; a site whose spins almost never end in time spins only
//! once in [`PROBE_EVERY`] waits, to notice when waits get short again.
//! Where there is one CPU, the thread being waited for cannot run while
//! the waiter spins, and it sleeps at once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a waiter watches before it sleeps: about two engine writes.
pub(crate) const SPIN_FOR: Duration = Duration::from_micros(12);

/// CPU pause hints between looks at the flag and the clock.
const PAUSES: u32 = 16;

/// Credit a spin that ends in time earns; one that runs out costs one.
/// A site keeps spinning while at least one spin in `HIT_GAIN + 1` ends
/// in time.
const HIT_GAIN: i32 = 8;

/// Bounds of a site's credit, so that it turns within a few dozen waits
/// when its waits change.
const MAX_CREDIT: i32 = 64;

/// A site out of credit still spins once in this many waits.
const PROBE_EVERY: u32 = 16;

/// Latch waits: a command waiting for the commands ahead of it on its
/// keys (and, with synced commits, for their log sync).
pub(crate) static LATCH_WAITS: SpinSite = SpinSite::new();

/// Reads waiting for a 1PC or async-commit write in flight on their key.
pub(crate) static IN_FLIGHT_WAITS: SpinSite = SpinSite::new();

/// Lock requests and reads waiting in the lock-wait table for a release.
pub(crate) static LOCK_WAITS: SpinSite = SpinSite::new();

/// Whether another CPU can run the thread being waited for.
fn several_cpus() -> bool {
    static SEVERAL: OnceLock<bool> = OnceLock::new();
    *SEVERAL.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// One kind of wait, and whether spinning has been paying for it.
pub(crate) struct SpinSite {
    /// [`HIT_GAIN`] for each spin that ended in time, minus one for each
    /// that ran out, within +-[`MAX_CREDIT`]; the site spins at every wait
    /// while it is not negative.
    credit: AtomicI32,
    /// Waits that skipped the spin, for the probes.
    skipped: AtomicU32,
}

impl SpinSite {
    const fn new() -> Self {
        SpinSite {
            credit: AtomicI32::new(0),
            skipped: AtomicU32::new(0),
        }
    }

    /// Watches `flag` for up to [`SPIN_FOR`] if the site spins now;
    /// whether it was set (with acquire ordering, so what was written
    /// before it was set is seen).
    pub(crate) fn until_set(&self, flag: &AtomicBool) -> bool {
        if flag.load(Ordering::Acquire) {
            return true;
        }
        if !several_cpus() {
            return false;
        }
        if !self.spins_now() {
            return false;
        }
        let set = spin(flag);
        self.record(set);
        set
    }

    /// Whether this wait spins: always while the site has credit, once in
    /// [`PROBE_EVERY`] waits otherwise.
    fn spins_now(&self) -> bool {
        self.credit.load(Ordering::Relaxed) >= 0
            || self.skipped.fetch_add(1, Ordering::Relaxed) % PROBE_EVERY == 0
    }

    /// Tallies a spin that ended in time (`set`) or ran out.
    fn record(&self, set: bool) {
        let change = |credit: i32| {
            Some(if set {
                (credit + HIT_GAIN).min(MAX_CREDIT)
            } else {
                (credit - 1).max(-MAX_CREDIT)
            })
        };
        // Never fails: `change` always answers.
        let _ = self
            .credit
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, change);
    }
}

/// Watches `flag` for up to [`SPIN_FOR`]; whether it was set.
fn spin(flag: &AtomicBool) -> bool {
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
        let site = SpinSite::new();
        assert!(site.until_set(&AtomicBool::new(true)));
        let started = Instant::now();
        assert!(!site.until_set(&AtomicBool::new(false)));
        if several_cpus() {
            assert!(started.elapsed() >= SPIN_FOR);
        }
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || flag.store(true, Ordering::Release))
        };
        setter.join().unwrap();
        assert!(site.until_set(&flag));
    }

    /// A site whose spins almost never end in time spins once in
    /// `PROBE_EVERY` waits; one spin that ends in time buys `HIT_GAIN`
    /// that do not.
    #[test]
    fn a_site_whose_spins_run_out_spins_only_now_and_then() {
        let site = SpinSite::new();
        assert!(site.spins_now());
        site.record(false);
        // Out of credit: one wait in PROBE_EVERY spins.
        let spun: Vec<bool> = (0..2 * PROBE_EVERY).map(|_| site.spins_now()).collect();
        assert_eq!(spun.iter().filter(|s| **s).count(), 2);
        assert!(spun[0] && spun[PROBE_EVERY as usize]);
        // A probe that ends in time: every wait spins again, until
        // HIT_GAIN spins have run out.
        site.record(true);
        for _ in 0..HIT_GAIN {
            assert!(site.spins_now());
            site.record(false);
        }
        assert_eq!(site.credit.load(Ordering::Relaxed), -1);
        // The credit is bounded both ways.
        for _ in 0..4 * MAX_CREDIT {
            site.record(false);
        }
        assert_eq!(site.credit.load(Ordering::Relaxed), -MAX_CREDIT);
        for _ in 0..4 * MAX_CREDIT {
            site.record(true);
        }
        assert_eq!(site.credit.load(Ordering::Relaxed), MAX_CREDIT);
    }
}
