"""Timing shared by the peer scripts (experiments/attention_peers.py, flce_peers.py, flce_host_time.py)."""
import json
import os
import random
import statistics
import time

import torch


def time_ms(fn, warmup, reps, host_hidden_ms=0.0):
    """fn() timed with CUDA events after `warmup` calls: (median ms, every sample).

    Each sample: event, fn(), event, synchronise; so the host's time from the
    first event to fn's first kernel is in it. With host_hidden_ms > 0 a GPU
    spin of about that long (torch.cuda._sleep, 2e6 cycles a ms: at least that
    long at clocks up to 2 GHz) is queued before the first event: a host that
    issues fn's first kernel within it leaves only GPU time (and the waits of
    any synchronisation inside fn) between the events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if host_hidden_ms > 0:
            torch.cuda._sleep(int(host_hidden_ms * 2e6))
        a.record()
        fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b))
    return statistics.median(samples), samples


def pass_orders(names, passes, seed=0):
    """One order of `names` per pass: a fresh shuffle each pass (seeded, so a
    rerun times in the same orders), so that no name always runs right after
    the same other one. (A rotation keeps every name's predecessor: session
    13's first interleaved runs put one detfuse path after Liger in every pass
    and measured its kernels 5% slower than the same kernels elsewhere in the
    pass, the GPU still drawing Liger's power.)"""
    rng = random.Random(seed)
    for _ in range(passes):
        order = list(names)
        rng.shuffle(order)
        yield order


def time_interleaved(fns, warmup, reps, after=None):
    """{name: fn}, timed in turn: each of `reps` passes times every fn once
    (events around it, synchronised after it), in an order shuffled per pass
    (pass_orders), so that the GPU's clock and power state over the run
    (which moved one peer's figures by 10-14% between rounds in sessions
    11-12) and the power drawn by the call before fall on all of them alike.
    after(name), when given, runs after each call, outside the events (e.g.
    dropping the gradients). Returns {name: (median ms, samples)}."""
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
            if after:
                after(n)
    torch.cuda.synchronize()
    samples = {n: [] for n in names}
    for order in pass_orders(names, reps):
        for n in order:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fns[n]()
            b.record()
            b.synchronize()
            samples[n].append(a.elapsed_time(b))
            if after:
                after(n)
    return {n: (statistics.median(s), s) for n, s in samples.items()}


def time_sustained(fn, seconds, ahead=4):
    """fn() back to back for `seconds` of wall time, CUDA events around each
    call and no synchronisation between calls except that the host waits for
    the call `ahead` calls back (so the queue stays short and the GPU never
    idles between calls while the host keeps up): the GPU under sustained load,
    as in training, where the clock a kernel holds under the power limit
    decides its speed. Returns every call's ms in order."""
    if seconds <= 0 or ahead < 1:
        raise ValueError("time_sustained: seconds > 0 and ahead >= 1")
    pairs = []
    end = time.monotonic() + seconds
    torch.cuda.synchronize()
    while time.monotonic() < end:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        pairs.append((a, b))
        if len(pairs) > ahead:
            pairs[-1 - ahead][1].synchronize()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


def sustained_summary(samples):
    """A sustained run's per-call ms (time_sustained): calls, the median of the
    first three calls (the GPU as it came in), the median of the last half
    (the state it settled to) and the mean over all calls."""
    if not samples:
        raise ValueError("sustained_summary: no calls")
    half = samples[len(samples) // 2:]
    return {"calls": len(samples), "first_ms": statistics.median(samples[:3]),
            "settled_ms": statistics.median(half), "mean_ms": statistics.fmean(samples)}


def profile_interleaved(fns, passes, after=None):
    """`passes` interleaved passes (as measure.py's time_interleaved: each fn
    once per pass, order shuffled, synchronised after each) under torch.profiler:
    per fn, medians over its calls of the call's host window (start to the end
    of the synchronisation after it), the GPU busy time inside it (union of its
    kernels and copies), the host's lead to the first GPU activity and the tail
    after the last, and its kernels' GPU ms summed per name (mean per call).
    Since the calls interleave, their kernels run in the same clock and power
    state: busy here is the GPU time per call as the timing sees it, not a
    single profiled call's."""
    from torch.profiler import ProfilerActivity, profile, record_function
    names = list(fns)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for order in pass_orders(names, passes, seed=1):
            for n in order:
                with record_function("ilv:" + n):
                    fns[n]()
                    torch.cuda.synchronize()
                if after:
                    after(n)
    windows, gpu = [], []
    for e in prof.events():
        cuda = str(getattr(e, "device_type", "")).endswith("CUDA")
        tr = e.time_range
        if e.name.startswith("ilv:"):
            if not cuda:
                windows.append((tr.start, tr.end, e.name[4:]))
        elif cuda and tr.elapsed_us() > 0:
            gpu.append((tr.start, tr.end, e.name))
    windows.sort()
    gpu.sort()
    per = {n: {"window": [], "busy": [], "lead": [], "tail": [], "kernels": {}} for n in names}
    j = 0
    for w0, w1, n in windows:
        while j < len(gpu) and gpu[j][0] < w0:
            j += 1
        acts = []
        while j < len(gpu) and gpu[j][0] < w1:
            acts.append(gpu[j])
            j += 1
        rec = per[n]
        rec["window"].append((w1 - w0) / 1e3)
        if not acts:
            continue
        busy, cs, ce = 0.0, acts[0][0], acts[0][1]
        for a0, a1, k in acts:
            rec["kernels"][k] = rec["kernels"].get(k, 0.0) + (a1 - a0) / 1e3
            if a0 > ce:
                busy += ce - cs
                cs = a0
            ce = max(ce, a1)
        busy += ce - cs
        rec["busy"].append(busy / 1e3)
        rec["lead"].append((acts[0][0] - w0) / 1e3)
        rec["tail"].append((w1 - max(a[1] for a in acts)) / 1e3)
    out = {}
    for n, rec in per.items():
        calls = max(1, len(rec["window"]))
        out[n] = {k: statistics.median(rec[k]) for k in ("window", "busy", "lead", "tail") if rec[k]}
        out[n]["kernels_ms"] = {k: v / calls for k, v in sorted(rec["kernels"].items(), key=lambda kv: -kv[1])}
        out[n]["calls"] = len(rec["window"])
    return out


def write_json(path, obj):
    """obj as indented JSON at path (its folder made); prints where."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    print(f"JSON: {path}")
