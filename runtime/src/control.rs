//! Request control: abort, spawn panics and the gate of [`PoolHandle`]s.
//!
//! # Abort
//!
//! Each request has a small state word ([`Control`]) with three bits set once
//! each: `STARTED` (a worker took its root job and will run the closure),
//! `DONE` (the closure returned or unwound) and `ABORT`
//! ([`RequestHandle::abort`]). Every transition is one `fetch_or`, so their
//! order is total and both sides agree on the outcome:
//!
//! * `ABORT` before `STARTED`: the worker that takes the root job sees it,
//!   drops the closure without running it, and completes the handle with
//!   [`RequestError::Aborted`];
//! * `ABORT` between `STARTED` and `DONE`: the request is running. The abort
//!   also writes the request's tag into the pool's *abort marks* (one word per
//!   request slot of the shared table). The runtime's *checkpoints* — every
//!   chunk of [`parallel_for`](crate::parallel_for), every piece of a parallel
//!   iterator, the start of a [`join`](crate::join) and of a scope spawn —
//!   compare the mark of the slot of the request they belong to with its tag
//!   and, when they match, unwind with a private payload
//!   ([`resume_unwind`](std::panic::resume_unwind), no panic message). The
//!   unwind travels the same way as a panic (a stolen task hands it to its
//!   owner, a scope re-raises it) to the root, which reports `Aborted`. Work
//!   already running keeps running: only what starts after the abort is
//!   skipped. A request whose closure returns anyway (no checkpoint reached)
//!   still reports `Aborted`, and its value is dropped;
//! * `ABORT` after `DONE`: no effect (`abort` returns false).
//!
//! Tags carry the slot's generation, so a stale mark never matches a later
//! request in the same slot; the root clears its own mark when done (a CAS
//! from its tag, so it never clears another request's mark), and an abort
//! that raced with the end clears the mark it wrote if it then sees `DONE`.
//!
//! `join` is the hottest path of the runtime (a push, a pop and two calls),
//! so its checkpoint first reads a process-wide count of marks set
//! (`MARKED`: incremented before a mark is written, decremented by the CAS
//! that clears it), a read-mostly word that is zero unless some request is
//! being aborted right now; only then does it look up its own mark. That
//! keeps `join`'s fast path at one more load and branch. Measured with
//! callgrind on `fib(28)` five times on one worker (codegen-units = 1, so
//! that inlining is comparable): 396.4M instructions without a checkpoint,
//! 406.7M with this one (4 per `join`, +2.6%), about 11 per `join` with the
//! mark looked up on every call.
//! Requests beyond the table's capacity are untracked (no tag): they can be
//! aborted before they start and report `Aborted` at their end, but have no
//! checkpoints.
//!
//! # Spawn panics
//!
//! A spawned request (no handle) that panics hands its payload to the pool's
//! panic handler (`PoolBuilder::panic_handler`), if any; it is always counted
//! in `PoolStats::panicked`, and the panic hook already printed it. The
//! handler and, without one, the payload's destructor are user code run on
//! the worker after the request completed: they run through
//! `unwind::call_catching` / `drop_catching`, and a panic there is swallowed
//! and counted in `PoolStats::swallowed_panics` (see `unwind`).
//!
//! # The handle gate
//!
//! A [`PoolHandle`] may outlive its [`Pool`]. It holds the pool's registry,
//! and with it the shared table (and the mapping an external table lives in:
//! see `kernel::link`, "Lifetime of the mapping"), so touching them stays
//! sound after the pool is gone. A handle submits under a read lock of the
//! gate, and the pool's shutdown closes the gate under the write lock before
//! it begins shutdown (`shutdown`): once closed, handles refuse without
//! touching the pool's state, and a submission that got in before is counted
//! active before the shutdown flag is set, so the workers run it. Submissions
//! that do not go through the gate (`Pool::submit`, `spawn` on a worker) are
//! refused by the shutdown rule itself (`Shutdown::arrive`).
//!
//! [`PoolHandle`]: crate::PoolHandle
//! [`Pool`]: crate::Pool
//! [`RequestHandle::abort`]: crate::RequestHandle::abort
//! [`RequestError::Aborted`]: crate::RequestError::Aborted

use crate::registry::WorkerThread;
use crate::shared_state::{tag_slot, MAX_REQUESTS, NO_REQUEST};
use crate::unwind::{call_catching, drop_catching};
use std::any::Any;
use std::panic::{resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

/// Abort marks currently set, in all pools (see the module comment).
static MARKED: AtomicUsize = AtomicUsize::new(0);

/// What a pool calls with the payload of a spawned request's panic.
pub(crate) type PanicHandler = Box<dyn Fn(Box<dyn Any + Send>) + Send + Sync>;

/// Pool-wide state of this module, shared by the registry and every request
/// handle (a handle may outlive the registry's users; it never touches the
/// registry itself).
pub(crate) struct PoolExt {
    /// `marks[slot]`: tag of the aborted running request of that slot, or
    /// `NO_REQUEST`.
    marks: Box<[AtomicU64]>,
    /// Requests that completed as aborted.
    pub(crate) aborted: AtomicU64,
    /// Asserted unwind-safe so that handles stay `UnwindSafe`: the runtime
    /// only calls it under `catch_unwind` (`call_catching`) and never looks
    /// at it afterwards.
    panic_handler: AssertUnwindSafe<Option<PanicHandler>>,
    /// False once the pool is stopping: handles refuse to submit.
    gate: RwLock<bool>,
}

impl PoolExt {
    pub(crate) fn new(panic_handler: Option<PanicHandler>) -> Self {
        PoolExt {
            marks: (0..MAX_REQUESTS)
                .map(|_| AtomicU64::new(NO_REQUEST))
                .collect(),
            aborted: AtomicU64::new(0),
            panic_handler: AssertUnwindSafe(panic_handler),
            gate: RwLock::new(true),
        }
    }

    /// Whether request `tag` was aborted while running (a relaxed load: a
    /// checkpoint only needs to see the mark eventually).
    #[inline]
    fn marked(&self, tag: u64) -> bool {
        tag != NO_REQUEST && self.marks[tag_slot(tag)].load(Ordering::Relaxed) == tag
    }

    /// Sets `tag`'s mark (once per request: the first abort).
    fn set_mark(&self, tag: u64) {
        MARKED.fetch_add(1, Ordering::SeqCst);
        self.marks[tag_slot(tag)].store(tag, Ordering::SeqCst);
    }

    /// Clears `tag`'s mark if it is set; only the clearing CAS counts down.
    fn clear_mark(&self, tag: u64) {
        if tag != NO_REQUEST
            && self.marks[tag_slot(tag)]
                .compare_exchange(tag, NO_REQUEST, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            MARKED.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Hands a spawned request's panic to the handler (the hook printed it),
    /// or drops the payload without one. A panic of the handler or of the
    /// payload's destructor is contained (see `unwind::call_catching`);
    /// returns whether one was swallowed, for the caller to count.
    #[must_use = "a swallowed panic should be counted"]
    pub(crate) fn report_spawn_panic(&self, payload: Box<dyn Any + Send>) -> bool {
        match &*self.panic_handler {
            Some(h) => call_catching(|| h(payload)),
            None => drop_catching(payload),
        }
    }

    /// Read access for a handle's submit: `None` once the pool is stopping.
    pub(crate) fn enter(&self) -> Option<RwLockReadGuard<'_, bool>> {
        let g = self.gate.read().unwrap_or_else(|p| p.into_inner());
        (*g).then_some(g)
    }

    /// Closes the gate; returns once no handle is inside.
    pub(crate) fn close_gate(&self) {
        *self.gate.write().unwrap_or_else(|p| p.into_inner()) = false;
    }
}

const STARTED: u8 = 1;
const DONE: u8 = 2;
const ABORT: u8 = 4;

/// A request's state word (see the module comment).
pub(crate) struct Control {
    state: AtomicU8,
}

impl Control {
    pub(crate) fn new() -> Self {
        Control {
            state: AtomicU8::new(0),
        }
    }

    /// The worker is about to run the closure; false if it was aborted first.
    pub(crate) fn start(&self) -> bool {
        self.state.fetch_or(STARTED, Ordering::SeqCst) & ABORT == 0
    }

    /// The closure returned or unwound; true if it was aborted meanwhile.
    /// Clears the request's mark.
    pub(crate) fn finish(&self, ext: &PoolExt, tag: u64) -> bool {
        let aborted = self.state.fetch_or(DONE, Ordering::SeqCst) & ABORT != 0;
        if aborted {
            ext.clear_mark(tag);
        }
        aborted
    }

    /// Aborts; true if the request had not finished (this or an earlier call
    /// took effect).
    pub(crate) fn abort(&self, ext: &PoolExt, tag: u64) -> bool {
        let prev = self.state.fetch_or(ABORT, Ordering::SeqCst);
        if prev & DONE != 0 {
            return false;
        }
        if prev & (STARTED | ABORT) == STARTED && tag != NO_REQUEST {
            ext.set_mark(tag);
            // Raced with the end? `finish` sets DONE before it clears, so
            // either it saw our mark or we see DONE here (SeqCst order).
            if self.state.load(Ordering::SeqCst) & DONE != 0 {
                ext.clear_mark(tag);
            }
        }
        true
    }
}

/// The unwind payload of a checkpoint of an aborted request.
pub(crate) struct AbortUnwind;

/// A cheap probe for the current request's abort mark, made once per loop:
/// every piece of the loop belongs to the same request (stolen pieces too),
/// so the mark to watch is the same on every worker.
#[derive(Clone, Copy)]
pub(crate) struct AbortProbe<'a> {
    mark: Option<(&'a AtomicU64, u64)>,
}

impl<'a> AbortProbe<'a> {
    /// The probe of the request of the calling worker (a no-op elsewhere).
    #[inline]
    pub(crate) fn current() -> AbortProbe<'a> {
        let wt = WorkerThread::current();
        if wt.is_null() {
            return AbortProbe { mark: None };
        }
        // SAFETY: non-null pointers from `current` are live workers of this
        // thread, and the registry they hold (and its `ext`) outlives every
        // job of the pool, so outlives the loop that made this probe
        // (the loop returns, or unwinds, before its request ends).
        Self::of(unsafe { &*wt })
    }

    /// The probe of the request worker `wt` is on.
    #[inline]
    pub(crate) fn of(wt: &'a WorkerThread) -> AbortProbe<'a> {
        let tag = wt.current_tag();
        AbortProbe {
            mark: (tag != NO_REQUEST).then(|| (&wt.registry().ext.marks[tag_slot(tag)], tag)),
        }
    }

    /// Unwinds if the request was aborted.
    #[inline]
    pub(crate) fn check(self) {
        if let Some((mark, tag)) = self.mark {
            if mark.load(Ordering::Relaxed) == tag {
                resume_unwind(Box::new(AbortUnwind));
            }
        }
    }
}

/// Checkpoint at the start of a task: unwinds if the request the calling
/// worker is on was aborted while running.
#[inline]
pub(crate) fn checkpoint() {
    AbortProbe::current().check()
}

/// `join`'s checkpoint: one load unless some request is being aborted.
#[inline(always)]
pub(crate) fn join_checkpoint(wt: &WorkerThread) {
    if MARKED.load(Ordering::Relaxed) != 0 {
        join_checkpoint_slow(wt)
    }
}

#[cold]
#[inline(never)]
fn join_checkpoint_slow(wt: &WorkerThread) {
    AbortProbe::of(wt).check()
}

/// Whether the request running on the calling thread has been aborted (by
/// [`RequestHandle::abort`](crate::RequestHandle::abort)) while it runs.
/// False outside a request and for untracked requests.
///
/// Long sequential loops inside a request can poll it to stop early; the
/// runtime's own checkpoints (`join`, `parallel_for` chunks, scope spawns,
/// parallel iterators) skip the rest of an aborted request by themselves.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use tailctl_rt::{is_current_request_aborted, Pool, RequestError};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let started = Arc::new(AtomicBool::new(false));
/// let s2 = started.clone();
/// let h = pool.submit(move || {
///     s2.store(true, Ordering::SeqCst);
///     while !is_current_request_aborted() {
///         std::thread::yield_now();
///     }
/// });
/// while !started.load(Ordering::SeqCst) {
///     std::thread::yield_now();
/// }
/// assert!(h.abort());
/// assert_eq!(h.wait(), Err(RequestError::Aborted));
/// assert!(!is_current_request_aborted()); // not in a request
/// ```
pub fn is_current_request_aborted() -> bool {
    let wt = WorkerThread::current();
    if wt.is_null() {
        return false;
    }
    // SAFETY: non-null: a live worker of this thread.
    let wt = unsafe { &*wt };
    wt.registry().ext.marked(wt.current_tag())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// `MARKED` is process-wide: these tests run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn abort_before_start_wins_over_start() {
        let _s = serial();
        let ext = PoolExt::new(None);
        let c = Control::new();
        assert!(c.abort(&ext, NO_REQUEST));
        assert!(!c.start());
        assert!(c.finish(&ext, NO_REQUEST));
    }

    #[test]
    fn abort_while_running_marks_and_end_clears() {
        let _s = serial();
        let ext = PoolExt::new(None);
        let tag = (7u64 << 32) | 3;
        let c = Control::new();
        assert!(c.start());
        assert!(!ext.marked(tag));
        assert!(c.abort(&ext, tag));
        assert!(ext.marked(tag));
        assert_eq!(MARKED.load(Ordering::SeqCst), 1);
        assert!(c.abort(&ext, tag), "a second abort: still running");
        assert_eq!(MARKED.load(Ordering::SeqCst), 1, "counted once");
        assert!(!ext.marked((8u64 << 32) | 3), "another generation");
        assert!(c.finish(&ext, tag));
        assert!(!ext.marked(tag));
        assert_eq!(MARKED.load(Ordering::SeqCst), 0);
        assert!(!c.abort(&ext, tag), "after the end");
        assert!(!ext.marked(tag));
    }

    #[test]
    fn abort_after_end_has_no_effect() {
        let _s = serial();
        let ext = PoolExt::new(None);
        let c = Control::new();
        assert!(c.start());
        assert!(!c.finish(&ext, 5));
        assert!(!c.abort(&ext, 5));
        assert!(!ext.marked(5));
        assert_eq!(MARKED.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_abort_racing_with_the_end_leaves_no_mark() {
        let _s = serial();
        for _ in 0..if cfg!(miri) { 10 } else { 2000 } {
            let ext = PoolExt::new(None);
            let c = Control::new();
            let tag = (1u64 << 32) | 9;
            assert!(c.start());
            std::thread::scope(|s| {
                s.spawn(|| c.abort(&ext, tag));
                s.spawn(|| c.finish(&ext, tag));
            });
            assert!(!ext.marked(tag));
            assert_eq!(MARKED.load(Ordering::SeqCst), 0);
        }
    }

    #[test]
    fn gate_refuses_once_closed() {
        let ext = PoolExt::new(None);
        assert!(ext.enter().is_some());
        ext.close_gate();
        assert!(ext.enter().is_none());
    }
}
