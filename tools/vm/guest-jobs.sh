#!/usr/bin/env bash
# The job-arrival experiment (issue 12) inside a sched_ext guest:
#   tailctl vm run -k 6.18 -c 4 --tcg-threads single --rwdir RWDIR -- \
#     tools/vm/guest-jobs.sh RELEASE_DIR RWDIR/jobs
# RELEASE_DIR holds release builds of tailctl-jobs and scx_tailctl
# (`cargo build --release -p tailctl-workloads -p scx_tailctl`). Runs every
# policy (default kernel scheduler, scx_tailctl without allotment, equi, deq,
# asteal, drep), two rounds, and leaves table.md, report.json, plot.svg,
# command.txt and each scheduler's log (its counters since load, allotment
# latency histogram included, are the log's last lines) in the output dir.
# JOBS, ROUNDS, SCALE and LOAD override the defaults (12, 2, 0.3, 0.7);
# POLICIES the list; TRACE=1 keeps each run's controller trace
# (allot-trace-POLICY-ROUND.csv).
set -uo pipefail
rel=$(readlink -f "$1"); out=$2
rm -rf "$out"; mkdir -p "$out"
{ uname -r; nproc; } >"$out/guest.txt"
"$rel/tailctl-jobs" run --policies "${POLICIES:-default,off,equi,deq,asteal,drep}" $([ "${TRACE:-0}" = 1 ] && echo --allot-trace) --jobs "${JOBS:-12}" --rounds "${ROUNDS:-2}" \
  --scale "${SCALE:-0.3}" --load "${LOAD:-0.7}" --scx-tailctl "$rel/scx_tailctl" --out "$out" --no-progress \
  >"$out/stdout.txt" 2>"$out/stderr.txt"
rc=$?
echo "tailctl-jobs exit $rc" >>"$out/stdout.txt"
exit $rc
