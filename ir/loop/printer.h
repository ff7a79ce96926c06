// Stable, readable text of Loop IR (`emmy build --emit loop`): one line per statement, nesting by
// indentation. A `local` buffer lives until the end of the block it is declared in.
#pragma once

#include <string>

#include "ir/loop/nodes.h"

namespace emmy::loop {

std::string printProgram(const Program& program);

// The first lines every level below Tensor IR prints for a program: its name and its temporaries.
std::string printProgramHeader(const tensor::Kernel& source, const std::vector<Temporary>& temporaries);

}  // namespace emmy::loop
