#!/usr/bin/env bash
# emmy tune through the real driver, without a GPU: --cost-model ranks examples/matmul.emmy's candidates by
# the static model, a rerun resumes from the database, --report lists the records, emmy build uses the
# best of them (unless --no-tuned; -D wins), a called kernel's params are searched, a kernel without a
# schedule is tuned over the default policy's params, and without --cost-model emmy tune exits 3 with "no
# CUDA device found" (skipped where nvidia-smi sees a GPU).
# Usage: run_tune_cli.sh EMMY SOURCE_DIR
set -euo pipefail
emmy=$1
source "$(dirname "$0")/cli_expect.sh"
cd "$2"
export EMMY_TUNING_DB="$out/tuning.db"

small=(--size M=1024 --size N=1024 --size K=1024)
large=(--size M=4096 --size N=4096 --size K=4096)
expect 0 'ranked by the static model for sm_90 .*estimates, not timings' -- "$emmy" tune examples/matmul.emmy --cost-model "${small[@]}"
grep -Eq '^54 of 54 candidates \(exhaustive\): 54 ok; 54 measured now, 0 from ' "$out/output" || fail "the first run: $(cat "$out/output")"
grep -Eq '^  1 +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +ok ' "$out/output" || fail "no ranked table: $(cat "$out/output")"
grep -Eq '^matmul \[54/54\] ' "$out/output" || fail "no progress line per candidate"
expect 0 '54 of 54 candidates \(exhaustive\): 54 ok; 0 measured now, 54 from' -- \
  "$emmy" tune examples/matmul.emmy --cost-model "${small[@]}"
expect 0 'matmul \(K=1024 M=1024 N=1024\) on static model \(H200-class\), sm_90, from examples/matmul.emmy' -- \
  "$emmy" tune --report examples/matmul.emmy
expect 0 'no tuning records' -- "$emmy" tune --report examples/softmax.emmy

# emmy build: the best record, said on stderr; -D wins; --no-tuned ignores them.
best=$("$emmy" tune --report | sed -n '2p' | awk '{print $1, $2, $3, $4}')
bm=$(echo "$best" | tr ' ' '\n' | sed -n 's/^BM=//p')
expect 0 "using tuned parameters $best for matmul \\(K=1024 M=1024 N=1024, static model \\(H200-class\\), sm_90\\)" -- \
  "$emmy" build examples/matmul.emmy --emit schedule
grep -q "tile C (i, j) by ($bm, " "$out/output" || fail "the schedule does not use BM=$bm: $(cat "$out/output")"
expect 0 'tile C \(i, j\) by \(32, ' -- "$emmy" build examples/matmul.emmy --emit schedule -D BM=32
expect 0 'tile C \(i, j\) by \(64, 64\)' -- "$emmy" build examples/matmul.emmy --emit schedule --no-tuned
grep -q "using tuned" "$out/output" && fail "--no-tuned still uses tuned parameters"

# Two size sets: --size picks one, without it nothing is used and the note says why.
expect 0 'sampled and refined' -- "$emmy" tune examples/matmul.emmy --cost-model "${large[@]}" --budget 8 --seed 3
expect 0 'has tuned parameters for several sizes or devices' -- "$emmy" build examples/matmul.emmy --emit schedule
expect 0 'using tuned parameters .* \(K=4096 M=4096 N=4096' -- "$emmy" build examples/matmul.emmy --emit schedule "${large[@]}"

expect 2 'needs every size: add --size M=\.\.\.' -- "$emmy" tune examples/matmul.emmy --cost-model --size N=8 --size K=8
# A kernel without a schedule: the default policy's params (issue 13).
expect 0 'best: y_index_bits=(32|64) y_threads=[0-9]+ ' -- "$emmy" tune examples/softmax.emmy --cost-model --size N=4096 --size D=4096
expect 0 'using tuned parameters y_index_bits=(32|64) y_threads=[0-9]+ y_vector=[0-9]+ for softmax' -- "$emmy" build examples/softmax.emmy --emit schedule --size N=4096 --size D=4096
# (its schedule gives the index width, which the policy would leave to tune)
printf 'kernel one(x: f32[N]) -> (y: f32[N]) {\n    y[i] = x[i]\n}\nschedule one {\n    bind y.i to block.x\n    index_bits y 32\n}\n' >"$out/one.emmy"
expect 2 'nothing to tune in .*one.emmy' -- "$emmy" tune "$out/one.emmy" --cost-model --size N=8
expect 2 'a FILE is required' -- "$emmy" tune --cost-model

# A called kernel's params are the caller's: a kernel calling nn.softmax searches LANES and VEC.
printf 'import nn\nkernel rows(x: f32[N, D]) -> (y: f32[N, D]) {\n    y = nn.softmax(x)\n}\n' >"$out/rows.emmy"
expect 0 'best: LANES=[0-9]+ VEC=[0-9]+' -- "$emmy" tune "$out/rows.emmy" --cost-model --size N=64 --size D=1000

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP the exit-3 case: a CUDA device is present"
else
  expect 3 'no CUDA device found \(.+\)' -- "$emmy" tune examples/matmul.emmy "${small[@]}"
fi

# A database emmy cannot use: a corrupt file is a warning for emmy build, which builds with the defaults, and
# an error for --report and tune; another program's SQLite file is refused and left as it is.
printf 'not a database %.0s' {1..300} >"$out/corrupt.db"
expect 0 'warning: the tuning database .*corrupt\.db: file is not a database; building with the default parameters' -- \
  "$emmy" build examples/matmul.emmy --emit schedule --db "$out/corrupt.db"
grep -q 'tile C (i, j) by (64, 64)' "$out/output" || fail "the build with a corrupt database: $(cat "$out/output")"
expect 2 'corrupt\.db: file is not a database' -- "$emmy" tune --report --db "$out/corrupt.db"
expect 2 'corrupt\.db: file is not a database' -- "$emmy" tune examples/matmul.emmy --cost-model "${small[@]}" --db "$out/corrupt.db"
if python3 -c 'import sqlite3' 2>/dev/null; then
  python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("CREATE TABLE people (name TEXT)"); c.commit()' \
    "$out/other.db"
  cp "$out/other.db" "$out/other.orig"
  expect 2 'other\.db is not an Emmy tuning database \(it holds the tables people\); it is left as it is' -- \
    "$emmy" tune examples/matmul.emmy --cost-model "${small[@]}" --db "$out/other.db"
  cmp -s "$out/other.db" "$out/other.orig" || fail "emmy tune changed another program's database"
fi

# A database on a read-only disk (a tmpfs remounted read-only; skipped where mounting is not permitted).
mkdir "$out/readonly"
if mount -t tmpfs -o size=1m tmpfs "$out/readonly" 2>/dev/null; then
  trap 'umount "$out/readonly"; rm -rf "$out"' EXIT
  cp "$EMMY_TUNING_DB" "$out/readonly/tuning.db"
  mount -o remount,ro "$out/readonly"
  expect 0 'matmul \(K=1024 M=1024 N=1024\) on static model' -- "$emmy" tune --report --db "$out/readonly/tuning.db"
  expect 0 'using tuned parameters .* \(K=4096 M=4096 N=4096' -- \
    "$emmy" build examples/matmul.emmy --emit schedule "${large[@]}" --db "$out/readonly/tuning.db"
else
  echo "SKIP the read-only database: mounting a tmpfs is not permitted here"
fi

echo "tune command lines: $failures failure(s)"
((failures == 0))
