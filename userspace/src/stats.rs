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
    #[stat(desc = "Requests the kernel serialized (crossed their threshold)")]
    pub serializations: u64,
    #[stat(desc = "Registered threads that waited in a throttle queue (request at its cap)")]
    pub throttled: u64,
    #[stat(desc = "Throttled threads dispatched when their request's cap freed up")]
    pub rotations: u64,
    #[stat(desc = "Running threads preempted because their request was serialized")]
    pub cap_preemptions: u64,
    #[stat(desc = "Region reads rejected by validation")]
    pub invalid_hints: u64,
    #[stat(
        desc = "Threads throttled by a request's cap run without a token after the wait bound (should stay 0; a job's: allot_overdue)"
    )]
    pub overdue_runs: u64,
    #[stat(desc = "Longest throttle wait so far, ns (a maximum since load, not a delta)")]
    pub max_throttle_wait_ns: u64,
    #[stat(
        desc = "Longest wait from throttling (a request's cap or a job's allotment) to running of a thread let through at the wait bound, ns (a maximum since load)"
    )]
    pub max_overdue_wait_ns: u64,
    #[stat(
        desc = "Threads let through at the wait bound sent to their level's queue, not a CPU's head (both CPUs tried busy, an RT task there, or a higher level waiting)"
    )]
    pub overdue_fair: u64,
    #[stat(
        desc = "Threads let through at the wait bound that queued fairly, being ahead of the fair frontier in vtime"
    )]
    pub overdue_ahead: u64,
    #[stat(
        desc = "Threads let through at the wait bound moved to the head of a CPU's local queue"
    )]
    pub overdue_heads: u64,
    #[stat(
        desc = "Releases that left a thread past its wait bound queued for a later one, no CPU's head free (for up to another bound, at most 250 ms)"
    )]
    pub overdue_deferred: u64,
    #[stat(
        desc = "Threads sent to a CPU's head that came back before they ran (that CPU taken by a higher class): another CPU's head if free, else the fair queue"
    )]
    pub overdue_head_lost: u64,
    #[stat(
        desc = "Longest wait from throttling to running of those ahead of the frontier, ns (a maximum since load)"
    )]
    pub max_overdue_ahead_wait_ns: u64,
    #[stat(
        desc = "Longest wait from throttling to running of those that lost their CPU's head with no other free (they queued fairly), ns (a maximum since load)"
    )]
    pub max_overdue_lost_wait_ns: u64,
    #[stat(
        desc = "The watchdog timeout the scheduler was loaded with, ms (0: the kernel's default, 30 s)"
    )]
    pub watchdog_timeout_ms: i64,
    #[stat(
        desc = "Watchdog timeout minus the longest throttle wait, ms (how close a throttled thread came to ejecting the scheduler)"
    )]
    pub watchdog_margin_ms: i64,
    #[stat(desc = "Tokens and wait counts found unaccounted for and reclaimed (must stay 0)")]
    pub token_leaks: u64,
    #[stat(desc = "CPUs kicked by the wait-bound timer for a waiter past its bound")]
    pub bound_kicks: u64,
    #[stat(desc = "Allotment decisions that changed a job's allotment (reallocations)")]
    pub allot_reallocs: u64,
    #[stat(desc = "Reallocations enforced (the job first ran at or under its new allotment)")]
    pub allot_enforced: u64,
    #[stat(desc = "Mean decision-to-enforcement latency of those, us")]
    pub allot_lat_mean_us: f64,
    #[stat(desc = "Longest decision-to-enforcement latency since load, us (a maximum)")]
    pub allot_lat_max_us: f64,
    #[stat(desc = "Enforcement latencies under 10 us")]
    pub allot_lat_lt10us: u64,
    #[stat(desc = "... 10-25 us")]
    pub allot_lat_lt25us: u64,
    #[stat(desc = "... 25-50 us")]
    pub allot_lat_lt50us: u64,
    #[stat(desc = "... 50-100 us")]
    pub allot_lat_lt100us: u64,
    #[stat(desc = "... 100-250 us")]
    pub allot_lat_lt250us: u64,
    #[stat(desc = "... 250 us-1 ms")]
    pub allot_lat_lt1ms: u64,
    #[stat(desc = "... 1-10 ms")]
    pub allot_lat_lt10ms: u64,
    #[stat(desc = "... 10 ms or more")]
    pub allot_lat_ge10ms: u64,
    #[stat(desc = "Job threads that waited for a job token (over the allotment)")]
    pub allot_waits: u64,
    #[stat(desc = "Job threads run on a borrowed (otherwise idle) CPU")]
    pub allot_borrows: u64,
    #[stat(desc = "Borrowed CPUs taken back for their owner")]
    pub allot_reclaims: u64,
    #[stat(desc = "Job threads run past the wait bound without a token (should stay 0)")]
    pub allot_overdue: u64,
    #[stat(desc = "Job threads taken off a CPU because their job was over its allotment")]
    pub allot_preemptions: u64,
    #[stat(desc = "Workers marked descheduled in their region (for mugging)")]
    pub allot_descheds: u64,
    #[stat(desc = "Longest wait for a job token so far, ns (a maximum)")]
    pub allot_max_wait_ns: u64,
    #[stat(desc = "Sum of enforcement latencies, ns")]
    pub allot_lat_sum_ns: u64,
    #[stat(
        desc = "Priority: runs at a different level than the CPU's previous run (level switches)"
    )]
    pub prio_switches: u64,
    #[stat(
        desc = "Priority: dispatches the starvation guard made from a lower level while a higher one had work"
    )]
    pub prio_guard_dispatches: u64,
    #[stat(
        desc = "Priority: runs started while a higher-level task this CPU may run had waited since before it chose (guard runs and per-CPU kthreads excepted)"
    )]
    pub prio_inversions: u64,
    #[stat(
        desc = "Priority: would-be inversions whose higher-level work arrived after the CPU chose its task (races)"
    )]
    pub prio_inversions_raced: u64,
    #[stat(
        desc = "Priority: runs that ended while a higher level had work waiting (promptness violations)"
    )]
    pub prio_violations: u64,
    #[stat(desc = "Priority: time those runs ran after the higher-level work was waiting, ns")]
    pub prio_violation_ns: u64,
    #[stat(desc = "Priority: CPUs running a lower level preempted for a higher-level task")]
    pub prio_preempt_kicks: u64,
    #[stat(
        desc = "Wake-up preemption: CPUs preempted for a waking task far behind their task in vtime"
    )]
    pub wake_preempt_kicks: u64,
    #[stat(desc = "Priority level 0: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l0_ns: u64,
    #[stat(desc = "Priority level 1: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l1_ns: u64,
    #[stat(desc = "Priority level 2: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l2_ns: u64,
    #[stat(desc = "Priority level 3: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l3_ns: u64,
    #[stat(desc = "Priority level 4: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l4_ns: u64,
    #[stat(desc = "Priority level 5: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l5_ns: u64,
    #[stat(desc = "Priority level 6: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l6_ns: u64,
    #[stat(desc = "Priority level 7: longest wait from enqueue to running, ns (a maximum)")]
    pub prio_max_wait_l7_ns: u64,
    #[stat(desc = "Priority level 0: runs")]
    pub prio_runs_l0: u64,
    #[stat(desc = "Priority level 1: runs")]
    pub prio_runs_l1: u64,
    #[stat(desc = "Priority level 2: runs")]
    pub prio_runs_l2: u64,
    #[stat(desc = "Priority level 3: runs")]
    pub prio_runs_l3: u64,
    #[stat(desc = "Priority level 4: runs")]
    pub prio_runs_l4: u64,
    #[stat(desc = "Priority level 5: runs")]
    pub prio_runs_l5: u64,
    #[stat(desc = "Priority level 6: runs")]
    pub prio_runs_l6: u64,
    #[stat(desc = "Priority level 7: runs")]
    pub prio_runs_l7: u64,
    #[stat(
        desc = "Reallocations already enforced when apply_allot returned (no thread to take off)"
    )]
    pub allot_enforced_at_apply: u64,
    #[stat(desc = "Sum over reallocations of the daemon's stamp to apply_allot running, ns")]
    pub allot_apply_lat_sum_ns: u64,
    #[stat(desc = "The other reallocations: apply_allot to enforcement (kicks) under 100 us")]
    pub allot_kick_lt100us: u64,
    #[stat(desc = "... 100 us-1 ms")]
    pub allot_kick_lt1ms: u64,
    #[stat(desc = "... 1 ms or more")]
    pub allot_kick_ge1ms: u64,
    #[stat(desc = "Normal-level queues (LLC groups; 1: one shared queue)")]
    pub nr_llcs: u64,
    #[stat(desc = "Per LLC queue: tasks inserted by ops.enqueue")]
    pub llc_enqueues: Vec<u64>,
    #[stat(desc = "Per LLC queue: tasks moved to a CPU of its own LLC")]
    pub llc_dispatches: Vec<u64>,
    #[stat(desc = "Per LLC queue: tasks stolen by a CPU of another LLC")]
    pub llc_steals: Vec<u64>,
    #[stat(
        desc = "Steals by a CPU whose own LLC queue was not empty but half a slice ahead in vtime"
    )]
    pub llc_balance_steals: u64,
    #[stat(
        desc = "Tasks re-enqueued from a local queue because an RT or deadline task took the CPU"
    )]
    pub reenqueues: u64,
    #[stat(desc = "sched_yield calls that kept the CPU because nothing else was waiting")]
    pub yields_kept: u64,
}

/// sched_ext's watchdog timeout when ops.timeout_ms is 0 (ours is, unless
/// --watchdog-ms): a runnable task not run for this long ejects the scheduler.
pub const WATCHDOG_TIMEOUT_MS: i64 = 30_000;

impl Metrics {
    /// Add one CPU's counters.
    pub fn add(&mut self, s: &tailctl_stats) {
        // Per LLC queue, for the nr_llcs queues in use (set before the first add).
        let n = (self.nr_llcs as usize).min(s.llc_enqueues.len());
        for (sum, cpu) in [
            (&mut self.llc_enqueues, &s.llc_enqueues),
            (&mut self.llc_dispatches, &s.llc_dispatches),
            (&mut self.llc_steals, &s.llc_steals),
        ] {
            sum.resize(n.max(sum.len()), 0);
            for (a, b) in sum.iter_mut().zip(&cpu[..n]) {
                *a += b;
            }
        }
        self.enqueues += s.enqueues;
        self.direct_dispatches += s.direct_dispatches;
        self.shared_enqueues += s.shared_enqueues;
        self.shared_dispatches += s.shared_dispatches;
        self.idle_kicks += s.idle_kicks;
        self.kthread_dispatches += s.kthread_dispatches;
        self.slice_extensions += s.slice_extensions;
        self.serializations += s.serializations;
        self.throttled += s.throttled;
        self.rotations += s.rotations;
        self.cap_preemptions += s.cap_preemptions;
        self.invalid_hints += s.invalid_hints;
        self.overdue_runs += s.overdue_runs;
        self.overdue_fair += s.overdue_fair;
        self.overdue_ahead += s.overdue_ahead;
        self.overdue_heads += s.overdue_heads;
        self.overdue_deferred += s.overdue_deferred;
        self.overdue_head_lost += s.overdue_head_lost;
        self.token_leaks += s.token_leaks;
        self.bound_kicks += s.bound_kicks;
        self.max_throttle_wait_ns = self.max_throttle_wait_ns.max(s.max_throttle_wait_ns);
        self.max_overdue_wait_ns = self.max_overdue_wait_ns.max(s.max_overdue_wait_ns);
        self.max_overdue_ahead_wait_ns = self
            .max_overdue_ahead_wait_ns
            .max(s.max_overdue_ahead_wait_ns);
        self.max_overdue_lost_wait_ns = self
            .max_overdue_lost_wait_ns
            .max(s.max_overdue_lost_wait_ns);
        self.allot_reallocs += s.allot_reallocs;
        self.allot_enforced += s.allot_enforced;
        self.allot_lat_sum_ns += s.allot_lat_sum_ns;
        self.allot_lat_max_us = self.allot_lat_max_us.max(s.allot_lat_max_ns as f64 / 1e3);
        let h = &s.allot_lat_hist;
        self.allot_lat_lt10us += h[0];
        self.allot_lat_lt25us += h[1];
        self.allot_lat_lt50us += h[2];
        self.allot_lat_lt100us += h[3];
        self.allot_lat_lt250us += h[4];
        self.allot_lat_lt1ms += h[5];
        self.allot_lat_lt10ms += h[6];
        self.allot_lat_ge10ms += h[7];
        let k = &s.allot_kick_lat_hist;
        self.allot_enforced_at_apply += s.allot_enforced_at_apply;
        self.allot_apply_lat_sum_ns += s.allot_apply_lat_sum_ns;
        self.allot_kick_lt100us += k[0] + k[1] + k[2] + k[3];
        self.allot_kick_lt1ms += k[4] + k[5];
        self.allot_kick_ge1ms += k[6] + k[7];
        self.allot_waits += s.allot_waits;
        self.allot_borrows += s.allot_borrows;
        self.allot_reclaims += s.allot_reclaims;
        self.allot_overdue += s.allot_overdue;
        self.allot_preemptions += s.allot_preemptions;
        self.allot_descheds += s.allot_descheds;
        self.allot_max_wait_ns = self.allot_max_wait_ns.max(s.allot_max_wait_ns);
        self.allot_lat_mean_us = if self.allot_enforced > 0 {
            self.allot_lat_sum_ns as f64 / self.allot_enforced as f64 / 1e3
        } else {
            0.0
        };
        self.prio_switches += s.prio_switches;
        self.prio_guard_dispatches += s.prio_guard_dispatches;
        self.prio_inversions += s.prio_inversions;
        self.prio_inversions_raced += s.prio_inversions_raced;
        self.prio_violations += s.prio_violations;
        self.prio_violation_ns += s.prio_violation_ns;
        self.prio_preempt_kicks += s.prio_preempt_kicks;
        self.wake_preempt_kicks += s.wake_preempt_kicks;
        self.llc_balance_steals += s.llc_balance_steals;
        self.reenqueues += s.reenqueues;
        self.yields_kept += s.yields_kept;
        self.prio_max_wait_l0_ns = self.prio_max_wait_l0_ns.max(s.prio_max_wait_ns[0]);
        self.prio_runs_l0 += s.prio_runs[0];
        self.prio_max_wait_l1_ns = self.prio_max_wait_l1_ns.max(s.prio_max_wait_ns[1]);
        self.prio_runs_l1 += s.prio_runs[1];
        self.prio_max_wait_l2_ns = self.prio_max_wait_l2_ns.max(s.prio_max_wait_ns[2]);
        self.prio_runs_l2 += s.prio_runs[2];
        self.prio_max_wait_l3_ns = self.prio_max_wait_l3_ns.max(s.prio_max_wait_ns[3]);
        self.prio_runs_l3 += s.prio_runs[3];
        self.prio_max_wait_l4_ns = self.prio_max_wait_l4_ns.max(s.prio_max_wait_ns[4]);
        self.prio_runs_l4 += s.prio_runs[4];
        self.prio_max_wait_l5_ns = self.prio_max_wait_l5_ns.max(s.prio_max_wait_ns[5]);
        self.prio_runs_l5 += s.prio_runs[5];
        self.prio_max_wait_l6_ns = self.prio_max_wait_l6_ns.max(s.prio_max_wait_ns[6]);
        self.prio_runs_l6 += s.prio_runs[6];
        self.prio_max_wait_l7_ns = self.prio_max_wait_l7_ns.max(s.prio_max_wait_ns[7]);
        self.prio_runs_l7 += s.prio_runs[7];
        // The longest wait of any kind is what a watchdog would see.
        let longest = self
            .max_throttle_wait_ns
            .max(self.max_overdue_wait_ns)
            .max(self.max_overdue_ahead_wait_ns)
            .max(self.max_overdue_lost_wait_ns)
            .max(self.allot_max_wait_ns)
            .max(self.prio_max_wait_ns());
        let timeout = if self.watchdog_timeout_ms > 0 {
            self.watchdog_timeout_ms
        } else {
            WATCHDOG_TIMEOUT_MS
        };
        self.watchdog_margin_ms = timeout - (longest / 1_000_000) as i64;
    }

    /// The longest enqueue-to-running wait at any priority level, ns.
    pub fn prio_max_wait_ns(&self) -> u64 {
        self.prio_waits().into_iter().max().unwrap_or(0)
    }

    fn prio_waits(&self) -> [u64; 8] {
        [
            self.prio_max_wait_l0_ns,
            self.prio_max_wait_l1_ns,
            self.prio_max_wait_l2_ns,
            self.prio_max_wait_l3_ns,
            self.prio_max_wait_l4_ns,
            self.prio_max_wait_l5_ns,
            self.prio_max_wait_l6_ns,
            self.prio_max_wait_l7_ns,
        ]
    }

    fn prio_runs(&self) -> [u64; 8] {
        [
            self.prio_runs_l0,
            self.prio_runs_l1,
            self.prio_runs_l2,
            self.prio_runs_l3,
            self.prio_runs_l4,
            self.prio_runs_l5,
            self.prio_runs_l6,
            self.prio_runs_l7,
        ]
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
            serializations: self.serializations.saturating_sub(prev.serializations),
            throttled: self.throttled.saturating_sub(prev.throttled),
            rotations: self.rotations.saturating_sub(prev.rotations),
            cap_preemptions: self.cap_preemptions.saturating_sub(prev.cap_preemptions),
            invalid_hints: self.invalid_hints.saturating_sub(prev.invalid_hints),
            overdue_runs: self.overdue_runs.saturating_sub(prev.overdue_runs),
            overdue_fair: self.overdue_fair.saturating_sub(prev.overdue_fair),
            overdue_ahead: self.overdue_ahead.saturating_sub(prev.overdue_ahead),
            overdue_heads: self.overdue_heads.saturating_sub(prev.overdue_heads),
            overdue_deferred: self.overdue_deferred.saturating_sub(prev.overdue_deferred),
            overdue_head_lost: self
                .overdue_head_lost
                .saturating_sub(prev.overdue_head_lost),
            // Maxima, not counters: report the current value.
            max_throttle_wait_ns: self.max_throttle_wait_ns,
            max_overdue_wait_ns: self.max_overdue_wait_ns,
            max_overdue_ahead_wait_ns: self.max_overdue_ahead_wait_ns,
            max_overdue_lost_wait_ns: self.max_overdue_lost_wait_ns,
            watchdog_timeout_ms: self.watchdog_timeout_ms,
            watchdog_margin_ms: self.watchdog_margin_ms,
            token_leaks: self.token_leaks.saturating_sub(prev.token_leaks),
            bound_kicks: self.bound_kicks.saturating_sub(prev.bound_kicks),
            allot_reallocs: self.allot_reallocs.saturating_sub(prev.allot_reallocs),
            allot_enforced: self.allot_enforced.saturating_sub(prev.allot_enforced),
            allot_lat_sum_ns: self.allot_lat_sum_ns.saturating_sub(prev.allot_lat_sum_ns),
            allot_lat_mean_us: {
                let n = self.allot_enforced.saturating_sub(prev.allot_enforced);
                let sum = self.allot_lat_sum_ns.saturating_sub(prev.allot_lat_sum_ns);
                if n > 0 {
                    sum as f64 / n as f64 / 1e3
                } else {
                    0.0
                }
            },
            allot_lat_max_us: self.allot_lat_max_us,
            allot_lat_lt10us: self.allot_lat_lt10us.saturating_sub(prev.allot_lat_lt10us),
            allot_lat_lt25us: self.allot_lat_lt25us.saturating_sub(prev.allot_lat_lt25us),
            allot_lat_lt50us: self.allot_lat_lt50us.saturating_sub(prev.allot_lat_lt50us),
            allot_lat_lt100us: self
                .allot_lat_lt100us
                .saturating_sub(prev.allot_lat_lt100us),
            allot_lat_lt250us: self
                .allot_lat_lt250us
                .saturating_sub(prev.allot_lat_lt250us),
            allot_lat_lt1ms: self.allot_lat_lt1ms.saturating_sub(prev.allot_lat_lt1ms),
            allot_lat_lt10ms: self.allot_lat_lt10ms.saturating_sub(prev.allot_lat_lt10ms),
            allot_lat_ge10ms: self.allot_lat_ge10ms.saturating_sub(prev.allot_lat_ge10ms),
            allot_waits: self.allot_waits.saturating_sub(prev.allot_waits),
            allot_borrows: self.allot_borrows.saturating_sub(prev.allot_borrows),
            allot_reclaims: self.allot_reclaims.saturating_sub(prev.allot_reclaims),
            allot_overdue: self.allot_overdue.saturating_sub(prev.allot_overdue),
            allot_preemptions: self
                .allot_preemptions
                .saturating_sub(prev.allot_preemptions),
            allot_descheds: self.allot_descheds.saturating_sub(prev.allot_descheds),
            allot_max_wait_ns: self.allot_max_wait_ns,
            prio_switches: self.prio_switches.saturating_sub(prev.prio_switches),
            prio_guard_dispatches: self
                .prio_guard_dispatches
                .saturating_sub(prev.prio_guard_dispatches),
            prio_inversions: self.prio_inversions.saturating_sub(prev.prio_inversions),
            prio_inversions_raced: self
                .prio_inversions_raced
                .saturating_sub(prev.prio_inversions_raced),
            prio_violations: self.prio_violations.saturating_sub(prev.prio_violations),
            prio_violation_ns: self
                .prio_violation_ns
                .saturating_sub(prev.prio_violation_ns),
            prio_preempt_kicks: self
                .prio_preempt_kicks
                .saturating_sub(prev.prio_preempt_kicks),
            wake_preempt_kicks: self
                .wake_preempt_kicks
                .saturating_sub(prev.wake_preempt_kicks),
            prio_max_wait_l0_ns: self.prio_max_wait_l0_ns,
            prio_runs_l0: self.prio_runs_l0.saturating_sub(prev.prio_runs_l0),
            prio_max_wait_l1_ns: self.prio_max_wait_l1_ns,
            prio_runs_l1: self.prio_runs_l1.saturating_sub(prev.prio_runs_l1),
            prio_max_wait_l2_ns: self.prio_max_wait_l2_ns,
            prio_runs_l2: self.prio_runs_l2.saturating_sub(prev.prio_runs_l2),
            prio_max_wait_l3_ns: self.prio_max_wait_l3_ns,
            prio_runs_l3: self.prio_runs_l3.saturating_sub(prev.prio_runs_l3),
            prio_max_wait_l4_ns: self.prio_max_wait_l4_ns,
            prio_runs_l4: self.prio_runs_l4.saturating_sub(prev.prio_runs_l4),
            prio_max_wait_l5_ns: self.prio_max_wait_l5_ns,
            prio_runs_l5: self.prio_runs_l5.saturating_sub(prev.prio_runs_l5),
            prio_max_wait_l6_ns: self.prio_max_wait_l6_ns,
            prio_runs_l6: self.prio_runs_l6.saturating_sub(prev.prio_runs_l6),
            prio_max_wait_l7_ns: self.prio_max_wait_l7_ns,
            prio_runs_l7: self.prio_runs_l7.saturating_sub(prev.prio_runs_l7),
            allot_enforced_at_apply: self
                .allot_enforced_at_apply
                .saturating_sub(prev.allot_enforced_at_apply),
            allot_apply_lat_sum_ns: self
                .allot_apply_lat_sum_ns
                .saturating_sub(prev.allot_apply_lat_sum_ns),
            allot_kick_lt100us: self
                .allot_kick_lt100us
                .saturating_sub(prev.allot_kick_lt100us),
            allot_kick_lt1ms: self.allot_kick_lt1ms.saturating_sub(prev.allot_kick_lt1ms),
            allot_kick_ge1ms: self.allot_kick_ge1ms.saturating_sub(prev.allot_kick_ge1ms),
            nr_llcs: self.nr_llcs,
            llc_enqueues: vec_delta(&self.llc_enqueues, &prev.llc_enqueues),
            llc_dispatches: vec_delta(&self.llc_dispatches, &prev.llc_dispatches),
            llc_steals: vec_delta(&self.llc_steals, &prev.llc_steals),
            llc_balance_steals: self
                .llc_balance_steals
                .saturating_sub(prev.llc_balance_steals),
            reenqueues: self.reenqueues.saturating_sub(prev.reenqueues),
            yields_kept: self.yields_kept.saturating_sub(prev.yields_kept),
        }
    }

    pub(crate) fn format<W: Write>(&self, w: &mut W) -> Result<()> {
        writeln!(
            w,
            "[{}] cpus {:>3} | enq {:>8} direct {:>8} shared {:>8}/{:<8} kick {:>7} kthread {:>6} ext {:>6} wake-preempt {:>6} reenq {:>5} yield-kept {:>6}",
            crate::SCHEDULER_NAME,
            self.nr_cpus,
            self.enqueues,
            self.direct_dispatches,
            self.shared_enqueues,
            self.shared_dispatches,
            self.idle_kicks,
            self.kthread_dispatches,
            self.slice_extensions,
            self.wake_preempt_kicks,
            self.reenqueues,
            self.yields_kept,
        )?;
        writeln!(
            w,
            "[{}] serialize {:>6} throttled {:>8} rotate {:>8} cap-preempt {:>6} invalid {:>4} overdue {:>4} (head {} fair {} ahead {} deferred {} lost {}) max-wait {:>6} us overdue-wait {:>6} us (ahead {:>6} us, lost {:>6} us) watchdog-margin {:>6} ms token-leaks {} bound-kicks {}",
            crate::SCHEDULER_NAME,
            self.serializations,
            self.throttled,
            self.rotations,
            self.cap_preemptions,
            self.invalid_hints,
            self.overdue_runs,
            self.overdue_heads,
            self.overdue_fair,
            self.overdue_ahead,
            self.overdue_deferred,
            self.overdue_head_lost,
            self.max_throttle_wait_ns / 1000,
            self.max_overdue_wait_ns / 1000,
            self.max_overdue_ahead_wait_ns / 1000,
            self.max_overdue_lost_wait_ns / 1000,
            self.watchdog_margin_ms,
            self.token_leaks,
            self.bound_kicks,
        )?;
        writeln!(
            w,
            "[{}] allot: realloc {:>5} enforced {:>5} latency mean {:>7.1} us max {:>8.1} us \
             [<10us {} <25 {} <50 {} <100 {} <250 {} <1ms {} <10ms {} >=10ms {}] \
             wait {} borrow {} reclaim {} preempt {} desched {} overdue {} max-wait {} us | \
             at-apply {} stamp->apply mean {:.1} us, apply->enforced by kicks [<100us {} <1ms {} >=1ms {}]",
            crate::SCHEDULER_NAME,
            self.allot_reallocs,
            self.allot_enforced,
            self.allot_lat_mean_us,
            self.allot_lat_max_us,
            self.allot_lat_lt10us,
            self.allot_lat_lt25us,
            self.allot_lat_lt50us,
            self.allot_lat_lt100us,
            self.allot_lat_lt250us,
            self.allot_lat_lt1ms,
            self.allot_lat_lt10ms,
            self.allot_lat_ge10ms,
            self.allot_waits,
            self.allot_borrows,
            self.allot_reclaims,
            self.allot_preemptions,
            self.allot_descheds,
            self.allot_overdue,
            self.allot_max_wait_ns / 1000,
            self.allot_enforced_at_apply,
            self.allot_apply_lat_sum_ns as f64 / self.allot_reallocs.max(1) as f64 / 1e3,
            self.allot_kick_lt100us,
            self.allot_kick_lt1ms,
            self.allot_kick_ge1ms,
        )?;
        // Per level with runs: "level:runs/max-wait-us", highest first.
        let levels: Vec<String> = (0..8)
            .rev()
            .filter(|&l| self.prio_runs()[l] > 0 || self.prio_waits()[l] > 0)
            .map(|l| {
                format!(
                    "{l}:{}/{}us",
                    self.prio_runs()[l],
                    self.prio_waits()[l] / 1000
                )
            })
            .collect();
        writeln!(
            w,
            "[{}] prio: switches {} guard {} inversions {} (+{} raced) violations {} ({} us) preempt {} [level:runs/max-wait {}]",
            crate::SCHEDULER_NAME,
            self.prio_switches,
            self.prio_guard_dispatches,
            self.prio_inversions,
            self.prio_inversions_raced,
            self.prio_violations,
            self.prio_violation_ns / 1000,
            self.prio_preempt_kicks,
            levels.join(" "),
        )?;
        if self.nr_llcs > 1 {
            let queues: Vec<String> = (0..self.llc_enqueues.len())
                .map(|i| {
                    let at = |v: &Vec<u64>| v.get(i).copied().unwrap_or(0);
                    format!(
                        "{i}:{}/{}/{}",
                        at(&self.llc_enqueues),
                        at(&self.llc_dispatches),
                        at(&self.llc_steals)
                    )
                })
                .collect();
            writeln!(
                w,
                "[{}] llc queues {} [queue:enq/local/stolen {}] balance steals {}",
                crate::SCHEDULER_NAME,
                self.nr_llcs,
                queues.join(" "),
                self.llc_balance_steals,
            )?;
        }
        Ok(())
    }
}

/// Element-wise `cur - prev` (a restart resets the counters: saturating).
fn vec_delta(cur: &[u64], prev: &[u64]) -> Vec<u64> {
    cur.iter()
        .enumerate()
        .map(|(i, c)| c.saturating_sub(prev.get(i).copied().unwrap_or(0)))
        .collect()
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
