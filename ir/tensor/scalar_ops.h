// The meaning of every scalar operation of Tensor IR on Values, in one place: each computes in double (or
// int64) and rounds (or wraps) once to the result's dtype, which gives f32 results identical to float
// arithmetic and f16/bf16 per-operation rounding as PyTorch's CPU kernels do. Never traps: integer
// division and remainder by zero give 0, overflow wraps, INT64_MIN / -1 wraps to INT64_MIN.
#pragma once

#include "ir/tensor/nodes.h"
#include "support/value.h"

namespace emmy::tensor {

// `dtype` is the node's result dtype; the operands are assumed verified (see nodes.h).
Value applyUnary(UnaryOp op, DType dtype, const Value& operand);
Value applyBinary(BinaryOp op, DType dtype, const Value& lhs, const Value& rhs);

// A reduction starts from its identity and folds each value in with its step: sum and mean add, prod
// multiplies, max and min take the larger or smaller (NaN propagates, like torch.maximum).
Value reductionIdentity(ReduceOp op, DType accumulator);
BinaryOp reductionStep(ReduceOp op);

}  // namespace emmy::tensor
