"""The torch.library custom ops (detfuse/_ops.py): registration, fake
implementations and autograd formulas without a GPU (on "meta" tensors, which
run the fake implementations), torch.compile(fullgraph=True) tracing on meta
tensors; and on a GPU torch.library.opcheck and a compiled training step whose
loss and gradients are bitwise those of the eager step.
"""
import importlib.util
import unittest

import detfuse
import detfuse.torch as dt

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if HAVE_TORCH:
    import torch
HAVE_CUDA = HAVE_TORCH and torch.cuda.is_available() and detfuse.device_count() > 0

OPS = ("flce_forward", "flce_forward_backward", "flce_backward", "attention_forward", "attention_backward")


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class RegistrationTest(unittest.TestCase):
    def test_ops_are_registered_with_their_schemas(self):
        for name in OPS:
            op = getattr(torch.ops.detfuse, name)
            self.assertTrue(hasattr(op, "default"), name)
        s = str(torch.ops.detfuse.attention_forward.default._schema)
        for part in ("Tensor q", "Tensor k", "Tensor v", "bool causal", "float scale", "float softcap", "SymInt window",
                     "str variant", "str backward_variant", "str db", "-> (Tensor, Tensor)"):
            self.assertIn(part, s)
        s = str(torch.ops.detfuse.flce_forward_backward.default._schema)
        self.assertIn("-> (Tensor, Tensor, Tensor, Tensor)", s)
        dt.register_ops()  # idempotent

    def test_old_autograd_functions_say_what_replaced_them(self):
        with self.assertRaisesRegex(AttributeError, "replaced by the torch.library custom ops"):
            dt.AttentionFunction  # noqa: B018


def meta(*shape, dtype=None, grad=False):
    t = torch.empty(*shape, dtype=dtype or torch.bfloat16, device="meta")
    return t.requires_grad_() if grad else t


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class FakeImplementationTest(unittest.TestCase):
    """Meta tensors dispatch to the fake implementations: shapes, dtypes and
    the autograd wiring, no GPU and no kernel."""

    def test_attention_shapes_and_gradients(self):
        for dtype in (torch.bfloat16, torch.float32):
            q, k, v = meta(2, 8, 33, 64, dtype=dtype, grad=True), meta(2, 2, 47, 64, dtype=dtype, grad=True), \
                meta(2, 2, 47, 64, dtype=dtype, grad=True)
            O, lse = dt.attention(q, k, v, causal=True, softcap=50.0, window=16, return_lse=True)
            self.assertEqual((tuple(O.shape), O.dtype, tuple(lse.shape), lse.dtype),
                             ((2, 8, 33, 64), dtype, (2, 8, 33), torch.float32))
            self.assertTrue(O.requires_grad)
            self.assertFalse(lse.requires_grad)  # marked non-differentiable
            gq, gk, gv = torch.autograd.grad(O.sum(), (q, k, v))
            self.assertEqual([tuple(g.shape) for g in (gq, gk, gv)], [(2, 8, 33, 64), (2, 2, 47, 64), (2, 2, 47, 64)])
            self.assertEqual({g.dtype for g in (gq, gk, gv)}, {dtype})

    def test_flce_shapes_every_mode(self):
        x, w = meta(4, 5, 64, grad=True), meta(100, 64, grad=True)
        y = torch.empty(4, 5, dtype=torch.int64, device="meta")
        for reduction, gif, shape in (("mean", True, ()), ("sum", False, ()), ("none", True, (4, 5))):
            loss, lse = dt.linear_cross_entropy(x, w, y, reduction=reduction, grad_in_forward=gif, return_lse=True)
            self.assertEqual((tuple(loss.shape), loss.dtype, tuple(lse.shape)), (shape, torch.float32, (4, 5)))
            gx, gw = torch.autograd.grad(loss.sum(), (x, w))
            self.assertEqual((tuple(gx.shape), gx.dtype, tuple(gw.shape)), ((4, 5, 64), torch.bfloat16, (100, 64)))
        with torch.no_grad():
            loss = dt.linear_cross_entropy(x, w, y)
        self.assertEqual(tuple(loss.shape), ())

    def test_ops_direct(self):
        x, w = meta(10, 64), meta(100, 64)
        y = torch.empty(10, dtype=torch.int64, device="meta")
        opts = (-100, "mean", 0.0, 0.0, 0.0, "heuristic", "", False)
        loss, lse, dX, dW = torch.ops.detfuse.flce_forward_backward(x, w, y, *opts)
        self.assertEqual([tuple(t.shape) for t in (loss, lse, dX, dW)], [(), (10,), (10, 64), (100, 64)])
        dX, dW = torch.ops.detfuse.flce_backward(x, w, y, lse, loss, *opts)
        self.assertEqual((tuple(dX.shape), tuple(dW.shape)), ((10, 64), (100, 64)))
        q, k = meta(1, 4, 9, 128), meta(1, 1, 12, 128)
        O, lse = torch.ops.detfuse.attention_forward(q, k, k, True, 0.0, 0.0, 0, "heuristic", "heuristic", "", False)
        dq, dk, dv = torch.ops.detfuse.attention_backward(O, q, k, k, O, lse, True, 0.0, 0.0, 0, "heuristic", "",
                                                          False)
        self.assertEqual([tuple(t.shape) for t in (O, lse, dq, dk, dv)],
                         [(1, 4, 9, 128), (1, 4, 9), (1, 4, 9, 128), (1, 1, 12, 128), (1, 1, 12, 128)])

    def test_compile_fullgraph_traces_both_ops(self):
        """torch.compile(fullgraph=True) traces a step through both ops (a graph
        break would raise); aot_eager runs the traced forward and backward on
        meta tensors."""
        torch._dynamo.reset()

        def step(q, k, v, w, y):
            o = dt.attention(q, k, v, causal=True)  # [B, H, S, d]
            x = o.transpose(1, 2).reshape(o.shape[0] * o.shape[2], -1)
            return dt.linear_cross_entropy(x, w, y.reshape(-1))

        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        q, k, v = meta(2, 4, 16, 64, grad=True), meta(2, 2, 16, 64, grad=True), meta(2, 2, 16, 64, grad=True)
        w = meta(50, 256, grad=True)
        y = torch.empty(2, 16, dtype=torch.int64, device="meta")
        loss = compiled(q, k, v, w, y)
        self.assertEqual(tuple(loss.shape), ())
        grads = torch.autograd.grad(loss, (q, k, v, w))
        self.assertEqual([tuple(g.shape) for g in grads], [(2, 4, 16, 64), (2, 2, 16, 64), (2, 2, 16, 64), (50, 256)])
        torch._dynamo.reset()

    def test_option_checks_without_a_gpu(self):
        q, k = meta(1, 4, 9, 64), meta(1, 2, 9, 64)
        with self.assertRaisesRegex(TypeError, "softcap: must be a float or None, got str"):
            dt.attention(q, k, k, softcap="50")
        with self.assertRaisesRegex(ValueError, r"softcap: must be >= 0 \(None or 0 disables\), got -1"):
            dt.attention(q, k, k, softcap=-1.0)
        with self.assertRaisesRegex(TypeError, "window: must be an int or None, got float"):
            dt.attention(q, k, k, window=4.0)
        with self.assertRaisesRegex(ValueError, "window: must be >= 0"):
            dt.attention(q, k, k, window=-3)
        with self.assertRaisesRegex(TypeError, "db: must be a path, got int"):
            dt.attention(q, k, k, variant="tuned", db=3)
        with self.assertRaisesRegex(ValueError, r"q: is on cpu"):
            qc, kc = torch.zeros(q.shape, dtype=q.dtype), torch.zeros(k.shape, dtype=k.dtype)
            dt.attention(qc, kc, kc, window=4)


def digest_all(ts):
    return [detfuse.digest(t.detach().contiguous()) for t in ts]


@unittest.skipUnless(HAVE_CUDA, "needs torch with CUDA and a CUDA device")
class CompiledStepGpuTest(unittest.TestCase):
    # The step: q, k, v and the output weight are leaves, so everything
    # between the two ops is a view or a copy (exact) and the comparison is
    # about the ops and their autograd formulas under AOTAutograd + Inductor.
    # (A matmul outside the ops may take another cuBLAS algorithm once
    # AOTAutograd rewrites its backward, which is not detfuse's to promise.)
    def make(self, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        B, H, Hkv, S, d, V = 2, 8, 2, 128, 64, 1000
        mk = lambda *s: (torch.randn(*s, generator=g, device="cuda") * 0.5).to(torch.bfloat16)  # noqa: E731
        q, k, v = mk(B, S, H, d), mk(B, S, Hkv, d), mk(B, S, Hkv, d)
        w = mk(V, H * d) * 0.1
        y = torch.randint(0, V, (B * S,), generator=g, device="cuda")
        y[::7] = -100
        params = [t.requires_grad_() for t in (q, k, v, w)]
        return params, y

    @staticmethod
    def step(q, k, v, w, y):
        B, S, H, d = q.shape
        o = dt.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        h = o.transpose(1, 2).reshape(B * S, H * d)
        return dt.linear_cross_entropy(h, w, y)

    def run_step(self, fn):
        params, y = self.make()
        loss = fn(*params, y)
        loss.backward()
        torch.cuda.synchronize()
        return digest_all([loss] + [p.grad for p in params]), float(loss)

    def test_compiled_step_matches_eager_bits(self):
        torch._dynamo.reset()
        eager, le = self.run_step(self.step)
        compiled_fn = torch.compile(self.step, fullgraph=True)
        compiled, lc = self.run_step(compiled_fn)
        again, _ = self.run_step(compiled_fn)
        print(f"\ncompiled step: loss eager {le:.6f} compiled {lc:.6f}; digests eager {eager[:2]} compiled {compiled[:2]}")
        self.assertEqual(compiled, again, "two compiled steps differ")
        self.assertEqual(compiled, eager, "the compiled step (fullgraph=True) differs from the eager one")
        torch._dynamo.reset()

    def test_opcheck(self):
        g = torch.Generator(device="cuda").manual_seed(3)
        q = torch.randn(1, 4, 40, 64, generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, 2, 40, 64, generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, 2, 40, 64, generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        a = (q, k, v, True, 0.0, 0.0, 0, "heuristic", "heuristic", "", False)
        # test_aot_dispatch_dynamic compares gradients of two runs: our ops are
        # deterministic, so the comparison is exact.
        torch.library.opcheck(torch.ops.detfuse.attention_forward, a)
        x = torch.randn(64, 64, generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(300, 64, generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, 300, (64,), generator=g, device="cuda")
        for red in ("mean", "none"):
            torch.library.opcheck(torch.ops.detfuse.flce_forward, (x, w, y, -100, red, 0.0, 0.0, 0.0, "heuristic", "",
                                                                   False))
        torch.library.opcheck(torch.ops.detfuse.flce_forward_backward,
                              (x, w, y, -100, "mean", 0.0, 0.0, 0.0, "heuristic", "", False))

    def test_tuned_attention_without_store_is_the_heuristic(self):
        g = torch.Generator(device="cuda").manual_seed(4)
        q = torch.randn(1, 4, 40, 64, generator=g, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 2, 40, 64, generator=g, device="cuda", dtype=torch.bfloat16)
        fwd, bwd = dt.chosen_attention_variants(q, k, k, causal=True, variant="tuned", db="/nonexistent/x.db")
        hf, hb = dt.chosen_attention_variants(q, k, k, causal=True)
        self.assertEqual((fwd.name, bwd.name), (hf.name, hb.name))
        self.assertEqual((fwd.source, bwd.source), ("heuristic", "heuristic"))
        self.assertIn("no tuning database at /nonexistent/x.db", fwd.note)
        o_t = dt.attention(q, k, k, causal=True, variant="tuned", db="/nonexistent/x.db")
        o_h = dt.attention(q, k, k, causal=True)
        self.assertEqual(detfuse.digest(o_t), detfuse.digest(o_h))


if __name__ == "__main__":
    unittest.main()
