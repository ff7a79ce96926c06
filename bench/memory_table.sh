#!/usr/bin/env bash
# The memory-bound kernels' table, on the CPU: for the row kernels of the standard library in each dtype
# and row length, for examples/gelu.emmy, an f16 elementwise chain and linalg.transpose,
# - from `emmy build --stats` at N rows chosen so that the data is at least 256 MiB: the static issue
#   time of the generated code against the time its bytes take at the memory bandwidth, and their ratio
#   (below 0.70, the kernel is memory-bound with room to spare);
# - from `emmy check --profile` at a few rows: the bytes requested over the least traffic, global sectors
#   per request against the ideal, and shared-memory wavefronts from bank conflicts.
# Several CUDA kernels of one instance are summed. A benchmark: it prints, it gates nothing.
#
#   bench/memory_table.sh [EMMY]          # default build/bin/emmy; about ten minutes
#   EMMY_ROW_FLAGS='-D LANES=256 -D VEC=4' bench/memory_table.sh   # the row kernels with other params
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
emmy=${1:-$root/build/bin/emmy}
cd "$root"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cat > "$scratch/chain.emmy" <<'EOF'
# bias, the exact gelu, a scale and a residual, in f16 with f32 arithmetic
kernel chain(x: f16[N, D], b: f16[D], r: f16[N, D]) -> (y: f16[N, D]) {
    y[n, d] = f16(gelu(f32(x[n, d]) + f32(b[d])) * 0.5 + f32(r[n, d]))
}
EOF

# stats FILE KERNEL SIZES...: "issue_us memory_us" summed over the instance's CUDA kernels.
stats() {
  local file=$1 kernel=$2
  shift 2
  "$emmy" build "$file" --kernel "$kernel" --stats "$@" -o "$scratch/out" 2>&1 |
    awk '/issue time .* against memory time/ {
           for (i = 1; i <= NF; ++i) {
             if ($i == "time" && $(i - 1) == "issue") { v = $(i + 1); u = $(i + 2); issue += (u == "ms" ? v * 1000 : u == "s" ? v * 1e6 : v) }
             if ($i == "time" && $(i - 1) == "memory") { v = $(i + 1); u = $(i + 2); memory += (u == "ms" ? v * 1000 : u == "s" ? v * 1e6 : v) }
           }
         }
         END { printf "%.1f %.1f\n", issue, memory }'
}

# profile FILE KERNEL SIZES...: "requested/least sectors/request ideal conflicts" over the instance's kernels.
profile() {
  local file=$1 kernel=$2
  shift 2
  "$emmy" check --profile "$file" --kernel "$kernel" "$@" 2>&1 |
    awk '/^      global:/ && !baseline {
           requests += $2; sectors += $4
           for (i = 1; i <= NF; ++i) {
             if ($i == "(ideal") { v = $(i + 1); sub(/\);?/, "", v); ideal += v * $2 }
             if ($i == "(requested") { v = $(i + 1); sub(/x/, "", v); requested = (v > requested ? v : requested) }
           }
         }
         /^      shared:/ && !baseline { for (i = 1; i <= NF; ++i) if ($i == "from") conflicts += $(i - 1) }
         /^  baseline/ { baseline = 1 }
         END { printf "%.2f %.2f %.2f %d\n", requested, sectors / (requests ? requests : 1), ideal / (requests ? requests : 1), conflicts }'
}

row() {  # row LABEL DTYPE D N FILE KERNEL STATS-SIZES -- PROFILE-SIZES
  local label=$1 dtype=$2 d=$3 n=$4 file=$5 kernel=$6
  shift 6
  local stat_sizes=() profile_sizes=()
  while [ "$1" != "--" ]; do stat_sizes+=("$1"); shift; done
  shift
  profile_sizes=("$@")
  read -r issue memory < <(stats "$file" "$kernel" "${stat_sizes[@]}")
  read -r requested per_request ideal conflicts < <(profile "$file" "$kernel" "${profile_sizes[@]}")
  awk -v l="$label" -v t="$dtype" -v d="$d" -v n="$n" -v i="$issue" -v m="$memory" -v q="$requested" \
      -v s="$per_request" -v e="$ideal" -v c="$conflicts" \
      'BEGIN { printf "| %s | %s | %s | %s | %.1f | %.1f | %.2f | %.2fx | %.2f (%.2f) | %d |\n", l, t, d, n, i, m, (m > 0 ? i / m : 0), q, s, e, c }'
}

echo "| kernel | dtype | D | N (--stats) | issue µs | memory µs | issue / memory | bytes / least (--profile) | sectors/request (ideal) | bank conflicts |"
echo "|---|---|---|---|---|---|---|---|---|---|"
bytes_of() { case $1 in f32) echo 4 ;; *) echo 2 ;; esac; }
for kernel in softmax log_softmax layernorm rmsnorm; do
  for dtype in f32 f16 bf16; do
    for d in 256 1024 4096 16384 65536; do
      n=$(( (256 * 1024 * 1024 + d * $(bytes_of $dtype) - 1) / (d * $(bytes_of $dtype)) ))
      # shellcheck disable=SC2086  # EMMY_ROW_FLAGS is words
      row "$kernel" "$dtype" "$d" "$n" stdlib/nn.emmy "$kernel<$dtype>" ${EMMY_ROW_FLAGS:-} --size N=$n --size D=$d -- \
        ${EMMY_ROW_FLAGS:-} --size N=4 --size D=$d
    done
  done
done
for d in 1024 4096; do
  n=$(( 256 * 1024 * 1024 / (d * 4) ))
  row gelu.emmy f32 "$d" "$n" examples/gelu.emmy bias_gelu --size N=$n --size D=$d -- --size N=8 --size D=$d
  n=$(( 256 * 1024 * 1024 / (d * 2) ))
  row "f16 chain" f16 "$d" "$n" "$scratch/chain.emmy" chain --size N=$n --size D=$d -- --size N=8 --size D=$d
done
for dtype in f32 f16 bf16; do
  m=$(( 256 * 1024 * 1024 / (8192 * $(bytes_of $dtype)) ))
  row transpose "$dtype" 8192 "$m" stdlib/linalg.emmy "transpose<$dtype>" --size M=$m --size N=8192 -- --size M=256 --size N=512
done
