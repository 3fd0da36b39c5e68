/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_tailctl - the kernel half of tailctl.
 *
 * Design: every task that is not registered with tailctl (at this stage, every
 * task) is scheduled by a fair, work-conserving virtual-time scheduler:
 *
 *  - ops.select_cpu picks an idle CPU with the built-in idle tracking; when one
 *    is found the task is inserted straight into that CPU's local DSQ, which
 *    skips the shared queue entirely (cheap wake-ups on an idle machine).
 *  - ops.enqueue inserts everything else into one shared DSQ ordered by
 *    virtual time, then kicks an idle CPU the task may run on, so that work
 *    never waits while a CPU sleeps.
 *  - ops.dispatch moves the task with the smallest vtime to the local CPU.
 *  - ops.running / ops.stopping advance a task's vtime by the CPU time it
 *    used, scaled inversely by its weight (nice), which is what makes the
 *    vtime order fair.
 *
 * A sleeping task's vtime is clamped to at most one slice behind the current
 * vtime, so a task that slept long cannot monopolise the CPU when it wakes.
 */
#include <scx/common.bpf.h>
#include "intf.h"

char _license[] SEC("license") = "GPL";

UEI_DEFINE(uei);

/* Set by user space before load. */
const volatile u64 slice_ns = TAILCTL_SLICE_NS_DEFAULT;

/* The largest vtime any running task has had: the fair "now". */
static u64 vtime_now;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tailctl_stats);
} stats SEC(".maps");

static __always_inline struct tailctl_stats *stats_cpu(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&stats, &zero);
}

#define STAT_INC(field)                                  \
	do {                                             \
		struct tailctl_stats *__s = stats_cpu(); \
		if (__s)                                 \
			__s->field++;                    \
	} while (0)

static __always_inline bool is_pcpu_kthread(const struct task_struct *p)
{
	return (p->flags & PF_KTHREAD) && p->nr_cpus_allowed == 1;
}

/* A task's vtime, clamped so that sleepers gain at most one slice of credit. */
static __always_inline u64 task_vtime(const struct task_struct *p)
{
	u64 vtime = p->scx.dsq_vtime;

	if (time_before(vtime, vtime_now - slice_ns))
		vtime = vtime_now - slice_ns;
	return vtime;
}

/*
 * Advance @p's vtime by the part of its slice it used, scaled by its weight
 * (nice). Every insert refills the slice, and the dispatch-time extension
 * charges before it refills, so no CPU time is charged twice.
 */
static __always_inline void charge_vtime(struct task_struct *p)
{
	u64 weight = p->scx.weight ? p->scx.weight : 1;
	u64 used = 0;

	if (p->scx.slice < slice_ns)
		used = slice_ns - p->scx.slice;
	p->scx.dsq_vtime += used * TAILCTL_WEIGHT_NICE0 / weight;
}

s32 BPF_STRUCT_OPS(tailctl_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_idle) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
		STAT_INC(direct_dispatches);
	}
	return cpu;
}

void BPF_STRUCT_OPS(tailctl_enqueue, struct task_struct *p, u64 enq_flags)
{
	s32 cpu;

	STAT_INC(enqueues);

	/*
	 * A per-CPU kthread can run nowhere else; queueing it behind user tasks
	 * only delays work the kernel is waiting for.
	 */
	if (is_pcpu_kthread(p)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		STAT_INC(kthread_dispatches);
		return;
	}

	scx_bpf_dsq_insert_vtime(p, TAILCTL_SHARED_DSQ, slice_ns, task_vtime(p), enq_flags);
	STAT_INC(shared_enqueues);

	/* Work-conserving: wake an idle CPU that may run this task. */
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		STAT_INC(idle_kicks);
	}
}

void BPF_STRUCT_OPS(tailctl_dispatch, s32 cpu, struct task_struct *prev)
{
	if (scx_bpf_dsq_move_to_local(TAILCTL_SHARED_DSQ, 0)) {
		STAT_INC(shared_dispatches);
		return;
	}

	/*
	 * Nothing else is waiting: let the previous task keep the CPU for another
	 * slice instead of going through an idle cycle.
	 */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED)) {
		charge_vtime(prev);
		prev->scx.slice = slice_ns;
		STAT_INC(slice_extensions);
	}
}

void BPF_STRUCT_OPS(tailctl_running, struct task_struct *p)
{
	if (time_before(vtime_now, p->scx.dsq_vtime))
		vtime_now = p->scx.dsq_vtime;
}

void BPF_STRUCT_OPS(tailctl_stopping, struct task_struct *p, bool runnable)
{
	charge_vtime(p);
}

void BPF_STRUCT_OPS(tailctl_enable, struct task_struct *p)
{
	p->scx.dsq_vtime = vtime_now;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(tailctl_init)
{
	return scx_bpf_create_dsq(TAILCTL_SHARED_DSQ, -1);
}

void BPF_STRUCT_OPS(tailctl_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(tailctl_ops,
	       .select_cpu = (void *)tailctl_select_cpu,
	       .enqueue = (void *)tailctl_enqueue,
	       .dispatch = (void *)tailctl_dispatch,
	       .running = (void *)tailctl_running,
	       .stopping = (void *)tailctl_stopping,
	       .enable = (void *)tailctl_enable,
	       .init = (void *)tailctl_init,
	       .exit = (void *)tailctl_exit,
	       .name = "tailctl");
