#!/usr/bin/env bash
# CTest study_plot_committed: plot.py on the committed H200 store
# (experiments/contention/study-h200.db) writes the committed REPORT.md, line
# for line but the regenerate command (which names --out): the report is what
# the generator makes of the store, and a refactoring of the generator that
# changes a number or a sentence fails here. The figures are compared byte for
# byte only under the matplotlib version that rendered the committed ones
# (PNG bytes depend on matplotlib and freetype); the report always. Exit 77
# (skipped) when matplotlib is missing, saying so.
set -euo pipefail
plot=$1 dir=$2
src=$(cd "$(dirname "$plot")" && pwd)
py=""
for c in "${PYTHON:-python3}" python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import matplotlib' 2>/dev/null; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: matplotlib is not installed for ${PYTHON:-python3} nor /usr/bin/python3"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir"
"$py" "$plot" --db "$src/study-h200.db" --out "$dir/out"
strip() { grep -v '^- regenerate: ' "$1"; }
if ! diff <(strip "$src/REPORT.md") <(strip "$dir/out/REPORT.md") >"$dir/report.diff"; then
  echo "FAIL: plot.py on the committed store differs from the committed REPORT.md:"; head -40 "$dir/report.diff"; exit 1
fi
rendered_by=$(sed -n 's/^<!-- figures: matplotlib \(.*\) -->$/\1/p' "$src/REPORT.md")
have=$("$py" -c 'import matplotlib; print(matplotlib.__version__)')
if [ -n "$rendered_by" ] && [ "$rendered_by" = "$have" ]; then
  for f in "$src"/*.png; do
    cmp -s "$f" "$dir/out/$(basename "$f")" || { echo "FAIL: $(basename "$f") differs from the committed figure"; exit 1; }
  done
  echo "OK: REPORT.md and the figures (matplotlib $have) are those of the committed store"
else
  echo "OK: REPORT.md is that of the committed store (figures not compared: rendered by matplotlib ${rendered_by:-?}, here $have)"
fi
