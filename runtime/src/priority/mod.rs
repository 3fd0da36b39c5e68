//! Priority levels (Prompt I-Cilk, Singer et al., SPAA'23): the level pools,
//! the global work bitfield and the counters.
//!
//! The protocol, and why no work and no wake-up is lost, is explained in
//! `priority/README.md` next to this file. In short: level 0 (the default)
//! is the runtime as it was (per-worker deques, the policy's request queue,
//! random stealing); levels 1 to 63 each have a [`LevelPool`] with a
//! *mugging* queue (deques abandoned by workers that moved up, checked
//! first), a *regular* queue of deques with stealable work, and a FIFO of
//! arrived requests. Bit `i` of [`WorkBits`] says "level `i` may have work";
//! it is set after every enqueue and cleared only by a thief that found the
//! level empty, which then re-checks. Workers read the bitfield before every
//! search and at every `join`/scope spawn, and one running below the highest
//! set bit runs the higher work first (on top of its stack, see the README
//! for why a library runtime cannot hand its continuation to another
//! worker).
//!
//! Nothing here is on the path of a pool that only uses level 0 except one
//! relaxed load of the bitfield per checkpoint and per search.
//!
//! Which levels a worker may take work from is the *priority mode*'s
//! choice ([`PriorityMode`]): Prompt I-Cilk's (the default, in this file:
//! every level at or above the frame's floor, highest first) or the
//! adaptive quantum-based scheduler it is compared against (`adaptive.rs`:
//! the one level a central allocator assigned the worker for the current
//! quantum). The registry asks [`PriorityState::level_mask`] at the point
//! where it picks a level; everything else (pools, bitfield, sleeping) is
//! shared.

mod adaptive;

use crate::job::JobRef;
use crate::sync::{lock, AtomicBool, AtomicU64, Mutex};
use crossbeam_deque::{Steal, Stealer, Worker};
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// How workers choose the priority level they take work from
/// (`PoolBuilder::priority_mode`).
///
/// ```
/// use std::time::Duration;
/// use tailctl_rt::priority::PriorityMode;
/// assert_eq!(PriorityMode::default(), PriorityMode::Prompt);
/// let m: PriorityMode = "adaptive:500us".parse().unwrap();
/// assert_eq!(m, PriorityMode::Adaptive { quantum: Duration::from_micros(500) });
/// assert_eq!("prompt".parse::<PriorityMode>().unwrap(), PriorityMode::Prompt);
/// assert!("adaptive:0us".parse::<PriorityMode>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PriorityMode {
    /// Prompt I-Cilk (`priority/README.md`): a worker takes the highest
    /// level with work, at every search and checkpoint; no quantum.
    #[default]
    Prompt,
    /// The adaptive quantum-based scheduler of the paper's comparison
    /// (`priority/adaptive.rs`): every `quantum` an allocator assigns each
    /// worker to at most one level from the levels' measured use of their
    /// workers (A-Steal, highest level first); a worker takes new work only
    /// from its level.
    Adaptive {
        /// How often the workers are reassigned (must not be zero).
        quantum: Duration,
    },
}

impl std::str::FromStr for PriorityMode {
    type Err = String;

    /// `prompt`, or `adaptive:<n>us` / `adaptive:<n>ms`.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "prompt" {
            return Ok(PriorityMode::Prompt);
        }
        let bad = || format!("bad priority mode {s:?} (prompt, adaptive:<n>us, adaptive:<n>ms)");
        let q = s.strip_prefix("adaptive:").ok_or_else(bad)?;
        let quantum = if let Some(us) = q.strip_suffix("us") {
            Duration::from_micros(us.parse().map_err(|_| bad())?)
        } else if let Some(ms) = q.strip_suffix("ms") {
            Duration::from_millis(ms.parse().map_err(|_| bad())?)
        } else {
            return Err(bad());
        };
        if quantum.is_zero() {
            return Err(bad());
        }
        Ok(PriorityMode::Adaptive { quantum })
    }
}

impl std::fmt::Display for PriorityMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PriorityMode::Prompt => f.write_str("prompt"),
            PriorityMode::Adaptive { quantum } => write!(f, "adaptive:{}us", quantum.as_micros()),
        }
    }
}

/// The priority level the calling worker is assigned to by the adaptive
/// scheduler ([`PriorityMode::Adaptive`]) for the current quantum, as it
/// last picked work; `None` outside a pool, in prompt mode, or while the
/// worker is assigned to no level. A job that calls it learns the
/// assignment under which it was picked (the worker refreshes it only when
/// it looks for work or reaches a checkpoint).
///
/// ```
/// use std::time::Duration;
/// use tailctl_rt::priority::{assigned_level, PriorityMode};
/// use tailctl_rt::{Pool, Priority};
/// assert_eq!(assigned_level(), None);
/// let pool = Pool::builder()
///     .workers(1)
///     .priority_mode(PriorityMode::Adaptive { quantum: Duration::from_millis(1) })
///     .build()
///     .unwrap();
/// let p = Priority::new(4).unwrap();
/// assert_eq!(pool.submit_with_priority(p, assigned_level).wait().unwrap(), Some(p));
/// ```
pub fn assigned_level() -> Option<Priority> {
    let wt = crate::registry::WorkerThread::current();
    if wt.is_null() {
        return None;
    }
    // SAFETY: non-null pointers from `current` are live workers of this
    // thread (the pointer is cleared before the worker is dropped).
    let wt = unsafe { &*wt };
    let a = wt.registry().prio.adaptive.as_ref()?.acting(wt.index());
    Priority::new(a)
}

/// Number of priority levels (one bit each in a `u64`).
///
/// ```
/// assert_eq!(tailctl_rt::priority::LEVELS, 64);
/// assert_eq!(tailctl_rt::Priority::HIGHEST.level() as usize, tailctl_rt::priority::LEVELS - 1);
/// ```
pub const LEVELS: usize = 64;

/// A priority level: `0` (the default, lowest) to `63` (highest). A worker
/// never runs work of a level while work of a higher level waits, except
/// until its next checkpoint (`join`, scope spawn, or the end of its task).
///
/// ```
/// use tailctl_rt::Priority;
/// let urgent = Priority::new(7).unwrap();
/// assert!(urgent > Priority::DEFAULT);
/// assert_eq!(urgent.level(), 7);
/// assert_eq!(Priority::new(64), None);
/// assert_eq!("5".parse::<Priority>().unwrap().level(), 5);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(u8);

impl Priority {
    /// The default level (0, the lowest): what `submit` and `spawn` use.
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Priority::DEFAULT.level(), 0);
    /// ```
    pub const DEFAULT: Priority = Priority(0);
    /// The highest level (63).
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Priority::HIGHEST.level(), 63);
    /// ```
    pub const HIGHEST: Priority = Priority(LEVELS as u8 - 1);

    /// Level `level`, if it is below [`LEVELS`].
    ///
    /// ```
    /// assert!(tailctl_rt::Priority::new(63).is_some());
    /// ```
    pub const fn new(level: u8) -> Option<Priority> {
        if (level as usize) < LEVELS {
            Some(Priority(level))
        } else {
            None
        }
    }

    /// The level number.
    ///
    /// ```
    /// assert_eq!(tailctl_rt::Priority::new(3).unwrap().level(), 3);
    /// ```
    pub const fn level(self) -> u8 {
        self.0
    }
}

impl std::str::FromStr for Priority {
    type Err = String;
    /// A level number, `0` to `63`.
    ///
    /// ```
    /// assert!("64".parse::<tailctl_rt::Priority>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse::<u8>()
            .ok()
            .and_then(Priority::new)
            .ok_or_else(|| format!("invalid priority {s:?} (expected 0 to {})", LEVELS - 1))
    }
}

impl std::fmt::Display for Priority {
    /// ```
    /// assert_eq!(tailctl_rt::Priority::new(4).unwrap().to_string(), "4");
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Bits of the levels strictly above `level`.
#[inline]
pub(crate) fn above(level: u8) -> u64 {
    // `level` < 64, so the shift by `level + 1` is at most 64: split it.
    (!0u64 << level) << 1
}

/// The highest set bit of a non-zero `bits`.
#[inline]
pub(crate) fn highest(bits: u64) -> u8 {
    debug_assert!(bits != 0);
    63 - bits.leading_zeros() as u8
}

/// The global work bitfield (README, "The bitfield").
pub(crate) struct WorkBits {
    bits: AtomicU64,
}

impl WorkBits {
    pub(crate) fn new() -> Self {
        WorkBits {
            bits: AtomicU64::new(0),
        }
    }

    /// The current bits (a hint; see the README for what a reader may
    /// conclude from a clear bit).
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.bits.load(Relaxed)
    }

    /// The bits as of a `SeqCst` read (the loom models).
    #[cfg(loom)]
    pub(crate) fn load_seqcst(&self) -> u64 {
        self.bits.load(SeqCst)
    }

    /// Called after work was enqueued at `level` (the enqueue's lock is
    /// released): sets the bit. Returns whether the bit was clear before (the
    /// level went from "no work" to "work", which starts its waiting clock).
    pub(crate) fn announce(&self, level: u8) -> bool {
        let bit = 1u64 << level;
        self.bits.fetch_or(bit, SeqCst) & bit == 0
    }

    /// Called by a thief that found every queue of `level` empty: clears the
    /// bit, then re-checks with `empty()` (which must take the level's
    /// locks). Returns `true` if work appeared in between: the bit is set
    /// again and the thief should look at the level once more.
    pub(crate) fn retire(&self, level: u8, empty: impl Fn() -> bool) -> bool {
        let bit = 1u64 << level;
        self.bits.fetch_and(!bit, SeqCst);
        if empty() {
            return false;
        }
        self.bits.fetch_or(bit, SeqCst);
        true
    }
}

/// A short-locked FIFO (README, "Why locks"). `len` mirrors the length so
/// that the sleep re-check can read it without the lock.
pub(crate) struct Fifo<T> {
    q: Mutex<VecDeque<T>>,
    len: AtomicU64,
}

impl<T> Fifo<T> {
    pub(crate) fn new() -> Self {
        Fifo {
            q: Mutex::new(VecDeque::new()),
            len: AtomicU64::new(0),
        }
    }

    pub(crate) fn push(&self, t: T) {
        let mut q = lock(&self.q);
        q.push_back(t);
        self.len.store(q.len() as u64, SeqCst);
    }

    pub(crate) fn pop(&self) -> Option<T> {
        let mut q = lock(&self.q);
        let t = q.pop_front();
        self.len.store(q.len() as u64, SeqCst);
        t
    }

    /// Empty, as seen under the lock (the bitfield's re-check).
    pub(crate) fn is_empty_locked(&self) -> bool {
        lock(&self.q).is_empty()
    }

    /// Empty, as of the last push or pop (lock-free; the sleep re-check).
    pub(crate) fn looks_empty(&self) -> bool {
        self.len.load(SeqCst) == 0
    }
}

/// The thief-visible half of a worker's deque at a level ≥ 1.
pub(crate) struct LevelDeque {
    pub(crate) stealer: Stealer<JobRef>,
    /// In the level's regular queue (at most once; README, "Deques in the pool").
    in_pool: AtomicBool,
    /// Its owner moved up and left it behind (it is then also in the
    /// mugging queue).
    abandoned: AtomicBool,
}

/// A worker's own deque at a level ≥ 1 (created on first use). While the
/// worker runs this level, `parked` holds the deque of the level it came
/// from (the worker swaps them, see `WorkerThread::enter_level`); `shared`
/// is always this level's.
pub(crate) struct OwnDeque {
    pub(crate) parked: UnsafeCell<Worker<JobRef>>,
    pub(crate) shared: Arc<LevelDeque>,
}

impl OwnDeque {
    pub(crate) fn new() -> Self {
        let worker = Worker::new_lifo();
        let shared = Arc::new(LevelDeque {
            stealer: worker.stealer(),
            in_pool: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
        });
        OwnDeque {
            parked: UnsafeCell::new(worker),
            shared,
        }
    }
}

/// One level's central pool.
pub(crate) struct LevelPool {
    pub(crate) mugging: Fifo<Arc<LevelDeque>>,
    pub(crate) regular: Fifo<Arc<LevelDeque>>,
    pub(crate) requests: Fifo<JobRef>,
}

impl LevelPool {
    fn new() -> Self {
        LevelPool {
            mugging: Fifo::new(),
            regular: Fifo::new(),
            requests: Fifo::new(),
        }
    }

    fn empty_locked(&self) -> bool {
        self.mugging.is_empty_locked()
            && self.regular.is_empty_locked()
            && self.requests.is_empty_locked()
    }

    fn looks_empty(&self) -> bool {
        self.mugging.looks_empty() && self.regular.looks_empty() && self.requests.looks_empty()
    }
}

/// Counters of the priority machinery (see `PoolStats`).
#[derive(Default)]
pub(crate) struct PrioCounters {
    pub(crate) level_switches: AtomicU64,
    pub(crate) muggings: AtomicU64,
    pub(crate) violations: AtomicU64,
    pub(crate) violation_ns: AtomicU64,
    pub(crate) submitted_above_default: AtomicU64,
}

/// What a thief took from a level pool.
pub(crate) enum Taken {
    /// A task stolen from a deque.
    Task(JobRef),
    /// An arrived request's root.
    Request(JobRef),
}

/// The pool-wide priority state.
pub(crate) struct PriorityState {
    pub(crate) bits: CachePadded<WorkBits>,
    levels: Box<[LevelPool]>,
    /// When each level's bit last went from clear to set (ns, `time::now_ns`).
    set_at: Box<[AtomicU64]>,
    pub(crate) counters: PrioCounters,
    /// The adaptive scheduler (`None`: prompt mode).
    pub(crate) adaptive: Option<adaptive::Adaptive>,
    /// Per worker, the thread CPU time at which its current search began
    /// (`None`: search CPU time not measured; see `search_begin`).
    search_cpu_since: Option<Box<[std::sync::atomic::AtomicU64]>>,
    pub(crate) search_cpu_ns: std::sync::atomic::AtomicU64,
}

impl PriorityState {
    /// The state of a pool of `workers` in `mode`; `search_cpu`: measure the
    /// thread CPU time workers spend looking for work.
    pub(crate) fn new(workers: usize, mode: PriorityMode, search_cpu: bool) -> Self {
        PriorityState {
            bits: CachePadded::new(WorkBits::new()),
            levels: (0..LEVELS).map(|_| LevelPool::new()).collect(),
            set_at: (0..LEVELS).map(|_| AtomicU64::new(0)).collect(),
            counters: PrioCounters::default(),
            adaptive: match mode {
                PriorityMode::Prompt => None,
                PriorityMode::Adaptive { quantum } => {
                    Some(adaptive::Adaptive::new(workers, quantum))
                }
            },
            search_cpu_since: search_cpu.then(|| {
                (0..workers)
                    .map(|_| std::sync::atomic::AtomicU64::new(0))
                    .collect()
            }),
            search_cpu_ns: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The mode's level choice: the levels worker `w` may take new work
    /// from (prompt: all; adaptive: its assigned level, or none). `level0`:
    /// whether level 0 has queued or stealable work (the allocator's hint).
    #[inline]
    pub(crate) fn level_mask(&self, w: usize, level0: impl Fn() -> bool) -> u64 {
        match &self.adaptive {
            None => !0,
            Some(ad) => ad.mask(w, crate::time::now_ns(), |l| {
                if l == 0 {
                    level0()
                } else {
                    !self.levels[l as usize].looks_empty()
                }
            }),
        }
    }

    /// Worker `w` found nothing and starts looking for work (waiting in the
    /// search loop, spinning or asleep) until [`Self::search_end`].
    pub(crate) fn search_begin(&self, w: usize) {
        if let Some(since) = &self.search_cpu_since {
            since[w].store(crate::time::thread_cpu_ns(), Relaxed);
        }
        if let Some(ad) = &self.adaptive {
            ad.search_begin(w, crate::time::now_ns());
        }
    }

    /// Worker `w` found work, or leaves its wait.
    pub(crate) fn search_end(&self, w: usize) {
        if let Some(since) = &self.search_cpu_since {
            let d = crate::time::thread_cpu_ns().saturating_sub(since[w].load(Relaxed));
            self.search_cpu_ns.fetch_add(d, Relaxed);
        }
        if let Some(ad) = &self.adaptive {
            ad.search_end(w, crate::time::now_ns());
        }
    }

    /// Worker `w` runs a job of `level` it picked (adaptive: the level is
    /// active); pass the result to [`Self::run_end`].
    #[inline]
    pub(crate) fn run_begin(&self, w: usize, level: u8) -> u8 {
        match &self.adaptive {
            None => 0,
            Some(ad) => ad.run_begin(w, level),
        }
    }

    /// The job of [`Self::run_begin`] ended.
    #[inline]
    pub(crate) fn run_end(&self, w: usize, prev: u8) {
        if let Some(ad) = &self.adaptive {
            ad.run_end(w, prev);
        }
    }

    /// Adaptive mode: the workers assigned to each level (index = level);
    /// empty in prompt mode.
    pub(crate) fn allotment(&self) -> Vec<usize> {
        self.adaptive
            .as_ref()
            .map_or_else(Vec::new, |ad| ad.allotment())
    }

    /// Adaptive mode: its quantum.
    pub(crate) fn mode(&self) -> PriorityMode {
        match &self.adaptive {
            None => PriorityMode::Prompt,
            Some(ad) => PriorityMode::Adaptive {
                quantum: ad.quantum(),
            },
        }
    }

    fn announce(&self, level: u8, now: impl FnOnce() -> u64) {
        if self.bits.announce(level) {
            self.set_at[level as usize].store(now(), Relaxed);
        }
    }

    /// When `level`'s bit was last set.
    pub(crate) fn set_at(&self, level: u8) -> u64 {
        self.set_at[level as usize].load(Relaxed)
    }

    /// Enqueues an arrived request's root at `level` ≥ 1.
    pub(crate) fn push_request(&self, level: u8, job: JobRef, now: u64) {
        debug_assert!(level >= 1);
        self.levels[level as usize].requests.push(job);
        self.announce(level, || now);
    }

    /// The owner pushed onto its deque `d` at `level`: puts `d` in the
    /// regular queue unless it is there already. The fence pairs with the
    /// one in [`Self::release`] (README, "Deques in the pool").
    pub(crate) fn after_own_push(&self, level: u8, d: &Arc<LevelDeque>, now: impl FnOnce() -> u64) {
        crate::sync::fence(SeqCst);
        if !d.in_pool.swap(true, SeqCst) {
            self.levels[level as usize].regular.push(Arc::clone(d));
            self.announce(level, now);
        }
    }

    /// The owner of `d` leaves `level` for a higher one: a non-empty `d`
    /// goes to the mugging queue, checked first by the level's thieves.
    /// Returns whether it did.
    pub(crate) fn abandon(
        &self,
        level: u8,
        d: &Arc<LevelDeque>,
        now: impl FnOnce() -> u64,
    ) -> bool {
        if d.stealer.is_empty() {
            return false;
        }
        d.abandoned.store(true, SeqCst);
        self.levels[level as usize].mugging.push(Arc::clone(d));
        self.announce(level, now);
        true
    }

    /// The owner of `d` is back at its level.
    pub(crate) fn reclaim(d: &LevelDeque) {
        d.abandoned.store(false, SeqCst);
    }

    /// A thief found `d` empty: takes it out of the pool, unless the owner
    /// pushed meanwhile (then it goes back to the regular queue).
    fn release(&self, level: u8, d: Arc<LevelDeque>) {
        d.in_pool.swap(false, SeqCst);
        crate::sync::fence(SeqCst);
        if !d.stealer.is_empty() && !d.in_pool.swap(true, SeqCst) {
            self.levels[level as usize].regular.push(d);
            self.announce(level, crate::time::now_ns);
        }
    }

    /// Steals the top task of the first non-empty deque of `q`.
    /// `regular`: entries of the regular queue (kept in the pool while they
    /// have work); otherwise mugging-queue entries (dropped once empty or
    /// reclaimed, they stay in the regular queue too).
    fn steal_from(&self, level: u8, q: &Fifo<Arc<LevelDeque>>, regular: bool) -> Option<JobRef> {
        while let Some(d) = q.pop() {
            let job = loop {
                match d.stealer.steal() {
                    Steal::Success(j) => break Some(j),
                    Steal::Empty => break None,
                    Steal::Retry => continue,
                }
            };
            let requeue = !d.stealer.is_empty() && (regular || d.abandoned.load(SeqCst));
            if requeue {
                // Still has work: back to the tail (FIFO among deques). An
                // enqueue like any other: the bit is set after it (another
                // thief may have found the queue empty meanwhile, while `d`
                // was out of it, and retired the bit).
                q.push(d);
                self.announce(level, crate::time::now_ns);
            } else if regular {
                self.release(level, d);
            }
            if job.is_some() {
                return job;
            }
        }
        None
    }

    /// Looks for work at `level` ≥ 1: mugging queue, then (per `admit_first`)
    /// requests and regular deques. If the level is empty, retires its bit
    /// (README, "The bitfield") and returns `None`.
    /// Without `admit`, requests are left for others (a worker in a `join`
    /// wait at this level does not start new requests of its own level).
    pub(crate) fn take(&self, level: u8, admit: bool, admit_first: bool) -> Option<Taken> {
        let pool = &self.levels[level as usize];
        loop {
            if let Some(j) = self.steal_from(level, &pool.mugging, false) {
                self.counters.muggings.fetch_add(1, Relaxed);
                return Some(Taken::Task(j));
            }
            if admit && admit_first {
                if let Some(j) = pool.requests.pop() {
                    return Some(Taken::Request(j));
                }
            }
            if let Some(j) = self.steal_from(level, &pool.regular, true) {
                return Some(Taken::Task(j));
            }
            if admit && !admit_first {
                if let Some(j) = pool.requests.pop() {
                    return Some(Taken::Request(j));
                }
            }
            if !admit && !pool.requests.is_empty_locked() {
                // The requests are someone else's to admit: keep the bit.
                return None;
            }
            if !self.bits.retire(level, || pool.empty_locked()) {
                return None;
            }
        }
    }

    /// Whether a worker waiting at `floor` may find work: any queue of a
    /// level above `floor`, or at `floor` ≥ 1 its deques (and its requests
    /// if `admit`). Read without locks (the sleep re-check, after its
    /// `SeqCst` fence).
    pub(crate) fn work_above(&self, floor: u8, admit: bool) -> bool {
        if self.work_at_or_above(floor + 1).is_some() {
            return true;
        }
        if floor == 0 {
            return false;
        }
        let p = &self.levels[floor as usize];
        !p.mugging.looks_empty() || !p.regular.looks_empty() || (admit && !p.requests.looks_empty())
    }

    /// The highest level at or above `floor` (≥ 1) that may hold work, read
    /// without locks (the sleep re-check, after its `SeqCst` fence).
    pub(crate) fn work_at_or_above(&self, floor: u8) -> Option<u8> {
        let floor = (floor.max(1) as usize).min(LEVELS);
        (floor..LEVELS)
            .rev()
            .find(|&l| !self.levels[l].looks_empty())
            .map(|l| l as u8)
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! The bitfield protocol (README, "The bitfield"), on the real
    //! [`WorkBits`] and [`Fifo`]: an enqueuer and a thief that finds the level
    //! empty race; at the end, work in the queue implies its bit is set.

    use super::{Fifo, WorkBits};
    use loom::sync::Arc;
    use loom::thread;

    #[test]
    fn loom_bitfield_never_hides_work() {
        loom::model(|| {
            let bits = Arc::new(WorkBits::new());
            let q = Arc::new(Fifo::<u32>::new());
            let (b1, q1) = (bits.clone(), q.clone());
            let enq = thread::spawn(move || {
                q1.push(1);
                b1.announce(3);
            });
            // The thief: one search of level 3 as `PriorityState::take`
            // does it (pop, else retire and re-check).
            let mut got = 0;
            loop {
                if q.pop().is_some() {
                    got += 1;
                    break;
                }
                if !bits.retire(3, || q.is_empty_locked()) {
                    break;
                }
            }
            enq.join().unwrap();
            let rest = usize::from(!q.is_empty_locked());
            assert_eq!(got + rest, 1, "the item is taken or still queued");
            if rest == 1 {
                assert_ne!(
                    bits.load_seqcst() & (1 << 3),
                    0,
                    "queued work with its bit clear"
                );
            }
        });
    }

    #[test]
    fn loom_two_thieves_and_an_enqueuer() {
        // Two thieves retire the same bit while an item arrives: the bit
        // survives whenever the item does.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let bits = Arc::new(WorkBits::new());
            let q = Arc::new(Fifo::<u32>::new());
            let thief = |bits: Arc<WorkBits>, q: Arc<Fifo<u32>>| {
                move || {
                    let mut got = 0;
                    loop {
                        if q.pop().is_some() {
                            got += 1;
                            break;
                        }
                        if !bits.retire(5, || q.is_empty_locked()) {
                            break;
                        }
                    }
                    got
                }
            };
            let t = thread::spawn(thief(bits.clone(), q.clone()));
            let (b1, q1) = (bits.clone(), q.clone());
            let enq = thread::spawn(move || {
                q1.push(7);
                b1.announce(5);
            });
            let mine = thief(bits.clone(), q.clone())();
            let theirs = t.join().unwrap();
            enq.join().unwrap();
            let rest = usize::from(!q.is_empty_locked());
            assert_eq!(mine + theirs + rest, 1);
            if rest == 1 {
                assert_ne!(bits.load_seqcst() & (1 << 5), 0);
            }
        });
    }
}
