//! Scheduling policies: what a worker does when its own deque is empty.
//!
//! | policy | order of the search |
//! |---|---|
//! | [`Policy::StealFirst`] | steal round; admit from the global FIFO only if nothing was stealable |
//! | [`Policy::AdmitFirst`] | admit from the global FIFO; steal only if it is empty |
//! | [`Policy::TailControl`] | steal-first, preceded by the pileup check that marks large requests serialized |
//! | [`Policy::RandomAdmission`] | no FIFO: a request is pushed to a random worker's inbox, which the owner and thieves take from like any task (default TBB) |
//!
//! Every policy first pops its own deque (newest first) and then its *bounce*
//! queue (tasks of serialized requests that a thief took and returned, see
//! `registry`). Only a worker at top level admits a request: a worker blocked
//! in a `join` steals tasks but never starts a whole new request on its stack,
//! which would hold up the blocked request for a request's whole run time.
//! The exception is a join of a *serialized* request: holding that request up
//! is what serialization decided, and the worker would otherwise idle while
//! the request's one remaining thread runs. The simulator measures it
//! (`--joins blocking --split adaptive --admit-in-serialized-joins`, the
//! paper's heavy load, seeds 1–3): with one loop per request it cuts
//! tail-control's loss against steal-first from 36% to 16% on average; with
//! two loops, where tail-control wins, the difference is within seed noise.
//!
//! # The pileup check (tail-control)
//!
//! Before each steal round a tail-control thief reads the active-request count
//! `q`, looks up the threshold `l(q)` and, for every request some worker is on,
//! computes `work_ns + Σ (now − start_ns)` over the workers on it (Figure 5b of
//! the paper). Requests over `l(q)` are marked serialized. Reads are lock-free
//! and may be stale, as in the paper. Serialization is lazy: the request's
//! workers keep running their local tasks; thieves no longer take them. Fixes
//! to the printed listing: a steal round returns as soon as one steal succeeds,
//! and thieves skip victims whose current request is serialized (and return
//! any serialized task they still get to its owner).

use crate::registry::WorkerThread;
use crate::shared_state::{tag_generation, NO_REQUEST};

/// Which work a worker looks for first when it runs out of local work.
///
/// ```
/// use tailctl_rt::{Policy, Pool};
/// let pool = Pool::builder().workers(2).policy(Policy::AdmitFirst).build().unwrap();
/// assert_eq!(pool.policy(), Policy::AdmitFirst);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Steal first; admit a new request only when nothing is stealable.
    StealFirst,
    /// Admit a new request first; steal only when none is waiting.
    AdmitFirst,
    /// Steal-first plus serialization of large requests (Li et al., PPoPP'16).
    TailControl,
    /// No global queue: each request goes to a random worker (default TBB).
    RandomAdmission,
}

impl Policy {
    /// All policies, for experiments that sweep them.
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Policy::ALL.len(), 4);
    /// ```
    pub const ALL: [Policy; 4] = [
        Policy::StealFirst,
        Policy::AdmitFirst,
        Policy::TailControl,
        Policy::RandomAdmission,
    ];

    /// Short name: `sf`, `af`, `tc`, `tbb`.
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Policy::TailControl.name(), "tc");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Policy::StealFirst => "sf",
            Policy::AdmitFirst => "af",
            Policy::TailControl => "tc",
            Policy::RandomAdmission => "tbb",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;

    /// Parses `sf`/`steal-first`, `af`/`admit-first`, `tc`/`tail-control`,
    /// `tbb`/`random`.
    ///
    /// ```
    /// let p: tailctl_rt::Policy = "tail-control".parse().unwrap();
    /// assert_eq!(p, tailctl_rt::Policy::TailControl);
    /// assert!("nope".parse::<tailctl_rt::Policy>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "sf" | "steal-first" | "steal_first" => Ok(Policy::StealFirst),
            "af" | "admit-first" | "admit_first" => Ok(Policy::AdmitFirst),
            "tc" | "tail-control" | "tail_control" => Ok(Policy::TailControl),
            "tbb" | "random" | "random-admission" | "random_admission" => {
                Ok(Policy::RandomAdmission)
            }
            other => Err(format!(
                "unknown policy {other:?} (expected sf, af, tc or tbb)"
            )),
        }
    }
}

impl std::fmt::Display for Policy {
    /// ```
    /// assert_eq!(tailctl_rt::Policy::StealFirst.to_string(), "sf");
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `check_pileup_phase` (paper, Figure 5b), run by a thief before it steals.
pub(crate) fn check_pileup(wt: &WorkerThread) {
    let reg = wt.registry();
    let Some(table) = reg.thresholds.as_ref() else {
        return;
    };
    let shared = &reg.shared;
    // Registered with scx_tailctl: the kernel decides on real CPU time and
    // sets the SERIALIZED bit itself; the wall-clock figure would overcount.
    if shared.kernel_decides() {
        return;
    }
    let active = shared.header().active() as usize;
    let Some(threshold) = table.lookup(active) else {
        return; // never serialize at this load
    };
    let threshold = threshold.as_nanos().min(u64::MAX as u128) as u64;
    // The clock is read only once some worker is seen on a request: a pool
    // serving tiny requests mostly finds every other worker searching, and
    // `clock_gettime` was the largest single item of the submit benchmark's
    // profile (13% of its samples, with a read per steal round).
    let mut now = None;
    let mut acc = wt.scratch.borrow_mut();
    acc.clear();
    for i in 0..reg.num_workers() {
        // One consistent pair (a seqlock, see `shared_state`): a tag read with
        // the start of a later publish would count the time since the worker
        // left that request as work on it. A worker whose pair kept changing
        // while we read is skipped (this is a hint, as everything here).
        let Some((tag, start)) = shared.worker_snapshot(i) else {
            continue;
        };
        if tag == NO_REQUEST {
            continue;
        }
        let now = *now.get_or_insert_with(|| wt.fresh_now());
        let elapsed = now.saturating_sub(start);
        match acc.iter_mut().find(|e| e.0 == tag) {
            Some(e) => e.1 += elapsed,
            None => acc.push((tag, elapsed)),
        }
    }
    for &(tag, elapsed) in acc.iter() {
        // Tags come from the region (the process can scribble on it): one
        // naming no slot is skipped.
        let Some(q) = shared.tag_request(tag) else {
            continue;
        };
        if q.generation() != tag_generation(tag) || q.is_serialized(tag_generation(tag)) {
            continue;
        }
        if q.work_ns().saturating_add(elapsed) > threshold {
            shared.runtime_mark(tag);
        }
    }
}
