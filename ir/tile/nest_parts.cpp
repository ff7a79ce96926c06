#include "ir/tile/nest_parts.h"

#include <algorithm>

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
  parts.root = parseComputation(*level, root);
}

}  // namespace

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

}  // namespace emmy::tile
