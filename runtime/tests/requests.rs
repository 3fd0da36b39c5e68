//! Every submitted request completes exactly once with the right result,
//! under every policy: deep nested joins, scopes, many concurrent requests,
//! panics, shutdown. Sizes shrink under Miri. Assertions are on behaviour only.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tailctl_rt::{join, parallel_for, scope, Policy, RequestError};

mod common;
use common::{fib, pool, scale};

fn fib_seq(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

#[test]
fn fib_under_every_policy() {
    let n = scale(22, 8) as u64;
    for policy in Policy::ALL {
        let pool = pool(policy, 3);
        let hs: Vec<_> = (0..scale(8, 2))
            .map(|_| pool.submit(move || fib(n)))
            .collect();
        for h in hs {
            assert_eq!(h.wait().unwrap(), fib_seq(n), "{policy}");
        }
        assert_eq!(pool.active_requests(), 0);
        let s = pool.stats();
        assert_eq!(s.submitted, s.completed);
    }
}

#[test]
fn deep_nested_joins() {
    // A chain of joins nested `depth` deep on one stack.
    fn chain(d: usize) -> usize {
        if d == 0 {
            return 0;
        }
        let (a, b) = join(|| chain(d - 1), || 1);
        a + b
    }
    let depth = scale(5_000, 50);
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        assert_eq!(pool.submit(move || chain(depth)).wait().unwrap(), depth);
    }
}

#[test]
fn many_concurrent_requests_complete_exactly_once() {
    let n = scale(3_000, 20);
    for policy in Policy::ALL {
        let pool = Arc::new(pool(policy, 2));
        let seen: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
        let submitters: Vec<_> = (0..4)
            .map(|t| {
                let pool = Arc::clone(&pool);
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || {
                    let hs: Vec<_> = (t..n)
                        .step_by(4)
                        .map(|i| {
                            let seen = Arc::clone(&seen);
                            (
                                i,
                                pool.submit(move || {
                                    seen[i].fetch_add(1, Ordering::Relaxed);
                                    let (a, b) = join(|| i * 2, || fib(6) as usize);
                                    a + b
                                }),
                            )
                        })
                        .collect();
                    for (i, h) in hs {
                        assert_eq!(h.wait().unwrap(), i * 2 + 8);
                    }
                })
            })
            .collect();
        for s in submitters {
            s.join().unwrap();
        }
        assert!(
            seen.iter().all(|c| c.load(Ordering::Relaxed) == 1),
            "{policy}"
        );
        assert_eq!(pool.active_requests(), 0);
        assert_eq!(pool.stats().completed, n as u64);
    }
}

#[test]
fn more_active_requests_than_table_slots() {
    // Hold both workers so that > MAX_REQUESTS requests are active at once;
    // the extra ones run untracked but still complete exactly once.
    let extra = scale(tailctl_rt::shared_state::MAX_REQUESTS + 100, 10);
    let pool = pool(Policy::TailControl, 2);
    let gate = Arc::new(AtomicBool::new(false));
    let blockers: Vec<_> = (0..2)
        .map(|_| {
            let gate = Arc::clone(&gate);
            pool.submit(move || {
                while !gate.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            })
        })
        .collect();
    let hs: Vec<_> = (0..extra)
        .map(|i| pool.submit(move || join(|| i, || 1)))
        .collect();
    assert!(pool.active_requests() >= extra);
    gate.store(true, Ordering::Release);
    for b in blockers {
        b.wait().unwrap();
    }
    for (i, h) in hs.into_iter().enumerate() {
        assert_eq!(h.wait().unwrap(), (i, 1));
    }
    assert_eq!(pool.active_requests(), 0);
}

#[test]
fn scopes_and_parallel_for() {
    let n = scale(100_000, 200);
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let r = pool
            .submit(move || {
                let mut out = vec![0usize; n];
                let hits = AtomicUsize::new(0);
                scope(|s| {
                    for (k, chunk) in out.chunks_mut(1000).enumerate() {
                        let hits = &hits;
                        s.spawn(move |s| {
                            for (j, x) in chunk.iter_mut().enumerate() {
                                *x = k * 1000 + j;
                            }
                            s.spawn(move |_| {
                                hits.fetch_add(1, Ordering::Relaxed);
                            });
                        });
                    }
                });
                let sum = AtomicUsize::new(0);
                parallel_for(0..n, 64, |i| {
                    sum.fetch_add(out[i], Ordering::Relaxed);
                });
                (sum.into_inner(), hits.into_inner())
            })
            .wait()
            .unwrap();
        assert_eq!(r, (n * (n - 1) / 2, n.div_ceil(1000)), "{policy}");
    }
}

fn msg<T>(r: Result<T, RequestError>) -> String {
    match r {
        Err(RequestError::Panicked(p)) => p.message().to_string(),
        other => panic!("expected a panic, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn panics_fail_only_their_request() {
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let root = pool.submit(|| -> u32 { panic!("root") });
        let in_a = pool.submit(|| join(|| -> u64 { panic!("in a") }, || fib(10)));
        let in_b = pool.submit(|| join(|| fib(10), || -> u64 { panic!("in b") }));
        let in_spawn = pool.submit(|| {
            scope(|s| {
                s.spawn(|_| panic!("in spawn"));
                s.spawn(|_| {
                    fib(10);
                });
            })
        });
        let deep = pool.submit(|| {
            parallel_for(0..10_000, 10, |i| {
                if i == 7_777 {
                    panic!("deep")
                }
            })
        });
        let ok = pool.submit(|| fib(15));
        assert_eq!(msg(root.wait()), "root");
        assert_eq!(msg(in_a.wait()), "in a");
        assert_eq!(msg(in_b.wait()), "in b");
        assert_eq!(msg(in_spawn.wait()), "in spawn");
        assert_eq!(msg(deep.wait()), "deep");
        assert_eq!(ok.wait().unwrap(), 610);
        // The pool keeps serving.
        assert_eq!(pool.submit(|| fib(12)).wait().unwrap(), 144);
        assert_eq!(pool.stats().panicked, 5);
        assert_eq!(pool.active_requests(), 0);
    }
}

#[test]
fn shutdown_drains() {
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let hs: Vec<_> = (0..scale(500, 10))
            .map(|i| pool.submit(move || join(|| i, || i)))
            .collect();
        pool.shutdown();
        for (i, h) in hs.into_iter().enumerate() {
            assert_eq!(h.wait().unwrap(), (i, i));
        }
    }
}

#[test]
fn shutdown_cancel_runs_or_cancels_each_exactly_once() {
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let ran = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..scale(2_000, 10))
            .map(|i| {
                let ran = Arc::clone(&ran);
                pool.submit(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                    fib(8) as usize + i
                })
            })
            .collect();
        pool.shutdown_cancel();
        let mut ok = 0;
        for (i, h) in hs.into_iter().enumerate() {
            match h.wait() {
                Ok(v) => {
                    assert_eq!(v, 21 + i);
                    ok += 1;
                }
                Err(e) => assert_eq!(e, RequestError::Cancelled),
            }
        }
        assert_eq!(ok, ran.load(Ordering::Relaxed), "{policy}");
    }
}

#[test]
fn submit_after_close_is_refused() {
    let pool = pool(Policy::StealFirst, 1);
    pool.close();
    assert_eq!(pool.submit(|| 1).wait(), Err(RequestError::ShutDown));
    assert_eq!(pool.active_requests(), 0);
}

#[test]
fn handles_are_futures() {
    use std::future::Future;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    fn block_on<F: Future + Unpin>(mut f: F) -> F::Output {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = std::pin::Pin::new(&mut f).poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }
    let pool = pool(Policy::TailControl, 2);
    for i in 0..scale(200, 5) as u64 {
        assert_eq!(block_on(pool.submit(move || fib(10) + i)).unwrap(), 55 + i);
    }
}

#[test]
fn join_and_scope_work_outside_a_pool() {
    assert_eq!(fib(10), 55);
    let mut v = [0; 3];
    scope(|s| {
        for (i, x) in v.iter_mut().enumerate() {
            s.spawn(move |_| *x = i);
        }
    });
    assert_eq!(v, [0, 1, 2]);
}

#[test]
fn requests_can_wait_for_sub_requests_on_the_same_pool() {
    for policy in Policy::ALL {
        // One worker: a blocking wait would deadlock; the worker must serve.
        let pool = Arc::new(pool(policy, 1));
        let p2 = Arc::clone(&pool);
        let r = pool
            .submit(move || {
                let subs: Vec<_> = (0..4u64).map(|i| p2.submit(move || fib(10) + i)).collect();
                let inner = p2.submit(|| fib(12));
                let mut sum: u64 = subs.into_iter().map(|h| h.wait().unwrap()).sum();
                sum += inner.wait_with_stats().0.unwrap();
                sum
            })
            .wait()
            .unwrap();
        assert_eq!(r, 4 * 55 + 6 + 144, "{policy}");
        assert_eq!(pool.active_requests(), 0);
    }
}

#[test]
fn a_panicking_scope_body_still_waits_for_its_spawns() {
    let pool = pool(Policy::StealFirst, 2);
    let ran = Arc::new(AtomicUsize::new(0));
    let r2 = Arc::clone(&ran);
    let r = pool.submit(move || {
        let local = AtomicUsize::new(0); // borrowed by the spawns
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(|s| {
                for _ in 0..scale(64, 4) {
                    s.spawn(|_| {
                        fib(12);
                        local.fetch_add(1, Ordering::Relaxed);
                    });
                }
                panic!("body")
            })
        }));
        assert!(out.is_err());
        r2.store(local.load(Ordering::Relaxed), Ordering::Relaxed);
    });
    r.wait().unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), scale(64, 4));
}

#[test]
fn last_pool_handle_dropped_inside_a_request() {
    let pool = Arc::new(pool(Policy::TailControl, 2));
    let p2 = Arc::clone(&pool);
    let h = pool.submit(move || {
        let _keep = p2; // dropped on the worker, possibly the last handle
        fib(10)
    });
    drop(pool);
    assert_eq!(h.wait().unwrap(), 55);
}

#[test]
fn parallel_for_chunks_cover_the_range_exactly_once() {
    let n = scale(100_000, 300);
    for policy in Policy::ALL {
        for grain in [1, 7, 1024] {
            let pool = pool(policy, 3);
            let hits: Arc<Vec<AtomicUsize>> =
                Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let h2 = Arc::clone(&hits);
            let max_chunk = pool
                .submit(move || {
                    let max = AtomicUsize::new(0);
                    tailctl_rt::parallel_for_chunks(5..n, grain, |r| {
                        max.fetch_max(r.len(), Ordering::Relaxed);
                        for i in r {
                            h2[i].fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    max.into_inner()
                })
                .wait()
                .unwrap();
            assert!(max_chunk <= grain);
            for (i, c) in hits.iter().enumerate() {
                assert_eq!(
                    c.load(Ordering::Relaxed),
                    usize::from(i >= 5),
                    "{policy} grain {grain} index {i}"
                );
            }
        }
    }
}

/// The kernel charges a worker to its request only while the region says
/// WORKING: a worker running a request must say so, including a request it
/// found at once (its first) and every one after, found without a search.
#[test]
fn a_worker_running_a_request_says_working_in_the_region() {
    use tailctl_rt::shared_state::WORKER_WORKING;
    let pool = std::sync::Arc::new(common::pool(Policy::StealFirst, 1));
    // Submitted together, before the worker could go looking: the first is
    // found at once, the rest right after it without a search.
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let p = pool.clone();
            pool.submit(move || {
                let me = tailctl_rt::current_worker_index().unwrap();
                p.shared_state().worker(me).state()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.wait().unwrap(), WORKER_WORKING);
    }
}

/// SAWS's desire inputs (issue 12): the region's `busy_workers` counts the
/// workers saying WORKING (2 while two requests wait on each other's
/// barrier), searches that found work and that found nothing are counted per
/// worker, and a queued backlog shows in `stealable`.
#[test]
fn the_region_publishes_the_desire_inputs() {
    use std::sync::Barrier;
    let pool = Arc::new(pool(Policy::StealFirst, 2));
    let shared = || pool.shared_state();
    let barrier = Arc::new(Barrier::new(3));
    let release = Arc::new(AtomicBool::new(false));
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let (b, r) = (barrier.clone(), release.clone());
            pool.submit(move || {
                b.wait();
                while !r.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    barrier.wait();
    // Both workers are in a request: both say WORKING.
    assert_eq!(shared().header().busy_workers(), 2);
    // A backlog no worker can take now: a searching thief would see it.
    let queued: Vec<_> = (0..5).map(|_| pool.submit(|| ())).collect();
    release.store(true, Ordering::Release);
    for h in hs.into_iter().chain(queued) {
        h.wait().unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (found, failed) = loop {
        let w = |i: usize| shared().worker(i);
        let found = w(0).found_work() + w(1).found_work();
        let failed = w(0).failed_steals() + w(1).failed_steals();
        // Idle again: nobody WORKING, the backlog gone, and searches failed.
        if shared().header().busy_workers() == 0 && shared().header().stealable() == 0 && failed > 0
        {
            break (found, failed);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the region never showed an idle pool"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    // Seven requests, each admitted by a search (none were local work).
    assert!(found >= 7, "{found} successful searches for 7 requests");
    assert!(failed > 0);
}
