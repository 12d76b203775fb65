#!/usr/bin/env python3
# extract_fn.py LISTING SUBSTRING > OUT: the one function of a cuobjdump -sass listing whose name contains SUBSTRING
import sys
path, sub = sys.argv[1], sys.argv[2]
out, on = [], False
for line in open(path):
    if "Function :" in line:
        on = sub in line
    if on:
        out.append(line)
sys.stdout.write("".join(out))
