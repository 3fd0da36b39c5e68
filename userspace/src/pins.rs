//! Map pins under bpffs, so operators can read the scheduler's state with
//! plain bpftool (`bpftool map dump pinned /sys/fs/bpf/tailctl/stats`).
//!
//! Pins outlive the process that made them, so a scheduler that was killed
//! leaves stale ones behind. We only pin after checking that no sched_ext
//! scheduler is loaded, so anything found in our directory at that point is
//! stale and is replaced.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::MapMut;
use log::{info, warn};

/// Where the maps go unless `--pin-dir` says otherwise.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/tailctl";

const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// The pins this process made; removed by [`Pins::remove`].
pub struct Pins {
    dir: PathBuf,
    paths: Vec<PathBuf>,
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` points to writable
    // memory large enough for a statfs; it is read only when the call succeeds.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    // SAFETY: statfs returned 0, so it filled `st`.
    // f_type's integer type differs between architectures, hence the cast.
    #[allow(clippy::unnecessary_cast)]
    let fs_type = if rc == 0 {
        unsafe { st.assume_init() }.f_type as i64
    } else {
        0
    };
    fs_type == BPF_FS_MAGIC
}

/// Make sure bpffs is mounted at /sys/fs/bpf (minimal VMs and containers
/// often lack it), so pinning works.
fn ensure_bpffs(dir: &Path) -> Result<()> {
    let root = Path::new("/sys/fs/bpf");
    if !dir.starts_with(root) || is_bpffs(root) {
        return Ok(());
    }
    info!("mounting bpffs on {}", root.display());
    let status = std::process::Command::new("mount")
        .args(["-t", "bpf", "bpf"])
        .arg(root)
        .status()
        .context("running mount -t bpf")?;
    if !status.success() || !is_bpffs(root) {
        bail!(
            "{} is not a bpf file system and mounting one failed",
            root.display()
        );
    }
    Ok(())
}

impl Pins {
    /// Pin each `(name, map)` as `dir/name`, replacing stale pins.
    pub fn create(dir: &Path, maps: &mut [(&str, &mut MapMut<'_>)]) -> Result<Self> {
        ensure_bpffs(dir)?;
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the pin directory {}", dir.display()))?;
        if !is_bpffs(dir) {
            bail!(
                "pin directory {} is not on a bpf file system",
                dir.display()
            );
        }
        let mut pins = Self {
            dir: dir.to_path_buf(),
            paths: Vec::new(),
        };
        for (name, map) in maps.iter_mut() {
            let name: &str = name;
            let path = dir.join(name);
            if path.exists() {
                warn!("removing stale pin {}", path.display());
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing stale pin {}", path.display()))?;
            }
            map.pin(&path)
                .with_context(|| format!("pinning map {name} at {}", path.display()))?;
            pins.paths.push(path);
        }
        Ok(pins)
    }

    /// Remove our pins and, if it is then empty, the directory (again on
    /// drop: a start that fails after pinning leaves none behind).
    pub fn remove(&mut self) {
        for path in self.paths.drain(..) {
            if let Err(e) = std::fs::remove_file(&path) {
                warn!("removing pin {}: {e}", path.display());
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        if !self.paths.is_empty() {
            self.remove();
        }
    }
}
