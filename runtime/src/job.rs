//! Jobs: type-erased units of work in the deques.
//!
//! As in rayon-core, a job is a pointer to data plus a function that knows its
//! type. `join` keeps its second closure in a [`StackJob`] on the caller's
//! stack (no allocation on the fast path); `scope` spawns and request roots
//! are [`HeapJob`]s. Unlike rayon, every job carries the *tag* of the
//! request it belongs to (see `shared_state`): a thief reads it to refuse the
//! tasks of a serialized request, and a worker compares it with its current
//! request to do tail-control's per-switch bookkeeping. The tag is the first
//! field of the job itself (both job types are `#[repr(C)]`), not a third
//! word of the [`JobRef`]: the reference stays two words, as rayon's, so a
//! `join`'s push and pop copy two words, and the tag costs one store into the
//! job on the pusher's stack (read through the pointer by `execute`, never
//! on `join`'s pop-back fast path).
//!
//! # Accounting before release
//!
//! A job that signals a waiter (a `join`'s `job_b`, a scope's spawn) does not
//! set its latch itself: it returns the latch as a [`Release`], and the worker
//! that executed it sets it only after its bookkeeping for the job is done
//! (`WorkerThread::execute`: the switch back, which adds the thief's time to
//! the request's `work_ns`). Setting the latch is what lets the request's
//! owner go on and, at the end, read `work_ns` and free the slot; a thief that
//! added its time after the latch (as it used to) could be too late for the
//! owner's read (the request's work undercounted) and, after the slot was
//! freed and reused, add stale time to the slot's next request (serializing
//! it early): the generation check and the add in `add_work` are two steps.
//! With the add ordered before the latch's `SeqCst` store, the owner's
//! `SeqCst` probe that sees the latch also sees the add, and no worker ever
//! adds to a request after it completed (a worker is on a request only inside
//! one of its jobs, which the request waits for, or inside its root, which
//! completes it). The loom model `accounting_before_release` checks this.

use crate::latch::{CountLatch, SpinLatch};
use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Something that can be executed from a [`JobRef`].
pub(crate) trait Job {
    /// Runs the job and returns the latch its executor must set once done
    /// with its bookkeeping (see "Accounting before release").
    ///
    /// # Safety
    /// `this` must point to a live `Self` that is executed at most once.
    unsafe fn execute(this: *const ()) -> Release;
}

/// The signal an executed job leaves to its executor: the latch to set
/// after the executor's bookkeeping (module doc, "Accounting before release").
#[must_use = "a job's latch must be set, or its waiter waits forever"]
pub(crate) enum Release {
    /// Nothing waits for this job (a request's root).
    Nothing,
    /// `join`'s latch for its `job_b`.
    Spin(*const SpinLatch),
    /// A scope's count of unfinished spawns.
    Count(*const CountLatch),
}

impl Release {
    /// Sets the latch, if any.
    ///
    /// # Safety
    /// The latch must still be valid. It is: its owner (the `join` or the
    /// `scope` frame that holds it) waits for exactly this signal before it
    /// returns or unwinds, so it outlives the call; after the flag store
    /// nothing reads it (see [`SpinLatch::set`]).
    #[inline]
    pub(crate) unsafe fn set(self) {
        match self {
            Release::Nothing => {}
            // SAFETY: forwarded contract.
            Release::Spin(l) => unsafe { SpinLatch::set(l) },
            // SAFETY: forwarded contract.
            Release::Count(l) => unsafe { CountLatch::set(l) },
        }
    }
}

/// A type-erased job; its request tag is the job's first field (see the
/// module comment).
#[derive(Debug)]
pub(crate) struct JobRef {
    /// Points to a `#[repr(C)]` job whose first field is its `tag: u64`.
    pointer: *const (),
    execute_fn: unsafe fn(*const ()) -> Release,
}

// SAFETY: a JobRef is only created for jobs whose closures are `Send`; the
// pointee is kept alive by its owner until the job signals completion.
unsafe impl Send for JobRef {}

impl JobRef {
    /// # Safety
    /// `data` must stay valid until the job has executed, and `T` must be
    /// `#[repr(C)]` with its request tag (`u64`) as first field, never
    /// written after this call.
    pub(crate) unsafe fn new<T: Job>(data: *const T) -> JobRef {
        JobRef {
            pointer: data as *const (),
            execute_fn: <T as Job>::execute,
        }
    }

    /// The request this job belongs to (`NO_REQUEST` if untracked).
    #[inline]
    pub(crate) fn tag(&self) -> u64 {
        // SAFETY: `pointer` points to a live job (it stays valid until the
        // job has executed, and `execute` consumes the `JobRef`, so this
        // borrow ends before that) whose first field is its tag, a `u64`
        // written before the `JobRef` was made and never after (the
        // contract of `new`, kept by the two job types below); the job was
        // published to this thread through the deque or queue it came
        // from, whose release/acquire pair orders that write before this
        // read. A panic cannot interrupt a load.
        unsafe { *(self.pointer as *const u64) }
    }

    /// Identity of the job (used by `join` to recognise its own job).
    #[inline]
    pub(crate) fn id(&self) -> *const () {
        self.pointer
    }

    /// Executes the job and returns its latch, which the caller must set
    /// (after its bookkeeping).
    ///
    /// # Safety
    /// Must be called at most once per job.
    #[inline]
    pub(crate) unsafe fn execute(self) -> Release {
        // SAFETY: forwarded contract.
        unsafe { (self.execute_fn)(self.pointer) }
    }
}

/// The outcome of a job run by another worker.
pub(crate) enum JobResult<T> {
    None,
    Ok(T),
    Panic(Box<dyn Any + Send>),
}

/// A job on the stack of the thread that waits for it (`join`'s `b`).
/// `#[repr(C)]`, tag first: see [`JobRef::tag`].
#[repr(C)]
pub(crate) struct StackJob<F, R> {
    tag: u64,
    pub(crate) latch: SpinLatch,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<JobResult<R>>,
}

impl<F, R> StackJob<F, R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    /// A job of request `tag`.
    pub(crate) fn new(func: F, latch: SpinLatch, tag: u64) -> Self {
        StackJob {
            tag,
            latch,
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(JobResult::None),
        }
    }

    /// # Safety
    /// The job must not move or be dropped until its latch is set or it was
    /// popped back and run inline.
    pub(crate) unsafe fn as_job_ref(&self) -> JobRef {
        // SAFETY: forwarded contract; `Self` is `repr(C)` with its tag first,
        // and nothing writes the tag after `new`.
        unsafe { JobRef::new(self) }
    }

    /// Runs the closure on the current thread (the job was popped back).
    /// Always inlined: as a call, `join`'s fast path copied the whole job
    /// (latch, closure, result slot) into the callee's argument first
    /// (callgrind: about 20 instructions per `join` of `fib`).
    #[inline(always)]
    pub(crate) fn run_inline(self) -> R {
        let f = self.func.into_inner().expect("job already taken");
        f()
    }

    /// The result after the latch was set.
    pub(crate) fn into_result(self) -> R {
        match self.result.into_inner() {
            JobResult::Ok(v) => v,
            JobResult::Panic(p) => resume_unwind(p),
            JobResult::None => unreachable!("stack job finished without a result"),
        }
    }
}

impl<F, R> Job for StackJob<F, R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    unsafe fn execute(this: *const ()) -> Release {
        // SAFETY: `this` was made from a `&StackJob<F, R>` by `as_job_ref`, and
        // its owner keeps it alive until the latch returned below is set.
        let this = unsafe { &*(this as *const Self) };
        // SAFETY: only the single executor touches `func`/`result` until the
        // latch is set; the owner reads them only after.
        let func = unsafe { (*this.func.get()).take() }.expect("job executed twice");
        let result = match catch_unwind(AssertUnwindSafe(func)) {
            Ok(v) => JobResult::Ok(v),
            Err(p) => JobResult::Panic(p),
        };
        // SAFETY: as above. The old value is `JobResult::None`: no user
        // destructor runs here.
        unsafe { *this.result.get() = result };
        // The executor sets it after its bookkeeping; until then the owner
        // keeps waiting, so the job (and the latch in it) stays alive.
        Release::Spin(&this.latch)
    }
}

/// A boxed job that frees itself when run (scope spawns, request roots).
/// The closure returns the job's [`Release`]. `#[repr(C)]`, tag first: see
/// [`JobRef::tag`].
#[repr(C)]
pub(crate) struct HeapJob<F> {
    tag: u64,
    func: F,
}

impl<F> HeapJob<F>
where
    F: FnOnce() -> Release + Send,
{
    /// A job of request `tag`.
    pub(crate) fn new(func: F, tag: u64) -> Box<Self> {
        Box::new(HeapJob { tag, func })
    }

    /// # Safety
    /// The closure may borrow data (`'scope`); the caller guarantees the job
    /// runs before that data goes away (scopes wait for their spawns).
    pub(crate) unsafe fn into_job_ref(self: Box<Self>) -> JobRef {
        // SAFETY: the box is leaked here and reclaimed in `execute`; `Self`
        // is `repr(C)` with its tag first, and nothing writes the tag after
        // `new`.
        unsafe { JobRef::new(Box::into_raw(self)) }
    }
}

impl<F> Job for HeapJob<F>
where
    F: FnOnce() -> Release + Send,
{
    unsafe fn execute(this: *const ()) -> Release {
        // SAFETY: made by `Box::into_raw` in `into_job_ref`, executed once.
        let this = unsafe { Box::from_raw(this as *mut Self) };
        (this.func)()
    }
}
