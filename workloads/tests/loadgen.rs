//! The load generator is open loop: its sends follow the schedule whatever the
//! server does, and latency is charged from the intended send time.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use tailctl_workloads::kernel::{Kernel, KernelSpec};
use tailctl_workloads::loadgen::{self, LoadgenOptions, Outcome};
use tailctl_workloads::protocol::{Request, Response};
use tailctl_workloads::trace::{Trace, TraceEntry};

fn trace(n: usize, gap: Duration) -> Trace {
    Trace {
        description: "test".into(),
        entries: (0..n)
            .map(|i| TraceEntry {
                send_at: gap * (i as u32 + 1),
                request: Request {
                    id: i as u64,
                    spec: KernelSpec {
                        kernel: Kernel::Spin,
                        work: Duration::from_micros(100),
                        seq_pct: 0,
                    },
                },
            })
            .collect(),
    }
}

fn opts() -> LoadgenOptions {
    LoadgenOptions {
        drain_timeout: Duration::from_secs(20),
        progress: false,
    }
}

/// A deliberately slow server: it answers nothing until it has read *every*
/// request, then answers them all in reverse order. A closed-loop generator
/// (send the next request after a response) would never get past request 0.
#[test]
fn a_withholding_server_cannot_slow_the_sender() {
    let n = 40;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut ids = Vec::new();
        let mut line = String::new();
        while ids.len() < n {
            line.clear();
            assert!(r.read_line(&mut line).unwrap() > 0, "client closed early");
            ids.push(Request::parse(&line).unwrap().id);
        }
        for &id in ids.iter().rev() {
            let resp = Response::Done {
                id,
                queue: Duration::from_nanos(1),
                run: Duration::from_nanos(2),
            };
            w.write_all(resp.encode().as_bytes()).unwrap();
        }
        ids
    });
    let t = trace(n, Duration::from_millis(2));
    let res = loadgen::run(&addr, &t, &opts()).unwrap();
    let ids = server.join().unwrap();
    assert_eq!(
        ids,
        (0..n as u64).collect::<Vec<_>>(),
        "requests arrive in schedule order"
    );
    assert!(res.sender_error.is_none());
    let last_intended = res.records.last().unwrap().intended;
    let mut prev = Duration::ZERO;
    for r in &res.records {
        assert!(matches!(r.outcome, Outcome::Done { .. }), "{r:?}");
        let sent = r.sent.expect("every request was sent");
        assert!(sent >= r.intended, "never sent early");
        assert!(sent >= prev, "sends in order");
        prev = sent;
        // Latency runs from the *intended* send: every response was held until
        // the last request was sent, so each latency covers that wait.
        let latency = r.latency().unwrap();
        assert!(latency >= last_intended - r.intended, "{r:?}");
        assert_eq!(r.latency(), r.received.map(|x| x - r.intended));
    }
}

#[test]
fn unreachable_server_is_a_clear_error() {
    // Bind then drop: the port is (almost certainly) closed now.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let e = loadgen::run(&addr, &trace(1, Duration::from_millis(1)), &opts()).unwrap_err();
    assert!(
        format!("{e:#}").contains("cannot connect to tailctl-server"),
        "{e:#}"
    );
    let e = loadgen::run("127.0.0.1", &trace(1, Duration::from_millis(1)), &opts()).unwrap_err();
    assert!(
        format!("{e:#}").contains("cannot resolve server address"),
        "{e:#}"
    );
}

/// A server that hangs up after a few requests: the run ends (no hang) with
/// the unanswered requests lost, and server error lines are reported.
#[test]
fn a_server_that_hangs_up_leaves_requests_lost() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        for _ in 0..3 {
            line.clear();
            r.read_line(&mut line).unwrap();
        }
        w.write_all(b"FAIL 0 request panicked: test\nERR something odd\nOK 1 5 6\n")
            .unwrap();
        // Dropping both halves closes the connection.
    });
    let t = trace(20, Duration::from_millis(2));
    let res = loadgen::run(
        &addr,
        &t,
        &LoadgenOptions {
            drain_timeout: Duration::from_secs(2),
            progress: false,
        },
    )
    .unwrap();
    server.join().unwrap();
    assert_eq!(
        res.records[0].outcome,
        Outcome::Failed("request panicked: test".into())
    );
    assert!(matches!(res.records[1].outcome, Outcome::Done { .. }));
    assert!(res.records[2..].iter().all(|r| r.outcome == Outcome::Lost));
    assert_eq!(res.malformed, vec!["something odd".to_string()]);
    assert_eq!(res.errors(), 2);
}
