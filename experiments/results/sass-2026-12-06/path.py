#!/usr/bin/env python3
# path.py LISTING LABEL s-e [s-e ...] [-x s-e ...]: opcode mix of the union of the inclusive hex ranges minus the -x ranges
import sys, re, collections
sys.argv.pop(0); path = sys.argv.pop(0); label = sys.argv.pop(0)
inc, exc, cur = [], [], None
for a in sys.argv:
    if a == "-x": cur = exc; continue
    s, e = (int(x, 16) for x in a.split("-")); (cur if cur is not None else inc).append((s, e))
from sass_loops import parse, describe  # (this script's folder is on sys.path)
funcs = parse(path)
ins = [x for _, f in funcs for x in f if any(s <= x[0] <= e for s, e in inc) and not any(s <= x[0] <= e for s, e in exc)]
describe(ins, label)
