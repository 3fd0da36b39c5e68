//! Where `tailctl-server` will register with the `scx_tailctl` daemon.
//!
//! Design: with the kernel half loaded, a service registers its workers with
//! the daemon over a unix socket (SO_PEERCRED), receives its region map fd
//! (SCM_RIGHTS) and publishes request progress there, so the kernel enforces
//! tail-control's serialization on exact CPU time (see `DESIGN.md`, "Data
//! flow"). Neither the daemon's socket protocol nor the runtime's registration
//! call exist yet (a later issue), so this module is only the seam: the
//! server calls [`register_with_scx_tailctl`] at start-up and logs the
//! result, and kernel-assisted experiments refuse to run until it returns
//! [`Registration::Registered`]. It deliberately does not pretend: it never
//! reports success.

use std::fmt;

/// The outcome of trying to register with `scx_tailctl`.
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

/// The hook: registers this process's pool with the `scx_tailctl` daemon.
///
/// Not implemented yet — it needs the daemon's registration socket and the
/// runtime's publication region, which do not exist yet. Until then it
/// always returns [`Registration::Unavailable`] and the runtime runs its own
/// user-space tail-control, which is complete without kernel help.
///
/// ```
/// use tailctl_workloads::registration::{register_with_scx_tailctl, Registration};
///
/// assert!(matches!(register_with_scx_tailctl(), Registration::Unavailable(_)));
/// ```
pub fn register_with_scx_tailctl() -> Registration {
    Registration::Unavailable(
        "registration with scx_tailctl is not available yet: the daemon's registration \
         interface has not been built"
            .into(),
    )
}
