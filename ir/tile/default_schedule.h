// The default schedule: the pass from Loop IR to Tile IR when a kernel has no schedule of its own.
#pragma once

#include "ir/loop/nodes.h"
#include "ir/tile/nodes.h"

namespace emmy::tile {

Program scheduleDefault(const loop::Program& program);

// One nest with the default schedule (a nest that a kernel's schedule does not name), appending the
// directives it followed to `directives`.
TileNest scheduleNestByDefault(const loop::Program& program, const loop::LoopNest& nest,
                               std::vector<std::string>& directives);

}  // namespace emmy::tile
