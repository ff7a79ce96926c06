#!/usr/bin/env bash
# Runs the frontend fuzzer for SECONDS on a fresh copy of the seed corpus, inside WORK_DIR, so that
# neither the seeds nor the source tree change. A crashing input is left in WORK_DIR/artifacts/.
# Usage: run_fuzz.sh FUZZER SEED_DIR WORK_DIR DICTIONARY SECONDS
set -euo pipefail
fuzzer=$1 seed_dir=$2 work_dir=$3 dictionary=$4 seconds=$5

rm -rf "$work_dir"
mkdir -p "$work_dir/corpus" "$work_dir/artifacts"
cp -R "$seed_dir/." "$work_dir/corpus/"
exec "$fuzzer" "$work_dir/corpus" -dict="$dictionary" -max_total_time="$seconds" -timeout=30 \
  -rss_limit_mb=2048 -artifact_prefix="$work_dir/artifacts/" -print_final_stats=1 -print_funcs=0
