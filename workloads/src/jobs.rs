//! Parallel jobs for the multiprogramming experiment (`tailctl-jobs`).
//!
//! Design: SAWS and AMCilk evaluate core allotment with whole parallel
//! programs (Cilk benchmarks) that arrive over time and leave when done, and
//! judge a policy by the jobs' response times and the machine's utilisation.
//! Here a job is one process running one of four fork-join kernels on its own
//! `tailctl-rt` pool, registered with `scx_tailctl` when it runs, so the
//! kernel sees it as one job and enforces its allotment. The kernels differ in
//! shape, which is what gives the policies something to decide:
//!
//! - `fib`: a binary recursion of `join`s, abundant fine-grained parallelism;
//! - `matmul`: a parallel loop over row blocks, wide and regular;
//! - `sort`: a merge sort whose merges are serial, so parallelism shrinks
//!   towards the root (a job whose desire falls over its life);
//! - `heat`: a 2-D stencil, one parallel loop per time step with a barrier
//!   between steps (parallelism that comes and goes).
//!
//! This module holds the kernels, the arrival trace and the report; the
//! binary spawns the processes.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One of the job kernels (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Recursive Fibonacci with `join`: fine-grained, abundant parallelism.
    Fib,
    /// Dense matrix product, a parallel loop over rows: wide and regular.
    Matmul,
    /// Merge sort with serial merges: parallelism shrinks towards the root.
    Sort,
    /// A 2-D heat stencil, one parallel loop per step: parallelism that comes and goes.
    Heat,
}

impl JobKind {
    /// Every kind, in a fixed order.
    pub const ALL: [JobKind; 4] = [JobKind::Fib, JobKind::Matmul, JobKind::Sort, JobKind::Heat];

    /// The size a job of this kind has at `scale` 1: about 0.1 s of one core
    /// on a current x86 host (the drivers calibrate; this only sets the shape).
    pub fn base_size(self) -> usize {
        match self {
            JobKind::Fib => 38,
            JobKind::Matmul => 400,
            JobKind::Sort => 3 << 20,
            JobKind::Heat => 880,
        }
    }

    /// The size at `scale` (work grows about linearly with `scale`).
    ///
    /// ```
    /// use tailctl_workloads::jobs::JobKind;
    /// assert_eq!(JobKind::Sort.size_at(2.0), 6 << 20);
    /// assert!(JobKind::Fib.size_at(4.0) > JobKind::Fib.size_at(1.0));
    /// ```
    pub fn size_at(self, scale: f64) -> usize {
        let scale = scale.max(1e-3);
        let b = self.base_size() as f64;
        match self {
            // fib's work grows by the golden ratio per step of n.
            JobKind::Fib => (b + scale.ln() / 1.618f64.ln()).round().max(10.0) as usize,
            JobKind::Matmul => (b * scale.cbrt()).round().max(8.0) as usize,
            JobKind::Sort => (b * scale).round().max(1024.0) as usize,
            JobKind::Heat => (b * scale.sqrt()).round().max(16.0) as usize,
        }
    }

    /// Checks that [`run`](Self::run) can take `size`: `sort` needs at least
    /// one element and `heat` a 3×3 grid (one interior point); `fib` at most
    /// 90 (its recursion depth, and fib(90) still fits a `u64`).
    ///
    /// ```
    /// use tailctl_workloads::jobs::JobKind;
    /// assert!(JobKind::Sort.check_size(0).is_err());
    /// assert!(JobKind::Heat.check_size(0).is_err());
    /// assert!(JobKind::Fib.check_size(5_000_000_000).is_err());
    /// for k in JobKind::ALL {
    ///     assert!(k.check_size(k.base_size()).is_ok());
    /// }
    /// ```
    pub fn check_size(self, size: usize) -> Result<(), String> {
        let (min, max) = match self {
            JobKind::Fib => (0, 90),
            JobKind::Matmul => (1, usize::MAX),
            JobKind::Sort => (1, usize::MAX),
            JobKind::Heat => (3, usize::MAX),
        };
        if size < min || size > max {
            let range = if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("in {min}..={max}")
            };
            return Err(format!(
                "--size {size}: a {self} job's size must be {range}"
            ));
        }
        Ok(())
    }

    /// Runs the kernel on the calling pool's workers (call it inside a
    /// request) and returns a checksum, so nothing is optimised away.
    /// `size` must pass [`check_size`](Self::check_size).
    ///
    /// ```
    /// use tailctl_workloads::jobs::JobKind;
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let sum = pool.submit(|| JobKind::Fib.run(20)).wait().unwrap();
    /// assert_eq!(sum, 6765);
    /// ```
    pub fn run(self, size: usize) -> u64 {
        match self {
            JobKind::Fib => fib(size as u32),
            JobKind::Matmul => matmul(size),
            JobKind::Sort => sort(size),
            JobKind::Heat => heat(size, 32),
        }
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobKind::Fib => "fib",
            JobKind::Matmul => "matmul",
            JobKind::Sort => "sort",
            JobKind::Heat => "heat",
        })
    }
}

impl FromStr for JobKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobKind::ALL
            .into_iter()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| format!("unknown job kind `{s}`; expected fib, matmul, sort or heat"))
    }
}

fn fib(n: u32) -> u64 {
    if n < 18 {
        return fib_serial(n);
    }
    let (a, b) = tailctl_rt::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

/// Seconds one thread takes for a fixed serial computation (the shortest of three tries of a
/// serial `fib(30)`), measured between runs on an otherwise idle machine. A TCG guest's speed
/// follows its host's load, so a run's response times are only comparable with another run's
/// once each is divided by the probe taken around it (see [`PolicyRun::probe_s`]).
///
/// ```
/// let s = tailctl_workloads::jobs::speed_probe();
/// assert!(s > 0.0 && s.is_finite());
/// ```
pub fn speed_probe() -> f64 {
    (0..3)
        .map(|_| {
            let t0 = std::time::Instant::now();
            std::hint::black_box(fib_serial(std::hint::black_box(30)));
            t0.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn fib_serial(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib_serial(n - 1) + fib_serial(n - 2)
    }
}

/// A deterministic matrix, cheap to make.
fn matrix(n: usize, seed: u64) -> Vec<f64> {
    (0..n * n)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f64 / 1000.0)
        .collect()
}

fn matmul(n: usize) -> u64 {
    let (a, b) = (matrix(n, 1), matrix(n, 2));
    let c: Vec<std::sync::atomic::AtomicU64> = (0..n * n).map(|_| Default::default()).collect();
    tailctl_rt::parallel_for(0..n, 4, |i| {
        for j in 0..n {
            let mut s = 0.0;
            for k in 0..n {
                s += a[i * n + k] * b[k * n + j];
            }
            c[i * n + j].store(s.to_bits(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    c.iter()
        .map(|x| f64::from_bits(x.load(std::sync::atomic::Ordering::Relaxed)))
        .sum::<f64>() as u64
}

fn sort(n: usize) -> u64 {
    let mut v: Vec<u64> = (0..n as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16)
        .collect();
    let mut tmp = vec![0; n];
    // The job server's merge sort: serial merges, so parallelism shrinks towards the root.
    crate::jobserver::merge_sort(&mut v, &mut tmp);
    debug_assert!(v.windows(2).all(|w| w[0] <= w[1]));
    v[n / 2] ^ v[n - 1]
}

fn heat(n: usize, steps: usize) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let grid =
        |v: f64| -> Vec<AtomicU64> { (0..n * n).map(|_| AtomicU64::new(v.to_bits())).collect() };
    let (a, b) = (grid(0.0), grid(0.0));
    for j in 0..n {
        a[j].store(100f64.to_bits(), Relaxed);
        b[j].store(100f64.to_bits(), Relaxed);
    }
    let get = |g: &[AtomicU64], i: usize| f64::from_bits(g[i].load(Relaxed));
    for step in 0..steps {
        let (src, dst) = if step % 2 == 0 { (&a, &b) } else { (&b, &a) };
        tailctl_rt::parallel_for(1..n - 1, 2, |i| {
            for j in 1..n - 1 {
                let x = 0.25
                    * (get(src, (i - 1) * n + j)
                        + get(src, (i + 1) * n + j)
                        + get(src, i * n + j - 1)
                        + get(src, i * n + j + 1));
                dst[i * n + j].store(x.to_bits(), Relaxed);
            }
        });
    }
    (0..n * n).map(|i| get(&a, i)).sum::<f64>() as u64
}

/// One job of a trace: when it arrives (from the start of the run), what it runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Arrival, from the start of the run.
    pub arrival: Duration,
    /// The kernel it runs.
    pub kind: JobKind,
    /// Its size (see [`JobKind::size_at`]).
    pub size: usize,
}

/// A Poisson trace of `n` jobs: kinds drawn uniformly from `kinds`, each at a
/// size for `scale` times 1 or 2 (half each), mean inter-arrival `mean_gap`.
///
/// ```
/// use std::time::Duration;
/// use tailctl_workloads::jobs::{poisson_trace, JobKind};
/// let t = poisson_trace(10, &JobKind::ALL, 1.0, Duration::from_millis(100), 7);
/// assert_eq!(t.len(), 10);
/// assert!(t.windows(2).all(|w| w[0].arrival <= w[1].arrival));
/// assert_eq!(t, poisson_trace(10, &JobKind::ALL, 1.0, Duration::from_millis(100), 7));
/// ```
pub fn poisson_trace(
    n: usize,
    kinds: &[JobKind],
    scale: f64,
    mean_gap: Duration,
    seed: u64,
) -> Vec<JobSpec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t = 0.0f64;
    (0..n)
        .map(|i| {
            if i > 0 {
                // Exponential gaps: -ln(U) * mean.
                let u: f64 = rng.gen_range(f64::EPSILON..1.0);
                t += -u.ln() * mean_gap.as_secs_f64();
            }
            let kind = kinds[rng.gen_range(0..kinds.len())];
            let s = if rng.gen_bool(0.5) {
                scale
            } else {
                2.0 * scale
            };
            JobSpec {
                arrival: Duration::from_secs_f64(t),
                kind,
                size: kind.size_at(s),
            }
        })
        .collect()
}

/// What one job did in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    /// The kernel it ran.
    pub kind: JobKind,
    /// Its size.
    pub size: usize,
    /// From arrival (the spawn) to the process's exit.
    pub response_s: f64,
    /// The job's CPU time (all its threads).
    pub cpu_s: f64,
    /// Whether its pool was registered with scx_tailctl.
    pub registered: bool,
    /// Where its CPU time went; `None` in reports made before it was recorded.
    #[serde(default)]
    pub cpu: Option<JobCpu>,
}

/// Where a job's CPU time went: the process's rusage and its pool's counters
/// ([`tailctl_rt::PoolStats`]), read when the job finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobCpu {
    /// User CPU time, all threads.
    pub user_s: f64,
    /// System CPU time, all threads (the kernel's scheduler, a BPF one's callbacks included).
    pub sys_s: f64,
    /// Thread CPU time the workers spent searching for work (stealing, spinning, yielding,
    /// parking and waking; part of user + sys).
    pub search_s: f64,
    /// Context switches in which a thread blocked (a park, a futex or I/O wait).
    pub voluntary_switches: u64,
    /// Context switches away from a thread still runnable: preemptions, and
    /// `sched_yield` calls that let another thread run (Linux counts those
    /// as involuntary).
    pub involuntary_switches: u64,
    /// Tasks stolen.
    pub steals: u64,
    /// `sched_yield` calls of searching workers.
    pub yields: u64,
    /// Blocking parks with nothing to do ([`tailctl_rt::PoolStats::parks`]).
    pub parks: u64,
    /// Blocking parks inside a join or scope (waiting for a thief to finish the other half).
    pub join_parks: u64,
    /// Tasks taken from deques of workers the kernel kept off the CPU (SAWS's mugging).
    pub desched_mugs: u64,
    /// Time its threads spent runnable but waiting for a CPU (`/proc/self/task/*/schedstat`:
    /// the kernel's own bookkeeping, the same under every scheduler; read before the
    /// workers exit).
    pub rq_wait_s: f64,
    /// How many times its threads were put on a CPU (the same source as `rq_wait_s`).
    pub runs: u64,
}

impl std::ops::AddAssign for JobCpu {
    fn add_assign(&mut self, o: Self) {
        self.user_s += o.user_s;
        self.sys_s += o.sys_s;
        self.search_s += o.search_s;
        self.voluntary_switches += o.voluntary_switches;
        self.involuntary_switches += o.involuntary_switches;
        self.steals += o.steals;
        self.yields += o.yields;
        self.parks += o.parks;
        self.join_parks += o.join_parks;
        self.desched_mugs += o.desched_mugs;
        self.rq_wait_s += o.rq_wait_s;
        self.runs += o.runs;
    }
}

/// One policy's figures over one run of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyRun {
    /// The allotment policy (`off`, `equi`, ..., or `default` without scx_tailctl).
    pub policy: String,
    /// Which round of the experiment.
    pub round: u32,
    /// Mean job response time.
    pub mean_response_s: f64,
    /// 95th percentile job response time (nearest rank).
    pub p95_response_s: f64,
    /// Sum of the jobs' CPU time over (cores x the run's span, first arrival to last exit).
    pub utilisation: f64,
    /// First arrival to last exit.
    pub span_s: f64,
    /// Every job, in trace order.
    pub jobs: Vec<JobResult>,
    /// The mean of the [`speed_probe`] taken just before and just after the run (under the same
    /// scheduler); `None` in reports made before it existed. A run whose probe took twice as
    /// long ran on a guest half as fast.
    #[serde(default)]
    pub probe_s: Option<f64>,
    /// Where the machine's CPUs went during the run, in cores (from `/proc/stat`: `idle`,
    /// `user`, `system`, `other`); `None` where it could not be read.
    #[serde(default)]
    pub machine_cores: Option<CpuSplit>,
    /// CPU seconds each thread of the scx_tailctl daemon ran during the run (`name/tid`,
    /// busiest first); empty under the default scheduler.
    #[serde(default)]
    pub daemon_cpu_s: Vec<(String, f64)>,
}

/// The machine's CPU time over an interval, in cores (CPU-seconds per second), from two readings
/// of `/proc/schedstat` (each CPU's time running tasks, in ns, kept by the scheduler on every
/// switch; `/proc/stat`'s tick samples lose ticks under TCG: they summed to 2.3-2.6 of 4 CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSplit {
    /// CPUs running tasks (any task, the scheduler's daemon included).
    pub busy: f64,
    /// CPUs idle: the machine's CPUs minus `busy`.
    pub idle: f64,
}

/// One reading of `/proc/schedstat`: (CPUs, their summed time running tasks in ns).
pub fn read_cpu_run_ns() -> Option<(u32, u64)> {
    parse_schedstat(&std::fs::read_to_string("/proc/schedstat").ok()?)
}

/// Parses `/proc/schedstat`'s text: the number of `cpuN` lines and the sum of their 7th
/// field (time spent running tasks, ns).
///
/// ```
/// use tailctl_workloads::jobs::parse_schedstat;
/// let t = "version 15\ntimestamp 1\ncpu0 0 0 9 3 5 2 1000 50 7\ndomain0 3 ...\ncpu1 0 0 9 3 5 2 500 50 7\n";
/// assert_eq!(parse_schedstat(t), Some((2, 1500)));
/// assert_eq!(parse_schedstat("version 15\n"), None);
/// ```
pub fn parse_schedstat(text: &str) -> Option<(u32, u64)> {
    let (mut cpus, mut run) = (0u32, 0u64);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some(c) if c.starts_with("cpu") && c[3..].parse::<u32>().is_ok() => {
                run = run.saturating_add(f.nth(6)?.parse().ok()?);
                cpus += 1;
            }
            _ => {}
        }
    }
    (cpus > 0).then_some((cpus, run))
}

impl CpuSplit {
    /// The split between two readings of [`read_cpu_run_ns`] `wall_s` seconds apart.
    ///
    /// ```
    /// use tailctl_workloads::jobs::CpuSplit;
    /// // 4 CPUs, 10 s, 30 CPU-seconds of running: 3 busy, 1 idle.
    /// let s = CpuSplit::between((4, 5_000_000_000), (4, 35_000_000_000), 10.0).unwrap();
    /// assert_eq!((s.busy, s.idle), (3.0, 1.0));
    /// ```
    pub fn between(before: (u32, u64), after: (u32, u64), wall_s: f64) -> Option<Self> {
        if wall_s <= 0.0 || before.0 != after.0 {
            return None;
        }
        let busy = after.1.saturating_sub(before.1) as f64 / 1e9 / wall_s;
        Some(Self {
            busy,
            idle: (after.0 as f64 - busy).max(0.0),
        })
    }
}

impl PolicyRun {
    /// Summarises the results of one run on `cores` cores.
    ///
    /// ```
    /// use tailctl_workloads::jobs::{JobKind, JobResult, PolicyRun};
    /// let j = |r: f64| JobResult { kind: JobKind::Fib, size: 20, response_s: r, cpu_s: 1.0, registered: true, cpu: None };
    /// let run = PolicyRun::new("equi", 0, vec![j(1.0), j(3.0)], 4.0, 2);
    /// assert_eq!(run.mean_response_s, 2.0);
    /// assert_eq!(run.utilisation, 0.25);
    /// ```
    pub fn new(policy: &str, round: u32, jobs: Vec<JobResult>, span_s: f64, cores: usize) -> Self {
        let mut r: Vec<f64> = jobs.iter().map(|j| j.response_s).collect();
        r.sort_by(f64::total_cmp);
        let mean = if r.is_empty() {
            0.0
        } else {
            r.iter().sum::<f64>() / r.len() as f64
        };
        let cpu: f64 = jobs.iter().map(|j| j.cpu_s).sum();
        PolicyRun {
            policy: policy.to_string(),
            round,
            mean_response_s: mean,
            p95_response_s: quantile(&r, 0.95),
            utilisation: if span_s > 0.0 {
                cpu / (cores as f64 * span_s)
            } else {
                0.0
            },
            span_s,
            jobs,
            probe_s: None,
            machine_cores: None,
            daemon_cpu_s: Vec::new(),
        }
    }

    /// The jobs' [`JobCpu`] summed, if every job recorded one.
    ///
    /// ```
    /// use tailctl_workloads::jobs::{JobCpu, JobKind, JobResult, PolicyRun};
    /// let c = JobCpu { user_s: 1.0, sys_s: 0.5, yields: 3, ..Default::default() };
    /// let j = JobResult { kind: JobKind::Fib, size: 20, response_s: 1.0, cpu_s: 1.5, registered: true, cpu: Some(c) };
    /// let run = PolicyRun::new("deq", 0, vec![j.clone(), j], 4.0, 2);
    /// assert_eq!(run.cpu_total().unwrap().yields, 6);
    /// ```
    pub fn cpu_total(&self) -> Option<JobCpu> {
        let mut t = JobCpu::default();
        for j in &self.jobs {
            t += j.cpu?;
        }
        (!self.jobs.is_empty()).then_some(t)
    }

    /// The same run with the speed probes taken around it.
    pub fn with_probe(mut self, before_s: f64, after_s: f64) -> Self {
        self.probe_s = Some((before_s + after_s) / 2.0);
        self
    }
}

/// The `q` quantile of sorted `v` (nearest rank), 0 for an empty slice.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// The experiment's report: every run, and per policy the medians over rounds
/// and the change of each round's mean response against the baseline's run in
/// the same round (pairing cancels drift between rounds).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobsReport {
    /// One line describing the experiment.
    pub config: String,
    /// The command that produced it.
    pub command: String,
    /// CPUs of the machine.
    pub cores: usize,
    /// The policy the others are compared with.
    pub baseline: String,
    /// Every run, in the order they ran.
    pub runs: Vec<PolicyRun>,
}

/// One row of [`JobsReport::summary`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicySummary {
    /// The policy.
    pub policy: String,
    /// Runs of it.
    pub rounds: usize,
    /// Median over rounds of the mean response time.
    pub mean_response_s: f64,
    /// Median over rounds of the p95 response time.
    pub p95_response_s: f64,
    /// Median over rounds of the utilisation.
    pub utilisation: f64,
    /// Median over rounds of (mean response / baseline's in the same round) - 1.
    pub vs_baseline: Option<f64>,
    /// Median over rounds of the run's probe over the fastest probe of the report: how much
    /// slower the guest ran than at its best (1.0 = as fast); `None` without probes.
    #[serde(default)]
    pub slowdown: Option<f64>,
    /// As [`PolicySummary::vs_baseline`], with each run's mean response first divided by its
    /// probe (the guest's speed during it); `None` without probes.
    #[serde(default)]
    pub vs_baseline_per_probe: Option<f64>,
    /// Median over rounds of the machine's idle CPUs during the run (cores); `None` without
    /// readings.
    #[serde(default)]
    pub idle_cores: Option<f64>,
    /// Jobs (over all rounds) whose pool was registered with scx_tailctl when it
    /// finished, and all jobs: an unregistered job was not allotted.
    #[serde(default)]
    pub registered_jobs: (usize, usize),
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl JobsReport {
    /// Per policy, in first-run order: medians over rounds, paired change.
    pub fn summary(&self) -> Vec<PolicySummary> {
        let mut names: Vec<&str> = Vec::new();
        for r in &self.runs {
            if !names.contains(&r.policy.as_str()) {
                names.push(&r.policy);
            }
        }
        let fastest = self
            .runs
            .iter()
            .filter_map(|r| r.probe_s)
            .filter(|p| *p > 0.0)
            .fold(f64::INFINITY, f64::min);
        names
            .into_iter()
            .map(|p| {
                let runs: Vec<&PolicyRun> = self.runs.iter().filter(|r| r.policy == p).collect();
                let base = |r: &PolicyRun| {
                    self.runs
                        .iter()
                        .find(|b| b.policy == self.baseline && b.round == r.round)
                        .filter(|b| b.mean_response_s > 0.0)
                };
                let paired: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| base(r).map(|b| r.mean_response_s / b.mean_response_s - 1.0))
                    .collect();
                let per_probe: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| {
                        let b = base(r)?;
                        let (pr, pb) = (r.probe_s?, b.probe_s?);
                        (pr > 0.0 && pb > 0.0)
                            .then(|| (r.mean_response_s / pr) / (b.mean_response_s / pb) - 1.0)
                    })
                    .collect();
                let slowdowns: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.probe_s)
                    .filter(|_| fastest.is_finite())
                    .map(|p| p / fastest)
                    .collect();
                let idle: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.machine_cores.map(|m| m.idle))
                    .collect();
                PolicySummary {
                    policy: p.to_string(),
                    rounds: runs.len(),
                    mean_response_s: median(runs.iter().map(|r| r.mean_response_s).collect()),
                    p95_response_s: median(runs.iter().map(|r| r.p95_response_s).collect()),
                    utilisation: median(runs.iter().map(|r| r.utilisation).collect()),
                    vs_baseline: (!paired.is_empty()).then(|| median(paired)),
                    slowdown: (!slowdowns.is_empty()).then(|| median(slowdowns)),
                    vs_baseline_per_probe: (!per_probe.is_empty()).then(|| median(per_probe)),
                    idle_cores: (!idle.is_empty()).then(|| median(idle)),
                    registered_jobs: (
                        runs.iter()
                            .flat_map(|r| &r.jobs)
                            .filter(|j| j.registered)
                            .count(),
                        runs.iter().map(|r| r.jobs.len()).sum(),
                    ),
                }
            })
            .collect()
    }

    /// The summary as a Markdown table.
    pub fn table_md(&self) -> String {
        let mut s = format!(
            "{}\n\n| policy | rounds | mean response (s) | p95 response (s) | utilisation | idle CPUs | mean vs {b} (paired) | guest slowdown (probe) | mean vs {b}, per probe (paired) | jobs registered |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.config,
            b = self.baseline
        );
        let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:+.1}%", v * 100.0));
        for r in self.summary() {
            s += &format!(
                "| {} | {} | {:.3} | {:.3} | {:.2} | {} | {} | {} | {} | {}/{} |\n",
                r.policy,
                r.rounds,
                r.mean_response_s,
                r.p95_response_s,
                r.utilisation,
                r.idle_cores.map_or("-".into(), |v| format!("{v:.2}")),
                pct(r.vs_baseline),
                r.slowdown.map_or("-".into(), |v| format!("{v:.2}x")),
                pct(r.vs_baseline_per_probe),
                r.registered_jobs.0,
                r.registered_jobs.1
            );
        }
        s + &self.cpu_table_md()
    }

    /// Where the jobs' CPU went, per policy: medians over rounds of each run's sums over its
    /// jobs (empty if no run recorded it).
    pub fn cpu_table_md(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        for r in &self.runs {
            if !names.contains(&r.policy.as_str()) {
                names.push(&r.policy);
            }
        }
        let mut s = String::from(
            "\nWhere the jobs' CPU went (per run, all jobs; medians over rounds; searching overlaps user and system):\n\n| policy | rounds | CPU (s) | user (s) | system (s) | searching (s) | voluntary switches | involuntary switches | yields | parks | join parks | steals | mugs of descheduled deques | runqueue wait (s) | wait per run (us) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let mut any = false;
        for p in names {
            let t: Vec<JobCpu> = self
                .runs
                .iter()
                .filter(|r| r.policy == p)
                .filter_map(PolicyRun::cpu_total)
                .collect();
            if t.is_empty() {
                continue;
            }
            any = true;
            let m = |f: &dyn Fn(&JobCpu) -> f64| median(t.iter().map(f).collect());
            s += &format!(
                "| {p} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} |\n",
                t.len(),
                m(&|c| c.user_s + c.sys_s),
                m(&|c| c.user_s),
                m(&|c| c.sys_s),
                m(&|c| c.search_s),
                m(&|c| c.voluntary_switches as f64),
                m(&|c| c.involuntary_switches as f64),
                m(&|c| c.yields as f64),
                m(&|c| c.parks as f64),
                m(&|c| c.join_parks as f64),
                m(&|c| c.steals as f64),
                m(&|c| c.desched_mugs as f64),
                m(&|c| c.rq_wait_s),
                m(&|c| {
                    if c.runs > 0 {
                        c.rq_wait_s * 1e6 / c.runs as f64
                    } else {
                        0.0
                    }
                }),
            );
        }
        if any {
            s
        } else {
            String::new()
        }
    }

    /// Mean and p95 response per policy (medians over rounds) as grouped bars, SVG.
    pub fn plot_svg(&self, path: &std::path::Path) -> Result<()> {
        use plotters::prelude::*;
        let rows = self.summary();
        if rows.is_empty() {
            bail!("nothing to plot");
        }
        let root = SVGBackend::new(path, (800, 450)).into_drawing_area();
        root.fill(&WHITE)?;
        let ymax = rows.iter().map(|r| r.p95_response_s).fold(0.0, f64::max) * 1.15;
        let n = rows.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Job response time — {}", self.config),
                ("sans-serif", 15),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n, 0.0..ymax.max(1e-3))?;
        let labels: Vec<String> = rows.iter().map(|r| r.policy.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(rows.len() * 2 + 1)
            .x_label_formatter(&|x| crate::plot::group_label(*x, &labels, 0.01))
            .y_desc("seconds (median over rounds)")
            .draw()?;
        for (i, r) in rows.iter().enumerate() {
            let x = i as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.15, 0.0), (x + 0.48, r.mean_response_s)],
                BLUE.filled(),
            )))?;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.52, 0.0), (x + 0.85, r.p95_response_s)],
                RED.filled(),
            )))?;
        }
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, 0.0), (0.0, 0.0)],
                BLUE.filled(),
            )))?
            .label("mean")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], BLUE.filled()));
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, 0.0), (0.0, 0.0)],
                RED.filled(),
            )))?
            .label("p95")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], RED.filled()));
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()?;
        root.present()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compute_what_they_should() {
        let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
        assert_eq!(pool.submit(|| fib(25)).wait().unwrap(), fib_serial(25));
        // The sort's checksum depends on a sorted result: compare with std.
        let n = 50_000;
        let mut v: Vec<u64> = (0..n as u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16)
            .collect();
        v.sort_unstable();
        assert_eq!(
            pool.submit(move || sort(n)).wait().unwrap(),
            v[n / 2] ^ v[n - 1]
        );
        // Heat keeps the boundary and diffuses inward: the sum grows with steps.
        let (h1, h2) = (
            pool.submit(|| heat(32, 1)).wait().unwrap(),
            pool.submit(|| heat(32, 8)).wait().unwrap(),
        );
        assert!(h2 > h1, "{h1} {h2}");
        assert!(pool.submit(|| matmul(16)).wait().unwrap() > 0);
    }

    /// A registered fib job that took `response_s`.
    fn job(response_s: f64) -> JobResult {
        JobResult {
            kind: JobKind::Fib,
            size: 20,
            response_s,
            cpu_s: 1.0,
            registered: true,
            cpu: None,
        }
    }

    /// A report of `runs` on 2 cores, compared with `equi`.
    fn against_equi(runs: Vec<PolicyRun>) -> JobsReport {
        JobsReport {
            config: "t".into(),
            command: "c".into(),
            cores: 2,
            baseline: "equi".into(),
            runs,
        }
    }

    #[test]
    fn summary_pairs_rounds_against_the_baseline() {
        let j = job;
        let report = against_equi(vec![
            PolicyRun::new("equi", 0, vec![j(2.0)], 2.0, 2),
            PolicyRun::new("deq", 0, vec![j(1.0)], 2.0, 2),
            PolicyRun::new("equi", 1, vec![j(4.0)], 2.0, 2),
            PolicyRun::new("deq", 1, vec![j(3.0)], 2.0, 2),
        ]);
        let s = report.summary();
        assert_eq!(s[0].policy, "equi");
        assert_eq!(s[0].vs_baseline, Some(0.0));
        assert_eq!(s[0].registered_jobs, (2, 2));
        // Rounds: -50% and -25%; median -37.5%.
        assert_eq!(s[1].vs_baseline, Some(-0.375));
        assert!(report.table_md().contains("| deq | 2 |"));
        assert_eq!(s[1].slowdown, None);
    }

    #[test]
    fn the_cpu_table_sums_jobs_and_takes_medians_over_rounds() {
        let with = |r: f64, yields: u64| JobResult {
            cpu: Some(JobCpu {
                user_s: 1.0,
                sys_s: r,
                yields,
                rq_wait_s: 0.001 * r,
                runs: 10,
                ..Default::default()
            }),
            ..job(r)
        };
        let report = against_equi(vec![
            PolicyRun::new("equi", 0, vec![with(1.0, 10), with(1.0, 10)], 2.0, 2),
            PolicyRun::new("equi", 1, vec![with(3.0, 30), with(3.0, 30)], 2.0, 2),
            PolicyRun::new("equi", 2, vec![with(2.0, 20), with(2.0, 20)], 2.0, 2),
            // A run with one job missing its record is left out, not counted as zero.
            PolicyRun::new("deq", 0, vec![with(1.0, 1), job(1.0)], 2.0, 2),
        ]);
        let t = report.cpu_table_md();
        // equi: per run CPU 4/8/6 s (user 2 + system 2/6/4), yields 20/60/40: medians 6, 4, 40.
        assert!(
            t.contains("| equi | 3 | 6.0 | 2.0 | 4.0 | 0.0 | 0 | 0 | 40 |"),
            "{t}"
        );
        // Runqueue wait per run 0.004 s / 20 runs (round 2's, the median): 200 us.
        assert!(t.contains("| 0 | 0.0 | 200 |\n"), "{t}");
        assert!(!t.contains("| deq |"), "{t}");
        assert!(report.table_md().ends_with(&t));
        // No run recorded it: no table.
        let old = against_equi(vec![PolicyRun::new("equi", 0, vec![job(1.0)], 2.0, 2)]);
        assert_eq!(old.cpu_table_md(), "");
    }

    #[test]
    fn the_probe_takes_the_guest_speed_out_of_the_pairing() {
        let j = job;
        // Round 0: deq ran on a guest twice as slow (probe 2.0 vs 1.0) and took twice as long:
        // +100% raw, +0% per probe. Round 1: same speed, deq 10% faster.
        let report = against_equi(vec![
            PolicyRun::new("equi", 0, vec![j(2.0)], 2.0, 2).with_probe(1.0, 1.0),
            PolicyRun::new("deq", 0, vec![j(4.0)], 2.0, 2).with_probe(1.5, 2.5),
            PolicyRun::new("equi", 1, vec![j(2.0)], 2.0, 2).with_probe(1.0, 1.0),
            PolicyRun::new("deq", 1, vec![j(1.8)], 2.0, 2).with_probe(1.0, 1.0),
        ]);
        let s = report.summary();
        assert_eq!(s[1].vs_baseline, Some((1.0 - 0.1) / 2.0));
        let per_probe = s[1].vs_baseline_per_probe.unwrap();
        assert!((per_probe - (-0.05)).abs() < 1e-12, "{per_probe}");
        assert_eq!(s[1].slowdown, Some(1.5));
        assert_eq!(s[0].slowdown, Some(1.0));
        assert!(report.table_md().contains("| 1.50x |"));
    }
}
