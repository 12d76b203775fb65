"""detfuse.hf: Hugging Face Transformers integration. Small random configs
built offline (no download) for Llama, Qwen2, Mistral and Gemma-2.

Without a GPU (torch + transformers): unsupported models and inputs are
refused with their messages; the attention registration switches the model to
"detfuse"; on "meta" tensors (the custom ops' fake implementations) a training
forward gives a scalar loss and no logits, and backward reaches every weight.

On a GPU: each architecture trained twice with detfuse (attention and loss)
gives bitwise-identical parameters, and at step 0 its loss is within LOSS_RTOL
of transformers' own (SDPA attention, logits + ForCausalLMLoss) on the same
parameters; labels with -100, shift_labels and num_items_in_batch give the
values transformers' loss gives on the same logits (the fused loss alone, so
within FUSED_RTOL); Gemma-2's final-logit softcapping through the FLCE
softcap. Features detfuse's attention lacks in this build (Gemma-2's
attention softcapping, a sliding window shorter than the sequence) must be
refused naming the feature, or, once built, match the reference.

LOSS_RTOL 2e-3: at step 0 the two runs differ by bf16 roundings (detfuse and
SDPA round P or O to bf16 at different points; the logits are fp32 in detfuse,
bf16 under autocast in transformers), of order 2^-8 per element, which average
out in a loss near ln(V); a wrong mask, scale, shift or softcap changes the
loss by far more (a missing shift alone changes it by ~1e-2 relative at these
sizes, a dropped softcap at 30 by more).
FUSED_RTOL 1e-4: the same logits formed in fp32 by detfuse and by an fp32
matmul of the same bf16 values; they differ in summation order only.
"""
import importlib.util
import os
import unittest
from unittest import mock

import detfuse

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_TF = importlib.util.find_spec("transformers") is not None
if HAVE_TORCH:
    import torch
HAVE_CUDA = HAVE_TORCH and torch.cuda.is_available() and detfuse.device_count() > 0
if HAVE_TORCH and HAVE_TF:
    import detfuse.hf as dhf

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LOSS_RTOL = 2e-3
FUSED_RTOL = 1e-4
ARCHS = ("llama", "qwen2", "mistral", "gemma2")


def small_config(arch, **over):
    import transformers as tf

    common = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, attention_dropout=0.0,
                  tie_word_embeddings=False)
    if arch == "llama":
        cfg = tf.LlamaConfig(**common)
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(**common)
    elif arch == "mistral":
        cfg = tf.MistralConfig(**common, sliding_window=4096)
    elif arch == "gemma2":
        c = dict(common, tie_word_embeddings=True)
        cfg = tf.Gemma2Config(**c, head_dim=64, query_pre_attn_scalar=64, sliding_window=4096,
                              attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    else:
        raise ValueError(arch)
    for k, v in over.items():
        setattr(cfg, k, v)
    return cfg


def build(arch, seed=0, impl="sdpa", **over):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(small_config(arch, **over), attn_implementation=impl)


@unittest.skipUnless(HAVE_TORCH and HAVE_TF, "needs torch and transformers")
class HfCpuTest(unittest.TestCase):
    def test_unsupported_model_is_refused(self):
        from transformers import GPT2Config, GPT2LMHeadModel

        m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=64, vocab_size=100))
        with self.assertRaisesRegex(ValueError, r"model type 'gpt2' is not supported \(supported: llama, qwen2"):
            dhf.apply(m)

    def test_registration_and_refusals(self):
        for arch in ARCHS:
            with self.subTest(arch=arch):
                m = build(arch)
                dhf.apply(m, attention=True, loss=True)
                self.assertEqual(m.config._attn_implementation, "detfuse")
                with self.assertRaisesRegex(ValueError, "already applied"):
                    dhf.apply(m)
                ids = torch.randint(0, 1000, (2, 16))
                # CPU tensors: the attention's device check.
                with self.assertRaisesRegex(ValueError, "is on cpu; detfuse runs on CUDA devices only"):
                    m(input_ids=ids, labels=ids)
                pad = torch.ones(2, 16, dtype=torch.long)
                pad[0, :3] = 0
                with self.assertRaisesRegex(ValueError, "pads some positions; padding masks are not supported"):
                    m(input_ids=ids, attention_mask=pad)
                pos = torch.cat([torch.arange(8), torch.arange(8)]).unsqueeze(0).expand(2, -1)
                with self.assertRaisesRegex(ValueError, "packed sequences"):
                    m(input_ids=ids, position_ids=pos)
                with self.assertRaisesRegex(ValueError, "custom attention masks"):
                    m(input_ids=ids, attention_mask=torch.ones(2, 1, 16, 16, dtype=torch.bool))

    def test_dropout_is_refused(self):
        m = build("llama", attention_dropout=0.1)
        with self.assertRaisesRegex(ValueError, "attention_dropout 0.1 is not supported"):
            dhf.apply(m)

    def test_attention_function_refuses_masks_and_maps_the_window(self):
        class M:
            is_causal = True

        q = torch.empty(1, 4, 32, 64, dtype=torch.bfloat16, device="meta")
        k = torch.empty(1, 2, 32, 64, dtype=torch.bfloat16, device="meta")
        with self.assertRaisesRegex(ValueError, "got an attention mask tensor"):
            dhf.attention_forward(M(), q, k, k, torch.ones(1, 1, 32, 32, dtype=torch.bool))
        with self.assertRaisesRegex(ValueError, "output_attentions=True is not supported"):
            dhf.attention_forward(M(), q, k, k, None, output_attentions=True)
        out, w = dhf.attention_forward(M(), q, k, k, None, scaling=0.125, sliding_window=64)  # 32 keys: no-op window
        self.assertEqual((tuple(out.shape), w), ((1, 32, 4, 64), None))
        # The mask function: None for the plain causal pattern, a tensor otherwise.
        self.assertIsNone(dhf.attention_mask(1, 32, 32, attention_mask=None))
        self.assertIsNone(dhf.attention_mask(1, 32, 32, attention_mask=torch.ones(1, 32, dtype=torch.bool)))
        from transformers.masking_utils import causal_mask_function

        padded = torch.ones(1, 32, dtype=torch.bool)
        padded[0, 0] = False
        m = dhf.attention_mask(1, 32, 32, mask_function=causal_mask_function, attention_mask=padded)
        self.assertIsInstance(m, torch.Tensor)
        m = dhf.attention_mask(1, 32, 32, mask_function=causal_mask_function, allow_is_causal_skip=False)
        self.assertIsInstance(m, torch.Tensor)

    def test_meta_training_forward_has_no_logits_and_reaches_every_weight(self):
        for arch in ARCHS:
            with self.subTest(arch=arch):
                with torch.device("meta"):
                    m = build(arch).to(torch.bfloat16)
                dhf.apply(m)
                m.train()
                ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
                # transformers' packed-sequence probe reads a value (.all()), which
                # meta tensors do not have; the model's own positions are an arange.
                with mock.patch("transformers.masking_utils.find_packed_sequence_indices", return_value=None):
                    out = m(input_ids=ids, labels=ids, use_cache=False)
                self.assertIsNone(out.logits)
                self.assertEqual(tuple(out.loss.shape), ())
                out.loss.backward()
                missing = [n for n, p in m.named_parameters() if p.grad is None]
                self.assertEqual(missing, [])


@unittest.skipUnless(HAVE_TORCH and HAVE_TF, "needs torch and transformers")
class HfCompileCpuTest(unittest.TestCase):
    def test_compiled_training_forward_traces_fullgraph_on_meta(self):
        """torch.compile(fullgraph=True) of a training forward of an applied
        model: a graph break (the mask code, the hook, the attention function,
        the loss) would raise; aot_eager runs forward and backward on meta."""
        for arch in ("llama", "gemma2"):
            with self.subTest(arch=arch):
                torch._dynamo.reset()
                with torch.device("meta"):
                    m = build(arch).to(torch.bfloat16)
                dhf.apply(m)
                m.train()
                ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
                step = torch.compile(lambda i: m(input_ids=i, labels=i, use_cache=False).loss, fullgraph=True,
                                     backend="aot_eager")
                loss = step(ids)
                loss.backward()
                self.assertEqual(tuple(loss.shape), ())
                self.assertEqual([n for n, p in m.named_parameters() if p.grad is None], [])
        torch._dynamo.reset()


def train_digests(arch, steps, seed=0, tokens=None, apply=True, attention=True, impl="sdpa", **over):
    model = build(arch, seed=seed, impl=impl, **over).cuda().train()
    if apply:
        dhf.apply(model, attention=attention, loss=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=tokens, labels=tokens, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.loss))
    torch.cuda.synchronize()
    return {n: detfuse.digest(p.detach().contiguous()) for n, p in model.named_parameters()}, losses


@unittest.skipUnless(HAVE_CUDA and HAVE_TF, "needs transformers, torch with CUDA and a CUDA device")
class HfGpuTest(unittest.TestCase):
    def setUp(self):
        torch.use_deterministic_algorithms(True, warn_only=True)
        g = torch.Generator(device="cpu").manual_seed(1)
        self.tokens = torch.randint(0, 1000, (2, 128), generator=g).cuda()
        self.tokens[0, :5] = 3

    def tearDown(self):
        torch.use_deterministic_algorithms(False)

    def attention_or_refusal(self, arch, **over):
        """apply(attention=True) or the refusal naming a feature this build lacks."""
        m = build(arch, **over).cuda()
        try:
            dhf.apply(m)
            return None
        except NotImplementedError as e:
            msg = str(e)
            self.assertRegex(msg, r"needs attention with .*(softcap|sliding window)")
            self.assertRegex(msg, r"(softcap|window)")
            print(f"\n{arch}: refused as this build lacks the feature: {msg[:300]}")
            return msg

    def test_each_architecture_twice_bitwise_and_against_transformers(self):
        for arch in ARCHS:
            with self.subTest(arch=arch):
                refused = self.attention_or_refusal(arch)
                attention = refused is None
                a, la = train_digests(arch, 3, tokens=self.tokens, attention=attention)
                b, lb = train_digests(arch, 3, tokens=self.tokens, attention=attention)
                same = sum(a[n] == b[n] for n in a)
                print(f"\n{arch} (detfuse attention {'on' if attention else 'refused'}): {same} of {len(a)} "
                      f"parameters identical, losses {la}")
                self.assertEqual(a, b)
                self.assertEqual(la, lb)
                # transformers' eager attention: it applies Gemma-2's softcap
                # (its SDPA path drops the softcap kwarg).
                _, ref = train_digests(arch, 1, tokens=self.tokens, apply=False, impl="eager")
                rel = abs(la[0] - ref[0]) / abs(ref[0])
                print(f"{arch}: step-0 loss detfuse {la[0]:.6f} transformers {ref[0]:.6f} rel {rel:.2e}")
                self.assertLess(rel, LOSS_RTOL)

    def test_sliding_window_shorter_than_the_sequence(self):
        """A window of 32 over 128 keys: detfuse runs it and matches
        transformers' eager sliding-window attention, or refuses naming the
        window (or Gemma-2's softcap) while this build lacks the feature."""
        for arch in ("mistral", "gemma2"):
            with self.subTest(arch=arch):
                over = dict(sliding_window=32)
                try:
                    _, la = train_digests(arch, 1, tokens=self.tokens, **over)
                except NotImplementedError as e:
                    msg = str(e)
                    print(f"\n{arch} window 32: refused: {msg[:300]}")
                    self.assertTrue("sliding window 32 over 128 keys" in msg or "softcap=50" in msg, msg)
                    continue
                _, ref = train_digests(arch, 1, tokens=self.tokens, apply=False, impl="eager", **over)
                self.assertLess(abs(la[0] - ref[0]) / abs(ref[0]), LOSS_RTOL)

    def test_loss_matches_transformers_on_the_same_logits(self):
        """The fused loss against transformers' ForCausalLMLoss on fp32 logits
        of the same bf16 hidden states and weight: -100 labels, shift_labels,
        num_items_in_batch, Gemma-2's final softcap."""
        from transformers.loss.loss_utils import ForCausalLMLoss

        g = torch.Generator(device="cuda").manual_seed(5)
        h = torch.randn(2, 64, 128, generator=g, device="cuda").to(torch.bfloat16)
        w = (torch.randn(500, 128, generator=g, device="cuda") * 0.1).to(torch.bfloat16)
        labels = torch.randint(0, 500, (2, 64), generator=g, device="cuda")
        labels[:, :10] = -100
        logits = h.float() @ w.float().t()
        for kw in ({}, {"num_items_in_batch": torch.tensor(77, device="cuda")}, {"softcap": 30.0}):
            cap = kw.get("softcap")
            lg = cap * torch.tanh(logits / cap) if cap else logits
            ref = ForCausalLMLoss(lg, labels, 500, num_items_in_batch=kw.get("num_items_in_batch"))
            got = dhf.causal_lm_loss(h, w, labels, **kw)
            self.assertLess(abs(float(got) - float(ref)) / abs(float(ref)), FUSED_RTOL, kw)
        shift = torch.randint(0, 500, (2, 64), generator=g, device="cuda")
        ref = ForCausalLMLoss(logits, None, 500, shift_labels=shift)
        got = dhf.causal_lm_loss(h, w, None, shift_labels=shift)
        self.assertLess(abs(float(got) - float(ref)) / abs(float(ref)), FUSED_RTOL)

    def test_compiled_hf_step_is_reproducible_and_close_to_eager(self):
        """A compiled (fullgraph) training step of an applied Llama: two runs
        give identical gradients; the loss is the eager one's within LOSS_RTOL
        (Inductor fuses the model's other ops, so bits are not promised)."""
        def grads(compiled):
            torch._dynamo.reset()
            m = build("llama").cuda().train()
            dhf.apply(m)
            fn = lambda i: m(input_ids=i, labels=i, use_cache=False).loss  # noqa: E731
            if compiled:
                fn = torch.compile(fn, fullgraph=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fn(self.tokens)
            loss.backward()
            torch.cuda.synchronize()
            return float(loss), [detfuse.digest(p.grad.contiguous()) for p in m.parameters()]

        le, _ = grads(False)
        lc1, g1 = grads(True)
        lc2, g2 = grads(True)
        torch._dynamo.reset()
        print(f"\ncompiled hf step: loss eager {le:.6f} compiled {lc1:.6f}")
        self.assertEqual(g1, g2)
        self.assertEqual(lc1, lc2)
        self.assertLess(abs(lc1 - le) / abs(le), LOSS_RTOL)

    def test_eval_mode_keeps_the_logits(self):
        m = build("llama").cuda()
        dhf.apply(m)
        m.train()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = m(input_ids=self.tokens, labels=self.tokens, use_cache=False)
        self.assertIsNone(out.logits)
        m.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            out = m(input_ids=self.tokens, labels=self.tokens, use_cache=False)
        self.assertEqual(tuple(out.logits.shape), (2, 128, 1000))


if __name__ == "__main__":
    unittest.main()
