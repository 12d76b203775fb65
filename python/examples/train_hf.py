"""detfuse in a real training loop: a small randomly initialised Hugging Face
Transformers model (Llama, Qwen2, Mistral or Gemma-2; no weights downloaded,
works offline) trained a few steps with `detfuse.hf.apply(model)` (detfuse
attention through AttentionInterface, the fused linear + cross-entropy loss
from the final hidden states), against transformers' own training step.

Runs, same seed, same data (one fixed batch of random tokens), AdamW after a
linear warmup, fp32 master weights under bf16 autocast:
  detfuse 1, detfuse 2   detfuse.hf.apply(model); the two must be bitwise
                         identical (parameters and loss curve)
  sdpa default           transformers as shipped: SDPA attention, logits from
                         lm_head, ForCausalLMLoss (F.cross_entropy); PyTorch's
                         default (nondeterministic) algorithms
  sdpa deterministic     the same under torch.use_deterministic_algorithms
                         (warn_only: ops without a deterministic kernel warn)
  liger                  Liger's apply_liger_kernel_to_<model> when
                         liger_kernel imports (skipped otherwise, saying so)
Each run prints its median step time, peak memory (over the memory allocated
at its start) and parameter digest (XXH3-128 over every parameter's digest).

Gemma-2's attention soft-capping: when this build's attention lacks it,
detfuse.hf.apply refuses (the message is printed) and the detfuse runs use
the fused loss only (attention=False), saying so.

Exit status: 0 all checks hold; 1 the two detfuse runs differ; 2 at step 0
(same parameters) the detfuse loss differs from transformers' (sdpa
deterministic) by more than LOSS_RTOL (bf16 roundings at different points,
see python/tests/test_hf.py; a wrong mask, scale or label shift is far
larger).

  python3 python/examples/train_hf.py --model llama|qwen2|mistral|gemma2 [--steps 8] [--batch 4]
      [--seq 1024] [--hidden 512] [--layers 4] [--vocab 32000] [--heads 8] [--kv-heads 2]
      [--runs detfuse,sdpa,sdpa-det,liger]
"""
import argparse
import os
import statistics
import sys

# Before torch initialises cuBLAS: deterministic cuBLAS workspaces.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

try:
    import detfuse  # installed (make python / pip install ./python)
except ImportError:  # run from the source tree: the package next to examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import detfuse
import detfuse.hf as dhf  # noqa: E402

LOSS_RTOL = 2e-3
MODELS = ("llama", "qwen2", "mistral", "gemma2")


def make_config(args):
    import transformers as tf

    common = dict(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=int(args.hidden * 8 / 3) // 64 * 64,
                  num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                  max_position_embeddings=max(args.seq, 512), attention_dropout=0.0, tie_word_embeddings=False)
    if args.model == "llama":
        return tf.LlamaConfig(**common)
    if args.model == "qwen2":
        return tf.Qwen2Config(**common)
    if args.model == "mistral":
        return tf.MistralConfig(**common, sliding_window=args.sliding_window or 4096)
    d = args.hidden // args.heads
    return tf.Gemma2Config(**dict(common, tie_word_embeddings=True), head_dim=d, query_pre_attn_scalar=d,
                           sliding_window=args.sliding_window or 4096, attn_logit_softcapping=50.0,
                           final_logit_softcapping=30.0)


def build(args, impl):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    return AutoModelForCausalLM.from_config(make_config(args), attn_implementation=impl).cuda().train()


def params_digest(model):
    ds = {n: detfuse.digest(p.detach().contiguous()) for n, p in model.named_parameters()}
    return detfuse.digest("".join(f"{n}={d};" for n, d in sorted(ds.items())).encode()), ds


def liger_apply(model_type):
    try:
        import liger_kernel.transformers as lk
    except ImportError as e:
        return None, f"liger_kernel does not import ({e})"
    fn = getattr(lk, f"apply_liger_kernel_to_{model_type}", None)
    if fn is None:
        return None, f"liger_kernel has no apply_liger_kernel_to_{model_type}"
    return fn, ""


def train(args, kind, tokens):
    """kind: detfuse, sdpa, sdpa-det, liger. Returns a dict of results."""
    deterministic = kind in ("detfuse", "sdpa-det")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    note = ""
    if kind == "liger":
        fn, why = liger_apply(args.model)
        if fn is None:
            return dict(skipped=why)
        fn()  # patches transformers' classes for the rest of this process: liger runs last
    model = build(args, "sdpa")
    if kind == "detfuse":
        try:
            dhf.apply(model, attention=True, loss=True, variant=args.variant, attention_variant=args.variant,
                      db=args.db)
        except NotImplementedError as e:
            note = f"attention refused, fused loss only: {e}"
            model = build(args, "sdpa")
            dhf.apply(model, attention=False, loss=True, variant=args.variant, db=args.db)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    warm = max(args.lr_warmup, 0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    losses, times = [], []
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=tokens, labels=tokens, use_cache=False)
        out.loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        losses.append(out.loss.detach())
        times.append((start, end))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    ms = [s.elapsed_time(e) for s, e in times[min(args.warmup, len(times) - 1):]]
    digest, per_param = params_digest(model)
    del model, opt
    torch.cuda.empty_cache()
    torch.use_deterministic_algorithms(False)
    return dict(losses=[float(x) for x in losses], step_ms=statistics.median(ms), peak=peak, digest=digest,
                params=per_param, note=note)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="llama")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median step time")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8, help="attention heads (head dim = hidden / heads: 64 or 128)")
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--sliding-window", type=int, default=0, help="Mistral/Gemma-2 window (0: 4096)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lr-warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", default="tuned", help="detfuse variant selection for both kernels")
    ap.add_argument("--db", default="detfuse.db")
    ap.add_argument("--runs", default="detfuse,sdpa,sdpa-det,liger",
                    help="comma list of: detfuse (always run twice), sdpa, sdpa-det, liger")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("train_hf: needs a CUDA device")
    if args.steps < 1:
        raise SystemExit("train_hf: --steps must be >= 1")
    runs = [r for r in args.runs.split(",") if r]
    bad = [r for r in runs if r not in ("detfuse", "sdpa", "sdpa-det", "liger")]
    if bad or "detfuse" not in runs:
        raise SystemExit(f"train_hf: --runs must include detfuse and only detfuse, sdpa, sdpa-det, liger (got {bad})")
    torch.backends.cudnn.benchmark = False
    try:
        import torch.utils.deterministic as tud
        tud.fill_uninitialized_memory = False  # the NaN fill costs time and would hide uninitialised reads
    except ImportError:
        pass
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, detfuse {detfuse.__version__} "
          f"({detfuse.library_path()}), {torch.cuda.get_device_name()}")
    print(f"model: {args.model}, {args.layers} layers, hidden {args.hidden}, heads {args.heads}/{args.kv_heads}, "
          f"vocab {args.vocab}; batch {args.batch} x seq {args.seq}; {args.steps} steps AdamW lr {args.lr:g}; "
          f"fp32 weights, bf16 autocast")
    g = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).cuda()

    res = {"detfuse 1": train(args, "detfuse", tokens), "detfuse 2": train(args, "detfuse", tokens)}
    labels = {"sdpa": "sdpa default", "sdpa-det": "sdpa deterministic", "liger": "liger"}
    for r in ("sdpa", "sdpa-det", "liger"):  # liger last: it patches transformers for the process
        if r in runs:
            res[labels[r]] = train(args, r, tokens)
    a, b = res["detfuse 1"], res["detfuse 2"]
    if a["note"]:
        print(f"note: {a['note']}")

    print(f"\n{'run':20s} {'median step ms':>15s} {'peak MiB':>10s}  {'loss step 0':>12s} {'loss last':>10s}  "
          f"parameter digest")
    for name, r in res.items():
        if "skipped" in r:
            print(f"{name:20s} skipped: {r['skipped']}")
            continue
        print(f"{name:20s} {r['step_ms']:15.2f} {r['peak'] / 2**20:10.1f}  {r['losses'][0]:12.6f} "
              f"{r['losses'][-1]:10.6f}  {r['digest']}")
    differ = [n for n in a["params"] if a["params"][n] != b["params"][n]]
    same_curve = a["losses"] == b["losses"]
    print(f"\ndetfuse runs: {len(a['params']) - len(differ)} of {len(a['params'])} parameters bitwise identical; "
          f"loss curves {'identical' if same_curve else 'DIFFERENT'}")
    for other in ("sdpa default", "sdpa deterministic"):
        if other in res and "skipped" not in res[other]:
            o = res[other]
            print(f"{other}: digest {'equals' if o['digest'] == a['digest'] else 'differs from'} detfuse's; max "
                  f"|loss - detfuse| over steps {max(abs(x - y) for x, y in zip(o['losses'], a['losses'])):.3e}")
    if "sdpa default" in res:
        print("(run sdpa default twice to see whether it reproduces: PyTorch's default algorithms do not promise it)")
    if differ or not same_curve:
        print(f"FAIL: the detfuse runs differ ({len(differ)} parameters, e.g. {differ[:3]})")
        return 1
    ref = res.get("sdpa deterministic") or res.get("sdpa default")
    if ref is not None:
        rel = abs(a["losses"][0] - ref["losses"][0]) / abs(ref["losses"][0])
        ok = rel <= LOSS_RTOL
        print(f"step 0 (same parameters): detfuse {a['losses'][0]:.6f} transformers {ref['losses'][0]:.6f} rel "
              f"{rel:.2e} (LOSS_RTOL {LOSS_RTOL:g}: {'within' if ok else 'OUTSIDE'})")
        if not ok:
            print("FAIL: the detfuse loss at step 0 is outside LOSS_RTOL of transformers'")
            return 2
    print(f"PASS {args.model}: detfuse runs bitwise identical (digest {a['digest']}), "
          f"{a['step_ms']:.2f} ms/step, peak {a['peak'] / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
