#!/usr/bin/env bash
# Session 11, issue 16 item 4: the Hopper attention forward split into role
# files (fwd_kernel_traits.cuh, fwd_tile_scheduler.h, fwd_mainloop.cuh,
# fwd_softmax.cuh, fwd_epilogue.cuh, named_barriers.h, wgmma_helpers.cuh;
# kernels/attention/wgmma/README.md "Structure") with the machine code
# unchanged: experiments/ptx_identity.sh found the PTX and the SASS of all six
# forward batches (22 configurations) identical to main's. With identical
# machine code this run is a formality: it checks that the build of the
# branch is the one that was compared (the tests pass, the times are main's).
# Run from the repo root with a Release build in ./build (DETFUSE_WGMMA=ON);
# logs under /tmp/s11-fwdroles, tarred into $OUT/s11-fwdroles.tar.gz (the
# report also as $OUT/s11-fwdroles-report.txt); about 1.5 minutes expected
# (the timeouts add up to under 4). Stages (each runs whatever the one before
# returned; exit codes in summary.txt):
#   1. the forward tests: the CPU O-tile layout test, AttentionWgmma.* (the
#      registry: 22 forward variants, can_run refusals) and AttentionWgmmaGpu.*
#      (every forward variant against the float64 reference with 5 repeats,
#      persistent grids, the TMA O store);
#   2. compute-sanitizer memcheck, racecheck, synccheck on the persistent and
#      the TMA-O sanitizer-sized cases;
#   3. the registers and spills of the heuristic's forward objects (cuobjdump);
#   4. `detfuse bench attention` B=4 H=32 S=4096 causal, 2 repeats: the
#      forward heuristic's variant at d128 (ov1 ps1 rd1 ot1) and at d64
#      (ov1 ps1 rd1 ot1), each beside the plain ov1 ps1 variant.
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, 0 STL;
# forward TFLOP/s as main's (README "Structure": no change expected).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s11-fwdroles
gpu_line "$OUT/gpu.txt"
attention_bins

# 1. tests (forward only)
run layout_cpu 10 "$B/tests/attention_wgmma/test_attention_wgmma_fwd_layout"
run tile_order_cpu 10 "$B/tests/attention_wgmma/test_fwd_tile_order"
run tests_reg 20 "$TW" --gtest_filter='AttentionWgmma.*'
run tests_gpu 90 "$TW" --gtest_filter='AttentionWgmmaGpu.*'

# 2. sanitizers (persistent and TMA O sanitizer-sized cases)
sanitize3 fwd "$TW" --gtest_filter='AttentionWgmmaGpu.PersistentSanitizerSized:AttentionWgmmaGpu.TmaOSanitizerSized'

# 3. registers and spills of the forward objects the heuristic picks
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" fwd_d128_bc128_st2_ov1_ps1_rd1_ot1 fwd_d64_bc128_st3_ov1_ps1_rd1_ot1 > "$OUT/regs.log" 2>&1

# 4. bench: the forward heuristic's variants (kernels/attention/attention.cpp)
W=attention.bf16.wgmma.fwd
run bench_d128_causal 25 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal \
  --variant $W.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 --variant $W.br128_bc128_st2_ov1_pp0_ps1_d128 --repeats 2
run bench_d64_causal 25 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal \
  --variant $W.br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64 --variant $W.br128_bc128_st3_ov1_pp0_ps1_d64 --repeats 2

{
  echo
  echo "--- tests"
  test_report layout_cpu tile_order_cpu tests_reg tests_gpu
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_fwd.log "$OUT"/racecheck_fwd.log "$OUT"/synccheck_fwd.log
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per forward kernel)"
  cat "$OUT/regs.log"
  echo "--- bench (forward TFLOP/s, B=4 H=32 S=4096 causal, 2 repeats)"
  for f in "$OUT"/bench*.log; do
    echo "# $(basename "$f" .log)"
    grep -E "^variant|^attention\.bf16|detfuse bench:|rror" "$f" | grep -v "^===" | cut -c1-150
  done
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s11-fwdroles
