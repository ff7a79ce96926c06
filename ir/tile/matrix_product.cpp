#include "ir/tile/matrix_product.h"

#include <fmt/format.h>

#include "ir/tensor/rewrite.h"

namespace emmy::tile {

using namespace tensor;

namespace {

bool mentions(const Expr& index, const std::string& axis) {
  bool found = false;
  forEachNode(index, [&](const Expr& node) {
    if (const auto* var = node.as<AxisVar>(); var && var->name == axis) found = true;
  });
  return found;
}

const AxisVar* asAxis(const ExprPtr& index) { return index->as<AxisVar>(); }

}  // namespace

const Load* productOperand(const ExprPtr& factor) {
  const auto* cast = factor->as<Cast>();
  if (cast && cast->dtype != DType::F32) return nullptr;
  return (cast ? cast->operand : factor)->as<Load>();
}

namespace {

// The operand `f32(X[...])` (or `X[...]` of f32), or why it is not one.
std::variant<const Load*, std::string> operand(const ExprPtr& factor) {
  const Load* load = productOperand(factor);
  if (!load || factor->dtype != DType::F32)
    return std::string("a factor of the product is not a tensor read as f32");
  if (load->dtype != DType::F16 && load->dtype != DType::BF16 && load->dtype != DType::F32)
    return fmt::format("{} is {}, and a block-level product multiplies f16, bf16 or f32", load->tensor, dtypeName(load->dtype));
  if (load->padValue) return fmt::format("the read of {} is padded", load->tensor);
  if (load->indices.size() < 2) return fmt::format("{} has fewer than two dimensions", load->tensor);
  return load;
}

}  // namespace

std::variant<ProductContraction, std::string> productContraction(const Stage& stage, const std::string& rowAxis,
                                                                       const std::set<std::string>& global) {
  if (!stage.reduction || stage.reduction->op != ReduceOp::Sum || stage.reduction->accumulator != DType::F32)
    return fmt::format("{} is not a sum accumulated in f32", stage.name);
  if (stage.reduction->axes.size() != 1) return fmt::format("{} sums over more than one axis", stage.name);
  const auto* product = stage.body->as<Binary>();
  if (!product || product->op != BinaryOp::Mul) return fmt::format("{} does not sum a product of two factors", stage.name);
  ProductContraction contraction;
  contraction.k = stage.reduction->axes[0].name;
  contraction.m = rowAxis;
  std::vector<const Load*> loads;
  for (const ExprPtr& factor : {product->lhs, product->rhs}) {
    auto read = operand(factor);
    if (auto* why = std::get_if<std::string>(&read)) return *why;
    const Load* load = std::get<const Load*>(read);
    if (!global.count(load->tensor)) return fmt::format("{} is not in global memory (it is computed in the same kernel)", load->tensor);
    loads.push_back(load);
  }
  if (loads[0]->dtype != loads[1]->dtype)
    return fmt::format("{} is {} and {} is {}: a block-level product takes one type", loads[0]->tensor, dtypeName(loads[0]->dtype),
                       loads[1]->tensor, dtypeName(loads[1]->dtype));
  contraction.dtype = loads[0]->dtype;
  // Each operand: its last two subscripts are k and one output axis, its others use neither.
  auto outputAxisOf = [&](const Load& load) -> std::string {
    size_t rank = load.indices.size();
    const AxisVar* last = asAxis(load.indices[rank - 1]);
    const AxisVar* before = asAxis(load.indices[rank - 2]);
    if (!last || !before || (last->name != contraction.k && before->name != contraction.k) || last->name == before->name)
      return std::string();
    const std::string& axis = last->name == contraction.k ? before->name : last->name;
    for (size_t d = 0; d + 2 < rank; ++d)
      if (mentions(*load.indices[d], contraction.k) || mentions(*load.indices[d], axis)) return std::string();
    return axis;
  };
  std::string axes[2];
  for (int o = 0; o < 2; ++o) {
    std::string axis = outputAxisOf(*loads[o]);
    if (axis.empty())
      return fmt::format("the last two subscripts of {} are not {} and one axis of {} (each used there only)",
                         loads[o]->tensor, contraction.k, stage.name);
    axes[o] = axis;
  }
  int rowOperand = axes[0] == rowAxis ? 0 : axes[1] == rowAxis ? 1 : -1;
  if (rowOperand < 0 || axes[0] == axes[1])
    return fmt::format("{} and {} do not each read one of the two axes {} and another", loads[0]->tensor, loads[1]->tensor, rowAxis);
  contraction.a = loads[rowOperand];
  contraction.b = loads[1 - rowOperand];
  contraction.n = axes[1 - rowOperand];
  auto kLast = [&](const Load& load) {
    const AxisVar* last = asAxis(load.indices.back());
    return last->name == contraction.k;
  };
  contraction.aKContiguous = kLast(*contraction.a);
  contraction.bKContiguous = kLast(*contraction.b);
  return contraction;
}

}  // namespace emmy::tile
