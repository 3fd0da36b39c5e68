#!/bin/bash
# usage: matrix2.sh OUT BIN...   heaviest verifier walk per configuration and build
O=$1; shift
cg=/sys/fs/cgroup/mx; mkdir -p $cg
for args in "--llc-groups 1" "--llc-groups 1 --allot equi" "--llc-groups 2 --allot equi" "--llc-groups 2 --allot drep --request-shares" "--llc-groups 1 --allot deq --request-shares --job $cg --priority-cgroup $cg=5"; do
for B in "$@"; do
  t0=$(date +%s.%N)
  timeout 300 $B/scx_tailctl $args > $O/m.log 2>&1 &
  p=$!
  for i in $(seq 1 1200); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; kill -0 $p 2>/dev/null || break; sleep 0.2; done
  st=$(cat /sys/kernel/sched_ext/state); t1=$(date +%s.%N)
  kill -INT $p 2>/dev/null; wait $p
  n=$(grep -oE 'heaviest program [a-z_]+ [0-9]+' $O/m.log | grep -oE '[0-9]+$')
  [ -n "$n" ] || n="E2BIG($(grep -oE 'processed [0-9]+ insns' $O/m.log | tail -1))"
  printf '| %s | %s | %s | %s | %.1f |\n' "$(uname -r | cut -d+ -f1)" "$args" "$(basename $B)" "$n" "$(echo "$t1 - $t0" | bc)"
done
done
