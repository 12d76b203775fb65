"""Warp-stall samples per SASS instruction from an ncu source page export.

    ncu -i REP --page source --print-source sass --csv > K_sass.csv
    python3 experiments/ncu_sass_stalls.py K_sass.csv [TOP]

Prints the kernel's samples by stall reason (the reasons the CSV has
columns for; the rest, e.g. the tensor pipe's throttle, show as the gap
between an instruction's samples and its listed reasons), then the TOP
(default 40) instructions by samples with their three largest reasons.
First use: session 12 (experiments/device/s12-ncu-src.sh).
"""
import csv, sys, collections
f = sys.argv[1]
rows = list(csv.reader(open(f)))
# find header row
hi = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
h = rows[hi]
data = [r for r in rows[hi+1:] if len(r) == len(h)]
col = {n: i for i, n in enumerate(h)}
stalls = [n for n in h if n.startswith("stall_") and "Not Issued" not in n]
tot = collections.Counter()
allS = 0
for r in data:
    for s in stalls:
        v = r[col[s]]
        if v and v != "0":
            tot[s] += float(v)
    allS += float(r[col["Warp Stall Sampling (All Samples)"]] or 0)
print("instructions", len(data), "samples", allS)
for s, v in tot.most_common(): print(f"  {s:28s} {v:10.0f} {100*v/allS:5.1f}%")
top = sorted(data, key=lambda r: -float(r[col["Warp Stall Sampling (All Samples)"]] or 0))[:int(sys.argv[2]) if len(sys.argv) > 2 else 40]
for r in top:
    smp = float(r[col["Warp Stall Sampling (All Samples)"]] or 0)
    br = sorted(((float(r[col[s]] or 0), s[6:]) for s in stalls), reverse=True)[:3]
    print(f"{r[0][-5:]} {100*smp/allS:5.2f}% ex={r[col['Instructions Executed']]:>9s} {r[1].strip()[:60]:60s} " + " ".join(f"{n}:{v:.0f}" for v, n in br if v))
