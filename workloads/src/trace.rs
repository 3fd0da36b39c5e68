//! A request trace: every request's intended send time and work, fixed before
//! the run, so that a run can be replayed exactly (same seed → same trace, or
//! write the trace to a file and read it back).
//!
//! Design: arrivals and work come from two independent ChaCha8 streams derived
//! from one seed (ChaCha8's output is specified, so traces do not change with
//! the platform). Keeping the streams separate means changing the work
//! distribution leaves the arrival times unchanged, and vice versa.
//!
//! File format (text, one request per line after a header):
//!
//! ```text
//! # tailctl-trace v1
//! # seed=42 arrival=poisson:160 distribution=bing kernel=bs seq_pct=0 n=3
//! 0 5731204 bs 6120 0
//! 1 9214388 bs 4388 0
//! 2 18201377 bs 61230 0
//! ```
//!
//! Fields: id, send offset from the start of the run in ns, kernel, work in µs,
//! sequential percent. Lines starting with `#` are comments; the second header
//! line records how the trace was made, for people.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tailctl_rt::distribution::WorkDistribution;

use crate::arrival::ArrivalProcess;
use crate::kernel::{Kernel, KernelSpec};
use crate::protocol::Request;

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Intended send time, from the start of the run.
    pub send_at: Duration,
    /// The request (id and kernel spec).
    pub request: Request,
}

/// A whole trace: requests sorted by send time, ids `0..n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// How the trace was made (free text, kept in the file header).
    pub description: String,
    /// The requests, in send order.
    pub entries: Vec<TraceEntry>,
}

/// Everything [`Trace::generate`] needs.
#[derive(Clone, Debug)]
pub struct TraceConfig {
    /// Number of requests.
    pub requests: usize,
    /// Arrival process.
    pub arrival: ArrivalProcess,
    /// Kernel every request runs.
    pub kernel: Kernel,
    /// Sequential percent of every request (10 for the paper's sub-linear runs).
    pub seq_pct: u8,
    /// Seed of both random streams.
    pub seed: u64,
}

impl Trace {
    /// Generates a trace: arrival times from `cfg.arrival`, work by sampling
    /// `dist` at uniform quantiles (rounded to whole µs, at least 1 µs).
    ///
    /// ```
    /// use tailctl_workloads::{arrival::ArrivalProcess, distributions, kernel::Kernel, trace::*};
    ///
    /// let cfg = TraceConfig { requests: 100, arrival: ArrivalProcess::Poisson { rps: 100.0 },
    ///                         kernel: Kernel::Spin, seq_pct: 0, seed: 7 };
    /// let a = Trace::generate(&cfg, &distributions::bing(), "bing").unwrap();
    /// let b = Trace::generate(&cfg, &distributions::bing(), "bing").unwrap();
    /// assert_eq!(a, b); // seeded: identical
    /// assert_eq!(Trace::parse(&a.to_text()).unwrap(), a);
    /// ```
    pub fn generate(cfg: &TraceConfig, dist: &WorkDistribution, dist_name: &str) -> Result<Self> {
        if cfg.seq_pct > 100 {
            bail!("seq_pct {} exceeds 100", cfg.seq_pct);
        }
        let mut arrivals_rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut work_rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x9e37_79b9_7f4a_7c15);
        let times = cfg
            .arrival
            .schedule(cfg.requests, &mut arrivals_rng)
            .map_err(anyhow::Error::msg)?;
        let entries = times
            .into_iter()
            .enumerate()
            .map(|(i, send_at)| {
                let work = dist.quantile(work_rng.gen::<f64>());
                let work = Duration::from_micros((work.as_micros() as u64).max(1));
                TraceEntry {
                    send_at,
                    request: Request {
                        id: i as u64,
                        spec: KernelSpec {
                            kernel: cfg.kernel,
                            work,
                            seq_pct: cfg.seq_pct,
                        },
                    },
                }
            })
            .collect();
        Ok(Trace {
            description: format!(
                "seed={} arrival={} distribution={} kernel={} seq_pct={} n={}",
                cfg.seed, cfg.arrival, dist_name, cfg.kernel, cfg.seq_pct, cfg.requests
            ),
            entries,
        })
    }

    /// Total CPU work of all requests.
    pub fn total_work(&self) -> Duration {
        self.entries.iter().map(|e| e.request.spec.work).sum()
    }

    /// The offered load in cores: total work divided by the send span.
    pub fn offered_load(&self) -> f64 {
        match self.entries.last() {
            Some(last) if !last.send_at.is_zero() => {
                self.total_work().as_secs_f64() / last.send_at.as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// The trace in its file format.
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(32 * self.entries.len() + 100);
        s.push_str("# tailctl-trace v1\n");
        let _ = writeln!(s, "# {}", self.description.replace('\n', " "));
        for e in &self.entries {
            let r = &e.request;
            let _ = writeln!(
                s,
                "{} {} {} {} {}",
                r.id,
                e.send_at.as_nanos(),
                r.spec.kernel,
                r.spec.work.as_micros(),
                r.spec.seq_pct
            );
        }
        s
    }

    /// Parses the file format; errors name the line. A trace without
    /// requests is an error: every reader (the load generator, the
    /// simulator) would otherwise report statistics of nothing.
    pub fn parse(text: &str) -> Result<Self> {
        let mut lines = tailctl_rt::distribution::strip_bom(text)
            .lines()
            .enumerate();
        match lines.next() {
            Some((_, "# tailctl-trace v1")) => {}
            _ => bail!("not a tailctl trace: the first line must be `# tailctl-trace v1`"),
        }
        let mut description = String::new();
        let mut entries = Vec::new();
        for (i, line) in lines {
            let line = line.trim();
            if let Some(c) = line.strip_prefix('#') {
                if description.is_empty() {
                    description = c.trim().to_string();
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            if f.len() != 5 {
                bail!("trace line {}: expected 5 fields, found {}", i + 1, f.len());
            }
            let req = Request::parse(&format!("REQ {} {} {} {}", f[0], f[2], f[3], f[4]))
                .with_context(|| format!("trace line {}", i + 1))?;
            let ns: u64 = f[1]
                .parse()
                .with_context(|| format!("trace line {}: bad send offset `{}`", i + 1, f[1]))?;
            let send_at = Duration::from_nanos(ns);
            if let Some(prev) = entries.last().map(|e: &TraceEntry| e.send_at) {
                if send_at < prev {
                    bail!("trace line {}: send times must not decrease", i + 1);
                }
            }
            if req.id != entries.len() as u64 {
                bail!("trace line {}: ids must be 0, 1, 2, … in order", i + 1);
            }
            entries.push(TraceEntry {
                send_at,
                request: req,
            });
        }
        if entries.is_empty() {
            bail!("trace has no requests");
        }
        Ok(Trace {
            description,
            entries,
        })
    }

    /// Writes the trace to a file, through a temporary file renamed over it
    /// ([`crate::output::PendingFile`]), so a failed write never leaves a
    /// truncated trace behind.
    pub fn save(&self, path: &Path) -> Result<()> {
        use std::io::Write as _;
        let mut f = crate::output::PendingFile::create(path)
            .with_context(|| format!("cannot write trace {}", path.display()))?;
        f.write_all(self.to_text().as_bytes())
            .with_context(|| format!("cannot write trace {}", path.display()))?;
        f.commit()
            .with_context(|| format!("cannot write trace {}", path.display()))
    }

    /// Reads a trace file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read trace {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in trace {}", path.display()))
    }
}
