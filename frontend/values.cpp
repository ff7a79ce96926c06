#include "frontend/values.h"

#include <cmath>

#include "support/diagnostics.h"
#include "support/value.h"

namespace emmy {

using namespace tensor;

DType Literal::typeBeside(DType other) const {
  if (isInteger) return other == DType::Bool ? DType::I64 : other;
  return isFloat(other) ? other : DType::F32;
}

ExprPtr TensorValue::at(const std::vector<ExprPtr>& index, DType as) const {
  if (literal) return immediate(as, literal->value);
  EMMY_INTERNAL_ASSERT(element != nullptr, "element of a pending reduction requested");
  return castTo(element(index), as);
}

TensorValue TensorValue::ofLiteral(Literal literal, SourceLoc loc) {
  TensorValue v;
  v.dtype = literal.defaultType();
  v.literal = literal;
  v.loc = std::move(loc);
  return v;
}

TensorValue TensorValue::ofScalar(ExprPtr expr, SourceLoc loc) {
  TensorValue v;
  v.dtype = expr->dtype;
  v.element = [expr](const std::vector<ExprPtr>&) { return expr; };
  v.loc = std::move(loc);
  return v;
}

TensorValue TensorValue::ofTensor(const std::string& tensor, DType dtype, Shape shape, SourceLoc loc) {
  TensorValue v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.element = [tensor, dtype](const std::vector<ExprPtr>& index) {
    return std::make_shared<Load>(dtype, tensor, index);
  };
  v.loc = std::move(loc);
  v.tensorName = tensor;
  return v;
}

ExprPtr castTo(ExprPtr expr, DType dtype) {
  if (expr->dtype == dtype) return expr;
  return std::make_shared<Cast>(dtype, std::move(expr));
}

ExprPtr immediate(DType dtype, double value) {
  if (dtype == DType::Bool) return std::make_shared<BoolImm>(value != 0);
  if (isFloat(dtype)) return std::make_shared<FloatImm>(dtype, value);
  return std::make_shared<IntImm>(dtype, Value::ofFloat(dtype, value).i);
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

}  // namespace emmy
