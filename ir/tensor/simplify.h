// Index arithmetic made readable: i64 additions, subtractions, products, quotients, remainders and
// minima of constants folded, the identities x + 0, x - 0, x * 1, x * 0, x / 1, x % 1, 0 / x, 0 % x
// applied, x % a % b written x % b where b divides a, and (p + q / a) * a + q % a written p * a + q, so
// that the index expressions passes build from schedules print as a person would write them, and the flat
// index of axes fused into one loop is that loop's (the last holds for every a but 0, a size for which
// no such index is ever read: its tensor, or its fused loop, is empty).
#pragma once

#include <optional>
#include <string>

#include "ir/tensor/nodes.h"

namespace emmy::tensor {

ExprPtr simplifyIndex(const ExprPtr& expr);

// A condition on indices with its comparisons of constant indices (after simplifyIndex) and the `and`s and
// `or`s of constants folded: `(i - kh) % 1 == 0`, a transposed convolution's test that a tap meets an
// input element at stride 1, is true.
ExprPtr simplifyCondition(const ExprPtr& condition);

// The coefficient of `var` in the i64 expression `e` when `e` is affine in it (0 when it does not use
// it), else nothing.
std::optional<int64_t> coefficientOf(const Expr& e, const std::string& var);

// Is the i64 expression `e` affine in `var`, its coefficient possibly an expression of other names (a
// size): a sum of terms each free of `var` or one of them times `var`?
bool affineIn(const Expr& e, const std::string& var);

}  // namespace emmy::tensor
