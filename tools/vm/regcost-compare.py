#!/usr/bin/env python3
"""Compare builds measured by tools/vm/regcost-guest.sh (e.g. through regcost-pairs.sh).

    tools/vm/regcost-compare.py [--quantile Q] DIR...

Each DIR holds one run's report.json; its label is the directory name without
a leading "N-" (regcost-pairs.sh names them N-LABEL), so runs of the same build
pool together. Per callback (tick, running, stopping) and label it prints the
median over all rounds of the per-round ratio registered / unregistered, taken
two ways from the run's 0.5 s windows: their median (what regcost-guest.sh's
table shows) and their quantile Q (default 0.25). On a loaded host a vCPU
descheduled inside a BPF program inflates whole windows; a low quantile is the
least disturbed estimate of a path's cost, the median the more usual one.
Nothing here asserts a timing: it only tabulates what the runs recorded.
"""
import json
import os
import statistics
import sys

CALLBACKS = ["tailctl_tick", "tailctl_running", "tailctl_stopping"]


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    i = q * (len(xs) - 1)
    lo, hi = int(i), min(int(i) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def stat(win, how, q):
    if how == "median" or "ns_per_call" not in win:
        return win["median_ns_per_call"] if how == "median" else None
    return quantile(win["ns_per_call"], q)


def main():
    args, q = sys.argv[1:], 0.25
    if len(args) >= 2 and args[0] == "--quantile":
        q, args = float(args[1]), args[2:]
    pooled, order = {}, []
    for d in args:
        label = os.path.basename(os.path.normpath(d))
        head, _, tail = label.partition("-")
        if head.isdigit() and tail:
            label = tail
        if label not in pooled:
            pooled[label] = {"runs": 0, "rounds": 0, "rows": {}}
            order.append(label)
        rep = json.load(open(os.path.join(d, "report.json")))
        by = {}
        for rec in rep["records"]:
            by.setdefault(rec["round"], {})[rec["mode"]] = rec
        p = pooled[label]
        p["runs"] += 1
        for rnd in by.values():
            if "registered" not in rnd or "unregistered" not in rnd:
                continue
            p["rounds"] += 1
            for cb in CALLBACKS:
                wr = rnd["registered"].get("windows", {}).get(cb)
                wu = rnd["unregistered"].get("windows", {}).get(cb)
                if not wr or not wu:
                    continue
                row = p["rows"].setdefault(cb, {"median": [], "q": [], "reg": [], "unreg": [], "regq": [], "unregq": []})
                row["median"].append(wr["median_ns_per_call"] / wu["median_ns_per_call"])
                row["reg"].append(wr["median_ns_per_call"])
                row["unreg"].append(wu["median_ns_per_call"])
                a, b = stat(wr, "q", q), stat(wu, "q", q)
                if a and b:
                    row["q"].append(a / b)
                    row["regq"].append(a)
                    row["unregq"].append(b)
    fmt = lambda xs: f"{statistics.median(xs):.2f} [{min(xs):.2f}, {max(xs):.2f}]" if xs else "-"
    us = lambda xs: f"{statistics.median(xs) / 1000:.2f}" if xs else "-"
    print(f"| build | runs | rounds | callback | ratio, window median [range] | ratio, window q{q:g} [range] "
          f"| registered / unregistered us (median) | (q{q:g}) |")
    print("|---|---:|---:|---|---|---|---|---|")
    for label in order:
        p = pooled[label]
        for cb in CALLBACKS:
            r = p["rows"].get(cb)
            if not r:
                continue
            print(f"| {label} | {p['runs']} | {p['rounds']} | {cb.removeprefix('tailctl_')} | {fmt(r['median'])} "
                  f"| {fmt(r['q'])} | {us(r['reg'])} / {us(r['unreg'])} | {us(r['regq'])} / {us(r['unregq'])} |")


if __name__ == "__main__":
    main()
