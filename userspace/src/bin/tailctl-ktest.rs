//! tailctl-ktest: the experiments behind kernel-assisted tail-control's
//! claims, run in a sched_ext kernel beside a running `scx_tailctl`
//! (tools/vm/guest-tests.sh drives them; each prints one JSON object).
//!
//! - `serialize`: one huge parallel request and a stream of small ones. Reads
//!   the scheduler's own per-request counters (the pinned `req_acct` map) to
//!   show the huge request never runs more than one thread once serialization
//!   settled (threads let through by the wait bound are counted apart), and
//!   how long settling took; `--user-only` measures the runtime's lazy
//!   serialization instead, on the same workload; `--compare --rounds N`
//!   alternates the two modes N times each in one process (a fresh pool per
//!   run) and reports both settle latencies side by side. Every run reports
//!   how many threads ran the huge request at once before its mark: a run
//!   where it never ran in parallel had nothing to serialize.
//! - `account`: sequential requests of known CPU time, optionally beside a CPU
//!   hog; compares the kernel's charge with the true thread CPU time and with
//!   the runtime's wall-clock figure.
//! - `serve`: a well-behaved service; reports requests per second.
//! - `rogue`: registers, then writes random garbage into its own region.
//! - `hog`: an unregistered CPU-bound neighbour; reports the CPU it got
//!   (`cpus`, also as `share`: CPUs' worth of time over wall time).
//! - `greedy`: a service keeping many requests in flight, with a 1 ns
//!   threshold (every request capped) or none (`--benign`, its twin).
//! - `churn`: a serialized service whose workers are re-pinned, re-niced,
//!   switched in and out of SCHED_EXT and/or sleep and wake all the time;
//!   then it quiesces and reports the kernel's per-request counters, which
//!   must all be back at zero (no leaked token, wait count or runner).
//! - `hold`: two workers on one serialized request, nothing else running:
//!   the wait bound must hold without any other CPU dispatching.
//! - `reuse`: the victim serializes a request and waits to be killed;
//!   `--successor` then registers into the same slot and reports
//!   whether its first request (same tag) inherited anything.
//! - `stats`: the scheduler's counters summed over CPUs (the pinned map).
//! - `fuzz`: registers spinning threads as workers and writes random bytes
//!   and random *coherent* values (valid magic, its own and other processes'
//!   tids, request tags that match their slots, tiny thresholds) into its
//!   region, so the scheduler's accounting and throttling run on nonsense;
//!   `--benign` is the same process writing into private memory.
//! - `prio`: registers at a priority level (`--level`, issue 13) with
//!   `--threads` CPU-bound workers (plain spinning, no requests) and reports
//!   its service slot and the CPU it got; `--unregistered` is the same
//!   process without registering. A refused registration exits non-zero
//!   with the daemon's reason.

#[path = "../bpf_intf.rs"]
#[allow(dead_code, clippy::all)]
mod bpf_intf;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde_json::json;
use tailctl_rt::kernel::link::{AssistedPool, DEFAULT_SOCKET};
use tailctl_rt::shared_state::{FLAG_SERIALIZED, MAX_REQUESTS, REQ_FREE};
use tailctl_rt::threshold::ThresholdTable;
use tailctl_rt::{parallel_for, Policy, Pool, RequestHandle};

use bpf_intf::{tailctl_cpu_run, tailctl_job_acct, tailctl_request_acct, tailctl_stats};

#[derive(Parser)]
#[command(about = "kernel-assisted tail-control experiments (run beside scx_tailctl)")]
struct Cli {
    /// The daemon's registration socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Where scx_tailctl pinned its maps.
    #[arg(long, default_value = "/sys/fs/bpf/tailctl")]
    pin_dir: PathBuf,
    /// Workers in the pool.
    #[arg(short, long, default_value_t = 4)]
    workers: usize,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Serialize {
        /// CPU work of the huge request (ms).
        #[arg(long, default_value_t = 1200)]
        huge_ms: u64,
        /// Serialization threshold (ms of work), the same at every load.
        #[arg(long, default_value_t = 40)]
        threshold_ms: u64,
        /// CPU work of each small request (ms) and the gap between them.
        #[arg(long, default_value_t = 4)]
        small_ms: u64,
        #[arg(long, default_value_t = 15)]
        small_every_ms: u64,
        /// Do not register: the runtime's own (lazy, wall-clock) serialization.
        #[arg(long)]
        user_only: bool,
        /// Run both modes, user-space lazy and kernel, alternately (`--rounds`
        /// times each, the order flipping every round) on the same workload,
        /// and report them side by side.
        #[arg(long, conflicts_with = "user_only")]
        compare: bool,
        /// Rounds of `--compare`.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
        rounds: u32,
        /// Pin worker w to CPU w (mod the CPU count) before the huge request.
        #[arg(long)]
        pin: bool,
        /// Act hostile: clear the kernel's SERIALIZED marks, so workers keep
        /// stealing the huge request and queue for its token.
        #[arg(long)]
        ignore_cap: bool,
    },
    Account {
        /// CPU time of each sequential request (ms), and how many.
        #[arg(long, default_value_t = 300)]
        ms: u64,
        #[arg(long, default_value_t = 4)]
        count: u32,
        /// Split each request into this many bursts; between two, the worker
        /// sleeps until a pacer thread on `--pacer-cpu` wakes it (a wake-up
        /// from another CPU, as a server's by its client).
        #[arg(long, default_value_t = 1)]
        chunks: u32,
        /// The pacer's period (us); 0: ping-pong instead, the pacer answering
        /// each burst at once over a socket, as a client waiting for its reply.
        #[arg(long, default_value_t = 2000)]
        pace_us: u64,
        #[arg(long, default_value_t = 0)]
        pacer_cpu: usize,
        /// Also report how busy this CPU was over all requests (the worker
        /// should be pinned there): wall time less its idle time in
        /// /proc/stat, a clock independent of what tasks are charged.
        #[arg(long)]
        busy_cpu: Option<usize>,
    },
    Serve {
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Require kernel assistance (fail if the daemon does not accept us).
        #[arg(long)]
        require_kernel: bool,
        /// Parallel items per request (batches of 8 requests).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
        items: u64,
        /// CPU time of one item, us: with 500 a worker moves to another
        /// request at most of its ticks; with items longer than a tick it mostly
        /// stays on one (what ops.tick's request accounting costs depends
        /// on which).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        item_us: u64,
        /// The service's (flat) threshold, ms: keep it above a request's
        /// CPU time, or the kernel serializes the requests.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        threshold_ms: u64,
    },
    Rogue {
        #[arg(long, default_value_t = 30)]
        secs: u64,
        /// Same threads and work, but scribble on a private buffer: the
        /// baseline neighbour for the rogue's throughput comparison.
        #[arg(long)]
        benign: bool,
        /// Register without a threshold, so the kernel never caps a request:
        /// the twin a rogue must be compared with. A rogue's garbage leaves
        /// the kernel no request to cap, which gets it exactly what any
        /// service may ask for by registering without thresholds; a capped
        /// twin runs one worker fewer by its own choice.
        #[arg(long)]
        no_cap: bool,
    },
    Hog {
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// CPU-bound threads (default: one per CPU).
        #[arg(long)]
        threads: Option<usize>,
    },
    Greedy {
        #[arg(long, default_value_t = 40)]
        secs: u64,
        /// Requests kept in flight.
        #[arg(long, default_value_t = 64)]
        requests: usize,
        /// Serialization threshold in ns (at every load).
        #[arg(long, default_value_t = 1)]
        threshold_ns: u64,
        /// No threshold: the same service, never capped.
        #[arg(long)]
        benign: bool,
        /// Act hostile: keep clearing SERIALIZED in the region, so workers
        /// keep stealing capped requests and queue for their tokens.
        #[arg(long)]
        ignore_cap: bool,
        /// Items per request, CPU per item (us) and sleep after each (us).
        #[arg(long, default_value_t = 2)]
        items: usize,
        #[arg(long, default_value_t = 500_000)]
        item_us: u64,
        #[arg(long, default_value_t = 0)]
        sleep_us: u64,
        /// A change of load: after this many seconds (0: never), keep
        /// `--grow-requests` requests in flight instead of `--requests`.
        #[arg(long, default_value_t = 0)]
        grow_after: u64,
        #[arg(long, default_value_t = 16)]
        grow_requests: usize,
        /// Sample the kernel's per-worker `descheduled` flags in the region
        /// every 2 ms and report how often any was set (mugging, issue 12).
        #[arg(long)]
        watch_desched: bool,
        /// Lie about its desire (an attack on the allotment controller):
        /// every millisecond, claim every worker busy, the most stealable
        /// work a region can show, and searches that always succeed and
        /// always see that much (not the active-request count, which the
        /// runtime's own shutdown and request tracking rely on).
        #[arg(long)]
        inflate_desire: bool,
    },
    Churn {
        #[arg(long, default_value_t = 20)]
        secs: u64,
        /// Requests kept in flight.
        #[arg(long, default_value_t = 16)]
        requests: usize,
        #[arg(long, default_value_t = 2)]
        threshold_ms: u64,
        /// Re-pin workers to random CPUs (or all) all the time.
        #[arg(long)]
        affinity: bool,
        /// Re-nice workers all the time.
        #[arg(long)]
        nice: bool,
        /// Switch workers between SCHED_EXT and SCHED_OTHER (for --partial),
        /// leaving half of them outside sched_ext at the end.
        #[arg(long)]
        policy: bool,
        /// Work items sleep and wake (sub-ms) between bursts.
        #[arg(long)]
        sleep: bool,
    },
    Hold {
        /// CPU work of each of the two halves.
        #[arg(long, default_value_t = 4)]
        secs: u64,
        /// Serialization threshold: high enough on one CPU that both workers
        /// are on the request before it is capped (the runtime stops stealing
        /// from a capped request).
        #[arg(long, default_value_t = 5)]
        threshold_ms: u64,
    },
    Reuse {
        /// Register after the victim was killed (default: be the victim).
        #[arg(long)]
        successor: bool,
    },
    Stats,
    Prio {
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Priority level to register at (absent: the daemon's default, normal).
        #[arg(long)]
        level: Option<u8>,
        /// CPU-bound worker threads (default: one per CPU).
        #[arg(long)]
        threads: Option<usize>,
    },
    Fuzz {
        #[arg(long, default_value_t = 60)]
        secs: u64,
        /// Registered threads (they spin and sleep in bursts).
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Same threads and writes, into private memory: the well-behaved twin.
        #[arg(long)]
        benign: bool,
    },
}

/// Burn exactly `d` of this thread's CPU time, however often it is preempted.
fn burn_cpu(d: Duration) {
    let start = thread_cpu();
    while thread_cpu() - start < d {
        for _ in 0..1000 {
            std::hint::spin_loop();
        }
    }
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Acct {
    map: MapHandle,
    /// `cpu_runs`: what each CPU runs now. A request's running threads are the CPUs that name
    /// it; most starts (uncapped) count nowhere else.
    cpus: MapHandle,
    ncpu: u32,
}

impl Acct {
    fn open(pin_dir: &Path) -> Result<Self> {
        let path = pin_dir.join("req_acct");
        let map = MapHandle::from_pinned_path(&path).with_context(|| {
            format!(
                "opening {} (is scx_tailctl running? are you root?)",
                path.display()
            )
        })?;
        let path = pin_dir.join("cpu_runs");
        let cpus = MapHandle::from_pinned_path(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let ncpu = libbpf_rs::num_possible_cpus()? as u32;
        Ok(Self { map, cpus, ncpu })
    }

    /// Threads of request `tag` of service slot `svc` running now: the CPUs that name it.
    fn running(&self, svc: u32, tag: u64) -> Result<u32> {
        let idx = svc * MAX_REQUESTS as u32 + (tag as u32);
        let mut n = 0;
        for cpu in 0..self.ncpu {
            let Some(v) = self.cpus.lookup(&cpu.to_ne_bytes(), MapFlags::ANY)? else {
                continue;
            };
            // SAFETY: tailctl_cpu_run is a bindgen struct of integers.
            let c: tailctl_cpu_run = unsafe { pod_prefix(&v) };
            if c.tag == tag && c.acct_idx == idx {
                n += 1;
            }
        }
        Ok(n)
    }

    fn get(&self, svc: u32, slot: u32) -> Result<tailctl_request_acct> {
        let key = (svc * MAX_REQUESTS as u32 + slot).to_ne_bytes();
        let v = self
            .map
            .lookup(&key, MapFlags::ANY)?
            .context("req_acct entry missing")?;
        // SAFETY: tailctl_request_acct is a bindgen struct of integers.
        Ok(unsafe { pod_prefix(&v) })
    }
}

/// A map value's bytes as `T`: at most `size_of::<T>()` bytes are copied, the rest read as 0 (an
/// older scx_tailctl's shorter value has fewer, leading, fields).
///
/// # Safety
/// `T` must be plain old data for which every bit pattern, all-zero included, is valid (the
/// bindgen structs of integers in `bpf_intf`).
unsafe fn pod_prefix<T>(v: &[u8]) -> T {
    // SAFETY: the caller promises all-zero is a valid `T`.
    let mut t: T = unsafe { std::mem::zeroed() };
    let n = v.len().min(std::mem::size_of::<T>());
    // SAFETY: `n` is at most the size of both `v` and `t`, which do not overlap; the caller
    // promises any bytes are a valid `T`.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), (&mut t as *mut T).cast(), n) };
    t
}

/// The kernel's job entry of service slot `svc` (`job_acct`): its job-token counters.
fn job_acct_of(pin_dir: &Path, svc: u32) -> Result<tailctl_job_acct> {
    let path = pin_dir.join("job_acct");
    let map = MapHandle::from_pinned_path(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let v = map
        .lookup(&svc.to_ne_bytes(), MapFlags::ANY)?
        .context("job_acct entry missing")?;
    // SAFETY: tailctl_job_acct is a bindgen struct of integers.
    Ok(unsafe { pod_prefix(&v) })
}

fn threshold_table(ms: u64) -> ThresholdTable {
    ThresholdTable::from_thresholds(vec![Some(Duration::from_millis(ms))])
}

fn start_pool(cli: &Cli, table: Option<&ThresholdTable>, register: bool) -> Result<AssistedPool> {
    let mut b = Pool::builder()
        .workers(cli.workers)
        .policy(Policy::TailControl);
    if let Some(t) = table {
        b = b.thresholds(t.clone());
    }
    let socket = if register {
        cli.socket.clone()
    } else {
        PathBuf::from("/nonexistent/tailctl.sock")
    };
    Ok(AssistedPool::start(b, table, &socket)?)
}

/// The request slot running request `id`, found by scanning the region.
fn find_slot(pool: &Pool, id: u64, limit: Duration) -> Option<u32> {
    let start = Instant::now();
    while start.elapsed() < limit {
        for i in 0..MAX_REQUESTS {
            let r = pool.shared_state().request(i);
            if r.state() != REQ_FREE && r.id() == id {
                return Some(i as u32);
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    None
}

/// Act hostile until `stop`: keep clearing the kernel's SERIALIZED marks in
/// the region, so the workers keep stealing capped requests and queue for
/// their tokens. Returns how many marks it cleared.
fn clear_marks(pool: &Pool, stop: &AtomicBool) -> u64 {
    let mut cleared = 0;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..MAX_REQUESTS {
            let slot = pool.shared_state().request(i) as *const _ as *const u8;
            // SAFETY: flags+generation is the u64 at offset 8 of a request
            // slot (intf.h); the region is ours to write.
            let gf = unsafe { &*(slot.add(8) as *const AtomicU64) };
            let flag = FLAG_SERIALIZED as u64;
            if gf.fetch_and(!flag, Ordering::SeqCst) & flag != 0 {
                cleared += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cleared
}

/// `clear_marks` on a thread of its own; the caller joins it before `pool` is dropped.
fn spawn_clear_marks(pool: &Pool, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let pool_ptr = pool as *const Pool as usize;
    std::thread::spawn(move || {
        // SAFETY: the caller joins this thread before `pool` is dropped (or exits).
        let pool = unsafe { &*(pool_ptr as *const Pool) };
        clear_marks(pool, &stop)
    })
}

fn nr_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The pool's worker tids (from its region), waiting until every worker published its own.
fn worker_tids(pool: &Pool) -> Result<Vec<u32>> {
    let t0 = Instant::now();
    loop {
        let tids: Vec<u32> = (0..pool.workers())
            .map(|w| pool.shared_state().worker(w).tid())
            .collect();
        if tids.iter().all(|t| *t != 0) {
            return Ok(tids);
        }
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("workers did not publish their tids: {tids:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn set_affinity(tid: u32, cpus: &[usize]) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds for small CPU numbers.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(tid as i32, std::mem::size_of_val(&set), &set) != 0 {
            bail!(
                "sched_setaffinity({tid}, {cpus:?}): {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

const SCHED_EXT: i32 = 7;

fn set_policy(tid: u32, policy: i32) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: valid pointer to a sched_param.
    if unsafe { libc::sched_setscheduler(tid as i32, policy, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn set_nice(tid: u32, nice: i32) {
    // SAFETY: plain system call; PRIO_PROCESS with a tid re-nices that thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
}

/// The `serialize` experiment's workload, the same in both modes.
struct SerializeWorkload {
    huge_ms: u64,
    threshold_ms: u64,
    small_ms: u64,
    every_ms: u64,
    pin: bool,
    ignore_cap: bool,
}

/// Median of the values present (None if there are none).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// `serialize --compare`: both modes, alternately, on one workload; per mode
/// the settle latencies of every run and their median, and the ratio of the
/// medians (user-space lazy over kernel).
fn serialize_compare(cli: &Cli, w: &SerializeWorkload, rounds: u32) -> Result<serde_json::Value> {
    let mut runs = Vec::new();
    for round in 0..rounds {
        // Flip the order every round, so drift of the machine does not
        // always favour the same mode.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for user_only in order {
            eprintln!(
                "serialize: round {}/{rounds}, {}",
                round + 1,
                if user_only {
                    "user-space lazy"
                } else {
                    "kernel"
                }
            );
            let mut r = serialize(cli, w, user_only)?;
            r["round"] = json!(round);
            runs.push(r);
        }
    }
    let pick = |mode: &str, f: &dyn Fn(&serde_json::Value) -> Option<f64>| -> Vec<f64> {
        runs.iter()
            .filter(|r| r["mode"] == mode)
            .filter_map(f)
            .collect()
    };
    let to_settle = |r: &serde_json::Value| r["threshold_to_settle_ms"].as_f64();
    let mark_to_settle = |r: &serde_json::Value| r["observed_serialization_latency_ms"].as_f64();
    let kernel_own = |r: &serde_json::Value| r["kernel"]["serialization_latency_ms"].as_f64();
    let user_lat = pick("user-space", &to_settle);
    let kernel_lat = pick("kernel", &to_settle);
    let user_mark = pick("user-space", &mark_to_settle);
    let kernel_mark = pick("kernel", &mark_to_settle);
    let kernel_own = pick("kernel", &kernel_own);
    let (um, km) = (median(user_lat.clone()), median(kernel_lat.clone()));
    let sum_u = |key: &str| -> u64 {
        runs.iter()
            .filter(|r| r["mode"] == "kernel")
            .filter_map(|r| r["kernel"][key].as_u64())
            .sum()
    };
    let max_u = |key: &str| -> u64 {
        runs.iter()
            .filter(|r| r["mode"] == "kernel")
            .filter_map(|r| r["kernel"][key].as_u64())
            .max()
            .unwrap_or(0)
    };
    let min_par = |mode: &str| -> u64 {
        runs.iter()
            .filter(|r| r["mode"] == mode)
            .filter_map(|r| r["max_concurrency_before_mark"].as_u64())
            .min()
            .unwrap_or(0)
    };
    Ok(json!({
        "mode": "compare",
        "rounds": rounds,
        "workers": cli.workers,
        "huge_ms": w.huge_ms,
        "threshold_ms": w.threshold_ms,
        // latency_ms: threshold crossing to at most one thread running, per
        // run (the same sampler in both modes); mark_to_settle_ms: from the
        // SERIALIZED mark instead; the kernel's own clock (crossing detected
        // at a tick or stop, to concurrency <= 1) in kernel_clock_ms.
        "user": {
            "latency_ms": user_lat,
            "median_latency_ms": um,
            "mark_to_settle_ms": user_mark,
            "min_concurrency_before_mark": min_par("user-space"),
        },
        "kernel": {
            "latency_ms": kernel_lat,
            "median_latency_ms": km,
            "mark_to_settle_ms": kernel_mark,
            "kernel_clock_ms": kernel_own,
            "min_concurrency_before_mark": min_par("kernel"),
            "max_running_after_settle": max_u("max_running_after_settle"),
            "cap_violations": runs.iter()
                .filter(|r| r["mode"] == "kernel")
                .filter(|r| r["kernel"]["cap_violation"] == true)
                .count(),
            "overdue_runs": sum_u("overdue_runs"),
            "throttled": sum_u("throttled"),
        },
        // How many times longer lazy user-space serialization took to settle
        // than the kernel's (medians); null when the kernel's median is 0.
        "user_over_kernel": match (um, km) {
            (Some(u), Some(k)) if k > 0.0 => Some(u / k),
            _ => None,
        },
        "runs": runs,
    }))
}

fn serialize(cli: &Cli, w: &SerializeWorkload, user_only: bool) -> Result<serde_json::Value> {
    let SerializeWorkload {
        huge_ms,
        threshold_ms,
        small_ms,
        every_ms,
        pin,
        ignore_cap,
    } = *w;
    let table = threshold_table(threshold_ms);
    let pool = start_pool(cli, Some(&table), !user_only)?;
    if pin {
        let n = nr_cpus();
        for (w, tid) in worker_tids(&pool)?.into_iter().enumerate() {
            set_affinity(tid, &[w % n])?;
        }
    }
    if !user_only && !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration (is it running? socket {}): {}",
            cli.socket.display(),
            why_unassisted(&pool)
        );
    }
    let acct = if user_only {
        None
    } else {
        Some(Acct::open(&cli.pin_dir)?)
    };
    let svc = pool.service().unwrap_or(0);

    // The huge request: parallel_for over 1 ms items.
    let items = huge_ms as usize;
    let huge =
        pool.submit(move || parallel_for(0..items, 1, |_| burn_cpu(Duration::from_millis(1))));
    let slot = find_slot(&pool, huge.id(), Duration::from_secs(5))
        .context("huge request's slot not found")?;
    let tag_gen = pool.shared_state().request(slot as usize).generation();
    let tag = ((tag_gen as u64) << 32) | slot as u64;

    // Small requests beside it.
    let stop = Arc::new(AtomicBool::new(false));
    let marks = ignore_cap.then(|| spawn_clear_marks(&pool, stop.clone()));
    let small_done = Arc::new(AtomicU64::new(0));
    let small_parallel = Arc::new(AtomicU64::new(0));
    let smalls = {
        let stop = stop.clone();
        let done = small_done.clone();
        let par = small_parallel.clone();
        let pool_ref: &Pool = &pool;
        // SAFETY-free trick: the thread is joined before `pool` is dropped.
        let pool_ptr = pool_ref as *const Pool as usize;
        std::thread::spawn(move || {
            // SAFETY: `pool` outlives this thread (joined below before drop).
            let pool = unsafe { &*(pool_ptr as *const Pool) };
            let mut handles = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let par = par.clone();
                handles.push(pool.submit(move || {
                    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
                    parallel_for(0..4usize, 1, |_| {
                        seen.lock()
                            .unwrap()
                            .insert(tailctl_rt::current_worker_index());
                        burn_cpu(Duration::from_millis(small_ms.div_ceil(4).max(1)));
                    });
                    if seen.lock().unwrap().len() > 1 {
                        par.fetch_add(1, Ordering::Relaxed);
                    }
                }));
                std::thread::sleep(Duration::from_millis(every_ms));
            }
            for h in handles {
                if h.wait().is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    // Watch the huge request until it completes.
    let t0 = mono_ns();
    let mut flag_at = None;
    let mut settle_at = None;
    let mut max_after_settle_user = 0u32;
    let mut max_before_flag_user = 0u32;
    let mut last = None;
    // When the request's work crossed its threshold, by each mode's own
    // measure of work: user space, the runtime's wall-clock bookkeeping as
    // the paper's check sums it (charged work plus the running intervals of
    // the workers on it), sampled here continuously, while the runtime itself
    // only checks when a worker looks for work (lazy); kernel, the kernel's
    // CPU-time charge, whose crossing is detected at the next tick or stop
    // (serialized_at_ns, CLOCK_MONOTONIC like mono_ns).
    let threshold_ns = threshold_ms * 1_000_000;
    let mut cross_at = None;
    while !huge.is_finished() {
        let now = mono_ns();
        let req = pool.shared_state().request(slot as usize);
        if req.generation() != tag_gen {
            break;
        }
        let flagged = req.flags() & FLAG_SERIALIZED != 0;
        // User-visible concurrency: workers on the request. A worker publishes
        // the request it executes and moves to no request as soon as it looks
        // for work (see the runtime's `wait_until`), so this counts workers
        // executing it. (The `state` field is not used: a worker that found
        // work without searching first still shows STEALING there.)
        let on = (0..pool.workers())
            .filter(|&w| pool.shared_state().worker(w).current() == tag)
            .count() as u32;
        // Kernel mode: the threads the scheduler has on CPUs for it (the CPUs
        // naming it in cpu_runs), which is what its cap holds to one.
        let running = match &acct {
            Some(a) => a.running(svc, tag)?,
            None => on,
        };
        if user_only && cross_at.is_none() {
            let running_ns: u64 = (0..pool.workers())
                .map(|w| pool.shared_state().worker(w))
                .filter(|ws| ws.current() == tag && ws.start_ns() != 0)
                .map(|ws| now.saturating_sub(ws.start_ns()))
                .sum();
            if req.work_ns() + running_ns >= threshold_ns {
                cross_at = Some(now);
            }
        }
        if flagged && flag_at.is_none() {
            flag_at = Some(now);
        }
        if !flagged {
            max_before_flag_user = max_before_flag_user.max(running);
        }
        if flag_at.is_some() && settle_at.is_none() && running <= 1 {
            settle_at = Some(now);
        }
        if settle_at.is_some() {
            max_after_settle_user = max_after_settle_user.max(running);
        }
        if let Some(a) = &acct {
            if let Ok(v) = a.get(svc, slot) {
                if v.tag == tag {
                    last = Some(v);
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let end = mono_ns();
    let wall_ms = (end - t0) as f64 / 1e6;
    huge.wait()
        .map_err(|e| anyhow::anyhow!("huge request failed: {e:?}"))?;
    stop.store(true, Ordering::Relaxed);
    smalls.join().unwrap();
    if let Some(m) = marks {
        m.join().unwrap();
    }

    if let Some(v) = &last {
        if v.serialized_at_ns != 0 {
            cross_at = Some(v.serialized_at_ns);
        }
    }
    let ms = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some((b - a) as f64 / 1e6),
        _ => None,
    };
    let mut out = json!({
        "mode": if user_only { "user-space" } else { "kernel" },
        "workers": cli.workers,
        "huge_ms": huge_ms,
        "threshold_ms": threshold_ms,
        "huge_wall_ms": wall_ms,
        "max_concurrency_before_mark": max_before_flag_user,
        // From the mark (SERIALIZED seen) to at most one thread running it.
        "observed_serialization_latency_ms": ms(flag_at, settle_at),
        // From the threshold crossing (each mode's own work measure, see
        // above) to the mark, and to at most one thread running it (sampled
        // here the same way in both modes): the figure that compares lazy and
        // kernel serialization.
        "threshold_crossed_after_ms": ms(Some(t0), cross_at),
        "mark_delay_ms": ms(cross_at, flag_at),
        // A request that finished before it settled (or was marked) counts
        // until its end, a lower bound: `settled` says which.
        "threshold_to_settle_ms": ms(cross_at, settle_at.or(cross_at.map(|_| end))),
        "settled": settle_at.is_some(),
        "mark_after_ms": ms(Some(t0), flag_at),
        "observed_max_concurrency_after_settle": max_after_settle_user,
        "small_requests": small_done.load(Ordering::Relaxed),
        "small_requests_parallel": small_parallel.load(Ordering::Relaxed),
    });
    if let Some(v) = last {
        out["kernel"] = json!({
            "work_ms": v.work_ns as f64 / 1e6,
            "serialized": v.serialized_at_ns != 0,
            "serialization_latency_ms": ms(Some(v.serialized_at_ns).filter(|x| *x != 0), Some(v.settled_at_ns).filter(|x| *x != 0)),
            // Token holders running at once after settling (the kernel counts
            // threads let through by the wait bound apart, in overdue_runs):
            // more than the cap (1) is a violation of the cap.
            "max_running_after_settle": v.max_running_settled,
            "cap_violation": v.serialized_at_ns != 0 && v.max_running_settled > 1,
            "max_running": v.max_running,
            "throttled": v.throttled,
            "bounces": v.bounces,
            "bounced_ms": v.bounced_ns as f64 / 1e6,
            // Runs let through by the wait bound without a token (liveness over the cap).
            "overdue_runs": v.overdue,
        });
    }
    Ok(out)
}

/// How `account` splits a request into bursts separated by sleeps.
struct Pacing {
    chunks: u32,
    pace_us: u64,
    pacer_cpu: usize,
}

/// A thread on another CPU that bumps a generation every period, waking
/// whoever waits for the next one.
struct Pacer {
    gen: std::sync::Mutex<u64>,
    tick: std::sync::Condvar,
    stop: AtomicBool,
}

impl Pacer {
    fn wait_next(&self) {
        let mut g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
        let start = *g;
        while *g == start && !self.stop.load(Ordering::Relaxed) {
            g = self.tick.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Idle time of `cpu` so far (from /proc/stat: idle + iowait, kept by the
/// tick-less idle code, not sampled), in nanoseconds.
fn cpu_idle_ns(cpu: usize) -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .with_context(|| format!("{name} not in /proc/stat"))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok((f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0)) * 1_000_000_000 / hz)
}

fn account(cli: &Cli, ms: u64, count: u32, pacing: Pacing, busy_cpu: Option<usize>) -> Result<()> {
    let pool = start_pool(cli, None, true)?;
    if !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration: {}",
            why_unassisted(&pool)
        );
    }
    let acct = Acct::open(&cli.pin_dir)?;
    let svc = pool.service().unwrap_or(0);
    let chunks = pacing.chunks.max(1);
    let pacer = Arc::new(Pacer {
        gen: std::sync::Mutex::new(0),
        tick: std::sync::Condvar::new(),
        stop: AtomicBool::new(false),
    });
    // Ping-pong: after each burst but the last the worker sends a byte and
    // waits for the pacer's answer, so both sides sleep and wake each other.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let (ours, theirs) = (Arc::new(ours), Arc::new(theirs));
    let pingpong = pacing.pace_us == 0;
    let pacer_thread = (chunks > 1).then(|| {
        let p = pacer.clone();
        let sock = ours.clone();
        let (cpu, period) = (pacing.pacer_cpu, Duration::from_micros(pacing.pace_us));
        std::thread::spawn(move || -> Result<()> {
            use std::io::{Read, Write};
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            set_affinity(tid, &[cpu])?;
            let mut b = [0u8];
            while !p.stop.load(Ordering::Relaxed) {
                if pingpong {
                    (&*sock).read_exact(&mut b)?;
                    if p.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    (&*sock).write_all(&b)?;
                } else {
                    std::thread::sleep(period);
                    *p.gen.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    p.tick.notify_all();
                }
            }
            Ok(())
        })
    });
    let idle0 = busy_cpu.map(cpu_idle_ns).transpose()?;
    let wall0 = Instant::now();
    let mut rows = Vec::new();
    let (mut kernel_total, mut thread_total) = (0u64, 0u64);
    for _ in 0..count {
        let t0 = Instant::now();
        let p = pacer.clone();
        let sock = theirs.clone();
        let h = pool.submit(move || {
            use std::io::{Read, Write};
            let c0 = thread_cpu();
            let w0 = Instant::now();
            for i in 0..chunks {
                if i > 0 && pingpong {
                    let mut b = [1u8];
                    // A failed exchange only ends the sleeps early; the
                    // pacer's own error is reported when it is joined.
                    let _ = (&*sock)
                        .write_all(&b)
                        .and_then(|_| (&*sock).read_exact(&mut b));
                } else if i > 0 {
                    p.wait_next();
                }
                burn_cpu(Duration::from_millis(ms) / chunks);
            }
            (
                (thread_cpu() - c0).as_nanos() as u64,
                w0.elapsed().as_nanos() as u64,
                tailctl_rt::kernel::current_request_slot(),
            )
        });
        let (cpu_ns, wall_ns, slot) = h.wait().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let slot = slot.context("request slot unknown")?;
        // The worker's last interval on the request is charged when it next
        // ticks or stops (parks): give that a moment before reading.
        std::thread::sleep(Duration::from_millis(50));
        // The runtime's own figure: its wall-clock work for the request.
        let rt_ns = pool.shared_state().request(slot as usize).work_ns();
        let k = acct.get(svc, slot)?;
        kernel_total += k.work_ns;
        thread_total += cpu_ns;
        rows.push(json!({
            "true_cpu_ms": cpu_ns as f64 / 1e6,
            "kernel_ms": k.work_ns as f64 / 1e6,
            "runtime_wallclock_ms": (rt_ns.max(wall_ns)) as f64 / 1e6,
            "kernel_error_pct": (k.work_ns as f64 - cpu_ns as f64) / cpu_ns as f64 * 100.0,
            "wallclock_error_pct": (rt_ns.max(wall_ns) as f64 - cpu_ns as f64) / cpu_ns as f64 * 100.0,
            "elapsed_ms": t0.elapsed().as_secs_f64() * 1e3,
        }));
    }
    let wall = wall0.elapsed().as_nanos() as u64;
    let busy = match (busy_cpu, idle0) {
        (Some(c), Some(i0)) => Some(wall.saturating_sub(cpu_idle_ns(c)? - i0)),
        _ => None,
    };
    pacer.stop.store(true, Ordering::Relaxed);
    pacer.tick.notify_all();
    if pingpong {
        // Wakes the pacer from its read, to see the stop.
        use std::io::Write;
        let _ = (&*theirs).write_all(&[0]);
    }
    if let Some(t) = pacer_thread {
        t.join()
            .map_err(|_| anyhow::anyhow!("pacer panicked"))?
            .context("the pacer")?;
    }
    println!(
        "{}",
        serde_json::to_string(&json!({
            "requests": rows,
            "chunks": chunks,
            "kernel_total_ms": kernel_total as f64 / 1e6,
            "thread_cpu_total_ms": thread_total as f64 / 1e6,
            // Includes the 50 ms pauses between requests and the pool's own
            // threads: an upper bound on what the requests can have used.
            "busy_cpu": busy_cpu,
            "cpu_busy_ms": busy.map(|b| b as f64 / 1e6),
            "wall_ms": wall as f64 / 1e6,
        }))?
    );
    Ok(())
}

/// `serve`'s requests: `items` parallel items of `item` CPU time each.
struct ServeWork {
    items: usize,
    item: Duration,
    threshold_ms: u64,
}

fn serve(cli: &Cli, secs: u64, require_kernel: bool, work: ServeWork) -> Result<()> {
    let ServeWork {
        items,
        item,
        threshold_ms,
    } = work;
    let pool = start_pool(cli, Some(&threshold_table(threshold_ms)), true)?;
    if require_kernel && !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration: {}",
            why_unassisted(&pool)
        );
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut done = 0u64;
    let mut failed = 0u64;
    let t0 = Instant::now();
    while Instant::now() < deadline {
        let batch: Vec<_> = (0..8)
            .map(|_| pool.submit(move || parallel_for(0..items, 1, |_| burn_cpu(item))))
            .collect();
        for h in batch {
            match h.wait() {
                Ok(()) => done += 1,
                Err(_) => failed += 1,
            }
        }
    }
    let sched = own_sched_figures();
    let uid = nix::unistd::Uid::current().as_raw();
    // What the scheduler charged to our workers: 0 unless it treats them as ours.
    let kernel_work_ns: u64 = (0..pool.workers())
        .map(|w| pool.shared_state().worker(w).kernel_work_ns())
        .sum();
    println!(
        "{}",
        serde_json::to_string(&json!({
            "uid": uid,
            "items": items,
            "item_us": item.as_micros() as u64,
            "kernel_work_ms": kernel_work_ns as f64 / 1e6,
            // Requests the scheduler serialized: a cost measurement of registration
            // (tools/vm/regcost-guest.sh) must see none, or it measures the cap too.
            "kernel_serialized": pool.shared_state().header().kernel_serialized(),
            "kernel_assisted": pool.is_kernel_assisted(),
            "unassisted_reason": (!pool.is_kernel_assisted()).then(|| why_unassisted(&pool)),
            "requests": done,
            "failed": failed,
            "rps": done as f64 / t0.elapsed().as_secs_f64(),
            "sched": sched,
        }))?
    );
    Ok(())
}

/// This process's scheduling figures so far, from the kernel's own
/// bookkeeping (class-independent, so the same under any scheduler):
/// context switches and CPU time (getrusage), and the time its threads
/// spent runnable but waiting for a CPU with the number of runs
/// (`/proc/self/task/*/schedstat`: run time, run delay, timeslices).
fn own_sched_figures() -> serde_json::Value {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    let (mut delay_ns, mut slices) = (0u64, 0u64);
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                let f: Vec<u64> = s
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if f.len() == 3 {
                    delay_ns += f[1];
                    slices += f[2];
                }
            }
        }
    }
    json!({
        "voluntary_switches": ru.ru_nvcsw,
        "involuntary_switches": ru.ru_nivcsw,
        "cpu_ms": tv(ru.ru_utime) + tv(ru.ru_stime),
        "run_delay_ms": delay_ns as f64 / 1e6,
        "runs": slices,
    })
}

fn rogue(cli: &Cli, secs: u64, benign: bool, no_cap: bool) -> Result<()> {
    let table = threshold_table(1);
    let pool = start_pool(cli, (!no_cap).then_some(&table), true)?;
    if !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration: {}",
            why_unassisted(&pool)
        );
    }
    let len = std::mem::size_of::<tailctl_rt::shared_state::SharedRegion>() / 8;
    let private: &'static [AtomicU64] = Box::leak((0..len).map(|_| AtomicU64::new(0)).collect());
    let base = if benign {
        private.as_ptr() as usize
    } else {
        pool.shared_state().region() as *const _ as usize
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Writers scribble over the whole region while requests keep the workers busy.
    let writers: Vec<_> = (0..2u64)
        .map(|seed| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
                let mut writes = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = (x as usize) % len;
                    // SAFETY: in bounds of our own mapped region; every field
                    // there is an atomic integer, and garbage is the point.
                    unsafe {
                        (*((base + i * 8) as *const AtomicU64))
                            .store(x.rotate_left(29), Ordering::Relaxed)
                    };
                    writes += 1;
                }
                writes
            })
        })
        .collect();
    // Its CPU over the run (writers, workers and all): what a neighbour
    // competes with, rogue or twin.
    let (c0, t0) = (process_cpu(), Instant::now());
    let deadline = t0 + Duration::from_secs(secs);
    let mut requests = 0u64;
    while Instant::now() < deadline {
        // Requests may fail or hang on a corrupted region; bound each wait.
        let h =
            pool.submit(|| parallel_for(0..4usize, 1, |_| burn_cpu(Duration::from_micros(500))));
        let t = Instant::now();
        while !h.is_finished() && t.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(1));
        }
        requests += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let writes: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    let cpus = (process_cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::to_string(&json!({
            "benign": benign,
            "capped": !no_cap,
            "garbage_writes": writes,
            "requests_submitted": requests,
            "cpus": cpus,
        }))?
    );
    // The pool's own bookkeeping is garbage now; don't wait for it to drain.
    std::process::exit(0);
}

fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// An unregistered CPU-bound neighbour: `threads` spinning threads. Its share
/// (CPU time over wall time, both from the guest's own clocks) is what the
/// isolation tests compare between runs beside different services.
fn hog(secs: u64, threads: usize) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let spins: Vec<_> = (0..threads)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                let c0 = thread_cpu();
                while !stop.load(Ordering::Relaxed) {
                    n = n.wrapping_add(1);
                    std::hint::spin_loop();
                }
                (n, thread_cpu() - c0)
            })
        })
        .collect();
    let (c0, t0) = (process_cpu(), mono_ns());
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, t1) = (process_cpu(), mono_ns());
    stop.store(true, Ordering::Relaxed);
    let per_thread: Vec<(u64, Duration)> = spins.into_iter().map(|h| h.join().unwrap()).collect();
    let loops: u64 = per_thread.iter().map(|t| t.0).sum();
    let cpu_ns = (c1 - c0).as_nanos() as u64;
    let wall_ns = t1 - t0;
    // Each thread's CPU over the same wall time (it also ran a little
    // before and after the window): equal shares mean the threads were
    // treated alike; unequal ones, that they sat in different queues.
    let thread_shares: Vec<f64> = per_thread
        .iter()
        .map(|t| t.1.as_nanos() as f64 / wall_ns as f64)
        .collect();
    println!(
        "{}",
        serde_json::to_string(&json!({
            "threads": threads,
            "cpu_s": cpu_ns as f64 / 1e9,
            "wall_s": wall_ns as f64 / 1e9,
            "cpus": cpu_ns as f64 / wall_ns as f64,
            "cpu_ms": cpu_ns as f64 / 1e6,
            "wall_ms": wall_ns as f64 / 1e6,
            // CPUs' worth of time the hog got.
            "share": cpu_ns as f64 / wall_ns as f64,
            "thread_shares": thread_shares,
            "loops": loops,
        }))?
    );
    Ok(())
}

/// `greedy --inflate-desire`: overwrite the desire inputs of this process's
/// own region until `stop`, as a service lying to the allotment controller
/// would (every worker busy, the most stealable work, searches that always
/// succeed). Returns the number of rounds of writes.
fn inflate(pool: &AssistedPool, stop: &AtomicBool) -> u64 {
    use bpf_intf::{tailctl_header as H, tailctl_region as R, tailctl_worker_slot as W};
    use std::mem::offset_of;
    let base = pool.shared_state().region() as *const _ as usize;
    let workers = pool.workers();
    let hdr = base + offset_of!(R, header);
    let u32_at = |addr: usize| {
        // SAFETY: `addr` is a u32 field of this process's own mapped region
        // (offsets from the kernel's layout of it, which the runtime's
        // layout test keeps equal); the pool, and so the mapping, outlives
        // this scoped thread; every field there is accessed atomically.
        unsafe { &*(addr as *const AtomicU32) }
    };
    let u64_at = |addr: usize| {
        // SAFETY: as for u32_at; u64 fields are 8-aligned in the region.
        unsafe { &*(addr as *const AtomicU64) }
    };
    let mut rounds = 0;
    while !stop.load(Ordering::Relaxed) {
        u32_at(hdr + offset_of!(H, busy_workers)).store(workers as u32, Ordering::Relaxed);
        u32_at(hdr + offset_of!(H, stealable)).store(u32::MAX, Ordering::Relaxed);
        for w in 0..workers {
            let slot = base + offset_of!(R, workers) + w * std::mem::size_of::<W>();
            u64_at(slot + offset_of!(W, found_work)).fetch_add(1000, Ordering::Relaxed);
            u32_at(slot + offset_of!(W, stealable_seen)).fetch_add(65_536_000, Ordering::Relaxed);
        }
        rounds += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    rounds
}

/// What the runtime recorded about a failed registration.
fn why_unassisted(pool: &AssistedPool) -> String {
    pool.unassisted_reason()
        .unwrap_or_else(|| "no reason recorded".into())
}

/// Keep `requests` requests of `items` items in flight for `secs`.
fn greedy(
    cli: &Cli,
    secs: u64,
    (requests, grow_after, grow_requests, watch_desched, inflate_desire): (
        usize,
        u64,
        usize,
        bool,
        bool,
    ),
    threshold_ns: Option<u64>,
    ignore_cap: bool,
    (items, item_us, sleep_us): (usize, u64, u64),
) -> Result<()> {
    let table = threshold_ns
        .map(|ns| ThresholdTable::from_thresholds(vec![Some(Duration::from_nanos(ns))]));
    let pool = start_pool(cli, table.as_ref(), true)?;
    if !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration: {}",
            why_unassisted(&pool)
        );
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let stop = AtomicBool::new(false);
    let mut done = 0u64;
    let cleared = AtomicU64::new(0);
    // Samples of the region's descheduled flags: taken, with any flag set, most set at once.
    let (samples, flagged, max_flagged) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let flagged_sum = AtomicU64::new(0);
    // CLOCK_MONOTONIC (the daemon's and bpf_ktime_get_ns's clock) when the load grew.
    let mut grown_ns: Option<u64> = None;
    std::thread::scope(|s| {
        if ignore_cap {
            s.spawn(|| cleared.store(clear_marks(&pool, &stop), Ordering::Relaxed));
        }
        if inflate_desire {
            s.spawn(|| inflate(&pool, &stop));
        }
        if watch_desched {
            s.spawn(|| {
                let st = pool.shared_state();
                while !stop.load(Ordering::Relaxed) {
                    let n = (0..pool.workers())
                        .filter(|&w| st.worker(w).descheduled())
                        .count() as u64;
                    samples.fetch_add(1, Ordering::Relaxed);
                    if n > 0 {
                        flagged.fetch_add(1, Ordering::Relaxed);
                    }
                    max_flagged.fetch_max(n, Ordering::Relaxed);
                    flagged_sum.fetch_add(n, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
        }
        let mut inflight = std::collections::VecDeque::new();
        let submit = || {
            pool.submit(move || {
                parallel_for(0..items, 1, |_| {
                    burn_cpu(Duration::from_micros(item_us));
                    if sleep_us > 0 {
                        std::thread::sleep(Duration::from_micros(sleep_us));
                    }
                })
            })
        };
        let grow_at = (grow_after > 0).then(|| t0 + Duration::from_secs(grow_after));
        while Instant::now() < deadline {
            let growing = grow_at.is_some_and(|g| Instant::now() >= g);
            let want = if growing { grow_requests } else { requests };
            while inflight.len() < want {
                inflight.push_back(submit());
            }
            if growing && grown_ns.is_none() {
                // Stamped once the grown load is in the region (every request
                // submitted, counted active): what a controller can see from now.
                let t = mono_ns();
                grown_ns = Some(t);
                // Now, not at the end: a test may stop this process before then.
                eprintln!("grown_ns {t}");
            }
            let h: RequestHandle<()> = inflight.pop_front().unwrap();
            if h.wait().is_ok() {
                done += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for h in inflight {
            let _ = h.wait();
        }
    });
    println!(
        "{}",
        serde_json::to_string(&json!({
            "threshold_ns": threshold_ns,
            "requests": done,
            "rps": done as f64 / t0.elapsed().as_secs_f64(),
            "kernel_serialized": pool.shared_state().header().kernel_serialized(),
            "marks_cleared": cleared.load(Ordering::Relaxed),
            "grown_ns": grown_ns,
            "desched_mugs": pool.stats().desched_mugs,
            "steals": pool.stats().steals,
            "desched_samples": samples.load(Ordering::Relaxed),
            "desched_flagged": flagged.load(Ordering::Relaxed),
            "desched_max": max_flagged.load(Ordering::Relaxed),
            "desched_mean": flagged_sum.load(Ordering::Relaxed) as f64
                / samples.load(Ordering::Relaxed).max(1) as f64,
        }))?
    );
    Ok(())
}

struct ChurnKinds {
    affinity: bool,
    nice: bool,
    policy: bool,
    sleep: bool,
}

/// The count in one of req_acct's live counter words (epoch << 16 | count, see bpf/intf.h).
fn acct_count(v: u32) -> u32 {
    v & bpf_intf::tailctl_consts_TAILCTL_ACCT_COUNT_MASK
}

/// Per-service sums and maxima of the kernel's request counters.
fn acct_totals(acct: &Acct, svc: u32) -> Result<serde_json::Value> {
    let (mut holders, mut waiting, mut running, mut arriving, mut overdue_running, mut unheld) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut max, mut throttled, mut capped) = (0u32, 0u64, 0u64);
    // The runner counts' shifts within `runners` (bpf/intf.h TAILCTL_RUNNERS_*).
    let runner = |w: u64, shift: u32| acct_count((w >> shift) as u32);
    for slot in 0..MAX_REQUESTS as u32 {
        let a = acct.get(svc, slot)?;
        let counts = [
            acct_count(a.holders),
            acct_count(a.waiting),
            runner(
                a.runners,
                bpf_intf::tailctl_consts_TAILCTL_RUNNERS_RUNNING_SHIFT,
            ),
            runner(
                a.runners,
                bpf_intf::tailctl_consts_TAILCTL_RUNNERS_ARRIVING_SHIFT,
            ),
            acct_count(a.overdue_running),
            runner(
                a.runners,
                bpf_intf::tailctl_consts_TAILCTL_RUNNERS_UNHELD_SHIFT,
            ),
        ];
        holders += counts[0] as u64;
        waiting += counts[1] as u64;
        running += counts[2] as u64;
        arriving += counts[3] as u64;
        overdue_running += counts[4] as u64;
        unheld += counts[5] as u64;
        throttled += a.throttled;
        capped += (a.alloc != 0) as u64;
        max = counts.into_iter().fold(max, u32::max);
    }
    Ok(json!({
        "holders": holders, "waiting": waiting, "running": running, "arriving": arriving,
        "overdue_running": overdue_running, "unheld_running": unheld, "max_counter": max,
        "throttled_total": throttled, "capped_requests": capped,
    }))
}

fn churn(cli: &Cli, secs: u64, requests: usize, threshold_ms: u64, k: ChurnKinds) -> Result<()> {
    let table = threshold_table(threshold_ms);
    let pool = start_pool(cli, Some(&table), true)?;
    if !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration: {}",
            why_unassisted(&pool)
        );
    }
    let svc = pool.service().unwrap_or(0);
    let acct = Acct::open(&cli.pin_dir)?;
    let tids = worker_tids(&pool)?;
    let n = nr_cpus();
    let all: Vec<usize> = (0..n).collect();
    if k.policy {
        for &t in &tids {
            set_policy(t, SCHED_EXT).context("SCHED_EXT (is scx_tailctl in --partial mode?)")?;
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(AtomicU64::new(0));
    let churner = {
        let (stop, changes, tids, all) = (stop.clone(), changes.clone(), tids.clone(), all.clone());
        let (affinity, nice, policy) = (k.affinity, k.nice, k.policy);
        std::thread::spawn(move || {
            let mut x = 0x2545_f491_4f6c_dd1du64;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let t = tids[(x % tids.len() as u64) as usize];
                if affinity {
                    let c = ((x >> 8) % (n as u64 + 1)) as usize;
                    let _ = if c == n {
                        set_affinity(t, &all)
                    } else {
                        set_affinity(t, &[c])
                    };
                }
                if nice {
                    set_nice(t, ((x >> 16) % 10) as i32);
                }
                if policy {
                    let _ = set_policy(t, if (x >> 24) & 1 == 0 { SCHED_EXT } else { 0 });
                }
                changes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(2000 + (x >> 40) % 3000));
            }
        })
    };
    let sleep = k.sleep;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut inflight = std::collections::VecDeque::new();
    let mut done = 0u64;
    let mut max_seen = 0u32;
    while Instant::now() < deadline {
        while inflight.len() < requests {
            inflight.push_back(pool.submit(move || {
                parallel_for(0..8usize, 1, |i| {
                    if sleep {
                        // Wake/sleep churn: many short runs, each a running/stopping pair.
                        for j in 0..4u64 {
                            burn_cpu(Duration::from_micros(300));
                            std::thread::sleep(Duration::from_micros(
                                100 + (i as u64 * 37 + j * 91) % 400,
                            ));
                        }
                    } else {
                        burn_cpu(Duration::from_millis(2));
                    }
                })
            }));
        }
        let h: RequestHandle<()> = inflight.pop_front().unwrap();
        if h.wait().is_ok() {
            done += 1;
        }
        if done.is_multiple_of(64) {
            // A wrapped counter shows as a huge value while it lasts.
            if let Ok(v) = acct_totals(&acct, svc) {
                max_seen = max_seen.max(v["max_counter"].as_u64().unwrap_or(0) as u32);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().unwrap();
    for h in inflight {
        let _ = h.wait();
    }
    if k.policy {
        // Half the workers end outside sched_ext: whatever they held must have been given back.
        for (i, &t) in tids.iter().enumerate() {
            let _ = set_policy(t, if i % 2 == 0 { 0 } else { SCHED_EXT });
        }
    }
    for &t in &tids {
        let _ = set_affinity(t, &all);
        set_nice(t, 0);
    }
    // Quiesce: every worker parks, every thread stops; counters must drain to zero.
    std::thread::sleep(Duration::from_millis(1500));
    let totals = acct_totals(&acct, svc)?;
    // Under an allotment controller its threads also wait for job tokens (a job allotted one
    // CPU never has two runners in a request, so nothing is throttled by a request's cap): those
    // counters must drain too, and its token waits count as throttling.
    let job = job_acct_of(&cli.pin_dir, svc)?;
    println!(
        "{}",
        serde_json::to_string(&json!({
            "service": svc, "requests": done, "changes": changes.load(Ordering::Relaxed),
            "max_counter_during": max_seen, "after_quiesce": totals,
            "job_after_quiesce": {
                "allot": job.allot, "waits": job.waits, "holders": job.holders,
                "waiting": job.waiting, "running": job.running, "borrowing": job.borrowing,
            },
        }))?
    );
    Ok(())
}

/// Two workers on one request past its threshold, nothing else to run.
fn hold(cli: &Cli, secs: u64, threshold_ms: u64) -> Result<()> {
    let pool = start_pool(cli, Some(&threshold_table(threshold_ms)), true)?;
    if !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration: {}",
            why_unassisted(&pool)
        );
    }
    let d = Duration::from_secs(secs);
    let t0 = Instant::now();
    // Both halves start before the cap (the second is stolen), then one
    // waits for the token while the holder runs its long slice.
    pool.submit(move || tailctl_rt::join(|| burn_cpu(d), || burn_cpu(d)))
        .wait()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let s = read_stats(&cli.pin_dir)?;
    println!(
        "{}",
        serde_json::to_string(&json!({
            "wall_ms": t0.elapsed().as_secs_f64() * 1e3,
            "kernel_serialized": pool.shared_state().header().kernel_serialized(),
            "max_throttle_wait_ms": s.max_throttle_wait_ns as f64 / 1e6,
            // Throttling to run, for threads let through at the bound.
            "max_overdue_wait_ms": s.max_overdue_wait_ns as f64 / 1e6,
            "overdue_runs": s.overdue_runs,
            "overdue_fair": s.overdue_fair,
            "overdue_ahead": s.overdue_ahead,
            "overdue_heads": s.overdue_heads,
            "overdue_deferred": s.overdue_deferred,
            "overdue_head_lost": s.overdue_head_lost,
            "max_overdue_ahead_wait_ms": s.max_overdue_ahead_wait_ns as f64 / 1e6,
            "max_overdue_lost_wait_ms": s.max_overdue_lost_wait_ns as f64 / 1e6,
            "bound_kicks": s.bound_kicks,
            "throttled": s.throttled,
        }))?
    );
    Ok(())
}

fn reuse(cli: &Cli, victim: bool) -> Result<()> {
    let table = threshold_table(2);
    let pool = start_pool(cli, victim.then_some(&table), true)?;
    if !pool.is_kernel_assisted() {
        bail!(
            "scx_tailctl did not accept the registration: {}",
            why_unassisted(&pool)
        );
    }
    let svc = pool.service().unwrap_or(0);
    let acct = Acct::open(&cli.pin_dir)?;
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let s2 = seen.clone();
    // The victim's items are long, so the workers the cap preempts are
    // still on the request and queue for its token.
    let (items, item_ms) = if victim { (10_000, 20) } else { (64, 2) };
    let h = pool.submit(move || {
        parallel_for(0..items, 1, |_| {
            s2.lock()
                .unwrap()
                .insert(tailctl_rt::current_worker_index());
            burn_cpu(Duration::from_millis(item_ms));
        })
    });
    if victim {
        // Never joined: the victim is killed mid-serialization.
        spawn_clear_marks(&pool, Arc::new(AtomicBool::new(false)));
    }
    let slot =
        find_slot(&pool, h.id(), Duration::from_secs(5)).context("request slot not found")?;
    let tag =
        ((pool.shared_state().request(slot as usize).generation() as u64) << 32) | slot as u64;
    if victim {
        // Report once the kernel capped the request and threads queue for its token.
        let t0 = Instant::now();
        loop {
            let a = acct.get(svc, slot)?;
            if a.tag == tag && a.alloc != 0 && a.throttled > 0 {
                println!(
                    "{}",
                    serde_json::to_string(
                        &json!({"service": svc, "tag": tag, "throttled": a.throttled})
                    )?
                );
                use std::io::Write;
                std::io::stdout().flush()?;
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the request was never capped with waiters (tag {tag:#x}; entry tag {:#x}, alloc {}, throttled {}, work {} ms)",
                    a.tag,
                    a.alloc,
                    a.throttled,
                    a.work_ns / 1_000_000
                );
            }
            if t0.elapsed().as_millis() % 5000 < 20 {
                eprintln!(
                    "victim: tag {tag:#x}, entry tag {:#x}, alloc {}, throttled {}, work {} ms",
                    a.tag,
                    a.alloc,
                    a.throttled,
                    a.work_ns / 1_000_000
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Mid-serialization until killed.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    h.wait().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    std::thread::sleep(Duration::from_millis(100));
    let a = acct.get(svc, slot)?;
    let parallel = seen.lock().unwrap().len();
    println!(
        "{}",
        serde_json::to_string(&json!({
            "service": svc, "tag": tag, "acct_tag": a.tag, "alloc": a.alloc, "holders": acct_count(a.holders),
            "throttled": a.throttled, "serialized": a.serialized_at_ns != 0,
            "workers_seen": parallel,
        }))?
    );
    Ok(())
}

fn read_stats(pin_dir: &Path) -> Result<tailctl_stats> {
    let path = pin_dir.join("stats");
    let map = MapHandle::from_pinned_path(&path)
        .with_context(|| format!("opening {} (is scx_tailctl running?)", path.display()))?;
    let per_cpu = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .context("stats entry missing")?;
    // SAFETY: plain-old-data struct of u64s; all-zero is valid.
    let mut t: tailctl_stats = unsafe { std::mem::zeroed() };
    for v in per_cpu {
        // SAFETY: tailctl_stats is a bindgen struct of integers.
        let s: tailctl_stats = unsafe { pod_prefix(&v) };
        t.throttled += s.throttled;
        t.rotations += s.rotations;
        t.overdue_runs += s.overdue_runs;
        t.overdue_fair += s.overdue_fair;
        t.overdue_ahead += s.overdue_ahead;
        t.overdue_heads += s.overdue_heads;
        t.overdue_deferred += s.overdue_deferred;
        t.overdue_head_lost += s.overdue_head_lost;
        t.max_overdue_ahead_wait_ns = t.max_overdue_ahead_wait_ns.max(s.max_overdue_ahead_wait_ns);
        t.max_overdue_lost_wait_ns = t.max_overdue_lost_wait_ns.max(s.max_overdue_lost_wait_ns);
        t.serializations += s.serializations;
        t.token_leaks += s.token_leaks;
        t.acct_stale_steps += s.acct_stale_steps;
        t.reenqueues += s.reenqueues;
        t.yields_kept += s.yields_kept;
        for (t, s) in t.token_leak_sites.iter_mut().zip(s.token_leak_sites) {
            *t += s;
        }
        t.bound_kicks += s.bound_kicks;
        t.max_throttle_wait_ns = t.max_throttle_wait_ns.max(s.max_throttle_wait_ns);
        t.max_overdue_wait_ns = t.max_overdue_wait_ns.max(s.max_overdue_wait_ns);
    }
    Ok(t)
}

fn stats(cli: &Cli) -> Result<()> {
    let s = read_stats(&cli.pin_dir)?;
    println!(
        "{}",
        serde_json::to_string(&json!({
            "token_leaks": s.token_leaks, "acct_stale_steps": s.acct_stale_steps,
            "token_leak_sites": {
                "put": s.token_leak_sites[0], "wait": s.token_leak_sites[1],
                "reclaim": s.token_leak_sites[2], "job_put": s.token_leak_sites[3],
                "job_wait": s.token_leak_sites[4],
            },
            "bound_kicks": s.bound_kicks,
            "overdue_runs": s.overdue_runs, "throttled": s.throttled, "rotations": s.rotations,
            "serializations": s.serializations, "reenqueues": s.reenqueues,
            "yields_kept": s.yields_kept,
            "max_throttle_wait_ms": s.max_throttle_wait_ns as f64 / 1e6,
            "max_overdue_wait_ms": s.max_overdue_wait_ns as f64 / 1e6,
            "overdue_fair": s.overdue_fair,
            "overdue_ahead": s.overdue_ahead,
            "overdue_heads": s.overdue_heads,
            "overdue_deferred": s.overdue_deferred,
            "overdue_head_lost": s.overdue_head_lost,
            "max_overdue_ahead_wait_ms": s.max_overdue_ahead_wait_ns as f64 / 1e6,
            "max_overdue_lost_wait_ms": s.max_overdue_lost_wait_ns as f64 / 1e6,
        }))?
    );
    Ok(())
}

/// Offsets in a region (see tailctl_rt::shared_state's layout table).
const HDR_MAGIC: usize = 0;
const HDR_VERSION: usize = 4;
const HDR_ACTIVE: usize = 16;
const WORKERS_AT: usize = 64;
const REQUESTS_AT: usize = 64 + 64 * tailctl_rt::shared_state::MAX_WORKERS;

/// Threads of other processes: real tids to scribble into worker slots.
fn foreign_tids() -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    v.truncate(256);
    v
}

fn fuzz(cli: &Cli, secs: u64, threads: usize, benign: bool) -> Result<()> {
    use tailctl_rt::kernel::link;
    let threads = threads.clamp(1, tailctl_rt::shared_state::MAX_WORKERS);
    // The smallest thresholds there are: every charged request is serialized at once.
    let (stream, service, fd) = link::register(&cli.socket, &[1; 256], None)
        .context("registering (is scx_tailctl running?)")?;
    let fd = fd.context("no region fd")?;
    let region = link::MappedRegion::map(std::os::fd::AsFd::as_fd(&fd))?;
    // SAFETY: page-aligned mapping of a whole region, alive until we exit.
    let shared =
        unsafe { tailctl_rt::shared_state::SharedState::from_raw(region.as_ptr(), threads) };
    let stop = Arc::new(AtomicBool::new(false));

    // The registered threads: bursts of spinning and short sleeps, so they go
    // through enqueue/dispatch (and the throttle queues) all the time.
    let (tx, rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let stop = stop.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
                let mut x = 0x2545_f491_4f6c_dd1du64 ^ i as u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    burn_cpu(Duration::from_micros(x % 3000));
                    if x.is_multiple_of(4) {
                        std::thread::sleep(Duration::from_micros(x % 500));
                    }
                }
            })
        })
        .collect();
    let tids: Vec<u32> = (0..threads).map(|_| rx.recv().unwrap()).collect();
    link::bind(&stream, &tids).context("binding the threads")?;

    let len = std::mem::size_of::<tailctl_rt::shared_state::SharedRegion>();
    let private: &'static [AtomicU64] =
        Box::leak((0..len / 8).map(|_| AtomicU64::new(0)).collect());
    let base = if benign {
        private.as_ptr() as usize
    } else {
        shared.region() as *const _ as usize
    };
    let others = foreign_tids();
    let writers: Vec<_> = (0..2u64)
        .map(|seed| {
            let stop = stop.clone();
            let (tids, others) = (tids.clone(), others.clone());
            std::thread::spawn(move || {
                let w32 = |off: usize, v: u32| {
                    // SAFETY: in bounds of our own region (or private copy);
                    // every field there is an atomic integer.
                    unsafe { (*((base + off) as *const AtomicU32)).store(v, Ordering::Relaxed) }
                };
                let w64 = |off: usize, v: u64| {
                    // SAFETY: as above, 8-byte aligned offsets.
                    unsafe { (*((base + off) as *const AtomicU64)).store(v, Ordering::Relaxed) }
                };
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (seed + 1);
                let mut writes = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let r = x >> 8;
                    // Mostly plausible: a worker on one of a few requests (so threads
                    // collide on capped requests and queue for tokens), whose slot
                    // carries the tag's generation.
                    let nw = if r.is_multiple_of(8) {
                        64
                    } else {
                        tids.len() as u64
                    };
                    let w = WORKERS_AT + 64 * (r % nw) as usize;
                    let slot = if r % 32 == 1 {
                        (r >> 8) as u32
                    } else {
                        ((r >> 8) % 4) as u32
                    };
                    // Mostly one generation, so tags stay valid long enough for
                    // requests to cross their threshold and be capped.
                    let gen = if r.is_multiple_of(64) {
                        ((r >> 24) % 4) as u32
                    } else {
                        1
                    };
                    let tag = ((gen as u64) << 32) | slot as u64;
                    match x % 10 {
                        0 => w64((r as usize % (len / 8)) * 8, x.rotate_left(17)),
                        1 => w32(HDR_ACTIVE, (r % 300) as u32),
                        2 => w32(
                            HDR_MAGIC,
                            if r.is_multiple_of(16) {
                                r as u32
                            } else {
                                0x5452_4354
                            },
                        ),
                        3 => w32(HDR_VERSION, if r.is_multiple_of(16) { r as u32 } else { 1 }),
                        4 => {
                            let t = if r.is_multiple_of(2) {
                                tids[(r >> 4) as usize % tids.len()]
                            } else {
                                others[(r >> 4) as usize % others.len().max(1)]
                            };
                            w32(w + 16, t)
                        }
                        // Mostly WORKING (0): charged, and subject to the cap.
                        5 => w32(
                            w + 20,
                            if r.is_multiple_of(4) {
                                (r >> 2) as u32 % 4
                            } else {
                                0
                            },
                        ),
                        6 => w64(w, if r.is_multiple_of(16) { u64::MAX } else { tag }),
                        _ => {
                            if (slot as usize) < tailctl_rt::shared_state::MAX_REQUESTS {
                                let q = REQUESTS_AT + 64 * slot as usize;
                                // flags | generation << 32: one u64 at +8.
                                w64(q + 8, ((gen as u64) << 32) | ((r >> 40) % 2));
                                w32(q + 32, (r % 3) as u32);
                            }
                        }
                    }
                    writes += 1;
                }
                writes
            })
        })
        .collect();
    let t0 = Instant::now();
    let c0 = process_cpu();
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let cpu = process_cpu() - c0;
    stop.store(true, Ordering::Relaxed);
    let writes: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    for w in workers {
        let _ = w.join();
    }
    println!(
        "{}",
        serde_json::to_string(&json!({
            "benign": benign,
            "service": service,
            "threads": threads,
            "writes": writes,
            "share": cpu.as_secs_f64() / t0.elapsed().as_secs_f64(),
        }))?
    );
    drop(stream);
    Ok(())
}

/// A registered CPU-bound service at priority `level`: `threads` spinning
/// workers, bound as the service's workers; reports the CPU it got.
fn prio(cli: &Cli, secs: u64, level: Option<u8>, threads: usize) -> Result<()> {
    use tailctl_rt::kernel::link;
    let threads = threads.clamp(1, tailctl_rt::shared_state::MAX_WORKERS);
    let (stream, service, _fd) = link::register_at(&cli.socket, &[], None, level)
        .context("registering (is scx_tailctl running?)")?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let stop = stop.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n = n.wrapping_add(1);
                    std::hint::spin_loop();
                }
                n
            })
        })
        .collect();
    let tids: Vec<u32> = (0..threads).map(|_| rx.recv().unwrap()).collect();
    link::bind(&stream, &tids).context("binding the threads")?;
    let (c0, t0) = (process_cpu(), mono_ns());
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, t1) = (process_cpu(), mono_ns());
    stop.store(true, Ordering::Relaxed);
    let loops: u64 = workers.into_iter().map(|h| h.join().unwrap()).sum();
    let cpu_ns = (c1 - c0).as_nanos() as u64;
    let wall_ns = t1 - t0;
    println!(
        "{}",
        serde_json::to_string(&json!({
            "service": service,
            "level": level,
            "threads": threads,
            "cpu_s": cpu_ns as f64 / 1e9,
            "wall_s": wall_ns as f64 / 1e9,
            "share": cpu_ns as f64 / wall_ns as f64,
            "loops": loops,
        }))?
    );
    drop(stream);
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serialize {
            huge_ms,
            threshold_ms,
            small_ms,
            small_every_ms,
            user_only,
            compare,
            rounds,
            pin,
            ignore_cap,
        } => {
            let w = SerializeWorkload {
                huge_ms,
                threshold_ms,
                small_ms,
                every_ms: small_every_ms,
                pin,
                ignore_cap,
            };
            let out = if compare {
                serialize_compare(&cli, &w, rounds)?
            } else {
                serialize(&cli, &w, user_only)?
            };
            println!("{}", serde_json::to_string(&out)?);
            Ok(())
        }
        Cmd::Account {
            ms,
            count,
            chunks,
            pace_us,
            pacer_cpu,
            busy_cpu,
        } => account(
            &cli,
            ms,
            count,
            Pacing {
                chunks,
                pace_us,
                pacer_cpu,
            },
            busy_cpu,
        ),
        Cmd::Serve {
            secs,
            require_kernel,
            items,
            item_us,
            threshold_ms,
        } => serve(
            &cli,
            secs,
            require_kernel,
            ServeWork {
                items: items as usize,
                item: Duration::from_micros(item_us),
                threshold_ms,
            },
        ),
        Cmd::Rogue {
            secs,
            benign,
            no_cap,
        } => rogue(&cli, secs, benign, no_cap),
        Cmd::Hog { secs, threads } => hog(secs, threads.unwrap_or_else(nr_cpus)),
        Cmd::Greedy {
            secs,
            requests,
            threshold_ns,
            benign,
            ignore_cap,
            items,
            item_us,
            sleep_us,
            grow_after,
            grow_requests,
            watch_desched,
            inflate_desire,
        } => greedy(
            &cli,
            secs,
            (
                requests,
                grow_after,
                grow_requests,
                watch_desched,
                inflate_desire,
            ),
            (!benign).then_some(threshold_ns),
            ignore_cap,
            (items, item_us, sleep_us),
        ),
        Cmd::Churn {
            secs,
            requests,
            threshold_ms,
            affinity,
            nice,
            policy,
            sleep,
        } => churn(
            &cli,
            secs,
            requests,
            threshold_ms,
            ChurnKinds {
                affinity,
                nice,
                policy,
                sleep,
            },
        ),
        Cmd::Hold { secs, threshold_ms } => hold(&cli, secs, threshold_ms),
        Cmd::Reuse { successor } => reuse(&cli, !successor),
        Cmd::Stats => stats(&cli),
        Cmd::Prio {
            secs,
            level,
            threads,
        } => prio(&cli, secs, level, threads.unwrap_or_else(nr_cpus)),
        Cmd::Fuzz {
            secs,
            threads,
            benign,
        } => fuzz(&cli, secs, threads, benign),
    }
}
