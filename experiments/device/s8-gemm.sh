#!/usr/bin/env bash
# Branch s8-gemm on the H200, from the repository root (~1-2 min): issue 17,
# why our wgmma GEMMs trail cuBLAS by 10-20% -- our kernel's structure or the
# tile shape? One process of experiments/gemm_cutlass_probe.cu times, at the
# logits shapes 4096,128256,4096 and 2048,256000,2304 and the dX shape
# 4096,4096,128256 (M,N,K; bf16 out): cuBLASLt, our kernel (every registered
# WgConfig, store_bf16 and exp16 epilogues, group_m default/4/16) and CUTLASS
# 4.2's own complete sm90 kernels (ping-pong / cooperative, 2x1 / 1x2 clusters,
# raster and swizzle), each bf16 product checked against cuBLASLt's output.
# Then the existing wgmma_probe at 16384,4096,128256 (our three FLCE products
# with their production epilogues, fp32 out, beside three cuBLASLt GEMMs).
# Binaries: the Release build in ./build configured with -DDETFUSE_WGMMA=ON
#   cmake --build build --target gemm_cutlass_probe wgmma_probe
# Output: logs under $OUT; the probe's summary table last.
set -u
source "$(dirname "$0")/lib.sh"
B=${BUILD:-build}
gpu_line "$OUT/gpu.txt"
if [ ! -x "$B/experiments/gemm_cutlass_probe" ]; then
  echo "s8-gemm: $B/experiments/gemm_cutlass_probe missing (not in 'all'): cmake --build $B --target gemm_cutlass_probe" >&2
  exit 2
fi
run gemm_cutlass_probe 120 "$B/experiments/gemm_cutlass_probe" 10
run wgmma_probe 50 "$B/experiments/wgmma_probe" 16384 4096 128256 5
echo
cat "$OUT/gpu.txt"
echo "--- wgmma_probe 16384,4096,128256 (ms, fp32 out)"
grep -E "^shape|logits" "$OUT/wgmma_probe.log"
echo "--- gemm_cutlass_probe summary (x = cuBLAS ms / ms; full table in $OUT/gemm_cutlass_probe.log)"
sed -n '/^SUMMARY/,$p' "$OUT/gemm_cutlass_probe.log"
echo "--- runs"
cat "$SUMMARY"
