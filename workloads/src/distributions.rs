//! The paper's work distributions, built on `tailctl_rt`'s [`WorkDistribution`].
//!
//! Design: one data type — the binned histogram `(p_i, w_i)` of
//! `tailctl_rt::distribution` — both generates request work here (through
//! [`WorkDistribution::quantile`], which interpolates inside a bin) and feeds
//! the runtime's threshold table, so the server's tail-control thresholds are
//! computed from exactly the distribution the load generator samples.
//!
//! The paper's Bing and finance histograms (its Figure 1) are not public; what
//! is public is their shape, and that is what these constructors reproduce:
//!
//! * **Bing-like** ([`bing`]): mean 10 ms, largest work 50× the smallest
//!   (> 40×), and exactly 3.5% of the requests between 55 and 200 ms.
//!   - A zero-probability bin at 4 ms sets the smallest work (quantile
//!     interpolation starts at the previous bin's maximum).
//!   - *Body*, 96.5% of requests: 0.5 ms bins over (4, 55] ms with
//!     probability ∝ `exp(−(w_mid − 4 ms)/τ)`, a steep decay like the figure's
//!     mass of small requests.
//!   - *Tail*, 3.5%: 5 ms bins over (55, 200] ms with probability ∝
//!     `exp(−(w_mid − 55 ms)/50 ms)`, small but non-zero up to 200 ms.
//!   - `τ` (≈ 2.7 ms) is found by bisection so that the *sampled* mean (bins
//!     interpolated as [`WorkDistribution::quantile`] does) is 10 ms.
//! * **Finance-like** ([`finance`]): work in (2, 26] ms, so the largest is 13×
//!   the smallest, in 0.5 ms bins with probability ∝ a log-normal density
//!   (σ = 0.5) whose location is found by bisection for a sampled mean of
//!   10 ms (the paper gives no mean; 10 ms keeps the loads comparable).
//! * **Log-normal** ([`lognormal`]): the runtime's binned log-normal, mean
//!   10 ms and sd 13 ms by default (1 ms bins to 200 ms).
//! * Any histogram file in the runtime's format ([`DistributionSpec::File`]),
//!   read by [`WorkDistribution::load`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tailctl_rt::distribution::{parse_duration, WorkDistribution};

fn ms(x: f64) -> Duration {
    Duration::from_secs_f64(x / 1e3)
}

/// The mean of the work actually sampled from `d` by uniform quantiles, which
/// interpolate linearly within each bin (so it is below [`WorkDistribution::mean`],
/// which counts every request at its bin's maximum, by about half a bin).
///
/// ```
/// use std::time::Duration;
/// use tailctl_rt::distribution::WorkDistribution;
/// use tailctl_workloads::distributions::sampled_mean;
///
/// let d = WorkDistribution::from_bins(vec![(0.5, Duration::from_millis(2)), (0.5, Duration::from_millis(4))]).unwrap();
/// assert_eq!(sampled_mean(&d), Duration::from_micros(2000)); // halves of (0,2] and (2,4]
/// ```
pub fn sampled_mean(d: &WorkDistribution) -> Duration {
    let mut prev = 0.0;
    let mut mean = 0.0;
    for b in d.bins() {
        let w = b.w.as_secs_f64();
        mean += b.p * (prev + w) / 2.0;
        prev = w;
    }
    Duration::from_secs_f64(mean)
}

/// Bins with upper edges `lo+width, lo+2·width, …, hi` and weights from `f(mid)`
/// (mid-points in ms), normalised to total `mass`.
fn bins_by_weight(
    lo: f64,
    hi: f64,
    width: f64,
    mass: f64,
    f: impl Fn(f64) -> f64,
) -> Vec<(f64, f64)> {
    let n = ((hi - lo) / width).round() as usize;
    let raw: Vec<(f64, f64)> = (1..=n)
        .map(|i| {
            let upper = lo + width * i as f64;
            (f(upper - width / 2.0), upper)
        })
        .collect();
    let total: f64 = raw.iter().map(|(p, _)| p).sum();
    raw.into_iter()
        .map(|(p, w)| (mass * p / total, w))
        .collect()
}

/// Sampled mean (ms) of bins given as (p, upper edge in ms) after a first edge `lo`.
fn mean_ms(lo: f64, bins: &[(f64, f64)]) -> f64 {
    let mut prev = lo;
    let mut m = 0.0;
    for &(p, w) in bins {
        m += p * (prev + w) / 2.0;
        prev = w;
    }
    m
}

/// Bisection for an increasing function `g` on `[lo, hi]` to reach `target`.
fn bisect(mut lo: f64, mut hi: f64, target: f64, g: impl Fn(f64) -> f64) -> f64 {
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if g(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

fn to_distribution(first_edge_ms: f64, bins: Vec<(f64, f64)>) -> WorkDistribution {
    let mut all = vec![(0.0, ms(first_edge_ms))];
    all.extend(bins.into_iter().map(|(p, w)| (p, ms(w))));
    WorkDistribution::from_bins(all).expect("constructed bins are valid")
}

/// The Bing-like distribution (see the module documentation for how it is built).
///
/// ```
/// use tailctl_workloads::distributions::{bing, sampled_mean};
///
/// let d = bing();
/// let mean = sampled_mean(&d).as_secs_f64() * 1e3;
/// assert!((mean - 10.0).abs() < 0.01, "{mean}");
/// ```
pub fn bing() -> WorkDistribution {
    const MIN: f64 = 4.0;
    const SPLIT: f64 = 55.0;
    const MAX: f64 = 200.0;
    const TAIL: f64 = 0.035;
    let tail = bins_by_weight(SPLIT, MAX, 5.0, TAIL, |w| (-(w - SPLIT) / 50.0).exp());
    let body = |tau: f64| bins_by_weight(MIN, SPLIT, 0.5, 1.0 - TAIL, |w| (-(w - MIN) / tau).exp());
    let all = |tau: f64| {
        let mut b = body(tau);
        b.extend(tail.iter().copied());
        b
    };
    let tau = bisect(0.1, 100.0, 10.0, |tau| mean_ms(MIN, &all(tau)));
    to_distribution(MIN, all(tau))
}

/// The finance-like distribution (see the module documentation).
///
/// ```
/// use tailctl_workloads::distributions::finance;
///
/// let d = finance();
/// let max = d.bins().last().unwrap().w.as_secs_f64();
/// let min = d.bins()[0].w.as_secs_f64();
/// assert!((max / min - 13.0).abs() < 1e-9);
/// ```
pub fn finance() -> WorkDistribution {
    const MIN: f64 = 2.0;
    const MAX: f64 = 26.0;
    const SIGMA: f64 = 0.5;
    let bins = |mu: f64| {
        bins_by_weight(MIN, MAX, 0.5, 1.0, |w| {
            let z = (w.ln() - mu) / SIGMA;
            (-z * z / 2.0).exp() / w
        })
    };
    let mu = bisect(0.0, 4.0, 10.0, |mu| mean_ms(MIN, &bins(mu)));
    to_distribution(MIN, bins(mu))
}

/// The runtime's binned log-normal with this mean and standard deviation.
pub fn lognormal(mean: Duration, sd: Duration) -> Result<WorkDistribution, String> {
    WorkDistribution::lognormal(mean, sd).map_err(|e| e.to_string())
}

/// A named distribution, as given on a command line.
#[derive(Clone, Debug, PartialEq)]
pub enum DistributionSpec {
    /// [`bing`].
    Bing,
    /// [`finance`].
    Finance,
    /// [`lognormal`] with this mean and sd.
    LogNormal {
        /// Mean work.
        mean: Duration,
        /// Standard deviation of the work.
        sd: Duration,
    },
    /// A histogram file in the runtime's format.
    File(PathBuf),
}

impl DistributionSpec {
    /// Builds (or loads) the distribution.
    pub fn build(&self) -> Result<WorkDistribution, String> {
        match self {
            DistributionSpec::Bing => Ok(bing()),
            DistributionSpec::Finance => Ok(finance()),
            DistributionSpec::LogNormal { mean, sd } => lognormal(*mean, *sd),
            DistributionSpec::File(p) => WorkDistribution::load(p).map_err(|e| e.to_string()),
        }
    }
}

impl fmt::Display for DistributionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use tailctl_rt::distribution::format_duration as fd;
        match self {
            DistributionSpec::Bing => f.write_str("bing"),
            DistributionSpec::Finance => f.write_str("finance"),
            DistributionSpec::LogNormal { mean, sd } => {
                write!(f, "lognormal:{}:{}", fd(*mean), fd(*sd))
            }
            DistributionSpec::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

impl FromStr for DistributionSpec {
    type Err = String;

    /// Parses `bing`, `finance`, `lognormal` (10 ms / 13 ms),
    /// `lognormal:MEAN:SD` (e.g. `lognormal:10ms:13ms`) or `file:PATH`.
    ///
    /// ```
    /// use tailctl_workloads::distributions::DistributionSpec;
    ///
    /// let s: DistributionSpec = "lognormal".parse().unwrap();
    /// assert_eq!(s.to_string(), "lognormal:10ms:13ms");
    /// assert!("zipf".parse::<DistributionSpec>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("file:") {
            return Ok(DistributionSpec::File(PathBuf::from(path)));
        }
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            ["bing"] => Ok(DistributionSpec::Bing),
            ["finance"] => Ok(DistributionSpec::Finance),
            ["lognormal"] => Ok(DistributionSpec::LogNormal {
                mean: Duration::from_millis(10),
                sd: Duration::from_millis(13),
            }),
            ["lognormal", m, sd] => Ok(DistributionSpec::LogNormal {
                mean: parse_duration(m)?,
                sd: parse_duration(sd)?,
            }),
            _ => Err(format!(
                "unknown distribution `{s}` (expected bing, finance, lognormal, lognormal:MEAN:SD or file:PATH)"
            )),
        }
    }
}
