//! scx_tailctl: the kernel half of tailctl.
//!
//! Design: this binary is the loader of the sched_ext program in `bpf/`
//! (compiled by build.rs). A [`Scheduler`] opens, configures, loads and
//! attaches the BPF object, pins its maps for operators, then runs a loop that
//! serves stats until the user asks it to stop (SIGINT/SIGTERM) or the kernel
//! ejects the scheduler. The exit reason is reported the scx way (UEI); when
//! the kernel asks for a restart (SCX_ECODE_ACT_RESTART, e.g. after CPU
//! hotplug) the scheduler is loaded again.
//!
//! The BPF side makes every scheduling decision; user space configures,
//! observes, and registers services (the daemon in `services`).

mod allot;
mod bpf_intf;
mod bpf_skel;
#[cfg(test)]
mod layout_test;
mod llc;
mod pins;
mod services;
mod stats;
mod verifier;

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use log::{info, warn};
use scx_stats::prelude::*;
use scx_utils::{
    compat, scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report, UserExitInfo,
};

use bpf_intf::tailctl_stats;
use bpf_skel::*;
use stats::Metrics;

const SCHEDULER_NAME: &str = "scx_tailctl";

/// scx_tailctl: a sched_ext scheduler for interactive, request-parallel services.
///
/// Every task on the machine is scheduled by a fair, work-conserving virtual-time
/// policy weighted by nice; idle CPUs are found in select_cpu and kicked on enqueue.
#[derive(Debug, Parser)]
#[command(version)]
struct Opts {
    /// Time slice in microseconds.
    #[arg(short = 's', long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    slice_us: u64,

    /// The most vtime credit, in microseconds, a task that slept keeps over the
    /// tasks that ran meanwhile: it queues at most this far behind the most
    /// advanced running task (0: one slice, `-s`, the default). An experiment
    /// switch for wake-up latency (README, "Sleeper credit").
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    sleeper_credit_us: u64,

    /// Where a task that calls sched_yield() queues, in microseconds past the
    /// most advanced running task's vtime (0: at it, the default). An
    /// experiment switch for runtimes whose idle workers yield (README,
    /// "Yield storms").
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    yield_penalty_us: u64,

    /// Wake-up preemption, in microseconds (0: off, the default): a task that
    /// wakes and finds no idle CPU preempts the CPU whose task has run at least
    /// this long and is at least this far ahead of it in vtime, instead of
    /// waiting for a slice to end. E.g. 1000. Off by default until a run shows
    /// it helps (README, "Wake-up preemption").
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    wake_preempt_us: u64,

    /// Serialization marks, but does not cap: a request whose CPU time crosses
    /// its threshold is marked SERIALIZED (the runtime stops lending its work
    /// to thieves, as tail-control's user-space serialization does) while the
    /// threads already on it keep running, instead of being held to one token.
    /// An experiment switch: the strict cap keeps workers waiting mid-task
    /// (workloads/results/regab-6.18-serialize). With --request-shares a
    /// marked request keeps the share it had when it was marked.
    #[arg(long)]
    serialize_mark_only: bool,

    /// The order of a job's threads waiting for one of its allotment's tokens
    /// (--allot): `working-first` (the default) hands tokens (and CPUs lent
    /// to the job) to workers kept off the CPU in the middle of a task before
    /// thieves and parked workers; `fifo` in the order they started waiting.
    /// Working-first's longest token wait was lower in each of 17 paired
    /// job-arrival rounds (116-252 ms; FIFO 176-1005 ms), mean response not
    /// distinguishable (workloads/results/jobs-6.18-s17-jobqueue).
    #[arg(long, value_enum, default_value = "working-first")]
    job_queue: JobQueue,

    /// Longest a thread of a capped request waits for its request's token before
    /// it runs anyway (the liveness bound; counted as overdue_runs). Far below
    /// sched_ext's 30 s watchdog.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    max_throttle_wait_ms: u64,

    /// sched_ext's watchdog: a runnable task that has not run for this long
    /// ejects the scheduler, ms. 0 keeps the kernel's default (30 s, also its
    /// maximum). It must exceed --max-throttle-wait-ms, which a throttled
    /// thread may wait by design. Schedulers that set a shorter one (scx_bpfland:
    /// 5 s) are compared on equal terms with it.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=30_000))]
    watchdog_ms: u32,

    /// Schedule only tasks whose policy is SCHED_EXT (SCX_OPS_SWITCH_PARTIAL);
    /// by default every task on the machine is scheduled.
    #[arg(short = 'p', long)]
    partial: bool,

    /// Directory under bpffs where the scheduler's maps are pinned.
    #[arg(long, default_value = pins::DEFAULT_PIN_DIR)]
    pin_dir: std::path::PathBuf,

    /// Unix socket where tailctl-rt services register.
    #[arg(long, default_value = services::DEFAULT_SOCKET)]
    socket: std::path::PathBuf,

    /// Permissions of the registration socket (octal): who may register.
    /// The default lets root and the socket's group (--socket-group) in;
    /// 666 lets every local user register (see the README's security section).
    #[arg(long, default_value = "660", value_parser = parse_octal)]
    socket_mode: u32,

    /// Group owning the registration socket. Default: `tailctl` if that group
    /// exists, else root's group (then only root may register with mode 660).
    #[arg(long)]
    socket_group: Option<String>,

    /// Services one non-root user may have registered at once (0: no limit). A user is a
    /// uid with its subordinate uids and the user namespaces it made (see --subuid-file).
    #[arg(long, alias = "max-services-per-uid", default_value_t = 4)]
    max_services_per_user: u32,

    /// Connections one non-root user may hold (registered or not yet).
    #[arg(long, alias = "max-connections-per-uid", default_value_t = 8)]
    max_connections_per_user: u32,

    /// Connections of all non-root users together.
    #[arg(long, default_value_t = 64)]
    max_connections: u32,

    /// New connections one non-root user may open per second, in bursts of
    /// twice that (0: no limit). Each registration costs the daemon a region
    /// map, bindings and an allotment round.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    max_connect_rate: u32,

    /// The subordinate uids file (subuid(5)): a process running as a user's subordinate
    /// uid counts as that user under the limits above. Read again when it changes; a
    /// missing file is empty.
    #[arg(long, default_value = "/etc/subuid")]
    subuid_file: std::path::PathBuf,

    /// Time a client has to send its whole request line, in milliseconds.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    request_timeout_ms: u64,

    /// Core-allotment policy dividing the CPUs among registered services
    /// (jobs): off (no allotment), or one of the policies tailctl-allot knows
    /// (equi, ...). The kernel runs at most `allot` threads of a job at once.
    #[arg(long, default_value = "off", value_parser = parse_policy)]
    allot: tailctl_allot::PolicyKind,

    /// The allotment quantum: how often the controller re-decides (also on
    /// every registration and unregistration). E.g. 10ms, 50ms, 1s.
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    quantum: Duration,

    /// Where `--allot deq` takes SAWS's `u` (the busy fraction of a job's
    /// cores) from: `steals`, the runtime's steal counters in the job's region
    /// (SAWS's implementable form: successful searches over all searches), or
    /// `kernel`, the kernel's own accounting of the job's working and stealing
    /// CPU time over the quantum (SAWS's Eq. 1 exactly). A job without a
    /// region (a cgroup job) has neither: its `u` is its working time over its
    /// allotted CPU time, its queued work its threads runnable beyond the
    /// allotment.
    #[arg(long, value_enum, default_value = "steals")]
    saws_u: allot::SawsU,

    /// Where `--allot asteal` takes its utilisation from: `same`, the `u` DEQ
    /// reads (`--saws-u`; SAWS uses its sampled `u` for A-Steal too, as
    /// `tailctl sim multiprog` does), or `core-time`, working time over
    /// allotted CPU time from the kernel's accounting for every job.
    #[arg(long, value_enum, default_value = "same")]
    asteal_u: allot::AstealU,

    /// With --allot: write the controller's rounds to FILE as CSV, one line
    /// per job per round (what the policy saw, the allotment before and
    /// after; columns in the first line). For seeing how fast allotments
    /// follow load; about 100 bytes per job per quantum.
    #[arg(long, value_name = "FILE")]
    allot_trace: Option<std::path::PathBuf>,

    /// Highest priority level (0..=7, normal 3) a non-root user's service may
    /// register at. Levels above normal are served before every other task on
    /// the machine, so by default only root may use them.
    #[arg(long, default_value_t = tailctl_rt::kernel::protocol::PRIORITY_NORMAL,
          value_parser = clap::value_parser!(u8).range(0..=7))]
    max_user_priority: u8,

    /// Give the tasks of a cgroup v2 (unmodified processes) a priority level:
    /// PATH=LEVEL, e.g. /sys/fs/cgroup/batch=1. Repeatable. The cgroup itself,
    /// not its descendants.
    #[arg(long, value_name = "PATH=LEVEL", value_parser = parse_priority_cgroup)]
    priority_cgroup: Vec<(std::path::PathBuf, u8)>,

    /// With --allot: share each job's allotment among its active requests
    /// (serialized ones 1, the others an equal part of the rest), published
    /// as each request's kernel_alloc and enforced with the request tokens.
    #[arg(long)]
    request_shares: bool,

    /// Make the tasks of a cgroup v2 and of its descendants (unmodified
    /// processes) one job for the core-allotment controller (--allot):
    /// /sys/fs/cgroup/PATH; a `*` in the last component matches every cgroup
    /// there. Repeatable. Matched again every 100 ms: a cgroup created later
    /// becomes a job, a removed one's job ends and frees its slot. Nested job
    /// cgroups: a task belongs to the nearest. Each job takes a service slot,
    /// from the last one down (at most 8 cgroup jobs at once; one more is
    /// logged and waits for a slot); the kernel runs at most `allot` of its
    /// threads at once. The directory holding the last component must exist.
    #[arg(long, value_name = "PATH")]
    job: Vec<std::path::PathBuf>,

    /// Starvation guard: a lower priority level (normal included) that has
    /// had work waiting this long gets one dispatch, so no level nears the
    /// watchdog (see the README's priority section for the bound).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=5_000))]
    priority_guard_ms: u64,

    /// Nice value of the daemon's own threads (registration, allotment
    /// controller, stats), set at start and inherited by every thread it
    /// creates. At nice 0 the daemon shares the CPU with every runnable
    /// thread: in the 4-vCPU guest with 12 jobs of 4 workers, its controller
    /// woke 34 ms late on average and a BIND went unanswered past the
    /// runtime's 5 s. 0 leaves it as started.
    #[arg(long, default_value_t = -10, value_parser = clap::value_parser!(i32).range(-20..=19))]
    nice: i32,

    /// Print scheduler statistics every SECS seconds while running.
    #[arg(long, value_name = "SECS", value_parser = parse_interval)]
    stats: Option<f64>,

    /// Only monitor the statistics of a running scx_tailctl every SECS seconds;
    /// do not load a scheduler.
    #[arg(long, value_name = "SECS", value_parser = parse_interval)]
    monitor: Option<f64>,

    /// Print the stats once as JSON and exit (with --monitor).
    #[arg(long, requires = "monitor")]
    json: bool,

    /// Queue normal-level (unregistered) tasks per last-level cache, with
    /// stealing between the queues (`on`), or on one shared queue (`off`,
    /// for A/B runs). A machine with one LLC has one queue either way.
    #[arg(long, value_enum, default_value = "on")]
    llc_queues: OnOff,

    /// Testing aid: with --llc-queues on, split the online CPUs into this
    /// many groups of consecutive CPUs, each with its own queue, instead of
    /// one per LLC of the topology (0: the topology).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=32))]
    llc_groups: u32,

    /// Exit debug dump buffer length. 0 means the kernel's default.
    #[arg(long, default_value_t = 0)]
    exit_dump_len: u32,

    /// Developer aid: write the level-2 verifier log (every instruction the
    /// verifier's walk processed) of the programs named by
    /// --verifier-log-prog to DIR/PROGRAM.log, after the load whether it
    /// succeeded or not. Large: a walk near the verifier's limit writes about
    /// 1 GiB. tools/verifier-hotspots.py attributes the walk to source lines.
    #[arg(long, value_name = "DIR")]
    verifier_log: Option<std::path::PathBuf>,

    /// With --verifier-log: the programs whose logs to write (repeatable;
    /// each takes a buffer of up to 1 GiB).
    #[arg(long, value_name = "NAME", default_value = "tailctl_dispatch")]
    verifier_log_prog: Vec<String>,

    /// Enable libbpf debug output.
    #[arg(short = 'v', long)]
    verbose: bool,
}

/// `--job-queue`: the order of a job's token waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum JobQueue {
    WorkingFirst,
    Fifo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

/// Give the daemon's threads nice `nice` (threads created later inherit it).
/// A failure (no CAP_SYS_NICE) is logged, not fatal: the daemon only answers
/// later under load.
fn set_nice(nice: i32) {
    if nice == 0 {
        return;
    }
    // SAFETY: setpriority takes plain integers; who = 0 is the calling thread
    // (per-thread nice on Linux), before any other thread of ours but the
    // signal handler's exists.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc != 0 {
        warn!(
            "cannot set the daemon's nice to {nice}: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn parse_policy(s: &str) -> Result<tailctl_allot::PolicyKind, String> {
    s.parse()
}

/// "10ms", "500us", "1s" or a bare number of milliseconds; 1 ms to 10 s.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "ms"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 10ms"))?;
    let secs = match unit {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        _ => return Err(format!("{s:?}: unit must be us, ms or s")),
    };
    // try_: a NaN, an infinity or a huge number is an error, not a panic.
    let d = Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("{s:?}: the quantum must be between 1ms and 10s"))?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(10) {
        return Err(format!("{s:?}: the quantum must be between 1ms and 10s"));
    }
    Ok(d)
}

/// A --stats/--monitor interval in seconds: finite, from 0.01 s to an hour.
fn parse_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.01..=3600.0).contains(&v) {
        return Err(format!(
            "{s:?}: the interval must be between 0.01 and 3600 seconds"
        ));
    }
    Ok(v)
}

/// "PATH=LEVEL" with LEVEL in 0..=7.
fn parse_priority_cgroup(s: &str) -> Result<(std::path::PathBuf, u8), String> {
    let (path, level) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected PATH=LEVEL"))?;
    let level: u8 = level
        .parse()
        .ok()
        .filter(|l| *l <= tailctl_rt::kernel::protocol::MAX_PRIORITY)
        .ok_or_else(|| format!("{s:?}: LEVEL must be 0..=7"))?;
    if path.is_empty() {
        return Err(format!("{s:?}: empty cgroup path"));
    }
    Ok((path.into(), level))
}

fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal file mode like 666 or 660"))
}

/// A watchdog that would eject the scheduler for a wait it allows by design
/// (a throttled thread waits up to --max-throttle-wait-ms) is refused.
fn check_watchdog(watchdog_ms: u32, max_throttle_wait_ms: u64) -> Result<()> {
    if watchdog_ms != 0 && u64::from(watchdog_ms) <= max_throttle_wait_ms {
        bail!(
            "--watchdog-ms {watchdog_ms} must be above --max-throttle-wait-ms {max_throttle_wait_ms}: \
             a throttled thread may wait that long by design"
        );
    }
    Ok(())
}

/// Why the scheduler cannot be loaded here, found before touching libbpf so
/// the user gets a sentence instead of an errno.
fn check_kernel() -> Result<()> {
    let state_path = std::path::Path::new("/sys/kernel/sched_ext/state");
    if !state_path.exists() {
        bail!(
            "this kernel ({}) has no sched_ext (/sys/kernel/sched_ext is missing; \
             it needs CONFIG_SCHED_CLASS_EXT=y). Run the scheduler in a VM: `tailctl vm run -- ...`",
            kernel_release()
        );
    }
    let state = std::fs::read_to_string(state_path)
        .with_context(|| format!("reading {}", state_path.display()))?;
    let state = state.trim();
    if state != "disabled" {
        let ops = std::fs::read_to_string("/sys/kernel/sched_ext/root/ops")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        bail!(
            "another sched_ext scheduler is loaded (state {state}, ops {ops}); \
             stop it before starting {SCHEDULER_NAME}"
        );
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!("{SCHEDULER_NAME} must run as root (loading a sched_ext scheduler needs CAP_SYS_ADMIN and CAP_BPF)");
    }
    services::identity::check_init_pid_ns()
}

/// The socket's group: the one asked for (which must exist), or `tailctl`
/// when it exists, or none (root's).
fn socket_group(name: Option<&str>) -> Result<Option<u32>> {
    let lookup = |n: &str| {
        nix::unistd::Group::from_name(n)
            .with_context(|| format!("looking up group {n}"))
            .map(|g| g.map(|g| g.gid.as_raw()))
    };
    match name {
        Some(n) => match lookup(n)? {
            Some(gid) => Ok(Some(gid)),
            None => bail!("--socket-group {n}: no such group"),
        },
        None => {
            let gid = lookup("tailctl")?;
            if gid.is_none() {
                info!("no group `tailctl`: only root may register (see --socket-group, --socket-mode)");
            }
            Ok(gid)
        }
    }
}

/// Whether a waiter moved to the head of another CPU's local queue needs a preempting kick
/// besides the move's SCX_ENQ_PREEMPT: on 6.16 the move alone did not preempt (guest test
/// `waitjob`), on 6.18 and 7.3 it did. Kernels in between, and releases that do not parse,
/// get the kick.
fn needs_head_move_kick(release: &str) -> bool {
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    match (v.next().flatten(), v.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) < (6, 18),
        _ => true,
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    struct_ops: Option<libbpf_rs::Link>,
    pins: pins::Pins,
    registration: Option<services::RegistrationServer>,
    controller: Option<allot::Controller>,
    stats_server: StatsServer<(), Metrics>,
    /// Normal-level queues (LLC groups) the BPF side was loaded with.
    nr_llcs: u32,
    /// ops.timeout_ms as loaded (0: the kernel's default).
    watchdog_ms: u32,
}

impl<'a> Scheduler<'a> {
    /// `allot_trace`: the --allot-trace file, opened once for every restart.
    fn init(
        opts: &'a Opts,
        open_object: &'a mut MaybeUninit<OpenObject>,
        allot_trace: Option<&std::fs::File>,
    ) -> Result<Self> {
        scx_utils::try_set_rlimit_infinity();
        // What can be refused without the kernel is refused before anything is
        // loaded or pinned.
        let socket_access = services::SocketAccess {
            mode: opts.socket_mode,
            gid: socket_group(opts.socket_group.as_deref())?,
        };

        let mut skel_builder = BpfSkelBuilder::default();
        skel_builder.obj_builder.debug(opts.verbose);
        let mut skel = scx_ops_open!(skel_builder, open_object, tailctl_ops, None)?;

        let ops = skel.struct_ops.tailctl_ops_mut();
        ops.exit_dump_len = opts.exit_dump_len;
        ops.timeout_ms = opts.watchdog_ms;
        // ENQ_LAST: a CPU's last runnable task comes back through ops.enqueue
        // instead of being kept running by the kernel, so a thread whose
        // request is at its cap is really taken off the CPU.
        // ALLOW_QUEUED_WAKEUP: a wake-up onto another CPU is queued to that
        // CPU (an IPI runs ops.enqueue there) instead of the waker taking the
        // remote runqueue's lock and updating its clock. Without it, in the
        // guest, a sleeping task was charged for part of its CPU's idle time:
        // a pinned redis-server 3.3-4.1 s of sum_exec_runtime (and of its CPU's
        // sched_info run time) against 1.9-2.3 s with it, 1.9-2.4 s under the
        // default and scx_bpfland (which sets it), both kernels
        // (workloads/results/bench-redis-6.18-s14, placement-probe.sh). Requests
        // are charged from sum_exec_runtime. ops.enqueue may now come without
        // a preceding ops.select_cpu: a worker's woke_idle is then false (it is
        // cleared at every enqueue) and it takes the shared queue's path.
        ops.flags = *compat::SCX_OPS_ENQ_LAST
            | *compat::SCX_OPS_ALLOW_QUEUED_WAKEUP
            | if opts.partial {
                *compat::SCX_OPS_SWITCH_PARTIAL
            } else {
                0
            };

        let rodata = skel.maps.rodata_data.as_mut().unwrap();
        rodata.slice_ns = opts.slice_us * 1000;
        rodata.wake_preempt_ns = opts.wake_preempt_us * 1000;
        rodata.sleeper_credit_ns = opts.sleeper_credit_us * 1000;
        rodata.yield_penalty_ns = opts.yield_penalty_us * 1000;
        rodata.allot_controller = opts.allot.build().is_some();
        rodata.serialize_mark_only = opts.serialize_mark_only;
        rodata.job_queue_fifo = opts.job_queue == JobQueue::Fifo;
        rodata.max_throttle_wait_ns = opts.max_throttle_wait_ms * 1_000_000;
        rodata.tid_start_tick_ns = services::identity::clock_tick_ns();
        rodata.prio_guard_ns = opts.priority_guard_ms * 1_000_000;
        let prio_cgroups = opts
            .priority_cgroup
            .iter()
            .map(|(path, level)| {
                Ok((
                    services::cgjobs::cgroup_id(path, "--priority-cgroup")?,
                    *level,
                    path,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        rodata.nr_prio_cgroups = prio_cgroups.len() as u32;
        services::cgjobs::check_patterns(&opts.job)?;
        // Non-zero: the kernel looks cgroup jobs up (they may appear at any time).
        rodata.nr_job_cgroups = opts.job.len() as u32;
        rodata.request_shares = opts.request_shares;
        rodata.head_move_kick = needs_head_move_kick(&kernel_release());
        let llcs = llc::groups(opts.llc_queues == OnOff::On, opts.llc_groups)?;
        rodata.nr_llcs = llcs.nr;
        for &(cpu, group) in &llcs.cpus {
            if let Some(slot) = rodata.cpu_llc.get_mut(cpu) {
                *slot = group;
            }
        }

        let capture = match &opts.verifier_log {
            Some(dir) => Some(verifier::LogCapture::arm(
                libbpf_rs::skel::OpenSkel::open_object_mut(&mut skel),
                dir,
                &opts.verifier_log_prog,
            )?),
            None => None,
        };
        let loaded = scx_ops_load!(skel, tailctl_ops, uei);
        if let Some(capture) = capture {
            // The load's own error matters more than the log's.
            if let Err(e) = capture.write() {
                warn!("verifier log: {e:#}");
            }
        }
        let mut skel = loaded?;
        // The margin left under the verifier's limit, for whoever changes the
        // BPF side next (the guest tests print it).
        let walks = verifier::walks(libbpf_rs::skel::Skel::object(&skel));
        if let Some(heaviest) = walks.first() {
            info!(
                "verifier: heaviest program {}",
                verifier::describe(heaviest)
            );
        }
        for w in walks.iter().skip(1) {
            log::debug!("verifier: {}", verifier::describe(w));
        }
        for (id, level, path) in &prio_cgroups {
            skel.maps
                .prio_cgroups
                .update(
                    &id.to_ne_bytes(),
                    &u32::from(*level).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .with_context(|| format!("setting the level of cgroup {}", path.display()))?;
            info!("cgroup {} (id {id}): priority {level}", path.display());
        }

        // Pin before attaching so an operator never sees a running scheduler
        // without its maps.
        let maps = &mut skel.maps;
        let pins = pins::Pins::create(
            &opts.pin_dir,
            &mut [
                ("stats", &mut maps.stats),
                ("services", &mut maps.services),
                ("worker_tids", &mut maps.worker_tids),
                ("req_acct", &mut maps.req_acct),
                ("regions", &mut maps.regions),
                ("registered", &mut maps.registered),
                ("cpu_runs", &mut maps.cpu_runs),
                ("job_acct", &mut maps.job_acct),
                ("job_cpus", &mut maps.job_cpus),
                ("job_cgroups", &mut maps.job_cgroups),
            ],
        )?;

        // The socket exists before the scheduler shows as enabled: a service
        // started on that signal finds it (connections wait for the accept
        // loop, started once attached).
        let listening = services::RegistrationServer::listen(&opts.socket, &socket_access)?;
        let struct_ops = Some(scx_ops_attach!(skel, tailctl_ops)?);
        let (events_tx, events_rx) = std::sync::mpsc::channel();
        let controller = match opts.allot.build() {
            None => None,
            Some(_) => Some(allot::Controller::start(
                allot::Config {
                    policy: opts.allot,
                    quantum: opts.quantum,
                    request_shares: opts.request_shares,
                    saws_u: opts.saws_u,
                    asteal_u: opts.asteal_u,
                },
                allot::Handles {
                    services: libbpf_rs::MapHandle::try_from(&skel.maps.services)?,
                    regions: libbpf_rs::MapHandle::try_from(&skel.maps.regions)?,
                    job_acct: libbpf_rs::MapHandle::try_from(&skel.maps.job_acct)?,
                    apply_allot: std::os::fd::AsFd::as_fd(&skel.progs.apply_allot)
                        .try_clone_to_owned()
                        .context("duplicating the apply_allot program fd")?,
                    trace: match allot_trace {
                        None => None,
                        Some(f) => Some(
                            f.try_clone()
                                .context("--allot-trace: duplicating the file handle")?,
                        ),
                    },
                },
                events_rx,
            )?),
        };
        let registration = Some(listening.serve(
            &socket_access,
            services::Limits {
                services_per_user: opts.max_services_per_user,
                connections_per_user: opts.max_connections_per_user,
                connections: opts.max_connections,
                request_timeout: Duration::from_millis(opts.request_timeout_ms),
                max_user_priority: opts.max_user_priority,
                connect_rate: opts.max_connect_rate,
                subuid_file: opts.subuid_file.clone(),
            },
            services::ServerMaps {
                regions: &skel.maps.regions,
                services: &skel.maps.services,
                worker_tids: &skel.maps.worker_tids,
                registered: &skel.maps.registered,
                bind_gen: &skel.maps.bind_gen,
                job_cgroups: &skel.maps.job_cgroups,
            },
            &opts.job,
        )?);
        if let (Some(_), Some(r)) = (&controller, &registration) {
            r.notify_to(events_tx);
        }
        let stats_server = StatsServer::new(stats::server_data()).launch()?;

        info!(
            "{SCHEDULER_NAME} attached ({} mode, slice {} us, maps pinned in {})",
            if opts.partial { "partial" } else { "full" },
            opts.slice_us,
            opts.pin_dir.display()
        );

        Ok(Self {
            skel,
            struct_ops,
            pins,
            registration,
            controller,
            stats_server,
            nr_llcs: llcs.nr,
            watchdog_ms: opts.watchdog_ms,
        })
    }

    /// Sum the per-CPU counters of the stats map.
    fn metrics(&self) -> Result<Metrics> {
        let key = 0u32.to_ne_bytes();
        let per_cpu = self
            .skel
            .maps
            .stats
            .lookup_percpu(&key, MapFlags::ANY)
            .context("reading the stats map")?
            .unwrap_or_default();
        let mut m = Metrics {
            nr_llcs: u64::from(self.nr_llcs),
            watchdog_timeout_ms: i64::from(self.watchdog_ms),
            ..Metrics::default()
        };
        for bytes in per_cpu {
            if bytes.len() < std::mem::size_of::<tailctl_stats>() {
                bail!(
                    "stats map value is {} bytes, expected {}",
                    bytes.len(),
                    std::mem::size_of::<tailctl_stats>()
                );
            }
            // SAFETY: the buffer holds at least one tailctl_stats (checked
            // above), a plain-old-data struct of u64s for which every bit
            // pattern is valid; read_unaligned copes with the Vec's alignment.
            let s: tailctl_stats = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            m.add(&s);
        }
        m.nr_cpus = libbpf_rs::num_possible_cpus().unwrap_or(0) as u64;
        Ok(m)
    }

    fn exited(&mut self) -> bool {
        uei_exited!(&self.skel, uei)
    }

    fn run(&mut self, shutdown: Arc<AtomicBool>) -> Result<UserExitInfo> {
        let (res_ch, req_ch) = self.stats_server.channels();
        while !shutdown.load(Ordering::Relaxed) && !self.exited() {
            // Polled with a sleep, not a blocking receive with a timeout: in the
            // guest, with registered services keeping every CPU busy, the
            // channel's timed receive never blocked (0 voluntary context
            // switches in 10 s) and this thread ran 98% of a CPU. A stats
            // request waits at most one poll (50 ms; `--stats` asks once a
            // second).
            match req_ch.try_recv() {
                Ok(()) => res_ch.send(self.metrics()?)?,
                Err(e) if e.is_empty() => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => Err(e)?,
            }
        }
        // The counters since load, for whoever keeps this log (tailctl-jobs does).
        if let Ok(m) = self.metrics() {
            let mut buf = Vec::new();
            if m.format(&mut buf).is_ok() {
                info!(
                    "counters since load:\n{}",
                    String::from_utf8_lossy(&buf).trim_end()
                );
            }
        }
        // Stop registering, then detach: the kernel falls back to the default
        // scheduler at once, and registered runtimes see their connection close.
        let _ = self.registration.take();
        let _ = self.controller.take();
        let _ = self.struct_ops.take();
        uei_report!(&self.skel, uei)
    }
}

impl Drop for Scheduler<'_> {
    fn drop(&mut self) {
        self.pins.remove();
        info!("unregistered {SCHEDULER_NAME}");
    }
}

fn init_log(verbose: bool) -> Result<()> {
    let level = if verbose {
        simplelog::LevelFilter::Debug
    } else {
        simplelog::LevelFilter::Info
    };
    let mut cfg = simplelog::ConfigBuilder::new();
    cfg.set_time_level(simplelog::LevelFilter::Error)
        .set_location_level(simplelog::LevelFilter::Off)
        .set_target_level(simplelog::LevelFilter::Off)
        .set_thread_level(simplelog::LevelFilter::Off);
    simplelog::TermLogger::init(
        level,
        cfg.build(),
        simplelog::TerminalMode::Stderr,
        // termcolor's Auto colours a file or pipe too (it looks only at TERM):
        // a log written to a file must be plain text.
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            simplelog::ColorChoice::Auto
        } else {
            simplelog::ColorChoice::Never
        },
    )?;
    Ok(())
}

fn main() -> Result<()> {
    let opts = Opts::parse();
    init_log(opts.verbose)?;

    let shutdown = Arc::new(AtomicBool::new(false));
    let shutdown_clone = shutdown.clone();
    ctrlc::set_handler(move || shutdown_clone.store(true, Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM handler")?;

    if let Some(intv) = opts.monitor {
        if opts.json {
            return stats::print_json_once();
        }
        return stats::monitor(Duration::from_secs_f64(intv), shutdown);
    }

    check_watchdog(opts.watchdog_ms, opts.max_throttle_wait_ms)?;
    check_kernel()?;
    set_nice(opts.nice);

    if let Some(intv) = opts.stats {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            if let Err(e) = stats::monitor(Duration::from_secs_f64(intv), shutdown) {
                warn!("stats monitor stopped: {e:#}");
            }
        });
    }

    // Once, before anything is loaded: a bad path is refused first, and a
    // restart the kernel asks for appends to the same trace.
    let allot_trace = match &opts.allot_trace {
        None => None,
        Some(p) => Some(
            std::fs::File::create(p)
                .with_context(|| format!("--allot-trace: cannot create {}", p.display()))?,
        ),
    };
    let mut open_object = MaybeUninit::uninit();
    loop {
        let mut sched = Scheduler::init(&opts, &mut open_object, allot_trace.as_ref())?;
        let uei = sched.run(shutdown.clone())?;
        if uei.should_restart() && !shutdown.load(Ordering::Relaxed) {
            info!("the kernel asked for a restart; loading {SCHEDULER_NAME} again");
            continue;
        }
        break;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_move_kick_before_6_18() {
        assert!(needs_head_move_kick("6.16.12+deb13-cloud-amd64"));
        assert!(needs_head_move_kick("6.17.13+deb13-cloud-amd64"));
        assert!(!needs_head_move_kick("6.18.15+deb13-cloud-amd64"));
        assert!(!needs_head_move_kick("7.3.4+deb13-cloud-amd64"));
        assert!(needs_head_move_kick("unknown"));
    }

    #[test]
    fn per_user_limits_keep_their_old_names() {
        let o = Opts::try_parse_from([
            "scx_tailctl",
            "--max-services-per-uid",
            "3",
            "--max-connections-per-uid",
            "5",
        ])
        .unwrap();
        assert_eq!(
            (o.max_services_per_user, o.max_connections_per_user),
            (3, 5)
        );
        let o = Opts::try_parse_from(["scx_tailctl", "--max-services-per-user", "2"]).unwrap();
        assert_eq!(o.max_services_per_user, 2);
    }

    #[test]
    fn a_watchdog_at_or_below_the_wait_bound_is_refused() {
        let o = Opts::try_parse_from(["scx_tailctl"]).unwrap();
        assert_eq!(o.watchdog_ms, 0);
        assert!(check_watchdog(o.watchdog_ms, o.max_throttle_wait_ms).is_ok());
        let o = Opts::try_parse_from(["scx_tailctl", "--watchdog-ms", "5000"]).unwrap();
        assert!(check_watchdog(o.watchdog_ms, o.max_throttle_wait_ms).is_ok());
        let err = check_watchdog(1000, 1000).unwrap_err().to_string();
        assert!(err.contains("--max-throttle-wait-ms 1000"), "{err}");
        // Above the kernel's maximum (30 s) the parser refuses it.
        assert!(Opts::try_parse_from(["scx_tailctl", "--watchdog-ms", "30001"]).is_err());
    }

    #[test]
    fn intervals_out_of_range_or_not_finite_are_refused() {
        assert_eq!(parse_interval("1"), Ok(1.0));
        assert_eq!(parse_interval("0.5"), Ok(0.5));
        for bad in ["nan", "inf", "-1", "0", "1e9", "x", ""] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quanta_that_overflow_a_duration_are_errors_not_panics() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        for bad in ["99999999999999999999999s", "nans", "infms", "-5ms", "0.1us"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
