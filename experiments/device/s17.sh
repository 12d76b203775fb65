#!/usr/bin/env bash
# Session 17 on the H200 (issue 16), calls made back to back on one warm machine:
#   STAGE=1, carry [".debs", ".deps"]: the whole build (build_there.sh); FWD=1: the forward's
#            GPU tests (test_attention_wgmma's AttentionWgmmaGpu.*, test_attention_gpu's wgmma
#            registry cases) and memcheck / racecheck / synccheck on its sanitizer-sized cases
#            (two and three consumer warpgroups); the forward variants at the causal rows
#            (GQA 32/8 and d64 too) and d128 non-causal.
#   then, carry [".peers/a"]: bash experiments/peers/install.sh stage
#   STAGE=2, carry [".peers/b"]: detfuse beside FA4 deterministic on the issue's rows (one
#            process, interleaved), with --profile: per implementation the GPU busy time, the
#            host's lead and tail per call and the GPU ms of each kernel (where the time between
#            the events goes, on both sides). ATTN_V: more detfuse variants (--variant ...).
#            NCU=1: the SASS opcode mix (ncu, clock control off) of each side's first forward
#            kernel at 4,32,32,4096,128 non-causal and causal (where the instructions go).
# Logs in $OUT (default ./out); $OUT/report.txt last.
set -uo pipefail
source "$(dirname "$0")/lib.sh"  # OUT (made), run, sanitize3, attention_bins
W=attention.bf16.wgmma
case ${STAGE:-1} in
  1)
    DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
    attention_bins
    gpu_line "$OUT/gpu.txt"
    if [ "${FWD:-0}" = 1 ]; then
      run tests_fwd 200 "$TW" --gtest_filter='AttentionWgmmaGpu.*:AttentionWgmma.*:AttentionWgmmaFwdLayout.*:FwdTileOrder.*'
      run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
      sanitize3 fwd2 "$TW" --gtest_filter='AttentionWgmmaGpu.PersistentSanitizerSized:AttentionWgmmaGpu.TmaOSanitizerSized'
      sanitize3 fwd3 "$TW" --gtest_filter='AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'
    fi
    F=$W.fwd
    F128="br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov1_pp0_rd1_ot1_d128
          br128_bc128_st2_ov1_pp1_ps1_rd1_ot1_d128 ${F128X:-}"
    fv=""; for n in $F128; do fv="$fv --variant $F.$n"; done
    run fwd128g 60 "$DF" bench attention --shape 4,32,8,4096,4096,128 --causal $fv --repeats 3
    run fwd128c 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $fv --repeats 3
    run fwd8k 60 "$DF" bench attention --shape 1,16,16,8192,8192,128 --causal $fv --repeats 3
    run fwd128 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 $fv --repeats 3
    F64="br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64 ${F64X:-}"
    fv=""; for n in $F64; do fv="$fv --variant $F.$n"; done
    run fwd64c 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $fv --repeats 3
    run fwd64 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 $fv --repeats 3
    {
      cat "$OUT/gpu.txt"
      [ "${FWD:-0}" = 1 ] && test_report tests_fwd tests_gpu
      grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log 2>/dev/null
      for f in fwd128g fwd128c fwd8k fwd128 fwd64c fwd64; do
        echo "=== $f"
        grep -hE "^attention\.|^variant" "$OUT/$f.log" | cut -c1-170
      done
      cat "$SUMMARY"
    } > "$OUT/report.txt"
    cat "$OUT/report.txt" ;;
  2)
    bash experiments/peers/install.sh stage install > "$OUT/peers_install.log" 2>&1 || { tail -20 "$OUT/peers_install.log"; exit 1; }
    cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
    export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so
    gpu_line "$OUT/gpu.txt"
    run attention_peers 480 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
      --rows ${ATTN_ROWS:-issue} ${ATTN_V:-} --impl detfuse --impl fa4-det --reps 6 --warmup 2 --digest-runs 2 \
      --interleave 8 --profile
    gpu_line "$OUT/gpu.txt"
    if [ "${NCU:-0}" = 1 ]; then
      M="--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,sm__cycles_elapsed.max --print-metric-instances details"
      for r in 4,32,32,4096,128,0 4,32,32,4096,128,1; do
        t=$(echo "$r" | tr , _)  # no commas in log names: the device tool does not return such files
        run "ncu_fa4_$t" 120 ncu --clock-control none $M -k regex:'FlashAttentionForwardSm90' --launch-count 1 \
          python3 experiments/attention_peers.py --rows $r --impl fa4-det --reps 1 --warmup 0 --digest-runs 1 --interleave 0
        run "ncu_detfuse_$t" 120 ncu --clock-control none $M -k regex:'attention_fwd_wgmma' --launch-count 1 \
          python3 experiments/attention_peers.py --rows $r --impl detfuse --reps 1 --warmup 0 --digest-runs 1 --interleave 0
        for i in fa4 detfuse; do
          echo "=== ncu $i $r"; grep -E "sass__inst|smsp__inst|sm__cycles" -A14 "$OUT/ncu_${i}_$t.log" | tr -s ' ' | head -30
        done
      done
    fi
    grep -E "under the profiler|^    |interleaved \(" "$OUT/attention_peers.log" | cut -c1-170
    tail -25 "$OUT/attention_peers.log" ;;
esac
