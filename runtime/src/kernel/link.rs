//! The runtime's link to `scx_tailctl`: register, map the region, follow the
//! daemon's life.
//!
//! # Protocol (see [`super::protocol`])
//!
//! 1. Connect to the daemon's socket and send `REGISTER` with no workers and
//!    the threshold table; receive the service's region map fd (SCM_RIGHTS).
//! 2. `mmap` the region and build the pool *on* it, so every store the pool
//!    makes while serving (current request, active count, ...) is already a
//!    store into the BPF map: no system call per request switch.
//! 3. Once the workers run, `BIND` their tids. If the daemon refuses or does
//!    not answer in time (an overloaded machine), the pool runs on without
//!    kernel assistance and the watcher registers again as in step 4.
//! 4. A watcher thread blocks on the socket. EOF means the daemon died (the
//!    kernel then falls back to its default scheduler): the runtime switches
//!    serialization back to its own (wall-clock) decisions and keeps serving;
//!    the region stays mapped. It then retries registration, handing the same
//!    region map back (`region=1`), so a restarted daemon adopts the region
//!    the pool already uses.
//!
//! # Lifetime of the mapping
//!
//! The workers write into the mapping until they exit, and they can outlive
//! the [`AssistedPool`]: dropped on one of its own workers (the last handle
//! dropped inside a request), the pool cannot join its workers, which finish
//! the running requests and exit on their own. So nobody unmaps on drop: the
//! mapping is an `Arc<MappedRegion>` shared by the pool's `SharedState` (held
//! by the registry, which every worker holds, and so does every
//! [`PoolHandle`](crate::PoolHandle) of the pool), the watcher thread and the
//! `AssistedPool` itself, and it is unmapped when the last of them lets go,
//! i.e. after the last worker exited and the last handle was dropped.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::protocol::{Bind, Register, Reply};
use super::wire::{connect, is_backlog_full, recv_line, send_line};
use crate::shared_state::{SharedRegion, SharedState};
use crate::threshold::ThresholdTable;
use crate::{Pool, PoolBuilder};

/// The daemon's default socket.
pub const DEFAULT_SOCKET: &str = "/run/tailctl/tailctl.sock";

/// Entries of the threshold table sent to the kernel (q = 1..=KERNEL_QMAX).
pub const KERNEL_QMAX: usize = super::protocol::MAX_THRESHOLDS;

fn proto_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// A region map mapped into this process; unmapped on drop.
pub struct MappedRegion {
    ptr: NonNull<SharedRegion>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics.
unsafe impl Send for MappedRegion {}
// SAFETY: as above.
unsafe impl Sync for MappedRegion {}

impl MappedRegion {
    /// Map the single element of a region map (`BPF_F_MMAPABLE` array).
    pub fn map(fd: BorrowedFd<'_>) -> io::Result<Self> {
        let page = 4096usize;
        let len = std::mem::size_of::<SharedRegion>().div_ceil(page) * page;
        // SAFETY: mapping a file descriptor we hold, shared, read-write; the
        // result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// Pointer to the region (page-aligned).
    pub fn as_ptr(&self) -> NonNull<SharedRegion> {
        self.ptr
    }
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped. Every user of the
        // region holds the `Arc<MappedRegion>` this value lives in (module
        // doc, "Lifetime of the mapping"): the pool's SharedState (so every
        // worker, until it exits, and every PoolHandle) and the watcher. This
        // runs when the last of them dropped it, also after a panic, so
        // nothing touches it after.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Read one reply line (and an fd, if one rides along).
fn recv_reply(stream: &UnixStream) -> io::Result<(Reply, Option<OwnedFd>)> {
    let (line, fd) = recv_line(stream, 1024)?;
    Ok((Reply::parse(&line).map_err(proto_err)?, fd))
}

/// How long the daemon has to take a line or answer one.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// `pause` spread by up to a quarter either way, so that the services of one
/// machine, all cut off by the same daemon restart, do not all come back in
/// the same instant (the daemon meters connections per user: TOO_FAST).
fn jittered(pause: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState is keyed afresh (per-thread random keys, stepped on
    // every new()), which is random enough to spread retries.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let frac = (r % 1000) as f64 / 1000.0; // [0, 1)
    pause.mul_f64(0.75 + 0.5 * frac)
}

/// Step 1: register and receive the region fd. With `existing`, hand that
/// region back instead of getting a new one.
pub fn register(
    socket: &Path,
    thresholds_ns: &[u64],
    existing: Option<BorrowedFd<'_>>,
) -> io::Result<(UnixStream, u32, Option<OwnedFd>)> {
    register_at(socket, thresholds_ns, existing, None)
}

/// [`register`] asking for scheduling level `priority` (None: normal).
pub fn register_at(
    socket: &Path,
    thresholds_ns: &[u64],
    existing: Option<BorrowedFd<'_>>,
    priority: Option<u8>,
) -> io::Result<(UnixStream, u32, Option<OwnedFd>)> {
    let stream = connect(socket)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
    let req = Register {
        workers: Vec::new(),
        thresholds_ns: thresholds_ns.to_vec(),
        reuse_region: existing.is_some(),
        priority,
    };
    // A daemon that refuses the connection outright (a cap, the meter)
    // writes its reason and closes, possibly before this line arrives: the
    // reason is still there to read, and says more than the broken pipe.
    let sent = send_line(&stream, &req.to_line(), existing.map(|f| f.as_raw_fd()));
    let reply = recv_reply(&stream);
    if let (Err(e), Err(_)) = (&sent, &reply) {
        return Err(io::Error::new(e.kind(), e.to_string()));
    }
    match reply? {
        (Reply::Ok { service }, fd) => {
            if existing.is_none() && fd.is_none() {
                return Err(proto_err("daemon accepted but sent no region fd"));
            }
            Ok((stream, service, fd))
        }
        (Reply::Err(why), _) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("scx_tailctl refused the registration: {why}"),
        )),
    }
}

/// Step 3: bind worker tids.
pub fn bind(stream: &UnixStream, tids: &[u32]) -> io::Result<()> {
    send_line(
        stream,
        &Bind {
            workers: tids.to_vec(),
        }
        .to_line(),
        None,
    )?;
    match recv_reply(stream)?.0 {
        Reply::Ok { .. } => Ok(()),
        Reply::Err(why) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("scx_tailctl refused to bind the workers: {why}"),
        )),
    }
}

/// The threshold table as the kernel wants it: ns for q = 1..=KERNEL_QMAX, 0 = never.
pub fn kernel_thresholds(table: Option<&ThresholdTable>) -> Vec<u64> {
    match table {
        None => Vec::new(),
        Some(t) => (1..=KERNEL_QMAX)
            .map(|q| {
                t.lookup(q)
                    .map_or(0, |d| d.as_nanos().clamp(1, u64::MAX as u128) as u64)
            })
            .collect(),
    }
}

/// What the link knows, shared with its watcher thread.
struct LinkState {
    connected: AtomicBool,
    service: std::sync::atomic::AtomicU32,
    registrations: AtomicU64,
    stop: AtomicBool,
    stream: std::sync::Mutex<Option<UnixStream>>,
    /// Why the last attempt to register or bind failed (None: none failed
    /// since the last success): what an operator needs to see when a
    /// service runs unassisted.
    why: std::sync::Mutex<Option<String>>,
}

impl LinkState {
    fn new() -> Self {
        Self {
            connected: AtomicBool::new(false),
            service: std::sync::atomic::AtomicU32::new(u32::MAX),
            registrations: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            stream: std::sync::Mutex::new(None),
            why: std::sync::Mutex::new(None),
        }
    }

    fn failed(&self, step: &str, e: &io::Error) {
        // A poisoned lock only means a panic elsewhere; the text is still ours to set.
        *self.why.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{step}: {e}"));
    }

    fn succeeded(&self) {
        *self.why.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// A pool that is kernel-assisted while `scx_tailctl` runs, and a plain
/// user-space tail-control pool otherwise. Derefs to [`Pool`].
///
/// ```no_run
/// use tailctl_rt::kernel::link::{AssistedPool, DEFAULT_SOCKET};
/// use tailctl_rt::{Policy, Pool};
/// let pool = AssistedPool::start(
///     Pool::builder().workers(2).policy(Policy::TailControl),
///     None,
///     DEFAULT_SOCKET.as_ref(),
/// ).unwrap();
/// println!("kernel-assisted: {}", pool.is_kernel_assisted());
/// assert_eq!(pool.submit(|| 6 * 7).wait().unwrap(), 42);
/// ```
pub struct AssistedPool {
    pool: Option<Pool>,
    state: Arc<LinkState>,
    watcher: Option<std::thread::JoinHandle<()>>,
    _region_fd: Option<Arc<OwnedFd>>,
    /// One reference to the mapping; the pool's workers and the watcher hold
    /// others (module doc, "Lifetime of the mapping").
    _region: Option<Arc<MappedRegion>>,
}

impl std::ops::Deref for AssistedPool {
    type Target = Pool;
    fn deref(&self) -> &Pool {
        self.pool.as_ref().expect("pool present until drop")
    }
}

/// [`register`], tried again for about 3 s while the daemon says this user
/// opens connections too fast ([`super::protocol::TOO_FAST`]) or its backlog
/// is full: many processes of one user starting at once would otherwise run
/// unassisted for good (this first registration has no watcher behind it).
fn register_paced(socket: &Path, kthr: &[u64]) -> io::Result<(UnixStream, u32, Option<OwnedFd>)> {
    let mut pause = Duration::from_millis(100);
    let give_up = Instant::now() + Duration::from_secs(3);
    loop {
        match register(socket, kthr, None) {
            Err(e)
                if (e.to_string().contains(super::protocol::TOO_FAST) || is_backlog_full(&e))
                    && Instant::now() < give_up =>
            {
                std::thread::sleep(jittered(pause));
                pause = (pause * 2).min(Duration::from_millis(800));
            }
            r => return r,
        }
    }
}

impl AssistedPool {
    /// Build the pool, kernel-assisted if the daemon at `socket` accepts it.
    /// Failing to reach the daemon is not an error: the pool then runs in
    /// user space (see [`AssistedPool::is_kernel_assisted`]).
    pub fn start(
        builder: PoolBuilder,
        thresholds: Option<&ThresholdTable>,
        socket: &Path,
    ) -> io::Result<Self> {
        let kthr = kernel_thresholds(thresholds);
        let state = Arc::new(LinkState::new());
        let (stream, region_fd) = match register_paced(socket, &kthr) {
            Ok((stream, service, Some(fd))) => {
                state.service.store(service, Ordering::SeqCst);
                (stream, fd)
            }
            Ok(_) => unreachable!("register checks that a fresh registration carries an fd"),
            Err(e) => {
                state.failed(&format!("registering at {}", socket.display()), &e);
                // No daemon: a complete user-space runtime.
                return Ok(Self {
                    pool: Some(builder.build()?),
                    state,
                    watcher: None,
                    _region_fd: None,
                    _region: None,
                });
            }
        };
        let region = Arc::new(MappedRegion::map(region_fd.as_fd())?);
        let workers = builder.worker_count();
        // SAFETY: the mapping is page-aligned and sized for a SharedRegion
        // (the daemon checked the map's value size); it stays mapped as long
        // as the Arc handed over lives, i.e. as long as the SharedState and
        // thus every worker (module doc); the kernel writes only its
        // documented fields, atomically.
        let shared =
            unsafe { SharedState::from_raw_kept_alive(region.as_ptr(), workers, region.clone()) };
        let pool = builder.shared_state(shared).build()?;
        let tids = wait_for_tids(&pool, Duration::from_secs(5))?;
        // A daemon that does not bind (no answer within the read timeout: an
        // overloaded machine; or a refusal) costs the service its kernel
        // assistance for now, not its pool: hang up (the daemon drops the
        // registration) and let the watcher register again with the same
        // region, as after a daemon restart.
        match bind(&stream, &tids) {
            Ok(()) => {
                pool.shared_state().set_kernel_decides(true);
                state.connected.store(true, Ordering::SeqCst);
                state.registrations.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                state.failed(
                    "binding the workers (registering again in the background)",
                    &e,
                );
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
        let region_fd = Arc::new(region_fd);
        *state.stream.lock().unwrap() = Some(stream.try_clone()?);

        let watcher = {
            let state = state.clone();
            let fd = region_fd.clone();
            let socket = socket.to_path_buf();
            let region = region.clone();
            std::thread::Builder::new()
                .name("tailctl-link".into())
                .spawn(move || watch(stream, state, fd, socket, kthr, tids, region))?
        };
        Ok(Self {
            pool: Some(pool),
            state,
            watcher: Some(watcher),
            _region_fd: Some(region_fd),
            _region: Some(region),
        })
    }

    /// A plain user-space pool that never talks to a daemon.
    ///
    /// ```
    /// use tailctl_rt::kernel::link::AssistedPool;
    /// let pool = AssistedPool::without_kernel(tailctl_rt::Pool::builder().workers(1)).unwrap();
    /// assert!(!pool.is_kernel_assisted());
    /// assert_eq!(pool.submit(|| 1).wait().unwrap(), 1);
    /// ```
    pub fn without_kernel(builder: PoolBuilder) -> io::Result<Self> {
        Ok(Self {
            pool: Some(builder.build()?),
            state: Arc::new(LinkState::new()),
            watcher: None,
            _region_fd: None,
            _region: None,
        })
    }

    /// Whether the daemon is serving this pool right now.
    pub fn is_kernel_assisted(&self) -> bool {
        self.state.connected.load(Ordering::SeqCst)
    }

    /// The daemon's slot for this service while registered.
    pub fn service(&self) -> Option<u32> {
        let s = self.state.service.load(Ordering::SeqCst);
        (self.is_kernel_assisted() && s != u32::MAX).then_some(s)
    }

    /// Why the pool is not kernel-assisted, if an attempt to register or
    /// bind failed since the last success: the daemon's refusal (its
    /// reason), a socket that is missing or not open to this user, a
    /// timeout. None while assisted, and for a pool that never asked
    /// ([`AssistedPool::without_kernel`]).
    ///
    /// ```
    /// use tailctl_rt::kernel::link::AssistedPool;
    /// use tailctl_rt::Pool;
    /// let pool = AssistedPool::start(
    ///     Pool::builder().workers(1),
    ///     None,
    ///     std::path::Path::new("/nonexistent/tailctl.sock"),
    /// )
    /// .unwrap();
    /// assert!(!pool.is_kernel_assisted());
    /// let why = pool.unassisted_reason().unwrap();
    /// assert!(why.contains("/nonexistent/tailctl.sock"), "{why}");
    /// ```
    pub fn unassisted_reason(&self) -> Option<String> {
        if self.is_kernel_assisted() {
            return None;
        }
        self.state
            .why
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Successful registrations so far (1 + re-registrations after daemon restarts).
    pub fn registrations(&self) -> u64 {
        self.state.registrations.load(Ordering::SeqCst)
    }

    /// Shut down cleanly: drain the pool, then unregister.
    pub fn shutdown(mut self) {
        if let Some(p) = self.pool.take() {
            p.shutdown();
        }
    }
}

impl Drop for AssistedPool {
    fn drop(&mut self) {
        // Workers stop writing into the region before anything else goes.
        drop(self.pool.take());
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(s) = self.state.stream.lock().unwrap().take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

fn wait_for_tids(pool: &Pool, limit: Duration) -> io::Result<Vec<u32>> {
    let start = Instant::now();
    loop {
        let tids: Vec<u32> = (0..pool.workers())
            .map(|i| pool.shared_state().worker(i).tid())
            .collect();
        if tids.iter().all(|t| *t != 0) {
            return Ok(tids);
        }
        if start.elapsed() > limit {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "workers did not publish their tids",
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// First pause before registering again after the daemon went away or refused.
const RETRY_MIN: Duration = Duration::from_millis(200);
/// Longest pause between two registration attempts.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The pause before the next registration attempt after one that failed
/// with `e`. No daemon listening (no socket file, or a stale one: nothing
/// to ask, nothing refused) keeps the pause at [`RETRY_MIN`]: a failed
/// connect costs microseconds, and a daemon back from a restart (a CPU
/// hotplug, an upgrade) then gets its services back within that pause
/// instead of up to [`RETRY_MAX`] later. Anything the daemon said or did
/// (a refusal, a timeout, a failed BIND) doubles it, up to [`RETRY_MAX`].
fn next_pause(pause: Duration, e: &io::Error) -> Duration {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => RETRY_MIN,
        _ => (pause * 2).min(RETRY_MAX),
    }
}

/// Sleep for `d`, or less if the pool is shutting down (Drop joins the watcher).
fn sleep_unless_stopped(state: &LinkState, d: Duration) {
    let end = Instant::now() + d;
    while !state.stop.load(Ordering::SeqCst) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Follow the daemon: on EOF fall back, then re-register with the same region.
fn watch(
    mut stream: UnixStream,
    state: Arc<LinkState>,
    region_fd: Arc<OwnedFd>,
    socket: PathBuf,
    kthr: Vec<u64>,
    tids: Vec<u32>,
    region: Arc<MappedRegion>,
) {
    // SAFETY: `region` keeps the mapping alive while this thread runs; only
    // the header flag is written, atomically, without re-initialising it.
    let set_mode = |on: bool| unsafe { SharedState::set_kernel_decides_raw(region.as_ptr(), on) };
    loop {
        let _ = stream.set_read_timeout(None);
        let mut b = [0u8; 64];
        // Block until the daemon goes away (or we shut down).
        loop {
            match stream.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        set_mode(false);
        *state.why.lock().unwrap_or_else(|p| p.into_inner()) =
            Some("the daemon closed the connection (registering again)".into());
        state.connected.store(false, Ordering::SeqCst);
        if state.stop.load(Ordering::SeqCst) {
            return;
        }
        // Re-register with the same region when the daemon is back. The
        // pause doubles after each refusal (up to RETRY_MAX), so a daemon that
        // keeps refusing is not asked five times a second forever; while no
        // daemon listens it stays short (next_pause).
        let mut pause = RETRY_MIN;
        loop {
            if state.stop.load(Ordering::SeqCst) {
                return;
            }
            sleep_unless_stopped(&state, jittered(pause));
            let (s, svc) = match register(&socket, &kthr, Some(region_fd.as_fd())) {
                Ok((s, svc, _)) => (s, svc),
                Err(e) => {
                    state.failed(&format!("registering again at {}", socket.display()), &e);
                    pause = next_pause(pause, &e);
                    continue;
                }
            };
            state.service.store(svc, Ordering::SeqCst);
            if let Err(e) = bind(&s, &tids) {
                state.failed("binding the workers again", &e);
                pause = next_pause(pause, &e);
                continue;
            }
            let Ok(clone) = s.try_clone() else { continue };
            *state.stream.lock().unwrap() = Some(clone);
            if state.stop.load(Ordering::SeqCst) {
                return;
            }
            set_mode(true);
            state.succeeded();
            state.connected.store(true, Ordering::SeqCst);
            state.registrations.fetch_add(1, Ordering::SeqCst);
            stream = s;
            let _ = stream.flush();
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_daemon_keeps_the_pause_short_and_a_refusal_doubles_it() {
        let absent = io::Error::from(io::ErrorKind::NotFound);
        let stale = io::Error::from(io::ErrorKind::ConnectionRefused);
        let refused = io::Error::new(io::ErrorKind::PermissionDenied, "refused");
        let timeout = io::Error::from(io::ErrorKind::WouldBlock);
        // However long the daemon refused before, its absence polls at RETRY_MIN.
        assert_eq!(next_pause(RETRY_MAX, &absent), RETRY_MIN);
        assert_eq!(next_pause(RETRY_MAX, &stale), RETRY_MIN);
        assert_eq!(next_pause(RETRY_MIN, &refused), RETRY_MIN * 2);
        assert_eq!(next_pause(RETRY_MIN * 2, &timeout), RETRY_MIN * 4);
        assert_eq!(next_pause(RETRY_MAX, &refused), RETRY_MAX);
    }

    /// What `register` returns with no daemon: the kinds `next_pause` treats as absence.
    #[test]
    #[cfg_attr(miri, ignore = "unix sockets: not supported by Miri")]
    fn register_without_a_daemon_reports_absence() {
        let dir = std::env::temp_dir().join(format!("tailctl-rt-absent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.sock");
        let e = register(&missing, &[], None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        // A socket file nobody listens on (a killed daemon's).
        let stale = dir.join("stale.sock");
        // A file left by an earlier run under the same pid would make bind fail.
        let _ = std::fs::remove_file(&stale);
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let e = register(&stale, &[], None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        assert_eq!(next_pause(RETRY_MAX, &e), RETRY_MIN);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A daemon that never accepts (stopped): once its backlog is full,
    /// registering fails at once with the reason instead of waiting in
    /// connect(2) for as long as the daemon stays stopped, and so does the
    /// paced registration a starting service makes (after its ~3 s of retries).
    #[test]
    #[cfg_attr(miri, ignore)] // sockets
    fn register_against_a_full_backlog_fails_instead_of_waiting() {
        use nix::sys::socket::{
            bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
        };
        let dir = std::env::temp_dir().join(format!("tailctl-rt-backlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stalled.sock");
        let _ = std::fs::remove_file(&path);
        let listener = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(listener.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        // A backlog of 1: the kernel queues up to backlog + 1 connections.
        listen(&listener, Backlog::new(1).unwrap()).unwrap();
        let mut queued = Vec::new();
        let full = loop {
            match connect(&path) {
                Ok(s) => queued.push(s),
                Err(e) => break e,
            }
            assert!(queued.len() < 64, "the backlog of 1 never filled");
        };
        assert_eq!(full.kind(), io::ErrorKind::WouldBlock, "{full}");
        assert!(is_backlog_full(&full), "{full}");
        assert!(full.to_string().contains("backlog is full"), "{full}");
        let e = register(&path, &[], None).unwrap_err();
        assert!(is_backlog_full(&e), "{e}");
        let e = register_paced(&path, &[]).unwrap_err();
        assert!(is_backlog_full(&e), "{e}");
        // Refusal-like: the watcher backs off from a stalled daemon.
        assert_eq!(next_pause(RETRY_MIN, &e), RETRY_MIN * 2);
        drop(queued);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn jittered_pauses_stay_within_a_quarter_and_differ() {
        let p = Duration::from_millis(200);
        let seen: Vec<Duration> = (0..200).map(|_| jittered(p)).collect();
        for d in &seen {
            assert!(*d >= p.mul_f64(0.75) && *d < p.mul_f64(1.25), "{d:?}");
        }
        let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
        assert!(
            distinct.len() > 20,
            "{} distinct pauses of 200",
            distinct.len()
        );
    }
}
