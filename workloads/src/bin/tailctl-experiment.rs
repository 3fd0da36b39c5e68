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
//! with the table for the middle target to save time. Everything lands in
//! `--out`: the trace, each run's per-request CSV and summary, `report.json`,
//! `table.md` and `plot.svg`.

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
    targets_from, PolicyRow, Report, TAIL_CONTROL, TARGET_PERCENTILES,
};
use tailctl_workloads::kernel::{Calibration, Kernel};
use tailctl_workloads::loadgen::read_latencies_csv;
use tailctl_workloads::trace::{Trace, TraceConfig};

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
    #[arg(long)]
    rps: Option<f64>,
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
    /// Run tail-control with kernel assistance (scx_tailctl) as well.
    #[arg(long)]
    kernel_assisted: bool,
    /// Directory holding tailctl-server and tailctl-loadgen (default: next to this binary).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// The resolved configuration of one experiment.
struct Config {
    dist: DistributionSpec,
    rps: f64,
    requests: usize,
    workers: usize,
    arrival: ArrivalProcess,
}

fn resolve(a: &Args) -> Result<Config> {
    let (dist, rps, requests, workers) = match a.preset {
        Preset::Small => (DistributionSpec::Bing, 150.0, 5_000, 2),
        Preset::Paper => (DistributionSpec::Bing, 1200.0, 100_000, 16),
    };
    let rps = a.rps.unwrap_or(rps);
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
    drop(server);
    std::fs::write(&summary, &output.stdout)?;
    if output.status.code() == Some(2) {
        // The run finished but some requests failed or got no response: they
        // count as misses at every target, so the run still measures something.
        eprintln!("   warning: {name}: some requests failed or were lost (counted as misses)");
    } else if !output.status.success() {
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

fn run(a: Args) -> Result<()> {
    if a.kernel_assisted {
        bail!(
            "--kernel-assisted: kernel-assisted tail-control is not available yet \
             (tailctl-server cannot register with scx_tailctl; see workloads/src/registration.rs)"
        );
    }
    if a.percentiles.is_empty() || a.percentiles.iter().any(|p| !(*p > 0.0 && *p <= 100.0)) {
        bail!("--percentiles must be one or more numbers in (0, 100]");
    }
    let cfg = resolve(&a)?;
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
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;

    // One trace, replayed by every run.
    let dist = cfg.dist.build().map_err(anyhow::Error::msg)?;
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
    let trace_path = a.out.join("trace.txt");
    trace.save(&trace_path)?;
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
    if a.dry_run {
        println!("{describe}");
        eprintln!("dry run: wrote {}; no server started", trace_path.display());
        return Ok(());
    }

    let load_before = loadavg();
    // Calibrate once, here, with as many threads as the pool has workers (the
    // cost under full load), and hand the result to every server so all runs
    // do identical work per request.
    let cal = Calibration::measure_on(cfg.workers);
    eprintln!(
        "calibration: Black-Scholes unit {:.1} µs, spin unit {:.1} µs",
        cal.bs_unit_ns / 1e3,
        cal.spin_unit_ns / 1e3
    );
    let common = |policy: &str| -> Vec<String> {
        vec![
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
    };

    let cores_before = probe_effective_cores(&bins, common("sf"))?;
    eprintln!("capacity probe: a lone request gets {cores_before:.2} effective cores");
    if cores_before < 0.8 * cfg.workers as f64 {
        eprintln!(
            "warning: other processes are taking CPU ({cores_before:.2} of {} cores available); \
             the server will be more loaded than the trace's utilisation says",
            cfg.workers
        );
    }
    let mut runs = serde_json::Map::new();
    let sf = run_one(&bins, "steal-first", common("sf"), &trace_path, &a.out)?;
    let targets = targets_from(&sf, &a.percentiles)?;
    eprintln!(
        "targets (steal-first percentiles): {}",
        targets
            .iter()
            .map(|t| format_duration(Duration::from_micros(t.as_micros() as u64)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut rows = vec![PolicyRow::from_latencies("steal-first", &sf, &targets)];
    runs.insert("steal-first".into(), read_summary(&a.out, "steal-first"));

    if a.noise_check {
        let name = "steal-first (rerun)";
        let lat = run_one(
            &bins,
            "steal-first-rerun",
            common("sf"),
            &trace_path,
            &a.out,
        )?;
        rows.push(PolicyRow::from_latencies(name, &lat, &targets));
        runs.insert(name.into(), read_summary(&a.out, "steal-first-rerun"));
    }
    for &p in &policies {
        match p {
            "steal-first" => {}
            TAIL_CONTROL => {
                let tc_args = |t: Duration| {
                    let mut v = common("tc");
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
                let mut miss = Vec::new();
                match a.tc_runs {
                    TcRuns::PerTarget => {
                        for (i, &t) in targets.iter().enumerate() {
                            let name = format!("tail-control-t{i}");
                            let lat = run_one(&bins, &name, tc_args(t), &trace_path, &a.out)?;
                            miss.push(PolicyRow::from_latencies(p, &lat, &[t]).miss[0]);
                            runs.insert(name.clone(), read_summary(&a.out, &name));
                        }
                    }
                    TcRuns::Single => {
                        let lat = run_one(
                            &bins,
                            p,
                            tc_args(targets[targets.len() / 2]),
                            &trace_path,
                            &a.out,
                        )?;
                        miss = PolicyRow::from_latencies(p, &lat, &targets).miss;
                        runs.insert(p.into(), read_summary(&a.out, p));
                    }
                }
                rows.push(PolicyRow {
                    policy: p.into(),
                    miss,
                });
            }
            other => {
                let flag = match other {
                    "admit-first" => "af",
                    _ => "tbb",
                };
                let lat = run_one(&bins, other, common(flag), &trace_path, &a.out)?;
                rows.push(PolicyRow::from_latencies(other, &lat, &targets));
                runs.insert(other.into(), read_summary(&a.out, other));
            }
        }
    }

    let cores_after = probe_effective_cores(&bins, common("sf"))?;
    let conditions = format!(
        "load average (1/5/15 min) before: {load_before}, after: {}; {} CPUs; \
         effective cores of a lone request (best of 3 × 200 ms, {} workers) before: {cores_before:.2}, after: {cores_after:.2}",
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
    let table = format!("{}\n{}", report.table(), report.runs_table());
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

/// The first three fields of /proc/loadavg (or `unknown`), to record how busy
/// the machine was: on a shared machine this explains noisy runs.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn read_summary(out: &Path, name: &str) -> serde_json::Value {
    std::fs::read_to_string(out.join(format!("{name}.json")))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(serde_json::Value::Null)
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
