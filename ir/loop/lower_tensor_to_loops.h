// The pass from Tensor IR to Loop IR (see the file's comment for the fusion policy).
#pragma once

#include <optional>
#include <string>

#include "ir/loop/nodes.h"

namespace emmy::loop {

Program lowerTensorToLoops(const tensor::Kernel& kernel);

// Why the output `output` cannot be stored beside the output `root`, in its nest (step 5 of the fusion
// policy), or nullopt when it can.
std::optional<std::string> whyNotStoredBeside(const tensor::Kernel& kernel, const std::string& output, const std::string& root);

}  // namespace emmy::loop
