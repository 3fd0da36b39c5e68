//! `fib(N)` on `join` in a one-worker pool, `R` times: the `join` fast path
//! and nothing else, for instruction counts under cachegrind (stable on a
//! loaded machine, unlike times) and min/median times.
//!
//! ```sh
//! cargo build --release -p tailctl-rt --example fib_join
//! N=25 R=1 valgrind --tool=cachegrind --cache-sim=no target/release/examples/fib_join
//! N=27 R=30 target/release/examples/fib_join
//! RAYON=1 N=25 R=1 valgrind --tool=cachegrind --cache-sim=no target/release/examples/fib_join
//! ```
//!
//! `RAYON=1` runs the same on a one-thread rayon pool (`install`), for the
//! comparison.

use std::time::Instant;
use tailctl_rt::{join, Pool};

fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn fib_rayon(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
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
    let rayon = env("RAYON", 0) != 0;
    let pool = Pool::builder().workers(1).build().unwrap();
    let ray = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let mut ms: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            if rayon {
                std::hint::black_box(ray.install(|| fib_rayon(n)));
            } else {
                std::hint::black_box(pool.submit(move || fib(n)).wait().unwrap());
            }
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{} fib({n}) x{reps}: min {:.2} ms, median {:.2} ms",
        if rayon { "rayon" } else { "ours" },
        ms[0],
        ms[ms.len() / 2]
    );
}
