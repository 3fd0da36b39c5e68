//! The binaries end to end: a tiny experiment through real processes and
//! sockets, and clear errors for bad arguments.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin(name: &str) -> PathBuf {
    match name {
        "tailctl-experiment" => PathBuf::from(env!("CARGO_BIN_EXE_tailctl-experiment")),
        "tailctl-loadgen" => PathBuf::from(env!("CARGO_BIN_EXE_tailctl-loadgen")),
        "tailctl-jobs" => PathBuf::from(env!("CARGO_BIN_EXE_tailctl-jobs")),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_tailctl-server")),
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tailctl-wl-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr_of(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a tiny experiment (spin kernel, 40 rps, tail-control once) with
/// `extra` arguments into `out`; returns its report.json.
fn tiny_experiment(out: &Path, requests: &str, extra: &[&str]) -> serde_json::Value {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_tailctl-server"))
        .parent()
        .unwrap();
    let status = Command::new(bin("tailctl-experiment"))
        .args(["--kernel", "spin", "--requests", requests, "--rps", "40"])
        .args(["--tc-runs", "single"])
        .args(extra)
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success());
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

#[test]
fn a_small_experiment_runs_every_policy_and_writes_its_report() {
    let out = tmp("exp");
    let report = tiny_experiment(&out, "80", &[]);
    let rows = report["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "steal-first",
            "admit-first",
            "tail-control",
            "random-admission"
        ]
    );
    for r in rows {
        let miss = r["miss"].as_array().unwrap();
        assert_eq!(miss.len(), 5);
        assert!(miss
            .iter()
            .all(|m| (0.0..=1.0).contains(&m.as_f64().unwrap())));
    }
    // Steal-first's own misses at its own percentiles are at most 100 − p.
    let sf: Vec<f64> = rows[0]["miss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_f64().unwrap())
        .collect();
    for (m, p) in sf.iter().zip([97.5, 98.5, 99.0, 99.5, 99.75]) {
        assert!(*m <= (100.0 - p) / 100.0 + 1e-9, "{m} at p{p}");
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("TC improvement vs steal-first"), "{table}");
    assert!(table.contains("| serialized |"), "{table}");
    // Each run's summary carries the server's counters, fetched over the socket.
    let runs = report["runs"].as_object().unwrap();
    assert_eq!(runs["admit-first"]["server_stats"]["policy"], "af");
    assert_eq!(runs["steal-first"]["server_stats"]["submitted"], 80);
    let svg = std::fs::read_to_string(out.join("plot.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("tail-control"));
    // The trace the runs replayed is the seeded one: regenerating it in another
    // process gives the identical file.
    let again = out.join("again.txt");
    let st = Command::new(bin("tailctl-loadgen"))
        .args([
            "--requests",
            "80",
            "--arrival",
            "poisson:40",
            "--distribution",
            "bing",
            "--kernel",
            "spin",
        ])
        .args([
            "--seq-pct",
            "0",
            "--seed",
            "1",
            "--dry-run",
            "--write-trace",
        ])
        .arg(&again)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        std::fs::read(&again).unwrap(),
        std::fs::read(out.join("raw/trace.txt")).unwrap()
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn rounds_repeat_every_policy_and_pair_the_improvements() {
    let out = tmp("rounds");
    let report = tiny_experiment(&out, "60", &["--policies", "sf,af,tc", "--rounds", "3"]);
    let rows = report["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["steal-first", "admit-first", "tail-control"]);
    for r in rows {
        let rounds = r["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 3, "{r}");
        // The reported miss ratio is the per-target median of the rounds.
        for t in 0..5 {
            let mut v: Vec<f64> = rounds.iter().map(|x| x[t].as_f64().unwrap()).collect();
            v.sort_by(f64::total_cmp);
            assert_eq!(r["miss"][t].as_f64().unwrap(), v[1]);
        }
    }
    for f in [
        "steal-first-r1.csv",
        "admit-first-r2.csv",
        "tail-control-r2.csv",
    ] {
        assert!(out.join("raw").join(f).exists(), "{f} missing");
        // Raw records never land beside the summaries (git keeps those).
        assert!(!out.join(f).exists(), "{f} beside the summaries");
    }
    for f in ["table.md", "report.json", "plot.svg"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let runs = report["runs"].as_object().unwrap();
    assert_eq!(runs["admit-first r2"]["server_stats"]["policy"], "af");
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(
        table.contains("TC vs steal-first, paired by round"),
        "{table}"
    );
    assert!(table.contains("Every round:"), "{table}");
    assert!(table.contains("3 rounds"), "{table}");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_neighbour_runs_beside_every_run_and_is_gone_after_it() {
    let out = tmp("neighbour");
    // A busy loop that records its pid, so the test can check it was killed.
    let pids = out.join("pids");
    let cmd = format!("echo $$ >> {}; while :; do :; done", pids.display());
    let report = tiny_experiment(&out, "40", &["--policies", "sf,tc", "--neighbour", &cmd]);
    let runs = report["runs"].as_object().unwrap();
    assert!(runs.len() >= 2, "{runs:?}");
    for (name, v) in runs {
        let cores = v["neighbour_cores"].as_f64();
        assert!(cores.is_some_and(|c| c > 0.0), "{name}: {v}");
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("neighbour cores"), "{table}");
    // One neighbour per run, none left running.
    let started: Vec<String> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(started.len(), runs.len(), "{started:?}");
    for pid in started {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or (if the pid was reused already) not our busy loop.
        assert!(
            !stat.contains("(sh)") || stat.contains(" Z "),
            "{pid}: {stat}"
        );
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn load_sets_the_rate_from_the_measured_capacity() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_tailctl-server"))
        .parent()
        .unwrap();
    for bad in ["0", "1", "1.5", "-0.2", "half"] {
        let (code, err) = stderr_of(
            Command::new(bin("tailctl-experiment")).args([&format!("--load={bad}"), "--dry-run"]),
        );
        assert_ne!(code, 0, "--load {bad}");
        assert!(err.contains("is not a fraction in (0, 1)"), "{bad}: {err}");
    }
    let (code, err) =
        stderr_of(Command::new(bin("tailctl-experiment")).args(["--load", "0.5", "--rps", "40"]));
    assert_ne!(code, 0);
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, err) =
        stderr_of(Command::new(bin("tailctl-experiment")).args(["--load", "0.5", "--dry-run"]));
    assert_eq!(code, 1);
    assert!(err.contains("give --rps with --dry-run"), "{err}");
    // A real run: the rate follows from the probe and appears in the report.
    let out = tmp("load");
    let status = Command::new(bin("tailctl-experiment"))
        .args(["--kernel", "spin", "--requests", "30", "--load", "0.3"])
        .args(["--policies", "sf", "--percentiles", "90"])
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let config = report["config"].as_str().unwrap();
    assert!(config.contains("arrivals"), "{config}");
    assert!(
        !config.contains("poisson:150 "),
        "the preset's rate was kept: {config}"
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn the_paper_preset_is_the_papers_configuration() {
    let out = tmp("paper");
    let o = Command::new(bin("tailctl-experiment"))
        .args(["--preset", "paper", "--dry-run", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(
        line.contains("bing work, poisson:1200 arrivals, 16 workers, 100000 requests"),
        "{line}"
    );
    assert!(line.contains("kernel bs"), "{line}");
    let trace = std::fs::read_to_string(out.join("raw/trace.txt")).unwrap();
    assert_eq!(
        trace.lines().filter(|l| !l.starts_with('#')).count(),
        100_000
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_rejected_configuration_leaves_the_output_directory_alone() {
    let out = tmp("rejected");
    std::fs::create_dir_all(out.join("raw")).unwrap();
    std::fs::write(out.join("raw/trace.txt"), "earlier").unwrap();
    let (code, err) = stderr_of(
        Command::new(bin("tailctl-experiment"))
            .args(["--dry-run", "--rps", "100000", "--requests", "7", "--out"])
            .arg(&out),
    );
    assert_eq!(code, 1);
    assert!(err.contains("cannot keep up"), "{err}");
    assert_eq!(
        std::fs::read_to_string(out.join("raw/trace.txt")).unwrap(),
        "earlier"
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn output_paths_and_empty_traces_fail_before_the_run() {
    let dir = tmp("early");
    // No server listens: a bad --records path must fail before connecting.
    let (code, err) = stderr_of(Command::new(bin("tailctl-loadgen")).args([
        "--requests",
        "5",
        "--arrival",
        "poisson:100",
        "--no-progress",
        "--addr",
        "127.0.0.1:1",
        "--records",
        "/nonexistent/dir/rec.csv",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/dir/rec.csv"), "{err}");
    // A good path, a run that fails (nothing listens): the earlier file is kept, and no
    // empty or temporary file is left beside it.
    let rec = dir.join("rec.csv");
    std::fs::write(&rec, "earlier").unwrap();
    let (code, _) = stderr_of(
        Command::new(bin("tailctl-loadgen"))
            .args([
                "--requests",
                "5",
                "--arrival",
                "poisson:100",
                "--no-progress",
            ])
            .args(["--addr", "127.0.0.1:1", "--records"])
            .arg(&rec),
    );
    assert_eq!(code, 1);
    assert_eq!(std::fs::read_to_string(&rec).unwrap(), "earlier");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let trace = dir.join("empty.txt");
    std::fs::write(&trace, "# tailctl-trace v1\n# header only\n").unwrap();
    let (code, err) = stderr_of(
        Command::new(bin("tailctl-loadgen"))
            .arg("--trace")
            .arg(&trace)
            .args(["--addr", "127.0.0.1:1"]),
    );
    assert_eq!(code, 1);
    assert!(err.contains("trace has no requests"), "{err}");
    // An infinite calibration unit is not a calibration.
    let (code, err) = stderr_of(Command::new(bin("tailctl-server")).args([
        "--bs-unit-ns",
        "inf",
        "--spin-unit-ns",
        "1000",
        "--calibrate",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("finite"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_arguments_and_missing_servers_are_clear_errors() {
    let (code, err) = stderr_of(Command::new(bin("tailctl-loadgen")).args([
        "--requests",
        "5",
        "--arrival",
        "poisson:-3",
    ]));
    assert_ne!(code, 0);
    assert!(err.contains("rps must be a positive number"), "{err}");
    let (code, err) = stderr_of(Command::new(bin("tailctl-loadgen")).args(["--requests", "5"]));
    assert_eq!(code, 1);
    assert!(err.contains("--arrival is required"), "{err}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let (code, err) = stderr_of(Command::new(bin("tailctl-loadgen")).args([
        "--requests",
        "5",
        "--arrival",
        "poisson:100",
        "--no-progress",
        "--addr",
        &closed,
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("cannot connect to tailctl-server"), "{err}");
    let (code, err) = stderr_of(Command::new(bin("tailctl-server")).args([
        "--policy",
        "tc",
        "--addr",
        "127.0.0.1:0",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("--policy tc needs"), "{err}");
    let (code, err) = stderr_of(Command::new(bin("tailctl-experiment")).args([
        "--kernel-assisted",
        "--scx-tailctl",
        "/nonexistent/scx_tailctl",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/scx_tailctl not found"), "{err}");
    let (code, err) = stderr_of(Command::new(bin("tailctl-experiment")).args(["--rounds", "0"]));
    assert_eq!(code, 2);
    assert!(err.contains("--rounds"), "{err}");
    if !std::path::Path::new("/sys/kernel/sched_ext/state").exists() {
        // Any existing file passes the binary check; the kernel check must refuse.
        let (code, err) = stderr_of(Command::new(bin("tailctl-experiment")).args([
            "--kernel-assisted",
            "--scx-tailctl",
            bin("tailctl-server").to_str().unwrap(),
        ]));
        assert_eq!(code, 1);
        assert!(
            err.contains("no sched_ext") || err.contains("needs root"),
            "{err}"
        );
    }
}

/// The job-arrival driver without the scheduler: every job of the trace runs
/// as its own process, twice (two rounds), and the report pairs the rounds.
#[test]
fn the_job_driver_runs_every_job_as_a_process_and_reports_it() {
    let out = tmp("jobs");
    let status = Command::new(bin("tailctl-jobs"))
        .args([
            "run",
            "--no-scheduler",
            "--jobs",
            "5",
            "--rounds",
            "2",
            "--scale",
            "0.05",
        ])
        .args(["--seed", "3", "--no-progress", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["policy"], "default");
        let jobs = r["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 5);
        // Every job really ran: it used CPU and took time.
        assert!(
            jobs.iter()
                .all(|j| j["cpu_s"].as_f64().unwrap() > 0.0
                    && j["response_s"].as_f64().unwrap() > 0.0)
        );
        assert!(r["utilisation"].as_f64().unwrap() > 0.0);
    }
    for f in ["table.md", "plot.svg", "trace.json", "command.txt"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("| default | 2 |"), "{table}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_job_driver_rejects_bad_arguments_clearly() {
    let (rc, err) =
        stderr_of(Command::new(bin("tailctl-jobs")).args(["run", "--no-scheduler", "--load", "0"]));
    assert_ne!(rc, 0);
    assert!(err.contains("--load and --scale must be positive"), "{err}");
    let (rc, err) =
        stderr_of(Command::new(bin("tailctl-jobs")).args(["run", "--kinds", "fib,bogus"]));
    assert_ne!(rc, 0);
    assert!(err.contains("unknown job kind `bogus`"), "{err}");
    let (rc, err) = stderr_of(Command::new(bin("tailctl-jobs")).args([
        "run",
        "--no-scheduler",
        "--baseline",
        "equi",
    ]));
    assert_ne!(rc, 0);
    assert!(
        err.contains("--baseline equi is not one of the policies run"),
        "{err}"
    );
    // Sizes a kernel cannot run are refused, not a panic or a stack overflow.
    for (kind, size) in [("sort", "0"), ("heat", "0"), ("fib", "5000000000")] {
        let (rc, err) = stderr_of(
            Command::new(bin("tailctl-jobs")).args(["job", "--kind", kind, "--size", size]),
        );
        assert_eq!(rc, 1, "{kind} {size}: {err}");
        assert!(err.contains("size must be"), "{kind} {size}: {err}");
    }
}
