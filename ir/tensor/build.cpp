#include "ir/tensor/build.h"

#include "ir/tensor/scalar_ops.h"

namespace emmy::tensor {

ExprPtr castTo(ExprPtr expr, DType dtype) {
  if (expr->dtype == dtype) return expr;
  return std::make_shared<Cast>(dtype, std::move(expr));
}

ExprPtr immediate(DType dtype, double value) { return immediateOf(Value::ofFloat(dtype, value)); }

ExprPtr immediateOf(const Value& value) {
  if (value.dtype == DType::Bool) return std::make_shared<BoolImm>(value.i != 0);
  if (isFloat(value.dtype)) return std::make_shared<FloatImm>(value.dtype, value.f);
  return std::make_shared<IntImm>(value.dtype, value.i);
}

ExprPtr dimValue(const Dim& dim) {
  ExprPtr product;
  if (dim.factor != 1 || dim.sizes.empty()) product = std::make_shared<IntImm>(DType::I64, dim.factor);
  for (const std::string& size : dim.sizes) {
    ExprPtr factor = std::make_shared<SizeVar>(size);
    product = product ? std::make_shared<Binary>(DType::I64, BinaryOp::Mul, product, factor) : factor;
  }
  return product;
}

ExprPtr takenOrIdentity(ExprPtr taken, ExprPtr body, ReduceOp op, DType accumulator) {
  return std::make_shared<Select>(std::move(taken), std::move(body), immediateOf(reductionIdentity(op, accumulator)));
}

}  // namespace emmy::tensor
