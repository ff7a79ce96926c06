// The pass that takes the bounds tests out of loops whose every iteration is guarded (see the .cpp).
#pragma once

#include "ir/kernel/nodes.h"

namespace emmy::kernel {

Program narrowGuardedLoops(const Program& program);

}  // namespace emmy::kernel
