#!/usr/bin/env bash
# Decision-to-enforcement latency of core reallocations (issue 12) with the
# guest's vCPUs emulated one at a time and in parallel, from the host:
#   tools/vm/jobs-tcg-pairs.sh OUT PAIRS RELEASE_DIR
# Boots a 4-vCPU 6.18 guest PAIRS times per TCG mode, alternating single and
# multi (one host thread per vCPU), each running tools/vm/guest-jobs.sh
# (POLICIES, default deq,asteal; ROUNDS, default 1) into OUT/MODE-N/jobs;
# then tools/vm/jobs-tcg-table.py OUT summarises. Why: under single-threaded
# TCG a kick (the IPI that preempts a thread over its job's allotment)
# reaches its vCPU only when the emulator's round robin gets to it, which no
# scheduler can shorten; with multi-threaded TCG every vCPU runs on its own
# host thread. Multi-threaded TCG has a code-patching race (an int3 oops
# while sched_ext flips its static keys at load): a boot that dies of it is
# logged (OUT/MODE-N.tryK.console) and tried once more. Needs target/debug/tailctl
# (cargo build -p tailctl-tools) and RELEASE_DIR's release binaries.
set -uo pipefail
out=$1; pairs=$2; rel=$(readlink -f "$3")
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
for i in $(seq 1 "$pairs"); do
  for mode in single multi; do
    for try in 1 2; do
      d=$out/$mode-$i; rm -rf "$d"; mkdir -p "$d"
      echo "[jobs-tcg-pairs] pair $i/$pairs: $mode (try $try)" >&2
      # One console per try: a retry must not overwrite the oops it retries.
      con=$d.try$try.console
      "$here/target/debug/tailctl" vm run -k 6.18 -c 4 --tcg-threads "$mode" --console "$con" --rwdir "$d" -- \
        env POLICIES="${POLICIES:-deq,asteal}" ROUNDS="${ROUNDS:-1}" "$here/tools/vm/guest-jobs.sh" "$rel" "$d/jobs" </dev/null >"$d.log" 2>&1
      rc=$?
      echo "$mode-$i try $try rc $rc oops $(grep -ac 'Oops: int3' "$con")" >>"$out/boots.txt"
      [ $rc = 0 ] && break
      grep -aq 'Oops: int3' "$con" || break
    done
  done
done
