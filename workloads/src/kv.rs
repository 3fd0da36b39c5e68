//! A memcached-like key-value service on `tailctl-rt` with background
//! compaction: the first of Prompt I-Cilk's applications (Singer et al.,
//! SPAA'23, §6; issue 13), run with and without priority levels.
//!
//! Design:
//!
//! * **Store.** 64 shards, each a `RwLock` over a map `key → (version,
//!   value)` and an append-only *log* of `(key, version)` (every SET appends).
//!   Values are `value_bytes` long and derived from `(key, version)`, so the
//!   client's lines stay short and a GET can check what it read.
//! * **Requests.** Each GET/SET line is one request on the pool, submitted by
//!   the connection's reader thread (at [`HIGH`] with priorities, at the
//!   default level without); it stamps its start and end and sends
//!   `OK <id> <queue_ns> <run_ns> <hit>` to the connection's writer thread.
//!   The connection loop and the load generator's client are
//!   [`crate::priowire`]'s, shared with [`crate::jobserver`].
//! * **Compaction.** A background thread keeps one compaction request in
//!   flight at all times (at [`LOW`] with priorities, the default level
//!   without): a `parallel_for` over the shards, each leaf sorting its shard's
//!   log, dropping superseded versions and checksumming the live values
//!   `passes` times; it then truncates the log. This is CPU-bound background
//!   work that saturates the pool, as the paper's memcached compaction does.
//! * **CPU accounting.** Every piece of user code (an operation, a compaction
//!   leaf) adds its thread CPU time to a counter; the pool's worker threads'
//!   total CPU time comes from `/proc/self/task/*/schedstat`. The difference
//!   is the CPU the workers spent outside user code: looking for work,
//!   stealing, sleeping and waking, scheduling (`search_cpu_ms`).
//!
//! Wire protocol (line-based, as `protocol`):
//!
//! ```text
//! client → server   GET <id> <key> | SET <id> <key> | STATS
//! server → client   OK <id> <queue_ns> <run_ns> <hit 0|1> | ERR <why> | STATS <json>
//! ```

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Result;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tailctl_rt::{parallel_for, PoolHandle, Priority};

/// Level of GET/SET requests when priorities are on.
///
/// ```
/// assert!(tailctl_workloads::kv::HIGH > tailctl_workloads::kv::LOW);
/// ```
pub const HIGH: Priority = match Priority::new(7) {
    Some(p) => p,
    None => unreachable!(),
};
/// Level of compaction when priorities are on (above the default, so that
/// its deques use the level pools and can be mugged).
///
/// ```
/// assert!(tailctl_workloads::kv::LOW > tailctl_rt::Priority::DEFAULT);
/// ```
pub const LOW: Priority = match Priority::new(1) {
    Some(p) => p,
    None => unreachable!(),
};
/// Number of shards of the store.
///
/// ```
/// assert_eq!(tailctl_workloads::kv::SHARDS, 64);
/// ```
pub const SHARDS: usize = 64;

/// CPU time of the calling thread (ns).
///
/// ```
/// let a = tailctl_workloads::kv::thread_cpu_ns();
/// std::hint::black_box((0..100_000u64).sum::<u64>());
/// assert!(tailctl_workloads::kv::thread_cpu_ns() >= a);
/// ```
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Total on-CPU time (ns) of this process's threads whose name starts with
/// `prefix`, from `/proc/self/task/*/schedstat` (falls back to 0).
///
/// ```
/// // No thread of a doc test is called like this.
/// assert_eq!(tailctl_workloads::kv::threads_cpu_ns("no-such-thread"), 0);
/// ```
pub fn threads_cpu_ns(prefix: &str) -> u64 {
    crate::schedstat::threads("self")
        .iter()
        .filter(|t| t.name.starts_with(prefix))
        .map(|t| t.run_ns)
        .sum()
}

/// A value for `(key, version)`: deterministic bytes.
fn value_of(key: u64, version: u64, len: usize) -> Vec<u8> {
    let mut x = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn checksum(v: &[u8]) -> u64 {
    v.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

#[derive(Default)]
struct Shard {
    map: HashMap<u64, (u64, Vec<u8>)>,
    log: Vec<(u64, u64)>,
}

/// The sharded store.
pub struct Store {
    shards: Vec<RwLock<Shard>>,
    value_bytes: usize,
    /// CPU time (ns) spent in user code (operations and compaction leaves).
    pub user_cpu_ns: AtomicU64,
}

impl Store {
    /// A store with keys `0..keys`, each at version 0.
    ///
    /// ```
    /// use tailctl_workloads::kv::Store;
    /// let s = Store::new(100, 16);
    /// assert!(s.get(5));
    /// assert!(!s.get(500));
    /// s.set(500);
    /// assert!(s.get(500));
    /// ```
    pub fn new(keys: u64, value_bytes: usize) -> Self {
        let mut shards: Vec<Shard> = (0..SHARDS).map(|_| Shard::default()).collect();
        for k in 0..keys {
            let s = &mut shards[(k % SHARDS as u64) as usize];
            s.map.insert(k, (0, value_of(k, 0, value_bytes)));
            s.log.push((k, 0));
        }
        Store {
            shards: shards.into_iter().map(RwLock::new).collect(),
            value_bytes,
            user_cpu_ns: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: u64) -> &RwLock<Shard> {
        &self.shards[(key % SHARDS as u64) as usize]
    }

    /// Reads `key` and verifies its value; whether it was present.
    pub fn get(&self, key: u64) -> bool {
        let s = self.shard(key).read().unwrap_or_else(|e| e.into_inner());
        match s.map.get(&key) {
            Some((version, v)) => {
                let ok = checksum(v) == checksum(&value_of(key, *version, self.value_bytes));
                assert!(ok, "corrupt value for key {key}");
                true
            }
            None => false,
        }
    }

    /// Writes a new version of `key`.
    pub fn set(&self, key: u64) {
        let mut s = self.shard(key).write().unwrap_or_else(|e| e.into_inner());
        let version = s.map.get(&key).map_or(0, |(v, _)| v + 1);
        let value = value_of(key, version, self.value_bytes);
        s.map.insert(key, (version, value));
        s.log.push((key, version));
    }

    /// Compacts shard `i`: `passes` times, sorts a copy of its log, keeps the
    /// newest version of each key and checksums the live values; then drops
    /// the superseded log entries. Returns the number of live entries.
    ///
    /// ```
    /// use tailctl_workloads::kv::Store;
    /// let s = Store::new(128, 8);
    /// s.set(0);
    /// s.set(0);
    /// assert_eq!(s.compact_shard(0, 1), 2);  // keys 0 and 64
    /// ```
    pub fn compact_shard(&self, i: usize, passes: usize) -> usize {
        let mut live = Vec::new();
        for _ in 0..passes.max(1) {
            let (mut log, values) = {
                let s = self.shards[i].read().unwrap_or_else(|e| e.into_inner());
                let vals: u64 = s
                    .map
                    .values()
                    .map(|(_, v)| checksum(v))
                    .fold(0, u64::wrapping_add);
                (s.log.clone(), vals)
            };
            log.sort_unstable();
            live.clear();
            for w in log.windows(2) {
                if w[0].0 != w[1].0 {
                    live.push(w[0]);
                }
            }
            if let Some(&last) = log.last() {
                live.push(last);
            }
            std::hint::black_box(values);
        }
        // The log becomes the live entries (including any SET that came in
        // meanwhile: the map has it).
        let mut s = self.shards[i].write().unwrap_or_else(|e| e.into_inner());
        let log: Vec<(u64, u64)> = s.map.iter().map(|(k, (v, _))| (*k, *v)).collect();
        s.log = log;
        live.len()
    }
}

/// Server options.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerOptions {
    /// Pool workers.
    pub workers: usize,
    /// GET/SET at [`HIGH`] and compaction at [`LOW`] (else all at the default level).
    pub priorities: bool,
    /// The pool's policy (`sf`, `af`).
    pub policy: String,
    /// The pool's priority mode (`prompt`, `adaptive:<n>us`).
    #[serde(default = "crate::kv::prompt")]
    pub priority_mode: String,
    /// Keys in the store.
    pub keys: u64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// Run background compaction.
    pub compaction: bool,
    /// Passes per shard per compaction (its CPU cost).
    pub passes: usize,
}

/// Counters of a running server (the `STATS` answer).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServerReport {
    /// Compactions completed.
    pub compactions: u64,
    /// Compaction durations (ms): p50, p95, p99, max.
    pub compaction_ms: [f64; 4],
    /// CPU time of the pool's workers (ms).
    pub workers_cpu_ms: f64,
    /// CPU time in user code: operations and compaction leaves (ms).
    pub user_cpu_ms: f64,
    /// `workers_cpu_ms - user_cpu_ms`: looking for work and scheduling (ms).
    pub search_cpu_ms: f64,
    /// The CPU time the runtime measured in the workers' searches (from a
    /// search that found nothing until work is found; `PoolStats::search_cpu_ns`, ms).
    #[serde(default)]
    pub runtime_search_cpu_ms: f64,
    /// The pool's counters.
    pub pool: serde_json::Value,
}

struct Shared {
    store: Store,
    pool: PoolHandle,
    priorities: bool,
    compaction_ns: Mutex<Vec<u64>>,
    stop: AtomicBool,
}

fn percentile_ms(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((q / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i] as f64 / 1e6
}

impl Shared {
    fn report(&self) -> ServerReport {
        let mut c = self.compaction_ns.lock().unwrap().clone();
        let workers = threads_cpu_ns("kv-w") as f64 / 1e6;
        let user = self.store.user_cpu_ns.load(Ordering::Relaxed) as f64 / 1e6;
        let stats = self.pool.stats().unwrap_or_default();
        ServerReport {
            compactions: c.len() as u64,
            compaction_ms: [
                percentile_ms(&mut c, 50.0),
                percentile_ms(&mut c, 95.0),
                percentile_ms(&mut c, 99.0),
                percentile_ms(&mut c, 100.0),
            ],
            workers_cpu_ms: workers,
            user_cpu_ms: user,
            search_cpu_ms: (workers - user).max(0.0),
            runtime_search_cpu_ms: stats.search_cpu_ns as f64 / 1e6,
            pool: serde_json::json!({
                "reallocations": stats.reallocations,
                "submitted": stats.submitted,
                "completed": stats.completed,
                "steals": stats.steals,
                "submitted_prioritized": stats.submitted_prioritized,
                "level_switches": stats.level_switches,
                "muggings": stats.muggings,
                "promptness_violations": stats.promptness_violations,
                "promptness_violation_ms": stats.promptness_violation_ns as f64 / 1e6,
            }),
        }
    }
}

/// Runs the server on `listener` until the process is killed.
///
/// ```no_run
/// use tailctl_workloads::kv::{serve, ServerOptions};
/// let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// let opts = ServerOptions { workers: 2, priorities: true, policy: "sf".into(),
///     priority_mode: "prompt".into(), keys: 1000, value_bytes: 64, compaction: true, passes: 1 };
/// serve(l, &opts).unwrap();
/// ```
pub fn serve(listener: TcpListener, opts: &ServerOptions) -> Result<()> {
    let pool = crate::priowire::pool(opts.workers, &opts.policy, &opts.priority_mode, "kv-w")?;
    let shared = Arc::new(Shared {
        store: Store::new(opts.keys, opts.value_bytes),
        pool: pool.handle(),
        priorities: opts.priorities,
        compaction_ns: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });
    if opts.compaction {
        let (sh, passes) = (Arc::clone(&shared), opts.passes);
        std::thread::Builder::new()
            .name("kv-compactor".into())
            .spawn(move || compactor(&sh, passes))?;
    }
    let sh = Arc::clone(&shared);
    crate::priowire::accept(&listener, "kv-conn", move |conn| {
        let _ = connection(conn, &sh);
    })?;
    shared.stop.store(true, Ordering::SeqCst);
    drop(pool);
    Ok(())
}

/// Keeps one compaction request in flight.
fn compactor(sh: &Arc<Shared>, passes: usize) {
    while !sh.stop.load(Ordering::Relaxed) {
        let s2 = Arc::clone(sh);
        let t0 = Instant::now();
        let job = move || {
            parallel_for(0..SHARDS, 1, |i| {
                let c0 = thread_cpu_ns();
                s2.store.compact_shard(i, passes);
                s2.store
                    .user_cpu_ns
                    .fetch_add(thread_cpu_ns().saturating_sub(c0), Ordering::Relaxed);
            })
        };
        let h = if sh.priorities {
            sh.pool.submit_with_priority(LOW, job)
        } else {
            sh.pool.submit(job)
        };
        if h.wait().is_err() {
            return;
        }
        sh.compaction_ns
            .lock()
            .unwrap()
            .push(t0.elapsed().as_nanos() as u64);
    }
}

fn connection(conn: TcpStream, sh: &Arc<Shared>) -> Result<()> {
    crate::priowire::serve_connection(conn, Some("kv-writer"), |line, read_at, tx| {
        let mut parts = line.split_whitespace();
        let (op, id, key) = (parts.next(), parts.next(), parts.next());
        match (
            op,
            id.and_then(|s| s.parse::<u64>().ok()),
            key.and_then(|s| s.parse::<u64>().ok()),
        ) {
            (Some("STATS"), _, _) => {
                let r = serde_json::to_string(&sh.report())?;
                let _ = tx.send(format!("STATS {r}\n"));
            }
            (Some(op @ ("GET" | "SET")), Some(id), Some(key)) => {
                let is_get = op == "GET";
                let (s2, tx2) = (Arc::clone(sh), tx.clone());
                let job = move || {
                    let start = Instant::now();
                    let c0 = thread_cpu_ns();
                    let hit = if is_get {
                        s2.store.get(key)
                    } else {
                        s2.store.set(key);
                        true
                    };
                    s2.store
                        .user_cpu_ns
                        .fetch_add(thread_cpu_ns().saturating_sub(c0), Ordering::Relaxed);
                    let end = Instant::now();
                    let _ = tx2.send(format!(
                        "OK {id} {} {} {}\n",
                        (start - read_at).as_nanos(),
                        (end - start).as_nanos(),
                        u8::from(hit)
                    ));
                };
                if sh.priorities {
                    sh.pool.spawn_with_priority(HIGH, job);
                } else {
                    sh.pool.spawn(job);
                }
            }
            _ => {
                let _ = tx.send(format!("ERR cannot parse `{}`\n", line.trim_end()));
            }
        }
        Ok(())
    })
}

/// Load options.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadOptions {
    /// Requests per second (Poisson arrivals).
    pub rps: f64,
    /// Requests to send.
    pub requests: usize,
    /// Fraction of SETs.
    pub set_fraction: f64,
    /// Keys (uniform).
    pub keys: u64,
    /// Trace seed.
    pub seed: u64,
    /// Warm-up requests excluded from the summary.
    pub warmup: usize,
}

impl LoadOptions {
    /// Rejects options [`load`] cannot run with (they would panic deep in
    /// the sampler): a SET fraction outside [0, 1] or NaN, no keys, a bad rate.
    ///
    /// ```
    /// use tailctl_workloads::kv::LoadOptions;
    /// let ok = LoadOptions { rps: 500.0, requests: 10, set_fraction: 0.1, keys: 10, seed: 1, warmup: 0 };
    /// assert!(ok.validate().is_ok());
    /// for bad in [LoadOptions { set_fraction: 2.0, ..ok.clone() },
    ///             LoadOptions { set_fraction: f64::NAN, ..ok.clone() },
    ///             LoadOptions { keys: 0, ..ok.clone() },
    ///             LoadOptions { rps: f64::INFINITY, ..ok.clone() }] {
    ///     assert!(bad.validate().is_err());
    /// }
    /// ```
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.set_fraction) {
            anyhow::bail!(
                "--set-fraction must be in [0, 1], got {}",
                self.set_fraction
            );
        }
        if self.keys == 0 {
            anyhow::bail!("--keys must be at least 1");
        }
        crate::arrival::ArrivalProcess::Poisson { rps: self.rps }
            .validate()
            .map_err(anyhow::Error::msg)
    }
}

/// One request as the load generator saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Request id.
    pub id: u64,
    /// SET (else GET).
    pub set: bool,
    /// From the intended send time to the response (ns); `None` if lost.
    pub latency_ns: Option<u64>,
    /// Server: from reading the line to the start (ns).
    pub queue_ns: u64,
    /// Server: run time (ns).
    pub run_ns: u64,
}

/// A latency summary of one class of requests.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Requests counted (after warm-up).
    pub n: usize,
    /// Lost requests (no response).
    pub lost: usize,
    /// p50, p95, p99, p99.9 (ms).
    pub p50_ms: f64,
    /// 95th percentile (ms).
    pub p95_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// 99.9th percentile (ms).
    pub p999_ms: f64,
    /// Share of requests within 10 ms (the paper's QoS: ≥ 95%).
    pub within_10ms: f64,
    /// Median server-side queueing (ms).
    pub queue_p50_ms: f64,
    /// 99th percentile server-side queueing (ms).
    pub queue_p99_ms: f64,
}

/// Summarises `records` (lost requests count as over every bound).
///
/// ```
/// use tailctl_workloads::kv::{summarize, Record};
/// let r: Vec<Record> = (0..100)
///     .map(|i| Record { id: i, set: false, latency_ns: Some(i * 1_000_000), queue_ns: 0, run_ns: 0 })
///     .collect();
/// let s = summarize(&r);
/// assert_eq!(s.n, 100);
/// assert!((s.within_10ms - 0.11).abs() < 1e-9);
/// ```
pub fn summarize(records: &[Record]) -> LatencySummary {
    let mut lat: Vec<u64> = records
        .iter()
        .map(|r| r.latency_ns.unwrap_or(u64::MAX))
        .collect();
    let mut queue: Vec<u64> = records.iter().map(|r| r.queue_ns).collect();
    let n = lat.len();
    let within = lat.iter().filter(|&&l| l <= 10_000_000).count();
    LatencySummary {
        n,
        lost: records.iter().filter(|r| r.latency_ns.is_none()).count(),
        p50_ms: percentile_ms(&mut lat, 50.0),
        p95_ms: percentile_ms(&mut lat, 95.0),
        p99_ms: percentile_ms(&mut lat, 99.0),
        p999_ms: percentile_ms(&mut lat, 99.9),
        within_10ms: if n == 0 {
            0.0
        } else {
            within as f64 / n as f64
        },
        queue_p50_ms: percentile_ms(&mut queue, 50.0),
        queue_p99_ms: percentile_ms(&mut queue, 99.0),
    }
}

/// What one load run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadReport {
    /// The options.
    pub options: LoadOptions,
    /// GET and SET together (the high level).
    pub all: LatencySummary,
    /// GETs.
    pub get: LatencySummary,
    /// SETs.
    pub set: LatencySummary,
    /// The server's counters at the end.
    pub server: Option<ServerReport>,
}

/// Runs an open-loop GET/SET load against `addr`; returns the report and
/// every request's record.
///
/// ```no_run
/// use tailctl_workloads::kv::{load, LoadOptions};
/// let opts = LoadOptions { rps: 500.0, requests: 1000, set_fraction: 0.1, keys: 1000,
///     seed: 1, warmup: 100 };
/// let (report, _records) = load("127.0.0.1:7900", &opts).unwrap();
/// println!("p99 {} ms", report.all.p99_ms);
/// ```
pub fn load(addr: &str, opts: &LoadOptions) -> Result<(LoadReport, Vec<Record>)> {
    opts.validate()?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
    let arrivals = crate::arrival::ArrivalProcess::Poisson { rps: opts.rps }
        .schedule(opts.requests, &mut rng)
        .map_err(anyhow::Error::msg)?;
    let ops: Vec<(bool, u64)> = (0..opts.requests)
        .map(|_| (rng.gen_bool(opts.set_fraction), rng.gen_range(0..opts.keys)))
        .collect();
    let lines: Vec<String> = ops
        .iter()
        .enumerate()
        .map(|(i, &(set, key))| format!("{} {i} {key}\n", if set { "SET" } else { "GET" }))
        .collect();
    let (got, server) = crate::priowire::drive(
        addr,
        &arrivals,
        lines,
        Duration::from_secs(10),
        "STATS 0 0\n",
    )?;
    let records: Vec<Record> = got
        .iter()
        .enumerate()
        .map(|(i, g)| Record {
            id: i as u64,
            set: ops[i].0,
            latency_ns: g.map(|x| x.0),
            queue_ns: g.map_or(0, |x| x.1),
            run_ns: g.map_or(0, |x| x.2),
        })
        .collect();
    let counted = &records[opts.warmup.min(records.len())..];
    let gets: Vec<Record> = counted.iter().filter(|r| !r.set).cloned().collect();
    let sets: Vec<Record> = counted.iter().filter(|r| r.set).cloned().collect();
    Ok((
        LoadReport {
            options: opts.clone(),
            all: summarize(counted),
            get: summarize(&gets),
            set: summarize(&sets),
            server,
        },
        records,
    ))
}

/// The default priority mode of a report written before modes existed.
pub(crate) fn prompt() -> String {
    "prompt".into()
}
