//! Idle workers: searching, sleeping and waking.
//!
//! The protocol (and why it cannot lose a wake-up) is explained in
//! `sleep/README.md` next to this file; the comments here point at its steps.

use crate::sync::{
    fence, lock, wait_timeout, AtomicBool, AtomicU32, AtomicU64, Barriers, Condvar, Mutex,
};

/// Longest a parked worker sleeps before it looks for work by itself: a
/// safety net only, no wake-up is known to be lost (README, "Bounded park").
/// Parks that run out with nobody waking the worker double it, up to 8x.
pub(crate) const MAX_SLEEP: std::time::Duration = std::time::Duration::from_millis(50);

use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// How a call to [`Sleep::sleep_bounded`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    /// The re-check found work: the worker did not block.
    No,
    /// A waker woke it.
    Woken,
    /// Its bounded park ran out with nobody waking it.
    TimedOut,
}

const SLEEPING_ONE: u64 = 1;
const SEARCHING_ONE: u64 = 1 << 32;

fn sleeping(c: u64) -> u32 {
    c as u32
}
fn searching(c: u64) -> u32 {
    (c >> 32) as u32
}

struct WorkerSleep {
    /// True while the worker is (about to be) blocked; guarded by the mutex.
    blocked: Mutex<bool>,
    cond: Condvar,
    /// Lock-free mirror of `blocked`, read by targeted wakers (README, "Waking").
    hint: AtomicBool,
    /// The sleeper can take external work (it sleeps at top level).
    top_level: AtomicBool,
    /// The lowest priority level the sleeper may take (it waits in a `join`
    /// of that level; see `priority/README.md`). 0 for top-level sleepers.
    floor: AtomicU32,
}

/// The pool's sleep state: counters plus one sleeping place per worker.
pub(crate) struct Sleep {
    counters: CachePadded<AtomicU64>,
    workers: Box<[CachePadded<WorkerSleep>]>,
    /// The fences of the internal-work edge (README, "Asymmetric fences").
    barriers: Barriers,
}

impl Sleep {
    pub(crate) fn new(n: usize) -> Self {
        Sleep {
            barriers: Barriers::new(),
            counters: CachePadded::new(AtomicU64::new(0)),
            workers: (0..n)
                .map(|_| {
                    CachePadded::new(WorkerSleep {
                        blocked: Mutex::new(false),
                        cond: Condvar::new(),
                        hint: AtomicBool::new(false),
                        top_level: AtomicBool::new(false),
                        floor: AtomicU32::new(0),
                    })
                })
                .collect(),
        }
    }

    /// A worker ran out of work and starts searching.
    pub(crate) fn start_searching(&self) {
        self.counters.fetch_add(SEARCHING_ONE, SeqCst);
    }

    /// A searching worker stops searching (it found work, or what it waited
    /// for happened). A pusher that saw it searching did not wake anyone
    /// (README, "Internal work"), so the last searcher to leave while others
    /// sleep passes the wake-up on if `work_visible()` shows stealable work.
    /// The fence pairs with the pusher's (Dekker on the counters and the
    /// deques): either the pusher saw this decrement, or this sees the push.
    #[cfg(loom)]
    pub(crate) fn stop_searching(&self, start: usize, work_visible: impl FnOnce() -> bool) {
        self.stop_searching_at(start, || work_visible().then_some(0));
    }

    /// [`Self::stop_searching`] where `work_visible` says the highest
    /// priority level with visible work: only a sleeper that may take work
    /// of that level is woken.
    pub(crate) fn stop_searching_at(
        &self,
        start: usize,
        work_visible: impl FnOnce() -> Option<u8>,
    ) {
        let c = self.counters.fetch_sub(SEARCHING_ONE, SeqCst);
        if searching(c) == 1 && sleeping(c) > 0 {
            // A pusher with only a compiler fence pairs with the heavy side
            // (README, "Asymmetric fences"). Pushers are working workers: if
            // every other worker is searching or asleep now, each one that
            // pushed has since started searching (an RMW after its push) and
            // finds its own task first, so a plain fence does.
            if self.others_idle(c) {
                fence(SeqCst);
            } else {
                self.barriers.heavy();
            }
            if let Some(level) = work_visible() {
                self.wake_one(start, false, level);
            }
        }
    }

    /// Puts searching worker `i` to sleep unless `has_work()` holds after it
    /// registered as sleeping (README, "Going to sleep"). Returns whether it
    /// actually slept. The worker is counted as searching again on return.
    #[cfg(loom)]
    pub(crate) fn sleep(&self, i: usize, top_level: bool, has_work: impl Fn() -> bool) -> bool {
        match self.sleep_at(i, top_level, 0, has_work, || None) {
            Ok(slept) => slept != Slept::No,
            Err(_) => unreachable!("floor 0 never passes a wake-up on"),
        }
    }

    /// [`Self::sleep`] for a worker that may only take work of priority
    /// level `floor` or higher (wakers for lower levels skip it).
    ///
    /// Such a worker may be the searcher a pusher of lower-level work
    /// counted on (README, "Internal work"): if, after it registered,
    /// `lower()` shows work below `floor` and another sleeper could take it,
    /// it does not sleep and returns `Err(level)`; the caller then wakes a
    /// sleeper for that level with [`Self::wake_for`] (outside this lock).
    /// (The workers call [`Self::sleep_bounded`], with their own bound.)
    #[cfg(loom)]
    pub(crate) fn sleep_at(
        &self,
        i: usize,
        top_level: bool,
        floor: u8,
        has_work: impl Fn() -> bool,
        lower: impl Fn() -> Option<u8>,
    ) -> Result<Slept, u8> {
        self.sleep_bounded(i, top_level, floor, MAX_SLEEP, has_work, lower)
    }

    /// [`Self::sleep_at`] with a park of at most `limit` (README, "Bounded
    /// park").
    pub(crate) fn sleep_bounded(
        &self,
        i: usize,
        top_level: bool,
        floor: u8,
        limit: std::time::Duration,
        has_work: impl Fn() -> bool,
        lower: impl Fn() -> Option<u8>,
    ) -> Result<Slept, u8> {
        let w = &self.workers[i];
        let c = {
            let mut blocked = lock(&w.blocked);
            // Step 1.
            *blocked = true;
            w.top_level.store(top_level, SeqCst);
            w.floor.store(u32::from(floor), SeqCst);
            w.hint.store(true, SeqCst);
            // Step 2: searching -> sleeping in one RMW.
            self.counters
                .fetch_add(SLEEPING_ONE.wrapping_sub(SEARCHING_ONE), SeqCst)
        };
        // The lock is not held across the barrier and the re-check (README,
        // "Going to sleep"): a waker that comes meanwhile clears `blocked`
        // and fixes the counters, and step 4 sees it under the lock. Held,
        // it made a submitter block on this mutex for the whole `membarrier`
        // call (the p99 of a tiny request's round trip doubled).
        //
        // The heavy side of the internal-work edge (README, "Asymmetric
        // fences"), unless no other worker is working (then a pusher has
        // searched since its push, see `stop_searching_at`); a `SeqCst`
        // fence for every other edge.
        if self.others_idle(c) {
            fence(SeqCst);
        } else {
            self.barriers.heavy();
        }
        // Step 3.
        let pass_on = if has_work() {
            Some(Ok(Slept::No))
        } else if floor > 0 {
            lower().filter(|&l| self.eligible_sleeper(i, l)).map(Err)
        } else {
            None
        };
        let mut blocked = lock(&w.blocked);
        if let Some(r) = pass_on {
            // Undo steps 1-2, unless a waker already did.
            if *blocked {
                *blocked = false;
                w.hint.store(false, SeqCst);
                self.counters
                    .fetch_add(SEARCHING_ONE.wrapping_sub(SLEEPING_ONE), SeqCst);
            }
            return r;
        }
        // Step 4: the waker clears `blocked` and fixes the counters. The
        // wait is bounded as a safety net (README, "Bounded park"): should a
        // future change lose a wake-up, the worker wakes itself within
        // MAX_SLEEP and looks for work again, so a request can be delayed but
        // never stranded.
        while *blocked {
            let (g, timed_out) = wait_timeout(&w.cond, blocked, limit);
            blocked = g;
            if timed_out && *blocked {
                *blocked = false;
                w.hint.store(false, SeqCst);
                self.counters
                    .fetch_add(SEARCHING_ONE.wrapping_sub(SLEEPING_ONE), SeqCst);
                return Ok(Slept::TimedOut);
            }
        }
        Ok(Slept::Woken)
    }

    /// Whether, by `c` (the counters before an RMW of a searching worker),
    /// every other worker is searching or asleep: none runs a job, so none
    /// can push a task whose push has not been ordered before that RMW by
    /// the pusher's own later RMW (README, "Asymmetric fences").
    fn others_idle(&self, c: u64) -> bool {
        (searching(c) as usize).saturating_sub(1) + sleeping(c) as usize + 1 >= self.workers.len()
    }

    /// Whether a sleeper other than `me` could take work of `level`.
    fn eligible_sleeper(&self, me: usize, level: u8) -> bool {
        self.workers.iter().enumerate().any(|(j, w)| {
            j != me && w.hint.load(SeqCst) && w.floor.load(SeqCst) <= u32::from(level)
        })
    }

    /// Wakes one sleeper that may take work of `level` (see [`Self::sleep_at`]).
    pub(crate) fn wake_for(&self, start: usize, level: u8) {
        fence(SeqCst);
        self.wake_one(start, false, level);
    }

    /// Wakes worker `i` if it sleeps. Returns whether it did.
    fn wake(&self, i: usize) -> bool {
        let w = &self.workers[i];
        let mut blocked = lock(&w.blocked);
        if !*blocked {
            return false;
        }
        *blocked = false;
        w.hint.store(false, SeqCst);
        self.counters
            .fetch_add(SEARCHING_ONE.wrapping_sub(SLEEPING_ONE), SeqCst);
        w.cond.notify_one();
        true
    }

    /// Targeted wake-up: the caller has just published the condition worker
    /// `i` waits for (a latch store, a queue push). The fence pairs with the
    /// sleeper's fence between its hint store and its re-check (Dekker); a
    /// `SeqCst` store alone would do under the C++ model, but fences are what
    /// loom checks, and this runs only when a stolen task finishes.
    pub(crate) fn notify_worker(&self, i: usize) {
        fence(SeqCst);
        if self.workers[i].hint.load(SeqCst) {
            self.wake(i);
        }
    }

    fn wake_one(&self, start: usize, need_top_level: bool, level: u8) -> bool {
        let n = self.workers.len();
        for k in 0..n {
            let i = (start + k) % n;
            let w = &self.workers[i];
            if w.hint.load(SeqCst)
                && (!need_top_level || w.top_level.load(SeqCst))
                && w.floor.load(SeqCst) <= u32::from(level)
                && self.wake(i)
            {
                return true;
            }
        }
        false
    }

    /// A request (or other work only top-level workers take) was published.
    pub(crate) fn new_external_work(&self, start: usize) {
        self.new_external_work_at(start, 0);
    }

    /// A request of priority `level` was published: wakes a top-level
    /// sleeper (top-level sleepers take every level).
    pub(crate) fn new_external_work_at(&self, start: usize, level: u8) {
        fence(SeqCst);
        if sleeping(self.counters.load(SeqCst)) > 0 {
            self.wake_one(start, true, level);
        }
    }

    /// A task was pushed on a worker's own deque (README, "Internal work").
    /// `pointless` tells whether nobody could steal it anyway; only evaluated
    /// when a wake-up is being considered.
    ///
    /// The fence orders the push before the counters load (Dekker with the
    /// sleeper's fence between its counters RMW and its re-check, and with
    /// the last searcher's in `stop_searching`). Without it the load can read
    /// counters from before a worker went to sleep while that worker's
    /// re-check misses the push (store buffering): the task then sits in the
    /// deque with a sleeper next to it, which is how
    /// `join_owner_wakes_after_thief_finishes` hung.
    ///
    /// This is the hot side of the edge (every `join`): its fence is the
    /// light one of [`Barriers`], paired with the heavy one of the sleeper
    /// and the last searcher (README, "Asymmetric fences").
    #[inline]
    pub(crate) fn new_internal_work(&self, start: usize, pointless: impl FnOnce() -> bool) {
        self.barriers.light();
        self.internal_work_fenced(start, 0, pointless);
    }

    /// [`Self::new_internal_work`] for a task of priority `level`: wakes
    /// only a sleeper that may take it.
    #[inline]
    pub(crate) fn new_internal_work_at(
        &self,
        start: usize,
        level: u8,
        pointless: impl FnOnce() -> bool,
    ) {
        fence(SeqCst);
        self.internal_work_fenced(start, level, pointless);
    }

    #[inline]
    fn internal_work_fenced(&self, start: usize, level: u8, pointless: impl FnOnce() -> bool) {
        let c = self.counters.load(Relaxed);
        // `sleeping(c) > 0 && searching(c) == 0`, i.e. `c` in
        // `1..=u32::MAX`, in one compare (this runs on every `join`).
        if c.wrapping_sub(1) < u64::from(u32::MAX) && !pointless() {
            self.wake_one(start, false, level);
        }
    }

    /// Wakes every sleeping worker (shutdown).
    pub(crate) fn notify_all(&self) {
        fence(SeqCst);
        for i in 0..self.workers.len() {
            self.wake(i);
        }
    }

    /// Number of workers asleep right now (statistics, tests).
    pub(crate) fn sleeping_workers(&self) -> u32 {
        sleeping(self.counters.load(SeqCst))
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::Release;

    /// A worker thread in the shape of `wait_until`: it searches, sleeps as
    /// worker `i` (at top level or in a join) until `flag` is set, and leaves.
    fn spawn_sleeper(
        sleep: &Arc<Sleep>,
        i: usize,
        top_level: bool,
        flag: &Arc<AtomicBool>,
    ) -> loom::thread::JoinHandle<()> {
        let (s, f) = (sleep.clone(), flag.clone());
        loom::thread::spawn(move || {
            s.start_searching();
            while !f.load(SeqCst) {
                s.sleep(i, top_level, || f.load(SeqCst));
            }
            s.stop_searching(0, || false);
        })
    }

    /// A request published to a pool whose only worker is going to sleep is
    /// always seen: the worker ends, never blocks forever.
    #[test]
    fn external_work_is_never_lost() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(1));
            let work = Arc::new(AtomicBool::new(false));
            let worker = spawn_sleeper(&sleep, 0, true, &work);
            work.store(true, SeqCst);
            sleep.new_external_work(0);
            worker.join().unwrap();
            assert_eq!(sleep.sleeping_workers(), 0);
        });
    }

    /// A task pushed on a worker's deque (`join`) while the other worker is
    /// going to sleep is seen: the sleeper's re-check finds it or the pusher
    /// wakes the sleeper. Without the pusher's fence, loom finds the lost
    /// wake-up that hung `join_owner_wakes_after_thief_finishes`. (The models
    /// read the work flag with loads: a `swap` mixed with the plain store
    /// trips loom's partial modification order, which lets the swap read a
    /// stale value even after the mutex hand-over of the wake-up.)
    #[test]
    fn internal_work_is_never_lost() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let work = Arc::new(AtomicBool::new(false));
            let thief = spawn_sleeper(&sleep, 0, true, &work);
            // The push (crossbeam's is a release store of the deque's back).
            work.store(true, Release);
            sleep.new_internal_work(0, || false);
            thief.join().unwrap();
        });
    }

    /// A pusher that sees a searcher does not wake anyone; if that searcher
    /// then leaves for other work (or its latch), it must pass the wake-up
    /// on to a sleeper, or the task waits for its pusher (worker 0 sleeps,
    /// worker 1 searches and leaves, worker 2 pushes).
    #[test]
    fn last_searcher_passes_internal_work_on() {
        // Three threads: bound preemptions to keep the model check short.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let sleep = Arc::new(Sleep::new(3));
            let work = Arc::new(AtomicBool::new(false));
            sleep.start_searching();
            sleep.start_searching();
            let (s0, w0) = (sleep.clone(), work.clone());
            let thief = loom::thread::spawn(move || {
                while !w0.load(SeqCst) {
                    s0.sleep(0, true, || w0.load(SeqCst));
                }
                s0.stop_searching(1, || false);
            });
            let (s1, w1) = (sleep.clone(), work.clone());
            let searcher = loom::thread::spawn(move || {
                s1.stop_searching(2, || w1.load(SeqCst));
            });
            work.store(true, Release);
            sleep.new_internal_work(0, || false);
            searcher.join().unwrap();
            thief.join().unwrap();
        });
    }

    /// A join latch set by a thief always wakes its owner.
    #[test]
    fn targeted_wake_is_never_lost() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let latch = Arc::new(AtomicBool::new(false));
            let owner = spawn_sleeper(&sleep, 1, false, &latch);
            latch.store(true, SeqCst);
            sleep.notify_worker(1);
            owner.join().unwrap();
        });
    }

    /// External work is not given to a worker sleeping inside a join: with
    /// a join-sleeper and a top-level sleeper, the request wakes the top-level
    /// one (waking the other would lose it: it only re-checks its latch).
    #[test]
    fn external_work_wakes_a_top_level_sleeper() {
        // Three threads: bound preemptions to keep the model check short.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let sleep = Arc::new(Sleep::new(2));
            let work = Arc::new(AtomicBool::new(false));
            let latch = Arc::new(AtomicBool::new(false));
            let top = spawn_sleeper(&sleep, 0, true, &work);
            let in_join = spawn_sleeper(&sleep, 1, false, &latch);
            work.store(true, SeqCst);
            sleep.new_external_work(1);
            top.join().unwrap();
            latch.store(true, SeqCst);
            sleep.notify_worker(1);
            in_join.join().unwrap();
        });
    }

    /// A worker waiting (and serving) for a request of its own pool is woken
    /// when another worker completes it (`RequestHandle::wait` on a worker).
    #[test]
    fn nested_wait_is_woken_by_completion() {
        use crate::completion::Completion;
        use loom::sync::atomic::AtomicUsize;
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let done = Arc::new(Completion::new());
            let waiter = Arc::new(AtomicUsize::new(0));
            let (s2, d2, w2) = (sleep.clone(), done.clone(), waiter.clone());
            let completer = loom::thread::spawn(move || {
                // SAFETY: the only completion of this latch.
                assert!(!unsafe { d2.complete(1u8) });
                fence(SeqCst);
                if let w @ 1.. = w2.load(SeqCst) {
                    s2.notify_worker(w - 1);
                }
            });
            waiter.store(1, SeqCst);
            sleep.start_searching();
            while !done.is_done() {
                sleep.sleep(0, true, || done.is_done());
            }
            sleep.stop_searching(1, || false);
            assert_eq!(done.wait(), 1);
            completer.join().unwrap();
        });
    }

    /// Priority floors (`priority/README.md`, "Sleeping and waking"): a
    /// pusher of level-0 work sees a searcher counted and wakes nobody, but
    /// that searcher waits in a level-5 join and may not take it. Going to
    /// sleep, it sees the lower work and passes the wake-up on to the
    /// floor-0 sleeper, which always ends (without the pass-on, loom finds
    /// the floor-0 worker blocked forever).
    #[test]
    fn a_high_floor_searcher_passes_lower_work_on() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let sleep = Arc::new(Sleep::new(2));
            let work = Arc::new(AtomicBool::new(false));
            let done = Arc::new(AtomicBool::new(false));
            let (s, w) = (sleep.clone(), work.clone());
            let low = loom::thread::spawn(move || {
                s.start_searching();
                while !w.load(SeqCst) {
                    let _ = s.sleep_at(1, true, 0, || w.load(SeqCst), || None);
                }
                s.stop_searching_at(0, || None);
            });
            let (s, w, d) = (sleep.clone(), work.clone(), done.clone());
            let high = loom::thread::spawn(move || {
                s.start_searching();
                while !d.load(SeqCst) {
                    let lower = || w.load(SeqCst).then_some(0);
                    if let Err(level) = s.sleep_at(0, false, 5, || d.load(SeqCst), lower) {
                        s.wake_for(1, level);
                    }
                }
                s.stop_searching_at(0, || None);
            });
            work.store(true, Release);
            sleep.new_internal_work_at(0, 0, || false);
            low.join().unwrap();
            done.store(true, SeqCst);
            sleep.notify_all();
            high.join().unwrap();
        });
    }
}
