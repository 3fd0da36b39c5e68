//! Latches: one-shot signals that a worker waits on while it keeps working.
//!
//! A worker never blocks on a latch directly: it calls
//! `WorkerThread::wait_until`, which runs other tasks while the latch is unset
//! and, when there is nothing to do, sleeps through the `sleep` module. The
//! setter therefore has to wake the owner if it sleeps: it copies everything it
//! needs out of the latch, stores `SET` (`SeqCst`; the owner may free the latch
//! right after, e.g. by returning from `join`), then does a targeted wake-up
//! (see `sleep/README.md`, "Targeted").

use crate::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A latch owned by one worker (the one waiting in `join` or `scope`).
pub(crate) struct SpinLatch {
    set: AtomicBool,
    owner: usize,
    registry: *const Registry,
}

// SAFETY: the registry pointer is only dereferenced by workers of that
// registry, which keep it alive; the rest are atomics and plain data.
unsafe impl Send for SpinLatch {}
// SAFETY: as above.
unsafe impl Sync for SpinLatch {}

impl SpinLatch {
    pub(crate) fn new(owner: usize, registry: &Registry) -> Self {
        SpinLatch {
            set: AtomicBool::new(false),
            owner,
            registry,
        }
    }

    /// Whether the latch is set (`SeqCst`: pairs with the sleeper's hint).
    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// Sets the latch and wakes its owner if it sleeps.
    ///
    /// # Safety
    /// `this` must be valid on entry; it may be freed as soon as the flag is
    /// stored, so nothing reads it afterwards.
    pub(crate) unsafe fn set(this: *const Self) {
        // SAFETY: valid on entry (contract); copy out before releasing.
        let (owner, registry) = unsafe { ((*this).owner, (*this).registry) };
        // SAFETY: as above.
        unsafe { (*this).set.store(true, Ordering::SeqCst) };
        // SAFETY: the registry outlives every job (workers hold it).
        unsafe { (*registry).sleep.notify_worker(owner) };
    }
}

/// A latch set when a counter drops to zero (a scope and its spawns).
pub(crate) struct CountLatch {
    count: AtomicUsize,
    core: SpinLatch,
}

impl CountLatch {
    /// Starts at one (the scope body itself).
    pub(crate) fn new(owner: usize, registry: &Registry) -> Self {
        CountLatch {
            count: AtomicUsize::new(1),
            core: SpinLatch::new(owner, registry),
        }
    }

    pub(crate) fn increment(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.core.probe()
    }

    /// Decrements; the last one sets the latch.
    ///
    /// # Safety
    /// `this` must be valid on entry; see [`SpinLatch::set`].
    pub(crate) unsafe fn set(this: *const Self) {
        // SAFETY: valid on entry; the scope cannot end before the count is 0.
        if unsafe { (*this).count.fetch_sub(1, Ordering::AcqRel) } == 1 {
            // SAFETY: still valid: the owner waits for this very latch.
            unsafe { SpinLatch::set(&(*this).core) };
        }
    }
}
