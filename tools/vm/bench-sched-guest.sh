#!/usr/bin/env bash
# The scheduler benchmark, guest side (tools/bench-sched.sh boots the VM and
# runs this as root on a sched_ext kernel):
#   tools/vm/bench-sched-guest.sh SCX_TAILCTL SCX_BPFLAND OUT_DIR
#
# Design: every figure is compared only within this one guest run. Each round
# runs one block per scheduler — the default kernel scheduler (none attached),
# scx_tailctl, scx_bpfland — in an order that rotates every round, so drift of
# the emulated machine does not always fall on the same scheduler. A block:
#   hackbench      rt-tests hackbench (process mode, pipes+sockets), seconds
#   pipe           perf bench sched pipe: two tasks waking each other, us/op
#                  (the wake-up latency benchmark: Debian packages no schbench)
#   cyclictest     SCHED_OTHER timer threads beside one CPU hog per CPU
#                  (stress-ng): mean and max wake-up latency, us
#   redis          redis-benchmark SET+GET against a redis-server started
#                  once for the whole run: requests/s and p99 ms
#   stress-ng mix  cpu, switch, pipe, futex stressors together: bogo ops/s each
# then, for the two sched_ext schedulers, a cost probe: with
# kernel.bpf_stats_enabled=1 only around a fixed hackbench + pipe workload
# (so the stats' own overhead never touches the benchmarks above), every BPF
# program the scheduler loaded reports run_cnt and run_time_ns (bpftool).
# Everything is appended as JSON lines to OUT_DIR/raw/records.jsonl; the
# summary (tools/vm/bench_sched_summary.py) is computed on the host.
# Sizes: BENCH_ROUNDS (5), BENCH_HB_GROUPS/BENCH_HB_LOOPS (2/50),
# BENCH_PIPE_LOOPS (5000), BENCH_SECS (4: stress-ng; cyclictest runs 3 s longer),
# BENCH_REDIS_N (5000); BENCH_PROBE_WARMUP=1 runs the probe's hackbench once
# unmeasured first. BENCH_TAILCTL_ALT_ARGS (non-empty): a fourth block,
# scx_tailctl_alt, scx_tailctl again with these flags, to compare two of its
# settings in the same run (e.g. "--wake-preempt-us 1000"). BENCH_TAILCTL_ALT_BIN
# (a path): the fourth block runs that build instead, to compare two builds.
set -uo pipefail

tailctl=$(readlink -f "$1"); bpfland=$(readlink -f "$2"); out=$3
rounds=${BENCH_ROUNDS:-5}
hb_groups=${BENCH_HB_GROUPS:-2}; hb_loops=${BENCH_HB_LOOPS:-50}
pipe_loops=${BENCH_PIPE_LOOPS:-5000}; secs=${BENCH_SECS:-4}; redis_n=${BENCH_REDIS_N:-5000}
raw=$out/raw
mkdir -p "$raw"
: >"$raw/records.jsonl"
ncpu=$(nproc)
PY=$(command -v /usr/bin/python3 || command -v python3)
log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }
state() { cat /sys/kernel/sched_ext/state 2>/dev/null || echo missing; }
# rec ROUND SCHED BENCH METRIC VALUE: one measurement.
rec() {
  printf '{"round": %s, "sched": "%s", "bench": "%s", "metric": "%s", "value": %s}\n' \
    "$1" "$2" "$3" "$4" "${5:-null}" >>"$raw/records.jsonl"
}
num() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]] && echo "$1" || echo null; }

for tool in hackbench cyclictest perf redis-server redis-benchmark stress-ng bpftool; do
  command -v "$tool" >/dev/null || { echo "bench-sched: $tool missing (tools/vm/provision.sh --bench)" >&2; exit 1; }
done
[ -x "$tailctl" ] && [ -x "$bpfland" ] || { echo "bench-sched: scheduler binaries missing: $tailctl $bpfland" >&2; exit 1; }
[ "$(state)" = disabled ] || { echo "bench-sched: sched_ext state is $(state), want disabled (no scheduler attached)" >&2; exit 1; }

sched_pid=""
start_sched() { # NAME
  case "$1" in
    # shellcheck disable=SC2086 # BENCH_TAILCTL_ARGS: words, by design
    scx_tailctl) "$tailctl" ${BENCH_TAILCTL_ARGS:-} >>"$raw/sched-$1.log" 2>&1 & ;;
    scx_bpfland) "$bpfland" >>"$raw/sched-$1.log" 2>&1 & ;;
    # shellcheck disable=SC2086 # BENCH_TAILCTL_ALT_ARGS: words, by design
    scx_tailctl_alt) "${BENCH_TAILCTL_ALT_BIN:-$tailctl}" ${BENCH_TAILCTL_ALT_ARGS:-} >>"$raw/sched-$1.log" 2>&1 & ;;
    *) return 0 ;;
  esac
  sched_pid=$!
  for _ in $(seq 1 600); do
    [ "$(state)" = enabled ] && return 0
    kill -0 "$sched_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench-sched: $1 did not attach: $(tail -n 3 "$raw/sched-$1.log" | tr '\n' ' ')" >&2
  return 1
}
stop_sched() {
  [ -n "$sched_pid" ] || return 0
  kill -INT "$sched_pid" 2>/dev/null; wait "$sched_pid" 2>/dev/null
  sched_pid=""
  for _ in $(seq 1 300); do [ "$(state)" = disabled ] && return 0; sleep 0.1; done
  echo "bench-sched: scheduler did not detach (state $(state))" >&2
  return 1
}

redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$raw/redis.log" 2>&1 &
redis_pid=$!
cleanup() { stop_sched; kill "$redis_pid" 2>/dev/null; }
trap cleanup EXIT
for _ in $(seq 1 100); do redis-cli -p 6399 ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p 6399 ping >/dev/null 2>&1 || { echo "bench-sched: redis-server did not start" >&2; exit 1; }

# BENCH_ONLY (comma-separated: hackbench,pipe,cyclictest,redis,stress-ng; default
# all) runs a subset, e.g. more rounds of the one benchmark under study.
want() { [ -z "${BENCH_ONLY:-}" ] || [[ ",$BENCH_ONLY," == *",$1,"* ]]; }
# pstat PID: the process's CPU and runqueue wait (us, /proc/PID/task/*/schedstat),
# context switches (status) and migrations (sched, if the kernel has it), summed over threads.
pstat() {
  "$PY" - "$1" <<'PY'
import os, sys
cpu = wait = cs = migr = 0
d = f"/proc/{sys.argv[1]}/task"
for t in os.listdir(d):
    try:
        run, delay, _ = open(f"{d}/{t}/schedstat").read().split()
        cpu += int(run) / 1e3; wait += int(delay) / 1e3
        for line in open(f"{d}/{t}/status"):
            if "ctxt_switches:" in line:  # voluntary and nonvoluntary
                cs += int(line.split()[-1])
        try:
            for line in open(f"{d}/{t}/sched"):
                if line.startswith("se.nr_migrations"):
                    migr += int(line.split()[-1])
        except OSError:
            pass
    except (OSError, ValueError):
        pass
print(cpu, wait, cs, migr)
PY
}

# rqwait PID SECS: PID's threads' runqueue wait per run (us) over SECS seconds
# (schedstat's run_delay and pcount, read 0.5 s from now and SECS later;
# nothing if the process was gone by then), then the guest's idle CPU time over
# the same window, in percent ("-" if none was counted).
rqwait() {
  "$PY" - "$1" "$2" <<'PY'
import os, sys, time
def read(pid):
    wait = runs = 0
    d = f"/proc/{pid}/task"
    try:
        tids = os.listdir(d)
    except OSError:
        return None
    for t in tids:
        try:
            _, delay, n = open(f"{d}/{t}/schedstat").read().split()
            wait += int(delay); runs += int(n)
        except (OSError, ValueError):
            pass
    return wait, runs
def cpu_idle():
    # /proc/stat's first line: user nice system idle iowait ...: (idle + iowait, all).
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return f[3] + f[4], sum(f)
time.sleep(0.5)
a, ia = read(sys.argv[1]), cpu_idle()
time.sleep(float(sys.argv[2]))
b, ib = read(sys.argv[1]), cpu_idle()
idle = f"{100 * (ib[0] - ia[0]) / (ib[1] - ia[1]):.1f}" if ib[1] > ia[1] else "-"
if a and b and b[1] > a[1]:
    print(f"{(b[0] - a[0]) / 1e3 / (b[1] - a[1]):.1f} {idle}")
PY
}

block() { # ROUND SCHED
  local r=$1 s=$2 v
  if want hackbench; then
  v=$(hackbench -g "$hb_groups" -l "$hb_loops" 2>>"$raw/errors.log" | awk '/^Time:/ {print $2}')
  rec "$r" "$s" hackbench seconds "$(num "$v")"
  fi
  if want pipe; then
  v=$(perf bench sched pipe -l "$pipe_loops" 2>>"$raw/errors.log" | awk '/usecs\/op/ {print $1}')
  rec "$r" "$s" pipe us_per_op "$(num "$v")"
  fi
  if want cyclictest; then
  # cyclictest's threads beside one CPU hog per CPU: how soon a sleeper runs.
  stress-ng --cpu "$ncpu" -t $((secs + 7)) --temp-path "$raw" >/dev/null 2>&1 &
  local hog=$!
  sleep 1
  local ct ctp rw
  # In the background, so that its timer threads' runqueue wait can be read
  # from the kernel's own bookkeeping while they run: the part of a wake-up's
  # latency that is the scheduler's (woken to running), apart from the
  # timer's delivery, which under TCG is mostly the emulator's. One sampler
  # process reads it twice, SECS - 1 s apart; cyclictest runs 3 s longer than
  # that window because python takes a second or two to start under TCG.
  cyclictest -q -m -d 0 -t 2 -i 1000 -D "$((secs + 3))" --policy=other >"$raw/ct.out" 2>>"$raw/errors.log" &
  ctp=$!
  rw=$(rqwait "$ctp" "$((secs - 1))")
  wait "$ctp"
  ct=$(cat "$raw/ct.out")
  kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null
  echo "$ct" >>"$raw/cyclictest.log"
  rec "$r" "$s" cyclictest rq_wait_us "$(num "${rw%% *}")"
  # How much of the guest's CPU time was idle beside the hogs (a halted vCPU takes a
  # timer interrupt at once under TCG; a busy one only in its turn).
  rec "$r" "$s" cyclictest idle_pct "$(num "${rw##* }")"
  rec "$r" "$s" cyclictest avg_us "$(num "$(awk '/^T:/ && match($0, /Avg: *[0-9]+/) {v=substr($0, RSTART+4, RLENGTH-4); s+=v; n++} END {if (n) printf "%.1f", s/n}' <<<"$ct")")"
  rec "$r" "$s" cyclictest max_us "$(num "$(awk '/^T:/ && match($0, /Max: *[0-9]+/) {v=substr($0, RSTART+4, RLENGTH-4)+0; if (v>m) m=v; n++} END {if (n) print m}' <<<"$ct")")"
  fi
  if want redis; then
  local rb p0 p1
  p0=$(pstat "$redis_pid")
  rb=$(redis-benchmark -h 127.0.0.1 -p 6399 -q -n "$redis_n" -c 16 -t set,get --csv 2>>"$raw/errors.log" \
       | awk -F'","|"' 'NR>1 {rps+=$3; p99+=$8; n++} END {if (n) printf "%.1f %.3f\n", rps/n, p99/n}')
  p1=$(pstat "$redis_pid")
  rec "$r" "$s" redis rps "$(num "${rb%% *}")"
  rec "$r" "$s" redis p99_ms "$(num "${rb##* }")"
  # redis-server's own scheduling per request (SET and GET: 2 x redis_n), from
  # the kernel's bookkeeping: runqueue wait, CPU, context switches, migrations.
  local d_cpu d_wait d_cs d_migr
  read -r d_cpu d_wait d_cs d_migr <<<"$("$PY" -c '
import sys
a, b, n = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()], 2 * int(sys.argv[3])
print(" ".join(f"{(y - x) / n:.4f}" for x, y in zip(a, b)))' "$p0" "$p1" "$redis_n")"
  rec "$r" "$s" redis server_cpu_us_per_req "$(num "$d_cpu")"
  rec "$r" "$s" redis server_wait_us_per_req "$(num "$d_wait")"
  rec "$r" "$s" redis server_switches_per_req "$(num "$d_cs")"
  rec "$r" "$s" redis server_migrations_per_req "$(num "$d_migr")"
  fi
  want stress-ng || return 0
  local sn
  sn=$(stress-ng --cpu 1 --switch 1 --pipe 1 --futex 1 -t "${secs}s" --metrics-brief --temp-path "$raw" 2>&1)
  echo "$sn" >>"$raw/stress-ng.log"
  local st
  for st in cpu switch pipe futex; do
    rec "$r" "$s" "stress-ng-$st" bogo_ops_per_s "$(num "$(awk -v st="$st" '$3 ~ /^\[/ && $4 == st && $5 ~ /^[0-9]+$/ {print $9; exit}' <<<"$sn")")"
  done
}

# The cost probe: BPF stats on only around a fixed workload; the programs are
# fresh for every block (the scheduler was loaded for it), so the counters are
# this probe's alone.
probe() { # ROUND SCHED
  local r=$1 s=$2
  # BENCH_PROBE_WARMUP=1: the same workload once with the statistics off
  # first, so that what the scheduler's maps allocate per task (its task
  # storage's per-CPU caches, new with every load) has been allocated on
  # every CPU before the probe counts: steady state, not the first forks.
  local hb=(hackbench -g 2 -l 50)
  [ "${BENCH_PROBE_WARMUP:-0}" = 1 ] && "${hb[@]}" >/dev/null 2>&1
  sysctl -q -w kernel.bpf_stats_enabled=1
  "${hb[@]}" >/dev/null 2>&1
  perf bench sched pipe -l 5000 >/dev/null 2>&1
  sysctl -q -w kernel.bpf_stats_enabled=0
  bpftool -j prog show 2>>"$raw/errors.log" | "$PY" -c '
import json, sys
r, s, base = sys.argv[1], sys.argv[2], set(int(x) for x in sys.argv[3].split(",") if x)
for p in json.load(sys.stdin):
    if p["id"] in base or p.get("type") != "struct_ops":
        continue
    print(json.dumps({"round": int(r), "sched": s, "bench": "bpf", "prog": p.get("name", "?"),
                      "run_cnt": p.get("run_cnt", 0), "run_time_ns": p.get("run_time_ns", 0)}))
' "$r" "$s" "$base_ids" >>"$raw/records.jsonl"
}
base_ids=$(bpftool -j prog show 2>/dev/null | "$PY" -c 'import json,sys; print(",".join(str(p["id"]) for p in json.load(sys.stdin)))')

scheds=(default scx_tailctl scx_bpfland)
[ -n "${BENCH_TAILCTL_ALT_ARGS:-}${BENCH_TAILCTL_ALT_BIN:-}" ] && scheds+=(scx_tailctl_alt)
nsched=${#scheds[@]}
t_start=$(date +%s)
for ((r = 0; r < rounds; r++)); do
  order=()
  for ((i = 0; i < nsched; i++)); do order+=("${scheds[$(((i + r) % nsched))]}"); done
  log "round $((r + 1))/$rounds: ${order[*]}"
  for s in "${order[@]}"; do
    start_sched "$s" || exit 1
    log "  $s: benchmarks"
    block "$r" "$s"
    if [ "$s" != default ]; then
      [ "$(state)" = enabled ] || { echo "bench-sched: $s was ejected during its block (state $(state))" >&2; exit 1; }
      probe "$r" "$s"
    fi
    stop_sched || exit 1
  done
  log "round $((r + 1)) done ($(( $(date +%s) - t_start )) s so far)"
done
printf '{"kernel": "%s", "cpus": %s, "rounds": %s, "hackbench": "-g %s -l %s", "pipe_loops": %s, "secs": %s, "redis_n": %s, "only": "%s", "tailctl_args": "%s", "tailctl_alt_args": "%s", "tailctl_alt_bin": "%s", "probe_warmup": "%s"}\n' \
  "$(uname -r)" "$ncpu" "$rounds" "$hb_groups" "$hb_loops" "$pipe_loops" "$secs" "$redis_n" "${BENCH_ONLY:-}" "${BENCH_TAILCTL_ARGS:-}" "${BENCH_TAILCTL_ALT_ARGS:-}" "${BENCH_TAILCTL_ALT_BIN:-}" "${BENCH_PROBE_WARMUP:-0}" >"$raw/config.json"
log "done: $raw/records.jsonl"
