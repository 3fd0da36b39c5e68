//! Starting and stopping `scx_tailctl` from the experiment drivers.
//!
//! Design: a driver compares runs under the default kernel scheduler with
//! runs under `scx_tailctl` in one session, so it checks first that it may
//! load the scheduler (root, sched_ext, nothing loaded), starts it as a child
//! with its log in a file, waits until the kernel reports it enabled and its
//! registration socket exists, and stops it (SIGINT, then wait) when the
//! handle is dropped, error paths included.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// `/sys/kernel/sched_ext/state`, or None without sched_ext.
pub fn sched_ext_state() -> Option<String> {
    std::fs::read_to_string("/sys/kernel/sched_ext/state")
        .ok()
        .map(|s| s.trim().to_string())
}

/// What a driver that loads scx_tailctl (`what` names it in errors) needs, checked before any run: the binary, root, a
/// sched_ext kernel and no scheduler loaded (so the other runs really are
/// under the default kernel scheduler).
pub fn check_can_load(scx: &Path, what: &str) -> Result<()> {
    if !scx.exists() {
        bail!(
            "{what}: {} not found (build with `cargo build -p scx_tailctl`, or pass --scx-tailctl)",
            scx.display()
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("{what}: loading scx_tailctl needs root");
    }
    match sched_ext_state().as_deref() {
        None => bail!(
            "{what}: this kernel has no sched_ext (/sys/kernel/sched_ext/state missing); \
             run in the VM (`tailctl vm run -- ...`)"
        ),
        Some("disabled") => Ok(()),
        Some(state) => {
            let ops = std::fs::read_to_string("/sys/kernel/sched_ext/root/ops").unwrap_or_default();
            bail!(
                "{what}: a sched_ext scheduler is already {state} ({}); \
                 stop it so the runs without scx_tailctl use the default kernel scheduler",
                ops.trim()
            )
        }
    }
}

/// scx_tailctl started by the driver; stopped (SIGINT, then waited) on drop.
pub struct ScxProc {
    child: Child,
}

impl ScxProc {
    /// Starts `bin --socket socket EXTRA...` with its output in `log`; returns
    /// once the kernel reports it enabled and the socket exists (240 s at most).
    pub fn start(bin: &Path, socket: &Path, extra: &[String], log: &Path) -> Result<ScxProc> {
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let child = Command::new(bin)
            .arg("--socket")
            .arg(socket)
            .args(extra)
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut scx = ScxProc { child };
        let t0 = Instant::now();
        // Verifying the program took 136 s once in a TCG guest on a loaded host.
        while t0.elapsed() < Duration::from_secs(240) {
            if let Some(status) = scx.child.try_wait()? {
                bail!(
                    "scx_tailctl exited ({status}) before attaching; its log {}:\n{}",
                    log.display(),
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            if sched_ext_state().as_deref() == Some("enabled") && socket.exists() {
                return Ok(scx);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "scx_tailctl did not attach within 240 s (log {})",
            log.display()
        )
    }

    /// The daemon's CPU time so far, per thread (tid, name, ns running), from
    /// `/proc/PID/task/*/schedstat` (the scheduler's own accounting); empty
    /// where it cannot be read.
    pub fn thread_cpu_ns(&self) -> Vec<(u32, String, u64)> {
        crate::schedstat::threads(&self.child.id().to_string())
            .into_iter()
            .map(|t| (t.tid, t.name, t.run_ns))
            .collect()
    }
}

/// CPU seconds each daemon thread ran between two readings of
/// [`ScxProc::thread_cpu_ns`] (threads born in between count from 0), named
/// `name/tid` and sorted, busiest first.
pub fn thread_cpu_between(
    before: &[(u32, String, u64)],
    after: &[(u32, String, u64)],
) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = after
        .iter()
        .map(|(tid, name, ns)| {
            let was = before.iter().find(|(t, _, _)| t == tid).map_or(0, |b| b.2);
            (format!("{name}/{tid}"), ns.saturating_sub(was) as f64 / 1e9)
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

impl Drop for ScxProc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid; at worst the pid is gone (ESRCH).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.child.wait();
    }
}
