#!/usr/bin/env python3
"""Host time of one FLCE training call (issue 17): does the call wait for the
GPU, and how long after its start is its first kernel enqueued?

Per peer (detfuse's Python step by the store ("tuned", as flce_peers.py's
"detfuse"), by the heuristic (the cached launch path of detfuse/_ops.py) and
with main_grad=; Liger-Kernel's CuTe FLCE where it imports; the factories are
flce_peers.py's), at one shape (default 4096,4096,128256), --reps samples
(default 20), each after a synchronisation and a GPU spin of --spin-ms
(torch.cuda._sleep, at least that long at clocks up to 2 GHz) queued first:
  fwd_ms   perf_counter around loss = fn() (every detfuse kernel is launched
           there: the forward computes dX and dW);
  bwd_ms   around loss.backward() (detfuse and Liger read the upstream
           gradient there: a synchronisation by design);
  step_ms  both;
  fwd_before_spin  how many forward calls returned while the spin still ran
           (an event after the spin, queried at the return): a call that
           does not wait for the GPU returns before its kernels run;
  idle_fwd_ms, idle_bwd_ms  the same without the spin (the GPU idle at the
           call: the forward's host work plus whatever it waits for);
and from one such call under torch.profiler (CPU and CUDA activity): the
offsets from the forward's start of its first and last kernel launch (CUDA
runtime / driver launch calls on the host) and of every synchronising call
(cudaStreamSynchronize, cudaEventSynchronize, cudaMemcpy and async copies,
cudaMalloc, cudaFree, ...), with its
duration. Medians are printed and every figure goes to the JSON.

  python3 experiments/flce_host_time.py [--shape N,D,V] [--reps 20] [--spin-ms 30] [--json out.json]
                                         [--peers detfuse,detfuse:heuristic,detfuse-mg:tuned,liger-cute]
Needs torch with CUDA, detfuse's Python package (DETFUSE_LIB or the library
beside it) and, for Liger, experiments/peers/install.sh's site; exit 0
without a GPU.
"""
import argparse
import ctypes
import math
import os
import statistics
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flce_peers  # noqa: E402  (the peers' factories; puts the peers' site and experiments/peers on sys.path)
import torch  # noqa: E402
from measure import write_json  # noqa: E402  (experiments/peers/measure.py)

# Host-side CUDA calls by name prefix (the profiler's names may carry a version suffix).
LAUNCH = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch")
SYNC = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaFree",
        "cudaMalloc", "cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize", "cuMemcpy", "cuMemFree",
        "cuMemAlloc")


def spin(ms):
    torch.cuda._sleep(int(ms * 2e6))


def host_times(fn, reset, reps, spin_ms):
    """reps samples of (fwd_ms, bwd_ms, spin still running when the forward returned)."""
    out = []
    for _ in range(reps):
        reset()
        torch.cuda.synchronize()
        if spin_ms > 0:
            spin(spin_ms)
        spun = torch.cuda.Event()
        spun.record()
        t0 = time.perf_counter()
        loss = fn()
        t1 = time.perf_counter()
        early = not spun.query()
        loss.backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        out.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, early))
    return out


def profiled_call(fn, reset, spin_ms):
    """One call (spin queued first) under torch.profiler: launch and sync offsets from the forward's start."""
    from torch.profiler import ProfilerActivity, profile, record_function
    reset()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        spin(spin_ms)
        with record_function("host_time_fwd"):
            loss = fn()
        with record_function("host_time_bwd"):
            loss.backward()
        torch.cuda.synchronize()
    cpu = [e for e in prof.events() if not str(getattr(e, "device_type", "")).endswith("CUDA")]
    marks = {e.name: e.time_range for e in cpu if e.name in ("host_time_fwd", "host_time_bwd")}
    if "host_time_fwd" not in marks:
        return None
    t0 = marks["host_time_fwd"].start
    fwd_end = marks["host_time_fwd"].end
    ms = lambda us: round((us - t0) / 1e3, 3)  # noqa: E731
    launches = sorted(e.time_range.start for e in cpu if e.name.startswith(LAUNCH) and e.time_range.start >= t0)
    fwd_launches = [t for t in launches if t <= fwd_end]
    syncs = sorted((e.time_range.start, e.name, e.time_range.elapsed_us()) for e in cpu
                   if e.name.startswith(SYNC) and e.time_range.start >= t0)
    return {"fwd_end_ms": ms(fwd_end),
            "bwd_ms": [ms(marks["host_time_bwd"].start), ms(marks["host_time_bwd"].end)] if "host_time_bwd" in marks
            else None,
            "launches_in_fwd": len(fwd_launches), "launches_in_all": len(launches),
            "first_launch_ms": ms(fwd_launches[0]) if fwd_launches else None,
            "last_fwd_launch_ms": ms(fwd_launches[-1]) if fwd_launches else None,
            "syncs": [{"name": n, "at_ms": ms(s), "ms": round(d / 1e3, 3)} for s, n, d in syncs[:12]]}


def host_only(call, reps):
    """Median host ms of call() with the GPU idle at its start (synchronised
    before each sample; the clock stops when call returns, not when its
    kernels end)."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def layers(x, w, y, db, reps):
    """Host ms of detfuse's forward (heuristic, gradient in forward) layer by
    layer, the GPU idle at each call: the Python API, the custom op, the
    launch helper (buffers made once), the C ABI alone, and a C ABI call that
    launches nothing (detfuse_flce_problem_init). Each layer includes the ones
    below it, so differences place the host's lead before the first kernel."""
    import detfuse.torch as dt
    from detfuse import _lib
    from detfuse import _ops as O

    dbs = dt._db_arg(db)
    opts = (-100, "mean", 0.0, 0.0, 0.0, "heuristic", dbs, False)
    ops = dt._ops()
    p = O.flce_problem(torch, x, w, -100, "mean", 0.0, 0.0, 0.0)
    sel = O.selection("heuristic", dbs, False)
    key = O._flce_key(x, w, _lib.MODE_FORWARD_BACKWARD, -100, "mean", 0.0, 0.0, 0.0, "heuristic", dbs, False)
    N = x.shape[0]
    loss = torch.empty((), dtype=torch.float32, device=x.device)
    lse = torch.empty((N,), dtype=torch.float32, device=x.device)
    dX, dW = torch.empty_like(x), torch.empty_like(w)
    bufs = dict(X=x, W=w, y=y, loss=loss, lse=lse, dX=dX, dW=dW)
    O._flce_launch(torch, p, _lib.MODE_FORWARD_BACKWARD, sel, x.device, key, **bufs)  # resolves and caches
    run_sel, ws_bytes = O._flce_resolved[key]
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=x.device) if ws_bytes else None
    a = _lib.FlceArgs()
    a.X, a.W, a.y = x.data_ptr(), w.data_ptr(), y.data_ptr()
    a.loss, a.lse, a.dX, a.dW = loss.data_ptr(), lse.data_ptr(), dX.data_ptr(), dW.data_ptr()
    a.workspace, a.workspace_size = O._ptr(ws), ws_bytes
    stream = torch.cuda.current_stream().cuda_stream
    lib = _lib.load_library()
    q = _lib.FlceProblem()
    through_op = flce_peers.with_ops_flags(lambda: dt.linear_cross_entropy(x, w, y), {"EAGER_FUNCTION": False})
    calls = {
        "linear_cross_entropy": lambda: dt.linear_cross_entropy(x, w, y),
        "linear_cross_entropy through the custom op": through_op,
        "torch.ops.detfuse.flce_forward_backward": lambda: ops.flce_forward_backward(x, w, y, *opts),
        "_ops._flce_launch": lambda: O._flce_launch(torch, p, _lib.MODE_FORWARD_BACKWARD, sel, x.device, key, **bufs),
        "_lib.run": lambda: _lib.run(p, _lib.MODE_FORWARD_BACKWARD, a, run_sel, stream, choice=False),
        "detfuse_flce_problem_init (no launch)": lambda: lib.detfuse_flce_problem_init(ctypes.byref(q)),
    }
    out = {}
    for name, call in calls.items():  # with autograd on, as in training (x and w require grad)
        try:
            for _ in range(3):
                call()
            out[name] = host_only(call, reps)
        except Exception as e:  # noqa: BLE001 - a layer that cannot be called alone is reported
            out[name] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="4096,4096,128256")
    ap.add_argument("--peers", default="detfuse,detfuse:heuristic,detfuse-mg:tuned,liger-cute")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--spin-ms", type=float, default=30.0)
    ap.add_argument("--db", default=os.environ.get("DETFUSE_DB", "detfuse.db"))
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "flce_host_time.json"))
    ap.add_argument("--layers", action="store_true",
                    help="also detfuse's forward layer by layer (host ms, GPU idle at each call)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("flce_host_time: no CUDA device; nothing measured")
        return 0
    wanted = [p for p in args.peers.split(",") if p]
    fargs = SimpleNamespace(db=args.db, quack_untuned=False,
                            variant=[p.split(":", 1)[1] for p in wanted if p.startswith("detfuse:")],
                            main_grad_variant=[p.split(":", 1)[1] for p in wanted if p.startswith("detfuse-mg:")])
    factories = flce_peers.make_peers(fargs)
    N, D, V = (int(s) for s in args.shape.split(","))
    torch.manual_seed(0)
    x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(V, D, device="cuda") * (2.0 / math.sqrt(D))).to(torch.bfloat16).requires_grad_()
    y = torch.randint(0, V, (N,), device="cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; shape {args.shape}, spin {args.spin_ms:g} ms, "
          f"{args.reps} samples")
    results = {"shape": args.shape, "spin_ms": args.spin_ms, "reps": args.reps, "peers": {}}
    for name in wanted:
        if name not in factories:
            results["peers"][name] = {"skipped": f"unknown peer (known: {sorted(factories)})"}
            print(f"  {name}: unknown peer")
            continue
        try:
            fn, what = factories[name](x, w, y)[:2]
        except flce_peers.Skip as e:
            results["peers"][name] = {"skipped": str(e)}
            print(f"  {name}: {e}")
            continue

        def reset():
            x.grad = w.grad = None

        try:
            for _ in range(3):  # warm-up (JIT compiles, caches, the allocator's pool)
                reset()
                fn().backward()
            torch.cuda.synchronize()
            samples = host_times(fn, reset, args.reps, args.spin_ms)
            idle = host_times(fn, reset, args.reps, 0.0)
            prof = profiled_call(fn, reset, args.spin_ms)
        except Exception as e:  # noqa: BLE001 - a failing peer is reported, the run goes on
            results["peers"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"  {name}: {type(e).__name__}: {e}")
            continue
        finally:
            reset()
            torch.cuda.empty_cache()
        fwd, bwd, early = zip(*samples)
        r = {"what": what, "fwd_ms": statistics.median(fwd), "bwd_ms": statistics.median(bwd),
             "step_ms": statistics.median(f + b for f, b in zip(fwd, bwd)), "fwd_before_spin": sum(early),
             "idle_fwd_ms": statistics.median(s[0] for s in idle), "idle_bwd_ms": statistics.median(s[1] for s in idle),
             "samples": [{"fwd_ms": round(f, 3), "bwd_ms": round(b, 3), "early": e} for f, b, e in samples],
             "profile": prof}
        results["peers"][name] = r
        line = (f"  {name} ({what}): host ms fwd {r['fwd_ms']:.3f}, bwd {r['bwd_ms']:.3f}, step {r['step_ms']:.3f}; "
                f"forward returned before the spin ended in {r['fwd_before_spin']}/{args.reps}; GPU idle first: fwd "
                f"{r['idle_fwd_ms']:.3f}, bwd {r['idle_bwd_ms']:.3f}")
        if prof:
            line += (f"; first launch at {prof['first_launch_ms']} ms, last forward launch at "
                     f"{prof['last_fwd_launch_ms']} ms ({prof['launches_in_fwd']} in the forward), forward ends at "
                     f"{prof['fwd_end_ms']} ms; syncs: " +
                     (", ".join(f"{s['name']} at {s['at_ms']} ({s['ms']} ms)" for s in prof["syncs"]) or "none"))
        print(line, flush=True)
    if args.layers:
        x.grad = w.grad = None
        results["layers_ms"] = layers(x, w, y, args.db, args.reps)
        print("  detfuse forward, host ms by layer (GPU idle at each call): " + "; ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in results["layers_ms"].items()),
            flush=True)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
