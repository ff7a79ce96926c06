#!/usr/bin/env bash
# Every example and standard-library module compiles through the real driver: `emmy build FILE
# --emit tensor`, run from the source folder, exits with 0, prints nothing on stderr, and prints exactly
# the golden file tests/golden/tensor/FOLDER/NAME.tensor (which golden_tests.cpp checks in process).
# Usage: run_examples_cli.sh EMMY SOURCE_DIR
set -euo pipefail
emmy=$1
cd "$2"
export LC_ALL=C  # the glob's order

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sources=(examples/*.emmy stdlib/*.emmy)
failures=0
for source in "${sources[@]}"; do
  golden=tests/golden/tensor/${source%.emmy}.tensor
  status=0
  "$emmy" build "$source" --emit tensor >"$out/stdout" 2>"$out/stderr" || status=$?
  if ((status != 0)) || [[ -s "$out/stderr" ]]; then
    echo "FAIL $source: exit code $status, stderr:"
    cat "$out/stderr"
    failures=$((failures + 1))
  elif ! diff -u --label "$golden" --label "emmy build $source --emit tensor" "$golden" "$out/stdout"; then
    echo "FAIL $source: the output differs from $golden"
    failures=$((failures + 1))
  fi
done
echo "$((${#sources[@]} - failures)) of ${#sources[@]} files compiled to their golden Tensor IR"
((failures == 0))
