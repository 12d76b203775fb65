#!/usr/bin/env python3
"""Smoke test of the peer libraries on the GPU machine, after
experiments/peers/install.sh: does each peer import, and does it run one small
shape correctly? One process, one small problem per peer, bf16:

  attention  B=2, H=8, S=1024, d=128, causal: FlashAttention-4
             (flash_attn.cute.flash_attn_func) with deterministic=True and False
  FLCE       N=1024, D=512, V=4096, mean over rows: Liger-Kernel CuTe sm90,
             Liger-Kernel Triton (LigerFusedLinearCrossEntropyLoss, Triton
             pinned), QuACK chunked_linear_cross_entropy (tuned=False: no
             autotuning in a smoke test), Cut Cross-Entropy

Per peer: the time to import, the time of the first forward+backward (the JIT
compile of the CuTe DSL peers), relative errors against float32 (TF32 off)
autograd of the same loss (attention: the output, dQ, dK; FLCE: the loss, dX,
dW), and whether two more forward+backward calls gave the same gradient bits
(dQ for attention, dW for FLCE). "ok" = finite and every error below 2e-2
(bf16 inputs and outputs). A peer that fails prints its exception and the run
goes on. Prints a markdown table last; --json writes every figure.

Usage: smoke.py [--only fa4-det,quack,...] [--budget-s 100] [--json FILE]
"""
import argparse
import hashlib
import importlib.metadata as md
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_site  # noqa: E402

SITE = peers_site.activate()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TOL = 2e-2
PEERS = ["fa4-det", "fa4", "liger-cute", "liger-triton", "quack", "cce"]
DIST = {"fa4-det": "flash-attn-4", "fa4": "flash-attn-4", "liger-cute": "liger-kernel",
        "liger-triton": "liger-kernel", "quack": "quack-kernels", "cce": "cut-cross-entropy"}


def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def bits(t):
    return hashlib.blake2b(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes(),
                           digest_size=8).hexdigest()


def rel(a, ref):
    return float((a.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


# ------------------------------------------------------------------ attention
def attention_problem():
    g = torch.Generator(device="cuda").manual_seed(0)
    B, H, S, d = 2, 8, 1024, 128
    q, k, v, do = (torch.randn(B, S, H, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qf.transpose(1, 2), kf.transpose(1, 2), vf.transpose(1, 2),
                                       is_causal=True).transpose(1, 2)
    o.backward(do.float())
    return (q, k, v, do), (o.detach(), qf.grad, kf.grad)


def fa4_step(deterministic):
    t = time.time()
    from flash_attn.cute import flash_attn_func
    t_import = time.time() - t

    def step(q, k, v, do):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        o = flash_attn_func(q, k, v, causal=True, deterministic=deterministic)
        o = o[0] if isinstance(o, tuple) else o
        o.backward(do)
        return o.detach(), q.grad, k.grad
    return step, t_import


# ----------------------------------------------------------------------- FLCE
def flce_problem():
    g = torch.Generator(device="cuda").manual_seed(0)
    N, D, V = 1024, 512, 4096
    x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(V, D, device="cuda", generator=g) * D ** -0.5).to(torch.bfloat16)
    y = torch.randint(0, V, (N,), device="cuda", generator=g)
    xf, wf = x.float().requires_grad_(), w.float().requires_grad_()
    loss = F.cross_entropy(xf @ wf.t(), y)
    loss.backward()
    return (x, w, y), (loss.detach(), xf.grad, wf.grad)


def flce_step(name):
    t = time.time()
    if name == "liger-cute":
        from liger_kernel.ops.cutedsl.ops.fused_linear_cross_entropy_sm90 import \
            liger_fused_linear_cross_entropy_sm90 as fn
        loss_of = fn
    elif name == "liger-triton":
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
        module = LigerFusedLinearCrossEntropyLoss()
        # Liger dispatches per call; these overrides pin its Triton implementation.
        os.environ["LIGER_KERNEL_IMPL_FUSED_LINEAR_CROSS_ENTROPY"] = "nvidia-triton"
        os.environ["LIGER_KERNEL_IMPL_CROSS_ENTROPY_LOSS_AND_GRAD"] = "nvidia-triton"

        def loss_of(x, w, y):
            return module(w, x, y)
    elif name == "quack":
        from quack.linear_cross_entropy import chunked_linear_cross_entropy

        def loss_of(x, w, y):
            return chunked_linear_cross_entropy(x, w, y, tuned=False)
    elif name == "cce":
        from cut_cross_entropy import linear_cross_entropy as loss_of
    t_import = time.time() - t

    def step(x, w, y):
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        loss = loss_of(x, w, y)
        loss.backward()
        return loss.detach(), x.grad, w.grad
    return step, t_import


def run_peer(name, problems):
    rec = {"peer": name, "version": version(DIST[name])}
    attention = name.startswith("fa4")
    inputs, ref = problems["attention" if attention else "flce"]
    step, rec["import_s"] = fa4_step(name == "fa4-det") if attention else flce_step(name)
    t = time.time()
    out = step(*inputs)
    torch.cuda.synchronize()
    rec["first_call_s"] = time.time() - t
    labels = ("out", "dQ", "dK") if attention else ("loss", "dX", "dW")
    rec["err"] = {k: rel(a, r) for k, a, r in zip(labels, out, ref)}
    finite = all(bool(torch.isfinite(a).all()) for a in out)
    grad = 1 if attention else 2  # dQ, or dW
    digests = {bits(out[grad])} | {bits(step(*inputs)[grad]) for _ in range(2)}
    rec["same_bits_x3"] = len(digests) == 1
    rec["ok"] = finite and all(e < TOL for e in rec["err"].values())
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--budget-s", type=float, default=100.0, help="start no peer after this many seconds")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "peers_smoke.json"))
    args = ap.parse_args()
    wanted = [p for p in args.only.split(",") if p]
    bad = [p for p in wanted if p not in PEERS]
    if bad:
        print(f"smoke.py: unknown peer(s) {bad}; known: {PEERS}", file=sys.stderr)
        return 2
    print(f"# peers site: {SITE or 'none (PEERS_SITE / /tmp/peers/site-packages missing)'}; torch {torch.__version__}")
    if not torch.cuda.is_available():
        print("smoke.py: no CUDA device; nothing run")
        return 0
    start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        import cutlass
        print(f"# CuTe DSL {cutlass.__version__} from {os.path.dirname(cutlass.__file__)}")
    except Exception as e:  # noqa: BLE001 - reported, each peer then reports its own failure
        print(f"# CuTe DSL does not import: {type(e).__name__}: {e}")
    print(f"# {torch.cuda.get_device_name()}", flush=True)
    problems = {"attention": attention_problem(), "flce": flce_problem()}
    results = []
    for name in wanted:
        if time.time() - start > args.budget_s:
            rec = {"peer": name, "version": version(DIST[name]), "error": f"not run: {args.budget_s:.0f} s budget spent"}
        else:
            try:
                rec = run_peer(name, problems)
            except Exception as e:  # noqa: BLE001 - a failing peer is the finding
                traceback.print_exc(limit=3)
                rec = {"peer": name, "version": version(DIST[name]),
                       "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
            torch.cuda.empty_cache()
        results.append(rec)
        print(f"{name}: " + (rec["error"] if "error" in rec else
                             f"{'ok' if rec['ok'] else 'WRONG'}, first call {rec['first_call_s']:.1f} s"), flush=True)
    print(f"\n| peer | version | import s | first call s | result | errors vs fp32 | same grad bits x3 |")
    print("|---|---|---:|---:|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['peer']} | {r['version']} | | | FAILED: {r['error'][:160]} | | |")
            continue
        errs = ", ".join(f"{k} {v:.1e}" for k, v in r["err"].items())
        print(f"| {r['peer']} | {r['version']} | {r['import_s']:.1f} | {r['first_call_s']:.1f} | "
              f"{'ok' if r['ok'] else 'WRONG'} | {errs} | {'yes' if r['same_bits_x3'] else 'no'} |")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"site": SITE, "torch": torch.__version__, "results": results}, f, indent=1)
    print(f"\n{time.time() - start:.0f} s in all; JSON: {args.json}")
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
