//! Open-loop arrival processes.
//!
//! Design: the paper (§5) generates inter-arrival times either from an
//! exponential distribution with mean `1/rps` (Poisson arrivals) or from a
//! log-normal distribution with mean `1/rps` and a chosen standard deviation.
//! An arrival process here only produces the *schedule* — offsets from the
//! start of the run — so that send times are fixed before anything is sent
//! (the load generator never waits for the server to decide when to send).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::{Deserialize, Serialize};
use tailctl_rt::distribution::{format_duration, parse_duration};

/// How inter-arrival times are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ArrivalProcess {
    /// Exponential inter-arrival times with mean `1/rps`.
    Poisson {
        /// Mean request rate (requests per second).
        rps: f64,
    },
    /// Log-normal inter-arrival times with mean `1/rps` and standard deviation `sd`.
    LogNormal {
        /// Mean request rate (requests per second).
        rps: f64,
        /// Standard deviation of the inter-arrival time, in seconds.
        sd_secs: f64,
    },
}

impl ArrivalProcess {
    /// The mean request rate.
    pub fn rps(&self) -> f64 {
        match *self {
            ArrivalProcess::Poisson { rps } | ArrivalProcess::LogNormal { rps, .. } => rps,
        }
    }

    /// Checks the parameters (positive, finite).
    pub fn validate(&self) -> Result<(), String> {
        let rps = self.rps();
        if !(rps.is_finite() && rps > 0.0) {
            return Err(format!("rps must be a positive number, got {rps}"));
        }
        if let ArrivalProcess::LogNormal { sd_secs, .. } = *self {
            if !(sd_secs.is_finite() && sd_secs > 0.0) {
                return Err(format!(
                    "log-normal arrival sd must be > 0, got {sd_secs} s"
                ));
            }
        }
        Ok(())
    }

    /// Draws `n` arrival offsets from the start of the run (the first request
    /// arrives after one inter-arrival time), non-decreasing.
    ///
    /// ```
    /// use rand::SeedableRng;
    /// use tailctl_workloads::arrival::ArrivalProcess;
    ///
    /// let p = ArrivalProcess::Poisson { rps: 1000.0 };
    /// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    /// let times = p.schedule(10_000, &mut rng).unwrap();
    /// let rate = 10_000.0 / times.last().unwrap().as_secs_f64();
    /// assert!((900.0..1100.0).contains(&rate), "{rate}");
    /// ```
    pub fn schedule(&self, n: usize, rng: &mut impl Rng) -> Result<Vec<Duration>, String> {
        self.validate()?;
        let mut t = 0.0f64;
        let mut out = Vec::with_capacity(n);
        match *self {
            ArrivalProcess::Poisson { rps } => {
                let d = Exp::new(rps).map_err(|e| e.to_string())?;
                for _ in 0..n {
                    t += d.sample(rng);
                    out.push(Duration::from_secs_f64(t));
                }
            }
            ArrivalProcess::LogNormal { rps, sd_secs } => {
                let mean = 1.0 / rps;
                // Underlying normal's parameters from the log-normal's mean and sd.
                let sigma2 = (1.0 + (sd_secs / mean).powi(2)).ln();
                let mu = mean.ln() - sigma2 / 2.0;
                let d = LogNormal::new(mu, sigma2.sqrt()).map_err(|e| e.to_string())?;
                for _ in 0..n {
                    t += d.sample(rng);
                    out.push(Duration::from_secs_f64(t));
                }
            }
        }
        Ok(out)
    }
}

impl fmt::Display for ArrivalProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArrivalProcess::Poisson { rps } => write!(f, "poisson:{rps}"),
            ArrivalProcess::LogNormal { rps, sd_secs } => {
                let sd = Duration::from_nanos((sd_secs * 1e9).round() as u64);
                write!(f, "lognormal:{rps}:{}", format_duration(sd))
            }
        }
    }
}

impl FromStr for ArrivalProcess {
    type Err = String;

    /// Parses `poisson:RPS` or `lognormal:RPS:SD` (SD with a unit, e.g. `0.91ms`).
    ///
    /// ```
    /// use tailctl_workloads::arrival::ArrivalProcess;
    ///
    /// assert_eq!("poisson:160".parse::<ArrivalProcess>().unwrap(), ArrivalProcess::Poisson { rps: 160.0 });
    /// let l: ArrivalProcess = "lognormal:1200:0.91ms".parse().unwrap();
    /// assert_eq!(l.to_string(), "lognormal:1200:910us"); // and it parses back
    /// assert_eq!(l.to_string().parse::<ArrivalProcess>().unwrap(), l);
    /// assert!("poisson:-1".parse::<ArrivalProcess>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let rps = |x: &str| {
            x.parse::<f64>()
                .map_err(|_| format!("rps `{x}` is not a number"))
        };
        let p = match parts.as_slice() {
            ["poisson", r] => ArrivalProcess::Poisson { rps: rps(r)? },
            ["lognormal", r, sd] => ArrivalProcess::LogNormal {
                rps: rps(r)?,
                sd_secs: parse_duration(sd)?.as_secs_f64(),
            },
            _ => {
                return Err(format!(
                    "bad arrival process `{s}` (expected poisson:RPS or lognormal:RPS:SD, e.g. lognormal:1200:0.91ms)"
                ))
            }
        };
        p.validate()?;
        Ok(p)
    }
}
