#!/usr/bin/env bash
# Session 8, second GPU pass (one cold call, < 600 s with the build): the
# merged tree's new kernels tested, trimmed to what each must show (the
# helpers' scripts s8-cluster.sh, s8-attn64.sh, s8-attnfwd.sh hold the full sets):
#   FLCE 2x2 clusters: every wgmma engine config against the reference GEMM
#     (the kernel change touches all), the c22 hybrid variants against the
#     float64 reference, memcheck on a c22 case, bench c2 vs c22 at two shapes;
#   attention pds3 (d64, 128 queries a step): its GPU tests, the C ABI walk,
#     memcheck/racecheck/synccheck, bench d64 causal;
#   attention forward rd1/ot1/bc160: the float64 walk, persistent and TMA-O
#     tests, memcheck/racecheck/synccheck.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=build; CLI=$B/detfuse; TW=$B/tests/attention_wgmma/test_attention_wgmma
LT=flce.bf16.wgmmalt.owning; P2=bm128_bn128_bk64_c2_st6_pp1; P22=bm128_bn128_bk64_c22_st6_pp1
run flce_cpu 20 $B/tests/flce/test_flce_variants
run engines 60 $B/tests/engines/test_engines_wgmma
run flce_c22 60 $B/tests/flce/test_flce_gpu --gtest_filter='*c22*'
sanitize memcheck 30 $B/tests/engines/test_engines_wgmma --gtest_filter='GemmWgmma.WgPing128c22_AK_BK:GemmWgmma.Cluster2x2Exp16SameBitsAs2x1'
for s in 16384,4096,128256 8192,2304,256000; do
  run "bench_flce_${s//,/x}" 40 "$CLI" bench flce --shape "$s" --repeats 3 \
    --variant $LT.${P2}_ex16_mb1024 --variant $LT.${P22}_ex16_mb1024 --variant $LT.${P22}_ex16_mb1920
done
run attn_cpu 20 bash -c "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout && $B/tests/attention_wgmma/test_attention_wgmma_fwd_layout"
run pds3 60 $TW --gtest_filter='AttentionWgmma.*:AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Pds3*:AttentionWgmmaBwdGpu.OrderedManyKeyBlocks*:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered*'
run capi 30 $B/tests/capi/test_capi_gpu
F='AttentionWgmmaBwdGpu.Pds3SanitizerSized'
for t in memcheck racecheck synccheck; do sanitize $t 30 $TW --gtest_filter="$F"; done
run bench_pds3 25 "$CLI" bench attention --shape 4,32,32,4096,4096,64 --causal --repeats 3 \
  --variant attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_d64 --variant attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_d64
run fwd 120 $TW --gtest_filter='AttentionWgmmaGpu.MatchesFloat64Reference*:AttentionWgmmaGpu.Persistent*:AttentionWgmmaGpu.TmaO*'
F='AttentionWgmmaGpu.TmaOSanitizerSized'
for t in memcheck racecheck synccheck; do sanitize $t 40 $TW --gtest_filter="$F"; done
echo "--- tests"
test_report flce_cpu engines flce_c22 attn_cpu pds3 capi fwd
grep -c "ERROR SUMMARY: 0 errors" "$OUT/sanitize.log"; grep "ERROR SUMMARY" "$OUT/sanitize.log" | grep -v " 0 errors"
echo "--- bench"
grep -hE "^(flce|attention)\.|^variant" "$OUT"/bench_*.log
cat "$SUMMARY"
