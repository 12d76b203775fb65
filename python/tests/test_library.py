"""The package and the C ABI through ctypes: no torch, no GPU needed."""
import ctypes
import os
import unittest

import detfuse
from detfuse import _lib


class LibraryTest(unittest.TestCase):
    def test_import_loads_library_with_matching_abi(self):
        self.assertTrue(os.path.isfile(detfuse.library_path()), detfuse.library_path())
        self.assertEqual(detfuse.abi_version(), detfuse.ABI_VERSION)
        self.assertEqual(detfuse.version(), detfuse.__version__)

    def test_struct_sizes_match_the_header(self):
        # detfuse_c.h layouts on x86-64 / aarch64 Linux (LP64).
        self.assertEqual(ctypes.sizeof(_lib.FlceProblem), 3 * 8 + 2 * 4 + 8 + 2 * 4 + 4 * 8)
        self.assertEqual(ctypes.sizeof(_lib.FlceArgs), 11 * 8)
        self.assertEqual(ctypes.sizeof(_lib.Selection), 4 + 4 + 8 + 8)
        self.assertEqual(ctypes.sizeof(_lib.CChoice), 256 + 4 + 4 + 8 + 1024 + 1024)
        self.assertEqual(_lib.FlceProblem.ignore_index.offset, 32)
        self.assertEqual(_lib.FlceProblem.label_smoothing.offset, 48)
        self.assertEqual(ctypes.sizeof(_lib.AttentionProblem), 6 * 8 + 2 * 4 + 8 + 8 + 8)  # ABI 3: softcap, window
        self.assertEqual(_lib.AttentionProblem.scale.offset, 56)
        self.assertEqual(ctypes.sizeof(_lib.AttentionArgs), 13 * 8)

    def test_problem_key_is_the_cxx_key(self):
        self.assertEqual(detfuse.problem_key(8, 16, 32),
                         "flce:N=8,D=16,V=32,dtype=bf16,grad=fp32,ii=-100,red=mean,ls=0,z=0,cap=0,go=1")
        self.assertEqual(
            detfuse.problem_key(8, 16, 32, dtype=_lib.DTYPE_F32, ignore_index=32, reduction="none",
                                label_smoothing=0.25, z_loss=1e-4, softcap=2.5, grad_output=0.5),
            "flce:N=8,D=16,V=32,dtype=fp32,grad=fp32,ii=32,red=none,ls=0.25,z=0.0001,cap=2.5,go=0.5")

    def test_bad_arguments_raise_the_library_message(self):
        cases = [
            (dict(N=0, D=16, V=32), "detfuse_flce_problem_key: problem.N: must be >= 1, got 0"),
            (dict(N=8, D=16, V=2**31), "problem.V: must be at most 2^30 (1073741824), got 2147483648"),
            (dict(N=8, D=16, V=32, ignore_index=3), "problem.ignore_index: must be negative or >= V"),
            (dict(N=8, D=16, V=32, label_smoothing=1.5), "problem.label_smoothing: must be in [0, 1), got 1.5"),
            (dict(N=8, D=16, V=32, z_loss=-1.0), "problem.z_loss: must be finite and >= 0, got -1"),
            (dict(N=8, D=16, V=32, softcap=float("nan")), "problem.softcap"),
            (dict(N=8, D=16, V=32, dtype=_lib.DTYPE_F32, grad_dtype=_lib.DTYPE_BF16),
             "problem.grad_dtype: must be fp32 or the input dtype"),
            (dict(N=8, D=16, V=32, dtype=5), "problem.dtype: must be 0 (DETFUSE_DTYPE_F32) or 1"),
        ]
        for kw, message in cases:
            with self.subTest(**{k: str(v) for k, v in kw.items()}):
                with self.assertRaises(detfuse.InvalidArgument) as cm:
                    detfuse.problem_key(**kw)
                self.assertIn(message, str(cm.exception))
                self.assertIsInstance(cm.exception, ValueError)
                self.assertEqual(cm.exception.status, _lib.ERR_INVALID_ARGUMENT)

    def test_python_side_type_checks(self):
        with self.assertRaisesRegex(ValueError, r"reduction: must be 'mean', 'sum' or 'none', got 'avg'"):
            detfuse.problem_key(8, 16, 32, reduction="avg")
        with self.assertRaisesRegex(TypeError, "N: must be an int, got float"):
            detfuse.problem_key(8.0, 16, 32)
        with self.assertRaisesRegex(TypeError, "softcap: must be a float, got str"):
            detfuse.problem_key(8, 16, 32, softcap="1")
        with self.assertRaisesRegex(ValueError, "N: does not fit in int64"):
            detfuse.problem_key(2**64, 16, 32)

    def test_variants_and_selection_by_name(self):
        names = detfuse.variants()
        self.assertTrue(names and all(n.startswith("flce.") for n in names), names[:3])
        bf16 = next(n for n in names if n.startswith("flce.bf16."))
        p = _lib.make_problem(8, 16, 32)
        c = _lib.choose(p, _lib.MODE_FORWARD_BACKWARD, _lib.make_selection(bf16))
        self.assertEqual((c.name, c.source), (bf16, "named"))
        self.assertGreaterEqual(_lib.workspace_size(p, _lib.MODE_FORWARD_BACKWARD, _lib.make_selection(bf16)), 0)
        with self.assertRaisesRegex(detfuse.InvalidArgument, "selection.name: no FLCE variant named 'flce.bf16.x'"):
            _lib.choose(p, _lib.MODE_FORWARD, _lib.make_selection("flce.bf16.x"))
        fp32 = next(n for n in names if n.startswith("flce.fp32."))
        with self.assertRaisesRegex(detfuse.InvalidArgument, "is for fp32 inputs, problem.dtype is bf16"):
            _lib.choose(p, _lib.MODE_FORWARD, _lib.make_selection(fp32))
        with self.assertRaisesRegex(detfuse.InvalidArgument, "mode: must be 0 .* got 9"):
            _lib.choose(p, 9, _lib.make_selection(bf16))
        with self.assertRaisesRegex(TypeError, "variant: must be a str"):
            _lib.make_selection(3)

    def test_null_device_pointers_are_named(self):
        p = _lib.make_problem(8, 16, 32)
        a = _lib.FlceArgs()
        with self.assertRaisesRegex(detfuse.InvalidArgument,
                                    r"detfuse_flce_run: args.X: null pointer \(required for forward_backward\)"):
            _lib.run(p, _lib.MODE_FORWARD_BACKWARD, a, _lib.make_selection("heuristic"))

    @unittest.skipIf(detfuse.device_count() > 0, "a CUDA device is present; this checks the no-device error")
    def test_gpu_calls_without_device_say_so(self):
        p = _lib.make_problem(8, 16, 32)
        for sel in (_lib.make_selection("heuristic"), _lib.make_selection("tuned", "/nonexistent.db")):
            with self.assertRaisesRegex(detfuse.NoDevice, r"detfuse_flce_choose: no CUDA device available \("):
                _lib.choose(p, _lib.MODE_FORWARD, sel)
        with self.assertRaisesRegex(detfuse.NoDevice, "detfuse_digest_device: no CUDA device available"):
            _lib.digest_device(4096, 16)

    def test_attention_problem_key_and_bad_fields(self):
        self.assertEqual(detfuse.attention_problem_key(2, 4, 2, 33, 47, 64),
                         "attention:B=2,H=4,Hkv=2,Sq=33,Sk=47,d=64,causal=0,scale=0.125,dtype=bf16")
        self.assertEqual(detfuse.attention_problem_key(1, 8, 8, 5, 7, 128, dtype=_lib.DTYPE_F32, causal=True,
                                                       scale=0.5),
                         "attention:B=1,H=8,Hkv=8,Sq=5,Sk=7,d=128,causal=1,scale=0.5,dtype=fp32")
        cases = [
            ((2, 4, 3, 33, 47, 64), {}, "detfuse_attention_problem_key: problem.Hkv: must divide H (GQA), got Hkv=3 H=4"),
            ((0, 4, 2, 33, 47, 64), {}, "problem.B: must be >= 1, got 0"),
            ((2, 4, 2, 0, 47, 64), {}, "problem.Sq: must be >= 1, got 0"),
            ((2, 4, 2, 33, 2**31, 64), {}, "problem.Sk: must be at most 2^30"),
            ((2, 4, 2, 33, 47, 64), {"scale": -1.0}, "problem.scale: must be finite and >= 0"),
            ((2, 4, 2, 33, 47, 64), {"dtype": 7}, "problem.dtype: must be 0 (DETFUSE_DTYPE_F32) or 1"),
        ]
        for dims, kw, message in cases:
            with self.subTest(dims=dims, **{k: str(v) for k, v in kw.items()}):
                with self.assertRaises(detfuse.InvalidArgument) as cm:
                    detfuse.attention_problem_key(*dims, **kw)
                self.assertIn(message, str(cm.exception))
        # softcap and window (ABI 3): in the key only when set; checked by the library.
        key = detfuse.attention_problem_key(1, 8, 4, 64, 64, 128, causal=True, softcap=50.0, window=16)
        self.assertTrue(key.startswith("attention:B=1,H=8,Hkv=4,Sq=64,Sk=64,d=128,causal=1,scale="), key)
        self.assertIn(",cap=", key)
        self.assertTrue(key.endswith(",win=16"), key)
        plain = detfuse.attention_problem_key(1, 8, 4, 64, 64, 128, causal=True)
        self.assertNotIn("cap=", plain)
        self.assertNotIn("win=", plain)
        with self.assertRaisesRegex(detfuse.InvalidArgument, "problem.softcap: must be finite and >= 0"):
            detfuse.attention_problem_key(1, 8, 4, 64, 64, 128, softcap=-1.0)
        with self.assertRaisesRegex(detfuse.InvalidArgument, "problem.window: must be >= 0"):
            detfuse.attention_problem_key(1, 8, 4, 64, 64, 128, window=-2)
        with self.assertRaisesRegex(TypeError, "window: must be an int, got float"):
            detfuse.attention_problem_key(1, 8, 4, 64, 64, 128, window=2.0)
        with self.assertRaisesRegex(TypeError, "softcap: must be a float, got str"):
            detfuse.attention_problem_key(1, 8, 4, 64, 64, 128, softcap="50")
        with self.assertRaisesRegex(TypeError, "causal: must be a bool, got int"):
            detfuse.attention_problem_key(2, 4, 2, 33, 47, 64, causal=1)
        with self.assertRaisesRegex(TypeError, "Sq: must be an int, got float"):
            detfuse.attention_problem_key(2, 4, 2, 33.0, 47, 64)

    def test_attention_variants_and_selection(self):
        names = detfuse.attention_variants()
        self.assertTrue(names and all(n.startswith("attention.") for n in names), names[:3])
        owning = next(n for n in names if n.startswith("attention.bf16.fma.owning.") and n.endswith("_d64"))
        p = _lib.make_attention_problem(2, 4, 2, 33, 47, 64)
        sel = _lib.make_selection(owning)
        c = _lib.attention_choose(p, _lib.ATTENTION_BACKWARD, sel)
        self.assertEqual((c.name, c.source, c.deterministic), (owning, "named", True))
        self.assertEqual(_lib.attention_workspace_size(p, _lib.ATTENTION_FORWARD, sel), 0)
        self.assertGreaterEqual(_lib.attention_workspace_size(p, _lib.ATTENTION_BACKWARD, sel), 2 * 4 * 33 * 4)
        with self.assertRaisesRegex(detfuse.InvalidArgument, "no attention variant named 'attention.bf16.x'"):
            _lib.attention_choose(p, _lib.ATTENTION_FORWARD, _lib.make_selection("attention.bf16.x"))
        # Tuned selection is accepted for attention (ABI 3): the selection's own
        # checks apply; the store lookup needs a device (NoDevice without one).
        bad = _lib.make_selection("tuned", "/nonexistent.db")
        bad.allow_nondeterministic = 3
        with self.assertRaisesRegex(detfuse.InvalidArgument, "selection.allow_nondeterministic: must be 0 or 1, got 3"):
            _lib.attention_choose(p, _lib.ATTENTION_FORWARD, bad)
        if detfuse.device_count() == 0:
            for mode in (_lib.ATTENTION_FORWARD, _lib.ATTENTION_BACKWARD):
                with self.assertRaisesRegex(detfuse.NoDevice, r"detfuse_attention_choose: no CUDA device available"):
                    _lib.attention_choose(p, mode, _lib.make_selection("tuned", "/nonexistent.db"))
        with self.assertRaisesRegex(detfuse.InvalidArgument, r"mode: must be 0 \(forward\) or 1 \(backward\), got 2"):
            _lib.attention_choose(p, 2, sel)
        with self.assertRaisesRegex(detfuse.InvalidArgument,
                                    r"detfuse_attention_run: args.dO: null pointer \(required for backward\)"):
            a = _lib.AttentionArgs()
            a.Q, a.K, a.V = 4096, 8192, 12288
            _lib.attention_run(p, _lib.ATTENTION_BACKWARD, a, sel)

    def test_choose_at_a_determinism_level_checks_the_level_first(self):
        # ABI 4: *_choose_level. The level is checked before the GPU is asked.
        p = _lib.make_problem(8, 16, 32)
        ap = _lib.make_attention_problem(2, 4, 2, 33, 47, 64)
        tuned = _lib.make_selection("tuned", "/nonexistent.db")
        with self.assertRaisesRegex(detfuse.InvalidArgument,
                                    r"detfuse_flce_choose_level: level: unknown determinism level 'gpu_to_gpu'"):
            _lib.choose_level(p, _lib.MODE_FORWARD_BACKWARD, tuned, "gpu_to_gpu")
        with self.assertRaisesRegex(detfuse.InvalidArgument,
                                    r"detfuse_attention_choose_level: level: unknown determinism level 'x'"):
            _lib.attention_choose_level(ap, _lib.ATTENTION_FORWARD, tuned, "x")
        with self.assertRaisesRegex(detfuse.InvalidArgument, r"level: 'config' needs a tuned selection"):
            _lib.choose_level(p, _lib.MODE_FORWARD_BACKWARD, _lib.make_selection("heuristic"), "config")
        # A named selection with no level is the plain choice (no GPU needed).
        name = next(n for n in detfuse.variants() if n.startswith("flce.bf16."))
        c = _lib.choose_level(p, _lib.MODE_FORWARD_BACKWARD, _lib.make_selection(name), None)
        self.assertEqual((c.name, c.source), (name, "named"))
        if detfuse.device_count() == 0:
            with self.assertRaisesRegex(detfuse.NoDevice, "no CUDA device available"):
                _lib.choose_level(p, _lib.MODE_FORWARD_BACKWARD, tuned, "config")
        # The Python-side check (torch's linear_cross_entropy / attention use it).
        self.assertEqual(_lib.check_level("portable"), "portable")
        self.assertIsNone(_lib.check_level(None))
        with self.assertRaisesRegex(ValueError, r"level: unknown determinism level 'fast' \(one of none, run_to_run"):
            _lib.check_level("fast")
        with self.assertRaisesRegex(TypeError, "level: must be a str"):
            _lib.check_level(3)
        with self.assertRaisesRegex(ValueError, r"level: 'config' needs variant='tuned'"):
            _lib.check_level("config", "heuristic")

    @unittest.skipIf(detfuse.device_count() > 0, "a CUDA device is present; this checks the no-device error")
    def test_attention_without_device_says_so(self):
        p = _lib.make_attention_problem(2, 4, 2, 33, 47, 64)
        with self.assertRaisesRegex(detfuse.NoDevice, r"detfuse_attention_choose: no CUDA device available \("):
            _lib.attention_choose(p, _lib.ATTENTION_FORWARD, _lib.make_selection("heuristic"))

    def test_host_digest(self):
        # XXH3-128 of the empty input (xxhash's published test vector).
        self.assertEqual(detfuse.digest(b""), "99aa06d3014798d86001c324468d497f")
        a = detfuse.digest(b"detfuse")
        self.assertEqual(len(a), 32)
        self.assertEqual(a, detfuse.digest(bytearray(b"detfuse")))
        self.assertNotEqual(a, detfuse.digest(b"detfusE"))
        with self.assertRaisesRegex(TypeError, "digest: expected a torch.Tensor or a bytes-like object, got int"):
            detfuse.digest(3)

    def test_missing_library_is_reported(self):
        saved = (_lib._lib, _lib._lib_path, os.environ.get("DETFUSE_LIB"))
        try:
            _lib._lib = None
            os.environ["DETFUSE_LIB"] = "/nonexistent/libdetfuse_c.so"
            with self.assertRaisesRegex(OSError, "libdetfuse_c.so not found .*DETFUSE_LIB=/nonexistent"):
                _lib.load_library()
        finally:
            _lib._lib, _lib._lib_path = saved[0], saved[1]
            if saved[2] is None:
                os.environ.pop("DETFUSE_LIB", None)
            else:
                os.environ["DETFUSE_LIB"] = saved[2]


if __name__ == "__main__":
    unittest.main()
