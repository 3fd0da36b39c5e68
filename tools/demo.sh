#!/usr/bin/env bash
# The main job: build tailctl, bring up a sched_ext kernel (a VM unless the host
# has sched_ext), and show kernel-assisted tail-control at work: a tailctl-rt
# service registered with scx_tailctl beside an unmodified CPU-bound neighbour,
# driven over TCP by the open-loop load generator, against the same service
# without kernel help. Installs what it needs first (idempotent, pinned, cached).
#   tools/demo.sh [KERNEL_SERIES]     (default 6.18)
# Results (table.md, report.json, plot.svg, logs) go to .cache/vm/demo/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
k=${1:-6.18}
bash tools/vm/provision.sh "$k"
echo "[demo] building (release)"
cargo build -q --release -p scx_tailctl -p tailctl-tools -p tailctl-workloads
out=.cache/vm/demo
rm -rf "$out"; mkdir -p "$out"
start=$(date +%s)
# Multi-threaded TCG: under single-threaded TCG qemu round-robins busy vCPUs
# every 100 ms, which swamps request latencies of a few ms (seen: p99 in
# seconds at 7% load). Multi-threaded TCG oopses now and then while sched_ext
# patches kernel text on attach/detach (see README, "Running things"): a
# guest that dies is booted once more.
for attempt in 1 2; do
  rm -rf "$out/experiment"
  if target/release/tailctl vm run -k "$k" -c "${DEMO_CPUS:-4}" --tcg-threads "${DEMO_TCG_THREADS:-multi}" \
       --console "$out/console.log" --rwdir "$out" -- env DEMO_LOAD="${DEMO_LOAD:-}" DEMO_RPS="${DEMO_RPS:-}" \
       DEMO_REQUESTS="${DEMO_REQUESTS:-}" DEMO_PERCENTILE="${DEMO_PERCENTILE:-}" \
       bash tools/vm/demo-guest.sh target/release "$out"; then
    break
  fi
  [ "$attempt" = 2 ] && exit 1
  echo "[demo] the guest failed (console: $out/console.log); booting again"
done
echo "[demo] $(( $(date +%s) - start )) s after the build"
