//! The adaptive, quantum-based priority scheduler: the baseline Prompt
//! I-Cilk (Singer et al., SPAA'23) compares itself against ("adaptive
//! I-Cilk", after Muller et al., PLDI'20), selected with
//! `PoolBuilder::priority_mode(PriorityMode::Adaptive { quantum })`.
//!
//! # Design
//!
//! Every worker is *assigned* to at most one level and takes new work only
//! from that level: the level-choice hook (`Registry`'s `find_work`,
//! `find_above` and the checkpoint) asks [`Adaptive::mask`] which levels the
//! worker may search, and the answer is one bit (or none). Its own deque and
//! its bounce queue stay allowed (they continue the frame it is in), and a
//! job once started runs to its end: assignments change what a worker
//! *picks*, never what it runs.
//!
//! Every `quantum` a central allocator reassigns the workers. It is not a
//! thread: the first worker that looks for work (or reaches a checkpoint)
//! after the quantum expired runs it, under a `try_lock` (others keep their
//! assignment meanwhile). It follows A-Steal (Agrawal et al., PPoPP'06), one
//! "job" per level:
//!
//! * a level's **waste** in the quantum is the wall time the workers acting
//!   at it spent looking for work (searching, spinning, asleep);
//! * it is **active** if it has queued work now, if some job of it was
//!   picked during the quantum, or if a worker is running one now;
//! * its **desire** `d`: 0 if not active; 1 if it just became active;
//!   halved (at least 1) if it was *inefficient* (waste above `1 − δ` of its
//!   allotment × quantum, δ = 0.8); doubled (at most the number of workers)
//!   if it was efficient and *satisfied* (got all it desired); unchanged if
//!   efficient but deprived;
//! * **allotments** go highest level first: `a = min(d, workers left)`.
//!   Workers left over after every desire is met are assigned to no level
//!   (A-Steal gives a job no more than it desires) and only spin until the
//!   next quantum.
//!
//! Workers keep their level when its allotment still has room (no needless
//! moves); the other slots go to idle workers first, then to busy ones (a
//! busy worker moves at its next checkpoint or when its job ends).
//!
//! What this costs is the point of the comparison: a level's workers look
//! for work even when it has none (until the quantum ends and its desire
//! drops), work that arrives at a level with no worker waits for the next
//! quantum, and a level's allotment follows its load only within a few
//! quanta. Prompt mode has none of that (and no parameter).
//!
//! # Liveness
//!
//! A worker never *sleeps* while work it could take without its assignment
//! exists (the sleep re-check is the prompt one, see `priority/README.md`):
//! it spins, and so reaches the next quantum, where a level with queued work
//! is active and gets at least one worker unless higher levels take them
//! all — i.e. unless higher-priority work keeps every worker busy, which is
//! the priority order, not a lost request. A worker woken for work it is not
//! assigned to therefore spins until the reallocation, the waste the paper
//! measures. A worker whose allotment was taken while it waits in a join at
//! level `l` still pops its own deque (its frame's tasks) and its thieves
//! finish what they took, so no join waits for a worker that cannot run.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};
use std::sync::Mutex;
use std::time::Duration;

use super::LEVELS;

/// "No level": the assignment of a worker left over by the allocator, and the
/// running level of a worker that runs nothing.
pub(crate) const NONE: u8 = u8::MAX;

/// δ of A-Steal, in percent: a level is efficient when its waste is at most
/// `100 − DELTA_PCT` percent of its allotment × quantum.
const DELTA_PCT: u64 = 80;

/// The allocator's state between quanta (under its lock).
struct Alloc {
    desire: [u32; LEVELS],
    allot: [u32; LEVELS],
}

/// Per-worker state, written by its worker (except `assigned`, written by
/// the allocator, and `search_since`, advanced by the allocator with a CAS).
struct Slot {
    /// The level the allocator assigned (`NONE`: none).
    assigned: AtomicU8,
    /// The level the worker acts at (its copy of `assigned`, refreshed when
    /// it picks work; its waste is charged to this level).
    acting: AtomicU8,
    /// When the current search began (ns, wall clock; 0: not searching).
    search_since: AtomicU64,
    /// Level of the job the worker runs (`NONE`: none).
    running: AtomicU8,
}

/// The adaptive scheduler's shared state (see the module docs).
pub(crate) struct Adaptive {
    quantum_ns: u64,
    /// When the current quantum began (ns).
    quantum_start: AtomicU64,
    alloc: Mutex<Alloc>,
    slots: Box<[Slot]>,
    /// Waste per level in the current quantum (ns).
    waste: Box<[AtomicU64]>,
    /// A job of the level was picked in the current quantum.
    picked: Box<[AtomicBool]>,
    /// Published allotment per level (for `Pool::allotment`).
    allot: Box<[AtomicU8]>,
    pub(crate) reallocations: AtomicU64,
}

impl Adaptive {
    pub(crate) fn new(workers: usize, quantum: Duration) -> Self {
        let quantum_ns = (quantum.as_nanos() as u64).max(1);
        Adaptive {
            quantum_ns,
            // The first search reallocates at once.
            quantum_start: AtomicU64::new(0),
            alloc: Mutex::new(Alloc {
                desire: [0; LEVELS],
                allot: [0; LEVELS],
            }),
            slots: (0..workers)
                .map(|_| Slot {
                    assigned: AtomicU8::new(NONE),
                    acting: AtomicU8::new(NONE),
                    search_since: AtomicU64::new(0),
                    running: AtomicU8::new(NONE),
                })
                .collect(),
            waste: (0..LEVELS).map(|_| AtomicU64::new(0)).collect(),
            picked: (0..LEVELS).map(|_| AtomicBool::new(false)).collect(),
            allot: (0..LEVELS).map(|_| AtomicU8::new(0)).collect(),
            reallocations: AtomicU64::new(0),
        }
    }

    pub(crate) fn quantum(&self) -> Duration {
        Duration::from_nanos(self.quantum_ns)
    }

    /// The level-choice hook: the levels worker `w` may take new work from
    /// (one bit, or none), after running the allocator if the quantum
    /// expired. `queued(l)`: whether level `l` has queued work now (a hint).
    pub(crate) fn mask(&self, w: usize, now: u64, queued: impl Fn(u8) -> bool) -> u64 {
        if now.saturating_sub(self.quantum_start.load(Relaxed)) >= self.quantum_ns {
            self.reallocate(now, queued);
        }
        let s = &self.slots[w];
        let a = s.assigned.load(Relaxed);
        if s.acting.load(Relaxed) != a {
            // Charge the search so far to the level we were acting at.
            self.flush(w, now);
            s.acting.store(a, Relaxed);
        }
        if a == NONE {
            0
        } else {
            1u64 << a
        }
    }

    /// The level worker `w` acts at (`NONE`: none).
    pub(crate) fn acting(&self, w: usize) -> u8 {
        self.slots[w].acting.load(Relaxed)
    }

    /// Worker `w` starts looking for work.
    pub(crate) fn search_begin(&self, w: usize, now: u64) {
        self.slots[w].search_since.store(now.max(1), SeqCst);
    }

    /// Worker `w` found work (or leaves): its search is waste of its level.
    pub(crate) fn search_end(&self, w: usize, now: u64) {
        let s = &self.slots[w];
        let since = s.search_since.swap(0, SeqCst);
        self.charge(s.acting.load(Relaxed), since, now);
    }

    /// Charges the search of `w` up to `now` and keeps it going.
    fn flush(&self, w: usize, now: u64) {
        let s = &self.slots[w];
        let since = s.search_since.load(SeqCst);
        if since != 0
            && s.search_since
                .compare_exchange(since, now.max(1), SeqCst, SeqCst)
                .is_ok()
        {
            self.charge(s.acting.load(Relaxed), since, now);
        }
    }

    fn charge(&self, level: u8, since: u64, now: u64) {
        if since != 0 && level != NONE {
            self.waste[level as usize].fetch_add(now.saturating_sub(since), Relaxed);
        }
    }

    /// Worker `w` starts a job of `level` it picked; returns what to give
    /// [`Self::run_end`].
    pub(crate) fn run_begin(&self, w: usize, level: u8) -> u8 {
        let p = &self.picked[level as usize];
        if !p.load(Relaxed) {
            p.store(true, Relaxed);
        }
        self.slots[w].running.swap(level, Relaxed)
    }

    /// The job of [`Self::run_begin`] ended.
    pub(crate) fn run_end(&self, w: usize, prev: u8) {
        self.slots[w].running.store(prev, Relaxed);
    }

    /// The allotment of each level (number of workers), as last computed.
    pub(crate) fn allotment(&self) -> Vec<usize> {
        self.allot
            .iter()
            .map(|a| a.load(Relaxed) as usize)
            .collect()
    }

    /// The allocator (module docs). Runs at most once per quantum; a worker
    /// that finds it running goes on with its assignment.
    fn reallocate(&self, now: u64, queued: impl Fn(u8) -> bool) {
        let Ok(mut st) = self.alloc.try_lock() else {
            return;
        };
        let start = self.quantum_start.load(Relaxed);
        if now.saturating_sub(start) < self.quantum_ns {
            return; // someone else just did it
        }
        // The first quantum (start 0) has no history: every level counts as
        // having run one quantum.
        let elapsed = if start == 0 {
            self.quantum_ns
        } else {
            now - start
        };
        let n = self.slots.len();
        // Searches in progress count up to now.
        for w in 0..n {
            self.flush(w, now);
        }
        let mut running = [false; LEVELS];
        for s in self.slots.iter() {
            let r = s.running.load(Relaxed);
            if r != NONE && s.search_since.load(SeqCst) == 0 {
                running[r as usize] = true;
            }
        }
        let mut left = n as u32;
        for l in (0..LEVELS).rev() {
            let waste = self.waste[l].swap(0, Relaxed);
            let picked = self.picked[l].swap(false, Relaxed);
            let active = picked || running[l] || queued(l as u8);
            let a = st.allot[l];
            let d = st.desire[l];
            let budget = u64::from(a) * elapsed;
            let efficient = waste * 100 <= budget * (100 - DELTA_PCT);
            let d = if !active {
                0
            } else if d == 0 || a == 0 {
                d.max(1)
            } else if !efficient {
                (d / 2).max(1)
            } else if a >= d {
                (d * 2).min(n as u32)
            } else {
                d
            };
            st.desire[l] = d;
            let a = d.min(left);
            left -= a;
            st.allot[l] = a;
            self.allot[l].store(a as u8, Relaxed);
        }
        // Assign workers: keep those whose level still has room, then fill
        // the rest highest level first, idle workers before busy ones.
        let mut room = st.allot;
        let mut next = vec![NONE; n];
        for (w, s) in self.slots.iter().enumerate() {
            let l = s.assigned.load(Relaxed);
            if l != NONE && room[l as usize] > 0 {
                room[l as usize] -= 1;
                next[w] = l;
            }
        }
        for l in (0..LEVELS).rev() {
            for idle_first in [true, false] {
                for (slot, s) in next.iter_mut().zip(self.slots.iter()) {
                    if room[l] == 0 {
                        break;
                    }
                    let idle = s.search_since.load(SeqCst) != 0;
                    if *slot == NONE && idle == idle_first {
                        *slot = l as u8;
                        room[l] -= 1;
                    }
                }
            }
        }
        for (w, l) in next.into_iter().enumerate() {
            self.slots[w].assigned.store(l, Relaxed);
        }
        self.reallocations.fetch_add(1, Relaxed);
        self.quantum_start.store(now, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adaptive(n: usize) -> Adaptive {
        Adaptive::new(n, Duration::from_nanos(1000))
    }

    #[test]
    fn highest_level_first_and_desires_grow_with_efficiency() {
        let a = adaptive(2);
        // Levels 5 and 1 have queued work: each becomes active with desire 1.
        let m0 = a.mask(0, 10_000, |l| l == 5 || l == 1);
        let m1 = a.mask(1, 10_000, |l| l == 5 || l == 1);
        assert_eq!(m0 | m1, (1 << 5) | (1 << 1));
        assert_eq!(a.allotment()[5], 1);
        assert_eq!(a.allotment()[1], 1);
        // No waste during the next quantum, level 5 still busy: its desire
        // doubles and it takes both workers.
        a.mask(0, 11_000, |l| l == 5 || l == 1);
        assert_eq!(a.allotment()[5], 2);
        assert_eq!(a.allotment()[1], 0);
        assert_eq!(a.mask(0, 11_001, |_| true), 1 << 5);
        assert_eq!(a.mask(1, 11_001, |_| true), 1 << 5);
    }

    #[test]
    fn wasteful_level_shrinks_and_idle_level_loses_its_workers() {
        let a = adaptive(2);
        a.mask(0, 10_000, |l| l == 3);
        a.mask(0, 11_000, |l| l == 3);
        assert_eq!(a.allotment()[3], 2);
        // Both workers search the whole next quantum: inefficient, halved.
        a.search_begin(0, 11_000);
        a.search_begin(1, 11_000);
        a.mask(0, 12_000, |l| l == 3);
        assert_eq!(a.allotment()[3], 1);
        // Nothing queued, nothing picked, nobody running: desire 0.
        a.mask(0, 13_000, |_| false);
        assert_eq!(a.allotment()[3], 0);
        assert_eq!(a.mask(0, 13_001, |_| false), 0);
        assert_eq!(a.mask(1, 13_001, |_| false), 0);
    }

    #[test]
    fn a_running_level_stays_active() {
        let a = adaptive(1);
        a.mask(0, 10_000, |l| l == 2);
        assert_eq!(a.mask(0, 10_001, |_| false), 1 << 2);
        let prev = a.run_begin(0, 2);
        a.mask(0, 11_000, |_| false);
        a.mask(0, 12_000, |_| false);
        assert_eq!(a.allotment()[2], 1);
        a.run_end(0, prev);
        a.mask(0, 13_000, |_| false);
        assert_eq!(a.allotment()[2], 0);
    }
}
