//! One side of the `submit/2t` row of `benches/overhead.rs` on its own, for
//! profiling: two outside threads each submit 1000 tiny requests to a
//! 2-worker pool and then wait for their results, `S` samples (5 ms pause
//! before each), time and process CPU per request printed at the end. Only
//! one pool exists, so `perf record` or `valgrind --tool=callgrind` see one
//! runtime's threads only.
//!
//! ```sh
//! cargo run --release -p tailctl-rt --example submit_probe          # ours (tail-control, bookkeeping on)
//! RAYON=1 cargo run --release -p tailctl-rt --example submit_probe  # rayon: spawn + channel
//! S=200 ...                                                          # samples (default 60)
//! OFF=1 ...                                                          # ours: steal-first, bookkeeping off
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../benches/common/mod.rs"]
mod common;
use common::small_work;

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer, RUSAGE_SELF always exists.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let samples: usize = std::env::var("S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let rayon = std::env::var_os("RAYON").is_some();
    let (submitters, per) = (2u64, 1000u64);
    let off = std::env::var_os("OFF").is_some();
    let ours = common::ours(2, !off);
    let ray = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        std::thread::sleep(Duration::from_millis(5));
        let (c0, t0) = (cpu_seconds(), Instant::now());
        std::thread::scope(|s| {
            for t in 0..submitters {
                let (ours, ray) = (&ours, &ray);
                s.spawn(move || {
                    if rayon {
                        common::rayon_submit_batch(ray, per, t);
                    } else {
                        let hs: Vec<_> = (0..per)
                            .map(|i| ours.submit(move || small_work(i * 7 + t)))
                            .collect();
                        for h in hs {
                            black_box(h.wait().unwrap());
                        }
                    }
                });
            }
        });
        let k = 1e6 / (submitters * per) as f64;
        walls.push(t0.elapsed().as_secs_f64() * k);
        cpus.push((cpu_seconds() - c0) * k);
    }
    walls.sort_by(f64::total_cmp);
    cpus.sort_by(f64::total_cmp);
    println!(
        "{}: {:.3} us/req wall (median of {samples}, min {:.3}), {:.3} us/req cpu",
        match (rayon, off) {
            (true, _) => "rayon",
            (false, true) => "ours sf-off",
            (false, false) => "ours tc",
        },
        walls[samples / 2],
        walls[0],
        cpus[samples / 2]
    );
}
