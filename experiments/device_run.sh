#!/usr/bin/env bash
# One device call: GPU tests, sanitizers, benchmarks and a tuning session from
# a carried folder of Release binaries (dist/, made by experiments/make_dist.sh).
# The device tool returns at most 8 files, so each stage appends to one log of
# its group under $OUT. Stages: tests sanitize probe-bf16 probe-fp32 tune
# wgmma-tests wgmma-sanitize wgmma-probe (the Hopper engine, issue #7)
# invariance (config-invariance classes at a multi-chunk shape, issue #7)
# reliability (the tuner's GPU tests and supervised faults, issue #9)
# attention-tests attention-sanitize attention-probe bench-attention attention-preset (issue #8)
# study-quick study-attention-quick (issue #10)
# capi-python (issue #11) tuner-gpu (the family-neutral tuner on the GPU)
set -u
source "$(dirname "$0")/device/lib.sh"
DIST=${DIST:-dist}
# make_dist.sh packs the binaries as bin.tar.xz; unpack once.
if [ -f "$DIST/bin.tar.xz" ] && [ ! -d "$DIST/bin" ]; then tar -C "$DIST" -xJf "$DIST/bin.tar.xz"; fi
D=$DIST/bin
for stage in "$@"; do
  case $stage in
    tests)
      gpu_line "$OUT/tests.log"
      run tests 60 "$D/test_gpu_smoke"
      run tests 150 "$D/test_engines"
      run tests 30 "$D/test_flce_variants"
      run tests 240 "$D/test_flce_gpu"
      grep -E "^\[  (PASSED|FAILED) |tests? ran" "$OUT/tests.log" | tail -8
      grep -E "distinct digests" "$OUT/tests.log" | sort | uniq -c ;;
    sanitize)
      sanitize memcheck 100 "$D/test_flce_gpu" \
        --gtest_filter='*MatchesReference*bf16_mma_owning_bm128_bn128*mb512:*MatchesReference*fp32_fma_partials_bm64*:FlceBadInput*'
      sanitize racecheck 80 "$D/test_engines" --gtest_filter='GemmBf16*'
      sanitize synccheck 60 "$D/test_flce_gpu" \
        --gtest_filter='*RepeatsBitwise*bf16_mma_partials_bm64*'
      grep -E "ERROR SUMMARY|^=== exit" "$OUT/sanitize.log" ;;
    probe-bf16)
      run bench 120 "$D/flce_probe" 16384 4096 128256 bf16 "" 3
      run bench 120 "$D/flce_probe" 8192 2304 256000 bf16 "" 3
      grep -E "cuBLAS|owning.bm128_bn128.*mb1920" "$OUT/bench.log" ;;
    probe-fp32)
      run bench 90 "$D/flce_probe" 16384 4096 128256 fp32 owning.bm128_bn128 1
      grep -E "fp32" "$OUT/bench.log" | tail -4 ;;
    tune)
      run tune 200 "$D/detfuse" tune --preset llm-heads --budget 100s --db "$OUT/detfuse.db"
      run tune 30 "$D/detfuse" best --kernel flce --shape 16384,4096,128256 --dtype bf16 --db "$OUT/detfuse.db"
      run tune 60 "$D/detfuse" verify --kernel flce --shape 16384,4096,128256 --dtype bf16 --variant best \
        --seed 0 --repeats 3 --db "$OUT/detfuse.db"
      run tune 60 "$D/detfuse" verify --kernel flce --shape 257,200,4099 --dtype bf16 \
        --variant flce.bf16.mma.atomic.bm128_bn128_bk32_wm2_wn4_st4_mb1024_sk4 --seed 0 --repeats 5 --db "$OUT/detfuse.db"
      tail -n 40 "$OUT/tune.log" ;;
    wgmma-tests)
      gpu_line "$OUT/wgmma.log"
      run wgmma 120 "$D/test_engines_wgmma"
      run wgmma 300 "$D/test_flce_gpu" --gtest_filter='*wgmma*:*cublaslt*'
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran" "$OUT/wgmma.log" | tail -20
      grep -E "distinct digests" "$OUT/wgmma.log" | sort | uniq -c ;;
    wgmma-sanitize)
      sanitize memcheck 120 "$D/test_engines_wgmma" \
        --gtest_filter='GemmWgmma.WgCoop256c2_AK_BMN:GemmWgmma.WgPing128c2_AMN_BMN:GemmWgmma.SplitK:GemmWgmma.LogitsRowStatistics'
      sanitize memcheck 120 "$D/test_flce_gpu" \
        --gtest_filter='*MatchesReference*wgmma_partials_bm128_bn256_bk64_c2*:*MatchesReference*wgmma_owning_bm128_bn128_bk64_c2_st6_pp1_mb512'
      sanitize racecheck 120 "$D/test_engines_wgmma" \
        --gtest_filter='GemmWgmma.WgCoop256c2_AMN_BMN:GemmWgmma.WgPing128c1_AK_BK'
      sanitize synccheck 120 "$D/test_engines_wgmma" \
        --gtest_filter='GemmWgmma.WgCoop128c2_AK_BK:GemmWgmma.WgPing128c2_AK_BMN:GemmWgmma.SplitK'
      grep -E "ERROR SUMMARY|^=== exit" "$OUT/sanitize.log" ;;
    wgmma-probe)
      run bench 60 "$D/wgmma_probe" 16384 4096 128256 5
      run bench 60 "$D/wgmma_probe" 8192 2304 256000 5
      run bench 150 "$D/flce_probe" 16384 4096 128256 bf16 "" 3
      run bench 150 "$D/flce_probe" 8192 2304 256000 bf16 "" 3
      grep -E "cuBLAS|wgmma|cublaslt|bm128_bn128_bk32_wm2_wn4_st4_mb1920|TF/s" "$OUT/bench.log" ;;
    engine-tests)
      run wgmma 120 "$D/test_engines_wgmma"
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/wgmma.log" | tail -5 ;;
    ncu)
      # Per-kernel time of one FLCE call (Llama head) for the best wgmma and cuBLASLt variants.
      for v in wgmma.owning.bm128_bn256_bk64_c2_st4_pp0_mb1920 cublaslt.owning.mb2000; do
        run ncu 150 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
          "$D/flce_probe" 16384 4096 128256 bf16 "$v" 1
      done
      grep -E "^  [a-zA-Z_].*\(|gpu__time_duration.sum|^flce" "$OUT/ncu.log" | head -80 ;;
    bench)
      # The issue's measurement: detfuse bench flce beside three cuBLAS GEMMs in one process.
      V=flce.bf16
      run bench 150 "$D/detfuse" bench flce --shape 16384,4096,128256 --dtype bf16 --repeats 5 \
        --variant $V.cublaslt.owning.mb2000 --variant $V.wgmma.owning.bm128_bn128_bk64_c2_st6_pp1_mb1920 \
        --variant $V.wgmma.owning.bm128_bn256_bk64_c2_st4_pp0_mb1920
      run bench 150 "$D/detfuse" bench flce --shape 8192,2304,256000 --dtype bf16 --repeats 5 \
        --variant $V.cublaslt.owning.mb2000 --variant $V.wgmma.owning.bm128_bn256_bk64_c2_st4_pp0_mb1920 \
        --variant $V.wgmma.owning.bm128_bn128_bk64_c2_st6_pp1_mb1920
      run bench 120 "$D/detfuse" bench flce --shape 16384,4096,128256 --dtype fp32 --repeats 2 \
        --variant flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb1024
      grep -vE "^\s*$" "$OUT/bench.log" | tail -30 ;;
    invariance)
      run invariance 240 "$D/detfuse" verify --kernel flce --shape 20000,256,50000 --dtype bf16 --all-variants \
        --seed 0 --repeats 3 --db "$OUT/verify.db"
      tail -n 30 "$OUT/invariance.log" ;;
    reliability)
      run reliability 200 "$D/test_tuner_gpu"
      run reliability 300 "$D/test_tuner_supervised_gpu"
      T=$(mktemp -d)
      run reliability 60 "$D/detfuse" tune --shape 4096,2048,32000 --db "$T/b.db" --engine cublaslt \
        --repeats 1000000000 --budget 20s
      ( "$D/detfuse" tune --shape 4096,2048,32000 --db "$T/s.db" --resume --engine wgmma --time-cap 2s \
          > "$T/a.out" 2> "$T/a.err"; echo "first tuner: exit $? (expect 0)"; tail -2 "$T/a.err" ) >> "$OUT/reliability.log" 2>&1 &
      A=$!
      sleep 15
      run reliability 30 "$D/detfuse" tune --shape 4096,2048,32000 --db "$T/s.db" --resume --engine wgmma
      wait $A
      "$D/detfuse" tune --shape 2048,1024,50257 --db "$T/k.db" --engine wgmma --time-cap 2s > /dev/null 2> "$T/k.err" &
      K=$!
      sleep 12; kill -9 $K; wait $K 2>/dev/null
      echo "results finished before kill -9: $(grep -c ': ok ' "$T/k.err")" >> "$OUT/reliability.log"
      run reliability 120 "$D/detfuse" tune --shape 2048,1024,50257 --db "$T/k.db" --engine wgmma --time-cap 2s --resume
      run reliability 30 "$D/detfuse" tune --shape 1073741824,1073741824,1 --db "$T/x.db"
      run reliability 30 "$D/detfuse" tune --shape 2147483648,1,1 --db "$T/x.db"
      rm -rf "$T"
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]|^=== |reason|expect|killed|crashed|abandon" "$OUT/reliability.log" | tail -40 ;;
    attention-tests)
      gpu_line "$OUT/attention.log"
      run attention 60 "$D/test_attention_variants"
      run attention 240 "$D/test_attention_gpu"
      run attention 120 "$D/test_attention_wgmma"
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran|distinct" "$OUT/attention.log" | tail -40 ;;
    attention-sanitize)
      # memcheck and synccheck over a variant of each fma strategy and the wgmma tests;
      # racecheck (much slower) over one fma variant and the small wgmma backward case.
      F1='*Correct*bf16_fma_owning_br32_bc32_w4_d64*:*Correct*fp32_fma_partials_br32_bc32_w4_d64*:*Correct*bf16_fma_atomic_br32_bc32_w4_d64*:*ChunkedPartials*'
      for t in memcheck synccheck; do
        sanitize $t 150 "$D/test_attention_gpu" --gtest_filter="$F1"
        sanitize $t 150 "$D/test_attention_wgmma" \
          --gtest_filter='AttentionWgmmaGpu.*:AttentionWgmmaBwdGpu.SanitizerSized'
      done
      sanitize racecheck 200 "$D/test_attention_gpu" \
        --gtest_filter='*Correct*bf16_fma_owning_br32_bc32_w4_d64*'
      sanitize racecheck 200 "$D/test_attention_wgmma" \
        --gtest_filter='AttentionWgmmaBwdGpu.SanitizerSized'
      grep -E "ERROR SUMMARY|^=== exit" "$OUT/sanitize.log" ;;
    attention-probe)
      run attention_bench 200 "$D/attention_wgmma_probe"
      run attention_bench 200 python3 experiments/attention_peers.py
      grep -E "TFLOP|flash|cudnn" "$OUT/attention_bench.log" | tail -60 ;;
    study-quick)
      # Issue 10: the quick contention study, its figures and report (REPORT.md in $OUT/contention).
      run study 330 "$D/detfuse" study contention --kernel flce --quick --db "$OUT/study.db"
      run study 60 python3 experiments/contention/plot.py --db "$OUT/study.db" --out "$OUT/contention"
      tail -n 25 "$OUT/study.log" ;;
    study-attention-quick)
      # Issue 10, attention half: the quick attention study into the same store (after study-quick
      # in the same call, the report has both families), its figures and report.
      run study 330 "$D/detfuse" study contention --kernel attention --quick --db "$OUT/study.db"
      run study 60 python3 experiments/contention/plot.py --db "$OUT/study.db" --out "$OUT/contention"
      tail -n 25 "$OUT/study.log" ;;
    capi-python)
      # Issue 11: the C ABI's GPU tests (the library beside the binary) and every GPU Python check.
      run capi 120 env LD_LIBRARY_PATH="$D:$LD_LIBRARY_PATH" "$D/test_capi_gpu"
      DETFUSE_LIB="$PWD/$D/libdetfuse_c.so" OUT="$OUT/py" bash python/tests/run_gpu.sh > /dev/null 2>&1
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/capi.log"; cat "$OUT/py/summary.txt" ;;
    bench-attention)
      # Issue 8's bar shape through the command (forward, forward+backward, digests), non-causal and
      # causal, over the Hopper variants (the fma ones are reference-grade, minutes at this shape).
      W=attention.bf16.wgmma
      V128="--variant $W.owning.br64_bc128_st2_qbc64_qst2_d128 --variant $W.owning.br64_bc128_st3_qbc64_qst2_d128
            --variant $W.atomic.br64_bc128_st2_d128 --variant $W.partials.br64_bc128_st2_d128_mb256
            --variant $W.ordered.br64_bc128_st2_d128 --variant $W.ordered.br64_bc128_st3_d128
            --variant $W.atomic.br64_bc128_st2_tma1_d128 --variant $W.ordered.br64_bc128_st2_tma1_d128
            --variant $W.fwd.br128_bc128_st2_ov1_pp0_d128"
      V64="--variant $W.owning.br64_bc128_st2_qbc128_qst2_d64 --variant $W.owning.br96_bc128_st2_qbc128_qst2_d64
           --variant $W.atomic.br64_bc128_st2_d64 --variant $W.ordered.br64_bc128_st2_d64
           --variant $W.atomic.br64_bc128_st2_tma1_d64 --variant $W.ordered.br64_bc128_st2_tma1_d64
           --variant $W.fwd.br128_bc128_st3_ov1_pp0_d64"
      for c in "" --causal; do
        run attention_bench 150 "$D/detfuse" bench attention --shape 4,32,32,4096,4096,128 $c --repeats 5 $V128
      done
      run attention_bench 100 "$D/detfuse" bench attention --shape 4,32,32,4096,4096,64 --causal --repeats 5 $V64
      grep -vE "^\s*$" "$OUT/attention_bench.log" | tail -60 ;;
    tuner-gpu)
      run tuner 300 "$D/test_tuner_gpu"
      run tuner 200 "$D/test_study_spread_gpu"
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/tuner.log" ;;
    attention-tune)
      # The tuner on attention through the command: a smoke preset, the config-invariance classes,
      # and the issue's bar shape over the Hopper variants (GQA 32/8).
      run attention_tune 150 "$D/detfuse" tune --kernel attention --preset smoke-attention --db "$OUT/attn.db"
      run attention_tune 100 "$D/detfuse" verify --kernel attention --shape 1,4,2,300,257,64 --causal --all-variants \
        --repeats 3 --db "$OUT/attn.db"
      run attention_tune 200 "$D/detfuse" tune --kernel attention --shape 4,32,8,4096,4096,128 --engine wgmma \
        --db "$OUT/attn.db"
      run attention_tune 30 "$D/detfuse" best --kernel attention --shape 4,32,8,4096,4096,128 --db "$OUT/attn.db"
      grep -vE "^\s*$" "$OUT/attention_tune.log" | tail -60 ;;
    attention-preset)
      # Issue 8's preset of common shapes (Llama-3-8B 4k/8k, a d64 model, 32k) over the Hopper
      # variants, then the tuned choice of each shape.
      run attention_preset 420 "$D/detfuse" tune --kernel attention --preset llm-attention --engine wgmma \
        --budget 6m --db "$OUT/attn_preset.db"
      for s in 4,32,8,4096,4096,128 2,32,8,8192,8192,128 8,32,8,4096,4096,64 1,32,8,32768,32768,128; do
        run attention_preset 30 "$D/detfuse" best --kernel attention --shape $s --db "$OUT/attn_preset.db"
      done
      grep -vE "^\s*$" "$OUT/attention_preset.log" | tail -60 ;;
    python-tests)
      DETFUSE_LIB="$PWD/$D/libdetfuse_c.so" PYTHONPATH="$PWD/python" run python 200 python3 python/tests/run.py
      grep -E "^(FAIL|ERROR)|detfuse python tests" "$OUT/python.log" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
