//! The scheduler: runs commands concurrently, one at a time per key.
//!
//! So far only the latches exist (see the open scheduler issue).

pub mod latches;
