//! Idle workers: searching, sleeping and waking.
//!
//! The protocol (and why it cannot lose a wake-up that matters) is explained in
//! `sleep/README.md` next to this file; the comments here point at its steps.

use crate::sync::{fence, lock, wait_timeout, AtomicBool, AtomicU64, Condvar, Mutex};

/// Longest a parked worker sleeps before it looks for work by itself.
const MAX_SLEEP: std::time::Duration = std::time::Duration::from_millis(50);
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

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
}

/// The pool's sleep state: counters plus one sleeping place per worker.
pub(crate) struct Sleep {
    counters: CachePadded<AtomicU64>,
    workers: Box<[CachePadded<WorkerSleep>]>,
}

impl Sleep {
    pub(crate) fn new(n: usize) -> Self {
        Sleep {
            counters: CachePadded::new(AtomicU64::new(0)),
            workers: (0..n)
                .map(|_| {
                    CachePadded::new(WorkerSleep {
                        blocked: Mutex::new(false),
                        cond: Condvar::new(),
                        hint: AtomicBool::new(false),
                        top_level: AtomicBool::new(false),
                    })
                })
                .collect(),
        }
    }

    /// A worker ran out of work and starts searching.
    pub(crate) fn start_searching(&self) {
        self.counters.fetch_add(SEARCHING_ONE, SeqCst);
    }

    /// A searching worker found work.
    pub(crate) fn stop_searching(&self) {
        self.counters.fetch_sub(SEARCHING_ONE, SeqCst);
    }

    /// Puts searching worker `i` to sleep unless `has_work()` holds after it
    /// registered as sleeping (README, "Going to sleep"). Returns whether it
    /// actually slept. The worker is counted as searching again on return.
    pub(crate) fn sleep(&self, i: usize, top_level: bool, has_work: impl Fn() -> bool) -> bool {
        let w = &self.workers[i];
        let mut blocked = lock(&w.blocked);
        // Step 1.
        *blocked = true;
        w.top_level.store(top_level, SeqCst);
        w.hint.store(true, SeqCst);
        // Step 2: searching -> sleeping in one RMW.
        self.counters
            .fetch_add(SLEEPING_ONE.wrapping_sub(SEARCHING_ONE), SeqCst);
        fence(SeqCst);
        // Step 3.
        if has_work() {
            *blocked = false;
            w.hint.store(false, SeqCst);
            self.counters
                .fetch_add(SEARCHING_ONE.wrapping_sub(SLEEPING_ONE), SeqCst);
            return false;
        }
        // Step 4: the waker clears `blocked` and fixes the counters. The
        // wait is bounded: should a wake-up ever be lost, the worker wakes
        // itself within MAX_SLEEP and looks for work again, so a request can
        // be delayed but never stranded (20 wake-ups a second cost well under
        // 0.1% of a core per idle worker).
        while *blocked {
            let (g, timed_out) = wait_timeout(&w.cond, blocked, MAX_SLEEP);
            blocked = g;
            if timed_out && *blocked {
                *blocked = false;
                w.hint.store(false, SeqCst);
                self.counters
                    .fetch_add(SEARCHING_ONE.wrapping_sub(SLEEPING_ONE), SeqCst);
            }
        }
        true
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

    fn wake_one(&self, start: usize, need_top_level: bool) -> bool {
        let n = self.workers.len();
        for k in 0..n {
            let i = (start + k) % n;
            let w = &self.workers[i];
            if w.hint.load(SeqCst) && (!need_top_level || w.top_level.load(SeqCst)) && self.wake(i)
            {
                return true;
            }
        }
        false
    }

    /// A request (or other work only top-level workers take) was published.
    pub(crate) fn new_external_work(&self, start: usize) {
        fence(SeqCst);
        if sleeping(self.counters.load(SeqCst)) > 0 {
            self.wake_one(start, true);
        }
    }

    /// A task was pushed on a worker's own deque (README, "Internal work").
    /// `pointless` tells whether nobody could steal it anyway; only evaluated
    /// when a wake-up is being considered.
    #[inline]
    pub(crate) fn new_internal_work(&self, start: usize, pointless: impl FnOnce() -> bool) {
        let c = self.counters.load(Relaxed);
        if sleeping(c) > 0 && searching(c) == 0 && !pointless() {
            self.wake_one(start, false);
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

    /// A request published to a pool whose only worker is going to sleep is
    /// always seen: the worker ends, never blocks forever.
    #[test]
    fn external_work_is_never_lost() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(1));
            let work = Arc::new(AtomicBool::new(false));
            let (s2, w2) = (sleep.clone(), work.clone());
            let worker = loom::thread::spawn(move || {
                s2.start_searching();
                while !w2.load(SeqCst) {
                    s2.sleep(0, true, || w2.load(SeqCst));
                }
                s2.stop_searching();
            });
            work.store(true, SeqCst);
            sleep.new_external_work(0);
            worker.join().unwrap();
            assert_eq!(sleep.sleeping_workers(), 0);
        });
    }

    /// A join latch set by a thief always wakes its owner.
    #[test]
    fn targeted_wake_is_never_lost() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let latch = Arc::new(AtomicBool::new(false));
            let (s2, l2) = (sleep.clone(), latch.clone());
            let owner = loom::thread::spawn(move || {
                s2.start_searching();
                while !l2.load(SeqCst) {
                    s2.sleep(1, false, || l2.load(SeqCst));
                }
                s2.stop_searching();
            });
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
            let (s2, w2) = (sleep.clone(), work.clone());
            let top = loom::thread::spawn(move || {
                s2.start_searching();
                while !w2.load(SeqCst) {
                    s2.sleep(0, true, || w2.load(SeqCst));
                }
                s2.stop_searching();
            });
            let (s3, l3) = (sleep.clone(), latch.clone());
            let in_join = loom::thread::spawn(move || {
                s3.start_searching();
                while !l3.load(SeqCst) {
                    s3.sleep(1, false, || l3.load(SeqCst));
                }
                s3.stop_searching();
            });
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
                d2.complete(1u8);
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
            sleep.stop_searching();
            assert_eq!(done.wait(), 1);
            completer.join().unwrap();
        });
    }
}
