#include "ir/tile/matrix_product.h"

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/simplify.h"

namespace emmy::tile {

using namespace tensor;

namespace {

const AxisVar* asAxis(const ExprPtr& index) { return index->as<AxisVar>(); }

}  // namespace

const Load* productOperand(const ExprPtr& factor) {
  const auto* cast = factor->as<Cast>();
  if (cast && cast->dtype != DType::F32) return nullptr;
  return (cast ? cast->operand : factor)->as<Load>();
}

const Binary* summedProduct(const ExprPtr& term, ExprPtr* mask) {
  *mask = nullptr;
  const Expr* product = term.get();
  if (term->as<Select>()) {
    std::optional<MaskedTerm> masked = maskedTerm(term, ReduceOp::Sum);
    if (!masked) return nullptr;
    ExprPtr condition = simplifyCondition(masked->condition);
    const auto* always = condition->as<BoolImm>();
    if (!always || !always->value) *mask = condition;
    product = masked->value.get();
  }
  const auto* binary = product->as<Binary>();
  return binary && binary->op == BinaryOp::Mul ? binary : nullptr;
}

namespace {

// The operand `f32(X[...])` (or `X[...]` of f32), or why it is not one.
std::variant<const Load*, std::string> operand(const ExprPtr& factor) {
  const Load* load = productOperand(factor);
  if (!load || factor->dtype != DType::F32)
    return std::string("a factor of the product is not a tensor read as f32");
  if (load->dtype != DType::F16 && load->dtype != DType::BF16 && load->dtype != DType::F32)
    return fmt::format("{} is {}, and a block-level product multiplies f16, bf16 or f32", load->tensor, dtypeName(load->dtype));
  if (load->indices.size() < 2) return fmt::format("{} has fewer than two dimensions", load->tensor);
  return load;
}

}  // namespace

namespace {

std::set<std::string> axesRead(const Load& load, const std::set<std::string>& among) {
  std::set<std::string> read;
  for (const ExprPtr& index : load.indices)
    forEachNode(*index, [&](const Expr& node) {
      if (const auto* var = node.as<AxisVar>(); var && among.count(var->name)) read.insert(var->name);
    });
  return read;
}

std::string listed(const std::set<std::string>& axes) {
  std::string text;
  for (const std::string& axis : axes) text += (text.empty() ? "" : ", ") + axis;
  return axes.size() == 1 ? text : "(" + text + ")";
}

// Copied a 16-byte chunk at a time: one axis each for k and the operand's own, its last two subscripts,
// the others free of both, not padded.
bool plain(const Load& load, const std::string& own, const std::set<std::string>& k) {
  size_t rank = load.indices.size();
  if (load.padValue || k.size() != 1) return false;
  const AxisVar* last = asAxis(load.indices[rank - 1]);
  const AxisVar* before = asAxis(load.indices[rank - 2]);
  const std::string& depth = *k.begin();
  if (!last || !before || last->name == before->name) return false;
  if (!((last->name == depth && before->name == own) || (last->name == own && before->name == depth))) return false;
  for (size_t d = 0; d + 2 < rank; ++d)
    if (mentionsAxis(*load.indices[d], depth) || mentionsAxis(*load.indices[d], own)) return false;
  return true;
}

bool zero(const Expr& e) {
  const auto* f = e.as<FloatImm>();
  const auto* i = e.as<IntImm>();
  return (f && f->value == 0.0) || (i && i->value == 0);
}

}  // namespace

std::variant<ProductContraction, std::string> productContraction(const Stage& stage, const std::set<std::string>& rowAxes,
                                                                 const std::set<std::string>& colAxes,
                                                                 const std::set<std::string>& global) {
  if (!stage.reduction || stage.reduction->op != ReduceOp::Sum || stage.reduction->accumulator != DType::F32)
    return fmt::format("{} is not a sum accumulated in f32", stage.name);
  ExprPtr mask;
  const Binary* product = summedProduct(stage.body, &mask);
  if (!product) return fmt::format("{} does not sum a product of two factors (or such a product where a condition holds, else 0)", stage.name);
  ProductContraction contraction;
  for (const Axis& axis : stage.reduction->axes) contraction.k.insert(axis.name);
  contraction.m = rowAxes, contraction.n = colAxes;
  std::vector<const Load*> loads;
  for (const ExprPtr& factor : {product->lhs, product->rhs}) {
    auto read = operand(factor);
    if (auto* why = std::get_if<std::string>(&read)) return *why;
    const Load* load = std::get<const Load*>(read);
    if (!global.count(load->tensor)) return fmt::format("{} is not in global memory (it is computed in the same kernel)", load->tensor);
    if (load->padValue && !zero(*load->padValue))
      return fmt::format("the read of {} is padded with {}, and a block-level product pads with 0", load->tensor,
                         printExpr(*load->padValue));
    loads.push_back(load);
  }
  if (loads[0]->dtype != loads[1]->dtype)
    return fmt::format("{} is {} and {} is {}: a block-level product takes one type", loads[0]->tensor, dtypeName(loads[0]->dtype),
                       loads[1]->tensor, dtypeName(loads[1]->dtype));
  contraction.dtype = loads[0]->dtype;
  // A reads rows and no columns, B the other way round.
  int rowOperand = -1;
  for (int o = 0; o < 2; ++o)
    if (!axesRead(*loads[o], rowAxes).empty() && axesRead(*loads[o], colAxes).empty() &&
        !axesRead(*loads[1 - o], colAxes).empty() && axesRead(*loads[1 - o], rowAxes).empty())
      rowOperand = o;
  if (rowOperand < 0)
    return fmt::format("{} and {} do not each read one of {} and {}, and not the other", loads[0]->tensor, loads[1]->tensor,
                       listed(rowAxes), listed(colAxes));
  contraction.a = loads[rowOperand];
  contraction.b = loads[1 - rowOperand];
  // A slice is laid out along k, unless the operand's last subscript moves with its own axes (B of a
  // convolution, `x[.., i + kh, j + kw]`, is contiguous along the output's j).
  auto kContiguous = [&](const Load& load, const std::set<std::string>& own) {
    for (const std::string& axis : own)
      if (mentionsAxis(*load.indices.back(), axis)) return false;
    return true;
  };
  bool single = rowAxes.size() == 1 && colAxes.size() == 1;
  contraction.aKContiguous = kContiguous(*contraction.a, rowAxes);
  contraction.bKContiguous = kContiguous(*contraction.b, colAxes);
  if (mask) {
    std::set<std::string> rowsRead, colsRead;
    forEachNode(*mask, [&](const Expr& node) {
      if (const auto* var = node.as<AxisVar>()) {
        if (rowAxes.count(var->name)) rowsRead.insert(var->name);
        if (colAxes.count(var->name)) colsRead.insert(var->name);
      }
    });
    if (!rowsRead.empty() && !colsRead.empty())
      return fmt::format("the condition {} reads both {} and {}, and a block-level product applies it to one operand",
                         printExpr(*mask), listed(rowsRead), listed(colsRead));
    (rowsRead.empty() ? contraction.bMask : contraction.aMask) = mask;
  }
  contraction.aPlain = single && !contraction.aMask && plain(*contraction.a, *rowAxes.begin(), contraction.k);
  contraction.bPlain = single && !contraction.bMask && plain(*contraction.b, *colAxes.begin(), contraction.k);
  return contraction;
}

std::map<std::string, ExprPtr> axesUnder(const std::vector<LoopDerivation>& derivations, const std::string& name,
                                         const ExprPtr& value, const std::map<std::string, ExprPtr>* extents,
                                         const std::set<std::string>& stageAxes) {
  std::map<std::string, ExprPtr> values{{name, value}};
  auto arithmetic = [](BinaryOp o, const ExprPtr& a, const ExprPtr& b) -> ExprPtr {
    if (!a || !b) return nullptr;
    return simplifyIndex(std::make_shared<Binary>(DType::I64, o, a, b));
  };
  for (auto derivation = derivations.rbegin(); derivation != derivations.rend(); ++derivation) {
    bool made = true;
    for (const std::string& to : derivation->to) made = made && values.count(to);
    if (!made) continue;
    if (derivation->factor > 0) {
      ExprPtr factor = std::make_shared<IntImm>(DType::I64, derivation->factor);
      values[derivation->from[0]] =
          arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, values.at(derivation->to[0]), factor), values.at(derivation->to[1]));
    } else {
      ExprPtr fused = values.at(derivation->to[0]);
      ExprPtr extent = extents ? extents->at(derivation->from[1]) : nullptr;
      values[derivation->from[0]] = arithmetic(BinaryOp::Div, fused, extent);
      values[derivation->from[1]] = arithmetic(BinaryOp::Mod, fused, extent);
    }
    for (const std::string& to : derivation->to) values.erase(to);
  }
  for (const auto& [axis, _] : values)
    if (!stageAxes.count(axis)) return {};
  return values;
}

}  // namespace emmy::tile
