//! A line sent to a peer that hung up is an error, not a SIGPIPE: the
//! runtime is a library, and its host may leave SIGPIPE at the default
//! action (terminate). Its own test binary, so that setting the default
//! disposition cannot kill other tests running beside it.

use std::os::unix::net::UnixStream;

use tailctl_rt::kernel::wire::send_line;

#[test]
fn sending_to_a_closed_peer_is_epipe_not_a_signal() {
    // SAFETY: this binary has one test and no other threads that could
    // write to a socket or pipe while SIGPIPE is at its default; the
    // handler is a plain constant, not a function.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let (a, b) = UnixStream::pair().unwrap();
    drop(b);
    // Without MSG_NOSIGNAL the process dies here and the test harness
    // reports it as failed.
    let e = send_line(&a, "REGISTER 1\n", None).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPIPE), "{e}");
    // SAFETY: as above.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}
