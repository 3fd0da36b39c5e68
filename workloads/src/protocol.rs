//! The wire protocol between `tailctl-loadgen` and `tailctl-server`.
//!
//! Design: line-based ASCII over TCP, one message per `\n`-terminated line.
//! It is trivially debuggable (`nc localhost PORT` and type a request), the
//! messages are tiny compared with the milliseconds of work behind them, and a
//! malformed line can be answered and skipped without losing the framing.
//!
//! ```text
//! client → server   REQ <id> <kernel> <work_us> <seq_pct>
//! server → client   OK  <id> <queue_ns> <run_ns>
//!                   FAIL <id> <message…>          the request ran and failed (e.g. panicked)
//!                   ERR <message…>                 the line could not be parsed
//! client → server   STATS                          ask for the pool's counters
//! server → client   STATS <json>                   e.g. {"steals":12,"serialized":3,…}
//! ```
//!
//! `kernel` is `bs` or `spin` (see [`crate::kernel::Kernel`]), `work_us` the
//! CPU work in microseconds, `seq_pct` the sequential percentage (0–100).
//! `queue_ns` is the time from the server reading the request to a worker
//! starting it, `run_ns` from that start to completion. Responses come in
//! completion order, not request order; ids tie them together. Lines longer
//! than [`MAX_LINE`] bytes are rejected (and the connection closed, since a
//! line that long is not a confused client but a wrong one).

use std::fmt;
use std::time::Duration;

use crate::kernel::{Kernel, KernelSpec};

/// Longest accepted line, in bytes, including the newline.
pub const MAX_LINE: usize = 256;

/// Largest work a request may ask for (one minute), so that a typo cannot
/// occupy the server for hours.
pub const MAX_WORK: Duration = Duration::from_secs(60);

/// A request: an id chosen by the client and what to compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Client-chosen identifier, echoed in the response.
    pub id: u64,
    /// What the request computes.
    pub spec: KernelSpec,
}

/// A response line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// The request completed.
    Done {
        /// The request's id.
        id: u64,
        /// From the server reading the request to a worker starting it.
        queue: Duration,
        /// From start to completion.
        run: Duration,
    },
    /// The request was accepted but failed while running.
    Failed {
        /// The request's id.
        id: u64,
        /// What went wrong.
        message: String,
    },
    /// The line could not be parsed as a request.
    Malformed {
        /// What was wrong with it.
        message: String,
    },
    /// The answer to [`STATS_REQUEST`]: the pool's counters as one-line JSON.
    Stats(String),
}

/// The line a client sends to ask for the server's counters.
pub const STATS_REQUEST: &str = "STATS";

/// Why a line is not a valid message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(msg.into()))
}

fn field<'a>(fields: &[&'a str], i: usize, name: &str) -> Result<&'a str, ProtocolError> {
    fields
        .get(i)
        .copied()
        .ok_or_else(|| ProtocolError(format!("missing field `{name}`")))
}

fn number<T: std::str::FromStr>(s: &str, name: &str) -> Result<T, ProtocolError> {
    s.parse()
        .map_err(|_| ProtocolError(format!("`{name}` is not a valid number: `{s}`")))
}

/// Replaces line breaks so a message always stays on one line.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

impl Request {
    /// Encodes the request as one line, including the trailing newline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_workloads::kernel::{Kernel, KernelSpec};
    /// use tailctl_workloads::protocol::Request;
    ///
    /// let r = Request { id: 7, spec: KernelSpec { kernel: Kernel::Spin, work: Duration::from_micros(1500), seq_pct: 10 } };
    /// assert_eq!(r.encode(), "REQ 7 spin 1500 10\n");
    /// assert_eq!(Request::parse("REQ 7 spin 1500 10").unwrap(), r);
    /// ```
    pub fn encode(&self) -> String {
        format!(
            "REQ {} {} {} {}\n",
            self.id,
            self.spec.kernel,
            self.spec.work.as_micros(),
            self.spec.seq_pct
        )
    }

    /// Parses one line (with or without its newline).
    pub fn parse(line: &str) -> Result<Self, ProtocolError> {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        match fields.first() {
            Some(&"REQ") => {}
            Some(other) => return err(format!("unknown message type `{other}` (expected REQ)")),
            None => return err("empty line"),
        }
        if fields.len() > 5 {
            return err(format!("too many fields: {} (expected 5)", fields.len()));
        }
        let id = number(field(&fields, 1, "id")?, "id")?;
        let kernel: Kernel = field(&fields, 2, "kernel")?
            .parse()
            .map_err(ProtocolError)?;
        let work_us: u64 = number(field(&fields, 3, "work_us")?, "work_us")?;
        let seq_pct: u8 = number(field(&fields, 4, "seq_pct")?, "seq_pct")?;
        let work = Duration::from_micros(work_us);
        if work.is_zero() {
            return err("work_us must be > 0");
        }
        if work > MAX_WORK {
            return err(format!(
                "work_us {work_us} exceeds the limit of {}",
                MAX_WORK.as_micros()
            ));
        }
        if seq_pct > 100 {
            return err(format!("seq_pct {seq_pct} exceeds 100"));
        }
        Ok(Request {
            id,
            spec: KernelSpec {
                kernel,
                work,
                seq_pct,
            },
        })
    }
}

impl Response {
    /// Encodes the response as one line, including the trailing newline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_workloads::protocol::Response;
    ///
    /// let r = Response::Done { id: 3, queue: Duration::from_nanos(10), run: Duration::from_nanos(2000) };
    /// assert_eq!(r.encode(), "OK 3 10 2000\n");
    /// assert_eq!(Response::parse(&r.encode()).unwrap(), r);
    /// ```
    pub fn encode(&self) -> String {
        match self {
            Response::Done { id, queue, run } => {
                format!("OK {id} {} {}\n", queue.as_nanos(), run.as_nanos())
            }
            Response::Failed { id, message } => format!("FAIL {id} {}\n", one_line(message)),
            Response::Malformed { message } => format!("ERR {}\n", one_line(message)),
            Response::Stats(json) => format!("STATS {}\n", one_line(json)),
        }
    }

    /// Parses one line (with or without its newline).
    pub fn parse(line: &str) -> Result<Self, ProtocolError> {
        let line = line.trim_end_matches(['\n', '\r']);
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kind {
            "OK" => {
                let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
                if fields.len() != 3 {
                    return err(format!("OK needs 3 fields, found {}", fields.len()));
                }
                Ok(Response::Done {
                    id: number(fields[0], "id")?,
                    queue: Duration::from_nanos(number(fields[1], "queue_ns")?),
                    run: Duration::from_nanos(number(fields[2], "run_ns")?),
                })
            }
            "FAIL" => {
                let (id, message) = rest.split_once(' ').unwrap_or((rest, ""));
                Ok(Response::Failed {
                    id: number(id, "id")?,
                    message: message.to_string(),
                })
            }
            "ERR" => Ok(Response::Malformed {
                message: rest.to_string(),
            }),
            "STATS" => Ok(Response::Stats(rest.to_string())),
            "" => err("empty line"),
            other => err(format!("unknown response type `{other}`")),
        }
    }
}
