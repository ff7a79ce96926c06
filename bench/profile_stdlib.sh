#!/usr/bin/env bash
# The standing baselines, on the CPU: `emmy check --profile` of the standard library's kernels at sizes the
# simulation runs in seconds, each printing its sectors per request, shared-memory wavefronts, bytes against
# the least traffic and issue cycles per word beside its hand-written baseline's (bench/reference/), so
# that a regression in the generated code shows without a GPU. A benchmark: it prints, it gates nothing.
#
#   bench/profile_stdlib.sh [EMMY]        # default build/bin/emmy; about two minutes
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
emmy=${1:-$root/build/bin/emmy}
cd "$root"

profile() {
  echo "== emmy check --profile $*"
  "$emmy" check --profile "$@"
}
for type in f32 f16; do
  for kernel in softmax log_softmax; do profile stdlib/nn.emmy --kernel "$kernel<$type>" --size N=64 --size D=4096; done
  for kernel in layernorm rmsnorm; do profile stdlib/nn.emmy --kernel "$kernel<$type>" --size N=64 --size D=4096; done
  profile stdlib/linalg.emmy --kernel "transpose<$type>" --size M=512 --size N=1024
done
profile stdlib/linalg.emmy --kernel 'matmul<f32>' --size M=256 --size N=256 --size K=256
profile stdlib/linalg.emmy --kernel 'matmul<f16>' --size M=256 --size N=256 --size K=256
