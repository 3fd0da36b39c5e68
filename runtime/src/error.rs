//! Typed errors of the public API: [`BuildError`] (why a pool could not be
//! built) and [`RequestPanic`] (the panic of a request, payload included).
//!
//! A request's panic payload is a `Box<dyn Any + Send>`, which is not `Sync`.
//! Errors should be `Send + Sync` (so that `anyhow`, `Box<dyn Error + Send +
//! Sync>` and friends accept them), so the payload is kept in a `Mutex`: the
//! mutex is never locked, it only makes the type `Sync` without `unsafe`,
//! because the payload can only be reached by value
//! ([`RequestPanic::into_payload`]) or through `&mut`
//! ([`RequestPanic::payload_mut`]), never through a shared reference.

use crate::policy::Policy;
use std::any::Any;
use std::sync::Mutex;

/// Why [`PoolBuilder::build`](crate::PoolBuilder::build) failed.
///
/// Converts into `std::io::Error` (kind `InvalidInput` for configuration
/// errors, the OS error for a failed thread spawn), so `?` keeps working in
/// functions that return `io::Result`.
///
/// ```
/// use tailctl_rt::{BuildError, Pool};
/// let err = Pool::builder().workers(0).build().unwrap_err();
/// assert!(matches!(err, BuildError::InvalidWorkerCount { requested: 0, .. }));
/// assert_eq!(err.to_string(), "workers must be in 1..=64, got 0");
/// let io: std::io::Error = err.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The worker count is 0 or above
    /// [`MAX_WORKERS`](crate::shared_state::MAX_WORKERS).
    InvalidWorkerCount {
        /// The count asked for (or the machine's parallelism by default).
        requested: usize,
        /// The largest count allowed.
        max: usize,
    },
    /// The table passed to
    /// [`shared_state`](crate::PoolBuilder::shared_state) is sized for
    /// another number of workers.
    SharedStateMismatch {
        /// Workers the table was made for.
        table_workers: usize,
        /// Workers of the pool.
        pool_workers: usize,
    },
    /// A threshold table was given to a policy other than
    /// [`Policy::TailControl`], which would silently ignore it.
    ThresholdsNeedTailControl {
        /// The policy the pool was configured with.
        policy: Policy,
    },
    /// The target latency is zero (every request would miss it).
    ZeroTargetLatency,
    /// The adaptive priority mode's quantum is zero
    /// ([`PriorityMode::Adaptive`](crate::PriorityMode::Adaptive)).
    ZeroQuantum,
    /// The OS refused to start a worker thread (the workers already started
    /// were stopped and joined).
    ThreadSpawn {
        /// Index of the worker that could not be started.
        index: usize,
        /// The OS error.
        source: std::io::Error,
    },
}

impl std::fmt::Display for BuildError {
    /// ```
    /// use tailctl_rt::{BuildError, Policy};
    /// let e = BuildError::ThresholdsNeedTailControl { policy: Policy::StealFirst };
    /// assert_eq!(e.to_string(), "a threshold table needs policy tc, not sf");
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::InvalidWorkerCount { requested, max } => {
                write!(f, "workers must be in 1..={max}, got {requested}")
            }
            BuildError::SharedStateMismatch {
                table_workers,
                pool_workers,
            } => write!(
                f,
                "shared state is for {table_workers} workers, the pool has {pool_workers}"
            ),
            BuildError::ThresholdsNeedTailControl { policy } => {
                write!(f, "a threshold table needs policy tc, not {policy}")
            }
            BuildError::ZeroTargetLatency => f.write_str("the target latency must not be zero"),
            BuildError::ZeroQuantum => f.write_str("the adaptive quantum must not be zero"),
            BuildError::ThreadSpawn { index, source } => {
                write!(f, "cannot start worker thread {index}: {source}")
            }
        }
    }
}

impl std::error::Error for BuildError {
    /// The OS error of [`BuildError::ThreadSpawn`].
    ///
    /// ```
    /// use std::error::Error;
    /// let e = tailctl_rt::BuildError::ZeroTargetLatency;
    /// assert!(e.source().is_none());
    /// ```
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::ThreadSpawn { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<BuildError> for std::io::Error {
    /// ```
    /// let e: std::io::Error = tailctl_rt::BuildError::ZeroTargetLatency.into();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::ThreadSpawn { source, .. } => source,
            other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other),
        }
    }
}

/// The panic of a request: its message and its original payload, so the
/// waiter can re-raise it with [`std::panic::resume_unwind`] (see
/// [`RequestPanic::resume`]).
///
/// Two `RequestPanic`s compare equal when their messages are equal (payloads
/// cannot be compared).
///
/// ```
/// use tailctl_rt::{Pool, RequestError};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let err = pool.submit(|| -> u32 { std::panic::panic_any(42u8) }).wait().unwrap_err();
/// let RequestError::Panicked(p) = err else { panic!("expected a panic") };
/// assert_eq!(p.message(), "non-string panic payload");
/// assert_eq!(*p.into_payload().downcast::<u8>().unwrap(), 42);
/// ```
pub struct RequestPanic {
    /// Boxed: every request's completion holds a `Result<T, RequestError>`
    /// in place, and a panic is rare, so it pays for the allocation rather
    /// than every request paying for 48 bytes of room.
    inner: Box<PanicInner>,
}

struct PanicInner {
    message: String,
    /// Never locked: see the module comment.
    payload: Mutex<Box<dyn Any + Send>>,
}

impl RequestPanic {
    pub(crate) fn new(payload: Box<dyn Any + Send>) -> Self {
        RequestPanic {
            inner: Box::new(PanicInner {
                message: panic_message(&*payload),
                payload: Mutex::new(payload),
            }),
        }
    }

    /// The panic message (`"non-string panic payload"` if the payload was
    /// neither a `&str` nor a `String`).
    ///
    /// ```
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let n = 7;
    /// match pool.submit(move || -> () { panic!("bad input {n}") }).wait() {
    ///     Err(RequestError::Panicked(p)) => assert_eq!(p.message(), "bad input 7"),
    ///     other => panic!("{other:?}"),
    /// }
    /// ```
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// The payload, by mutable reference (e.g. to `downcast_mut`).
    ///
    /// ```
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let Err(RequestError::Panicked(mut p)) = pool.submit(|| -> () { panic!("x") }).wait() else {
    ///     unreachable!()
    /// };
    /// assert_eq!(p.payload_mut().downcast_mut::<&str>(), Some(&mut "x"));
    /// ```
    pub fn payload_mut(&mut self) -> &mut (dyn Any + Send) {
        &mut **self
            .inner
            .payload
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The payload exactly as the request's closure panicked with it.
    ///
    /// ```
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let Err(RequestError::Panicked(p)) = pool.submit(|| -> () { panic!("boom") }).wait() else {
    ///     unreachable!()
    /// };
    /// assert_eq!(*p.into_payload().downcast::<&str>().unwrap(), "boom");
    /// ```
    pub fn into_payload(self) -> Box<dyn Any + Send> {
        self.inner
            .payload
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Re-raises the panic on the calling thread with its original payload
    /// (`std::panic::resume_unwind`: the panic hook does not run again).
    ///
    /// ```
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let h = pool.submit(|| -> () { panic!("again") });
    /// let caught = std::panic::catch_unwind(move || match h.wait() {
    ///     Err(RequestError::Panicked(p)) => p.resume(),
    ///     _ => unreachable!(),
    /// });
    /// assert_eq!(*caught.unwrap_err().downcast::<&str>().unwrap(), "again");
    /// ```
    pub fn resume(self) -> ! {
        std::panic::resume_unwind(self.into_payload())
    }
}

impl From<Box<dyn Any + Send>> for RequestPanic {
    /// Wraps a payload, e.g. the one a
    /// [panic handler](crate::PoolBuilder::panic_handler) receives, to read
    /// its message.
    ///
    /// ```
    /// let p = tailctl_rt::RequestPanic::from(Box::new("m") as Box<dyn std::any::Any + Send>);
    /// assert_eq!(p.message(), "m");
    /// ```
    fn from(payload: Box<dyn Any + Send>) -> Self {
        RequestPanic::new(payload)
    }
}

impl std::fmt::Debug for RequestPanic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestPanic")
            .field("message", &self.inner.message)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for RequestPanic {
    /// ```
    /// use tailctl_rt::{Pool, RequestError};
    /// let pool = Pool::builder().workers(1).build().unwrap();
    /// let err = pool.submit(|| -> () { panic!("oops") }).wait().unwrap_err();
    /// assert_eq!(err.to_string(), "request panicked: oops");
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl PartialEq for RequestPanic {
    fn eq(&self, other: &Self) -> bool {
        self.inner.message == other.inner.message
    }
}

impl Eq for RequestPanic {}

/// The message of a panic payload.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn errors_are_send_sync() {
        assert_send_sync::<BuildError>();
        assert_send_sync::<RequestPanic>();
        assert_send_sync::<crate::RequestError>();
        assert_send_sync::<crate::PoolHandle>();
        assert_send_sync::<crate::RequestHandle<u8>>();
    }

    #[test]
    fn handles_are_unwind_safe() {
        fn assert_unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
        assert_unwind_safe::<crate::RequestHandle<u8>>();
        assert_unwind_safe::<crate::PoolHandle>();
        assert_unwind_safe::<RequestPanic>();
    }

    #[test]
    fn panics_compare_by_message() {
        let a = RequestPanic::new(Box::new("m"));
        let b = RequestPanic::new(Box::new(String::from("m")));
        assert_eq!(a, b);
        assert_ne!(a, RequestPanic::new(Box::new(1u8)));
    }
}
