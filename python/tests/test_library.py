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
