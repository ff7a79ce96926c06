// The default schedule: the pass from Loop IR to Tile IR when a kernel has no schedule of its own.
#pragma once

#include "ir/loop/nodes.h"
#include "ir/tile/nodes.h"

namespace emmy::tile {

Program scheduleDefault(const loop::Program& program);

}  // namespace emmy::tile
