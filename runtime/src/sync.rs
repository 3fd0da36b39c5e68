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

/// `Condvar::wait` with the same poisoning policy as [`lock`] (only loom's
/// stand-ins block without a bound).
#[cfg(loom)]
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

/// Asymmetric fences for Dekker edges with one hot side and one rare side
/// (`sleep/README.md`, "Asymmetric fences"): the hot side (a `join`'s push
/// reading the sleep counters) only keeps the compiler from reordering, the
/// rare side (a worker going to sleep) runs `membarrier(2)`, which makes
/// every running thread of the process execute a full barrier. Together they
/// order like a `SeqCst` fence on both sides. Without `membarrier` (not
/// Linux, a seccomp filter, Miri, loom), both sides use `SeqCst` fences.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Barriers {
    asymmetric: bool,
}

impl Barriers {
    /// Registers the process for expedited private membarriers (once per
    /// process) and uses them if that worked.
    pub(crate) fn new() -> Self {
        Barriers {
            asymmetric: membarrier::registered(),
        }
    }

    /// The hot side: a `SeqCst` fence, or only a compiler fence when the rare
    /// side runs `membarrier`.
    #[inline(always)]
    pub(crate) fn light(self) {
        if !self.asymmetric {
            full_fence();
        }
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// The rare side: a `SeqCst` fence, plus `membarrier` when the hot side
    /// only has a compiler fence. Should the call fail (it cannot once the
    /// registration succeeded, short of the kernel running out of memory),
    /// the edge is as weak as with no fence on the hot side: a wake-up may be
    /// lost, which the bounded park turns into a delay (`sleep/README.md`).
    pub(crate) fn heavy(self) {
        fence(std::sync::atomic::Ordering::SeqCst);
        if self.asymmetric {
            membarrier::private_expedited();
        }
    }
}

/// A `SeqCst` fence out of line: as a branch inside `Barriers::light`, the
/// fence made the compiler lay out every `join` around two paths (14 more
/// instructions per `join` under cachegrind than with no branch).
#[cold]
#[inline(never)]
fn full_fence() {
    fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(all(target_os = "linux", not(loom), not(miri)))]
mod membarrier {
    use std::sync::OnceLock;

    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// Whether this process is registered for expedited private
    /// membarriers (registering on the first call).
    pub(super) fn registered() -> bool {
        static REGISTERED: OnceLock<bool> = OnceLock::new();
        *REGISTERED.get_or_init(|| {
            // SAFETY: membarrier takes integer arguments only and has no
            // memory-safety preconditions; failure is reported as -1.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    CMD_REGISTER_PRIVATE_EXPEDITED,
                    0 as libc::c_long,
                    0 as libc::c_long,
                )
            };
            r == 0
        })
    }

    /// A full memory barrier on every running thread of this process.
    pub(super) fn private_expedited() {
        // SAFETY: as in `registered`.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                CMD_PRIVATE_EXPEDITED,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        };
    }
}

#[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
mod membarrier {
    pub(super) fn registered() -> bool {
        false
    }

    pub(super) fn private_expedited() {}
}

/// A 32-bit atomic that a thread can sleep on until its value changes: the
/// Linux `futex` on the word itself (no lock, no allocation, and no system
/// call for the waking side unless the protocol above says that somebody
/// sleeps). Under loom, which has no futex, a mutex and condition variable
/// stand in with the same contract: `wait(v)` sleeps only while the word
/// still holds `v` (checked under the lock that `wake_all` takes after the
/// word changed, so a change between the check and the sleep is not missed),
/// and may return spuriously.
pub(crate) struct FutexWord {
    word: AtomicU32,
    #[cfg(loom)]
    lock: Mutex<()>,
    #[cfg(loom)]
    cond: Condvar,
}

impl std::ops::Deref for FutexWord {
    type Target = AtomicU32;
    fn deref(&self) -> &AtomicU32 {
        &self.word
    }
}

impl FutexWord {
    pub(crate) fn new(v: u32) -> Self {
        FutexWord {
            word: AtomicU32::new(v),
            #[cfg(loom)]
            lock: Mutex::new(()),
            #[cfg(loom)]
            cond: Condvar::new(),
        }
    }

    /// Sleeps while the word holds `expected`; may return spuriously (the
    /// caller re-reads the word and loops).
    #[cfg(not(loom))]
    pub(crate) fn wait(&self, expected: u32) {
        // SAFETY: the address is a live, aligned `AtomicU32` borrowed for
        // the whole call; FUTEX_WAIT only reads it (atomically, in the
        // kernel) and a null timeout means no timeout. Errors (EAGAIN: the
        // word changed; EINTR) are spurious returns, which callers handle.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                std::ptr::null::<libc::timespec>(),
            )
        };
    }

    /// Wakes every thread sleeping in [`wait`](Self::wait); call after the
    /// word changed.
    #[cfg(not(loom))]
    pub(crate) fn wake_all(&self) {
        // SAFETY: as in `wait`; FUTEX_WAKE does not touch the memory, only
        // the kernel's queue keyed by the address.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            )
        };
    }

    /// Loom stand-in for the futex wait (see the type).
    #[cfg(loom)]
    pub(crate) fn wait(&self, expected: u32) {
        let g = lock(&self.lock);
        if self.word.load(std::sync::atomic::Ordering::SeqCst) == expected {
            drop(wait(&self.cond, g));
        }
    }

    /// Loom stand-in for the futex wake (see the type).
    #[cfg(loom)]
    pub(crate) fn wake_all(&self) {
        let _g = lock(&self.lock);
        self.cond.notify_all();
    }
}
