#!/usr/bin/env bash
# Quick start, second command: the set-up of setup.sh and every test of build/; then a clang build with
# AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer target (build-asan/: everything that
# does not link LibTorch) and its tests, which include a 60-second fuzz run. A failing test run does not
# stop the other one; the exit status is non-zero when anything failed.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$EMMY_ROOT"

summaries=()
failed=0

# run_ctest BUILD_DIR: runs its tests, keeps their output in BUILD_DIR/ctest.log and its summary line.
run_ctest() {
  local build_dir=$1
  log "Testing $build_dir"
  ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$EMMY_JOBS" 2>&1 \
    | tee "$build_dir/ctest.log" || failed=1
  summaries+=("$build_dir: $(grep -E '^[0-9]+% tests passed' "$build_dir/ctest.log" || echo 'no summary')")
}

prepare_main_build
run_ctest build

# -O1 and line tables, as AddressSanitizer's documentation suggests: its reports keep their lines, and the
# build takes about 40% less time than at -O2 -g.
configure_and_build build-asan -DEMMY_WITH_TORCH=OFF -DEMMY_SANITIZE=ON -DEMMY_FUZZ=ON \
  -DCMAKE_CXX_COMPILER=clang++ "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG"
run_ctest build-asan

log "Test summary"
printf '%s\n' "${summaries[@]}"
exit "$failed"
