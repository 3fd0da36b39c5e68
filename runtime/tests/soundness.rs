//! Soundness holes reachable from safe code: a panic that used to unwind
//! through the scheduler's own frames, a pool dropped on its own worker, and
//! waits across pools. Each test failed (or hung, or crashed) before its fix.
//!
//! No test asserts a timing. Where the old code hung or lost a worker, a test
//! gives up after `PATIENCE` and fails: that bound only turns a hang into a
//! failure, it is never what makes a passing test pass.
#![cfg(not(loom))]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};
use tailctl_rt::{current_worker_index, join, scope, serialize_current_request, Policy, Pool};

/// How long a test waits for something that must happen before it calls it
/// lost (a hang of the old code), generous for a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(30);

fn pool(policy: Policy, workers: usize) -> Pool {
    Pool::builder()
        .workers(workers)
        .policy(policy)
        .spin_rounds(8)
        .build()
        .unwrap()
}

/// Spins until `cond` holds; false if it did not within `PATIENCE`.
fn eventually(cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > PATIENCE {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Whether every worker of `pool` still serves: as many requests as workers,
/// each holding its worker until all of them run at once. A dead worker (or
/// one stuck in a blocking wait) leaves one request unadmitted.
fn every_worker_serves(pool: &Pool) -> bool {
    let n = pool.workers();
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let seen = Arc::clone(&seen);
            pool.submit(move || {
                seen.lock().unwrap().insert(current_worker_index().unwrap());
                eventually(|| seen.lock().unwrap().len() == n)
            })
        })
        .collect();
    hs.into_iter().all(|h| h.wait() == Ok(true))
}

/// A value whose destructor panics.
struct PanicOnDrop(&'static str);
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("{}", self.0);
        }
    }
}

/// A gate the test opens once it set things up.
#[derive(Clone, Default)]
struct Gate(Arc<AtomicBool>);
impl Gate {
    fn open(&self) {
        self.0.store(true, Ordering::Release);
    }
    fn wait(&self) {
        assert!(
            eventually(|| self.0.load(Ordering::Acquire)),
            "gate never opened"
        );
    }
}

/// The handle is dropped, so the worker drops the request's result; its
/// destructor panics. That panic used to unwind out of the worker's loop and
/// kill the worker (its deque stranded): the pool then ran on fewer workers.
#[test]
fn a_result_whose_drop_panics_does_not_kill_the_worker() {
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let gate = Gate::default();
        let g = gate.clone();
        drop(pool.submit(move || {
            g.wait();
            PanicOnDrop("result drop")
        }));
        gate.open();
        assert!(
            eventually(|| pool.stats().swallowed_panics == 1),
            "{policy}"
        );
        assert!(every_worker_serves(&pool), "{policy}");
        assert!(every_worker_serves(&pool), "{policy}");
    }
}

/// A request that panics with a payload whose destructor panics too, and
/// whose handle is gone: the worker holds the last reference to the payload
/// (kept in the request's `RequestPanic`) and drops it.
#[test]
fn a_panic_payload_whose_drop_panics_does_not_kill_the_worker() {
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let gate = Gate::default();
        let g = gate.clone();
        drop(pool.submit(move || -> u32 {
            g.wait();
            std::panic::panic_any(PanicOnDrop("payload drop"))
        }));
        gate.open();
        if !eventually(|| pool.stats().completed == 1) {
            std::mem::forget(pool);
            panic!("{policy}: the request never completed");
        }
        assert!(
            eventually(|| pool.stats().swallowed_panics == 1),
            "{policy}"
        );
        assert!(every_worker_serves(&pool), "{policy}");
    }
}

/// The same payload, waited for: it reaches the handle intact (the worker
/// drops nothing), and the waiter decides what becomes of it.
#[test]
fn a_panic_payload_whose_drop_panics_reaches_the_handle() {
    let pool = pool(Policy::StealFirst, 2);
    let r = pool.submit(|| -> u32 { std::panic::panic_any(PanicOnDrop("payload drop")) });
    let payload = r.wait().unwrap_err().try_into_panic().unwrap();
    assert!(payload.is::<PanicOnDrop>());
    std::mem::forget(payload); // its drop would panic here
    assert_eq!(pool.stats().swallowed_panics, 0);
    assert!(every_worker_serves(&pool));
}

/// A spawned request (no handle) whose payload's destructor panics: without
/// a panic handler, the worker drops the payload.
#[test]
fn a_spawned_panic_payload_whose_drop_panics_does_not_kill_the_worker() {
    let pool = pool(Policy::StealFirst, 2);
    pool.spawn(|| std::panic::panic_any(PanicOnDrop("spawn payload drop")));
    assert!(eventually(|| pool.stats().swallowed_panics == 1));
    assert_eq!(pool.stats().panicked, 1);
    assert!(every_worker_serves(&pool));
}

/// A panic handler that panics, with a payload whose destructor panics too.
#[test]
fn a_panicking_panic_handler_does_not_kill_the_worker() {
    let pool = Pool::builder()
        .workers(2)
        .spin_rounds(8)
        .panic_handler(|_payload| panic!("handler"))
        .build()
        .unwrap();
    pool.spawn(|| panic!("spawned"));
    assert!(eventually(|| pool.stats().swallowed_panics == 1));
    assert!(every_worker_serves(&pool));
}

/// A request aborted while it runs returns a value anyway: the worker drops
/// it, and its destructor panics.
#[test]
fn an_aborted_value_whose_drop_panics_does_not_kill_the_worker() {
    let pool = pool(Policy::StealFirst, 2);
    let started = Gate::default();
    let aborted = Gate::default();
    let (s, a) = (started.clone(), aborted.clone());
    let h = pool.submit(move || {
        s.open();
        a.wait(); // no checkpoint after this: the closure returns
        PanicOnDrop("aborted value drop")
    });
    started.wait();
    assert!(h.abort());
    aborted.open();
    assert!(matches!(h.wait(), Err(tailctl_rt::RequestError::Aborted)));
    assert!(eventually(|| pool.stats().swallowed_panics == 1));
    assert!(every_worker_serves(&pool));
}

/// A value whose destructor panics even while the thread unwinds (where a
/// panic aborts the process).
struct AlwaysPanicOnDrop;
impl Drop for AlwaysPanicOnDrop {
    fn drop(&mut self) {
        panic!("always")
    }
}

/// A `scope_fifo` of an aborted request: its indirect tasks unwind at their
/// abort checkpoint and leave their bodies queued. Those bodies (and what
/// they captured) used to be dropped while the abort's unwind was in flight:
/// a panicking destructor there aborted the process. They are now dropped,
/// caught and counted before the unwind goes on.
#[test]
fn bodies_skipped_by_an_abort_are_dropped_before_the_unwind() {
    use tailctl_rt::{scope_fifo, RequestError};
    let pool = pool(Policy::StealFirst, 1);
    let started = Gate::default();
    let aborted = Gate::default();
    let (s, a) = (started.clone(), aborted.clone());
    let h = pool.submit(move || {
        scope_fifo(|sc| {
            for _ in 0..3 {
                let bomb = AlwaysPanicOnDrop;
                sc.spawn_fifo(move |_| {
                    std::mem::forget(bomb);
                    unreachable!("the request was aborted before its spawns ran")
                });
            }
            s.open();
            a.wait(); // one worker: no spawn runs before the abort
        })
    });
    started.wait();
    assert!(h.abort());
    aborted.open();
    assert!(matches!(h.wait(), Err(RequestError::Aborted)));
    assert!(eventually(|| pool.stats().swallowed_panics == 3));
    assert!(every_worker_serves(&pool));
}

/// Two spawns of a scope, each stolen by a worker at top level, panic with
/// such payloads: the scope keeps one and drops the other on the thief that
/// ran it. That drop used to unwind out of the spawn (and kill the thief)
/// without counting the spawn done: the scope waited forever.
#[test]
fn a_dropped_spawn_panic_payload_that_panics_does_not_hang_the_scope() {
    let pool = pool(Policy::StealFirst, 3);
    let h = pool.submit(|| {
        let started = AtomicUsize::new(0);
        scope(|s| {
            for k in 1..=2 {
                let started = &started;
                s.spawn(move |_| {
                    started.fetch_add(1, Ordering::SeqCst);
                    assert!(eventually(|| started.load(Ordering::SeqCst) == 2));
                    std::panic::panic_any(PanicOnDrop("spawn payload drop"))
                });
                // Let a thief take it before the next spawn (or the wait).
                assert!(eventually(|| started.load(Ordering::SeqCst) == k));
            }
        })
    });
    if !eventually(|| h.is_finished()) {
        std::mem::forget(pool); // a worker is stuck in the scope: do not join it
        panic!("the scope never finished");
    }
    // The kept payload is re-raised by `scope` and reaches the handle (whose
    // drop of it would panic here); the other was dropped on its thief.
    let payload = h.wait().unwrap_err().try_into_panic().unwrap();
    assert!(payload.is::<PanicOnDrop>());
    std::mem::forget(payload);
    assert!(eventually(|| pool.stats().swallowed_panics == 1));
    assert!(every_worker_serves(&pool));
}

struct PanicWaker;
impl Wake for PanicWaker {
    fn wake(self: Arc<Self>) {
        panic!("waker")
    }
}

/// The worker that completes a request wakes the task polling its handle; a
/// waker that panics used to unwind out of the worker and kill it.
#[test]
fn a_panicking_waker_does_not_kill_the_worker() {
    use std::future::Future;
    for policy in Policy::ALL {
        let pool = pool(policy, 2);
        let gate = Gate::default();
        let g = gate.clone();
        let mut h = pool.submit(move || {
            g.wait();
            7
        });
        let waker = Waker::from(Arc::new(PanicWaker));
        let mut cx = Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut h).poll(&mut cx).is_pending());
        gate.open();
        assert_eq!(h.wait(), Ok(7));
        assert!(
            eventually(|| pool.stats().swallowed_panics == 1),
            "{policy}"
        );
        assert!(every_worker_serves(&pool), "{policy}");
    }
}

/// The use-after-free: a worker waiting in a `join` of a serialized request
/// admits requests; if dropping one's result unwinds out of that `join`, the
/// join's frame (holding the stolen `job_b`) is gone while the thief still
/// runs `job_b` and will write its result and latch there. The request
/// waiting in the join must instead finish normally.
#[test]
fn a_panicking_drop_inside_a_join_does_not_unwind_through_it() {
    let pool = Arc::new(pool(Policy::StealFirst, 2));
    let b_started = Gate::default();
    let a_done = Gate::default();
    let release_b = Gate::default();
    let (bs, ad, rb) = (b_started.clone(), a_done.clone(), release_b.clone());
    let r1 = pool.submit(move || {
        let here = current_worker_index();
        let (a, b) = join(
            || {
                bs.wait(); // b was stolen and runs on the other worker
                assert!(serialize_current_request());
                ad.open();
                1
            },
            || {
                bs.open();
                rb.wait();
                current_worker_index()
            },
        );
        (a, b != here)
    });
    a_done.wait();
    // The owner of r1 now waits in its join and admits (r1 is serialized).
    let ran = Arc::new(AtomicUsize::new(0));
    let ran2 = Arc::clone(&ran);
    drop(pool.submit(move || {
        ran2.fetch_add(1, Ordering::SeqCst);
        PanicOnDrop("inside a join")
    }));
    assert!(eventually(|| ran.load(Ordering::SeqCst) == 1));
    release_b.open();
    assert_eq!(r1.wait(), Ok((1, true)));
    assert_eq!(pool.stats().swallowed_panics, 1);
    assert!(every_worker_serves(&pool));
}

/// A memfd named `name`, sized for a region: mappable like the daemon's
/// `BPF_F_MMAPABLE` region map.
fn region_memfd(name: &str) -> std::os::fd::OwnedFd {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use tailctl_rt::shared_state::SharedRegion;
    let cname = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid C string; the returned fd is checked and then owned.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh fd nothing else owns.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<SharedRegion>().div_ceil(4096) * 4096;
    // SAFETY: resizing our own memfd.
    assert_eq!(
        unsafe { libc::ftruncate(memfd.as_raw_fd(), len as libc::off_t) },
        0
    );
    memfd
}

/// A stand-in for `scx_tailctl`: accepts one registration, hands out a
/// memfd as the region map (mappable like a `BPF_F_MMAPABLE` array) and
/// accepts the BIND; then holds the connection until the service closes it.
/// Returns the socket path and the memfd's name (to find its mapping).
fn fake_daemon(name: &str) -> (std::path::PathBuf, String) {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixListener;
    use tailctl_rt::kernel::protocol::Reply;
    use tailctl_rt::kernel::wire::{recv_line, send_line};

    let path = std::env::temp_dir().join(format!("tailctl-rt-{name}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let memfd_name = format!("tailctl-rt-{name}-{}", std::process::id());
    let memfd = region_memfd(&memfd_name);
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let ok = Reply::Ok { service: 0 }.to_line();
        let (register, _) = recv_line(&stream, 4096).unwrap();
        assert!(register.starts_with("REGISTER"), "{register}");
        send_line(&stream, &ok, Some(memfd.as_raw_fd())).unwrap();
        let (bind, _) = recv_line(&stream, 4096).unwrap();
        assert!(bind.starts_with("BIND"), "{bind}");
        send_line(&stream, &ok, None).unwrap();
        // Until the service goes away.
        let _ = recv_line(&stream, 4096);
    });
    (path, memfd_name)
}

/// A daemon that refuses the first BIND (or, alike, does not answer it in
/// time: an overloaded machine) used to fail `AssistedPool::start`, so the
/// service did not run at all (a job of the multiprogramming experiment
/// failed with EAGAIN in the guest). The pool must serve at once without the
/// kernel and register again, handing back the same region, until bound.
#[test]
#[cfg_attr(
    miri,
    ignore = "memfd, mmap of a file and unix sockets: not supported by Miri"
)]
fn a_refused_bind_leaves_a_working_pool_that_registers_again() {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixListener;
    use tailctl_rt::kernel::link::AssistedPool;
    use tailctl_rt::kernel::protocol::Reply;
    use tailctl_rt::kernel::wire::{recv_line, send_line};

    let path = std::env::temp_dir().join(format!("tailctl-rt-refuse-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let memfd = region_memfd("tailctl-rt-refuse");
    let daemon = std::thread::spawn(move || {
        let ok = Reply::Ok { service: 3 }.to_line();
        // First connection: registered, then the BIND is refused.
        let (first, _) = listener.accept().unwrap();
        let (register, _) = recv_line(&first, 4096).unwrap();
        assert!(register.starts_with("REGISTER"), "{register}");
        send_line(&first, &ok, Some(memfd.as_raw_fd())).unwrap();
        let (bind, _) = recv_line(&first, 4096).unwrap();
        assert!(bind.starts_with("BIND"), "{bind}");
        send_line(&first, &Reply::Err("busy".into()).to_line(), None).unwrap();
        // The service hangs up and comes back with the region it was given.
        let (second, _) = listener.accept().unwrap();
        let (register, region) = recv_line(&second, 4096).unwrap();
        assert!(register.starts_with("REGISTER"), "{register}");
        assert!(
            region.is_some(),
            "the second REGISTER must hand the region back"
        );
        send_line(&second, &ok, None).unwrap();
        let (bind, _) = recv_line(&second, 4096).unwrap();
        assert!(bind.starts_with("BIND"), "{bind}");
        send_line(&second, &ok, None).unwrap();
        // Until the service goes away.
        let _ = recv_line(&second, 4096);
    });
    let pool = AssistedPool::start(Pool::builder().workers(2), None, &path)
        .expect("a refused BIND must not fail the pool");
    // Serving from the start, assisted or not.
    assert_eq!(
        pool.submit(|| join(|| 20, || 22))
            .wait()
            .map(|(a, b)| a + b),
        Ok(42)
    );
    assert!(
        eventually(|| pool.is_kernel_assisted()),
        "never registered again"
    );
    assert_eq!(pool.registrations(), 1);
    assert_eq!(pool.service(), Some(3));
    drop(pool);
    daemon.join().unwrap();
    let _ = std::fs::remove_file(&path);
}

/// Whether this process still maps the memfd called `name`.
fn is_mapped(name: &str) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| l.contains(&format!("/memfd:{name} ")) || l.ends_with(&format!("/memfd:{name}")))
}

/// An `AssistedPool` dropped inside one of its own requests: the pool cannot
/// join its workers from one of them, so they outlive the drop and go on
/// writing into the region (this request's work and completion, at least).
/// The region used to be unmapped by that drop all the same: the worker then
/// wrote into unmapped memory (SIGSEGV, or another mapping's memory). The
/// mapping must live until the last worker exits, and then go.
#[test]
#[cfg_attr(
    miri,
    ignore = "memfd, mmap of a file and unix sockets: not supported by Miri"
)]
fn an_assisted_pool_dropped_on_its_own_worker_keeps_its_region_mapped() {
    use tailctl_rt::kernel::link::AssistedPool;
    use tailctl_rt::threshold::ThresholdTable;
    let (socket, memfd) = fake_daemon("own-worker-drop");
    let table = ThresholdTable::from_thresholds(vec![None, Some(Duration::from_millis(1))]);
    let builder = Pool::builder()
        .workers(2)
        .policy(Policy::TailControl)
        .thresholds(table.clone());
    let pool = Arc::new(AssistedPool::start(builder, Some(&table), &socket).unwrap());
    assert!(pool.is_kernel_assisted());
    assert!(is_mapped(&memfd));
    let gate = Gate::default();
    let (g, p2) = (gate.clone(), Arc::clone(&pool));
    let h = pool.submit(move || {
        g.wait();
        drop(p2); // the last reference: the pool is dropped on this worker
                  // The request goes on after the drop, publishing into the region.
        join(|| 1, || 2)
    });
    drop(pool);
    gate.open();
    assert_eq!(h.wait(), Ok((1, 2)));
    // Unmapped once the workers exited: not leaked either.
    assert!(eventually(|| !is_mapped(&memfd)));
    let _ = std::fs::remove_file(&socket);
}

/// A worker waiting on another pool's handle used to block outright: its
/// own pool lost the worker meanwhile, and two pools waiting on each other
/// deadlocked. Here a request of pool A waits for one of pool B, which
/// waits for a request it submits back to A: both pools have one worker,
/// so A's request completes only if A's worker serves A while it waits for
/// B, and B's worker serves B while it waits for A.
#[test]
fn pools_waiting_on_each_other_do_not_deadlock() {
    for policy in Policy::ALL {
        let a = Arc::new(pool(policy, 1));
        let b = Arc::new(pool(policy, 1));
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        let h = a.submit(move || {
            let a3 = Arc::clone(&a2);
            let inner = b2.submit(move || {
                let back = a3.submit(|| 40);
                back.wait().unwrap() + 1
            });
            inner.wait().unwrap() + 1
        });
        if !eventually(|| h.is_finished()) {
            // Both workers are stuck: do not join them.
            std::mem::forget((a, b));
            panic!("{policy}: the pools deadlocked");
        }
        assert_eq!(h.wait(), Ok(42), "{policy}");
        assert!(
            every_worker_serves(&a) && every_worker_serves(&b),
            "{policy}"
        );
    }
}

/// While it waits on another pool's handle, a worker keeps serving its own
/// pool: with pool A's only worker waiting for B, A's other requests still
/// run (they used to wait for B's request to finish first).
#[test]
fn a_worker_waiting_on_another_pool_serves_its_own() {
    let a = Arc::new(pool(Policy::StealFirst, 1));
    let b = pool(Policy::StealFirst, 1);
    let release = Gate::default();
    let r = release.clone();
    let on_b = b.submit(move || r.wait());
    let waiting = a.submit(move || on_b.wait());
    // Runs on A's only worker while it waits for B.
    let meanwhile = a.submit(|| 7);
    if !eventually(|| meanwhile.is_finished()) {
        release.open();
        panic!("pool A served nothing while its worker waited for pool B");
    }
    assert_eq!(meanwhile.wait(), Ok(7));
    release.open();
    assert_eq!(waiting.wait(), Ok(Ok(())));
}

/// `join` whose `a` panics (or unwinds at an abort checkpoint) while `b`
/// returns a value whose destructor panics: `b`'s result used to be dropped
/// while `a`'s panic unwound out of the `join`, which aborted the process.
/// It is now dropped, caught and counted first; `a`'s panic reaches the
/// handle.
#[test]
fn a_join_result_dropped_while_the_other_half_unwinds_does_not_abort() {
    for workers in [1, 2] {
        let pool = pool(Policy::StealFirst, workers);
        let h = pool.submit(|| {
            join(|| -> () { panic!("a") }, || AlwaysPanicOnDrop);
        });
        match h.wait() {
            Err(tailctl_rt::RequestError::Panicked(p)) => assert_eq!(p.message(), "a"),
            other => panic!("{other:?}"),
        }
        assert!(eventually(|| pool.stats().swallowed_panics == 1));
        assert!(every_worker_serves(&pool));
    }
}
