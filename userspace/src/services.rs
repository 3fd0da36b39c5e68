//! Service registration: the daemon half of the protocol in
//! `tailctl_rt::kernel::protocol`.
//!
//! A runtime connects to the unix socket and sends its worker tids. The
//! daemon:
//!  1. identifies the peer: pid and uid from SO_PEERCRED (never from the
//!     message), and a pidfd for that process (see `identity`); connections
//!     beyond the per-user and global caps are refused before anything else;
//!  2. reads the request under one deadline for the whole line;
//!  3. checks that every tid is a live thread of that process, listed once,
//!     and not bound to another service; tids of a peer in a child pid
//!     namespace are translated to the scheduler's;
//!  4. gives the service a slot (within its user's quota): a fresh
//!     BPF_F_MMAPABLE region map, or the one the runtime passes back after a
//!     daemon restart (validated: type, sizes, flags, layout version),
//!     installed in the `regions` array-of-maps;
//!  5. writes the service's threshold table and tid -> (service, worker,
//!     thread identity) in maps only the daemon writes, all or nothing;
//!  6. replies with the region fd over SCM_RIGHTS. That fd is all the service
//!     gets: it can reach its own region and nothing else.
//!
//! The connection then stays open; when it closes, or the process exits, the
//! service's tids and slot are released. Each connection is served by its own
//! thread; all threads share one set of map handles.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapInfo, MapType};
use log::{info, warn};
use tailctl_rt::kernel::protocol::{Bind, Register, Reply, MAX_LINE, MAX_WORKERS, PRIORITY_NORMAL};
use tailctl_rt::kernel::wire::{recv_line_until, send_line};

use crate::bpf_intf::{tailctl_region, tailctl_service, tailctl_worker_ref};

mod binding;
pub mod cgjobs;
pub mod identity;
mod limits;
mod subuid;

use binding::TidMap;
use identity::{Peer, Thread};
use limits::Book;
pub use limits::{Account, Limits};

/// Where the daemon listens unless `--socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/tailctl/tailctl.sock";

const MAX_SERVICES: usize = crate::bpf_intf::tailctl_consts_TAILCTL_MAX_SERVICES as usize;
const QMAX: usize = crate::bpf_intf::tailctl_consts_TAILCTL_QMAX as usize;
const REGION_MAGIC: u32 = crate::bpf_intf::tailctl_consts_TAILCTL_REGION_MAGIC;
const REGION_VERSION: u32 = crate::bpf_intf::tailctl_consts_TAILCTL_REGION_VERSION;

/// The maps registration writes.
pub struct RegistryMaps {
    regions: MapHandle,
    services: MapHandle,
    worker_tids: Tids,
    registered: MapHandle,
}

/// The kernel's binding generation (`bind_gen`): the BPF side caches each
/// task's binding with the generation it looked it up at and looks again only
/// once it changed, so every change to `worker_tids` or to a service's
/// identity is followed by a bump. Under one lock, so that the generation
/// never repeats a value some task cached before a later change.
struct BindGen {
    map: MapHandle,
    last: Mutex<u64>,
}

impl BindGen {
    fn bump(&self) {
        let mut g = self.last.lock().unwrap();
        *g += 1;
        if let Err(e) = self
            .map
            .update(&0u32.to_ne_bytes(), &g.to_ne_bytes(), MapFlags::ANY)
        {
            warn!("bumping the binding generation: {e}");
        }
    }
}

/// `worker_tids`, each change followed by a generation bump.
struct Tids {
    map: MapHandle,
    gen: BindGen,
}

impl TidMap for Tids {
    fn get(&self, tid: u32) -> Option<tailctl_worker_ref> {
        let v = self.map.lookup(&tid.to_ne_bytes(), MapFlags::ANY).ok()??;
        (v.len() >= std::mem::size_of::<tailctl_worker_ref>())
            // SAFETY: size checked; plain-old-data struct of integers.
            .then(|| unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) })
    }
    fn insert_new(&self, tid: u32, v: &tailctl_worker_ref) -> Result<(), String> {
        let r = self
            .map
            .update(&tid.to_ne_bytes(), as_bytes(v), MapFlags::NO_EXIST)
            .map_err(|e| e.to_string());
        self.gen.bump();
        r
    }
    fn remove(&self, tid: u32) {
        let _ = self.map.delete(&tid.to_ne_bytes());
        self.gen.bump();
    }
}

/// Everything the connection threads share.
struct Registry {
    maps: RegistryMaps,
    book: Mutex<Book>,
    limits: Limits,
    subuids: subuid::SubUidFile,
    shutdown: AtomicBool,
    refusals: RateLimit,
    /// Told of every registration and unregistration (the allotment controller's job events).
    events: Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

/// At most one log line a second for refused connections: a flood must not
/// turn into a flood of log lines.
#[derive(Default)]
struct RateLimit(Mutex<(Option<Instant>, u64)>);

impl RateLimit {
    /// Call `log(suppressed since the last line)` unless a line went out
    /// less than a second ago.
    fn note(&self, log: impl FnOnce(u64)) {
        let mut g = self.0.lock().unwrap();
        match g.0 {
            Some(t) if t.elapsed() < Duration::from_secs(1) => g.1 += 1,
            _ => {
                log(g.1);
                *g = (Some(Instant::now()), 0);
            }
        }
    }
}

impl Registry {
    /// Claim a slot for `account` and publish the new count, under the lock:
    /// `registered` must never show a count another thread already replaced.
    fn claim(&self, account: &Account) -> Result<u32, String> {
        let mut book = self.book.lock().unwrap();
        let slot = book.claim(account, &self.limits)?;
        self.publish_count(&book);
        Ok(slot)
    }

    fn release(&self, slot: u32) {
        let mut book = self.book.lock().unwrap();
        book.release(slot);
        self.publish_count(&book);
    }

    /// A job started or ended: wake the allotment controller (if any).
    fn notify(&self) {
        if let Some(tx) = self.events.lock().unwrap().as_ref() {
            let _ = tx.send(());
        }
    }

    /// Publish how many services are registered; the BPF side skips all
    /// per-task look-ups while it is zero. Called with the book locked.
    fn publish_count(&self, book: &Book) {
        if let Err(e) = self.maps.registered.update(
            &0u32.to_ne_bytes(),
            &book.count().to_ne_bytes(),
            MapFlags::ANY,
        ) {
            warn!("updating the registered-services count: {e}");
        }
    }
}

/// Who may connect to the socket.
#[derive(Clone, Debug)]
pub struct SocketAccess {
    /// Permission bits of the socket file.
    pub mode: u32,
    /// Group owning the socket file (None: root's).
    pub gid: Option<u32>,
}

/// The scheduler's maps registration writes (the server keeps its own handles).
pub struct ServerMaps<'a, 'b> {
    pub regions: &'a libbpf_rs::MapMut<'b>,
    pub services: &'a libbpf_rs::MapMut<'b>,
    pub worker_tids: &'a libbpf_rs::MapMut<'b>,
    pub registered: &'a libbpf_rs::MapMut<'b>,
    pub bind_gen: &'a libbpf_rs::MapMut<'b>,
    pub job_cgroups: &'a libbpf_rs::MapMut<'b>,
}

/// The listening side; dropping it removes the socket file.
pub struct RegistrationServer {
    path: PathBuf,
    registry: Arc<Registry>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Re-matches the --job patterns (see `cgjobs`).
    cgroup_thread: Option<std::thread::JoinHandle<()>>,
}

/// A bound socket not yet served: connections wait in its backlog. The
/// daemon binds it before it attaches the scheduler, so that once sched_ext
/// reports the scheduler enabled the socket is there (a service started
/// right after would otherwise find no socket and run unassisted for good).
/// Dropping it removes the socket file.
pub struct Listening {
    path: PathBuf,
    listener: Option<UnixListener>,
    /// Set once the RegistrationServer owns the socket file.
    served: bool,
}

impl Drop for Listening {
    fn drop(&mut self) {
        if !self.served {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl RegistrationServer {
    /// Bind the socket at `path` with `access`; [`Listening::serve`] starts
    /// answering on it.
    pub fn listen(path: &Path, access: &SocketAccess) -> Result<Listening> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the socket directory {}", dir.display()))?;
        }
        // A socket file left by a daemon that was killed: nobody listens on it
        // (we already checked that no scheduler is loaded), so replace it.
        if path.exists() {
            // Non-blocking: a stopped daemon whose backlog is full is still
            // there (and would hold a blocking connect for as long as it
            // stays stopped).
            let r = tailctl_rt::kernel::wire::connect(path);
            if r.is_ok()
                || r.as_ref()
                    .is_err_and(tailctl_rt::kernel::wire::is_backlog_full)
            {
                bail!("another daemon is listening on {}", path.display());
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale socket {}", path.display()))?;
        }
        let listener =
            UnixListener::bind(path).with_context(|| format!("listening on {}", path.display()))?;
        // From here on, an error removes the file again (Drop).
        let bound = Listening {
            path: path.to_path_buf(),
            listener: Some(listener),
            served: false,
        };
        if let Some(l) = &bound.listener {
            l.set_nonblocking(true)?;
        }
        // Group first, then the mode: the socket is never open wider than asked.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        if let Some(gid) = access.gid {
            std::os::unix::fs::chown(path, None, Some(gid))
                .with_context(|| format!("giving {} to group {gid}", path.display()))?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
        Ok(bound)
    }
}

impl Listening {
    /// Serve registrations on the bound socket into the maps.
    pub fn serve(
        mut self,
        access: &SocketAccess,
        limits: Limits,
        maps: ServerMaps<'_, '_>,
        job_patterns: &[PathBuf],
    ) -> Result<RegistrationServer> {
        let path = self.path.clone();
        let job_cgroups = MapHandle::try_from(maps.job_cgroups)?;
        let maps = RegistryMaps {
            regions: MapHandle::try_from(maps.regions)?,
            services: MapHandle::try_from(maps.services)?,
            worker_tids: Tids {
                map: MapHandle::try_from(maps.worker_tids)?,
                gen: BindGen {
                    map: MapHandle::try_from(maps.bind_gen)?,
                    last: Mutex::new(0),
                },
            },
            registered: MapHandle::try_from(maps.registered)?,
        };
        let registry = Arc::new(Registry {
            maps,
            book: Mutex::new(Book::default()),
            subuids: subuid::SubUidFile::open(&limits.subuid_file),
            limits,
            shutdown: AtomicBool::new(false),
            refusals: RateLimit::default(),
            events: Mutex::new(None),
        });
        registry.publish_count(&registry.book.lock().unwrap());
        // Cgroup jobs (--job): the ones there now before the first registration,
        // then a thread follows the cgroups as they come and go.
        let cgroup_thread = if job_patterns.is_empty() {
            None
        } else {
            let mut jobs = cgjobs::CgroupJobs::new(job_patterns.to_vec(), job_cgroups);
            jobs.rescan(&registry);
            let r = registry.clone();
            Some(
                std::thread::Builder::new()
                    .name("tailctl-cgjobs".into())
                    .spawn(move || jobs.run(&r))?,
            )
        };
        let r = registry.clone();
        let listener = self.listener.take().expect("a Listening is served once");
        let thread = std::thread::Builder::new()
            .name("tailctl-registry".into())
            .spawn(move || accept_loop(listener, r))?;
        info!(
            "registration socket {} (mode {:o}, group {}; {:?})",
            path.display(),
            access.mode,
            access.gid.map_or("root".into(), |g| g.to_string()),
            registry.limits
        );
        self.served = true;
        Ok(RegistrationServer {
            path,
            registry,
            thread: Some(thread),
            cgroup_thread,
        })
    }
}

impl RegistrationServer {
    /// Tell `tx` of every registration and unregistration from now on (the
    /// allotment controller's job start/exit events).
    pub fn notify_to(&self, tx: std::sync::mpsc::Sender<()>) {
        *self.registry.events.lock().unwrap() = Some(tx);
    }
}

impl Drop for RegistrationServer {
    fn drop(&mut self) {
        self.registry.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.cgroup_thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(listener: UnixListener, reg: Arc<Registry>) {
    while !reg.shutdown.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => admit(stream, &reg),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Wake for a connection at once, else now and then for shutdown.
                let mut p = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut p, 1, 200) };
            }
            Err(e) => {
                warn!("registration: accept: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Identify a new connection and give it a thread, unless its user (or
/// everyone) is over the connection cap or its user opens connections too
/// fast: then it costs no thread at all. The global cap is checked on
/// SO_PEERCRED's uid alone; the per-user caps need the identification first
/// (SO_PEERPIDFD, the peer's user namespace and, for a peer in another one, a
/// walk up its parents: see `identity::account`).
fn admit(stream: UnixStream, reg: &Arc<Registry>) {
    let refused = |pid: i32, who: &str, why: &str| {
        reg.refusals.note(|n| {
            warn!(
                "refused a connection from pid {pid} ({who}): {why}{}",
                if n > 0 {
                    format!(" ({n} more refused in the last second)")
                } else {
                    String::new()
                }
            )
        });
        let _ = quick_refusal(&stream, why);
    };
    if let Ok(c) = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
    {
        if c.uid() != 0 {
            if let Some(why) = reg.book.lock().unwrap().full(&reg.limits) {
                return refused(c.pid(), &format!("uid {}", c.uid()), &why);
            }
        }
    }
    let subuids = reg.subuids.table();
    let peer = match Peer::identify(&stream, &subuids) {
        Ok(p) => p,
        Err(e) => {
            let _ = quick_refusal(&stream, &format!("cannot identify the peer: {e}"));
            return;
        }
    };
    let (uid, pid) = (peer.uid, peer.pid);
    if let Err(why) = reg.book.lock().unwrap().admit(&peer.account, &reg.limits) {
        return refused(
            pid as i32,
            &format!("uid {uid}{}", on_behalf(uid, &peer.account)),
            &why,
        );
    }
    let account = peer.account.clone();
    let r = reg.clone();
    let spawned = std::thread::Builder::new()
        .name("tailctl-service".into())
        .spawn(move || {
            // Given back however serve ends, a panic included.
            let _leave = LeaveOnDrop(&r, &peer.account);
            if let Err(e) = serve(stream, &r, &peer) {
                warn!("registration: {e:#}");
            }
        });
    if let Err(e) = spawned {
        warn!("registration: no thread for a connection: {e}");
        reg.book.lock().unwrap().leave(&account);
    }
}

/// Gives a connection back to the book when dropped.
struct LeaveOnDrop<'a>(&'a Registry, &'a Account);

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        self.0
            .book
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .leave(self.1);
    }
}

/// ", counted as ACCOUNT" when a peer's limits are not its own uid's (it runs in a user
/// namespace), for the log.
fn on_behalf(uid: u32, account: &Account) -> String {
    if *account == Account::uid(uid) {
        String::new()
    } else {
        format!(", counted as {account}")
    }
}

/// An ERR line to a connection we will not serve, without ever blocking the
/// accept loop on it.
fn quick_refusal(stream: &UnixStream, why: &str) -> std::io::Result<()> {
    stream.set_nonblocking(true)?;
    send_line(stream, &Reply::Err(why.to_string()).to_line(), None)
}

fn send_reply(stream: &UnixStream, reply: &Reply, fd: Option<RawFd>) -> Result<()> {
    send_line(stream, &reply.to_line(), fd).context("sending the reply")
}

/// A region map of the right shape: the one the runtime hands back after a restart.
fn check_region_map(fd: &OwnedFd) -> Result<()> {
    let info = MapInfo::new(fd.as_fd()).context("the passed fd is not a BPF map")?;
    let want = std::mem::size_of::<tailctl_region>() as u32;
    if info.map_type() != MapType::Array
        || info.info.key_size != 4
        || info.info.value_size != want
        || info.info.max_entries != 1
        || info.info.map_flags & libbpf_rs::libbpf_sys::BPF_F_MMAPABLE == 0
    {
        bail!(
            "the passed map is not a tailctl region (type {:?}, value size {} != {want}, flags {:#x})",
            info.map_type(),
            info.info.value_size,
            info.info.map_flags
        );
    }
    Ok(())
}

/// A region whose header claims our magic must have our layout version: a
/// runtime built for another layout would have the scheduler misread it.
/// (An uninitialised region is fine: the scheduler ignores it.)
fn check_region_header(fd: &OwnedFd) -> Result<(), String> {
    let mut value = vec![0u8; std::mem::size_of::<tailctl_region>()];
    let key = 0u32;
    // SAFETY: key and value buffers of the map's key and value sizes
    // (check_region_map or new_region_map made sure of them).
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_lookup_elem(
            fd.as_raw_fd(),
            (&key as *const u32).cast(),
            value.as_mut_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "reading the region: {}",
            std::io::Error::last_os_error()
        ));
    }
    let word = |at: usize| u32::from_ne_bytes(value[at..at + 4].try_into().unwrap());
    let (magic, version) = (word(0), word(4));
    if magic == REGION_MAGIC && version != REGION_VERSION {
        return Err(format!(
            "region layout version {version} not supported (this daemon reads version {REGION_VERSION})"
        ));
    }
    Ok(())
}

fn new_region_map() -> Result<OwnedFd> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    let map = MapHandle::create(
        MapType::Array,
        Some("tailctl_region"),
        4,
        std::mem::size_of::<tailctl_region>() as u32,
        1,
        &opts,
    )
    .context("creating a region map")?;
    Ok(map.as_fd().try_clone_to_owned()?)
}

fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: T is a plain-old-data bindgen struct from intf.h (integers and
    // arrays of integers), so all of its bytes are initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// How reading one request line ended, for the reply.
enum Request {
    Line(String, Option<OwnedFd>),
    /// Refuse with this reason (the peer is still there to read it).
    Refuse(String),
    /// The peer went away.
    Gone,
}

/// The REGISTER line, within the deadline. Oversized, non-UTF-8 and too-slow
/// requests get an ERR saying so.
fn read_request(stream: &UnixStream, deadline: Instant) -> Request {
    match recv_line_until(stream, MAX_LINE, Some(deadline)) {
        Ok((line, fd)) => Request::Line(line, fd),
        Err(e) => match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                Request::Refuse("the request did not arrive in time".into())
            }
            std::io::ErrorKind::InvalidData => Request::Refuse(format!("malformed request: {e}")),
            _ => Request::Gone,
        },
    }
}

/// Bind `threads` as workers `first..` of `slot`, then make sure the peer
/// and every thread are still alive: only then did the start times read
/// from /proc belong to the threads the tids now name. All or nothing.
fn bind_checked(
    maps: &RegistryMaps,
    peer: &Peer,
    slot: u32,
    first: u32,
    threads: &[Thread],
) -> Result<(), String> {
    binding::bind_all(&maps.worker_tids, slot, first, threads)?;
    if !peer.alive() || !identity::all_alive(threads) {
        binding::unbind(&maps.worker_tids, slot, threads);
        return Err("a thread exited while it was being bound".into());
    }
    Ok(())
}

/// Register one service and hold its slot until the connection closes.
fn serve(stream: UnixStream, reg: &Registry, peer: &Peer) -> Result<()> {
    let (pid, uid) = (peer.pid, peer.uid);
    let maps = &reg.maps;
    let refuse = |why: String| -> Result<()> {
        warn!(
            "refused registration from pid {pid} (uid {uid}{}): {why}",
            on_behalf(uid, &peer.account)
        );
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        send_reply(&stream, &Reply::Err(why), None)
    };
    stream.set_nonblocking(false)?;

    let deadline = Instant::now() + reg.limits.request_timeout;
    let (line, passed_fd) = match read_request(&stream, deadline) {
        Request::Line(l, fd) => (l, fd),
        Request::Refuse(why) => return refuse(why),
        Request::Gone => return Ok(()),
    };
    let req = match Register::parse(&line) {
        Ok(r) => r,
        Err(e) => return refuse(format!("malformed request: {e}")),
    };
    if req.thresholds_ns.len() > QMAX {
        return refuse(format!(
            "{} thresholds, at most {QMAX}",
            req.thresholds_ns.len()
        ));
    }
    if let Err(why) = check_priority(req.priority, &peer.account, reg.limits.max_user_priority) {
        return refuse(why);
    }
    if let Err(why) = binding::check_unique(&req.workers) {
        return refuse(why);
    }
    let threads = match peer.threads(&req.workers) {
        Ok(t) => t,
        Err(why) => return refuse(why),
    };
    let region_fd = match (req.reuse_region, passed_fd) {
        (true, Some(fd)) => match check_region_map(&fd)
            .map_err(|e| format!("{e:#}"))
            .and_then(|()| check_region_header(&fd))
        {
            Ok(()) => fd,
            Err(why) => return refuse(why),
        },
        (true, None) => return refuse("region=1 but no map fd attached".into()),
        (false, _) => new_region_map()?,
    };

    let slot = match reg.claim(&peer.account) {
        Ok(s) => s,
        Err(why) => return refuse(why),
    };
    if let Err(why) = install(maps, peer, slot, &req, &threads, &region_fd) {
        uninstall(maps, slot, &[]);
        reg.release(slot);
        return refuse(format!("installing the service: {why}"));
    }
    let mut bound = threads;
    let outcome = send_reply(
        &stream,
        &Reply::Ok { service: slot },
        Some(region_fd.as_raw_fd()),
    )
    .map(|()| {
        info!(
            "registered service {slot}: pid {pid} uid {uid}{}, priority {}, {} workers, {} thresholds{}",
            on_behalf(uid, &peer.account),
            req.priority.unwrap_or(PRIORITY_NORMAL),
            req.workers.len(),
            req.thresholds_ns.len(),
            if req.reuse_region {
                " (re-registration)"
            } else {
                ""
            }
        );
        reg.notify();
        hold(&stream, reg, peer, slot, &region_fd, &mut bound)
    });
    uninstall(maps, slot, &bound);
    reg.release(slot);
    reg.notify();
    info!("service {slot} (pid {pid}) unregistered");
    outcome
}

/// Whether `who` may register at level `asked` (None: normal). A level above
/// normal takes CPU from every other task on the machine (the kernel serves
/// it first), so non-root users may go only as high as the operator allows
/// (`--max-user-priority`, default normal); any user may go lower.
fn check_priority(asked: Option<u8>, who: &Account, max_user: u8) -> Result<(), String> {
    let level = asked.unwrap_or(PRIORITY_NORMAL);
    // Root of the daemon's user namespace only (root in a container is limited).
    if !who.is_root() && level > max_user {
        return Err(format!(
            "priority {level} refused: {who} may register at most at level {max_user} \
             (normal is {PRIORITY_NORMAL}; a higher level takes CPU from every other task, \
             the operator can raise the limit with --max-user-priority)"
        ));
    }
    Ok(())
}

/// Refused BIND lines after which a connection is closed (see [`hold`]).
const MAX_REFUSED_LINES: u32 = 16;

/// While the service is connected: serve BIND lines, notice the connection
/// closing or the process exiting.
fn hold(
    stream: &UnixStream,
    reg: &Registry,
    peer: &Peer,
    slot: u32,
    region_fd: &OwnedFd,
    bound: &mut Vec<Thread>,
) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // When the unfinished line in `buf` started: it must end within the deadline.
    let mut partial_since: Option<Instant> = None;
    // Refused lines so far: each costs a copy of the region and /proc reads,
    // and a connection could send thousands in one write (the connection
    // rate meters connections, not lines). A runtime binds at most
    // MAX_WORKERS threads, each BIND adding one or more.
    let mut refused = 0u32;
    while !reg.shutdown.load(Ordering::Relaxed) {
        let mut fds = [
            libc::pollfd {
                fd: stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: peer.pidfd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 200) };
        if fds[1].revents != 0 {
            // The process is gone, even if a child still holds the socket.
            return;
        }
        match std::io::Read::read(&mut &*stream, &mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
        if buf.len() > MAX_LINE {
            let _ = send_reply(
                stream,
                &Reply::Err(format!("line longer than {MAX_LINE} bytes")),
                None,
            );
            return;
        }
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let reply = match std::str::from_utf8(&line) {
                Err(_) => Reply::Err("malformed request: line is not UTF-8".into()),
                Ok(line) => bind_line(reg, peer, slot, region_fd, bound, line),
            };
            if matches!(reply, Reply::Err(_)) {
                refused += 1;
            }
            if send_reply(stream, &reply, None).is_err() {
                return;
            }
            if refused >= MAX_REFUSED_LINES {
                let _ = send_reply(
                    stream,
                    &Reply::Err(format!("{refused} requests refused: closing")),
                    None,
                );
                return;
            }
        }
        partial_since = match (buf.is_empty(), partial_since) {
            (true, _) => None,
            (false, None) => Some(Instant::now()),
            (false, Some(t)) if t.elapsed() > reg.limits.request_timeout => {
                let _ = send_reply(
                    stream,
                    &Reply::Err("the request did not arrive in time".into()),
                    None,
                );
                return;
            }
            (false, since) => since,
        };
    }
}

/// Serve one BIND line.
fn bind_line(
    reg: &Registry,
    peer: &Peer,
    slot: u32,
    region_fd: &OwnedFd,
    bound: &mut Vec<Thread>,
    line: &str,
) -> Reply {
    let b = match Bind::parse(line) {
        Ok(b) => b,
        Err(e) => return Reply::Err(format!("malformed request: {e}")),
    };
    if bound.len() + b.workers.len() > MAX_WORKERS {
        return Reply::Err("too many workers".into());
    }
    let threads = match binding::check_unique(&b.workers)
        .and_then(|()| check_region_header(region_fd))
        .and_then(|()| peer.threads(&b.workers))
    {
        Ok(t) => t,
        Err(why) => return Reply::Err(why),
    };
    match bind_checked(&reg.maps, peer, slot, bound.len() as u32, &threads) {
        Ok(()) => {
            bound.extend(threads.into_iter().map(|t| Thread { fd: None, ..t }));
            info!("service {slot}: bound {} workers", bound.len());
            Reply::Ok { service: slot }
        }
        Err(why) => Reply::Err(why),
    }
}

/// Registration sequence numbers: with the pid, the kernel tells one
/// registration of a slot from the next (`tailctl_service.epoch`), so a slot
/// reused by the same pid never inherits the previous registration's
/// accounting (caps, tokens, serialized time).
static REGISTRATION_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The smallest non-zero threshold of a table (u64::MAX if none: no request
/// of the service is ever serialized), which the kernel compares a request's
/// work with before it reads the table (`tailctl_service.threshold_floor_ns`).
fn threshold_floor(thresholds_ns: &[u64]) -> u64 {
    thresholds_ns
        .iter()
        .copied()
        .filter(|&t| t != 0)
        .min()
        .unwrap_or(u64::MAX)
}

fn install(
    maps: &RegistryMaps,
    peer: &Peer,
    slot: u32,
    req: &Register,
    threads: &[Thread],
    region: &OwnedFd,
) -> Result<(), String> {
    let key = slot.to_ne_bytes();
    // SAFETY: tailctl_service is plain old data; all-zero is a valid value.
    let mut svc: tailctl_service = unsafe { std::mem::zeroed() };
    svc.pid = peer.pid;
    svc.uid = peer.uid;
    svc.allot = 0;
    svc.priority = u32::from(req.priority.unwrap_or(PRIORITY_NORMAL));
    // 32 bits are kept (the kernel shifts it above the pid); wrapping after
    // four billion registrations only needs it to differ from the last one.
    svc.epoch = REGISTRATION_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xffff_ffff;
    svc.nr_thresholds = req.thresholds_ns.len() as u32;
    for (i, t) in req.thresholds_ns.iter().enumerate() {
        svc.threshold_ns[i] = *t;
    }
    svc.threshold_floor_ns = threshold_floor(&req.thresholds_ns);
    maps.services
        .update(&key, as_bytes(&svc), MapFlags::ANY)
        .map_err(|e| format!("writing the service entry: {e}"))?;
    // The slot's identity (pid, epoch) changed: cached bindings are looked up again.
    maps.worker_tids.gen.bump();
    maps.regions
        .update(
            &key,
            &(region.as_raw_fd() as u32).to_ne_bytes(),
            MapFlags::ANY,
        )
        .map_err(|e| format!("installing the region map: {e}"))?;
    bind_checked(maps, peer, slot, 0, threads)
}

fn uninstall(maps: &RegistryMaps, slot: u32, threads: &[Thread]) {
    binding::unbind(&maps.worker_tids, slot, threads);
    let key = slot.to_ne_bytes();
    let _ = maps.regions.delete(&key);
    // SAFETY: plain old data; zero means "free slot".
    let empty: tailctl_service = unsafe { std::mem::zeroed() };
    let _ = maps.services.update(&key, as_bytes(&empty), MapFlags::ANY);
    maps.worker_tids.gen.bump();
}

#[cfg(test)]
mod tests {
    use super::*;
    use limits::Key;
    use std::io::Write;

    #[test]
    fn threshold_floor_is_the_smallest_threshold_that_serializes() {
        // 0 means "never at this load": it must not become the floor.
        assert_eq!(
            threshold_floor(&[0, 30_000_000, 0, 12_000_000, 50_000_000]),
            12_000_000
        );
        assert_eq!(threshold_floor(&[7]), 7);
        assert_eq!(threshold_floor(&[0, 0]), u64::MAX);
        assert_eq!(threshold_floor(&[]), u64::MAX);
    }

    fn reply_to(bytes: &[u8], deadline: Duration) -> Option<String> {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(bytes).unwrap();
        match read_request(&b, Instant::now() + deadline) {
            Request::Refuse(why) => Some(why),
            _ => None,
        }
    }

    #[test]
    fn priorities_above_the_user_limit_are_refused() {
        assert!(check_priority(None, &Account::uid(1000), PRIORITY_NORMAL).is_ok());
        assert!(check_priority(Some(0), &Account::uid(1000), PRIORITY_NORMAL).is_ok());
        assert!(
            check_priority(Some(PRIORITY_NORMAL), &Account::uid(1000), PRIORITY_NORMAL).is_ok()
        );
        let e = check_priority(
            Some(PRIORITY_NORMAL + 1),
            &Account::uid(1000),
            PRIORITY_NORMAL,
        )
        .unwrap_err();
        assert!(e.contains("--max-user-priority"), "{e}");
        assert!(check_priority(Some(7), &Account::uid(0), PRIORITY_NORMAL).is_ok());
        assert!(check_priority(Some(7), &Account::uid(1000), 7).is_ok());
        // Root in a namespace root made is not root here.
        let contained = Account::of(vec![Key::Namespace(4026532000), Key::Uid(0)]);
        assert!(check_priority(Some(7), &contained, PRIORITY_NORMAL).is_err());
    }

    #[test]
    fn bad_requests_are_answered() {
        let long = vec![b'x'; MAX_LINE + 10];
        assert!(reply_to(&long, Duration::from_secs(5))
            .unwrap()
            .contains("longer than"));
        assert!(
            reply_to(b"REGISTER 1 workers=\xff\n", Duration::from_secs(5))
                .unwrap()
                .contains("UTF-8")
        );
        // A slow sender: half a line, then nothing.
        assert!(reply_to(b"REGISTER 1 wor", Duration::from_millis(100))
            .unwrap()
            .contains("in time"));
    }

    #[test]
    fn a_peer_that_hangs_up_gets_no_reply() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"REGIS").unwrap();
        drop(a);
        assert!(matches!(
            read_request(&b, Instant::now() + Duration::from_secs(5)),
            Request::Gone
        ));
    }
}
