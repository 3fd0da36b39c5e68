//! The jobs of `tailctl sim multiprog`: fork-join DAGs shaped like the Cilk benchmarks SAWS and
//! AMCilk run, generated on the fly (a DAG is never materialised: a frame knows its node, and a
//! node knows its children).
//!
//! A node runs like a Cilk procedure: for each of its `rounds`, a serial `pre` segment, then it
//! spawns its children one by one (work-first: the worker pushes the parent's continuation on
//! its deque and runs the child; thieves steal continuations), then `sync`, then a serial `post`
//! segment. Leaves are nodes with no children whose `pre` is their work.
//!
//! | name | shape | work | span | parallelism (work/span) |
//! |---|---|---|---|---|
//! | `fib` | `fib(46)` cut off at `fib(24)` (≈ 200 µs leaves): binary, unbalanced | ≈ 7.9 s | ≈ 0.2 ms | ≈ 39,000 |
//! | `matmul` | recursive 8-way block product (Cilk's `matmul`: two rounds of four), 4 levels, 2 ms leaves | ≈ 8.2 s | ≈ 32 ms | ≈ 256 |
//! | `heat` | 200 time steps, each a serial 0.5 ms step then a divide-and-conquer loop over 16 blocks of 2.5 ms | ≈ 8.1 s | ≈ 0.6 s | ≈ 13 |
//! | `sort` | mergesort of 4096 leaves (0.4 ms sorts) with *serial* merges (0.15 ms per leaf merged) | ≈ 9.0 s | ≈ 1.2 s | ≈ 7, falling to 1 at the top merge |
//! | `heat:B` | `heat` with each step's 40 ms cut into `B` blocks | ≈ 8.1 s | ≈ 200·(0.5 + 40/B) ms | ≈ 36 for `B` = 64 |
//! | `loop:N[:MS]` | SAWS's Fig. 3: a parent spawning `N` children of `MS` ms (default 500) | `N·MS` | `MS` | `N` |
//!
//! (`tailctl sim multiprog --describe` prints the exact numbers.) The profiles differ the way the
//! paper's benchmarks do: `fib` can use any machine, `matmul` most of it, `heat` a third of 32
//! cores with a serial step between loops, and `sort` starts wide and narrows to one core.

use std::fmt;

/// Leaf work of `fib(24)`, ns.
const FIB_LEAF_NS: f64 = 200_000.0;
/// `fib(n)` below which the recursion is serial.
const FIB_CUTOFF: u8 = 24;
/// The `fib` job: `fib(46)`, SAWS's input.
const FIB_N: u8 = 46;
/// Spawn overhead of an inner node (its serial `pre`), ns.
const SPAWN_NS: u64 = 100;
/// `matmul`: recursion levels and leaf block product, ns.
const MM_LEVELS: u8 = 4;
const MM_LEAF_NS: u64 = 2_000_000;
/// `sort`: levels (2^levels leaves), leaf sort and serial merge per leaf merged, ns.
const SORT_LEVELS: u8 = 12;
const SORT_LEAF_NS: u64 = 400_000;
const MERGE_PER_LEAF_NS: u64 = 150_000;
/// `heat`: time steps, blocks per step, block work and the serial part of a step, ns.
const HEAT_STEPS: u32 = 200;
const HEAT_BLOCKS: u32 = 16;
const HEAT_BLOCK_NS: u64 = 2_500_000;
const HEAT_STEP_NS: u64 = 500_000;
/// `loop:N` children's default work, ms.
const LOOP_CHILD_MS: u64 = 500;

/// A benchmark: the kind of job that arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bench {
    Fib,
    Matmul,
    /// `blocks` per time step (default 16), the step's work unchanged.
    Heat {
        blocks: u32,
    },
    Sort,
    /// SAWS's Fig. 3 program: `n` children of `child_ns` each.
    Loop {
        n: u32,
        child_ns: u64,
    },
}

impl Bench {
    /// Parses `fib`, `matmul`, `heat[:BLOCKS]`, `sort` or `loop:N[:MS]`.
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "fib" => Bench::Fib,
            "matmul" => Bench::Matmul,
            "heat" => Bench::Heat {
                blocks: HEAT_BLOCKS,
            },
            "sort" => Bench::Sort,
            _ if s.starts_with("heat:") => match s["heat:".len()..].parse::<u32>() {
                Ok(b) if (1..=4096).contains(&b) => Bench::Heat { blocks: b },
                _ => {
                    return Err(format!(
                        "`{s}`: expected heat:B with 1 ≤ B ≤ 4096 blocks per step"
                    ))
                }
            },
            _ => {
                let Some(rest) = s.strip_prefix("loop:") else {
                    return Err(format!(
                        "unknown benchmark `{s}` (use fib, matmul, heat[:B], sort or loop:N[:MS])"
                    ));
                };
                let mut it = rest.splitn(2, ':');
                let n = it
                    .next()
                    .unwrap_or("")
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| n >= 1);
                let ms = match it.next() {
                    None => Some(LOOP_CHILD_MS),
                    Some(m) => m.parse::<u64>().ok().filter(|&m| m >= 1),
                };
                match (n, ms) {
                    (Some(n), Some(ms)) if n <= 100_000 => Bench::Loop {
                        n,
                        child_ns: ms * 1_000_000,
                    },
                    _ => {
                        return Err(format!(
                            "`{s}`: expected loop:N or loop:N:MS with N ≥ 1 children of MS ≥ 1 ms"
                        ))
                    }
                }
            }
        })
    }

    pub(crate) fn root(self) -> Node {
        match self {
            Bench::Fib => Node::Fib(FIB_N),
            Bench::Matmul => Node::Mm(MM_LEVELS),
            Bench::Heat { blocks } => Node::Heat(blocks),
            Bench::Sort => Node::Sort(SORT_LEVELS),
            Bench::Loop { n, child_ns } => Node::Loop(n, child_ns),
        }
    }

    /// Total work and span (critical path), ns, spawn overheads included.
    pub fn work_span(self) -> (u64, u64) {
        work_span(self.root())
    }
}

impl fmt::Display for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bench::Fib => f.write_str("fib"),
            Bench::Matmul => f.write_str("matmul"),
            Bench::Heat {
                blocks: HEAT_BLOCKS,
            } => f.write_str("heat"),
            Bench::Heat { blocks } => write!(f, "heat:{blocks}"),
            Bench::Sort => f.write_str("sort"),
            Bench::Loop { n, child_ns } => write!(f, "loop:{n}:{}", child_ns / 1_000_000),
        }
    }
}

/// A node of a job's DAG.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Fib(u8),
    Mm(u8),
    Sort(u8),
    /// The heat solver's time loop, over this many blocks per step.
    Heat(u32),
    /// A divide-and-conquer loop over `.0` of a step's `.1` heat blocks.
    HeatFor(u32, u32),
    Loop(u32, u64),
    Leaf(u64),
}

impl Node {
    pub(crate) fn rounds(self) -> u32 {
        match self {
            Node::Mm(l) if l > 0 => 2,
            Node::Heat(_) => HEAT_STEPS,
            _ => 1,
        }
    }

    pub(crate) fn children(self, _round: u32) -> u32 {
        match self {
            Node::Fib(k) if k > FIB_CUTOFF => 2,
            Node::Mm(l) if l > 0 => 4,
            Node::Sort(l) if l > 0 => 2,
            Node::Heat(_) => 1,
            Node::HeatFor(n, _) if n > 1 => 2,
            Node::Loop(n, _) => n,
            _ => 0,
        }
    }

    pub(crate) fn child(self, _round: u32, i: u32) -> Node {
        match self {
            Node::Fib(k) => Node::Fib(k - 1 - i as u8),
            Node::Mm(l) => Node::Mm(l - 1),
            Node::Sort(l) => Node::Sort(l - 1),
            Node::Heat(b) => Node::HeatFor(b, b),
            Node::HeatFor(n, b) => Node::HeatFor(if i == 0 { n / 2 } else { n - n / 2 }, b),
            Node::Loop(_, w) => Node::Leaf(w),
            Node::Leaf(_) => unreachable!("leaves have no children"),
        }
    }

    /// Serial work before round `round`'s spawns, ns (a leaf's whole work).
    pub(crate) fn pre(self, _round: u32) -> u64 {
        match self {
            Node::Fib(k) if k <= FIB_CUTOFF => {
                (FIB_LEAF_NS * 1.618_033_988_749_895f64.powi(k as i32 - FIB_CUTOFF as i32)) as u64
            }
            Node::Mm(0) => MM_LEAF_NS,
            Node::Sort(0) => SORT_LEAF_NS,
            Node::HeatFor(1, b) => HEAT_BLOCK_NS * HEAT_BLOCKS as u64 / b as u64,
            Node::HeatFor(0, _) => 0,
            Node::Heat(_) => HEAT_STEP_NS,
            Node::Loop(..) => 0,
            Node::Leaf(w) => w,
            _ => SPAWN_NS,
        }
    }

    /// Serial work after round `round`'s sync, ns.
    pub(crate) fn post(self, _round: u32) -> u64 {
        match self {
            Node::Sort(l) if l > 0 => MERGE_PER_LEAF_NS << l,
            _ => 0,
        }
    }
}

fn work_span(node: Node) -> (u64, u64) {
    // fib's tree has 10^5 nodes but only 23 distinct ones: memoise on the argument.
    let mut fib_memo = [None; 64];
    fn go(node: Node, fib_memo: &mut [Option<(u64, u64)>; 64]) -> (u64, u64) {
        if let Node::Fib(k) = node {
            if let Some(ws) = fib_memo[k as usize] {
                return ws;
            }
        }
        let (mut work, mut span) = (0u64, 0u64);
        for r in 0..node.rounds() {
            let (pre, post) = (node.pre(r), node.post(r));
            let (mut w, mut s) = (0u64, 0u64);
            for i in 0..node.children(r) {
                let (cw, cs) = go(node.child(r, i), fib_memo);
                w += cw;
                s = s.max(cs);
            }
            work += pre + w + post;
            span += pre + s + post;
        }
        if let Node::Fib(k) = node {
            fib_memo[k as usize] = Some((work, span));
        }
        (work, span)
    }
    go(node, &mut fib_memo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_the_documented_profiles() {
        let par = |b: Bench| {
            let (w, s) = b.work_span();
            (w as f64 / 1e9, w as f64 / s as f64)
        };
        let (w, p) = par(Bench::Fib);
        assert!((6.0..9.0).contains(&w) && p > 10_000.0, "fib {w} {p}");
        let (w, p) = par(Bench::Matmul);
        assert!(
            (8.0..8.5).contains(&w) && (250.0..260.0).contains(&p),
            "matmul {w} {p}"
        );
        let (w, p) = par(Bench::Heat { blocks: 16 });
        assert_eq!(Bench::parse("heat").unwrap(), Bench::Heat { blocks: 16 });
        assert_eq!(Bench::parse("heat:64").unwrap().to_string(), "heat:64");
        assert_eq!(
            Bench::parse("heat:64").unwrap().work_span().0,
            Bench::Heat { blocks: 16 }.work_span().0 + 200 * 48 * 100
        );
        assert!(
            (8.0..8.3).contains(&w) && (12.0..14.0).contains(&p),
            "heat {w} {p}"
        );
        let (w, p) = par(Bench::Sort);
        assert!(
            (8.5..9.5).contains(&w) && (6.0..8.0).contains(&p),
            "sort {w} {p}"
        );
        let l = Bench::parse("loop:10:100").unwrap();
        assert_eq!(l.work_span(), (1_000_000_000, 100_000_000));
        assert_eq!(l.to_string(), "loop:10:100");
        assert_eq!(Bench::parse("loop:3").unwrap().work_span().1, 500_000_000);
        for bad in [
            "loop:", "loop:0", "loop:2:0", "loop:x", "fft", "heat:0", "heat:x",
        ] {
            assert!(Bench::parse(bad).is_err(), "{bad}");
        }
    }
}
