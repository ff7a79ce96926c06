#include "ir/tile/schedule_defaults.h"

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/tile/nest_parts.h"

namespace emmy::tile {

using namespace tensor;

namespace {

constexpr int64_t kDefaultLanes = 256;

bool free(const ScheduledLoop& loop) { return !loop.binding && !loop.unrolled && !loop.vectorized; }
bool boundToThreads(const ScheduledLoop& loop) { return loop.binding && loop.binding->scope != HardwareScope::Block; }

class DefaultFill {
public:
  DefaultFill(const loop::Program& program, const ScheduleModel& model) : program_(program), model_(model) {}

  std::vector<Directive> run() {
    for (const loop::LoopNest& nest : program_.kernels)
      if (scheduleNames(program_.source, nest)) fill(nest);
    return directives_;
  }

private:
  void fill(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    std::vector<ScheduledLoop> loops = model_.stages.at(root).loops;
    // (A reduction loop bound to blocks with `atomic` leaves the pure loops to place.)
    bool blocks = std::any_of(loops.begin(), loops.end(), [](const ScheduledLoop& l) {
      return !l.reduction && l.binding && l.binding->scope == HardwareScope::Block;
    });
    size_t firstFree = 0;
    if (!blocks && !loops.empty() && !loops[0].reduction && free(loops[0])) {
      std::set<int> taken;
      for (const ScheduledLoop& loop : loops)
        if (loop.binding && loop.binding->scope == HardwareScope::Block) taken.insert(loop.binding->dimension);
      int dimension = 0;
      while (taken.count(dimension)) ++dimension;
      add(bind(root, loops[0].name, HardwareScope::Block, dimension));
      loops[0].binding = HardwareIndex{HardwareScope::Block, dimension};
      firstFree = 1;
    }
    std::array<int64_t, 3> threads{0, 0, 0};
    for (const std::string& stage : nest.stages)
      for (const ScheduledLoop& loop : model_.stages.at(stage).loops)
        if (boundToThreads(loop)) threads[loop.binding->scope == HardwareScope::Warp ? 0 : loop.binding->dimension] = *loop.extent;
    int64_t others = std::max<int64_t>(threads[1], 1) * std::max<int64_t>(threads[2], 1);
    bool rootThreads = std::any_of(loops.begin(), loops.end(), boundToThreads);
    if (!rootThreads && threads[0] == 0)
      for (size_t k = loops.size(); k-- > firstFree;)
        if (free(loops[k])) {
          threads[0] = loops[k].extent && *loops[k].extent <= kDefaultLanes ? std::max<int64_t>(32, std::bit_ceil(
                                                                                     static_cast<uint64_t>(*loops[k].extent)))
                                                                             : kDefaultLanes;
          break;
        }
    int64_t lanes = threads[0];
    if (lanes == 0 || lanes * others > kMaxThreadsPerBlock) return;
    std::optional<size_t> laneAt;
    if (!rootThreads)
      for (size_t k = loops.size(); k-- > firstFree;)
        if (!loops[k].reduction && free(loops[k])) {
          laneAt = k;
          spreadOverLanes(root, loops[k], lanes);
          break;
        }
    // A root that is a reduction over everything its blocks leave is combined across its threads.
    bool pureLeft = std::any_of(loops.begin() + firstFree, loops.end(), [](const ScheduledLoop& l) {
      return !l.reduction && !(l.binding && l.binding->scope == HardwareScope::Block);
    });
    if (!rootThreads && !laneAt && !pureLeft) fillMember(root, lanes);
    NestParts parts = parseNest(program_.source, nest);
    for (const std::string& member : nest.stages) {
      const StageSchedule& schedule = model_.stages.at(member);
      bool folded = !schedule.epilogueOf.empty() || !schedule.onlineIn.empty();  // computed in the root's loops
      if (member != root && !folded && !memberInsideLanes(root, member, loops, laneAt, parts)) fillMember(member, lanes);
    }
  }

  // A member inside the root's lane loop would combine across the lanes it is in. It goes after the root
  // loops its axes need (or after its compute-at loop), and after the members it reads.
  bool memberInsideLanes(const std::string& root, const std::string& member, const std::vector<ScheduledLoop>& rootLoops,
                         std::optional<size_t> laneAt, const NestParts& parts) const {
    size_t position = memberPosition(root, member, rootLoops, parts);
    for (size_t k = 0; k < position; ++k)
      if ((laneAt && k == *laneAt) || (boundToThreads(rootLoops[k]) && rootLoops[k].binding->dimension == 0)) return true;
    return false;
  }

  // The number of root loops open where `member` is computed (as apply_schedule.cpp places members).
  size_t memberPosition(const std::string& root, const std::string& member, const std::vector<ScheduledLoop>& rootLoops,
                        const NestParts& parts) const {
    const StageSchedule& schedule = model_.stages.at(member);
    size_t depth = program_.source.findStage(member)->axes.size();
    const std::vector<Axis>& rootAxes = program_.source.findStage(root)->axes;
    size_t position = 0;
    for (size_t k = 0; k < rootLoops.size(); ++k) {
      bool needed = schedule.placement == Placement::ComputeAt && rootLoops[k].name == schedule.atLoop;
      for (size_t d = 0; d < depth && d < rootAxes.size(); ++d)
        needed = needed || rootLoops[k].coefficients.count(rootAxes[d].name) > 0;
      if (needed) position = k + 1;
    }
    if (schedule.placement == Placement::ComputeAt) return position;
    const Member* self = nullptr;
    for (const Member& m : parts.members)
      if (m.computation.stage->name == member) self = &m;
    for (const Member& m : parts.members) {
      if (&m == self) break;
      if (self && reads(self->computation, m.computation.stage->name))
        position = std::max(position, memberPosition(root, m.computation.stage->name, rootLoops, parts));
    }
    return position;
  }

  // The innermost free reduction loop of `member` over the lanes, unless a reduction loop is bound.
  void fillMember(const std::string& member, int64_t lanes) {
    const StageSchedule& schedule = model_.stages.at(member);
    const std::vector<ScheduledLoop>& loops = schedule.loops;
    if (std::any_of(loops.begin(), loops.end(), [](const ScheduledLoop& l) { return l.reduction && l.binding; })) return;
    for (size_t k = loops.size(); k-- > 0;)
      if (loops[k].reduction && free(loops[k])) {
        spreadOverLanes(member, loops[k], lanes);
        return;
      }
  }

  // `loop` of `stage` over `lanes` threads along x: bound directly when it has exactly that many
  // iterations, else split, the lanes outside the steps.
  void spreadOverLanes(const std::string& stage, const ScheduledLoop& loop, int64_t lanes) {
    if (loop.extent == lanes) {
      add(bind(stage, loop.name, HardwareScope::Thread));
      return;
    }
    std::string step = fresh(stage, loop.name + "_step"), lane = fresh(stage, loop.name + "_lane");
    Directive split = directive(DirectiveKind::Split, stage);
    split.axes = {{loop.name, {}}};
    split.factors = {{lanes, {}}};
    split.results = {{step, {}}, {lane, {}}};
    add(split);
    Directive reorder = directive(DirectiveKind::Reorder, stage);
    reorder.axes = {{lane, {}}, {step, {}}};
    add(reorder);
    add(bind(stage, lane, HardwareScope::Thread));
  }

  std::string fresh(const std::string& stage, const std::string& base) {
    const StageSchedule& schedule = model_.stages.at(stage);
    auto taken = [&](const std::string& name) {
      for (const ScheduledLoop& loop : schedule.loops)
        if (loop.name == name) return true;
      for (const LoopDerivation& derivation : schedule.derivations)
        if (std::count(derivation.from.begin(), derivation.from.end(), name)) return true;
      return used_.count(stage + "." + name) > 0;
    };
    std::string name = base;
    for (int k = 1; taken(name); ++k) name = fmt::format("{}_{}", base, k);
    used_.insert(stage + "." + name);
    return name;
  }

  static Directive directive(DirectiveKind kind, const std::string& stage) {
    Directive d;
    d.kind = kind;
    d.stage = {stage, {}};
    d.byDefault = true;
    return d;
  }

  static Directive bind(const std::string& stage, const std::string& loop, HardwareScope scope, int dimension = 0) {
    Directive d = directive(DirectiveKind::Bind, stage);
    d.axes = {{loop, {}}};
    d.target = HardwareIndex{scope, dimension};
    return d;
  }

  void add(Directive d) { directives_.push_back(std::move(d)); }

  const loop::Program& program_;
  const ScheduleModel& model_;
  std::vector<Directive> directives_;
  std::set<std::string> used_;
};

}  // namespace

std::vector<Directive> defaultDirectives(const loop::Program& program, const ScheduleModel& model) {
  return DefaultFill(program, model).run();
}

}  // namespace emmy::tile
