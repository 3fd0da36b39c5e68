#!/usr/bin/env python3
"""Summary of one registration A/B run (tools/vm/regab-guest.sh).

Design: every round ran the same trace through the same service four times
under scx_tailctl (steal-first and never-serializing tail-control, each
registered and unregistered, the order alternating between rounds). A
registered run is compared with its unregistered twin *of the same round*:
the ratio registered / unregistered per round cancels the emulated machine's
drift between rounds, and the median and range of those ratios over rounds
are the figure and its spread (> 1: registration costs).

Per run, besides the loadgen's percentiles, per completed request: the
service's CPU time and runqueue wait (schedstat, clock-based), its context
switches and migrations; and the daemon's CPU in cores over the run.

With --target (the run's tail-control target, regab-guest.sh's 6th argument),
a target under 10 s is expected to serialize; the miss ratio at the target is
then a figure too (the ratio of miss ratios, where the unregistered one is not 0).

Usage: regab_summary.py OUT ROUNDS [--sched-state STATE] [--target T] [--command CMD] [--json]
Writes OUT/summary.json and OUT/table.md; prints the table (or the JSON).

>>> ratio_stats([1.0, 2.0, 4.0])
{'median': 2.0, 'min': 1.0, 'max': 4.0, 'n': 3}
>>> ratio_stats([])
"""

import json
import sys
from pathlib import Path

from bench_sched_summary import spread

POLICIES = {"sf": "steal-first", "tc": "tail-control (never serializes)"}
METRICS = [
    ("p50_ms", "p50 latency"),
    ("p95_ms", "p95 latency"),
    ("p99_ms", "p99 latency"),
    ("cpu_ms_per_req", "service CPU per request"),
    ("wait_ms_per_req", "runqueue wait per request"),
    ("switches_per_req", "context switches per request"),
    ("migrations_per_req", "migrations per request"),
    ("miss_pct", "miss ratio at the target"),
]


def target_s(t):
    """A target such as 150ms or 10s, in seconds.

    >>> target_s("150ms"), target_s("10s"), target_s("2.5s")
    (0.15, 10.0, 2.5)
    """
    t = t.strip()
    return float(t[:-2]) / 1e3 if t.endswith("ms") else float(t.rstrip("s"))


# median [min, max] of per-round figures, as in the scheduler benchmark's summary.
ratio_stats = spread


def run_metrics(out, name):
    """One run's figures, or None when a file is missing or the run lost requests."""
    try:
        lg = json.loads((out / f"{name}.json").read_text())
        a = json.loads((out / f"{name}.before").read_text())
        b = json.loads((out / f"{name}.after").read_text())
    except (OSError, ValueError):
        return None
    n = lg.get("completed") or 0
    if n <= 0:
        return None
    s0, s1 = a["server"], b["server"]
    dt = max((b["t_ns"] - a["t_ns"]) / 1e9, 1e-9)
    return {
        "completed": n,
        "lost": lg.get("lost", 0) + lg.get("errors", 0),
        "p50_ms": lg["p50_ms"],
        "p95_ms": lg["p95_ms"],
        "p99_ms": lg["p99_ms"],
        "cpu_ms_per_req": (s1["run_ns"] - s0["run_ns"]) / 1e6 / n,
        "wait_ms_per_req": (s1["wait_ns"] - s0["wait_ns"]) / 1e6 / n,
        "switches_per_req": (s1["vol"] + s1["invol"] - s0["vol"] - s0["invol"]) / n,
        "migrations_per_req": (s1["migrations"] - s0["migrations"]) / n,
        "daemon_cores": (b["daemon"]["run_ns"] - a["daemon"]["run_ns"]) / 1e9 / dt,
        "kernel_assisted": (lg.get("server_stats") or {}).get("kernel_assisted"),
        "kernel_serialized": (lg.get("server_stats") or {}).get("kernel_serialized"),
        "serialized": (lg.get("server_stats") or {}).get("serialized"),
        "miss_pct": 100 * (lg.get("misses") or [{"ratio": 0}])[0]["ratio"],
    }


def summarize(out, rounds, target="10s"):
    runs = {}
    for r in range(1, rounds + 1):
        for p in POLICIES:
            for side in ("unreg", "reg"):
                m = run_metrics(out, f"{p}-{side}.{r}")
                if m:
                    runs[f"{p}-{side}.{r}"] = m
    report = {"rounds": rounds, "target": target, "runs": runs, "ratios": {}, "problems": []}
    for name, m in runs.items():
        want = not name.split(".")[0].endswith("unreg")
        if m["kernel_assisted"] != want:
            report["problems"].append(f"{name}: kernel_assisted={m['kernel_assisted']}, expected {want}")
        if m["kernel_serialized"] and target_s(target) >= 10:
            report["problems"].append(f"{name}: {m['kernel_serialized']} requests serialized (the A/B expects none)")
    for p in POLICIES:
        per = {}
        for key, _ in METRICS:
            xs = []
            for r in range(1, rounds + 1):
                u, g = runs.get(f"{p}-unreg.{r}"), runs.get(f"{p}-reg.{r}")
                if u and g and u[key] > 0:
                    xs.append(g[key] / u[key])
            per[key] = ratio_stats(xs)
        for side in ("unreg", "reg"):
            d = [runs[f"{p}-{side}.{r}"]["daemon_cores"] for r in range(1, rounds + 1) if f"{p}-{side}.{r}" in runs]
            per[f"daemon_cores_{side}"] = ratio_stats(d)
        report["ratios"][p] = per
    return report


def labels(target):
    """Column names: a tail-control target under 10 s serializes (kernel vs user space)."""
    if target_s(target) >= 10:
        return POLICIES
    return {"sf": POLICIES["sf"], "tc": f"tail-control at {target}: kernel / user-space serialization"}


def fmt(s, digits=2):
    if not s:
        return "-"
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def table(report, command):
    lines = [
        "Registered / unregistered, same service, same trace, same round, under scx_tailctl "
        f"(median [min, max] over rounds; > 1: registration costs); tail-control's target {report['target']}.",
        "",
        "| figure | " + " | ".join(labels(report["target"]).values()) + " |",
        "|---|" + "---:|" * len(POLICIES),
    ]
    for key, label in METRICS:
        lines.append(f"| {label} | " + " | ".join(fmt(report["ratios"][p][key]) for p in POLICIES) + " |")
    for side in ("unreg", "reg"):
        lines.append(
            f"| daemon CPU (cores), {side}istered runs | "
            + " | ".join(fmt(report["ratios"][p][f"daemon_cores_{side}"], 3) for p in POLICIES)
            + " |"
        )
    lines += ["", "Per run (p50 / p95 / p99 ms; service CPU and runqueue wait ms per request; switches per request):", ""]
    lines += [
        "| run | p50 | p95 | p99 | CPU/req | wait/req | switches/req | migrations/req | miss % | serialized (kernel) |",
        "|---|" + "---:|" * 9,
    ]
    for name in sorted(report["runs"], key=lambda n: (int(n.split(".")[1]), n)):
        m = report["runs"][name]
        lines.append(
            f"| {name} | {m['p50_ms']:.1f} | {m['p95_ms']:.1f} | {m['p99_ms']:.1f} | {m['cpu_ms_per_req']:.2f} | "
            f"{m['wait_ms_per_req']:.2f} | {m['switches_per_req']:.2f} | {m['migrations_per_req']:.2f} | "
            f"{m['miss_pct']:.1f} | {m['serialized']} ({m['kernel_serialized']}) |"
        )
    if report["problems"]:
        lines += ["", "Problems: " + "; ".join(report["problems"])]
    if command:
        lines += ["", f"Command: `{command}`"]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) < 3:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    out, rounds = Path(argv[1]), int(argv[2])
    state = argv[argv.index("--sched-state") + 1] if "--sched-state" in argv else None
    command = argv[argv.index("--command") + 1] if "--command" in argv else None
    target = argv[argv.index("--target") + 1] if "--target" in argv else "10s"
    report = summarize(out, rounds, target)
    report["sched_state_after"] = state
    (out / "summary.json").write_text(json.dumps(report, indent=1))
    t = table(report, command)
    (out / "table.md").write_text(t)
    print(json.dumps(report, indent=1) if "--json" in argv else t)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
