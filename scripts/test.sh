#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what it needs, builds three
# configurations and runs every test. Exit status 0 only if all of them pass.
#
#   build/       release build (CUDA probed)   -> ctest -L unit, then pytest tests/integration
#   build-asan/  ASan + UBSan                  -> ctest -L unit, then the integration tests of the code
#                                                 that reads what clients send (ASAN_SUITE below)
#   build-fuzz/  clang libFuzzer + ASan/UBSan  -> ctest -L fuzz (TW_FUZZ_SECONDS per target, default 20)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/install-deps.sh" --test || exit 1
py="${TOWER_VENV:-/opt/tower-venv}/bin/python"
jobs="$(nproc)"
failed=()

step() { # step NAME COMMAND...: runs a step, remembers a failure, goes on
  local name="$1"; shift
  echo "==> $name"
  "$@" || failed+=("$name")
}

build() { # build DIR CMAKE-ARGS... [-- TARGETS...]
  local dir="$1"; shift
  local args=() targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift && targets=("$@")
  cmake -S "$root" -B "$dir" "${args[@]}" >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; return 1; }
  grep '^-- Tower:' "$dir.configure.log" || true
  if [ ${#targets[@]} -gt 0 ]; then
    cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  else
    cmake --build "$dir" -j "$jobs"
  fi
}

# Integration tests run again on the sanitizer build: those whose C code parses what users send (requests,
# uploads, archives, images, checkpoints, exports) or trains the residual recipe. A sanitizer report aborts
# the process (ASAN_OPTIONS below), which fails its test.
ASAN_SUITE=(test_server_hardening.py test_server_inputs.py test_symlinks.py test_client_uploads.py
            test_dataset_splits.py test_image_archives.py test_images.py test_convert.py test_predict.py
            test_safetensors.py test_export.py test_recipe.py)

fuzz_targets=()
for f in "$root"/tests/fuzz/fuzz_*.c; do fuzz_targets+=("$(basename "${f%.c}")"); done

build_fuzz() {
  CC=clang build build-fuzz -DCMAKE_BUILD_TYPE=Release -DTW_FUZZ=ON -DTW_CUDA=OFF \
    -DTW_FUZZ_SECONDS="${TW_FUZZ_SECONDS:-20}" -- "${fuzz_targets[@]}"
}

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p build build-asan build-fuzz
# -DTW_UNIT_TESTS=ON: the unit tests are required here (configure fails without cmocka), never skipped.
step "build (release)" build build -DCMAKE_BUILD_TYPE=Release -DTW_UNIT_TESTS=ON
step "build (asan+ubsan)" build build-asan -DCMAKE_BUILD_TYPE=Debug -DTW_SANITIZE=ON -DTW_CUDA=OFF \
  -DTW_UNIT_TESTS=ON
step "build (fuzz)" build_fuzz

step "unit tests (asan+ubsan)" ctest --test-dir build-asan -L unit --output-on-failure
step "fuzz" ctest --test-dir build-fuzz -L fuzz --output-on-failure
step "unit tests" ctest --test-dir build -L unit --output-on-failure
step "integration tests" env TOWER_BUILD="$root/build" "$py" -m pytest -q -rs "$root/tests/integration"
step "integration tests (asan+ubsan)" env TOWER_BUILD="$root/build-asan" "$py" -m pytest -q -rs \
  "${ASAN_SUITE[@]/#/$root/tests/integration/}"

# The runners' own summary lines close the output; a failed step is named before exiting non-zero.
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED steps: ${failed[*]}"
  exit 1
fi
