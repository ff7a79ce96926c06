#include "ir/kernel/nodes.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace emmy::kernel {

namespace {

constexpr std::array<const char*, 4> kIndexNames = {"threadIdx", "blockIdx", "blockDim", "gridDim"};

ExprPtr hardwareIndex(const char* name, int dimension) {
  return std::make_shared<tensor::AxisVar>(fmt::format("{}.{}", name, "xyz"[dimension]));
}

bool named(const std::string& name, const char* prefix) {
  return name.size() == std::strlen(prefix) + 2 && name.compare(0, std::strlen(prefix), prefix) == 0 &&
         name[name.size() - 2] == '.' && name.back() >= 'x' && name.back() <= 'z';
}

}  // namespace

bool isHardwareIndex(const std::string& name) {
  return std::any_of(kIndexNames.begin(), kIndexNames.end(), [&](const char* prefix) { return named(name, prefix); });
}

bool isThreadIndex(const std::string& name) { return named(name, kIndexNames[0]); }

bool Function::flatGrid() const {
  auto one = [](const ExprPtr& e) {
    const auto* immediate = e->as<tensor::IntImm>();
    return immediate && immediate->value == 1;
  };
  return one(gridBlocks[1]) && one(gridBlocks[2]);
}

ExprPtr threadIndex(int dimension) { return hardwareIndex(kIndexNames[0], dimension); }
ExprPtr blockIndex(int dimension) { return hardwareIndex(kIndexNames[1], dimension); }
ExprPtr blockSize(int dimension) { return hardwareIndex(kIndexNames[2], dimension); }
ExprPtr gridSize(int dimension) { return hardwareIndex(kIndexNames[3], dimension); }

}  // namespace emmy::kernel
