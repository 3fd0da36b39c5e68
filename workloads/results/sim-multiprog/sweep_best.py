#!/usr/bin/env python3
"""Summarises `tailctl sim multiprog --json` reports of SAWS's protocol (16 jobs, a sweep of
loads, one run per load) the way the paper states its result: per load, DEQ+SAWS against A-Steal
and EQUI paired by seed (mean [min…max]); then, per seed, one sweep's *best* point ("up to", as
SAWS's abstract words it) and its average over the loads, summarised over the seeds.

usage: sweep_best.py REPORT.json [...]
"""
import json
import statistics as st
import sys


def pct(xs):
    return "%+.1f%% [%+.1f…%+.1f]" % (100 * st.mean(xs), 100 * min(xs), 100 * max(xs))


for path in sys.argv[1:]:
    d = json.load(open(path))
    runs = {(r["load"], r["seed"], r["policy"]): r for r in d["runs"]}
    loads = sorted({r["load"] for r in d["runs"]})
    seeds = sorted({r["seed"] for r in d["runs"]})
    settings = dict(d["settings"]) if isinstance(d["settings"], list) else d["settings"]
    print("## %s" % path.split("/")[-1])
    print("# " + "; ".join("%s: %s" % (k, v) for k, v in settings.items() if k != "wall_time"))
    print()
    print("| load | deq vs asteal: mean response | utilisation | deq vs equi: mean response | utilisation |")
    print("|---|---|---|---|---|")
    rel = {}
    for load in loads:
        row = []
        for other in ["asteal", "equi"]:
            r = [runs[(load, s, "deq")]["mean_response_s"] / runs[(load, s, other)]["mean_response_s"] - 1 for s in seeds]
            u = [runs[(load, s, "deq")]["utilisation"] / runs[(load, s, other)]["utilisation"] - 1 for s in seeds]
            rel[(load, other)] = (r, u)
            row += [pct(r), pct(u)]
        print("| %g | %s |" % (load, " | ".join(row)))
    print()
    print("| one sweep per seed, deq vs | best response point | best utilisation point | average response over the loads | average utilisation |")
    print("|---|---|---|---|---|")
    for other in ["asteal", "equi"]:
        idx = range(len(seeds))
        best_r = [min(rel[(l, other)][0][i] for l in loads) for i in idx]
        best_u = [max(rel[(l, other)][1][i] for l in loads) for i in idx]
        avg_r = [st.mean(rel[(l, other)][0][i] for l in loads) for i in idx]
        avg_u = [st.mean(rel[(l, other)][1][i] for l in loads) for i in idx]
        print("| %s | %s | %s | %s | %s |" % (other, pct(best_r), pct(best_u), pct(avg_r), pct(avg_u)))
    print()
