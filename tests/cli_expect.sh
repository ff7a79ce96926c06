# Sourced by the command-line test scripts: a scratch folder $out (removed on exit), a failure count, and
# `expect`. The script sets `set -euo pipefail` itself.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# expect CODE PATTERN -- COMMAND...: the exit code, and PATTERN (grep -E) in stdout and stderr together.
expect() {
  local code=$1 pattern=$2 status=0
  shift 3
  "$@" >"$out/output" 2>&1 || status=$?
  if ((status != code)); then fail "$*: exit code $status, expected $code"; cat "$out/output"; return; fi
  grep -Eq -- "$pattern" "$out/output" || { fail "$*: no '$pattern' in:"; cat "$out/output"; }
}
