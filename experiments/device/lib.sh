# Shared by the device scripts (experiments/device/*.sh, experiments/device_run.sh):
# sourced, not run. After `source experiments/device/lib.sh`:
#   OUT      the log folder (made), default ./out
#   SUMMARY  $OUT/summary.txt, one line per run() (emptied here)
#   run LOG TIMEOUT CMD...  runs CMD under `timeout` (SIGINT, then SIGKILL 10 s
#            later), appends "=== CMD", its output and "=== exit RC after S s"
#            to $OUT/LOG.log, adds a line to $SUMMARY and prints it; returns RC.
#   sanitize TOOL TIMEOUT CMD...  run() of compute-sanitizer --tool TOOL into sanitize.log.
#   gpu_line FILE  appends the GPU's name, driver and clocks to FILE.
#   test_report NAME...  for each $OUT/NAME.log of a gtest run: its PASSED /
#            FAILED lines, then any failure or error line of them all.
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

# sanitize TOOL TIMEOUT CMD...: compute-sanitizer --tool TOOL (exit 9 on any error) in $OUT/sanitize.log.
sanitize() {
  local tool=$1 t=$2; shift 2
  run sanitize "$t" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@"
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
