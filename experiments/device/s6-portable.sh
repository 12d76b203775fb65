#!/usr/bin/env bash
# The `portable` determinism level (issue 19) on the GPU: run from the repo
# root with a Release build in ./build (DETFUSE_WGMMA on or off); logs under
# $OUT; under 3 minutes. Stages:
#   1. CPU tests of the emulation (test_reference: portable math, emulation
#      against the float64 reference) and the variant walk (test_flce_variants);
#   2. test_emulate_gpu: every emulated variant (fp32 fma FLCE owning/partials,
#      fma attention owning/partials in fp32 and bf16) at 4 FLCE and 5
#      attention odd shapes, the GPU's bytes against the CPU emulation, bit for
#      bit (FLCE several_chunks: N=4700, D=21, V=60013, 3 chunks at mb512);
#   3. the fp32 FLCE and attention GPU tests of the fma variants (against the
#      float64 reference; determinism), to check that nothing else moved;
#   4. `detfuse bench` of the fp32 fma variants at one moderate shape per
#      family (compare the ms with the previous build's figures: the kernels
#      now use the portable exp/log/tanh and explicitly rounded steps).
# Look for: "[  PASSED  ]" for every binary; the count of "bit-identical"
# lines (one per variant and case) and no "elements differ" line; the bench
# rows (ms) beside the lead's figures of the previous build.
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"

# 1. CPU side
run reference_cpu 40 "$B/tests/reference/test_reference" --gtest_filter='PortableMath.*:Emulate*'
run flce_variants_cpu 20 "$B/tests/flce/test_flce_variants" --gtest_filter='PortableVariants.*:FlcePlan.*'
# 2. GPU bits == emulation bits
run emulate_gpu 100 "$B/tests/reference/test_emulate_gpu"
# 3. the fma variants against the float64 reference (a sample: one tile shape each)
run flce_gpu 60 "$B/tests/flce/test_flce_gpu" --gtest_filter='*fp32_fma_owning_bm128_bn128*mb1024:*fp32_fma_partials_bm64*sk4*'
run attention_gpu 30 "$B/tests/attention/test_attention_gpu" --gtest_filter='*fp32_fma_*br64_bc32*d64*:*bf16_fma_owning_br64_bc64*d128*'
# 4. cost
F=flce.fp32.fma
run bench_flce 40 "$B/detfuse" bench flce --shape 4096,1024,32000 --dtype fp32 --repeats 5 \
  --variant $F.owning.bm128_bn128_bk8_tm8_tn8_mb1024 --variant $F.owning.bm128_bn64_bk8_tm8_tn4_mb1024 \
  --variant $F.owning.bm64_bn64_bk8_tm4_tn8_mb1024 --variant $F.partials.bm128_bn128_bk8_tm8_tn8_mb1024_sk4_vs8192 \
  --variant $F.atomic.bm128_bn128_bk8_tm8_tn8_mb1024_sk4
A=attention.fp32.fma
run bench_attention 40 "$B/detfuse" bench attention --shape 2,16,16,2048,2048,64 --dtype fp32 --causal --repeats 3 \
  --variant $A.owning.br64_bc32_w4_d64 --variant $A.partials.br64_bc32_w4_d64_mb256 --variant $A.owning.br64_bc64_w8_d64

{
  echo
  echo "--- tests"
  for f in reference_cpu flce_variants_cpu emulate_gpu flce_gpu attention_gpu; do
    printf '%-20s ' "$f"; grep -hE "^\[  (PASSED|FAILED) " "$OUT/$f.log" | tr '\n' ' '
    echo "skipped: $(grep -c '^\[  SKIPPED \] .*(' "$OUT/$f.log")"
  done
  grep -hE "^\[  FAILED  \] " "$OUT"/*.log | sort -u | head -20
  echo "--- portable: bit-identical (variant, case) pairs, and mismatches"
  echo "flce bit-identical:      $(grep -c '^\[portable\] flce\.' "$OUT/emulate_gpu.log")"
  echo "attention bit-identical: $(grep -c '^\[portable\] attention\.' "$OUT/emulate_gpu.log")"
  echo "mismatch reports:        $(grep -c 'elements differ' "$OUT/emulate_gpu.log")"
  grep -h 'elements differ' "$OUT/emulate_gpu.log" | head -8
  echo "--- bench (ms)"
  grep -hE "three cuBLAS|fp32\.fma" "$OUT"/bench_*.log | grep -vE "^(\[|===)" | head -12
  echo "--- stages"
  cat "$SUMMARY"
}
