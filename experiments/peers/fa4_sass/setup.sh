#!/usr/bin/env bash
# Build the CPU-only FlashAttention-4 compile environment under $FA4_SASS_DIR
# (default /tmp/fa4_sass): venv/ with the peer wheels of .peers/a, b and c
# (see experiments/peers/README.md; experiments/peers/fetch.sh makes them) and
# cutools/ with cuobjdump. Needs CPython 3.12 (the wheels are cp312) and PyPI.
# Rerunning rebuilds the venv; cuobjdump is kept once downloaded.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DIR=${FA4_SASS_DIR:-/tmp/fa4_sass}
WHEELS=$ROOT/experiments/peers/wheels.txt
mkdir -p "$DIR"

# pyenv's python3.12 shim fails unless 3.12 is the selected version, so look
# behind it too.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY=$cand; break; fi
  done
fi
[ -n "$PY" ] || { echo "setup.sh: no CPython 3.12 found; set PYTHON=" >&2; exit 1; }

pinned() {  # field $2 of wheels.txt for distribution $1
  awk -v d="$1" '$1 ~ "^"d"==" {print $'"$2"'}' "$WHEELS"
}
find_part() {  # path of glob $1 in .peers/a, b or c, wherever fetch.sh put it; empty if none
  local f
  for f in "$ROOT"/.peers/a/$1 "$ROOT"/.peers/b/$1 "$ROOT"/.peers/c/$1; do
    if [ -e "$f" ]; then echo "$f"; return 0; fi
  done
}

rm -rf "$DIR/venv"
"$PY" -m venv "$DIR/venv"
VPY=$DIR/venv/bin/python
# What the DSL and FA4 import besides torch; pinned to the versions this was checked with.
"$VPY" -m pip install -q typing-extensions==4.16.0 protobuf==7.36.2 einops==0.8.2 numpy==2.5.5 \
  cuda-bindings==13.5.0 cuda-pathfinder==1.9.1

# The peers need torch only at run time, so these wheels install without their
# dependencies; torch and triton are replaced by stubs/ (run.sh).
whls=()
for dist in flash-attn-4 quack-kernels nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base \
            nvidia-cutlass-dsl-libs-core apache-tvm-ffi; do
  spec=$(pinned "$dist" 1) sha=$(pinned "$dist" 2)
  whl=$(find_part "$(echo "$dist" | tr - _)-${spec##*==}-*.whl")
  [ -n "$whl" ] || { echo "setup.sh: no wheel for $spec in .peers/a or .peers/b (run experiments/peers/fetch.sh)" >&2; exit 1; }
  # Same pin as install.sh relies on: the wheels in .peers may come from another checkout.
  [ "$(sha256sum "$whl" | cut -d' ' -f1)" = "$sha" ] || { echo "setup.sh: $whl does not match wheels.txt" >&2; exit 1; }
  whls+=("$whl")
done
"$VPY" -m pip install -q --no-index --no-deps "${whls[@]}"

# The CuTe DSL compiler (libs-cu13) travels as an xz tarball split over a and b;
# join, unpack and check it as install.sh does, then drop it into site-packages.
spec=$(pinned nvidia-cutlass-dsl-libs-cu13 1) record_sha=$(pinned nvidia-cutlass-dsl-libs-cu13 3)
parts=$(find_part nvidia_cutlass_dsl_libs_cu13.tar.xz.parts)
[ -n "$parts" ] || { echo "setup.sh: .peers/*/nvidia_cutlass_dsl_libs_cu13.tar.xz.parts missing" >&2; exit 1; }
files=()
while read -r p; do
  f=$(find_part "$p"); [ -n "$f" ] || { echo "setup.sh: $p missing from .peers/a, b and c" >&2; exit 1; }
  files+=("$f")
done < "$parts"
rm -rf "$DIR/cu13" && mkdir -p "$DIR/cu13"
cat "${files[@]}" | xz -d | tar -x -C "$DIR/cu13"
"$VPY" "$HERE/../check_record.py" "$DIR/cu13" "nvidia_cutlass_dsl_libs_cu13-${spec##*==}.dist-info/RECORD" "$record_sha" setup.sh
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp -a "$DIR/cu13"/. "$SITE"/
rm -rf "$DIR/cu13"

# cuobjdump (and the nvdisasm it runs for -sass) from their own PyPI wheels:
# the local CUDA 13.0 toolkit has ptxas but neither, and these know the DSL's
# newer (13.4) cubins.
BIN=$DIR/cutools/nvidia/cu13/bin
if [ ! -x "$BIN/cuobjdump" ] || [ ! -x "$BIN/nvdisasm" ]; then
  "$VPY" -m pip download -q --no-deps -d "$DIR/cutools/whl" \
    nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
  for whl in "$DIR"/cutools/whl/nvidia_cuda_{cuobjdump,nvdisasm}-13.5.37-*.whl; do
    "$VPY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$DIR/cutools"
  done
  chmod +x "$BIN/cuobjdump" "$BIN/nvdisasm"   # zipfile drops the mode bits
fi

PYTHONPATH=$HERE/stubs "$VPY" -W ignore -c 'import cutlass.cute, flash_attn.cute.interface; print("setup.sh: FA4 imports")'
echo "setup.sh: done; now FA4_SASS_DIR=$DIR bash $HERE/run.sh"
