//! Request kernels: the computation a request performs, sized by CPU work.
//!
//! Design: the paper (§5) generates work with "a financial calculation which
//! estimates the price of European-style options with the Black-Scholes PDE",
//! each request parallelised with parallel-for loops, and notes that any
//! computation with the same work distribution would do. We provide:
//!
//! * [`Kernel::BlackScholes`]: a request prices a batch of European calls, each
//!   by an explicit finite-difference solve of the Black-Scholes PDE on a fixed
//!   grid (one *unit* = one option, a few tens of µs in release builds). The
//!   batch is a `parallel_for` over options, so parallelism grows with work.
//! * [`Kernel::Spin`]: a synthetic CPU kernel (an integer hash chain); one unit
//!   is a fixed number of iterations. It has no memory traffic, so it isolates
//!   the scheduler from cache effects.
//!
//! A request asks for an amount of *CPU work* (single-core time). The
//! [`Calibration`] measures the cost of one unit of each kernel on this machine
//! and converts work to a unit count. The **sub-linear variant** of the paper
//! (§5.3) is the `seq_pct` field of [`KernelSpec`]: that share of the units runs
//! sequentially on the request's first thread before the parallel loop, so a
//! request with `seq_pct = 10` has parallelism below 10.
//!
//! Kernels only need a parallel loop from the runtime; the [`ParallelFor`] trait
//! is that seam, so kernels can be tested and calibrated without a pool.

use std::fmt;
use std::hint::black_box;
use std::ops::Range;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A parallel loop inside the current request: run `body` over sub-ranges of
/// `range` (no larger than `grain` unless the runtime coarsens them), possibly
/// in parallel, and return when all of `range` is done.
pub trait ParallelFor {
    /// Runs `body` over `range`, split into chunks of about `grain` indices.
    fn parallel_for(&self, range: Range<usize>, grain: usize, body: &(dyn Fn(Range<usize>) + Sync));
}

/// A [`ParallelFor`] that runs the whole range on the calling thread, for
/// calibration and tests.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use tailctl_workloads::kernel::{ParallelFor, Sequential};
///
/// let sum = AtomicUsize::new(0);
/// Sequential.parallel_for(0..10, 3, &|r| {
///     sum.fetch_add(r.sum::<usize>(), Ordering::Relaxed);
/// });
/// assert_eq!(sum.into_inner(), 45);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Sequential;

impl ParallelFor for Sequential {
    fn parallel_for(
        &self,
        range: Range<usize>,
        _grain: usize,
        body: &(dyn Fn(Range<usize>) + Sync),
    ) {
        body(range)
    }
}

/// Which computation a request performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kernel {
    /// Black-Scholes PDE pricing of a batch of European calls (the paper's).
    BlackScholes,
    /// A synthetic, memory-free CPU loop.
    Spin,
}

impl Kernel {
    /// The short name used on the wire and in trace files (`bs`, `spin`).
    pub fn name(self) -> &'static str {
        match self {
            Kernel::BlackScholes => "bs",
            Kernel::Spin => "spin",
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kernel {
    type Err = String;

    /// Parses `bs` / `black-scholes` or `spin`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bs" | "black-scholes" | "blackscholes" => Ok(Kernel::BlackScholes),
            "spin" | "synthetic" => Ok(Kernel::Spin),
            other => Err(format!(
                "unknown kernel `{other}` (expected `bs` or `spin`)"
            )),
        }
    }
}

/// What one request asks for: a kernel, an amount of CPU work, and the share
/// of it (in percent) that is sequential.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSpec {
    /// The computation.
    pub kernel: Kernel,
    /// Total CPU work (single-core time) the request should take.
    pub work: Duration,
    /// Percent of the work that runs sequentially before the parallel loop (0–100).
    pub seq_pct: u8,
}

/// Grid of one Black-Scholes solve: space points (S from 0 to [`BS_S_MAX`]).
pub const BS_SPACE_STEPS: usize = 100;
/// Grid of one Black-Scholes solve: time steps. Explicit schemes are stable
/// for `dt < 1/(σ² N²)`; with σ ≤ 0.3, N = 100, T = 1 that needs > 900 steps.
pub const BS_TIME_STEPS: usize = 1000;
/// Upper end of the price grid (the spot is 100, strikes 90–110).
pub const BS_S_MAX: f64 = 200.0;
/// Iterations of the hash chain in one unit of [`Kernel::Spin`].
pub const SPIN_UNIT_ITERS: u64 = 20_000;

/// Parameters of one European call priced by [`black_scholes_pde`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptionParams {
    /// Spot price.
    pub spot: f64,
    /// Strike price.
    pub strike: f64,
    /// Risk-free rate (continuous, per year).
    pub rate: f64,
    /// Volatility (per √year).
    pub vol: f64,
    /// Time to expiry in years.
    pub expiry: f64,
}

impl OptionParams {
    /// The option priced as unit `i` of a batch: the strike cycles through
    /// 90..=110 and volatility through 0.15..0.30 so the units differ.
    pub fn for_unit(i: usize) -> Self {
        OptionParams {
            spot: 100.0,
            strike: 90.0 + (i % 21) as f64,
            rate: 0.05,
            vol: 0.15 + 0.05 * (i % 4) as f64,
            expiry: 1.0,
        }
    }
}

/// Prices a European call by the explicit finite-difference scheme for the
/// Black-Scholes PDE on a `space × time` grid with `S ∈ [0, S_MAX]`; the spot
/// must lie on the grid (as 100 does). Returns the price at the spot.
///
/// ```
/// use tailctl_workloads::kernel::{black_scholes_pde, OptionParams};
///
/// let o = OptionParams { spot: 100.0, strike: 100.0, rate: 0.05, vol: 0.2, expiry: 1.0 };
/// let price = black_scholes_pde(&o, 100, 1000);
/// assert!((price - 10.45).abs() < 0.1, "{price}"); // closed form: 10.4506
/// ```
pub fn black_scholes_pde(o: &OptionParams, space: usize, time: usize) -> f64 {
    let ds = BS_S_MAX / space as f64;
    let dt = o.expiry / time as f64;
    // Terminal condition: the payoff. v[j] is the value at S = j·ds.
    let mut v: Vec<f64> = (0..=space)
        .map(|j| (j as f64 * ds - o.strike).max(0.0))
        .collect();
    let mut next = v.clone();
    let s2 = o.vol * o.vol;
    for n in 1..=time {
        let tau = n as f64 * dt; // time to expiry after this step
        for j in 1..space {
            let jf = j as f64;
            let a = 0.5 * dt * (s2 * jf * jf - o.rate * jf);
            let b = 1.0 - dt * (s2 * jf * jf + o.rate);
            let c = 0.5 * dt * (s2 * jf * jf + o.rate * jf);
            next[j] = a * v[j - 1] + b * v[j] + c * v[j + 1];
        }
        next[0] = 0.0;
        next[space] = BS_S_MAX - o.strike * (-o.rate * tau).exp();
        std::mem::swap(&mut v, &mut next);
    }
    let j = (o.spot / ds).round() as usize;
    v[j.min(space)]
}

/// One unit of the spin kernel: a multiply-xorshift chain the compiler cannot
/// shorten (each step depends on the last).
pub fn spin_unit(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..SPIN_UNIT_ITERS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    }
    x
}

/// Runs unit `i` of `kernel`, returning a value that depends on the work done.
pub fn run_unit(kernel: Kernel, i: usize) -> f64 {
    match kernel {
        Kernel::BlackScholes => black_scholes_pde(
            black_box(&OptionParams::for_unit(i)),
            BS_SPACE_STEPS,
            BS_TIME_STEPS,
        ),
        Kernel::Spin => (spin_unit(black_box(i as u64)) >> 11) as f64,
    }
}

/// Measured cost of one unit of each kernel on this machine, single-threaded.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Nanoseconds of CPU work per Black-Scholes unit (one option).
    pub bs_unit_ns: f64,
    /// Nanoseconds of CPU work per spin unit.
    pub spin_unit_ns: f64,
}

impl Calibration {
    /// Measures both kernels on the calling thread. Each unit cost is the
    /// *minimum* over several timed batches: interference from other processes
    /// only ever adds time, so the minimum is the best estimate of the cost on
    /// an idle core. Takes about `2 × rounds × batch` units of time.
    pub fn measure() -> Self {
        Calibration {
            bs_unit_ns: measure_unit(Kernel::BlackScholes, 20, 2),
            spin_unit_ns: measure_unit(Kernel::Spin, 20, 4),
        }
    }

    /// Measures both kernels on `threads` threads at once and averages their
    /// costs. This is the cost that matters when a pool of `threads` workers
    /// is busy: on cores that share execution units (hyperthread siblings, or
    /// vCPUs that are) a floating-point kernel runs markedly slower when both
    /// run it, and a single-threaded calibration would then make every
    /// request do more work than it asked for. `measure_on(1)` is [`measure`](Self::measure).
    ///
    /// ```
    /// use tailctl_workloads::kernel::Calibration;
    ///
    /// let c = Calibration::measure_on(2);
    /// assert!(c.bs_unit_ns >= 1.0 && c.spin_unit_ns >= 1.0);
    /// ```
    pub fn measure_on(threads: usize) -> Self {
        let threads = threads.max(1);
        if threads == 1 {
            return Self::measure();
        }
        let barrier = std::sync::Barrier::new(threads);
        let all: Vec<Calibration> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        Self::measure()
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("calibration thread"))
                .collect()
        });
        let n = all.len() as f64;
        Calibration {
            bs_unit_ns: all.iter().map(|c| c.bs_unit_ns).sum::<f64>() / n,
            spin_unit_ns: all.iter().map(|c| c.spin_unit_ns).sum::<f64>() / n,
        }
    }

    /// The unit cost of `kernel` in nanoseconds.
    pub fn unit_ns(&self, kernel: Kernel) -> f64 {
        match kernel {
            Kernel::BlackScholes => self.bs_unit_ns,
            Kernel::Spin => self.spin_unit_ns,
        }
    }

    /// How many units of `kernel` make `work` of CPU time (at least one).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailctl_workloads::kernel::{Calibration, Kernel};
    ///
    /// let c = Calibration { bs_unit_ns: 50_000.0, spin_unit_ns: 10_000.0 };
    /// assert_eq!(c.units(Kernel::BlackScholes, Duration::from_millis(10)), 200);
    /// assert_eq!(c.units(Kernel::Spin, Duration::from_nanos(1)), 1);
    /// ```
    pub fn units(&self, kernel: Kernel, work: Duration) -> usize {
        let u = (work.as_nanos() as f64 / self.unit_ns(kernel)).round();
        (u as usize).max(1)
    }
}

fn measure_unit(kernel: Kernel, rounds: usize, batch: usize) -> f64 {
    black_box(run_unit(kernel, 0)); // warm caches and page in code
    let mut best = f64::INFINITY;
    for r in 0..rounds {
        let t = Instant::now();
        for i in 0..batch {
            black_box(run_unit(kernel, r * batch + i));
        }
        best = best.min(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    best.max(1.0)
}

/// Runs one request: `seq_pct` percent of the units on this thread, then the
/// rest as a `parallel_for` with one unit per chunk (so the runtime can split
/// a request down to single options). Returns a checksum of the results.
///
/// ```
/// use std::time::Duration;
/// use tailctl_workloads::kernel::{execute, Calibration, Kernel, KernelSpec, Sequential};
///
/// let cal = Calibration { bs_unit_ns: 1e9, spin_unit_ns: 1e9 }; // 1 unit per second
/// let spec = KernelSpec { kernel: Kernel::Spin, work: Duration::from_secs(3), seq_pct: 10 };
/// let checksum = execute(&spec, &cal, &Sequential);
/// assert!(checksum > 0.0);
/// ```
pub fn execute(spec: &KernelSpec, cal: &Calibration, par: &dyn ParallelFor) -> f64 {
    let units = cal.units(spec.kernel, spec.work);
    let seq = (units * spec.seq_pct.min(100) as usize + 50) / 100;
    let mut sum = 0.0;
    for i in 0..seq {
        sum += run_unit(spec.kernel, i);
    }
    // Sum the parallel part through an atomic so no unit's result is dead code.
    let acc = std::sync::atomic::AtomicU64::new(0);
    par.parallel_for(seq..units, 1, &|r| {
        let mut local = 0.0;
        for i in r {
            local += run_unit(spec.kernel, i);
        }
        acc.fetch_add(local.abs() as u64 + 1, std::sync::atomic::Ordering::Relaxed);
    });
    sum + acc.into_inner() as f64
}
