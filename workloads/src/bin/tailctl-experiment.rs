//! `tailctl-experiment`: reproduces the paper's comparison for one work
//! distribution, load and trace.
//!
//! Design: real processes over a real socket, as the measurements must be.
//! For each policy the driver starts a fresh `tailctl-server` (its own pool,
//! no state carried over), waits for its "listening on" line, runs
//! `tailctl-loadgen` as a separate process replaying the *same* trace file,
//! then stops the server. Steal-first runs first; its 97.5/98.5/99/99.5/99.75th
//! percentile latencies become the targets. Tail-control's threshold table
//! depends on the target, so by default it runs once per target (`--tc-runs
//! per-target`, as the paper's per-target bars imply); `single` runs it once
//! with the table for the middle target to save time. `--out` receives the
//! summaries (`table.md` with the exact command, `report.json` with every
//! run's summary, `plot.svg`); the raw records (the trace, each run's
//! per-request CSV and load-generator summary, the scheduler's log) go to
//! `--out`/raw, which git ignores under `workloads/results`.
//!
//! `--kernel-assisted` (root, on a sched_ext kernel with no scheduler loaded,
//! e.g. in the VM of `tailctl vm run`): the runs above happen under the
//! default kernel scheduler (every server with `--no-kernel`); then the driver
//! starts `scx_tailctl`, runs steal-first under it (the scheduler's own cost,
//! no request awareness) and tail-control registered with it (the kernel
//! charges CPU time per request and serializes), checks from each server's
//! counters that it really was registered, and stops the scheduler.
//!
//! `--rounds N` repeats every run N times (round 0 as above, later rounds in a
//! seeded shuffled order that includes steal-first, the scheduler's block
//! alternately last and first) and reports medians and improvements paired by
//! round: on a shared machine, drift between runs is as large as the policies'
//! differences, and a fixed order would attribute it to whichever runs last.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use tailctl_rt::distribution::format_duration;
use tailctl_workloads::arrival::ArrivalProcess;
use tailctl_workloads::distributions::DistributionSpec;
use tailctl_workloads::experiment::{
    targets_from, PolicyRow, Report, TAIL_CONTROL, TAIL_CONTROL_KERNEL, TARGET_PERCENTILES,
    UNDER_SCX_MARK,
};
use tailctl_workloads::kernel::{Calibration, Kernel};
use tailctl_workloads::loadgen::read_latencies_csv;
use tailctl_workloads::scx::{check_can_load, ScxProc};
use tailctl_workloads::trace::{Trace, TraceConfig};

/// Where, under `--out`, the raw records go (git-ignored under
/// `workloads/results`).
const RAW_DIR: &str = "raw";

/// Named configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Preset {
    /// Fits a 2-core machine: 2 workers, Bing, 150 rps (75% utilisation with
    /// mean work 10 ms — the paper's heavy load is 1200 rps on 16 cores, also
    /// 75%), 5,000 requests per run (~35 s), 8 runs: about 5 minutes.
    Small,
    /// The paper's heavy-load setting: 16 workers, 1200 rps, 100,000 requests.
    Paper,
}

/// How tail-control is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TcRuns {
    /// One run per target, each with the threshold table for that target.
    PerTarget,
    /// One run, with the table for the middle (99th percentile) target.
    Single,
}

/// Runs steal-first, admit-first, tail-control and random admission against
/// the same trace and prints the paper-style table of target-miss ratios.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Starting configuration; the options below override its values.
    #[arg(long, value_enum, default_value = "small")]
    preset: Preset,
    /// Work distribution: bing, finance, lognormal, lognormal:MEAN:SD or file:PATH.
    #[arg(long)]
    distribution: Option<DistributionSpec>,
    /// Mean request rate.
    #[arg(long, conflicts_with = "load")]
    rps: Option<f64>,
    /// Instead of --rps: offer this fraction of the capacity measured at start
    /// (the effective cores a lone request gets, times the workers' share of
    /// them), so the same command loads a busy or emulated machine as much as
    /// an idle one. E.g. 0.5.
    #[arg(long, value_parser = parse_load)]
    load: Option<f64>,
    /// Requests per run.
    #[arg(long)]
    requests: Option<usize>,
    /// Pool workers (cores) of the server.
    #[arg(long)]
    workers: Option<usize>,
    /// Standard deviation of log-normal inter-arrival times (e.g. 0.91ms); Poisson if absent.
    #[arg(long, value_parser = tailctl_rt::distribution::parse_duration)]
    arrival_sd: Option<Duration>,
    /// Request kernel: bs (Black-Scholes PDE) or spin.
    #[arg(long, default_value = "bs")]
    kernel: Kernel,
    /// Sequential percent of each request (10 = the paper's sub-linear runs).
    #[arg(long, default_value_t = 0)]
    seq_pct: u8,
    /// Trace seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Policies to run (steal-first always runs: it sets the targets).
    #[arg(long, value_delimiter = ',', default_value = "sf,af,tc,tbb")]
    policies: Vec<String>,
    /// How tail-control is run.
    #[arg(long, value_enum, default_value = "per-target")]
    tc_runs: TcRuns,
    /// Steal-first percentiles used as targets (the paper's by default; tail-control
    /// is run once per target, and `--tc-runs single` uses the middle one).
    #[arg(long, value_delimiter = ',', default_values_t = TARGET_PERCENTILES)]
    percentiles: Vec<f64>,
    /// Tail-control's table size (passed to tailctl-server --q-max).
    #[arg(long)]
    q_max: Option<usize>,
    /// Run steal-first a second time on the same trace and report it as a row:
    /// the difference between the two steal-first runs is the noise floor.
    #[arg(long)]
    noise_check: bool,
    /// Run every policy this many times, each round in a shuffled order (the
    /// kernel-assisted block alternately last and first): rows report the
    /// median over rounds and tail-control's improvement paired by round, so
    /// the machine's drift between runs cancels.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Output directory (created).
    #[arg(long, default_value = "workloads/results/latest")]
    out: PathBuf,
    /// Also print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Only resolve the configuration, write the trace and print the
    /// configuration line; start nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also run steal-first under scx_tailctl and tail-control registered with
    /// it (needs root and a sched_ext kernel with no scheduler loaded; the
    /// other runs then happen under the default kernel scheduler).
    #[arg(long)]
    kernel_assisted: bool,
    /// The scx_tailctl binary for --kernel-assisted (default: next to this binary).
    #[arg(long)]
    scx_tailctl: Option<PathBuf>,
    /// scx_tailctl's registration socket.
    #[arg(long, default_value = "/run/tailctl/tailctl.sock")]
    scx_socket: PathBuf,
    /// An extra argument for scx_tailctl (repeatable), e.g. `--scx-arg=--slice-us=2000`.
    #[arg(long = "scx-arg", allow_hyphen_values = true)]
    scx_args: Vec<String>,
    /// Directory holding tailctl-server and tailctl-loadgen (default: next to this binary).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// An unmodified program to run beside every run (`sh -c CMD`, started with
    /// the server and killed after the load generator): the CPU it got, in
    /// cores, is reported per run as `neighbour_cores`, so the cost of
    /// tail-control (and of the scheduler) to a co-located service shows.
    #[arg(long, value_name = "CMD")]
    neighbour: Option<String>,
}

/// `--neighbour`, set once in `run` (every run starts one beside it).
static NEIGHBOUR: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// A neighbour process group started beside a run.
struct Neighbour {
    child: Child,
    started: Instant,
}

impl Neighbour {
    fn start(cmd: &str) -> Result<Neighbour> {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sh")
            .args(["-c", cmd])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: its CPU time is summed, and it is killed, as one.
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start the neighbour `{cmd}`"))?;
        Ok(Neighbour {
            child,
            started: Instant::now(),
        })
    }

    /// CPU seconds used so far by the live processes of its group, plus what
    /// their reaped children used.
    fn cpu_seconds(&self) -> f64 {
        let pgid = self.child.id() as i64;
        // SAFETY: sysconf only reads a configuration value.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let mut total = 0u64;
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // Fields after the parenthesised command name (which may hold spaces).
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            // f[0] is field 3 (state): pgrp is field 5, utime..cstime 14..17.
            if f.len() > 14 && f[2].parse::<i64>() == Ok(pgid) {
                total += f[11..15]
                    .iter()
                    .map(|x| x.parse::<u64>().unwrap_or(0))
                    .sum::<u64>();
            }
        }
        total as f64 / ticks
    }

    /// Stops the group; returns the cores it got (CPU seconds per second).
    fn finish(mut self) -> f64 {
        let cores = self.cpu_seconds() / self.started.elapsed().as_secs_f64().max(1e-9);
        self.kill();
        cores
    }

    fn kill(&mut self) {
        // SAFETY: kill(2) on our own child's process group; no memory is involved.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

fn parse_load(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x < 1.0 => Ok(x),
        _ => Err(format!("`{s}` is not a fraction in (0, 1)")),
    }
}

/// The resolved configuration of one experiment.
struct Config {
    dist: DistributionSpec,
    rps: f64,
    requests: usize,
    workers: usize,
    arrival: ArrivalProcess,
}

/// With `rps` given, the configuration with that rate (for `--load`).
fn resolve(a: &Args) -> Result<Config> {
    resolve_at(a, a.rps)
}

fn resolve_at(a: &Args, rps_override: Option<f64>) -> Result<Config> {
    let (dist, rps, requests, workers) = match a.preset {
        Preset::Small => (DistributionSpec::Bing, 150.0, 5_000, 2),
        Preset::Paper => (DistributionSpec::Bing, 1200.0, 100_000, 16),
    };
    let rps = rps_override.unwrap_or(rps);
    let arrival = match a.arrival_sd {
        Some(sd) => ArrivalProcess::LogNormal {
            rps,
            sd_secs: sd.as_secs_f64(),
        },
        None => ArrivalProcess::Poisson { rps },
    };
    arrival.validate().map_err(anyhow::Error::msg)?;
    Ok(Config {
        dist: a.distribution.clone().unwrap_or(dist),
        rps,
        requests: a.requests.unwrap_or(requests),
        workers: a.workers.unwrap_or(workers),
        arrival,
    })
}

/// A user-space server's arguments (it never registers, even if a daemon
/// happens to listen).
fn server_args(cfg: &Config, cal: &Calibration, policy: &str) -> Vec<String> {
    vec![
        "--no-kernel".into(),
        "--addr".into(),
        "127.0.0.1:0".into(),
        "--workers".into(),
        cfg.workers.to_string(),
        "--policy".into(),
        policy.into(),
        "--bs-unit-ns".into(),
        cal.bs_unit_ns.to_string(),
        "--spin-unit-ns".into(),
        cal.spin_unit_ns.to_string(),
    ]
}

/// A running server process, stopped on drop.
struct ServerProc {
    child: Child,
    addr: String,
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(bin: &Path, args: &[String]) -> Result<ServerProc> {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let stdout = child.stdout.take().expect("piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("reading the server's first line")?;
    let Some(addr) = line.trim().strip_prefix("listening on ") else {
        let _ = child.kill();
        bail!("tailctl-server did not start (said `{}`)", line.trim());
    };
    Ok(ServerProc {
        addr: addr.to_string(),
        child,
    })
}

/// One run: a fresh server with `server_args`, the load generator replaying
/// the trace; returns per-request latencies.
fn run_one(
    bins: &Path,
    name: &str,
    server_args: Vec<String>,
    trace: &Path,
    out: &Path,
) -> Result<Vec<Option<Duration>>> {
    let t0 = Instant::now();
    eprintln!("== {name}: tailctl-server {}", server_args.join(" "));
    let server = start_server(&bins.join("tailctl-server"), &server_args)?;
    let neighbour = match NEIGHBOUR.get().and_then(|n| n.as_deref()) {
        Some(cmd) => Some(Neighbour::start(cmd)?),
        None => None,
    };
    let records = out.join(format!("{name}.csv"));
    let summary = out.join(format!("{name}.json"));
    let output = Command::new(bins.join("tailctl-loadgen"))
        .args(["--addr", &server.addr, "--trace"])
        .arg(trace)
        .arg("--records")
        .arg(&records)
        .arg("--json")
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run tailctl-loadgen")?;
    let neighbour_cores = neighbour.map(Neighbour::finish);
    drop(server);
    // A failed run is reported as such before its output is read as a summary.
    let finished = output.status.success() || output.status.code() == Some(2);
    match neighbour_cores {
        Some(cores) if finished => {
            let mut v: serde_json::Value =
                serde_json::from_slice(&output.stdout).with_context(|| {
                    format!(
                        "{name}: tailctl-loadgen's summary (for {}) is not JSON",
                        summary.display()
                    )
                })?;
            let Some(o) = v.as_object_mut() else {
                bail!(
                    "{name}: tailctl-loadgen's summary (for {}) is not a JSON object",
                    summary.display()
                );
            };
            o.insert("neighbour_cores".into(), serde_json::json!(cores));
            eprintln!("   neighbour got {cores:.2} cores");
            std::fs::write(&summary, serde_json::to_vec_pretty(&v)?)?;
        }
        _ => std::fs::write(&summary, &output.stdout)?,
    }
    if output.status.code() == Some(2) {
        // The run finished but some requests failed or got no response: they
        // count as misses at every target, so the run still measures something.
        eprintln!("   warning: {name}: some requests failed or were lost (counted as misses)");
    } else if !finished {
        bail!(
            "{name}: tailctl-loadgen failed ({}); see the messages above",
            output.status
        );
    }
    eprintln!("   done in {:.0} s", t0.elapsed().as_secs_f64());
    read_latencies_csv(&records)
}

fn policy_name(p: &str) -> Result<&'static str> {
    Ok(match p {
        "sf" | "steal-first" => "steal-first",
        "af" | "admit-first" => "admit-first",
        "tc" | "tail-control" => TAIL_CONTROL,
        "tbb" | "ra" | "random-admission" => "random-admission",
        other => bail!("unknown policy `{other}` (use sf, af, tc, tbb)"),
    })
}

/// Fails unless the run's server was registered with scx_tailctl the whole run.
fn check_registered(out: &Path, name: &str) -> Result<()> {
    let v = read_summary(out, name)?;
    let stats = &v["server_stats"];
    if stats["kernel_assisted"].as_bool() != Some(true) {
        bail!(
            "{name}: the server was not registered with scx_tailctl at the end of the run \
             (server counters: {stats}); its stderr above says why"
        );
    }
    if stats["registrations"].as_u64() != Some(1) {
        bail!(
            "{name}: the server registered {} times (the daemon restarted mid-run?)",
            stats["registrations"]
        );
    }
    Ok(())
}

fn run(a: Args) -> Result<()> {
    if a.percentiles.is_empty() || a.percentiles.iter().any(|p| !(*p > 0.0 && *p <= 100.0)) {
        bail!("--percentiles must be one or more numbers in (0, 100]");
    }
    let mut cfg = resolve(&a)?;
    let _ = NEIGHBOUR.set(a.neighbour.clone());
    if a.load.is_some() && a.dry_run {
        bail!("--load measures the machine first; give --rps with --dry-run");
    }
    let policies: Vec<&str> = a
        .policies
        .iter()
        .map(|p| policy_name(p))
        .collect::<Result<_>>()?;
    let bins = match &a.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("binary has no directory")?
            .to_path_buf(),
    };
    for b in ["tailctl-server", "tailctl-loadgen"] {
        if !bins.join(b).exists() {
            bail!(
                "{} not found in {} (build with `cargo build --release -p tailctl-workloads`)",
                b,
                bins.display()
            );
        }
    }
    let scx_bin = a
        .scx_tailctl
        .clone()
        .unwrap_or_else(|| bins.join("scx_tailctl"));
    if a.kernel_assisted && !a.dry_run {
        check_can_load(&scx_bin, "--kernel-assisted")?;
    }
    let load_before = loadavg();
    let dist = cfg.dist.build().map_err(anyhow::Error::msg)?;
    // Calibrate once, with as many threads as the pool has workers (the cost
    // under full load), and hand the result to every server so all runs do
    // identical work per request; then measure what a lone request gets.
    // With --load this comes first: the rate follows from it.
    let measure = |cfg: &Config| -> Result<(Calibration, f64)> {
        let cal = Calibration::measure_on(cfg.workers);
        eprintln!(
            "calibration: Black-Scholes unit {:.1} µs, spin unit {:.1} µs",
            cal.bs_unit_ns / 1e3,
            cal.spin_unit_ns / 1e3
        );
        let cores = probe_effective_cores(&bins, server_args(cfg, &cal, "sf"))?;
        eprintln!("capacity probe: a lone request gets {cores:.2} effective cores");
        if cores < 0.8 * cfg.workers as f64 {
            eprintln!(
                "warning: other processes are taking CPU ({cores:.2} of {} cores available); \
                 the server will be more loaded than the trace's utilisation says",
                cfg.workers
            );
        }
        Ok((cal, cores))
    };
    let mut measured = None;
    if let Some(load) = a.load {
        let (cal, cores) = measure(&cfg)?;
        let rps = load * cores / dist.mean_secs();
        eprintln!("--load {load}: {rps:.1} requests per second");
        cfg = resolve_at(&a, Some(rps))?;
        measured = Some((cal, cores));
    }

    // One trace, replayed by every run.
    let trace = Trace::generate(
        &TraceConfig {
            requests: cfg.requests,
            arrival: cfg.arrival,
            kernel: a.kernel,
            seq_pct: a.seq_pct,
            seed: a.seed,
        },
        &dist,
        &cfg.dist.to_string(),
    )?;
    let utilisation = trace.offered_load() / cfg.workers as f64;
    let describe = format!(
        "{} work, {} arrivals, {} workers, {} requests, utilisation {:.0}%, kernel {}{}",
        cfg.dist,
        cfg.arrival,
        cfg.workers,
        cfg.requests,
        utilisation * 100.0,
        a.kernel,
        if a.seq_pct > 0 {
            format!(", {}% sequential", a.seq_pct)
        } else {
            String::new()
        }
    );
    eprintln!("experiment: {describe}");
    if utilisation >= 1.0 {
        bail!(
            "the trace offers {:.2} cores of work to {} workers: the server cannot keep up",
            trace.offered_load(),
            cfg.workers
        );
    }
    // Only a configuration that passed the checks above touches --out: a
    // rejected one must not replace the trace of an earlier experiment.
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    // Raw records (trace, per-request CSVs, per-run summaries, scheduler
    // logs) go to `raw/`, which git ignores; the summaries stay beside it.
    let raw = a.out.join(RAW_DIR);
    std::fs::create_dir_all(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    let trace_path = raw.join("trace.txt");
    trace.save(&trace_path)?;
    if a.dry_run {
        println!("{describe}");
        eprintln!("dry run: wrote {}; no server started", trace_path.display());
        return Ok(());
    }

    let (cal, cores_before) = match measured {
        Some(m) => m,
        None => measure(&cfg)?,
    };
    let common = |policy: &str| server_args(&cfg, &cal, policy);
    let mut runs = serde_json::Map::new();
    let sf = run_one(&bins, "steal-first", common("sf"), &trace_path, &raw)?;
    let targets = targets_from(&sf, &a.percentiles)?;
    eprintln!(
        "targets (steal-first percentiles): {}",
        targets
            .iter()
            .map(|t| format_duration(Duration::from_micros(t.as_micros() as u64)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Each row's miss ratios, round by round, in the order rows are reported.
    let mut results: Vec<(String, Vec<Vec<f64>>)> = Vec::new();
    record(
        &mut results,
        "steal-first",
        PolicyRow::from_latencies("steal-first", &sf, &targets).miss,
    );
    runs.insert("steal-first".into(), read_summary(&raw, "steal-first")?);
    note_capacity(&mut runs, "steal-first", cores_before);

    if a.noise_check {
        let name = "steal-first (rerun)";
        let lat = run_one(&bins, "steal-first-rerun", common("sf"), &trace_path, &raw)?;
        record(
            &mut results,
            name,
            PolicyRow::from_latencies(name, &lat, &targets).miss,
        );
        runs.insert(name.into(), read_summary(&raw, "steal-first-rerun")?);
    }
    let tc_args = |mut v: Vec<String>, t: Duration| {
        v.extend([
            "--distribution".into(),
            cfg.dist.to_string(),
            "--rps".into(),
            cfg.rps.to_string(),
            "--target".into(),
            format!("{}us", t.as_micros()),
        ]);
        if let Some(q) = a.q_max {
            v.extend(["--q-max".into(), q.to_string()]);
        }
        v
    };
    let mut tc_ctx = TcContext {
        tc_runs: a.tc_runs,
        targets: &targets,
        trace: &trace_path,
        out: &raw,
    };
    // Round 0 keeps the historical file names; later rounds add `-rN`.
    let file = |base: &str, round: u32| match round {
        0 => base.to_string(),
        r => format!("{base}-r{r}"),
    };
    let key = |round: u32| match round {
        0 => String::new(),
        r => format!(" r{r}"),
    };
    let user_run = |p: &str,
                    round: u32,
                    runs: &mut serde_json::Map<String, serde_json::Value>,
                    results: &mut Vec<(String, Vec<Vec<f64>>)>,
                    tc_ctx: &mut TcContext<'_>|
     -> Result<()> {
        let cores = probe_effective_cores(&bins, common("sf"))?;
        if p == TAIL_CONTROL {
            let row = run_tail_control(
                &bins,
                p,
                &file("tail-control", round),
                &key(round),
                |t| tc_args(common("tc"), t),
                tc_ctx,
                runs,
                |_| Ok(()),
            )?;
            record(results, p, row.miss);
            note_capacity(runs, &format!("{p}{}", key(round)), cores);
            return Ok(());
        }
        let flag = match p {
            "steal-first" => "sf",
            "admit-first" => "af",
            _ => "tbb",
        };
        let name = file(p, round);
        let lat = run_one(&bins, &name, common(flag), &trace_path, &raw)?;
        record(
            results,
            p,
            PolicyRow::from_latencies(p, &lat, &targets).miss,
        );
        runs.insert(format!("{p}{}", key(round)), read_summary(&raw, &name)?);
        note_capacity(runs, &format!("{p}{}", key(round)), cores);
        Ok(())
    };
    // The runs under scx_tailctl, as one block: the scheduler starts and stops
    // around it.
    let scx_block = |round: u32,
                     runs: &mut serde_json::Map<String, serde_json::Value>,
                     results: &mut Vec<(String, Vec<Vec<f64>>)>,
                     tc_ctx: &mut TcContext<'_>|
     -> Result<()> {
        let log = raw.join(format!("{}.log", file("scx_tailctl", round)));
        eprintln!("== starting {} (log {})", scx_bin.display(), log.display());
        let scx = ScxProc::start(&scx_bin, &a.scx_socket, &a.scx_args, &log)?;
        // Under scx_tailctl but not registered: what the scheduler alone does.
        let label = format!("steal-first {UNDER_SCX_MARK}");
        let name = file("steal-first-scx", round);
        let cores = probe_effective_cores(&bins, common("sf"))?;
        let lat = run_one(&bins, &name, common("sf"), &trace_path, &raw)?;
        record(
            results,
            &label,
            PolicyRow::from_latencies(&label, &lat, &targets).miss,
        );
        runs.insert(format!("{label}{}", key(round)), read_summary(&raw, &name)?);
        note_capacity(runs, &format!("{label}{}", key(round)), cores);
        // Registered: kernel-measured work, kernel serialization and caps.
        let kernel_args = |t: Duration| {
            let mut v = tc_args(common("tc"), t);
            v.retain(|x| x != "--no-kernel");
            v.extend(["--scx-socket".into(), a.scx_socket.display().to_string()]);
            v
        };
        let cores = probe_effective_cores(&bins, common("sf"))?;
        let row = run_tail_control(
            &bins,
            TAIL_CONTROL_KERNEL,
            &file("tail-control-kernel", round),
            &key(round),
            kernel_args,
            tc_ctx,
            runs,
            |name| check_registered(&raw, name),
        )?;
        record(results, TAIL_CONTROL_KERNEL, row.miss);
        note_capacity(runs, &format!("{TAIL_CONTROL_KERNEL}{}", key(round)), cores);
        drop(scx);
        Ok(())
    };
    let others: Vec<&str> = policies
        .iter()
        .copied()
        .filter(|&p| p != "steal-first")
        .collect();
    let mut rng = a.seed ^ 0x9e37_79b9_7f4a_7c15;
    for round in 0..a.rounds {
        // Round 0 runs in the historical order after the first steal-first run
        // (which set the targets); later rounds include steal-first and shuffle.
        let mut order = others.clone();
        if round > 0 {
            order.insert(0, "steal-first");
            shuffle(&mut order, &mut rng);
            eprintln!("== round {round}: {}", order.join(", "));
        }
        // The scheduler's block goes last in even rounds and first in odd ones.
        let scx_first = round % 2 == 1;
        if a.kernel_assisted && scx_first {
            scx_block(round, &mut runs, &mut results, &mut tc_ctx)?;
        }
        for p in order {
            user_run(p, round, &mut runs, &mut results, &mut tc_ctx)?;
        }
        if a.kernel_assisted && !scx_first {
            scx_block(round, &mut runs, &mut results, &mut tc_ctx)?;
        }
    }
    let rows: Vec<PolicyRow> = results
        .into_iter()
        .map(|(label, rounds)| PolicyRow::from_rounds(&label, rounds))
        .collect();
    let mut scheduler_note = String::new();
    if a.kernel_assisted {
        scheduler_note = format!(
            "; all runs but `steal-first (scx_tailctl)` and `{TAIL_CONTROL_KERNEL}` under the default \
             kernel scheduler (sched_ext loaded, no scheduler attached), those two under scx_tailctl"
        );
    }
    if a.rounds > 1 {
        scheduler_note.push_str(&format!(
            "; {} rounds (round 0 in the listed order, later ones shuffled with seed {}): \
             miss ratios are medians over rounds",
            a.rounds, a.seed
        ));
    }

    let cores_after = probe_effective_cores(&bins, common("sf"))?;
    let conditions = format!(
        "load average (1/5/15 min) before: {load_before}, after: {}; {} CPUs; \
         effective cores of a lone request (best of 3 × 200 ms, {} workers) before: {cores_before:.2}, after: {cores_after:.2}, and before each run in its `cores before` column (under that run's scheduler){scheduler_note}",
        loadavg(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cfg.workers
    );
    let report = Report {
        config: describe,
        targets_ms: targets.iter().map(|t| t.as_secs_f64() * 1e3).collect(),
        percentiles: a.percentiles.clone(),
        rows,
        runs: serde_json::Value::Object(runs),
    };
    let rounds_table = report.rounds_table();
    let table = if rounds_table.is_empty() {
        format!("{}\n{}", report.table(), report.runs_table())
    } else {
        format!(
            "{}\nEvery round:\n\n{rounds_table}\n{}",
            report.table(),
            report.runs_table()
        )
    };
    println!("{}\n\n{table}", report.config);
    let command: Vec<String> = std::env::args().collect();
    std::fs::write(
        a.out.join("table.md"),
        format!(
            "Command: `{}`\n\nConfiguration: {}\n\nConditions: {conditions}\n\n{table}",
            command.join(" "),
            report.config
        ),
    )?;
    report.write_json(&a.out.join("report.json"))?;
    report.plot_svg(&a.out.join("plot.svg"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    eprintln!(
        "wrote {}/{{table.md,report.json,plot.svg}}",
        a.out.display()
    );
    Ok(())
}

/// Appends one round's miss ratios to the row `label` (created on first use).
fn record(results: &mut Vec<(String, Vec<Vec<f64>>)>, label: &str, miss: Vec<f64>) {
    match results.iter_mut().find(|(l, _)| l == label) {
        Some((_, rounds)) => rounds.push(miss),
        None => results.push((label.to_string(), vec![miss])),
    }
}

/// Fisher–Yates with xorshift64*: a reproducible run order per seed.
fn shuffle<T>(v: &mut [T], state: &mut u64) {
    for i in (1..v.len()).rev() {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33;
        v.swap(i, (r % (i as u64 + 1)) as usize);
    }
}

/// What every tail-control run shares.
struct TcContext<'a> {
    tc_runs: TcRuns,
    targets: &'a [Duration],
    trace: &'a Path,
    out: &'a Path,
}

/// Tail-control's runs (one per target, or one with the middle target's
/// table) as one row; `check` vets each run by its file name.
#[allow(clippy::too_many_arguments)]
fn run_tail_control(
    bins: &Path,
    label: &str,
    file_prefix: &str,
    round_key: &str,
    args: impl Fn(Duration) -> Vec<String>,
    ctx: &mut TcContext<'_>,
    runs: &mut serde_json::Map<String, serde_json::Value>,
    check: impl Fn(&str) -> Result<()>,
) -> Result<PolicyRow> {
    let miss = match ctx.tc_runs {
        TcRuns::PerTarget => {
            let mut miss = Vec::new();
            for (i, &t) in ctx.targets.iter().enumerate() {
                let name = format!("{file_prefix}-t{i}");
                let lat = run_one(bins, &name, args(t), ctx.trace, ctx.out)?;
                check(&name)?;
                miss.push(PolicyRow::from_latencies(label, &lat, &[t]).miss[0]);
                runs.insert(
                    format!("{label} t{i}{round_key}"),
                    read_summary(ctx.out, &name)?,
                );
            }
            miss
        }
        TcRuns::Single => {
            let t = ctx.targets[ctx.targets.len() / 2];
            let lat = run_one(bins, file_prefix, args(t), ctx.trace, ctx.out)?;
            check(file_prefix)?;
            runs.insert(
                format!("{label}{round_key}"),
                read_summary(ctx.out, file_prefix)?,
            );
            PolicyRow::from_latencies(label, &lat, ctx.targets).miss
        }
    };
    Ok(PolicyRow {
        policy: label.into(),
        miss,
        rounds: Vec::new(),
    })
}

/// Measures how many cores the server actually gets right now: three lone
/// 200 ms spin requests on a fresh steal-first server; effective cores =
/// work / run time (2.0 on an idle 2-core machine). On a shared machine this
/// is the number that says whether a run's load was what the trace offered.
fn probe_effective_cores(bins: &Path, args: Vec<String>) -> Result<f64> {
    use std::io::Write;
    use tailctl_workloads::protocol::Response;
    let server = start_server(&bins.join("tailctl-server"), &args)?;
    let stream = std::net::TcpStream::connect(&server.addr)?;
    let mut w = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    let mut best: f64 = 0.0;
    for i in 0..3 {
        writeln!(w, "REQ {i} spin 200000 0")?;
        let mut line = String::new();
        r.read_line(&mut line)?;
        match Response::parse(&line) {
            Ok(Response::Done { run, .. }) => best = best.max(0.2 / run.as_secs_f64()),
            other => bail!("capacity probe: unexpected answer {other:?}"),
        }
    }
    Ok(best)
}

/// Records the capacity probe taken just before a run in that run's summary:
/// on a shared host an emulated guest's capacity drifts between runs (a lone
/// request got 3.1 effective cores in one 4-vCPU run and 1.3 in another), and
/// a run whose probe is low is slow for that reason, whatever its policy.
fn note_capacity(runs: &mut serde_json::Map<String, serde_json::Value>, key: &str, cores: f64) {
    if let Some(run) = runs.get_mut(key).and_then(|v| v.as_object_mut()) {
        run.insert("capacity_cores".into(), cores.into());
    }
}

/// The first three fields of /proc/loadavg (or `unknown`), to record how busy
/// the machine was: on a shared machine this explains noisy runs.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// A run's load-generator summary; a missing or unreadable one is an error
/// naming the file (as `Null` it would read as "not registered" and the like).
fn read_summary(out: &Path, name: &str) -> Result<serde_json::Value> {
    let path = out.join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the run summary {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("the run summary {} is not valid JSON", path.display()))
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_summaries_are_errors_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("exp-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ok.json"), r#"{"server_stats":{}}"#).unwrap();
        std::fs::write(dir.join("bad.json"), "tailctl-loadgen: oops").unwrap();
        assert!(read_summary(&dir, "ok").unwrap()["server_stats"].is_object());
        let bad = format!("{:#}", read_summary(&dir, "bad").unwrap_err());
        let missing = format!("{:#}", read_summary(&dir, "missing").unwrap_err());
        // Not "was not registered": the summary itself is the problem.
        let unregistered = format!("{:#}", check_registered(&dir, "bad").unwrap_err());
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            bad.contains("bad.json") && bad.contains("not valid JSON"),
            "{bad}"
        );
        assert!(missing.contains("missing.json"), "{missing}");
        assert!(unregistered.contains("bad.json"), "{unregistered}");
    }
}
