// Small constructors of Tensor IR expressions shared by the frontend and the lowering passes.
#pragma once

#include "ir/tensor/nodes.h"
#include "support/value.h"

namespace emmy::tensor {

// `expr` converted to `dtype`; no node when it already has that type.
ExprPtr castTo(ExprPtr expr, DType dtype);
// An immediate of `dtype` holding `value` (bool: non-zero; integers: truncated).
ExprPtr immediate(DType dtype, double value);
// An immediate holding exactly `value`.
ExprPtr immediateOf(const Value& value);
// The product of a Dim's factor and size names, as an i64 expression.
ExprPtr dimValue(const Dim& dim);
// A reduction's body where `taken` holds, else the identity of `op` in `accumulator`: a term that adds
// nothing (an index past its bound, a running reduction's elements after its own).
ExprPtr takenOrIdentity(ExprPtr taken, ExprPtr body, ReduceOp op, DType accumulator);

}  // namespace emmy::tensor
