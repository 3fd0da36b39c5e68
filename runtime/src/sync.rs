//! Synchronisation primitives, swapped for loom's under `--cfg loom`.
//!
//! Only the modules whose protocols are model-checked (`sleep`, `completion`,
//! `shared_state`) import from here; everything else uses `std` directly,
//! because loom types only work inside `loom::model` and the rest of the
//! runtime is not run there.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning: no code holding these locks can panic
/// between invariant-breaking steps, so a poisoned lock still holds valid data.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// `Condvar::wait` with the same poisoning policy as [`lock`].
pub(crate) fn wait<'a, T>(c: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    match c.wait(g) {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// `wait` bounded by `limit`; returns the guard and whether the wait timed
/// out. Under loom (no time) it is a plain wait that never times out.
#[cfg(not(loom))]
pub(crate) fn wait_timeout<'a, T>(
    c: &Condvar,
    g: MutexGuard<'a, T>,
    limit: std::time::Duration,
) -> (MutexGuard<'a, T>, bool) {
    match c.wait_timeout(g, limit) {
        Ok((g, r)) => (g, r.timed_out()),
        Err(p) => {
            let (g, r) = p.into_inner();
            (g, r.timed_out())
        }
    }
}

/// Loom variant: see the `not(loom)` one.
#[cfg(loom)]
pub(crate) fn wait_timeout<'a, T>(
    c: &Condvar,
    g: MutexGuard<'a, T>,
    _limit: std::time::Duration,
) -> (MutexGuard<'a, T>, bool) {
    (wait(c, g), false)
}
