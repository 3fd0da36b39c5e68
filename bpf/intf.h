/* SPDX-License-Identifier: GPL-2.0 */
/*
 * intf.h - the one definition of everything shared between tailctl's BPF
 * scheduler (main.bpf.c) and user space (scx_tailctl, via bindgen).
 *
 * Keep this header free of kernel types so bindgen can read it on its own and
 * so the runtime (which must build without clang) can mirror it by hand; a
 * test compares the mirror's sizes and offsets with the bindgen output.
 */
#ifndef __TAILCTL_INTF_H
#define __TAILCTL_INTF_H

#ifndef __VMLINUX_H__
typedef unsigned char u8;
typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;
typedef long long s64;
#endif

enum tailctl_consts {
	/* Shared vtime-ordered queue of every task that is not dispatched locally. */
	TAILCTL_SHARED_DSQ = 0,
	/* Default time slice; overridden by --slice-us. */
	TAILCTL_SLICE_NS_DEFAULT = 5000000ULL,
	/* nice-0 weight, the unit scx uses for p->scx.weight. */
	TAILCTL_WEIGHT_NICE0 = 100,
};

/*
 * Scheduler-wide counters, one copy per CPU (a per-CPU array map with a single
 * entry), summed by user space. Pinned as "stats" so bpftool shows the fields.
 */
struct tailctl_stats {
	/* ops.enqueue calls. */
	u64 enqueues;
	/* Tasks inserted straight into a local DSQ because an idle CPU was found. */
	u64 direct_dispatches;
	/* Tasks inserted into the shared vtime queue. */
	u64 shared_enqueues;
	/* Tasks moved from the shared queue to a CPU in ops.dispatch. */
	u64 shared_dispatches;
	/* Idle CPUs kicked because work arrived in the shared queue. */
	u64 idle_kicks;
	/* Per-CPU kthreads dispatched locally (never delayed behind the queue). */
	u64 kthread_dispatches;
	/* A CPU whose current task's slice expired kept running it: nothing else was waiting. */
	u64 slice_extensions;
};

#endif /* __TAILCTL_INTF_H */
