#include "frontend/operations.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/tensor/scalar_ops.h"

namespace emmy {

using namespace tensor;

void fail(Diagnostics& diagnostics, const SourceLoc& loc, std::string message) {
  diagnostics.error(loc, std::move(message));
  throw CompilationAborted{};
}

Shape broadcastShapes(const Shape& a, const Shape& b, const SourceLoc& loc, Diagnostics& diagnostics) {
  size_t rank = std::max(a.size(), b.size());
  Shape result(rank);
  for (size_t k = 0; k < rank; ++k) {
    const Dim* da = k < rank - a.size() ? nullptr : &a[k - (rank - a.size())];
    const Dim* db = k < rank - b.size() ? nullptr : &b[k - (rank - b.size())];
    if (!da || (db && *da == Dim::constant(1))) {
      result[k] = *db;
    } else if (!db || *db == Dim::constant(1) || *da == *db) {
      result[k] = *da;
    } else {
      fail(diagnostics, loc,
           fmt::format("cannot broadcast shapes {} and {}: dimension {} is {} in one and {} in the other",
                       shapeToString(a), shapeToString(b), k, da->toString(), db->toString()));
    }
  }
  return result;
}

TensorValue broadcastTo(const TensorValue& value, const Shape& target) {
  if (value.shape == target || value.literal) {
    TensorValue same = value;
    same.shape = target;
    return same;
  }
  TensorValue result = value;
  result.shape = target;
  result.tensorName.clear();
  size_t offset = target.size() - value.shape.size();
  Shape source = value.shape;
  result.element = [value, source, offset, target](const std::vector<ExprPtr>& index) {
    std::vector<ExprPtr> inner;
    for (size_t k = 0; k < source.size(); ++k) {
      bool stretched = source[k] == Dim::constant(1) && !(target[k + offset] == Dim::constant(1));
      inner.push_back(stretched ? std::make_shared<IntImm>(DType::I64, 0) : index[k + offset]);
    }
    return value.at(inner);
  };
  return result;
}

namespace {

bool isArithmetic(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Div ||
         op == BinaryOp::Mod || op == BinaryOp::Pow;
}

// An expression of literals alone is folded in f64 (spec section 3), with the evaluator's semantics.
double foldBinary(BinaryOp op, double a, double b) {
  DType result = isComparison(op) ? DType::Bool : DType::F64;
  return applyBinary(op, result, Value::ofFloat(DType::F64, a), Value::ofFloat(DType::F64, b)).asDouble();
}

// The dtype both operands are converted to.
DType operandType(const TensorValue& a, const TensorValue& b) {
  if (a.literal && b.literal) return promote(a.literal->defaultType(), b.literal->defaultType());
  if (a.literal) return a.literal->typeBeside(b.dtype);
  if (b.literal) return b.literal->typeBeside(a.dtype);
  return promote(a.dtype, b.dtype);
}

// An elementwise value of `dtype` over `shape` whose element combines the operands' elements.
template <typename Combine>
TensorValue elementwise(DType dtype, const Shape& shape, std::vector<TensorValue> operands, SourceLoc loc,
                        Combine combine) {
  TensorValue result;
  result.dtype = dtype;
  result.shape = shape;
  result.loc = std::move(loc);
  for (TensorValue& operand : operands) operand = broadcastTo(operand, shape);
  result.element = [operands, combine](const std::vector<ExprPtr>& index) {
    std::vector<ExprPtr> elements;
    for (const TensorValue& operand : operands) elements.push_back(operand.literal ? nullptr : operand.at(index));
    return combine(operands, elements);
  };
  return result;
}

}  // namespace

TensorValue binaryOp(BinaryOp op, const TensorValue& a, const TensorValue& b, const SourceLoc& loc,
                     Diagnostics& diagnostics) {
  bool logical = op == BinaryOp::And || op == BinaryOp::Or;
  if (logical) {
    for (const TensorValue* operand : {&a, &b})
      if (operand->literal || operand->dtype != DType::Bool)
        fail(diagnostics, operand->loc,
             fmt::format("operands of '{}' must be bool, not {}", binaryOpName(op),
                         operand->literal ? "a number" : std::string(dtypeName(operand->dtype))));
  }
  if (a.literal && b.literal) {
    double folded = foldBinary(op, a.literal->value, b.literal->value);
    if (isComparison(op)) return TensorValue::ofScalar(immediate(DType::Bool, folded), loc);
    bool integral = a.literal->isInteger && b.literal->isInteger && std::isfinite(folded) &&
                    folded == std::trunc(folded);
    return TensorValue::ofLiteral(Literal{integral, folded}, loc);
  }
  Shape shape = broadcastShapes(a.shape, b.shape, loc, diagnostics);
  DType operands = operandType(a, b);
  if (operands == DType::Bool && isArithmetic(op)) operands = DType::I64;  // bool in arithmetic is an integer
  DType result = (isComparison(op) || logical) ? DType::Bool : operands;
  return elementwise(result, shape, {a, b}, loc,
                     [op, operands, result](const std::vector<TensorValue>& values, const std::vector<ExprPtr>& elements) {
                       ExprPtr lhs = values[0].literal ? values[0].at({}, operands) : castTo(elements[0], operands);
                       ExprPtr rhs = values[1].literal ? values[1].at({}, operands) : castTo(elements[1], operands);
                       return std::static_pointer_cast<const Expr>(std::make_shared<Binary>(result, op, lhs, rhs));
                     });
}

namespace {

bool isFloatFunction(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Not:
    case UnaryOp::Abs:
    case UnaryOp::Relu:
    case UnaryOp::Floor:
    case UnaryOp::Ceil: return false;
    default: return true;
  }
}

double foldUnary(UnaryOp op, double x) {
  return applyUnary(op, DType::F64, Value::ofFloat(DType::F64, x)).asDouble();
}

}  // namespace

TensorValue unaryOp(UnaryOp op, const TensorValue& a, const SourceLoc& loc, Diagnostics& diagnostics) {
  if (op == UnaryOp::Not && (a.literal || a.dtype != DType::Bool))
    fail(diagnostics, a.loc,
         fmt::format("the operand of 'not' must be bool, not {}",
                     a.literal ? "a number" : std::string(dtypeName(a.dtype))));
  if (a.literal) {
    double folded = foldUnary(op, a.literal->value);
    bool integral = a.literal->isInteger && !isFloatFunction(op);
    return TensorValue::ofLiteral(Literal{integral, folded}, loc);
  }
  DType dtype = a.dtype;
  if (isFloatFunction(op) && !isFloat(dtype)) dtype = DType::F32;  // as torch.exp of an integer tensor
  if (dtype == DType::Bool && op != UnaryOp::Not) dtype = DType::I64;
  return elementwise(dtype, a.shape, {a}, loc,
                     [op, dtype](const std::vector<TensorValue>&, const std::vector<ExprPtr>& elements) {
                       return std::static_pointer_cast<const Expr>(
                           std::make_shared<Unary>(dtype, op, castTo(elements[0], dtype)));
                     });
}

TensorValue selectOp(const TensorValue& condition, const TensorValue& ifTrue, const TensorValue& ifFalse,
                     const SourceLoc& loc, Diagnostics& diagnostics) {
  if (condition.literal || condition.dtype != DType::Bool)
    fail(diagnostics, condition.loc,
         fmt::format("the condition of where must be bool, not {}",
                     condition.literal ? "a number" : std::string(dtypeName(condition.dtype))));
  Shape shape = broadcastShapes(broadcastShapes(condition.shape, ifTrue.shape, loc, diagnostics), ifFalse.shape,
                                loc, diagnostics);
  DType dtype = operandType(ifTrue, ifFalse);
  return elementwise(dtype, shape, {condition, ifTrue, ifFalse}, loc,
                     [dtype](const std::vector<TensorValue>& values, const std::vector<ExprPtr>& elements) {
                       auto branch = [&](size_t k) {
                         return values[k].literal ? values[k].at({}, dtype) : castTo(elements[k], dtype);
                       };
                       return std::static_pointer_cast<const Expr>(
                           std::make_shared<Select>(elements[0], branch(1), branch(2)));
                     });
}

TensorValue castOp(DType dtype, const TensorValue& value, const SourceLoc& loc) {
  if (value.literal) return TensorValue::ofScalar(value.at({}, dtype), loc);
  TensorValue result = value;
  result.dtype = dtype;
  result.loc = loc;
  result.tensorName.clear();
  TensorValue source = value;
  result.element = [source, dtype](const std::vector<ExprPtr>& index) { return source.at(index, dtype); };
  return result;
}

std::optional<UnaryOp> builtinUnary(const std::string& name) {
#define EMMY_MATCH_UNARY(Op, spelling) \
  if (name == spelling && UnaryOp::Op != UnaryOp::Neg && UnaryOp::Op != UnaryOp::Not) return UnaryOp::Op;
  EMMY_UNARY_OPS(EMMY_MATCH_UNARY)
#undef EMMY_MATCH_UNARY
  return std::nullopt;
}

TensorValue extremeCandidate(const TensorValue& value, const TensorValue& best, const TensorValue& position,
                             const SourceLoc& loc, Diagnostics& diagnostics) {
  TensorValue reached = binaryOp(tensor::BinaryOp::Eq, value, best, loc, diagnostics);
  if (isFloat(value.dtype))
    reached = binaryOp(tensor::BinaryOp::Or, reached, binaryOp(tensor::BinaryOp::Ne, value, value, loc, diagnostics), loc, diagnostics);
  TensorValue none = TensorValue::ofScalar(tensor::immediateOf(tensor::reductionIdentity(tensor::ReduceOp::Min, DType::I64)), loc);
  return selectOp(reached, position, none, loc, diagnostics);
}

}  // namespace emmy
