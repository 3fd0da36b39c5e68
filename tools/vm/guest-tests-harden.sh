# Hardening guest tests (issue 15, the kernel half), sourced by guest-tests.sh
# (which provides start_sched/stop_sched/pass/fail/jget, $bin, $out, $PY, $ktest).
# Each one fails on the scheduler before the fix:
#   pinned:    workers pinned one per CPU get throttled (the service clears
#              the kernel's SERIALIZED marks, so they keep joining the capped
#              request); a waiter handed to a CPU it may not run on used to be
#              a fatal scx_error (ejection).
#   greedy:    a 1 ns threshold and 64 requests in flight (2 x 500 ms items,
#              2 workers per CPU, so workers pair up on each capped request and
#              hand its token back and forth, a waiter ready at every turn; it
#              also clears the kernel's SERIALIZED marks so stealing goes on)
#              beside an unregistered CPU-bound neighbour: the neighbour must
#              keep >= 0.9x the CPU it gets beside a twin of the same size that
#              is never capped (throttle queues used to outrank the fair queue:
#              0.63x). 40 s beside the capped service: past the 30 s watchdog.
#   leaks:     --partial; workers re-pinned, re-niced and switched in and out
#              of SCHED_EXT while their requests are capped; after quiescing,
#              no token, wait count or runner may be left in the kernel's
#              accounting (no ops.disable / re-enqueue fix-up before).
#   races:     the same check under sleep/wake churn on many short capped
#              requests, and no counter may ever wrap (CAS-then-zero resets and
#              unguarded decrements used to).
#   waitbound: one CPU online, 1 s slices, a 100 ms wait bound: a waiter must
#              be let through near its bound though no CPU dispatches before
#              the holder's slice ends (only ops.dispatch enforced it before).
#   waitrenice: (in the default list, before waitbound) the same with every CPU
#              online while a re-nicer on another CPU toggles the waiter's
#              nice value every 20 ms (each a re-enqueue).
#   waitunpinned: the wait bound for an unpinned waiter with every CPU busy
#              (a hog per CPU, 1 s slices, sleepers queued ahead of the
#              frontier): threads let through at the 100 ms bound ran 1.1-2.0 s
#              after they began to wait, in the fair queue (session 22: eight
#              runs on 6.18, one on 7.3).
#   waitextend: the same with the fair queues empty (a hog fewer than CPUs,
#              no sleepers): the CPU that released such a waiter to its own
#              local queue extended the slice of the task it left, 1 s.
#   waitjob:   the same bound for a job's waiters (its allotment's token
#              queue, not a request's cap): a cgroup job of twice as many
#              CPU-bound threads as its allotment beside a hog per CPU; those
#              let through at the bound went to the fair queue at the
#              frontier, 0.4-2.0 s (session 24, before heads for job waiters).
#   rcureader: khugepaged (nice 19) kept busy collapsing huge pages (RCU
#              read-side copies) beside the greedy load: preempted mid-copy it
#              held a grace period 21 s, the RCU stall detector ejected us
#              (rarely: this test passed 4 of 4 runs before the fix).
#   rtpreempt: an RT spinner takes the CPU of a running task (unregistered,
#              and a registered worker without a cap): without
#              ops.cpu_release the task waited behind it in that CPU's local
#              queue (7.3: 0.04-0.74 of a CPU during the spin). Asserted on
#              7.x only (see the test).
#   slotreuse: a service killed mid-serialization (its workers queued for the
#              token: it clears the SERIALIZED marks); the next registration in
#              its slot must not inherit its cap (same request tag).
#   yieldkeep: sched_yield() with nothing else to run on the machine keeps the
#              CPU without an ops.dispatch round trip (counted in yields_kept:
#              at least half the yields of a lone yielder on CPU 0; none were
#              before), and with a CPU hog pinned beside it on CPU 0 the yields
#              still hand the CPU over: at most a quarter of the yields are
#              kept, and each yield gave the hog its slice: the yielder made
#              at most 1.25 yields per 5 ms slice of its 3 s loop (a kept
#              yield returns at once: a lone yielder makes thousands per
#              slice). Not a timing bound: a slower host only lowers the
#              count. The yielder's own CPU share over the loop and the hog's
#              over its life are reported, not asserted: each depends on how
#              fast the emulated CPU runs python (the hog's includes python's
#              start-up, fair sharing, 0.78 in session 32's CI).
# Every test, old and new, also checks through stop_sched that the kernel
# counted no leaked token (check_token_leaks).

# The running scheduler's token_leaks, or nothing if it cannot be read (not
# running, or a scheduler from before the counter existed).
token_leaks() {
  "$ktest" stats 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["token_leaks"])' 2>/dev/null
}
# Prints why and fails if the running scheduler found a leaked token.
check_token_leaks() {
  local n; n=$(token_leaks)
  [ -z "$n" ] || [ "$n" = 0 ] || { echo "token_leaks = $n (a token or wait count was lost)"; return 1; }
  return 0
}
sched_alive() { kill -0 "$sched_pid" 2>/dev/null && [ "$(state)" = enabled ]; }
# Why the scheduler went: its exit lines and, from the kernel's exit dump, the
# three tasks that had been runnable longest (a starved task shows there).
sched_why() {
  grep -iE 'disabled|error|exit' "$out/sched.log" | tail -n 3 | tr '\n"' ' '
  local waits
  waits=$(grep -oE '[^ ]+\[[0-9]+\] [-+][0-9]+ms' "$out/sched.log" | sort -t' ' -k2 -g | head -n 3 | tr '\n' ' ')
  [ -z "$waits" ] || echo "longest runnable: $waits"
}

test_pinned() {
  local w; w=$(nproc)
  start_sched || { fail pinned "scheduler did not load"; return; }
  local k; k=$(timeout 300 "$ktest" -w "$w" serialize --pin --ignore-cap --threshold-ms 20 --huge-ms 1500 --small-every-ms 40 2>"$out/ktest.err"); local rc=$?
  sched_alive || { fail pinned "scheduler ejected while pinned workers were throttled: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail pinned "scheduler exit non-zero: $(sched_why)"; return; }
  [ $rc = 0 ] || { fail pinned "ktest failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local thr; thr=$(jget "$k" kernel.throttled)
  [ "$(jget "$k" kernel.serialized)" = True ] && [ "${thr:-0}" -gt 0 ] 2>/dev/null \
    || { fail pinned "no pinned worker was throttled, nothing tested: $k"; return; }
  pass pinned "$w workers pinned one per CPU, $thr throttled waits, scheduler stayed enabled" "\"kernel\": $k"
}

# The running scheduler's yields_kept (0 if it has no such counter).
yields_kept() {
  "$ktest" stats 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("yields_kept", 0))' 2>/dev/null
}

test_yieldkeep() {
  local yl='import os, sys, time
t0 = time.monotonic(); c0 = time.process_time(); t = t0 + float(sys.argv[1]); n = 0
while time.monotonic() < t:
    os.sched_yield(); n += 1
print(n, round((time.process_time() - c0) / (time.monotonic() - t0), 4))'
  # The loop's length and the slice, named once: the check below counts slices in the loop.
  local secs=3 slice_us=5000
  start_sched --slice-us "$slice_us" || { fail yieldkeep "scheduler did not load"; return; }
  local k0 n1 k1 hp n2 k2 s1 s2
  k0=$(yields_kept)
  read -r n1 s1 < <(taskset -c 0 "$PY" -c "$yl" "$secs")
  k1=$(yields_kept)
  # The hog outlives the yielder by 4 s: a python slow to start on a loaded
  # host (seconds, beside three other VMs) yielded mostly after a 5 s hog had
  # ended, and its start-up took a fifth of the hog's CPU.
  taskset -c 0 "$ktest" hog --secs 8 --threads 1 >"$out/yieldkeep-hog.json" 2>"$out/ktest.err" & hp=$!
  sleep 1
  read -r n2 s2 < <(taskset -c 0 "$PY" -c "$yl" "$secs")
  k2=$(yields_kept)
  wait $hp; local hrc=$?
  sched_alive || { fail yieldkeep "scheduler ejected: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail yieldkeep "scheduler exit non-zero: $(sched_why)"; return; }
  [ $hrc = 0 ] && [ -n "$n1" ] && [ -n "$s2" ] && [ -n "$k0" ] && [ -n "$k2" ] \
    || { fail yieldkeep "a run failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local verdict
  verdict=$($PY - "$n1" "$((k1 - k0))" "$n2" "$((k2 - k1))" "$s2" "$(cat "$out/yieldkeep-hog.json")" "$secs" "$slice_us" <<'PY'
import json, sys
n1, kept1, n2, kept2 = (int(v) for v in sys.argv[1:5])
share = float(sys.argv[5])
hog = json.loads(sys.argv[6])["cpus"]
secs, slice_ms = float(sys.argv[7]), int(sys.argv[8]) / 1000
slices = secs * 1000 / slice_ms
why = []
if n1 < 100 or kept1 < n1 / 2:
    why.append(f"alone: {kept1} of {n1} yields kept the CPU (want at least half)")
# At most one hog slice per yield that waited for one.
if n2 > 1.25 * slices:
    why.append(f"beside the pinned hog the yielder made {n2} yields in {secs:g} s (> {1.25 * slices:.0f}, "
               f"1.25 per {slice_ms:g} ms slice): they did not wait for the hog's slice")
if kept2 > n2 / 4:
    why.append(f"beside the hog: {kept2} of {n2} yields kept the CPU (want at most a quarter)")
msg = (f"alone {kept1} of {n1} yields kept; beside a pinned hog {kept2} of {n2} kept ({n2 / slices:.2f} per "
       f"{slice_ms:g} ms slice), the yielder used {share:.3f} of the CPU over its loop (the hog {hog:.2f} over its life, "
       f"python's start-up included)")
print(("bad " + "; ".join(why) + " | " + msg) if why else ("ok " + msg))
PY
)
  case "$verdict" in ok*) pass yieldkeep "${verdict#ok }" "\"alone\": [$n1, $((k1 - k0)), $s1], \"beside_hog\": [$n2, $((k2 - k1)), $s2]";; *) fail yieldkeep "${verdict#bad }";; esac
}

test_greedy() {
  local w=${GREEDY_WORKERS:-$(($(nproc) * 2))} secs=${GREEDY_SECS:-40} base=${GREEDY_BASE_SECS:-20} shape="--items ${GREEDY_ITEMS:-2} --item-us ${GREEDY_ITEM_US:-500000} --sleep-us ${GREEDY_SLEEP_US:-0}"
  start_sched || { fail greedy "scheduler did not load"; return; }
  # The neighbour beside a well-behaved twin (same workers, same requests, never capped)...
  "$ktest" -w "$w" greedy --benign --ignore-cap $shape --requests 64 --secs $((base + 4)) >"$out/greedy-benign.json" 2>"$out/ktest.err" &
  local sp=$!; sleep 2
  local nb; nb=$("$ktest" hog --secs "$base")
  wait $sp
  # ... and beside the same service with a 1 ns threshold (every request capped, waiters always queued).
  "$ktest" -w "$w" greedy --threshold-ns 1 --ignore-cap $shape --requests 64 --secs $((secs + 4)) >"$out/greedy.json" 2>>"$out/ktest.err" &
  sp=$!; sleep 2
  local ng; ng=$("$ktest" hog --secs "$secs")
  wait $sp; local grc=$?
  sched_alive || { fail greedy "scheduler ejected beside the 1 ns service: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail greedy "scheduler exit non-zero: $(sched_why)"; return; }
  [ $grc = 0 ] && [ -n "$nb" ] && [ -n "$ng" ] || { fail greedy "a run failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local ser; ser=$(jget "$(cat "$out/greedy.json")" kernel_serialized)
  local ratio; ratio=$($PY -c "import json,sys; print(round(json.loads(sys.argv[2])['cpus']/json.loads(sys.argv[1])['cpus'],3))" "$nb" "$ng")
  [ "${ser:-0}" -gt 0 ] 2>/dev/null || { fail greedy "the 1 ns service was never capped: $(cat "$out/greedy.json")"; return; }
  $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.9 else 1)" "$ratio" \
    || { fail greedy "neighbour got $ratio x its CPU beside the twin (< 0.9): twin $nb, capped $ng"; return; }
  pass greedy "neighbour CPU beside the 1 ns service / beside its twin = $ratio ($ser requests capped, ${secs} s)" \
    "\"ratio\": $ratio, \"beside_twin\": $nb, \"beside_capped\": $ng"
}

# khugepaged (a nice-19 kthread) kept collapsing huge pages (no sleeps between
# scans; a helper splits 32 huge pages every second) beside the `greedy` load
# (a 1 ns service, 2 workers per CPU, and CPU hogs), with a grace period always
# pending (membarrier(MEMBARRIER_CMD_GLOBAL) is a synchronize_rcu()).
# khugepaged copies each huge page inside an RCU read-side critical section;
# preempted there and charged 100x its run time for its weight, it ran a few
# ms every few seconds and held the grace period for 21 s: the kernel ejected
# the scheduler with "RCU CPU stall on CPUs ()" (the list is empty: a task,
# not a CPU, held it). Now such a reader queues without its weight's debt.
# Not a reliable reproducer: before the fix this test passed 4 runs of 4 on
# 7.3; the same load run inside the greedy test (its benign phase first)
# failed 1 of 1 before the fix and 0 of 1 after. A pass proves little.
test_rcureader() {
  local w=$(($(nproc) * 2)) secs=${RCUREADER_SECS:-40} kd=/sys/kernel/mm/transparent_hugepage/khugepaged
  [ -d "$kd" ] || { fail rcureader "no khugepaged ($kd)"; return; }
  local old; old="$(cat $kd/scan_sleep_millisecs) $(cat $kd/alloc_sleep_millisecs) $(cat $kd/pages_to_scan)"
  local c0; c0=$(cat $kd/pages_collapsed)
  start_sched || { fail rcureader "scheduler did not load"; return; }
  echo 0 >$kd/scan_sleep_millisecs; echo 0 >$kd/alloc_sleep_millisecs; echo 4096 >$kd/pages_to_scan
  "$PY" - <<'PY' &
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_DONTNEED, MADV_HUGEPAGE, MADV_NOHUGEPAGE, H, N = 4, 14, 15, 2 << 20, 32
base = libc.mmap(None, (N + 1) * H, 3, 0x22, -1, 0)  # RW, private anonymous
a = (base + H - 1) & ~(H - 1)
libc.madvise(a, N * H, MADV_NOHUGEPAGE)  # faulted in as small pages, for khugepaged to collapse
ctypes.memset(a, 1, N * H)
libc.madvise(a, N * H, MADV_HUGEPAGE)
while True:
    time.sleep(1)
    for i in range(N):  # one 4 KiB page dropped splits a huge page's mapping: collapsed again
        libc.madvise(a + i * H, 4096, MADV_DONTNEED)
PY
  local sp_split=$!
  "$PY" -c 'import ctypes
l = ctypes.CDLL(None)
while True: l.syscall(324, 1, 0, 0)' &
  local sp_gp=$!
  "$ktest" -w "$w" greedy --threshold-ns 1 --ignore-cap --requests 64 --secs $((secs + 4)) >"$out/rcureader-greedy.json" 2>>"$out/ktest.err" &
  local sp=$!; sleep 2
  "$ktest" hog --secs "$secs" >/dev/null
  wait $sp; local grc=$?
  kill $sp_split $sp_gp 2>/dev/null; wait $sp_split $sp_gp 2>/dev/null
  set -- $old; echo "$1" >$kd/scan_sleep_millisecs; echo "$2" >$kd/alloc_sleep_millisecs; echo "$3" >$kd/pages_to_scan
  local n=$(($(cat $kd/pages_collapsed) - c0))
  sched_alive || { fail rcureader "scheduler ejected beside a busy khugepaged: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail rcureader "scheduler exit non-zero: $(sched_why)"; return; }
  [ $grc = 0 ] || { fail rcureader "ktest greedy failed: $(tail -c 300 "$out/ktest.err")"; return; }
  [ "$n" -gt 0 ] || { fail rcureader "khugepaged collapsed nothing, nothing tested"; return; }
  pass rcureader "khugepaged collapsed $n huge pages beside a 1 ns service and CPU hogs (${secs} s), scheduler stayed enabled" "\"collapsed\": $n"
}

# A churn run's verdict: every counter drained, something was throttled.
churn_verdict() {
  "$PY" - "$1" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); q = r["after_quiesce"]; j = r.get("job_after_quiesce") or {}
left = {k: q[k] for k in ("holders", "waiting", "running", "arriving", "overdue_running", "unheld_running") if q[k]}
left.update({f"job {k}": j[k] for k in ("holders", "waiting", "running", "borrowing") if j.get(k)})
# Under an allotment controller a job allotted one CPU never has two runners in a request, so
# its waits are for job tokens, not for a request's cap (session 31's CI: 0 request throttles).
waits = q["throttled_total"] + j.get("waits", 0)
if left: print("bad", f"left in the kernel's accounting after quiescing: {left}")
elif r["max_counter_during"] >= 1 << 20: print("bad", f"a counter wrapped (saw {r['max_counter_during']})")
elif not waits: print("bad", "nothing was throttled: the test proves nothing")
else: print("ok", f"{r['requests']} requests, {r['changes']} changes, {q['throttled_total']} throttled waits, "
                  f"{j.get('waits', 0)} job-token waits; all counters back to 0, none wrapped")
PY
}

test_leaks() {
  start_sched --partial || { fail leaks "scheduler did not load (--partial)"; return; }
  # LEAKS_AFFINITY=0 leaves re-pinning out (before the fix it ejected the scheduler first).
  local kinds="--nice --policy"; [ "${LEAKS_AFFINITY:-1}" = 1 ] && kinds="--affinity $kinds"
  # shellcheck disable=SC2086
  local r; r=$(timeout 300 "$ktest" -w 8 churn --secs 20 $kinds 2>"$out/ktest.err"); local rc=$?
  sched_alive || { fail leaks "scheduler ejected: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail leaks "scheduler exit non-zero: $(sched_why)"; return; }
  [ $rc = 0 ] || { fail leaks "ktest churn failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local v; v=$(churn_verdict "$r")
  case "$v" in ok*) pass leaks "${v#ok }" "\"churn\": $r";; *) fail leaks "${v#bad }";; esac
}

test_races() {
  start_sched || { fail races "scheduler did not load"; return; }
  local r; r=$(timeout 300 "$ktest" -w 8 churn --secs 20 --sleep --requests 32 --threshold-ms 1 2>"$out/ktest.err"); local rc=$?
  sched_alive || { fail races "scheduler ejected: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail races "scheduler exit non-zero: $(sched_why)"; return; }
  [ $rc = 0 ] || { fail races "ktest churn failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local v; v=$(churn_verdict "$r")
  case "$v" in ok*) pass races "${v#ok }" "\"churn\": $r";; *) fail races "${v#bad }";; esac
}

# CPUs 1.. offline (before the scheduler loads: sched_ext restarts a loaded
# scheduler on hotplug) / back online.
cpus_offline() { local c; for c in /sys/devices/system/cpu/cpu[1-9]*/online; do echo "$1" >"$c" 2>/dev/null; done; }

# CPU hotplug under load. scx_tailctl implements no ops.cpu_online /
# cpu_offline, so sched_ext exits it with SCX_ECODE_ACT_RESTART at a hotplug,
# and the daemon loads the scheduler again in the same process (a new socket,
# new maps). A registered tailctl-server under an open-loop load (90 s of it,
# so that both hotplugs fall inside it: checked) must keep answering every
# request through CPU 3 going offline and coming back: exactly two restarts,
# after each the service re-registered (handing back its region) and bound,
# the scheduler still loaded and enabled at the end, and exit 0 when stopped.
test_hotplug() {
  local c=/sys/devices/system/cpu/cpu3/online
  [ -w $c ] || { fail hotplug "no CPU 3 to take offline ($(nproc) CPUs)"; return; }
  start_sched || { fail hotplug "scheduler did not load"; return; }
  local spid lpid
  serve_under_load hotplug 7981 2700 11 || return
  # rebound N: the log has N restarts and, after the Nth, this server's
  # re-registration and then its BIND (a retried registration logs its line
  # again, so lines are matched after the Nth restart only).
  rebound() {
    awk -v n="$1" -v pid="$spid" '
      /asked for a restart/ { r++; reg = 0; next }
      r == n && /\(re-registration\)/ && index($0, "pid " pid " ") { reg = 1; next }
      r == n && reg && / bound [0-9]+ workers/ { ok = 1 }
      END { exit !ok }' "$out/sched.log"
  }
  # hotplug_and_rebind N VALUE: write VALUE to CPU 3's online file, then wait
  # (5 min at most, as start_sched) for the Nth restart to have the server
  # bound again with the scheduler enabled. Prints why not, if not.
  hotplug_and_rebind() {
    local deadline=$((SECONDS + 300))
    kill -0 "$lpid" 2>/dev/null || { echo "the load ended before CPU 3 was set to $2"; return 1; }
    echo "$2" >$c || { echo "could not set CPU 3 online=$2"; return 1; }
    while [ $SECONDS -lt $deadline ]; do
      [ "$(state)" = enabled ] && rebound "$1" && return 0
      kill -0 "$sched_pid" 2>/dev/null || { echo "the daemon exited after CPU 3 online=$2: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return 1; }
      sleep 0.2
    done
    echo "no restart, re-registration and BIND within 300 s of CPU 3 online=$2 (state $(state), $(nproc) CPUs)"
    return 1
  }
  local why="" t0 t1="" t2=""
  sleep 5
  t0=$SECONDS
  why=$(hotplug_and_rebind 1 0) && t1=$((SECONDS - t0))
  if [ -z "$why" ]; then
    sleep 5
    t0=$SECONDS
    why=$(hotplug_and_rebind 2 1) && t2=$((SECONDS - t0))
  fi
  # CPU 3 back whatever happened: later tests expect every CPU.
  echo 1 >$c 2>/dev/null
  [ "$(cat $c)" = 1 ] || why="${why:+$why; }CPU 3 did not come back online"
  wait $lpid; local lrc=$?
  local restarts; restarts=$(grep -c "asked for a restart" "$out/sched.log")
  [ -n "$why" ] || [ "$restarts" = 2 ] || why="$restarts restarts, expected 2"
  local alive=yes; { kill -0 "$sched_pid" 2>/dev/null && [ "$(state)" = enabled ]; } || alive=no
  # Seconds from each reload's load (its verifier line, logged after the load
  # and before the socket is served; else the restart line) to the service's
  # re-registration, by the log's 1 s stamps (across midnight too). Not from
  # the "attached" line: the socket is served before that is logged.
  local lag; lag=$(awk '
    /asked for a restart|verifier: heaviest/ { a = $1 }
    /\(re-registration\)/ {
      d = "?"
      if (a != "") { split(a, x, ":"); split($1, y, ":"); d = (y[1]*3600 + y[2]*60 + y[3]) - (x[1]*3600 + x[2]*60 + x[3]); if (d < 0) d += 86400 }
      printf "%s%s", sep, d; sep = "/"
    }' "$out/sched.log")
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  [ $alive = yes ] || { local w; w=$(sched_why); stop_sched; fail hotplug "${why:+$why; }scheduler not loaded at the end (state $(state)): $w"; return; }
  stop_sched; local src=$?
  [ -z "$why" ] || { fail hotplug "$why"; return; }
  [ $src = 0 ] || { fail hotplug "daemon exit $src: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; }
  [ $lrc = 0 ] || { fail hotplug "loadgen failed ($lrc): $(tail -c 300 "$out/loadgen.err")"; return; }
  local verdict; verdict=$(every_request_answered)
  case "$verdict" in
    ok*) pass hotplug "CPU 3 offline and back under load: ${verdict#ok }; 2 restarts, the service bound again ${t1} s / ${t2} s after each hotplug (re-registered ${lag:-?} s after each reload's load), scheduler loaded to the end, exit 0" "\"loadgen\": $(cat "$out/loadgen.json")";;
    *) fail hotplug "${verdict#bad }";;
  esac
}

test_waitbound() {
  # One CPU, 1 s slices, a 100 ms bound: the holder runs a whole slice and
  # nothing else dispatches (a task waking meanwhile queues behind it), so
  # only the wait-bound timer can release the waiter before the slice ends.
  cpus_offline 0
  [ "$(nproc)" = 1 ] || { cpus_offline 1; fail waitbound "could not take CPUs offline ($(nproc) online)"; return; }
  start_sched --slice-us 1000000 --max-throttle-wait-ms 100 || { cpus_offline 1; fail waitbound "scheduler did not load"; return; }
  local r; r=$(timeout 120 "$ktest" -w 2 hold --secs 3 --threshold-ms 1500 2>"$out/ktest.err"); local rc=$?
  local alive=yes; sched_alive || alive=no
  stop_sched; local src=$?
  cpus_offline 1
  [ $alive = yes ] || { fail waitbound "scheduler ejected: $(sched_why)"; return; }
  [ $src = 0 ] || { fail waitbound "scheduler exit non-zero: $(sched_why)"; return; }
  [ $rc = 0 ] || { fail waitbound "ktest hold failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local verdict
  verdict=$("$PY" - "$r" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
if not r["throttled"]: print("bad", f"no thread waited: {r}")
# Without the timer nothing releases the waiter before the holder's 1 s slice ends.
elif r["max_throttle_wait_ms"] > 500: print("bad", f"a waiter waited {r['max_throttle_wait_ms']:.0f} ms against a 100 ms bound: {r}")
else: print("ok", f"longest wait {r['max_throttle_wait_ms']:.0f} ms (bound 100 ms, 1 CPU, 1 s slices), {r['bound_kicks']} timer kicks, {r['overdue_runs']} overdue runs")
PY
)
  case "$verdict" in ok*) pass waitbound "${verdict#ok }" "\"hold\": $r";; *) fail waitbound "${verdict#bad }";; esac
}

# renice_waiters PID SECS [CPU] [MODE]: from CPU (default: any), for SECS
# seconds, every 20 ms, toggle the nice value (0/1) of PID's worker threads
# (tailctl-w*: the wait bound is theirs) that are runnable but made no
# progress since the last look (state R, no CPU time: waiting for a CPU), or
# with MODE "runnable" of every runnable worker thread (one that waits only a
# few ms between two looks is caught too). Each re-nice dequeues and
# re-enqueues a queued thread. Prints JSON: re-nices of waiting threads, of
# all, and the longest wait seen (ms).
renice_waiters() {
  taskset -c "${3:-0-$(($(nproc) - 1))}" "$PY" - "$1" "$2" "${4:-waiting}" <<'PY'
import json, os, sys, time
pid, secs, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
def snap():
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for t in tids:
        try:
            if not open(f"/proc/{pid}/task/{t}/comm").read().startswith("tailctl-w"):
                continue
            run = int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
            state = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
            out[int(t)] = (run, state)
        except (OSError, ValueError, IndexError):
            pass
    return out
prev, nice, renices, renices_all, end = snap(), 0, 0, 0, time.monotonic() + secs
since, longest = {}, 0.0
while prev is not None and time.monotonic() < end:
    time.sleep(0.02)
    cur, now = snap(), time.monotonic()
    if cur is None:
        break
    nice ^= 1
    for t, (run, state) in cur.items():
        r0, _ = prev.get(t, (run, state))
        waiting = state == "R" and run == r0
        if waiting:
            since.setdefault(t, now)
            longest = max(longest, now - since[t])
        else:
            since.pop(t, None)
        if waiting or (mode == "runnable" and state == "R"):
            try:
                os.setpriority(os.PRIO_PROCESS, t, nice)
                renices += waiting
                renices_all += 1
            except OSError:
                pass
    prev = cur
print(json.dumps({"renices": renices, "renices_all": renices_all, "longest_wait_ms": round(longest * 1e3, 1)}))
PY
}

# waitrenice: a throttled waiter re-niced every 20 ms (each re-nice dequeues
# and re-enqueues it), the attack of the fuzz test's churning service, which
# once (session 19, 7.3) ejected the scheduler: a worker went 32 s without
# running. As `waitbound`, but with every CPU online: the service is pinned
# to CPU 0 beside a holder with 1 s slices, and from CPU 1, once the kernel
# serialized its request (before that, its two workers share CPU 0 in 1 s
# slices: waits of a second that are no bound's business), a re-nicer
# toggles the nice value of each worker runnable without progress. Two
# things used to defeat the bound: a re-enqueue started the wait over, and
# one let through at the bound and re-niced before it ran was queued to wait
# again (each time at the newest vtime); and a run let through at the bound
# took a whole 1 s slice (extended, too), which its holder then waited out.
# Runs before `waitbound` in the default list: after waitbound took CPUs 1-3
# offline and back, the re-nicer (on CPU 1) saw no waiting worker at all in
# every run, while the kernel counted the waits and overdue runs as usual. A
# trace of /proc after that hotplug (6.18, TCG) read garbage: a worker with
# 7.8 s of CPU time 0.5 s after its process started, then the process's task
# directory gone while it ran on for 20 s (its 10 s hold). Not understood.
test_waitrenice() {
  start_sched --slice-us 1000000 --max-throttle-wait-ms 100 || { fail waitrenice "scheduler did not load"; return; }
  # 14 s: the re-nicer (python, slow to start under TCG) begins after the
  # serialization and must find it still running; on a loaded host each
  # `ktest stats` below takes a second or more (a 8 s hold had ended before
  # the re-nicer began: 0 re-nices).
  taskset -c 0 "$ktest" -w 2 hold --secs 14 --threshold-ms 1500 >"$out/renice-hold.json" 2>"$out/ktest.err" &
  local kp=$! n t0=$SECONDS
  while [ $((SECONDS - t0)) -lt 8 ]; do
    [ "$(jget "$("$ktest" stats 2>/dev/null)" serializations 2>/dev/null)" -gt 0 ] 2>/dev/null && break
    sleep 0.2
  done
  renice_waiters "$kp" 3 1 >"$out/renice.json" 2>"$out/renice.err" &
  local rp=$!
  wait $kp; local rc=$?
  wait $rp
  local alive=yes; sched_alive || alive=no
  stop_sched; local src=$?
  [ $alive = yes ] || { fail waitrenice "scheduler ejected: $(sched_why)"; return; }
  [ $src = 0 ] || { fail waitrenice "scheduler exit non-zero: $(sched_why)"; return; }
  [ $rc = 0 ] || { fail waitrenice "ktest hold failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local verdict
  verdict=$("$PY" - "$(cat "$out/renice-hold.json")" "$(cat "$out/renice.json" 2>/dev/null)" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
q = json.loads(sys.argv[2] or "{}")
n, longest = q.get("renices", 0), q.get("longest_wait_ms", 0)
why = []
if not r["throttled"]: why.append("no thread waited")
if n < 20: why.append(f"only {n} renices of a waiting thread: the attack did not happen")
# Each renice re-enqueues the waiter; only a wait that survives it reaches the
# bound. Seen from user space (20 ms looks), without the timer's release a
# waiter runs only when the holder's 1 s slice ends.
# Asserted: no worker waits out its holder's whole 1 s slice (what a waiter
# let through at the bound did while it queued in the fair queue: 937-1935 ms
# in four runs of session 19's build, 77-105 ms in three of the fix's on
# 6.18; a tenth of that margin is TCG's).
if longest > 1000: why.append(f"a re-niced waiter went {longest:.0f} ms without running against a 100 ms bound (its holder's slice: 1 s)")
# The bound itself, by the kernel's clock (as in waitbound): a re-enqueue must not restart a wait.
if r["max_throttle_wait_ms"] > 500: why.append(f"the kernel saw a wait of {r['max_throttle_wait_ms']:.0f} ms in the throttle queue")
msg = f"{n} renices of waiting threads; longest wait seen {longest:.0f} ms (kernel, in the throttle queue: {r['max_throttle_wait_ms']:.0f} ms); {r['bound_kicks']} timer kicks, {r['overdue_runs']} overdue runs, {r['throttled']} waits (bound 100 ms, holder slices 1 s)"
print(("bad " + "; ".join(why) + ": " + msg) if why else ("ok " + msg))
PY
)
  case "$verdict" in ok*) pass waitrenice "${verdict#ok }" "\"hold\": $(cat "$out/renice-hold.json")";; *) fail waitrenice "${verdict#bad }";; esac
}

# waitunpinned: the wait bound for a waiter that may run anywhere, with every
# CPU busy. One hog per CPU and 1 s slices, so a CPU dispatches about once a
# second; sleepers that wake every few ms and queue with sleeper credit,
# ahead of the frontier; the service unpinned (waitrenice pins it). A waiter
# let through at its 100 ms bound (the bound timer kicks its CPU, whose
# ops.dispatch releases it) used to go to the fair queue at the frontier:
# every task with a lower vtime went first, one per 1 s dispatch, and it ran
# 1.1-2.0 s after it began to wait (session 22). It now goes to the head of
# the releasing CPU or of its own (overdue_local_cpu), unless it is ahead of
# the fair frontier in vtime: the token rotates, so the waiter is often the
# holder that just ran a whole slice, and that one queues fairly, as a hog
# that just ran its slice does.
# waitextend: the same with one hog fewer than CPUs and no sleepers, so the
# fair queues are empty when the releasing CPU dispatches. Its ops.dispatch
# used to go on after the release and extend the slice of the task it was
# leaving (1 s) while the waiter sat in its local queue, where no other CPU
# takes it: 1.1 s (found in review, session 23).
# waitjob: the same as waitunpinned for the waiters of a job's allotment (a
# cgroup job of 2 x CPUs CPU-bound threads, the one job under --allot equi,
# so allotted every CPU; a hog per CPU, no sleepers): job_release_waiters
# sent those let through at the bound to the fair queue at the frontier too.
# Asserted, all three: the kernel's max_overdue_wait_ns (throttling to run of the
# waiters not ahead of the frontier, sent to a CPU's head) under 400 ms and
# above 0, and that some went to a CPU's head (overdue_heads); the waits of
# those ahead (max_overdue_ahead_wait_ns) and of those that lost their head
# with no other free (max_overdue_lost_wait_ns: both queued fairly) at most
# 1 s over the longest gap a hog saw between two of its runs (the fair
# queue's own wait under 1 s slices; taken as at least one slice), reported
# beside them.
wait_unpinned_case() {
  local name=$1 hogs_n=$2 sleepers=$3 mode=${4:-request} cg=/sys/fs/cgroup/tailctl-waitjob
  if [ "$mode" = job ]; then
    mkdir -p "$cg" || { fail "$name" "cannot create $cg"; return; }
    start_sched --slice-us 1000000 --max-throttle-wait-ms 100 --allot equi --job "$cg" \
      || { fail "$name" "scheduler did not load"; rmdir "$cg"; return; }
  else
    start_sched --slice-us 1000000 --max-throttle-wait-ms 100 || { fail "$name" "scheduler did not load"; return; }
  fi
  local bg=() hogs=() i stop="$out/$name-hogs.stop"
  rm -f "$stop" "$out/$name"-hog-*.txt
  # A hog reports the longest time it went without running (its clock's
  # largest step between two loop turns), once the stop file appears.
  for ((i = 0; i < hogs_n; i++)); do
    "$PY" - "$stop" >"$out/$name-hog-$i.txt" <<'PY' &
import os, sys, time
stop, gap, n = sys.argv[1], 0.0, 0
last = time.monotonic()
while True:
    t = time.monotonic()
    if t - last > gap:
        gap = t - last
    last = t
    n += 1
    if n % 20000 == 0 and os.path.exists(stop):
        break
print(round(gap * 1000))
PY
    hogs+=($!)
  done
  if [ "$sleepers" -gt 0 ]; then
    "$PY" - "$sleepers" <<'PY' &
import os, sys, threading, time
def sleeper():
    while True:
        time.sleep(0.004)
        t = time.perf_counter() + 0.0005
        while time.perf_counter() < t:
            pass
for _ in range(int(sys.argv[1])):
    threading.Thread(target=sleeper, daemon=True).start()
time.sleep(120)
PY
    bg+=($!)
  fi
  local rc
  if [ "$mode" = job ]; then
    # The job: twice as many CPU-bound threads as its allotment (all CPUs,
    # the one job under equi), in the cgroup before they start. What the
    # kernel counted is read before the scheduler stops, in hold's terms.
    (echo $BASHPID >"$cg/cgroup.procs" && exec "$ktest" hog --threads $(($(nproc) * 2)) --secs 14) >/dev/null 2>"$out/ktest.err"
    rc=$?
    "$wl/tailctl" maps dump stats --json 2>>"$out/ktest.err" | "$PY" -c '
import json, sys
t = {}
for e in json.load(sys.stdin):
    for c in e["values"]:
        for k, v in c["value"].items():
            if isinstance(v, int):
                t[k] = max(t.get(k, 0), v) if k.startswith("max_") or k.endswith("max_wait_ns") else t.get(k, 0) + v
ms = lambda k: round(t.get(k, 0) / 1e6, 1)
print(json.dumps({"throttled": t.get("allot_waits", 0), "max_overdue_wait_ms": ms("max_overdue_wait_ns"),
                  "max_overdue_ahead_wait_ms": ms("max_overdue_ahead_wait_ns"), "max_overdue_lost_wait_ms": ms("max_overdue_lost_wait_ns"),
                  "max_throttle_wait_ms": ms("allot_max_wait_ns"),
                  "overdue_runs": t.get("allot_overdue", 0), "bound_kicks": t.get("bound_kicks", 0),
                  **{k: t.get(k, 0) for k in ("overdue_heads", "overdue_fair", "overdue_ahead", "overdue_deferred", "overdue_head_lost", "reenqueues", "allot_borrows")}}))' >"$out/$name-hold.json" || rc=1
  else
    "$ktest" -w 2 hold --secs 14 --threshold-ms 1500 >"$out/$name-hold.json" 2>"$out/ktest.err"
    rc=$?
  fi
  # The hogs stop within a few ms of the stop file; past 20 s they are killed (and report nothing).
  touch "$stop"
  for _ in $(seq 1 100); do
    local left=0 h
    for h in "${hogs[@]}"; do kill -0 "$h" 2>/dev/null && left=1; done
    [ $left = 0 ] && break
    sleep 0.2
  done
  kill -9 "${hogs[@]}" "${bg[@]}" 2>/dev/null; wait "${hogs[@]}" "${bg[@]}" 2>/dev/null
  local alive=yes; sched_alive || alive=no
  stop_sched; local src=$?
  [ "$mode" = job ] && rmdir "$cg" 2>/dev/null
  [ $alive = yes ] || { fail "$name" "scheduler ejected: $(sched_why)"; return; }
  [ $src = 0 ] || { fail "$name" "scheduler exit non-zero: $(sched_why)"; return; }
  [ $rc = 0 ] || { fail "$name" "ktest $([ "$mode" = job ] && echo hog || echo hold) failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local verdict
  verdict=$("$PY" - "$(cat "$out/$name-hold.json")" "$(cat "$out/$name"-hog-*.txt 2>/dev/null | tr '\n' ' ')" "$hogs_n" "$sleepers" "$mode" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
gaps = [int(g) for g in sys.argv[2].split()]
hogs_n, sleepers, mode = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
why = []
if not r["throttled"]: why.append("no thread waited")
od = r["max_overdue_wait_ms"]
if od <= 0 or not r.get("overdue_heads", 0):
    why.append("no waiter behind the fair frontier went to a CPU's head and ran: nothing was tested")
if len(gaps) < hogs_n: why.append(f"{hogs_n - len(gaps)} hog(s) did not report their longest gap")
hog = max(gaps) if gaps else 0
# A waiter let through at the bound runs at its release (the bound, plus up
# to a quarter of it for the timer, plus TCG's slop), not after the tasks
# queued meanwhile, one per 1 s dispatch.
if od > 400: why.append(f"a thread let through at the 100 ms bound ran {od:.0f} ms after it began to wait")
ahead = r.get("max_overdue_ahead_wait_ms", 0)
# One ahead of the frontier waits as a hog that just ran its slice does (at
# least a slice's worth: with fewer hogs than CPUs a hog may hardly wait).
# A job's waiter leaves a working-first job queue at the frontier itself (its
# vtime is kept aside until it runs), not at its own vtime as a hog does, and
# a wait at the frontier behind the tasks below it was 0.4-2.0 s in session
# 24's runs (workloads/results/waitjob-s24): a second more is allowed there.
slack = 2000 if mode == "job" else 1000
if gaps and ahead > max(hog, 1000) + slack:
    why.append(f"a thread ahead of the fair frontier ran {ahead:.0f} ms after it began to wait, a hog's longest gap was {hog} ms")
# One that lost its CPU's head (a higher class took it: the harness's RT heartbeat, on 7.1+
# where ops.cpu_release re-enqueues) with no other head free queues fairly too: it waits for a
# slice to end somewhere, as one ahead of the frontier does, and is held to the same bound.
# (Session 31's CI: 451 ms with 2 heads lost, against 138-171 ms in other runs; kept apart since.)
lost = r.get("max_overdue_lost_wait_ms", 0)
if gaps and lost > max(hog, 1000) + slack:
    why.append(f"a thread that lost its CPU's head ran {lost:.0f} ms after it began to wait, a hog's longest gap was {hog} ms")
if r["max_throttle_wait_ms"] > 500: why.append(f"the kernel saw a wait of {r['max_throttle_wait_ms']:.0f} ms in the throttle queue")
msg = (f"longest wait to an overdue run {od:.0f} ms (kernel: throttling to running; in the throttle queue "
       f"{r['max_throttle_wait_ms']:.0f} ms); {r['overdue_runs']} overdue runs; at release {r.get('overdue_heads', 0)} "
       f"to a CPU's head, {r.get('overdue_fair', 0)} to a fair queue, {r.get('overdue_ahead', 0)} ahead of the fair frontier, "
       f"queued fairly: longest wait {ahead:.0f} ms, against a hog's longest gap {hog} ms; "
       f"{r.get('overdue_deferred', 0)} releases deferred for want of a free head, "
       f"{r.get('overdue_head_lost', 0)} heads lost before the run ({r.get('reenqueues', 'n/a')} re-enqueues; "
       f"the longest wait of those that then queued fairly {lost:.0f} ms); "
       f"{r['bound_kicks']} timer kicks, {r['throttled']} waits "
       f"(bound 100 ms, 1 s slices, {hogs_n} hogs, {sleepers} sleepers"
       + (f"; the waiters: a cgroup job's, {r.get('allot_borrows', 0)} borrowed runs)" if mode == "job" else ")"))
print(("bad " + "; ".join(why) + ": " + msg) if why else ("ok " + msg))
PY
)
  case "$verdict" in ok*) pass "$name" "${verdict#ok }" "\"hold\": $(cat "$out/$name-hold.json")";; *) fail "$name" "${verdict#bad }";; esac
}
test_waitunpinned() { wait_unpinned_case waitunpinned "$(nproc)" 8; }
test_waitextend() { wait_unpinned_case waitextend $(($(nproc) - 1)) 0; }
test_waitjob() { wait_unpinned_case waitjob "$(nproc)" 0 job; }

test_slotreuse() {
  start_sched || { fail slotreuse "scheduler did not load"; return; }
  "$ktest" -w 4 reuse >"$out/victim.json" 2>"$out/victim.err" &
  local vp=$!
  for _ in $(seq 1 450); do [ -s "$out/victim.json" ] && break; kill -0 $vp 2>/dev/null || break; sleep 0.2; done
  [ -s "$out/victim.json" ] || { fail slotreuse "the victim was never capped with waiters: $(tail -c 300 "$out/victim.err") $(sched_why)"; kill -9 $vp; stop_sched; return; }
  kill -9 $vp; wait $vp 2>/dev/null
  sleep 1  # the daemon sees the connection close and frees the slot
  local s; s=$(timeout 120 "$ktest" -w 4 reuse --successor 2>"$out/ktest.err"); local rc=$?
  sched_alive || { fail slotreuse "scheduler ejected: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail slotreuse "scheduler exit non-zero: $(sched_why)"; return; }
  [ $rc = 0 ] || { fail slotreuse "successor failed: $(tail -c 300 "$out/ktest.err")"; return; }
  local v; v=$(cat "$out/victim.json")
  [ "$(jget "$v" service)" = "$(jget "$s" service)" ] && [ "$(jget "$v" tag)" = "$(jget "$s" tag)" ] \
    || { fail slotreuse "the successor did not reuse the victim's slot and tag, nothing tested: victim $v, successor $s"; return; }
  [ "$(jget "$s" alloc)" = 0 ] && [ "$(jget "$s" throttled)" = 0 ] && [ "$(jget "$s" serialized)" = False ] && [ "$(jget "$s" workers_seen)" -gt 1 ] \
    || { fail slotreuse "the successor's first request inherited the victim's accounting: $s (victim $v)"; return; }
  pass slotreuse "slot $(jget "$s" service) reused, same tag: no cap, no throttling, $(jget "$s" workers_seen) workers in parallel" "\"victim\": $v, \"successor\": $s"
}

# An RT spinner pinned to the CPU a CPU-bound task runs on: the task it
# preempts is left at the head of that CPU's local queue, where no other CPU
# takes it (3 CPUs stay idle). ops.cpu_release gives it back through
# ops.enqueue, so it runs elsewhere. Prints the victim's share of a CPU during
# the spin and the spinner's (which must hold its CPU, else nothing was
# tested). The victim: `ktest hog` (unregistered) or a registered worker
# (`ktest greedy --benign`).
rt_victim() {
  "$PY" - "$1" "${2:-2.4}" <<'PY'
import json, os, sys, time
pid, window = int(sys.argv[1]), float(sys.argv[2])
def exec_ns(path):
    with open(f"{path}/schedstat") as f:
        return int(f.read().split()[0])
def cpu_of(path):
    with open(f"{path}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])
# The victim: a runtime worker (tailctl-w*) if there is one, else the thread
# that ran most over 0.5 s.
def comm(t):
    with open(f"/proc/{pid}/task/{t}/comm") as f:
        return f.read().strip()
tids = os.listdir(f"/proc/{pid}/task")
workers = [t for t in tids if comm(t).startswith("tailctl-w")]
a = {t: exec_ns(f"/proc/{pid}/task/{t}") for t in tids}; time.sleep(0.5)
victim = f"/proc/{pid}/task/" + max(workers or tids, key=lambda t: exec_ns(f"/proc/{pid}/task/{t}") - a[t])
# The spinner becomes RT first, then moves to the victim's CPU, so it preempts
# the victim there at once. Whether it did is read from the victim's
# involuntary context switches (checking the victim's CPU afterwards would
# miss exactly the runs where the scheduler moved it away at once); an
# attempt that did not preempt it tested nothing and is repeated.
def preempted(path):
    with open(f"{path}/status") as f:
        return int(next(l for l in f if l.startswith("nonvoluntary_ctxt_switches")).split()[-1])
for attempt in range(1, 11):
    cpu, n0 = cpu_of(victim), preempted(victim)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(60))
        os.sched_setaffinity(0, {cpu})
        os.write(w, b"x"); os.close(w)
        end = time.monotonic() + window + 0.6
        while time.monotonic() < end:
            pass
        os._exit(0)
    os.close(w); os.read(r, 1); os.close(r)
    time.sleep(0.1)
    if preempted(victim) > n0:
        break
    os.kill(child, 9); os.waitpid(child, 0); time.sleep(0.1)
else:
    print(json.dumps({"error": "the spinner never preempted the victim"})); sys.exit(1)
time.sleep(0.2)
spin = f"/proc/{child}"
t0, v0, s0 = time.monotonic(), exec_ns(victim), exec_ns(spin)
seen = []
while time.monotonic() < t0 + window:
    seen.append(cpu_of(victim)); time.sleep(0.2)
t1, v1, s1 = time.monotonic(), exec_ns(victim), exec_ns(spin)
os.waitpid(child, 0)
span = (t1 - t0) * 1e9
print(json.dumps({"cpu": cpu, "attempts": attempt, "victim_share": round((v1 - v0) / span, 3),
                  "rt_share": round((s1 - s0) / span, 3), "victim_cpus": sorted(set(seen)),
                  "samples": len(seen), "samples_on_spinner_cpu": seen.count(cpu)}))
PY
}

# A task waiting in a CPU's local queue when an RT task takes that CPU: a
# sleeper whose last CPU is C (it ran there) is woken by a pipe write, so
# ops.select_cpu sends it to idle C's local queue, and an RT spinner pinned to
# C is woken by the next write, before C schedules; C runs the spinner first.
# Prints the sleeper's wake-up relative to the spin and the CPU it ran on. An
# attempt where the sleeper had run at all before the spinner started (its
# schedstat run time moved) tested nothing (a preempted running task is
# rt_victim's case) and is repeated.
rt_waiter() {
  "$PY" - "${1:-1.5}" <<'PY'
import json, os, sys, time
spin = float(sys.argv[1])
ncpu = os.cpu_count()
c = ncpu - 1
def exec_ns(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])
def cpu_now():
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])
os.sched_setaffinity(0, {0})
results = []
for attempt in range(1, 21):
    pv, pr, rep = os.pipe(), os.pipe(), os.pipe()
    ready = os.pipe()
    v = os.fork()
    if v == 0:
        os.sched_setaffinity(0, {c})
        t = time.monotonic()
        while time.monotonic() - t < 0.02:
            pass
        os.sched_setaffinity(0, set(range(ncpu)))  # may run anywhere; its last CPU stays C
        os.write(ready[1], b"v")
        os.read(pv[0], 1)
        woke, cpu = time.monotonic(), cpu_now()
        os.write(rep[1], json.dumps({"who": "v", "at": woke, "cpu": cpu}).encode() + b"\n")
        os._exit(0)
    r = os.fork()
    if r == 0:
        os.sched_setaffinity(0, {c})
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(60))
        os.write(ready[1], b"r")
        os.read(pr[0], 1)
        t0, v_ran = time.monotonic(), exec_ns(v)
        while time.monotonic() - t0 < spin:
            pass
        os.write(rep[1], json.dumps({"who": "r", "at": t0, "end": time.monotonic(), "v_ran": v_ran}).encode() + b"\n")
        os._exit(0)
    os.read(ready[0], 1); os.read(ready[0], 1)
    time.sleep(0.1)
    v_slept = exec_ns(v)
    os.write(pv[1], b"x"); os.write(pr[1], b"x")
    os.waitpid(v, 0); os.waitpid(r, 0)
    os.close(rep[1])
    got = {}
    with os.fdopen(rep[0]) as f:
        for line in f:
            d = json.loads(line); got[d["who"]] = d
    for fd in (*pv, *pr, *ready):
        os.close(fd)
    vv, rr = got["v"], got["r"]
    if rr["v_ran"] != v_slept:
        continue  # the sleeper had run before the spinner took C: nothing tested
    print(json.dumps({"attempts": attempt, "cpu": c, "woke_after_spin_start_ms": round((vv["at"] - rr["at"]) * 1e3, 1),
                      "spin_ms": round((rr["end"] - rr["at"]) * 1e3, 1), "waiter_cpu": vv["cpu"],
                      "waited_out_spin": vv["at"] >= rr["end"]}))
    sys.exit(0)
print(json.dumps({"error": "the sleeper always ran before the spinner, nothing tested"})); sys.exit(1)
PY
}

test_rtpreempt() {
  [ "$(nproc)" -ge 2 ] || { fail rtpreempt "needs 2 CPUs ($(nproc))"; return; }
  start_sched || { fail rtpreempt "scheduler did not load"; return; }
  local results=() kind p r bad=""
  # Reported only (below): a probe that found no valid attempt is reported too.
  local w; w=$(rt_waiter 1.5 2>>"$out/ktest.err")
  $PY -c 'import json,sys; json.loads(sys.argv[1])' "$w" 2>/dev/null || w='{"error": "the probe failed"}'
  results+=("\"waiter\": $w")
  for kind in unregistered registered; do
    [ -z "$bad" ] || break
    if [ $kind = unregistered ]; then
      "$ktest" hog --secs 8 --threads 1 >/dev/null 2>>"$out/ktest.err" &
    else
      "$ktest" -w 1 greedy --benign --requests 1 --items 1 --item-us 8000000 --secs 8 >/dev/null 2>>"$out/ktest.err" &
    fi
    p=$!; sleep 1.5
    r=$(rt_victim "$p" 2>>"$out/ktest.err") || r=""
    wait "$p" 2>/dev/null
    [ -n "$r" ] || { bad="$kind: the probe failed: $(tail -c 300 "$out/ktest.err")"; break; }
    results+=("\"$kind\": $r")
    $PY -c "import json,sys; sys.exit(0 if json.loads(sys.argv[1])['rt_share'] >= 0.5 else 1)" "$r" \
      || { bad="$kind: the RT spinner did not hold its CPU, nothing tested: $r"; break; }
  done
  local st; st=$("$ktest" stats 2>/dev/null)
  sched_alive || { fail rtpreempt "scheduler ejected: $(sched_why)"; stop_sched; return; }
  stop_sched || { fail rtpreempt "scheduler exit non-zero: $(sched_why)"; return; }
  [ -z "$bad" ] || { fail rtpreempt "$bad"; return; }
  local all; all=$(IFS=,; echo "{${results[*]}}")
  local n; n=$(jget "$st" reenqueues)
  # The preempted running task is asserted from 7.x on. On 6.18 the callback
  # does nothing (the kernel's synchronous re-enqueue would put the preempted
  # task straight back, see tailctl_cpu_release), so it waits out the spin:
  # reported only. The waiter is reported only, on every
  # kernel: ops.cpu_release() is called when a CPU leaves an ext task for a
  # higher class, not when it leaves the idle task, so a task sent to an idle
  # CPU's local queue just before an RT task woke there waits for the RT task
  # (7.3: until RT throttling, 950 ms into the spin; 6.18: the whole spin).
  local on7=1; case "$(uname -r)" in 6.*) on7=0;; esac
  if [ $on7 = 1 ]; then
    # Kept running (0.73-0.74 of a CPU when it stayed behind the spinner,
    # before ops.cpu_release re-enqueued it) and seen on the spinner's CPU in
    # at most a quarter of the samples. Not "never": the spinner does not
    # hold its CPU throughout (rt_share 0.66-0.68 on 7.3, where the kernel's
    # deadline server runs ext tasks beside RT ones), and in those gaps the
    # victim may legitimately run there again (session 31's CI: seen there
    # at least once, 0.994 of a CPU). (The re-enqueue count alone proves nothing:
    # the harness's RT heartbeat makes releases all through a run.)
    $PY -c "import json,sys; a = json.loads(sys.argv[1]); sys.exit(0 if all(a[k]['victim_share'] >= 0.9 and a[k]['samples_on_spinner_cpu'] * 4 <= a[k]['samples'] for k in ('unregistered', 'registered')) else 1)" "$all" \
      || { fail rtpreempt "a preempted task stayed behind the RT spinner: $all (reenqueues $n)"; return; }
  fi
  local wmsg; wmsg=$($PY -c "import json,sys; w = json.loads(sys.argv[1])['waiter']; print(w['error'] if 'error' in w else 'ran on CPU %s %s ms into a %s ms spin' % (w['waiter_cpu'], w['woke_after_spin_start_ms'], w['spin_ms']))" "$all")
  pass rtpreempt "preempted running task's CPU share during the spin: unregistered $(jget "$all" unregistered.victim_share), registered $(jget "$all" registered.victim_share)$([ $on7 = 1 ] || echo ' (6.x: not asserted)'); waiter in the RT CPU's queue (not asserted): $wmsg; $n re-enqueued" "${all:1:${#all}-2}, \"reenqueues\": $n"
}
