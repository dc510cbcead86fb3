//! Fail points: named places in the client and the scheduler where a test
//! can make the code fail, panic, or stop dead as if its process died.
//!
//! A fail point is a call `fail::eval(NAME)` at a place in the code where
//! something interesting can be left half done. Nothing happens there until
//! a test configures the name with [`cfg()`] (for every thread) or
//! [`cfg_thread`] (for the calling thread only). The points are:
//!
//! | name | where | what is left behind on [`Action::Die`] |
//! |---|---|---|
//! | [`CLIENT_PREWRITE_BATCH`] | client, after each prewrite batch answered (when armed, batches go one at a time, the primary's first) | some keys locked, others not |
//! | [`CLIENT_PREWRITE_ALL`] | client, after every prewrite answered | every key locked (async commit: committed; 1PC: committed) |
//! | [`CLIENT_COMMIT_PRIMARY`] | client, 2PC, after the primary committed | the primary committed, every secondary locked |
//! | [`CLIENT_COMMIT_SECONDARIES`] | client, after each region's secondary commit was sent | some regions committed, the others locked |
//! | [`SCHED_PROCESS`] | scheduler, on the worker, before the command runs | [`Action::Panic`]: the command panics; otherwise it fails |
//! | [`SCHED_BEFORE_WRITE`] | scheduler, after the command ran, before its engine write | the command fails, nothing written |
//!
//! **Actions.** [`Action::Return`] fails the operation with
//! [`Error::FailPoint`] as an ordinary error: the client cleans up as it
//! would after any error. [`Action::Die`] fails it the same way but the
//! client then does nothing more — no unlock, no rollback — so the data
//! holds exactly what a client killed at that point leaves. (Heart beats
//! stop too, as they would with the process.) [`Action::Panic`] panics.
//!
//! **Cost.** Fail points exist only with the `failpoints` cargo feature
//! (on with `test-util`, and for this crate's own tests); a default build
//! compiles every point to nothing, and [`Error::FailPoint`] is not in its
//! error enum. With the feature, a disabled point costs one relaxed
//! atomic load (no fail point configured anywhere in the process), so a
//! crash runner built in release mode can stop a writer at an exact
//! protocol step.
//!
//! **Tests.** The configuration is process-wide, and tests of one binary
//! run on parallel threads: hold a [`Scenario`] (from [`scenario`]) for the
//! whole test; it serializes the tests that use fail points and clears
//! every configuration when it drops.
//!
//! ```
//! use percolate_txn::fail::{self, Action};
//!
//! let _scenario = fail::scenario();
//! assert!(fail::eval(fail::CLIENT_PREWRITE_ALL).is_none());
//! fail::cfg(fail::CLIENT_PREWRITE_ALL, Action::Die);
//! assert_eq!(fail::eval(fail::CLIENT_PREWRITE_ALL), Some(Action::Die));
//! fail::remove(fail::CLIENT_PREWRITE_ALL);
//! assert!(fail::eval(fail::CLIENT_PREWRITE_ALL).is_none());
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::{Error, Result};

/// Client: after each prewrite batch has answered. While it is armed the
/// client sends its batches one at a time, in order (the primary's first),
/// so that "die after the first batch" leaves the others unsent.
pub const CLIENT_PREWRITE_BATCH: &str = "client::prewrite_batch";
/// Client: after every prewrite has answered, before the commit step.
pub const CLIENT_PREWRITE_ALL: &str = "client::prewrite_all";
/// Client, 2PC: after the primary's commit (the commit point), before the
/// secondaries' commits are sent.
pub const CLIENT_COMMIT_PRIMARY: &str = "client::commit_primary";
/// Client, 2PC and async commit: after each region's commit of secondaries
/// was sent (the commands run on; the regions after it get none).
pub const CLIENT_COMMIT_SECONDARIES: &str = "client::commit_secondaries";
/// Scheduler: on the worker, before a write command runs.
pub const SCHED_PROCESS: &str = "scheduler::process";
/// Scheduler: after a write command ran, before its engine write.
pub const SCHED_BEFORE_WRITE: &str = "scheduler::before_write";

/// What a configured fail point does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Fail with [`Error::FailPoint`]; the caller cleans up as after any
    /// error.
    Return,
    /// Fail with [`Error::FailPoint`] and do nothing more, as if the
    /// process died right there (the client skips its cleanup).
    Die,
    /// Panic.
    Panic,
}

/// One configured point.
#[derive(Clone, Copy, Debug)]
struct Entry {
    action: Action,
    /// Evaluations to let pass before firing.
    skip: usize,
    /// Firings left (`None`: no limit); the entry goes at zero.
    times: Option<usize>,
}

/// Entries configured anywhere (process-wide and every thread's): zero
/// means no point can fire, the fast path.
static ARMED: AtomicUsize = AtomicUsize::new(0);
static GLOBAL: Mutex<Option<HashMap<&'static str, Entry>>> = parking_lot::const_mutex(None);
static SCENARIO: Mutex<()> = parking_lot::const_mutex(());

/// A thread's own entries; they are counted in [`ARMED`] until the thread
/// ends.
#[derive(Default)]
struct Local(HashMap<&'static str, Entry>);

impl Drop for Local {
    fn drop(&mut self) {
        ARMED.fetch_sub(self.0.len(), Ordering::Relaxed);
    }
}

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::default();
}

/// Holds the fail points for one test: see the module documentation.
#[must_use = "the scenario ends when this guard drops"]
pub struct Scenario {
    _serial: MutexGuard<'static, ()>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario").finish_non_exhaustive()
    }
}

/// Starts a scenario: waits for any other to end, and clears the
/// configuration (also when the guard drops).
pub fn scenario() -> Scenario {
    let serial = SCENARIO.lock();
    clear();
    Scenario { _serial: serial }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        clear();
    }
}

/// Removes every process-wide configuration and the calling thread's.
pub fn clear() {
    if let Some(map) = GLOBAL.lock().take() {
        ARMED.fetch_sub(map.len(), Ordering::Relaxed);
    }
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        ARMED.fetch_sub(local.0.len(), Ordering::Relaxed);
        local.0.clear();
    });
}

/// Makes `name` do `action` on every evaluation, on every thread.
pub fn cfg(name: &'static str, action: Action) {
    cfg_with(name, action, 0, None);
}

/// Makes `name` let `skip` evaluations pass, then do `action` `times`
/// times (`None`: from then on), on every thread.
pub fn cfg_with(name: &'static str, action: Action, skip: usize, times: Option<usize>) {
    let entry = Entry {
        action,
        skip,
        times,
    };
    if GLOBAL
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(name, entry)
        .is_none()
    {
        ARMED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Like [`cfg_with`], for the calling thread only (it takes precedence
/// over a process-wide configuration of the same name). Useful for the
/// client's points, which run on the committing thread.
pub fn cfg_thread(name: &'static str, action: Action, skip: usize, times: Option<usize>) {
    let entry = Entry {
        action,
        skip,
        times,
    };
    LOCAL.with(|local| {
        if local.borrow_mut().0.insert(name, entry).is_none() {
            ARMED.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Removes the configuration of `name`, process-wide and on the calling
/// thread.
pub fn remove(name: &'static str) {
    if let Some(map) = GLOBAL.lock().as_mut() {
        if map.remove(name).is_some() {
            ARMED.fetch_sub(1, Ordering::Relaxed);
        }
    }
    LOCAL.with(|local| {
        if local.borrow_mut().0.remove(name).is_some() {
            ARMED.fetch_sub(1, Ordering::Relaxed);
        }
    });
}

/// Whether `name` is configured (for the calling thread), without
/// evaluating it.
pub fn is_armed(name: &'static str) -> bool {
    if ARMED.load(Ordering::Relaxed) == 0 {
        return false;
    }
    LOCAL.with(|local| local.borrow().0.contains_key(name))
        || GLOBAL.lock().as_ref().is_some_and(|m| m.contains_key(name))
}

/// Evaluates the point `name`: `None` (go on) unless it is configured and
/// fires. Never returns [`Action::Panic`]: it panics instead.
pub fn eval(name: &'static str) -> Option<Action> {
    if ARMED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let fired = LOCAL
        .try_with(|local| fire(&mut local.borrow_mut().0, name))
        .ok()
        .flatten()
        .or_else(|| fire(GLOBAL.lock().as_mut()?, name))?;
    if fired == Action::Panic {
        panic!("fail point {name} panics");
    }
    Some(fired)
}

/// [`eval`] as a `Result`: `Err(Error::FailPoint)` when the point fires.
pub fn check(name: &'static str) -> Result<()> {
    match eval(name) {
        None => Ok(()),
        Some(action) => Err(Error::FailPoint { name, action }),
    }
}

/// Whether `error` comes from a fail point that simulates a death: the
/// caller must not clean up.
pub fn is_death(error: &Error) -> bool {
    matches!(
        error,
        Error::FailPoint {
            action: Action::Die,
            ..
        }
    )
}

/// Evaluates `name` in `map`: the action if it fires.
fn fire(map: &mut HashMap<&'static str, Entry>, name: &'static str) -> Option<Action> {
    let entry = map.get_mut(name)?;
    if entry.skip > 0 {
        entry.skip -= 1;
        return None;
    }
    let action = entry.action;
    if let Some(times) = &mut entry.times {
        *times -= 1;
        if *times == 0 {
            map.remove(name);
            ARMED.fetch_sub(1, Ordering::Relaxed);
        }
    }
    Some(action)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Names no code evaluates: the crate's other tests run alongside.
    const SCHED_PROCESS: &str = "test::global";
    const CLIENT_PREWRITE_ALL: &str = "test::local";
    const SCHED_BEFORE_WRITE: &str = "test::panic";

    #[test]
    fn skip_times_thread_and_clear() {
        let _s = scenario();
        assert_eq!(eval(SCHED_PROCESS), None);
        cfg_with(SCHED_PROCESS, Action::Return, 1, Some(2));
        assert!(is_armed(SCHED_PROCESS));
        assert_eq!(eval(SCHED_PROCESS), None);
        assert_eq!(eval(SCHED_PROCESS), Some(Action::Return));
        assert!(matches!(
            check(SCHED_PROCESS),
            Err(Error::FailPoint {
                name: SCHED_PROCESS,
                action: Action::Return
            })
        ));
        assert_eq!(eval(SCHED_PROCESS), None, "fired twice, then gone");
        assert!(!is_armed(SCHED_PROCESS));

        cfg_thread(CLIENT_PREWRITE_ALL, Action::Die, 0, None);
        let other = std::thread::spawn(|| eval(CLIENT_PREWRITE_ALL));
        assert_eq!(other.join().unwrap(), None, "another thread's point");
        assert_eq!(eval(CLIENT_PREWRITE_ALL), Some(Action::Die));
        assert!(is_death(&check(CLIENT_PREWRITE_ALL).unwrap_err()));
        clear();
        assert_eq!(eval(CLIENT_PREWRITE_ALL), None);
    }

    #[test]
    fn panic_action_panics() {
        let _s = scenario();
        cfg(SCHED_BEFORE_WRITE, Action::Panic);
        let caught = std::panic::catch_unwind(|| eval(SCHED_BEFORE_WRITE));
        assert!(caught.is_err());
    }
}
