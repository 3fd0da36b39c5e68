//! Shutdown: when workers may leave, and why no accepted request is stranded.
//!
//! A pool shuts down in three steps: the flag is set (`Pool::close`,
//! `shutdown`, drop), every sleeping worker is woken, and each worker leaves
//! its loop once the flag is set *and* no request is active (arrived, not
//! completed). A submitter counts its request active (`alloc_request`)
//! *before* it checks the flag, and refuses the request if the flag is set.
//!
//! Why no request is accepted and then left without a worker: a worker leaves
//! only after reading the flag set and then `active == 0`; a submitter
//! accepts only after counting itself active and then reading the flag
//! unset. A `SeqCst` fence sits between the two steps on each side. If the
//! submitter's fence comes first (in the fences' total order), the worker's
//! count read sees the submitter's increment and stays. If the worker's
//! comes first, the worker had read the flag set (from the store in
//! `begin`), so the submitter's flag read, after its own fence, sees it set
//! too, and it refuses. (With `SeqCst` accesses alone the argument holds in
//! the C++ model too, but loom checks fences, not `SeqCst` accesses, as in
//! `sleep/README.md`; the worker's fence is only taken once the flag is set.)
//!
//! The last request to complete during shutdown wakes every sleeper
//! (`request_finished`), since a sleeping worker only re-checks on a wake-up
//! (the bounded park aside). Loom: `no_accepted_request_is_stranded`.

use crate::shared_state::SharedState;
use crate::sleep::Sleep;
use crate::sync::{fence, AtomicBool};
use std::sync::atomic::Ordering::SeqCst;

/// The shutdown flag and the rules around it (module doc).
pub(crate) struct Shutdown {
    flag: AtomicBool,
}

impl Shutdown {
    pub(crate) fn new() -> Self {
        Shutdown {
            flag: AtomicBool::new(false),
        }
    }

    /// Whether shutdown has begun.
    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(SeqCst)
    }

    /// Sets the flag and wakes every sleeping worker so it re-checks.
    pub(crate) fn begin(&self, sleep: &Sleep) {
        self.flag.store(true, SeqCst);
        sleep.notify_all();
    }

    /// The submit side: counts a request arrived (active) and, unless
    /// shutdown has begun, returns its id and tag (`alloc_request`). If it
    /// has begun, the request is counted completed again and only its id is
    /// returned (`Err`): it must not be queued.
    pub(crate) fn arrive(
        &self,
        shared: &SharedState,
        sleep: &Sleep,
        arrival_ns: u64,
    ) -> Result<(u64, Option<u64>), u64> {
        let (id, tag) = shared.alloc_request(arrival_ns);
        fence(SeqCst);
        if !self.is_set() {
            return Ok((id, tag));
        }
        match tag {
            Some(t) => shared.free_request(t),
            None => shared.complete_untracked(),
        }
        self.request_finished(shared, sleep);
        Err(id)
    }

    /// The worker side: whether a worker may leave its loop.
    pub(crate) fn should_exit(&self, shared: &SharedState) -> bool {
        if !self.is_set() {
            return false;
        }
        fence(SeqCst);
        shared.header().active() == 0
    }

    /// After a request completed: the last one during shutdown wakes the
    /// sleepers so they can leave.
    pub(crate) fn request_finished(&self, shared: &SharedState, sleep: &Sleep) {
        if self.should_exit(shared) {
            sleep.notify_all();
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::AtomicU64;
    use loom::sync::Arc;

    /// A request submitted while the pool shuts down is either refused or
    /// run: the worker (in the shape of `wait_until` at top level, with
    /// `should_exit` as its condition) never leaves with an accepted request
    /// still queued, and never sleeps forever (loom reports a deadlock).
    #[test]
    fn no_accepted_request_is_stranded() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let shared = Arc::new(SharedState::new(1));
            let sleep = Arc::new(Sleep::new(1));
            let sd = Arc::new(Shutdown::new());
            // The global queue: one slot, tag + 1 (0: empty).
            let queue = Arc::new(AtomicU64::new(0));

            let (sh, sl, s, q) = (shared.clone(), sleep.clone(), sd.clone(), queue.clone());
            let submitter = loom::thread::spawn(move || match s.arrive(&sh, &sl, 0) {
                Ok((_, tag)) => {
                    q.store(tag.unwrap() + 1, SeqCst);
                    sl.new_external_work(0);
                    true
                }
                Err(_) => false,
            });

            let (sh, sl, s, q) = (shared.clone(), sleep.clone(), sd.clone(), queue.clone());
            let worker = loom::thread::spawn(move || {
                sl.start_searching();
                loop {
                    let job = q.load(SeqCst);
                    if job != 0 {
                        q.store(0, SeqCst);
                        sh.free_request(job - 1); // the request ran
                        s.request_finished(&sh, &sl);
                        continue;
                    }
                    if s.should_exit(&sh) {
                        break;
                    }
                    sl.sleep(0, true, || s.should_exit(&sh) || q.load(SeqCst) != 0);
                }
                sl.stop_searching(0, || false);
            });

            sd.begin(&sleep);
            let accepted = submitter.join().unwrap();
            worker.join().unwrap();
            assert_eq!(queue.load(SeqCst), 0, "an accepted request was stranded");
            assert_eq!(shared.header().active(), 0);
            // Run or refused, it completed exactly once.
            assert_eq!(shared.header().completed(), 1);
            let _ = accepted;
        });
    }
}
