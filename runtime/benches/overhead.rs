//! Overhead of tailctl-rt against rayon, measured in the same run.
//!
//! `cargo bench -p tailctl-rt --bench overhead [-- --json] [-- --quick]`
//!
//! Each figure is the median of interleaved trials (ours, rayon, ours, ...),
//! so that the noise of a shared machine hits both sides alike; compare the
//! ratios, not the absolute times. Rows:
//!
//! * `fib30/Nt`: `fib(30)` with `join` on N workers, as one request
//!   (`submit(..).wait()`) vs `rayon::ThreadPool::install`;
//!   `tc` = tail-control with bookkeeping on (a threshold table is loaded, so
//!   every steal attempt runs the pileup check; its thresholds are too high to
//!   serialize anything), `sf-off` = steal-first with bookkeeping off;
//! * `pfor1e6/2t`: `parallel_for` over 10^6 small items (grain 1024) vs
//!   rayon's `par_iter().with_min_len(1024).for_each`;
//! * `idle-cpu/2t`: CPU used by an idle 2-worker pool over a few seconds
//!   (getrusage), as % of one core, ours and rayon's;
//! * `scope/2t`: a `scope` with 1000 small `spawn`s (10 per sample, in one
//!   request) vs `rayon::scope` in `install`;
//! * `par_iter/2t`: `slice.par_iter().map(..).sum()` over 10^6 `u64`s
//!   (10 per sample, in one request) vs rayon's same adapter chain;
//! * `submit/2t`: throughput of tiny requests submitted by two outside
//!   threads at once (contention on the queue and the wake-ups, on a
//!   2-core machine: four threads on two cores), each submitting 1000 and
//!   then waiting for their results, in µs per request; rayon: `spawn`
//!   with the result sent back on a channel;
//! * `rtt/2t`: submit→result of a tiny request, p50 and p99, vs
//!   `ThreadPool::install` called from the same outside thread, in blocks of
//!   round trips on one pool, alternating pools, with a pause before each
//!   block (so that each side never runs while the other's workers spin).
//!   With `RTT_TAIL=1` in the environment it also prints, per block, how
//!   many round trips took over 3x the side's median (where the p99 comes
//!   from).
//!
//! Every timed row is paired: one trial of each side per round, rounds
//! interleaved (the order rotates), with a pause before each trial so that the
//! previous side's workers are asleep. Run as `-- --only NAME` to run only
//! the rows whose name contains NAME.

use rayon::prelude::*;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailctl_rt::{join, parallel_for};

mod common;
use common::{ours, rayon_submit_batch, small_work};

fn fib_ours(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = join(|| fib_ours(n - 1), || fib_ours(n - 2));
    a + b
}

fn fib_rayon(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
    a + b
}

fn fib_seq(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Wall-clock and process CPU seconds of one call.
fn time<F: FnMut()>(mut f: F) -> (f64, f64) {
    let c = cpu_seconds();
    let t = Instant::now();
    f();
    (t.elapsed().as_secs_f64(), cpu_seconds() - c)
}

/// Summary of one case over its trials, in ms.
#[derive(Clone, Copy)]
struct Stat {
    median: f64,
    min: f64,
    /// Median CPU time of the whole process (all pools; idle ones sleep).
    cpu: f64,
}

impl Stat {
    fn scaled(self, k: f64) -> Stat {
        Stat {
            median: self.median * k,
            min: self.min * k,
            cpu: self.cpu * k,
        }
    }
}

fn rayon_pool(workers: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .unwrap()
}

/// Let spinning workers of the previous trial fall asleep.
fn settle() {
    std::thread::sleep(Duration::from_millis(5));
}

struct Row {
    name: String,
    ours: f64,
    rayon: f64,
    unit: &'static str,
    /// Ratio of the minima (timed rows only).
    min_ratio: Option<f64>,
    /// Ratio of median process CPU times (timed rows only).
    cpu_ratio: Option<f64>,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.ours / self.rayon
    }

    fn timed(name: String, ours: Stat, rayon: Stat) -> Row {
        Row {
            name,
            ours: ours.median,
            rayon: rayon.median,
            unit: "ms",
            min_ratio: Some(ours.min / rayon.min),
            cpu_ratio: Some(ours.cpu / rayon.cpu),
        }
    }
}

/// Runs each case once per trial, rotating which goes first, and returns
/// each case's (median, minimum) time in ms. The minimum is the better
/// estimate of intrinsic cost when other jobs share the machine (their noise
/// only ever adds time); the median says what a typical run sees.
fn interleaved(trials: usize, cases: &mut [&mut dyn FnMut()]) -> Vec<Stat> {
    let k = cases.len();
    let mut walls = vec![Vec::with_capacity(trials); k];
    let mut cpus = vec![Vec::with_capacity(trials); k];
    for trial in 0..trials {
        for j in 0..k {
            let c = (trial + j) % k;
            settle();
            let (w, cpu) = time(&mut cases[c]);
            walls[c].push(w * 1e3);
            cpus[c].push(cpu * 1e3);
        }
    }
    walls
        .iter_mut()
        .zip(cpus.iter_mut())
        .map(|(w, c)| Stat {
            median: median(w),
            min: w.iter().cloned().fold(f64::INFINITY, f64::min),
            cpu: median(c),
        })
        .collect()
}

fn bench_fib(rows: &mut Vec<Row>, workers: usize, trials: usize) {
    let n = 30;
    let tc = ours(workers, true);
    let off = ours(workers, false);
    let ray = rayon_pool(workers);
    let mut run_tc = || {
        assert_eq!(
            tc.submit(move || fib_ours(black_box(n))).wait().unwrap(),
            832040
        )
    };
    let mut run_off = || {
        assert_eq!(
            off.submit(move || fib_ours(black_box(n))).wait().unwrap(),
            832040
        )
    };
    let mut run_ray = || assert_eq!(ray.install(|| fib_rayon(black_box(n))), 832040);
    let mut run_seq = || assert_eq!(fib_seq(black_box(n)), 832040);
    let m = if workers == 1 {
        interleaved(
            trials,
            &mut [&mut run_tc, &mut run_ray, &mut run_off, &mut run_seq],
        )
    } else {
        interleaved(trials, &mut [&mut run_tc, &mut run_ray, &mut run_off])
    };
    rows.push(Row::timed(format!("fib30/{workers}t tc"), m[0], m[1]));
    rows.push(Row::timed(format!("fib30/{workers}t sf-off"), m[2], m[1]));
    if workers == 1 {
        // Per-join cost over plain recursion (minima): fib(30) makes
        // fib(31) - 1 joins.
        let joins = 1_346_268.0;
        let seq = m[3].min;
        for (name, t) in [("join-ns/1t tc", m[0].min), ("join-ns/1t sf-off", m[2].min)] {
            rows.push(Row {
                name: name.into(),
                ours: (t - seq) * 1e6 / joins,
                rayon: (m[1].min - seq) * 1e6 / joins,
                unit: "ns",
                min_ratio: None,
                cpu_ratio: None,
            });
        }
    }
}

fn bench_pfor(rows: &mut Vec<Row>, trials: usize) {
    let n = 1_000_000;
    let grain = 1024;
    let tc = ours(2, true);
    let off = ours(2, false);
    let ray = rayon_pool(2);
    let data: &'static [AtomicU64] = Box::leak(
        (0..n)
            .map(|_| AtomicU64::new(0))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let body = |i: usize| data[i].store((i as u64).wrapping_mul(i as u64), Ordering::Relaxed);
    // Ten loops per sample (one request / one install): a single 10^6-item
    // loop lasts well under a millisecond, shorter than a scheduler tick of
    // the other jobs on a shared machine.
    let reps = 10;
    let mut run_tc = || {
        tc.submit(move || (0..reps).for_each(|_| parallel_for(0..n, grain, body)))
            .wait()
            .unwrap()
    };
    let mut run_off = || {
        off.submit(move || (0..reps).for_each(|_| parallel_for(0..n, grain, body)))
            .wait()
            .unwrap()
    };
    let mut run_ray = || {
        ray.install(|| {
            (0..reps).for_each(|_| (0..n).into_par_iter().with_min_len(grain).for_each(body))
        })
    };
    let m = interleaved(trials, &mut [&mut run_tc, &mut run_ray, &mut run_off]);
    let per = 1.0 / reps as f64;
    rows.push(Row::timed(
        "pfor1e6/2t tc".into(),
        m[0].scaled(per),
        m[1].scaled(per),
    ));
    rows.push(Row::timed(
        "pfor1e6/2t sf-off".into(),
        m[2].scaled(per),
        m[1].scaled(per),
    ));
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer, RUSAGE_SELF always exists.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU of the process while only an idle pool exists, as % of one core.
fn idle_cpu(secs: f64) -> f64 {
    std::thread::sleep(Duration::from_millis(300)); // let workers fall asleep
    let c0 = cpu_seconds();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    (cpu_seconds() - c0) / t0.elapsed().as_secs_f64() * 100.0
}

fn bench_idle(rows: &mut Vec<Row>, secs: f64) {
    let ours_pct = {
        let pool = ours(2, true);
        pool.submit(|| fib_ours(20)).wait().unwrap();
        idle_cpu(secs)
    };
    let rayon_pct = {
        let pool = rayon_pool(2);
        pool.install(|| fib_rayon(20));
        idle_cpu(secs)
    };
    rows.push(Row {
        name: "idle-cpu/2t".into(),
        ours: ours_pct,
        rayon: rayon_pct,
        unit: "%core",
        min_ratio: None,
        cpu_ratio: None,
    });
}

fn bench_rtt(rows: &mut Vec<Row>, blocks: usize, per_block: usize) {
    let pool = ours(2, true);
    let ray = rayon_pool(2);
    let n = blocks * per_block;
    let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let tail = std::env::var_os("RTT_TAIL").is_some();
    // With RTT_TAIL: per block of ours, the round trips whose request ran
    // on the submitting thread's CPU.
    let mut same_cpu = Vec::new();
    for block in 0..blocks * 2 {
        settle();
        // Alternate which side goes first in each pair of blocks.
        if (block % 2 == 0) == (block / 2 % 2 == 0) {
            let mut same = 0;
            for _ in 0..per_block {
                let t = Instant::now();
                if tail {
                    // SAFETY: sched_getcpu has no preconditions.
                    let here = unsafe { libc::sched_getcpu() };
                    // SAFETY: as above.
                    let there = pool.submit(|| unsafe { libc::sched_getcpu() }).wait();
                    same += usize::from(there == Ok(here));
                } else {
                    black_box(pool.submit(|| black_box(1u64)).wait().unwrap());
                }
                a.push(t.elapsed().as_secs_f64() * 1e6);
            }
            same_cpu.push(same);
        } else {
            for _ in 0..per_block {
                let t = Instant::now();
                black_box(ray.install(|| black_box(1u64)));
                b.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    if std::env::var_os("RTT_TAIL").is_some() {
        // Where the tail comes from: per block of each side, the round
        // trips over 3x that side's median. A host episode (another
        // process's burst) shows as a few blocks holding most of them; a
        // slow path of the runtime as a count spread over every block.
        for (side, v) in [("ours", &a), ("rayon", &b)] {
            let mut sorted = v.clone();
            let cut = 3.0 * percentile(&mut sorted, 0.5);
            let slow: Vec<usize> = v
                .chunks(per_block)
                .map(|c| c.iter().filter(|&&x| x > cut).count())
                .collect();
            eprintln!("rtt tail {side}: over {cut:.1} us per block {slow:?}");
        }
        eprintln!("rtt ours: on the submitter's CPU per block {same_cpu:?}");
    }
    for (name, p) in [("rtt/2t p50", 0.5), ("rtt/2t p99", 0.99)] {
        rows.push(Row {
            name: name.into(),
            ours: percentile(&mut a, p),
            rayon: percentile(&mut b, p),
            unit: "us",
            min_ratio: None,
            cpu_ratio: None,
        });
    }
}

fn bench_scope(rows: &mut Vec<Row>, trials: usize) {
    let spawns = 1000u64;
    let reps = 10;
    let tc = ours(2, true);
    let ray = rayon_pool(2);
    let sink = AtomicU64::new(0);
    let sink = &sink;
    let mut run_tc = || {
        tc.submit(move || {
            for _ in 0..reps {
                let acc = AtomicU64::new(0);
                tailctl_rt::scope(|s| {
                    for i in 0..spawns {
                        let acc = &acc;
                        s.spawn(move |_| {
                            acc.fetch_add(small_work(i), Ordering::Relaxed);
                        });
                    }
                });
                black_box(acc.into_inner());
            }
        })
        .wait()
        .unwrap()
    };
    let mut run_ray = || {
        ray.install(|| {
            for _ in 0..reps {
                let acc = AtomicU64::new(0);
                rayon::scope(|s| {
                    for i in 0..spawns {
                        let acc = &acc;
                        s.spawn(move |_| {
                            acc.fetch_add(small_work(i), Ordering::Relaxed);
                        });
                    }
                });
                sink.fetch_add(black_box(acc.into_inner()), Ordering::Relaxed);
            }
        })
    };
    let m = interleaved(trials, &mut [&mut run_tc, &mut run_ray]);
    let per = 1.0 / reps as f64;
    rows.push(Row::timed(
        "scope1e3/2t tc".into(),
        m[0].scaled(per),
        m[1].scaled(per),
    ));
}

fn bench_par_iter(rows: &mut Vec<Row>, trials: usize) {
    let n = 1_000_000u64;
    let reps = 10;
    let data: &'static [u64] = Box::leak((0..n).collect::<Vec<_>>().into_boxed_slice());
    let expect: u64 = data.iter().map(|x| x.wrapping_mul(*x) % 7).sum();
    let tc = ours(2, true);
    let ray = rayon_pool(2);
    let mut run_tc = || {
        tc.submit(move || {
            // Fully qualified: rayon's prelude has the same method names.
            use tailctl_rt::iter::{IntoParallelRefIterator, ParallelIterator};
            for _ in 0..reps {
                let it = IntoParallelRefIterator::par_iter(black_box(data));
                let s: u64 = ParallelIterator::sum(ParallelIterator::map(it, |x: &u64| {
                    x.wrapping_mul(*x) % 7
                }));
                assert_eq!(s, expect);
            }
        })
        .wait()
        .unwrap()
    };
    let mut run_ray = || {
        ray.install(|| {
            for _ in 0..reps {
                let s: u64 = black_box(data)
                    .par_iter()
                    .map(|x| x.wrapping_mul(*x) % 7)
                    .sum();
                assert_eq!(s, expect);
            }
        })
    };
    let m = interleaved(trials, &mut [&mut run_tc, &mut run_ray]);
    let per = 1.0 / reps as f64;
    rows.push(Row::timed(
        "par_iter1e6/2t tc".into(),
        m[0].scaled(per),
        m[1].scaled(per),
    ));
}

fn bench_submit(rows: &mut Vec<Row>, trials: usize) {
    let submitters = 2;
    let per = 1000;
    let tc = ours(2, true);
    let ray = rayon_pool(2);
    let mut run_tc = || {
        std::thread::scope(|s| {
            for t in 0..submitters {
                let tc = &tc;
                s.spawn(move || {
                    let hs: Vec<_> = (0..per)
                        .map(|i| tc.submit(move || small_work(i * 7 + t)))
                        .collect();
                    for h in hs {
                        black_box(h.wait().unwrap());
                    }
                });
            }
        })
    };
    let mut run_ray = || {
        std::thread::scope(|s| {
            for t in 0..submitters {
                let ray = &ray;
                s.spawn(move || rayon_submit_batch(ray, per, t));
            }
        })
    };
    let m = interleaved(trials, &mut [&mut run_tc, &mut run_ray]);
    // µs per request (the sample is ms for submitters * per requests).
    let k = 1e3 / (submitters * per) as f64;
    let mut row = Row::timed("submit/2t tc".into(), m[0].scaled(k), m[1].scaled(k));
    row.unit = "us/req";
    rows.push(row);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let run = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let trials = if quick { 5 } else { 21 };
    let mut rows = Vec::new();
    if run("fib30/1t") {
        bench_fib(&mut rows, 1, trials);
    }
    if run("fib30/2t") {
        bench_fib(&mut rows, 2, trials);
    }
    if run("pfor") {
        bench_pfor(&mut rows, trials * 3);
    }
    if run("par_iter") {
        bench_par_iter(&mut rows, trials * 3);
    }
    if run("scope") {
        bench_scope(&mut rows, trials * 3);
    }
    if run("submit") {
        bench_submit(&mut rows, trials * 3);
    }
    if run("idle") {
        bench_idle(&mut rows, if quick { 1.0 } else { 3.0 });
    }
    if run("rtt") {
        if quick {
            bench_rtt(&mut rows, 4, 500);
        } else {
            bench_rtt(&mut rows, 40, 500);
        }
    }
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"name\":\"{}\",\"ours\":{:.4},\"rayon\":{:.4},\"unit\":\"{}\",\"ratio\":{:.3},\"min_ratio\":{},\"cpu_ratio\":{}}}",
                    r.name,
                    r.ours,
                    r.rayon,
                    r.unit,
                    r.ratio(),
                    r.min_ratio.map_or("null".to_string(), |m| format!("{m:.3}")),
                    r.cpu_ratio.map_or("null".to_string(), |m| format!("{m:.3}"))
                )
            })
            .collect();
        println!("[{}]", items.join(","));
    } else {
        println!(
            "{:<20} {:>10} {:>10} {:>6} {:>7} {:>9} {:>9}",
            "bench", "ours", "rayon", "unit", "ratio", "min-ratio", "cpu-ratio"
        );
        for r in &rows {
            println!(
                "{:<20} {:>10.3} {:>10.3} {:>6} {:>7.3} {:>9} {:>9}",
                r.name,
                r.ours,
                r.rayon,
                r.unit,
                r.ratio(),
                r.min_ratio.map_or("-".to_string(), |m| format!("{m:.3}")),
                r.cpu_ratio.map_or("-".to_string(), |m| format!("{m:.3}"))
            );
        }
        println!(
            "(ours/rayon: medians of {trials} interleaved trials (x3 for pfor, par_iter, scope, submit); min-ratio: fastest trial of each; cpu-ratio: median process CPU time; rtt: percentiles of all round trips, blocks of 500 alternating)"
        );
    }
}
