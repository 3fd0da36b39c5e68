//! Wire protocol: every message round-trips, and malformed input is rejected
//! with a message instead of a panic.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tailctl_workloads::kernel::{Kernel, KernelSpec};
use tailctl_workloads::protocol::{Request, Response, MAX_WORK};

#[test]
fn requests_round_trip() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for _ in 0..1000 {
        let r = Request {
            id: rng.gen(),
            spec: KernelSpec {
                kernel: if rng.gen() {
                    Kernel::Spin
                } else {
                    Kernel::BlackScholes
                },
                work: Duration::from_micros(rng.gen_range(1..=MAX_WORK.as_micros() as u64)),
                seq_pct: rng.gen_range(0..=100),
            },
        };
        let line = r.encode();
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        assert_eq!(Request::parse(&line).unwrap(), r);
    }
}

#[test]
fn responses_round_trip() {
    let cases = [
        Response::Done {
            id: 0,
            queue: Duration::ZERO,
            run: Duration::from_nanos(u64::MAX),
        },
        Response::Done {
            id: u64::MAX,
            queue: Duration::from_nanos(123),
            run: Duration::from_millis(5),
        },
        Response::Failed {
            id: 9,
            message: "request panicked: boom".into(),
        },
        Response::Malformed {
            message: "`id` is not a valid number: `x`".into(),
        },
    ];
    for r in cases {
        assert_eq!(Response::parse(&r.encode()).unwrap(), r);
    }
    // Messages with line breaks are flattened so framing survives.
    let r = Response::Failed {
        id: 1,
        message: "two\nlines".into(),
    };
    assert_eq!(r.encode(), "FAIL 1 two lines\n");
}

#[test]
fn malformed_requests_are_rejected_with_a_reason() {
    let bad = [
        ("", "empty"),
        ("GET / HTTP/1.1", "unknown message type"),
        ("REQ", "missing field `id`"),
        ("REQ 1", "missing field `kernel`"),
        ("REQ 1 bs", "missing field `work_us`"),
        ("REQ 1 bs 100", "missing field `seq_pct`"),
        ("REQ x bs 100 0", "`id` is not a valid number"),
        ("REQ -1 bs 100 0", "`id` is not a valid number"),
        ("REQ 1 fft 100 0", "unknown kernel"),
        ("REQ 1 bs 0 0", "must be > 0"),
        ("REQ 1 bs 100000000000 0", "exceeds the limit"),
        ("REQ 1 bs 99999999999999999999999 0", "not a valid number"),
        ("REQ 1 bs 100 101", "exceeds 100"),
        ("REQ 1 bs 100 300", "not a valid number"),
        ("REQ 1 bs 100 0 extra", "too many fields"),
    ];
    for (line, why) in bad {
        let e = Request::parse(line).expect_err(line);
        assert!(
            e.to_string().contains(why),
            "`{line}`: got `{e}`, wanted `{why}`"
        );
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let alphabet = b"REQOK FAILbspin0123456789 -\t";
    for _ in 0..5000 {
        let len = rng.gen_range(0..40);
        let s: String = (0..len)
            .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
            .collect();
        let _ = Request::parse(&s);
        let _ = Response::parse(&s);
    }
}
