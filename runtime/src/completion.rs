//! The request-completion latch: set once by the worker that finishes the
//! request, waited on by a thread (`RequestHandle::wait`) or polled by an async
//! task (`RequestHandle` as a `Future`).
//!
//! Lock-free on the paths every request takes: one 32-bit state word (a
//! futex, `sync::FutexWord`) and the value in a cell beside it.
//!
//! * The completer writes the value, then sets `DONE` with one `fetch_or`
//!   (release: a reader that sees `DONE` sees the value). The bits it gets
//!   back say what else to do: `PARKED`, a thread sleeps on the word (one
//!   `futex` wake); `WAKER`, a poller left a waker (taken under the waker's
//!   lock and woken). With neither, completing is that one atomic operation.
//! * A waiting thread that does not see `DONE` sets `PARKED` with a
//!   compare-and-swap from the value it read, then sleeps on the word while
//!   it holds exactly that value. Either the completer's `fetch_or` comes
//!   first (the CAS fails and the loop sees `DONE`) or it comes after and
//!   returns `PARKED`, so the completer wakes the word; a wake between the
//!   CAS and the sleep is not lost because the kernel compares the word with
//!   the expected value before sleeping. No lost wake-up, no lock.
//! * A poller stores its waker under the waker lock (only pollers and a
//!   completer that saw `WAKER` take it), then sets `WAKER`. If the
//!   `fetch_or` returns `DONE`, the completer came first and the poll is
//!   ready; otherwise the completer's `fetch_or` comes later, returns
//!   `WAKER`, and it takes the waker under the lock, so it finds the latest
//!   one stored.
//! * The value is taken once (`TAKEN`, checked, so a second take panics
//!   rather than reading a moved-out value) and dropped by the latch's drop
//!   if never taken.
//!
//! Model-checked with loom (see the tests; `FutexWord` is a mutex and
//! condition variable there).

use crate::sync::{lock, FutexWord, Mutex};
use crate::unwind::call_catching;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::task::{Context, Poll, Waker};

/// The value is written and visible.
const DONE: u32 = 1;
/// A thread sleeps (or is about to) on the state word.
const PARKED: u32 = 2;
/// A waker is stored in `waker`.
const WAKER: u32 = 4;
/// The value was moved out.
const TAKEN: u32 = 8;

/// `repr(C)`: the state word first, so a request's state can put it on the
/// same 64 bytes as its other hot fields (see `pool::RequestShared`).
#[repr(C)]
pub(crate) struct Completion<T> {
    state: FutexWord,
    value: UnsafeCell<MaybeUninit<T>>,
    /// Touched only by pollers and by a completer that saw `WAKER`.
    waker: Mutex<Option<Waker>>,
}

// SAFETY: the value is written once by the completer before `DONE` is
// published (release) and read only by the single taker after it saw `DONE`
// (acquire), so shared references never access it concurrently; it moves
// between threads, hence `T: Send`. The rest are atomics and a mutex.
unsafe impl<T: Send> Sync for Completion<T> {}
// SAFETY: as above: owning the latch owns at most one `T`.
unsafe impl<T: Send> Send for Completion<T> {}

// A panic cannot leave the latch half-updated: the value is in place before
// `DONE` is set (one atomic step) and taken in one step; the waker lock
// holds no invariant across user code (the waker runs outside it).
impl<T> UnwindSafe for Completion<T> {}
impl<T> RefUnwindSafe for Completion<T> {}

impl<T> Completion<T> {
    pub(crate) fn new() -> Self {
        Completion {
            state: FutexWord::new(0),
            value: UnsafeCell::new(MaybeUninit::uninit()),
            waker: Mutex::new(None),
        }
    }

    /// Sets the value. Returns whether the waker's `wake` panicked (the
    /// panic is swallowed).
    ///
    /// # Safety
    /// At most once per latch (a request completes once: its root job runs
    /// once, or it was refused and never queued).
    #[must_use = "a swallowed waker panic should be counted"]
    pub(crate) unsafe fn complete(&self, value: T) -> bool {
        // SAFETY: the caller's contract.
        unsafe { self.complete_reporting(value) }.1
    }

    /// [`Self::complete`], also saying whether a waker was called (user
    /// code ran): `(waker called, waker panicked)`.
    ///
    /// # Safety
    /// As [`Self::complete`].
    pub(crate) unsafe fn complete_reporting(&self, value: T) -> (bool, bool) {
        // SAFETY: only the one completer writes the cell (contract), and no
        // reader touches it before `DONE`, which is set below.
        unsafe { (*self.value.get()).write(value) };
        let prev = self.state.fetch_or(DONE, AcqRel);
        debug_assert_eq!(prev & DONE, 0, "request completed twice");
        if prev & PARKED != 0 {
            self.state.wake_all();
        }
        if prev & WAKER != 0 {
            // Taken under the lock, woken outside it (user code).
            let waker = lock(&self.waker).take();
            if let Some(w) = waker {
                return (true, call_catching(|| w.wake()));
            }
        }
        (false, false)
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Acquire) & DONE != 0
    }

    /// Moves the value out; `s` is a state read (acquire) with `DONE`.
    fn take(&self, s: u32) -> T {
        debug_assert_ne!(s & DONE, 0);
        let prev = self.state.fetch_or(TAKEN, Acquire);
        assert_eq!(prev & TAKEN, 0, "request result already taken");
        // SAFETY: `DONE` was read with acquire, so the completer's write is
        // visible and finished; `TAKEN` was clear and is now set, so this is
        // the only read of the value, and the drop below skips it.
        unsafe { (*self.value.get()).assume_init_read() }
    }

    /// Blocks until the value is set and takes it.
    pub(crate) fn wait(&self) -> T {
        let mut s = self.state.load(Acquire);
        loop {
            if s & DONE != 0 {
                return self.take(s);
            }
            if s & PARKED == 0 {
                match self.state.compare_exchange(s, s | PARKED, Acquire, Acquire) {
                    Ok(_) => s |= PARKED,
                    Err(now) => {
                        s = now;
                        continue;
                    }
                }
            }
            self.state.wait(s);
            s = self.state.load(Acquire);
        }
    }

    /// Takes the value if set, else registers the waker.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<T> {
        let s = self.state.load(Acquire);
        if s & DONE != 0 {
            return Poll::Ready(self.take(s));
        }
        {
            let mut w = lock(&self.waker);
            match &*w {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => *w = Some(cx.waker().clone()),
            }
        }
        let prev = self.state.fetch_or(WAKER, AcqRel);
        if prev & DONE != 0 {
            // The completer came first and did not see `WAKER`: ready now
            // (the stored waker is dropped with the latch).
            return Poll::Ready(self.take(prev));
        }
        Poll::Pending
    }
}

impl<T> Drop for Completion<T> {
    fn drop(&mut self) {
        let s = self.state.load(Acquire);
        if s & DONE != 0 && s & TAKEN == 0 {
            // SAFETY: set (`DONE`) and never moved out (`TAKEN` clear), and
            // `&mut self` excludes every other access. A panicking drop of
            // `T` leaves nothing to drop twice: the cell is not read again.
            unsafe { self.value.get_mut().assume_init_drop() };
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
            // SAFETY: the only completion of this latch.
            let t = loom::thread::spawn(move || assert!(!unsafe { c2.complete(7u32) }));
            assert_eq!(c.wait(), 7);
            t.join().unwrap();
            assert!(c.is_done());
        });
    }

    /// The value a waiter takes is dropped once (by the waiter); a value
    /// nobody took is dropped with the latch.
    #[test]
    fn completion_drops_an_untaken_value_and_wakes_the_waiter() {
        loom::model(|| {
            let c = Arc::new(Completion::new());
            let c2 = c.clone();
            let v = std::sync::Arc::new(());
            let v2 = v.clone();
            // SAFETY: the only completion of this latch.
            let t = loom::thread::spawn(move || assert!(!unsafe { c2.complete(v2) }));
            drop(c.wait());
            t.join().unwrap();
            // The taken value was dropped once, by the waiter.
            assert_eq!(std::sync::Arc::strong_count(&v), 1);
            let c = Arc::new(Completion::new());
            // SAFETY: the only completion of this latch.
            assert!(!unsafe { c.complete(v.clone()) });
            assert_eq!(std::sync::Arc::strong_count(&v), 2);
            drop(c);
            // Never taken: dropped by the latch.
            assert_eq!(std::sync::Arc::strong_count(&v), 1);
        });
    }

    #[test]
    fn poll_never_loses_the_wakeup() {
        loom::model(|| {
            let c = Arc::new(Completion::new());
            let c2 = c.clone();
            // SAFETY: the only completion of this latch.
            let t = loom::thread::spawn(move || assert!(!unsafe { c2.complete(9u32) }));
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
