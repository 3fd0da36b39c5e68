//! Panics and the scheduler's own frames.
//!
//! User code runs on workers in three kinds of places, and a panic must never
//! unwind from any of them into the scheduler:
//!
//! * the closures of a request, `join`, `scope` and `scope_fifo`: they run
//!   under `catch_unwind`, and the panic reaches the request's handle (or the
//!   `join`/`scope` caller) as designed. The unwind of an abort checkpoint
//!   (`control`) is one of these: it starts inside such a closure and ends at
//!   its `catch_unwind`, which reports the request `Aborted`;
//! * destructors and callbacks the worker runs *on the user's behalf* once a
//!   request (or a task) is over: the request's result when its handle was
//!   dropped (the worker then holds the last reference), the value of a
//!   request aborted while it ran, the closure of a request cancelled or
//!   aborted before it ran, a panic payload nobody re-raises (a scope's
//!   second one, a spawned request's without a panic handler), the panic
//!   handler itself, the `scope_fifo` bodies an abort skipped, the waker of a
//!   task polling the handle. These run through [`drop_catching`] /
//!   [`call_catching`]: a panic there is swallowed and counted
//!   (`PoolStats::swallowed_panics`, see [`count_swallowed`]), never fatal;
//! * nowhere else.
//!
//! Anything that still unwinds into a worker's scheduling frames is a bug in
//! the runtime, and continuing would be unsound: a worker unwinding out of a
//! `join` frees the `StackJob` a thief may still be writing its result and
//! latch into, one unwinding out of a `scope` frees the latch its spawns
//! count down, and a worker unwinding out of its main loop dies with tasks in
//! its deque that other requests wait for. So those frames hold an
//! [`AbortIfPanic`] guard (as rayon-core does): the process aborts with a
//! message instead.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Aborts the process if dropped, i.e. if a panic unwinds through the frame
/// that holds it. Leave the frame normally with `std::mem::forget(guard)`.
pub(crate) struct AbortIfPanic;

impl Drop for AbortIfPanic {
    fn drop(&mut self) {
        eprintln!("tailctl-rt: a panic unwound into a worker's scheduling frames; aborting");
        std::process::abort();
    }
}

/// Drops `value`, catching a panic of its destructor. Returns whether one
/// was caught (and swallowed).
pub(crate) fn drop_catching<T>(value: T) -> bool {
    call_catching(move || drop(value))
}

/// Calls `f`, catching a panic. Returns whether one was caught (and
/// swallowed). The panic's payload is itself dropped under `catch_unwind`;
/// should *its* destructor panic as well, that second payload is leaked
/// rather than dropped (a bounded, explicit leak instead of an endless chain).
pub(crate) fn call_catching(f: impl FnOnce()) -> bool {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => false,
        Err(payload) => {
            if let Err(second) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
                std::mem::forget(second);
            }
            true
        }
    }
}

/// Counts a swallowed panic (`swallowed` from [`drop_catching`] or
/// [`call_catching`]) in the pool of the calling worker; off a worker there
/// is no pool to count it in.
pub(crate) fn count_swallowed(swallowed: bool) {
    let wt = crate::registry::WorkerThread::current();
    if swallowed && !wt.is_null() {
        // SAFETY: non-null: a live worker of this thread.
        unsafe { (*wt).count_swallowed_panics(1) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("bomb")
        }
    }

    #[test]
    fn a_panicking_drop_is_caught() {
        assert!(drop_catching(Bomb));
        assert!(!drop_catching(1u8));
    }

    #[test]
    fn a_panicking_payload_drop_is_caught_too() {
        assert!(call_catching(|| std::panic::panic_any(Bomb)));
        assert!(!call_catching(|| ()));
    }
}
