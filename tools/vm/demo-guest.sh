#!/usr/bin/env bash
# The demo, inside a sched_ext kernel: scx_tailctl runs every task while a
# redis server is driven by redis-benchmark, first under the default
# scheduler and then under tailctl; prints the comparison, the scheduler's
# counters and what bpftool sees in the pinned maps.
set -uo pipefail
bin=$1; out=$2
say() { echo; echo "=== $* ==="; }
bench() { redis-benchmark -h 127.0.0.1 -p 6399 -q -n 20000 -c 16 -t set,get 2>&1 | tr '\r' '\n' | grep -E 'requests per second'; }

say "kernel $(uname -r), $(nproc) CPUs, sched_ext state: $(cat /sys/kernel/sched_ext/state)"
redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
rpid=$!
for _ in $(seq 1 100); do redis-cli -p 6399 ping >/dev/null 2>&1 && break; sleep 0.1; done

say "redis-benchmark under the default kernel scheduler"
bench

say "loading scx_tailctl"
"$bin/scx_tailctl" --stats 2 >"$out/sched.log" 2>&1 &
spid=$!
for _ in $(seq 1 100); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; sleep 0.2; done
echo "state: $(cat /sys/kernel/sched_ext/state), ops: $(cat /sys/kernel/sched_ext/root/ops)"

say "redis-benchmark under scx_tailctl"
bench

say "bpftool map dump pinned /sys/fs/bpf/tailctl/stats (first CPU)"
bpftool map dump pinned /sys/fs/bpf/tailctl/stats 2>&1 | head -n 16

kill -INT $spid; wait $spid; rc=$?
say "scx_tailctl exited with $rc; its log and counters:"
cat "$out/sched.log"
echo "state after exit: $(cat /sys/kernel/sched_ext/state)"
kill $rpid 2>/dev/null; wait 2>/dev/null
exit $rc
