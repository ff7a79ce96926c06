// The pass that places __syncthreads() in Kernel IR (see the file's comment for the rules).
#pragma once

#include <optional>

#include "ir/kernel/nodes.h"

namespace emmy::kernel {

// `dropBarrier`, for debugging and for testing the simulation's race detection: leaves out that barrier
// (0 is the first), counting every __syncthreads() of the placed program in the order of the generated
// code, kernel after kernel. A UsageError if the program has no such barrier.
Program placeBarriers(const Program& program, std::optional<int> dropBarrier = std::nullopt);

}  // namespace emmy::kernel
