// The pass from Tensor IR to Loop IR (see the file's comment for the fusion policy).
#pragma once

#include "ir/loop/nodes.h"

namespace emmy::loop {

Program lowerTensorToLoops(const tensor::Kernel& kernel);

}  // namespace emmy::loop
