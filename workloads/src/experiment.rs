//! The paper-style comparison: targets from steal-first's own percentiles,
//! miss ratios per policy, relative improvements, a table and a plot.
//!
//! Design: this module is the pure part of the experiment driver — given the
//! per-request latencies of each policy's run it computes everything that is
//! reported, so it is testable without processes or sockets. The binary
//! `tailctl-experiment` does the orchestration (servers, load generator).
//!
//! As in the paper (§5): the targets are steal-first's 97.5/98.5/99/99.5/99.75th
//! percentile latencies; the metric is the target-miss ratio; tail-control's
//! relative improvement over a baseline is `1 − miss_TC / miss_base`.
//! Tail-control's threshold table depends on the target, so it may be run once
//! per target (the faithful setting) — a [`PolicyRow`] therefore holds one
//! miss ratio per target, wherever each came from.
//!
//! Rounds. On a shared machine the same server replaying the same trace can
//! miss 1.6× more in one run than in another a quarter of an hour later, so a
//! single run per policy compares the machine's drift as much as the
//! policies. With several rounds (each running every policy, in a shuffled
//! order), a row reports the per-target *median* over rounds, and
//! tail-control's improvement is also computed *paired*: per round, against
//! the baseline run in the same round, so slow drift cancels.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::stats::{miss_ratio, percentile};

/// Steal-first percentiles that become the targets.
pub const TARGET_PERCENTILES: [f64; 5] = [97.5, 98.5, 99.0, 99.5, 99.75];

/// Targets at the given percentiles of `latencies` (exact, nearest rank).
/// Fails if a percentile falls on a request without a response.
///
/// ```
/// use std::time::Duration;
/// use tailctl_workloads::experiment::targets_from;
///
/// let lat: Vec<_> = (1..=400).map(|i| Some(Duration::from_millis(i))).collect();
/// let t = targets_from(&lat, &[97.5, 99.75]).unwrap();
/// assert_eq!(t, vec![Duration::from_millis(390), Duration::from_millis(399)]);
/// ```
pub fn targets_from(latencies: &[Option<Duration>], percentiles: &[f64]) -> Result<Vec<Duration>> {
    percentiles
        .iter()
        .map(|&q| {
            percentile(latencies, q).with_context(|| {
                format!("the {q}th percentile falls on a request without a response")
            })
        })
        .collect()
}

/// One policy's miss ratios, one per target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyRow {
    /// Policy name as shown (e.g. `steal-first`).
    pub policy: String,
    /// Miss ratio at each target (the median over rounds when there are several).
    pub miss: Vec<f64>,
    /// With several rounds: every round's miss ratios, `[round][target]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Vec<f64>>,
}

/// Median of `v` (the mean of the two middle values for an even count); NaN
/// for an empty slice.
///
/// ```
/// use tailctl_workloads::experiment::median;
///
/// assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
/// assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
/// assert!(median(&[]).is_nan());
/// ```
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl PolicyRow {
    /// Miss ratios of one run's latencies at each target.
    pub fn from_latencies(
        policy: &str,
        latencies: &[Option<Duration>],
        targets: &[Duration],
    ) -> Self {
        PolicyRow {
            policy: policy.to_string(),
            miss: targets.iter().map(|&t| miss_ratio(latencies, t)).collect(),
            rounds: Vec::new(),
        }
    }

    /// Combines one policy's rounds (`[round][target]`, at least one): `miss`
    /// is the per-target median; the rounds are kept only if there are several.
    ///
    /// ```
    /// use tailctl_workloads::experiment::PolicyRow;
    ///
    /// let r = PolicyRow::from_rounds("sf", vec![vec![0.1, 0.3], vec![0.2, 0.1], vec![0.4, 0.2]]);
    /// assert_eq!(r.miss, vec![0.2, 0.2]);
    /// assert_eq!(r.rounds.len(), 3);
    /// assert!(PolicyRow::from_rounds("sf", vec![vec![0.1]]).rounds.is_empty());
    /// ```
    pub fn from_rounds(policy: &str, rounds: Vec<Vec<f64>>) -> Self {
        let targets = rounds.first().map_or(0, Vec::len);
        let miss = (0..targets)
            .map(|t| median(&rounds.iter().map(|r| r[t]).collect::<Vec<_>>()))
            .collect();
        PolicyRow {
            policy: policy.to_string(),
            miss,
            rounds: if rounds.len() > 1 { rounds } else { Vec::new() },
        }
    }
}

/// Tail-control's improvement over `base` paired by round, per target:
/// `(median, min, max)` over the rounds where the baseline missed something;
/// `None` where it never did, or when the rows do not have the same rounds.
///
/// ```
/// use tailctl_workloads::experiment::{paired_improvement, PolicyRow};
///
/// let tc = PolicyRow::from_rounds("tc", vec![vec![0.1], vec![0.3], vec![0.2]]);
/// let sf = PolicyRow::from_rounds("sf", vec![vec![0.2], vec![0.3], vec![0.1]]);
/// let (med, lo, hi) = paired_improvement(&tc, &sf)[0].unwrap();
/// assert_eq!((med, lo, hi), (0.0, -1.0, 0.5));
/// ```
pub fn paired_improvement(tc: &PolicyRow, base: &PolicyRow) -> Vec<Option<(f64, f64, f64)>> {
    if tc.rounds.len() < 2 || tc.rounds.len() != base.rounds.len() {
        return vec![None; tc.miss.len()];
    }
    (0..tc.miss.len())
        .map(|t| {
            let v: Vec<f64> = tc
                .rounds
                .iter()
                .zip(&base.rounds)
                .filter_map(|(a, b)| improvement(a[t], b[t]))
                .collect();
            (!v.is_empty()).then(|| {
                let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                (median(&v), lo, hi)
            })
        })
        .collect()
}

/// Relative improvement `1 − miss_tc / miss_base`; `None` when the baseline
/// has no misses (nothing to improve on).
///
/// ```
/// use tailctl_workloads::experiment::improvement;
///
/// assert_eq!(improvement(0.01, 0.02), Some(0.5));
/// assert_eq!(improvement(0.0, 0.0), None);
/// ```
pub fn improvement(miss_tc: f64, miss_base: f64) -> Option<f64> {
    (miss_base > 0.0).then(|| 1.0 - miss_tc / miss_base)
}

/// Everything an experiment reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Free-text description of the configuration (distribution, load, …).
    pub config: String,
    /// Targets in ms, in [`TARGET_PERCENTILES`] order.
    pub targets_ms: Vec<f64>,
    /// The percentiles the targets were taken at.
    pub percentiles: Vec<f64>,
    /// One row per policy; the one named `tail-control` is compared with the others.
    pub rows: Vec<PolicyRow>,
    /// Any other per-run information (e.g. load-generator summaries), as JSON.
    pub runs: serde_json::Value,
}

/// The name of the row the improvements are computed for.
pub const TAIL_CONTROL: &str = "tail-control";
/// The row of tail-control registered with scx_tailctl.
pub const TAIL_CONTROL_KERNEL: &str = "tail-control + kernel";
/// Part of the label of every run under scx_tailctl that is not registered.
pub const UNDER_SCX_MARK: &str = "(scx_tailctl)";

impl Report {
    fn row(&self, policy: &str) -> Option<&PolicyRow> {
        self.rows.iter().find(|r| r.policy == policy)
    }

    /// (label, tail-control row, baselines): user-space tail-control against
    /// the other user-space policies; kernel-assisted tail-control against
    /// every other run.
    fn comparisons(&self) -> Vec<(&'static str, &PolicyRow, Vec<&PolicyRow>)> {
        let mut v = Vec::new();
        if let Some(tc) = self.row(TAIL_CONTROL) {
            let bases = self
                .rows
                .iter()
                .filter(|r| r.policy != TAIL_CONTROL && !r.policy.contains(UNDER_SCX_MARK))
                .filter(|r| r.policy != TAIL_CONTROL_KERNEL)
                .collect();
            v.push(("TC", tc, bases));
        }
        if let Some(tck) = self.row(TAIL_CONTROL_KERNEL) {
            let bases = self
                .rows
                .iter()
                .filter(|r| r.policy != TAIL_CONTROL_KERNEL)
                .collect();
            v.push(("TC+kernel", tck, bases));
        }
        v
    }

    /// The paper-style table (Markdown): miss ratios in percent per policy and
    /// target, then tail-control's relative improvement over each other policy.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = write!(s, "| policy |");
        for (t, q) in self.targets_ms.iter().zip(&self.percentiles) {
            let _ = write!(s, " {t:.2} ms (SF p{q}) |");
        }
        s.push('\n');
        s.push_str("|---|");
        s.push_str(&"---:|".repeat(self.targets_ms.len()));
        s.push('\n');
        for r in &self.rows {
            let _ = write!(s, "| {} miss % |", r.policy);
            for m in &r.miss {
                let _ = write!(s, " {:.2} |", m * 100.0);
            }
            s.push('\n');
        }
        for (label, tc, bases) in self.comparisons() {
            for base in bases {
                let _ = write!(s, "| {label} improvement vs {} |", base.policy);
                for (a, b) in tc.miss.iter().zip(&base.miss) {
                    match improvement(*a, *b) {
                        Some(x) => {
                            let _ = write!(s, " {:+.0}% |", x * 100.0);
                        }
                        None => s.push_str(" n/a |"),
                    }
                }
                s.push('\n');
                if tc.rounds.len() < 2 || tc.rounds.len() != base.rounds.len() {
                    continue;
                }
                let _ = write!(
                    s,
                    "| {label} vs {}, paired by round: median [min, max] |",
                    base.policy
                );
                for p in paired_improvement(tc, base) {
                    match p {
                        Some((m, lo, hi)) => {
                            let _ = write!(
                                s,
                                " {:+.0}% [{:+.0}, {:+.0}] |",
                                m * 100.0,
                                lo * 100.0,
                                hi * 100.0
                            );
                        }
                        None => s.push_str(" n/a |"),
                    }
                }
                s.push('\n');
            }
        }
        s
    }

    /// With several rounds: every round's miss ratios, one line per policy
    /// and round (empty otherwise).
    pub fn rounds_table(&self) -> String {
        let mut s = String::new();
        if self.rows.iter().all(|r| r.rounds.is_empty()) {
            return s;
        }
        s.push_str("| policy | round |");
        for t in &self.targets_ms {
            let _ = write!(s, " {t:.2} ms |");
        }
        s.push_str("\n|---|---:|");
        s.push_str(&"---:|".repeat(self.targets_ms.len()));
        s.push('\n');
        for r in self.rows.iter().filter(|r| !r.rounds.is_empty()) {
            for (i, round) in r.rounds.iter().enumerate() {
                let _ = write!(s, "| {} | {i} |", r.policy);
                for m in round {
                    let _ = write!(s, " {:.2} |", m * 100.0);
                }
                s.push('\n');
            }
        }
        s
    }

    /// A second table, one line per run: latency percentiles from the load
    /// generator and the pool's steal and serialization counters (from each
    /// run's summary in [`Report::runs`]).
    pub fn runs_table(&self) -> String {
        let empty = serde_json::Map::new();
        let runs = self.runs.as_object().unwrap_or(&empty);
        // The neighbour's column only when some run had one (`--neighbour`).
        let neighbour = runs.values().any(|v| v.get("neighbour_cores").is_some());
        let mut s = String::from(
            "| run | p50 ms | p95 ms | p99 ms | p99.9 ms | max ms | steals | serialized | kernel-serialized | cores before |",
        );
        s.push_str(if neighbour {
            " neighbour cores |\n"
        } else {
            "\n"
        });
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        s.push_str(if neighbour { "---:|\n" } else { "\n" });
        for (name, v) in runs {
            let f = |k: &str| v[k].as_f64().map_or("-".into(), |x| format!("{x:.1}"));
            let c = |k: &str| {
                v["server_stats"][k]
                    .as_u64()
                    .map_or("-".into(), |x| x.to_string())
            };
            let _ = write!(
                s,
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                f("p50_ms"),
                f("p95_ms"),
                f("p99_ms"),
                f("p999_ms"),
                f("max_ms"),
                c("steals"),
                c("serialized"),
                c("kernel_serialized"),
                v["capacity_cores"]
                    .as_f64()
                    .map_or("-".into(), |x| format!("{x:.2}"))
            );
            if neighbour {
                let n = v["neighbour_cores"]
                    .as_f64()
                    .map_or("-".into(), |x| format!("{x:.2}"));
                let _ = write!(s, " {n} |");
            }
            s.push('\n');
        }
        s
    }

    /// Writes the report as pretty JSON.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Plots miss ratio (%) against target (ms), one line per policy, as SVG.
    pub fn plot_svg(&self, path: &Path) -> Result<()> {
        use plotters::prelude::*;
        let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let xmin = self
            .targets_ms
            .iter()
            .cloned()
            .fold(f64::INFINITY, f64::min);
        let xmax = self.targets_ms.iter().cloned().fold(0.0, f64::max);
        let pad = ((xmax - xmin) * 0.05).max(0.1);
        let ymax = self
            .rows
            .iter()
            .flat_map(|r| r.miss.iter())
            .cloned()
            .fold(0.0, f64::max)
            * 100.0
            * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Target-miss ratio — {}", self.config),
                ("sans-serif", 16),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin - pad)..(xmax + pad), 0.0..ymax.max(0.1))?;
        chart
            .configure_mesh()
            .x_desc(format!(
                "target latency (ms) = steal-first's {} percentile",
                self.percentiles
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("/")
            ))
            .y_desc("requests over target (%)")
            .draw()?;
        let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
        for (i, r) in self.rows.iter().enumerate() {
            let c = colors[i % colors.len()];
            let pts: Vec<(f64, f64)> = self
                .targets_ms
                .iter()
                .zip(&r.miss)
                .map(|(&t, &m)| (t, m * 100.0))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                .label(r.policy.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
        }
        crate::plot::finish(&mut chart, &root)
    }
}
