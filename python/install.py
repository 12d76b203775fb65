"""Installs the detfuse package (this folder) without the network when it can.

  python3 python/install.py [--mode auto|pip|copy] [--user | --target DIR] [PIP ARGS...]

Modes:
  pip   `pip install --no-build-isolation ./python`: needs setuptools that can
        build wheels (setuptools >= 70.1, or setuptools >= 61 with the `wheel`
        package) already installed; no network. Extra arguments go to pip.
  copy  copies detfuse/ (with libdetfuse_c.so when `make python` put it
        there) into site-packages (--user: the user site; --target: DIR) with
        a .dist-info (METADATA, INSTALLER, RECORD), so `pip show detfuse` and
        `pip uninstall detfuse` work; needs nothing but Python.
  auto  pip when setuptools can build wheels here, else copy (the default).
Plain `pip install ./python` (build isolation) also works where PyPI is
reachable: pip then fetches setuptools into a temporary environment.
"""
import argparse
import base64
import hashlib
import importlib.util
import os
import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig

HERE = pathlib.Path(__file__).resolve().parent
NAME, VERSION = "detfuse", "0.1.0"


def can_build_wheels() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    major_minor = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
    if major_minor < (61, 0):  # pyproject.toml [project] metadata
        return False
    return (importlib.util.find_spec("wheel") is not None
            or importlib.util.find_spec("setuptools.command.bdist_wheel") is not None)


def record_line(path: pathlib.Path, root: pathlib.Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root).as_posix()},sha256={digest},{len(data)}"


def copy_install(target: pathlib.Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    pkg_dst = target / NAME
    info = target / f"{NAME}-{VERSION}.dist-info"
    for old in [pkg_dst, info] + list(target.glob(f"{NAME}-*.dist-info")):
        if old.exists():
            shutil.rmtree(old)
    shutil.copytree(HERE / NAME, pkg_dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
        "Summary: Bitwise-reproducible fused linear + cross-entropy for PyTorch (ctypes over libdetfuse_c.so)\n"
        "Requires-Python: >=3.9\nProvides-Extra: torch\nRequires-Dist: torch>=2.1; extra == \"torch\"\n")
    (info / "INSTALLER").write_text("detfuse-install.py\n")
    files = sorted(p for p in list(pkg_dst.rglob("*")) + list(info.iterdir()) if p.is_file())
    lines = [record_line(p, target) for p in files]
    lines.append(f"{(info / 'RECORD').relative_to(target).as_posix()},,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    lib = pkg_dst / "libdetfuse_c.so"
    print(f"detfuse: copied to {pkg_dst}" + ("" if lib.is_file() else
          " (without libdetfuse_c.so: set DETFUSE_LIB or run `make python`, which puts it in the package)"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("auto", "pip", "copy"), default=os.environ.get("DETFUSE_INSTALL", "auto"))
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="the user site-packages")
    where.add_argument("--target", help="install into this folder (add it to PYTHONPATH)")
    args, pip_args = ap.parse_known_args(argv)
    mode = args.mode
    if mode == "auto":
        mode = "pip" if can_build_wheels() else "copy"
        if mode == "copy":
            print("detfuse: setuptools here cannot build wheels (needs setuptools >= 70.1, or >= 61 with `wheel`); "
                  "installing by copy (no network needed)")
    if mode == "pip":
        cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation"]
        cmd += ["--user"] if args.user else []
        cmd += ["--target", args.target] if args.target else []
        cmd += pip_args + [str(HERE)]
        print("+ " + " ".join(cmd))
        return subprocess.call(cmd)
    if pip_args:
        print(f"detfuse: --mode copy takes only --user or --target, got {' '.join(pip_args)}", file=sys.stderr)
        return 2
    if args.target:
        target = pathlib.Path(args.target)
    elif args.user:
        target = pathlib.Path(site.getusersitepackages())
    else:
        target = pathlib.Path(sysconfig.get_paths()["purelib"])
    copy_install(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
