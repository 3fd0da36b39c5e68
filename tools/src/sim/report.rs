//! Reports of `tailctl sim compare`: the paper-style table, JSON and an SVG
//! bar chart.
//!
//! Design: the comparison is computed once into plain data ([`Comparison`]);
//! the text table, the JSON document and the plot are three views of it, so
//! they cannot disagree. The SVG is written by hand (a grouped bar chart is a
//! few dozen lines) to keep the tool free of a plotting stack.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::view;

/// Miss ratios of one policy at each target.
#[derive(Clone, Debug)]
pub struct PolicyRow {
    /// Policy name.
    pub policy: String,
    /// Fraction of measured requests over each target (same order as the targets).
    pub miss: Vec<f64>,
    /// Requests serialized (per target for table-driven policies, else one value).
    pub serialized: Vec<usize>,
    /// Successful steals, per run (like `serialized`).
    pub steals: Vec<u64>,
    /// Mean latency, seconds (first run of the policy).
    pub mean_latency: f64,
    /// Average parallelism of serialized requests after marking (per run).
    pub post_mark_parallelism: Vec<f64>,
}

/// The whole comparison.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Settings, for people (`key → value`).
    pub settings: Vec<(String, String)>,
    /// Percentiles of steal-first's latency that define the targets.
    pub percentiles: Vec<f64>,
    /// Targets, seconds.
    pub targets: Vec<f64>,
    /// One row per policy.
    pub rows: Vec<PolicyRow>,
}

/// `1 − miss_tc / miss_base`, or `None` when the base misses nothing.
pub fn improvement(miss_tc: f64, miss_base: f64) -> Option<f64> {
    (miss_base > 0.0).then(|| 1.0 - miss_tc / miss_base)
}

/// Nearest-rank percentile `p ∈ (0, 100]` of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Fraction of `latencies` strictly above `target`.
pub fn miss_ratio(latencies: &[f64], target: f64) -> f64 {
    if latencies.is_empty() {
        return 0.0;
    }
    latencies.iter().filter(|&&l| l > target).count() as f64 / latencies.len() as f64
}

impl Comparison {
    fn row(&self, name: &str) -> Option<&PolicyRow> {
        self.rows.iter().find(|r| r.policy == name)
    }

    /// Improvements of `tc` (and `tc-clairvoyant`) over each other policy.
    fn improvements(&self) -> Vec<(String, String, Vec<Option<f64>>)> {
        let mut v = Vec::new();
        for tc in ["tc", "tc-clairvoyant"] {
            let Some(t) = self.row(tc) else { continue };
            for base in self.rows.iter().filter(|r| !r.policy.starts_with("tc")) {
                let imp = t
                    .miss
                    .iter()
                    .zip(&base.miss)
                    .map(|(a, b)| improvement(*a, *b))
                    .collect();
                v.push((tc.to_string(), base.policy.clone(), imp));
            }
        }
        v
    }

    /// The paper-style text table.
    pub fn table(&self) -> String {
        let mut s = view::settings_comments(&self.settings);
        // Explicit targets (`--targets`) have no percentile: the row is left out.
        if self.percentiles.iter().any(|p| p.is_finite()) {
            let _ = write!(s, "{:<26}", "SF percentile");
            for p in &self.percentiles {
                let label = if p.is_finite() {
                    format!("{p}th")
                } else {
                    "-".to_string()
                };
                let _ = write!(s, "{label:>10}");
            }
            s.push('\n');
        }
        let _ = write!(s, "{:<26}", "target (ms)");
        for t in &self.targets {
            let _ = write!(s, "{:>10.2}", t * 1e3);
        }
        s.push('\n');
        for r in &self.rows {
            let _ = write!(s, "{:<26}", format!("miss % {}", r.policy));
            for m in &r.miss {
                let _ = write!(s, "{:>10.3}", m * 100.0);
            }
            s.push('\n');
        }
        for (tc, base, imp) in self.improvements() {
            let _ = write!(s, "{:<26}", format!("{tc} vs {base} (1-tc/base)"));
            for i in imp {
                match i {
                    Some(x) => {
                        let _ = write!(s, "{:>9.0}%", x * 100.0);
                    }
                    None => {
                        let _ = write!(s, "{:>10}", "n/a");
                    }
                }
            }
            s.push('\n');
        }
        for r in self.rows.iter().filter(|r| r.policy.starts_with("tc")) {
            let _ = write!(s, "{:<26}", format!("serialized {}", r.policy));
            for x in &r.serialized {
                let _ = write!(s, "{x:>10}");
            }
            let _ = write!(s, "\n{:<26}", format!("  steals {}", r.policy));
            for x in &r.steals {
                let _ = write!(s, "{x:>10}");
            }
            let _ = write!(s, "\n{:<26}", format!("  parallelism after mark"));
            for x in &r.post_mark_parallelism {
                let _ = write!(s, "{x:>10.2}");
            }
            s.push('\n');
        }
        let _ = write!(s, "{:<26}", "mean latency (ms)");
        for r in &self.rows {
            let _ = write!(s, " {}={:.2}", r.policy, r.mean_latency * 1e3);
        }
        let _ = write!(s, "\n{:<26}", "steals (first run)");
        for r in &self.rows {
            if let Some(n) = r.steals.first() {
                let _ = write!(s, " {}={n}", r.policy);
            }
        }
        s.push('\n');
        s
    }

    /// The JSON view.
    pub fn json(&self) -> Value {
        json!({
            "settings": view::settings_json(&self.settings),
            "percentiles": self.percentiles,
            "targets_ms": self.targets.iter().map(|t| t * 1e3).collect::<Vec<_>>(),
            "policies": self.rows.iter().map(|r| json!({
                "policy": r.policy,
                "miss_ratio": r.miss,
                "serialized": r.serialized,
                "steals": r.steals,
                "post_mark_parallelism": r.post_mark_parallelism,
                "mean_latency_ms": r.mean_latency * 1e3,
            })).collect::<Vec<_>>(),
            "improvement": self.improvements().into_iter().map(|(tc, base, imp)| json!({
                "policy": tc, "over": base, "relative": imp,
            })).collect::<Vec<_>>(),
        })
    }

    /// A grouped bar chart of miss ratios (one group per target), as SVG.
    pub fn svg(&self) -> String {
        let colors = [
            "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
        ];
        let (w, h, left, bottom, top) = (760.0, 430.0, 70.0, 60.0, 60.0);
        let plot_w = w - left - 20.0;
        let plot_h = h - bottom - top;
        let max = self
            .rows
            .iter()
            .flat_map(|r| r.miss.iter())
            .fold(0.0f64, |a, &b| a.max(b))
            .max(1e-6)
            * 100.0
            * 1.1;
        let groups = self.targets.len().max(1) as f64;
        let nb = self.rows.len().max(1) as f64;
        let gw = plot_w / groups;
        let bw = gw * 0.8 / nb;
        let mut s = String::new();
        view::open(&mut s, w, h);
        // Short title lines: what was run, then the model knobs.
        view::titles(
            &mut s,
            left,
            "Target-miss ratio",
            &self.settings,
            &[
                &["work", "arrivals", "cores", "requests"],
                &[
                    "steal_cost",
                    "chunk",
                    "seq_fraction",
                    "serialization",
                    "seed",
                ],
                &["joins", "split"],
            ],
        );
        // Y axis with 5 ticks.
        for i in 0..=5 {
            let v = max * i as f64 / 5.0;
            let y = top + plot_h - plot_h * i as f64 / 5.0;
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{v:.2}%</text>"##,
                left + plot_w,
                left - 6.0,
                y + 4.0
            );
        }
        for (g, (t, p)) in self.targets.iter().zip(&self.percentiles).enumerate() {
            let gx = left + gw * g as f64 + gw * 0.1;
            for (i, r) in self.rows.iter().enumerate() {
                let v = r.miss.get(g).copied().unwrap_or(0.0) * 100.0;
                let bh = plot_h * v / max;
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {:.3}%</title></rect>"#,
                    gx + bw * i as f64,
                    top + plot_h - bh,
                    bw * 0.95,
                    bh,
                    colors[i % colors.len()],
                    r.policy,
                    v
                );
            }
            let which = if p.is_finite() {
                format!(" ({p}th)")
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.1} ms{which}</text>"#,
                left + gw * (g as f64 + 0.5),
                top + plot_h + 18.0,
                t * 1e3
            );
        }
        let names: Vec<&str> = self.rows.iter().map(|r| r.policy.as_str()).collect();
        view::legend_and_close(&mut s, &names, &colors, left, 130.0, h - 18.0);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_misses() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 99.5), 100.0);
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(miss_ratio(&v, 99.0), 0.01);
        assert_eq!(improvement(0.5, 1.0), Some(0.5));
        assert_eq!(improvement(0.5, 0.0), None);
    }

    #[test]
    fn views_agree() {
        let c = Comparison {
            settings: vec![("cores".into(), "16".into())],
            percentiles: vec![99.0],
            targets: vec![0.02],
            rows: vec![
                PolicyRow {
                    policy: "sf".into(),
                    miss: vec![0.01],
                    serialized: vec![0],
                    steals: vec![0],
                    mean_latency: 0.005,
                    post_mark_parallelism: vec![],
                },
                PolicyRow {
                    policy: "tc".into(),
                    miss: vec![0.006],
                    serialized: vec![12],
                    steals: vec![0],
                    mean_latency: 0.006,
                    post_mark_parallelism: vec![1.5],
                },
            ],
        };
        assert!(c.table().contains("tc vs sf"), "{}", c.table());
        assert!(c.table().contains("40%"), "{}", c.table());
        let j = c.json();
        let imp = j["improvement"][0]["relative"][0].as_f64().unwrap();
        assert!((imp - 0.4).abs() < 1e-12);
        assert!(c.svg().starts_with("<svg"));
    }
}
