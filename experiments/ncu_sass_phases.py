"""Warp-stall samples of a kernel's step, phase by phase, from an ncu source page export.

    ncu -i REP --page source --print-source sass --csv > K_sass.csv
    python3 experiments/ncu_sass_phases.py K_sass.csv [FLOOR]

Takes the instructions executed >= FLOOR (default 500k) times (the consumer warps' per-step
code at 4,32,32,4096,64 causal) in address order and cuts them at each
wait / barrier / committing wgmma: per segment its samples (share of the
step's) and opcode mix. First use: session 22 (pb3 against FlashAttention-4's
backward kernel: the exp phase and the dS^T phase).
"""
import csv, sys, collections
f = sys.argv[1]
floor = int(sys.argv[2]) if len(sys.argv) > 2 else 500000
rows = list(csv.reader(open(f)))
hi = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
h = rows[hi]; col = {n: i for i, n in enumerate(h)}
data = [r for r in rows[hi+1:] if len(r) == len(h)]
S = col["Warp Stall Sampling (All Samples)"]
# walk in address order; mark phase boundaries at HGMMA / DEPBAR / BAR for step instructions
seg = []
for r in data:
    ex = int(r[col["Instructions Executed"]] or 0)
    ins = r[1].strip()
    op = (ins.split()[1] if ins.startswith("@") else ins.split()[0])
    key = op.split(".")[0]
    if ex < floor: continue
    if key in ("WARPGROUP", "BAR", "SYNCS") or (key=="HGMMA" and "gsb0" in ins):
        seg.append((r[0][-5:], ins[:50], float(r[S] or 0), "BOUNDARY"))
        continue
    seg.append((r[0][-5:], key, float(r[S] or 0), ""))
# print compact: accumulate samples between boundaries with op counts
acc = 0; ops = collections.Counter(); start=None
tot = sum(x[2] for x in seg)
for a, k, s, b in seg:
    if b:
        if ops: print(f"  {start}-{a} samples {acc:6.0f} ({100*acc/tot:4.1f}%)  ", " ".join(f"{o}:{n}" for o,n in ops.most_common(7)))
        print(f"{a} {k} {s:.0f}")
        acc=0; ops=collections.Counter(); start=None
    else:
        if start is None: start=a
        acc+=s; ops[k]+=1
if ops: print(f"  {start}-end samples {acc:6.0f}", " ".join(f"{o}:{n}" for o,n in ops.most_common(7)))
print("total step samples", tot)
