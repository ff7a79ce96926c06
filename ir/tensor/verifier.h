// Checks the invariants listed in nodes.h. A violation is a bug in the pass that produced the IR.
#pragma once

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

// Throws InternalError describing the first violation.
void verifyKernel(const Kernel& kernel);

}  // namespace emmy::tensor
