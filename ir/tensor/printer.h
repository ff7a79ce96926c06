// Stable, readable text of Tensor IR (`emmy build --emit tensor`); golden files compare against it.
#pragma once

#include <string>

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

std::string printExpr(const Expr& expr);
std::string printKernel(const Kernel& kernel);

}  // namespace emmy::tensor
