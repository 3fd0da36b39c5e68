//! Work distribution of `parallel_for` over 10^6 items on 2 workers against
//! rayon's: items per worker, the share of the worker that took fewer items
//! per sample, steals per loop and time per loop, for loops run as in the
//! `pfor1e6/2t` row of `benches/overhead.rs` (ten loops per request, sides
//! alternating, a 5 ms pause before each sample).
//!
//! ```sh
//! cargo run --release -p tailctl-rt --example pfor_probe   # S=40 samples per side
//! THIRD=1 ...     # a steal-first pool of ours in the rotation too, as in the benchmark
//! PLAIN=1 ...     # the benchmark's exact loops (per-item bodies): times only
//! ```
//!
//! Without `PLAIN`, each side runs its loop over chunks of 1024 items
//! (`parallel_for_chunks`; rayon: a parallel range over chunk indices, the
//! same split tree) and counts a chunk's items for the worker that ran it.

use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailctl_rt::parallel_for_chunks;

#[allow(dead_code)]
#[path = "../benches/common/mod.rs"]
mod common;

#[repr(align(128))]
struct Padded(AtomicU64);

static ITEMS: [Padded; 2] = [Padded(AtomicU64::new(0)), Padded(AtomicU64::new(0))];

fn main() {
    let samples: usize = std::env::var("S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let (n, grain, reps) = (1_000_000usize, 1024usize, 10usize);
    let data: &'static [AtomicU64] = Box::leak((0..n).map(|_| AtomicU64::new(0)).collect());
    // The benchmark's body, per chunk of `grain` items, plus a count of the
    // items per worker (one relaxed RMW per chunk).
    let leaf = move |r: std::ops::Range<usize>, w: usize| {
        ITEMS[w].0.fetch_add(r.len() as u64, Ordering::Relaxed);
        for i in r {
            data[i].store((i as u64).wrapping_mul(i as u64), Ordering::Relaxed);
        }
    };
    // PLAIN=1: the benchmark's loops exactly (per-item bodies), times only.
    let plain = std::env::var("PLAIN").is_ok_and(|v| v == "1");
    let body = |i: usize| data[i].store((i as u64).wrapping_mul(i as u64), Ordering::Relaxed);
    let pool = common::ours(2, true);
    let ray = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    // THIRD=1: a second pool of ours (steal-first, no bookkeeping) in the
    // rotation, as in the benchmark.
    let third = std::env::var("THIRD").is_ok_and(|v| v == "1");
    let off = common::ours(2, false);
    let sides = ["ours", "rayon", "off"];
    let ns = if third { 3 } else { 2 };
    let mut ms = [Vec::new(), Vec::new(), Vec::new()];
    let mut minor = [Vec::new(), Vec::new(), Vec::new()];
    let mut totals = [[0u64; 2]; 3];
    let steals0 = pool.stats().steals;
    for s in 0..samples {
        for k in 0..ns {
            // Alternating sides, as the benchmark interleaves its pools.
            let si = (s + k) % ns;
            let side = sides[si];
            let pool = if si == 2 { &off } else { &pool };
            std::thread::sleep(Duration::from_millis(5));
            let before = [0, 1].map(|w| ITEMS[w].0.load(Ordering::Relaxed));
            let t = Instant::now();
            if plain && side != "rayon" {
                pool.submit(move || {
                    for _ in 0..reps {
                        tailctl_rt::parallel_for(0..n, grain, body)
                    }
                })
                .wait()
                .unwrap();
            } else if plain {
                ray.install(|| {
                    for _ in 0..reps {
                        (0..n).into_par_iter().with_min_len(grain).for_each(body)
                    }
                });
            } else if side != "rayon" {
                pool.submit(move || {
                    for _ in 0..reps {
                        parallel_for_chunks(0..n, grain, |r| {
                            leaf(r, tailctl_rt::current_worker_index().unwrap())
                        })
                    }
                })
                .wait()
                .unwrap();
            } else {
                ray.install(|| {
                    for _ in 0..reps {
                        // Chunks as items: the same split tree over chunks.
                        (0..n.div_ceil(grain)).into_par_iter().for_each(|k| {
                            leaf(
                                k * grain..((k + 1) * grain).min(n),
                                rayon::current_thread_index().unwrap(),
                            )
                        })
                    }
                });
            }
            ms[si].push(t.elapsed().as_secs_f64() * 1e3 / reps as f64);
            let after = [0, 1].map(|w| ITEMS[w].0.load(Ordering::Relaxed));
            let d = [after[0] - before[0], after[1] - before[1]];
            totals[si][0] += d[0];
            totals[si][1] += d[1];
            minor[si].push(d[0].min(d[1]) as f64 / (d[0] + d[1]).max(1) as f64);
        }
    }
    for si in 0..ns {
        let (ms, minor) = (&mut ms[si], &mut minor[si]);
        ms.sort_by(|a, b| a.total_cmp(b));
        minor.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{:5}: ms/loop median {:.3} min {:.3}; items per worker {:?}; minor worker's share median {:.1}% (p10 {:.1}%, p90 {:.1}%){}",
            sides[si],
            ms[ms.len() / 2],
            ms[0],
            totals[si],
            100.0 * minor[minor.len() / 2],
            100.0 * minor[minor.len() / 10],
            100.0 * minor[minor.len() * 9 / 10],
            if si == 0 {
                format!(
                    "; steals/loop {:.2}",
                    (pool.stats().steals - steals0) as f64 / (samples * reps) as f64
                )
            } else {
                String::new()
            }
        );
    }
}
