//! Work distributions as data.
//!
//! Design: the threshold calculation of tail-control (Li et al., PPoPP'16, §4.1)
//! consumes a work distribution as non-overlapping bins `(p_i, w_i)`, where
//! `w_i` is the *maximum* work of a request in bin `i` and `Σ p_i = 1`. This
//! module is that representation and nothing more: a validated, sorted list of
//! bins, plus the constructors the tools and the daemon need (explicit bins, a
//! binned log-normal, a small text/CSV file format) and the two statistics the
//! simulator needs (`mean`, and `quantile` to sample without an rng dependency).
//!
//! It deliberately has no dependencies: the daemon and the runtime link it.
//! The log-normal CDF uses a Chebyshev `erfc` approximation (fractional error
//! < 1.2e-7), plenty for bin probabilities.
//!
//! File format (`WorkDistribution::parse`): one bin per line, `WORK,PROB`
//! (comma, semicolon, tab or spaces separate the fields); `WORK` is a duration
//! with a unit (`ns`, `us`, `ms`, `s`), `PROB` a probability. `#` starts a
//! comment. An optional header line `work,probability` (or `work,count` /
//! `work,weight`, whose column is normalised instead of required to sum to 1)
//! may come first.
//!
//! ```text
//! # work, probability
//! 5ms, 0.5
//! 10ms, 0.3
//! 50ms, 0.2
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How far `Σ p_i` may stray from 1 before it is an error (files are often
/// written with rounded probabilities).
pub const PROBABILITY_TOLERANCE: f64 = 1e-3;

/// One histogram bin: a request falls here with probability `p`, and its work is
/// at most `w` (and more than the previous bin's `w`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    /// Probability of a request falling in this bin.
    pub p: f64,
    /// Maximum work of a request in this bin.
    pub w: Duration,
}

/// A work distribution as a binned histogram, sorted by `w`, with `Σ p = 1`.
///
/// ```
/// use std::time::Duration;
/// use tailctl_rt::distribution::WorkDistribution;
///
/// let ms = Duration::from_millis;
/// let d = WorkDistribution::from_bins(vec![(0.75, ms(2)), (0.25, ms(10))]).unwrap();
/// assert_eq!(d.mean(), Duration::from_micros(4000));
/// // u = 0.875 is half-way through the second bin, interpolated in (2, 10] ms:
/// assert!((d.quantile(0.875).as_secs_f64() - 0.006).abs() < 1e-9);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct WorkDistribution {
    bins: Vec<Bin>,
    /// `cdf[i] = Σ_{j≤i} p_j`, with the last entry exactly 1.
    cdf: Vec<f64>,
}

/// Why a distribution is invalid.
#[derive(Clone, Debug, PartialEq)]
pub enum DistributionError {
    /// No bins at all.
    Empty,
    /// A probability is negative, NaN or infinite (`index` is 0-based).
    InvalidProbability {
        /// Bin index.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// The probabilities do not sum to 1 (within [`PROBABILITY_TOLERANCE`]).
    SumNotOne {
        /// The actual sum.
        sum: f64,
    },
    /// A bin's maximum work is zero.
    ZeroWork {
        /// Bin index.
        index: usize,
    },
    /// Bin maxima must strictly increase; bin `index` does not exceed the previous one.
    NotIncreasing {
        /// Bin index.
        index: usize,
    },
    /// A parameter of a named distribution is out of range.
    InvalidParameter {
        /// Which parameter and why.
        what: String,
    },
}

impl fmt::Display for DistributionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "work distribution has no bins"),
            Self::InvalidProbability { index, value } => write!(
                f,
                "bin {}: probability {value} is not a finite number ≥ 0",
                index + 1
            ),
            Self::SumNotOne { sum } if !sum.is_finite() => write!(
                f,
                "bin weights sum to infinity; scale them down"
            ),
            Self::SumNotOne { sum } => write!(
                f,
                "bin probabilities sum to {sum}, not 1 (tolerance {PROBABILITY_TOLERANCE})"
            ),
            Self::ZeroWork { index } => write!(f, "bin {}: maximum work is zero", index + 1),
            Self::NotIncreasing { index } => write!(
                f,
                "bin {}: maximum work does not exceed the previous bin's (bins must be sorted by work, no duplicates)",
                index + 1
            ),
            Self::InvalidParameter { what } => write!(f, "invalid parameter: {what}"),
        }
    }
}

impl std::error::Error for DistributionError {}

/// A malformed line in a text file (distribution or threshold table).
#[derive(Clone, Debug, PartialEq)]
pub struct ParseError {
    /// 1-based line number; 0 when the problem concerns the whole file.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

/// Failure to load a file: it could not be read, or its content is malformed.
#[derive(Debug)]
pub enum LoadError {
    /// Reading the file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file's content is malformed.
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and what.
        error: ParseError,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::Parse { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Parse { error, .. } => Some(error),
        }
    }
}

/// Reads `path` and parses it with `parse`, attaching the path to errors.
pub(crate) fn load_with<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|error| LoadError::Parse {
        path: path.to_owned(),
        error,
    })
}

/// `text` without a leading UTF-8 byte-order mark: some editors write one, and
/// a parser would read it as part of the first field. Every parser of a file
/// format here calls it first.
///
/// ```
/// use tailctl_rt::distribution::strip_bom;
/// assert_eq!(strip_bom("\u{feff}5ms,1"), "5ms,1");
/// assert_eq!(strip_bom("5ms,1"), "5ms,1");
/// ```
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Parses a duration with a unit: `250us`, `20.6ms`, `1.5s`, `800ns`.
///
/// A unit is required: a bare number is ambiguous between the units people use.
///
/// ```
/// use std::time::Duration;
/// use tailctl_rt::distribution::parse_duration;
///
/// assert_eq!(parse_duration("20.6ms").unwrap(), Duration::from_micros(20_600));
/// assert!(parse_duration("20").unwrap_err().contains("unit"));
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| c.is_ascii_alphabetic() || c == 'µ')
        .ok_or_else(|| format!("`{s}` has no unit (use ns, us, ms or s)"))?;
    let (num, unit) = s.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (use ns, us, ms or s)"
            ))
        }
    };
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: `{}` is not a number", num.trim()))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("`{s}`: duration must be finite and ≥ 0"));
    }
    Ok(Duration::from_nanos((value * scale * 1e9).round() as u64))
}

/// Formats a duration in the largest unit that represents it exactly (`20600us`
/// becomes `20.6ms`), so that [`parse_duration`] reads it back unchanged.
///
/// ```
/// use std::time::Duration;
/// use tailctl_rt::distribution::{format_duration, parse_duration};
///
/// let d = Duration::from_micros(20_600);
/// assert_eq!(format_duration(d), "20.6ms");
/// assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
/// ```
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    // Pick the unit giving at most 3 decimals exactly; fall back to ns.
    for (unit, per) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= per && ns.is_multiple_of(per / 1000) {
            let whole = ns / per;
            let frac = (ns % per) / (per / 1000);
            return if frac == 0 {
                format!("{whole}{unit}")
            } else {
                let f = format!("{frac:03}");
                format!("{whole}.{}{unit}", f.trim_end_matches('0'))
            };
        }
    }
    format!("{ns}ns")
}

impl WorkDistribution {
    /// A distribution from `(p_i, w_i)` bins, sorted by strictly increasing `w_i`.
    ///
    /// Probabilities must be finite, ≥ 0 and sum to 1 within
    /// [`PROBABILITY_TOLERANCE`]; they are then renormalised to sum exactly to 1.
    pub fn from_bins(bins: Vec<(f64, Duration)>) -> Result<Self, DistributionError> {
        Self::build(bins, false)
    }

    /// Like [`from_bins`](Self::from_bins), but the first element is a
    /// non-negative weight (e.g. a count) normalised to a probability.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_rt::distribution::WorkDistribution;
    ///
    /// let d = WorkDistribution::from_weights(vec![(30.0, Duration::from_millis(1)), (10.0, Duration::from_millis(9))]).unwrap();
    /// assert_eq!(d.bins()[0].p, 0.75);
    /// assert_eq!(d.mean(), Duration::from_millis(3));
    /// ```
    pub fn from_weights(bins: Vec<(f64, Duration)>) -> Result<Self, DistributionError> {
        Self::build(bins, true)
    }

    fn build(bins: Vec<(f64, Duration)>, normalise: bool) -> Result<Self, DistributionError> {
        if bins.is_empty() {
            return Err(DistributionError::Empty);
        }
        let mut sum = 0.0;
        for (index, &(p, w)) in bins.iter().enumerate() {
            if !p.is_finite() || p < 0.0 {
                return Err(DistributionError::InvalidProbability { index, value: p });
            }
            if w.is_zero() {
                return Err(DistributionError::ZeroWork { index });
            }
            if index > 0 && w <= bins[index - 1].1 {
                return Err(DistributionError::NotIncreasing { index });
            }
            sum += p;
        }
        // Finite: weights that overflow the sum would normalise to all zeros.
        let ok = if normalise {
            sum > 0.0 && sum.is_finite()
        } else {
            (sum - 1.0).abs() <= PROBABILITY_TOLERANCE
        };
        if !ok {
            return Err(DistributionError::SumNotOne { sum });
        }
        let bins: Vec<Bin> = bins
            .into_iter()
            .map(|(p, w)| Bin { p: p / sum, w })
            .collect();
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = bins
            .iter()
            .map(|b| {
                acc += b.p;
                acc
            })
            .collect();
        *cdf.last_mut().expect("non-empty") = 1.0;
        Ok(Self { bins, cdf })
    }

    /// A log-normal distribution with the given mean and standard deviation,
    /// binned with the default grid: bins of `mean/10` up to a cap of `20·mean`
    /// (for mean 10 ms: 1 ms bins up to 200 ms, the digest's example).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_rt::distribution::WorkDistribution;
    ///
    /// let ms = Duration::from_millis;
    /// let d = WorkDistribution::lognormal(ms(10), ms(13)).unwrap();
    /// assert_eq!(d.bins().len(), 200);
    /// // Binning rounds work up to the bin maximum, so the mean grows by ~half a bin.
    /// let mean = d.mean().as_secs_f64() * 1e3;
    /// assert!((10.0..10.6).contains(&mean), "{mean}");
    /// ```
    pub fn lognormal(mean: Duration, sd: Duration) -> Result<Self, DistributionError> {
        Self::lognormal_binned(mean, sd, mean / 10, mean * 20)
    }

    /// A log-normal distribution binned with bins of width `bin` up to `cap`;
    /// the probability mass above `cap` goes into the last bin (so its work is
    /// under-estimated, which the threshold calculation tolerates: it only makes
    /// serializing look slightly less attractive).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_rt::distribution::WorkDistribution;
    ///
    /// let ms = Duration::from_millis;
    /// let d = WorkDistribution::lognormal_binned(ms(10), ms(13), ms(5), ms(100)).unwrap();
    /// assert_eq!(d.bins().len(), 20);
    /// assert_eq!(d.bins().last().unwrap().w, ms(100));
    /// let total: f64 = d.bins().iter().map(|b| b.p).sum();
    /// assert!((total - 1.0).abs() < 1e-12);
    /// ```
    pub fn lognormal_binned(
        mean: Duration,
        sd: Duration,
        bin: Duration,
        cap: Duration,
    ) -> Result<Self, DistributionError> {
        let bad = |what: &str| {
            Err(DistributionError::InvalidParameter {
                what: what.to_string(),
            })
        };
        if mean.is_zero() {
            return bad("log-normal mean must be > 0");
        }
        if sd.is_zero() {
            return bad("log-normal sd must be > 0");
        }
        if bin.is_zero() {
            return bad("bin width must be > 0");
        }
        if cap < bin {
            return bad("cap must be at least one bin width");
        }
        let n = (cap.as_nanos() / bin.as_nanos()) as usize;
        if n > 1_000_000 {
            return bad("more than 10^6 bins; use wider bins or a lower cap");
        }
        let (mu, sigma) = lognormal_params(mean.as_secs_f64(), sd.as_secs_f64());
        let mut prev = 0.0;
        let mut bins = Vec::with_capacity(n);
        for i in 1..=n {
            let w = bin * i as u32;
            let c = if i == n {
                1.0
            } else {
                lognormal_cdf(w.as_secs_f64(), mu, sigma)
            };
            bins.push(((c - prev).max(0.0), w));
            prev = c;
        }
        Self::from_bins(bins)
    }

    /// Parses the text/CSV format described in the module documentation.
    ///
    /// ```
    /// use tailctl_rt::distribution::WorkDistribution;
    ///
    /// let d = WorkDistribution::parse("work,probability\n5ms,0.5\n10ms,0.5\n").unwrap();
    /// assert_eq!(d.bins().len(), 2);
    /// let err = WorkDistribution::parse("5ms,0.5\n10ms,zero\n").unwrap_err();
    /// assert_eq!(err.line, 2);
    /// ```
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let text = strip_bom(text);
        let mut bins = Vec::new();
        let mut lines = Vec::new(); // line number of each bin, to attribute errors
        let mut weights = false;
        let mut seen_data = false;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: String| ParseError {
                line: line_no,
                message,
            };
            let fields: Vec<&str> = line
                .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
                .filter(|f| !f.is_empty())
                .collect();
            if !seen_data
                && fields
                    .first()
                    .is_some_and(|f| f.eq_ignore_ascii_case("work"))
            {
                if fields.len() != 2 {
                    return Err(err(format!(
                        "header must be `work,probability` or `work,count`, found `{line}`"
                    )));
                }
                weights = match fields[1].to_ascii_lowercase().as_str() {
                    "probability" | "prob" | "p" => false,
                    "count" | "weight" => true,
                    other => {
                        return Err(err(format!(
                            "unknown second column `{other}` (use probability or count)"
                        )))
                    }
                };
                seen_data = true;
                continue;
            }
            seen_data = true;
            if fields.len() != 2 {
                return Err(err(format!(
                    "expected two fields `WORK,PROBABILITY`, found {} in `{line}`",
                    fields.len()
                )));
            }
            let w = parse_duration(fields[0]).map_err(|e| err(format!("work: {e}")))?;
            let p: f64 = fields[1]
                .parse()
                .map_err(|_| err(format!("probability `{}` is not a number", fields[1])))?;
            bins.push((p, w));
            lines.push(line_no);
        }
        let built = if weights {
            Self::from_weights(bins)
        } else {
            Self::from_bins(bins)
        };
        built.map_err(|e| {
            let line = match &e {
                DistributionError::InvalidProbability { index, .. }
                | DistributionError::ZeroWork { index }
                | DistributionError::NotIncreasing { index } => lines[*index],
                _ => 0,
            };
            let message = match &e {
                DistributionError::Empty => "no bins in file".to_string(),
                DistributionError::InvalidProbability { value, .. } => {
                    format!("probability {value} is not a finite number ≥ 0")
                }
                DistributionError::ZeroWork { .. } => "maximum work is zero".to_string(),
                DistributionError::NotIncreasing { .. } => {
                    "work does not exceed the previous line's (bins must be sorted by work, no duplicates)"
                        .to_string()
                }
                other => other.to_string(),
            };
            ParseError { line, message }
        })
    }

    /// Reads and parses a distribution file (see [`parse`](Self::parse)).
    ///
    /// ```
    /// use tailctl_rt::distribution::{LoadError, WorkDistribution};
    ///
    /// let path = std::env::temp_dir().join(format!("dist-doc-{}.csv", std::process::id()));
    /// std::fs::write(&path, "work,probability\n2ms,0.5\n4ms,0.5\n").unwrap();
    /// assert_eq!(WorkDistribution::load(&path).unwrap().bins().len(), 2);
    /// std::fs::write(&path, "2ms,0.5\n4ms\n").unwrap();
    /// let err = WorkDistribution::load(&path).unwrap_err();
    /// assert!(matches!(err, LoadError::Parse { ref error, .. } if error.line == 2));
    /// assert!(err.to_string().contains("line 2"));
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        load_with(path.as_ref(), Self::parse)
    }

    /// The bins, sorted by increasing `w`, probabilities summing to 1.
    pub fn bins(&self) -> &[Bin] {
        &self.bins
    }

    /// Expected work `Σ p_i w_i` (each request counted at its bin's maximum, as
    /// the threshold calculation does).
    pub fn mean(&self) -> Duration {
        Duration::from_secs_f64(self.mean_secs())
    }

    /// [`mean`](Self::mean) in seconds.
    pub fn mean_secs(&self) -> f64 {
        self.bins.iter().map(|b| b.p * b.w.as_secs_f64()).sum()
    }

    /// The work at uniform quantile `u ∈ [0, 1)`: the bin is chosen by the
    /// cumulative probabilities, and the work is interpolated linearly between
    /// the previous bin's maximum (0 for the first bin) and this bin's maximum.
    /// Feeding uniform random `u` samples the histogram without an rng here.
    /// `u` outside `[0, 1]` is clamped.
    pub fn quantile(&self, u: f64) -> Duration {
        let u = if u.is_nan() { 0.0 } else { u.clamp(0.0, 1.0) };
        let i = self.bin_index(u);
        let lo_c = if i == 0 { 0.0 } else { self.cdf[i - 1] };
        let lo_w = if i == 0 {
            0.0
        } else {
            self.bins[i - 1].w.as_secs_f64()
        };
        let hi_w = self.bins[i].w.as_secs_f64();
        let p = self.bins[i].p;
        let frac = if p > 0.0 {
            ((u - lo_c) / p).clamp(0.0, 1.0)
        } else {
            1.0
        };
        Duration::from_secs_f64(lo_w + frac * (hi_w - lo_w))
    }

    /// The index of the bin at uniform quantile `u` (the first bin whose
    /// cumulative probability exceeds `u`; the last bin for `u ≥ 1`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_rt::distribution::WorkDistribution;
    ///
    /// let ms = Duration::from_millis;
    /// let d = WorkDistribution::from_bins(vec![(0.25, ms(1)), (0.75, ms(2))]).unwrap();
    /// assert_eq!((d.bin_index(0.0), d.bin_index(0.25), d.bin_index(1.0)), (0, 1, 1));
    /// ```
    pub fn bin_index(&self, u: f64) -> usize {
        let i = self.cdf.partition_point(|&c| c <= u);
        i.min(self.bins.len() - 1)
    }
}

/// The `(μ, σ)` of the underlying normal of a log-normal with this mean and sd
/// (in any unit; `μ` is in log-units of the same).
///
/// ```
/// use tailctl_rt::distribution::lognormal_params;
///
/// let (mu, sigma) = lognormal_params(10.0, 13.0);
/// // Back to the moments: mean = exp(μ + σ²/2).
/// assert!(((mu + sigma * sigma / 2.0).exp() - 10.0).abs() < 1e-9);
/// ```
pub fn lognormal_params(mean: f64, sd: f64) -> (f64, f64) {
    let s2 = (1.0 + (sd * sd) / (mean * mean)).ln();
    (mean.ln() - s2 / 2.0, s2.sqrt())
}

/// CDF of a log-normal with log-parameters `(mu, sigma)` at `x`.
fn lognormal_cdf(x: f64, mu: f64, sigma: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    0.5 * erfc(-(x.ln() - mu) / (sigma * std::f64::consts::SQRT_2))
}

/// Complementary error function, Chebyshev fit (Numerical Recipes `erfcc`),
/// fractional error below 1.2e-7 everywhere.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn bins_validated() {
        assert_eq!(
            WorkDistribution::from_bins(vec![]),
            Err(DistributionError::Empty)
        );
        assert_eq!(
            WorkDistribution::from_bins(vec![(0.5, ms(1)), (0.6, ms(2))]),
            Err(DistributionError::SumNotOne { sum: 1.1 })
        );
        assert!(matches!(
            WorkDistribution::from_bins(vec![(-0.5, ms(1)), (1.5, ms(2))]),
            Err(DistributionError::InvalidProbability { index: 0, .. })
        ));
        assert_eq!(
            WorkDistribution::from_bins(vec![(0.5, ms(2)), (0.5, ms(2))]),
            Err(DistributionError::NotIncreasing { index: 1 })
        );
        assert_eq!(
            WorkDistribution::from_bins(vec![(1.0, Duration::ZERO)]),
            Err(DistributionError::ZeroWork { index: 0 })
        );
        let d = WorkDistribution::from_weights(vec![(3.0, ms(1)), (1.0, ms(5))]).unwrap();
        assert_eq!(d.bins()[0].p, 0.75);
    }

    #[test]
    fn mean_and_quantile() {
        let d = WorkDistribution::from_bins(vec![(0.5, ms(2)), (0.5, ms(4))]).unwrap();
        assert_eq!(d.mean(), ms(3));
        assert_eq!(d.quantile(0.0), Duration::ZERO);
        assert_eq!(d.quantile(0.25), ms(1));
        assert_eq!(d.quantile(0.5), ms(2));
        assert_eq!(d.quantile(0.75), ms(3));
        assert_eq!(d.quantile(1.0), ms(4));
        assert_eq!(d.quantile(7.0), ms(4));
        // Sampling mean over a fine uniform grid: the interpolated histogram's mean.
        let n = 100_000;
        let s: f64 = (0..n)
            .map(|i| d.quantile((i as f64 + 0.5) / n as f64).as_secs_f64())
            .sum::<f64>()
            / n as f64;
        // Uniform within (0, 2] and (2, 4] ms: mean 2 ms (the bin-max mean is 3 ms).
        assert!((s - 0.002).abs() < 1e-6, "{s}");
    }

    #[test]
    fn zero_probability_bins_are_skipped_by_quantile() {
        let d =
            WorkDistribution::from_bins(vec![(0.5, ms(1)), (0.0, ms(2)), (0.5, ms(3))]).unwrap();
        assert_eq!(d.bin_index(0.49), 0);
        assert_eq!(d.bin_index(0.5), 2);
        assert_eq!(d.quantile(0.75), ms(2) + Duration::from_micros(500));
    }

    #[test]
    fn lognormal_matches_moments() {
        let d =
            WorkDistribution::lognormal_binned(ms(10), ms(13), Duration::from_micros(10), ms(2000))
                .unwrap();
        // Fine bins: mean ≈ 10 ms + half a bin.
        let m = d.mean_secs();
        assert!((m - 0.010005).abs() < 5e-5, "{m}");
        let var: f64 = d
            .bins()
            .iter()
            .map(|b| b.p * (b.w.as_secs_f64() - m).powi(2))
            .sum();
        assert!((var.sqrt() - 0.013).abs() < 2e-4, "{}", var.sqrt());
        // Median of a log-normal is exp(mu).
        let (mu, _) = lognormal_params(0.010, 0.013);
        let med = d.quantile(0.5).as_secs_f64();
        assert!((med - mu.exp()).abs() < 2e-5, "{med} vs {}", mu.exp());
        assert!(WorkDistribution::lognormal(Duration::ZERO, ms(1)).is_err());
    }

    #[test]
    fn erfc_known_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-7);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-7);
        assert!((erfc(-1.0) - 1.842_700_793).abs() < 1e-7);
    }

    #[test]
    fn weights_that_overflow_their_sum_are_refused() {
        let e = WorkDistribution::from_weights(vec![(1e308, ms(5)), (1e308, ms(10))]);
        assert!(
            matches!(e, Err(DistributionError::SumNotOne { .. })),
            "{e:?}"
        );
        let e = WorkDistribution::parse("work,count\n5ms,1e308\n10ms,1e308\n").unwrap_err();
        assert!(e.message.contains("sum to infinity"), "{e}");
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let d = WorkDistribution::parse("\u{feff}work,count\n5ms,3\n10ms,1\n").unwrap();
        assert_eq!(d.bins()[0].p, 0.75);
        let t = crate::threshold::ThresholdTable::parse("\u{feff}1 none\n2 10ms\n").unwrap();
        assert_eq!(t.thresholds().len(), 2);
    }

    #[test]
    fn parse_errors_name_the_line() {
        let e = WorkDistribution::parse("# c\n5ms,0.5\n\n4ms,0.5\n").unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("previous"), "{e}");
        let e = WorkDistribution::parse("5,0.5\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("unit"), "{e}");
        let e = WorkDistribution::parse("5ms 0.5 1\n").unwrap_err();
        assert!(e.message.contains("two fields"), "{e}");
        let e = WorkDistribution::parse("5ms,0.5\n6ms,0.4\n").unwrap_err();
        assert_eq!(e.line, 0);
        assert!(e.message.contains("sum to"), "{e}");
        let e = WorkDistribution::parse("# nothing\n").unwrap_err();
        assert!(e.message.contains("no bins"), "{e}");
        let e = WorkDistribution::parse("work,foo\n").unwrap_err();
        assert!(e.message.contains("foo"), "{e}");
        let d = WorkDistribution::parse("work count\n1ms 30\n2ms 10 # tail\n").unwrap();
        assert_eq!(d.bins()[1].p, 0.25);
    }

    #[test]
    fn durations_round_trip() {
        for d in [
            Duration::from_nanos(1),
            Duration::from_nanos(1500),
            Duration::from_micros(20_600),
            Duration::from_millis(31),
            Duration::from_secs(2),
            Duration::from_nanos(1_000_000_001),
        ] {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{d:?}");
        }
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("-3ms").is_err());
        assert!(parse_duration("xms").is_err());
    }
}
