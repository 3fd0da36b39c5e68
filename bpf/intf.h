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

	/* Registered services; service s's throttle queue is DSQ TAILCTL_THROTTLE_DSQ_BASE + s. */
	TAILCTL_MAX_SERVICES = 16,
	TAILCTL_THROTTLE_DSQ_BASE = 1,
	/* Service s's job wait queue (threads over the job's allotment) is DSQ TAILCTL_JOB_DSQ_BASE + s. */
	TAILCTL_JOB_DSQ_BASE = 1 + 16,
	/*
	 * Priority levels (issue 13): 0..TAILCTL_PRIO_LEVELS-1, higher is more
	 * urgent. TAILCTL_PRIO_NORMAL is the level of every unregistered task
	 * and of a service that asks for none; its queue is TAILCTL_SHARED_DSQ,
	 * level l's otherwise TAILCTL_PRIO_DSQ_BASE + l.
	 */
	TAILCTL_PRIO_LEVELS = 8,
	TAILCTL_PRIO_NORMAL = 3,
	TAILCTL_PRIO_DSQ_BASE = 1 + 16 + 16,
	/*
	 * Per-LLC normal-level queues (issue 16): with more than one LLC
	 * group (and --llc-queues on), LLC group g's normal-level queue is
	 * DSQ TAILCTL_LLC_DSQ_BASE + g instead of TAILCTL_SHARED_DSQ. At most
	 * TAILCTL_MAX_LLCS groups (user space folds more into that many).
	 */
	TAILCTL_LLC_DSQ_BASE = 64,
	TAILCTL_MAX_LLCS = 32,
	/* Buckets of the allotment latency histogram (tailctl_stats.allot_lat_hist). */
	TAILCTL_ALLOT_LAT_BUCKETS = 8,
	/* Slots of a service's region (must match tailctl-rt's shared_state.rs). */
	TAILCTL_MAX_WORKERS = 64,
	TAILCTL_MAX_REQUESTS = 1024,
	/* Entries of a threshold table: q = 1..TAILCTL_QMAX active requests. */
	TAILCTL_QMAX = 256,

	/*
	 * tailctl_request_acct's live counters (holders, waiting,
	 * overdue_running) are u32 words holding
	 * (epoch & 0xffff) << TAILCTL_ACCT_COUNT_BITS | count: the count is the
	 * low TAILCTL_ACCT_COUNT_BITS bits (mask TAILCTL_ACCT_COUNT_MASK).
	 * Its u64 `runners` holds three such counts and the epoch, at these
	 * shifts (each count masked by TAILCTL_ACCT_COUNT_MASK).
	 */
	TAILCTL_ACCT_COUNT_BITS = 16,
	TAILCTL_ACCT_COUNT_MASK = 0xffff,
	TAILCTL_RUNNERS_RUNNING_SHIFT = 0,
	TAILCTL_RUNNERS_UNHELD_SHIFT = 16,
	TAILCTL_RUNNERS_ARRIVING_SHIFT = 32,
	TAILCTL_RUNNERS_EPOCH_SHIFT = 48,
	/*
	 * Where a token_leak was counted (tailctl_stats.token_leak_sites): a
	 * request token given back below 0, a request wait count left below 0,
	 * a request token reclaimed by the timer from a holder that did not hold
	 * it, a job token, a job wait count.
	 */
	TAILCTL_LEAK_PUT = 0,
	TAILCTL_LEAK_WAIT = 1,
	TAILCTL_LEAK_RECLAIM = 2,
	TAILCTL_LEAK_JOB_PUT = 3,
	TAILCTL_LEAK_JOB_WAIT = 4,
	TAILCTL_LEAK_SITES = 5,

	TAILCTL_REGION_MAGIC = 0x54524354, /* "TCRT" */
	TAILCTL_REGION_VERSION = 1,

	/* tailctl_request_slot.flags */
	TAILCTL_FLAG_SERIALIZED = 1,
	/* tailctl_request_slot.state */
	TAILCTL_REQ_FREE = 0,
	TAILCTL_REQ_QUEUED = 1,
	TAILCTL_REQ_RUNNING = 2,
	/* tailctl_worker_slot.state */
	TAILCTL_WORKER_WORKING = 0,
	TAILCTL_WORKER_STEALING = 1,
	TAILCTL_WORKER_PARKED = 2,
	/* tailctl_header.mode */
	TAILCTL_MODE_USER = 0,
	TAILCTL_MODE_KERNEL = 1,
	/*
	 * tailctl_service.pid of a cgroup job (--job PATH) in slot s: this plus
	 * s. Above PID_MAX_LIMIT (2^22), so never a process's pid.
	 */
	TAILCTL_CGROUP_JOB_PID = 0x80000000,
};

/*
 * A service's region: one element of a BPF_F_MMAPABLE array map that the
 * service's runtime maps into its address space and updates with plain
 * atomic stores (no system call per request switch). Everything the kernel
 * reads from here is an untrusted hint: indexes are bounds-checked and values
 * clamped before use. Fields marked [kernel] are written by the scheduler,
 * the rest by the runtime.
 */
struct tailctl_header {
	u32 magic;
	u32 version;
	u32 worker_count;
	u32 request_capacity;
	/* Requests between arrival and completion: the q of the threshold table. */
	u32 active;
	u32 generation;
	u64 next_id;
	u64 completed;
	u64 serialized;
	/* SAWS desire inputs: workers working, and stealable tasks seen by thieves. */
	u32 busy_workers;
	u32 stealable;
	/* [kernel] requests the kernel serialized. */
	u32 kernel_serialized;
	/* TAILCTL_MODE_*: who decides serialization (set by the runtime when registered). */
	u32 mode;
};

struct tailctl_worker_slot {
	/* (generation << 32) | request slot, or ~0 when on no request. */
	u64 current;
	u64 start_ns;
	u32 tid;
	u32 state;
	u64 steals;
	/* [kernel] CPU time the scheduler charged to this worker's requests. */
	u64 kernel_work_ns;
	/* Searches for work that found nothing / found a task: SAWS's u = found / (found + failed). */
	u64 failed_steals;
	u64 found_work;
	/*
	 * [kernel] 1 while the scheduler keeps this worker off the CPU to honour
	 * its job's allotment (queued in the job's queue), 0 once it runs again:
	 * the job's running workers mug its deque before stealing (SAWS).
	 */
	u32 descheduled;
	/* Sum (wrapping) of the stealable counts its searches published: SAWS's Q averaged over searches. */
	u32 stealable_seen;
};

struct tailctl_request_slot {
	u64 id;
	/* flags and generation share one u64 so a mark is one compare-and-swap. */
	u32 flags;
	u32 generation;
	/* The runtime's own (wall-clock) accumulated work. */
	u64 work_ns;
	u64 arrival_ns;
	u32 state;
	u32 steals;
	u32 steals_at_serialize;
	/*
	 * [kernel] threads of this request running, as the kernel last counted
	 * them: when it serialized the request, and at each start and stop
	 * under its cap. Uncapped starts do not write it (they write nothing
	 * shared: see struct tailctl_cpu_run); the live count is the number of
	 * CPUs naming the request in the pinned cpu_runs map.
	 */
	u32 kernel_running;
	/* [kernel] CPU time the scheduler charged to this request. */
	u64 kernel_work_ns;
	/* [kernel] max threads of this request allowed to run at once (0: no cap). */
	u32 kernel_alloc;
	u32 reserved0;
};

struct tailctl_region {
	struct tailctl_header header;
	struct tailctl_worker_slot workers[TAILCTL_MAX_WORKERS];
	struct tailctl_request_slot requests[TAILCTL_MAX_REQUESTS];
};

/* Daemon-written: tid -> the (service, worker slot) it was registered as. */
struct tailctl_worker_ref {
	u32 service;
	u32 worker;
	/*
	 * The thread the binding names, not just its tid number (tids are
	 * reused): its process (init pid namespace) and its start time in clock
	 * ticks since boot, as /proc/<pid>/task/<tid>/stat field 22 shows it
	 * (task->start_boottime / tid_start_tick_ns).
	 */
	u32 tgid;
	u32 reserved;
	u64 start_ticks;
};

/* Daemon-written, one per service slot. */
struct tailctl_service {
	/* Registered process (tgid); 0 when the slot is free. */
	u32 pid;
	u32 uid;
	/* Max threads of the service running at once (0: all CPUs). */
	u32 allot;
	/* Entries of threshold_ns in use. */
	u32 nr_thresholds;
	/* threshold_ns[q-1]: serialize a request once its work exceeds this at q active requests (0: never). */
	u64 threshold_ns[TAILCTL_QMAX];
	/*
	 * Registration sequence number (0 if the daemon does not set one). With
	 * pid it tells one registration of a slot from the next, so a reused slot
	 * never inherits the previous service's accounting.
	 */
	u64 epoch;
	/*
	 * Core allotment (issue 12), written by the daemon's controller through
	 * the apply_allot program (never by a map update, which could race with
	 * registration): the job's desire as the policy saw it, and the decision
	 * `allot` belongs to (a sequence number and when the daemon took it,
	 * CLOCK_MONOTONIC ns, the clock of bpf_ktime_get_ns).
	 */
	u32 desire;
	u32 reserved_allot;
	u64 allot_seq;
	u64 allot_at_ns;
	/* Priority level (issue 13), 0..TAILCTL_PRIO_LEVELS-1; written at registration only. */
	u32 priority;
	u32 reserved_prio;
	/*
	 * The smallest non-zero threshold_ns[0..nr_thresholds) (~0: none), so a
	 * tick can tell without the table that no request's work has reached
	 * any of them (0: not given, the table is read every time).
	 */
	u64 threshold_floor_ns;
};

/*
 * One allotment decision of the daemon, the context of the apply_allot
 * syscall program (BPF_PROG_TEST_RUN). It applies only if `owner`
 * ((epoch << 32) + pid) is still the registration in slot `svc`.
 */
struct tailctl_allot_cmd {
	u32 svc;
	u32 allot;
	u32 desire;
	u32 reserved;
	u64 owner;
	u64 seq;
	u64 decided_at_ns;
};


/*
 * Kernel-only accounting of one job (a registered service slot) under its
 * core allotment, indexed by service slot. Written only by the scheduler.
 */
struct tailctl_job_acct {
	/* The registration this entry belongs to ((epoch << 32) + pid). */
	u64 owner;
	/* CPU time of the job's threads (sum_exec_runtime), all of it / while working / while not. */
	u64 cpu_ns;
	u64 work_ns;
	u64 steal_ns;
	/* ... of which on borrowed CPUs (over the allotment, lent because nothing else was runnable). */
	u64 borrowed_ns;
	/* Job tokens in use (threads queued for or on a CPU within the allotment). */
	u32 holders;
	/*
	 * Threads on a CPU within the allotment, and on borrowed CPUs. Kept
	 * only under an allotment controller (scx_tailctl --allot); without one
	 * running stays 0 (the job's CPU time is in cpu_ns).
	 */
	u32 running;
	u32 borrowing;
	/* Threads waiting in the job queue, and threads runnable (ops.runnable .. ops.quiescent). */
	u32 waiting;
	u32 runnable;
	/* The allotment being enforced (copied from services.allot when applied). */
	u32 allot;
	/* The last decision applied, when the daemon took it and when the kernel first saw the job at or under it. */
	u64 seq;
	u64 decided_at_ns;
	u64 enforced_at_ns;
	/* 1 while the last decision is not yet enforced. */
	u32 pending;
	/*
	 * Per-request allocations: the share of the allotment each active
	 * non-serialized request of the job was given by the last apply_allot
	 * (0: none), which a request seen for the first time starts with.
	 */
	u32 req_share;
	/* Decisions that changed the allotment, and decision-to-enforcement latency (sum, count, max, last). */
	u64 reallocs;
	u64 lat_sum_ns;
	u64 lat_count;
	u64 lat_max_ns;
	u64 lat_last_ns;
	/* Threads that waited for a job token, ran on a borrowed CPU, were taken off one, ran past the wait bound. */
	u64 waits;
	u64 borrows;
	u64 reclaims;
	u64 overdue;
	/* Longest a thread of the job waited in the job queue, ns. */
	u64 max_wait_ns;
	/* When apply_allot ran for the last decision (bpf_ktime_get_ns): its kicks start here. */
	u64 applied_at_ns;
	/*
	 * Time its token holders spent queued for a CPU (a token taken at enqueue
	 * or on release from the job queue, until ops.running): allotted core-time
	 * that other tasks used, or that passed while a kicked idle CPU woke up.
	 * Core-time utilisation leaves it out of the allotted time, so CPU
	 * contention from outside the job (and wake-up delay) does not read as
	 * the job's inefficiency.
	 */
	u64 token_wait_ns;
};

/*
 * Kernel-only accounting of one request, indexed service * MAX_REQUESTS +
 * slot. The scheduler's own view, independent of what the service writes.
 *
 * The counters threads step up and down (holders, waiting, overdue_running)
 * carry the low 16 bits of `epoch` above their count (see
 * TAILCTL_ACCT_COUNT_BITS): every step is a compare-and-swap that also checks
 * the epoch, so a thread that checked the entry before a reset can never
 * step the next epoch's count. Readers take the count as
 * `field & TAILCTL_ACCT_COUNT_MASK`. The three runner counts share one word,
 * `runners`, with the epoch in its top 16 bits (TAILCTL_RUNNERS_*), so that
 * a thread starting or leaving the request steps them in one
 * compare-and-swap.
 */
struct tailctl_request_acct {
	/* The request tag (generation << 32 | slot) this entry currently tracks. */
	u64 tag;
	u64 work_ns;
	/*
	 * Threads of the request that started it capped or holding a token (the
	 * careful path of begin_request_at), one 16-bit count each, epoch &
	 * 0xffff in bits 48-63 (TAILCTL_RUNNERS_*_SHIFT). A thread that starts
	 * it uncapped counts only in its CPU's cpu_runs entry (struct
	 * tailctl_cpu_run), until it takes a token:
	 *  - running (bits 0-15): running it now, past the cap check;
	 *  - unheld (bits 16-31): of those, the ones that hold no token: they
	 *    began before the cap (or while there was none). Serialization has
	 *    settled only once this and arriving are 0: every runner left holds
	 *    a token;
	 *  - arriving (bits 32-47): between "I may be running this request" and
	 *    the cap check in ops.running (see begin_request). Kept apart from
	 *    running so that a thread about to back out never shows up as a
	 *    second runner.
	 */
	u64 runners;
	/*
	 * The most threads seen running at once after serialization settled:
	 * token holders, and a thread that started without one (see
	 * begin_request_at); threads let through by the wait bound are counted
	 * apart (overdue).
	 */
	u32 max_running_settled;
	u32 reserved1;
	/* Threads allowed to be dispatched (the cap's tokens in use), and the cap. */
	u32 holders;
	u32 alloc;
	/* When the request crossed its threshold, and when its concurrency first fell to <= 1 after. */
	u64 serialized_at_ns;
	u64 settled_at_ns;
	/* Tasks of this request that waited in the throttle queue (total), and waiting now. */
	u64 throttled;
	u32 waiting;
	/*
	 * The most threads of this request seen running at once: counted from
	 * cpu_runs when it is serialized, and at every start under a cap (its
	 * uncapped starts count nowhere: see struct tailctl_cpu_run).
	 */
	u32 max_running;
	/* Threads that reached a CPU without a token and were sent back, and the CPU time they used. */
	u64 bounces;
	u64 bounced_ns;
	/* Threads running now past the wait bound without a token, and how many times that happened. */
	u32 overdue_running;
	u32 reserved2;
	u64 overdue;
	/* The registration this entry belongs to ((epoch << 32) + pid of the service): part of its identity with tag. */
	u64 owner;
	/* Tid of the thread holding the token when alloc is 1 (0: none or unknown); lets the kernel find leaked tokens. */
	u32 holder;
	u32 reserved3;
	/*
	 * Per-request allocations within the job's allotment (alloc > 1, or 1 as
	 * a share, not a serialization): the most threads seen running at once
	 * when a token holder started under a share, starts under a share, and
	 * how many of them found more threads running than alloc (a share that
	 * shrank under holders not yet off their CPUs).
	 */
	u32 max_running_shared;
	u32 shared_starts;
	u32 over_alloc;
	/* The smallest and largest share the request was given (0: none). */
	u32 share_min;
	u32 share_max;
	u32 reserved0;
	/*
	 * Bumped at every reset. A region may name the same tag again (a
	 * service writes what it likes there), so tag + owner alone cannot tell
	 * a thread whether the counts it took are still in this entry: a
	 * thread's token, wait count and runner counts belong to the epoch it
	 * took them in, and are gone with a reset.
	 */
	u64 epoch;
};

/*
 * What a CPU runs now, for registered workers (the `cpu_runs` array, one
 * entry per CPU, written only by its own CPU): the request (@tag, and its
 * req_acct index @acct_idx) of the registered thread running there, NO_TAG
 * for none (every entry from load on: ops.init sets it, since a zeroed entry
 * would name a real request). A serialization kicks exactly the CPUs that
 * name its request.
 *
 * @unheld: the thread began the request while it was uncapped and is counted
 * nowhere else (not in the entry's `runners`): a request start costs its
 * thread no write to the shared entry. Serialization has settled only once no
 * CPU names the request with @unheld set (and `runners` has no arriving or
 * unheld thread). The runner count of a request is the number of CPUs that
 * name it.
 */
struct tailctl_cpu_run {
	u64 tag;
	u32 acct_idx;
	u32 unheld;
};

/*
 * Scheduler-wide counters, one copy per CPU (a per-CPU array map with a single
 * entry), summed by user space. Pinned as "stats" so bpftool shows the fields.
 */
struct tailctl_stats {
	/* ops.enqueue calls. */
	u64 enqueues;
	/*
	 * Tasks inserted straight into a local DSQ because an idle CPU was found
	 * (unregistered: from ops.select_cpu; registered workers: from ops.enqueue,
	 * past their cap and allotment).
	 */
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
	/* Requests the kernel serialized (crossed their threshold). */
	u64 serializations;
	/* Registered threads that waited in a throttle queue because their request was at its cap. */
	u64 throttled;
	/* Throttled threads dispatched when their request's cap freed up (rotation). */
	u64 rotations;
	/* Running threads preempted because their request became serialized under them. */
	u64 cap_preemptions;
	/* Region reads rejected by validation (bad magic, index out of range, stale tag). */
	u64 invalid_hints;
	/*
	 * Throttled threads dispatched without a token after waiting
	 * max_throttle_wait_ns: the liveness bound overriding a cap. Should stay 0.
	 */
	u64 overdue_runs;
	/* Longest a throttled thread waited before being dispatched, in ns (max, not a sum). */
	u64 max_throttle_wait_ns;
	/*
	 * Tokens and wait counts found unaccounted for (a release below zero, or
	 * a token whose holder no longer holds it, reclaimed). Must stay 0.
	 */
	u64 token_leaks;
	/* CPUs kicked by the wait-bound timer because a waiter passed its bound and no CPU dispatched. */
	u64 bound_kicks;
	/* Core allotments (issue 12): decisions that changed a job's allotment. */
	u64 allot_reallocs;
	/* Decisions enforced (the job first ran at or under its new allotment), with the latency sum and max. */
	u64 allot_enforced;
	u64 allot_lat_sum_ns;
	u64 allot_lat_max_ns;
	/* Latency histogram: < 10, 25, 50, 100, 250, 1000, 10000 us, and above. */
	u64 allot_lat_hist[TAILCTL_ALLOT_LAT_BUCKETS];
	/* Threads that waited for a job token; ran on a borrowed CPU; borrowed CPUs taken back; waits past the bound. */
	u64 allot_waits;
	u64 allot_borrows;
	u64 allot_reclaims;
	u64 allot_overdue;
	/* Threads taken off a CPU because their job was over its allotment. */
	u64 allot_preemptions;
	/* Longest wait in a job queue, ns (a maximum). */
	u64 allot_max_wait_ns;
	/*
	 * Priority levels (issue 13). Runs that started at a different level
	 * than this CPU's previous run (level switches); dispatches the
	 * starvation guard made from a lower level while a higher one had work.
	 */
	u64 prio_switches;
	u64 prio_guard_dispatches;
	/*
	 * Runs (ops.running) of a task while a task of a higher level that
	 * this CPU may run had been queued since before the CPU chose (see
	 * prio_inversions_raced), guard dispatches and per-CPU kthreads
	 * excepted: what promptness rules out. And promptness violations: runs that ended
	 * (ops.stopping) while a higher level had work waiting, with the time
	 * they ran after that work arrived (guard runs excepted).
	 */
	u64 prio_inversions;
	u64 prio_violations;
	u64 prio_violation_ns;
	/* CPUs running a lower level preempted because a higher-level task was queued and no CPU was idle. */
	u64 prio_preempt_kicks;
	/* Runs per level, and the longest wait per level from ops.enqueue to ops.running, ns (maxima). */
	u64 prio_runs[TAILCTL_PRIO_LEVELS];
	u64 prio_max_wait_ns[TAILCTL_PRIO_LEVELS];
	/*
	 * The latency split in two: the daemon's stamp to apply_allot running
	 * (syscall and BPF_PROG_TEST_RUN; sum over decisions), decisions already
	 * enforced when apply_allot returned (nothing to take off a CPU), and for
	 * the others, apply_allot to enforcement (kick IPIs, rescheduling,
	 * ops.stopping) in the same buckets as allot_lat_hist.
	 */
	u64 allot_apply_lat_sum_ns;
	u64 allot_enforced_at_apply;
	u64 allot_kick_lat_hist[TAILCTL_ALLOT_LAT_BUCKETS];
	/*
	 * Runs that would be inversions but whose higher-level work arrived
	 * after this CPU chose its task (in ops.dispatch or a direct dispatch
	 * from ops.select_cpu): a race no choice could have avoided, counted
	 * apart from prio_inversions (which were waiting when the CPU chose).
	 */
	u64 prio_inversions_raced;
	/*
	 * Steps of a request counter (tailctl_request_acct) refused because the
	 * entry was reset between the thread's check of it and the step: the
	 * race the epoch-tagged counters close (each such step used to land in
	 * the next epoch's count).
	 */
	u64 acct_stale_steps;
	/* token_leaks by where they were counted (TAILCTL_LEAK_*). */
	u64 token_leak_sites[TAILCTL_LEAK_SITES];
	/*
	 * Mugging (issue 12): times a registered worker was marked descheduled in
	 * its region (queued in its job's queue, off the CPU for the allotment).
	 */
	u64 allot_descheds;
	/*
	 * Per-LLC normal-level queues (issue 16), indexed by LLC group: tasks
	 * inserted into the group's queue by ops.enqueue (released throttle
	 * and job waiters are not counted),
	 * moved from it to a CPU of the group, and moved from it to a CPU of
	 * another group (steals: counted under the queue stolen from). All 0
	 * with one queue (--llc-queues off or one LLC).
	 */
	u64 llc_enqueues[TAILCTL_MAX_LLCS];
	u64 llc_dispatches[TAILCTL_MAX_LLCS];
	u64 llc_steals[TAILCTL_MAX_LLCS];
	/*
	 * Wake-up preemption (issue 16): CPUs kicked (SCX_KICK_PREEMPT) because
	 * a waking unregistered task found no idle CPU and the CPU's task had
	 * run past the floor and was far ahead of it in vtime.
	 */
	u64 wake_preempt_kicks;
	/*
	 * Per-LLC queues (issue 16): tasks a CPU took from another LLC's queue
	 * although its own was not empty, because that queue's head was more
	 * than half a slice behind its own in vtime (normal_move_to_local).
	 * Also counted in llc_steals.
	 */
	u64 llc_balance_steals;
	/*
	 * Tasks ops.enqueue saw re-enqueued (SCX_ENQ_REENQ) from a CPU's local
	 * queue because a higher scheduling class (RT, deadline, stop) took that
	 * CPU (ops.cpu_release; 7.1+ kernels only): each would otherwise have
	 * waited there for as long as the higher class kept the CPU. Per-CPU
	 * kthreads, which come straight back, included.
	 */
	u64 reenqueues;
	/*
	 * sched_yield() calls that kept the CPU because nothing else could
	 * take it (tailctl_yield): no ops.dispatch round trip for them.
	 */
	u64 yields_kept;
	/*
	 * Longest a thread let through at the wait bound waited from its
	 * throttling (by its request's cap, or its job's) to its run, in ns
	 * (max, not a sum): the bound's promise as the thread sees it
	 * (max_throttle_wait_ns and allot_max_wait_ns stop at the release).
	 * Threads ahead of the fair frontier are kept apart
	 * (max_overdue_ahead_wait_ns). The overdue_* counters below count both
	 * caps' waiters too.
	 */
	u64 max_overdue_wait_ns;
	/*
	 * Threads let through at the wait bound, not ahead of the fair
	 * frontier, that went to their level's queue instead of the head of a
	 * CPU's local queue (overdue_local_cpu): the CPUs tried (the releasing
	 * one and their own) had such a run within the last 20 ms or ran an RT
	 * task or a higher level, or a higher level had tasks queued. Their
	 * waits count in max_overdue_wait_ns.
	 */
	u64 overdue_fair;
	/*
	 * Threads let through at the wait bound that were ahead of the fair
	 * frontier in vtime (their earlier runs gave them their share): they
	 * queue fairly, like any task with that vtime, and their waits,
	 * throttling to run, are kept apart (max, ns).
	 */
	u64 overdue_ahead;
	u64 max_overdue_ahead_wait_ns;
	/* Threads let through at the wait bound moved to the head of a CPU's local queue. */
	u64 overdue_heads;
	/*
	 * Releases that left a thread past its bound in its queue, no CPU's
	 * head free for it, until a later release (for up to another bound,
	 * at most 250 ms: overdue_defers).
	 */
	u64 overdue_deferred;
	/*
	 * Threads sent to a CPU's head that came back through ops.enqueue
	 * before they ran (unpinned; that CPU taken by a higher class, or an
	 * affinity change): another CPU's head if one was free, else the fair
	 * queue.
	 */
	u64 overdue_head_lost;
	/*
	 * Longest wait, throttling to run, of a thread that lost its CPU's head
	 * and found no other free (overdue_head_lost): it queued fairly, where it
	 * waits for a slice to end somewhere (max, ns). Kept apart from
	 * max_overdue_wait_ns, whose promise is the run at release.
	 */
	u64 max_overdue_lost_wait_ns;
};

#endif /* __TAILCTL_INTF_H */
