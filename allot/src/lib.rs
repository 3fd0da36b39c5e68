//! Core-allotment policies for multiprogrammed parallel jobs.
//!
//! # Design
//!
//! Several parallel jobs share `P` cores. Every quantum `L` (and on every job start and exit, as in
//! AMCilk's `job_scheduler(e)`), a controller shows a policy what AMCilk's `job_scheduler` sees —
//! the jobs, the machine's cores, each job's desire inputs and how its cores spent the last quantum
//! (working vs stealing) — and the policy returns each job's *allotment*: how many cores it may use
//! at once during the next quantum. Someone else enforces it: the sched_ext scheduler (the kernel
//! caps how many of a job's threads run at once) or the simulator.
//!
//! The same policy code runs in the scheduler daemon (`scx_tailctl --allot`) and in `tailctl sim`,
//! so a policy measured in the simulator is the policy the kernel enforces. A policy is one file
//! behind [`AllotPolicy`]; policies keep their own per-job state keyed by [`JobId`] and must accept
//! jobs appearing and vanishing between calls.
//!
//! Invariants every policy keeps (checked by [`check_allotment`], which the callers run):
//! the allotments sum to at most `cores`, and a job with work gets at least one core whenever
//! there are at least as many cores as jobs (nobody is starved by the policy itself).
//!
//! The policies:
//!
//! | `--allot` | file | desire | allotment | reacts to |
//! |---|---|---|---|---|
//! | `equi` | [`equi`] | ignored | `P/n` each (`n` jobs) | every call |
//! | `deq` | [`deq`] | SAWS: `u·a + β(αQ + (1−α)Q′)` | DEQ | desires at quanta, allotment at every call |
//! | `asteal` | [`asteal`] | A-Steal: `d·ρ`, `d/ρ` or `d` from utilisation | DEQ | desires at quanta, allotment at every call |
//! | `drep` | [`drep`] | ignored | random per-core moves | job start and exit only |
//!
//! DEQ and A-Steal give a new job (allotment 0) the desire 1, as SAWS and A-Steal do (a job
//! starts with one thread); a job they have not seen but which already holds cores starts from
//! its allotment (at a quantum, DEQ computes any job's desire from its view). Every policy keeps its state keyed by [`JobId`] and forgets jobs
//! that left the list, so a controller may also just stop listing a job (DREP then treats it as
//! an exit, and an unknown job as an arrival).
//!
//! [`rng`] is the seeded SplitMix64 that DREP flips its coins with and the property tests draw from.

pub mod asteal;
pub mod deq;
pub mod drep;
pub mod equi;
pub mod rng;

pub use asteal::{ASteal, Utilisation};
pub use deq::Deq;
pub use drep::Drep;
pub use equi::Equi;

/// Identifies a job across calls (a service's registration epoch, a cgroup id, a simulator job
/// number). Never reused while the job lives.
pub type JobId = u64;

/// Why the controller calls the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The quantum timer fired.
    Quantum,
    /// A job started (AMCilk's START_JOB); it is already in the job list.
    JobStarted(JobId),
    /// A job ended (AMCilk's EXIT_JOB); it is no longer in the job list.
    JobExited(JobId),
}

/// What a job did during the last quantum, as the controller measured it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JobView {
    pub id: JobId,
    /// Cores the job was allotted during the last quantum (0 for a job that just started).
    pub allot: u32,
    /// Most cores it could ever use (its worker count, or runnable threads for a cgroup job).
    pub max_parallelism: u32,
    /// Threads runnable or running at the moment of the call.
    pub runnable: u32,
    /// Core-time spent working (running tasks, or mugging) during the quantum, in ns.
    pub work_ns: u64,
    /// Core-time spent stealing (looking for work, failing) during the quantum, in ns.
    pub steal_ns: u64,
    /// Allotted core-time the job could not use because its token holders were queued for a
    /// CPU (the kernel's `token_wait_ns`: one other tasks held, or an idle one still waking
    /// up), in ns: contention from outside the job, left out of the allotted time in
    /// core-time utilisation
    /// ([`crate::asteal::core_time_utilisation`]). 0 where nothing else competes (the simulator).
    pub token_wait_ns: u64,
    /// SAWS's `u`: 1 - purely unsuccessful steals / total steals during the quantum, in [0, 1]
    /// (1.0 when there were no steals).
    pub steal_success: f64,
    /// SAWS's `Q`: stealable items seen by thieves (deque lengths, muggable deques included),
    /// averaged over the quantum. It is the job's *total*, not one deque's: SAWS's implementable
    /// form is `Q = e · Σ lengths seen / Σ steal attempts`, with `e` the job's deques (active and
    /// muggable) at the end of the quantum. When there were no steal attempts, report
    /// `queued_now` here (SAWS then uses the snapshot alone).
    pub queued_avg: f64,
    /// SAWS's `Q'`: stealable items in the job's deques at the end of the quantum (a snapshot,
    /// the job's total over its deques, muggable ones included).
    pub queued_now: f64,
    /// SAWS's `α` for this quantum, when the controller can count it: the steal attempts made
    /// over the most the job's allotted cores could have made (§4.2: "the ratio between the total
    /// number of steal attempts in the quantum and the maximum possible steal attempts"), in
    /// [0, 1]. `None`: the policy's constant.
    pub queued_alpha: Option<f64>,
}

impl JobView {
    /// Fraction of the allotted core-time spent working, in [0, 1] (A-Steal's utilisation).
    pub fn utilisation(&self, quantum_ns: u64) -> f64 {
        let allotted = self.allot as f64 * quantum_ns as f64;
        if allotted <= 0.0 {
            return 0.0;
        }
        (self.work_ns as f64 / allotted).clamp(0.0, 1.0)
    }
}

/// The machine the controller divides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Cores to divide among the jobs.
    pub cores: u32,
    /// The quantum `L`, in ns.
    pub quantum_ns: u64,
}

/// A core-allotment policy. One per file; see the module docs for the contract.
pub trait AllotPolicy: Send {
    /// The policy's name as given to `--allot`.
    fn name(&self) -> &'static str;

    /// Sets `allot[i]`, the cores job `jobs[i]` may use during the next quantum. `allot` has
    /// `jobs.len()` entries, holding the current allotments on entry.
    fn decide(&mut self, event: Event, machine: Machine, jobs: &[JobView], allot: &mut [u32]);
}

/// The policies `--allot` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// No allotment: every job may use every core (the scheduler's behaviour without `--allot`).
    Off,
    /// Equal partition ([`Equi`]).
    Equi,
    /// DEQ with SAWS's desire ([`Deq`]).
    Deq,
    /// A-Steal's desires allotted by DEQ ([`ASteal`]).
    Asteal,
    /// Distributed Random Equi-Partition, AMCilk's mean-flow-time policy ([`Drep`]).
    Drep,
}

impl PolicyKind {
    pub const NAMES: &'static [&'static str] = &["off", "equi", "deq", "asteal", "drep"];

    /// Builds the policy; `None` for [`PolicyKind::Off`]. DREP's random stream starts from
    /// [`drep::DEFAULT_SEED`].
    pub fn build(self) -> Option<Box<dyn AllotPolicy>> {
        self.build_seeded(drep::DEFAULT_SEED)
    }

    /// Like [`PolicyKind::build`], with the seed of the policy's randomness (only DREP has any),
    /// so that a simulator run is reproducible from its own seed.
    pub fn build_seeded(self, seed: u64) -> Option<Box<dyn AllotPolicy>> {
        match self {
            PolicyKind::Off => None,
            PolicyKind::Equi => Some(Box::new(Equi)),
            PolicyKind::Deq => Some(Box::new(Deq::default())),
            PolicyKind::Asteal => Some(Box::new(ASteal::default())),
            PolicyKind::Drep => Some(Box::new(Drep::with_seed(seed))),
        }
    }

    /// The name `--allot` takes (an entry of [`PolicyKind::NAMES`]).
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Off => "off",
            PolicyKind::Equi => "equi",
            PolicyKind::Deq => "deq",
            PolicyKind::Asteal => "asteal",
            PolicyKind::Drep => "drep",
        }
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(PolicyKind::Off),
            "equi" => Ok(PolicyKind::Equi),
            "deq" => Ok(PolicyKind::Deq),
            "asteal" => Ok(PolicyKind::Asteal),
            "drep" => Ok(PolicyKind::Drep),
            other => Err(format!(
                "unknown allotment policy `{other}`; expected one of: {}",
                PolicyKind::NAMES.join(", ")
            )),
        }
    }
}

/// Checks the invariants of the module docs; returns a description of the first violation.
pub fn check_allotment(machine: Machine, jobs: &[JobView], allot: &[u32]) -> Result<(), String> {
    if allot.len() != jobs.len() {
        return Err(format!(
            "{} allotments for {} jobs",
            allot.len(),
            jobs.len()
        ));
    }
    let total: u64 = allot.iter().map(|&a| a as u64).sum();
    if total > machine.cores as u64 {
        return Err(format!(
            "allotments sum to {total} > {} cores",
            machine.cores
        ));
    }
    if jobs.len() as u64 <= machine.cores as u64 {
        if let Some((job, _)) = jobs
            .iter()
            .zip(allot)
            .find(|(j, &a)| a == 0 && j.runnable > 0)
        {
            return Err(format!("job {} has work but no core", job.id));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub fn job(id: JobId, max_parallelism: u32) -> JobView {
        JobView {
            id,
            max_parallelism,
            runnable: max_parallelism,
            steal_success: 1.0,
            ..JobView::default()
        }
    }

    /// One quantum of SAWS's Fig. 3 program (a parent spawning `parallelism` long children) on
    /// `allot` cores, as a fluid: `min(allot, parallelism)` cores work, the rest steal in vain,
    /// and while children are left to spawn the parent's continuation (one item) is queued.
    /// `u` is Eq. 1's exact busy fraction.
    pub fn fluid_quantum(job: &mut JobView, allot: u32, parallelism: u32, quantum_ns: u64) {
        let busy = allot.min(parallelism);
        job.allot = allot;
        job.runnable = parallelism;
        job.work_ns = busy as u64 * quantum_ns;
        job.steal_ns = (allot - busy) as u64 * quantum_ns;
        job.steal_success = if allot == 0 {
            1.0
        } else {
            busy as f64 / allot as f64
        };
        let queued = if parallelism > allot { 1.0 } else { 0.0 };
        job.queued_avg = queued;
        job.queued_now = queued;
    }
}
