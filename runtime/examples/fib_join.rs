//! `fib(N)` on `join` in a one-worker pool, `R` times: the `join` fast path
//! and nothing else, for instruction counts under cachegrind (stable on a
//! loaded machine, unlike times) and min/median times.
//!
//! ```sh
//! cargo build --release -p tailctl-rt --example fib_join
//! N=25 R=1 valgrind --tool=cachegrind --cache-sim=no target/release/examples/fib_join
//! N=27 R=30 target/release/examples/fib_join
//! ```

use std::time::Instant;
use tailctl_rt::{join, Pool};

fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (n, reps) = (env("N", 27), env("R", 30).max(1));
    let pool = Pool::builder().workers(1).build().unwrap();
    let mut ms: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(pool.submit(move || fib(n)).wait().unwrap());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    println!(
        "fib({n}) x{reps}: min {:.2} ms, median {:.2} ms",
        ms[0],
        ms[ms.len() / 2]
    );
}
