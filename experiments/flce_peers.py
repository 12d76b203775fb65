#!/usr/bin/env python3
"""Side-by-side FLCE measurement (issue 17, item 4): detfuse against its peers,
in ONE Python process on one GPU, bf16 forward+backward of
cross_entropy(X W^T, y) (mean over rows, no ignored rows), with the three cuBLAS
GEMMs of the problem timed in the same process.

Peers (every import guarded: a missing one prints "not installed" and the
script goes on; one that fails prints its exception text):
  detfuse        detfuse.torch.linear_cross_entropy, variant "tuned" (falls back
                 to the heuristic when --db has no row) and each --variant named;
                 detfuse-mg: each --main-grad-variant with main_grad= (dW summed
                 into an fp32 [V, D] main grad, Megatron's way: no fp32 dW
                 accumulator, no bf16 dW; the main grad is its output)
  liger-cute     Liger-Kernel's CuTe DSL sm90 FLCE
                 (liger_kernel.ops.cutedsl.ops.fused_linear_cross_entropy_sm90)
  liger-triton   Liger-Kernel's LigerFusedLinearCrossEntropyLoss with its Triton
                 implementations pinned (LIGER_KERNEL_IMPL_* environment overrides)
  cce            Cut Cross-Entropy, cut_cross_entropy.linear_cross_entropy
  compile8       torch.compile of a loss over 8 row chunks (bf16 matmul, fp32 CE)
  quack          QuACK's quack.linear_cross_entropy.chunked_linear_cross_entropy
                 (tuned=True, its default, unless --quack-untuned)
  3gemm          torch.matmul: logits X W^T, dX = G W, dW = G^T X (bf16)

Per (shape, peer): median ms of fwd+bwd (CUDA events, warm-up, --reps, fewer at
N >= 32768; with --rounds K, the median of K such medians taken over all the
peers in turn, so clock drift during the run falls on every peer; then, with
--interleave P (default 10), P passes each timing every peer and the three GEMMs
once, the order shuffled per pass: "ilv_ms", the table's headline, since the
GPU's clocks under sustained load moved a peer 10-14% between rounds), peak extra memory (torch.cuda.max_memory_allocated during one
call minus what was allocated before it (inputs) minus the outputs it leaves:
loss, X.grad, W.grad; workspace and any fp32 dW accumulator count), distinct dW
bit patterns over 3 calls (exact byte comparison on the GPU, so "1" means three
identical dW), and errors against an fp32 reference with TF32 off (chunked
float32 logits, softmax, dX, dW): relative error of the loss, relative norm
errors of dX and dW. Per peer also the caching allocator's cudaMalloc /
cudaFree / retry counts over its timed samples (torch.cuda.memory_stats deltas
of num_device_alloc, num_device_free, num_alloc_retries: "alloc" for the first
timing, "alloc_rounds" summed over --rounds, "alloc_host_hidden"): a peer that
gets device memory from the driver per call shows it there.

Output: a markdown table on stdout, every figure in JSON ($OUT/flce_peers.json,
or --json). Usage:
  python3 experiments/flce_peers.py [--shapes N,D,V ...] [--peers a,b] [--variant NAME ...]
                                     [--reps 10] [--budget-s 220] [--db detfuse.db] [--quack-untuned]
The peers come from experiments/peers/install.sh's site folder ($PEERS_SITE,
default /tmp/peers/site-packages), put first on sys.path by peers/peers_site.py.
"""
import argparse
import math
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import peers_site  # noqa: E402  (puts experiments/peers/install.sh's site folder first on sys.path)

PEERS_SITE = peers_site.activate()
from measure import profile_interleaved, time_interleaved, time_ms, write_json  # noqa: E402  (experiments/peers/measure.py)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DEFAULT_SHAPES = ["16384,4096,128256", "8192,2304,256000", "4096,4096,128256", "32768,4096,128256"]
DEFAULT_VARIANTS = [
    "flce.bf16.cublaslt.owning.mb1024",
    "flce.bf16.cublaslt.owning.mb2000",
]
ALL_PEERS = ["3gemm", "detfuse", "liger-cute", "liger-triton", "cce", "compile8", "quack"]


class Skip(Exception):
    """A peer that cannot run here: printed as its reason, not a failure of the script."""


def with_ops_flags(fn, flags):
    """fn wrapped so that each call runs with these detfuse._ops module flags
    (EAGER_FUNCTION, SYNC_FREE_BACKWARD), restored after it; a loss's backward
    follows what its forward saw."""
    def call():
        from detfuse import _ops as ops_mod
        before = {k: getattr(ops_mod, k) for k in flags}
        for k, v in flags.items():
            setattr(ops_mod, k, v)
        try:
            return fn()
        finally:
            for k, v in before.items():
                setattr(ops_mod, k, v)
    return call


# ----------------------------------------------------------------- the loss functions
def make_peers(args):
    """name -> factory(x, w, y) returning a loss-producing callable, or raising Skip."""
    peers = {}

    def detfuse_factory(variant, main_grad=False, flags=None, what=""):
        def f(x, w, y):
            try:
                import detfuse.torch as dt
            except Exception as e:  # noqa: BLE001 - any import failure is reported
                raise Skip(f"not installed ({type(e).__name__}: {e})")
            kw = {"variant": variant}
            if variant == "tuned":
                kw["db"] = args.db
            try:
                chosen = dt.chosen_variant(x, w, y, **kw)
                name = f"{chosen.name} ({chosen.source})"
            except Exception as e:  # noqa: BLE001
                raise Skip(f"{type(e).__name__}: {e}")
            if main_grad:
                # dW summed into an fp32 main grad (allocated here, before the
                # memory baseline: it is the output, as w.grad is for the others).
                mg = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
                return (lambda: dt.linear_cross_entropy(x, w, y, main_grad=mg, **kw)), name + " main_grad", mg
            if flags:
                return with_ops_flags(lambda: dt.linear_cross_entropy(x, w, y, **kw), flags), name + what
            return (lambda: dt.linear_cross_entropy(x, w, y, **kw)), name
        return f

    peers["detfuse"] = detfuse_factory("tuned")
    peers["detfuse-op"] = detfuse_factory("tuned", flags={"EAGER_FUNCTION": False}, what=" through the custom op")
    peers["detfuse-nosync"] = detfuse_factory("tuned", flags={"SYNC_FREE_BACKWARD": True},
                                              what=" with the sync-free backward")
    peers["detfuse-hostread"] = detfuse_factory("tuned", flags={"SYNC_FREE_BACKWARD": False},
                                                what=" with the host-read backward")
    for v in args.variant:
        peers["detfuse:" + v] = detfuse_factory(v)
    for v in args.main_grad_variant:
        peers["detfuse-mg:" + v] = detfuse_factory(v, main_grad=True)

    def liger_cute(x, w, y):
        try:
            from liger_kernel.ops.cutedsl.ops.fused_linear_cross_entropy_sm90 import (
                liger_fused_linear_cross_entropy_sm90)
        except ImportError as e:
            raise Skip(f"not installed ({e})")
        return (lambda: liger_fused_linear_cross_entropy_sm90(x, w, y)), "liger_fused_linear_cross_entropy_sm90"
    peers["liger-cute"] = liger_cute

    def liger_triton(x, w, y):
        try:
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
        except ImportError as e:
            raise Skip(f"not installed ({e})")
        fn = LigerFusedLinearCrossEntropyLoss()
        # Liger 0.8.5 dispatches per call and prefers its CuTe DSL inner CE on
        # Hopper; its environment overrides (read at each dispatch) pin Triton.
        pin = {"LIGER_KERNEL_IMPL_FUSED_LINEAR_CROSS_ENTROPY": "nvidia-triton",
               "LIGER_KERNEL_IMPL_CROSS_ENTROPY_LOSS_AND_GRAD": "nvidia-triton"}

        def call():
            old = {k: os.environ.get(k) for k in pin}
            os.environ.update(pin)
            try:
                return fn(w, x, y)
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        return call, "LigerFusedLinearCrossEntropyLoss, nvidia-triton pinned"
    peers["liger-triton"] = liger_triton

    def cce(x, w, y):
        try:
            from cut_cross_entropy import linear_cross_entropy
        except ImportError as e:
            raise Skip(f"not installed ({e})")
        return (lambda: linear_cross_entropy(x, w, y)), "cut_cross_entropy.linear_cross_entropy"
    peers["cce"] = cce

    def compile8(x, w, y):
        n = x.shape[0]

        def chunked(x, w, y):
            total = x.new_zeros((), dtype=torch.float32)
            for xc, yc in zip(x.chunk(8), y.chunk(8)):
                total = total + F.cross_entropy((xc @ w.t()).float(), yc, reduction="sum")
            return total / n
        fn = torch.compile(chunked, dynamic=False)
        return (lambda: fn(x, w, y)), "torch.compile, 8 row chunks"
    peers["compile8"] = compile8

    def quack(x, w, y):
        try:
            from quack.linear_cross_entropy import chunked_linear_cross_entropy
        except ImportError as e:
            raise Skip(f"not installed ({e})")
        tuned = not args.quack_untuned
        return ((lambda: chunked_linear_cross_entropy(x, w, y, tuned=tuned)),
                f"quack chunked_linear_cross_entropy, tuned={tuned}")
    peers["quack"] = quack
    return peers


# ------------------------------------------------------------------- measurements
@torch.no_grad()
def reference(x, w, y, chunk=2048):
    """fp32, TF32 off: mean loss, dX, dW (float32) of cross_entropy(x w^T, y)."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        xf, wf = x.float(), w.float()
        n_valid = max(int((y != -100).sum()), 1)
        dX = torch.empty_like(xf)
        dW = torch.zeros_like(wf)
        loss = torch.zeros((), dtype=torch.float64, device=x.device)
        for r0 in range(0, x.shape[0], chunk):
            xc, yc = xf[r0:r0 + chunk], y[r0:r0 + chunk]
            z = xc @ wf.t()
            lse = torch.logsumexp(z, dim=1)
            ok = yc != -100
            zt = z.gather(1, yc.clamp_min(0)[:, None])[:, 0]
            loss += ((lse - zt) * ok).double().sum()
            g = torch.softmax(z, dim=1)
            rows = ok.nonzero()[:, 0]
            g[rows, yc[rows]] -= 1.0
            g *= (ok.float() / n_valid)[:, None]
            dX[r0:r0 + chunk] = g @ wf
            dW += g.t() @ xc
            del z, g
        return float(loss / n_valid), dX, dW
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def rel_norm(a, ref):
    return float(torch.linalg.vector_norm(a.float() - ref) / torch.linalg.vector_norm(ref))


ALLOC_KEYS = ("num_device_alloc", "num_device_free", "num_alloc_retries")


def alloc_counts():
    """The caching allocator's cumulative cudaMalloc / cudaFree / retry counts (None where torch lacks one)."""
    st = torch.cuda.memory_stats()
    return {k: st.get(k) for k in ALLOC_KEYS}


def alloc_delta(before, after, into=None):
    """after - before per key (None where a count is missing), added onto `into` when given."""
    d = {}
    for k in ALLOC_KEYS:
        v = None if before[k] is None or after[k] is None else after[k] - before[k]
        if into is not None:
            v = None if v is None or into.get(k) is None else into[k] + v
        d[k] = v
    return d


def alloc_text(a, calls):
    return (f"cudaMalloc +{a['num_device_alloc']}, cudaFree +{a['num_device_free']}, "
            f"retries +{a['num_alloc_retries']} over {calls} timed calls")


def timed_with_alloc(step, warmup, reps, host_hidden_ms=0.0, into=None):
    """time_ms(step, ...) and the allocator counts' deltas over its timed samples
    (measure.py's warm-up calls run first, outside the window); added onto
    `into` (a previous result with its "calls") when given."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    before = alloc_counts()
    med, samples = time_ms(step, 0, reps, host_hidden_ms)
    a = alloc_delta(before, alloc_counts(), into)
    a["calls"] = reps + (into["calls"] if into else 0)
    return med, samples, a


def measure_peer(factory, x, w, y, ref, reps):
    x.grad = w.grad = None
    fn, what, *main_grad = factory(x, w, y)
    mg = main_grad[0] if main_grad else None

    def grad_w():  # fp32 main grad (zeroed before each call that is compared) or w.grad
        return mg if mg is not None else w.grad

    def step():
        x.grad = w.grad = None
        fn().backward()

    # First call (compiles where a peer JIT-compiles), then memory of one call.
    step()
    torch.cuda.synchronize()
    x.grad = w.grad = None
    if mg is not None:
        mg.zero_()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()  # the main grad, where there is one, is in it
    torch.cuda.reset_peak_memory_stats()
    loss = fn()
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    outputs = loss.numel() * loss.element_size() + x.grad.numel() * x.grad.element_size() + \
        (w.grad.numel() * w.grad.element_size() if mg is None else 0)
    extra = peak - base - outputs
    l_ref, dX_ref, dW_ref = ref
    err = {"loss": abs(float(loss) - l_ref) / abs(l_ref), "dX": rel_norm(x.grad, dX_ref),
           "dW": rel_norm(grad_w(), dW_ref)}
    del loss
    # Distinct dW bit patterns over 3 calls (exact comparison on the device).
    kept = []
    for _ in range(3):
        if mg is not None:
            mg.zero_()
        step()
        g = grad_w().detach().view(torch.int16 if mg is None else torch.int32)
        if not any(torch.equal(g, k) for k in kept):
            kept.append(g.clone())
    distinct = len(kept)
    del kept
    med, samples, alloc = timed_with_alloc(step, 2, reps)
    x.grad = w.grad = None
    return {"what": what, "ms": med, "samples_ms": samples, "extra_bytes": int(extra), "dW_distinct": distinct,
            "err": err, "alloc": alloc}, step


def profile_kernels(step):
    """One step under torch.profiler (after a warm-up): (GPU ms summed per kernel
    name, the step's timeline or None). The timeline: "span" (first GPU activity to last), "busy"
    (the union of GPU activity), "lead" (the step's start on the host to its first
    GPU activity) and the four largest idle gaps between GPU activities, each with
    the names around it: what of a step is not kernel time, and where."""
    from torch.profiler import ProfilerActivity, profile, record_function
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("flce_peers_step"):
            step()
            torch.cuda.synchronize()
    out, acts, t0, timeline = {}, [], None, None
    for e in prof.events():
        tr = e.time_range
        if e.name == "flce_peers_step":  # the host range (its GPU-side copy spans the whole step)
            if not str(getattr(e, "device_type", "")).endswith("CUDA"):
                t0 = tr.start
        elif str(getattr(e, "device_type", "")).endswith("CUDA") and tr.elapsed_us() > 0:
            out[e.name] = out.get(e.name, 0.0) + tr.elapsed_us() / 1e3
            acts.append((tr.start, tr.end, e.name))
    if acts:
        acts.sort()
        busy, gaps, cur_s, cur_e, prev = 0.0, [], acts[0][0], acts[0][1], acts[0][2]
        for a_s, a_e, name in acts[1:]:
            if a_s > cur_e:
                busy += cur_e - cur_s
                gaps.append((a_s - cur_e, prev, name))
                cur_s = a_s
            if a_e >= cur_e:
                cur_e, prev = a_e, name
        busy += cur_e - cur_s
        timeline = {
            "span_ms": (cur_e - acts[0][0]) / 1e3, "busy_ms": busy / 1e3,
            "lead_ms": (acts[0][0] - t0) / 1e3 if t0 is not None else None,
            "gaps": [{"ms": g / 1e3, "after": a[:60], "before": b[:60]} for g, a, b in sorted(gaps, reverse=True)[:4]]}
    return out, timeline


def measure_3gemm(x, w, reps):
    """The three GEMMs timed apart, and a step running all three (for the
    interleaved timing; it holds the [N, V] gradient G while it lives)."""
    N, V = x.shape[0], w.shape[0]
    G = torch.randn(N, V, device=x.device, dtype=torch.bfloat16) * 1e-3
    xd, wd = x.detach(), w.detach()
    out = {}
    parts = [("logits", lambda: xd @ wd.t()), ("dX", lambda: G @ wd), ("dW", lambda: G.t() @ xd)]
    for name, fn in parts:
        out[name], _ = time_ms(fn, warmup=2, reps=reps)

    def step():
        for _, fn in parts:
            fn()

    return {"what": "torch.matmul x3 (bf16)", "ms": out["logits"] + out["dX"] + out["dW"], "parts_ms": out}, step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES)
    ap.add_argument("--peers", default=",".join(ALL_PEERS), help="comma-separated subset of " + ",".join(ALL_PEERS))
    ap.add_argument("--variant", nargs="*", default=DEFAULT_VARIANTS, help="detfuse variants measured by name")
    ap.add_argument("--main-grad-variant", nargs="*", default=[],
                    help="detfuse variants also measured with main_grad= (fp32 dW output)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1,
                    help="timing rounds over all peers in turn (a shape's 'ms' is the median of its round medians)")
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop starting new measurements after this")
    ap.add_argument("--host-hidden-ms", type=float, default=0.0,
                    help="after the rounds, one more per peer with a GPU spin of this many ms queued before "
                         "each sample's first event (measure.py): 'gpu_ms', the step without the host's lead")
    ap.add_argument("--interleave", type=int, default=10,
                    help="after the rounds, this many passes over every peer and the three GEMMs in turn, the "
                         "order shuffled per pass (measure.py's time_interleaved): 'ilv_ms', the headline column "
                         "(0: off)")
    ap.add_argument("--op-path", action="store_true",
                    help="also 'detfuse-op': the default through the custom op instead of the eager function")
    ap.add_argument("--sync-free", action="store_true",
                    help="also 'detfuse-nosync': the default with detfuse._ops.SYNC_FREE_BACKWARD = True (the upstream "
                         "gradient applied on the device, no synchronisation in the backward; the default since "
                         "session 13, when this option measured it)")
    ap.add_argument("--host-read", action="store_true",
                    help="also 'detfuse-hostread': the default with SYNC_FREE_BACKWARD = False (the backward "
                         "reads the upstream gradient on the host: one synchronisation; the default before session 13)")
    ap.add_argument("--quack-untuned", action="store_true",
                    help="QuACK with tuned=False (its default, tuned=True, autotunes its GEMMs at the first call)")
    ap.add_argument("--profile", action="store_true",
                    help="after the timing, one step of every peer under torch.profiler: its kernels' GPU ms")
    ap.add_argument("--db", default=os.environ.get("DETFUSE_DB", "detfuse.db"))
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "flce_peers.json"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("flce_peers: no CUDA device; nothing measured")
        return 0
    start = time.time()
    wanted = [p for p in args.peers.split(",") if p]
    bad = [p for p in wanted if p not in ALL_PEERS]
    if bad:
        print(f"flce_peers: unknown peer(s) {bad}; known: {ALL_PEERS}", file=sys.stderr)
        return 2
    factories = make_peers(args)
    order = []
    for p in wanted:
        if p == "detfuse":
            order += ["detfuse"] + (["detfuse-op"] if args.op_path else []) + \
                (["detfuse-nosync"] if args.sync_free else []) + (["detfuse-hostread"] if args.host_read else []) + \
                ["detfuse:" + v for v in args.variant] + \
                ["detfuse-mg:" + v for v in args.main_grad_variant]
        elif p != "3gemm":
            order.append(p)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_name()
    print(f"torch {torch.__version__}, {dev}")
    print(f"peers site: {PEERS_SITE or 'none (experiments/peers/install.sh installs one)'}")
    results = {"device": dev, "torch": torch.__version__, "shapes": {}}
    for shape in args.shapes:
        N, D, V = (int(s) for s in shape.split(","))
        reps = args.reps if N < 32768 else max(5, args.reps // 2)
        torch.manual_seed(0)
        x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16).requires_grad_()
        w = (torch.randn(V, D, device="cuda") * (2.0 / math.sqrt(D))).to(torch.bfloat16).requires_grad_()
        y = torch.randint(0, V, (N,), device="cuda")
        rows, steps = {}, {}
        results["shapes"][shape] = rows
        gemm3 = None
        if "3gemm" in wanted:
            rows["3gemm"], gemm3 = measure_3gemm(x, w, reps)
        ref = reference(x, w, y)
        for name in order:
            if time.time() - start > args.budget_s:
                rows[name] = {"skipped": f"time budget ({args.budget_s:.0f} s) spent"}
                continue
            try:
                rows[name], steps[name] = measure_peer(factories[name], x, w, y, ref, reps)
            except Skip as e:
                rows[name] = {"skipped": str(e)}
            except Exception as e:  # noqa: BLE001 - a failing peer is reported, the run goes on
                rows[name] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
                traceback.print_exc(limit=2)
            finally:
                x.grad = w.grad = None
                torch.cuda.empty_cache()
            r = rows[name]
            print(f"  {shape} {name}: " + (f"{r['ms']:.2f} ms" if "ms" in r else r.get("skipped", r.get("error"))),
                  flush=True)
            if "alloc" in r:
                print(f"  {shape} {name} allocator: {alloc_text(r['alloc'], r['alloc']['calls'])}", flush=True)
        # --rounds K: K - 1 more timing rounds over every peer that ran, in turn,
        # so that a drift of the GPU's clocks over the run (power, heat) falls
        # on all of them alike; "ms" becomes the median of the rounds' medians.
        for rnd in range(1, args.rounds):
            for name, step in steps.items():
                if time.time() - start > args.budget_s:
                    break
                r = rows[name]
                med, samples, r["alloc_rounds"] = timed_with_alloc(step, 1, reps, into=r.get("alloc_rounds"))
                x.grad = w.grad = None
                r.setdefault("round_ms", [r["ms"]]).append(med)
                r["samples_ms"] += samples
            for name in steps:
                if "round_ms" in rows[name]:
                    rows[name]["ms"] = statistics.median(rows[name]["round_ms"])
            print(f"  {shape} round {rnd + 1}: " + ", ".join(f"{n} {rows[n]['round_ms'][-1]:.2f}" for n in steps
                                                              if len(rows[n].get("round_ms", [])) > rnd), flush=True)
        if args.rounds > 1:
            for name in steps:
                if "alloc_rounds" in rows[name]:
                    a = rows[name]["alloc_rounds"]
                    print(f"  {shape} {name} allocator, rounds 2-{args.rounds}: {alloc_text(a, a['calls'])}",
                          flush=True)
        if args.interleave > 0 and steps:
            # Every peer (and the three GEMMs) once per pass, the order shuffled
            # per pass (measure.py's time_interleaved): "ilv_ms".
            fns = dict(steps)
            if gemm3 is not None:
                fns["3gemm"] = gemm3

            def drop_grads(_):
                x.grad = w.grad = None

            ilv_reps = args.interleave if N < 32768 else max(5, args.interleave // 2)
            for name, (med, samples) in time_interleaved(fns, 1, ilv_reps, drop_grads).items():
                rows[name]["ilv_ms"], rows[name]["ilv_samples_ms"] = med, samples
            g = rows.get("3gemm", {}).get("ilv_ms")
            print(f"  {shape} interleaved ({ilv_reps} passes, order shuffled): " + ", ".join(
                f"{n} {rows[n]['ilv_ms']:.2f}" + (f" ({rows[n]['ilv_ms'] / g:.3f}x GEMMs)" if g and n != "3gemm" else "")
                for n in fns), flush=True)
            if args.profile:
                prof = profile_interleaved(fns, max(3, ilv_reps // 2), drop_grads)
                for n, r in prof.items():
                    rows[n]["ilv_profile"] = r
                    top = list(r["kernels_ms"].items())[:6]
                    print(f"  {shape} {n} interleaved under the profiler ({r['calls']} calls, medians ms): window "
                          f"{r.get('window', 0):.2f}, GPU busy {r.get('busy', 0):.2f}, lead {r.get('lead', 0):.3f}, "
                          f"tail {r.get('tail', 0):.3f}; kernels per call: " +
                          "; ".join(f"{k[:60]} {v:.2f}" for k, v in top), flush=True)
            del fns
        gemm3 = None
        if args.host_hidden_ms > 0:
            for name, step in steps.items():
                if time.time() - start > args.budget_s:
                    break
                rows[name]["gpu_ms"], rows[name]["gpu_samples_ms"], rows[name]["alloc_host_hidden"] = \
                    timed_with_alloc(step, 1, reps, args.host_hidden_ms)
                x.grad = w.grad = None
            print(f"  {shape} host hidden ({args.host_hidden_ms:g} ms spin): " +
                  ", ".join(f"{n} {rows[n]['gpu_ms']:.2f}" for n in steps if "gpu_ms" in rows[n]), flush=True)
            for name in steps:
                if "alloc_host_hidden" in rows[name]:
                    a = rows[name]["alloc_host_hidden"]
                    print(f"  {shape} {name} allocator, host hidden: {alloc_text(a, a['calls'])}", flush=True)
        if args.profile:
            for name, step in steps.items():
                rows[name]["kernels_ms"], tl = profile_kernels(step)
                x.grad = w.grad = None
                top = sorted(rows[name]["kernels_ms"].items(), key=lambda kv: -kv[1])[:8]
                print(f"  {shape} {name} kernels (ms): " + "; ".join(f"{k[:70]} {v:.2f}" for k, v in top), flush=True)
                if tl:
                    rows[name]["timeline"] = tl
                    lead = "n/a" if tl["lead_ms"] is None else f"{tl['lead_ms']:.2f}"
                    print(f"  {shape} {name} timeline (ms): span {tl['span_ms']:.2f}, busy {tl['busy_ms']:.2f}, "
                          f"host lead {lead}; gaps: " + "; ".join(
                              f"{g['ms']:.3f} after {g['after']} before {g['before']}" for g in tl["gaps"]), flush=True)
        del x, w, y, ref, steps
        torch.cuda.empty_cache()

    print()
    print("ms: the interleaved median where measured (--interleave), else the rounds' median (in brackets then)")
    print("| N,D,V | peer | ms | x 3 GEMMs | rounds ms | extra GiB | dW distinct / 3 | err loss | err dX | err dW |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape, rows in results["shapes"].items():
        g3 = rows.get("3gemm", {})
        g = g3.get("ilv_ms", g3.get("ms"))
        for name, r in rows.items():
            if "ms" not in r:
                print(f"| {shape} | {name} | {r.get('skipped') or r.get('error')} | | | | | | | |")
                continue
            head = r.get("ilv_ms")
            shown = f"{head:.2f}" if head is not None else f"({r['ms']:.2f})"
            ratio = f"{(head if head is not None else r['ms']) / g:.3f}" if g else ""
            if name == "3gemm":
                p = r["parts_ms"]
                print(f"| {shape} | 3 GEMMs (apart: logits {p['logits']:.2f}, dX {p['dX']:.2f}, dW {p['dW']:.2f}) | "
                      f"{shown} | 1.000 | {r['ms']:.2f} | | | | | |")
                continue
            label = name if name == r["what"] or name.startswith(("detfuse:", "detfuse-mg:")) else f"{name} ({r['what']})"
            e = r["err"]
            print(f"| {shape} | {label} | {shown} | {ratio} | {r['ms']:.2f} | {r['extra_bytes'] / 2**30:.2f} | "
                  f"{r['dW_distinct']} | {e['loss']:.1e} | {e['dX']:.1e} | {e['dW']:.1e} |")
    print()
    write_json(args.json, results)
    print(f"{time.time() - start:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
