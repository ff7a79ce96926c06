#include "ir/tensor/approximate_exponentials.h"

#include <set>

#include "ir/tensor/rewrite.h"

namespace emmy::tensor {

namespace {

bool isSixteenBitFloat(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

// Does a value change continuously with this operand of `node`: is an error relative to the operand
// still one relative to the result? Comparisons, logic, remainders, rounding to integers and indices
// are not (an error can move them a whole step); a select's condition is not, its branches are.
bool continuousIn(const Expr& node, const Expr& operand) {
  if (const auto* unary = node.as<Unary>())
    return unary->op != UnaryOp::Not && unary->op != UnaryOp::Floor && unary->op != UnaryOp::Ceil && isFloat(unary->dtype);
  if (const auto* binary = node.as<Binary>())
    return isFloat(binary->dtype) && binary->op != BinaryOp::Mod && !isComparison(binary->op) &&
           binary->op != BinaryOp::And && binary->op != BinaryOp::Or;
  if (const auto* select = node.as<Select>()) return select->condition.get() != &operand;
  if (const auto* cast = node.as<Cast>()) return isFloat(cast->dtype);
  return false;  // a load's indices
}

// Calls visit(node, continuous) for every node of `root`: continuous when every node on the way from the
// root to it is continuous in the operand it came through.
template <typename Visit>
void walk(const ExprPtr& root, bool continuous, Visit&& visit) {
  visit(root, continuous);
  auto into = [&](const ExprPtr& operand) { walk(operand, continuous && continuousIn(*root, *operand), visit); };
  if (const auto* unary = root->as<Unary>()) into(unary->operand);
  if (const auto* binary = root->as<Binary>()) into(binary->lhs), into(binary->rhs);
  if (const auto* select = root->as<Select>()) into(select->condition), into(select->ifTrue), into(select->ifFalse);
  if (const auto* cast = root->as<Cast>()) into(cast->operand);
  if (const auto* load = root->as<Load>()) {
    for (const ExprPtr& index : load->indices) into(index);
    if (load->padValue) into(load->padValue);
  }
}

}  // namespace

Kernel approximateExponentials(const Kernel& kernel) {
  // The stages whose values some result shows exactly: outputs of other than f16 and bf16, and what
  // such a stage reads, or any stage reads other than continuously.
  std::set<std::string> exact;
  for (const Stage& stage : kernel.stages)
    if (kernel.isOutput(stage.name) && !isSixteenBitFloat(stage.dtype)) exact.insert(stage.name);
  for (bool grew = true; grew;) {
    grew = false;
    for (const Stage& stage : kernel.stages)
      walk(stage.body, !exact.count(stage.name), [&](const ExprPtr& node, bool continuous) {
        const auto* load = node->as<Load>();
        if (load && !continuous && kernel.findStage(load->tensor) && exact.insert(load->tensor).second) grew = true;
      });
  }
  Kernel result = kernel;
  for (Stage& stage : result.stages) {
    if (exact.count(stage.name)) continue;
    std::set<const Expr*> approximated;
    walk(stage.body, true, [&](const ExprPtr& node, bool continuous) {
      const auto* unary = node->as<Unary>();
      if (continuous && unary && (unary->op == UnaryOp::Exp || unary->op == UnaryOp::Exp2) && isFloat(unary->dtype) &&
          unary->dtype != DType::F64)
        approximated.insert(unary);
    });
    if (approximated.empty()) continue;
    ExprReplacer mark = [&](const Expr& node) -> ExprPtr {
      const auto* unary = node.as<Unary>();
      if (!unary || !approximated.count(unary)) return nullptr;
      return std::make_shared<Unary>(unary->dtype, unary->op, rewrite(unary->operand, mark), true);
    };
    stage.body = rewrite(stage.body, mark);
  }
  return result;
}

}  // namespace emmy::tensor
