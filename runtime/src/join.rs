//! `join` and `parallel_for`: fork–join inside a request.
//!
//! `join(a, b)` pushes `b` (a [`StackJob`] on this stack, tagged with the
//! current request) on the worker's deque, runs `a`, then pops `b` back and
//! runs it inline if no thief took it: the fast path is a push, a pop and two
//! calls, with no clock read and no allocation. If `b` was stolen (or bounced
//! back because its request was serialized) the worker waits for its latch,
//! running other tasks meanwhile. A panic in `a` still waits for `b` (it
//! borrows this stack frame) before propagating. Outside a pool, `join` runs
//! `a` then `b` on the calling thread.
//!
//! Abort checkpoints (see `control`): `join` checks on entry (one load and
//! branch on the fast path), loops before each chunk.

use crate::control::{join_checkpoint, AbortProbe};
use crate::job::StackJob;
use crate::latch::SpinLatch;
use crate::registry::WorkerThread;
use crate::unwind::{count_swallowed, drop_catching};
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Runs `a` and `b`, potentially in parallel, and returns both results.
///
/// A panic in either closure propagates to the caller (after both finished);
/// at a request's root it fails the request, not the pool.
///
/// ```
/// use tailctl_rt::{join, Pool};
/// fn fib(n: u64) -> u64 {
///     if n < 2 { return n }
///     let (a, b) = join(|| fib(n - 1), || fib(n - 2));
///     a + b
/// }
/// let pool = Pool::builder().workers(2).build().unwrap();
/// assert_eq!(pool.submit(|| fib(20)).wait().unwrap(), 6765);
/// assert_eq!(fib(10), 55); // outside a pool: sequential
/// ```
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let wt = WorkerThread::current();
    if wt.is_null() {
        return (a(), b());
    }
    // SAFETY: non-null means this thread is a worker whose WorkerThread lives
    // for the whole thread body, i.e. longer than this call.
    let wt = unsafe { &*wt };
    // Nothing of ours is pushed yet: unwinding here is like `a` panicking at
    // once, without `b` to wait for.
    join_checkpoint(wt);
    let job_b = StackJob::new(
        b,
        SpinLatch::new(wt.index(), wt.registry()),
        wt.current_tag(),
    );
    // SAFETY: `job_b` stays on this frame until its latch is set or we popped
    // it back (we wait for one of the two before returning or unwinding).
    let job_b_ref = unsafe { job_b.as_job_ref() };
    let job_b_id = job_b_ref.id();
    wt.push(job_b_ref);

    let ra = match catch_unwind(AssertUnwindSafe(a)) {
        Ok(v) => v,
        Err(p) => {
            // `b` borrows this frame: let it finish (or run it) first.
            wt.wait_until(&|| job_b.latch.probe(), false);
            // `b` ran (its latch is set): its result, a value or a payload,
            // is dropped here rather than while `p` unwinds, where a
            // panicking destructor would abort (see `unwind`).
            count_swallowed(drop_catching(job_b));
            resume_unwind(p)
        }
    };

    while !job_b.latch.probe() {
        match wt.take_local_job() {
            Some(job) if job.id() == job_b_id => {
                // Nobody stole it: run inline, no latch involved.
                let rb = job_b.run_inline();
                return (ra, rb);
            }
            Some(job) => wt.execute(job),
            None => {
                wt.wait_until(&|| job_b.latch.probe(), false);
                break;
            }
        }
    }
    (ra, job_b.into_result())
}

/// Calls `f(i)` for every `i` in `range`, in parallel: the range is split in
/// halves with [`join`] adaptively (about one piece per worker, more where
/// thieves take pieces) and never into pieces smaller than `grain` items
/// (at least 1).
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use tailctl_rt::{parallel_for, Pool};
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let sum = pool
///     .submit(|| {
///         let sum = AtomicUsize::new(0);
///         parallel_for(0..1000, 16, |i| {
///             sum.fetch_add(i, Ordering::Relaxed);
///         });
///         sum.into_inner()
///     })
///     .wait()
///     .unwrap();
/// assert_eq!(sum, 999 * 1000 / 2);
/// ```
pub fn parallel_for<F>(range: Range<usize>, grain: usize, f: F)
where
    F: Fn(usize) + Sync,
{
    parallel_for_chunks(range, grain, |r| run_chunk(r, &f));
}

/// The leaf loop, kept out of line on purpose: as a function parameter, `f`
/// is a non-aliased shared reference, so the compiler keeps its captures in
/// registers across the loop even when the body writes memory (atomics);
/// inlined into the splitter, they were reloaded on every item. One call per
/// chunk is negligible.
///
/// Four items per pass: with a body of a store or two, the one-item loop is
/// a handful of instructions that runs at about one item per cycle, so
/// where the linker happens to place it matters: a loop crossing a 64-byte
/// boundary of the instruction cache costs two fetches per item. In the
/// benchmark binary the same loop as rayon's took 1.5-1.7x rayon's CPU time
/// for that reason alone (moving unrelated benchmark code flipped the
/// ratio); four items per pass amortise the fetch over four stores. Calls
/// stay in order, one per item, so panics and side effects are unchanged.
#[inline(never)]
fn run_chunk<F: Fn(usize)>(r: Range<usize>, f: &F) {
    let (mut i, end) = (r.start, r.end);
    let quads_end = i + end.saturating_sub(i) / 4 * 4;
    while i < quads_end {
        f(i);
        f(i + 1);
        f(i + 2);
        f(i + 3);
        i += 4;
    }
    while i < end {
        f(i);
        i += 1;
    }
}

/// Like [`parallel_for`], but calls `f` once per chunk (a sub-range of at most
/// `grain` items, consecutive chunks of one piece run in order), for bodies
/// that amortise work over a chunk.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use tailctl_rt::{parallel_for_chunks, Pool};
/// let pool = Pool::builder().workers(2).build().unwrap();
/// let chunks = pool
///     .submit(|| {
///         let n = AtomicUsize::new(0);
///         parallel_for_chunks(0..100, 10, |r| {
///             assert!(r.len() <= 10);
///             n.fetch_add(1, Ordering::Relaxed);
///         });
///         n.into_inner()
///     })
///     .wait()
///     .unwrap();
/// assert!(chunks >= 10);
/// ```
pub fn parallel_for_chunks<F>(range: Range<usize>, grain: usize, f: F)
where
    F: Fn(Range<usize>) + Sync,
{
    let grain = grain.max(1);
    let probe = AbortProbe::current();
    split_reduce(
        range,
        grain,
        &|r| run_chunks(r, grain, probe, &f),
        &|(), ()| (),
    );
}

/// The engine of [`parallel_for_chunks`] and the parallel iterators: splits
/// `range` adaptively (see `split`), never into pieces shorter than
/// `min_len` (at least 1), calls `leaf` once per piece and combines the
/// results of adjacent pieces with `combine(left, right)`. Outside a pool or
/// on a one-worker pool: `leaf(range)` on the calling thread.
pub(crate) fn split_reduce<R, L, C>(range: Range<usize>, min_len: usize, leaf: &L, combine: &C) -> R
where
    R: Send,
    L: Fn(Range<usize>) -> R + Sync,
    C: Fn(R, R) -> R + Sync,
{
    let min_len = min_len.max(1);
    let wt = WorkerThread::current();
    // SAFETY: non-null pointers from `current` are live workers of this thread.
    let workers = (!wt.is_null()).then(|| unsafe { (*wt).registry().num_workers() });
    match workers {
        Some(n) if n > 1 => split(range, min_len, n, n, leaf, combine),
        _ => leaf(range),
    }
}

/// Adaptive splitting (rayon's and TBB's auto-partitioner): split into about
/// as many pieces as workers, and split again only where a thief took a
/// piece (it then runs on another worker than the one that split it), never
/// below `grain`. Far fewer tasks than splitting down to `grain` everywhere,
/// and each worker keeps writing its own part of the range: measured 1.8x
/// less CPU than full splitting on a 10^6-item loop of small stores. A
/// serialized request is never stolen from, so its loops stop splitting.
fn split<R, L, C>(
    r: Range<usize>,
    grain: usize,
    splits: usize,
    workers: usize,
    leaf: &L,
    combine: &C,
) -> R
where
    R: Send,
    L: Fn(Range<usize>) -> R + Sync,
    C: Fn(R, R) -> R + Sync,
{
    if splits == 0 || r.len() / 2 < grain {
        return leaf(r);
    }
    let mid = r.start + r.len() / 2;
    let here = crate::current_worker_index();
    let (a, b) = join(
        || split(r.start..mid, grain, splits / 2, workers, leaf, combine),
        || {
            let stolen = crate::current_worker_index() != here;
            let splits = if stolen {
                workers.max(splits / 2)
            } else {
                splits / 2
            };
            split(mid..r.end, grain, splits, workers, leaf, combine)
        },
    );
    combine(a, b)
}

/// Runs `r` sequentially, in chunks of at most `grain` items, each after an
/// abort checkpoint.
fn run_chunks<F: Fn(Range<usize>)>(r: Range<usize>, grain: usize, probe: AbortProbe<'_>, f: &F) {
    let mut start = r.start;
    while start < r.end {
        probe.check();
        crate::registry::yield_to_higher();
        let end = start.saturating_add(grain).min(r.end);
        f(start..end);
        start = end;
    }
}
