//! Priority levels (see `runtime/src/priority/README.md`): promptness,
//! greediness, FIFO aging within a level, muggings and the counters.
//!
//! No test asserts a time. Promptness is asserted by counting the low-level
//! work a worker did between the arrival of high-level work and its start
//! (the checkpoints it passed); greediness and muggings by rendezvous that
//! can only complete if the mechanism did its job. Where the code without
//! the mechanism would hang, a generous bound turns the hang into a failure.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailctl_rt::{join, scope, Pool, PoolHandle, Priority};

const GENEROUS: Duration = Duration::from_secs(20);

fn p(level: u8) -> Priority {
    Priority::new(level).unwrap()
}

/// Spins until `cond()` or the generous bound; returns whether `cond()` held.
fn spin_until(cond: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() > GENEROUS {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Ticks per worker when the high request was submitted.
type Snapshot = Arc<Mutex<Option<Vec<u64>>>>;
/// (worker that started the high request, its ticks at submission, at start).
type Started = Arc<Mutex<Option<(usize, u64, u64)>>>;

fn pool(workers: usize) -> Pool {
    Pool::builder()
        .workers(workers)
        .spin_rounds(8)
        .build()
        .unwrap()
}

/// Per-worker count of low-level work units (the `tick`s between checkpoints).
struct Ticks(Vec<AtomicU64>);

impl Ticks {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Ticks((0..n).map(|_| AtomicU64::new(0)).collect()))
    }
    fn tick(&self) {
        let w = tailctl_rt::current_worker_index().unwrap();
        self.0[w].fetch_add(1, SeqCst);
        // A little work, so that a tick is not free.
        std::hint::black_box((0..200u64).sum::<u64>());
    }
    fn get(&self, w: usize) -> u64 {
        self.0[w].load(SeqCst)
    }
}

/// Every worker runs a low-level request made of `join`s of two ticks (a
/// checkpoint before each pair). One of them, after 100 joins, submits a
/// high-level request. The worker that starts it must have done at most one
/// join's worth of ticks (2) since the submission: it moved up at its next
/// checkpoint. Without priorities the high request waits behind the
/// low-level ones (thousands of ticks).
fn high_request_starts_at_next_checkpoint(low: u8) {
    const W: usize = 2;
    const ROUNDS: u64 = 20_000;
    let pool = pool(W);
    let handle = pool.handle();
    let ticks = Ticks::new(W);
    let started = Arc::new(AtomicUsize::new(0));
    let snap: Snapshot = Arc::new(Mutex::new(None));
    let result: Started = Arc::new(Mutex::new(None));
    let submitted = Arc::new(AtomicBool::new(false));
    let high_done = Arc::new(AtomicBool::new(false));
    let lows: Vec<_> = (0..W)
        .map(|i| {
            let (ticks, started, snap, result, submitted, high_done, handle) = (
                ticks.clone(),
                started.clone(),
                snap.clone(),
                result.clone(),
                submitted.clone(),
                high_done.clone(),
                handle.clone(),
            );
            pool.submit_with_priority(p(low), move || {
                started.fetch_add(1, SeqCst);
                // Every worker is on a low request before the high one comes.
                assert!(spin_until(|| started.load(SeqCst) == W));
                for round in 0..ROUNDS {
                    if high_done.load(SeqCst) {
                        break;
                    }
                    join(|| ticks.tick(), || ticks.tick());
                    if i == 0 && round == 100 && !submitted.swap(true, SeqCst) {
                        submit_high(&handle, &ticks, &snap, &result, &high_done);
                    }
                }
            })
        })
        .collect();
    for h in lows {
        h.wait().unwrap();
    }
    let (starter, before, at_start) = result.lock().unwrap().expect("the high request ran");
    let stats = pool.stats();
    assert!(
        at_start - before <= 2,
        "worker {starter} did {} low ticks after the high request arrived (stats {stats:?})",
        at_start - before
    );
    assert!(stats.promptness_violations >= 1, "{stats:?}");
    assert!(stats.level_switches >= 1, "{stats:?}");
}

fn submit_high(
    handle: &PoolHandle,
    ticks: &Arc<Ticks>,
    snap: &Snapshot,
    result: &Started,
    high_done: &Arc<AtomicBool>,
) {
    let (t2, s2, r2, d2) = (
        ticks.clone(),
        snap.clone(),
        result.clone(),
        high_done.clone(),
    );
    // The snapshot is taken before the submission (under the lock the high
    // request reads it with), so it counts every tick after the arrival.
    let mut guard = snap.lock().unwrap();
    let h = handle.submit_with_priority(p(7), move || {
        let w = tailctl_rt::current_worker_index().unwrap();
        let snap = s2.lock().unwrap().clone().unwrap();
        *r2.lock().unwrap() = Some((w, snap[w], t2.get(w)));
        d2.store(true, SeqCst);
    });
    *guard = Some((0..ticks.0.len()).map(|w| ticks.get(w)).collect());
    drop(guard);
    drop(h);
}

#[test]
fn high_request_starts_at_next_checkpoint_over_default_level() {
    high_request_starts_at_next_checkpoint(0);
}

#[test]
fn high_request_starts_at_next_checkpoint_over_level_two() {
    high_request_starts_at_next_checkpoint(2);
}

/// Greedy: while a high-level request occupies one worker (without
/// checkpoints), the other runs the waiting low-level request; the high
/// one only finishes once the low one has started.
#[test]
fn no_worker_idles_while_lower_work_waits() {
    for (high, low) in [(7u8, 0u8), (9, 3)] {
        let pool = pool(2);
        let low_started = Arc::new(AtomicBool::new(false));
        let l2 = low_started.clone();
        let h = pool.submit_with_priority(p(high), move || spin_until(|| l2.load(SeqCst)));
        let l3 = low_started.clone();
        let l = pool.submit_with_priority(p(low), move || l3.store(true, SeqCst));
        assert_eq!(
            h.wait(),
            Ok(true),
            "levels {high}/{low}: the low request never started"
        );
        l.wait().unwrap();
    }
}

/// Greedy across many levels: one request per level 0..8 on a pool of
/// 2; each waits until a second request is running beside it. A scheduler
/// that ran only the highest level (or idled a worker) never completes.
#[test]
fn two_levels_always_run_side_by_side() {
    let pool = pool(2);
    let running = Arc::new(AtomicUsize::new(0));
    let paired = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..8u8)
        .map(|l| {
            let (running, paired) = (running.clone(), paired.clone());
            pool.submit_with_priority(p(l), move || {
                running.fetch_add(1, SeqCst);
                // Someone else is running, or every other request is done.
                let ok = spin_until(|| running.load(SeqCst) >= 2 || paired.load(SeqCst) == 7);
                paired.fetch_add(1, SeqCst);
                running.fetch_sub(1, SeqCst);
                ok
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.wait(), Ok(true));
    }
}

/// FIFO aging: requests of one level start in arrival order, and all of a
/// higher level start before any of a lower one.
#[test]
fn requests_age_fifo_within_a_level_and_levels_order() {
    let pool = pool(1);
    let gate = Arc::new(AtomicBool::new(false));
    let g2 = gate.clone();
    let gate_running = Arc::new(AtomicBool::new(false));
    let gr = gate_running.clone();
    let blocker = pool.submit_with_priority(Priority::HIGHEST, move || {
        gr.store(true, SeqCst);
        spin_until(|| g2.load(SeqCst))
    });
    assert!(spin_until(|| gate_running.load(SeqCst)));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut hs = Vec::new();
    for i in 0..24u32 {
        let level = [3u8, 5, 0][i as usize % 3];
        let o = order.clone();
        hs.push(pool.submit_with_priority(p(level), move || o.lock().unwrap().push((level, i))));
    }
    gate.store(true, SeqCst);
    assert_eq!(blocker.wait(), Ok(true));
    for h in hs {
        h.wait().unwrap();
    }
    let got = order.lock().unwrap().clone();
    let mut want = got.clone();
    // Higher level first; within a level, submission order.
    want.sort_by_key(|&(level, i)| (std::cmp::Reverse(level), i));
    assert_eq!(got, want);
    assert_eq!(got.len(), 24);
}

/// Mugging: a worker that moves up leaves its deque (of a level ≥ 1) to the
/// level's mugging queue, and another worker continues its tasks while the
/// owner runs the higher work. H only finishes once that happened.
#[test]
fn a_worker_that_moves_up_leaves_its_deque_to_be_mugged() {
    let pool = pool(2);
    let handle = pool.handle();
    // G occupies worker B without checkpoints until H (level 7) runs.
    let h_ran = Arc::new(AtomicBool::new(false));
    let g_running = Arc::new(AtomicBool::new(false));
    let (hr, gr) = (h_ran.clone(), g_running.clone());
    let g = pool.submit_with_priority(p(1), move || {
        gr.store(true, SeqCst);
        spin_until(|| hr.load(SeqCst))
    });
    assert!(spin_until(|| g_running.load(SeqCst)));
    let done = Arc::new(AtomicUsize::new(0));
    let (d2, hr2) = (done.clone(), h_ran.clone());
    let l = pool.submit_with_priority(p(2), move || {
        let d3 = d2.clone();
        scope(|s| {
            for _ in 0..50 {
                let d = d3.clone();
                s.spawn(move |_| {
                    d.fetch_add(1, SeqCst);
                });
            }
            // Higher work arrives; the next spawn is a checkpoint: this
            // worker moves up, its deque (49+ tasks) goes to the mugging
            // queue, and H waits until the other worker mugged it.
            let handle2 = handle.clone();
            let hr3 = hr2.clone();
            let hh = handle.submit_with_priority(p(7), move || {
                hr3.store(true, SeqCst);
                spin_until(|| handle2.stats().is_some_and(|s| s.muggings >= 1))
            });
            s.spawn(|_| {});
            // Waiting here (level 2) never runs lower work; H is done by
            // the time we get back.
            assert_eq!(hh.wait(), Ok(true), "the abandoned deque was not mugged");
        });
    });
    l.wait().unwrap();
    assert_eq!(g.wait(), Ok(true));
    assert_eq!(done.load(SeqCst), 50);
    let s = pool.stats();
    assert!(s.muggings >= 1, "{s:?}");
}

/// Joins inside a high-level request inherit its level, and the level is
/// visible to the code.
#[test]
fn joins_inherit_the_level() {
    let pool = pool(2);
    let got = pool
        .submit_with_priority(p(11), || {
            let (a, b) = join(tailctl_rt::current_priority, || {
                common::fib(12);
                tailctl_rt::current_priority()
            });
            (a, b)
        })
        .wait()
        .unwrap();
    assert_eq!(got, (Some(p(11)), Some(p(11))));
    assert_eq!(
        pool.submit(tailctl_rt::current_priority).wait(),
        Ok(Some(Priority::DEFAULT))
    );
}

/// Many levels at once under load: every request completes with the right
/// result, whatever the mix (no work lost between the pools).
#[test]
fn mixed_levels_stress() {
    let pool = pool(3);
    let hs: Vec<_> = (0..300u64)
        .map(|i| {
            let level = (i * 7 % 13) as u8;
            pool.submit_with_priority(p(level), move || common::fib(10 + i % 8))
        })
        .collect();
    for (i, h) in hs.into_iter().enumerate() {
        assert_eq!(h.wait(), Ok(fib_seq(10 + i as u64 % 8)));
    }
    let s = pool.stats();
    assert_eq!(s.completed, 300);
    assert_eq!(s.submitted_prioritized, 300 - 300 / 13 - 1);
}

fn fib_seq(n: u64) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        (a, b) = (b, a + b);
    }
    a
}

/// One worker runs a low-level `parallel_for` (grain 1) that submits a
/// high-level request at item 100 and then a sequential loop that calls
/// `yield_to_higher`: each time the high request starts before the next
/// item (a checkpoint per chunk, per `yield_to_higher`).
#[test]
fn parallel_for_chunks_and_yield_to_higher_are_checkpoints() {
    let pool = pool(1);
    let handle = pool.handle();
    let items = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (i2, s2) = (items.clone(), seen.clone());
    pool.submit(move || {
        let submit = |at: u64| {
            let (i3, s3) = (i2.clone(), s2.clone());
            let h = handle.submit_with_priority(p(3), move || {
                s3.lock().unwrap().push((at, i3.load(SeqCst)));
            });
            drop(h);
        };
        tailctl_rt::parallel_for(0..1_000, 1, |i| {
            i2.fetch_add(1, SeqCst);
            if i == 100 {
                submit(i2.load(SeqCst));
            }
        });
        for i in 0..1_000u64 {
            tailctl_rt::yield_to_higher();
            i2.fetch_add(1, SeqCst);
            if i == 100 {
                submit(i2.load(SeqCst));
            }
        }
    })
    .wait()
    .unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for (at, started) in seen {
        assert_eq!(
            started, at,
            "low items ran between the arrival and the start"
        );
    }
}

/// A high-level request that waits for a lower-level request of its own
/// pool takes work down to that level while it waits: on one worker it runs
/// the awaited request itself instead of deadlocking (its floor would
/// otherwise keep it above the request it waits for).
#[test]
fn waiting_on_a_lower_request_runs_it() {
    common::assert_waiting_on_a_lower_request_completes(pool(1), GENEROUS);
}

/// Lower work run while waiting for a lower-level request inherits the
/// waiter's level, also with a level in between on the worker's stack (3,
/// then 7 waiting for a level-0 request, while a level-3 request with
/// `join`s waits in the queue): everything completes with the right
/// results, and the level-3 request ran at level 7.
#[test]
fn lower_work_taken_while_waiting_inherits_the_level() {
    let pool = pool(1);
    let handle = pool.handle();
    let (tx, rx) = std::sync::mpsc::channel();
    let outer = pool.submit_with_priority(p(3), move || {
        let h2 = handle.clone();
        let b = handle.submit_with_priority(p(7), move || {
            let d =
                h2.submit_with_priority(p(3), || (common::fib(15), tailctl_rt::current_priority()));
            let c = h2.submit(|| common::fib(12));
            (c.wait(), d.wait())
        });
        b.wait()
    });
    std::thread::spawn(move || tx.send(outer.wait()));
    let Ok(got) = rx.recv_timeout(GENEROUS) else {
        std::mem::forget(pool);
        panic!("deadlocked");
    };
    let (c, d) = got.unwrap().unwrap();
    assert_eq!(c, Ok(144));
    assert_eq!(d, Ok((610, Some(p(7)))));
}
