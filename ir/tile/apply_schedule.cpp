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

#include "ir/tile/nest_scheduler.h"

namespace emmy::tile {

NestScheduler::NestScheduler(const loop::Program& program, const loop::LoopNest& nest, const ScheduleModel& model, Diagnostics& diagnostics)
    : program_(program), kernel_(program.source), nest_(nest), model_(model), diagnostics_(diagnostics) {}

TileNest NestScheduler::run() {
  root_ = kernel_.findStage(nest_.stages.back());
  parts_ = parseNest(kernel_, nest_);
  contraction_ = root_;
  if (const Member* folded = epilogueReduction(parts_)) {
    contraction_ = folded->computation.stage;
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
  placeMatrixProduct();
  placePrefixScan();
  if (!productPosition_ && !scanPosition_) {
    placeMembers();
    placeCaches();
    placeAccumulator();
    placeMembersOfResults();
    placeKeptTerms();
  }
  StmtPtr body = generate(0, {}, {});
  return TileNest{nest_.name, nest_.stages, threads_, body, narrowestIndexBits()};
}

int NestScheduler::narrowestIndexBits() const {
  return static_cast<int>(model_.stages.at(root_->name).indexBits.value_or(32));
}

void NestScheduler::unsupported(const SourceLoc& loc, const std::string& message) { cannot(loc, message + " (not supported yet)"); }

// A schedule that asks for what no code can do.
void NestScheduler::cannot(const SourceLoc& loc, const std::string& message) {
  diagnostics_.error(loc, message);
  throw NestAbandoned{};
}

// A block-level product or scan (`kind`) builds its nest alone and stages `staged` in shared memory
// itself: `refuse` is called where the nest computes other stages among its loops or copies at the root.
void NestScheduler::refuseOtherWork(const std::function<void(const std::string&)>& refuse, const std::string& kind,
                                    const std::string& staged) const {
  if (!parts_.members.empty() || !parts_.wholes.empty())
    refuse(fmt::format("the nest computes other stages among its loops, which a block-level {} does not", kind));
  for (const CacheStage& cache : model_.caches)
    if (cache.atStage == root_->name)
      refuse(fmt::format("a block-level {} stages {} in shared memory itself; leave out 'cache {}'", kind, staged, cache.source));
}

// Where a directive about `stage` was written, for diagnostics that belong to no one directive.
SourceLoc NestScheduler::directiveAbout(const std::string& stage) const {
  for (const Directive& directive : kernel_.schedule)
    if (directive.stage.text == stage || directive.atStage.text == stage) return directive.loc;
  return kernel_.schedule.empty() ? SourceLoc{} : kernel_.schedule.front().loc;
}

// The first directive that shapes `stage`'s own loops (not where it is computed), else directiveAbout's.
SourceLoc NestScheduler::directiveShaping(const std::string& stage) const {
  for (const Directive& directive : kernel_.schedule)
    if (directive.stage.text == stage && directive.kind != DirectiveKind::ComputeAt) return directive.loc;
  return directiveAbout(stage);
}

// The position (number of root loops open) after root loop `name`.
size_t NestScheduler::positionAfter(const std::string& name) const {
  for (size_t k = 0; k < root_loops_.loops.size(); ++k)
    if (root_loops_.loops[k].scheduled->name == name) return k + 1;
  EMMY_INTERNAL_ASSERT(false, "stage {} has no loop {}", root_->name, name);
}

// The fewest root loops that define every one of `axes`.
size_t NestScheduler::positionDefining(const std::vector<std::string>& axes) const {
  size_t position = 0;
  for (const std::string& axis : axes)
    for (const std::string& loop : root_loops_.loopsOf.at(axis)) position = std::max(position, positionAfter(loop));
  return position;
}

std::set<std::string> NestScheduler::openAt(size_t position) const {
  std::set<std::string> open;
  for (size_t k = 0; k < position; ++k) open.insert(root_loops_.loops[k].scheduled->name);
  return open;
}

// The root's loops from `position` on, with everything placed among them.
StmtPtr NestScheduler::generate(size_t position, Defined defined, std::vector<ExprPtr> masks) {
  for (const PlacedCache& cache : caches_)
    if (cache.position == position && cache.cache->wholeRows && !wholeRowsInUse_.count(&cache)) return rowVariants(cache, defined, masks);
  Ready ready = emitReady(root_loops_, openAt(position), defined, cooperativeFrom(position), masks, overrunSafe(position));
  for (const PlacedCache& cache : caches_)
    if (cache.position == position && inUse(cache)) activeCaches_.push_back(&cache);
  StmtPtr rest = inner(position, defined, masks);
  if (online_ && accumulatorOpen_ && position == onlinePosition_) rest = onlineStep(rest);
  if (online_ && accumulatorOpen_ && position == onlineTilePosition_) rest = onlineTileStep(rest, defined, masks);
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
  if (!here.empty()) rest = prefetchNext(here, position - 1, rest);
  for (size_t c = caches_.size(); c-- > 0;)
    if (caches_[c].position == position && !caches_[c].cache->doubleBuffered && !caches_[c].cache->wholeRows)
      rest = cacheCopy(caches_[c], rest);
  // (A softmax's sum is computed in its maximum's pass where onlineSumOf finds the two.)
  for (size_t m = parts_.members.size(); m-- > 0;) {
    if (memberPositions_[m] != position || (m > 0 && onlineSumOf(m - 1, position) == m)) continue;
    std::optional<size_t> sum = onlineSumOf(m, position);
    rest = sum ? onlineMembers(parts_.members[m], parts_.members[*sum], position, rest) : member(parts_.members[m], position, rest);
  }
  // Whole rows are copied before the members here, which read them too.
  for (size_t c = caches_.size(); c-- > 0;)
    if (caches_[c].position == position && caches_[c].cache->wholeRows && inUse(caches_[c])) rest = cacheCopy(caches_[c], rest);
  return wrap(ready, rest);
}

StmtPtr NestScheduler::inner(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks) {
  if (productPosition_ == position) return matrixProduct();
  if (scanPosition_ == position) return prefixScan();
  if (root_->reduction && position == accumulatorPosition_ && !accumulatorOpen_ && !productPosition_ && !scanPosition_)
    return reductionRegion(position, defined, masks);
  if (position == root_loops_.loops.size()) return core(masks);
  return loop(position, defined, masks);
}

// A Loop IR expression of the root's, reading the copies that are active and the accumulators. A
// member's term kept in a copy (placeKeptTerms) is read there.
ExprPtr NestScheduler::rootExpr(const ExprPtr& expr) const {
  auto throughCopy = [&](const Load& load, const PlacedCache& cache) {
    std::vector<ExprPtr> index;
    if (cache.cache->doubleBuffered) index.push_back(arithmetic(BinaryOp::Mod, var(cache.stageVar), i64(2)));
    for (size_t d = 0; d < load.indices.size() && !single(cache); ++d)
      index.push_back(arithmetic(BinaryOp::Add, offsetWithin(load.indices[d], cache.atStart),
                                 i64(*constantDistance(*load.indices[d], *cache.baseRead[d]))));
    return std::make_shared<Load>(load.dtype, cache.cache->name, index);
  };
  return rewrite(expr, [&](const Expr& node) -> ExprPtr {
    for (const KeptTerm& kept : keptTerms_)
      if (std::find(activeCaches_.begin(), activeCaches_.end(), kept.cache) != activeCaches_.end())
        if (const Load* element = keptInstance(node, kept)) return throughCopy(*element, *kept.cache);
    const auto* load = node.as<Load>();
    if (!load) return nullptr;
    if (load->tensor == parts_.root.accumulator) return std::make_shared<Load>(load->dtype, accumulator_, accumulatorIndex_);
    if (online_)
      for (const Computation& sum : online_->sums)
        if (load->tensor == sum.stage->name) return sum.finalize->value;
    for (auto active = activeCaches_.rbegin(); active != activeCaches_.rend(); ++active)
      if ((*active)->cache->source == load->tensor) return throughCopy(*load, **active);
    return nullptr;
  });
}

StmtPtr NestScheduler::core(const std::vector<ExprPtr>& masks) {
  if (const loop::Store* store = parts_.root.store) {
    // The companions' stores, beside the root's, at the same element.
    std::vector<StmtPtr> stores;
    for (const Computation& companion : parts_.companions)
      stores.push_back(globalStore(std::make_shared<Store>(companion.store->buffer, companion.store->indices,
                                                           rootExpr(companion.store->value)), masks));
    stores.push_back(globalStore(std::make_shared<Store>(store->buffer, store->indices, rootExpr(store->value)), masks));
    return stores.size() == 1 ? stores[0] : block(stores);
  }
  StmtPtr update = std::make_shared<Store>(accumulator_, accumulatorIndex_, rootExpr(parts_.root.update->value));
  return masks.empty() ? update : std::make_shared<Guard>(conjunction(masks), update);
}

void NestScheduler::collectTaken(const loop::Stmt& stmt) {
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
  for (const std::string& size : kernel_.allSizes()) taken_.insert(size);
  for (const Stage& stage : kernel_.stages) taken_.insert(stage.name);
  for (const CacheStage& cache : model_.caches) taken_.insert(cache.name);
}

std::string NestScheduler::uniqueVar(const std::string& base) {
  std::string name = base;
  for (int k = 1; taken_.count(name); ++k) name = fmt::format("{}_{}", base, k);
  taken_.insert(name);
  return name;
}

Program applySchedule(const loop::Program& program, const ScheduleModel& model, Diagnostics& diagnostics) {
  Program tiled{program.source, program.temporaries, {}, {}, {}};
  // The params chosen at launch are printed as declared, so that the printed schedule builds every variant.
  std::set<std::string> printedParams;
  for (const Directive& directive : program.source.schedule)
    for (const Number& factor : directive.factors)
      if (factor.atLaunch && printedParams.insert(factor.atLaunch->name).second)
        tiled.schedule.push_back(printParam(*factor.atLaunch));
  for (const Directive& directive : program.source.schedule) {
    const std::set<std::string>& passedOver = model.passedOverCaches;
    bool cache = directive.kind == DirectiveKind::Cache && !directive.results.empty();
    bool shapesCache = directive.kind == DirectiveKind::Pad || directive.kind == DirectiveKind::DoubleBuffer;
    if ((cache && passedOver.count(directive.results[0].text)) || (shapesCache && passedOver.count(directive.stage.text)))
      continue;
    tiled.schedule.push_back(printDirective(directive));
  }
  for (const std::string& note : model.notes) tiled.schedule.push_back("# " + note);
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
