#!/usr/bin/env bash
# Issue 20 on the GPU (branch pyhf), one call, under 4 minutes. Builds
# nothing: run from the repository root with a prebuilt Release ./build
# (build/capi/libdetfuse_c.so; build/detfuse and build/tests/capi/test_capi_gpu
# where present). Needs torch with CUDA and transformers; liger_kernel is
# optional (its runs are skipped, saying so, when it does not import).
# Output under $OUT: env.txt tests.log train.log cli.log summary.txt.
#   OUT=out bash experiments/device/pyhf.sh
# What to look for (summary.txt, printed last):
#   tests: exit 0; the line "detfuse python tests: N passed ..., 0 failed, 0 errors"
#     (test_ops.CompiledStepGpuTest: compiled fullgraph step == eager bits, opcheck;
#      test_hf.HfGpuTest: 4 architectures twice bitwise, step-0 loss vs transformers)
#   train <model>: PASS lines, step ms / peak MiB / digests per run in train.log
#   cli: tuned attention chosen from a store (source tuned), a repeated
#     `tune --resume` ends with "0 measured", exit codes 2 for the zero caps,
#     no store left by a tune that sees no GPU.
set -u
source "$(dirname "$0")/lib.sh"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
S=$SUMMARY
ROOT=$(pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export DETFUSE_LIB=${DETFUSE_LIB:-$ROOT/build/capi/libdetfuse_c.so}
export CUBLAS_WORKSPACE_CONFIG=:4096:8 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
T=$(mktemp -d)

{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1
  $PY -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1
  $PY -c "import detfuse; print('detfuse', detfuse.__version__, 'C ABI', detfuse.abi_version(), detfuse.library_path())" 2>&1
  $PY -c "import liger_kernel; print('liger_kernel', getattr(liger_kernel, '__version__', '?'))" 2>&1 | tail -1
} > "$OUT/env.txt"

# 1. Python tests (GPU classes included), in a scratch directory so that no
# detfuse.db of the tree changes the tuned choices.
(cd "$T" && run tests 140 $PY "$ROOT/python/tests/run.py")
grep -E "^(FAIL|ERROR):|^detfuse python tests:|^compiled (hf )?step:|parameters identical|step-0 loss|: refused" \
  "$OUT/tests.log" >> "$S"

# 2. The example: 4 architectures, detfuse twice against transformers (SDPA
# default and deterministic) and Liger where it imports; small sizes.
for m in llama qwen2 mistral gemma2; do
  (cd "$T" && run train 40 $PY "$ROOT/python/examples/train_hf.py" --model $m --steps 5 --batch 4 \
     --seq 512 --hidden 512 --heads 8 --kv-heads 2 --layers 2 --vocab 32000 --db "$T/none.db")
done
grep -E "^(PASS|FAIL|note:)|^(detfuse [12]|sdpa default|sdpa deterministic|liger) " "$OUT/train.log" >> "$S"

# 3. The command: tuned attention from a store, resume, bad inputs.
D=$ROOT/build/detfuse
if [ -x "$D" ]; then
  A="--kernel attention --shape 1,4,2,256,256,64 --causal --engine fma --time-cap 1s --repeats 2 --db $T/attn.db"
  run cli 75 "$D" tune $A
  run cli 30 "$D" tune $A --resume
  grep -E "^run .*: (complete|budget)|^best:" "$OUT/cli.log" >> "$S"
  run cli 30 $PY -c "
import torch, detfuse.torch as dt
q = torch.randn(1, 4, 256, 64, device='cuda', dtype=torch.bfloat16)
k = torch.randn(1, 2, 256, 64, device='cuda', dtype=torch.bfloat16)
f, b = dt.chosen_attention_variants(q, k, k, causal=True, variant='tuned', db='$T/attn.db')
print('tuned forward:', f.name, f.source, '|', f.note); print('tuned backward:', b.name, b.source, '|', b.note)
assert f.source == 'tuned' and b.source == 'tuned', (f, b)
o = dt.attention(q, k, k, causal=True, variant='tuned', db='$T/attn.db'); torch.cuda.synchronize(); print('ran', o.shape)"
  grep -E "^tuned (forward|backward):" "$OUT/cli.log" >> "$S"
  for bad in "tune --shape 256,64,100 --db $T/z.db --time-cap 0" "study contention --kernel flce --quick --db $T/z.db --budget 0"; do
    "$D" $bad >> "$OUT/cli.log" 2>&1; echo "detfuse $bad: exit $? (want 2)" | tee -a "$OUT/cli.log" >> "$S"
  done
  CUDA_VISIBLE_DEVICES= "$D" tune --shape 256,64,100 --db "$T/nogpu.db" >> "$OUT/cli.log" 2>&1
  echo "tune without a visible GPU: exit $?; store left behind: $([ -e "$T/nogpu.db" ] && echo YES || echo no)" \
    | tee -a "$OUT/cli.log" >> "$S"
else
  echo "cli: $D not built, skipped" >> "$S"
fi
if [ -x "$ROOT/build/tests/capi/test_capi_gpu" ]; then
  run cli 60 "$ROOT/build/tests/capi/test_capi_gpu" --gtest_filter='CApiAttentionGpu.*'
  grep -E "^\[  (PASSED|FAILED) " "$OUT/cli.log" >> "$S"
fi
rm -rf "$T"
echo "total $SECONDS s" >> "$S"
cat "$S"
