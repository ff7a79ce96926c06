// The pass that places __syncthreads() in Kernel IR (see the file's comment for the rules).
#pragma once

#include "ir/kernel/nodes.h"

namespace emmy::kernel {

Program placeBarriers(const Program& program);

}  // namespace emmy::kernel
