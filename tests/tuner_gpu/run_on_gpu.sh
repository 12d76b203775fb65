#!/usr/bin/env bash
# The GPU checks of issue 9's tuner part, on a machine with a GPU, from the
# repository root with a Release build in build/ (copied there: ctest records
# absolute paths, so the binaries are run directly). Output: OUT (default
# ./tuner-gpu-out), one log per step. Each step prints what it expects.
set -uo pipefail
B=${BUILD:-build}
OUT=${OUT:-./tuner-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
D="$B/detfuse"
step() { echo; echo "=== $*"; }
{
step "1. GPU tests: real measurer, verify, bench, tuned API, heuristic (expect all PASSED)"
"$B/tests/tuner_gpu/test_tuner_gpu" 2>&1
step "2. supervised faults: oob, trap, endless loop between real variants (expect PASSED; reasons printed)"
"$B/tests/tuner_gpu/test_tuner_supervised_gpu" 2>&1
T=$(mktemp -d)
step "3. --repeats 1000000000 --budget 20s ends near 20 s; the last line says what was cut"
start=$(date +%s)
"$D" tune --shape 4096,2048,32000 --db "$T/b.db" --repeats 1000000000 --budget 20s 2>"$T/b.err"; echo "exit $? after $(( $(date +%s) - start )) s"
tail -3 "$T/b.err"
step "4. two tune --resume on one GPU and store: the second refuses while the first runs; the first loses nothing"
"$D" tune --shape 4096,2048,32000 --db "$T/s.db" --resume --time-cap 2s >"$T/a.out" 2>"$T/a.err" & A=$!
sleep 20
"$D" tune --shape 4096,2048,32000 --db "$T/s.db" --resume; echo "second: exit $? (expect 1, 'is still running')"
wait $A; echo "first: exit $? (expect 0)"; tail -1 "$T/a.out"
step "5. kill -9 mid-run, then --resume: the run is marked crashed, finished results kept, the killed variant measured again"
"$D" tune --shape 2048,1024,50257 --db "$T/k.db" --time-cap 2s >/dev/null 2>"$T/k.err" & K=$!
sleep 15; kill -9 $K; wait $K 2>/dev/null
grep -c ": ok " "$T/k.err" | sed 's/^/results finished before the kill: /'
"$D" tune --shape 2048,1024,50257 --db "$T/k.db" --time-cap 2s --resume 2>&1 | grep -E "marked crashed|resuming|^run "
step "6. shapes beyond memory and beyond the limit: one line, exit 1 and 2"
"$D" tune --shape 1073741824,1073741824,1; echo "exit $? (expect 1)"
"$D" tune --shape 2147483648,1,1; echo "exit $? (expect 2)"
step "7. devices --json parses"
"$D" devices --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d), "device(s):", d[0]["name"])'
step "8. attention through the tuner and the command (needs registered attention variants; else each says none is registered, exit 1)"
"$D" list --kernel attention | head -5
"$D" tune --kernel attention --preset smoke-attention --db "$T/att.db" 2>"$T/att.err"; echo "exit $? (expect 0)"; tail -2 "$T/att.err"
"$D" verify --kernel attention --shape 1,4,2,128,128,64 --all-variants --db "$T/att.db"; echo "exit $? (expect 0 or 1 with atomic differing run to run)"
"$D" bench attention --shape 1,4,2,1024,1024,128 --causal --repeats 3; echo "exit $? (expect 0)"
rm -rf "$T"
} 2>&1 | tee "$OUT/tuner-gpu.log"
