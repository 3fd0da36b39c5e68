//! `tailctl top`: a live terminal view of what scx_tailctl and the registered
//! services are doing, refreshed every `--interval`.
//!
//! Everything shown comes from one [`Snapshot`] per refresh (the same reader
//! `tailctl maps dump` uses), so top never disagrees with the dump. Layout,
//! top to bottom: scheduler-wide counters (rates over the last interval),
//! services (active requests, allotment, the SAWS desire inputs busy workers
//! and stealable tasks), their requests (kernel work against the threshold at
//! the service's current active count, SERIALIZED, running threads,
//! allocation, waiting threads), and per-CPU which request runs there.
//!
//! Keys: q/Esc/Ctrl-C quit (the terminal is restored, also on errors),
//! s cycles the request sort, r reverses it, z shows only serialized
//! requests, / filters by service (pid, comm or slot), +/- change the
//! interval. A failed refresh (the scheduler restarting) is shown in the
//! status line and retried; only the first reading must succeed, so a
//! missing scheduler or missing privilege is reported before the screen
//! is taken over.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;

use crate::maps::region::efficiency;
use crate::maps::{Snapshot, DEFAULT_PIN_DIR};

#[derive(clap::Parser)]
pub struct Args {
    /// Seconds between refreshes (0.1 to 60; values outside are clamped).
    #[arg(long, short = 'd', default_value = "1", value_parser = parse_interval)]
    interval: Duration,
    /// Directory the scheduler pinned its maps in (scx_tailctl --pin-dir).
    #[arg(long, default_value = DEFAULT_PIN_DIR)]
    pin_dir: PathBuf,
    /// Print one text frame and exit (for scripts and terminals without a TUI).
    #[arg(long)]
    once: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum SortKey {
    Progress,
    Work,
    Id,
    Service,
}

impl SortKey {
    fn next(self) -> Self {
        match self {
            Self::Progress => Self::Work,
            Self::Work => Self::Id,
            Self::Id => Self::Service,
            Self::Service => Self::Progress,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Self::Progress => "progress",
            Self::Work => "work",
            Self::Id => "id",
            Self::Service => "service",
        }
    }
}

struct App {
    snap: Snapshot,
    prev_stats: BTreeMap<String, u64>,
    rates: BTreeMap<String, f64>,
    /// Each job's CPU time at the last refresh ((slot, pid) -> ns), and the cores it used since.
    prev_job_cpu: BTreeMap<(usize, u64), u64>,
    job_cores: BTreeMap<(usize, u64), f64>,
    /// Each job's (working, stealing) CPU time at the last refresh, and its efficiency since.
    prev_job_split: BTreeMap<(usize, u64), (u64, u64)>,
    job_eff: BTreeMap<(usize, u64), f64>,
    last_read: Instant,
    error: Option<String>,
    sort: SortKey,
    reverse: bool,
    serialized_only: bool,
    filter: String,
    editing_filter: bool,
    interval: Duration,
}

impl App {
    fn refresh(&mut self, pin_dir: &std::path::Path) {
        match Snapshot::read(pin_dir) {
            Ok(s) => {
                let dt = self.last_read.elapsed().as_secs_f64().max(1e-3);
                self.rates = s
                    .stats
                    .iter()
                    .map(|(k, v)| {
                        let p = self.prev_stats.get(k).copied().unwrap_or(*v);
                        (k.clone(), v.saturating_sub(p) as f64 / dt)
                    })
                    .collect();
                self.prev_stats = s.stats.clone();
                let cpu: BTreeMap<(usize, u64), u64> = s
                    .services
                    .iter()
                    .filter_map(|v| Some(((v.slot, v.pid), v.job.as_ref()?.cpu_ns)))
                    .collect();
                self.job_cores = cpu
                    .iter()
                    .filter_map(|(k, v)| {
                        let p = self.prev_job_cpu.get(k)?;
                        Some((*k, v.saturating_sub(*p) as f64 / 1e9 / dt))
                    })
                    .collect();
                self.prev_job_cpu = cpu;
                let split: BTreeMap<(usize, u64), (u64, u64)> = s
                    .services
                    .iter()
                    .filter_map(|v| {
                        let j = v.job.as_ref()?;
                        Some(((v.slot, v.pid), (j.work_ns, j.steal_ns)))
                    })
                    .collect();
                self.job_eff = split
                    .iter()
                    .filter_map(|(k, v)| Some((*k, efficiency(*self.prev_job_split.get(k)?, *v)?)))
                    .collect();
                self.prev_job_split = split;
                self.snap = s;
                self.error = None;
            }
            Err(e) => self.error = Some(format!("{e:#}")),
        }
        self.last_read = Instant::now();
    }

    fn service_visible(&self, slot: usize) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        self.snap.service(slot).is_some_and(|s| {
            s.comm.contains(&self.filter)
                || s.pid.to_string() == self.filter
                || s.slot.to_string() == self.filter
        })
    }

    /// Returns false when the user asked to quit.
    fn key(&mut self, code: KeyCode, mods: KeyModifiers) -> bool {
        if self.editing_filter {
            match code {
                KeyCode::Enter | KeyCode::Esc => self.editing_filter = false,
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            return true;
        }
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return false,
            KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => return false,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('r') => self.reverse = !self.reverse,
            KeyCode::Char('z') => self.serialized_only = !self.serialized_only,
            KeyCode::Char('/') => {
                self.filter.clear();
                self.editing_filter = true;
            }
            KeyCode::Char('+') => self.interval = (self.interval * 2).min(Duration::from_secs(60)),
            KeyCode::Char('-') => {
                self.interval = (self.interval / 2).max(Duration::from_millis(100))
            }
            _ => {}
        }
        true
    }

    fn draw(&self, f: &mut Frame) {
        let nsvc = self.snap.services.len() as u16;
        let ncpu_rows = (self.snap.cpus.len() as u16).div_ceil(4);
        let [head, svcs, reqs, cpus, status] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Length(nsvc.max(1) + 3),
            Constraint::Min(5),
            Constraint::Length(ncpu_rows.max(1) + 2),
            Constraint::Length(1),
        ])
        .areas(f.area());

        // Rates need two readings: "-" until the first refresh.
        let r = |k: &str| {
            self.rates
                .get(k)
                .map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
        };
        let st = |k: &str| self.snap.stats.get(k).copied().unwrap_or(0);
        let head_text = vec![
            Line::from(format!(
                "enq/s {}  direct/s {}  shared/s {}  kicks/s {}   serializations {} ({}/s)  throttled/s {}  rotations/s {}  cap-preempt {}  invalid {}",
                r("enqueues"), r("direct_dispatches"), r("shared_dispatches"), r("idle_kicks"),
                st("serializations"), r("serializations"), r("throttled"), r("rotations"),
                st("cap_preemptions"), st("invalid_hints"),
            )),
            Line::from(format!(
                "max throttle wait {:.3} ms  watchdog margin {:.1} s",
                st("max_throttle_wait_ns") as f64 / 1e6,
                30.0 - st("max_throttle_wait_ns") as f64 / 1e9
            )),
        ];
        f.render_widget(
            Paragraph::new(head_text).block(Block::default().borders(Borders::TOP).title(format!(
                " tailctl top  every {:.1}s ",
                self.interval.as_secs_f64()
            ))),
            head,
        );

        let bold = Style::default().add_modifier(Modifier::BOLD);
        let svc_rows: Vec<Row> = self
            .snap
            .services
            .iter()
            .filter(|s| self.service_visible(s.slot))
            .map(|s| {
                let h = s
                    .region
                    .as_ref()
                    .map(|r| r.header.clone())
                    .unwrap_or_default();
                let g = |k: &str| h.get(k).copied().unwrap_or(0).to_string();
                Row::new(vec![
                    s.slot.to_string(),
                    s.pid.to_string(),
                    s.comm.clone(),
                    s.priority_label(),
                    s.desire.to_string(),
                    s.allot_label(),
                    s.used_label(),
                    self.job_cores
                        .get(&(s.slot, s.pid))
                        .map_or("-".into(), |c| format!("{c:.2}")),
                    self.job_eff
                        .get(&(s.slot, s.pid))
                        .map_or("-".into(), |e| format!("{e:.2}")),
                    g("active"),
                    g("busy_workers"),
                    g("stealable"),
                    g("worker_count"),
                    g("completed"),
                    g("kernel_serialized"),
                    format!("{:.2}ms", s.threshold_at(s.active()) as f64 / 1e6),
                ])
            })
            .collect();
        f.render_widget(
            Table::new(
                svc_rows,
                [3, 8, 16, 6, 6, 6, 5, 6, 4, 7, 5, 6, 8, 10, 5, 10].map(Constraint::Length),
            )
            .header(
                Row::new([
                    "svc",
                    "pid",
                    "comm",
                    "prio",
                    "desire",
                    "allot",
                    "used",
                    "cores",
                    "eff",
                    "active",
                    "busy",
                    "steal",
                    "workers",
                    "completed",
                    "kser",
                    "threshold",
                ])
                .style(bold),
            )
            .block(Block::default().borders(Borders::TOP).title(format!(
                " services ({}) — priority level (3 normal), desire, allotment, threads on CPUs now (+borrowed), cores used, efficiency (working share of its CPU time); desire inputs: busy workers, stealable tasks ",
                self.snap.services.len()
            ))),
            svcs,
        );

        let mut reqs_v: Vec<_> = self
            .snap
            .requests
            .iter()
            .filter(|q| self.service_visible(q.service))
            .filter(|q| !self.serialized_only || q.serialized || q.kernel_serialized)
            .collect();
        reqs_v.sort_by(|a, b| {
            let o = match self.sort {
                SortKey::Progress => b
                    .progress()
                    .unwrap_or(0.0)
                    .total_cmp(&a.progress().unwrap_or(0.0)),
                SortKey::Work => b.work_ns.cmp(&a.work_ns),
                SortKey::Id => a.id.cmp(&b.id),
                SortKey::Service => (a.service, a.slot).cmp(&(b.service, b.slot)),
            };
            if self.reverse {
                o.reverse()
            } else {
                o
            }
        });
        let req_rows: Vec<Row> = reqs_v
            .iter()
            .map(|q| {
                let row = Row::new(vec![
                    q.service.to_string(),
                    q.slot.to_string(),
                    q.id.to_string(),
                    q.state.to_string(),
                    if q.serialized {
                        "SERIALIZED".into()
                    } else {
                        "-".into()
                    },
                    format!("{:.3}", q.work_ns as f64 / 1e6),
                    format!("{:.3}", q.threshold_ns as f64 / 1e6),
                    q.progress()
                        .map(|p| format!("{:.0}%", p * 100.0))
                        .unwrap_or_else(|| "-".into()),
                    q.running.to_string(),
                    if q.alloc == 0 {
                        "-".into()
                    } else {
                        q.alloc.to_string()
                    },
                    q.waiting.to_string(),
                ]);
                if q.serialized || q.kernel_serialized {
                    row.style(bold)
                } else {
                    row
                }
            })
            .collect();
        f.render_widget(
            Table::new(
                req_rows,
                [3, 5, 10, 8, 12, 12, 12, 9, 4, 6, 5].map(Constraint::Length),
            )
            .header(
                Row::new([
                    "svc",
                    "slot",
                    "id",
                    "state",
                    "serialized",
                    "kwork ms",
                    "thresh ms",
                    "progress",
                    "run",
                    "alloc",
                    "wait",
                ])
                .style(bold),
            )
            .block(Block::default().borders(Borders::TOP).title(format!(
                " requests ({}) sort: {}{}{} ",
                reqs_v.len(),
                self.sort.name(),
                if self.reverse { " (reversed)" } else { "" },
                if self.serialized_only {
                    ", serialized only"
                } else {
                    ""
                }
            ))),
            reqs,
        );

        let cpu_lines: Vec<Line> = self
            .snap
            .cpus
            .chunks(4)
            .map(|ch| {
                Line::from(
                    ch.iter()
                        .map(|c| {
                            let w = match c.request {
                                Some((s, rs)) => format!(
                                    "svc{s} req {rs}:{}",
                                    self.snap.request(s, rs).map_or(0, |r| r.id)
                                ),
                                None => "-".into(),
                            };
                            format!("cpu{:<3} {:<24}", c.cpu, w)
                        })
                        .collect::<String>(),
                )
            })
            .collect();
        f.render_widget(
            Paragraph::new(cpu_lines).block(
                Block::default()
                    .borders(Borders::TOP)
                    .title(" cpus: registered request running there ('-': other tasks or idle) "),
            ),
            cpus,
        );

        let status_text = if self.editing_filter {
            format!("filter service (pid/comm/slot): {}_", self.filter)
        } else if let Some(e) = &self.error {
            format!("read failed (retrying): {e}")
        } else {
            format!(
                "q quit  s sort  r reverse  z serialized only  / filter{}  +/- interval",
                if self.filter.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", self.filter)
                }
            )
        };
        f.render_widget(Paragraph::new(status_text), status);
    }
}

/// `--interval`: seconds, clamped to 0.1..=60; NaN, infinities and values
/// ≤ 0 are errors (a clamped NaN stays NaN, which no `Duration` can hold).
fn parse_interval(s: &str) -> Result<Duration, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(x.is_finite() && x > 0.0) {
        return Err(format!(
            "`{s}`: the interval must be a finite number of seconds > 0"
        ));
    }
    Duration::try_from_secs_f64(x.clamp(0.1, 60.0)).map_err(|e| format!("`{s}`: {e}"))
}

pub fn run(args: Args) -> Result<()> {
    // The first reading happens before the screen is taken over, so "not
    // loaded", "no pins" and "not root" are printed as plain errors.
    let snap = Snapshot::read(&args.pin_dir)?;
    if args.once {
        print!("{}", snap.render_services(false));
        print!("{}", snap.render_requests(false));
        print!("{}", snap.render_workers());
        print!("{}", snap.render_cpus());
        return Ok(());
    }
    let mut app = App {
        prev_stats: snap.stats.clone(),
        prev_job_cpu: snap
            .services
            .iter()
            .filter_map(|v| Some(((v.slot, v.pid), v.job.as_ref()?.cpu_ns)))
            .collect(),
        job_cores: BTreeMap::new(),
        prev_job_split: BTreeMap::new(),
        job_eff: BTreeMap::new(),
        snap,
        rates: BTreeMap::new(),
        last_read: Instant::now(),
        error: None,
        sort: SortKey::Progress,
        reverse: false,
        serialized_only: false,
        filter: String::new(),
        editing_filter: false,
        interval: args.interval,
    };
    // ratatui::try_init installs a panic hook that restores the terminal;
    // restore() below covers every other way out.
    let mut term = ratatui::try_init()?;
    let res = (|| -> Result<()> {
        let mut next = Instant::now() + app.interval;
        loop {
            term.draw(|f| app.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press && !app.key(k.code, k.modifiers) {
                        return Ok(());
                    }
                }
            }
            if Instant::now() >= next {
                app.refresh(&args.pin_dir);
                next = Instant::now() + app.interval;
            }
        }
    })();
    ratatui::restore();
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_clamped_and_must_be_a_finite_positive_number() {
        assert_eq!(parse_interval("1").unwrap(), Duration::from_secs(1));
        let min = parse_interval("0.01").unwrap().as_secs_f64();
        assert!((min - 0.1).abs() < 1e-9, "{min}");
        assert_eq!(parse_interval("1e9").unwrap(), Duration::from_secs(60));
        for bad in ["nan", "inf", "-inf", "0", "-1", "x"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
