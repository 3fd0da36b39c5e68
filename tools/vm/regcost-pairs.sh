#!/usr/bin/env bash
# Several builds' registration cost in one guest, one after another, so that
# builds compared share the guest and the host's load of that half-hour:
#   tools/vm/regcost-pairs.sh OUT_DIR ROUNDS BIN_DIR...
# Each BIN_DIR (a copy of a debug build: scx_tailctl, tailctl-ktest) runs
# tools/vm/regcost-guest.sh BIN_DIR OUT_DIR/N-LABEL ROUNDS in the order given
# (LABEL: the directory's name; give builds alternately, e.g. base new base
# new); tools/vm/regcost-compare.py OUT_DIR/*/ pools the runs by label. A
# LABEL starting with "diag" also gets `scx_tailctl --monitor 2` logged beside
# it (OUT_DIR/N-LABEL.monitor), for a scratch build that counts something in
# its stats. A file `serve-args` in a BIN_DIR gives that label's workload
# (REGCOST_SERVE_ARGS of regcost-guest.sh), so one build can run under two
# workloads as two labels (two copies of the directory).
set -uo pipefail
here=$(dirname "$(readlink -f "$0")")
out=$1; rounds=$2; shift 2
mkdir -p "$out"
i=0
for dir in "$@"; do
  i=$((i + 1))
  bin=$(readlink -f "$dir"); v=$(basename "$bin")
  mp=
  if [[ $v == diag* ]]; then
    ( sleep 2; for _ in $(seq 1 400); do "$bin/scx_tailctl" --monitor 2 2>/dev/null; sleep 1; done ) >"$out/$i-$v.monitor" 2>&1 &
    mp=$!
  fi
  echo "[pairs] $i $v start $(date -u +%T)"
  REGCOST_SERVE_ARGS=$(cat "$bin/serve-args" 2>/dev/null) \
    "$here/regcost-guest.sh" "$bin" "$out/$i-$v" "$rounds" >"$out/$i-$v.log" 2>&1
  echo "[pairs] $i $v end $(date -u +%T)"
  # The monitor loop, then the monitor it started (by their pids).
  [ -n "$mp" ] && { kill -STOP "$mp"; pkill -P "$mp"; kill "$mp"; kill -CONT "$mp"; } 2>/dev/null
  grep -E 'tailctl_(tick|running|stopping) ' "$out/$i-$v/table.md"
done
