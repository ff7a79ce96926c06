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
  local build_dir=$1 status=0
  log "Testing $build_dir"
  ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$EMMY_JOBS" 2>&1 \
    | tee "$build_dir/ctest.log" || status=1
  summaries+=("$build_dir: $(grep -E '^[0-9]+% tests passed' "$build_dir/ctest.log" || echo 'no summary')")
  if ((status != 0)) && ! rerun_leak_checker_crashes "$build_dir"; then failed=1; fi
}

# LeakSanitizer's own tracer (clang 14) now and then dies at exit in a process that passed, printing
# "LeakSanitizer has encountered a fatal error" instead of a leak report (google/sanitizers#1353).
# When that crash accounts for every failed test, those tests run once more and their second run counts.
rerun_leak_checker_crashes() {
  local build_dir=$1 failures crashes
  failures=$(wc -l 2>/dev/null <"$build_dir/Testing/Temporary/LastTestsFailed.log" || echo 0)
  crashes=$(grep -c 'LeakSanitizer has encountered a fatal error' "$build_dir/ctest.log" || true)
  ((failures > 0 && crashes == failures)) || return 1
  log "LeakSanitizer's tracer crashed in $failures passing test(s): running them once more"
  ctest --test-dir "$build_dir" --output-on-failure --rerun-failed 2>&1 | tee "$build_dir/ctest-rerun.log" \
    || return 1
  summaries+=("$build_dir, the rerun: $(grep -E '^[0-9]+% tests passed' "$build_dir/ctest-rerun.log")")
}

prepare_main_build
run_ctest build

configure_and_build build-asan -DEMMY_WITH_TORCH=OFF -DEMMY_SANITIZE=ON -DEMMY_FUZZ=ON \
  -DCMAKE_CXX_COMPILER=clang++
run_ctest build-asan

log "Test summary"
printf '%s\n' "${summaries[@]}"
exit "$failed"
