# Per-request exclusive instruction counts by function for a group of
# callgrind per-thread files: (sum over the S=13 files - sum over the S=3
# files) / 20000 requests. Usage: perreq2.py "big1,big2" "small1,small2" N
import subprocess, sys, re, collections
def load(files):
    d = collections.Counter()
    for f in files.split(","):
        out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", f], capture_output=True, text=True).stdout
        out = out.split("Auto-annotated source")[0]
        for line in out.splitlines():
            m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S.*)$", line)
            if not m or "PROGRAM TOTALS" in line: continue
            name = re.sub(r" \[.*\]$", "", m.group(2))
            fn = name.split(":", 1)[1] if ":" in name else name
            fn = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", fn))
            d[fn] += int(m.group(1).replace(",", ""))
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
n = float(sys.argv[3]); top = int(sys.argv[4]) if len(sys.argv) > 4 else 30
rows = sorted(((a[k] - b.get(k, 0)) / n, k) for k in a); rows.reverse()
print(f"{sum(v for v,_ in rows):8.1f}  TOTAL")
for v, k in rows[:top]:
    print(f"{v:8.1f}  {k[:110]}")
