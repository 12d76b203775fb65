#!/usr/bin/env python3
"""tail.py: the grid's tail at B=4, H=32, S=4096, BR=BC=128 causal (32 key blocks a head, key block n walks 32 - n
query blocks), one CTA an SM on 132 SMs, CTAs started in launch order on the first free SM (greedy list
scheduling), each taking (steps + c) step-times (c: a CTA's fixed cost outside the loop, in steps). Orders:
ours (grid x = key blocks 31 .. 0 of a (batch, head) unit, y = units) and FA4's SingleTileLPTBwdScheduler
(spt: key blocks 31 .. 0, each over a group of 16 heads: its L2 swizzle at d64, 4096 keys). A model: it ignores
the dQ semaphore (satisfied in both orders: the shorter key blocks start first) and all contention."""
import heapq

def makespan(order, sms=132, c=0.0):
    free = [0.0] * sms
    heapq.heapify(free)
    end = 0.0
    for steps in order:
        t = heapq.heappop(free)
        t += steps + c
        end = max(end, t)
        heapq.heappush(free, t)
    return end

NB, HEADS = 32, 128
ours = [NB - n for h in range(HEADS) for n in range(NB - 1, -1, -1)]
fa4 = [NB - n for g in range(HEADS // 16) for n in range(NB - 1, -1, -1) for h in range(16)]
lpt = sorted(ours, reverse=True)
total = sum(ours)
print(f"{len(ours)} CTAs, {total} steps, ideal {total / 132:.1f} step-times per SM (c = 0)")
for c in (0.0, 0.5, 1.0, 2.0):
    ideal = (total + c * len(ours)) / 132
    r = {k: makespan(o, c=c) for k, o in (("ours", ours), ("FA4", fa4), ("LPT (longest first)", lpt))}
    print(f"c={c}: ideal {ideal:.1f}; " + ", ".join(f"{k} {v:.1f} ({v / ideal:.3f}x)" for k, v in r.items()))
