#include "ir/tile/nest_parts.h"

#include <algorithm>
#include <limits>
#include <map>

#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "support/diagnostics.h"

namespace emmy::tile {

using namespace tensor;

namespace {

Computation parseComputation(const loop::Stmt& stmt, const Stage& stage) {
  Computation computation;
  computation.stage = &stage;
  if ((computation.store = stmt.as<loop::Store>())) return computation;
  const auto* accumulator = stmt.as<loop::Allocate>();
  const auto* steps = accumulator ? accumulator->body->as<loop::Block>() : nullptr;
  EMMY_INTERNAL_ASSERT(steps && steps->stmts.size() == 3, "the Loop IR of stage {} is not a store or a reduction", stage.name);
  computation.accumulator = accumulator->buffer;
  computation.accumulatorType = accumulator->dtype;
  computation.init = steps->stmts[0]->as<loop::Store>();
  const loop::Stmt* inner = steps->stmts[1].get();
  while (const auto* loop = inner->as<loop::For>()) {
    computation.reductionLoops.push_back(loop);
    inner = loop->body.get();
  }
  computation.update = inner->as<loop::Store>();
  computation.finalize = steps->stmts[2]->as<loop::Store>();
  EMMY_INTERNAL_ASSERT(computation.init && computation.update && computation.finalize,
                       "the reduction of stage {} has an unexpected shape in Loop IR", stage.name);
  return computation;
}

void parseLevel(const loop::Stmt& stmt, size_t depth, const Kernel& kernel, const loop::LoopNest& nest, const Stage& root,
                NestParts& parts) {
  const loop::Stmt* level = &stmt;
  while (const auto* local = level->as<loop::Allocate>()) {
    bool member = local->buffer != root.name &&
                  std::find(nest.stages.begin(), nest.stages.end(), local->buffer) != nest.stages.end();
    if (!member) break;
    const auto* scope = local->body->as<loop::Block>();
    EMMY_INTERNAL_ASSERT(scope && scope->stmts.size() == 2, "member {} has an unexpected shape in Loop IR", local->buffer);
    const Stage& stage = *kernel.findStage(local->buffer);
    if (local->shape.empty()) {
      parts.members.push_back({parseComputation(*scope->stmts[0], stage), depth});
    } else {
      WholeMember whole;
      const loop::Stmt* element = scope->stmts[0].get();
      for (size_t d = 0; d < stage.axes.size(); ++d) {
        const auto* loop = element->as<loop::For>();
        EMMY_INTERNAL_ASSERT(loop != nullptr, "whole member {} has an unexpected shape in Loop IR", stage.name);
        whole.axisVars.push_back(loop->var);
        element = loop->body.get();
      }
      whole.computation = parseComputation(*element, stage);
      parts.wholes.push_back(whole);
    }
    level = scope->stmts[1].get();
  }
  if (const auto* loop = level->as<loop::For>();
      loop && loop->stage == root.name && depth < root.axes.size() && loop->axis == root.axes[depth].name) {
    parts.rootVars.push_back(loop->var);
    parseLevel(*loop->body, depth + 1, kernel, nest, root, parts);
    return;
  }
  if (const auto* stores = level->as<loop::Block>()) {
    for (size_t k = 0; k + 1 < stores->stmts.size(); ++k) {
      const auto* store = stores->stmts[k]->as<loop::Store>();
      EMMY_INTERNAL_ASSERT(store != nullptr, "a companion of {} is not a store in Loop IR", root.name);
      parts.companions.push_back(parseComputation(*store, *kernel.findStage(store->buffer)));
    }
    level = stores->stmts.back().get();
  }
  parts.root = parseComputation(*level, root);
}

// exp(X - M) with X free of M (M read as it is, or widened: f32(M) of an f16 M): X.
ExprPtr exponentOver(const ExprPtr& expr, const std::string& max) {
  const auto* exp = expr->as<Unary>();
  const auto* difference = exp && exp->op == UnaryOp::Exp ? exp->operand->as<Binary>() : nullptr;
  if (!difference || difference->op != BinaryOp::Sub) return nullptr;
  const auto* cast = difference->rhs->as<Cast>();
  const auto* load = (cast ? cast->operand : difference->rhs)->as<Load>();
  if (!load || load->tensor != max || reads(*difference->lhs, max)) return nullptr;
  return difference->lhs;
}

}  // namespace

ExprPtr termOver(const ExprPtr& term, const std::string& max, const ExprPtr& shiftedMax) {
  // A bounded sum's (`sum[l < s + 1]`, Tensor IR's where(l < s + 1, term, 0)): the term where it holds.
  if (term->as<Select>()) {
    std::optional<MaskedTerm> masked = maskedTerm(term, ReduceOp::Sum);
    if (!masked || reads(*masked->condition, max)) return nullptr;
    ExprPtr inner = termOver(masked->value, max, shiftedMax);
    return inner ? std::make_shared<Select>(masked->condition, inner, term->as<Select>()->ifFalse) : nullptr;
  }
  // exp(X - shiftedMax), approximated where the term's own exp was (approximate_exponentials.h).
  auto shifted = [&](const ExprPtr& exp, const ExprPtr& exponent) -> ExprPtr {
    auto difference = std::make_shared<Binary>(exponent->dtype, BinaryOp::Sub, exponent, shiftedMax);
    return std::make_shared<Unary>(exponent->dtype, UnaryOp::Exp, difference, exp->as<Unary>()->approximate);
  };
  if (ExprPtr exponent = exponentOver(term, max)) return shifted(term, exponent);
  const auto* product = term->as<Binary>();
  if (!product || product->op != BinaryOp::Mul) return nullptr;
  for (const auto& [weight, factor] : {std::pair{product->lhs, product->rhs}, std::pair{product->rhs, product->lhs}})
    if (ExprPtr exponent = exponentOver(weight, max); exponent && !reads(*factor, max))
      return std::make_shared<Binary>(term->dtype, BinaryOp::Mul, shifted(weight, exponent), factor);
  return nullptr;
}

ExprPtr reductionTerm(const Computation& computation) {
  const auto* step = computation.update->value->as<Binary>();
  const auto* current = step ? step->lhs->as<Load>() : nullptr;
  return current && current->tensor == computation.accumulator ? step->rhs : nullptr;
}

ExprPtr overLoops(const ExprPtr& expr, const Computation& computation, const std::vector<const loop::For*>& loops) {
  if (computation.reductionLoops.size() != loops.size()) return nullptr;
  std::map<std::string, std::string> renamed;
  for (size_t k = 0; k < loops.size(); ++k) {
    if (!(computation.reductionLoops[k]->extent == loops[k]->extent)) return nullptr;
    renamed[computation.reductionLoops[k]->var] = loops[k]->var;
  }
  return rewrite(expr, [&](const Expr& node) -> ExprPtr {
    const auto* axis = node.as<AxisVar>();
    if (!axis || !renamed.count(axis->name)) return nullptr;
    return std::make_shared<AxisVar>(renamed.at(axis->name));
  });
}

bool reads(const Expr& expr, const std::string& tensor) {
  bool found = false;
  forEachNode(expr, [&](const Expr& node) {
    if (const auto* load = node.as<Load>(); load && load->tensor == tensor) found = true;
  });
  return found;
}

NestParts parseNest(const Kernel& kernel, const loop::LoopNest& nest) {
  NestParts parts;
  parseLevel(*nest.body, 0, kernel, nest, *kernel.findStage(nest.stages.back()), parts);
  return parts;
}

const Member* epilogueReduction(const NestParts& parts) {
  const Stage& root = *parts.root.stage;
  if (root.reduction) return nullptr;
  const Member* found = nullptr;
  for (const Member& member : parts.members) {
    const Stage& stage = *member.computation.stage;
    if (member.depth != root.axes.size() || !stage.reduction) continue;
    if (found) return nullptr;
    found = &member;
  }
  if (!found) return nullptr;
  for (const Axis& axis : found->computation.stage->reduction->axes)
    for (const Axis& rootAxis : root.axes)
      if (axis.name == rootAxis.name) return nullptr;
  return found;
}

Computation withEpilogue(const NestParts& parts, const Member& folded, std::shared_ptr<loop::Store>& finalize) {
  const Computation& reduction = folded.computation;
  const loop::Store& store = *parts.root.store;
  const std::string& result = reduction.stage->name;
  ExprPtr value = rewrite(store.value, [&](const Expr& node) -> ExprPtr {
    const auto* load = node.as<Load>();
    return load && load->tensor == result ? reduction.finalize->value : nullptr;
  });
  finalize = std::make_shared<loop::Store>(store.buffer, store.indices, value);
  Computation computation = reduction;
  computation.stage = parts.root.stage;
  computation.finalize = finalize.get();
  return computation;
}

bool reads(const Computation& computation, const std::string& tensor) {
  for (const loop::Store* store : {computation.store, computation.update, computation.finalize})
    if (store && reads(*store->value, tensor)) return true;
  return false;
}

ExprPtr shiftedMaximum(const ExprPtr& max) {
  ExprPtr isEmpty = std::make_shared<Binary>(DType::Bool, BinaryOp::Eq, max, immediate(max->dtype, -std::numeric_limits<double>::infinity()));
  return std::make_shared<Select>(isEmpty, immediate(max->dtype, 0), max);
}

ExprPtr rescaleFactor(const ExprPtr& running, const ExprPtr& next, bool approximate) {
  return std::make_shared<Unary>(running->dtype, UnaryOp::Exp,
                                 std::make_shared<Binary>(running->dtype, BinaryOp::Sub, running, shiftedMaximum(next)), approximate);
}

bool approximatesExp(const Expr& term) {
  bool found = false;
  forEachNode(term, [&](const Expr& node) {
    const auto* exp = node.as<Unary>();
    found = found || (exp && exp->op == UnaryOp::Exp && exp->approximate);
  });
  return found;
}

std::optional<OnlineSoftmax> onlineSoftmax(const NestParts& parts, const Member& folded) {
  const Computation& root = folded.computation;
  if (root.stage->reduction->op != ReduceOp::Sum) return std::nullopt;
  ExprPtr rootTerm = reductionTerm(root);
  if (!rootTerm) return std::nullopt;
  for (const Member& candidate : parts.members) {
    const Computation& max = candidate.computation;
    const Stage& maxStage = *max.stage;
    if (!maxStage.reduction || maxStage.reduction->op != ReduceOp::Max || !reads(*rootTerm, maxStage.name)) continue;
    OnlineSoftmax online;
    online.max = max;
    if (max.accumulatorType != root.accumulatorType) return std::nullopt;
    online.shiftedMax = shiftedMaximum(std::make_shared<Load>(max.accumulatorType, max.accumulator, std::vector<ExprPtr>{}));
    ExprPtr maxTerm = reductionTerm(max);
    online.maxOf = maxTerm ? overLoops(maxTerm, max, root.reductionLoops) : nullptr;
    online.rootTerm = termOver(rootTerm, maxStage.name, online.shiftedMax);
    if (!online.maxOf || !online.rootTerm || reads(*parts.root.store->value, maxStage.name)) return std::nullopt;
    online.approximate = approximatesExp(*online.rootTerm);
    for (const WholeMember& whole : parts.wholes)
      if (reads(whole.computation, maxStage.name)) return std::nullopt;
    for (const Member& other : parts.members) {
      const Computation& sum = other.computation;
      if (&other == &candidate || &other == &folded || !reads(sum, maxStage.name)) continue;
      // Another sum of the same form, which only the root reads.
      ExprPtr term = sum.stage->reduction && sum.stage->reduction->op == ReduceOp::Sum ? reductionTerm(sum) : nullptr;
      term = term ? overLoops(term, sum, root.reductionLoops) : nullptr;
      term = term ? termOver(term, maxStage.name, online.shiftedMax) : nullptr;
      if (!term || sum.accumulatorType != root.accumulatorType || reads(*rootTerm, sum.stage->name)) return std::nullopt;
      for (const Member& reader : parts.members)
        if (reads(reader.computation, sum.stage->name)) return std::nullopt;
      online.sums.push_back(sum);
      online.sumTerms.push_back(term);
    }
    return online;
  }
  return std::nullopt;
}

}  // namespace emmy::tile
