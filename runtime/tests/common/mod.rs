//! Helpers shared by the integration tests (each test file includes this
//! module; not every file uses every helper).
#![allow(dead_code)]

use tailctl_rt::join;

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
