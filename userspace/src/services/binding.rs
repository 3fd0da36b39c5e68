//! Writing and removing worker bindings (tid -> service, worker) in the
//! scheduler's `worker_tids` map, all or nothing.
//!
//! A binding names one thread, not a tid number: it carries the thread's
//! process and start time, which the scheduler compares with the task's (see
//! `identity`). An entry whose thread is gone is stale: it can be replaced,
//! and its service's clean-up must not remove a newer binding of the tid.

use std::collections::HashSet;

use crate::bpf_intf::tailctl_worker_ref;

use super::identity::Thread;

/// The operations binding needs from `worker_tids` (a trait so the logic is
/// tested on the host without a BPF map).
pub trait TidMap {
    fn get(&self, tid: u32) -> Option<tailctl_worker_ref>;
    /// Insert only if `tid` has no entry (BPF_NOEXIST).
    fn insert_new(&self, tid: u32, v: &tailctl_worker_ref) -> Result<(), String>;
    fn remove(&self, tid: u32);
}

fn entry(slot: u32, worker: u32, th: &Thread) -> tailctl_worker_ref {
    tailctl_worker_ref {
        service: slot,
        worker,
        tgid: th.tgid,
        reserved: 0,
        start_ticks: th.start_ticks,
    }
}

/// Whether `r` names this very thread (not just its tid number).
fn names(r: &tailctl_worker_ref, th: &Thread) -> bool {
    r.tgid == th.tgid && r.start_ticks == th.start_ticks
}

/// A tid may appear once in a request.
pub fn check_unique(tids: &[u32]) -> Result<(), String> {
    let mut seen = HashSet::with_capacity(tids.len());
    match tids.iter().find(|t| !seen.insert(**t)) {
        Some(t) => Err(format!("tid {t} is listed twice")),
        None => Ok(()),
    }
}

/// Bind `threads` as workers `first..` of service `slot`. On any failure the
/// bindings made by this call are removed again: nothing outlives a refused
/// request.
pub fn bind_all(m: &impl TidMap, slot: u32, first: u32, threads: &[Thread]) -> Result<(), String> {
    let tids: Vec<u32> = threads.iter().map(|t| t.tid).collect();
    check_unique(&tids)?;
    for (i, th) in threads.iter().enumerate() {
        if let Some(old) = m.get(th.tid) {
            if names(&old, th) {
                unbind(m, slot, &threads[..i]);
                return Err(format!("tid {} is already registered", th.tid));
            }
            // Left by a thread that exited (its tid was reused): names nobody.
            m.remove(th.tid);
        }
        if let Err(e) = m.insert_new(th.tid, &entry(slot, first + i as u32, th)) {
            unbind(m, slot, &threads[..i]);
            return Err(format!("binding tid {}: {e}", th.tid));
        }
    }
    Ok(())
}

/// Remove the bindings of `threads` that still belong to `slot`: a tid may
/// have been bound again since, to a newer thread, by another service.
pub fn unbind(m: &impl TidMap, slot: u32, threads: &[Thread]) {
    for th in threads {
        if let Some(r) = m.get(th.tid) {
            if r.service == slot && names(&r, th) {
                m.remove(th.tid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// worker_tids as a hash map, optionally refusing one tid (a racing binder).
    #[derive(Default)]
    struct FakeMap {
        m: RefCell<HashMap<u32, tailctl_worker_ref>>,
        refuse: Option<u32>,
    }

    impl TidMap for FakeMap {
        fn get(&self, tid: u32) -> Option<tailctl_worker_ref> {
            self.m.borrow().get(&tid).copied()
        }
        fn insert_new(&self, tid: u32, v: &tailctl_worker_ref) -> Result<(), String> {
            if self.refuse == Some(tid) || self.m.borrow().contains_key(&tid) {
                return Err("File exists".into());
            }
            self.m.borrow_mut().insert(tid, *v);
            Ok(())
        }
        fn remove(&self, tid: u32) {
            self.m.borrow_mut().remove(&tid);
        }
    }

    fn th(tid: u32, start: u64) -> Thread {
        Thread {
            tid,
            tgid: 100,
            start_ticks: start,
            fd: None,
        }
    }

    #[test]
    fn duplicates_are_refused_and_leave_nothing() {
        let m = FakeMap::default();
        let e = bind_all(&m, 3, 0, &[th(7, 1), th(7, 1)]).unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(m.m.borrow().is_empty());
    }

    #[test]
    fn a_failed_insert_rolls_back_the_earlier_ones() {
        let m = FakeMap {
            refuse: Some(9),
            ..Default::default()
        };
        assert!(bind_all(&m, 3, 0, &[th(7, 1), th(8, 1), th(9, 1)]).is_err());
        assert!(m.m.borrow().is_empty());
    }

    #[test]
    fn a_live_binding_is_not_taken_over_and_not_removed() {
        let m = FakeMap::default();
        bind_all(&m, 1, 0, &[th(7, 5)]).unwrap();
        // Another service naming the same thread: refused, slot 1's entry stays.
        assert!(bind_all(&m, 2, 0, &[th(6, 5), th(7, 5)])
            .unwrap_err()
            .contains("already registered"));
        assert_eq!(m.get(7).unwrap().service, 1);
        assert!(m.get(6).is_none());
    }

    #[test]
    fn a_stale_binding_is_replaced_and_its_owner_leaves_the_new_one_alone() {
        let m = FakeMap::default();
        bind_all(&m, 1, 0, &[th(7, 5)]).unwrap();
        // Thread 7 exited; a new thread got tid 7 (start 9) and service 2 binds it.
        bind_all(&m, 2, 4, &[th(7, 9)]).unwrap();
        let r = m.get(7).unwrap();
        assert_eq!((r.service, r.worker, r.start_ticks), (2, 4, 9));
        // Service 1 unregisters: it removes only what is still its own.
        unbind(&m, 1, &[th(7, 5)]);
        assert_eq!(m.get(7).unwrap().service, 2);
        unbind(&m, 2, &[th(7, 9)]);
        assert!(m.get(7).is_none());
    }

    #[test]
    fn workers_are_numbered_from_first() {
        let m = FakeMap::default();
        bind_all(&m, 0, 2, &[th(7, 1), th(8, 1)]).unwrap();
        assert_eq!(m.get(7).unwrap().worker, 2);
        assert_eq!(m.get(8).unwrap().worker, 3);
    }
}
