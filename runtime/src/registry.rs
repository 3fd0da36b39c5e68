//! The registry (a pool's shared state) and the worker threads.
//!
//! # Queues
//!
//! * one LIFO deque per worker (crossbeam-deque): `join`/`spawn` push at the
//!   bottom, the owner pops the bottom, thieves steal the top;
//! * the global FIFO of arrived requests (a crossbeam `Injector`), used by
//!   steal-first, admit-first and tail-control;
//! * one *inbox* per worker (an `Injector`), used only by random admission: a
//!   request lands in a random worker's inbox; the owner and thieves take it;
//! * one *bounce* queue per worker: crossbeam's stealer cannot peek, so a thief
//!   that steals a task of a serialized request returns it to the victim's
//!   bounce queue (and wakes the victim), which only the owner pops. The
//!   victim is always waiting for, or about to pop, that task: it pushed it and
//!   has not left the enclosing `join`/`scope`.
//!
//! # Bookkeeping (tail-control, paper §4 "Implementation")
//!
//! Each worker knows the tag of the request it is on (`current`) and publishes
//! it in its worker slot with the time it started. A request switch happens
//! only when a worker executes a job whose tag differs from `current` (a steal
//! of another request's task, an admission, a return from those, or a wait in
//! which it has nothing to do): it then adds `now − start` to the old
//! request's `work_ns` and restarts the clock. The fast path (`join` popping
//! its own job back) never switches, so it never reads the clock. With
//! bookkeeping off, tags and `current` are still kept (serialization from
//! outside, e.g. the kernel or `serialize_current_request`, still works) but no
//! clock is read and no pileup check runs.

use crate::control::PoolExt;
use crate::job::JobRef;
use crate::mug::mug;
use crate::policy::{check_pileup, Policy};
use crate::priority::{above, highest, OwnDeque, PriorityMode, PriorityState, Taken, LEVELS};
use crate::shared_state::{
    tag_generation, tag_slot, SharedState, NO_REQUEST, WORKER_PARKED, WORKER_STEALING,
    WORKER_WORKING,
};
use crate::shutdown::Shutdown;
use crate::sleep::{Sleep, Slept, MAX_SLEEP};
use crate::threshold::ThresholdTable;
use crate::time::{gettid, now_ns};
use crate::unwind::AbortIfPanic;
use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use crossbeam_utils::CachePadded;
use std::cell::{Cell, OnceCell, RefCell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Pool-wide counters (see `PoolStats`).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) submitted: CachePadded<AtomicU64>,
    pub(crate) completed: CachePadded<AtomicU64>,
    pub(crate) panicked: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) missed_target: AtomicU64,
    pub(crate) steals: CachePadded<AtomicU64>,
    pub(crate) refused_steals: AtomicU64,
    pub(crate) swallowed_panics: AtomicU64,
    /// Tasks taken from deques of workers the kernel marked descheduled (`mug`).
    pub(crate) desched_mugs: AtomicU64,
    /// `sched_yield` calls of searching workers (see `PoolStats::yields`).
    pub(crate) yields: AtomicU64,
    /// Blocking sleeps of searching workers with `top_level` set (see `PoolStats::parks`).
    pub(crate) parks: AtomicU64,
    /// The same inside a join or scope wait (see `PoolStats::join_parks`).
    pub(crate) join_parks: AtomicU64,
}

/// Configuration fixed at build time.
pub(crate) struct Config {
    pub(crate) policy: Policy,
    pub(crate) bookkeeping: bool,
    pub(crate) thresholds: Option<ThresholdTable>,
    pub(crate) target_latency: Option<Duration>,
    pub(crate) spin_rounds: u32,
    pub(crate) shared: SharedState,
    pub(crate) ext: Arc<PoolExt>,
    pub(crate) priority_mode: PriorityMode,
    pub(crate) search_cpu: bool,
}

pub(crate) struct Registry {
    pub(crate) policy: Policy,
    pub(crate) bookkeeping: bool,
    pub(crate) thresholds: Option<ThresholdTable>,
    pub(crate) target_latency: Option<Duration>,
    spin_rounds: u32,
    stealers: Box<[Stealer<JobRef>]>,
    injector: Injector<JobRef>,
    inboxes: Box<[Injector<JobRef>]>,
    bounce: Box<[Injector<JobRef>]>,
    pub(crate) sleep: Sleep,
    pub(crate) shared: SharedState,
    shutdown: Shutdown,
    pub(crate) cancel: AtomicBool,
    pub(crate) counters: Counters,
    /// Abort marks, spawn panic handler, handle gate (see `control`).
    pub(crate) ext: Arc<PoolExt>,
    /// Priority levels 1..63: pools, bitfield, counters (see `priority`).
    pub(crate) prio: PriorityState,
}

impl Registry {
    /// Builds the registry and the workers' deques (to be moved into threads).
    pub(crate) fn new(n: usize, cfg: Config) -> (Arc<Registry>, Vec<Worker<JobRef>>) {
        let workers: Vec<Worker<JobRef>> = (0..n).map(|_| Worker::new_lifo()).collect();
        let reg = Registry {
            policy: cfg.policy,
            bookkeeping: cfg.bookkeeping,
            thresholds: cfg.thresholds,
            target_latency: cfg.target_latency,
            spin_rounds: cfg.spin_rounds,
            stealers: workers.iter().map(|w| w.stealer()).collect(),
            injector: Injector::new(),
            inboxes: (0..n).map(|_| Injector::new()).collect(),
            bounce: (0..n).map(|_| Injector::new()).collect(),
            sleep: Sleep::new(n),
            shared: cfg.shared,
            shutdown: Shutdown::new(),
            cancel: AtomicBool::new(false),
            counters: Counters::default(),
            ext: cfg.ext,
            prio: PriorityState::new(n, cfg.priority_mode, cfg.search_cpu),
        };
        (Arc::new(reg), workers)
    }

    pub(crate) fn num_workers(&self) -> usize {
        self.stealers.len()
    }

    /// Publishes a request's root job according to the policy and wakes a
    /// top-level sleeper.
    pub(crate) fn inject(&self, job: JobRef, level: u8, arrival_ns: u64) {
        // A per-thread sequence (it picks the inbox and the first sleeper
        // to try): a pool-wide counter was one more read-modify-write per
        // request on a line every submitter writes.
        let r = SUBMIT_RNG.with(|c| {
            let seed = match c.get() {
                0 => c as *const Cell<u64> as u64,
                r => r,
            };
            let r = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            c.set(r);
            r
        });
        let r = (r ^ (r >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 32;
        let start = (r as usize) % self.num_workers();
        if level > 0 {
            // Levels above the default: the level's request FIFO (see `priority`).
            self.prio
                .counters
                .submitted_above_default
                .fetch_add(1, Ordering::Relaxed);
            self.prio.push_request(level, job, arrival_ns);
            self.sleep.new_external_work_at(start, level);
            return;
        }
        match self.policy {
            Policy::RandomAdmission => self.inboxes[start].push(job),
            _ => self.injector.push(job),
        }
        self.sleep.new_external_work(start);
    }

    /// Starts shutdown: workers exit once no request is active.
    pub(crate) fn begin_shutdown(&self, cancel: bool) {
        if cancel {
            self.cancel.store(true, Ordering::SeqCst);
        }
        self.shutdown.begin(&self.sleep);
    }

    /// Records an arrival (see `shutdown::Shutdown::arrive`): its id and
    /// tag, or only its id if shutdown has begun (the request is refused).
    pub(crate) fn arrive(&self, arrival_ns: u64) -> Result<(u64, Option<u64>), u64> {
        self.shutdown.arrive(&self.shared, &self.sleep, arrival_ns)
    }

    /// Workers leave their loop when shut down and every request completed
    /// (see `shutdown`: no accepted request slips through).
    fn should_exit(&self) -> bool {
        self.shutdown.should_exit(&self.shared)
    }

    /// Called after a request completed: the last one during shutdown wakes
    /// the sleepers so they can exit.
    pub(crate) fn request_finished(&self) {
        self.shutdown.request_finished(&self.shared, &self.sleep);
    }

    fn victim_serialized(&self, v: usize) -> bool {
        self.shared.tag_serialized(self.shared.worker(v).current())
    }
}

/// Where a job came from; decides the bookkeeping around it.
enum Found {
    Local(JobRef),
    Admitted(JobRef),
    Stolen(JobRef, usize),
    /// A job of priority level ≥ 1 (`stolen`: from another worker's deque).
    Level(JobRef, u8, bool),
}

impl Found {
    fn level(&self) -> u8 {
        match self {
            Found::Level(_, l, _) => *l,
            _ => 0,
        }
    }
}

thread_local! {
    /// The submitting thread's sequence for `Registry::inject`; 0 until
    /// seeded from the slot's address (it differs between live threads).
    static SUBMIT_RNG: Cell<u64> = const { Cell::new(0) };
    static WORKER_THREAD: Cell<*const WorkerThread> = const { Cell::new(std::ptr::null()) };
}

/// A worker's thread-local state.
pub(crate) struct WorkerThread {
    /// The deque of the current priority level (level 0's at first; see
    /// `enter_level`). Only this thread touches it; see `deque`.
    worker: UnsafeCell<Worker<JobRef>>,
    index: usize,
    registry: Arc<Registry>,
    rng: Cell<u64>,
    /// Tag of the request being executed (`NO_REQUEST` if none).
    current: Cell<u64>,
    /// When the worker started on `current` (bookkeeping on only).
    start: Cell<u64>,
    /// Whether `start` is the clock as of now (see `fresh_now`): set when
    /// `execute` switched back after a job or a request's root left its
    /// request with no user code after that (`clock_is_fresh`), cleared
    /// when the worker runs a job or waits (spins, yields, sleeps).
    start_is_now: Cell<bool>,
    /// Scratch map of the pileup check (tag, elapsed), reused to avoid allocation.
    pub(crate) scratch: RefCell<Vec<(u64, u64)>>,
    /// Priority level of the job being executed (0 when idle).
    level: Cell<u8>,
    /// Level of the last job this worker started (for `level_switches`).
    last_level: Cell<u8>,
    /// Own deques of levels 1..63, created on first use (index = level).
    /// While the worker runs level `l`, slot `l` parks the deque of the level
    /// it came from (swapped, see `enter_level`); `shared` never moves.
    deques: Box<[OnceCell<OwnDeque>]>,
}

impl WorkerThread {
    /// The worker running on this thread, or null.
    #[inline]
    pub(crate) fn current() -> *const WorkerThread {
        WORKER_THREAD.with(|w| w.get())
    }

    #[inline]
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A reference to the registry that keeps it alive.
    pub(crate) fn registry_arc(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    #[inline]
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Priority level of the job being executed.
    #[inline]
    pub(crate) fn level(&self) -> u8 {
        self.level.get()
    }

    #[inline]
    pub(crate) fn current_tag(&self) -> u64 {
        self.current.get()
    }

    /// The time for the pileup check before a steal round. A thief that
    /// just switched back from a job of another request (`execute`) has read
    /// the clock a moment ago, with nothing in between but the job's latch
    /// and the search's own steps (no user code, no waiting): that reading
    /// serves the pileup check, a few microseconds stale at most against
    /// thresholds of milliseconds. A thief taking many small tasks read the
    /// clock three times per steal; now twice (`clock_gettime` is about
    /// 30 ns here: a sixth of such a thief's time went to it). The switch to
    /// the next job may reuse the reading too, but only moved up to that
    /// request's arrival (`switch_at`): the old reading as such would charge
    /// a request time from before it arrived (the latch release in between
    /// may wake a thread, and a request submitted meanwhile can be the next
    /// job), which `work_is_accounted_before_a_stolen_task_releases_its_owner`
    /// catches. A request's root that left its request and ran no user code
    /// after that leaves its reading fresh as well (`clock_is_fresh`).
    pub(crate) fn fresh_now(&self) -> u64 {
        if self.start_is_now.get() {
            self.start.get()
        } else {
            now_ns()
        }
    }

    /// The deque of the current level.
    #[inline]
    fn deque(&self) -> &Worker<JobRef> {
        // SAFETY: `worker` is only swapped by `enter_level`/`leave_level`,
        // on this thread, and never while a reference from here is alive:
        // every caller makes one call on it (push, pop, is_empty) that runs
        // no user code and cannot reach a swap. `WorkerThread` is not `Sync`
        // (it holds `Cell`s), so no other thread sees it.
        unsafe { &*self.worker.get() }
    }

    /// Pushes a task of the current request on the own deque (of the
    /// current priority level), then checks the work bitfield: a spawn is a
    /// priority checkpoint (see `priority/README.md`). On level 0 with no
    /// bit set this is one relaxed load more than without priorities (bit 0
    /// is never set, so any bit is a higher level); everything else is out
    /// of line. The current level's deque is always `worker` (swapped in),
    /// so the push itself does not branch on the level.
    #[inline]
    pub(crate) fn push(&self, job: JobRef) {
        self.deque().push(job);
        let reg = &*self.registry;
        reg.sleep.new_internal_work(self.index + 1, || {
            reg.shared.tag_serialized(self.current.get())
        });
        if reg.prio.bits.load() | u64::from(self.level.get()) != 0 {
            self.push_slow();
        }
    }

    /// The rest of `push` at a level ≥ 1 (the deque goes into the level's
    /// pool, sleepers of that level are told) or with a bit set.
    #[cold]
    #[inline(never)]
    fn push_slow(&self) {
        let level = self.level.get();
        if level != 0 {
            let reg = &*self.registry;
            let d = self.own_deque(level);
            reg.prio.after_own_push(level, &d.shared, now_ns);
            reg.sleep
                .new_internal_work_at(self.index + 1, level, || false);
        }
        self.priority_checkpoint();
    }

    fn own_deque(&self, level: u8) -> &OwnDeque {
        debug_assert!(level >= 1);
        self.deques[level as usize].get_or_init(OwnDeque::new)
    }

    /// Makes level `level`'s deque current (parking the current one in
    /// its slot); `leave_level` undoes it. Calls nest like the jobs they
    /// surround.
    fn enter_level(&self, level: u8) {
        let d = self.own_deque(level);
        // SAFETY: see `deque`; `parked` is only touched here and in
        // `leave_level`, on this thread, with no reference to either deque
        // alive (a job runs between the two calls, not during them).
        unsafe { std::ptr::swap(self.worker.get(), d.parked.get()) };
        self.level.set(level);
    }

    fn leave_level(&self, level: u8, prev: u8) {
        let d = self.own_deque(level);
        // SAFETY: as in `enter_level`.
        unsafe { std::ptr::swap(self.worker.get(), d.parked.get()) };
        self.level.set(prev);
    }

    #[inline]
    pub(crate) fn take_local_job(&self) -> Option<JobRef> {
        self.deque().pop()
    }

    /// The priority checkpoint (`join`, scope spawns, `parallel_for` chunks,
    /// parallel iterator blocks, [`yield_to_higher`]): if a level above the
    /// worker's has work, run it now (README, "Moving up").
    #[inline]
    pub(crate) fn priority_checkpoint(&self) {
        let level = self.level.get();
        if self.registry.prio.bits.load() & above(level) != 0 {
            self.move_up(level);
        }
    }

    /// Runs work of levels above `from` until there is none; the own deque
    /// of `from` is left to the level's thieves meanwhile.
    #[cold]
    #[inline(never)]
    fn move_up(&self, from: u8) {
        let reg = &*self.registry;
        // The priority mode's level choice (adaptive: only the assigned level).
        let bits = reg.prio.bits.load() & self.level_mask();
        if bits & above(from) == 0 {
            return;
        }
        // A promptness violation: this worker ran `from` work while
        // higher work waited, since the higher bit was set (at most one
        // checkpoint interval; README, "Counters").
        let set = reg.prio.set_at(highest(bits));
        let c = &reg.prio.counters;
        c.violations.fetch_add(1, Ordering::Relaxed);
        c.violation_ns
            .fetch_add(now_ns().saturating_sub(set), Ordering::Relaxed);
        self.abandon(from);
        // Thieves of `from` may now take its tasks: run the higher work.
        while let Some(found) = self.find_above(from, true, self.level_mask()) {
            if let Some(found) = self.accept(found) {
                self.run_found(found);
            }
        }
        if from > 0 {
            PriorityState::reclaim(&self.own_deque(from).shared);
        }
        // Back down to the frame's level: a switch too.
        if self.last_level.get() != from {
            self.last_level.set(from);
            reg.prio
                .counters
                .level_switches
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Leaves the own deque of `level` to thieves (the mugging queue for
    /// levels ≥ 1; level 0's deques are always stealable) and wakes a
    /// sleeper that can take it.
    fn abandon(&self, level: u8) {
        let reg = &*self.registry;
        // `level` is the current level: its deque is `worker`, whose
        // stealer is level 0's (in `stealers`) or the level's `shared`.
        let has_work = if level == 0 {
            !self.deque().is_empty()
        } else {
            reg.prio
                .abandon(level, &self.own_deque(level).shared, now_ns)
        };
        if has_work {
            reg.sleep
                .new_internal_work_at(self.index + 1, level, || false);
        }
    }

    /// Work of the highest level above `floor` in `mask` that has some
    /// (requests included if `admit`).
    fn find_above(&self, floor: u8, admit: bool, mask: u64) -> Option<Found> {
        let reg = &*self.registry;
        loop {
            let bits = reg.prio.bits.load() & above(floor) & mask;
            if bits == 0 {
                return None;
            }
            let mut b = bits;
            while b != 0 {
                let l = highest(b);
                if let Some(f) = self.take_at(l, admit) {
                    return Some(f);
                }
                b &= !(1u64 << l);
            }
            // Every level we saw was empty (their bits are retired now);
            // look again only if a new bit appeared meanwhile.
            if reg.prio.bits.load() & above(floor) & mask & !bits == 0 {
                return None;
            }
        }
    }

    /// One search of level `l` ≥ 1's pool.
    fn take_at(&self, l: u8, admit: bool) -> Option<Found> {
        let reg = &*self.registry;
        let admit_first = reg.policy == Policy::AdmitFirst;
        match reg.prio.take(l, admit, admit_first)? {
            Taken::Task(j) => Some(Found::Level(j, l, true)),
            Taken::Request(j) => Some(Found::Level(j, l, false)),
        }
    }

    fn next_random(&self) -> usize {
        // xorshift64*: victims only need to be spread, not unpredictable.
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as usize
    }

    /// Moves the worker to request `tag`, flushing the time spent on the
    /// previous one (the paper's per-switch bookkeeping).
    fn switch_to(&self, tag: u64) {
        self.switch_at(tag, false);
    }

    /// [`Self::switch_to`]; with `fresh` (`start` was read since the last
    /// job or wait, see `fresh_now`), the switch into request `tag` reuses
    /// that reading, moved up to the request's arrival if it came later.
    /// A stream of tiny requests read the clock four times per request
    /// (arrival, this switch, the end, the next pileup check); at about
    /// 30 ns a read on this host that was a sixth of a worker's time per
    /// request, and rayon reads it none. The reading is older than the
    /// switch by the search's own steps (a steal round, a queue pop), which
    /// the request is charged for; never by time from before it arrived
    /// (charging that is what `fresh_now` warns about, and what
    /// `work_is_accounted_before_a_stolen_task_releases_its_owner` checks).
    fn switch_at(&self, tag: u64, fresh: bool) {
        let reg = &*self.registry;
        let prev = self.current.get();
        let now = if reg.bookkeeping {
            let now = if fresh && tag != NO_REQUEST {
                // The request is live (this worker is about to run one of
                // its jobs), so the slot is still its own; its arrival was
                // written before the job was published to us.
                let arrival = reg.shared.request(tag_slot(tag)).arrival_ns();
                self.start.get().max(arrival)
            } else {
                now_ns()
            };
            if prev != NO_REQUEST {
                reg.shared
                    .request(tag_slot(prev))
                    .add_work(tag_generation(prev), now.saturating_sub(self.start.get()));
            }
            self.start.set(now);
            now
        } else {
            0
        };
        self.current.set(tag);
        reg.shared.publish(self.index, tag, now);
    }

    /// The request this worker runs the root of ends: charges the time spent
    /// on it and moves to no request (see `run_request`). Returns the time
    /// now (the switch's clock reading when bookkeeping is on, so that the
    /// request's latency costs no second one).
    /// Called by a request's root after it left its request
    /// (`leave_request`) and ran no user code since (no waker, no panic
    /// handler, no result dropped): the reading of that switch is as good
    /// as a new one for the next pileup check and the next switch.
    pub(crate) fn clock_is_fresh(&self) {
        self.start_is_now.set(self.registry.bookkeeping);
    }

    pub(crate) fn leave_request(&self) -> u64 {
        if self.current.get() != NO_REQUEST {
            self.switch_to(NO_REQUEST);
            if self.registry.bookkeeping {
                return self.start.get();
            }
        }
        now_ns()
    }

    /// Executes a job, switching request around it if its tag differs.
    ///
    /// Jobs catch the panics of the user code they run (see `unwind`), so
    /// nothing unwinds out of `job.execute()`; if something did, the caller's
    /// frame (a `join` whose `job_b` a thief holds, a `scope`, the main loop)
    /// would be left unsoundly, so the guard aborts instead.
    #[inline]
    pub(crate) fn execute(&self, job: JobRef) {
        let guard = AbortIfPanic;
        let prev = self.current.get();
        // The job is user code of any length (see `fresh_now`).
        let fresh = self.start_is_now.replace(false);
        let tag = job.tag();
        let release = if tag == prev {
            // SAFETY: every JobRef in our queues is executed exactly once
            // (popped or stolen once from a deque/queue); its data is alive
            // because whoever pushed it waits for its latch (or, for a heap
            // job, owns nothing else). User panics inside are caught by the
            // job itself; anything else unwinding out aborts (the guard).
            unsafe { job.execute() }
        } else {
            self.switch_at(tag, fresh);
            // SAFETY: as above.
            let release = unsafe { job.execute() };
            // Charge the job's time before its latch lets the waiter go on
            // (see `job`, "Accounting before release"). A request's root
            // has left its request already (`leave_request`, before it
            // completed it): there is nothing to charge or publish then.
            if self.current.get() != prev {
                self.switch_to(prev);
                self.start_is_now.set(self.registry.bookkeeping);
            }
            release
        };
        // SAFETY: the job's latch is alive: its owner (a `join` frame, or
        // the `scope`/`scope_fifo` frame that holds the scope) waits for this
        // very signal, also when its own closure panicked or unwound at an
        // abort checkpoint (`join` and `Scope::complete` wait before they
        // resume the unwind), and no unwind can take it past the wait
        // (AbortIfPanic there).
        unsafe { release.set() };
        std::mem::forget(guard);
    }

    /// Counts panics of user destructors and callbacks that a worker caught
    /// and swallowed (see `unwind`).
    pub(crate) fn count_swallowed_panics(&self, n: u64) {
        if n > 0 {
            self.registry
                .counters
                .swallowed_panics
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Checks a stolen task against its request's SERIALIZED bit: a task of a
    /// serialized request goes back to its owner, untouched, and the thief
    /// found nothing. Counting a refusal as "nothing found" matters: a worker
    /// waiting in a join must then go on to search and park, not spin while
    /// still published as working on the request (under scx_tailctl it would
    /// hold the request's only CPU token while the owner waits for it).
    fn accept(&self, found: Found) -> Option<Found> {
        let reg = &*self.registry;
        match found {
            Found::Stolen(job, victim)
                if job.tag() != NO_REQUEST
                    && !reg
                        .shared
                        .request(tag_slot(job.tag()))
                        .try_count_steal(tag_generation(job.tag())) =>
            {
                reg.counters.refused_steals.fetch_add(1, Ordering::Relaxed);
                reg.bounce[victim].push(job);
                reg.sleep.notify_worker(victim);
                None
            }
            other => Some(other),
        }
    }

    fn run_found(&self, found: Found) {
        let reg = &*self.registry;
        let level = found.level();
        let prev_run = reg.prio.run_begin(self.index, level);
        if level != self.last_level.get() {
            self.last_level.set(level);
            reg.prio
                .counters
                .level_switches
                .fetch_add(1, Ordering::Relaxed);
        }
        match found {
            Found::Level(job, level, stolen) => {
                if stolen {
                    reg.counters.steals.fetch_add(1, Ordering::Relaxed);
                }
                let prev = self.level.get();
                if level <= prev {
                    // Same level, or (only while waiting for a lower-level
                    // request, whose floor is lowered) a lower one: the job
                    // inherits the waiter's level and its tasks go to the
                    // current deque. Entered levels thus only increase up
                    // the stack, so a level's deque is always in its slot
                    // when `enter_level` swaps it in.
                    self.execute(job);
                } else {
                    self.enter_level(level);
                    self.execute(job);
                    self.leave_level(level, prev);
                }
            }
            Found::Local(job) | Found::Admitted(job) => self.execute(job),
            Found::Stolen(job, _) => {
                reg.counters.steals.fetch_add(1, Ordering::Relaxed);
                reg.shared.worker(self.index).count_steal();
                self.execute(job);
            }
        }
        reg.prio.run_end(self.index, prev_run);
    }

    fn pop_bounced(&self) -> Option<JobRef> {
        loop {
            match self.registry.bounce[self.index].steal() {
                Steal::Success(j) => return Some(j),
                Steal::Empty => return None,
                Steal::Retry => continue,
            }
        }
    }

    fn admit_from(q: &Injector<JobRef>) -> Option<JobRef> {
        loop {
            match q.steal() {
                Steal::Success(j) => return Some(j),
                Steal::Empty => return None,
                Steal::Retry => continue,
            }
        }
    }

    /// A steal, SAWS's way: first from the deques of workers the kernel keeps
    /// off the CPU for the allotment (see `mug`; only a region a scheduler
    /// maps can carry the flags), then one ordinary steal round.
    fn mug_or_steal(&self, with_inboxes: bool) -> Option<Found> {
        let reg = &*self.registry;
        if reg.shared.is_external() {
            let start = self.next_random() % reg.num_workers();
            if let Some((j, v)) = mug(&reg.shared, &reg.stealers, self.index, start) {
                reg.counters.desched_mugs.fetch_add(1, Ordering::Relaxed);
                return Some(Found::Stolen(j, v));
            }
        }
        self.steal_round(with_inboxes)
    }

    /// One steal round over all other workers, from a random start; returns
    /// on the first success (the listing's `try_random_steal` did not).
    fn steal_round(&self, with_inboxes: bool) -> Option<Found> {
        let reg = &*self.registry;
        let n = reg.num_workers();
        if n <= 1 {
            return None;
        }
        let start = self.next_random() % n;
        loop {
            let mut retry = false;
            for k in 0..n {
                let v = (start + k) % n;
                if v == self.index {
                    continue;
                }
                if !reg.victim_serialized(v) {
                    match reg.stealers[v].steal() {
                        Steal::Success(j) => return Some(Found::Stolen(j, v)),
                        Steal::Retry => retry = true,
                        Steal::Empty => {}
                    }
                }
                if with_inboxes {
                    match reg.inboxes[v].steal() {
                        Steal::Success(j) => return Some(Found::Admitted(j)),
                        Steal::Retry => retry = true,
                        Steal::Empty => {}
                    }
                }
            }
            if !retry {
                return None;
            }
        }
    }

    /// The search order: higher priority levels first (see `priority`),
    /// then, at level 0, the policy's order (see `policy`); a worker waiting
    /// at level `floor` ≥ 1 takes nothing below it.
    fn find_work(&self, top_level: bool, floor: u8) -> Option<Found> {
        let reg = &*self.registry;
        // The levels the priority mode lets this worker take new work from
        // (its own deque and bounce queue are always its own).
        let mask = self.level_mask();
        if reg.prio.bits.load() & above(floor) & mask != 0 {
            // Higher levels' requests are admitted even in a join wait.
            if let Some(f) = self.find_above(floor, true, mask) {
                return Some(f);
            }
        }
        if floor > 0 {
            if let Some(j) = self.deque().pop() {
                return Some(Found::Level(j, floor, false));
            }
            if mask & (1 << floor) == 0 {
                return None;
            }
            return self.take_at(floor, top_level);
        }
        if let Some(j) = self.deque().pop() {
            return Some(Found::Local(j));
        }
        if let Some(j) = self.pop_bounced() {
            return Some(Found::Local(j));
        }
        if mask & 1 == 0 {
            return None;
        }
        let reg = &*self.registry;
        match reg.policy {
            Policy::StealFirst | Policy::TailControl => {
                if reg.policy == Policy::TailControl && reg.bookkeeping {
                    check_pileup(self);
                }
                if let Some(f) = self.mug_or_steal(false) {
                    return Some(f);
                }
                if top_level {
                    return Self::admit_from(&reg.injector).map(Found::Admitted);
                }
                None
            }
            Policy::AdmitFirst => {
                if top_level {
                    if let Some(j) = Self::admit_from(&reg.injector) {
                        return Some(Found::Admitted(j));
                    }
                }
                self.mug_or_steal(false)
            }
            Policy::RandomAdmission => {
                if top_level {
                    if let Some(j) = Self::admit_from(&reg.inboxes[self.index]) {
                        return Some(Found::Admitted(j));
                    }
                }
                self.mug_or_steal(top_level)
            }
        }
    }

    /// SAWS's `Q` as this thief sees it at the end of a search: the tasks in
    /// the other workers' deques it may steal, plus the requests still
    /// waiting for admission (parallelism a thief could take too), published
    /// as the region's `stealable`.
    fn publish_stealable(&self) {
        let reg = &*self.registry;
        let deques: usize = (0..reg.num_workers())
            .filter(|&v| v != self.index && !reg.victim_serialized(v))
            .map(|v| reg.stealers[v].len())
            .sum();
        let backlog = match reg.policy {
            Policy::RandomAdmission => reg.inboxes.iter().map(|q| q.len()).sum(),
            _ => reg.injector.len(),
        };
        let q = deques.saturating_add(backlog).min(u32::MAX as usize) as u32;
        reg.shared.header().set_stealable(q);
        // Over the searches (found + failed), the controller's averaged Q.
        reg.shared.worker(self.index).add_stealable_seen(q);
    }

    /// The priority mode's choice of levels (see `PriorityState::level_mask`).
    #[inline]
    fn level_mask(&self) -> u64 {
        self.registry
            .prio
            .level_mask(self.index, || self.work_below(1).is_some())
    }

    /// Whether another worker's deque holds a task this worker may steal.
    fn stealable_work_visible(&self) -> bool {
        let reg = &*self.registry;
        (0..reg.num_workers())
            .any(|v| v != self.index && !reg.stealers[v].is_empty() && !reg.victim_serialized(v))
    }

    /// Whether any work this worker could take is visible (the sleep re-check).
    fn has_work(&self, top_level: bool, floor: u8) -> bool {
        let reg = &*self.registry;
        if reg.prio.work_above(floor, top_level) {
            return true;
        }
        if floor > 0 {
            return !self.deque().is_empty();
        }
        if !self.deque().is_empty() || !reg.bounce[self.index].is_empty() {
            return true;
        }
        if self.stealable_work_visible() {
            return true;
        }
        if top_level {
            match reg.policy {
                Policy::RandomAdmission => reg.inboxes.iter().any(|q| !q.is_empty()),
                _ => !reg.injector.is_empty(),
            }
        } else {
            false
        }
    }

    /// Leaves the searching state, passing on a wake-up for tasks pushed
    /// while this worker was counted as searching (see `Sleep::stop_searching`).
    fn stop_searching(&self) {
        let reg = &*self.registry;
        reg.sleep.stop_searching_at(self.index + 1, || {
            reg.prio
                .work_at_or_above(1)
                .or_else(|| self.stealable_work_visible().then_some(0))
        });
    }

    /// Work below `floor` that some other worker could take (see
    /// `Sleep::sleep_at`): the highest such level.
    fn work_below(&self, floor: u8) -> Option<u8> {
        let reg = &*self.registry;
        match reg.prio.work_at_or_above(1) {
            Some(l) if l < floor => return Some(l),
            _ => {}
        }
        let level0 = self.stealable_work_visible()
            || match reg.policy {
                Policy::RandomAdmission => reg.inboxes.iter().any(|q| !q.is_empty()),
                _ => !reg.injector.is_empty(),
            };
        level0.then_some(0)
    }

    /// Runs other work until `done()` holds; sleeps when there is none.
    /// `top_level` workers may admit requests (see `policy`), and so may a
    /// worker waiting in a join of a serialized request.
    pub(crate) fn wait_until(&self, done: &dyn Fn() -> bool, top_level: bool) {
        self.wait_until_at(done, top_level, self.level.get());
    }

    /// `wait_until` taking work of priority level `floor` or higher only
    /// (`floor` ≤ the current level; see `priority/README.md`, "Waiting").
    pub(crate) fn wait_until_at(&self, done: &dyn Fn() -> bool, top_level: bool, floor: u8) {
        debug_assert!(floor <= self.level.get());
        if done() {
            return;
        }
        // Our caller's frame may hold a job a thief is running (`join`) or a
        // latch spawns count down (`scope`): never unwind out of here.
        let guard = AbortIfPanic;
        let reg = &*self.registry;
        let slot = reg.shared.worker(self.index);
        let saved = self.current.get();
        let mut searching = false;
        let mut rounds = 0u32;
        // Bounded parks in a row that nobody ended (see below).
        let mut timeouts = 0u32;
        while !done() {
            // The fast path: a task of our own deque (scope spawns, the
            // tasks of a join a thief left), when no higher priority level
            // has work. It is what `find_work` would return first, handled
            // as the generic path below handles `Found::Local` (no search
            // counters, no stealable count), minus the search's set-up:
            // a `scope` with many small spawns spent a third more
            // instructions per spawn here than rayon's loop did.
            if floor == 0 && reg.prio.bits.load() & above(0) == 0 {
                if let Some(job) = self.deque().pop() {
                    if searching {
                        self.stop_searching();
                        searching = false;
                    }
                    if slot.state() != WORKER_WORKING {
                        reg.shared.set_worker_state(self.index, WORKER_WORKING);
                    }
                    if self.last_level.get() != 0 {
                        self.last_level.set(0);
                        reg.prio
                            .counters
                            .level_switches
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.execute(job);
                    rounds = 0;
                    timeouts = 0;
                    continue;
                }
            }
            // A join of a serialized request waits for the request's other
            // thread, which now runs alone: admitting a request here uses a
            // core that would idle, at the cost of delaying the large request
            // (the one tail-control chose to delay). The simulator measured
            // it: `tailctl sim compare --joins blocking --split adaptive
            // --admit-in-serialized-joins` (tools/RESULTS.md §3).
            let admits = top_level || (saved != NO_REQUEST && reg.shared.tag_serialized(saved));
            let found = self.find_work(admits, floor).and_then(|f| self.accept(f));
            // SAWS's u: searches (a worker out of local work) that found work
            // by stealing or admission, against those that found nothing.
            match &found {
                Some(Found::Stolen(..) | Found::Admitted(_) | Found::Level(..)) => {
                    slot.count_found_work()
                }
                Some(Found::Local(_)) => {}
                None => slot.count_failed_steal(),
            }
            if !matches!(found, Some(Found::Local(_))) {
                self.publish_stealable();
            }
            if let Some(found) = found {
                if searching {
                    self.stop_searching();
                    reg.prio.search_end(self.index);
                    searching = false;
                }
                // The kernel charges a thread to its request only while the
                // region says WORKING: a job found without a search (a
                // worker's first, when the region starts it at STEALING, or
                // after a re-registration re-initialised the region) sets it
                // too, not only the end of a search. A load of our own slot.
                if slot.state() != WORKER_WORKING {
                    reg.shared.set_worker_state(self.index, WORKER_WORKING);
                }
                self.run_found(found);
                rounds = 0;
                timeouts = 0;
                continue;
            }
            // Spinning, yielding and sleeping take time: the next pileup
            // check reads the clock.
            self.start_is_now.set(false);
            if !searching {
                searching = true;
                reg.prio.search_begin(self.index);
                reg.sleep.start_searching();
                reg.shared.set_worker_state(self.index, WORKER_STEALING);
                // Waiting is not work on the request (paper: curr_request = NULL).
                if self.current.get() != NO_REQUEST {
                    self.switch_to(NO_REQUEST);
                }
            }
            rounds += 1;
            if rounds < reg.spin_rounds {
                // A few rounds of pure spinning, then yields: spinning
                // workers that never yield keep a thread waiting for a
                // request's result off the cores (sleep/README.md, "States").
                if rounds < reg.spin_rounds / 8 {
                    for _ in 0..16 {
                        std::hint::spin_loop();
                    }
                } else {
                    reg.counters.yields.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                }
                continue;
            }
            reg.shared.set_worker_state(self.index, WORKER_PARKED);
            // The park is bounded as a safety net (sleep/README.md,
            // "Bounded park"); parks that ran out with nothing to do double
            // the bound, up to 8x, so an idle pool wakes a few times a
            // second, not 20 times per worker.
            let limit = MAX_SLEEP * (1 << timeouts.min(3));
            let slept = reg.sleep.sleep_bounded(
                self.index,
                admits,
                floor,
                limit,
                || done() || self.has_work(admits, floor),
                || self.work_below(floor),
            );
            reg.shared.set_worker_state(self.index, WORKER_STEALING);
            // Counted only when it really blocked (a re-check that found work
            // or a wake-up passed on did not), and a join's apart: it waits
            // for a thief to finish the other half, which the kernel may be
            // holding off the CPU.
            if matches!(slept, Ok(Slept::Woken | Slept::TimedOut)) {
                let c = if top_level {
                    &reg.counters.parks
                } else {
                    &reg.counters.join_parks
                };
                c.fetch_add(1, Ordering::Relaxed);
            }
            match slept {
                Err(level) => {
                    // Work below our floor that we may not take: pass the
                    // wake-up on to a sleeper that may (see `Sleep::sleep_at`).
                    reg.sleep.wake_for(self.index + 1, level);
                    rounds = 0;
                }
                Ok(Slept::TimedOut) => {
                    // Nobody woke us: search once, and park again if that
                    // finds nothing, rather than spinning all rounds again.
                    timeouts = timeouts.saturating_add(1);
                    rounds = reg.spin_rounds.saturating_sub(1);
                }
                Ok(Slept::No | Slept::Woken) => {
                    timeouts = 0;
                    rounds = 0;
                }
            }
        }
        if searching {
            self.stop_searching();
            reg.prio.search_end(self.index);
        }
        if slot.state() != WORKER_WORKING {
            reg.shared.set_worker_state(self.index, WORKER_WORKING);
        }
        if self.current.get() != saved {
            self.switch_to(saved);
        }
        std::mem::forget(guard);
    }
}

/// Runs, on the calling worker, any work of a priority level above the
/// level of the job it is running that waits now, then returns (a
/// checkpoint, as at every `join`, scope spawn, `parallel_for` chunk and
/// parallel iterator block). Long sequential loops inside a request can call
/// it to bound how long higher-level work waits for this worker. Outside a
/// pool it does nothing.
///
/// ```
/// use tailctl_rt::{yield_to_higher, Pool, Priority};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let sum = pool
///     .submit(|| {
///         let mut s = 0u64;
///         for i in 0..10_000u64 {
///             if i % 1_000 == 0 {
///                 yield_to_higher(); // a level-5 request may run here
///             }
///             s += i;
///         }
///         s
///     })
///     .wait()
///     .unwrap();
/// assert_eq!(sum, 49_995_000);
/// let _ = pool.submit_with_priority(Priority::new(5).unwrap(), || ()).wait();
/// ```
#[inline]
pub fn yield_to_higher() {
    let wt = WorkerThread::current();
    if !wt.is_null() {
        // SAFETY: non-null pointers from `current` are live workers of this
        // thread (the pointer is cleared before the worker is dropped).
        unsafe { &*wt }.priority_checkpoint();
    }
}

/// Body of a worker thread.
pub(crate) fn main_loop(worker: Worker<JobRef>, index: usize, registry: Arc<Registry>) {
    let wt = WorkerThread {
        worker: UnsafeCell::new(worker),
        index,
        rng: Cell::new(0x853c_49e6_748f_ea9b ^ ((index as u64 + 1) << 17)),
        current: Cell::new(NO_REQUEST),
        start: Cell::new(0),
        start_is_now: Cell::new(false),
        scratch: RefCell::new(Vec::with_capacity(registry.num_workers())),
        level: Cell::new(0),
        last_level: Cell::new(0),
        deques: (0..LEVELS).map(|_| OnceCell::new()).collect(),
        registry,
    };
    wt.registry.shared.worker(index).set_tid(gettid());
    WORKER_THREAD.with(|w| w.set(&wt));
    // A worker that died would strand the tasks in its deque (and the
    // requests waiting for them): abort rather than unwind (see `unwind`).
    let guard = AbortIfPanic;
    let reg = Arc::clone(&wt.registry);
    wt.wait_until(&|| reg.should_exit(), true);
    std::mem::forget(guard);
    WORKER_THREAD.with(|w| w.set(std::ptr::null()));
}
