#!/usr/bin/env python3
"""Where the Python FLCE path's time goes (issue 17): the same variant, one
shape, timed four ways in one process, plus a torch.profiler trace of a step.

  step        what experiments/flce_peers.py times: x.grad = None,
              linear_cross_entropy(..., main_grad=mg or not).backward()
  op          the custom op alone (torch.ops.detfuse.flce_forward_backward*),
              no autograd
  capi        detfuse._lib.run with buffers made once (the C ABI: the
              selection, flce::run's target check (deferred to after the launches since
              session 12), the launches);
              what remains beyond it is what `detfuse bench flce` times (run
              by the device script in the same device call)
and, from one profiled step: the sum of the GPU kernels' durations, the
step's wall time, the idle time between them, and the CUDA runtime calls
that synchronise (cudaMemcpy, cudaStreamSynchronize, cudaFree, ...).

  python3 experiments/flce_python_profile.py --shape 4096,4096,128256 \
      --variant flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024 [--main-grad] [--reps 10]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from measure import time_ms  # noqa: E402  (experiments/peers/measure.py)
import torch  # noqa: E402

import detfuse.torch as dt  # noqa: E402
from detfuse import _lib  # noqa: E402


def profile_step(step):
    """One profiled call of step(): kernels (name -> total ms), GPU busy ms,
    wall ms between the first kernel's start and the last one's end, and the
    synchronising runtime calls."""
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
    events = prof.events()
    kernels, intervals, runtime = {}, [], {}
    for e in events:
        dev = getattr(e, "device_type", None)
        if dev is not None and str(dev).endswith("CUDA") and e.time_range.elapsed_us() > 0:
            kernels[e.name] = kernels.get(e.name, 0.0) + e.time_range.elapsed_us() / 1e3
            intervals.append((e.time_range.start, e.time_range.end))
        elif e.name.startswith("cuda") or e.name.startswith("cu"):
            r = runtime.setdefault(e.name, [0, 0.0])
            r[0] += 1
            r[1] += e.time_range.elapsed_us() / 1e3
    intervals.sort()
    # The first kernel's start after the step's start, and the idle gaps over 20 us between kernels.
    cpu_start = min((e.time_range.start for e in events if getattr(e, "device_type", None) is not None
                     and not str(e.device_type).endswith("CUDA")), default=None)
    gaps = [round((s2 - e1) / 1e3, 3) for (_, e1), (s2, _) in zip(intervals, intervals[1:]) if s2 - e1 > 20]
    busy, end = 0.0, None
    for s, t in intervals:  # union of kernel intervals (us)
        if end is None or s > end:
            busy += t - s
            end = t
        elif t > end:
            busy += t - end
            end = t
    span = (intervals[-1][1] - intervals[0][0]) / 1e3 if intervals else 0.0
    lead = (intervals[0][0] - cpu_start) / 1e3 if intervals and cpu_start is not None else None
    return {"event_ms": a.elapsed_time(b), "kernel_span_ms": span, "gpu_busy_ms": busy / 1e3,
            "first_kernel_after_ms": lead, "gaps_ms": gaps,
            "kernels_ms": dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:12]),
            "runtime_calls": {k: {"n": v[0], "ms": round(v[1], 3)} for k, v in sorted(runtime.items())}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096,4096,128256")
    ap.add_argument("--variant", required=True)
    ap.add_argument("--main-grad", action="store_true", help="linear_cross_entropy(..., main_grad=fp32 [V, D])")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    N, D, V = (int(s) for s in args.shape.split(","))
    torch.manual_seed(0)
    dev = torch.device("cuda")
    x = (torch.randn(N, D, device=dev) * 0.5).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(V, D, device=dev) * 0.02).to(torch.bfloat16).requires_grad_()
    y = torch.randint(0, V, (N,), device=dev)
    mg = torch.zeros(V, D, dtype=torch.float32, device=dev) if args.main_grad else None
    kw = {"variant": args.variant}
    if mg is not None:
        kw["main_grad"] = mg
    out = {"shape": [N, D, V], "variant": args.variant, "main_grad": args.main_grad}

    def step():
        x.grad = w.grad = None
        dt.linear_cross_entropy(x, w, y, **kw).backward()

    out["step_ms"], _ = time_ms(step, warmup=2, reps=args.reps)

    # The op alone: the custom op the step calls, without autograd.
    import detfuse._ops as ops_mod
    ops_mod.register()
    opts = (-100, "mean", 0.0, 0.0, 0.0, args.variant, "detfuse.db", False)
    with torch.no_grad():
        if mg is not None:
            op = lambda: torch.ops.detfuse.flce_forward_backward_main_grad(x, w, y, mg, *opts)  # noqa: E731
        else:
            op = lambda: torch.ops.detfuse.flce_forward_backward(x, w, y, *opts)  # noqa: E731
        out["op_ms"], _ = time_ms(op, warmup=2, reps=args.reps)

    # The C ABI with every buffer made once.
    p = ops_mod.flce_problem(torch, x, w, -100, "mean", 0.0, 0.0, 0.0, accumulate_dW=mg is not None)
    sel = _lib.make_selection(args.variant, "detfuse.db", False)
    mode = _lib.MODE_FORWARD_BACKWARD
    ws_bytes = _lib.workspace_size(p, mode, sel)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=dev) if ws_bytes else None
    loss = torch.empty((), dtype=torch.float32, device=dev)
    lse = torch.empty((N,), dtype=torch.float32, device=dev)
    dX = torch.empty_like(x)
    dW = mg if mg is not None else torch.empty_like(w)
    a = _lib.FlceArgs()
    a.X, a.W, a.y = x.data_ptr(), w.data_ptr(), y.data_ptr()
    a.loss, a.lse, a.dX, a.dW = loss.data_ptr(), lse.data_ptr(), dX.data_ptr(), dW.data_ptr()
    a.workspace, a.workspace_size = (ws.data_ptr() if ws is not None else None), ws_bytes
    stream = torch.cuda.current_stream().cuda_stream
    capi = lambda: _lib.run(p, mode, a, sel, stream)  # noqa: E731
    out["capi_ms"], _ = time_ms(capi, warmup=2, reps=args.reps)

    # Host cost of the selection: the named variant against variant="tuned" (the store at the default path,
    # then the nearest tuned shape, then the heuristic), which the C library looks up at every call.
    import time

    def host_us(f, n=50):
        t = time.perf_counter()
        for _ in range(n):
            f()
        return round((time.perf_counter() - t) / n * 1e6, 1)

    tuned = _lib.make_selection("tuned", "detfuse.db", False)
    out["host_us"] = {"choose_named": host_us(lambda: _lib.choose(p, mode, sel)),
                      "choose_tuned": host_us(lambda: _lib.choose(p, mode, tuned)),
                      "workspace_size_named": host_us(lambda: _lib.workspace_size(p, mode, sel)),
                      "workspace_size_tuned": host_us(lambda: _lib.workspace_size(p, mode, tuned))}

    # Host time of the step, by function (cProfile over 5 steps, each ending in a synchronisation).
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(5):
        step()
        torch.cuda.synchronize()
    pr.disable()
    text = io.StringIO()
    pstats.Stats(pr, stream=text).sort_stats("tottime").print_stats(25)
    out["cprofile_top"] = text.getvalue().splitlines()[-40:]
    out["profile_step"] = profile_step(step)
    out["profile_capi"] = profile_step(capi)
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
