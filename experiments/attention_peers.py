#!/usr/bin/env python3
"""Peer figures for issue 8's attention bars, measured in the same device run as
detfuse's kernels: PyTorch SDPA's FlashAttention-2 and cuDNN backends, forward and
forward+backward, and FlashAttention-2's backward under
torch.use_deterministic_algorithms(True).

FLOP conventions (DESIGN.md): forward 4*B*H*Sq*Sk*d (half when causal), backward
2.5x forward, so forward+backward is 3.5x forward. Timing: CUDA events around
each call, 5 warm-up calls, median of 20; inputs bf16, random normal, GQA by
repeating K/V heads (SDPA's enable_gqa where available).

Usage: python3 attention_peers.py [B H Hkv S d] ...  (default: the issue's shapes)
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def flops_forward(B, H, Sq, Sk, d, causal):
    f = 4.0 * B * H * Sq * Sk * d
    return f / 2 if causal else f


def time_ms(fn, warmup=5, reps=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b))
    return statistics.median(samples)


def measure(B, H, Hkv, S, d, causal, backend, deterministic):
    torch.manual_seed(0)
    q = torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16)
    gqa = H != Hkv

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    def fwd_bwd():
        q.grad = k.grad = v.grad = None
        fwd().backward(do)

    torch.use_deterministic_algorithms(deterministic, warn_only=False)
    try:
        with sdpa_kernel([backend]):
            with torch.no_grad():
                t_f = time_ms(fwd)
            t_fb = time_ms(fwd_bwd)
            # Distinct dQ digests over 5 backward calls (bitwise run-to-run check).
            digests = set()
            for _ in range(5):
                fwd_bwd()
                digests.add(hash(q.grad.view(torch.int16).cpu().numpy().tobytes()))
    finally:
        torch.use_deterministic_algorithms(False)
    ff = flops_forward(B, H, S, S, d, causal)
    return t_f, ff / t_f / 1e9, t_fb, 3.5 * ff / t_fb / 1e9, len(digests)


def main():
    shapes = [(4, 32, 32, 4096, 128), (4, 32, 8, 4096, 128), (4, 32, 32, 4096, 64)]
    if len(sys.argv) > 1:
        a = [int(x) for x in sys.argv[1:]]
        shapes = [tuple(a[i:i + 5]) for i in range(0, len(a), 5)]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    cases = [("flash2", SDPBackend.FLASH_ATTENTION, False), ("flash2-det", SDPBackend.FLASH_ATTENTION, True),
             ("cudnn", SDPBackend.CUDNN_ATTENTION, False)]
    print("peer        B  H Hkv     S   d causal   fwd ms  fwd TF/s  f+b ms  f+b TF/s  distinct dQ digests/5")
    for (B, H, Hkv, S, d) in shapes:
        for causal in (False, True):
            for name, backend, det in cases:
                try:
                    t_f, tf_f, t_fb, tf_fb, nd = measure(B, H, Hkv, S, d, causal, backend, det)
                    print(f"{name:10s} {B:2d} {H:2d} {Hkv:3d} {S:5d} {d:3d} {str(causal):6s} {t_f:8.3f} {tf_f:9.1f}"
                          f" {t_fb:7.3f} {tf_fb:9.1f}  {nd}")
                except Exception as e:  # a backend that refuses the shape or the mode
                    print(f"{name:10s} {B:2d} {H:2d} {Hkv:3d} {S:5d} {d:3d} {str(causal):6s} unavailable: "
                          f"{type(e).__name__}: {str(e).splitlines()[0][:100]}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
