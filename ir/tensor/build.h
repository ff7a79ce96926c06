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
// The Dim of floor(numerator / denominator) in `kernel` (the denominator not zero): a constant or a plain
// Dim where the quotient is one, else the derived size of that definition, added to `kernel.derivedSizes`
// unless an equal one is there.
Dim derivedDim(Kernel& kernel, const SizePolynomial& numerator, const SizePolynomial& denominator);
// floor(numerator / denominator) as a polynomial to compute with: exact where it divides, else a
// derived size of its own (floor((H - 3) / 2) + 1 is no quotient).
SizePolynomial quotientPolynomial(Kernel& kernel, const SizePolynomial& numerator, const SizePolynomial& denominator);
// min(a, b) or max(a, b) (`kind` Minimum or Maximum) as a polynomial to compute with: a number where both
// are, either where they are equal, else a derived size of its own, added unless an equal one is there.
SizePolynomial extremePolynomial(Kernel& kernel, DerivedSize::Kind kind, const SizePolynomial& a, const SizePolynomial& b);
// The polynomial a Dim stands for, a derived size that is a polynomial replaced by its definition (so that
// sums simplify: (H - 2) + 2 is H); a quotient stays a size of its own.
SizePolynomial polynomialOf(const Kernel& kernel, const Dim& dim);
// floor(a / b) for b != 0.
int64_t floorDivide(int64_t a, int64_t b);
// A reduction's body where `taken` holds, else the identity of `op` in `accumulator`: a term that adds
// nothing (an index past its bound, a running reduction's elements after its own).
ExprPtr takenOrIdentity(ExprPtr taken, ExprPtr body, ReduceOp op, DType accumulator);

}  // namespace emmy::tensor
