//! The public face: [`PoolBuilder`], [`Pool`], [`RequestHandle`].
//!
//! A request is a closure submitted to the pool. `submit` records its arrival
//! (active count + a slot in the shared table), wraps it in a root job and
//! publishes it per the policy. The worker that admits it runs the closure
//! under `catch_unwind`; when it returns, that worker charges its time and
//! leaves the request, frees its slot (the request leaves the active count),
//! and completes the handle, in that order, so that once `wait` returns the
//! pool's counters already reflect the completion.
//!
//! User destructors and callbacks that the worker runs for the request after
//! its closure (dropping a cancelled or aborted closure, an aborted request's
//! value, a panic payload nobody takes, the result when the handle is gone;
//! calling the handle's waker or the panic handler) run under `catch_unwind`
//! (`unwind::drop_catching` / `call_catching`): a panic there is swallowed
//! and counted in [`PoolStats::swallowed_panics`], and the worker goes on
//! serving (see `unwind`).
//!
//! Shutdown: [`Pool::shutdown`] drains (every submitted request runs), and
//! [`Pool::shutdown_cancel`] cancels requests not yet admitted (their handles
//! report [`RequestError::Cancelled`]); requests already running finish, since
//! a running computation cannot be interrupted safely. Dropping a pool drains.
//! Submitting after shutdown yields [`RequestError::ShutDown`]. Every way in
//! (`Pool::submit`/`spawn`, a [`PoolHandle`](crate::PoolHandle), `spawn` on a
//! worker) goes through `submit_to` and thus the shutdown rule of `shutdown`.
//!
//! Abort ([`RequestHandle::abort`]), spawn panics and the gate that
//! [`PoolHandle`](crate::PoolHandle)s submit through are in `control`.

use crate::completion::Completion;
use crate::control::{AbortUnwind, Control, PanicHandler, PoolExt};
use crate::error::{BuildError, RequestPanic};
use crate::job::{Job, JobRef, Release};
use crate::policy::Policy;
use crate::priority::{Priority, PriorityMode};
use crate::registry::{main_loop, Config, Registry, WorkerThread};
use crate::shared_state::{
    tag_generation, tag_slot, SharedState, MAX_WORKERS, NO_REQUEST, REQ_RUNNING,
};
use crate::threshold::ThresholdTable;
use crate::time::now_ns;
use crate::unwind::drop_catching;
use std::cell::UnsafeCell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe, RefUnwindSafe, UnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

/// Why a request produced no result.
///
/// A panic keeps its payload ([`RequestPanic`]), so the waiter can inspect it
/// or re-raise it.
///
/// ```
/// use tailctl_rt::{Pool, RequestError};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let err = pool.submit(|| -> u32 { panic!("boom") }).wait().unwrap_err();
/// assert!(matches!(err, RequestError::Panicked(ref p) if p.message() == "boom"));
/// assert_eq!(*err.try_into_panic().unwrap().downcast::<&str>().unwrap(), "boom");
/// ```
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The request's closure (or one of its tasks) panicked.
    Panicked(RequestPanic),
    /// The pool was shut down with cancellation before the request started.
    Cancelled,
    /// The request was submitted after shutdown began.
    ShutDown,
    /// The request was aborted ([`RequestHandle::abort`]) before it finished.
    Aborted,
}

impl RequestError {
    /// Whether the request panicked.
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// assert!(pool.submit(|| -> () { panic!() }).wait().unwrap_err().is_panic());
    /// ```
    pub fn is_panic(&self) -> bool {
        matches!(self, RequestError::Panicked(_))
    }

    /// The panic payload, or the error itself if it was not a panic (as
    /// tokio's `JoinError::try_into_panic`).
    ///
    /// ```
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let e = pool.submit(|| -> () { std::panic::panic_any(7i32) }).wait().unwrap_err();
    /// assert_eq!(*e.try_into_panic().unwrap().downcast::<i32>().unwrap(), 7);
    /// assert_eq!(RequestError::Cancelled.try_into_panic().unwrap_err(), RequestError::Cancelled);
    /// ```
    pub fn try_into_panic(self) -> Result<Box<dyn std::any::Any + Send>, RequestError> {
        match self {
            RequestError::Panicked(p) => Ok(p.into_payload()),
            other => Err(other),
        }
    }
}

impl std::fmt::Display for RequestError {
    /// ```
    /// assert_eq!(tailctl_rt::RequestError::Cancelled.to_string(), "request cancelled");
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Panicked(p) => write!(f, "request panicked: {p}"),
            RequestError::Cancelled => f.write_str("request cancelled"),
            RequestError::ShutDown => f.write_str("pool is shut down"),
            RequestError::Aborted => f.write_str("request aborted"),
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

/// [`RequestStats`] as a request's completion holds it until the handle
/// asks: 32 bytes instead of 56 (no id, which the request state has, and
/// nanoseconds instead of `Duration`s), so the state every request
/// allocates is smaller.
#[derive(Clone, Copy, Default)]
struct PackedStats {
    latency_ns: u64,
    work_ns: u64,
    steals: u32,
    steals_at_serialize: Option<u32>,
    serialized: bool,
    missed_target: bool,
}

impl PackedStats {
    fn unpack(self, id: u64) -> RequestStats {
        RequestStats {
            id,
            latency: Duration::from_nanos(self.latency_ns),
            work: Duration::from_nanos(self.work_ns),
            steals: self.steals,
            serialized: self.serialized,
            steals_at_serialize: self.steals_at_serialize,
            missed_target: self.missed_target,
        }
    }
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
    /// Requests that completed as aborted ([`RequestHandle::abort`]).
    pub aborted: u64,
    /// Requests whose latency exceeded the target.
    pub missed_target: u64,
    /// Tasks stolen and executed by thieves.
    pub steals: u64,
    /// Tasks a thief took but returned because their request was serialized.
    pub refused_steals: u64,
    /// Panics a worker caught and swallowed outside any request's closure: a
    /// destructor of a result whose handle was dropped, of the value of an
    /// aborted request, of a cancelled (or aborted before it started)
    /// request's closure, of a panic payload nobody re-raises (a scope's
    /// second one, a spawned request's without a panic handler), of a
    /// `scope_fifo` body skipped by an abort, or a waker's `wake`, or a panic
    /// of the [panic handler](PoolBuilder::panic_handler).
    pub swallowed_panics: u64,
    /// Requests marked serialized.
    pub serialized: u64,
    /// Requests currently active (arrived, not completed).
    pub active: u64,
    /// Requests submitted at a priority level above the default.
    pub submitted_prioritized: u64,
    /// Times a worker changed the priority level it runs: it started a job
    /// of another level than its previous one, or came back down to its
    /// frame's level after running higher work (see
    /// [`Priority`](crate::Priority)).
    pub level_switches: u64,
    /// Tasks taken from a level's mugging queue (deques abandoned by
    /// workers that moved up to a higher level).
    pub muggings: u64,
    /// Tasks taken from the deques of workers the kernel marked descheduled
    /// (kept off the CPU for the service's core allotment), before any
    /// ordinary steal: SAWS's mugging. Zero unless the pool runs on a
    /// region a scheduler maps (see `kernel::link`).
    pub desched_mugs: u64,
    /// Checkpoints at which a worker found work of a level above its own
    /// waiting (it then moved up): each is a time a lower level ran while
    /// higher work waited.
    pub promptness_violations: u64,
    /// Their total length: for each, the time since the higher level's work
    /// bit was set (an upper bound per worker, ns).
    pub promptness_violation_ns: u64,
    /// Thread CPU time the workers spent looking for work (from a search
    /// that found nothing until work was found: stealing attempts,
    /// spinning, going to sleep and waking; ns). Zero unless
    /// [`PoolBuilder::measure_search_cpu`] was set.
    pub search_cpu_ns: u64,
    /// Quanta at which the adaptive scheduler reassigned the workers
    /// ([`PriorityMode::Adaptive`]; zero in prompt mode).
    pub reallocations: u64,
    /// `sched_yield` calls of workers that searched without finding work
    /// (after the spinning rounds, before parking). Each is a pass through
    /// the kernel's scheduler, which costs more under a BPF scheduler.
    pub yields: u64,
    /// Times a worker with nothing to do blocked in its park: in its idle
    /// loop, or waiting on a worker for another request's result
    /// ([`RequestHandle::wait`]). A park that times out and parks again
    /// counts again; a park whose last check found work does not count.
    pub parks: u64,
    /// The same, for a worker inside a join or scope while the other half
    /// ran elsewhere (or waited, off the CPU, for its thief).
    pub join_parks: u64,
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
#[must_use = "a builder does nothing until `.build()`"]
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
    panic_handler: HandlerSlot,
    priority_mode: PriorityMode,
    search_cpu: bool,
}

/// The builder's panic handler (a closure has no `Debug`).
#[derive(Default)]
struct HandlerSlot(Option<PanicHandler>);

impl std::fmt::Debug for HandlerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
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
            panic_handler: HandlerSlot::default(),
            priority_mode: PriorityMode::Prompt,
            search_cpu: false,
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

    /// How workers choose the priority level they take work from: Prompt
    /// I-Cilk's rule (the default) or the adaptive quantum-based scheduler
    /// it is compared against (see [`PriorityMode`]). A zero quantum is
    /// rejected by `build`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_rt::{Pool, PriorityMode};
    /// let mode = PriorityMode::Adaptive { quantum: Duration::from_millis(1) };
    /// let pool = Pool::builder().workers(2).priority_mode(mode).build().unwrap();
    /// assert_eq!(pool.priority_mode(), mode);
    /// assert_eq!(Pool::builder().workers(1).build().unwrap().priority_mode(), PriorityMode::Prompt);
    /// ```
    pub fn priority_mode(mut self, mode: PriorityMode) -> Self {
        self.priority_mode = mode;
        self
    }

    /// Measures the thread CPU time workers spend looking for work
    /// ([`PoolStats::search_cpu_ns`]); off by default (it reads the thread
    /// CPU clock, a system call, twice per search that found nothing).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(2).measure_search_cpu(true).build().unwrap();
    /// pool.submit(|| tailctl_rt::join(|| 1, || 2)).wait().unwrap();
    /// drop(pool.stats().search_cpu_ns); // some ns, whatever the machine
    /// ```
    pub fn measure_search_cpu(mut self, on: bool) -> Self {
        self.search_cpu = on;
        self
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

    /// What to do with the panic of a request nobody waits for (one started
    /// with [`Pool::spawn`], [`PoolHandle::spawn`](crate::PoolHandle::spawn)
    /// or [`spawn`](crate::spawn)): the handler runs on the worker, with the
    /// payload, after the request completed. Without one, the payload is
    /// dropped; either way the panic hook printed the panic and
    /// [`PoolStats::panicked`] counts it. A panic of the handler itself (or
    /// of the payload's destructor) is contained and counted in
    /// [`PoolStats::swallowed_panics`].
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::sync::Mutex;
    /// let (tx, rx) = mpsc::channel();
    /// let tx = Mutex::new(tx);
    /// let pool = tailctl_rt::Pool::builder()
    ///     .workers(1)
    ///     .panic_handler(move |p| {
    ///         let msg = *p.downcast::<&str>().unwrap();
    ///         tx.lock().unwrap().send(msg).unwrap();
    ///     })
    ///     .build()
    ///     .unwrap();
    /// pool.spawn(|| panic!("lost? no"));
    /// assert_eq!(rx.recv().unwrap(), "lost? no");
    /// ```
    pub fn panic_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Box<dyn std::any::Any + Send>) + Send + Sync + 'static,
    {
        self.panic_handler = HandlerSlot(Some(Box::new(handler)));
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

    /// Checks the configuration and starts the workers.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_rt::{threshold::ThresholdTable, BuildError, Policy, Pool};
    /// assert!(matches!(
    ///     Pool::builder().workers(0).build(),
    ///     Err(BuildError::InvalidWorkerCount { requested: 0, max: 64 })
    /// ));
    /// let t = ThresholdTable::from_thresholds(vec![None]);
    /// assert!(matches!(
    ///     Pool::builder().workers(1).policy(Policy::AdmitFirst).thresholds(t).build(),
    ///     Err(BuildError::ThresholdsNeedTailControl { policy: Policy::AdmitFirst })
    /// ));
    /// assert!(matches!(
    ///     Pool::builder().workers(1).target_latency(Duration::ZERO).build(),
    ///     Err(BuildError::ZeroTargetLatency)
    /// ));
    /// ```
    pub fn build(self) -> Result<Pool, BuildError> {
        let n = self.worker_count();
        if n == 0 || n > MAX_WORKERS {
            return Err(BuildError::InvalidWorkerCount {
                requested: n,
                max: MAX_WORKERS,
            });
        }
        if self.thresholds.is_some() && self.policy != Policy::TailControl {
            return Err(BuildError::ThresholdsNeedTailControl {
                policy: self.policy,
            });
        }
        if self.target_latency == Some(Duration::ZERO) {
            return Err(BuildError::ZeroTargetLatency);
        }
        if self.priority_mode
            == (PriorityMode::Adaptive {
                quantum: Duration::ZERO,
            })
        {
            return Err(BuildError::ZeroQuantum);
        }
        let shared = match self.shared {
            Some(s) if s.header().worker_count() as usize != n => {
                return Err(BuildError::SharedStateMismatch {
                    table_workers: s.header().worker_count() as usize,
                    pool_workers: n,
                })
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
                ext: Arc::new(PoolExt::new(self.panic_handler.0)),
                priority_mode: self.priority_mode,
                search_cpu: self.search_cpu,
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
                    return Err(BuildError::ThreadSpawn {
                        index: i,
                        source: e,
                    });
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

/// A request's state shared by its handle and the worker that runs it, and
/// its root job: one allocation per request (an `Arc`; the queued job holds
/// one reference, the handle another). With the closure in a box of its own,
/// as it used to be, `malloc` and `free` were a third of the instructions per
/// request of a stream of tiny requests (callgrind, `examples/submit_probe`).
/// `#[repr(C)]` with the tag first: the root job's `JobRef` points here
/// (see `job`). `R` is the closure's cell, `Root<F>` while the request is
/// being submitted, erased (`dyn RootCell`) in the handle.
#[repr(C)]
struct RequestShared<T, R: ?Sized = dyn RootCell> {
    /// The request's tag (`NO_REQUEST` if untracked), for abort marks and
    /// the root job's `JobRef::tag`. Never written after the job is made.
    tag: u64,
    /// When the request arrived (`now_ns`).
    arrival: u64,
    /// The pool's abort marks and panic handler.
    ext: Arc<PoolExt>,
    id: u64,
    /// Started / done / aborted (see `control`).
    control: Control,
    /// Spawned: nobody waits, a panic goes to the panic handler.
    detached: bool,
    /// The request's priority level.
    level: u8,
    /// Its state word ends the first 64 bytes of the allocation (after the
    /// `Arc`'s two counts and the fields above: what the executing worker
    /// reads first), its value follows.
    completion: Completion<(Result<T, RequestError>, PackedStats)>,
    /// Worker index + 1 of a worker waiting for this request while it
    /// serves its own pool (0: none); the completer wakes it (see
    /// `help_until_done`).
    waiter: AtomicUsize,
    /// That worker's pool (this one or another), set before `waiter`.
    waiter_registry: OnceLock<Arc<Registry>>,
    /// The closure, taken by the worker that executes the root job.
    root: R,
}

/// The cell of a request's closure (`RequestShared::root`).
struct Root<F>(UnsafeCell<Option<F>>);

/// What the handle sees of a request's closure: nothing but its size and
/// drop (the closure is long gone by the time a handle can drop the last
/// reference: the root job always takes it, see `run_request`).
trait RootCell: Send + Sync + UnwindSafe + RefUnwindSafe {}

impl<F: Send> RootCell for Root<F> {}

// SAFETY: the closure is touched only by the one worker that executes the
// root job (a `JobRef` is executed at most once), which takes it out
// (`Option::take`); `F: Send` lets it move to that worker. Nobody else ever
// reads the cell, so shared references across threads cannot race on it.
unsafe impl<F: Send> Sync for Root<F> {}

// A handle never touches the closure (only the root job does, and it runs
// it under `catch_unwind` with `AssertUnwindSafe` already), so a panic that
// unwinds past a handle cannot leave the closure observed in a broken state.
impl<F> UnwindSafe for Root<F> {}
impl<F> RefUnwindSafe for Root<F> {}

impl<T, F> Job for RequestShared<T, Root<F>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    unsafe fn execute(this: *const ()) -> Release {
        // SAFETY: `this` was made by `Arc::into_raw` in `submit_to` for this
        // type, and a job is executed at most once: this takes back the
        // reference the queued job held (dropped at the end of
        // `run_request`, or while unwinding, never twice).
        let shared = unsafe { Arc::from_raw(this as *const Self) };
        // SAFETY: only the executor of the root job touches `root` (see the
        // `Sync` impl of `Root`), and only here, once.
        let f = unsafe { (*shared.root.0.get()).take() };
        let f = f.expect("a request's root job ran twice");
        run_request(f, shared);
        Release::Nothing
    }
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
        // Waiting for a lower-level request of its own pool, the worker
        // takes work down to that level (it may have to run the request
        // itself: with one worker nothing else would); otherwise it keeps
        // its level's floor (`priority/README.md`, "Waiting").
        let floor = if Arc::ptr_eq(&wt.registry().ext, &self.ext) {
            wt.level().min(self.level)
        } else {
            wt.level()
        };
        wt.wait_until_at(&|| self.completion.is_done(), true, floor);
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
#[must_use = "dropping a handle does not cancel the request; use `Pool::spawn` to run one without a handle"]
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
    /// A handle refused by a stopped pool's gate (id `u64::MAX`: no request
    /// was allocated).
    pub(crate) fn shut_down(ext: &Arc<PoolExt>) -> Self {
        let shared = RequestShared {
            tag: NO_REQUEST,
            id: u64::MAX,
            arrival: 0,
            completion: Completion::new(),
            waiter: AtomicUsize::new(0),
            waiter_registry: OnceLock::new(),
            control: Control::new(),
            ext: Arc::clone(ext),
            detached: false,
            level: 0,
            root: Root::<fn()>(UnsafeCell::new(None)),
        };
        // SAFETY: the only completion: this request is never queued.
        let waker_panicked = unsafe {
            shared
                .completion
                .complete((Err(RequestError::ShutDown), PackedStats::default()))
        };
        debug_assert!(!waker_panicked, "nobody polled the handle yet");
        RequestHandle {
            shared: Arc::new(shared),
        }
    }

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
        let (r, stats) = self.shared.completion.wait();
        (r, stats.unpack(self.shared.id))
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

    /// The request's id (`u64::MAX` for a submission that a
    /// [`PoolHandle`](crate::PoolHandle) of a stopped pool refused).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
    /// let (a, b) = (pool.submit(|| ()), pool.submit(|| ()));
    /// assert!(a.id() < b.id());
    /// ```
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Aborts the request; returns false if it had already finished.
    ///
    /// A request that has not started yet never runs: its closure is dropped
    /// when a worker takes it from the queue, and the handle reports
    /// [`RequestError::Aborted`] (so `wait` returns once a worker got to it).
    /// A running request is marked: from now on, the runtime skips its
    /// remaining work at the next checkpoint (the start of a
    /// [`join`](crate::join) or scope spawn, each chunk of
    /// [`parallel_for`](crate::parallel_for) and of parallel iterators) by
    /// unwinding the request, and the handle reports `Aborted` (unless the
    /// request panicked first). Code already running is not interrupted;
    /// long sequential loops can poll
    /// [`is_current_request_aborted`](crate::is_current_request_aborted).
    /// If the closure returns anyway, its value is dropped.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// // Hold the only worker, so that `h` cannot start before the abort.
    /// let gate = Arc::new(AtomicBool::new(false));
    /// let g2 = gate.clone();
    /// let blocker = pool.submit(move || while !g2.load(Ordering::SeqCst) { std::thread::yield_now() });
    /// let h = pool.submit(|| unreachable!("aborted requests never run"));
    /// assert!(h.abort());
    /// gate.store(true, Ordering::SeqCst);
    /// assert_eq!(h.wait(), Err(RequestError::Aborted));
    /// blocker.wait().unwrap();
    /// ```
    pub fn abort(&self) -> bool {
        let s = &*self.shared;
        s.control.abort(&s.ext, s.tag)
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
        submit_to(&self.registry, f, false, Priority::DEFAULT).0
    }

    /// Submits a request without a handle (fire and forget, like
    /// `rayon::ThreadPool::spawn`). It is a request like any other (admitted
    /// by the policy, counted, subject to tail-control). A panic is not lost:
    /// it is counted in [`PoolStats::panicked`] and its payload goes to the
    /// [panic handler](PoolBuilder::panic_handler). After shutdown began, `f`
    /// is dropped without running.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let (tx, rx) = mpsc::channel();
    /// for i in 0..4 {
    ///     let tx = tx.clone();
    ///     pool.spawn(move || tx.send(i * i).unwrap());
    /// }
    /// let mut got: Vec<i32> = rx.iter().take(4).collect();
    /// got.sort();
    /// assert_eq!(got, [0, 1, 4, 9]);
    /// ```
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let (_, refused) = submit_to(&self.registry, f, true, Priority::DEFAULT);
        drop(refused);
    }

    /// Submits a request at priority level `priority` (see
    /// [`Priority`](crate::Priority)): no worker starts or continues work
    /// of a lower level while it waits, beyond the worker's next checkpoint
    /// (`join`, scope spawn, end of a task). Its `join`s and scope spawns
    /// inherit the level. Within a level requests start in arrival order.
    ///
    /// ```
    /// use tailctl_rt::{Pool, Priority};
    /// let pool = Pool::builder().workers(2).build().unwrap();
    /// let bg = pool.submit(|| (0..1_000u64).sum::<u64>());
    /// let urgent = pool.submit_with_priority(Priority::new(7).unwrap(), || 42);
    /// assert_eq!(urgent.wait(), Ok(42));
    /// assert_eq!(bg.wait(), Ok(499_500));
    /// assert_eq!(pool.stats().submitted_prioritized, 1);
    /// ```
    pub fn submit_with_priority<F, T>(&self, priority: Priority, f: F) -> RequestHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        submit_to(&self.registry, f, false, priority).0
    }

    /// [`spawn`](Self::spawn) at priority level `priority`.
    ///
    /// ```
    /// use tailctl_rt::{Pool, Priority};
    /// let pool = Pool::builder().workers(2).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// pool.spawn_with_priority(Priority::HIGHEST, move || tx.send(1).unwrap());
    /// assert_eq!(rx.recv().unwrap(), 1);
    /// ```
    pub fn spawn_with_priority<F>(&self, priority: Priority, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let (_, refused) = submit_to(&self.registry, f, true, priority);
        drop(refused);
    }

    /// A cheap, cloneable handle to submit to this pool from anywhere (see
    /// [`PoolHandle`](crate::PoolHandle)).
    ///
    /// ```
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let h = pool.handle();
    /// let t = std::thread::spawn(move || h.submit(|| 40 + 2).wait().unwrap());
    /// assert_eq!(t.join().unwrap(), 42);
    /// ```
    #[must_use]
    pub fn handle(&self) -> crate::PoolHandle {
        crate::PoolHandle::new(Arc::clone(&self.registry))
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
        stats_of(&self.registry)
    }

    /// The pool's [`PriorityMode`].
    pub fn priority_mode(&self) -> PriorityMode {
        self.registry.prio.mode()
    }

    /// Adaptive mode: how many workers the allocator assigned to each level
    /// for the current quantum (index = level, 64 entries); empty in prompt
    /// mode.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_rt::{Pool, PriorityMode};
    /// let pool = Pool::builder().workers(2).build().unwrap();
    /// assert!(pool.allotment().is_empty());
    /// let mode = PriorityMode::Adaptive { quantum: Duration::from_millis(1) };
    /// let pool = Pool::builder().workers(2).priority_mode(mode).build().unwrap();
    /// assert!(pool.allotment().iter().sum::<usize>() <= 2);
    /// ```
    pub fn allotment(&self) -> Vec<usize> {
        self.registry.prio.allotment()
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
        // No PoolHandle may touch the registry from here on.
        self.registry.ext.close_gate();
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

/// The counters of `reg` (`Pool::stats`, `PoolHandle::stats`).
pub(crate) fn stats_of(reg: &Registry) -> PoolStats {
    let c = &reg.counters;
    let p = &reg.prio.counters;
    PoolStats {
        submitted: c.submitted.load(Ordering::Relaxed),
        completed: c.completed.load(Ordering::Relaxed),
        panicked: c.panicked.load(Ordering::Relaxed),
        cancelled: c.cancelled.load(Ordering::Relaxed),
        aborted: reg.ext.aborted.load(Ordering::Relaxed),
        missed_target: c.missed_target.load(Ordering::Relaxed),
        steals: c.steals.load(Ordering::Relaxed),
        refused_steals: c.refused_steals.load(Ordering::Relaxed),
        swallowed_panics: c.swallowed_panics.load(Ordering::Relaxed),
        serialized: reg.shared.header().serialized(),
        active: reg.shared.header().active() as u64,
        submitted_prioritized: p.submitted_above_default.load(Ordering::Relaxed),
        level_switches: p.level_switches.load(Ordering::Relaxed),
        muggings: p.muggings.load(Ordering::Relaxed),
        desched_mugs: c.desched_mugs.load(Ordering::Relaxed),
        promptness_violations: p.violations.load(Ordering::Relaxed),
        promptness_violation_ns: p.violation_ns.load(Ordering::Relaxed),
        search_cpu_ns: reg.prio.search_cpu_ns.load(Ordering::Relaxed),
        reallocations: reg
            .prio
            .adaptive
            .as_ref()
            .map_or(0, |a| a.reallocations.load(Ordering::Relaxed)),
        yields: c.yields.load(Ordering::Relaxed),
        parks: c.parks.load(Ordering::Relaxed),
        join_parks: c.join_parks.load(Ordering::Relaxed),
    }
}

/// Submits `f` to `reg` (the body of `Pool::submit`, `Pool::spawn` and the
/// same on a `PoolHandle` or a worker). The arrival is recorded by the
/// shutdown rule (`Registry::arrive`, see `shutdown`): counted active before
/// the flag is checked, so an accepted request is never stranded. If the pool
/// is shut down, the handle is completed with `ShutDown` and `f` is handed
/// back, to be dropped by the caller outside any lock it holds (`f` may own
/// the last `Pool`).
pub(crate) fn submit_to<F, T>(
    reg: &Registry,
    f: F,
    detached: bool,
    priority: Priority,
) -> (RequestHandle<T>, Option<F>)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let arrival = now_ns();
    // Counted active *before* the shutdown check (see `shutdown`).
    let arrived = reg.arrive(arrival);
    let (id, tag) = match arrived {
        Ok((id, tag)) => (id, tag),
        // Refused: the tag (if any) is already freed again.
        Err(id) => (id, None),
    };
    let tag = tag.unwrap_or(NO_REQUEST);
    let shared = Arc::new(RequestShared {
        tag,
        id,
        arrival,
        completion: Completion::new(),
        waiter: AtomicUsize::new(0),
        waiter_registry: OnceLock::new(),
        control: Control::new(),
        ext: Arc::clone(&reg.ext),
        detached,
        level: priority.level(),
        root: Root(UnsafeCell::new(Some(f))),
    });
    if arrived.is_err() {
        // SAFETY: the only completion: a refused request is never queued.
        let waker_panicked = unsafe {
            shared
                .completion
                .complete((Err(RequestError::ShutDown), PackedStats::default()))
        };
        debug_assert!(!waker_panicked, "nobody polled the handle yet");
        // Nobody else holds the cell: the closure goes back to the caller.
        // SAFETY: the request was never queued, so no job references
        // `shared` and nothing else reads `root`.
        let f = unsafe { (*shared.root.0.get()).take() };
        return (RequestHandle { shared }, f);
    }
    reg.counters.submitted.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the job holds one reference to `shared` (taken back by
    // `execute`, which runs once, on the worker that admits it), so the
    // pointee stays valid until then; `RequestShared` is `repr(C)` with its
    // tag first, and the tag is never written again.
    let job_ref = unsafe { JobRef::new(Arc::into_raw(Arc::clone(&shared))) };
    reg.inject(job_ref, priority.level(), arrival);
    (RequestHandle { shared }, None)
}

/// Runs the closure of a started request: `Aborted` if it was aborted while
/// running (its value, or the abort's unwind, dropped), the panic otherwise
/// (its payload goes to the handle, or to the panic handler). The values
/// dropped here are user code run outside the closure's `catch_unwind`:
/// they go through `drop_catching`, and `swallowed` counts their panics.
fn run_started<F, T, R: ?Sized>(
    f: F,
    shared: &RequestShared<T, R>,
    swallowed: &mut u64,
) -> Result<T, RequestError>
where
    F: FnOnce() -> T,
{
    let outcome = catch_unwind(AssertUnwindSafe(f));
    let aborted = shared.control.finish(&shared.ext, shared.tag);
    match outcome {
        Ok(v) if aborted => {
            *swallowed += u64::from(drop_catching(v));
            Err(RequestError::Aborted)
        }
        Ok(v) => Ok(v),
        Err(p) if p.is::<AbortUnwind>() => {
            *swallowed += u64::from(drop_catching(p));
            Err(RequestError::Aborted)
        }
        Err(p) => Err(RequestError::Panicked(RequestPanic::new(p))),
    }
}

/// Body of a request's root job, on the worker that admitted it.
///
/// Nothing may unwind out of here into the worker (see `unwind`): the closure
/// runs under `catch_unwind`, and every other piece of user code the worker
/// runs for the request (the closure's destructor if it is cancelled or
/// aborted before it started, the value of a request aborted while it ran,
/// the waker, a spawned request's panic handler or panic payload, and the
/// result's destructor when the handle was dropped so that this worker holds
/// the last reference) is caught, swallowed and counted.
fn run_request<F, T>(f: F, shared: Arc<RequestShared<T, Root<F>>>)
where
    F: FnOnce() -> T + Send,
{
    let (tag, arrival) = (shared.tag, shared.arrival);
    // SAFETY: root jobs are only executed by workers, whose WorkerThread
    // outlives the job.
    let wt = unsafe { &*WorkerThread::current() };
    let reg = wt.registry();
    let tracked = tag != NO_REQUEST;
    let slot = tracked.then(|| reg.shared.request(tag_slot(tag)));
    let mut swallowed = 0u64;

    let mut result = if reg.cancel.load(Ordering::SeqCst) {
        reg.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        swallowed += u64::from(drop_catching(f));
        Err(RequestError::Cancelled)
    } else if !shared.control.start() {
        // Aborted before it started: never runs.
        swallowed += u64::from(drop_catching(f));
        shared.control.finish(&shared.ext, tag);
        Err(RequestError::Aborted)
    } else {
        if let Some(q) = slot {
            q.set_state(REQ_RUNNING);
        }
        run_started(f, &shared, &mut swallowed)
    };
    let mut spawn_panic = None;
    match result {
        Err(RequestError::Aborted) => {
            shared.ext.aborted.fetch_add(1, Ordering::Relaxed);
        }
        Err(RequestError::Panicked(_)) => {
            reg.counters.panicked.fetch_add(1, Ordering::Relaxed);
            if shared.detached {
                // Nobody reads a detached request's result: the payload goes
                // to the panic handler once the request completed.
                spawn_panic = std::mem::replace(&mut result, Err(RequestError::Cancelled))
                    .err()
                    .and_then(|e| e.try_into_panic().ok());
            }
        }
        _ => {}
    }

    // Charge this worker's time and leave the request before its slot is
    // freed: every other worker charged its time before it released a latch
    // the request waited for (see `job`), so `work_ns` is final, and nobody
    // adds to the slot after it is freed. What follows (the result's drop,
    // the panic handler, say) runs on no request.
    let now = wt.leave_request();
    let latency = Duration::from_nanos(now.saturating_sub(arrival));
    let missed_target = reg.target_latency.is_some_and(|t| latency > t);
    let mut stats = PackedStats {
        latency_ns: now.saturating_sub(arrival),
        missed_target,
        ..PackedStats::default()
    };
    match slot {
        Some(q) => {
            stats.work_ns = q.work_ns();
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
    // SAFETY: the only completion: the root job runs once (and a queued
    // request is never completed by `submit_to`).
    let (waker_called, waker_panicked) =
        unsafe { shared.completion.complete_reporting((result, stats)) };
    swallowed += u64::from(waker_panicked);
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
    let mut user_code = waker_called;
    if let Some(p) = spawn_panic {
        user_code = true;
        swallowed += u64::from(shared.ext.report_spawn_panic(p));
    }
    // If the handle is gone this is the last reference: the result (user
    // code) is dropped here. (`into_inner`: of two racing drops, exactly
    // one gets the value, so `user_code` is exact.)
    if let Some(inner) = Arc::into_inner(shared) {
        user_code = true;
        swallowed += u64::from(drop_catching(inner));
    }
    wt.count_swallowed_panics(swallowed);
    if tracked && !user_code {
        // `leave_request`'s reading is still the time now, up to the steps
        // above (see `WorkerThread::clock_is_fresh`).
        wt.clock_is_fresh();
    }
}
