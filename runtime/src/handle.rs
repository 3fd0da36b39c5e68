//! [`PoolHandle`], [`spawn`], and what a task can ask about its pool
//! ([`current_num_threads`], [`current_thread_index`]).
//!
//! A `PoolHandle` is an `Arc` of the pool's registry: cloning it is one
//! atomic increment, and it is `Send + Sync`, so any thread can submit with
//! it. It does not keep the pool running: once the [`Pool`] is shut down or
//! dropped, the handle's submissions complete at once with
//! [`RequestError::ShutDown`](crate::RequestError::ShutDown) and its spawns
//! are dropped. It submits through the pool's gate (see `control`), so it
//! never touches a pool that is being stopped.

use crate::pool::{submit_to, PoolStats, RequestHandle};
use crate::priority::Priority;
use crate::registry::{Registry, WorkerThread};
use std::sync::Arc;

/// A cheap, cloneable handle to a [`Pool`](crate::Pool), usable from any
/// thread to submit requests (like tokio's `runtime::Handle`). Made by
/// [`Pool::handle`](crate::Pool::handle).
///
/// ```
/// use tailctl_rt::{join, Pool};
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let handle = pool.handle();
/// let threads: Vec<_> = (0..4u64)
///     .map(|i| {
///         let h = handle.clone();
///         std::thread::spawn(move || h.submit(move || join(|| i, || i * 10)).wait().unwrap())
///     })
///     .collect();
/// let sums: Vec<u64> = threads.into_iter().map(|t| { let (a, b) = t.join().unwrap(); a + b }).collect();
/// assert_eq!(sums, [0, 11, 22, 33]);
/// ```
#[derive(Clone)]
pub struct PoolHandle {
    registry: Arc<Registry>,
}

impl std::fmt::Debug for PoolHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolHandle")
            .field("workers", &self.workers())
            .field("policy", &self.registry.policy)
            .finish()
    }
}

impl PoolHandle {
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        PoolHandle { registry }
    }

    /// Submits a request, as [`Pool::submit`](crate::Pool::submit). Once the
    /// pool is shut down or dropped, the handle reports
    /// [`RequestError::ShutDown`](crate::RequestError::ShutDown).
    ///
    /// ```
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let h = pool.handle();
    /// assert_eq!(h.submit(|| 1).wait(), Ok(1));
    /// drop(pool);
    /// assert_eq!(h.submit(|| 2).wait(), Err(RequestError::ShutDown));
    /// ```
    pub fn submit<F, T>(&self, f: F) -> RequestHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (handle, refused) = match self.registry.ext.enter() {
            Some(_open) => submit_to(&self.registry, f, false, Priority::DEFAULT),
            None => (RequestHandle::shut_down(&self.registry.ext), Some(f)),
        };
        // Dropped outside the gate: `f` may own the last `Pool`, whose drop
        // closes the gate.
        drop(refused);
        handle
    }

    /// Submits a request at priority level `priority`, as
    /// [`Pool::submit_with_priority`](crate::Pool::submit_with_priority).
    ///
    /// ```
    /// use tailctl_rt::{Pool, Priority};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let h = pool.handle();
    /// assert_eq!(h.submit_with_priority(Priority::new(3).unwrap(), || 1).wait(), Ok(1));
    /// ```
    pub fn submit_with_priority<F, T>(&self, priority: Priority, f: F) -> RequestHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (handle, refused) = match self.registry.ext.enter() {
            Some(_open) => submit_to(&self.registry, f, false, priority),
            None => (RequestHandle::shut_down(&self.registry.ext), Some(f)),
        };
        drop(refused);
        handle
    }

    /// Submits a request without a handle, as
    /// [`Pool::spawn`](crate::Pool::spawn); dropped without running once the
    /// pool is shut down.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// pool.handle().spawn(move || tx.send("ran").unwrap());
    /// assert_eq!(rx.recv().unwrap(), "ran");
    /// ```
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let refused = match self.registry.ext.enter() {
            Some(_open) => submit_to::<F, ()>(&self.registry, f, true, Priority::DEFAULT).1,
            None => Some(f),
        };
        drop(refused);
    }

    /// Submits a request without a handle at priority level `priority`, as
    /// [`Pool::spawn_with_priority`](crate::Pool::spawn_with_priority).
    ///
    /// ```
    /// use tailctl_rt::{Pool, Priority};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// pool.handle().spawn_with_priority(Priority::new(2).unwrap(), move || tx.send(2).unwrap());
    /// assert_eq!(rx.recv().unwrap(), 2);
    /// ```
    pub fn spawn_with_priority<F>(&self, priority: Priority, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let refused = match self.registry.ext.enter() {
            Some(_open) => submit_to::<F, ()>(&self.registry, f, true, priority).1,
            None => Some(f),
        };
        drop(refused);
    }

    /// Number of workers of the pool.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(3).build().unwrap();
    /// assert_eq!(pool.handle().workers(), 3);
    /// ```
    pub fn workers(&self) -> usize {
        self.registry.num_workers()
    }

    /// The pool's counters, as [`Pool::stats`](crate::Pool::stats); `None`
    /// once the pool is shut down.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let h = pool.handle();
    /// h.submit(|| ()).wait().unwrap();
    /// assert_eq!(h.stats().unwrap().completed, 1);
    /// pool.shutdown();
    /// assert!(h.stats().is_none());
    /// ```
    pub fn stats(&self) -> Option<PoolStats> {
        let _open = self.registry.ext.enter()?;
        Some(crate::pool::stats_of(&self.registry))
    }
}

/// Spawns `f` as a request without a handle into the pool of the calling
/// worker (like `rayon::spawn`, see [`Pool::spawn`](crate::Pool::spawn)):
/// it may run on any worker, after the spawning request or concurrently with
/// it, and a panic goes to the pool's panic handler.
///
/// # Panics
///
/// Outside a worker of a pool (there is no global pool): use
/// [`Pool::spawn`](crate::Pool::spawn) or [`PoolHandle::spawn`] there.
///
/// ```
/// use std::sync::mpsc;
/// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
/// let (tx, rx) = mpsc::channel();
/// pool.submit(move || {
///     for i in 0..3 {
///         let tx = tx.clone();
///         tailctl_rt::spawn(move || tx.send(i).unwrap());
///     }
/// })
/// .wait()
/// .unwrap();
/// let mut got: Vec<i32> = rx.iter().take(3).collect();
/// got.sort();
/// assert_eq!(got, [0, 1, 2]);
/// assert!(std::panic::catch_unwind(|| tailctl_rt::spawn(|| ())).is_err());
/// ```
pub fn spawn<F>(f: F)
where
    F: FnOnce() + Send + 'static,
{
    let wt = WorkerThread::current();
    assert!(
        !wt.is_null(),
        "tailctl_rt::spawn called outside a pool; use Pool::spawn or PoolHandle::spawn"
    );
    // SAFETY: non-null pointers from `current` are live workers of this
    // thread; their registry outlives this call.
    let reg = unsafe { (*wt).registry() };
    let (_, refused) = submit_to::<F, ()>(reg, f, true, Priority::DEFAULT);
    drop(refused);
}

/// [`spawn`] at priority level `priority`: a new request of the calling
/// worker's pool (from inside a request of any level).
///
/// ```
/// use tailctl_rt::{Pool, Priority};
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let (tx, rx) = std::sync::mpsc::channel();
/// pool.submit(move || {
///     tailctl_rt::spawn_with_priority(Priority::new(5).unwrap(), move || {
///         tx.send(tailctl_rt::current_priority()).unwrap()
///     })
/// })
/// .wait()
/// .unwrap();
/// assert_eq!(rx.recv().unwrap(), Priority::new(5));
/// ```
pub fn spawn_with_priority<F>(priority: Priority, f: F)
where
    F: FnOnce() + Send + 'static,
{
    let wt = WorkerThread::current();
    assert!(
        !wt.is_null(),
        "tailctl_rt::spawn_with_priority called outside a pool; use Pool::spawn_with_priority"
    );
    // SAFETY: non-null pointers from `current` are live workers of this
    // thread; their registry outlives this call.
    let reg = unsafe { (*wt).registry() };
    let (_, refused) = submit_to::<F, ()>(reg, f, true, priority);
    drop(refused);
}

/// The priority level of the job running on the calling worker, or `None`
/// outside a pool.
///
/// ```
/// use tailctl_rt::{Pool, Priority};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let p = Priority::new(9).unwrap();
/// assert_eq!(pool.submit_with_priority(p, tailctl_rt::current_priority).wait(), Ok(Some(p)));
/// assert_eq!(tailctl_rt::current_priority(), None);
/// ```
pub fn current_priority() -> Option<Priority> {
    let wt = WorkerThread::current();
    if wt.is_null() {
        return None;
    }
    // SAFETY: non-null: a live worker of this thread.
    Priority::new(unsafe { (*wt).level() })
}

/// Number of workers of the calling worker's pool; outside a pool, the
/// number a default [`PoolBuilder`](crate::PoolBuilder) would start (the
/// machine's available parallelism), as `rayon::current_num_threads`
/// reports its global pool's.
///
/// ```
/// let pool = tailctl_rt::Pool::builder().workers(3).build().unwrap();
/// assert_eq!(pool.submit(tailctl_rt::current_num_threads).wait().unwrap(), 3);
/// assert_eq!(
///     tailctl_rt::current_num_threads(),
///     tailctl_rt::PoolBuilder::new().worker_count()
/// );
/// ```
pub fn current_num_threads() -> usize {
    let wt = WorkerThread::current();
    if wt.is_null() {
        return crate::PoolBuilder::new().worker_count();
    }
    // SAFETY: non-null: a live worker of this thread.
    unsafe { (*wt).registry().num_workers() }
}

/// Index of the calling worker in its pool (`0..current_num_threads()`), or
/// `None` outside a pool; the same as
/// [`current_worker_index`](crate::current_worker_index), under rayon's name.
///
/// ```
/// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
/// let i = pool.submit(tailctl_rt::current_thread_index).wait().unwrap();
/// assert!(i.unwrap() < 2);
/// assert_eq!(tailctl_rt::current_thread_index(), None);
/// ```
pub fn current_thread_index() -> Option<usize> {
    crate::current_worker_index()
}
