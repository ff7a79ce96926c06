// split, tile, fuse and reorder: how they rewrite a stage's loops (checked on the schedule model), and
// the Tile IR loops that follow: every axis a Let of the loops it was split or fused into, and a split's
// ragged tail guarded (or clamped and masked) where it becomes known.
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/schedule_checker.h"

namespace emmy::tile {

// ---- checking ----

// Every level of a stage's loop nest is a level of recursion in the lowering and of nesting in the
// generated C++: a bound far above any useful schedule keeps both within a thread's stack. The few
// loops the default policy adds to complete a schedule are not counted.
bool ScheduleChecker::roomForLoops(const StageSchedule& stage, size_t added, const Directive& d) {
  if (d.byDefault || stage.loops.size() + added <= kMaxStageLoops) return true;
  diagnostics_.error(d.loc, fmt::format("{} would give stage {} {} loops; a stage has at most {}",
                                        d.kind == DirectiveKind::Split ? "split" : "tile", stage.name,
                                        stage.loops.size() + added, kMaxStageLoops));
  return false;
}

ScheduledLoop ScheduleChecker::outerPart(const ScheduledLoop& loop, const std::string& name, int64_t factor) {
  ScheduledLoop outer = loop;
  outer.name = name;
  outer.extent = loop.extent ? std::optional<int64_t>((*loop.extent + factor - 1) / factor) : std::nullopt;
  outer.extentText = outer.extent ? std::to_string(*outer.extent) : fmt::format("ceil({} / {})", loop.extentText, factor);
  for (auto& [axis, coefficient] : outer.coefficients) coefficient *= factor;
  return outer;
}

ScheduledLoop ScheduleChecker::innerPart(const ScheduledLoop& loop, const std::string& name, const Number& factor) {
  ScheduledLoop inner = loop;
  inner.name = name;
  inner.extent = factor.value;
  inner.extentText = std::to_string(factor.value);
  inner.written = factor;
  return inner;
}

bool ScheduleChecker::positiveFactor(const Number& factor, const std::string& verb) {
  if (factor.value > 0) return true;
  diagnostics_.error(factor.loc, fmt::format("{} by {}: the factor must be a positive constant", verb, factor.value));
  return false;
}

void ScheduleChecker::split(const Directive& d) {
  auto [stage, named] = namedLoop(d);
  if (!named || !positiveFactor(d.factors[0], "split") || !unmarked(*stage, *named, d, d.axes[0]) ||
      !freshLoopNames(*stage, d.results) || !roomForLoops(*stage, 1, d))
    return;
  size_t at = named - stage->loops.data();
  ScheduledLoop loop = stage->loops[at];
  int64_t factor = d.factors[0].value;
  stage->loops[at] = outerPart(loop, d.results[0].text, factor);
  stage->loops.insert(stage->loops.begin() + at + 1, innerPart(loop, d.results[1].text, d.factors[0]));
  stage->derivations.push_back({{loop.name}, {d.results[0].text, d.results[1].text}, factor});
}

void ScheduleChecker::tile(const Directive& d) {
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
                                   innerPart(first, d.results[2].text, d.factors[0]),
                                   innerPart(second, d.results[3].text, d.factors[1])};
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

void ScheduleChecker::reorder(const Directive& d) {
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
bool ScheduleChecker::accumulatorsFit(const StageSchedule& stage, const std::vector<ScheduledLoop>& loops, const Directive& d) {
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

void ScheduleChecker::fuse(const Directive& d) {
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

// ---- applying ----

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

bool NestScheduler::threadDependent(const Tail& tail, const StageLoops& loops) const {
  for (const FinalLoop& loop : loops.loops)
    if (tail.loops.count(loop.scheduled->name) && boundToThreads(*loop.scheduled)) return true;
  return false;
}

// `cooperative`: the statements these guard need every thread of the block.
// `overrunSafe`: what these guard reads only copies and accumulators, so the ragged end of a pure axis
// needs no condition (its accumulators are never stored).
NestScheduler::Ready NestScheduler::emitReady(const StageLoops& loops, const std::set<std::string>& open, Defined& defined, bool cooperative,
                std::vector<ExprPtr>& masks, bool overrunSafe) {
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

StmtPtr NestScheduler::wrap(const Ready& ready, StmtPtr rest) {
  if (!ready.guards.empty()) rest = std::make_shared<Guard>(conjunction(ready.guards), rest);
  std::vector<StmtPtr> stmts = ready.lets;
  stmts.push_back(rest);
  return stmts.size() == 1 ? rest : block(stmts);
}

}  // namespace emmy::tile
