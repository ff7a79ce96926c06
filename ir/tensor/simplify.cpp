#include "ir/tensor/simplify.h"

#include <optional>

#include "ir/tensor/scalar_ops.h"

namespace emmy::tensor {

namespace {

std::optional<int64_t> constantOf(const Expr& e) {
  if (const auto* immediate = e.as<IntImm>()) return immediate->value;
  return std::nullopt;
}

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
  if (op == BinaryOp::Mul && a == 1) return rhs;
  if (lhs == binary->lhs && rhs == binary->rhs) return expr;
  return std::make_shared<Binary>(DType::I64, op, lhs, rhs);
}

}  // namespace emmy::tensor
