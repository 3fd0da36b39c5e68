//! The command-line plumbing `tailctl-kv` and `tailctl-jobserver` share: the
//! `server` subcommand's listening line, the `bench` loop (a fresh server
//! process and a load process per configuration), its output directory, and
//! `replot`'s reading of it.
//!
//! Design: the two binaries keep their flags, their per-application table
//! and plot, and what a configuration means; everything about processes and
//! files lives here once, so both benches write the same files the same way:
//! `table.md`, `report.json`, `plot.svg`, `command.txt` and per-request
//! records in `raw/<config>.csv` (git-ignored).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::kv::Record;

/// One configuration's result in `report.json`: its name, the server's
/// options and the load generator's report.
#[derive(Serialize, Deserialize)]
pub struct Row<S, R> {
    /// The configuration (`prio-sf`, `noprio-af`, …).
    pub config: String,
    /// The server's options.
    pub server: S,
    /// What the load generator measured.
    pub report: R,
}

/// Binds `addr` and prints `LISTENING <addr>` (the line `bench` waits for).
pub fn listen(addr: &str) -> Result<TcpListener> {
    let l = TcpListener::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
    println!("LISTENING {}", l.local_addr()?);
    std::io::stdout().flush()?;
    Ok(l)
}

/// The levels switch (`on`/`off`), pool policy and priority mode of a
/// priority configuration: `prio-sf`, `prio-af` (Prompt I-Cilk's levels),
/// `noprio-sf`, `noprio-af` (every request at the default level),
/// `adaptive-sf`, `adaptive-af` (the levels under the adaptive
/// quantum-based scheduler, quantum `quantum_us`); `None` for any other
/// name.
///
/// ```
/// use tailctl_workloads::priobench::priority_config;
/// assert_eq!(priority_config("noprio-af", 1000), Some(("off", "af".to_string(), "prompt".to_string())));
/// assert_eq!(
///     priority_config("adaptive-sf", 500),
///     Some(("on", "sf".to_string(), "adaptive:500us".to_string()))
/// );
/// assert_eq!(priority_config("alone", 1000), None);
/// ```
pub fn priority_config(name: &str, quantum_us: u64) -> Option<(&'static str, String, String)> {
    let (on, mode) = match name {
        "prio-sf" | "prio-af" => ("on", "prompt".to_string()),
        "noprio-sf" | "noprio-af" => ("off", "prompt".to_string()),
        "adaptive-sf" | "adaptive-af" => ("on", format!("adaptive:{quantum_us}us")),
        _ => return None,
    };
    Some((on, name[name.len() - 2..].to_string(), mode))
}

/// The `load` flags both applications have, for a load child against `addr`
/// that writes its records to `csv` and its report as JSON.
pub fn load_argv(
    addr: &str,
    csv: &Path,
    rps: f64,
    requests: usize,
    warmup: usize,
    seed: u64,
) -> Vec<String> {
    vec![
        "load".to_string(),
        format!("--addr={addr}"),
        format!("--rps={rps}"),
        format!("--requests={requests}"),
        format!("--warmup={warmup}"),
        format!("--seed={seed}"),
        format!("--records={}", csv.display()),
        "--json".to_string(),
    ]
}

/// Runs `run(exe, name, csv)` for each configuration in the comma-separated
/// `configs`, `rounds` times, interleaved (every configuration once per
/// round, in the given order, so that a change of the host's load hits them
/// alike), after creating `out/raw`; `csv` (per-request records, git-ignored)
/// is `out/raw/<name>.csv` in the first round, `out/raw/<name>-r<k>.csv` in
/// round `k` ≥ 2. Returns the runs in order.
pub fn each_config<T>(
    out: &Path,
    configs: &str,
    rounds: usize,
    mut run: impl FnMut(&Path, &str, PathBuf) -> Result<T>,
) -> Result<Vec<T>> {
    let raw = out.join("raw");
    std::fs::create_dir_all(&raw)?;
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for round in 1..=rounds.max(1) {
        for name in configs.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let csv = if round == 1 {
                format!("{name}.csv")
            } else {
                format!("{name}-r{round}.csv")
            };
            rows.push(run(&exe, name, raw.join(csv))?);
        }
    }
    Ok(rows)
}

/// The median of each configuration's runs (`runs` as [`each_config`]
/// returns them), in the order the configurations first appear: every
/// number in the row is the median of that number over the rounds (the
/// lower median for an even count, so integers stay integers); anything
/// else is the first run's. With one round, the runs themselves.
///
/// ```
/// use tailctl_workloads::priobench::{median_rows, Row};
/// let run = |c: &str, v: f64| Row { config: c.into(), server: 0u32, report: vec![v, 2.0 * v] };
/// let m = median_rows(vec![run("a", 3.0), run("b", 1.0), run("a", 1.0), run("a", 2.0)]).unwrap();
/// assert_eq!(m.len(), 2);
/// assert_eq!((m[0].config.as_str(), m[0].report.clone()), ("a", vec![2.0, 4.0]));
/// assert_eq!(m[1].report, vec![1.0, 2.0]);
/// ```
pub fn median_rows<S, R>(runs: Vec<Row<S, R>>) -> Result<Vec<Row<S, R>>>
where
    S: Serialize + DeserializeOwned,
    R: Serialize + DeserializeOwned,
{
    let mut groups: Vec<(String, Vec<serde_json::Value>)> = Vec::new();
    for r in &runs {
        let v = serde_json::to_value(r)?;
        match groups.iter_mut().find(|(c, _)| *c == r.config) {
            Some((_, g)) => g.push(v),
            None => groups.push((r.config.clone(), vec![v])),
        }
    }
    groups
        .into_iter()
        .map(|(_, g)| Ok(serde_json::from_value(median_value(&g))?))
        .collect()
}

fn median_value(vs: &[serde_json::Value]) -> serde_json::Value {
    use serde_json::Value;
    match &vs[0] {
        Value::Number(_) if vs.iter().all(Value::is_number) => {
            let mut s: Vec<&Value> = vs.iter().collect();
            s.sort_by(|a, b| {
                let (a, b) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                a.total_cmp(&b)
            });
            s[(s.len() - 1) / 2].clone()
        }
        Value::Object(first) => Value::Object(
            first
                .keys()
                .map(|k| {
                    let col: Vec<Value> = vs.iter().filter_map(|v| v.get(k).cloned()).collect();
                    let m = if col.len() == vs.len() {
                        median_value(&col)
                    } else {
                        first[k].clone()
                    };
                    (k.clone(), m)
                })
                .collect(),
        ),
        Value::Array(first)
            if vs
                .iter()
                .all(|v| v.as_array().is_some_and(|a| a.len() == first.len())) =>
        {
            Value::Array(
                (0..first.len())
                    .map(|i| {
                        let col: Vec<Value> = vs.iter().map(|v| v[i].clone()).collect();
                        median_value(&col)
                    })
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

/// Starts `exe` with `server_argv`, waits for its `LISTENING` line, runs `exe`
/// with `load_argv(addr)` to completion, stops the server and returns the
/// load generator's JSON report. `name` names the configuration in errors.
pub fn run_config<R: DeserializeOwned>(
    exe: &Path,
    name: &str,
    server_argv: &[String],
    load_argv: impl FnOnce(&str) -> Vec<String>,
) -> Result<R> {
    let mut server = Command::new(exe)
        .args(server_argv)
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
    let load = Command::new(exe)
        .args(load_argv(&addr))
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
    serde_json::from_slice(&load.stdout).with_context(|| format!("bad load report for {name}"))
}

/// Writes the bench's outputs into `out` (`table.md`, `report.json`, the plot
/// by `plot` to `plot.svg`, `command.txt` with this process's command line)
/// and prints the report as JSON (`json`) or the table.
pub fn write_outputs(
    out: &Path,
    table: &str,
    report: &serde_json::Value,
    plot: impl FnOnce(&Path) -> Result<()>,
    json: bool,
) -> Result<()> {
    std::fs::write(out.join("table.md"), table)?;
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(report)? + "\n",
    )?;
    plot(&out.join("plot.svg"))?;
    let argv: Vec<String> = std::env::args().collect();
    std::fs::write(out.join("command.txt"), argv.join(" ") + "\n")?;
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        print!("{table}");
    }
    Ok(())
}

/// The host's CPUs as `report.json` records them (0 if unknown).
pub fn host_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

/// A bench directory's `report.json` and its rows, for `replot`; errors
/// name the file, and a report without rows is one (replot would replace
/// the table and plot with empty ones).
pub fn read_report<S: DeserializeOwned, R: DeserializeOwned>(
    out: &Path,
) -> Result<(serde_json::Value, Vec<Row<S, R>>)> {
    let path = out.join("report.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    let rows: Vec<Row<S, R>> = serde_json::from_value(v["rows"].clone())
        .with_context(|| format!("{}: bad or missing `rows`", path.display()))?;
    if rows.is_empty() {
        bail!("{}: `rows` is empty, nothing to replot", path.display());
    }
    Ok((v, rows))
}

/// Writes per-request records as CSV to `f` (created before the run, so that a
/// bad path fails before it) and puts the file in place:
/// `id,<label>,latency_ns,queue_ns,run_ns`, `lost` for a request without a
/// response; each record comes with its label's value (the operation or the
/// job kind).
pub fn write_records<'a>(
    mut f: crate::output::PendingFile,
    label: &str,
    recs: impl IntoIterator<Item = (&'a str, &'a Record)>,
) -> Result<()> {
    writeln!(f, "id,{label},latency_ns,queue_ns,run_ns")?;
    for (k, r) in recs {
        let lat = r.latency_ns.map_or(String::from("lost"), |l| l.to_string());
        writeln!(f, "{},{k},{lat},{},{}", r.id, r.queue_ns, r.run_ns)?;
    }
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    type R = Row<u32, Vec<f64>>;

    /// The number of rows read (`Row` has no `Debug`).
    fn read(name: &str, json: &str) -> Result<usize> {
        let dir = std::env::temp_dir().join(format!("priobench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("report.json"), json).unwrap();
        let r = read_report::<u32, Vec<f64>>(&dir).map(|(_, rows): (_, Vec<R>)| rows.len());
        std::fs::remove_dir_all(&dir).ok();
        r
    }

    #[test]
    fn replot_input_errors_name_the_file() {
        let one = r#"{"rows":[{"config":"a","server":1,"report":[1.0]}]}"#;
        assert_eq!(read("ok", one).unwrap(), 1);
        for (name, bad, needle) in [
            ("empty", r#"{"rows":[]}"#, "empty"),
            ("norows", r#"{"load":{}}"#, "rows"),
            ("notjson", "{", "not valid JSON"),
        ] {
            let e = format!("{:#}", read(name, bad).unwrap_err());
            assert!(e.contains("report.json") && e.contains(needle), "{e}");
        }
        let e = format!(
            "{:#}",
            read_report::<u32, Vec<f64>>(Path::new("/nonexistent"))
                .map(|(_, rows)| rows.len())
                .unwrap_err()
        );
        assert!(e.contains("/nonexistent/report.json"), "{e}");
    }
}
