#!/usr/bin/env bash
# Session 27 (issue 16), branch s26-nx: hs2 on the d128 heuristic's pds4 pb5 kv kernel (BwdKvHsConfig). The
# causal GQA rows (4,32,8,4096,128 and 2,32,8,8192,128, causal) run sp1 ew1 hs2 (session 18: hs2 7-15% faster
# than the unsplit kernel of that time), whose step is 5-7% slower than pds4 pb5's (sessions 19-24: sp1 ew1 ->
# pb1 -> pb3 -> pds4 pb5 at 4,32,32,4096,128, 7.49 -> 7.10 ms fwd+bwd); pds4 pb5 without the split is the
# unsplit kernel there. Prediction: fwd+bwd 2-5% faster than sp1 ew1 hs2 on both causal GQA rows, faster than
# pds4 pb5 unsplit there; non-causal GQA (hs2 measured 1% slower in session 18) flat to slower.
# Binaries: built on the CPU machine (dist/build.tar.xz, carry ["dist"]); lib.sh unpacks them.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
attention_bins
gpu_line "$OUT/gpu.txt"
HS1=ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_hs2_d128
HS4=ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_hs2_d128
P4=ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128
# fwd+bwd, 3 repeats, both orders (bench_both: non-causal and causal).
bench_both gqa4kab 4,32,8,4096,4096,128 "$HS1" "$HS4" "$P4"
bench_both gqa4kba 4,32,8,4096,4096,128 "$P4" "$HS4" "$HS1"
run bench_gqa8kab 40 "$DF" bench attention --shape 2,32,8,8192,8192,128 --causal --variant "$W.$HS1" --variant "$W.$HS4" --variant "$W.$P4" --repeats 3
run bench_gqa8kba 40 "$DF" bench attention --shape 2,32,8,8192,8192,128 --causal --variant "$W.$P4" --variant "$W.$HS4" --variant "$W.$HS1" --repeats 3
# The hs family (3 variants now): the float64 reference (GQA 4:1 and 8:1, odd lengths, Sq != Sk, softcap,
# window, 18 key blocks), dQ bitwise the unsplit variant's, 20 repeats one digest, the sanitizer-sized cases.
brun tests_hs 200 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Hs*'
sanitize_gtest hs 100 'AttentionWgmmaBwdGpu.HsSanitizerSized'
brun tests_var 30 "$B/tests/attention/test_attention_variants"
for v in "$HS1" "$HS4"; do ncu_kv "ncu_${v#*pds}" 4,32,8,4096,4096,128 "$v"; done
REPORT_TESTS="tests_hs tests_var" fwd_report s27hs "Duration|inst_executed|cycles_elapsed|hmma|Warp Cycles Per Issued"
