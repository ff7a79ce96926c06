#!/usr/bin/env bash
# Bad inputs and a full disk through the real driver: each is an error with its message and exit code 1
# (2 for a usage error), never a crash, an internal error or a hang, and a failed write leaves no output
# and no temporary behind. The full-disk cases need a tiny tmpfs (mount, as root); without one they are
# skipped with a note.
# Usage: run_bad_inputs_cli.sh EMMY
set -euo pipefail
emmy=$1
source "$(dirname "$0")/cli_expect.sh"
cd "$out"

printf 'kernel scale(x: f32[N]) -> (y: f32[N]) {\n  y[i] = x[i] * 2.0\n}\n' >scale.emmy

# Inputs: a folder where a .npy file should be, sizes too large to allocate, sizes that do not parse.
mkdir -p inputs/x.npy
expect 2 'inputs/x\.npy: cannot read the file: it is a directory' -- "$emmy" check scale.emmy --inputs inputs
expect 2 'kernel scale with N=1000000000000: input x would need 3725\.3 GiB, more than this machine.s memory' -- \
  "$emmy" check scale.emmy --size N=1000000000000
expect 2 'input x would need (more than 2\^64 bytes|[0-9.]+ GiB)' -- "$emmy" check scale.emmy --size N=9223372036854775807
for bad in N=-3 N=abc N= N=1.5 N=99999999999999999999; do
  expect 2 "--size '$bad': expected NAME=VALUE with a non-negative integer VALUE" -- "$emmy" check scale.emmy --size "$bad"
done

# Source files that are not regular files of a bounded size: read, they would never end.
mkfifo pipe.emmy
expect 1 'cannot read /dev/zero: it is not a regular file' -- timeout 20 "$emmy" build /dev/zero
expect 1 'cannot read pipe\.emmy: it is not a regular file' -- timeout 20 "$emmy" build pipe.emmy
expect 1 'cannot read inputs: it is a directory' -- timeout 20 "$emmy" build inputs
expect 1 'cannot read missing\.emmy: No such file or directory' -- "$emmy" build missing.emmy
head -c $((9 << 20)) /dev/zero | tr '\0' '\n' >huge.emmy
expect 1 'cannot read huge\.emmy: it is larger than 8 MiB \(9437184 bytes\)' -- "$emmy" build huge.emmy

# A write that fails leaves nothing: the depfile cannot be written, so neither the .cu nor the .h appears.
expect 1 'cannot write /dev/full: No space left on device' -- "$emmy" build scale.emmy -o built --depfile /dev/full
[[ -z "$(ls -A built 2>/dev/null)" ]] || fail "a failed build left $(ls -A built)"
"$emmy" build scale.emmy -o built || fail "emmy build scale.emmy -o built: exit code $?"
[[ -s built/scale.cu && -s built/scale.h && $(ls -A built | wc -l) == 2 ]] || fail "the build wrote $(ls -A built)"

# A full disk: a tmpfs of 64 KiB, filled but for the pages the .cu needs, so that the .h does not fit.
mkdir disk
if mount -t tmpfs -o size=64k tmpfs disk 2>/dev/null; then
  trap 'umount "$out/disk"; rm -rf "$out"' EXIT
  page=4096
  free_pages=$(($(stat -f -c '%a' disk) * $(stat -f -c '%S' disk) / page))
  cu_pages=$((($(stat -c %s built/scale.cu) + page - 1) / page))
  head -c $(((free_pages - cu_pages) * page)) /dev/zero >disk/filler
  expect 1 'emmy: error: cannot write disk/out/scale\.(cu|h): No space left on device' -- "$emmy" build scale.emmy -o disk/out
  [[ -z "$(ls -A disk/out)" ]] || fail "a build on a full disk left $(ls -A disk/out)"
  expect 1 'cannot write disk/saved/y\.npy: No space left on device' -- \
    "$emmy" check scale.emmy --size N=100000 --save disk/saved
  [[ -z "$(ls -A disk/saved)" ]] || fail "a check --save on a full disk left $(ls -A disk/saved)"
  rm disk/filler
  "$emmy" build scale.emmy -o disk/out || fail "emmy build scale.emmy -o disk/out: exit code $?"
  cmp -s disk/out/scale.cu built/scale.cu && cmp -s disk/out/scale.h built/scale.h || fail "the build on disk/ differs"
else
  echo "SKIP the full-disk cases: mounting a tmpfs is not permitted here"
fi

echo "bad inputs: $failures failure(s)"
((failures == 0))
