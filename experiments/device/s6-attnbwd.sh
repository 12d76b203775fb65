#!/usr/bin/env bash
# The pds attention backward (issue 16, item 1: P^T and dS^T through shared
# memory, the d128 kv kernel without spills) on the H200: run from the repo
# root with a Release build in ./build (DETFUSE_WGMMA=ON); logs under $OUT;
# under 3 minutes. Stages:
#   1. the wgmma attention tests filtered to the pds variants (the CPU
#      registry test, float64 reference on every backward case and the
#      18-key-block ones, 20 repeats at 18 key blocks);
#   2. compute-sanitizer memcheck, racecheck, synccheck on the sanitizer-sized
#      pds cases (all six pds variants);
#   3. `detfuse bench attention` at B=4, H=32, S=4096, d=128 and d=64, causal
#      and not, 20 repeats (the digest column: distinct dQ digests over the 20
#      runs, 32 key blocks), the pds variants beside the existing tma1 and
#      owning ones.
# Look for: PASSED lines (no FAILED), "ERROR SUMMARY: 0 errors" three times,
# the bench rows (fwd+bwd TFLOP/s; distinct dQ digests = 1 for every ordered
# and owning row).
set -u
OUT=${OUT:-out}
B=${BUILD:-build}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
run() {  # run NAME TIMEOUT CMD...: log to $OUT/NAME.log, one summary line
  local name=$1 t=$2; shift 2
  local log="$OUT/$name.log" start=$SECONDS
  echo "=== $*" >> "$log"
  timeout -s INT -k 10 "$t" "$@" >> "$log" 2>&1
  local rc=$?
  printf '%-28s exit %3d  %4d s\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$SUMMARY"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1

TW=$B/tests/attention_wgmma/test_attention_wgmma
DF=$B/detfuse
[ -x "$DF" ] || DF=$B/cli/detfuse

# 1. tests
run layout_cpu 10 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_pds 40 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Pds*'

# 2. sanitizers
F='AttentionWgmmaBwdGpu.PdsSanitizerSized'
run memcheck_pds 15 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run racecheck_pds 20 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run synccheck_pds 15 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter="$F"

# 3. bench, new (pds1) beside old
W=attention.bf16.wgmma
V128="--variant $W.ordered.br64_bc128_st2_tma1_pds1_d128 --variant $W.atomic.br64_bc128_st2_tma1_pds1_d128
      --variant $W.ordered.br64_bc128_st2_tma1_d128 --variant $W.atomic.br64_bc128_st2_tma1_d128
      --variant $W.owning.br64_bc128_st2_qbc64_qst2_d128"
V64="--variant $W.ordered.br64_bc128_st2_tma1_pds1_d64 --variant $W.ordered.br64_bc128_st3_tma1_pds1_d64
     --variant $W.atomic.br64_bc128_st2_tma1_pds1_d64 --variant $W.atomic.br64_bc128_st3_tma1_pds1_d64
     --variant $W.ordered.br64_bc128_st2_tma1_d64 --variant $W.atomic.br64_bc128_st2_tma1_d64
     --variant $W.owning.br64_bc128_st2_qbc128_qst2_d64"
run bench_d128 21 "$DF" bench attention --shape 4,32,32,4096,4096,128 $V128 --repeats 20
run bench_d128_causal 21 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $V128 --repeats 20
run bench_d64 21 "$DF" bench attention --shape 4,32,32,4096,4096,64 $V64 --repeats 20
run bench_d64_causal 21 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $V64 --repeats 20

{
  echo
  echo "--- tests"
  grep -hE "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran|^\[       OK \]|^\[  FAILED  \]" "$OUT"/layout_cpu.log "$OUT"/tests_pds.log | tail -30
  grep -hE "Failure|error:" "$OUT"/tests_pds.log | head -10
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_pds.log "$OUT"/racecheck_pds.log "$OUT"/synccheck_pds.log
  echo "--- bench (B=4, H=32, S=4096; 20 repeats)"
  for f in "$OUT"/bench*.log; do echo "# $(basename "$f" .log)"; grep -E "variant|attention\.bf16" "$f"; done
  echo "--- summary"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
