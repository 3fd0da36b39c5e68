"""Misses at the 300 ms target split by request size, per run of a regab-guest.sh output dir.

Usage: python3 split-by-size.py OUT   (OUT holds trace.txt and the loadgen's per-request CSVs)
"Large": nominal work >= 55 ms, the Bing-like distribution's 3.5% tail (52 of 1500 requests).
"""
import csv, sys, glob, os, statistics
d = sys.argv[1]; target_ns = 300e6
work = {}
for l in open(os.path.join(d, "trace.txt")):
    if l.startswith("#"): continue
    f = l.split(); work[int(f[0])] = int(f[3]) / 1000.0  # nominal ms
rows = {}
for p in sorted(glob.glob(os.path.join(d, "*.csv"))):
    name = os.path.basename(p)[:-4]
    cfg = name.rsplit(".", 1)[0]
    big = small = nbig = nsmall = 0; lat_big = []; lat_small = []
    for r in csv.DictReader(open(p)):
        w = work[int(r["id"])]; lat = int(r["latency_ns"])
        if w >= 55: nbig += 1; big += lat > target_ns; lat_big.append(lat / 1e6)
        else: nsmall += 1; small += lat > target_ns; lat_small.append(lat / 1e6)
    rows.setdefault(cfg, []).append((big, nbig, small, nsmall, statistics.median(lat_big), sorted(lat_small)[int(0.99 * len(lat_small))]))
for cfg, rs in rows.items():
    print(cfg, " | ".join(f"large {b}/{nb} small {s}/{ns} large-median {mb:.0f} small-p99 {sp:.0f}" for b, nb, s, ns, mb, sp in rs))
