// Loop IR -> Tile IR following a kernel's schedule.
//
// A nest's root stage runs its loops in the order and with the bindings its schedule gives. Every axis
// is a Let of the loops it was split or fused into, emitted as soon as they are all open; a split whose
// factor does not divide leaves a ragged tail, guarded where it becomes known. Members (stages computed
// in place) are computed where `compute ... at` puts them, or as soon as the root's axes they need are
// known. A reduction accumulates in registers shaped by the root's pure loops inside its scope (the
// loop a `cache R in registers at R.a` names, or the one outside the first reduction loop): initialised
// there, updated in the loops, combined across threads when a reduction loop is bound to thread.x or
// warp.x, and stored by replaying the pure loops. A `cache S in shared|registers at R.a` copies the part
// of S the root reads inside loop a (by the whole block, or by each thread) and the root reads the copy.
//
// A ragged tail that depends on the thread's index cannot be a condition around work that needs every
// thread of the block (a combine, a shared copy): there, the axis is clamped into range instead and the
// stores to global memory and to accumulators are masked.
#include "ir/tile/apply_schedule.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"
#include "ir/tensor/simplify.h"
#include "ir/tile/nest_parts.h"
#include "support/text.h"

namespace emmy::tile {

using namespace tensor;

namespace {

ExprPtr i64(int64_t value) { return std::make_shared<IntImm>(DType::I64, value); }
ExprPtr var(const std::string& name) { return std::make_shared<AxisVar>(name); }
ExprPtr arithmetic(BinaryOp op, ExprPtr a, ExprPtr b) {
  return simplifyIndex(std::make_shared<Binary>(DType::I64, op, std::move(a), std::move(b)));
}
ExprPtr compare(BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, op, std::move(a), std::move(b)); }
ExprPtr conjunction(const std::vector<ExprPtr>& terms) {
  ExprPtr all;
  for (const ExprPtr& term : terms) all = all ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, all, term) : term;
  return all;
}
StmtPtr block(std::vector<StmtPtr> stmts) { return std::make_shared<Block>(std::move(stmts)); }

ExprPtr substitute(const ExprPtr& expr, const std::map<std::string, ExprPtr>& values) {
  return simplifyIndex(rewrite(expr, [&](const Expr& node) -> ExprPtr {
    const auto* axis = node.as<AxisVar>();
    if (!axis) return nullptr;
    auto value = values.find(axis->name);
    return value == values.end() ? nullptr : value->second;
  }));
}

// The block size of a kernel that initialises an output.
constexpr int kInitThreads = 256;

// Thrown after a diagnostic to give up on the current nest.
struct NestAbandoned {};

// ---- A stage's loops after its schedule ----

struct FinalLoop {
  const ScheduledLoop* scheduled;
  std::string var;
  ExprPtr extent;
};

// A split that does not divide: `condition` (value < extent) holds in the iterations that exist.
struct Tail {
  std::string parent;
  bool isAxis;          // the parent is an axis of the stage
  bool reduction;
  ExprPtr condition;
  std::set<std::string> loops;  // the final loops it depends on
  // The innermost of them: a tail is tested at every loop, and until this one is open the test fails at
  // once (testing the whole set each time would make a chain of splits cubic).
  std::string innermost;
};

struct StageLoops {
  std::vector<FinalLoop> loops;
  std::map<std::string, ExprPtr> values;              // axes and intermediate loops, over final loop variables
  std::map<std::string, ExprPtr> extents;             // of every axis and loop
  std::map<std::string, std::set<std::string>> loopsOf;  // the final loops each value depends on
  std::map<std::string, size_t> innermostOf;             // the position of the innermost of them
  std::vector<Tail> tails;
  std::map<std::string, std::string> axisVars;        // each axis's Loop IR variable
  std::vector<std::string> axisOrder;                 // pure axes, then reduction axes
};

// Stage loops from `schedule`. `axisVars` names the Loop IR variable of each axis; `uniqueVar` names a
// final loop that is not an axis.
StageLoops buildStageLoops(const StageSchedule& schedule, const Stage& stage, std::map<std::string, std::string> axisVars,
                           const std::function<std::string(const std::string&)>& uniqueVar) {
  StageLoops result;
  result.axisVars = std::move(axisVars);
  std::map<std::string, bool> reduction;
  for (const Axis& axis : stage.axes) {
    result.extents[axis.name] = dimValue(axis.extent);
    reduction[axis.name] = false;
    result.axisOrder.push_back(axis.name);
  }
  if (stage.reduction)
    for (const Axis& axis : stage.reduction->axes) {
      result.extents[axis.name] = dimValue(axis.extent);
      reduction[axis.name] = true;
      result.axisOrder.push_back(axis.name);
    }
  std::set<std::string> replaced;
  for (const LoopDerivation& derivation : schedule.derivations) {
    replaced.insert(derivation.from.begin(), derivation.from.end());
    const std::string& first = derivation.from[0];
    if (derivation.factor > 0) {
      ExprPtr extent = result.extents.at(first);
      result.extents[derivation.to[0]] =
          arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, extent, i64(derivation.factor - 1)), i64(derivation.factor));
      result.extents[derivation.to[1]] = i64(derivation.factor);
      reduction[derivation.to[0]] = reduction[derivation.to[1]] = reduction.at(first);
    } else {
      result.extents[derivation.to[0]] =
          arithmetic(BinaryOp::Mul, result.extents.at(first), result.extents.at(derivation.from[1]));
      reduction[derivation.to[0]] = reduction.at(first);
    }
  }
  for (const ScheduledLoop& loop : schedule.loops) {
    bool axis = result.axisVars.count(loop.name) && !replaced.count(loop.name);
    std::string name = axis ? result.axisVars.at(loop.name) : uniqueVar(loop.name);
    result.loops.push_back({&loop, name, result.extents.at(loop.name)});
    result.values[loop.name] = var(name);
    result.loopsOf[loop.name] = {loop.name};
    result.innermostOf[loop.name] = result.loops.size() - 1;
  }
  for (auto derivation = schedule.derivations.rbegin(); derivation != schedule.derivations.rend(); ++derivation) {
    if (derivation->factor > 0) {
      const std::string &parent = derivation->from[0], &outer = derivation->to[0], &inner = derivation->to[1];
      result.values[parent] = arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, result.values.at(outer), i64(derivation->factor)),
                                         result.values.at(inner));
      std::set<std::string> loops = result.loopsOf.at(outer);
      loops.insert(result.loopsOf.at(inner).begin(), result.loopsOf.at(inner).end());
      result.loopsOf[parent] = loops;
      result.innermostOf[parent] = std::max(result.innermostOf.at(outer), result.innermostOf.at(inner));
      const auto* extent = result.extents.at(parent)->as<IntImm>();
      if (derivation->factor > 1 && (!extent || extent->value % derivation->factor != 0))  // 1 divides anything
        result.tails.push_back({parent, result.axisVars.count(parent) > 0, reduction.at(parent),
                                compare(BinaryOp::Lt, result.values.at(parent), result.extents.at(parent)), loops,
                                result.loops[result.innermostOf.at(parent)].scheduled->name});
    } else {
      const std::string &a = derivation->from[0], &b = derivation->from[1], &fused = derivation->to[0];
      result.values[a] = arithmetic(BinaryOp::Div, result.values.at(fused), result.extents.at(b));
      result.values[b] = arithmetic(BinaryOp::Mod, result.values.at(fused), result.extents.at(b));
      result.loopsOf[a] = result.loopsOf[b] = result.loopsOf.at(fused);
      result.innermostOf[a] = result.innermostOf[b] = result.innermostOf.at(fused);
    }
  }
  return result;
}

bool includes(const std::set<std::string>& open, const std::set<std::string>& needed) {
  return std::includes(open.begin(), open.end(), needed.begin(), needed.end());
}

// Bound to thread.* or warp.x: each thread runs the iteration at its own index.
bool boundToThreads(const ScheduledLoop& loop) {
  return loop.binding && (loop.binding->scope == HardwareScope::Thread || loop.binding->scope == HardwareScope::Warp);
}
bool boundToGrid(const ScheduledLoop& loop) { return loop.binding && loop.binding->scope == HardwareScope::Grid; }

// ---- One nest ----

class NestScheduler {
public:
  NestScheduler(const loop::Program& program, const loop::LoopNest& nest, const ScheduleModel& model, Diagnostics& diagnostics)
      : kernel_(program.source), nest_(nest), model_(model), diagnostics_(diagnostics) {}

  TileNest run() {
    root_ = kernel_.findStage(nest_.stages.back());
    parts_ = parseNest(kernel_, nest_);
    if (const Member* folded = epilogueReduction(parts_)) {
      online_ = onlineSoftmax(parts_, *folded);
      foldEpilogue(*folded);
    }
    collectTaken(*nest_.body);
    if (online_) foldOnlineSoftmax();
    for (const std::string& stage : nest_.stages)
      for (const ScheduledLoop& loop : model_.stages.at(stage).loops) {
        if (boundToThreads(loop)) threads_[loop.binding->scope == HardwareScope::Warp ? 0 : loop.binding->dimension] = *loop.extent;
        if (boundToGrid(loop)) threads_[0] = static_cast<int>(model_.stages.at(stage).threads.value_or(kGridThreads));
      }
    std::map<std::string, std::string> axisVars;
    for (size_t d = 0; d < root_->axes.size(); ++d) axisVars[root_->axes[d].name] = parts_.rootVars[d];
    for (const loop::For* loop : parts_.root.reductionLoops) axisVars[loop->axis] = loop->var;
    root_loops_ = buildStageLoops(model_.stages.at(root_->name), *root_, axisVars, [&](const std::string& n) { return uniqueVar(n); });
    placeMembers();
    placeCaches();
    placeAccumulator();
    placeMembersOfResults();
    StmtPtr body = generate(0, {}, {});
    return TileNest{nest_.name, nest_.stages, threads_, body};
  }

  // A root whose partial results are combined by atomics: a kernel before it that sets every element of
  // its output to the reduction's identity.
  std::optional<TileNest> outputInit() const {
    if (!atomic_) return std::nullopt;
    Shape shape = root_->shape();
    ExprPtr elements = i64(1);
    for (const Dim& dim : shape) elements = arithmetic(BinaryOp::Mul, elements, dimValue(dim));
    std::vector<ExprPtr> indices;
    ExprPtr stride = i64(1);
    for (size_t d = shape.size(); d-- > 0;) {
      indices.insert(indices.begin(), arithmetic(BinaryOp::Mod, arithmetic(BinaryOp::Div, var("element"), stride), dimValue(shape[d])));
      stride = arithmetic(BinaryOp::Mul, stride, dimValue(shape[d]));
    }
    ExprPtr identity = immediateOf(reductionIdentity(root_->reduction->op, root_->dtype));
    StmtPtr body = std::make_shared<Loop>("element", elements, Binding::GridStrided, std::vector<std::string>{},
                                          std::make_shared<Store>(parts_.root.finalize->buffer, indices, identity));
    return TileNest{nest_.name + "_init", {root_->name}, {kInitThreads, 1, 1}, body};
  }

private:
  // The root computes `folded` as its reduction and applies its own expression to each result.
  void foldEpilogue(const Member& folded) {
    rootWithReduction_ = *root_;
    rootWithReduction_.reduction = folded.computation.stage->reduction;
    root_ = &rootWithReduction_;
    parts_.root = withEpilogue(parts_, folded, epilogueStore_);
    parts_.root.stage = root_;
    parts_.members.erase(parts_.members.begin() + (&folded - parts_.members.data()));
  }

  // The softmax's maximum and sums are computed in the root's reduction loops (nest_parts.h,
  // OnlineSoftmax): each step takes the new running maximum and the factor `rescale_` by which it
  // multiplies every sum so far, then adds its term.
  void foldOnlineSoftmax() {
    auto folded = [&](const Member& member) {
      const Stage* stage = member.computation.stage;
      return stage == online_->max.stage || std::any_of(online_->sums.begin(), online_->sums.end(),
                                                        [&](const Computation& sum) { return sum.stage == stage; });
    };
    parts_.members.erase(std::remove_if(parts_.members.begin(), parts_.members.end(), folded), parts_.members.end());
    nextMax_ = uniqueVar(online_->max.stage->name + "__next");
    rescale_ = uniqueVar(root_->name + "__rescale");
    const Computation& root = parts_.root;
    ExprPtr accumulated = std::make_shared<Load>(root.accumulatorType, root.accumulator, std::vector<ExprPtr>{});
    onlineUpdate_ = std::make_shared<loop::Store>(root.update->buffer, root.update->indices, rescaled(accumulated, online_->rootTerm));
    parts_.root.update = onlineUpdate_.get();
  }

  // sum * rescale + term
  ExprPtr rescaled(const ExprPtr& sum, const ExprPtr& term) const {
    ExprPtr factor = std::make_shared<Load>(sum->dtype, rescale_, std::vector<ExprPtr>{});
    return std::make_shared<Binary>(sum->dtype, BinaryOp::Add, std::make_shared<Binary>(sum->dtype, BinaryOp::Mul, sum, factor), term);
  }

  // The online softmax's step, once per iteration of the reduction loops, before `rest` (which adds the
  // root's term): the running maximum, the rescale factor, and the other sums.
  StmtPtr onlineStep(StmtPtr rest) {
    const Computation& max = online_->max;
    DType type = max.accumulatorType;
    auto local = [&](const std::string& name) { return std::make_shared<Load>(type, name, std::vector<ExprPtr>{}); };
    ExprPtr running = local(max.accumulator), next = local(nextMax_);
    std::vector<StmtPtr> stmts{
        std::make_shared<Store>(nextMax_, std::vector<ExprPtr>{},
                                std::make_shared<Binary>(type, BinaryOp::Max, running, rootExpr(online_->maxOf))),
        std::make_shared<Store>(rescale_, std::vector<ExprPtr>{},
                                std::make_shared<Unary>(type, UnaryOp::Exp, std::make_shared<Binary>(type, BinaryOp::Sub, running,
                                                                                                    shiftedMaximum(next)))),
        std::make_shared<Store>(max.accumulator, std::vector<ExprPtr>{}, next)};
    for (size_t k = 0; k < online_->sums.size(); ++k) {
      const std::string& sum = online_->sums[k].accumulator;
      stmts.push_back(std::make_shared<Store>(sum, std::vector<ExprPtr>{}, rescaled(local(sum), rootExpr(online_->sumTerms[k]))));
    }
    stmts.push_back(rest);
    return std::make_shared<Allocate>(nextMax_, type, std::vector<Dim>{}, MemoryScope::Registers,
                                      std::make_shared<Allocate>(rescale_, type, std::vector<Dim>{}, MemoryScope::Registers, block(stmts)));
  }

  // The running maximum and the sums live beside the root's accumulators, one of each per thread: every
  // loop over an axis they depend on is outside the accumulators' scope or bound to threads, and every
  // other loop in the scope is inside the reduction loops, where the step runs once per iteration.
  void placeOnlineSoftmax() {
    const std::vector<FinalLoop>& loops = root_loops_.loops;
    std::string names = online_->max.stage->name;
    for (const Computation& sum : online_->sums) names += ", " + sum.stage->name;
    for (const FinalLoop& loop : loops)
      if (loop.scheduled->reduction && boundToThreads(*loop.scheduled))
        unsupported(loop.scheduled->boundAt, fmt::format("bind {}.{} to {}: the softmax of {} ({}) is computed online in its "
                                                         "reduction loops, whose partial results cannot be combined across threads",
                                                         root_->name, loop.scheduled->name, hardwareIndexName(*loop.scheduled->binding),
                                                         root_->name, names));
    size_t rowDepth = online_->max.stage->axes.size();
    for (const Computation& sum : online_->sums) rowDepth = std::max(rowDepth, sum.stage->axes.size());
    size_t last = 0;
    for (size_t k = 0; k < loops.size(); ++k)
      if (loops[k].scheduled->reduction) last = k;
    for (size_t k = accumulatorPosition_; k < loops.size(); ++k) {
      const ScheduledLoop& loop = *loops[k].scheduled;
      if (loop.reduction || boundToThreads(loop)) continue;
      bool rowLoop = false;
      for (size_t d = 0; d < rowDepth; ++d) rowLoop = rowLoop || root_loops_.loopsOf.at(root_->axes[d].name).count(loop.name);
      if (rowLoop || k < last)
        unsupported(directiveAbout(root_->name),
                    fmt::format("{}: its softmax ({}) is computed online, once per iteration of its reduction loops, so "
                                "{}.{} must be {}", root_->name, names, root_->name, loop.name,
                                rowLoop ? "outside the accumulators' loops or bound to threads" : "inside its last reduction loop"));
    }
    onlinePosition_ = last + 1;
  }

  // ---- placement ----

  [[noreturn]] void unsupported(const SourceLoc& loc, const std::string& message) { cannot(loc, message + " (not supported yet)"); }

  // A schedule that asks for what no code can do.
  [[noreturn]] void cannot(const SourceLoc& loc, const std::string& message) {
    diagnostics_.error(loc, message);
    throw NestAbandoned{};
  }

  // Where a directive about `stage` was written, for diagnostics that belong to no one directive.
  SourceLoc directiveAbout(const std::string& stage) const {
    for (const Directive& directive : kernel_.schedule)
      if (directive.stage.text == stage || directive.atStage.text == stage) return directive.loc;
    return kernel_.schedule.empty() ? SourceLoc{} : kernel_.schedule.front().loc;
  }

  // The position (number of root loops open) after root loop `name`.
  size_t positionAfter(const std::string& name) const {
    for (size_t k = 0; k < root_loops_.loops.size(); ++k)
      if (root_loops_.loops[k].scheduled->name == name) return k + 1;
    EMMY_INTERNAL_ASSERT(false, "stage {} has no loop {}", root_->name, name);
  }

  // The fewest root loops that define every one of `axes`.
  size_t positionDefining(const std::vector<std::string>& axes) const {
    size_t position = 0;
    for (const std::string& axis : axes)
      for (const std::string& loop : root_loops_.loopsOf.at(axis)) position = std::max(position, positionAfter(loop));
    return position;
  }

  std::set<std::string> openAt(size_t position) const {
    std::set<std::string> open;
    for (size_t k = 0; k < position; ++k) open.insert(root_loops_.loops[k].scheduled->name);
    return open;
  }

  // Each member where `compute ... at` puts it, or else as soon as the root's axes it needs are known
  // and the members it reads are computed.
  void placeMembers() {
    for (const Member& member : parts_.members) {
      const StageSchedule& schedule = model_.stages.at(member.computation.stage->name);
      std::vector<std::string> needed;
      for (size_t d = 0; d < member.depth; ++d) needed.push_back(root_->axes[d].name);
      size_t earliest = positionDefining(needed);
      const Member* lastRead = nullptr;
      for (size_t m = 0; m < memberPositions_.size(); ++m)
        if (reads(member.computation, parts_.members[m].computation.stage->name) && *memberPositions_[m] >= earliest) {
          earliest = *memberPositions_[m];
          lastRead = &parts_.members[m];
        }
      size_t position = earliest;
      if (schedule.placement == Placement::ComputeAt) {
        if (schedule.atStage != root_->name)
          unsupported(schedule.placedAt, fmt::format("compute {} at {}.{}: {} is computed in the kernel of {}", schedule.name,
                                                     schedule.atStage, schedule.atLoop, schedule.name, root_->name));
        position = positionAfter(schedule.atLoop);
        if (position < earliest && lastRead && position >= positionDefining(needed)) {
          const std::string& read = lastRead->computation.stage->name;
          const StageSchedule& readAt = model_.stages.at(read);
          cannot(schedule.placedAt, fmt::format("cannot compute {} at {}.{}: {} reads {}, which is computed at {}.{}, further in",
                                                schedule.name, root_->name, schedule.atLoop, schedule.name, read, root_->name,
                                                readAt.placement == Placement::ComputeAt ? readAt.atLoop
                                                    : root_loops_.loops[earliest - 1].scheduled->name));
        }
        if (position < earliest) {
          diagnostics_.error(schedule.placedAt,
                             fmt::format("cannot compute {} at {}.{}: {} needs the axes {} of {}, which are known only "
                                         "inside {}.{}", schedule.name, root_->name, schedule.atLoop, schedule.name,
                                         join(needed, ", "), root_->name, root_->name,
                                         root_loops_.loops[earliest - 1].scheduled->name));
          throw NestAbandoned{};
        }
      } else if (schedule.placement != Placement::Default) {
        unsupported(schedule.placedAt, fmt::format("{} {}: the kernel computes {} inside {}",
                                                   schedule.placement == Placement::Root ? "root" : "inline", schedule.name,
                                                   schedule.name, root_->name));
      }
      memberPositions_.push_back(position);
    }
    for (const auto& [name, schedule] : model_.stages)
      if (schedule.placement == Placement::ComputeAt && std::find(nest_.stages.begin(), nest_.stages.end(), name) == nest_.stages.end() &&
          schedule.atStage == root_->name)
        unsupported(schedule.placedAt, fmt::format("compute {} at {}.{}: {} is computed by a kernel of its own", name,
                                                   schedule.atStage, schedule.atLoop, name));
  }

  // A member whose root axes are known only inside the accumulators' loops (a register tile's) is
  // computed there, in the reduction loops, but the stores of the results after them read it too (an
  // epilogue's): it is computed again before each result's store, with the members it reads, and only
  // there where nothing in the reduction loops reads it.
  void placeMembersOfResults() {
    if (!root_->reduction) return;
    const Computation& root = parts_.root;
    std::vector<bool> forResults(parts_.members.size()), inLoops(parts_.members.size());
    for (size_t m = parts_.members.size(); m-- > 0;) {
      const std::string& name = parts_.members[m].computation.stage->name;
      bool inside = *memberPositions_[m] > accumulatorPosition_;
      forResults[m] = inside && reads(*root.finalize->value, name);
      inLoops[m] = !inside || (root.update && reads(*root.update->value, name));
      for (size_t reader = m + 1; reader < parts_.members.size(); ++reader)
        if (reads(parts_.members[reader].computation, name)) {
          forResults[m] = forResults[m] || (inside && forResults[reader]);
          inLoops[m] = inLoops[m] || inLoops[reader];
        }
      if (forResults[m]) membersOfResults_.push_back(m);
      if (!inLoops[m]) memberPositions_[m].reset();
    }
  }

  struct PlacedCache {
    const CacheStage* cache;
    size_t position;
    std::vector<ExprPtr> base;     // the copy's first element, over the loops open at `position`
    std::vector<ExprPtr> baseRead;  // per dimension, the root's read index that starts the copy there
    ExprPtr padValue;               // what the copy holds outside the source (a padded read's), or null
    DType dtype;
    std::string stageVar;          // the variable of the loop it is cached at (double buffering)
    std::map<std::string, ExprPtr> atStart;  // the loops that vary within it, at 0
    const WholeMember* computes = nullptr;  // a stage computed there rather than copied
  };

  void placeCaches() {
    for (const CacheStage& cache : model_.caches) {
      if (std::find(nest_.stages.begin(), nest_.stages.end(), cache.atStage) == nest_.stages.end()) continue;
      if (cache.atStage != root_->name)
        unsupported(cache.loc, fmt::format("cache {} at {}.{}: caches serve the root stage {} of its kernel", cache.source,
                                           cache.atStage, cache.atLoop, root_->name));
      size_t position = positionAfter(cache.atLoop);
      if (cache.source == root_->name) {
        accumulatorMemory_ = cache.memory == CacheMemory::Shared ? MemoryScope::Shared : MemoryScope::Registers;
        if (!root_->reduction) unsupported(cache.loc, fmt::format("cache {} at {}.{}: {} is not a reduction", cache.source,
                                                                  cache.atStage, cache.atLoop, cache.source));
        ownCachePosition_ = position;
        continue;
      }
      EMMY_INTERNAL_ASSERT(!std::count(nest_.stages.begin(), nest_.stages.end(), cache.source),
                           "cache {}: it is computed in the kernel that reads it (the model allows no such cache)", cache.source);
      caches_.push_back(placeCopy(cache, position));
    }
    // Stages computed, per iteration of a root loop, into a copy of the part the root reads there.
    for (const WholeMember& whole : parts_.wholes) {
      const Stage& stage = *whole.computation.stage;
      const StageSchedule& schedule = model_.stages.at(stage.name);
      if (schedule.atStage != root_->name)
        unsupported(schedule.placedAt, fmt::format("compute {} at {}.{}: {} is computed in the kernel of {}", stage.name,
                                                   schedule.atStage, schedule.atLoop, stage.name, root_->name));
      for (const WholeMember& other : parts_.wholes)
        if (reads(whole.computation, other.computation.stage->name))
          unsupported(schedule.placedAt, fmt::format("compute {} at {}.{}: it reads {}, which is computed there too",
                                                     stage.name, schedule.atStage, schedule.atLoop, other.computation.stage->name));
      computedCopies_.push_back(CacheStage{stage.name, stage.name, root_->name, schedule.atLoop, schedule.memory,
                                           schedule.footprint, 0, false, dtypeBytes(stage.dtype), schedule.placedAt});
      PlacedCache placed = placeCopy(computedCopies_.back(), positionAfter(schedule.atLoop));
      placed.computes = &whole;
      caches_.push_back(placed);
    }
  }

  // A copy of `source` at `position`: it starts, along each dimension, where the first of the root's
  // reads there is when the loops that vary within it are at 0 (the model made the reads of one
  // dimension a constant distance apart). Outside the source it holds the pad value of padded reads.
  PlacedCache placeCopy(const CacheStage& cache, size_t position) {
    std::vector<const Load*> reads = rootReadsOf(cache.source);
    if (reads.empty())
      unsupported(cache.loc, fmt::format("{}: {} reads {} only through a stage computed in its kernel", cache.name,
                                         root_->name, cache.source));
    std::map<std::string, ExprPtr> atStart;
    for (size_t k = 0; k < root_loops_.loops.size(); ++k) {
      const FinalLoop& loop = root_loops_.loops[k];
      bool threads = boundToThreads(*loop.scheduled);
      if (cache.memory == CacheMemory::Shared ? (k >= position || threads) : (k >= position && !threads))
        atStart[loop.var] = i64(0);
    }
    std::map<std::string, ExprPtr> axisValues;
    for (const auto& [axis, loopVar] : root_loops_.axisVars) axisValues[loopVar] = substitute(root_loops_.values.at(axis), atStart);
    PlacedCache placed{&cache, position, {}, {}, nullptr, reads[0]->dtype, root_loops_.loops[position - 1].var, atStart};
    for (const Load* read : reads) {
      if (!read->padValue) continue;
      bool varies = false;
      forEachNode(*read->padValue, [&](const Expr& node) { varies = varies || node.as<AxisVar>(); });
      if (varies || (placed.padValue && !sameIndex(*placed.padValue, *read->padValue)))
        cannot(cache.loc, fmt::format("{}: {} reads {} padded with {}{}, and a copy holds one value outside {}", cache.name,
                                      root_->name, cache.source, printExpr(*read->padValue),
                                      varies ? ", which varies with the loops" : " and with " + printExpr(*placed.padValue),
                                      cache.source));
      placed.padValue = read->padValue;
    }
    // A register copy is each thread's own: it is made inside the thread loops after its place, whose
    // iterations are the thread's (one each), so that its start can use their indices.
    if (cache.memory == CacheMemory::Registers)
      for (size_t k = position; k < root_loops_.loops.size(); ++k)
        if (boundToThreads(*root_loops_.loops[k].scheduled)) placed.position = k + 1;
    for (size_t d = 0; d < reads[0]->indices.size(); ++d) {
      const ExprPtr* first = &reads[0]->indices[d];
      for (const Load* read : reads) {
        std::optional<int64_t> shift = constantDistance(*read->indices[d], **first);
        EMMY_INTERNAL_ASSERT(shift.has_value(), "the reads of {} by {} are no constant distance apart", cache.source, root_->name);
        if (*shift < 0) first = &read->indices[d];
      }
      placed.baseRead.push_back(*first);
      placed.base.push_back(substitute(*first, axisValues));
    }
    return placed;
  }

  // The root's reads of `tensor`.
  std::vector<const Load*> rootReadsOf(const std::string& tensor) const {
    std::vector<const Load*> found;
    for (const loop::Store* store : {parts_.root.store, parts_.root.update, parts_.root.finalize})
      if (store)
        forEachNode(*store->value, [&](const Expr& node) {
          if (const auto* load = node.as<Load>(); load && load->tensor == tensor) found.push_back(load);
        });
    return found;
  }

  void placeAccumulator() {
    const std::vector<FinalLoop>& loops = root_loops_.loops;
    auto firstReduction = std::find_if(loops.begin(), loops.end(), [](const FinalLoop& l) { return l.scheduled->reduction; });
    if (!root_->reduction) return;
    size_t first = firstReduction - loops.begin();
    accumulatorPosition_ = ownCachePosition_.value_or(first);
    EMMY_INTERNAL_ASSERT(accumulatorPosition_ <= first, "the accumulators of {} are inside its first reduction loop (the "
                         "model allows no such cache)", root_->name);
    // The accumulators: one per iteration of the pure loops inside the scope that each thread runs (and,
    // in shared memory, of the pure loops bound to threads, wherever they are: each thread owns its own).
    std::vector<const ScheduledLoop*> varying;
    std::map<std::string, ExprPtr> atStart;
    bool shared = accumulatorMemory_ == MemoryScope::Shared;
    for (size_t k = 0; k < accumulatorPosition_ && shared; ++k)
      if (!loops[k].scheduled->reduction && boundToThreads(*loops[k].scheduled)) {
        varying.push_back(loops[k].scheduled);
        atStart[loops[k].var] = i64(0);
      }
    for (size_t k = accumulatorPosition_; k < loops.size(); ++k) {
      const ScheduledLoop& loop = *loops[k].scheduled;
      if (loop.reduction) {
        if (loop.atomic) {
          atomic_ = true;
          if (boundToThreads(loop)) atomicDimensions_.insert(dimensionOf(loop));
        } else if (boundToThreads(loop)) {
          combineDimensions_.push_back(dimensionOf(loop));
          cooperative_ = true;
        }
        continue;
      }
      if (boundToThreads(loop) && !shared) continue;
      varying.push_back(&loop);
      atStart[loops[k].var] = i64(0);
    }
    if (cooperative_ && shared)
      unsupported(directiveAbout(root_->name), fmt::format("cache {} in shared: a reduction combined across threads "
                                                           "accumulates in registers", root_->name));
    for (const Axis& axis : root_->axes) {
      const ScheduledLoop* symbolic = nullptr;
      std::optional<int64_t> width = footprintWidth(AxisVar(axis.name), varying, axis.extent, &symbolic);
      EMMY_INTERNAL_ASSERT(width.has_value(), "the accumulators of {} have no constant shape", root_->name);
      if (*width == 1) continue;
      accumulatorShape_.push_back(Dim::constant(*width));
      accumulatorIndex_.push_back(offsetWithin(var(root_loops_.axisVars.at(axis.name)), atStart));
    }
    if (cooperative_ && !accumulatorShape_.empty())
      unsupported(directiveAbout(root_->name),
                  fmt::format("{}: a reduction combined across threads keeps one accumulator per thread, and the loops "
                              "inside the first reduction loop would need {}", root_->name, accumulatorShape_.size()));
    accumulator_ = parts_.root.accumulator;
    if (online_) placeOnlineSoftmax();
  }

  // Where `index` (over the root's Loop IR variables) lies within a copy or the accumulators whose loops
  // `atStart` sets to 0 at its start: the index less the copy's start. When no fused loop is involved it
  // is written with the varying loops alone (`it * 4 + ir`), which is what the compiler can fold.
  ExprPtr offsetWithin(const ExprPtr& index, const std::map<std::string, ExprPtr>& atStart) const {
    std::map<std::string, ExprPtr> axisValues, stay, none;
    for (const auto& [axis, loopVar] : root_loops_.axisVars) axisValues[loopVar] = root_loops_.values.at(axis);
    ExprPtr full = substitute(index, axisValues);
    bool fused = false;
    for (const FinalLoop& loop : root_loops_.loops) {
      fused = fused || loop.scheduled->fused;
      if (!atStart.count(loop.var)) stay[loop.var] = i64(0);
      none[loop.var] = i64(0);
    }
    std::map<std::string, ExprPtr> startValues;
    for (const auto& [axis, loopVar] : root_loops_.axisVars) startValues[loopVar] = substitute(root_loops_.values.at(axis), atStart);
    if (fused) return arithmetic(BinaryOp::Sub, index, substitute(index, startValues));
    return arithmetic(BinaryOp::Sub, substitute(full, stay), substitute(full, none));
  }

  // Does work that needs every thread of the block (a combine, a shared copy) happen at `position` or
  // further in?
  bool cooperativeFrom(size_t position) const {
    for (size_t m = 0; m < parts_.members.size(); ++m)
      if (memberPositions_[m] >= position && memberIsCooperative(parts_.members[m])) return true;
    for (const PlacedCache& cache : caches_)
      if (cache.position >= position && cache.cache->memory == CacheMemory::Shared) return true;
    return cooperative_ && accumulatorPosition_ >= position;
  }

  // Inside the accumulators' loops, with nothing placed further in, does the update read only copies
  // that are already made (and the accumulators)? Then iterations past a pure axis's end are harmless.
  bool overrunSafe(size_t position) const {
    if (!accumulatorOpen_ || !parts_.root.update) return false;
    for (size_t m = 0; m < parts_.members.size(); ++m)
      if (memberPositions_[m] >= position) return false;
    for (const PlacedCache& cache : caches_)
      if (cache.position >= position) return false;
    bool safe = true;
    forEachNode(*parts_.root.update->value, [&](const Expr& node) {
      const auto* load = node.as<Load>();
      if (!load || load->tensor == parts_.root.accumulator) return;
      safe = safe && std::any_of(activeCaches_.begin(), activeCaches_.end(),
                                 [&](const PlacedCache* cache) { return cache->cache->source == load->tensor; });
    });
    return safe;
  }

  bool memberIsCooperative(const Member& member) const {
    for (const ScheduledLoop& loop : model_.stages.at(member.computation.stage->name).loops)
      if (loop.reduction && boundToThreads(loop)) return true;
    return false;
  }

  bool threadDependent(const Tail& tail, const StageLoops& loops) const {
    for (const FinalLoop& loop : loops.loops)
      if (tail.loops.count(loop.scheduled->name) && boundToThreads(*loop.scheduled)) return true;
    return false;
  }

  // ---- generation ----

  // What has been emitted in the enclosing scopes: axis Lets and tails, by name.
  using Defined = std::set<std::string>;

  // The Lets of the root's axes that `open` completes, and the conditions of its tails (as Guards
  // around `rest`, or, with `clamp`, as clamps and masks).
  struct Ready {
    std::vector<StmtPtr> lets;
    std::vector<ExprPtr> guards;
  };

  // `cooperative`: the statements these guard need every thread of the block.
  // `overrunSafe`: what these guard reads only copies and accumulators, so the ragged end of a pure axis
  // needs no condition (its accumulators are never stored).
  Ready emitReady(const StageLoops& loops, const std::set<std::string>& open, Defined& defined, bool cooperative,
                  std::vector<ExprPtr>& masks, bool overrunSafe = false) {
    Ready ready;
    std::set<std::string> clamped;
    for (const Tail& tail : loops.tails) {
      if (!open.count(tail.innermost) || defined.count("tail " + tail.parent) || !includes(open, tail.loops)) continue;
      defined.insert("tail " + tail.parent);
      bool dependent = threadDependent(tail, loops);
      if (cooperative && dependent && tail.reduction)
        unsupported(directiveAbout(root_->name),
                    fmt::format("{}: the ragged end of reduction loop {} depends on the thread and encloses work every "
                                "thread of the block does together", root_->name, tail.parent));
      bool clamp = cooperative && dependent;
      if (overrunSafe && !tail.reduction) continue;
      if (!clamp) {
        // An axis's Let comes first: the guard reads it.
        ready.guards.push_back(tail.isAxis ? compare(BinaryOp::Lt, var(loops.axisVars.at(tail.parent)), loops.extents.at(tail.parent))
                                           : tail.condition);
        continue;
      }
      masks.push_back(tail.condition);
      if (tail.isAxis) clamped.insert(tail.parent);
    }
    for (const std::string& axis : loops.axisOrder) {
      if (defined.count(axis) || !includes(open, loops.loopsOf.at(axis))) continue;
      defined.insert(axis);
      ExprPtr value = loops.values.at(axis);
      const std::string& name = loops.axisVars.at(axis);
      if (const auto* same = value->as<AxisVar>(); same && same->name == name) continue;
      if (clamped.count(axis))
        value = arithmetic(BinaryOp::Min, value, arithmetic(BinaryOp::Sub, loops.extents.at(axis), i64(1)));
      ready.lets.push_back(std::make_shared<Let>(name, value));
    }
    return ready;
  }

  static StmtPtr wrap(const Ready& ready, StmtPtr rest) {
    if (!ready.guards.empty()) rest = std::make_shared<Guard>(conjunction(ready.guards), rest);
    std::vector<StmtPtr> stmts = ready.lets;
    stmts.push_back(rest);
    return stmts.size() == 1 ? rest : block(stmts);
  }

  // The root's loops from `position` on, with everything placed among them.
  StmtPtr generate(size_t position, Defined defined, std::vector<ExprPtr> masks) {
    for (const PlacedCache& cache : caches_)
      if (cache.position == position && cache.cache->wholeRows && !wholeRowsInUse_.count(&cache)) return rowVariants(cache, defined, masks);
    Ready ready = emitReady(root_loops_, openAt(position), defined, cooperativeFrom(position), masks, overrunSafe(position));
    for (const PlacedCache& cache : caches_)
      if (cache.position == position && inUse(cache)) activeCaches_.push_back(&cache);
    StmtPtr rest = inner(position, defined, masks);
    if (online_ && accumulatorOpen_ && position == onlinePosition_) rest = onlineStep(rest);
    for (const PlacedCache& cache : caches_)
      if (cache.position == position && inUse(cache)) activeCaches_.pop_back();
    // Caches and members placed here, innermost last; double-buffered copies at the loop just made
    // start before it.
    std::vector<const PlacedCache*> here, next;
    for (const PlacedCache& cache : caches_) {
      if (cache.position == position && cache.cache->doubleBuffered) here.push_back(&cache);
      if (cache.position == position + 1 && cache.cache->doubleBuffered) next.push_back(&cache);
    }
    if (!next.empty()) rest = doubleBufferedCopies(next, rest);
    if (!here.empty()) rest = prefetchNext(here, rest);
    for (size_t c = caches_.size(); c-- > 0;)
      if (caches_[c].position == position && !caches_[c].cache->doubleBuffered && !caches_[c].cache->wholeRows)
        rest = cacheCopy(caches_[c], rest);
    for (size_t m = parts_.members.size(); m-- > 0;)
      if (memberPositions_[m] == position) rest = member(parts_.members[m], position, rest);
    // Whole rows are copied before the members here, which read them too.
    for (size_t c = caches_.size(); c-- > 0;)
      if (caches_[c].position == position && caches_[c].cache->wholeRows && inUse(caches_[c])) rest = cacheCopy(caches_[c], rest);
    return wrap(ready, rest);
  }

  // A copy of whole rows at `position`: the code from there on twice, reading through the copy where the
  // rows fit in it, and reading the source where they do not.
  StmtPtr rowVariants(const PlacedCache& cache, const Defined& defined, const std::vector<ExprPtr>& masks) {
    size_t position = cache.position;
    wholeRowsInUse_[&cache] = true;
    StmtPtr copied = generate(position, defined, masks);
    wholeRowsInUse_[&cache] = false;
    StmtPtr direct = generate(position, defined, masks);
    wholeRowsInUse_.erase(&cache);
    ExprPtr fits = compare(BinaryOp::Le, dimValue(sourceShape(cache).back()), i64(cache.cache->shape.back()));
    return block({std::make_shared<Guard>(fits, copied),
                  std::make_shared<Guard>(std::make_shared<Unary>(DType::Bool, UnaryOp::Not, fits), direct)});
  }

  bool inUse(const PlacedCache& cache) const {
    return !cache.cache->wholeRows || wholeRowsInUse_.at(&cache);
  }

  // A member's expression, reading whole rows through their copies where they are in use and the read
  // is in the copied row (any element of it).
  ExprPtr memberExpr(const ExprPtr& expr, size_t position) const {
    return rewrite(expr, [&](const Expr& node) -> ExprPtr {
      const auto* load = node.as<Load>();
      if (!load) return nullptr;
      for (const PlacedCache& cache : caches_) {
        if (!cache.cache->wholeRows || cache.cache->source != load->tensor || cache.position > position || !inUse(cache)) continue;
        std::vector<ExprPtr> index;
        for (size_t d = 0; d + 1 < load->indices.size(); ++d) {
          if (!sameIndex(*load->indices[d], *cache.base[d])) return nullptr;  // another row
          index.push_back(i64(0));
        }
        index.push_back(arithmetic(BinaryOp::Sub, load->indices.back(), cache.base.back()));
        return std::make_shared<Load>(load->dtype, cache.cache->name, index);
      }
      return nullptr;
    });
  }

  StmtPtr inner(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks) {
    if (root_->reduction && position == accumulatorPosition_ && !accumulatorOpen_) return reductionRegion(position, defined, masks);
    if (position == root_loops_.loops.size()) return core(masks);
    return loop(position, defined, masks);
  }

  static Binding bindingOf(const FinalLoop& loop) {
    const ScheduledLoop& scheduled = *loop.scheduled;
    if (scheduled.binding)
      return scheduled.binding->scope == HardwareScope::Block  ? Binding::BlockStrided
             : scheduled.binding->scope == HardwareScope::Grid ? Binding::GridStrided
                                                               : Binding::ThreadIndex;
    return scheduled.unrolled || scheduled.vectorized ? Binding::Unrolled : Binding::Serial;
  }

  // A vectorized loop's accesses along it are vector accesses where Kernel IR can make them.
  // A grid-strided loop's groups likewise.
  static int vectorWidthOf(const ScheduledLoop& loop) {
    return static_cast<int>(loop.vectorized ? *loop.extent : loop.groupWidth);
  }

  static int dimensionOf(const ScheduledLoop& loop) {
    return loop.binding && loop.binding->scope != HardwareScope::Warp ? loop.binding->dimension : 0;
  }

  StmtPtr loop(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks) {
    const FinalLoop& loop = root_loops_.loops[position];
    Binding binding = bindingOf(loop);
    int dimension = dimensionOf(*loop.scheduled);
    std::set<int> outerThreadBound = threadBound_;
    if (binding == Binding::ThreadIndex) threadBound_.insert(dimension);
    if (binding == Binding::GridStrided) threadBound_ = {0, 1, 2};  // every thread its own iterations
    StmtPtr body = generate(position + 1, defined, masks);
    threadBound_ = outerThreadBound;
    return std::make_shared<Loop>(loop.var, loop.extent, binding,
                                  std::vector<std::string>{root_->name + "." + loop.scheduled->name}, body,
                                  vectorWidthOf(*loop.scheduled), dimension);
  }

  // A store to global memory: masked where axes were clamped, and made once by the threads that would
  // each make it (those of a dimension of the block no enclosing loop takes its iterations from).
  StmtPtr globalStore(StmtPtr store, const std::vector<ExprPtr>& masks) const {
    if (!masks.empty()) store = std::make_shared<Guard>(conjunction(masks), store);
    std::vector<int> dimensions;
    for (int d = 0; d < 3; ++d)
      if (threads_[d] > 1 && !threadBound_.count(d) && !atomicDimensions_.count(d)) dimensions.push_back(d);
    return dimensions.empty() ? store : std::make_shared<SingleThread>(store, dimensions);
  }

  // A Loop IR expression of the root's, reading the copies that are active and the accumulators.
  ExprPtr rootExpr(const ExprPtr& expr) const {
    return rewrite(expr, [&](const Expr& node) -> ExprPtr {
      const auto* load = node.as<Load>();
      if (!load) return nullptr;
      if (load->tensor == parts_.root.accumulator) return std::make_shared<Load>(load->dtype, accumulator_, accumulatorIndex_);
      if (online_)
        for (const Computation& sum : online_->sums)
          if (load->tensor == sum.stage->name) return sum.finalize->value;
      for (auto active = activeCaches_.rbegin(); active != activeCaches_.rend(); ++active) {
        const PlacedCache& cache = **active;
        if (cache.cache->source != load->tensor) continue;
        std::vector<ExprPtr> index;
        if (cache.cache->doubleBuffered) index.push_back(arithmetic(BinaryOp::Mod, var(cache.stageVar), i64(2)));
        for (size_t d = 0; d < load->indices.size() && !single(cache); ++d)
          index.push_back(arithmetic(BinaryOp::Add, offsetWithin(load->indices[d], cache.atStart),
                                     i64(*constantDistance(*load->indices[d], *cache.baseRead[d]))));
        return std::make_shared<Load>(load->dtype, cache.cache->name, index);
      }
      return nullptr;
    });
  }

  StmtPtr core(const std::vector<ExprPtr>& masks) {
    if (const loop::Store* store = parts_.root.store)
      return globalStore(std::make_shared<Store>(store->buffer, store->indices, rootExpr(store->value)), masks);
    StmtPtr update = std::make_shared<Store>(accumulator_, accumulatorIndex_, rootExpr(parts_.root.update->value));
    return masks.empty() ? update : std::make_shared<Guard>(conjunction(masks), update);
  }

  // The accumulators, their initialisation, the loops, the combine and the stores of the results.
  StmtPtr reductionRegion(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks) {
    accumulatorOpen_ = true;
    const Computation& root = parts_.root;
    StmtPtr init = replayPureLoops(position, position, defined, masks, [&](const std::vector<ExprPtr>&) -> StmtPtr {
      return std::make_shared<Store>(accumulator_, accumulatorIndex_, rootExpr(root.init->value));
    });
    StmtPtr loops = inner(position, defined, masks);
    std::vector<StmtPtr> stmts{init, loops};
    for (int dimension : combineDimensions_)
      stmts.push_back(std::make_shared<CrossThreadReduce>(accumulator_, root.accumulatorType, root_->reduction->op, dimension));
    stmts.push_back(replayPureLoops(position, position, defined, masks, [&](const std::vector<ExprPtr>& leafMasks) -> StmtPtr {
      const loop::Store& finalize = *root.finalize;
      std::optional<ReduceOp> atomic;
      if (atomic_) atomic = root_->reduction->op;
      StmtPtr store = globalStore(std::make_shared<Store>(finalize.buffer, finalize.indices, rootExpr(finalize.value), atomic), leafMasks);
      for (size_t m : membersOfResults_) store = member(parts_.members[m], position, store);  // the last member first
      return store;
    }));
    accumulatorOpen_ = false;
    StmtPtr region = std::make_shared<Allocate>(accumulator_, root.accumulatorType, accumulatorShape_, accumulatorMemory_, block(stmts));
    if (!online_) return region;
    // The running maximum and the sums, initialised with the accumulators.
    std::vector<Computation> statistics{online_->max};
    statistics.insert(statistics.end(), online_->sums.begin(), online_->sums.end());
    for (auto it = statistics.rbegin(); it != statistics.rend(); ++it)
      region = std::make_shared<Allocate>(it->accumulator, it->accumulatorType, std::vector<Dim>{}, MemoryScope::Registers,
                                          block({std::make_shared<Store>(it->init->buffer, it->init->indices, it->init->value), region}));
    return region;
  }

  // The root's pure loops from `position` on (reduction loops left out), with their Lets and tails as
  // guards, around `leaf`.
  StmtPtr replayPureLoops(size_t start, size_t position, Defined defined, std::vector<ExprPtr> masks,
                          const std::function<StmtPtr(const std::vector<ExprPtr>&)>& leaf) {
    std::set<std::string> open = openAt(start);
    for (size_t k = start; k < position; ++k)
      if (!root_loops_.loops[k].scheduled->reduction) open.insert(root_loops_.loops[k].scheduled->name);
    Ready ready = emitReady(root_loops_, open, defined, false, masks);
    size_t next = position;
    while (next < root_loops_.loops.size() && root_loops_.loops[next].scheduled->reduction) ++next;
    if (next == root_loops_.loops.size()) return wrap(ready, leaf(masks));
    const FinalLoop& loop = root_loops_.loops[next];
    Binding binding = bindingOf(loop);
    int dimension = dimensionOf(*loop.scheduled);
    if (binding == Binding::ThreadIndex) threadBound_.insert(dimension);
    StmtPtr body = replayPureLoops(start, next + 1, defined, masks, leaf);
    if (binding == Binding::ThreadIndex) threadBound_.erase(dimension);
    // Init and store loops are siblings of the loops they replay, and may reuse their variables.
    return wrap(ready, std::make_shared<Loop>(loop.var, loop.extent, binding,
                                              std::vector<std::string>{root_->name + "." + loop.scheduled->name}, body,
                                              vectorWidthOf(*loop.scheduled), dimension));
  }

  // `cache S ... at R.a`: the copy, filled before `rest` reads it.
  // Whole rows are copied asynchronously, 16 bytes at a time where aligned, and waited for at once.
  StmtPtr cacheCopy(const PlacedCache& placed, StmtPtr rest) {
    bool shared = placed.cache->memory == CacheMemory::Shared;
    bool rows = placed.cache->wholeRows;
    std::vector<StmtPtr> stmts{fill(placed, placed.base, nullptr, rows)};
    if (rows) stmts.push_back(std::make_shared<WaitForCopies>(0));
    stmts.push_back(rest);
    return std::make_shared<Allocate>(placed.cache->name, placed.dtype, cacheShape(placed),
                                      shared ? MemoryScope::Shared : MemoryScope::Registers, block(stmts));
  }

  // The copy's shape: its footprint, rows widened by `pad`, and two stages when double-buffered.
  static std::vector<Dim> cacheShape(const PlacedCache& placed) {
    const CacheStage& cache = *placed.cache;
    std::vector<Dim> shape;
    if (single(placed)) return shape;
    if (cache.doubleBuffered) shape.push_back(Dim::constant(2));
    for (size_t d = 0; d < cache.shape.size(); ++d)
      shape.push_back(Dim::constant(cache.shape[d] + (d + 1 == cache.shape.size() ? cache.pad : 0)));
    return shape;
  }

  // A register copy of one element is a scalar (a shared one stays an array: shared memory is indexed).
  static bool single(const PlacedCache& placed) {
    const CacheStage& cache = *placed.cache;
    return cache.memory == CacheMemory::Registers && !cache.doubleBuffered && std::all_of(cache.shape.begin(), cache.shape.end(), [](int64_t e) { return e == 1; });
  }

  // How many consecutive elements one asynchronous copy takes: 16 bytes where the copy's rows (padded)
  // and the footprint's are whole vectors, so that every vector starts aligned in shared memory.
  static int copyLanes(const PlacedCache& placed) {
    const CacheStage& cache = *placed.cache;
    int lanes = 16 / dtypeBytes(placed.dtype);
    bool whole = lanes > 1 && !cache.shape.empty() && cache.shape.back() % lanes == 0 && cache.pad % lanes == 0;
    return whole ? lanes : 1;
  }

  // The loop that copies the footprint starting at `base` (into stage `stage` of a double-buffered
  // copy, by asynchronous copies when `async`, copyLanes elements at a time): by the whole block for a
  // shared copy, by each thread for a register copy. Elements outside the source read as 0.
  StmtPtr fill(const PlacedCache& placed, const std::vector<ExprPtr>& base, const ExprPtr& stage, bool async) {
    const CacheStage& cache = *placed.cache;
    // Asynchronous copies fill what is outside the source with zeros, and only after its start.
    async = async && !placed.padValue &&
            std::all_of(placed.baseRead.begin(), placed.baseRead.end(), [](const ExprPtr& index) { return nonNegative(*index); });
    int lanes = async ? copyLanes(placed) : 1;
    int64_t elements = 1;
    for (int64_t extent : cache.shape) elements *= extent;
    const Shape sourceShape = this->sourceShape(placed);
    std::string element = uniqueVar(cache.name + "_element");
    std::string vector = lanes > 1 ? uniqueVar(cache.name + "_vector") : element;
    std::vector<StmtPtr> stmts;
    if (lanes > 1) stmts.push_back(std::make_shared<Let>(element, arithmetic(BinaryOp::Mul, var(vector), i64(lanes))));
    std::vector<ExprPtr> local, global, inside;
    if (stage) local.push_back(stage);
    std::vector<ExprPtr> coordinates;
    int64_t stride = elements;
    for (size_t d = 0; d < cache.shape.size(); ++d) {
      stride /= cache.shape[d];
      ExprPtr coordinate = i64(0);  // along a dimension of extent 1
      if (cache.shape[d] > 1) {
        std::string name = uniqueVar(fmt::format("{}_{}", cache.name, d));
        stmts.push_back(std::make_shared<Let>(
            name, arithmetic(BinaryOp::Mod, arithmetic(BinaryOp::Div, var(element), i64(stride)), i64(cache.shape[d]))));
        coordinate = var(name);
      }
      coordinates.push_back(coordinate);
      global.push_back(arithmetic(BinaryOp::Add, base[d], coordinate));
      inside.push_back(inBounds(placed, d, global.back(), sourceShape));
    }
    if (!single(placed)) local.insert(local.end(), coordinates.begin(), coordinates.end());
    if (placed.computes) {
      stmts.push_back(computeElement(placed, local, global, sourceShape));
    } else if (async && lanes > 1) {
      // The rows inside, and of each row, the lanes before the source's end.
      ExprPtr lanesInside = arithmetic(BinaryOp::Sub, dimValue(sourceShape.back()), global.back());
      inside.pop_back();
      ExprPtr rowInside = inside.empty() ? immediate(DType::Bool, 1) : conjunction(inside);
      stmts.push_back(std::make_shared<CopyAsync>(cache.name, local, cache.source, global, rowInside, placed.dtype, lanes,
                                                  lanesInside));
    } else if (async) {
      stmts.push_back(std::make_shared<CopyAsync>(cache.name, local, cache.source, global, conjunction(inside), placed.dtype));
    } else {
      ExprPtr value = std::make_shared<Select>(conjunction(inside), std::make_shared<Load>(placed.dtype, cache.source, global),
                                               placed.padValue ? placed.padValue : immediate(placed.dtype, 0));
      stmts.push_back(std::make_shared<Store>(cache.name, local, value));
    }
    bool shared = cache.memory == CacheMemory::Shared;
    Binding binding = shared ? Binding::ThreadStrided : placed.computes ? Binding::Serial : Binding::Unrolled;
    // Whole rows: only the row's own elements (it fits: its rows are read through the copy only then).
    ExprPtr extent = cache.wholeRows ? arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, dimValue(sourceShape.back()), i64(lanes - 1)),
                                                  i64(lanes))
                                     : i64(elements / lanes);
    return std::make_shared<Loop>(vector, extent, binding, std::vector<std::string>{}, block(stmts));
  }

  // `index` < the extent of dimension `d`, and >= 0 where a padded read or one at a negative offset (under
  // a `where`) may start the copy before the source.
  ExprPtr inBounds(const PlacedCache& placed, size_t d, const ExprPtr& index, const Shape& shape) const {
    ExprPtr below = compare(BinaryOp::Lt, index, dimValue(shape[d]));
    if (!placed.padValue && nonNegative(*placed.baseRead[d])) return below;
    return std::make_shared<Binary>(DType::Bool, BinaryOp::And, compare(BinaryOp::Ge, index, i64(0)), below);
  }

  // One element of a computed copy: the stage's axes at `global`, and where they are `inside` the stage,
  // its value (with its reduction loops serial) stored at `local`; outside, the pad value of padded reads.
  StmtPtr computeElement(const PlacedCache& placed, const std::vector<ExprPtr>& local, const std::vector<ExprPtr>& global,
                         const Shape& shape) {
    const WholeMember& whole = *placed.computes;
    const Computation& computation = whole.computation;
    const std::string& name = computation.stage->name;
    std::vector<StmtPtr> stmts;
    std::vector<ExprPtr> within;
    for (size_t d = 0; d < whole.axisVars.size(); ++d) {
      stmts.push_back(std::make_shared<Let>(whole.axisVars[d], global[d]));
      within.push_back(inBounds(placed, d, var(whole.axisVars[d]), shape));
    }
    ExprPtr inside = within.empty() ? nullptr : conjunction(within);
    StmtPtr value;
    if (computation.store) {
      value = std::make_shared<Store>(name, local, computation.store->value);
    } else {
      std::function<StmtPtr(const loop::Stmt&)> serial = [&](const loop::Stmt& stmt) -> StmtPtr {
        if (const auto* loop = stmt.as<loop::For>())
          return std::make_shared<Loop>(loop->var, dimValue(loop->extent), Binding::Serial,
                                        std::vector<std::string>{loop->stage + "." + loop->axis}, serial(*loop->body));
        const auto* store = stmt.as<loop::Store>();
        EMMY_INTERNAL_ASSERT(store != nullptr, "the reduction of {} has an unexpected shape", name);
        return std::make_shared<Store>(store->buffer, store->indices, store->value);
      };
      const loop::Store& init = *computation.init;
      value = std::make_shared<Allocate>(
          computation.accumulator, computation.accumulatorType, std::vector<Dim>{}, MemoryScope::Registers,
          block({std::make_shared<Store>(init.buffer, init.indices, init.value), serial(*computation.reductionLoops[0]),
                 std::make_shared<Store>(name, local, computation.finalize->value)}));
    }
    stmts.push_back(inside ? std::make_shared<Guard>(inside, value) : value);
    if (placed.padValue)
      stmts.push_back(std::make_shared<Guard>(std::make_shared<Unary>(DType::Bool, UnaryOp::Not, inside),
                                              std::make_shared<Store>(name, local, placed.padValue)));
    return block(stmts);
  }

  // The double-buffered copies at loop a: before the loop, the first iteration's part is copied into
  // stage 0; in iteration a, the next one's into stage (a + 1) % 2 while stage a % 2 is read. Each
  // iteration's copies are one group, waited for one iteration later. Copies past the last iteration
  // copy zeros, which nothing reads.
  StmtPtr doubleBufferedCopies(const std::vector<const PlacedCache*>& caches, StmtPtr loop) {
    std::vector<StmtPtr> stmts;
    for (const PlacedCache* placed : caches) {
      std::vector<ExprPtr> first;
      for (const ExprPtr& index : placed->base) first.push_back(substitute(index, {{placed->stageVar, i64(0)}}));
      stmts.push_back(fill(*placed, first, i64(0), true));
    }
    stmts.push_back(std::make_shared<WaitForCopies>(1));
    stmts.push_back(loop);
    StmtPtr result = block(stmts);
    for (const PlacedCache* placed : caches)
      result = std::make_shared<Allocate>(placed->cache->name, placed->dtype, cacheShape(*placed), MemoryScope::Shared, result);
    return result;
  }

  StmtPtr prefetchNext(const std::vector<const PlacedCache*>& caches, StmtPtr rest) {
    std::vector<StmtPtr> stmts;
    for (const PlacedCache* placed : caches) {
      ExprPtr next = arithmetic(BinaryOp::Add, var(placed->stageVar), i64(1));
      std::vector<ExprPtr> base;
      for (const ExprPtr& index : placed->base) base.push_back(substitute(index, {{placed->stageVar, next}}));
      stmts.push_back(fill(*placed, base, arithmetic(BinaryOp::Mod, next, i64(2)), true));
    }
    stmts.push_back(std::make_shared<WaitForCopies>(1));
    stmts.push_back(rest);
    return block(stmts);
  }

  // The shape of what a copy copies (or computes).
  Shape sourceShape(const PlacedCache& placed) const {
    if (placed.computes) return placed.computes->computation.stage->shape();
    if (const TensorParam* input = kernel_.findInput(placed.cache->source)) return input->shape;
    const Stage* stored = kernel_.findStage(placed.cache->source);  // by an earlier kernel
    EMMY_INTERNAL_ASSERT(stored != nullptr, "{} is not an input or a stage", placed.cache->source);
    return stored->shape();
  }

  // A member computed in place: its local, its accumulator, its reduction loops and combine.
  StmtPtr member(const Member& placed, size_t position, StmtPtr rest) {
    const Computation& computation = placed.computation;
    const Stage& stage = *computation.stage;
    const StageSchedule& schedule = model_.stages.at(stage.name);
    for (const ScheduledLoop& loop : schedule.loops)
      if (!loop.reduction && (loop.binding || loop.unrolled || loop.vectorized || loop.fused ||
                              std::none_of(stage.axes.begin(), stage.axes.end(), [&](const Axis& a) { return a.name == loop.name; })))
        unsupported(directiveAbout(stage.name), fmt::format("{} is computed inside {}'s loops, so its loop over {} is {}'s: "
                                                            "schedule only its reduction loops", stage.name, root_->name,
                                                            loop.name, root_->name));
    std::map<std::string, std::string> axisVars;
    for (size_t d = 0; d < stage.axes.size(); ++d) axisVars[stage.axes[d].name] = parts_.rootVars[d];
    for (const loop::For* loop : computation.reductionLoops) axisVars[loop->axis] = loop->var;
    StageLoops loops = buildStageLoops(schedule, stage, axisVars, [&](const std::string& n) { return uniqueVar(n); });
    std::vector<const FinalLoop*> reductionLoops;
    std::vector<int> combined;  // the thread indices its partial results are combined across
    for (const FinalLoop& loop : loops.loops) {
      if (!loop.scheduled->reduction) continue;
      reductionLoops.push_back(&loop);
      if (!boundToThreads(*loop.scheduled)) continue;
      int dimension = dimensionOf(*loop.scheduled);
      if (threadBound_.count(dimension))
        cannot(loop.scheduled->boundAt,
               fmt::format("{} combines across thread.{} inside a loop of {} bound to thread.{}, where each thread computes "
                           "its own {}: bind {}.{} to another thread index, or compute {} outside that loop", stage.name,
                           "xyz"[dimension], root_->name, "xyz"[dimension], stage.name, stage.name, loop.scheduled->name,
                           stage.name));
      combined.push_back(dimension);
    }
    std::set<std::string> open;
    for (const Axis& axis : stage.axes) open.insert(axis.name);  // the root's, known where it is placed
    Defined defined(open.begin(), open.end());
    std::function<StmtPtr(size_t)> loopsFrom = [&](size_t k) -> StmtPtr {
      std::vector<ExprPtr> unusedMasks;
      Ready ready = emitReady(loops, open, defined, false, unusedMasks);
      if (k == reductionLoops.size())
        return wrap(ready, std::make_shared<Store>(computation.update->buffer, computation.update->indices,
                                                   memberExpr(computation.update->value, position)));
      const FinalLoop& loop = *reductionLoops[k];
      open.insert(loop.scheduled->name);
      bool threads = boundToThreads(*loop.scheduled);
      StmtPtr body = loopsFrom(k + 1);
      return wrap(ready, std::make_shared<Loop>(loop.var, loop.extent,
                                                threads ? Binding::ThreadIndex : bindingOf(loop),
                                                std::vector<std::string>{stage.name + "." + loop.scheduled->name}, body,
                                                vectorWidthOf(*loop.scheduled), dimensionOf(*loop.scheduled)));
    };
    std::vector<StmtPtr> steps{std::make_shared<Store>(computation.init->buffer, computation.init->indices, computation.init->value),
                               loopsFrom(0)};
    for (int dimension : combined)
      steps.push_back(std::make_shared<CrossThreadReduce>(computation.accumulator, computation.accumulatorType,
                                                          stage.reduction->op, dimension));
    steps.push_back(std::make_shared<Store>(computation.finalize->buffer, computation.finalize->indices, computation.finalize->value));
    StmtPtr compute = std::make_shared<Allocate>(computation.accumulator, computation.accumulatorType, std::vector<Dim>{},
                                                 MemoryScope::Registers, block(steps));
    return std::make_shared<Allocate>(stage.name, stage.dtype, std::vector<Dim>{}, MemoryScope::Registers, block({compute, rest}));
  }

  // ---- names ----

  void collectTaken(const loop::Stmt& stmt) {
    loop::dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, loop::For>) {
        taken_.insert(node.var);
        collectTaken(*node.body);
      } else if constexpr (std::is_same_v<Node, loop::Allocate>) {
        taken_.insert(node.buffer);
        collectTaken(*node.body);
      } else if constexpr (std::is_same_v<Node, loop::Block>) {
        for (const loop::StmtPtr& inner : node.stmts) collectTaken(*inner);
      }
    });
    for (const TensorParam& p : kernel_.inputs) taken_.insert(p.name);
    for (const TensorParam& p : kernel_.outputs) taken_.insert(p.name);
    for (const ScalarParamDecl& p : kernel_.scalars) taken_.insert(p.name);
    for (const std::string& size : kernel_.sizes) taken_.insert(size);
    for (const Stage& stage : kernel_.stages) taken_.insert(stage.name);
    for (const CacheStage& cache : model_.caches) taken_.insert(cache.name);
  }

  std::string uniqueVar(const std::string& base) {
    std::string name = base;
    for (int k = 1; taken_.count(name); ++k) name = fmt::format("{}_{}", base, k);
    taken_.insert(name);
    return name;
  }

  const Kernel& kernel_;
  const loop::LoopNest& nest_;
  const ScheduleModel& model_;
  Diagnostics& diagnostics_;
  const Stage* root_ = nullptr;
  Stage rootWithReduction_;                  // the root with the reduction it applies its expression to
  std::shared_ptr<loop::Store> epilogueStore_;  // that root's store of each result
  std::optional<OnlineSoftmax> online_;         // the softmax the root's reduction computes online
  std::shared_ptr<loop::Store> onlineUpdate_;   // the root's update, rescaled
  std::string nextMax_, rescale_;               // the online step's locals
  size_t onlinePosition_ = 0;                   // where it runs: inside the last reduction loop
  std::map<const PlacedCache*, bool> wholeRowsInUse_;  // in the variant being built: where rows fit
  NestParts parts_;
  StageLoops root_loops_;
  std::array<int, 3> threads_{1, 1, 1};
  std::vector<std::optional<size_t>> memberPositions_;  // none: computed only before the results' stores
  std::vector<size_t> membersOfResults_;                // those computed there, the last member first
  std::vector<PlacedCache> caches_;
  std::deque<CacheStage> computedCopies_;  // what stages computed at a root loop copy (caches_ points into it)
  std::vector<const PlacedCache*> activeCaches_;
  std::optional<size_t> ownCachePosition_;
  MemoryScope accumulatorMemory_ = MemoryScope::Registers;
  size_t accumulatorPosition_ = 0;
  bool accumulatorOpen_ = false;
  bool cooperative_ = false;
  bool atomic_ = false;                 // the root's partial results are combined by atomics in its output
  std::set<int> atomicDimensions_;      // the thread indices whose partial results are combined so
  std::vector<int> combineDimensions_;  // the thread indices the root's partial results are combined across
  std::string accumulator_;
  std::vector<Dim> accumulatorShape_;
  std::vector<ExprPtr> accumulatorIndex_;
  std::set<int> threadBound_;  // thread dimensions enclosing loops of the root take
  std::set<std::string> taken_;
};

}  // namespace

Program applySchedule(const loop::Program& program, const ScheduleModel& model, Diagnostics& diagnostics) {
  Program tiled{program.source, program.temporaries, {}, {}};
  for (const Directive& directive : program.source.schedule) tiled.schedule.push_back(printDirective(directive));
  for (const loop::LoopNest& nest : program.kernels) {
    try {
      NestScheduler scheduler(program, nest, model, diagnostics);
      TileNest tiledNest = scheduler.run();
      if (std::optional<TileNest> init = scheduler.outputInit()) tiled.kernels.push_back(*init);
      tiled.kernels.push_back(tiledNest);
    } catch (const NestAbandoned&) {
    }
  }
  return tiled;
}

}  // namespace emmy::tile
