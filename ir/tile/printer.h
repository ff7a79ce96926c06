// Stable, readable text of Tile IR (`emmy build --emit tile`).
#pragma once

#include <string>

#include "ir/tile/nodes.h"

namespace emmy::tile {

std::string printProgram(const Program& program);

// The program's schedule as a `schedule NAME { ... }` block.
std::string printSchedule(const Program& program);

}  // namespace emmy::tile
