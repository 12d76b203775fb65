#!/usr/bin/env bash
# Session 13's last device call, from the repository root with ./build (built from the
# integration commit) and the peers installed in the same machine's /tmp (about 4 min):
#   1. the Python tests of the FLCE paths with the sync-free backward as the default
#      (test_flce_launch test_torch test_ops test_library);
#   2. the attention backward after its split into role files (machine code identical to
#      main's by experiments/ptx_identity.sh): the dQ-order CPU test, the backward GPU
#      tests (float64 reference and repeats of every backward, spt1, ordered, pds/sp),
#      and memcheck of the spt1 sanitizer-sized case;
#   3. detfuse bench attention of the heuristic's d128 / d64 causal backwards;
#   4. flce_peers at the issue's three shapes (32768 rows left out: the device budget), 30 passes in an order shuffled per pass:
#      the three GEMMs, Liger's CuTe FLCE, detfuse's default (sync-free backward), the
#      same with the host-read backward (--host-read), and main_grad=.
# Logs in $OUT (absolute), summary.txt one line per step.
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
source "$(dirname "$0")/lib.sh"
attention_bins
gpu_line "$OUT/gpu.txt"
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
(cd python/tests && run pytests 180 $PY -m unittest -v test_flce_launch test_torch test_ops test_library)
run order_cpu 10 "$B/tests/attention_wgmma/test_bwd_dq_order"
run tests_bwd 150 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.*'
run memcheck_spt1 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Spt1SanitizerSized'
# The heuristic's backwards at the issue's shape (session 12: 402.1 and 305.8 TFLOP/s fwd+bwd, causal).
run bench_d128_causal 40 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal --repeats 3 \
  --variant attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_spt1_d128
run bench_d64_causal 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --repeats 3 \
  --variant attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_spt1_d64
MG=flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024
run flce_peers 280 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" --budget-s 150 --rounds 1 \
  --interleave 30 --reps 5 --host-read --peers 3gemm,liger-cute,detfuse --variant --main-grad-variant $MG \
  --shapes 4096,4096,128256 16384,4096,128256 8192,2304,256000
echo "--- tests"
test_report order_cpu tests_bwd memcheck_spt1 | tail -30
grep -hE "^(FAIL|ERROR)|Ran [0-9]+ tests|^OK" "$OUT/pytests.log" | head
grep -hE "TFLOP|digest" "$OUT/bench_d128_causal.log" "$OUT/bench_d64_causal.log" | head -12
echo "--- flce (ms)"
grep -h "interleaved (" "$OUT/flce_peers.log" | cut -c1-600
sed -n '/^| N,D,V/,/^JSON/p' "$OUT/flce_peers.log"
cat "$SUMMARY"
