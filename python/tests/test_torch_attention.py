"""detfuse.torch.attention: argument checks (need torch, not a GPU) and the
GPU comparisons (need torch and a CUDA device; skipped otherwise, saying so).

The reference is torch's F.scaled_dot_product_attention in float64 on the
upcast inputs, with an explicit boolean mask: detfuse's causal mask is
bottom-right aligned (query i sees key j iff j <= i + Sk - Sq), SDPA's
is_causal is top-left aligned, so is_causal is never used. GQA is expanded with
repeat_interleave (head h reads kv head h // (H // Hkv)), whose backward sums
the group's gradients into each kv head. Rows that see no key: the reference
unmasks them (to keep SDPA finite) and multiplies their output by 0, which
gives O = 0 and zero gradients from those rows, detfuse's contract.

Tolerances (relative norm error against the float64 reference) are the
attention family's own (tests/attention/test_attention_gpu.cpp, issue 8):
1e-5 for O, dQ, dK, dV in fp32 (the fma engine computes in fp32 throughout,
expf/logf without fast math), 2e-2 in bf16 (outputs rounded to bf16, the
backward reads the bf16-rounded O; the wgmma forward rounds P to bf16), 1e-4
for the LSE. A wrong mask, scale or GQA mapping gives errors of order 1.
"""
import importlib.util
import math
import unittest

import detfuse
import detfuse.torch as dt

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if HAVE_TORCH:
    import torch
    import torch.nn.functional as F
HAVE_CUDA = HAVE_TORCH and torch.cuda.is_available() and detfuse.device_count() > 0

TOL = {"bf16": (2e-2, 2e-2), "fp32": (1e-5, 1e-5)}  # (O, gradients); LSE 1e-4


class WithoutTorchTest(unittest.TestCase):
    @unittest.skipIf(HAVE_TORCH, "torch is installed; this checks the message when it is not")
    def test_clear_import_error(self):
        with self.assertRaisesRegex(ImportError, "detfuse.torch needs PyTorch"):
            dt.attention(None, None, None)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class AttentionArgumentCheckTest(unittest.TestCase):
    """Refusals before anything runs; CPU tensors suffice (the library's
    problem checks need no GPU)."""

    def setUp(self):
        self.q = torch.randn(2, 4, 33, 64, dtype=torch.bfloat16)
        self.k = torch.randn(2, 2, 47, 64, dtype=torch.bfloat16)
        self.v = torch.randn(2, 2, 47, 64, dtype=torch.bfloat16)

    def test_cpu_tensors_are_refused(self):
        with self.assertRaisesRegex(ValueError, r"q: is on cpu; detfuse runs on CUDA devices only"):
            dt.attention(self.q, self.k, self.v)

    def test_dtypes(self):
        with self.assertRaisesRegex(TypeError, r"q: dtype must be torch.bfloat16 or torch.float32, got torch.float16"):
            dt.attention(self.q.half(), self.k.half(), self.v.half())
        with self.assertRaisesRegex(TypeError, r"k: dtype must equal q's \(torch.bfloat16\), got torch.float32"):
            dt.attention(self.q, self.k.float(), self.v)
        with self.assertRaisesRegex(TypeError, r"v: dtype must equal q's"):
            dt.attention(self.q, self.k, self.v.float())
        with self.assertRaisesRegex(TypeError, "q: must be a torch.Tensor, got list"):
            dt.attention([1.0], self.k, self.v)

    def test_shapes(self):
        with self.assertRaisesRegex(ValueError, r"q: must have shape \[B, H, Sq, d\], got \(4, 33, 64\)"):
            dt.attention(self.q[0], self.k, self.v)
        with self.assertRaisesRegex(ValueError, r"k: must have shape \[B, Hkv, Sk, d\]"):
            dt.attention(self.q, self.k[0], self.v[0])
        with self.assertRaisesRegex(ValueError, r"v: shape must equal k's \(2, 2, 47, 64\), got \(2, 2, 46, 64\)"):
            dt.attention(self.q, self.k, self.v[:, :, :46])
        with self.assertRaisesRegex(ValueError, r"k: batch 1 does not match q's 2"):
            dt.attention(self.q, self.k[:1], self.v[:1])
        with self.assertRaisesRegex(ValueError, r"k: head dim 32 does not match q's 64"):
            dt.attention(self.q, self.k[..., :32], self.v[..., :32])

    def test_gqa_heads_must_divide_the_library_says(self):
        k = torch.randn(2, 3, 47, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(detfuse.InvalidArgument, r"problem.Hkv: must divide H \(GQA\), got Hkv=3 H=4"):
            dt.attention(self.q, k, k)

    def test_options(self):
        with self.assertRaisesRegex(TypeError, "causal: must be a bool, got int"):
            dt.attention(self.q, self.k, self.v, causal=1)
        with self.assertRaisesRegex(ValueError, r"scale: must be > 0 \(None means 1/sqrt\(d\)\), got 0"):
            dt.attention(self.q, self.k, self.v, scale=0)
        with self.assertRaisesRegex(ValueError, "scale: must be > 0"):
            dt.attention(self.q, self.k, self.v, scale=float("nan"))
        # "tuned" is accepted (the store lookup runs on the device): these CPU
        # tensors then reach the device check.
        with self.assertRaisesRegex(ValueError, r"q: is on cpu; detfuse runs on CUDA devices only"):
            dt.attention(self.q, self.k, self.v, variant="tuned", db="/nonexistent.db")
        with self.assertRaisesRegex(TypeError, "backward_variant: must be a str"):
            dt.attention(self.q, self.k, self.v, backward_variant=3)
        with self.assertRaisesRegex(ValueError, r"window: must be >= 0 \(None or 0 disables\), got -1"):
            dt.attention(self.q, self.k, self.v, window=-1)


def rel_err(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def visible_mask(Sq, Sk, causal, device):
    """[Sq, Sk] bool: query i sees key j (bottom-right aligned causal)."""
    if not causal:
        return torch.ones(Sq, Sk, dtype=torch.bool, device=device)
    i = torch.arange(Sq, device=device)[:, None]
    j = torch.arange(Sk, device=device)[None, :]
    return j <= i + (Sk - Sq)


def reference(q, k, v, causal, scale=None):
    """float64 O, LSE and the leaf tensors (for their grads) from SDPA with an
    explicit mask; rows that see no key give O = 0, LSE = -inf."""
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    H, Hkv, Sq, Sk, d = q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    s = scale if scale is not None else 1.0 / math.sqrt(d)
    ke = kr.repeat_interleave(H // Hkv, dim=1)
    ve = vr.repeat_interleave(H // Hkv, dim=1)
    mask = visible_mask(Sq, Sk, causal, q.device)
    seen = mask.any(dim=-1)  # [Sq]
    safe = mask | ~seen[:, None]
    O = F.scaled_dot_product_attention(qr, ke, ve, attn_mask=safe, scale=s)
    O = O * seen[:, None].to(O.dtype)
    scores = (qr @ ke.transpose(-1, -2)) * s
    lse = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return O, lse.detach(), (qr, kr, vr), seen


@unittest.skipUnless(HAVE_CUDA, "needs torch with CUDA and a CUDA device")
class AttentionGpuTest(unittest.TestCase):
    # (B, H, Hkv, Sq, Sk, d, causal): square, GQA with odd lengths and a
    # bottom-right causal mask (Sq < Sk), Sq > Sk causal (the first Sq - Sk rows
    # see no key), MQA at d 128, a single query and key.
    SHAPES = [
        (2, 4, 4, 64, 64, 64, False),
        (1, 8, 2, 77, 100, 64, True),
        (2, 4, 1, 129, 33, 128, True),
        (1, 6, 3, 200, 300, 128, False),
        (1, 2, 2, 1, 1, 64, False),
        (1, 2, 1, 37, 37, 64, True),
    ]

    def make(self, B, H, Hkv, Sq, Sk, d, dtype, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        q = torch.randn(B, H, Sq, d, device="cuda", generator=g).to(dtype)
        k = torch.randn(B, Hkv, Sk, d, device="cuda", generator=g).to(dtype)
        v = torch.randn(B, Hkv, Sk, d, device="cuda", generator=g).to(dtype)
        dO = torch.randn(B, H, Sq, d, device="cuda", generator=g).to(dtype)
        return q, k, v, dO

    def check(self, shape, dtype, variant="heuristic", backward_variant=None, scale=None):
        B, H, Hkv, Sq, Sk, d, causal = shape
        tol_o, tol_g = TOL["bf16" if dtype == torch.bfloat16 else "fp32"]
        q, k, v, dO = self.make(B, H, Hkv, Sq, Sk, d, dtype)
        q.requires_grad_()
        k.requires_grad_()
        v.requires_grad_()
        O, lse = dt.attention(q, k, v, causal=causal, scale=scale, variant=variant,
                              backward_variant=backward_variant, return_lse=True)
        self.assertEqual((O.dtype, tuple(O.shape)), (dtype, (B, H, Sq, d)))
        self.assertEqual((lse.dtype, tuple(lse.shape)), (torch.float32, (B, H, Sq)))
        O.backward(dO)
        Or, lser, (qr, kr, vr), seen = reference(q, k, v, causal, scale)
        Or.backward(dO.double())
        for name, t in (("O", O), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
            self.assertFalse(torch.isnan(t).any().item(), f"{name} has NaN")
            self.assertEqual(t.dtype, dtype, name)
        self.assertLess(rel_err(O, Or), tol_o)
        if Sk == 1:
            # One key: P = 1, O = V, and dS = P * (dP - rowsum(dO * O)) = 0, so dq
            # and dk are zero in exact arithmetic and a relative error against the
            # (zero or rounding-sized) float64 reference means nothing; the fp32
            # kernel leaves dP - D at rounding size. Check them against the scale
            # of the upstream gradient instead.
            for name, t in (("dq", q.grad), ("dk", k.grad)):
                self.assertLess(float(t.double().norm() / dO.double().norm()), tol_g, name)
        else:
            self.assertLess(rel_err(q.grad, qr.grad), tol_g)
            self.assertLess(rel_err(k.grad, kr.grad), tol_g)
        self.assertLess(rel_err(v.grad, vr.grad), tol_g)
        if seen.any():
            self.assertLess(rel_err(lse[:, :, seen], lser[:, :, seen]), 1e-4)
        if not seen.all():
            # Rows that see no key: O = 0 exactly, LSE = -inf, zero dq rows.
            self.assertTrue((O[:, :, ~seen] == 0).all().item())
            self.assertTrue(torch.isneginf(lse[:, :, ~seen]).all().item())
            self.assertTrue((q.grad[:, :, ~seen] == 0).all().item())

    def test_matches_sdpa_float64(self):
        for dtype in (torch.bfloat16, torch.float32):
            for shape in self.SHAPES:
                with self.subTest(dtype=str(dtype), shape=shape):
                    self.check(shape, dtype)

    def test_explicit_scale(self):
        self.check((1, 4, 2, 50, 70, 64, True), torch.float32, scale=0.3)

    def test_every_strategy_by_name(self):
        names = detfuse.attention_variants()
        for dtype, tok in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
            for strategy in ("owning", "partials", "atomic"):
                name = next((n for n in names if n.startswith(f"attention.{tok}.fma.{strategy}.br32_bc32_w4_d64")),
                            None)
                self.assertIsNotNone(name, f"no fma {strategy} {tok} d64 variant in {names}")
                with self.subTest(variant=name):
                    self.check((1, 8, 2, 77, 100, 64, True), dtype, variant=name)

    def test_no_visible_key_rows_and_all_empty(self):
        # Sq=40 > Sk=8 causal: rows 0..31 see no key. Their gradients are zero,
        # and so is every gradient when the upstream gradient only touches them.
        B, H, Hkv, Sq, Sk, d = 1, 2, 1, 40, 8, 64
        q, k, v, _ = self.make(B, H, Hkv, Sq, Sk, d, torch.float32)
        for t in (q, k, v):
            t.requires_grad_()
        O = dt.attention(q, k, v, causal=True)
        up = torch.zeros_like(O)
        up[:, :, :Sq - Sk] = 1.0
        O.backward(up)
        self.assertTrue((O[:, :, :Sq - Sk] == 0).all().item())
        self.assertTrue((O[:, :, Sq - Sk:] != 0).any().item())
        for name, t in (("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
            self.assertTrue((t == 0).all().item(), f"{name} is not all zero")

    def test_repeated_calls_give_identical_digests(self):
        names = detfuse.attention_variants()
        partials = next(n for n in names if n.startswith("attention.bf16.fma.partials.br64_bc32_w4_d64"))
        for variant in ("heuristic", partials):
            with self.subTest(variant=variant):
                digests = set()
                for _ in range(3):
                    q, k, v, dO = self.make(1, 8, 2, 77, 100, 64, torch.bfloat16, seed=3)
                    for t in (q, k, v):
                        t.requires_grad_()
                    O, lse = dt.attention(q, k, v, causal=True, variant=variant, return_lse=True)
                    O.backward(dO)
                    digests.add(tuple(detfuse.digest(t) for t in (O.detach(), lse, q.grad, k.grad, v.grad)))
                self.assertEqual(len(digests), 1, digests)

    def test_eager_path_gives_the_ops_bits(self):
        # attention() outside torch.compile runs the ops' bodies through a plain autograd
        # function (no custom-op dispatch); the ops themselves must give the same bits, and
        # a repeated call must reuse the kept workspace size and backward check unchanged.
        from detfuse import _ops
        q, k, v, dO = self.make(2, 4, 2, 130, 200, 64, torch.bfloat16, seed=11)

        def leaves():
            return [t.detach().clone().requires_grad_() for t in (q, k, v)]

        results = []
        for path in ("eager", "eager again", "op"):
            lq, lk, lv = leaves()
            if path == "op":
                O, lse = torch.ops.detfuse.attention_forward(lq, lk, lv, True, 0.0, 0.0, 0, "heuristic", "heuristic",
                                                             "", False)
            else:
                O, lse = dt.attention(lq, lk, lv, causal=True, return_lse=True)
            O.backward(dO)
            results.append(tuple(detfuse.digest(t) for t in (O.detach(), lse, lq.grad, lk.grad, lv.grad)))
        self.assertEqual(results[0], results[1])
        self.assertEqual(results[0], results[2])
        self.assertTrue(_ops._workspace_sizes, "the eager path kept no workspace size")

    def test_side_stream_and_non_contiguous_inputs(self):
        # The same bits on a side stream and from non-contiguous inputs (copied).
        q, k, v, dO = self.make(2, 4, 2, 65, 90, 64, torch.bfloat16, seed=7)

        def run(qq, kk, vv):
            leaves = [t.detach().clone().requires_grad_() for t in (qq, kk, vv)]
            O = dt.attention(*leaves, causal=True)
            O.backward(dO)
            torch.cuda.current_stream().synchronize()
            return tuple(detfuse.digest(t.contiguous()) for t in (O.detach(), *(t.grad for t in leaves)))

        base = run(q, k, v)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            side = run(q, k, v)
        torch.cuda.synchronize()
        self.assertEqual(base, side)
        # [B, S, H, d] storage viewed as [B, H, S, d]: not contiguous.
        qt = q.transpose(1, 2).contiguous().transpose(1, 2)
        kt = k.transpose(1, 2).contiguous().transpose(1, 2)
        vt = v.transpose(1, 2).contiguous().transpose(1, 2)
        self.assertFalse(qt.is_contiguous())
        self.assertEqual(base, run(qt, kt, vt))

    def test_chosen_variants_and_library_refusals(self):
        q, k, v, _ = self.make(1, 4, 2, 33, 47, 64, torch.bfloat16)
        fwd, bwd = dt.chosen_attention_variants(q, k, v, causal=True)
        self.assertEqual((fwd.source, bwd.source), ("heuristic", "heuristic"))
        self.assertTrue(fwd.deterministic and bwd.deterministic)
        self.assertIn(fwd.name, detfuse.attention_variants())
        # Unsupported head dim: the library's message.
        q96, k96, v96, _ = self.make(1, 4, 2, 33, 47, 96, torch.bfloat16)
        with self.assertRaisesRegex(detfuse.InvalidArgument, "head dims 64 and 128"):
            dt.attention(q96, k96, v96)
        # A named variant of another head dim: refused with its can_run reason.
        d128 = next(n for n in detfuse.attention_variants() if n.startswith("attention.bf16.fma.owning.")
                    and n.endswith("_d128"))
        with self.assertRaisesRegex(detfuse.InvalidArgument, r"cannot run the forward of .*head dim 64"):
            dt.attention(q, k, v, variant=d128)

    def test_forward_only_variant_is_refused_for_backward(self):
        major, minor = torch.cuda.get_device_capability()
        wg = [n for n in detfuse.attention_variants() if ".wgmma.fwd." in n and n.endswith("_d64")]
        if not wg or (major, minor) != (9, 0):
            self.skipTest("no wgmma forward-only variant in this build, or not a compute capability 9.0 device")
        shape = (1, 8, 2, 77, 100, 64, True)
        q, k, v, _ = self.make(*shape[:6], torch.bfloat16)
        for t in (q, k, v):
            t.requires_grad_()
        with self.assertRaisesRegex(detfuse.InvalidArgument, r"cannot run the backward .*forward only.*backward_variant"):
            dt.attention(q, k, v, causal=True, variant=wg[0])
        with torch.no_grad():  # no gradients needed: the forward-only variant runs
            O = dt.attention(q, k, v, causal=True, variant=wg[0])
        self.assertLess(rel_err(O, reference(q, k, v, True)[0]), TOL["bf16"][0])
        self.check(shape, torch.bfloat16, variant=wg[0], backward_variant="heuristic")
        # attention() keeps its checks per call signature once they passed: the no-grad forward above
        # must not let the forward-only variant through for a backward afterwards.
        with self.assertRaisesRegex(detfuse.InvalidArgument, r"cannot run the backward .*forward only.*backward_variant"):
            dt.attention(q, k, v, causal=True, variant=wg[0])

    def test_checks_kept_per_signature_still_refuse(self):
        q, k, v, _ = self.make(1, 4, 2, 33, 47, 64, torch.bfloat16)
        O1 = dt.attention(q, k, v, causal=True)  # the checks pass and are kept for this signature
        # Options of another type or value with the same tensors: checked again, refused.
        with self.assertRaisesRegex(TypeError, "causal: must be a bool, got int"):
            dt.attention(q, k, v, causal=1)
        with self.assertRaisesRegex(ValueError, "scale: must be > 0"):
            dt.attention(q, k, v, causal=True, scale=0.0)
        with self.assertRaisesRegex(ValueError, r"window: must be >= 0"):
            dt.attention(q, k, v, causal=True, window=-1)
        with self.assertRaisesRegex(TypeError, "backward_variant: must be a str"):
            dt.attention(q, k, v, causal=True, backward_variant=3)
        # Another shape, dtype or device: checked again.
        with self.assertRaisesRegex(ValueError, r"k: batch 2 does not match q's 1"):
            dt.attention(q, torch.cat([k, k]), torch.cat([v, v]), causal=True)
        with self.assertRaisesRegex(TypeError, r"k: dtype must equal q's"):
            dt.attention(q, k.float(), v, causal=True)
        with self.assertRaisesRegex(ValueError, r"k: is on cpu"):
            dt.attention(q, k.cpu(), v, causal=True)
        # The kept signature runs as before: the same bits, grads too.
        self.assertTrue(torch.equal(O1, dt.attention(q, k, v, causal=True)))
        # A signature first seen without gradients, then with them: the backward is chosen then.
        for t in (q, k, v):
            t.requires_grad_()
        O2 = dt.attention(q, k, v, causal=True)
        O2.float().sum().backward()
        self.assertTrue(torch.equal(O1, O2.detach()))
        self.assertIsNotNone(q.grad)


if __name__ == "__main__":
    unittest.main()
