//! The public face: [`PoolBuilder`], [`Pool`], [`RequestHandle`].
//!
//! A request is a closure submitted to the pool. `submit` records its arrival
//! (active count + a slot in the shared table), wraps it in a root job and
//! publishes it per the policy. The worker that admits it runs the closure
//! under `catch_unwind`; when it returns, that worker flushes the request's
//! work, frees its slot (the request leaves the active count), and completes
//! the handle, in that order, so that once `wait` returns the pool's counters
//! already reflect the completion.
//!
//! User destructors and callbacks that the worker runs for the request after
//! its closure (dropping a cancelled closure, a panic payload, the result when
//! the handle is gone; calling the handle's waker) run under `catch_unwind`: a
//! panic there is swallowed and counted in [`PoolStats::swallowed_panics`],
//! and the worker goes on serving (see `unwind`).
//!
//! Shutdown: [`Pool::shutdown`] drains (every submitted request runs), and
//! [`Pool::shutdown_cancel`] cancels requests not yet admitted (their handles
//! report [`RequestError::Cancelled`]); requests already running finish, since
//! a running computation cannot be interrupted safely. Dropping a pool drains.
//! Submitting after shutdown yields [`RequestError::ShutDown`].

use crate::completion::Completion;
use crate::job::{HeapJob, Release};
use crate::policy::Policy;
use crate::registry::{main_loop, Config, Registry, WorkerThread};
use crate::shared_state::{
    tag_generation, tag_slot, SharedState, MAX_WORKERS, NO_REQUEST, REQ_RUNNING,
};
use crate::threshold::ThresholdTable;
use crate::time::now_ns;
use crate::unwind::drop_catching;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

/// Why a request produced no result.
///
/// ```
/// use tailctl_rt::{Pool, RequestError};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let err = pool.submit(|| -> u32 { panic!("boom") }).wait().unwrap_err();
/// assert!(matches!(err, RequestError::Panicked { ref message } if message == "boom"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// The request's closure (or one of its tasks) panicked.
    Panicked {
        /// The panic message, if it was a string.
        message: String,
    },
    /// The pool was shut down with cancellation before the request started.
    Cancelled,
    /// The request was submitted after shutdown began.
    ShutDown,
}

impl std::fmt::Display for RequestError {
    /// ```
    /// assert_eq!(tailctl_rt::RequestError::Cancelled.to_string(), "request cancelled");
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Panicked { message } => write!(f, "request panicked: {message}"),
            RequestError::Cancelled => f.write_str("request cancelled"),
            RequestError::ShutDown => f.write_str("pool is shut down"),
        }
    }
}

impl std::error::Error for RequestError {}

/// What the runtime measured about one request.
///
/// ```
/// use tailctl_rt::Pool;
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let (r, stats) = pool.submit(|| 1 + 1).wait_with_stats();
/// assert_eq!(r.unwrap(), 2);
/// assert!(!stats.serialized);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Request id (unique per pool, in submission order).
    pub id: u64,
    /// Arrival (submit) to completion.
    pub latency: Duration,
    /// Accumulated work: time workers spent on the request, as flushed at
    /// request switches (zero with bookkeeping off or when untracked).
    pub work: Duration,
    /// Tasks of the request executed by thieves.
    pub steals: u32,
    /// The request was marked not stealable.
    pub serialized: bool,
    /// `steals` at the moment the runtime marked it (None if it did not).
    /// Always `steals <= steals_at_serialize`: no steal after the mark.
    pub steals_at_serialize: Option<u32>,
    /// Latency exceeded the pool's target latency (false without a target).
    pub missed_target: bool,
}

/// Pool-wide counters.
///
/// ```
/// use tailctl_rt::Pool;
/// let pool = Pool::builder().workers(2).build().unwrap();
/// pool.submit(|| ()).wait().unwrap();
/// let s = pool.stats();
/// assert_eq!((s.submitted, s.completed), (1, 1));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Requests submitted (accepted).
    pub submitted: u64,
    /// Requests completed (including panicked and cancelled ones).
    pub completed: u64,
    /// Requests that panicked.
    pub panicked: u64,
    /// Requests cancelled by `shutdown_cancel`.
    pub cancelled: u64,
    /// Requests whose latency exceeded the target.
    pub missed_target: u64,
    /// Tasks stolen and executed by thieves.
    pub steals: u64,
    /// Tasks a thief took but returned because their request was serialized.
    pub refused_steals: u64,
    /// Panics a worker caught and swallowed outside any request's closure: a
    /// destructor of a result whose handle was dropped, of a cancelled
    /// request's closure or of a panic payload, or a waker's `wake`.
    pub swallowed_panics: u64,
    /// Requests marked serialized.
    pub serialized: u64,
    /// Requests currently active (arrived, not completed).
    pub active: u64,
}

/// Builds a [`Pool`].
///
/// ```
/// use std::time::Duration;
/// use tailctl_rt::{threshold::ThresholdTable, Policy, Pool};
/// let pool = Pool::builder()
///     .workers(2)
///     .policy(Policy::TailControl)
///     .target_latency(Duration::from_millis(20))
///     .thresholds(ThresholdTable::from_thresholds(vec![None, Some(Duration::from_millis(5))]))
///     .build()
///     .unwrap();
/// assert_eq!(pool.workers(), 2);
/// ```
#[derive(Debug)]
pub struct PoolBuilder {
    workers: Option<usize>,
    policy: Policy,
    target_latency: Option<Duration>,
    thresholds: Option<ThresholdTable>,
    bookkeeping: Option<bool>,
    stack_size: usize,
    thread_name: String,
    spin_rounds: u32,
    shared: Option<SharedState>,
}

impl Default for PoolBuilder {
    fn default() -> Self {
        PoolBuilder {
            workers: None,
            policy: Policy::StealFirst,
            target_latency: None,
            thresholds: None,
            bookkeeping: None,
            stack_size: 8 << 20,
            thread_name: "tailctl-w".to_string(),
            spin_rounds: 64,
            shared: None,
        }
    }
}

impl PoolBuilder {
    /// A builder with defaults: one worker per available CPU, steal-first,
    /// no target, no threshold table.
    ///
    /// ```
    /// let pool = tailctl_rt::PoolBuilder::new().build().unwrap();
    /// assert!(pool.workers() >= 1);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of worker threads (1 to [`MAX_WORKERS`]).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(3).build().unwrap();
    /// assert_eq!(pool.workers(), 3);
    /// ```
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// The scheduling policy (default [`Policy::StealFirst`]).
    ///
    /// ```
    /// use tailctl_rt::{Policy, Pool};
    /// let pool = Pool::builder().workers(1).policy(Policy::RandomAdmission).build().unwrap();
    /// assert_eq!(pool.policy(), Policy::RandomAdmission);
    /// ```
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The target latency: requests slower than this count as misses.
    ///
    /// ```
    /// use std::time::Duration;
    /// let pool = tailctl_rt::Pool::builder().workers(1).target_latency(Duration::from_millis(10)).build().unwrap();
    /// assert_eq!(pool.target_latency(), Some(Duration::from_millis(10)));
    /// ```
    pub fn target_latency(mut self, target: Duration) -> Self {
        self.target_latency = Some(target);
        self
    }

    /// The threshold table tail-control serializes by (without one,
    /// tail-control behaves as steal-first).
    ///
    /// ```
    /// use tailctl_rt::{threshold::ThresholdTable, Policy, Pool};
    /// let t = ThresholdTable::from_thresholds(vec![None]);
    /// let pool = Pool::builder().workers(1).policy(Policy::TailControl).thresholds(t).build().unwrap();
    /// assert_eq!(pool.policy(), Policy::TailControl);
    /// ```
    pub fn thresholds(mut self, table: ThresholdTable) -> Self {
        self.thresholds = Some(table);
        self
    }

    /// Whether workers read the clock at request switches and tail-control
    /// runs its pileup check. Default: on for tail-control, off otherwise.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).bookkeeping(true).build().unwrap();
    /// assert!(pool.bookkeeping());
    /// ```
    pub fn bookkeeping(mut self, on: bool) -> Self {
        self.bookkeeping = Some(on);
        self
    }

    /// Stack size of worker threads (default 8 MiB; deep `join` recursion
    /// runs on it).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).stack_size(1 << 20).build().unwrap();
    /// assert_eq!(pool.submit(|| 7).wait().unwrap(), 7);
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// Prefix of worker thread names (default `tailctl-w`, then the index).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).thread_name("svc-").build().unwrap();
    /// let name = pool.submit(|| std::thread::current().name().unwrap().to_string()).wait().unwrap();
    /// assert_eq!(name, "svc-0");
    /// ```
    pub fn thread_name(mut self, prefix: &str) -> Self {
        self.thread_name = prefix.to_string();
        self
    }

    /// Search rounds an idle worker makes (spinning, then yielding) before it
    /// sleeps (default 64). Smaller saves CPU, larger cuts wake-up latency.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).spin_rounds(4).build().unwrap();
    /// assert_eq!(pool.submit(|| 1).wait().unwrap(), 1);
    /// ```
    pub fn spin_rounds(mut self, rounds: u32) -> Self {
        self.spin_rounds = rounds.max(1);
        self
    }

    /// The bookkeeping table to publish into, e.g. one backed by a mapped BPF
    /// region ([`SharedState::from_raw`]); by default the pool allocates one
    /// on the heap. Its worker count must equal the pool's.
    ///
    /// ```
    /// use tailctl_rt::{shared_state::SharedState, Pool};
    /// let pool = Pool::builder().workers(2).shared_state(SharedState::new(2)).build().unwrap();
    /// assert_eq!(pool.shared_state().header().worker_count(), 2);
    /// assert!(Pool::builder().workers(2).shared_state(SharedState::new(3)).build().is_err());
    /// ```
    pub fn shared_state(mut self, state: SharedState) -> Self {
        self.shared = Some(state);
        self
    }

    /// The number of workers [`PoolBuilder::build`] will start (the default
    /// is the machine's available parallelism).
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Pool::builder().workers(3).worker_count(), 3);
    /// ```
    pub fn worker_count(&self) -> usize {
        match self.workers {
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Starts the workers.
    ///
    /// ```
    /// assert!(tailctl_rt::Pool::builder().workers(0).build().is_err());
    /// ```
    pub fn build(self) -> std::io::Result<Pool> {
        let n = self.worker_count();
        if n == 0 || n > MAX_WORKERS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("workers must be in 1..={MAX_WORKERS}, got {n}"),
            ));
        }
        let shared = match self.shared {
            Some(s) if s.header().worker_count() as usize != n => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "shared state is for {} workers, the pool has {n}",
                        s.header().worker_count()
                    ),
                ))
            }
            Some(s) => s,
            None => SharedState::new(n),
        };
        let bookkeeping = self
            .bookkeeping
            .unwrap_or(self.policy == Policy::TailControl);
        let (registry, deques) = Registry::new(
            n,
            Config {
                policy: self.policy,
                bookkeeping,
                thresholds: self.thresholds,
                target_latency: self.target_latency,
                spin_rounds: self.spin_rounds,
                shared,
            },
        );
        let mut threads = Vec::with_capacity(n);
        for (i, deque) in deques.into_iter().enumerate() {
            let reg = Arc::clone(&registry);
            let spawned = std::thread::Builder::new()
                .name(format!("{}{i}", self.thread_name))
                .stack_size(self.stack_size)
                .spawn(move || main_loop(deque, i, reg));
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    registry.begin_shutdown(true);
                    for h in threads {
                        let _ = h.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Pool {
            registry,
            threads: Mutex::new(threads),
        })
    }
}

/// A pool of workers serving requests.
///
/// ```
/// use tailctl_rt::{join, Pool};
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let h = pool.submit(|| join(|| 1, || 2));
/// assert_eq!(h.wait().unwrap(), (1, 2));
/// pool.shutdown();
/// ```
pub struct Pool {
    registry: Arc<Registry>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("workers", &self.workers())
            .field("policy", &self.policy())
            .field("active", &self.active_requests())
            .finish()
    }
}

struct RequestShared<T> {
    id: u64,
    completion: Completion<(Result<T, RequestError>, RequestStats)>,
    /// Worker index + 1 of a worker waiting for this request while it
    /// serves its own pool (0: none); the completer wakes it (see
    /// `help_until_done`).
    waiter: AtomicUsize,
    /// That worker's pool (this one or another), set before `waiter`.
    waiter_registry: OnceLock<Arc<Registry>>,
}

impl<T> RequestShared<T> {
    /// Called by `wait` on a worker of any pool: instead of blocking the
    /// worker, keep serving its own pool (top level: it may admit requests,
    /// the awaited one included when it is of the same pool) until the
    /// request is done. A worker that blocked would hold up its pool: with
    /// every worker blocked nobody would run the awaited request, and two
    /// pools whose requests wait on each other deadlocked (rayon-core's
    /// `in_worker_cross` serves the same way). The completer stores the
    /// result, fences and reads `waiter`; the waiter stores `waiter` before
    /// it can sleep, and its sleep re-check reads `done` after a fence
    /// (Dekker, as in `sleep/README.md`), so the wake-up cannot be lost.
    /// The registry is set before `waiter` (release/acquire through it), so
    /// a completer that sees a waiter finds its pool.
    ///
    /// As with any nested wait, waits stack: a worker that admits, while it
    /// waits, a request that waits in turn resumes the first wait only after
    /// the second one is done.
    fn help_until_done(&self) {
        let wt = WorkerThread::current();
        if wt.is_null() {
            return;
        }
        // SAFETY: non-null pointers from `current` are live workers.
        let wt = unsafe { &*wt };
        if self.waiter_registry.set(wt.registry_arc()).is_err() {
            return; // `wait` takes the handle: there is only ever one waiter
        }
        self.waiter.store(wt.index() + 1, Ordering::SeqCst);
        wt.wait_until(&|| self.completion.is_done(), true);
    }
}

/// The pending result of a submitted request: [`wait`](Self::wait) for it, or
/// `.await` it.
///
/// ```
/// use tailctl_rt::Pool;
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let h = pool.submit(|| "done");
/// assert_eq!(h.wait(), Ok("done"));
/// ```
pub struct RequestHandle<T> {
    shared: Arc<RequestShared<T>>,
}

impl<T> std::fmt::Debug for RequestHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHandle")
            .field("id", &self.shared.id)
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> RequestHandle<T> {
    /// Blocks until the request completes and returns its result.
    ///
    /// Called on a worker (from inside a request of any pool), the worker
    /// does not block: it keeps serving its own pool (tasks and requests,
    /// the awaited one included if it is of the same pool) until the result
    /// is ready, so requests can wait for sub-requests even on a one-worker
    /// pool, and pools can wait on each other.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// assert_eq!(pool.submit(|| 6 * 7).wait().unwrap(), 42);
    /// ```
    pub fn wait(self) -> Result<T, RequestError> {
        self.shared.help_until_done();
        self.shared.completion.wait().0
    }

    /// Like [`wait`](Self::wait), with the request's measurements.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let (r, s) = pool.submit(|| ()).wait_with_stats();
    /// assert!(r.is_ok());
    /// assert_eq!(s.steals, 0);
    /// ```
    pub fn wait_with_stats(self) -> (Result<T, RequestError>, RequestStats) {
        self.shared.help_until_done();
        self.shared.completion.wait()
    }

    /// Whether the request has completed (its result is ready).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let h = pool.submit(|| ());
    /// while !h.is_finished() { std::thread::yield_now(); }
    /// h.wait().unwrap();
    /// ```
    pub fn is_finished(&self) -> bool {
        self.shared.completion.is_done()
    }

    /// The request's id.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let (a, b) = (pool.submit(|| ()), pool.submit(|| ()));
    /// assert!(a.id() < b.id());
    /// ```
    pub fn id(&self) -> u64 {
        self.shared.id
    }
}

impl<T> Future for RequestHandle<T> {
    type Output = Result<T, RequestError>;

    /// Ready when the request completes; the result can be taken once.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::task::{Context, Poll, Waker};
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let mut h = pool.submit(|| 5);
    /// let mut cx = Context::from_waker(Waker::noop());
    /// loop {
    ///     if let Poll::Ready(r) = std::pin::Pin::new(&mut h).poll(&mut cx) {
    ///         assert_eq!(r, Ok(5));
    ///         break;
    ///     }
    ///     std::thread::yield_now();
    /// }
    /// ```
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.shared.completion.poll(cx).map(|(r, _)| r)
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl Pool {
    /// A [`PoolBuilder`].
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// assert_eq!(pool.workers(), 1);
    /// ```
    pub fn builder() -> PoolBuilder {
        PoolBuilder::new()
    }

    /// Submits a request. It becomes active now (arrival) and runs when a
    /// worker admits it, per the policy. Inside `f`, use [`join`](crate::join),
    /// [`scope`](crate::scope) and [`parallel_for`](crate::parallel_for).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let hs: Vec<_> = (0..10u64).map(|i| pool.submit(move || i * i)).collect();
    /// let sum: u64 = hs.into_iter().map(|h| h.wait().unwrap()).sum();
    /// assert_eq!(sum, 285);
    /// ```
    pub fn submit<F, T>(&self, f: F) -> RequestHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let reg = &*self.registry;
        let arrival = now_ns();
        // Counted active *before* the shutdown check (see `shutdown`).
        let arrived = reg.arrive(arrival);
        let shared = Arc::new(RequestShared {
            id: match arrived {
                Ok((id, _)) | Err(id) => id,
            },
            completion: Completion::new(),
            waiter: AtomicUsize::new(0),
            waiter_registry: OnceLock::new(),
        });
        let tag = match arrived {
            Ok((_, tag)) => tag,
            Err(id) => {
                let waker_panicked = shared.completion.complete((
                    Err(RequestError::ShutDown),
                    RequestStats {
                        id,
                        ..RequestStats::default()
                    },
                ));
                debug_assert!(!waker_panicked, "nobody polled the handle yet");
                return RequestHandle { shared };
            }
        };
        reg.counters.submitted.fetch_add(1, Ordering::Relaxed);
        let s2 = Arc::clone(&shared);
        let tag = tag.unwrap_or(NO_REQUEST);
        let job = HeapJob::new(move || {
            run_request(tag, arrival, f, s2);
            Release::Nothing
        });
        // SAFETY: the closure is 'static; the job is executed exactly once by
        // the worker that admits it.
        let job_ref = unsafe { job.into_job_ref(tag) };
        reg.inject(job_ref);
        RequestHandle { shared }
    }

    /// Number of workers.
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Pool::builder().workers(2).build().unwrap().workers(), 2);
    /// ```
    pub fn workers(&self) -> usize {
        self.registry.num_workers()
    }

    /// The pool's policy.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// assert_eq!(pool.policy(), tailctl_rt::Policy::StealFirst);
    /// ```
    pub fn policy(&self) -> Policy {
        self.registry.policy
    }

    /// Whether per-switch bookkeeping (clock reads, pileup check) is on.
    ///
    /// ```
    /// use tailctl_rt::{Policy, Pool};
    /// assert!(Pool::builder().workers(1).policy(Policy::TailControl).build().unwrap().bookkeeping());
    /// ```
    pub fn bookkeeping(&self) -> bool {
        self.registry.bookkeeping
    }

    /// The target latency, if set.
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Pool::builder().workers(1).build().unwrap().target_latency(), None);
    /// ```
    pub fn target_latency(&self) -> Option<Duration> {
        self.registry.target_latency
    }

    /// Requests arrived and not yet completed (the paper's `q_t`).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// pool.submit(|| ()).wait().unwrap();
    /// assert_eq!(pool.active_requests(), 0);
    /// ```
    pub fn active_requests(&self) -> usize {
        self.registry.shared.header().active() as usize
    }

    /// Pool-wide counters.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// assert_eq!(pool.stats().submitted, 0);
    /// ```
    pub fn stats(&self) -> PoolStats {
        let c = &self.registry.counters;
        PoolStats {
            submitted: c.submitted.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            panicked: c.panicked.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            missed_target: c.missed_target.load(Ordering::Relaxed),
            steals: c.steals.load(Ordering::Relaxed),
            refused_steals: c.refused_steals.load(Ordering::Relaxed),
            swallowed_panics: c.swallowed_panics.load(Ordering::Relaxed),
            serialized: self.registry.shared.header().serialized(),
            active: self.active_requests() as u64,
        }
    }

    /// The bookkeeping table (what the kernel half will map).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// assert_eq!(pool.shared_state().header().worker_count(), 2);
    /// ```
    pub fn shared_state(&self) -> &SharedState {
        &self.registry.shared
    }

    /// Number of workers asleep right now.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// assert!(pool.sleeping_workers() <= 1);
    /// ```
    pub fn sleeping_workers(&self) -> usize {
        self.registry.sleep.sleeping_workers() as usize
    }

    /// Stops accepting requests (later submits fail with
    /// [`RequestError::ShutDown`]); submitted ones still run. Workers exit
    /// once none is active; dropping or [`shutdown`](Self::shutdown) joins them.
    ///
    /// ```
    /// use tailctl_rt::RequestError;
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let before = pool.submit(|| 1);
    /// pool.close();
    /// assert_eq!(pool.submit(|| 2).wait(), Err(RequestError::ShutDown));
    /// assert_eq!(before.wait(), Ok(1));
    /// ```
    pub fn close(&self) {
        self.registry.begin_shutdown(false);
    }

    /// Shuts down after every submitted request completed (drain), and joins
    /// the workers.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let h = pool.submit(|| 1);
    /// pool.shutdown();
    /// assert_eq!(h.wait(), Ok(1));
    /// ```
    pub fn shutdown(self) {
        self.stop(false);
    }

    /// Shuts down, cancelling requests not yet admitted; running requests
    /// finish. Joins the workers.
    ///
    /// ```
    /// use tailctl_rt::RequestError;
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let hs: Vec<_> = (0..100).map(|i| pool.submit(move || i)).collect();
    /// pool.shutdown_cancel();
    /// for (i, h) in hs.into_iter().enumerate() {
    ///     match h.wait() {
    ///         Ok(v) => assert_eq!(v, i),
    ///         Err(e) => assert_eq!(e, RequestError::Cancelled),
    ///     }
    /// }
    /// ```
    pub fn shutdown_cancel(self) {
        self.stop(true);
    }

    fn stop(&self, cancel: bool) {
        self.registry.begin_shutdown(cancel);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let me = WorkerThread::current();
        // SAFETY: non-null pointers from `current` are live workers.
        let on_own_worker =
            !me.is_null() && std::ptr::eq(unsafe { (*me).registry() }, &*self.registry);
        if on_own_worker {
            return; // joining ourselves would deadlock; threads exit on their own
        }
        for h in threads {
            let _ = h.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop(false);
    }
}

/// Body of a request's root job, on the worker that admitted it.
///
/// Nothing may unwind out of here into the worker (see `unwind`): the closure
/// runs under `catch_unwind`, and every other piece of user code the worker
/// runs for the request (the closure's destructor if it is cancelled, the
/// panic payload's, the waker, and the result's destructor when the handle
/// was dropped so that this worker holds the last reference) is caught,
/// swallowed and counted.
fn run_request<F, T>(tag: u64, arrival: u64, f: F, shared: Arc<RequestShared<T>>)
where
    F: FnOnce() -> T,
{
    // SAFETY: root jobs are only executed by workers, whose WorkerThread
    // outlives the job.
    let wt = unsafe { &*WorkerThread::current() };
    let reg = wt.registry();
    let tracked = tag != NO_REQUEST;
    let slot = tracked.then(|| reg.shared.request(tag_slot(tag)));
    let mut swallowed = 0u64;

    let result = if reg.cancel.load(Ordering::SeqCst) {
        reg.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        swallowed += u64::from(drop_catching(f));
        Err(RequestError::Cancelled)
    } else {
        if let Some(q) = slot {
            q.set_state(REQ_RUNNING);
        }
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) => Ok(v),
            Err(p) => {
                reg.counters.panicked.fetch_add(1, Ordering::Relaxed);
                let message = panic_message(&*p);
                swallowed += u64::from(drop_catching(p));
                Err(RequestError::Panicked { message })
            }
        }
    };

    // Charge this worker's time and leave the request before its slot is
    // freed: every other worker charged its time before it released a latch
    // the request waited for (see `job`), so `work_ns` is final, and nobody
    // adds to the slot after it is freed. What follows (the result's drop,
    // say) runs on no request.
    wt.leave_request();
    let latency = Duration::from_nanos(now_ns().saturating_sub(arrival));
    let missed_target = reg.target_latency.is_some_and(|t| latency > t);
    let mut stats = RequestStats {
        id: shared.id,
        latency,
        missed_target,
        ..RequestStats::default()
    };
    match slot {
        Some(q) => {
            stats.work = Duration::from_nanos(q.work_ns());
            stats.steals = q.steals();
            stats.serialized = q.is_serialized(tag_generation(tag));
            // Only a serialized request has a snapshot of its own (a late
            // mark of the slot's previous request may be in flight, see
            // `shared_state`, "Slot reuse").
            stats.steals_at_serialize = q.steals_at_serialize().filter(|_| stats.serialized);
            reg.shared.free_request(tag);
        }
        None => reg.shared.complete_untracked(),
    }
    if missed_target {
        reg.counters.missed_target.fetch_add(1, Ordering::Relaxed);
    }
    reg.counters.completed.fetch_add(1, Ordering::Relaxed);
    reg.request_finished();
    swallowed += u64::from(shared.completion.complete((result, stats)));
    // A worker (of this pool or another) may be serving its pool while it
    // waits for us. The fence orders the `done` store above before the
    // `waiter` load (Dekker).
    std::sync::atomic::fence(Ordering::SeqCst);
    match shared.waiter.load(Ordering::SeqCst) {
        0 => {}
        w => {
            if let Some(waiter_reg) = shared.waiter_registry.get() {
                waiter_reg.sleep.notify_worker(w - 1);
            }
        }
    }
    // If the handle is gone this is the last reference: the result (user
    // code) is dropped here.
    swallowed += u64::from(drop_catching(shared));
    wt.count_swallowed_panics(swallowed);
}
