//! Lines over a unix stream socket, with at most one file descriptor riding
//! along in SCM_RIGHTS: the transport of the registration protocol, shared by
//! the runtime (`link`) and the `scx_tailctl` daemon; and the connect both
//! use, which never waits on a daemon that does not accept.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// Connect to the daemon's socket without waiting in connect(2): a daemon
/// that does not accept (stopped, or stalled) lets its listen backlog fill,
/// and a blocking connect then waits for as long as it stays full, so a
/// service could not even start. A full backlog is reported as
/// [`io::ErrorKind::WouldBlock`] instead ([`is_backlog_full`] tells it from
/// a read timeout), and the caller runs unassisted or tries again later. The
/// stream returned blocks, as `UnixStream::connect`'s does.
///
/// ```
/// use std::os::unix::net::UnixListener;
/// use tailctl_rt::kernel::wire::connect;
/// let path = std::env::temp_dir().join(format!("tailctl-doc-{}.sock", std::process::id()));
/// let _ = std::fs::remove_file(&path);
/// let listener = UnixListener::bind(&path).unwrap();
/// let stream = connect(&path).unwrap();
/// let _ = listener.accept().unwrap();
/// drop(stream);
/// let _ = std::fs::remove_file(&path);
/// // Nobody at all: the usual error kinds.
/// assert_eq!(connect(&path).unwrap_err().kind(), std::io::ErrorKind::NotFound);
/// ```
pub fn connect(socket: &Path) -> io::Result<UnixStream> {
    use nix::errno::Errno;
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    let addr = UnixAddr::new(socket)?;
    // A Unix stream connect either completes or fails at once (it never
    // returns EINPROGRESS): EAGAIN means the backlog is full.
    socket::connect(fd.as_raw_fd(), &addr).map_err(|e| match e {
        Errno::EAGAIN => io::Error::new(io::ErrorKind::WouldBlock, BacklogFull),
        e => io::Error::from(e),
    })?;
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// The daemon does not accept: its listen backlog is full. (Callers name
/// the socket.)
#[derive(Debug)]
struct BacklogFull;

impl std::fmt::Display for BacklogFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the daemon's connection backlog is full (it is not accepting)")
    }
}

impl std::error::Error for BacklogFull {}

/// Did `e` come from [`connect`] finding the daemon's backlog full?
///
/// ```
/// use tailctl_rt::kernel::wire::is_backlog_full;
/// let timeout = std::io::Error::from(std::io::ErrorKind::WouldBlock);
/// assert!(!is_backlog_full(&timeout));
/// ```
pub fn is_backlog_full(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<BacklogFull>())
}

/// Send `line` (which should end in a newline), with `fd` attached if given.
pub fn send_line(stream: &UnixStream, line: &str, fd: Option<RawFd>) -> io::Result<()> {
    let iov = [IoSlice::new(line.as_bytes())];
    let fds;
    let cmsgs: Vec<ControlMessage<'_>> = match fd {
        Some(f) => {
            fds = [f];
            vec![ControlMessage::ScmRights(&fds)]
        }
        None => Vec::new(),
    };
    // MSG_NOSIGNAL: a peer that closed (a daemon that wrote its refusal and
    // hung up) is an EPIPE error here, not a SIGPIPE that kills a host
    // program that left the signal at its default (this is a library).
    sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        &cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

/// Read up to the first newline (at most `max` bytes) and the first fd that
/// came with it; further fds are closed. EOF before a newline is an error.
///
/// ```
/// use std::os::unix::net::UnixStream;
/// use tailctl_rt::kernel::wire::{recv_line, send_line};
/// let (a, b) = UnixStream::pair().unwrap();
/// send_line(&a, "HELLO 1\n", None).unwrap();
/// let (line, fd) = recv_line(&b, 64).unwrap();
/// assert_eq!(line, "HELLO 1");
/// assert!(fd.is_none());
/// ```
pub fn recv_line(stream: &UnixStream, max: usize) -> io::Result<(String, Option<OwnedFd>)> {
    recv_line_until(stream, max, None)
}

/// [`recv_line`] with a deadline for the whole line: a peer that sends a
/// byte now and then cannot keep the read alive past it (the socket's read
/// timeout is set to the time left before each read). Past the deadline the
/// error is [`io::ErrorKind::TimedOut`].
///
/// ```
/// use std::os::unix::net::UnixStream;
/// use std::time::{Duration, Instant};
/// use tailctl_rt::kernel::wire::recv_line_until;
/// let (a, b) = UnixStream::pair().unwrap();
/// std::io::Write::write_all(&mut &a, b"REGIS").unwrap();
/// let deadline = Instant::now() + Duration::from_millis(50);
/// let e = recv_line_until(&b, 64, Some(deadline)).unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
/// ```
pub fn recv_line_until(
    stream: &UnixStream,
    max: usize,
    deadline: Option<Instant>,
) -> io::Result<(String, Option<OwnedFd>)> {
    let mut buf = vec![0u8; max];
    let mut len = 0;
    let mut fd = None;
    while !buf[..len].contains(&b'\n') {
        if len == buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line longer than {max} bytes"),
            ));
        }
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the line did not arrive in time",
                ));
            }
            stream.set_read_timeout(Some(left))?;
        }
        let mut cmsg = nix::cmsg_space!([RawFd; 1]);
        let mut iov = [IoSliceMut::new(&mut buf[len..])];
        let msg = match recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            // The read timeout (ours, or the caller's) ran out.
            Err(nix::errno::Errno::EAGAIN) if deadline.is_some() => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the line did not arrive in time",
                ))
            }
            Err(e) => return Err(e.into()),
        };
        let n = msg.bytes;
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for raw in fds {
                    // SAFETY: the kernel just installed `raw` in our table for
                    // us (SCM_RIGHTS); nothing else owns it.
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    fd.get_or_insert(owned);
                }
            }
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection before a full line",
            ));
        }
        len += n;
    }
    let text = std::str::from_utf8(&buf[..len])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "line is not UTF-8"))?;
    Ok((text.lines().next().unwrap_or("").to_string(), fd))
}
