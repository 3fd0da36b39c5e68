//! `tailctl-loadgen`: the open-loop load generator.
//!
//! Design: a thin CLI over [`tailctl_workloads::loadgen`]. The trace is either
//! generated from a seed (arrival process × work distribution) or read from a
//! file, and can be written out for replay; send times are fixed before the
//! run. Results: a text or `--json` summary (percentiles from an HDR
//! histogram, miss ratios at `--targets`) and optionally per-request records.
//! Exit status: 0 on success, 1 on a usage or connection error, 2 if the run
//! finished but some requests failed or got no response.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use tailctl_rt::distribution::{format_duration, parse_duration};
use tailctl_workloads::arrival::ArrivalProcess;
use tailctl_workloads::distributions::DistributionSpec;
use tailctl_workloads::kernel::Kernel;
use tailctl_workloads::loadgen::{self, LoadgenOptions};
use tailctl_workloads::stats::Summary;
use tailctl_workloads::trace::{Trace, TraceConfig};

/// Open-loop load generator for tailctl-server.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Server address (host:port).
    #[arg(long, default_value = "127.0.0.1:7878")]
    addr: String,
    /// Replay this trace file instead of generating one.
    #[arg(long, conflicts_with_all = ["requests", "arrival", "distribution", "seed", "kernel", "seq_pct"])]
    trace: Option<PathBuf>,
    /// Number of requests to generate.
    #[arg(long)]
    requests: Option<usize>,
    /// Arrival process: poisson:RPS or lognormal:RPS:SD (e.g. lognormal:1200:0.91ms).
    #[arg(long)]
    arrival: Option<ArrivalProcess>,
    /// Work distribution: bing, finance, lognormal, lognormal:MEAN:SD or file:PATH.
    #[arg(long)]
    distribution: Option<DistributionSpec>,
    /// Request kernel: bs (Black-Scholes PDE) or spin.
    #[arg(long)]
    kernel: Option<Kernel>,
    /// Percent of each request's work that is sequential (10 = the paper's sub-linear runs).
    #[arg(long)]
    seq_pct: Option<u8>,
    /// Seed of the generated trace.
    #[arg(long)]
    seed: Option<u64>,
    /// Write the trace to this file (for replay with --trace).
    #[arg(long)]
    write_trace: Option<PathBuf>,
    /// Only write the trace (with --write-trace), do not connect.
    #[arg(long, requires = "write_trace")]
    dry_run: bool,
    /// Target latencies for miss ratios, comma-separated with units (e.g. 20ms,25.5ms).
    #[arg(long, value_delimiter = ',', value_parser = parse_duration)]
    targets: Vec<Duration>,
    /// Write per-request records (CSV) to this file.
    #[arg(long)]
    records: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Wait this long for outstanding responses after the last send.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

fn trace_from(args: &Args) -> Result<Trace> {
    if let Some(p) = &args.trace {
        return Trace::load(p);
    }
    let Some(requests) = args.requests else {
        bail!("give either --trace FILE or --requests N (with --arrival and --distribution)");
    };
    if requests == 0 {
        bail!("--requests must be at least 1");
    }
    let Some(arrival) = args.arrival else {
        bail!("--arrival is required when generating a trace (e.g. --arrival poisson:160)");
    };
    let dist_spec = args.distribution.clone().unwrap_or(DistributionSpec::Bing);
    let dist = dist_spec.build().map_err(anyhow::Error::msg)?;
    let cfg = TraceConfig {
        requests,
        arrival,
        kernel: args.kernel.unwrap_or(Kernel::BlackScholes),
        seq_pct: args.seq_pct.unwrap_or(0),
        seed: args.seed.unwrap_or(1),
    };
    Trace::generate(&cfg, &dist, &dist_spec.to_string())
}

fn run(args: Args) -> Result<ExitCode> {
    let trace = trace_from(&args)?;
    if let Some(p) = &args.write_trace {
        trace.save(p)?;
        eprintln!(
            "wrote trace ({} requests) to {}",
            trace.entries.len(),
            p.display()
        );
    }
    if args.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    // Opened before the run: a bad path must not cost the whole run's results.
    let records = match &args.records {
        Some(p) => Some(tailctl_workloads::output::PendingFile::create(p)?),
        None => None,
    };
    eprintln!(
        "tailctl-loadgen: {} requests to {}, offered load {:.2} cores ({})",
        trace.entries.len(),
        args.addr,
        trace.offered_load(),
        trace.description
    );
    let opts = LoadgenOptions {
        drain_timeout: args.drain_timeout,
        progress: !args.no_progress,
    };
    let result = loadgen::run(&args.addr, &trace, &opts)?;
    if let Some(mut f) = records {
        result
            .write_csv_to(&mut f)
            .with_context(|| format!("cannot write {}", f.path().display()))?;
        f.commit()?;
    }
    let summary = Summary::from_latencies(&result.latencies(), result.errors(), &args.targets);
    if args.json {
        let mut v = serde_json::to_value(&summary)?;
        v["trace"] = serde_json::Value::String(trace.description.clone());
        v["sender_error"] = serde_json::to_value(&result.sender_error)?;
        v["server_stats"] = result.server_stats.clone().unwrap_or_default();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", summary.render());
        if let Some(s) = &result.server_stats {
            println!("server: {s}");
        }
    }
    if let Some(e) = &result.sender_error {
        eprintln!("tailctl-loadgen: the sender stopped early: {e}");
    }
    for m in result.malformed.iter().take(3) {
        eprintln!("tailctl-loadgen: server rejected a request: {m}");
    }
    if let Some(f) = result.records.iter().find_map(|r| match &r.outcome {
        loadgen::Outcome::Failed(m) => Some(m.clone()),
        _ => None,
    }) {
        eprintln!("tailctl-loadgen: a request failed on the server: {f}");
    }
    if summary.errors > 0 || summary.lost > 0 {
        eprintln!(
            "tailctl-loadgen: {} errors, {} without a response (drain timeout {})",
            summary.errors,
            summary.lost,
            format_duration(args.drain_timeout)
        );
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match run(Args::parse()).context("tailctl-loadgen") {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
