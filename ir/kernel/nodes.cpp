#include "ir/kernel/nodes.h"

#include <algorithm>

namespace emmy::kernel {

bool isHardwareIndex(const std::string& name) {
  return std::find(kHardwareIndices.begin(), kHardwareIndices.end(), name) != kHardwareIndices.end();
}

ExprPtr threadIndex() { return std::make_shared<tensor::AxisVar>(kHardwareIndices[0]); }
ExprPtr blockIndex() { return std::make_shared<tensor::AxisVar>(kHardwareIndices[1]); }
ExprPtr blockSize() { return std::make_shared<tensor::AxisVar>(kHardwareIndices[2]); }
ExprPtr gridSize() { return std::make_shared<tensor::AxisVar>(kHardwareIndices[3]); }

}  // namespace emmy::kernel
