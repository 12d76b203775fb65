"""Step time and memory of detfuse's two memory modes against PyTorch.

One step = loss forward + backward for x [N, D] and weight [V, D] (bf16,
both requiring grad), target [N] int64 with every 16th row ignored (-100).
Implementations (--impls, comma separated):
  detfuse-fwd   detfuse.torch.linear_cross_entropy(grad_in_forward=True):
                dX and dW computed in the forward and held until backward
  detfuse-bwd   grad_in_forward=False: the forward saves the LSE, the
                backward runs a second pass over the vocabulary
  torch         F.cross_entropy((x @ w.T).float(), y): bf16 logits upcast to
                float32, what Transformers' causal-LM loss does
  compile       the torch step under torch.compile (first call compiles; the
                compile time is printed and left out of the step time)
Figures per implementation and shape:
  median / min step ms   CUDA events around each step, after --warmup steps
  held MiB               memory allocated after the forward, before backward,
                         beyond the inputs (what a training step carries from
                         this loss's forward to its backward)
  peak MiB               torch.cuda.max_memory_allocated during one step,
                         reset before it, beyond the inputs; includes the
                         gradients dX, dW every implementation returns
  loss                   the step's loss, to show the implementations agree

  python3 python/examples/bench_memory_modes.py [--shapes small,llama8k]
      [--impls detfuse-fwd,detfuse-bwd,torch] [--iters 10] [--warmup 3]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

try:
    import detfuse  # installed (make python / pip install ./python)
except ImportError:  # run from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import detfuse
import detfuse.torch as dt  # noqa: E402

SHAPES = {  # N, D, V
    "small": (4096, 512, 32000),
    "llama8k": (8192, 4096, 128256),
    "llama16k": (16384, 4096, 128256),
}


def torch_loss(x, w, y):
    return F.cross_entropy((x @ w.t()).float(), y, ignore_index=-100)


def make_impls(args):
    impls = {
        "detfuse-fwd": lambda x, w, y: dt.linear_cross_entropy(x, w, y, variant=args.variant, db=args.db,
                                                               grad_in_forward=True),
        "detfuse-bwd": lambda x, w, y: dt.linear_cross_entropy(x, w, y, variant=args.variant, db=args.db,
                                                               grad_in_forward=False),
        "torch": torch_loss,
    }
    if "compile" in args.impls:
        impls["compile"] = torch.compile(torch_loss, dynamic=False)
    return impls


def measure(fn, x, w, y, iters, warmup):
    def step():
        x.grad = None
        w.grad = None
        loss = fn(x, w, y)
        loss.backward()
        return loss

    t0 = time.perf_counter()
    loss = step()  # first call (compiles under torch.compile)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    for _ in range(max(warmup - 1, 0)):
        step()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step()
        e.record()
        times.append((s, e))
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in times]
    # Memory: one more step from a clean peak, gradients freed first.
    x.grad = None
    w.grad = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = fn(x, w, y)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - base
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    out = dict(median=statistics.median(ms), min=min(ms), held=held, peak=peak, loss=float(loss.detach()), first_s=first_s)
    del loss
    x.grad = None
    w.grad = None
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="small,llama8k", help=f"comma separated, of {','.join(SHAPES)}")
    ap.add_argument("--impls", default="detfuse-fwd,detfuse-bwd,torch")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--variant", default="tuned")
    ap.add_argument("--db", default="detfuse.db")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_memory_modes: needs a CUDA device")
    impls = make_impls(args)
    names = [n for n in args.impls.split(",") if n]
    for n in names:
        if n not in impls:
            raise SystemExit(f"--impls: unknown {n!r} (known: detfuse-fwd, detfuse-bwd, torch, compile)")
    print(f"torch {torch.__version__}, detfuse {detfuse.__version__}, {torch.cuda.get_device_name()}")
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            raise SystemExit(f"--shapes: unknown {shape!r} (known: {', '.join(SHAPES)})")
        N, D, V = SHAPES[shape]
        g = torch.Generator(device="cuda").manual_seed(0)
        x = (torch.randn(N, D, device="cuda", generator=g) * 0.5).to(torch.bfloat16).requires_grad_()
        w = (torch.randn(V, D, device="cuda", generator=g) * D ** -0.5).to(torch.bfloat16).requires_grad_()
        y = torch.randint(0, V, (N,), device="cuda", generator=g)
        y[::16] = -100
        c = dt.chosen_variant(x, w, y, variant=args.variant, db=args.db)
        print(f"\n{shape}: N={N} D={D} V={V} bf16; inputs {(x.numel() + w.numel()) * 2 / 2**20:.0f} MiB, "
              f"dX + dW {(x.numel() + w.numel()) * 2 / 2**20:.0f} MiB, fp32 logits {N * V * 4 / 2**20:.0f} MiB; "
              f"detfuse variant {c.name} ({c.source})")
        print(f"{'impl':12s} {'median ms':>10s} {'min ms':>9s} {'held MiB':>10s} {'peak MiB':>10s} {'loss':>11s}"
              f" {'first call s':>13s}")
        for n in names:
            try:
                r = measure(impls[n], x, w, y, args.iters, args.warmup)
            except Exception as e:  # noqa: BLE001 - e.g. out of memory, or torch.compile missing a compiler
                first = (str(e).splitlines() or [""])[0]
                print(f"{n:12s} failed: {type(e).__name__}: {first}", flush=True)
                x.grad = None
                w.grad = None
                torch.cuda.empty_cache()
                continue
            print(f"{n:12s} {r['median']:10.2f} {r['min']:9.2f} {r['held'] / 2**20:10.0f} {r['peak'] / 2**20:10.0f}"
                  f" {r['loss']:11.6f} {r['first_s']:13.2f}", flush=True)
        del x, w, y
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
