//! `tailctl thresholds`: compute a tail-control threshold table.
//!
//! Design: a thin front end over the runtime's `ThresholdTable::compute` (the
//! paper's Figure 3), so the table printed here is bit-for-bit the one the
//! runtime and the daemon compute. The distribution argument is shared with
//! `tailctl sim` (see its `--work`). Text output
//! is the loadable file format itself with the inputs as `#` comments, so
//! `tailctl thresholds … > table.txt` and `-o table.txt` produce loadable files.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;
use tailctl_rt::distribution::{format_duration, parse_duration};
use tailctl_rt::threshold::{ThresholdParams, ThresholdTable};

use crate::sim::emit;
use crate::sim::workload::WorkSpec;

/// Arguments of `tailctl thresholds`.
#[derive(clap::Args)]
pub struct Args {
    /// Work distribution: `bing`, `finance` (the workloads crate's histograms), `lognormal:MEAN:SD` (`lognormal:10ms:13ms`) or `lognormal:MEAN_MS,SD_MS` (binned: mean/10 bins up to 20×mean) or a histogram file (`WORK,PROBABILITY` lines, e.g. `5ms,0.25`).
    #[arg(long)]
    work: String,
    /// Target latency, with a unit (e.g. `20.6ms`).
    #[arg(long, value_parser = parse_dur)]
    target: Duration,
    /// Average arrival rate, requests per second.
    #[arg(long)]
    rps: f64,
    /// Number of cores (workers).
    #[arg(long)]
    cores: usize,
    /// Largest active-request count in the table (default: twice a generous estimate of the mean).
    #[arg(long)]
    q_max: Option<usize>,
    /// Print JSON instead of the text format.
    #[arg(long)]
    json: bool,
    /// Also write the table, in the format `ThresholdTable::load` reads, to this file.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// Entry point of `tailctl thresholds`.
pub fn run(args: Args) -> Result<()> {
    let spec: WorkSpec = args.work.parse().context("--work")?;
    let dist = spec.binned()?;
    if !(args.rps.is_finite() && args.rps > 0.0) {
        bail!("--rps must be a number > 0, got {}", args.rps);
    }
    if args.cores == 0 {
        bail!("--cores must be ≥ 1");
    }
    let q_max = match args.q_max {
        Some(0) => bail!("--q-max must be ≥ 1"),
        Some(q) => q,
        None => ThresholdParams::default_q_max(&dist, args.rps, args.cores).with_context(|| {
            format!(
                "overloaded: utilisation U = mean work {:.3} ms × {} rps = {:.2} cores is not below --cores {}",
                dist.mean_secs() * 1e3,
                args.rps,
                dist.mean_secs() * args.rps,
                args.cores
            )
        })?,
    };
    let params = ThresholdParams {
        target: args.target,
        rps: args.rps,
        cores: args.cores,
        q_max,
    };
    let table = ThresholdTable::compute(&dist, &params)?;
    let mut header = String::new();
    let _ = writeln!(
        header,
        "# work={} target={} rps={} cores={} q_max={q_max}",
        spec.label(),
        format_duration(args.target),
        args.rps,
        args.cores
    );
    let _ = writeln!(
        header,
        "# mean work {:.3} ms, utilisation {:.2} of {} cores, {} bins",
        dist.mean_secs() * 1e3,
        dist.mean_secs() * args.rps,
        args.cores,
        dist.bins().len()
    );
    if let Some(path) = &args.output {
        std::fs::write(path, format!("{table}{header}"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        let v = json!({
            "work": spec.label(),
            "target_ms": args.target.as_secs_f64() * 1e3,
            "rps": args.rps,
            "cores": args.cores,
            "q_max": q_max,
            "mean_work_ms": dist.mean_secs() * 1e3,
            "utilization": dist.mean_secs() * args.rps,
            "first_serializing_q": table.thresholds().iter().position(|t| t.is_some()).map(|i| i + 1),
            "thresholds_ms": table.thresholds().iter()
                .map(|t| t.map(|d| d.as_secs_f64() * 1e3)).collect::<Vec<_>>(),
        });
        emit(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
    } else {
        emit(&format!("{table}{header}"))?;
    }
    Ok(())
}
