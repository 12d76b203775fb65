"""detfuse's loss in a real training step: a small randomly initialised Hugging
Face Transformers Llama (no weights downloaded; works offline) trained for 20
steps with detfuse.torch.linear_cross_entropy replacing the model's loss.

Four runs from one seed, same data, AdamW lr 3e-4 after a 5-step linear warmup:
  detfuse run 1   also computes, at every step and from the same hidden states
                  and weight, F.cross_entropy's loss (and at step 0 the
                  gradients): the same-parameter check
  detfuse run 2   plain; must be bitwise identical to run 1
  ref fp32 logits lm_head as detfuse computes it: bf16 values, fp32
                  accumulation and fp32 logits (TF32 off), then F.cross_entropy
  ref bf16 logits what Transformers does under autocast: bf16 logits from
                  lm_head, upcast to fp32, then F.cross_entropy

Why two references: training is chaotic, so runs whose losses differ only by
roundoff drift apart after a few steps (at lr 1e-3 the detfuse and bf16-logit
curves agreed to 1e-3 for 10 steps, then differed by up to 0.24). The two
reference runs differ only in the precision of the logits; how far apart their
curves go is the measured noise envelope. detfuse computes its logits like the
fp32 reference (it differs from it only in summation order, a far smaller
perturbation than bf16 rounding of the logits), so its curve must stay within
that envelope of the fp32 reference.

Checks and exit status:
  0  all of the below hold
  1  a parameter or the loss curve differs between detfuse runs 1 and 2
  2  same-parameter check: at some step the detfuse loss differs from
     F.cross_entropy on fp32 logits by more than LOSS_RTOL, or at step 0 a
     gradient (dX, dW; both bf16) by more than GRAD_RTOL in relative norm
  3  independent curves: max over steps of |detfuse - ref fp32 logits| is
     larger than max over steps of |ref fp32 logits - ref bf16 logits|

Precision: fp32 master weights with bf16 autocast (what a mixed-precision
user runs). detfuse gets the final hidden states and lm_head.weight cast to
bf16, as autocast would cast them for lm_head; its bf16 gradient of the weight
flows back to the fp32 master through the cast (the fp32-logit reference does
the same through its casts). The rest of the model is made deterministic with
torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG=:4096:8 and
eager attention.

  python3 python/examples/train_hf.py [--steps 20] [--batch 8] [--seq 1024]
      [--hidden 512] [--layers 4] [--vocab 32000] [--lr 3e-4] [--lr-warmup 5]
      [--variant tuned] [--db detfuse.db]
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

# Same-parameter check (detfuse run 1 against F.cross_entropy on the same
# hidden states and weight, logits computed as detfuse does). Both accumulate
# the logits in fp32 from the same bf16 values and take the loss in fp32; they
# differ in summation order only (fp32 roundoff, about 1e-6 relative), so the
# loss must agree to LOSS_RTOL. Gradients: detfuse rounds the logit gradient G
# to bf16 before the dX and dW products (2^-9 relative per element, random
# sign, so it averages out in the sums) and both return dX and dW in bf16
# (one rounding, at most 2^-8 relative); GRAD_RTOL, one bf16 rounding, bounds
# the relative norm difference.
LOSS_RTOL = 1e-4
GRAD_RTOL = 2.0 ** -8


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


def rel_norm(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def ref_logits_fp32(h, weight):
    """lm_head as detfuse computes it: bf16 values, fp32 accumulation, fp32
    logits (autocast off, TF32 off: see main)."""
    with torch.autocast("cuda", enabled=False):
        return F.linear(h.to(torch.bfloat16).float(), weight.to(torch.bfloat16).float())


def same_parameter_check(h, weight, labels, loss, step, args, out):
    """At this step's parameters: F.cross_entropy from the same hidden states
    (fp32 logits as detfuse, and bf16 logits as autocast gives them); at step
    0 also dX and dW of both. Appends one row to out."""
    V = weight.shape[0]
    # The reference ops only warn if PyTorch flags them as nondeterministic
    # (as in the reference runs); nothing computed here feeds the training.
    torch.use_deterministic_algorithms(True, warn_only=True)
    with torch.no_grad():
        hb, wb = h.detach().to(torch.bfloat16), weight.detach().to(torch.bfloat16)
        ref32 = float(F.cross_entropy(ref_logits_fp32(hb, wb).view(-1, V), labels.view(-1), ignore_index=-100))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ref16 = float(F.cross_entropy(F.linear(hb, wb).float().view(-1, V), labels.view(-1), ignore_index=-100))
    row = dict(step=step, loss=float(loss), ref32=ref32, ref16=ref16)
    if step == 0:
        hd, wd = hb.clone().requires_grad_(), wb.clone().requires_grad_()
        ld = dt.linear_cross_entropy(hd, wd, labels, ignore_index=-100, variant=args.variant, db=args.db)
        gd = torch.autograd.grad(ld, (hd, wd))
        hr, wr = hb.clone().requires_grad_(), wb.clone().requires_grad_()
        lr_ = F.cross_entropy(ref_logits_fp32(hr, wr).view(-1, V), labels.view(-1), ignore_index=-100)
        gr = torch.autograd.grad(lr_, (hr, wr))  # bf16, through the casts
        row["grads"] = dict(dX=rel_norm(gd[0], gr[0]), dW=rel_norm(gd[1], gr[1]),
                            dtypes=f"{gd[0].dtype}/{gr[0].dtype}")
    torch.use_deterministic_algorithms(True, warn_only=args.warn_only)
    out.append(row)


def train(args, loss_kind, tokens, check=False):
    """loss_kind: 'detfuse', 'ref32' (fp32 logits as detfuse computes them) or
    'ref16' (bf16 logits under autocast, as Transformers computes them)."""
    use_detfuse = loss_kind == "detfuse"
    # The detfuse runs are strict: any nondeterministic op in the model raises.
    # The reference runs only warn (their loss is the comparison point, not
    # the subject; PyTorch flags some CUDA NLL-loss kernels).
    torch.use_deterministic_algorithms(True, warn_only=args.warn_only or not use_detfuse)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    model = build_model(args).cuda().train()
    body, head = backbone_and_head(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    warm = max(args.lr_warmup, 0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    ids = tokens
    # Shifted labels as Transformers builds them: position t predicts token
    # t + 1; the last position is ignored (-100).
    labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)
    V = head.weight.shape[0]
    losses, times, lrs, checks = [], [], [], []
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for step in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        lrs.append(opt.param_groups[0]["lr"])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = body(input_ids=ids, use_cache=False).last_hidden_state  # [B, S, D]
            if use_detfuse:
                loss = dt.linear_cross_entropy(h.to(torch.bfloat16), head.weight.to(torch.bfloat16), labels,
                                               ignore_index=-100, variant=args.variant, db=args.db)
            elif loss_kind == "ref32":
                loss = F.cross_entropy(ref_logits_fp32(h, head.weight).view(-1, V), labels.view(-1),
                                       ignore_index=-100)
            else:
                logits = head(h)  # bf16 under autocast
                loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1), ignore_index=-100)
        if check:
            same_parameter_check(h, head.weight, labels, loss.detach(), step, args, checks)
        loss.backward()
        opt.step()
        sched.step()
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
                chosen=chosen, lrs=lrs, checks=checks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the median step time")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (AdamW, weight decay 0.1)")
    ap.add_argument("--lr-warmup", type=int, default=5, help="steps of linear learning-rate warmup")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", default="tuned")
    ap.add_argument("--db", default="detfuse.db")
    ap.add_argument("--warn-only", action="store_true",
                    help="let PyTorch ops without a deterministic implementation run (warning) in the detfuse runs")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("train_hf: needs a CUDA device")
    torch.backends.cudnn.benchmark = False
    # fp32 matmuls in IEEE fp32 (no TF32): the fp32-logit reference must
    # accumulate as detfuse does. (PyTorch's default, set here explicitly.)
    torch.set_float32_matmul_precision("highest")
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
          f"seq {args.seq} = {args.batch * args.seq} tokens; {args.steps} steps AdamW lr {args.lr:g} "
          f"({args.lr_warmup} warmup steps); fp32 weights, bf16 autocast, eager attention, deterministic algorithms")

    a = train(args, "detfuse", tokens, check=True)
    b = train(args, "detfuse", tokens)
    r32 = train(args, "ref32", tokens)
    r16 = train(args, "ref16", tokens)
    print(f"detfuse variant: {a['chosen'].name} (source {a['chosen'].source}, deterministic "
          f"{a['chosen'].deterministic}; {a['chosen'].note})")

    # 1. Bitwise reproducibility.
    print("\n1. parameter digests after training (detfuse run 1 | run 2):")
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

    # 2. Same parameters, same hidden states: detfuse against F.cross_entropy.
    print("\n2. same-parameter check (detfuse run 1; F.cross_entropy from the same hidden states and weight):")
    print("step  loss detfuse   F.ce fp32 logits   rel diff    F.ce bf16 logits   rel diff")
    same_ok = True
    worst32 = worst16 = 0.0
    for r in a["checks"]:
        d32 = abs(r["loss"] - r["ref32"]) / abs(r["ref32"])
        d16 = abs(r["loss"] - r["ref16"]) / abs(r["ref16"])
        worst32, worst16 = max(worst32, d32), max(worst16, d16)
        ok = d32 <= LOSS_RTOL
        same_ok &= ok
        print(f"{r['step']:4d}  {r['loss']:12.6f}   {r['ref32']:12.6f}   {d32:10.2e}    {r['ref16']:12.6f}   "
              f"{d16:10.2e}{'' if ok else '  OVER LOSS_RTOL'}")
    print(f"max rel diff: fp32 logits {worst32:.2e} (LOSS_RTOL {LOSS_RTOL:g}: "
          f"{'within' if worst32 <= LOSS_RTOL else 'OUTSIDE'}); bf16 logits {worst16:.2e} (for scale, not judged)")
    g0 = a["checks"][0]["grads"]
    grads_ok = g0["dX"] <= GRAD_RTOL and g0["dW"] <= GRAD_RTOL
    same_ok &= grads_ok
    print(f"step 0 gradients ({g0['dtypes']}), relative norm difference: dX {g0['dX']:.2e}, dW {g0['dW']:.2e} "
          f"(GRAD_RTOL 2^-8 = {GRAD_RTOL:.2e}: {'within' if grads_ok else 'OUTSIDE'})")

    # 3. Independently trained curves against the measured noise envelope.
    print("\n3. independently trained loss curves (same seed and data; each run its own parameters):")
    print("step     lr      detfuse   ref fp32 logits  |detfuse - ref32|  ref bf16 logits  |ref32 - ref16|")
    dev_max = env_max = 0.0
    for i in range(len(a["losses"])):
        d = abs(a["losses"][i] - r32["losses"][i])
        e = abs(r32["losses"][i] - r16["losses"][i])
        dev_max, env_max = max(dev_max, d), max(env_max, e)
        print(f"{i:4d}  {a['lrs'][i]:8.2e}  {a['losses'][i]:10.6f}  {r32['losses'][i]:12.6f}     {d:12.3e}     "
              f"{r16['losses'][i]:12.6f}   {e:12.3e}")
    curves_ok = dev_max <= env_max
    print(f"max over {len(a['losses'])} steps: |detfuse - ref fp32 logits| {dev_max:.3e}; noise envelope "
          f"|ref fp32 - ref bf16 logits| {env_max:.3e}: {'within' if curves_ok else 'OUTSIDE'} the envelope")

    print(f"\n{'run':34s} {'median step ms':>15s} {'peak MiB over start':>20s}")
    for label, r in (("detfuse (run 1, with checks)", a), ("detfuse (run 2)", b),
                     ("lm_head fp32 logits + F.ce", r32), ("lm_head bf16 logits + F.ce (HF)", r16)):
        print(f"{label:34s} {r['step_ms']:15.2f} {r['peak'] / 2**20:20.1f}")
    print(f"(median over steps {args.warmup}..{args.steps - 1}; peak = torch.cuda.max_memory_allocated during "
          f"the run minus the memory allocated at its start)")
    if differ or not loss_same:
        print(f"FAIL: detfuse runs differ ({len(differ)} parameters)")
        return 1
    if not same_ok:
        print("FAIL: at the same parameters detfuse and F.cross_entropy disagree beyond LOSS_RTOL / GRAD_RTOL")
        return 2
    if not curves_ok:
        print("FAIL: detfuse's curve left the noise envelope of the two reference runs")
        return 3
    print(f"PASS: detfuse runs bitwise identical; same-parameter loss within {worst32:.1e} and step-0 gradients "
          f"within {max(g0['dX'], g0['dW']):.1e} of F.cross_entropy; independent curve within the measured envelope "
          f"({dev_max:.2e} <= {env_max:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
