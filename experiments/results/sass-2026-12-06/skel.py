#!/usr/bin/env python3
# skeleton of an address range of a cuobjdump listing: runs of the same opcode collapsed; branches/waits/HGMMA shown
import sys, re
path, s, e = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16)
ins = []
for line in open(path):
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if m and s <= int(m.group(1), 16) <= e:
        t = m.group(2); op = re.sub(r"^@!?U?P[T0-9]+\s+", "", t).split()[0]
        ins.append((m.group(1), op, t))
KEEP = ("BRA", "HGMMA", "WARPGROUP", "SYNCS", "BAR", "SHFL", "EXIT", "LDC", "STG", "UTMA", "STS", "STSM", "LDS", "FENCE", "MEMBAR")
run, out = None, []
def flush():
    if run: out.append(f"  {run[0]:>5} {run[1]} x{run[2]}" if run[2] > 1 else f"  {run[0]:>5} {run[1]}")
for i, (a, op, t) in enumerate(ins):
    key = op.split(".")[0] if not op.startswith(KEEP) else None
    if key is None:
        flush(); run = None; out.append(f"  {a:>5} {t}")
    elif run and run[1] == key:
        run[2] += 1
    else:
        flush(); run = [a, key, 1]
flush()
print("\n".join(out))
