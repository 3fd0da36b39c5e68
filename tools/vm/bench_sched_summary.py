#!/usr/bin/env python3
"""Summary of one scheduler-benchmark run (tools/bench-sched.sh).

Design: reads the JSON lines tools/vm/bench-sched-guest.sh wrote
(OUT/raw/records.jsonl) and compares each sched_ext scheduler with the default
kernel scheduler *of the same round*: every round ran the three schedulers
back to back, so a per-round ratio cancels the emulated machine's drift
between rounds, and the spread of those ratios over rounds is the figure's
uncertainty. A ratio is a cost factor: how many times worse than the default
(value / default for times and latencies, default / value for throughputs),
so > 1 is worse and 1.10 is "10% worse" whatever the metric. The stress-ng
mix is the geometric mean of its stressors' cost factors. BPF cost: per
callback, total run_time_ns over total run_cnt of the cost probes of all
rounds (and the spread of the per-round means).

Usage: bench_sched_summary.py OUT_DIR [--json] [--command CMD]
Writes OUT_DIR/table.md and OUT_DIR/report.json; prints the table (or the
report as JSON with --json).
"""

import json
import math
import statistics
import sys
from pathlib import Path

SCHEDS = ["scx_tailctl", "scx_bpfland"]
# scx_tailctl with other flags (BENCH_TAILCTL_ALT_ARGS), when the run has it.
ALT = "scx_tailctl_alt"
# (bench, metric, lower is better, label)
METRICS = [
    ("hackbench", "seconds", True, "hackbench time"),
    ("pipe", "us_per_op", True, "perf bench sched pipe, us/op (wake-up round trip)"),
    ("cyclictest", "avg_us", True, "cyclictest mean latency beside CPU hogs"),
    ("cyclictest", "max_us", True, "cyclictest max latency beside CPU hogs"),
    ("cyclictest", "rq_wait_us", True, "cyclictest threads' runqueue wait per run, us (schedstat)"),
    ("cyclictest", "idle_pct", False, "guest CPU idle beside the hogs during cyclictest, % (/proc/stat)"),
    ("redis", "rps", False, "redis-benchmark SET+GET throughput"),
    ("redis", "p99_ms", True, "redis-benchmark p99 latency"),
    ("redis", "server_cpu_us_per_req", True, "redis-server CPU per request, us"),
    ("redis", "server_wait_us_per_req", True, "redis-server runqueue wait per request, us"),
    ("redis", "server_switches_per_req", True, "redis-server context switches per request"),
    ("redis", "server_migrations_per_req", True, "redis-server migrations per request"),
    ("stress-ng-cpu", "bogo_ops_per_s", False, "stress-ng cpu"),
    ("stress-ng-switch", "bogo_ops_per_s", False, "stress-ng switch"),
    ("stress-ng-pipe", "bogo_ops_per_s", False, "stress-ng pipe"),
    ("stress-ng-futex", "bogo_ops_per_s", False, "stress-ng futex"),
]
MIX = [m for m in METRICS if m[0].startswith("stress-ng-")]


def cost(value, default, lower_better):
    if value is None or default is None or value <= 0 or default <= 0:
        return None
    return value / default if lower_better else default / value


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def callback(name):
    """The sched_ext callback a program implements: its name without the scheduler's prefix."""
    for prefix in ("tailctl_", "bpfland_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def summarise(out):
    records = [json.loads(line) for line in (out / "raw" / "records.jsonl").read_text().splitlines() if line.strip()]
    config_path = out / "raw" / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    rounds = sorted({r["round"] for r in records})
    scheds = SCHEDS + ([ALT] if any(r.get("sched") == ALT for r in records) else [])
    values = {}  # (round, sched, bench, metric) -> value
    for r in records:
        if r.get("bench") != "bpf":
            values[(r["round"], r["sched"], r["bench"], r["metric"])] = r["value"]

    benchmarks = []
    for bench, metric, lower, label in METRICS:
        row = {"bench": bench, "metric": metric, "lower_is_better": lower, "label": label,
               "default": spread([values.get((rd, "default", bench, metric)) for rd in rounds])}
        for s in scheds:
            row[s] = spread([values.get((rd, s, bench, metric)) for rd in rounds])
            row[s + "_cost"] = spread([cost(values.get((rd, s, bench, metric)),
                                            values.get((rd, "default", bench, metric)), lower)
                                       for rd in rounds])
        benchmarks.append(row)
    mix = {"bench": "stress-ng mix", "metric": "geomean cost", "label": "stress-ng mix (geometric mean of the four)"}
    for s in scheds:
        per_round = []
        for rd in rounds:
            cs = [cost(values.get((rd, s, b, m)), values.get((rd, "default", b, m)), lo) for b, m, lo, _ in MIX]
            per_round.append(math.exp(sum(math.log(c) for c in cs) / len(cs)) if all(cs) else None)
        mix[s + "_cost"] = spread(per_round)
    benchmarks.append(mix)

    # BPF programs: per scheduler and callback, totals over the rounds' probes.
    bpf = {}
    for r in records:
        if r.get("bench") != "bpf":
            continue
        cb = callback(r["prog"])
        e = bpf.setdefault(cb, {}).setdefault(r["sched"], {"run_cnt": 0, "run_time_ns": 0, "per_round": [],
                                                           "by_round": {}})
        e["run_cnt"] += r["run_cnt"]
        e["run_time_ns"] += r["run_time_ns"]
        if r["run_cnt"]:
            e["per_round"].append(r["run_time_ns"] / r["run_cnt"])
            e["by_round"][r.get("round")] = r["run_time_ns"] / r["run_cnt"]
    callbacks = []
    for cb in sorted(bpf, key=lambda c: -sum(v["run_cnt"] for v in bpf[c].values())):
        row = {"callback": cb}
        for s in scheds:
            e = bpf[cb].get(s)
            if e:
                row[s] = {"run_cnt": e["run_cnt"], "run_time_ns": e["run_time_ns"],
                          "mean_ns": e["run_time_ns"] / e["run_cnt"] if e["run_cnt"] else None,
                          "per_round_mean_ns": spread(e["per_round"])}
        # Paired by round: both schedulers' probes ran minutes apart in the
        # same boot, so a host that slows the guest for a while slows both
        # sides of a pair, while the pooled means above carry it whole.
        # The alternate block (other flags or another build) against each.
        for key, num, den in (("paired_ratio", SCHEDS[0], SCHEDS[1]), ("alt_paired_ratio", ALT, SCHEDS[1]),
                              ("alt_over_tailctl", ALT, SCHEDS[0])):
            n, d = bpf[cb].get(num), bpf[cb].get(den)
            if n and d:
                row[key] = spread([n["by_round"][k] / d["by_round"][k] for k in n["by_round"] if d["by_round"].get(k)])
        callbacks.append(row)
    return {"config": config, "rounds": len(rounds), "scheds": scheds, "benchmarks": benchmarks,
            "bpf_callbacks": callbacks}


def fmt_cost(sp):
    if not sp:
        return "n/a"
    return f"{sp['median']:.2f} [{sp['min']:.2f}, {sp['max']:.2f}]"


def fmt_val(sp):
    if not sp:
        return "n/a"
    v = sp["median"]
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def table(report, command):
    c = report["config"]
    alt = ALT in report.get("scheds", [])
    alt_desc = " ".join(x for x in (c.get("tailctl_alt_bin"), c.get("tailctl_alt_args")) if x) or "?"
    alt_head = f" scx_tailctl `{alt_desc}` cost |" if alt else ""
    lines = []
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += [f"Guest: kernel {c.get('kernel', '?')}, {c.get('cpus', '?')} vCPUs (qemu TCG), "
              f"{report['rounds']} rounds, each running the default scheduler, scx_tailctl"
              + (f" `{c['tailctl_args']}`" if c.get("tailctl_args") else "")
              + (f", scx_tailctl `{alt_desc}` (scx_tailctl_alt)" if alt else "") + " and scx_bpfland "
              f"in a rotating order; sizes: hackbench {c.get('hackbench', '?')}, pipe {c.get('pipe_loops', '?')} "
              f"round trips, stress-ng {c.get('secs', '?')} s, cyclictest SECS + 3 s (SECS = {c.get('secs', '?')}; "
              f"runs before session 18: SECS), redis {c.get('redis_n', '?')} requests"
              + (f"; only {c['only']}." if c.get("only") else ".")]
    rows = []
    for b in report["benchmarks"]:
        # A benchmark this run left out (BENCH_ONLY) has no row.
        if not any(b.get(k) for k in ("default", "scx_tailctl_cost", "scx_bpfland_cost")):
            continue
        extra = f" {fmt_cost(b.get(ALT + '_cost'))} |" if alt else ""
        if "default" in b:
            rows.append(f"| {b['label']} ({b['metric']}) | {fmt_val(b['default'])} | {fmt_val(b['scx_tailctl'])} | "
                        f"{fmt_val(b['scx_bpfland'])} | {fmt_cost(b['scx_tailctl_cost'])} | {fmt_cost(b['scx_bpfland_cost'])} |"
                        + extra)
        else:
            rows.append(f"| {b['label']} | | | | {fmt_cost(b['scx_tailctl_cost'])} | {fmt_cost(b['scx_bpfland_cost'])} |"
                        + extra)
    # BENCH_ONLY=none (the cost probe alone): no benchmark table.
    if rows:
        lines += ["",
                  "Cost factor against the default scheduler of the same round (> 1: worse; time or latency over "
                  "the default's, or the default's throughput over this one's): median [min, max] over rounds.",
                  "",
                  "| benchmark | default (median) | scx_tailctl | scx_bpfland | scx_tailctl cost | scx_bpfland cost |"
                  + alt_head,
                  "|---|---:|---:|---:|---:|---:|" + "---:|" * bool(alt_head)] + rows
    lines += ["",
              "BPF cost per callback (kernel.bpf_stats_enabled during a fixed hackbench + pipe probe after each "
              "block" + (", after its hackbench once unmeasured" if c.get("probe_warmup") == "1" else "") + "): mean ns per call over all rounds [min, max of the per-round means], and calls; "
              "scx_tailctl / scx_bpfland: the ratio of the two per-round means, paired by round, median [min, max].",
              "",
              "| callback | scx_tailctl ns | scx_tailctl calls | scx_bpfland ns | scx_bpfland calls | scx_tailctl / scx_bpfland |",
              "|---|---:|---:|---:|---:|---:|"]
    if alt:
        lines[-2] += (" scx_tailctl_alt ns | scx_tailctl_alt calls | scx_tailctl_alt / scx_bpfland |"
                      " scx_tailctl_alt / scx_tailctl |")
        lines[-1] += "---:|---:|---:|---:|"
    for row in report["bpf_callbacks"]:
        cells = []
        for s in SCHEDS + ([ALT] if alt else []):
            e = row.get(s)
            if e and e["mean_ns"] is not None:
                pr = e["per_round_mean_ns"]
                cells += [f"{e['mean_ns']:.0f} [{pr['min']:.0f}, {pr['max']:.0f}]", str(e["run_cnt"])]
            else:
                cells += ["–", "0" if e else "–"]
            if s == SCHEDS[1]:
                cells.append(fmt_cost(row["paired_ratio"]) if row.get("paired_ratio") else "–")
        if alt:
            cells += [fmt_cost(row[k]) if row.get(k) else "–" for k in ("alt_paired_ratio", "alt_over_tailctl")]
        lines.append(f"| {row['callback']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    args = argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    out = Path(args[0])
    as_json = "--json" in args
    command = args[args.index("--command") + 1] if "--command" in args else ""
    report = summarise(out)
    report["command"] = command
    text = table(report, command)
    (out / "table.md").write_text(text)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if as_json else text, end="" if not as_json else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
