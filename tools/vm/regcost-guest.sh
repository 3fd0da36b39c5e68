#!/usr/bin/env bash
# What registration costs (issue 16, part 2), inside a sched_ext guest:
#   tools/vm/regcost-guest.sh BIN_DIR OUT_DIR [ROUNDS]
# One scx_tailctl stays loaded; in ROUNDS (default 5) rounds, alternating which
# goes first, the same service (`tailctl-ktest serve`: 4 workers, batches of 8
# requests of 8 x 500 us of CPU) runs 8 s registered with it and 8 s not
# (its registration socket pointed nowhere). Per run: requests per second, and
# per request the process's CPU time, context switches and runqueue wait
# (getrusage and /proc/self/task/*/schedstat: the kernel's own bookkeeping,
# the same under any scheduler); and each scx_tailctl callback's mean cost
# (kernel.bpf_stats_enabled on only during the run: run_time_ns / run_cnt).
# These figures are counts and per-event costs, which single-threaded TCG
# distorts far less than latencies; the ratios registered / unregistered are
# paired by round. Writes OUT_DIR/table.md and OUT_DIR/report.json.
set -uo pipefail
bin=$(readlink -f "$1"); out=$2; rounds=${3:-5}
PY=$(command -v /usr/bin/python3 || command -v python3)
mkdir -p "$out"; raw=$out/raw; mkdir -p "$raw"; : >"$raw/records.jsonl"
"$bin/scx_tailctl" >"$raw/sched.log" 2>&1 &
sp=$!
for _ in $(seq 1 1500); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; kill -0 $sp 2>/dev/null || break; sleep 0.2; done
[ "$(cat /sys/kernel/sched_ext/state)" = enabled ] || { echo "scx_tailctl did not load: $(tail -n 3 "$raw/sched.log")"; exit 1; }
progs() { bpftool -j prog show 2>/dev/null; }
# Warm-up: the first run of a boot translates the code (TCG) and runs slower.
"$bin/tailctl-ktest" -w 4 serve --secs 3 >/dev/null 2>&1
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then order=(registered unregistered); else order=(unregistered registered); fi
  for mode in "${order[@]}"; do
    sock=(); [ "$mode" = unregistered ] && sock=(--socket /nonexistent/tailctl.sock)
    before=$(progs)
    sysctl -q -w kernel.bpf_stats_enabled=1
    res=$("$bin/tailctl-ktest" "${sock[@]}" -w 4 serve --secs 8 $([ "$mode" = registered ] && echo --require-kernel) 2>>"$raw/errors.log")
    sysctl -q -w kernel.bpf_stats_enabled=0
    after=$(progs)
    "$PY" - "$r" "$mode" "$res" "$before" "$after" >>"$raw/records.jsonl" <<'PY'
import json, sys
r, mode, res = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3] or "{}")
before = {p["id"]: p for p in json.loads(sys.argv[4] or "[]")}
cost = {}
for p in json.loads(sys.argv[5] or "[]"):
    if p.get("type") != "struct_ops":
        continue
    b = before.get(p["id"], {})
    n = p.get("run_cnt", 0) - b.get("run_cnt", 0)
    t = p.get("run_time_ns", 0) - b.get("run_time_ns", 0)
    if n > 0:
        cost[p.get("name", "?")] = {"calls": n, "ns_per_call": t / n}
print(json.dumps({"round": r, "mode": mode, "serve": res, "callbacks": cost}))
PY
  done
  echo "[regcost] round $((r + 1))/$rounds done" >&2
done
kill -INT $sp; wait $sp
"$PY" - "$raw/records.jsonl" "$out" "$rounds" "$(uname -r)" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out, rounds, kver = sys.argv[2], int(sys.argv[3]), sys.argv[4]
def per_req(rec):
    s, n = rec["serve"].get("sched", {}), max(rec["serve"].get("requests", 0), 1)
    runs = max(s.get("runs", 0), 1)
    return {
        "requests/s": rec["serve"].get("rps", 0.0),
        "CPU ms / request": s.get("cpu_ms", 0) / n,
        "context switches / request": (s.get("voluntary_switches", 0) + s.get("involuntary_switches", 0)) / n,
        "involuntary switches / request": s.get("involuntary_switches", 0) / n,
        "runqueue wait us / run": s.get("run_delay_ms", 0) * 1e3 / runs,
    }
by = {}
for rec in recs:
    by.setdefault(rec["round"], {})[rec["mode"]] = rec
metrics = list(per_req(recs[0]).keys()) if recs else []
rows = []
for m in metrics:
    reg = [per_req(v["registered"])[m] for v in by.values() if "registered" in v]
    unr = [per_req(v["unregistered"])[m] for v in by.values() if "unregistered" in v]
    ratios = [per_req(v["registered"])[m] / per_req(v["unregistered"])[m]
              for v in by.values() if "registered" in v and "unregistered" in v and per_req(v["unregistered"])[m]]
    rows.append((m, statistics.median(reg) if reg else 0, statistics.median(unr) if unr else 0, ratios))
cbs = sorted({k for rec in recs for k in rec["callbacks"]})
crow = []
for cb in cbs:
    reg = [v["registered"]["callbacks"][cb]["ns_per_call"] for v in by.values() if cb in v.get("registered", {}).get("callbacks", {})]
    unr = [v["unregistered"]["callbacks"][cb]["ns_per_call"] for v in by.values() if cb in v.get("unregistered", {}).get("callbacks", {})]
    regn = [v["registered"]["callbacks"][cb]["calls"] for v in by.values() if cb in v.get("registered", {}).get("callbacks", {})]
    unrn = [v["unregistered"]["callbacks"][cb]["calls"] for v in by.values() if cb in v.get("unregistered", {}).get("callbacks", {})]
    med = lambda x: statistics.median(x) if x else 0
    crow.append((cb, med(reg), med(unr), med(regn), med(unrn)))
fmt = lambda x: f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
with open(f"{out}/table.md", "w") as f:
    f.write(f"Kernel {kver}, 4 vCPUs, {rounds} rounds alternating which mode goes first; medians over rounds.\n\n")
    f.write("| per run | registered | unregistered | registered / unregistered (per round) |\n|---|---:|---:|---|\n")
    for m, a, b, rs in rows:
        f.write(f"| {m} | {fmt(a)} | {fmt(b)} | {fmt(statistics.median(rs)) if rs else '-'} ({', '.join(fmt(x) for x in rs)}) |\n")
    f.write("\n| scx_tailctl callback | ns per call, registered run | unregistered run | calls, registered | unregistered |\n|---|---:|---:|---:|---:|\n")
    for cb, a, b, n1, n2 in crow:
        f.write(f"| {cb} | {fmt(a)} | {fmt(b)} | {fmt(n1)} | {fmt(n2)} |\n")
json.dump({"kernel": kver, "rounds": rounds, "records": recs}, open(f"{out}/report.json", "w"), indent=1)
print(open(f"{out}/table.md").read())
PY
