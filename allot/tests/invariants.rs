//! Property tests: every policy, built the way the daemon and the simulator build it
//! (`PolicyKind::from_str` + `build`), keeps the invariants of `check_allotment` on random job
//! sets under random sequences of starts, exits and quanta with random measurements, including
//! garbage (NaN, huge values) and more jobs than cores. A hand-rolled generator keeps the crate
//! free of dependencies; every failure prints the seed and step that reproduce it.

use tailctl_allot::rng::SplitMix64;
use tailctl_allot::{check_allotment, AllotPolicy, Event, JobView, Machine, PolicyKind};

/// The crate's own SplitMix64, with the draws these tests need on top.
struct Gen(SplitMix64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn float(&mut self, scale: f64) -> f64 {
        match self.below(40) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => -1.0,
            3 => 1e300,
            _ => self.unit() * scale,
        }
    }
}

fn policies() -> Vec<PolicyKind> {
    PolicyKind::NAMES
        .iter()
        .map(|n| n.parse::<PolicyKind>().unwrap())
        .filter(|k| *k != PolicyKind::Off)
        .collect()
}

/// A random measurement of job `id` that held `allot` cores during a quantum.
fn view(g: &mut Gen, id: u64, allot: u32, m: Machine) -> JobView {
    let max_parallelism = match g.below(4) {
        0 => 0,
        _ => 1 + g.below(2 * m.cores as u64) as u32,
    };
    let core_time = allot as u64 * m.quantum_ns;
    let work_ns = if core_time == 0 {
        0
    } else {
        g.below(core_time + 1)
    };
    JobView {
        id,
        allot,
        max_parallelism,
        runnable: g.below(max_parallelism as u64 + 2) as u32,
        work_ns,
        steal_ns: core_time.saturating_sub(work_ns),
        // Up to twice the allotted core-time: more than a window holds must not break a policy.
        token_wait_ns: g.below(2 * core_time + 1),
        steal_success: g.float(1.0),
        queued_avg: g.float(3.0 * m.cores as f64),
        queued_now: g.float(3.0 * m.cores as f64),
        queued_alpha: match g.below(3) {
            0 => None,
            1 => Some(g.float(1.0)),
            _ => Some(g.float(4.0) - 2.0),
        },
    }
}

fn exercise(kind: PolicyKind, seed: u64) {
    let mut g = Gen(SplitMix64::new(seed));
    let m = Machine {
        cores: 1 + g.below(64) as u32,
        quantum_ns: 1_000_000 * (1 + g.below(20)),
    };
    let mut policy: Box<dyn AllotPolicy> = kind.build_seeded(seed).unwrap();
    assert_eq!(policy.name(), kind.name());
    let mut ids: Vec<u64> = Vec::new();
    let mut allot: Vec<u32> = Vec::new();
    let mut next_id = 100;
    for step in 0..300 {
        let event = match g.below(10) {
            0..=2 => {
                ids.push(next_id);
                allot.push(0);
                next_id += 1;
                Event::JobStarted(next_id - 1)
            }
            3..=4 if !ids.is_empty() => {
                let i = g.below(ids.len() as u64) as usize;
                allot.remove(i);
                Event::JobExited(ids.remove(i))
            }
            _ => Event::Quantum,
        };
        let jobs: Vec<JobView> = ids
            .iter()
            .zip(&allot)
            .map(|(&id, &a)| view(&mut g, id, a, m))
            .collect();
        policy.decide(event, m, &jobs, &mut allot);
        if let Err(e) = check_allotment(m, &jobs, &allot) {
            panic!(
                "{} seed {seed} step {step} ({event:?}, {m:?}): {e}\n{allot:?}",
                kind.name()
            );
        }
        // Stronger than the invariant: with no more jobs than cores, nobody gets 0 (every
        // policy treats a live job as having work), and nobody gets more than the machine.
        assert!(allot.iter().all(|&a| a <= m.cores));
        if ids.len() as u32 <= m.cores {
            assert!(
                allot.iter().all(|&a| a >= 1),
                "{} seed {seed} step {step}: {allot:?}",
                kind.name()
            );
        }
        // Jobs outnumber the cores now and then (small machines); past twice the cores, all
        // jobs leave at once and the policy sees an empty machine.
        if ids.len() > 2 * m.cores as usize {
            let last = *ids.last().unwrap();
            ids.clear();
            allot.clear();
            policy.decide(Event::JobExited(last), m, &[], &mut []);
        }
    }
}

#[test]
fn every_policy_keeps_the_invariants_on_random_inputs() {
    let kinds = policies();
    assert_eq!(kinds.len(), PolicyKind::NAMES.len() - 1);
    for kind in kinds {
        for seed in 0..200 {
            exercise(kind, seed);
        }
    }
}

#[test]
fn names_round_trip_and_unknown_names_are_refused() {
    for name in PolicyKind::NAMES {
        let k: PolicyKind = name.parse().unwrap();
        assert_eq!(k.name(), *name);
        assert_eq!(
            k.build().map(|p| p.name()),
            (k != PolicyKind::Off).then_some(*name)
        );
    }
    let err = "saws".parse::<PolicyKind>().unwrap_err();
    assert!(err.contains("deq") && err.contains("drep"), "{err}");
}

#[test]
fn the_same_calls_give_the_same_allotments() {
    // Determinism: the daemon's and the simulator's results do not depend on hash-map order.
    for kind in policies() {
        let run = || {
            let mut p = kind.build_seeded(3).unwrap();
            let m = Machine {
                cores: 24,
                quantum_ns: 10_000_000,
            };
            let mut g = Gen(SplitMix64::new(11));
            let mut out = Vec::new();
            let mut allot = Vec::new();
            let mut jobs: Vec<JobView> = Vec::new();
            for id in 0..10u64 {
                jobs.push(JobView {
                    id,
                    ..Default::default()
                });
                allot.push(0);
                p.decide(Event::JobStarted(id), m, &jobs, &mut allot);
                for _ in 0..3 {
                    let views: Vec<_> = jobs
                        .iter()
                        .zip(&allot)
                        .map(|(j, &a)| view(&mut g, j.id, a, m))
                        .collect();
                    p.decide(Event::Quantum, m, &views, &mut allot);
                    out.push(allot.clone());
                }
            }
            out
        };
        assert_eq!(run(), run(), "{}", kind.name());
    }
}
