#!/bin/bash
# Where redis-server and redis-benchmark run, and how busy each vCPU is, under the default scheduler and scx_tailctl/bpfland.
# PIN=1: redis-server on CPU 1 and redis-benchmark on CPU 2 under every scheduler.
BIN=$1; BPFLAND=$2
redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/tmp/rd/redis.log 2>&1 &
rp=$!; sleep 2
[ "${PIN:-0}" = 1 ] && taskset -apc 1 $rp >/dev/null
sysctl -q -w kernel.sched_schedstats=1
state() { cat /sys/kernel/sched_ext/state; }
for sched in default tailctl bpfland tailctl default bpfland; do
  sp=""
  case $sched in
    tailctl) $BIN >/tmp/rd/s.log 2>&1 & sp=$!;;
    bpfland) $BPFLAND >/tmp/rd/b.log 2>&1 & sp=$!;;
  esac
  [ -n "$sp" ] && for i in $(seq 1 300); do [ "$(state)" = enabled ] && break; sleep 0.2; done
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
            # cpuN yld_count legacy sched_count sched_goidle ttwu_count ttwu_local ...
            tot[0] += int(f[3]); tot[1] += int(f[4]); tot[2] += int(f[5])
    return tot
def cpu_of(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split()[36])
def ex(pid):
    return int(open(f"/proc/{pid}/schedstat").read().split()[0])
c0 = cpustat(); e0 = ex(rp); t0 = time.monotonic(); q0 = schedstat()
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
t1 = time.monotonic(); c1 = cpustat(); e1 = ex(rp); q1 = schedstat()
busy = {k: round(1 - (c1[k][1]-c0[k][1])/max(1,(c1[k][0]-c0[k][0])), 2) for k in c0}
sc, gi, tw = (b - a for a, b in zip(q0, q1))
print(f"{sched}: wall {t1-t0:.2f}s server_cpu {(e1-e0)/1e9:.2f}s client_cpu>={ce/1e9:.2f}s placement {dict(pairs)} busy {busy} schedules {sc} to_idle {gi} wakeups {tw}")
PY
  wait $!
  [ -n "$sp" ] && { kill -INT $sp; wait $sp; }
  sleep 1
done
kill $rp
