//! Helpers shared by the integration tests (each test file includes this
//! module; not every file uses every helper).
#![allow(dead_code)]

use std::time::Duration;
use tailctl_rt::{join, threshold::ThresholdTable, Policy, Pool};

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
