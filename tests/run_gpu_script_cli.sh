#!/usr/bin/env bash
# tests/gpu/run.sh on a machine without a GPU: with a pack of this build's programs (links, not the stripped
# copies scripts/pack_gpu.sh makes), it checks that its steps' limits fit its 9 minutes, says that there
# is no GPU and exits 0. On a machine with a device it would run for minutes: then this test only says so.
# Usage: run_gpu_script_cli.sh EMMY BENCH_STDLIB UNIT_TESTS SOURCE_DIR
set -uo pipefail
emmy=$1
bench=$2
unit_tests=$3
source=$4
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

if "$emmy" run "$source/examples/softmax.emmy" --size N=7 --size D=100 >/dev/null 2>&1; then
  echo "ok (a CUDA device is present: tests/gpu/run.sh is run by hand there)"
  exit 0
fi
mkdir -p "$scratch/pack/bin" "$scratch/pack/lib"
ln -s "$emmy" "$scratch/pack/bin/emmy"
ln -s "$bench" "$scratch/pack/bin/emmy_bench_stdlib"
ln -s "$unit_tests" "$scratch/pack/bin/emmy_unit_tests"
echo "$source" >"$scratch/pack/source_dir"

EMMY_GPU_PACK="$scratch/pack" bash "$source/tests/gpu/run.sh" "$scratch/results.txt" >"$scratch/out" 2>&1
status=$?
if ((status == 0)) && grep -q "^no GPU here: nothing else to run$" "$scratch/results.txt" &&
  grep -q "step limits [0-9]* s at most, of 540 s" "$scratch/results.txt"; then
  echo "ok: $(head -n 1 "$scratch/results.txt" | cut -d';' -f2)"
  exit 0
fi
echo "FAILED: tests/gpu/run.sh exited $status without a GPU"
cat "$scratch/out" "$scratch/results.txt"
exit 1
