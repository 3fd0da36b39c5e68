//! The clock shared with the kernel half: CLOCK_MONOTONIC in nanoseconds, the
//! clock `bpf_ktime_get_ns` reads, so both halves can compare time stamps in
//! the shared table.

/// Nanoseconds of CLOCK_MONOTONIC.
#[inline]
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Kernel thread id of the calling thread (0 under Miri, which has no gettid).
pub(crate) fn gettid() -> u32 {
    #[cfg(miri)]
    {
        0
    }
    #[cfg(not(miri))]
    {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() as u32 }
    }
}

/// CPU time of the calling thread in nanoseconds (CLOCK_THREAD_CPUTIME_ID;
/// a system call, unlike `now_ns`).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock always exists
    // for the calling thread.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}
