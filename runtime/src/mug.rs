//! Mugging: the deques of workers the kernel keeps off the CPU are emptied
//! first (issue 12; SAWS, Agrawal, He and Leiserson's adaptive scheduler
//! under an allotment, as AMCilk implements it).
//!
//! # Why
//!
//! Under `scx_tailctl --allot POLICY` the kernel runs at most `allot`
//! threads of a service at once. A worker over the allotment waits in its
//! job's queue, off the CPU, for as long as the job's running workers hold
//! its tokens — possibly many slices. Whatever its deque holds (the second
//! halves of its joins, its scope spawns) waits with it unless someone else
//! takes it: SAWS's "muggable" deques. Plain random stealing reaches them
//! eventually, but at the same rate as every other deque, so a thief keeps
//! trying deques of running workers (who will pop their own tasks anyway)
//! while the descheduled worker's tasks, which nobody else will run, sit.
//!
//! # Protocol
//!
//! * **Kernel** (`bpf/main.bpf.c`, `set_descheduled`): when a registered
//!   worker is queued in its job's queue (over the allotment: rotated out,
//!   sent back, or waiting for a token), it stores 1 in its worker slot's
//!   `descheduled` field; when the worker runs again (`ops.running`), or
//!   leaves the job (unbind), it stores 0. Only the kernel writes the field.
//! * **Runtime** (`mug`, called by `find_work` wherever its policy steals,
//!   before the ordinary steal round: after the tail-control pileup check,
//!   and after an admission the policy puts first, so the policies keep
//!   their order of admitting and stealing): a worker out of local work reads the flags
//!   of the pool's other workers (one relaxed load each, only when the region
//!   is external, i.e. a scheduler may write it) and steals from the first
//!   marked one whose deque is not empty, from a random start so that
//!   several thieves spread over several marked deques. It takes one task
//!   per search and searches again after running it: SAWS mugs the whole
//!   deque at once, but this runtime's deques are Chase-Lev deques whose
//!   tasks keep their request accounting only through the ordinary steal
//!   path (`accept`: the serialized-request check and `steals` count), so
//!   the whole deque is taken as consecutive single steals, each one first
//!   in its thief's search. Each is counted in `PoolStats::desched_mugs`.
//! * The flag is a hint: stale either way costs only order (a marked
//!   worker that already runs again pops what is left; a cleared one is
//!   still reached by the ordinary steal round). A serialized request's
//!   deque is skipped as in every steal.
//!
//! # Parking at steal boundaries, and locks
//!
//! The kernel takes a thread off the CPU where it happens to be (a tick,
//! a wake-up, an enqueue): the runtime cannot choose the point. What it
//! guarantees instead is that no point strands work or other workers:
//!
//! * Deques, the injector and the bounce queues are lock-free (crossbeam):
//!   a worker descheduled in the middle of a push or pop leaves them usable
//!   by every other worker, and its deque stealable.
//! * No worker spins on another worker's progress without a bound: the
//!   search loop yields after `spin_rounds / 8` rounds and parks after
//!   `spin_rounds`; a join's wait runs other work or parks. A worker that
//!   blocks gives its CPU, and so its job token, back: the kernel then runs
//!   the descheduled one (job queue rotation, and the wait bound).
//! * The locks the workers take (`sleep`'s per-worker mutex, the priority
//!   levels' FIFO mutexes, a completion's slot) are held for a few loads
//!   and stores, never across a steal, a task, or a park (the sleep mutex
//!   is released by the condition variable's wait). Their waiters block in
//!   the kernel (futex) after a short spin rather than spinning: a holder
//!   descheduled inside one delays them by at most its wait for a token,
//!   and their blocking hands it the token.
//! * So a descheduled worker is, in effect, parked at its last steal
//!   boundary: everything it published (its deque, its `current` request,
//!   which the kernel reads) stays usable. A running worker never sees its
//!   own flag set (the kernel clears it before the worker returns to user
//!   space); a stale read of it changes nothing, since `mug` skips the
//!   calling worker.

use crossbeam_deque::{Steal, Stealer};

use crate::job::JobRef;
use crate::shared_state::SharedState;

/// One task from the deque of a worker the kernel marked descheduled, and
/// that worker's index: the first marked worker with stealable work from
/// `start` on, skipping `me` and workers on a serialized request.
pub(crate) fn mug(
    shared: &SharedState,
    stealers: &[Stealer<JobRef>],
    me: usize,
    start: usize,
) -> Option<(JobRef, usize)> {
    let n = stealers.len();
    for k in 0..n {
        let v = (start + k) % n;
        if v == me || !shared.worker(v).descheduled() {
            continue;
        }
        if shared.tag_serialized(shared.worker(v).current()) {
            continue;
        }
        loop {
            match stealers[v].steal() {
                Steal::Success(j) => return Some((j, v)),
                Steal::Empty => break,
                Steal::Retry => continue,
            }
        }
    }
    None
}
