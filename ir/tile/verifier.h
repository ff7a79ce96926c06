// Checks the structure Tile IR promises Kernel IR: a kernel's outermost loop, and only it, is bound to
// blocks or the grid; thread-strided loops do not nest; a cross-thread combine or a single-thread
// section sits at block level (where every thread of the block runs it, so barriers are reached by all);
// every variable and buffer is in scope.
#pragma once

#include "ir/tile/nodes.h"

namespace emmy::tile {

// Throws InternalError describing the first violation.
void verifyProgram(const Program& program);

}  // namespace emmy::tile
