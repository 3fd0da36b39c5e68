//! The TCP service: reads requests, runs each as one request on the runtime's
//! pool, and answers with per-request server-side timings.
//!
//! Design: one reader thread and one writer thread per connection; requests
//! never run on them. The reader parses a line, stamps the arrival time and
//! submits a job to the pool; the job itself stamps its start and end and
//! sends the response to the connection's writer over a channel. So:
//!
//! * the pool's admission order (FIFO, steal-first, …) alone decides when a
//!   request starts — the server adds no queue of its own — and
//!   `queue = start − read`, `run = end − start`;
//! * a client that vanishes only ends its own two threads: the reader sees
//!   EOF or a reset, the writer's failed writes are ignored while it drains
//!   the responses of requests still running, and the pool never notices;
//! * a malformed line is answered with `ERR <why>` in order on the same
//!   connection, which stays open; only an over-long line closes it.
//!
//! The pool is behind the [`RequestExecutor`] trait, implemented for
//! `tailctl_rt`'s pool in [`crate::server::rt`], so the connection logic can be
//! tested on its own.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::kernel::{self, Calibration, ParallelFor};
use crate::protocol::{Request, Response, MAX_LINE, STATS_REQUEST};

/// One request's job: runs on a pool worker, given the request's parallel loop.
pub type Job = Box<dyn FnOnce(&dyn ParallelFor) + Send + 'static>;

/// A pool that runs each submitted job as one request.
pub trait RequestExecutor: Send + Sync + 'static {
    /// Submits a request; must not block until it runs.
    fn submit(&self, job: Job);

    /// The pool's counters as a JSON object (for the `STATS` message).
    fn stats_json(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// Counters shared by all connections, for logging and tests.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Requests submitted to the pool.
    pub submitted: AtomicU64,
    /// Requests that finished (successfully or not).
    pub completed: AtomicU64,
    /// Malformed lines answered with `ERR`.
    pub malformed: AtomicU64,
    /// Responses that could not be written because the client had gone.
    pub undeliverable: AtomicU64,
}

/// A bound, not yet running, server.
pub struct Server {
    listener: TcpListener,
    exec: Arc<dyn RequestExecutor>,
    calibration: Calibration,
    stats: Arc<ServerStats>,
    verbose: bool,
}

impl Server {
    /// Binds to `addr` (`127.0.0.1:0` picks a free port).
    pub fn bind(
        addr: &str,
        exec: Arc<dyn RequestExecutor>,
        calibration: Calibration,
    ) -> Result<Self> {
        let listener =
            TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        Ok(Server {
            listener,
            exec,
            calibration,
            stats: Arc::new(ServerStats::default()),
            verbose: false,
        })
    }

    /// Log connections to stderr.
    pub fn verbose(mut self, on: bool) -> Self {
        self.verbose = on;
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        Arc::clone(&self.stats)
    }

    /// Accepts connections forever (until accepting fails).
    pub fn run(self) -> Result<()> {
        for conn in self.listener.incoming() {
            let stream = match conn {
                Ok(s) => s,
                // Transient accept errors (e.g. a client that reset before
                // accept, or fd exhaustion) must not bring the service down.
                Err(e) => {
                    eprintln!("tailctl-server: accept failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
            };
            self.stats.connections.fetch_add(1, Ordering::Relaxed);
            let exec = Arc::clone(&self.exec);
            let stats = Arc::clone(&self.stats);
            let cal = self.calibration;
            let verbose = self.verbose;
            let spawned = std::thread::Builder::new()
                .name("conn-reader".into())
                .spawn(move || {
                    let peer = stream.peer_addr().ok();
                    if verbose {
                        eprintln!("tailctl-server: connection from {peer:?}");
                    }
                    let n = serve_connection(stream, exec.as_ref(), cal, &stats);
                    if verbose {
                        eprintln!("tailctl-server: {peer:?} closed after {n} requests");
                    }
                });
            if let Err(e) = spawned {
                eprintln!("tailctl-server: cannot start a connection thread: {e}");
            }
        }
        Ok(())
    }

    /// Runs the server on a background thread and returns its address.
    pub fn spawn(self) -> Result<SocketAddr> {
        let addr = self.local_addr()?;
        std::thread::Builder::new()
            .name("tailctl-server".into())
            .spawn(move || self.run())
            .context("cannot start the server thread")?;
        Ok(addr)
    }
}

/// Result of reading one line with a length limit.
enum Line {
    Text(Vec<u8>),
    TooLong,
    Eof,
}

/// Reads up to and including `\n`, refusing lines over [`MAX_LINE`] bytes
/// (so a client cannot make the server buffer without bound).
fn read_line_limited(r: &mut impl BufRead) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            // EOF; a trailing unterminated fragment is dropped with the client.
            return Ok(Line::Eof);
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        buf.extend_from_slice(&chunk[..take]);
        r.consume(take);
        if buf.len() > MAX_LINE {
            return Ok(Line::TooLong);
        }
        if done {
            return Ok(Line::Text(buf));
        }
    }
}

/// Serves one connection until the client closes it; returns the number of
/// requests submitted.
fn serve_connection(
    stream: TcpStream,
    exec: &dyn RequestExecutor,
    cal: Calibration,
    stats: &Arc<ServerStats>,
) -> u64 {
    stream.set_nodelay(true).ok();
    let (tx, rx) = mpsc::channel::<Response>();
    let writer_stream = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tailctl-server: cannot clone socket: {e}");
            return 0;
        }
    };
    let writer_stats = Arc::clone(stats);
    let writer = std::thread::Builder::new()
        .name("conn-writer".into())
        .spawn(move || write_responses(writer_stream, rx, &writer_stats));
    if writer.is_err() {
        return 0;
    }
    let mut reader = BufReader::new(stream);
    let mut submitted = 0;
    loop {
        let line = match read_line_limited(&mut reader) {
            Ok(Line::Text(l)) => l,
            Ok(Line::Eof) | Err(_) => break, // client closed or vanished
            Ok(Line::TooLong) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(Response::Malformed {
                    message: format!("line longer than {MAX_LINE} bytes; closing connection"),
                });
                break;
            }
        };
        let read_at = Instant::now();
        let text = match std::str::from_utf8(&line) {
            Ok(t) => t.trim_end_matches(['\n', '\r']),
            Err(_) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(Response::Malformed {
                    message: "line is not UTF-8".into(),
                });
                continue;
            }
        };
        if text.trim().is_empty() {
            continue; // tolerate blank lines (e.g. from a person typing)
        }
        if text.trim() == STATS_REQUEST {
            let _ = tx.send(Response::Stats(exec.stats_json().to_string()));
            continue;
        }
        let req = match Request::parse(text) {
            Ok(r) => r,
            Err(e) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(Response::Malformed {
                    message: format!("{e}; expected `REQ <id> <bs|spin> <work_us> <seq_pct>`"),
                });
                continue;
            }
        };
        let tx = tx.clone();
        let stats = Arc::clone(stats);
        stats.submitted.fetch_add(1, Ordering::Relaxed);
        submitted += 1;
        exec.submit(Box::new(move |par: &dyn ParallelFor| {
            let start = Instant::now();
            // A panicking kernel fails its request, not the worker or the pool.
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                std::hint::black_box(kernel::execute(&req.spec, &cal, par))
            }));
            let end = Instant::now();
            let resp = match result {
                Ok(_) => Response::Done {
                    id: req.id,
                    queue: start - read_at,
                    run: end - start,
                },
                Err(p) => Response::Failed {
                    id: req.id,
                    message: panic_message(&p),
                },
            };
            stats.completed.fetch_add(1, Ordering::Relaxed);
            // The client may have gone; the writer then discards responses.
            let _ = tx.send(resp);
        }));
    }
    submitted
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("request panicked: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("request panicked: {s}")
    } else {
        "request panicked".into()
    }
}

/// Writes responses until every sender (the reader and all in-flight jobs) is
/// gone. After the first failed write the client is gone: keep draining so
/// jobs never block, but stop writing.
fn write_responses(mut stream: TcpStream, rx: mpsc::Receiver<Response>, stats: &ServerStats) {
    let mut alive = true;
    for resp in rx {
        if alive && stream.write_all(resp.encode().as_bytes()).is_err() {
            alive = false;
        }
        if !alive {
            stats.undeliverable.fetch_add(1, Ordering::Relaxed);
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// The adapter from `tailctl_rt`'s pool to [`RequestExecutor`].
pub mod rt {
    use std::ops::Range;
    use std::time::Duration;

    use tailctl_rt::kernel::link::AssistedPool;
    use tailctl_rt::threshold::ThresholdTable;
    use tailctl_rt::{Policy, Pool};

    use super::{Job, RequestExecutor};
    use crate::kernel::ParallelFor;

    /// A `tailctl_rt` pool serving requests.
    ///
    /// ```
    /// use tailctl_rt::Policy;
    /// use tailctl_workloads::server::rt::RtExecutor;
    ///
    /// let exec = RtExecutor::new(2, Policy::StealFirst, None, None).unwrap();
    /// assert_eq!(exec.pool().workers(), 2);
    /// ```
    pub struct RtExecutor {
        pool: AssistedPool,
    }

    impl RtExecutor {
        /// A pool of `workers` with `policy`; for tail-control, the threshold
        /// table and the target latency it was computed for.
        pub fn new(
            workers: usize,
            policy: Policy,
            thresholds: Option<ThresholdTable>,
            target: Option<Duration>,
        ) -> std::io::Result<Self> {
            let mut b = Pool::builder().workers(workers).policy(policy);
            if let Some(t) = thresholds {
                b = b.thresholds(t);
            }
            if let Some(t) = target {
                b = b.target_latency(t);
            }
            Ok(RtExecutor {
                pool: AssistedPool::without_kernel(b)?,
            })
        }

        /// Like [`RtExecutor::new`], but registered with the `scx_tailctl`
        /// daemon at `socket` when it runs there (kernel-assisted tail-control:
        /// the kernel charges CPU time per request and serializes on it), and a
        /// plain user-space pool otherwise. The pool re-registers by itself
        /// after a daemon restart.
        ///
        /// ```
        /// use tailctl_rt::Policy;
        /// use tailctl_workloads::server::rt::RtExecutor;
        ///
        /// let exec = RtExecutor::with_kernel(2, Policy::TailControl, None, None, "/nonexistent.sock".as_ref()).unwrap();
        /// assert!(!exec.is_kernel_assisted());
        /// ```
        pub fn with_kernel(
            workers: usize,
            policy: Policy,
            thresholds: Option<ThresholdTable>,
            target: Option<Duration>,
            socket: &std::path::Path,
        ) -> std::io::Result<Self> {
            let mut b = Pool::builder().workers(workers).policy(policy);
            if let Some(t) = &thresholds {
                b = b.thresholds(t.clone());
            }
            if let Some(t) = target {
                b = b.target_latency(t);
            }
            Ok(RtExecutor {
                pool: AssistedPool::start(b, thresholds.as_ref(), socket)?,
            })
        }

        /// Whether `scx_tailctl` serves this pool right now.
        pub fn is_kernel_assisted(&self) -> bool {
            self.pool.is_kernel_assisted()
        }

        /// Why this pool is not kernel-assisted, if an attempt to register
        /// failed (see `AssistedPool::unassisted_reason`).
        pub fn unassisted_reason(&self) -> Option<String> {
            self.pool.unassisted_reason()
        }

        /// Registrations with `scx_tailctl` so far (re-registrations after a
        /// daemon restart included).
        pub fn registrations(&self) -> u64 {
            self.pool.registrations()
        }

        /// The pool.
        pub fn pool(&self) -> &Pool {
            &self.pool
        }
    }

    /// The runtime's parallel loop (it splits by `join`, so idle workers
    /// steal halves of the range, and tail-control can stop that).
    struct RtParallelFor;

    impl ParallelFor for RtParallelFor {
        fn parallel_for(
            &self,
            range: Range<usize>,
            grain: usize,
            body: &(dyn Fn(Range<usize>) + Sync),
        ) {
            tailctl_rt::parallel_for_chunks(range, grain.max(1), body)
        }
    }

    impl RequestExecutor for RtExecutor {
        fn submit(&self, job: Job) {
            // Fire and forget: the job reports its own completion, so the
            // handle is not needed (dropping it does not cancel the request).
            drop(self.pool.submit(move || job(&RtParallelFor)));
        }

        fn stats_json(&self) -> serde_json::Value {
            let s = self.pool.stats();
            serde_json::json!({
                "policy": self.pool.policy().name(),
                "workers": self.pool.workers(),
                "submitted": s.submitted,
                "completed": s.completed,
                "panicked": s.panicked,
                "steals": s.steals,
                "refused_steals": s.refused_steals,
                "serialized": s.serialized,
                "active": s.active,
                "kernel_assisted": self.pool.is_kernel_assisted(),
                "registrations": self.pool.registrations(),
                // Requests the kernel serialized (0 in user-space mode).
                "kernel_serialized": self.pool.shared_state().header().kernel_serialized(),
            })
        }
    }
}
