//! `tailctl-jobserver`: the job server (matrix multiply > fib > sort >
//! Smith-Waterman, see `tailctl_workloads::jobserver`), its open-loop load
//! generator, and the benchmark that runs both as separate processes with and
//! without priority levels.
//!
//! Design: as `tailctl-kv`; the processes and files of `bench` and `replot`
//! are `tailctl_workloads::priobench`'s (per-job records in `raw/<config>.csv`,
//! git-ignored).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use tailctl_workloads::jobserver::{
    self as jobs, LoadOptions, LoadReport, ServerOptions, Sizes, KINDS,
};
use tailctl_workloads::output::PendingFile;
use tailctl_workloads::{plot, priobench};

#[derive(Parser)]
#[command(about = "Job server at four priority levels, with and without priorities")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone, Debug)]
struct ServerArgs {
    /// Application: `jobs` (mm > fib > sort > sw) or `email` (send > sortmail > compress).
    #[arg(long, default_value = "jobs")]
    app: String,
    /// Pool workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Each kind at its level (`on`: mm 4, fib 3, sort 2, sw 1) or all at the default level (`off`).
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
}

#[derive(clap::Args, Clone, Debug)]
struct LoadArgs {
    /// Jobs per second (Poisson, uniform mix of the four kinds).
    #[arg(long, default_value_t = 60.0)]
    rps: f64,
    /// Jobs to send.
    #[arg(long, default_value_t = 3000)]
    requests: usize,
    /// Warm-up jobs left out of the summary.
    #[arg(long, default_value_t = 200)]
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
    /// Drive a server with open-loop jobs.
    Load {
        /// Server address.
        #[arg(long)]
        addr: String,
        /// Application: jobs or email (must match the server's).
        #[arg(long, default_value = "jobs")]
        app: String,
        #[command(flatten)]
        l: LoadArgs,
        /// Write per-job records (CSV) here.
        #[arg(long)]
        records: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time one job of each kind, alone on a pool (the sizes' cost here).
    Calibrate {
        /// Pool workers.
        #[arg(long, default_value_t = 2)]
        workers: usize,
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
        /// Configurations: prio-sf, prio-af, noprio-sf, noprio-af, adaptive-sf, adaptive-af.
        #[arg(long, default_value = "prio-sf,noprio-sf,noprio-af")]
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
    let priorities = match s.priorities.as_str() {
        "on" => true,
        "off" => false,
        v => bail!("--priorities takes on or off, not {v:?}"),
    };
    if s.app != "jobs" && s.app != "email" {
        bail!("--app takes jobs or email, not {:?}", s.app);
    }
    Ok(ServerOptions {
        app: s.app.clone(),
        workers: s.workers,
        priorities,
        policy: s.policy.clone(),
        priority_mode: s.priority_mode.clone(),
        sizes: Sizes::default(),
    })
}

fn load_opts(l: &LoadArgs, app: &str) -> LoadOptions {
    LoadOptions {
        app: app.to_string(),
        rps: l.rps,
        requests: l.requests,
        seed: l.seed,
        warmup: l.warmup,
    }
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Server { addr, s } => {
            let opts = server_opts(&s)?;
            jobs::serve(priobench::listen(&addr)?, &opts)
        }
        Cmd::Load {
            addr,
            app,
            l,
            records,
            json,
        } => {
            // The records file is created before the run: a bad path fails now.
            let records = records.as_deref().map(PendingFile::create).transpose()?;
            let (report, recs) = jobs::load(&addr, &load_opts(&l, &app))?;
            if let Some(f) = records {
                priobench::write_records(f, "kind", recs.iter().map(|(k, r)| (k.as_str(), r)))?;
            }
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                for (k, s) in &report.kinds {
                    println!(
                        "{k}: n={} p50={:.2}ms p95={:.2}ms p99={:.2}ms",
                        s.n, s.p50_ms, s.p95_ms, s.p99_ms
                    );
                }
            }
            Ok(())
        }
        Cmd::Calibrate { workers } => {
            let pool = tailctl_rt::Pool::builder().workers(workers).build()?;
            let sizes = Sizes::default();
            let mail = std::sync::Arc::new(jobs::Mailboxes::default());
            for k in jobs::EMAIL_KINDS {
                let m = std::sync::Arc::clone(&mail);
                let t = std::time::Instant::now();
                let r = pool
                    .submit(move || match k {
                        "send" => m.send(1),
                        "sortmail" => m.sort_words(1),
                        _ => m.compress(1),
                    })
                    .wait()?;
                println!(
                    "{k}: {:.2} ms (result {r})",
                    t.elapsed().as_secs_f64() * 1e3
                );
            }
            for k in KINDS {
                let t = std::time::Instant::now();
                let r = pool.submit(move || jobs::run(k, &sizes)).wait()?;
                println!(
                    "{k}: {:.2} ms (result {r})",
                    t.elapsed().as_secs_f64() * 1e3
                );
            }
            Ok(())
        }
        Cmd::Replot { out } => {
            let (_, rows): (_, Vec<Row>) = priobench::read_report(&out)?;
            std::fs::write(out.join("table.md"), render_table(&rows))?;
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

/// One configuration's result.
type Row = priobench::Row<ServerOptions, LoadReport>;

/// The server flags of configuration `name` (see `--configs`).
fn config_server(name: &str, s: &ServerArgs) -> Result<ServerArgs> {
    let mut s = s.clone();
    let Some((priorities, policy, mode)) = priobench::priority_config(name, s.quantum_us) else {
        bail!("unknown configuration {name:?}");
    };
    s.priorities = priorities.into();
    s.policy = policy;
    s.priority_mode = mode;
    Ok(s)
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
        let server = [
            "server".to_string(),
            format!("--app={}", sa.app),
            format!("--workers={}", sa.workers),
            format!("--priorities={}", sa.priorities),
            format!("--policy={}", sa.policy),
            format!("--priority-mode={}", sa.priority_mode),
        ];
        let report: LoadReport = priobench::run_config(exe, name, &server, |addr| {
            let mut a = priobench::load_argv(addr, &csv, l.rps, l.requests, l.warmup, l.seed);
            a.push(format!("--app={}", sa.app));
            a
        })?;
        for (k, s) in &report.kinds {
            eprintln!("{name} {k}: p95 {:.2} ms p99 {:.2} ms", s.p95_ms, s.p99_ms);
        }
        Ok(Row {
            config: name.to_string(),
            server: server_opts(&sa)?,
            report,
        })
    })?;
    let all = serde_json::to_value(&runs)?;
    let rows = priobench::median_rows(runs)?;
    let table = render_table(&rows);
    let report = serde_json::json!({ "rows": rows, "rounds": rounds, "runs": all,
        "host_cpus": priobench::host_cpus() });
    priobench::write_outputs(out, &table, &report, |p| plot(&rows, p), json)
}

fn render_table(rows: &[Row]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let o = &first.report.options;
    let levels = first
        .report
        .kinds
        .iter()
        .map(|(k, _)| format!("{k} {}", jobs::level_of(k).level()))
        .collect::<Vec<_>>()
        .join(" > ");
    let mut t = format!(
        "{} at {} per second (Poisson), {} requests ({} warm-up left out); levels with priorities: {levels}.\n\n",
        o.app, o.rps, o.requests, o.warmup
    );
    t +=
        "| config | kind | n | p50 | p95 | p99 | queue p99 |\n|---|---|---:|---:|---:|---:|---:|\n";
    for r in rows {
        for (k, s) in &r.report.kinds {
            t += &format!(
                "| {} | {k} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |\n",
                r.config, s.n, s.p50_ms, s.p95_ms, s.p99_ms, s.queue_p99_ms
            );
        }
    }
    t += "\n| config | worker CPU | search CPU (runtime) | level switches | muggings | promptness violations (total ms) | reallocations |\n|---|---:|---:|---:|---:|---:|---:|\n";
    for r in rows {
        let v = &r.report.server;
        let num = |k: &str| v.get(k).and_then(|x| x.as_f64()).unwrap_or(0.0);
        t += &format!(
            "| {} | {:.0} ms | {:.0} ms | {} | {} | {} ({:.1}) | {} |\n",
            r.config,
            num("workers_cpu_ms"),
            num("search_cpu_ms"),
            num("level_switches"),
            num("muggings"),
            num("promptness_violations"),
            num("promptness_violation_ms"),
            num("reallocations")
        );
    }
    t
}

fn plot(rows: &[Row], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = rows
        .iter()
        .flat_map(|r| r.report.kinds.iter().map(|(_, s)| s.p99_ms))
        .fold(1.0, f64::max)
        * 2.0;
    let labels: Vec<String> = rows
        .first()
        .map(|r| {
            r.report
                .kinds
                .iter()
                .map(|(k, _)| format!("{k} (level {})", jobs::level_of(k).level()))
                .collect()
        })
        .unwrap_or_default();
    let caption = format!(
        "tailctl-jobserver ({}): p99 latency per kind (level) and configuration",
        rows.first()
            .map_or("jobs", |r| r.report.options.app.as_str())
    );
    let mut chart = plot::log_bar_chart(
        &root,
        &caption,
        labels.len().max(1),
        &labels,
        0.5..ymax,
        "p99 latency (ms, log scale)",
    )?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    let w = 0.8 / rows.len().max(1) as f64;
    for (ci, r) in rows.iter().enumerate() {
        let c = colors[ci % colors.len()];
        let bars: Vec<_> = r
            .report
            .kinds
            .iter()
            .enumerate()
            .map(|(g, (_, s))| {
                let x0 = g as f64 + 0.1 + ci as f64 * w;
                Rectangle::new([(x0, 0.5), (x0 + w * 0.9, s.p99_ms.max(0.51))], c.filled())
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(r.config.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], c.filled()));
    }
    plot::finish(&mut chart, &root)
}
