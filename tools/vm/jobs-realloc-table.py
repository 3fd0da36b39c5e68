#!/usr/bin/env python3
"""The reallocation-latency table of a tailctl-jobs output directory.

    tools/vm/jobs-realloc-table.py OUT > OUT/realloc-latency.md

Reads each scheduler log (scx_tailctl-POLICY-ROUND.log): the `allot:` line of
the counters printed at exit (the kernel's decision-to-enforcement histogram)
and the controller's last `allot: N rounds` log line (its decide time, its own
CPU per round, how late its thread woke).
"""
import glob
import os
import re
import sys

BUCKETS = ["<10us", "<25", "<50", "<100", "<250", "<1ms", "<10ms", ">=10ms"]


def parse(path):
    text = open(path, errors="replace").read()
    hist = re.findall(r"\] allot: realloc\s+(\d+).*?latency mean\s+([\d.]+) us max\s+([\d.]+) us \[([^\]]*)\]", text)
    ctl = re.findall(r"decide mean ([\d.]+) us .*?thread CPU mean ([\d.]+) us\); wake_late mean ([\d.]+) us", text)
    if not hist:
        return None
    n, mean, mx, h = hist[-1]
    counts = dict(re.findall(r"(\S+) (\d+)", h))
    return {
        "n": int(n), "mean": float(mean), "max": float(mx),
        "hist": [int(counts.get(b, 0)) for b in BUCKETS],
        "ctl": ctl[-1] if ctl else ("-", "-", "-"),
    }


def policy_round(path):
    """The policy (with its scx_tailctl flags, as tailctl-jobs names it) and round of a log.

    >>> policy_round("out/scx_tailctl-deq-2.log")
    ('deq', 2)
    >>> policy_round("out/scx_tailctl-asteal+asteal-u=core-time-10.log")
    ('asteal+asteal-u=core-time', 10)
    >>> policy_round("out/sched.log") is None
    True
    """
    m = re.search(r"scx_tailctl-(.+)-(\d+)\.log$", os.path.basename(path))
    return (m.group(1), int(m.group(2))) if m else None


def main():
    out = sys.argv[1]
    rows = []
    for path in glob.glob(os.path.join(out, "scx_tailctl-*-*.log")):
        pr = policy_round(path)
        r = parse(path)
        if pr and r and pr[0] != "off":
            rows.append((pr[0], pr[1], r))
    order = ["equi", "deq", "asteal", "drep"]
    base = lambda pol: pol.split("+")[0]
    rows.sort(key=lambda x: (order.index(base(x[0])) if base(x[0]) in order else 99, x[0], x[1]))
    print("Decision-to-enforcement latency of every reallocation (the kernel's clock: the `allot:` line "
          "of each scheduler's final counters), per run and in all; the controller's decide time, its "
          "thread's CPU per round and how late it woke (its last `allot:` log line). Made by "
          "`tools/vm/jobs-realloc-table.py`.\n")
    print("| run | " + " | ".join(BUCKETS) + " | reallocations | mean (us) | max (us) | decide mean (us) "
          "| controller CPU per round (us) | wake late mean (us) |")
    print("|---|" + "---:|" * (len(BUCKETS) + 6))
    total = [0] * len(BUCKETS)
    for pol, rnd, r in rows:
        total = [a + b for a, b in zip(total, r["hist"])]
        d, cpu, late = r["ctl"]
        print(f"| {pol} round {rnd} | " + " | ".join(map(str, r["hist"]))
              + f" | {r['n']} | {r['mean']:.1f} | {r['max']:.1f} | {d} | {cpu} | {late} |")
    n = sum(total)
    if n:
        within = sum(total[:4])
        print(f"\nIn all: {n} reallocations, {within} ({100 * within / n:.0f}%) enforced within 100 us of "
              f"the decision, {total[-1]} took 10 ms or more.")


if __name__ == "__main__":
    main()
