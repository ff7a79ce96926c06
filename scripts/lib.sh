# shellcheck shell=bash
# The set-up shared by scripts/setup.sh and scripts/test.sh: the Debian packages, the CUDA toolkit check
# and the main build in build/. Sourced by those scripts, never run on its own. Every step is idempotent.

EMMY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Parallel jobs for building and testing; every core by default.
EMMY_JOBS=${EMMY_JOBS:-$(nproc)}

# What the build and the tests need on Debian 12. The CUDA toolkit is not among them: it comes from
# NVIDIA's installer (see check_cuda_toolkit).
EMMY_DEBIAN_PACKAGES=(
  cmake ninja-build g++ clang libclang-rt-14-dev
  antlr4 libantlr4-runtime-dev libtorch-dev
  libfmt-dev catch2 libcli11-dev nlohmann-json3-dev libsqlite3-dev
)

# Each step with the seconds since the script started, so that a CI log shows where its time goes.
log() { printf '==> [%4d s] %s\n' "$SECONDS" "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

install_missing_packages() {
  command -v dpkg-query >/dev/null || die "dpkg-query not found: these scripts set up Debian 12"
  local package missing=()
  for package in "${EMMY_DEBIAN_PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" != "install ok installed" ]]; then
      missing+=("$package")
    fi
  done
  if ((${#missing[@]} == 0)); then
    log "Debian packages: all ${#EMMY_DEBIAN_PACKAGES[@]} installed"
    return
  fi
  local as_root=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "installing ${missing[*]} needs root (or sudo)"
    as_root=(sudo)
  fi
  log "Installing missing Debian packages: ${missing[*]}"
  "${as_root[@]}" apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

# Stops unless nvcc and NVRTC's library are present: nvcc on PATH, in $CUDA_HOME/bin or in
# /usr/local/cuda/bin, and libnvrtc.so* in one of the library folders of a toolkit. The nvcc on
# PATH may be a wrapper script (/usr/local/bin/nvcc running /usr/local/cuda-13.0/bin/nvcc), so the
# toolkit nvcc itself reports (its TOP) is asked before the folder above nvcc's own.
check_cuda_toolkit() {
  local nvcc="" place places=()
  if nvcc=$(command -v nvcc); then
    places+=("PATH")
  else
    places+=("PATH ($PATH)")
    for place in ${CUDA_HOME:+"$CUDA_HOME/bin"} ${CUDA_PATH:+"$CUDA_PATH/bin"} /usr/local/cuda/bin; do
      [[ " ${places[*]} " == *" $place "* ]] && continue
      places+=("$place")
      if [[ -x "$place/nvcc" ]]; then nvcc="$place/nvcc"; break; fi
    done
  fi
  [[ -n "$nvcc" ]] || die "the CUDA toolkit is missing: no nvcc found. Looked in: $(join_by '; ' "${places[@]}").
Install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) or set CUDA_HOME to its folder."

  local reported_top toolkit toolkits=() library_dir library_dirs=()
  reported_top=$("$nvcc" -dryrun -x cu /dev/null -c -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n 1)
  for toolkit in ${CUDA_HOME:+"$CUDA_HOME"} ${CUDA_PATH:+"$CUDA_PATH"} ${reported_top:+"$reported_top/.."} \
                 "$(dirname "$(dirname "$(readlink -f "$nvcc")")")" /usr/local/cuda; do
    toolkit=$(readlink -f "$toolkit" 2>/dev/null) || continue
    [[ " ${toolkits[*]} " == *" $toolkit "* ]] && continue
    toolkits+=("$toolkit")
    for library_dir in "$toolkit/lib64" "$toolkit/lib" "$toolkit/targets/$(uname -m)-linux/lib" \
                       "$toolkit/lib/$(uname -m)-linux-gnu"; do
      library_dirs+=("$library_dir")
      if compgen -G "$library_dir/libnvrtc.so*" >/dev/null; then
        log "CUDA toolkit: $nvcc, NVRTC in $library_dir"
        return
      fi
    done
  done
  die "the CUDA toolkit is incomplete: nvcc is at $nvcc but libnvrtc.so is missing. Looked in: $(join_by '; ' "${library_dirs[@]}").
Set CUDA_HOME to the folder of a toolkit that has NVRTC."
}

join_by() { local separator=$1 first=$2; shift 2; printf '%s' "$first" "${@/#/$separator}"; }

# configure_and_build BUILD_DIR [CMAKE_ARGUMENT...]
configure_and_build() {
  local build_dir=$1
  shift
  log "Configuring $build_dir"
  cmake -S "$EMMY_ROOT" -B "$EMMY_ROOT/$build_dir" -G Ninja "$@"
  log "Building $build_dir"
  cmake --build "$EMMY_ROOT/$build_dir" --parallel "$EMMY_JOBS"
}

# Everything both quick-start commands do before their own work. Line tables only (-g1): backtraces and
# profiles keep their lines, and the build takes a fifth less time (CI's 30 minutes on 2 cores).
prepare_main_build() {
  install_missing_packages
  check_cuda_toolkit
  configure_and_build build "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
}
