//! Helpers shared by the integration tests (each test file includes this
//! module; not every file uses every helper).
#![allow(dead_code)]

use std::time::Duration;
use tailctl_rt::{join, threshold::ThresholdTable, Policy, Pool};

/// Polls `cond` (yielding) until it holds; panics, naming `what`, after a
/// generous bound instead of hanging the suite (a bound on a hang, not a
/// timing assertion).
pub fn eventually(what: &str, cond: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{what} never happened"
        );
        std::thread::yield_now();
    }
}

/// `full` natively, `miri` under Miri (which runs the tests ~1000x slower).
pub fn scale(full: usize, miri: usize) -> usize {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

/// Doubly recursive Fibonacci on `join`: many small tasks to steal.
pub fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = join(|| fib(n - 1), || fib(n - 2));
    a + b
}

/// A pool of `workers` with `policy`; tail-control serializes anything that
/// ran 1 ms at 2+ active requests.
pub fn pool(policy: Policy, workers: usize) -> Pool {
    let mut b = Pool::builder()
        .workers(workers)
        .policy(policy)
        .spin_rounds(8);
    if policy == Policy::TailControl {
        b = b.thresholds(ThresholdTable::from_thresholds(vec![
            None,
            Some(Duration::from_millis(1)),
        ]));
    }
    b.build().unwrap()
}

/// On `pool` (one worker: nobody else could run it), a level-6 request
/// submits a normal-level request and waits for it: the waiter must get it
/// run (in prompt mode by lowering its floor, in adaptive mode by the
/// allocator moving the worker down) instead of deadlocking. Panics after
/// `limit` without an answer, leaking the pool (dropping it would wait for
/// the stuck request forever).
pub fn assert_waiting_on_a_lower_request_completes(pool: Pool, limit: Duration) {
    let handle = pool.handle();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = pool.submit_with_priority(tailctl_rt::Priority::new(6).unwrap(), move || {
        let low = handle.submit(|| 41);
        low.wait().map(|v| v + 1)
    });
    std::thread::spawn(move || tx.send(h.wait()));
    let Ok(got) = rx.recv_timeout(limit) else {
        std::mem::forget(pool);
        panic!("the waiting request deadlocked");
    };
    assert_eq!(got, Ok(Ok(42)));
}
