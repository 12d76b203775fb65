"""The FLCE ops' launch path (detfuse/_ops.py _flce_launch, issue 17): one
selection per call. For "heuristic" and named variants the selection is
resolved and the workspace size asked once per (problem, mode, selection,
device), then each call only runs (the heuristic's choice by name); "tuned"
asks at every call. Checked without torch, a GPU or the library: a stand-in
for torch and the C ABI functions record what each call asks for. On a GPU
(torch and a device): a target outside [0, V) still raises InvalidArgument
through linear_cross_entropy, with the C++ message, and the heuristic's cached
path gives the named variant's bits.
"""
import contextlib
import importlib.util
import unittest
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

import detfuse
from detfuse import _lib, _ops

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if HAVE_TORCH:
    import torch
HAVE_CUDA = HAVE_TORCH and torch.cuda.is_available() and detfuse.device_count() > 0


@dataclass(frozen=True)
class FakeDevice:
    type: str = "cuda"
    index: int = 0


class FakeTensor:
    def __init__(self, shape, dtype="bf16", device=FakeDevice(), ptr=4096):
        self.shape, self.dtype, self.device, self.ptr = shape, dtype, device, ptr

    def data_ptr(self):
        return self.ptr


class FakeTorch:
    """What _flce_launch touches of torch: the current device and stream, torch.empty."""

    uint8 = "uint8"

    def __init__(self):
        self.empties = []
        self.cuda = SimpleNamespace(current_device=lambda: 0,
                                    current_stream=lambda device: SimpleNamespace(cuda_stream=77),
                                    device=lambda device: contextlib.nullcontext())

    def empty(self, n, dtype, device):
        self.empties.append(n)
        return FakeTensor((n,), dtype, device, ptr=1 << 20)


class Recorder:
    """Stand-ins for _lib.choose, _lib.workspace_size and _lib.run."""

    def __init__(self, chosen="flce.bf16.x.owning.mb1024", ws=4096):
        self.chosen, self.ws, self.calls = chosen, ws, []

    def choose(self, p, mode, sel):
        self.calls.append(("choose", mode, sel.kind))
        return _lib.Choice(self.chosen, "heuristic", True, "", "", 0.0)

    def workspace_size(self, p, mode, sel):
        self.calls.append(("workspace_size", mode, sel.kind, sel.name))
        return self.ws

    def run(self, p, mode, args, sel, stream=0, choice=True):
        self.calls.append(("run", mode, sel.kind, sel.name, args.workspace_size, stream, choice))

    def patches(self):
        return [mock.patch.object(_lib, n, getattr(self, n)) for n in ("choose", "workspace_size", "run")]


class RawStreamTest(unittest.TestCase):
    """_ops._raw_stream: torch's private raw-handle call with the device's index where torch has it (the
    launch paths' ~5 us less per call), else the public Stream object's handle."""

    def test_private_call_with_the_index(self):
        fake = FakeTorch()
        asked = []
        fake._C = SimpleNamespace(_cuda_getCurrentRawStream=lambda i: asked.append(i) or 1000 + i)
        self.assertEqual(_ops._raw_stream(fake, FakeDevice(index=1)), 1001)
        self.assertEqual(_ops._raw_stream(fake, FakeDevice(index=None)), 1000)  # the current device, 0
        self.assertEqual(asked, [1, 0])

    def test_public_handle_without_it(self):
        fake = FakeTorch()
        self.assertEqual(_ops._raw_stream(fake, FakeDevice()), 77)
        fake._C = SimpleNamespace()
        self.assertEqual(_ops._raw_stream(fake, FakeDevice()), 77)

    @unittest.skipUnless(HAVE_CUDA, "needs torch with CUDA and a CUDA device")
    def test_same_handle_as_torch(self):
        dev = torch.device("cuda", torch.cuda.current_device())
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            self.assertEqual(_ops._raw_stream(torch, dev), s.cuda_stream)
        self.assertEqual(_ops._raw_stream(torch, dev), torch.cuda.current_stream(dev).cuda_stream)


class FlceLaunchCacheTest(unittest.TestCase):
    def setUp(self):
        _ops._flce_resolved.clear()
        self.torch = FakeTorch()
        self.rec = Recorder()
        for p in self.rec.patches():
            p.start()
            self.addCleanup(p.stop)
        self.x, self.w, self.y = FakeTensor((64, 128)), FakeTensor((300, 128)), FakeTensor((64,), "i64")
        self.p = object()  # the C problem: only passed through

    def launch(self, variant, mode=_lib.MODE_FORWARD_BACKWARD, x=None, accumulate_dW=False):
        x = x or self.x
        key = _ops._flce_key(x, self.w, mode, -100, "mean", 0.0, 0.0, 0.0, variant, "", False, accumulate_dW)
        sel = _lib.make_selection(variant, None, False)
        _ops._flce_launch(self.torch, self.p, mode, sel, x.device, key, X=x, W=self.w, y=self.y, loss=x, lse=x,
                          dX=x, dW=self.w)

    def kinds(self, what):
        return [c for c in self.rec.calls if c[0] == what]

    def test_heuristic_is_resolved_once_then_run_by_name(self):
        for _ in range(3):
            self.launch("heuristic")
        fb = _lib.MODE_FORWARD_BACKWARD
        name = self.rec.chosen.encode()
        self.assertEqual(self.kinds("choose"), [("choose", fb, _lib.SELECT_HEURISTIC)])
        self.assertEqual(self.kinds("workspace_size"), [("workspace_size", fb, _lib.SELECT_NAME, name)])
        self.assertEqual(self.kinds("run"), [("run", fb, _lib.SELECT_NAME, name, 4096, 77, False)] * 3)
        self.assertEqual(self.torch.empties, [4096] * 3)  # a workspace per call, from the caching allocator

    def test_named_asks_the_workspace_once(self):
        name = "flce.bf16.y.owning.mb2000"
        for _ in range(2):
            self.launch(name)
        self.assertEqual(self.kinds("choose"), [])
        self.assertEqual(len(self.kinds("workspace_size")), 1)
        self.assertEqual([c[2:4] for c in self.kinds("run")], [(_lib.SELECT_NAME, name.encode())] * 2)

    def test_tuned_asks_at_every_call(self):
        self.assertIsNone(_ops._flce_key(self.x, self.w, 1, -100, "mean", 0.0, 0.0, 0.0, "tuned", "", False))
        for _ in range(2):
            self.launch("tuned")
        self.assertEqual(self.kinds("choose"), [])
        self.assertEqual(len(self.kinds("workspace_size")), 2)
        self.assertEqual([c[2] for c in self.kinds("run")], [_lib.SELECT_TUNED] * 2)

    def test_entries_per_mode_shape_device_and_main_grad(self):
        self.launch("heuristic")
        self.launch("heuristic", mode=_lib.MODE_FORWARD)
        self.launch("heuristic", x=FakeTensor((65, 128)))
        self.launch("heuristic", x=FakeTensor((64, 128), device=FakeDevice(index=1)))
        self.launch("heuristic", accumulate_dW=True)
        self.launch("heuristic")  # the first one's entry
        self.assertEqual(len(self.kinds("choose")), 5)
        self.assertEqual(len(_ops._flce_resolved), 5)

    def test_a_failing_resolution_is_not_kept(self):
        bad = mock.Mock(side_effect=detfuse.InvalidArgument("selection.name: no FLCE variant named 'z'", 1))
        with mock.patch.object(_lib, "workspace_size", bad):
            for _ in range(2):
                with self.assertRaisesRegex(detfuse.InvalidArgument, "no FLCE variant named"):
                    self.launch("z")
        self.assertEqual(bad.call_count, 2)
        self.assertEqual(self.kinds("run"), [])
        self.assertEqual(_ops._flce_resolved, {})


@unittest.skipUnless(HAVE_CUDA, "needs torch with CUDA and a CUDA device")
class FlceLaunchGpuTest(unittest.TestCase):
    def setUp(self):
        import detfuse.torch as dt
        self.dt = dt
        g = torch.Generator(device="cuda").manual_seed(3)
        self.x = (torch.randn(96, 128, device="cuda", generator=g) * 0.5).to(torch.bfloat16).requires_grad_()
        self.w = (torch.randn(333, 128, device="cuda", generator=g) * 0.05).to(torch.bfloat16).requires_grad_()
        self.y = torch.randint(0, 333, (96,), device="cuda", generator=g)

    def step(self, y, variant):
        self.x.grad = self.w.grad = None
        loss = self.dt.linear_cross_entropy(self.x, self.w, y, variant=variant)
        loss.backward()
        torch.cuda.synchronize()
        return [detfuse.digest(t.detach().contiguous()) for t in (loss, self.x.grad, self.w.grad)]

    def test_bad_target_raises_after_the_launches(self):
        y = self.y.clone()
        y[11] = 333
        for variant in ("heuristic", "heuristic", "tuned"):
            with self.assertRaisesRegex(detfuse.InvalidArgument,
                                        r"y: 1 target\(s\) outside \[0, 333\) that are not ignore_index=-100; "
                                        r"first at row 11 \(value 333\)"):
                self.dt.linear_cross_entropy(self.x, self.w, y, variant=variant)
            torch.cuda.synchronize()

    def test_cached_heuristic_gives_the_named_variants_bits(self):
        name = self.dt.chosen_variant(self.x, self.w, self.y, variant="heuristic").name
        first, second, named = self.step(self.y, "heuristic"), self.step(self.y, "heuristic"), self.step(self.y, name)
        self.assertEqual(first, second)
        self.assertEqual(first, named)


if __name__ == "__main__":
    unittest.main()
