//! The open-loop load generator engine.
//!
//! Design: *open loop* means the send schedule is fixed before the run (it is
//! the [`Trace`]) and nothing the server does can move it. A sender thread
//! sleeps until each request's intended time and writes it; a separate
//! receiver (the calling thread) reads responses as they come. Latency is
//! measured from the **intended** send time, not the actual one, so that if
//! the sender ever falls behind (a descheduled thread, a full socket buffer)
//! the delay is charged to the measurement instead of silently hidden — the
//! "coordinated omission" mistake of closed-loop generators. The sender
//! records when it actually sent each request, so a run can show it kept to
//! the schedule.
//!
//! The sender sleeps rather than spins: on a 2-core machine a spinning sender
//! would take a core from the server it measures. Sleep overshoot (tens of µs)
//! is small against millisecond requests and is counted in latency anyway.

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::protocol::Response;
use crate::trace::Trace;

/// Options of one load-generator run.
#[derive(Clone, Debug)]
pub struct LoadgenOptions {
    /// How long to wait for outstanding responses after the last send.
    pub drain_timeout: Duration,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

impl Default for LoadgenOptions {
    fn default() -> Self {
        LoadgenOptions {
            drain_timeout: Duration::from_secs(30),
            progress: false,
        }
    }
}

/// What became of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Completed; server-side queueing and running time.
    Done {
        /// Server-side time from reading the request to starting it.
        queue: Duration,
        /// Server-side running time.
        run: Duration,
    },
    /// The server reported a failure.
    Failed(String),
    /// No response before the run ended.
    Lost,
}

/// One request's measurements; all times are offsets from the run's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// Request id.
    pub id: u64,
    /// When the schedule said to send it.
    pub intended: Duration,
    /// When the sender actually wrote it (`None`: never sent).
    pub sent: Option<Duration>,
    /// When its response arrived.
    pub received: Option<Duration>,
    /// What happened.
    pub outcome: Outcome,
}

impl RequestRecord {
    /// Latency from the intended send time to the response, for successful requests.
    pub fn latency(&self) -> Option<Duration> {
        match (&self.outcome, self.received) {
            (Outcome::Done { .. }, Some(r)) => Some(r.saturating_sub(self.intended)),
            _ => None,
        }
    }
}

/// The result of a run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Per-request records, indexed by id.
    pub records: Vec<RequestRecord>,
    /// `ERR` responses (the server could not parse a line we sent).
    pub malformed: Vec<String>,
    /// Why the sender stopped early, if it did (e.g. the server closed the connection).
    pub sender_error: Option<String>,
    /// The server's counters after the run (the `STATS` answer), if it gave them.
    pub server_stats: Option<serde_json::Value>,
}

impl RunResult {
    /// Per-request latencies (`None` when there was no successful response).
    pub fn latencies(&self) -> Vec<Option<Duration>> {
        self.records.iter().map(RequestRecord::latency).collect()
    }

    /// Number of requests that failed on the server or were rejected.
    pub fn errors(&self) -> usize {
        let failed = self
            .records
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
            .count();
        failed + self.malformed.len()
    }

    /// Writes one CSV line per request:
    /// `id,intended_ns,sent_ns,latency_ns,queue_ns,run_ns,status` (empty
    /// fields where there is no value; status `ok`, `failed` or `lost`).
    pub fn write_csv(&self, path: &Path) -> Result<()> {
        let f = std::fs::File::create(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        self.write_csv_to(f)
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// [`write_csv`](Self::write_csv) to an open file (opened before the
    /// run, so that a bad path fails before any request is sent).
    pub fn write_csv_to(&self, mut w: impl Write) -> Result<()> {
        let mut s = String::from("id,intended_ns,sent_ns,latency_ns,queue_ns,run_ns,status\n");
        let opt = |d: Option<Duration>| d.map(|d| d.as_nanos().to_string()).unwrap_or_default();
        for r in &self.records {
            let (q, run, status) = match &r.outcome {
                Outcome::Done { queue, run } => (Some(*queue), Some(*run), "ok"),
                Outcome::Failed(_) => (None, None, "failed"),
                Outcome::Lost => (None, None, "lost"),
            };
            s.push_str(&format!(
                "{},{},{},{},{},{},{}\n",
                r.id,
                r.intended.as_nanos(),
                opt(r.sent),
                opt(r.latency()),
                opt(q),
                opt(run),
                status
            ));
        }
        w.write_all(s.as_bytes())?;
        Ok(w.flush()?)
    }
}

/// Reads the latency column of a file written by [`RunResult::write_csv`].
pub fn read_latencies_csv(path: &Path) -> Result<Vec<Option<Duration>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 7 {
            bail!("{} line {}: expected 7 fields", path.display(), i + 1);
        }
        out.push(if f[3].is_empty() {
            None
        } else {
            Some(Duration::from_nanos(f[3].parse().with_context(|| {
                format!("{} line {}: bad latency", path.display(), i + 1)
            })?))
        });
    }
    Ok(out)
}

/// Connects to `addr` with a clear error.
pub fn connect(addr: &str) -> Result<TcpStream> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve server address `{addr}`"))?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e).with_context(|| {
            format!("cannot connect to tailctl-server at {addr} (is it running?)")
        }),
        None => bail!("server address `{addr}` resolves to nothing"),
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Runs `trace` against the server at `addr`, open loop, and returns every
/// request's record. Fails only if it cannot connect; a server that closes
/// the connection mid-run leaves the remaining requests `Lost` and sets
/// [`RunResult::sender_error`].
pub fn run(addr: &str, trace: &Trace, opts: &LoadgenOptions) -> Result<RunResult> {
    let stream = connect(addr)?;
    stream.set_nodelay(true).ok();
    let mut writer = stream.try_clone().context("cannot clone the socket")?;
    let n = trace.entries.len();

    let progress = if opts.progress {
        let pb = ProgressBar::with_draw_target(Some(n as u64), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} responses ({per_sec})",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        pb
    } else {
        ProgressBar::hidden()
    };

    // A small lead so the first send is not already late.
    let start = Instant::now() + Duration::from_millis(20);
    let sender_done = Arc::new(AtomicBool::new(false));
    let schedule: Vec<(Duration, String)> = trace
        .entries
        .iter()
        .map(|e| (e.send_at, e.request.encode()))
        .collect();
    let done_flag = Arc::clone(&sender_done);
    let sender = std::thread::Builder::new()
        .name("loadgen-sender".into())
        .spawn(move || {
            let mut sent = vec![None; schedule.len()];
            let mut error = None;
            for (i, (at, line)) in schedule.iter().enumerate() {
                sleep_until(start + *at);
                if let Err(e) = writer.write_all(line.as_bytes()) {
                    error = Some(format!("sending request {i} failed: {e}"));
                    break;
                }
                sent[i] = Some(start.elapsed());
            }
            done_flag.store(true, Ordering::Release);
            (sent, error)
        })
        .context("cannot start the sender thread")?;

    let mut received: Vec<Option<(Duration, Outcome)>> = vec![None; n];
    let mut malformed = Vec::new();
    let mut got = 0usize;
    let mut reader = BufReader::new(stream.try_clone().context("cannot clone the socket")?);
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .context("cannot set a read timeout")?;
    let mut drain_deadline: Option<Instant> = None;
    let mut line = String::new();
    while got < n {
        // `line` keeps a partial line across read timeouts (read_line appends).
        match reader.read_line(&mut line) {
            Ok(0) => break,                          // server closed the connection
            Ok(_) if !line.ends_with('\n') => break, // closed mid-line
            Ok(_) => {
                let now = start.elapsed();
                match Response::parse(&line) {
                    Ok(Response::Done { id, queue, run }) => {
                        if let Some(slot @ None) = received.get_mut(id as usize) {
                            *slot = Some((now, Outcome::Done { queue, run }));
                            got += 1;
                            progress.inc(1);
                        }
                    }
                    Ok(Response::Failed { id, message }) => {
                        if let Some(slot @ None) = received.get_mut(id as usize) {
                            *slot = Some((now, Outcome::Failed(message)));
                            got += 1;
                            progress.inc(1);
                        }
                    }
                    Ok(Response::Malformed { message }) => malformed.push(message),
                    Ok(Response::Stats(_)) => {} // not asked for yet
                    Err(e) => {
                        malformed.push(format!("unparseable response `{}`: {e}", line.trim_end()))
                    }
                }
                line.clear();
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break, // connection reset
        }
        if sender_done.load(Ordering::Acquire) {
            let deadline =
                *drain_deadline.get_or_insert_with(|| Instant::now() + opts.drain_timeout);
            if Instant::now() >= deadline {
                break;
            }
        }
    }
    progress.finish_and_clear();
    let server_stats = if got == n {
        query_stats(&stream, &mut reader)
    } else {
        None
    };
    let _ = stream.shutdown(Shutdown::Both);
    let (sent, sender_error) = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender thread panicked"))?;

    let records = trace
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let (rx, outcome) = match received[i].take() {
                Some((t, o)) => (Some(t), o),
                None => (None, Outcome::Lost),
            };
            RequestRecord {
                id: e.request.id,
                intended: e.send_at,
                sent: sent[i],
                received: rx,
                outcome,
            }
        })
        .collect();
    Ok(RunResult {
        records,
        malformed,
        sender_error,
        server_stats,
    })
}

/// Asks the server for its counters once every response is in (so the
/// answer covers the whole run); waits at most two seconds.
fn query_stats(
    mut stream: &TcpStream,
    reader: &mut BufReader<TcpStream>,
) -> Option<serde_json::Value> {
    stream
        .write_all(format!("{}\n", crate::protocol::STATS_REQUEST).as_bytes())
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut line = String::new();
    while Instant::now() < deadline {
        match reader.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) => {
                if let Ok(Response::Stats(json)) = Response::parse(&line) {
                    return serde_json::from_str(&json).ok();
                }
                line.clear();
            }
            Err(_) => {} // read timeout: keep waiting until the deadline
        }
    }
    None
}
