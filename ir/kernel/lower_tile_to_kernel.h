// The pass from Tile IR to Kernel IR.
#pragma once

#include "ir/kernel/nodes.h"
#include "ir/tile/nodes.h"

namespace emmy::kernel {

Program lowerTileToKernel(const tile::Program& program);

}  // namespace emmy::kernel
