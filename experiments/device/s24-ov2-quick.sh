#!/usr/bin/env bash
# Session 24's last device minutes (about 250 s with the start): ov2 against ov1 on a prebuilt build of branch
# s24-ov2 (experiments/device/pack.sh PACK_ONLY="detfuse tests/attention_wgmma/test_attention_wgmma", carry
# ["dist"]): first ov2's bits against ov1's, then the forward bench in both orders at 4,32,32,4096,128
# (5 repeats), then d64 causal, then the forward float64 test. Each step is cut to what is left (UNTIL).
# Not the full check s25.sh makes (sanitizers, every shape, ncu): a first figure only.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
attention_bins
W=attention.bf16.wgmma.fwd
UNTIL=${UNTIL:-85}
brun bits 20 "$TW" --gtest_filter='AttentionWgmmaGpu.Ov2BitsEqualOv1'
A="$W.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128"; B2="$W.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128"
brun b128_ab 20 "$DF" bench attention --shape 4,32,32,4096,4096,128 --variant "$A" --variant "$B2" --repeats 5
brun b128_ba 20 "$DF" bench attention --shape 4,32,32,4096,4096,128 --variant "$B2" --variant "$A" --repeats 5
C="$W.br192_bc128_st3_ov1_pp0_rd1_ot1_d64"; D2="$W.br128_bc128_st3_ov2_pp0_rd1_ot1_d64"
brun b64c_ab 20 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$C" --variant "$D2" --repeats 5
brun b64c_ba 20 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$D2" --variant "$C" --repeats 5
brun f64ref 30 "$TW" --gtest_filter='AttentionWgmmaGpu.MatchesFloat64ReferenceAndIsDeterministic'
for f in "$OUT"/*.log; do echo "=== $f"; grep -E "^attention\.|PASSED|FAILED|Failure|exit" "$f" | cut -c1-160; done
