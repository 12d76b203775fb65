#!/usr/bin/env bash
# Session 8, the lead's FLCE changes on the H200 (< 4 min), with ./build:
#   the exp16 row pass with 4 loads in flight a thread (kernels/flce/rowwise.cu):
#   the float64 reference with every option on every variant that runs it (the
#   ex16 wgmma and the wgmmalt variants), the repeat digests, memcheck on a small
#   case; the cached target-check scratch (flce::validate_call): the C ABI and
#   accumulate suites; the heuristic's new bf16 default (the hybrid wgmmalt
#   variant on an H200): the tuner's GPU test and the Python suite.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
T=build/tests/flce
run flce_ex16 120 $T/test_flce_gpu --gtest_filter='*ex16*'
tail -3 "$OUT/flce_ex16.log"
sanitize memcheck 60 $T/test_flce_gpu --gtest_filter='*RepeatsBitwise*wgmmalt_owning_bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024'
run accumulate 120 $T/test_flce_accumulate_gpu  # every registered variant
tail -3 "$OUT/accumulate.log"
run capi_gpu 60 build/tests/capi/test_capi_gpu
tail -3 "$OUT/capi_gpu.log"
# The heuristic's new bf16 default (the hybrid on an H200): chosen, runs, correct.
run heuristic 120 build/tests/tuner_gpu/test_tuner_gpu --gtest_filter='*Heuristic*'
tail -3 "$OUT/heuristic.log"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so CUBLAS_WORKSPACE_CONFIG=:4096:8
run py_torch 150 bash -c "cd python/tests && python3 -m unittest test_torch"
tail -4 "$OUT/py_torch.log"
cat "$SUMMARY"
