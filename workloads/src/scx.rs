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
}

impl Drop for ScxProc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid; at worst the pid is gone (ESRCH).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.child.wait();
    }
}
