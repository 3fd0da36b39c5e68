//! Who is on the other end of a registration, and which threads are its.
//!
//! A tid is only a number: once its thread exits, the kernel hands it to the
//! next thread it creates, in any process. So the daemon never binds a bare
//! number. It names a thread by (tid, tgid, start time) and holds pidfds
//! while it checks, so that what it read from /proc is known to describe the
//! thread that still carries the tid when the binding is in the map:
//!
//! - the peer process: SO_PEERPIDFD (Linux 6.5; every sched_ext kernel has
//!   it; a peer already reaped is refused), else (no SO_PEERPIDFD at all)
//!   pidfd_open(SO_PEERCRED pid) checked against the time of the connection;
//! - each worker thread: pidfd_open(tid, PIDFD_THREAD) (Linux 6.9) before its
//!   /proc entry is read; if that thread is still alive after the binding was
//!   written, the binding names it.
//!
//! The start time is /proc's (clock ticks since boot, field 22 of
//! `/proc/<pid>/task/<tid>/stat`); the scheduler compares it with the task's
//! `start_boottime` at every look-up, so a binding can never apply to a later
//! thread that reuses the tid.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;

use anyhow::{bail, Context, Result};

use super::limits::{Account, Key};
use super::subuid::SubUids;

/// The inode of the initial pid namespace (include/linux/proc_ns.h).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
/// SO_PEERPIDFD (asm-generic/socket.h), spelled out for older libc crates.
const SO_PEERPIDFD: libc::c_int = 77;

/// Length of the clock tick /proc uses for start times, in ns (1e9 / USER_HZ).
pub fn clock_tick_ns() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / if hz > 0 { hz as u64 } else { 100 }
}

/// Now, in /proc's start-time unit (clock ticks of CLOCK_BOOTTIME).
fn boottime_ticks() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_BOOTTIME exists on every Linux we run on.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64) / clock_tick_ns()
}

/// The daemon must see pids as the scheduler does: worker_tids is keyed by
/// `task->pid` (init namespace), while SO_PEERCRED and /proc give pids in the
/// daemon's own namespace. Refuse to run anywhere else.
pub fn check_init_pid_ns() -> Result<()> {
    let ino = std::fs::metadata("/proc/self/ns/pid")
        .context("reading /proc/self/ns/pid")?
        .ino();
    if ino != PROC_PID_INIT_INO {
        bail!(
            "scx_tailctl runs in a child pid namespace (pid:[{ino}]); it must run in the \
             initial one, where the scheduler's thread ids live"
        );
    }
    // /proc must be a proc of that namespace too, or /proc/<pid> names other tasks.
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    let pid: u32 = stat
        .split(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    if pid != std::process::id() {
        bail!("/proc is not mounted for the initial pid namespace (it shows us as pid {pid})");
    }
    Ok(())
}

fn pid_ns_ino(pid: u32) -> io::Result<u64> {
    Ok(std::fs::metadata(format!("/proc/{pid}/ns/pid"))?.ino())
}

/// The inode of the daemon's own namespace of `kind` (`pid`, `user`), read once: it never
/// changes while the daemon runs (it refuses to run outside the initial ones).
fn own_ns_ino(kind: &'static str) -> io::Result<u64> {
    static PID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static USER: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let cell = if kind == "pid" { &PID } else { &USER };
    if let Some(&ino) = cell.get() {
        return Ok(ino);
    }
    let ino = std::fs::metadata(format!("/proc/self/ns/{kind}"))?.ino();
    Ok(*cell.get_or_init(|| ino))
}

/// `pidfd_open(2)`.
pub fn pidfd_open(pid: u32, flags: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process (or, for a PIDFD_THREAD pidfd, the thread) behind
/// `fd` has exited: pidfds poll readable then.
pub fn pidfd_exited(fd: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

/// Field 22 (starttime) of a /proc stat line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last ')'.
pub fn parse_stat_starttime(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest starts at field 3 (state): field 22 is the 20th word.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The `NSpid:` line of a /proc status file: the task's pid in each pid
/// namespace, from the outermost (the one /proc belongs to) inwards.
pub fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let ids: Option<Vec<u32>> = line.split_whitespace().map(|v| v.parse().ok()).collect();
    ids.filter(|v| !v.is_empty())
}

/// The start time of thread `tid` of process `pid`, or None if `tid` is not
/// (or no longer) a thread of `pid`: /proc/<pid>/task/<tid> exists only for
/// threads of that thread group.
pub fn thread_start_ticks(pid: u32, tid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    parse_stat_starttime(&stat)
}

/// One thread, as bound: its tid in the scheduler's (initial) namespace, its
/// process, its start time, and a pidfd while the binding is being made.
#[derive(Debug)]
pub struct Thread {
    pub tid: u32,
    pub tgid: u32,
    pub start_ticks: u64,
    pub fd: Option<OwnedFd>,
}

/// The connecting process, identified once at accept time.
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
    /// Whom the registration limits count it against ([`account`]).
    pub account: Account,
    pidfd: OwnedFd,
}

impl Peer {
    /// Pin down the peer of `stream`: SO_PEERCRED's pid and uid, and a pidfd
    /// for that very process (not for whoever holds its pid later).
    pub fn identify(stream: &UnixStream, subuids: &SubUids) -> io::Result<Self> {
        let accepted = boottime_ticks();
        let cred =
            nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)?;
        let (pid, uid) = (cred.pid() as u32, cred.uid());
        let pidfd = match peer_pidfd(stream) {
            Ok(fd) => fd,
            // The peer exited and was reaped before 6.16 (where SO_PEERPIDFD
            // hands out a pidfd of the exited process instead). Its pid may
            // already be another process's, one that started between the
            // connect and the accept: opening it by number, as below, would
            // take that one for the peer (another user's threads, bound to
            // this connection's service).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the connecting process exited",
                ))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {
                // Before Linux 6.5: open it by number, then make sure the number
                // was not recycled since the connection (a process that reused
                // it started after we accepted; one that started in between
                // is not told apart: these kernels have no sched_ext anyway).
                let fd = pidfd_open(pid, 0)?;
                match thread_start_ticks(pid, pid) {
                    Some(start) if start <= accepted => fd,
                    _ => {
                        return Err(io::Error::new(
                            io::ErrorKind::NotFound,
                            "the connecting process exited",
                        ))
                    }
                }
            }
            Err(e) => return Err(e),
        };
        // All a refusal by the caps needs (the rest waits for `threads`).
        let account = account(pid, uid, pidfd.as_fd(), subuids)?;
        Ok(Self {
            pid,
            uid,
            account,
            pidfd,
        })
    }

    /// Whether the connecting process still runs (its pid is still its own).
    pub fn alive(&self) -> bool {
        !pidfd_exited(self.pidfd.as_fd())
    }

    /// The pidfd, for polling: it becomes readable when the process exits.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// The threads named by `tids` (as the service sees them), each checked to
    /// be a live thread of the peer, with its start time. All or nothing.
    pub fn threads(&self, tids: &[u32]) -> Result<Vec<Thread>, String> {
        // In another pid namespace, the peer's tids must be translated.
        let foreign_ns = match (pid_ns_ino(self.pid), own_ns_ino("pid")) {
            (Ok(a), Ok(b)) => a != b,
            (Err(e), _) | (_, Err(e)) => {
                return Err(format!("cannot read the peer's pid namespace: {e}"))
            }
        };
        let tids = if foreign_ns {
            let map = self.ns_tids();
            tids.iter()
                .map(|t| {
                    map.get(t).copied().ok_or_else(|| {
                        format!(
                            "tid {t} (in the service's pid namespace) is not a thread of the \
                             connecting process {}",
                            self.pid
                        )
                    })
                })
                .collect::<Result<Vec<u32>, String>>()?
        } else {
            tids.to_vec()
        };
        let mut out = Vec::with_capacity(tids.len());
        for &tid in &tids {
            // The pidfd first: if the thread is still alive once the binding is
            // written, the /proc entry read below was its own.
            let fd = match pidfd_open(tid, libc::PIDFD_THREAD) {
                Ok(fd) => Some(fd),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    return Err(format!("tid {tid} is not a running thread"))
                }
                // Before Linux 6.9 (no PIDFD_THREAD): the start time alone.
                Err(_) => None,
            };
            let start_ticks = thread_start_ticks(self.pid, tid).ok_or_else(|| {
                format!(
                    "tid {tid} is not a thread of the connecting process {}",
                    self.pid
                )
            })?;
            out.push(Thread {
                tid,
                tgid: self.pid,
                start_ticks,
                fd,
            });
        }
        // And the process is still the one that connected, so `self.pid` above was it.
        if !self.alive() {
            return Err("the connecting process exited".into());
        }
        Ok(out)
    }

    /// The peer's threads: tid as the peer sees it -> tid in our namespace.
    fn ns_tids(&self) -> HashMap<u32, u32> {
        let mut map = HashMap::new();
        let Ok(dir) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return map;
        };
        for e in dir.flatten() {
            let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
                continue;
            };
            if let Some(ids) = parse_nspid(&status) {
                map.insert(*ids.last().unwrap(), ids[0]);
            }
        }
        map
    }
}

/// ioctl_ns(2): the parent of a user namespace, and a user namespace's owner (in the
/// caller's user namespace). `_IO(NSIO, 2)` and `_IO(NSIO, 4)`, NSIO 0xb7 (linux/nsfs.h).
const NS_GET_PARENT: libc::c_ulong = 0xb702;
const NS_GET_OWNER_UID: libc::c_ulong = 0xb704;
/// How deep user namespaces nest at most (kernel/user_namespace.c refuses a new one only
/// when its parent's level is above 32: 33 levels below the initial one).
const MAX_USERNS_DEPTH: usize = 33;

/// Whom the registration limits count process `pid` (uid `uid`, still running while
/// `pidfd` says so) against ([`Account`]): its user, if it runs in the daemon's user
/// namespace; else the user that created the outermost of its user namespaces (the one
/// created in the daemon's); or, when root created that one, that namespace, and with it
/// the process's own user when the namespace maps that one uid only (a sandbox). A user is
/// a uid with subordinate uids taken back to their owner (`subuids`).
pub fn account(
    pid: u32,
    uid: u32,
    pidfd: BorrowedFd<'_>,
    subuids: &SubUids,
) -> io::Result<Account> {
    let own = own_ns_ino("user")?;
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
    // How many uids its namespace maps (read before the liveness check, like the file).
    let mapped: u64 = std::fs::read_to_string(format!("/proc/{pid}/uid_map"))?
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum();
    // The file is the peer's only if the peer still runs now (its pid was not reused).
    if pidfd_exited(pidfd) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the connecting process exited",
        ));
    }
    if ns.metadata()?.ino() == own {
        return Ok(Account::uid(subuids.user_of(uid)));
    }
    let mut ns = OwnedFd::from(ns);
    for _ in 0..MAX_USERNS_DEPTH {
        // SAFETY: NS_GET_PARENT takes no argument and returns a new descriptor or -1.
        let parent = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_PARENT as _) };
        if parent < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just gave us this descriptor.
        let parent = unsafe { OwnedFd::from_raw_fd(parent) };
        if std::fs::File::from(parent.try_clone()?).metadata()?.ino() == own {
            let mut owner: libc::uid_t = 0;
            // SAFETY: NS_GET_OWNER_UID writes one uid_t through the pointer.
            let rc = unsafe {
                libc::ioctl(
                    ns.as_raw_fd(),
                    NS_GET_OWNER_UID as _,
                    &mut owner as *mut libc::uid_t,
                )
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(if owner == 0 {
                // A container runtime's, or a setuid helper's made for a user (bubblewrap):
                // the container is one user, and the user does not start over in each.
                // One uid mapped: a sandbox a setuid helper made for its caller, who is
                // also charged (taken back through subuid(5), so a user running as a
                // subordinate uid gains nothing). More: a container, one user by itself
                // (its uids may come from a runtime's range that subuid(5) lists under
                // Docker's `dockremap`: charged to it, all containers would share one).
                let ino = std::fs::File::from(ns).metadata()?.ino();
                if mapped == 1 {
                    Account::of(vec![Key::Namespace(ino), Key::Uid(subuids.user_of(uid))])
                } else {
                    Account::of(vec![Key::Namespace(ino)])
                }
            } else {
                Account::uid(subuids.user_of(owner))
            });
        }
        ns = parent;
    }
    Err(io::Error::other(
        "the peer's user namespaces do not lead to the daemon's",
    ))
}

/// SO_PEERPIDFD: a pidfd for the process that connected (Linux 6.5).
fn peer_pidfd(stream: &UnixStream) -> io::Result<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int-sized out buffer with its length, as SO_PEERPIDFD expects.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel installed this descriptor for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether every thread pidfd taken in [`Peer::threads`] still refers to a
/// running thread.
pub fn all_alive(threads: &[Thread]) -> bool {
    threads
        .iter()
        .all(|t| t.fd.as_ref().is_none_or(|fd| !pidfd_exited(fd.as_fd())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starttime_is_field_22_even_with_odd_names() {
        // A real line, with a command name holding spaces and parentheses.
        let line =
            "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 987654 1000 10 \
                    18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 2 0 0 0 0 0";
        assert_eq!(parse_stat_starttime(line), Some(987654));
        assert_eq!(parse_stat_starttime("1 (x) S 1"), None);
    }

    #[test]
    fn accounts_follow_user_namespaces_to_their_owner() {
        let me = std::process::id();
        let fd = pidfd_open(me, 0).unwrap();
        let none = SubUids::default();
        assert_eq!(
            account(me, 1234, fd.as_fd(), &none).unwrap(),
            Account::uid(1234)
        );
        let (subs, _) = SubUids::parse("1000:1200:100\n", |_| None);
        assert_eq!(
            account(me, 1234, fd.as_fd(), &subs).unwrap(),
            Account::uid(1000)
        );
        // A user namespace made by whoever runs the tests: counted as that uid, or (root's)
        // as the namespace. Skipped where user namespaces are off.
        let Ok(mut child) = std::process::Command::new("unshare")
            .args(["--user", "sleep", "5"])
            .spawn()
        else {
            return;
        };
        let pid = child.id();
        let fd = pidfd_open(pid, 0).unwrap();
        // Until unshare has exec'd into its namespace.
        let t0 = std::time::Instant::now();
        let own = std::fs::metadata("/proc/self/ns/user").unwrap().ino();
        while std::fs::metadata(format!("/proc/{pid}/ns/user"))
            .map(|m| m.ino())
            .ok()
            == Some(own)
            && t0.elapsed() < std::time::Duration::from_secs(2)
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if std::fs::metadata(format!("/proc/{pid}/ns/user"))
            .map(|m| m.ino())
            .ok()
            == Some(own)
        {
            // No namespace came (user namespaces off, or unshare failed).
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        let got = account(pid, 65534, fd.as_fd(), &none);
        eprintln!("account of a process in a new user namespace: {got:?}");
        let _ = child.kill();
        let _ = child.wait();
        let euid = nix::unistd::geteuid().as_raw();
        let got = got.unwrap();
        if euid == 0 {
            // Root made it, mapping nothing: the namespace alone.
            assert!(got.to_string().starts_with("user namespace "), "{got}");
            assert!(!got.to_string().contains(" and "), "{got}");
        } else {
            assert_eq!(got, Account::uid(euid));
        }
        // An exited process has no account (its pid may be another's by now).
        assert!(account(pid, 65534, fd.as_fd(), &none).is_err());
    }

    #[test]
    fn nspid_lists_outermost_first() {
        let s = "Name:\tx\nTgid:\t900\nNSpid:\t900\t7\nPPid:\t1\n";
        assert_eq!(parse_nspid(s), Some(vec![900, 7]));
        assert_eq!(parse_nspid("Name:\tx\n"), None);
    }

    #[test]
    fn our_own_threads_are_found_and_others_are_not() {
        let me = std::process::id();
        let peer = Peer {
            pid: me,
            uid: 0,
            account: Account::uid(0),
            pidfd: pidfd_open(me, 0).unwrap(),
        };
        let tid = nix::unistd::gettid().as_raw() as u32;
        let th = peer.threads(&[tid]).unwrap();
        assert_eq!(th[0].tgid, me);
        assert!(th[0].start_ticks > 0 || tid == me);
        assert!(all_alive(&th));
        // pid 1 is no thread of ours.
        assert!(peer.threads(&[1]).unwrap_err().contains("not a thread"));
        // A thread that exited is not alive any more, and its tid is refused.
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
        });
        let gone = rx.recv().unwrap();
        h.join().unwrap();
        // (join returns a moment before the kernel reaps the thread)
        let t0 = std::time::Instant::now();
        while peer.threads(&[gone]).is_ok() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(5));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
