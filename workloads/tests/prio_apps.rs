//! The priority applications end to end, small: a `tailctl-kv` server with
//! compaction and a `tailctl-jobserver` server, each on a thread of this process,
//! driven over TCP by their load generators. Asserts counts (every request
//! answered, the requests ran at their levels), never times.

use std::net::TcpListener;
use tailctl_workloads::{jobserver as jobs, kv};

#[test]
fn kv_with_priorities_answers_everything_beside_compaction() {
    kv_answers_everything("prompt");
}

/// The same under the adaptive quantum-based scheduler: nothing stranded,
/// and the allocator ran.
#[test]
fn kv_under_adaptive_answers_everything_beside_compaction() {
    let pool = kv_answers_everything("adaptive:500us");
    assert!(pool["reallocations"].as_u64().unwrap() >= 1, "{pool}");
}

fn kv_answers_everything(mode: &str) -> serde_json::Value {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let opts = kv::ServerOptions {
        workers: 2,
        priorities: true,
        policy: "sf".into(),
        priority_mode: mode.into(),
        keys: 2_000,
        value_bytes: 64,
        compaction: true,
        passes: 1,
    };
    // The server runs until the test process ends.
    std::thread::spawn(move || kv::serve(l, &opts));
    let lo = kv::LoadOptions {
        rps: 500.0,
        requests: 400,
        set_fraction: 0.2,
        keys: 2_000,
        seed: 3,
        warmup: 50,
    };
    let (report, records) = kv::load(&addr, &lo).unwrap();
    assert_eq!(records.len(), 400);
    assert_eq!(report.all.n, 350);
    assert_eq!(report.all.lost, 0, "{report:?}");
    let server = report.server.expect("STATS answered");
    assert!(server.compactions >= 1, "{server:?}");
    let pool = &server.pool;
    // 400 GET/SET plus the compactions, all above the default level.
    assert!(
        pool["submitted_prioritized"].as_u64().unwrap() >= 400,
        "{pool}"
    );
    // The runtime measured the workers' searches.
    assert!(server.runtime_search_cpu_ms > 0.0, "{server:?}");
    pool.clone()
}

#[test]
fn job_server_runs_every_kind_at_its_level() {
    job_server_answers_every_kind("prompt");
}

#[test]
fn job_server_under_adaptive_answers_every_kind() {
    let server = job_server_answers_every_kind("adaptive:500us");
    assert!(server["reallocations"].as_u64().unwrap() >= 1, "{server}");
}

fn job_server_answers_every_kind(mode: &str) -> serde_json::Value {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let opts = jobs::ServerOptions {
        app: "jobs".into(),
        workers: 2,
        priorities: true,
        policy: "af".into(),
        priority_mode: mode.into(),
        sizes: jobs::Sizes {
            mm: 24,
            fib: 16,
            sort: 20_000,
            sw: 200,
        },
    };
    std::thread::spawn(move || jobs::serve(l, &opts));
    let lo = jobs::LoadOptions {
        app: "jobs".into(),
        rps: 100.0,
        requests: 80,
        seed: 5,
        warmup: 0,
    };
    let (report, records) = jobs::load(&addr, &lo).unwrap();
    assert_eq!(records.len(), 80);
    assert_eq!(report.kinds.len(), 4);
    let answered: usize = report.kinds.iter().map(|(_, s)| s.n - s.lost).sum();
    assert_eq!(answered, 80, "{report:?}");
    assert!(report.server["level_switches"].as_u64().unwrap() >= 1);
    assert!(report.server["search_cpu_ms"].as_f64().is_some());
    report.server
}

#[test]
fn email_server_answers_every_kind() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let opts = jobs::ServerOptions {
        app: "email".into(),
        workers: 2,
        priorities: true,
        policy: "sf".into(),
        priority_mode: "prompt".into(),
        sizes: jobs::Sizes::default(),
    };
    std::thread::spawn(move || jobs::serve(l, &opts));
    let lo = jobs::LoadOptions {
        app: "email".into(),
        rps: 100.0,
        requests: 60,
        seed: 9,
        warmup: 0,
    };
    let (report, _) = jobs::load(&addr, &lo).unwrap();
    let names: Vec<&str> = report.kinds.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["send", "sortmail", "compress"]);
    let answered: usize = report.kinds.iter().map(|(_, s)| s.n - s.lost).sum();
    assert_eq!(answered, 60, "{report:?}");
}
