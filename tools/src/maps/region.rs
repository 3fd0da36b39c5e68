//! One consistent-enough reading of everything tailctl publishes, joined into
//! services -> requests/workers, for `tailctl maps dump` and `tailctl top`.
//!
//! The regions are maps the daemon creates for each service without BTF, so
//! they are decoded with tailctl-rt's field table (`region_layout()`, which a
//! test keeps equal to intf.h) rather than by hand-written offsets here. The
//! pinned maps (services, req_acct, cpu_runs, stats) go through their BTF.
//! Reads are not atomic across maps (the runtime and kernel keep writing), so
//! joins are validated: an accounting entry counts for a request only if its
//! tag (generation << 32 | slot) matches, a CPU's entry only if it names a
//! live request.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde_json::{json, Value};
use tailctl_rt::shared_state as ss;

use super::{btf, dump_json, open, sum_stats};

pub const MAX_REQUESTS: usize = ss::MAX_REQUESTS;
pub const MAX_WORKERS: usize = ss::MAX_WORKERS;
const NO_TAG: u64 = u64::MAX;
/// req_acct's live counters (holders, waiting, ...) are words of
/// epoch << 16 | count (TAILCTL_ACCT_COUNT_MASK in bpf/intf.h): the count.
/// Of `runners` (running, unheld, arriving, epoch: 16 bits each) it is the
/// running count.
pub fn acct_count(word: u64) -> u64 {
    word & 0xffff
}
/// `services.pid` of a cgroup job (scx_tailctl --job) in slot s is this + s
/// (TAILCTL_CGROUP_JOB_PID in bpf/intf.h).
const CGROUP_JOB_PID: u32 = 0x8000_0000;

/// Named u64 fields of one struct instance.
pub type Fields = BTreeMap<&'static str, u64>;

/// A threshold table as runs of equal entries, "q1-4 2.00ms q5-256 1.50ms",
/// at most `max_runs` runs (tables are mostly long flat stretches).
pub fn threshold_ranges(t: &[u64], max_runs: usize) -> String {
    let mut runs: Vec<(usize, usize, u64)> = Vec::new();
    for (i, v) in t.iter().enumerate() {
        match runs.last_mut() {
            Some(r) if r.2 == *v => r.1 = i + 1,
            _ => runs.push((i + 1, i + 1, *v)),
        }
    }
    let mut out: Vec<String> = runs
        .iter()
        .take(max_runs)
        .map(|&(a, b, v)| {
            let q = if a == b {
                format!("q{a}")
            } else {
                format!("q{a}-{b}")
            };
            if v == 0 {
                format!("{q} never")
            } else {
                format!("{q} {:.2}ms", v as f64 / 1e6)
            }
        })
        .collect();
    if runs.len() > max_runs {
        out.push(format!("... ({} runs, -a for all)", runs.len()));
    }
    out.join(" ")
}

/// A service's region, decoded.
#[derive(Clone, Debug, Default)]
pub struct Region {
    pub header: Fields,
    pub workers: Vec<Fields>,
    /// Request slots that are not free, with their slot index.
    pub requests: Vec<(usize, Fields)>,
}

/// Decode `struct_name` at `base` in `bytes` with the layout table.
fn decode_struct(layout: &[ss::FieldLayout], name: &str, bytes: &[u8], base: usize) -> Fields {
    let mut f = Fields::new();
    for &(s, field, off, size) in layout {
        if s != name || field.starts_with('<') {
            continue;
        }
        let v = bytes
            .get(base + off..base + off + size)
            .map(|b| btf::le(b, size).unwrap_or(0))
            .unwrap_or(0);
        f.insert(field, v);
    }
    f
}

fn layout_of(layout: &[ss::FieldLayout], s: &str, f: &str) -> (usize, usize) {
    layout
        .iter()
        .find(|l| l.0 == s && l.1 == f)
        .map(|l| (l.2, l.3))
        .unwrap_or((0, 0))
}

/// Decode a region's bytes (one `struct tailctl_region`).
pub fn decode_region(bytes: &[u8]) -> Result<Region> {
    let layout = ss::region_layout();
    let (_, total) = layout_of(&layout, "tailctl_region", "<size>");
    if bytes.len() < total {
        bail!("region is {} bytes, expected {total}", bytes.len());
    }
    let header = decode_struct(&layout, "tailctl_header", bytes, 0);
    if header.get("magic") != Some(&(ss::REGION_MAGIC as u64)) {
        bail!(
            "region magic is 0x{:x}, expected 0x{:x} (not initialised by tailctl-rt)",
            header.get("magic").unwrap_or(&0),
            ss::REGION_MAGIC
        );
    }
    let (woff, _) = layout_of(&layout, "tailctl_region", "workers");
    let (wsize, _) = (layout_of(&layout, "tailctl_worker_slot", "<size>").1, 0);
    let (roff, _) = layout_of(&layout, "tailctl_region", "requests");
    let rsize = layout_of(&layout, "tailctl_request_slot", "<size>").1;
    let nworkers = (header["worker_count"] as usize).min(MAX_WORKERS);
    let workers = (0..nworkers)
        .map(|i| decode_struct(&layout, "tailctl_worker_slot", bytes, woff + i * wsize))
        .collect();
    let requests = (0..MAX_REQUESTS)
        .map(|i| {
            (
                i,
                decode_struct(&layout, "tailctl_request_slot", bytes, roff + i * rsize),
            )
        })
        .filter(|(_, r)| r["state"] != ss::REQ_FREE as u64)
        .collect();
    Ok(Region {
        header,
        workers,
        requests,
    })
}

/// A request of a service with the kernel's view joined in.
#[derive(Clone, Debug)]
pub struct Request {
    pub service: usize,
    pub slot: usize,
    pub id: u64,
    pub state: &'static str,
    pub serialized: bool,
    /// The kernel's own record says it serialized the request (req_acct.serialized_at_ns).
    pub kernel_serialized: bool,
    /// CPU time the kernel charged (req_acct when its tag matches, else the region's copy).
    pub work_ns: u64,
    /// The threshold at the service's current active count (0: never serialize).
    pub threshold_ns: u64,
    /// Threads running it now: the CPUs that name it in `cpu_runs` (most starts count nowhere
    /// else); without that map, the kernel's runner count.
    pub running: u64,
    pub alloc: u64,
    pub waiting: u64,
    pub throttled: u64,
}

impl Request {
    /// SERIALIZED when the region's flag is set (what the runtime obeys);
    /// "kernel-only" when only the kernel's accounting says so (the flag was
    /// not set yet, or was cleared); "-" otherwise.
    pub fn serialized_label(&self) -> &'static str {
        match (self.serialized, self.kernel_serialized) {
            (true, _) => "SERIALIZED",
            (false, true) => "kernel-only",
            _ => "-",
        }
    }

    /// Work as a fraction of the threshold (None when there is no threshold).
    pub fn progress(&self) -> Option<f64> {
        (self.threshold_ns > 0).then(|| self.work_ns as f64 / self.threshold_ns as f64)
    }
}

/// A registered service.
#[derive(Clone, Debug, Default)]
pub struct Service {
    pub slot: usize,
    pub pid: u64,
    pub uid: u64,
    pub allot: u64,
    /// Priority level (issue 13), None from a scheduler without levels.
    pub priority: Option<u64>,
    /// The demand the allotment controller saw (busy workers + stealable, at most the workers).
    pub desire: u64,
    /// The kernel's accounting of the service as a job (job_acct), if the scheduler has it.
    pub job: Option<JobFigures>,
    pub comm: String,
    pub thresholds: Vec<u64>,
    pub inner_map_id: u32,
    pub region: Option<Region>,
    pub region_error: Option<String>,
}

/// A service's core-allotment figures, from the kernel's job_acct entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobFigures {
    /// CPU time of the job's threads, and the part on borrowed CPUs (ns).
    pub cpu_ns: u64,
    pub borrowed_ns: u64,
    /// CPU time of the job's threads while working and while not (stealing, or
    /// parked), as the kernel splits it by the worker states in the region (ns).
    pub work_ns: u64,
    pub steal_ns: u64,
    /// Threads on a CPU within the allotment / on borrowed CPUs / waiting for a token.
    pub running: u64,
    pub borrowing: u64,
    pub waiting: u64,
    pub reallocs: u64,
    /// Mean decision-to-enforcement latency (us), if any decision was enforced.
    pub lat_mean_us: Option<f64>,
}

/// SAWS's and AMCilk's efficiency: the share of a job's CPU time spent working
/// (not stealing), from two readings of its working and stealing time, `None`
/// when it did neither in between (see the unit test `efficiency_over_a_window`).
pub fn efficiency(before: (u64, u64), after: (u64, u64)) -> Option<f64> {
    let work = after.0.saturating_sub(before.0) as f64;
    let steal = after.1.saturating_sub(before.1) as f64;
    (work + steal > 0.0).then(|| work / (work + steal))
}

impl JobFigures {
    /// Efficiency over the job's life so far (see [`efficiency`]), as "0.93" or "-".
    pub fn efficiency_label(&self) -> String {
        efficiency((0, 0), (self.work_ns, self.steal_ns)).map_or("-".into(), |e| format!("{e:.2}"))
    }

    /// Cores in use now, as "within+borrowed": two threads within the
    /// allotment and one on a borrowed CPU read
    ///
    /// ```text
    /// 2+1
    /// ```
    pub fn used_label(&self) -> String {
        if self.borrowing > 0 {
            format!("{}+{}", self.running, self.borrowing)
        } else {
            self.running.to_string()
        }
    }
}

impl Service {
    /// The priority level as operators read it: 3 is normal ("3=normal"), "-" unknown.
    pub fn priority_label(&self) -> String {
        match self.priority {
            None => "-".into(),
            Some(3) => "3=norm".into(),
            Some(p) => p.to_string(),
        }
    }

    /// The allotment as operators read it: 0 means "all CPUs".
    pub fn allot_label(&self) -> String {
        if self.allot == 0 {
            "all".into()
        } else {
            self.allot.to_string()
        }
    }
}

impl Service {
    /// The job's threads on a CPU ("within+borrowed"), or "-" with no
    /// allotment: the kernel counts them only under an allotment controller
    /// (its CPU time, `cpu_ns`, is kept either way).
    pub fn used_label(&self) -> String {
        match &self.job {
            Some(j) if self.allot > 0 => j.used_label(),
            _ => "-".into(),
        }
    }
    pub fn active(&self) -> u64 {
        self.region.as_ref().map_or(0, |r| r.header["active"])
    }
    /// Threshold for q active requests (q clamped to the table).
    pub fn threshold_at(&self, q: u64) -> u64 {
        if self.thresholds.is_empty() {
            return 0;
        }
        let i = (q.max(1) as usize).min(self.thresholds.len()) - 1;
        self.thresholds[i]
    }
}

/// What one CPU runs, when it is a registered worker on a request.
#[derive(Clone, Debug)]
pub struct CpuRun {
    pub cpu: usize,
    /// (service slot, request slot) when the entry names a live request.
    pub request: Option<(usize, usize)>,
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub services: Vec<Service>,
    pub requests: Vec<Request>,
    pub cpus: Vec<CpuRun>,
    pub stats: BTreeMap<String, u64>,
}

fn state_name(s: u64) -> &'static str {
    match s as u32 {
        ss::REQ_QUEUED => "queued",
        ss::REQ_RUNNING => "running",
        ss::REQ_FREE => "free",
        _ => "?",
    }
}

fn worker_state(s: u64) -> &'static str {
    match s as u32 {
        ss::WORKER_WORKING => "working",
        ss::WORKER_STEALING => "stealing",
        ss::WORKER_PARKED => "parked",
        _ => "?",
    }
}

fn comm(pid: u64) -> String {
    // A cgroup job (scx_tailctl --job): its slot has no process.
    if pid >= u64::from(CGROUP_JOB_PID) {
        return format!("cgroup-job-{}", pid - u64::from(CGROUP_JOB_PID));
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

impl Snapshot {
    /// Read every pinned map under `pin_dir` and the services' regions.
    pub fn read(pin_dir: &Path) -> Result<Self> {
        let services_map = open(pin_dir, "services")?;
        let regions_map = open(pin_dir, "regions")?;
        let acct_map = open(pin_dir, "req_acct")?;
        let acct_btf = btf::Btf::from_kernel_id(acct_map.info.btf_id)?;
        // job_acct is pinned by schedulers with core allotments only.
        let jobs: BTreeMap<u64, serde_json::Value> = open(pin_dir, "job_acct")
            .ok()
            .and_then(|m| dump_json(&m).ok())
            .map(|es| {
                es.into_iter()
                    .map(|e| (e["key"].as_u64().unwrap_or(u64::MAX), e["value"].clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut snap = Snapshot::default();
        for e in dump_json(&services_map)? {
            let v = &e["value"];
            let pid = v["pid"].as_u64().unwrap_or(0);
            if pid == 0 {
                continue;
            }
            let slot = e["key"].as_u64().unwrap_or(0) as usize;
            let nr = v["nr_thresholds"].as_u64().unwrap_or(0) as usize;
            let thresholds: Vec<u64> = v["threshold_ns"]
                .as_array()
                .map(|a| a.iter().take(nr).map(|x| x.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default();
            let mut svc = Service {
                slot,
                pid,
                uid: v["uid"].as_u64().unwrap_or(0),
                allot: v["allot"].as_u64().unwrap_or(0),
                priority: v["priority"].as_u64(),
                desire: v["desire"].as_u64().unwrap_or(0),
                job: jobs
                    .get(&(slot as u64))
                    .filter(|j| {
                        j["owner"].as_u64() == Some((v["epoch"].as_u64().unwrap_or(0) << 32) + pid)
                    })
                    .map(|j| {
                        let g = |k: &str| j[k].as_u64().unwrap_or(0);
                        JobFigures {
                            cpu_ns: g("cpu_ns"),
                            borrowed_ns: g("borrowed_ns"),
                            work_ns: g("work_ns"),
                            steal_ns: g("steal_ns"),
                            running: g("running"),
                            borrowing: g("borrowing"),
                            waiting: g("waiting"),
                            reallocs: g("reallocs"),
                            lat_mean_us: (g("lat_count") > 0)
                                .then(|| g("lat_sum_ns") as f64 / g("lat_count") as f64 / 1e3),
                        }
                    }),
                comm: comm(pid),
                thresholds,
                ..Default::default()
            };
            match read_region(&regions_map.handle, slot) {
                // A cgroup job has no region by design.
                Err(_) if pid >= u64::from(CGROUP_JOB_PID) => {}
                Ok((id, r)) => {
                    svc.inner_map_id = id;
                    svc.region = Some(r);
                }
                Err(e) => svc.region_error = Some(format!("{e:#}")),
            }
            if let Some(r) = &svc.region {
                let thr = svc.threshold_at(r.header["active"]);
                for (rs, f) in &r.requests {
                    let tag = (f["generation"] << 32) | *rs as u64;
                    let idx = (slot * MAX_REQUESTS + rs) as u32;
                    let acct = acct_map
                        .handle
                        .lookup(&idx.to_ne_bytes(), MapFlags::ANY)
                        .ok()
                        .flatten()
                        .and_then(|b| acct_btf.decode(acct_map.info.btf_value_type_id, &b).ok())
                        .filter(|a| a["tag"].as_u64() == Some(tag));
                    let a = |k: &str| acct.as_ref().and_then(|a| a[k].as_u64());
                    snap.requests.push(Request {
                        service: slot,
                        slot: *rs,
                        id: f["id"],
                        state: state_name(f["state"]),
                        serialized: f["flags"] & ss::FLAG_SERIALIZED as u64 != 0,
                        kernel_serialized: a("serialized_at_ns").unwrap_or(0) != 0,
                        work_ns: a("work_ns").unwrap_or(f["kernel_work_ns"]),
                        threshold_ns: thr,
                        running: a("runners").map(acct_count).unwrap_or(f["kernel_running"]),
                        alloc: a("alloc").unwrap_or(f["kernel_alloc"]),
                        waiting: a("waiting").map(acct_count).unwrap_or(0),
                        throttled: a("throttled").unwrap_or(0),
                    });
                }
            }
            snap.services.push(svc);
        }
        // cpu_runs is pinned by newer schedulers only; without it there is no per-CPU view.
        if let Ok(cpu_map) = open(pin_dir, "cpu_runs") {
            let ncpu = libbpf_rs::num_possible_cpus().unwrap_or(0);
            let b = btf::Btf::from_kernel_id(cpu_map.info.btf_id)?;
            for cpu in 0..ncpu {
                let Some(bytes) = cpu_map
                    .handle
                    .lookup(&(cpu as u32).to_ne_bytes(), MapFlags::ANY)?
                else {
                    continue;
                };
                let v = b.decode(cpu_map.info.btf_value_type_id, &bytes)?;
                let tag = v["tag"].as_u64().unwrap_or(NO_TAG);
                let idx = v["acct_idx"].as_u64().unwrap_or(0) as usize;
                let (s, rs) = (idx / MAX_REQUESTS, idx % MAX_REQUESTS);
                // Only a tag naming a live request of a registered service counts
                // (the array starts zeroed, and entries go stale between reads).
                let live = tag != NO_TAG
                    && tag & 0xffff_ffff == rs as u64
                    && snap.services.iter().any(|svc| {
                        svc.slot == s
                            && svc.region.as_ref().is_some_and(|r| {
                                r.requests
                                    .iter()
                                    .any(|(i, f)| *i == rs && f["generation"] == tag >> 32)
                            })
                    });
                snap.cpus.push(CpuRun {
                    cpu,
                    request: live.then_some((s, rs)),
                });
            }
            for req in &mut snap.requests {
                let key = Some((req.service, req.slot));
                req.running = snap.cpus.iter().filter(|c| c.request == key).count() as u64;
            }
        }
        if let Ok(stats) = open(pin_dir, "stats") {
            snap.stats = sum_stats(&dump_json(&stats)?);
        }
        Ok(snap)
    }

    pub fn service(&self, slot: usize) -> Option<&Service> {
        self.services.iter().find(|s| s.slot == slot)
    }

    pub fn request(&self, service: usize, slot: usize) -> Option<&Request> {
        self.requests
            .iter()
            .find(|r| r.service == service && r.slot == slot)
    }

    /// `dump regions --json`: one entry per registered service, bpftool-like keys.
    pub fn regions_json(&self) -> Value {
        Value::Array(
            self.services
                .iter()
                .map(|s| {
                    let r = s.region.clone().unwrap_or_default();
                    json!({
                        "key": s.slot,
                        "inner_map_id": s.inner_map_id,
                        "value": {
                            "header": r.header,
                            "workers": r.workers,
                            "requests": r.requests.iter().map(|(i, f)| {
                                let mut o = json!(f);
                                o["slot"] = json!(i);
                                o
                            }).collect::<Vec<_>>(),
                        },
                        "error": s.region_error,
                    })
                })
                .collect(),
        )
    }

    pub fn render_services(&self, all: bool) -> String {
        let mut s = String::from("SERVICES\n");
        let _ = writeln!(
            s,
            "{:>4} {:>7} {:<15} {:>5} {:>6} {:>6} {:>5} {:>5} {:>8} {:>4} {:>7} {:>6} {:>5} {:>5} {:>9} {:>6} {:>6} {:<6} thresholds (q=1..)",
            "slot",
            "pid",
            "comm",
            "uid",
            "prio",
            "desire",
            "allot",
            "used",
            "cpu_s",
            "eff",
            "realloc",
            "active",
            "busy",
            "steal",
            "completed",
            "ser",
            "kser",
            "mode"
        );
        for svc in &self.services {
            let h = svc
                .region
                .as_ref()
                .map(|r| r.header.clone())
                .unwrap_or_default();
            let g = |k: &str| h.get(k).copied().unwrap_or(0);
            let thr = threshold_ranges(&svc.thresholds, if all { usize::MAX } else { 6 });
            let j = svc.job.clone().unwrap_or_default();
            let _ = writeln!(
                s,
                "{:>4} {:>7} {:<15} {:>5} {:>6} {:>6} {:>5} {:>5} {:>8.2} {:>4} {:>7} {:>6} {:>5} {:>5} {:>9} {:>6} {:>6} {:<6} {}",
                svc.slot,
                svc.pid,
                svc.comm,
                svc.uid,
                svc.priority_label(),
                svc.desire,
                svc.allot_label(),
                svc.used_label(),
                j.cpu_ns as f64 / 1e9,
                j.efficiency_label(),
                j.reallocs,
                g("active"),
                g("busy_workers"),
                g("stealable"),
                g("completed"),
                g("serialized"),
                g("kernel_serialized"),
                if g("mode") == ss::MODE_KERNEL as u64 {
                    "kernel"
                } else {
                    "user"
                },
                thr
            );
            if let Some(e) = &svc.region_error {
                let _ = writeln!(s, "     region: {e}");
            }
        }
        s
    }

    pub fn render_requests(&self, _all: bool) -> String {
        let mut s = String::from("REQUESTS\n");
        let _ = writeln!(
            s,
            "{:>4} {:>5} {:>10} {:<8} {:<10} {:>11} {:>11} {:>8} {:>4} {:>5} {:>4} {:>8}",
            "svc",
            "slot",
            "id",
            "state",
            "serialized",
            "kwork_ms",
            "thresh_ms",
            "progress",
            "run",
            "alloc",
            "wait",
            "throttled"
        );
        for r in &self.requests {
            let _ =
                writeln!(
                s,
                "{:>4} {:>5} {:>10} {:<8} {:<10} {:>11.3} {:>11.3} {:>8} {:>4} {:>5} {:>4} {:>8}",
                r.service,
                r.slot,
                r.id,
                r.state,
                r.serialized_label(),
                r.work_ns as f64 / 1e6,
                r.threshold_ns as f64 / 1e6,
                r.progress()
                    .map(|p| format!("{:.0}%", p * 100.0))
                    .unwrap_or_else(|| "-".into()),
                r.running,
                if r.alloc == 0 { "-".into() } else { r.alloc.to_string() },
                r.waiting,
                r.throttled
            );
        }
        s
    }

    pub fn render_workers(&self) -> String {
        let mut s = String::from("WORKERS\n");
        let _ = writeln!(
            s,
            "{:>4} {:>6} {:>8} {:<8} {:>16} {:>8} {:>11}",
            "svc", "worker", "tid", "state", "request(slot:id)", "steals", "kwork_ms"
        );
        for svc in &self.services {
            let Some(r) = &svc.region else { continue };
            for (i, w) in r.workers.iter().enumerate() {
                let cur = w["current"];
                let req = if cur == ss::NO_REQUEST {
                    "-".to_string()
                } else {
                    let rs = (cur & 0xffff_ffff) as usize;
                    match self.request(svc.slot, rs) {
                        Some(q) => format!("{rs}:{}", q.id),
                        None => format!("{rs}:?"),
                    }
                };
                let _ = writeln!(
                    s,
                    "{:>4} {:>6} {:>8} {:<8} {:>16} {:>8} {:>11.3}",
                    svc.slot,
                    i,
                    w["tid"],
                    worker_state(w["state"]),
                    req,
                    w["steals"],
                    w["kernel_work_ns"] as f64 / 1e6
                );
            }
        }
        s
    }

    pub fn render_cpus(&self) -> String {
        let mut s = String::from("CPUS\n");
        for c in &self.cpus {
            let _ = writeln!(s, "cpu {:>3}  {}", c.cpu, self.who(c));
        }
        s
    }

    /// "svc 0 (pid 123 comm) request 5:42" or "-" for a CPU.
    pub fn who(&self, c: &CpuRun) -> String {
        match c.request {
            Some((sv, rs)) => {
                let svc = self.service(sv);
                format!(
                    "svc {sv} (pid {} {}) request {rs}:{}",
                    svc.map_or(0, |s| s.pid),
                    svc.map_or("?", |s| s.comm.as_str()),
                    self.request(sv, rs).map_or(0, |r| r.id)
                )
            }
            None => "-".into(),
        }
    }
}

/// The region map of service `slot`: its inner map id, then its one element.
fn read_region(regions: &MapHandle, slot: usize) -> Result<(u32, Region)> {
    let id_bytes = regions
        .lookup(&(slot as u32).to_ne_bytes(), MapFlags::ANY)
        .context("reading the regions map")?
        .context("no region map for this service")?;
    let id = u32::from_ne_bytes(id_bytes[..4].try_into()?);
    let inner =
        MapHandle::from_map_id(id).with_context(|| format!("opening region map id {id}"))?;
    let bytes = inner
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .context("region map has no element 0")?;
    Ok((id, decode_region(&bytes)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_over_a_window() {
        // 30 ms working and 10 ms stealing since the last reading.
        assert_eq!(efficiency((100, 50), (30_000_100, 10_000_050)), Some(0.75));
        assert_eq!(efficiency((7, 7), (7, 7)), None);
        // Counters that went backwards (a new registration in the slot) count as nothing.
        assert_eq!(efficiency((9, 9), (1, 1)), None);
        let j = JobFigures {
            work_ns: 9,
            steal_ns: 1,
            ..Default::default()
        };
        assert_eq!(j.efficiency_label(), "0.90");
        assert_eq!(JobFigures::default().efficiency_label(), "-");
    }

    #[test]
    fn used_shows_a_dash_without_an_allotment() {
        let job = JobFigures {
            running: 2,
            borrowing: 1,
            ..Default::default()
        };
        let mut s = Service {
            job: Some(job),
            ..Default::default()
        };
        // No allotment (always so without a controller): the kernel does not count them.
        assert_eq!(s.used_label(), "-");
        s.allot = 2;
        assert_eq!(s.used_label(), "2+1");
        s.job = None;
        assert_eq!(s.used_label(), "-");
    }

    fn put(bytes: &mut [u8], off: usize, size: usize, v: u64) {
        bytes[off..off + size].copy_from_slice(&v.to_le_bytes()[..size]);
    }

    /// Region bytes with one worker on request slot 5 (generation 2, serialized).
    fn sample() -> Vec<u8> {
        let l = ss::region_layout();
        let f = |s: &str, n: &str| layout_of(&l, s, n);
        let mut b = vec![0u8; f("tailctl_region", "<size>").1];
        let set = |b: &mut Vec<u8>, base: usize, s: &str, n: &str, v: u64| {
            let (o, z) = f(s, n);
            put(b, base + o, z, v)
        };
        set(
            &mut b,
            0,
            "tailctl_header",
            "magic",
            ss::REGION_MAGIC as u64,
        );
        set(&mut b, 0, "tailctl_header", "worker_count", 2);
        set(&mut b, 0, "tailctl_header", "active", 3);
        let (woff, _) = f("tailctl_region", "workers");
        let wsz = f("tailctl_worker_slot", "<size>").1;
        set(
            &mut b,
            woff + wsz,
            "tailctl_worker_slot",
            "current",
            (2 << 32) | 5,
        );
        set(&mut b, woff + wsz, "tailctl_worker_slot", "tid", 4242);
        set(
            &mut b,
            woff,
            "tailctl_worker_slot",
            "current",
            ss::NO_REQUEST,
        );
        let (roff, _) = f("tailctl_region", "requests");
        let rsz = f("tailctl_request_slot", "<size>").1;
        let r = roff + 5 * rsz;
        set(&mut b, r, "tailctl_request_slot", "id", 99);
        set(&mut b, r, "tailctl_request_slot", "generation", 2);
        set(
            &mut b,
            r,
            "tailctl_request_slot",
            "flags",
            ss::FLAG_SERIALIZED as u64,
        );
        set(
            &mut b,
            r,
            "tailctl_request_slot",
            "state",
            ss::REQ_RUNNING as u64,
        );
        set(
            &mut b,
            r,
            "tailctl_request_slot",
            "kernel_work_ns",
            7_000_000,
        );
        set(&mut b, r, "tailctl_request_slot", "kernel_running", 1);
        b
    }

    #[test]
    fn decodes_header_workers_and_live_requests() {
        let r = decode_region(&sample()).unwrap();
        assert_eq!(r.header["active"], 3);
        assert_eq!(r.workers.len(), 2);
        assert_eq!(r.workers[1]["tid"], 4242);
        assert_eq!(r.workers[1]["current"], (2 << 32) | 5);
        assert_eq!(r.requests.len(), 1, "free slots are skipped");
        let (slot, q) = &r.requests[0];
        assert_eq!(*slot, 5);
        assert_eq!(q["id"], 99);
        assert_eq!(q["generation"], 2);
        assert_eq!(q["flags"], 1);
        assert_eq!(q["kernel_work_ns"], 7_000_000);
    }

    #[test]
    fn threshold_tables_print_as_runs() {
        let t = [2_000_000, 2_000_000, 1_500_000, 0];
        assert_eq!(threshold_ranges(&t, 6), "q1-2 2.00ms q3 1.50ms q4 never");
        assert!(threshold_ranges(&t, 1).contains("3 runs"));
    }

    #[test]
    fn rejects_bad_magic_and_short_regions() {
        let mut b = sample();
        b[0] = 0;
        assert!(decode_region(&b).unwrap_err().to_string().contains("magic"));
        assert!(decode_region(&b[..100])
            .unwrap_err()
            .to_string()
            .contains("bytes"));
    }

    #[test]
    fn renders_progress_against_threshold_at_active_count() {
        let region = decode_region(&sample()).unwrap();
        let svc = Service {
            slot: 0,
            pid: 1,
            comm: "svc".into(),
            thresholds: vec![1_000_000, 2_000_000, 14_000_000],
            region: Some(region),
            ..Default::default()
        };
        assert_eq!(svc.threshold_at(3), 14_000_000);
        assert_eq!(svc.threshold_at(50), 14_000_000, "q past the table clamps");
        let req = Request {
            service: 0,
            slot: 5,
            id: 99,
            state: "running",
            serialized: true,
            kernel_serialized: true,
            work_ns: 7_000_000,
            threshold_ns: svc.threshold_at(svc.active()),
            running: 1,
            alloc: 1,
            waiting: 2,
            throttled: 3,
        };
        assert_eq!(req.progress(), Some(0.5));
        let snap = Snapshot {
            services: vec![svc],
            requests: vec![req],
            cpus: vec![CpuRun {
                cpu: 1,
                request: Some((0, 5)),
            }],
            stats: Default::default(),
        };
        let text = snap.render_requests(false);
        assert!(
            text.contains("SERIALIZED") && text.contains("50%"),
            "{text}"
        );
        let w = snap.render_workers();
        assert!(w.contains("4242") && w.contains("5:99"), "{w}");
        assert!(snap.render_cpus().contains("request 5:99"));
    }
}
