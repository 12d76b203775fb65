#!/usr/bin/env bash
# Session 29 (issue 16): the host's share of the timed window.
#   PART=host, carry ["dist"]: experiments/attention_host_cost (C++: the CUDA calls a launch makes, the
#            heuristic, the variant's launch, attention::run, the C ABI) and experiments/attention_host_cost.py
#            (the Python steps of detfuse.torch.attention, and the ms between events with the GPU idle at the
#            start against the launches hidden) at rows 4 and 2 of the issue, this tree's package and library
#            against main's before the session, alternating. dist/old, packed by hand from the older tree:
#            strip + xz of its build/capi/libdetfuse_c.so as dist/old/libdetfuse_c.so.xz, and
#            `git archive <rev> python/detfuse | tar -x -C dist/old`.
#   PART=suite, carry ["dist"] (written for a C++ launch-path change that was reverted before it ran; not run
#            in session 29): PART=host, then the GPU tests a launch-path change touches: the whole attention
#            wgmma binary, the registry's wgmma attention cases, the FLCE wgmma engine and GPU tests, the C ABI's
#            GPU tests, the Python attention tests, memcheck on the forward's and the hs backward's
#            sanitizer-sized cases (pack those binaries).
#   then, carry [".peers/a"] and then [".peers/b"]: bash experiments/peers/install.sh stage (two calls)
#   PART=peers, carry ["dist"]: as s28.sh PART=peers (RUNS runs beside FA4 deterministic, the host's share).
#   PART=final, carry ["dist"]: PART=peers, then the Python attention tests and one round of PART=host.
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
attention_bins
gpu_line "$OUT/gpu.txt"
cp "$B/capi/libdetfuse_c.so" python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
host_part() {
    brun host_cpp64 60 "$B/experiments/attention_host_cost"
    brun host_cpp128 60 "$B/experiments/attention_host_cost" 4 32 32 4096 4096 128 1
    # main's package and library before this session's changes (dist/old, from pack time) against this tree's,
    # alternating, in separate processes.
    mkdir -p /tmp/old && xz -dc dist/old/libdetfuse_c.so.xz > /tmp/old/libdetfuse_c.so
    for r in $(seq 1 "${ROUNDS:-2}"); do
      for s in 4,32,32,4096,64,1 4,32,32,4096,128,1; do
        brun "host_py_new_${s//,/_}_$r" 60 python3 experiments/attention_host_cost.py --shape "$s"
        brun "host_py_old_${s//,/_}_$r" 60 env PYTHONPATH="$PWD/dist/old/python:$PYTHONPATH" \
          DETFUSE_LIB=/tmp/old/libdetfuse_c.so python3 experiments/attention_host_cost.py --shape "$s"
      done
    done
    { cat "$OUT/gpu.txt"; for f in "$OUT"/host_cpp64.log "$OUT"/host_cpp128.log "$OUT"/host_py_*.log; do cat "$f"; done
      cat "$SUMMARY"; } > "$OUT/report.txt"
}
case ${PART:-host} in
  host) host_part ;;
  suite)
    UNTIL=200 host_part
    mv "$OUT/report.txt" "$OUT/host-report.txt"
    brun tests_all 200 "$TW"
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    brun tests_reg 120 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
    brun tests_engines 90 "$B/tests/engines/test_engines_wgmma" --gtest_brief=1
    brun tests_flce 120 "$B/tests/flce/test_flce_gpu" --gtest_brief=1
    brun tests_capi 60 "$B/tests/capi/test_capi_gpu" --gtest_brief=1
    brun py_attention 120 bash -c "cd python/tests && python3 -m unittest test_torch_attention 2>&1 | tail -15"
    brun memcheck_fwd 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaGpu.TmaOSanitizerSized'
    brun memcheck_hs 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.HsSanitizerSized'
    { cat "$OUT/gpu.txt"; test_report tests_all tests_var tests_reg tests_engines tests_flce tests_capi
      tail -6 "$OUT/py_attention.log"; grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log
      cat "$OUT/host-report.txt"; } > "$OUT/report.txt" ;;
  peers)
    ATTN_V="" PART=peers bash experiments/device/s28.sh ;;
  final)
    # After the two staging calls: s28.sh's peers part (RUNS runs beside FA4 deterministic, the host's share;
    # its logs into s28peers-logs.tgz), then the Python attention tests and one round of the host A/B.
    ATTN_V="" UNTIL=${PEERS_UNTIL:-330} PART=peers bash experiments/device/s28.sh > /dev/null 2>&1
    mv "$OUT/report.txt" "$OUT/peers-report.txt"
    : > "$SUMMARY"
    brun py_attention 120 bash -c "cd python/tests && python3 -m unittest test_torch_attention 2>&1 | tail -15"
    ROUNDS=1 host_part
    mv "$OUT/report.txt" "$OUT/host-report.txt"
    { cat "$OUT/peers-report.txt"; echo "=== python"; tail -6 "$OUT/py_attention.log"; cat "$OUT/host-report.txt"
    } > "$OUT/report.txt"
    mkdir -p "$OUT/keep" && mv "$OUT"/*.log "$OUT"/gpu.txt "$OUT"/summary.txt "$OUT"/host-report.txt "$OUT"/keep/ 2>/dev/null
    tar czf "$OUT/s29final-logs.tgz" -C "$OUT" keep && rm -rf "$OUT/keep" ;;
esac
cat "$OUT/report.txt"
