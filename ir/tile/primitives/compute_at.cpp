// compute ... at, inline and root: the legal places of a stage (the model), and the members Tile IR
// computes in place, where the schedule puts them or as soon as what they need is known.
#include "ir/loop/lower_tensor_to_loops.h"
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/schedule_checker.h"

namespace emmy::tile {

// ---- checking ----

// The stages and inputs `stage` reads, looking through the stages the default policy inlines.
std::set<std::string> ScheduleChecker::readsOf(const Stage& stage) const {
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

bool ScheduleChecker::isOutput(const std::string& name) const { return kernel_.isOutput(name); }

bool ScheduleChecker::isInlinedByDefault(const Stage& stage) const { return !stage.reduction && !isOutput(stage.name); }

// Does `consumer` read what `producer` reads, as its own reads? When the default policy inlines the
// producer, or the consumer computes it as its reduction or online in its reduction.
bool ScheduleChecker::readThrough(const Stage& producer, const Stage& consumer) const {
  const StageSchedule& schedule = model_.stages.at(producer.name);
  return isInlinedByDefault(producer) || schedule.epilogueOf == consumer.name || schedule.onlineIn == consumer.name;
}

// The nest whose root is `stage`: one CUDA kernel.
const loop::LoopNest* ScheduleChecker::nestRootedAt(const std::string& stage) const {
  for (const loop::LoopNest& nest : program_.kernels)
    if (nest.stages.back() == stage) return &nest;
  return nullptr;
}

// Why the lowering cannot compute `stage` inside the loops of `consumer`, or nullopt when it can:
// `consumer` must be the root of a kernel, and `stage` computed in that kernel already, or
// elementwise (its other readers inline it), or a reduction only that kernel reads; and what is
// computed whole at a loop cannot read what is computed in place inside the loops.
std::optional<std::string> ScheduleChecker::whyNotComputedIn(const std::string& stage, const std::string& consumer) const {
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
std::optional<std::string> ScheduleChecker::computedWith(const std::string& source, const std::string& consumer) const {
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
std::string ScheduleChecker::legalPlaces(const std::string& stage) {
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
std::optional<std::string> ScheduleChecker::readerCombinesInside(const std::string& stage, const StageSchedule& at, size_t loopAt) const {
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

Directive ScheduleChecker::placement(DirectiveKind kind, const std::string& stage, const std::string& atStage, const std::string& atLoop) {
  Directive d;
  d.kind = kind;
  d.stage.text = stage;
  d.atStage.text = atStage;
  d.atAxis.text = atLoop;
  return d;
}

void ScheduleChecker::place(const Directive& d) {
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
  if (isOutput(stage->name) && d.kind == DirectiveKind::ComputeAt) {
    placeBeside(*stage, d);
    return;
  }
  if (isOutput(stage->name)) {
    diagnostics_.error(d.stage.loc, fmt::format("{} is an output: it is stored to global memory and cannot be inlined",
                                                stage->name));
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

// `compute O at R.a` for an output O: O is stored beside R's store, element by element, in R's kernel
// (lower_tensor_to_loops.cpp made it R's companion where it can be one); R's innermost loop is its place.
void ScheduleChecker::placeBeside(StageSchedule& stage, const Directive& d) {
  StageSchedule* at = findStage(d.atStage);
  if (!at) return;
  const loop::LoopNest* nest = nestRootedAt(at->name);
  bool companion = nest && at->name != stage.name && std::count(nest->stages.begin(), nest->stages.end(), stage.name);
  std::string why = companion ? "" : loop::whyNotStoredBeside(kernel_, stage.name, at->name).value_or(
                                         fmt::format("{} is computed in the loops of another stage", at->name));
  if (!companion) {
    diagnostics_.error(d.atStage.loc, fmt::format("cannot compute {} at {}.{}: {} is an output, stored by a kernel of its "
                                                  "own unless it is stored beside another output's store, and {}",
                                                  stage.name, at->name, d.atAxis.text, stage.name, why));
    return;
  }
  if (!findLoop(*at, d.atAxis)) return;
  stage.placement = Placement::ComputeAt;
  stage.atStage = at->name;
  stage.atLoop = d.atAxis.text;
  stage.placedAt = d.loc;
  stage.memory = CacheMemory::Registers;
}

// ---- applying ----

// Each member where `compute ... at` puts it, or else as soon as the root's axes it needs are known
// and the members it reads are computed.
void NestScheduler::placeMembers() {
  for (const Computation& companion : parts_.companions) {
    const Stage& stage = *companion.stage;
    for (const ScheduledLoop& loop : model_.stages.at(stage.name).loops) {
      if (!loop.binding && !loop.unrolled && !loop.vectorized && !loop.fused &&
          std::any_of(stage.axes.begin(), stage.axes.end(), [&](const Axis& a) { return a.name == loop.name; }))
        continue;
      cannot(directiveShaping(stage.name),
             fmt::format("{} is stored beside {}'s store, in {}'s loops, so it has no loop {} of its own: schedule {}'s "
                         "loops instead", stage.name, root_->name, root_->name, loop.name, root_->name));
    }
  }
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
void NestScheduler::placeMembersOfResults() {
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

bool NestScheduler::memberIsCooperative(const Member& member) const {
  for (const ScheduledLoop& loop : model_.stages.at(member.computation.stage->name).loops)
    if (loop.reduction && boundToThreads(loop)) return true;
  return false;
}

// A member's expression, reading whole rows through their copies where they are in use and the read
// is in the copied row (any element of it). The row is compared over the final loops: a copy's start is
// written over them (`nb * 4 + nr` where the rows are split), the member's read over the root's axes.
ExprPtr NestScheduler::memberExpr(const ExprPtr& expr, size_t position) const {
  return rewrite(expr, [&](const Expr& node) -> ExprPtr {
    const auto* load = node.as<Load>();
    const PlacedCache* cache = load ? rowCopyOf(*load, position, true) : nullptr;
    if (!cache) return nullptr;
    std::vector<ExprPtr> index(load->indices.size() - 1, i64(0));
    index.push_back(arithmetic(BinaryOp::Sub, load->indices.back(), cache->base.back()));
    return std::make_shared<Load>(load->dtype, cache->cache->name, index);
  });
}

// The copy of whole rows a member placed at `position` reads `read` through: the first copy of its
// tensor placed by then (and in use, with `inUseOnly`), where the read is in the copied row.
const NestScheduler::PlacedCache* NestScheduler::rowCopyOf(const Load& read, size_t position, bool inUseOnly) const {
  for (const PlacedCache& cache : caches_) {
    if (!cache.cache->wholeRows || cache.cache->source != read.tensor || cache.position > position || (inUseOnly && !inUse(cache)))
      continue;
    std::map<std::string, ExprPtr> axisValues = rootAxisValues();
    for (size_t d = 0; d + 1 < read.indices.size(); ++d)
      if (!sameIndex(*substitute(read.indices[d], axisValues), *cache.base[d])) return nullptr;  // another row
    return &cache;
  }
  return nullptr;
}

// ---- a member's term kept in the copy of the row it reads ----

namespace {

// Whether `expr` costs more to compute than a store to shared memory: a function at full precision
// (the hardware's approximations are two instructions), a power or a division of floats.
bool costlierThanStore(const Expr& expr) {
  bool costly = false;
  forEachNode(expr, [&](const Expr& node) {
    if (const auto* unary = node.as<Unary>()) {
      static const std::set<UnaryOp> kCheap = {UnaryOp::Neg, UnaryOp::Not, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Floor, UnaryOp::Ceil};
      costly = costly || (!unary->approximate && !kCheap.count(unary->op));
    }
    if (const auto* binary = node.as<Binary>())
      costly = costly || binary->op == BinaryOp::Pow || (binary->op == BinaryOp::Div && isFloat(binary->dtype));
  });
  return costly;
}

// Appends to `path` the subexpressions of `expr` that contain `target`, outermost first, down to
// `target`; false where it is not in `expr`. One under a select, or in an index, is not computed wherever
// `expr` is: the path stops at the select or the read.
bool pathTo(const ExprPtr& expr, const Expr* target, std::vector<ExprPtr>& path) {
  path.push_back(expr);
  if (expr.get() == target) return true;
  std::vector<ExprPtr> operands;
  if (const auto* unary = expr->as<Unary>()) operands = {unary->operand};
  if (const auto* binary = expr->as<Binary>()) operands = {binary->lhs, binary->rhs};
  if (const auto* cast = expr->as<Cast>()) operands = {cast->operand};
  for (const ExprPtr& operand : operands)
    if (pathTo(operand, target, path)) return true;
  bool below = false;
  if (operands.empty()) forEachNode(*expr, [&](const Expr& node) { below = below || &node == target; });
  if (!below) path.pop_back();
  return below;
}

}  // namespace

// An instance of `kept`'s term at an element of its copy's tensor: that element's read; null where
// `expr` is not one.
const Load* NestScheduler::keptInstance(const Expr& expr, const KeptTerm& kept) const {
  const Load* element = nullptr;
  int reads = 0;
  forEachNode(expr, [&](const Expr& node) {
    if (const auto* load = node.as<Load>(); load && load->tensor == kept.cache->cache->source) element = load, ++reads;
  });
  if (reads != 1 || expr.dtype != element->dtype) return nullptr;
  return sameIndex(expr, *substitute(kept.term, {{kept.variable, element->indices.back()}})) ? element : nullptr;
}

// Where a member's pass over a copy of whole rows computes a costly term of each element (a softmax's
// exp(x - m)) that the root computes again from the same element, the pass writes the term over the
// element, and the root reads it from there. That takes: the member's one reduction loop runs over the
// whole row, reading the element at its variable, once in the whole block (each of the block's thread
// indices takes part of it) and once per copy (it is placed where the copy is); the term has the
// element's type (the copy holds it exactly) and reads nothing else that changes; and after the pass,
// nothing reads the copy but the root's instances of the term. The root is a plain store (with its
// companions).
void NestScheduler::placeKeptTerms() {
  if (!parts_.root.store) return;
  std::vector<const loop::Store*> rootStores{parts_.root.store};
  for (const Computation& companion : parts_.companions) rootStores.push_back(companion.store);
  std::set<std::string> unchanging;  // the inputs, and the members before the one at hand
  for (const TensorParam& input : kernel_.inputs) unchanging.insert(input.name);
  for (size_t m = 0; m < parts_.members.size(); unchanging.insert(parts_.members[m++].computation.stage->name)) {
    const Computation& member = parts_.members[m].computation;
    ExprPtr term = member.stage->reduction && member.reductionLoops.size() == 1 ? reductionTerm(member) : nullptr;
    if (!term || !memberPositions_[m] || std::count(membersOfResults_.begin(), membersOfResults_.end(), m)) continue;
    const loop::For& loop = *member.reductionLoops.front();
    size_t position = *memberPositions_[m];
    // Once in the block: outside the thread loops, and each thread index with more than one thread shares
    // out the member's loops.
    bool once = true;
    for (size_t k = 0; k < position; ++k) once = once && !boundToThreads(*root_loops_.loops[k].scheduled);
    std::set<int> sharedOut;
    for (const ScheduledLoop& scheduled : model_.stages.at(member.stage->name).loops)
      if (boundToThreads(scheduled)) sharedOut.insert(dimensionOf(scheduled));
    for (int dimension = 0; dimension < 3; ++dimension) once = once && (threads_[dimension] == 1 || sharedOut.count(dimension));
    // The one read of a copied row, at the loop's variable, over the whole row.
    const Load* element = nullptr;
    const PlacedCache* cache = nullptr;
    bool others = true;  // the term's other reads are of what does not change
    forEachNode(*term, [&](const Expr& node) {
      const auto* load = node.as<Load>();
      if (!load) return;
      const PlacedCache* copy = rowCopyOf(*load, position, false);
      if (copy && !element) element = load, cache = copy;
      else others = others && !copy && unchanging.count(load->tensor);
    });
    if (!once || !cache || !others || cache->position != position || cache->cache->memory != CacheMemory::Shared ||
        !(loop.extent == sourceShape(*cache).back()) || !sameIndex(*cache->base.back(), *i64(0)) ||
        !sameIndex(*element->indices.back(), *var(loop.var)))
      continue;
    const std::string& source = cache->cache->source;
    // After the pass, nothing but the root reads the copy.
    bool readAfter = false;
    for (size_t later = 0; later < parts_.members.size(); ++later)
      readAfter = readAfter || ((later > m || std::count(membersOfResults_.begin(), membersOfResults_.end(), later)) &&
                                reads(parts_.members[later].computation, source));
    for (const WholeMember& whole : parts_.wholes) readAfter = readAfter || reads(whole.computation, source);
    std::vector<ExprPtr> path;
    if (readAfter || !pathTo(term, element, path)) continue;
    if (path.back().get() == element) path.pop_back();  // the element itself
    for (const ExprPtr& candidate : path) {
      if (candidate->dtype != element->dtype || !costlierThanStore(*candidate)) continue;
      KeptTerm kept{m, cache, candidate, loop.var};
      // Every read of the copy's tensor by the root is in an instance of the term.
      size_t instances = 0, rootReads = 0;
      for (const loop::Store* store : rootStores)
        forEachNode(*store->value, [&](const Expr& node) {
          if (const auto* load = node.as<Load>(); load && load->tensor == source) ++rootReads;
          if (keptInstance(node, kept)) ++instances;
        });
      if (instances > 0 && instances == rootReads) {
        keptTerms_.push_back(kept);
        break;
      }
    }
  }
}

NestScheduler::MemberLoops NestScheduler::memberLoops(const Member& placed) {
  return reductionLoopsOf(placed.computation, parts_.rootVars, false);
}

// The loops of `computation`'s reduction by its stage's schedule, its axes named by `axisVars`; only
// its reduction loops may be scheduled. `elementwise`: each element is computed by one thread (a stage
// computed into a copy element by element), so no reduction loop may be bound to threads.
NestScheduler::MemberLoops NestScheduler::reductionLoopsOf(const Computation& computation, const std::vector<std::string>& stageAxisVars,
                                                           bool elementwise) {
  const Stage& stage = *computation.stage;
  const StageSchedule& schedule = model_.stages.at(stage.name);
  for (const ScheduledLoop& loop : schedule.loops)
    if (!loop.reduction && (loop.binding || loop.unrolled || loop.vectorized || loop.fused ||
                            std::none_of(stage.axes.begin(), stage.axes.end(), [&](const Axis& a) { return a.name == loop.name; })))
      cannot(directiveShaping(stage.name), fmt::format("{} is computed inside {}'s loops, so its loop over {} is {}'s: "
                                                       "schedule only its reduction loops", stage.name, root_->name,
                                                       loop.name, root_->name));
  std::map<std::string, std::string> axisVars;
  for (size_t d = 0; d < stage.axes.size(); ++d) axisVars[stage.axes[d].name] = stageAxisVars[d];
  for (const loop::For* loop : computation.reductionLoops) axisVars[loop->axis] = loop->var;
  MemberLoops result{buildStageLoops(schedule, stage, axisVars, [&](const std::string& n) { return uniqueVar(n); }), {}, {}};
  for (size_t k = 0; k < result.loops.loops.size(); ++k) {
    const ScheduledLoop& loop = *result.loops.loops[k].scheduled;
    if (!loop.reduction) continue;
    result.reductions.push_back(k);
    if (!boundToThreads(loop)) continue;
    if (elementwise)
      cannot(loop.boundAt, fmt::format("{} is computed at {}.{} element by element, each by one thread, so its reduction "
                                       "loop {} cannot be bound to threads", stage.name, root_->name,
                                       model_.stages.at(stage.name).atLoop, loop.name));
    int dimension = dimensionOf(loop);
    if (threadBound_.count(dimension))
      cannot(loop.boundAt,
             fmt::format("{} combines across thread.{} inside a loop of {} bound to thread.{}, where each thread computes "
                         "its own {}: bind {}.{} to another thread index, or compute {} outside that loop", stage.name,
                         "xyz"[dimension], root_->name, "xyz"[dimension], stage.name, stage.name, loop.name, stage.name));
    result.combined.push_back(dimension);
  }
  return result;
}

// The member's reduction loops from the k-th to the end-th (of MemberLoops::reductions), each with the
// Lets and tail tests that become ready in it, around `leaf` (given what is open and defined there).
StmtPtr NestScheduler::memberLoopNest(const MemberLoops& loops, const std::string& stage, size_t k, size_t end,
                                      std::set<std::string> open, Defined defined,
                                      const std::function<StmtPtr(const std::set<std::string>&, const Defined&)>& leaf) {
  std::vector<ExprPtr> unusedMasks;
  Ready ready = emitReady(loops.loops, open, defined, false, unusedMasks);
  if (k == end) return wrap(ready, leaf(open, defined));
  const FinalLoop& loop = loops.loops.loops[loops.reductions[k]];
  open.insert(loop.scheduled->name);
  StmtPtr body = memberLoopNest(loops, stage, k + 1, end, open, defined, leaf);
  return wrap(ready, std::make_shared<Loop>(loop.var, loop.extent,
                                            boundToThreads(*loop.scheduled) ? Binding::ThreadIndex : bindingOf(loop),
                                            std::vector<std::string>{stage + "." + loop.scheduled->name}, body,
                                            vectorWidthOf(*loop.scheduled), dimensionOf(*loop.scheduled)));
}

namespace {

// The axes of `stage` (its own, not its reduction's): the root's, known where a member is placed.
std::set<std::string> axisNames(const Stage& stage) {
  std::set<std::string> names;
  for (const Axis& axis : stage.axes) names.insert(axis.name);
  return names;
}

}  // namespace

// A member computed in place: its local, its accumulator, its reduction loops and combine.
StmtPtr NestScheduler::member(const Member& placed, size_t position, StmtPtr rest) {
  const Computation& computation = placed.computation;
  const Stage& stage = *computation.stage;
  MemberLoops loops = memberLoops(placed);
  std::set<std::string> open = axisNames(stage);
  auto kept = std::find_if(keptTerms_.begin(), keptTerms_.end(),
                           [&](const KeptTerm& k) { return &parts_.members[k.member] == &placed && inUse(*k.cache); });
  StmtPtr update = memberLoopNest(loops, stage.name, 0, loops.reductions.size(), open, Defined(open.begin(), open.end()),
                                  [&](const std::set<std::string>&, const Defined&) -> StmtPtr {
                                    ExprPtr value = memberExpr(computation.update->value, position);
                                    auto accumulate = [&](const ExprPtr& value) {
                                      return std::make_shared<Store>(computation.update->buffer, computation.update->indices, value);
                                    };
                                    if (kept == keptTerms_.end()) return accumulate(value);
                                    // The term over the copy, written over its element, which the sum then reads.
                                    ExprPtr term = memberExpr(kept->term, position);
                                    const Load* element = nullptr;
                                    forEachNode(*term, [&](const Expr& node) {
                                      if (const auto* load = node.as<Load>(); load && load->tensor == kept->cache->cache->name) element = load;
                                    });
                                    EMMY_INTERNAL_ASSERT(element, "{}'s kept term does not read {}", stage.name, kept->cache->cache->name);
                                    int replaced = 0;
                                    value = rewrite(value, [&](const Expr& node) -> ExprPtr {
                                      if (!sameIndex(node, *term)) return nullptr;
                                      ++replaced;
                                      return std::make_shared<Load>(element->dtype, element->tensor, element->indices);
                                    });
                                    EMMY_INTERNAL_ASSERT(replaced == 1, "{}'s update has its kept term {} times", stage.name, replaced);
                                    return block({std::make_shared<Store>(element->tensor, element->indices, term), accumulate(value)});
                                  });
  std::vector<StmtPtr> steps{std::make_shared<Store>(computation.init->buffer, computation.init->indices, computation.init->value),
                             update};
  for (int dimension : loops.combined)
    steps.push_back(std::make_shared<CrossThreadReduce>(computation.accumulator, computation.accumulatorType,
                                                        stage.reduction->op, dimension));
  steps.push_back(std::make_shared<Store>(computation.finalize->buffer, computation.finalize->indices, computation.finalize->value));
  StmtPtr compute = std::make_shared<Allocate>(computation.accumulator, computation.accumulatorType, std::vector<Dim>{},
                                               MemoryScope::Registers, block(steps));
  return std::make_shared<Allocate>(stage.name, stage.dtype, std::vector<Dim>{}, MemoryScope::Registers, block({compute, rest}));
}

// ---- a softmax's maximum and sum in one pass ----

// The member after members[maxIndex] when the two are a row's running maximum M = max(X) and a sum of
// exponentials shifted by it, S = sum(exp(Y - M) * g) (nest_parts.h, termOver), both placed at
// `position` over the same loops (S's schedule is M's), whose innermost is vectorized or unrolled, reading
// memory that no copy of whole rows serves there: onlineMembers then computes them in one pass, which
// reads the row once instead of twice. (Over a copy in shared memory the second pass costs less than the
// first's rescales; and a rescale per element, without vectors to rescale once each, would cost an
// exponential per element more.)
std::optional<size_t> NestScheduler::onlineSumOf(size_t maxIndex, size_t position) const {
  size_t sumIndex = maxIndex + 1;
  if (sumIndex >= parts_.members.size() || memberPositions_[maxIndex] != position || memberPositions_[sumIndex] != position)
    return std::nullopt;
  const Computation& max = parts_.members[maxIndex].computation;
  const Computation& sum = parts_.members[sumIndex].computation;
  const Stage& maxStage = *max.stage;
  const Stage& sumStage = *sum.stage;
  if (!maxStage.reduction || maxStage.reduction->op != ReduceOp::Max || !sumStage.reduction ||
      sumStage.reduction->op != ReduceOp::Sum || max.accumulatorType != sum.accumulatorType ||
      maxStage.axes.size() != sumStage.axes.size() || maxStage.reduction->axes.size() != sumStage.reduction->axes.size() ||
      reads(*sum.init->value, maxStage.name) || reads(*sum.finalize->value, maxStage.name))
    return std::nullopt;
  ExprPtr maxOf = reductionTerm(max), term = reductionTerm(sum);
  term = term ? overLoops(term, sum, max.reductionLoops) : nullptr;
  if (!maxOf || !term || !termOver(term, maxStage.name, immediate(max.accumulatorType, 0))) return std::nullopt;
  for (const PlacedCache& cache : caches_)
    if (cache.cache->wholeRows && cache.position <= position && inUse(cache) &&
        (reads(*maxOf, cache.cache->source) || reads(*term, cache.cache->source)))
      return std::nullopt;
  // S's loops are M's, with its axes named as M's are.
  std::map<std::string, std::string> asMax;
  for (size_t a = 0; a < sumStage.axes.size(); ++a) asMax[sumStage.axes[a].name] = maxStage.axes[a].name;
  for (size_t a = 0; a < sumStage.reduction->axes.size(); ++a)
    asMax[sumStage.reduction->axes[a].name] = maxStage.reduction->axes[a].name;
  const std::vector<ScheduledLoop>& maxLoops = model_.stages.at(maxStage.name).loops;
  const std::vector<ScheduledLoop>& sumLoops = model_.stages.at(sumStage.name).loops;
  if (maxLoops.size() != sumLoops.size() || maxLoops.empty() || !maxLoops.back().reduction || !maxLoops.back().extent ||
      *maxLoops.back().extent < 2 || !(maxLoops.back().vectorized || maxLoops.back().unrolled))
    return std::nullopt;
  for (size_t k = 0; k < maxLoops.size(); ++k) {
    const ScheduledLoop& a = maxLoops[k];
    const ScheduledLoop& b = sumLoops[k];
    std::map<std::string, int64_t> coefficients;
    for (const auto& [axis, coefficient] : b.coefficients) coefficients[asMax.count(axis) ? asMax.at(axis) : axis] = coefficient;
    bool sameBinding = a.binding.has_value() == b.binding.has_value() &&
                       (!a.binding || (a.binding->scope == b.binding->scope && a.binding->dimension == b.binding->dimension));
    if (a.extent != b.extent || a.extentText != b.extentText || a.reduction != b.reduction || coefficients != a.coefficients ||
        a.fused != b.fused || !sameBinding || a.atomic != b.atomic || a.unrolled != b.unrolled || a.vectorized != b.vectorized ||
        a.groupWidth != b.groupWidth)
      return std::nullopt;
  }
  return sumIndex;
}

// M and S (onlineSumOf) in one pass over M's loops: a running maximum, and S's sum rescaled by
// exp(old - new) whenever it grows, once per vector (or unrolled run) of the innermost loop: the vector's
// values are read once into registers, a pass over them finds their maximum and a second adds their terms
// (one exponential per element, as FlashAttention-2's tiles). Each thread's sum is relative to its own
// maximum: after M is combined across the threads and rounded to its type, every thread's sum is rescaled
// to M as the readers see it, then summed.
StmtPtr NestScheduler::onlineMembers(const Member& maxMember, const Member& sumMember, size_t position, StmtPtr rest) {
  const Computation& max = maxMember.computation;
  const Computation& sum = sumMember.computation;
  const Stage& maxStage = *max.stage;
  const Stage& sumStage = *sum.stage;
  const DType type = max.accumulatorType;
  auto local = [&](const std::string& name) { return std::make_shared<Load>(type, name, std::vector<ExprPtr>{}); };
  auto set = [](const std::string& name, ExprPtr value) { return std::make_shared<Store>(name, std::vector<ExprPtr>{}, std::move(value)); };
  auto binary = [&](BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(type, op, std::move(a), std::move(b)); };
  const std::string next = uniqueVar(maxStage.name + "__next"), own = uniqueVar(maxStage.name + "__own");
  ExprPtr maxOf = memberExpr(reductionTerm(max), position);
  ExprPtr term = memberExpr(termOver(overLoops(reductionTerm(sum), sum, max.reductionLoops), maxStage.name,
                                     shiftedMaximum(local(max.accumulator))),
                            position);
  const bool approximate = approximatesExp(*term);
  MemberLoops loops = memberLoops(maxMember);
  const size_t end = loops.reductions.size(), step = end - 1;
  const FinalLoop& vector = loops.loops.loops[loops.reductions.back()];
  auto pass = [&](const std::set<std::string>& open, const Defined& defined, StmtPtr leaf) {
    return memberLoopNest(loops, maxStage.name, step, end, open, defined,
                          [&](const std::set<std::string>&, const Defined&) -> StmtPtr { return leaf; });
  };
  // The vector's values X, read once into registers for both passes (and for the terms' exponents where
  // they are X).
  const std::string values = uniqueVar(maxStage.name + "__values");
  ExprPtr value = std::make_shared<Load>(maxOf->dtype, values, std::vector<ExprPtr>{var(vector.var)});
  ExprPtr termOfValue = rewrite(term, [&](const Expr& node) -> ExprPtr { return sameIndex(node, *maxOf) ? value : nullptr; });
  std::set<std::string> open = axisNames(maxStage);
  StmtPtr steps = memberLoopNest(loops, maxStage.name, 0, step, open, Defined(open.begin(), open.end()),
                                 [&](const std::set<std::string>& at, const Defined& defined) -> StmtPtr {
    std::vector<StmtPtr> stmts{
        set(next, local(max.accumulator)),
        pass(at, defined, std::make_shared<Store>(values, std::vector<ExprPtr>{var(vector.var)}, maxOf)),
        pass(at, defined, set(next, binary(BinaryOp::Max, local(next), value))),
        set(sum.accumulator, binary(BinaryOp::Mul, local(sum.accumulator), rescaleFactor(local(max.accumulator), local(next), approximate))),
        set(max.accumulator, local(next)),
        pass(at, defined, set(sum.accumulator, binary(BinaryOp::Add, local(sum.accumulator), termOfValue)))};
    StmtPtr stepped = std::make_shared<Allocate>(next, type, std::vector<Dim>{}, MemoryScope::Registers, block(stmts));
    return std::make_shared<Allocate>(values, maxOf->dtype, std::vector<Dim>{Dim::constant(*vector.scheduled->extent)},
                                      MemoryScope::Registers, stepped);
  });
  std::vector<StmtPtr> combine{set(own, local(max.accumulator))};
  for (int dimension : loops.combined) combine.push_back(std::make_shared<CrossThreadReduce>(max.accumulator, type, ReduceOp::Max, dimension));
  combine.push_back(std::make_shared<Store>(max.finalize->buffer, max.finalize->indices, max.finalize->value));
  // A thread without terms (a sum of 0) stays 0, whatever its maximum (-inf for one past the row).
  ExprPtr rounded = castTo(std::make_shared<Load>(maxStage.dtype, max.finalize->buffer, max.finalize->indices), type);
  combine.push_back(set(sum.accumulator,
                        std::make_shared<Select>(compare(BinaryOp::Eq, local(sum.accumulator), immediate(type, 0)), immediate(type, 0),
                                                 binary(BinaryOp::Mul, local(sum.accumulator),
                                                        std::make_shared<Unary>(type, UnaryOp::Exp, binary(BinaryOp::Sub, local(own), rounded),
                                                                                approximate)))));
  for (int dimension : loops.combined) combine.push_back(std::make_shared<CrossThreadReduce>(sum.accumulator, type, ReduceOp::Sum, dimension));
  combine.push_back(std::make_shared<Store>(sum.finalize->buffer, sum.finalize->indices, sum.finalize->value));
  std::vector<StmtPtr> compute{std::make_shared<Store>(max.init->buffer, max.init->indices, max.init->value),
                               std::make_shared<Store>(sum.init->buffer, sum.init->indices, sum.init->value), steps,
                               std::make_shared<Allocate>(own, type, std::vector<Dim>{}, MemoryScope::Registers, block(combine))};
  StmtPtr accumulators = std::make_shared<Allocate>(
      max.accumulator, type, std::vector<Dim>{}, MemoryScope::Registers,
      std::make_shared<Allocate>(sum.accumulator, type, std::vector<Dim>{}, MemoryScope::Registers, block(compute)));
  return std::make_shared<Allocate>(maxStage.name, maxStage.dtype, std::vector<Dim>{}, MemoryScope::Registers,
                                    std::make_shared<Allocate>(sumStage.name, sumStage.dtype, std::vector<Dim>{},
                                                               MemoryScope::Registers, block({accumulators, rest})));
}

}  // namespace emmy::tile
