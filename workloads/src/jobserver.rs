//! A job server with four kinds of parallel jobs at four priority levels:
//! the third of Prompt I-Cilk's applications (Singer et al., SPAA'23, §6;
//! issue 13): matrix multiply > fib > sort > Smith-Waterman.
//!
//! Design: the same shape as [`crate::kv`], on the same connection loop and
//! open-loop client ([`crate::priowire`]). Each `JOB <id> <kind>` line is
//! one request on the pool, submitted by the connection's reader thread at
//! its kind's level (with priorities) or at the default level (without);
//! the job stamps start and end and answers `OK <id> <queue_ns> <run_ns>
//! <checksum>`. The kernels are real parallel programs on `tailctl-rt`:
//!
//! | kind | level | what |
//! |---|---:|---|
//! | `mm` | 4 | `n×n` matrix product, `parallel_for` over rows |
//! | `fib` | 3 | doubly recursive Fibonacci on `join` |
//! | `sort` | 2 | merge sort of pseudo-random `u64`s, halves on `join` |
//! | `sw` | 1 | Smith-Waterman local alignment score, anti-diagonal blocks in `parallel_for` |
//!
//! The load generator sends an open-loop Poisson stream with a uniform mix
//! of the four kinds; [`crate::kv::summarize`] gives the per-kind latency.
//!
//! The same server and load generator also run the second application, the
//! **email-like server** (`app = "email"`, [`EMAIL_KINDS`]): 256 mailboxes
//! of pseudo-text emails; `send` (level 3) appends an email to a mailbox,
//! `sortmail` (level 2) sorts the words of a mailbox (merge sort on `join`),
//! `compress` (level 1) compresses every email of a mailbox (an LZ77-style
//! compressor, emails in `parallel_for`). Mix: 50% send, 30% sortmail, 20%
//! compress.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tailctl_rt::{join, parallel_for, PoolHandle, Priority};

use crate::kv::{summarize, LatencySummary, Record};

/// The job kinds, highest priority first.
///
/// ```
/// assert_eq!(tailctl_workloads::jobserver::KINDS[0], "mm");
/// ```
pub const KINDS: [&str; 4] = ["mm", "fib", "sort", "sw"];

/// The email server's request kinds, highest priority first.
///
/// ```
/// assert_eq!(tailctl_workloads::jobserver::kinds_of("email"), tailctl_workloads::jobserver::EMAIL_KINDS);
/// ```
pub const EMAIL_KINDS: [&str; 3] = ["send", "sortmail", "compress"];

/// The kinds of application `app` (`jobs` or `email`).
///
/// ```
/// assert_eq!(tailctl_workloads::jobserver::kinds_of("jobs").len(), 4);
/// ```
pub fn kinds_of(app: &str) -> &'static [&'static str] {
    if app == "email" {
        &EMAIL_KINDS
    } else {
        &KINDS
    }
}

/// Share of each kind in the load of `app` (same order as [`kinds_of`]).
fn mix_of(app: &str) -> &'static [f64] {
    if app == "email" {
        &[0.5, 0.3, 0.2]
    } else {
        &[0.25, 0.25, 0.25, 0.25]
    }
}

/// Number of mailboxes of the email server.
pub const MAILBOXES: usize = 256;

/// The email server's state: mailboxes of emails.
pub struct Mailboxes(Vec<std::sync::Mutex<Vec<Vec<u8>>>>);

impl Default for Mailboxes {
    /// 256 mailboxes of 40 emails each.
    fn default() -> Self {
        let m = Mailboxes(
            (0..MAILBOXES)
                .map(|_| std::sync::Mutex::new(Vec::new()))
                .collect(),
        );
        for i in 0..MAILBOXES * 40 {
            m.send(i as u64);
        }
        m
    }
}

const WORDS: [&str; 16] = [
    "meeting", "report", "the", "deadline", "lunch", "budget", "and", "review", "please",
    "tomorrow", "project", "of", "thanks", "update", "a", "schedule",
];

impl Mailboxes {
    fn mailbox(&self, id: u64) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.0[(id % MAILBOXES as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a pseudo-text email (1–4 KB) to mailbox `id % 256` (at most
    /// 80 kept); returns its length.
    ///
    /// ```
    /// let m = tailctl_workloads::jobserver::Mailboxes::default();
    /// assert!(m.send(7) >= 1000);
    /// ```
    pub fn send(&self, id: u64) -> u64 {
        let mut s = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let len = 1000 + (rng_u64(&mut s) % 3000) as usize;
        let mut e = Vec::with_capacity(len + 16);
        while e.len() < len {
            e.extend_from_slice(WORDS[(rng_u64(&mut s) % 16) as usize].as_bytes());
            e.push(b' ');
        }
        let n = e.len() as u64;
        let mut mb = self.mailbox(id);
        if mb.len() >= 80 {
            mb.remove(0);
        }
        mb.push(e);
        n
    }

    /// Sorts the words of mailbox `id % 256` (as hashes, merge sort on
    /// `join`); returns a checksum.
    ///
    /// ```
    /// let m = tailctl_workloads::jobserver::Mailboxes::default();
    /// assert_eq!(m.sort_words(3), m.sort_words(3));
    /// ```
    pub fn sort_words(&self, id: u64) -> u64 {
        let mut words: Vec<u64> = {
            let mb = self.mailbox(id);
            mb.iter()
                .flat_map(|e| e.split(|&b| b == b' '))
                .enumerate()
                .map(|(i, w)| {
                    let h = w.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
                    });
                    (h << 20) | (i as u64 & 0xf_ffff)
                })
                .collect()
        };
        let mut tmp = vec![0u64; words.len()];
        merge_sort(&mut words, &mut tmp);
        words
            .iter()
            .step_by(31)
            .fold(0, |a, &x| a.wrapping_add(x >> 20))
    }

    /// Compresses every email of mailbox `id % 256` (LZ77-style, emails in
    /// `parallel_for`); returns the total compressed size.
    ///
    /// ```
    /// let m = tailctl_workloads::jobserver::Mailboxes::default();
    /// assert!(m.compress(5) > 0);
    /// ```
    pub fn compress(&self, id: u64) -> u64 {
        let emails: Vec<Vec<u8>> = self.mailbox(id).clone();
        let total = std::sync::atomic::AtomicU64::new(0);
        parallel_for(0..emails.len(), 1, |i| {
            total.fetch_add(lz_size(&emails[i]), Ordering::Relaxed);
        });
        total.load(Ordering::Relaxed)
    }
}

/// Size of `data` compressed with a greedy LZ77 (4-byte hash, 4 KB window,
/// 3-byte tokens for matches, 1+n for literal runs), searched exhaustively
/// along a hash chain: deliberately CPU-heavy.
fn lz_size(data: &[u8]) -> u64 {
    const WINDOW: usize = 4096;
    let mut head = vec![usize::MAX; 1 << 12];
    let mut prev = vec![usize::MAX; data.len()];
    let (mut i, mut out, mut lit) = (0usize, 0u64, 0u64);
    let hash = |p: usize| {
        let v = u32::from_le_bytes([data[p], data[p + 1], data[p + 2], data[p + 3]]);
        (v.wrapping_mul(2_654_435_761) >> 20) as usize
    };
    while i + 4 <= data.len() {
        let h = hash(i);
        let (mut best, mut cand, mut steps) = (0usize, head[h], 0);
        while cand != usize::MAX && i - cand <= WINDOW && steps < 64 {
            let l = data[cand..]
                .iter()
                .zip(&data[i..])
                .take(255)
                .take_while(|(a, b)| a == b)
                .count();
            best = best.max(l);
            cand = prev[cand];
            steps += 1;
        }
        prev[i] = head[h];
        head[h] = i;
        if best >= 4 {
            out += 3 + u64::from(lit > 0) + lit;
            lit = 0;
            let end = (i + best).min(data.len().saturating_sub(3));
            for (k, p) in prev.iter_mut().enumerate().take(end).skip(i + 1) {
                let hk = hash(k);
                *p = head[hk];
                head[hk] = k;
            }
            i += best;
        } else {
            lit += 1;
            i += 1;
        }
    }
    out + lit + (data.len() - i) as u64 + 1
}

/// Priority level of a kind (with priorities on): mm 4, fib 3, sort 2,
/// sw 1; send 3, sortmail 2, compress 1.
///
/// ```
/// use tailctl_workloads::jobserver::level_of;
/// assert!(level_of("mm") > level_of("sw"));
/// ```
pub fn level_of(kind: &str) -> Priority {
    let l = match kind {
        "mm" => 4,
        "fib" | "send" => 3,
        "sort" | "sortmail" => 2,
        _ => 1,
    };
    Priority::new(l).unwrap_or_default()
}

/// Job sizes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Sizes {
    /// Matrix dimension.
    pub mm: usize,
    /// Fibonacci argument.
    pub fib: u64,
    /// Elements to sort.
    pub sort: usize,
    /// Sequence length of Smith-Waterman.
    pub sw: usize,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            mm: 200,
            fib: 32,
            sort: 300_000,
            sw: 1_500,
        }
    }
}

fn rng_u64(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// `n×n` matrix product of two pseudo-random matrices; returns a checksum.
///
/// ```
/// assert_eq!(tailctl_workloads::jobserver::matmul(8), tailctl_workloads::jobserver::matmul(8));
/// ```
pub fn matmul(n: usize) -> u64 {
    let mut s = 0x1234_5678u64;
    let a: Vec<f64> = (0..n * n).map(|_| (rng_u64(&mut s) % 100) as f64).collect();
    let b: Vec<f64> = (0..n * n).map(|_| (rng_u64(&mut s) % 100) as f64).collect();
    let rows: Vec<std::sync::Mutex<f64>> = (0..n).map(|_| std::sync::Mutex::new(0.0)).collect();
    parallel_for(0..n, 4, |i| {
        let mut sum = 0.0;
        for j in 0..n {
            let mut c = 0.0;
            for k in 0..n {
                c += a[i * n + k] * b[k * n + j];
            }
            sum += c;
        }
        *rows[i].lock().unwrap_or_else(|e| e.into_inner()) = sum;
    });
    rows.iter()
        .map(|r| *r.lock().unwrap_or_else(|e| e.into_inner()) as u64)
        .fold(0, u64::wrapping_add)
}

/// Doubly recursive Fibonacci on `join` (sequential below 12).
///
/// ```
/// assert_eq!(tailctl_workloads::jobserver::fib(20), 6765);
/// ```
pub fn fib(n: u64) -> u64 {
    if n < 12 {
        return fib_seq(n);
    }
    let (a, b) = join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn fib_seq(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

/// Parallel merge sort of `n` pseudo-random numbers; returns a checksum
/// (and checks the order).
///
/// ```
/// let _ = tailctl_workloads::jobserver::sort(10_000);
/// ```
pub fn sort(n: usize) -> u64 {
    let mut s = 0x9e37_79b9u64;
    let mut v: Vec<u64> = (0..n).map(|_| rng_u64(&mut s)).collect();
    let mut tmp = vec![0u64; n];
    merge_sort(&mut v, &mut tmp);
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "sort is broken");
    v.iter().step_by(97).fold(0, |a, &x| a.wrapping_add(x))
}

/// The parallel merge sort behind [`sort`] (serial merges; shared with the
/// multiprogramming jobs of `crate::jobs`).
pub(crate) fn merge_sort(v: &mut [u64], tmp: &mut [u64]) {
    if v.len() <= 4096 {
        v.sort_unstable();
        return;
    }
    let mid = v.len() / 2;
    {
        let (l, r) = v.split_at_mut(mid);
        let (tl, tr) = tmp.split_at_mut(mid);
        join(|| merge_sort(l, tl), || merge_sort(r, tr));
    }
    let (l, r) = v.split_at(mid);
    let (mut i, mut j) = (0, 0);
    for slot in tmp.iter_mut() {
        if j >= r.len() || (i < l.len() && l[i] <= r[j]) {
            *slot = l[i];
            i += 1;
        } else {
            *slot = r[j];
            j += 1;
        }
    }
    v.copy_from_slice(tmp);
}

/// Smith-Waterman local alignment score of two pseudo-random sequences of
/// length `n`, by blocks of 64×64 along anti-diagonals (the blocks of one
/// anti-diagonal in parallel).
///
/// ```
/// assert!(tailctl_workloads::jobserver::smith_waterman(200) > 0);
/// ```
pub fn smith_waterman(n: usize) -> u64 {
    const B: usize = 64;
    let mut s = 0x5eedu64;
    let a: Vec<u8> = (0..n).map(|_| (rng_u64(&mut s) % 4) as u8).collect();
    let b: Vec<u8> = (0..n).map(|_| (rng_u64(&mut s) % 4) as u8).collect();
    // Score matrix (n+1)², rows behind a lock each block row touches alone.
    let h: Vec<std::sync::atomic::AtomicI32> = (0..(n + 1) * (n + 1))
        .map(|_| std::sync::atomic::AtomicI32::new(0))
        .collect();
    let nb = n.div_ceil(B);
    let best = std::sync::atomic::AtomicI32::new(0);
    for d in 0..(2 * nb - 1) {
        let lo = d.saturating_sub(nb - 1);
        let hi = d.min(nb - 1);
        parallel_for(lo..hi + 1, 1, |bi| {
            let bj = d - bi;
            let mut local = 0;
            for i in bi * B + 1..=((bi + 1) * B).min(n) {
                for j in bj * B + 1..=((bj + 1) * B).min(n) {
                    let idx = |i: usize, j: usize| i * (n + 1) + j;
                    let m = if a[i - 1] == b[j - 1] { 3 } else { -3 };
                    let v = (h[idx(i - 1, j - 1)].load(Ordering::Relaxed) + m)
                        .max(h[idx(i - 1, j)].load(Ordering::Relaxed) - 2)
                        .max(h[idx(i, j - 1)].load(Ordering::Relaxed) - 2)
                        .max(0);
                    h[idx(i, j)].store(v, Ordering::Relaxed);
                    local = local.max(v);
                }
            }
            best.fetch_max(local, Ordering::Relaxed);
        });
    }
    best.load(Ordering::Relaxed) as u64
}

/// Runs one job of `kind` (sequentially outside a pool).
///
/// ```
/// use tailctl_workloads::jobserver::{run, Sizes};
/// let small = Sizes { mm: 8, fib: 10, sort: 1000, sw: 64 };
/// assert_eq!(run("fib", &small), 55);
/// ```
pub fn run(kind: &str, sizes: &Sizes) -> u64 {
    match kind {
        "mm" => matmul(sizes.mm),
        "fib" => fib(sizes.fib),
        "sort" => sort(sizes.sort),
        _ => smith_waterman(sizes.sw),
    }
}

/// Server options.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerOptions {
    /// `jobs` or `email`.
    #[serde(default = "default_app")]
    pub app: String,
    /// Pool workers.
    pub workers: usize,
    /// Each kind at its level (else all at the default level).
    pub priorities: bool,
    /// The pool's policy (`sf`, `af`).
    pub policy: String,
    /// The pool's priority mode (`prompt`, `adaptive:<n>us`).
    #[serde(default = "crate::kv::prompt")]
    pub priority_mode: String,
    /// Job sizes.
    pub sizes: Sizes,
}

/// Runs the job server on `listener` until the process is killed.
///
/// ```no_run
/// use tailctl_workloads::jobserver::{serve, ServerOptions, Sizes};
/// let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// let opts = ServerOptions { app: "jobs".into(), workers: 2, priorities: true,
///     policy: "sf".into(), priority_mode: "prompt".into(), sizes: Sizes::default() };
/// serve(l, &opts).unwrap();
/// ```
pub fn serve(listener: TcpListener, opts: &ServerOptions) -> Result<()> {
    let pool = crate::priowire::pool(opts.workers, &opts.policy, &opts.priority_mode, "jobs-w")?;
    let handle = pool.handle();
    let mail = Arc::new(if opts.app == "email" {
        Mailboxes::default()
    } else {
        Mailboxes(Vec::new())
    });
    let opts = opts.clone();
    crate::priowire::accept(&listener, "jobs-conn", move |conn| {
        let _ = connection(conn, &handle, &opts, &mail);
    })
}

fn connection(
    conn: TcpStream,
    pool: &PoolHandle,
    opts: &ServerOptions,
    mail: &Arc<Mailboxes>,
) -> Result<()> {
    crate::priowire::serve_connection(conn, None, |line, read_at, tx| {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["STATS", ..] => {
                // Jobs wait in joins, where their worker runs other jobs'
                // tasks: user time cannot be told apart per job, so the
                // time spent looking for work is the runtime's own
                // measurement (`search_cpu_ms`).
                let workers = crate::kv::threads_cpu_ns("jobs-w") as f64 / 1e6;
                let s = pool.stats().unwrap_or_default();
                let j = serde_json::json!({
                    "workers_cpu_ms": workers,
                    "search_cpu_ms": s.search_cpu_ns as f64 / 1e6,
                    "reallocations": s.reallocations,
                    "steals": s.steals,
                    "level_switches": s.level_switches,
                    "muggings": s.muggings,
                    "promptness_violations": s.promptness_violations,
                    "promptness_violation_ms": s.promptness_violation_ns as f64 / 1e6,
                });
                let _ = tx.send(format!("STATS {j}\n"));
            }
            ["JOB", id, kind] if kinds_of(&opts.app).contains(kind) => {
                let id: u64 = id.parse()?;
                let kind = kind.to_string();
                let (tx2, sizes, mail) = (tx.clone(), opts.sizes, Arc::clone(mail));
                let level = level_of(&kind);
                let job = move || {
                    let start = Instant::now();
                    let r = match kind.as_str() {
                        "send" => mail.send(id),
                        "sortmail" => mail.sort_words(id),
                        "compress" => mail.compress(id),
                        _ => run(&kind, &sizes),
                    };
                    let end = Instant::now();
                    let _ = tx2.send(format!(
                        "OK {id} {} {} {r}\n",
                        (start - read_at).as_nanos(),
                        (end - start).as_nanos()
                    ));
                };
                if opts.priorities {
                    pool.spawn_with_priority(level, job);
                } else {
                    pool.spawn(job);
                }
            }
            _ => {
                let _ = tx.send(format!("ERR cannot parse `{}`\n", line.trim_end()));
            }
        }
        Ok(())
    })
}

fn default_app() -> String {
    "jobs".into()
}

/// Load options.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadOptions {
    /// `jobs` or `email`.
    #[serde(default = "default_app")]
    pub app: String,
    /// Jobs per second (Poisson), all kinds together.
    pub rps: f64,
    /// Jobs to send.
    pub requests: usize,
    /// Trace seed.
    pub seed: u64,
    /// Warm-up jobs left out of the summary.
    pub warmup: usize,
}

/// What one load run measured: per kind (highest level first).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadReport {
    /// The options.
    pub options: LoadOptions,
    /// `(kind, summary)` for mm, fib, sort, sw.
    pub kinds: Vec<(String, LatencySummary)>,
    /// The server's counters at the end.
    pub server: serde_json::Value,
}

/// Runs an open-loop job load against `addr`.
///
/// ```no_run
/// use tailctl_workloads::jobserver::{load, LoadOptions};
/// let opts = LoadOptions { app: "jobs".into(), rps: 20.0, requests: 200, seed: 1, warmup: 20 };
/// let (report, _records) = load("127.0.0.1:7901", &opts).unwrap();
/// for (kind, s) in &report.kinds {
///     println!("{kind}: p99 {} ms", s.p99_ms);
/// }
/// ```
pub fn load(addr: &str, opts: &LoadOptions) -> Result<(LoadReport, Vec<(String, Record)>)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
    let arrivals = crate::arrival::ArrivalProcess::Poisson { rps: opts.rps }
        .schedule(opts.requests, &mut rng)
        .map_err(anyhow::Error::msg)?;
    let names = kinds_of(&opts.app);
    let mix = mix_of(&opts.app);
    let kinds: Vec<usize> = (0..opts.requests)
        .map(|_| {
            let mut x: f64 = rng.gen();
            mix.iter()
                .position(|&w| {
                    x -= w;
                    x < 0.0
                })
                .unwrap_or(mix.len() - 1)
        })
        .collect();
    let lines: Vec<String> = kinds
        .iter()
        .enumerate()
        .map(|(i, &k)| format!("JOB {i} {}\n", names[k]))
        .collect();
    let (got, server) =
        crate::priowire::drive(addr, &arrivals, lines, Duration::from_secs(30), "STATS\n")?;
    let server = server.unwrap_or(serde_json::Value::Null);
    let records: Vec<(String, Record)> = got
        .iter()
        .enumerate()
        .map(|(i, g)| {
            (
                names[kinds[i]].to_string(),
                Record {
                    id: i as u64,
                    set: false,
                    latency_ns: g.map(|x| x.0),
                    queue_ns: g.map_or(0, |x| x.1),
                    run_ns: g.map_or(0, |x| x.2),
                },
            )
        })
        .collect();
    let counted = &records[opts.warmup.min(records.len())..];
    let per_kind = names
        .iter()
        .map(|k| {
            let rs: Vec<Record> = counted
                .iter()
                .filter(|(kk, _)| kk == k)
                .map(|(_, r)| r.clone())
                .collect();
            (k.to_string(), summarize(&rs))
        })
        .collect();
    Ok((
        LoadReport {
            options: opts.clone(),
            kinds: per_kind,
            server,
        },
        records,
    ))
}
