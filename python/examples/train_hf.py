"""detfuse's loss in a real training step: a small randomly initialised Hugging
Face Transformers Llama (no weights downloaded; works offline) trained for 20
steps with detfuse.torch.linear_cross_entropy replacing the model's loss.

Three runs from one seed: detfuse twice, then the same model with the loss
Transformers computes (lm_head, logits upcast to float32, F.cross_entropy).
Prints every parameter's digest for both detfuse runs and whether all are
bitwise identical, the two loss curves side by side with their largest
difference, and each run's step time and peak memory.

Precision: fp32 master weights with bf16 autocast (what a mixed-precision
user runs). detfuse gets the final hidden states and lm_head.weight cast to
bf16, as autocast would cast them for lm_head; its bf16 gradient of the weight
flows back to the fp32 master through the cast. The rest of the model is
made deterministic with torch.use_deterministic_algorithms(True),
CUBLAS_WORKSPACE_CONFIG=:4096:8 and eager attention.

Exit status: 0 when the two detfuse runs are bitwise identical and the loss
curves agree within the bf16 tolerance below; 1 when a parameter differs
between the detfuse runs; 2 when the curves disagree.

  python3 python/examples/train_hf.py [--steps 20] [--batch 8] [--seq 1024]
      [--hidden 512] [--layers 4] [--vocab 32000] [--variant tuned] [--db detfuse.db]
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
import torch.nn.functional as F  # noqa: E402

try:
    import detfuse  # installed (make python / pip install ./python)
except ImportError:  # run from the source tree: the package next to examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import detfuse
import detfuse.torch as dt  # noqa: E402

# Per-step loss agreement between the detfuse and F.cross_entropy runs:
# |a - b| <= LOSS_RTOL * |b|, two bf16 units of roundoff (2^-8 each). The two
# runs differ only in the loss: the reference rounds the logits to bf16 before
# upcasting them, detfuse keeps them in fp32, and its dW comes back in bf16.
LOSS_RTOL = 2.0 ** -7


def build_model(args):
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=int(args.hidden * 8 / 3) // 64 * 64,
                      num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                      num_key_value_heads=args.hidden // 128, max_position_embeddings=args.seq,
                      tie_word_embeddings=False, attention_dropout=0.0)
    # Eager attention: matmul + softmax, deterministic (SDPA's flash/efficient
    # backward kernels are not).
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        raise SystemExit(f"train_hf: attention implementation is {impl!r}, wanted 'eager'")
    return model


def backbone_and_head(model):
    body = model.model if hasattr(model, "model") else model.get_decoder()
    return body, model.lm_head


def train(args, use_detfuse, tokens):
    # The detfuse runs are strict: any nondeterministic op in the model raises.
    # The F.cross_entropy run only warns (its loss is the comparison point, not
    # the subject; PyTorch flags some CUDA NLL-loss kernels).
    torch.use_deterministic_algorithms(True, warn_only=args.warn_only or not use_detfuse)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    model = build_model(args).cuda().train()
    body, head = backbone_and_head(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    ids = tokens
    # Shifted labels as Transformers builds them: position t predicts token
    # t + 1; the last position is ignored (-100).
    labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)
    V = head.weight.shape[0]
    losses, times = [], []
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for step in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = body(input_ids=ids, use_cache=False).last_hidden_state  # [B, S, D]
            if use_detfuse:
                loss = dt.linear_cross_entropy(h.to(torch.bfloat16), head.weight.to(torch.bfloat16), labels,
                                               ignore_index=-100, variant=args.variant, db=args.db)
            else:
                logits = head(h)  # bf16 under autocast
                loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        losses.append(loss.detach())
        times.append((start, end))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    ms = [s.elapsed_time(e) for s, e in times[args.warmup:]]
    digests = {n: detfuse.digest(p.detach().contiguous()) for n, p in model.named_parameters()}
    chosen = None
    if use_detfuse:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            h = body(input_ids=ids, use_cache=False).last_hidden_state
        chosen = dt.chosen_variant(h.to(torch.bfloat16), head.weight.to(torch.bfloat16), labels,
                                   variant=args.variant, db=args.db)
    del model, opt
    torch.cuda.empty_cache()
    return dict(losses=[float(x) for x in losses], step_ms=statistics.median(ms), peak=peak, digests=digests,
                chosen=chosen)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the median step time")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", default="tuned")
    ap.add_argument("--db", default="detfuse.db")
    ap.add_argument("--warn-only", action="store_true",
                    help="let PyTorch ops without a deterministic implementation run (warning) in the detfuse runs")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("train_hf: needs a CUDA device")
    torch.backends.cudnn.benchmark = False
    # Deterministic mode fills every torch.empty with NaN by default, which
    # would also hide a kernel reading memory it never wrote; without the fill
    # such a read shows as differing digests. (And the fill costs time.)
    try:
        import torch.utils.deterministic as tud
        tud.fill_uninitialized_memory = False
    except ImportError:  # torch < 2.1: no fill to turn off
        pass
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, detfuse {detfuse.__version__} "
          f"({detfuse.library_path()}), {torch.cuda.get_device_name()}")
    g = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    # One fixed batch of random tokens, seen every step (the model memorises
    # it, so the loss curve moves).
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).cuda()
    print(f"model: Llama, {args.layers} layers, hidden {args.hidden}, vocab {args.vocab}; batch {args.batch} x "
          f"seq {args.seq} = {args.batch * args.seq} tokens; {args.steps} steps AdamW lr {args.lr}; "
          f"fp32 weights, bf16 autocast, eager attention, deterministic algorithms")

    a = train(args, True, tokens)
    b = train(args, True, tokens)
    c = train(args, False, tokens)
    print(f"detfuse variant: {a['chosen'].name} (source {a['chosen'].source}, deterministic "
          f"{a['chosen'].deterministic}; {a['chosen'].note})")

    print("\nparameter digests (detfuse run 1 | run 2):")
    differ = []
    for name in a["digests"]:
        same = a["digests"][name] == b["digests"][name]
        if not same:
            differ.append(name)
        print(f"  {name:55s} {a['digests'][name]} {b['digests'][name]} {'same' if same else 'DIFFERENT'}")
    loss_same = a["losses"] == b["losses"]
    n = len(a["digests"])
    print(f"detfuse runs: {n - len(differ)} of {n} parameters bitwise identical; loss curves "
          f"{'identical' if loss_same else 'DIFFERENT'}")

    print("\nstep  loss detfuse   loss F.cross_entropy   |diff|")
    worst, worst_ok = 0.0, True
    for i, (x, y) in enumerate(zip(a["losses"], c["losses"])):
        d = abs(x - y)
        worst = max(worst, d)
        ok = d <= LOSS_RTOL * abs(y)
        worst_ok &= ok
        print(f"{i:4d}  {x:12.6f}   {y:12.6f}   {d:.3e}{'' if ok else '  OVER TOLERANCE'}")
    print(f"max |loss diff| over {len(a['losses'])} steps: {worst:.3e} (tolerance per step {LOSS_RTOL:.4g} x loss): "
          f"{'within' if worst_ok else 'OUTSIDE'} bf16 tolerance")

    print(f"\n{'run':28s} {'median step ms':>15s} {'peak MiB over start':>20s}")
    for label, r in (("detfuse (run 1)", a), ("detfuse (run 2)", b), ("lm_head + F.cross_entropy", c)):
        print(f"{label:28s} {r['step_ms']:15.2f} {r['peak'] / 2**20:20.1f}")
    print(f"(median over steps {args.warmup}..{args.steps - 1}; peak = torch.cuda.max_memory_allocated during "
          f"the run minus the memory allocated at its start)")
    if differ or not loss_same:
        print(f"FAIL: detfuse runs differ ({len(differ)} parameters)")
        return 1
    if not worst_ok:
        print("FAIL: loss curves differ by more than the bf16 tolerance")
        return 2
    print("PASS: detfuse runs bitwise identical; loss curve within bf16 tolerance of F.cross_entropy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
