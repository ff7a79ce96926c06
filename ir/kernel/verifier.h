// Checks Kernel IR: variables and buffers in scope, global buffers indexed flat, scalar locals
// unindexed, and barriers and shuffles outside any condition or loop that depends on the thread's own
// index (so that every thread of the block reaches them).
#pragma once

#include "ir/kernel/nodes.h"

namespace emmy::kernel {

// Throws InternalError describing the first violation.
void verifyProgram(const Program& program);

}  // namespace emmy::kernel
