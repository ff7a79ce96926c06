#!/usr/bin/env bash
# Prints, one per line and sorted, the macros that the headers of generated code define and a user's
# name could meet: what the CUDA compiler sees (stdint.h, cuda_fp16.h, cuda_bf16.h, cuda_runtime.h),
# what the CPU simulation includes (backend/sim/emmy_cuda_sim.h) and what the GPU runtime's host
# compile includes (runtime/emmy_cuda_host.h). Names with '__' or a leading '_' are left out (no user
# name has them), and so are the prefixes support/cpp_names.cpp reserves as a whole.
# support/header_macros.inc is this list; the [names] tests say when the headers here define more.
# Usage: scripts/list_header_macros.sh [NVCC]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '#include <stdint.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_runtime.h>\n' > "$scratch/device.cu"
: > "$scratch/empty.cpp"
{
  "$nvcc" -E -Xcompiler -dM -x cu "$scratch/device.cu" -o -
  "${CXX:-c++}" -std=c++17 -E -dM -DEMMY_SIMULATE -include "$root/backend/sim/emmy_cuda_sim.h" "$scratch/empty.cpp"
  "${CXX:-c++}" -E -dM -I"$root/runtime" -include "$root/runtime/emmy_cuda_host.h" "$scratch/empty.cpp"
} | awk '$1 == "#define" { sub(/\(.*/, "", $2); print $2 }' | grep -v -e '__' -e '^_' \
  | grep -v -E '^(cuda|CUDA|CU|NV_|EMMY|emmy_)' | LC_ALL=C sort -u
