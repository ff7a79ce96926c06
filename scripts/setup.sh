#!/usr/bin/env bash
# Quick start, first command: installs the Debian packages that are missing, checks the CUDA toolkit,
# builds build/ and compiles an example with the freshly built `emmy`. Safe to run again.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$EMMY_ROOT"

prepare_main_build

log "Compiling examples/softmax.emmy"
# The main job: CUDA for the softmax example (build/out/softmax.cu and softmax.h), then its check on the CPU.
build/bin/emmy build examples/softmax.emmy -o build/out
echo "wrote build/out/softmax.cu and build/out/softmax.h"
build/bin/emmy check examples/softmax.emmy --size N=37 --size D=1000
