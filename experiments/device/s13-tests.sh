#!/usr/bin/env bash
# Session 13's GPU tests on the H200, from the repository root with ./build (about 2 min):
#   1. the C ABI's GPU tests (CApiGpu.*: forward_backward against flce::run, the bad
#      target, detfuse_scale_unless_one against the host's products) and memcheck of the
#      scale test;
#   2. the FLCE bad-input tests and the default and cuBLASLt variants against the float64
#      reference (rowwise.cu changed: a kernel added beside the others);
#   3. the Python tests of the FLCE paths (test_flce_launch test_torch test_ops
#      test_library: the eager function's and the sync-free backward's bits against the
#      op's and the host-read path's, the retained-graph refusal).
# Logs to $OUT (summary.txt: one line per step with its exit code).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=${BUILD:-build}
TG=$B/tests/flce/test_flce_gpu
TC=$B/tests/capi/test_capi_gpu
DEF=flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
run capi_gpu 90 $TC --gtest_filter='CApiGpu.*'
run memcheck_scale 90 compute-sanitizer --tool memcheck --error-exitcode 9 $TC --gtest_filter='CApiGpu.ScaleUnlessOne*'
run flce_gpu 120 $TG --gtest_filter="FlceBadInput.*:FlceBadTargets.*:*MatchesReference*${DEF//./_}:*MatchesReference*flce_bf16_cublaslt_owning_mb1024"
(cd python/tests && run pytests 180 $PY -m unittest -v test_flce_launch test_torch test_ops test_library)
test_report capi_gpu memcheck_scale flce_gpu pytests 2>/dev/null | tail -40
grep -hE "^(FAIL|ERROR)|Ran [0-9]+ tests|^OK|FAILED" "$OUT/pytests.log" | head -20
cat "$SUMMARY"
