//! `scope` and `Scope::spawn`: a dynamic number of tasks borrowing the
//! caller's data.
//!
//! A scope counts its body plus each spawned task in a [`CountLatch`]; every
//! spawn is a [`HeapJob`] pushed on the deque of the worker that spawns it,
//! tagged with that worker's current request (so serialization applies to
//! spawns as to `join`). The scope's owner waits for the count to reach zero,
//! running other tasks meanwhile, so borrowed data outlives every spawn. The
//! first panic of a spawn is kept and re-raised by `scope` after all tasks
//! finished. Outside a pool, `spawn` runs the task at once on the calling
//! thread. A spawn of an aborted request unwinds before its body (an abort
//! checkpoint, see `control`).
//!
//! A spawn does not count itself done: its job returns the latch as a
//! [`Release`], which the worker that ran it sets after charging its time to
//! the request (`job`, "Accounting before release"). Payloads of panics that
//! `scope` does not re-raise are user values dropped on a worker: they are
//! dropped with `unwind::drop_catching`, swallowed and counted.

use crate::control::checkpoint;
use crate::job::{HeapJob, Release};
use crate::latch::CountLatch;
use crate::registry::WorkerThread;
use crate::unwind::{count_swallowed, drop_catching};
use std::any::Any;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// A scope in which tasks borrowing `'scope` data can be spawned.
///
/// ```
/// use tailctl_rt::{scope, Pool};
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let v = pool
///     .submit(|| {
///         let mut parts = vec![0u64; 4];
///         scope(|s| {
///             for (i, p) in parts.iter_mut().enumerate() {
///                 s.spawn(move |_| *p = i as u64 * 10);
///             }
///         });
///         parts
///     })
///     .wait()
///     .unwrap();
/// assert_eq!(v, vec![0, 10, 20, 30]);
/// ```
pub struct Scope<'scope> {
    latch: Option<CountLatch>,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Invariant in `'scope`, like rayon's scope.
    marker: PhantomData<Invariant<'scope>>,
}

/// Makes `Scope` invariant in `'scope` (as rayon's is), so a spawn cannot
/// borrow data shorter-lived than the scope.
type Invariant<'scope> = Box<dyn FnOnce(&Scope<'scope>) + Send + Sync + 'scope>;

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").finish_non_exhaustive()
    }
}

/// Raw pointer to the scope, sent to the worker that runs a spawn.
struct ScopePtr<'scope>(*const Scope<'scope>);
// SAFETY: `Scope` is Sync and outlives every spawn (the owner waits).
unsafe impl Send for ScopePtr<'_> {}

/// Creates a scope, runs `op` in it, and waits for every task spawned in it.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let n = AtomicUsize::new(0);
/// // Outside a pool the spawns run inline.
/// tailctl_rt::scope(|s| {
///     s.spawn(|_| { n.fetch_add(1, Ordering::Relaxed); });
///     s.spawn(|_| { n.fetch_add(1, Ordering::Relaxed); });
/// });
/// assert_eq!(n.load(Ordering::Relaxed), 2);
/// ```
pub fn scope<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    let scope = Scope::new();
    scope.complete(|| op(&scope))
}

impl<'scope> Scope<'scope> {
    /// A scope owned by the calling worker (spawns run inline outside a pool).
    pub(crate) fn new() -> Self {
        let wt = WorkerThread::current();
        // SAFETY: non-null means this thread is a worker alive for this call.
        let wt = (!wt.is_null()).then(|| unsafe { &*wt });
        Scope {
            latch: wt.map(|wt| CountLatch::new(wt.index(), wt.registry())),
            panic: Mutex::new(None),
            marker: PhantomData,
        }
    }

    /// Runs the scope's body `op`, then waits for every spawn (running other
    /// tasks meanwhile), then re-raises the body's panic or else the first
    /// spawn's. Must be called once, by the thread that made the scope.
    pub(crate) fn complete<R>(&self, op: impl FnOnce() -> R) -> R {
        let result = catch_unwind(AssertUnwindSafe(op));
        if let Some(latch) = self.latch.as_ref() {
            let wt = WorkerThread::current();
            assert!(!wt.is_null(), "a scope completed off its worker");
            // SAFETY: non-null: a live worker of this thread (the one that
            // made the scope, per the contract), alive for this call.
            let wt = unsafe { &*wt };
            // SAFETY: the latch lives in `self`, borrowed until we return;
            // we wait for it below.
            unsafe { CountLatch::set(latch) };
            wt.wait_until(&|| latch.probe(), false);
        }
        let spawned_panic = self.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        match result {
            Err(p) => {
                // The body's panic wins; the spawn's payload is dropped here,
                // not while `p` unwinds (a panicking destructor then would
                // abort).
                if let Some(sp) = spawned_panic {
                    count_swallowed(drop_catching(sp));
                }
                resume_unwind(p)
            }
            Ok(_) if spawned_panic.is_some() => resume_unwind(spawned_panic.unwrap()),
            Ok(r) => r,
        }
    }

    /// Spawns `body` into the scope; it may run on any worker, in parallel
    /// with the rest of the scope, and finishes before [`scope`] returns.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use tailctl_rt::{scope, Pool};
    /// let pool = Pool::builder().workers(2).build().unwrap();
    /// let n = pool
    ///     .submit(|| {
    ///         let n = AtomicUsize::new(0);
    ///         scope(|s| {
    ///             for _ in 0..100 {
    ///                 s.spawn(|s| {
    ///                     s.spawn(|_| { n.fetch_add(1, Ordering::Relaxed); });
    ///                 });
    ///             }
    ///         });
    ///         n.into_inner()
    ///     })
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(n, 100);
    /// ```
    pub fn spawn<BODY>(&self, body: BODY)
    where
        BODY: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let wt = WorkerThread::current();
        let Some(latch) = self.latch.as_ref().filter(|_| !wt.is_null()) else {
            // Not on a worker (or a scope made outside the pool): run now.
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| body(self))) {
                self.record_panic(p);
            }
            return;
        };
        // SAFETY: non-null: a live worker of this thread.
        let wt = unsafe { &*wt };
        latch.increment();
        let ptr = ScopePtr(self);
        let job = HeapJob::new(
            move || {
                let ptr = ptr;
                // SAFETY: the scope waits for this job's Release before it is
                // dropped, also when its body panicked (caught, then waited for)
                // and when this body panics or unwinds at its abort checkpoint
                // (caught below, then released).
                let scope = unsafe { &*ptr.0 };
                // An aborted request skips the body (see `control`); the unwind
                // is recorded like a panic and re-raised by `scope`.
                let run = || {
                    checkpoint();
                    body(scope)
                };
                if let Err(p) = catch_unwind(AssertUnwindSafe(run)) {
                    scope.record_panic(p);
                }
                // The executor counts this spawn done after its bookkeeping (see
                // `job`, "Accounting before release"); the scope waits until then.
                Release::Count(scope.latch.as_ref().unwrap())
            },
            wt.current_tag(),
        );
        // SAFETY: the job runs before the scope (and its borrows) ends.
        let job_ref = unsafe { job.into_job_ref() };
        wt.push(job_ref);
    }

    /// Keeps the first panic of a spawn; later ones are dropped. Their
    /// payloads' destructors are user code, run on whichever worker ran the
    /// spawn: a panic there is swallowed (see `unwind`), or it would unwind
    /// out of the spawn before it counted itself done.
    fn record_panic(&self, p: Box<dyn Any + Send>) {
        let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(p);
            return;
        }
        drop(slot);
        count_swallowed(drop_catching(p));
    }
}
