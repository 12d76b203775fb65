#!/usr/bin/env bash
# Branch s12-flcehost on the H200, from the repository root (~3 min with a
# ./build built on the GPU machine; Liger from experiments/peers/install.sh
# where it was installed in the same device call, else skipped): issue 17, the
# FLCE call's host time (kernels/flce/README.md "Deferred target check: no host
# wait before the kernels (session 12)"). Logs under /tmp/s12-flcehost, tarred
# into $OUT/s12-flcehost.tar.gz (and the report beside it).
#   1. GPU tests: the bad-target tests through flce::run, the heuristic entry
#      points and the C ABI (FlceBadInput.*, FlceBadTargets.*,
#      CApiGpu.*), and the default and cuBLASLt variants against the float64
#      reference (flce::run's good path);
#   2. compute-sanitizer memcheck on FlceBadTargets.* (every code path runs
#      its whole computation over targets far outside [0, V): 0 errors is the
#      proof that no kernel indexes by one);
#   3. the Python tests of the launch path and the torch layer
#      (test_flce_launch, test_torch, test_ops) with torch (/opt/torch/.venv);
#   4. experiments/flce_host_time.py at 4096,4096,128256: host ms of the
#      forward / backward behind a 30 ms spin, launch and sync offsets;
#   5. detfuse bench flce, 2 repeats, the default at 16384,4096,128256,
#      8192,2304,256000 and 4096,4096,128256 (session 11: 80.26 / 47.05 /
#      19.76 ms; unchanged code: the bench launches variants directly);
#   6. if under 150 s were spent: experiments/flce_peers.py at 4096 rows,
#      Liger's CuTe FLCE, detfuse by the store, by the heuristic and with
#      main_grad=, 2 rounds, 10 ms host-hidden round, the allocator's counts.
# Each step runs under a timeout and the script goes on past a failing one
# (its exit code is in summary.txt).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s12-flcehost
gpu_line "$OUT/gpu.txt"
B=${BUILD:-build}
CLI=$B/detfuse
[ -x "$CLI" ] || CLI=$B/cli/detfuse
TG=$B/tests/flce/test_flce_gpu
TC=$B/tests/capi/test_capi_gpu
DEF=flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
case $B in /*) export DETFUSE_LIB=$B/capi/libdetfuse_c.so ;; *) export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so ;; esac

run flce_bad 90 $TG --gtest_filter="FlceBadInput.*:FlceBadTargets.*:*MatchesReference*${DEF//./_}:*MatchesReference*flce_bf16_cublaslt_owning_mb1024"
run capi_gpu 60 $TC --gtest_filter='CApiGpu.*'
run memcheck_badtargets 150 compute-sanitizer --tool memcheck --error-exitcode 9 $TG --gtest_filter='FlceBadTargets.*'
(cd python/tests && run pytests 120 $PY -m unittest -v test_flce_launch test_torch test_ops)
run host_time 150 $PY experiments/flce_host_time.py --shape 4096,4096,128256 --reps 20 --spin-ms 30 \
  --json "$OUT/flce_host_time.json"
for s in 16384,4096,128256 8192,2304,256000 4096,4096,128256; do
  run "bench_flce_${s//,/x}" 50 "$CLI" bench flce --shape "$s" --repeats 2 --variant $DEF
done
if [ "$SECONDS" -lt 150 ]; then
  run flce_peers 90 $PY experiments/flce_peers.py --json "$OUT/flce_peers.json" --budget-s 70 --rounds 2 --reps 5 \
    --host-hidden-ms 10 --peers liger-cute,detfuse --variant heuristic --main-grad-variant tuned \
    --shapes 4096,4096,128256
else
  echo "flce_peers   skipped: $SECONDS s spent" | tee -a "$SUMMARY"
fi
{
  echo
  cat "$OUT/gpu.txt"
  echo "--- tests"
  test_report flce_bad capi_gpu
  grep -hE "deferred target check: [0-9]+ code paths" "$OUT/flce_bad.log"
  echo "memcheck of FlceBadTargets.*: $(grep -hE 'ERROR SUMMARY' "$OUT/memcheck_badtargets.log" | tail -1)"
  echo "python: $(grep -hE '^(Ran|OK|FAILED)' "$OUT/pytests.log" | tr '\n' ' ')"
  grep -hE "^(FAIL|ERROR):" "$OUT/pytests.log" | head -10
  echo "--- host time of one call, 4096,4096,128256, 30 ms spin queued (ms from the forward's start)"
  grep -hE "^  " "$OUT/host_time.log" | cut -c1-900
  echo "--- bench flce, 2 repeats (session 11: 80.26 / 47.05 / 19.76 ms)"
  grep -hE "^flce\.|^variant" "$OUT"/bench_*.log
  if [ -f "$OUT/flce_peers.log" ]; then
    echo "--- flce_peers at 4096 rows (session 11: Liger 19.76-19.80, detfuse 20.03 / 23.99, host hidden 17.32 / 17.67)"
    grep -hE "4096,4096,128256 .*(ms|round|host hidden|allocator)" "$OUT/flce_peers.log" | cut -c1-400
    sed -n '/^| N,D,V/,/^JSON/p' "$OUT/flce_peers.log" | head -12
  fi
  echo "--- steps"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s12-flcehost
