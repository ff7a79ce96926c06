#include "ir/tile/schedule_model.h"

#include <algorithm>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "ir/tile/nest_parts.h"
#include "support/text.h"

namespace emmy::tile {

using namespace tensor;

namespace {

std::string loopNames(const std::vector<ScheduledLoop>& loops) {
  std::vector<std::string> names;
  for (const ScheduledLoop& loop : loops) names.push_back(loop.name);
  return join(names, ", ");
}

// An index as sum(coefficient * axis) + constant, when it is one; the constant under the name "".
std::optional<std::map<std::string, int64_t>> affineTerms(const Expr& e) {
  if (const auto* constant = e.as<IntImm>()) return std::map<std::string, int64_t>{{"", constant->value}};
  if (const auto* axis = e.as<AxisVar>()) return std::map<std::string, int64_t>{{axis->name, 1}};
  const auto* binary = e.as<Binary>();
  if (!binary) return std::nullopt;
  auto lhs = affineTerms(*binary->lhs), rhs = affineTerms(*binary->rhs);
  if (!lhs || !rhs) return std::nullopt;
  if (binary->op == BinaryOp::Add || binary->op == BinaryOp::Sub) {
    for (const auto& [axis, coefficient] : *rhs) (*lhs)[axis] += binary->op == BinaryOp::Add ? coefficient : -coefficient;
    return lhs;
  }
  if (binary->op == BinaryOp::Mul) {
    const auto* constant = binary->rhs->as<IntImm>();
    std::map<std::string, int64_t> scaled = *lhs;
    if (!constant) {
      constant = binary->lhs->as<IntImm>();
      scaled = *rhs;
    }
    if (!constant) return std::nullopt;
    for (auto& [axis, coefficient] : scaled) coefficient *= constant->value;
    return scaled;
  }
  return std::nullopt;
}

class ScheduleChecker {
public:
  ScheduleChecker(const loop::Program& program, Diagnostics& diagnostics)
      : program_(program), kernel_(program.source), diagnostics_(diagnostics) {
    for (const Stage* stage : liveStages(kernel_)) live_.insert(stage->name);
    for (const Stage& stage : kernel_.stages) {
      StageSchedule schedule;
      schedule.name = stage.name;
      auto addLoop = [&](const Axis& axis, bool reduction) {
        ScheduledLoop loop;
        loop.name = axis.name;
        if (axis.extent.isConstant()) loop.extent = axis.extent.factor;
        loop.extentText = axis.extent.toString();
        loop.reduction = reduction;
        loop.coefficients[axis.name] = 1;
        schedule.loops.push_back(loop);
      };
      for (const Axis& axis : stage.axes) addLoop(axis, false);
      if (stage.reduction)
        for (const Axis& axis : stage.reduction->axes) addLoop(axis, true);
      model_.stages.emplace(stage.name, schedule);
    }
    for (const loop::LoopNest& nest : program_.kernels) {
      NestParts parts = parseNest(kernel_, nest);
      const Member* folded = epilogueReduction(parts);
      if (!folded) continue;
      const StageSchedule& reduction = model_.stages.at(folded->computation.stage->name);
      StageSchedule& root = model_.stages.at(nest.stages.back());
      for (const ScheduledLoop& loop : reduction.loops)
        if (loop.reduction) root.loops.push_back(loop);
      root.epilogueReduction = reduction.name;
      model_.stages.at(reduction.name).epilogueOf = root.name;
      if (std::optional<OnlineSoftmax> online = onlineSoftmax(parts, *folded)) {
        model_.stages.at(online->max.stage->name).onlineIn = root.name;
        for (const Computation& sum : online->sums) model_.stages.at(sum.stage->name).onlineIn = root.name;
      }
    }
  }

  ScheduleModel run() {
    for (const Directive& directive : kernel_.schedule)
      if (!aboutUncomputedStage(directive)) apply(directive);
    refitCopies();
    for (const auto& [name, stage] : model_.stages) checkBlockLoopsOutermost(stage);
    checkThreadsPerKernel();
    checkGridKernels();
    checkSharedMemory();
    return model_;
  }

private:
  // A stage no output depends on is never computed (Loop IR drops it), so directives about it have
  // nothing to apply to: a call whose result nothing reads brings its callee's schedule for nothing. Its
  // caches go with it, and the pads and double buffers of those caches.
  bool aboutUncomputedStage(const Directive& d) {
    auto uncomputed = [&](const Name& name) { return kernel_.findStage(name.text) && !live_.count(name.text); };
    if (d.kind == DirectiveKind::Pad || d.kind == DirectiveKind::DoubleBuffer) return skippedCaches_.count(d.stage.text) > 0;
    bool skipped = uncomputed(d.stage) || uncomputed(d.atStage);
    if (skipped && d.kind == DirectiveKind::Cache)
      skippedCaches_.insert(d.results.empty() ? defaultCacheName(d.stage.text, d.memory, [&](const std::string& taken) {
                                                  return skippedCaches_.count(taken) > 0;
                                                })
                                              : d.results[0].text);
    return skipped;
  }

  void apply(const Directive& d) {
    for (const Name* named : {&d.stage, &d.atStage})
      if (auto stage = model_.stages.find(named->text); stage != model_.stages.end() && !stage->second.epilogueOf.empty()) {
        const StageSchedule& root = model_.stages.at(stage->second.epilogueOf);
        diagnostics_.error(named->loc, fmt::format("{} is computed as the reduction of {}, which applies its own expression "
                                                   "to each result: schedule it as {} (loops of {}: {})", named->text,
                                                   root.name, root.name, root.name, loopNames(root.loops)));
        return;
      }
    for (const Name* named : {&d.stage, &d.atStage})
      if (auto stage = model_.stages.find(named->text); stage != model_.stages.end() && !stage->second.onlineIn.empty()) {
        const StageSchedule& root = model_.stages.at(stage->second.onlineIn);
        diagnostics_.error(named->loc, fmt::format("{} is computed online, as a running value in the reduction loops of {} "
                                                   "(an online softmax): schedule {} (loops of {}: {})", named->text, root.name,
                                                   root.name, root.name, loopNames(root.loops)));
        return;
      }
    switch (d.kind) {
      case DirectiveKind::Split: return split(d);
      case DirectiveKind::Tile: return tile(d);
      case DirectiveKind::Reorder: return reorder(d);
      case DirectiveKind::Fuse: return fuse(d);
      case DirectiveKind::Bind: return bind(d);
      case DirectiveKind::Inline:
      case DirectiveKind::Root:
      case DirectiveKind::ComputeAt: return place(d);
      case DirectiveKind::Cache: return cache(d);
      case DirectiveKind::Vectorize: return vectorize(d);
      case DirectiveKind::Unroll: return unroll(d);
      case DirectiveKind::Pad:
      case DirectiveKind::DoubleBuffer: return shapeCache(d);
      case DirectiveKind::Threads: return threads(d);
    }
  }

  // ---- names ----

  std::vector<std::string> stageNames() const {
    std::vector<std::string> names;
    for (const Stage& stage : kernel_.stages) names.push_back(stage.name);
    return names;
  }

  StageSchedule* findStage(const Name& name) {
    auto found = model_.stages.find(name.text);
    if (found != model_.stages.end()) return &found->second;
    std::vector<std::string> names = stageNames();
    std::string message = fmt::format("unknown stage '{}' in kernel {} (stages: {})", name.text, kernel_.name, join(names, ", "));
    if (kernel_.findInput(name.text)) message = fmt::format("'{}' is an input of {}, not a stage: only stages have loops to schedule", name.text, kernel_.name);
    if (findCache(name.text)) message = fmt::format("'{}' is a cache: its loops are placed by its 'cache' directive", name.text);
    diagnostics_.error(name.loc, withSuggestion(message, name.text, names));
    return nullptr;
  }

  CacheStage* findCache(const std::string& name) {
    for (CacheStage& cache : model_.caches)
      if (cache.name == name) return &cache;
    return nullptr;
  }

  // The position of loop `name` in `stage`, or nullopt after an error naming the stage's loops.
  std::optional<size_t> findLoop(const StageSchedule& stage, const Name& name) {
    for (size_t k = 0; k < stage.loops.size(); ++k)
      if (stage.loops[k].name == name.text) return k;
    std::vector<std::string> names;
    for (const ScheduledLoop& loop : stage.loops) names.push_back(loop.name);
    diagnostics_.error(name.loc, withSuggestion(fmt::format("stage {} has no loop '{}' (loops of {}: {})", stage.name,
                                                            name.text, stage.name, loopNames(stage.loops)),
                                                name.text, names));
    return std::nullopt;
  }

  // The names of the loops a directive makes: distinct, and new to the stage (a name the stage ever had
  // would make its loops ambiguous).
  bool freshLoopNames(const StageSchedule& stage, const std::vector<Name>& results) {
    std::set<std::string> seen;
    for (const Name& result : results) {
      bool taken = std::any_of(stage.loops.begin(), stage.loops.end(), [&](const ScheduledLoop& loop) {
                     return loop.name == result.text;
                   }) ||
                   std::any_of(stage.derivations.begin(), stage.derivations.end(), [&](const LoopDerivation& derivation) {
                     return std::find(derivation.from.begin(), derivation.from.end(), result.text) != derivation.from.end();
                   });
      if (taken || !seen.insert(result.text).second) {
        diagnostics_.error(result.loc, fmt::format("stage {} has or had a loop named '{}': new loops need new names", stage.name, result.text));
        return false;
      }
    }
    return true;
  }

  // Every level of a stage's loop nest is a level of recursion in the lowering and of nesting in the
  // generated C++: a bound far above any useful schedule keeps both within a thread's stack. The few
  // loops the default policy adds to complete a schedule are not counted.
  bool roomForLoops(const StageSchedule& stage, size_t added, const Directive& d) {
    if (d.byDefault || stage.loops.size() + added <= kMaxStageLoops) return true;
    diagnostics_.error(d.loc, fmt::format("{} would give stage {} {} loops; a stage has at most {}",
                                          d.kind == DirectiveKind::Split ? "split" : "tile", stage.name,
                                          stage.loops.size() + added, kMaxStageLoops));
    return false;
  }

  // Loops that bind or otherwise mark a loop must be split, fused and reordered before it is marked.
  bool unmarked(const StageSchedule& stage, const ScheduledLoop& loop, const Directive& d, const Name& where) {
    if (!loop.binding && !loop.unrolled && !loop.vectorized) return true;
    std::string what = loop.binding ? "bound to " + hardwareIndexName(*loop.binding) : loop.unrolled ? "unrolled" : "vectorized";
    diagnostics_.error(where.loc, fmt::format("{}.{} is already {}: {} a loop before binding, unrolling or vectorizing it",
                                              stage.name, loop.name, what, directiveWord(d.kind)));
    return false;
  }

  // ---- loops ----

  static ScheduledLoop outerPart(const ScheduledLoop& loop, const std::string& name, int64_t factor) {
    ScheduledLoop outer = loop;
    outer.name = name;
    outer.extent = loop.extent ? std::optional<int64_t>((*loop.extent + factor - 1) / factor) : std::nullopt;
    outer.extentText = outer.extent ? std::to_string(*outer.extent) : fmt::format("ceil({} / {})", loop.extentText, factor);
    for (auto& [axis, coefficient] : outer.coefficients) coefficient *= factor;
    return outer;
  }

  static ScheduledLoop innerPart(const ScheduledLoop& loop, const std::string& name, int64_t factor) {
    ScheduledLoop inner = loop;
    inner.name = name;
    inner.extent = factor;
    inner.extentText = std::to_string(factor);
    return inner;
  }

  bool positiveFactor(const Number& factor, const std::string& verb) {
    if (factor.value > 0) return true;
    diagnostics_.error(factor.loc, fmt::format("{} by {}: the factor must be a positive constant", verb, factor.value));
    return false;
  }

  void split(const Directive& d) {
    auto [stage, named] = namedLoop(d);
    if (!named || !positiveFactor(d.factors[0], "split") || !unmarked(*stage, *named, d, d.axes[0]) ||
        !freshLoopNames(*stage, d.results) || !roomForLoops(*stage, 1, d))
      return;
    size_t at = named - stage->loops.data();
    ScheduledLoop loop = stage->loops[at];
    int64_t factor = d.factors[0].value;
    stage->loops[at] = outerPart(loop, d.results[0].text, factor);
    stage->loops.insert(stage->loops.begin() + at + 1, innerPart(loop, d.results[1].text, factor));
    stage->derivations.push_back({{loop.name}, {d.results[0].text, d.results[1].text}, factor});
  }

  void tile(const Directive& d) {
    StageSchedule* stage = findStage(d.stage);
    if (!stage) return;
    std::optional<size_t> a = findLoop(*stage, d.axes[0]), b = findLoop(*stage, d.axes[1]);
    if (!a || !b) return;
    if (*a == *b) {
      diagnostics_.error(d.axes[1].loc, fmt::format("tile names loop {} twice", d.axes[0].text));
      return;
    }
    if (!positiveFactor(d.factors[0], "tile") || !positiveFactor(d.factors[1], "tile") ||
        !unmarked(*stage, stage->loops[*a], d, d.axes[0]) || !unmarked(*stage, stage->loops[*b], d, d.axes[1]) ||
        !freshLoopNames(*stage, d.results) || !roomForLoops(*stage, 2, d))
      return;
    ScheduledLoop first = stage->loops[*a], second = stage->loops[*b];
    std::vector<ScheduledLoop> tiled{outerPart(first, d.results[0].text, d.factors[0].value),
                                     outerPart(second, d.results[1].text, d.factors[1].value),
                                     innerPart(first, d.results[2].text, d.factors[0].value),
                                     innerPart(second, d.results[3].text, d.factors[1].value)};
    size_t position = std::min(*a, *b);
    std::vector<ScheduledLoop> loops = stage->loops;
    loops.erase(loops.begin() + std::max(*a, *b));
    loops.erase(loops.begin() + position);
    loops.insert(loops.begin() + position, tiled.begin(), tiled.end());
    if (!accumulatorsFit(*stage, loops, d)) return;
    stage->loops = loops;
    stage->derivations.push_back({{first.name}, {d.results[0].text, d.results[2].text}, d.factors[0].value});
    stage->derivations.push_back({{second.name}, {d.results[1].text, d.results[3].text}, d.factors[1].value});
  }

  void reorder(const Directive& d) {
    StageSchedule* stage = findStage(d.stage);
    if (!stage) return;
    std::vector<size_t> positions;
    std::set<std::string> seen;
    for (const Name& axis : d.axes) {
      std::optional<size_t> at = findLoop(*stage, axis);
      if (!at) return;
      if (!seen.insert(axis.text).second) {
        diagnostics_.error(axis.loc, fmt::format("reorder names loop {} twice", axis.text));
        return;
      }
      positions.push_back(*at);
    }
    // The named loops take the places they held, in the order written.
    std::vector<size_t> places = positions;
    std::sort(places.begin(), places.end());
    std::vector<ScheduledLoop> loops = stage->loops;
    for (size_t k = 0; k < positions.size(); ++k) loops[places[k]] = stage->loops[positions[k]];
    if (!accumulatorsFit(*stage, loops, d)) return;
    stage->loops = loops;
  }

  // A reduction loop outside some of the stage's own loops keeps one accumulator per iteration of those
  // loops in each thread's registers: they need constant extents, and not too many of them.
  bool accumulatorsFit(const StageSchedule& stage, const std::vector<ScheduledLoop>& loops, const Directive& d) {
    auto firstReduction = std::find_if(loops.begin(), loops.end(), [](const ScheduledLoop& l) { return l.reduction; });
    int64_t accumulators = 1;
    for (auto inner = firstReduction; inner != loops.end(); ++inner) {
      if (inner->reduction || (inner->binding && inner->binding->scope != HardwareScope::Block)) continue;
      if (!inner->extent) {
        diagnostics_.error(d.loc, fmt::format("{} {} moves reduction loop {} outside loop {}, whose extent {} is not "
                                              "a constant: the partial results of every {} would have to be kept; keep {} "
                                              "inside {}, or split {} by a constant and keep {} inside the outer part",
                                              directiveWord(d.kind), stage.name, firstReduction->name, inner->name,
                                              inner->extentText, inner->name, firstReduction->name, inner->name, inner->name,
                                              firstReduction->name));
        return false;
      }
      accumulators *= *inner->extent;
    }
    if (accumulators > kMaxRegisterElements) {
      diagnostics_.error(d.loc, fmt::format("{} {} moves reduction loop {} outside loops that need {} accumulators "
                                            "per thread, more than the {} registers a thread may use", directiveWord(d.kind),
                                            stage.name, firstReduction->name, accumulators, kMaxRegisterElements));
      return false;
    }
    return true;
  }

  void fuse(const Directive& d) {
    StageSchedule* stage = findStage(d.stage);
    if (!stage) return;
    std::optional<size_t> a = findLoop(*stage, d.axes[0]), b = findLoop(*stage, d.axes[1]);
    if (!a || !b) return;
    const ScheduledLoop &outer = stage->loops[*a], &inner = stage->loops[*b];
    if (*b != *a + 1) {
      diagnostics_.error(d.loc, fmt::format("fuse {} ({}, {}): {} must be directly outside {} (loops of {}: {})", stage->name,
                                            outer.name, inner.name, outer.name, inner.name, stage->name, loopNames(stage->loops)));
      return;
    }
    if (outer.reduction != inner.reduction) {
      diagnostics_.error(d.loc, fmt::format("fuse {} ({}, {}): {} is a reduction loop and {} is not; only loops of the same "
                                            "kind fuse", stage->name, outer.name, inner.name,
                                            outer.reduction ? outer.name : inner.name, outer.reduction ? inner.name : outer.name));
      return;
    }
    if (!unmarked(*stage, outer, d, d.axes[0]) || !unmarked(*stage, inner, d, d.axes[1]) ||
        !freshLoopNames(*stage, d.results))
      return;
    ScheduledLoop fused = outer;
    fused.name = d.results[0].text;
    fused.extent = outer.extent && inner.extent ? std::optional<int64_t>(*outer.extent * *inner.extent) : std::nullopt;
    fused.extentText = fused.extent ? std::to_string(*fused.extent) : outer.extentText + " * " + inner.extentText;
    for (const auto& [axis, coefficient] : inner.coefficients) fused.coefficients[axis] = coefficient;
    fused.fused = true;
    stage->derivations.push_back({{outer.name, inner.name}, {fused.name}, 0});
    stage->loops[*a] = fused;
    stage->loops.erase(stage->loops.begin() + *b);
  }

  void bind(const Directive& d) {
    auto [stage, named] = namedLoop(d);
    if (!named) return;
    ScheduledLoop& loop = *named;
    const std::string index = hardwareIndexName(d.target);
    if (loop.binding) {
      diagnostics_.error(d.axes[0].loc, fmt::format("{}.{} is already bound to {} (at line {})", stage->name, loop.name,
                                                    hardwareIndexName(*loop.binding), loop.boundAt.line));
      return;
    }
    for (const ScheduledLoop& other : stage->loops)
      if (other.binding && *other.binding == d.target) {
        diagnostics_.error(d.loc, fmt::format("{} is already bound to {}.{} (at line {}); each hardware index takes one loop "
                                              "of a stage", index, stage->name, other.name, other.boundAt.line));
        return;
      }
    if (!unmarked(*stage, loop, d, d.axes[0])) return;
    if (d.target.scope == HardwareScope::Grid) {
      if (loop.reduction) {
        diagnostics_.error(d.loc, fmt::format("{}.{} is a reduction loop: the threads of a grid-strided loop never combine "
                                              "their results, so only a pure loop binds to grid.x (loops of {}: {})",
                                              stage->name, loop.name, stage->name, loopNames(stage->loops)));
        return;
      }
      if (!nestRootedAt(stage->name)) {
        diagnostics_.error(d.loc, fmt::format("bind {}.{} to grid.x: {} is computed in another stage's loops, which take "
                                              "its pure loops; bind a loop of the stage its kernel stores", stage->name,
                                              loop.name, stage->name));
        return;
      }
    }
    if (d.target.scope == HardwareScope::Block && loop.reduction && !d.atomic) {
      diagnostics_.error(d.loc, fmt::format("{}.{} is a reduction loop: blocks cannot combine their partial results but "
                                            "through atomics, so a reduction binds to thread.* or warp.x, or to block.* "
                                            "with 'atomic' (bind {}.{} to {} atomic)", stage->name, loop.name, stage->name,
                                            loop.name, index));
      return;
    }
    if (d.atomic && !loop.reduction) {
      diagnostics_.error(d.loc, fmt::format("'atomic' combines the partial results of a reduction loop, and {}.{} is not one",
                                            stage->name, loop.name));
      return;
    }
    if (d.atomic) {
      std::optional<std::string> whyNot = whyNoAtomic(*stage);
      if (whyNot) {
        diagnostics_.error(d.loc, fmt::format("bind {}.{} to {} atomic: {}", stage->name, loop.name, index, *whyNot));
        return;
      }
    }
    if (d.target.scope == HardwareScope::Thread || d.target.scope == HardwareScope::Warp) {
      if (!loop.extent) {
        diagnostics_.error(d.loc, fmt::format("a loop bound to {} needs a constant extent, and {}.{} has extent {}: split it "
                                              "by a constant first (split {}.{} by 128 -> ({}_outer, {}_inner)) and bind the "
                                              "inner part", index, stage->name, loop.name, loop.extentText, stage->name,
                                              loop.name, loop.name, loop.name));
        return;
      }
      int64_t most = d.target.scope == HardwareScope::Warp ? 32 : kMaxThreadsPerBlock;
      if (*loop.extent > most) {
        diagnostics_.error(d.loc, fmt::format("{}.{} has {} iterations, more than the {} {} has", stage->name, loop.name,
                                              *loop.extent, most,
                                              d.target.scope == HardwareScope::Warp ? "lanes a warp" : "threads a block"));
        return;
      }
    }
    loop.binding = d.target;
    loop.atomic = d.atomic;
    loop.boundAt = d.loc;
  }

  // Why the partial results of `stage`'s reduction cannot be combined by atomics in global memory, or
  // nullopt: CUDA has atomic sums of f32, f64, i32 and i64 and atomic maxima and minima of i32 and i64,
  // and the stage must be the reduction its kernel stores, as it is.
  std::optional<std::string> whyNoAtomic(const StageSchedule& schedule) const {
    std::string legal = "CUDA has atomic sums of f32, f64, i32 and i64 and atomic max and min of i32 and i64";
    if (!schedule.epilogueReduction.empty())
      return fmt::format("{} applies its own expression to each result of {}, and atomics can only accumulate the stored "
                         "value itself; bind without 'atomic' to combine across threads", schedule.name,
                         schedule.epilogueReduction);
    const Stage& stage = *kernel_.findStage(schedule.name);
    const loop::LoopNest* nest = nestRootedAt(schedule.name);
    if (!nest)
      return fmt::format("{} is computed in place in another stage's loops, in registers, not in global memory where "
                         "atomics combine; bind without 'atomic' to combine across threads", schedule.name);
    ReduceOp op = stage.reduction->op;
    bool sum = op == ReduceOp::Sum, extremum = op == ReduceOp::Max || op == ReduceOp::Min;
    if (!sum && !extremum) return fmt::format("{} is a {} reduction, and {}", schedule.name, reduceOpName(op), legal);
    if (stage.reduction->accumulator != stage.dtype)
      return fmt::format("{} accumulates its {} values in {} and rounds once at the end, which atomics on {} cannot do; "
                         "{}", schedule.name, dtypeName(stage.dtype), dtypeName(stage.reduction->accumulator),
                         dtypeName(stage.dtype), legal);
    bool supported = stage.dtype == DType::I32 || stage.dtype == DType::I64 ||
                     (sum && (stage.dtype == DType::F32 || stage.dtype == DType::F64));
    if (!supported) return fmt::format("{} is a {} of {}, and {}", schedule.name, reduceOpName(op), dtypeName(stage.dtype), legal);
    return std::nullopt;
  }

  // The loop `S.a` of `split`, `bind`, `unroll` and `vectorize`, or nulls after an error.
  std::pair<StageSchedule*, ScheduledLoop*> namedLoop(const Directive& d) {
    StageSchedule* stage = findStage(d.stage);
    if (!stage) return {nullptr, nullptr};
    std::optional<size_t> at = findLoop(*stage, d.axes[0]);
    if (!at) return {nullptr, nullptr};
    return {stage, &stage->loops[*at]};
  }

  void unroll(const Directive& d) {
    auto [stage, named] = namedLoop(d);
    if (!named || !unmarked(*stage, *named, d, d.axes[0])) return;
    ScheduledLoop& loop = *named;
    if (!loop.extent) {
      diagnostics_.error(d.loc, fmt::format("unroll {}.{}: its extent {} is not a constant; split it by a constant and "
                                            "unroll the inner part", stage->name, loop.name, loop.extentText));
      return;
    }
    loop.unrolled = true;
  }

  void vectorize(const Directive& d) {
    if (!d.factors.empty()) return vectorizeGroups(d);
    auto [stage, named] = namedLoop(d);
    if (!named || !unmarked(*stage, *named, d, d.axes[0])) return;
    ScheduledLoop& loop = *named;
    if (!loop.extent || (*loop.extent != 2 && *loop.extent != 4 && *loop.extent != 8)) {
      diagnostics_.error(d.loc, fmt::format("vectorize {}.{}: its extent is {}, and a vector access takes 2, 4 or 8 elements; "
                                            "split it by one of those first", stage->name, loop.name, loop.extentText));
      return;
    }
    const Stage* source = kernel_.findStage(stage->name);
    const std::string& innermost = source->axes.empty() ? "" : source->axes.back().name;
    bool contiguous = !loop.fused && loop.coefficients.size() == 1 &&
                      (loop.reduction ? readsAlongLastDimension(*source, loop.coefficients.begin()->first)
                                      : loop.coefficients.count(innermost) > 0) &&
                      loop.coefficients.begin()->second == 1;
    if (!contiguous) {
      std::string why = loop.reduction ? fmt::format("no tensor {} reads has consecutive elements along it", stage->name)
                        : innermost.empty() ? fmt::format("{} is a single element", stage->name)
                                            : fmt::format("consecutive iterations are not consecutive elements of {} (its "
                                                          "innermost axis is {})", stage->name, innermost);
      diagnostics_.error(d.loc, fmt::format("vectorize {}.{}: {}", stage->name, loop.name, why));
      return;
    }
    loop.vectorized = true;
  }

  // `vectorize S.a by W` of a loop bound to grid.x: groups of W consecutive elements of S's output, one
  // 16-byte access each. The loop must walk S's elements in memory order: S's axes, fused in order.
  void vectorizeGroups(const Directive& d) {
    auto [stage, named] = namedLoop(d);
    if (!named) return;
    ScheduledLoop& loop = *named;
    const Stage& source = *kernel_.findStage(stage->name);
    int bytes = dtypeBytes(source.dtype);
    std::string what = fmt::format("vectorize {}.{} by {}", stage->name, loop.name, d.factors[0].value);
    if (!loop.binding || loop.binding->scope != HardwareScope::Grid) {
      diagnostics_.error(d.loc, fmt::format("{}: 'by' gives the groups of a loop bound to grid.x, and {}.{} is {}; bind it "
                                            "first, or vectorize a loop of 2, 4 or 8 iterations without 'by'", what,
                                            stage->name, loop.name, loop.binding ? "bound to " + hardwareIndexName(*loop.binding)
                                                                                 : "not bound"));
      return;
    }
    if (loop.groupWidth != 1) {
      diagnostics_.error(d.axes[0].loc, fmt::format("{}.{} is already vectorized by {}", stage->name, loop.name, loop.groupWidth));
      return;
    }
    int64_t width = d.factors[0].value;
    bool vectors = bytes >= 2 && source.dtype != DType::Bool;  // a 16-byte group of 1-byte elements is no access CUDA has
    if (width != 1 && (!vectors || width * bytes != kVectorGroupBytes)) {
      diagnostics_.error(d.factors[0].loc, fmt::format("{}: a group is one {}-byte access, {}", what, kVectorGroupBytes,
                                                       vectors ? fmt::format("{} elements of {} {}: vectorize by {} (or by 1, "
                                                                             "element by element)", kVectorGroupBytes / bytes,
                                                                             dtypeName(source.dtype), stage->name,
                                                                             kVectorGroupBytes / bytes)
                                                               : fmt::format("and {} is {}: only by 1", stage->name,
                                                                             dtypeName(source.dtype))));
      return;
    }
    std::vector<std::string> axes;
    for (const Axis& axis : source.axes) axes.push_back(axis.name);
    if (width != 1 && fusedAxes(*stage, loop.name) != axes) {
      diagnostics_.error(d.loc, fmt::format("{}: the groups are consecutive elements of {}, so {}.{} must be its axes ({}) "
                                            "fused in that order", what, stage->name, stage->name, loop.name, join(axes, ", ")));
      return;
    }
    loop.groupWidth = width;
  }

  // The axes that `fuse` directives alone made `name` of, outermost first; empty when a split made it.
  static std::vector<std::string> fusedAxes(const StageSchedule& stage, const std::string& name) {
    for (const LoopDerivation& derivation : stage.derivations)
      if (std::count(derivation.to.begin(), derivation.to.end(), name)) {
        if (derivation.factor > 0) return {};
        std::vector<std::string> outer = fusedAxes(stage, derivation.from[0]), inner = fusedAxes(stage, derivation.from[1]);
        if (outer.empty() || inner.empty()) return {};
        outer.insert(outer.end(), inner.begin(), inner.end());
        return outer;
      }
    return {name};
  }

  // `threads S N`: the block's size of the kernel that computes S, when a loop of S is bound to grid.x.
  void threads(const Directive& d) {
    StageSchedule* stage = findStage(d.stage);
    if (!stage) return;
    int64_t count = d.factors[0].value;
    if (count < 1 || count > kMaxThreadsPerBlock) {
      diagnostics_.error(d.factors[0].loc, fmt::format("threads {} {}: a block has 1 to {} threads", stage->name, count,
                                                       kMaxThreadsPerBlock));
      return;
    }
    if (stage->threads) {
      diagnostics_.error(d.loc, fmt::format("the threads of {} are already given (at line {})", stage->name,
                                            stage->threadsAt.line));
      return;
    }
    stage->threads = count;
    stage->threadsAt = d.loc;
  }

  // Does `stage` read some tensor at consecutive elements of its last dimension as reduction axis
  // `axis` steps? Then a vectorized loop over `axis` reads it by vectors.
  bool readsAlongLastDimension(const Stage& stage, const std::string& axis) const {
    for (const std::string& tensor : readsOf(stage))
      for (const std::vector<ExprPtr>& indices : readsOf(stage, tensor)) {
        std::optional<std::map<std::string, int64_t>> terms = indices.empty() ? std::nullopt : affineTerms(*indices.back());
        if (terms && terms->count(axis) && terms->at(axis) == 1) return true;
      }
    return false;
  }

  // ---- placement ----

  // The stages and inputs `stage` reads, looking through the stages the default policy inlines.
  std::set<std::string> readsOf(const Stage& stage) const {
    std::set<std::string> reads;
    std::function<void(const Expr&)> visit = [&](const Expr& body) {
      forEachNode(body, [&](const Expr& node) {
        const auto* load = node.as<Load>();
        if (!load || !reads.insert(load->tensor).second) return;
        if (const Stage* producer = kernel_.findStage(load->tensor); producer && readThrough(*producer, stage))
          visit(*producer->body);
      });
    };
    visit(*stage.body);
    return reads;
  }

  bool isOutput(const std::string& name) const {
    return std::any_of(kernel_.outputs.begin(), kernel_.outputs.end(), [&](const TensorParam& p) { return p.name == name; });
  }

  bool isInlinedByDefault(const Stage& stage) const { return !stage.reduction && !isOutput(stage.name); }

  // Does `consumer` read what `producer` reads, as its own reads? When the default policy inlines the
  // producer, or the consumer computes it as its reduction or online in its reduction.
  bool readThrough(const Stage& producer, const Stage& consumer) const {
    const StageSchedule& schedule = model_.stages.at(producer.name);
    return isInlinedByDefault(producer) || schedule.epilogueOf == consumer.name || schedule.onlineIn == consumer.name;
  }

  // The nest whose root is `stage`: one CUDA kernel.
  const loop::LoopNest* nestRootedAt(const std::string& stage) const {
    for (const loop::LoopNest& nest : program_.kernels)
      if (nest.stages.back() == stage) return &nest;
    return nullptr;
  }

  // Why the lowering cannot compute `stage` inside the loops of `consumer`, or nullopt when it can:
  // `consumer` must be the root of a kernel, and `stage` computed in that kernel already, or
  // elementwise (its other readers inline it), or a reduction only that kernel reads; and what is
  // computed whole at a loop cannot read what is computed in place inside the loops.
  std::optional<std::string> whyNotComputedIn(const std::string& stage, const std::string& consumer) const {
    const loop::LoopNest* nest = nestRootedAt(consumer);
    if (!nest) {
      for (const loop::LoopNest& other : program_.kernels)
        if (std::count(other.stages.begin(), other.stages.end(), consumer))
          return fmt::format("{} is computed inside the loops of {}, not in loops of its own", consumer, other.stages.back());
      return fmt::format("{} is inlined into its readers and has no loops", consumer);
    }
    if (std::count(nest->stages.begin(), nest->stages.end(), stage)) return std::nullopt;
    const Stage& computed = *kernel_.findStage(stage);
    for (const std::string& read : readsOf(computed))
      for (const loop::LoopNest& other : program_.kernels)
        if (other.stages.back() != read && std::count(other.stages.begin(), other.stages.end(), read) &&
            model_.stages.at(read).placement != Placement::ComputeAt)
          return fmt::format("{} reads {}, which is computed in place inside the loops of {}", stage, read, other.stages.back());
    if (isInlinedByDefault(computed)) return std::nullopt;
    for (const Stage& reader : kernel_.stages)
      if (reader.name != stage && !isInlinedByDefault(reader) && readsOf(reader).count(stage) &&
          !std::count(nest->stages.begin(), nest->stages.end(), reader.name))
        return fmt::format("{} reads {} too, in another kernel, so {} is computed once by a kernel of its own", reader.name,
                           stage, stage);
    return std::nullopt;
  }

  // How `source` is computed in the kernel of `consumer` (inlined into it, or among its loops), or
  // nullopt when it is an input or a stage stored by another kernel (or `consumer` itself).
  std::optional<std::string> computedWith(const std::string& source, const std::string& consumer) const {
    if (source == consumer || !kernel_.findStage(source)) return std::nullopt;
    for (const loop::LoopNest& nest : program_.kernels) {
      if (!std::count(nest.stages.begin(), nest.stages.end(), consumer)) continue;
      if (nest.stages.back() == source) return std::nullopt;
      if (std::count(nest.stages.begin(), nest.stages.end(), source))
        return fmt::format("{} is computed in the kernel of {}, inside its loops", source, nest.stages.back());
    }
    if (nestRootedAt(source)) return std::nullopt;
    return fmt::format("{} is inlined into its readers", source);
  }

  // "y.n, y.d, root": every place where `stage` may be computed, each one that applies.
  std::string legalPlaces(const std::string& stage) {
    std::vector<std::string> places;
    for (const Stage& consumer : kernel_.stages) {
      if (consumer.name == stage || !readsOf(consumer).count(stage) || whyNotComputedIn(stage, consumer.name)) continue;
      const StageSchedule& at = model_.stages.at(consumer.name);
      for (size_t k = 0; k < at.loops.size(); ++k)
        if (!readerCombinesInside(stage, at, k) &&
            fitCopy(placement(DirectiveKind::ComputeAt, stage, consumer.name, at.loops[k].name), at, k, false))
          places.push_back(consumer.name + "." + at.loops[k].name);
    }
    places.push_back("root");
    return join(places, ", ");
  }

  // Why `stage` cannot be computed at loop `loopAt` of `at`, for itself or the other stages of that kernel
  // that read it (computed in place, after it): none can combine across a thread index that a loop of
  // `at` around that place gives each thread its own of. Nullopt when none does.
  std::optional<std::string> readerCombinesInside(const std::string& stage, const StageSchedule& at, size_t loopAt) const {
    const loop::LoopNest* nest = nestRootedAt(at.name);
    if (!nest) return std::nullopt;
    for (const std::string& reader : nest->stages) {
      if (reader == at.name || (reader != stage && !readsOf(*kernel_.findStage(reader)).count(stage))) continue;
      for (const ScheduledLoop& loop : model_.stages.at(reader).loops) {
        if (!loop.reduction || !loop.binding || loop.binding->scope == HardwareScope::Block) continue;
        int dimension = loop.binding->scope == HardwareScope::Warp ? 0 : loop.binding->dimension;
        for (size_t k = 0; k <= loopAt; ++k) {
          const std::optional<HardwareIndex>& outer = at.loops[k].binding;
          if (outer && outer->scope != HardwareScope::Block && (outer->scope == HardwareScope::Warp ? 0 : outer->dimension) == dimension)
            return fmt::format("{} combines across {}, which {}.{} around that place gives each thread its own of",
                               reader == stage ? stage : fmt::format("{} reads {} and", reader, stage),
                               hardwareIndexName(*loop.binding), at.name, at.loops[k].name);
        }
      }
    }
    return std::nullopt;
  }

  // "y.d_lane, y.d_step": the loops of `d`'s stage at which its cache fits.
  std::string legalCachePlaces(const Directive& d) {
    const StageSchedule& at = model_.stages.at(d.atStage.text);
    std::vector<std::string> places;
    for (size_t k = 0; k < at.loops.size(); ++k) {
      Directive elsewhere = d;
      elsewhere.atAxis.text = at.loops[k].name;
      if (fitCopy(elsewhere, at, k, false)) places.push_back(at.name + "." + at.loops[k].name);
    }
    return places.empty() ? "none" : join(places, ", ");
  }

  static Directive placement(DirectiveKind kind, const std::string& stage, const std::string& atStage, const std::string& atLoop) {
    Directive d;
    d.kind = kind;
    d.stage.text = stage;
    d.atStage.text = atStage;
    d.atAxis.text = atLoop;
    return d;
  }

  void place(const Directive& d) {
    StageSchedule* stage = findStage(d.stage);
    if (!stage) return;
    if (stage->placement != Placement::Default) {
      diagnostics_.error(d.loc, fmt::format("{} is already placed by the directive at line {}", stage->name, stage->placedAt.line));
      return;
    }
    const Stage& source = *kernel_.findStage(stage->name);
    if (d.kind == DirectiveKind::Root) {
      stage->placement = Placement::Root;
      stage->placedAt = d.loc;
      return;
    }
    if (isOutput(stage->name)) {
      diagnostics_.error(d.stage.loc, fmt::format("{} is an output: it is stored to global memory by a kernel of its own and "
                                                  "cannot be {}", stage->name,
                                                  d.kind == DirectiveKind::Inline ? "inlined" : "computed inside another stage"));
      return;
    }
    if (d.kind == DirectiveKind::Inline) {
      if (source.reduction) {
        diagnostics_.error(d.stage.loc, fmt::format("{} is a reduction and cannot be inlined; legal places to compute {}: {}",
                                                    stage->name, stage->name, legalPlaces(stage->name)));
        return;
      }
      stage->placement = Placement::Inline;
      stage->placedAt = d.loc;
      return;
    }
    StageSchedule* at = findStage(d.atStage);
    if (!at) return;
    bool reads = at->name != stage->name && readsOf(*kernel_.findStage(at->name)).count(stage->name);
    bool found = std::any_of(at->loops.begin(), at->loops.end(), [&](const ScheduledLoop& l) { return l.name == d.atAxis.text; });
    std::optional<std::string> whyNot = reads && found ? whyNotComputedIn(stage->name, at->name) : std::nullopt;
    if (!reads || !found || whyNot) {
      std::string why = !reads  ? fmt::format("{} does not read {}", at->name, stage->name)
                        : whyNot ? *whyNot
                                 : fmt::format("{} has no loop '{}'", at->name, d.atAxis.text);
      diagnostics_.error(reads && !whyNot ? d.atAxis.loc : d.atStage.loc,
                         fmt::format("cannot compute {} at {}.{}: {}; legal places to compute {}: {}", stage->name, at->name,
                                     d.atAxis.text, why, stage->name, legalPlaces(stage->name)));
      return;
    }
    size_t loopAt = *findLoop(*at, d.atAxis);
    if (std::optional<std::string> conflict = readerCombinesInside(stage->name, *at, loopAt)) {
      diagnostics_.error(d.loc, fmt::format("cannot compute {} at {}.{}: {}; legal places to compute {}: {}", stage->name,
                                            at->name, d.atAxis.text, *conflict, stage->name, legalPlaces(stage->name)));
      return;
    }
    std::optional<CopyFit> fit = fitCopy(d, *at, loopAt, true);
    if (!fit) return;
    stage->placement = Placement::ComputeAt;
    stage->atStage = at->name;
    stage->atLoop = d.atAxis.text;
    stage->placedAt = d.loc;
    stage->footprint = fit->extents;
    stage->memory = fit->memory;
    copies_.push_back({d, ""});
  }

  // A copy's size depends on the loops inside and around its place, which later directives (and the
  // default policy) may still split, bind or reorder: each copy is sized again once all are applied,
  // at the innermost of the loops its loop became (a place inside a loop is inside all of its parts).
  void refitCopies() {
    for (const auto& [d, cacheName] : copies_) {
      StageSchedule& at = model_.stages.at(d.atStage.text);
      size_t loopAt = finalLoop(at, d.atAxis.text);
      std::optional<CopyFit> fit = fitCopy(d, at, loopAt, true);
      if (!fit) continue;
      if (d.kind == DirectiveKind::ComputeAt) {
        StageSchedule& stage = model_.stages.at(d.stage.text);
        stage.atLoop = at.loops[loopAt].name;
        stage.footprint = fit->extents;
        stage.memory = fit->memory;
        continue;
      }
      CacheStage& cache = *findCache(cacheName);
      cache.atLoop = at.loops[loopAt].name;
      cache.shape = fit->extents;
      cache.wholeRows = fit->wholeRows;
    }
  }

  // The position of `name` in `stage`'s loops, or of the innermost loop that splits and fuses made of it.
  static size_t finalLoop(const StageSchedule& stage, const std::string& name) {
    std::set<std::string> parts{name};
    for (const LoopDerivation& derivation : stage.derivations)
      if (std::any_of(derivation.from.begin(), derivation.from.end(), [&](const std::string& n) { return parts.count(n); }))
        parts.insert(derivation.to.begin(), derivation.to.end());
    size_t innermost = 0;
    for (size_t k = 0; k < stage.loops.size(); ++k)
      if (parts.count(stage.loops[k].name)) innermost = k;
    return innermost;
  }

  // The loops of `stage` that vary within one iteration of its loop `loopAt`, as a copy in `memory` sees
  // them: a shared copy serves the whole block, so loops bound to threads vary wherever they are.
  static std::vector<const ScheduledLoop*> varyingLoops(const StageSchedule& stage, size_t loopAt, CacheMemory memory) {
    std::vector<const ScheduledLoop*> varying;
    for (size_t k = 0; k < stage.loops.size(); ++k) {
      const ScheduledLoop& loop = stage.loops[k];
      bool threads = loop.binding && (loop.binding->scope == HardwareScope::Thread || loop.binding->scope == HardwareScope::Warp);
      if (memory == CacheMemory::Shared ? (k > loopAt || threads) : (k > loopAt && !threads)) varying.push_back(&loop);
    }
    return varying;
  }

  // Where a stage computed at loop `loopAt` of `at` lives: in shared memory, computed by the block's
  // threads together, outside every thread loop; in each thread's registers inside one.
  static CacheMemory memoryAt(const StageSchedule& at, size_t loopAt) {
    for (size_t k = 0; k <= loopAt; ++k)
      if (at.loops[k].binding && at.loops[k].binding->scope != HardwareScope::Block) return CacheMemory::Registers;
    return CacheMemory::Shared;
  }

  // ---- caches ----

  struct CopyFit {
    std::vector<int64_t> extents;  // one per dimension of the source
    CacheMemory memory = CacheMemory::Shared;
    bool wholeRows = false;
  };

  // The part of the tensor that `d` caches (or computes, for `compute ... at`) that `at` reads in one
  // iteration of its loop `loopAt`: the union of what each of its reads takes there. Nullopt when it
  // has no constant size, or too many elements for registers; then, with `report`, an error says why.
  std::optional<CopyFit> fitCopy(const Directive& d, const StageSchedule& at, size_t loopAt, bool report) {
    const std::string& source = d.stage.text;
    const Stage* sourceStage = kernel_.findStage(source);
    const TensorParam* input = kernel_.findInput(source);
    const Stage& consumer = *kernel_.findStage(at.name);
    bool compute = d.kind == DirectiveKind::ComputeAt, own = !compute && source == at.name;
    CopyFit fit;
    fit.memory = compute ? memoryAt(at, loopAt) : d.memory;
    std::vector<std::vector<ExprPtr>> reads;
    if (own) {
      std::vector<ExprPtr> indices;
      for (const Axis& axis : consumer.axes) indices.push_back(std::make_shared<AxisVar>(axis.name));
      reads.push_back(indices);
    } else {
      reads = readsOf(consumer, source);
    }
    std::string what = fmt::format("{} {}{} at {}.{}", directiveWord(d.kind), source,
                                   !compute && fit.memory == CacheMemory::Registers ? " in registers" : "", at.name, d.atAxis.text);
    auto fail = [&](const std::string& why) -> std::optional<CopyFit> {
      if (report)
        diagnostics_.error(d.loc, compute ? fmt::format("{}: {}", what, why)
                                          : fmt::format("{}: {}; legal places to cache {}: {}", what, why, source,
                                                        legalCachePlaces(d)));
      return std::nullopt;
    };
    const Shape& shape = sourceStage ? sourceStage->shape() : input->shape;
    DType dtype = sourceStage ? sourceStage->dtype : input->dtype;
    std::optional<int64_t> rowBound;
    if (!compute && fit.memory == CacheMemory::Shared && !own) rowBound = kWholeRowCacheBytes / dtypeBytes(dtype);
    std::vector<const ScheduledLoop*> varying = varyingLoops(at, loopAt, fit.memory);
    std::vector<std::vector<int64_t>> parts;
    for (const std::vector<ExprPtr>& indices : reads) {
      std::vector<int64_t>& extents = parts.emplace_back();
      for (size_t dim = 0; dim < indices.size(); ++dim) {
        const ScheduledLoop* symbolic = nullptr;
        std::optional<int64_t> width = footprintWidth(*indices[dim], varying, shape[dim], &symbolic);
        if (width) {
          extents.push_back(*width);
        } else if (rowBound && dim + 1 == indices.size() && readsWhole(*indices[dim], at, varying)) {
          extents.push_back(*rowBound);
          fit.wholeRows = true;
        } else if (symbolic) {
          return fail(fmt::format("loop {} inside it has extent {}, which is not a constant, so the part of {} to copy has "
                                  "no constant size; {} at a loop inside {}", symbolic->name, symbolic->extentText, source,
                                  directiveWord(d.kind), symbolic->name));
        } else {
          return fail(fmt::format("the part of {} to copy spans the whole of dimension {} (extent {}), which is not a "
                                  "constant size", source, dim, shape[dim].toString()));
        }
      }
    }
    // The reads of one dimension are one window shifted by constants, or no constant size covers them.
    for (size_t dim = 0; dim < shape.size(); ++dim) {
      int64_t low = 0, high = parts[0][dim];
      for (size_t r = 1; r < reads.size(); ++r) {
        std::optional<int64_t> shift = constantDistance(*reads[r][dim], *reads[0][dim]);
        if (!shift)
          return fail(fmt::format("{} reads {} at {} and at {}, which are no constant distance apart along dimension {}",
                                  at.name, source, printExpr(*reads[0][dim]), printExpr(*reads[r][dim]), dim));
        low = std::min(low, *shift);
        high = std::max(high, *shift + parts[r][dim]);
      }
      fit.extents.push_back(high - low);
    }
    for (size_t dim = 0; fit.wholeRows && dim + 1 < fit.extents.size(); ++dim)
      if (fit.extents[dim] != 1)
        return fail(fmt::format("a copy of whole rows of {} (its last dimension, {}, is read whole) takes one row at a "
                                "time, and dimension {} spans {}", source, shape.back().toString(), dim, fit.extents[dim]));
    int64_t elements = 1;
    for (int64_t extent : fit.extents) elements *= extent;
    if (fit.memory == CacheMemory::Registers && elements > kMaxRegisterElements)
      return fail(fmt::format("each thread would hold {} elements, more than the {} registers a thread may use; {} at a "
                              "loop further in", elements, kMaxRegisterElements, directiveWord(d.kind)));
    // A stage's own accumulators are initialised before its first reduction loop.
    for (size_t k = 0; own && k <= loopAt; ++k)
      if (at.loops[k].reduction)
        return fail(fmt::format("the accumulators must live outside the first reduction loop {}", at.loops[k].name));
    return fit;
  }

  // Is `index` an axis of `stage` all of whose loops vary (so that the read covers its whole extent)?
  static bool readsWhole(const Expr& index, const StageSchedule& stage, const std::vector<const ScheduledLoop*>& varying) {
    const auto* axis = index.as<AxisVar>();
    if (!axis) return false;
    for (const ScheduledLoop& loop : stage.loops)
      if (loop.coefficients.count(axis->name) &&
          std::find(varying.begin(), varying.end(), &loop) == varying.end())
        return false;
    return true;
  }

  // The reads of `source` that `stage`'s expression makes, with indices over the stage's axes.
  std::vector<std::vector<ExprPtr>> readsOf(const Stage& stage, const std::string& source) const {
    std::vector<std::vector<ExprPtr>> found;
    std::function<void(const ExprPtr&)> visit = [&](const ExprPtr& body) {
      forEachNode(*body, [&](const Expr& node) {
        const auto* load = node.as<Load>();
        if (!load) return;
        if (load->tensor == source) {
          found.push_back(load->indices);
          return;
        }
        const Stage* producer = kernel_.findStage(load->tensor);
        if (!producer || !readThrough(*producer, stage)) return;
        std::map<std::string, ExprPtr> axes;
        for (size_t k = 0; k < producer->axes.size(); ++k) axes[producer->axes[k].name] = load->indices[k];
        visit(rewrite(producer->body, [&](const Expr& e) -> ExprPtr {
          const auto* axis = e.as<AxisVar>();
          return axis && axes.count(axis->name) ? axes.at(axis->name) : nullptr;
        }));
      });
    };
    visit(stage.body);
    return found;
  }

  void cache(const Directive& d) {
    const std::string& source = d.stage.text;
    const Stage* sourceStage = kernel_.findStage(source);
    const TensorParam* input = kernel_.findInput(source);
    if (!sourceStage && !input) {
      std::vector<std::string> names = stageNames();
      for (const TensorParam& p : kernel_.inputs) names.push_back(p.name);
      diagnostics_.error(d.stage.loc, withSuggestion(fmt::format("cache {}: {} has no input or stage named '{}' (tensors: {})",
                                                                 source, kernel_.name, source, join(names, ", ")),
                                                     source, names));
      return;
    }
    StageSchedule* at = findStage(d.atStage);
    if (!at) return;
    const Stage& consumer = *kernel_.findStage(at->name);
    bool reads = source == at->name || !readsOf(consumer, source).empty();
    auto loopAt = std::find_if(at->loops.begin(), at->loops.end(), [&](const ScheduledLoop& l) { return l.name == d.atAxis.text; });
    if (reads && loopAt == at->loops.end()) {
      std::vector<std::string> names;
      for (const ScheduledLoop& loop : at->loops) names.push_back(loop.name);
      diagnostics_.error(d.atAxis.loc, withSuggestion(fmt::format("cannot cache {} at {}.{}: {} has no loop '{}'; legal places to "
                                                                  "cache {}: {}", source, at->name, d.atAxis.text, at->name,
                                                                  d.atAxis.text, source, legalCachePlaces(d)),
                                                      d.atAxis.text, names));
      return;
    }
    if (!reads) {
      std::vector<std::string> readable;
      for (const std::string& tensor : readsOf(consumer)) readable.push_back(tensor);
      diagnostics_.error(d.stage.loc, fmt::format("cache {} at {}.{}: {} does not read {} (it reads {})", source, at->name,
                                                  d.atAxis.text, at->name, source, join(readable, ", ")));
      return;
    }
    std::string name = d.results.empty() ? defaultCacheName(source, d.memory, [&](const std::string& taken) {
      return nameTaken(taken);
    }) : d.results[0].text;
    if (nameTaken(name)) {
      diagnostics_.error(d.results.empty() ? d.loc : d.results[0].loc,
                         fmt::format("cache {}: '{}' already names a tensor, size or scalar of the kernel, or a cache", source, name));
      return;
    }
    if (std::optional<std::string> computed = computedWith(source, at->name)) {
      diagnostics_.error(d.stage.loc, fmt::format("cache {} at {}.{}: {}, so there is no copy in memory to read; {}",
                                                  source, at->name, d.atAxis.text, *computed,
                                                  sourceStage->reduction || isOutput(source)
                                                      ? fmt::format("root {} stores it to global memory for a cache", source)
                                                      : fmt::format("compute {} at {}.{} computes the part {} reads there, in "
                                                                    "shared memory outside the thread loops and in registers "
                                                                    "inside them", source, at->name, d.atAxis.text, at->name)));
      return;
    }
    std::optional<CopyFit> fit = fitCopy(d, *at, loopAt - at->loops.begin(), true);
    if (!fit) return;
    DType dtype = sourceStage ? sourceStage->dtype : input->dtype;
    model_.caches.push_back(CacheStage{name, source, at->name, d.atAxis.text, d.memory, fit->extents, 0, false,
                                       dtypeBytes(dtype), d.loc, fit->wholeRows});
    copies_.push_back({d, name});
  }

  // Whether a tensor, size or scalar of the kernel, or a cache made so far, is named `name`.
  bool nameTaken(const std::string& name) {
    const auto& scalars = kernel_.scalars;
    return kernel_.findStage(name) || kernel_.findInput(name) || findCache(name) ||
           std::find(kernel_.sizes.begin(), kernel_.sizes.end(), name) != kernel_.sizes.end() ||
           std::any_of(scalars.begin(), scalars.end(), [&](const ScalarParamDecl& s) { return s.name == name; });
  }

  // `pad S by N` and `double_buffer S`: S is a shared-memory cache.
  void shapeCache(const Directive& d) {
    CacheStage* cache = findCache(d.stage.text);
    const char* word = directiveWord(d.kind);
    if (!cache || cache->memory != CacheMemory::Shared) {
      std::vector<std::string> shared;
      for (const CacheStage& c : model_.caches)
        if (c.memory == CacheMemory::Shared) shared.push_back(c.name);
      std::string what = cache ? fmt::format("{} is a register cache", cache->name)
                               : fmt::format("{} is not a cache", d.stage.text);
      diagnostics_.error(d.stage.loc, withSuggestion(fmt::format("{} applies to a shared-memory cache made by an earlier "
                                                                 "'cache ... in shared', and {} (shared caches: {})",
                                                                 word, what, shared.empty() ? "none" : join(shared, ", ")),
                                                     d.stage.text, shared));
      return;
    }
    if (d.kind == DirectiveKind::Pad) {
      cache->pad = d.factors[0].value;
      return;
    }
    if (cache->wholeRows) {
      diagnostics_.error(d.loc, fmt::format("double_buffer {}: it holds whole rows, which are copied once each", cache->name));
      return;
    }
    const StageSchedule& at = model_.stages.at(cache->atStage);
    for (const ScheduledLoop& loop : at.loops)
      if (loop.name == cache->atLoop && (loop.binding || loop.unrolled)) {
        diagnostics_.error(d.loc, fmt::format("double_buffer {}: it is loaded once per iteration of {}.{}, which is {}, so "
                                              "there is no next iteration to load ahead; cache at a serial loop",
                                              cache->name, at.name, loop.name,
                                              loop.binding ? "bound to " + hardwareIndexName(*loop.binding) : "unrolled"));
        return;
      }
    cache->doubleBuffered = true;
  }

  // ---- whole-kernel limits ----

  void checkBlockLoopsOutermost(const StageSchedule& stage) {
    bool unbound = false;
    std::string firstUnbound;
    for (const ScheduledLoop& loop : stage.loops) {
      bool block = loop.binding && (loop.binding->scope == HardwareScope::Block || loop.binding->scope == HardwareScope::Grid);
      if (block && unbound) {
        diagnostics_.error(loop.boundAt, fmt::format("{}.{} is bound to {} but loop {}, outside it, is not bound to a block: "
                                                     "loops bound to blocks must be outermost (reorder {} first)",
                                                     stage.name, loop.name, hardwareIndexName(*loop.binding), firstUnbound,
                                                     stage.name));
        return;
      }
      if (!block && !unbound) firstUnbound = loop.name;
      unbound = unbound || !block;
    }
  }

  // Stages of one CUDA kernel that bind the same thread index bind the same extent, and a block has at
  // most kMaxThreadsPerBlock threads.
  void checkThreadsPerKernel() {
    for (const loop::LoopNest& nest : program_.kernels) {
      std::map<HardwareIndex, std::pair<int64_t, std::string>> extents;  // index -> (extent, stage.loop)
      for (const std::string& name : nest.stages)
        for (const ScheduledLoop& loop : model_.stages.at(name).loops) {
          if (!loop.binding || loop.binding->scope == HardwareScope::Block || loop.binding->scope == HardwareScope::Grid ||
              !loop.extent)
            continue;
          HardwareIndex index = *loop.binding;
          if (index.scope == HardwareScope::Warp) index = HardwareIndex{HardwareScope::Thread, 0};
          std::string where = name + "." + loop.name;
          auto [it, fresh] = extents.emplace(index, std::make_pair(*loop.extent, where));
          if (!fresh && it->second.first != *loop.extent)
            diagnostics_.error(loop.boundAt, fmt::format("{} has extent {} for {} but {} for {}: stages of one kernel that "
                                                         "bind the same index bind the same extent",
                                                         hardwareIndexName(index), *loop.extent, where,
                                                         it->second.first, it->second.second));
        }
      int64_t threads = 1;
      std::vector<std::string> parts;
      for (const auto& [index, bound] : extents) {
        threads *= bound.first;
        parts.push_back(fmt::format("{} = {} ({})", hardwareIndexName(index), bound.first, bound.second));
      }
      if (threads > kMaxThreadsPerBlock)
        diagnostics_.error(lastThreadBind(nest),
                           fmt::format("the blocks of {} would have {} threads ({}), more than the {} a block may have",
                                       nest.name, threads, join(parts, ", "), kMaxThreadsPerBlock));
    }
  }

  // A kernel whose root binds a loop to grid.x shares every iteration of that loop out among all its
  // threads: no other loop of the kernel is bound, and nothing is copied into shared memory. `threads`
  // sizes such a kernel's blocks, and no other.
  void checkGridKernels() {
    for (const loop::LoopNest& nest : program_.kernels) {
      const StageSchedule& root = model_.stages.at(nest.stages.back());
      const ScheduledLoop* grid = nullptr;
      for (const ScheduledLoop& loop : root.loops)
        if (loop.binding && loop.binding->scope == HardwareScope::Grid) grid = &loop;
      if (!grid) {
        if (root.threads)
          diagnostics_.error(root.threadsAt, fmt::format("threads {}: only a kernel with a loop bound to grid.x takes its "
                                                         "block's size from 'threads'; bind {}.{} to grid.x, or bind loops "
                                                         "to thread.x, whose extents make the block",
                                                         root.name, root.name, root.loops.empty() ? "a" : root.loops[0].name));
        continue;
      }
      for (const std::string& name : nest.stages)
        for (const ScheduledLoop& loop : model_.stages.at(name).loops)
          if (&loop != grid && loop.binding)
            diagnostics_.error(loop.boundAt, fmt::format("{}.{} is bound to {}, but {}.{} is bound to grid.x, which shares "
                                                         "out its iterations among every thread of the kernel: no other "
                                                         "loop of it binds", name, loop.name,
                                                         hardwareIndexName(*loop.binding), root.name, grid->name));
      for (const CacheStage& cache : model_.caches)
        if (cache.memory == CacheMemory::Shared &&
            std::count(nest.stages.begin(), nest.stages.end(), cache.atStage))
          diagnostics_.error(cache.loc, fmt::format("{}: {}.{} is bound to grid.x, whose threads work apart; a copy in "
                                                    "shared memory needs loops bound to block.* and thread.*",
                                                    cache.name, root.name, grid->name));
    }
  }

  // The bind directive, among those of `nest`'s thread loops, written last.
  SourceLoc lastThreadBind(const loop::LoopNest& nest) const {
    SourceLoc last;
    for (const std::string& name : nest.stages)
      for (const ScheduledLoop& loop : model_.stages.at(name).loops)
        if (loop.binding && loop.binding->scope != HardwareScope::Block && loop.binding->scope != HardwareScope::Grid &&
            loop.boundAt.line > last.line)
          last = loop.boundAt;
    return last;
  }

  void checkSharedMemory() {
    for (const loop::LoopNest& nest : program_.kernels) {
      int64_t bytes = 0;
      std::vector<std::string> parts;
      const SourceLoc* last = nullptr;
      for (const CacheStage& cache : model_.caches) {
        if (cache.memory != CacheMemory::Shared ||
            std::find(nest.stages.begin(), nest.stages.end(), cache.atStage) == nest.stages.end())
          continue;
        int64_t elements = 1;
        for (size_t dim = 0; dim < cache.shape.size(); ++dim)
          elements *= cache.shape[dim] + (dim + 1 == cache.shape.size() ? cache.pad : 0);
        int64_t size = elements * cache.elementBytes * (cache.doubleBuffered ? 2 : 1);
        bytes += size;
        parts.push_back(fmt::format("{} {} bytes", cache.name, size));
        last = &cache.loc;
      }
      // Stages computed at a block-level loop of the nest's root live in shared memory too.
      for (const std::string& name : nest.stages) {
        const StageSchedule& stage = model_.stages.at(name);
        if (stage.placement != Placement::ComputeAt || stage.memory != CacheMemory::Shared) continue;
        int64_t elements = 1;
        for (int64_t extent : stage.footprint) elements *= extent;
        int64_t size = elements * dtypeBytes(kernel_.findStage(name)->dtype);
        bytes += size;
        parts.push_back(fmt::format("{} {} bytes", name, size));
        last = &stage.placedAt;
      }
      if (bytes > kStaticSharedMemoryBytes)
        diagnostics_.error(*last, fmt::format("the shared-memory caches of {} take {} bytes ({}), more than the {} bytes "
                                                  "of shared memory a block may declare", nest.name, bytes,
                                                  join(parts, ", "), kStaticSharedMemoryBytes));
    }
  }

  const loop::Program& program_;
  const Kernel& kernel_;
  Diagnostics& diagnostics_;
  std::set<std::string> live_;           // the stages some output depends on
  std::set<std::string> skippedCaches_;  // the caches of directives about other stages
  ScheduleModel model_;
  // The accepted `compute ... at` and `cache` directives (and each cache's name), sized again at the end.
  std::vector<std::pair<Directive, std::string>> copies_;
};

}  // namespace

std::optional<int64_t> footprintWidth(const Expr& index, const std::vector<const ScheduledLoop*>& varying,
                                      const Dim& extent, const ScheduledLoop** symbolicLoop) {
  std::optional<std::map<std::string, int64_t>> terms = affineTerms(index);
  int64_t width = 1;
  bool whole = !terms.has_value();
  if (terms)
    for (const auto& [axis, axisCoefficient] : *terms)
      for (const ScheduledLoop* loop : varying) {
        auto moves = loop->coefficients.find(axis);
        if (moves == loop->coefficients.end()) continue;
        whole = whole || loop->fused;
        if (!loop->extent) {
          *symbolicLoop = loop;
          return std::nullopt;
        }
        width += std::abs(axisCoefficient * moves->second) * (*loop->extent - 1);
      }
  if (whole && !extent.isConstant()) return std::nullopt;
  if (whole) return extent.factor;
  // Not clamped to a constant extent: iterations past it (a tile's ragged edge) still index the copy
  // or the accumulators, and the loops that read only those run without a guard.
  return width;
}

std::optional<int64_t> constantDistance(const Expr& a, const Expr& b) {
  std::optional<std::map<std::string, int64_t>> terms = affineTerms(a), other = affineTerms(b);
  if (!terms || !other) return sameIndex(a, b) ? std::optional<int64_t>(0) : std::nullopt;
  for (const auto& [axis, coefficient] : *other) (*terms)[axis] -= coefficient;
  for (const auto& [axis, coefficient] : *terms)
    if (!axis.empty() && coefficient != 0) return std::nullopt;
  return (*terms)[""];
}

bool nonNegative(const Expr& index) {
  std::optional<std::map<std::string, int64_t>> terms = affineTerms(index);
  return terms && std::all_of(terms->begin(), terms->end(), [](const auto& term) { return term.second >= 0; });
}

bool scheduleNames(const Kernel& kernel, const loop::LoopNest& nest) {
  for (const Directive& directive : kernel.schedule)
    for (const std::string& stage : nest.stages)
      if (directive.stage.text == stage || directive.atStage.text == stage) return true;
  return false;
}

ScheduleModel checkSchedule(const loop::Program& program, Diagnostics& diagnostics) {
  return ScheduleChecker(program, diagnostics).run();
}

}  // namespace emmy::tile
