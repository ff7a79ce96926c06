#include "ir/tensor/rewrite.h"

#include "ir/tensor/scalar_ops.h"

namespace emmy::tensor {

namespace {

struct Rewriter {
  const ExprReplacer& replace;

  ExprPtr operator()(const ExprPtr& expr) const {
    if (ExprPtr replaced = replace(*expr)) return replaced;
    return dispatch(*expr, [&](const auto& node) { return rebuild(node, expr); });
  }

  template <typename Leaf>
  ExprPtr rebuild(const Leaf&, const ExprPtr& self) const { return self; }

  ExprPtr rebuild(const Load& node, const ExprPtr& self) const {
    std::vector<ExprPtr> indices;
    bool changed = false;
    for (const ExprPtr& index : node.indices) {
      indices.push_back((*this)(index));
      changed |= indices.back() != index;
    }
    ExprPtr pad = node.padValue ? (*this)(node.padValue) : nullptr;
    changed |= pad != node.padValue;
    return changed ? std::make_shared<Load>(node.dtype, node.tensor, std::move(indices), pad) : self;
  }
  ExprPtr rebuild(const Unary& node, const ExprPtr& self) const {
    ExprPtr operand = (*this)(node.operand);
    return operand != node.operand ? std::make_shared<Unary>(node.dtype, node.op, operand, node.approximate) : self;
  }
  ExprPtr rebuild(const Binary& node, const ExprPtr& self) const {
    ExprPtr lhs = (*this)(node.lhs), rhs = (*this)(node.rhs);
    return lhs != node.lhs || rhs != node.rhs ? std::make_shared<Binary>(node.dtype, node.op, lhs, rhs) : self;
  }
  ExprPtr rebuild(const Select& node, const ExprPtr& self) const {
    ExprPtr c = (*this)(node.condition), t = (*this)(node.ifTrue), f = (*this)(node.ifFalse);
    return c != node.condition || t != node.ifTrue || f != node.ifFalse ? std::make_shared<Select>(c, t, f) : self;
  }
  ExprPtr rebuild(const Cast& node, const ExprPtr& self) const {
    ExprPtr operand = (*this)(node.operand);
    return operand != node.operand ? std::make_shared<Cast>(node.dtype, operand) : self;
  }
};

}  // namespace

ExprPtr rewrite(const ExprPtr& expr, const ExprReplacer& replace) { return Rewriter{replace}(expr); }

void forEachNode(const Expr& expr, const std::function<void(const Expr&)>& visit) {
  visit(expr);
  dispatch(expr, [&](const auto& node) {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, Load>) {
      for (const ExprPtr& index : node.indices) forEachNode(*index, visit);
      if (node.padValue) forEachNode(*node.padValue, visit);
    } else if constexpr (std::is_same_v<Node, Unary> || std::is_same_v<Node, Cast>) {
      forEachNode(*node.operand, visit);
    } else if constexpr (std::is_same_v<Node, Binary>) {
      forEachNode(*node.lhs, visit);
      forEachNode(*node.rhs, visit);
    } else if constexpr (std::is_same_v<Node, Select>) {
      forEachNode(*node.condition, visit);
      forEachNode(*node.ifTrue, visit);
      forEachNode(*node.ifFalse, visit);
    }
  });
}

std::optional<MaskedTerm> maskedTerm(const ExprPtr& term, ReduceOp op) {
  const auto* masked = term->as<Select>();
  if (!masked) return std::nullopt;
  Value identity = reductionIdentity(op, masked->dtype);
  const auto* real = masked->ifFalse->as<FloatImm>();
  const auto* integer = masked->ifFalse->as<IntImm>();
  bool isIdentity = (real && real->value == identity.asDouble()) || (integer && integer->value == identity.asInt());
  if (!isIdentity) return std::nullopt;
  return MaskedTerm{masked->condition, masked->ifTrue};
}

bool mentionsAxis(const Expr& expr, const std::string& axis) {
  bool found = false;
  forEachNode(expr, [&](const Expr& node) {
    if (const auto* var = node.as<AxisVar>(); var && var->name == axis) found = true;
  });
  return found;
}

std::set<std::string> tensorsRead(const Expr& expr) {
  std::set<std::string> read;
  forEachNode(expr, [&](const Expr& node) {
    if (const auto* load = node.as<Load>()) read.insert(load->tensor);
  });
  return read;
}

std::vector<const Stage*> liveStages(const Kernel& kernel) {
  std::set<std::string> live;
  for (const TensorParam& output : kernel.outputs) live.insert(output.name);
  for (auto it = kernel.stages.rbegin(); it != kernel.stages.rend(); ++it)
    if (live.count(it->name))
      for (const std::string& read : tensorsRead(*it->body)) live.insert(read);
  std::vector<const Stage*> stages;
  for (const Stage& stage : kernel.stages)
    if (live.count(stage.name)) stages.push_back(&stage);
  return stages;
}

}  // namespace emmy::tensor
