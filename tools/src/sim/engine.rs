//! Discrete-event simulator of a work-stealing server with the tail-control
//! paper's policies (Li et al., PPoPP'16, §3–4).
//!
//! Design. `m` workers, each with a deque of *range tasks* `(request, n chunks)`.
//! A request is a sequence of phases: parallel-for phases of `n` equal chunks
//! and (for sub-linear requests) sequential segments of one chunk. A worker
//! that takes a range task splits it by recursive halving, as Cilk's
//! `parallel_for` and TBB's `simple_partitioner` do: it pushes the right
//! halves on the bottom of its deque and runs the leftmost chunk; it pops the
//! bottom when the chunk ends. With *adaptive* splitting (`tailctl-rt`'s,
//! rayon's and TBB's `auto_partitioner`), a range carries a split budget that
//! starts at `m` and halves with each split; a piece a thief took gets the
//! budget back up to `m`; a piece with no budget runs its chunks in a row, so
//! a range is only cut where work was stolen.
//! Thieves take the *top* (the largest remaining half) of a uniformly random
//! victim; every steal attempt, successful or not, costs `steal_cost` of the
//! thief's time. The worker that finishes a phase's last chunk continues with
//! the next phase (the join continuation). Nothing is processor-shared: a
//! request runs on exactly the workers that hold its chunks.
//!
//! When a worker runs out of local work it follows the paper's scheduling loop
//! (Figure 5, with the listing's bugs fixed: the steal loop exits on success,
//! and thieves skip deques whose top belongs to a non-stealable request):
//!
//! * steal-first (SF): steal while some deque top is stealable; otherwise
//!   admit the oldest request from the global FIFO; otherwise idle.
//! * admit-first (AF): admit first; steal only when the FIFO is empty.
//! * tail-control (TC): SF, and before stealing run `check_pileup_phase`:
//!   look up `l(q)` for the active count `q` (arrived, not completed) and
//!   mark every executing request whose processing time (time accumulated by
//!   workers that left it plus time elapsed on the workers now on it) exceeds
//!   it as not stealable. Serialization is lazy: the workers already on the
//!   request keep its local tasks.
//! * TC-clairvoyant: TC, but it compares the request's *total* work with
//!   `l(q)`, at admission and at every check: large requests are serialized
//!   before they run in parallel.
//! * random admission (default TBB): no FIFO; an arriving request is pushed on
//!   a random worker's deque; workers steal.
//!
//! Idle workers are modelled lazily: a worker that finds nothing stealable
//! and nothing to admit parks (in a real runtime it spins, but its attempts
//! cannot succeed); it is woken by an arrival (one parked worker admits it)
//! or by a push of stealable work (all parked workers resume stealing at a
//! random phase of their attempt). This keeps the event count proportional
//! to useful events: ~1 per chunk plus a few per steal.
//!
//! Events: each worker has at most one pending event (end of chunk, end of
//! steal attempt), plus the next arrival; the earliest is found by a linear
//! scan, cheaper than a heap for the few tens of workers simulated here.

use std::collections::VecDeque;

use super::rng::Rng;
use super::workload::Trace;

/// Scheduling policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Steal-first.
    StealFirst,
    /// Admit-first.
    AdmitFirst,
    /// Tail-control with a threshold table.
    TailControl,
    /// Tail-control that knows each request's work at arrival (a bound).
    Clairvoyant,
    /// Default-TBB-style random admission, no global FIFO.
    Random,
}

impl Policy {
    /// Short name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Policy::StealFirst => "sf",
            Policy::AdmitFirst => "af",
            Policy::TailControl => "tc",
            Policy::Clairvoyant => "tc-clairvoyant",
            Policy::Random => "random",
        }
    }

    /// Parses a short name (`sf`, `af`, `tc`, `tc-clairvoyant`/`tcc`, `random`/`tbb`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "sf" | "steal-first" => Policy::StealFirst,
            "af" | "admit-first" => Policy::AdmitFirst,
            "tc" | "tail-control" => Policy::TailControl,
            "tcc" | "tc-clairvoyant" | "clairvoyant" => Policy::Clairvoyant,
            "random" | "tbb" | "default-tbb" => Policy::Random,
            _ => return None,
        })
    }

    /// Whether the policy uses a threshold table.
    pub fn uses_table(self) -> bool {
        matches!(self, Policy::TailControl | Policy::Clairvoyant)
    }
}

/// How a parallel phase is cut into leaf chunks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Chunking {
    /// Leaves of (about) this much work, seconds: `n = round(work / chunk)`.
    Fixed(f64),
    /// This many leaves per phase whatever its work, like TBB's
    /// `auto_partitioner` (initial split into ~4 × P pieces).
    PerPhase(u32),
}

/// Simulator parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of workers (cores).
    pub cores: usize,
    /// Policy.
    pub policy: Policy,
    /// Time of one steal attempt, seconds.
    pub steal_cost: f64,
    /// How parallel phases are cut into chunks.
    pub chunking: Chunking,
    /// Parallel-for loops per request, run one after the other (a join
    /// between them), like the time steps of a PDE solver. With a sequential
    /// fraction `f > 0`, each loop is preceded by a sequential segment, so a
    /// request is `L × (f·W/L sequential, (1−f)·W/L parallel)`.
    pub loops: usize,
    /// Serialize at once (the kernel-enforced cap of tailctl's design) instead
    /// of lazily (the paper's runtime-only mechanism): when a request is
    /// marked, its queued tasks on every deque move to one of its workers.
    pub eager: bool,
    /// Join-blocking workers, as in `tailctl-rt` and rayon: a worker whose
    /// stolen halves are still running waits in its `join`; while it waits it
    /// may steal tasks but never admits a request, and the next loop of a
    /// request starts on the worker that started the request, once it gets
    /// back to that join. `false`: continuation passing (TBB, Cilk), where
    /// whoever finishes a loop's last chunk continues and nobody blocks.
    pub blocking_joins: bool,
    /// Root-blocking joins, as in TBB (the paper's runtime): pieces are joined
    /// by continuation passing, but the worker that started a request's loop
    /// (`spawn_root_and_wait`) waits for the whole loop; while it waits it may
    /// steal but never admits, and it runs the request's next loop.
    pub root_joins: bool,
    /// Blocking joins: a worker waiting in a join of a request that has been
    /// serialized may admit a new request on top of its stack (it would
    /// otherwise idle until the request's other worker finishes the stolen
    /// part, which serialization just made slower).
    pub admit_in_serialized_joins: bool,
    /// Adaptive splitting (see the module comment) instead of halving every
    /// range down to single chunks.
    pub adaptive_split: bool,
    /// Random admission: push an arriving request on the *top* of the chosen
    /// worker's deque, so its owner takes its requests oldest first, like
    /// `tailctl-rt`'s per-worker inbox (thieves then take the newest, where the
    /// runtime's take the oldest). `false`: the paper's default TBB, pushed
    /// on the bottom and taken newest first by the owner.
    pub random_fifo: bool,
    /// Thresholds in seconds, `[q-1]`, `INFINITY` for "never"; empty = never.
    pub thresholds: Vec<f64>,
    /// Seed of the scheduler's own randomness (victims, wake-up phases).
    pub seed: u64,
}

impl Config {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if self.cores == 0 {
            return Err("cores must be ≥ 1".into());
        }
        if !(self.steal_cost.is_finite() && self.steal_cost >= 0.0) {
            return Err(format!("steal cost must be ≥ 0, got {}", self.steal_cost));
        }
        match self.chunking {
            Chunking::Fixed(c) if !(c.is_finite() && c > 0.0) => {
                return Err(format!("chunk must be > 0, got {c}"));
            }
            Chunking::PerPhase(0) => return Err("chunks per phase must be ≥ 1".into()),
            _ => {}
        }
        if self.loops == 0 {
            return Err("loops per request must be ≥ 1".into());
        }
        if self.blocking_joins && self.policy == Policy::Random {
            return Err("blocking joins are not modelled for random admission".into());
        }
        if self.blocking_joins && self.eager {
            return Err("blocking joins and eager serialization cannot be combined".into());
        }
        if self.admit_in_serialized_joins && !self.blocking_joins {
            return Err("admitting in serialized joins needs blocking joins".into());
        }
        if self.root_joins && (self.blocking_joins || self.policy == Policy::Random) {
            return Err("root-blocking joins exclude blocking joins and random admission".into());
        }
        Ok(())
    }

    fn lookup(&self, active: usize) -> f64 {
        if self.thresholds.is_empty() {
            return f64::INFINITY;
        }
        self.thresholds[active.clamp(1, self.thresholds.len()) - 1]
    }
}

/// What a run produced.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Latency (arrival → completion) of each request, seconds, trace order.
    pub latency: Vec<f64>,
    /// Requests marked not stealable.
    pub serialized: usize,
    /// Steal attempts (each cost `steal_cost`).
    pub steal_attempts: u64,
    /// Range pieces pushed on deques (splits).
    pub pushes: u64,
    /// Successful steals.
    pub steals: u64,
    /// Total chunk work executed, seconds (equals the trace's total work).
    pub work_done: f64,
    /// Time of the last completion.
    pub end_time: f64,
    /// Largest number of active requests seen.
    pub max_active: usize,
    /// Simulated events.
    pub events: u64,
    /// Over serialized requests: work left when marked, seconds.
    pub post_mark_work: f64,
    /// Over serialized requests: time from marking to completion, seconds.
    pub post_mark_time: f64,
}

impl Outcome {
    /// Average parallelism of serialized requests after they were marked
    /// (1 = serialized at once; lazy serialization keeps it higher).
    pub fn post_mark_parallelism(&self) -> f64 {
        if self.post_mark_time > 0.0 {
            self.post_mark_work / self.post_mark_time
        } else {
            f64::NAN
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Task {
    req: u32,
    n: u32,
    /// Adaptive splitting: the split budget of the range this piece was cut
    /// from, and the worker that cut it (`NO_WORKER` for a loop's root, whose
    /// budget is `splits` itself).
    splits: u32,
    pusher: u32,
    /// Blocking joins: the frame that pushed this task (it joins on it).
    frame: u32,
}

const NO_FRAME: u32 = u32::MAX;
const NO_WORKER: u32 = u32::MAX;

/// Blocking joins: a task a worker took at top level, by stealing or as a
/// loop's root, with the stolen halves it still waits for.
#[derive(Clone, Copy, Debug)]
struct Frame {
    req: u32,
    parent: u32,
    pending: u32,
    worker: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Exec,
    Steal,
    Parked,
}

struct Worker {
    deque: VecDeque<Task>,
    state: State,
    next: f64,
    /// Request whose chunk is executing (valid in `Exec`).
    exec: u32,
    /// Chunks of the current piece still to run after this one, in a row
    /// (adaptive splitting; always 0 with full halving).
    run_left: u32,
    /// The paper's `curr_request` / `start_time` bookkeeping.
    cur: Option<u32>,
    start: f64,
    /// Blocking joins: frames on this worker's stack, innermost last.
    stack: Vec<u32>,
    /// Root-blocking joins: the request whose loop this worker started and
    /// waits for.
    waiting: Option<u32>,
}

#[derive(Clone, Debug, Default)]
struct Req {
    phase: u32,
    outstanding: u32,
    chunk_len: f64,
    stealable: bool,
    proc_accum: f64,
    scratch: f64,
    done_work: f64,
    /// Time the request was marked not stealable, and its work left then.
    marked_at: f64,
    left_at_mark: f64,
    /// Root-blocking joins: the worker that started the current loop.
    root: u32,
}

struct Sim<'a> {
    cfg: &'a Config,
    trace: &'a Trace,
    rng: Rng,
    workers: Vec<Worker>,
    reqs: Vec<Req>,
    fifo: VecDeque<u32>,
    active: usize,
    parked: usize,
    frames: Vec<Frame>,
    free_frames: Vec<u32>,
    out: Outcome,
}

impl<'a> Sim<'a> {
    /// Phase `i` of request `r`: (work, parallel?), and the phase count.
    fn phase(&self, r: usize, i: u32) -> (f64, bool, u32) {
        let w = self.trace.work[r];
        let f = self.trace.seq_fraction[r];
        let loops = self.cfg.loops as u32;
        let l = loops as f64;
        if f <= 0.0 {
            return (w / l, true, loops);
        }
        if f >= 1.0 {
            return (w, false, 1);
        }
        if i.is_multiple_of(2) {
            (f * w / l, false, 2 * loops)
        } else {
            ((1.0 - f) * w / l, true, 2 * loops)
        }
    }

    /// Sets up phase `i` of `r` and returns its root task.
    fn setup_phase(&mut self, r: u32, i: u32) -> Task {
        let (pw, par, _) = self.phase(r as usize, i);
        let n = match (par, self.cfg.chunking) {
            (false, _) => 1,
            (true, Chunking::Fixed(c)) => ((pw / c).round() as u32).max(1),
            (true, Chunking::PerPhase(k)) => k,
        };
        let q = &mut self.reqs[r as usize];
        q.phase = i;
        q.outstanding = n;
        q.chunk_len = pw / n as f64;
        Task {
            req: r,
            n,
            frame: NO_FRAME,
            splits: self.workers.len() as u32,
            pusher: NO_WORKER,
        }
    }

    fn set_current(&mut self, w: usize, new: Option<u32>, now: f64) {
        let wk = &mut self.workers[w];
        if wk.cur == new {
            return;
        }
        if let Some(old) = wk.cur {
            self.reqs[old as usize].proc_accum += now - wk.start;
        }
        wk.cur = new;
        wk.start = now;
    }

    fn has_stealable(&self, thief: usize) -> bool {
        self.workers.iter().enumerate().any(|(v, wk)| {
            v != thief
                && wk
                    .deque
                    .front()
                    .is_some_and(|t| self.reqs[t.req as usize].stealable)
        })
    }

    /// Processing time of `r` so far: accumulated plus elapsed on its workers.
    fn processed(&self, r: u32, now: f64) -> f64 {
        self.reqs[r as usize].proc_accum
            + self
                .workers
                .iter()
                .filter(|w| w.cur == Some(r))
                .map(|w| now - w.start)
                .sum::<f64>()
    }

    fn mark(&mut self, r: u32, now: f64) {
        if !self.reqs[r as usize].stealable {
            return;
        }
        let left = self.trace.work[r as usize] - self.processed(r, now);
        let q = &mut self.reqs[r as usize];
        if q.stealable {
            q.stealable = false;
            q.marked_at = now;
            q.left_at_mark = left;
            self.out.serialized += 1;
            if self.cfg.eager {
                self.gather(r);
            }
        }
    }

    /// Eager serialization: moves every queued task of `r` to the deque of one
    /// worker on `r`; the others finish the chunk they are running and leave.
    fn gather(&mut self, r: u32) {
        let Some(owner) = (0..self.workers.len())
            .find(|&w| self.workers[w].state == State::Exec && self.workers[w].exec == r)
        else {
            return; // not running yet (clairvoyant admission): nothing to move
        };
        for v in 0..self.workers.len() {
            if v == owner {
                continue;
            }
            // Adaptive splitting: the chunks another worker would still run
            // in a row move too (the kernel would throttle that thread).
            let wk = &mut self.workers[v];
            if wk.state == State::Exec && wk.exec == r && wk.run_left > 0 {
                let rest = Task {
                    req: r,
                    n: wk.run_left,
                    frame: NO_FRAME,
                    splits: 0,
                    pusher: owner as u32,
                };
                wk.run_left = 0;
                self.workers[owner].deque.push_front(rest);
            }
            if !self.workers[v].deque.iter().any(|t| t.req == r) {
                continue;
            }
            let moved: Vec<Task> = {
                let dq = &mut self.workers[v].deque;
                let (mine, rest): (Vec<Task>, Vec<Task>) = dq.drain(..).partition(|t| t.req == r);
                dq.extend(rest);
                mine
            };
            let od = &mut self.workers[owner].deque;
            for t in moved.into_iter().rev() {
                od.push_front(t);
            }
        }
    }

    /// The paper's `check_pileup_phase`.
    fn check_pileup(&mut self, now: f64) {
        let l = self.cfg.lookup(self.active);
        if l.is_infinite() {
            return;
        }
        if self.cfg.policy == Policy::Clairvoyant {
            for w in 0..self.workers.len() {
                if let Some(r) = self.workers[w].cur {
                    if self.trace.work[r as usize] > l {
                        self.mark(r, now);
                    }
                }
            }
            return;
        }
        // Two passes: sum elapsed time per request over the workers on it
        // (the paper's hashtable), then compare and reset.
        for wk in &self.workers {
            if let Some(r) = wk.cur {
                self.reqs[r as usize].scratch += now - wk.start;
            }
        }
        for w in 0..self.workers.len() {
            if let Some(r) = self.workers[w].cur {
                let q = &mut self.reqs[r as usize];
                if q.scratch == f64::NEG_INFINITY {
                    continue; // already handled through another worker
                }
                let pt = q.proc_accum + q.scratch;
                q.scratch = f64::NEG_INFINITY;
                if pt > l {
                    self.mark(r, now);
                }
            }
        }
        for wk in &self.workers {
            if let Some(r) = wk.cur {
                self.reqs[r as usize].scratch = 0.0;
            }
        }
    }

    fn wake_all(&mut self, now: f64) {
        if self.parked == 0 {
            return;
        }
        if self.cfg.policy.uses_table() {
            self.check_pileup(now);
        }
        for w in 0..self.workers.len() {
            if self.workers[w].state == State::Parked {
                // A spinning thief notices at a random point of its current attempt.
                let phase = self.rng.uniform_pos();
                let wk = &mut self.workers[w];
                wk.state = State::Steal;
                wk.next = now + self.cfg.steal_cost * phase;
                self.out.steal_attempts += 1;
            }
        }
        self.parked = 0;
    }

    fn park(&mut self, w: usize) {
        let wk = &mut self.workers[w];
        wk.state = State::Parked;
        wk.next = f64::INFINITY;
        self.parked += 1;
    }

    fn begin_attempt(&mut self, w: usize, now: f64) {
        let wk = &mut self.workers[w];
        wk.state = State::Steal;
        wk.next = now + self.cfg.steal_cost;
        self.out.steal_attempts += 1;
    }

    /// Starts `task` on `w`. With blocking joins, a task that was stolen or is
    /// a loop's root (`new_frame`) opens a frame; one popped from the worker's
    /// own deque runs inside the current frame.
    fn start_task(&mut self, w: usize, task: Task, now: f64, new_frame: bool) {
        self.set_current(w, Some(task.req), now);
        let frame = if !self.cfg.blocking_joins {
            NO_FRAME
        } else if new_frame {
            let f = Frame {
                req: task.req,
                parent: task.frame,
                pending: 0,
                worker: w as u32,
            };
            let id = match self.free_frames.pop() {
                Some(id) => {
                    self.frames[id as usize] = f;
                    id
                }
                None => {
                    self.frames.push(f);
                    (self.frames.len() - 1) as u32
                }
            };
            self.workers[w].stack.push(id);
            id
        } else {
            *self.workers[w]
                .stack
                .last()
                .expect("own task outside a frame")
        };
        let stealable = self.reqs[task.req as usize].stealable;
        let chunk = self.reqs[task.req as usize].chunk_len;
        let m = self.workers.len() as u32;
        // Full halving: an unlimited budget. Adaptive: rayon's rule, a piece
        // run where it was cut gets half its range's budget, a stolen one at
        // least `m`.
        let mut budget = if !self.cfg.adaptive_split {
            u32::MAX
        } else if task.pusher == NO_WORKER {
            task.splits
        } else if task.pusher == w as u32 {
            task.splits / 2
        } else {
            m.max(task.splits / 2)
        };
        let wk = &mut self.workers[w];
        let mut n = task.n;
        let mut pushed = false;
        while n > 1 && budget > 0 {
            let half = n / 2;
            wk.deque.push_back(Task {
                req: task.req,
                n: half,
                frame,
                splits: budget,
                pusher: w as u32,
            });
            pushed = true;
            self.out.pushes += 1;
            n -= half;
            if self.cfg.adaptive_split {
                budget /= 2;
            }
        }
        wk.state = State::Exec;
        wk.exec = task.req;
        wk.run_left = n - 1;
        wk.next = now + chunk;
        if pushed && stealable {
            self.wake_all(now);
        }
    }

    fn admit(&mut self, w: usize, now: f64) {
        let r = self.fifo.pop_front().expect("admit with an empty FIFO");
        let task = self.setup_phase(r, 0);
        if self.cfg.root_joins {
            self.workers[w].waiting = Some(r);
            self.reqs[r as usize].root = w as u32;
        }
        if self.cfg.policy == Policy::Clairvoyant
            && self.trace.work[r as usize] > self.cfg.lookup(self.active)
        {
            self.mark(r, now);
        }
        self.start_task(w, task, now, true);
    }

    /// The scheduling loop once local work is exhausted (`cur` is already None).
    fn find_work(&mut self, w: usize, now: f64) {
        if let Some(task) = self.workers[w].deque.pop_back() {
            // Random admission's pushed requests (continuation mode only).
            self.start_task(w, task, now, true);
            return;
        }
        if let Some(r) = self.workers[w].waiting {
            // In `spawn_root_and_wait`: resume, or steal but never admit.
            if self.reqs[r as usize].outstanding == 0 {
                self.resume_root(w, r, now);
                return;
            }
            if self.cfg.policy.uses_table() {
                self.check_pileup(now);
            }
            if self.has_stealable(w) {
                self.begin_attempt(w, now);
            } else {
                self.park(w);
            }
            return;
        }
        match self.cfg.policy {
            Policy::StealFirst | Policy::TailControl | Policy::Clairvoyant => {
                if self.cfg.policy.uses_table() {
                    self.check_pileup(now);
                }
                if self.has_stealable(w) {
                    self.begin_attempt(w, now);
                } else if !self.fifo.is_empty() {
                    self.admit(w, now);
                } else {
                    self.park(w);
                }
            }
            Policy::AdmitFirst => {
                if !self.fifo.is_empty() {
                    self.admit(w, now);
                } else if self.has_stealable(w) {
                    self.begin_attempt(w, now);
                } else {
                    self.park(w);
                }
            }
            Policy::Random => {
                if self.has_stealable(w) {
                    self.begin_attempt(w, now);
                } else {
                    self.park(w);
                }
            }
        }
    }

    fn attempt_done(&mut self, w: usize, now: f64) {
        if let Some(r) = self.workers[w].waiting {
            if self.reqs[r as usize].outstanding == 0 {
                self.resume_root(w, r, now);
                return;
            }
        }
        if self.cfg.blocking_joins {
            if let Some(&f) = self.workers[w].stack.last() {
                if self.frames[f as usize].pending == 0 {
                    // The join it was waiting in is complete: resume.
                    self.unwind(w, now);
                    return;
                }
            }
        }
        let m = self.workers.len();
        if m > 1 {
            let mut v = self.rng.below(m - 1);
            if v >= w {
                v += 1;
            }
            let top = self.workers[v].deque.front().copied();
            if let Some(t) = top {
                if self.reqs[t.req as usize].stealable {
                    self.workers[v].deque.pop_front();
                    self.out.steals += 1;
                    if t.frame != NO_FRAME {
                        self.frames[t.frame as usize].pending += 1;
                    }
                    self.start_task(w, t, now, true);
                    return;
                }
            }
        }
        // try_random_steal keeps going while some victim is stealable.
        if self.has_stealable(w) {
            self.begin_attempt(w, now);
        } else if !self.may_admit(w) {
            self.park(w); // blocked in a join: may steal, never admits
        } else if self.cfg.policy != Policy::Random && !self.fifo.is_empty() {
            self.admit(w, now);
        } else {
            self.park(w);
        }
    }

    fn chunk_done(&mut self, w: usize, now: f64) {
        let r = self.workers[w].exec;
        let q = &mut self.reqs[r as usize];
        q.outstanding -= 1;
        q.done_work += q.chunk_len;
        self.out.work_done += q.chunk_len;
        let chunk = q.chunk_len;
        let wk = &mut self.workers[w];
        if wk.run_left > 0 {
            wk.run_left -= 1;
            wk.next = now + chunk;
            return;
        }
        if self.cfg.blocking_joins {
            // Loops end and requests complete when their root frame unwinds.
            if let Some(task) = self.workers[w].deque.pop_back() {
                self.start_task(w, task, now, false);
            } else {
                self.unwind(w, now);
            }
            return;
        }
        if q.outstanding == 0 {
            let root = q.root as usize;
            if self.cfg.root_joins && root != w {
                // The loop is done: its root worker resumes it.
                let rk = &mut self.workers[root];
                if rk.state == State::Parked {
                    rk.state = State::Steal;
                    rk.next = now;
                    self.parked -= 1;
                }
            } else if self.next_loop_or_complete(w, r, now) {
                return;
            }
        }
        if let Some(task) = self.workers[w].deque.pop_back() {
            self.start_task(w, task, now, false);
        } else {
            self.set_current(w, None, now);
            self.find_work(w, now);
        }
    }

    /// Root-blocking joins: `w` waited for `r`'s loop, which is done; it starts
    /// the next loop or completes the request and goes back to the top level.
    fn resume_root(&mut self, w: usize, r: u32, now: f64) {
        if !self.next_loop_or_complete(w, r, now) {
            self.set_current(w, None, now);
            self.find_work(w, now);
        }
    }

    /// `r`'s current loop is done: `w` starts the next one (true), or the
    /// request completes and `w` stops waiting for it (false).
    fn next_loop_or_complete(&mut self, w: usize, r: u32, now: f64) -> bool {
        let next = self.reqs[r as usize].phase + 1;
        let (_, _, phases) = self.phase(r as usize, 0);
        if next < phases {
            let task = self.setup_phase(r, next);
            self.start_task(w, task, now, true);
            return true;
        }
        self.complete(r, now);
        self.workers[w].waiting = None;
        false
    }

    fn complete(&mut self, r: u32, now: f64) {
        self.out.latency[r as usize] = now - self.trace.arrival[r as usize];
        let q = &self.reqs[r as usize];
        if !q.stealable {
            self.out.post_mark_work += q.left_at_mark;
            self.out.post_mark_time += now - q.marked_at;
        }
        self.out.end_time = now;
        self.active -= 1;
    }

    /// Blocking joins: `w`'s deque is empty. Completes finished frames from
    /// the top of its stack (notifying the frames that joined on them), starts
    /// a request's next loop when its root frame completes, and otherwise
    /// waits in the innermost join (stealing) or goes back to the top level.
    fn unwind(&mut self, w: usize, now: f64) {
        loop {
            let Some(&f) = self.workers[w].stack.last() else {
                self.set_current(w, None, now);
                self.find_work(w, now);
                return;
            };
            let fr = self.frames[f as usize];
            if fr.pending > 0 {
                // Waiting in a join: steal (never admit) until it completes.
                self.set_current(w, None, now);
                if self.cfg.policy.uses_table() {
                    self.check_pileup(now);
                }
                if self.has_stealable(w) {
                    self.begin_attempt(w, now);
                } else if self.may_admit(w) && !self.fifo.is_empty() {
                    self.admit(w, now);
                } else {
                    self.park(w);
                }
                return;
            }
            self.workers[w].stack.pop();
            self.free_frames.push(f);
            if fr.parent != NO_FRAME {
                let p = fr.parent as usize;
                self.frames[p].pending -= 1;
                let v = self.frames[p].worker as usize;
                if self.frames[p].pending == 0
                    && v != w
                    && self.workers[v].state == State::Parked
                    && self.workers[v].stack.last() == Some(&fr.parent)
                {
                    // Wake the joiner; it resumes at its next (immediate) event.
                    self.parked -= 1;
                    let vk = &mut self.workers[v];
                    vk.state = State::Steal;
                    vk.next = now;
                }
                continue;
            }
            // A loop's root frame: the loop is done.
            if self.next_loop_or_complete(w, fr.req, now) {
                return;
            }
        }
    }

    /// Whether `w` may admit a request: at the top level, or (with
    /// `admit_in_serialized_joins`) waiting in a join of a serialized request.
    fn may_admit(&self, w: usize) -> bool {
        let wk = &self.workers[w];
        if wk.waiting.is_some() {
            return false;
        }
        match wk.stack.last() {
            None => true,
            Some(&f) => {
                self.cfg.admit_in_serialized_joins
                    && !self.reqs[self.frames[f as usize].req as usize].stealable
            }
        }
    }

    /// A parked worker that may admit an arriving request.
    fn is_idle_top_level(&self, w: usize) -> bool {
        self.workers[w].state == State::Parked && self.may_admit(w)
    }

    fn arrival(&mut self, r: u32, now: f64) {
        self.active += 1;
        self.out.max_active = self.out.max_active.max(self.active);
        if self.cfg.policy == Policy::Random {
            let task = self.setup_phase(r, 0);
            let v = self.rng.below(self.workers.len());
            if self.cfg.random_fifo {
                // At the far end from the owner, which takes requests oldest first.
                self.workers[v].deque.push_front(task);
            } else {
                self.workers[v].deque.push_back(task);
            }
            if self.workers[v].state == State::Parked {
                self.workers[v].state = State::Exec; // placeholder, set by find_work
                self.parked -= 1;
                self.find_work(v, now);
            } else {
                self.wake_all(now);
            }
            return;
        }
        self.fifo.push_back(r);
        // One spinning top-level worker admits it (in SF it finds nothing to
        // steal first); workers blocked in a join never admit.
        let idle = (0..self.workers.len())
            .filter(|&w| self.is_idle_top_level(w))
            .count();
        if idle > 0 {
            let k = self.rng.below(idle);
            let w = (0..self.workers.len())
                .filter(|&w| self.is_idle_top_level(w))
                .nth(k)
                .expect("idle count");
            self.workers[w].state = State::Exec;
            self.parked -= 1;
            self.find_work(w, now);
        }
    }
}

/// Runs one policy on a trace. `progress` is called with the number of
/// requests that arrived since the last call (every 1024 arrivals).
pub fn simulate(
    cfg: &Config,
    trace: &Trace,
    progress: Option<&(dyn Fn(u64) + Sync)>,
) -> Result<Outcome, String> {
    cfg.validate()?;
    let n = trace.len();
    if n > u32::MAX as usize {
        return Err("too many requests".into());
    }
    let mut sim = Sim {
        cfg,
        trace,
        rng: Rng::stream(cfg.seed, 7),
        workers: (0..cfg.cores)
            .map(|_| Worker {
                deque: VecDeque::new(),
                state: State::Parked,
                next: f64::INFINITY,
                exec: 0,
                run_left: 0,
                cur: None,
                start: 0.0,
                stack: Vec::new(),
                waiting: None,
            })
            .collect(),
        reqs: vec![
            Req {
                stealable: true,
                ..Req::default()
            };
            n
        ],
        fifo: VecDeque::new(),
        active: 0,
        parked: cfg.cores,
        frames: Vec::new(),
        free_frames: Vec::new(),
        out: Outcome {
            latency: vec![f64::NAN; n],
            ..Outcome::default()
        },
    };
    let mut next_arrival = 0usize;
    loop {
        let ta = trace
            .arrival
            .get(next_arrival)
            .copied()
            .unwrap_or(f64::INFINITY);
        let (mut bw, mut bt) = (usize::MAX, f64::INFINITY);
        for (w, wk) in sim.workers.iter().enumerate() {
            if wk.next < bt {
                bt = wk.next;
                bw = w;
            }
        }
        if ta.is_infinite() && bt.is_infinite() {
            break;
        }
        sim.out.events += 1;
        if ta <= bt {
            sim.arrival(next_arrival as u32, ta);
            next_arrival += 1;
            if let Some(p) = progress {
                if next_arrival.is_multiple_of(1024) {
                    p(1024);
                }
            }
        } else {
            match sim.workers[bw].state {
                State::Exec => sim.chunk_done(bw, bt),
                State::Steal => sim.attempt_done(bw, bt),
                State::Parked => unreachable!("parked workers have no event"),
            }
        }
    }
    if let Some(p) = progress {
        p((n % 1024) as u64);
    }
    if sim.active != 0 || sim.out.latency.iter().any(|l| l.is_nan()) {
        return Err(format!(
            "internal error: {} requests never completed",
            sim.active
        ));
    }
    Ok(sim.out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::workload::{ArrivalSpec, WorkSpec};

    fn cfg(policy: Policy) -> Config {
        Config {
            cores: 4,
            policy,
            steal_cost: 1e-6,
            chunking: Chunking::Fixed(1e-4),
            loops: 1,
            eager: false,
            blocking_joins: false,
            root_joins: false,
            admit_in_serialized_joins: false,
            adaptive_split: false,
            random_fifo: false,
            thresholds: vec![],
            seed: 1,
        }
    }

    /// One embarrassingly parallel request of `work` seconds, arriving at 0.
    fn lone(work: f64) -> Trace {
        Trace {
            arrival: vec![0.0],
            work: vec![work],
            seq_fraction: vec![0.0],
        }
    }

    #[test]
    fn single_request_runs_in_parallel() {
        // 8 ms of work on 4 cores, no steal cost: 2 ms plus nothing.
        let trace = lone(0.008);
        let c = Config {
            steal_cost: 0.0,
            ..cfg(Policy::StealFirst)
        };
        let o = simulate(&c, &trace, None).unwrap();
        assert!((o.latency[0] - 0.002).abs() < 1e-9, "{}", o.latency[0]);
        // Sequential fraction 0.5, one loop: 4 ms sequential, then 4 ms in
        // parallel on 4 cores: 5 ms.
        let trace = Trace {
            seq_fraction: vec![0.5],
            ..trace
        };
        let o = simulate(&c, &trace, None).unwrap();
        assert!((o.latency[0] - 0.005).abs() < 1e-9, "{}", o.latency[0]);
        // Two loops, each after a 2 ms sequential segment: 2 + 0.5 + 2 + 0.5 ms.
        let o = simulate(
            &Config {
                loops: 2,
                ..c.clone()
            },
            &trace,
            None,
        )
        .unwrap();
        assert!((o.latency[0] - 0.005).abs() < 1e-9, "{}", o.latency[0]);
        // Blocking and root-blocking joins change nothing for a request alone.
        for (blocking_joins, root_joins) in [(true, false), (false, true)] {
            let c = Config {
                loops: 2,
                blocking_joins,
                root_joins,
                ..c.clone()
            };
            let o = simulate(&c, &trace, None).unwrap();
            assert!((o.latency[0] - 0.005).abs() < 1e-9, "{}", o.latency[0]);
        }
    }

    #[test]
    fn adaptive_splitting_pushes_less_and_keeps_a_lone_request_parallel() {
        // 8 ms in 80 chunks on 4 cores, no steal cost: full halving reaches the
        // ideal 2 ms; adaptive splitting cuts the range only where thieves take
        // pieces, so it pushes far fewer pieces and still spreads the request.
        let trace = lone(0.008);
        let run = |adaptive_split, cores| {
            let c = Config {
                steal_cost: 0.0,
                adaptive_split,
                cores,
                ..cfg(Policy::StealFirst)
            };
            simulate(&c, &trace, None).unwrap()
        };
        let (full, adaptive) = (run(false, 4), run(true, 4));
        assert!(
            (full.latency[0] - 0.002).abs() < 1e-9,
            "{}",
            full.latency[0]
        );
        assert_eq!(full.pushes, 79);
        assert!(adaptive.pushes < full.pushes, "{}", adaptive.pushes);
        // Alone on one core nothing is stolen: one split (budget 1), then
        // both halves run in a row.
        let alone = run(true, 1);
        assert_eq!(alone.pushes, 1);
        assert!(
            (alone.latency[0] - 0.008).abs() < 1e-9,
            "{}",
            alone.latency[0]
        );
        assert!(adaptive.latency[0] < 0.0022, "{}", adaptive.latency[0]);
        assert!((adaptive.work_done - 0.008).abs() < 1e-12);
    }

    #[test]
    fn a_worker_blocked_in_a_join_does_not_admit() {
        // Two workers, no steal cost. Request 0 = 3 chunks of 10 ms, admitted
        // at 0 by one worker (R), which keeps two chunks; the other (T) steals
        // one. At 10 ms both finish a chunk; T, first in the tie, finds R's last
        // chunk still queued and steals it. Request 1 (1 ms, 3 chunks) has been
        // waiting in the FIFO since 1 ms.
        // * Continuation: R has nothing left and admits request 1 at 10 ms
        //   (T is busy until 20 ms, so R runs it alone: done at 11 ms).
        // * Blocking joins: R's root frame waits for the stolen chunk, so R may
        //   steal but not admit; request 1 starts only at 20 ms.
        // * Root-blocking joins (TBB): R started the loop and waits for all of
        //   it; the same.
        let trace = Trace {
            arrival: vec![0.0, 0.001],
            work: vec![0.03, 0.001],
            seq_fraction: vec![0.0; 2],
        };
        let run = |blocking_joins, root_joins| {
            let c = Config {
                cores: 2,
                steal_cost: 0.0,
                chunking: Chunking::PerPhase(3),
                blocking_joins,
                root_joins,
                ..cfg(Policy::StealFirst)
            };
            simulate(&c, &trace, None).unwrap().latency
        };
        let cont = run(false, false);
        assert!((cont[0] - 0.020).abs() < 1e-9, "{cont:?}");
        assert!((cont[1] - 0.010).abs() < 1e-9, "{cont:?}");
        for block in [run(true, false), run(false, true)] {
            assert!((block[0] - 0.020).abs() < 1e-9, "{block:?}");
            assert!(block[1] > 0.019, "{block:?}");
        }
    }

    #[test]
    fn fully_serialized_request_runs_on_one_core() {
        let trace = Trace {
            arrival: vec![0.0, 0.0],
            work: vec![0.008, 0.001],
            seq_fraction: vec![0.0; 2],
        };
        let c = Config {
            thresholds: vec![0.0005],
            ..cfg(Policy::Clairvoyant)
        };
        let o = simulate(&c, &trace, None).unwrap();
        assert_eq!(o.serialized, 2);
        assert!((o.latency[0] - 0.008).abs() < 1e-9, "{}", o.latency[0]);
    }

    #[test]
    fn all_policies_conserve_work() {
        let w: WorkSpec = "lognormal:10,13".parse().unwrap();
        let trace = Trace::generate(2000, 300.0, ArrivalSpec::Poisson, &w, 0.1, 5);
        let policies = [
            Policy::StealFirst,
            Policy::AdmitFirst,
            Policy::TailControl,
            Policy::Random,
            Policy::Clairvoyant,
        ];
        // (loops, eager, joins: 0 continuation / 1 blocking / 2 root / 3 blocking
        // and admitting in serialized joins, chunking, adaptive)
        let variants = [
            (1, false, 0, Chunking::Fixed(1e-4), false),
            (3, true, 0, Chunking::PerPhase(8), false),
            (1, false, 1, Chunking::Fixed(1e-4), false),
            (3, false, 1, Chunking::PerPhase(8), false),
            (1, false, 0, Chunking::Fixed(1e-4), true),
            (2, true, 0, Chunking::Fixed(1e-4), true),
            (2, false, 1, Chunking::Fixed(1e-4), true),
            (1, false, 2, Chunking::Fixed(1e-4), true),
            (3, true, 2, Chunking::PerPhase(8), false),
            (2, false, 3, Chunking::Fixed(1e-4), true),
            (1, false, 3, Chunking::PerPhase(8), false),
        ];
        for (p, (loops, eager, joins, chunking, adaptive_split)) in policies
            .iter()
            .flat_map(|&p| variants.iter().map(move |&v| (p, v)))
            .filter(|(p, v)| !(v.2 != 0 && *p == Policy::Random))
        {
            let c = Config {
                thresholds: vec![f64::INFINITY, 0.02, 0.01],
                random_fifo: adaptive_split, // both queue orders, on some variants
                loops,
                eager,
                blocking_joins: joins == 1 || joins == 3,
                root_joins: joins == 2,
                admit_in_serialized_joins: joins == 3,
                chunking,
                adaptive_split,
                ..cfg(p)
            };
            let o = simulate(&c, &trace, None).unwrap();
            let total: f64 = trace.work.iter().sum();
            assert!(
                (o.work_done - total).abs() < 1e-6 * total,
                "{p:?} {loops} {eager} {adaptive_split}"
            );
            if p.uses_table() {
                assert!(o.serialized > 0, "{p:?} {loops} {eager} {adaptive_split}");
            }
            assert!(o.latency.iter().all(|l| l.is_finite() && *l > 0.0));
            // Latency is at least the request's span on 4 cores.
            for (i, l) in o.latency.iter().enumerate() {
                assert!(*l >= trace.work[i] / 4.0 - 1e-9, "{p:?} {i}");
            }
        }
    }
}
