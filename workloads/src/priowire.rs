//! The line protocol both priority-level applications ([`crate::kv`],
//! [`crate::jobserver`]) speak, minus their requests: the server's pool,
//! accept loop and per-connection loop, and the client's open-loop driver.
//!
//! Design: a connection has a reader (this thread: it parses a line and
//! submits the request to the pool) and a writer thread that sends the
//! responses in completion order, so a slow request never holds back the
//! answer of a fast one. The client sends every request at its scheduled time
//! from a sender thread and reads `OK <id> <queue_ns> <run_ns> …` lines on
//! another, so late responses never delay later requests (open loop). The
//! applications keep only what differs: what a line means and what a request
//! runs.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tailctl_rt::{Policy, Pool, PriorityMode};

/// The pool a server runs its requests on: `workers` threads named
/// `thread_name` (the prefix its CPU time is summed by), scheduling `policy`
/// (`sf`, `af`), priority mode `mode` (`prompt`, `adaptive:<n>us`), with
/// the CPU time its workers spend looking for work measured.
pub fn pool(workers: usize, policy: &str, mode: &str, thread_name: &str) -> Result<Pool> {
    let policy: Policy = policy.parse().map_err(anyhow::Error::msg)?;
    let mode: PriorityMode = mode.parse().map_err(anyhow::Error::msg)?;
    Ok(Pool::builder()
        .workers(workers)
        .policy(policy)
        .priority_mode(mode)
        .measure_search_cpu(true)
        .thread_name(thread_name)
        .build()?)
}

/// Accepts connections on `listener` until it fails, serving each with
/// `serve` on its own thread named `thread_name`.
pub fn accept(
    listener: &TcpListener,
    thread_name: &str,
    serve: impl Fn(TcpStream) + Clone + Send + 'static,
) -> Result<()> {
    for conn in listener.incoming() {
        let (conn, serve) = (conn?, serve.clone());
        std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || serve(conn))?;
    }
    Ok(())
}

/// Serves one connection: calls `handle(line, read_at, responses)` for each
/// request line (`read_at`: when it was read, for the queueing time), and
/// writes whatever is sent on `responses` back; returns when the client
/// closes. `writer` names the writer thread (`None`: unnamed).
pub fn serve_connection(
    conn: TcpStream,
    writer: Option<&str>,
    mut handle: impl FnMut(&str, Instant, &mpsc::Sender<String>) -> Result<()>,
) -> Result<()> {
    conn.set_nodelay(true).ok();
    let (tx, rx) = mpsc::channel::<String>();
    let mut w = conn.try_clone()?;
    let mut b = std::thread::Builder::new();
    if let Some(name) = writer {
        b = b.name(name.into());
    }
    let writer = b.spawn(move || {
        for line in rx {
            // On a write error keep draining: requests still running send here.
            let _ = w.write_all(line.as_bytes());
        }
    })?;
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let read_at = Instant::now();
        handle(&line, read_at, &tx)?;
    }
    drop(tx);
    let _ = writer.join();
    Ok(())
}

/// What a server measured for one request: latency from its intended send
/// time, then the server's queueing and run time (all ns).
pub type Timing = (u64, u64, u64);

/// Sends `lines[i]` at `start + arrivals[i]` (open loop) to `addr`, reads the
/// `OK <i> <queue_ns> <run_ns> …` answers (each within `read_timeout`), then
/// sends `stats` and reads the `STATS <json>` answer.
///
/// Returns each request's [`Timing`] (`None`: lost) and the server's counters
/// (`None` if the answer was not a JSON `S`).
pub fn drive<S: serde::de::DeserializeOwned>(
    addr: &str,
    arrivals: &[Duration],
    lines: Vec<String>,
    read_timeout: Duration,
    stats: &str,
) -> Result<(Vec<Option<Timing>>, Option<S>)> {
    let requests = arrivals.len();
    let stream = crate::loadgen::connect(addr)?;
    stream.set_nodelay(true).ok();
    let mut w = stream.try_clone()?;
    // A short head start, so the first sends are not late already.
    let start = Instant::now() + Duration::from_millis(20);
    let plan: Vec<(Duration, String)> = arrivals.iter().copied().zip(lines).collect();
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        for (at, line) in plan {
            let t = start + at;
            let now = Instant::now();
            if t > now {
                std::thread::sleep(t - now);
            }
            w.write_all(line.as_bytes())?;
        }
        Ok(())
    });
    let mut got: Vec<Option<Timing>> = vec![None; requests];
    let mut reader = BufReader::new(stream.try_clone()?);
    stream.set_read_timeout(Some(read_timeout))?;
    let mut line = String::new();
    let mut n = 0;
    while n < requests {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let now = start.elapsed();
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"OK") || f.len() < 4 {
            bail!("unexpected response `{}`", line.trim_end());
        }
        let id: usize = f[1].parse()?;
        let lat = now.saturating_sub(arrivals[id]).as_nanos() as u64;
        got[id] = Some((lat, f[2].parse()?, f[3].parse()?));
        n += 1;
    }
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))?
        .context("sending")?;
    let mut w = stream.try_clone()?;
    w.write_all(stats.as_bytes())?;
    line.clear();
    reader.read_line(&mut line)?;
    let server = line
        .strip_prefix("STATS ")
        .and_then(|j| serde_json::from_str(j.trim()).ok());
    Ok((got, server))
}
