#!/usr/bin/env bash
# Every GPU check in one command, sized for a 15-minute device lease that also pays for the machine's
# start and the copy of the build: the script takes at most 9 minutes (540 s). Build and pack on the
# development machine first (scripts/pack_gpu.sh), then on the GPU machine, from the checkout's root:
#
#   tests/gpu/run.sh [RESULTS_FILE]      # default: $OUT/gpu-results.txt, else build/gpu-results.txt
#
# Beside the results file: gpu-bench.jsonl, one JSON object per measurement (bench/ARCHITECTURE.md).
# Every step has its own time limit, so that a hang cannot eat the others' time. The limits add up to
# 490 s, and with 5 s each to end what ignores the signal, 535 s: under the 540 s budget, which the
# script checks before it starts. The benchmark comes first, since nothing but a GPU can produce it; the
# correctness checks follow, trimmed to fit.
#   probe  20 s  the device, as nvidia-smi and `emmy run` see it (no device: the reason, and exit 0);
#   bench 165 s  emmy_bench_stdlib: the copy bandwidth (cudaMemcpy, the reference float4 kernel), then
#                every stdlib kernel in f32, f16 and bf16 at the performance targets' sizes, each right
#                away against PyTorch eager, torch.compile (60 s for all its compilations), cuBLAS and
#                FlashAttention;
#   unit   45 s  the [runtime] unit tests, which run generated kernels on the GPU against the evaluator;
#   run    85 s  `emmy run` of every example at a ragged size and of every stdlib kernel in every type
#                (f16 at a regular size, f32 and bf16 at a ragged one; the row kernels also at rows too
#                long for their shared copy; convolutions, pools and norms at ragged sizes), and of the
#                scans of tests/lowering/scans.emmy, against the evaluator and (stdlib) PyTorch, 16 at a
#                time;
#   sanitize 50 s  compute-sanitizer's memcheck and racecheck on `emmy run` of a kernel of each kind of
#                generated code (rows, products on tensor cores, scans, windows, transposes);
#   ncu    60 s  Nsight Compute's speed of light, memory, occupancy and warp stalls of one launch of the
#                kernels furthest from their targets (a product, a row kernel, a transpose, attention);
#   app    30 s  examples/app built with nvcc through find_package(Emmy), and run;
#   tune   25 s  `emmy tune` of the stdlib's matmul<f32> at 512^3, 6 candidates timed on the GPU;
#   table  10 s  the benchmark's table, from gpu-bench.jsonl (also when the bench was cut short).
# Exit status: 0 when every step passed (or there is no GPU), 1 otherwise, 2 when the limits do not fit
# the budget. EMMY_GPU_PACK points to the pack (default build/gpu-pack).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=${EMMY_GPU_PACK:-$root/build/gpu-pack}
results=${1:-${OUT:-$root/build}/gpu-results.txt}
measurements=$(dirname "$results")/gpu-bench.jsonl
budget=540      # seconds for the whole script
kill_after=5    # seconds a step gets after its limit to end before it is killed
declare -A limit=([probe]=20 [bench]=165 [unit]=45 [run]=85 [sanitize]=50 [ncu]=60 [app]=30 [tune]=25 [table]=10)

worst=0
for step_name in "${!limit[@]}"; do worst=$((worst + limit[$step_name] + kill_after)); done
if ((worst >= budget)); then
  echo "the steps' limits, each with ${kill_after} s to end, add up to ${worst} s: over the ${budget} s budget"
  exit 2
fi

mkdir -p "$(dirname "$results")"
: >"$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
exec 3>&1  # this script's standard output, for what a step shows besides the results file

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
export emmy="$pack/bin/emmy" work pack measurements
cd "$root"

# step NAME COMMAND...: runs COMMAND (words of a command line, or an exported function) within the
# step's limit, its output into the results file; returns its exit status.
step() {
  local name=$1
  shift
  say "== $name (limit ${limit[$name]} s)"
  local started=$SECONDS
  timeout --kill-after=$kill_after "${limit[$name]}" bash -c "$*" >>"$results" 2>&1
  local status=$?
  if ((status == 0)); then
    say "-- $name: PASSED in $((SECONDS - started)) s"
  else
    say "-- $name: FAILED (status $status$( ((status == 124)) && echo ', timed out')) in $((SECONDS - started)) s"
    failures+=("$name")
  fi
  return $status
}

say "Emmy GPU tests, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n); step limits ${worst} s at most, of ${budget} s"

# The device and its clocks now (idle), then a kernel through the whole chain; exit 3: no device.
probe() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem \
    --format=csv || true
  "$emmy" run examples/softmax.emmy --size N=7 --size D=100
}
export -f probe
step probe probe
if (($? == 3)); then
  say "no GPU here: nothing else to run"
  exit 0
fi

step bench "'$pack/bin/emmy_bench_stdlib' --json '$measurements' --compile-seconds 30 --compile-budget 60"

step unit "'$pack/bin/emmy_unit_tests' '[runtime]'"

# run_jobs TITLE PARALLEL FUNCTION: FUNCTION with the words of each line of standard input, PARALLEL at
# a time; each job's log is printed as it ends (one at a time, so that a step cut short still shows what
# it ran), then how many failed (exited other than 0).
run_jobs() {
  local title=$1 parallel=$2 function=$3
  local logs
  logs=$(mktemp -d "$work/logs.XXXX")
  local number=0 job
  while IFS= read -r job; do
    number=$((number + 1))
    printf '%03d %s\n' "$number" "$job"
  done | xargs -P "$parallel" -L 1 bash -c '
    logs=$0 function=$1 number=$2
    shift 2
    { "$function" "$@"; echo "exit status $?"; } >"$logs/$number.log" 2>&1
    flock "$logs" cat "$logs/$number.log"' "$logs" "$function"
  local failed=0 log
  for log in "$logs"/*.log; do
    grep -q "^exit status 0$" "$log" || failed=$((failed + 1))
  done
  echo "$title: $(ls "$logs"/*.log | wc -l) runs, $failed failed"
  ((failed == 0))
}
export -f run_jobs

# emmy run: one job per line, FILE then the options.
jobs="$work/jobs.txt"
{
  echo "examples/gelu.emmy --size N=37 --size D=1001"
  echo "examples/layernorm.emmy --size N=5 --size D=300"
  echo "examples/linear_relu.emmy --size B=33 --size IN=70 --size OUT=65"
  echo "examples/matmul.emmy --size M=65 --size N=33 --size K=70"
  echo "examples/residual_mlp.emmy --size N=9 --size D=40 --size H=70"
  echo "examples/softmax.emmy --size N=37 --size D=1000"
  echo "examples/standardize.emmy --size B=3 --size S=17 --size D=100"
  echo "examples/stencil.emmy --size H=33 --size W=65 --size N=1001"
  echo "examples/swiglu.emmy --kernel swiglu<bf16> --size N=37 --size H=1001"
  for type in f32 f16 bf16; do
    # f16 at a regular size (the aligned, vectorised paths), f32 and bf16 at ragged ones (the tails).
    case=ragged
    [[ $type == f16 ]] && case=even
    if [[ $case == even ]]; then
      echo "stdlib/nn.emmy --kernel softmax<$type> --size N=64 --size D=4096"
      echo "stdlib/nn.emmy --kernel log_softmax<$type> --size N=64 --size D=4096"
      echo "stdlib/nn.emmy --kernel layernorm<$type> --size N=64 --size D=768"
      echo "stdlib/nn.emmy --kernel rmsnorm<$type> --size N=64 --size D=768"
      echo "stdlib/nn.emmy --kernel linear<$type> --size N=64 --size IN=256 --size OUT=128"
      echo "stdlib/nn.emmy --kernel mlp<$type> --size N=32 --size D=128 --size H=256"
      echo "stdlib/nn.emmy --kernel attend<$type> --size B=2 --size H=4 --size S=64 --size L=64 --size E=32"
      echo "stdlib/linalg.emmy --kernel matmul<$type> --size M=128 --size N=128 --size K=128"
      echo "stdlib/linalg.emmy --kernel bmm<$type> --size B=4 --size M=64 --size N=64 --size K=64"
      echo "stdlib/linalg.emmy --kernel transpose<$type> --size M=256 --size N=512"
      # Rows longer than the shared copy holds (16384 elements in f16): the second path.
      for kernel in softmax log_softmax layernorm rmsnorm; do
        echo "stdlib/nn.emmy --kernel $kernel<$type> --size N=4 --size D=20001"
      done
    else
      echo "stdlib/nn.emmy --kernel softmax<$type> --size N=37 --size D=1000"
      echo "stdlib/nn.emmy --kernel log_softmax<$type> --size N=37 --size D=1000"
      echo "stdlib/nn.emmy --kernel layernorm<$type> --size N=5 --size D=300"
      echo "stdlib/nn.emmy --kernel rmsnorm<$type> --size N=5 --size D=300"
      echo "stdlib/nn.emmy --kernel linear<$type> --size N=33 --size IN=70 --size OUT=65"
      echo "stdlib/nn.emmy --kernel mlp<$type> --size N=9 --size D=40 --size H=70"
      echo "stdlib/nn.emmy --kernel attend<$type> --size B=1 --size H=3 --size S=17 --size L=33 --size E=24"
      echo "stdlib/linalg.emmy --kernel matmul<$type> --size M=65 --size N=33 --size K=70"
      echo "stdlib/linalg.emmy --kernel bmm<$type> --size B=3 --size M=17 --size N=33 --size K=65"
      echo "stdlib/linalg.emmy --kernel transpose<$type> --size M=37 --size N=1000"
    fi
    # Convolutions (strided, grouped, transposed), pools in ceil mode, norms over images, and scans.
    echo "stdlib/nn.emmy --kernel conv1d<$type,stride=2,padding=1> --size N=3 --size C=5 --size L=37 --size OUT=7 --size K=3"
    echo "stdlib/nn.emmy --kernel conv2d<$type,stride=2,padding=1> --size N=2 --size C=6 --size H=13 --size W=11 --size OUT=10 --size KH=3 --size KW=3"
    echo "stdlib/nn.emmy --kernel conv2d<$type,padding=1,groups=3> --size N=2 --size C=6 --size H=9 --size W=10 --size OUT=9 --size KH=3 --size KW=3"
    echo "stdlib/nn.emmy --kernel conv2d<$type,padding=1> --size N=4 --size C=64 --size H=14 --size W=14 --size OUT=64 --size KH=3 --size KW=3"
    echo "stdlib/nn.emmy --kernel conv3d<$type,padding=1> --size N=1 --size C=3 --size D=5 --size H=7 --size W=6 --size OUT=4 --size KD=3 --size KH=3 --size KW=3"
    echo "stdlib/nn.emmy --kernel conv_transpose2d<$type,stride=2,padding=1,output_padding=1> --size N=2 --size C=5 --size H=7 --size W=6 --size OUT=4 --size KH=3 --size KW=3"
    echo "stdlib/nn.emmy --kernel max_pool2d<$type,kernel_size=3,stride=2,padding=1,ceil_mode=1> --size N=2 --size C=3 --size H=14 --size W=11"
    echo "stdlib/nn.emmy --kernel avg_pool2d<$type,kernel_size=3,stride=2,padding=1,ceil_mode=1> --size N=2 --size C=3 --size H=14 --size W=11"
    echo "stdlib/nn.emmy --kernel max_pool3d<$type,kernel_size=2> --size N=1 --size C=3 --size D=7 --size H=9 --size W=5"
    echo "stdlib/nn.emmy --kernel batchnorm<$type> --size N=3 --size C=5 --size H=9 --size W=13"
    echo "stdlib/nn.emmy --kernel groupnorm<$type,num_groups=2> --size N=3 --size C=6 --size H=9 --size W=13"
    echo "stdlib/nn.emmy --kernel instancenorm<$type> --size N=3 --size C=5 --size H=33 --size W=31"
    echo "tests/lowering/scans.emmy --kernel scans<$type> --size N=5 --size L=3001"
    # attention's scale has no default: its inputs come from files (below).
    echo "stdlib/nn.emmy --kernel attention<$type> --inputs $work/inputs/attention-$type-$case"
    echo "stdlib/nn.emmy --kernel causal_attention<$type> --inputs $work/inputs/causal_attention-$type-$case"
  done
  echo "tests/lowering/scans.emmy --kernel running_sum --size N=2 --size T=20003"
  echo "tests/lowering/scans.emmy --kernel exclusive_sum --size N=37 --size T=1000"
  echo "tests/lowering/scans.emmy --kernel running_max --size N=3 --size T=301 --size C=7"
  echo "tests/lowering/scans.emmy --kernel integer_scan --size L=20001"
  echo "tests/lowering/scans.emmy --kernel running_mean --size N=5 --size T=4099"
  echo "tests/lowering/scans.emmy --kernel small_tiles --size N=4 --size T=1001"
} >"$jobs"

run_all() {
  # q, k, v (random, in [-1, 1), bf16 as <u2 bit patterns) and scale for the attention kernels.
  python3 - "$work/inputs" <<'PY' || return 1
import os, sys
import numpy as np
rng = np.random.default_rng(0)
def tensor(shape, dtype):
    x = (rng.random(shape, dtype=np.float32) * 2 - 1)
    if dtype == "bf16":
        return (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated: any bf16 values will do
    return x.astype({"f32": np.float32, "f16": np.float16}[dtype])
for kernel in ("attention", "causal_attention"):
    for dtype, case, (B, H, S, L, E) in (("f32", "ragged", (1, 3, 17, 33, 24)), ("f16", "even", (2, 4, 64, 64, 32)),
                                         ("bf16", "ragged", (1, 3, 17, 33, 24))):
        if kernel == "causal_attention":
            L = S
        folder = f"{sys.argv[1]}/{kernel}-{dtype}-{case}"
        os.makedirs(folder)
        np.save(f"{folder}/q.npy", tensor((B, H, S, E), dtype))
        np.save(f"{folder}/k.npy", tensor((B, H, L, E), dtype))
        np.save(f"{folder}/v.npy", tensor((B, H, L, E), dtype))
        np.save(f"{folder}/scale.npy", np.array(E ** -0.5, dtype=np.float32))
PY
  run_jobs "emmy run" 16 emmy_run_job <"$jobs"
}
emmy_run_job() {
  echo "\$ emmy run $*"
  timeout 50 "$emmy" run "$@" 2>&1
}
export -f run_all emmy_run_job
export jobs
step run run_all

# compute-sanitizer on real hardware, beside the simulation's race and bounds checks: TOOL then the job.
sanitize() {
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [[ -x $sanitizer ]] || { echo "no compute-sanitizer: skipped"; return 0; }
  export sanitizer
  {
    for tool in memcheck racecheck; do
      echo "$tool stdlib/nn.emmy --kernel softmax<f16> --size N=3 --size D=20001"
      echo "$tool stdlib/nn.emmy --kernel layernorm<bf16> --size N=5 --size D=300"
      echo "$tool stdlib/linalg.emmy --kernel matmul<f16> --size M=65 --size N=33 --size K=70"
      echo "$tool stdlib/linalg.emmy --kernel transpose<f16> --size M=37 --size N=1000"
      echo "$tool stdlib/nn.emmy --kernel conv2d<f16,padding=1> --size N=2 --size C=16 --size H=9 --size W=10 --size OUT=16 --size KH=3 --size KW=3"
      echo "$tool tests/lowering/scans.emmy --kernel small_tiles --size N=4 --size T=1001"
      echo "$tool tests/lowering/scans.emmy --kernel running_sum --size N=2 --size T=3001"
    done
  } | run_jobs compute-sanitizer 8 sanitize_job
}
# TOOL then the job; PyTorch is not started (the sanitizer would follow it too).
sanitize_job() {
  local tool=$1
  shift
  echo "\$ compute-sanitizer --tool $tool emmy run $*"
  EMMY_PYTHON=/bin/false timeout 45 "$sanitizer" --tool "$tool" --error-exitcode 9 \
    --target-processes application-only "$emmy" run "$@" 2>&1 | tail -n 25
  return "${PIPESTATUS[0]}"
}
export -f sanitize sanitize_job
step sanitize sanitize

# One launch of each, as Nsight Compute sees it: where the time goes, for the work on these kernels.
ncu_profile() {
  local ncu
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [[ -x $ncu ]] || { echo "no ncu: skipped"; return 0; }
  local failed=0 job
  while IFS= read -r job; do
    echo "\$ ncu emmy bench $job"
    # shellcheck disable=SC2086  # the job's words
    timeout 25 "$ncu" --clock-control none --target-processes application-only -c 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
      "$emmy" bench $job --repeat 1 --warmup 0 --no-torch 2>&1 | grep -v '^==PROF==' | tail -n 90
    [[ ${PIPESTATUS[0]} == 0 ]] || failed=$((failed + 1))
  done <<'JOBS'
stdlib/linalg.emmy --kernel matmul<f16> --size M=4096 --size N=4096 --size K=4096
stdlib/nn.emmy --kernel softmax<f16> --size N=16384 --size D=4096
stdlib/linalg.emmy --kernel transpose<f16> --size M=8192 --size N=8192
stdlib/nn.emmy --kernel attention<f16> --size B=4 --size H=16 --size S=2048 --size L=2048 --size E=64 --scalar scale=0.125
JOBS
  ((failed == 0))
}
export -f ncu_profile
step ncu ncu_profile

# examples/app with nvcc, through the installed package.
build_app() {
  command -v nvcc >/dev/null && command -v cmake >/dev/null || { echo "no nvcc or cmake: skipped"; return 0; }
  cp -r examples/app "$work/app" && cp examples/softmax.emmy "$work/softmax.emmy" &&
    cmake -S "$work/app" -B "$work/app-build" -G Ninja -DEmmy_DIR="$pack/lib/cmake/emmy" -DCMAKE_CUDA_ARCHITECTURES=90 &&
    cmake --build "$work/app-build" && "$work/app-build/softmax_app"
}
export -f build_app
step app build_app

# emmy tune on the GPU: the table, and the best candidate's speed-up over the defaults.
tune_matmul() {
  "$emmy" tune stdlib/linalg.emmy --kernel 'matmul<f32>' --size M=512 --size N=512 --size K=512 --budget 6 \
    --db "$work/tuning.db" 2>"$work/tune.log"
  local status=$?
  if ((status == 0)); then tail -n 3 "$work/tune.log"; else cat "$work/tune.log"; fi
  return $status
}
export -f tune_matmul
step tune tune_matmul

# The benchmark's table, last, so that it ends the output; also on this script's standard output.
bench_table() {
  "$pack/bin/emmy_bench_stdlib" --table "$measurements" >"$work/table.txt"
  local status=$?
  cat "$work/table.txt"
  cat "$work/table.txt" >&3
  return $status
}
export -f bench_table
step table bench_table

say "== summary: $([[ ${#failures[@]} -eq 0 ]] && echo "everything passed" || echo "FAILED: ${failures[*]}") in $SECONDS s"
((${#failures[@]} == 0))
