#!/usr/bin/env bash
# The lead's changes of session 7 on the H200 (< 3 minutes), from the repo root
# with ./build: FLCE accumulate_dW (C++: every variant; Python: main_grad=),
# the C ABI GPU tests (ABI 5), the attention heuristic's new choices (the
# Python attention tests run it), and the CPU suites the change touched.
# Look for: PASSED / "OK" lines, no FAILED.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so 2>/dev/null
run accumulate 120 build/tests/flce/test_flce_accumulate_gpu
run capi_gpu 60 build/tests/capi/test_capi_gpu
run cpu 60 bash -c 'build/tests/capi/test_capi && build/tests/common/test_common --gtest_filter="FlceProblem*" &&
  build/tests/attention/test_attention_variants --gtest_filter="AttentionHeuristic*"'
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so CUBLAS_WORKSPACE_CONFIG=:4096:8
run py_torch 150 bash -c "cd python/tests && python3 -m unittest -v test_torch test_torch_attention test_library"
tail -4 "$OUT/py_torch.log"
# 20 repeats, one dW digest: the hybrid FLCE variants at a two-chunk shape
# (8192 rows: two chunks at mb1024; the beta = 1 path), without the float64
# reference (verify's took longer than its limit).
run digest20_flce 60 build/detfuse bench flce --shape 8192,4096,128256 --repeats 20 --no-baseline \
  --variant flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024 \
  --variant flce.bf16.wgmmalt.owning.bm128_bn256_bk64_c2_st4_pp0_ex16_mb1024
tail -3 "$OUT/digest20_flce.log"
