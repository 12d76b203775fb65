#!/usr/bin/env python3
"""Figures and REPORT.md of the contention study (issue 10), read from the store.

    python3 experiments/contention/plot.py --db study.db [--study NAME ...] [--out DIR]

Reads the detfuse SQLite store directly (sqlite3, read-only) and writes into
--out (default: this script's folder) five PNG figures and REPORT.md. Every
number in the report is computed here from the store; nothing is typed by hand.
Needs Python 3 and matplotlib only (Debian: python3-matplotlib).

Which results: the studies' runs (runs.study = NAME; --study may be given once
per study; default the newest study with results of each kernel family, FLCE
and attention), their final `ok` results, on one device (--device, a name or
UUID prefix; default the device with the most results). When a (problem,
variant) was measured more than once (a resumed or repeated study), the latest
result counts. Each figure has a panel per family that has data; the report
has the FLCE sections, then the attention sections, for the families present.

The work is in studylib/ (next to this script): load.py (the store), analysis.py
(the numbers), figures.py (the PNGs), report.py (REPORT.md).
"""

import argparse
import os

from studylib import analysis, figures, report
from studylib.load import connect, die, load_studies


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the detfuse store")
    ap.add_argument("--study", action="append",
                    help="a study's name, repeatable (default: the newest study with results of each family)")
    ap.add_argument("--device", help="device name or UUID prefix (default: the one with most results)")
    ap.add_argument("--out", help="output folder (default: this script's folder)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        die("matplotlib is needed (Debian: apt-get install python3-matplotlib): %s" % e, 3)

    out = args.out or os.path.dirname(os.path.abspath(__file__))
    con = connect(args.db)
    studies, device, results, fams = load_studies(con, args.study, args.device)
    os.makedirs(out, exist_ok=True)
    views = analysis.views(fams)
    names = figures.draw_all(plt, views, out)
    text = report.report(args, studies, device, results, views, names, matplotlib.__version__)
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write(text)
    print("wrote %s and %d figures into %s" % ("REPORT.md", len(names), out))

if __name__ == "__main__":
    main()
