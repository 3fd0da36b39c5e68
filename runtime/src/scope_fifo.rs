//! `scope_fifo` and `ScopeFifo::spawn_fifo`: a scope whose spawns run in
//! FIFO order per worker, as rayon's.
//!
//! A plain [`Scope`] pushes each spawn on the worker's LIFO deque, so the
//! spawning worker runs its own spawns newest first. Here each worker has a
//! FIFO queue in the scope (crossbeam's `Injector`): `spawn_fifo` appends the
//! body to the spawning worker's queue and spawns, through the inner
//! [`Scope`], an *indirect* task that pops the oldest body of that queue
//! and runs it. Whoever runs an indirect task — the spawning worker popping
//! its deque, or a thief — runs the oldest pending body of that worker, so
//! the spawning worker itself runs them in spawn order. There is exactly one
//! indirect task per body, so every body runs once; counting, waiting,
//! panics and abort checkpoints are the inner scope's, and so is the release
//! protocol: an indirect task is a plain spawn of the inner scope, whose
//! executor charges its time before it counts it done (`job`, "Accounting
//! before release"). An indirect task that unwinds at an abort checkpoint
//! leaves its body in the queue; once every spawn finished, `scope_fifo`
//! drops such bodies with `unwind::drop_catching` (swallowed and counted, as
//! a spawn's second panic payload in `scope`) before it re-raises the unwind,
//! so a panicking destructor of a captured value never panics while that
//! unwind is in flight (which would abort). Outside a pool, spawns run at
//! once, in order.

use crate::registry::WorkerThread;
use crate::scope::Scope;
use crate::unwind::{count_swallowed, drop_catching};
use crossbeam_deque::{Injector, Steal};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

type FifoBody<'scope> = Box<dyn FnOnce(&ScopeFifo<'scope>) + Send + 'scope>;

/// A scope in which spawned tasks run in FIFO order per worker (see
/// [`scope_fifo`]).
///
/// ```
/// use std::sync::Mutex;
/// use tailctl_rt::{scope_fifo, Pool};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let order = pool
///     .submit(|| {
///         let order = Mutex::new(Vec::new());
///         scope_fifo(|s| {
///             for i in 0..5 {
///                 let order = &order;
///                 s.spawn_fifo(move |_| order.lock().unwrap().push(i));
///             }
///         });
///         order.into_inner().unwrap()
///     })
///     .wait()
///     .unwrap();
/// assert_eq!(order, [0, 1, 2, 3, 4]); // `scope` would give [4, 3, 2, 1, 0]
/// ```
pub struct ScopeFifo<'scope> {
    base: Scope<'scope>,
    /// One FIFO of pending bodies per worker of the pool.
    fifos: Box<[Injector<FifoBody<'scope>>]>,
}

impl std::fmt::Debug for ScopeFifo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeFifo").finish_non_exhaustive()
    }
}

/// Raw pointer to the FIFO scope, sent to the worker that runs an indirect task.
struct FifoPtr<'scope>(*const ScopeFifo<'scope>);
// SAFETY: `ScopeFifo` is Sync (its parts are) and outlives every spawn of
// its inner scope, which `scope_fifo` waits for.
unsafe impl Send for FifoPtr<'_> {}

/// Like [`scope`](crate::scope), but tasks spawned with
/// [`ScopeFifo::spawn_fifo`] by one worker start in the order they were
/// spawned (rayon's `scope_fifo`); returns once all finished. Outside a pool
/// they run at once, in order.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let n = AtomicUsize::new(0);
/// tailctl_rt::scope_fifo(|s| {
///     s.spawn_fifo(|_| assert_eq!(n.fetch_add(1, Ordering::SeqCst), 0));
///     s.spawn_fifo(|_| assert_eq!(n.fetch_add(1, Ordering::SeqCst), 1));
/// });
/// assert_eq!(n.into_inner(), 2);
/// ```
pub fn scope_fifo<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&ScopeFifo<'scope>) -> R + Send,
    R: Send,
{
    let wt = WorkerThread::current();
    // SAFETY: non-null pointers from `current` are live workers of this thread.
    let workers = (!wt.is_null()).then(|| unsafe { (*wt).registry().num_workers() });
    let scope = ScopeFifo {
        base: Scope::new(),
        fifos: (0..workers.unwrap_or(1)).map(|_| Injector::new()).collect(),
    };
    let result = catch_unwind(AssertUnwindSafe(|| scope.base.complete(|| op(&scope))));
    // Every spawn finished (`complete` waited, also when it unwinds): what is
    // left are bodies whose indirect task unwound at an abort checkpoint.
    for fifo in scope.fifos.iter() {
        while let Some(body) = pop(fifo) {
            count_swallowed(drop_catching(body));
        }
    }
    match result {
        Ok(r) => r,
        Err(p) => resume_unwind(p),
    }
}

impl<'scope> ScopeFifo<'scope> {
    /// Spawns `body` into the scope; bodies spawned by one worker start in
    /// spawn order, on that worker or on thieves, and all finish before
    /// [`scope_fifo`] returns. A panic propagates out of `scope_fifo` after
    /// every task finished.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use tailctl_rt::{scope_fifo, Pool};
    /// let pool = Pool::builder().workers(2).build().unwrap();
    /// let n = pool
    ///     .submit(|| {
    ///         let n = AtomicUsize::new(0);
    ///         scope_fifo(|s| {
    ///             for _ in 0..10 {
    ///                 s.spawn_fifo(|s| {
    ///                     s.spawn_fifo(|_| { n.fetch_add(1, Ordering::Relaxed); });
    ///                 });
    ///             }
    ///         });
    ///         n.into_inner()
    ///     })
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(n, 10);
    /// ```
    pub fn spawn_fifo<BODY>(&self, body: BODY)
    where
        BODY: FnOnce(&ScopeFifo<'scope>) + Send + 'scope,
    {
        let wt = WorkerThread::current();
        let idx = if wt.is_null() {
            0
        } else {
            // SAFETY: non-null: a live worker of this thread. (A worker of
            // another pool may have another count: any queue will do, as long
            // as the indirect task pops the queue the body went to.)
            unsafe { (*wt).index() % self.fifos.len() }
        };
        self.fifos[idx].push(Box::new(body));
        let ptr = FifoPtr(self);
        self.base.spawn(move |_| {
            let ptr = ptr;
            // SAFETY: `scope_fifo` waits for every spawn of `base` (this one
            // included) before the `ScopeFifo` is dropped, also when unwinding.
            let this = unsafe { &*ptr.0 };
            if let Some(body) = pop(&this.fifos[idx]) {
                body(this);
            }
        });
    }
}

fn pop<T>(q: &Injector<T>) -> Option<T> {
    loop {
        match q.steal() {
            Steal::Success(t) => return Some(t),
            Steal::Empty => return None,
            Steal::Retry => continue,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn a_fifo_scope_is_send_and_sync() {
        fn assert_sync<T: Send + Sync>() {}
        assert_sync::<super::ScopeFifo<'static>>();
    }
}
