//! Registration of `tailctl-server` with the `scx_tailctl` daemon.
//!
//! Design: with the kernel half loaded, the server's pool registers over the
//! daemon's unix socket (SO_PEERCRED), receives its region map fd (SCM_RIGHTS)
//! and is built on the mapped region, so the kernel charges CPU time per
//! request and serializes large requests on it (see
//! `tailctl_rt::kernel::link`). Without the daemon the pool is a complete
//! user-space tail-control runtime. This module only turns the pool's state
//! into what the server reports.

use std::fmt;

use crate::server::rt::RtExecutor;

/// Whether the server's pool is kernel-assisted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// Registered; the kernel enforces this service's allocations.
    Registered,
    /// Running in user-space mode, with the reason.
    Unavailable(String),
}

impl fmt::Display for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Registration::Registered => f.write_str("registered with scx_tailctl"),
            Registration::Unavailable(why) => write!(f, "user-space mode ({why})"),
        }
    }
}

/// The registration state of `exec`'s pool.
///
/// ```
/// use tailctl_rt::Policy;
/// use tailctl_workloads::registration::{registration_of, Registration};
/// use tailctl_workloads::server::rt::RtExecutor;
///
/// let exec = RtExecutor::new(1, Policy::StealFirst, None, None).unwrap();
/// assert!(matches!(registration_of(&exec, None), Registration::Unavailable(_)));
/// ```
pub fn registration_of(exec: &RtExecutor, socket: Option<&std::path::Path>) -> Registration {
    if exec.is_kernel_assisted() {
        Registration::Registered
    } else {
        Registration::Unavailable(match (socket, exec.unassisted_reason()) {
            (Some(_), Some(why)) => why,
            (Some(s), None) => format!(
                "no scx_tailctl accepted the registration at {}",
                s.display()
            ),
            (None, _) => "kernel assistance not requested".into(),
        })
    }
}
