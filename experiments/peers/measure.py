"""Timing shared by the peer scripts (experiments/attention_peers.py, flce_peers.py)."""
import statistics

import torch


def time_ms(fn, warmup, reps):
    """fn() timed with CUDA events after `warmup` calls: (median ms, every sample)."""
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
    return statistics.median(samples), samples
