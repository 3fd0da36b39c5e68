//! Per-thread scheduler accounting from `/proc/PID/task/*/schedstat`: the
//! kernel's own bookkeeping (`sched_info`), kept the same way under every
//! scheduler class, so figures taken under the default scheduler and under a
//! sched_ext one compare directly. One reader for the drivers that need it
//! (the key-value server's CPU split, the scheduler daemon's threads, the job
//! driver's runqueue wait).
//!
//! A thread's figures go with it when it exits: read them while it lives.

/// One thread's line of `schedstat` and its name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadStat {
    /// Thread id.
    pub tid: u32,
    /// `comm`, trimmed.
    pub name: String,
    /// Time on a CPU, ns.
    pub run_ns: u64,
    /// Time runnable but waiting for a CPU, ns.
    pub wait_ns: u64,
    /// Times it was put on a CPU.
    pub runs: u64,
}

/// Parses one `schedstat` line: run ns, wait ns, times run.
///
/// ```
/// use tailctl_workloads::schedstat::parse_line;
/// assert_eq!(parse_line("123 45 6\n"), Some((123, 45, 6)));
/// assert_eq!(parse_line("garbage"), None);
/// ```
pub fn parse_line(line: &str) -> Option<(u64, u64, u64)> {
    let mut f = line.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??, f.next()??))
}

/// The threads of process `pid` (`"self"` for this one) that could be read;
/// empty if the process is gone.
///
/// ```
/// let me = tailctl_workloads::schedstat::threads("self");
/// assert!(!me.is_empty());
/// assert!(me.iter().all(|t| t.tid > 0));
/// ```
pub fn threads(pid: &str) -> Vec<ThreadStat> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let (run_ns, wait_ns, runs) =
                parse_line(&std::fs::read_to_string(t.path().join("schedstat")).ok()?)?;
            let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            Some(ThreadStat {
                tid,
                name: name.trim().to_string(),
                run_ns,
                wait_ns,
                runs,
            })
        })
        .collect()
}
