// Stable, readable text of Kernel IR (`emmy build --emit kernel`): per-thread pseudo-code.
#pragma once

#include <string>

#include "ir/kernel/nodes.h"

namespace emmy::kernel {

std::string printProgram(const Program& program);

}  // namespace emmy::kernel
