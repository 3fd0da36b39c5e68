//! LLC groups for the per-LLC normal-level queues (issue 16).
//!
//! The BPF side queues every normal-level task on the queue of an LLC group
//! and needs, before load, how many groups there are (`nr_llcs`) and each
//! CPU's group (`cpu_llc`, a rodata array). Groups come from scx_utils'
//! `Topology` (one per last-level cache), or, as a testing aid, from a forced
//! split of the online CPUs into N runs of consecutive CPUs (a guest whose
//! virtual CPUs all share one cache can still exercise the stealing path).
//! Group ids are dense (0..n) in the order of the topology's LLC ids; a
//! machine with more LLCs than the BPF side has queues for gets some groups
//! folded together (round-robin), never a CPU without a queue.

use anyhow::{Context, Result};
use log::info;
use scx_utils::Topology;

use crate::bpf_intf::tailctl_consts_TAILCTL_MAX_LLCS as MAX_LLCS;

/// CPU -> group assignment handed to the BPF side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlcGroups {
    /// Number of groups (1: the one shared queue).
    pub nr: u32,
    /// `(cpu, group)` for every CPU that has a group; other CPUs get group 0.
    pub cpus: Vec<(usize, u32)>,
}

/// Groups from `(cpu, llc id)` pairs: llc ids made dense in sorted order,
/// folded into at most `max` groups.
pub fn from_llc_ids(cpu_llc: &[(usize, usize)], max: u32) -> LlcGroups {
    let mut ids: Vec<usize> = cpu_llc.iter().map(|&(_, l)| l).collect();
    ids.sort_unstable();
    ids.dedup();
    let max = max.max(1);
    let nr = (ids.len() as u32).clamp(1, max);
    let cpus = cpu_llc
        .iter()
        .map(|&(cpu, l)| {
            let dense = ids.binary_search(&l).unwrap_or(0) as u32;
            (cpu, dense % nr)
        })
        .collect();
    LlcGroups { nr, cpus }
}

/// `n` groups of consecutive CPUs (sizes differ by at most one).
pub fn forced(cpus: &[usize], n: u32, max: u32) -> LlcGroups {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    let nr = n.clamp(1, max.max(1)).min(sorted.len().max(1) as u32);
    let len = sorted.len().max(1);
    let cpus = sorted
        .iter()
        .enumerate()
        .map(|(i, &cpu)| (cpu, (i * nr as usize / len) as u32))
        .collect();
    LlcGroups { nr, cpus }
}

/// The groups to load with: none (one queue) when `enabled` is false,
/// `force` groups when non-zero, else one per LLC of the topology.
pub fn groups(enabled: bool, force: u32) -> Result<LlcGroups> {
    if !enabled {
        return Ok(LlcGroups {
            nr: 1,
            cpus: Vec::new(),
        });
    }
    let topo = Topology::new().context("reading the CPU topology")?;
    let g = if force > 0 {
        let cpus: Vec<usize> = topo.all_cpus.keys().copied().collect();
        forced(&cpus, force, MAX_LLCS)
    } else {
        let pairs: Vec<(usize, usize)> = topo
            .all_cpus
            .values()
            .map(|cpu| (cpu.id, cpu.llc_id))
            .collect();
        from_llc_ids(&pairs, MAX_LLCS)
    };
    let mut desc = vec![String::new(); g.nr as usize];
    for &(cpu, l) in &g.cpus {
        let d = &mut desc[l as usize];
        if !d.is_empty() {
            d.push(',');
        }
        d.push_str(&cpu.to_string());
    }
    info!(
        "normal-level queues: {} ({}){}",
        g.nr,
        if force > 0 { "forced split" } else { "per LLC" },
        desc.iter()
            .enumerate()
            .map(|(i, d)| format!(" llc{i}=[{d}]"))
            .collect::<String>()
    );
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llc_ids_become_dense_groups() {
        let g = from_llc_ids(&[(0, 7), (1, 7), (2, 3), (3, 3)], 32);
        assert_eq!(g.nr, 2);
        assert_eq!(g.cpus, vec![(0, 1), (1, 1), (2, 0), (3, 0)]);
    }

    #[test]
    fn more_llcs_than_queues_fold() {
        let pairs: Vec<(usize, usize)> = (0..8).map(|c| (c, c)).collect();
        let g = from_llc_ids(&pairs, 3);
        assert_eq!(g.nr, 3);
        assert!(g.cpus.iter().all(|&(_, l)| l < 3));
        assert_eq!(g.cpus[4], (4, 1));
    }

    #[test]
    fn forced_split_is_consecutive_and_even() {
        let g = forced(&[3, 0, 2, 1], 2, 32);
        assert_eq!(g.nr, 2);
        assert_eq!(g.cpus, vec![(0, 0), (1, 0), (2, 1), (3, 1)]);
        // Never more groups than CPUs.
        assert_eq!(forced(&[0, 1], 5, 32).nr, 2);
    }
}
