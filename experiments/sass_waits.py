#!/usr/bin/env python3
"""How much softmax work sits between a Hopper kernel's two WGMMA waits.

Reads a `cuobjdump -sass` listing. For each function that has HGMMA
instructions it prints the instruction, MUFU.EX2 and HGMMA counts, and for each
'WARPGROUP.DEPBAR.LE gsb0, 0x1' (one WGMMA group may still be in flight) the
instructions and EX2 issued before the next 'gsb0, 0x0' wait or HGMMA: the
exponentials that overlap the in-flight group. Used to compare FlashAttention-4's
forward/backward (experiments/peers/fa4_sass) with detfuse's kernels.

Usage: sass_waits.py LISTING.sass [--function SUBSTRING]
"""
import argparse
import re

WAIT1 = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x1")
WAIT0 = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x0")


def report(name, lines):
    hgmma = sum("HGMMA" in line for line in lines)
    if not hgmma:
        return
    ex2 = sum("MUFU.EX2" in line for line in lines)
    print(f"== {name[:150]}\n   {len(lines)} instr, {ex2} EX2, {hgmma} HGMMA")
    i = 0
    while i < len(lines):
        if not WAIT1.search(lines[i]):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not WAIT0.search(lines[j]) and "HGMMA" not in lines[j]:
            j += 1
        end = lines[j].strip()[:40] if j < len(lines) else "end"
        n_ex2 = sum("MUFU.EX2" in line for line in lines[i:j])
        print(f"   0x1 wait at {i}: {j - i} instr, {n_ex2} EX2 before '{end}'")
        i = j


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Instruction indices count from the function's first instruction.")
    parser.add_argument("sass", help="output of `cuobjdump -sass` (or nvdisasm)")
    parser.add_argument("--function", default="", metavar="SUBSTRING",
                        help="only functions whose name contains SUBSTRING")
    opts = parser.parse_args()
    name, lines = None, []
    with open(opts.sass) as listing:
        for line in listing:
            m = re.match(r"\s+Function : (.+)", line)
            if m:
                if name and opts.function in name:
                    report(name, lines)
                name, lines = m.group(1), []
            elif re.match(r"\s+/\*[0-9a-f]{4,}\*/", line):
                lines.append(line)
    if name and opts.function in name:
        report(name, lines)


if __name__ == "__main__":
    main()
