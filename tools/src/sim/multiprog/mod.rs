//! `tailctl sim multiprog`: several parallel jobs share `P` cores; a controller divides the
//! cores among them every quantum with a `tailctl-allot` policy (the same code the scheduler
//! daemon runs), and each job runs randomized work stealing on the cores it was allotted.
//!
//! Design: [`dag`] generates Cilk-benchmark-like jobs, [`engine`] simulates one policy on one
//! workload (Poisson arrivals, [`engine::poisson_workload`]), [`report`] summarises runs over
//! seeds. The subcommand runs every (load, seed, policy) on worker threads; within a (load, seed)
//! every policy sees the same jobs arriving at the same times, so differences are paired.

pub mod dag;
pub mod engine;
pub mod report;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tailctl_workloads::output::PendingFile;

use anyhow::{bail, Context, Result};
use tailctl_allot::PolicyKind;

use super::check;
use dag::Bench;
use engine::{poisson_workload, simulate, Measure, MpConfig, UEstimator};
use report::{Report, RunStats};

/// Arguments of `tailctl sim multiprog`.
#[derive(clap::Args)]
pub struct Args {
    /// Cores `P` the controller divides.
    #[arg(long, default_value_t = 32)]
    cores: u32,
    /// Allotment policies (comma-separated): equi, deq (DEQ with SAWS's desire), asteal, drep.
    #[arg(
        long,
        alias = "policies",
        default_value = "equi,deq,asteal,drep",
        value_delimiter = ','
    )]
    policy: Vec<String>,
    /// Jobs per run.
    #[arg(long, default_value_t = 64)]
    jobs: usize,
    /// Offered load(s), comma-separated: arrival rate × mean job work / cores.
    #[arg(long, default_value = "0.6", value_delimiter = ',')]
    load: Vec<f64>,
    /// The controller's quantum L, µs (SAWS and the daemon: 10 ms); at most an hour, so
    /// that nanosecond times cannot overflow.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=MAX_QUANTUM_US))]
    quantum_us: u64,
    /// Benchmarks jobs are drawn from, uniformly (fib, matmul, heat, sort, loop:N[:MS]).
    #[arg(long, default_value = "fib,matmul,heat,sort", value_delimiter = ',')]
    mix: Vec<String>,
    /// Multiply every job's work by this (longer jobs against the same quantum and costs).
    #[arg(long, default_value_t = 1)]
    job_scale: u64,
    /// Cost of one steal or mug attempt.
    #[arg(long, default_value = "1us", value_parser = super::parse_dur)]
    steal_cost: Duration,
    /// Time from a core's reallocation to its new worker running (AMCilk: 57.5 µs to wake a worker).
    #[arg(long, default_value = "100us", value_parser = parse_dur0)]
    realloc_cost: Duration,
    /// How the controller measures SAWS's u and Q: `sampled` (SAWS §4.2: u from purely unsuccessful steals, Q from deque lengths thieves saw), `exact` (SAWS Eq. 1: working vs stealing time, time-averaged deque lengths), or the diagnostics `sampled-u` / `sampled-q` (only that input sampled).
    #[arg(long, default_value = "sampled", value_parser = clap::builder::PossibleValuesParser::new(Measure::NAMES))]
    measure: String,
    /// SAWS's α with sampled inputs: `paper` (§4.2: the job's steal attempts in the quantum over the most its cores could have made) or a constant in [0, 1] (0.5 was this simulator's fixed value before).
    #[arg(long, default_value = "paper")]
    alpha: String,
    /// Sampled u's victims: `literal` (the ratio over the attempts as made, victims among the thief's co-workers), `uniform` (the ratio a thief drawing among all the job's workers, itself included, measures: the sampling SAWS §4.2's argument assumes; self-draws by a coin) or `uniform-mean` (the same in expectation, this simulator's `uniform` before).
    #[arg(long, default_value = "uniform", value_parser = clap::builder::PossibleValuesParser::new(UEstimator::NAMES))]
    u_estimator: String,
    /// A-Steal's utilisation: `same` (the `u` DEQ gets from `--measure`: sampled, SAWS §4.2.1's estimate that the paper uses for A-Steal too; exact, working time over allotted core-time) or `core-time` (always working time over allotted core-time, this simulator's behaviour before).
    #[arg(long, default_value = "same", value_parser = ["same", "core-time"])]
    asteal_u: String,
    /// Seed of the first run (workload, scheduler and DREP's coin flips).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs per load and policy, with seeds seed, seed+1, …
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Jobs at the start left out of the response-time statistics.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Print job 0's allotment during its first quantum and after every quantum, first run, per policy (the oscillation trace).
    #[arg(long)]
    show_allot: bool,
    /// Write every job's view and allotment at every quantum of every run here (CSV), with both measurements of SAWS's u and Q and the steal attempts behind the sampled ones (a diagnostic).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write an SVG plot here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Print the benchmarks' work, span and parallelism and exit.
    #[arg(long)]
    describe: bool,
    #[command(flatten)]
    run: super::Running,
}

/// The longest `--quantum-us`: an hour.
const MAX_QUANTUM_US: u64 = 3_600_000_000;

fn parse_dur0(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    super::parse_dur(s)
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Entry point of `tailctl sim multiprog`.
pub fn run(a: Args) -> Result<()> {
    let mut mix = Vec::new();
    for m in &a.mix {
        mix.push(Bench::parse(m.trim()).map_err(anyhow::Error::msg)?);
    }
    if mix.is_empty() {
        bail!("--mix is empty");
    }
    if a.describe {
        let mut s =
            String::from("| benchmark | work (s) | span (s) | parallelism |\n|---|---|---|---|\n");
        for b in &mix {
            let (w, sp) = b.work_span();
            s.push_str(&format!(
                "| {b} | {:.3} | {:.4} | {:.1} |\n",
                w as f64 / 1e9,
                sp as f64 / 1e9,
                w as f64 / sp as f64
            ));
        }
        return super::emit(&s);
    }
    let policies = check::policies(&a.policy, |p| {
        let k: PolicyKind = p.parse().map_err(anyhow::Error::msg)?;
        if k == PolicyKind::Off {
            bail!("policy `off` is not simulated (jobs sharing every core would need a time-sharing model); use equi, deq, asteal or drep");
        }
        Ok(k)
    })?;
    if a.cores == 0 || a.cores > 4096 {
        bail!("--cores must be in 1..=4096");
    }
    check::warmup_below(a.warmup, a.jobs, "--jobs")?;
    check::at_least_one(a.runs, "--runs")?;
    if a.job_scale == 0 || a.job_scale > 1000 {
        bail!("--job-scale must be in 1..=1000");
    }
    check::at_least_one(a.quantum_us, "--quantum-us")?;
    if a.steal_cost.is_zero() {
        bail!("--steal-cost must be > 0");
    }
    if a.load.is_empty() {
        bail!("--load is empty");
    }
    for &l in &a.load {
        if !(l.is_finite() && l > 0.0) {
            bail!("--load {l}: must be a number > 0");
        }
    }
    let alpha = match a.alpha.as_str() {
        "paper" => None,
        x => match x.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Some(v),
            _ => bail!("--alpha {x}: `paper` or a number in [0, 1]"),
        },
    };
    let seeds: Vec<u64> = (0..a.runs).map(|i| a.seed.wrapping_add(i)).collect();
    let tracing = a.trace.is_some() || a.show_allot;
    let measure = Measure::parse(&a.measure).context("--measure")?;
    let u_estimator = UEstimator::parse(&a.u_estimator).context("--u-estimator")?;
    // The output files are created before the runs: a bad path fails now, not
    // after the whole simulation.
    let trace_file = match &a.trace {
        Some(path) => Some(PendingFile::create(path)?),
        None => None,
    };
    let plot_file = match &a.plot {
        Some(path) => Some(PendingFile::create(path)?),
        None => None,
    };

    // Every (load, seed, policy), policies innermost; workloads shared within a (load, seed).
    let mut work = Vec::new();
    for &load in &a.load {
        for &seed in &seeds {
            let specs = poisson_workload(a.jobs, load, a.cores, &mix, a.job_scale, seed);
            for &p in &policies {
                work.push((load, seed, p, specs.clone()));
            }
        }
    }
    let pb = a.run.progress((work.len() * a.jobs) as u64, "multiprog");
    let tick = || pb.inc(1);
    let started = Instant::now();
    let outs = super::parallel_map(&work, a.run.threads(), |(_, seed, p, specs)| {
        let cfg = MpConfig {
            cores: a.cores,
            quantum_ns: a.quantum_us * 1_000,
            steal_ns: ns(a.steal_cost).max(1),
            realloc_ns: ns(a.realloc_cost),
            policy: *p,
            seed: *seed,
            trace: tracing,
            measure,
            job_scale: a.job_scale,
            alpha,
            u_estimator,
            asteal_same_u: a.asteal_u == "same",
        };
        simulate(&cfg, specs, Some(&tick))
    });
    pb.finish_and_clear();

    let mut runs = Vec::new();
    let mut allot_trace = Vec::new();
    let mut trace_out = match trace_file {
        Some(mut w) => {
            writeln!(
                w,
                "load,seed,policy,t_ms,job,bench,allot,next_allot,work_ms,steal_ms,u,queued_avg,queued_now,u_sampled,q_sampled,u_exact,q_exact,attempts,max_attempts,u_sampled_uniform,q_sampled_uniform,alpha,u_sampled_uniform_mean,q_sampled_uniform_mean"
            )?;
            Some(w)
        }
        None => None,
    };
    for (i, ((load, seed, p, specs), o)) in work.iter().zip(outs).enumerate() {
        let o = o.map_err(|e| anyhow::anyhow!("{} at load {load}, seed {seed}: {e}", p.name()))?;
        runs.push(RunStats::new(*load, *seed, p.name(), specs, &o, a.warmup));
        if a.show_allot && i < policies.len() {
            // The allotment during job 0's first quantum, then after every quantum.
            let rows: Vec<_> = o.trace.iter().filter(|r| r.job == 0).collect();
            let first = rows.first().map(|r| r.view.allot);
            allot_trace.push((
                p.name().to_string(),
                first
                    .into_iter()
                    .chain(rows.iter().map(|r| r.next_allot))
                    .collect(),
            ));
        }
        if let Some(w) = trace_out.as_mut() {
            for r in &o.trace {
                let v = &r.view;
                writeln!(
                    w,
                    "{load},{seed},{},{:.3},{},{},{},{},{:.3},{:.3},{:.4},{:.3},{},{:.4},{:.3},{:.4},{:.3},{:.0},{:.0},{:.4},{:.3},{},{:.4},{:.3}",
                    p.name(),
                    r.t_ns as f64 / 1e6,
                    r.job,
                    specs[r.job as usize].bench,
                    v.allot,
                    r.next_allot,
                    v.work_ns as f64 / 1e6,
                    v.steal_ns as f64 / 1e6,
                    v.steal_success,
                    v.queued_avg,
                    v.queued_now,
                    r.est.u_sampled,
                    r.est.q_sampled,
                    r.est.u_exact,
                    r.est.q_exact,
                    r.est.attempts,
                    r.est.max_attempts,
                    r.est.u_sampled_uniform,
                    r.est.q_sampled_uniform,
                    v.queued_alpha.map_or("-".to_string(), |x| format!("{x:.4}")),
                    r.est.u_sampled_uniform_mean,
                    r.est.q_sampled_uniform_mean
                )?;
            }
        }
    }
    if let Some(w) = trace_out {
        w.commit()?;
    }
    let benches = mix
        .iter()
        .map(|b| {
            let (w, s) = b.work_span();
            let k = a.job_scale as f64;
            (b.to_string(), k * w as f64 / 1e9, k * s as f64 / 1e9)
        })
        .collect();
    let settings = vec![
        ("cores".to_string(), a.cores.to_string()),
        (
            "jobs".to_string(),
            format!(
                "{} per run (warmup {}), work ×{}",
                a.jobs, a.warmup, a.job_scale
            ),
        ),
        (
            "mix".to_string(),
            mix.iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        (
            "arrivals".to_string(),
            format!(
                "Poisson, load {}",
                a.load
                    .iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
        ("quantum".to_string(), format!("{} us", a.quantum_us)),
        ("steal_cost".to_string(), format!("{:?}", a.steal_cost)),
        ("realloc_cost".to_string(), format!("{:?}", a.realloc_cost)),
        ("measure".to_string(), measure.name().to_string()),
        ("alpha".to_string(), a.alpha.clone()),
        ("u_estimator".to_string(), a.u_estimator.clone()),
        ("asteal_u".to_string(), a.asteal_u.clone()),
        (
            "seeds".to_string(),
            if seeds.len() == 1 {
                seeds[0].to_string()
            } else {
                format!("{}..={}", seeds[0], seeds[seeds.len() - 1])
            },
        ),
        (
            "wall_time".to_string(),
            format!("{:.1}s", started.elapsed().as_secs_f64()),
        ),
    ];
    let names: Vec<String> = policies.iter().map(|p| p.name().to_string()).collect();
    let report = Report::new(settings, benches, runs, &names, &a.load, allot_trace);
    if let Some(f) = plot_file {
        super::write_output(f, &report.svg())?;
    }
    if a.run.json {
        super::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report.json())?
        ))
    } else {
        super::emit(&report.table())
    }
}
