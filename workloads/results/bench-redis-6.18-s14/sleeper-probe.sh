#!/bin/bash
# A pinned task that sleeps 1 ms at a time: how much CPU is it charged (schedstat) per wall second?
BIN=$1; BPFLAND=$2
state() { cat /sys/kernel/sched_ext/state; }
probe() {
  taskset -c 1 python3 - "$1" <<'PY'
import os, sys, time, resource
def ex(): return int(open("/proc/self/schedstat").read().split()[0])
def busy():
    for l in open("/proc/stat"):
        if l.startswith("cpu1 "):
            f = [int(x) for x in l.split()[1:]]; return sum(f), f[3] + f[4]
e0, t0, b0 = ex(), time.monotonic(), busy()
n = 0
while time.monotonic() - t0 < 3:
    time.sleep(0.001); n += 1
e1, t1, b1 = ex(), time.monotonic(), busy()
tot, idle = b1[0] - b0[0], b1[1] - b0[1]
print(f"{sys.argv[1]}: {n} sleeps in {t1-t0:.2f}s, charged {(e1-e0)/1e6:.1f} ms = {(e1-e0)/1e9/(t1-t0):.3f} of a CPU; cpu1 busy {1-idle/max(tot,1):.3f}")
PY
}
for sched in default tailctl bpfland tailctl default; do
  sp=""
  case $sched in
    tailctl) $BIN >/tmp/rd/s.log 2>&1 & sp=$!;;
    bpfland) $BPFLAND >/tmp/rd/b.log 2>&1 & sp=$!;;
  esac
  [ -n "$sp" ] && for i in $(seq 1 300); do [ "$(state)" = enabled ] && break; sleep 0.2; done
  probe $sched
  [ -n "$sp" ] && { kill -INT $sp; wait $sp; }
  sleep 1
done
