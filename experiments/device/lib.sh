# Shared by the device scripts (experiments/device/*.sh, experiments/device_run.sh):
# sourced, not run. After `source experiments/device/lib.sh`:
#   OUT      the log folder (made), default ./out
#   SUMMARY  $OUT/summary.txt, one line per run() (emptied here)
#   run LOG TIMEOUT CMD...  runs CMD under `timeout` (SIGINT, then SIGKILL 10 s
#            later), appends "=== CMD", its output and "=== exit RC after S s"
#            to $OUT/LOG.log, adds a line to $SUMMARY and prints it; returns RC.
#   brun LOG TIMEOUT CMD...  run() cut to what is left before UNTIL (555) seconds.
#   sanitize TOOL TIMEOUT CMD...  run() of compute-sanitizer --tool TOOL into sanitize.log.
#   gpu_line FILE  appends the GPU's name, driver and clocks to FILE.
#   logs_in_tmp NAME  logs go to /tmp/NAME (emptied) from here on; the folder
#            that comes back is kept as FINAL_OUT for pack_logs.
#   pack_logs NAME  tars /tmp/NAME into $FINAL_OUT/NAME.tar.gz and copies its
#            report.txt to $FINAL_OUT/NAME-report.txt.
#   test_report NAME...  for each $OUT/NAME.log of a gtest run: its PASSED /
#            FAILED lines, then any failure or error line of them all.
#   bench_both, bench_pair, bench_lines, fwd_tests, sanitize_gtest, ncu_kv, fwd_report, bench_table, obj_regs,
#            sanitize3, attention_bins, verify_against_old: the
#            attention device scripts' bench, register and sanitizer steps
#            (each described where it is defined).
#   PYTHONPATH     the peers' site (experiments/peers/install.sh) and ./python.
# The binaries: ./build (a Release build, or dist/build.tar.xz from pack.sh,
# unpacked here when ./build is absent).
OUT=${OUT:-out}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
[ -d build ] || [ ! -f dist/build.tar.xz ] || tar -xJf dist/build.tar.xz
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64 PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
# The peers, where experiments/peers/install.sh put them, and detfuse's Python package.
PEERS_SITE=${PEERS_SITE:-/tmp/peers/site-packages}
export PYTHONPATH=$PEERS_SITE:$PEERS_SITE/nvidia_cutlass_dsl/dsl_packages:$PWD/python${PYTHONPATH:+:$PYTHONPATH}

run() {
  local log=$1 t=$2; shift 2
  local start=$SECONDS
  echo "=== $*" >> "$OUT/$log.log"
  timeout -s INT -k 10 "$t" "$@" >> "$OUT/$log.log" 2>&1
  local rc=$?
  echo "=== exit $rc after $((SECONDS - start)) s" >> "$OUT/$log.log"
  printf '%-12s exit %-3s %4ss  %s\n' "$log" "$rc" "$((SECONDS - start))" "$(echo "$*" | tr "\n" " " | cut -c1-100)" | tee -a "$SUMMARY"
  return $rc
}

# brun LOG TIMEOUT CMD...: run() with the timeout cut to what is left before UNTIL seconds since the
# script started (default 555: the report and the archive then still come back within a call's 600 s),
# skipped (said in the summary) when under 20 s are left.
brun() {
  local log=$1 t=$2; shift 2
  local left=$(( ${UNTIL:-555} - SECONDS ))
  if [ "$left" -lt 20 ]; then echo "$log skipped: no time left" | tee -a "$SUMMARY"; return 0; fi
  [ "$t" -gt "$left" ] && t=$left
  run "$log" "$t" "$@"
}

# sanitize TOOL TIMEOUT CMD...: compute-sanitizer --tool TOOL (exit 9 on any error) in $OUT/sanitize.log.
sanitize() {
  local tool=$1 t=$2; shift 2
  run sanitize "$t" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@"
}

logs_in_tmp() {
  FINAL_OUT=$OUT
  export OUT=/tmp/$1
  rm -rf "$OUT"
  mkdir -p "$OUT"
  SUMMARY="$OUT/summary.txt"
  : > "$SUMMARY"
}

pack_logs() {
  tar -czf "$FINAL_OUT/$1.tar.gz" -C /tmp "$1"
  cp "$OUT/report.txt" "$FINAL_OUT/$1-report.txt"
}

# attention_bins: B (the build, $BUILD or ./build), TW (the attention wgmma
# test binary) and DF (the detfuse command) for the attention device scripts.
attention_bins() {
  B=${BUILD:-build}
  TW=$B/tests/attention_wgmma/test_attention_wgmma
  DF=$B/detfuse
  [ -x "$DF" ] || DF=$B/cli/detfuse
}

# peers_setup: the peers installed from what experiments/peers/install.sh staged (the .peers/a and .peers/b calls
# before; this call carries .peers/c) and detfuse's Python package pointed at this build's C library; exits on a
# failed install (its log's tail printed). B: attention_bins.
peers_setup() {
  bash experiments/peers/install.sh stage install > "$OUT/peers_install.log" 2>&1 || { tail -20 "$OUT/peers_install.log"; exit 1; }
  cp "$B/capi/libdetfuse_c.so" python/detfuse/libdetfuse_c.so
  export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
}

# smi_start FILE MS: nvidia-smi samples the SM and memory clocks, power, temperature and the clock-event reasons every
# MS ms into FILE (CSV, no header: experiments/smi_summary.py's input) in the background; SMI holds its pid.
smi_start() {
  local r=clocks_event_reasons.active p=power.draw.instant
  nvidia-smi --query-gpu=$r --format=csv > /dev/null 2>&1 || r=clocks_throttle_reasons.active
  nvidia-smi --query-gpu=$p --format=csv > /dev/null 2>&1 || p=power.draw
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,$p,temperature.gpu,$r --format=csv,noheader -lms "$2" > "$1" 2>&1 &
  SMI=$!
}

gpu_line() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >> "$1" 2>&1
}

test_report() {
  local f
  for f in "$@"; do
    echo "# $f"
    grep -hE "^\[  (PASSED|FAILED|SKIPPED) +\]" "$OUT/$f.log" | head -30
  done
  for f in "$@"; do grep -hE "Failure|error:" "$OUT/$f.log"; done | head -10
}

# obj_regs DIR OBJ...: for each configuration OBJ (its source OBJ.cu), the STL
# count and REG / STACK / SHARED of each kernel of the object that holds it
# (cuobjdump, where present): DIR/OBJ.cu.o, or with batched compiler calls
# (cmake/cuda_batches.cmake) the DIR/<batch>.cu.o whose generated source
# #includes OBJ.cu (the batch's other configurations are listed too).
obj_regs() {
  local dir=$1 o f src
  shift
  for o in "$@"; do
    f=$dir/$o.cu.o
    if [ ! -f "$f" ]; then
      src=$(grep -l "/$o\.cu\"" "$dir"/../../*.cu 2> /dev/null | head -1)
      [ -n "$src" ] && f=$dir/$(basename "$src").o
    fi
    if [ -f "$f" ] && command -v cuobjdump > /dev/null; then
      echo "$o in $(basename "$f"):"
      cuobjdump -sass "$f" | awk '/Function :/ {fn = $3} /STL/ {n[fn]++} /Function :/ {seen[fn] = 1}
        END {for (k in seen) print "  " k " STL " (n[k] + 0)}'
      cuobjdump -res-usage "$f" | grep -oE 'Function [^:]*:|REG:[0-9]* STACK:[0-9]* SHARED:[0-9]*' | paste - - | sed 's/^/  /'
    else
      echo "$o: no object or no cuobjdump"
    fi
  done
}

# sanitize3 NAME CMD...: memcheck, racecheck and synccheck of CMD (exit 9 on
# any error; 30, 40 and 30 s) into $OUT/{memcheck,racecheck,synccheck}_NAME.log.
sanitize3() {
  local name=$1
  shift
  run "memcheck_$name" 30 compute-sanitizer --tool memcheck --error-exitcode 9 "$@"
  run "racecheck_$name" 40 compute-sanitizer --tool racecheck --error-exitcode 9 "$@"
  run "synccheck_$name" 30 compute-sanitizer --tool synccheck --error-exitcode 9 "$@"
}

# bench_both TAG SHAPE NAME...: `$DF bench attention` of $W.NAME (W: the
# variant prefix, DF: attention_bins) at SHAPE, non-causal then causal, 3
# repeats (40 s each), into $OUT/bench_TAG.log and bench_TAG_causal.log.
bench_both() {
  local tag=$1 shape=$2 n vs=""
  shift 2
  for n in "$@"; do vs="$vs --variant $W.$n"; done
  run "bench_$tag" 40 "$DF" bench attention --shape "$shape" $vs --repeats 3
  run "bench_${tag}_causal" 40 "$DF" bench attention --shape "$shape" --causal $vs --repeats 3
}

# bench_pair NAME SHAPE CAUSAL NAME...: `$DF bench attention` of $W.fwd.NAME (forward-only variants; CAUSAL
# `--causal` or -) at SHAPE, 5 repeats, in the order given then the reverse (brun: within UNTIL), into
# $OUT/benchNAME_ab.log and benchNAME_ba.log; each within BENCH_T seconds (default 60).
bench_pair() {
  local name=$1 shape=$2 c=$3 v i
  shift 3
  [ "$c" = - ] && c=""
  local vs=() rev=()
  for v in "$@"; do vs+=(--variant "$W.fwd.$v"); done
  for ((i = ${#vs[@]} - 1; i >= 1; i -= 2)); do rev+=(--variant "${vs[$i]}"); done
  brun "bench${name}_ab" "${BENCH_T:-60}" "$DF" bench attention --shape "$shape" $c "${vs[@]}" --repeats 5
  brun "bench${name}_ba" "${BENCH_T:-60}" "$DF" bench attention --shape "$shape" $c "${rev[@]}" --repeats 5
}

# bench_lines: every variant line of the $OUT/bench*.log files, prefixed by its log's name, cut to 150.
bench_lines() {
  local f
  for f in "$OUT"/bench*.log; do
    [ -f "$f" ] && grep -hE "^attention\." "$f" | sed "s|^attention.bf16.wgmma.||; s|^|$(basename "$f" .log) |" | cut -c1-240
  done
}

# fwd_tests SANITIZER_FILTER: the forward's GPU tests (tests_fwd), memcheck / racecheck / synccheck on the
# gtest filter SANITIZER_FILTER (*check_fwd), test_attention_variants (tests_var); TW, B: attention_bins.
fwd_tests() {
  brun tests_fwd 200 "$TW" --gtest_filter='AttentionWgmma.*:AttentionWgmmaGpu.*'
  sanitize_gtest fwd 150 "$1"
  brun tests_var 30 "$B/tests/attention/test_attention_variants"
}

# sanitize_gtest NAME TIMEOUT FILTER: memcheck, racecheck and synccheck (exit 9 on any error) of the attention
# test binary $TW on the gtest filter FILTER, each within TIMEOUT (brun: and UNTIL), into
# $OUT/{memcheck,racecheck,synccheck}_NAME.log.
sanitize_gtest() {
  local name=$1 t=$2 filter=$3 tool
  for tool in memcheck racecheck synccheck; do
    brun "${tool}_$name" "$t" compute-sanitizer --tool $tool --error-exitcode 9 "$TW" --gtest_filter="$filter"
  done
}

# ncu_kv LOG SHAPE VARIANT: ncu (clock control off; WarpStateStats, instructions, cycles, time, tensor-pipe
# activity, XU instructions) of one launch of the kv kernel in `$DF bench attention --causal` of $W.VARIANT at
# SHAPE (brun, 90 s), into $OUT/LOG.log.
ncu_kv() {
  local m="smsp__inst_executed.sum,sm__cycles_elapsed.max,gpu__time_duration.sum"
  m="$m,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_xu.sum"
  brun "$1" 90 ncu --clock-control none --section WarpStateStats --metrics "$m" -k regex:attention_bwd_kv \
    --launch-count 1 "$DF" bench attention --shape "$2" --causal --variant "$W.$3" --repeats 1
}

# verify_against_old D SEED CASE... -- VARIANT...: `detfuse verify` of the VARIANTs (head dim D) with the new
# binary $DF and the old one $OLD at each CASE ("B,H,Hkv,Sq,Sk,d [flags]"), 2 repeats, seed SEED (brun, 60 s each),
# into $OUT/verify_{new,old}_D_K.log; per case a line in $OUT/bits.txt: identical (the status lines and one-digest
# outputs of verify_sel) or DIFFER with the first 20 lines of the difference.
verify_sel() { grep -E '^attention\.|  x[0-9]+$' "$1"; }
verify_against_old() {
  local d=$1 seed=$2 i=0 c v
  shift 2
  local cases=() args=()
  while [ "$1" != -- ]; do cases+=("$1"); shift; done
  shift
  for v in "$@"; do args+=(--variant "$v"); done
  for c in "${cases[@]}"; do
    i=$((i + 1))
    brun "verify_new_${d}_$i" 60 "$DF" verify --kernel attention --shape $c "${args[@]}" --repeats 2 --seed "$seed"
    brun "verify_old_${d}_$i" 60 "$OLD" verify --kernel attention --shape $c "${args[@]}" --repeats 2 --seed "$seed"
    local dif
    dif=$(diff <(verify_sel "$OUT/verify_old_${d}_$i.log") <(verify_sel "$OUT/verify_new_${d}_$i.log"))
    if [ -z "$dif" ] && grep -q "dQ .* x2" "$OUT/verify_new_${d}_$i.log"; then
      echo "bits d$d case $i ($# variants): identical to the old binary's" >> "$OUT/bits.txt"
    else
      { echo "bits d$d case $i: DIFFER"; echo "$dif" | head -20; } >> "$OUT/bits.txt"
    fi
  done
}

# fwd_report NAME NCU_REGEX: $OUT/report.txt (the GPU line, spills.txt if there, the results of the gtest logs
# REPORT_TESTS (default tests_fwd tests_var), the sanitizer summaries, bench_lines, the NCU_REGEX lines of each
# ncu_*.log, the summary), printed; then every log into $OUT/NAME-logs.tgz.
fwd_report() {
  local name=$1 re=$2 f
  {
    cat "$OUT/gpu.txt"
    [ -f "$OUT/spills.txt" ] && cat "$OUT/spills.txt"
    test_report ${REPORT_TESTS:-tests_fwd tests_var}
    grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/*check_*.log 2>/dev/null
    bench_lines
    for f in "$OUT"/ncu_*.log; do
      [ -f "$f" ] && { echo "=== $(basename "$f")"; grep -E "$re" "$f" | head -12; }
    done
    cat "$SUMMARY"
  } > "$OUT/report.txt"
  cat "$OUT/report.txt"
  mkdir -p "$OUT/keep" && mv "$OUT"/*.log "$OUT"/keep/ 2>/dev/null
  tar czf "$OUT/$name-logs.tgz" -C "$OUT" keep && rm -rf "$OUT/keep"
}

# bench_table PREFIX LOG_A LOG_B NAME...: for each PREFIX.NAME, the fwd+bwd
# TFLOP/s (column 6) and distinct dQ digests (column 9) of `detfuse bench
# attention` in two logs (e.g. non-causal and causal), one row each.
bench_table() {
  local w=$1 la=$2 lb=$3 v a c
  shift 3
  for v in "$@"; do
    a=$(awk -v n="$w.$v" '$1 == n { print $6 " (" $9 ")" }' "$la")
    c=$(awk -v n="$w.$v" '$1 == n { print $6 " (" $9 ")" }' "$lb")
    printf '%-58s %14s %14s\n' "$v" "${a:-missing}" "${c:-missing}"
  done
}
