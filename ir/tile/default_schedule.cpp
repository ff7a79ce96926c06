// Loop IR -> Tile IR with the default schedule.
//
//  - A nest with no reduction (elementwise or broadcast work): its loops are fused into one flat loop
//    over every element, shared out across the whole grid.
//  - Any other nest is a row kernel: the root's loops above its first computed-in-place reduction
//    (all of them, for a reduction root) are fused into rows, one block per row. A reduction at that
//    level is cooperative: the block's threads stride over its axes, each folding a partial result,
//    and a cross-thread combine gives every thread the total. The root's loops below the rows are fused
//    and strided over the threads; whatever lies inside them runs serially in each thread.
//  - Rank-0 results run as one row (one block) or one element.
#include "ir/tile/default_schedule.h"

#include <set>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "support/diagnostics.h"

namespace emmy::tile {

using namespace tensor;

namespace {

constexpr int kThreadsPerBlock = 256;

// A chain of directly nested Loop IR loops, fused into one.
struct Fused {
  std::vector<const loop::For*> loops;
  const loop::Stmt* body;  // inside the innermost
};

// Lets that recover each fused loop's variable from the fused one (row-major, last fastest).
std::vector<StmtPtr> unflatten(const std::string& fusedVar, const std::vector<const loop::For*>& loops) {
  std::vector<StmtPtr> lets;
  ExprPtr stride;  // product of the extents after the current loop
  std::vector<ExprPtr> strides(loops.size());
  for (size_t k = loops.size(); k-- > 0;) {
    strides[k] = stride;
    ExprPtr extent = dimValue(loops[k]->extent);
    stride = stride ? std::make_shared<Binary>(DType::I64, BinaryOp::Mul, extent, stride) : extent;
  }
  for (size_t k = 0; k < loops.size(); ++k) {
    ExprPtr value = std::make_shared<AxisVar>(fusedVar);
    if (strides[k]) value = std::make_shared<Binary>(DType::I64, BinaryOp::Div, value, strides[k]);
    if (k > 0) value = std::make_shared<Binary>(DType::I64, BinaryOp::Mod, value, dimValue(loops[k]->extent));
    lets.push_back(std::make_shared<Let>(loops[k]->var, value));
  }
  return lets;
}

ExprPtr totalExtent(const std::vector<const loop::For*>& loops) {
  Dim total = Dim::constant(1);
  for (const loop::For* loop : loops) total = total * loop->extent;
  return dimValue(total);
}

class DefaultScheduler {
public:
  explicit DefaultScheduler(const loop::Program& program) : program_(program) {}

  TileNest schedule(const loop::LoopNest& nest) {
    root_ = program_.source.findStage(nest.stages.back());
    collectLoopVars(*nest.body);
    EMMY_INTERNAL_ASSERT(root_ != nullptr, "nest {} has no root stage", nest.name);
    bool reduces = nest.stages.size() > 1 || root_->reduction.has_value();
    // The root's loops down to the first Allocate (a stage computed in place) or to the root itself.
    Fused rows = pureRootLoops(*nest.body);
    std::string var = uniqueVar(reduces ? "row" : "element");
    std::vector<StmtPtr> body = unflatten(var, rows.loops);
    body.push_back(reduces ? rowLevel(*rows.body) : threadLevel(*rows.body));
    std::vector<std::string> axes;
    for (const loop::For* loop : rows.loops) axes.push_back(loop->stage + "." + loop->axis);
    StmtPtr top = std::make_shared<Loop>(var, totalExtent(rows.loops),
                                         reduces ? Binding::BlockStrided : Binding::GridStrided, axes,
                                         std::make_shared<Block>(body));
    return TileNest{nest.name, nest.stages, kThreadsPerBlock, top};
  }

private:
  bool isPureRootLoop(const loop::Stmt& stmt) const {
    const auto* loop = stmt.as<loop::For>();
    if (!loop || loop->stage != root_->name) return false;
    for (const Axis& axis : root_->axes)
      if (axis.name == loop->axis) return true;
    return false;
  }

  Fused pureRootLoops(const loop::Stmt& stmt) const {
    Fused fused{{}, &stmt};
    while (isPureRootLoop(*fused.body)) {
      const auto* loop = fused.body->as<loop::For>();
      fused.loops.push_back(loop);
      fused.body = loop->body.get();
    }
    return fused;
  }

  void collectLoopVars(const loop::Stmt& stmt) {
    loop::dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, loop::For>) {
        taken_.insert(node.var);
        collectLoopVars(*node.body);
      } else if constexpr (std::is_same_v<Node, loop::Allocate>) {
        collectLoopVars(*node.body);
      } else if constexpr (std::is_same_v<Node, loop::Block>) {
        for (const loop::StmtPtr& inner : node.stmts) collectLoopVars(*inner);
      }
    });
  }

  // A loop variable name no other loop of the nest uses.
  std::string uniqueVar(const std::string& base) {
    std::string name = base;
    for (int k = 1; taken_.count(name) || program_.source.findStage(name); ++k) name = fmt::format("{}_{}", base, k);
    taken_.insert(name);
    return name;
  }

  // Statements at the level of a row: every thread of the block runs them together.
  StmtPtr rowLevel(const loop::Stmt& stmt) {
    if (const auto* block = stmt.as<loop::Block>()) {
      std::vector<StmtPtr> stmts;
      for (const loop::StmtPtr& inner : block->stmts) {
        stmts.push_back(rowLevel(*inner));
        if (const auto* reduction = inner->as<loop::For>(); reduction && !isPureRootLoop(*inner))
          stmts.push_back(combineAfter(*reduction));
      }
      return std::make_shared<Block>(stmts);
    }
    if (const auto* allocate = stmt.as<loop::Allocate>())
      return std::make_shared<Allocate>(allocate->buffer, allocate->dtype, allocate->shape, MemoryScope::Registers,
                                        rowLevel(*allocate->body));
    if (const auto* store = stmt.as<loop::Store>()) {
      StmtPtr copy = std::make_shared<Store>(store->buffer, store->indices, store->value);
      // A result every thread holds is written to global memory once.
      return store->indices.empty() && isLocal(store->buffer) ? copy : std::make_shared<SingleThread>(copy);
    }
    const auto* loop = stmt.as<loop::For>();
    EMMY_INTERNAL_ASSERT(loop != nullptr, "unexpected Loop IR statement at row level");
    // The root's loops below the rows, or a reduction's loops: fused and strided over the threads.
    Fused fused{{}, &stmt};
    const std::string stage = loop->stage;
    bool pure = isPureRootLoop(stmt);
    while (const auto* inner = fused.body->as<loop::For>()) {
      if (inner->stage != stage || isPureRootLoop(*inner) != pure) break;
      fused.loops.push_back(inner);
      fused.body = inner->body.get();
    }
    std::string var = uniqueVar(pure ? "element" : "part");
    std::vector<StmtPtr> body = unflatten(var, fused.loops);
    body.push_back(threadLevel(*fused.body));
    std::vector<std::string> axes;
    for (const loop::For* inner : fused.loops) axes.push_back(inner->stage + "." + inner->axis);
    return std::make_shared<Loop>(var, totalExtent(fused.loops), Binding::ThreadStrided, axes,
                                  std::make_shared<Block>(body));
  }

  // The combine after a cooperative reduction loop: its accumulator is the buffer its update stores.
  StmtPtr combineAfter(const loop::For& reduction) {
    const loop::Stmt* body = reduction.body.get();
    while (const auto* inner = body->as<loop::For>()) body = inner->body.get();
    const auto* update = body->as<loop::Store>();
    EMMY_INTERNAL_ASSERT(update != nullptr, "reduction loop over {}.{} does not end in its update", reduction.stage,
                         reduction.axis);
    const Stage* stage = program_.source.findStage(reduction.stage);
    return std::make_shared<CrossThreadReduce>(update->buffer, stage->reduction->accumulator, stage->reduction->op);
  }

  // Statements inside a thread's own loop: copied, every loop serial.
  StmtPtr threadLevel(const loop::Stmt& stmt) {
    return loop::dispatch(stmt, [&](const auto& node) -> StmtPtr { return threadNode(node); });
  }
  StmtPtr threadNode(const loop::For& node) {
    return std::make_shared<Loop>(node.var, dimValue(node.extent), Binding::Serial,
                                  std::vector<std::string>{node.stage + "." + node.axis}, threadLevel(*node.body));
  }
  StmtPtr threadNode(const loop::Allocate& node) {
    return std::make_shared<Allocate>(node.buffer, node.dtype, node.shape, MemoryScope::Registers,
                                      threadLevel(*node.body));
  }
  StmtPtr threadNode(const loop::Store& node) { return std::make_shared<Store>(node.buffer, node.indices, node.value); }
  StmtPtr threadNode(const loop::Block& node) {
    std::vector<StmtPtr> stmts;
    for (const loop::StmtPtr& inner : node.stmts) stmts.push_back(threadLevel(*inner));
    return std::make_shared<Block>(stmts);
  }

  bool isLocal(const std::string& buffer) const {
    for (const loop::Temporary& temporary : program_.temporaries)
      if (temporary.name == buffer) return false;
    for (const TensorParam& output : program_.source.outputs)
      if (output.name == buffer) return false;
    return true;
  }

  const loop::Program& program_;
  const Stage* root_ = nullptr;
  std::set<std::string> taken_;  // loop variables in use
};

}  // namespace

Program scheduleDefault(const loop::Program& program) {
  Program tiled{program.source, program.temporaries, {}};
  for (const loop::LoopNest& nest : program.kernels) tiled.kernels.push_back(DefaultScheduler(program).schedule(nest));
  return tiled;
}

}  // namespace emmy::tile
