#!/usr/bin/env python3
"""Loops of a cuobjdump -sass listing's HGMMA functions: for each backward branch
whose body has >= MIN instructions, its range, size and opcode mix; and the
opcode mix of any address range given with --range START END (hex, inclusive).
Usage: sass_loops.py LISTING [--range 0x.. 0x..]... [--min 40] [--function S]"""
import argparse, re, collections

CATS = [("HGMMA", r"^HGMMA"), ("WARPGROUP.ARRIVE", r"^WARPGROUP\.ARRIVE"), ("WARPGROUP.DEPBAR", r"^WARPGROUP\.DEPBAR"),
        ("MUFU.EX2", r"^MUFU\.EX2"), ("MUFU.other", r"^MUFU"), ("FMUL", r"^FMUL"), ("FFMA", r"^FFMA"), ("FADD", r"^FADD"),
        ("FMNMX", r"^FMNMX"), ("FSETP", r"^FSETP"), ("FSEL", r"^FSEL"), ("F2FP(bf16 pack)", r"^F2FP"),
        ("ISETP", r"^ISETP"), ("SEL", r"^SEL\b"), ("SHFL", r"^SHFL"), ("BAR", r"^BAR"), ("SYNCS", r"^SYNCS"),
        ("R2UR", r"^R2UR"), ("UMOV", r"^UMOV"), ("U* other", r"^U"), ("IMAD/IADD3/LEA/LOP3/SHF/IABS/VIADD", r"^(IMAD|IADD3|LEA|LOP3|SHF|IABS|VIADD|IMNMX|VIMNMX)"),
        ("LDS/STS/LDSM/STSM", r"^(LDS|STS|LDSM|STSM)"), ("LDG/STG/LDC", r"^(LDG|STG|LDC)"), ("MOV", r"^MOV"),
        ("BRA", r"^BRA"), ("NOP", r"^NOP"), ("PLOP3/P2R/R2P", r"^(PLOP3|P2R|R2P)"), ("other", r".")]

def parse(path):
    funcs, name, ins = [], None, []
    for line in open(path):
        m = re.match(r"\s+Function : (.+)", line)
        if m:
            if name: funcs.append((name, ins))
            name, ins = m.group(1).strip(), []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            text = m.group(2)
            op = re.sub(r"^@!?U?P[T0-9]+\s+", "", text).split()[0]
            ins.append((int(m.group(1), 16), op, text))
    if name: funcs.append((name, ins))
    return funcs

def mix(ins):
    c = collections.Counter()
    for _, op, _ in ins:
        for cat, rx in CATS:
            if re.match(rx, op):
                c[cat] += 1; break
    return c

def describe(ins, label):
    c = mix(ins)
    print(f"  {label}: {len(ins)} instr  " + ", ".join(f"{k} {c[k]}" for k, _ in CATS if c[k]))
    # EX2 relative to wgmma waits
    seg, out = "start", []
    n_ex2 = 0
    for _, op, text in ins:
        if op.startswith("WARPGROUP.DEPBAR"):
            out.append(f"{seg}:{n_ex2}"); n_ex2 = 0
            seg = "after " + text.split()[-1]
        elif op.startswith("HGMMA") and "gsb0" in text:
            out.append(f"{seg}:{n_ex2}"); n_ex2 = 0; seg = "after HGMMA..gsb0"
        elif op == "MUFU.EX2":
            n_ex2 += 1
    out.append(f"{seg}:{n_ex2}")
    print("    EX2 by segment: " + " | ".join(out))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sass"); ap.add_argument("--range", nargs=2, action="append", default=[])
    ap.add_argument("--min", type=int, default=40); ap.add_argument("--function", default="")
    a = ap.parse_args()
    for name, ins in parse(a.sass):
        if not any(op.startswith("HGMMA") for _, op, _ in ins) or a.function not in name: continue
        regs = None
        print(f"== {name[:120]}")
        describe(ins, "whole function")
        addr = {ad: i for i, (ad, _, _) in enumerate(ins)}
        for i, (ad, op, text) in enumerate(ins):
            if op == "BRA":
                tgt = int(text.split()[-1], 16)
                body = ins[addr[tgt]:i + 1] if tgt in addr else []
                if tgt < ad and len(body) >= a.min and not any(o == "EXIT" for _, o, _ in body):
                    describe(ins[addr[tgt]:i + 1], f"loop {tgt:#x}-{ad:#x} ({text})")
        for s, e in a.range:
            s, e = int(s, 16), int(e, 16)
            describe([x for x in ins if s <= x[0] <= e], f"range {s:#x}-{e:#x}")


if __name__ == "__main__":
    main()
