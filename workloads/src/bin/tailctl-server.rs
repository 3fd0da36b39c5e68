//! `tailctl-server`: the example interactive service on `tailctl-rt`.
//!
//! Design: a thin CLI over [`tailctl_workloads::server`]. It builds the pool
//! (workers, policy, and for tail-control the threshold table, either from a
//! file or computed from the work distribution, rate and target), calibrates
//! the kernels (or takes the calibration from the command line, so every run
//! of an experiment does identical work), tries to register with
//! `scx_tailctl` when it runs (`--scx-socket`; `--no-kernel` never does), prints
//! `listening on ADDR` as its first stdout line (the experiment driver waits
//! for it) and serves until killed.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use tailctl_rt::distribution::parse_duration;
use tailctl_rt::threshold::{ThresholdParams, ThresholdTable};
use tailctl_rt::Policy;
use tailctl_workloads::distributions::DistributionSpec;
use tailctl_workloads::kernel::Calibration;
use tailctl_workloads::registration::registration_of;
use tailctl_workloads::server::{rt::RtExecutor, Server};

/// TCP service running each request on a tailctl-rt pool.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7878")]
    addr: String,
    /// Pool workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Scheduling policy: sf (steal-first), af (admit-first), tc (tail-control), tbb (random admission).
    #[arg(long, default_value = "sf")]
    policy: Policy,
    /// Tail-control: target latency (e.g. 25ms), with --distribution and --rps.
    #[arg(long, value_parser = parse_duration)]
    target: Option<Duration>,
    /// Tail-control: the work distribution the threshold table is computed from.
    #[arg(long)]
    distribution: Option<DistributionSpec>,
    /// Tail-control: the expected mean request rate.
    #[arg(long)]
    rps: Option<f64>,
    /// Tail-control: largest active-request count in the computed table (look-ups
    /// above it use its last entry); default: the runtime's, about twice the
    /// mean number of active requests.
    #[arg(long)]
    q_max: Option<usize>,
    /// Tail-control: read the threshold table from this file instead.
    #[arg(long, conflicts_with_all = ["target", "distribution", "rps"])]
    threshold_table: Option<PathBuf>,
    /// Calibration: ns per Black-Scholes unit (measured at start-up if absent,
    /// on as many threads as --workers at once).
    #[arg(long, requires = "spin_unit_ns")]
    bs_unit_ns: Option<f64>,
    /// Calibration: ns per spin unit (measured at start-up if absent).
    #[arg(long, requires = "bs_unit_ns")]
    spin_unit_ns: Option<f64>,
    /// Print the calibration as JSON and exit.
    #[arg(long)]
    calibrate: bool,
    /// Log connections and the threshold table to stderr.
    #[arg(long, short)]
    verbose: bool,
    /// scx_tailctl's registration socket: when the daemon runs, the pool
    /// registers there and the kernel serializes on exact CPU time.
    #[arg(long, default_value = tailctl_rt::kernel::link::DEFAULT_SOCKET)]
    scx_socket: std::path::PathBuf,
    /// Never register with scx_tailctl (pure user-space tail-control).
    #[arg(long)]
    no_kernel: bool,
}

fn threshold_table(a: &Args) -> Result<Option<ThresholdTable>> {
    if a.policy != Policy::TailControl {
        if a.target.is_some() || a.threshold_table.is_some() {
            bail!("--target/--threshold-table only apply to --policy tc");
        }
        return Ok(None);
    }
    if let Some(p) = &a.threshold_table {
        return Ok(Some(
            ThresholdTable::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        ));
    }
    let (Some(target), Some(dist), Some(rps)) = (a.target, &a.distribution, a.rps) else {
        bail!("--policy tc needs --threshold-table FILE, or --target, --distribution and --rps");
    };
    let dist = dist.build().map_err(anyhow::Error::msg)?;
    let default_q_max =
        ThresholdParams::default_q_max(&dist, rps, a.workers).with_context(|| {
            format!(
                "{rps} rps of {:.2} ms mean work needs more than {} workers",
                dist.mean_secs() * 1e3,
                a.workers
            )
        })?;
    let q_max = a.q_max.unwrap_or(default_q_max).max(1);
    let params = ThresholdParams {
        target,
        rps,
        cores: a.workers,
        q_max,
    };
    Ok(Some(
        ThresholdTable::compute(&dist, &params).map_err(|e| anyhow::anyhow!("{e}"))?,
    ))
}

fn run(a: Args) -> Result<()> {
    // Finite too: an infinite unit cost would shrink every request to one unit.
    let usable = |ns: f64| ns.is_finite() && ns >= 1.0;
    let cal = match (a.bs_unit_ns, a.spin_unit_ns) {
        (Some(bs), Some(spin)) if usable(bs) && usable(spin) => Calibration {
            bs_unit_ns: bs,
            spin_unit_ns: spin,
        },
        (Some(_), Some(_)) => bail!("calibration values must be finite and at least 1 ns"),
        _ => Calibration::measure_on(a.workers),
    };
    if a.calibrate {
        println!("{}", serde_json::to_string(&cal)?);
        return Ok(());
    }
    if a.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let table = threshold_table(&a)?;
    if a.verbose {
        if let Some(t) = &table {
            eprintln!("tailctl-server: threshold table\n{t}");
        }
    }
    let socket = (!a.no_kernel).then_some(a.scx_socket.as_path());
    let exec = match socket {
        Some(sock) => RtExecutor::with_kernel(a.workers, a.policy, table, a.target, sock)?,
        None => RtExecutor::new(a.workers, a.policy, table, a.target)?,
    };
    let registration = registration_of(&exec, socket);
    eprintln!(
        "tailctl-server: {} workers, policy {}, {registration}",
        a.workers,
        a.policy.name()
    );
    let server = Server::bind(&a.addr, Arc::new(exec), cal)?.verbose(a.verbose);
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", server.local_addr()?)?;
    out.flush()?;
    drop(out);
    server.run()
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tailctl-server: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
