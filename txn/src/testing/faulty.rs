//! An engine wrapper that fails or holds writes on demand, for tests of
//! what the layers above do when the engine misbehaves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};
use percolate_engine::{Engine, WriteBatch, WriteOptions};

/// Wraps an engine: counts its writes, can fail the next `n` of them with
/// `engine::Error::Injected`, and can hold every write until released.
/// Clones share the same switches.
#[derive(Clone, Debug)]
pub struct FaultyEngine<E> {
    inner: E,
    state: Arc<FaultState>,
}

#[derive(Debug, Default)]
struct FaultState {
    /// Writes to let through before `fail_next` counts.
    pass_first: AtomicUsize,
    fail_next: AtomicUsize,
    writes: AtomicUsize,
    synced: AtomicUsize,
    modifies: AtomicUsize,
    gate: Mutex<()>,
    /// Writes blocked at the gate.
    waiting: AtomicUsize,
}

impl<E: Engine> FaultyEngine<E> {
    /// Wraps `inner`, failing nothing.
    pub fn new(inner: E) -> Self {
        FaultyEngine {
            inner,
            state: Arc::default(),
        }
    }

    /// The wrapped engine.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// Makes the next `n` writes fail (writing nothing).
    pub fn fail_next_writes(&self, n: usize) {
        self.fail_writes_after(0, n);
    }

    /// Lets the next `ok` writes through, then makes `n` fail (writing
    /// nothing): a failure part way through a run of writes.
    pub fn fail_writes_after(&self, ok: usize, n: usize) {
        self.state.pass_first.store(ok, Ordering::SeqCst);
        self.state.fail_next.store(n, Ordering::SeqCst);
    }

    /// Writes attempted so far (failed ones included).
    pub fn writes(&self) -> usize {
        self.state.writes.load(Ordering::SeqCst)
    }

    /// Writes that succeeded with [`Durability::Sync`](percolate_engine::Durability::Sync)
    /// so far.
    pub fn synced_writes(&self) -> usize {
        self.state.synced.load(Ordering::SeqCst)
    }

    /// Modifications in the writes that succeeded so far.
    pub fn modifies_written(&self) -> usize {
        self.state.modifies.load(Ordering::SeqCst)
    }

    /// Writes waiting at the gate of [`hold_writes`](Self::hold_writes)
    /// now.
    pub fn writes_waiting(&self) -> usize {
        self.state.waiting.load(Ordering::SeqCst)
    }

    /// Holds every write (they block before reaching the engine) until the
    /// returned guard drops.
    pub fn hold_writes(&self) -> MutexGuard<'_, ()> {
        self.state.gate.lock()
    }
}

impl<E: Engine> Engine for FaultyEngine<E> {
    type Snap = E::Snap;

    fn snapshot(&self) -> Self::Snap {
        self.inner.snapshot()
    }

    fn latest(&self) -> Self::Snap {
        self.inner.latest()
    }

    percolate_engine::forward_engine_bookkeeping!(inner);

    fn write(&self, batch: &WriteBatch, options: WriteOptions) -> percolate_engine::Result<()> {
        self.state.waiting.fetch_add(1, Ordering::SeqCst);
        drop(self.state.gate.lock());
        self.state.waiting.fetch_sub(1, Ordering::SeqCst);
        self.state.writes.fetch_add(1, Ordering::SeqCst);
        let countdown = |n: &AtomicUsize| {
            n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        let failing = !countdown(&self.state.pass_first) && countdown(&self.state.fail_next);
        if failing {
            return Err(percolate_engine::Error::Injected {
                reason: "FaultyEngine fails this write".into(),
            });
        }
        self.inner.write(batch, options)?;
        self.state.modifies.fetch_add(batch.len(), Ordering::SeqCst);
        if options.durability == percolate_engine::Durability::Sync {
            self.state.synced.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}
