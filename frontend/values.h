// Typed values during elaboration, shared by index form (rank-0 values whose expressions use the
// statement's indices) and whole-tensor form (values of any rank, built lazily as index maps so that
// views and elementwise chains become one stage body).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/tensor/build.h"
#include "ir/tensor/nodes.h"
#include "support/source.h"

namespace emmy {

// A number written in the source (or folded from such numbers), not yet given a dtype. It takes the
// type of what it is combined with: an integer literal the other operand's type; a float literal the
// other operand's type if that is a float, else f32. Alone, an integer is i64 and a float f32.
struct Literal {
  bool isInteger = false;
  double value = 0;

  DType defaultType() const { return isInteger ? DType::I64 : DType::F32; }
  // The dtype it takes next to an operand of type `other`.
  DType typeBeside(DType other) const;
};

// A reduction not yet stored: becomes a stage of its own, either the statement's (when it is the whole
// right-hand side) or a hoisted one (when something consumes it).
struct PendingReduction {
  tensor::ReduceOp op;
  std::vector<tensor::Dim> extents;  // of the reduction axes r0, r1, ...
  DType accumulator;
  // The body at output index `index` and reduction index `reductionIndex`, in the accumulator dtype.
  std::function<tensor::ExprPtr(const std::vector<tensor::ExprPtr>& index,
                                const std::vector<tensor::ExprPtr>& reductionIndex)>
      body;
  std::string hint;  // names a hoisted stage: "sum", "max", "matmul"
};

// A tensor-valued expression. Exactly one of `literal`, `reduction` and `element` describes it.
struct TensorValue {
  DType dtype = DType::F32;  // for a literal: its default type
  tensor::Shape shape;
  std::optional<Literal> literal;
  std::shared_ptr<const PendingReduction> reduction;
  std::function<tensor::ExprPtr(const std::vector<tensor::ExprPtr>& index)> element;
  SourceLoc loc;
  std::string tensorName;  // set when the value is exactly an input or stage, read whole

  int rank() const { return static_cast<int>(shape.size()); }
  bool isScalar() const { return shape.empty(); }

  // The element at `index`, converted to `dtype` (literals become immediates of that type). Must not be
  // called on a pending reduction: realize it first.
  tensor::ExprPtr at(const std::vector<tensor::ExprPtr>& index, DType as) const;
  tensor::ExprPtr at(const std::vector<tensor::ExprPtr>& index) const { return at(index, dtype); }

  static TensorValue ofLiteral(Literal literal, SourceLoc loc);
  static TensorValue ofScalar(tensor::ExprPtr expr, SourceLoc loc);
  // Every element of `tensor` (an input or a stage) with shape `shape`.
  static TensorValue ofTensor(const std::string& tensor, DType dtype, tensor::Shape shape, SourceLoc loc);
};

}  // namespace emmy
