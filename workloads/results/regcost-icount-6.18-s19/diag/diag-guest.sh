#!/usr/bin/env bash
# diag: scx_tailctl with tick timestamps; run ktest registered; dump the .bss (before/after).
bin=$1; out=$2; mkdir -p $out
"$bin/scx_tailctl" >$out/sched.log 2>&1 &
for _ in $(seq 1 600); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; sleep 0.2; done
cat /sys/kernel/sched_ext/state
"$bin/tailctl-ktest" -w 4 serve --secs 3 >/dev/null 2>&1
id=$(bpftool -j map show | python3 -c 'import json,sys; print([m["id"] for m in json.load(sys.stdin) if m.get("name","").endswith(".bss")][0])')
for r in 1 2; do
bpftool -j map dump id $id > $out/bss-$r-before.json
"$bin/tailctl-ktest" -w 4 serve --secs 8 --require-kernel > $out/ktest-$r.json 2>>$out/err.log
bpftool -j map dump id $id > $out/bss-$r-after.json
done
kill %1; wait
