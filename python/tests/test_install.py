"""python/install.py's offline copy mode (no torch, no GPU, no network)."""
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

import detfuse

HERE = pathlib.Path(__file__).resolve().parent
INSTALL = HERE.parent / "install.py"


class CopyInstallTest(unittest.TestCase):
    def test_copy_into_target_imports_and_records_its_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, str(INSTALL), "--mode", "copy", "--target", tmp],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            info = pathlib.Path(tmp) / f"detfuse-{detfuse.__version__}.dist-info"
            record = (info / "RECORD").read_text().splitlines()
            listed = {line.split(",")[0] for line in record}
            self.assertIn("detfuse/__init__.py", listed)
            self.assertIn("detfuse/torch.py", listed)
            self.assertIn(f"{info.name}/METADATA", listed)
            self.assertNotIn("detfuse/__pycache__", " ".join(listed))
            # The copy imports on its own (from a neutral folder, the library
            # through DETFUSE_LIB as found by this process).
            env = dict(os.environ, PYTHONPATH=tmp, DETFUSE_LIB=detfuse.library_path())
            r = subprocess.run([sys.executable, "-c", "import detfuse; print(detfuse.__file__, detfuse.abi_version())"],
                               capture_output=True, text=True, env=env, cwd=tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(str(pathlib.Path(tmp) / "detfuse")), r.stdout)
            self.assertTrue(r.stdout.strip().endswith(str(detfuse.ABI_VERSION)), r.stdout)

    def test_copy_mode_refuses_pip_arguments(self):
        r = subprocess.run([sys.executable, str(INSTALL), "--mode", "copy", "--no-deps"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--mode copy takes only --user or --target, got --no-deps", r.stderr)


if __name__ == "__main__":
    unittest.main()
