#include "ir/tensor/build.h"

#include <fmt/format.h>

#include "ir/tensor/scalar_ops.h"
#include "support/diagnostics.h"

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

Dim derivedDim(Kernel& kernel, const SizePolynomial& numerator, const SizePolynomial& denominator) {
  SizePolynomial one = SizePolynomial::constant(1);
  SizePolynomial polynomial = numerator, divisor = denominator;
  if (std::optional<int64_t> c = denominator.constantValue())
    if (std::optional<SizePolynomial> exact = numerator.dividedExactly(*c)) {
      polynomial = *exact;
      divisor = one;
    }
  if (divisor == one)
    if (std::optional<Dim> dim = polynomial.asDim()) return *dim;
  if (std::optional<int64_t> n = polynomial.constantValue(), d = divisor.constantValue(); n && d)
    return Dim::constant(floorDivide(*n, *d));
  for (const DerivedSize& size : kernel.derivedSizes)
    if (size.kind == DerivedSize::Kind::Quotient && size.numerator == polynomial && size.denominator == divisor)
      return Dim::size(size.name);
  DerivedSize size{"", polynomial, divisor};
  size.name = size.definition();
  kernel.derivedSizes.push_back(size);
  return Dim::size(size.name);
}

SizePolynomial polynomialOf(const Kernel& kernel, const Dim& dim) {
  if (dim.factor == 1 && dim.sizes.size() == 1)
    if (const DerivedSize* derived = kernel.findDerivedSize(dim.sizes[0]);
        derived && derived->kind == DerivedSize::Kind::Quotient && derived->denominator == SizePolynomial::constant(1))
      return derived->numerator;
  return SizePolynomial::of(dim);
}

SizePolynomial quotientPolynomial(Kernel& kernel, const SizePolynomial& numerator, const SizePolynomial& denominator) {
  if (std::optional<int64_t> c = denominator.constantValue())
    if (std::optional<SizePolynomial> exact = numerator.dividedExactly(*c)) return *exact;
  return polynomialOf(kernel, derivedDim(kernel, numerator, denominator));
}

SizePolynomial extremePolynomial(Kernel& kernel, DerivedSize::Kind kind, const SizePolynomial& a, const SizePolynomial& b) {
  bool minimum = kind == DerivedSize::Kind::Minimum;
  if (a == b) return a;
  if (std::optional<int64_t> x = a.constantValue(), y = b.constantValue(); x && y)
    return SizePolynomial::constant(minimum ? std::min(*x, *y) : std::max(*x, *y));
  for (const DerivedSize& size : kernel.derivedSizes)
    if (size.kind == kind && size.operands == std::array<SizePolynomial, 2>{a, b}) return SizePolynomial::of(Dim::size(size.name));
  DerivedSize size;
  size.kind = kind;
  size.operands = {a, b};
  size.name = size.definition();
  kernel.derivedSizes.push_back(size);
  return SizePolynomial::of(Dim::size(size.name));
}

int64_t floorDivide(int64_t a, int64_t b) {
  int64_t quotient = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? quotient - 1 : quotient;
}

ExprPtr takenOrIdentity(ExprPtr taken, ExprPtr body, ReduceOp op, DType accumulator) {
  return std::make_shared<Select>(std::move(taken), std::move(body), immediateOf(reductionIdentity(op, accumulator)));
}

}  // namespace emmy::tensor
