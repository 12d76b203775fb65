#!/usr/bin/env bash
# One device call: run the GPU tests, the sanitizer and benchmarks from a
# carried folder of Release binaries (dist/, made by `experiments/make_dist.sh`),
# writing logs under $OUT. Stages are named on the command line:
#   smoke tests sanitize probe-bf16 probe-fp32 bench tune
set -u
D=${DIST:-dist}
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
run() {  # run NAME TIMEOUT CMD...: log to $OUT/NAME.log, print the tail
  local name=$1 t=$2; shift 2
  echo "=== $name: $*"
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1
  echo "=== $name exit $?"
  tail -n "${TAIL:-6}" "$OUT/$name.log"
}
for stage in "$@"; do
  case $stage in
    smoke) nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
           run smoke 60 "$D/test_gpu_smoke" ;;
    tests) run engines 240 "$D/test_engines"
           run flce_variants 60 "$D/test_flce_variants"
           TAIL=3 run flce_gpu 400 "$D/test_flce_gpu"
           grep -E "FAILED|rel errors|distinct" "$OUT/flce_gpu.log" | grep -E "FAILED|distinct" | sort | uniq -c | head -40 ;;
    sanitize) F='*bf16_owning_bm128_bn128*mb512*:*bf16_partials_bm64*:*fp32_atomic_bm64*:FlceBadInput*'
           run memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/test_flce_gpu" --gtest_filter="$F"
           run racecheck 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/test_flce_gpu" --gtest_filter='*bf16_owning_bm64*mb512*MatchesReference*:*fp32_owning_bm64*mb512*MatchesReference*'
           run synccheck 300 compute-sanitizer --tool synccheck --error-exitcode 9 "$D/test_flce_gpu" --gtest_filter='*bf16_partials_bm128_bn256*MatchesReference*' ;;
    probe-bf16) TAIL=20 run probe_llama_bf16 200 "$D/flce_probe" 16384 4096 128256 bf16 "" 3
           TAIL=20 run probe_gemma_bf16 200 "$D/flce_probe" 8192 2304 256000 bf16 "" 3 ;;
    probe-fp32) TAIL=6 run probe_llama_fp32 300 "$D/flce_probe" 16384 4096 128256 fp32 owning 1 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
