//! Mugging (issue 12, SAWS): deques of workers the kernel marked descheduled
//! are emptied first. The pool runs on an external region, as under
//! scx_tailctl, and the test writes a worker slot's `descheduled` field the
//! way the kernel does (a plain 32-bit store at the layout's offset); the
//! worker itself is kept off its deque by blocking in the OS, which is what
//! being descheduled looks like from user space.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use tailctl_rt::shared_state::{region_layout, SharedRegion, SharedState};
use tailctl_rt::Pool;

const TASKS: usize = 40;

/// Offset of worker `w`'s `descheduled` field in the region, from the
/// runtime's own layout table (the one scx_tailctl's tests check against C).
fn descheduled_offset(w: usize) -> usize {
    let l = region_layout();
    let find = |s: &str, f: &str| {
        l.iter()
            .find(|x| x.0 == s && x.1 == f)
            .unwrap_or_else(|| panic!("{s}.{f} in the layout"))
            .2
    };
    let slot = l
        .iter()
        .find(|x| x.0 == "tailctl_worker_slot" && x.1 == "<size>")
        .unwrap()
        .3;
    find("tailctl_region", "workers") + w * slot + find("tailctl_worker_slot", "descheduled")
}

/// What the kernel's `set_descheduled` does: one 32-bit store into the region.
fn kernel_mark(raw: *mut SharedRegion, w: usize, on: bool) {
    // SAFETY: the offset is inside the region (worker slot `w` < the pool's
    // workers), 4-aligned (the layout test checks the C layout, where the
    // field is a u32), and the memory is only ever accessed atomically.
    let f = unsafe { &*((raw as *mut u8).add(descheduled_offset(w)) as *const AtomicU32) };
    f.store(on as u32, Ordering::Relaxed);
}

/// Three workers: A and B each fill their own deque with `TASKS` tasks and
/// then block (off their deques, as if descheduled), C is the only worker
/// left running and drains both. With `mark`, A is flagged descheduled in
/// the region before it pushes. Returns the roles (0 = A, 1 = B) in the
/// order C ran their tasks, the pool's `desched_mugs`, and the sum of the
/// workers' `stealable_seen`.
struct St {
    arrive: Barrier,
    order: AtomicUsize,
    a_index: AtomicUsize,
    marked: AtomicUsize,
    pushed: AtomicUsize,
    done: AtomicUsize,
    /// (role, worker that ran it) per task, in the order they ran.
    ran: Mutex<Vec<(u8, usize)>>,
}

fn wait_for(c: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !c() {
        assert!(t0.elapsed() < Duration::from_secs(60), "test stalled");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn run(mark: bool) -> (Vec<u8>, u64, u64) {
    let layout = Layout::new::<SharedRegion>();
    // SAFETY: non-zero-sized layout; zeroed bytes are valid atomics.
    let raw = unsafe { alloc_zeroed(layout) } as *mut SharedRegion;
    let region = NonNull::new(raw).expect("allocation");
    let out;
    {
        // SAFETY: valid, aligned, large enough, and outlives the pool (shut
        // down at the end of this block, before the memory is freed).
        let state = unsafe { SharedState::from_raw(region, 3) };
        let pool = Pool::builder()
            .workers(3)
            .shared_state(state)
            .build()
            .unwrap();
        let st = Arc::new(St {
            arrive: Barrier::new(3),
            order: AtomicUsize::new(0),
            a_index: AtomicUsize::new(usize::MAX),
            marked: AtomicUsize::new(0),
            pushed: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            ran: Mutex::new(Vec::new()),
        });
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let st = Arc::clone(&st);
                pool.submit(move || {
                    // Blocking: the three requests end up on three workers.
                    st.arrive.wait();
                    let role = st.order.fetch_add(1, Ordering::SeqCst);
                    let me = tailctl_rt::current_thread_index().unwrap();
                    if role == 2 {
                        // C: returns once both deques are full, then drains them.
                        wait_for(|| st.pushed.load(Ordering::SeqCst) == 2);
                        return;
                    }
                    if role == 0 {
                        st.a_index.store(me, Ordering::SeqCst);
                        wait_for(|| st.marked.load(Ordering::SeqCst) == 1);
                    }
                    let st = &*st;
                    tailctl_rt::scope(|sc| {
                        for _ in 0..TASKS {
                            sc.spawn(move |_| {
                                let w = tailctl_rt::current_thread_index().unwrap();
                                st.ran.lock().unwrap().push((role as u8, w));
                                st.done.fetch_add(1, Ordering::SeqCst);
                            });
                        }
                        st.pushed.fetch_add(1, Ordering::SeqCst);
                        // Off the deque until every task ran elsewhere.
                        wait_for(|| st.done.load(Ordering::SeqCst) == 2 * TASKS);
                    });
                })
            })
            .collect();
        wait_for(|| st.a_index.load(Ordering::SeqCst) != usize::MAX);
        if mark {
            kernel_mark(raw, st.a_index.load(Ordering::SeqCst), true);
        }
        st.marked.store(1, Ordering::SeqCst);
        for h in hs {
            h.wait().unwrap();
        }
        let a_index = &st.a_index;
        if mark {
            kernel_mark(raw, a_index.load(Ordering::SeqCst), false);
        }
        let ran = std::mem::take(&mut *st.ran.lock().unwrap());
        assert_eq!(ran.len(), 2 * TASKS);
        // Every task ran on the one worker left (neither A nor B ran their own).
        let a = a_index.load(Ordering::SeqCst);
        let runners: std::collections::BTreeSet<usize> = ran.iter().map(|r| r.1).collect();
        assert_eq!(runners.len(), 1, "{ran:?}");
        assert!(!runners.contains(&a));
        let seen: u64 = (0..3)
            .map(|w| pool.shared_state().worker(w).stealable_seen() as u64)
            .sum();
        let mugs = pool.stats().desched_mugs;
        pool.shutdown();
        out = (ran.into_iter().map(|r| r.0).collect(), mugs, seen);
    }
    // SAFETY: allocated above with this layout; the pool is gone.
    unsafe { dealloc(raw as *mut u8, layout) };
    out
}

#[test]
fn a_descheduled_workers_deque_is_drained_first() {
    let (order, mugs, seen) = run(true);
    // Every task of the marked deque ran before any task of the unmarked one,
    // each through the mugging path.
    assert!(
        order[..TASKS].iter().all(|&r| r == 0),
        "order of roles: {order:?}"
    );
    assert_eq!(mugs, TASKS as u64);
    // The thief's searches saw the other deque's tasks (SAWS's Q, averaged).
    assert!(seen > 0);
}

#[test]
fn no_mugging_without_a_mark() {
    let (order, mugs, _) = run(false);
    assert_eq!(order.len(), 2 * TASKS);
    assert_eq!(mugs, 0);
}

#[test]
fn a_heap_region_is_never_read_for_marks() {
    let pool = Pool::builder().workers(2).build().unwrap();
    assert!(!pool.shared_state().is_external());
    let hs: Vec<_> = (0..8)
        .map(|i| {
            pool.submit(move || {
                tailctl_rt::scope(|s| {
                    for _ in 0..8 {
                        s.spawn(move |_| {
                            std::hint::black_box(i);
                        });
                    }
                })
            })
        })
        .collect();
    for h in hs {
        h.wait().unwrap();
    }
    assert_eq!(pool.stats().desched_mugs, 0);
}
