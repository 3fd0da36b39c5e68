//! The seam to the kernel half: registering with the `scx_tailctl` daemon.
//!
//! Without a daemon (or without sched_ext) nothing here is used and the
//! runtime is a complete user-space tail-control runtime.

pub mod protocol;
