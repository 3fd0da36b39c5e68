//! `tailctl-jobserver`: the job server (matrix multiply > fib > sort >
//! Smith-Waterman, see `tailctl_workloads::jobserver`), its open-loop load
//! generator, and the benchmark that runs both as separate processes with and
//! without priority levels.
//!
//! Design: as `tailctl-kv`. `bench` starts a fresh `server` child per
//! configuration (it prints `LISTENING <addr>`), runs a `load` child with
//! `--json`, stops the server, and writes `table.md`, `report.json`,
//! `plot.svg` and `command.txt` into `--out` (per-job records in
//! `<config>.csv`, git-ignored).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use tailctl_workloads::jobserver::{
    self as jobs, LoadOptions, LoadReport, ServerOptions, Sizes, KINDS,
};

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
        /// Configurations: prio-sf, prio-af, noprio-sf, noprio-af.
        #[arg(long, default_value = "prio-sf,noprio-sf,noprio-af")]
        configs: String,
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
            let l = std::net::TcpListener::bind(&addr)
                .with_context(|| format!("cannot bind {addr}"))?;
            println!("LISTENING {}", l.local_addr()?);
            std::io::stdout().flush()?;
            jobs::serve(l, &opts)
        }
        Cmd::Load {
            addr,
            app,
            l,
            records,
            json,
        } => {
            let (report, recs) = jobs::load(&addr, &load_opts(&l, &app))?;
            if let Some(p) = records {
                let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
                writeln!(f, "id,kind,latency_ns,queue_ns,run_ns")?;
                for (k, r) in &recs {
                    let lat = r.latency_ns.map_or(String::from("lost"), |l| l.to_string());
                    writeln!(f, "{},{k},{lat},{},{}", r.id, r.queue_ns, r.run_ns)?;
                }
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
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("report.json"))?)?;
            let rows: Vec<Row> = serde_json::from_value(v["rows"].clone())?;
            std::fs::write(out.join("table.md"), render_table(&rows))?;
            plot(&rows, &out.join("plot.svg"))
        }
        Cmd::Bench {
            out,
            configs,
            s,
            l,
            json,
        } => bench(&out, &configs, &s, &l, json),
    }
}

/// One configuration's result.
#[derive(Serialize, Deserialize)]
struct Row {
    config: String,
    server: ServerOptions,
    report: LoadReport,
}

fn bench(out: &Path, configs: &str, s: &ServerArgs, l: &LoadArgs, json: bool) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for name in configs.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let mut sa = s.clone();
        match name {
            "prio-sf" | "prio-af" | "noprio-sf" | "noprio-af" => {
                sa.priorities = if name.starts_with("prio") {
                    "on"
                } else {
                    "off"
                }
                .into();
                sa.policy = name[name.len() - 2..].to_string();
            }
            other => bail!("unknown configuration {other:?}"),
        }
        let mut server = Command::new(&exe)
            .args([
                "server".to_string(),
                format!("--app={}", sa.app),
                format!("--workers={}", sa.workers),
                format!("--priorities={}", sa.priorities),
                format!("--policy={}", sa.policy),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start the server")?;
        let mut first = String::new();
        BufReader::new(server.stdout.take().expect("piped"))
            .read_line(&mut first)
            .context("server did not start")?;
        let addr = first
            .strip_prefix("LISTENING ")
            .map(|a| a.trim().to_string())
            .with_context(|| format!("unexpected server output {first:?}"))?;
        let csv = out.join(format!("{name}.csv"));
        let load = Command::new(&exe)
            .args([
                "load".to_string(),
                format!("--addr={addr}"),
                format!("--app={}", sa.app),
                format!("--rps={}", l.rps),
                format!("--requests={}", l.requests),
                format!("--warmup={}", l.warmup),
                format!("--seed={}", l.seed),
                format!("--records={}", csv.display()),
                "--json".to_string(),
            ])
            .output()
            .context("cannot run the load generator")?;
        let _ = server.kill();
        let _ = server.wait();
        if !load.status.success() {
            bail!(
                "load generator failed for {name}: {}",
                String::from_utf8_lossy(&load.stderr)
            );
        }
        let report: LoadReport = serde_json::from_slice(&load.stdout)
            .with_context(|| format!("bad load report for {name}"))?;
        for (k, s) in &report.kinds {
            eprintln!("{name} {k}: p95 {:.2} ms p99 {:.2} ms", s.p95_ms, s.p99_ms);
        }
        rows.push(Row {
            config: name.to_string(),
            server: server_opts(&sa)?,
            report,
        });
    }
    let table = render_table(&rows);
    std::fs::write(out.join("table.md"), &table)?;
    let report = serde_json::json!({ "rows": rows, "host_cpus":
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0) });
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    plot(&rows, &out.join("plot.svg"))?;
    let argv: Vec<String> = std::env::args().collect();
    std::fs::write(out.join("command.txt"), argv.join(" ") + "\n")?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{table}");
    }
    Ok(())
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
    t += "\n| config | worker CPU | level switches | muggings | promptness violations (total ms) |\n|---|---:|---:|---:|---:|\n";
    for r in rows {
        let v = &r.report.server;
        let num = |k: &str| v.get(k).and_then(|x| x.as_f64()).unwrap_or(0.0);
        t += &format!(
            "| {} | {:.0} ms | {} | {} | {} ({:.1}) |\n",
            r.config,
            num("workers_cpu_ms"),
            num("level_switches"),
            num("muggings"),
            num("promptness_violations"),
            num("promptness_violation_ms")
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
    let kinds: Vec<String> = rows
        .first()
        .map(|r| r.report.kinds.iter().map(|(k, _)| k.clone()).collect())
        .unwrap_or_default();
    let groups = kinds.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "tailctl-jobserver ({}): p99 latency per kind (level) and configuration",
                rows.first()
                    .map_or("jobs", |r| r.report.options.app.as_str())
            ),
            ("sans-serif", 16),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..groups as f64, (0.5f64..ymax).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                kinds
                    .get(i)
                    .map(|k| format!("{k} (level {})", jobs::level_of(k).level()))
                    .unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("p99 latency (ms, log scale)")
        .draw()?;
    let colors = [BLUE, RED, GREEN, MAGENTA];
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
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
