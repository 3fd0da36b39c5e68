#!/bin/bash
# What registering with scx_tailctl costs a request-parallel service, end to end (issue 16 §2).
#
# In ONE guest, under scx_tailctl, the same example service (tailctl-server, 4 workers) replays the
# same trace registered and unregistered, for steal-first and for tail-control with a target so
# loose that nothing is ever serialized (so the runs differ only in registration). Each round runs
# the four configurations in an order that alternates between rounds (ABBA), so a guest that slows
# down over the run does not favour one side; the summary pairs each registered run with its
# unregistered twin of the same round.
#
# Beside the latency percentiles it records what TCG's drift does not swamp as much, per request:
# the service's CPU time and its threads' runqueue wait (/proc/PID/task/*/schedstat: both are
# clock-based, not tick-sampled), its context switches, migrations (/proc/PID/task/*/sched) and
# the daemon's own CPU during the run.
#
# With TARGET (6th argument, e.g. 150ms) tail-control serializes: registered, the kernel does it
# on its exact CPU time; unregistered, the runtime does it on the wall clock. The tail-control
# pair then compares kernel-assisted with user-space tail-control, paired by round.
#
# Usage (in the guest): regab-guest.sh BIN OUT [ROUNDS] [RPS] [REQUESTS] [TARGET]
#   BIN: a directory with scx_tailctl, tailctl-server, tailctl-loadgen (a release build)
#   OUT: where the per-run JSON (raw, not for the repository) and summary.json/table.md go
#   THRESHOLD_TABLE=FILE (environment): tail-control's thresholds from FILE, see below
set -u
B=$1 O=$2 ROUNDS=${3:-5} RPS=${4:-110} N=${5:-2000} TARGET=${6:-10s}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$O"
PY=python3
"$B/tailctl-loadgen" --requests "$N" --arrival "poisson:$RPS" --distribution bing --kernel spin --seed 3 \
  --write-trace "$O/trace.txt" --dry-run >/dev/null 2>&1 || { echo "regab: trace generation failed" >&2; exit 1; }
cal=$("$B/tailctl-server" --workers 4 --calibrate) || { echo "regab: calibration failed" >&2; exit 1; }
bs=$(echo "$cal" | $PY -c 'import json,sys;print(json.load(sys.stdin)["bs_unit_ns"])')
sp=$(echo "$cal" | $PY -c 'import json,sys;print(json.load(sys.stdin)["spin_unit_ns"])')
# SCX_ARGS (environment): scx_tailctl's flags, e.g. --serialize-mark-only.
# shellcheck disable=SC2086
"$B/scx_tailctl" ${SCX_ARGS:-} >"$O/scx.log" 2>&1 &
S=$!
for _ in $(seq 100); do
  [ "$(cat /sys/kernel/sched_ext/state 2>/dev/null)" = enabled ] && [ -S /run/tailctl/tailctl.sock ] && break
  sleep 0.2
done
[ "$(cat /sys/kernel/sched_ext/state 2>/dev/null)" = enabled ] || { echo "regab: scx_tailctl did not load" >&2; cat "$O/scx.log" >&2; exit 1; }

# snap PID FILE: per-thread runtime and runqueue wait (ns), switches, migrations; the daemon's CPU.
snap() {
  $PY - "$1" "$S" >"$2" <<'PY'
import json, os, sys, time
def threads(pid):
    run = wait = vol = invol = mig = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            r, w, _ = open(f"/proc/{pid}/task/{t}/schedstat").read().split()
            run += int(r); wait += int(w)
            for l in open(f"/proc/{pid}/task/{t}/status"):
                if l.startswith("voluntary_ctxt_switches"): vol += int(l.split()[1])
                if l.startswith("nonvoluntary_ctxt_switches"): invol += int(l.split()[1])
            for l in open(f"/proc/{pid}/task/{t}/sched"):
                if l.startswith("se.nr_migrations"): mig += int(l.split(":")[1])
        except (OSError, ValueError):
            pass  # a thread that exited between the listing and the read
    return {"run_ns": run, "wait_ns": wait, "vol": vol, "invol": invol, "migrations": mig}
print(json.dumps({"t_ns": time.monotonic_ns(), "server": threads(sys.argv[1]), "daemon": threads(sys.argv[2])}))
PY
}

run() { # NAME SERVER-ARGS...
  local name=$1
  shift
  "$B/tailctl-server" --addr 127.0.0.1:7000 --workers 4 --bs-unit-ns "$bs" --spin-unit-ns "$sp" "$@" \
    >"$O/$name.srv" 2>"$O/$name.err" &
  local p=$!
  sleep 1.5
  snap $p "$O/$name.before"
  "$B/tailctl-loadgen" --addr 127.0.0.1:7000 --trace "$O/trace.txt" --targets "$TARGET" --no-progress --json --records "$O/$name.csv" \
    >"$O/$name.json" 2>/dev/null
  snap $p "$O/$name.after"
  kill $p
  wait $p 2>/dev/null
  echo "regab: $name done ($(date +%T))" >&2
}

loose=(--policy tc --distribution bing --rps "$RPS" --target "$TARGET")
# THRESHOLD_TABLE=FILE: tail-control reads its thresholds from FILE (scaled to the guest's CPU
# per request, which the calibrated table underestimates several times under TCG) instead of
# computing them for TARGET; TARGET then only sets where the load generator counts misses.
[ -n "${THRESHOLD_TABLE:-}" ] && loose=(--policy tc --threshold-table "$THRESHOLD_TABLE")
configs=(sf-unreg sf-reg tc-unreg tc-reg)
for r in $(seq 1 "$ROUNDS"); do
  order=("${configs[@]}")
  if [ $((r % 2)) = 0 ]; then order=(tc-reg tc-unreg sf-reg sf-unreg); fi
  for c in "${order[@]}"; do
    case $c in
      sf-unreg) run "$c.$r" --policy sf --no-kernel ;;
      sf-reg) run "$c.$r" --policy sf --scx-socket /run/tailctl/tailctl.sock ;;
      tc-unreg) run "$c.$r" "${loose[@]}" --no-kernel ;;
      tc-reg) run "$c.$r" "${loose[@]}" --scx-socket /run/tailctl/tailctl.sock ;;
    esac
  done
done
kill -INT $S
wait $S
state=$(cat /sys/kernel/sched_ext/state)
$PY "$here/regab_summary.py" "$O" "$ROUNDS" --sched-state "$state" --target "$TARGET" \
  --command "${SCX_ARGS:+SCX_ARGS='$SCX_ARGS' }${THRESHOLD_TABLE:+THRESHOLD_TABLE=$(basename "$THRESHOLD_TABLE") }tools/vm/regab-guest.sh BIN OUT $ROUNDS $RPS $N $TARGET"
