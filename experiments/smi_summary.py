#!/usr/bin/env python3
"""Summarises an nvidia-smi log (experiments/device/s13-peers.sh: --query-gpu=
timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,<clock event reasons>
--format=csv,noheader -lms 200) per phase of the run (a phases file of
"YYYY/MM/DD HH:MM:SS.mmm name" lines: a phase runs from its line to the next):
samples, SM clock median / min / max (MHz), power median / max (W), the highest
temperature, and the clock-event reason bit masks seen with their counts
(0x4: software power cap, 0x20: software thermal slowdown, 0x40: hardware
thermal, 0x80: hardware power brake; 0x1: idle).

  python3 experiments/smi_summary.py smi.csv [phases.txt]
"""
import statistics
import sys
from collections import Counter
from datetime import datetime


def stamp(text):
    return datetime.strptime(text.strip()[:23], "%Y/%m/%d %H:%M:%S.%f")


def number(text):
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    rows = []
    with open(argv[1]) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 6:
                continue
            try:
                t = stamp(parts[0])
            except ValueError:
                continue
            rows.append((t, number(parts[1]), number(parts[3]), number(parts[4]), parts[5]))
    if not rows:
        print(f"smi_summary: no samples in {argv[1]}")
        return 1
    phases = []
    if len(argv) > 2:
        with open(argv[2]) as f:
            for line in f:
                try:
                    phases.append((stamp(line[:23]), line[24:].strip()))
                except ValueError:
                    continue
    if not phases:
        phases = [(rows[0][0], "whole run")]
    bounds = phases + [(datetime.max, "")]
    print("phase | samples | SM MHz median / min / max | W median / max | max C | clock-event reasons (count)")
    for (t0, name), (t1, _) in zip(bounds, bounds[1:]):
        sel = [r for r in rows if t0 <= r[0] < t1]
        if not sel:
            print(f"{name} | 0 |")
            continue
        sm = [r[1] for r in sel if r[1] is not None]
        pw = [r[2] for r in sel if r[2] is not None]
        tc = [r[3] for r in sel if r[3] is not None]
        reasons = Counter(r[4] for r in sel)
        print(f"{name} | {len(sel)} | "
              + (f"{statistics.median(sm):.0f} / {min(sm):.0f} / {max(sm):.0f}" if sm else "n/a") + " | "
              + (f"{statistics.median(pw):.0f} / {max(pw):.0f}" if pw else "n/a") + " | "
              + (f"{max(tc):.0f}" if tc else "n/a") + " | "
              + ", ".join(f"{k} ({v})" for k, v in reasons.most_common(5)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
