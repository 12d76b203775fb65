#!/usr/bin/env bash
# The pds3 attention backward (issue 16, d=64: 128 queries per step, pds2's
# protocol; kernels/attention/wgmma/README.md "pds3") on the H200: run from the
# repo root with a Release build in ./build (DETFUSE_WGMMA=ON); logs under $OUT;
# about 2 minutes (the timeouts add up to 3 min 20 s). Stages:
#   1. the pds layout test (CPU: two-atom P^T / dS^T offsets, the dQ split by
#      queries, the 226 KB storage) and the pds3 variants' GPU tests
#      (AttentionWgmmaBwdGpu.Pds3*: float64 reference on every backward case,
#      at 18 key blocks, softcap + window, 33 query blocks per key block, 20
#      repeats at 18 key blocks; the sanitizer-sized cases) plus the registry
#      test (names, workspace sizes, can_run: 32 backward variants);
#   2. compute-sanitizer memcheck, racecheck, synccheck on the sanitizer-sized
#      pds3 cases (both pds3 variants);
#   3. `detfuse bench attention` at B=4, H=32, S=4096, d=64, causal and not,
#      pds3 beside pds2 (3 repeats), and 20 repeats of the ordered pds3
#      variant at 18 key blocks (the dQ# column: distinct dQ digests).
# Look for: PASSED lines (no FAILED), "ERROR SUMMARY: 0 errors" three times, a
# launch error ("invalid argument", "too many resources": pds3 asks for 226 KB
# of dynamic shared memory, 227 KB with the reserved 1 KB), the table last
# (fwd+bwd TFLOP/s of pds3 against pds2: 304.7 / 249.5 ordered in session 7;
# dQ# = 1 for every ordered row, 1 in digest20).
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

TW=$B/tests/attention_wgmma/test_attention_wgmma
DF=$B/detfuse
[ -x "$DF" ] || DF=$B/cli/detfuse

# 1. tests
run layout_cpu 5 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_pds3 60 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Pds3*'

# 2. sanitizers
F='AttentionWgmmaBwdGpu.Pds3SanitizerSized'
run memcheck_pds3 15 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run racecheck_pds3 20 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run synccheck_pds3 15 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter="$F"

# 3. bench, pds3 beside pds2 (d64)
W=attention.bf16.wgmma
V64="--variant $W.ordered.br128_bc128_st2_tma1_pds3_d64 --variant $W.atomic.br128_bc128_st2_tma1_pds3_d64
     --variant $W.ordered.br64_bc128_st2_tma1_pds2_d64 --variant $W.atomic.br64_bc128_st2_tma1_pds2_d64"
run bench_d64 20 "$DF" bench attention --shape 4,32,32,4096,4096,64 $V64 --repeats 3
run bench_d64_causal 20 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $V64 --repeats 3
# 20 repeats, one dQ digest (the dQ# column) for the ordered pds3 variant at
# 18 key blocks of 128 (B=2, H=16, Hkv=8, S=2304, causal)
run digest20_d64 15 "$DF" bench attention --shape 2,16,8,2304,2304,64 --causal \
  --variant $W.ordered.br128_bc128_st2_tma1_pds3_d64 --repeats 20

{
  echo
  echo "--- tests"
  test_report layout_cpu tests_pds3
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_pds3.log "$OUT"/racecheck_pds3.log "$OUT"/synccheck_pds3.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096 d=64, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d64" "d64 causal"
  for v in ordered.br128_bc128_st2_tma1_pds3_d64 atomic.br128_bc128_st2_tma1_pds3_d64 \
           ordered.br64_bc128_st2_tma1_pds2_d64 atomic.br64_bc128_st2_tma1_pds2_d64; do
    a=$(awk -v n="$W.$v" '$1 == n { print $6 " (" $9 ")" }' "$OUT/bench_d64.log")
    c=$(awk -v n="$W.$v" '$1 == n { print $6 " (" $9 ")" }' "$OUT/bench_d64_causal.log")
    printf '%-58s %14s %14s\n' "$v" "${a:-missing}" "${c:-missing}"
  done
  dg=$(awk -v n="$W.ordered.br128_bc128_st2_tma1_pds3_d64" '$1 == n { print $9 }' "$OUT/digest20_d64.log")
  echo "digest20 (2,16,8,2304 d64 causal, ordered pds3, 20 repeats): dQ# ${dg:-missing} (1 expected)"
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
