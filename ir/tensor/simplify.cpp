#include "ir/tensor/simplify.h"

#include <optional>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"

namespace emmy::tensor {

namespace {

std::optional<int64_t> constantOf(const Expr& e) {
  if (const auto* immediate = e.as<IntImm>()) return immediate->value;
  return std::nullopt;
}

// (p + q / a) * a + q % a as p * a + q, and (q / a) * a + q % a as q; null where `sum` is neither.
ExprPtr rejoinQuotient(const ExprPtr& lhs, const ExprPtr& rhs);

}  // namespace

ExprPtr simplifyIndex(const ExprPtr& expr) {
  const auto* binary = expr->as<Binary>();
  if (!binary || binary->dtype != DType::I64) return expr;
  ExprPtr lhs = simplifyIndex(binary->lhs), rhs = simplifyIndex(binary->rhs);
  std::optional<int64_t> a = constantOf(*lhs), b = constantOf(*rhs);
  BinaryOp op = binary->op;
  bool foldable = op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Div ||
                  op == BinaryOp::Mod || op == BinaryOp::Min || op == BinaryOp::Max;
  if (a && b && foldable)
    return std::make_shared<IntImm>(DType::I64, applyBinary(op, DType::I64, Value::ofInt(DType::I64, *a), Value::ofInt(DType::I64, *b)).asInt());
  if ((op == BinaryOp::Add || op == BinaryOp::Sub) && b == 0) return lhs;
  if (op == BinaryOp::Add && a == 0) return rhs;
  bool zero = (op == BinaryOp::Mul && (a == 0 || b == 0)) || (op == BinaryOp::Mod && b == 1) ||
              ((op == BinaryOp::Div || op == BinaryOp::Mod) && a == 0);  // x / 0 is 0 too
  if (zero) return std::make_shared<IntImm>(DType::I64, 0);
  if ((op == BinaryOp::Mul || op == BinaryOp::Div) && b == 1) return lhs;
  // x % a % b is x % b when b divides a (remainders take the dividend's sign, so for negative x too).
  if (const auto* inner = lhs->as<Binary>(); op == BinaryOp::Mod && b && *b != 0 && inner && inner->op == BinaryOp::Mod)
    if (std::optional<int64_t> a = constantOf(*inner->rhs); a && *a % *b == 0)
      return simplifyIndex(std::make_shared<Binary>(DType::I64, BinaryOp::Mod, inner->lhs, rhs));
  if (op == BinaryOp::Mul && a == 1) return rhs;
  if (op == BinaryOp::Add)
    if (ExprPtr joined = rejoinQuotient(lhs, rhs)) return joined;
  if (lhs == binary->lhs && rhs == binary->rhs) return expr;
  return std::make_shared<Binary>(DType::I64, op, lhs, rhs);
}

ExprPtr simplifyCondition(const ExprPtr& condition) {
  const auto* binary = condition->as<Binary>();
  if (!binary || binary->dtype != DType::Bool) return condition;
  auto boolean = [](bool value) { return std::make_shared<BoolImm>(value); };
  if (binary->op == BinaryOp::And || binary->op == BinaryOp::Or) {
    ExprPtr lhs = simplifyCondition(binary->lhs), rhs = simplifyCondition(binary->rhs);
    bool isAnd = binary->op == BinaryOp::And;
    for (const auto& [constant, other] : {std::pair{lhs, rhs}, std::pair{rhs, lhs}})
      if (const auto* known = constant->as<BoolImm>()) return known->value == isAnd ? other : boolean(known->value);
    if (lhs == binary->lhs && rhs == binary->rhs) return condition;
    return std::make_shared<Binary>(DType::Bool, binary->op, lhs, rhs);
  }
  if (!isComparison(binary->op) || binary->lhs->dtype != DType::I64) return condition;
  ExprPtr lhs = simplifyIndex(binary->lhs), rhs = simplifyIndex(binary->rhs);
  std::optional<int64_t> a = constantOf(*lhs), b = constantOf(*rhs);
  if (a && b) return boolean(applyBinary(binary->op, DType::Bool, Value::ofInt(DType::I64, *a), Value::ofInt(DType::I64, *b)).asBool());
  if (lhs == binary->lhs && rhs == binary->rhs) return condition;
  return std::make_shared<Binary>(DType::Bool, binary->op, lhs, rhs);
}

namespace {

// For either sign of q (the quotient truncates, the remainder takes q's sign), so that the flat index of
// axes that `fuse` made one loop of, each the loop's quotient and remainder by the others' extents, is
// the loop itself.
ExprPtr rejoinQuotient(const ExprPtr& lhs, const ExprPtr& rhs) {
  const auto* remainder = rhs->as<Binary>();
  const auto* scaled = lhs->as<Binary>();
  if (!remainder || remainder->op != BinaryOp::Mod || !scaled || scaled->op != BinaryOp::Mul) return nullptr;
  const ExprPtr &q = remainder->lhs, &a = remainder->rhs;
  if (!sameIndex(*scaled->rhs, *a)) return nullptr;
  auto isQuotient = [&](const ExprPtr& e) {
    const auto* quotient = e->as<Binary>();
    return quotient && quotient->op == BinaryOp::Div && sameIndex(*quotient->lhs, *q) && sameIndex(*quotient->rhs, *a);
  };
  if (isQuotient(scaled->lhs)) return q;
  const auto* sum = scaled->lhs->as<Binary>();
  if (!sum || sum->op != BinaryOp::Add || !isQuotient(sum->rhs)) return nullptr;
  auto make = [](BinaryOp op, const ExprPtr& x, const ExprPtr& y) { return std::make_shared<Binary>(DType::I64, op, x, y); };
  return simplifyIndex(make(BinaryOp::Add, make(BinaryOp::Mul, sum->lhs, a), q));
}

}  // namespace

std::optional<int64_t> coefficientOf(const Expr& e, const std::string& var) {
  if (const auto* axis = e.as<AxisVar>()) return axis->name == var ? 1 : 0;
  if (!mentionsAxis(e, var)) return 0;
  const auto* binary = e.as<Binary>();
  if (!binary || binary->dtype != DType::I64) return std::nullopt;
  std::optional<int64_t> lhs = coefficientOf(*binary->lhs, var), rhs = coefficientOf(*binary->rhs, var);
  if (!lhs || !rhs) return std::nullopt;
  if (binary->op == BinaryOp::Add) return *lhs + *rhs;
  if (binary->op == BinaryOp::Sub) return *lhs - *rhs;
  if (binary->op == BinaryOp::Mul) {
    const auto* constant = (*lhs == 0 ? binary->lhs : binary->rhs)->as<IntImm>();
    if (*lhs != 0 && *rhs != 0) return std::nullopt;
    if (!constant) return std::nullopt;
    return constant->value * (*lhs == 0 ? *rhs : *lhs);
  }
  return std::nullopt;
}

bool affineIn(const Expr& e, const std::string& var) {
  if (!mentionsAxis(e, var) || e.as<AxisVar>()) return true;
  const auto* binary = e.as<Binary>();
  if (!binary) return false;
  if (binary->op == BinaryOp::Add || binary->op == BinaryOp::Sub) return affineIn(*binary->lhs, var) && affineIn(*binary->rhs, var);
  if (binary->op != BinaryOp::Mul) return false;
  if (!mentionsAxis(*binary->lhs, var)) return affineIn(*binary->rhs, var);
  return !mentionsAxis(*binary->rhs, var) && affineIn(*binary->lhs, var);
}

}  // namespace emmy::tensor
