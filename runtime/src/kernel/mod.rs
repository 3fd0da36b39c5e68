//! The seam to the kernel half: registering with the `scx_tailctl` daemon.
//!
//! Without a daemon (or without sched_ext) nothing here is used and the
//! runtime is a complete user-space tail-control runtime.

pub mod link;
pub mod protocol;
pub mod wire;

use crate::registry::WorkerThread;
use crate::shared_state::{tag_slot, NO_REQUEST};

/// The region slot of the request the calling worker is running, if any: the
/// index under which the kernel accounts it (`service * MAX_REQUESTS + slot`).
///
/// ```
/// let pool = tailctl_rt::Pool::builder().workers(1).build().unwrap();
/// let slot = pool.submit(tailctl_rt::kernel::current_request_slot).wait().unwrap();
/// assert!(slot.is_some());
/// assert_eq!(tailctl_rt::kernel::current_request_slot(), None);
/// ```
pub fn current_request_slot() -> Option<u32> {
    let wt = WorkerThread::current();
    if wt.is_null() {
        return None;
    }
    // SAFETY: non-null pointers from `current` are live workers of this thread.
    let tag = unsafe { (*wt).current_tag() };
    (tag != NO_REQUEST).then(|| tag_slot(tag) as u32)
}
