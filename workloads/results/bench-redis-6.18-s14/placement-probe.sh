#!/bin/bash
# Where redis-server and redis-benchmark run, and how busy each vCPU is, under the default scheduler and scx_tailctl/bpfland.
# PIN=1: redis-server on CPU 1 and redis-benchmark on CPU 2 under every scheduler.
BIN=$1; BPFLAND=$2; mkdir -p /tmp/rd
redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/tmp/rd/redis.log 2>&1 &
rp=$!; sleep 2
[ "${PIN:-0}" = 1 ] && taskset -apc 1 $rp >/dev/null
sysctl -q -w kernel.sched_schedstats=1
state() { cat /sys/kernel/sched_ext/state; }
# SCHEDS picks the schedulers and their order; ALT=BIN adds "alt", a second scx_tailctl build.
for sched in ${SCHEDS:-default tailctl bpfland tailctl default bpfland}; do
  sp=""
  case $sched in
    tailctl) $BIN >/tmp/rd/s.log 2>&1 & sp=$!;;
    bpfland) $BPFLAND >/tmp/rd/b.log 2>&1 & sp=$!;;
    alt) $ALT >/tmp/rd/a.log 2>&1 & sp=$!;;
  esac
  [ -n "$sp" ] && for i in $(seq 1 300); do [ "$(state)" = enabled ] && break; sleep 0.2; done
  # A scheduler that failed to load would leave the default in charge: skip the round.
  [ -n "$sp" ] && [ "$(state)" != enabled ] && { echo "$sched: did not load, round skipped"; kill -INT $sp 2>/dev/null; wait $sp; continue; }
  python3 - $rp $sched <<'PY' &
import os, sys, time, subprocess, collections
rp, sched = int(sys.argv[1]), sys.argv[2]
def cpustat():
    v = {}
    for l in open("/proc/stat"):
        if l.startswith("cpu") and l[3].isdigit():
            f = l.split(); v[f[0]] = (sum(int(x) for x in f[1:]), int(f[4]) + int(f[5]))
    return v
def schedstat():
    tot = [0, 0, 0]
    for l in open("/proc/schedstat"):
        if l.startswith("cpu"):
            f = l.split()
            # cpuN yld_count legacy sched_count sched_goidle ttwu_count ttwu_local rq_cpu_time ...
            tot[0] += int(f[3]); tot[1] += int(f[4]); tot[2] += int(f[5])
    return tot
def rq_cpu_time():
    # Time non-idle tasks were current on each CPU (sched_info, by rq_clock): a second,
    # independent measure of how busy a CPU was, beside /proc/stat's.
    return {l.split()[0]: int(l.split()[7]) for l in open("/proc/schedstat") if l.startswith("cpu")}
def ex3(pid):
    return [int(x) for x in open(f"/proc/{pid}/schedstat").read().split()]
def cpu_of(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split()[36])
def ex(pid):
    return int(open(f"/proc/{pid}/schedstat").read().split()[0])
c0 = cpustat(); e0 = ex(rp); r0 = rq_cpu_time(); x0 = ex3(rp); t0 = time.monotonic(); q0 = schedstat()
cl = subprocess.Popen((["taskset", "-c", "2"] if os.environ.get("PIN") == "1" else []) + ["redis-benchmark","-h","127.0.0.1","-p","6399","-q","-n","20000","-c","16","-t","set,get"], stdout=subprocess.DEVNULL)
pairs = collections.Counter()
ce = 0
while cl.poll() is None:
    try:
        s, c = cpu_of(rp), cpu_of(cl.pid); pairs["same" if s == c else "diff"] += 1
        ce = ex(cl.pid)
    except Exception:
        pass
    time.sleep(0.05)
t1 = time.monotonic(); c1 = cpustat(); e1 = ex(rp); r1 = rq_cpu_time(); x1 = ex3(rp); q1 = schedstat()
busy = {k: round(1 - (c1[k][1]-c0[k][1])/max(1,(c1[k][0]-c0[k][0])), 2) for k in c0}
sc, gi, tw = (b - a for a, b in zip(q0, q1))
print(f"{sched}: wall {t1-t0:.2f}s server_cpu {(e1-e0)/1e9:.2f}s client_cpu>={ce/1e9:.2f}s placement {dict(pairs)} busy {busy} schedules {sc} to_idle {gi} wakeups {tw}")
rq = {k: round((r1[k]-r0[k])/1e9, 2) for k in r0}
dx = [b - a for a, b in zip(x0, x1)]
print(f"  {sched}: rq_cpu_time_s {rq} server: run_s {dx[0]/1e9:.2f} wait_s {dx[1]/1e9:.2f} timeslices {dx[2]}")
PY
  wait $!
  [ -n "$sp" ] && { kill -INT $sp; wait $sp; }
  sleep 1
done
kill $rp
