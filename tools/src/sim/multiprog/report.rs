//! Reports of `tailctl sim multiprog`: per-run numbers, their summary over seeds (mean and
//! min–max), DEQ's paired differences against the other policies, as a text table, JSON and an
//! SVG plot. As in `sim compare`, the numbers are computed once ([`Report`]) and the three views
//! only format them.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::engine::{JobSpec, MpOutcome};
use crate::sim::report::percentile;
use crate::sim::view;

/// The numbers of one (load, seed, policy) run.
#[derive(Clone, Debug)]
pub struct RunStats {
    pub load: f64,
    pub seed: u64,
    pub policy: String,
    pub mean_response_s: f64,
    pub p95_response_s: f64,
    /// Work / allotted core-time.
    pub utilisation: f64,
    /// Cores handed to another job per quantum.
    pub reallocs_per_quantum: f64,
    pub makespan_s: f64,
    /// Mean response time per benchmark name, in first-seen order.
    pub per_bench: Vec<(String, f64)>,
    pub steal_attempts: u64,
    pub preemptions: u64,
    pub events: u64,
}

impl RunStats {
    /// Summarises a run; the first `warmup` jobs (in arrival order) are left out of the
    /// response-time statistics.
    pub fn new(
        load: f64,
        seed: u64,
        policy: &str,
        specs: &[JobSpec],
        o: &MpOutcome,
        warmup: usize,
    ) -> Self {
        let measured = &o.jobs[warmup.min(o.jobs.len())..];
        let mut resp: Vec<f64> = measured
            .iter()
            .map(|j| j.response_ns as f64 / 1e9)
            .collect();
        let mean = resp.iter().sum::<f64>() / resp.len().max(1) as f64;
        resp.sort_by(f64::total_cmp);
        let mut per_bench: Vec<(String, f64, usize)> = Vec::new();
        for (s, j) in specs.iter().zip(&o.jobs).skip(warmup) {
            let name = s.bench.to_string();
            let r = j.response_ns as f64 / 1e9;
            match per_bench.iter_mut().find(|(n, _, _)| *n == name) {
                Some(e) => {
                    e.1 += r;
                    e.2 += 1;
                }
                None => per_bench.push((name, r, 1)),
            }
        }
        RunStats {
            load,
            seed,
            policy: policy.to_string(),
            mean_response_s: mean,
            p95_response_s: percentile(&resp, 95.0),
            utilisation: o.utilisation(),
            reallocs_per_quantum: if o.quanta == 0 {
                0.0
            } else {
                o.cores_moved as f64 / o.quanta as f64
            },
            makespan_s: o.makespan_ns as f64 / 1e9,
            per_bench: per_bench
                .into_iter()
                .map(|(n, s, k)| (n, s / k as f64))
                .collect(),
            steal_attempts: o.steal_attempts,
            preemptions: o.preemptions,
            events: o.events,
        }
    }
}

/// Mean, min and max of a metric over seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(xs: impl IntoIterator<Item = f64>) -> Self {
        let (mut n, mut sum, mut min, mut max) = (0usize, 0.0, f64::INFINITY, f64::NEG_INFINITY);
        for x in xs {
            n += 1;
            sum += x;
            min = min.min(x);
            max = max.max(x);
        }
        if n == 0 {
            return Spread {
                mean: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        Spread {
            mean: sum / n as f64,
            min,
            max,
        }
    }

    fn json(self) -> Value {
        json!({ "mean": self.mean, "min": self.min, "max": self.max })
    }

    /// `12.3 [11.8–13.0]` (the range only when there is one).
    fn fmt(self, digits: usize, scale: f64) -> String {
        let (m, lo, hi) = (self.mean * scale, self.min * scale, self.max * scale);
        if (hi - lo).abs() < 1e-12 {
            format!("{m:.digits$}")
        } else {
            format!("{m:.digits$} [{lo:.digits$}–{hi:.digits$}]")
        }
    }

    /// `−12.4% [−15.0…−9.1]`, signed.
    fn fmt_pct(self) -> String {
        let p = |x: f64| format!("{:+.1}", x * 100.0).replace('-', "−");
        if (self.max - self.min).abs() < 1e-12 {
            format!("{}%", p(self.mean))
        } else {
            format!("{}% [{}…{}]", p(self.mean), p(self.min), p(self.max))
        }
    }
}

/// One policy at one load, over seeds.
#[derive(Clone, Debug)]
pub struct SummaryRow {
    pub load: f64,
    pub policy: String,
    pub mean_response_s: Spread,
    pub p95_response_s: Spread,
    pub utilisation: Spread,
    pub reallocs_per_quantum: Spread,
    pub makespan_s: Spread,
    /// Per benchmark: mean response (mean over seeds).
    pub per_bench: Vec<(String, Spread)>,
}

/// `base` against `other` at one load: relative differences per seed, `base/other − 1`.
#[derive(Clone, Debug)]
pub struct Relative {
    pub load: f64,
    pub base: String,
    pub other: String,
    pub mean_response: Spread,
    pub p95_response: Spread,
    pub utilisation: Spread,
}

/// Everything `multiprog` reports.
#[derive(Clone, Debug)]
pub struct Report {
    pub settings: Vec<(String, String)>,
    /// (name, work s, span s).
    pub benches: Vec<(String, f64, f64)>,
    pub runs: Vec<RunStats>,
    pub summary: Vec<SummaryRow>,
    pub relative: Vec<Relative>,
    /// Per policy: the first job's allotment after every quantum, first run (`--show-allot`).
    pub allot_trace: Vec<(String, Vec<u32>)>,
}

impl Report {
    /// Builds the summary from runs listed load by load, seed by seed, policy by policy.
    pub fn new(
        settings: Vec<(String, String)>,
        benches: Vec<(String, f64, f64)>,
        runs: Vec<RunStats>,
        policies: &[String],
        loads: &[f64],
        allot_trace: Vec<(String, Vec<u32>)>,
    ) -> Self {
        let mut summary = Vec::new();
        let mut relative = Vec::new();
        for &load in loads {
            let at = |p: &str| -> Vec<&RunStats> {
                runs.iter()
                    .filter(|r| r.load == load && r.policy == p)
                    .collect()
            };
            for p in policies {
                let rs = at(p);
                let mut benches: Vec<String> = Vec::new();
                for r in &rs {
                    for (b, _) in &r.per_bench {
                        if !benches.contains(b) {
                            benches.push(b.clone());
                        }
                    }
                }
                summary.push(SummaryRow {
                    load,
                    policy: p.clone(),
                    mean_response_s: Spread::of(rs.iter().map(|r| r.mean_response_s)),
                    p95_response_s: Spread::of(rs.iter().map(|r| r.p95_response_s)),
                    utilisation: Spread::of(rs.iter().map(|r| r.utilisation)),
                    reallocs_per_quantum: Spread::of(rs.iter().map(|r| r.reallocs_per_quantum)),
                    makespan_s: Spread::of(rs.iter().map(|r| r.makespan_s)),
                    per_bench: benches
                        .into_iter()
                        .map(|b| {
                            let s = Spread::of(rs.iter().filter_map(|r| {
                                r.per_bench.iter().find(|(n, _)| *n == b).map(|x| x.1)
                            }));
                            (b, s)
                        })
                        .collect(),
                });
            }
            if let Some(base) = policies.iter().find(|p| *p == "deq") {
                let b = at(base);
                for other in policies.iter().filter(|p| *p != base) {
                    let o = at(other);
                    // Paired by seed: the same jobs arrived at the same times.
                    let pairs: Vec<(&RunStats, &RunStats)> = b
                        .iter()
                        .filter_map(|x| o.iter().find(|y| y.seed == x.seed).map(|y| (*x, *y)))
                        .collect();
                    let rel = |f: fn(&RunStats) -> f64| {
                        Spread::of(pairs.iter().map(|(x, y)| f(x) / f(y) - 1.0))
                    };
                    relative.push(Relative {
                        load,
                        base: base.clone(),
                        other: other.clone(),
                        mean_response: rel(|r| r.mean_response_s),
                        p95_response: rel(|r| r.p95_response_s),
                        utilisation: rel(|r| r.utilisation),
                    });
                }
            }
        }
        Report {
            settings,
            benches,
            runs,
            summary,
            relative,
            allot_trace,
        }
    }

    fn seeds(&self) -> usize {
        let mut s: Vec<u64> = self.runs.iter().map(|r| r.seed).collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    }

    /// Markdown tables (they read as text too).
    pub fn table(&self) -> String {
        let mut s = view::settings_comments(&self.settings);
        let _ = writeln!(
            s,
            "# jobs: {}",
            self.benches
                .iter()
                .map(|(n, w, sp)| format!(
                    "{n} (work {w:.2} s, span {sp:.3} s, parallelism {:.0})",
                    w / sp
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        let n = self.seeds();
        let range = if n > 1 {
            format!("mean over {n} seeds [min–max]")
        } else {
            "one seed".to_string()
        };
        let _ = writeln!(s, "\nPer policy ({range}):\n");
        let _ = writeln!(
            s,
            "| load | policy | mean response (s) | p95 response (s) | utilisation | reallocations / quantum | makespan (s) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for r in &self.summary {
            let _ = writeln!(
                s,
                "| {:.2} | {} | {} | {} | {} | {} | {} |",
                r.load,
                r.policy,
                r.mean_response_s.fmt(2, 1.0),
                r.p95_response_s.fmt(2, 1.0),
                r.utilisation.fmt(3, 1.0),
                r.reallocs_per_quantum.fmt(2, 1.0),
                r.makespan_s.fmt(1, 1.0),
            );
        }
        if !self.relative.is_empty() {
            let _ = writeln!(
                s,
                "\nDEQ+SAWS against each policy, paired by seed (deq/other − 1; negative response = faster):\n"
            );
            let _ = writeln!(
                s,
                "| load | deq vs | mean response | p95 response | utilisation |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|");
            for r in &self.relative {
                let _ = writeln!(
                    s,
                    "| {:.2} | {} | {} | {} | {} |",
                    r.load,
                    r.other,
                    r.mean_response.fmt_pct(),
                    r.p95_response.fmt_pct(),
                    r.utilisation.fmt_pct()
                );
            }
        }
        let benches: Vec<&String> = {
            let mut v: Vec<&String> = Vec::new();
            for r in &self.summary {
                for (b, _) in &r.per_bench {
                    if !v.contains(&b) {
                        v.push(b);
                    }
                }
            }
            v
        };
        if benches.len() > 1 {
            let _ = writeln!(s, "\nMean response per benchmark (s, mean over seeds):\n");
            let _ = write!(s, "| load | policy |");
            for b in &benches {
                let _ = write!(s, " {b} |");
            }
            let _ = write!(s, "\n|---|---|");
            for _ in &benches {
                s.push_str("---|");
            }
            s.push('\n');
            for r in &self.summary {
                let _ = write!(s, "| {:.2} | {} |", r.load, r.policy);
                for b in &benches {
                    match r.per_bench.iter().find(|(n, _)| n == *b) {
                        Some((_, x)) => {
                            let _ = write!(s, " {:.2} |", x.mean);
                        }
                        None => s.push_str(" – |"),
                    }
                }
                s.push('\n');
            }
        }
        for (p, a) in &self.allot_trace {
            let _ = writeln!(
                s,
                "\nallotment of job 0 after each quantum, {p} ({} quanta): {}",
                a.len(),
                compress(a)
            );
        }
        s
    }

    pub fn json(&self) -> Value {
        json!({
            "settings": view::settings_json(&self.settings),
            "benchmarks": self.benches.iter().map(|(n, w, s)| json!({
                "name": n, "work_s": w, "span_s": s, "parallelism": w / s,
            })).collect::<Vec<_>>(),
            "summary": self.summary.iter().map(|r| json!({
                "load": r.load,
                "policy": r.policy,
                "mean_response_s": r.mean_response_s.json(),
                "p95_response_s": r.p95_response_s.json(),
                "utilisation": r.utilisation.json(),
                "reallocations_per_quantum": r.reallocs_per_quantum.json(),
                "makespan_s": r.makespan_s.json(),
                "mean_response_by_benchmark_s": r.per_bench.iter()
                    .map(|(b, x)| (b.clone(), x.json()))
                    .collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
            "relative": self.relative.iter().map(|r| json!({
                "load": r.load, "policy": r.base, "over": r.other,
                "mean_response": r.mean_response.json(),
                "p95_response": r.p95_response.json(),
                "utilisation": r.utilisation.json(),
            })).collect::<Vec<_>>(),
            "runs": self.runs.iter().map(|r| json!({
                "load": r.load, "seed": r.seed, "policy": r.policy,
                "mean_response_s": r.mean_response_s,
                "p95_response_s": r.p95_response_s,
                "utilisation": r.utilisation,
                "reallocations_per_quantum": r.reallocs_per_quantum,
                "makespan_s": r.makespan_s,
                "mean_response_by_benchmark_s": r.per_bench.iter()
                    .map(|(b, x)| (b.clone(), json!(x)))
                    .collect::<serde_json::Map<_, _>>(),
                "steal_attempts": r.steal_attempts,
                "preemptions": r.preemptions,
                "events": r.events,
            })).collect::<Vec<_>>(),
            "allot_trace_job0": self.allot_trace.iter()
                .map(|(p, a)| (p.clone(), json!(a)))
                .collect::<serde_json::Map<_, _>>(),
        })
    }

    /// Two panels against load: mean response time and utilisation, one line per policy, with
    /// the min–max over seeds as whiskers (and, with `--show-allot`, a third panel: job 0's
    /// allotment per quantum).
    pub fn svg(&self) -> String {
        let colors = [
            "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
        ];
        let policies: Vec<&String> = {
            let mut v: Vec<&String> = Vec::new();
            for r in &self.summary {
                if !v.contains(&&r.policy) {
                    v.push(&r.policy);
                }
            }
            v
        };
        let loads: Vec<f64> = {
            let mut v: Vec<f64> = Vec::new();
            for r in &self.summary {
                if !v.contains(&r.load) {
                    v.push(r.load);
                }
            }
            v
        };
        let with_trace = !self.allot_trace.is_empty();
        let (pw, ph, left, top, gap) = (360.0, 260.0, 60.0, 70.0, 70.0);
        let panels = if with_trace { 3.0 } else { 2.0 };
        let w = left + panels * (pw + gap);
        let h = top + ph + 80.0;
        let mut s = String::new();
        view::open(&mut s, w, h);
        view::titles(
            &mut s,
            left,
            "Multiprogrammed work stealing",
            &self.settings,
            &[
                &["cores", "jobs", "mix"],
                &["quantum", "steal_cost", "realloc_cost", "measure", "seeds"],
            ],
        );
        let x_of = |i: usize, x0: f64| {
            if loads.len() <= 1 {
                x0 + pw / 2.0
            } else {
                x0 + 20.0 + (pw - 40.0) * i as f64 / (loads.len() - 1) as f64
            }
        };
        let metric_panel = |s: &mut String,
                            x0: f64,
                            title: &str,
                            get: &dyn Fn(&SummaryRow) -> Spread,
                            fmt: &dyn Fn(f64) -> String,
                            fixed: Option<f64>| {
            let max = fixed.unwrap_or_else(|| {
                nice_top(
                    self.summary
                        .iter()
                        .map(|r| get(r).max)
                        .filter(|x| x.is_finite())
                        .fold(0.0f64, f64::max),
                )
            });
            let y_of = |v: f64| top + ph - ph * v / max;
            let _ = writeln!(
                s,
                r#"<text x="{x0}" y="{}" font-size="12">{}</text>"#,
                top - 12.0,
                view::escape(title)
            );
            for i in 0..=4 {
                let v = max * i as f64 / 4.0;
                let y = y_of(v);
                let _ = writeln!(
                    s,
                    r##"<line x1="{x0}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" font-size="10">{}</text>"##,
                    x0 + pw,
                    x0 - 4.0,
                    y + 3.0,
                    fmt(v)
                );
            }
            for (i, l) in loads.iter().enumerate() {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="10">{l:.2}</text>"#,
                    x_of(i, x0),
                    top + ph + 14.0
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle" font-size="11">load</text>"#,
                x0 + pw / 2.0,
                top + ph + 30.0
            );
            for (k, p) in policies.iter().enumerate() {
                let c = colors[k % colors.len()];
                let off = (k as f64 - (policies.len() as f64 - 1.0) / 2.0) * 4.0;
                let mut pts = Vec::new();
                for (i, l) in loads.iter().enumerate() {
                    let Some(r) = self
                        .summary
                        .iter()
                        .find(|r| r.load == *l && r.policy == **p)
                    else {
                        continue;
                    };
                    let sp = get(r);
                    if !sp.mean.is_finite() {
                        continue;
                    }
                    let x = x_of(i, x0) + off;
                    pts.push(format!("{x:.1},{:.1}", y_of(sp.mean)));
                    let _ = writeln!(
                        s,
                        r#"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="{c}"/><circle cx="{x:.1}" cy="{:.1}" r="3" fill="{c}"><title>{} load {l:.2}: {}</title></circle>"#,
                        y_of(sp.min),
                        y_of(sp.max),
                        y_of(sp.mean),
                        view::escape(p),
                        fmt(sp.mean)
                    );
                }
                if pts.len() > 1 {
                    let _ = writeln!(
                        s,
                        r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="1.5"/>"#,
                        pts.join(" ")
                    );
                }
            }
        };
        metric_panel(
            &mut s,
            left,
            "mean response time (s)",
            &|r| r.mean_response_s,
            &|v| format!("{v:.1}"),
            None,
        );
        metric_panel(
            &mut s,
            left + pw + gap,
            "utilisation (work / allotted core-time)",
            &|r| r.utilisation,
            &|v| format!("{v:.2}"),
            Some(1.0),
        );
        if with_trace {
            let x0 = left + 2.0 * (pw + gap);
            let n = self
                .allot_trace
                .iter()
                .map(|(_, a)| a.len())
                .max()
                .unwrap_or(1)
                .max(2);
            let max = nice_top(
                self.allot_trace
                    .iter()
                    .flat_map(|(_, a)| a.iter().copied())
                    .max()
                    .unwrap_or(1) as f64,
            );
            let _ = writeln!(
                s,
                r#"<text x="{x0}" y="{}" font-size="12">job 0: allotment after each quantum</text>"#,
                top - 12.0
            );
            for i in 0..=4 {
                let v = max * i as f64 / 4.0;
                let y = top + ph - ph * v / max;
                let _ = writeln!(
                    s,
                    r##"<line x1="{x0}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" font-size="10">{v:.0}</text>"##,
                    x0 + pw,
                    x0 - 4.0,
                    y + 3.0
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle" font-size="11">quantum</text>"#,
                x0 + pw / 2.0,
                top + ph + 30.0
            );
            for (p, a) in &self.allot_trace {
                let k = policies.iter().position(|q| *q == p).unwrap_or(0);
                let pts: Vec<String> = a
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        format!(
                            "{:.1},{:.1}",
                            x0 + pw * i as f64 / (n - 1) as f64,
                            top + ph - ph * v as f64 / max
                        )
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.2"/>"#,
                    pts.join(" "),
                    colors[k % colors.len()]
                );
            }
        }
        let names: Vec<&str> = policies.iter().map(|p| p.as_str()).collect();
        view::legend_and_close(&mut s, &names, &colors, left, 110.0, h - 16.0);
        s
    }
}

/// A round axis top at or above `x`: 1, 2, 4 or 5 times a power of ten, or a multiple of 8
/// between 8 and 64 (core counts), so that the four grid lines fall on readable values.
fn nice_top(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    if (4.0..=64.0).contains(&x) && x.fract() == 0.0 {
        return (x / 8.0).ceil() * 8.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 4.0, 5.0, 10.0] {
        if m * p >= x * 1.02 {
            return m * p;
        }
    }
    10.0 * p
}

/// `1 2 4 8 16 8 16 …` with runs of one value written `v×n`.
fn compress(a: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < a.len() {
        let mut j = i;
        while j < a.len() && a[j] == a[i] {
            j += 1;
        }
        if j - i > 2 {
            out.push(format!("{}×{}", a[i], j - i));
        } else {
            out.extend(a[i..j].iter().map(|v| v.to_string()));
        }
        i = j;
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: &str, seed: u64, resp: f64, util: f64) -> RunStats {
        RunStats {
            load: 0.5,
            seed,
            policy: policy.into(),
            mean_response_s: resp,
            p95_response_s: 2.0 * resp,
            utilisation: util,
            reallocs_per_quantum: 1.0,
            makespan_s: 10.0,
            per_bench: vec![("fib".into(), resp)],
            steal_attempts: 0,
            preemptions: 0,
            events: 0,
        }
    }

    #[test]
    fn summary_and_paired_differences() {
        let runs = vec![
            run("equi", 1, 10.0, 0.5),
            run("deq", 1, 8.0, 0.75),
            run("equi", 2, 20.0, 0.5),
            run("deq", 2, 19.0, 0.5),
        ];
        let pols = vec!["equi".to_string(), "deq".to_string()];
        let r = Report::new(
            vec![],
            vec![],
            runs,
            &pols,
            &[0.5],
            vec![("deq".into(), vec![1, 2, 2, 2, 4])],
        );
        assert_eq!(
            r.summary[0].mean_response_s,
            Spread {
                mean: 15.0,
                min: 10.0,
                max: 20.0
            }
        );
        let rel = &r.relative[0];
        assert_eq!((rel.base.as_str(), rel.other.as_str()), ("deq", "equi"));
        assert!((rel.mean_response.min - (-0.2)).abs() < 1e-12);
        assert!((rel.mean_response.max - (-0.05)).abs() < 1e-12);
        assert!((rel.utilisation.max - 0.5).abs() < 1e-12);
        let t = r.table();
        assert!(t.contains("−12.5% [−20.0…−5.0]"), "{t}");
        assert!(t.contains("1 2×3 4") || t.contains("1 2 2 2 4"), "{t}");
        assert_eq!(r.json()["relative"][0]["over"], "equi");
        assert!(r.svg().starts_with("<svg") && r.svg().contains("polyline"));
        assert_eq!(compress(&[1, 2, 2, 2, 4]), "1 2×3 4");
        assert_eq!(nice_top(16.0), 16.0);
        assert_eq!(nice_top(32.0), 32.0);
        assert_eq!(nice_top(2.7), 4.0);
        assert_eq!(nice_top(0.93), 1.0);
    }
}
