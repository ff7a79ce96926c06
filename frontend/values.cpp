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

}  // namespace emmy
