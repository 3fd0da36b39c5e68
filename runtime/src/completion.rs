//! The request-completion latch: set once by the worker that finishes the
//! request, waited on by a thread (`RequestHandle::wait`) or polled by an async
//! task (`RequestHandle` as a `Future`).
//!
//! One mutex guards a three-state slot (`Pending` with an optional waker,
//! `Ready`, `Taken`). The completer stores the value and takes the waker under
//! the lock, then notifies the condition variable and wakes the waker outside
//! it. A poller stores its waker under the same lock, so a completion either
//! happens before the poll (the poll sees `Ready`) or after it (the completer
//! finds and wakes the waker): no lost wake-up. A blocked `wait` is counted
//! under the lock too, and the completer notifies the condition variable only
//! if the count is non-zero: std's `notify_all` is a `futex` system call even
//! with nobody waiting, which was most of a worker's time on a stream of
//! tiny requests whose handles are waited for later. A waiter counts itself
//! and blocks under the lock (the wait releases it atomically), so the
//! completer either sees the count or the waiter sees `Ready`. An atomic
//! `done` flag lets `is_finished` avoid the lock. Model-checked with loom
//! (see the tests).

use crate::sync::{lock, wait, AtomicBool, Condvar, Mutex};
use crate::unwind::call_catching;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

enum Slot<T> {
    Pending(Option<Waker>),
    Ready(T),
    Taken,
}

struct Inner<T> {
    slot: Slot<T>,
    /// Threads blocked in `wait` (on `cond`).
    waiters: u32,
}

pub(crate) struct Completion<T> {
    slot: Mutex<Inner<T>>,
    cond: Condvar,
    done: AtomicBool,
}

impl<T> Completion<T> {
    pub(crate) fn new() -> Self {
        Completion {
            slot: Mutex::new(Inner {
                slot: Slot::Pending(None),
                waiters: 0,
            }),
            cond: Condvar::new(),
            done: AtomicBool::new(false),
        }
    }

    /// Sets the value. Must be called at most once. Returns whether the
    /// waker's `wake` panicked (the panic is swallowed).
    #[must_use = "a swallowed waker panic should be counted"]
    pub(crate) fn complete(&self, value: T) -> bool {
        self.complete_reporting(value).1
    }

    /// [`Self::complete`], also saying whether a waker was called (user
    /// code ran): `(waker called, waker panicked)`.
    pub(crate) fn complete_reporting(&self, value: T) -> (bool, bool) {
        let (waker, waiters) = {
            let mut g = lock(&self.slot);
            let old = std::mem::replace(&mut g.slot, Slot::Ready(value));
            self.done.store(true, Ordering::Release);
            match old {
                Slot::Pending(w) => (w, g.waiters),
                _ => panic!("request completed twice"),
            }
        };
        if waiters > 0 {
            self.cond.notify_all();
        }
        match waker {
            Some(w) => (true, call_catching(|| w.wake())),
            None => (false, false),
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Blocks until the value is set and takes it.
    pub(crate) fn wait(&self) -> T {
        let mut g = lock(&self.slot);
        loop {
            match std::mem::replace(&mut g.slot, Slot::Taken) {
                Slot::Ready(v) => return v,
                Slot::Taken => panic!("request result already taken"),
                pending => {
                    g.slot = pending;
                    g.waiters += 1;
                    g = wait(&self.cond, g);
                    g.waiters -= 1;
                }
            }
        }
    }

    /// Takes the value if set, else registers the waker.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<T> {
        let mut g = lock(&self.slot);
        match std::mem::replace(&mut g.slot, Slot::Taken) {
            Slot::Ready(v) => Poll::Ready(v),
            Slot::Taken => panic!("request result already taken"),
            Slot::Pending(_) => {
                g.slot = Slot::Pending(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, SeqCst);
        }
    }

    #[test]
    fn wait_sees_completion_exactly_once() {
        loom::model(|| {
            let c = Arc::new(Completion::new());
            let c2 = c.clone();
            let t = loom::thread::spawn(move || assert!(!c2.complete(7u32)));
            assert_eq!(c.wait(), 7);
            t.join().unwrap();
            assert!(c.is_done());
        });
    }

    #[test]
    fn poll_never_loses_the_wakeup() {
        loom::model(|| {
            let c = Arc::new(Completion::new());
            let c2 = c.clone();
            let t = loom::thread::spawn(move || assert!(!c2.complete(9u32)));
            let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
            let waker = Waker::from(flag.clone());
            let mut cx = Context::from_waker(&waker);
            match c.poll(&mut cx) {
                Poll::Ready(v) => assert_eq!(v, 9),
                Poll::Pending => {
                    // Not ready: the completer must wake us, then it is ready.
                    while !flag.0.load(SeqCst) {
                        loom::thread::yield_now();
                    }
                    assert_eq!(c.poll(&mut cx), Poll::Ready(9));
                }
            }
            t.join().unwrap();
        });
    }
}
