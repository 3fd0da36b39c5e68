//! `tailctl sim`: a discrete-event simulator of the tail-control policies, and
//! a finite-N simulator of the mean-field work-stealing model.
//!
//! Design: the subcommands are thin: they build a [`workload::Trace`] (the
//! same requests for every policy), run [`engine::simulate`] once per
//! (policy, table) pair on worker threads, and hand plain numbers to
//! [`report`]. Targets are steal-first's own latency percentiles, as in the
//! paper; tail-control gets a threshold table computed by the runtime's
//! `ThresholdTable::compute` for each target (the very function the runtime
//! and the daemon use). `meanfield` reproduces seed 004's Table 3.
//!
//! * `tailctl sim compare` — the paper-style table (+ `--json`, `--plot`).
//! * `tailctl sim capacity` — the largest rps at which a policy keeps a
//!   latency percentile under a target (bisection on rps).
//! * `tailctl sim meanfield` — mean response time of child / parent stealing.
//! * `tailctl sim multiprog` — several parallel jobs sharing the cores under an allotment policy
//!   of `tailctl-allot` (EQUI, DEQ+SAWS, A-Steal, DREP); see [`multiprog`].
//!
//! What `compare`/`capacity` and `multiprog` share lives once: the flag
//! checks (`check`), the run flags (`Running`) and the report views'
//! settings, SVG frame and legend (`view`).

mod check;
pub mod engine;
pub mod meanfield;
pub mod multiprog;
pub mod report;
pub mod rng;
mod view;
pub mod workload;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tailctl_workloads::output::PendingFile;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tailctl_rt::distribution::{parse_duration, WorkDistribution};
use tailctl_rt::threshold::{ThresholdParams, ThresholdTable};

use engine::{Chunking, Config, Outcome, Policy};
use report::{miss_ratio, percentile, Comparison, PolicyRow};
use workload::{ArrivalSpec, Trace, WorkSpec};

/// Arguments of `tailctl sim`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(Subcommand)]
enum SimCommand {
    /// Run policies on one trace; targets at steal-first's percentiles (the paper's table).
    Compare(Box<CompareArgs>),
    /// Largest rps at which each policy keeps a latency percentile under a target.
    Capacity(Box<CapacityArgs>),
    /// Mean-field model of seed 004: N servers, child or parent stealing.
    Meanfield(Box<MeanfieldArgs>),
    /// Several parallel jobs share the cores under an allotment policy (EQUI, DEQ+SAWS, A-Steal, DREP).
    Multiprog(Box<multiprog::Args>),
}

/// Options shared by `compare` and `capacity`.
#[derive(clap::Args, Clone)]
struct Common {
    /// Work distribution: `bing`, `finance` (the workloads crate's histograms), `lognormal:MEAN:SD` as the load generator spells it (`lognormal:10ms:13ms`) or `lognormal:MEAN_MS,SD_MS`, or a histogram file (`[file:]PATH`, `WORK,PROBABILITY` lines).
    #[arg(long, default_value = "lognormal:10,13")]
    work: String,
    /// Arrival process: `poisson` or `lognormal:SD_MS` (mean 1/rps).
    #[arg(long, default_value = "poisson")]
    arrivals: String,
    /// Number of cores (workers).
    #[arg(long, default_value_t = 16)]
    cores: usize,
    /// Number of requests.
    #[arg(long, default_value_t = 100_000)]
    requests: usize,
    /// Requests at the start excluded from the statistics.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Fraction of each request's work that is sequential (0 = embarrassingly parallel; 0.1 = the paper's sub-linear variant).
    #[arg(long, default_value_t = 0.0)]
    seq_fraction: f64,
    /// Parallel-for loops per request, one after the other (e.g. the time steps of a PDE solver); with --seq-fraction each loop is preceded by a sequential segment.
    #[arg(long, default_value_t = 1)]
    loops: usize,
    /// Cost of one steal attempt (successful or not).
    #[arg(long, default_value = "1us", value_parser = parse_dur)]
    steal_cost: Duration,
    /// Leaf chunks of a parallel-for: a duration (`100us`: leaves of that much work) or `auto:K` (K leaves per parallel phase, like TBB's auto_partitioner).
    #[arg(long, default_value = "100us", value_parser = parse_chunking)]
    chunk: Chunking,
    /// Serialize marked requests at once (the kernel-enforced cap of tailctl) instead of lazily (the paper's runtime).
    #[arg(long)]
    eager: bool,
    /// Joins: `continuation` (Cilk: whoever finishes a loop continues; nobody blocks), `root` (TBB, the paper's runtime: pieces join by continuation, but the worker that started a loop waits for it, stealing but never admitting, and runs the next loop) or `blocking` (tailctl-rt/rayon: every worker waits in its own joins, stealing but never admitting, and a request's next loop starts on its first worker).
    #[arg(long, default_value = "continuation", value_parser = ["continuation", "root", "blocking"])]
    joins: String,
    /// Splitting of a parallel-for: `full` (halve every range down to single chunks: Cilk, TBB's simple_partitioner) or `adaptive` (tailctl-rt, rayon, TBB's auto_partitioner: about one piece per worker, split again only where a thief took a piece).
    #[arg(long, default_value = "full", value_parser = ["full", "adaptive"])]
    split: String,
    /// With --joins blocking: a worker waiting in a join of a serialized request may admit a new request (tailctl-rt's rule; without it such a worker idles until the request's other workers finish).
    #[arg(long)]
    admit_in_serialized_joins: bool,
    /// Random admission's per-worker queue: `lifo` (the paper's default TBB: pushed on the worker's deque, its owner takes the newest first) or `fifo` (tailctl-rt's per-worker inbox: oldest first).
    #[arg(long, default_value = "lifo", value_parser = ["lifo", "fifo"])]
    random_queue: String,
    /// Multiply every request's work by this (e.g. 2/1.8 to mimic a machine that gives the server 1.8 of 2 cores); tables still use the nominal distribution.
    #[arg(long, default_value_t = 1.0)]
    work_scale: f64,
    /// Threshold-table length (default: the runtime's heuristic from load).
    #[arg(long)]
    q_max: Option<usize>,
    /// Replace every tail-control table by this file (`tailctl thresholds -o`).
    #[arg(long)]
    table: Option<PathBuf>,
    /// Seed of the trace and the scheduler's randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Read requests from a `tailctl-trace v1` file instead of generating them (tables then come from the trace's own work histogram unless --work is given).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Policies: sf, af, tc, tc-clairvoyant, random (comma-separated).
    #[arg(
        long,
        default_value = "sf,af,tc,random,tc-clairvoyant",
        value_delimiter = ','
    )]
    policies: Vec<String>,
    #[command(flatten)]
    run: Running,
}

/// How a simulation runs and reports, for `compare`, `capacity` and
/// `multiprog` alike.
#[derive(clap::Args, Clone)]
pub(crate) struct Running {
    /// Worker threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl Running {
    /// The worker threads to simulate on.
    fn threads(&self) -> usize {
        threads(self.threads)
    }

    /// A progress bar over `total` steps, hidden with `--quiet` or `--json`.
    fn progress(&self, total: u64, what: &str) -> ProgressBar {
        progress(total, self.quiet || self.json, what)
    }
}

#[derive(clap::Args)]
struct CompareArgs {
    #[command(flatten)]
    common: Common,
    /// Average request rate.
    #[arg(long, default_value_t = 1200.0)]
    rps: f64,
    /// Percentiles of steal-first's latency used as targets.
    #[arg(long, default_value = "97.5,98.5,99,99.5,99.75", value_delimiter = ',')]
    percentiles: Vec<f64>,
    /// Explicit targets (e.g. `20ms,25ms`) instead of SF percentiles.
    #[arg(long, value_delimiter = ',', value_parser = parse_dur)]
    targets: Vec<Duration>,
    /// Write an SVG bar chart of the miss ratios here.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CapacityArgs {
    #[command(flatten)]
    common: Common,
    /// Latency percentile to keep under the target.
    #[arg(long, default_value_t = 99.5)]
    percentile: f64,
    /// Target latency.
    #[arg(long, value_parser = parse_dur)]
    target: Duration,
    /// Lowest rps searched.
    #[arg(long, default_value_t = 1.0)]
    rps_min: f64,
    /// Highest rps searched (default: 99% of cores / mean work).
    #[arg(long)]
    rps_max: Option<f64>,
    /// Resolution of the search, rps.
    #[arg(long, default_value_t = 5.0)]
    resolution: f64,
}

#[derive(clap::Args)]
struct MeanfieldArgs {
    /// Reproduce all eight entries of seed 004's Table 3 (ignores ρ, r, strategy, rates, children).
    #[arg(long)]
    table3: bool,
    /// Number of servers N.
    #[arg(long, default_value_t = 1000)]
    servers: usize,
    /// Load ρ.
    #[arg(long, default_value_t = 0.75)]
    rho: f64,
    /// Probe rate r of idle servers.
    #[arg(long, default_value_t = 1.0)]
    probe_rate: f64,
    /// `child` or `parent`.
    #[arg(long, default_value = "child")]
    strategy: String,
    /// Parent service rate μ1.
    #[arg(long, default_value_t = 1.0)]
    mu1: f64,
    /// Child service rate μ2.
    #[arg(long, default_value_t = 2.0)]
    mu2: f64,
    /// Weights of 0, 1, 2, … children (normalised).
    #[arg(long, default_value = "5,4,3,2,1", value_delimiter = ',')]
    children: Vec<f64>,
    /// End of the measurement window (time units).
    #[arg(long, default_value_t = 20000.0)]
    horizon: f64,
    /// Start of the measurement window.
    #[arg(long, default_value_t = 200.0)]
    warmup: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads for `--table3` (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Writes a command's output to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn emit(text: &str) -> Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// Writes `text` to an output file created before the run (so that a bad path
/// failed at once instead of after the whole simulation) and puts it in place.
pub(crate) fn write_output(mut f: PendingFile, text: &str) -> Result<()> {
    use std::io::Write as _;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", f.path().display()))?;
    f.commit()
}

fn parse_chunking(s: &str) -> Result<Chunking, String> {
    if let Some(k) = s.strip_prefix("auto:") {
        return match k.parse::<u32>() {
            Ok(k) if k > 0 => Ok(Chunking::PerPhase(k)),
            _ => Err(format!(
                "`{s}`: expected auto:K with K ≥ 1 leaves per phase"
            )),
        };
    }
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("chunk must be > 0".into());
    }
    Ok(Chunking::Fixed(d.as_secs_f64()))
}

/// Entry point of `tailctl sim`.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        SimCommand::Compare(a) => compare(*a),
        SimCommand::Capacity(a) => capacity(*a),
        SimCommand::Meanfield(a) => meanfield_cmd(*a),
        SimCommand::Multiprog(a) => multiprog::run(*a),
    }
}

/// Runs `jobs` on up to `threads` threads, results in job order.
fn parallel_map<J: Sync, R: Send>(
    jobs: &[J],
    threads: usize,
    f: impl Fn(&J) -> R + Sync,
) -> Vec<R> {
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    let i = *n;
                    *n += 1;
                    i
                };
                if i >= jobs.len() {
                    break;
                }
                let r = f(&jobs[i]);
                results.lock().unwrap()[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|r| r.expect("job ran"))
        .collect()
}

fn threads(opt: Option<usize>) -> usize {
    opt.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn progress(total: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})",
        )
        .expect("static template"),
    );
    pb.set_message(what.to_string());
    pb
}

/// Everything `compare` and `capacity` need, validated.
struct Setup {
    common: Common,
    work: Option<WorkSpec>,
    arrivals: ArrivalSpec,
    policies: Vec<Policy>,
    fixed_table: Option<ThresholdTable>,
}

fn setup(common: Common) -> Result<Setup> {
    let policies = check::policies(&common.policies, |p| {
        Policy::parse(p).with_context(|| {
            format!("unknown policy `{p}` (use sf, af, tc, tc-clairvoyant, random)")
        })
    })?;
    if common.joins != "continuation" && policies.contains(&Policy::Random) {
        bail!(
            "--joins {} is not modelled for the random policy; drop it from --policies",
            common.joins
        );
    }
    if common.admit_in_serialized_joins && common.joins != "blocking" {
        bail!("--admit-in-serialized-joins needs --joins blocking");
    }
    if common.joins == "blocking" && common.eager {
        bail!("--joins blocking and --eager cannot be combined");
    }
    check::at_least_one(common.cores as u64, "--cores")?;
    check::warmup_below(common.warmup, common.requests, "--requests")?;
    check::at_least_one(common.loops as u64, "--loops")?;
    if !(common.work_scale.is_finite() && common.work_scale > 0.0) {
        bail!("--work-scale must be a number > 0");
    }
    if !(0.0..=1.0).contains(&common.seq_fraction) {
        bail!("--seq-fraction must be in [0, 1]");
    }
    let work = if common.trace.is_some() && common.work == "lognormal:10,13" {
        None // tables come from the trace's own work histogram
    } else {
        Some(common.work.parse::<WorkSpec>()?)
    };
    let arrivals: ArrivalSpec = common.arrivals.parse()?;
    let fixed_table = match &common.table {
        Some(p) => Some(
            tailctl_rt::threshold::ThresholdTable::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        None => None,
    };
    Ok(Setup {
        common,
        work,
        arrivals,
        policies,
        fixed_table,
    })
}

/// A histogram of observed work: bins of mean/10 up to the maximum.
fn empirical(work: &[f64]) -> Result<WorkDistribution> {
    let mean = work.iter().sum::<f64>() / work.len() as f64;
    let max = work.iter().cloned().fold(0.0, f64::max);
    let width = mean / 10.0;
    let n = ((max / width).ceil() as usize).clamp(1, 10_000);
    let width = max / n as f64;
    let mut counts = vec![0.0; n];
    for &w in work {
        counts[((w / width).ceil() as usize).clamp(1, n) - 1] += 1.0;
    }
    let bins = counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c, Duration::from_secs_f64(width * (i + 1) as f64)))
        .collect();
    Ok(WorkDistribution::from_weights(bins)?)
}

impl Setup {
    fn trace(&self, rps: f64) -> Result<Trace> {
        let mut t = match &self.common.trace {
            Some(p) => Trace::load(p)?,
            None => Trace::generate(
                self.common.requests,
                rps,
                self.arrivals,
                self.work.as_ref().expect("work spec without a trace"),
                self.common.seq_fraction,
                self.common.seed,
            ),
        };
        for w in &mut t.work {
            *w *= self.common.work_scale;
        }
        Ok(t)
    }

    fn table_dist(&self, trace: &Trace) -> Result<WorkDistribution> {
        match &self.work {
            Some(w) => w.binned(),
            None => empirical(&trace.work),
        }
    }

    /// Threshold table (seconds, `INFINITY` = never) for a target at `rps`.
    fn table(&self, dist: &WorkDistribution, target: f64, rps: f64) -> Result<Vec<f64>> {
        let table = match &self.fixed_table {
            Some(t) => t.clone(),
            None => {
                let q_max = match self.common.q_max {
                    Some(q) => q,
                    None => ThresholdParams::default_q_max(dist, rps, self.common.cores)
                        .with_context(|| {
                            format!(
                                "overloaded: mean work × rps = {:.2} ≥ {} cores",
                                dist.mean_secs() * rps,
                                self.common.cores
                            )
                        })?,
                };
                ThresholdTable::compute(
                    dist,
                    &ThresholdParams {
                        target: Duration::from_secs_f64(target),
                        rps,
                        cores: self.common.cores,
                        q_max,
                    },
                )?
            }
        };
        Ok(table
            .thresholds()
            .iter()
            .map(|t| t.map_or(f64::INFINITY, |d| d.as_secs_f64()))
            .collect())
    }

    fn config(&self, policy: Policy, thresholds: Vec<f64>) -> Config {
        Config {
            cores: self.common.cores,
            policy,
            steal_cost: self.common.steal_cost.as_secs_f64(),
            chunking: self.common.chunk,
            loops: self.common.loops,
            eager: self.common.eager,
            blocking_joins: self.common.joins == "blocking",
            root_joins: self.common.joins == "root",
            admit_in_serialized_joins: self.common.admit_in_serialized_joins,
            adaptive_split: self.common.split == "adaptive",
            random_fifo: self.common.random_queue == "fifo",
            thresholds,
            seed: self.common.seed,
        }
    }

    fn measured<'b>(&self, o: &'b Outcome) -> &'b [f64] {
        &o.latency[self.common.warmup.min(o.latency.len())..]
    }
}

fn compare(a: CompareArgs) -> Result<()> {
    if !(a.rps.is_finite() && a.rps > 0.0) {
        bail!("--rps must be > 0");
    }
    for p in &a.percentiles {
        if !(*p > 0.0 && *p <= 100.0) {
            bail!("percentile {p} is not in (0, 100]");
        }
    }
    let s = setup(a.common)?;
    let plot = match &a.plot {
        Some(p) => Some(PendingFile::create(p)?),
        None => None,
    };
    let trace = s.trace(a.rps)?;
    let rps = if s.common.trace.is_some() {
        trace.rps()
    } else {
        a.rps
    };
    let dist = s.table_dist(&trace)?;
    let nthreads = s.common.run.threads();
    let started = Instant::now();

    // Steal-first first: it defines the targets.
    let explicit = !a.targets.is_empty();
    let n_tbl = if explicit {
        a.targets.len()
    } else {
        a.percentiles.len()
    };
    let runs_total = s
        .policies
        .iter()
        .map(|p| if p.uses_table() { n_tbl } else { 1 })
        .sum::<usize>()
        + usize::from(!explicit && !s.policies.contains(&Policy::StealFirst));
    let pb = s
        .common
        .run
        .progress((runs_total * trace.len()) as u64, "simulating");
    let tick = |k: u64| pb.inc(k);
    let run = |cfg: &Config| -> Result<Outcome> {
        engine::simulate(cfg, &trace, Some(&tick)).map_err(|e| anyhow::anyhow!(e))
    };

    let (targets, percentiles, sf) = if explicit {
        (
            a.targets
                .iter()
                .map(|d| d.as_secs_f64())
                .collect::<Vec<_>>(),
            vec![f64::NAN; a.targets.len()],
            None,
        )
    } else {
        let sf = run(&s.config(Policy::StealFirst, vec![]))?;
        let mut sorted = s.measured(&sf).to_vec();
        sorted.sort_by(f64::total_cmp);
        let t = a
            .percentiles
            .iter()
            .map(|&p| percentile(&sorted, p))
            .collect();
        (t, a.percentiles.clone(), Some(sf))
    };

    // One job per (policy, table): table-free policies run once.
    let mut jobs: Vec<(usize, Option<usize>, Config)> = Vec::new();
    for (pi, &p) in s.policies.iter().enumerate() {
        if p == Policy::StealFirst && sf.is_some() {
            continue;
        }
        if p.uses_table() {
            for (ti, &t) in targets.iter().enumerate() {
                jobs.push((pi, Some(ti), s.config(p, s.table(&dist, t, rps)?)));
            }
        } else {
            jobs.push((pi, None, s.config(p, vec![])));
        }
    }
    let outs = parallel_map(&jobs, nthreads, |(_, _, cfg)| run(cfg));
    pb.finish_and_clear();

    let mut rows = Vec::new();
    for (pi, &p) in s.policies.iter().enumerate() {
        let mut row = PolicyRow {
            policy: p.name().to_string(),
            miss: vec![],
            serialized: vec![],
            steals: vec![],
            mean_latency: f64::NAN,
            post_mark_parallelism: vec![],
        };
        if let (Policy::StealFirst, Some(o)) = (p, sf.as_ref()) {
            let l = s.measured(o);
            row.miss = targets.iter().map(|&t| miss_ratio(l, t)).collect();
            row.serialized = vec![o.serialized];
            row.steals = vec![o.steals];
            row.mean_latency = l.iter().sum::<f64>() / l.len() as f64;
        }
        for ((jpi, ti, _), o) in jobs.iter().zip(&outs) {
            if *jpi != pi {
                continue;
            }
            let o = o.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
            let l = s.measured(o);
            if row.mean_latency.is_nan() {
                row.mean_latency = l.iter().sum::<f64>() / l.len() as f64;
            }
            row.serialized.push(o.serialized);
            row.steals.push(o.steals);
            row.post_mark_parallelism.push(o.post_mark_parallelism());
            match ti {
                Some(ti) => row.miss.push(miss_ratio(l, targets[*ti])),
                None => row.miss = targets.iter().map(|&t| miss_ratio(l, t)).collect(),
            }
        }
        rows.push(row);
    }
    let c = &s.common;
    let settings = vec![
        ("work".to_string(), c.work.clone()),
        (
            "arrivals".to_string(),
            format!("{} at {rps:.1} rps", c.arrivals),
        ),
        ("cores".to_string(), c.cores.to_string()),
        ("work_scale".to_string(), c.work_scale.to_string()),
        (
            "requests".to_string(),
            format!("{} (warmup {})", trace.len(), c.warmup),
        ),
        (
            "utilisation".to_string(),
            format!("{:.3}", trace.mean_work() * rps / c.cores as f64),
        ),
        ("steal_cost".to_string(), format!("{:?}", c.steal_cost)),
        (
            "chunk".to_string(),
            match c.chunk {
                Chunking::Fixed(x) => format!("{:.0}us", x * 1e6),
                Chunking::PerPhase(k) => format!("auto:{k}"),
            },
        ),
        (
            "seq_fraction".to_string(),
            format!("{} ({} loop(s) per request)", c.seq_fraction, c.loops),
        ),
        ("joins".to_string(), c.joins.clone()),
        ("split".to_string(), c.split.clone()),
        ("random_queue".to_string(), c.random_queue.clone()),
        (
            "serialization".to_string(),
            if c.eager {
                "eager (kernel-style cap)"
            } else {
                "lazy (paper)"
            }
            .to_string(),
        ),
        ("seed".to_string(), c.seed.to_string()),
        (
            "wall_time".to_string(),
            format!("{:.2}s", started.elapsed().as_secs_f64()),
        ),
    ];
    let cmp = Comparison {
        settings,
        percentiles,
        targets,
        rows,
    };
    if let Some(f) = plot {
        write_output(f, &cmp.svg())?;
    }
    if c.run.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&cmp.json())?))?;
    } else {
        emit(&cmp.table())?;
    }
    Ok(())
}

fn capacity(a: CapacityArgs) -> Result<()> {
    if !(a.percentile > 0.0 && a.percentile <= 100.0) {
        bail!("--percentile must be in (0, 100]");
    }
    if a.target.is_zero() {
        bail!("--target must be > 0");
    }
    // Finite bounds and resolution: with infinity the bisection never ends,
    // with NaN it never starts (and reports --rps-min as the capacity).
    check::positive_finite(a.rps_min, "--rps-min")?;
    check::positive_finite(a.resolution, "--resolution")?;
    if let Some(x) = a.rps_max {
        check::positive_finite(x, "--rps-max")?;
    }
    let s = setup(a.common)?;
    if s.common.trace.is_some() {
        bail!("capacity search generates its own traces; drop --trace");
    }
    let work = s.work.as_ref().expect("work spec");
    let dist = work.binned()?;
    let mean = Trace::generate(20_000, 1.0, s.arrivals, work, 0.0, s.common.seed).mean_work();
    let hi = a
        .rps_max
        .unwrap_or(0.99 * s.common.cores as f64 / dist.mean_secs().max(mean));
    if !(a.rps_min > 0.0 && hi > a.rps_min) {
        bail!("need 0 < --rps-min < --rps-max ({} vs {hi})", a.rps_min);
    }
    let target = a.target.as_secs_f64();
    let pb = s.common.run.progress(s.policies.len() as u64, "capacity");
    let ok = |p: Policy, rps: f64| -> Result<(bool, f64)> {
        let trace = s.trace(rps)?;
        let tbl = if p.uses_table() {
            s.table(&dist, target, rps)?
        } else {
            vec![]
        };
        let o =
            engine::simulate(&s.config(p, tbl), &trace, None).map_err(|e| anyhow::anyhow!(e))?;
        let mut l = s.measured(&o).to_vec();
        l.sort_by(f64::total_cmp);
        let v = percentile(&l, a.percentile);
        Ok((v <= target, v))
    };
    let results = parallel_map(&s.policies, s.common.run.threads(), |&p| {
        let r = (|| -> Result<(f64, f64)> {
            let (mut lo, mut hi) = (a.rps_min, hi);
            let (good, v0) = ok(p, lo)?;
            if !good {
                return Ok((0.0, v0));
            }
            let mut best = v0;
            while hi - lo > a.resolution {
                let mid = (lo + hi) / 2.0;
                if mid <= lo || mid >= hi {
                    break; // a resolution finer than f64 can split
                }
                let (good, v) = ok(p, mid)?;
                if good {
                    lo = mid;
                    best = v;
                } else {
                    hi = mid;
                }
            }
            Ok((lo, best))
        })();
        pb.inc(1);
        r
    });
    pb.finish_and_clear();
    let mut out = Vec::new();
    for (p, r) in s.policies.iter().zip(results) {
        let (rps, lat) = r?;
        out.push((p.name(), rps, lat));
    }
    if s.common.run.json {
        let v = json!({
            "percentile": a.percentile,
            "target_ms": target * 1e3,
            "work": s.common.work,
            "cores": s.common.cores,
            "capacity": out.iter().map(|(p, r, l)| json!({
                "policy": p, "max_rps": r, "latency_at_max_ms": l * 1e3,
            })).collect::<Vec<_>>(),
        });
        emit(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
    } else {
        println!(
            "# capacity: max rps with p{} latency ≤ {:.2} ms ({} cores, work {}, ±{} rps)",
            a.percentile,
            target * 1e3,
            s.common.cores,
            s.common.work,
            a.resolution
        );
        for (p, r, l) in out {
            if r == 0.0 {
                println!(
                    "{p:<16} target missed even at --rps-min {} (p{} = {:.2} ms there)",
                    a.rps_min,
                    a.percentile,
                    l * 1e3
                );
            } else {
                println!(
                    "{p:<16} {r:>9.1} rps   (p{} = {:.2} ms there)",
                    a.percentile,
                    l * 1e3
                );
            }
        }
    }
    Ok(())
}

fn meanfield_cmd(a: MeanfieldArgs) -> Result<()> {
    use meanfield::{simulate, MfConfig, Strategy, TABLE3};
    let strategy = match a.strategy.as_str() {
        "child" => Strategy::Child,
        "parent" => Strategy::Parent,
        other => bail!("--strategy must be `child` or `parent`, got `{other}`"),
    };
    let total: f64 = a.children.iter().sum();
    if a.children.iter().any(|w| w.is_nan() || *w < 0.0) || total.is_nan() || total <= 0.0 {
        bail!("--children weights must be ≥ 0 with a positive sum");
    }
    let probs: Vec<f64> = a.children.iter().map(|w| w / total).collect();
    let base = MfConfig {
        servers: a.servers,
        rho: a.rho,
        mu1: a.mu1,
        mu2: a.mu2,
        probs,
        probe_rate: a.probe_rate,
        strategy,
        horizon: a.horizon,
        warmup: a.warmup,
        seed: a.seed,
    };
    base.validate().map_err(|e| anyhow::anyhow!(e))?;
    let started = Instant::now();
    if !a.table3 {
        let o = simulate(&base).map_err(|e| anyhow::anyhow!(e))?;
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "servers": a.servers, "rho": a.rho, "probe_rate": a.probe_rate,
                    "strategy": strategy.name(), "mean_response": o.mean_response,
                    "ci95": o.ci95, "jobs": o.jobs, "events": o.events,
                }))?
            );
        } else {
            println!(
                "{} stealing, N={}, ρ={}, r={}: E[T] = {:.4} ± {:.4} ({} jobs, {} events, {:.1}s)",
                strategy.name(),
                a.servers,
                a.rho,
                a.probe_rate,
                o.mean_response,
                o.ci95,
                o.jobs,
                o.events,
                started.elapsed().as_secs_f64()
            );
        }
        return Ok(());
    }
    let jobs: Vec<MfConfig> = TABLE3
        .iter()
        .enumerate()
        .map(|(i, &(st, rho, r, _))| MfConfig {
            rho,
            probe_rate: r,
            strategy: st,
            mu1: 1.0,
            mu2: 2.0,
            probs: meanfield::table3_probs(),
            seed: a.seed.wrapping_add(i as u64),
            ..base.clone()
        })
        .collect();
    let pb = progress(jobs.len() as u64, a.json, "meanfield");
    let outs = parallel_map(&jobs, threads(a.threads), |c| {
        let r = simulate(c);
        pb.inc(1);
        r
    });
    pb.finish_and_clear();
    let mut rows = Vec::new();
    for ((st, rho, r, paper), o) in TABLE3.iter().zip(outs) {
        let o = o.map_err(|e| anyhow::anyhow!(e))?;
        let err = (o.mean_response - paper) / paper;
        rows.push((*st, *rho, *r, *paper, o, err));
    }
    if a.json {
        let v = json!({
            "servers": a.servers, "horizon": a.horizon, "warmup": a.warmup,
            "entries": rows.iter().map(|(st, rho, r, paper, o, err)| json!({
                "strategy": st.name(), "rho": rho, "probe_rate": r,
                "paper_mean_field": paper, "simulated": o.mean_response,
                "ci95": o.ci95, "relative_error": err, "jobs": o.jobs,
            })).collect::<Vec<_>>(),
        });
        emit(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
    } else {
        println!(
            "# seed 004 Table 3: N={} servers, horizon {} (warmup {}), μ1=1, μ2=2, p=[5,4,3,2,1]/15",
            a.servers, a.horizon, a.warmup
        );
        println!(
            "{:<8} {:>5} {:>4} {:>10} {:>10} {:>9} {:>8}",
            "steal", "rho", "r", "paper(∞)", "sim", "±95%", "rel.err"
        );
        for (st, rho, r, paper, o, err) in &rows {
            println!(
                "{:<8} {:>5} {:>4} {:>10.4} {:>10.4} {:>9.4} {:>7.2}%",
                st.name(),
                rho,
                r,
                paper,
                o.mean_response,
                o.ci95,
                err * 100.0
            );
        }
        let worst = rows.iter().map(|x| x.5.abs()).fold(0.0, f64::max);
        println!(
            "# worst |relative error| {:.2}% ({:.1}s wall)",
            worst * 100.0,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
