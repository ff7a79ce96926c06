#!/usr/bin/env bash
# CMake integration: installs this build to a scratch prefix, then configures and builds examples/app
# with nvcc through find_package(Emmy) and emmy_add_kernels (compile and link; running needs a GPU), and
# checks that changing the .emmy file makes the build run emmy again.
# Usage: run_app_cmake.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cp -r "$source/examples/app" "$scratch/app"
cp "$source/examples/softmax.emmy" "$scratch/softmax.emmy"
cmake -S "$scratch/app" -B "$scratch/build" -G Ninja -DEmmy_DIR="$scratch/prefix/lib/cmake/emmy" >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/build" >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }
[[ -x "$scratch/build/softmax_app" ]] || { echo "no softmax_app was built"; exit 1; }
grep -q "Emmy: .*softmax.emmy" "$scratch/build.log" || { echo "emmy did not run"; cat "$scratch/build.log"; exit 1; }

# A change to the kernel's source runs emmy again; a build with nothing changed does not.
cmake --build "$scratch/build" >"$scratch/again.log" 2>&1
if grep -q "Emmy:" "$scratch/again.log"; then echo "emmy ran again with nothing changed"; exit 1; fi
touch "$scratch/softmax.emmy"
cmake --build "$scratch/build" >"$scratch/changed.log" 2>&1
grep -q "Emmy:" "$scratch/changed.log" || { echo "changing softmax.emmy did not run emmy"; exit 1; }
echo "examples/app configured and built with the installed emmy"
