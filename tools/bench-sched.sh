#!/usr/bin/env bash
# The scheduler benchmark: scx_tailctl against the default kernel scheduler
# and scx_bpfland, for unmodified programs, in ONE guest run.
#
#   tools/bench-sched.sh [--rounds N] [--kernel SERIES] [--cpus N] [--out DIR] [--json]
#
# Design: provisions what only this benchmark needs (tools/vm/provision.sh
# --bench: rt-tests and perf at pinned versions, scx_bpfland built from its
# crate at the pinned version into the cache's tools/bin), builds scx_tailctl,
# boots one VM and runs tools/vm/bench-sched-guest.sh there: N rounds (default
# 5), each a block per scheduler in a rotating order, every block running
# hackbench, perf bench sched pipe, cyclictest beside CPU hogs,
# redis-benchmark and a stress-ng mix, then a BPF cost probe for the two
# sched_ext schedulers. tools/vm/bench_sched_summary.py then prints, per
# benchmark, each scheduler's cost factor against the default scheduler of
# the same round (median and range over rounds) and each BPF callback's mean
# cost for scx_tailctl and scx_bpfland side by side; --json prints the report
# as JSON instead. OUT (default .cache/vm/bench-sched) gets table.md and
# report.json; the raw records stay in OUT/raw.
#
# What it cannot show: the guest is emulated (qemu TCG on this host's cores),
# so absolute figures mean nothing and latency figures carry the emulator's
# vCPU scheduling (single-threaded TCG switches vCPUs every ~100 ms); only
# ratios within the run are compared, and the per-callback BPF cost relative
# to the peer scheduler is the figure TCG distorts least.
# BENCH_ICOUNT=N runs the guest's clock off its instructions (tailctl vm run
# --icount N): the BPF costs become instruction counts that the host's load
# does not move, and every timing is in emulated instructions, not time.
# BENCH_TCG_THREADS=multi (default single, immune to the attach/detach oops
# multi-threaded TCG shows now and then), BENCH_HB_GROUPS, BENCH_HB_LOOPS,
# BENCH_PIPE_LOOPS, BENCH_SECS, BENCH_REDIS_N size the run; BENCH_TAILCTL_ARGS
# are scx_tailctl's flags (e.g. "--wake-preempt-us 1000"), BENCH_TAILCTL_ALT_ARGS
# those of a fourth block, scx_tailctl_alt (two settings in one run), and
# BENCH_TAILCTL_ALT_BIN (an absolute path) another build for that block (two
# builds in one run); BENCH_ONLY (e.g. "redis") runs only the named benchmarks
# (hackbench,pipe,cyclictest,redis,stress-ng; "none": only the BPF cost probe);
# BENCH_PROBE_WARMUP=1 runs the probe's workload once unmeasured before it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
args="$*"
rounds=5 kernel=6.18 cpus=4 out=.cache/vm/bench-sched json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --kernel|-k) kernel=$2; shift 2 ;;
    --cpus|-c) cpus=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --json) json=--json; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; /^set -euo/d'; exit 0 ;;
    *) echo "bench-sched.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || { echo "bench-sched.sh: --rounds wants a positive number" >&2; exit 2; }
cache=${TAILCTL_CACHE:-$root/.cache}
target=${CARGO_TARGET_DIR:-$root/target}

echo "[bench] provisioning (pinned; scx_bpfland is built once, several minutes)" >&2
bash tools/vm/provision.sh --bench "$kernel" >&2
echo "[bench] building scx_tailctl" >&2
cargo build -q -p scx_tailctl -p tailctl-tools >&2
bpfland="$cache/tools/bin/scx_bpfland"
[ -x "$bpfland" ] || { echo "bench-sched.sh: $bpfland missing after provisioning" >&2; exit 1; }

mkdir -p "$out"
rm -rf "$out/raw"
start=$(date +%s)
echo "[bench] booting kernel $kernel, $cpus vCPUs; $rounds rounds" >&2
icount=(); [ -n "${BENCH_ICOUNT:-}" ] && icount=(--icount "$BENCH_ICOUNT")
"$target/debug/tailctl" vm run -k "$kernel" -c "$cpus" --tcg-threads "${BENCH_TCG_THREADS:-single}" "${icount[@]}" \
  --console "$out/console.log" --rwdir "$out" -- \
  env BENCH_ROUNDS="$rounds" BENCH_HB_GROUPS="${BENCH_HB_GROUPS:-}" BENCH_HB_LOOPS="${BENCH_HB_LOOPS:-}" \
      BENCH_PIPE_LOOPS="${BENCH_PIPE_LOOPS:-}" BENCH_SECS="${BENCH_SECS:-}" BENCH_REDIS_N="${BENCH_REDIS_N:-}" BENCH_ONLY="${BENCH_ONLY:-}" \
      BENCH_TAILCTL_ARGS="${BENCH_TAILCTL_ARGS:-}" BENCH_TAILCTL_ALT_ARGS="${BENCH_TAILCTL_ALT_ARGS:-}" \
      BENCH_TAILCTL_ALT_BIN="${BENCH_TAILCTL_ALT_BIN:-}" BENCH_PROBE_WARMUP="${BENCH_PROBE_WARMUP:-}" \
  bash tools/vm/bench-sched-guest.sh "$target/debug/scx_tailctl" "$bpfland" "$out" >&2
echo "[bench] guest run took $(( $(date +%s) - start )) s" >&2
# The command line as run, with the environment that shaped it.
envs=""
for v in BENCH_ONLY BENCH_ICOUNT BENCH_TCG_THREADS BENCH_HB_GROUPS BENCH_HB_LOOPS BENCH_PIPE_LOOPS BENCH_SECS BENCH_REDIS_N BENCH_TAILCTL_ARGS BENCH_TAILCTL_ALT_ARGS BENCH_TAILCTL_ALT_BIN BENCH_PROBE_WARMUP; do
  [ -n "${!v:-}" ] && envs+="$v=\"${!v}\" "
done
python3 tools/vm/bench_sched_summary.py "$out" $json --command "${envs}tools/bench-sched.sh${args:+ $args}"
