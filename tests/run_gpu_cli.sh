#!/usr/bin/env bash
# `emmy run`, `emmy bench` and emmy_bench_stdlib through the real programs. Without a CUDA device: emmy
# exits 3 with "no CUDA device found (REASON)" on stderr and nothing on stdout, the benchmark says so and
# exits 0. With one (a GPU machine), the commands must succeed instead.
# Usage: run_gpu_cli.sh EMMY BENCH_STDLIB SOURCE_DIR
set -uo pipefail
emmy=$1
bench=$2
source=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0

expect() {  # expect DESCRIPTION COMMAND...: exit 3 and the message, or 0 where there is a device
  local description=$1
  shift
  "$@" >"$scratch/out" 2>"$scratch/err"
  local status=$?
  if ((status == 0)); then
    echo "ok (a CUDA device is present): $description"
  elif ((status == 3)) && grep -q "^emmy: error: no CUDA device found (.\+)$" "$scratch/err" && [[ ! -s "$scratch/out" ]]; then
    echo "ok (exit 3, $(cat "$scratch/err")): $description"
  else
    echo "FAILED: $description: exit status $status"
    cat "$scratch/out" "$scratch/err"
    failed=1
  fi
}

expect "emmy run" "$emmy" run "$source/examples/softmax.emmy" --size N=7 --size D=100
expect "emmy run of a stdlib kernel" "$emmy" run "$source/stdlib/nn.emmy" --kernel 'layernorm<bf16>' --size N=5 --size D=300
expect "emmy bench" "$emmy" bench "$source/stdlib/linalg.emmy" --kernel 'matmul<f32>' --size M=64 --size N=64 --size K=64 --repeat 3

# A wrong command line is still a usage error (2), device or not.
"$emmy" bench "$source/examples/softmax.emmy" --repeat 0 >/dev/null 2>&1
status=$?
if ((status != 2)); then echo "FAILED: emmy bench --repeat 0 exited $status, not 2"; failed=1; fi

"$bench" --kernel transpose --types f32 --repeat 2 --warmup 1 >"$scratch/out" 2>&1
status=$?
if ((status != 0)); then
  echo "FAILED: emmy_bench_stdlib exited $status"; cat "$scratch/out"; failed=1
elif grep -q "^no CUDA device found (.\+): nothing to measure$" "$scratch/out"; then
  echo "ok: emmy_bench_stdlib: $(cat "$scratch/out")"
else
  echo "ok (a CUDA device is present): emmy_bench_stdlib"
fi
exit $failed
