//! EQUI: every job gets an equal share of the cores, whatever it asks for.
//!
//! The baseline SAWS and AMCilk compare against ("WS-EQUI"). Leftover cores (when `cores` is not a
//! multiple of the job count) go to the jobs that started first, so the split is stable from one
//! quantum to the next and a core does not bounce between jobs.

use crate::{AllotPolicy, Event, JobView, Machine};

/// Equal partition; see the module docs.
///
/// ```
/// use tailctl_allot::{AllotPolicy, Equi, Event, JobView, Machine};
/// let jobs = [JobView { id: 1, runnable: 4, ..Default::default() },
///             JobView { id: 2, runnable: 4, ..Default::default() }];
/// let mut allot = [0; 2];
/// Equi.decide(Event::Quantum, Machine { cores: 5, quantum_ns: 10_000_000 }, &jobs, &mut allot);
/// assert_eq!(allot, [3, 2]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Equi;

impl AllotPolicy for Equi {
    fn name(&self) -> &'static str {
        "equi"
    }

    fn decide(&mut self, _event: Event, machine: Machine, jobs: &[JobView], allot: &mut [u32]) {
        if jobs.is_empty() {
            return;
        }
        let n = jobs.len() as u32;
        let (share, extra) = (machine.cores / n, machine.cores % n);
        // Jobs are listed in start order by every caller, so the first `extra` are the oldest.
        for (i, a) in allot.iter_mut().enumerate() {
            *a = share + u32::from((i as u32) < extra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_allotment, testing::job};

    #[test]
    fn splits_evenly_and_keeps_the_invariants() {
        let m = Machine {
            cores: 16,
            quantum_ns: 10_000_000,
        };
        for n in 1..=20u64 {
            let jobs: Vec<_> = (0..n).map(|i| job(i, 8)).collect();
            let mut allot = vec![0; jobs.len()];
            Equi.decide(Event::Quantum, m, &jobs, &mut allot);
            check_allotment(m, &jobs, &allot).unwrap();
            let (min, max) = (allot.iter().min().unwrap(), allot.iter().max().unwrap());
            assert!(max - min <= 1, "{allot:?}");
            assert_eq!(allot.iter().sum::<u32>(), 16);
        }
    }
}
