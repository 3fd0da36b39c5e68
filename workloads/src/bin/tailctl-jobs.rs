//! `tailctl-jobs`: parallel jobs arriving over time, under each core-allotment
//! policy of `scx_tailctl` (the multiprogramming experiment of SAWS and AMCilk).
//!
//! Design: real processes, as the measurement must be. `tailctl-jobs run`
//! first calibrates (each job kind once, one worker, default kernel
//! scheduler) to turn `--load` into an arrival rate, draws one Poisson trace,
//! and then, per round and per policy (the order rotates between rounds so
//! drift does not land on one policy), starts `scx_tailctl --allot POLICY`,
//! spawns every job of the trace as its own process (`tailctl-jobs job`, a
//! `tailctl-rt` pool registered with the scheduler) at its arrival time,
//! waits for all of them and stops the scheduler. A job's response time runs
//! from its arrival to its process's exit. Everything lands in `--out`:
//! `report.json` (every job of every run), `table.md`, `plot.svg` and
//! `command.txt`. The policy `default` runs the trace under the default
//! kernel scheduler (no scx_tailctl); `--no-scheduler` runs only that, which
//! needs neither root nor sched_ext.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use serde_json::json;
use tailctl_rt::kernel::link::AssistedPool;
use tailctl_rt::{Policy, Pool};
use tailctl_workloads::jobs::{
    poisson_trace, read_cpu_run_ns, speed_probe, CpuSplit, JobCpu, JobKind, JobResult, JobSpec,
    JobsReport, PolicyRun,
};
use tailctl_workloads::scx::{check_can_load, thread_cpu_between, ScxProc};

#[derive(Parser)]
#[command(
    version,
    about = "Parallel jobs arriving over time under scx_tailctl's core-allotment policies"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one job in this process and print what it did as JSON.
    Job {
        #[arg(long)]
        kind: JobKind,
        #[arg(long)]
        size: usize,
        /// Worker threads (default: one per CPU).
        #[arg(long)]
        workers: Option<usize>,
        /// Register the pool with scx_tailctl at this socket (not registered without it).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// The experiment (see the module docs).
    Run(RunArgs),
}

#[derive(Parser)]
struct RunArgs {
    /// Allotment policies, as scx_tailctl's `--allot` takes them; `+FLAG` appends
    /// `--FLAG` to that run's scx_tailctl (e.g. `deq,deq+saws-u=kernel` compares
    /// SAWS's `u` from the steal counters with the kernel's accounting).
    /// `default` runs under the default kernel scheduler, `off` under
    /// scx_tailctl without allotment, `unregistered` the same with the jobs
    /// not registering (scx_tailctl's cost apart from registration's).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "off,equi,deq,asteal,drep"
    )]
    policies: Vec<String>,
    /// The policy the others are compared with, round by round (default: the first).
    #[arg(long)]
    baseline: Option<String>,
    /// Run under the default kernel scheduler only (no scx_tailctl, no root).
    #[arg(long)]
    no_scheduler: bool,
    /// Jobs in the trace.
    #[arg(long, default_value_t = 16)]
    jobs: usize,
    /// Offered load: mean work arriving per second over the machine's cores.
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// Job size: 1 is about 0.1 s of one host core per job (half the jobs are twice that).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Job kinds to draw from.
    #[arg(long, value_delimiter = ',', default_value = "fib,matmul,sort,heat")]
    kinds: Vec<JobKind>,
    /// Workers per job (default: one per CPU, so every job could use the whole machine).
    #[arg(long)]
    workers: Option<usize>,
    /// Rounds; every policy runs once per round.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The scx_tailctl binary (default: next to this one).
    #[arg(long)]
    scx_tailctl: Option<PathBuf>,
    #[arg(long, default_value = "/run/tailctl.sock")]
    scx_socket: PathBuf,
    /// An extra argument for scx_tailctl (repeatable), e.g. `--scx-arg=--quantum-us=5000`.
    #[arg(long = "scx-arg", allow_hyphen_values = true)]
    scx_args: Vec<String>,
    /// Have scx_tailctl write its controller's per-round trace of every run
    /// (`--allot-trace`) to OUT/allot-trace-POLICY-ROUND.csv.
    #[arg(long)]
    allot_trace: bool,
    #[arg(long, default_value = "jobs-out")]
    out: PathBuf,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[arg(long)]
    no_progress: bool,
}

/// The process's rusage: (user, system) CPU time, (voluntary, involuntary) context switches.
fn rusage() -> ((Duration, Duration), (u64, u64)) {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer; RUSAGE_SELF always exists.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (
        (tv(ru.ru_utime), tv(ru.ru_stime)),
        (ru.ru_nvcsw as u64, ru.ru_nivcsw as u64),
    )
}

/// The process's threads' runqueue wait (seconds) and times run
/// ([`tailctl_workloads::schedstat`]), read while the pool's workers live.
fn rq_wait() -> (f64, u64) {
    let t = tailctl_workloads::schedstat::threads("self");
    (
        t.iter().map(|t| t.wait_ns).sum::<u64>() as f64 / 1e9,
        t.iter().map(|t| t.runs).sum(),
    )
}

fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn job(kind: JobKind, size: usize, workers: Option<usize>, socket: Option<PathBuf>) -> Result<()> {
    kind.check_size(size).map_err(anyhow::Error::msg)?;
    let t0 = Instant::now();
    let workers = workers.unwrap_or_else(nproc).max(1);
    // Search CPU is measured under every policy alike (two thread-clock reads per search).
    let builder = Pool::builder()
        .workers(workers)
        .policy(Policy::StealFirst)
        .measure_search_cpu(true);
    let (checksum, registered, stats, (rq_wait_s, runs)) = match socket {
        Some(s) => {
            let pool = AssistedPool::start(builder, None, &s)?;
            let registered = pool.is_kernel_assisted();
            if let Some(why) = pool.unassisted_reason() {
                eprintln!("tailctl-jobs: running without kernel assistance: {why}");
            }
            let sum = pool.submit(move || kind.run(size)).wait()?;
            (sum, registered, pool.stats(), rq_wait())
        }
        None => {
            let pool = builder.build()?;
            let sum = pool.submit(move || kind.run(size)).wait()?;
            (sum, false, pool.stats(), rq_wait())
        }
    };
    let ((user, sys), (vcsw, ivcsw)) = rusage();
    let cpu = JobCpu {
        user_s: user.as_secs_f64(),
        sys_s: sys.as_secs_f64(),
        search_s: stats.search_cpu_ns as f64 / 1e9,
        voluntary_switches: vcsw,
        involuntary_switches: ivcsw,
        steals: stats.steals,
        yields: stats.yields,
        parks: stats.parks,
        join_parks: stats.join_parks,
        desched_mugs: stats.desched_mugs,
        rq_wait_s,
        runs,
    };
    println!(
        "{}",
        json!({
            "kind": kind, "size": size, "workers": workers, "registered": registered,
            "cpu_s": (user + sys).as_secs_f64(), "wall_s": t0.elapsed().as_secs_f64(),
            "checksum": checksum, "cpu": cpu,
        })
    );
    Ok(())
}

/// Runs `spec` as a child process; returns its result (response from `arrival_at`).
fn spawn_job(
    me: &PathBuf,
    spec: &JobSpec,
    workers: usize,
    socket: Option<&PathBuf>,
    arrival_at: Instant,
) -> Result<JobResult> {
    let mut cmd = Command::new(me);
    cmd.args([
        "job",
        "--kind",
        &spec.kind.to_string(),
        "--size",
        &spec.size.to_string(),
    ])
    .args(["--workers", &workers.to_string()])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(s) = socket {
        cmd.arg("--socket").arg(s);
    }
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {}", me.display()))?;
    let response_s = arrival_at.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "job {} {} failed ({}): {}",
            spec.kind,
            spec.size,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("job output: {}", String::from_utf8_lossy(&out.stdout)))?;
    Ok(JobResult {
        kind: spec.kind,
        size: spec.size,
        response_s,
        cpu_s: v["cpu_s"].as_f64().unwrap_or(0.0),
        registered: v["registered"].as_bool() == Some(true),
        cpu: match serde_json::from_value(v["cpu"].clone()) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!(
                    "job {} {}: no CPU breakdown ({e}); its run is left out of the CPU table",
                    spec.kind, spec.size
                );
                None
            }
        },
    })
}

/// One run of the whole trace; jobs start at their arrival times, each from its own thread.
fn run_trace(
    me: &PathBuf,
    trace: &[JobSpec],
    workers: usize,
    socket: Option<&PathBuf>,
    bar: &indicatif::ProgressBar,
) -> Result<(Vec<JobResult>, f64, Option<CpuSplit>)> {
    let t0 = Instant::now();
    let run0 = read_cpu_run_ns();
    let results = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for (i, spec) in trace.iter().enumerate() {
            let results = results.clone();
            s.spawn(move || {
                let at = t0 + spec.arrival;
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                let r = spawn_job(me, spec, workers, socket, at);
                bar.inc(1);
                results.lock().unwrap().push((i, r));
            });
        }
    });
    let span = t0.elapsed().as_secs_f64();
    let split = match (run0, read_cpu_run_ns()) {
        (Some(a), Some(b)) => CpuSplit::between(a, b, span),
        _ => None,
    };
    let mut rs = std::mem::take(&mut *results.lock().unwrap());
    rs.sort_by_key(|(i, _)| *i);
    let jobs = rs.into_iter().map(|(_, r)| r).collect::<Result<Vec<_>>>()?;
    Ok((jobs, span, split))
}

fn run(a: RunArgs) -> Result<()> {
    if a.jobs == 0 || a.rounds == 0 || a.policies.is_empty() || a.kinds.is_empty() {
        bail!("--jobs, --rounds, --policies and --kinds must not be empty");
    }
    if !(a.load > 0.0 && a.load.is_finite() && a.scale > 0.0 && a.scale.is_finite()) {
        bail!("--load and --scale must be positive numbers");
    }
    // Jobs run at --scale and twice it: every size must be one a job can run.
    for &kind in &a.kinds {
        for scale in [a.scale, 2.0 * a.scale] {
            if let Err(e) = kind.check_size(kind.size_at(scale)) {
                bail!("--scale {} is out of range: {e}", a.scale);
            }
        }
    }
    let me = std::env::current_exe().context("cannot find this binary")?;
    let scx_bin = a
        .scx_tailctl
        .clone()
        .unwrap_or_else(|| me.with_file_name("scx_tailctl"));
    // `default` is the default kernel scheduler (no scx_tailctl), the others
    // scx_tailctl with `--allot POLICY` (`off`: without --allot;
    // `unregistered`: without --allot, and the jobs do not register).
    let policies: Vec<String> = if a.no_scheduler {
        vec!["default".into()]
    } else {
        if let Some(p) = a.policies.iter().find(|p| p.starts_with("default+")) {
            bail!("`{p}`: the default kernel scheduler takes no scx_tailctl flags");
        }
        if a.policies.iter().any(|p| p != "default") {
            check_can_load(&scx_bin, "tailctl-jobs")?;
        }
        a.policies.clone()
    };
    let baseline = a.baseline.clone().unwrap_or_else(|| policies[0].clone());
    if !policies.contains(&baseline) {
        bail!(
            "--baseline {baseline} is not one of the policies run ({})",
            policies.join(",")
        );
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let cores = nproc();
    let workers = a.workers.unwrap_or(cores).max(1);

    // Calibration: one job of each kind at `scale`, one worker, default scheduler.
    eprintln!(
        "== calibrating {} job kinds (one worker each)",
        a.kinds.len()
    );
    let cal_bar = indicatif::ProgressBar::hidden();
    let mut work = 0.0;
    for &kind in &a.kinds {
        let spec = JobSpec {
            arrival: Duration::ZERO,
            kind,
            size: kind.size_at(a.scale),
        };
        let r = spawn_job(&me, &spec, 1, None, Instant::now())?;
        eprintln!("   {kind} size {}: {:.3} s of CPU", spec.size, r.cpu_s);
        work += r.cpu_s;
    }
    // Half the jobs are at twice the scale: mean work is 1.5x the calibrated mean.
    let mean_work = 1.5 * work / a.kinds.len() as f64;
    let mean_gap = Duration::from_secs_f64(mean_work / (a.load * cores as f64));
    drop(cal_bar);
    let trace = poisson_trace(a.jobs, &a.kinds, a.scale, mean_gap, a.seed);
    std::fs::write(
        a.out.join("trace.json"),
        serde_json::to_string_pretty(&trace)? + "\n",
    )?;
    eprintln!(
        "== {} jobs, mean work {:.3} s, mean gap {:.3} s (load {} on {cores} cores), {} round(s) x {} polic(ies)",
        a.jobs,
        mean_work,
        mean_gap.as_secs_f64(),
        a.load,
        a.rounds,
        policies.len()
    );

    let total = (a.jobs * policies.len()) as u64 * a.rounds as u64;
    let bar = if a.no_progress {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(total)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} jobs {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut runs = Vec::new();
    for round in 0..a.rounds {
        let n = policies.len();
        for k in 0..n {
            let policy = &policies[(k + round as usize) % n];
            // Scheduled by scx_tailctl like any process, not as its services.
            let unreg = policy.split('+').next() == Some("unregistered");
            bar.set_message(format!("round {round} {policy}"));
            // `default`: the default kernel scheduler, no scx_tailctl.
            let scx = if policy == "default" {
                None
            } else {
                let log = a.out.join(format!("scx_tailctl-{policy}-{round}.log"));
                let mut extra = a.scx_args.clone();
                let (name, flags) = policy.split_once('+').unwrap_or((policy.as_str(), ""));
                extra.extend(
                    flags
                        .split('+')
                        .filter(|f| !f.is_empty())
                        .map(|f| format!("--{f}")),
                );
                if name != "off" && name != "unregistered" {
                    extra.push(format!("--allot={name}"));
                    if a.allot_trace {
                        let trace = a.out.join(format!("allot-trace-{policy}-{round}.csv"));
                        extra.push(format!("--allot-trace={}", trace.display()));
                    }
                }
                Some(ScxProc::start(&scx_bin, &a.scx_socket, &extra, &log)?)
            };
            let before = speed_probe();
            let d0 = scx.as_ref().map(ScxProc::thread_cpu_ns).unwrap_or_default();
            let socket = (scx.is_some() && !unreg).then_some(&a.scx_socket);
            let (jobs, span, split) = run_trace(&me, &trace, workers, socket, &bar)?;
            let daemon = scx
                .as_ref()
                .map(|s| thread_cpu_between(&d0, &s.thread_cpu_ns()))
                .unwrap_or_default();
            let after = speed_probe();
            drop(scx);
            let unregistered = jobs.iter().filter(|j| !j.registered).count();
            if policy != "default" && !unreg && unregistered > 0 {
                bar.println(format!(
                    "warning: {policy} round {round}: {unregistered} of {} jobs ran unregistered (registration refused or failed)",
                    jobs.len()
                ));
            }
            let mut run =
                PolicyRun::new(policy, round, jobs, span, cores).with_probe(before, after);
            run.machine_cores = split;
            run.daemon_cpu_s = daemon;
            runs.push(run);
        }
    }
    bar.finish_and_clear();

    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = JobsReport {
        config: format!(
            "{} jobs ({}), load {}, scale {}, {} workers each, {cores} CPUs, seed {}",
            a.jobs,
            a.kinds
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(","),
            a.load,
            a.scale,
            workers,
            a.seed
        ),
        command: command.clone(),
        cores,
        baseline,
        runs,
    };
    let text = serde_json::to_string_pretty(&report)? + "\n";
    std::fs::write(a.out.join("report.json"), &text)?;
    let table = report.table_md();
    std::fs::write(a.out.join("table.md"), &table)?;
    std::fs::write(a.out.join("command.txt"), command + "\n")?;
    report.plot_svg(&a.out.join("plot.svg"))?;
    if a.json {
        std::io::stdout().write_all(text.as_bytes())?;
    } else {
        println!("{table}");
        println!("(report, table and plot in {})", a.out.display());
    }
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Job {
            kind,
            size,
            workers,
            socket,
        } => job(kind, size, workers, socket),
        Cmd::Run(a) => run(a),
    }
}
