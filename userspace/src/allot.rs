//! The core-allotment controller (issue 12): divides the machine's cores among
//! the registered services ("jobs") every quantum and on every job start and
//! exit, through a `tailctl_allot` policy; the BPF scheduler enforces it.
//!
//! # Design
//!
//! One thread. It sleeps until the next quantum boundary or until the
//! registration server reports a registration or unregistration (a channel,
//! so a job exit is acted on at once, not at the next quantum). Then it:
//!
//! 1. lists the jobs: every service slot whose `services` entry has a pid,
//!    identified by its registration ((epoch << 32) + pid, the kernel's
//!    `owner`), in registration order. The map is read (one batch) in a round
//!    run for an event and once a second otherwise; with no job there are no
//!    quantum rounds at all, only that rescan;
//! 2. builds a [`JobView`] for each from the kernel's own per-job counters
//!    (`job_acct`: CPU time while working and while not, runnable threads;
//!    deltas over the quantum) and the desire inputs the runtime publishes in
//!    its region (`busy_workers`, `stealable`, `worker_count`). The region is
//!    written by an untrusted service: every value is clamped (worker count to
//!    the region's 64 slots, stealable items to 2^16), and a region whose
//!    magic is wrong counts as "no desire inputs"; it can only change its own
//!    job's desire, never another job's allotment beyond what the policy gives
//!    any job;
//! 3. calls the policy (`decide`, once per job event, then for the quantum),
//!    checks its invariants (`check_allotment`) and applies the result through
//!    the `apply_allot` syscall program, one `BPF_PROG_TEST_RUN` per job. The
//!    program checks the registration is still the same (so a decision never
//!    lands on a slot's next tenant), writes the allotment, and kicks the CPUs
//!    of threads over it. The decision's time (CLOCK_MONOTONIC, the clock of
//!    `bpf_ktime_get_ns`) is stamped just before the call; the kernel records
//!    when the job first runs within its new allotment, which is the
//!    decision-to-enforcement latency in the scheduler's stats.
//!
//! A policy's 0 becomes 1: in `services.allot`, 0 means "no allotment"
//! (uncapped), and a job with no core at all would only run through the wait
//! bound. Policies give every job with work at least one core whenever there
//! are at least as many cores as jobs (`check_allotment`), so this matters
//! only with more jobs than cores.
//!
//! The thread runs SCHED_FIFO (see [`make_realtime`]): it must not queue
//! behind the jobs it divides the machine among.
//!
//! Why the daemon and not a `bpf_timer`: the policies are Rust code shared with
//! the simulator (`tailctl sim`), so what is measured there is what runs here;
//! in BPF they would be a second implementation (floating point, per-job
//! history). The price is a context switch per quantum and the daemon's wake-up
//! jitter; both are measured (`wake_late` and `decide` in the periodic log
//! line) and compared with the quantum in the guest tests, while enforcement
//! itself (the kicks and the token checks) happens in the kernel.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use log::{debug, info, warn};
use tailctl_allot::asteal::core_time_utilisation;
use tailctl_allot::{
    check_allotment, ASteal, AllotPolicy, Event, JobId, JobView, Machine, PolicyKind, Utilisation,
};

use crate::bpf_intf::{
    tailctl_allot_cmd, tailctl_header, tailctl_job_acct, tailctl_region, tailctl_service,
    tailctl_worker_slot,
};

const MAX_SERVICES: u32 = crate::bpf_intf::tailctl_consts_TAILCTL_MAX_SERVICES;
const MAX_WORKERS: u32 = crate::bpf_intf::tailctl_consts_TAILCTL_MAX_WORKERS;
const REGION_MAGIC: u32 = crate::bpf_intf::tailctl_consts_TAILCTL_REGION_MAGIC;
/// Stealable items above this are a lie (or a bug); clamped.
const MAX_STEALABLE: u32 = 1 << 16;

/// What `--allot` and `--quantum` configure.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub policy: PolicyKind,
    pub quantum: Duration,
    /// `--request-shares`: `apply_allot` also shares the allotment among the
    /// job's requests, so it must run every round even when nothing changed.
    pub request_shares: bool,
    /// `--saws-u`: where SAWS's `u` comes from.
    pub saws_u: SawsU,
    /// `--asteal-u`: where A-Steal's utilisation comes from.
    pub asteal_u: AstealU,
}

/// Where `--allot asteal` takes its utilisation from (`--asteal-u`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AstealU {
    /// The `u` DEQ reads (`--saws-u`; for a job without a region, its
    /// core-time utilisation): SAWS §4.2.1 uses its sampled `u` for A-Steal's
    /// desires too, and `tailctl sim multiprog --asteal-u same` does the same,
    /// so the two policies are measured alike.
    #[default]
    Same,
    /// Working time over allotted core-time from the kernel's accounting, for
    /// every job (SAWS §3.2's `w(q)/(a(q)L)`; the daemon's only reading before).
    CoreTime,
}

/// Where the controller takes SAWS's `u` from (`--saws-u`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SawsU {
    /// The runtime's steal counters in the region: successful searches over
    /// all searches (SAWS §4.2, what a user-level runtime alone can count).
    #[default]
    Steals,
    /// The kernel's accounting: working time over working plus stealing time
    /// of the job's threads (SAWS's Eq. 1).
    Kernel,
}

/// SAWS's `α` over one reading window (§4.2: steal attempts made over the most
/// the allotted cores could have made). Every core of a job that is not
/// working steals, and attempts take about the same time each, so the ratio
/// is the stealing core-time over the allotted core-time: `steal_ns / (allot ·
/// window_ns)`, in [0, 1]. `None` without an allotment or a window.
pub fn saws_alpha(steal_ns: u64, allot: u32, window_ns: u64) -> Option<f64> {
    let possible = allot as f64 * window_ns as f64;
    (possible > 0.0).then(|| (steal_ns as f64 / possible).clamp(0.0, 1.0))
}

/// SAWS's `u` from the kernel's accounting: working over working plus stealing
/// core-time; `None` when the job's threads did neither.
pub fn kernel_u(work_ns: u64, steal_ns: u64) -> Option<f64> {
    let busy = work_ns as f64 + steal_ns as f64;
    (busy > 0.0).then(|| work_ns as f64 / busy)
}

/// The desire inputs `(u, Q)` of a job without a region: a cgroup job
/// (`--job`), or a service whose region holds no valid header. No runtime
/// counts its steals or its queued work, so both come from the kernel:
///
/// - `u` is A-Steal's core-time utilisation, working time over the allotted
///   core-time of the window (`allot · window_ns`) less the time its token
///   holders waited for a CPU other tasks held (`token_wait_ns`: denied, not
///   left idle), or over the measured core-time when that is more (its
///   threads ran on lent CPUs). A job whose
///   threads sleep leaves allotted cores idle and is inefficient, which the
///   working-over-busy ratio of [`kernel_u`] (always 1 for a job that never
///   steals) cannot show. 1.0 (no evidence) without a window or an allotment.
/// - `Q` is its threads runnable beyond the allotment: they wait for a job
///   token as stealable work waits for a thief. Without it SAWS's desire of
///   such a job is `u·a` and never grows past the one core a new job starts
///   with.
pub fn unmodified_inputs(
    work_ns: u64,
    steal_ns: u64,
    token_wait_ns: u64,
    allot: u32,
    window_ns: u64,
    runnable: u32,
) -> (f64, f64) {
    let u = if allot > 0 && window_ns > 0 {
        core_time_utilisation(work_ns, steal_ns, token_wait_ns, allot, window_ns).unwrap_or(1.0)
    } else {
        1.0
    };
    let queued = runnable.min(MAX_WORKERS).saturating_sub(allot);
    (u, queued as f64)
}

/// The token wait a round's utilisation may count: what the kernel counted
/// since the last round (`new_ns`) plus what earlier rounds could not hold
/// (`carry`), up to the round's allotted core-time (`allot · window_ns`); the
/// rest is carried, at most one round's worth (a wait is counted whole when it
/// ends, so it can straddle rounds; anything beyond is dropped, not
/// accumulated).
pub fn spread_token_wait(new_ns: u64, carry: &mut u64, allot: u32, window_ns: u64) -> u64 {
    let cap = (allot as u64).saturating_mul(window_ns);
    let pending = new_ns.saturating_add(*carry);
    let now = pending.min(cap);
    *carry = (pending - now).min(cap);
    now
}

/// The maps and the program the controller uses (its own handles), and
/// where it writes its per-round trace (`--allot-trace`).
pub struct Handles {
    pub services: MapHandle,
    pub regions: MapHandle,
    pub job_acct: MapHandle,
    /// The `apply_allot` syscall program.
    pub apply_allot: OwnedFd,
    /// One CSV line per job per round ([`TRACE_HEADER`]); `None`: no trace.
    pub trace: Option<std::fs::File>,
}

/// The columns of `--allot-trace`: per job per round, what the policy saw and
/// what it decided. `round_ns` is CLOCK_MONOTONIC when the round started (the
/// clock of the kernel's and the services' stamps); `quantum` is 1 for a
/// quantum round, 0 for one run for a job start or exit; `allot_before` is the
/// allotment the job had going into the round.
pub const TRACE_HEADER: &str = "seq,round_ns,quantum,slot,owner,runnable,work_ns,steal_ns,steal_success,queued_avg,queued_now,alpha,demand,allot_before,allot,token_wait_ns";

/// The per-round trace: buffered and flushed about once a second (a write
/// per round would put a syscall, on a VM's shared folder a round trip to the
/// host, into every quantum), and when the controller stops (`BufWriter`'s
/// drop). A write error turns it off with one warning and never stops the
/// controller.
struct RoundTrace {
    out: Option<std::io::BufWriter<std::fs::File>>,
    flushed: Instant,
}

impl RoundTrace {
    fn new(file: Option<std::fs::File>) -> Self {
        // The file outlives a restart of the scheduler (opened once, in
        // main): the header goes only at its start.
        let fresh = file
            .as_ref()
            .is_some_and(|f| f.metadata().map(|m| m.len() == 0).unwrap_or(true));
        let mut t = Self {
            out: file.map(|f| std::io::BufWriter::with_capacity(1 << 16, f)),
            flushed: Instant::now(),
        };
        if fresh {
            t.write(|w| writeln!(w, "{TRACE_HEADER}"));
        }
        t
    }

    fn write(
        &mut self,
        f: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
    ) {
        if let Some(w) = self.out.as_mut() {
            if let Err(e) = f(w) {
                warn!("allotment trace: {e}; no more trace lines");
                self.out = None;
            }
        }
    }

    fn end_round(&mut self) {
        if self.flushed.elapsed() >= Duration::from_secs(1) {
            self.flushed = Instant::now();
            self.write(|w| w.flush());
        }
    }
}

/// The running controller; dropping it stops the thread.
pub struct Controller {
    shutdown: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Controller {
    /// Start controlling with `cfg.policy` (which must not be `off`), woken by `events`.
    pub fn start(cfg: Config, handles: Handles, events: Receiver<()>) -> Result<Self> {
        let policy = cfg
            .build_policy()
            .context("--allot off has no controller")?;
        let shutdown = Arc::new(AtomicBool::new(false));
        let stop = shutdown.clone();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let thread = std::thread::Builder::new()
            .name("tailctl-allot".into())
            .spawn(move || {
                if let Err(e) = make_realtime() {
                    warn!("allotment controller stays SCHED_OTHER ({e}): its decisions wait for a CPU behind the jobs");
                }
                let mut c = Loop::new(cfg, handles, policy, cores);
                c.run(&events, &stop);
            })?;
        info!(
            "allotment controller: policy {}, quantum {:?}, {cores} cores",
            cfg.policy_name(),
            cfg.quantum
        );
        Ok(Self {
            shutdown,
            thread: Some(thread),
        })
    }
}

impl Config {
    fn policy_name(&self) -> &'static str {
        self.policy.build().map_or("off", |p| p.name())
    }

    /// The policy `--allot` names, A-Steal reading the utilisation `--asteal-u` says.
    fn build_policy(&self) -> Option<Box<dyn AllotPolicy>> {
        match (self.policy, self.asteal_u) {
            (PolicyKind::Asteal, AstealU::Same) => Some(Box::new(
                ASteal::default().with_utilisation(Utilisation::Reported),
            )),
            (p, _) => p.build(),
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the controller remembers of a job between quanta.
#[derive(Clone, Copy, Debug, Default)]
struct Known {
    slot: u32,
    allot: u32,
    /// The desire last written to `services.desire` (`None`: never applied).
    desire: Option<u32>,
    work_ns: u64,
    steal_ns: u64,
    token_wait_ns: u64,
    /// Token wait counted past what the last round's allotted core-time could
    /// hold (the kernel adds a wait when it ends, so a wait that spanned a
    /// round boundary lands whole in the later round): carried into the next
    /// rounds, at most one round's allotted core-time.
    token_wait_carry: u64,
    /// CLOCK_MONOTONIC of the reading `work_ns` and `steal_ns` come from
    /// (0: none yet).
    read_ns: u64,
    /// The region's steal counters (summed over workers) at the last round.
    steals: u64,
    failed_steals: u64,
    /// The region's wrapping sum of the stealable counts its searches saw.
    stealable_seen: u32,
}

/// Timing of the controller itself, logged now and then.
#[derive(Default)]
struct Timing {
    rounds: u64,
    decide_sum: Duration,
    decide_max: Duration,
    /// The controller thread's own CPU time in rounds: under single-threaded
    /// TCG a round's wall time also holds the other vCPUs' turns.
    cpu_sum: Duration,
    late_sum: Duration,
    late_max: Duration,
    applied: u64,
    changed: u64,
    /// Decisions equal to the applied ones, not sent to the kernel.
    skipped: u64,
    last_log: Option<Instant>,
}

struct Loop {
    cfg: Config,
    h: Handles,
    policy: Box<dyn AllotPolicy>,
    cores: u32,
    /// Jobs in registration order.
    jobs: Vec<(JobId, Known)>,
    /// Each job's region, mapped once per registration (read every round).
    regions: Vec<(JobId, RegionView)>,
    seq: u64,
    timing: Timing,
    trace: RoundTrace,
    /// When the services map was last read for jobs that started or ended.
    last_scan: Instant,
}

/// How often the controller reads the services map without an event.
const RESCAN: Duration = Duration::from_secs(1);

/// CPU time of the calling thread (zero if the clock cannot be read).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(Duration::ZERO, Duration::from)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The controller thread runs SCHED_FIFO (priority 1): the RT class runs
/// before sched_ext's, so a decision is applied when it is taken. As an
/// ordinary task it waited for a CPU behind the jobs' threads, between its
/// stamp and `apply_allot`: 9.3 ms mean, 37 ms max in a guest run where no
/// decision needed a kick (tools/vm/guest-tests-allot.sh, allotequi). It
/// sleeps between quanta and a round takes microseconds; RT throttling
/// bounds it should it ever spin.
fn make_realtime() -> std::io::Result<()> {
    let p = libc::sched_param { sched_priority: 1 };
    // SAFETY: a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Copy a plain-old-data map value out of its bytes, if it is long enough.
fn read_pod<T>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= std::mem::size_of::<T>())
        // SAFETY: the buffer holds at least one T (checked); T is one of the
        // bindgen structs of intf.h (integers and arrays of integers), for
        // which every bit pattern is valid; read_unaligned copes with the
        // Vec's alignment.
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) })
}

/// Every entry of one of the per-service array maps (`services`, `job_acct`),
/// indexed by slot: one `BPF_MAP_LOOKUP_BATCH` a round instead of a look-up
/// per slot (16 syscalls every quantum, with or without jobs). Falls back to
/// single look-ups where batches are refused.
fn read_slots<T>(map: &MapHandle) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = (0..MAX_SERVICES).map(|_| None).collect();
    let mut got = false;
    // One more than the map holds: the kernel copies every entry and reports
    // the end (ENOENT) in the same call, and the iterator, seeing a short
    // batch, makes no second one. Asking for exactly MAX_SERVICES took two
    // bpf() calls a round, the second only to hear ENOENT (a round's CPU under
    // TCG is mostly its syscalls: strace of the controller, 2 bpf + 2
    // clock_gettime + 1 futex per round, about 400 us).
    if let Ok(batch) = map.lookup_batch(MAX_SERVICES + 1, MapFlags::ANY, MapFlags::ANY) {
        for (k, v) in batch {
            let Ok(k) = <[u8; 4]>::try_from(k.as_slice()) else {
                continue;
            };
            if let Some(slot) = out.get_mut(u32::from_ne_bytes(k) as usize) {
                *slot = read_pod(&v);
                got = true;
            }
        }
    }
    if !got {
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = map
                .lookup(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten()
                .and_then(|v| read_pod(&v));
        }
    }
    out
}

/// The desire inputs a region publishes, validated.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Inputs {
    pub workers: u32,
    pub busy: u32,
    pub stealable: u32,
    /// Searches for work that found some (stolen or admitted) and that found
    /// nothing, summed over the workers (monotonic while the region is not
    /// re-initialised; only their deltas are used).
    pub steals: u64,
    pub failed_steals: u64,
    /// The stealable counts (`Q`) the searches published, summed over the
    /// workers modulo 2^32 (each worker's is a wrapping u32; a difference of
    /// two such sums is exact while fewer than 2^32 were added between them).
    pub stealable_seen: u32,
}

impl Inputs {
    /// From a region header's raw fields: a bad magic means "nothing published";
    /// counts are clamped to what a region can hold (see the unit test).
    ///
    /// `stealable` is what the last thief saw; it goes stale while no worker
    /// searches (a job held to one core whose one worker runs a long task
    /// publishes nothing until the task ends: in the guest, three quanta
    /// after 16 requests arrived). `active` (requests between submit and
    /// completion, counted at submit) is always current, and every active
    /// request beyond one per busy worker is waiting parallelism, so `Q'` is
    /// at least that backlog.
    pub fn from_header(magic: u32, workers: u32, busy: u32, stealable: u32, active: u32) -> Self {
        if magic != REGION_MAGIC {
            return Self::default();
        }
        let workers = workers.min(MAX_WORKERS);
        let busy = busy.min(workers);
        Self {
            workers,
            busy,
            stealable: stealable
                .max(active.saturating_sub(busy))
                .min(MAX_STEALABLE),
            steals: 0,
            failed_steals: 0,
            stealable_seen: 0,
        }
    }

    /// SAWS's implementable `Q`: the stealable counts thieves saw, averaged
    /// over the searches since the previous reading (`prev_*`), clamped to
    /// what a region can hold. With no searches since, or counters that went
    /// backwards (a re-initialised region), the snapshot `Q'` (`stealable`).
    pub fn queued_avg(&self, prev_steals: u64, prev_failed: u64, prev_seen: u32) -> f64 {
        if self.steals < prev_steals || self.failed_steals < prev_failed {
            return self.stealable as f64;
        }
        let searches = (self.steals - prev_steals).saturating_add(self.failed_steals - prev_failed);
        if searches == 0 {
            return self.stealable as f64;
        }
        let seen = self.stealable_seen.wrapping_sub(prev_seen) as f64;
        (seen / searches as f64).min(MAX_STEALABLE as f64)
    }

    /// SAWS's `u` from two readings of the steal counters: successful searches
    /// over all searches since `prev` (1.0 with no rounds, or when the
    /// counters went backwards: a re-initialised region).
    pub fn steal_success(&self, prev_steals: u64, prev_failed: u64) -> f64 {
        if self.steals < prev_steals || self.failed_steals < prev_failed {
            return 1.0;
        }
        let ok = self.steals - prev_steals;
        let all = ok.saturating_add(self.failed_steals - prev_failed);
        if all == 0 {
            1.0
        } else {
            ok as f64 / all as f64
        }
    }

    /// The job's demand as operators see it: busy workers plus stealable
    /// work, at most its workers (published as `services.desire`).
    pub fn demand(&self) -> u32 {
        self.busy.saturating_add(self.stealable).min(self.workers)
    }
}

impl Loop {
    fn new(cfg: Config, mut h: Handles, policy: Box<dyn AllotPolicy>, cores: u32) -> Self {
        let trace = RoundTrace::new(h.trace.take());
        Self {
            cfg,
            h,
            policy,
            cores: cores.max(1),
            jobs: Vec::new(),
            regions: Vec::new(),
            seq: 0,
            timing: Timing::default(),
            trace,
            // Due at once: jobs matched before the events were connected.
            last_scan: Instant::now()
                .checked_sub(RESCAN)
                .unwrap_or_else(Instant::now),
        }
    }

    fn run(&mut self, events: &Receiver<()>, stop: &AtomicBool) {
        let mut next = Instant::now() + self.cfg.quantum;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let timeout = next.saturating_duration_since(now);
            let quantum = match events.recv_timeout(timeout.min(Duration::from_millis(200))) {
                Ok(()) => {
                    while events.try_recv().is_ok() {}
                    false
                }
                Err(RecvTimeoutError::Timeout) => {
                    if Instant::now() < next {
                        continue;
                    }
                    // No job: nothing to divide, so no round (a machine with no
                    // registered service does not pay for the controller). The
                    // first job's start is an event; the rescan catches the rest.
                    if self.jobs.is_empty() && self.last_scan.elapsed() < RESCAN {
                        next = Instant::now() + self.cfg.quantum;
                        continue;
                    }
                    true
                }
                Err(RecvTimeoutError::Disconnected) => {
                    if Instant::now() < next {
                        std::thread::sleep(next - Instant::now());
                    }
                    true
                }
            };
            let woke = Instant::now();
            if quantum {
                let late = woke.saturating_duration_since(next);
                self.timing.late_sum += late;
                self.timing.late_max = self.timing.late_max.max(late);
                next += self.cfg.quantum;
                // Far behind (a stopped VM, a long stall): do not replay the missed quanta.
                if next < woke {
                    next = woke + self.cfg.quantum;
                }
            }
            let cpu0 = thread_cpu();
            if let Err(e) = self.round(quantum) {
                warn!("allotment controller: {e:#}");
            }
            self.timing.cpu_sum += thread_cpu().saturating_sub(cpu0);
            let took = woke.elapsed();
            self.timing.rounds += 1;
            self.timing.decide_sum += took;
            self.timing.decide_max = self.timing.decide_max.max(took);
            self.log_timing();
        }
    }

    fn log_timing(&mut self) {
        let t = &mut self.timing;
        let due = t
            .last_log
            .is_none_or(|l| l.elapsed() >= Duration::from_secs(5));
        if !due || t.rounds == 0 {
            return;
        }
        info!(
            "allot: {} rounds, {} jobs, {} decisions applied ({} changed, {} unchanged not sent); decide mean {:.1} us max {:.1} us (thread CPU mean {:.1} us); wake_late mean {:.1} us max {:.1} us",
            t.rounds,
            self.jobs.len(),
            t.applied,
            t.changed,
            t.skipped,
            t.decide_sum.as_secs_f64() * 1e6 / t.rounds as f64,
            t.decide_max.as_secs_f64() * 1e6,
            t.cpu_sum.as_secs_f64() * 1e6 / t.rounds as f64,
            t.late_sum.as_secs_f64() * 1e6 / t.rounds as f64,
            t.late_max.as_secs_f64() * 1e6,
        );
        *t = Timing {
            last_log: Some(Instant::now()),
            ..Timing::default()
        };
    }

    /// The registered services now: (slot, registration id), in slot order.
    fn scan(services: &[Option<tailctl_service>]) -> Vec<(u32, JobId)> {
        services
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| {
                let s = s.as_ref()?;
                (s.pid != 0)
                    .then_some((slot as u32, ((s.epoch & 0xffff_ffff) << 32) + s.pid as u64))
            })
            .collect()
    }

    fn inputs(&mut self, slot: u32, job: JobId) -> Inputs {
        let read = |views: &mut Vec<(JobId, RegionView)>| -> Option<Inputs> {
            if !views.iter().any(|(j, _)| *j == job) {
                views.push((job, RegionView::open(&self.h.regions, slot)?));
            }
            let r = views.iter().find(|(j, _)| *j == job)?.1.head();
            let hd = &r.header;
            let mut i = Inputs::from_header(
                hd.magic,
                hd.worker_count,
                hd.busy_workers,
                hd.stealable,
                hd.active,
            );
            // Untrusted counters: only the workers in use, sums saturate.
            for w in r.workers.iter().take(i.workers as usize) {
                i.steals = i.steals.saturating_add(w.found_work);
                i.failed_steals = i.failed_steals.saturating_add(w.failed_steals);
                i.stealable_seen = i.stealable_seen.wrapping_add(w.stealable_seen);
            }
            Some(i)
        };
        let mut views = std::mem::take(&mut self.regions);
        let i = read(&mut views).unwrap_or_default();
        self.regions = views;
        i
    }

    fn round(&mut self, quantum: bool) -> Result<()> {
        let round_ns = monotonic_ns();
        // Jobs start and end through the registration server and the cgroup
        // matcher, and both send an event: a quantum round between events
        // keeps the list it has, bar a rescan now and then.
        let now_jobs = if !quantum || self.last_scan.elapsed() >= RESCAN {
            self.last_scan = Instant::now();
            Self::scan(&read_slots::<tailctl_service>(&self.h.services))
        } else {
            self.jobs.iter().map(|(id, k)| (k.slot, *id)).collect()
        };
        let mut events = Vec::new();
        for (id, _) in &self.jobs {
            if !now_jobs.iter().any(|(_, j)| j == id) {
                events.push(Event::JobExited(*id));
            }
        }
        // Keep registration order: survivors first, newcomers (in slot order) after.
        self.jobs
            .retain(|(id, _)| now_jobs.iter().any(|(_, j)| j == id));
        for &(slot, id) in &now_jobs {
            if !self.jobs.iter().any(|(j, _)| *j == id) {
                self.jobs.push((
                    id,
                    Known {
                        slot,
                        ..Known::default()
                    },
                ));
                events.push(Event::JobStarted(id));
            }
        }
        if quantum || events.is_empty() {
            events.push(Event::Quantum);
        }
        if self.jobs.is_empty() {
            return Ok(());
        }
        let machine = Machine {
            cores: self.cores,
            quantum_ns: self.cfg.quantum.as_nanos() as u64,
        };
        let mut views = Vec::with_capacity(self.jobs.len());
        let mut demands = Vec::with_capacity(self.jobs.len());
        // Mappings of regions whose registration is gone go with it.
        let jobs = &self.jobs;
        self.regions
            .retain(|(j, _)| jobs.iter().any(|(id, _)| id == j));
        let ids: Vec<(JobId, u32)> = self.jobs.iter().map(|(id, k)| (*id, k.slot)).collect();
        let accts = read_slots::<tailctl_job_acct>(&self.h.job_acct);
        let data: Vec<(Option<tailctl_job_acct>, Inputs)> = ids
            .into_iter()
            .map(|(id, slot)| {
                // The kernel's entry, if it is this registration's.
                let acct = accts
                    .get(slot as usize)
                    .copied()
                    .flatten()
                    .filter(|a| a.owner == id);
                (acct, self.inputs(slot, id))
            })
            .collect();
        for ((id, k), (acct, inputs)) in self.jobs.iter_mut().zip(data) {
            let (work, steal, token_wait, runnable) = acct.map_or((0, 0, 0, 0), |a| {
                (
                    a.work_ns.saturating_sub(k.work_ns),
                    a.steal_ns.saturating_sub(k.steal_ns),
                    a.token_wait_ns.saturating_sub(k.token_wait_ns),
                    a.runnable,
                )
            });
            // α over the window since the last reading (a job's first reading
            // has none: the policy's constant), timed by the round's one
            // clock reading.
            let window = match (acct, k.read_ns) {
                (Some(_), read) if read > 0 => Some(round_ns.saturating_sub(read)),
                _ => None,
            };
            let alpha = window.and_then(|w| saws_alpha(steal, k.allot, w));
            let token_wait = spread_token_wait(
                token_wait,
                &mut k.token_wait_carry,
                k.allot,
                window.unwrap_or(0),
            );
            if let Some(a) = acct {
                k.work_ns = a.work_ns;
                k.steal_ns = a.steal_ns;
                k.token_wait_ns = a.token_wait_ns;
                k.read_ns = round_ns;
            }
            let (steal_success, queued_avg, queued_now) = if inputs.workers == 0 {
                // No region (a cgroup job): u and Q from the kernel's accounting.
                let (u, q) = unmodified_inputs(
                    work,
                    steal,
                    token_wait,
                    k.allot,
                    window.unwrap_or(0),
                    runnable,
                );
                (u, q, q)
            } else {
                let u = match (self.cfg.saws_u, acct) {
                    (SawsU::Kernel, Some(_)) => kernel_u(work, steal)
                        .unwrap_or_else(|| inputs.steal_success(k.steals, k.failed_steals)),
                    _ => inputs.steal_success(k.steals, k.failed_steals),
                };
                let q = inputs.queued_avg(k.steals, k.failed_steals, k.stealable_seen);
                (u, q, inputs.stealable as f64)
            };
            k.steals = inputs.steals;
            k.failed_steals = inputs.failed_steals;
            k.stealable_seen = inputs.stealable_seen;
            let max_par = if inputs.workers > 0 {
                inputs.workers
            } else {
                runnable.clamp(1, MAX_WORKERS)
            };
            views.push(JobView {
                id: *id,
                allot: k.allot,
                max_parallelism: max_par,
                runnable: runnable.min(MAX_WORKERS),
                work_ns: work,
                steal_ns: steal,
                token_wait_ns: token_wait,
                steal_success,
                queued_avg,
                queued_now,
                queued_alpha: alpha,
            });
            // No region (a cgroup job, --job): its runnable threads are its demand.
            demands.push(if inputs.workers > 0 {
                inputs.demand()
            } else {
                runnable.min(MAX_WORKERS)
            });
        }
        let mut allot: Vec<u32> = self.jobs.iter().map(|(_, k)| k.allot).collect();
        for ev in events {
            self.policy.decide(ev, machine, &views, &mut allot);
        }
        if let Err(why) = check_allotment(machine, &views, &allot) {
            warn!(
                "policy {} broke its invariants ({why}); allotments unchanged",
                self.policy.name()
            );
            return Ok(());
        }
        self.seq += 1;
        for (i, (id, k)) in self.jobs.iter_mut().enumerate() {
            let want = allot[i].max(1);
            let (v, seq) = (&views[i], self.seq);
            // Nothing to write (no new allotment, desire or request shares): no syscall.
            let unchanged =
                !self.cfg.request_shares && want == k.allot && k.desire == Some(demands[i]);
            self.trace.write(|w| {
                writeln!(
                    w,
                    "{seq},{round_ns},{},{},{id},{},{},{},{:.3},{:.3},{:.0},{},{},{},{want},{}",
                    quantum as u8,
                    k.slot,
                    v.runnable,
                    v.work_ns,
                    v.steal_ns,
                    v.steal_success,
                    v.queued_avg,
                    v.queued_now,
                    v.queued_alpha.map_or("-".into(), |a| format!("{a:.3}")),
                    demands[i],
                    k.allot,
                    v.token_wait_ns
                )
            });
            if unchanged {
                self.timing.skipped += 1;
                continue;
            }
            let cmd = tailctl_allot_cmd {
                svc: k.slot,
                allot: want,
                desire: demands[i],
                reserved: 0,
                owner: *id,
                seq: self.seq,
                decided_at_ns: monotonic_ns(),
            };
            match apply(&self.h.apply_allot, &cmd) {
                Ok(1) => {
                    debug!("job {id:#x} (slot {}): allot {} -> {want}", k.slot, k.allot);
                    self.timing.changed += 1;
                    self.timing.applied += 1;
                    k.allot = want;
                    k.desire = Some(demands[i]);
                }
                Ok(0) => {
                    self.timing.applied += 1;
                    k.allot = want;
                    k.desire = Some(demands[i]);
                }
                Ok(_) => {} // gone meanwhile: the next round sees it exit
                Err(e) => warn!("applying the allotment of slot {}: {e:#}", k.slot),
            }
        }
        self.trace.end_round();
        Ok(())
    }
}

/// The part of a region the controller reads: its header and worker slots.
struct RegionHead {
    header: tailctl_header,
    workers: [tailctl_worker_slot; MAX_WORKERS as usize],
}

/// A service's region map, mapped read-only for the life of its registration.
/// Reading it costs no system call and copies 4 KiB, where a map look-up per
/// job per quantum copied the whole ~68 KiB value after two system calls to
/// open the map by id (under TCG, with 15 jobs, a round took 110 ms of a
/// 10 ms quantum).
struct RegionView {
    ptr: std::ptr::NonNull<tailctl_region>,
    len: usize,
}

impl RegionView {
    /// Map the region of service slot `slot` (None if there is none, or it is
    /// not a mappable map of a region's size).
    fn open(regions: &MapHandle, slot: u32) -> Option<Self> {
        let id = regions.lookup(&slot.to_ne_bytes(), MapFlags::ANY).ok()??;
        let id = u32::from_ne_bytes(id.get(..4)?.try_into().ok()?);
        let map = MapHandle::from_map_id(id).ok()?;
        let info = map.info().ok()?;
        if info.info.map_flags & libbpf_rs::libbpf_sys::BPF_F_MMAPABLE == 0
            || (info.info.value_size as usize) < std::mem::size_of::<tailctl_region>()
        {
            return None;
        }
        let len = (info.info.value_size as usize).div_ceil(4096) * 4096;
        // SAFETY: a fresh read-only shared mapping of a map fd we hold; the
        // kernel checks the length against the map. The mapping keeps the map
        // alive after the fd (dropped at the end of this function) is closed.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Self {
            ptr: std::ptr::NonNull::new(p.cast())?,
            len,
        })
    }

    /// A copy of the header and worker slots as they are now.
    fn head(&self) -> RegionHead {
        let r = self.ptr.as_ptr();
        // SAFETY: the mapping is live (unmapped only on drop) and holds a
        // whole tailctl_region (size checked in open); the fields are plain
        // integers, valid for any bits. The service writes them concurrently:
        // volatile reads copy whatever is there (a torn counter is a bad
        // hint, which every consumer clamps, not a fault), and no reference
        // into the shared memory is ever formed.
        unsafe {
            RegionHead {
                header: std::ptr::read_volatile(std::ptr::addr_of!((*r).header)),
                workers: std::ptr::read_volatile(std::ptr::addr_of!((*r).workers)),
            }
        }
    }
}

impl Drop for RegionView {
    fn drop(&mut self) {
        // SAFETY: our own mapping of exactly `len` bytes, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

// SAFETY: RegionView owns its mapping (a raw pointer only because it is
// shared memory); the controller's one thread reads it.
unsafe impl Send for RegionView {}

fn apply(prog: &OwnedFd, cmd: &tailctl_allot_cmd) -> Result<i32> {
    let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
        ctx_in: (cmd as *const tailctl_allot_cmd).cast(),
        ctx_size_in: std::mem::size_of::<tailctl_allot_cmd>() as u32,
        ..Default::default()
    };
    // SAFETY: `prog` is a valid program fd we own; opts points at a live
    // tailctl_allot_cmd of the size given, which the kernel only reads.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("BPF_PROG_TEST_RUN apply_allot");
    }
    Ok(opts.retval as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_inputs_are_validated() {
        let i = Inputs::from_header(REGION_MAGIC, 1000, 999, u32::MAX, u32::MAX);
        assert_eq!(
            i,
            Inputs {
                workers: 64,
                busy: 64,
                stealable: MAX_STEALABLE,
                steals: 0,
                failed_steals: 0,
                stealable_seen: 0,
            }
        );
        assert_eq!(i.demand(), 64);
        assert_eq!(Inputs::from_header(0xdead, 4, 4, 4, 4), Inputs::default());
        let i = Inputs::from_header(REGION_MAGIC, 8, 2, 3, 0);
        assert_eq!(i.demand(), 5);
        assert_eq!(Inputs::from_header(REGION_MAGIC, 4, 9, 9, 0).demand(), 4);
        // Requests waiting beyond the busy workers count as queued even when no
        // thief has looked (stealable stale at 0); a fresher, larger stealable wins.
        let i = Inputs::from_header(REGION_MAGIC, 8, 1, 0, 17);
        assert_eq!((i.stealable, i.demand()), (16, 8));
        assert_eq!(Inputs::from_header(REGION_MAGIC, 8, 2, 5, 3).stealable, 5);
        assert_eq!(Inputs::from_header(REGION_MAGIC, 8, 3, 0, 2).stealable, 0);
    }

    #[test]
    fn alpha_is_the_stealing_share_of_the_allotted_core_time() {
        // 2 cores for 10 ms, 5 ms of it stealing: a quarter of the attempts it could have made.
        assert_eq!(saws_alpha(5_000_000, 2, 10_000_000), Some(0.25));
        // More stealing than allotted (it borrowed lent CPUs): at most 1.
        assert_eq!(saws_alpha(50_000_000, 1, 10_000_000), Some(1.0));
        assert_eq!(saws_alpha(0, 1, 10_000_000), Some(0.0));
        // No allotment or no window: the policy's constant.
        assert_eq!(saws_alpha(5, 0, 10_000_000), None);
        assert_eq!(saws_alpha(5, 4, 0), None);
    }

    #[test]
    fn kernel_u_is_working_over_busy_time() {
        assert_eq!(kernel_u(3_000_000, 1_000_000), Some(0.75));
        assert_eq!(kernel_u(1, 0), Some(1.0));
        assert_eq!(kernel_u(0, 0), None);
        assert_eq!(kernel_u(u64::MAX, u64::MAX), Some(0.5));
    }

    #[test]
    fn unmodified_inputs_from_kernel_accounting() {
        let ms = 1_000_000;
        // One allotted core busy the whole 10 ms window, 7 more threads runnable.
        assert_eq!(unmodified_inputs(10 * ms, 0, 0, 1, 10 * ms, 8), (1.0, 7.0));
        // Two allotted cores, half used, nothing waiting.
        assert_eq!(unmodified_inputs(10 * ms, 0, 0, 2, 10 * ms, 1), (0.5, 0.0));
        // Two allotted cores, 15 ms of work, a holder queued 5 ms behind another task's CPU:
        // everything it was not denied, it used.
        assert_eq!(
            unmodified_inputs(15 * ms, 0, 5 * ms, 2, 10 * ms, 2),
            (1.0, 0.0)
        );
        // Lent CPUs: more work than the allotment held; u stays at 1.
        assert_eq!(unmodified_inputs(30 * ms, 0, 0, 1, 10 * ms, 4), (1.0, 3.0));
        // No window yet, or no allotment: no evidence.
        assert_eq!(unmodified_inputs(5 * ms, 0, 0, 1, 0, 1).0, 1.0);
        assert_eq!(unmodified_inputs(0, 0, 0, 0, 10 * ms, 2), (1.0, 2.0));
        // Counts past what a job can hold are clamped.
        assert_eq!(
            unmodified_inputs(0, 0, 0, 1, 10 * ms, u32::MAX).1,
            (MAX_WORKERS - 1) as f64
        );
    }

    #[test]
    fn token_wait_is_spread_over_rounds() {
        let ms = 1_000_000;
        let mut carry = 0;
        // 25 ms of wait ended in a round of 2 cores x 10 ms: 20 counted, 5 carried.
        assert_eq!(spread_token_wait(25 * ms, &mut carry, 2, 10 * ms), 20 * ms);
        assert_eq!(carry, 5 * ms);
        assert_eq!(spread_token_wait(0, &mut carry, 2, 10 * ms), 5 * ms);
        assert_eq!(carry, 0);
        // Garbage: at most a round counted and a round carried, never an overflow.
        assert_eq!(spread_token_wait(u64::MAX, &mut carry, 2, 10 * ms), 20 * ms);
        assert_eq!(carry, 20 * ms);
        // No window yet: nothing counted, the carry bounded by it.
        assert_eq!(spread_token_wait(5 * ms, &mut carry, 1, 0), 0);
        assert_eq!(carry, 0);
    }

    /// DEQ on the inputs of a cgroup job: with `Q` from its waiting threads its desire
    /// grows from the one core a new job gets (it stayed at 1 with `Q = 0`).
    #[test]
    fn deq_grows_an_unmodified_job() {
        let m = Machine {
            cores: 4,
            quantum_ns: 10_000_000,
        };
        let mut p = tailctl_allot::Deq::default();
        let mut allot = [0];
        let mut v = JobView {
            id: 7,
            max_parallelism: 8,
            runnable: 8,
            ..Default::default()
        };
        p.decide(Event::JobStarted(7), m, &[v], &mut allot);
        assert_eq!(allot, [1]);
        v.allot = 1;
        let (u, q) = unmodified_inputs(m.quantum_ns, 0, 0, 1, m.quantum_ns, 8);
        (v.steal_success, v.queued_avg, v.queued_now) = (u, q, q);
        p.decide(Event::Quantum, m, &[v], &mut allot);
        assert_eq!(allot, [4]);
    }

    #[test]
    fn asteal_reads_the_same_u_unless_told() {
        let cfg = |asteal_u| Config {
            policy: PolicyKind::Asteal,
            quantum: Duration::from_millis(10),
            request_shares: false,
            saws_u: SawsU::Steals,
            asteal_u,
        };
        let m = Machine {
            cores: 4,
            quantum_ns: 10_000_000,
        };
        // Its one core worked the whole quantum, but 9 of 10 steal attempts failed.
        let v = JobView {
            id: 1,
            allot: 1,
            max_parallelism: 4,
            runnable: 4,
            work_ns: m.quantum_ns,
            steal_success: 0.1,
            ..Default::default()
        };
        let run = |asteal_u| {
            let mut p = cfg(asteal_u).build_policy().unwrap();
            let mut allot = [1];
            p.decide(Event::Quantum, m, &[v], &mut allot);
            allot[0]
        };
        // Same u as DEQ: inefficient, the desire stays at 1; on core-time: doubles.
        assert_eq!(run(AstealU::Same), 1);
        assert_eq!(run(AstealU::CoreTime), 2);
    }

    #[test]
    fn steal_success_from_counter_deltas() {
        let mut i = Inputs::from_header(REGION_MAGIC, 4, 1, 0, 0);
        i.steals = 13;
        i.failed_steals = 130;
        // 3 successful and 27 failed rounds since the last reading.
        assert!((i.steal_success(10, 103) - 0.1).abs() < 1e-12);
        assert_eq!(i.steal_success(13, 130), 1.0);
        // Counters went backwards (region re-initialised): no evidence, 1.0.
        assert_eq!(i.steal_success(20, 0), 1.0);
        i.steals = u64::MAX;
        i.failed_steals = u64::MAX;
        assert!(i.steal_success(0, 0).is_finite());
    }

    #[test]
    fn queued_avg_over_searches() {
        let mut i = Inputs::from_header(REGION_MAGIC, 4, 1, 7, 0);
        i.steals = 10;
        i.failed_steals = 30;
        // 40 searches saw 100 stealable tasks in all since the zero reading: Q = 2.5.
        i.stealable_seen = 100;
        assert!((i.queued_avg(0, 0, 0) - 2.5).abs() < 1e-12);
        // The wrapping sum crossed 2^32 between the readings: still 100 / 40.
        i.stealable_seen = 60;
        assert!((i.queued_avg(0, 0, u32::MAX - 39) - 2.5).abs() < 1e-12);
        // No search since, or a re-initialised region: the snapshot Q'.
        assert_eq!(i.queued_avg(10, 30, 0), 7.0);
        assert_eq!(i.queued_avg(11, 0, 0), 7.0);
        // An untrusted sum is clamped.
        i.stealable_seen = u32::MAX;
        assert_eq!(i.queued_avg(9, 30, 0), MAX_STEALABLE as f64);
    }
}
