#!/usr/bin/env bash
# Every GPU test and the standard-library benchmark, in one command, on a machine with a CUDA GPU, in
# under 8 minutes; everything goes to a results file. Build and pack on the development machine first
# (scripts/pack_gpu.sh), then on the GPU machine, from the checkout's root:
#
#   tests/gpu/run.sh [RESULTS_FILE]      # default: $OUT/gpu-results.txt, else build/gpu-results.txt
#
# Steps, each with its own time limit so that a hang cannot eat the budget:
#   1. the device, as `emmy run` sees it (no device: the reason, and exit 0);
#   2. the [runtime] unit tests, which run generated kernels on the GPU against the evaluator;
#   3. `emmy run` of every example and every standard-library kernel in every type, at a regular and a
#      ragged size (and the row kernels at rows too long for their shared copy), against the evaluator
#      and (stdlib) PyTorch on the GPU, 8 at a time;
#   4. examples/app built with nvcc through find_package(Emmy), and run;
#   5. `emmy tune` of the standard library's matmul<f32> at 1024^3, 12 candidates timed on the GPU (the
#      reference outputs, computed once on the CPU by the naive evaluator, take about half a minute of
#      CPU time, spread over the cores);
#   6. emmy_bench_stdlib: every stdlib kernel in every type against PyTorch eager, with what is left.
# Exit status: 0 when every step passed (or there is no GPU), 1 otherwise. EMMY_GPU_PACK points to the
# pack (default build/gpu-pack).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=${EMMY_GPU_PACK:-$root/build/gpu-pack}
results=${1:-${OUT:-$root/build}/gpu-results.txt}
budget=470  # seconds for the whole script
mkdir -p "$(dirname "$results")"
: >"$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say() { echo "$*" | tee -a "$results"; }
failures=()

if [[ ! -x "$pack/bin/emmy" ]]; then
  say "no pack at $pack: run scripts/pack_gpu.sh on the development machine and carry build/gpu-pack"
  exit 1
fi
export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$pack/bin:$PATH:/usr/local/cuda/bin"
export PYTHONUNBUFFERED=1
# This checkout's standard library, so that `emmy run stdlib/nn.emmy` compares with PyTorch.
export EMMY_STDLIB="$root/stdlib"
# The programs read sources at the path they were built in: make it this checkout.
built_in=$(cat "$pack/source_dir")
if [[ ! -e "$built_in" ]]; then mkdir -p "$(dirname "$built_in")" && ln -s "$root" "$built_in"; fi
export emmy="$pack/bin/emmy" work pack
cd "$root"

# step NAME SECONDS COMMAND...: runs COMMAND (words of a command line, or an exported function) with what
# is left of the budget at most, its output into the results file.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - SECONDS - 5))
  ((limit > left)) && limit=$left
  if ((limit <= 0)); then
    say "== $name: SKIPPED (out of time)"
    failures+=("$name (skipped)")
    return
  fi
  say "== $name (limit ${limit} s)"
  local started=$SECONDS
  timeout --kill-after=5 "$limit" bash -c "$*" >>"$results" 2>&1
  local status=$?
  if ((status == 0)); then
    say "-- $name: PASSED in $((SECONDS - started)) s"
  else
    say "-- $name: FAILED (status $status$( ((status == 124)) && echo ', timed out')) in $((SECONDS - started)) s"
    failures+=("$name")
  fi
}

say "Emmy GPU tests, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$results" 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' >>"$results" 2>&1 || true

# 1. The device.
timeout 60 "$emmy" run examples/softmax.emmy --size N=7 --size D=100 >"$work/probe.log" 2>&1
probe=$?
cat "$work/probe.log" >>"$results"
if ((probe == 3)); then
  say "no GPU here: nothing else to run"
  exit 0
fi
((probe == 0)) || failures+=("probe")

# 2. Unit tests that run on the GPU.
step "unit tests [runtime]" 90 "'$pack/bin/emmy_unit_tests' '[runtime]'"

# 3. emmy run: one job per line, FILE then the options.
jobs="$work/jobs.txt"
{
  echo "examples/gelu.emmy --size N=64 --size D=1024"
  echo "examples/gelu.emmy --size N=37 --size D=1001"
  echo "examples/layernorm.emmy --size N=64 --size D=768"
  echo "examples/layernorm.emmy --size N=5 --size D=300"
  echo "examples/linear_relu.emmy --size B=64 --size IN=256 --size OUT=128"
  echo "examples/linear_relu.emmy --size B=33 --size IN=70 --size OUT=65"
  echo "examples/matmul.emmy --size M=128 --size N=128 --size K=128"
  echo "examples/matmul.emmy --size M=65 --size N=33 --size K=70"
  echo "examples/residual_mlp.emmy --size N=32 --size D=128 --size H=256"
  echo "examples/residual_mlp.emmy --size N=9 --size D=40 --size H=70"
  echo "examples/softmax.emmy --size N=64 --size D=4096"
  echo "examples/softmax.emmy --size N=37 --size D=1000"
  echo "examples/standardize.emmy --size B=4 --size S=64 --size D=256"
  echo "examples/standardize.emmy --size B=3 --size S=17 --size D=100"
  echo "examples/stencil.emmy --size H=64 --size W=128 --size N=4096"
  echo "examples/stencil.emmy --size H=33 --size W=65 --size N=1001"
  for type in f32 f16 bf16; do
    echo "examples/swiglu.emmy --kernel swiglu<$type> --size N=64 --size H=1024"
    echo "examples/swiglu.emmy --kernel swiglu<$type> --size N=37 --size H=1001"
    for kernel in softmax log_softmax; do
      echo "stdlib/nn.emmy --kernel $kernel<$type> --size N=64 --size D=4096"
      echo "stdlib/nn.emmy --kernel $kernel<$type> --size N=37 --size D=1000"
    done
    for kernel in layernorm rmsnorm; do
      echo "stdlib/nn.emmy --kernel $kernel<$type> --size N=64 --size D=768"
      echo "stdlib/nn.emmy --kernel $kernel<$type> --size N=5 --size D=300"
    done
    # Rows longer than the shared copy holds (16384 elements in f16 and bf16): the second path.
    for kernel in softmax log_softmax layernorm rmsnorm; do
      echo "stdlib/nn.emmy --kernel $kernel<$type> --size N=4 --size D=20001"
    done
    echo "stdlib/nn.emmy --kernel linear<$type> --size N=64 --size IN=256 --size OUT=128"
    echo "stdlib/nn.emmy --kernel linear<$type> --size N=33 --size IN=70 --size OUT=65"
    echo "stdlib/nn.emmy --kernel mlp<$type> --size N=32 --size D=128 --size H=256"
    echo "stdlib/nn.emmy --kernel mlp<$type> --size N=9 --size D=40 --size H=70"
    echo "stdlib/nn.emmy --kernel attend<$type> --size B=2 --size H=4 --size S=64 --size L=64 --size E=32"
    echo "stdlib/nn.emmy --kernel attend<$type> --size B=1 --size H=3 --size S=17 --size L=33 --size E=24"
    # attention's scale has no default: its inputs come from files (below).
    echo "stdlib/nn.emmy --kernel attention<$type> --inputs $work/inputs/attention-$type-even"
    echo "stdlib/nn.emmy --kernel attention<$type> --inputs $work/inputs/attention-$type-ragged"
    echo "stdlib/nn.emmy --kernel causal_attention<$type> --inputs $work/inputs/causal_attention-$type-even"
    echo "stdlib/nn.emmy --kernel causal_attention<$type> --inputs $work/inputs/causal_attention-$type-ragged"
    echo "stdlib/linalg.emmy --kernel matmul<$type> --size M=128 --size N=128 --size K=128"
    echo "stdlib/linalg.emmy --kernel matmul<$type> --size M=65 --size N=33 --size K=70"
    echo "stdlib/linalg.emmy --kernel bmm<$type> --size B=4 --size M=64 --size N=64 --size K=64"
    echo "stdlib/linalg.emmy --kernel bmm<$type> --size B=3 --size M=17 --size N=33 --size K=65"
    echo "stdlib/linalg.emmy --kernel transpose<$type> --size M=256 --size N=512"
    echo "stdlib/linalg.emmy --kernel transpose<$type> --size M=37 --size N=1000"
  done
} >"$jobs"

# q, k, v (random, in [-1, 1), bf16 as <u2 bit patterns) and scale for the attention kernels.
python3 - "$work/inputs" <<'PY' >>"$results" 2>&1
import os, sys
import numpy as np
rng = np.random.default_rng(0)
def tensor(shape, dtype):
    x = (rng.random(shape, dtype=np.float32) * 2 - 1)
    if dtype == "bf16":
        return (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated: any bf16 values will do
    return x.astype({"f32": np.float32, "f16": np.float16}[dtype])
for kernel in ("attention", "causal_attention"):
    for dtype in ("f32", "f16", "bf16"):
        for case, (B, H, S, L, E) in {"even": (2, 4, 64, 64, 32), "ragged": (1, 3, 17, 33, 24)}.items():
            if kernel == "causal_attention":
                L = S
            folder = f"{sys.argv[1]}/{kernel}-{dtype}-{case}"
            os.makedirs(folder)
            np.save(f"{folder}/q.npy", tensor((B, H, S, E), dtype))
            np.save(f"{folder}/k.npy", tensor((B, H, L, E), dtype))
            np.save(f"{folder}/v.npy", tensor((B, H, L, E), dtype))
            np.save(f"{folder}/scale.npy", np.array(E ** -0.5, dtype=np.float32))
PY

run_all() {
  local number=0
  mkdir -p "$work/run"
  while IFS= read -r job; do
    number=$((number + 1))
    printf '%03d %s\n' "$number" "$job"
  done <"$jobs" | xargs -P 8 -L 1 bash -c '
    number=$0
    { echo "\$ emmy run $*"; timeout 120 "$emmy" run "$@" 2>&1; echo "exit status $?"; } >"$work/run/$number.log"'
  local failed=0
  for log in "$work"/run/*.log; do
    cat "$log"
    grep -q "^exit status 0$" "$log" || failed=$((failed + 1))
  done
  echo "emmy run: $(ls "$work"/run/*.log | wc -l) runs, $failed failed"
  ((failed == 0))
}
export -f run_all
export jobs
step "emmy run of every example and stdlib kernel" 150 run_all

# 4. examples/app with nvcc, through the installed package.
build_app() {
  command -v nvcc >/dev/null && command -v cmake >/dev/null || { echo "no nvcc or cmake: skipped"; return 0; }
  cp -r examples/app "$work/app" && cp examples/softmax.emmy "$work/softmax.emmy" &&
    cmake -S "$work/app" -B "$work/app-build" -G Ninja -DEmmy_DIR="$pack/lib/cmake/emmy" -DCMAKE_CUDA_ARCHITECTURES=90 &&
    cmake --build "$work/app-build" && "$work/app-build/softmax_app"
}
export -f build_app
step "examples/app built with nvcc and run" 90 build_app

# 5. emmy tune on the GPU: the table, and the best candidate's speed-up over the defaults.
tune_matmul() {
  "$emmy" tune stdlib/linalg.emmy --kernel 'matmul<f32>' --size M=1024 --size N=1024 --size K=1024 --budget 12 \
    --db "$work/tuning.db" 2>"$work/tune.log"
  local status=$?
  if ((status == 0)); then tail -n 3 "$work/tune.log"; else cat "$work/tune.log"; fi
  return $status
}
export -f tune_matmul
step "emmy tune matmul<f32> at 1024^3 on the GPU" 150 tune_matmul

# 6. The benchmark, with what is left.
step "emmy_bench_stdlib" 300 "'$pack/bin/emmy_bench_stdlib'"

say "== summary: $([[ ${#failures[@]} -eq 0 ]] && echo "everything passed" || echo "FAILED: ${failures[*]}") in $SECONDS s"
((${#failures[@]} == 0))
