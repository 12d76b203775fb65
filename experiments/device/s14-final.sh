#!/usr/bin/env bash
# Session 14's last device call, from the repository root of a cold machine:
#   1. the build (experiments/device/build_there.sh; carry [".debs", ".deps"]);
#   2. experiments/device/s14-dq.sh when it is in the tree (helper s14-dq's variant);
#   3. the attention tests the heuristic's change touches: every backward GPU test of the
#      wgmma engine (AttentionWgmmaBwd*: float64 reference, repeats, strategies, ew1/ew2,
#      spt1), the heuristic tests, the attention Python tests (the eager path now runs
#      pds3 ew2 spt1 / sp1 ew1 spt1);
# Logs in $OUT (absolute), summary.txt one line per step.
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
source "$(dirname "$0")/lib.sh"
attention_bins
gpu_line "$OUT/gpu.txt"
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
if [ -f experiments/device/s14-dq.sh ]; then  # its own OUT: lib.sh starts a summary there
  mkdir -p "$OUT/dq"
  OUT=$OUT/dq timeout 280 bash experiments/device/s14-dq.sh > "$OUT/s14_dq.log" 2>&1
  echo "s14_dq       exit $?" >> "$SUMMARY"
fi
run heuristic 30 "$B/tests/attention/test_attention_variants" --gtest_filter='*euristic*'
(cd python/tests && run pytests 120 $PY -m unittest -v test_torch test_ops)
run tests_bwd 60 "$TW" --gtest_filter='AttentionWgmmaBwd*'
echo "--- tests"
test_report tests_bwd heuristic | tail -12
grep -hE "^(FAIL|ERROR)|Ran [0-9]+ tests|^OK" "$OUT/pytests.log" | head
[ -f "$OUT/s14_dq.log" ] && tail -45 "$OUT/s14_dq.log"
cat "$SUMMARY"
