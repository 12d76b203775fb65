"""How much of a Python-timed call is host time (issues 16, 17).

experiments/attention_peers.py and flce_peers.py time each call between two
CUDA events with a synchronisation after it (experiments/peers/measure.py):
the host time from the first event to the first kernel is in every sample.
This script times the same calls three ways, in one process:
  per_call   that method (events around one call, synchronised after it);
  pipelined  events around `--burst` calls issued back to back (host time
             hidden wherever the host runs ahead of the GPU);
  host_us    wall time of the call on the host alone (no synchronisation in
             it: the time until the call returns), after a synchronisation;
and prints the top of a cProfile of the host path.
  python3 experiments/python_host_overhead.py [--attention B,H,Hkv,S,d,causal ...] [--flce N,D,V ...]
Needs torch with CUDA and detfuse's Python package (DETFUSE_LIB or the
library beside it); prints a line per call and form; exit 0 without a GPU.
"""
import argparse
import cProfile
import io
import pstats
import statistics
import sys
import os
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from measure import time_ms  # noqa: E402  (experiments/peers/measure.py)


def per_call(fn, reps):
    """The peer scripts' method (experiments/peers/measure.py): events around one call."""
    return time_ms(fn, 0, reps)[0]


def pipelined(fn, reps, burst):
    ms = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(burst):
            fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b) / burst)
    return statistics.median(ms)


def host_us(fn, reps):
    us = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        us.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(us)


def report(label, fn, args):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    pc = per_call(fn, args.reps)
    pl = pipelined(fn, args.reps, args.burst)
    hu = host_us(fn, args.reps)
    print(f"{label}: per_call {pc:.3f} ms  pipelined {pl:.3f} ms  (per_call / pipelined {pc / pl:.3f})  "
          f"host {hu:.0f} us", flush=True)
    prof = cProfile.Profile()
    torch.cuda.synchronize()
    prof.enable()
    for _ in range(10):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(8)
    print("\n".join("   | " + l for l in s.getvalue().splitlines() if l.strip()[:1].isdigit()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attention", nargs="*", default=["4,32,32,4096,128,0"])
    ap.add_argument("--flce", nargs="*", default=["4096,4096,128256"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--burst", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("python_host_overhead: no CUDA device; nothing measured")
        return 0
    import detfuse.torch as dt
    for row in args.attention:
        B, H, Hkv, S, d, causal = (int(s) for s in row.split(","))
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        k = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        v = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        do = torch.randn_like(q)

        def fwd():
            with torch.no_grad():
                dt.attention(q, k, v, causal=bool(causal))

        def fwd_bwd():
            q.grad = k.grad = v.grad = None
            dt.attention(q, k, v, causal=bool(causal)).backward(do)
        report(f"attention {row} fwd", fwd, args)
        report(f"attention {row} fwd+bwd", fwd_bwd, args)
        del q, k, v, do
    for shape in args.flce:
        N, D, V = (int(s) for s in shape.split(","))
        x = (torch.randn(N, D, device="cuda") * 0.5).to(torch.bfloat16).requires_grad_()
        w = (torch.randn(V, D, device="cuda") * 0.02).to(torch.bfloat16).requires_grad_()
        y = torch.randint(0, V, (N,), device="cuda")
        mg = torch.zeros(V, D, dtype=torch.float32, device="cuda")

        def step():
            x.grad = w.grad = None
            dt.linear_cross_entropy(x, w, y, main_grad=mg).backward()
        report(f"flce {shape} main_grad step", step, args)
        del x, w, y, mg
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
