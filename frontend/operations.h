// Elementwise operations on TensorValues: NumPy broadcasting, PyTorch type promotion, literal folding.
// Index form uses them on rank-0 values, whole-tensor form on values of any rank, so both forms share
// one set of typing rules.
#pragma once

#include <optional>
#include <string>

#include "frontend/values.h"
#include "ir/tensor/nodes.h"
#include "support/diagnostics.h"

namespace emmy {

// Reports an error and abandons the statement being elaborated (see CompilationAborted).
[[noreturn]] void fail(Diagnostics& diagnostics, const SourceLoc& loc, std::string message);

// The shape two operands broadcast to (trailing dimensions align; a dimension of literal size 1 or an
// equal one); an error at `loc` otherwise.
tensor::Shape broadcastShapes(const tensor::Shape& a, const tensor::Shape& b, const SourceLoc& loc,
                              Diagnostics& diagnostics);

// `value` seen with shape `target` (which it broadcasts to).
TensorValue broadcastTo(const TensorValue& value, const tensor::Shape& target);

// a OP b for arithmetic (+ - * / % min max pow), comparisons and `and`/`or`.
TensorValue binaryOp(tensor::BinaryOp op, const TensorValue& a, const TensorValue& b, const SourceLoc& loc,
                     Diagnostics& diagnostics);

// Negation, `not`, and the builtin functions of one argument.
TensorValue unaryOp(tensor::UnaryOp op, const TensorValue& a, const SourceLoc& loc, Diagnostics& diagnostics);

// where(condition, ifTrue, ifFalse): only the taken branch is evaluated.
TensorValue selectOp(const TensorValue& condition, const TensorValue& ifTrue, const TensorValue& ifFalse,
                     const SourceLoc& loc, Diagnostics& diagnostics);

TensorValue castOp(DType dtype, const TensorValue& value, const SourceLoc& loc);

// argmax/argmin's candidate at each element: `position` where `value` reaches `best` (or is NaN, which max
// and min propagate), else the largest i64, so that the least candidate is the first extreme's position.
TensorValue extremeCandidate(const TensorValue& value, const TensorValue& best, const TensorValue& position,
                             const SourceLoc& loc, Diagnostics& diagnostics);

// The builtin function of one argument named `name` (exp, relu, ...), if there is one.
std::optional<tensor::UnaryOp> builtinUnary(const std::string& name);

}  // namespace emmy
