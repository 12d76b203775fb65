"""Executed warp instructions by SASS opcode from ncu source page exports, side by side.

    ncu -i REP --page source --print-source sass --csv > K_sass.csv
    python3 experiments/ncu_sass_opcodes.py A_sass.csv [B_sass.csv ...] [--lsu] [--top N]

Sums the "Instructions Executed" column (warp instructions) per opcode (the
mnemonic with its first modifier: LDS.128, STS.64, STSM.16, SYNCS.ARRIVE, ...)
and prints one column per file, largest first (TOP rows, default 40), with each
file's total. --lsu keeps only what the LSU pipe issues (shared / global /
local memory instructions, shuffles, mbarrier and async-proxy operations,
matrix loads and stores): the opcodes ncu's sm__inst_executed_pipe_lsu counts.
Session 44 (issue 16): our row 1 kv kernel against FlashAttention-4's backward
kernel (experiments/device/s44.sh PART=hw).
"""
import collections
import csv
import sys

# Opcode families the LSU pipe issues (Hopper): shared memory (LDS, STS, LDSM,
# STSM, ATOMS), global / generic / local (LDG, STG, LD, ST, LDL, STL, RED, ATOM,
# ATOMG), shuffles and votes through the LSU (SHFL), mbarrier and async-proxy
# operations (SYNCS), fences and proxies (MEMBAR, FENCE), bulk copies (UBLKCP, UTMA*).
LSU = ("LDS", "STS", "LDSM", "STSM", "ATOMS", "LDG", "STG", "LD", "ST", "LDL", "STL", "RED", "REDG", "ATOM",
       "ATOMG", "SHFL", "SYNCS", "MEMBAR", "FENCE", "UBLKCP", "UBLKRED", "UTMALDG", "UTMASTG", "UTMAREDG",
       "UTMAPF", "UTMACCTL", "CCTL", "LDGSTS", "LDGDEPBAR")


def opcode(source):
    words = source.strip().split()
    if not words:
        return ""
    if words[0].startswith("@"):  # predicate
        words = words[1:]
    if not words:
        return ""
    parts = words[0].rstrip(";").split(".")
    return ".".join(parts[:2])


def counts(path):
    rows = list(csv.reader(open(path)))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    col = {n: i for i, n in enumerate(rows[hi])}
    ex, src = col["Instructions Executed"], col["Source"]
    c = collections.Counter()
    for r in rows[hi + 1:]:
        if len(r) != len(rows[hi]):
            continue
        n = int(float(r[ex] or 0))
        if n:
            c[opcode(r[src])] += n
    return c


def main(argv):
    lsu = "--lsu" in argv
    top = 40
    files = []
    i = 1
    while i < len(argv):
        if argv[i] == "--top":
            top = int(argv[i + 1])
            i += 2
            continue
        if argv[i] != "--lsu":
            files.append(argv[i])
        i += 1
    if not files:
        print(__doc__)
        return 2
    cs = [counts(f) for f in files]
    if lsu:
        cs = [collections.Counter({k: v for k, v in c.items() if k.split(".")[0] in LSU}) for c in cs]
    keys = collections.Counter()
    for c in cs:
        keys.update(c)
    names = [f.rsplit("/", 1)[-1].replace("_sass.csv", "").replace("_source.csv", "") for f in files]
    print(f"{'opcode':22s}" + "".join(f"{n[:14]:>16s}" for n in names) + "   (M warp instructions)")
    print(f"{'total':22s}" + "".join(f"{sum(c.values()) / 1e6:16.2f}" for c in cs))
    for k, _ in keys.most_common(top):
        print(f"{k:22s}" + "".join(f"{c[k] / 1e6:16.3f}" for c in cs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
