#!/usr/bin/env bash
# Installs what detfuse needs to build and test, with apt where it can, and
# says clearly what is missing where it cannot. The CUDA toolkit (13, with CUB
# and Thrust) is not installed here: it comes from NVIDIA's installer.
# CUTLASS/CuTe (headers only, pinned to 4.2.0) come from the PyPI wheel
# nvidia-cutlass==4.2.0.0, checked against its sha256 and unpacked into the
# git-ignored cache .deps/ (CMake's DETFUSE_CUTLASS_DIR points elsewhere if set).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake make g++ libboost-program-options-dev libsqlite3-dev libxxhash-dev libgtest-dev nlohmann-json3-dev
      python3 python3-matplotlib)  # python3-matplotlib: experiments/contention/plot.py (and its CTest)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "detfuse: installing missing packages: ${missing[*]}" >&2
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "detfuse: apt-get not found; install these yourself: ${missing[*]}" >&2
    exit 1
  fi
fi

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && { echo "detfuse: nvcc is not on PATH; found $d/nvcc (the Makefile uses it)" >&2; exit 0; }
  done
  echo "detfuse: the CUDA toolkit (nvcc 12+, 13 recommended) is missing; install it from NVIDIA and put nvcc on PATH" >&2
  exit 1
fi

# CUTLASS 4.2.0 headers (cute/ and cutlass/) for the Hopper wgmma engine.
cutlass_version=4.2.0.0
cutlass_sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
cutlass_dir=.deps/cutlass-$cutlass_version
if [ ! -f "$cutlass_dir/include/cute/tensor.hpp" ]; then
  echo "detfuse: fetching CUTLASS $cutlass_version headers (PyPI wheel nvidia-cutlass) into $cutlass_dir" >&2
  command -v python3 >/dev/null 2>&1 || { echo "detfuse: python3 (with pip) is needed to fetch CUTLASS; or pass -DDETFUSE_CUTLASS_DIR=/path/to/cutlass/include to CMake" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --disable-pip-version-check "nvidia-cutlass==$cutlass_version" -d "$tmp" >&2 || {
    echo "detfuse: could not download nvidia-cutlass==$cutlass_version from PyPI; pass -DDETFUSE_CUTLASS_DIR=/path/to/cutlass/include to CMake instead" >&2; exit 1; }
  whl=$(ls "$tmp"/nvidia_cutlass-*.whl)
  echo "$cutlass_sha256  $whl" | sha256sum --check --quiet - || { echo "detfuse: $whl does not match the pinned sha256" >&2; exit 1; }
  rm -rf "$cutlass_dir.part" && mkdir -p "$cutlass_dir.part"
  python3 - "$whl" "$cutlass_dir.part" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        if info.filename.startswith(prefix) and not info.is_dir():
            rel = info.filename[len(prefix):]
            z.extract(info, dest + "/tmp")
import os, shutil
shutil.move(os.path.join(dest, "tmp", prefix), os.path.join(dest, "include"))
shutil.rmtree(os.path.join(dest, "tmp"))
PY
  rm -rf "$cutlass_dir" && mv "$cutlass_dir.part" "$cutlass_dir"
fi
