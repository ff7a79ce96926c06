// Index arithmetic made readable: i64 additions, subtractions, products, quotients, remainders and
// minima of constants folded, and the identities x + 0, x - 0, x * 1, x * 0, x / 1, x % 1, 0 / x, 0 % x
// applied, so that the index expressions passes build from schedules print as a person would write them.
#pragma once

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

ExprPtr simplifyIndex(const ExprPtr& expr);

}  // namespace emmy::tensor
