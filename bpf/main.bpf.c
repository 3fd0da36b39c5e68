/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_tailctl - the kernel half of tailctl.
 *
 * Design: every task that is not registered with tailctl (every task but the
 * workers of registered services) is scheduled by a fair, work-conserving
 * virtual-time scheduler:
 *
 *  - ops.select_cpu picks an idle CPU with the built-in idle tracking; when one
 *    is found the task is inserted straight into that CPU's local DSQ, which
 *    skips the shared queue entirely (cheap wake-ups on an idle machine).
 *  - ops.enqueue inserts everything else into a DSQ ordered by virtual time
 *    (one per LLC, see "per-LLC normal-level queues"; one shared DSQ with
 *    --llc-queues off or one LLC), then kicks an idle CPU the task may run
 *    on, so that work never waits while a CPU sleeps.
 *  - ops.dispatch moves the task with the smallest vtime to the local CPU,
 *    from its own LLC's queue first, then from the others'.
 *  - ops.running / ops.stopping advance a task's vtime by the CPU time it
 *    used, scaled inversely by its weight (nice), which is what makes the
 *    vtime order fair.
 *
 * A sleeping task's vtime is clamped to at most one slice behind the current
 * vtime, so a task that slept long cannot monopolise the CPU when it wakes.
 *
 * When a higher class (RT, deadline) takes a CPU from an ext task,
 * ops.cpu_release sends that CPU's local DSQ back through ops.enqueue, so its
 * tasks do not wait there for the higher class to let go (tailctl_cpu_release
 * says which cases the kernel leaves out).
 *
 * Registered workers (threads of a tailctl-rt service, bound by the daemon in
 * worker_tids) additionally carry their current request, read from the
 * service's memory-mapped region at each running/tick/stopping:
 *
 *  - Accounting: CPU time between running and stopping (and at each tick) is
 *    charged to the request in req_acct, a kernel-only map: the service can
 *    lie in its region, but it cannot change what the kernel measured.
 *  - Serialization: when a request's charged work crosses the service's
 *    threshold for the current number of active requests (header.active), the
 *    request is capped at alloc = 1 and SERIALIZED is set in its region slot,
 *    which the runtime reads as "not stealable".
 *  - Wake-ups: a worker that ops.select_cpu woke onto an idle CPU (not a
 *    sync wake-up) goes to that CPU's local DSQ from ops.enqueue once it
 *    passed its request's cap and its job's allotment; the others go to the
 *    vtime queue like any task.
 *  - Cap enforcement: a thread may be queued for a CPU only while holding one
 *    of its request's alloc tokens. Without one it waits in its service's
 *    throttle DSQ; ops.dispatch hands a freed token to the oldest waiter and
 *    moves it to the shared vtime queue, never straight to a CPU: a released
 *    waiter competes by vtime like any task (a capped service never outranks
 *    the fair queue), and the kernel only hands it to a CPU it may run on
 *    (pinned or migration-disabled waiters included). A token taken for a move
 *    that fails goes back. Rotation: a holder whose request has waiters gets no
 *    slice extension, so at slice end it is re-enqueued (SCX_ENQ_LAST) behind
 *    them; a token freed while its holder keeps running (its worker left the
 *    request) kicks an idle CPU to hand it on. A thread caught running without
 *    a token (queued before the cap) is preempted.
 *  - Every path gives back: a token and a place in a wait count are returned
 *    when the thread stops, changes request, is unregistered or rebound (also
 *    a reused service slot: accounting entries carry their registration,
 *    `owner`, and are reset for a new one), leaves its throttle queue through
 *    a re-enqueue (affinity or nice change), leaves sched_ext (ops.disable) or
 *    exits (ops.exit_task). Shared counters step down only through
 *    compare-and-swap loops that stop at zero, and an entry being reset is
 *    parked at ACCT_RESETTING so no thread counts itself into it meanwhile. A
 *    count found missing (a release below zero, or a token whose recorded
 *    holder no longer holds it, reclaimed by the timer) is a token_leak.
 *  - Counting runners: ops.running announces a thread before it reads the
 *    cap, and check_threshold sets the cap before reading arriving + unheld
 *    in one word (full barriers on both sides), so a racing thread is either
 *    seen (and kicked) or backs out. A thread that found no cap announces
 *    itself as running and unheld in one step and reads the cap again; one
 *    that found a cap (or finds it on the re-read) announces itself in
 *    `arriving`, which is not `running`, so one that backs out from there
 *    never shows as a second runner. The first kind may show for a moment
 *    as an unheld runner before it backs out: the cap's own figure
 *    (max_running_settled) counts token holders.
 *    Runners without a token (they began before the cap) are also counted
 *    `unheld` until they stop or get a token: serialization has
 *    settled only once none is left (settled_now), not merely once one
 *    thread runs (that one may be an uncapped runner whose preemption kick
 *    has not landed yet while the holder is off its CPU). The three counts
 *    share one word (tailctl_request_acct.runners), so arriving -> running
 *    (+ unheld) and running (+ unheld) -> gone are one step each.
 *  - Liveness: a waiter older than max_throttle_wait_ns is released and runs
 *    one slice regardless (it is not bounced again: that would livelock), so a
 *    token that is never handed on cannot stall a thread into the watchdog.
 *    Its wait runs from when it began, whatever re-enqueues it meanwhile (a
 *    re-pin or re-nice dequeues and enqueues a queued thread), and once
 *    released it is owed that run: a re-enqueue does not queue it to wait
 *    again, and its slice is neither extended nor longer than the default.
 *    Such runs break the cap on purpose and are counted (overdue_runs, and
 *    per request in req_acct.overdue). Since only ops.dispatch releases
 *    waiters, a BPF timer checks the throttle queues every quarter bound and
 *    kicks the CPU of an overdue waiter, so the bound holds on an idle machine
 *    too.
 */
#include <scx/common.bpf.h>
#include "intf.h"

char _license[] SEC("license") = "GPL";

UEI_DEFINE(uei);

/* Set by user space before load. */
const volatile u64 slice_ns = TAILCTL_SLICE_NS_DEFAULT;

/*
 * Bit s set: service slot s may have threads in its throttle queue / its job
 * queue. Set (atomic OR) after every insert into one; cleared only by a
 * release pass that found the queue empty, which then looks again and sets
 * it back if a thread arrived meanwhile (full barriers on both sides), so a
 * queued thread's bit is never lost. ops.dispatch visits only the queues
 * whose bit is set: with no capped request and no allotment it walks none
 * (measured: the walk of all 16 made dispatch 20x the cost of ops.running
 * under TCG, tools/vm/regcost-guest.sh).
 */
static u32 throttle_waiters_mask;
static u32 job_waiters_mask;

/* May any service's throttle or job queue hold a thread (usually not)? */
static __always_inline bool any_waiters(void)
{
	return READ_ONCE(throttle_waiters_mask) | READ_ONCE(job_waiters_mask);
}

static __always_inline void waiters_set(u32 *mask, u32 svc)
{
	if (svc < TAILCTL_MAX_SERVICES)
		__sync_fetch_and_or(mask, 1u << svc);
}

/* May service @svc's queue hold a thread (its bit in @mask)? */
static __always_inline bool waiters_may(u32 mask, s32 svc)
{
	return svc >= 0 && svc < TAILCTL_MAX_SERVICES && (mask & (1u << svc));
}

/* @dsq (service @svc's queue) looked empty: clear its bit unless a thread arrived. */
static __always_inline void waiters_clear_if_empty(u32 *mask, u32 svc, u64 dsq)
{
	if (svc >= TAILCTL_MAX_SERVICES)
		return;
	__sync_fetch_and_and(mask, ~(1u << svc));
	if (scx_bpf_dsq_nr_queued(dsq))
		__sync_fetch_and_or(mask, 1u << svc);
}

/* The largest vtime any running task has had: the fair "now". */
static u64 vtime_now;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tailctl_stats);
} stats SEC(".maps");

/*
 * The key of one-entry maps, read-only data: a key on the stack (u32 zero = 0)
 * leaves a 0 in a stack slot that other look-ups reuse for their keys, and
 * the verifier saw release_waiters' loop come round with that slot holding
 * 0 on one path and another key on the next, one more walk of the loop each
 * (6.18, two LLCs: tailctl_dispatch's walk went from 74902 to 65203
 * instructions with the statistics' key here, 63955 with every such key).
 * User space never sets it.
 */
const volatile u32 zero_key;

static __always_inline struct tailctl_stats *stats_cpu(void)
{
	return bpf_map_lookup_elem(&stats, (const void *)&zero_key);
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

/* ---- registered services ------------------------------------------------ */

/* Number of registered services (written by the daemon): 0 skips all per-task look-ups. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} registered SEC(".maps");
/* A throttled thread is dispatched regardless after waiting this long. */
const volatile u64 max_throttle_wait_ns = 1000000000ULL;

/* One region map per service; user space fills the slots (BPF_F_MMAPABLE inner maps). */
struct region_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tailctl_region);
} region_template SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, TAILCTL_MAX_SERVICES);
	__type(key, u32);
	__array(values, struct region_map);
} regions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TAILCTL_MAX_SERVICES);
	__type(key, u32);
	__type(value, struct tailctl_service);
} services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TAILCTL_MAX_SERVICES * TAILCTL_MAX_WORKERS);
	__type(key, u32);
	__type(value, struct tailctl_worker_ref);
} worker_tids SEC(".maps");

/*
 * Binding generation: the daemon bumps it (under one lock, after the change)
 * whenever it writes worker_tids or a services entry's identity. A task's
 * binding, resolved at generation g, holds while the generation is still g
 * (and, with --job cgroups, while the task is still in the cgroup it was
 * resolved in), so the hot paths compare one number instead of looking the
 * tid up in worker_tids at every wakeup and context switch. A binding names a
 * task, not a tid: a new thread that reuses a tid has new task storage, whose
 * generation (BIND_GEN_NONE) matches nothing, so it is always looked up.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} bind_gen SEC(".maps");

#define BIND_GEN_NONE (~0ULL)

static __always_inline u64 bind_gen_now(void)
{
	u64 *g = bpf_map_lookup_elem(&bind_gen, (const void *)&zero_key);

	return g ? READ_ONCE(*g) : BIND_GEN_NONE;
}

/* ---- tid bindings name threads, not tid numbers (issue 15, item 6) ------ */

/* Length of /proc's clock tick (1e9 / USER_HZ), the unit of start_ticks; set by user space. */
const volatile u64 tid_start_tick_ns = 10000000ULL;

/*
 * Whether @ref (a worker_tids entry) names @p itself: a tid is reused by the
 * next thread the kernel creates, in any process, so the daemon also records
 * the thread's process and start time, and a later thread with the same tid
 * is never taken for a worker.
 */
static __always_inline bool tid_binding_matches(struct task_struct *p, struct tailctl_worker_ref *ref)
{
	u64 tick = tid_start_tick_ns ? tid_start_tick_ns : 1;

	return ref->tgid == (u32)p->tgid && ref->start_ticks == p->start_boottime / tick;
}

/* A bound thread that exits takes its binding along (only its own: the tid may be bound again already). */
static __always_inline void unbind_exited_task(struct task_struct *p)
{
	struct tailctl_worker_ref *ref;
	u32 tid = p->pid;

	ref = bpf_map_lookup_elem(&worker_tids, &tid);
	if (ref && tid_binding_matches(p, ref))
		bpf_map_delete_elem(&worker_tids, &tid);
}

/* ---- end of tid bindings ------------------------------------------------- */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TAILCTL_MAX_SERVICES * TAILCTL_MAX_REQUESTS);
	__type(key, u32);
	__type(value, struct tailctl_request_acct);
} req_acct SEC(".maps");


/* Per-task state; svc < 0 means "not a registered worker". */
struct task_ctx {
	s32 svc;
	u32 worker;
	/* sum_exec_runtime when the task's vtime was last charged (ops.running, charge_vtime). */
	u64 vtime_exec_at;
	/* The binding generation (and cgroup, with --job) svc/worker/owner were resolved at (see bind_gen). */
	u64 bind_gen;
	u64 bind_cgid;
	/* The request this task is charged to while it runs (tag, acct index), or tag ~0. */
	u64 tag;
	u32 acct_idx;
	/* The task's tid (p->pid), recorded as a token's holder. */
	u32 tid;
	/* The registration the task is bound to (see tailctl_request_acct.owner). */
	u64 owner;
	/*
	 * Holds one of its request's tokens / is in a throttle queue and counted
	 * in its request's `waiting`. u32, flipped by compare-and-swap: two CPUs
	 * (a release and a re-enqueue) may race to give the same one back.
	 */
	u32 holds_token;
	u32 throttled;
	bool bound;
	/* Bound as a thread of a cgroup job (--job), not as a registered worker: no worker slot, no region. */
	bool cg;
	bool counted_running;
	/* ... without a token (see tailctl_request_acct.runners). */
	bool counted_unheld;
	/* Began its request uncapped: counted only in its CPU's cpu_runs entry (unheld), not in `runners`. */
	bool counted_announced;
	bool bounced;
	/* Dispatched past its wait bound without a token: runs this once regardless. */
	bool overdue;
	/* ... and counted in its request's overdue_running. */
	bool counted_overdue;
	/* ... and released to the head of its CPU (overdue_local_cpu). */
	bool overdue_local;
	/* ... or to the fair queue, being ahead of the frontier in vtime (overdue_local_cpu). */
	bool overdue_ahead;
	/* ... or to a CPU's head, lost before it ran, no other head free: the fair queue (tailctl_enqueue). */
	bool overdue_lost;
	bool evict;
	/* ops.select_cpu placed this wakeup on an idle CPU it claimed (see tailctl_enqueue). */
	bool woke_idle;
	/*
	 * Released from its throttle queue and not yet past its job's cap: if
	 * the job sends it back, its wait for the request token goes on from
	 * when it began (see job_running), so the two caps together keep the
	 * wait bound instead of restarting it at every round trip.
	 */
	bool keep_wait;
	u64 charge_from_ns;
	u64 throttled_at_ns;
	/* The epoch of the accounting entry its counts are in (tailctl_request_acct.epoch). */
	u64 acct_epoch;
	/* Core allotments (issue 12): see "per-job core allotments" below. */
	u32 job_token;
	u32 job_waiting;
	u32 job_runnable;
	bool job_on_cpu;
	bool job_borrowing;
	bool job_lent;
	bool job_overdue;
	u64 job_from_ns;
	/*
	 * The CPU time (sum_exec_runtime) from which ops.tick charges the job
	 * again: one compare per tick instead of job_tick's checks (see
	 * job_tick_next). ~0 while it is not on a CPU as the job's.
	 */
	u64 job_tick_at;
	u64 job_wait_at_ns;
	/* When it took a job token to queue for a CPU (0: none pending): j->token_wait_ns. */
	u64 job_token_at_ns;
	/* Its vtime while it waits in a working-first job queue (--job-queue; job_vtime_back). */
	u64 job_vtime;
	bool job_vtime_set;
	/* Marked descheduled in its worker slot (see set_descheduled). */
	bool job_desched;
	/* Queued by a yield with --yield-penalty-us: its vtime is that far past the frontier (tailctl_running). */
	bool yield_penalized;
	/* Its service's tailctl_service.threshold_floor_ns, read when it was bound (see check_threshold). */
	u64 thr_floor_ns;
};

static __always_inline void job_unbind(struct task_ctx *tctx);
static __always_inline u32 job_req_share(u32 svc, u64 owner);

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

#define NO_TAG (~0ULL)
/* tailctl_request_acct.tag while the entry is being reset: never a real tag (slot < MAX_REQUESTS). */
#define ACCT_RESETTING (~0ULL - 1)
#define MAX_CPUS 1024

/* What each CPU runs now, for registered workers (see struct tailctl_cpu_run). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct tailctl_cpu_run);
} cpu_runs SEC(".maps");

static __always_inline struct tailctl_cpu_run *cpu_run_here(void)
{
	u32 cpu = bpf_get_smp_processor_id();

	return bpf_map_lookup_elem(&cpu_runs, &cpu);
}

static __always_inline void set_cpu_run(u64 tag, u32 idx)
{
	struct tailctl_cpu_run *cr = cpu_run_here();

	if (cr) {
		cr->tag = tag;
		cr->acct_idx = idx;
		cr->unheld = 0;
	}
}

/*
 * Announce this CPU as a runner of (@tag, @idx), @unheld (1: an uncapped
 * start that holds no token) or not, then a full barrier (the tag's
 * exchange). An unheld announcement is read by a serialization after it sets
 * the cap (settled_now), while the caller reads the cap after the exchange, so
 * one of the two sees the other; a held one (or NO_TAG) is fenced for
 * settle_left. The other fields go first, so a reader that sees the tag sees
 * them too.
 */
static __always_inline struct tailctl_cpu_run *announce_run(u64 tag, u32 idx, u32 unheld)
{
	struct tailctl_cpu_run *cr = cpu_run_here();

	if (cr) {
		cr->acct_idx = idx;
		cr->unheld = unheld;
		__sync_lock_test_and_set(&cr->tag, tag);
	}
	return cr;
}

/* This CPU's unheld announcement goes, with a full barrier (see announce_run). */
static __always_inline void unannounce(void)
{
	struct tailctl_cpu_run *cr = cpu_run_here();

	if (cr)
		__sync_lock_test_and_set(&cr->unheld, 0);
}

/* What a scan of cpu_runs for one request does (cpus_naming). */
enum naming_scan {
	/* Count the CPUs naming it. */
	NAMING_COUNT = 0,
	/* Whether any CPU announces an unheld runner of it (0 or 1: stops at the first). */
	NAMING_ANY_UNHELD = 1,
	/* Count them, and preempt every one but this CPU (the request was just capped). */
	NAMING_COUNT_KICK = 2,
};

/*
 * Scan the CPUs' announcements for request (@tag, @idx), as @how says. One
 * subprogram, verified once, for every scan of cpu_runs.
 */
__noinline int cpus_naming(u64 tag, u32 idx, int how)
{
	u32 n = scx_bpf_nr_cpu_ids(), self = bpf_get_smp_processor_id(), cpu, cnt = 0;

	if (n > MAX_CPUS)
		n = MAX_CPUS;
	bpf_for(cpu, 0, n) {
		struct tailctl_cpu_run *cr = bpf_map_lookup_elem(&cpu_runs, &cpu);

		if (!cr || READ_ONCE(cr->tag) != tag || READ_ONCE(cr->acct_idx) != idx)
			continue;
		if (how == NAMING_ANY_UNHELD) {
			if (READ_ONCE(cr->unheld))
				return 1;
			continue;
		}
		cnt++;
		if (how == NAMING_COUNT_KICK && cpu != self)
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
	}
	return cnt;
}

/* Give the CPU back at once: the thread may not run now (its request is at its cap). */
static __always_inline void bounce(struct task_struct *p, struct task_ctx *tctx)
{
	/* ops.dispatch must not hand the CPU straight back with a fresh slice. */
	tctx->evict = true;
	p->scx.slice = 0;
	scx_bpf_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
	STAT_INC(cap_preemptions);
}

static __always_inline struct task_ctx *task_ctx(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, 0);
}

/*
 * The region's magic and version, adjacent u32s at its start (8-aligned), in
 * one load and one compare where the byte order allows (bpfel, the target on
 * x86 and arm64).
 */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define region_header_ok(r) \
	(READ_ONCE(*(u64 *)&(r)->header.magic) == ((u64)TAILCTL_REGION_VERSION << 32 | TAILCTL_REGION_MAGIC))
#else
#define region_header_ok(r) \
	(READ_ONCE((r)->header.magic) == TAILCTL_REGION_MAGIC && READ_ONCE((r)->header.version) == TAILCTL_REGION_VERSION)
#endif

/* A service's region, or NULL if the slot is empty or its header is not sane. */
static __always_inline struct tailctl_region *service_region(u32 svc)
{
	struct tailctl_region *r;
	void *inner;

	if (svc >= TAILCTL_MAX_SERVICES)
		return NULL;
	inner = bpf_map_lookup_elem(&regions, &svc);
	if (!inner)
		return NULL;
	r = bpf_map_lookup_elem(inner, (const void *)&zero_key);
	if (!r)
		return NULL;
	/*
	 * The daemon checked the version at registration, but the service can
	 * rewrite its header at any time: a layout the kernel does not know is
	 * read as nothing (the service runs as an unregistered one meanwhile).
	 */
	if (!region_header_ok(r)) {
		STAT_INC(invalid_hints);
		return NULL;
	}
	return r;
}

/*
 * Did a compare-and-swap find @old? The value it returns is compared as a
 * plain value: folded into the instruction's success flag, clang materializes
 * that flag as 0/1 and tests it again (four more instructions a try).
 */
#define CAS_OK(ptr, old, new)                                              \
	({                                                                 \
		__typeof__(*(ptr)) __o = (old), __g;                       \
		__g = __sync_val_compare_and_swap((ptr), __o, (new));      \
		barrier_var(__g);                                          \
		__g == __o;                                                \
	})

/*
 * Counters shared by several CPUs only ever step down through this: a
 * compare-and-swap loop that stops at zero, so a count reset under a racing
 * thread can never wrap (a wrapped `holders` would lock the request out for
 * good). Returns false if the count was already 0.
 */
static __always_inline bool dec_u32(u32 *v)
{
	u32 old, i;

	/* Uncontended (the usual case): one try, without the loop's iterator kfuncs. */
	old = READ_ONCE(*v);
	if (!old)
		return false;
	if (CAS_OK(v, old, old - 1))
		return true;
	bpf_for(i, 0, MAX_CPUS) {
		old = READ_ONCE(*v);
		if (!old)
			return false;
		if (CAS_OK(v, old, old - 1))
			return true;
	}
	return true;
}

/*
 * The accounting paths take `now` from their caller, 0 meaning "not read":
 * the hot callbacks (running, stopping, tick) need the time only for the
 * rare event they stamp (a serialization, a settle, an enforced allotment),
 * so they read the clock then, not on every call.
 */
static __always_inline u64 clock_or(u64 now)
{
	return now ? now : bpf_ktime_get_ns();
}

/*
 * The live counters of a request entry (holders, waiting, overdue_running)
 * are u32 words (epoch & 0xffff) << 16 | count, and every step of one is a
 * compare-and-swap on the pair that fails when the epoch part is not the
 * stepping thread's. The runner counts share a u64 word the same way
 * (runners_step).
 *
 * Why: request_acct() resets an entry (counts zeroed, epoch++) and a region
 * may name the same tag again, so a thread can pass acct_of() (tag and
 * epoch still its own), lose its CPU to the reset on another CPU, and
 * then step a count that now belongs to the next epoch: a give-back finding
 * 0 was counted as a token_leak though nothing leaked, and one finding a new
 * holder's token took it away (a second runner under a cap of one). The
 * same window opened between claim_token's holders CAS and its holds_token
 * CAS. The epoch in the word closes it: a step from another epoch is stale
 * and does nothing; a give-back that finds 0 in its own epoch is a real
 * leak. 16 bits of epoch suffice: the window is a few instructions, and
 * acct_of() compares the full epoch first.
 */
#define ACCT_CNT_MASK ((u32)TAILCTL_ACCT_COUNT_MASK)
#define ACCT_STALE (-1)
#define ACCT_ZERO 0
#define ACCT_DONE 1

static __always_inline u32 acnt(u32 v)
{
	return v & ACCT_CNT_MASK;
}

/* The epoch part of a counter word of @epoch (count 0). */
static __always_inline u32 acct_word(u64 epoch)
{
	return (u32)(epoch & ACCT_CNT_MASK) << TAILCTL_ACCT_COUNT_BITS;
}

/* Does counter word @v belong to @epoch? */
static __always_inline bool acct_in(u32 v, u64 epoch)
{
	return (v & ~ACCT_CNT_MASK) == acct_word(epoch);
}

/* Count one more in @v, for a thread of @epoch, while the count is below @limit. Returns the new count, 0 if none. */
static __always_inline u32 acct_inc(u32 *v, u64 epoch, u32 limit)
{
	u32 old, i;
	bool stale = false;

	if (limit > ACCT_CNT_MASK)
		limit = ACCT_CNT_MASK;
	/*
	 * Uncontended (the usual case): one try, without the loop's iterator
	 * kfuncs (three calls a loop; begin_request and end_request step up to
	 * six counters per run).
	 */
	old = READ_ONCE(*v);
	if (acct_in(old, epoch) && acnt(old) < limit &&
	    CAS_OK(v, old, old + 1))
		return acnt(old) + 1;
	bpf_for(i, 0, MAX_CPUS) {
		old = READ_ONCE(*v);
		if (!acct_in(old, epoch)) {
			stale = true;
			break;
		}
		if (acnt(old) >= limit)
			return 0;
		if (CAS_OK(v, old, old + 1))
			return acnt(old) + 1;
	}
	if (stale)
		STAT_INC(acct_stale_steps);
	return 0;
}

/*
 * Count one less in @v, for a thread of @epoch, while the count is above
 * @floor: ACCT_DONE; ACCT_ZERO if it was not (floor 0: the count this thread
 * gives back is missing); ACCT_STALE if the entry was reset since.
 */
static __always_inline int acct_dec(u32 *v, u64 epoch, u32 floor)
{
	u32 old, i;

	bool stale = false;

	/* Uncontended: one try without the loop (see acct_inc). */
	old = READ_ONCE(*v);
	if (acct_in(old, epoch) && acnt(old) > floor &&
	    CAS_OK(v, old, old - 1))
		return ACCT_DONE;
	bpf_for(i, 0, MAX_CPUS) {
		old = READ_ONCE(*v);
		if (!acct_in(old, epoch)) {
			stale = true;
			break;
		}
		if (acnt(old) <= floor)
			return ACCT_ZERO;
		if (CAS_OK(v, old, old - 1))
			return ACCT_DONE;
	}
	if (stale)
		STAT_INC(acct_stale_steps);
	return ACCT_STALE;
}

/*
 * tailctl_request_acct.runners: running, unheld and arriving, 16 bits each,
 * under the epoch's low 16 bits, so that a thread starting the request
 * (arriving -> running, and unheld if it has no token) or leaving it
 * (running and unheld down) steps all it needs in one compare-and-swap: a
 * request switch at ops.tick was six counter steps and is now three
 * (measured under --icount: each uncontended step about 20 instructions).
 */
#define RUNNERS_RUNNING (1ULL << TAILCTL_RUNNERS_RUNNING_SHIFT)
#define RUNNERS_UNHELD (1ULL << TAILCTL_RUNNERS_UNHELD_SHIFT)
#define RUNNERS_ARRIVING (1ULL << TAILCTL_RUNNERS_ARRIVING_SHIFT)
#define RUNNERS_CNT(w, shift) ((u32)((w) >> (shift)) & ACCT_CNT_MASK)

static __always_inline u64 runners_word(u64 epoch)
{
	return (epoch & ACCT_CNT_MASK) << TAILCTL_RUNNERS_EPOCH_SHIFT;
}

static __always_inline u32 runners_running(u64 w)
{
	return RUNNERS_CNT(w, TAILCTL_RUNNERS_RUNNING_SHIFT);
}

/* Where one count's 16 bits end: a carry or borrow into these bits left its count. */
#define RUNNERS_EDGES (RUNNERS_UNHELD | RUNNERS_ARRIVING | (1ULL << TAILCTL_RUNNERS_EPOCH_SHIFT))

/*
 * @w + @add - @sub (sums of RUNNERS_* units) into *@next, unless a count
 * would leave its 16 bits (above 0xffff, or below 0: a give-back finding 0).
 * Branch-free on the counts: bit i of x ^ y ^ (x + y) is the carry into bit
 * i, and of x ^ y ^ (x - y) the borrow, so one test of the field edges
 * covers every count whatever @add and @sub name (the callers pass them at
 * run time).
 */
static __always_inline bool runners_next(u64 w, u64 add, u64 sub, u64 *next)
{
	u64 mid = w + add, n = mid - sub;

	if (((w ^ add ^ mid) | (mid ^ sub ^ n)) & RUNNERS_EDGES)
		return false;
	*next = n;
	return true;
}

/*
 * Step @a's runner counts by +@add -@sub for a thread of @epoch, all or
 * nothing: ACCT_DONE (the new word in *@out), ACCT_ZERO if a count would
 * leave its 16 bits (a give-back finding 0: that count is missing),
 * ACCT_STALE if the entry was reset since (see acct_inc).
 */
static __always_inline int runners_step(struct tailctl_request_acct *a, u64 epoch, u64 add, u64 sub, u64 *out)
{
	u64 old, n = 0, e = runners_word(epoch), emask = runners_word(ACCT_CNT_MASK);
	u32 i;

	/* Uncontended (the usual case): one try, without the loop (see acct_inc). */
	old = READ_ONCE(a->runners);
	if ((old & emask) == e && runners_next(old, add, sub, &n) &&
	    CAS_OK(&a->runners, old, n)) {
		*out = n;
		return ACCT_DONE;
	}
	bpf_for(i, 0, MAX_CPUS) {
		old = READ_ONCE(a->runners);
		if ((old & emask) != e) {
			STAT_INC(acct_stale_steps);
			break;
		}
		if (!runners_next(old, add, sub, &n))
			return ACCT_ZERO;
		if (CAS_OK(&a->runners, old, n)) {
			*out = n;
			return ACCT_DONE;
		}
	}
	return ACCT_STALE;
}

/* service_owner of the slot *@svc names, the key read in place (see acct_of). */
static __always_inline u64 service_owner_at(const void *svc)
{
	struct tailctl_service *s = bpf_map_lookup_elem(&services, svc);

	if (!s || !s->pid)
		return 0;
	return (s->epoch << 32) + s->pid;
}

/* The registration identity of service slot @svc now (see tailctl_request_acct.owner). */
static __always_inline u64 service_owner(u32 svc)
{
	return service_owner_at(&svc);
}

/*
 * Slot @svc's smallest threshold (tailctl_service.threshold_floor_ns). The
 * table is written once, at registration, and a new registration bumps the
 * binding generation, so a task re-reads this whenever its binding is
 * resolved again.
 */
static __always_inline u64 service_threshold_floor(u32 svc)
{
	struct tailctl_service *s = bpf_map_lookup_elem(&services, &svc);

	return s ? s->threshold_floor_ns : 0;
}

/*
 * @tctx's request entry, if it still tracks @tctx's request of @tctx's
 * registration. The tag and the epoch say so: the owner changes only in a
 * reset (request_acct), which bumps the epoch, and a task whose owner
 * changes is unbound first (resolve_task_ctx: its tag goes to NO_TAG).
 */
static __always_inline struct tailctl_request_acct *acct_of(struct task_ctx *tctx)
{
	struct tailctl_request_acct *a;

	if (tctx->tag == NO_TAG)
		return NULL;
	/*
	 * The key read in place (the look-up reads it once and bounds-checks
	 * what it read), not copied to the stack: see zero_key.
	 */
	a = bpf_map_lookup_elem(&req_acct, &tctx->acct_idx);
	if (!a || READ_ONCE(a->tag) != tctx->tag || READ_ONCE(a->epoch) != tctx->acct_epoch)
		return NULL;
	return a;
}

/* A count that should have been there was not: log it once per occurrence. */
static __always_inline void count_leak(u32 site)
{
	struct tailctl_stats *st = stats_cpu();

	if (!st)
		return;
	st->token_leaks++;
	if (site < TAILCTL_LEAK_SITES)
		st->token_leak_sites[site]++;
}

/* Take one of the request's alloc tokens (CAS loop: a lost race retries, it does not fail). */
static __always_inline bool claim_token(struct task_ctx *tctx, struct tailctl_request_acct *a)
{
	u64 e = tctx->acct_epoch, tag = READ_ONCE(tctx->tag);
	u32 h, i;

	if (tctx->holds_token)
		return true;
	/* Only in the entry the task tracks now: a token anywhere else is never given back there. */
	if (READ_ONCE(a->tag) != tag || READ_ONCE(a->owner) != tctx->owner)
		return false;
	bpf_for(i, 0, MAX_CPUS) {
		u32 alloc = READ_ONCE(a->alloc);

		if (!alloc)
			return false; /* no cap: no token needed (caller checks alloc first) */
		h = READ_ONCE(a->holders);
		/* Reset since the task attached (acct_epoch): nothing to claim in this entry. */
		if (!acct_in(h, e)) {
			STAT_INC(acct_stale_steps);
			return false;
		}
		if (acnt(h) >= alloc)
			return false;
		if (__sync_val_compare_and_swap(&a->holders, h, h + 1) == h) {
			/* Another CPU claimed for this same task meanwhile: one token per task. */
			if (__sync_val_compare_and_swap(&tctx->holds_token, 0, 1) != 0) {
				acct_dec(&a->holders, e, 0);
				return true;
			}
			/*
			 * Moved to another request by another CPU meanwhile (a
			 * claim for a task that is not running: release_waiters):
			 * the token is not for what it runs now; give it back
			 * unless the mover already did.
			 */
			if (READ_ONCE(tctx->tag) != tag) {
				if (__sync_val_compare_and_swap(&tctx->holds_token, 1, 0) == 1)
					acct_dec(&a->holders, e, 0);
				return false;
			}
			/*
			 * Record the holder, then check the entry was not reset
			 * meanwhile (the reset writes holders before it clears
			 * holder, both full barriers): a stale record left in the
			 * next epoch would let the timer reclaim its holder's
			 * token as leaked.
			 */
			__sync_lock_test_and_set(&a->holder, tctx->tid);
			if (!acct_in(__sync_fetch_and_add(&a->holders, 0), e)) {
				__sync_val_compare_and_swap(&a->holder, tctx->tid, 0);
				STAT_INC(acct_stale_steps);
			}
			return true;
		}
	}
	return false;
}

/* Give back @tctx's token; returns the entry if one was given back to it. */
static __always_inline struct tailctl_request_acct *put_token(struct task_ctx *tctx)
{
	struct tailctl_request_acct *a;

	/* A plain read first: most runs hold none, and a failed CAS is still a locked write. */
	if (!READ_ONCE(tctx->holds_token) || __sync_val_compare_and_swap(&tctx->holds_token, 1, 0) != 1)
		return NULL;
	/* An entry that moved on (reset for a new request or registration) took its counts with it. */
	a = acct_of(tctx);
	if (!a)
		return NULL;
	if (READ_ONCE(a->holder) == tctx->tid)
		__sync_val_compare_and_swap(&a->holder, tctx->tid, 0);
	/* Stale (reset since acct_of): the token went with the old epoch. */
	if (acct_dec(&a->holders, tctx->acct_epoch, 0) == ACCT_ZERO)
		count_leak(TAILCTL_LEAK_PUT);
	return a;
}

/*
 * @tctx is about to count itself into @a (its current request's entry): if
 * the entry was reset since it last did (a new epoch, even under the same
 * tag), what it held there is gone; drop its stale token flag (acct_of no
 * longer finds the old epoch, so nothing is given back twice) and move on.
 */
static __always_inline void attach_epoch(struct task_ctx *tctx, struct tailctl_request_acct *a)
{
	u64 e = READ_ONCE(a->epoch);

	if (tctx->acct_epoch == e)
		return;
	put_token(tctx);
	tctx->acct_epoch = e;
}

static __always_inline void release_token(struct task_struct *p, struct task_ctx *tctx)
{
	struct tailctl_request_acct *a = put_token(tctx);
	s32 cpu;

	/*
	 * A waiter may take the token now, but only a CPU running ops.dispatch
	 * hands it over: wake an idle one rather than wait for a busy CPU's
	 * slice to end (the holder may release while it keeps running, e.g.
	 * when its worker leaves the request to wait in a join).
	 */
	if (a && acnt(READ_ONCE(a->waiting)) && tctx->svc >= 0 &&
	    scx_bpf_dsq_nr_queued(TAILCTL_THROTTLE_DSQ_BASE + tctx->svc)) {
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
}

/* @tctx no longer waits in a throttle queue: drop it from its request's wait count. */
static __always_inline void leave_wait(struct task_ctx *tctx)
{
	struct tailctl_request_acct *a;

	if (__sync_val_compare_and_swap(&tctx->throttled, 1, 0) != 1)
		return;
	a = acct_of(tctx);
	if (a && acct_dec(&a->waiting, tctx->acct_epoch, 0) == ACCT_ZERO)
		count_leak(TAILCTL_LEAK_WAIT);
}

/*
 * @p stops being a worker of its service (unregistered, rebound, left
 * sched_ext, exiting): give back everything it holds in its request's
 * accounting, so no path leaves a token or a wait count behind.
 */
static __always_inline void unbind(struct task_ctx *tctx)
{
	job_unbind(tctx);
	put_token(tctx);
	leave_wait(tctx);
	tctx->bound = false;
	tctx->cg = false;
	/* ops.enqueue clears it only for a task it resolves: not left for a later binding. */
	tctx->woke_idle = false;
	tctx->svc = -1;
	tctx->tag = NO_TAG;
	tctx->overdue = false;
	tctx->overdue_local = false;
	tctx->overdue_ahead = false;
	tctx->overdue_lost = false;
	/* A wait of this binding does not carry over into the next one. */
	tctx->keep_wait = false;
	tctx->counted_running = false;
	tctx->counted_unheld = false;
	tctx->counted_announced = false;
	tctx->counted_overdue = false;
}

/* @p's cgroup v2 id (its kernfs node id, what stat() shows as the directory's inode). */
static __always_inline u64 task_cgroup_id(struct task_struct *p)
{
	return BPF_CORE_READ(p, cgroups, dfl_cgrp, kn, id);
}

/* ---- cgroup jobs (issue 12): unmodified processes as a job -------------- */

/*
 * `scx_tailctl --job /sys/fs/cgroup/PATH` makes every task of that cgroup v2
 * and of its descendants a thread of one job (nested job cgroups: the nearest
 * job ancestor of the task's dfl_cgrp wins), which occupies a service slot the
 * daemon claims for it when the cgroup appears (it re-matches the --job
 * patterns periodically) and frees when the cgroup is removed: services.pid
 * is TAILCTL_CGROUP_JOB_PID + slot (never a process's pid, so the slot can be
 * told from a registered service's), a fresh epoch per job (so a reused slot
 * is a new owner and its job_acct entry starts clean), no region and no
 * thresholds. Such a task is bound like
 * a registered worker, without a worker slot (tctx->cg): the region-based
 * parts (requests, serialization, the worker's state) see no region and do
 * nothing, while the job parts (tokens, the job queue, lending, per-job CPU
 * time in job_acct, runnable threads) apply unchanged, so the controller
 * allots it like any job: its desire comes from its runnable threads and its
 * CPU time, all of which counts as work. Membership is looked up whenever
 * the task is bound (resolve_task) and checked again where a binding is
 * (still_bound): a task moved out of the cgroup gives back what it held.
 *
 * Descendants are found here, not registered by the daemon: the walk up the
 * task's cgroup's parents (CO-RE reads, at most JOB_CGROUP_DEPTH levels) runs
 * only when a task is (re)bound, i.e. when its own cgroup id or the binding
 * generation changed; the hot paths still compare the task's own cgroup id.
 * A daemon-kept list of descendant ids would miss a child cgroup created
 * (and filled) between two of its scans, and would need an entry per cgroup.
 */

/* Number of --job patterns (set by user space before load): 0 skips the look-up. */
const volatile u32 nr_job_cgroups;

/* cgroup v2 id -> service slot of its job, kept by the daemon as job cgroups come and go. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TAILCTL_MAX_SERVICES);
	__type(key, u64);
	__type(value, u32);
} job_cgroups SEC(".maps");

/*
 * The service slot of the cgroup job of cgroup @cgid, or -1 (no such job, or
 * its slot does not hold a cgroup job). Global subprogram: verified once.
 */
__noinline int cgroup_job_slot(u64 cgid)
{
	struct tailctl_service *s;
	u32 *slot, key;

	if (!cgid)
		return -1;
	slot = bpf_map_lookup_elem(&job_cgroups, &cgid);
	if (!slot)
		return -1;
	key = *slot;
	if (key >= TAILCTL_MAX_SERVICES)
		return -1;
	s = bpf_map_lookup_elem(&services, &key);
	if (!s || READ_ONCE(s->pid) != TAILCTL_CGROUP_JOB_PID + key)
		return -1;
	return key;
}

/* Cgroup levels looked at above a task's own cgroup for a job ancestor. */
#define JOB_CGROUP_DEPTH 16

/*
 * The slot of the nearest cgroup job among cgroup @cgrp (a struct cgroup
 * address, read with CO-RE) and its ancestors, or -1. Global subprogram:
 * verified once; the cgroup is passed as a number (read, never dereferenced).
 */
__noinline int cgroup_job_slot_up(u64 cgrp)
{
	struct cgroup *c = (struct cgroup *)cgrp;
	struct cgroup_subsys_state *parent;
	int i, slot;

	for (i = 0; i < JOB_CGROUP_DEPTH && c; i++) {
		slot = cgroup_job_slot(BPF_CORE_READ(c, kn, id));
		if (slot >= 0)
			return slot;
		/* The parent css is the parent cgroup's `self` (NULL at the root). */
		parent = BPF_CORE_READ(c, self.parent);
		c = parent ? (struct cgroup *)((void *)parent - bpf_core_field_offset(struct cgroup, self)) : NULL;
	}
	return -1;
}

/* The cgroup job slot @p belongs to now (its cgroup's or the nearest job ancestor's), or -1. */
static __always_inline s32 task_cgroup_job(struct task_struct *p)
{
	if (!nr_job_cgroups || (p->flags & PF_KTHREAD))
		return -1;
	return cgroup_job_slot_up((u64)BPF_CORE_READ(p, cgroups, dfl_cgrp));
}

/* ---- end of cgroup jobs --------------------------------------------------- */

/*
 * (Re)bind @p to its service slot if the daemon registered its tid. The
 * answer is cached in @p's task_ctx with the binding generation it was
 * looked up at (see bind_gen): while nothing changed, a task costs one
 * comparison here, registered or not, instead of a worker_tids look-up.
 * Unregistration still takes effect at the task's next event: the daemon
 * bumps the generation after removing the bindings. @tctx is @p's
 * task_ctx, looked up by the caller (ops.running needs it anyway).
 */
static __always_inline struct task_ctx *resolve_task_ctx(struct task_struct *p, struct task_ctx *tctx)
{
	struct tailctl_worker_ref *ref;
	u32 tid = p->pid, *nr;
	u64 owner, gen, cgid;

	bool cg = false;
	u32 svc, worker;
	s32 cgsvc;

	nr = bpf_map_lookup_elem(&registered, (const void *)&zero_key);
	if (!nr || !*nr)
		return NULL;
	if (!tctx)
		return NULL;
	/* Read before the look-ups: a change racing with them bumps it past what is cached. */
	gen = bind_gen_now();
	cgid = nr_job_cgroups && !(p->flags & PF_KTHREAD) ? task_cgroup_id(p) : 0;
	if (gen != BIND_GEN_NONE && tctx->bind_gen == gen && tctx->bind_cgid == cgid)
		return tctx->svc >= 0 ? tctx : NULL;

	ref = bpf_map_lookup_elem(&worker_tids, &tid);
	owner = ref && ref->service < TAILCTL_MAX_SERVICES ? service_owner(ref->service) : 0;
	if (!ref || ref->service >= TAILCTL_MAX_SERVICES || ref->worker >= TAILCTL_MAX_WORKERS || !owner ||
	    !tid_binding_matches(p, ref)) {
		/* Not a registered worker: a thread of a cgroup job, if its cgroup is one. */
		cgsvc = cgid ? task_cgroup_job(p) : -1;
		owner = cgsvc >= 0 && cgsvc < TAILCTL_MAX_SERVICES ? service_owner(cgsvc) : 0;
		if (!owner) {
			if (tctx->svc >= 0)
				unbind(tctx);
			tctx->bind_gen = gen;
			tctx->bind_cgid = cgid;
			return NULL;
		}
		cg = true;
		svc = cgsvc;
		worker = 0;
	} else {
		svc = ref->service;
		worker = ref->worker;
	}
	if (!tctx->bound || tctx->svc != (s32)svc || tctx->worker != worker ||
	    tctx->owner != owner || tctx->cg != cg) {
		/* What it held belongs to its old binding: give it back before rebinding. */
		if (tctx->bound)
			unbind(tctx);
		tctx->bound = true;
		tctx->tag = NO_TAG;
		tctx->holds_token = 0;
		tctx->counted_running = false;
		tctx->counted_unheld = false;
		tctx->counted_announced = false;
		tctx->throttled = 0;
		tctx->overdue = false;
		tctx->overdue_local = false;
		tctx->overdue_ahead = false;
		tctx->overdue_lost = false;
	}
	tctx->svc = svc;
	tctx->worker = worker;
	tctx->owner = owner;
	tctx->cg = cg;
	tctx->tid = tid;
	tctx->thr_floor_ns = service_threshold_floor(svc);
	tctx->bind_gen = gen;
	tctx->bind_cgid = cgid;
	return tctx;
}

/* resolve_task_ctx with @p's state looked up here (created by ops.init_task: the hot paths never allocate). */
static __always_inline struct task_ctx *resolve_task(struct task_struct *p)
{
	return resolve_task_ctx(p, task_ctx(p));
}

/* @tctx was unbound outside resolve_task: its cached answer no longer holds. */
static __always_inline void forget_binding(struct task_ctx *tctx)
{
	tctx->bind_gen = BIND_GEN_NONE;
}

/*
 * Is @p (with ctx @tctx) still the worker @tctx says, of the same
 * registration? No side effects. While the binding generation (and, for a
 * cgroup job's thread, the cgroup) is the one @tctx was resolved at, nothing
 * it was resolved from changed.
 */
static __always_inline bool still_bound(struct task_struct *p, struct task_ctx *tctx)
{
	struct tailctl_worker_ref *ref;
	u32 tid = p->pid;
	u64 gen;

	if (tctx->svc < 0)
		return false;
	gen = bind_gen_now();
	if (gen != BIND_GEN_NONE && tctx->bind_gen == gen && (!tctx->cg || task_cgroup_id(p) == tctx->bind_cgid))
		return true;
	if (tctx->cg)
		return task_cgroup_job(p) == tctx->svc && service_owner_at(&tctx->svc) == tctx->owner;
	ref = bpf_map_lookup_elem(&worker_tids, &tid);
	return ref && ref->service == (u32)tctx->svc && ref->worker == tctx->worker &&
	       service_owner_at(&ref->service) == tctx->owner && tid_binding_matches(p, ref);
}

/*
 * The tag @tctx's worker publishes (the request it is on), not yet checked
 * against the request's slot (request_of_tag), or NO_TAG.
 */
static __always_inline u64 worker_current(struct task_ctx *tctx, struct tailctl_region *r)
{
	struct tailctl_worker_slot *w;
	u32 widx = tctx->worker;

	if (widx >= TAILCTL_MAX_WORKERS)
		return NO_TAG;
	w = &r->workers[widx];
	/*
	 * Only a worker executing a task is on a request. A thief or a parked
	 * worker keeps its last request in `current` (the paper's bookkeeping
	 * updates it on switch), but must neither be charged nor hold one of
	 * that request's tokens: a serialized request's only runnable thread
	 * would otherwise queue behind idle thieves.
	 */
	if (READ_ONCE(w->state) != TAILCTL_WORKER_WORKING)
		return NO_TAG;
	return READ_ONCE(w->current);
}

/* @cur (worker_current) if its request slot still holds it: its tag, with *acct_idx set; else NO_TAG. */
static __always_inline u64 request_of_tag(struct task_ctx *tctx, struct tailctl_region *r, u64 cur, u32 *acct_idx)
{
	u32 slot, gen;

	if (cur == NO_TAG)
		return NO_TAG;
	slot = (u32)cur;
	gen = (u32)(cur >> 32);
	if (slot >= TAILCTL_MAX_REQUESTS) {
		STAT_INC(invalid_hints);
		return NO_TAG;
	}
	/* A stale tag (the slot was reused) is ignored, not charged. */
	if (READ_ONCE(r->requests[slot].generation) != gen)
		return NO_TAG;
	*acct_idx = (u32)tctx->svc * TAILCTL_MAX_REQUESTS + slot;
	return cur;
}

/*
 * The request @tctx's worker is on now, validated against the region: returns
 * its tag and sets *acct_idx, or NO_TAG.
 */
static __always_inline u64 current_request(struct task_ctx *tctx, struct tailctl_region *r, u32 *acct_idx)
{
	return request_of_tag(tctx, r, worker_current(tctx, r), acct_idx);
}

/* --request-shares: apply_allot shares each job's allotment among its requests (off: no pass). */
const volatile bool request_shares;

/*
 * The kernel's entry for request @tag of registration @owner, reset when the
 * slot holds a new request or the service slot a new registration (a reused
 * slot must not inherit a cap, serialized time or tokens). The reset parks
 * the tag at ACCT_RESETTING while it zeroes, so no thread counts itself into
 * an entry being wiped: it finds no match and backs off.
 */
static __always_inline struct tailctl_request_acct *request_acct(u32 idx, u64 tag, u64 owner)
{
	struct tailctl_request_acct *a = bpf_map_lookup_elem(&req_acct, &idx);
	u64 old, ne;
	u32 w;

	if (!a)
		return NULL;
	old = READ_ONCE(a->tag);
	if (old == tag && READ_ONCE(a->owner) == owner)
		return a;
	if (old == ACCT_RESETTING)
		return NULL;
	if (!CAS_OK(&a->tag, old, ACCT_RESETTING))
		return NULL;
	/*
	 * The live counters restart at 0 in the next epoch, each in one store
	 * of the (epoch, count) word: a thread of the old epoch racing with
	 * this finds its step stale instead of taking from the new counts.
	 * holders first, before holder is cleared (see claim_token).
	 */
	ne = a->epoch + 1;
	w = acct_word(ne);
	__sync_lock_test_and_set(&a->holders, w);
	__sync_lock_test_and_set(&a->runners, runners_word(ne));
	__sync_lock_test_and_set(&a->waiting, w);
	__sync_lock_test_and_set(&a->overdue_running, w);
	__sync_lock_test_and_set(&a->holder, 0);
	a->work_ns = 0;
	a->max_running_settled = 0;
	/*
	 * The two u32 fields beside u64 ones as single stores: merged with
	 * their neighbours, clang zeroes the whole run four bytes at a time.
	 */
	WRITE_ONCE(a->alloc, 0);
	a->serialized_at_ns = 0;
	a->settled_at_ns = 0;
	a->throttled = 0;
	WRITE_ONCE(a->max_running, 0);
	a->bounces = 0;
	a->bounced_ns = 0;
	a->overdue = 0;
	a->max_running_shared = 0;
	a->shared_starts = 0;
	a->over_alloc = 0;
	/*
	 * A new request starts with its job's current per-request share (0:
	 * none). Only req_share_pass writes one, and only with --request-shares:
	 * without it no look-up (read-only data, the verifier drops the branch).
	 */
	if (request_shares) {
		a->alloc = job_req_share(idx / TAILCTL_MAX_REQUESTS, owner);
		a->share_min = a->alloc;
		a->share_max = a->alloc;
	} else {
		a->share_min = 0;
		a->share_max = 0;
	}
	a->owner = owner;
	WRITE_ONCE(a->epoch, ne);
	/* Full barrier: the zeroes and the owner are visible before the tag. */
	__sync_lock_test_and_set(&a->tag, tag);
	return a;
}

/*
 * Has serialization settled: does every thread that may be running the
 * request hold one of its tokens? Threads still in begin_request's cap check
 * (arriving) and runners counted without a token (unheld: they began
 * before the cap, and their CPU's preemption kick may not have landed yet)
 * keep it unsettled; a holder that leaves while such a thread still runs is
 * not "down to one thread".
 */
static __always_inline bool settled_now(struct tailctl_request_acct *a, u64 tag, u32 idx)
{
	u64 w = __sync_fetch_and_add(&a->runners, 0);

	return !RUNNERS_CNT(w, TAILCTL_RUNNERS_ARRIVING_SHIFT) && !RUNNERS_CNT(w, TAILCTL_RUNNERS_UNHELD_SHIFT) &&
	       !cpus_naming(tag, idx, NAMING_ANY_UNHELD);
}

/*
 * A thread announced as an unheld runner of (@tag, @idx), entry @a, just
 * replaced its announcement (a full barrier): if a serialization of the
 * request started meanwhile, it may have seen the announcement and not
 * settled; settle it here if nothing else keeps it unsettled. One of the two
 * sees the other (the serialization stamps and caps before it reads the
 * announcements).
 */
static __always_inline void settle_left(struct tailctl_request_acct *a, u64 tag, u32 idx, u64 now)
{
	if (a && READ_ONCE(a->serialized_at_ns) && !READ_ONCE(a->settled_at_ns) && READ_ONCE(a->tag) == tag &&
	    settled_now(a, tag, idx))
		a->settled_at_ns = clock_or(now);
}

/* A runner counted without a token got one: it no longer keeps serialization from settling. */
static __always_inline void note_held(struct task_ctx *tctx, struct tailctl_request_acct *a)
{
	u64 w;

	if (tctx->counted_unheld && READ_ONCE(tctx->holds_token)) {
		tctx->counted_unheld = false;
		runners_step(a, tctx->acct_epoch, 0, RUNNERS_UNHELD, &w);
	}
	/*
	 * An announced runner with a token now counts as a runner like any
	 * holder (the cap's accounting of holders reads `running`), and its
	 * announcement stops keeping serialization unsettled.
	 */
	if (tctx->counted_announced && READ_ONCE(tctx->holds_token)) {
		tctx->counted_announced = false;
		if (runners_step(a, tctx->acct_epoch, RUNNERS_RUNNING, 0, &w) == ACCT_DONE)
			tctx->counted_running = true;
		unannounce();
	}
}

/*
 * Request slot (u32)@tag of @r if it still holds @tag's generation, else
 * NULL. The figures the kernel publishes there (kernel_work_ns,
 * kernel_running) are written only then: a worker's thread may still be
 * charged to a finished request whose slot holds the next one (see
 * tailctl_tick).
 */
static __always_inline struct tailctl_request_slot *slot_of_tag(struct tailctl_region *r, u64 tag)
{
	struct tailctl_request_slot *req;
	u32 slot = (u32)tag;

	if (slot >= TAILCTL_MAX_REQUESTS)
		return NULL;
	req = &r->requests[slot];
	return READ_ONCE(req->generation) == (u32)(tag >> 32) ? req : NULL;
}

/*
 * --serialize-mark-only: a crossing only marks the request (stamp, count,
 * SERIALIZED in the region); its cap is left as it was, so its threads are not
 * held to one token.
 */
const volatile bool serialize_mark_only;

/* Serialize the request if its work crossed the threshold at the current load. */
static __always_inline void check_threshold(struct task_ctx *tctx, struct tailctl_region *r,
					    struct tailctl_request_acct *a, u64 now, u64 work)
{
	struct tailctl_service *svc;
	struct tailctl_request_slot *req;
	u32 sidx, q, n, slot, running;
	u64 thr, old;

	/*
	 * Below every threshold of the table, whatever the load: nothing to
	 * look up (most ticks of most requests). 0: no floor given. First: it
	 * needs no load from the entry (@work is the caller's own sum).
	 */
	if (tctx->thr_floor_ns && work < tctx->thr_floor_ns)
		return;
	slot = (u32)tctx->tag;
	if (a->serialized_at_ns || slot >= TAILCTL_MAX_REQUESTS)
		return;
	sidx = tctx->svc;
	svc = bpf_map_lookup_elem(&services, &sidx);
	if (!svc)
		return;
	n = svc->nr_thresholds;
	if (!n)
		return;
	if (n > TAILCTL_QMAX)
		n = TAILCTL_QMAX;
	/* active is a hint: clamp into the table (look-ups past q_max use the last entry). */
	q = READ_ONCE(r->header.active);
	if (q < 1)
		q = 1;
	if (q > n)
		q = n;
	thr = svc->threshold_ns[(q - 1) & (TAILCTL_QMAX - 1)];
	if (!thr || work < thr)
		return;

	/*
	 * Stamp, then cap: req_set_share (per-request allocations) re-reads the
	 * stamp after it changed alloc and puts the 1 back if it raced with this.
	 */
	now = clock_or(now);
	a->serialized_at_ns = now;
	/*
	 * max_running: its threads running now, counted from the CPUs'
	 * announcements, since most starts (uncapped) count nowhere else
	 * (begin_request_at).
	 */
	if (serialize_mark_only) {
		running = cpus_naming(tctx->tag, tctx->acct_idx, NAMING_COUNT);
		if (running > a->max_running)
			a->max_running = running;
		STAT_INC(serializations);
		__sync_fetch_and_add(&r->header.kernel_serialized, 1);
		goto publish;
	}
	__sync_lock_test_and_set(&a->alloc, 1);
	/*
	 * The thread that saw the crossing keeps running with the one token; the
	 * others are preempted now, in the scan that counts them (after the cap:
	 * every one counted either announced before it or saw it).
	 */
	claim_token(tctx, a);
	note_held(tctx, a);
	running = cpus_naming(tctx->tag, tctx->acct_idx, NAMING_COUNT_KICK);
	if (running > a->max_running)
		a->max_running = running;
	if (settled_now(a, tctx->tag, tctx->acct_idx))
		a->settled_at_ns = now;
	STAT_INC(serializations);
	__sync_fetch_and_add(&r->header.kernel_serialized, 1);

	/*
	 * Publish: set SERIALIZED unless the slot moved on (one CAS on
	 * flags+generation), and the alloc only in the same case: a worker
	 * whose `current` still names a finished request is charged to it
	 * (ops.tick does not re-read the slot's generation while the worker
	 * stays on its request), and that request's crossing must not mark
	 * the slot's next one.
	 */
publish:
	req = &r->requests[slot];
	old = *(volatile u64 *)&req->flags;
	if ((u32)(old >> 32) != (u32)(tctx->tag >> 32))
		return;
	__sync_val_compare_and_swap((u64 *)&req->flags, old, old | TAILCTL_FLAG_SERIALIZED);
	req->kernel_running = running;
	if (!serialize_mark_only)
		req->kernel_alloc = 1;
}

/*
 * Charge CPU time since the last charge point to the task's request, whose
 * entry @a the caller looked up (acct_of: ops.tick and ops.stopping use it
 * again after the charge).
 */
static __always_inline void charge_request(struct task_ctx *tctx, struct tailctl_region *r,
					   struct tailctl_request_acct *a, u64 now, u64 cpu_ns)
{
	struct tailctl_request_slot *req;
	u32 widx = tctx->worker;
	u64 delta, work;

	if (tctx->tag == NO_TAG || !tctx->charge_from_ns)
		return;
	/* Charge the task's own CPU clock (sum_exec_runtime), not wall time. */
	delta = cpu_ns - tctx->charge_from_ns;
	tctx->charge_from_ns = cpu_ns;
	/*
	 * No state check here: current_request() only starts an interval for a
	 * WORKING worker, and the interval that ends because the worker left the
	 * request (its state already changed) is still the request's time.
	 */
	if (!a)
		return;
	/* A thread sent back for lack of a token did no work for the request; its time is tracked apart. */
	if (tctx->bounced) {
		__sync_fetch_and_add(&a->bounced_ns, delta);
		return;
	}
	/* The sum this add made (fetch-and-add): no second load of the entry. */
	work = __sync_fetch_and_add(&a->work_ns, delta) + delta;
	req = slot_of_tag(r, tctx->tag);
	if (req)
		req->kernel_work_ns = work;
	if (widx < TAILCTL_MAX_WORKERS)
		__sync_fetch_and_add(&r->workers[widx].kernel_work_ns, delta);
	check_threshold(tctx, r, a, now, work);
}

/*
 * A waiter let through at the bound runs now: its wait from @at (throttled
 * by its request's cap, or queued for its job's token) to its run
 * (tailctl_stats.max_overdue_wait_ns, or max_overdue_ahead_wait_ns for one
 * that queued fairly, ahead of the frontier: overdue_local_cpu, or
 * max_overdue_lost_wait_ns for one that lost its head: tailctl_enqueue).
 */
static __always_inline void note_overdue_wait(struct task_ctx *tctx, u64 at)
{
	struct tailctl_stats *st;
	u64 now, *max;

	if (!at)
		return;
	now = bpf_ktime_get_ns();
	st = stats_cpu();
	if (!st || now <= at)
		return;
	if (tctx->overdue_ahead)
		max = &st->max_overdue_ahead_wait_ns;
	else if (tctx->overdue_lost)
		max = &st->max_overdue_lost_wait_ns;
	else
		max = &st->max_overdue_wait_ns;
	if (now - at > *max)
		*max = now - at;
}

/* Start charging @p to request @tag (acct index @idx), the one its worker is on now (current_request). */
static __always_inline void begin_request_at(struct task_struct *p, struct task_ctx *tctx,
					     struct tailctl_region *r, u64 now, u64 tag, u32 idx)
{
	struct tailctl_request_acct *a;
	u32 slot, running = 0, od, alloc, unheld_n, held;
	u64 e, w = 0, unheld = 0;
	bool arrived;

	if (tag != tctx->tag)
		release_token(p, tctx);
	tctx->tag = tag;
	tctx->acct_idx = idx;
	tctx->charge_from_ns = p->se.sum_exec_runtime;
	tctx->counted_running = false;
	tctx->counted_unheld = false;
	tctx->counted_announced = false;
	tctx->counted_overdue = false;
	tctx->bounced = false;
	tctx->evict = false;
	if (tag == NO_TAG)
		return;
	a = request_acct(idx, tag, tctx->owner);
	if (!a) {
		/* The entry this CPU showed (end_request's next_on_cpu) is no longer run here. */
		announce_run(NO_TAG, 0, 0);
		tctx->tag = NO_TAG;
		return;
	}
	attach_epoch(tctx, a);
	/*
	 * Uncapped at first sight (most starts): the thread announces itself an
	 * unheld runner in its CPU's cpu_runs entry, then reads the cap again
	 * (announce_run: a full barrier between). check_threshold sets the
	 * cap and then reads the announcements (cpus_naming, settled_now):
	 * either it sees this thread (waits for it to go, and kicks it) or the
	 * re-read sees the cap, and the thread takes the careful path below.
	 * Nothing in the shared entry is written: no runner count, no
	 * kernel_running, no max_running (those count the careful path's
	 * runners and token holders).
	 */
	if (!READ_ONCE(a->alloc) && !READ_ONCE(tctx->holds_token)) {
		struct tailctl_cpu_run *cr = announce_run(tag, idx, 1);

		if (cr && READ_ONCE(a->tag) == tag && !READ_ONCE(a->alloc)) {
			tctx->counted_announced = true;
			return;
		}
		/* The careful path: its own steps (full barriers) order this. */
		if (cr)
			cr->unheld = 0;
	} else {
		/*
		 * Announce the request (for kicks) before counting "arriving"
		 * and reading the cap, while check_threshold sets the cap
		 * before it reads arriving + unheld (both through full-barrier
		 * atomics): a thread racing with the serialization either is
		 * seen (and kicked through cpu_runs) or sees the cap and backs
		 * out here. Only a thread past the check counts in `running`,
		 * so one that backs out never appears as a second runner.
		 */
		announce_run(tag, idx, 0);
	}
	e = tctx->acct_epoch;
	/* The entry was reset under us (or is being): our count went with it; back off. */
	arrived = runners_step(a, e, RUNNERS_ARRIVING, 0, &w) == ACCT_DONE;
	if (arrived && READ_ONCE(a->tag) != tag) {
		runners_step(a, e, 0, RUNNERS_ARRIVING, &w);
		arrived = false;
	}
	if (!arrived) {
		set_cpu_run(NO_TAG, 0);
		tctx->tag = NO_TAG;
		return;
	}
	if (READ_ONCE(a->alloc) && !claim_token(tctx, a) && !tctx->overdue) {
		/*
		 * Queued before the cap: back out; it never counts as running. An
		 * overdue waiter is not sent back: bouncing it again would turn the
		 * wait bound into a livelock whenever the token is never freed.
		 */
		runners_step(a, e, 0, RUNNERS_ARRIVING, &w);
		set_cpu_run(NO_TAG, 0);
		if (a->serialized_at_ns && !a->settled_at_ns && settled_now(a, tag, idx))
			a->settled_at_ns = clock_or(now);
		__sync_fetch_and_add(&a->bounces, 1);
		tctx->bounced = true;
		bounce(p, tctx);
		return;
	}
	/*
	 * A thread let through by the wait bound is reported apart (overdue):
	 * the cap's own accounting (max_running_settled) counts token holders.
	 * It is counted overdue before it counts as running (both full-barrier
	 * atomics), so a thread that sees it in `running` also sees it in
	 * overdue_running and never reports it as a second holder; end_request
	 * takes them back in the opposite order.
	 */
	if (tctx->overdue && a->alloc && !tctx->holds_token) {
		/*
		 * An escape from the cap, kept short: at most the default slice,
		 * so with long slices (--slice-us) the holder it displaced (the
		 * bound's kick preempts the CPU it waits for) is not made to wait
		 * out a whole long slice in turn.
		 */
		if (p->scx.slice > TAILCTL_SLICE_NS_DEFAULT)
			p->scx.slice = TAILCTL_SLICE_NS_DEFAULT;
		tctx->counted_overdue = true;
		acct_inc(&a->overdue_running, e, ACCT_CNT_MASK);
		__sync_fetch_and_add(&a->overdue, 1);
	}
	/*
	 * From arriving to running in one step, and counted unheld in the same
	 * step if it has no token, so a settle check always sees it.
	 */
	if (!READ_ONCE(tctx->holds_token) && !tctx->counted_overdue) {
		tctx->counted_unheld = true;
		unheld = RUNNERS_UNHELD;
	}
	running = 0;
	if (runners_step(a, e, RUNNERS_RUNNING | unheld, RUNNERS_ARRIVING, &w) == ACCT_DONE)
		running = runners_running(w);
	od = acnt(READ_ONCE(a->overdue_running));
	running = running > od ? running - od : 0;
	tctx->counted_running = true;
	if (running > a->max_running)
		a->max_running = running;
	/* Under a per-request share (not a serialization): is the cap kept? */
	alloc = READ_ONCE(a->alloc);
	if (alloc && !READ_ONCE(a->serialized_at_ns) && tctx->holds_token) {
		__sync_fetch_and_add(&a->shared_starts, 1);
		if (running > a->max_running_shared)
			a->max_running_shared = running;
		if (running > alloc)
			__sync_fetch_and_add(&a->over_alloc, 1);
	}
	slot = (u32)tag;
	if (slot < TAILCTL_MAX_REQUESTS)
		r->requests[slot].kernel_running = running;
	/*
	 * After settling, the threads running as holders, and this one if it
	 * runs without a token (it passed its own re-read of the cap: e.g. a
	 * share change put the cap at 0 for a moment). Other runners without
	 * one are left out: they may be threads of the fast path above between
	 * its step and its undo (they back out, or claim, within the callback).
	 */
	if (a->serialized_at_ns && a->settled_at_ns) {
		unheld_n = RUNNERS_CNT(w, TAILCTL_RUNNERS_UNHELD_SHIFT);
		held = running > unheld_n ? running - unheld_n : 0;
		if (tctx->counted_unheld)
			held++;
		if (held > a->max_running_settled)
			a->max_running_settled = held;
	}
}

/* Start charging @p to the request its worker is on now. */
static __always_inline void begin_request(struct task_struct *p, struct task_ctx *tctx,
					  struct tailctl_region *r, u64 now)
{
	u32 idx = 0;
	u64 tag = current_request(tctx, r, &idx);

	begin_request_at(p, tctx, r, now, tag, idx);
}

/*
 * Stop charging @p: account the last interval and drop its running count.
 * @next_on_cpu: the caller starts @p on another request right after
 * (begin_request_at), which sets this CPU's cpu_runs entry before it counts
 * itself there, so the entry is left for it to overwrite (one store fewer
 * on a request switch). Meanwhile a serialization of the old request may
 * kick this CPU: one spurious preemption, never a missed one.
 */
static __always_inline struct tailctl_request_acct *end_request(struct task_struct *p, struct task_ctx *tctx,
								 struct tailctl_region *r, u64 now, bool next_on_cpu)
{
	struct tailctl_request_slot *req;
	struct tailctl_request_acct *a;
	u32 running;
	u64 sub, w = 0;
	int ok;

	if (tctx->tag == NO_TAG)
		return NULL;
	/*
	 * One look-up for the charge and the counts: a reset racing with them
	 * is caught by the counters' epoch (runners_step finds the step stale).
	 */
	a = acct_of(tctx);
	if (r)
		charge_request(tctx, r, a, now, p->se.sum_exec_runtime);
	if (tctx->counted_announced) {
		tctx->counted_announced = false;
		/*
		 * On a switch the next start overwrites the announcement (a full
		 * barrier, announce_run), and the caller
		 * then reads the stamp (settle_left): no store here.
		 */
		if (next_on_cpu)
			return a;
		/* Its announcement goes (a full barrier, then the stamp read). */
		announce_run(NO_TAG, 0, 0);
		settle_left(a, tctx->tag, tctx->acct_idx, now);
		return NULL;
	}
	if (!tctx->counted_running)
		return NULL;
	tctx->counted_running = false;
	if (!next_on_cpu)
		set_cpu_run(NO_TAG, 0);
	if (!a) {
		tctx->counted_unheld = false;
		return NULL;
	}
	/* Running and (if counted so) unheld down in one step; the overdue count after (see begin_request_at). */
	sub = RUNNERS_RUNNING;
	if (tctx->counted_unheld) {
		tctx->counted_unheld = false;
		sub |= RUNNERS_UNHELD;
	}
	ok = runners_step(a, tctx->acct_epoch, 0, sub, &w);
	if (ok == ACCT_ZERO && sub != RUNNERS_RUNNING) {
		/* One of the two is missing (never seen; a bug elsewhere): give back what is there, each on its own. */
		runners_step(a, tctx->acct_epoch, 0, RUNNERS_UNHELD, &w);
		ok = runners_step(a, tctx->acct_epoch, 0, RUNNERS_RUNNING, &w);
	}
	if (ok != ACCT_DONE)
		w = READ_ONCE(a->runners);
	running = runners_running(w);
	if (tctx->counted_overdue) {
		tctx->counted_overdue = false;
		acct_dec(&a->overdue_running, tctx->acct_epoch, 0);
	}
	req = r ? slot_of_tag(r, tctx->tag) : NULL;
	if (req)
		req->kernel_running = running;
	if (a->serialized_at_ns && !a->settled_at_ns && settled_now(a, tctx->tag, tctx->acct_idx))
		a->settled_at_ns = clock_or(now);
	return NULL;
}

/*
 * For a registered task about to be queued: must it wait for a token? Resolves
 * the request it will run and, if capped, tries to claim (unless others of the
 * same request are already waiting: they go first).
 */
static __always_inline bool must_throttle(struct task_struct *p, struct task_ctx *tctx)
{
	struct tailctl_request_acct *a;
	struct tailctl_region *r;
	u32 idx = 0;
	u64 tag;

	r = service_region(tctx->svc);
	if (!r)
		return false;
	tag = current_request(tctx, r, &idx);
	if (tag == NO_TAG)
		return false;
	if (tag != tctx->tag) {
		release_token(p, tctx);
		tctx->tag = tag;
		tctx->acct_idx = idx;
	}
	a = request_acct(idx, tag, tctx->owner);
	if (!a)
		return false;
	attach_epoch(tctx, a);
	if (!READ_ONCE(a->alloc))
		return false;
	if (tctx->holds_token)
		return false;
	/* Others are waiting for this request's token: queue behind them (rotation). */
	if (acnt(READ_ONCE(a->waiting)))
		return true;
	return !claim_token(tctx, a);
}

/*
 * Was @p preempted inside an RCU read-side critical section (PREEMPT_RCU
 * kernels; false elsewhere)? Every grace period in the system then waits for
 * it to run again: see tailctl_enqueue. The kernel marks such a reader
 * (rcu_read_unlock_special.b.blocked, set at its context switch, before it is
 * queued). Not rcu_read_lock_nesting: this program itself runs under
 * rcu_read_lock(), so a task queueing itself (a preemption) always has one
 * level, and treating every preempted task as a reader forgave every charge.
 */
static __always_inline bool in_rcu_reader(const struct task_struct *p)
{
	if (bpf_core_field_exists(p->rcu_read_unlock_special))
		return BPF_CORE_READ(p, rcu_read_unlock_special.b.blocked) != 0;
	return false;
}

/*
 * How far behind vtime_now a task that slept may queue (--sleeper-credit-us;
 * 0: one slice, the default). Before it had its own flag the credit was always
 * the slice, so `-s` changed two things at once.
 */
const volatile u64 sleeper_credit_ns;

/* A task's vtime, clamped so that sleepers gain at most the sleeper credit. */
static __always_inline u64 task_vtime(const struct task_struct *p)
{
	u64 vtime = p->scx.dsq_vtime, credit = sleeper_credit_ns ? sleeper_credit_ns : slice_ns;

	if (time_before(vtime, vtime_now - credit))
		vtime = vtime_now - credit;
	return vtime;
}

/*
 * Advance @p's vtime by the CPU time it ran since it was last charged,
 * scaled by its weight (nice). The time comes from sum_exec_runtime, not from
 * what is left of the slice: sched_yield(), a preemption kick and a bounce
 * all zero the slice, so "slice used" charged a whole slice for a run of a
 * few microseconds. Idle workers of a work-stealing runtime yield dozens of
 * times before they sleep; charged 5 ms a yield, they fell far behind every
 * other task in vtime and queued behind it when work came (the `experiment`
 * guest test: an unregistered steal-first server missed 65% of its requests
 * under scx_tailctl against 2.5% under the default scheduler).
 */
static __always_inline void charge_vtime(struct task_struct *p, struct task_ctx *tctx, u32 scale)
{
	u64 weight = p->scx.weight ? p->scx.weight : 1;
	u64 used = 0, ran;

	if (tctx) {
		ran = p->se.sum_exec_runtime;
		if (ran > tctx->vtime_exec_at)
			used = ran - tctx->vtime_exec_at;
		tctx->vtime_exec_at = ran;
	} else if (p->scx.slice < slice_ns) {
		used = slice_ns - p->scx.slice;
	}
	p->scx.dsq_vtime += used * scale * TAILCTL_WEIGHT_NICE0 / weight;
}

/* ---- per-LLC normal-level queues (issue 16) ------------------------------ */

/*
 * The normal level (every unregistered task) is queued per LLC group
 * instead of in one shared DSQ, so CPUs of different LLCs do not take the
 * same DSQ lock and walk the same rbtree at every enqueue and dispatch:
 *
 *  - User space maps each CPU to its LLC group (cpu_llc, from scx_utils'
 *    Topology, or forced groups for tests) and sets nr_llcs before load.
 *    With nr_llcs <= 1 (--llc-queues off, or one LLC) the normal level is
 *    TAILCTL_SHARED_DSQ as before and none of this costs anything but one
 *    rodata read.
 *  - ops.enqueue inserts a task into the queue of the LLC of the CPU it is
 *    headed for: an idle CPU it claimed (which it then kicks), else the CPU
 *    it is on (task_cpu, where a wakeup's ops.select_cpu put it). If @p may
 *    not run on that CPU (it should, but affinity changes race), a CPU it
 *    may run on is taken instead: a task is never queued on an LLC none of
 *    whose CPUs may run it.
 *  - ops.dispatch moves from its own LLC's queue first and then steals
 *    from the others (next group id first). scx_bpf_dsq_move_to_local()
 *    skips tasks this CPU may not run (consume_dispatch_q in ext.c walks
 *    the whole DSQ and checks task_can_run_on_remote_rq for each), so a
 *    queue head pinned elsewhere does not block the tasks behind it, and a
 *    CPU whose own queue holds only tasks it may not run steals: nothing
 *    is stranded.
 *  - Fairness: one global vtime_now. A task's vtime means the same thing
 *    in every queue, so a steal or a migration needs no rebasing; within a
 *    queue the order is the vtime order as before, across queues a steal
 *    takes the other queue's lowest vtime. An idle or drained CPU steals;
 *    so does a CPU whose own queue's head is more than half a slice ahead
 *    in vtime of another queue's head and whose queue is shorter (a
 *    balance steal). Without that, two busy LLCs were never balanced: in
 *    the `isolation` guest test (2 LLCs of 2 CPUs) a 2-thread neighbour
 *    sat in one queue with two of a service's 4 spinning threads while the
 *    other two, yielding in a loop, presumably kept their queue from
 *    draining; it got 1.0 CPU instead of 4 x 2/6 = 1.33 (0.5 per thread, a
 *    queue of 4 on 2 CPUs)  in 3 of 16 runs, and 1.24-1.34 in every run
 *    with one queue. Its lagging tasks sit at vtime_now - slice (the
 *    enqueue clamp), the spinners next door at about vtime_now, so the gap
 *    shows at once; balanced queues' heads rarely differ by that much.
 *  - The other queues (priority levels other than normal, throttle and job
 *    queues) stay global: they hold registered work, which is few tasks.
 *    Released throttle and job waiters at the normal level go to
 *    TAILCTL_SHARED_DSQ as before, which every CPU weighs against its own
 *    LLC's queue by head vtime (normal_move_to_local): choosing an LLC
 *    queue per waiter inside the release loops took the scheduler over the
 *    verifier's limit (E2BIG at load, 6.18).
 */

/* LLC groups (set by user space before load); <= 1: the one shared queue. */
const volatile u32 nr_llcs = 1;
/* CPU -> LLC group, 0..nr_llcs-1 (set by user space before load). */
const volatile u32 cpu_llc[MAX_CPUS];

static __always_inline bool llc_on(void)
{
	return nr_llcs > 1;
}

static __always_inline u32 llc_count(void)
{
	return nr_llcs < TAILCTL_MAX_LLCS ? nr_llcs : TAILCTL_MAX_LLCS;
}

/* @cpu's LLC group (0 for a CPU out of range: every group's queue exists). */
static __always_inline u32 llc_of(s32 cpu)
{
	u32 llc;

	if (cpu < 0 || cpu >= MAX_CPUS)
		return 0;
	llc = cpu_llc[cpu];
	return llc < llc_count() ? llc : 0;
}

static __always_inline u64 llc_dsq(u32 llc)
{
	return TAILCTL_LLC_DSQ_BASE + (llc & (TAILCTL_MAX_LLCS - 1));
}

/* @cpu if @p may run there, else a CPU it may run on: the LLC @p is queued on. */
static __always_inline s32 llc_target_cpu(struct task_struct *p, s32 cpu)
{
	if (cpu >= 0 && bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return cpu;
	return bpf_cpumask_any_distribute(p->cpus_ptr);
}

/*
 * The queue of @cpu's LLC group, with the insert counted if @count. A
 * global subprogram (verified once, returns an opaque id).
 */
__noinline int llc_cpu_dsq(s32 cpu, int count)
{
	u32 llc = llc_of(cpu);

	if (count) {
		struct tailctl_stats *st = stats_cpu();

		if (st)
			st->llc_enqueues[llc & (TAILCTL_MAX_LLCS - 1)]++;
	}
	return TAILCTL_LLC_DSQ_BASE + (llc & (TAILCTL_MAX_LLCS - 1));
}

/* The normal-level queue for @p headed for @cpu (an insert into it is counted). */
static __always_inline u64 normal_dsq(struct task_struct *p, s32 cpu)
{
	if (!llc_on())
		return TAILCTL_SHARED_DSQ;
	return llc_cpu_dsq(llc_target_cpu(p, cpu), 1);
}

#define LLC_STAT_INC(field, llc)                                          \
	do {                                                              \
		struct tailctl_stats *__s = stats_cpu();                  \
		if (__s)                                                  \
			__s->field[(llc) & (TAILCTL_MAX_LLCS - 1)]++;     \
	} while (0)

/*
 * Tasks queued at the normal level, all LLC queues together. Global
 * subprogram (verified once): called from the priority-level checks.
 */
__noinline int normal_nr_queued(void)
{
	u32 i, n = llc_count();
	int sum = 0, q;

	sum = scx_bpf_dsq_nr_queued(TAILCTL_SHARED_DSQ);
	if (!llc_on())
		return sum;
	bpf_for(i, 0, n) {
		q = scx_bpf_dsq_nr_queued(llc_dsq(i));
		if (q > 0)
			sum += q;
	}
	return sum;
}

/*
 * The vtime of the first task of @dsq (~0: empty). A global subprogram: its
 * iterator, inlined into normal_move_to_local's loop over the other LLC
 * queues, multiplied the verifier's states there (E2BIG with two LLCs and
 * an allotment controller).
 */
__noinline u64 dsq_head_vtime(u64 dsq)
{
	struct task_struct *p;
	u64 vtime = ~0ULL;

	bpf_for_each(scx_dsq, p, dsq, 0) {
		vtime = p->scx.dsq_vtime;
		break;
	}
	return vtime;
}

/*
 * ops.dispatch at the normal level: @cpu's own LLC queue, then the others
 * (steals). Released waiters in the shared queue compete with the own
 * queue by vtime (its head against the own queue's head), as they did in
 * the one shared queue: first would let a throttled service jump the fair
 * order at every rotation, last could leave them behind a queue that never
 * drains (no bound: a watchdog stall). Returns 1 if a task was moved to
 * @cpu. Global subprogram.
 */
__noinline int normal_move_to_local(s32 cpu)
{
	u32 own, n, i, v, behind = 0;
	u64 shared_vtime, own_vtime, hv, lowest;
	s32 own_len;

	if (!llc_on())
		return scx_bpf_dsq_move_to_local(TAILCTL_SHARED_DSQ, 0);
	own = llc_of(cpu);
	n = llc_count();
	own_len = scx_bpf_dsq_nr_queued(llc_dsq(own));
	own_vtime = own_len > 0 ? dsq_head_vtime(llc_dsq(own)) : ~0ULL;
	shared_vtime = scx_bpf_dsq_nr_queued(TAILCTL_SHARED_DSQ) > 0 ? dsq_head_vtime(TAILCTL_SHARED_DSQ) : ~0ULL;
	if (shared_vtime != ~0ULL && (s64)(shared_vtime - own_vtime) <= 0 &&
	    scx_bpf_dsq_move_to_local(TAILCTL_SHARED_DSQ, 0))
		return 1;
	/*
	 * Balance steal (see the section's comment): the queue whose head is
	 * furthest behind, if more than half a slice behind our own head and
	 * longer than our own queue (balanced queues of CPU-bound tasks have
	 * heads up to a slice apart now and then; moving one of them would
	 * only trade its cache for nothing).
	 */
	if (own_vtime != ~0ULL) {
		lowest = own_vtime - slice_ns / 2;
		bpf_for(i, 1, n) {
			v = own + i;
			if (v >= n)
				v -= n;
			/* The count first: it is one load, the head an iterator. */
			if (scx_bpf_dsq_nr_queued(llc_dsq(v)) <= own_len)
				continue;
			hv = dsq_head_vtime(llc_dsq(v));
			if (hv != ~0ULL && (s64)(hv - lowest) < 0) {
				lowest = hv;
				behind = v + 1;
			}
		}
		if (behind && scx_bpf_dsq_move_to_local(llc_dsq(behind - 1), 0)) {
			LLC_STAT_INC(llc_steals, behind - 1);
			STAT_INC(llc_balance_steals);
			return 1;
		}
	}
	if (scx_bpf_dsq_move_to_local(llc_dsq(own), 0)) {
		LLC_STAT_INC(llc_dispatches, own);
		return 1;
	}
	/* Released throttle and job waiters (see the section's comment). */
	if (shared_vtime != ~0ULL && scx_bpf_dsq_move_to_local(TAILCTL_SHARED_DSQ, 0))
		return 1;
	bpf_for(i, 1, n) {
		v = own + i;
		if (v >= n)
			v -= n;
		if (scx_bpf_dsq_move_to_local(llc_dsq(v), 0)) {
			LLC_STAT_INC(llc_steals, v);
			return 1;
		}
	}
	return 0;
}

/* ---- end of per-LLC queues ----------------------------------------------- */

/* ---- priority levels (issue 13) ----------------------------------------- */

/*
 * Every task has a level, 0..TAILCTL_PRIO_LEVELS-1, higher more urgent:
 * a registered worker its service's (services.priority, written by the
 * daemon at registration, which refuses non-root services above
 * --max-user-priority), a task in a cgroup given one with --priority-cgroup
 * that cgroup's, every other task TAILCTL_PRIO_NORMAL. Each level has its own
 * vtime-ordered DSQ (normal's is TAILCTL_SHARED_DSQ, so nothing changes
 * while no level but normal is in use); ops.enqueue and the releases of
 * throttle and job waiters insert a task into its level's DSQ.
 *
 *  - Prompt: ops.dispatch serves the highest non-empty level first; a task
 *    queued at a level above what some CPU runs, with no idle CPU, preempts
 *    the CPU running the lowest level (SCX_KICK_PREEMPT), so a higher-level
 *    thread waits for at most the kick's round trip, not a slice.
 *  - Starvation guard: prio_since[l] is when level l last had work nobody
 *    served (set when a task is queued into an unserved level, moved forward
 *    each time the level is served, cleared when it is found empty). A lower
 *    level whose prio_since is older than --priority-guard-ms gets one
 *    dispatch (one CPU wins it by compare-and-swap, counted as
 *    prio_guard_dispatches) and is not preempted by the kick above. Bound:
 *    every non-empty level is served at least once per guard + one slice
 *    (a busy CPU runs ops.dispatch at least once a slice), so a task with k
 *    tasks ahead of it in its level's vtime order runs within
 *    (k + 1) * (guard + slice): with the defaults (100 ms, 5 ms) that is
 *    below the 30 s watchdog for up to 284 runnable tasks queued ahead of
 *    it at one starved level; the wait-bound timer and the job/throttle
 *    bounds are unchanged (their waiters are released into their level).
 *  - Allotment composes: a job's tokens still cap its threads (job_enqueue
 *    runs before the level insert), and released throttle and job waiters
 *    rejoin their service's level (prio_svc_level, read once per release
 *    pass; the release loops are global subprograms, verified once, which
 *    is what made this fit the verifier's budget).
 *  - Cost for unregistered tasks: while no level but normal was ever used
 *    (prio_seen) and no --priority-cgroup is set, one global read. With
 *    --priority-cgroup: the task's cgroup v2 id (four loads) and one hash
 *    lookup per enqueue; it is read at every enqueue instead of cached, so a
 *    cgroup move needs no hook (ops.cgroup_move exists only with
 *    CONFIG_EXT_GROUP_SCHED). The cgroup is matched exactly, not its
 *    descendants. Once a level other than normal is in use, every task gets
 *    a small task-storage entry for its enqueue time (the wait figures).
 *  - Measured (tailctl_stats.prio_*): level switches, guard dispatches,
 *    inversions (a run that started while a higher level had work, guard
 *    and per-CPU kthreads excepted: what promptness rules out), violations
 *    (a run that ended while a higher level had work, with the time it ran
 *    after that work was first waiting), preemption kicks, runs and the
 *    longest enqueue-to-running wait per level.
 */

/* Number of --priority-cgroup entries (set by user space before load). */
const volatile u32 nr_prio_cgroups;
/* A lower level waiting longer than this gets one dispatch. */
const volatile u64 prio_guard_ns = 100000000ULL;

/* cgroup v2 id (the directory's inode) -> level, written by user space before attach. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, u64);
	__type(value, u32);
} prio_cgroups SEC(".maps");

/* Set (for good) once a task at a level other than normal was seen. */
static u32 prio_seen;
/* Per level: since when it has had work no CPU served (0: none or served). */
static u64 prio_since[TAILCTL_PRIO_LEVELS];

/* Per-task: when it was last queued (0: not through ops.enqueue). */
struct prio_task {
	u64 enq_at;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct prio_task);
} prio_tasks SEC(".maps");

/* What each CPU runs: its level (PRIO_NONE: nothing of ours), from when, whether a guard pick. */
#define PRIO_NONE 0xff
struct prio_cpu {
	u32 level;
	u32 guard;
	/* Set by ops.dispatch for the task it moves: the next run is a guard run. */
	u32 guard_pick;
	u32 last_level;
	u64 run_at;
	/* When this CPU last chose what to run (ops.dispatch, or a direct dispatch to it). */
	u64 decided_at;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct prio_cpu);
} prio_cpus SEC(".maps");

static __always_inline struct prio_cpu *prio_cpu_of(s32 cpu)
{
	u32 key = cpu;

	return bpf_map_lookup_elem(&prio_cpus, &key);
}

static __always_inline u64 prio_dsq(u32 level)
{
	level &= TAILCTL_PRIO_LEVELS - 1;
	return level == TAILCTL_PRIO_NORMAL ? TAILCTL_SHARED_DSQ : TAILCTL_PRIO_DSQ_BASE + level;
}

static __always_inline bool prio_active(void)
{
	return nr_prio_cgroups || READ_ONCE(prio_seen);
}

/*
 * The level of a task bound to service slot @svc (-1: not a registered
 * worker) in cgroup @cgid (0: not looked up). services.priority is
 * daemon-written, clamped all the same. Global subprogram: verified once.
 */
__noinline int prio_level_of(int svc, u64 cgid)
{
	u32 level = TAILCTL_PRIO_NORMAL, key;

	if (svc >= 0 && svc < TAILCTL_MAX_SERVICES) {
		struct tailctl_service *s;

		key = svc;
		s = bpf_map_lookup_elem(&services, &key);
		if (s && s->pid)
			level = READ_ONCE(s->priority);
	} else if (cgid) {
		u32 *l = bpf_map_lookup_elem(&prio_cgroups, &cgid);

		if (l)
			level = *l;
	}
	if (level >= TAILCTL_PRIO_LEVELS)
		level = TAILCTL_PRIO_NORMAL;
	if (level != TAILCTL_PRIO_NORMAL && !READ_ONCE(prio_seen))
		WRITE_ONCE(prio_seen, 1);
	return level;
}

/* @p's level; @tctx is its task_ctx if it is a registered worker. */
static __always_inline u32 prio_level(struct task_struct *p, struct task_ctx *tctx)
{
	int svc = tctx && tctx->svc >= 0 ? tctx->svc : -1;

	return prio_level_of(svc, svc < 0 && nr_prio_cgroups ? task_cgroup_id(p) : 0) &
	       (TAILCTL_PRIO_LEVELS - 1);
}

/* Level @level has a task nobody served yet: start its guard clock (the first one counts). */
static __always_inline void prio_note_waiting(u32 level, u64 now)
{
	level &= TAILCTL_PRIO_LEVELS - 1;
	if (!READ_ONCE(prio_since[level]))
		__sync_val_compare_and_swap(&prio_since[level], 0, now);
}

/*
 * The highest level above @above (-1: any) with a queued task, or -1. A
 * global subprogram (verified once, not at every call site): it is called
 * from enqueue, dispatch, running, stopping, tick.
 */
__noinline int prio_top_queued(int above)
{
	int l;

	for (l = TAILCTL_PRIO_LEVELS - 1; l >= 0; l--) {
		if (l <= above)
			break;
		if (l == TAILCTL_PRIO_NORMAL ? normal_nr_queued() > 0
					     : scx_bpf_dsq_nr_queued(TAILCTL_PRIO_DSQ_BASE + l) > 0)
			return l;
	}
	return -1;
}

/* Any task queued at any level (what "the shared queue is empty" means with levels). */
static __always_inline bool prio_any_queued(void)
{
	if (!prio_active())
		return normal_nr_queued() > 0;
	return prio_top_queued(-1) >= 0;
}

/* ops.enqueue: remember when @p was queued (only once levels are in use). */
static __always_inline void prio_stamp_enqueue(struct task_struct *p, u64 now)
{
	struct prio_task *pt;

	if (!prio_active())
		return;
	pt = bpf_task_storage_get(&prio_tasks, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (pt)
		pt->enq_at = now;
}

/*
 * A task at @level was queued and no CPU is idle: preempt the CPU running
 * the lowest level below it (guard runs are left alone). The kicked CPU's
 * ops.dispatch serves the highest level it may run, so a task it may not
 * run costs that CPU one dispatch, not a wrong choice. Global subprogram.
 */
__noinline int prio_preempt_lower(u32 level)
{
	u32 n = scx_bpf_nr_cpu_ids(), cpu, best_level = level;
	s32 best = -1;

	if (!level || level >= TAILCTL_PRIO_LEVELS)
		return 0;
	if (n > MAX_CPUS)
		n = MAX_CPUS;
	bpf_for(cpu, 0, n) {
		u32 key = cpu;
		struct prio_cpu *pc = bpf_map_lookup_elem(&prio_cpus, &key);

		if (!pc || pc->guard || pc->level >= best_level)
			continue;
		best = cpu;
		best_level = pc->level;
	}
	if (best < 0)
		return 0;
	scx_bpf_kick_cpu(best, SCX_KICK_PREEMPT);
	STAT_INC(prio_preempt_kicks);
	return 1;
}

/* A task was put straight on @cpu's local DSQ: that CPU's choice was made now. */
static __always_inline void prio_decided(s32 cpu)
{
	struct prio_cpu *pc = prio_cpu_of(cpu);

	if (pc)
		pc->decided_at = bpf_ktime_get_ns();
}

/* Insert @p, headed for @cpu, into level @level's DSQ by vtime (ops.enqueue's last step). */
static __always_inline void prio_insert(struct task_struct *p, u32 level, u64 vtime, u64 enq_flags, s32 cpu)
{
	u64 dsq = level == TAILCTL_PRIO_NORMAL ? normal_dsq(p, cpu) : prio_dsq(level);

	if (prio_active()) {
		u64 now = bpf_ktime_get_ns();

		prio_stamp_enqueue(p, now);
		prio_note_waiting(level, now);
	}
	scx_bpf_dsq_insert_vtime(p, dsq, slice_ns, vtime, enq_flags);
}

/*
 * The DSQ a released throttle or job waiter of service slot @svc goes to: its
 * service's level (a waiter whose binding went meanwhile runs this once at
 * it). Global subprogram: called inside the release iterators.
 */
__noinline int prio_svc_level(u32 svc)
{
	struct tailctl_service *s;
	u32 level;

	if (svc >= TAILCTL_MAX_SERVICES)
		return TAILCTL_PRIO_NORMAL;
	s = bpf_map_lookup_elem(&services, &svc);
	if (!s || !s->pid)
		return TAILCTL_PRIO_NORMAL;
	level = READ_ONCE(s->priority);
	if (level >= TAILCTL_PRIO_LEVELS)
		return TAILCTL_PRIO_NORMAL;
	if (level != TAILCTL_PRIO_NORMAL) {
		if (!READ_ONCE(prio_seen))
			WRITE_ONCE(prio_seen, 1);
		prio_note_waiting(level, bpf_ktime_get_ns());
	}
	return level;
}

/*
 * ops.dispatch: a starving lower level first (one dispatch per guard
 * period), else the highest level with a task this CPU may run. Returns 1
 * if a task was moved to this CPU. Global subprogram (verified once).
 */
__noinline int prio_dispatch_levels(s32 cpu)
{
	u32 key = cpu;
	struct prio_cpu *pc;
	int i, l, top = -1, starving = -1;
	u64 now, oldest = 0;

	/* Levels unused: the shared queue, without a clock read or a look-up. */
	if (!prio_active())
		return normal_move_to_local(cpu);
	pc = bpf_map_lookup_elem(&prio_cpus, &key);
	now = bpf_ktime_get_ns();
	if (pc)
		pc->decided_at = now;
	/*
	 * From the highest level down. An open-coded iterator, not a counted
	 * loop: the verifier walked the counted one once per level for every
	 * combination of top and starving it could reach; the iterator's
	 * passes converge (6.18, two LLCs: tailctl_dispatch's walk went from
	 * 93670 to 74902 instructions).
	 */
	bpf_for(i, 0, TAILCTL_PRIO_LEVELS) {
		u64 since;

		l = TAILCTL_PRIO_LEVELS - 1 - i;
		since = prio_since[l & (TAILCTL_PRIO_LEVELS - 1)];
		if (l == TAILCTL_PRIO_NORMAL ? normal_nr_queued() <= 0
					     : scx_bpf_dsq_nr_queued(TAILCTL_PRIO_DSQ_BASE + l) <= 0) {
			if (since)
				prio_since[l & (TAILCTL_PRIO_LEVELS - 1)] = 0;
			continue;
		}
		if (top < 0) {
			top = l;
			continue;
		}
		if (since && now > since && now - since > prio_guard_ns && (!oldest || since < oldest)) {
			oldest = since;
			starving = l;
		}
	}
	if (top < 0)
		return 0;
	/* One CPU wins the starving level's turn; the clock restarts with it. */
	if (starving >= 0 && starving < TAILCTL_PRIO_LEVELS &&
	    __sync_val_compare_and_swap(&prio_since[starving], oldest, now) == oldest &&
	    (starving == TAILCTL_PRIO_NORMAL ? normal_move_to_local(cpu)
					     : scx_bpf_dsq_move_to_local(TAILCTL_PRIO_DSQ_BASE + starving, 0))) {
		if (pc)
			pc->guard_pick = 1;
		STAT_INC(prio_guard_dispatches);
		return 1;
	}
	for (l = TAILCTL_PRIO_LEVELS - 1; l >= 0; l--) {
		bool normal = l == TAILCTL_PRIO_NORMAL;
		u64 dsq = TAILCTL_PRIO_DSQ_BASE + l;

		if (l > top)
			continue;
		if (normal ? normal_move_to_local(cpu) : scx_bpf_dsq_move_to_local(dsq, 0)) {
			/* Served: the level's guard clock restarts (or stops, if it is empty now). */
			prio_since[l] = (normal ? normal_nr_queued() : scx_bpf_dsq_nr_queued(dsq)) > 0 ? now : 0;
			return 1;
		}
	}
	return 0;
}

static __always_inline bool prio_dispatch(s32 cpu)
{
	return prio_dispatch_levels(cpu) > 0;
}

/*
 * Was a task of @level that @cpu may run queued at or before @decided (when
 * @cpu chose what to run)? Looks at the first 16 tasks of the level's queue
 * (its stamps come from ops.enqueue; a released throttle waiter has none and
 * counts as not waiting: the test errs towards "raced"). Global subprogram.
 */
__noinline int prio_waited_before(u32 level, s32 cpu, u64 decided)
{
	struct task_struct *p;
	u64 dsq;
	int n = 0;

	if (level >= TAILCTL_PRIO_LEVELS || cpu < 0)
		return 0;
	/* The normal level with LLC queues: this CPU's own LLC's queue only (a statistic). */
	if (level != TAILCTL_PRIO_NORMAL)
		dsq = TAILCTL_PRIO_DSQ_BASE + level;
	else
		dsq = llc_on() ? llc_cpu_dsq(cpu, 0) : TAILCTL_SHARED_DSQ;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		struct prio_task *pt;

		if (++n > 16)
			break;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		pt = bpf_task_storage_get(&prio_tasks, p, 0, 0);
		if (pt && pt->enq_at && pt->enq_at <= decided)
			return 1;
	}
	return 0;
}

/*
 * ops.running of a task at @level on @cpu that waited @waited ns since
 * ops.enqueue (~0: unknown): the CPU's level, level switches, inversions, the
 * level's longest wait. Global subprogram.
 */
__noinline int prio_ran(s32 cpu, u32 level, u32 kthread, u64 waited)
{
	u32 key = cpu;
	struct prio_cpu *pc = bpf_map_lookup_elem(&prio_cpus, &key);
	struct tailctl_stats *st;
	u32 guard;

	if (!pc || level >= TAILCTL_PRIO_LEVELS)
		return 0;
	guard = pc->guard_pick;
	pc->guard_pick = 0;
	pc->guard = guard;
	pc->level = level;
	pc->run_at = bpf_ktime_get_ns();
	st = stats_cpu();
	if (!st)
		return 0;
	if (pc->last_level != level) {
		if (pc->last_level < TAILCTL_PRIO_LEVELS)
			st->prio_switches++;
		pc->last_level = level;
	}
	st->prio_runs[level]++;
	/*
	 * A higher-level task this CPU may run that was already queued when
	 * the CPU chose is an inversion; one queued after that is a race no
	 * choice could avoid (under single-threaded TCG a vCPU may stall for
	 * milliseconds between choosing and running).
	 */
	if (!guard && !kthread && prio_top_queued(level) >= 0) {
		u32 l;
		bool waited = false;

		bpf_for(l, level + 1, TAILCTL_PRIO_LEVELS) {
			if (prio_waited_before(l, cpu, pc->decided_at)) {
				waited = true;
				break;
			}
		}
		if (waited)
			st->prio_inversions++;
		else
			st->prio_inversions_raced++;
	}
	if (waited != ~0ULL && waited > st->prio_max_wait_ns[level])
		st->prio_max_wait_ns[level] = waited;
	return 0;
}

static __always_inline void prio_running(struct task_struct *p, struct task_ctx *tctx)
{
	struct prio_task *pt;
	u64 waited = ~0ULL, now;

	if (!prio_active())
		return;
	pt = bpf_task_storage_get(&prio_tasks, p, 0, 0);
	if (pt && pt->enq_at) {
		now = bpf_ktime_get_ns();
		waited = now > pt->enq_at ? now - pt->enq_at : 0;
		pt->enq_at = 0;
	}
	prio_ran(bpf_get_smp_processor_id(), prio_level(p, tctx), is_pcpu_kthread(p), waited);
}

/*
 * ops.stopping on @cpu: a run that ended while a higher level had work is a
 * promptness violation (guard runs and per-CPU kthreads excepted). Global
 * subprogram.
 */
__noinline int prio_stopped(s32 cpu, u32 kthread)
{
	u32 key = cpu;
	struct prio_cpu *pc = bpf_map_lookup_elem(&prio_cpus, &key);
	struct tailctl_stats *st;
	u64 now, since, ran;
	int higher;

	if (!pc || pc->level >= TAILCTL_PRIO_LEVELS)
		return 0;
	higher = pc->guard || kthread ? -1 : prio_top_queued(pc->level);
	st = stats_cpu();
	if (higher >= 0 && higher < TAILCTL_PRIO_LEVELS && st) {
		now = bpf_ktime_get_ns();
		since = READ_ONCE(prio_since[higher]);
		ran = now > pc->run_at ? now - pc->run_at : 0;
		if (since && now > since && now - since < ran)
			ran = now - since;
		st->prio_violations++;
		st->prio_violation_ns += ran;
	}
	pc->level = PRIO_NONE;
	pc->guard = 0;
	return 0;
}

static __always_inline void prio_stopping(struct task_struct *p)
{
	if (prio_active())
		prio_stopped(bpf_get_smp_processor_id(), is_pcpu_kthread(p));
}

/* ops.init: no CPU runs anything of ours yet. */
static __always_inline void prio_init_cpus(void)
{
	u32 cpu, n = scx_bpf_nr_cpu_ids();

	if (n > MAX_CPUS)
		n = MAX_CPUS;
	bpf_for(cpu, 0, n) {
		struct prio_cpu *pc = prio_cpu_of(cpu);

		if (pc) {
			pc->level = PRIO_NONE;
			pc->last_level = PRIO_NONE;
		}
	}
}

/* ---- end of priority levels ---------------------------------------------- */

/* ---- per-job core allotments (issue 12) --------------------------------- */

/*
 * A job is a registered service slot, or a cgroup job's (--job, see "cgroup
 * jobs": the tasks of one cgroup v2, bound without a region). The daemon's controller decides each
 * job's allotment (services.allot, 0: none) and applies it through the
 * apply_allot syscall program below; the kernel makes at most `allot` of the
 * job's threads run at once, with the serialization cap's token machinery
 * generalised from requests to jobs:
 *
 *  - A job thread may be queued for a CPU only holding one of its job's
 *    `allot` tokens (claimed at enqueue, given back at stopping). Without one
 *    it waits in its job's queue (DSQ TAILCTL_JOB_DSQ_BASE + slot); dispatch
 *    hands freed tokens to waiters (mid-task workers first by default,
 *    --job-queue fifo for arrival order; see job_queue_key) and moves them
 *    to the shared vtime queue, where they compete like any task. A holder
 *    whose job has waiters gets no slice extension (rotation).
 *  - Work conserving: a CPU that finds nothing in the shared queue (no
 *    unregistered task, no job thread within its allotment) and whose
 *    previous task is not kept borrows a waiter: scx_bpf_dsq_move_to_local()
 *    from a job queue, which only takes a task this CPU may run (pinned and
 *    migration-disabled tasks are skipped, never moved to another CPU's local
 *    DSQ). A thread whose CPU would otherwise go idle (SCX_ENQ_LAST) keeps it
 *    the same way, on its own CPU. A borrower runs one slice at most: a task
 *    queued in the shared queue with no idle CPU preempts a borrowing CPU it
 *    may run on (reclaim), and a borrower's tick gives the CPU up as soon as
 *    the shared queue has work, so a borrowed CPU comes back within one tick.
 *  - Shrinking: apply_allot kicks as many of the job's CPUs as run threads
 *    over the new allotment; a kicked thread gives its token back at
 *    stopping and finds none at enqueue. A token holder that starts running
 *    while its job holds more tokens than its allotment gives its token up
 *    (ops.running and ops.tick), so the excess never outlives one tick.
 *  - Enforcement latency: apply_allot records the decision's time (stamped
 *    by the daemon); the first time the job's non-borrowing runners are at
 *    or under the new allotment (at apply time, or when one stops) the
 *    difference goes into the stats histogram and the job's entry.
 *  - Liveness: a waiter older than max_throttle_wait_ns runs one slice
 *    regardless (counted as allot_overdue); the wait-bound timer kicks its
 *    CPU when no CPU dispatches. So a job thread waits at most the bound
 *    plus one timer period plus one slice, far below the 30 s watchdog.
 *  - Per-job CPU time (job_acct.cpu_ns) is the threads' sum_exec_runtime
 *    deltas, charged in running/tick/stopping like request time.
 *  - Within the allotment, requests (--request-shares): every apply_allot (each quantum) shares
 *    the job's allotment among its active requests (req_share_pass: a
 *    serialized request 1, the others an equal share of the rest; none, 0,
 *    when that is under one core), published as each slot's kernel_alloc and enforced as the request
 *    entry's alloc with the serialization cap's tokens; a request first seen
 *    between two passes starts with the job's last share (job_acct.req_share),
 *    and a holder whose share shrank under it gives its token back at its
 *    next tick. Serialization always wins over a share (see req_set_share).
 */

#define JOB_RESETTING (~0ULL)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TAILCTL_MAX_SERVICES);
	__type(key, u32);
	__type(value, struct tailctl_job_acct);
} job_acct SEC(".maps");

/* The per-request share of job @svc's registration @owner now (0: none; see req_share_pass). */
static __always_inline u32 job_req_share(u32 svc, u64 owner)
{
	struct tailctl_job_acct *j;

	if (svc >= TAILCTL_MAX_SERVICES)
		return 0;
	j = bpf_map_lookup_elem(&job_acct, &svc);
	if (!j || READ_ONCE(j->owner) != owner)
		return 0;
	return READ_ONCE(j->req_share);
}

/*
 * An allotment controller runs (--allot other than off): only then are
 * allotments applied (apply_allot), so only then are there borrowers to
 * reclaim and excess holders to kick through job_cpus, and tokens to check.
 */
const volatile bool allot_controller;

/*
 * Which job (service slot + 1, 0: none) each CPU runs now, and whether on a
 * borrowed CPU; kept only with a controller (allot_controller).
 */
struct job_cpu {
	u32 svc1;
	u32 borrowed;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct job_cpu);
} job_cpus SEC(".maps");

/* CPUs running a borrower now (reclaim scans job_cpus only when this is non-zero). */
static u32 nr_borrowing;
/* Round-robin start for borrowing, so no job's queue is always looked at first. */
static u32 borrow_rr;
/* Set while a CPU releases a job's waiters. */
static u32 job_releasing[TAILCTL_MAX_SERVICES];

/*
 * Slot @svc's job entry is left over from an earlier registration: reset it
 * for registration @owner if that is who holds the slot now. Returns 1 if
 * the entry is @owner's. A global subprogram, verified once on its own: the
 * reset path, inlined at every job_entry, multiplied the verifier's states
 * in job_release_waiters' loop (over a million instructions with an
 * allotment controller: tools/verifier-hotspots.py).
 */
__noinline int job_entry_adopt(u32 svc, u64 owner)
{
	struct tailctl_job_acct *j;
	u32 key = svc;
	u64 old;

	if (svc >= TAILCTL_MAX_SERVICES || !owner)
		return 0;
	j = bpf_map_lookup_elem(&job_acct, &key);
	if (!j)
		return 0;
	old = READ_ONCE(j->owner);
	if (old == owner)
		return 1;
	if (old == JOB_RESETTING || service_owner(key) != owner)
		return 0;
	if (__sync_val_compare_and_swap(&j->owner, old, JOB_RESETTING) != old)
		return 0;
	__builtin_memset((void *)j + sizeof(j->owner), 0, sizeof(*j) - sizeof(j->owner));
	__sync_lock_test_and_set(&j->owner, owner);
	return 1;
}

/* The job entry of registration @owner in slot @svc; reset when the slot holds a new registration. */
static __always_inline struct tailctl_job_acct *job_entry(s32 svc, u64 owner)
{
	struct tailctl_job_acct *j;
	u32 key = svc;

	if (svc < 0 || svc >= TAILCTL_MAX_SERVICES || !owner)
		return NULL;
	j = bpf_map_lookup_elem(&job_acct, &key);
	if (!j)
		return NULL;
	if (READ_ONCE(j->owner) == owner || job_entry_adopt(key, owner))
		return j;
	return NULL;
}

enum job_count {
	JOB_COUNT_WAITING,
	JOB_COUNT_HOLDERS,
};

/*
 * Decrement job @svc's (registration @owner) count @which, counting a leak
 * at @leak_site if it was already 0 (a site past TAILCTL_LEAK_SITES: not
 * counted). A global subprogram: dec_u32's loop, inlined into the loop of
 * job_release_waiters, was a second iterator inside it.
 */
__noinline int job_count_dec(u32 svc, u64 owner, u32 which, u32 leak_site)
{
	struct tailctl_job_acct *j = job_entry(svc, owner);

	if (!j)
		return 0;
	if (dec_u32(which == JOB_COUNT_WAITING ? &j->waiting : &j->holders))
		return 1;
	/* count_leak counts token_leaks for any site: not at all here. */
	if (leak_site < TAILCTL_LEAK_SITES)
		count_leak(leak_site);
	return 0;
}

/*
 * Take one of job @svc's (registration @owner) @allot holder slots (a CAS
 * loop). Returns 1 if taken. A global subprogram, for job_count_dec's reason.
 */
__noinline int job_holders_take(u32 svc, u64 owner, u32 allot)
{
	struct tailctl_job_acct *j = job_entry(svc, owner);
	u32 h, i;

	if (!j)
		return 0;
	bpf_for(i, 0, MAX_CPUS) {
		h = READ_ONCE(j->holders);
		if (h >= allot)
			return 0;
		if (__sync_val_compare_and_swap(&j->holders, h, h + 1) == h)
			return 1;
	}
	return 0;
}

/* The allotment of slot @svc now (0: none), clamped to the CPUs there are. */
static __always_inline u32 job_allot(s32 svc)
{
	struct tailctl_service *s;
	u32 key = svc, a, n;

	/*
	 * Allotments come only from a controller (apply_allot): without one
	 * this is 0, and the verifier drops the look-up (read-only data).
	 */
	if (!allot_controller || svc < 0 || svc >= TAILCTL_MAX_SERVICES)
		return 0;
	s = bpf_map_lookup_elem(&services, &key);
	if (!s)
		return 0;
	a = READ_ONCE(s->allot);
	if (!a)
		return 0;
	n = scx_bpf_nr_cpu_ids();
	return a > n ? n : a;
}

/* Take one of the job's tokens (one token per task). */
static __always_inline bool job_claim(struct task_ctx *tctx, struct tailctl_job_acct *j, u32 allot)
{
	s32 svc;
	u64 owner;

	if (tctx->job_token)
		return true;
	/* Fast refusal without the call: the job is at its allotment. */
	if (READ_ONCE(j->holders) >= allot)
		return false;
	/* Read once: a rebind between the take and a give-back must not move a slot between jobs. */
	svc = READ_ONCE(tctx->svc);
	owner = READ_ONCE(tctx->owner);
	if (!job_holders_take(svc, owner, allot))
		return false;
	/* Raced with another claim for this task: give the slot back (not a leak). */
	if (__sync_val_compare_and_swap(&tctx->job_token, 0, 1) != 0)
		job_count_dec(svc, owner, JOB_COUNT_HOLDERS, TAILCTL_LEAK_SITES);
	return true;
}

/* Give @tctx's job token back (to the registration it was taken from). */
static __always_inline void job_put(struct task_ctx *tctx)
{
	/* A plain read first (see put_token). */
	if (!READ_ONCE(tctx->job_token) || __sync_val_compare_and_swap(&tctx->job_token, 1, 0) != 1)
		return;
	job_count_dec(tctx->svc, tctx->owner, JOB_COUNT_HOLDERS, TAILCTL_LEAK_JOB_PUT);
}

/* Give a token back only while the job holds more than @allot: shed one over the allotment. */
static __always_inline bool job_shed(struct task_ctx *tctx, struct tailctl_job_acct *j, u32 allot)
{
	u32 h, i;

	bpf_for(i, 0, MAX_CPUS) {
		h = READ_ONCE(j->holders);
		if (h <= allot)
			return false;
		if (__sync_val_compare_and_swap(&j->holders, h, h - 1) == h) {
			if (__sync_val_compare_and_swap(&tctx->job_token, 1, 0) != 1)
				__sync_fetch_and_add(&j->holders, 1);
			return true;
		}
	}
	return false;
}

/* @tctx left its job queue: drop it from the wait count. */
static __always_inline bool job_leave_wait(struct task_ctx *tctx)
{
	/* A plain read first (see put_token). */
	if (!READ_ONCE(tctx->job_waiting) || __sync_val_compare_and_swap(&tctx->job_waiting, 1, 0) != 1)
		return false;
	job_count_dec(tctx->svc, tctx->owner, JOB_COUNT_WAITING, TAILCTL_LEAK_JOB_WAIT);
	return true;
}

static __always_inline void stat_max(u64 *field, u64 v)
{
	if (v > *field)
		*field = v;
}

static __always_inline u32 allot_lat_bucket(u64 lat)
{
	return lat < 10000 ? 0 : lat < 25000 ? 1 : lat < 50000 ? 2 : lat < 100000 ? 3 :
	       lat < 250000 ? 4 : lat < 1000000 ? 5 : lat < 10000000 ? 6 : 7;
}

/*
 * The job's non-borrowing runners are within @allot: close a pending
 * decision, recording its latency (@at_apply: from apply_allot itself).
 */
static __always_inline void job_check_enforced(struct tailctl_job_acct *j, u64 now, bool at_apply)
{
	struct tailctl_stats *st;
	u32 allot, b;
	u64 lat, at, applied;

	/* Nothing pending (every ops.stopping but the few after a decision): no more reads. */
	if (!READ_ONCE(j->pending))
		return;
	allot = READ_ONCE(j->allot);
	at = READ_ONCE(j->decided_at_ns);
	applied = READ_ONCE(j->applied_at_ns);
	if (allot && READ_ONCE(j->running) > allot)
		return;
	if (__sync_val_compare_and_swap(&j->pending, 1, 0) != 1)
		return;
	now = clock_or(now);
	lat = now > at ? now - at : 0;
	j->enforced_at_ns = now;
	j->lat_last_ns = lat;
	__sync_fetch_and_add(&j->lat_sum_ns, lat);
	__sync_fetch_and_add(&j->lat_count, 1);
	if (lat > j->lat_max_ns)
		j->lat_max_ns = lat;
	st = stats_cpu();
	if (!st)
		return;
	st->allot_enforced++;
	st->allot_lat_sum_ns += lat;
	stat_max(&st->allot_lat_max_ns, lat);
	b = allot_lat_bucket(lat);
	if (b < TAILCTL_ALLOT_LAT_BUCKETS)
		st->allot_lat_hist[b]++;
	if (at_apply) {
		st->allot_enforced_at_apply++;
		return;
	}
	b = allot_lat_bucket(now > applied ? now - applied : 0);
	if (b < TAILCTL_ALLOT_LAT_BUCKETS)
		st->allot_kick_lat_hist[b]++;
}

/*
 * Without an allotment controller (--allot off, the default) a job's CPU
 * counters feed only what operators read (`tailctl top`, maps dump), once a
 * second by default, and a tick has nothing to enforce: a job thread is
 * charged once this much of its CPU time has gathered (and at ops.stopping),
 * not at every tick, so a thread that runs a whole second without stopping
 * shows in a one-second reading within 5% (in a 0.5 s refresh within 10%).
 * With a controller every tick charges, as the work/steal split of its `u`
 * takes the worker's state at each charge. (Measured under --icount: at
 * 10 ms, every third 4 ms tick charged, about 40 instructions a tick on
 * average.)
 */
#define JOB_TICK_CHARGE_NS 50000000ULL

/* After a charge at CPU time @cpu_ns: when ops.tick charges next (every tick with a controller). */
static __always_inline void job_tick_next(struct task_ctx *tctx, u64 cpu_ns)
{
	tctx->job_tick_at = allot_controller ? 0 : cpu_ns + JOB_TICK_CHARGE_NS;
}

/* Charge the CPU time since the last charge point to the job (working or not, borrowed or not). */
static __always_inline void job_charge(struct task_struct *p, struct task_ctx *tctx, struct tailctl_job_acct *j,
				       struct tailctl_region *r)
{
	u64 now_cpu = p->se.sum_exec_runtime, delta;
	u32 w = tctx->worker;

	/*
	 * job_from_ns was set at this run's ops.running (both callers run only
	 * while job_on_cpu): 0 is a start like any other (a new thread's first
	 * run), not "unset", or a first run shorter than JOB_TICK_CHARGE_NS
	 * would never be charged.
	 */
	job_tick_next(tctx, now_cpu);
	if (now_cpu < tctx->job_from_ns) {
		tctx->job_from_ns = now_cpu;
		return;
	}
	delta = now_cpu - tctx->job_from_ns;
	tctx->job_from_ns = now_cpu;
	__sync_fetch_and_add(&j->cpu_ns, delta);
	if (tctx->job_borrowing)
		__sync_fetch_and_add(&j->borrowed_ns, delta);
	/* A cgroup job has no workers that steal: all its time is work. */
	if (tctx->cg) {
		__sync_fetch_and_add(&j->work_ns, delta);
		return;
	}
	/* The worker's state is a hint from the region (@r, the caller's look-up): it only splits the job's own time. */
	if (r && w < TAILCTL_MAX_WORKERS && READ_ONCE(r->workers[w].state) == TAILCTL_WORKER_WORKING)
		__sync_fetch_and_add(&j->work_ns, delta);
	else
		__sync_fetch_and_add(&j->steal_ns, delta);
}

static __always_inline void set_job_cpu(u32 svc1, u32 borrowed)
{
	u32 cpu = bpf_get_smp_processor_id();
	struct job_cpu *jc = bpf_map_lookup_elem(&job_cpus, &cpu);

	if (jc) {
		jc->svc1 = svc1;
		jc->borrowed = borrowed;
	}
}

/* Take the CPU off a thread at once (it goes back through enqueue). */
static __always_inline void job_preempt(struct task_struct *p, struct task_ctx *tctx)
{
	tctx->evict = true;
	p->scx.slice = 0;
	scx_bpf_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
	STAT_INC(allot_preemptions);
}

/* The job thread stops running (or is unbound): account, give back its token and its CPU. */
static __always_inline void job_stop(struct task_struct *p, struct task_ctx *tctx, u64 now,
				     struct tailctl_region *r)
{
	struct tailctl_job_acct *j = job_entry(tctx->svc, tctx->owner);

	if (p && j && tctx->job_on_cpu)
		job_charge(p, tctx, j, r);
	tctx->job_from_ns = 0;
	tctx->job_tick_at = ~0ULL;
	if (tctx->job_on_cpu) {
		tctx->job_on_cpu = false;
		if (allot_controller)
			set_job_cpu(0, 0);
		if (tctx->job_borrowing) {
			dec_u32(&nr_borrowing);
			if (j)
				dec_u32(&j->borrowing);
		} else if (j && allot_controller) {
			dec_u32(&j->running);
		}
	}
	tctx->job_borrowing = false;
	tctx->job_token_at_ns = 0;
	job_put(tctx);
	/* Only a controller's decision leaves one pending. */
	if (j && allot_controller)
		job_check_enforced(j, now, false);
}

/*
 * Mugging (issue 12, SAWS): a registered worker kept off the CPU for its
 * job's allotment is marked in its worker slot, so the job's running workers
 * take the tasks of its deque before stealing elsewhere (runtime/src/mug.rs);
 * the mark goes when it runs again. The region is the service's own: the
 * kernel only writes this field there, at a bounds-checked worker index, and
 * a service that rewrites it only changes the order of its own steals.
 * tctx->job_desched remembers the mark, so the running path looks the region
 * up only for a worker that was marked.
 */
static __always_inline void set_descheduled(struct task_ctx *tctx, bool on)
{
	struct tailctl_region *r;
	u32 w = tctx->worker;

	if (tctx->job_desched == on)
		return;
	tctx->job_desched = on;
	if (tctx->cg || w >= TAILCTL_MAX_WORKERS)
		return;
	r = service_region(tctx->svc);
	if (!r)
		return;
	WRITE_ONCE(r->workers[w].descheduled, on ? 1 : 0);
	if (on)
		STAT_INC(allot_descheds);
}

/* Everything a thread holds in its job goes back (unbind: rebinding, disable, exit). */
static __always_inline void job_unbind(struct task_ctx *tctx)
{
	struct tailctl_job_acct *j;

	if (tctx->svc < 0)
		return;
	job_stop(NULL, tctx, bpf_ktime_get_ns(), NULL);
	job_leave_wait(tctx);
	if (__sync_val_compare_and_swap(&tctx->job_runnable, 1, 0) == 1) {
		j = job_entry(tctx->svc, tctx->owner);
		if (j)
			dec_u32(&j->runnable);
	}
	tctx->job_lent = false;
	tctx->job_overdue = false;
	set_descheduled(tctx, false);
}

/* A borrowed CPU goes back: preempt one CPU running a borrower that @p may run on. */
static __always_inline void job_reclaim(struct task_struct *p)
{
	u32 n = scx_bpf_nr_cpu_ids(), cpu;

	if (!READ_ONCE(nr_borrowing))
		return;
	if (n > MAX_CPUS)
		n = MAX_CPUS;
	bpf_for(cpu, 0, n) {
		struct job_cpu *jc = bpf_map_lookup_elem(&job_cpus, &cpu);

		if (jc && jc->svc1 && jc->borrowed && bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
			STAT_INC(allot_reclaims);
			return;
		}
	}
}

/*
 * The job queue's order (--job-queue). working-first (the default): a waiter
 * whose worker slot says WORKING (kept off the CPU mid-task: the task it runs
 * is on its request's critical path, and no thief can mug it) goes before
 * searching and parked ones, each group in the order it started waiting;
 * tokens, and CPUs lent to the job, reach it first. A cgroup job's threads
 * (no region) keep the order they came in. fifo: the order they came in for
 * everyone. Measured against fifo in 17 paired job-arrival rounds
 * (workloads/results/jobs-6.18-s17-jobqueue): the longest token wait was
 * lower in every round (116-252 ms against 176-1005 ms); mean response not
 * distinguishable. The key is the wait's start, plus JOB_QUEUE_THIEF_SLICES
 * slices for a thread not on a task: it goes after mid-task workers that
 * started waiting up to that much later, not behind all of them for ever (a
 * lag past the wait bound held thieves of a busy capped service there,
 * ~1 s, and released them over the allotment as overdue). The key is not a
 * vtime: the insert overwrites p->scx.dsq_vtime with it, so the task's own
 * vtime is kept in tctx->job_vtime and put back wherever it leaves the job
 * queue (ops.running, or ops.enqueue when it is re-enqueued; a released
 * waiter joins the shared queue at vtime_now meanwhile).
 */
const volatile bool job_queue_fifo;
#define JOB_QUEUE_THIEF_SLICES 4

/* A task that waited in a working-first job queue gets its own vtime back. */
static __always_inline void job_vtime_back(struct task_struct *p, struct task_ctx *tctx)
{
	if (tctx && tctx->job_vtime_set) {
		p->scx.dsq_vtime = tctx->job_vtime;
		tctx->job_vtime_set = false;
	}
}

static __always_inline u64 job_queue_key(struct task_ctx *tctx)
{
	struct tailctl_region *r;
	u32 w = tctx->worker;

	if (tctx->cg || w >= TAILCTL_MAX_WORKERS)
		return tctx->job_wait_at_ns;
	r = service_region(tctx->svc);
	if (r && READ_ONCE(r->workers[w].state) == TAILCTL_WORKER_WORKING)
		return tctx->job_wait_at_ns;
	return tctx->job_wait_at_ns + JOB_QUEUE_THIEF_SLICES * slice_ns;
}

/*
 * ops.enqueue for a registered thread that passed its request's cap: true if
 * it was queued here (waiting for a job token, or kept on its CPU as a
 * borrower), false if it holds a token or its job has no allotment.
 */
static __always_inline bool job_enqueue(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags)
{
	struct tailctl_job_acct *j;
	bool same_wait;
	u32 allot;
	s32 cpu;

	/*
	 * Re-enqueued out of the job queue (affinity or nice change) or lent
	 * straight from it and given back by ops.cpu_release: its old place
	 * goes, but it is still the same wait, for the wait bound and the
	 * counts. (A re-nice or re-pin used to start a new wait, so a thread
	 * re-niced every few milliseconds never reached the bound; see the same
	 * in tailctl_enqueue for the throttle queues.)
	 */
	same_wait = job_leave_wait(tctx) && tctx->job_wait_at_ns;
	tctx->job_lent = false;
	/* (A thread let through at the wait bound, job_overdue, is owed its run: tailctl_enqueue does not call this.) */
	allot = job_allot(tctx->svc);
	if (!allot)
		return false;
	j = job_entry(tctx->svc, tctx->owner);
	if (!j)
		return false;
	if (tctx->job_token)
		return false;
	/* Others of the job are waiting for a token: queue behind them (rotation). */
	if (!READ_ONCE(j->waiting) && job_claim(tctx, j, allot)) {
		tctx->job_token_at_ns = bpf_ktime_get_ns();
		return false;
	}
	/*
	 * Its CPU would go idle otherwise (nothing in the shared queue) and the
	 * job has no free token a waiter could take: keep running here, lent.
	 */
	if ((enq_flags & SCX_ENQ_LAST) && !prio_any_queued() &&
	    READ_ONCE(j->holders) >= allot) {
		tctx->job_lent = true;
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		return true;
	}
	if (!same_wait) {
		tctx->job_wait_at_ns = bpf_ktime_get_ns();
		__sync_fetch_and_add(&j->waits, 1);
		STAT_INC(allot_waits);
	}
	tctx->job_waiting = 1;
	__sync_fetch_and_add(&j->waiting, 1);
	set_descheduled(tctx, true);
	if (job_queue_fifo) {
		scx_bpf_dsq_insert(p, TAILCTL_JOB_DSQ_BASE + tctx->svc, slice_ns, enq_flags);
	} else {
		tctx->job_vtime = p->scx.dsq_vtime;
		tctx->job_vtime_set = true;
		scx_bpf_dsq_insert_vtime(p, TAILCTL_JOB_DSQ_BASE + tctx->svc, slice_ns,
					 job_queue_key(tctx), enq_flags);
	}
	waiters_set(&job_waiters_mask, tctx->svc);
	/* Work conserving: an idle CPU borrows it; its own CPU looks again if it was the last task. */
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0)
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	else if (enq_flags & SCX_ENQ_LAST)
		scx_bpf_kick_cpu(scx_bpf_task_cpu(p), 0);
	return true;
}

/*
 * A waiter let through at its wait bound (overdue) goes to the head of a
 * CPU's local queue, which preempts what runs there (SCX_ENQ_PREEMPT): in
 * the fair queue it waited behind every task whose vtime lagged its own,
 * e.g. its own token holder's whole slice (`waitrenice`, pinned), or, with
 * every CPU busy and 1 s slices, one or two such slices after its release
 * (`waitunpinned`: 1.1-2.0 s against a 100 ms bound, session 22).
 *
 *  - Pinned (one allowed CPU): its own CPU. Its own runqueue's local queue
 *    is never refused (the kernel checks allowed CPUs and migration-disabled
 *    tasks only for another CPU's, kernel/sched/ext.c
 *    move_task_between_dsqs).
 *  - Unpinned: the CPU releasing it (it is in ops.dispatch, so nothing is
 *    preempted; tailctl_dispatch then stops, see there), else its own CPU.
 *    The releasing CPU is another CPU's local queue for the task, which the
 *    kernel refuses with scx_error() (an ejection) for a CPU the task may
 *    not run on or a migration-disabled task, so both are checked first;
 *    the mask cannot change between the check and the move (an affinity
 *    change dequeues the task, and the move then fails: the iterator's
 *    sequence). Its own CPU is skipped if it runs an RT or deadline task:
 *    nothing there would run it, and ops.cpu_release, which sends a local
 *    queue back through ops.enqueue (7.x only), runs only when such a task
 *    takes the CPU from one of ours, not from the idle task. (A flag set
 *    by ops.cpu_release missed exactly that case, found in review.)
 *  - Unpinned and ahead of the fair frontier in vtime (vtime_now): the fair
 *    queue. Its earlier runs, overdue ones included, already gave it its
 *    share. (A pinned one is not checked: its CPU is the only one it has.)
 *  - Under priority levels (prio_active): only if no higher level has a
 *    task queued and the CPU chosen does not run one; else its own level's
 *    queue, as before, so a low-level service's escapes from its cap do not
 *    jump higher levels.
 *
 * At most one such run per CPU per OVERDUE_LOCAL_GAP_NS, whatever the number
 * of threads (a service pinning all its workers to one victim CPU gets at
 * most a quarter of it this way, in runs of at most the default slice), and
 * only into an empty local queue; the rest wait for a later release
 * (overdue_defers), then go to the fair queue (counted in overdue_fair).
 * One that comes back through ops.enqueue before it ran (its CPU taken by a
 * higher class) tries another CPU's head (tailctl_enqueue,
 * overdue_head_lost). Returns the CPU, -1 (none free), or OVERDUE_AHEAD.
 *
 * Measured (`waitunpinned`, 6.18): with only the releasing CPU, a waiter
 * ahead of the frontier jumping it too, the longest overdue wait stayed
 * 1.1 s in two runs of three (session 22). The token rotates, so the
 * waiter is often the holder that just ran a whole 1 s slice: 63 of 199
 * overdue waiters were ahead of the frontier in one run. Those are the
 * ones that waited a second or more, as a hog that just ran its slice
 * does; their waits are kept apart (max_overdue_ahead_wait_ns).
 */
#define OVERDUE_LOCAL_GAP_NS (4 * TAILCTL_SLICE_NS_DEFAULT)
/* overdue_local_cpu: unpinned and ahead of the fair frontier (the fair queue, counted in overdue_ahead). */
#define OVERDUE_AHEAD (-2)
#ifndef MAX_RT_PRIO
#define MAX_RT_PRIO 100
#endif
static u64 overdue_local_at[MAX_CPUS];

/* An RT (or deadline, stop) task runs on @cpu: its ops.dispatch, and its local queue, wait until it lets go. */
static __always_inline bool rt_holds(s32 cpu)
{
	struct task_struct *curr = __COMPAT_scx_bpf_cpu_curr(cpu);

	return curr && curr->prio < MAX_RT_PRIO;
}
/* An overdue waiter was sent to this CPU's local queue (see tailctl_dispatch's extension). */
static u8 overdue_head_sent[MAX_CPUS];

/*
 * @cpu's slot for an overdue run of a level-@level waiter at @now, taken if
 * free: @cpu or -1. @pinned: the waiter's own and only CPU (no RT check:
 * it waits there whatever runs). A global subprogram, verified once on its
 * own: inlined into the release loop its branches multiplied the
 * verifier's states there, and ops.dispatch with an allotment controller
 * went past the verifier's million instructions.
 */
__noinline int overdue_local_slot(s32 cpu, u64 now, int pinned, u32 level)
{
	struct prio_cpu *pc;
	u64 at;

	if (cpu < 0 || cpu >= MAX_CPUS)
		return -1;
	/*
	 * Not for the CPU running this (its curr is still the task it leaves,
	 * which may be an RT task going: a waiting RT task would have been
	 * picked before ops.dispatch ran).
	 */
	if (!pinned && cpu != bpf_get_smp_processor_id() && rt_holds(cpu))
		return -1;
	if (prio_active()) {
		pc = prio_cpu_of(cpu);
		if (pc && pc->level != PRIO_NONE && pc->level > level)
			return -1;
	}
	/*
	 * Not behind another task in that local queue (one sent there earlier
	 * whose CPU has not switched yet: SCX_ENQ_PREEMPT puts this one at the
	 * head, ahead of it, and it would wait out this one's whole slice).
	 * Not for a pinned waiter: it has no other CPU, and refused it would
	 * wait out its deferral only to queue behind them all the same.
	 */
	if (!pinned && scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | cpu) > 0)
		return -1;
	/* now <= at: another CPU, whose clock read came later, took it. */
	at = READ_ONCE(overdue_local_at[cpu]);
	if (now <= at || now - at < OVERDUE_LOCAL_GAP_NS)
		return -1;
	/* Two CPUs releasing different services may pick the same CPU: one wins. */
	if (__sync_val_compare_and_swap(&overdue_local_at[cpu], at, now) != at)
		return -1;
	return cpu;
}

/* @vtime: the waiter's own vtime (a working-first job queue keys its dsq_vtime otherwise). */
static __always_inline s32 overdue_local_cpu(struct task_struct *p, u64 vtime, u64 now, u32 level)
{
	s32 own = scx_bpf_task_cpu(p), here;
	bool pinned = p->nr_cpus_allowed == 1;

	/* First: its wait is then kept apart whatever else holds it back. */
	if (!pinned && time_before(vtime_now, vtime))
		return OVERDUE_AHEAD;
	if (prio_active() && prio_top_queued(level) >= 0)
		return -1;
	if (pinned)
		return overdue_local_slot(own, now, 1, level);
	here = bpf_get_smp_processor_id();
	if (here != own && !is_migration_disabled(p) && bpf_cpumask_test_cpu(here, p->cpus_ptr) &&
	    overdue_local_slot(here, now, 0, level) >= 0)
		return here;
	return overdue_local_slot(own, now, 0, level);
}

/*
 * A waiter past its bound that found no CPU's head free (@ocpu -1: the CPUs
 * tried had such a run within OVERDUE_LOCAL_GAP_NS, an RT task or a higher
 * level) stays in its queue for the next release, by a CPU's dispatch or
 * the bound timer's kick (a quarter of the bound, at least 1 ms, on), for
 * up to another bound, at most OVERDUE_DEFER_MAX_NS: in the fair queue,
 * with long slices, it waited a second behind the tasks there (guest test
 * waitjob: several of a job's waiters past their bound at once, on one
 * CPU). After that it goes to the fair queue all the same, so no CPU's
 * state can hold it back for good, and a 10 s bound stays far from the
 * watchdog's 30 s.
 */
#define OVERDUE_DEFER_MAX_NS (250 * 1000 * 1000ULL)
static __always_inline bool overdue_defers(s32 ocpu, u64 waited)
{
	u64 extra = max_throttle_wait_ns < OVERDUE_DEFER_MAX_NS ? max_throttle_wait_ns : OVERDUE_DEFER_MAX_NS;

	if (ocpu != -1 || waited > max_throttle_wait_ns + extra)
		return false;
	STAT_INC(overdue_deferred);
	return true;
}

/* A head move's SCX_ENQ_PREEMPT needs a kick too (kernels before 6.18: release_move). */
const volatile bool head_move_kick;

/*
 * The move of a released waiter out of its queue (iterator @it): to the head
 * of CPU @ocpu's local queue (overdue_local_cpu), else to @to, its level's
 * vtime queue; where an @overdue one went is counted. True if it moved.
 */
static __always_inline bool release_move(struct bpf_iter_scx_dsq *it, struct task_struct *p, s32 ocpu,
					 bool overdue, u64 to)
{
	if (ocpu == OVERDUE_AHEAD)
		STAT_INC(overdue_ahead);
	else if (overdue && ocpu < 0)
		STAT_INC(overdue_fair);
	if (ocpu >= 0) {
		WRITE_ONCE(overdue_head_sent[(u32)ocpu & (MAX_CPUS - 1)], 1);
		if (!scx_bpf_dsq_move(it, p, SCX_DSQ_LOCAL_ON | ocpu, SCX_ENQ_PREEMPT))
			return false;
		/*
		 * Before 6.18 (head_move_kick), and a preempting kick of that
		 * CPU: on 6.16 the move's SCX_ENQ_PREEMPT alone left the CPU's
		 * task running out its slice (guest test waitjob: an overdue
		 * waiter ran 1.1-1.2 s after it began to wait, with 1 s slices;
		 * 6.18 and 7.3 were within the bound). Not on the kernels where
		 * the move preempts: the kick lands later (irq_work) and zeroes
		 * the slice of whatever runs then, which may be the waiter itself.
		 */
		if (head_move_kick && ocpu != (s32)bpf_get_smp_processor_id())
			scx_bpf_kick_cpu(ocpu, SCX_KICK_PREEMPT);
		return true;
	}
	return scx_bpf_dsq_move_vtime(it, p, to, 0);
}

/*
 * Release the waiters of job @svc that may go now (a free token, past the
 * wait bound, or no longer capped or bound) to the shared vtime queue; one
 * let through at the bound goes to the head of a CPU's local queue instead,
 * as a request's does (overdue_local_cpu). Returns 1 if a waiter was moved
 * to this CPU's local queue.
 */
/*
 * A global subprogram (not inlined): the verifier checks it once on its own
 * instead of once per call site inside ops.dispatch's loop, which kept the
 * scheduler's load time in a TCG guest near a minute.
 */
__noinline int job_release_waiters(u32 svc, u64 now)
{
	struct task_struct *p;
	u64 dsq = TAILCTL_JOB_DSQ_BASE + svc, to;
	s32 here = bpf_get_smp_processor_id();
	u32 allot, level;
	int mine = 0;

	if (svc >= TAILCTL_MAX_SERVICES)
		return 0;
	if (!scx_bpf_dsq_nr_queued(dsq)) {
		waiters_clear_if_empty(&job_waiters_mask, svc, dsq);
		return 0;
	}
	if (__sync_val_compare_and_swap(&job_releasing[svc], 0, 1) != 0)
		return 0;
	allot = job_allot(svc);
	/* Released waiters rejoin their service's priority level (normal: the shared queue). */
	level = prio_svc_level(svc);
	to = prio_dsq(level);
	bpf_for_each(scx_dsq, p, dsq, 0) {
		struct task_ctx *tctx = task_ctx(p);
		struct tailctl_job_acct *j = NULL;
		bool claimed = false, overdue = false, moved;
		u64 waited = 0, vtime;
		s32 cpu, ocpu = -1;

		if (tctx && tctx->svc == (s32)svc && allot && still_bound(p, tctx))
			j = job_entry(tctx->svc, tctx->owner);
		if (j) {
			struct tailctl_stats *st;

			/* A waiter queued on another CPU after this dispatch read the clock waited 0. */
			waited = now > tctx->job_wait_at_ns ? now - tctx->job_wait_at_ns : 0;
			if (!tctx->job_token && !(claimed = job_claim(tctx, j, allot))) {
				if (waited <= max_throttle_wait_ns)
					continue;
				overdue = true;
				/*
				 * Owed its run: to the head of a CPU's local queue,
				 * unless it is ahead of the fair frontier by its own
				 * vtime (kept in job_vtime while a working-first queue
				 * keys dsq_vtime), or it waits on.
				 */
				vtime = p->scx.dsq_vtime;
				if (!job_queue_fifo && tctx->job_vtime_set)
					vtime = READ_ONCE(tctx->job_vtime);
				ocpu = overdue_local_cpu(p, vtime, now, level);
				if (overdue_defers(ocpu, waited))
					continue;
			}
			if (claimed)
				tctx->job_token_at_ns = now;
			/* Counted before the move: a waiter dequeued under us waited all the same. */
			if (waited > j->max_wait_ns)
				j->max_wait_ns = waited;
			st = stats_cpu();
			if (st)
				stat_max(&st->allot_max_wait_ns, waited);
			if (overdue) {
				__sync_fetch_and_add(&j->overdue, 1);
				STAT_INC(allot_overdue);
			}
		}
		/*
		 * Before it leaves the wait: a re-enqueue racing the move finds it
		 * owed its run, and where it was sent (set first: found owed with
		 * a stale overdue_local, a pinned one would skip the CPU's slot).
		 */
		if (tctx) {
			if (overdue) {
				/* Sent to a CPU's head: read by a re-enqueue before it ran (tailctl_enqueue). */
				tctx->overdue_local = ocpu >= 0;
				tctx->overdue_ahead = ocpu == OVERDUE_AHEAD;
				tctx->overdue_lost = false;
			}
			tctx->job_overdue = overdue;
			job_leave_wait(tctx);
		}
		/*
		 * Out of a working-first queue its dsq_vtime is the queue's key,
		 * not a vtime: it joins the shared queue at vtime_now and gets its
		 * own vtime back at ops.running (or ops.enqueue, if this move
		 * fails). tctx->job_vtime is not read here: clang merges a load
		 * from it with the load from p into one instruction, which the
		 * verifier refuses.
		 */
		if (job_queue_fifo)
			scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER,
						   time_before(p->scx.dsq_vtime, vtime_now) ? vtime_now : p->scx.dsq_vtime);
		else
			scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, vtime_now);
		moved = release_move(BPF_FOR_EACH_ITER, p, ocpu, overdue, to);
		if (!moved) {
			/* Dequeued under us: it comes back through enqueue (an overdue one still owed its run). */
			if (tctx && claimed) {
				tctx->job_token_at_ns = 0;
				job_put(tctx);
			}
			continue;
		}
		if (ocpu >= 0) {
			STAT_INC(overdue_heads);
			if (ocpu == here)
				mine = 1;
			continue;
		}
		/* A waiter this CPU may not run goes to one that may (its own, if pinned). */
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	WRITE_ONCE(job_releasing[svc], 0);
	return mine;
}

/* A job thread over its job's allotment that must not have its slice extended. */
static __always_inline bool job_must_yield(struct task_struct *prev)
{
	struct task_ctx *ptctx = task_ctx(prev);
	struct tailctl_job_acct *j;
	u32 allot;

	if (!ptctx || ptctx->svc < 0 || !ptctx->job_on_cpu)
		return false;
	allot = job_allot(ptctx->svc);
	j = job_entry(ptctx->svc, ptctx->owner);
	if (!allot || !j)
		return false;
	/* Rotation: a holder whose job has waiters gives the CPU up at the end of its slice. */
	if (ptctx->job_token)
		return READ_ONCE(j->waiting) > 0 || READ_ONCE(j->holders) > allot;
	/* A borrower keeps the CPU while nothing else wants it (the shared queue is empty here). */
	return false;
}

/*
 * ops.dispatch found nothing in the shared queue: returns true when it
 * handled the CPU (the previous task must give it up, or a waiter was lent
 * this CPU), false to let the previous task's slice be extended.
 */
static __always_inline bool job_dispatch_tail(s32 cpu, struct task_struct *prev)
{
	u32 i, start;

	/* The previous task stays runnable: it keeps the CPU unless it must rotate out (then no extension). */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED))
		return job_must_yield(prev);
	/* Lend this CPU to a waiter of some job (only one this CPU may run: pinned tasks stay home). */
	if (!READ_ONCE(job_waiters_mask))
		return false;
	start = __sync_fetch_and_add(&borrow_rr, 1);
	bpf_for(i, 0, TAILCTL_MAX_SERVICES) {
		u32 svc = (start + i) % TAILCTL_MAX_SERVICES;

		if (!(READ_ONCE(job_waiters_mask) & (1u << svc)) ||
		    !scx_bpf_dsq_nr_queued(TAILCTL_JOB_DSQ_BASE + svc))
			continue;
		if (scx_bpf_dsq_move_to_local(TAILCTL_JOB_DSQ_BASE + svc, 0))
			return true;
	}
	return false;
}

/* ops.running for a job thread: claim, lend, shed or send back; start charging. */
static __always_inline void job_running(struct task_struct *p, struct task_ctx *tctx)
{
	struct tailctl_job_acct *j = job_entry(tctx->svc, tctx->owner);
	u32 allot = job_allot(tctx->svc);
	bool lent, keep = tctx->keep_wait, was_overdue = tctx->job_overdue;

	tctx->keep_wait = false;
	tctx->job_from_ns = p->se.sum_exec_runtime;
	/*
	 * Let through at its job's wait bound: its wait (from its job queue)
	 * ends here, and its run is owed no more (cleared before the return
	 * below: a job entry being reset would leave it owed for good).
	 */
	if (was_overdue) {
		note_overdue_wait(tctx, tctx->job_wait_at_ns);
		tctx->job_overdue = false;
	}
	/* A token holder's wait for a CPU: its allotted core-time that others used. */
	if (tctx->job_token_at_ns) {
		u64 now = bpf_ktime_get_ns(), at = tctx->job_token_at_ns;

		tctx->job_token_at_ns = 0;
		/*
		 * Bounded by the wait bound: a stamp a racing release left behind
		 * (see job_release_waiters) cannot add more than that.
		 */
		if (j && tctx->job_token && now > at)
			__sync_fetch_and_add(&j->token_wait_ns,
					     now - at < max_throttle_wait_ns ? now - at : max_throttle_wait_ns);
	}
	if (!j) {
		set_descheduled(tctx, false);
		return;
	}
	/* Still marked waiting: taken straight from its job queue by an idle CPU, i.e. lent. */
	/*
	 * A waiter its request let through past the wait bound runs this slice
	 * regardless, as a borrower; so does one released with a token after
	 * round trips through both caps that add up to more than the bound.
	 */
	lent = job_leave_wait(tctx) || tctx->job_lent || was_overdue || tctx->overdue;
	if (!lent && keep) {
		u64 now = bpf_ktime_get_ns(), at = tctx->throttled_at_ns;

		lent = now > at && now - at > max_throttle_wait_ns;
	}
	tctx->job_lent = false;
	tctx->job_overdue = false;
	tctx->job_borrowing = false;
	if (allot && !tctx->job_token && !job_claim(tctx, j, allot)) {
		if (!lent) {
			/* Queued before its allotment shrank, without a token: back it goes. */
			tctx->keep_wait = keep;
			job_preempt(p, tctx);
			return;
		}
		/* An escape from the allotment at its bound, kept short as a request's is (begin_request_at). */
		if (was_overdue && p->scx.slice > TAILCTL_SLICE_NS_DEFAULT)
			p->scx.slice = TAILCTL_SLICE_NS_DEFAULT;
		tctx->job_borrowing = true;
		__sync_fetch_and_add(&nr_borrowing, 1);
		__sync_fetch_and_add(&j->borrowing, 1);
		__sync_fetch_and_add(&j->borrows, 1);
		STAT_INC(allot_borrows);
	} else if (allot && tctx->job_token && READ_ONCE(j->holders) > allot && job_shed(tctx, j, allot)) {
		/* The allotment shrank while it held a token: one token over goes, with its CPU. */
		job_preempt(p, tctx);
		return;
	} else if (allot_controller) {
		/*
		 * Threads within the allotment on a CPU now: what an allotment is
		 * enforced against (apply_allot, job_check_enforced). Without a
		 * controller nothing is, and operators read the job's CPU time.
		 */
		__sync_fetch_and_add(&j->running, 1);
	}
	tctx->job_on_cpu = true;
	job_tick_next(tctx, tctx->job_from_ns);
	if (allot_controller)
		set_job_cpu(tctx->svc + 1, tctx->job_borrowing);
	set_descheduled(tctx, false);
}

/* ops.stopping for a job thread: its token and CPU go back; a waiter of its job may take them now. */
static __always_inline void job_stopping(struct task_struct *p, struct task_ctx *tctx, struct tailctl_region *r,
					 u64 now)
{
	job_stop(p, tctx, now, r);
	/* The bit first: with no allotment the queue stays empty and this costs no kfunc call. */
	if (waiters_may(READ_ONCE(job_waiters_mask), tctx->svc) &&
	    scx_bpf_dsq_nr_queued(TAILCTL_JOB_DSQ_BASE + tctx->svc))
		scx_bpf_kick_cpu(scx_bpf_task_cpu(p), 0);
}


/* ops.tick for a job thread: charge; give back a borrowed CPU someone wants; shed a token over the allotment. */
static __always_inline void job_tick(struct task_struct *p, struct task_ctx *tctx, struct tailctl_region *r)
{
	struct tailctl_job_acct *j;
	u32 allot;

	/* Not running as the job's (no entry at ops.running): no look-ups. Not yet due: see the caller. */
	if (!tctx->job_on_cpu)
		return;
	j = job_entry(tctx->svc, tctx->owner);
	if (!j)
		return;
	job_charge(p, tctx, j, r);
	/* No controller, no allotment: nothing to enforce (and no look-up for it). */
	if (!allot_controller)
		return;
	allot = job_allot(tctx->svc);
	if (!allot)
		return;
	if (tctx->job_borrowing) {
		/* A token freed up: it runs within the allotment from now on. */
		if (!READ_ONCE(j->waiting) && job_claim(tctx, j, allot)) {
			tctx->job_borrowing = false;
			dec_u32(&nr_borrowing);
			dec_u32(&j->borrowing);
			__sync_fetch_and_add(&j->running, 1);
			set_job_cpu(tctx->svc + 1, 0);
		} else if (prio_any_queued()) {
			__sync_fetch_and_add(&j->reclaims, 1);
			STAT_INC(allot_reclaims);
			job_preempt(p, tctx);
		}
		return;
	}
	if (tctx->job_token && READ_ONCE(j->holders) > allot && job_shed(tctx, j, allot))
		job_preempt(p, tctx);
}

/* ops.runnable / ops.quiescent: the job's runnable threads (its demand, for the controller). */
static __always_inline void job_set_runnable(struct task_ctx *tctx, u32 on)
{
	struct tailctl_job_acct *j = job_entry(tctx->svc, tctx->owner);

	if (!j)
		return;
	if (__sync_val_compare_and_swap(&tctx->job_runnable, !on, on) != !on)
		return;
	if (on)
		__sync_fetch_and_add(&j->runnable, 1);
	else
		dec_u32(&j->runnable);
}

/*
 * The CPU the wait-bound timer kicks for overdue waiter @p, whose ops.dispatch
 * then releases it (and every other overdue waiter): its own, unless an RT
 * task holds that one, whose ops.dispatch would not run until it let go, so
 * that kick released nobody for as long as the RT task ran. Then, unpinned,
 * another CPU it may run on (an idle one first, claimed, so it is kicked
 * even if it is its own: its RT task left meanwhile), or -1: the next
 * overdue waiter's CPU is tried.
 */
static __always_inline s32 bound_kick_cpu(struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p), c;

	if (!rt_holds(cpu))
		return cpu;
	if (p->nr_cpus_allowed == 1 || is_migration_disabled(p))
		return -1;
	c = scx_bpf_pick_any_cpu(p->cpus_ptr, 0);
	if (c < 0 || (c != cpu && rt_holds(c)))
		return -1;
	return c;
}

/* Wait bound without a dispatching CPU: kick the CPU of job @svc's oldest waiter past its bound. */
static __always_inline void job_check_waiters(u32 svc, u64 now)
{
	struct task_struct *p;
	u64 dsq = TAILCTL_JOB_DSQ_BASE + svc;

	if (!scx_bpf_dsq_nr_queued(dsq))
		return;
	waiters_set(&job_waiters_mask, svc);
	bpf_for_each(scx_dsq, p, dsq, 0) {
		struct task_ctx *tctx = task_ctx(p);
		s32 cpu;

		if (!tctx || now < tctx->job_wait_at_ns || now - tctx->job_wait_at_ns <= max_throttle_wait_ns)
			continue;
		cpu = bound_kick_cpu(p);
		if (cpu < 0)
			continue;
		scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		STAT_INC(bound_kicks);
		break;
	}
}

/* ---- per-request core allocations within an allotment (issue 12) ------- */

/*
 * Give request entry @a the allocation @share unless the kernel serialized it
 * (its cap of 1 stays). check_threshold stamps serialized_at_ns before it
 * sets alloc to 1 (a full barrier), and this re-reads the stamp after its own
 * compare-and-swap: whichever order the two run in, a serialized request ends
 * at 1.
 */
static __always_inline void req_set_share(struct tailctl_request_acct *a, u32 share)
{
	u32 old = READ_ONCE(a->alloc);

	if (READ_ONCE(a->serialized_at_ns) || old == share)
		return;
	if (__sync_val_compare_and_swap(&a->alloc, old, share) != old)
		return;
	if (READ_ONCE(a->serialized_at_ns) && !serialize_mark_only) {
		__sync_lock_test_and_set(&a->alloc, 1);
		return;
	}
	if (!share)
		return;
	if (!a->share_min || share < a->share_min)
		a->share_min = share;
	if (share > a->share_max)
		a->share_max = share;
}

/*
 * The counts of req_share_pass's first loop, kept in map memory: counted in
 * registers they would be constants the verifier tracks exactly through all
 * 1024 iterations (the loop never converged on kernel 7: "sequence of 8193
 * jumps is too complex").
 */
struct share_count {
	u32 active;
	u32 nser;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct share_count);
} share_counts SEC(".maps");

/*
 * Divide job @svc's allotment @allot among its active requests (QUEUED or
 * RUNNING in its region): serialized ones (the kernel's or the runtime's
 * SERIALIZED flag) get 1, the others an equal share of the rest (floor: the
 * shares never add up to more than the allotment; 0, no cap, when there are
 * more of them than cores to share). Publishes each share as the slot's
 * kernel_alloc and caps the request at it through its entry's alloc (the
 * serialization cap's tokens); a request the kernel has no entry for yet
 * starts with job_acct.req_share when it first runs. The region is
 * untrusted: its states and flags only move this job's own shares around,
 * the sum stays within its allotment, and the loop is bounded by the slot
 * count. Called from apply_allot every quantum; a global subprogram
 * (verified once).
 */
__noinline int req_share_pass(u32 svc, u32 allot)
{
	struct tailctl_region *r;
	struct tailctl_job_acct *j;
	struct share_count *c;
	u32 i, active, nser, share, rest, key = svc;
	u64 owner;

	if (!request_shares || svc >= TAILCTL_MAX_SERVICES || !allot)
		return 0;
	r = service_region(svc);
	owner = service_owner(svc);
	j = bpf_map_lookup_elem(&job_acct, &key);
	c = bpf_map_lookup_elem(&share_counts, (const void *)&zero_key);
	if (!r || !j || !c || !owner || READ_ONCE(j->owner) != owner)
		return 0;
	c->active = 0;
	c->nser = 0;
	bpf_for(i, 0, TAILCTL_MAX_REQUESTS) {
		struct tailctl_request_slot *req = &r->requests[i];
		u32 st = READ_ONCE(req->state);

		if (st != TAILCTL_REQ_QUEUED && st != TAILCTL_REQ_RUNNING)
			continue;
		c->active++;
		if (READ_ONCE(req->flags) & TAILCTL_FLAG_SERIALIZED)
			c->nser++;
	}
	active = READ_ONCE(c->active);
	nser = READ_ONCE(c->nser);
	rest = allot > nser ? allot - nser : 1;
	/*
	 * With no other request active, a new one would have the whole rest.
	 * More requests than the rest: a share under one core cannot be a cap
	 * (1 each would add up to more than the allotment), so none is set (0)
	 * and the job's own cap divides its cores among them.
	 */
	share = active > nser ? rest / (active - nser) : rest;
	WRITE_ONCE(j->req_share, share);
	if (!active)
		return 0;
	bpf_for(i, 0, TAILCTL_MAX_REQUESTS) {
		struct tailctl_request_slot *req = &r->requests[i];
		struct tailctl_request_acct *a;
		u32 st = READ_ONCE(req->state), want, idx;
		u64 tag;

		if (st != TAILCTL_REQ_QUEUED && st != TAILCTL_REQ_RUNNING)
			continue;
		/* kernel_alloc 0: no cap (the region's convention). */
		want = READ_ONCE(req->flags) & TAILCTL_FLAG_SERIALIZED ? 1 : share;
		if (READ_ONCE(req->kernel_alloc) != want)
			WRITE_ONCE(req->kernel_alloc, want);
		idx = svc * TAILCTL_MAX_REQUESTS + i;
		a = bpf_map_lookup_elem(&req_acct, &idx);
		tag = ((u64)READ_ONCE(req->generation) << 32) | i;
		if (a && READ_ONCE(a->tag) == tag && READ_ONCE(a->owner) == owner)
			req_set_share(a, want);
	}
	return 0;
}

/* A token holder of a request whose share shrank under it: give one token over the alloc back. */
static __always_inline bool req_shed(struct task_ctx *tctx, struct tailctl_request_acct *a)
{
	u64 e = tctx->acct_epoch;
	u32 h, alloc, i;

	bpf_for(i, 0, MAX_CPUS) {
		alloc = READ_ONCE(a->alloc);
		h = READ_ONCE(a->holders);
		if (!alloc || !acct_in(h, e) || acnt(h) <= alloc)
			return false;
		if (__sync_val_compare_and_swap(&a->holders, h, h - 1) == h) {
			if (__sync_val_compare_and_swap(&tctx->holds_token, 1, 0) != 1) {
				acct_inc(&a->holders, e, ACCT_CNT_MASK);
				return false;
			}
			if (READ_ONCE(a->holder) == tctx->tid)
				__sync_val_compare_and_swap(&a->holder, tctx->tid, 0);
			return true;
		}
	}
	return false;
}

/* ---- end of per-request core allocations ---------------------------------- */

/*
 * One decision of the controller (BPF_PROG_TEST_RUN from the daemon, one run
 * per job): if the job is still registered as `owner`, publish the allotment
 * in its services entry and open the decision for the latency measurement;
 * when the job runs more threads than the new allotment, kick that many of
 * its CPUs (they give their tokens back at once instead of at their next
 * tick). Returns 1 if the allotment changed, 0 if not, -1 if the job is gone.
 */
SEC("syscall")
int apply_allot(struct tailctl_allot_cmd *c)
{
	u32 svc = c->svc, want = c->allot, desire = c->desire, n = scx_bpf_nr_cpu_ids();
	u64 owner = c->owner, seq = c->seq, at = c->decided_at_ns, now = bpf_ktime_get_ns();
	struct tailctl_service *s;
	struct tailctl_stats *st;
	struct tailctl_job_acct *j;
	u32 allot, old, running, excess, cpu;

	if (n > MAX_CPUS)
		n = MAX_CPUS;
	if (svc >= TAILCTL_MAX_SERVICES || service_owner(svc) != owner)
		return -1;
	s = bpf_map_lookup_elem(&services, &svc);
	j = job_entry(svc, owner);
	if (!s || !j)
		return -1;
	allot = want > n ? n : want;
	old = READ_ONCE(s->allot);
	WRITE_ONCE(s->desire, desire);
	WRITE_ONCE(s->allot_seq, seq);
	WRITE_ONCE(s->allot_at_ns, at);
	/* Every quantum the job's requests share its allotment (after the timing: it loops over the region). */
	if (old == allot) {
		req_share_pass(svc, allot);
		return 0;
	}
	/* Decision first, then the allotment: the kernel never enforces one it cannot time. */
	j->seq = seq;
	j->decided_at_ns = at;
	j->applied_at_ns = now;
	st = stats_cpu();
	if (st)
		st->allot_apply_lat_sum_ns += now > at ? now - at : 0;
	WRITE_ONCE(j->allot, allot);
	__sync_lock_test_and_set(&j->pending, 1);
	__sync_lock_test_and_set(&s->allot, allot);
	__sync_fetch_and_add(&j->reallocs, 1);
	STAT_INC(allot_reallocs);
	running = READ_ONCE(j->running);
	excess = allot && running > allot ? running - allot : 0;
	bpf_for(cpu, 0, n) {
		struct job_cpu *jc;

		if (!excess)
			break;
		jc = bpf_map_lookup_elem(&job_cpus, &cpu);
		if (jc && jc->svc1 == svc + 1 && !jc->borrowed) {
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
			excess--;
		}
	}
	job_check_enforced(j, bpf_ktime_get_ns(), true);
	req_share_pass(svc, allot);
	return 1;
}

/*
 * How much a job thread's CPU time counts in its vtime: a job allotted `allot`
 * CPUs with more runnable threads than that runs them in turns (tokens), each
 * a fraction allot/runnable of the time. Charged 1:1, each would lag behind a
 * thread that runs all the time, and the job's released waiters would always
 * be ahead of an unregistered neighbour in the shared queue (one-thread
 * neighbour beside two 8-thread jobs allotted 2 each: 0.34 CPU in the guest,
 * i.e. per-thread fairness, 4/(16+1) of the machine). Charging runnable/allot
 * makes the job's allotment compete like `allot` threads.
 */
static __always_inline u32 job_vtime_scale(struct task_ctx *tctx)
{
	struct tailctl_job_acct *j;
	u32 allot, runnable;

	if (!tctx || tctx->svc < 0)
		return 1;
	allot = job_allot(tctx->svc);
	if (!allot)
		return 1;
	j = job_entry(tctx->svc, tctx->owner);
	if (!j)
		return 1;
	runnable = READ_ONCE(j->runnable);
	if (runnable <= allot)
		return 1;
	runnable /= allot;
	return runnable > 64 ? 64 : runnable;
}

/* ---- end of per-job core allotments -------------------------------------- */

/* ---- wake-up preemption (issue 16) ---------------------------------------- */

/*
 * A task that wakes with no idle CPU is queued by vtime, and a sleeper's
 * vtime is at most one slice behind vtime_now, so it is usually the queue's
 * head. But a CPU only takes from the queue when its current task's slice
 * ends: beside CPU hogs with the default 5 ms slice (two ticks at HZ=250)
 * a sleeper waited for a slice end (cyclictest's mean wake-up latency
 * beside hogs was 1.5x the default scheduler's, which preempts at wake-up).
 * So a waking task preempts a CPU whose current task has run at least
 * wake_preempt_ns since it started (or had its slice extended) and is at
 * least wake_preempt_ns ahead of the waking task in vtime: the task's own
 * CPU if it qualifies (cache-warm, and a timer wake-up runs there, so the
 * kick needs no IPI), else the one furthest ahead; the kicked CPU's ops.dispatch then takes the queue's head by
 * vtime as always (the waking task, or one with a lower vtime still).
 *
 *  - The run floor keeps tasks that run briefly between sleeps (hackbench,
 *    ping-pong pairs) from preempting one another on every wake-up; the
 *    vtime gap keeps preemption for a task that really is behind.
 *  - cpu_curs[cpu] is what the CPU runs: the vtime its task started with
 *    and when (ops.running, and ops.dispatch's slice extension, where the
 *    task's vtime is charged without a new ops.running), cleared by
 *    ops.stopping. A CPU kicked here is cleared too, so two wake-ups do not
 *    preempt the same CPU.
 *  - Only unregistered tasks at the normal level, with levels unused
 *    (prio_active: prio_preempt_lower already preempts for a higher level,
 *    and a CPU running a higher level must not be taken), that may run on
 *    every CPU (a narrower affinity would need the task's mask here: it
 *    waits for a slice end as before). With LLC queues only the CPUs of the
 *    LLC whose queue the task went into are candidates (the others take
 *    their own queue first). Registered workers keep their paths
 *    (throttle and job queues) unchanged.
 *  - Cost: ops.running and ops.stopping one array store each; ops.enqueue
 *    scans the CPUs only for a wake-up that found no idle CPU.
 */

/* 0: no wake-up preemption (set by user space before load). */
const volatile u64 wake_preempt_ns = 1000000ULL;

struct cpu_cur {
	/* The running task's vtime when it started (or was extended). */
	u64 vtime;
	/* When it started; 0: nothing of ours runs (or the CPU was just kicked). */
	u64 at;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_cur);
} cpu_curs SEC(".maps");

static __always_inline void cpu_cur_set(u64 vtime, u64 at)
{
	u32 key = bpf_get_smp_processor_id();
	struct cpu_cur *cr = bpf_map_lookup_elem(&cpu_curs, &key);

	if (cr) {
		cr->vtime = vtime;
		cr->at = at;
	}
}

/* @cpu's current task's vtime at @now (0: not a candidate: none, or it ran too briefly). */
static __always_inline u64 cpu_cur_vtime(u32 cpu, u64 now)
{
	struct cpu_cur *cr = bpf_map_lookup_elem(&cpu_curs, &cpu);
	u64 at;

	if (!cr)
		return 0;
	at = READ_ONCE(cr->at);
	if (!at || now < at || now - at < wake_preempt_ns)
		return 0;
	/* Its vtime now: what it started with plus what it ran since (nice 0's rate). */
	return READ_ONCE(cr->vtime) + (now - at);
}

/*
 * A task with vtime @vtime woke, was queued for @target's LLC and found no
 * idle CPU: preempt a CPU running a task far ahead of it (see the section's
 * comment). Returns the CPU kicked, or -1. Global subprogram.
 */
__noinline int wake_preempt(u64 vtime, s32 target)
{
	u32 n = scx_bpf_nr_cpu_ids(), i, llc = llc_of(target), key;
	u64 now = bpf_ktime_get_ns(), floor = vtime + wake_preempt_ns, best_vtime = floor, v;
	struct cpu_cur *cr;
	s32 best = -1;

	if (n > MAX_CPUS)
		n = MAX_CPUS;
	/* Its own CPU first: cache-warm, and a timer wake-up runs there (no IPI). */
	if (target >= 0 && target < n) {
		v = cpu_cur_vtime(target, now);
		if (v && (s64)(v - floor) > 0)
			best = target;
	}
	if (best < 0) {
		bpf_for(i, 0, n) {
			if (llc_on() && llc_of(i) != llc)
				continue;
			v = cpu_cur_vtime(i, now);
			if (v && (s64)(v - best_vtime) > 0) {
				best = i;
				best_vtime = v;
			}
		}
	}
	if (best < 0)
		return -1;
	/* Claimed: a second wake-up before it reschedules picks another CPU. */
	key = best;
	cr = bpf_map_lookup_elem(&cpu_curs, &key);
	if (cr)
		WRITE_ONCE(cr->at, 0);
	scx_bpf_kick_cpu(best, SCX_KICK_PREEMPT);
	STAT_INC(wake_preempt_kicks);
	return best;
}

/* ---- end of wake-up preemption -------------------------------------------- */

/* @p woke onto idle CPU @cpu (its task_cpu): straight into that CPU's local DSQ. */
static __always_inline void insert_local_idle(struct task_struct *p, s32 cpu, u64 enq_flags)
{
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
	STAT_INC(direct_dispatches);
	if (prio_active())
		prio_decided(cpu);
}

s32 BPF_STRUCT_OPS(tailctl_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx;
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	tctx = resolve_task(p);
	/*
	 * Remembered for ops.enqueue, which sends a registered worker that passes
	 * its checks straight to this CPU. Not for a sync wake-up: for one the
	 * built-in may pick the waker's own CPU, which is busy, not idle; such a
	 * worker keeps the vtime queue's path, where any CPU may take it.
	 */
	if (tctx)
		tctx->woke_idle = is_idle && !(wake_flags & SCX_WAKE_SYNC);
	/* A registered worker goes through enqueue, where its request's cap is checked. */
	if (is_idle && !tctx)
		insert_local_idle(p, cpu, 0);
	return cpu;
}

/*
 * An unpinned owed waiter re-enqueued off its CPU's head for a change of its
 * own (tailctl_enqueue): back there only if that CPU is still in its mask (a
 * re-pin elsewhere: the kernel would migrate it at once, and the preemption
 * would have cut the slice of whatever runs there for nothing) and no RT
 * task holds it (it would wait there until that let go).
 */
static __always_inline bool own_head_usable(struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);

	return bpf_cpumask_test_cpu(cpu, p->cpus_ptr) && !rt_holds(cpu);
}

void BPF_STRUCT_OPS(tailctl_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx;
	bool woke_idle = false, rewait, owed;
	u64 vtime;
	u32 level;
	s32 cpu = -1, lost_kick = -1;

	STAT_INC(enqueues);
	if (enq_flags & SCX_ENQ_REENQ)
		STAT_INC(reenqueues);

	/*
	 * A per-CPU kthread can run nowhere else; queueing it behind user tasks
	 * only delays work the kernel is waiting for.
	 */
	if (is_pcpu_kthread(p)) {
		/* Re-enqueued (ops.cpu_release): it keeps what is left of its slice (0: unchanged). */
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, (enq_flags & SCX_ENQ_REENQ) ? 0 : slice_ns, enq_flags);
		STAT_INC(kthread_dispatches);
		return;
	}

	tctx = resolve_task(p);
	/* Out of a working-first job queue without a release (affinity or nice change): its vtime back. */
	if (!job_queue_fifo)
		job_vtime_back(p, tctx);
	/* Only for the wakeup it was set for. */
	if (tctx) {
		woke_idle = tctx->woke_idle && (enq_flags & SCX_ENQ_WAKEUP);
		tctx->woke_idle = false;
	}
	/*
	 * Still marked throttled: it left its throttle queue without being
	 * dispatched (an affinity or nice change dequeues and re-enqueues it);
	 * its old place in the wait count goes, it is counted again below if it
	 * waits again. Its wait goes on from where it started, though: a thread
	 * re-niced or re-pinned every few milliseconds restarted its wait each
	 * time and never reached the wait bound. (Found while chasing a worker
	 * of the fuzz test's churning service that went 32 s without running on
	 * 7.3; not shown to be its cause, see the guest test `waitrenice`.)
	 */
	rewait = tctx && READ_ONCE(tctx->throttled);
	if (tctx)
		leave_wait(tctx);
	/*
	 * Released past its wait bound and not yet run (overdue, for its
	 * request's cap or its job's): it is owed its run, so a re-enqueue (a
	 * re-pin or re-nice while it queues for a CPU) does not send it back
	 * to wait, and one the release put at the head of its CPU goes back
	 * there (overdue_local_cpu), a pinned one always, an unpinned one if
	 * the re-enqueue is for a change of its own (nice, affinity, cgroup:
	 * not SCX_ENQ_REENQ, which is ops.cpu_release's, see below) and that
	 * CPU is still its to run on and not held by an RT task (else it seeks
	 * another head as a lost one does). It did go back to wait: released
	 * again at once, each time at the newest vtime, a waiter re-pinned
	 * every few ms could wait without bound. In the fair queue it waited
	 * behind its own holder's whole slice (guest test `waitrenice`, from
	 * the SysRq-D dump). ops.stopping / ops.running clear the flags once it
	 * ran.
	 */
	owed = tctx && (READ_ONCE(tctx->overdue) || READ_ONCE(tctx->job_overdue));
	if (owed && tctx->overdue_local &&
	    (p->nr_cpus_allowed == 1 || (!(enq_flags & SCX_ENQ_REENQ) && own_head_usable(p)))) {
		s32 own = scx_bpf_task_cpu(p);

		/*
		 * Its own runqueue's local queue takes it whatever its mask; re-pinned
		 * to another CPU the kernel migrates it at once, and it comes back
		 * here for that one: no preemption of what runs on this one for it.
		 */
		WRITE_ONCE(overdue_head_sent[(u32)own & (MAX_CPUS - 1)], 1);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | own, slice_ns,
				   enq_flags | (bpf_cpumask_test_cpu(own, p->cpus_ptr) ? SCX_ENQ_PREEMPT : 0));
		return;
	}
	/*
	 * An unpinned one sent to a CPU's head, re-enqueued from there before
	 * it ran: that CPU was taken by a higher class (ops.cpu_release's
	 * re-enqueue, 7.x), or it may no longer run there (above). Another
	 * CPU's head if one is free, not that one; else the fair queue, as
	 * before (counted in overdue_head_lost), where the CPU picked is kicked
	 * once the task is queued (if pick_any_cpu claimed it idle, only a kick
	 * makes it look at the queues again). No return between here and that
	 * kick: owed skips the throttle and job queues, and a re-enqueue is
	 * neither a wake-up (woke_idle) nor SCX_ENQ_LAST.
	 */
	if (owed && tctx->overdue_local) {
		s32 c = scx_bpf_pick_any_cpu(p->cpus_ptr, 0);

		tctx->overdue_local = false;
		STAT_INC(overdue_head_lost);
		if (c >= 0 && c != scx_bpf_task_cpu(p) && !is_migration_disabled(p) &&
		    bpf_cpumask_test_cpu(c, p->cpus_ptr) &&
		    overdue_local_slot(c, bpf_ktime_get_ns(), 0, prio_level(p, tctx)) >= 0) {
			tctx->overdue_local = true;
			WRITE_ONCE(overdue_head_sent[(u32)c & (MAX_CPUS - 1)], 1);
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | c, slice_ns, enq_flags | SCX_ENQ_PREEMPT);
			return;
		}
		/* Its wait is then the fair queue's, not the release's: counted apart (note_overdue_wait). */
		tctx->overdue_lost = true;
		lost_kick = c;
	}
	if (tctx && !owed && must_throttle(p, tctx)) {
		struct tailctl_request_acct *a;

		/*
		 * Its wait started before: it was sent back by its job's cap right
		 * after its release, or re-enqueued from its throttle queue.
		 */
		if (!(tctx->keep_wait || rewait) || !tctx->throttled_at_ns)
			tctx->throttled_at_ns = bpf_ktime_get_ns();
		tctx->keep_wait = false;
		a = acct_of(tctx);
		/* Counted only in its own epoch (a reset since must_throttle leaves it uncounted). */
		if (a && acct_inc(&a->waiting, tctx->acct_epoch, ACCT_CNT_MASK)) {
			tctx->throttled = 1;
			__sync_fetch_and_add(&a->throttled, 1);
		}
		scx_bpf_dsq_insert(p, TAILCTL_THROTTLE_DSQ_BASE + tctx->svc, slice_ns, enq_flags);
		waiters_set(&throttle_waiters_mask, tctx->svc);
		STAT_INC(throttled);
		return;
	}
	if (tctx)
		tctx->keep_wait = false;
	/* Over its job's allotment: wait for a job token (or keep an otherwise idle CPU). */
	if (tctx && !owed && job_enqueue(p, tctx, enq_flags))
		return;
	/*
	 * A registered worker that ops.select_cpu woke onto an idle CPU and that
	 * passed its request's cap and its job's allotment: straight to that
	 * CPU's local queue, as an unregistered task goes from ops.select_cpu
	 * (ops.running checks the cap again, so a serialization in between still
	 * sends it back). Through the shared queue, another CPU took it first:
	 * registered runs had 2.7x the migrations and 1.35-1.5x the runqueue
	 * wait per request of the same service unregistered
	 * (tools/vm/regab-guest.sh, workloads/results/regab-6.18).
	 */
	if (woke_idle) {
		insert_local_idle(p, scx_bpf_task_cpu(p), enq_flags);
		return;
	}

	/* Nothing else wants this CPU (ENQ_LAST): keep running, no queue round trip. */
	if (enq_flags & SCX_ENQ_LAST) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		STAT_INC(slice_extensions);
		return;
	}

	/*
	 * Work-conserving: claim an idle CPU that may run this task (kicked
	 * below, once the task is queued), so that with LLC queues it goes
	 * into that CPU's LLC's queue. (A wakeup ops.select_cpu placed on an
	 * idle CPU went to that CPU's local queue above.)
	 */
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);

	/* Into its priority level's queue (normal: the shared one, or its LLC's). */
	level = prio_active() || tctx ? prio_level(p, tctx) : TAILCTL_PRIO_NORMAL;
	vtime = task_vtime(p);
	/*
	 * Preempted inside an RCU read-side critical section: every grace period
	 * waits for it, so it queues as a fresh waker (vtime_now - slice), its
	 * weight's vtime debt forgiven (what RCU priority boosting does, which
	 * these kernels are built without). Seen twice in the `greedy` guest test
	 * on 7.3 (once with khugepaged kept busy): khugepaged (nice 19, charged
	 * 100x its run time) preempted copying a huge page under rcu_read_lock
	 * ran a few ms every 3.6 s beside
	 * nice-0 threads, held the grace period for 21 s, and the kernel's RCU
	 * stall detector ejected the scheduler ("RCU CPU stall on CPUs ()": a
	 * task, not a CPU, held it) before the 30 s watchdog, which saw it run.
	 */
	if (in_rcu_reader(p) && time_before(vtime_now - slice_ns, vtime))
		vtime = vtime_now - slice_ns;
	prio_insert(p, level, vtime, enq_flags, cpu >= 0 ? cpu : lost_kick >= 0 ? lost_kick : scx_bpf_task_cpu(p));
	STAT_INC(shared_enqueues);
	/* The CPU a lost head's search claimed if it was idle (above): it looks at the queues now. */
	if (lost_kick >= 0 && lost_kick != cpu)
		scx_bpf_kick_cpu(lost_kick, SCX_KICK_IDLE);

	if (cpu >= 0) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		STAT_INC(idle_kicks);
	} else {
		/* No idle CPU: take back one lent to a job over its allotment. */
		job_reclaim(p);
		/* ... and preempt a CPU running a lower level (promptness). */
		if (prio_active())
			prio_preempt_lower(level);
		/* ... or, for a sleeper lagging behind, the CPU furthest ahead (wake-up preemption). */
		else if (wake_preempt_ns && !tctx && (enq_flags & SCX_ENQ_WAKEUP) &&
			 p->nr_cpus_allowed >= scx_bpf_nr_cpu_ids())
			wake_preempt(task_vtime(p), scx_bpf_task_cpu(p));
	}
}

/*
 * How long @tctx has waited in its throttle queue at @now. @now may have been
 * read before another CPU queued it (a dispatch reads the clock once): that
 * wait is 0, not a wrapped u64 that would release the waiter as overdue.
 */
static __always_inline u64 wait_of(struct task_ctx *tctx, u64 now)
{
	u64 at = READ_ONCE(tctx->throttled_at_ns);

	return now > at ? now - at : 0;
}

/*
 * Releases on a CPU since its ops.dispatch last ran (the kernel calls it only
 * with the local DSQ empty): tailctl_cpu_release stops re-enqueueing past
 * REENQ_STREAK_MAX, see there.
 */
#define REENQ_STREAK_MAX 64
static u32 reenq_streak[MAX_CPUS];

/* Set while a CPU releases a service's waiters (see release_waiters). */
static u32 releasing[TAILCTL_MAX_SERVICES];

/*
 * Release the waiters of service @svc that may go now: those whose request
 * has a free token, whose wait passed the bound, or that are no longer
 * waiting for anything (request or registration gone). A waiter released
 * with a token (or with nothing to wait for) is moved to its level's vtime
 * queue (the shared one at the normal level), not to this CPU: there it
 * competes with every other task by vtime (a throttle queue never outranks
 * the fair queue, so a service cannot take more CPU than it would get
 * unregistered), and the kernel's consume path only hands it to a CPU it may
 * run on (a pinned or migration-disabled waiter waits for its own CPU,
 * which is kicked if idle). A waiter let through at the bound, owed one run
 * and not ahead of the fair frontier, goes to the head of a CPU's local
 * queue instead (overdue_local_cpu). Its token is claimed while it is still
 * queued here (see below); should the move fail, it is given back.
 * Returns 1 if a waiter was moved to this CPU's local queue.
 */
/* A global subprogram, verified once (see job_release_waiters). */
__noinline int release_waiters(u32 svc, u64 now)
{
	struct task_struct *p;
	u64 dsq = TAILCTL_THROTTLE_DSQ_BASE + svc, to;
	s32 here = bpf_get_smp_processor_id();
	int mine = 0;
	u32 level;

	if (svc >= TAILCTL_MAX_SERVICES)
		return 0;
	if (!scx_bpf_dsq_nr_queued(dsq)) {
		waiters_clear_if_empty(&throttle_waiters_mask, svc, dsq);
		return 0;
	}
	/* One CPU at a time: two releasing the same waiter would race on its token and wait count. */
	if (__sync_val_compare_and_swap(&releasing[svc], 0, 1) != 0)
		return 0;
	/* Released waiters rejoin their service's priority level (normal: the shared queue). */
	level = prio_svc_level(svc);
	to = prio_dsq(level);
	bpf_for_each(scx_dsq, p, dsq, 0) {
		struct tailctl_request_acct *a = NULL;
		struct task_ctx *tctx = task_ctx(p);
		bool capped = false, overdue = false, took = false, moved;
		u64 waited = 0;
		s32 cpu, ocpu;

		if (tctx && tctx->svc >= 0 && still_bound(p, tctx)) {
			a = acct_of(tctx);
			if (a && READ_ONCE(a->alloc)) {
				capped = true;
				if (!READ_ONCE(tctx->holds_token) &&
				    acnt(READ_ONCE(a->holders)) >= READ_ONCE(a->alloc)) {
					if (wait_of(tctx, now) <= max_throttle_wait_ns)
						continue;
					overdue = true;
				}
			}
		}
		/*
		 * Claim the token while the waiter is still in its throttle
		 * queue, not after the move: once moved, another CPU may run it
		 * at once and its region may move it to another request, and a
		 * token claimed after that landed in the entry it no longer
		 * tracked: never given back there (the timer reclaimed it as a
		 * leak) and given back to the new one instead (a count found at
		 * zero), the two token_leaks under the fuzzer. A claim lost to
		 * another waiter leaves it waiting; one for a move that fails
		 * goes back.
		 */
		if (capped && !overdue && a && tctx && !READ_ONCE(tctx->holds_token)) {
			if (!claim_token(tctx, a)) {
				if (wait_of(tctx, now) <= max_throttle_wait_ns)
					continue;
				overdue = true;
			} else {
				took = true;
			}
		}
		/* Owed its run: to the head of a CPU's local queue (overdue_local_cpu), or it waits on. */
		ocpu = overdue ? overdue_local_cpu(p, p->scx.dsq_vtime, now, level) : -1;
		if (overdue && tctx && overdue_defers(ocpu, wait_of(tctx, now)))
			continue;
		/*
		 * Before it leaves the wait count: a re-enqueue racing this move
		 * (which then fails) finds the wait kept (keep_wait) and an
		 * overdue waiter still owed its run, instead of starting over.
		 */
		if (tctx) {
			waited = wait_of(tctx, now);
			/* Set before overdue (see job_release_waiters). */
			if (overdue) {
				/* Sent to a CPU's head: read by a re-enqueue before it ran (tailctl_enqueue). */
				tctx->overdue_local = ocpu >= 0;
				tctx->overdue_ahead = ocpu == OVERDUE_AHEAD;
				tctx->overdue_lost = false;
			}
			tctx->overdue = overdue;
			tctx->keep_wait = capped;
			leave_wait(tctx);
		}
		/*
		 * No sleeper credit: the waiter was runnable all along, its
		 * request's CPU time went to the holder; queueing it at the
		 * current vtime keeps rotation from handing the service a
		 * slice of credit on every turn.
		 */
		scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER,
					   time_before(p->scx.dsq_vtime, vtime_now) ? vtime_now : p->scx.dsq_vtime);
		moved = release_move(BPF_FOR_EACH_ITER, p, ocpu, overdue, to);
		if (!moved) {
			/*
			 * Dequeued under us: it comes back through enqueue, which
			 * sorts it out. An overdue one stays owed its run (it waited
			 * past the bound either way).
			 */
			if (tctx && took)
				release_token(p, tctx);
			continue;
		}
		/*
		 * From here the task may already run elsewhere: its token (taken
		 * above) is its own to give back, when it stops.
		 */
		if (tctx) {
			struct tailctl_stats *st = stats_cpu();

			if (st && waited > st->max_throttle_wait_ns)
				st->max_throttle_wait_ns = waited;
		}
		STAT_INC(rotations);
		if (ocpu >= 0) {
			STAT_INC(overdue_heads);
			if (ocpu == here)
				mine = 1;
			continue;
		}
		/* A waiter this CPU may not run goes to one that may (its own, if pinned). */
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	WRITE_ONCE(releasing[svc], 0);
	return mine;
}

void BPF_STRUCT_OPS(tailctl_dispatch, s32 cpu, struct task_struct *prev)
{
	u64 now = bpf_ktime_get_ns();
	int mine = 0;
	u32 svc;

	/* This CPU's local DSQ emptied: its re-enqueue bound starts over (tailctl_cpu_release). */
	if ((u32)cpu < MAX_CPUS && reenq_streak[(u32)cpu & (MAX_CPUS - 1)])
		reenq_streak[(u32)cpu & (MAX_CPUS - 1)] = 0;

	/* Only services whose queues may hold a thread (usually none). */
	if (any_waiters()) {
		bpf_for(svc, 0, TAILCTL_MAX_SERVICES) {
			if (READ_ONCE(throttle_waiters_mask) & (1u << svc))
				mine |= release_waiters(svc, now);
			if (READ_ONCE(job_waiters_mask) & (1u << svc))
				mine |= job_release_waiters(svc, now);
		}
		/*
		 * A waiter let through at its bound went to this CPU's local
		 * queue (overdue_local_cpu): it runs next. Neither take a second
		 * task behind it nor extend prev's slice, which the kernel
		 * (balance_one) would let run first, a whole slice while the
		 * waiter sits where no other CPU takes it (found in review: 1.1 s
		 * with every queue empty and 1 s slices, guest test waitextend).
		 * The local queue is checked too: a move of a waiter from another
		 * CPU's runqueue drops this runqueue's lock, and meanwhile one put
		 * here may have been dequeued (an affinity change), or another CPU
		 * may have put one here.
		 */
		if (mine && scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL) > 0)
			return;
	}

	/* The highest level first, a starving lower level once per guard period. */
	if (prio_dispatch(cpu)) {
		STAT_INC(shared_dispatches);
		return;
	}

	/* A job thread over its allotment rotates out; an idle CPU is lent to a waiting job thread. */
	if (job_dispatch_tail(cpu, prev))
		return;

	/*
	 * Nothing else is waiting: let the previous task keep the CPU for another
	 * slice instead of going through an idle cycle.
	 */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED)) {
		struct task_ctx *ptctx = task_ctx(prev);

		/*
		 * A thread bounced for lack of a token goes back through enqueue;
		 * so does one let past its wait bound (overdue): its one run
		 * without a token ends with its slice (ops.stopping clears the
		 * flag), an extension would keep it beside the holder for as long
		 * as the fair queues stay empty.
		 */
		if (ptctx && ptctx->svc >= 0 && (ptctx->evict || ptctx->overdue))
			return;
		/*
		 * Rotation: a token holder whose request has threads waiting gives
		 * the CPU up at the end of its slice (ENQ_LAST re-enqueues it
		 * behind them) instead of having its slice extended, so the waiters
		 * get the token within a few slices rather than at the wait bound.
		 */
		if (ptctx && ptctx->svc >= 0 && ptctx->holds_token) {
			struct tailctl_request_acct *a = acct_of(ptctx);

			if (a && acnt(READ_ONCE(a->waiting)))
				return;
		}
		/*
		 * Another CPU may have put an overdue waiter in this CPU's local
		 * queue meanwhile (overdue_local_cpu): the kernel would run an
		 * extended prev before it. Looked at only if one was sent here
		 * (the flag is set before the move; a move after this point
		 * preempts prev, SCX_ENQ_PREEMPT, since it needs this runqueue's
		 * lock, held from here to the kernel's pick).
		 */
		if (READ_ONCE(overdue_head_sent[(u32)cpu & (MAX_CPUS - 1)])) {
			WRITE_ONCE(overdue_head_sent[(u32)cpu & (MAX_CPUS - 1)], 0);
			if (scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL) > 0)
				return;
		}
		charge_vtime(prev, ptctx, job_vtime_scale(ptctx));
		prev->scx.slice = slice_ns;
		/* Charged without a new ops.running: its run restarts here (wake-up preemption). */
		if (wake_preempt_ns)
			cpu_cur_set(prev->scx.dsq_vtime, now);
		STAT_INC(slice_extensions);
	}
}

/*
 * --yield-penalty-us: a yielder queues this far past vtime_now (the most
 * advanced running task's vtime when it started) instead of at it. At it, a
 * yielder still sorts before every task preempted after running a while
 * (their vtime is past their start), so searching workers could take turns
 * yielding to one another ahead of the workers with work. Not cumulative: a
 * task that yields again stays at most this far past the frontier (the
 * default scheduler, EEVDF, pushes a yielder's deadline by one slice), and
 * when it runs it moves the frontier (vtime_now) only to where it would have
 * been without the penalty (found in review: otherwise every yield-and-run
 * pushed the frontier P further and every other task fell behind it).
 */
const volatile u64 yield_penalty_ns;

void BPF_STRUCT_OPS(tailctl_running, struct task_struct *p)
{
	struct task_ctx *tctx;
	struct tailctl_region *r;

	/*
	 * Every task has its state (ops.init_task): its vtime is charged from
	 * here (charge_vtime). The same look-up serves the binding check.
	 */
	tctx = task_ctx(p);
	/* Lent straight from a working-first job queue: its own vtime, not the queue's key. */
	if (!job_queue_fifo)
		job_vtime_back(p, tctx);
	/* yield_penalty_ns is read-only data: with the default 0 the verifier drops this branch. */
	if (yield_penalty_ns && tctx && tctx->yield_penalized) {
		u64 v = p->scx.dsq_vtime;

		/* The penalty is its own place in the queue, not progress for the frontier. */
		tctx->yield_penalized = false;
		v = v > yield_penalty_ns ? v - yield_penalty_ns : 0;
		if (time_before(vtime_now, v))
			vtime_now = v;
	} else if (time_before(vtime_now, p->scx.dsq_vtime)) {
		vtime_now = p->scx.dsq_vtime;
	}
	if (wake_preempt_ns)
		cpu_cur_set(p->scx.dsq_vtime, bpf_ktime_get_ns());
	if (tctx)
		tctx->vtime_exec_at = p->se.sum_exec_runtime;

	tctx = resolve_task_ctx(p, tctx);
	prio_running(p, tctx);
	if (!tctx)
		return;
	/* Let through at the wait bound: its wait ends here, whatever its worker is doing now. */
	if (tctx->overdue)
		note_overdue_wait(tctx, tctx->throttled_at_ns);
	r = service_region(tctx->svc);
	/* 0: the clock is read only if something is stamped (clock_or). */
	if (r)
		begin_request(p, tctx, r, 0);
	else
		tctx->evict = false; /* begin_request's reset, for a task with no region (a cgroup job's) */
	job_running(p, tctx);
}

/*
 * Every tick: charge the interval, follow the worker to its current request,
 * and enforce a cap that appeared while it ran.
 */
void BPF_STRUCT_OPS(tailctl_tick, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);
	struct tailctl_request_acct *a;
	struct tailctl_region *r;
	u32 idx = 0;
	u64 now, tag, cpu_ns;

	/* Unsigned: one compare for "unbound" (svc -1) and service_region's bound. */
	if (!tctx || (u32)tctx->svc >= TAILCTL_MAX_SERVICES)
		return;
	/* One region look-up for the job's and the request's accounting. */
	r = service_region(tctx->svc);
	cpu_ns = p->se.sum_exec_runtime;
	if (cpu_ns >= tctx->job_tick_at)
		job_tick(p, tctx, r);
	if (!r)
		return;
	now = 0; /* read only if something is stamped (clock_or) */
	tag = worker_current(tctx, r);
	/*
	 * Still on the request it began (checked against its slot then): no
	 * second check of the slot's generation. Its entry is checked instead
	 * (acct_of: tag and epoch). A worker whose `current` still names a
	 * finished request is charged to it until the slot's next request first
	 * runs here (request_acct resets the entry then); what is published in
	 * the slot is written only for its own generation (slot_of_tag,
	 * check_threshold).
	 */
	if (tag != tctx->tag) {
		tag = request_of_tag(tctx, r, tag, &idx);
		if (tag != tctx->tag) {
			u64 old_tag = tctx->tag;
			u32 old_idx = tctx->acct_idx;

			a = end_request(p, tctx, r, now, tag != NO_TAG);
			/* The request just read: no second current_request. */
			begin_request_at(p, tctx, r, now, tag, idx);
			/* Its announcement of the old request is gone (a non-NULL @a: see end_request). */
			settle_left(a, old_tag, old_idx, now);
			return;
		}
	}
	/* On no request before and now: nothing to charge (acct_of and charge_request would find none). */
	if (tag == NO_TAG)
		return;
	/* One look-up for the charge and the cap check (NULL with no request). */
	a = acct_of(tctx);
	charge_request(tctx, r, a, now, cpu_ns);
	if (a && READ_ONCE(a->alloc)) {
		if (claim_token(tctx, a)) {
			note_held(tctx, a);
			/* Its share shrank under it: the excess over the alloc goes within a tick. */
			if (acnt(READ_ONCE(a->holders)) > READ_ONCE(a->alloc) && req_shed(tctx, a))
				bounce(p, tctx);
		} else if (!tctx->overdue) {
			bounce(p, tctx);
		}
	}
}

void BPF_STRUCT_OPS(tailctl_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx(p);
	struct tailctl_region *r;

	charge_vtime(p, tctx, job_vtime_scale(tctx));
	prio_stopping(p);
	if (wake_preempt_ns)
		cpu_cur_set(0, 0);

	if (!tctx || tctx->svc < 0)
		return;
	/* One region look-up for the job's and the request's accounting; the clock only if stamped (clock_or). */
	r = service_region(tctx->svc);
	job_stopping(p, tctx, r, 0);
	end_request(p, tctx, r, 0, false);
	if (tctx->overdue) {
		tctx->overdue = false;
		STAT_INC(overdue_runs);
	}
	/* It ran: where an overdue release sent it (its request's or its job's) no longer matters. */
	tctx->overdue_local = false;
	tctx->overdue_ahead = false;
	tctx->overdue_lost = false;
	/* Unregistered while it ran (resolve_task runs only when it is queued or starts): give back now. */
	if (!still_bound(p, tctx)) {
		unbind(tctx);
		forget_binding(tctx);
		return;
	}
	/* Rotation: a freed token goes to a waiter; make sure some CPU looks. */
	if (tctx->holds_token) {
		release_token(p, tctx);
		if (scx_bpf_dsq_nr_queued(TAILCTL_THROTTLE_DSQ_BASE + tctx->svc))
			scx_bpf_kick_cpu(scx_bpf_task_cpu(p), 0);
	}
}

/*
 * A higher scheduling class (RT, deadline, stop) took this CPU from an ext
 * task. Whatever sits in its local queue (the task the higher class
 * preempted, which the kernel leaves at the queue's head; a task ops.select_cpu
 * or ops.enqueue sent here) would wait until that class lets go: an RT spinner
 * can hold a CPU for seconds. Give it all back through ops.enqueue
 * (SCX_ENQ_REENQ), where it goes to the shared queue and an idle CPU is kicked;
 * a registered worker passes its request's cap and its job's allotment again
 * there (the preempted one gave its tokens back in ops.stopping, so this is a
 * rotation point like any preemption; one still queued keeps what it holds:
 * must_throttle lets a holder through). A per-CPU kthread comes straight back
 * with the slice it had (ops.enqueue).
 *
 * Only with the generic re-enqueue (7.1+), which the kernel runs from an
 * irq_work after the switch. Before it (6.18), the kfunc runs synchronously
 * here while the preempted task is still current, and migration-disabled (by
 * the BPF program's own prologue): the kernel puts it straight back on this
 * local DSQ with a fresh default slice, bypassing ops.enqueue, so the call
 * helps nothing and a per-CPU kthread behind it could wait out ever-refilled
 * slices (found in review). Measured (guest test rtpreempt): on 7.3 the
 * preempted task got 0.99-1.0 of a CPU during a pinned RT spin, against
 * 0.04-0.74 without this; on 6.18 0.0 with or without.
 *
 * Bounded: a task re-enqueued more than SCX_REENQ_MAX_REPEAT (256) times
 * without running ejects the scheduler (7.x). Tasks that can only run here
 * come straight back, in the same order, so a per-CPU kthread stuck behind
 * another would count up with every release while the higher class keeps
 * coming back. Past REENQ_STREAK_MAX releases with no ops.dispatch on this
 * CPU in between (it runs only when the local DSQ has emptied), the local
 * DSQ is left as it is, as before this callback.
 *
 * Not covered by the kernel on either version: this runs only when the CPU
 * leaves an ext task, not the idle task, so a task sent to an idle CPU just
 * before an RT task woke there still waits.
 */
void BPF_STRUCT_OPS(tailctl_cpu_release, s32 cpu, struct scx_cpu_release_args *args)
{
	u32 *streak, c = cpu;

	if (!__COMPAT_has_generic_reenq())
		return;
	if (c >= MAX_CPUS)
		return;
	streak = &reenq_streak[c & (MAX_CPUS - 1)];
	if (*streak >= REENQ_STREAK_MAX)
		return;
	(*streak)++;
	scx_bpf_reenqueue_local();
}

/* A job's runnable threads, for the allotment controller (issue 12). */
void BPF_STRUCT_OPS(tailctl_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = resolve_task(p);

	if (tctx)
		job_set_runnable(tctx, 1);
}

/*
 * sched_yield(): the task goes behind every task that has started running
 * (vtime_now), with no debt beyond that, and gives up its slice (what the
 * kernel does without this callback) if anything else could take the CPU.
 * If nothing could (this CPU's local queue and every level's queue empty, no
 * throttle or job waiters, which a token holder's yield would let in), it
 * keeps its slice: the kernel then keeps it running without calling
 * ops.dispatch (balance_one's "prev has slice left" path), where an empty
 * queue would only have extended its slice again. Idle work-stealing
 * workers yield thousands of times a second when the machine has nothing
 * else to run; each was a dispatch round trip. What dispatch also did at a
 * yield now waits for the slice's end or the next tick: a job token held
 * over a shrunk allotment is shed by ops.tick (job_tick), the vtime is
 * charged at ops.stopping, and a task that reaches a queue while interrupts
 * are briefly on before the kernel's reschedule waits at most the yielder's
 * remaining slice (a review checked this against ext.c, 6.18 and 7.2).
 * Charged only the time it ran (charge_vtime), a thread that yields in a loop (an idle work-stealing
 * worker) would otherwise keep the lowest vtime and win every dispatch
 * over the threads with work; charged a whole slice per yield, as before,
 * it ran up a debt that made it wait behind everyone once it had work.
 * Not for yield_to() (@to set): no preference is given to @to. With
 * --yield-penalty-us it goes that far behind vtime_now (see yield_penalty_ns).
 */
bool BPF_STRUCT_OPS(tailctl_yield, struct task_struct *from, struct task_struct *to)
{
	if (!to && time_before(from->scx.dsq_vtime, vtime_now + yield_penalty_ns)) {
		from->scx.dsq_vtime = vtime_now + yield_penalty_ns;
		if (yield_penalty_ns) {
			struct task_ctx *yctx = task_ctx(from);

			if (yctx)
				yctx->yield_penalized = true;
		}
	}
	if (!to && from->scx.slice && !any_waiters() && !scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL) &&
	    !prio_any_queued()) {
		STAT_INC(yields_kept);
		return false;
	}
	from->scx.slice = 0;
	return false;
}

void BPF_STRUCT_OPS(tailctl_quiescent, struct task_struct *p, u64 deq_flags)
{
	struct task_ctx *tctx = task_ctx(p);

	if (tctx && tctx->svc >= 0)
		job_set_runnable(tctx, 0);
}

void BPF_STRUCT_OPS(tailctl_enable, struct task_struct *p)
{
	p->scx.dsq_vtime = vtime_now;
}

/*
 * @p leaves sched_ext (a --partial task switched to another policy, or the
 * scheduler unloading): it may be queued with a token or a place in a wait
 * count that no later callback would give back.
 */
void BPF_STRUCT_OPS(tailctl_disable, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);

	if (tctx && tctx->svc >= 0)
		unbind(tctx);
	/* Back under sched_ext later (ops.enable), it is looked up afresh. */
	if (tctx)
		forget_binding(tctx);
}

/*
 * @p is gone: whatever it still held goes back (the last safety net; stopping
 * normally did it), and its tid binding with it, so a later thread that
 * reuses the tid is never taken for a worker.
 */
void BPF_STRUCT_OPS(tailctl_exit_task, struct task_struct *p, struct scx_exit_task_args *args)
{
	struct task_ctx *tctx = task_ctx(p);

	if (tctx && tctx->svc >= 0)
		unbind(tctx);
	unbind_exited_task(p);
}

/*
 * Every task's state is created here, once, so that no hot path allocates
 * (ops.running and ops.enqueue only ever do a plain get); -ENOMEM makes the
 * kernel refuse the fork (or the load), not run a task without its state.
 */
s32 BPF_STRUCT_OPS(tailctl_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx;

	tctx = bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return -ENOMEM;
	tctx->svc = -1;
	tctx->tag = NO_TAG;
	tctx->job_tick_at = ~0ULL;
	tctx->bind_gen = BIND_GEN_NONE;
	return 0;
}

/* ---- the wait bound without a dispatching CPU --------------------------- */

/*
 * Waiters are released only by a CPU running ops.dispatch; on an idle machine
 * (or one whose busy CPUs run long slices) none may for a long time. This
 * timer looks every quarter of the wait bound: a waiter past its bound gets
 * its CPU kicked (preempting it if busy, so it goes through ops.dispatch),
 * and a token whose recorded holder no longer holds it is reclaimed and
 * counted as a leak.
 */
struct wait_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct wait_timer);
} wait_timers SEC(".maps");

/* A token holder seen not holding: reclaimed only if seen again one period later (no race with a release in flight). */
struct leak_suspect {
	u32 idx;
	u32 tid;
	u64 tag;
	u64 epoch;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TAILCTL_MAX_SERVICES);
	__type(key, u32);
	__type(value, struct leak_suspect);
} leak_suspects SEC(".maps");

static __always_inline u64 wait_timer_period(void)
{
	u64 period = max_throttle_wait_ns / 4;

	return period < 1000000 ? 1000000 : period;
}

/* Does thread @tid hold a token of entry @a? */
static __always_inline bool holder_holds(u32 tid, struct tailctl_request_acct *a)
{
	struct task_struct *t = bpf_task_from_pid(tid);
	struct task_ctx *tc;
	bool held = false;

	if (!t)
		return false;
	tc = bpf_task_storage_get(&task_ctxs, t, 0, 0);
	if (tc && tc->holds_token && tc->tag == READ_ONCE(a->tag) && tc->owner == READ_ONCE(a->owner) &&
	    tc->acct_epoch == READ_ONCE(a->epoch))
		held = true;
	bpf_task_release(t);
	return held;
}

/* The oldest overdue waiter's request: is its one token held by a thread that does not know it? */
static __always_inline void check_leaked_token(u32 svc, u32 idx, struct tailctl_request_acct *a)
{
	struct leak_suspect *s = bpf_map_lookup_elem(&leak_suspects, &svc);
	u64 e = READ_ONCE(a->epoch);
	u32 tid = READ_ONCE(a->holder);
	u64 tag = READ_ONCE(a->tag);

	if (!s)
		return;
	if (READ_ONCE(a->alloc) != 1 || !acnt(READ_ONCE(a->holders)) || !tid || holder_holds(tid, a)) {
		s->tid = 0;
		return;
	}
	if (s->tid != tid || s->idx != idx || s->tag != tag || s->epoch != e) {
		s->tid = tid;
		s->idx = idx;
		s->tag = tag;
		s->epoch = e;
		return;
	}
	s->tid = 0;
	/* Only from the epoch it was seen in: a reset since took the token with it. */
	if (__sync_val_compare_and_swap(&a->holder, tid, 0) == tid &&
	    acct_dec(&a->holders, e, 0) == ACCT_DONE)
		count_leak(TAILCTL_LEAK_RECLAIM);
}

static __always_inline void check_waiters(u32 svc, u64 now)
{
	struct task_struct *p;
	u64 dsq = TAILCTL_THROTTLE_DSQ_BASE + svc;
	bool checked = false;

	if (!scx_bpf_dsq_nr_queued(dsq))
		return;
	/* Belt and braces: a queue with threads always has its bit. */
	waiters_set(&throttle_waiters_mask, svc);
	bpf_for_each(scx_dsq, p, dsq, 0) {
		struct task_ctx *tctx = task_ctx(p);
		struct tailctl_request_acct *a;
		s32 cpu;

		if (!tctx || wait_of(tctx, now) <= max_throttle_wait_ns)
			continue;
		/*
		 * Once per service and period, the first overdue waiter's request:
		 * a leak is a suspect seen again one period later, which a second
		 * call in the same walk would fake.
		 */
		a = checked ? NULL : acct_of(tctx);
		if (a)
			check_leaked_token(svc, tctx->acct_idx, a);
		checked = true;
		/* One kick per service: the CPU's ops.dispatch releases every overdue waiter. */
		cpu = bound_kick_cpu(p);
		if (cpu < 0)
			continue;
		scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		STAT_INC(bound_kicks);
		break;
	}
}

static int wait_timer_fn(void *map, int *key, struct bpf_timer *timer)
{
	u64 now = bpf_ktime_get_ns();
	u32 svc;

	bpf_rcu_read_lock();
	bpf_for(svc, 0, TAILCTL_MAX_SERVICES) {
		check_waiters(svc, now);
		job_check_waiters(svc, now);
	}
	bpf_rcu_read_unlock();
	bpf_timer_start(timer, wait_timer_period(), 0);
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(tailctl_init)
{
	struct wait_timer *wt;
	u32 svc, cpu;
	s32 ret;

	ret = scx_bpf_create_dsq(TAILCTL_SHARED_DSQ, -1);
	if (ret)
		return ret;
	if (llc_on()) {
		bpf_for(svc, 0, llc_count()) {
			ret = scx_bpf_create_dsq(llc_dsq(svc), -1);
			if (ret)
				return ret;
		}
	}
	bpf_for(svc, 0, TAILCTL_PRIO_LEVELS) {
		if (svc == TAILCTL_PRIO_NORMAL)
			continue;
		ret = scx_bpf_create_dsq(TAILCTL_PRIO_DSQ_BASE + svc, -1);
		if (ret)
			return ret;
	}
	prio_init_cpus();
	/*
	 * Every CPU names no request until a registered thread runs there. A
	 * zeroed entry would name tag 0 of entry 0, a real request (service
	 * 0's slot 0 in its first generation): cpus_naming would count such a
	 * CPU as its runner and kick it when it is serialized.
	 */
	bpf_for(cpu, 0, MAX_CPUS) {
		struct tailctl_cpu_run *cr = bpf_map_lookup_elem(&cpu_runs, &cpu);

		if (cr)
			cr->tag = NO_TAG;
	}
	bpf_for(svc, 0, TAILCTL_MAX_SERVICES) {
		ret = scx_bpf_create_dsq(TAILCTL_THROTTLE_DSQ_BASE + svc, -1);
		if (ret)
			return ret;
		ret = scx_bpf_create_dsq(TAILCTL_JOB_DSQ_BASE + svc, -1);
		if (ret)
			return ret;
	}
	wt = bpf_map_lookup_elem(&wait_timers, (const void *)&zero_key);
	if (!wt)
		return -ENOENT;
	ret = bpf_timer_init(&wt->timer, &wait_timers, CLOCK_MONOTONIC);
	if (ret)
		return ret;
	ret = bpf_timer_set_callback(&wt->timer, wait_timer_fn);
	if (ret)
		return ret;
	return bpf_timer_start(&wt->timer, wait_timer_period(), 0);
}

void BPF_STRUCT_OPS(tailctl_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

/*
 * The exit dump (printed by the daemon when the kernel ejects the scheduler,
 * e.g. a runnable task stall): the kernel lists every CPU's tasks with their
 * DSQ and flags; these add what tailctl keeps, so a stall says which cap or
 * queue the task waited behind. Only services with something queued or a
 * release in progress are listed.
 */
void BPF_STRUCT_OPS(tailctl_dump, struct scx_dump_ctx *dctx)
{
	u64 now = bpf_ktime_get_ns();
	u32 svc;

	scx_bpf_dump("tailctl: throttle_waiters_mask=0x%x job_waiters_mask=0x%x vtime_now=%llu nr_borrowing=%u",
		     READ_ONCE(throttle_waiters_mask), READ_ONCE(job_waiters_mask), READ_ONCE(vtime_now),
		     READ_ONCE(nr_borrowing));
	bpf_for(svc, 0, TAILCTL_MAX_SERVICES) {
		s32 nthr = scx_bpf_dsq_nr_queued(TAILCTL_THROTTLE_DSQ_BASE + svc);
		s32 njob = scx_bpf_dsq_nr_queued(TAILCTL_JOB_DSQ_BASE + svc);
		u32 rel = READ_ONCE(releasing[svc]), jrel = READ_ONCE(job_releasing[svc]);

		if (nthr <= 0 && njob <= 0 && !rel && !jrel)
			continue;
		scx_bpf_dump("\ntailctl: service %u: throttle queue %d (releasing %u), job queue %d (releasing %u)",
			     svc, nthr, rel, njob, jrel);
	}
	scx_bpf_dump("\ntailctl: dumped at %llu ns, wait bound %llu ns\n", now, max_throttle_wait_ns);
}

/* Per task in the exit dump: its binding, request, token and wait state (bound tasks only). */
void BPF_STRUCT_OPS(tailctl_dump_task, struct scx_dump_ctx *dctx, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);
	u64 now = bpf_ktime_get_ns(), at;

	if (!tctx || !tctx->bound)
		return;
	at = READ_ONCE(tctx->throttled_at_ns);
	scx_bpf_dump("  tailctl: svc=%d cg=%d tag=0x%llx acct=%u token=%u throttled=%u wait_began_ms_ago=%llu",
		     tctx->svc, tctx->cg, tctx->tag, tctx->acct_idx, tctx->holds_token, tctx->throttled,
		     at && now > at ? (now - at) / 1000000 : 0);
	scx_bpf_dump("\n  tailctl: overdue=%d (local %d) keep_wait=%d evict=%d bounced=%d unheld=%d running=%d",
		     tctx->overdue, tctx->overdue_local, tctx->keep_wait, tctx->evict, tctx->bounced,
		     tctx->counted_unheld, tctx->counted_running);
	at = READ_ONCE(tctx->job_wait_at_ns);
	scx_bpf_dump("\n  tailctl: job_token=%u job_waiting=%u job_on_cpu=%d borrowing=%d lent=%d job_wait_began_ms_ago=%llu\n",
		     tctx->job_token, tctx->job_waiting, tctx->job_on_cpu, tctx->job_borrowing, tctx->job_lent,
		     at && now > at ? (now - at) / 1000000 : 0);
}

SCX_OPS_DEFINE(tailctl_ops,
	       .select_cpu = (void *)tailctl_select_cpu,
	       .enqueue = (void *)tailctl_enqueue,
	       .dispatch = (void *)tailctl_dispatch,
	       .running = (void *)tailctl_running,
	       .stopping = (void *)tailctl_stopping,
	       .tick = (void *)tailctl_tick,
	       .yield = (void *)tailctl_yield,
	       .runnable = (void *)tailctl_runnable,
	       .cpu_release = (void *)tailctl_cpu_release,
	       .quiescent = (void *)tailctl_quiescent,
	       .enable = (void *)tailctl_enable,
	       .disable = (void *)tailctl_disable,
	       .init_task = (void *)tailctl_init_task,
	       .exit_task = (void *)tailctl_exit_task,
	       .init = (void *)tailctl_init,
	       .exit = (void *)tailctl_exit,
	       .dump = (void *)tailctl_dump,
	       .dump_task = (void *)tailctl_dump_task,
	       .name = "tailctl");
