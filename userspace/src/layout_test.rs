//! The runtime mirrors `bpf/intf.h` in Rust (it must build without clang);
//! this test fails when the mirror and the bindgen output of intf.h disagree.

use crate::bpf_intf::*;
use std::mem::{offset_of, size_of};

macro_rules! c_field {
    ($ty:ident, $f:ident) => {{
        fn size_of_field<T>(_: impl Fn(&$ty) -> &T) -> usize {
            size_of::<T>()
        }
        (offset_of!($ty, $f), size_of_field(|s: &$ty| &s.$f))
    }};
}

fn c_layout(st: &str, field: &str) -> Option<(usize, usize)> {
    Some(match (st, field) {
        ("tailctl_header", "<size>") => (0, size_of::<tailctl_header>()),
        ("tailctl_worker_slot", "<size>") => (0, size_of::<tailctl_worker_slot>()),
        ("tailctl_request_slot", "<size>") => (0, size_of::<tailctl_request_slot>()),
        ("tailctl_region", "<size>") => (0, size_of::<tailctl_region>()),
        ("tailctl_region", "workers") => c_field!(tailctl_region, workers),
        ("tailctl_region", "requests") => c_field!(tailctl_region, requests),
        ("tailctl_header", "magic") => c_field!(tailctl_header, magic),
        ("tailctl_header", "version") => c_field!(tailctl_header, version),
        ("tailctl_header", "worker_count") => c_field!(tailctl_header, worker_count),
        ("tailctl_header", "request_capacity") => c_field!(tailctl_header, request_capacity),
        ("tailctl_header", "active") => c_field!(tailctl_header, active),
        ("tailctl_header", "generation") => c_field!(tailctl_header, generation),
        ("tailctl_header", "next_id") => c_field!(tailctl_header, next_id),
        ("tailctl_header", "completed") => c_field!(tailctl_header, completed),
        ("tailctl_header", "serialized") => c_field!(tailctl_header, serialized),
        ("tailctl_header", "busy_workers") => c_field!(tailctl_header, busy_workers),
        ("tailctl_header", "stealable") => c_field!(tailctl_header, stealable),
        ("tailctl_header", "kernel_serialized") => c_field!(tailctl_header, kernel_serialized),
        ("tailctl_header", "mode") => c_field!(tailctl_header, mode),
        ("tailctl_worker_slot", "current") => c_field!(tailctl_worker_slot, current),
        ("tailctl_worker_slot", "start_ns") => c_field!(tailctl_worker_slot, start_ns),
        ("tailctl_worker_slot", "tid") => c_field!(tailctl_worker_slot, tid),
        ("tailctl_worker_slot", "state") => c_field!(tailctl_worker_slot, state),
        ("tailctl_worker_slot", "steals") => c_field!(tailctl_worker_slot, steals),
        ("tailctl_worker_slot", "kernel_work_ns") => c_field!(tailctl_worker_slot, kernel_work_ns),
        ("tailctl_worker_slot", "failed_steals") => c_field!(tailctl_worker_slot, failed_steals),
        ("tailctl_worker_slot", "found_work") => c_field!(tailctl_worker_slot, found_work),
        ("tailctl_worker_slot", "descheduled") => c_field!(tailctl_worker_slot, descheduled),
        ("tailctl_worker_slot", "stealable_seen") => c_field!(tailctl_worker_slot, stealable_seen),
        ("tailctl_request_slot", "id") => c_field!(tailctl_request_slot, id),
        ("tailctl_request_slot", "flags") => c_field!(tailctl_request_slot, flags),
        ("tailctl_request_slot", "generation") => c_field!(tailctl_request_slot, generation),
        ("tailctl_request_slot", "work_ns") => c_field!(tailctl_request_slot, work_ns),
        ("tailctl_request_slot", "arrival_ns") => c_field!(tailctl_request_slot, arrival_ns),
        ("tailctl_request_slot", "state") => c_field!(tailctl_request_slot, state),
        ("tailctl_request_slot", "steals") => c_field!(tailctl_request_slot, steals),
        ("tailctl_request_slot", "steals_at_serialize") => {
            c_field!(tailctl_request_slot, steals_at_serialize)
        }
        ("tailctl_request_slot", "kernel_running") => {
            c_field!(tailctl_request_slot, kernel_running)
        }
        ("tailctl_request_slot", "kernel_work_ns") => {
            c_field!(tailctl_request_slot, kernel_work_ns)
        }
        ("tailctl_request_slot", "kernel_alloc") => c_field!(tailctl_request_slot, kernel_alloc),
        _ => return None,
    })
}

#[test]
fn runtime_mirror_matches_intf_h() {
    let layout = tailctl_rt::shared_state::region_layout();
    assert!(layout.len() > 30);
    for (st, field, off, size) in layout {
        let c = c_layout(st, field).unwrap_or_else(|| panic!("{st}.{field} is not in intf.h"));
        assert_eq!(
            c,
            (off, size),
            "{st}.{field}: intf.h has (offset, size) {c:?}, the runtime ({off}, {size})"
        );
    }
}

#[test]
#[allow(clippy::unnecessary_cast)] // bindgen picks the enum's integer type
fn constants_match_intf_h() {
    use tailctl_rt::shared_state as rt;
    assert_eq!(tailctl_consts_TAILCTL_MAX_WORKERS as usize, rt::MAX_WORKERS);
    assert_eq!(
        tailctl_consts_TAILCTL_MAX_REQUESTS as usize,
        rt::MAX_REQUESTS
    );
    assert_eq!(tailctl_consts_TAILCTL_REGION_MAGIC as u32, rt::REGION_MAGIC);
    assert_eq!(
        tailctl_consts_TAILCTL_REGION_VERSION as u32,
        rt::REGION_VERSION
    );
    assert_eq!(
        tailctl_consts_TAILCTL_FLAG_SERIALIZED as u32,
        rt::FLAG_SERIALIZED
    );
    assert_eq!(tailctl_consts_TAILCTL_REQ_FREE as u32, rt::REQ_FREE);
    assert_eq!(tailctl_consts_TAILCTL_REQ_RUNNING as u32, rt::REQ_RUNNING);
    assert_eq!(
        tailctl_consts_TAILCTL_WORKER_WORKING as u32,
        rt::WORKER_WORKING
    );
    assert_eq!(
        tailctl_consts_TAILCTL_WORKER_PARKED as u32,
        rt::WORKER_PARKED
    );
    assert_eq!(tailctl_consts_TAILCTL_MODE_KERNEL as u32, rt::MODE_KERNEL);
    assert_eq!(
        tailctl_consts_TAILCTL_QMAX as usize,
        tailctl_rt::kernel::protocol::MAX_THRESHOLDS
    );
}
