#!/usr/bin/env bash
# Branch s11-flcerow on the H200, from the repository root (~2-3 min with a
# ./build built on the GPU machine): issue 17, the ex16 row pass
# (row_kernel_exp16) with fewer instructions a column: the common 8-column
# group by shifts/masks, one FFMA a column and bf16x2 packs, softcap as its own
# instantiation (kernels/flce/README.md "The ex16 row pass with fewer
# instructions (session 11)"). Logs under /tmp/s11-flcerow, tarred into
# $OUT/s11-flcerow.tar.gz (and the report beside it).
#   1. CPU: FlceExp16.* (the default's workspace region by region at the
#      Llama head, no budget with fewer chunks within 1.2 GiB);
#   2. GPU: every ex16 variant against the float64 reference (the new case
#      zloss_smoothing_sum_edge_targets among them), the default's repeats,
#      FlceEx16RowPass.SanitizerSized;
#   3. compute-sanitizer memcheck, racecheck, synccheck on
#      FlceEx16RowPass.SanitizerSized (the default variant, softcap off and on);
#   4. detfuse bench flce, 3 repeats, the default variant at 16384,4096,128256,
#      8192,2304,256000 and 4096,4096,128256 (session 10 on main: 79.40 /
#      47.82 / 19.78 ms);
#   5. ncu of the row pass alone (one launch at 4096 rows and one at the Llama
#      head; session 10: 720 us, DRAM 2.94 TB/s, 9.7 cycles an issued
#      instruction, SM 74%) and every kernel's duration in one step at 4096 rows.
# Each step runs under a timeout and the script goes on past a failing one
# (its exit code is in summary.txt).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s11-flcerow
gpu_line "$OUT/gpu.txt"
B=build; CLI=$B/detfuse; TG=$B/tests/flce/test_flce_gpu
DEF=flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024
run cpu 30 $B/tests/flce/test_flce_variants --gtest_filter='FlceExp16.*'
run flce_ex16 150 $TG --gtest_filter="*MatchesReference*ex16*:*RepeatsBitwise*${DEF//./_}*:FlceEx16RowPass.*"
sanitize3 rowpass $TG --gtest_filter='FlceEx16RowPass.SanitizerSized'
for s in 16384,4096,128256 8192,2304,256000 4096,4096,128256; do
  run "bench_flce_${s//,/x}" 50 "$CLI" bench flce --shape "$s" --repeats 3 --variant $DEF
done
NCU="ncu --clock-control none --print-summary none"
SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
for s in 4096,4096,128256 16384,4096,128256; do
  run "ncu_rowpass_${s%%,*}" 60 $NCU $SEC -k regex:row_kernel_exp16 --launch-skip 1 --launch-count 1 \
    "$CLI" bench flce --shape "$s" --variant $DEF --repeats 1 --no-baseline
done
run ncu_step_4096 60 $NCU --metrics gpu__time_duration.sum --csv -c 40 \
  "$CLI" bench flce --shape 4096,4096,128256 --variant $DEF --repeats 1 --no-baseline
{
  echo
  cat "$OUT/gpu.txt"
  echo "--- tests"
  test_report cpu flce_ex16
  # memcheck / synccheck print "ERROR SUMMARY: 0 errors", racecheck "RACECHECK SUMMARY: 0 hazards displayed (0 errors"
  echo "sanitizer runs with 0 errors (of 3): $(cat "$OUT"/memcheck_rowpass.log "$OUT"/racecheck_rowpass.log "$OUT"/synccheck_rowpass.log 2> /dev/null | grep -cE 'ERROR SUMMARY: 0 errors|SUMMARY: 0 hazards displayed \(0 errors')"
  echo "--- bench flce (session 10, main: 79.40 / 47.82 / 19.78 ms)"
  grep -hE "^flce\.|^variant" "$OUT"/bench_*.log
  echo "--- ncu, row pass (session 10 at 4096 rows: 720 us, DRAM 61% = 2.94 TB/s, SM 74%, 9.7 cycles an issued instruction)"
  grep -hE "row_kernel_exp16|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued Instruction|Issued Ipc" "$OUT"/ncu_rowpass_*.log
  echo "--- ncu, one step at 4096 rows (kernel, ns)"
  grep -E '^"[0-9]+"' "$OUT/ncu_step_4096.log" | awk -F'","' '{gsub(/"/,"",$NF); print $5, $NF}' | cut -c1-140
  echo "--- steps"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s11-flcerow
