#!/usr/bin/env bash
# Session 36 (issue 16): main's build (7dfe3b1: se1, the staged d128 kv kernel; the GPU tests' refactor of
# 3e29727) on the H200, and the persistent causal forward's L2 head group swept without a rebuild.
#   PART=a, carry ["dist"] (pack.sh with build/detfuse_old, main 430be72's, and
#            experiments/attention_fwd_group_probe): s35.sh's PART=se (the whole wgmma GPU test binary,
#            test_attention_variants, sanitizers on the staged epilogue's cases; se1's bits against the old
#            pds4 pb5; se1 against pb5 fwd+bwd at rows 2 and 5; the d64 causal forwards br192 rd1 ot1 / ls1 ps1 /
#            ov1 ps1 rd1, both orders), then experiments/attention_fwd_group_probe on the causal rows:
#            the default L2 group against groups 2-128 walked in turn or as a snake, bits against the default.
#            Predictions: se1 -2% fwd+bwd at rows 2 and 5 as on the H100; ls1 ps1 ~5% less forward time than
#            br192 rd1 ot1 (H100: 0.646 against 0.689 ms under ncu); a group other than the L2 rule's within
#            2% of it at the d128 rows (session 18 chose the rule on the H200), unknown at d64 (ls1 read 52%
#            more DRAM than rd1 ot1 on the H100).
#   peers: s35.sh's PART=peers (stage .peers/a, .peers/b first).
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
here=$(dirname "$0")
case ${PART:-a} in
  a)
    UNTIL=430 PART=se bash "$here/s35.sh" > "$OUT/s35se.txt" 2>&1
    source "$here/lib.sh"  # (after s35.sh: its logs stay in $OUT; the summary starts again here)
    attention_bins
    UNTIL=570 brun group 120 "$B/experiments/attention_fwd_group_probe"
    { cat "$OUT/s35se.txt"; echo "=== group probe"; grep -vE "^=== " "$OUT/group.log"; cat "$SUMMARY"; } > "$OUT/report.txt"
    cat "$OUT/report.txt" ;;
  peers)
    PART=peers bash "$here/s35.sh" ;;
esac
