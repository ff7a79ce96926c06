#!/usr/bin/env bash
# Schedules through the real driver: -D sets a param (emmy build and emmy check), also a called kernel's,
# a value outside the candidates is an error in the source (exit 1), an unknown or malformed -D a usage error (exit 2), and
# `--emit schedule` fed back as the kernel's schedule gives the same CUDA byte for byte.
# Usage: run_schedule_cli.sh EMMY SOURCE_DIR
set -euo pipefail
emmy=$1
source "$(dirname "$0")/cli_expect.sh"
cd "$2"

expect 0 'C: .* ok' -- "$emmy" check examples/matmul.emmy -D BM=32 -D BK=8 --size M=37 --size K=19 --size N=45
expect 0 'tile C \(i, j\) by \(128, 64\)' -- "$emmy" build examples/matmul.emmy --emit schedule -D BM=128
expect 1 '-D BM=96 is not one of the candidates \[32, 64, 128\]' -- "$emmy" build examples/matmul.emmy -D BM=96 --emit tile
expect 2 'no schedule of the kernels built declares a param XY' -- "$emmy" build examples/matmul.emmy -D XY=1 --emit tile
expect 2 "expected NAME=VALUE" -- "$emmy" check examples/matmul.emmy -D BM

# A called kernel's params: -D LANES sets nn.softmax's in a kernel that calls it (emmy build and check).
cat >"$out/calls_softmax.emmy" <<'EOF'
import nn
kernel rows(x: f32[N, D]) -> (y: f32[N, D]) {
    y = nn.softmax(x) * 2.0
}
EOF
expect 0 'split y.d_vector by 64 -> \(d_step, d_lane\)' -- "$emmy" build "$out/calls_softmax.emmy" --emit schedule -D LANES=64
expect 0 'y: .* ok' -- "$emmy" check "$out/calls_softmax.emmy" -D LANES=64 --size N=3 --size D=1001
expect 1 '-D LANES=96 is not one of the candidates' -- "$emmy" build "$out/calls_softmax.emmy" -D LANES=96 --emit tile

# The round trip: the kernel with its printed schedule instead of its own.
for example in matmul softmax; do
  mkdir -p "$out/first" "$out/again"
  "$emmy" build "examples/$example.emmy" -o "$out/first"
  { sed '/^schedule /,$d' "examples/$example.emmy"; "$emmy" build "examples/$example.emmy" --emit schedule; } \
    >"$out/again/$example.emmy"
  "$emmy" build "$out/again/$example.emmy" -o "$out/again"
  cmp -s "$out/first/$example.cu" "$out/again/$example.cu" ||
    fail "the printed schedule of examples/$example.emmy gives other CUDA"
done

echo "schedule command lines: $failures failure(s)"
((failures == 0))
