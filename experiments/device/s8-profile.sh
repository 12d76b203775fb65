#!/usr/bin/env bash
# Session 8, issue 17: where the Python FLCE path's time goes, beside
# `detfuse bench flce` of the same variant in the same device call (< 4 min).
# Needs ./build (or dist/build.tar.xz from pack.sh: detfuse, capi/libdetfuse_c.so).
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so
V=${VARIANT:-flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024}
for s in ${SHAPES:-4096,4096,128256 16384,4096,128256 8192,2304,256000}; do
  run "py_${s//,/x}" 120 python3 experiments/flce_python_profile.py --shape "$s" --variant "$V" --main-grad --reps 8 \
    --json "$OUT/profile.jsonl"
  run "bench_${s//,/x}" 120 build/detfuse bench flce --shape "$s" --variant "$V" --repeats 3
done
python3 - "$OUT/profile.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    ps, pc = r["profile_step"], r["profile_capi"]
    print(r["shape"], f"step {r['step_ms']:.2f} op {r['op_ms']:.2f} capi {r['capi_ms']:.2f} ms;",
          f"profiled step: event {ps['event_ms']:.2f} kernel span {ps['kernel_span_ms']:.2f} busy {ps['gpu_busy_ms']:.2f};",
          f"capi: event {pc['event_ms']:.2f} busy {pc['gpu_busy_ms']:.2f}")
    print("  host us:", r["host_us"], "first kernel after (ms):", ps["first_kernel_after_ms"], "gaps:", ps["gaps_ms"][:12])
    print("\n".join("  | " + l for l in r["cprofile_top"][-30:]))
    print("  sync-ish calls in step:", {k: v for k, v in ps["runtime_calls"].items()
          if any(t in k for t in ("Memcpy", "Synchronize", "Free", "Malloc", "EventSync"))})
PY
grep -h "ms\b.*x GEMM\|median\|wgmmalt" "$OUT"/bench_*.log | head -20
cat "$SUMMARY"
