"""detfuse.torch: argument checks (need torch, not a GPU) and the GPU
comparisons with F.cross_entropy (need torch and a CUDA device). Each class
skips with its reason where its needs are not met."""
import importlib.util
import unittest

import detfuse
import detfuse.torch as dt

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if HAVE_TORCH:
    import torch
    import torch.nn.functional as F
HAVE_CUDA = HAVE_TORCH and torch.cuda.is_available() and detfuse.device_count() > 0


class WithoutTorchTest(unittest.TestCase):
    @unittest.skipIf(HAVE_TORCH, "torch is installed; this checks the message when it is not")
    def test_clear_import_error(self):
        with self.assertRaisesRegex(ImportError, "detfuse.torch needs PyTorch"):
            dt.linear_cross_entropy(None, None, None)
        with self.assertRaisesRegex(ImportError, "detfuse.torch needs PyTorch"):
            dt.LinearCrossEntropy  # noqa: B018


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class ArgumentCheckTest(unittest.TestCase):
    """Refusals before the library is called; CPU tensors suffice."""

    def setUp(self):
        self.x = torch.randn(4, 6, 16, dtype=torch.bfloat16)
        self.w = torch.randn(32, 16, dtype=torch.bfloat16)
        self.y = torch.randint(0, 32, (4, 6))

    def test_cpu_tensors_are_refused(self):
        with self.assertRaisesRegex(ValueError, r"x: is on cpu; detfuse runs on CUDA devices only"):
            dt.linear_cross_entropy(self.x, self.w, self.y)

    def test_level_is_checked_before_the_device(self):
        with self.assertRaisesRegex(ValueError, r"level: unknown determinism level 'fast' \(one of none, run_to_run"):
            dt.linear_cross_entropy(self.x, self.w, self.y, level="fast")
        with self.assertRaisesRegex(ValueError, r"level: 'config' needs variant='tuned'"):
            dt.linear_cross_entropy(self.x, self.w, self.y, variant="heuristic", level="config")
        with self.assertRaisesRegex(ValueError, r"level: unknown determinism level 'x'"):
            dt.chosen_variant(self.x, self.w, self.y, level="x")
        q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, r"level: 'config' needs variant='tuned'"):
            dt.attention(q, q, q, level="config")  # the default variant is "heuristic"
        with self.assertRaisesRegex(ValueError, r"level: 'config' needs backward_variant None or 'tuned'"):
            dt.attention(q, q, q, variant="tuned", backward_variant="heuristic", level="config")
        with self.assertRaisesRegex(ValueError, r"q: is on cpu"):  # a good level gets as far as the device check
            dt.chosen_attention_variants(q, q, q, variant="tuned", level="config")

    def test_bias_is_refused(self):
        with self.assertRaisesRegex(ValueError, "bias: not supported"):
            dt.linear_cross_entropy(self.x, self.w, self.y, bias=torch.zeros(32))

    def test_main_grad_is_checked(self):
        def call(mg, **kw):
            dt.linear_cross_entropy(self.x, self.w, self.y, main_grad=mg, **kw)
        with self.assertRaisesRegex(TypeError, r"main_grad: must be a torch.Tensor \(fp32 \[V, D\]\) or None"):
            call(1.0)
        with self.assertRaisesRegex(TypeError, r"main_grad: dtype must be torch.float32"):
            call(torch.zeros(32, 16, dtype=torch.bfloat16))
        with self.assertRaisesRegex(ValueError, r"main_grad: shape must be weight's \(32, 16\), got \(16, 32\)"):
            call(torch.zeros(16, 32))
        with self.assertRaisesRegex(ValueError, r"main_grad: must be contiguous"):
            call(torch.zeros(16, 32).t())
        with self.assertRaisesRegex(ValueError, r"main_grad: needs reduction 'mean' or 'sum'"):
            call(torch.zeros(32, 16), reduction="none")
        with self.assertRaisesRegex(ValueError, r"main_grad: dW is summed into it in the forward; grad_in_forward"):
            call(torch.zeros(32, 16), grad_in_forward=False)

    def test_dtypes(self):
        with self.assertRaisesRegex(TypeError, r"x: dtype must be torch.bfloat16 or torch.float32, got torch.float16"):
            dt.linear_cross_entropy(self.x.half(), self.w.half(), self.y)
        with self.assertRaisesRegex(TypeError, r"weight: dtype must equal x's \(torch.bfloat16\), got torch.float32"):
            dt.linear_cross_entropy(self.x, self.w.float(), self.y)
        with self.assertRaisesRegex(TypeError, r"target: dtype must be torch.int64 .* got torch.int32"):
            dt.linear_cross_entropy(self.x, self.w, self.y.int())
        with self.assertRaisesRegex(TypeError, "x: must be a torch.Tensor, got list"):
            dt.linear_cross_entropy([1.0], self.w, self.y)

    def test_shapes(self):
        with self.assertRaisesRegex(ValueError, r"weight: shape \(32, 8\) does not match x's last dimension D=16"):
            dt.linear_cross_entropy(self.x, self.w[:, :8], self.y)
        with self.assertRaisesRegex(ValueError, r"weight: must have shape \[V, D\]"):
            dt.linear_cross_entropy(self.x, self.w[0], self.y)
        with self.assertRaisesRegex(ValueError, r"target: shape must be x.shape\[:-1\] = \(4, 6\), got \(24,\)"):
            dt.linear_cross_entropy(self.x, self.w, self.y.reshape(-1))

    def test_options_are_checked_by_the_library_before_the_device(self):
        with self.assertRaisesRegex(ValueError, "reduction: must be 'mean', 'sum' or 'none'"):
            dt.linear_cross_entropy(self.x, self.w, self.y, reduction="avg")
        with self.assertRaisesRegex(detfuse.InvalidArgument, r"problem.label_smoothing: must be in \[0, 1\)"):
            dt.linear_cross_entropy(self.x, self.w, self.y, label_smoothing=1.0)
        with self.assertRaisesRegex(detfuse.InvalidArgument, "problem.z_loss"):
            dt.linear_cross_entropy(self.x, self.w, self.y, z_loss=-0.1)
        with self.assertRaisesRegex(detfuse.InvalidArgument, "problem.ignore_index"):
            dt.linear_cross_entropy(self.x, self.w, self.y, ignore_index=3)

    def test_module_and_cpu_digest(self):
        m = dt.LinearCrossEntropy(reduction="sum")
        self.assertIsInstance(m, torch.nn.Module)
        self.assertIn("reduction='sum'", repr(m))
        t = torch.arange(10, dtype=torch.int32)
        self.assertEqual(detfuse.digest(t), detfuse.digest(t.numpy().tobytes()))
        with self.assertRaisesRegex(ValueError, "digest: tensor is not contiguous"):
            detfuse.digest(torch.zeros(4, 4).t())


def rel_err(a, b):
    """||a - b|| / ||b|| in float64 (bf16 results against a float64 reference)."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@unittest.skipUnless(HAVE_CUDA, "needs torch with CUDA and a CUDA device")
class GpuTest(unittest.TestCase):
    def make(self, D=256, V=1000, dtype=None, lead=(3, 100)):
        dtype = dtype or torch.bfloat16
        g = torch.Generator(device="cuda").manual_seed(0)
        x = (torch.randn(*lead, D, device="cuda", generator=g) * 0.5).to(dtype)
        w = (torch.randn(V, D, device="cuda", generator=g) * 0.05).to(dtype)
        y = torch.randint(0, V, lead, device="cuda", generator=g)
        y[0, ::7] = -100
        return x, w, y

    def reference(self, x, w, y, reduction, **kw):
        xr = x.detach().double().requires_grad_()
        wr = w.detach().double().requires_grad_()
        logits = xr @ wr.t()
        if kw.get("softcap"):
            logits = kw["softcap"] * torch.tanh(logits / kw["softcap"])
        loss = F.cross_entropy(logits.reshape(-1, w.shape[0]), y.reshape(-1), ignore_index=-100,
                               reduction=reduction, label_smoothing=kw.get("label_smoothing", 0.0))
        return loss, xr, wr

    def test_matches_cross_entropy_every_mode(self):
        for reduction in ("mean", "sum", "none"):
            for grad_in_forward in (True, False):
                for opts in ({}, {"label_smoothing": 0.1}, {"softcap": 30.0}):
                    with self.subTest(reduction=reduction, grad_in_forward=grad_in_forward, **opts):
                        x, w, y = self.make()
                        x.requires_grad_()
                        w.requires_grad_()
                        loss = dt.linear_cross_entropy(x, w, y, reduction=reduction, variant="heuristic",
                                                       grad_in_forward=grad_in_forward, **opts)
                        ref, xr, wr = self.reference(x, w, y, reduction, **opts)
                        up = torch.rand_like(ref) if reduction == "none" else torch.tensor(1.7, device="cuda",
                                                                                            dtype=ref.dtype)
                        (loss.double().reshape(ref.shape) * up).sum().backward()
                        (ref * up).sum().backward()
                        self.assertEqual(x.grad.dtype, x.dtype)
                        self.assertEqual(w.grad.dtype, w.dtype)
                        self.assertLess(rel_err(loss.reshape(ref.shape), ref), 1e-2)
                        self.assertLess(rel_err(x.grad, xr.grad), 2e-2)
                        self.assertLess(rel_err(w.grad, wr.grad), 2e-2)

    def test_repeated_calls_have_identical_gradient_digests(self):
        digests = set()
        for _ in range(3):
            x, w, y = self.make()
            x.requires_grad_()
            w.requires_grad_()
            dt.linear_cross_entropy(x, w, y, variant="heuristic").backward()
            digests.add((detfuse.digest(x.grad), detfuse.digest(w.grad)))
        self.assertEqual(len(digests), 1, digests)

    def test_upstream_gradient_of_one_hands_over_the_forwards_gradients(self):
        # The backward gives autograd the forward's dX, dW themselves. With the
        # host-read backward (_ops.SYNC_FREE_BACKWARD = False) and g = 1 a second
        # backward through the retained graph adds them into x.grad /
        # weight.grad, which are them: 2 x, exact; a third finds the saved
        # tensors changed and PyTorch refuses it. With the default sync-free
        # backward the first already counts as a change in place: the second
        # is refused. With grad_in_forward=False three backwards of one graph
        # give 3 x the gradient exactly (d + d = 2d; 2d + d and 3 * d both round
        # the exact 3d).
        from detfuse import _ops as ops_mod
        for variant in ("heuristic", "flce.bf16.cublaslt.owning.mb1024"):
            with self.subTest(variant=variant):
                x, w, y = self.make()
                x.requires_grad_()
                w.requires_grad_()
                loss = dt.linear_cross_entropy(x, w, y, variant=variant)
                loss.backward(retain_graph=True)
                default_x, default_w = x.grad.clone(), w.grad.clone()
                with self.assertRaisesRegex(RuntimeError, r"modified by an inplace operation"):
                    loss.backward(retain_graph=True)
                x.grad = w.grad = None
                ops_mod.SYNC_FREE_BACKWARD = False
                try:
                    loss = dt.linear_cross_entropy(x, w, y, variant=variant)
                finally:
                    ops_mod.SYNC_FREE_BACKWARD = True
                loss.backward(retain_graph=True)
                once_x, once_w = x.grad.clone(), w.grad.clone()
                self.assertTrue(torch.equal(once_x, default_x))
                self.assertTrue(torch.equal(once_w, default_w))
                loss.backward(retain_graph=True)  # into w.grad, which is the saved dW: 2 x, exactly
                self.assertTrue(torch.equal(x.grad, (once_x.float() * 2).to(x.dtype)))
                self.assertTrue(torch.equal(w.grad, (once_w.float() * 2).to(w.dtype)))
                with self.assertRaisesRegex(RuntimeError, r"modified by an inplace operation"):
                    loss.backward()  # the saved gradients were added to in place: refused, not reused
                x.grad = w.grad = None
                dt.linear_cross_entropy(x, w, y, variant=variant).backward()
                self.assertTrue(torch.equal(x.grad, once_x))
                self.assertTrue(torch.equal(w.grad, once_w))
                x.grad = w.grad = None
                loss = dt.linear_cross_entropy(x, w, y, variant=variant, grad_in_forward=False)
                loss.backward(retain_graph=True)
                once_x, once_w = x.grad.clone(), w.grad.clone()
                loss.backward(retain_graph=True)
                loss.backward()
                self.assertTrue(torch.equal(x.grad, (once_x.float() * 3).to(x.dtype)))
                self.assertTrue(torch.equal(w.grad, (once_w.float() * 3).to(w.dtype)))

    def test_eager_function_gives_the_ops_bits(self):
        # linear_cross_entropy's eager path (autograd.Function, no custom-op
        # dispatch) and the op path run the same library call: the same loss,
        # dX and dW bits, with the upstream gradient 1 and with another one.
        from detfuse import _ops as ops_mod
        for variant in ("heuristic", "flce.bf16.cublaslt.owning.mb1024"):
            for scale in (1.0, 0.5):
                with self.subTest(variant=variant, scale=scale):
                    x, w, y = self.make()
                    got = []
                    for eager in (True, False):
                        ops_mod.EAGER_FUNCTION = eager
                        try:
                            xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
                            loss = dt.linear_cross_entropy(xx, ww, y, variant=variant)
                            (loss * scale).backward()
                            got.append((loss.detach(), xx.grad, ww.grad))
                        finally:
                            ops_mod.EAGER_FUNCTION = True
                    def bits(t):
                        return t.view(torch.int16 if t.element_size() == 2 else torch.int32)

                    for a, b in zip(*got):
                        self.assertTrue(torch.equal(bits(a), bits(b)))

    def test_sync_free_backward_gives_the_same_bits(self):
        # _ops.SYNC_FREE_BACKWARD: the upstream gradient applied on the device
        # (detfuse_scale_unless_one) gives the bits of the host-read path, for
        # g = 1, 0.5 and 3 (through the eager function and the op); a second
        # backward through the retained graph is refused, not summed.
        from detfuse import _ops as ops_mod

        def bits(t):
            return t.view(torch.int16 if t.element_size() == 2 else torch.int32)

        for variant in ("heuristic", "flce.bf16.cublaslt.owning.mb1024"):
            for scale in (1.0, 0.5, 3.0):
                for eager in (True, False):
                    with self.subTest(variant=variant, scale=scale, eager=eager):
                        x, w, y = self.make()
                        got = []
                        for sync_free in (False, True):
                            ops_mod.SYNC_FREE_BACKWARD, ops_mod.EAGER_FUNCTION = sync_free, eager
                            try:
                                xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
                                loss = dt.linear_cross_entropy(xx, ww, y, variant=variant)
                            finally:
                                ops_mod.SYNC_FREE_BACKWARD, ops_mod.EAGER_FUNCTION = True, True
                            (loss * scale).backward(retain_graph=True)
                            got.append((xx.grad.clone(), ww.grad.clone()))
                            if sync_free:
                                with self.assertRaisesRegex(RuntimeError, r"modified by an inplace operation"):
                                    loss.backward()
                        for a, b in zip(*got):
                            self.assertTrue(torch.equal(bits(a), bits(b)))

    def test_main_grad_sums_dW_in_fp32_without_a_weight_grad(self):
        # main_grad += dW in the forward; the same variant without main_grad
        # gives the bf16 rounding of the same fp32 sums (through its fp32
        # accumulator, or for one chunk stored as bf16 by the dW product
        # itself): equal values (torch.equal: the accumulating chain may give
        # +0 where the other gives -0). Twice from the same start: identical bits. Onto a nonzero
        # start: start + dW within the bf16 tolerance of the float64 reference.
        for variant in ("heuristic", "flce.bf16.cublaslt.owning.mb1024"):
            with self.subTest(variant=variant):
                x, w, y = self.make()
                x.requires_grad_()
                w.requires_grad_()
                dt.linear_cross_entropy(x, w, y, variant=variant).backward()
                plain_dX, plain_dW = x.grad.clone(), w.grad.clone()
                x.grad = w.grad = None
                digests = set()
                for _ in range(2):
                    mg = torch.zeros(w.shape, dtype=torch.float32, device="cuda")
                    loss = dt.linear_cross_entropy(x, w, y, variant=variant, main_grad=mg)
                    loss.backward()
                    self.assertIsNone(w.grad)
                    self.assertTrue(torch.equal(x.grad, plain_dX))
                    self.assertTrue(torch.equal(mg.to(torch.bfloat16), plain_dW))
                    digests.add(detfuse.digest(mg))
                    x.grad = None
                self.assertEqual(len(digests), 1, digests)
                start = torch.randn(w.shape, dtype=torch.float32, device="cuda") * 1e-3
                mg = start.clone()
                dt.linear_cross_entropy(x, w, y, variant=variant, main_grad=mg).backward()
                ref, xr, wr = self.reference(x, w, y, "mean")
                ref.backward()
                self.assertLess(rel_err(mg, start.double() + wr.grad), 2e-2)

    def test_main_grad_refuses_an_upstream_gradient_other_than_one(self):
        x, w, y = self.make()
        w.requires_grad_()
        mg = torch.zeros(w.shape, dtype=torch.float32, device="cuda")
        msg = r"main_grad already holds dW for an upstream gradient of 1 .*the loss's gradient is 0\.25"
        ops_mod = detfuse._ops
        try:  # host-read: the backward raises
            ops_mod.SYNC_FREE_BACKWARD = False
            loss = dt.linear_cross_entropy(x, w, y, main_grad=mg)
            with self.assertRaisesRegex(RuntimeError, msg):
                (loss / 4).backward()
        finally:
            ops_mod.SYNC_FREE_BACKWARD = True
        # sync-free (the default): the backward returns; check_main_grad() raises, once
        dt.linear_cross_entropy(x, w, y, main_grad=mg).backward()
        dt.check_main_grad()  # g = 1: nothing to report
        (dt.linear_cross_entropy(x, w, y, main_grad=mg) / 4).backward()
        with self.assertRaisesRegex(RuntimeError, msg):
            dt.check_main_grad()
        dt.check_main_grad()
        # ... or the next main_grad= call, before it touches main_grad
        (dt.linear_cross_entropy(x, w, y, main_grad=mg) / 4).backward()
        torch.cuda.synchronize()
        before = mg.clone()
        with self.assertRaisesRegex(RuntimeError, msg):
            dt.linear_cross_entropy(x, w, y, main_grad=mg)
        self.assertTrue(torch.equal(mg, before))
        dt.linear_cross_entropy(x, w, y, main_grad=mg).backward()
        dt.check_main_grad()
        with torch.no_grad():  # no gradient wanted: main_grad is left alone
            mg2 = torch.zeros_like(mg)
            dt.linear_cross_entropy(x, w, y, main_grad=mg2)
        self.assertEqual(int(mg2.count_nonzero()), 0)

    def test_chosen_variant_and_lse(self):
        x, w, y = self.make()
        c = dt.chosen_variant(x, w, y, db="/nonexistent.db")
        self.assertIn(c.source, ("tuned", "nearest", "heuristic"))
        self.assertIn(c.name, detfuse.variants())
        loss, lse = dt.linear_cross_entropy(x, w, y, return_lse=True, variant=c.name)
        self.assertEqual(lse.shape, y.shape)
        ref = torch.logsumexp(x.double() @ w.double().t(), dim=-1)
        self.assertLess(rel_err(lse, ref), 1e-2)


    def test_a_level_no_stored_result_has_falls_back_to_the_heuristic(self):
        x, w, y = self.make()
        c = dt.chosen_variant(x, w, y, db="/nonexistent.db", level="portable")
        self.assertEqual(c.source, "heuristic")
        self.assertIn("its determinism level was never shown (asked for portable)", c.note)
        loss = dt.linear_cross_entropy(x, w, y, db="/nonexistent.db", level="portable")
        self.assertEqual(detfuse.digest(loss), detfuse.digest(dt.linear_cross_entropy(x, w, y, variant=c.name)))

    def test_heuristic_is_reported_as_what_runs(self):
        # The built-in default (kernels/flce/flce.cpp): bf16 runs the hybrid
        # wgmmalt owning variant (ot1: the TMA-store logits) at 1024 MiB on compute capability 9.0 when the
        # library has it (built with the wgmma engine), else the cuBLASLt
        # engine's owning variant at 1024 MiB; fp32 the FMA owning one.
        # chosen_variant must say so, and running "heuristic" must give the
        # bits of running that variant by name.
        hybrid = "flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024"
        on_hopper = torch.cuda.get_device_capability() == (9, 0) and hybrid in detfuse.variants()
        want = {torch.bfloat16: hybrid if on_hopper else "flce.bf16.cublaslt.owning.mb1024",
                torch.float32: "flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb1024"}
        for dtype, name in want.items():
            for grad_in_forward in (True, False):
                with self.subTest(dtype=dtype, grad_in_forward=grad_in_forward):
                    x, w, y = self.make(dtype=dtype)
                    c = dt.chosen_variant(x, w, y, variant="heuristic", grad_in_forward=grad_in_forward)
                    self.assertEqual((c.name, c.source, c.deterministic), (name, "heuristic", True), c.note)
                    c = dt.chosen_variant(x, w, y, db="/nonexistent.db", grad_in_forward=grad_in_forward)
                    self.assertEqual((c.name, c.source), (name, "heuristic"), c.note)
                    self.assertIn("no tuning database", c.note)
                    digests = set()
                    for v in ("heuristic", name):
                        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
                        loss = dt.linear_cross_entropy(xg, wg, y, variant=v, grad_in_forward=grad_in_forward)
                        loss.backward()
                        digests.add((detfuse.digest(loss.detach().reshape(1)), detfuse.digest(xg.grad),
                                     detfuse.digest(wg.grad)))
                    self.assertEqual(len(digests), 1, digests)

if __name__ == "__main__":
    unittest.main()
