#!/bin/bash
BIN=$1; BPFLAND=$2
state() { cat /sys/kernel/sched_ext/state; }
for sched in tailctl bpfland tailctl bpfland; do
  case $sched in
    tailctl) $BIN >/tmp/rd/s.log 2>&1 & sp=$!;;
    bpfland) $BPFLAND >/tmp/rd/b.log 2>&1 & sp=$!;;
  esac
  for i in $(seq 1 300); do [ "$(state)" = enabled ] && break; sleep 0.2; done
  sleep 1
  sysctl -q -w kernel.bpf_stats_enabled=1
  before=$(bpftool -j prog show)
  taskset -c 1 python3 -c '
import time
def ex(): return int(open("/proc/self/schedstat").read().split()[0])
e0=ex(); t0=time.monotonic(); n=0
while time.monotonic()-t0<3: time.sleep(0.001); n+=1
print(f"charged {(ex()-e0)/1e6:.1f} ms over {n} sleeps")' > /tmp/rd/sl.txt
  after=$(bpftool -j prog show)
  sysctl -q -w kernel.bpf_stats_enabled=0
  python3 - "$before" "$after" "$sched" "$(cat /tmp/rd/sl.txt)" <<'PY'
import json, sys
b = {p["id"]: p for p in json.loads(sys.argv[1])}
a = {p["id"]: p for p in json.loads(sys.argv[2])}
tot = 0; rows = []
for i, p in a.items():
    if p.get("type") != "struct_ops": continue
    q = b.get(i, {})
    dt = p.get("run_time_ns", 0) - q.get("run_time_ns", 0); dc = p.get("run_cnt", 0) - q.get("run_cnt", 0)
    if dc: rows.append(f"{p['name'].split('_',1)[1]}:{dc}x{dt/dc/1e3:.1f}us"); tot += dt
print(f"{sys.argv[3]}: {sys.argv[4]}; BPF total {tot/1e6:.1f} ms: " + " ".join(sorted(rows)))
PY
  kill -INT $sp; wait $sp; sleep 1
done
