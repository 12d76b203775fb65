#!/usr/bin/env bash
# Issue 19, determinism levels (branch s6-levels) on the H200, from the
# repository root, with a Release build in ./build (or dist/build.tar.xz from
# experiments/device/pack.sh); about 2-3 minutes. Logs under $OUT; the summary
# table last.
#   1. the GPU test: tune --levels of owning pairs at two chunk budgets, stored
#      levels consistent with the digests, verify --levels agrees
#   2. verify --levels (sm_count on 16 and 66->72 SMs, config among the
#      variants of the call, portable against the CPU emulation where one
#      exists): FLCE fp32 fma owning (two budgets), wgmma owning (two budgets),
#      cuBLASLt owning (two budgets), mma owning (two budgets); attention fp32
#      and bf16 fma owning (two tiles each)
#   3. tune --levels quick on one small FLCE problem, then best --level
# What to look for: the `level` column of the summary (and the notes in
# verify.log): sm_count shown/failed per variant, config shown where a pair
# agrees (cuBLASLt owning across budgets: shown; wgmma and mma owning
# across budgets: shown since the accumulator-in dW of s6-flceown), portable shown/failed for the fp32
# fma variants (FLCE and attention: the CPU emulation of s6-portable, merged)
# and not_checked, "no CPU emulation", for the others; "no green context" in a
# note means the driver refused the slices.
set -u
source "$(dirname "$0")/lib.sh"
B=${BUILD:-build}; CLI=$B/detfuse; TGPU=$B/tests/tuner_gpu/test_tuner_gpu
gpu_line "$OUT/verify.log"

# 1. The GPU test.
run gputest 150 "$TGPU" --gtest_filter='LevelsGpu.*'

# 2. verify --levels. Pairs of one tile at two chunk budgets, found in the registry.
pair() {  # pair KERNEL ENGINE PATTERN A B: the first name matching PATTERN ending in A, and the same with B
  local a
  a=$("$CLI" list --kernel "$1" --engine "$2" | awk '{print $1}' | grep -E "$3" | grep -E "[._]$4\$" | head -1)
  [ -n "$a" ] && echo "--variant $a --variant ${a%$4}$5"
}
# mb = MiB of logits per chunk: at V = 60013, N = 4700 is 3 chunks at mb512 and 2
# at mb1024; D, V not multiples of the tiles. fp32 at D = 21: small enough for
# the CPU emulation (tuner/levels.h kPortableMaxFlops).
for spec in "fma ^flce\.fp32\.fma\.owning\. fp32 4700,21,60013" "wgmma ^flce\.bf16\.wgmma\.owning\. bf16 4700,256,60013" \
            "cublaslt ^flce\.bf16\.cublaslt\.owning\. bf16 4700,256,60013" "mma ^flce\.bf16\.mma\.owning\. bf16 4700,256,60013"; do
  set -- $spec
  vs=$(pair flce "$1" "$2" mb512 mb1024)
  if [ -z "$vs" ]; then echo "=== verify: no $1 owning pair registered" | tee -a "$OUT/verify.log"; continue; fi
  # shellcheck disable=SC2086
  run verify 60 "$CLI" verify --kernel flce --shape "$4" --dtype "$3" $vs --repeats 3 --levels --db "$OUT/none.db"
done
ASHAPE=1,4,2,300,333,64
for dt in fp32 bf16; do
  run verify 60 "$CLI" verify --kernel attention --shape $ASHAPE --dtype $dt --repeats 3 --levels --db "$OUT/none.db" \
    --variant attention.$dt.fma.owning.br64_bc64_w8_d64 --variant attention.$dt.fma.owning.br64_bc32_w4_d64
done

# 3. tune --levels quick (mma and cuBLASLt bf16 variants), then best at each level.
run tune 90 "$CLI" tune --kernel flce --shape 4700,64,60013 --dtype bf16 --engine mma --engine cublaslt \
  --repeats 3 --levels --budget 75s --time-cap 5s --db "$OUT/levels.db"
for L in run_to_run sm_count config portable; do
  run best 20 "$CLI" best --kernel flce --shape 4700,64,60013 --dtype bf16 --level $L --json --db "$OUT/levels.db"
done

# Summary: the level of every variant verify ran, the GPU test, tune's level table, best per level.
echo
echo "GPU test: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/gputest.log" | tr '\n' ' ')"
echo
echo "tune --levels (fastest variant at each level, cost against the fastest):"
sed -n '/^determinism levels/,/^portable/p' "$OUT/tune.log"
echo
echo "best --level (variant, stored level):"
grep -E '"(variant|level|level_asked)"' "$OUT/best.log" | paste - - - | sed 's/  */ /g'
echo
printf "%-62s %-10s %s\n" "verify --levels: variant" "level" "checks (run_to_run sm_count config portable) and notes"
awk '/^(flce|attention)\.[a-z0-9_.]+: /{v=$1; sub(":$","",v)} /^  level /{lv=$2; c=$0; sub(/^  level [a-z_]+ /,"",c); getline n; printf "%-62s %-10s %s |%s\n", v, lv, c, n}' "$OUT/verify.log"
