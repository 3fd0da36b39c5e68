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
 *  - Cap enforcement: a thread may be handed to a CPU only while holding one of
 *    its request's alloc tokens. Without one it waits in its service's throttle
 *    DSQ; ops.dispatch hands a freed token to the oldest waiter. Rotation: a
 *    holder whose request has waiters gets no slice extension, so at slice end
 *    it is re-enqueued (SCX_ENQ_LAST) behind them; a token freed while its
 *    holder keeps running (its worker left the request) kicks an idle CPU to
 *    hand it on. A thread caught running without a token (queued before the
 *    cap) is preempted.
 *  - Counting runners: ops.running announces a thread in `arriving` before it
 *    reads the cap, and check_threshold sets the cap before reading running +
 *    arriving (full barriers on both sides), so a racing thread is either seen
 *    (and kicked) or backs out; only threads past the check count in
 *    `running`, so one that backs out never shows as a second runner.
 *  - Liveness: a waiter older than max_throttle_wait_ns is dispatched and runs
 *    its slice regardless (it is not bounced again: that would livelock), so a
 *    token that is never handed on cannot stall a thread into the watchdog.
 *    Such runs break the cap on purpose and are counted (overdue_runs, and
 *    per request in req_acct.overdue).
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
	/* The request this task is charged to while it runs (tag, acct index), or tag ~0. */
	u64 tag;
	u32 acct_idx;
	bool bound;
	bool holds_token;
	bool counted_running;
	bool bounced;
	/* Dispatched past its wait bound without a token: runs this once regardless. */
	bool overdue;
	/* ... and counted in its request's overdue_running. */
	bool counted_overdue;
	bool evict;
	bool throttled;
	u64 charge_from_ns;
	u64 throttled_at_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

#define NO_TAG (~0ULL)
#define MAX_CPUS 1024

/* What each CPU runs now, for registered workers: lets a serialization kick exactly the CPUs running the request. */
struct cpu_run {
	u64 tag;
	u32 acct_idx;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_run);
} cpu_runs SEC(".maps");

static __always_inline void set_cpu_run(u64 tag, u32 idx)
{
	u32 cpu = bpf_get_smp_processor_id();
	struct cpu_run *cr = bpf_map_lookup_elem(&cpu_runs, &cpu);

	if (cr) {
		cr->tag = tag;
		cr->acct_idx = idx;
	}
}

/* Preempt every other CPU running a thread of request @tag (it just got capped). */
static __always_inline void kick_request_cpus(u64 tag, u32 idx)
{
	u32 self = bpf_get_smp_processor_id(), n = scx_bpf_nr_cpu_ids(), cpu;

	if (n > MAX_CPUS)
		n = MAX_CPUS;
	bpf_for(cpu, 0, n) {
		struct cpu_run *cr = bpf_map_lookup_elem(&cpu_runs, &cpu);

		if (cpu != self && cr && cr->tag == tag && cr->acct_idx == idx)
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
	}
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

/* A service's region, or NULL if the slot is empty or its header is not sane. */
static __always_inline struct tailctl_region *service_region(u32 svc)
{
	struct tailctl_region *r;
	void *inner;
	u32 zero = 0;

	if (svc >= TAILCTL_MAX_SERVICES)
		return NULL;
	inner = bpf_map_lookup_elem(&regions, &svc);
	if (!inner)
		return NULL;
	r = bpf_map_lookup_elem(inner, &zero);
	if (!r)
		return NULL;
	if (READ_ONCE(r->header.magic) != TAILCTL_REGION_MAGIC) {
		STAT_INC(invalid_hints);
		return NULL;
	}
	return r;
}

/*
 * (Re)bind @p to its service slot if the daemon registered its tid. Looked up
 * at every call: unregistration takes effect at once.
 */
static __always_inline struct task_ctx *resolve_task(struct task_struct *p)
{
	struct tailctl_worker_ref *ref;
	struct task_ctx *tctx;
	u32 tid = p->pid, zero = 0, *nr;

	nr = bpf_map_lookup_elem(&registered, &zero);
	if (!nr || !*nr)
		return NULL;
	ref = bpf_map_lookup_elem(&worker_tids, &tid);
	if (!ref || ref->service >= TAILCTL_MAX_SERVICES || ref->worker >= TAILCTL_MAX_WORKERS ||
	    !tid_binding_matches(p, ref)) {
		tctx = task_ctx(p);
		if (tctx)
			tctx->svc = -1;
		return NULL;
	}
	tctx = bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return NULL;
	if (!tctx->bound || tctx->svc != (s32)ref->service || tctx->worker != ref->worker) {
		tctx->bound = true;
		tctx->tag = NO_TAG;
		tctx->holds_token = false;
		tctx->counted_running = false;
	}
	tctx->svc = ref->service;
	tctx->worker = ref->worker;
	return tctx;
}

/*
 * The request @tctx's worker is on now, validated against the region: returns
 * its tag and sets *acct_idx, or NO_TAG.
 */
static __always_inline u64 current_request(struct task_ctx *tctx, struct tailctl_region *r, u32 *acct_idx)
{
	struct tailctl_worker_slot *w;
	struct tailctl_request_slot *req;
	u32 slot, gen, widx = tctx->worker;
	u64 cur;

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
	cur = READ_ONCE(w->current);
	if (cur == NO_TAG)
		return NO_TAG;
	slot = (u32)cur;
	gen = (u32)(cur >> 32);
	if (slot >= TAILCTL_MAX_REQUESTS) {
		STAT_INC(invalid_hints);
		return NO_TAG;
	}
	req = &r->requests[slot];
	/* A stale tag (the slot was reused) is ignored, not charged. */
	if (READ_ONCE(req->generation) != gen)
		return NO_TAG;
	*acct_idx = (u32)tctx->svc * TAILCTL_MAX_REQUESTS + slot;
	return cur;
}

/* The kernel's entry for request @tag, reset when the slot holds a new request. */
static __always_inline struct tailctl_request_acct *request_acct(u32 idx, u64 tag)
{
	struct tailctl_request_acct *a = bpf_map_lookup_elem(&req_acct, &idx);
	u64 old;

	if (!a)
		return NULL;
	old = READ_ONCE(a->tag);
	if (old != tag) {
		if (__sync_val_compare_and_swap(&a->tag, old, tag) != old)
			return NULL;
		a->work_ns = 0;
		a->running = 0;
		a->max_running_settled = 0;
		a->holders = 0;
		a->alloc = 0;
		a->serialized_at_ns = 0;
		a->settled_at_ns = 0;
		a->throttled = 0;
		a->waiting = 0;
		a->max_running = 0;
		a->bounces = 0;
		a->bounced_ns = 0;
		a->arriving = 0;
		a->overdue_running = 0;
		a->overdue = 0;
	}
	return a;
}

/* Take one of the request's alloc tokens; always succeeds for uncapped requests. */
static __always_inline bool claim_token(struct task_ctx *tctx, struct tailctl_request_acct *a)
{
	u32 h;

	if (tctx->holds_token)
		return true;
	if (!a->alloc)
		return false; /* no cap: no token needed (caller checks alloc first) */
	h = READ_ONCE(a->holders);
	if (h >= a->alloc)
		return false;
	if (__sync_val_compare_and_swap(&a->holders, h, h + 1) != h)
		return false;
	tctx->holds_token = true;
	return true;
}

static __always_inline void release_token(struct task_struct *p, struct task_ctx *tctx)
{
	struct tailctl_request_acct *a;
	u32 idx = tctx->acct_idx;
	s32 cpu;

	if (!tctx->holds_token)
		return;
	tctx->holds_token = false;
	a = bpf_map_lookup_elem(&req_acct, &idx);
	if (a && a->tag == tctx->tag && a->holders > 0)
		__sync_fetch_and_sub(&a->holders, 1);
	/*
	 * A waiter may take the token now, but only a CPU running ops.dispatch
	 * hands it over: wake an idle one rather than wait for a busy CPU's
	 * slice to end (the holder may release while it keeps running, e.g.
	 * when its worker leaves the request to wait in a join).
	 */
	if (a && a->waiting && tctx->svc >= 0 &&
	    scx_bpf_dsq_nr_queued(TAILCTL_THROTTLE_DSQ_BASE + tctx->svc)) {
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
}

/*
 * Threads that may be running the request: counted runners plus those still
 * in begin_request's cap check. Serialization has settled once this is <= 1.
 */
static __always_inline u32 maybe_running(struct tailctl_request_acct *a)
{
	return __sync_fetch_and_add(&a->running, 0) + __sync_fetch_and_add(&a->arriving, 0);
}

/* Serialize the request if its work crossed the threshold at the current load. */
static __always_inline void check_threshold(struct task_ctx *tctx, struct tailctl_region *r,
					    struct tailctl_request_acct *a, u64 now)
{
	struct tailctl_service *svc;
	struct tailctl_request_slot *req;
	u32 sidx = tctx->svc, q, n, slot = (u32)tctx->tag;
	u64 thr, old;

	if (a->serialized_at_ns || slot >= TAILCTL_MAX_REQUESTS)
		return;
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
	if (!thr || a->work_ns < thr)
		return;

	__sync_lock_test_and_set(&a->alloc, 1);
	a->serialized_at_ns = now;
	/* The thread that saw the crossing keeps running with the one token; the others are preempted now. */
	claim_token(tctx, a);
	kick_request_cpus(tctx->tag, tctx->acct_idx);
	if (maybe_running(a) <= 1)
		a->settled_at_ns = now;
	STAT_INC(serializations);
	__sync_fetch_and_add(&r->header.kernel_serialized, 1);

	/* Publish: set SERIALIZED unless the slot moved on (one CAS on flags+generation). */
	req = &r->requests[slot];
	old = *(volatile u64 *)&req->flags;
	if ((u32)(old >> 32) == (u32)(tctx->tag >> 32))
		__sync_val_compare_and_swap((u64 *)&req->flags, old, old | TAILCTL_FLAG_SERIALIZED);
	req->kernel_alloc = 1;
}

/* Charge CPU time since the last charge point to the task's request. */
static __always_inline void charge_request(struct task_ctx *tctx, struct tailctl_region *r, u64 now,
					   u64 cpu_ns)
{
	struct tailctl_request_acct *a;
	u32 idx = tctx->acct_idx, slot = (u32)tctx->tag, widx = tctx->worker;
	u64 delta;

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
	a = bpf_map_lookup_elem(&req_acct, &idx);
	if (!a || a->tag != tctx->tag)
		return;
	/* A thread sent back for lack of a token did no work for the request; its time is tracked apart. */
	if (tctx->bounced) {
		__sync_fetch_and_add(&a->bounced_ns, delta);
		return;
	}
	__sync_fetch_and_add(&a->work_ns, delta);
	if (slot < TAILCTL_MAX_REQUESTS) {
		r->requests[slot].kernel_work_ns = a->work_ns;
	}
	if (widx < TAILCTL_MAX_WORKERS)
		__sync_fetch_and_add(&r->workers[widx].kernel_work_ns, delta);
	check_threshold(tctx, r, a, now);
}

/* Start charging @p to the request its worker is on now. */
static __always_inline void begin_request(struct task_struct *p, struct task_ctx *tctx,
					  struct tailctl_region *r, u64 now)
{
	struct tailctl_request_acct *a;
	u32 idx = 0, slot, running;
	u64 tag = current_request(tctx, r, &idx);

	if (tag != tctx->tag)
		release_token(p, tctx);
	tctx->tag = tag;
	tctx->acct_idx = idx;
	tctx->charge_from_ns = p->se.sum_exec_runtime;
	tctx->counted_running = false;
	tctx->counted_overdue = false;
	tctx->bounced = false;
	tctx->evict = false;
	if (tag == NO_TAG)
		return;
	a = request_acct(idx, tag);
	if (!a) {
		tctx->tag = NO_TAG;
		return;
	}
	/*
	 * Announce "arriving" before reading the cap, while check_threshold sets
	 * the cap before reading running + arriving (both through full-barrier
	 * atomics): a thread racing with the serialization either is seen (and
	 * kicked through cpu_runs) or sees the cap and backs out here. Only a
	 * thread past the check counts in `running`, so one that backs out never
	 * appears as a second runner.
	 */
	set_cpu_run(tag, idx);
	__sync_fetch_and_add(&a->arriving, 1);
	if (READ_ONCE(a->alloc) && !claim_token(tctx, a) && !tctx->overdue) {
		/*
		 * Queued before the cap: back out; it never counts as running. An
		 * overdue waiter is not sent back: bouncing it again would turn the
		 * wait bound into a livelock whenever the token is never freed.
		 */
		__sync_fetch_and_sub(&a->arriving, 1);
		set_cpu_run(NO_TAG, 0);
		if (a->serialized_at_ns && !a->settled_at_ns && maybe_running(a) <= 1)
			a->settled_at_ns = now;
		__sync_fetch_and_add(&a->bounces, 1);
		tctx->bounced = true;
		bounce(p, tctx);
		return;
	}
	running = __sync_fetch_and_add(&a->running, 1) + 1;
	__sync_fetch_and_sub(&a->arriving, 1);
	/*
	 * A thread let through by the wait bound is reported apart (overdue):
	 * the cap's own accounting (max_running_settled) counts token holders.
	 */
	if (tctx->overdue && a->alloc && !tctx->holds_token) {
		tctx->counted_overdue = true;
		__sync_fetch_and_add(&a->overdue_running, 1);
		__sync_fetch_and_add(&a->overdue, 1);
	}
	running -= READ_ONCE(a->overdue_running);
	tctx->counted_running = true;
	if (running > a->max_running)
		a->max_running = running;
	slot = (u32)tag;
	if (slot < TAILCTL_MAX_REQUESTS)
		r->requests[slot].kernel_running = running;
	if (a->serialized_at_ns && a->settled_at_ns && running > a->max_running_settled)
		a->max_running_settled = running;
}

/* Stop charging @p: account the last interval and drop its running count. */
static __always_inline void end_request(struct task_struct *p, struct task_ctx *tctx,
					struct tailctl_region *r, u64 now)
{
	struct tailctl_request_acct *a;
	u32 idx = tctx->acct_idx, slot = (u32)tctx->tag, running;

	if (tctx->tag == NO_TAG)
		return;
	if (r)
		charge_request(tctx, r, now, p->se.sum_exec_runtime);
	if (!tctx->counted_running)
		return;
	tctx->counted_running = false;
	set_cpu_run(NO_TAG, 0);
	a = bpf_map_lookup_elem(&req_acct, &idx);
	if (!a || a->tag != tctx->tag || !a->running)
		return;
	running = __sync_fetch_and_sub(&a->running, 1) - 1;
	if (tctx->counted_overdue) {
		tctx->counted_overdue = false;
		if (a->overdue_running)
			__sync_fetch_and_sub(&a->overdue_running, 1);
	}
	if (r && slot < TAILCTL_MAX_REQUESTS)
		r->requests[slot].kernel_running = running;
	if (a->serialized_at_ns && !a->settled_at_ns && maybe_running(a) <= 1)
		a->settled_at_ns = now;
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
	a = request_acct(idx, tag);
	if (!a || !a->alloc)
		return false;
	if (tctx->holds_token)
		return false;
	/* Others are waiting for this request's token: queue behind them (rotation). */
	if (READ_ONCE(a->waiting))
		return true;
	return !claim_token(tctx, a);
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
	struct task_ctx *tctx;
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	tctx = resolve_task(p);
	/* A registered worker goes through enqueue, where its request's cap is checked. */
	if (is_idle && !tctx) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
		STAT_INC(direct_dispatches);
	}
	return cpu;
}

void BPF_STRUCT_OPS(tailctl_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx;
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

	tctx = resolve_task(p);
	if (tctx && must_throttle(p, tctx)) {
		struct tailctl_request_acct *a;
		u32 idx = tctx->acct_idx;

		tctx->throttled = true;
		tctx->throttled_at_ns = bpf_ktime_get_ns();
		a = bpf_map_lookup_elem(&req_acct, &idx);
		if (a) {
			__sync_fetch_and_add(&a->throttled, 1);
			__sync_fetch_and_add(&a->waiting, 1);
		}
		scx_bpf_dsq_insert(p, TAILCTL_THROTTLE_DSQ_BASE + tctx->svc, slice_ns, enq_flags);
		STAT_INC(throttled);
		return;
	}

	/* Nothing else wants this CPU (ENQ_LAST): keep running, no queue round trip. */
	if (enq_flags & SCX_ENQ_LAST) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		STAT_INC(slice_extensions);
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

/*
 * Hand a freed token to the oldest waiter of service @svc whose request has
 * one (or whose wait exceeded the bound, or whose request is gone).
 */
static __always_inline bool dispatch_throttled(u32 svc, u64 now)
{
	struct task_struct *p;
	u64 dsq = TAILCTL_THROTTLE_DSQ_BASE + svc;

	if (!scx_bpf_dsq_nr_queued(dsq))
		return false;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		struct tailctl_request_acct *a = NULL;
		struct task_ctx *tctx = task_ctx(p);
		bool go = true;
		u32 idx;

		if (tctx) {
			idx = tctx->acct_idx;
			a = bpf_map_lookup_elem(&req_acct, &idx);
			if (a && a->tag != tctx->tag)
				a = NULL;
			if (a && a->alloc && !claim_token(tctx, a)) {
				go = now - tctx->throttled_at_ns > max_throttle_wait_ns;
				tctx->overdue = go;
			}
		}
		if (!go)
			continue;
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0)) {
			if (a && a->waiting)
				__sync_fetch_and_sub(&a->waiting, 1);
			if (tctx) {
				u64 waited = now - tctx->throttled_at_ns;
				struct tailctl_stats *st = stats_cpu();

				tctx->throttled = false;
				if (st && waited > st->max_throttle_wait_ns)
					st->max_throttle_wait_ns = waited;
			}
			STAT_INC(rotations);
			return true;
		}
	}
	return false;
}

void BPF_STRUCT_OPS(tailctl_dispatch, s32 cpu, struct task_struct *prev)
{
	u64 now = bpf_ktime_get_ns();
	u32 svc;

	bpf_for(svc, 0, TAILCTL_MAX_SERVICES) {
		if (dispatch_throttled(svc, now))
			return;
	}

	if (scx_bpf_dsq_move_to_local(TAILCTL_SHARED_DSQ, 0)) {
		STAT_INC(shared_dispatches);
		return;
	}

	/*
	 * Nothing else is waiting: let the previous task keep the CPU for another
	 * slice instead of going through an idle cycle.
	 */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED)) {
		struct task_ctx *ptctx = task_ctx(prev);

		/* A thread bounced for lack of a token goes back through enqueue. */
		if (ptctx && ptctx->svc >= 0 && ptctx->evict)
			return;
		/*
		 * Rotation: a token holder whose request has threads waiting gives
		 * the CPU up at the end of its slice (ENQ_LAST re-enqueues it
		 * behind them) instead of having its slice extended, so the waiters
		 * get the token within a few slices rather than at the wait bound.
		 */
		if (ptctx && ptctx->svc >= 0 && ptctx->holds_token) {
			u32 idx = ptctx->acct_idx;
			struct tailctl_request_acct *a = bpf_map_lookup_elem(&req_acct, &idx);

			if (a && a->tag == ptctx->tag && READ_ONCE(a->waiting))
				return;
		}
		charge_vtime(prev);
		prev->scx.slice = slice_ns;
		STAT_INC(slice_extensions);
	}
}

void BPF_STRUCT_OPS(tailctl_running, struct task_struct *p)
{
	struct task_ctx *tctx;
	struct tailctl_region *r;

	if (time_before(vtime_now, p->scx.dsq_vtime))
		vtime_now = p->scx.dsq_vtime;

	tctx = resolve_task(p);
	if (!tctx)
		return;
	r = service_region(tctx->svc);
	if (r)
		begin_request(p, tctx, r, bpf_ktime_get_ns());
}

/*
 * Every tick: charge the interval, follow the worker to its current request,
 * and enforce a cap that appeared while it ran.
 */
void BPF_STRUCT_OPS(tailctl_tick, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);
	struct tailctl_region *r;
	u32 idx = 0;
	u64 now, tag;

	if (!tctx || tctx->svc < 0)
		return;
	r = service_region(tctx->svc);
	if (!r)
		return;
	now = bpf_ktime_get_ns();
	tag = current_request(tctx, r, &idx);
	if (tag != tctx->tag) {
		end_request(p, tctx, r, now);
		begin_request(p, tctx, r, now);
		return;
	}
	charge_request(tctx, r, now, p->se.sum_exec_runtime);
	if (tctx->tag != NO_TAG) {
		struct tailctl_request_acct *a = bpf_map_lookup_elem(&req_acct, &idx);

		if (a && a->tag == tctx->tag && a->alloc && !claim_token(tctx, a) && !tctx->overdue)
			bounce(p, tctx);
	}
}

void BPF_STRUCT_OPS(tailctl_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx;

	charge_vtime(p);

	tctx = task_ctx(p);
	if (!tctx || tctx->svc < 0)
		return;
	end_request(p, tctx, service_region(tctx->svc), bpf_ktime_get_ns());
	if (tctx->overdue) {
		tctx->overdue = false;
		STAT_INC(overdue_runs);
	}
	/* Rotation: a freed token goes to a waiter; make sure some CPU looks. */
	if (tctx->holds_token) {
		release_token(p, tctx);
		if (scx_bpf_dsq_nr_queued(TAILCTL_THROTTLE_DSQ_BASE + tctx->svc))
			scx_bpf_kick_cpu(scx_bpf_task_cpu(p), 0);
	}
}

/* (If another exit_task appears, call unbind_exited_task() from it instead.) */
void BPF_STRUCT_OPS(tailctl_exit_task, struct task_struct *p, struct scx_exit_task_args *args)
{
	unbind_exited_task(p);
}

void BPF_STRUCT_OPS(tailctl_enable, struct task_struct *p)
{
	p->scx.dsq_vtime = vtime_now;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(tailctl_init)
{
	u32 svc;
	s32 ret;

	ret = scx_bpf_create_dsq(TAILCTL_SHARED_DSQ, -1);
	if (ret)
		return ret;
	bpf_for(svc, 0, TAILCTL_MAX_SERVICES) {
		ret = scx_bpf_create_dsq(TAILCTL_THROTTLE_DSQ_BASE + svc, -1);
		if (ret)
			return ret;
	}
	return 0;
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
	       .tick = (void *)tailctl_tick,
	       .exit_task = (void *)tailctl_exit_task,
	       .enable = (void *)tailctl_enable,
	       .init = (void *)tailctl_init,
	       .exit = (void *)tailctl_exit,
	       .name = "tailctl");
