#!/usr/bin/env python3
"""Host microseconds per call of detfuse.torch.attention and of the steps of its
forward (issue 16: the host's share of the timed window). Each figure: host wall
time per call while the GPU is held by a spin queued first (torch.cuda._sleep),
so that no launch waits for the GPU; median of 7 batches.

    python3 experiments/attention_host_cost.py [--shape B,H,Hkv,S,d,causal] [--n 20]
"""
import argparse
import ctypes
import statistics
import time

import torch

import detfuse.torch as dt
from detfuse import _lib, _ops


def host_us(fn, n, spin_cycles):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    v = []
    for _ in range(7):
        torch.cuda._sleep(spin_cycles)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        t1 = time.perf_counter_ns()
        torch.cuda.synchronize()
        v.append((t1 - t0) / n / 1e3)
    return statistics.median(v)


def events_ms(fn, spin_cycles=0, reps=20):
    """Median ms between CUDA events around fn. spin_cycles 0: the GPU idle at the start (the peers
    scripts' interleaved timing: the host's time before the first launch is in the window); else fn
    queued behind a spin of that many cycles (the launches hidden: GPU time)."""
    for _ in range(3):
        fn()
    v = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if spin_cycles:
            torch.cuda._sleep(spin_cycles)
        a.record()
        fn()
        b.record()
        b.synchronize()
        v.append(a.elapsed_time(b))
    return statistics.median(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="4,32,32,4096,64,1")
    ap.add_argument("--n", type=int, default=20, help="calls per batch (the launch queue must hold them)")
    ap.add_argument("--spin-ms", type=float, default=60)
    a = ap.parse_args()
    B, H, Hkv, S, d, causal = (int(x) for x in a.shape.split(","))
    causal = bool(causal)
    spin = int(a.spin_ms * 2.0e6)
    small = int(20 * 2.0e6)  # the steps of a call: 200 of them take a few ms
    dev = torch.device("cuda")
    q = torch.randn(B, H, S, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, S, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, S, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(B, H, S, d, device=dev, dtype=torch.bfloat16)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}; shape {a.shape}; host us per call, "
          f"GPU held by a spin")
    rows = []

    def line(what, us):
        rows.append((what, us))
        print(f"  {what:<66} {us:9.2f} us", flush=True)

    def fwd():
        with torch.no_grad():
            dt.attention(q, k, v, causal=causal)

    def fwd_bwd():
        q.grad = k.grad = v.grad = None
        dt.attention(q, k, v, causal=causal).backward(do)

    for what, fn in (("forward, no grad", fwd), ("forward + backward", fwd_bwd)):
        w, h = events_ms(fn), events_ms(fn, int(5 * 2.0e6))
        print(f"  {what}: ms between events, GPU idle at the start {w:.3f}, launches hidden {h:.3f} "
              f"(the host's share {w - h:.3f})", flush=True)
    line("attention() forward, no grad", host_us(fwd, a.n, spin))
    line("attention() forward + backward", host_us(fwd_bwd, a.n // 4 or 1, spin))

    def fwd_grad():
        dt.attention(q, k, v, causal=causal)

    line("attention() forward, with grad (autograd graph, no backward)", host_us(fwd_grad, a.n, spin))
    # The steps of the forward's path, one at a time.
    sc = 1.0 / d ** 0.5
    line("_check_attention + _attention_setup", host_us(
        lambda: dt._attention_setup(q, k, v, causal, None, None, None, "heuristic", None, "detfuse.db", False),
        a.n * 10, small))
    line("_ops.attention_problem (cached)", host_us(
        lambda: _ops.attention_problem(torch, q, k, causal, sc, 0.0, 0), a.n * 10, small))
    line("q.contiguous() x3", host_us(lambda: (q.contiguous(), k.contiguous(), v.contiguous()), a.n * 10, small))
    line("torch.empty O and lse", host_us(lambda: (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                                                   torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)),
                                          a.n * 10, small))
    line("torch.cuda.current_stream().cuda_stream", host_us(lambda: torch.cuda.current_stream(dev).cuda_stream,
                                                            a.n * 10, small))
    if hasattr(_ops, "_raw_stream"):
        line("_ops._raw_stream (torch._C._cuda_getCurrentRawStream)", host_us(lambda: _ops._raw_stream(torch, dev),
                                                                                a.n * 10, small))
    line("_ops._on(torch, device) (nullcontext)", host_us(lambda: _ops._on(torch, dev), a.n * 10, small))
    O = torch.empty(q.shape, dtype=q.dtype, device=dev)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=dev)

    def args():
        x = _lib.AttentionArgs()
        for name, t in dict(Q=q, K=k, V=v, O=O, lse=lse).items():
            setattr(x, name, t.data_ptr())
        x.workspace, x.workspace_size = None, 0
        return x

    line("AttentionArgs() and five data_ptr()s", host_us(args, a.n * 10, small))
    p = _ops.attention_problem(torch, q, k, causal, sc, 0.0, 0)
    sel = _ops.selection("heuristic", "", False)
    x = args()
    stream = torch.cuda.current_stream(dev).cuda_stream
    line("_lib.attention_run forward (ctypes, heuristic, choice decoded)", host_us(
        lambda: _lib.attention_run(p, _lib.ATTENTION_FORWARD, x, sel, stream), a.n, spin))
    lib = _lib.load_library()
    c = _lib.CChoice()
    pr, xr, sr = ctypes.byref(p), ctypes.byref(x), ctypes.byref(sel)
    sv = ctypes.c_void_p(stream or None)
    line("detfuse_attention_run forward (ctypes call alone, no choice decoded)", host_us(
        lambda: lib.detfuse_attention_run(pr, _lib.ATTENTION_FORWARD, xr, sr, sv, None), a.n, spin))
    line("_lib.to_choice", host_us(lambda: _lib.to_choice(c), a.n * 10, small))
    line("ctypes call that launches nothing (detfuse_device_count)", host_us(lib.detfuse_device_count, a.n * 10,
                                                                            small))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
