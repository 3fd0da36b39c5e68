//! `tailctl maps`: bpftool-style inspection of scx_tailctl's pinned maps.
//!
//! `list`, `show` and `dump` take a pin name (under `--pin-dir`), a pin path,
//! or a map id, like bpftool. Pinned maps are decoded through their own BTF
//! ([`btf`]), so `dump --json` has the shape of the "formatted" part of
//! `bpftool -j map dump` and the same values; the human views know our maps
//! and add what bpftool cannot: the services' regions (user-created maps
//! without BTF, decoded with tailctl-rt's mirror of intf.h, [`region`]),
//! request progress against the threshold for the service's current number
//! of active requests, the kernel's allocation, SERIALIZED and running
//! threads, each worker's current request, and the threshold tables.
//!
//! Every failure to reach the maps is turned into an operator's sentence
//! ([`access_error`]): not root, scheduler not loaded, pins missing.

pub mod btf;
pub mod region;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use serde_json::{json, Value};

pub use region::Snapshot;

/// Where scx_tailctl pins its maps unless started with another `--pin-dir`.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/tailctl";

#[derive(Parser)]
pub struct Args {
    /// Directory the scheduler pinned its maps in (scx_tailctl --pin-dir).
    #[arg(long, global = true, default_value = DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the pinned maps (id, type, sizes, BTF), like `bpftool map show`.
    List {
        /// One JSON object per map.
        #[arg(long)]
        json: bool,
    },
    /// One map's metadata and its value type's fields.
    Show {
        /// Pin name (e.g. services), pin path, or map id.
        map: String,
        #[arg(long)]
        json: bool,
    },
    /// A map's contents, decoded.
    Dump {
        /// Pin name (stats, services, worker_tids, req_acct, regions, registered, cpu_runs), pin path, or map id.
        map: String,
        /// bpftool-shaped JSON: [{"key": K, "value": V}] (per-CPU maps: "values": [{"cpu", "value"}]),
        /// equal to the "formatted" objects of `bpftool -j map dump`.
        #[arg(long)]
        json: bool,
        /// Also print empty entries and whole threshold tables.
        #[arg(long, short)]
        all: bool,
    },
}

pub fn run(args: Args) -> Result<()> {
    match args.cmd {
        Cmd::List { json } => list(&args.pin_dir, json),
        Cmd::Show { map, json } => show(&args.pin_dir, &map, json),
        Cmd::Dump { map, json, all } => dump(&args.pin_dir, &map, json, all),
    }
}

/// What the kernel says about sched_ext, for error messages.
fn sched_ext_state() -> String {
    let state = std::fs::read_to_string("/sys/kernel/sched_ext/state");
    let ops = std::fs::read_to_string("/sys/kernel/sched_ext/root/ops");
    match (state, ops) {
        (Err(_), _) => "this kernel has no sched_ext: /sys/kernel/sched_ext is missing".into(),
        (Ok(s), Ok(o)) => format!("sched_ext is {}, scheduler '{}'", s.trim(), o.trim()),
        (Ok(s), Err(_)) => format!("sched_ext is {}, no BPF scheduler loaded", s.trim()),
    }
}

/// Turn an error reaching `path` into a sentence saying what is wrong and what to do.
pub fn access_error(path: &Path, err: &std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind;
    let is_root = unsafe { libc::geteuid() } == 0;
    match err.kind() {
        ErrorKind::PermissionDenied => anyhow!(
            "permission denied reading {}: BPF maps and /sys/fs/bpf are root-only \
             (reading them needs CAP_BPF and CAP_SYS_ADMIN){}; run it as root, e.g. with sudo",
            path.display(),
            if is_root {
                ""
            } else {
                ", and you are not root"
            }
        ),
        ErrorKind::NotFound => {
            let st = sched_ext_state();
            if st.contains("'tailctl") {
                anyhow!(
                    "{} does not exist, but scx_tailctl is loaded ({st}): it pins elsewhere \
                     (was it started with --pin-dir? pass the same --pin-dir here)",
                    path.display()
                )
            } else {
                anyhow!(
                    "{} does not exist: scx_tailctl is not running ({st}); start it as root \
                     with `scx_tailctl`, which pins its maps there{}",
                    path.display(),
                    if is_root {
                        ""
                    } else {
                        " (and note that reading the pins needs root)"
                    }
                )
            }
        }
        _ => anyhow!("cannot open {}: {err}", path.display()),
    }
}

/// Check the pin directory before listing it, with the operator's sentence on failure.
pub fn check_pin_dir(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bail!("{} is not a directory", dir.display()),
        Err(e) => Err(access_error(dir, &e)),
    }
}

/// An open map and what it is called.
pub struct Opened {
    pub handle: MapHandle,
    pub pin: Option<PathBuf>,
    pub info: libbpf_sys::bpf_map_info,
}

impl Opened {
    pub fn name(&self) -> String {
        let bytes: Vec<u8> = self
            .info
            .name
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn map_type(&self) -> MapType {
        MapType::from(self.info.type_)
    }
}

fn io_err(e: &libbpf_rs::Error) -> std::io::Error {
    use std::io::ErrorKind as K;
    std::io::Error::from(match e.kind() {
        libbpf_rs::ErrorKind::NotFound => K::NotFound,
        libbpf_rs::ErrorKind::PermissionDenied => K::PermissionDenied,
        _ => K::Other,
    })
}

/// Open a map by id, pin path, or pin name under `pin_dir`.
pub fn open(pin_dir: &Path, what: &str) -> Result<Opened> {
    let (handle, pin) = if let Ok(id) = what.parse::<u32>() {
        let h = MapHandle::from_map_id(id).map_err(|e| match e.kind() {
            libbpf_rs::ErrorKind::NotFound => anyhow!("no BPF map with id {id}"),
            libbpf_rs::ErrorKind::PermissionDenied => {
                access_error(Path::new(&format!("map id {id}")), &io_err(&e))
            }
            _ => anyhow!("opening map id {id}: {e}"),
        })?;
        (h, None)
    } else {
        let path = if what.contains('/') {
            PathBuf::from(what)
        } else {
            check_pin_dir(pin_dir)?;
            pin_dir.join(what)
        };
        // Stat first so a missing pin or a root-only directory gets its own sentence.
        if let Err(e) = std::fs::metadata(&path) {
            if e.kind() == std::io::ErrorKind::NotFound && path.parent().is_some_and(|p| p.is_dir())
            {
                let names = pin_names(path.parent().unwrap()).unwrap_or_default();
                bail!(
                    "no map pinned at {} (pinned there: {})",
                    path.display(),
                    names.join(", ")
                );
            }
            return Err(access_error(&path, &e));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let is_root = unsafe { libc::geteuid() } == 0;
        let h = MapHandle::from_pinned_path(&path)
            .map_err(|e| pinned_open_error(&path, &e, is_root))?;
        (h, Some(path))
    };
    let info = handle
        .info()
        .with_context(|| format!("reading map info of {what}"))?
        .info;
    Ok(Opened { handle, pin, info })
}

/// The sentence for a pin path that exists but would not open as a map. The
/// kernel refuses a file that is not a BPF pin with EACCES even for root, so
/// for root "permission denied … run it as root" would be wrong: it is not
/// a pin.
fn pinned_open_error(path: &Path, e: &libbpf_rs::Error, is_root: bool) -> anyhow::Error {
    match io_err(e).kind() {
        std::io::ErrorKind::Other => anyhow!("opening {}: {e}", path.display()),
        std::io::ErrorKind::PermissionDenied if is_root => anyhow!(
            "{} is not a BPF map pin (it exists, but the kernel will not open it as a \
             pinned map; pins live on a BPF filesystem such as {DEFAULT_PIN_DIR})",
            path.display()
        ),
        _ => access_error(path, &io_err(e)),
    }
}

fn pin_names(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| access_error(dir, &e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

fn type_name(t: MapType) -> String {
    // bpftool's spelling: lower case with underscores.
    let s = format!("{t:?}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out.replace("per_cpu", "percpu")
}

fn meta_json(m: &Opened) -> Value {
    let i = &m.info;
    json!({
        "id": i.id,
        "type": type_name(m.map_type()),
        "name": m.name(),
        "flags": i.map_flags,
        "bytes_key": i.key_size,
        "bytes_value": i.value_size,
        "max_entries": i.max_entries,
        "btf_id": i.btf_id,
        "pinned": m.pin.as_ref().map(|p| p.display().to_string()),
    })
}

fn print_meta(m: &Opened) {
    let i = &m.info;
    println!(
        "{}: {}  name {}  flags 0x{:x}",
        i.id,
        type_name(m.map_type()),
        m.name(),
        i.map_flags
    );
    print!(
        "\tkey {}B  value {}B  max_entries {}",
        i.key_size, i.value_size, i.max_entries
    );
    if i.btf_id != 0 {
        print!("  btf_id {}", i.btf_id);
    }
    println!();
    if let Some(p) = &m.pin {
        println!("\tpinned {}", p.display());
    }
}

fn list(pin_dir: &Path, as_json: bool) -> Result<()> {
    check_pin_dir(pin_dir)?;
    let names = pin_names(pin_dir)?;
    if names.is_empty() {
        bail!(
            "{} is empty: scx_tailctl is not running ({})",
            pin_dir.display(),
            sched_ext_state()
        );
    }
    let mut all = Vec::new();
    for n in names {
        let m = open(pin_dir, &n)?;
        if as_json {
            all.push(meta_json(&m));
        } else {
            print_meta(&m);
        }
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(())
}

fn show(pin_dir: &Path, what: &str, as_json: bool) -> Result<()> {
    let m = open(pin_dir, what)?;
    let btf = load_btf(&m)?;
    let mut meta = meta_json(&m);
    if let Some(b) = &btf {
        meta["key_type"] = json!(b.type_name(m.info.btf_key_type_id));
        meta["value_type"] = json!(b.type_name(m.info.btf_value_type_id));
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&meta)?);
        return Ok(());
    }
    print_meta(&m);
    match &btf {
        Some(b) => {
            println!(
                "\tkey type {}  value type {}",
                b.type_name(m.info.btf_key_type_id),
                b.type_name(m.info.btf_value_type_id)
            );
            // The value's fields, with a zero value to show their shapes.
            let zero = vec![0u8; m.info.value_size as usize];
            if let Ok(Value::Object(fields)) = b.decode(m.info.btf_value_type_id, &zero) {
                for (k, v) in fields {
                    let shape = match v {
                        Value::Array(a) => format!("[{}]", a.len()),
                        _ => String::new(),
                    };
                    println!("\t  .{k}{shape}");
                }
            }
        }
        None if m.name() == "regions" => println!(
            "\tvalues: inner map ids of the services' regions (struct tailctl_region, no BTF: \
             `tailctl maps dump regions` decodes them)"
        ),
        None => println!("\tno BTF"),
    }
    Ok(())
}

fn load_btf(m: &Opened) -> Result<Option<btf::Btf>> {
    if m.info.btf_id == 0 || m.info.btf_value_type_id == 0 {
        return Ok(None);
    }
    Ok(Some(btf::Btf::from_kernel_id(m.info.btf_id)?))
}

/// The keys of a map: 0..max_entries for arrays (bpftool dumps every
/// element of an array), the hash's keys otherwise.
fn keys(m: &Opened) -> Vec<Vec<u8>> {
    match m.map_type() {
        MapType::Array | MapType::PercpuArray | MapType::ArrayOfMaps => (0..m.info.max_entries)
            .map(|k| k.to_ne_bytes().to_vec())
            .collect(),
        _ => m.handle.keys().collect(),
    }
}

fn is_percpu(t: MapType) -> bool {
    matches!(
        t,
        MapType::PercpuArray | MapType::PercpuHash | MapType::LruPercpuHash
    )
}

/// Every entry of a BTF-described map in bpftool's "formatted" shape.
pub fn dump_json(m: &Opened) -> Result<Vec<Value>> {
    let Some(b) = load_btf(m)? else {
        bail!(
            "map {} has no BTF to decode with{}",
            m.name(),
            if m.name() == "regions" {
                " (its values are inner map ids; `tailctl maps dump regions` without --json decodes the regions)"
            } else {
                ""
            }
        );
    };
    let (kt, vt) = (m.info.btf_key_type_id, m.info.btf_value_type_id);
    let mut out = Vec::new();
    for key in keys(m) {
        let k = b.decode(kt, &key)?;
        if is_percpu(m.map_type()) {
            let Some(vals) = m.handle.lookup_percpu(&key, MapFlags::ANY)? else {
                continue;
            };
            let values: Vec<Value> = vals
                .iter()
                .enumerate()
                .map(|(cpu, v)| Ok(json!({"cpu": cpu, "value": b.decode(vt, v)?})))
                .collect::<Result<_>>()?;
            out.push(json!({"key": k, "values": values}));
        } else {
            let Some(v) = m.handle.lookup(&key, MapFlags::ANY)? else {
                continue;
            };
            out.push(json!({"key": k, "value": b.decode(vt, &v)?}));
        }
    }
    Ok(out)
}

fn dump(pin_dir: &Path, what: &str, as_json: bool, all: bool) -> Result<()> {
    let m = open(pin_dir, what)?;
    if m.name() == "regions" {
        // Regions have no BTF: both the text and the JSON come from the snapshot.
        let snap = Snapshot::read(pin_dir)?;
        if as_json {
            println!("{}", serde_json::to_string_pretty(&snap.regions_json())?);
        } else {
            print!("{}", snap.render_services(all));
            print!("{}", snap.render_requests(all));
            print!("{}", snap.render_workers());
        }
        return Ok(());
    }
    let entries = dump_json(&m)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    print_meta(&m);
    match m.name().as_str() {
        "stats" => print!("{}", render_stats(&entries)),
        "services" => print!("{}", Snapshot::read(pin_dir)?.render_services(all)),
        "req_acct" => print!("{}", render_acct(&entries, all)),
        "worker_tids" => {
            let mut rows: Vec<_> = entries
                .iter()
                .map(|e| (e["key"].as_u64().unwrap_or(0), e["value"].clone()))
                .collect();
            rows.sort_by_key(|r| r.0);
            println!("{:>8} {:>7} {:>6}", "tid", "service", "worker");
            for (tid, v) in rows {
                println!("{tid:>8} {:>7} {:>6}", v["service"], v["worker"]);
            }
        }
        "cpu_runs" => print!("{}", Snapshot::read(pin_dir)?.render_cpus()),
        _ => {
            for e in entries {
                if all || !is_zero(&e["value"]) {
                    println!("{}", serde_json::to_string(&e)?);
                }
            }
        }
    }
    Ok(())
}

/// True if every number in `v` is zero (empty array slots are not worth printing).
pub fn is_zero(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.iter().all(is_zero),
        Value::Object(o) => o.values().all(is_zero),
        Value::Bool(b) => !b,
        _ => false,
    }
}

/// Sum the per-CPU stats (maxima for *max* fields) in field order.
pub fn sum_stats(entries: &[Value]) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    for e in entries {
        for cpu in e["values"].as_array().into_iter().flatten() {
            for (k, v) in cpu["value"].as_object().into_iter().flatten() {
                let v = v.as_u64().unwrap_or(0);
                let s = sum.entry(k.clone()).or_insert(0u64);
                *s = if k.starts_with("max_") {
                    (*s).max(v)
                } else {
                    *s + v
                };
            }
        }
    }
    sum
}

fn render_stats(entries: &[Value]) -> String {
    let mut s = String::from("summed over CPUs:\n");
    for (k, v) in sum_stats(entries) {
        s += &format!("  {k:<22} {v}\n");
    }
    s
}

fn render_acct(entries: &[Value], all: bool) -> String {
    let mut s = format!(
        "{:>7} {:>5} {:>4} {:>12} {:>4} {:>7} {:>5} {:>4} {:>8} {:>5} {:>7} {:>4}\n",
        "service",
        "slot",
        "gen",
        "work_ms",
        "run",
        "maxrun",
        "alloc",
        "hold",
        "thrott",
        "wait",
        "bounces",
        "ser"
    );
    for e in entries {
        let v = &e["value"];
        if !all && is_zero(v) {
            continue;
        }
        let idx = e["key"].as_u64().unwrap_or(0);
        let tag = v["tag"].as_u64().unwrap_or(0);
        let g = |f: &str| v[f].as_u64().unwrap_or(0);
        s += &format!(
            "{:>7} {:>5} {:>4} {:>12.3} {:>4} {:>7} {:>5} {:>4} {:>8} {:>5} {:>7} {:>4}\n",
            idx / region::MAX_REQUESTS as u64,
            idx % region::MAX_REQUESTS as u64,
            tag >> 32,
            g("work_ns") as f64 / 1e6,
            region::acct_count(g("runners")),
            g("max_running"),
            g("alloc"),
            region::acct_count(g("holders")),
            g("throttled"),
            region::acct_count(g("waiting")),
            g("bounces"),
            if g("serialized_at_ns") != 0 {
                "yes"
            } else {
                "-"
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_pin_dir_says_what_to_do() {
        let dir = Path::new("/nonexistent/tailctl-pins");
        let err = check_pin_dir(dir).unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");
        assert!(err.contains("scx_tailctl"), "{err}");
    }

    #[test]
    fn permission_denied_says_root() {
        let e = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let err = access_error(Path::new("/sys/fs/bpf/tailctl"), &e).to_string();
        assert!(err.contains("root"), "{err}");
    }

    #[test]
    fn stats_sum_takes_max_of_maxima() {
        let e = vec![json!({"key": 0, "values": [
            {"cpu": 0, "value": {"enqueues": 3, "max_throttle_wait_ns": 10}},
            {"cpu": 1, "value": {"enqueues": 4, "max_throttle_wait_ns": 7}},
        ]})];
        let s = sum_stats(&e);
        assert_eq!(s["enqueues"], 7);
        assert_eq!(s["max_throttle_wait_ns"], 10);
    }

    #[test]
    fn zero_detection() {
        assert!(is_zero(&json!({"a": 0, "b": [0, 0]})));
        assert!(!is_zero(&json!({"a": 0, "b": [0, 1]})));
    }

    #[test]
    fn map_type_names_match_bpftool() {
        assert_eq!(type_name(MapType::PercpuArray), "percpu_array");
        assert_eq!(type_name(MapType::ArrayOfMaps), "array_of_maps");
        assert_eq!(type_name(MapType::Hash), "hash");
    }

    #[test]
    fn a_file_that_is_not_a_pin_is_called_that_for_root() {
        let p = Path::new("/tmp/x.txt");
        let eacces = || libbpf_rs::Error::from_raw_os_error(libc::EACCES);
        let e = pinned_open_error(p, &eacces(), true).to_string();
        assert!(e.contains("/tmp/x.txt is not a BPF map pin"), "{e}");
        // Others may lack the privilege: they still get the root sentence.
        let e = pinned_open_error(p, &eacces(), false).to_string();
        assert!(e.contains("permission denied"), "{e}");
    }
}
