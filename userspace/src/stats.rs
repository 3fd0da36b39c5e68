//! Scheduler-wide statistics, served the scx_stats way: the running scheduler
//! answers on scx_stats' unix socket, and `--stats`/`--monitor` are clients of
//! it, so a second terminal can watch a scheduler started elsewhere.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use scx_stats::prelude::*;
use scx_stats_derive::{stat_doc, Stats};
use serde::{Deserialize, Serialize};

use crate::bpf_intf::tailctl_stats;

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(top)]
pub struct Metrics {
    #[stat(desc = "Possible CPUs")]
    pub nr_cpus: u64,
    #[stat(desc = "ops.enqueue calls")]
    pub enqueues: u64,
    #[stat(desc = "Tasks dispatched straight to an idle CPU's local queue")]
    pub direct_dispatches: u64,
    #[stat(desc = "Tasks queued on the shared vtime queue")]
    pub shared_enqueues: u64,
    #[stat(desc = "Tasks moved from the shared queue to a CPU")]
    pub shared_dispatches: u64,
    #[stat(desc = "Idle CPUs kicked on enqueue")]
    pub idle_kicks: u64,
    #[stat(desc = "Per-CPU kthreads dispatched locally")]
    pub kthread_dispatches: u64,
    #[stat(desc = "Slices extended because nothing else was waiting")]
    pub slice_extensions: u64,
}

impl Metrics {
    /// Add one CPU's counters.
    pub fn add(&mut self, s: &tailctl_stats) {
        self.enqueues += s.enqueues;
        self.direct_dispatches += s.direct_dispatches;
        self.shared_enqueues += s.shared_enqueues;
        self.shared_dispatches += s.shared_dispatches;
        self.idle_kicks += s.idle_kicks;
        self.kthread_dispatches += s.kthread_dispatches;
        self.slice_extensions += s.slice_extensions;
    }

    /// Counters accumulated since `prev` (counters only grow while loaded; a
    /// restart resets them, hence the saturating subtraction).
    fn delta(&self, prev: &Self) -> Self {
        Self {
            nr_cpus: self.nr_cpus,
            enqueues: self.enqueues.saturating_sub(prev.enqueues),
            direct_dispatches: self
                .direct_dispatches
                .saturating_sub(prev.direct_dispatches),
            shared_enqueues: self.shared_enqueues.saturating_sub(prev.shared_enqueues),
            shared_dispatches: self
                .shared_dispatches
                .saturating_sub(prev.shared_dispatches),
            idle_kicks: self.idle_kicks.saturating_sub(prev.idle_kicks),
            kthread_dispatches: self
                .kthread_dispatches
                .saturating_sub(prev.kthread_dispatches),
            slice_extensions: self.slice_extensions.saturating_sub(prev.slice_extensions),
        }
    }

    fn format<W: Write>(&self, w: &mut W) -> Result<()> {
        writeln!(
            w,
            "[{}] cpus {:>3} | enq {:>8} direct {:>8} shared {:>8}/{:<8} kick {:>7} kthread {:>6} ext {:>6}",
            crate::SCHEDULER_NAME,
            self.nr_cpus,
            self.enqueues,
            self.direct_dispatches,
            self.shared_enqueues,
            self.shared_dispatches,
            self.idle_kicks,
            self.kthread_dispatches,
            self.slice_extensions,
        )?;
        Ok(())
    }
}

/// The stats server's handlers: each reader gets deltas since its last read.
pub fn server_data() -> StatsServerData<(), Metrics> {
    let open: Box<dyn StatsOpener<(), Metrics>> = Box::new(move |(req_ch, res_ch)| {
        req_ch.send(())?;
        let mut prev = res_ch.recv()?;
        let read: Box<dyn StatsReader<(), Metrics>> = Box::new(move |_args, (req_ch, res_ch)| {
            req_ch.send(())?;
            let cur = res_ch.recv()?;
            let delta = cur.delta(&prev);
            prev = cur;
            delta.to_json()
        });
        Ok(read)
    });
    StatsServerData::new()
        .add_meta(Metrics::meta())
        .add_ops("top", StatsOps { open, close: None })
}

/// Print the counters every `intv` until `shutdown`.
pub fn monitor(intv: Duration, shutdown: Arc<AtomicBool>) -> Result<()> {
    scx_utils::monitor_stats::<Metrics>(
        &[],
        intv,
        || shutdown.load(Ordering::Relaxed),
        |metrics| metrics.format(&mut std::io::stdout()),
    )
}

/// One reading (counters since the connection opened, ~1 s) as JSON, for programs.
pub fn print_json_once() -> Result<()> {
    let mut client = StatsClient::new().connect(None).map_err(|e| {
        anyhow::anyhow!(
            "cannot reach a running scx_tailctl's stats socket ({e}); is the scheduler loaded?"
        )
    })?;
    std::thread::sleep(Duration::from_secs(1));
    let m: Metrics = client.request("stats", vec![])?;
    println!("{}", serde_json::to_string_pretty(&m)?);
    Ok(())
}
