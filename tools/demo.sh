#!/usr/bin/env bash
# The main job: build tailctl, bring up a sched_ext kernel (a VM unless the host
# has sched_ext), load scx_tailctl, run a demo service with load under it and
# print what happened. Installs what it needs first (idempotent, cached).
#   tools/demo.sh [KERNEL_SERIES]     (default 6.18)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
k=${1:-6.18}
bash tools/vm/provision.sh "$k"
echo "[demo] building (release)"
cargo build -q --release -p scx_tailctl -p tailctl-tools
out=.cache/vm/demo
rm -rf "$out"; mkdir -p "$out"
target/release/tailctl vm run -k "$k" -c 4 --rwdir "$out" -- bash tools/vm/demo-guest.sh target/release "$out"
