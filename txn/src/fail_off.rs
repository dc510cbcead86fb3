//! The fail points of a build without the `failpoints` feature: the same
//! calls, doing nothing, inlined away. See `fail.rs` for the points.

use crate::{Error, Result};

pub(crate) const CLIENT_PREWRITE_BATCH: &str = "client::prewrite_batch";
pub(crate) const CLIENT_PREWRITE_ALL: &str = "client::prewrite_all";
pub(crate) const CLIENT_COMMIT_PRIMARY: &str = "client::commit_primary";
pub(crate) const CLIENT_COMMIT_SECONDARIES: &str = "client::commit_secondaries";
pub(crate) const SCHED_PROCESS: &str = "scheduler::process";
pub(crate) const SCHED_BEFORE_WRITE: &str = "scheduler::before_write";

/// Never armed.
#[inline(always)]
pub(crate) fn is_armed(_name: &'static str) -> bool {
    false
}

/// Never fires.
#[inline(always)]
pub(crate) fn check(_name: &'static str) -> Result<()> {
    Ok(())
}

/// No error is a fail point's.
#[inline(always)]
pub(crate) fn is_death(_error: &Error) -> bool {
    false
}
