#include "ir/tile/prefix_scan.h"

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"
#include "ir/tile/schedule_checker.h"
#include "support/diagnostics.h"

namespace emmy::tile {

using namespace tensor;

namespace {

// c where `condition` is k < t + c (or k <= t + c - 1, t + c > k, t + c - 1 >= k); nullopt for any other.
std::optional<int64_t> offsetOf(const Expr& condition, const std::string& t, const std::string& k) {
  const auto* compare = condition.as<Binary>();
  if (!compare) return std::nullopt;
  auto lhs = affineTerms(*compare->lhs), rhs = affineTerms(*compare->rhs);
  if (!lhs || !rhs) return std::nullopt;
  // difference > 0 exactly where the condition holds
  std::map<std::string, int64_t> difference;
  int64_t strict = 0;
  switch (compare->op) {
    case BinaryOp::Lt: difference = *rhs, strict = 0; break;
    case BinaryOp::Le: difference = *rhs, strict = 1; break;
    case BinaryOp::Gt: difference = *lhs, strict = 0; break;
    case BinaryOp::Ge: difference = *lhs, strict = 1; break;
    default: return std::nullopt;
  }
  const auto& subtracted = difference == *rhs ? *lhs : *rhs;
  for (const auto& [name, coefficient] : subtracted) difference[name] -= coefficient;
  difference[""] += strict;
  int64_t offset = difference[""];
  difference.erase("");
  std::erase_if(difference, [](const auto& term) { return term.second == 0; });
  if (difference != std::map<std::string, int64_t>{{k, -1}, {t, 1}} || t == k) return std::nullopt;
  return offset;
}

}  // namespace

std::variant<PrefixReduction, std::string> prefixReduction(const Stage& stage, const std::string& axis) {
  if (!stage.reduction) return fmt::format("{} is not a reduction", stage.name);
  const Reduction& reduction = *stage.reduction;
  if (reduction.op == ReduceOp::Mean)
    return std::string("a running mean is a running sum divided by its count: scan the sum");
  if (reduction.axes.size() != 1)
    return fmt::format("{} reduces over {} axes, and a scan runs over one", stage.name, reduction.axes.size());
  const Axis& k = reduction.axes[0];
  const Axis* t = nullptr;
  for (const Axis& a : stage.axes)
    if (a.name == axis) t = &a;
  if (!t) return fmt::format("{} has no axis {}", stage.name, axis);
  const auto* term = stage.body->as<Select>();
  std::optional<int64_t> offset = term ? offsetOf(*term->condition, t->name, k.name) : std::nullopt;
  if (!offset || (*offset != 0 && *offset != 1))
    return fmt::format("its term is not where({} < {} + 1, ...) or where({} < {}, ...): not a running reduction along {}",
                       k.name, t->name, k.name, t->name, t->name);
  if (!(k.extent == t->extent))
    return fmt::format("{} runs over {} and {} over {}: a running reduction takes the whole of its own axis", k.name,
                       k.extent.toString(), t->name, t->extent.toString());
  if (mentionsAxis(*term->ifTrue, t->name))
    return fmt::format("the value it folds in depends on {} too", t->name);
  if (printExpr(*term->ifFalse) != printExpr(*immediateOf(reductionIdentity(reduction.op, reduction.accumulator))))
    return fmt::format("the value past {}'s bound is not the identity of {}", k.name, reduceOpName(reduction.op));
  return PrefixReduction{t->name, k.name, *offset == 1};
}

const ExprPtr& scannedValue(const Expr& term) {
  const auto* select = term.as<Select>();
  EMMY_INTERNAL_ASSERT(select != nullptr, "the term of a running reduction is not a where(...)");
  return select->ifTrue;
}

}  // namespace emmy::tile
