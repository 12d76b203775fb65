#!/usr/bin/env bash
# Every GPU Python check of issue 11 in one call (about 4-5 minutes on an H200):
# the Python tests (GPU classes included: linear_cross_entropy and attention,
# python/tests/test_torch_attention.py), the memory-mode benchmark (without
# and with torch.compile) and the Hugging Face training example. Run from the
# repository root of a tree where build/capi/libdetfuse_c.so exists (or with
# DETFUSE_LIB=/path/to/libdetfuse_c.so); needs torch with CUDA and, for the
# example, transformers. Each step's output goes to its own file under $OUT:
#   env.txt tests.log bench.log bench_compile.log train_hf.log summary.txt
#   OUT=out python/tests/run_gpu.sh
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
# The package from this tree (not an installed copy); the library from
# $DETFUSE_LIB, else build/capi/ (python/detfuse/_lib.py looks there).
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${DETFUSE_LIB:-}" ] && [ -f "$ROOT/build/capi/libdetfuse_c.so" ]; then
  export DETFUSE_LIB="$ROOT/build/capi/libdetfuse_c.so"
fi
# libdetfuse_c.so needs the toolkit's libcublasLt.so.13.
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
BUDGET=${BUDGET:-290}  # seconds for everything; the compile benchmark gets what is left

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1
  echo "DETFUSE_LIB=${DETFUSE_LIB:-} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  $PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
  $PY -c "import transformers; print('transformers', transformers.__version__)" 2>&1
  $PY -c "import detfuse; print('detfuse', detfuse.__version__, 'C ABI', detfuse.abi_version(), detfuse.library_path())" 2>&1
} > "$OUT/env.txt"

: > "$OUT/summary.txt"
step() {  # step NAME TIMEOUT CMD...: stdout+stderr to $OUT/NAME.log, exit code to summary.txt
  local name=$1 t=$2; shift 2
  local start=$SECONDS
  timeout -s INT -k 10 "$t" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - start)) s: $*" | tee -a "$OUT/summary.txt"
}

step tests 160 $PY python/tests/run.py
step bench 60 $PY python/examples/bench_memory_modes.py --shapes small,llama8k,llama16k
step train_hf 70 $PY python/examples/train_hf.py
left=$((BUDGET - SECONDS))
if [ "$left" -gt 20 ]; then
  step bench_compile "$left" $PY python/examples/bench_memory_modes.py --shapes small,llama8k --impls torch,compile
else
  echo "bench_compile: skipped, ${left} s left of ${BUDGET}" | tee -a "$OUT/summary.txt"
fi
grep -E "^(FAIL|ERROR):" "$OUT/tests.log" | tee -a "$OUT/summary.txt"
grep -cE "test_torch_attention\.[A-Za-z]+\.test_.* \.\.\. ok$" "$OUT/tests.log" | sed 's/^/attention tests ok: /' | tee -a "$OUT/summary.txt"
tail -n 1 "$OUT/tests.log" | tee -a "$OUT/summary.txt"
grep -E "^(PASS|FAIL)" "$OUT/train_hf.log" | tee -a "$OUT/summary.txt"
echo "total $SECONDS s" | tee -a "$OUT/summary.txt"
