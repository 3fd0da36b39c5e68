//! `tailctl sim` end to end: determinism, the SF/AF/TC ordering on a heavy
//! 16-core configuration, trace files, the mean-field mode, and CLI errors.
//! Sizes are small so the whole file runs in well under a minute in debug.

use std::process::Command;

use serde_json::Value;

fn tailctl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tailctl"))
        .args(args)
        .output()
        .expect("run tailctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Value {
    let (ok, out, err) = tailctl(args);
    assert!(ok, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn miss(v: &Value, policy: &str) -> Vec<f64> {
    v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == policy)
        .unwrap_or_else(|| panic!("no {policy}"))["miss_ratio"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn same_seed_same_result() {
    let run = |seed: &str| {
        let mut v = json(&[
            "sim",
            "compare",
            "--cores",
            "8",
            "--rps",
            "600",
            "--requests",
            "3000",
            "--seed",
            seed,
            "--threads",
            "1",
            "--json",
            "--policies",
            "sf,tc",
            "--percentiles",
            "97.5,99.5",
        ]);
        v["settings"].as_object_mut().unwrap().remove("wall_time");
        v
    };
    let a = run("5");
    assert_eq!(a, run("5"));
    assert_ne!(a["targets_ms"], run("6")["targets_ms"]);
    // Targets are SF's own percentiles, so SF misses exactly the tail fraction.
    let sf = miss(&a, "sf");
    let want = [0.025, 0.005];
    for (m, w) in sf.iter().zip(want) {
        assert!((m - w).abs() < 1.0 / 3000.0 + 1e-12, "{sf:?}");
    }
}

/// The paper's heavy setting (the defaults), shortened to 12,000 requests,
/// with the target at steal-first's 99th percentile.
const HEAVY_SHORT: [&str; 11] = [
    "sim",
    "compare",
    "--requests",
    "12000",
    "--percentiles",
    "99",
    "--threads",
    "2",
    "--json",
    "--seed",
    "1",
];

#[test]
fn tail_control_beats_steal_first_under_heavy_load() {
    // The paper's heavy setting, shortened: 16 cores, log-normal 10/13 ms,
    // 1200 rps; the target at SF's 99th percentile. Margins were checked on
    // several seeds (SF misses 1%: lazy TC 0.71–0.87%, clairvoyant ≤ 0.38%,
    // eager TC ≤ 0.55%, AF 1.0–1.7%).
    let base = HEAVY_SHORT;
    let v = json(&[&base[..], &["--policies", "sf,af,tc,tc-clairvoyant"]].concat());
    let (sf, af, tc, tcc) = (
        miss(&v, "sf")[0],
        miss(&v, "af")[0],
        miss(&v, "tc")[0],
        miss(&v, "tc-clairvoyant")[0],
    );
    // Lazy (paper) serialization beats SF; the clairvoyant bound beats both
    // baselines by far and TC too.
    assert!(tc < 0.95 * sf, "tc {tc} sf {sf}");
    assert!(tcc < 0.5 * sf && tcc < 0.5 * af && tcc < tc, "tcc {tcc}");
    // Eager (kernel-enforced) serialization: a clear win over both.
    let v = json(&[&base[..], &["--policies", "sf,tc", "--eager"]].concat());
    let (sf_e, tc_e) = (miss(&v, "sf")[0], miss(&v, "tc")[0]);
    assert_eq!(sf_e, sf, "SF does not depend on --eager");
    assert!(tc_e < 0.7 * sf && tc_e < af && tc_e < tc, "eager tc {tc_e}");
}

#[test]
fn two_loops_in_tbb_semantics_serialize_for_real() {
    // The paper's heavy setting with PARSEC-blackscholes-like requests (two
    // loops) under TBB's semantics (root-blocking joins, adaptive splitting).
    // Seeds 1-4 at this size: SF misses 1%, TC 0.44-0.83%, AF 1.03-2.33%.
    let v = json(
        &[
            &HEAVY_SHORT[..],
            &[
                "--policies",
                "sf,af,tc",
                "--loops",
                "2",
                "--joins",
                "root",
                "--split",
                "adaptive",
            ],
        ]
        .concat(),
    );
    let (sf, af, tc) = (miss(&v, "sf")[0], miss(&v, "af")[0], miss(&v, "tc")[0]);
    assert!(tc < 0.9 * sf && tc < af, "tc {tc} sf {sf} af {af}");
    assert_eq!(v["settings"]["joins"], "root");
    assert_eq!(v["settings"]["split"], "adaptive");
}

#[test]
fn trace_file_and_plot() {
    let dir = std::env::temp_dir().join(format!("tailctl-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.txt");
    // Two workers; requests of 4 ms every 5 ms, one 40 ms request in the middle.
    let mut t = String::from("# tailctl-trace v1\n# test\n");
    for i in 0..200u64 {
        let work = if i == 100 { 40_000 } else { 4_000 };
        t.push_str(&format!("{i} {} bs {work} 0\n", i * 5_000_000));
    }
    std::fs::write(&trace, t).unwrap();
    let plot = dir.join("plot.svg");
    let v = json(&[
        "sim",
        "compare",
        "--trace",
        trace.to_str().unwrap(),
        "--cores",
        "2",
        "--steal-cost",
        "0us",
        "--targets",
        "3ms,30ms",
        "--policies",
        "sf,af",
        "--plot",
        plot.to_str().unwrap(),
        "--json",
    ]);
    // Alone, a 4 ms request takes 2 ms on two workers: only the long request
    // and the ones queued behind it miss 3 ms; nothing misses 30 ms but the
    // 40 ms request (20 ms on two workers, so it meets 30 ms too).
    let sf = miss(&v, "sf");
    assert!(sf[0] > 0.0 && sf[0] < 0.05, "{sf:?}");
    assert_eq!(sf[1], 0.0);
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));

    std::fs::write(&trace, "# tailctl-trace v1\n0 0 bs 100 0\n1 5 bs x 0\n").unwrap();
    let (ok, _, err) = tailctl(&["sim", "compare", "--trace", trace.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("line 3") && err.contains("work"), "{err}");
    std::fs::write(&trace, "# tailctl-trace v1\n# nothing\n").unwrap();
    let (ok, _, err) = tailctl(&["sim", "compare", "--trace", trace.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("trace has no requests"), "{err}");
    std::fs::write(&trace, "0 0 bs 100 0\n").unwrap();
    let (ok, _, err) = tailctl(&["sim", "compare", "--trace", trace.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("tailctl-trace v1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn capacity_search_orders_policies() {
    let v = json(&[
        "sim",
        "capacity",
        "--cores",
        "8",
        "--requests",
        "4000",
        "--percentile",
        "99",
        "--target",
        "30ms",
        "--policies",
        "sf,tc-clairvoyant",
        "--resolution",
        "20",
        "--threads",
        "2",
        "--json",
    ]);
    let cap = |p: &str| {
        v["capacity"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["policy"] == p)
            .unwrap()["max_rps"]
            .as_f64()
            .unwrap()
    };
    let (sf, tcc) = (cap("sf"), cap("tc-clairvoyant"));
    assert!(sf > 300.0 && sf < 800.0, "{sf}");
    assert!(tcc >= sf, "{tcc} < {sf}");
}

#[test]
fn meanfield_matches_table3_at_moderate_n() {
    // N = 500 and a short horizon: the paper reports < 0.5% finite-N error at
    // N = 500; allow 2% for the short run.
    for (strategy, rho, r, paper) in [
        ("child", "0.75", "10", 2.7555),
        ("parent", "0.85", "1", 4.6779),
    ] {
        let v = json(&[
            "sim",
            "meanfield",
            "--servers",
            "500",
            "--rho",
            rho,
            "--probe-rate",
            r,
            "--strategy",
            strategy,
            "--horizon",
            "400",
            "--warmup",
            "50",
            "--json",
        ]);
        let t = v["mean_response"].as_f64().unwrap();
        assert!(
            (t / paper - 1.0).abs() < 0.02,
            "{strategy} {rho} {r}: {t} vs {paper}"
        );
    }
}

#[test]
fn malformed_input_names_the_problem() {
    let cases: [(&[&str], &str); 22] = [
        (
            &["sim", "compare", "--policies", "sf,fifo"],
            "unknown policy `fifo`",
        ),
        (&["sim", "compare", "--chunk", "auto:0"], "auto:K"),
        (&["sim", "compare", "--chunk", "10"], "unit"),
        (&["sim", "compare", "--arrivals", "uniform"], "poisson"),
        (
            &["sim", "compare", "--requests", "10", "--warmup", "10"],
            "warmup",
        ),
        (&["sim", "compare", "--percentiles", "101"], "percentile"),
        (&["sim", "meanfield", "--strategy", "sibling"], "child"),
        (&["sim", "meanfield", "--rho", "1.2"], "load"),
        (&["sim", "compare", "--joins", "blocking"], "random"),
        (&["sim", "compare", "--joins", "sometimes"], "continuation"),
        (&["sim", "compare", "--joins", "root"], "random"),
        (&["sim", "compare", "--split", "halves"], "adaptive"),
        (
            &["sim", "compare", "--admit-in-serialized-joins"],
            "needs --joins blocking",
        ),
        (&["sim", "compare", "--work-scale", "0"], "work-scale"),
        // Non-finite numbers: a bogus capacity, or a run that never ends.
        (
            &["sim", "capacity", "--target", "30ms", "--resolution", "nan"],
            "--resolution must be a finite number",
        ),
        (
            &["sim", "capacity", "--target", "30ms", "--rps-max", "inf"],
            "--rps-max must be a finite number",
        ),
        (&["sim", "meanfield", "--horizon", "inf"], "horizon finite"),
        (
            &["sim", "multiprog", "--quantum-us", "18446744073709551615"],
            "--quantum-us",
        ),
        // Output paths fail before the run, not after it.
        (
            &["sim", "compare", "--plot", "/nonexistent/dir/p.svg"],
            "/nonexistent/dir/p.svg",
        ),
        (
            &["sim", "multiprog", "--trace", "/nonexistent/dir/t.csv"],
            "/nonexistent/dir/t.csv",
        ),
        (
            &["sim", "multiprog", "--plot", "/nonexistent/dir/p.svg"],
            "/nonexistent/dir/p.svg",
        ),
        (
            &["sim", "compare", "--work", "file:/nonexistent/w.csv"],
            "no such file",
        ),
    ];
    for (args, needle) in cases {
        let (ok, _, err) = tailctl(args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
    }
}

#[test]
fn multiprog_runs_every_policy_deterministically_and_shows_the_oscillation() {
    let run = |seed: &str| {
        let mut v = json(&[
            "sim",
            "multiprog",
            "--cores",
            "8",
            "--jobs",
            "8",
            "--load",
            "0.7",
            "--mix",
            "loop:3:200,loop:12:100,heat:8",
            "--runs",
            "2",
            "--seed",
            seed,
            "--threads",
            "2",
            "--json",
        ]);
        v["settings"].as_object_mut().unwrap().remove("wall_time");
        v
    };
    let a = run("4");
    assert_eq!(a, run("4"), "same seed, same report");
    assert_ne!(a["runs"], run("5")["runs"]);
    let summary = a["summary"].as_array().unwrap();
    let policies: Vec<&str> = summary
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(policies, ["equi", "deq", "asteal", "drep"]);
    for r in summary {
        let u = r["utilisation"]["mean"].as_f64().unwrap();
        assert!(u > 0.1 && u <= 1.0, "{r}");
        let (lo, hi) = (
            r["mean_response_s"]["min"].as_f64().unwrap(),
            r["mean_response_s"]["max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= hi, "{r}");
    }
    assert_eq!(a["runs"].as_array().unwrap().len(), 8);
    let over: Vec<&str> = a["relative"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["over"].as_str().unwrap())
        .collect();
    assert_eq!(over, ["equi", "asteal", "drep"]);

    // SAWS's Fig. 4: one job of parallelism 10 on 16 cores. Measured exactly, A-Steal doubles
    // straight to 16; on the sampled u (the default, as SAWS's runtime fed it) its start-up
    // wobbles first; either way it then swings 8 <-> 16.
    for (measure, start) in [
        ("exact", ": 1 2 4 8 16 8 16 8 16 8 16"),
        ("sampled", ": 1 2 "),
    ] {
        let (ok, out, err) = tailctl(&[
            "sim",
            "multiprog",
            "--cores",
            "16",
            "--jobs",
            "1",
            "--mix",
            "loop:10:300",
            "--policy",
            "asteal,deq",
            "--measure",
            measure,
            "--show-allot",
            "--quiet",
        ]);
        assert!(ok, "{err}");
        let line = out
            .lines()
            .find(|l| l.contains("quantum, asteal"))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains(start), "{measure}: {line}");
        assert!(line.contains(" 16 8 16 8 16 8 16 "), "{measure}: {line}");
    }

    for (args, needle) in [
        (
            &["sim", "multiprog", "--policy", "off"][..],
            "not simulated",
        ),
        (
            &["sim", "multiprog", "--policy", "saws"][..],
            "unknown allotment policy",
        ),
        (
            &["sim", "multiprog", "--mix", "fft"][..],
            "unknown benchmark",
        ),
        (
            &["sim", "multiprog", "--jobs", "4", "--warmup", "4"][..],
            "warmup",
        ),
        (&["sim", "multiprog", "--load", "0"][..], "load"),
        (&["sim", "multiprog", "--measure", "guess"][..], "sampled"),
        (&["sim", "multiprog", "--alpha", "2"][..], "paper"),
        (&["sim", "multiprog", "--alpha", "x"][..], "paper"),
        (&["sim", "multiprog", "--u-estimator", "x"][..], "uniform"),
        (&["sim", "multiprog", "--asteal-u", "x"][..], "core-time"),
    ] {
        let (ok, _, err) = tailctl(args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
    }
}
