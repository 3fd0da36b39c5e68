//! Concurrency stress, shaped like crossbeam-deque's `stampede` and
//! `no_starvation`, plus idle sleep and wake-up. Sized down under Miri.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tailctl_rt::{join, scope, Policy, Pool};

fn scale(full: usize, miri: usize) -> usize {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

/// Many submitters hammer the pool with tiny requests that each spawn a burst
/// of tasks; every task runs exactly once.
#[test]
fn stampede() {
    let requests = scale(2_000, 8);
    let tasks = 16;
    for policy in Policy::ALL {
        let pool = Arc::new(Pool::builder().workers(4).policy(policy).build().unwrap());
        let ran = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (pool, ran) = (Arc::clone(&pool), Arc::clone(&ran));
                std::thread::spawn(move || {
                    let hs: Vec<_> = (0..requests / 4)
                        .map(|_| {
                            let ran = Arc::clone(&ran);
                            pool.submit(move || {
                                scope(|s| {
                                    for _ in 0..tasks {
                                        s.spawn(|_| {
                                            ran.fetch_add(1, Ordering::Relaxed);
                                        });
                                    }
                                })
                            })
                        })
                        .collect();
                    for h in hs {
                        h.wait().unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            ran.load(Ordering::Relaxed),
            requests / 4 * 4 * tasks,
            "{policy}"
        );
    }
}

/// A request that cannot finish until another request runs must not starve
/// it: a free worker admits (or steals) the second one.
#[test]
fn no_starvation() {
    for policy in Policy::ALL {
        for _ in 0..scale(20, 2) {
            let pool = Pool::builder().workers(2).policy(policy).build().unwrap();
            let flag = Arc::new(AtomicBool::new(false));
            let f1 = Arc::clone(&flag);
            let waiter = pool.submit(move || {
                while !f1.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            });
            let f2 = Arc::clone(&flag);
            let setter = pool.submit(move || f2.store(true, Ordering::Release));
            setter.wait().unwrap();
            waiter.wait().unwrap();
        }
    }
}

/// Tasks of a blocked request do not starve: a request waiting in a join on a
/// task a thief holds still completes while other requests keep arriving.
#[test]
fn joins_complete_under_load() {
    fn tree(d: u32) -> u64 {
        if d == 0 {
            return 1;
        }
        let (a, b) = join(|| tree(d - 1), || tree(d - 1));
        a + b
    }
    let depth = if cfg!(miri) { 3 } else { 12 };
    let pool = Pool::builder().workers(3).build().unwrap();
    let hs: Vec<_> = (0..scale(200, 4))
        .map(|_| pool.submit(move || tree(depth)))
        .collect();
    for h in hs {
        assert_eq!(h.wait().unwrap(), 1 << depth);
    }
}

/// An idle pool puts every worker to sleep, and a request submitted to a
/// fully asleep pool is still picked up (no lost wake-up), many times over.
#[test]
fn idle_workers_sleep_and_wake() {
    for policy in Policy::ALL {
        let pool = Pool::builder()
            .workers(3)
            .policy(policy)
            .spin_rounds(2)
            .build()
            .unwrap();
        for i in 0..scale(50, 3) {
            while pool.sleeping_workers() < pool.workers() {
                std::thread::yield_now();
            }
            assert_eq!(
                pool.submit(move || join(|| i, || 1)).wait().unwrap(),
                (i, 1)
            );
        }
        while pool.sleeping_workers() < pool.workers() {
            std::thread::yield_now();
        }
    }
}

/// A worker blocked in a join, asleep, is woken when the thief finishes.
#[test]
fn join_owner_wakes_after_thief_finishes() {
    let pool = Pool::builder().workers(2).spin_rounds(1).build().unwrap();
    for _ in 0..scale(50, 3) {
        let r = pool
            .submit(|| {
                let go = AtomicBool::new(false);
                join(
                    || {
                        // Wait until b was stolen and started, then finish;
                        // our join then waits (and may sleep) on b's latch.
                        while !go.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                        1
                    },
                    || {
                        go.store(true, Ordering::Release);
                        for _ in 0..1000 {
                            std::hint::spin_loop();
                        }
                        2
                    },
                )
            })
            .wait()
            .unwrap();
        assert_eq!(r, (1, 2));
    }
}
