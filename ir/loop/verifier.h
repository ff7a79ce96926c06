// Checks that a Loop IR program is well formed: every name a statement uses is in scope (loop variables
// around it, locals declared before it in its block, the kernel's tensors, sizes and scalars), stores
// match their buffer's rank and dtype, and every output is stored by the root of exactly one kernel.
#pragma once

#include "ir/loop/nodes.h"

namespace emmy::loop {

// Throws InternalError describing the first violation.
void verifyProgram(const Program& program);

}  // namespace emmy::loop
