#!/usr/bin/env python3
"""Summarise tools/vm/jobs-tcg-pairs.sh: reallocation latency and response per TCG mode.

    tools/vm/jobs-tcg-table.py OUT > OUT/table.md

Reads OUT/{single,multi}-N/jobs: each scheduler log's `allot:` line (the kernel's
decision-to-enforcement histogram, jobs-realloc-table.py's parser) and report.json
(mean response per policy). Pairs are the boots with the same N.
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
realloc = __import__("jobs-realloc-table")


def boot(d):
    """{policy: {"n", "mean", "hist", "response"}} of one boot's jobs dir, or None."""
    res = {}
    for path in glob.glob(os.path.join(d, "scx_tailctl-*-*.log")):
        pr, r = realloc.policy_round(path), realloc.parse(path)
        if not pr or not r:
            continue
        e = res.setdefault(pr[0], {"n": 0, "sum": 0.0, "hist": [0] * len(realloc.BUCKETS), "max": 0.0})
        e["n"] += r["n"]
        e["sum"] += r["mean"] * r["n"]
        e["max"] = max(e["max"], r["max"])
        if len(r["hist"]) == len(e["hist"]):
            e["hist"] = [a + b for a, b in zip(e["hist"], r["hist"])]
    try:
        rep = json.load(open(os.path.join(d, "report.json")))
    except (OSError, ValueError):
        rep = {}
    for r in rep.get("runs", []):
        e = res.setdefault(r.get("policy"), {"n": 0, "sum": 0.0, "hist": [0] * len(realloc.BUCKETS), "max": 0.0})
        # A run without a response (it failed) is left out, not counted as 0 s.
        if r.get("mean_response_s") is not None:
            e.setdefault("responses", []).append(r["mean_response_s"])
    for e in res.values():
        if e.get("responses"):
            e["response"] = round(sum(e["responses"]) / len(e["responses"]), 3)
    return res or None


def within(hist):
    """Share of reallocations enforced within 100 us (the first four buckets).

    >>> within([1, 1, 1, 1, 0, 0, 0, 4])
    0.5
    """
    n = sum(hist)
    return sum(hist[:4]) / n if n else None


def main():
    out = sys.argv[1]
    runs = {}
    for d in sorted(glob.glob(os.path.join(out, "*-*", "jobs"))):
        m = re.match(r"(single|multi)-(\d+)$", os.path.basename(os.path.dirname(d)))
        b = boot(d) if m else None
        if b:
            runs[(m.group(1), int(m.group(2)))] = b
    print("Decision-to-enforcement latency of core reallocations, 4-vCPU 6.18 guest, "
          "single-threaded TCG (vCPUs emulated in turn) against multi-threaded (one host thread per "
          "vCPU), boots alternating; per boot and policy: reallocations, mean and max latency "
          "(us), share within 100 us, >= 10 ms, mean job response (s; job sizes are calibrated to "
          "each boot's speed, so compare responses within a boot, not across). Made by "
          "`tools/vm/jobs-tcg-table.py`.\n")
    print("| boot | policy | reallocations | mean (us) | max (us) | within 100 us | >= 10 ms | mean response (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    tot = {}
    for (mode, i), b in sorted(runs.items(), key=lambda x: (x[0][1], x[0][0] != "single")):
        for pol, e in sorted(b.items()):
            w = within(e["hist"])
            if not e["n"] or w is None:
                print(f"| {mode}-{i} | {pol} | - | - | - | - | - | {e.get('response') or '-'} |")
                continue
            print(f"| {mode}-{i} | {pol} | {e['n']} | {e['sum'] / e['n']:.1f} | {e['max']:.0f} | "
                  f"{100 * w:.0f}% | {e['hist'][-1]} | {e.get('response') or '-'} |")
            t = tot.setdefault(mode, {"n": 0, "sum": 0.0, "hist": [0] * len(realloc.BUCKETS)})
            t["n"] += e["n"]
            t["sum"] += e["sum"]
            t["hist"] = [a + b for a, b in zip(t["hist"], e["hist"])]
    print()
    for mode, t in sorted(tot.items(), reverse=True):
        if t["n"] and within(t["hist"]) is not None:
            print(f"- {mode}: {t['n']} reallocations, mean {t['sum'] / t['n']:.1f} us, "
                  f"{100 * within(t['hist']):.0f}% within 100 us, {t['hist'][-1]} at 10 ms or more "
                  f"(buckets {dict(zip(realloc.BUCKETS, t['hist']))})")


if __name__ == "__main__":
    main()
