//! Latency summaries: percentiles from an HDR histogram and exact miss ratios.
//!
//! Design: percentiles come from `hdrhistogram` (microsecond resolution, three
//! significant digits: constant memory whatever the run length, and the
//! standard tool for latency). Miss ratios are computed exactly from the
//! per-request latencies instead, because the experiment compares policies at
//! targets that are themselves percentiles and small differences matter there.
//! A request that never completed (lost, failed) counts as a miss at every target.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The miss ratio at one target.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// Target latency, in milliseconds.
    pub target_ms: f64,
    /// Fraction of requests whose latency exceeded the target.
    pub ratio: f64,
}

/// A latency summary of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Requests in the run.
    pub requests: usize,
    /// Requests that completed successfully.
    pub completed: usize,
    /// Requests the server reported as failed or rejected.
    pub errors: usize,
    /// Requests with no response before the run ended.
    pub lost: usize,
    /// Mean latency of completed requests (ms).
    pub mean_ms: f64,
    /// Median (ms).
    pub p50_ms: f64,
    /// 95th percentile (ms).
    pub p95_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// 99.9th percentile (ms).
    pub p999_ms: f64,
    /// Largest latency (ms).
    pub max_ms: f64,
    /// Miss ratio per target.
    pub misses: Vec<Miss>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Fraction of `latencies` above `target`; `None` entries (no successful
/// response) always count as misses.
///
/// ```
/// use std::time::Duration;
/// use tailctl_workloads::stats::miss_ratio;
///
/// let ms = Duration::from_millis;
/// let lat = [Some(ms(1)), Some(ms(5)), Some(ms(20)), None];
/// assert_eq!(miss_ratio(&lat, ms(10)), 0.5);
/// ```
pub fn miss_ratio(latencies: &[Option<Duration>], target: Duration) -> f64 {
    if latencies.is_empty() {
        return 0.0;
    }
    let missed = latencies
        .iter()
        .filter(|l| l.is_none_or(|l| l > target))
        .count();
    missed as f64 / latencies.len() as f64
}

/// The exact `q`-th percentile (`q` in 0–100, nearest rank) of the
/// latencies, counting requests without a response as infinitely late.
/// Returns `None` when that rank falls on a missing response.
///
/// ```
/// use std::time::Duration;
/// use tailctl_workloads::stats::percentile;
///
/// let lat: Vec<_> = (1..=100).map(|i| Some(Duration::from_millis(i))).collect();
/// assert_eq!(percentile(&lat, 99.0), Some(Duration::from_millis(99)));
/// ```
pub fn percentile(latencies: &[Option<Duration>], q: f64) -> Option<Duration> {
    if latencies.is_empty() {
        return None;
    }
    let mut v: Vec<Option<Duration>> = latencies.to_vec();
    // None sorts last: map it to "infinite".
    v.sort_by_key(|l| l.unwrap_or(Duration::MAX));
    let rank = ((q / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

impl Summary {
    /// Summarises per-request latencies (`None` = no successful response),
    /// with `errors` of the `None`s being error responses and the rest lost.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_workloads::stats::Summary;
    ///
    /// let lat: Vec<_> = (1..=1000).map(|i| Some(Duration::from_micros(i * 10))).collect();
    /// let s = Summary::from_latencies(&lat, 0, &[Duration::from_millis(5)]);
    /// assert_eq!(s.completed, 1000);
    /// assert!((s.p50_ms - 5.0).abs() < 0.01);
    /// assert_eq!(s.misses[0].ratio, 0.5);
    /// ```
    pub fn from_latencies(
        latencies: &[Option<Duration>],
        errors: usize,
        targets: &[Duration],
    ) -> Self {
        // 1 µs to 1 hour at 3 significant digits.
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        for l in latencies.iter().flatten() {
            h.saturating_record((l.as_micros() as u64).max(1));
        }
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1e3;
        let completed = h.len() as usize;
        let none = latencies.len() - completed;
        Summary {
            requests: latencies.len(),
            completed,
            errors,
            lost: none.saturating_sub(errors),
            mean_ms: if completed > 0 { h.mean() / 1e3 } else { 0.0 },
            p50_ms: q(0.5),
            p95_ms: q(0.95),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            max_ms: h.max() as f64 / 1e3,
            misses: targets
                .iter()
                .map(|&t| Miss {
                    target_ms: ms(t),
                    ratio: miss_ratio(latencies, t),
                })
                .collect(),
        }
    }

    /// A human-readable multi-line rendering.
    pub fn render(&self) -> String {
        let mut s = format!(
            "requests {}  completed {}  errors {}  lost {}\n\
             latency ms: mean {:.2}  p50 {:.2}  p95 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}\n",
            self.requests,
            self.completed,
            self.errors,
            self.lost,
            self.mean_ms,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms
        );
        for m in &self.misses {
            s.push_str(&format!(
                "miss ratio at {:.2} ms: {:.4} ({:.2}%)\n",
                m.target_ms,
                m.ratio,
                m.ratio * 100.0
            ));
        }
        s
    }
}
