//! Finite-N simulation of the randomized work-stealing model of Sonenberg,
//! Kielanski and Van Houdt (seed 004), to validate against its mean-field
//! fixed point (Table 3).
//!
//! Model (their §3): N servers, each with Poisson parent arrivals at rate λ
//! and a FIFO of waiting parents. A parent entering service spawns `i`
//! children with probability `p_i`; the children wait at that server, are
//! served after the parent completes and before any waiting parent. Parents
//! take Exp(μ1), children Exp(μ2). An idle server (no parent, no child) probes
//! a uniformly random other server at rate `r`:
//! * child stealing: the probe takes one *waiting* child (a child in service
//!   is never stolen), which the thief serves;
//! * parent stealing: the probe takes the oldest waiting parent, which starts
//!   service at the thief and spawns its children there.
//!
//! Response time = parent arrival → the parent and all its children done.
//!
//! Design: every process is Markovian, so the simulator is an exact
//! continuous-time Markov chain simulation (Gillespie): the total event rate
//! is `Nλ + μ1·|serving parent| + μ2·|serving child| + r·|idle|`; one uniform
//! picks the event class, another the server within the class. Servers sit in
//! three index sets with O(1) insert, remove and uniform pick, so an event
//! costs O(1) whatever N is. Jobs that arrive in `[warmup, horizon]` are
//! measured (the run continues until they all finish), and the 95% interval
//! comes from 20 batch means over arrival time.

use std::collections::VecDeque;

use super::rng::Rng;

/// Which work a probe steals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Steal one waiting child.
    Child,
    /// Steal the oldest waiting parent.
    Parent,
}

impl Strategy {
    /// `child` or `parent`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Child => "child",
            Strategy::Parent => "parent",
        }
    }
}

/// Parameters of one run.
#[derive(Clone, Debug)]
pub struct MfConfig {
    /// Number of servers N.
    pub servers: usize,
    /// Load ρ = λ(1/μ1 + Σ n p_n / μ2); λ is derived from it.
    pub rho: f64,
    /// Parent service rate μ1.
    pub mu1: f64,
    /// Child service rate μ2.
    pub mu2: f64,
    /// `probs[i]` = probability of spawning `i` children (sums to 1).
    pub probs: Vec<f64>,
    /// Probe rate r of an idle server.
    pub probe_rate: f64,
    /// Stealing strategy.
    pub strategy: Strategy,
    /// End of the measurement window (time units).
    pub horizon: f64,
    /// Start of the measurement window.
    pub warmup: f64,
    /// Seed.
    pub seed: u64,
}

impl MfConfig {
    /// Per-server parent arrival rate λ for the configured ρ.
    pub fn lambda(&self) -> f64 {
        let children: f64 = self
            .probs
            .iter()
            .enumerate()
            .map(|(n, p)| n as f64 * p)
            .sum();
        self.rho / (1.0 / self.mu1 + children / self.mu2)
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if self.servers < 2 {
            return Err("need at least 2 servers".into());
        }
        if !(self.rho > 0.0 && self.rho < 1.0) {
            return Err(format!("load ρ must be in (0, 1), got {}", self.rho));
        }
        if !(self.mu1 > 0.0 && self.mu2 > 0.0 && self.mu1.is_finite() && self.mu2.is_finite()) {
            return Err("service rates must be finite and > 0".into());
        }
        if !(self.probe_rate > 0.0 && self.probe_rate.is_finite()) {
            return Err("probe rate must be finite and > 0".into());
        }
        if self.probs.is_empty() || self.probs.iter().any(|p| p.is_nan() || *p < 0.0) {
            return Err("children probabilities must be ≥ 0".into());
        }
        let s: f64 = self.probs.iter().sum();
        if !s.is_finite() || (s - 1.0).abs() > 1e-9 {
            return Err(format!("children probabilities sum to {s}, not 1"));
        }
        // A finite horizon: the simulation runs until it.
        if !(self.horizon > self.warmup && self.warmup >= 0.0 && self.horizon.is_finite()) {
            return Err("need 0 ≤ warmup < horizon, horizon finite".into());
        }
        Ok(())
    }
}

/// Result of one run.
#[derive(Clone, Debug)]
pub struct MfOutcome {
    /// Mean response time of the measured jobs.
    pub mean_response: f64,
    /// Half-width of the 95% confidence interval (batch means).
    pub ci95: f64,
    /// Measured jobs.
    pub jobs: u64,
    /// Simulated events.
    pub events: u64,
}

/// Uniformly pickable set of server indexes.
struct IndexSet {
    items: Vec<u32>,
    pos: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl IndexSet {
    fn new(n: usize) -> Self {
        Self {
            items: Vec::with_capacity(n),
            pos: vec![NONE; n],
        }
    }
    fn insert(&mut self, s: usize) {
        debug_assert_eq!(self.pos[s], NONE);
        self.pos[s] = self.items.len() as u32;
        self.items.push(s as u32);
    }
    fn remove(&mut self, s: usize) {
        let p = self.pos[s] as usize;
        let last = *self.items.last().expect("non-empty");
        self.items.swap_remove(p);
        if last as usize != s {
            self.pos[last as usize] = p as u32;
        }
        self.pos[s] = NONE;
    }
    fn len(&self) -> usize {
        self.items.len()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Serving {
    Idle,
    Parent,
    Child,
}

struct Server {
    serving: Serving,
    /// Job of the task in service.
    job: u32,
    /// Job whose children wait here, and how many.
    children_job: u32,
    children: u32,
    parents: VecDeque<u32>,
}

impl Server {
    /// Start serving parent `id`, whose `children` now wait here.
    fn start_parent(&mut self, id: u32, children: u32) {
        self.serving = Serving::Parent;
        self.job = id;
        self.children_job = id;
        self.children = children;
    }
}

struct Job {
    arrival: f64,
    remaining: u32,
}

/// Runs the model.
pub fn simulate(cfg: &MfConfig) -> Result<MfOutcome, String> {
    cfg.validate()?;
    let n = cfg.servers;
    let lambda = cfg.lambda();
    let mut rng = Rng::new(cfg.seed);
    let cdf: Vec<f64> = cfg
        .probs
        .iter()
        .scan(0.0, |a, p| {
            *a += p;
            Some(*a)
        })
        .collect();
    let mut servers: Vec<Server> = (0..n)
        .map(|_| Server {
            serving: Serving::Idle,
            job: NONE,
            children_job: NONE,
            children: 0,
            parents: VecDeque::new(),
        })
        .collect();
    let mut idle = IndexSet::new(n);
    let mut par = IndexSet::new(n);
    let mut chi = IndexSet::new(n);
    for s in 0..n {
        idle.insert(s);
    }
    let mut jobs: Vec<Job> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    const BATCHES: usize = 20;
    let batch_len = (cfg.horizon - cfg.warmup) / BATCHES as f64;
    let mut sums = [0.0f64; BATCHES];
    let mut counts = [0u64; BATCHES];
    let mut outstanding = 0u64; // measured jobs not yet finished
    let mut now = 0.0;
    let mut events = 0u64;

    // Moves server `s` between the three sets according to `to`.
    macro_rules! set_of {
        ($st:expr) => {
            match $st {
                Serving::Idle => &mut idle,
                Serving::Parent => &mut par,
                Serving::Child => &mut chi,
            }
        };
    }
    let sample_children = |rng: &mut Rng| -> u32 {
        let u = rng.uniform();
        cdf.iter().position(|&c| u < c).unwrap_or(cdf.len() - 1) as u32
    };

    loop {
        let rate = n as f64 * lambda
            + cfg.mu1 * par.len() as f64
            + cfg.mu2 * chi.len() as f64
            + cfg.probe_rate * idle.len() as f64;
        now += rng.exp(rate);
        events += 1;
        if now > cfg.horizon && outstanding == 0 {
            break;
        }
        let mut u = rng.uniform() * rate;
        // Each branch yields the server whose state changed and its new task, if any.
        let arrivals = n as f64 * lambda;
        let (s, completed): (usize, Option<u32>) = if u < arrivals {
            let s = rng.below(n);
            let id = if let Some(id) = free.pop() {
                jobs[id as usize] = Job {
                    arrival: now,
                    remaining: 1,
                };
                id
            } else {
                jobs.push(Job {
                    arrival: now,
                    remaining: 1,
                });
                (jobs.len() - 1) as u32
            };
            if now >= cfg.warmup && now <= cfg.horizon {
                outstanding += 1;
            }
            if servers[s].serving == Serving::Idle {
                idle.remove(s);
                let i = sample_children(&mut rng);
                jobs[id as usize].remaining += i;
                servers[s].start_parent(id, i);
                par.insert(s);
            } else {
                servers[s].parents.push_back(id);
            }
            continue;
        } else {
            u -= arrivals;
            let pr = cfg.mu1 * par.len() as f64;
            if u < pr {
                let s = par.items[rng.below(par.len())] as usize;
                (s, Some(servers[s].job))
            } else {
                u -= pr;
                let cr = cfg.mu2 * chi.len() as f64;
                if u < cr {
                    let s = chi.items[rng.below(chi.len())] as usize;
                    (s, Some(servers[s].job))
                } else {
                    // Probe by an idle server.
                    if idle.len() == 0 {
                        continue; // rounding at the end of the rate sum
                    }
                    let s = idle.items[rng.below(idle.len())] as usize;
                    let mut v = rng.below(n - 1);
                    if v >= s {
                        v += 1;
                    }
                    match cfg.strategy {
                        Strategy::Child => {
                            if servers[v].children > 0 {
                                servers[v].children -= 1;
                                let job = servers[v].children_job;
                                idle.remove(s);
                                servers[s].serving = Serving::Child;
                                servers[s].job = job;
                                chi.insert(s);
                            }
                        }
                        Strategy::Parent => {
                            if let Some(id) = servers[v].parents.pop_front() {
                                idle.remove(s);
                                let i = sample_children(&mut rng);
                                jobs[id as usize].remaining += i;
                                servers[s].start_parent(id, i);
                                par.insert(s);
                            }
                        }
                    }
                    continue;
                }
            }
        };
        // A task of job `id` completed at server `s`.
        let id = completed.expect("completion");
        let j = &mut jobs[id as usize];
        j.remaining -= 1;
        if j.remaining == 0 {
            let a = j.arrival;
            if a >= cfg.warmup && a <= cfg.horizon {
                let b = (((a - cfg.warmup) / batch_len) as usize).min(BATCHES - 1);
                sums[b] += now - a;
                counts[b] += 1;
                outstanding -= 1;
            }
            free.push(id);
        }
        let old = servers[s].serving;
        set_of!(old).remove(s);
        let sv = &mut servers[s];
        if sv.children > 0 {
            sv.children -= 1;
            sv.serving = Serving::Child;
            sv.job = sv.children_job;
        } else if let Some(next) = sv.parents.pop_front() {
            let i = sample_children(&mut rng);
            jobs[next as usize].remaining += i;
            servers[s].start_parent(next, i);
        } else {
            sv.serving = Serving::Idle;
            sv.job = NONE;
        }
        let new = servers[s].serving;
        set_of!(new).insert(s);
    }
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return Err("no job measured; lengthen the horizon".into());
    }
    let mean = sums.iter().sum::<f64>() / total as f64;
    let bm: Vec<f64> = sums
        .iter()
        .zip(&counts)
        .filter(|(_, &c)| c > 0)
        .map(|(s, &c)| s / c as f64)
        .collect();
    let k = bm.len() as f64;
    let bmean = bm.iter().sum::<f64>() / k;
    let var = bm.iter().map(|x| (x - bmean).powi(2)).sum::<f64>() / (k - 1.0).max(1.0);
    // t quantile for 19 degrees of freedom.
    let ci95 = 2.093 * (var / k).sqrt();
    Ok(MfOutcome {
        mean_response: mean,
        ci95,
        jobs: total,
        events,
    })
}

/// The paper's Table 3 mean-field values (N → ∞), μ1 = 1, μ2 = 2,
/// p = [5,4,3,2,1]/15: `(strategy, ρ, r, E[T])`.
pub const TABLE3: [(Strategy, f64, f64, f64); 8] = [
    (Strategy::Child, 0.75, 1.0, 4.5995),
    (Strategy::Child, 0.85, 1.0, 7.3690),
    (Strategy::Child, 0.75, 10.0, 2.7555),
    (Strategy::Child, 0.85, 10.0, 3.7038),
    (Strategy::Parent, 0.75, 1.0, 3.2998),
    (Strategy::Parent, 0.85, 1.0, 4.6779),
    (Strategy::Parent, 0.75, 10.0, 1.9448),
    (Strategy::Parent, 0.85, 10.0, 2.1823),
];

/// Table 3's children distribution, `p_i` for `i = 0..=4`.
pub fn table3_probs() -> Vec<f64> {
    [5.0, 4.0, 3.0, 2.0, 1.0].iter().map(|x| x / 15.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(strategy: Strategy, rho: f64, r: f64) -> MfConfig {
        MfConfig {
            servers: 200,
            rho,
            mu1: 1.0,
            mu2: 2.0,
            probs: table3_probs(),
            probe_rate: r,
            strategy,
            horizon: 300.0,
            warmup: 50.0,
            seed: 11,
        }
    }

    #[test]
    fn lambda_from_rho() {
        // Mean children 4/3, mean work 1 + 2/3 = 5/3.
        assert!((cfg(Strategy::Child, 0.75, 1.0).lambda() - 0.45).abs() < 1e-12);
    }

    #[test]
    fn no_children_no_stealing_is_mm1() {
        // p_0 = 1 and child stealing: nothing is ever stolen, each server is an
        // M/M/1 queue with E[T] = 1/(μ1 − λ) = 1/(1 − 0.5) = 2.
        let c = MfConfig {
            probs: vec![1.0],
            rho: 0.5,
            horizon: 2000.0,
            ..cfg(Strategy::Child, 0.5, 1.0)
        };
        let o = simulate(&c).unwrap();
        assert!((o.mean_response - 2.0).abs() < 0.05, "{o:?}");
    }

    #[test]
    fn invalid_configs() {
        let bad = [
            MfConfig {
                rho: 1.0,
                ..cfg(Strategy::Child, 0.5, 1.0)
            },
            MfConfig {
                probs: vec![0.5, 0.4],
                ..cfg(Strategy::Child, 0.5, 1.0)
            },
            MfConfig {
                servers: 1,
                ..cfg(Strategy::Child, 0.5, 1.0)
            },
            MfConfig {
                warmup: 400.0,
                ..cfg(Strategy::Child, 0.5, 1.0)
            },
            // An infinite horizon would never end.
            MfConfig {
                horizon: f64::INFINITY,
                ..cfg(Strategy::Child, 0.5, 1.0)
            },
        ];
        for c in bad {
            assert!(simulate(&c).is_err());
        }
    }
}
