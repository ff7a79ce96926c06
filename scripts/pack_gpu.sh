#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a GPU machine that has the CUDA toolkit, CMake, ninja and python3
# with PyTorch but none of our Debian packages and no network: an install of this build (emmy, the
# standard library, the GPU runtime files, the CMake package), the test and benchmark programs, all
# stripped, and the shared libraries they load that such a machine lacks (what `ldd` lists outside the C
# and C++ runtimes, e.g. fmt). The programs keep this checkout's path for the sources they read (tests'
# EMMY_SOURCE_DIR, the simulation header): run.sh links that path to the checkout it runs in.
#
# Usage: scripts/pack_gpu.sh [BUILD_DIR] [PACK_DIR]   (defaults: build, BUILD_DIR/gpu-pack; under 64 MiB)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
pack=${2:-$build/gpu-pack}

cmake --build "$build" -j "${EMMY_JOBS:-2}" --target emmy emmy_unit_tests emmy_bench_stdlib
rm -rf "$pack"
cmake --install "$build" --prefix "$pack" --strip >/dev/null
# The TorchScript importer links this machine's LibTorch (hundreds of MiB, CPU-only): the GPU tests import
# no model, and the GPU machine's PyTorch is another.
rm -f "$pack/bin/emmy-import"
for program in emmy_unit_tests emmy_bench_stdlib; do
  strip -o "$pack/bin/$program" "$build/bin/$program"
done

# The C library, the C++ runtime and the loader are on every machine that has a compiler for CUDA.
mkdir -p "$pack/lib"
for program in "$pack"/bin/*; do
  ldd "$program" | awk '/=> \// { print $3 }'
done | sort -u | while read -r library; do
  case "$(basename "$library")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libgcc_s.so.*|libstdc++.so.*|ld-linux*) ;;
    *) cp -L "$library" "$pack/lib/" ;;
  esac
done

echo "$root" >"$pack/source_dir"
size=$(du -sm "$pack" | cut -f1)
echo "packed $pack: ${size} MiB (libraries: $(cd "$pack/lib" && ls *.so* | tr "\n" " "))"
if (( size >= 64 )); then echo "the pack is over 64 MiB" >&2; exit 1; fi
