#!/usr/bin/env bash
# What registration costs (issue 16, part 2), inside a sched_ext guest:
#   tools/vm/regcost-guest.sh BIN_DIR OUT_DIR [ROUNDS]
# One scx_tailctl stays loaded; in ROUNDS (default 5) rounds, alternating which
# goes first, the same service (`tailctl-ktest serve`: 4 workers, batches of 8
# requests of 8 x 500 us of CPU; REGCOST_SERVE_ARGS adds serve's flags, e.g.
# "--item-us 10000") runs 8 s registered with it and 8 s not
# (its registration socket pointed nowhere). Per run: requests per second, and
# per request the process's CPU time, context switches and runqueue wait
# (getrusage and /proc/self/task/*/schedstat: the kernel's own bookkeeping,
# the same under any scheduler); and each scx_tailctl callback's mean cost
# (kernel.bpf_stats_enabled on only during the run: run_time_ns / run_cnt).
# These figures are counts and per-event costs, which single-threaded TCG
# distorts far less than latencies; the ratios registered / unregistered are
# paired by round. Writes OUT_DIR/table.md and OUT_DIR/report.json.
# A run's mean is at the mercy of the host: a vCPU descheduled by the host in
# the middle of a BPF program adds that whole time to run_time_ns (one such
# stall per run made single figures swing 2-20x on a loaded host). So the
# callbacks are also sampled every 0.5 s from the scheduler's own program fds
# (/proc/PID/fdinfo: run_time_ns, run_cnt) and the table gives, beside the
# run's mean, the median of the 0.5 s windows' means, which such stalls in a
# minority of windows do not move.
set -uo pipefail
bin=$(readlink -f "$1"); out=$2; rounds=${3:-5}
# The threshold far above a request's CPU time, so that the kernel serializes
# nothing and what is measured is registration, not the cap: under --icount 5
# the runtime's own steps take so many emulated instructions that a request of
# 8 x 500 us charges 40-48 ms, and with serve's default 50 ms threshold the
# kernel serialized 175 requests in a run of session 30's (and every icount run
# of sessions 18-29 used that default). REGCOST_SERVE_ARGS may set another
# threshold. The table reports what was serialized.
# shellcheck disable=SC2206
serve_args=(${REGCOST_SERVE_ARGS:-})
case " ${serve_args[*]} " in *" --threshold-ms "* | *" --threshold-ms="*) ;; *) serve_args+=(--threshold-ms 5000) ;; esac
PY=$(command -v /usr/bin/python3 || command -v python3)
mkdir -p "$out"; raw=$out/raw; mkdir -p "$raw"; : >"$raw/records.jsonl"
"$bin/scx_tailctl" >"$raw/sched.log" 2>&1 &
sp=$!
for _ in $(seq 1 1500); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; kill -0 $sp 2>/dev/null || break; sleep 0.2; done
[ "$(cat /sys/kernel/sched_ext/state)" = enabled ] || { echo "scx_tailctl did not load: $(tail -n 3 "$raw/sched.log")"; exit 1; }
progs() { bpftool -j prog show 2>/dev/null; }
# sample PID STOPFILE: every 0.5 s, each BPF program fd of PID's run_time_ns and run_cnt (a JSON line).
sample() {
  "$PY" - "$1" "$2" <<'PY'
import json, os, subprocess, sys, time
pid, stop = sys.argv[1], sys.argv[2]
def snap():
    progs = {}
    d = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(d):
        try:
            kv = dict(l.split(":", 1) for l in open(f"{d}/{fd}") if ":" in l)
        except OSError:
            continue
        if "prog_id" in kv and "run_cnt" in kv:
            progs[kv["prog_id"].strip()] = [int(kv["run_time_ns"]), int(kv["run_cnt"])]
    if not progs:  # the programs' fds not held by the daemon: ask bpftool (slower)
        out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
        for p in json.loads(out or "[]"):
            if p.get("type") == "struct_ops":
                progs[str(p["id"])] = [p.get("run_time_ns", 0), p.get("run_cnt", 0)]
    return progs
while not os.path.exists(stop):
    print(json.dumps({"t": time.monotonic(), "progs": snap()}), flush=True)
    time.sleep(0.5)
print(json.dumps({"t": time.monotonic(), "progs": snap()}), flush=True)
PY
}
# Warm-up: the first run of a boot translates the code (TCG) and runs slower.
"$bin/tailctl-ktest" -w 4 serve --secs 3 "${serve_args[@]}" >/dev/null 2>&1
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then order=(registered unregistered); else order=(unregistered registered); fi
  for mode in "${order[@]}"; do
    sock=(); [ "$mode" = unregistered ] && sock=(--socket /nonexistent/tailctl.sock)
    before=$(progs)
    win=$raw/windows-$r-$mode.jsonl; rm -f "$raw/stop"
    sysctl -q -w kernel.bpf_stats_enabled=1
    sample "$sp" "$raw/stop" >"$win" &
    wp=$!
    res=$("$bin/tailctl-ktest" "${sock[@]}" -w 4 serve --secs 8 "${serve_args[@]}" $([ "$mode" = registered ] && echo --require-kernel) 2>>"$raw/errors.log")
    touch "$raw/stop"; wait $wp
    sysctl -q -w kernel.bpf_stats_enabled=0
    after=$(progs)
    "$PY" - "$r" "$mode" "$res" "$before" "$after" "$win" >>"$raw/records.jsonl" <<'PY'
import json, statistics, sys
r, mode, res = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3] or "{}")
before = {p["id"]: p for p in json.loads(sys.argv[4] or "[]")}
names = {str(p["id"]): p.get("name", "?") for p in json.loads(sys.argv[5] or "[]")}
snaps = [json.loads(l) for l in open(sys.argv[6]) if l.strip()]
# Per program, each 0.5 s window's mean cost (windows with at least 10 calls).
wins = {}
for a, b in zip(snaps, snaps[1:]):
    for pid, (t1, n1) in b["progs"].items():
        t0, n0 = a["progs"].get(pid, (t1, n1))
        if n1 - n0 >= 10 and pid in names:
            wins.setdefault(names[pid], []).append((t1 - t0) / (n1 - n0))
# Every window's mean is kept too (ns_per_call): a low quantile of them is the
# least disturbed by a loaded host (tools/vm/regcost-compare.py).
windows = {k: {"windows": len(v), "median_ns_per_call": statistics.median(v), "ns_per_call": v}
           for k, v in wins.items()}
cost = {}
for p in json.loads(sys.argv[5] or "[]"):
    if p.get("type") != "struct_ops":
        continue
    b = before.get(p["id"], {})
    n = p.get("run_cnt", 0) - b.get("run_cnt", 0)
    t = p.get("run_time_ns", 0) - b.get("run_time_ns", 0)
    if n > 0:
        cost[p.get("name", "?")] = {"calls": n, "ns_per_call": t / n}
print(json.dumps({"round": r, "mode": mode, "serve": res, "callbacks": cost, "windows": windows}))
PY
  done
  echo "[regcost] round $((r + 1))/$rounds done" >&2
done
kill -INT $sp; wait $sp
"$PY" - "$raw/records.jsonl" "$out" "$rounds" "$(uname -r)" <<'PY'
import json, os, statistics, sys
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
# Requests the kernel serialized in the registered runs: anything but 0 means the
# registered figures include the cap's queueing and token paths.
# "?": a tailctl-ktest from before session 30, which does not report it.
serialized = [rec["serve"].get("kernel_serialized", "?") for rec in recs if rec["mode"] == "registered"]
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
    wreg = [v["registered"]["windows"][cb]["median_ns_per_call"] for v in by.values() if cb in v.get("registered", {}).get("windows", {})]
    wunr = [v["unregistered"]["windows"][cb]["median_ns_per_call"] for v in by.values() if cb in v.get("unregistered", {}).get("windows", {})]
    wrat = [v["registered"]["windows"][cb]["median_ns_per_call"] / v["unregistered"]["windows"][cb]["median_ns_per_call"]
            for v in by.values() if cb in v.get("registered", {}).get("windows", {}) and cb in v.get("unregistered", {}).get("windows", {})]
    crow.append((cb, med(reg), med(unr), med(regn), med(unrn), med(wreg), med(wunr), wrat))
fmt = lambda x: f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
with open(f"{out}/table.md", "w") as f:
    f.write(f"Kernel {kver}, {os.cpu_count()} vCPUs, {rounds} rounds alternating which mode goes first; medians over rounds.\n\n")
    f.write(f"Requests the kernel serialized, per registered run: {', '.join(str(x) for x in serialized)}"
            f"{'' if all(x == 0 for x in serialized) else ' (NOT all 0: the registered figures may include the serialization cap)'}.\n\n")
    f.write("| per run | registered | unregistered | registered / unregistered (per round) |\n|---|---:|---:|---|\n")
    for m, a, b, rs in rows:
        f.write(f"| {m} | {fmt(a)} | {fmt(b)} | {fmt(statistics.median(rs)) if rs else '-'} ({', '.join(fmt(x) for x in rs)}) |\n")
    f.write("\n| scx_tailctl callback | ns per call, registered run | unregistered run | calls, registered | unregistered "
            "| 0.5 s windows' median ns per call, registered | unregistered | registered / unregistered (per round) |\n"
            "|---|---:|---:|---:|---:|---:|---:|---|\n")
    for cb, a, b, n1, n2, wa, wb, wr in crow:
        f.write(f"| {cb} | {fmt(a)} | {fmt(b)} | {fmt(n1)} | {fmt(n2)} | {fmt(wa)} | {fmt(wb)} "
                f"| {fmt(statistics.median(wr)) if wr else '-'} ({', '.join(fmt(x) for x in wr)}) |\n")
json.dump({"kernel": kver, "rounds": rounds, "records": recs}, open(f"{out}/report.json", "w"), indent=1)
print(open(f"{out}/table.md").read())
PY
