#!/bin/bash
# In the guest: what does registration cost? Same trace, same scheduler (scx_tailctl), interleaved.
# Run from the repository root (the guest sees the host's file system); raw output stays in $O.
B=target/release; O=/tmp/regcost
$B/tailctl-loadgen --requests 2000 --arrival poisson:110 --distribution bing --kernel spin --seed 3 --write-trace $O/t.txt --dry-run >/dev/null 2>&1
CAL=$($B/tailctl-server --workers 4 --calibrate)
bs=$(echo "$CAL" | python3 -c 'import json,sys;print(json.load(sys.stdin)["bs_unit_ns"])'); sp=$(echo "$CAL" | python3 -c 'import json,sys;print(json.load(sys.stdin)["spin_unit_ns"])')
$B/scx_tailctl >$O/scx.log 2>&1 & S=$!
for i in $(seq 50); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && [ -S /run/tailctl/tailctl.sock ] && break; sleep 0.2; done
run() { # name, server args...
  local name=$1; shift
  $B/tailctl-server --addr 127.0.0.1:7000 --workers 4 --bs-unit-ns $bs --spin-unit-ns $sp "$@" >$O/srv.out 2>$O/$name.err & local P=$!
  sleep 1.5
  $B/tailctl-loadgen --addr 127.0.0.1:7000 --trace $O/t.txt --no-progress --json >$O/$name.json 2>/dev/null
  kill $P; wait $P 2>/dev/null
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); s=j.get("server_stats",{}); print("%-28s p50 %7.1f p95 %7.1f p99 %7.1f  kernel_assisted=%s kser=%s" % (sys.argv[2], j["p50_ms"], j["p95_ms"], j["p99_ms"], s.get("kernel_assisted"), s.get("kernel_serialized")))' $O/$name.json "$name"
}
for r in 1 2; do
  run sf-unreg$r --policy sf --no-kernel
  run sf-reg$r --policy sf --scx-socket /run/tailctl/tailctl.sock
  run tc-reg-never$r --policy tc --distribution bing --rps 110 --target 10s --scx-socket /run/tailctl/tailctl.sock
  run tc-unreg-never$r --policy tc --distribution bing --rps 110 --target 10s --no-kernel
done
kill -INT $S; wait $S
