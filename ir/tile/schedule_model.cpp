#include "ir/tile/schedule_checker.h"

namespace emmy::tile {

std::string loopNames(const std::vector<ScheduledLoop>& loops) {
  std::vector<std::string> names;
  for (const ScheduledLoop& loop : loops) names.push_back(loop.name);
  return join(names, ", ");
}

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

ScheduleChecker::ScheduleChecker(const loop::Program& program, Diagnostics& diagnostics)
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

ScheduleModel ScheduleChecker::run() {
  for (const Directive& directive : kernel_.schedule)
    if (!aboutUncomputedStage(directive)) apply(directive);
  refitCopies();
  for (const auto& [name, stage] : model_.stages) checkBlockLoopsOutermost(stage);
  checkThreadsPerKernel();
  checkGridKernels();
  checkIndexBitsOfRoots();
  checkSharedMemory();
  model_.passedOverCaches = skippedCaches_;
  return model_;
}

// A stage no output depends on is never computed (Loop IR drops it), so directives about it have
// nothing to apply to: a call whose result nothing reads brings its callee's schedule for nothing. Its
// caches go with it, and the pads and double buffers of those caches.
bool ScheduleChecker::aboutUncomputedStage(const Directive& d) {
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

void ScheduleChecker::apply(const Directive& d) {
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
    case DirectiveKind::IndexBits: return indexBits(d);
    case DirectiveKind::Mma: return mma(d);
    case DirectiveKind::Scan: return scan(d);
  }
}

std::vector<std::string> ScheduleChecker::stageNames() const {
  std::vector<std::string> names;
  for (const Stage& stage : kernel_.stages) names.push_back(stage.name);
  return names;
}

StageSchedule* ScheduleChecker::findStage(const Name& name) {
  auto found = model_.stages.find(name.text);
  if (found != model_.stages.end()) return &found->second;
  std::vector<std::string> names = stageNames();
  std::string message = fmt::format("unknown stage '{}' in kernel {} (stages: {})", name.text, kernel_.name, join(names, ", "));
  if (kernel_.findInput(name.text)) message = fmt::format("'{}' is an input of {}, not a stage: only stages have loops to schedule", name.text, kernel_.name);
  if (findCache(name.text)) message = fmt::format("'{}' is a cache: its loops are placed by its 'cache' directive", name.text);
  diagnostics_.error(name.loc, withSuggestion(message, name.text, names));
  return nullptr;
}

CacheStage* ScheduleChecker::findCache(const std::string& name) {
  for (CacheStage& cache : model_.caches)
    if (cache.name == name) return &cache;
  return nullptr;
}

// The position of loop `name` in `stage`, or nullopt after an error naming the stage's loops.
std::optional<size_t> ScheduleChecker::findLoop(const StageSchedule& stage, const Name& name) {
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
bool ScheduleChecker::freshLoopNames(const StageSchedule& stage, const std::vector<Name>& results) {
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

// Loops that bind or otherwise mark a loop must be split, fused and reordered before it is marked.
bool ScheduleChecker::unmarked(const StageSchedule& stage, const ScheduledLoop& loop, const Directive& d, const Name& where) {
  if (!loop.binding && !loop.unrolled && !loop.vectorized) return true;
  std::string what = loop.binding ? "bound to " + hardwareIndexName(*loop.binding) : loop.unrolled ? "unrolled" : "vectorized";
  diagnostics_.error(where.loc, fmt::format("{}.{} is already {}: {} a loop before binding, unrolling or vectorizing it",
                                            stage.name, loop.name, what, directiveWord(d.kind)));
  return false;
}

// The loop `S.a` of `split`, `bind`, `unroll` and `vectorize`, or nulls after an error.
std::pair<StageSchedule*, ScheduledLoop*> ScheduleChecker::namedLoop(const Directive& d) {
  StageSchedule* stage = findStage(d.stage);
  if (!stage) return {nullptr, nullptr};
  std::optional<size_t> at = findLoop(*stage, d.axes[0]);
  if (!at) return {nullptr, nullptr};
  return {stage, &stage->loops[*at]};
}

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
