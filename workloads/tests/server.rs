//! The service: answers malformed lines clearly, reports timings, and keeps
//! serving when clients vanish mid-request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailctl_rt::threshold::ThresholdTable;
use tailctl_rt::Policy;
use tailctl_workloads::kernel::Calibration;
use tailctl_workloads::protocol::Response;
use tailctl_workloads::server::{rt::RtExecutor, Server, ServerStats};

/// A fixed calibration (no measuring in tests): a spin unit "costs" 100 µs,
/// so a 1 ms request is 10 units.
const CAL: Calibration = Calibration {
    bs_unit_ns: 100_000.0,
    spin_unit_ns: 100_000.0,
};

fn start(policy: Policy) -> (SocketAddr, Arc<ServerStats>) {
    // For tail-control, a table that serializes requests over 1 ms at q ≥ 2.
    let table = (policy == Policy::TailControl)
        .then(|| ThresholdTable::from_thresholds(vec![None, Some(Duration::from_millis(1))]));
    let exec = RtExecutor::new(2, policy, table, None).unwrap();
    let server = Server::bind("127.0.0.1:0", Arc::new(exec), CAL).unwrap();
    let stats = server.stats();
    (server.spawn().unwrap(), stats)
}

fn connect(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn response(r: &mut BufReader<TcpStream>) -> Response {
    let mut line = String::new();
    assert!(
        r.read_line(&mut line).unwrap() > 0,
        "server closed the connection"
    );
    Response::parse(&line).unwrap()
}

#[test]
fn malformed_lines_get_a_clear_error_and_the_connection_stays_usable() {
    let (addr, stats) = start(Policy::StealFirst);
    let (mut s, mut r) = connect(addr);
    s.write_all(b"HELLO\nREQ 1 fft 100 0\nREQ 2 spin 0 0\n\xff\xfe\n")
        .unwrap();
    let expect = [
        "unknown message type",
        "unknown kernel",
        "must be > 0",
        "not UTF-8",
    ];
    for want in expect {
        match response(&mut r) {
            Response::Malformed { message } => assert!(message.contains(want), "{message}"),
            other => panic!("expected ERR, got {other:?}"),
        }
    }
    s.write_all(b"REQ 7 spin 1000 0\nREQ 8 bs 200 50\n")
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        match response(&mut r) {
            Response::Done { id, run, .. } => {
                assert!(run > Duration::ZERO);
                ids.push(id);
            }
            other => panic!("expected OK, got {other:?}"),
        }
    }
    ids.sort();
    assert_eq!(ids, vec![7, 8]);
    assert_eq!(stats.malformed.load(Ordering::Relaxed), 4);
    // The pool's counters on request.
    s.write_all(b"STATS\n").unwrap();
    match response(&mut r) {
        Response::Stats(json) => {
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v["policy"], "sf");
            assert_eq!(v["submitted"], 2); // "completed" may lag: a request counts once its closure returned
        }
        other => panic!("expected STATS, got {other:?}"),
    }
}

#[test]
fn an_overlong_line_is_refused_and_the_connection_closed() {
    let (addr, _) = start(Policy::AdmitFirst);
    let (mut s, mut r) = connect(addr);
    s.write_all(&[b'A'; 1000]).unwrap();
    s.write_all(b"\n").unwrap();
    match response(&mut r) {
        Response::Malformed { message } => assert!(message.contains("longer than"), "{message}"),
        other => panic!("expected ERR, got {other:?}"),
    }
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).unwrap_or(0), 0, "then EOF");
}

#[test]
fn the_server_survives_clients_that_vanish() {
    let (addr, stats) = start(Policy::TailControl);
    // 1. Sends a burst of requests and disappears without reading a byte.
    {
        let (mut s, _r) = connect(addr);
        for i in 0..30 {
            s.write_all(format!("REQ {i} spin 2000 0\n").as_bytes())
                .unwrap();
        }
    }
    // 2. Disappears in the middle of a line.
    {
        let (mut s, _r) = connect(addr);
        s.write_all(b"REQ 1 sp").unwrap();
    }
    // 3. Connects and leaves at once.
    drop(connect(addr));
    // 4. Sends requests, then shuts the socket down both ways at once.
    {
        let (mut s, _r) = connect(addr);
        s.write_all(b"REQ 1 bs 500 0\nREQ 2 spin 500 10\n").unwrap();
        s.shutdown(std::net::Shutdown::Both).unwrap();
    }
    // All requests that were read still run to completion on the pool. (The
    // server normally reads all 30 of client 1's; a reset racing the reads may
    // drop some, which is not what this test is about.)
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let settle = Instant::now() + Duration::from_secs(5);
    while load(&stats.submitted) < 30 && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while load(&stats.completed) < load(&stats.submitted) {
        assert!(
            Instant::now() < deadline,
            "requests of vanished clients never finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(load(&stats.completed) >= 1);
    // ...and a new client is served normally.
    let (mut s, mut r) = connect(addr);
    for i in 100..105 {
        s.write_all(format!("REQ {i} spin 500 0\n").as_bytes())
            .unwrap();
    }
    let mut ids: Vec<u64> = (0..5)
        .map(|_| match response(&mut r) {
            Response::Done { id, .. } => id,
            other => panic!("expected OK, got {other:?}"),
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (100..105).collect::<Vec<_>>());
    assert!(stats.connections.load(Ordering::Relaxed) >= 5);
}
