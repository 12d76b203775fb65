#!/usr/bin/env python3
"""segments.py LISTING s-e [s-e ...] [-x s-e ...]: a step's path (the union of the ranges, in address order) cut at
its synchronisation points (wgmma waits, named barriers, mbarrier waits / arrives, the last HGMMA of a group):
for each segment its instruction count, MUFU.EX2, shared-memory / shuffle instructions (LDS, STS, STSM, SHFL: the
MIO queue with MUFU), FP32 arithmetic (FFMA, FMUL, FADD, FSEL) and the rest."""
import re, sys, collections
sys.path.insert(0, __import__("os").path.dirname(__file__))
from mix import parse, select, ranges

path = sys.argv[1]
inc, exc = ranges(sys.argv[2:])
ins = select(parse(path), inc, exc)
CUT = re.compile(r"^(WARPGROUP\.DEPBAR|BAR\.|SYNCS\.PHASECHK|SYNCS\.ARRIVE)")
seg, rows = [], []
def flush(end_text):
    c = collections.Counter()
    for _, op, _ in seg:
        if op == "MUFU.EX2": c["EX2"] += 1
        elif re.match(r"^(LDS|STS|STSM|LDSM|SHFL)", op): c["MIO"] += 1
        elif re.match(r"^(FFMA|FMUL|FADD|FSEL|FMNMX)", op): c["fp32"] += 1
        elif op.startswith("HGMMA"): c["HGMMA"] += 1
        elif op.startswith("F2FP"): c["F2FP"] += 1
        else: c["rest"] += 1
    first = f"{seg[0][0]:#06x}" if seg else "-"
    rows.append((first, len(seg), c, end_text))
for ad, op, text in ins:
    seg.append((ad, op, text))
    if CUT.match(op) or (op.startswith("HGMMA") and "gsb0" in text):
        short = " ".join(text.split())[:60]
        flush(f"{ad:#06x} {short}")
        seg = []
if seg: flush("(end)")
tot = collections.Counter()
print(f"{'from':>7} {'n':>4} {'EX2':>4} {'MIO':>4} {'fp32':>4} {'F2FP':>4} {'HGMMA':>5} {'rest':>4}  ends at")
for first, n, c, end in rows:
    tot.update(c)
    print(f"{first:>7} {n:4d} {c['EX2']:4d} {c['MIO']:4d} {c['fp32']:4d} {c['F2FP']:4d} {c['HGMMA']:5d} {c['rest']:4d}  {end}")
print(f"{'total':>7} {sum(r[1] for r in rows):4d} {tot['EX2']:4d} {tot['MIO']:4d} {tot['fp32']:4d} {tot['F2FP']:4d} {tot['HGMMA']:5d} {tot['rest']:4d}")
