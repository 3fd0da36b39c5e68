# README table: the first run's row, and the ranges over all runs.
import json, sys, collections
goals = {"fib30/1t tc": "≤ 1.0", "join-ns/1t tc": "≤ 1.0", "fib30/2t tc": "≤ 1.0",
         "pfor1e6/2t tc": "≤ 1.1", "par_iter1e6/2t tc": "≤ 1.1", "scope1e3/2t tc": "≤ 1.1",
         "submit/2t tc": "≤ 1.1", "idle-cpu/2t": "< 0.1%", "rtt/2t p50": "≤ 1.1", "rtt/2t p99": "≤ 1.0"}
files = sys.argv[1:]
runs = [json.load(open(f)) for f in files]
by = collections.OrderedDict()
for r in runs:
    for row in r:
        by.setdefault(row["name"], []).append(row)
n = len(runs)
print(f"| bench | ours | rayon | unit | ratio | min-ratio | cpu-ratio | ratio over {n} runs (cpu) | goal |")
print("|---|---|---|---|---|---|---|---|---|")
f3 = lambda x: "–" if x is None else f"{x:.3f}"
for name, rs in by.items():
    r0 = rs[0]
    rat = [r["ratio"] for r in rs]; cpu = [r["cpu_ratio"] for r in rs if r["cpu_ratio"] is not None]
    if name.startswith("idle"):
        o = [r["ours"] for r in rs]; y = [r["rayon"] for r in rs]
        rng = f"{min(o):.3f}–{max(o):.3f}% (rayon {min(y):.3f}–{max(y):.3f}%)"
        print(f"| {name} | {r0['ours']:.3f} | {r0['rayon']:.3f} | % core | – | – | – | {rng} | {goals.get(name,'–')} |")
        continue
    rng = f"{min(rat):.2f}–{max(rat):.2f}" + (f" (cpu {min(cpu):.2f}–{max(cpu):.2f})" if cpu else "")
    print(f"| {name} | {r0['ours']:.3f} | {r0['rayon']:.3f} | {r0['unit']} | {f3(r0['ratio'])} | {f3(r0['min_ratio'])} | {f3(r0['cpu_ratio'])} | {rng} | {goals.get(name,'–')} |")
