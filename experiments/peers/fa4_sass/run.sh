#!/usr/bin/env bash
# Compile FlashAttention-4's sm_90a forward and backward kernels on this machine
# (no GPU, no torch) and write into $FA4_SASS_DIR/out (default /tmp/fa4_sass/out):
#   fa4_{fwd,bwd}_d64.{ptx,cubin,sass}   the DSL's own PTX and cubin (NVVM/ptxas 13.4), cuobjdump -sass
#   fa4_{fwd,bwd}_d64_waits.txt          experiments/sass_waits.py on those
#   fa4_{fwd,bwd}_d64_ptxas13.0.*        the same PTX rebuilt by the local ptxas, with its -v log
# Env: FA4_HDIM (64), FA4_CAUSAL (1), FA4_DETERMINISTIC (0: backward only) change
# what is built and name the files (_d128, _noncausal, _det). Run setup.sh first.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DIR=${FA4_SASS_DIR:-/tmp/fa4_sass}
OUT=$DIR/out
VPY=$DIR/venv/bin/python
CUOBJDUMP=${CUOBJDUMP:-$DIR/cutools/nvidia/cu13/bin/cuobjdump}   # finds its nvdisasm beside it
PTXAS=${PTXAS:-/usr/local/cuda/bin/ptxas}
[ -x "$VPY" ] && [ -x "$CUOBJDUMP" ] || { echo "run.sh: run setup.sh first (FA4_SASS_DIR=$DIR)" >&2; exit 1; }

export PYTHONPATH=$HERE/stubs                    # torch and triton stand-ins
# Fixing the arch keeps FA4, QuACK and the DSL from asking a device for it.
export QUACK_ARCH=sm_90a FLASH_ATTENTION_ARCH=sm_90a CUTE_DSL_ARCH=sm_90a
export CUTE_DSL_KEEP=ptx,cubin                   # 'sass' would need nvdisasm >= 13.4 on PATH
export CUTE_DSL_DISABLE_FILE_CACHING=1           # a cache hit writes no dump
tag=d${FA4_HDIM:-64}
[ "${FA4_CAUSAL:-1}" = 1 ] || tag=${tag}_noncausal
bwd_tag=$tag
[ "${FA4_DETERMINISTIC:-0}" = 1 ] && bwd_tag=${tag}_det

mkdir -p "$OUT"
for kind in fwd bwd; do
  name=fa4_${kind}_$tag
  [ $kind = bwd ] && name=fa4_bwd_$bwd_tag
  dump=$OUT/dump_$kind
  rm -rf "$dump" && mkdir -p "$dump"             # the DSL does not create its dump folder
  CUTE_DSL_DUMP_DIR=$dump "$VPY" -W ignore "$HERE/compile_$kind.py"
  cp "$dump"/*.ptx "$OUT/$name.ptx"
  cp "$dump"/*.cubin "$OUT/$name.cubin"
  "$CUOBJDUMP" -sass "$OUT/$name.cubin" > "$OUT/$name.sass"
  python3 "$ROOT/experiments/sass_waits.py" "$OUT/$name.sass" > "$OUT/${name}_waits.txt"
  cat "$OUT/${name}_waits.txt"

  # A second opinion from the toolkit detfuse builds with. Its ptxas (13.0)
  # takes PTX up to ISA 9.0 while the DSL's NVVM writes 9.4; the kernels use
  # nothing newer, so lowering the header is the only change.
  if [ -x "$PTXAS" ]; then
    ver=$("$PTXAS" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
    sed 's/^\.version 9\.4$/.version 9.0/' "$OUT/$name.ptx" > "$OUT/${name}_v90.ptx"
    "$PTXAS" -arch=sm_90a -v "$OUT/${name}_v90.ptx" -o "$OUT/${name}_ptxas$ver.cubin" \
      > "$OUT/${name}_ptxas${ver}_v.txt" 2>&1
    grep -E 'Used|C7512|warning' "$OUT/${name}_ptxas${ver}_v.txt" || true
    "$CUOBJDUMP" -sass "$OUT/${name}_ptxas$ver.cubin" > "$OUT/${name}_ptxas$ver.sass"
    python3 "$ROOT/experiments/sass_waits.py" "$OUT/${name}_ptxas$ver.sass" > "$OUT/${name}_ptxas${ver}_waits.txt"
  else
    echo "run.sh: no ptxas at $PTXAS; skipping the local rebuild"
  fi
done
echo "run.sh: outputs in $OUT"
