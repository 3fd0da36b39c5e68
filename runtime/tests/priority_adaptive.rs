//! The adaptive quantum-based priority mode (`priority/adaptive.rs`), the
//! scheduler Prompt I-Cilk is compared against: a worker takes new work only
//! from the level it is assigned to, the allocator's allotments follow the
//! levels' load within a few quanta (highest level first), and no request
//! is stranded, whatever the mix. Greediness is *not* expected.
//!
//! No test asserts a time: assignments are checked per request, allotments
//! by polling them with a generous bound (a hang becomes a failure) and by
//! counting the reallocations it took.

mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailctl_rt::priority::assigned_level;
use tailctl_rt::{parallel_for, Pool, Priority, PriorityMode};

const GENEROUS: Duration = Duration::from_secs(30);

fn p(level: u8) -> Priority {
    Priority::new(level).unwrap()
}

fn adaptive(workers: usize) -> Pool {
    Pool::builder()
        .workers(workers)
        .spin_rounds(8)
        .priority_mode(PriorityMode::Adaptive {
            quantum: Duration::from_micros(500),
        })
        .build()
        .unwrap()
}

/// Polls `cond()` until it holds or the generous bound passes.
fn poll(cond: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() > GENEROUS {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

fn spin_a_little() {
    std::hint::black_box((0..2_000u64).sum::<u64>());
}

/// Every request, whatever its level and however it was picked (at top
/// level, in another request's join wait, at a checkpoint), starts on a
/// worker assigned to its level for the current quantum. In prompt mode
/// there is no assignment (`assigned_level()` is `None`) and a worker takes
/// any level.
#[test]
fn a_worker_takes_only_the_level_it_is_assigned_to() {
    for workers in [1, 2, 3] {
        let pool = adaptive(workers);
        let hs: Vec<_> = (0..400u64)
            .map(|i| {
                let level = (i % 5) as u8; // 0..=4
                pool.submit_with_priority(p(level), move || {
                    let at_start = assigned_level();
                    if i % 3 == 0 {
                        // Joins: checkpoints and waits that pick other work.
                        common::fib(12);
                    } else {
                        spin_a_little();
                    }
                    (level, at_start)
                })
            })
            .collect();
        for h in hs {
            let (level, assigned) = h.wait().unwrap();
            assert_eq!(
                assigned,
                Some(p(level)),
                "a level-{level} request started on a worker assigned to {assigned:?} ({workers} workers)"
            );
        }
        assert!(pool.stats().reallocations > 0);
    }
}

/// A CPU-bound request running on `pool` at `level` until `stop`: a
/// `parallel_for` with plenty of parallelism, repeated.
fn busy(pool: &Pool, level: u8, stop: &Arc<AtomicBool>) -> tailctl_rt::RequestHandle<()> {
    let stop = stop.clone();
    pool.submit_with_priority(p(level), move || {
        while !stop.load(SeqCst) {
            parallel_for(0..64, 1, |_| {
                for _ in 0..20 {
                    spin_a_little();
                }
            });
        }
    })
}

/// Reallocations since `start` (the quanta it took).
fn quanta(pool: &Pool, start: u64) -> u64 {
    pool.stats().reallocations - start
}

/// The allocator follows the load: a busy level grows to every worker;
/// a busier higher level takes them from it (highest first); when the
/// higher level's work ends, its workers go back; when everything ends,
/// no level keeps a worker. Each step takes a few quanta, counted as
/// reallocations (a loaded host can slow a quantum's bookkeeping, not the
/// count).
#[test]
fn allotments_follow_load_within_a_few_quanta() {
    const FEW: u64 = 40;
    let pool = adaptive(2);
    let low_stop = Arc::new(AtomicBool::new(false));
    let q0 = pool.stats().reallocations;
    let low = busy(&pool, 2, &low_stop);
    assert!(
        poll(|| pool.allotment()[2] == 2),
        "level 2 never got both workers"
    );
    assert!(
        quanta(&pool, q0) <= FEW,
        "level 2 took {} quanta",
        quanta(&pool, q0)
    );

    let high_stop = Arc::new(AtomicBool::new(false));
    let q1 = pool.stats().reallocations;
    let high = busy(&pool, 6, &high_stop);
    assert!(
        poll(|| {
            let a = pool.allotment();
            a[6] == 2 && a[2] == 0
        }),
        "level 6 never took both workers: {:?}",
        &pool.allotment()[..8]
    );
    assert!(
        quanta(&pool, q1) <= FEW,
        "level 6 took {} quanta",
        quanta(&pool, q1)
    );

    high_stop.store(true, SeqCst);
    high.wait().unwrap();
    let q2 = pool.stats().reallocations;
    assert!(
        poll(|| {
            let a = pool.allotment();
            a[6] == 0 && a[2] >= 1
        }),
        "level 2 never got its workers back: {:?}",
        &pool.allotment()[..8]
    );
    assert!(
        quanta(&pool, q2) <= FEW,
        "giving back took {} quanta",
        quanta(&pool, q2)
    );

    low_stop.store(true, SeqCst);
    low.wait().unwrap();
    // Nothing left: the next allocations assign no level (the workers
    // that look for work run the allocator; submit a no-op to wake one).
    assert!(
        poll(|| {
            pool.submit(|| ()).wait().unwrap();
            let a = pool.allotment();
            a.iter().enumerate().all(|(l, &n)| l == 0 || n == 0)
        }),
        "an idle level kept workers: {:?}",
        &pool.allotment()[..8]
    );
}

/// Adaptive is not greedy, but it never strands work: many requests at
/// many levels, with joins, nested submissions and waits on lower-level
/// requests (which lower the waiter's floor), all complete with the right
/// results on 1, 2 and 3 workers.
#[test]
fn every_request_finishes_under_adaptive() {
    for workers in [1, 2, 3] {
        let pool = adaptive(workers);
        let handle = pool.handle();
        let hs: Vec<_> = (0..300u64)
            .map(|i| {
                let level = (i * 7 % 13) as u8;
                let handle = handle.clone();
                pool.submit_with_priority(p(level), move || {
                    if i % 10 == 0 && level > 0 {
                        // Waits for a lower-level request of its own pool.
                        let lower = handle.submit_with_priority(p(level - 1), || common::fib(14));
                        lower.wait().unwrap() + common::fib(10 + i % 8) - 377
                    } else {
                        common::fib(10 + i % 8)
                    }
                })
            })
            .collect();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let got: Vec<_> = hs.into_iter().map(|h| h.wait()).collect();
            let _ = tx.send(got);
        });
        let Ok(got) = rx.recv_timeout(GENEROUS) else {
            std::mem::forget(pool);
            panic!("requests were stranded under adaptive ({workers} workers)");
        };
        for (i, r) in got.into_iter().enumerate() {
            assert_eq!(r, Ok(fib_seq(10 + i as u64 % 8)), "request {i}");
        }
        let s = pool.stats();
        assert_eq!(s.completed, s.submitted);
    }
}

/// On one worker, a high-level request waiting for a lower-level request
/// gets it run: the allocator moves the worker to the lower level once the
/// waiter's level has nothing to run (the waiter does not count as
/// running), instead of leaving it assigned where it can do nothing.
#[test]
fn waiting_on_a_lower_request_does_not_deadlock_under_adaptive() {
    common::assert_waiting_on_a_lower_request_completes(adaptive(1), GENEROUS);
}

/// The search CPU counter is measured only when asked for, in both modes.
#[test]
fn search_cpu_is_measured_on_request() {
    for mode in [
        PriorityMode::Prompt,
        PriorityMode::Adaptive {
            quantum: Duration::from_micros(500),
        },
    ] {
        for measure in [false, true] {
            let pool = Pool::builder()
                .workers(2)
                .spin_rounds(8)
                .priority_mode(mode)
                .measure_search_cpu(measure)
                .build()
                .unwrap();
            for _ in 0..20 {
                pool.submit(|| common::fib(15)).wait().unwrap();
            }
            let s = pool.stats();
            if !measure {
                assert_eq!(s.search_cpu_ns, 0, "{mode}");
            }
            assert_eq!(s.completed, 20);
        }
    }
}

fn fib_seq(n: u64) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        (a, b) = (b, a + b);
    }
    a
}
