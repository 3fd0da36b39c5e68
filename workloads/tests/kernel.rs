//! Request kernels compute the right thing and calibration is consistent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tailctl_workloads::kernel::*;

/// Standard normal CDF (Abramowitz–Stegun 26.2.17, |error| < 7.5e-8).
fn norm_cdf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.231_641_9 * x.abs());
    let poly = t
        * (0.319_381_530
            + t * (-0.356_563_782
                + t * (1.781_477_937 + t * (-1.821_255_978 + t * 1.330_274_429))));
    let tail = (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt() * poly;
    if x >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

fn black_scholes_closed_form(o: &OptionParams) -> f64 {
    let sq = o.vol * o.expiry.sqrt();
    let d1 = ((o.spot / o.strike).ln() + (o.rate + o.vol * o.vol / 2.0) * o.expiry) / sq;
    let d2 = d1 - sq;
    o.spot * norm_cdf(d1) - o.strike * (-o.rate * o.expiry).exp() * norm_cdf(d2)
}

#[test]
fn pde_prices_match_the_closed_form() {
    for i in 0..84 {
        let o = OptionParams::for_unit(i);
        let pde = black_scholes_pde(&o, BS_SPACE_STEPS, BS_TIME_STEPS);
        let exact = black_scholes_closed_form(&o);
        assert!(
            (pde - exact).abs() < 0.05 + 0.01 * exact,
            "unit {i}: pde {pde} vs {exact}"
        );
    }
}

#[test]
fn calibration_is_sane() {
    let c = Calibration::measure();
    for k in [Kernel::BlackScholes, Kernel::Spin] {
        let unit = c.unit_ns(k);
        assert!(unit.is_finite() && unit >= 1.0, "{k}: {unit}");
        // Units scale linearly with requested work.
        let one = c.units(k, Duration::from_millis(1)) as f64;
        let ten = c.units(k, Duration::from_millis(10)) as f64;
        assert!(ten >= 1.0);
        if one >= 10.0 {
            assert!((ten / one - 10.0).abs() < 1.0, "{k}: {one} vs {ten}");
        }
    }
    // A Black-Scholes unit (a 100×1000 PDE solve) costs more than a spin
    // unit of 20k hash steps: ~5x the operations.
    assert!(c.bs_unit_ns > c.spin_unit_ns);
}

/// A ParallelFor that counts the indices it runs, to check a request covers
/// exactly its units and splits the parallel part into unit-sized chunks.
struct Counting {
    indices: AtomicUsize,
    chunks: AtomicUsize,
}

impl ParallelFor for Counting {
    fn parallel_for(
        &self,
        range: std::ops::Range<usize>,
        grain: usize,
        body: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) {
        assert_eq!(grain, 1);
        for i in range {
            self.indices.fetch_add(1, Ordering::Relaxed);
            self.chunks.fetch_add(1, Ordering::Relaxed);
            body(i..i + 1);
        }
    }
}

#[test]
fn sub_linear_requests_run_their_share_sequentially() {
    let cal = Calibration {
        bs_unit_ns: 1e6,
        spin_unit_ns: 1e6,
    }; // 1 ms per unit
    let par = Counting {
        indices: AtomicUsize::new(0),
        chunks: AtomicUsize::new(0),
    };
    let spec = KernelSpec {
        kernel: Kernel::Spin,
        work: Duration::from_millis(40),
        seq_pct: 10,
    };
    execute(&spec, &cal, &par);
    // 40 units: 4 sequential, 36 through the parallel loop.
    assert_eq!(par.indices.load(Ordering::Relaxed), 36);
    let spec = KernelSpec { seq_pct: 0, ..spec };
    let par = Counting {
        indices: AtomicUsize::new(0),
        chunks: AtomicUsize::new(0),
    };
    execute(&spec, &cal, &par);
    assert_eq!(par.indices.load(Ordering::Relaxed), 40);
}

#[test]
fn kernels_are_deterministic() {
    let cal = Calibration {
        bs_unit_ns: 1e6,
        spin_unit_ns: 1e6,
    };
    for kernel in [Kernel::BlackScholes, Kernel::Spin] {
        let spec = KernelSpec {
            kernel,
            work: Duration::from_millis(3),
            seq_pct: 0,
        };
        assert_eq!(
            execute(&spec, &cal, &Sequential),
            execute(&spec, &cal, &Sequential)
        );
    }
}
