#include "ir/tensor/scalar_ops.h"

#include <cmath>
#include <limits>

#include "support/diagnostics.h"

namespace emmy::tensor {

namespace {

// Two's-complement arithmetic through uint64, where overflow is defined.
int64_t wrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrappingSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrappingMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
int64_t wrappingNeg(int64_t a) { return wrappingSub(0, a); }

int64_t integerPower(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  int64_t result = 1;
  for (; exponent > 0; exponent >>= 1) {
    if (exponent & 1) result = wrappingMul(result, base);
    base = wrappingMul(base, base);
  }
  return result;
}

int64_t integerBinary(BinaryOp op, int64_t a, int64_t b) {
  switch (op) {
    case BinaryOp::Add: return wrappingAdd(a, b);
    case BinaryOp::Sub: return wrappingSub(a, b);
    case BinaryOp::Mul: return wrappingMul(a, b);
    // Truncating division; x / -1 is spelled as a negation so that INT64_MIN / -1 wraps instead of trapping.
    case BinaryOp::Div: return b == 0 ? 0 : b == -1 ? wrappingNeg(a) : a / b;
    case BinaryOp::Mod: return b == 0 || b == -1 ? 0 : a % b;
    case BinaryOp::Min: return std::min(a, b);
    case BinaryOp::Max: return std::max(a, b);
    case BinaryOp::Pow: return integerPower(a, b);
    case BinaryOp::And: return a != 0 && b != 0;
    case BinaryOp::Or: return a != 0 || b != 0;
    default: break;
  }
  throw InternalError(fmt::format("integer {} is not an arithmetic operation", binaryOpName(op)));
}

// torch.maximum / torch.minimum: a NaN operand gives NaN.
double floatMax(double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : (a < b ? b : a); }
double floatMin(double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : (b < a ? b : a); }

double floatBinary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Mod: return std::fmod(a, b);
    case BinaryOp::Min: return floatMin(a, b);
    case BinaryOp::Max: return floatMax(a, b);
    case BinaryOp::Pow: return std::pow(a, b);
    default: break;
  }
  throw InternalError(fmt::format("float {} is not an arithmetic operation", binaryOpName(op)));
}

bool compare(BinaryOp op, const Value& lhs, const Value& rhs) {
  auto ordered = [op](auto a, auto b) {
    switch (op) {
      case BinaryOp::Lt: return a < b;
      case BinaryOp::Le: return a <= b;
      case BinaryOp::Gt: return a > b;
      case BinaryOp::Ge: return a >= b;
      case BinaryOp::Eq: return a == b;
      default: return a != b;
    }
  };
  return isFloat(lhs.dtype) ? ordered(lhs.f, rhs.f) : ordered(lhs.i, rhs.i);
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

double floatUnary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Exp2: return std::exp2(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Log2: return std::log2(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1 / std::sqrt(x);
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::Sigmoid: return sigmoid(x);
    case UnaryOp::Relu: return floatMax(x, 0);
    case UnaryOp::Gelu: return x * 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::Silu: return x * sigmoid(x);
    case UnaryOp::Floor: return std::floor(x);
    case UnaryOp::Ceil: return std::ceil(x);
    case UnaryOp::Not: break;
  }
  throw InternalError(fmt::format("{} of a float", unaryOpName(op)));
}

int64_t integerUnary(UnaryOp op, int64_t x) {
  switch (op) {
    case UnaryOp::Neg: return wrappingNeg(x);
    case UnaryOp::Not: return x == 0;
    case UnaryOp::Abs: return x < 0 ? wrappingNeg(x) : x;
    case UnaryOp::Relu: return std::max<int64_t>(x, 0);
    case UnaryOp::Floor:
    case UnaryOp::Ceil: return x;
    default: break;
  }
  throw InternalError(fmt::format("{} of an integer", unaryOpName(op)));
}

constexpr double kInfinity = std::numeric_limits<double>::infinity();

Value lowestValue(DType dtype) {
  switch (dtype) {
    case DType::Bool: return Value::ofBool(false);
    case DType::I8: return Value::ofInt(dtype, INT8_MIN);
    case DType::I32: return Value::ofInt(dtype, INT32_MIN);
    case DType::I64: return Value::ofInt(dtype, INT64_MIN);
    default: return Value::ofFloat(dtype, -kInfinity);
  }
}

Value highestValue(DType dtype) {
  switch (dtype) {
    case DType::Bool: return Value::ofBool(true);
    case DType::I8: return Value::ofInt(dtype, INT8_MAX);
    case DType::I32: return Value::ofInt(dtype, INT32_MAX);
    case DType::I64: return Value::ofInt(dtype, INT64_MAX);
    default: return Value::ofFloat(dtype, kInfinity);
  }
}

}  // namespace

Value applyUnary(UnaryOp op, DType dtype, const Value& operand) {
  if (isFloat(dtype)) return Value::ofFloat(dtype, floatUnary(op, operand.f));
  return Value::ofInt(dtype, integerUnary(op, operand.i));
}

Value applyBinary(BinaryOp op, DType dtype, const Value& lhs, const Value& rhs) {
  if (isComparison(op)) return Value::ofBool(compare(op, lhs, rhs));
  if (isFloat(dtype)) return Value::ofFloat(dtype, floatBinary(op, lhs.f, rhs.f));
  return Value::ofInt(dtype, integerBinary(op, lhs.i, rhs.i));
}

Value reductionIdentity(ReduceOp op, DType accumulator) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return Value::ofInt(accumulator, 0);
    case ReduceOp::Prod: return Value::ofInt(accumulator, 1);
    case ReduceOp::Max: return lowestValue(accumulator);
    case ReduceOp::Min: return highestValue(accumulator);
  }
  throw InternalError("unknown reduction");
}

BinaryOp reductionStep(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return BinaryOp::Add;
    case ReduceOp::Prod: return BinaryOp::Mul;
    case ReduceOp::Max: return BinaryOp::Max;
    case ReduceOp::Min: return BinaryOp::Min;
  }
  throw InternalError("unknown reduction");
}

}  // namespace emmy::tensor
