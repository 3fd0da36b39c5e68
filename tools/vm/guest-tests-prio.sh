# Priority-level guest tests (issue 13, the kernel half), sourced by
# guest-tests.sh (which provides start_sched/stop_sched/pass/fail/jget, $bin,
# $out, $PY, $ktest, $wl). CPU shares are each process's own CPU time over
# wall time (guest clocks); every other figure is the kernel's, from the
# pinned stats map (deltas over the run). Timings are reported, never asserted.
#   prioprompt: a level-6 and a level-1 registered service, each with one
#               CPU-bound thread per CPU: the high one gets nearly all the
#               CPU, and runs of the low level while level 6 had a task
#               queued (inversions) stay a small fraction of the runs: only
#               guard dispatches (counted apart) and races. The level-6 max
#               wait, guard dispatches, violations are reported.
#   priostarve: a level-7 service with a thread per CPU beside an
#               unregistered hog (normal level) and a level-0 service: both
#               still run (guard dispatches), the scheduler stays enabled,
#               the longest wait per level and the watchdog margin reported.
#   priouser:   a non-root service asking for a level above normal is
#               refused with a reason naming --max-user-priority; at or
#               below normal it registers; with --max-user-priority 6 the
#               same request is accepted.
#   priocgroup: an unmodified hog in a cgroup given level 6 with
#               --priority-cgroup beside an unregistered hog at normal: the
#               cgroup's hog gets most of the CPU.

# The scheduler's prio counters summed over CPUs (maxima: max) as JSON.
prio_stats() {
  "$wl/tailctl" maps dump stats --json 2>>"$out/prio.err" | $PY -c '
import json, sys
tot = {}
for e in json.load(sys.stdin):
    for c in e["values"]:
        for k, v in c["value"].items():
            if not k.startswith("prio_"):
                continue
            if k == "prio_max_wait_ns":
                tot[k] = [max(a, b) for a, b in zip(tot.get(k, [0] * len(v)), v)]
            elif isinstance(v, list):
                tot[k] = [a + b for a, b in zip(tot.get(k, [0] * len(v)), v)]
            else:
                tot[k] = tot.get(k, 0) + v
print(json.dumps(tot))'
}
# prio_delta BEFORE AFTER: counters over the run (maxima as of AFTER), with ms figures.
prio_delta() {
  $PY - "$1" "$2" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
d = {}
for k, v in b.items():
    if k == "prio_max_wait_ns":
        d["max_wait_ms"] = [round(x / 1e6, 1) for x in v]
    elif isinstance(v, list):
        d[k] = [y - x for x, y in zip(a.get(k, [0] * len(v)), v)]
    else:
        d[k] = v - a.get(k, 0)
d["violation_ms"] = round(d.pop("prio_violation_ns", 0) / 1e6, 1)
print(json.dumps(d))
PY
}

test_prioprompt() {
  local n secs=8 s0 s1 d hi lo
  n=$(nproc)
  start_sched || { fail prioprompt "scheduler did not load: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; }
  s0=$(prio_stats)
  "$ktest" prio --level 6 --threads "$n" --secs "$secs" >"$out/prio-hi.json" 2>"$out/prio-hi.err" &
  local hp=$!
  "$ktest" prio --level 1 --threads "$n" --secs "$secs" >"$out/prio-lo.json" 2>"$out/prio-lo.err" &
  local lp=$!
  wait $hp; local hrc=$?; wait $lp; local lrc=$?
  s1=$(prio_stats)
  local st; st=$(state)
  stop_sched; local rc=$?
  [ $hrc = 0 ] && [ $lrc = 0 ] || { fail prioprompt "services failed: $(cat "$out/prio-hi.err" "$out/prio-lo.err" | tail -n 3 | tr '\n"' ' ')"; return; }
  [ "$st" = enabled ] || { fail prioprompt "scheduler state $st after the run"; return; }
  [ $rc = 0 ] || { fail prioprompt "scheduler exited $rc"; return; }
  d=$(prio_delta "$s0" "$s1")
  hi=$(jget "$(cat "$out/prio-hi.json")" share); lo=$(jget "$(cat "$out/prio-lo.json")" share)
  log "prioprompt: level 6 $hi CPUs, level 1 $lo CPUs of $n; kernel: $d"
  local verdict
  verdict=$($PY - "$hi" "$lo" "$n" "$d" <<'PY'
import json, sys
hi, lo, n, d = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
runs = d["prio_runs"]
why = []
if hi < 0.8 * (hi + lo):
    why.append(f"level 6 got {hi:.2f} CPUs, level 1 {lo:.2f}: not nearly all")
if runs[6] == 0 or runs[1] == 0:
    why.append(f"runs per level {runs}: a level never ran")
# Promptness by the kernel's own count: a run that starts while a task of a
# higher level this CPU may run had been queued since before the CPU chose
# (ops.dispatch, or a direct dispatch to it) is an inversion; guard runs and
# per-CPU kthreads excepted. Higher-level work that arrived after the choice
# is a race, counted apart (prio_inversions_raced): under single-threaded TCG
# a vCPU stalls for milliseconds between choosing and running. Before the
# two were told apart, 1275-1333 of ~5500 runs counted as inversions; apart,
# 6.18 counted 9 inversions and 699 races in 3011 runs. Asserted: at most 1%
# of the runs.
inv = d.get("prio_inversions", 0)
total = sum(runs)
if inv * 100 > total:
    why.append(f"{inv} inversions in {total} runs (more than 1%): a lower level chose to run while higher work waited")
print("; ".join(why) or "ok")
PY
)
  if [ "$verdict" = ok ]; then
    pass prioprompt "level 6 $hi CPUs vs level 1 $lo CPUs of $n; $d" "\"high_cpus\": $hi, \"low_cpus\": $lo, \"kernel\": $d"
  else
    fail prioprompt "$verdict"
  fi
}

test_priostarve() {
  local n secs=8 s0 s1 d hog lo hi
  n=$(nproc)
  start_sched || { fail priostarve "scheduler did not load"; return; }
  s0=$(prio_stats)
  "$ktest" prio --level 7 --threads "$n" --secs "$secs" >"$out/starve-hi.json" 2>"$out/starve-hi.err" &
  local hp=$!
  "$ktest" prio --level 0 --threads 1 --secs "$secs" >"$out/starve-lo.json" 2>"$out/starve-lo.err" &
  local lp=$!
  "$ktest" hog --threads 1 --secs "$secs" >"$out/starve-hog.json" 2>"$out/starve-hog.err" &
  local gp=$!
  wait $hp; local hrc=$?; wait $lp; local lrc=$?; wait $gp; local grc=$?
  s1=$(prio_stats)
  local st; st=$(state)
  stop_sched; local rc=$?
  [ $hrc = 0 ] && [ $lrc = 0 ] && [ $grc = 0 ] || { fail priostarve "a process failed: $(cat "$out"/starve-*.err | tail -n 3 | tr '\n"' ' ')"; return; }
  [ "$st" = enabled ] || { fail priostarve "scheduler state $st after the run (watchdog?)"; return; }
  [ $rc = 0 ] || { fail priostarve "scheduler exited $rc"; return; }
  d=$(prio_delta "$s0" "$s1")
  hi=$(jget "$(cat "$out/starve-hi.json")" share); lo=$(jget "$(cat "$out/starve-lo.json")" share)
  hog=$(jget "$(cat "$out/starve-hog.json")" share)
  local margin; margin=$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print(round(30000 - max(d["max_wait_ms"]), 1))' "$d")
  log "priostarve: level 7 $hi CPUs, unregistered hog $hog, level 0 $lo; watchdog margin $margin ms; kernel: $d"
  local verdict
  verdict=$($PY - "$hog" "$lo" "$d" "$margin" <<'PY'
import json, sys
hog, lo, d, margin = float(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4])
why = []
if hog <= 0 or lo <= 0:
    why.append(f"starved: hog {hog}, level 0 {lo}")
if d["prio_guard_dispatches"] == 0:
    why.append("no guard dispatch: the lower levels ran some other way")
if margin <= 0:
    why.append(f"watchdog margin {margin} ms")
print("; ".join(why) or "ok")
PY
)
  if [ "$verdict" = ok ]; then
    pass priostarve "hog $hog CPUs, level 0 $lo beside level 7 $hi; margin $margin ms; $d" "\"hog_cpus\": $hog, \"low_cpus\": $lo, \"high_cpus\": $hi, \"watchdog_margin_ms\": $margin, \"kernel\": $d"
  else
    fail priostarve "$verdict"
  fi
}

test_priouser() {
  local e rc
  start_sched --socket-mode 666 || { fail priouser "scheduler did not load"; return; }
  e=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$ktest" prio --level 6 --threads 1 --secs 1 2>&1); rc=$?
  local ok_low; setpriv --reuid=65534 --regid=65534 --clear-groups "$ktest" prio --level 2 --threads 1 --secs 1 >"$out/priouser-low.json" 2>&1; ok_low=$?
  stop_sched
  [ $rc != 0 ] || { fail priouser "uid 65534 registered at level 6: $e"; return; }
  echo "$e" | grep -q -- "--max-user-priority" || { fail priouser "refusal without the reason: $(echo "$e" | tail -n 2 | tr '\n"' ' ')"; return; }
  [ $ok_low = 0 ] || { fail priouser "uid 65534 refused at level 2: $(tail -n 2 "$out/priouser-low.json" | tr '\n"' ' ')"; return; }
  start_sched --socket-mode 666 --max-user-priority 6 || { fail priouser "scheduler did not load with --max-user-priority 6"; return; }
  local e2; e2=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$ktest" prio --level 6 --threads 1 --secs 1 2>&1); rc=$?
  stop_sched
  [ $rc = 0 ] || { fail priouser "refused at level 6 with --max-user-priority 6: $(echo "$e2" | tail -n 2 | tr '\n"' ' ')"; return; }
  pass priouser "refused: $(echo "$e" | grep -o 'priority 6 refused[^"]*' | head -n 1 | tr '"' "'")"
}

test_priocgroup() {
  local cg=/sys/fs/cgroup/tailctl-prio-test n secs=6 s0 s1 d hi lo
  n=$(nproc)
  [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] || { fail priocgroup "no cgroup v2 at /sys/fs/cgroup"; return; }
  mkdir -p "$cg" || { fail priocgroup "cannot create $cg"; return; }
  start_sched --priority-cgroup "$cg=6" || { fail priocgroup "scheduler did not load: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; rmdir "$cg"; return; }
  s0=$(prio_stats)
  (echo $BASHPID >"$cg/cgroup.procs" && exec "$ktest" hog --threads "$n" --secs "$secs") >"$out/cg-hi.json" 2>"$out/cg-hi.err" &
  local hp=$!
  "$ktest" hog --threads "$n" --secs "$secs" >"$out/cg-lo.json" 2>"$out/cg-lo.err" &
  local lp=$!
  wait $hp; local hrc=$?; wait $lp; local lrc=$?
  s1=$(prio_stats)
  stop_sched; local rc=$?
  rmdir "$cg" 2>/dev/null
  [ $hrc = 0 ] && [ $lrc = 0 ] || { fail priocgroup "hogs failed: $(cat "$out"/cg-*.err | tail -n 3 | tr '\n"' ' ')"; return; }
  [ $rc = 0 ] || { fail priocgroup "scheduler exited $rc"; return; }
  d=$(prio_delta "$s0" "$s1")
  hi=$(jget "$(cat "$out/cg-hi.json")" share); lo=$(jget "$(cat "$out/cg-lo.json")" share)
  log "priocgroup: cgroup at level 6 $hi CPUs, normal hog $lo CPUs of $n; kernel: $d"
  if $PY -c 'import sys; h, l = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if h >= 0.8 * (h + l) else 1)' "$hi" "$lo"; then
    pass priocgroup "cgroup hog $hi CPUs vs normal hog $lo of $n" "\"cgroup_cpus\": $hi, \"normal_cpus\": $lo, \"kernel\": $d"
  else
    fail priocgroup "cgroup hog (level 6) got $hi CPUs, normal hog $lo: not most"
  fi
}
