#!/usr/bin/env bash
# The contention branch on a GPU (issue 18), from the repo root with a Release
# build in ./build (BUILD=... to change), output under $OUT; about 4 minutes:
#   1. the SM-count runner's smoke test: FLCE variants on a 16-SM green-context
#      slice and on the whole GPU, bits compared (test_study_spread_gpu, SmSliceGpu.*);
#   2. `detfuse tune --sms 16` on a small FLCE problem (the default variants, and
#      the study's atomic row-split levels named), then `detfuse best`;
#   3. the quick FLCE contention study with the SM-count axis (all SMs, then 16),
#      the Hopper engines (wgmma, cuBLASLt), into $OUT/study.db under a budget
#      (--resume continues it: see the last lines of study.log);
#   4. the report generator (experiments/contention/plot.py) into $OUT/report.
# Look for: "SmSliceGpu" PASSED; "measuring on 16 of 132 SMs"; the study's runs
# "on 16 SMs" and "on 132 SMs"; REPORT.md's "Bits against SM count" table and
# "The seed's two claims" answers.
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

run smoke 90 "$B/tests/study/test_study_spread_gpu" --gtest_filter='SmSliceGpu.*'

SHAPE=4096,1024,16384
run tune 50 "$B/detfuse" tune --shape $SHAPE --sms 16 --time-cap 2s --repeats 3 --budget 30s --db "$OUT/tune.db"
run tune 40 "$B/detfuse" tune --shape $SHAPE --sms 16 --time-cap 2s --repeats 3 --db "$OUT/tune.db" \
  --variant flce.bf16.mma.atomic.bm128_bn128_bk32_wm2_wn4_st4_mb1024_sk1 \
  --variant flce.bf16.mma.atomic.bm128_bn128_bk32_wm2_wn4_st4_mb1024_sk0 --allow-nondeterministic
run tune 15 "$B/detfuse" tune --shape $SHAPE --sms 0 --db "$OUT/tune.db"  # must exit 2
run tune 15 "$B/detfuse" tune --shape $SHAPE --sms 999 --db "$OUT/tune.db"  # must exit 2 (beyond the SMs)
run tune 10 "$B/detfuse" best --kernel flce --shape $SHAPE --db "$OUT/tune.db"

run study 130 "$B/detfuse" study contention --kernel flce --quick --engine wgmma --engine cublaslt \
  --sms all,16 --budget 110s --db "$OUT/study.db"
run report 60 python3 experiments/contention/plot.py --db "$OUT/study.db" --out "$OUT/report"

echo "--- smoke"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |dW " "$OUT/smoke.log" | tail -8
echo "--- tune"; grep -E "measuring on|--sms|^best" "$OUT/tune.log" | tail -8
echo "--- study"; grep -E "^study " "$OUT/study.log" | tail -6
echo "--- report"; sed -n '/^## Bits against SM count/,/^## Cost of determinism/p' "$OUT/report/REPORT.md" 2>/dev/null |
  grep -vE '^!\[|^$' | head -30
echo "--- summary"
cat "$SUMMARY"
