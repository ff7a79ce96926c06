// unroll and vectorize (of lanes, or `by` the groups of a grid-strided loop): which loops may be, and
// the width Tile IR marks them with for Kernel IR's vector accesses.
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/schedule_checker.h"

namespace emmy::tile {

// ---- checking ----

void ScheduleChecker::unroll(const Directive& d) {
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

void ScheduleChecker::vectorize(const Directive& d) {
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
void ScheduleChecker::vectorizeGroups(const Directive& d) {
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
std::vector<std::string> ScheduleChecker::fusedAxes(const StageSchedule& stage, const std::string& name) {
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

// Does `stage` read some tensor at consecutive elements of its last dimension as reduction axis
// `axis` steps? Then a vectorized loop over `axis` reads it by vectors.
bool ScheduleChecker::readsAlongLastDimension(const Stage& stage, const std::string& axis) const {
  for (const std::string& tensor : readsOf(stage))
    for (const std::vector<ExprPtr>& indices : readsOf(stage, tensor)) {
      std::optional<std::map<std::string, int64_t>> terms = indices.empty() ? std::nullopt : affineTerms(*indices.back());
      if (terms && terms->count(axis) && terms->at(axis) == 1) return true;
    }
  return false;
}

// ---- applying ----

// A vectorized loop's accesses along it are vector accesses where Kernel IR can make them.
// A grid-strided loop's groups likewise.
int NestScheduler::vectorWidthOf(const ScheduledLoop& loop) {
  return static_cast<int>(loop.vectorized ? *loop.extent : loop.groupWidth);
}

}  // namespace emmy::tile
