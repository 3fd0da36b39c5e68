//! DREP, Distributed Random Equi-Partition (Agrawal, Li, Lu and Moseley, "Scheduling parallel
//! DAG jobs online to minimize average flow time", SODA 2016): AMCilk's policy for mean flow
//! time (seed 002, §V-A).
//!
//! DREP ignores desires and quanta; it moves cores only when jobs come and go, and each core
//! decides on its own:
//!
//! * **a job arrives** (now `n` jobs): every core switches to the new job with probability
//!   `1/n`, independently (so the new job gets `P/n` cores in expectation, taken from the others
//!   in proportion to what they hold); idle cores go to it too;
//! * **a job exits**: each of its cores goes to a remaining job chosen uniformly at random.
//!
//! In expectation this is EQUI, but without a central decision and with far fewer moves (an
//! arrival moves `P/n` cores, not up to `P`). The randomness is a seeded SplitMix64, so a run
//! is reproducible ([`Drep::with_seed`]; [`crate::PolicyKind::build`] uses [`DEFAULT_SEED`]).
//!
//! **Deviation (starvation guard).** Alone, the coin flips can leave a new job with no core at
//! all — with `n` jobs on `P` cores that happens with probability `(1 − 1/n)^P`, 36% for 32 jobs
//! on 32 cores — and the allotment invariants ([`crate::check_allotment`]) forbid starving a job
//! while there are at least as many cores as jobs. So after the moves, while some job has no
//! core and `|J| ≤ P`, one core is taken from a job holding the most (the first listed among
//! them) and given to it. With more jobs than cores the jobs without a core wait for an exit.
//!
//! On a quantum nothing moves, except cores nobody holds (after every job left, or when the
//! machine grew), which go one by one to uniformly random jobs. Jobs the policy has not seen
//! are treated as arrivals and jobs missing from the list as exits, whatever the event says,
//! so a controller that misses an event does not break it.

use std::collections::HashMap;

use crate::rng::SplitMix64;
use crate::{AllotPolicy, Event, JobId, JobView, Machine};

/// The seed [`crate::PolicyKind::build`] gives DREP.
pub const DEFAULT_SEED: u64 = 0x0d2e_9000_5eed;

/// DREP; see the module docs.
///
/// ```
/// use tailctl_allot::{AllotPolicy, Drep, Event, JobView, Machine};
/// let m = Machine { cores: 32, quantum_ns: 10_000_000 };
/// let mut p = Drep::with_seed(1);
/// let mut jobs = vec![JobView { id: 1, ..Default::default() }];
/// let mut allot = vec![0];
/// p.decide(Event::JobStarted(1), m, &jobs, &mut allot);
/// assert_eq!(allot, [32]); // alone: every core switches with probability 1/1
/// jobs.push(JobView { id: 2, ..Default::default() });
/// allot.push(0);
/// p.decide(Event::JobStarted(2), m, &jobs, &mut allot);
/// assert_eq!(allot[0] + allot[1], 32); // about 16 each, by coin flips
/// jobs.remove(0);
/// allot.remove(0);
/// p.decide(Event::JobExited(1), m, &jobs, &mut allot);
/// assert_eq!(allot, [32]); // the freed cores all go to the one job left
/// ```
#[derive(Clone, Debug)]
pub struct Drep {
    rng: SplitMix64,
    /// Cores each job holds.
    held: HashMap<JobId, u32>,
}

impl Default for Drep {
    fn default() -> Self {
        Self::with_seed(DEFAULT_SEED)
    }
}

impl Drep {
    /// DREP whose coin flips come from `seed`.
    pub fn with_seed(seed: u64) -> Self {
        Self {
            rng: SplitMix64::new(seed),
            held: HashMap::new(),
        }
    }
}

impl AllotPolicy for Drep {
    fn name(&self) -> &'static str {
        "drep"
    }

    fn decide(&mut self, _event: Event, machine: Machine, jobs: &[JobView], allot: &mut [u32]) {
        let cores = machine.cores;
        // Survivors in list order, with what they held; departed jobs' cores are freed.
        let mut held: Vec<u32> = jobs
            .iter()
            .map(|j| self.held.get(&j.id).copied().unwrap_or(0))
            .collect();
        let known: Vec<bool> = jobs.iter().map(|j| self.held.contains_key(&j.id)).collect();
        let freed = {
            let present: std::collections::HashSet<JobId> = jobs.iter().map(|j| j.id).collect();
            self.held
                .iter()
                .filter(|(id, _)| !present.contains(id))
                .map(|(_, &c)| c as u64)
                .sum::<u64>()
        };
        // The machine may have shrunk: take cores back from the largest holders.
        let mut total: u64 = held.iter().map(|&c| c as u64).sum();
        while total > cores as u64 {
            let i = argmax(&held);
            held[i] -= 1;
            total -= 1;
        }
        // Exits: each freed core goes to a uniformly random survivor (a job known before).
        let survivors: Vec<usize> = (0..jobs.len()).filter(|&i| known[i]).collect();
        let mut idle = cores as u64 - total;
        if !survivors.is_empty() {
            let give = freed.min(idle);
            for _ in 0..give {
                let i = survivors[self.rng.below(survivors.len() as u64) as usize];
                held[i] += 1;
            }
            idle -= give;
        }
        // Arrivals, one after the other in list order: every core switches w.p. 1/n.
        let arrivals = (0..jobs.len()).filter(|&i| !known[i]);
        for (n, new) in (survivors.len() as u64 + 1..).zip(arrivals) {
            let mut got = idle;
            idle = 0;
            for (i, h) in held.iter_mut().enumerate() {
                if i == new {
                    continue;
                }
                let moving = (0..*h).filter(|_| self.rng.below(n) == 0).count() as u32;
                *h -= moving;
                got += moving as u64;
            }
            held[new] += got as u32;
        }
        // Cores nobody holds (no arrival to take them): to uniformly random jobs.
        if !jobs.is_empty() {
            for _ in 0..idle {
                let i = self.rng.below(jobs.len() as u64) as usize;
                held[i] += 1;
            }
        }
        // Starvation guard (a deviation, see the module docs).
        if jobs.len() as u64 <= cores as u64 {
            while let Some(z) = held.iter().position(|&h| h == 0) {
                let i = argmax(&held);
                debug_assert!(held[i] > 1);
                held[i] -= 1;
                held[z] += 1;
            }
        }
        self.held = jobs
            .iter()
            .map(|j| j.id)
            .zip(held.iter().copied())
            .collect();
        allot.copy_from_slice(&held[..allot.len()]);
    }
}

/// Index of the largest value (the first among equals).
fn argmax(v: &[u32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_allotment, testing::job};

    const M: Machine = Machine {
        cores: 32,
        quantum_ns: 10_000_000,
    };

    /// Starts jobs `0..n` one by one; returns the allotments.
    fn start(p: &mut Drep, n: u64) -> (Vec<JobView>, Vec<u32>) {
        let (mut jobs, mut allot) = (Vec::new(), Vec::new());
        for id in 0..n {
            jobs.push(job(id, 32));
            allot.push(0);
            p.decide(Event::JobStarted(id), M, &jobs, &mut allot);
            check_allotment(M, &jobs, &allot).unwrap();
            assert_eq!(allot.iter().sum::<u32>(), 32, "work conserving");
        }
        (jobs, allot)
    }

    #[test]
    fn an_arrival_takes_a_fair_share_in_expectation() {
        // Over many seeds, the n-th arrival gets P/n cores on average, and the others lose in
        // proportion to what they held.
        for n in [2u64, 4, 8] {
            let trials = 4000;
            let mut newest = 0u64;
            for seed in 0..trials {
                let mut p = Drep::with_seed(seed);
                let (_, allot) = start(&mut p, n);
                newest += allot[n as usize - 1] as u64;
            }
            let mean = newest as f64 / trials as f64;
            let want = 32.0 / n as f64;
            assert!(
                (mean - want).abs() < 0.05 * want + 0.1,
                "n {n}: {mean} vs {want}"
            );
        }
    }

    #[test]
    fn an_exit_spreads_its_cores_and_moves_nothing_else() {
        let mut p = Drep::with_seed(9);
        let (mut jobs, mut allot) = start(&mut p, 4);
        let before = allot.clone();
        // Quanta move nothing.
        for _ in 0..5 {
            p.decide(Event::Quantum, M, &jobs, &mut allot);
            assert_eq!(allot, before);
        }
        jobs.remove(1);
        allot.remove(1);
        p.decide(Event::JobExited(1), M, &jobs, &mut allot);
        assert_eq!(allot.iter().sum::<u32>(), 32);
        for (k, i) in [0, 2, 3].into_iter().enumerate() {
            assert!(allot[k] >= before[i], "{before:?} -> {allot:?}");
        }
    }

    #[test]
    fn same_seed_same_moves() {
        let run = |seed| start(&mut Drep::with_seed(seed), 12).1;
        assert_eq!(run(5), run(5));
        assert!((0..20).any(|s| run(s) != run(5)));
    }

    #[test]
    fn never_starves_a_job_while_cores_suffice() {
        // 32 jobs on 32 cores: the coin flips alone would often leave an arrival with nothing.
        for seed in 0..50 {
            let mut p = Drep::with_seed(seed);
            let (_, allot) = start(&mut p, 32);
            assert!(allot.iter().all(|&a| a == 1), "{allot:?}");
        }
        // More jobs than cores: no invariant to keep, but nothing breaks either.
        let mut p = Drep::with_seed(1);
        let (jobs, allot) = start(&mut p, 40);
        assert_eq!(allot.iter().sum::<u32>(), 32);
        assert_eq!(jobs.len(), allot.len());
    }
}
