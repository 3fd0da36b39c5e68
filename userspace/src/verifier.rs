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
            // SAFETY: `prog` points to a bpf_program of the live `object`;
            // bpf_program__fd only reads it (a negative errno if not loaded).
            let fd = unsafe { libbpf_sys::bpf_program__fd(prog.as_libbpf_object().as_ptr()) };
            if fd < 0 {
                return None;
            }
            let insns = verified_insns(fd)?;
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

/// The verifier logs of some programs, asked for before the load
/// (`--verifier-log DIR`, `--verifier-log-prog NAME`): level 2, every
/// instruction the walk processed with the source line it came from, so a
/// walk's cost can be traced to the code (see `tools/verifier-hotspots.py`).
/// A developer aid: each buffer is large.
pub struct LogCapture {
    dir: PathBuf,
    logs: Vec<(String, Box<[u8]>)>,
}

/// Per program. The kernel refuses a load whose log does not fit (ENOSPC),
/// and a level-2 log of a walk near the limit passes 1 GiB; this is the
/// kernel's cap (`u32::MAX >> 2`). Zeroed pages are only touched as the
/// kernel writes them.
const LOG_BYTES: usize = (u32::MAX >> 2) as usize;

/// A zeroed buffer of `len` bytes, or an error if it cannot be had (not the
/// abort of `vec!`).
fn zeroed(len: usize) -> Result<Box<[u8]>> {
    let layout = std::alloc::Layout::array::<u8>(len)?;
    anyhow::ensure!(len > 0, "empty log buffer");
    // SAFETY: `layout` has a non-zero size (checked above). A non-null result
    // is `len` zeroed, initialised bytes allocated with the global allocator
    // under `layout`, which is what Box<[u8]> of length `len` frees with.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        anyhow::ensure!(
            !p.is_null(),
            "cannot allocate a {len}-byte verifier log buffer"
        );
        Ok(Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)))
    }
}

impl LogCapture {
    /// Gives the programs of `open` named in `names` a level-2 log buffer.
    /// Must be followed by the load, then `write`, with the capture alive in
    /// between (libbpf writes into the buffers during the load only).
    pub fn arm(open: &mut OpenObject, dir: &Path, names: &[String]) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the verifier log directory {}", dir.display()))?;
        let mut logs = Vec::new();
        for mut prog in open.progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            if !names.contains(&name) {
                continue;
            }
            let mut buf = zeroed(LOG_BYTES)?;
            prog.set_log_level(2);
            // SAFETY: `prog` points to a live bpf_program of `open`. The heap
            // block behind `buf` does not move when the Box moves into
            // `logs`, and `self` keeps it until `write`, which the caller
            // runs after the load; libbpf hands the pointer to the kernel
            // during the load only and never reads or writes it after (nor
            // when the object is closed), so an early drop of the capture on
            // an error path before the load leaves a pointer nothing uses.
            let rc = unsafe {
                libbpf_sys::bpf_program__set_log_buf(
                    prog.as_libbpf_object().as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len() as _,
                )
            };
            anyhow::ensure!(rc == 0, "bpf_program__set_log_buf failed: {rc}");
            logs.push((name, buf));
        }
        if logs.is_empty() {
            anyhow::bail!("--verifier-log-prog: no program named {}", names.join(", "));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            logs,
        })
    }

    /// Writes each captured program's log to `DIR/PROGRAM.log` (after the
    /// load, whether it succeeded or not) and frees the buffers.
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
