//! tailctl-rt: a work-stealing runtime for interactive, request-parallel services.
//!
//! Each request runs as a parallel computation on a pool of workers. The pool's
//! policy decides, when a worker runs out of local work, whether it steals or
//! admits a new request; tail-control serializes large requests so that as many
//! requests as possible meet a target latency (Li et al., PPoPP'16).
//!
//! ```
//! use tailctl_rt::{join, parallel_for, Policy, Pool};
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! let pool = Pool::builder().workers(2).policy(Policy::TailControl).build().unwrap();
//! let h = pool.submit(|| {
//!     let total = AtomicU64::new(0);
//!     parallel_for(0..10_000, 256, |i| {
//!         total.fetch_add(i as u64, Ordering::Relaxed);
//!     });
//!     let (a, b) = join(|| 1, || 2);
//!     total.into_inner() + a + b
//! });
//! assert_eq!(h.wait().unwrap(), 49_995_000 + 3);
//! ```
//!
//! # Modules (one concept each, rayon-core style)
//!
//! * `pool`: builder, [`Pool`], [`RequestHandle`] (wait or `.await`), shutdown;
//! * `registry`: the queues and the worker loop, per-switch bookkeeping;
//! * [`policy`]: steal-first, admit-first, tail-control (pileup check),
//!   random admission;
//! * `job`, `latch`, `completion`: tasks, join/scope latches, the request latch;
//! * `sleep`: how idle workers sleep and are woken (`sleep/README.md`);
//! * `shutdown`: when workers leave, and why no accepted request is stranded;
//! * `join`, `scope`, `scope_fifo`: fork–join inside a request;
//! * [`iter`]: parallel iterators over slices and ranges (`par_iter`,
//!   `into_par_iter`, `map`, `for_each`, `sum`, `collect`), on `join`;
//! * `control`: [`RequestHandle::abort`] and its checkpoints, spawn panics,
//!   the gate of [`PoolHandle`]s;
//! * `handle`: [`PoolHandle`], [`spawn`], [`current_num_threads`];
//! * `error`: [`BuildError`], [`RequestPanic`];
//! * `unwind`: where user code may panic on a worker, and what happens then;
//! * [`shared_state`]: the `#[repr(C)]` table of per-request and per-worker
//!   bookkeeping that the kernel half will map;
//! * [`threshold`], [`distribution`]: threshold tables and work distributions.

mod completion;
mod control;
pub mod distribution;
mod error;
mod handle;
pub mod iter;
mod job;
mod join;
pub mod kernel;
mod latch;
mod mug;
pub mod policy;
mod pool;
pub mod priority;
mod registry;
mod scope;
mod scope_fifo;
pub mod shared_state;
mod shutdown;
mod sleep;
mod sync;
pub mod threshold;
mod time;
mod unwind;

pub use control::is_current_request_aborted;
pub use error::{BuildError, RequestPanic};
pub use handle::{
    current_num_threads, current_priority, current_thread_index, spawn, spawn_with_priority,
    PoolHandle,
};
pub use iter::prelude;
pub use join::{join, parallel_for, parallel_for_chunks};
pub use policy::Policy;
pub use pool::{Pool, PoolBuilder, PoolStats, RequestError, RequestHandle, RequestStats};
pub use priority::{Priority, PriorityMode};
pub use registry::yield_to_higher;
pub use scope::{scope, Scope};
pub use scope_fifo::{scope_fifo, ScopeFifo};

use registry::WorkerThread;

/// Index of the worker running the caller, or `None` outside a pool.
///
/// ```
/// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
/// let i = pool.submit(tailctl_rt::current_worker_index).wait().unwrap();
/// assert!(i.unwrap() < 2);
/// assert_eq!(tailctl_rt::current_worker_index(), None);
/// ```
pub fn current_worker_index() -> Option<usize> {
    let wt = WorkerThread::current();
    // SAFETY: non-null pointers from `current` are live workers of this thread.
    (!wt.is_null()).then(|| unsafe { (*wt).index() })
}

/// Marks the calling request not stealable from now on (clairvoyant
/// tail-control: a request that knows it is large serializes itself before it
/// forks). Returns true if this call marked it; false outside a request, for
/// an untracked request, or if it was already marked.
///
/// ```
/// use tailctl_rt::{join, serialize_current_request, Pool};
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let (r, stats) = pool
///     .submit(|| {
///         assert!(serialize_current_request());
///         join(|| 1, || 2)
///     })
///     .wait_with_stats();
/// assert_eq!(r.unwrap(), (1, 2));
/// assert!(stats.serialized);
/// assert_eq!(stats.steals, 0);
/// ```
pub fn serialize_current_request() -> bool {
    let wt = WorkerThread::current();
    if wt.is_null() {
        return false;
    }
    // SAFETY: non-null: a live worker of this thread.
    let wt = unsafe { &*wt };
    let tag = wt.current_tag();
    tag != shared_state::NO_REQUEST && wt.registry().shared.runtime_mark(tag)
}

/// Whether the calling request is currently marked not stealable (by the
/// pileup check, by [`serialize_current_request`], or later by the kernel).
/// False outside a request.
///
/// ```
/// use tailctl_rt::{is_current_request_serialized, serialize_current_request, Pool};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let r = pool
///     .submit(|| {
///         let before = is_current_request_serialized();
///         serialize_current_request();
///         (before, is_current_request_serialized())
///     })
///     .wait()
///     .unwrap();
/// assert_eq!(r, (false, true));
/// ```
pub fn is_current_request_serialized() -> bool {
    let wt = WorkerThread::current();
    if wt.is_null() {
        return false;
    }
    // SAFETY: non-null: a live worker of this thread.
    let wt = unsafe { &*wt };
    wt.registry().shared.tag_serialized(wt.current_tag())
}
