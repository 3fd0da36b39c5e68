//! `tailctl-kv`: the memcached-like key-value service with background
//! compaction (see `tailctl_workloads::kv`), its open-loop load generator,
//! and the benchmark that runs both as separate processes, with and without
//! priority levels.
//!
//! Design: one binary, three subcommands. `bench` starts a fresh `server`
//! child per configuration (it prints `LISTENING <addr>` once bound), runs
//! a `load` child against it with `--json`, stops the server, and writes
//! `table.md`, `report.json`, `plot.svg` and `command.txt` into `--out`
//! (raw per-request records go to `raw/<config>.csv`, git-ignored). The
//! processes and files are `tailctl_workloads::priobench`'s, shared with
//! `tailctl-jobserver`; this file keeps the flags, the table and the plot.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use tailctl_workloads::kv::{self, LoadOptions, LoadReport, ServerOptions};
use tailctl_workloads::output::PendingFile;
use tailctl_workloads::{plot, priobench};

#[derive(Parser)]
#[command(about = "Key-value service with background compaction, with and without priorities")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone, Debug)]
struct ServerArgs {
    /// Pool workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// GET/SET at level 7 and compaction at level 1 (`on`), or all at the default level (`off`).
    #[arg(long, default_value = "on")]
    priorities: String,
    /// Pool policy: sf or af.
    #[arg(long, default_value = "sf")]
    policy: String,
    /// Priority mode: prompt (Prompt I-Cilk) or adaptive:<n>us (the adaptive quantum-based scheduler).
    #[arg(long, default_value = "prompt")]
    priority_mode: String,
    /// Quantum of the adaptive configurations (adaptive-sf, adaptive-af), µs.
    #[arg(long, default_value_t = 1000)]
    quantum_us: u64,
    /// Keys in the store.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 256)]
    value_bytes: usize,
    /// Background compaction: on or off.
    #[arg(long, default_value = "on")]
    compaction: String,
    /// Passes per shard per compaction (its CPU cost).
    #[arg(long, default_value_t = 2)]
    passes: usize,
}

#[derive(clap::Args, Clone, Debug)]
struct LoadArgs {
    /// GET/SET requests per second (Poisson).
    #[arg(long, default_value_t = 2000.0)]
    rps: f64,
    /// Requests to send.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Fraction of SETs.
    #[arg(long, default_value_t = 0.1)]
    set_fraction: f64,
    /// Warm-up requests left out of the summary.
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Trace seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the server (prints `LISTENING <addr>`).
    Server {
        /// Address to bind (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: String,
        #[command(flatten)]
        s: ServerArgs,
    },
    /// Drive a server with open-loop GET/SET load.
    Load {
        /// Server address.
        #[arg(long)]
        addr: String,
        /// Keys (uniformly chosen).
        #[arg(long, default_value_t = 100_000)]
        keys: u64,
        #[command(flatten)]
        l: LoadArgs,
        /// Write per-request records (CSV) here.
        #[arg(long)]
        records: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Redraw `plot.svg` and `table.md` of a bench directory from its `report.json`.
    Replot {
        /// The bench's output directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// Server and load as separate processes, once per configuration.
    Bench {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Configurations: prio-sf, prio-af, noprio-sf, noprio-af, adaptive-sf, adaptive-af,
        /// alone (no compaction).
        #[arg(long, default_value = "alone,prio-sf,noprio-sf,noprio-af")]
        configs: String,
        /// Rounds: every configuration once per round, interleaved; the
        /// table and `rows` of report.json are the medians over the rounds
        /// (`runs` has every run).
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        #[command(flatten)]
        s: ServerArgs,
        #[command(flatten)]
        l: LoadArgs,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn server_opts(s: &ServerArgs) -> Result<ServerOptions> {
    let on = |v: &str, what: &str| match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => bail!("--{what} takes on or off, not {v:?}"),
    };
    Ok(ServerOptions {
        workers: s.workers,
        priorities: on(&s.priorities, "priorities")?,
        policy: s.policy.clone(),
        priority_mode: s.priority_mode.clone(),
        keys: s.keys,
        value_bytes: s.value_bytes,
        compaction: on(&s.compaction, "compaction")?,
        passes: s.passes,
    })
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Server { addr, s } => {
            let opts = server_opts(&s)?;
            kv::serve(priobench::listen(&addr)?, &opts)
        }
        Cmd::Load {
            addr,
            keys,
            l,
            records,
            json,
        } => {
            let opts = load_opts(&l, keys);
            // Checked, and the records file created, before the run.
            opts.validate()?;
            let records = records.as_deref().map(PendingFile::create).transpose()?;
            let (report, recs) = kv::load(&addr, &opts)?;
            if let Some(f) = records {
                let ops = recs.iter().map(|r| (if r.set { "SET" } else { "GET" }, r));
                priobench::write_records(f, "op", ops)?;
            }
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                let a = &report.all;
                println!(
                    "GET/SET n={} p50={:.3}ms p95={:.3}ms p99={:.3}ms within10ms={:.2}%",
                    a.n,
                    a.p50_ms,
                    a.p95_ms,
                    a.p99_ms,
                    a.within_10ms * 100.0
                );
            }
            Ok(())
        }
        Cmd::Replot { out } => {
            let (v, rows): (_, Vec<Row>) = priobench::read_report(&out)?;
            let l = load_of_report(&v["load"])
                .with_context(|| format!("{}", out.join("report.json").display()))?;
            std::fs::write(out.join("table.md"), render_table(&rows, &l))?;
            plot(&rows, &out.join("plot.svg"))
        }
        Cmd::Bench {
            out,
            configs,
            rounds,
            s,
            l,
            json,
        } => bench(&out, &configs, rounds, &s, &l, json),
    }
}

/// The `load` object of a bench's report.json; a missing field is an error
/// (the table would otherwise say 0 rps, 0 requests).
fn load_of_report(load: &serde_json::Value) -> Result<LoadArgs> {
    let num = |k: &str| {
        load[k]
            .as_f64()
            .with_context(|| format!("`load.{k}` is missing"))
    };
    let int = |k: &str| {
        load[k]
            .as_u64()
            .with_context(|| format!("`load.{k}` is missing"))
    };
    Ok(LoadArgs {
        rps: num("rps")?,
        requests: int("requests")? as usize,
        set_fraction: num("set_fraction")?,
        warmup: int("warmup")? as usize,
        seed: int("seed")?,
    })
}

fn load_opts(l: &LoadArgs, keys: u64) -> LoadOptions {
    LoadOptions {
        rps: l.rps,
        requests: l.requests,
        set_fraction: l.set_fraction,
        keys,
        seed: l.seed,
        warmup: l.warmup,
    }
}

/// One configuration's result.
type Row = priobench::Row<ServerOptions, LoadReport>;

/// The server flags of configuration `name` (see `--configs`).
fn config_server(name: &str, s: &ServerArgs) -> Result<ServerArgs> {
    let mut s = s.clone();
    if name == "alone" {
        s.compaction = "off".into();
        s.priorities = "off".into();
        s.priority_mode = "prompt".into();
    } else if let Some((priorities, policy, mode)) = priobench::priority_config(name, s.quantum_us)
    {
        s.compaction = "on".into();
        s.priorities = priorities.into();
        s.policy = policy;
        s.priority_mode = mode;
    } else {
        bail!("unknown configuration {name:?}");
    }
    Ok(s)
}

fn server_argv(s: &ServerArgs) -> Vec<String> {
    vec![
        "server".into(),
        format!("--workers={}", s.workers),
        format!("--priorities={}", s.priorities),
        format!("--policy={}", s.policy),
        format!("--priority-mode={}", s.priority_mode),
        format!("--keys={}", s.keys),
        format!("--value-bytes={}", s.value_bytes),
        format!("--compaction={}", s.compaction),
        format!("--passes={}", s.passes),
    ]
}

fn bench(
    out: &Path,
    configs: &str,
    rounds: usize,
    s: &ServerArgs,
    l: &LoadArgs,
    json: bool,
) -> Result<()> {
    let runs = priobench::each_config(out, configs, rounds, |exe, name, csv| {
        let sa = config_server(name, s)?;
        let report: LoadReport = priobench::run_config(exe, name, &server_argv(&sa), |addr| {
            let mut a = priobench::load_argv(addr, &csv, l.rps, l.requests, l.warmup, l.seed);
            a.push(format!("--keys={}", sa.keys));
            a.push(format!("--set-fraction={}", l.set_fraction));
            a
        })?;
        eprintln!(
            "{name}: GET/SET p95 {:.3} ms p99 {:.3} ms, within 10 ms {:.2}%",
            report.all.p95_ms,
            report.all.p99_ms,
            report.all.within_10ms * 100.0
        );
        Ok(Row {
            config: name.to_string(),
            server: server_opts(&sa)?,
            report,
        })
    })?;
    let all = serde_json::to_value(&runs)?;
    let rows = priobench::median_rows(runs)?;
    let table = render_table(&rows, l);
    let report = serde_json::json!({ "rows": rows, "rounds": rounds, "runs": all, "load": {
        "rps": l.rps, "requests": l.requests, "set_fraction": l.set_fraction,
        "warmup": l.warmup, "seed": l.seed }, "host_cpus": priobench::host_cpus() });
    priobench::write_outputs(out, &table, &report, |p| plot(&rows, p), json)
}

fn render_table(rows: &[Row], l: &LoadArgs) -> String {
    let mut t = format!(
        "GET/SET (high level with priorities) at {} rps, {} requests ({} warm-up left out), {:.0}% SET; compaction (low level) runs continuously.\n\n",
        l.rps, l.requests, l.warmup, l.set_fraction * 100.0
    );
    t += "| config | GET/SET p50 | p95 | p99 | p99.9 | within 10 ms | queue p99 | compactions | compaction p50 / p95 | worker CPU | search CPU (workers − user) | search CPU (runtime) | violations (total ms) | muggings | reallocations |\n";
    t += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in rows {
        let a = &r.report.all;
        let sv = r.report.server.clone().unwrap_or_default();
        let pool = &sv.pool;
        let num = |k: &str| pool.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
        t += &format!(
            "| {} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.2}% | {:.3} ms | {} | {:.1} / {:.1} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} ({:.1}) | {} | {} |\n",
            r.config,
            a.p50_ms,
            a.p95_ms,
            a.p99_ms,
            a.p999_ms,
            a.within_10ms * 100.0,
            a.queue_p99_ms,
            sv.compactions,
            sv.compaction_ms[0],
            sv.compaction_ms[1],
            sv.workers_cpu_ms,
            sv.search_cpu_ms,
            sv.runtime_search_cpu_ms,
            num("promptness_violations"),
            num("promptness_violation_ms"),
            num("muggings"),
            num("reallocations"),
        );
    }
    t
}

fn plot(rows: &[Row], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = rows.iter().map(|r| r.report.all.p99_ms).fold(1.0, f64::max) * 2.0;
    let names: Vec<String> = rows.iter().map(|r| r.config.clone()).collect();
    let mut chart = plot::log_bar_chart(
        &root,
        "tailctl-kv: GET/SET latency (p95, p99) beside background compaction",
        rows.len(),
        &names,
        0.01..ymax,
        "latency (ms, log scale)",
    )?;
    for (i, r) in rows.iter().enumerate() {
        let x = i as f64;
        let a = &r.report.all;
        chart.draw_series([
            Rectangle::new(
                [(x + 0.15, 0.01), (x + 0.48, a.p95_ms.max(0.011))],
                BLUE.filled(),
            ),
            Rectangle::new(
                [(x + 0.52, 0.01), (x + 0.85, a.p99_ms.max(0.011))],
                RED.filled(),
            ),
        ])?;
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, 10.0), (rows.len() as f64, 10.0)],
            BLACK.stroke_width(2),
        ))?
        .label("QoS bound: 95% within 10 ms")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("p95")
        .legend(|(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], BLUE.filled()));
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("p99")
        .legend(|(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], RED.filled()));
    plot::finish(&mut chart, &root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replot_needs_every_load_field() {
        let full = serde_json::json!({
            "rps": 2000.0, "requests": 100, "set_fraction": 0.1, "warmup": 10, "seed": 7
        });
        let l = load_of_report(&full).unwrap();
        assert_eq!((l.rps, l.requests, l.seed), (2000.0, 100, 7));
        let mut partial = full.clone();
        partial.as_object_mut().unwrap().remove("rps");
        let e = load_of_report(&partial).unwrap_err().to_string();
        assert!(e.contains("load.rps"), "{e}");
        assert!(load_of_report(&serde_json::Value::Null).is_err());
    }
}
