# Core-allotment guest tests (issue 12, the kernel/daemon half), sourced by
# guest-tests.sh (which provides start_sched/stop_sched/pass/fail/jget, $bin,
# $out, $PY, $ktest, $wl). Every figure is the kernel's own: per-job CPU time
# from the pinned job_acct map (sum_exec_runtime of the job's threads, with
# the part run on borrowed CPUs apart), allotments from services, latencies
# from the stats map. Timings are reported, never asserted (TCG drifts).
#   allotequi:   a wide service (2 x CPUs workers) and a narrow one (CPUs/2
#                workers), both CPU-bound, first with --allot off (the wide
#                one takes most of the machine: per-thread fairness), then
#                with --allot equi: each is allotted CPUs/2, and the wide one
#                runs at most CPUs/2 cores within its allotment.
#   allotexit:   under equi, the narrow service is killed: the wide one is
#                allotted every CPU (the exit is acted on at once, not at the
#                next quantum; the latency from the kill to the decision is
#                reported) and then uses more than half the machine.
#   allotstarve: two wide capped services and an unregistered one-thread
#                neighbour: the neighbour keeps running, every job thread
#                still runs (the longest wait for a job token is reported with
#                the watchdog margin), the scheduler stays loaded; the kernel
#                counts the capped jobs' token holders queued behind the
#                neighbour (job_acct.token_wait_ns: above 0, at most the
#                allotted core-time).
#   allotdeq:    under --allot deq, a low-desire service (n workers, one
#                request of one item in flight: one busy worker) and a busy
#                one: the low one is allotted its desire (1, at most n/2 - 1)
#                and the busy one the rest, which it uses (more than an equal
#                share of the machine within its own allotment); then the low
#                one's load grows (16 requests in flight): its allotment
#                rises and the busy one's falls. From the controller's own
#                trace (--allot-trace): the low one's allotment in each
#                phase-1 round (most must be its desire), and the number of
#                controller rounds from the ktest's growth stamp to the
#                rise: at most 2 (with the wall-clock quanta and the round
#                period, which TCG stretches, reported).
#   allotcgroup: a cgroup job (--job): an unmodified CPU-bound process with
#                2 x CPUs threads (tailctl-ktest hog) in a cgroup named with
#                --job, beside a registered wide service, under --allot equi:
#                the cgroup job is allotted CPUs/2 and runs at most about that
#                within it (the kernel's job_acct CPU time of its slot); the
#                service gets a real part of its CPUs/2; every hog thread
#                progresses (per-thread CPU time from /proc), the longest wait
#                for a job token is reported with the watchdog margin, the
#                scheduler stays loaded, `tailctl maps` lists the job (its
#                efficiency 1.00: a cgroup job's CPU time is all work).
#   allotcgdeq:  the same under --allot deq: both jobs desire every CPU (the hog's threads
#                runnable beyond its allotment are its queued work, SAWS's Q), so the
#                cgroup job's usual allotment over the later half of the controller's
#                quanta (--allot-trace) is at least CPUs/2 (it stayed at 1 while a job
#                without a region had Q = 0), capped as under equi.
#   allotliar:   a low-load service inflating its desire inputs (greedy --inflate-desire)
#                beside an honest CPU-bound one under deq and asteal: the lie reaches the
#                controller, the honest one keeps its equal share.
#   allotcgasteal: the same under --allot asteal (the one guest test of A-Steal in the
#                daemon): the hog uses what it is allotted, so A-Steal doubles its desire;
#                it is allotted at least CPUs/2 in at least a third of the later quanta
#                (A-Steal halves a grown allotment whose first quantum was not fully used:
#                its distribution is reported); capped; nothing starves.
#   allotdrep:   under --allot drep (AMCilk's mean-flow-time policy), which moves cores only
#                when jobs come and go: a wide service alone is allotted every CPU; a second
#                one arrives and the two split the CPUs (both at least 1, the sum every CPU)
#                and keep that split in every quantum round while both run (DREP decides
#                nothing on a quantum); each runs within its allotment (job_acct CPU time);
#                the second is killed and the first is allotted every CPU again in the first
#                round without it (the kill -> decision latency is reported); nothing starves.
#   allotcgdyn:  cgroup jobs that start and end at any time (--job with a
#                `*` pattern that matches nothing at start), beside a
#                registered wide service under --allot equi: a cgroup created
#                after the start becomes a job (job_cgroups maps its id to a
#                slot holding a cgroup job), is allotted CPUs/2 and capped
#                (job_acct CPU time); after its hog is killed and the cgroup
#                removed, its slot is freed (services, job_cgroups) and the
#                service is allotted every CPU; a second new cgroup takes the
#                same slot with a new epoch and a clean job_acct entry (its
#                CPU time no more than its age allows) and is capped too;
#                8 more matching cgroups (9 wanted, 8 at most) give one
#                clear log line, not a crash, and all slots free again
#                after they are removed; watchdog margin reported.
#   allotcgnest: descendants and nested job cgroups: --job OUTER and
#                --job 'OUTER/inner-*'; a hog in OUTER/child (a descendant,
#                not itself named) and one in OUTER/inner-1/leaf (nearest job
#                ancestor: inner-1): both jobs are allotted CPUs/2 and each
#                runs about that (the child's hog is charged to OUTER, the
#                leaf's to inner-1, not to OUTER); every hog thread of the
#                child progresses; watchdog margin reported.
#   allotreqalloc: per-request allocations within an allotment
#                (--request-shares): one
#                service (CPUs workers, alone under --allot equi: allotted
#                every CPU) keeps 2 requests of 8 x 20 ms items in flight; the
#                kernel gives each active request CPUs/2 (its kernel_alloc)
#                and caps it there with the request tokens: from req_acct,
#                no request whose share never changed was seen with more
#                threads running than its share; starts over the share (a
#                share that shrank under running holders) are counted and
#                reported.
#   allotmug:    mugging (SAWS): a registered service with 2 x CPUs workers
#                beside another job under --allot equi (allotted CPUs/2,
#                below its worker count): the kernel marks the workers it
#                queues in the job queue descheduled in the region (stats
#                allot_descheds; the service samples its slots' flags every
#                2 ms), its running workers mug those deques (the runtime's
#                PoolStats::desched_mugs), and both services complete
#                requests; the scheduler stays loaded.
# Verifying the scheduler takes minutes under TCG: consecutive tests that
# want the same --allot policy share one scheduler (allot_sched/allot_end);
# its exit status is still checked, by whichever test stops it.

# allot_sched POLICY: a scheduler with --allot POLICY, the running one if it has that policy.
allot_cur=""
allot_sched() {
  if [ -n "$sched_pid" ] && [ "$allot_cur" = "$1" ] && sched_alive; then return 0; fi
  if [ -n "$sched_pid" ]; then
    allot_cur=""
    stop_sched || return 2
  fi
  allot_cur=$1
  # The controller's per-round trace (--allot-trace): allotdeq counts rounds from it.
  if [ "$1" = off ]; then start_sched; else start_sched --allot "$1" --allot-trace "$out/allot-trace-$1.csv"; fi
}
# The policy an allot test starts with.
allot_first_policy() {
  case $1 in allotcgroup) echo allotcgroup ;; allotcgdeq) echo allotcgdeq ;; allotcgasteal) echo allotcgasteal ;; allotdrep) echo drep ;; allotcgdyn) echo cgdyn ;; allotcgnest) echo cgnest ;; allotreqalloc) echo reqshares ;; allotequi) echo off ;; allotexit | allotstarve | allotmug) echo equi ;; allotdeq | allotliar) echo deq ;; *) echo none ;; esac
}
# allot_end TEST: stop the scheduler unless the next test starts with the same policy.
allot_end() {
  local i next=""
  for i in "${!tests[@]}"; do [ "${tests[$i]}" = "$1" ] && next=${tests[$((i + 1))]:-}; done
  if [ -n "$next" ] && [ "$(allot_first_policy "$next")" = "$allot_cur" ]; then return 0; fi
  allot_cur=""
  stop_sched
}

# Per-job figures between two job_acct/services dumps: JSON {pid: {...}}.
# The time of a snapshot is the middle of the job_acct dump (which takes seconds under TCG),
# not the end of the services dump after it: that would stretch every interval.
allot_jobs_json() {
  local t0 t1
  t0=$(date +%s%N)
  head -1 /proc/stat >"$1.stat"
  # The daemon's CPU (utime + stime: scaled from its threads' runtime, not sampled by ticks).
  [ -n "$sched_pid" ] && awk '{print $14 + $15}' "/proc/$sched_pid/stat" >"$1.daemon" 2>/dev/null
  "$wl/tailctl" maps dump job_acct --json >"$1.acct" 2>>"$out/allot.err" || return 1
  head -1 /proc/stat >>"$1.stat"
  t1=$(date +%s%N)
  "$wl/tailctl" maps dump services --json >"$1.svc" 2>>"$out/allot.err" || return 1
  echo $(((t0 + t1) / 2)) >"$1.t"
}
# allot_machine SNAP1 SNAP2: where the guest's CPUs went between two snapshots, in cores
# (/proc/stat, each snapshot the mean of its readings before and after its job_acct dump):
# {"idle", "user", "system", "irq", "daemon"}, for comparing with the jobs' cores
# (allot_cores). Under TCG on a loaded host the guest loses timer ticks, so user/system
# (tick-sampled) come out low; idle (clock-based with NO_HZ) and daemon (scaled from runtime)
# do not.
allot_machine() {
  $PY - "$1" "$2" <<'PY'
import json, os, sys
hz = os.sysconf("SC_CLK_TCK")
def load(p):
    rows = [[int(v) for v in l.split()[1:9]] for l in open(p + ".stat")]
    return [sum(c) / len(rows) for c in zip(*rows)], int(open(p + ".t").read())
(c1, t1), (c2, t2) = load(sys.argv[1]), load(sys.argv[2])
dt = max((t2 - t1) / 1e9, 1e-9)
d = [(b - a) / hz / dt for a, b in zip(c1, c2)]
try:
    daemon = round((int(open(sys.argv[2] + ".daemon").read()) - int(open(sys.argv[1] + ".daemon").read())) / hz / dt, 3)
except (OSError, ValueError):
    daemon = None
# user nice system idle iowait irq softirq steal
print(json.dumps({"idle": round(d[3] + d[4], 3), "user": round(d[0] + d[1], 3),
                  "system": round(d[2], 3), "irq": round(d[5] + d[6] + d[7], 3), "daemon": daemon}))
PY
}
# allot_cores SNAP1 SNAP2: per pid, cores within the allotment, borrowed cores, allotment.
allot_cores() {
  $PY - "$1" "$2" <<'PY'
import json, sys
def load(p):
    acct = {e["key"]: e["value"] for e in json.load(open(p + ".acct"))}
    svc = {e["key"]: e["value"] for e in json.load(open(p + ".svc"))}
    t = int(open(p + ".t").read())
    return acct, svc, t
a1, s1, t1 = load(sys.argv[1]); a2, s2, t2 = load(sys.argv[2])
dt = max((t2 - t1) / 1e9, 1e-9)
res = {}
# Keyed by job_acct (kernel-only, it outlives the registration): pid = owner's low 32 bits.
for k, y in a2.items():
    x = a1.get(k)
    if not y["owner"] or not x or x["owner"] != y["owner"]:
        continue
    s = dict(s2.get(k) or {})
    if s.get("pid") != y["owner"] & 0xffffffff:
        s = {"pid": y["owner"] & 0xffffffff, "allot": y["allot"], "desire": None}
    cpu = (y["cpu_ns"] - x["cpu_ns"]) / 1e9 / dt
    bor = (y["borrowed_ns"] - x["borrowed_ns"]) / 1e9 / dt
    # Allotted core-time its token holders spent queued for a CPU others held, in cores.
    tw = (y.get("token_wait_ns", 0) - x.get("token_wait_ns", 0)) / 1e9 / dt
    res[str(s["pid"])] = {"slot": k, "cores": round(cpu, 3), "own": round(cpu - bor, 3), "borrowed": round(bor, 3),
                          "token_wait": round(tw, 4),
                          "allot": s["allot"], "desire": s["desire"], "reallocs": y["reallocs"],
                          "lat_mean_us": round(y["lat_sum_ns"] / y["lat_count"] / 1e3, 1) if y["lat_count"] else None,
                          "max_wait_ms": round(y["max_wait_ns"] / 1e6, 1), "overdue": y["overdue"]}
print(json.dumps(res))
PY
}
# The scheduler's allotment counters (summed over CPUs) as JSON.
allot_stats() {
  "$wl/tailctl" maps dump stats --json 2>>"$out/allot.err" | $PY -c '
import json, sys
tot = {}
for e in json.load(sys.stdin):
    for c in e["values"]:
        for k, v in c["value"].items():
            if not k.startswith("allot_") and k != "max_throttle_wait_ns":
                continue
            if isinstance(v, list):
                tot[k] = [a + b for a, b in zip(tot.get(k, [0] * len(v)), v)]
            elif k.endswith("max_ns") or k.endswith("max_wait_ns"):
                tot[k] = max(tot.get(k, 0), v)
            else:
                tot[k] = tot.get(k, 0) + v
n = tot.get("allot_enforced", 0)
tot["lat_mean_us"] = round(tot.get("allot_lat_sum_ns", 0) / n / 1e3, 1) if n else None
tot["watchdog_margin_ms"] = 30000 - max(tot.get("allot_max_wait_ns", 0), tot.get("max_throttle_wait_ns", 0)) // 1000000
print(json.dumps(tot))'
}
# allot_wait_allot PID N TRIES PAUSE: poll job_acct until the job of PID is allotted N (at most
# TRIES polls PAUSE s apart); prints "decided_at_ns lat_last_ns enforced_at_ns", or nothing.
allot_wait_allot() {
  local got="" _
  for _ in $(seq 1 "$3"); do
    got=$("$wl/tailctl" maps dump job_acct --json 2>/dev/null | $PY -c '
import json, sys
for e in json.load(sys.stdin):
    v = e["value"]
    if v["owner"] & 0xffffffff == int(sys.argv[1]) and v["allot"] == int(sys.argv[2]):
        print(v["decided_at_ns"], v["lat_last_ns"], v["enforced_at_ns"]); break' "$1" "$2")
    [ -n "$got" ] && break
    sleep "$4"
  done
  echo "$got"
}
# A service missing from job_acct most likely exited: say why (the tail of its stderr).
allot_err_hint() {
  case "$1" in *"not seen"*) printf ' (stderr: %s)' "$(tail -n 3 "$out/allot.err" 2>/dev/null | tr '\n"' '  ')";; esac
}
# A CPU-bound registered service: greedy --benign keeps 16 requests of 8 x 20 ms items in flight.
# exec: run in the background, the job's pid ($!) is the service's own (services.pid).
allot_service() { exec "$ktest" -w "$1" greedy --benign --secs "$2" --requests 16 --items 8 --item-us 20000; }
# The lifetime of a service or hog that a test kills once it has measured: long enough to outlive
# any measurement. A map dump beside CPU-bound jobs takes seconds under TCG, and on a slow host
# more: in the 7.3 series of session 31's landing CI, two map dumps and 10 s of sleep outlasted
# 60 s, the cgroup job's hog had exited before the window closed (its ticks: none).
allot_life=600

allot_phase() { # allot_phase POLICY -> prints {"wide": {...}, "narrow": {...}}
  local n; n=$(nproc)
  # Both outlive the measurement (a map dump takes seconds under TCG) and are stopped after it.
  allot_service $((n * 2)) $allot_life >"$out/allot-wide.json" 2>>"$out/allot.err" & local wp=$!
  allot_service $((n / 2)) $allot_life >"$out/allot-narrow.json" 2>>"$out/allot.err" & local np=$!
  sleep 4
  allot_jobs_json "$out/a1" && sleep 6 && allot_jobs_json "$out/a2" || { kill -9 $wp $np; return 1; }
  kill -9 $wp $np; wait $wp $np 2>/dev/null
  allot_cores "$out/a1" "$out/a2" | $PY -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"wide": d.get(sys.argv[1]), "narrow": d.get(sys.argv[2])}))' "$wp" "$np"
}

test_allotequi() {
  local n half off eq; n=$(nproc); half=$((n / 2))
  allot_sched off || { fail allotequi "scheduler did not load"; return; }
  off=$(allot_phase) || { fail allotequi "off phase: $(tail -c 300 "$out/allot.err")"; stop_sched; return; }
  allot_sched equi || { fail allotequi "scheduler exit non-zero (off) or did not load with --allot equi: $(sched_why)"; return; }
  eq=$(allot_phase) || { fail allotequi "equi phase: $(tail -c 300 "$out/allot.err")"; stop_sched; return; }
  local st; st=$(allot_stats)
  sched_alive || { fail allotequi "scheduler ejected under --allot equi: $(sched_why)"; return; }
  allot_end allotequi || { fail allotequi "scheduler exit non-zero (equi): $(sched_why)"; return; }
  echo "{\"off\": $off, \"equi\": $eq, \"stats\": $st}" >"$out/allotequi.json"
  local verdict
  verdict=$($PY - "$off" "$eq" "$st" "$half" <<'PY'
import json, sys
off, eq, st, half = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
w, nw = eq["wide"], eq["narrow"]
if not w or not nw:
    print("bad", "a service was not seen in job_acct:", eq); sys.exit()
why = []
if w["allot"] != half or nw["allot"] != half:
    why.append(f"allotments {w['allot']}/{nw['allot']}, expected {half}/{half}")
# 10% + 0.1 core: a tick of overrun per slice under TCG. The narrow service must get a
# real part of its allotment (under TCG its own demand is below 2 cores: 1.1 seen).
if w["own"] > half * 1.1 + 0.1:
    why.append(f"the wide service ran {w['own']} cores within an allotment of {half}")
if nw["cores"] < half * 0.4:
    why.append(f"the narrow service got {nw['cores']} cores of its {half}")
if st.get("allot_reallocs", 0) < 2:
    why.append(f"{st.get('allot_reallocs')} reallocations counted")
n_enf = st.get("allot_enforced") or 0
apply_us = round(st.get("allot_apply_lat_sum_ns", 0) / max(st.get("allot_reallocs", 0), 1) / 1e3, 1)
ow = off["wide"]["cores"] if off.get("wide") else None
onw = off["narrow"]["cores"] if off.get("narrow") else None
msg = (f"off: wide {ow} / narrow {onw} cores | equi (allot {w['allot']}/{nw['allot']}): wide {w['own']} own + {w['borrowed']} borrowed, "
       f"narrow {nw['cores']} cores | {st.get('allot_reallocs')} reallocations, enforcement mean {st.get('lat_mean_us')} us "
       f"max {round(st.get('allot_lat_max_ns', 0) / 1e3, 1)} us, hist {st.get('allot_lat_hist')} "
       f"(buckets <10,25,50,100,250,1000,10000 us, more); of which {st.get('allot_enforced_at_apply')} enforced in apply_allot, "
       f"daemon stamp -> apply mean {apply_us} us, apply -> enforcement (kicks) hist {st.get('allot_kick_lat_hist')}")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotequi "${verdict#ok }" "\"detail\": $(cat "$out/allotequi.json")";; *) fail allotequi "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

test_allotexit() {
  local n half; n=$(nproc); half=$((n / 2))
  allot_sched equi || { fail allotexit "scheduler did not load with --allot equi: $(sched_why)"; return; }
  allot_service $((n * 2)) $allot_life >"$out/allot-wide.json" 2>>"$out/allot.err" & local wp=$!
  allot_service $((n / 2)) $allot_life >"$out/allot-narrow.json" 2>>"$out/allot.err" & local np=$!
  sleep 4
  allot_jobs_json "$out/x1"
  local before; before=$(allot_cores "$out/x1" "$out/x1")
  # Stamped in the shell itself ($EPOCHREALTIME, CLOCK_REALTIME: no process to start and end
  # between the stamp and the kill), and again once the killed service is reaped.
  local tkill treap; tkill=$EPOCHREALTIME
  kill -9 $np; wait $np 2>/dev/null; treap=$EPOCHREALTIME
  # Until the wide service's allotment changes (or 5 s).
  local decided; decided=$(allot_wait_allot "$wp" "$n" 100 0.05)
  allot_jobs_json "$out/x2"; sleep 3; allot_jobs_json "$out/x3"
  # Measured: the rest of its run would only cost guest time.
  kill -9 $wp; wait $wp 2>/dev/null
  local after; after=$(allot_cores "$out/x2" "$out/x3")
  sched_alive || { fail allotexit "scheduler ejected: $(sched_why)"; return; }
  allot_end allotexit || { fail allotexit "scheduler exit non-zero: $(sched_why)"; return; }
  [ -n "$decided" ] || { fail allotexit "the wide service was never allotted all $n CPUs after the narrow one exited: before $before, after $after"; return; }
  local verdict
  verdict=$($PY - "$after" "$wp" "$decided" "$tkill" "$half" "$n" "$treap" <<'PY'
import json, sys, time
after, pid = json.loads(sys.argv[1]), sys.argv[2]
dec, lat, enf = (int(x) for x in sys.argv[3].split())
half, n = int(sys.argv[5]), int(sys.argv[6])
# Shell stamps (CLOCK_REALTIME, microseconds) onto the kernel's CLOCK_MONOTONIC.
off = time.time_ns() - time.monotonic_ns()
tkill, treap = (int(float(x.replace(",", ".")) * 1e9) - off for x in (sys.argv[4], sys.argv[7]))
w = after.get(pid)
if not w:
    print("bad", "wide service not in job_acct after the exit"); sys.exit()
# The reap stamp is when the shell's wait returned: a shell that waits for a CPU stamps late,
# after the decision (seen on 7.3: 87 ms against a 32 ms decision), so that split is not a cost.
if dec >= treap:
    split = (f"of which kill -> reaped {(treap - tkill) / 1e6:.2f} ms (the kernel tearing the process down; its "
             f"socket closes within that), reaped -> decision {(dec - treap) / 1e6:.2f} ms (quantum 10 ms)")
else:
    split = (f"the shell saw the reap {(treap - tkill) / 1e6:.2f} ms after the kill, {(treap - dec) / 1e6:.2f} ms "
             f"after the decision (its wait returned late; quantum 10 ms)")
msg = (f"after the narrow service's exit: allot {w['allot']}, wide service {w['cores']} cores; kill -> decision "
       f"{(dec - tkill) / 1e6:.2f} ms, {split}; decision -> enforcement {lat / 1e3:.1f} us")
ok = w["allot"] == n and w["cores"] > half * 1.2
print("ok" if ok else "bad", msg if ok else "the freed cores did not go to the wide service: " + msg)
PY
)
  case "$verdict" in ok*) pass allotexit "${verdict#ok }";; *) fail allotexit "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

# allotrenice: job waiters re-niced (the attack `waitrenice` makes on request
# waiters, on the job queues): under --allot equi with a 100 ms wait bound,
# two wide services (2 x CPUs workers each, CPUs/2 allotted to each), and
# every thread of one that is runnable without progress is re-niced every
# 20 ms for 10 s (re-nicing only threads seen waiting 20 ms caught too few: a
# job waiter's turn comes within a few slices) (each re-nice dequeues and re-enqueues it). A re-enqueue used
# to start its wait over (so the bound never saw it) and sent a waiter let
# through at the bound back to the job queue. Asserted: the scheduler stays
# loaded, the attack happened (re-nices, job waits), and no thread of the
# re-niced service went 3 s (30 bounds, a tenth of the watchdog) without
# running; the longest wait and the kernel's own longest job wait are shown.
test_allotrenice() {
  local n; n=$(nproc)
  start_sched --allot equi --max-throttle-wait-ms 100 || { fail allotrenice "scheduler did not load: $(sched_why)"; return; }
  allot_service $((n * 2)) 16 >"$out/renice-a.json" 2>>"$out/allot.err" & local ap=$!
  allot_service $((n * 2)) 16 >"$out/renice-b.json" 2>>"$out/allot.err" & local bp=$!
  sleep 3
  local q; q=$(renice_waiters "$ap" 10 "" runnable 2>>"$out/allot.err"); [ -n "$q" ] || q='{}'
  wait $ap; local arc=$?; wait $bp; local brc=$?
  local st; st=$(allot_stats)
  local alive=yes; sched_alive || alive=no
  stop_sched; local src=$?
  [ $alive = yes ] || { fail allotrenice "scheduler ejected: $(sched_why)"; return; }
  [ $src = 0 ] || { fail allotrenice "scheduler exit non-zero: $(sched_why)"; return; }
  [ $arc = 0 ] && [ $brc = 0 ] || { fail allotrenice "a service failed ($arc/$brc): $(tail -c 300 "$out/allot.err")"; return; }
  local verdict
  verdict=$($PY - "$q" "$st" <<'PY'
import json, sys
q, st = json.loads(sys.argv[1]), json.loads(sys.argv[2])
n, longest = q.get("renices_all", 0), q.get("longest_wait_ms", 0)
why = []
if n < 20: why.append(f"only {n} re-nices of a runnable thread: the attack did not happen")
if not st.get("allot_waits"): why.append("no job thread waited for a token")
if longest > 3000: why.append(f"a re-niced thread went {longest:.0f} ms without running against a 100 ms bound")
msg = (f"{n} re-nices of runnable threads ({q.get('renices', 0)} seen waiting); longest wait seen {longest:.0f} ms; kernel: longest job wait "
       f"{st.get('allot_max_wait_ns', 0) / 1e6:.0f} ms, {st.get('allot_waits', 0)} waits, {st.get('allot_overdue', 0)} overdue "
       f"(bound 100 ms); watchdog margin {st.get('watchdog_margin_ms')} ms")
print(("bad " + "; ".join(why) + ": " + msg) if why else ("ok " + msg))
PY
)
  case "$verdict" in ok*) pass allotrenice "${verdict#ok }";; *) fail allotrenice "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

test_allotstarve() {
  local n; n=$(nproc)
  allot_sched equi || { fail allotstarve "scheduler did not load with --allot equi: $(sched_why)"; return; }
  # Same-load baseline, same scheduler and boot: n unregistered CPU-bound threads (as many as the
  # two capped services' token holders) beside the same one-thread neighbour. What the neighbour
  # gets here is what it "should" get beside the capped services; the ratio is reported.
  local bh; "$ktest" hog --threads "$n" --secs 18 >/dev/null 2>>"$out/allot.err" & local bhp=$!
  sleep 1
  local b; for b in b1 b2; do
    [ $b = b2 ] && bh=$("$ktest" hog --threads 1 --secs 15 2>>"$out/allot.err")
    head -1 /proc/stat >"$out/$b.stat"; date +%s%N >"$out/$b.t"
    awk '{print $14 + $15}' "/proc/$sched_pid/stat" >"$out/$b.daemon" 2>/dev/null
  done
  wait $bhp
  allot_service $((n * 2)) 55 >"$out/allot-a.json" 2>>"$out/allot.err" & local ap=$!
  allot_service $((n * 2)) 55 >"$out/allot-b.json" 2>>"$out/allot.err" & local bp=$!
  sleep 4
  allot_jobs_json "$out/s1"
  # An unregistered one-thread neighbour; 35 s beside the capped services: past the 30 s watchdog.
  local h; h=$("$ktest" hog --threads 1 --secs 33 2>>"$out/allot.err")
  allot_jobs_json "$out/s2"
  wait $ap; local arc=$?; wait $bp; local brc=$?
  local st; st=$(allot_stats); local jobs; jobs=$(allot_cores "$out/s1" "$out/s2")
  # Where the CPUs went, beside the capped jobs and beside the baseline's hogs.
  local mach mbase; mach=$(allot_machine "$out/s1" "$out/s2"); mbase=$(allot_machine "$out/b1" "$out/b2")
  sched_alive || { fail allotstarve "scheduler ejected: $(sched_why)"; return; }
  allot_end allotstarve || { fail allotstarve "scheduler exit non-zero: $(sched_why)"; return; }
  [ $arc = 0 ] && [ $brc = 0 ] || { fail allotstarve "a capped service failed ($arc/$brc): $(tail -c 300 "$out/allot.err")"; return; }
  local verdict
  verdict=$($PY - "$h" "$st" "$jobs" "$n" "$bh" "${mach:-null}" "${mbase:-null}" <<'PY'
import json, sys
h, st, jobs, n = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
mach, mbase = json.loads(sys.argv[6]), json.loads(sys.argv[7])
try:
    base = json.loads(sys.argv[5])["share"]
except (ValueError, KeyError, IndexError):
    base = None
share = h["share"]
margin = st["watchdog_margin_ms"]
maxw = st.get("allot_max_wait_ns", 0) / 1e6
why = []
# Beside two capped services whose token holders (n in all) share the fair queue with it, a
# one-thread neighbour should get about n/(n+1) of a CPU. What is asserted is the issue's
# "nothing starves": a fifth of a CPU over 33 s. The fair share is not: on a loaded host
# (session 6, load average ~10) the neighbour got 0.29, 0.28 and 0.49 CPUs in three runs
# (7.3, 7.3, 6.18), below its n/(n+1): an open fairness defect of the allotment path
# (README, "Core allotments"), reported here, not hidden by the threshold.
if share < 0.2:
    why.append(f"the unregistered neighbour got {share:.2f} CPUs: starved")
if margin < 25000:
    why.append(f"a job thread waited {maxw:.0f} ms")
if st.get("allot_waits", 0) == 0:
    why.append("no job thread ever waited for a token: nothing was capped")
# The neighbour takes CPU time from the capped jobs' token holders: the kernel counts that wait
# (job_acct.token_wait_ns), and never more than the allotted core-time.
for j in jobs.values():
    if not 0 < j["token_wait"] <= j["allot"] * 1.05:
        why.append(f"token wait {j['token_wait']} cores for an allotment of {j['allot']} beside the neighbour")
rel = f" = {share / base:.2f}x its {base:.2f} CPUs beside {n} unregistered hog threads (same boot)" if base else ""
msg = (f"neighbour {share:.2f} CPUs{rel}; jobs {[(j['allot'], j['cores']) for j in jobs.values()]} (allot, cores); "
       f"longest wait for a job token {maxw:.1f} ms, watchdog margin {margin} ms; "
       f"{st.get('allot_waits')} waits, {st.get('allot_overdue')} past the wait bound; "
       f"token holders queued behind other tasks {[j['token_wait'] for j in jobs.values()]} cores; "
       f"guest CPUs (cores) beside the jobs {mach}, beside the baseline's hogs {mbase}")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotstarve "${verdict#ok }";; *) fail allotstarve "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

test_allotdeq() {
  local n half; n=$(nproc); half=$((n / 2))
  allot_sched deq || { fail allotdeq "scheduler did not load with --allot deq: $(sched_why)"; return; }
  # Low: one request of one 20 ms item in flight (one busy worker of n), then 16 from 30 s on
  # (the first phase's two dumps take ~20 s under TCG); it prints when it grew at its end.
  "$ktest" -w "$n" greedy --benign --secs 120 --requests 1 --items 1 --item-us 20000 \
    --grow-after 30 --grow-requests 16 >"$out/allot-low.json" 2>"$out/allot-low.err" & local lp=$!
  allot_service "$n" 100 >"$out/allot-busy.json" 2>>"$out/allot.err" & local bp=$!
  sleep 5
  allot_jobs_json "$out/d1"; sleep 4; allot_jobs_json "$out/d2"
  local before; before=$(allot_cores "$out/d1" "$out/d2")
  local machine1; machine1=$(allot_machine "$out/d1" "$out/d2")
  # Its phase-1 allotment: the smaller of the two dumps' (a dump can catch one of the few rounds
  # that saw a queue for a moment and gave it 2; polling for "above 2" then never ends on 4 CPUs).
  local low1; low1=$($PY -c '
import json, sys
a = [e["value"]["allot"] for p in sys.argv[2:] for e in json.load(open(p)) if e["value"]["owner"] & 0xffffffff == int(sys.argv[1])]
print(min(a) if a else 0)' "$lp" "$out/d1.acct" "$out/d2.acct")
  # Until the low service has grown (it stamps grown_ns on stderr; the phase-1 dumps may end
  # well before its 30 s), then until it is allotted more than in the first phase by a decision
  # taken after the growth (a phase-1 blip to 2 is not it), or ~25 polls.
  local decided="" grown_at=""
  for _ in $(seq 1 120); do
    grown_at=$(sed -n 's/^grown_ns //p' "$out/allot-low.err" | head -1)
    [ -n "$grown_at" ] && break
    sleep 0.5
  done
  for _ in $(seq 1 25); do
    decided=$("$wl/tailctl" maps dump job_acct --json 2>/dev/null | $PY -c '
import json, sys, time
for e in json.load(sys.stdin):
    v = e["value"]
    # A decision after the growth; or, 0.2 s after it, an allotment above phase 1 that a blip
    # set before it and the rounds since kept (an unchanged allotment is not decided again).
    if v["owner"] & 0xffffffff == int(sys.argv[1]) and v["allot"] > int(sys.argv[2]) and (
            v["decided_at_ns"] >= int(sys.argv[3]) or time.monotonic_ns() - int(sys.argv[3]) > 200_000_000):
        print(v["decided_at_ns"], v["seq"], v["allot"]); break' "$lp" "$low1" "${grown_at:-0}")
    [ -n "$decided" ] && break
    sleep 0.5
  done
  allot_jobs_json "$out/d3"; sleep 4; allot_jobs_json "$out/d4"
  # Measured: both go (the low one said when it grew on stderr).
  kill -9 $lp $bp; wait $lp $bp 2>/dev/null; local lrc=0 brc=0
  local grown; grown=$(sed -n 's/^grown_ns //p' "$out/allot-low.err" | head -1)
  local after; after=$(allot_cores "$out/d3" "$out/d4")
  local st; st=$(allot_stats)
  sched_alive || { fail allotdeq "scheduler ejected: $(sched_why)"; return; }
  allot_end allotdeq || { fail allotdeq "scheduler exit non-zero: $(sched_why)"; return; }
  [ $lrc = 0 ] && [ $brc = 0 ] || { fail allotdeq "a service failed ($lrc/$brc): $(tail -c 300 "$out/allot.err")"; return; }
  echo "{\"before\": $before, \"after\": $after, \"machine_before\": ${machine1:-null}, \"decided\": \"$decided\", \"grown_ns\": ${grown:-null}, \"stats\": $st}" >"$out/allotdeq.json"
  local verdict
  verdict=$($PY - "$before" "$after" "$lp" "$bp" "$n" "$decided" "${grown:-0}" "$out/allot-trace-deq.csv" "$(cat "$out/d1.t")" "$(cat "$out/d2.t")" "$out/allotdeq-rounds.json" "${machine1:-null}" <<'PY'
import collections, csv, json, statistics, sys
before, after, lp, bp, n = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
decided, grown_ns, trace_path, p1a, p1b, rounds_out = sys.argv[6], int(sys.argv[7]), sys.argv[8], int(sys.argv[9]), int(sys.argv[10]), sys.argv[11]
machine = json.loads(sys.argv[12])
# The dumps are stamped with `date` (CLOCK_REALTIME), the trace with CLOCK_MONOTONIC.
import time
p1a, p1b = (t - (time.time_ns() - time.monotonic_ns()) for t in (p1a, p1b))
half = n // 2
l1, b1, l2, b2 = before.get(lp), before.get(bp), after.get(lp), after.get(bp)
if not (l1 and b1 and l2 and b2):
    print("bad", "a service was not seen in job_acct:", before, after); sys.exit()
why = []
# The controller's rounds (--allot-trace), per job: {seq: row}.
try:
    rows = list(csv.DictReader(open(trace_path)))
except OSError as e:
    print("bad", f"no allotment trace: {e}"); sys.exit()
def job(pid):
    return {int(r["seq"]): r for r in rows if int(r["owner"]) & 0xffffffff == int(pid)}
low, busy = job(lp), job(bp)
if not low or not busy:
    print("bad", f"the trace ({len(rows)} lines) has no rounds of both services"); sys.exit()
# Phase 1 (between the first two dumps): the low service's desire is its one busy worker
# (SAWS: u*a + 2Q with no queue). A round that sees a queue for a moment may give it 2; most
# rounds must give it its desire, never an equal share on 4+ CPUs, and the busy one the rest.
p1 = [s for s in sorted(low) if p1a <= int(low[s]["round_ns"]) <= p1b and s in busy]
if len(p1) < 10:
    why.append(f"only {len(p1)} controller rounds in phase 1")
la = collections.Counter(int(low[s]["allot"]) for s in p1)
mode, at_mode = la.most_common(1)[0] if la else (0, 0)
if not (1 <= mode <= max(1, half - 1) or (n < 4 and mode == 1)):
    why.append(f"low-desire service allotted {mode} in most rounds ({dict(la)})")
rest = sum(1 for s in p1 if int(busy[s]["allot"]) == n - int(low[s]["allot"]))
if p1 and rest < len(p1) / 2:
    why.append(f"busy service allotted the rest in {rest} of {len(p1)} rounds")
# It uses the rest: more than an equal share within its own allotment (EQUI would cap it at half).
# Its token holders' wait for CPUs other tasks held counts as use (denied, not left idle: a guest
# slowed by other work); under EQUI own + that wait is at most half too.
if b1["own"] + b1["token_wait"] <= half or b1["own"] < 0.75 * half:
    why.append(f"busy service ran {b1['own']} cores within its allotment of {b1['allot']} (+{b1['token_wait']} waiting for a CPU)")
if l1["own"] > l1["allot"] * 1.1 + 0.1:
    why.append(f"low service ran {l1['own']} cores within an allotment of {l1['allot']}")
# Phase 2: the low service's load grew: its allotment rose, the busy one's fell.
if not decided:
    why.append(f"the low service's allotment never rose above {l1['allot']} after its load grew")
# Against each one's phase-1 mode from the trace: a dump's snapshot can be a one-round blip.
bmode = collections.Counter(int(busy[s]["allot"]) for s in p1).most_common(1)[0][0] if p1 else b1["allot"]
if l2["allot"] <= mode or b2["allot"] >= bmode:
    why.append(f"allotments after the growth {l2['allot']}/{b2['allot']} (phase 1 mostly {mode}/{bmode})")
if l2["allot"] + b2["allot"] > n:
    why.append(f"allotments {l2['allot']} + {b2['allot']} over {n} CPUs")
# Rounds from the growth to the rise: the first round that started after the service stamped
# its growth is round 1 (its inputs cover part of the growth); the rise within round 2 is
# "within two quanta" counted by the controller, whatever TCG does to the wall clock.
rounds = wall_q = period = None
after_g = [s for s in sorted(low) if grown_ns and int(low[s]["round_ns"]) >= grown_ns]
rise = next((i + 1 for i, s in enumerate(after_g) if int(low[s]["allot"]) > mode), None)
q_ns = [int(low[b]["round_ns"]) - int(low[a]["round_ns"]) for a, b in zip(p1, p1[1:]) if b == a + 1]
if q_ns:
    period = round(statistics.median(q_ns) / 1e6, 2)
if rise:
    rounds = rise
    wall_q = round((int(low[after_g[rise - 1]]["round_ns"]) - grown_ns) / 10e6, 1)
elif grown_ns:
    why.append(f"no round after the growth raised the low service's allotment ({len(after_g)} rounds traced)")
# The issue's bound: allotments follow a change of load within two quanta (counted in the
# controller's rounds; the earlier runs seen rose in round 1).
if rounds and rounds > 2:
    why.append(f"the low service's allotment rose only in controller round {rounds} after its growth (bound: 2)")
json.dump({"phase1_rounds": len(p1), "phase1_low_allot": dict(la), "phase1_busy_rest_rounds": rest,
           "round_period_ms": period, "rounds_to_rise": rounds, "wall_quanta_to_rise": wall_q,
           "rise_rows": [low[s] for s in after_g[:(rise or 3) + 1]]}, open(rounds_out, "w"))
msg = (f"before: low allot {mode} in {at_mode} of {len(p1)} rounds ({dict(la)}), busy the rest in {rest}, "
       f"{l1['cores']} / {b1['own']} own + {b1['borrowed']} borrowed cores | after the low one's growth: "
       f"allot {l2['allot']}/{b2['allot']} (desire {l2['desire']}/{b2['desire']}), cores {l2['cores']}/{b2['cores']}; "
       f"growth -> rise in controller round {rounds} after it ({wall_q} quanta of 10 ms by the wall clock; "
       f"median round period {period} ms) | guest CPUs in phase 1 (cores): {machine}")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotdeq "${verdict#ok }" "\"detail\": $(cat "$out/allotdeq.json"), \"rounds\": $(cat "$out/allotdeq-rounds.json")";; *) fail allotdeq "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

test_allotdrep() {
  local n; n=$(nproc)
  allot_sched drep || { fail allotdrep "scheduler did not load with --allot drep: $(sched_why)"; return; }
  allot_service $((n * 2)) $allot_life >"$out/allot-drep-a.json" 2>>"$out/allot.err" & local ap=$!
  sleep 3
  local ta; ta=$(date +%s%N)
  allot_service $((n * 2)) $allot_life >"$out/allot-drep-b.json" 2>>"$out/allot.err" & local bp=$!
  sleep 4
  allot_jobs_json "$out/r1" && sleep 6 && allot_jobs_json "$out/r2" || { kill -9 $ap $bp; wait $ap $bp 2>/dev/null; stop_sched; fail allotdrep "map dumps failed: $(tail -c 300 "$out/allot.err")"; return; }
  local both; both=$(allot_cores "$out/r1" "$out/r2")
  local tkill; tkill=$(date +%s%N)
  kill -9 $bp; wait $bp 2>/dev/null
  # Until the first service is allotted every CPU again (or ~5 s): its decision's stamp.
  local back; back=$(allot_wait_allot "$ap" "$n" 50 0.1); back=${back%% *}
  kill -9 $ap; wait $ap 2>/dev/null
  local st; st=$(allot_stats)
  sched_alive || { fail allotdrep "scheduler ejected: $(sched_why)"; return; }
  # Stopping the scheduler flushes the controller's trace (buffered about a second).
  allot_end allotdrep || { fail allotdrep "scheduler exit non-zero: $(sched_why)"; return; }
  [ -n "$sched_pid" ] && sleep 2
  echo "{\"both\": $both, \"stats\": $st, \"back_decided_ns\": \"$back\"}" >"$out/allotdrep.json"
  local verdict
  verdict=$($PY - "$both" "$st" "$n" "$ap" "$bp" "$ta" "$tkill" "${back:-0}" "$out/allot-trace-drep.csv" <<'PY'
import collections, csv, json, sys, time
both, st, n, ap, bp = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
# Shell stamps (`date`, CLOCK_REALTIME) onto the trace's and the kernel's CLOCK_MONOTONIC.
off = time.time_ns() - time.monotonic_ns()
ta, tkill = int(sys.argv[6]) - off, int(sys.argv[7]) - off
back = int(sys.argv[8])
why = []
try:
    rows = list(csv.DictReader(open(sys.argv[9])))
except OSError as e:
    print("bad", f"no allotment trace: {e}"); sys.exit()
# Per round (seq): {pid: row}.
rounds = collections.defaultdict(dict)
for r in rows:
    rounds[int(r["seq"])][int(r["owner"]) & 0xffffffff] = r
seqs = sorted(rounds)
alone = [s for s in seqs if ap in rounds[s] and bp not in rounds[s] and int(rounds[s][ap]["round_ns"]) < ta]
pair = [s for s in seqs if ap in rounds[s] and bp in rounds[s]]
after = [s for s in seqs if ap in rounds[s] and bp not in rounds[s] and pair and s > pair[-1]]
if not alone or int(rounds[alone[-1]][ap]["allot"]) != n:
    why.append(f"alone, the first service was allotted {rounds[alone[-1]][ap]['allot'] if alone else None}, expected {n}")
splits = collections.Counter((int(rounds[s][ap]["allot"]), int(rounds[s][bp]["allot"])) for s in pair)
if not pair:
    why.append("no controller round saw both services")
for (a, b), c in splits.items():
    if a < 1 or b < 1 or a + b != n:
        why.append(f"split {a}/{b} in {c} rounds: expected both at least 1 and {n} in all")
# DREP decides nothing on a quantum: one split from the arrival to the exit.
if len(splits) > 1:
    why.append(f"the split changed while both ran: {dict(splits)}")
quanta = sum(1 for s in pair if rounds[s][ap]["quantum"] == "1")
if quanta < 10:
    why.append(f"only {quanta} quantum rounds while both ran")
first_after = int(rounds[after[0]][ap]["allot"]) if after else None
if first_after != n:
    why.append(f"in the first round after the second service's exit the first was allotted {first_after}, expected {n}")
a, b = both.get(str(ap)), both.get(str(bp))
if not a or not b:
    print("bad", "a service was not seen in job_acct:", both); sys.exit()
for name, j in (("first", a), ("second", b)):
    # As allotequi: 10% + 0.1 core of overrun (a tick per slice under TCG).
    if j["own"] > j["allot"] * 1.1 + 0.1:
        why.append(f"the {name} service ran {j['own']} cores within an allotment of {j['allot']}")
    if j["cores"] < j["allot"] * 0.4:
        why.append(f"the {name} service got {j['cores']} cores of its {j['allot']}")
if st["watchdog_margin_ms"] < 25000:
    why.append(f"a job thread waited {st.get('allot_max_wait_ns', 0) / 1e6:.0f} ms")
lat = f"{(back - tkill) / 1e6:.1f} ms" if back > tkill else "not seen"
msg = (f"alone {n}; split {dict(splits)} over {len(pair)} rounds ({quanta} quanta); cores {a['own']} own + {a['borrowed']} borrowed "
       f"/ {b['own']} own + {b['borrowed']} borrowed; after the exit {first_after} in the first round, kill -> decision {lat}; "
       f"{st.get('allot_reallocs')} reallocations, enforcement mean {st.get('lat_mean_us')} us; watchdog margin {st['watchdog_margin_ms']} ms")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotdrep "${verdict#ok }" "\"detail\": $(cat "$out/allotdrep.json")";; *) fail allotdrep "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

# Per-thread CPU ticks (utime + stime) of process $1, as "tid:ticks" words.
allot_thread_ticks() {
  local f; for f in /proc/"$1"/task/*/stat; do
    awk -v t="$(basename "$(dirname "$f")")" '{ sub(/^.*\) /, ""); print t ":" ($12 + $13) }' "$f" 2>/dev/null
  done | tr '\n' ' '
}

test_allotcgroup() { allotcg_beside_service allotcgroup equi; }
test_allotcgdeq() { allotcg_beside_service allotcgdeq deq; }
test_allotcgasteal() { allotcg_beside_service allotcgasteal asteal; }
# allot_pair OTHER_ARGS...: an honest CPU-bound service (CPUs workers) beside a low-load one (2 x
# CPUs workers, one request of one 20 ms item in flight: it uses about one core) run with
# OTHER_ARGS added (e.g. --inflate-desire); prints {"honest": {...}, "other": {...}} (allot_cores of
# each over about 6 s, after 4 s to settle).
allot_pair() {
  local n; n=$(nproc)
  allot_service "$n" $allot_life >"$out/allot-honest.json" 2>>"$out/allot.err" & local hp=$!
  (exec "$ktest" -w $((n * 2)) greedy --benign --secs $allot_life --requests 1 --items 1 --item-us 20000 "$@") \
    >"$out/allot-other.json" 2>>"$out/allot.err" & local op=$!
  sleep 4
  allot_jobs_json "$out/p1" && sleep 6 && allot_jobs_json "$out/p2" || { kill -9 $hp $op; wait $hp $op 2>/dev/null; return 1; }
  kill -9 $hp $op; wait $hp $op 2>/dev/null
  # Each with its pid, and the window's ends (for the controller's trace).
  allot_cores "$out/p1" "$out/p2" | $PY -c '
import json, sys
d = json.load(sys.stdin)
pick = lambda pid: d.get(pid) and dict(d[pid], pid=int(pid))
print(json.dumps({"honest": pick(sys.argv[1]), "other": pick(sys.argv[2]), "window_ns": [int(sys.argv[3]), int(sys.argv[4])]}))' \
    "$hp" "$op" "$(cat "$out/p1.t")" "$(cat "$out/p2.t")"
}

# allotliar: a service lies to the controller about its desire (greedy --inflate-desire: every
# worker busy, the most stealable work a region shows, searches that always succeed, rewritten
# every ms) while it really keeps about one core busy. Under deq and under asteal, beside an
# honest CPU-bound service, against the same low-load process telling the truth in the same boot:
# the lie reaches the controller (the liar's desire shown above the truthful one's), and the
# honest service keeps its equal share: allotted at least CPUs/2, and it uses that allotment about
# as well as it used its allotment beside the truthful twin a moment before (cores within it per
# CPU allotted, at least 0.8x; the pair ran back to back in one boot, so TCG's drift mostly
# cancels: 0.89-0.96x under asteal, above 1 under deq, in session 31-32's runs; a fixed floor of
# 0.7 x CPUs/2 cores failed at 1.388 and 1.39 in session 32, where the same service used
# 0.60-0.84 of its allotment beside the truthful twin), and never under 0.5 x CPUs/2. Desires and allotments are the medians over the controller's rounds in the
# measured window (--allot-trace), not one snapshot: A-Steal halves and doubles from quantum to
# quantum, so a snapshot can catch the honest service at 1 for a round. Its total (own + borrowed: the liar's unused allotment is lent) is reported
# against beside the truthful twin.
test_allotliar() {
  local n half pol twin liar res=() st; n=$(nproc); half=$((n / 2))
  for pol in deq asteal; do
    allot_sched $pol || { fail allotliar "scheduler did not load with --allot $pol: $(sched_why)"; return; }
    twin=$(allot_pair) || { fail allotliar "$pol, truthful twin: map dumps failed: $(tail -c 300 "$out/allot.err")"; stop_sched; return; }
    liar=$(allot_pair --inflate-desire) || { fail allotliar "$pol, liar: map dumps failed: $(tail -c 300 "$out/allot.err")"; stop_sched; return; }
    st=$(allot_stats)
    sched_alive || { fail allotliar "scheduler ejected under --allot $pol: $(sched_why)"; return; }
    res+=("\"$pol\": {\"twin\": $twin, \"liar\": $liar, \"stats\": $st}")
    if [ $pol = deq ]; then allot_cur=""; stop_sched || { fail allotliar "scheduler exit non-zero (deq): $(sched_why)"; return; }; fi
  done
  allot_end allotliar || { fail allotliar "scheduler exit non-zero (asteal): $(sched_why)"; return; }
  local all; all="{$(IFS=,; echo "${res[*]}")}"
  echo "$all" >"$out/allotliar.json"
  local verdict
  verdict=$($PY - "$all" "$half" "$n" "$out" <<'PY'
import csv, json, statistics, sys, time
d, half, n, out = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
why, parts = [], []
# The window's ends are wall-clock (date +%s%N), the trace's rounds monotonic.
off = time.time_ns() - time.monotonic_ns()
def medians(rows, pair, who):
    """The median allotment and desire (the controller's demand) of the pair's `who` over the
    controller's rounds in its window."""
    t0, t1 = (t - off for t in pair["window_ns"])
    sel = [r for r in rows if t0 <= int(r["round_ns"]) <= t1
           and int(r["owner"]) & 0xffffffff == int(pair[who]["pid"])]
    if not sel:
        print("bad", f"no controller rounds of {who} (pid {pair[who]['pid']}) in the window ({len(rows)} trace lines)")
        sys.exit()
    return (statistics.median_low(int(r["allot"]) for r in sel),
            statistics.median_low(int(r["demand"]) for r in sel), len(sel))
for pol in ("deq", "asteal"):
    t, l = d[pol]["twin"], d[pol]["liar"]
    if not all((t["honest"], t["other"], l["honest"], l["other"])):
        print("bad", f"{pol}: a service was not seen in job_acct: {d[pol]}"); sys.exit()
    try:
        rows = list(csv.DictReader(open(f"{out}/allot-trace-{pol}.csv")))
    except OSError:
        rows = []
    for pair in (t, l):
        for who in ("honest", "other"):
            a, de, k = medians(rows, pair, who)
            pair[who].update({"allot_snapshot": pair[who]["allot"], "desire_snapshot": pair[who]["desire"],
                              "allot": a, "desire": de, "rounds": k})
    h, x, th, tx = l["honest"], l["other"], t["honest"], t["other"]
    if (x["desire"] or 0) <= (tx["desire"] or 0):
        why.append(f"{pol}: the lie did not reach the controller (desire {x['desire']} lying, {tx['desire']} truthful)")
    if h["allot"] < half:
        why.append(f"{pol}: the honest service allotted {h['allot']} beside the liar (equal share {half})")
    if x["allot"] > n - half:
        why.append(f"{pol}: the liar allotted {x['allot']} of {n}")
    # Cores within the allotment per CPU allotted, beside the liar and beside the twin.
    use = h["own"] / h["allot"] if h["allot"] else 0.0
    use_twin = th["own"] / th["allot"] if th["allot"] else 0.0
    if h["own"] < 0.5 * half or use < 0.8 * use_twin:
        why.append(f"{pol}: the honest service ran {h['own']} cores within its allotment of {h['allot']} beside the liar "
                   f"({use:.2f} per CPU allotted, {use_twin:.2f} beside the truthful twin)")
    ratio = h["cores"] / th["cores"] if th["cores"] > 0 else float("nan")
    parts.append(f"{pol} (medians of {h['rounds']} rounds): liar desire {x['desire']} (truthful {tx['desire']}), allot {x['allot']} (truthful {tx['allot']}), {x['cores']} cores; "
                 f"honest allot {h['allot']} (beside the truthful twin {th['allot']}), {h['own']} own + {h['borrowed']} borrowed cores, "
                 f"{use:.2f} per CPU allotted ({use_twin:.2f} beside the twin) "
                 f"({th['own']} + {th['borrowed']} beside the truthful twin: total {ratio:.2f}x)")
print(("bad " + "; ".join(why) + " | " if why else "ok ") + "; ".join(parts))
PY
)
  case "$verdict" in ok*) pass allotliar "${verdict#ok }" "\"detail\": $all";; *) fail allotliar "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

# allotcg_beside_service TEST POLICY: a cgroup job's hog beside a registered wide service under
# --allot POLICY. Under equi both are allotted CPUs/2. Under deq both desire every CPU (the hog's
# threads beyond its allotment are its queued work, the service's queued requests its own), so
# the cgroup job must reach an equal part; without its waiting threads counted, SAWS's desire
# `u*a` keeps it at the one core a new job starts with, and the service takes the rest. Under
# asteal the hog's desire doubles while it uses its allotment (and halves when a grown
# allotment's first quantum was not fully used: see the verdict); the service's desire follows
# the `u` of its steal counters (--asteal-u same).
allotcg_beside_service() {
  local t=$1 pol=$2 n half cg=/sys/fs/cgroup/tailctl-cgjob; n=$(nproc); half=$((n / 2))
  [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] || { fail "$t" "no cgroup v2 at /sys/fs/cgroup"; return; }
  mkdir -p "$cg" || { fail "$t" "cannot create $cg"; return; }
  if [ -n "$sched_pid" ]; then allot_cur=""; stop_sched || { fail "$t" "previous scheduler exit non-zero: $(sched_why)"; return; }; fi
  allot_cur=$t
  start_sched --allot "$pol" --job "$cg" --allot-trace "$out/allot-trace-$t.csv" || { fail "$t" "scheduler did not load with --job: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; rmdir "$cg"; return; }
  # The hog enters the cgroup before it starts its threads: every thread is a job thread.
  (echo $BASHPID >"$cg/cgroup.procs" && exec "$ktest" hog --threads $((n * 2)) --secs $allot_life) >"$out/allot-cghog.json" 2>>"$out/allot.err" & local hp=$!
  allot_service $((n * 2)) $allot_life >"$out/allot-cgsvc.json" 2>>"$out/allot.err" & local sp=$!
  sleep 4
  local t1 t2 maps
  t1=$(allot_thread_ticks $hp)
  allot_jobs_json "$out/c1" && sleep 6 && allot_jobs_json "$out/c2" || { kill -9 $hp $sp; wait $hp $sp 2>/dev/null; stop_sched; rmdir "$cg"; fail "$t" "map dumps failed: $(tail -c 300 "$out/allot.err")"; return; }
  t2=$(allot_thread_ticks $hp)
  maps=$("$wl/tailctl" maps dump services 2>>"$out/allot.err" | head -n 20)
  # Both must have run through the window (a job that exited in it is measured on less).
  local gone=""; kill -0 $hp 2>/dev/null || gone="the cgroup job's hog"; kill -0 $sp 2>/dev/null || gone="${gone:+$gone and }the service"
  kill -9 $hp $sp 2>/dev/null; wait $hp $sp 2>/dev/null
  [ -z "$gone" ] || { stop_sched; rmdir "$cg"; fail "$t" "$gone exited before the window closed (lifetime ${allot_life} s): $(tail -c 300 "$out/allot.err")"; return; }
  local st; st=$(allot_stats); local jobs; jobs=$(allot_cores "$out/c1" "$out/c2")
  sched_alive || { fail "$t" "scheduler ejected: $(sched_why)"; rmdir "$cg"; return; }
  allot_end "$t" || { fail "$t" "scheduler exit non-zero: $(sched_why)"; rmdir "$cg"; return; }
  rmdir "$cg" 2>/dev/null
  echo "$maps" >"$out/$t-maps.txt"
  echo "{\"jobs\": $jobs, \"stats\": $st}" >"$out/$t.json"
  local verdict
  verdict=$($PY - "$jobs" "$st" "$half" "$sp" "$t1" "$t2" "$maps" "$pol" "$out/allot-trace-$t.csv" <<'PY'
import collections, csv, json, sys
jobs, st, half, sp = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tick = lambda s: dict((int(a), int(b)) for a, b in (w.split(":") for w in s.split()))
t1, t2, maps = tick(sys.argv[5]), tick(sys.argv[6]), sys.argv[7]
cg = [j for p, j in jobs.items() if int(p) >= 0x80000000]
svc = jobs.get(sp)
why = []
if not cg or not svc:
    print("bad", "a job was not seen in job_acct:", jobs); sys.exit()
cg = cg[0]
pol, trace = sys.argv[8], sys.argv[9]
# The cgroup job's allotment in every controller round of its life (--allot-trace: owner
# has the cgroup-job pid in its low 32 bits).
rounds, u_raw, u_net, waited = [], [], [], []
try:
    prev = None
    for r in csv.DictReader(open(trace)):
        if int(r["owner"]) & 0xffffffff >= 0x80000000 and r["quantum"] == "1":
            rounds.append(int(r["allot"]))
            # Its core-time u over the quantum before this round, with and without the time its
            # token holders waited for a CPU other tasks held (token_wait_ns: denied, not idle).
            a, w, tw = int(r["allot_before"]), int(r["work_ns"]), int(r.get("token_wait_ns") or 0)
            if prev is not None and a > 0:
                span = a * (int(r["round_ns"]) - prev)
                if span > 0:
                    u_raw.append(min(w / span, 1.0))
                    u_net.append(min(w / max(span - tw, w, 1), 1.0))
                    waited.append(tw / span)
            prev = int(r["round_ns"])
except (OSError, ValueError, KeyError):
    pass
med = lambda v: round(sorted(v)[len(v) // 2], 2) if v else None
late = rounds[len(rounds) // 2:]
common = collections.Counter(late).most_common(1)[0][0] if late else None
if pol == "equi":
    if cg["allot"] != half or svc["allot"] != half:
        why.append(f"allotments cgroup {cg['allot']} / service {svc['allot']}, expected {half}/{half}")
elif pol == "deq":
    # Both want every CPU: the cgroup job gets at least an equal part in most rounds.
    if common is None or common < half:
        why.append(f"the cgroup job's usual allotment {common} (rounds {len(rounds)}, at 1: {rounds.count(1)}), expected at least {half}")
else:
    # asteal: its desire doubles while it uses its allotment. A grown allotment's first quantum
    # is not fully used (the new token's thread still has to reach a CPU; 10 ms is 2.5 ticks),
    # so A-Steal halves it again now and then (seen: at 1 in 35-45% of the later rounds); a job
    # held at 1 would never reach an equal part. At least a third of the later rounds must.
    up = sum(1 for a in late if a >= half)
    if not late or up * 3 < len(late):
        why.append(f"the cgroup job was allotted at least {half} in {up} of the later {len(late)} quanta ({dict(collections.Counter(late))})")
    if svc["allot"] < 1:
        why.append(f"the service is allotted {svc['allot']}")
# As allotequi: 10% + 0.1 core of overrun (a tick per slice under TCG).
if cg["own"] > cg["allot"] * 1.1 + 0.1 and cg["own"] > half * 1.1 + 0.1:
    why.append(f"the cgroup job ran {cg['own']} cores within an allotment of {cg['allot']}")
if cg["cores"] < half * 0.4:
    why.append(f"the cgroup job got {cg['cores']} cores of its {half}: its tasks are not charged to it")
if svc["cores"] < half * 0.4:
    why.append(f"the service got {svc['cores']} cores of its {half}")
# Every hog thread (the main one sleeps) progressed while capped.
spin = {t: t2[t] - t1.get(t, 0) for t in t2}
workers = sorted(spin.values())[1:] if len(spin) > 1 else []
if not workers or workers[0] == 0:
    why.append(f"a hog thread made no progress in the window: ticks {sorted(spin.values())}")
if st["watchdog_margin_ms"] < 25000:
    why.append(f"a job thread waited {st.get('allot_max_wait_ns', 0) / 1e6:.0f} ms")
# Its row in `tailctl maps dump services` (slot pid comm uid prio desire allot used cpu_s eff ...):
# a cgroup job's CPU time is all work, so its efficiency reads 1.00.
row = next((l.split() for l in maps.splitlines() if "cgroup-job" in l), None)
if row is None:
    why.append("tailctl maps does not list the cgroup job")
elif len(row) < 10 or row[9] != "1.00":
    why.append(f"tailctl maps shows the cgroup job's efficiency as {row[9:10]}, expected 1.00: {' '.join(row)}")
msg = (f"{pol}: cgroup job (allot {cg['allot']}, desire {cg['desire']}, in the later half of {len(rounds)} quanta {dict(sorted(collections.Counter(late).items()))}): {cg['own']} own + {cg['borrowed']} borrowed cores, "
       f"service (allot {svc['allot']}, desire {svc['desire']}): {svc['cores']} cores; hog threads' ticks in the window "
       f"min {workers[0] if workers else None} max {workers[-1] if workers else None}; "
       f"longest job-token wait {st.get('allot_max_wait_ns', 0) / 1e6:.1f} ms (watchdog margin {st['watchdog_margin_ms']} ms), "
       f"{st.get('allot_waits')} waits, {st.get('allot_overdue')} overdue, {st.get('allot_borrows')} borrows; "
       f"its core-time u per quantum: median {med(u_net)} ({sum(x < 0.8 for x in u_net)} of {len(u_net)} under 0.8), "
       f"{med(u_raw)} counting its holders' wait for a CPU against it ({sum(x < 0.8 for x in u_raw)} under 0.8; "
       f"that wait {med(waited)} of the allotted time at the median)")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass "$t" "${verdict#ok }" "\"detail\": $(cat "$out/$t.json")";; *) fail "$t" "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

# cgjob_slot CGROUP: "SLOT EPOCH" when the kernel's job_cgroups maps the cgroup's id to a slot
# whose services entry is a cgroup job (pid TAILCTL_CGROUP_JOB_PID + slot); nothing otherwise.
cgjob_slot() {
  local id; id=$(stat -c %i "$1" 2>/dev/null) || return 0
  "$wl/tailctl" maps dump job_cgroups --json >"$out/cgj.json" 2>>"$out/allot.err" || return 0
  "$wl/tailctl" maps dump services --json >"$out/cgs.json" 2>>"$out/allot.err" || return 0
  $PY - "$id" "$out/cgj.json" "$out/cgs.json" <<'PY'
import json, sys
cid = int(sys.argv[1])
m = {int(e["key"]): e["value"] for e in json.load(open(sys.argv[2]))}
svc = {int(e["key"]): e["value"] for e in json.load(open(sys.argv[3]))}
s = m.get(cid)
if s is not None and svc.get(s, {}).get("pid") == 0x80000000 + s:
    print(s, svc[s]["epoch"])
PY
}
# cgjob_wait CGROUP: poll cgjob_slot (up to ~60 tries; dumps take seconds under TCG).
cgjob_wait() {
  local r=""; for _ in $(seq 1 60); do r=$(cgjob_slot "$1"); [ -n "$r" ] && break; sleep 0.2; done; echo "$r"
}
# cgjob_state: JSON {"cg": [[slot, pid], ...] cgroup jobs in services, "allot": {pid: allot}, "ids": [job_cgroups keys]}.
cgjob_state() {
  "$wl/tailctl" maps dump job_cgroups --json >"$out/cgj.json" 2>>"$out/allot.err" || return 1
  "$wl/tailctl" maps dump services --json >"$out/cgs.json" 2>>"$out/allot.err" || return 1
  $PY - "$out/cgj.json" "$out/cgs.json" <<'PY'
import json, sys
ids = [int(e["key"]) for e in json.load(open(sys.argv[1]))]
svc = {int(e["key"]): e["value"] for e in json.load(open(sys.argv[2]))}
print(json.dumps({"cg": [[k, v["pid"]] for k, v in svc.items() if v["pid"] >= 0x80000000],
                  "allot": {str(v["pid"]): v["allot"] for v in svc.values() if v["pid"]}, "ids": ids}))
PY
}
# cgjob_logwait WORD PATH T0_NS: ms from T0_NS (date +%s%N) to the daemon's "cgroup job PATH ... WORD
# ... (at MS ms)" line (its START_JOB/EXIT_JOB, stamped by the daemon when it acted), waiting up to 10 s
# for the line; empty if none.
cgjob_logwait() {
  local at
  for _ in $(seq 1 100); do
    at=$(grep -F "cgroup job $2 " "$out/sched.log" | grep "$1" | tail -n 1 | sed -n 's/.*(at \([0-9]*\) ms)$/\1/p')
    if [ -n "$at" ]; then echo $((at - $3 / 1000000)); return; fi
    sleep 0.1
  done
}
# A hog of 2 x CPUs threads in cgroup $1 (entered before its threads start), for $2 s.
cgjob_hog() { echo $BASHPID >"$1/cgroup.procs" && exec "$ktest" hog --threads $(($(nproc) * 2)) --secs "$2"; }
# rmdir a cgroup whose processes were just killed (it stays populated until they are reaped);
# cg_rmdir_ns: when the attempt that removed it began.
cg_rmdir_ns=0
cgjob_rmdir() { local i; for i in $(seq 1 50); do cg_rmdir_ns=$(date +%s%N); rmdir "$1" 2>/dev/null && return 0; [ -d "$1" ] || return 0; sleep 0.1; done; return 1; }

test_allotcgdyn() {
  local n half base=/sys/fs/cgroup/tailctl-dyn d; n=$(nproc); half=$((n / 2))
  [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] || { fail allotcgdyn "no cgroup v2 at /sys/fs/cgroup"; return; }
  for d in "$base"-*; do [ -d "$d" ] && rmdir "$d"; done
  if [ -n "$sched_pid" ]; then allot_cur=""; stop_sched || { fail allotcgdyn "previous scheduler exit non-zero: $(sched_why)"; return; }; fi
  allot_cur=cgdyn
  # The pattern matches nothing when the scheduler starts.
  start_sched --allot equi --job "$base-*" || { fail allotcgdyn "scheduler did not load with --job: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; }
  allot_service $((n * 2)) 400 >"$out/cgdyn-svc.json" 2>>"$out/allot.err" & local sp=$!
  sleep 3
  # START_JOB: a cgroup created after the start.
  local tmk; tmk=$(date +%s%N)
  mkdir "$base-a"; cgjob_hog "$base-a" 300 >/dev/null 2>>"$out/allot.err" & local ha=$!
  local lat_start; lat_start=$(cgjob_logwait started "$base-a" "$tmk")
  local ja; ja=$(cgjob_wait "$base-a")
  if [ -z "$ja" ]; then kill -9 $ha $sp; wait $ha $sp 2>/dev/null; cgjob_rmdir "$base-a"; stop_sched; fail allotcgdyn "a cgroup created after the start did not become a job: $(grep -i cgroup "$out/sched.log" | tail -n 3 | tr '\n"' ' ')"; return; fi
  sleep 3
  allot_jobs_json "$out/d1"; sleep 6; allot_jobs_json "$out/d2"
  local ca; ca=$(allot_cores "$out/d1" "$out/d2")
  # a runs 8 s more: its CPU time must clearly exceed what b can run before b's first dump.
  sleep 8
  # EXIT_JOB: its processes exit, the cgroup is removed.
  kill -9 $ha; wait $ha 2>/dev/null
  cgjob_rmdir "$base-a" || { kill -9 $sp; wait $sp 2>/dev/null; stop_sched; fail allotcgdyn "cannot remove $base-a"; return; }
  local lat_end; lat_end=$(cgjob_logwait ended "$base-a" "$cg_rmdir_ns")
  # a's last job_acct entry (its CPU time in all): what b's entry would start from if it were not reset.
  "$wl/tailctl" maps dump job_acct --json >"$out/d3.acct" 2>>"$out/allot.err"
  local freed="" st_free=""
  for _ in $(seq 1 30); do
    st_free=$(cgjob_state) || break
    freed=$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print("yes" if not d["cg"] and not d["ids"] and d["allot"].get(sys.argv[2]) == int(sys.argv[3]) else "")' "$st_free" "$sp" "$n")
    [ -n "$freed" ] && break
    sleep 0.2
  done
  # A second new cgroup takes the freed slot, clean.
  local tb; tb=$(date +%s%N)
  mkdir "$base-b"; cgjob_hog "$base-b" 200 >/dev/null 2>>"$out/allot.err" & local hb=$!
  local jb; jb=$(cgjob_wait "$base-b")
  allot_jobs_json "$out/e1"; sleep 6; allot_jobs_json "$out/e2"
  local cb; cb=$(allot_cores "$out/e1" "$out/e2")
  # A full table: 8 more matching cgroups while b runs (9 wanted, 8 cgroup jobs at most).
  for d in 1 2 3 4 5 6 7 8; do mkdir "$base-f$d"; done
  sleep 2
  local st_full; st_full=$(cgjob_state)
  local full_lines; full_lines=$(grep -c "matches --job but is not a job" "$out/sched.log")
  for d in 1 2 3 4 5 6 7 8; do rmdir "$base-f$d"; done
  kill -9 $hb $sp; wait $hb $sp 2>/dev/null
  cgjob_rmdir "$base-b"
  local st_end=""
  for _ in $(seq 1 30); do st_end=$(cgjob_state) || break; $PY -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if not d["cg"] and not d["ids"] else 1)' "$st_end" && break; sleep 0.2; done
  local st; st=$(allot_stats)
  sched_alive || { fail allotcgdyn "scheduler ejected: $(sched_why)"; return; }
  allot_end allotcgdyn || { fail allotcgdyn "scheduler exit non-zero: $(sched_why)"; return; }
  grep -i "cgroup job" "$out/sched.log" >"$out/allotcgdyn-log.txt"
  echo "{\"a\": \"$ja\", \"b\": \"$jb\", \"start_ms\": ${lat_start:-null}, \"end_ms\": ${lat_end:-null}, \"cores_a\": $ca, \"cores_b\": $cb, \"freed\": ${st_free:-null}, \"full\": ${st_full:-null}, \"end\": ${st_end:-null}, \"stats\": $st}" >"$out/allotcgdyn.json"
  local verdict
  verdict=$($PY - "$out/allotcgdyn.json" "$out/e1" "$tb" "$half" "$n" "$sp" "$full_lines" "$out/d3.acct" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); e1, tb, half, n, sp, full_lines = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], int(sys.argv[7])
try:
    d3 = {x["key"]: x["value"] for x in json.load(open(sys.argv[8]))}
except (OSError, ValueError):
    d3 = {}
st = d["stats"]; why = []
if not d["b"]:
    print("bad", "the second new cgroup never became a job (freed state: %s)" % d["freed"]); sys.exit()
sa, ea = (int(x) for x in d["a"].split()); sb, eb = (int(x) for x in d["b"].split())
def capped(name, jobs, slot):
    j = jobs.get(str(0x80000000 + slot))
    if not j:
        why.append(f"cgroup job {name} not seen in job_acct"); return None
    if j["allot"] != half:
        why.append(f"cgroup job {name} allotted {j['allot']}, expected {half}")
    if j["own"] > half * 1.1 + 0.1:
        why.append(f"cgroup job {name} ran {j['own']} cores within an allotment of {half}")
    if j["cores"] < half * 0.4:
        why.append(f"cgroup job {name} got {j['cores']} cores of its {half}: its tasks are not charged to it")
    return j
ja, jb = capped("a", d["cores_a"], sa), capped("b", d["cores_b"], sb)
fr = d["freed"]
if not fr or fr["cg"] or fr["ids"] or fr["allot"].get(sp) != n:
    why.append(f"after a's exit, its slot was not freed or the service not allotted all {n} CPUs: {fr}")
if sb != sa:
    why.append(f"the second cgroup took slot {sb}, not the freed {sa}")
if eb == ea:
    why.append(f"the reused slot kept epoch {ea}: same owner, stale state")
# Clean start: b's job_acct entry is b's (its owner) and holds no more CPU time than b's age allows.
acct = {x["key"]: x["value"] for x in json.load(open(e1 + ".acct"))}
t1 = int(open(e1 + ".t").read())
b = acct.get(sb, {})
owner_b = (eb << 32) + 0x80000000 + sb
age = (t1 - tb) / 1e9
# a's total CPU time (its entry after its exit): an entry not reset for b would start there.
a_last = d3.get(sa, {})
a_cpu = a_last["cpu_ns"] / 1e9 if a_last.get("owner") == (ea << 32) + 0x80000000 + sa else None
if b.get("owner") != owner_b:
    why.append(f"slot {sb}'s job_acct owner {b.get('owner')} is not b's {owner_b}")
elif b["cpu_ns"] / 1e9 > age * n * 1.05 + 0.1:
    why.append(f"b's job_acct holds {b['cpu_ns'] / 1e9:.1f} s of CPU at age {age:.1f} s on {n} CPUs: carried over")
elif a_cpu is None:
    why.append("a's final job_acct entry was not found: cannot tell b's entry was reset")
elif b["cpu_ns"] / 1e9 >= a_cpu:
    why.append(f"b's job_acct holds {b['cpu_ns'] / 1e9:.1f} s of CPU, at least a's {a_cpu:.1f} s: carried over?")
if d["start_ms"] is None or d["end_ms"] is None:
    why.append(f"no start/end log line within 10 s (start {d['start_ms']}, end {d['end_ms']})")
fu = d["full"]
if not fu or len(fu["cg"]) != 8:
    why.append(f"with 9 matching cgroups, {len(fu['cg']) if fu else None} cgroup jobs (expected 8)")
if full_lines < 1:
    why.append("no log line for the cgroup that found no slot")
en = d["end"]
if not en or en["cg"] or en["ids"]:
    why.append(f"cgroup jobs left after every cgroup was removed: {en}")
if st["watchdog_margin_ms"] < 25000:
    why.append(f"a job thread waited {st.get('allot_max_wait_ns', 0) / 1e6:.0f} ms")
msg = (f"mkdir -> start logged {d['start_ms']} ms, rmdir -> end logged {d['end_ms']} ms; a: slot {sa} epoch {ea}, allot {ja and ja['allot']}, {ja and ja['own']} own + {ja and ja['borrowed']} borrowed cores; "
       f"after its exit freed={bool(fr and not fr['cg'])}, service allot {fr and fr['allot'].get(sp)}; "
       f"b: slot {sb} epoch {eb}, job_acct at age {age:.1f} s: {b.get('cpu_ns', 0) / 1e9:.2f} s CPU (a's entry ended at {a_cpu and round(a_cpu, 2)} s); "
       f"allot {jb and jb['allot']}, {jb and jb['own']} own + {jb and jb['borrowed']} borrowed cores; "
       f"full table: {len(fu['cg']) if fu else None} cgroup jobs, {full_lines} refusal line(s); "
       f"longest job-token wait {st.get('allot_max_wait_ns', 0) / 1e6:.1f} ms (watchdog margin {st['watchdog_margin_ms']} ms)")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotcgdyn "${verdict#ok }" "\"detail\": $(cat "$out/allotcgdyn.json")";; *) fail allotcgdyn "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

test_allotcgnest() {
  local n half nest=/sys/fs/cgroup/tailctl-nest; n=$(nproc); half=$((n / 2))
  [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] || { fail allotcgnest "no cgroup v2 at /sys/fs/cgroup"; return; }
  mkdir -p "$nest/child" "$nest/inner-1/leaf" || { fail allotcgnest "cannot create the cgroups under $nest"; return; }
  cgnest_clean() { rmdir "$nest/inner-1/leaf" "$nest/inner-1" "$nest/child" "$nest" 2>/dev/null; }
  if [ -n "$sched_pid" ]; then allot_cur=""; stop_sched || { fail allotcgnest "previous scheduler exit non-zero: $(sched_why)"; return; }; fi
  allot_cur=cgnest
  start_sched --allot equi --job "$nest" --job "$nest/inner-*" || { fail allotcgnest "scheduler did not load with --job: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; cgnest_clean; return; }
  # Neither hog is in a cgroup named by --job itself: one in a child of OUTER, one in a child of inner-1.
  # Both outlive the measurement (map dumps take seconds under TCG) and are killed after it.
  cgjob_hog "$nest/child" 300 >/dev/null 2>>"$out/allot.err" & local ho=$!
  cgjob_hog "$nest/inner-1/leaf" 300 >/dev/null 2>>"$out/allot.err" & local hi=$!
  local so si; so=$(cgjob_wait "$nest"); si=$(cgjob_wait "$nest/inner-1")
  sleep 3
  local t1 t2
  t1=$(allot_thread_ticks $ho)
  allot_jobs_json "$out/g1"; sleep 6; allot_jobs_json "$out/g2"
  t2=$(allot_thread_ticks $ho)
  kill -9 $ho $hi; wait $ho $hi 2>/dev/null
  local st; st=$(allot_stats); local jobs; jobs=$(allot_cores "$out/g1" "$out/g2")
  sched_alive || { fail allotcgnest "scheduler ejected: $(sched_why)"; cgnest_clean; return; }
  allot_end allotcgnest || { fail allotcgnest "scheduler exit non-zero: $(sched_why)"; cgnest_clean; return; }
  cgjob_rmdir "$nest/child"; cgjob_rmdir "$nest/inner-1/leaf"; cgnest_clean
  echo "{\"outer\": \"$so\", \"inner\": \"$si\", \"jobs\": $jobs, \"stats\": $st}" >"$out/allotcgnest.json"
  # Reported, not needed: the walk uses CO-RE reads, not the kfunc.
  local kf; kf=$(grep -cw bpf_cgroup_ancestor /proc/kallsyms 2>/dev/null)
  local verdict
  verdict=$($PY - "$out/allotcgnest.json" "$half" "$t1" "$t2" "$kf" <<'PY'
import json, sys
d, half = json.load(open(sys.argv[1])), int(sys.argv[2])
tick = lambda s: dict((int(a), int(b)) for a, b in (w.split(":") for w in s.split()))
t1, t2 = tick(sys.argv[3]), tick(sys.argv[4])
st, jobs = d["stats"], d["jobs"]; why = []
if not d["outer"] or not d["inner"]:
    print("bad", f"a --job cgroup did not become a job: outer {d['outer']!r}, inner {d['inner']!r}"); sys.exit()
so, si = int(d["outer"].split()[0]), int(d["inner"].split()[0])
res = {}
for name, slot in (("outer (hog in a child)", so), ("inner-1 (hog in a grandchild of outer)", si)):
    j = jobs.get(str(0x80000000 + slot))
    res[name] = j
    if not j:
        why.append(f"{name}: not in job_acct"); continue
    if j["allot"] != half:
        why.append(f"{name}: allotted {j['allot']}, expected {half}")
    if j["own"] > half * 1.1 + 0.1:
        why.append(f"{name}: ran {j['own']} cores within an allotment of {half}")
    if j["cores"] < half * 0.4:
        why.append(f"{name}: got {j['cores']} cores of its {half}: the descendant's tasks are not charged to it")
spin = {t: t2[t] - t1.get(t, 0) for t in t2}
workers = sorted(spin.values())[1:] if len(spin) > 1 else []
if not workers or workers[0] == 0:
    why.append(f"a hog thread in the child made no progress: ticks {sorted(spin.values())}")
if st["watchdog_margin_ms"] < 25000:
    why.append(f"a job thread waited {st.get('allot_max_wait_ns', 0) / 1e6:.0f} ms")
msg = "; ".join(f"{k}: slot {0 if not v else v['slot']}, allot {v and v['allot']}, {v and v['own']} own + {v and v['borrowed']} borrowed cores"
                for k, v in res.items())
msg += (f"; child hog threads' ticks min {workers[0] if workers else None} max {workers[-1] if workers else None}; "
        f"longest job-token wait {st.get('allot_max_wait_ns', 0) / 1e6:.1f} ms (watchdog margin {st['watchdog_margin_ms']} ms), "
        f"{st.get('allot_waits')} waits, {st.get('allot_overdue')} overdue; "
        f"kfunc bpf_cgroup_ancestor in kallsyms: {'yes' if sys.argv[5] not in ('', '0') else 'no'}")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotcgnest "${verdict#ok }" "\"detail\": $(cat "$out/allotcgnest.json")";; *) fail allotcgnest "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

test_allotreqalloc() {
  local n; n=$(nproc)
  if [ -n "$sched_pid" ]; then allot_cur=""; stop_sched || { fail allotreqalloc "previous scheduler exit non-zero: $(sched_why)"; return; }; fi
  allot_cur=reqshares
  start_sched --allot equi --request-shares || { fail allotreqalloc "scheduler did not load with --request-shares: $(sched_why)"; return; }
  exec_svc() { exec "$ktest" -w "$n" greedy --benign --secs 40 --requests 2 --items 8 --item-us 20000; }
  exec_svc >"$out/allot-req.json" 2>>"$out/allot.err" & local sp=$!
  sleep 10
  "$wl/tailctl" maps dump req_acct --json >"$out/req_acct.json" 2>>"$out/allot.err"; local drc=$?
  "$wl/tailctl" maps dump regions 2>>"$out/allot.err" | sed -n '/^REQUESTS/,/^WORKERS/p' | head -n 8 >"$out/allotreqalloc-maps.txt"
  kill -9 $sp; wait $sp 2>/dev/null
  sched_alive || { fail allotreqalloc "scheduler ejected: $(sched_why)"; return; }
  allot_end allotreqalloc || { fail allotreqalloc "scheduler exit non-zero: $(sched_why)"; return; }
  [ $drc = 0 ] || { fail allotreqalloc "req_acct dump failed: $(tail -c 300 "$out/allot.err")"; return; }
  local verdict
  verdict=$($PY - "$out/req_acct.json" "$sp" "$n" <<'PY'
import json, sys
entries = [e["value"] for e in json.load(open(sys.argv[1]))]
pid, n = int(sys.argv[2]), int(sys.argv[3])
mine = [v for v in entries if v["owner"] and v["owner"] & 0xffffffff == pid and v["shared_starts"]]
why = []
if not mine:
    print("bad", "no request of the service ran under a per-request share"); sys.exit()
starts = sum(v["shared_starts"] for v in mine)
over = sum(v["over_alloc"] for v in mine)
steady = [v for v in mine if v["share_min"] == v["share_max"]]
worst = max((v["max_running_shared"] - v["share_max"] for v in steady), default=None)
shares = sorted({v["share_max"] for v in mine} | {v["share_min"] for v in mine})
mx = max(v["max_running_shared"] for v in mine)
if worst is None:
    why.append("no request kept one share all its life")
elif worst > 0:
    why.append(f"a request with a constant share ran {worst} threads over it")
if n // 2 not in shares:
    why.append(f"shares seen {shares}, expected {n // 2} (2 requests, allotment {n})")
msg = (f"{len(mine)} requests under a share (shares seen {shares}), {len(steady)} with one share all along: "
       f"most running over the share {worst}; most running at a start {mx}; "
       f"{over} of {starts} starts found more running than the share")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotreqalloc "${verdict#ok }";; *) fail allotreqalloc "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}

test_allotmug() {
  local n; n=$(nproc)
  allot_sched equi || { fail allotmug "scheduler did not load with --allot equi: $(sched_why)"; return; }
  # The scheduler may be shared with the previous test: its counters are taken as deltas.
  local st0; st0=$(allot_stats)
  "$ktest" -w $((n * 2)) greedy --benign --secs 25 --requests 16 --items 8 --item-us 20000 \
    --watch-desched >"$out/allot-mug.json" 2>>"$out/allot.err" & local mp=$!
  allot_service "$n" 25 >"$out/allot-mug-other.json" 2>>"$out/allot.err" & local op=$!
  sleep 6
  allot_jobs_json "$out/m1"; sleep 6; allot_jobs_json "$out/m2"
  wait $mp; local mrc=$?; wait $op; local orc=$?
  local st; st=$(allot_stats); local jobs; jobs=$(allot_cores "$out/m1" "$out/m2")
  sched_alive || { fail allotmug "scheduler ejected: $(sched_why)"; return; }
  allot_end allotmug || { fail allotmug "scheduler exit non-zero: $(sched_why)"; return; }
  [ $mrc = 0 ] && [ $orc = 0 ] || { fail allotmug "a service failed ($mrc/$orc): $(tail -c 300 "$out/allot.err")"; return; }
  echo "{\"mug\": $(cat "$out/allot-mug.json"), \"other\": $(cat "$out/allot-mug-other.json"), \"jobs\": $jobs, \"stats0\": $st0, \"stats\": $st}" >"$out/allotmug.json"
  local verdict
  verdict=$($PY - "$out/allotmug.json" "$mp" "$n" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); pid, n = sys.argv[2], int(sys.argv[3])
m, o, st, st0 = d["mug"], d["other"], d["stats"], d["stats0"]
for k in ("allot_descheds", "allot_waits"):
    st[k] = st.get(k, 0) - st0.get(k, 0)
j = d["jobs"].get(pid) or {}
why = []
if j.get("allot") is not None and j["allot"] >= 2 * n:
    why.append(f"allotted {j['allot']}: not below its {2 * n} workers")
if st.get("allot_descheds", 0) == 0:
    why.append("the kernel never marked a worker descheduled")
if m["desched_flagged"] == 0:
    why.append(f"no descheduled flag seen set in {m['desched_samples']} samples")
if m["desched_mugs"] == 0:
    why.append("no task was mugged")
if m["requests"] == 0 or o["requests"] == 0:
    why.append(f"requests completed: {m['requests']} / {o['requests']}")
msg = (f"service ({2 * n} workers, allot {j.get('allot')}, {j.get('cores')} cores): {m['requests']} requests, "
       f"{m['desched_mugs']} mugged of {m['steals']} stolen tasks; flags set in {m['desched_flagged']} of "
       f"{m['desched_samples']} samples (mean {m['desched_mean']:.2f}, at most {m['desched_max']} at once); kernel marks {st.get('allot_descheds')}, "
       f"job-token waits {st.get('allot_waits')}; other job {o['requests']} requests; "
       f"watchdog margin {st.get('watchdog_margin_ms')} ms")
print("bad" if why else "ok", "; ".join(why) + (" | " if why else "") + msg)
PY
)
  case "$verdict" in ok*) pass allotmug "${verdict#ok }";; *) fail allotmug "${verdict#bad }$(allot_err_hint "$verdict")";; esac
}
