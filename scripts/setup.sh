#!/usr/bin/env bash
# Quick start, first command: installs the Debian packages that are missing, checks the CUDA toolkit,
# builds build/ and compiles an example with the freshly built `emmy`. Safe to run again.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$EMMY_ROOT"

prepare_main_build

log "Compiling examples/softmax.emmy"
# The main job. When the lowering to CUDA arrives, this line becomes `... -o build/out` (CUDA output).
build/bin/emmy build examples/softmax.emmy --emit tensor
