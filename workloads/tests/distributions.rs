//! The work distributions have the properties the paper states.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tailctl_rt::distribution::WorkDistribution;
use tailctl_rt::threshold::{ThresholdParams, ThresholdTable};
use tailctl_workloads::distributions::{bing, finance, sampled_mean, DistributionSpec};

fn samples(d: &WorkDistribution, n: usize) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    (0..n)
        .map(|_| d.quantile(rng.gen::<f64>()).as_secs_f64() * 1e3)
        .collect()
}

/// Smallest and largest work a sample can take (quantile 0 and 1).
fn range_ms(d: &WorkDistribution) -> (f64, f64) {
    (
        d.quantile(0.0).as_secs_f64() * 1e3,
        d.quantile(1.0).as_secs_f64() * 1e3,
    )
}

#[test]
fn bing_has_the_papers_shape() {
    let d = bing();
    let (min, max) = range_ms(&d);
    assert!(max / min > 40.0, "max/min = {}", max / min);
    assert!((max - 200.0).abs() < 1e-6);
    // About 3.5% of the requests between 55 and 200 ms, exactly by construction.
    let tail: f64 = d
        .bins()
        .iter()
        .filter(|b| b.w > Duration::from_millis(55))
        .map(|b| b.p)
        .sum();
    assert!((tail - 0.035).abs() < 1e-9, "{tail}");
    // Mean 10 ms, as sampled; and the histogram's bin-maximum mean barely above.
    assert!((sampled_mean(&d).as_secs_f64() * 1e3 - 10.0).abs() < 0.01);
    assert!((10.0..10.5).contains(&(d.mean_secs() * 1e3)));
    // And what a generator actually draws agrees.
    let s = samples(&d, 200_000);
    let mean = s.iter().sum::<f64>() / s.len() as f64;
    assert!((mean - 10.0).abs() < 0.3, "sample mean {mean}");
    let frac = s.iter().filter(|&&w| w > 55.0).count() as f64 / s.len() as f64;
    assert!((frac - 0.035).abs() < 0.003, "{frac}");
    assert!(s.iter().all(|&w| (4.0..=200.0).contains(&w)));
}

#[test]
fn finance_spans_13x() {
    let d = finance();
    let (min, max) = range_ms(&d);
    assert!((max / min - 13.0).abs() < 1e-6, "max/min = {}", max / min);
    assert!((sampled_mean(&d).as_secs_f64() * 1e3 - 10.0).abs() < 0.01);
    let s = samples(&d, 50_000);
    assert!(s.iter().all(|&w| (min..=max).contains(&w)));
}

#[test]
fn lognormal_has_mean_10_and_sd_13() {
    let d: WorkDistribution = "lognormal"
        .parse::<DistributionSpec>()
        .unwrap()
        .build()
        .unwrap();
    let s = samples(&d, 200_000);
    let mean = s.iter().sum::<f64>() / s.len() as f64;
    let sd = (s.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / s.len() as f64).sqrt();
    // Binning caps the tail at 200 ms, which trims the sd a little.
    assert!((mean - 10.0).abs() < 0.5, "{mean}");
    assert!((11.0..14.0).contains(&sd), "{sd}");
}

#[test]
fn distribution_from_file() {
    let dir = std::env::temp_dir().join(format!("tailctl-wl-dist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("d.csv");
    std::fs::write(&p, "work,probability\n5ms,0.5\n20ms,0.5\n").unwrap();
    let spec: DistributionSpec = format!("file:{}", p.display()).parse().unwrap();
    let d = spec.build().unwrap();
    assert_eq!(d.bins().len(), 2);
    std::fs::write(&p, "5ms,0.5\n").unwrap();
    assert!(
        spec.build().unwrap_err().contains("sum"),
        "bad file is a clear error"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_same_type_feeds_the_threshold_table() {
    // Bing at 80% of two cores, target 30 ms: the table serializes large
    // requests when many are active, and the threshold falls as load rises.
    let d = bing();
    let p = ThresholdParams {
        target: Duration::from_millis(30),
        rps: 160.0,
        cores: 2,
        q_max: 30,
    };
    let t = ThresholdTable::compute(&d, &p).unwrap();
    let high = t.lookup(30).expect("serializes at q = 30");
    assert!(t.lookup(1).is_none_or(|low| high <= low));
    assert!(high < Duration::from_millis(200));
}

#[test]
fn a_distribution_file_refused_by_the_runtime_is_named() {
    // The runtime's parser refuses weights summing to infinity (its unit tests);
    // here: the spec's error says which file.
    let dir = std::env::temp_dir().join(format!("tailctl-wl-dist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("inf.csv");
    std::fs::write(&f, "work,count\n5ms,1e308\n10ms,1e308\n").unwrap();
    let spec: DistributionSpec = format!("file:{}", f.display()).parse().unwrap();
    let e = spec.build().unwrap_err();
    std::fs::remove_dir_all(&dir).ok();
    assert!(e.contains("inf.csv") && e.contains("infinity"), "{e}");
}
