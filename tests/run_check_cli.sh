#!/usr/bin/env bash
# emmy check's command line through the real driver (spec section 6): --scalar (repeatable, before the
# scalar's .npy file and its default; its errors are usage errors, exit 2) for check, run, bench and
# tune; and a file with a helper kernel whose sizes are not given checks the others and says which it
# skipped.
# Usage: run_check_cli.sh EMMY
set -euo pipefail
emmy=$1
source "$(dirname "$0")/cli_expect.sh"
cd "$out"
export EMMY_TUNING_DB="$out/tuning.db"

cat >scale.emmy <<'SOURCE'
kernel scale(x: f32[N], s: f32, n: i32, flip: bool, bias: f32 = 1.0) -> (y: f32[N]) {
    y[i] = where(flip, -x[i], x[i]) * s + f32(n) + bias
}
SOURCE
sizes=(--size N=8)

# A scalar without a default needs a value; --scalar gives it without any --inputs files.
expect 2 'kernel scale: scalar s has no default: give it with --scalar s=VALUE$' -- "$emmy" check scale.emmy "${sizes[@]}"
expect 0 '^  y: .*: ok$' -- "$emmy" check scale.emmy "${sizes[@]}" --scalar s=0.5 --scalar n=-3 --scalar flip=true
expect 0 '^  y: .*: ok$' -- "$emmy" check scale.emmy "${sizes[@]}" --scalar s=inf --scalar n=0 --scalar flip=0 --scalar bias=2

# Errors: an unknown name, a value that does not parse or fit, a name given twice, a malformed option.
scalars=(--scalar s=0.5 --scalar n=2 --scalar flip=false)
expect 2 "^emmy: error: --scalar sc: no kernel checked has a scalar named sc \\(scalars: bias, flip, n, s\\); did you mean 's'\\?$" -- \
  "$emmy" check scale.emmy "${sizes[@]}" "${scalars[@]}" --scalar sc=1
expect 2 '^emmy: error: --scalar s=half: s is f32: write a number \(or inf, nan\)$' -- \
  "$emmy" check scale.emmy "${sizes[@]}" --scalar s=half --scalar n=2 --scalar flip=false
expect 2 '^emmy: error: --scalar s=1e39: does not fit f32 \(the largest is 3.40282e\+38\)$' -- \
  "$emmy" check scale.emmy "${sizes[@]}" --scalar s=1e39 --scalar n=2 --scalar flip=false
expect 2 '^emmy: error: --scalar n=2.5: n is i32: write an integer$' -- \
  "$emmy" check scale.emmy "${sizes[@]}" --scalar s=1 --scalar n=2.5 --scalar flip=false
expect 2 '^emmy: error: --scalar n=3000000000: does not fit i32 \(-2147483648 to 2147483647\)$' -- \
  "$emmy" check scale.emmy "${sizes[@]}" --scalar s=1 --scalar n=3000000000 --scalar flip=false
expect 2 '^emmy: error: --scalar flip=yes: flip is bool: write true or false$' -- \
  "$emmy" check scale.emmy "${sizes[@]}" --scalar s=1 --scalar n=1 --scalar flip=yes
expect 2 '^emmy: error: --scalar s is given twice$' -- "$emmy" check scale.emmy "${sizes[@]}" "${scalars[@]}" --scalar s=2
expect 2 "^emmy: error: --scalar 's': expected NAME=VALUE, as eps=1e-5$" -- "$emmy" check scale.emmy "${sizes[@]}" --scalar s

# The precedence of --scalar, DIR/NAME.npy and the default: simulator_tests.cpp ("emmy check's scalars").

# run, bench and tune take --scalar too (without a GPU only tune --cost-model gets as far as using it).
expect 2 "^emmy: error: --scalar 'n': expected NAME=VALUE" -- "$emmy" run scale.emmy "${sizes[@]}" --scalar n
expect 2 "^emmy: error: --scalar 'n': expected NAME=VALUE" -- "$emmy" bench scale.emmy "${sizes[@]}" --scalar n
cat >tuned.emmy <<'SOURCE'
kernel tuned(x: f32[N], s: f32) -> (y: f32[N]) {
    y[i] = x[i] * s
}
schedule tuned {
    param T in [64, 128] = 128
    split y.i by T -> (b, t)
    bind y.b to block.x
    bind y.t to thread.x
}
SOURCE
# (T, and the index width the default policy leaves to tune: 4 candidates)
expect 0 '4 of 4 candidates' -- "$emmy" tune tuned.emmy --cost-model "${sizes[@]}" --scalar s=2
expect 2 "^emmy: error: --scalar zz: no kernel checked has a scalar named zz \\(scalars: s\\)$" -- \
  "$emmy" tune tuned.emmy --cost-model "${sizes[@]}" --scalar zz=2

# A helper kernel, called by another, has sizes of its own: without --kernel it is skipped, with a note.
cat >helper.emmy <<'SOURCE'
kernel double_rows(a: f32[M, K]) -> (b: f32[M, K]) {
    b[m, k] = 2 * a[m, k]
}
kernel user(x: f32[N, D]) -> (y: f32[N, D]) {
    y = double_rows(x)
}
SOURCE
expect 0 '^skipped kernel double_rows: size M is not given: add --size M=VALUE, or read the inputs from files with --inputs DIR$' -- \
  "$emmy" check helper.emmy --size N=3 --size D=5
grep -q '^user (N=3, D=5)$' "$out/output" || fail "user is not checked: $(cat "$out/output")"
expect 0 '^double_rows \(M=2, K=2\)$' -- "$emmy" check helper.emmy --size N=3 --size D=5 --size M=2 --size K=2
# None can be checked: a usage error that says why for each.
expect 2 '^  kernel user: size D is not given' -- "$emmy" check helper.emmy --size N=3 --size M=2
grep -q '^emmy: error: no kernel can be checked:$' "$out/output" || fail "no summary line: $(cat "$out/output")"
# --kernel names the kernel to check: its missing size is the error, as before.
expect 2 '^emmy: error: kernel double_rows: size K is not given' -- "$emmy" check helper.emmy --kernel double_rows --size M=2

((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo "all check command-line tests passed"
