#!/usr/bin/env bash
# Line and branch coverage of Tower's own C code, per folder: builds build-coverage/ with gcov instrumentation
# (-DTW_COVERAGE=ON, no CUDA), runs the unit tests (and, with --integration, the integration suite against that
# build), reads the counters with lcov and prints one row per library's source folder (cli/, the binary's
# command table and nothing else, has none). Not part of CI's pass or fail: a measure to read, not a gate.
#
#   scripts/coverage.sh [--integration] [BUILD_DIR]      (default build-coverage; needs lcov:
#                                                         scripts/install-deps.sh --test)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
integration=0 dir="$root/build-coverage"
for arg in "$@"; do
  case "$arg" in
    --integration) integration=1 ;;
    -*) echo "coverage.sh: unknown option '$arg' (known: --integration)" >&2; exit 2 ;;
    *) dir="$arg" ;;
  esac
done
command -v lcov >/dev/null || { echo "coverage.sh: lcov is missing: scripts/install-deps.sh --test" >&2; exit 2; }
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DTW_COVERAGE=ON -DTW_CUDA=OFF -DTW_UNIT_TESTS=ON \
  >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log" >&2; exit 1; }
cmake --build "$dir" -j"$(nproc)" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log" >&2; exit 1; }
lcov --zerocounters --directory "$dir" >/dev/null
ctest --test-dir "$dir" -L unit >"$dir.ctest.log" 2>&1 || echo "coverage.sh: some unit tests failed ($dir.ctest.log)" >&2
if [ "$integration" = 1 ]; then
  TOWER_BUILD="$dir" "${TOWER_VENV:-/opt/tower-venv}/bin/python" -m pytest -q "$root/tests/integration" \
    >"$dir.pytest.log" 2>&1 || echo "coverage.sh: some integration tests failed ($dir.pytest.log)" >&2
fi
# A baseline of every instrumented file (at zero) added to what ran: a file no test reached counts, as 0.
lcov --quiet --capture --initial --directory "$dir" --base-directory "$root" --rc lcov_branch_coverage=1 \
  --output-file "$dir/baseline.info" 2>"$dir.lcov.log"
lcov --quiet --capture --directory "$dir" --base-directory "$root" --rc lcov_branch_coverage=1 \
  --output-file "$dir/run.info" 2>>"$dir.lcov.log"
lcov --quiet --rc lcov_branch_coverage=1 --add-tracefile "$dir/baseline.info" --add-tracefile "$dir/run.info" \
  --output-file "$dir/coverage.info" 2>>"$dir.lcov.log"
python3 - "$root" "$dir/coverage.info" <<'PY'
import collections, sys
root, info = sys.argv[1].rstrip("/") + "/", sys.argv[2]
rows = collections.OrderedDict((f, [0, 0, 0, 0]) for f in ("base", "eventlog", "world", "kernels/cpu", "engine",
                                                            "server", "client"))
folder = None
for line in open(info):
    key, _, value = line.strip().partition(":")
    if key == "SF":
        rel = value[len(root):] if value.startswith(root) else ""
        folder = next((f for f in rows if rel.startswith(f + "/") and "/" not in rel[len(f) + 1:]), None)
    elif folder and key in ("LF", "LH", "BRF", "BRH"):
        rows[folder][("LF", "LH", "BRF", "BRH").index(key)] += int(value)
pct = lambda hit, found: f"{100.0 * hit / found:5.1f}%" if found else "    -"
print(f"{'folder':12} {'lines':>16} {'line %':>7} {'branches':>16} {'branch %':>8}")
for name, (lf, lh, brf, brh) in rows.items():
    print(f"{name:12} {lh:>7} of {lf:<6} {pct(lh, lf):>7} {brh:>7} of {brf:<6} {pct(brh, brf):>8}")
PY
