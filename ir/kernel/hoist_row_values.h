// The pass that computes once, before a loop, the functions and reciprocals of values the loop does not
// change (see the .cpp).
#pragma once

#include "ir/kernel/nodes.h"

namespace emmy::kernel {

Program hoistRowValues(const Program& program);

}  // namespace emmy::kernel
