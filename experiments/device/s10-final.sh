#!/usr/bin/env bash
# Session 10, the integration build's last call (after s10-attndec.sh and
# s10-coopot1.sh, and experiments/peers/install.sh stage / stage install on the
# same warm machine): the Python suite (the FLCE backward that skips the
# upstream-gradient product at g = 1 and the materialised zero gradients), the
# heuristics' and registries' tests, every ex16 variant's float64 tests (run
# for a row-pass rewrite, since reverted: no gain), memcheck / racecheck on
# the new default (racecheck of the float64 test took over 100 s), the FLCE
# bench of the new and the old default, then the peers (s9-peers-measure.sh,
# ONLY=flce for FLCE alone: the issue's three shapes with --profile, which now
# prints each step's timeline; SKIP_PEERS=1: none). Logs flat in $OUT.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=build
cp $B/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
run heur 90 bash -c "$B/tests/attention/test_attention_variants && $B/tests/flce/test_flce_variants && $B/tests/tuner_gpu/test_tuner_gpu --gtest_filter='*euristic*'"
# Every ex16 variant's float64 reference and repeats, the sanitizers on the
# new default's cases.
run flce_ex16 150 $B/tests/flce/test_flce_gpu --gtest_filter='*ex16*'
DEFV=flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024
for t in memcheck racecheck; do
  sanitize $t 150 $B/tests/flce/test_flce_gpu --gtest_filter="*MatchesReference*bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024*"
done
run pytests 240 python3 python/tests/run.py
for s in 16384,4096,128256 8192,2304,256000 4096,4096,128256; do
  run bench_flce 60 $B/detfuse bench flce --shape "$s" --repeats 3 --variant $DEFV \
    --variant flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1024
done
echo "--- tests"
test_report heur flce_ex16
grep -h "ERROR SUMMARY" "$OUT/sanitize.log"
grep -hE "^flce\.|^variant" "$OUT/bench_flce.log"
tail -3 "$OUT/pytests.log"
L=flce.bf16.wgmmalt.owning
export FLCE_MG="${FLCE_MG:-$L.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1024 $L.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024}"
[ -n "${SKIP_PEERS:-}" ] && exit 0
ROUNDS=${ROUNDS:-1} bash "$(dirname "$0")/s9-peers-measure.sh"
