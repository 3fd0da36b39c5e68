//! The API a rayon or tokio user reaches for: panic payloads, abort, pool
//! handles, spawn, typed build errors, scope_fifo, parallel iterators.
//! Assertions are on behaviour only (no timing); sizes shrink under Miri.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tailctl_rt::{
    is_current_request_aborted, join, parallel_for, scope, threshold::ThresholdTable, BuildError,
    Policy, Pool, RequestError,
};

mod common;
use common::{fib, pool, scale};

/// Spins until `flag` is set (no timing: the other side always sets it).
fn until(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
}

// ---------------------------------------------------------------- panics

#[test]
fn panic_payload_comes_back_intact() {
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        // At the root, in a stolen or inline join half, in a scope spawn.
        let root = pool.submit(|| -> u32 { panic!("root payload") });
        let in_join = pool.submit(|| join(|| fib(12), || -> u64 { panic!("join payload") }));
        let in_spawn = pool.submit(|| scope(|s| s.spawn(|_| panic!("spawn payload"))));
        let n = std::hint::black_box(42); // not a literal: a `String` payload
        let formatted = pool.submit(move || -> () { panic!("formatted {n}") });
        let custom = pool.submit(|| -> () { std::panic::panic_any(vec![1u8, 2, 3]) });

        let p = root.wait().unwrap_err().try_into_panic().unwrap();
        assert_eq!(*p.downcast::<&str>().unwrap(), "root payload");
        let p = in_join.wait().unwrap_err().try_into_panic().unwrap();
        assert_eq!(*p.downcast::<&str>().unwrap(), "join payload");
        let p = in_spawn.wait().unwrap_err().try_into_panic().unwrap();
        assert_eq!(*p.downcast::<&str>().unwrap(), "spawn payload");
        match formatted.wait() {
            Err(RequestError::Panicked(p)) => {
                assert_eq!(p.message(), "formatted 42");
                assert_eq!(
                    *p.into_payload().downcast::<String>().unwrap(),
                    "formatted 42"
                );
            }
            other => panic!("{other:?}"),
        }
        let p = custom.wait().unwrap_err().try_into_panic().unwrap();
        assert_eq!(*p.downcast::<Vec<u8>>().unwrap(), [1, 2, 3]);
        assert_eq!(pool.stats().panicked, 5, "{policy}");
    }
}

#[test]
fn a_request_panic_can_be_resumed_on_the_waiter() {
    let pool = pool(Policy::StealFirst, 1);
    let h = pool.submit(|| -> () { panic!("resume me") });
    let caught = std::panic::catch_unwind(move || match h.wait() {
        Err(RequestError::Panicked(p)) => p.resume(),
        other => panic!("{other:?}"),
    });
    let payload = caught.unwrap_err();
    assert_eq!(*payload.downcast::<&str>().unwrap(), "resume me");
}

// ---------------------------------------------------------------- abort

/// Holds every worker of `pool` until the returned flag is set.
fn hold_workers(pool: &Pool) -> (Arc<AtomicBool>, Vec<tailctl_rt::RequestHandle<()>>) {
    let gate = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicUsize::new(0));
    let hs = (0..pool.workers())
        .map(|_| {
            let (gate, held) = (Arc::clone(&gate), Arc::clone(&held));
            pool.submit(move || {
                held.fetch_add(1, Ordering::SeqCst);
                until(&gate);
            })
        })
        .collect();
    while held.load(Ordering::SeqCst) < pool.workers() {
        std::thread::yield_now();
    }
    (gate, hs)
}

#[test]
fn abort_before_start_never_runs() {
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let (gate, blockers) = hold_workers(&pool);
        let ran = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let ran = Arc::clone(&ran);
                pool.submit(move || ran.store(true, Ordering::SeqCst))
            })
            .collect();
        for h in &hs {
            assert!(h.abort(), "{policy}");
            assert!(h.abort(), "a second abort still reports not finished");
        }
        gate.store(true, Ordering::SeqCst);
        for h in hs {
            assert_eq!(h.wait(), Err(RequestError::Aborted), "{policy}");
        }
        for b in blockers {
            b.wait().unwrap();
        }
        assert!(!ran.load(Ordering::SeqCst), "{policy}");
        let s = pool.stats();
        assert_eq!((s.aborted, s.completed, s.active), (4, 6, 0), "{policy}");
        // The pool keeps serving.
        assert_eq!(pool.submit(|| fib(10)).wait().unwrap(), 55);
    }
}

/// A request that never ends unless aborted, running `step` forever.
fn abort_during(policy: Policy, step: fn()) {
    let pool = pool(policy, 2);
    let started = Arc::new(AtomicBool::new(false));
    let after = Arc::new(AtomicBool::new(false));
    let (s2, a2) = (Arc::clone(&started), Arc::clone(&after));
    let h = pool.submit(move || {
        s2.store(true, Ordering::SeqCst);
        while !a2.load(Ordering::Relaxed) {
            step();
        }
        // Only reachable if an abort were ignored and `after` set.
        unreachable!("an aborted request does not leave its loop normally")
    });
    until(&started);
    assert!(h.abort(), "{policy}");
    assert_eq!(h.wait(), Err(RequestError::Aborted), "{policy}");
    after.store(true, Ordering::SeqCst);
    assert!(!h_is_counted_as_panic(&pool), "{policy}");
    assert_eq!(pool.stats().aborted, 1, "{policy}");
    assert_eq!(pool.active_requests(), 0);
    assert_eq!(pool.submit(|| fib(10)).wait().unwrap(), 55, "{policy}");
}

fn h_is_counted_as_panic(pool: &Pool) -> bool {
    pool.stats().panicked != 0
}

#[test]
fn abort_during_a_parallel_for_loop() {
    for policy in Policy::ALL {
        abort_during(policy, || {
            let n = AtomicUsize::new(0);
            parallel_for(0..1000, 10, |_| {
                n.fetch_add(1, Ordering::Relaxed);
            });
        });
    }
}

#[test]
fn abort_during_joins() {
    for policy in Policy::ALL {
        abort_during(policy, || {
            fib(12);
        });
    }
}

#[test]
fn abort_during_scope_spawns() {
    for policy in Policy::ALL {
        abort_during(policy, || {
            scope(|s| {
                for _ in 0..8 {
                    s.spawn(|_| {
                        fib(8);
                    });
                }
            });
        });
    }
}

#[test]
fn abort_during_parallel_iterators() {
    use tailctl_rt::iter::*;
    for policy in Policy::ALL {
        abort_during(policy, || {
            let v: Vec<u64> = (0..1000u64).into_par_iter().map(|x| x * 2).collect();
            assert_eq!(v.len(), 1000);
        });
    }
}

#[test]
fn an_aborted_request_that_returns_anyway_drops_its_value() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let pool = pool(Policy::StealFirst, 1);
    let (started, dropped) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (s2, d2) = (Arc::clone(&started), Arc::clone(&dropped));
    let h = pool.submit(move || {
        s2.store(true, Ordering::SeqCst);
        // No checkpoint: poll, then return normally.
        while !is_current_request_aborted() {
            std::thread::yield_now();
        }
        Flag(d2)
    });
    until(&started);
    assert!(h.abort());
    assert!(matches!(h.wait(), Err(RequestError::Aborted)));
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn abort_after_completion_has_no_effect() {
    let pool = pool(Policy::StealFirst, 1);
    let h = pool.submit(|| 7);
    while !h.is_finished() {
        std::thread::yield_now();
    }
    assert!(!h.abort());
    assert_eq!(h.wait(), Ok(7));
    assert_eq!(pool.stats().aborted, 0);
}

#[test]
fn aborting_one_request_leaves_the_others_alone() {
    let pool = pool(Policy::StealFirst, 2);
    let started = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&started);
    let victim = pool.submit(move || {
        s2.store(true, Ordering::SeqCst);
        loop {
            fib(10);
        }
    });
    let others: Vec<_> = (0..scale(50, 4) as u64)
        .map(|i| pool.submit(move || fib(12) + i))
        .collect();
    until(&started);
    assert!(victim.abort());
    for (i, h) in others.into_iter().enumerate() {
        assert_eq!(h.wait().unwrap(), 144 + i as u64);
    }
    assert_eq!(victim.wait(), Err(RequestError::Aborted));
}

// ---------------------------------------------------------------- handles

#[test]
fn a_cloned_handle_submits_from_8_threads() {
    let pool = pool(Policy::TailControl, 2);
    let handle = pool.handle();
    let per_thread = scale(100, 3);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let h = handle.clone();
            std::thread::spawn(move || {
                let hs: Vec<_> = (0..per_thread as u64)
                    .map(|i| h.submit(move || join(|| t * 1000, || i).0 + i))
                    .collect();
                hs.into_iter()
                    .enumerate()
                    .all(|(i, r)| r.wait().unwrap() == t * 1000 + i as u64)
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap());
    }
    let s = pool.stats();
    assert_eq!(
        (s.submitted, s.completed),
        (8 * per_thread as u64, 8 * per_thread as u64)
    );
    assert_eq!(handle.stats().unwrap().completed, s.completed);
}

#[test]
fn handles_racing_with_the_pools_drop_see_results_or_shutdown() {
    let pool = pool(Policy::StealFirst, 2);
    let handle = pool.handle();
    let go = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (h, go) = (handle.clone(), Arc::clone(&go));
            std::thread::spawn(move || {
                until(&go);
                let (mut ok, mut refused) = (0, 0);
                for i in 0..scale(200, 5) {
                    match h.submit(move || i).wait() {
                        Ok(v) => {
                            assert_eq!(v, i);
                            ok += 1;
                        }
                        Err(RequestError::ShutDown) => refused += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                (ok, refused)
            })
        })
        .collect();
    go.store(true, Ordering::SeqCst);
    drop(pool);
    for t in threads {
        let (ok, refused) = t.join().unwrap();
        assert_eq!(ok + refused, scale(200, 5));
    }
    assert_eq!(handle.submit(|| 1).wait(), Err(RequestError::ShutDown));
    assert!(handle.stats().is_none());
}

#[test]
fn a_handle_may_own_the_last_pool() {
    // The refused closure owns the pool: it is dropped outside the gate.
    let pool = Arc::new(pool(Policy::StealFirst, 1));
    let handle = pool.handle();
    pool.close();
    let p2 = Arc::clone(&pool);
    drop(pool);
    let r = handle.submit(move || {
        let _p = p2;
    });
    assert_eq!(r.wait(), Err(RequestError::ShutDown));
}

// ---------------------------------------------------------------- spawn

#[test]
fn spawn_runs() {
    let pool = pool(Policy::StealFirst, 2);
    let (tx, rx) = mpsc::channel();
    let tx1 = tx.clone();
    pool.spawn(move || tx1.send("pool").unwrap());
    let tx2 = tx.clone();
    pool.handle().spawn(move || tx2.send("handle").unwrap());
    pool.submit(move || {
        tailctl_rt::spawn(move || tx.send("worker").unwrap());
    })
    .wait()
    .unwrap();
    let mut got: Vec<&str> = rx.iter().take(3).collect();
    got.sort();
    assert_eq!(got, ["handle", "pool", "worker"]);
}

#[test]
fn spawn_panics_are_reported_not_lost() {
    let (tx, rx) = mpsc::channel::<String>();
    let tx = Mutex::new(tx);
    let pool = Pool::builder()
        .workers(2)
        .panic_handler(move |p| {
            let msg = tailctl_rt::RequestPanic::from(p).message().to_string();
            tx.lock().unwrap().send(msg).unwrap();
        })
        .build()
        .unwrap();
    pool.spawn(|| panic!("spawned"));
    pool.submit(|| tailctl_rt::spawn(|| panic!("spawned on a worker")))
        .wait()
        .unwrap();
    let mut got: Vec<String> = rx.iter().take(2).collect();
    got.sort();
    assert_eq!(got, ["spawned", "spawned on a worker"]);
    assert_eq!(pool.stats().panicked, 2);
    pool.shutdown();
}

#[test]
fn spawn_outside_a_pool_panics_with_a_clear_message() {
    let err = std::panic::catch_unwind(|| tailctl_rt::spawn(|| ())).unwrap_err();
    let msg = err
        .downcast::<&str>()
        .map(|s| s.to_string())
        .unwrap_or_else(|e| *e.downcast::<String>().unwrap());
    assert!(msg.contains("outside a pool"), "{msg}");
}

// ---------------------------------------------------------------- builder

#[test]
fn build_errors_are_typed() {
    use std::error::Error;
    let e = Pool::builder().workers(65).build().unwrap_err();
    assert!(matches!(
        e,
        BuildError::InvalidWorkerCount {
            requested: 65,
            max: 64
        }
    ));
    let e = Pool::builder()
        .workers(2)
        .shared_state(tailctl_rt::shared_state::SharedState::new(3))
        .build()
        .unwrap_err();
    assert!(matches!(
        e,
        BuildError::SharedStateMismatch {
            table_workers: 3,
            pool_workers: 2
        }
    ));
    let e = Pool::builder()
        .workers(1)
        .thresholds(ThresholdTable::from_thresholds(vec![None]))
        .build()
        .unwrap_err();
    assert!(matches!(
        e,
        BuildError::ThresholdsNeedTailControl {
            policy: Policy::StealFirst
        }
    ));
    assert!(e.source().is_none());
    let e = Pool::builder()
        .workers(1)
        .target_latency(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(matches!(e, BuildError::ZeroTargetLatency));
    // A stack larger than any address space: the OS refuses the thread.
    let e = Pool::builder()
        .workers(2)
        .stack_size(usize::MAX / 4)
        .build()
        .unwrap_err();
    assert!(
        matches!(e, BuildError::ThreadSpawn { index: 0, .. }),
        "{e:?}"
    );
    assert!(e.source().is_some());
    assert!(
        e.to_string().starts_with("cannot start worker thread 0: "),
        "{e}"
    );
}

#[test]
fn current_num_threads_and_index() {
    let pool = pool(Policy::StealFirst, 3);
    let (n, i) = pool
        .submit(|| {
            (
                tailctl_rt::current_num_threads(),
                tailctl_rt::current_thread_index(),
            )
        })
        .wait()
        .unwrap();
    assert_eq!(n, 3);
    assert!(i.unwrap() < 3);
    assert_eq!(
        tailctl_rt::current_num_threads(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    assert_eq!(tailctl_rt::current_thread_index(), None);
}

// ---------------------------------------------------------------- scope_fifo

#[test]
fn scope_fifo_runs_spawns_in_order_on_one_worker() {
    use tailctl_rt::scope_fifo;
    for policy in Policy::ALL {
        let pool = pool(policy, 1);
        let (fifo, lifo) = pool
            .submit(|| {
                let fifo = Mutex::new(Vec::new());
                scope_fifo(|s| {
                    for i in 0..20 {
                        let fifo = &fifo;
                        s.spawn_fifo(move |_| fifo.lock().unwrap().push(i));
                    }
                });
                // The same with a plain scope, for contrast: newest first.
                let lifo = Mutex::new(Vec::new());
                scope(|s| {
                    for i in 0..20 {
                        let lifo = &lifo;
                        s.spawn(move |_| lifo.lock().unwrap().push(i));
                    }
                });
                (fifo.into_inner().unwrap(), lifo.into_inner().unwrap())
            })
            .wait()
            .unwrap();
        assert_eq!(fifo, (0..20).collect::<Vec<_>>(), "{policy}");
        assert_eq!(lifo, (0..20).rev().collect::<Vec<_>>(), "{policy}");
    }
}

#[test]
fn scope_fifo_nested_spawns_queue_behind_older_ones() {
    // One worker: 0 and 1 are queued; 0 spawns 2, which runs after 1.
    let pool = pool(Policy::StealFirst, 1);
    let order = pool
        .submit(|| {
            let order = Mutex::new(Vec::new());
            tailctl_rt::scope_fifo(|s| {
                let order = &order;
                s.spawn_fifo(move |s| {
                    order.lock().unwrap().push(0);
                    s.spawn_fifo(move |_| order.lock().unwrap().push(2));
                });
                s.spawn_fifo(move |_| order.lock().unwrap().push(1));
            });
            order.into_inner().unwrap()
        })
        .wait()
        .unwrap();
    assert_eq!(order, [0, 1, 2]);
}

#[test]
fn scope_fifo_runs_every_spawn_once_and_propagates_panics() {
    for policy in Policy::ALL {
        let pool = pool(policy, 3);
        let n = scale(2000, 20);
        let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
        let h2 = Arc::clone(&hits);
        pool.submit(move || {
            tailctl_rt::scope_fifo(|s| {
                for i in 0..n {
                    let h2 = &h2;
                    s.spawn_fifo(move |s| {
                        if i % 2 == 0 {
                            s.spawn_fifo(move |_| {
                                h2[i].fetch_add(1, Ordering::Relaxed);
                            });
                        } else {
                            h2[i].fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            })
        })
        .wait()
        .unwrap();
        assert!(
            hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
            "{policy}"
        );
        let r = pool
            .submit(|| tailctl_rt::scope_fifo(|s| s.spawn_fifo(|_| panic!("fifo spawn"))))
            .wait();
        let p = r.unwrap_err().try_into_panic().unwrap();
        assert_eq!(*p.downcast::<&str>().unwrap(), "fifo spawn");
    }
}

// ---------------------------------------------------------------- par_iter

/// Sizes around the splitting boundaries: 0, 1, primes, and pieces that do
/// not divide evenly.
const SIZES: [usize; 10] = [0, 1, 2, 3, 7, 64, 1000, 1023, 1025, 10_007];

#[test]
fn par_iter_matches_sequential_results() {
    use tailctl_rt::prelude::*;
    for policy in [
        Policy::StealFirst,
        Policy::TailControl,
        Policy::RandomAdmission,
    ] {
        for workers in [1, 3] {
            let pool = pool(policy, workers);
            for n in SIZES {
                for min_len in [1, 3, 1000] {
                    let ctx = format!("{policy} workers {workers} n {n} min_len {min_len}");
                    let data: Vec<u64> = (0..n as u64).map(|x| x * 7 + 1).collect();
                    let expect_map: Vec<u64> = data.iter().map(|x| x * x % 1009).collect();
                    let expect_sum: u64 = data.iter().sum();
                    let expect_range_sum: u64 = (0..n as u64).sum();
                    let expect_enum: Vec<(usize, u64)> = data.iter().copied().enumerate().collect();
                    let got = pool
                        .submit(move || {
                            let mapped: Vec<u64> = data
                                .par_iter()
                                .with_min_len(min_len)
                                .map(|x| x * x % 1009)
                                .collect();
                            let sum: u64 = data.par_iter().with_min_len(min_len).sum();
                            let range_sum: u64 =
                                (0..n as u64).into_par_iter().with_min_len(min_len).sum();
                            let enumerated: Vec<(usize, u64)> = data
                                .par_iter()
                                .with_min_len(min_len)
                                .enumerate()
                                .map(|(i, x)| (i, *x))
                                .collect();
                            let mut doubled = data.clone();
                            doubled
                                .par_iter_mut()
                                .with_min_len(min_len)
                                .for_each(|x| *x *= 2);
                            let seen: Vec<AtomicUsize> =
                                (0..n).map(|_| AtomicUsize::new(0)).collect();
                            (0..n).into_par_iter().with_min_len(min_len).for_each(|i| {
                                seen[i].fetch_add(1, Ordering::Relaxed);
                            });
                            let once = seen.iter().all(|s| s.load(Ordering::Relaxed) == 1);
                            (mapped, sum, range_sum, enumerated, doubled, once, data)
                        })
                        .wait()
                        .unwrap();
                    let (mapped, sum, range_sum, enumerated, doubled, once, data) = got;
                    assert_eq!(mapped, expect_map, "{ctx}");
                    assert_eq!(sum, expect_sum, "{ctx}");
                    assert_eq!(range_sum, expect_range_sum, "{ctx}");
                    assert_eq!(enumerated, expect_enum, "{ctx}");
                    assert_eq!(
                        doubled,
                        data.iter().map(|x| x * 2).collect::<Vec<_>>(),
                        "{ctx}"
                    );
                    assert!(once, "{ctx}");
                }
            }
        }
    }
}

#[test]
fn par_iter_outside_a_pool_runs_sequentially_with_the_same_results() {
    use tailctl_rt::prelude::*;
    for n in SIZES {
        let v: Vec<i64> = (0..n as i64).map(|x| x - 5).collect();
        let m: Vec<i64> = v.par_iter().map(|x| x * 3).collect();
        assert_eq!(m, v.iter().map(|x| x * 3).collect::<Vec<_>>());
        assert_eq!(v.par_iter().sum::<i64>(), v.iter().sum::<i64>());
        // Sequential and in order: a plain Vec behind a Mutex sees 0..n.
        let order = Mutex::new(Vec::new());
        (0..n)
            .into_par_iter()
            .for_each(|i| order.lock().unwrap().push(i));
        assert_eq!(order.into_inner().unwrap(), (0..n).collect::<Vec<_>>());
    }
}

#[test]
fn a_panic_in_a_par_iter_closure_reaches_the_request_handle() {
    use tailctl_rt::prelude::*;
    for policy in Policy::ALL {
        let pool = pool(policy, 3);
        let in_map = pool.submit(|| {
            (0..10_000usize)
                .into_par_iter()
                .map(|i| {
                    if i == 6_789 {
                        panic!("in map");
                    }
                    i
                })
                .collect::<Vec<_>>()
        });
        let in_for_each = pool.submit(|| {
            let v: Vec<u32> = (0..5000).collect();
            v.par_iter()
                .for_each(|&x| assert!(x != 4321, "in for_each"));
        });
        let p = in_map.wait().unwrap_err().try_into_panic().unwrap();
        assert_eq!(*p.downcast::<&str>().unwrap(), "in map", "{policy}");
        match in_for_each.wait() {
            Err(RequestError::Panicked(p)) => assert_eq!(p.message(), "in for_each", "{policy}"),
            other => panic!("{policy}: {other:?}"),
        }
        // The pool keeps serving.
        let s: u64 = pool
            .submit(|| (0..100u64).into_par_iter().sum())
            .wait()
            .unwrap();
        assert_eq!(s, 4950);
    }
}

// ---------------------------------------------------------------- counters

/// Sets its flags when dropped, so a failed assertion unwinds into a pool
/// whose workers can finish (the pool's drop joins them) instead of a hang.
struct SetOnDrop(Vec<Arc<AtomicBool>>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        for f in &self.0 {
            f.store(true, Ordering::SeqCst);
        }
    }
}

/// A join whose other half a thief holds makes its worker yield and then
/// park inside the join (`join_parks`), and only there: while the thief is
/// busy and the owner waits in the join, no top-level park is counted. Once
/// the request is done, idle workers park at top level (`parks`). What the
/// job experiment reads to tell where CPU went.
#[test]
fn yields_and_parks_are_counted_apart_from_join_parks() {
    let (b_started, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let pool = Arc::new(Pool::builder().workers(2).spin_rounds(16).build().unwrap());
    // Declared after the pool: dropped first, on success and on a failed assertion alike.
    let _unblock = SetOnDrop(vec![b_started.clone(), release.clone()]);
    let (bs, rel) = (b_started.clone(), release.clone());
    let h = pool.submit(move || {
        let bs2 = bs.clone();
        join(
            // The owner runs this half until the thief has taken the other.
            move || until(&bs2),
            move || {
                bs.store(true, Ordering::SeqCst);
                until(&rel);
            },
        );
    });
    until(&b_started);
    // Both workers are busy now (the thief in its half, the owner in the join).
    let parks_before = pool.stats().parks;
    common::eventually("a park inside a join", || pool.stats().join_parks >= 1);
    assert_eq!(
        pool.stats().parks,
        parks_before,
        "a join's park counted as top-level"
    );
    release.store(true, Ordering::SeqCst);
    h.wait().unwrap();
    common::eventually("a top-level park", || pool.stats().parks > parks_before);
    let s = pool.stats();
    assert!(s.yields >= 1, "{s:?}");
}
