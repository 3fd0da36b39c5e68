//! The bookkeeping table: per-request and per-worker state in fixed-size,
//! `#[repr(C)]` slots of atomics.
//!
//! # Why a table of atomics
//!
//! Tail-control needs, at every steal attempt, each executing request's
//! accumulated work, every worker's current request and start time, and the
//! number of active requests (Li et al., PPoPP'16, Figure 5). The kernel half of
//! tailctl wants exactly the same facts, and will publish one more (the
//! request's *serialized* bit, decided on real CPU time). So all of it lives in
//! one region with a fixed C layout, made only of `u32`/`u64` atomics, that can
//! be backed by heap memory today and by a memory-mapped BPF array map
//! (`BPF_F_MMAPABLE`) later, without changing the runtime: see
//! [`SharedState::from_raw`]. Every value in it is a *hint* for whoever reads
//! it (stale reads are tolerated, as in the paper, where the thief reads these
//! fields without locks).
//!
//! # Layout (little-endian, all offsets in bytes)
//!
//! ```text
//! SharedRegion (size 64 + 64*MAX_WORKERS + 64*MAX_REQUESTS, align 64)
//!   @0      Header
//!   @64     WorkerSlot[MAX_WORKERS]
//!   @64+64*MAX_WORKERS  RequestSlot[MAX_REQUESTS]
//!
//! Header (64 bytes)
//!   @0  u32 magic            REGION_MAGIC
//!   @4  u32 version          REGION_VERSION
//!   @8  u32 worker_count     workers in use (slots 0..worker_count)
//!   @12 u32 request_capacity request slots in use (<= MAX_REQUESTS)
//!   @16 u32 active           requests between arrival (submit) and completion
//!   @20 u32 generation       bumped when the region is (re)attached
//!   @24 u64 next_id          request id allocator
//!   @32 u64 completed        requests completed so far
//!   @40 u64 serialized       requests marked serialized so far
//!   @48 u32 busy_workers     SAWS desire inputs: workers in WORKER_WORKING now
//!   @52 u32 stealable        tasks in the other workers' deques seen by the last thief's
//!                            steal round, plus requests awaiting admission (SAWS's Q)
//!   @56 u32 kernel_serialized [kernel] requests the scheduler serialized
//!   @60 u32 mode             MODE_USER / MODE_KERNEL: who decides serialization
//!
//! WorkerSlot (64 bytes)
//!   @0  u64 current          request tag being worked on: (generation << 32) | slot,
//!                            or NO_REQUEST (u64::MAX)
//!   @8  u64 start_ns         CLOCK_MONOTONIC time the worker started on `current`
//!   @16 u32 tid              kernel thread id of the worker
//!   @20 u32 state            WORKER_WORKING / WORKER_STEALING / WORKER_PARKED
//!   @24 u64 steals           tasks this worker stole (statistics)
//!   @32 u64 kernel_work_ns   [kernel] CPU time charged to this worker's requests
//!   @40 u64 failed_steals    searches for work (steal, admit) that found nothing } SAWS's
//!   @48 u64 found_work       searches that found work (stolen or admitted)     } u
//!   @56 u32 descheduled      [kernel] 1 while the scheduler keeps the worker off the CPU
//!                            for its job's allotment: others mug its deque first (`mug`)
//!   @60 u32 stealable_seen   sum (wrapping) of the `stealable` counts its searches
//!                            published: SAWS's Q averaged over searches
//!
//! RequestSlot (64 bytes)
//!   @0  u64 id               request id (never reused)
//!   @8  u32 flags            FLAG_SERIALIZED, ...        } one u64 `gen_flags`,
//!   @12 u32 generation       bumped each time the slot   } so that a mark is a single
//!                            is freed                    } compare-and-swap on both
//!   @16 u64 work_ns          accumulated work, flushed when a worker switches request
//!   @24 u64 arrival_ns       CLOCK_MONOTONIC arrival time
//!   @32 u32 state            REQ_FREE / REQ_QUEUED / REQ_RUNNING
//!   @36 u32 steals           tasks of this request executed by thieves
//!   @40 u32 steals_at_serialize  `steals` when the runtime marked it (u32::MAX: not marked
//!                            by the runtime)
//!   @44 u32 kernel_running   [kernel] threads running it, last counted (capped or serialized)
//!   @48 u64 kernel_work_ns   [kernel] CPU time the scheduler charged to the request
//!   @56 u32 kernel_alloc     [kernel] cap on running threads (0: none)
//!   @60 u32 reserved
//!
//! This layout is `struct tailctl_region` in `bpf/intf.h`, the one definition;
//! scx_tailctl's tests compare the two field by field.
//! ```
//!
//! # Protocols
//!
//! * **Slot allocation**: a submitter claims a free slot with a CAS on `state`
//!   (`REQ_FREE -> REQ_QUEUED`), then resets the counters. On completion the
//!   slot's generation is bumped (clearing the flags) *before* `state` returns
//!   to `REQ_FREE`, so a stale tag (from a worker slot read a moment too early)
//!   no longer matches: marks and work updates against it fail or are dropped.
//! * **Serialization**: whoever decides (the runtime's pileup check today, the
//!   kernel later) sets `FLAG_SERIALIZED` with a CAS on `gen_flags` that
//!   expects the tag's generation, so a mark can never land on a reused slot.
//!   The runtime only *reads* the bit.
//! * **Worker slots** (`current`, `start_ns`): the pileup check needs the pair
//!   as one value (a tag with the start of a *later* publish counts the time
//!   since the worker left that request as work on it), and no atomic holds
//!   two `u64`s. So the pair is a seqlock, with the sequence counter outside
//!   the region (runtime-private: the kernel reads `current` alone). The
//!   worker, sole writer of its slot, makes the counter odd, fences
//!   (`Release`), stores both fields, and makes it even again (`Release`); a
//!   reader loads the counter (`Acquire`), both fields, fences (`Acquire`)
//!   and loads the counter again, and keeps the pair only if the counter was
//!   even and unchanged (Boehm, "Can seqlocks get along with programming
//!   language memory models?", 2012: if a field load saw a store of a later
//!   publish, the fences order that publish's odd store before the second
//!   load). All fields are atomics, so a torn read is a retry, never a data
//!   race; after a few retries the reader skips the worker (a hint). Loom:
//!   `worker_snapshot_is_consistent`.
//! * **Steals after the mark**: a thief increments `steals` *before* reading the
//!   flag, and undoes the increment if the flag is set; the runtime's marker
//!   snapshots `steals` *after* setting the flag. A `SeqCst` fence sits
//!   between the two steps on each side (Dekker: either the snapshot sees the
//!   increment or the thief sees the flag); fences rather than `SeqCst`
//!   accesses carry the argument, as in `sleep/README.md`, because loom
//!   models fences but treats `SeqCst` accesses as acquire/release. Hence,
//!   for a finished request, `steals <= steals_at_serialize`: no task was
//!   stolen after the mark. The tests assert exactly that; loom:
//!   `steal_vs_serialize`.
//! * **Slot reuse**: a stale tag can still be around when its slot is reused
//!   (a worker slot read by the pileup check a moment too early). Marks are
//!   keyed by the generation (above). Work is never added to a completed
//!   request: a worker adds its time before it releases the latch the request
//!   waits for (`job`, "Accounting before release"; loom:
//!   `accounting_before_release`). The mark's steal snapshot is a plain `u32`
//!   that cannot be keyed: the marker writes it only into an unset snapshot
//!   (compare-and-swap from `u32::MAX`, the value `alloc_request` resets it
//!   to) and takes it back if, after writing, the generation has moved on.
//!   The next request thus never reports the old request's snapshot as its
//!   own (loom: `a_late_mark_does_not_touch_the_next_request`). What can
//!   still happen, in a window of a few instructions, is that a request is
//!   serialized yet reports no snapshot (`None`), never a wrong one; and a
//!   request that is not serialized never reports one (`run_request`).

// Loom's atomics under `--cfg loom`, so the models run this very code (with a
// tiny table: see MAX_WORKERS and MAX_REQUESTS).
use crate::sync::{fence, AtomicU32, AtomicU64};
use crossbeam_utils::CachePadded;
#[cfg(not(loom))]
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Number of worker slots in a region.
///
/// ```
/// assert!(tailctl_rt::shared_state::MAX_WORKERS >= 2);
/// ```
#[cfg(not(loom))]
pub const MAX_WORKERS: usize = 64;
/// Under loom: a table small enough to model-check.
#[cfg(loom)]
pub const MAX_WORKERS: usize = 2;

/// Number of request slots in a region. Requests beyond this many active at
/// once run untracked (never serialized), rather than being refused.
///
/// ```
/// assert!(tailctl_rt::shared_state::MAX_REQUESTS >= 64);
/// ```
#[cfg(not(loom))]
pub const MAX_REQUESTS: usize = 1024;
/// Under loom: a table small enough to model-check.
#[cfg(loom)]
pub const MAX_REQUESTS: usize = 2;

/// `Header::magic` of an initialised region ("TCRT").
///
/// ```
/// let s = tailctl_rt::shared_state::SharedState::new(2);
/// assert_eq!(s.header().magic(), tailctl_rt::shared_state::REGION_MAGIC);
/// ```
pub const REGION_MAGIC: u32 = 0x5452_4354;

/// `Header::version` of this layout.
///
/// ```
/// let s = tailctl_rt::shared_state::SharedState::new(2);
/// assert_eq!(s.header().version(), tailctl_rt::shared_state::REGION_VERSION);
/// ```
pub const REGION_VERSION: u32 = 1;

/// `WorkerSlot::current` when the worker is on no request.
///
/// ```
/// let s = tailctl_rt::shared_state::SharedState::new(1);
/// assert_eq!(s.worker(0).current(), tailctl_rt::shared_state::NO_REQUEST);
/// ```
pub const NO_REQUEST: u64 = u64::MAX;

/// Request flag: the request is not stealable (serialized).
///
/// ```
/// assert_eq!(tailctl_rt::shared_state::FLAG_SERIALIZED, 1);
/// ```
pub const FLAG_SERIALIZED: u32 = 1;

/// `Header::mode`: the runtime decides serialization (its own wall-clock figure).
///
/// ```
/// let s = tailctl_rt::shared_state::SharedState::new(1);
/// assert_eq!(s.header().mode(), tailctl_rt::shared_state::MODE_USER);
/// ```
pub const MODE_USER: u32 = 0;
/// `Header::mode`: registered with scx_tailctl; the kernel decides on CPU time.
///
/// ```
/// let s = tailctl_rt::shared_state::SharedState::new(1);
/// s.set_kernel_decides(true);
/// assert_eq!(s.header().mode(), tailctl_rt::shared_state::MODE_KERNEL);
/// ```
pub const MODE_KERNEL: u32 = 1;

/// Worker state: executing a task.
///
/// ```
/// assert_ne!(tailctl_rt::shared_state::WORKER_WORKING, tailctl_rt::shared_state::WORKER_PARKED);
/// ```
pub const WORKER_WORKING: u32 = 0;
/// Worker state: looking for work (stealing or admitting).
///
/// ```
/// assert_eq!(tailctl_rt::shared_state::WORKER_STEALING, 1);
/// ```
pub const WORKER_STEALING: u32 = 1;
/// Worker state: asleep, waiting to be woken.
///
/// ```
/// assert_eq!(tailctl_rt::shared_state::WORKER_PARKED, 2);
/// ```
pub const WORKER_PARKED: u32 = 2;

/// Request state: slot unused.
///
/// ```
/// assert_eq!(tailctl_rt::shared_state::REQ_FREE, 0);
/// ```
pub const REQ_FREE: u32 = 0;
/// Request state: arrived, not yet admitted.
///
/// ```
/// assert_eq!(tailctl_rt::shared_state::REQ_QUEUED, 1);
/// ```
pub const REQ_QUEUED: u32 = 1;
/// Request state: admitted, executing.
///
/// ```
/// assert_eq!(tailctl_rt::shared_state::REQ_RUNNING, 2);
/// ```
pub const REQ_RUNNING: u32 = 2;

/// The region header.
///
/// ```
/// let s = tailctl_rt::shared_state::SharedState::new(3);
/// assert_eq!(s.header().worker_count(), 3);
/// assert_eq!(s.header().active(), 0);
/// ```
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Header {
    magic: AtomicU32,
    version: AtomicU32,
    worker_count: AtomicU32,
    request_capacity: AtomicU32,
    active: AtomicU32,
    generation: AtomicU32,
    next_id: AtomicU64,
    completed: AtomicU64,
    serialized: AtomicU64,
    busy_workers: AtomicU32,
    stealable: AtomicU32,
    kernel_serialized: AtomicU32,
    mode: AtomicU32,
}

impl Header {
    /// Who decides serialization: [`MODE_USER`] or [`MODE_KERNEL`].
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().mode(), tailctl_rt::shared_state::MODE_USER);
    /// ```
    pub fn mode(&self) -> u32 {
        self.mode.load(Ordering::Acquire)
    }

    /// Requests the kernel serialized (written by scx_tailctl).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().kernel_serialized(), 0);
    /// ```
    pub fn kernel_serialized(&self) -> u32 {
        self.kernel_serialized.load(Ordering::Relaxed)
    }

    /// Workers in [`WORKER_WORKING`] now (SAWS's busy count; see
    /// [`SharedState::set_worker_state`]).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(2);
    /// assert_eq!(s.header().busy_workers(), 0);
    /// ```
    pub fn busy_workers(&self) -> u32 {
        self.busy_workers.load(Ordering::Relaxed)
    }

    /// Tasks in the other workers' deques that the last thief's steal round saw (SAWS's `Q`).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(2);
    /// assert_eq!(s.header().stealable(), 0);
    /// ```
    pub fn stealable(&self) -> u32 {
        self.stealable.load(Ordering::Relaxed)
    }

    /// Publishes `n` (a store only when it changed: spinning thieves call this
    /// often and the header's line is shared with the submit counters).
    pub(crate) fn set_stealable(&self, n: u32) {
        if self.stealable.load(Ordering::Relaxed) != n {
            self.stealable.store(n, Ordering::Relaxed);
        }
    }

    /// The magic number ([`REGION_MAGIC`] once initialised).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().magic(), tailctl_rt::shared_state::REGION_MAGIC);
    /// ```
    pub fn magic(&self) -> u32 {
        self.magic.load(Ordering::Relaxed)
    }
    /// The layout version.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().version(), 1);
    /// ```
    pub fn version(&self) -> u32 {
        self.version.load(Ordering::Relaxed)
    }
    /// Number of worker slots in use.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(4);
    /// assert_eq!(s.header().worker_count(), 4);
    /// ```
    pub fn worker_count(&self) -> u32 {
        self.worker_count.load(Ordering::Relaxed)
    }
    /// Number of request slots in use.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().request_capacity() as usize, tailctl_rt::shared_state::MAX_REQUESTS);
    /// ```
    pub fn request_capacity(&self) -> u32 {
        self.request_capacity.load(Ordering::Relaxed)
    }
    /// Active requests: arrived and not yet completed (the paper's `q_t`).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().active(), 0);
    /// ```
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::SeqCst)
    }
    /// Generation of the region (bumped when it is re-attached).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().generation(), 1);
    /// ```
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Relaxed)
    }
    /// Requests completed since the region was initialised.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().completed(), 0);
    /// ```
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }
    /// Requests marked serialized since the region was initialised.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().serialized(), 0);
    /// ```
    pub fn serialized(&self) -> u64 {
        self.serialized.load(Ordering::Relaxed)
    }
}

/// One worker's published state.
///
/// ```
/// use tailctl_rt::shared_state::{SharedState, NO_REQUEST, WORKER_STEALING};
/// let s = SharedState::new(1);
/// let w = s.worker(0);
/// assert_eq!(w.current(), NO_REQUEST);
/// assert_eq!(w.state(), WORKER_STEALING);
/// ```
#[repr(C, align(64))]
#[derive(Debug)]
pub struct WorkerSlot {
    current: AtomicU64,
    start_ns: AtomicU64,
    tid: AtomicU32,
    state: AtomicU32,
    steals: AtomicU64,
    kernel_work_ns: AtomicU64,
    failed_steals: AtomicU64,
    found_work: AtomicU64,
    descheduled: AtomicU32,
    stealable_seen: AtomicU32,
}

impl WorkerSlot {
    /// CPU time the scheduler charged to this worker's requests (0 without scx_tailctl).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).kernel_work_ns(), 0);
    /// ```
    pub fn kernel_work_ns(&self) -> u64 {
        self.kernel_work_ns.load(Ordering::Relaxed)
    }

    /// Tag of the request the worker is on, or [`NO_REQUEST`].
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).current(), tailctl_rt::shared_state::NO_REQUEST);
    /// ```
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }
    /// When (CLOCK_MONOTONIC ns) the worker started on [`current`](Self::current).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).start_ns(), 0);
    /// ```
    pub fn start_ns(&self) -> u64 {
        self.start_ns.load(Ordering::Relaxed)
    }
    /// Kernel thread id (0 until the worker started).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).tid(), 0);
    /// ```
    pub fn tid(&self) -> u32 {
        self.tid.load(Ordering::Relaxed)
    }
    /// One of [`WORKER_WORKING`], [`WORKER_STEALING`], [`WORKER_PARKED`].
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).state(), tailctl_rt::shared_state::WORKER_STEALING);
    /// ```
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Relaxed)
    }
    /// Tasks this worker has stolen.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).steals(), 0);
    /// ```
    pub fn steals(&self) -> u64 {
        self.steals.load(Ordering::Relaxed)
    }

    pub(crate) fn set_tid(&self, tid: u32) {
        self.tid.store(tid, Ordering::Relaxed);
    }
    pub(crate) fn count_steal(&self) {
        self.steals.fetch_add(1, Ordering::Relaxed);
    }
    /// Searches for work (steal round, then admission) of this worker that found nothing.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).failed_steals(), 0);
    /// ```
    pub fn failed_steals(&self) -> u64 {
        self.failed_steals.load(Ordering::Relaxed)
    }
    /// Searches for work of this worker that found a task (stolen or admitted).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).found_work(), 0);
    /// ```
    pub fn found_work(&self) -> u64 {
        self.found_work.load(Ordering::Relaxed)
    }
    pub(crate) fn count_failed_steal(&self) {
        self.failed_steals.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_found_work(&self) {
        self.found_work.fetch_add(1, Ordering::Relaxed);
    }
    /// Whether the scheduler marked this worker descheduled: kept off the CPU
    /// to honour its job's allotment (written by the kernel only; a hint).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert!(!s.worker(0).descheduled());
    /// ```
    pub fn descheduled(&self) -> bool {
        self.descheduled.load(Ordering::Relaxed) != 0
    }
    /// Sum (wrapping) of the `stealable` counts this worker's searches
    /// published: over the searches (`found_work + failed_steals`), SAWS's
    /// averaged `Q`.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.worker(0).stealable_seen(), 0);
    /// ```
    pub fn stealable_seen(&self) -> u32 {
        self.stealable_seen.load(Ordering::Relaxed)
    }
    pub(crate) fn add_stealable_seen(&self, q: u32) {
        // Own slot, sole writer: a load and a store, no read-modify-write.
        let v = self.stealable_seen.load(Ordering::Relaxed);
        self.stealable_seen
            .store(v.wrapping_add(q), Ordering::Relaxed);
    }
}

/// One request's published state.
///
/// ```
/// use tailctl_rt::shared_state::{SharedState, REQ_FREE};
/// let s = SharedState::new(1);
/// assert_eq!(s.request(0).state(), REQ_FREE);
/// ```
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RequestSlot {
    id: AtomicU64,
    gen_flags: AtomicU64,
    work_ns: AtomicU64,
    arrival_ns: AtomicU64,
    state: AtomicU32,
    steals: AtomicU32,
    steals_at_serialize: AtomicU32,
    kernel_running: AtomicU32,
    kernel_work_ns: AtomicU64,
    kernel_alloc: AtomicU32,
    _reserved0: AtomicU32,
}

/// A request's identity in the table: `(generation << 32) | slot`.
pub(crate) fn make_tag(slot: u32, generation: u32) -> u64 {
    ((generation as u64) << 32) | slot as u64
}
/// Slot index of a tag.
pub(crate) fn tag_slot(tag: u64) -> usize {
    (tag & 0xffff_ffff) as usize
}
/// Generation of a tag.
pub(crate) fn tag_generation(tag: u64) -> u32 {
    (tag >> 32) as u32
}

impl RequestSlot {
    /// Threads of this request running, as the scheduler last counted them (0 without
    /// scx_tailctl): at its serialization, and at each start and stop under its cap. The
    /// scheduler's starts of uncapped requests write nothing shared, so this is not a live count
    /// before serialization (the pinned `cpu_runs` map is: the CPUs naming the request).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).kernel_running(), 0);
    /// ```
    pub fn kernel_running(&self) -> u32 {
        self.kernel_running.load(Ordering::Relaxed)
    }

    /// CPU time the scheduler charged to this request (0 without scx_tailctl).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).kernel_work_ns(), 0);
    /// ```
    pub fn kernel_work_ns(&self) -> u64 {
        self.kernel_work_ns.load(Ordering::Relaxed)
    }

    /// The scheduler's cap on this request's running threads (0: none).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).kernel_alloc(), 0);
    /// ```
    pub fn kernel_alloc(&self) -> u32 {
        self.kernel_alloc.load(Ordering::Relaxed)
    }

    /// The request id held by the slot.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).id(), 0);
    /// ```
    pub fn id(&self) -> u64 {
        self.id.load(Ordering::Relaxed)
    }
    /// The slot's generation (bumped on every free).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).generation(), 0);
    /// ```
    pub fn generation(&self) -> u32 {
        (self.gen_flags.load(Ordering::Acquire) >> 32) as u32
    }
    /// The flags word ([`FLAG_SERIALIZED`], ...).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).flags(), 0);
    /// ```
    pub fn flags(&self) -> u32 {
        self.gen_flags.load(Ordering::Acquire) as u32
    }
    /// Accumulated work (ns) flushed so far.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).work_ns(), 0);
    /// ```
    pub fn work_ns(&self) -> u64 {
        self.work_ns.load(Ordering::Relaxed)
    }
    /// Arrival time (CLOCK_MONOTONIC ns).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).arrival_ns(), 0);
    /// ```
    pub fn arrival_ns(&self) -> u64 {
        self.arrival_ns.load(Ordering::Relaxed)
    }
    /// One of [`REQ_FREE`], [`REQ_QUEUED`], [`REQ_RUNNING`].
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).state(), tailctl_rt::shared_state::REQ_FREE);
    /// ```
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }
    /// Tasks of this request executed by thieves.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.request(0).steals(), 0);
    /// ```
    pub fn steals(&self) -> u32 {
        self.steals.load(Ordering::SeqCst)
    }

    /// Whether the request of generation `generation` is serialized (false
    /// if the slot has moved on to another request).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert!(!s.request(0).is_serialized(0));
    /// assert!(s.request(0).mark_serialized(0));
    /// assert!(s.request(0).is_serialized(0));
    /// assert!(!s.request(0).is_serialized(1));
    /// ```
    pub fn is_serialized(&self, generation: u32) -> bool {
        let gf = self.gen_flags.load(Ordering::SeqCst);
        (gf >> 32) as u32 == generation && (gf as u32) & FLAG_SERIALIZED != 0
    }

    /// Sets [`FLAG_SERIALIZED`] if the slot still holds generation
    /// `generation`. Returns true if this call set it. This is the operation
    /// the kernel half will perform (a compare-and-swap on the same word).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert!(s.request(0).mark_serialized(0));
    /// assert!(!s.request(0).mark_serialized(0)); // already set
    /// assert!(!s.request(0).mark_serialized(7)); // wrong generation
    /// ```
    pub fn mark_serialized(&self, generation: u32) -> bool {
        let mut cur = self.gen_flags.load(Ordering::SeqCst);
        loop {
            if (cur >> 32) as u32 != generation || (cur as u32) & FLAG_SERIALIZED != 0 {
                return false;
            }
            match self.gen_flags.compare_exchange_weak(
                cur,
                cur | FLAG_SERIALIZED as u64,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// `steals` when the runtime marked the request, if it did.
    pub(crate) fn steals_at_serialize(&self) -> Option<u32> {
        match self.steals_at_serialize.load(Ordering::SeqCst) {
            u32::MAX => None,
            n => Some(n),
        }
    }

    pub(crate) fn add_work(&self, generation: u32, ns: u64) {
        // A late flush against a freed slot is dropped (a hint, see module doc).
        if self.generation() == generation {
            self.work_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }
    pub(crate) fn set_state(&self, state: u32) {
        self.state.store(state, Ordering::Release);
    }
    /// Thief side of the steal/mark protocol: returns false (and undoes the
    /// count) when the request is serialized.
    pub(crate) fn try_count_steal(&self, generation: u32) -> bool {
        self.steals.fetch_add(1, Ordering::SeqCst);
        // Dekker with the marker's fence in `runtime_mark` ("Steals after the
        // mark"): either the marker's snapshot sees this increment, or this
        // sees the flag.
        fence(Ordering::SeqCst);
        if self.is_serialized(generation) {
            self.steals.fetch_sub(1, Ordering::SeqCst);
            false
        } else {
            true
        }
    }
}

/// The whole region, in its C layout.
///
/// ```
/// use tailctl_rt::shared_state::{SharedRegion, MAX_REQUESTS, MAX_WORKERS};
/// assert_eq!(std::mem::size_of::<SharedRegion>(), 64 * (1 + MAX_WORKERS + MAX_REQUESTS));
/// ```
#[repr(C, align(64))]
#[derive(Debug)]
pub struct SharedRegion {
    /// The header.
    pub header: Header,
    /// Worker slots; `0..header.worker_count` are in use.
    pub workers: [WorkerSlot; MAX_WORKERS],
    /// Request slots; `0..header.request_capacity` are in use.
    pub requests: [RequestSlot; MAX_REQUESTS],
}

/// Owner of a [`SharedRegion`]: heap memory today, a mapped BPF array map in
/// the kernel-assisted mode.
///
/// ```
/// use tailctl_rt::shared_state::SharedState;
/// let s = SharedState::new(2);
/// let (_, tag) = s.alloc_request(0);
/// let tag = tag.expect("free slot");
/// assert_eq!(s.header().active(), 1);
/// s.free_request(tag);
/// assert_eq!(s.header().active(), 0);
/// ```
pub struct SharedState {
    region: NonNull<SharedRegion>,
    owned: bool,
    /// One sequence counter per worker slot, for the seqlock on the slot's
    /// (`current`, `start_ns`) pair ("Worker slots" above). Runtime-private:
    /// the kernel only reads `current`, alone.
    seqs: Box<[CachePadded<AtomicU64>]>,
    /// Whatever keeps an external region alive (the mapping of a BPF map),
    /// dropped with this value: the pool's registry holds it, and every
    /// worker holds the registry, so the region outlives the last worker
    /// even when the pool's owner is gone (see `kernel::link`).
    /// (`RefUnwindSafe`, so that a pool's registry and the handles that
    /// hold it stay unwind-safe: it is never used, only dropped.)
    _keep_alive: Option<Arc<KeepAlive>>,
}

/// What keeps an external region alive (see `SharedState::_keep_alive`).
pub(crate) type KeepAlive = dyn Any + Send + Sync + std::panic::RefUnwindSafe;

// SAFETY: the region contains only atomics; all access goes through `&` to them.
unsafe impl Send for SharedState {}
// SAFETY: as above, shared access to atomics is thread-safe.
unsafe impl Sync for SharedState {}

impl std::fmt::Debug for SharedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedState")
            .field("workers", &self.header().worker_count())
            .field("active", &self.header().active())
            .field("owned", &self.owned)
            .finish()
    }
}

impl SharedState {
    /// A heap-backed region for `workers` workers (clamped to [`MAX_WORKERS`]).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(8);
    /// assert_eq!(s.header().worker_count(), 8);
    /// ```
    pub fn new(workers: usize) -> Self {
        let s = SharedState {
            region: alloc_region(),
            owned: true,
            seqs: new_seqs(),
            _keep_alive: None,
        };
        s.init(workers);
        s
    }

    /// Uses an externally provided region (e.g. a memory-mapped BPF array map)
    /// and initialises it for `workers` workers.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes, 64-byte aligned, at least
    /// `size_of::<SharedRegion>()` bytes, and outlive the returned value. Other
    /// parties (the kernel) may write to it concurrently only with atomic
    /// operations on the documented fields.
    ///
    /// ```
    /// use tailctl_rt::shared_state::{SharedRegion, SharedState};
    /// use std::ptr::NonNull;
    /// let layout = std::alloc::Layout::new::<SharedRegion>();
    /// // SAFETY (example): zeroed memory of the right layout.
    /// let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut SharedRegion;
    /// let s = unsafe { SharedState::from_raw(NonNull::new(p).unwrap(), 2) };
    /// assert_eq!(s.header().worker_count(), 2);
    /// drop(s);
    /// unsafe { std::alloc::dealloc(p as *mut u8, layout) };
    /// ```
    pub unsafe fn from_raw(region: NonNull<SharedRegion>, workers: usize) -> Self {
        let s = SharedState {
            region,
            owned: false,
            seqs: new_seqs(),
            _keep_alive: None,
        };
        s.init(workers);
        s
    }

    /// Like [`SharedState::from_raw`], but the returned value also owns
    /// `keep_alive`, which keeps the region valid: the region is released
    /// when the last user of this value (the last worker of a pool built on
    /// it) is gone, not when whoever built the pool lets go of it.
    ///
    /// # Safety
    /// As for [`SharedState::from_raw`], except that the region must stay
    /// valid as long as `keep_alive` lives (instead of the returned value):
    /// dropping `keep_alive`'s last reference is what releases it.
    pub(crate) unsafe fn from_raw_kept_alive(
        region: NonNull<SharedRegion>,
        workers: usize,
        keep_alive: Arc<KeepAlive>,
    ) -> Self {
        // SAFETY: forwarded; `keep_alive` lives in the value (dropped after
        // `Drop::drop`, which never touches a non-owned region).
        let mut s = unsafe { Self::from_raw(region, workers) };
        s._keep_alive = Some(keep_alive);
        s
    }

    fn init(&self, workers: usize) {
        let r = self.region();
        let h = &r.header;
        h.worker_count
            .store(workers.min(MAX_WORKERS) as u32, Ordering::Relaxed);
        h.request_capacity
            .store(MAX_REQUESTS as u32, Ordering::Relaxed);
        h.active.store(0, Ordering::Relaxed);
        h.generation.fetch_add(1, Ordering::Relaxed);
        for w in &r.workers {
            w.current.store(NO_REQUEST, Ordering::Relaxed);
            w.state.store(WORKER_STEALING, Ordering::Relaxed);
        }
        h.busy_workers.store(0, Ordering::Relaxed);
        h.stealable.store(0, Ordering::Relaxed);
        for q in &r.requests {
            q.state.store(REQ_FREE, Ordering::Relaxed);
            q.steals_at_serialize.store(u32::MAX, Ordering::Relaxed);
        }
        h.version.store(REGION_VERSION, Ordering::Relaxed);
        h.magic.store(REGION_MAGIC, Ordering::Release);
    }

    /// The region.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.region().workers.len(), tailctl_rt::shared_state::MAX_WORKERS);
    /// ```
    pub fn region(&self) -> &SharedRegion {
        // SAFETY: valid for the lifetime of self (constructor contracts); only
        // shared references to atomics are ever created.
        unsafe { self.region.as_ref() }
    }

    /// Hand serialization decisions to the kernel (`true`, while registered
    /// with scx_tailctl) or take them back (`false`, the daemon is gone).
    /// While the kernel decides, the runtime's pileup check marks nothing and
    /// only reads the SERIALIZED bit the scheduler sets.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// s.set_kernel_decides(true);
    /// assert!(s.kernel_decides());
    /// s.set_kernel_decides(false);
    /// assert!(!s.kernel_decides());
    /// ```
    pub fn set_kernel_decides(&self, on: bool) {
        let mode = if on { MODE_KERNEL } else { MODE_USER };
        self.region().header.mode.store(mode, Ordering::Release);
    }

    /// Like [`SharedState::set_kernel_decides`], through a raw region pointer
    /// (for a thread that only holds the mapping, not the pool).
    ///
    /// # Safety
    /// `region` must point to a live, initialised [`SharedRegion`].
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// let p = std::ptr::NonNull::from(s.region());
    /// // SAFETY: `s` keeps the region alive.
    /// unsafe { tailctl_rt::shared_state::SharedState::set_kernel_decides_raw(p, true) };
    /// assert!(s.kernel_decides());
    /// ```
    pub unsafe fn set_kernel_decides_raw(region: NonNull<SharedRegion>, on: bool) {
        let mode = if on { MODE_KERNEL } else { MODE_USER };
        // SAFETY: the caller guarantees a live region; the field is atomic.
        unsafe { region.as_ref() }
            .header
            .mode
            .store(mode, Ordering::Release);
    }

    /// Whether the kernel decides serialization now.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert!(!s.kernel_decides());
    /// ```
    pub fn kernel_decides(&self) -> bool {
        self.header().mode() == MODE_KERNEL
    }

    /// Sets worker `i`'s state (its own worker only: one writer per slot) and
    /// keeps the header's `busy_workers` the number of WORKING slots.
    ///
    /// ```
    /// use tailctl_rt::shared_state::{SharedState, WORKER_STEALING, WORKER_WORKING};
    /// let s = SharedState::new(2);
    /// s.set_worker_state(0, WORKER_WORKING);
    /// s.set_worker_state(0, WORKER_WORKING);
    /// s.set_worker_state(1, WORKER_WORKING);
    /// assert_eq!(s.header().busy_workers(), 2);
    /// s.set_worker_state(1, WORKER_STEALING);
    /// assert_eq!(s.header().busy_workers(), 1);
    /// ```
    pub fn set_worker_state(&self, i: usize, state: u32) {
        let r = self.region();
        let Some(w) = r.workers.get(i) else { return };
        let old = w.state.swap(state, Ordering::Relaxed);
        let busy = &r.header.busy_workers;
        if old != WORKER_WORKING && state == WORKER_WORKING {
            busy.fetch_add(1, Ordering::Relaxed);
        } else if old == WORKER_WORKING && state != WORKER_WORKING {
            // Saturating: a re-initialisation (init) may have zeroed it meanwhile.
            let _ = busy.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1));
        }
    }

    /// The header.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// assert_eq!(s.header().active(), 0);
    /// ```
    pub fn header(&self) -> &Header {
        &self.region().header
    }

    /// Whether the region is external ([`SharedState::from_raw`]: a mapped
    /// BPF region a scheduler may write), not the pool's own heap copy that
    /// nobody else sees. Only an external region can carry the kernel's
    /// `descheduled` flags, so only then do thieves read them (`mug`).
    ///
    /// ```
    /// assert!(!tailctl_rt::shared_state::SharedState::new(1).is_external());
    /// ```
    pub fn is_external(&self) -> bool {
        !self.owned
    }

    /// Worker slot `i` (panics if `i >= MAX_WORKERS`).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(2);
    /// assert_eq!(s.worker(1).tid(), 0);
    /// ```
    pub fn worker(&self, i: usize) -> &WorkerSlot {
        &self.region().workers[i]
    }

    /// Request slot `i` (panics if `i >= MAX_REQUESTS`).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(2);
    /// assert_eq!(s.request(5).state(), tailctl_rt::shared_state::REQ_FREE);
    /// ```
    pub fn request(&self, i: usize) -> &RequestSlot {
        &self.region().requests[i]
    }

    /// Records an arrival: counts it active, gives it an id and claims a
    /// slot. Returns the id and the request's tag, or `None` for the tag if
    /// every slot is taken (the request then runs untracked, but is still
    /// counted active).
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// let (id, tag) = s.alloc_request(42);
    /// assert_eq!(id, 0);
    /// assert_eq!(s.header().active(), 1);
    /// s.free_request(tag.unwrap());
    /// ```
    pub fn alloc_request(&self, arrival_ns: u64) -> (u64, Option<u64>) {
        let h = self.header();
        let before = h.active.fetch_add(1, Ordering::SeqCst);
        let id = h.next_id.fetch_add(1, Ordering::Relaxed);
        let cap = (h.request_capacity().min(MAX_REQUESTS as u32)) as usize;
        // A slot is claimed after its request is counted active and freed
        // before it is not, so `before` bounds the slots the others hold:
        // with `before < cap` a free slot is all but certain (only arrivals
        // after this one can race for it; a scan that loses them all leaves
        // this request untracked), and with `before >= cap` the table is
        // most likely full, and the request goes untracked without a scan
        // (a scan of every slot per submission over capacity cost a quarter
        // of the submitting thread's time). The ids are consecutive, so
        // with requests completing about in order, slot `id % cap` is
        // usually free: the scan starts there. Both are read from words
        // this submission writes anyway; the pool-wide hints they replace
        // (a claim cursor and a free count, three contended read-modify-
        // writes per request) were a third of a submitter's time in
        // `perf` of the `submit` benchmark.
        if before as usize >= cap {
            return (id, None);
        }
        let start = (id % cap as u64) as usize;
        for k in 0..cap {
            let i = (start + k) % cap;
            let q = &self.region().requests[i];
            if q.state.load(Ordering::Relaxed) == REQ_FREE
                && q.state
                    .compare_exchange(REQ_FREE, REQ_QUEUED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                q.id.store(id, Ordering::Relaxed);
                q.work_ns.store(0, Ordering::Relaxed);
                q.arrival_ns.store(arrival_ns, Ordering::Relaxed);
                q.steals.store(0, Ordering::SeqCst);
                // A swap: a late mark's compare-and-swap may race with it
                // ("Slot reuse"; why a swap, see `free_request`).
                q.steals_at_serialize.swap(u32::MAX, Ordering::SeqCst);
                return (id, Some(make_tag(i as u32, q.generation())));
            }
        }
        (id, None)
    }

    /// Records a completion of a request without a slot.
    pub(crate) fn complete_untracked(&self) {
        let h = self.header();
        h.completed.fetch_add(1, Ordering::Relaxed);
        h.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Records a completion: frees the slot (bumping its generation) and
    /// decrements the active count.
    ///
    /// ```
    /// let s = tailctl_rt::shared_state::SharedState::new(1);
    /// let t = s.alloc_request(0).1.unwrap();
    /// s.free_request(t);
    /// assert_eq!(s.header().completed(), 1);
    /// ```
    pub fn free_request(&self, tag: u64) {
        let q = &self.region().requests[tag_slot(tag)];
        let next = (tag_generation(tag).wrapping_add(1) as u64) << 32;
        // New generation and cleared flags in one write, before the slot is
        // handed out again (see "Slot allocation"). A swap, not a store: the
        // marks are compare-and-swaps on this word, and loom's modification
        // order mixes plain stores with RMWs imprecisely (it lets a mark's CAS
        // land after this write while reading the value before it, which
        // RMW atomicity forbids); a `SeqCst` store is an `xchg` on x86-64
        // anyway.
        q.gen_flags.swap(next, Ordering::SeqCst);
        q.state.store(REQ_FREE, Ordering::Release);
        self.complete_untracked();
    }

    /// Runtime-side mark: sets the flag and, if this call set it, snapshots
    /// the steal count for the "no steal after the mark" check.
    pub(crate) fn runtime_mark(&self, tag: u64) -> bool {
        let q = &self.region().requests[tag_slot(tag)];
        let generation = tag_generation(tag);
        if !q.mark_serialized(generation) {
            return false;
        }
        // Dekker with the thief's fence in `try_count_steal`.
        fence(Ordering::SeqCst);
        let snapshot = q.steals.load(Ordering::SeqCst);
        // The request may have completed, and its slot been reused, since
        // the mark: the snapshot would then land on the next request ("Slot
        // reuse"). So it goes only into an unset snapshot, and is taken back
        // if the generation moved on meanwhile.
        let sas = &q.steals_at_serialize;
        if sas
            .compare_exchange(u32::MAX, snapshot, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            fence(Ordering::SeqCst);
            if (q.gen_flags.load(Ordering::SeqCst) >> 32) as u32 != generation {
                let _ =
                    sas.compare_exchange(snapshot, u32::MAX, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
        self.header().serialized.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Worker `i` publishes the request it is on and since when (the writer
    /// side of the seqlock, "Worker slots" above). Only worker `i` calls
    /// this for slot `i`.
    pub(crate) fn publish(&self, i: usize, tag: u64, start_ns: u64) {
        let (w, seq) = (self.worker(i), &self.seqs[i]);
        // Single writer: nobody else changes `seq`.
        let s = seq.load(Ordering::Relaxed);
        seq.store(s.wrapping_add(1), Ordering::Relaxed); // odd: writing
        fence(Ordering::Release);
        w.start_ns.store(start_ns, Ordering::Relaxed);
        // Release: the kernel and tools read `current` alone, as a hint.
        w.current.store(tag, Ordering::Release);
        seq.store(s.wrapping_add(2), Ordering::Release); // even: done
    }

    /// What worker `i` is on and since when, as one consistent pair (the
    /// reader side of the seqlock), or `None` if the worker kept publishing
    /// while we read (a hint: the caller skips it this time).
    pub(crate) fn worker_snapshot(&self, i: usize) -> Option<(u64, u64)> {
        let (w, seq) = (self.worker(i), &self.seqs[i]);
        for _ in 0..SNAPSHOT_TRIES {
            let s1 = seq.load(Ordering::Acquire);
            if s1 % 2 == 0 {
                let tag = w.current.load(Ordering::Relaxed);
                let start = w.start_ns.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == s1 {
                    return Some((tag, start));
                }
            }
            std::hint::spin_loop();
        }
        None
    }

    /// The slot of request `tag`, or `None` for a tag naming no slot. Tags the
    /// runtime made itself are always in range; a tag read back from the
    /// region (a worker's `current`, which the process itself can scribble
    /// on) may not be, and is then a hint to ignore, never an index to panic
    /// on: a worker that panics here aborts the process.
    pub(crate) fn tag_request(&self, tag: u64) -> Option<&RequestSlot> {
        self.region().requests.get(tag_slot(tag))
    }

    /// Whether the request `tag` is serialized (untracked, or naming no slot: never).
    pub(crate) fn tag_serialized(&self, tag: u64) -> bool {
        tag != NO_REQUEST
            && self
                .tag_request(tag)
                .is_some_and(|q| q.is_serialized(tag_generation(tag)))
    }
}

impl Drop for SharedState {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: made by `alloc_region` in `new` and not freed before;
            // no reference into it outlives `self`.
            unsafe { free_region(self.region) }
        }
    }
}

/// Attempts of `worker_snapshot` before it gives up on a busy worker.
const SNAPSHOT_TRIES: usize = 4;

fn new_seqs() -> Box<[CachePadded<AtomicU64>]> {
    (0..MAX_WORKERS)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect()
}

/// A zeroed region on the heap (all-zero bytes are valid for every field).
#[cfg(not(loom))]
fn alloc_region() -> NonNull<SharedRegion> {
    let layout = Layout::new::<SharedRegion>();
    // SAFETY: the layout has non-zero size; all-zero bytes are a valid value
    // for every field (atomics of integers).
    let ptr = unsafe { alloc_zeroed(layout) } as *mut SharedRegion;
    match NonNull::new(ptr) {
        Some(p) => p,
        None => std::alloc::handle_alloc_error(layout),
    }
}

/// # Safety
/// `region` was returned by `alloc_region` and is not used after this.
#[cfg(not(loom))]
unsafe fn free_region(region: NonNull<SharedRegion>) {
    // SAFETY: allocated by `alloc_region` with this layout (contract).
    unsafe { dealloc(region.as_ptr() as *mut u8, Layout::new::<SharedRegion>()) }
}

/// Loom's atomics are not plain integers: build the region value by value.
#[cfg(loom)]
fn alloc_region() -> NonNull<SharedRegion> {
    let z64 = || AtomicU64::new(0);
    let z32 = || AtomicU32::new(0);
    let region = SharedRegion {
        header: Header {
            magic: z32(),
            version: z32(),
            worker_count: z32(),
            request_capacity: z32(),
            active: z32(),
            generation: z32(),
            next_id: z64(),
            completed: z64(),
            serialized: z64(),
            busy_workers: z32(),
            stealable: z32(),
            kernel_serialized: z32(),
            mode: z32(),
        },
        workers: std::array::from_fn(|_| WorkerSlot {
            current: z64(),
            start_ns: z64(),
            tid: z32(),
            state: z32(),
            steals: z64(),
            kernel_work_ns: z64(),
            failed_steals: z64(),
            found_work: z64(),
            descheduled: z32(),
            stealable_seen: z32(),
        }),
        requests: std::array::from_fn(|_| RequestSlot {
            id: z64(),
            gen_flags: z64(),
            work_ns: z64(),
            arrival_ns: z64(),
            state: z32(),
            steals: z32(),
            steals_at_serialize: z32(),
            kernel_running: z32(),
            kernel_work_ns: z64(),
            kernel_alloc: z32(),
            _reserved0: z32(),
        }),
    };
    NonNull::from(Box::leak(Box::new(region)))
}

/// # Safety
/// `region` was returned by `alloc_region` and is not used after this.
#[cfg(loom)]
unsafe fn free_region(region: NonNull<SharedRegion>) {
    // SAFETY: made by `Box::leak` in `alloc_region` (contract).
    drop(unsafe { Box::from_raw(region.as_ptr()) })
}

/// One field of the region's C layout: (struct, field, byte offset, size).
pub type FieldLayout = (&'static str, &'static str, usize, usize);

macro_rules! fields {
    ($ty:ident, $cname:literal: $($f:ident),* $(,)?) => {
        [$(($cname, stringify!($f), std::mem::offset_of!($ty, $f), {
            fn size_of_field<T>(_: impl Fn(&$ty) -> &T) -> usize { std::mem::size_of::<T>() }
            size_of_field(|s: &$ty| &s.$f)
        })),*]
    };
}

/// The layout of [`SharedRegion`] field by field, named as in `bpf/intf.h`
/// (`struct tailctl_header`, `tailctl_worker_slot`, `tailctl_request_slot`).
/// scx_tailctl's tests compare it with the bindgen output of `intf.h`, so the
/// mirror cannot drift from the one definition unnoticed. Fields the runtime
/// keeps as one atomic but C names separately are listed under the C names.
///
/// ```
/// let l = tailctl_rt::shared_state::region_layout();
/// assert!(l.iter().any(|f| f.0 == "tailctl_header" && f.1 == "active"));
/// ```
pub fn region_layout() -> Vec<FieldLayout> {
    let mut v: Vec<FieldLayout> = Vec::new();
    v.extend(
        fields!(Header, "tailctl_header": magic, version, worker_count, request_capacity,
        active, generation, next_id, completed, serialized, busy_workers, stealable,
        kernel_serialized, mode),
    );
    v.extend(
        fields!(WorkerSlot, "tailctl_worker_slot": current, start_ns, tid, state, steals,
        kernel_work_ns, failed_steals, found_work, descheduled, stealable_seen),
    );
    v.extend(
        fields!(RequestSlot, "tailctl_request_slot": id, work_ns, arrival_ns, state, steals,
        steals_at_serialize, kernel_running, kernel_work_ns, kernel_alloc),
    );
    // gen_flags is C's `u32 flags; u32 generation;` (little-endian: flags low).
    let gf = std::mem::offset_of!(RequestSlot, gen_flags);
    v.push(("tailctl_request_slot", "flags", gf, 4));
    v.push(("tailctl_request_slot", "generation", gf + 4, 4));
    v.push(("tailctl_header", "<size>", 0, std::mem::size_of::<Header>()));
    v.push((
        "tailctl_worker_slot",
        "<size>",
        0,
        std::mem::size_of::<WorkerSlot>(),
    ));
    v.push((
        "tailctl_request_slot",
        "<size>",
        0,
        std::mem::size_of::<RequestSlot>(),
    ));
    v.push((
        "tailctl_region",
        "workers",
        std::mem::offset_of!(SharedRegion, workers),
        std::mem::size_of::<[WorkerSlot; MAX_WORKERS]>(),
    ));
    v.push((
        "tailctl_region",
        "requests",
        std::mem::offset_of!(SharedRegion, requests),
        std::mem::size_of::<[RequestSlot; MAX_REQUESTS]>(),
    ));
    v.push((
        "tailctl_region",
        "<size>",
        0,
        std::mem::size_of::<SharedRegion>(),
    ));
    v
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The layout documented above; the kernel half mirrors it in C.
    #[test]
    fn layout_is_stable() {
        assert_eq!(size_of::<Header>(), 64);
        assert_eq!(size_of::<WorkerSlot>(), 64);
        assert_eq!(size_of::<RequestSlot>(), 64);
        assert_eq!(offset_of!(Header, active), 16);
        assert_eq!(offset_of!(Header, generation), 20);
        assert_eq!(offset_of!(Header, next_id), 24);
        assert_eq!(offset_of!(WorkerSlot, start_ns), 8);
        assert_eq!(offset_of!(WorkerSlot, tid), 16);
        assert_eq!(offset_of!(WorkerSlot, state), 20);
        assert_eq!(offset_of!(RequestSlot, gen_flags), 8);
        assert_eq!(offset_of!(RequestSlot, work_ns), 16);
        assert_eq!(offset_of!(RequestSlot, state), 32);
        assert_eq!(offset_of!(RequestSlot, steals), 36);
        assert_eq!(offset_of!(SharedRegion, workers), 64);
        assert_eq!(offset_of!(SharedRegion, requests), 64 + 64 * MAX_WORKERS);
    }

    #[test]
    fn stale_tags_do_not_match_reused_slots() {
        let s = SharedState::new(1);
        let mut tags = Vec::new();
        for _ in 0..MAX_REQUESTS {
            tags.push(s.alloc_request(0).1.unwrap());
        }
        assert!(s.alloc_request(0).1.is_none(), "table full");
        s.complete_untracked();
        let old = tags[3];
        s.free_request(old);
        let new = s.alloc_request(0).1.unwrap();
        assert_eq!(tag_slot(new), tag_slot(old));
        assert_ne!(new, old);
        assert!(!s.runtime_mark(old));
        assert!(!s.tag_serialized(new));
        assert!(s.runtime_mark(new));
        assert!(s.tag_serialized(new));
    }

    /// The pileup check reads a worker's (tag, start) pair while the worker
    /// publishes new ones: it must never pair a tag with the start of another
    /// publish. (It used to read `current` then `start_ns`, while a worker
    /// stores `start_ns` then `current`: an old tag with a new start, i.e.
    /// the time since the worker *left* that request counted as work on it.)
    /// Here a tag is published with odd starts, no request with even ones.
    #[test]
    fn garbage_tags_in_the_region_are_ignored_not_indexed() {
        // A process may scribble on its own region; tags read back from it
        // must never index past the request slots (a worker panicking there
        // aborts the process).
        let s = SharedState::new(2);
        for bad in [
            u64::MAX - 1,
            0xffff_ffff,
            MAX_REQUESTS as u64,
            (7 << 32) | 1_000_000,
        ] {
            s.worker(0).current.store(bad, Ordering::Relaxed);
            assert!(!s.tag_serialized(s.worker(0).current()));
            assert!(s.tag_request(bad).is_none());
        }
    }

    #[test]
    fn a_worker_snapshot_pairs_a_tag_with_its_own_start() {
        use std::sync::atomic::AtomicBool;
        let s = SharedState::new(1);
        let t = make_tag(3, 7);
        let stop = AtomicBool::new(false);
        let (mut seen, mut torn) = (0u64, 0u64);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut k = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    s.publish(0, if k % 2 == 1 { t } else { NO_REQUEST }, k);
                    k += 1;
                }
            });
            for _ in 0..if cfg!(miri) { 2_000 } else { 2_000_000 } {
                if let Some((tag, start)) = s.worker_snapshot(0) {
                    seen += 1;
                    torn += u64::from((tag == t) != (start % 2 == 1));
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(seen > 0);
        assert_eq!(
            torn, 0,
            "{torn} of {seen} snapshots paired a tag with another start"
        );
    }

    #[test]
    fn steal_after_mark_is_refused() {
        let s = SharedState::new(1);
        let t = s.alloc_request(0).1.unwrap();
        let q = s.request(tag_slot(t));
        assert!(q.try_count_steal(tag_generation(t)));
        assert!(s.runtime_mark(t));
        assert_eq!(q.steals_at_serialize(), Some(1));
        assert!(!q.try_count_steal(tag_generation(t)));
        assert_eq!(q.steals(), 1);
    }
}

/// Model checks of the protocols above, on this very code (under `--cfg
/// loom` the table's atomics are loom's and it has 2 worker and 2 request
/// slots). Run: `RUSTFLAGS="--cfg loom" cargo test -p tailctl-rt --release
/// --lib loom`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;

    /// A table with slot 0 holding a request and slot 1 taken, so that the
    /// next allocation after freeing slot 0 reuses slot 0.
    fn table_with_request() -> (Arc<SharedState>, u64) {
        let s = Arc::new(SharedState::new(2));
        let tag = s.alloc_request(0).1.unwrap();
        let other = s.alloc_request(0).1.unwrap();
        assert_eq!((tag_slot(tag), tag_slot(other)), (0, 1));
        (s, tag)
    }

    /// The seqlock on a worker slot's (current, start_ns): a reader never
    /// pairs a tag with the start of another publish. (With the old read,
    /// `current` then `start_ns` and no sequence, loom finds (A, 2).)
    #[test]
    fn worker_snapshot_is_consistent() {
        loom::model(|| {
            let s = Arc::new(SharedState::new(1));
            let (a, b) = (make_tag(0, 1), make_tag(1, 1));
            let w = s.clone();
            let writer = loom::thread::spawn(move || {
                w.publish(0, a, 1);
                w.publish(0, b, 2);
            });
            if let Some(pair) = s.worker_snapshot(0) {
                assert!(
                    [(NO_REQUEST, 0), (a, 1), (b, 2)].contains(&pair),
                    "torn: {pair:?}"
                );
            }
            writer.join().unwrap();
            assert_eq!(s.worker_snapshot(0), Some((b, 2)));
        });
    }

    /// Accounting before release (`job`): a thief adds its time, then sets
    /// the latch its job's owner waits for (`SpinLatch::set`, a `SeqCst`
    /// store); the owner, once it sees the latch, reads the work, frees the
    /// slot and the slot is reused. The owner reads all the work, and the
    /// next request starts at zero. (With the old order, latch then add, loom
    /// finds both the undercount and the stale add on the next request.)
    #[test]
    fn accounting_before_release() {
        loom::model(|| {
            let (s, tag) = table_with_request();
            let latch = Arc::new(AtomicBool::new(false));
            let (s2, l2) = (s.clone(), latch.clone());
            let thief = loom::thread::spawn(move || {
                s2.request(tag_slot(tag)).add_work(tag_generation(tag), 5);
                l2.store(true, SeqCst);
            });
            while !latch.load(SeqCst) {
                loom::thread::yield_now();
            }
            assert_eq!(s.request(tag_slot(tag)).work_ns(), 5, "undercount");
            s.free_request(tag);
            let next = s.alloc_request(0).1.unwrap();
            assert_eq!(tag_slot(next), tag_slot(tag));
            thief.join().unwrap();
            assert_eq!(s.request(tag_slot(next)).work_ns(), 0, "stale work");
        });
    }

    /// Steals after the mark: two thieves count their steals while the
    /// runtime marks the request. Whatever the interleaving, a finished
    /// request has `steals <= steals_at_serialize`, and a steal that the
    /// mark's snapshot missed was refused.
    #[test]
    fn steal_vs_serialize() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let (s, tag) = table_with_request();
            let gen = tag_generation(tag);
            let thieves: Vec<_> = (0..2)
                .map(|_| {
                    let s = s.clone();
                    loom::thread::spawn(move || s.request(tag_slot(tag)).try_count_steal(gen))
                })
                .collect();
            assert!(s.runtime_mark(tag));
            let accepted = thieves
                .into_iter()
                .map(|t| u32::from(t.join().unwrap()))
                .sum::<u32>();
            let q = s.request(tag_slot(tag));
            assert_eq!(q.steals(), accepted);
            let snapshot = q.steals_at_serialize().expect("marked by the runtime");
            assert!(q.steals() <= snapshot, "a steal after the mark");
            assert!(!q.try_count_steal(gen), "a steal accepted after the mark");
        });
    }

    /// Slot reuse across generations: a mark decided on a request (the
    /// pileup check) races with the request's completion and the slot's
    /// reuse. The next request is never serialized by it, and never reports
    /// the old request's snapshot.
    #[test]
    fn a_late_mark_does_not_touch_the_next_request() {
        loom::model(|| {
            let (s, tag) = table_with_request();
            let s2 = s.clone();
            let marker = loom::thread::spawn(move || s2.runtime_mark(tag));
            s.free_request(tag);
            let next = s.alloc_request(0).1.unwrap();
            assert_eq!(tag_slot(next), tag_slot(tag));
            marker.join().unwrap();
            let q = s.request(tag_slot(next));
            assert!(
                !s.tag_serialized(next),
                "the old mark serialized the next request"
            );
            assert_eq!(
                q.steals_at_serialize(),
                None,
                "the old snapshot on the next request"
            );
            assert!(!s.runtime_mark(tag), "a stale tag marked the slot");
        });
    }
}
