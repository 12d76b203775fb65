#!/usr/bin/env bash
# Session 10, the integration build's last call (after s10-attndec.sh and
# s10-coopot1.sh, and experiments/peers/install.sh stage / stage install on the
# same warm machine): the Python suite (the FLCE backward that skips the
# upstream-gradient product at g = 1 and the materialised zero gradients), the
# heuristics' and registries' tests, then both issues beside their peers
# (s9-peers-measure.sh: FLCE at the issue's three shapes with --profile, which
# now prints each step's timeline; attention on the five rows with the dc1
# backward beside the heuristic). Logs flat in $OUT (few files) plus a tarball.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=build
cp $B/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
run heur 90 bash -c "$B/tests/attention/test_attention_variants && $B/tests/flce/test_flce_variants && $B/tests/tuner_gpu/test_tuner_gpu --gtest_filter='*euristic*'"
run flce_default 120 $B/tests/flce/test_flce_gpu --gtest_filter='*bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024*'
run pytests 240 python3 python/tests/run.py
echo "--- tests"
test_report heur flce_default
tail -3 "$OUT/pytests.log"
L=flce.bf16.wgmmalt.owning
export FLCE_MG="${FLCE_MG:-$L.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1024 $L.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024}"
W=attention.bf16.wgmma
F=$W.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128
export ATTN_V="${ATTN_V:- --variant $F+$W.ordered.br64_bc128_st2_tma1_pds2_sp1_dc1_d128 --variant $F+$W.atomic.br64_bc128_st2_tma1_pds2_sp1_dc1_d128}"
ROUNDS=${ROUNDS:-1} bash "$(dirname "$0")/s9-peers-measure.sh"
