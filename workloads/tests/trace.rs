//! Seeded traces replay identically, through memory and through a file.

use tailctl_workloads::arrival::ArrivalProcess;
use tailctl_workloads::distributions::bing;
use tailctl_workloads::kernel::Kernel;
use tailctl_workloads::trace::{Trace, TraceConfig};

fn cfg(seed: u64, arrival: ArrivalProcess) -> TraceConfig {
    TraceConfig {
        requests: 2000,
        arrival,
        kernel: Kernel::BlackScholes,
        seq_pct: 10,
        seed,
    }
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    let p = ArrivalProcess::Poisson { rps: 160.0 };
    let a = Trace::generate(&cfg(42, p), &bing(), "bing").unwrap();
    let b = Trace::generate(&cfg(42, p), &bing(), "bing").unwrap();
    let c = Trace::generate(&cfg(43, p), &bing(), "bing").unwrap();
    assert_eq!(a, b);
    assert_ne!(a.entries, c.entries);
    // The arrival and work streams are independent: a different distribution
    // keeps the arrival times.
    let f = Trace::generate(
        &cfg(42, p),
        &tailctl_workloads::distributions::finance(),
        "finance",
    )
    .unwrap();
    assert!(a
        .entries
        .iter()
        .zip(&f.entries)
        .all(|(x, y)| x.send_at == y.send_at));
    assert!(a
        .entries
        .iter()
        .zip(&f.entries)
        .any(|(x, y)| x.request != y.request));
}

#[test]
fn file_round_trip_is_exact() {
    let lognormal = ArrivalProcess::LogNormal {
        rps: 160.0,
        sd_secs: 0.004,
    };
    let t = Trace::generate(&cfg(7, lognormal), &bing(), "bing").unwrap();
    let dir = std::env::temp_dir().join(format!("tailctl-wl-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.txt");
    t.save(&p).unwrap();
    let back = Trace::load(&p).unwrap();
    assert_eq!(back, t);
    assert!(back.description.contains("seed=7"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn arrivals_have_the_requested_rate_and_sd() {
    let n = 20_000;
    let lognormal = ArrivalProcess::LogNormal {
        rps: 1000.0,
        sd_secs: 0.002,
    };
    for p in [ArrivalProcess::Poisson { rps: 1000.0 }, lognormal] {
        let t = Trace::generate(
            &TraceConfig {
                requests: n,
                ..cfg(1, p)
            },
            &bing(),
            "bing",
        )
        .unwrap();
        let gaps: Vec<f64> = t
            .entries
            .windows(2)
            .map(|w| (w[1].send_at - w[0].send_at).as_secs_f64())
            .collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((mean - 0.001).abs() < 0.00005, "{p}: mean gap {mean}");
        let want_sd = match p {
            ArrivalProcess::Poisson { .. } => 0.001, // exponential: sd = mean
            ArrivalProcess::LogNormal { sd_secs, .. } => sd_secs,
        };
        assert!((sd / want_sd - 1.0).abs() < 0.1, "{p}: sd {sd}");
    }
}

#[test]
fn bad_trace_files_are_clear_errors() {
    let e = Trace::parse("hello\n").unwrap_err();
    assert!(e.to_string().contains("not a tailctl trace"));
    let e = Trace::parse("# tailctl-trace v1\n0 100 bs 10\n").unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    let e = Trace::parse("# tailctl-trace v1\n0 100 bs 10 0\n1 50 bs 10 0\n").unwrap_err();
    assert!(e.to_string().contains("must not decrease"), "{e}");
    let e = format!(
        "{:#}",
        Trace::parse("# tailctl-trace v1\n0 100 fft 10 0\n").unwrap_err()
    );
    assert!(e.contains("unknown kernel"), "{e}");
}

#[test]
fn empty_traces_are_rejected_and_a_bom_is_ignored() {
    // A header-only trace would give a summary of nothing (p99 0).
    let e = Trace::parse("# tailctl-trace v1\n# seed=1\n").unwrap_err();
    assert!(e.to_string().contains("trace has no requests"), "{e}");
    // Editors that write a UTF-8 byte-order mark must not make it "not a trace".
    let t = Trace::parse("\u{feff}# tailctl-trace v1\n0 100 bs 10 0\n").unwrap();
    assert_eq!(t.entries.len(), 1);
}

#[test]
fn save_replaces_the_file_whole() {
    let dir = std::env::temp_dir().join(format!("tailctl-wl-trace-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.txt");
    std::fs::write(&p, "old").unwrap();
    let t = Trace::parse("# tailctl-trace v1\n0 100 bs 10 0\n").unwrap();
    t.save(&p).unwrap();
    assert_eq!(Trace::load(&p).unwrap(), t);
    // No temporary file is left beside it.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let e = format!("{:#}", t.save(&dir.join("nodir/t.txt")).unwrap_err());
    assert!(e.contains("nodir/t.txt"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
