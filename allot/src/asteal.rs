//! A-Steal (Agrawal, He and Leiserson, "Adaptive work stealing with parallelism feedback",
//! TOCS 2008), the baseline SAWS (seed 001) compares against and AMCilk ships as
//! PARALLELISM_FB, allotted by DEQ as in both papers.
//!
//! **Desire.** Multiplicative increase, multiplicative decrease on the utilisation of the last
//! quantum: with `u = work / allotted core-time`, the quantum is *efficient* when `u ≥ δ` and
//! *satisfied* when the job got at least its desire (`a ≥ d`); then
//!
//! ```text
//! d(q+1) = d(q)·ρ   if efficient and satisfied
//!          d(q)/ρ   if inefficient
//!          d(q)     if efficient and deprived
//! ```
//!
//! with `δ = 0.8` ([`DELTA`]) and `ρ = 2` ([`RHO`]), SAWS's settings, and `d = 1` for a new job.
//! The desire is real; it is clamped to `[1, min(max_parallelism, cores)]` and the allotment uses
//! its ceiling. Allotted core-time is `a·L`, or the measured work + steal time when that is more
//! (the allotment changed during the quantum), so a job that leaves allotted cores idle is
//! inefficient, as it should be.
//!
//! **Which `u`.** SAWS §3.2 defines `u(q) = w(q)/(a(q)L)` from the cores' working time
//! ([`Utilisation::CoreTime`], the default, what the daemon's kernel accounting gives); its
//! runtime (§4.2.1) approximates the same `u` by `1 − purely unsuccessful / all steal attempts`
//! "which can be used to calculate the processor desires of A-Steal", i.e. A-Steal and SAWS read
//! the same sampled `u`. [`Utilisation::Reported`] takes it from [`JobView::steal_success`], so a
//! controller that feeds SAWS a sampled `u` can feed A-Steal the same one.
//!
//! **Contention is not inefficiency.** On a machine the jobs share with other tasks, a job's
//! token holder can wait for a CPU another task holds (or for an idle one to wake up); that
//! allotted core-time was denied, not left idle, and [`JobView::token_wait_ns`] (the kernel's
//! count of it) comes off the allotted time. Without it, A-Steal halved a job that used every core it got whenever something else
//! ran beside it (the daemon, a shell, a map dump in a guest test).
//!
//! **Instability.** The rule is blind to the job's actual parallelism: a job of constant
//! parallelism 10 on 16 or more cores climbs 1, 2, 4, 8, 16, then finds 10/16 < δ inefficient,
//! drops to 8, finds 8 efficient and satisfied, doubles to 16, and so on for ever (SAWS's
//! Fig. 4(a); the test `oscillates_between_8_and_16_for_parallelism_10` reproduces it).
//!
//! Desires change at [`Event::Quantum`] only; job starts and exits re-run DEQ on the current
//! desires.

use std::collections::HashMap;

use crate::deq::deq_allot;
use crate::{AllotPolicy, Event, JobId, JobView, Machine};

/// Utilisation threshold `δ`: a quantum with `u ≥ δ` is efficient.
pub const DELTA: f64 = 0.8;

/// Responsiveness `ρ`: the factor by which the desire grows or shrinks.
pub const RHO: f64 = 2.0;

/// Where A-Steal's utilisation comes from; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Utilisation {
    /// Working time over allotted core-time (SAWS §3.2's `w(q)/(a(q)L)`).
    #[default]
    CoreTime,
    /// [`JobView::steal_success`], the `u` the controller reports for SAWS (§4.2.1's sampled
    /// estimate when the runtime counts steals).
    Reported,
}

/// A-Steal's desires allotted by DEQ; see the module docs.
///
/// ```
/// use tailctl_allot::{ASteal, AllotPolicy, Event, JobView, Machine};
/// let m = Machine { cores: 32, quantum_ns: 10_000_000 };
/// let mut p = ASteal::default();
/// let mut job = JobView { id: 1, max_parallelism: 32, ..Default::default() };
/// let mut allot = [0];
/// p.decide(Event::JobStarted(1), m, &[job], &mut allot);
/// assert_eq!(allot, [1]);
/// // Its one core worked the whole quantum: efficient and satisfied, so the desire doubles.
/// job.allot = 1;
/// job.work_ns = m.quantum_ns;
/// p.decide(Event::Quantum, m, &[job], &mut allot);
/// assert_eq!(allot, [2]);
/// // Both cores mostly stole: inefficient, so it halves.
/// job.allot = 2;
/// job.work_ns = m.quantum_ns;
/// job.steal_ns = m.quantum_ns;
/// p.decide(Event::Quantum, m, &[job], &mut allot);
/// assert_eq!(allot, [1]);
/// ```
#[derive(Clone, Debug)]
pub struct ASteal {
    delta: f64,
    rho: f64,
    util: Utilisation,
    /// Real desire of each job.
    desire: HashMap<JobId, f64>,
}

impl Default for ASteal {
    fn default() -> Self {
        Self::new(DELTA, RHO)
    }
}

impl ASteal {
    /// A-Steal with utilisation threshold `delta ∈ (0, 1]` and responsiveness `rho > 1`.
    pub fn new(delta: f64, rho: f64) -> Self {
        Self {
            delta: if delta.is_finite() && delta > 0.0 {
                delta.min(1.0)
            } else {
                DELTA
            },
            rho: if rho.is_finite() && rho > 1.0 {
                rho
            } else {
                RHO
            },
            util: Utilisation::CoreTime,
            desire: HashMap::new(),
        }
    }

    /// The same policy, reading its utilisation from `util`.
    pub fn with_utilisation(mut self, util: Utilisation) -> Self {
        self.util = util;
        self
    }

    /// The real desire the policy holds for `job` (after the last call).
    pub fn desire(&self, job: JobId) -> Option<f64> {
        self.desire.get(&job).copied()
    }

    /// Utilisation of the quantum (see the module docs); `None`: no evidence (every allotted
    /// core was denied to it and it ran nothing).
    fn utilisation(&self, job: &JobView, quantum_ns: u64) -> Option<f64> {
        if self.util == Utilisation::Reported {
            return Some(if job.steal_success.is_finite() {
                job.steal_success.clamp(0.0, 1.0)
            } else {
                1.0
            });
        }
        core_time_utilisation(
            job.work_ns,
            job.steal_ns,
            job.token_wait_ns,
            job.allot,
            quantum_ns,
        )
    }
}

/// SAWS §3.2's `w(q)/(a(q)L)`: working core-time over the allotted core-time of a window
/// (`allot · window_ns`), less `token_wait_ns`, the allotted time its token holders spent queued
/// for a CPU other tasks held (the job was denied it, it did not leave it idle), or over the
/// measured core-time when that is more (the allotment changed during the window, or the job ran
/// on lent cores); `None` when neither is positive.
///
/// ```
/// use tailctl_allot::asteal::core_time_utilisation;
/// // Two allotted cores for 10 ms, 15 ms of work.
/// assert_eq!(core_time_utilisation(15_000_000, 0, 0, 2, 10_000_000), Some(0.75));
/// // The same, but a holder waited 5 ms for a CPU another task held: all it could use, it used.
/// assert_eq!(core_time_utilisation(15_000_000, 0, 5_000_000, 2, 10_000_000), Some(1.0));
/// assert_eq!(core_time_utilisation(0, 0, 0, 0, 10_000_000), None);
/// ```
pub fn core_time_utilisation(
    work_ns: u64,
    steal_ns: u64,
    token_wait_ns: u64,
    allot: u32,
    window_ns: u64,
) -> Option<f64> {
    let allotted = (allot as f64 * window_ns as f64 - token_wait_ns as f64)
        .max(work_ns as f64 + steal_ns as f64);
    (allotted > 0.0).then(|| (work_ns as f64 / allotted).clamp(0.0, 1.0))
}

impl AllotPolicy for ASteal {
    fn name(&self) -> &'static str {
        "asteal"
    }

    fn decide(&mut self, event: Event, machine: Machine, jobs: &[JobView], allot: &mut [u32]) {
        let mut desire = HashMap::with_capacity(jobs.len());
        let mut want = Vec::with_capacity(jobs.len());
        for j in jobs {
            let cap = match j.max_parallelism {
                0 => machine.cores,
                m => m.min(machine.cores),
            }
            .max(1) as f64;
            let mut d = match self.desire.get(&j.id) {
                Some(&d) => d,
                // A new job asks for 1; one the policy has not measured keeps its allotment.
                None => j.allot.max(1) as f64,
            };
            // A job that had no core, or was denied all of it, learnt nothing this quantum:
            // its desire stands.
            let u = match event {
                Event::Quantum if j.allot > 0 => self.utilisation(j, machine.quantum_ns),
                _ => None,
            };
            if let Some(u) = u {
                let efficient = u >= self.delta;
                let satisfied = j.allot as f64 >= d.ceil();
                if !efficient {
                    d /= self.rho;
                } else if satisfied {
                    d *= self.rho;
                }
            }
            let d = if d.is_finite() {
                d.clamp(1.0, cap)
            } else {
                1.0
            };
            desire.insert(j.id, d);
            want.push(d.ceil() as u32);
        }
        self.desire = desire;
        deq_allot(machine.cores, &want, allot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_allotment, testing};

    fn run(cores: u32, parallelism: u32, quanta: usize) -> Vec<u32> {
        let m = Machine {
            cores,
            quantum_ns: 10_000_000,
        };
        let mut p = ASteal::default();
        let mut job = testing::job(3, cores);
        let mut allot = [0];
        p.decide(Event::JobStarted(3), m, &[job], &mut allot);
        let mut seen = vec![allot[0]];
        for _ in 0..quanta {
            testing::fluid_quantum(&mut job, allot[0], parallelism, m.quantum_ns);
            p.decide(Event::Quantum, m, &[job], &mut allot);
            check_allotment(m, &[job], &allot).unwrap();
            seen.push(allot[0]);
        }
        seen
    }

    #[test]
    fn oscillates_between_8_and_16_for_parallelism_10() {
        for cores in [16, 32, 64] {
            let seen = run(cores, 10, 24);
            assert_eq!(&seen[..5], &[1, 2, 4, 8, 16], "{cores} cores: {seen:?}");
            for w in seen[4..].chunks(2) {
                assert_eq!(w, &[16, 8][..w.len()], "{cores} cores: {seen:?}");
            }
        }
    }

    #[test]
    fn settles_when_the_cap_is_efficient() {
        // On 12 cores the cap (12) is efficient for parallelism 10 (10/12 ≥ 0.8): no oscillation.
        let seen = run(12, 10, 12);
        assert!(seen[5..].iter().all(|&a| a == 12), "{seen:?}");
    }

    #[test]
    fn reported_utilisation_is_the_controllers_u() {
        let m = Machine {
            cores: 32,
            quantum_ns: 10_000_000,
        };
        // Two cores, one working, one stealing: by core-time u = 0.5, inefficient; the sampled
        // ratio of a lone thief whose only victim works reads u = 1, efficient (and satisfied).
        let mut job = testing::job(1, 32);
        job.allot = 2;
        job.work_ns = m.quantum_ns;
        job.steal_ns = m.quantum_ns;
        job.steal_success = 1.0;
        let mut by_time = ASteal::default();
        let mut reported = ASteal::default().with_utilisation(Utilisation::Reported);
        for p in [&mut by_time, &mut reported] {
            let mut allot = [0];
            p.decide(Event::JobStarted(1), m, &[testing::job(1, 32)], &mut allot);
            // One busy quantum on one core: 1 → 2 either way.
            let mut first = testing::job(1, 32);
            testing::fluid_quantum(&mut first, 1, 32, m.quantum_ns);
            p.decide(Event::Quantum, m, &[first], &mut allot);
            assert_eq!(allot, [2]);
            p.decide(Event::Quantum, m, &[job], &mut allot);
        }
        assert_eq!(by_time.desire(1), Some(1.0));
        assert_eq!(reported.desire(1), Some(4.0));
        // Garbage reads as efficient, not as a panic or a NaN desire.
        job.steal_success = f64::NAN;
        let mut allot = [4];
        job.allot = 4;
        reported.decide(Event::Quantum, m, &[job], &mut allot);
        assert_eq!(reported.desire(1), Some(8.0));
        // Below δ halves.
        job.allot = 8;
        job.steal_success = 0.79;
        let mut allot = [8];
        reported.decide(Event::Quantum, m, &[job], &mut allot);
        assert_eq!(reported.desire(1), Some(4.0));
    }

    /// Allotted core-time its token holders spent queued behind other tasks was denied, not
    /// wasted: a job that used all the rest is efficient (it was halved before `token_wait_ns`).
    #[test]
    fn contention_is_not_inefficiency() {
        let m = Machine {
            cores: 4,
            quantum_ns: 10_000_000,
        };
        let mut p = ASteal::default();
        let mut allot = [0];
        p.decide(Event::JobStarted(1), m, &[testing::job(1, 4)], &mut allot);
        let mut job = testing::job(1, 4);
        job.allot = 1;
        job.work_ns = m.quantum_ns;
        p.decide(Event::Quantum, m, &[job], &mut allot);
        assert_eq!(allot, [2]);
        // Two cores, 14 ms of work: a holder waited 6 ms for a CPU another task held.
        job.allot = 2;
        job.work_ns = 14_000_000;
        job.token_wait_ns = 6_000_000;
        let mut denied = p.clone();
        denied.decide(Event::Quantum, m, &[job], &mut allot);
        assert_eq!(denied.desire(1), Some(4.0));
        // Without the wait the same 14 ms of 20 read as u = 0.7 < δ: halved.
        job.token_wait_ns = 0;
        p.decide(Event::Quantum, m, &[job], &mut allot);
        assert_eq!(p.desire(1), Some(1.0));
        // Denied every allotted core and ran nothing: no evidence either way, the desire stands.
        let mut starved = denied.clone();
        job.allot = 4;
        job.work_ns = 0;
        job.token_wait_ns = 4 * m.quantum_ns;
        starved.decide(Event::Quantum, m, &[job], &mut allot);
        assert_eq!(starved.desire(1), Some(4.0));
    }

    #[test]
    fn deprived_keeps_its_desire() {
        let m = Machine {
            cores: 8,
            quantum_ns: 10_000_000,
        };
        let mut p = ASteal::default();
        let mut jobs = vec![testing::job(1, 8), testing::job(2, 8)];
        let mut allot = vec![0, 0];
        p.decide(Event::JobStarted(2), m, &jobs, &mut allot);
        assert_eq!(allot, [1, 1]);
        // Both fully busy for a few quanta: 2, 4, then 8 each wanted, 4 each given (deprived).
        for want in [[2, 2], [4, 4], [4, 4], [4, 4]] {
            for (j, &a) in jobs.iter_mut().zip(&allot) {
                testing::fluid_quantum(j, a, 100, m.quantum_ns);
            }
            p.decide(Event::Quantum, m, &jobs, &mut allot);
            assert_eq!(allot, want);
        }
        assert_eq!(p.desire(1), Some(8.0));
        // Job 2 leaves: job 1 gets its whole desire at once.
        jobs.pop();
        allot.pop();
        p.decide(Event::JobExited(2), m, &jobs, &mut allot);
        assert_eq!(allot, [8]);
        assert_eq!(p.desire(2), None);
    }
}
