//! Service registration: the daemon half of the protocol in
//! `tailctl_rt::kernel::protocol`.
//!
//! A runtime connects to the unix socket and sends its worker tids. The
//! daemon:
//!  1. takes the peer's pid and uid from SO_PEERCRED (never from the message);
//!  2. checks that every tid is a thread of that process (`/proc/<tid>/status`
//!     Tgid) and not bound to another service;
//!  3. gives the service a slot: a fresh BPF_F_MMAPABLE region map, or the one
//!     the runtime passes back after a daemon restart (validated: type, sizes,
//!     flags), installed in the `regions` array-of-maps;
//!  4. writes the service's threshold table and tid -> (service, worker) in
//!     maps only the daemon writes;
//!  5. replies with the region fd over SCM_RIGHTS. That fd is all the service
//!     gets: it can reach its own region and nothing else.
//!
//! The connection then stays open; when it closes, the service's tids and slot
//! are released. Each connection is served by its own thread with its own map
//! handles (file descriptors), so the scheduler's main loop is never involved.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapInfo, MapType};
use log::{info, warn};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use tailctl_rt::kernel::protocol::{Bind, Register, Reply, MAX_LINE};
use tailctl_rt::kernel::wire::{recv_line, send_line};

use crate::bpf_intf::{tailctl_region, tailctl_service, tailctl_worker_ref};

/// Where the daemon listens unless `--socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/tailctl/tailctl.sock";

const MAX_SERVICES: usize = crate::bpf_intf::tailctl_consts_TAILCTL_MAX_SERVICES as usize;
const QMAX: usize = crate::bpf_intf::tailctl_consts_TAILCTL_QMAX as usize;

/// The maps registration writes, as independent handles (one set per thread).
pub struct RegistryMaps {
    regions: MapHandle,
    services: MapHandle,
    worker_tids: MapHandle,
    registered: MapHandle,
}

impl RegistryMaps {
    fn dup(&self) -> Result<Self> {
        Ok(Self {
            regions: MapHandle::try_from(&self.regions)?,
            services: MapHandle::try_from(&self.services)?,
            worker_tids: MapHandle::try_from(&self.worker_tids)?,
            registered: MapHandle::try_from(&self.registered)?,
        })
    }
}

/// Slot bookkeeping shared by the connection threads.
#[derive(Default)]
struct Slots {
    used: [bool; MAX_SERVICES],
    count: u32,
}

/// The listening side; dropping it removes the socket file.
pub struct RegistrationServer {
    path: PathBuf,
    shutdown: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RegistrationServer {
    /// Listen on `path` (mode `mode`), serving registrations into `maps`.
    pub fn start(
        path: &Path,
        mode: u32,
        regions: &libbpf_rs::MapMut<'_>,
        services: &libbpf_rs::MapMut<'_>,
        worker_tids: &libbpf_rs::MapMut<'_>,
        registered: &libbpf_rs::MapMut<'_>,
    ) -> Result<Self> {
        let maps = RegistryMaps {
            regions: MapHandle::try_from(regions)?,
            services: MapHandle::try_from(services)?,
            worker_tids: MapHandle::try_from(worker_tids)?,
            registered: MapHandle::try_from(registered)?,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the socket directory {}", dir.display()))?;
        }
        // A socket file left by a daemon that was killed: nobody listens on it
        // (we already checked that no scheduler is loaded), so replace it.
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                bail!("another daemon is listening on {}", path.display());
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale socket {}", path.display()))?;
        }
        let listener =
            UnixListener::bind(path).with_context(|| format!("listening on {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
        listener.set_nonblocking(true)?;
        let shutdown = Arc::new(AtomicBool::new(false));
        let slots = Arc::new(Mutex::new(Slots::default()));
        let sd = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name("tailctl-registry".into())
            .spawn(move || accept_loop(listener, maps, slots, sd))?;
        info!("registration socket {} (mode {mode:o})", path.display());
        Ok(Self {
            path: path.to_path_buf(),
            shutdown,
            thread: Some(thread),
        })
    }
}

impl Drop for RegistrationServer {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(
    listener: UnixListener,
    maps: RegistryMaps,
    slots: Arc<Mutex<Slots>>,
    shutdown: Arc<AtomicBool>,
) {
    while !shutdown.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let maps = match maps.dup() {
                    Ok(m) => m,
                    Err(e) => {
                        warn!("registration: duplicating map handles: {e:#}");
                        continue;
                    }
                };
                let slots = slots.clone();
                let sd = shutdown.clone();
                let _ = std::thread::Builder::new()
                    .name("tailctl-service".into())
                    .spawn(move || {
                        if let Err(e) = serve(stream, &maps, &slots, &sd) {
                            warn!("registration: {e:#}");
                        }
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                warn!("registration: accept: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

fn recv_request(stream: &UnixStream) -> Result<(String, Option<OwnedFd>)> {
    recv_line(stream, MAX_LINE).context("reading the request")
}

fn send_reply(stream: &UnixStream, reply: &Reply, fd: Option<RawFd>) -> Result<()> {
    send_line(stream, &reply.to_line(), fd).context("sending the reply")
}

/// The thread group of `tid`, from /proc.
fn tgid_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
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

/// Register one service and hold its slot until the connection closes.
fn serve(
    stream: UnixStream,
    maps: &RegistryMaps,
    slots: &Mutex<Slots>,
    shutdown: &AtomicBool,
) -> Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let cred = getsockopt(&stream, PeerCredentials).context("SO_PEERCRED")?;
    let (pid, uid) = (cred.pid() as u32, cred.uid());
    let refuse = |why: String| -> Result<()> {
        warn!("refused registration from pid {pid} (uid {uid}): {why}");
        send_reply(&stream, &Reply::Err(why), None)
    };

    let (line, passed_fd) = recv_request(&stream)?;
    let req = match Register::parse(&line) {
        Ok(r) => r,
        Err(e) => return refuse(format!("malformed request: {e}")),
    };
    if let Err(why) = check_tids(maps, pid, &req.workers) {
        return refuse(why);
    }
    if req.thresholds_ns.len() > QMAX {
        return refuse(format!(
            "{} thresholds, at most {QMAX}",
            req.thresholds_ns.len()
        ));
    }
    let region_fd = match (req.reuse_region, passed_fd) {
        (true, Some(fd)) => match check_region_map(&fd) {
            Ok(()) => fd,
            Err(e) => return refuse(format!("{e:#}")),
        },
        (true, None) => return refuse("region=1 but no map fd attached".into()),
        (false, _) => new_region_map()?,
    };

    let slot = {
        let mut s = slots.lock().unwrap();
        match s.used.iter().position(|u| !u) {
            Some(i) => {
                s.used[i] = true;
                s.count += 1;
                i as u32
            }
            None => {
                drop(s);
                return refuse(format!("all {MAX_SERVICES} service slots are in use"));
            }
        }
    };
    let result = install(maps, slot, pid, uid, &req, &region_fd);
    if let Err(e) = result {
        uninstall(maps, slot, &req.workers);
        release_slot(slots, slot, maps);
        return refuse(format!("installing the service: {e:#}"));
    }
    send_reply(
        &stream,
        &Reply::Ok { service: slot },
        Some(region_fd.as_raw_fd()),
    )?;
    update_registered(maps, slots);
    info!(
        "registered service {slot}: pid {pid} uid {uid}, {} workers, {} thresholds{}",
        req.workers.len(),
        req.thresholds_ns.len(),
        if req.reuse_region {
            " (re-registration)"
        } else {
            ""
        }
    );

    // Hold the slot while the service is connected; serve BIND lines.
    let mut bound = req.workers.clone();
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    'conn: loop {
        if shutdown.load(Ordering::Relaxed) {
            break;
        }
        match (&stream).read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        }
        if buf.len() > MAX_LINE {
            let _ = send_reply(
                &stream,
                &Reply::Err(format!("line longer than {MAX_LINE} bytes")),
                None,
            );
            break;
        }
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let reply = match Bind::parse(&line) {
                Err(e) => Reply::Err(format!("malformed request: {e}")),
                Ok(b)
                    if bound.len() + b.workers.len()
                        > tailctl_rt::kernel::protocol::MAX_WORKERS =>
                {
                    Reply::Err("too many workers".into())
                }
                Ok(b) => match check_tids(maps, pid, &b.workers) {
                    Err(why) => Reply::Err(why),
                    Ok(()) => match bind_tids(maps, slot, bound.len() as u32, &b.workers) {
                        Ok(()) => {
                            bound.extend_from_slice(&b.workers);
                            info!("service {slot}: bound {} workers", bound.len());
                            Reply::Ok { service: slot }
                        }
                        Err(e) => Reply::Err(format!("{e:#}")),
                    },
                },
            };
            if send_reply(&stream, &reply, None).is_err() {
                break 'conn;
            }
        }
    }
    uninstall(maps, slot, &bound);
    release_slot(slots, slot, maps);
    info!("service {slot} (pid {pid}) unregistered");
    Ok(())
}

fn install(
    maps: &RegistryMaps,
    slot: u32,
    pid: u32,
    uid: u32,
    req: &Register,
    region: &OwnedFd,
) -> Result<()> {
    let key = slot.to_ne_bytes();
    // SAFETY: tailctl_service is plain old data; all-zero is a valid value.
    let mut svc: tailctl_service = unsafe { std::mem::zeroed() };
    svc.pid = pid;
    svc.uid = uid;
    svc.allot = 0;
    svc.nr_thresholds = req.thresholds_ns.len() as u32;
    for (i, t) in req.thresholds_ns.iter().enumerate() {
        svc.threshold_ns[i] = *t;
    }
    maps.services
        .update(&key, as_bytes(&svc), MapFlags::ANY)
        .context("writing the service entry")?;
    maps.regions
        .update(
            &key,
            &(region.as_raw_fd() as u32).to_ne_bytes(),
            MapFlags::ANY,
        )
        .context("installing the region map")?;
    bind_tids(maps, slot, 0, &req.workers)
}

/// Bind `tids` as workers `first..` of service `slot`.
fn bind_tids(maps: &RegistryMaps, slot: u32, first: u32, tids: &[u32]) -> Result<()> {
    for (w, &tid) in tids.iter().enumerate() {
        let r = tailctl_worker_ref {
            service: slot,
            worker: first + w as u32,
        };
        maps.worker_tids
            .update(&tid.to_ne_bytes(), as_bytes(&r), MapFlags::NO_EXIST)
            .with_context(|| format!("binding tid {tid}"))?;
    }
    Ok(())
}

/// Every tid must be a thread of the peer and not bound already.
fn check_tids(maps: &RegistryMaps, pid: u32, tids: &[u32]) -> Result<(), String> {
    for &tid in tids {
        if tgid_of(tid) != Some(pid) {
            return Err(format!(
                "tid {tid} is not a thread of the connecting process {pid}"
            ));
        }
        if let Ok(Some(_)) = maps.worker_tids.lookup(&tid.to_ne_bytes(), MapFlags::ANY) {
            return Err(format!("tid {tid} is already registered"));
        }
    }
    Ok(())
}

fn uninstall(maps: &RegistryMaps, slot: u32, tids: &[u32]) {
    for tid in tids {
        let _ = maps.worker_tids.delete(&tid.to_ne_bytes());
    }
    let key = slot.to_ne_bytes();
    let _ = maps.regions.delete(&key);
    // SAFETY: plain old data; zero means "free slot".
    let empty: tailctl_service = unsafe { std::mem::zeroed() };
    let _ = maps.services.update(&key, as_bytes(&empty), MapFlags::ANY);
}

fn release_slot(slots: &Mutex<Slots>, slot: u32, maps: &RegistryMaps) {
    {
        let mut s = slots.lock().unwrap();
        if s.used[slot as usize] {
            s.used[slot as usize] = false;
            s.count -= 1;
        }
    }
    update_registered(maps, slots);
}

/// Publish how many services are registered; the BPF side skips all
/// per-task look-ups while it is zero.
fn update_registered(maps: &RegistryMaps, slots: &Mutex<Slots>) {
    let count = slots.lock().unwrap().count;
    if let Err(e) = maps
        .registered
        .update(&0u32.to_ne_bytes(), &count.to_ne_bytes(), MapFlags::ANY)
    {
        warn!("updating the registered-services count: {e}");
    }
}
