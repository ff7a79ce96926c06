// Short constructors for writing Tensor IR by hand in tests; each fills in the dtype nodes.h requires.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/tensor/nodes.h"

namespace emmy::tensor::build {

inline ExprPtr intImm(DType dtype, int64_t value) { return std::make_shared<IntImm>(dtype, value); }
inline ExprPtr i64(int64_t value) { return intImm(DType::I64, value); }
inline ExprPtr floatImm(DType dtype, double value) { return std::make_shared<FloatImm>(dtype, value); }
inline ExprPtr f32(double value) { return floatImm(DType::F32, value); }
inline ExprPtr boolImm(bool value) { return std::make_shared<BoolImm>(value); }
inline ExprPtr axis(std::string name) { return std::make_shared<AxisVar>(std::move(name)); }
inline ExprPtr size(std::string name) { return std::make_shared<SizeVar>(std::move(name)); }
inline ExprPtr scalar(DType dtype, std::string name) { return std::make_shared<ScalarParam>(dtype, std::move(name)); }

inline ExprPtr load(DType dtype, std::string tensor, std::vector<ExprPtr> indices, ExprPtr padValue = nullptr) {
  return std::make_shared<Load>(dtype, std::move(tensor), std::move(indices), std::move(padValue));
}

// Not gives bool; every other unary operation keeps its operand's dtype.
inline ExprPtr unary(UnaryOp op, ExprPtr operand) {
  DType dtype = op == UnaryOp::Not ? DType::Bool : operand->dtype;
  return std::make_shared<Unary>(dtype, op, std::move(operand));
}

// Comparisons, And and Or give bool; arithmetic keeps the left operand's dtype.
inline ExprPtr binary(BinaryOp op, ExprPtr lhs, ExprPtr rhs) {
  DType dtype = isComparison(op) || op == BinaryOp::And || op == BinaryOp::Or ? DType::Bool : lhs->dtype;
  return std::make_shared<Binary>(dtype, op, std::move(lhs), std::move(rhs));
}
inline ExprPtr add(ExprPtr lhs, ExprPtr rhs) { return binary(BinaryOp::Add, std::move(lhs), std::move(rhs)); }
inline ExprPtr sub(ExprPtr lhs, ExprPtr rhs) { return binary(BinaryOp::Sub, std::move(lhs), std::move(rhs)); }
inline ExprPtr mul(ExprPtr lhs, ExprPtr rhs) { return binary(BinaryOp::Mul, std::move(lhs), std::move(rhs)); }
inline ExprPtr div(ExprPtr lhs, ExprPtr rhs) { return binary(BinaryOp::Div, std::move(lhs), std::move(rhs)); }

inline ExprPtr select(ExprPtr condition, ExprPtr ifTrue, ExprPtr ifFalse) {
  return std::make_shared<Select>(std::move(condition), std::move(ifTrue), std::move(ifFalse));
}
inline ExprPtr cast(DType dtype, ExprPtr operand) { return std::make_shared<Cast>(dtype, std::move(operand)); }

inline Axis axisOf(std::string name, std::string extent) { return Axis{std::move(name), Dim::size(std::move(extent))}; }

inline Stage stage(std::string name, DType dtype, std::vector<Axis> axes, ExprPtr body) {
  return Stage{std::move(name), dtype, std::move(axes), std::nullopt, std::move(body), {}};
}
inline Stage reductionStage(std::string name, DType dtype, std::vector<Axis> axes, ReduceOp op,
                            std::vector<Axis> reductionAxes, ExprPtr body) {
  DType accumulator = body->dtype;
  return Stage{std::move(name), dtype, std::move(axes), Reduction{op, std::move(reductionAxes), accumulator},
               std::move(body), {}};
}

inline TensorParam tensorParam(std::string name, DType dtype, Shape shape) {
  return TensorParam{std::move(name), dtype, std::move(shape), {}};
}

}  // namespace emmy::tensor::build
