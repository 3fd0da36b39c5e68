//! DEQ (dynamic equipartitioning, McCann, Vaswani and Zahorjan 1993) on SAWS's desire (Cao,
//! Sun, Qian and Wu 2012, seed 001).
//!
//! **Desire.** At every quantum a job asks for
//! `d = u·a + β·(α·Q + (1−α)·Q′)` cores: `u·a` is how many of its `a` cores were busy (SAWS's
//! implementable form takes `u` from the steal counters: `u = 1 − purely unsuccessful steals /
//! steals`, [`JobView::steal_success`]), and `β·(…)` explores the parallelism still queued in its
//! deques: `Q` the total queue length thieves saw during the quantum ([`JobView::queued_avg`]),
//! `Q′` the total at its end ([`JobView::queued_now`]). `β = 2` is the paper's exploration
//! parameter. The paper's `α` is the fraction of the possible steal attempts that were made
//! (more samples, more weight to `Q`): a controller that counts attempts reports it in
//! [`JobView::queued_alpha`] (the simulator does, and the daemon from the kernel's stealing time);
//! otherwise we use the constant [`ALPHA`]
//! `= 0.5`, and the controller reports `Q = Q′` when there were no steal attempts, which is the
//! paper's `α = 0` case. A job seen for the first time asks for 1 core
//! ("the processor desire for the first quantum is fixed to be 1, since the job usually starts
//! with a single thread").
//!
//! **Rounding.** The real desire is rounded to the nearest whole core, then clamped to
//! `1..=min(max_parallelism, cores)` (a job never asks for fewer than one core — SAWS's desire
//! is at least the busy count, and a job that has not ended has something to run — nor for more
//! workers than it has).
//!
//! **Allotment (Algorithm 1 of SAWS).** With `P` cores and jobs `J`: every job whose desire is at
//! most `P/|J|` gets its desire; the rest split what is left the same way, recursively; when no
//! job's desire is that small, the remaining jobs split the remaining cores equally (leftover
//! cores to the jobs listed first, i.e. the oldest, as [`crate::Equi`] does). DEQ never gives a
//! job more than its desire, so cores can stay unallotted when every job is satisfied (the
//! kernel lends them out).
//!
//! Desires are recomputed at [`Event::Quantum`] only, from the view; on a job start or exit the
//! allotment is recomputed from the desires of the last quantum (a new job's is 1, a job not
//! measured yet keeps its allotment), so a departing job's cores go at once to the jobs that
//! wanted more.

use std::collections::HashMap;

use crate::{AllotPolicy, Event, JobId, JobView, Machine};

/// SAWS's exploration parameter `β` (the paper's setting).
pub const BETA: f64 = 2.0;

/// Weight of the averaged queue length `Q` against the snapshot `Q′` (the paper adapts it to the
/// number of steal samples; see the module docs).
pub const ALPHA: f64 = 0.5;

/// SAWS's desire `u·a + β·(α·Q + (1−α)·Q′)` of one job, before rounding.
///
/// ```
/// use tailctl_allot::{deq::saws_desire, JobView};
/// // 8 cores, 3/4 of the steal attempts found a working victim, 2 items queued on average and 4
/// // at the end: 0.75·8 + 2·(0.5·2 + 0.5·4) = 12.
/// let j = JobView { allot: 8, steal_success: 0.75, queued_avg: 2.0, queued_now: 4.0,
///                   ..Default::default() };
/// assert_eq!(saws_desire(&j, 0.5, 2.0), 12.0);
/// ```
pub fn saws_desire(job: &JobView, alpha: f64, beta: f64) -> f64 {
    let u = if job.steal_success.is_finite() {
        job.steal_success.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let q = finite_non_negative(job.queued_avg);
    let q_now = finite_non_negative(job.queued_now);
    u * job.allot as f64 + beta * (alpha * q + (1.0 - alpha) * q_now)
}

fn finite_non_negative(x: f64) -> f64 {
    if x.is_finite() {
        x.max(0.0)
    } else {
        0.0
    }
}

/// Rounds a real desire to whole cores: nearest integer, at least 1, at most the job's workers
/// (when known) and the machine's cores.
pub fn whole_desire(desire: f64, job: &JobView, cores: u32) -> u32 {
    let cap = match job.max_parallelism {
        0 => cores,
        m => m.min(cores),
    }
    .max(1);
    if !desire.is_finite() {
        return if desire > 0.0 { cap } else { 1 };
    }
    (desire.round().max(1.0).min(cap as f64)) as u32
}

/// DEQ (SAWS's Algorithm 1): `allot[i]` from `desire[i]` for `cores` cores; see the module docs.
///
/// ```
/// use tailctl_allot::deq::deq_allot;
/// // 16 cores, 4 jobs: the jobs wanting 2 and 3 (≤ 16/4) get them; the other two split 11.
/// let mut allot = [0; 4];
/// deq_allot(16, &[2, 20, 3, 20], &mut allot);
/// assert_eq!(allot, [2, 6, 3, 5]);
/// ```
pub fn deq_allot(cores: u32, desire: &[u32], allot: &mut [u32]) {
    debug_assert_eq!(desire.len(), allot.len());
    let mut left: Vec<usize> = (0..desire.len().min(allot.len())).collect();
    let mut free = cores as u64;
    while !left.is_empty() {
        let (n, round_free) = (left.len() as u64, free);
        // d ≤ P/|J| for this round's P and J, in integers.
        let small = |&i: &usize| desire[i] as u64 * n <= round_free;
        if !left.iter().any(small) {
            let (share, extra) = (free / n, free % n);
            for (k, &i) in left.iter().enumerate() {
                allot[i] = (share + u64::from((k as u64) < extra)) as u32;
            }
            return;
        }
        left.retain(|i| {
            if small(i) {
                allot[*i] = desire[*i];
                free -= desire[*i] as u64;
                false
            } else {
                true
            }
        });
    }
}

/// DEQ with SAWS's desire; see the module docs.
///
/// ```
/// use tailctl_allot::{AllotPolicy, Deq, Event, JobView, Machine};
/// let m = Machine { cores: 32, quantum_ns: 10_000_000 };
/// // A job that kept 4 cores busy with nothing queued, and one that kept its 16 busy with 10
/// // items queued: the first keeps 4, the second gets the other 28 (it asks for 36).
/// let jobs = [
///     JobView { id: 1, allot: 4, steal_success: 1.0, max_parallelism: 32, ..Default::default() },
///     JobView { id: 2, allot: 16, steal_success: 1.0, queued_avg: 10.0, queued_now: 10.0,
///               max_parallelism: 32, ..Default::default() },
/// ];
/// let mut allot = [4, 16];
/// Deq::default().decide(Event::Quantum, m, &jobs, &mut allot);
/// assert_eq!(allot, [4, 28]);
/// ```
#[derive(Clone, Debug)]
pub struct Deq {
    alpha: f64,
    beta: f64,
    /// Whole-core desire of each job at the last quantum.
    desire: HashMap<JobId, u32>,
}

impl Default for Deq {
    fn default() -> Self {
        Self::new(ALPHA, BETA)
    }
}

impl Deq {
    /// DEQ with SAWS's desire for the given `α ∈ [0, 1]` and `β ≥ 0` (the paper: `β = 2`).
    pub fn new(alpha: f64, beta: f64) -> Self {
        Self {
            alpha: if alpha.is_finite() {
                alpha.clamp(0.0, 1.0)
            } else {
                ALPHA
            },
            beta: if beta.is_finite() && beta >= 0.0 {
                beta
            } else {
                BETA
            },
            desire: HashMap::new(),
        }
    }

    /// The whole-core desire the policy holds for `job` (after the last call).
    pub fn desire(&self, job: JobId) -> Option<u32> {
        self.desire.get(&job).copied()
    }
}

impl AllotPolicy for Deq {
    fn name(&self) -> &'static str {
        "deq"
    }

    fn decide(&mut self, event: Event, machine: Machine, jobs: &[JobView], allot: &mut [u32]) {
        let mut desire = HashMap::with_capacity(jobs.len());
        let mut want = Vec::with_capacity(jobs.len());
        for j in jobs {
            let cap = whole_desire(f64::INFINITY, j, machine.cores);
            let d = match (event, self.desire.get(&j.id)) {
                (Event::Quantum, _) => {
                    let alpha = match j.queued_alpha {
                        Some(a) if a.is_finite() => a.clamp(0.0, 1.0),
                        _ => self.alpha,
                    };
                    whole_desire(saws_desire(j, alpha, self.beta), j, machine.cores)
                }
                (_, Some(&d)) => d.min(cap),
                // Unknown at a start or exit: a new job (allotment 0) asks for 1; a job the
                // policy has not measured yet keeps what it has.
                (_, None) => j.allot.clamp(1, cap),
            };
            desire.insert(j.id, d);
            want.push(d);
        }
        self.desire = desire;
        deq_allot(machine.cores, &want, allot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_allotment, testing};

    const M: Machine = Machine {
        cores: 16,
        quantum_ns: 10_000_000,
    };

    #[test]
    fn algorithm_1_by_hand() {
        let mut a = [0; 3];
        // All small: everybody gets its desire, 6 cores stay free.
        deq_allot(16, &[2, 3, 5], &mut a);
        assert_eq!(a, [2, 3, 5]);
        // Nobody small: equal split, leftovers to the first listed.
        deq_allot(16, &[10, 10, 10], &mut a);
        assert_eq!(a, [6, 5, 5]);
        // Two rounds: 1 ≤ 16/3 goes first; then 15/2 = 7.5: 7 fits, 12 gets the remaining 8.
        deq_allot(16, &[12, 1, 7], &mut a);
        assert_eq!(a, [8, 1, 7]);
        // More jobs than cores: the oldest get one each.
        let mut a = [9; 5];
        deq_allot(3, &[1, 1, 1, 1, 1], &mut a);
        assert_eq!(a, [1, 1, 1, 0, 0]);
    }

    #[test]
    fn rounding_and_caps() {
        let j = JobView {
            max_parallelism: 6,
            ..JobView::default()
        };
        assert_eq!(whole_desire(0.0, &j, 16), 1);
        assert_eq!(whole_desire(2.4, &j, 16), 2);
        assert_eq!(whole_desire(2.5, &j, 16), 3);
        assert_eq!(whole_desire(40.0, &j, 16), 6);
        assert_eq!(whole_desire(40.0, &j, 4), 4);
        assert_eq!(whole_desire(f64::NAN, &j, 4), 1);
        let unknown = JobView::default();
        assert_eq!(whole_desire(40.0, &unknown, 16), 16);
        // Garbage inputs do not produce garbage desires.
        let bad = JobView {
            allot: 4,
            steal_success: f64::NAN,
            queued_avg: -3.0,
            queued_now: f64::INFINITY,
            ..JobView::default()
        };
        assert_eq!(saws_desire(&bad, ALPHA, BETA), 4.0);
    }

    #[test]
    fn new_jobs_ask_for_one_core_and_exits_free_cores_at_once() {
        let mut p = Deq::default();
        let mut jobs = vec![testing::job(1, 16)];
        let mut allot = vec![0];
        p.decide(Event::JobStarted(1), M, &jobs, &mut allot);
        assert_eq!(allot, [1]);
        // A busy job with a lot queued grows by its queue, β at a time.
        jobs[0].allot = 1;
        jobs[0].queued_avg = 1.0;
        jobs[0].queued_now = 1.0;
        p.decide(Event::Quantum, M, &jobs, &mut allot);
        assert_eq!(allot, [3]);
        // A second job arrives: it gets 1, the first keeps its desire (3 ≤ 16/2).
        jobs.push(testing::job(2, 16));
        allot.push(0);
        p.decide(Event::JobStarted(2), M, &jobs, &mut allot);
        assert_eq!(allot, [3, 1]);
        check_allotment(M, &jobs, &allot).unwrap();
        // Job 1 asks for everything; job 2 exits: job 1 gets all of it at once.
        jobs[0].allot = 3;
        jobs[0].queued_avg = 30.0;
        jobs[0].queued_now = 30.0;
        p.decide(Event::Quantum, M, &jobs, &mut allot);
        assert_eq!(allot, [15, 1]);
        jobs.pop();
        allot.pop();
        p.decide(Event::JobExited(2), M, &jobs, &mut allot);
        assert_eq!(allot, [16]);
        assert_eq!(p.desire(1), Some(16));
        assert_eq!(p.desire(2), None, "forgotten");
    }

    #[test]
    fn the_controllers_alpha_weighs_the_sampled_queue_against_the_snapshot() {
        let mut p = Deq::default();
        let mut j = testing::job(1, 16);
        j.allot = 4;
        j.queued_avg = 6.0;
        j.queued_now = 1.0;
        let mut allot = [4];
        // No α from the controller: the constant 0.5, 4 + 2·(3 + 0.5) = 11.
        p.decide(Event::Quantum, M, &[j], &mut allot);
        assert_eq!(allot, [11]);
        // α = 0 (no steal attempts made): the snapshot alone, 4 + 2·1 = 6.
        j.queued_alpha = Some(0.0);
        p.decide(Event::Quantum, M, &[j], &mut allot);
        assert_eq!(allot, [6]);
        // Every possible attempt made: the sampled Q alone, 4 + 2·6 = 16.
        j.queued_alpha = Some(1.0);
        p.decide(Event::Quantum, M, &[j], &mut allot);
        assert_eq!(allot, [16]);
        // Garbage is clamped or ignored.
        j.queued_alpha = Some(7.0);
        p.decide(Event::Quantum, M, &[j], &mut allot);
        assert_eq!(allot, [16]);
        j.queued_alpha = Some(f64::NAN);
        p.decide(Event::Quantum, M, &[j], &mut allot);
        assert_eq!(allot, [11]);
    }

    #[test]
    fn converges_to_a_constant_parallelism_and_stays() {
        // SAWS's Fig. 4(b): a job of parallelism 10 alone on 32 cores. The desire climbs by
        // about β per quantum and settles at 10 without oscillating.
        let m = Machine {
            cores: 32,
            quantum_ns: 10_000_000,
        };
        let mut p = Deq::default();
        let mut job = testing::job(7, 32);
        let mut allot = [0];
        p.decide(Event::JobStarted(7), m, &[job], &mut allot);
        let mut seen = vec![allot[0]];
        for _ in 0..30 {
            testing::fluid_quantum(&mut job, allot[0], 10, m.quantum_ns);
            p.decide(Event::Quantum, m, &[job], &mut allot);
            seen.push(allot[0]);
        }
        assert!(seen[..4].windows(2).all(|w| w[1] > w[0]), "{seen:?}");
        assert!(seen[10..].iter().all(|&a| a == 10), "{seen:?}");
    }
}
