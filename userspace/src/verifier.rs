//! How close each loaded BPF program came to the verifier's instruction
//! limit.
//!
//! The kernel walks every path of a program before accepting it and refuses
//! one whose walk takes more than a million instructions (`E2BIG`). The walk
//! depends on the load-time constants (`--allot`, `--request-shares`, the
//! number of LLC queues, cgroup jobs), so a change that fits one
//! configuration can tip another over. After a load, `verified_insns` (in
//! `bpf_prog_info` since 5.16) counts the walk, global subprograms included;
//! scx_tailctl logs the heaviest program's figure so the guest tests can
//! watch the margin shrink before it runs out.
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::{AsRawLibbpf, Object, OpenObject};

/// The verifier's limit on processed instructions (`BPF_COMPLEXITY_LIMIT_INSNS`).
pub const LIMIT: u32 = 1_000_000;

/// One program's verifier walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    pub program: String,
    pub insns: u32,
}

/// Each loaded program of `object` with its `verified_insns`, heaviest first.
/// A program whose info cannot be read is left out.
pub fn walks(object: &Object) -> Vec<Walk> {
    let mut out: Vec<Walk> = object
        .progs()
        .filter_map(|prog| {
            let insns = verified_insns(prog.as_fd().as_raw_fd())?;
            Some(Walk {
                program: prog.name().to_string_lossy().into_owned(),
                insns,
            })
        })
        .collect();
    out.sort_by(|a, b| b.insns.cmp(&a.insns).then(a.program.cmp(&b.program)));
    out
}

fn verified_insns(fd: i32) -> Option<u32> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a zeroed bpf_prog_info that lives across the call and
    // `len` is its size, so the kernel writes at most `len` bytes into it; all
    // pointer fields are null with zero counts, so it writes through none of
    // them. `fd` is borrowed from a program the caller holds open.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    (rc == 0).then_some(info.verified_insns)
}

/// "tailctl_dispatch 612345 of 1000000 (61%)", for the log.
pub fn describe(walk: &Walk) -> String {
    format!(
        "{} {} of {} ({}%)",
        walk.program,
        walk.insns,
        LIMIT,
        u64::from(walk.insns) * 100 / u64::from(LIMIT)
    )
}

/// Each program's verifier log, asked for before the load (`--verifier-log
/// DIR`): level 2, every instruction the walk processed with the source line
/// it came from, so a walk's cost can be traced to the code (see
/// `tools/verifier-hotspots.py`). A developer aid: the buffers are large.
pub struct LogCapture {
    dir: PathBuf,
    logs: Vec<(String, &'static mut [u8])>,
}

/// Per program. The kernel refuses a load whose level-2 log does not fit
/// (ENOSPC), and a million-instruction walk writes a few hundred MiB; the
/// pages are only touched as the kernel writes them. The kernel's cap is
/// `u32::MAX >> 2`.
const LOG_BYTES: usize = (u32::MAX >> 2) as usize;

impl LogCapture {
    /// Gives every program of `open` a level-2 log buffer.
    pub fn arm(open: &mut OpenObject, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the verifier log directory {}", dir.display()))?;
        let mut logs = Vec::new();
        for mut prog in open.progs_mut() {
            // Leaked on purpose: libbpf keeps the pointer inside the object
            // until its load, and nothing here can order that against a drop
            // on every error path. One capture per load, for a developer.
            let buf: &'static mut [u8] = vec![0u8; LOG_BYTES].leak();
            prog.set_log_level(2);
            // SAFETY: `prog` points to a live bpf_program of `open`; `buf` is
            // valid for writes of `buf.len()` bytes for the rest of the
            // process (leaked above), so libbpf and the kernel may write into
            // it whenever the object is loaded, and nothing else aliases it
            // until `write` reads it after that load.
            let rc = unsafe {
                libbpf_sys::bpf_program__set_log_buf(
                    prog.as_libbpf_object().as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len() as _,
                )
            };
            anyhow::ensure!(rc == 0, "bpf_program__set_log_buf failed: {rc}");
            logs.push((prog.name().to_string_lossy().into_owned(), buf));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            logs,
        })
    }

    /// Writes each program's log to `DIR/PROGRAM.log` (after the load,
    /// whether it succeeded or not).
    pub fn write(self) -> Result<()> {
        for (name, buf) in self.logs {
            let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let path = self.dir.join(format!("{name}.log"));
            std::fs::write(&path, &buf[..len])
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_gives_the_share_of_the_limit() {
        let w = Walk {
            program: "tailctl_dispatch".into(),
            insns: 612_345,
        };
        assert_eq!(describe(&w), "tailctl_dispatch 612345 of 1000000 (61%)");
    }
}
