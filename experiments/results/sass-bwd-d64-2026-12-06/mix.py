#!/usr/bin/env python3
"""mix.py LISTING LABEL s-e [s-e ...] [-x s-e ...]: the opcode mix (the brief's classes) of the union of the
inclusive hex address ranges minus the -x ranges, in a cuobjdump -sass listing of ONE function
(extract_fn.py cuts one out). Classes are matched in order; the first match counts."""
import re, sys, collections

CLASSES = [
    ("HGMMA", r"^HGMMA"), ("WG.ARRIVE", r"^WARPGROUP\.ARRIVE"), ("WG.DEPBAR", r"^WARPGROUP\.DEPBAR"),
    ("MUFU.EX2", r"^MUFU\.EX2"), ("MUFU.other", r"^MUFU"),
    ("FFMA", r"^FFMA"), ("FMUL", r"^FMUL"), ("FADD", r"^FADD"), ("FMNMX", r"^FMNMX"), ("FSEL", r"^FSEL"), ("FSETP", r"^FSETP"),
    ("F2FP/F2F", r"^F2F"),
    ("LDS", r"^LDS"), ("STS", r"^STS$|^STS\."), ("STSM", r"^STSM"), ("LDSM", r"^LDSM"), ("SHFL", r"^SHFL"),
    ("LDG/LDC/ULDC", r"^(LDG|LDC|ULDC)"), ("STG/RED/ATOM", r"^(STG|RED|ATOM)"),
    ("BAR.SYNC", r"^BAR\.SYNC"), ("BAR.ARV", r"^BAR\.ARV"), ("BAR.other", r"^BAR"),
    ("SYNCS.wait", r"^SYNCS\.PHASECHK"), ("SYNCS.arrive", r"^SYNCS\.ARRIVE"), ("SYNCS.other", r"^SYNCS"),
    ("MEMBAR/FENCE", r"^(MEMBAR|FENCE|ERRBAR|CGAERRBAR|CCTL)"),
    ("int/address", r"^(IMAD|IADD3|LEA|LOP3|SHF|IABS|VIADD|IMNMX|VIMNMX|PRMT|MOV|IADD|SGXT|BMSK|POPC|FLO)"),
    ("uniform (U*, R2UR, S2UR)", r"^(U|R2UR|S2UR)"),
    ("predicate (ISETP, SEL, PLOP3, P2R, R2P)", r"^(ISETP|SEL|PLOP3|P2R|R2P|VOTE)"),
    ("BRA", r"^BRA"), ("NOP", r"^NOP"), ("other", r"."),
]

def parse(path):
    ins = []
    for line in open(path):
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            text = m.group(2)
            op = re.sub(r"^@!?U?P[T0-9]+\s+", "", text).split()[0]
            ins.append((int(m.group(1), 16), op, text))
    return ins

def classify(op):
    for c, rx in CLASSES:
        if re.match(rx, op):
            return c

def mix(ins):
    c = collections.Counter(classify(op) for _, op, _ in ins)
    return c

def select(ins, inc, exc):
    return [x for x in ins if any(s <= x[0] <= e for s, e in inc) and not any(s <= x[0] <= e for s, e in exc)]

def ranges(args):
    inc, exc, cur = [], [], None
    for a in args:
        if a == "-x":
            cur = exc; continue
        s, e = (int(x, 16) for x in a.split("-"))
        (cur if cur is not None else inc).append((s, e))
    return inc, exc

if __name__ == "__main__":
    path, label = sys.argv[1], sys.argv[2]
    inc, exc = ranges(sys.argv[3:])
    sel = select(parse(path), inc, exc)
    c = mix(sel)
    print(f"{label}: {len(sel)} instr")
    print("   " + ", ".join(f"{k} {c[k]}" for k, _ in CLASSES if c[k]))
    hg = collections.Counter(re.sub(r"\s+R\d+,.*|\s+gdesc.*", "", t).split()[0] + (" RS" if re.match(r"HGMMA\S*\s+R\d+,\s+R\d+", t) else " SS") + (".tnspA" if "tnspA" in t else "") for _, op, t in sel if op.startswith("HGMMA"))
    if hg:
        print("   HGMMA: " + ", ".join(f"{k} x{v}" for k, v in sorted(hg.items())))
