// A reduction's accumulators and combines, what `cache R in registers|shared at R.a` of its own output
// and `bind` of its reduction loops to threads ask for; a root applying its expression to each result of
// the reduction it folds (an epilogue); a softmax computed online in its reduction loops.
#include "ir/tile/nest_scheduler.h"

namespace emmy::tile {

// ---- applying ----

// The root computes `folded` as its reduction and applies its own expression to each result.
void NestScheduler::foldEpilogue(const Member& folded) {
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
void NestScheduler::foldOnlineSoftmax() {
  auto folded = [&](const Member& member) {
    const Stage* stage = member.computation.stage;
    return stage == online_->max.stage || std::any_of(online_->sums.begin(), online_->sums.end(),
                                                      [&](const Computation& sum) { return sum.stage == stage; });
  };
  parts_.members.erase(std::remove_if(parts_.members.begin(), parts_.members.end(), folded), parts_.members.end());
  nextMax_ = uniqueVar(online_->max.stage->name + "__next");
  rescale_ = uniqueVar(root_->name + "__rescale");
  foldRootTerm();
}

// The root's update: its accumulator, rescaled where the step does that, plus its term.
void NestScheduler::foldRootTerm() {
  const Computation& root = parts_.root;
  ExprPtr accumulated = std::make_shared<Load>(root.accumulatorType, root.accumulator, std::vector<ExprPtr>{});
  onlineUpdate_ = std::make_shared<loop::Store>(root.update->buffer, root.update->indices, rescaled(accumulated, online_->rootTerm));
  parts_.root.update = onlineUpdate_.get();
}

// sum * rescale + term, or sum + term where the softmax is updated once per tile (the tile's step has
// rescaled the sums already).
ExprPtr NestScheduler::rescaled(const ExprPtr& sum, const ExprPtr& term) const {
  if (onlineTilePosition_) return std::make_shared<Binary>(sum->dtype, BinaryOp::Add, sum, term);
  ExprPtr factor = std::make_shared<Load>(sum->dtype, rescale_, std::vector<ExprPtr>{});
  return std::make_shared<Binary>(sum->dtype, BinaryOp::Add, std::make_shared<Binary>(sum->dtype, BinaryOp::Mul, sum, factor), term);
}

// The running maximum's move to nextMax_: the factor that rescales every sum so far, and the maximum set.
std::vector<StmtPtr> NestScheduler::maximumMoves() const {
  const Computation& max = online_->max;
  DType type = max.accumulatorType;
  ExprPtr running = std::make_shared<Load>(type, max.accumulator, std::vector<ExprPtr>{});
  ExprPtr next = std::make_shared<Load>(type, nextMax_, std::vector<ExprPtr>{});
  return {std::make_shared<Store>(rescale_, std::vector<ExprPtr>{}, rescaleFactor(running, next, online_->approximate)),
          std::make_shared<Store>(max.accumulator, std::vector<ExprPtr>{}, next)};
}

// `stmts` with the step's two locals, the next maximum and the rescale factor.
StmtPtr NestScheduler::withStepLocals(std::vector<StmtPtr> stmts) const {
  DType type = online_->max.accumulatorType;
  return std::make_shared<Allocate>(nextMax_, type, std::vector<Dim>{}, MemoryScope::Registers,
                                    std::make_shared<Allocate>(rescale_, type, std::vector<Dim>{}, MemoryScope::Registers, block(stmts)));
}

// The online softmax's step, once per iteration of the reduction loops, before `rest` (which adds the
// root's term): the running maximum and the rescale factor (unless the tile's step moved them), and the
// other sums.
StmtPtr NestScheduler::onlineStep(StmtPtr rest) {
  const Computation& max = online_->max;
  DType type = max.accumulatorType;
  auto local = [&](const std::string& name) { return std::make_shared<Load>(type, name, std::vector<ExprPtr>{}); };
  std::vector<StmtPtr> stmts;
  if (!onlineTilePosition_) {
    stmts.push_back(std::make_shared<Store>(nextMax_, std::vector<ExprPtr>{},
                                            std::make_shared<Binary>(type, BinaryOp::Max, local(max.accumulator), rootExpr(online_->maxOf))));
    for (StmtPtr& move : maximumMoves()) stmts.push_back(move);
  }
  for (const auto& [weight, value] : weights_) stmts.push_back(std::make_shared<Store>(weight, std::vector<ExprPtr>{}, rootExpr(value)));
  for (size_t k = 0; k < online_->sums.size(); ++k) {
    const std::string& sum = online_->sums[k].accumulator;
    stmts.push_back(std::make_shared<Store>(sum, std::vector<ExprPtr>{}, rescaled(local(sum), rootExpr(online_->sumTerms[k]))));
  }
  stmts.push_back(rest);
  StmtPtr step = block(stmts);
  for (auto weight = weights_.rbegin(); weight != weights_.rend(); ++weight)
    step = std::make_shared<Allocate>(weight->first, weight->second->dtype, std::vector<Dim>{}, MemoryScope::Registers, step);
  return onlineTilePosition_ ? step : withStepLocals({step});
}

// The step once per tile of the reduction loops, before the tile's loops (`rest`): a pass of its own over
// them takes the tile's maximum, then every sum and accumulator is rescaled once, so that each element's
// step only adds its terms (FlashAttention-2's order: one exponential per element, not two).
StmtPtr NestScheduler::onlineTileStep(StmtPtr rest, const Defined& defined, const std::vector<ExprPtr>& masks) {
  const Computation& max = online_->max;
  DType type = max.accumulatorType;
  auto local = [&](const std::string& name) { return std::make_shared<Load>(type, name, std::vector<ExprPtr>{}); };
  ExprPtr factor = local(rescale_);
  auto multiplied = [&](ExprPtr value) { return std::make_shared<Binary>(type, BinaryOp::Mul, std::move(value), factor); };
  std::vector<StmtPtr> stmts{std::make_shared<Store>(nextMax_, std::vector<ExprPtr>{}, local(max.accumulator))};
  stmts.push_back(replayReductionLoops(*onlineTilePosition_, onlinePosition_, defined, masks, [&](const std::vector<ExprPtr>& leafMasks) -> StmtPtr {
    StmtPtr larger = std::make_shared<Store>(nextMax_, std::vector<ExprPtr>{},
                                             std::make_shared<Binary>(type, BinaryOp::Max, local(nextMax_), rootExpr(online_->maxOf)));
    return leafMasks.empty() ? larger : std::make_shared<Guard>(conjunction(leafMasks), larger);
  }));
  for (StmtPtr& move : maximumMoves()) stmts.push_back(move);
  for (const Computation& sum : online_->sums)
    stmts.push_back(std::make_shared<Store>(sum.accumulator, std::vector<ExprPtr>{}, multiplied(local(sum.accumulator))));
  stmts.push_back(replayPureLoops(*onlineTilePosition_, *onlineTilePosition_, defined, masks, [&](const std::vector<ExprPtr>&) -> StmtPtr {
    return std::make_shared<Store>(accumulator_, accumulatorIndex_,
                                   multiplied(std::make_shared<Load>(type, accumulator_, accumulatorIndex_)));
  }));
  stmts.push_back(rest);
  return withStepLocals(stmts);
}

// The root's reduction loops from `position` to `end` (a run of them with nothing placed inside), with
// their Lets and tails as guards, around `leaf`: a pass over them of their own.
StmtPtr NestScheduler::replayReductionLoops(size_t position, size_t end, Defined defined, std::vector<ExprPtr> masks,
                                            const std::function<StmtPtr(const std::vector<ExprPtr>&)>& leaf) {
  Ready ready = emitReady(root_loops_, openAt(position), defined, false, masks);
  if (position == end) return wrap(ready, leaf(masks));
  const FinalLoop& loop = root_loops_.loops[position];
  StmtPtr body = replayReductionLoops(position + 1, end, defined, masks, leaf);
  return wrap(ready, std::make_shared<Loop>(loop.var, loopEnd(position), bindingOf(loop),
                                            std::vector<std::string>{root_->name + "." + loop.scheduled->name}, body,
                                            vectorWidthOf(*loop.scheduled), dimensionOf(*loop.scheduled)));
}

// The running maximum and the sums live beside the root's accumulators, one of each per thread: every
// loop over an axis they depend on is outside the accumulators' scope or bound to threads, and every
// other loop in the scope is inside the reduction loops, where the step runs once per iteration.
void NestScheduler::placeOnlineSoftmax() {
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
  // Where the reduction loops are tiled (a serial loop over tiles outside a run of them that ends with
  // the last), the maximum moves once per tile, when the pass over the tile that finds it reads only
  // copies made outside the tile (it reads the tile twice) and nothing is placed among the tile's loops.
  size_t tile = last;
  while (tile > accumulatorPosition_ && loops[tile - 1].scheduled->reduction) --tile;
  bool tiled = false;
  for (size_t k = accumulatorPosition_; k < tile; ++k) tiled = tiled || loops[k].scheduled->reduction;
  for (size_t m = 0; m < parts_.members.size(); ++m) tiled = tiled && (!memberPositions_[m] || *memberPositions_[m] <= tile);
  for (const PlacedCache& cache : caches_) tiled = tiled && cache.position <= tile;
  forEachNode(*online_->maxOf, [&](const Expr& node) {
    const auto* load = node.as<Load>();
    if (load && std::none_of(caches_.begin(), caches_.end(), [&](const PlacedCache& cache) { return cache.cache->source == load->tensor; }))
      tiled = false;
  });
  if (tiled) onlineTilePosition_ = tile;
  hoistWeights();
  foldRootTerm();
}

// Each exponential of the terms that depends only on the loops open at the step (the softmax's weight
// exp(X - max), which the denominator and every accumulator's term read) is computed once per step into
// a local of its own: the CUDA compiler does not merge the hardware approximation's asm.
void NestScheduler::hoistWeights() {
  std::set<std::string> open = openAt(onlinePosition_), late;
  for (const auto& [axis, var] : root_loops_.axisVars)
    if (!includes(open, root_loops_.loopsOf.at(axis))) late.insert(var);
  std::map<std::string, std::string> localOf;  // an exponential's text -> its local
  auto hoisted = [&](const ExprPtr& term) {
    return rewrite(term, [&](const Expr& node) -> ExprPtr {
      const auto* exp = node.as<Unary>();
      if (!exp || exp->op != UnaryOp::Exp) return nullptr;
      bool early = true;
      forEachNode(node, [&](const Expr& inner) {
        const auto* var = inner.as<AxisVar>();
        early = early && !(var && late.count(var->name));
      });
      if (!early) return nullptr;
      auto [at, fresh] = localOf.emplace(printExpr(node), "");
      if (fresh) {
        at->second = uniqueVar(root_->name + "__weight");
        weights_.push_back({at->second, std::make_shared<Unary>(exp->dtype, exp->op, exp->operand, exp->approximate)});
      }
      return std::make_shared<Load>(exp->dtype, at->second, std::vector<ExprPtr>{});
    });
  };
  online_->rootTerm = hoisted(online_->rootTerm);
  for (ExprPtr& term : online_->sumTerms) term = hoisted(term);
}

namespace {

// A condition that holds only while x - y < bound: a comparison x < y (bound 0), x <= y (1), or the same
// written y > x, y >= x; a conjunction holds only while each of its comparisons does.
struct UpperBound {
  ExprPtr x, y;
  int64_t bound;
};
std::vector<UpperBound> upperBounds(const ExprPtr& condition) {
  const auto* binary = condition->as<Binary>();
  if (!binary) return {};
  if (binary->op == BinaryOp::And) {
    std::vector<UpperBound> bounds = upperBounds(binary->lhs), rhs = upperBounds(binary->rhs);
    bounds.insert(bounds.end(), rhs.begin(), rhs.end());
    return bounds;
  }
  if (binary->lhs->dtype != DType::I64) return {};
  switch (binary->op) {
    case BinaryOp::Lt: return {{binary->lhs, binary->rhs, 0}};
    case BinaryOp::Le: return {{binary->lhs, binary->rhs, 1}};
    case BinaryOp::Gt: return {{binary->rhs, binary->lhs, 0}};
    case BinaryOp::Ge: return {{binary->rhs, binary->lhs, 1}};
    default: return {};
  }
}

// The condition outside which `term` is the identity of `op` (maskedTerm); null where it has none.
ExprPtr maskOf(const ExprPtr& term, ReduceOp op) {
  std::optional<MaskedTerm> masked = maskedTerm(term, op);
  return masked ? masked->condition : nullptr;
}

}  // namespace

// The terms the root's reduction adds, with the identity of each: the online softmax's maximum and
// sums, or the root's own term; none where the update has another form.
std::vector<std::pair<ExprPtr, ReduceOp>> NestScheduler::reductionTerms() const {
  if (online_) {
    std::vector<std::pair<ExprPtr, ReduceOp>> terms{{online_->maxOf, ReduceOp::Max}, {online_->rootTerm, ReduceOp::Sum}};
    for (const ExprPtr& term : online_->sumTerms) terms.push_back({term, ReduceOp::Sum});
    return terms;
  }
  const auto* step = parts_.root.update->value->as<Binary>();
  const auto* current = step ? step->lhs->as<Load>() : nullptr;
  if (!current || current->tensor != parts_.root.accumulator) return {};
  return {{step->rhs, root_->reduction->op}};
}

// Where every term the reduction adds is its identity outside a condition (a bounded sum or maximum,
// `sum[l < s + 1]`: Tensor IR's where(l < s + 1, x, 0)) that bounds the loop at `position` from above,
// the iterations past the last in which it holds for some element of the block add nothing, and the
// loop ends before them (`useful`): causal attention's tiles of keys past the block's last query. And
// the iterations before the first in which it fails for some element (`whole`, null where that is not
// known) need no condition: the tiles below the diagonal. The loop is serial and every loop outside it
// the same for the whole block, so that both bounds are too (its barriers stay uniform). Nullopt where
// that does not apply.
std::optional<NestScheduler::MaskedTiles> NestScheduler::maskedTiles(size_t position) const {
  const std::vector<FinalLoop>& loops = root_loops_.loops;
  const FinalLoop& loop = loops[position];
  if (!root_->reduction || !loop.scheduled->reduction || loop.scheduled->binding || loop.scheduled->unrolled) return std::nullopt;
  for (size_t k = 0; k < position; ++k)
    if (boundToThreads(*loops[k].scheduled) || boundToGrid(*loops[k].scheduled)) return std::nullopt;
  std::vector<std::pair<ExprPtr, ReduceOp>> terms = reductionTerms();
  if (terms.empty()) return std::nullopt;
  // The conditions over the final loops' variables.
  std::map<std::string, ExprPtr> values = rootAxisValues();
  auto least = [](ExprPtr a, ExprPtr b) { return a ? arithmetic(BinaryOp::Min, a, b) : b; };
  ExprPtr useful, whole;
  bool wholeKnown = true;
  std::set<std::string> seen;
  for (const auto& [term, op] : terms) {
    ExprPtr mask = maskOf(term, op);
    if (!mask) return std::nullopt;
    if (!seen.insert(printExpr(*mask)).second) continue;
    // x - y = a * var + inner + rest, `inner` over the loops inside, `rest` x0 - y0 (both with the loop's
    // and the inner loops' variables 0). The first iteration from which one of the comparisons fails for
    // every element (`inner` at its least), and the first from which one fails for some element (at its
    // most).
    ExprPtr earliest, held;
    std::vector<UpperBound> bounds = upperBounds(mask);
    wholeKnown = wholeKnown && !bounds.empty();
    for (const auto& [x, y, bound] : bounds) {
      ExprPtr over = substitute(arithmetic(BinaryOp::Sub, x, y), values);
      std::optional<int64_t> a = coefficientOf(*over, loop.var);
      bool affine = a && *a > 0;
      int64_t innerLeast = 0, innerMost = 0;
      bool mostKnown = true;
      std::map<std::string, ExprPtr> zero{{loop.var, i64(0)}};
      for (size_t k = position + 1; k < loops.size() && affine; ++k) {
        std::optional<int64_t> c = coefficientOf(*over, loops[k].var);
        std::optional<int64_t> extent = loops[k].scheduled->extent;
        affine = c.has_value() && (*c >= 0 || extent.has_value());
        if (affine && *c < 0) innerLeast += *c * (*extent - 1);
        if (affine && *c > 0 && extent) innerMost += *c * (*extent - 1);
        mostKnown = mostKnown && (!c || *c <= 0 || extent);
        zero[loops[k].var] = i64(0);
      }
      if (!affine) {
        wholeKnown = false;
        continue;
      }
      ExprPtr rest = arithmetic(BinaryOp::Sub, substitute(substitute(x, values), zero), substitute(substitute(y, values), zero));
      // a * t + innerLeast + rest >= bound from t = ceil((bound - innerLeast - rest) / a) on.
      ExprPtr fails = arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Sub, i64(bound - innerLeast + *a - 1), rest), i64(*a));
      earliest = least(earliest, arithmetic(BinaryOp::Max, i64(0), fails));
      // a * t + innerMost + rest < bound up to t = ceil((bound - innerMost - rest) / a), excluded.
      wholeKnown = wholeKnown && mostKnown;
      ExprPtr holds = arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Sub, i64(bound - innerMost + *a - 1), rest), i64(*a));
      held = least(held, arithmetic(BinaryOp::Max, i64(0), holds));
    }
    if (!earliest) return std::nullopt;
    useful = useful ? arithmetic(BinaryOp::Max, useful, earliest) : earliest;
    whole = least(whole, held);
  }
  if (!useful) return std::nullopt;
  useful = arithmetic(BinaryOp::Min, loop.extent, useful);
  return MaskedTiles{useful, wholeKnown && whole ? arithmetic(BinaryOp::Min, useful, whole) : nullptr};
}

// Where the loop at `position` ends: its extent, or where its masked tiles end.
ExprPtr NestScheduler::loopEnd(size_t position) const {
  std::optional<MaskedTiles> tiles = maskedTiles(position);
  return tiles ? tiles->useful : root_loops_.loops[position].extent;
}

// The body of the loop at `position` for its tiles where every term's mask holds (maskedTiles): the
// terms without their masks.
StmtPtr NestScheduler::unmaskedBody(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks) {
  std::optional<OnlineSoftmax> online = online_;
  std::shared_ptr<loop::Store> onlineUpdate = onlineUpdate_, update;
  const loop::Store* rootUpdate = parts_.root.update;
  auto unmasked = [](const ExprPtr& term, ReduceOp op) {
    std::optional<MaskedTerm> masked = maskedTerm(term, op);
    return masked ? masked->value : term;
  };
  if (online_) {
    online_->maxOf = unmasked(online_->maxOf, ReduceOp::Max);
    online_->rootTerm = unmasked(online_->rootTerm, ReduceOp::Sum);
    for (ExprPtr& term : online_->sumTerms) term = unmasked(term, ReduceOp::Sum);
    foldRootTerm();
  } else {
    const auto& step = static_cast<const Binary&>(*rootUpdate->value);
    update = std::make_shared<loop::Store>(rootUpdate->buffer, rootUpdate->indices,
                                           std::make_shared<Binary>(step.dtype, step.op, step.lhs, unmasked(step.rhs, root_->reduction->op)));
    parts_.root.update = update.get();
  }
  StmtPtr body = generate(position + 1, defined, masks);
  online_ = online;
  onlineUpdate_ = onlineUpdate;
  parts_.root.update = rootUpdate;
  return body;
}

void NestScheduler::placeAccumulator() {
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
ExprPtr NestScheduler::offsetWithin(const ExprPtr& index, const std::map<std::string, ExprPtr>& atStart) const {
  std::map<std::string, ExprPtr> stay, none;
  ExprPtr full = substitute(index, rootAxisValues());
  bool fused = false;
  for (const FinalLoop& loop : root_loops_.loops) {
    fused = fused || loop.scheduled->fused;
    if (!atStart.count(loop.var)) stay[loop.var] = i64(0);
    none[loop.var] = i64(0);
  }
  if (fused) return arithmetic(BinaryOp::Sub, index, substitute(index, rootAxisValues(atStart)));
  return arithmetic(BinaryOp::Sub, substitute(full, stay), substitute(full, none));
}

std::map<std::string, ExprPtr> NestScheduler::rootAxisValues(const std::map<std::string, ExprPtr>& atStart) const {
  std::map<std::string, ExprPtr> values;
  for (const auto& [axis, loopVar] : root_loops_.axisVars)
    if (root_loops_.values.count(axis)) values[loopVar] = substitute(root_loops_.values.at(axis), atStart);
  return values;
}

// Does work that needs every thread of the block (a combine, a shared copy) happen at `position` or
// further in?
bool NestScheduler::cooperativeFrom(size_t position) const {
  for (size_t m = 0; m < parts_.members.size(); ++m)
    if (memberPositions_[m] >= position && memberIsCooperative(parts_.members[m])) return true;
  for (const PlacedCache& cache : caches_)
    if (cache.position >= position && cache.cache->memory == CacheMemory::Shared) return true;
  return cooperative_ && accumulatorPosition_ >= position;
}

// Inside the accumulators' loops, with nothing placed further in, does the update read only copies
// that are already made (and the accumulators, and an online softmax's running values)? Then iterations
// past a pure axis's end are harmless.
bool NestScheduler::overrunSafe(size_t position) const {
  if (!accumulatorOpen_ || !parts_.root.update) return false;
  for (size_t m = 0; m < parts_.members.size(); ++m)
    if (memberPositions_[m] >= position) return false;
  for (const PlacedCache& cache : caches_)
    if (cache.position >= position) return false;
  // What runs inside: the update, and an online softmax's step (its maximum, weights and sums).
  std::set<std::string> locals{parts_.root.accumulator};
  std::vector<ExprPtr> read{parts_.root.update->value};
  if (online_) {
    locals.insert({online_->max.accumulator, nextMax_, rescale_});
    for (const Computation& sum : online_->sums) locals.insert(sum.accumulator);
    read.push_back(online_->maxOf);
    read.insert(read.end(), online_->sumTerms.begin(), online_->sumTerms.end());
    for (const auto& [weight, value] : weights_) {
      locals.insert(weight);
      read.push_back(value);
    }
  }
  bool safe = true;
  for (const ExprPtr& expr : read)
    forEachNode(*expr, [&](const Expr& node) {
      const auto* load = node.as<Load>();
      if (!load || locals.count(load->tensor)) return;
      safe = safe && std::any_of(activeCaches_.begin(), activeCaches_.end(),
                                 [&](const PlacedCache* cache) { return cache->cache->source == load->tensor; });
    });
  return safe;
}

// The accumulators, their initialisation, the loops, the combine and the stores of the results.
StmtPtr NestScheduler::reductionRegion(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks) {
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
StmtPtr NestScheduler::replayPureLoops(size_t start, size_t position, Defined defined, std::vector<ExprPtr> masks,
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

}  // namespace emmy::tile
