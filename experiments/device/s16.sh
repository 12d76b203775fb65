#!/usr/bin/env bash
# Session 16 on the H200 (issue 16), in two calls on one warm machine (carry [".debs", ".deps"]):
#   STAGE=1: the whole build (build_there.sh); pb1's softcap fix (its dV A fragment fenced
#            after the dV wait): AttentionWgmmaBwd.* (registry), AttentionWgmmaBwdGpu.Ew*
#            (float64 reference on every backward case with softcap, sanitizer-sized, 20
#            repeats), the CPU variant tests; memcheck / racecheck / synccheck on
#            EwSanitizerSized; pb1's registers.
#   STAGE=2: racecheck of ThreeWarpgroupsSanitizerSized (br192) without session 15's 40 s
#            bound; the forward variants at d128 causal (4,32,32,4096 and 1,16,16,8192) and
#            d64 (br192 against the heuristic's); the bench of the heuristic's backward
#            variants at the issue's shapes (3 repeats, dQ digests), pb1 with softcap beside ew2.
# Logs in $OUT (default ./out); $OUT/report.txt last.
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
export OUT
mkdir -p "$OUT"
source "$(dirname "$0")/lib.sh"
attention_bins
W=attention.bf16.wgmma
KV64=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb1_spt1_d64
KV64E=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
KV128=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
case ${STAGE:-1} in
  1)
    DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
    gpu_line "$OUT/gpu.txt"
    run tests_ew 200 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Ew*'
    run tests_variants 30 "$B/tests/attention/test_attention_variants"
    sanitize3 ew "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
    obj_regs "$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir" bwd_kv_d64_br128_st2_ts3_ew2_pb1 \
      > "$OUT/regs.log" 2>&1
    {
      cat "$OUT/gpu.txt"
      test_report tests_ew tests_variants
      grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log
      grep -A3 "Pb1" "$OUT/regs.log" | head -12
      cat "$SUMMARY"
    } > "$OUT/report.txt" ;;
  2)
    run racecheck_fwd192 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" \
      --gtest_filter='AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'
    F=$W.fwd
    F128="br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov1_pp0_ps1_rd1_d128 br128_bc128_st2_ov1_pp0_ps1_d128
          br128_bc128_st2_ov1_pp1_ps1_rd1_ot1_d128 br128_bc160_st2_ov1_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov1_pp0_ps1_qs2_d128
          br128_bc128_st2_ov1_pp0_rd1_ot1_d128 br128_bc176_st2_ov0_pp0_ps1_d128"
    fv=""; for n in $F128; do fv="$fv --variant $F.$n"; done
    run fwd128c 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $fv --repeats 3
    run fwd8k 60 "$DF" bench attention --shape 1,16,16,8192,8192,128 --causal $fv --repeats 3
    run fwd128 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 $fv --repeats 3
    F64="br192_bc128_st3_ov1_pp0_ps1_rd1_d64 br128_bc128_st3_ov1_pp0_ps1_d64 br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64"
    fv=""; for n in $F64; do fv="$fv --variant $F.$n"; done
    run fwd64 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 $fv --repeats 3
    for s in "128 4,32,32,4096,4096,128" "128c 4,32,32,4096,4096,128 --causal" "128g 4,32,8,4096,4096,128 --causal" \
             "64c 4,32,32,4096,4096,64 --causal" "64 4,32,32,4096,4096,64" "8k 1,16,16,8192,8192,128 --causal"; do
      set -- $s
      tag=$1; shift
      v="--variant $KV128"; [ "$tag" = 64 ] || [ "$tag" = 64c ] && v="--variant $KV64 --variant $KV64E"
      run "bench$tag" 60 "$DF" bench attention --shape "$@" $v --repeats 3
    done
    run bench64cap 60 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --softcap 50 --variant "$KV64" \
      --variant "$KV64E" --repeats 3
    {
      grep -h "ERROR SUMMARY\|PASSED\|FAILED" "$OUT/racecheck_fwd192.log"
      for f in fwd128c fwd8k fwd128 fwd64 bench128 bench128c bench128g bench64c bench64 bench8k bench64cap; do
        echo "=== $f"
        grep -hE "^attention\.|^variant" "$OUT/$f.log" | cut -c1-170
      done
      cat "$SUMMARY"
    } > "$OUT/report.txt" ;;
esac
