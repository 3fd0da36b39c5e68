//! Workload inputs of the simulator: work and arrival specifications, and the
//! request trace they generate (or that is read from a `tailctl-trace` file
//! through `tailctl_workloads::trace`, the one parser of that format).
//!
//! Design: a trace is fixed before any policy runs, so every policy sees the
//! same requests (common random numbers: differences between policies are not
//! sampling noise). Arrival gaps and work come from separate RNG streams, and
//! arrival gaps are drawn for unit rate and then scaled by `1/rps`, so a
//! capacity search that varies `rps` keeps the same work and the same
//! *relative* arrival pattern at every point.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tailctl_rt::distribution::{lognormal_params, WorkDistribution};
use tailctl_workloads::distributions::DistributionSpec;

use super::rng::Rng;

/// Where request work comes from.
#[derive(Clone, Debug)]
pub enum WorkSpec {
    /// Continuous log-normal with this mean and sd (seconds). Tables use the
    /// runtime's binned version (bins of mean/10 up to 20×mean).
    LogNormal {
        /// Mean, seconds.
        mean: f64,
        /// Standard deviation, seconds.
        sd: f64,
    },
    /// A named histogram from `tailctl-workloads` (`bing`, `finance`): the
    /// very bins the load generator samples and the server's tables use.
    Named {
        /// `bing` or `finance`.
        name: &'static str,
        /// The histogram.
        dist: WorkDistribution,
    },
    /// A histogram file in the runtime's format; sampled by quantile
    /// (interpolated within bins).
    Histogram {
        /// The file.
        path: PathBuf,
        /// Its content.
        dist: WorkDistribution,
    },
}

impl FromStr for WorkSpec {
    type Err = anyhow::Error;

    /// The workloads' spelling (`bing`, `finance`, `lognormal:MEAN:SD` as in
    /// `lognormal:10ms:13ms`, `file:PATH`: [`DistributionSpec`], the one parser the load
    /// generator and the servers use), the simulator's older `lognormal:MEAN_MS,SD_MS`, or a
    /// bare histogram file path. Files are read by the runtime's loader (a BOM is skipped,
    /// weights summing to infinity are an error).
    fn from_str(s: &str) -> Result<Self> {
        if let Some(rest) = s.strip_prefix("lognormal:").filter(|r| r.contains(',')) {
            let parts: Vec<&str> = rest.split(',').collect();
            if parts.len() != 2 {
                bail!("`{s}`: expected lognormal:MEAN_MS,SD_MS, e.g. lognormal:10,13");
            }
            let num = |x: &str, what: &str| -> Result<f64> {
                let v: f64 = x
                    .trim()
                    .parse()
                    .with_context(|| format!("`{s}`: {what} `{x}` is not a number"))?;
                if !(v.is_finite() && v > 0.0) {
                    bail!("`{s}`: {what} must be > 0, got {v}");
                }
                Ok(v / 1e3)
            };
            return Self::continuous(num(parts[0], "mean")?, num(parts[1], "sd")?);
        }
        let path = match s.parse::<DistributionSpec>() {
            Ok(DistributionSpec::Bing) => return Ok(Self::named("bing")),
            Ok(DistributionSpec::Finance) => return Ok(Self::named("finance")),
            Ok(DistributionSpec::LogNormal { mean, sd }) => {
                return Self::continuous(mean.as_secs_f64(), sd.as_secs_f64())
            }
            Ok(DistributionSpec::File(p)) => p,
            // `lognormal:...` is a log-normal however malformed: its own error.
            Err(e) if s.starts_with("lognormal:") => {
                bail!("`{s}`: {e}; the simulator also takes lognormal:MEAN_MS,SD_MS (e.g. lognormal:10,13)")
            }
            Err(_) => PathBuf::from(s),
        };
        if !path.exists() {
            // `file:PATH`, or anything spelled like a path, can only mean a file.
            if s.starts_with("file:") || s.contains(['/', '.']) {
                bail!("`{}`: no such file", path.display());
            }
            bail!(
                "`{s}`: not a distribution; use bing, finance, lognormal:MEAN:SD (e.g. lognormal:10ms:13ms), lognormal:MEAN_MS,SD_MS or the path of a histogram file (WORK,PROBABILITY per line)"
            );
        }
        let dist = WorkDistribution::load(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Self::Histogram { path, dist })
    }
}

impl WorkSpec {
    /// A named histogram of the workloads crate.
    fn named(name: &'static str) -> Self {
        let dist = match name {
            "bing" => tailctl_workloads::distributions::bing(),
            _ => tailctl_workloads::distributions::finance(),
        };
        Self::Named { name, dist }
    }

    /// The continuous log-normal, mean and sd in seconds (both must be positive).
    fn continuous(mean: f64, sd: f64) -> Result<Self> {
        for (what, v) in [("mean", mean), ("sd", sd)] {
            if !(v.is_finite() && v > 0.0) {
                bail!("log-normal {what} must be > 0, got {v} s");
            }
        }
        Ok(Self::LogNormal { mean, sd })
    }

    /// The binned distribution the threshold calculation uses.
    pub fn binned(&self) -> Result<WorkDistribution> {
        match self {
            Self::LogNormal { mean, sd } => Ok(WorkDistribution::lognormal(
                Duration::from_secs_f64(*mean),
                Duration::from_secs_f64(*sd),
            )?),
            Self::Histogram { dist, .. } | Self::Named { dist, .. } => Ok(dist.clone()),
        }
    }

    /// One work sample, seconds.
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        match self {
            Self::LogNormal { mean, sd } => {
                let (mu, sigma) = lognormal_params(*mean, *sd);
                (mu + sigma * rng.normal()).exp()
            }
            Self::Histogram { dist, .. } | Self::Named { dist, .. } => {
                dist.quantile(rng.uniform()).as_secs_f64()
            }
        }
    }

    /// A short label for reports.
    pub fn label(&self) -> String {
        match self {
            Self::LogNormal { mean, sd } => format!("lognormal:{},{}", mean * 1e3, sd * 1e3),
            Self::Named { name, .. } => name.to_string(),
            Self::Histogram { path, .. } => path.display().to_string(),
        }
    }
}

/// The inter-arrival process (always of mean `1/rps`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArrivalSpec {
    /// Exponential gaps.
    Poisson,
    /// Log-normal gaps with this standard deviation (seconds).
    LogNormal {
        /// Standard deviation of a gap, seconds.
        sd: f64,
    },
}

impl FromStr for ArrivalSpec {
    type Err = anyhow::Error;

    /// `poisson` or `lognormal:SD_MS`.
    fn from_str(s: &str) -> Result<Self> {
        if s == "poisson" {
            return Ok(Self::Poisson);
        }
        if let Some(rest) = s.strip_prefix("lognormal:") {
            let sd: f64 = rest
                .trim()
                .parse()
                .with_context(|| format!("`{s}`: sd `{rest}` is not a number (ms)"))?;
            if !(sd.is_finite() && sd > 0.0) {
                bail!("`{s}`: sd must be > 0");
            }
            return Ok(Self::LogNormal { sd: sd / 1e3 });
        }
        bail!("`{s}`: arrivals must be `poisson` or `lognormal:SD_MS`")
    }
}

/// The requests of one run: arrival times and work, seconds, sorted by arrival.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Arrival times, non-decreasing.
    pub arrival: Vec<f64>,
    /// Total work of each request.
    pub work: Vec<f64>,
    /// Fraction of each request's work that is sequential (0 = embarrassingly parallel).
    pub seq_fraction: Vec<f64>,
}

impl Trace {
    /// `n` requests at `rps` with the given processes; `seq` is the sequential
    /// fraction of every request.
    pub fn generate(
        n: usize,
        rps: f64,
        arrivals: ArrivalSpec,
        work: &WorkSpec,
        seq: f64,
        seed: u64,
    ) -> Self {
        let mut ra = Rng::stream(seed, 1);
        let mut rw = Rng::stream(seed, 2);
        let mut t = 0.0;
        let mut arrival = Vec::with_capacity(n);
        // Log-normal gaps: parameters of the unit-rate gap (mean 1, sd sd·rps).
        let ln = match arrivals {
            ArrivalSpec::LogNormal { sd } => Some(lognormal_params(1.0, sd * rps)),
            ArrivalSpec::Poisson => None,
        };
        for _ in 0..n {
            let gap = match ln {
                None => ra.exp(1.0),
                Some((mu, sigma)) => (mu + sigma * ra.normal()).exp(),
            };
            t += gap / rps;
            arrival.push(t);
        }
        let work = (0..n).map(|_| work.sample(&mut rw)).collect();
        Self {
            arrival,
            work,
            seq_fraction: vec![seq; n],
        }
    }

    /// Reads a `tailctl-trace v1` file (written by `tailctl-loadgen` and
    /// `tailctl-experiment`) with the workloads crate's parser, the one every
    /// tool uses, and converts it to seconds.
    pub fn load(path: &Path) -> Result<Self> {
        // The parser rejects a trace without requests.
        let file = tailctl_workloads::trace::Trace::load(path)?;
        Ok(Self::from_file(&file))
    }

    /// The simulator's view of a workloads trace: send times as arrivals,
    /// work in seconds, the sequential percent as a fraction.
    pub fn from_file(file: &tailctl_workloads::trace::Trace) -> Self {
        let mut t = Self::default();
        for e in &file.entries {
            t.arrival.push(e.send_at.as_secs_f64());
            t.work.push(e.request.spec.work.as_secs_f64());
            t.seq_fraction
                .push(f64::from(e.request.spec.seq_pct) / 100.0);
        }
        t
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.arrival.len()
    }

    /// Mean work, seconds.
    pub fn mean_work(&self) -> f64 {
        self.work.iter().sum::<f64>() / self.work.len().max(1) as f64
    }

    /// Observed arrival rate, requests per second.
    pub fn rps(&self) -> f64 {
        match self.arrival.last() {
            Some(&t) if t > 0.0 => self.len() as f64 / t,
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert!(matches!(
            "lognormal:10,13".parse::<WorkSpec>().unwrap(),
            WorkSpec::LogNormal { .. }
        ));
        for bad in [
            "lognormal:10",
            "lognormal:x,1",
            "lognormal:-1,2",
            "/no/such/file",
        ] {
            assert!(bad.parse::<WorkSpec>().is_err(), "{bad}");
        }
        assert_eq!(
            "poisson".parse::<ArrivalSpec>().unwrap(),
            ArrivalSpec::Poisson
        );
        assert!("lognormal:0".parse::<ArrivalSpec>().is_err());
        assert!("uniform".parse::<ArrivalSpec>().is_err());
        // The workloads' spelling means the same distribution.
        match "lognormal:10ms:13ms".parse::<WorkSpec>().unwrap() {
            WorkSpec::LogNormal { mean, sd } => {
                assert!((mean - 0.010).abs() < 1e-12 && (sd - 0.013).abs() < 1e-12)
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            "finance".parse::<WorkSpec>().unwrap(),
            WorkSpec::Named {
                name: "finance",
                ..
            }
        ));
        assert!("lognormal:0ms:1ms".parse::<WorkSpec>().is_err());
        // A missing file is called missing (with or without `file:`), a typo is "not a
        // distribution".
        for missing in [
            "file:/nonexistent",
            "/nonexistent",
            "dist.csv",
            "lognormal_fit.csv",
        ] {
            let e = format!("{:#}", missing.parse::<WorkSpec>().unwrap_err());
            assert!(e.contains("no such file"), "{missing}: {e}");
        }
        let e = format!("{:#}", "bingg".parse::<WorkSpec>().unwrap_err());
        assert!(e.contains("not a distribution"), "{e}");
    }

    #[test]
    fn a_histogram_file_the_runtime_refuses_is_named() {
        let dir = std::env::temp_dir().join(format!("sim-work-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let inf = dir.join("inf.csv");
        std::fs::write(&inf, "work,count\n5ms,1e308\n10ms,1e308\n").unwrap();
        let e = format!(
            "{:#}",
            inf.to_str().unwrap().parse::<WorkSpec>().unwrap_err()
        );
        std::fs::remove_dir_all(&dir).ok();
        assert!(e.contains("inf.csv") && e.contains("infinity"), "{e}");
    }

    #[test]
    fn trace_files_are_read_by_the_workloads_parser() {
        use tailctl_workloads::{arrival::ArrivalProcess, kernel::Kernel, trace as wt};
        let cfg = wt::TraceConfig {
            requests: 50,
            arrival: ArrivalProcess::Poisson { rps: 100.0 },
            kernel: Kernel::Spin,
            seq_pct: 10,
            seed: 5,
        };
        let file =
            wt::Trace::generate(&cfg, &tailctl_workloads::distributions::bing(), "bing").unwrap();
        let path = std::env::temp_dir().join(format!("sim-trace-{}.txt", std::process::id()));
        file.save(&path).unwrap();
        let t = Trace::load(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(t.len(), 50);
        for (i, e) in file.entries.iter().enumerate() {
            assert_eq!(t.arrival[i], e.send_at.as_secs_f64());
            assert_eq!(t.work[i], e.request.spec.work.as_secs_f64());
            assert_eq!(t.seq_fraction[i], 0.1);
        }
        // The same errors as every other reader of the format.
        let bad = std::env::temp_dir().join(format!("sim-trace-bad-{}.txt", std::process::id()));
        std::fs::write(&bad, "# tailctl-trace v1\n0 0 bs 100 0\n1 5 bs 0 0\n").unwrap();
        let err = format!("{:#}", Trace::load(&bad).unwrap_err());
        assert!(err.contains("line 3") && err.contains("work_us"), "{err}");
        std::fs::write(&bad, "# tailctl-trace v1\n# header only\n").unwrap();
        let err = format!("{:#}", Trace::load(&bad).unwrap_err());
        std::fs::remove_file(&bad).ok();
        assert!(err.contains("trace has no requests"), "{err}");
    }

    #[test]
    fn generated_trace_has_the_right_moments() {
        let w: WorkSpec = "lognormal:10,13".parse().unwrap();
        let t = Trace::generate(100_000, 1200.0, ArrivalSpec::Poisson, &w, 0.0, 3);
        assert!((t.rps() / 1200.0 - 1.0).abs() < 0.02, "{}", t.rps());
        assert!(
            (t.mean_work() / 0.010 - 1.0).abs() < 0.03,
            "{}",
            t.mean_work()
        );
        let t2 = Trace::generate(
            50_000,
            1000.0,
            ArrivalSpec::LogNormal { sd: 0.002 },
            &w,
            0.1,
            3,
        );
        assert!((t2.rps() / 1000.0 - 1.0).abs() < 0.02, "{}", t2.rps());
        // Same seed, same work stream regardless of the arrival process.
        assert_eq!(t.work[..10], t2.work[..10]);
    }
}
