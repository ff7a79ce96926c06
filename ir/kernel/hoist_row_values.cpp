// Work that a loop repeats on values it does not change (a row's sum, maximum or variance, read from
// scalar locals) is done once before the loop:
// - a transcendental function of such values (log_softmax's log of the sum, layernorm's rsqrt of the
//   variance) is computed into a local, with the same result;
// - so is the conversion of a 16-bit float such value to f32 (softmax<f16>'s maximum, read by every
//   element's exp(x - m)): CUDA converts halves in inline assembly, which nvcc neither shares between
//   elements nor moves out of the loop;
// - a float division by such a value (softmax's 1 / sum, a mean's count) becomes a multiplication by
//   its reciprocal: an IEEE divide costs about ten instructions, a multiplication one. The product rounds
//   twice, so it may differ from the quotient in its last place. Where the reciprocal is not a normal
//   number (a divisor's magnitude outside [2^-126, 2^126] in f32, [2^-1022, 2^1022] in f64) it can be much
//   further off, so the loop is kept twice, and a run with such a divisor takes the loop that divides.
//
// A value qualifies when it reads only constants, sizes, parameters, variables and scalar locals that
// the loop does not set (evaluating it before the loop then reads nothing a guard in the loop
// protects). Loops with warp- or block-wide operations are left as they are, since the choice between
// the two loops may differ from thread to thread; loops inside them are considered on their own.
#include "ir/kernel/hoist_row_values.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

// Every name a statement binds or writes, and whether it has an operation all threads must reach.
struct Effects {
  std::set<std::string> written;
  bool collective = false;
};

void collectEffects(const Stmt& stmt, Effects& effects) {
  dispatch(stmt, [&](const auto& node) {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, For>) {
      effects.written.insert(node.var);
      collectEffects(*node.body, effects);
    } else if constexpr (std::is_same_v<Node, Let>) {
      effects.written.insert(node.var);
    } else if constexpr (std::is_same_v<Node, Declare> || std::is_same_v<Node, Store> || std::is_same_v<Node, CopyAsync> ||
                         std::is_same_v<Node, VectorStore>) {
      effects.written.insert(node.buffer);
    } else if constexpr (std::is_same_v<Node, CombineLanes>) {
      effects.written.insert(node.accumulator);
    } else if constexpr (std::is_same_v<Node, VectorLoad> || std::is_same_v<Node, TransposeQuad>) {
      effects.written.insert(node.local);
      effects.collective = effects.collective || std::is_same_v<Node, TransposeQuad>;
    } else if constexpr (std::is_same_v<Node, ShuffleCombine>) {
      effects.written.insert(node.buffer);
      effects.collective = true;
    } else if constexpr (std::is_same_v<Node, LoadMatrix>) {
      effects.written.insert(node.fragment);
      effects.collective = true;
    } else if constexpr (std::is_same_v<Node, MultiplyAccumulate>) {
      effects.written.insert(node.accumulator);
      effects.collective = true;
    } else if constexpr (std::is_same_v<Node, Barrier>) {
      effects.collective = true;
    } else if constexpr (std::is_same_v<Node, If>) {
      collectEffects(*node.body, effects);
    } else if constexpr (std::is_same_v<Node, IfAligned>) {
      collectEffects(*node.aligned, effects), collectEffects(*node.otherwise, effects);
    } else if constexpr (std::is_same_v<Node, Block>) {
      for (const StmtPtr& inner : node.stmts) collectEffects(*inner, effects);
    }
  });
}

// `stmt` with `replace` applied to every expression in it.
StmtPtr rewriteStmt(const StmtPtr& stmt, const ExprReplacer& replace) {
  auto r = [&](const ExprPtr& e) { return e ? rewrite(e, replace) : e; };
  auto s = [&](const StmtPtr& inner) { return rewriteStmt(inner, replace); };
  return dispatch(*stmt, [&](const auto& node) -> StmtPtr {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, For>)
      return std::make_shared<For>(node.var, r(node.begin), r(node.end), r(node.step), s(node.body), node.unroll, node.rolled);
    else if constexpr (std::is_same_v<Node, Let>)
      return std::make_shared<Let>(node.var, r(node.value));
    else if constexpr (std::is_same_v<Node, Store>)
      return std::make_shared<Store>(node.buffer, r(node.index), r(node.value), node.atomic);
    else if constexpr (std::is_same_v<Node, If>)
      return std::make_shared<If>(r(node.condition), s(node.body));
    else if constexpr (std::is_same_v<Node, IfAligned>) {
      std::vector<Address> addresses;
      for (const Address& address : node.addresses) addresses.push_back({address.buffer, r(address.element)});
      return std::make_shared<IfAligned>(addresses, node.bytes, r(node.condition), s(node.aligned), s(node.otherwise));
    } else if constexpr (std::is_same_v<Node, Block>) {
      std::vector<StmtPtr> stmts;
      for (const StmtPtr& inner : node.stmts) stmts.push_back(s(inner));
      return std::make_shared<Block>(stmts);
    } else if constexpr (std::is_same_v<Node, VectorLoad>)
      return std::make_shared<VectorLoad>(node.local, node.buffer, r(node.element), node.bytes, r(node.localElement));
    else if constexpr (std::is_same_v<Node, VectorStore>)
      return std::make_shared<VectorStore>(node.buffer, r(node.element), node.local, node.bytes, r(node.localElement),
                                           node.narrowing);
    else if constexpr (std::is_same_v<Node, CopyAsync>)
      return std::make_shared<CopyAsync>(node.buffer, r(node.index), node.source, r(node.sourceIndex), r(node.condition), node.dtype, node.lanes,
                                         r(node.lanesInside));
    else
      return stmt;  // declarations and operations without float expressions
  });
}

// Does `divisor` read only what the loop (which sets `written`) leaves alone, and no buffer element?
bool invariant(const Expr& divisor, const std::set<std::string>& written) {
  bool result = true;
  forEachNode(divisor, [&](const Expr& e) {
    if (const auto* load = e.as<Load>()) result = result && load->indices.empty() && !written.count(load->tensor);
    if (const auto* axis = e.as<AxisVar>()) result = result && !written.count(axis->name);
  });
  return result;
}

// Is the reciprocal of `divisor` a normal number: its magnitude between 2^-limit and 2^limit?
ExprPtr hasNormalReciprocal(const ExprPtr& divisor) {
  DType dtype = divisor->dtype;
  double limit = std::ldexp(1.0, dtype == DType::F32 ? 126 : 1022);
  auto compare = [&](BinaryOp op, double bound) {
    return std::make_shared<Binary>(DType::Bool, op, divisor, std::make_shared<FloatImm>(dtype, bound));
  };
  auto both = [](ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, BinaryOp::And, a, b); };
  return std::make_shared<Binary>(DType::Bool, BinaryOp::Or, both(compare(BinaryOp::Ge, 1 / limit), compare(BinaryOp::Le, limit)),
                                  both(compare(BinaryOp::Le, -1 / limit), compare(BinaryOp::Ge, -limit)));
}

StmtPtr hoist(const StmtPtr& stmt);

// Is `op` a function worth computing once rather than per element?
bool costly(UnaryOp op) {
  switch (op) {
    case UnaryOp::Exp: case UnaryOp::Exp2: case UnaryOp::Log: case UnaryOp::Log2: case UnaryOp::Sqrt: case UnaryOp::Rsqrt:
    case UnaryOp::Sin: case UnaryOp::Cos: case UnaryOp::Tanh: case UnaryOp::Erf: case UnaryOp::Sigmoid: case UnaryOp::Gelu:
    case UnaryOp::Silu: return true;
    default: return false;
  }
}

// Is `cast` a conversion of a 16-bit float value that reads a local (not a constant, which nvcc folds)?
bool widened16BitFloat(const Cast& cast) {
  DType from = cast.operand->dtype;
  if ((from != DType::F16 && from != DType::BF16) || cast.dtype == from) return false;
  bool reads = false;
  forEachNode(*cast.operand, [&](const Expr& e) { reads = reads || e.as<Load>(); });
  return reads;
}

// The loop, with the row values it repeats computed before it where there are any.
StmtPtr hoistAtLoop(const For& loop, const StmtPtr& original) {
  Effects effects;
  collectEffects(loop, effects);
  if (effects.collective) return withChildren(original, hoist);
  // Each hoisted value, once by its printed form: its local, and what it is.
  struct Hoisted {
    std::string local;
    ExprPtr value;
    bool reciprocal;  // of `value`, else `value` itself
  };
  std::map<std::string, Hoisted> hoisted;
  std::vector<std::string> order;  // printed forms, in the order found
  auto localFor = [&](const ExprPtr& value, bool reciprocal) {
    std::string key = (reciprocal ? "1/" : "") + printExpr(*value);
    auto [found, fresh] = hoisted.emplace(key, Hoisted{fmt::format("{}__{}_{}", loop.var, reciprocal ? "reciprocal" : "invariant", order.size()), value, reciprocal});
    if (fresh) order.push_back(key);
    return std::make_shared<Load>(value->dtype, found->second.local, std::vector<ExprPtr>{});
  };
  auto floating = [](DType dtype) { return dtype == DType::F32 || dtype == DType::F64; };
  // `reciprocals`: divisions by invariant values multiply (the first loop); else they stay.
  auto replacer = [&](bool reciprocals) {
    ExprReplacer replace = [&, reciprocals](const Expr& e) -> ExprPtr {
      if (const auto* unary = e.as<Unary>(); unary && costly(unary->op) && invariant(*unary->operand, effects.written))
        return localFor(std::static_pointer_cast<const Expr>(std::make_shared<Unary>(*unary)), false);
      if (const auto* cast = e.as<Cast>(); cast && widened16BitFloat(*cast) && invariant(*cast->operand, effects.written))
        return localFor(std::static_pointer_cast<const Expr>(std::make_shared<Cast>(*cast)), false);
      const auto* division = e.as<Binary>();
      if (!reciprocals || !division || division->op != BinaryOp::Div || !floating(division->dtype) ||
          !invariant(*division->rhs, effects.written))
        return nullptr;
      // One after the other: the locals are numbered in the order found, the same with every compiler.
      ExprPtr reciprocal = localFor(division->rhs, true);
      ExprPtr numerator = rewrite(division->lhs, replace);
      return std::make_shared<Binary>(division->dtype, BinaryOp::Mul, numerator, reciprocal);
    };
    return replace;
  };
  StmtPtr multiplying = rewriteStmt(original, replacer(true));
  bool divides = std::any_of(hoisted.begin(), hoisted.end(), [](const auto& entry) { return entry.second.reciprocal; });
  StmtPtr dividing = divides ? rewriteStmt(original, replacer(false)) : nullptr;
  if (hoisted.empty()) return withChildren(original, hoist);
  std::vector<StmtPtr> stmts;
  ExprPtr normal;
  for (const std::string& key : order) {
    const Hoisted& value = hoisted.at(key);
    DType dtype = value.value->dtype;
    ExprPtr computed = value.reciprocal ? std::make_shared<Binary>(dtype, BinaryOp::Div, std::make_shared<FloatImm>(dtype, 1.0), value.value)
                                        : value.value;
    stmts.push_back(std::make_shared<Declare>(value.local, dtype, 1, Memory::Local));
    stmts.push_back(std::make_shared<Store>(value.local, nullptr, computed));
    if (!value.reciprocal) continue;
    ExprPtr test = hasNormalReciprocal(value.value);
    normal = normal ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, normal, test) : test;
  }
  stmts.push_back(divides ? std::make_shared<IfAligned>(std::vector<Address>{}, 1, normal, multiplying, dividing) : multiplying);
  return std::make_shared<Block>(stmts);
}

StmtPtr hoist(const StmtPtr& stmt) {
  if (const auto* loop = stmt->as<For>()) return hoistAtLoop(*loop, stmt);
  return withChildren(stmt, hoist);
}

}  // namespace

Program hoistRowValues(const Program& program) {
  Program result = program;
  for (Function& function : result.functions) function.body = hoist(function.body);
  return result;
}

}  // namespace emmy::kernel
