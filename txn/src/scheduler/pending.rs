//! The reply slot of a command in flight: a one-shot channel that can be
//! waited on (blocking) or polled as a future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::{Error, Result};

enum State<T> {
    Waiting(Option<Waker>),
    Done(Result<T>),
    Taken,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    /// Set with the answer, for a waiter that spins before it sleeps.
    answered: AtomicBool,
}

/// The answer to a command that was submitted and may not have run yet.
///
/// Wait for it with [`wait`](Self::wait), or `.await` it: `Pending` is a
/// [`Future`] that needs no particular runtime. A command that can no
/// longer answer (it panicked, or the storage shut down first) resolves to
/// [`Error::Aborted`].
#[must_use = "a command's answer says whether it succeeded"]
pub struct Pending<T> {
    slot: Slot<T>,
}

/// Where a [`Pending`]'s answer is: shared with its [`Completer`], or
/// already here (an answer known when it was made needs no allocation).
enum Slot<T> {
    /// `None` once a poll took it.
    Here(Option<Result<T>>),
    Shared(Arc<Shared<T>>),
}

// Nothing in a `Pending` is ever pinned in place: its answer is moved out.
impl<T> Unpin for Pending<T> {}

/// The sending half: answers a [`Pending`] once. Dropping it unanswered
/// answers [`Error::Aborted`].
pub(crate) struct Completer<T> {
    shared: Option<Arc<Shared<T>>>,
}

/// A new reply slot and its sender.
pub(crate) fn pending<T>() -> (Completer<T>, Pending<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::Waiting(None)),
        ready: Condvar::new(),
        answered: AtomicBool::new(false),
    });
    (
        Completer {
            shared: Some(shared.clone()),
        },
        Pending {
            slot: Slot::Shared(shared),
        },
    )
}

impl<T> Pending<T> {
    /// A reply slot already holding `result`.
    pub(crate) fn ready(result: Result<T>) -> Self {
        Pending {
            slot: Slot::Here(Some(result)),
        }
    }

    /// Blocks until the command answers.
    pub fn wait(self) -> Result<T> {
        let shared = match self.slot {
            Slot::Here(answer) => return answer.expect(TAKEN),
            Slot::Shared(shared) => shared,
        };
        // Most answers come within a latch holder's write: see `spin`.
        crate::spin::LATCH_WAITS.until_set(&shared.answered);
        let mut state = shared.state.lock();
        loop {
            if let Some(result) = take_done(&mut state) {
                return result;
            }
            shared.ready.wait(&mut state);
        }
    }

    /// Blocks until the command answers or `timeout` passes; gives the
    /// `Pending` back on timeout.
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<Result<T>, Self> {
        let deadline = crate::deadline_after(timeout);
        let shared = match &self.slot {
            Slot::Here(_) => return Ok(self.wait()),
            Slot::Shared(shared) => shared,
        };
        {
            let mut state = shared.state.lock();
            loop {
                if let Some(result) = take_done(&mut state) {
                    return Ok(result);
                }
                if shared.ready.wait_until(&mut state, deadline).timed_out() {
                    break;
                }
            }
        }
        Err(self)
    }

    /// Whether the answer has arrived (a following `wait` will not block).
    pub fn is_ready(&self) -> bool {
        match &self.slot {
            Slot::Here(answer) => answer.is_some(),
            Slot::Shared(shared) => matches!(*shared.state.lock(), State::Done(_)),
        }
    }
}

/// The misuse of polling a `Pending` again after it gave its answer.
const TAKEN: &str = "Pending polled after it completed";

fn take_done<T>(state: &mut State<T>) -> Option<Result<T>> {
    match std::mem::replace(state, State::Taken) {
        State::Done(result) => Some(result),
        other => {
            *state = other;
            None
        }
    }
}

impl<T> Future for Pending<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let shared = match &mut self.get_mut().slot {
            Slot::Here(answer) => return Poll::Ready(answer.take().expect(TAKEN)),
            Slot::Shared(shared) => shared,
        };
        let mut state = shared.state.lock();
        if let Some(result) = take_done(&mut state) {
            return Poll::Ready(result);
        }
        match &mut *state {
            State::Waiting(waker) => *waker = Some(cx.waker().clone()),
            State::Taken => panic!("{TAKEN}"),
            State::Done(_) => unreachable!("taken above"),
        }
        Poll::Pending
    }
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl<T> Completer<T> {
    /// Answers the command.
    pub(crate) fn complete(mut self, result: Result<T>) {
        if let Some(shared) = self.shared.take() {
            set(&shared, result);
        }
    }
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            set(
                &shared,
                Err(Error::Aborted {
                    reason: if std::thread::panicking() {
                        "the command panicked"
                    } else {
                        "the command was dropped before it answered (storage shut down)"
                    },
                }),
            );
        }
    }
}

fn set<T>(shared: &Shared<T>, result: Result<T>) {
    let waker = {
        let mut state = shared.state.lock();
        let waker = match &mut *state {
            State::Waiting(waker) => waker.take(),
            _ => None,
        };
        *state = State::Done(result);
        shared.answered.store(true, Ordering::Release);
        waker
    };
    shared.ready.notify_all();
    if let Some(waker) = waker {
        waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use std::task::Wake;

    use super::*;

    #[test]
    fn wait_returns_the_answer_sent_from_another_thread() {
        let (completer, pending) = pending::<u32>();
        let sender = std::thread::spawn(move || completer.complete(Ok(7)));
        assert_eq!(pending.wait().unwrap(), 7);
        sender.join().unwrap();
    }

    #[test]
    fn a_ready_pending_answers_every_way() {
        assert_eq!(Pending::ready(Ok(5)).wait().unwrap(), 5);
        let ready = Pending::<u32>::ready(Ok(6));
        assert!(ready.is_ready());
        assert_eq!(ready.wait_timeout(Duration::ZERO).ok().unwrap().unwrap(), 6);
        let mut ready = Pending::<u32>::ready(Err(Error::Aborted { reason: "r" }));
        let waker = Waker::from(Arc::new(Flag(AtomicBool::new(false))));
        match Pin::new(&mut ready).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(Err(Error::Aborted { reason: "r" })) => {}
            other => panic!("{other:?}"),
        }
        assert!(!ready.is_ready(), "its answer was taken");
    }

    #[test]
    fn a_dropped_completer_answers_aborted() {
        let (completer, pending) = pending::<u32>();
        drop(completer);
        assert!(matches!(pending.wait(), Err(Error::Aborted { .. })));
    }

    #[test]
    fn wait_timeout_gives_the_pending_back() {
        let (completer, pending) = pending::<u32>();
        let pending = pending
            .wait_timeout(Duration::from_millis(10))
            .expect_err("nothing was sent");
        completer.complete(Ok(1));
        assert!(pending.is_ready());
        assert_eq!(
            pending.wait_timeout(Duration::ZERO).ok().unwrap().unwrap(),
            1
        );
    }

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn polling_registers_a_waker_that_the_answer_wakes() {
        let (completer, mut pending) = pending::<u32>();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut pending).poll(&mut cx).is_pending());
        completer.complete(Ok(3));
        assert!(flag.0.load(Ordering::SeqCst));
        match Pin::new(&mut pending).poll(&mut cx) {
            Poll::Ready(Ok(3)) => {}
            other => panic!("{other:?}"),
        }
    }
}
