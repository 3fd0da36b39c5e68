# Per-LLC queue guest test (issue 16), sourced by guest-tests.sh (which
# provides start_sched/stop_sched/pass/fail, $bin, $out, $PY).
#   llcqueues: the scheduler runs with at least two normal-level queues (the
#              guest's LLCs with `tailctl vm run --sockets 2`, else a forced
#              split, --llc-groups 2). Phase 1: two hogs pinned to each CPU
#              of queue 0, one to each CPU of queue 1 (so no CPU is ever
#              idle), and "free" hogs started on queue 0's CPUs, then allowed
#              everywhere: they sit in queue 0, and only a steal by a CPU of
#              queue 1 (whose own queue is empty at each slice end) can
#              bring them to it. Phase 2: queue 1's pinned hogs exit; queue
#              1's CPUs must stay busy with free hogs. Phase 3: a hog pinned
#              to queue 0's CPUs is re-pinned to queue 1's last CPU and must
#              run there. Asserted: >= 2 queues in the stats (--stats lines
#              and --monitor --json), steals from queue 0, a free hog seen
#              on a queue-1 CPU, every CPU >= 80% busy in phase 2, the
#              re-pinned hog ran, the scheduler stayed loaded (no watchdog
#              ejection) and exited 0. Per-queue counters (inserted / local /
#              stolen) are reported.
#              What it cannot show: lock contention on a shared queue. All
#              vCPUs run on one host thread (--tcg-threads single), so two
#              vCPUs never take a DSQ lock at the same instant.

# Busy fraction of each CPU between two /proc/stat snapshots, "cpu:frac ...".
cpu_busy() {
  $PY - "$1" "$2" <<'EOF_PY'
import sys
def read(p):
    d = {}
    for line in open(p):
        f = line.split()
        if f[0].startswith("cpu") and f[0] != "cpu":
            v = list(map(int, f[1:]))
            d[f[0][3:]] = (sum(v), v[3] + v[4])
    return d
a, b = read(sys.argv[1]), read(sys.argv[2])
print(" ".join(f"{c}:{1 - (b[c][1] - a[c][1]) / max(1, b[c][0] - a[c][0]):.2f}" for c in sorted(b, key=int)))
EOF_PY
}

# utime+stime of a process, in clock ticks.
proc_ticks() { local f; read -r -a f 2>/dev/null <"/proc/$1/stat" && echo $((f[13] + f[14])) || echo -1; }

test_llcqueues() {
  local extra=() l3
  # One L3 (or none) in the guest: force two groups so the stealing path runs.
  l3=$(cat /sys/devices/system/cpu/cpu*/cache/index3/shared_cpu_list 2>/dev/null | sort -u | wc -l)
  [ "$l3" -ge 2 ] || extra=(--llc-groups 2)
  # (libbpf prints the verifier's log on its own when a load fails.)
  start_sched --stats 1 "${extra[@]}" || { cp "$out/sched.log" "$out/llcqueues-sched.log"; fail llcqueues "scheduler did not load: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; }
  # The groups as the daemon logged them: "llc0=[0,1] llc1=[2,3]".
  local line g0 g1
  line=$(grep -m1 "normal-level queues:" "$out/sched.log")
  g0=$(sed -nE 's/.* llc0=\[([0-9,]+)\].*/\1/p' <<<"$line")
  g1=$(sed -nE 's/.* llc1=\[([0-9,]+)\].*/\1/p' <<<"$line")
  if [ -z "$g0" ] || [ -z "$g1" ]; then fail llcqueues "fewer than 2 queues (${extra[*]:-topology}): $line"; stop_sched; return; fi
  log "llcqueues: ${extra[*]:-topology}: $line"
  local n0 last1 pinned0=() pinned1=() free=() i c st=()
  n0=$(tr ',' '\n' <<<"$g0" | wc -l)
  last1=$(tr ',' '\n' <<<"$g1" | tail -n 1)
  hog() { taskset -c "$1" sh -c 'while :; do :; done' & }
  for c in $(tr ',' ' ' <<<"$g0"); do hog "$c"; pinned0+=($!); hog "$c"; pinned0+=($!); done
  for c in $(tr ',' ' ' <<<"$g1"); do hog "$c"; pinned1+=($!); done
  for i in $(seq 1 "$n0"); do hog "$g0"; free+=($!); done
  sleep 2
  local all; all="0-$(($(nproc) - 1))"
  for i in "${free[@]}"; do taskset -p -c "$all" "$i" >/dev/null; done
  # Phase 1: where the free hogs run (field 39 of /proc/PID/stat: the CPU).
  local seen=" "
  for i in $(seq 1 20); do
    # A builtin read, not awk: with 8 hogs on 4 CPUs every fork waits its turn.
    for c in "${free[@]}"; do read -r -a st 2>/dev/null <"/proc/$c/stat" && seen+="${st[38]} "; done
    sleep 0.25
  done
  # Phase 2: queue 1's own hogs go; its CPUs must not idle.
  kill "${pinned1[@]}" 2>/dev/null; wait "${pinned1[@]}" 2>/dev/null
  sleep 2
  cp /proc/stat "$out/stat.a"
  sleep 5
  cp /proc/stat "$out/stat.b"
  # Phase 3: a hog of queue 0 re-pinned to the other LLC's last CPU must run there.
  local mover=${pinned0[0]} t0 t1
  taskset -p -c "$last1" "$mover" >/dev/null
  t0=$(proc_ticks "$mover"); sleep 6; t1=$(proc_ticks "$mover")
  local json; json=$(timeout 60 "$bin" --monitor 1 --json 2>>"$out/llc.err")
  local alive=1
  kill -0 "$sched_pid" 2>/dev/null && [ "$(state)" = enabled ] || alive=0
  kill "${pinned0[@]}" "${free[@]}" 2>/dev/null; wait "${pinned0[@]}" "${free[@]}" 2>/dev/null
  [ $alive = 1 ] || { fail llcqueues "scheduler not loaded under the load: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; stop_sched; return; }
  stop_sched; local rc=$?
  [ $rc = 0 ] || { fail llcqueues "scheduler exit status $rc: $(tail -n 3 "$out/sched.log" | tr '\n"' ' ')"; return; }
  grep -qi "task stall" "$out/sched.log" && { fail llcqueues "watchdog: $(grep -i -m1 "task stall" "$out/sched.log" | tr '"' ' ')"; return; }
  local busy hz; busy=$(cpu_busy "$out/stat.a" "$out/stat.b"); hz=$(getconf CLK_TCK)
  # The --stats lines are per-second deltas: "llc queues 2 [queue:enq/local/stolen 0:a/b/c 1:...]".
  local verdict
  verdict=$($PY - "$out/sched.log" "$busy" "$((t1 - t0))" "$hz" "$json" "$g1" "$seen" <<'EOF_PY'
import json, re, sys
log, busy, ticks, hz, js = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
g1 = set(sys.argv[6].split(","))
seen = sys.argv[7].split()
tot = {}
balance = 0
for line in open(log):
    m = re.search(r"llc queues (\d+) \[queue:enq/local/stolen (.*?)\]", line)
    if not m:
        continue
    bs = re.search(r"balance steals (\d+)", line)
    balance += int(bs.group(1)) if bs else 0
    for q in m.group(2).split():
        i, v = q.split(":")
        e, l, s = map(int, v.split("/"))
        t = tot.setdefault(int(i), [0, 0, 0])
        t[0] += e; t[1] += l; t[2] += s
problems = []
if len(tot) < 2:
    problems.append(f"stats showed {len(tot)} queues")
if tot.get(0, [0, 0, 0])[2] == 0:
    problems.append("no steals from queue 0 while its CPUs were overloaded")
on1 = sum(1 for c in seen if c in g1)
if on1 == 0:
    problems.append(f"no free hog seen on queue 1's CPUs in phase 1 (CPUs seen: {' '.join(seen)})")
b = {c: float(f) for c, f in (x.split(":") for x in busy.split())}
idle = [c for c, f in b.items() if f < 0.8]
if idle:
    problems.append(f"CPUs {idle} busy < 80% ({busy})")
ran = ticks / hz
if ran < 0.2:
    problems.append(f"the hog re-pinned to the other LLC ran {ran:.2f} s in 6 s")
try:
    m = json.loads(js)
    if m.get("nr_llcs", 0) < 2 or len(m.get("llc_steals", [])) != m["nr_llcs"]:
        problems.append(f"--monitor --json: nr_llcs {m.get('nr_llcs')} llc_steals {m.get('llc_steals')}")
except Exception as e:
    problems.append(f"--monitor --json unreadable: {e}: {js[:200]}")
q = " ".join(f"{i}:{t[0]}/{t[1]}/{t[2]}" for i, t in sorted(tot.items()))
summary = f"queues {len(tot)} [queue:inserted/local/stolen {q}], {balance} of the steals balance steals; phase 1: free hogs on queue 1 in {on1}/{len(seen)} samples; phase 2 CPU busy {busy}; re-pinned hog ran {ran:.2f} s of 6 s; scheduler loaded, exit 0"
print(("FAIL " + "; ".join(problems) + " | " if problems else "PASS ") + summary)
EOF_PY
)
  case "$verdict" in
    PASS*) pass llcqueues "${extra[*]:-topology}: ${verdict#PASS }" "\"summary\": \"${verdict#PASS }\"" ;;
    *) fail llcqueues "$(echo "${verdict#FAIL }" | tr '"' "'")" ;;
  esac
}
