//! Cgroup jobs (`--job`, issue 12): cgroups of unmodified processes as jobs
//! of the allotment controller, started and ended as the cgroups come and go
//! (AMCilk's START_JOB / EXIT_JOB).
//!
//! # Design
//!
//! A thread of the registration server re-matches the `--job` patterns every
//! [`RESCAN`] (a fixed path, or a `*` in the last component) against the
//! cgroup v2 directories there, keyed by cgroup id (the directory's inode,
//! the kernel's kernfs id), not by path: a cgroup removed and created again
//! under the same name is a new job.
//!  - A new match claims the highest free service slot from the registry's
//!    book (registered services take the lowest), writes its `services` entry
//!    (pid TAILCTL_CGROUP_JOB_PID + slot and a fresh registration epoch, so a
//!    reused slot is a new owner for the kernel: its `job_acct` entry and
//!    tokens start clean), then `job_cgroups` (id -> slot), then bumps the
//!    binding generation so every task looks its binding up again.
//!  - A cgroup that is gone: `job_cgroups` entry deleted, the `services`
//!    entry zeroed, generation bumped, slot released; the controller is told
//!    at once (EXIT_JOB), so its cores go to the other jobs.
//!  - No slot (more than [`MAX_CGROUP_JOBS`] cgroup jobs, or every slot
//!    taken by services): one warning per cgroup, retried each scan; the
//!    cgroup becomes a job when a slot frees.
//!
//! Descendant cgroups are not listed here: the kernel walks a task's cgroup
//! ancestors when it binds the task (see "cgroup jobs" in bpf/main.bpf.c).
//!
//! Why polling every 100 ms and not each quantum or inotify: a scan is a
//! readdir and a stat per pattern directory (its cost is logged at exit), too
//! much to add to the SCHED_FIFO controller's 10 ms loop for an event that is
//! rare; a job's first 100 ms run uncapped (ordinary tasks), and a removed
//! cgroup has no tasks left, so freeing its slot late costs a slot, not
//! cores (an empty job has no demand). inotify on cgroupfs reports mkdir and
//! rmdir too, and would cut the start latency; polling also covers a
//! pattern's directory that is replaced, at a fixed, small cost.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use log::{info, warn};
use tailctl_rt::kernel::protocol::PRIORITY_NORMAL;

use super::{as_bytes, Registry, REGISTRATION_EPOCH};
use crate::bpf_intf::tailctl_service;

/// Cgroup jobs at most (the other slots stay for registered services).
pub const MAX_CGROUP_JOBS: usize = 8;

/// How often the patterns are matched again (see the module doc).
pub const RESCAN: Duration = Duration::from_millis(100);

/// `services.pid` of a cgroup job in slot s: this + s (never a process's pid).
pub const CGROUP_JOB_PID: u32 = crate::bpf_intf::tailctl_consts_TAILCTL_CGROUP_JOB_PID;

/// The id the kernel gives cgroup v2 directory `path` (its kernfs node id,
/// which is the directory's inode number; what the BPF side reads from
/// task->cgroups->dfl_cgrp->kn->id).
pub fn cgroup_id(path: &Path, flag: &str) -> Result<u64> {
    let md = std::fs::metadata(path).with_context(|| format!("{flag} {}", path.display()))?;
    if !md.is_dir() {
        bail!("{flag} {}: not a directory", path.display());
    }
    check_cgroup2(path, flag)?;
    Ok(md.ino())
}

fn check_cgroup2(path: &Path, flag: &str) -> Result<()> {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: all-zero is a valid statfs; `c` is a NUL-terminated path and
    // `fs` a valid out-pointer for the call.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("{flag} {}", path.display()));
    }
    #[allow(clippy::unnecessary_cast)]
    if fs.f_type as i64 != CGROUP2_SUPER_MAGIC {
        bail!("{flag} {}: not in a cgroup v2 hierarchy", path.display());
    }
    Ok(())
}

/// Does `name` match `pat`, where `*` stands for any run of characters?
pub fn wildcard_match(pat: &str, name: &str) -> bool {
    match pat.split_once('*') {
        None => pat == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| wildcard_match(rest, &tail[i..]))
        }
    }
}

/// Check the `--job` patterns at start: a `*` only in the last component,
/// whose directory must be in a cgroup v2 hierarchy. What matches may come
/// and go later; what matches nothing now is only reported.
pub fn check_patterns(patterns: &[PathBuf]) -> Result<()> {
    for p in patterns {
        let parent = p.parent().unwrap_or(Path::new("/"));
        if parent.to_string_lossy().contains('*') {
            bail!("--job {}: a `*` only in the last component", p.display());
        }
        check_cgroup2(parent, "--job")?;
        if matches(std::slice::from_ref(p)).is_empty() {
            info!(
                "--job {}: no cgroup matches yet; one that appears becomes a job",
                p.display()
            );
        }
    }
    Ok(())
}

/// The cgroups the patterns match now: (id, path), sorted by path, each id once.
fn matches(patterns: &[PathBuf]) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<PathBuf> = Vec::new();
    for p in patterns {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.contains('*') {
            let dir = p.parent().unwrap_or(Path::new("/"));
            // The directory may be gone: then nothing matches.
            if let Ok(rd) = std::fs::read_dir(dir) {
                found.extend(
                    rd.filter_map(|e| e.ok())
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .filter(|e| {
                            e.file_name()
                                .to_str()
                                .is_some_and(|n| wildcard_match(name, n))
                        })
                        .map(|e| e.path()),
                );
            }
        } else {
            found.push(p.clone());
        }
    }
    found.sort();
    let mut out: Vec<(u64, PathBuf)> = Vec::new();
    for path in found {
        // Removed since the readdir, or a fixed path not created yet: no job.
        let Ok(md) = std::fs::metadata(&path) else {
            continue;
        };
        if md.is_dir() && !out.iter().any(|(i, _)| *i == md.ino()) {
            out.push((md.ino(), path));
        }
    }
    out
}

struct Job {
    slot: u32,
    path: PathBuf,
}

/// The running cgroup jobs, owned by the scan thread.
pub(super) struct CgroupJobs {
    patterns: Vec<PathBuf>,
    job_cgroups: MapHandle,
    jobs: BTreeMap<u64, Job>,
    /// Cgroups refused a slot, already warned about (once each).
    refused: HashSet<u64>,
    scans: u64,
    scan_total: Duration,
    scan_max: Duration,
    /// The scan thread's own CPU time (wall time includes waiting for a CPU).
    scan_cpu: Duration,
}

/// Wall-clock time in ms, in the start/end log lines: the log's own stamp has
/// whole seconds, and a test measures the scan's latency from mkdir/rmdir.
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: all-zero is a valid timespec; the pointer is valid for the call.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl CgroupJobs {
    pub(super) fn new(patterns: Vec<PathBuf>, job_cgroups: MapHandle) -> Self {
        Self {
            patterns,
            job_cgroups,
            jobs: BTreeMap::new(),
            refused: HashSet::new(),
            scans: 0,
            scan_total: Duration::ZERO,
            scan_max: Duration::ZERO,
            scan_cpu: Duration::ZERO,
        }
    }

    /// Match the patterns again: end the jobs whose cgroup is gone, then
    /// start one for each new match (while slots last).
    pub(super) fn rescan(&mut self, reg: &Registry) {
        let (t, c) = (Instant::now(), thread_cpu());
        let now = matches(&self.patterns);
        let gone: Vec<u64> = self
            .jobs
            .keys()
            .filter(|id| !now.iter().any(|(i, _)| i == *id))
            .copied()
            .collect();
        for id in gone {
            self.end(reg, id);
        }
        self.refused.retain(|id| now.iter().any(|(i, _)| i == id));
        for (id, path) in now {
            if self.jobs.contains_key(&id) {
                continue;
            }
            match self.start(reg, id, &path) {
                Ok(()) => {
                    self.refused.remove(&id);
                }
                Err(why) => {
                    if self.refused.insert(id) {
                        warn!(
                            "cgroup {} (id {id}) matches --job but is not a job: {why}; \
                             it becomes one when a slot frees",
                            path.display()
                        );
                    }
                }
            }
        }
        let dt = t.elapsed();
        self.scans += 1;
        self.scan_total += dt;
        self.scan_max = self.scan_max.max(dt);
        self.scan_cpu += thread_cpu().saturating_sub(c);
    }

    fn start(&mut self, reg: &Registry, id: u64, path: &Path) -> Result<(), String> {
        if self.jobs.len() >= MAX_CGROUP_JOBS {
            return Err(format!(
                "{MAX_CGROUP_JOBS} cgroup jobs run already (at most {MAX_CGROUP_JOBS})"
            ));
        }
        let slot = {
            let mut book = reg.book.lock().unwrap();
            let slot = book
                .claim_top()
                .ok_or_else(|| format!("all {} service slots are in use", super::MAX_SERVICES))?;
            reg.publish_count(&book);
            slot
        };
        // SAFETY: tailctl_service is plain old data; all-zero is a valid value.
        let mut svc: tailctl_service = unsafe { std::mem::zeroed() };
        svc.pid = CGROUP_JOB_PID + slot;
        svc.priority = u32::from(PRIORITY_NORMAL);
        // A fresh registration: the kernel's owner ((epoch << 32) + pid) of this
        // slot was never seen before, so nothing of an earlier job carries over.
        svc.epoch = REGISTRATION_EPOCH.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
        let key = slot.to_ne_bytes();
        let written = reg
            .maps
            .services
            .update(&key, as_bytes(&svc), MapFlags::ANY)
            .and_then(|()| {
                self.job_cgroups
                    .update(&id.to_ne_bytes(), &key, MapFlags::ANY)
            });
        if let Err(e) = written {
            self.unpublish(reg, id, slot);
            return Err(format!("writing its map entries: {e}"));
        }
        // Tasks already in the cgroup bind at their next event.
        reg.maps.worker_tids.gen.bump();
        info!(
            "cgroup job {} (cgroup id {id}) started: slot {slot}, pid {} (at {} ms)",
            path.display(),
            svc.pid,
            unix_ms()
        );
        self.jobs.insert(
            id,
            Job {
                slot,
                path: path.to_path_buf(),
            },
        );
        reg.notify();
        Ok(())
    }

    fn end(&mut self, reg: &Registry, id: u64) {
        let Some(job) = self.jobs.remove(&id) else {
            return;
        };
        self.unpublish(reg, id, job.slot);
        info!(
            "cgroup job {} (cgroup id {id}) ended: the cgroup is gone, slot {} freed (at {} ms)",
            job.path.display(),
            job.slot,
            unix_ms()
        );
        reg.notify();
    }

    /// Take job `id` in `slot` out of the kernel's maps, then free the slot.
    fn unpublish(&self, reg: &Registry, id: u64, slot: u32) {
        let _ = self.job_cgroups.delete(&id.to_ne_bytes());
        // SAFETY: plain old data; zero means "free slot".
        let empty: tailctl_service = unsafe { std::mem::zeroed() };
        let _ = reg
            .maps
            .services
            .update(&slot.to_ne_bytes(), as_bytes(&empty), MapFlags::ANY);
        reg.maps.worker_tids.gen.bump();
        reg.release(slot);
    }

    /// Scan until `reg` shuts down.
    pub(super) fn run(mut self, reg: &Registry) {
        while !reg.shutdown.load(Ordering::Relaxed) {
            std::thread::sleep(RESCAN);
            self.rescan(reg);
        }
        if self.scans > 0 {
            info!(
                "cgroup job scans: {}, mean {} us (CPU {} us), max {} us",
                self.scans,
                (self.scan_total / self.scans as u32).as_micros(),
                (self.scan_cpu / self.scans as u32).as_micros(),
                self.scan_max.as_micros()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_patterns() {
        assert!(wildcard_match("batch-*", "batch-1"));
        assert!(wildcard_match("batch-*", "batch-"));
        assert!(!wildcard_match("batch-*", "web-1"));
        assert!(wildcard_match("*.job", "a.job"));
        assert!(wildcard_match("a*b*c", "aXXbYc"));
        assert!(!wildcard_match("a*b*c", "aXXbY"));
        assert!(wildcard_match("plain", "plain"));
        assert!(!wildcard_match("plain", "plainer"));
    }

    #[test]
    fn matches_follow_the_directories() {
        let dir = std::env::temp_dir().join(format!("tailctl-cgjobs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("job-a")).unwrap();
        std::fs::create_dir_all(dir.join("other")).unwrap();
        let pats = vec![dir.join("job-*"), dir.join("fixed")];
        let names = |v: Vec<(u64, PathBuf)>| -> Vec<String> {
            v.into_iter()
                .map(|(_, p)| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(matches(&pats)), ["job-a"]);
        // Created later: matched at the next scan; removed: no longer.
        std::fs::create_dir(dir.join("job-b")).unwrap();
        std::fs::create_dir(dir.join("fixed")).unwrap();
        assert_eq!(names(matches(&pats)), ["fixed", "job-a", "job-b"]);
        std::fs::remove_dir(dir.join("job-a")).unwrap();
        assert_eq!(names(matches(&pats)), ["fixed", "job-b"]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches(&pats).is_empty());
    }
}
