#!/usr/bin/env bash
# The scheduler's integration tests. Runs inside a sched_ext kernel (the VM
# that `tailctl vm run` boots, or a sched_ext host) as root:
#   tools/vm/guest-tests.sh SCX_TAILCTL_BINARY RESULTS_DIR [TEST...]
# Tests: load (attach/verify/detach, pins, errors), stress (stress-ng beside the
# scheduler), service (redis-server + redis-benchmark vs the default scheduler).
# Prints PASS/FAIL per test, writes RESULTS_DIR/<kernel>.json, and ends with
# "guest: N passed, M failed"; exits non-zero if any test failed.
set -uo pipefail

bin=$(readlink -f "$1"); out=$2; shift 2
ktest=$(dirname "$bin")/tailctl-ktest
wl=$(dirname "$bin")
all_tests=(load verifier stress service serialize serializemark account isolation fault nosyscall daemonidle experiment maps top
           pinned rtpreempt yieldkeep greedy leaks races waitrenice waitunpinned waitextend waitjob waitbound hotplug slotreuse tidreuse bindleak regversion regdos regabuse daemonstop pidns fuzz fuzzallot
           allotequi allotexit allotstarve allotrenice allotmug allotdeq allotliar allotcgdyn allotcgnest allotcgdeq allotcgasteal allotdrep prioprompt priostarve priouser priocgroup
           llcqueues)
tests=("$@"); [ ${#tests[@]} -gt 0 ] || tests=("${all_tests[@]}")
# --list: print the default tests (tools/test.sh resumes from them).
if [ "${tests[0]}" = --list ]; then echo "${all_tests[*]}"; exit 0; fi
mkdir -p "$out"
kver=$(uname -r)
PY=$(command -v /usr/bin/python3 || command -v python3)
state() { cat /sys/kernel/sched_ext/state 2>/dev/null || echo missing; }
ops() { cat /sys/kernel/sched_ext/root/ops 2>/dev/null || echo none; }
passed=0; failed=0; json_items=()
# Each result is also appended to $out/progress, so a harness whose guest died
# (see tools/test.sh) can resume with the tests not yet run.
pass() { echo "PASS $1${2:+: $2}"; echo "PASS $1" >>"$out/progress"; passed=$((passed + 1)); json_items+=("\"$1\": {\"ok\": true${3:+, $3}}"); }
fail() {
  echo "FAIL $1: $2"; echo "FAIL $1" >>"$out/progress"; failed=$((failed + 1))
  json_items+=("\"$1\": {\"ok\": false, \"why\": \"$2\"}")
  kernel_log_since_test "$1"
  sched_log_of_failure "$1"
}
# The scheduler's log of a failed test, kept beside the results (the next test
# overwrites sched.log); when the kernel ejected it, the exit dump's tailctl
# lines (tailctl_dump, tailctl_dump_task: each task's token and wait state)
# are printed too, so CI's output says what the stalled task waited behind.
sched_log_of_failure() {
  [ -f "$out/sched.log" ] || return 0
  local keep="$out/sched-$1.log"
  [ -e "$keep" ] && keep="$out/sched-$1-$(date +%s).log"
  cp "$out/sched.log" "$keep"
  grep -q "DEBUG DUMP" "$out/sched.log" || return 0
  local pid
  pid=$(grep -oE "\[[0-9]+\] failed to run" "$out/sched.log" | grep -oE "[0-9]+" | head -n 1)
  { grep -E "failed to run for|tailctl: (throttle_waiters|service)" "$out/sched.log"
    [ -n "$pid" ] && grep -A 12 "\[$pid\]" "$out/sched.log" | grep -v "failed to run"
  } | head -n 40 | sed 's/^/  dump: /'
}
# The kernel's log since the current test began: saved beside the results and
# its sched_ext / RCU / watchdog lines printed, so a failure in CI (where only
# the output is kept) says what the kernel saw.
dmesg_mark=0 test_began=0
kernel_log_since_test() {
  echo "  VM (RT heartbeat, outside sched_ext): $(heartbeat_since "$test_began")"
  dmesg 2>/dev/null | tail -n +$((dmesg_mark + 1)) >"$out/dmesg-$1.txt" || return 0
  grep -iE 'sched_ext|rcu|stall|starved|lockup|hung|watchdog|BUG|WARNING' "$out/dmesg-$1.txt" | head -n 25 | sed 's/^/  kernel: /'
}
log() { echo "[guest $kver] $*"; }

sched_pid=""
# Start the scheduler and wait until the kernel reports it enabled.
# SCHED_ARGS (split on spaces) go after each test's own flags, e.g.
# SCHED_ARGS="--saws-u kernel" for the allotment tests.
start_sched() {
  # A dump large enough to list every runnable task of a crowded test (the
  # kernel's default 32 KiB may end before the one that stalled).
  # shellcheck disable=SC2086
  "$bin" --exit-dump-len 262144 "$@" ${SCHED_ARGS:-} >"$out/sched.log" 2>&1 &
  sched_pid=$!
  # Up to 5 min: verifying the program took 1-2.5 min under single-threaded
  # TCG on a busy host before the release loops became global subprograms
  # (about 10 s since).
  for _ in $(seq 1 1500); do
    [ "$(state)" = enabled ] && return 0
    kill -0 "$sched_pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
# Ask it to stop (SIGINT) and return its exit status; non-zero too if the
# kernel counted a leaked token (check_token_leaks, guest-tests-harden.sh).
stop_sched() {
  local leaks=""
  declare -F check_token_leaks >/dev/null && leaks=$(check_token_leaks)
  kill -INT "$sched_pid" 2>/dev/null
  wait "$sched_pid"; local rc=$?
  sched_pid=""
  [ -z "$leaks" ] || { echo "$leaks"; return 97; }
  return $rc
}
# An RT (SCHED_FIFO) heartbeat, which sched_ext does not schedule: every 100 ms
# it notes how late it woke. Late by seconds means the whole VM stalled (qemu
# descheduled or stopped on the host) or every CPU was held with interrupts
# off; a task starved by the scheduler under test leaves it on time. A
# failing test reports it (kernel_log_since_test).
heartbeat_pid=""
start_heartbeat() {
  "$PY" - "$out/heartbeat" <<'PY' &
import os, sys, time
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
except OSError:
    sys.exit(0)
while True:
    t = time.monotonic()
    time.sleep(0.1)
    late = time.monotonic() - t - 0.1
    if late > 0.25:
        with open(sys.argv[1], "a") as f:
            f.write(f"{time.clock_gettime(time.CLOCK_BOOTTIME):.1f} {late:.2f}\n")
PY
  heartbeat_pid=$!
}
# "N stalls, longest X s" of the heartbeat since boot-time second $1.
heartbeat_since() {
  [ -f "$out/heartbeat" ] || { echo "0 stalls"; return; }
  awk -v t="$1" '$1 >= t {n++; if ($2 > m) m = $2} END {printf "%d stalls > 0.25 s, longest %.2f s\n", n, m}' "$out/heartbeat"
}
cleanup() {
  [ -n "$heartbeat_pid" ] && kill "$heartbeat_pid" 2>/dev/null
  [ -n "$sched_pid" ] && kill -INT "$sched_pid" 2>/dev/null; wait 2>/dev/null
}
trap cleanup EXIT

# The verifier's walk of each program must stay well under its million
# instructions in every configuration: the walk depends on the load-time
# constants (an allotment controller, request shares, cgroup jobs and
# priority cgroups, LLC queues), and a change that fits the configuration
# its author tried can tip another over (E2BIG: CI's 6.18 two-LLC boot
# refused --allot for ops.dispatch at 1000001 while one LLC passed at
# 997192). Loads each heavy configuration, reads the heaviest program's
# `verified_insns` from the scheduler's log, and fails at half the limit.
test_verifier() {
  local cg=/sys/fs/cgroup/tailctl-verifier cfg args line n worst=0 report="" half=500000 rc
  local configs=(
    ""
    "--allot equi --request-shares --llc-groups 2"
    "--allot drep --request-shares --llc-groups 1"
    "--allot asteal --wake-preempt-us 500 --yield-penalty-us 500 --serialize-mark-only --llc-groups 2"
  )
  # Cgroup jobs and priority cgroups need cgroup v2 (the other tests' too).
  if mkdir -p "$cg"; then
    configs+=("--allot deq --request-shares --job-queue fifo --job $cg --priority-cgroup $cg=5 --llc-groups 2")
  else
    report="(no cgroup v2 at /sys/fs/cgroup: the cgroup configuration not tried)"
  fi
  for cfg in "${configs[@]}"; do
    # shellcheck disable=SC2206
    args=($cfg)
    if ! SCHED_ARGS="" start_sched "${args[@]}"; then
      fail verifier "[${cfg:-defaults}] did not load: $(grep -m 3 -E "processed [0-9]+ insns|Error|E2BIG" "$out/sched.log" | tr '\n"' ' ')"
      stop_sched >/dev/null 2>&1; rmdir "$cg" 2>/dev/null; return
    fi
    stop_sched; rc=$?
    [ $rc = 0 ] || { fail verifier "[${cfg:-defaults}] exit status $rc: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; rmdir "$cg" 2>/dev/null; return; }
    line=$(grep -oE "verifier: heaviest program [a-z_]+ [0-9]+" "$out/sched.log" | head -n 1)
    n=${line##* }
    [ -n "$n" ] || { fail verifier "[${cfg:-defaults}] no verifier line in the log"; rmdir "$cg" 2>/dev/null; return; }
    [ "$n" -gt "$worst" ] && worst=$n
    report+="${report:+; }[${cfg:-defaults}] ${line#verifier: heaviest program }"
  done
  rmdir "$cg" 2>/dev/null
  if [ "$worst" -ge "$half" ]; then
    fail verifier "heaviest walk $worst of 1000000 instructions (the margin is half): $report"
  else
    pass verifier "heaviest walk $worst of 1000000 instructions: $report"
  fi
}
test_load() {
  # The registration socket is there the moment sched_ext shows the scheduler
  # enabled (a service started on that signal must find it): watched closely.
  # No daemon runs now: a socket file left by an earlier kill -9 must not pass for the new one's.
  rm -f /run/tailctl/tailctl.sock
  # shellcheck disable=SC2086
  "$bin" --exit-dump-len 262144 ${SCHED_ARGS:-} >"$out/sched.log" 2>&1 &
  sched_pid=$!
  local st="" i=0 deadline=$((SECONDS + 300))
  while [ $SECONDS -lt $deadline ]; do
    i=$((i + 1))
    read -r st </sys/kernel/sched_ext/state 2>/dev/null
    [ "$st" = enabled ] && break
    kill -0 "$sched_pid" 2>/dev/null || break
  done
  [ "$st" = enabled ] || { fail load "scheduler did not reach enabled: $(tail -n 5 "$out/sched.log" | tr '\n"' ' ')"; stop_sched; return; }
  [ -S /run/tailctl/tailctl.sock ] || { fail load "enabled, but no registration socket yet (after $i polls)"; stop_sched; return; }
  local o; o=$(ops)
  case "$o" in tailctl*) ;; *) fail load "ops name is '$o', expected tailctl*"; stop_sched; return ;; esac
  [ -e /sys/fs/bpf/tailctl/stats ] || { fail load "map pin /sys/fs/bpf/tailctl/stats missing"; stop_sched; return; }
  # Debian's bpftool must see the field names (BTF) in the pinned map.
  if command -v bpftool >/dev/null; then
    bpftool map dump pinned /sys/fs/bpf/tailctl/stats >"$out/bpftool.txt" 2>&1
    grep -q '"direct_dispatches"' "$out/bpftool.txt" || { fail load "bpftool shows no named fields: $(head -c 200 "$out/bpftool.txt" | tr '\n"' ' ')"; stop_sched; return; }
  fi
  # The debug dump's tailctl lines (tailctl_dump, tailctl_dump_task), asked
  # for with SysRq-D beside a registered capped service: the kernel prints the
  # same dump it attaches to an ejection, without ejecting, to the
  # sched_ext_dump trace event only.
  local cp dump tr=/sys/kernel/tracing
  [ -d $tr/events ] || mount -t tracefs nodev $tr 2>/dev/null
  "$ktest" -w 2 churn --secs 5 --requests 4 --threshold-ms 1 >/dev/null 2>"$out/dump-churn.err" &
  cp=$!
  sleep 3
  echo >$tr/trace 2>/dev/null
  echo 1 >$tr/events/sched_ext/sched_ext_dump/enable 2>/dev/null
  echo D >/proc/sysrq-trigger 2>/dev/null
  sleep 0.5
  echo 0 >$tr/events/sched_ext/sched_ext_dump/enable 2>/dev/null
  cat $tr/trace >"$out/sysrq-dump.txt" 2>&1
  dump=$(cat "$out/sysrq-dump.txt")
  wait $cp
  grep -q "tailctl: throttle_waiters_mask" <<<"$dump" && grep -q "tailctl: svc=" <<<"$dump" || {
    fail load "SysRq-D dump has no tailctl lines: $(grep -c . <<<"$dump") kernel lines, $(grep -m 3 -i "sched_ext\|tailctl" <<<"$dump" | tr '\n"' ' ')"
    stop_sched; return
  }
  [ "$(state)" = enabled ] && kill -0 "$sched_pid" 2>/dev/null || { fail load "scheduler gone after SysRq-D"; return; }
  # A second instance must refuse clearly while one is loaded.
  local err; err=$("$bin" 2>&1); local rc2=$?
  if [ $rc2 = 0 ] || ! grep -q "another sched_ext scheduler is loaded" <<<"$err"; then
    fail load "second instance: rc=$rc2, '$err'"; stop_sched; return
  fi
  stop_sched; local rc=$?
  [ $rc = 0 ] || { fail load "exit status $rc after SIGINT: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; }
  [ "$(state)" = disabled ] || { fail load "state is $(state) after detach"; return; }
  [ ! -e /sys/fs/bpf/tailctl/stats ] || { fail load "pins left behind after exit"; return; }
  # Partial mode loads too, and a stale pin left by a killed instance is replaced.
  mkdir -p /sys/fs/bpf/tailctl
  if ! start_sched --partial; then fail load "--partial did not load: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; fi
  kill -9 "$sched_pid"; wait "$sched_pid" 2>/dev/null; sched_pid=""
  for _ in $(seq 1 100); do [ "$(state)" = disabled ] && break; sleep 0.1; done
  [ -e /sys/fs/bpf/tailctl/stats ] || { fail load "kill -9 should leave a stale pin to exercise"; return; }
  if ! start_sched; then fail load "restart over a stale pin failed: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; fi
  grep -q "removing stale pin" "$out/sched.log" || { fail load "stale pin not reported"; stop_sched; return; }
  stop_sched || { fail load "second run did not exit 0"; return; }
  # A start that fails after pinning (here: its socket cannot be bound, between the pins and the
  # attach) says why and leaves no pin, no socket and no scheduler behind.
  local ferr frc; ferr=$("$bin" --socket /proc/tailctl-none/tailctl.sock 2>&1); frc=$?
  [ $frc != 0 ] && grep -q "tailctl-none" <<<"$ferr" || { fail load "a start with an unbindable socket: rc=$frc, '$(tail -n 2 <<<"$ferr" | tr '\n"' ' ')'"; return; }
  [ ! -e /sys/fs/bpf/tailctl/stats ] || { fail load "a failed start left its pins behind"; return; }
  [ "$(state)" = disabled ] || { fail load "a failed start left the state $(state)"; return; }
  # Bad intervals are refused by the parser, not a panic.
  local ierr; ierr=$("$bin" --monitor nan 2>&1) && { fail load "--monitor nan accepted"; return; }
  grep -q "between 0.01 and 3600" <<<"$ierr" || { fail load "--monitor nan: '$(tail -n 2 <<<"$ierr" | tr '\n"' ' ')'"; return; }
  pass load "attach, ops name, pins+BTF, refusal, detach, --partial, stale pins, a failed start cleaned up, bad intervals refused"
}

test_stress() {
  local n; n=$(nproc)
  if ! start_sched --stats 5; then fail stress "scheduler did not load"; return; fi
  log "stress-ng for 31 s on $n CPUs beside the scheduler"
  timeout --foreground --preserve-status 60 stress-ng -t 31 --aggressive -M -c "$n" -f "$n" \
    --affinity 1 --affinity-delay 1 --affinity-pin --temp-path "$out" >"$out/stress.log" 2>&1
  local src=$?
  if ! kill -0 "$sched_pid" 2>/dev/null; then fail stress "scheduler died during stress: $(grep -i 'exit\|error' "$out/sched.log" | tail -n 3 | tr '\n"' ' ')"; return; fi
  [ "$(state)" = enabled ] || { fail stress "state $(state) after stress (ejected?)"; stop_sched; return; }
  stop_sched; local rc=$?
  [ $rc = 0 ] || { fail stress "scheduler exit status $rc: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; }
  [ $src = 0 ] || { fail stress "stress-ng failed ($src): $(tail -n 3 "$out/stress.log" | tr '\n"' ' ')"; return; }
  pass stress "31 s of cpu+fork+affinity churn, no ejection, exit 0"
}

# One redis-benchmark run: prints "rps p99_ms" for GET+SET combined (mean of the two).
bench_redis() {
  redis-benchmark -h 127.0.0.1 -p 6399 -q -n "$1" -c 16 -t set,get --csv 2>"$out/bench.err" \
    | awk -F'","|"' 'NR>1 {rps+=$3; p99+=$8; n++} END {if (n) printf "%.0f %.3f\n", rps/n, p99/n; else print "0 0"}'
}

test_service() {
  local n=${REDIS_REQUESTS:-20000}
  redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$out/redis.log" 2>&1 &
  local rpid=$!
  for _ in $(seq 1 100); do redis-cli -p 6399 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p 6399 ping >/dev/null 2>&1 || { fail service "redis-server did not start"; kill $rpid; return; }
  # Alternate default / tailctl twice so drift in the emulated machine hits both.
  local d1 t1 d2 t2
  d1=$(bench_redis "$n")
  start_sched || { fail service "scheduler did not load"; kill $rpid; return; }
  t1=$(bench_redis "$n")
  stop_sched || { fail service "scheduler exit non-zero"; kill $rpid; return; }
  d2=$(bench_redis "$n")
  start_sched || { fail service "scheduler did not load (2nd)"; kill $rpid; return; }
  t2=$(bench_redis "$n")
  stop_sched || { fail service "scheduler exit non-zero (2nd)"; kill $rpid; return; }
  kill $rpid; wait $rpid 2>/dev/null
  if [ -s "$out/bench.err" ] && grep -qi error "$out/bench.err"; then fail service "redis-benchmark errors: $(head -c 200 "$out/bench.err")"; return; fi
  local summary
  summary=$(awk -v d1="$d1" -v t1="$t1" -v d2="$d2" -v t2="$t2" 'BEGIN {
    split(d1,a," "); split(t1,b," "); split(d2,c," "); split(t2,d," ");
    drps=(a[1]+c[1])/2; trps=(b[1]+d[1])/2; dp=(a[2]+c[2])/2; tp=(b[2]+d[2])/2;
    if (drps <= 0 || trps <= 0) { print "bad"; exit }
    printf "default %.0f rps p99 %.3f ms | tailctl %.0f rps p99 %.3f ms | throughput ratio %.3f, p99 ratio %.3f", drps, dp, trps, tp, trps/drps, (dp>0? tp/dp : 0) }')
  [ "$summary" != bad ] || { fail service "redis-benchmark produced no numbers: $d1 / $t1"; return; }
  local ratio; ratio=$(sed -E 's/.*throughput ratio ([0-9.]+).*/\1/' <<<"$summary")
  pass service "$summary" "\"summary\": \"$summary\", \"throughput_ratio\": $ratio"
}

# jq-free JSON field access for the ktest outputs.
jget() { $PY -c 'import json,sys; d=json.loads(sys.argv[1]); exec("for k in sys.argv[2].split(\".\"):\n d=d[k] if isinstance(d,dict) else d[int(k)]"); print(json.dumps(d) if isinstance(d,(dict,list)) else d)' "$1" "$2"; }

# Serialization latency, kernel against the runtime's lazy serialization, on
# the same workload in this guest run: `ktest serialize --compare` alternates
# the two modes (a fresh pool each run, the order flipping every round).
# Asserted: mechanisms only. The huge request ran on at least 2 threads before
# its mark in every run (else there was nothing to serialize); the kernel
# serialized it every time; no cap violation (more than one token holder
# running after settling: threads the wait bound let through are counted
# apart, as wait-bound escapes); escapes stay rare; small requests still ran
# in parallel beside it. The latencies are reported, never asserted.
test_serialize() {
  local w; w=$(nproc)
  local rounds=${SERIALIZE_ROUNDS:-3}
  start_sched || { fail serialize "scheduler did not load"; return; }
  local c
  c=$(timeout 900 "$ktest" -w "$w" serialize --threshold-ms 200 --small-every-ms 40 --compare --rounds "$rounds" 2>"$out/ktest.err") \
    || { fail serialize "ktest failed: $(tail -c 300 "$out/ktest.err" | tr '\n"' ' ')"; stop_sched; return; }
  stop_sched || { fail serialize "scheduler exit non-zero"; return; }
  echo "$c" >"$out/serialize.json"
  local verdict
  verdict=$($PY - "$c" <<'EOF_PY'
import json, sys
c = json.loads(sys.argv[1])
runs = c["runs"]
ker = [r for r in runs if r["mode"] == "kernel"]
usr = [r for r in runs if r["mode"] == "user-space"]
problems = []
for r in runs:
    if r.get("max_concurrency_before_mark", 0) < 2:
        problems.append(f"{r['mode']} round {r['round']}: the huge request never ran on 2+ threads before its mark")
    if r.get("threshold_crossed_after_ms") is None:
        problems.append(f"{r['mode']} round {r['round']}: its work never reached the threshold")
for r in ker:
    k = r.get("kernel") or {}
    if not k.get("serialized"):
        problems.append(f"kernel round {r['round']}: the kernel never serialized the huge request")
    elif not r.get("settled"):
        problems.append(f"kernel round {r['round']}: serialized but never down to one thread")
k = c["kernel"]
if k["cap_violations"]:
    problems.append(f"cap violated in {k['cap_violations']} kernel runs: {k['max_running_after_settle']} token holders running at once after settling")
od, thr = k["overdue_runs"], k["throttled"]
if od > 3 and od * 20 > thr:
    problems.append(f"{od} of {thr} waits ended at the wait bound: rotation is not handing the token on")
if sum(r.get("small_requests_parallel", 0) for r in ker) == 0:
    problems.append("no small request ran in parallel beside the serialized one")
fmt = lambda v: "[" + ", ".join(f"{x:.1f}" for x in v) + "]"
med = lambda x: "n/a" if x is None else f"{x:.1f}"
ratio = c["user_over_kernel"]
summary = (f"threshold to <=1 thread, median of {c['rounds']}: kernel {med(k['median_latency_ms'])} ms {fmt(k['latency_ms'])}"
           f" (kernel clock {fmt(k['kernel_clock_ms'])}), user-space lazy {med(c['user']['median_latency_ms'])} ms {fmt(c['user']['latency_ms'])}"
           f", lazy/kernel {('%.1fx' % ratio) if ratio else 'n/a'}; threads before the mark >= {min(k['min_concurrency_before_mark'], c['user']['min_concurrency_before_mark'])}"
           f"; cap violations {k['cap_violations']} (max {k['max_running_after_settle']} holders after settle); wait-bound escapes {od} of {thr} waits")
unsettled = sum(1 for r in usr if not r.get("settled"))
if unsettled:
    summary += f"; {unsettled} user-space runs finished before settling (latency to their end, a lower bound)"
print(("FAIL " + "; ".join(problems) + " | " if problems else "PASS ") + summary)
EOF_PY
)
  case "$verdict" in
    PASS*) pass serialize "${verdict#PASS }" "\"compare\": $c" ;;
    *) fail serialize "$(echo "${verdict#FAIL }" | tr '"' "'")" ;;
  esac
}

# --serialize-mark-only: the kernel marks the huge request SERIALIZED on its CPU time (the
# runtime then stops lending its work) but holds none of its threads back.
test_serializemark() {
  local w; w=$(nproc)
  start_sched --serialize-mark-only || { fail serializemark "scheduler did not load"; return; }
  local c
  c=$(timeout 600 "$ktest" -w "$w" serialize --threshold-ms 200 --small-every-ms 40 2>"$out/ktest.err") \
    || { fail serializemark "ktest failed: $(tail -c 300 "$out/ktest.err" | tr '\n"' ' ')"; stop_sched; return; }
  stop_sched || { fail serializemark "scheduler exit non-zero"; return; }
  echo "$c" >"$out/serializemark.json"
  local verdict
  verdict=$($PY - "$c" <<'EOF_PY'
import json, sys
c = json.loads(sys.argv[1]); k = c.get("kernel") or {}
problems = []
if not k.get("serialized"):
    problems.append("the kernel never marked the huge request")
if k.get("throttled", 0) or k.get("bounces", 0):
    problems.append(f"threads were held back: {k.get('throttled')} throttled waits, {k.get('bounces')} bounces")
if c.get("max_concurrency_before_mark", 0) < 2:
    problems.append("the huge request never ran on 2+ threads")
print(("FAIL " + "; ".join(problems)) if problems else
      f"PASS marked {c.get('mark_after_ms', 0):.0f} ms in (threshold crossed at {c.get('threshold_crossed_after_ms', 0):.0f} ms), 0 throttled waits, up to {k.get('max_running')} of its threads running at once, done in {c.get('huge_wall_ms', 0):.0f} ms")
EOF_PY
)
  case "$verdict" in PASS*) pass serializemark "${verdict#PASS }";; *) fail serializemark "${verdict#FAIL }";; esac
}

test_account() {
  start_sched || { fail account "scheduler did not load"; return; }
  # An unregistered CPU hog competes for the service's CPU: both pinned to CPU 0.
  taskset -c 0 stress-ng -c 2 -t 120 --temp-path "$out" >"$out/hog.log" 2>&1 &
  local hog=$!
  sleep 1
  local a; a=$(timeout 300 taskset -c 0 "$ktest" -w 1 account --ms 300 --count 4 2>"$out/ktest.err"); local rc=$?
  kill $hog 2>/dev/null; wait $hog 2>/dev/null
  # Requests that sleep: 20 bursts each; between two the worker (pinned to
  # CPU 1) sends a byte to a pacer on CPU 2 and sleeps until it answers, as a
  # server and its client. What the kernel charges must match the thread's
  # CPU clock and must not run ahead of how busy its CPU was (wall less idle).
  # Without SCX_OPS_ALLOW_QUEUED_WAKEUP a redis-server woken this way was
  # charged 1.5-1.9x its CPU's busy time in this guest; this smaller pattern
  # gave 0.95-1.05x without the flag and 0.81-0.88x with it (6.18, two rounds
  # each), so the bound catches an over-charge of redis's size, not the flag.
  local sl=""; [ $rc = 0 ] && { sl=$(timeout 300 taskset -c 1 "$ktest" -w 1 account --ms 10 --count 12 --chunks 20 --pace-us 0 --pacer-cpu 2 --busy-cpu 1 2>>"$out/ktest.err"); rc=$?; }
  stop_sched || { fail account "scheduler exit non-zero"; return; }
  [ $rc = 0 ] || { fail account "ktest account failed: $(tail -c 300 "$out/ktest.err")"; return; }
  echo "$a" >"$out/account.json"; echo "$sl" >"$out/account-sleeping.json"
  local verdict
  verdict=$($PY - "$a" "$sl" <<'PY'
import json, sys
rows = json.loads(sys.argv[1])["requests"]
# 10%: the kernel learns of a request switch at the worker's next context
# switch or tick; under TCG a vCPU stall delays a tick by tens of ms (seen:
# 6-11% on one request of four while the host was loaded). The runtime's
# wall-clock figure is off by +180-230% in the same runs.
k = max(abs(r["kernel_error_pct"]) for r in rows)
w = sum(r["wallclock_error_pct"] for r in rows) / len(rows)
s = json.loads(sys.argv[2])
# Per request the kernel may miss one burst (it learns of the request at the
# worker's next switch: -14% on a 23 ms request seen), so the bound is on the
# total; the worst request is reported.
ks = max(abs(r["kernel_error_pct"]) for r in s["requests"])
kt = abs(s["kernel_total_ms"] - s["thread_cpu_total_ms"]) / s["thread_cpu_total_ms"] * 100
# Against the CPU's busy time (wall less its idle time, 10 ms resolution,
# including the pool's other threads and the pauses between requests).
over = s["kernel_total_ms"] / max(1.0, s["cpu_busy_ms"])
ok = k < 10 and kt < 10 and over < 1.3
print(("ok" if ok else "bad"), f"kernel within {k:.2f}% of true CPU time; runtime wall-clock off by {w:+.1f}% on average under a CPU hog; sleeping requests (19 ping-pong wake-ups from another CPU each): within {kt:.2f}% of the thread's CPU clock in total (worst request {ks:.1f}%), charged {s['kernel_total_ms']:.0f} ms on a CPU busy {s['cpu_busy_ms']:.0f} ms ({over:.2f}x, bound 1.3)")
PY
)
  case "$verdict" in ok*) pass account "${verdict#ok }" "\"requests\": $(jget "$a" requests), \"sleeping\": $sl";; *) fail account "${verdict#bad }";; esac
}

test_isolation() {
  # Open to every user: the test registers as nobody.
  start_sched --socket-mode 666 || { fail isolation "scheduler did not load"; return; }
  local nr
  nr=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$ktest" -w 2 serve --secs 3 --require-kernel 2>"$out/ktest.err") \
    || { fail isolation "unprivileged service could not register: $(tail -c 300 "$out/ktest.err")"; stop_sched; return; }
  [ "$(jget "$nr" uid)" = 65534 ] && [ "$(jget "$nr" requests)" -gt 0 ] || { fail isolation "unprivileged run: $nr"; stop_sched; return; }
  # The twin registers without a threshold (`--no-cap`): the rogue's garbage
  # leaves the kernel no request to cap, which gets it what any service may
  # ask for by registering without thresholds. A capped twin (threshold 1 ms,
  # as the rogue registers) runs one worker fewer by its own choice: beside
  # it the neighbour got 1.30-1.39 CPUs against 1.11-1.16 beside the rogue in
  # CI, about the 7/8 that one thread fewer of 8 predicts.
  # ISOLATION_TWIN="" runs the capped twin instead (a diagnostic outside CI:
  # do the pairs differ by the rogue's garbage or by its cap?).
  local twin_args=${ISOLATION_TWIN---no-cap}
  # Beside a benign twin, then beside a rogue scribbling on its own region,
  # twice (alternated, so drift in the emulated machine hits both): the CPU
  # share of an unregistered 2-thread neighbour, then the throughput of a
  # registered one.
  local twin="" rogue="" tr="" rr="" detail="" i s r kind
  # Warm-up: the first serve of a boot runs at about 0.4x the later ones
  # (TCG translates the code the first time), which would land on the twin.
  "$ktest" -w 2 serve --secs 2 >/dev/null 2>&1
  for i in 1 2 3; do
    for kind in twin rogue; do
      "$ktest" -w 2 rogue --secs 15 $([ $kind = twin ] && echo --benign $twin_args) >"$out/$kind-$i.json" 2>&1 &
      local rp=$!; sleep 3
      s=$("$ktest" hog --threads 2 --secs 5 2>>"$out/ktest.err") || { fail isolation "hog failed: $(tail -c 300 "$out/ktest.err")"; stop_sched; return; }
      "$(dirname "$bin")/tailctl" maps dump stats --json >"$out/isolation-stats-$kind-$i-0.json" 2>/dev/null
      r=$("$ktest" -w 2 serve --secs 5 --require-kernel 2>>"$out/ktest.err") || { fail isolation "serve beside the $kind failed: $(tail -c 300 "$out/ktest.err")"; stop_sched; return; }
      "$(dirname "$bin")/tailctl" maps dump stats --json >"$out/isolation-stats-$kind-$i-1.json" 2>/dev/null
      echo "$r" >"$out/isolation-serve-$kind-$i.json"
      wait $rp
      if [ $kind = twin ]; then twin+="$(jget "$s" share) "; tr+="$(jget "$r" rps) "; else rogue+="$(jget "$s" share) "; rr+="$(jget "$r" rps) "; fi
      # Per pair: the hog's per-thread shares (unequal: its threads sat in
      # different queues) and the service's requests (10-15: each waited 1 s).
      detail+="$kind $i $(echo "$s" | grep -o '"thread_shares":[^]]*]' | cut -d: -f2) req $(jget "$(tail -1 "$out/$kind-$i.json")" requests_submitted); "
      sched_alive || { fail isolation "scheduler exited beside the $kind: $(sched_tail)"; return; }
    done
  done
  stop_sched || { fail isolation "scheduler exit non-zero after rogue"; return; }
  # Per pair, what the registered neighbour met (CI once saw it at 1.4
  # requests/s beside the rogue in 2 of 3 pairs, 40 beside the twin): its
  # serialized requests and run delay, and the kernel's throttled waits over
  # its run (every service's, the rogue's too).
  local pairs; pairs=$("$PY" - "$out" <<'PY'
import json, sys
out, parts = sys.argv[1], []
def stats(f):
    try:
        vals = [v["value"] for e in json.load(open(f)) for v in e["values"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sum(v.get("throttled", 0) for v in vals), max((v.get("max_throttle_wait_ns", 0) for v in vals), default=0), sum(v.get("overdue_runs", 0) for v in vals)
for i in (1, 2, 3):
    for kind in ("twin", "rogue"):
        try:
            r = json.load(open(f"{out}/isolation-serve-{kind}-{i}.json"))
        except (OSError, ValueError):
            continue
        a, b = stats(f"{out}/isolation-stats-{kind}-{i}-0.json"), stats(f"{out}/isolation-stats-{kind}-{i}-1.json")
        k = f", throttled +{b[0] - a[0]}, overdue +{b[2] - a[2]}, longest throttle {b[1] / 1e6:.0f} ms" if a and b else ""
        # The CPUs the rogue or twin itself used over its run: the contention the neighbour met.
        try:
            other = json.loads(open(f"{out}/{kind}-{i}.json").read().strip().splitlines()[-1])["cpus"]
            k += f", {kind} used {other:.2f} CPUs"
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            pass
        s = r.get("sched", {})
        parts.append(f"{kind} {i}: {r.get('rps', 0):.1f} rps, serialized {r.get('kernel_serialized')}, "
                     f"CPU {s.get('cpu_ms', 0) / 1e3:.1f} s ({s.get('cpu_ms', 0) / max(r.get('requests', 0), 1):.1f} ms a request), "
                     f"run delay {s.get('run_delay_ms', 0):.0f} ms{k}")
print("; ".join(parts))
PY
)
  local cpu tput
  # The median of three interleaved pairs' ratios, as in `fuzz` (one hog
  # sample drifts by about +-35% under single-threaded TCG). The baseline is
  # the neighbour's CPU beside the twin, but at most its fair share: 2 of the
  # 6 spinning threads (the hog's 2, the service's 4: 2 workers, 2 idle ones
  # yielding) on every CPU. Beside a twin whose requests stalled (16-27 per
  # pair against 41-62, session 12) the neighbour got 1.52-1.58 CPUs of 4,
  # above its 1.33, and 1.33-1.34 beside the rogue.
  local fair; fair=$($PY -c 'import os; print(round(os.cpu_count() * 2 / 6, 3))')
  cpu=$(paired_ratio "$twin" "$rogue" "$fair"); tput=$(paired_ratio "$tr" "$rr")
  at_least "$cpu" 0.9 || { fail isolation "an unregistered neighbour got $cpu x its CPU beside the rogue (shares beside twin: $twin, beside rogue: $rogue, fair share $fair; $detail)"; return; }
  # The registered neighbour's throughput is reported, not asserted: without
  # the warm-up above it ranged from 0.29x to 276x between runs, the first
  # serve of a boot running at 0.4x the later ones (92 vs 239 requests/s
  # alone, same guest); beside two unregistered spinners, in one guest run,
  # it kept 0.97x and 0.60x of its alone throughput (4 vCPUs, 5 threads, so
  # 0.8x is its fair share). The issue's goal, the unregistered neighbour's
  # CPU, is asserted.
  pass isolation "uid 65534 registered and served; beside a rogue / beside a benign twin: unregistered neighbour's CPU $cpu x (beside the twin at most its fair share $fair), registered neighbour's throughput $tput x (requests/s beside the twin / the rogue: $(printf '%.1f ' $tr)/ $(printf '%.1f ' $rr)); scheduler alive; per pair: $pairs" \
    "\"unprivileged\": $nr, \"cpu_ratio\": $cpu, \"fair_share\": $fair, \"throughput_ratio\": $tput, \"shares\": \"$twin / $rogue\", \"rps\": \"$tr / $rr\", \"pairs\": \"$detail\""
}

# serve_under_load TEST PORT REQUESTS SEED: a registered tailctl-server (2
# workers, tail-control) on PORT and an open-loop tailctl-loadgen of REQUESTS
# requests at 30/s against it, in the background (their pids in spid and
# lpid; the load's summary goes to $out/loadgen.json). Fails TEST, stops the
# scheduler and returns 1 if the server does not register.
serve_under_load() {
  "$wl/tailctl-server" --addr "127.0.0.1:$2" --workers 2 --policy tc --target 40ms \
    --distribution lognormal --rps 40 >"$out/server.out" 2>"$out/server.err" &
  spid=$!
  for _ in $(seq 1 300); do grep -q listening "$out/server.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "registered with scx_tailctl" "$out/server.err" || { fail "$1" "server did not register: $(tail -c 300 "$out/server.err")"; kill $spid; stop_sched; return 1; }
  "$wl/tailctl-loadgen" --addr "127.0.0.1:$2" --requests "$3" --arrival poisson:30 --distribution lognormal:4ms:4ms \
    --kernel spin --seed "$4" --json --no-progress --drain-timeout 60s >"$out/loadgen.json" 2>"$out/loadgen.err" &
  lpid=$!
}
# every_request_answered: "ok ..." if $out/loadgen.json says every request
# got its response (none lost, no errors), else "bad ...".
every_request_answered() {
  $PY - "$out/loadgen.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s = s.get("summary", s)
sent, ok, lost, errs = (s.get(k) for k in ("requests", "completed", "lost", "errors"))
print("ok" if sent and ok == sent and not lost and not errs else "bad", f"sent {sent}, answered {ok}, lost {lost}, errors {errs}")
PY
}

# kill -9 the daemon in the middle of an open-loop load on a registered
# tailctl-server; restart it. Every request must get exactly one response, the
# server must fall back and re-register.
test_fault() {
  start_sched || { fail fault "scheduler did not load"; return; }
  local spid lpid
  serve_under_load fault 7979 600 7 || return
  sleep 6
  kill -9 "$sched_pid"; wait "$sched_pid" 2>/dev/null; sched_pid=""
  for _ in $(seq 1 100); do [ "$(state)" = disabled ] && break; sleep 0.1; done
  log "daemon killed (state $(state)); restarting in 3 s"
  sleep 3
  start_sched || { fail fault "scheduler did not restart"; kill $spid $lpid; return; }
  wait $lpid; local lrc=$?
  local rereg=no
  for _ in $(seq 1 50); do grep -q "re-registration" "$out/sched.log" && { rereg=yes; break; }; sleep 0.2; done
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  stop_sched || { fail fault "restarted scheduler exit non-zero"; return; }
  [ $lrc = 0 ] || { fail fault "loadgen failed ($lrc): $(tail -c 300 "$out/loadgen.err")"; return; }
  local verdict; verdict=$(every_request_answered)
  case "$verdict" in
    ok*) [ $rereg = yes ] || { fail fault "no re-registration after the restart (${verdict#ok })"; return; }
         pass fault "kill -9 mid-load: ${verdict#ok }; server fell back and re-registered" "\"loadgen\": $(cat "$out/loadgen.json")";;
    *) fail fault "${verdict#bad }";;
  esac
}

# The daemon stays off the CPUs while registered services keep them all busy.
# Until session 12 its main loop waited for stats requests with a timed
# channel receive that, under exactly this load, never blocked: the thread ran
# 98% of a CPU (0 voluntary context switches in 10 s), about 0.6 of the
# guest's 4 CPUs taken from the services. Asserted: all its threads together
# under 5% of the CPU time the guest used over 8 s (one 6.18 boot: 0.774 with session 11's daemon,
# 0.026 with the fix), with three registered jobs
# bound and the CPUs busy.
test_daemonidle() {
  start_sched || { fail daemonidle "scheduler did not load"; return; }
  local i pids="" a b busy0 busy1 t0 t1 bound
  for i in 1 2 3; do
    "$wl/tailctl-jobs" job --kind fib --size 44 --workers 4 --socket /run/tailctl/tailctl.sock >/dev/null 2>"$out/daemonidle-$i.err" &
    pids+="$! "
  done
  # Measure only once all three are bound and past their start-up: a CI run
  # whose guest took longer than a fixed 3 s to start them counted start-up
  # in the window (2.94 of 4 CPUs busy, one failure in CI).
  for _ in $(seq 1 150); do
    [ "$(grep -c "bound 4 workers" "$out/sched.log")" -ge 3 ] && break
    sleep 0.2
  done
  sleep 2
  # The daemon's CPU (every thread's run time, ns) and the machine's (/proc/schedstat).
  daemon_ns() { cat /proc/"$sched_pid"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }
  cpus_ns() { awk '/^cpu[0-9]/ {s += $8} END {printf "%.0f\n", s}' /proc/schedstat; }
  a=$(daemon_ns); busy0=$(cpus_ns); t0=$(date +%s%N)
  sleep 8
  b=$(daemon_ns); busy1=$(cpus_ns); t1=$(date +%s%N)
  bound=$(grep -c "bound 4 workers" "$out/sched.log")
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null; wait $pids 2>/dev/null
  stop_sched || { fail daemonidle "scheduler exit non-zero"; return; }
  local verdict
  verdict=$($PY -c '
import sys
a, b, c0, c1, t0, t1, bound = (int(x) for x in sys.argv[1:8])
wall = (t1 - t0) / 1e9
d, busy = (b - a) / 1e9 / wall, (c1 - c0) / 1e9 / wall
n = int(sys.argv[8])
# Its share of the CPU time the guest used, not of the wall clock: on a
# loaded host the time a vCPU stalls is charged to whatever it ran (one run
# beside three other VMs: 0.15 CPUs over a 25 s "8 s" window, with 5.5 of 4
# CPUs busy; 2.7% of the busy time, against 0.5% on a quiet host and 19% for
# the spinning daemon: 0.774 of 4 busy CPUs).
share = d / busy if busy > 0 else 1.0
ok = share < 0.05 and bound >= 3 and busy > 0.75 * n
print("ok" if ok else "bad", f"daemon {d:.3f} CPUs ({100 * share:.1f}% of the busy CPU time) beside {bound} bound jobs, CPUs busy {busy:.2f} of {n} over {wall:.1f} s")
' "$a" "$b" "$busy0" "$busy1" "$t0" "$t1" "$bound" "$(nproc)")
  case "$verdict" in ok*) pass daemonidle "${verdict#ok }";; *) fail daemonidle "${verdict#bad } (wanted under 5% of the busy CPU time, 3 jobs bound, 3/4 of the CPUs busy)";; esac
}

# Publication is plain stores into the mmapped region: a registered service
# serving requests makes no bpf() system call at all (registration included:
# the daemon creates the map, the service only mmaps the fd it is sent).
test_nosyscall() {
  start_sched || { fail nosyscall "scheduler did not load"; return; }
  local r
  r=$(strace -f -qq -e trace=bpf -o "$out/strace.txt" "$ktest" -w 2 serve --secs 4 --require-kernel 2>"$out/ktest.err") \
    || { fail nosyscall "ktest serve failed: $(tail -c 300 "$out/ktest.err")"; stop_sched; return; }
  stop_sched || { fail nosyscall "scheduler exit non-zero"; return; }
  local calls; calls=$(grep -c 'bpf(' "$out/strace.txt")
  local n; n=$(jget "$r" requests)
  [ "$n" -gt 0 ] 2>/dev/null || { fail nosyscall "no requests served: $r"; return; }
  [ "$calls" = 0 ] || { fail nosyscall "$calls bpf() calls while serving $n requests: $(head -c 300 "$out/strace.txt")"; return; }
  pass nosyscall "$n requests served kernel-assisted with 0 bpf() system calls" "\"requests\": $n, \"bpf_calls\": 0"
}

# The experiment driver end to end in its kernel-assisted mode: steal-first and
# user-space tail-control under the default scheduler, then steal-first under
# scx_tailctl and tail-control registered with it (the driver checks each
# registered run really was registered), on one trace. Small: it proves the
# pieces work together; the numbers are printed, not judged.
test_experiment() {
  local d="$out/experiment" r
  rm -rf "$d"
  r=$(timeout 900 "$wl/tailctl-experiment" --kernel-assisted --scx-tailctl "$bin" --workers "$(nproc)" \
        --rps "${EXPERIMENT_RPS:-100}" --requests "${EXPERIMENT_REQUESTS:-400}" --kernel spin \
        --policies sf,tc --tc-runs single --out "$d" --json 2>"$out/experiment.err") \
    || { fail experiment "driver failed: $(tail -n 4 "$out/experiment.err" | tr '\n"' ' ')"; return; }
  [ "$(state)" = disabled ] || { fail experiment "scheduler left attached: $(state)"; return; }
  local rows
  rows=$(sed -n '/^{/,$p' <<<"$r" | $PY -c 'import json,sys; r=json.load(sys.stdin); print(" | ".join("%s %s%%" % (x["policy"], "/".join("%.1f" % (m*100) for m in x["miss"])) for x in r["rows"]) + "; effective cores before each run: " + ", ".join("%s %s" % (k, "%.2f" % v["capacity_cores"] if isinstance(v, dict) and v.get("capacity_cores") is not None else "-") for k, v in r.get("runs", {}).items()))') \
    || { fail experiment "no JSON report: $(tail -c 300 <<<"$r")"; return; }
  grep -q "tail-control + kernel" <<<"$rows" || { fail experiment "no kernel-assisted row: $rows"; return; }
  # Per-run summaries live in raw/ (the driver keeps raw records apart).
  local ks; ks=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["server_stats"]["kernel_serialized"])' "$d/raw/tail-control-kernel.json") \
    || { fail experiment "no per-run summary of the kernel-assisted run in $d/raw"; return; }
  pass experiment "miss % at SF p97.5..p99.75: $rows; kernel serialized $ks" "\"kernel_serialized\": $ks"
}

# Operator-facing tests (bpftool on the pins, tailctl maps / top) live beside this file.
ops_tests="$(dirname "$(readlink -f "$0")")/guest-tests-ops.sh"
# shellcheck source=/dev/null
[ -f "$ops_tests" ] && . "$ops_tests"
# Hardening tests (issue 15, kernel half) and check_token_leaks.
harden_tests="$(dirname "$(readlink -f "$0")")/guest-tests-harden.sh"
# shellcheck source=/dev/null
[ -f "$harden_tests" ] && . "$harden_tests"
# Isolation tests (tid reuse, BIND leaks, registration DoS, pid namespaces, fuzzing).
iso_tests="$(dirname "$(readlink -f "$0")")/guest-tests-isolation.sh"
# shellcheck source=/dev/null
[ -f "$iso_tests" ] && . "$iso_tests"

# Core-allotment tests (issue 12: jobs, --allot, per-job enforcement).
allot_tests="$(dirname "$(readlink -f "$0")")/guest-tests-allot.sh"
# shellcheck source=/dev/null
[ -f "$allot_tests" ] && . "$allot_tests"

# Priority-level tests (issue 13: per-level queues, the guard, who may use which level).
prio_tests="$(dirname "$(readlink -f "$0")")/guest-tests-prio.sh"
# shellcheck source=/dev/null
[ -f "$prio_tests" ] && . "$prio_tests"

# Per-LLC queue tests (issue 16: per-LLC normal-level queues, stealing).
llc_tests="$(dirname "$(readlink -f "$0")")/guest-tests-llc.sh"
# shellcheck source=/dev/null
[ -f "$llc_tests" ] && . "$llc_tests"

[ -e /sys/kernel/sched_ext/state ] || { echo "FAIL setup: kernel $kver has no sched_ext"; echo "guest: 0 passed, 1 failed"; exit 1; }
log "$(nproc) CPUs; running: ${tests[*]}"
# Each test's duration, for keeping CI inside its time (tools/test.sh sums them).
rm -f "$out/heartbeat"; start_heartbeat
for t in "${tests[@]}"; do
  t0=$SECONDS; dmesg_mark=$(dmesg 2>/dev/null | wc -l); test_began=$(cut -d' ' -f1 /proc/uptime)
  "test_$t"; log "$t took $((SECONDS - t0)) s"
done
{ echo "{\"kernel\": \"$kver\", \"cpus\": $(nproc), \"tests\": {"; (IFS=,; echo "${json_items[*]}"); echo "}}"; } >"$out/$kver.json"
echo "guest $kver: $passed passed, $failed failed"
[ $failed = 0 ]
