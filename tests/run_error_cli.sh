#!/usr/bin/env bash
# Runs the real driver on every error case, from inside ERRORS_DIR as a user would:
# `emmy build NAME.emmy --emit tile` must exit with 1 and print exactly NAME.expected on stderr.
# Usage: run_error_cli.sh EMMY ERRORS_DIR
set -euo pipefail
emmy=$1
cd "$2"
export LC_ALL=C  # the glob's order

shopt -s nullglob
cases=(*.emmy)
if ((${#cases[@]} == 0)); then
  echo "no error cases (*.emmy) in $PWD"
  exit 1
fi

stderr_file=$(mktemp)
trap 'rm -f "$stderr_file"' EXIT
failures=0
for source in "${cases[@]}"; do
  expected=${source%.emmy}.expected
  status=0
  "$emmy" build "$source" --emit tile >/dev/null 2>"$stderr_file" || status=$?
  if ((status != 1)); then
    echo "FAIL $source: exit code $status, expected 1"
    failures=$((failures + 1))
  elif ! diff -u --label "$expected" --label "stderr of emmy build $source" "$expected" "$stderr_file"; then
    echo "FAIL $source: stderr differs from $expected"
    failures=$((failures + 1))
  fi
done
echo "$((${#cases[@]} - failures)) of ${#cases[@]} error cases passed"
((failures == 0))
