// bind (to block.*, thread.*, warp.x, grid.x, with atomic) and threads: the checks of what a loop may be
// bound to and of the blocks of a whole kernel, and the Tile IR bindings, the stores made once by the
// threads that would each make them, and the kernel that initialises an output combined by atomics.
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/schedule_checker.h"

namespace emmy::tile {

// ---- checking ----

void ScheduleChecker::bind(const Directive& d) {
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
std::optional<std::string> ScheduleChecker::whyNoAtomic(const StageSchedule& schedule) const {
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

// `threads S N`: the block's size of the kernel that computes S, when a loop of S is bound to grid.x.
void ScheduleChecker::threads(const Directive& d) {
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

void ScheduleChecker::indexBits(const Directive& d) {
  StageSchedule* stage = findStage(d.stage);
  if (!stage) return;
  int64_t bits = d.factors[0].value;
  if (bits != 32 && bits != 64) {
    diagnostics_.error(d.factors[0].loc, fmt::format("index_bits {} {}: a kernel's index arithmetic is 32-bit where every "
                                                     "index fits (the launcher checks, and runs a 64-bit twin elsewhere) "
                                                     "or 64-bit at every size: 32 or 64", stage->name, bits));
    return;
  }
  if (stage->indexBits) {
    diagnostics_.error(d.loc, fmt::format("the index bits of {} are already given (at line {})", stage->name,
                                          stage->indexBitsAt.line));
    return;
  }
  stage->indexBits = bits;
  stage->indexBitsAt = d.loc;
}

// `index_bits` is a whole CUDA kernel's: it names the kernel's root, the stage it stores last.
void ScheduleChecker::checkIndexBitsOfRoots() {
  std::vector<std::string> roots;
  for (const loop::LoopNest& nest : program_.kernels) roots.push_back(nest.stages.back());
  for (const auto& [name, stage] : model_.stages)
    if (stage.indexBits && !nestRootedAt(name))
      diagnostics_.error(stage.indexBitsAt, fmt::format("index_bits {}: {} is not the root of a kernel, whose index "
                                                        "arithmetic it would choose (roots: {})",
                                                        name, name, join(roots, ", ")));
}

void ScheduleChecker::checkBlockLoopsOutermost(const StageSchedule& stage) {
  bool unbound = false;
  std::string firstUnbound;
  for (const ScheduledLoop& loop : stage.loops) {
    bool block = boundToBlocks(loop);
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
void ScheduleChecker::checkThreadsPerKernel() {
  for (const loop::LoopNest& nest : program_.kernels) {
    std::map<HardwareIndex, std::pair<int64_t, std::string>> extents;  // index -> (extent, stage.loop)
    for (const std::string& name : nest.stages)
      for (const ScheduledLoop& loop : model_.stages.at(name).loops) {
        if (!boundToThreads(loop) || !loop.extent) continue;
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
void ScheduleChecker::checkGridKernels() {
  for (const loop::LoopNest& nest : program_.kernels) {
    const StageSchedule& root = model_.stages.at(nest.stages.back());
    const ScheduledLoop* grid = nullptr;
    for (const ScheduledLoop& loop : root.loops)
      if (boundToGrid(loop)) grid = &loop;
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
SourceLoc ScheduleChecker::lastThreadBind(const loop::LoopNest& nest) const {
  SourceLoc last;
  for (const std::string& name : nest.stages)
    for (const ScheduledLoop& loop : model_.stages.at(name).loops)
      if (boundToThreads(loop) && loop.boundAt.line > last.line)
        last = loop.boundAt;
  return last;
}

// ---- applying ----

// A root whose partial results are combined by atomics: a kernel before it that sets every element of
// its output to the reduction's identity.
std::optional<TileNest> NestScheduler::outputInit() const {
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
  return TileNest{nest_.name + "_init", {root_->name}, {kInitThreads, 1, 1}, body, narrowestIndexBits()};
}

Binding NestScheduler::bindingOf(const FinalLoop& loop) {
  const ScheduledLoop& scheduled = *loop.scheduled;
  if (scheduled.binding)
    return scheduled.binding->scope == HardwareScope::Block  ? Binding::BlockStrided
           : scheduled.binding->scope == HardwareScope::Grid ? Binding::GridStrided
                                                             : Binding::ThreadIndex;
  return scheduled.unrolled || scheduled.vectorized ? Binding::Unrolled : Binding::Serial;
}

int NestScheduler::dimensionOf(const ScheduledLoop& loop) {
  return loop.binding && loop.binding->scope != HardwareScope::Warp ? loop.binding->dimension : 0;
}

StmtPtr NestScheduler::loop(size_t position, const Defined& defined, const std::vector<ExprPtr>& masks) {
  const FinalLoop& loop = root_loops_.loops[position];
  Binding binding = bindingOf(loop);
  int dimension = dimensionOf(*loop.scheduled);
  std::set<int> outerThreadBound = threadBound_;
  if (binding == Binding::ThreadIndex) threadBound_.insert(dimension);
  if (binding == Binding::GridStrided) threadBound_ = {0, 1, 2};  // every thread its own iterations
  StmtPtr body = generate(position + 1, defined, masks);
  std::optional<MaskedTiles> tiles = maskedTiles(position);
  if (tiles && tiles->whole) {
    // The tiles where every mask holds for the whole block run without them.
    ExprPtr inWhole = compare(BinaryOp::Lt, var(loop.var), tiles->whole);
    body = block({std::make_shared<Guard>(inWhole, unmaskedBody(position, defined, masks)),
                  std::make_shared<Guard>(compare(BinaryOp::Ge, var(loop.var), tiles->whole), body)});
  }
  threadBound_ = outerThreadBound;
  return std::make_shared<Loop>(loop.var, loopEnd(position), binding,
                                std::vector<std::string>{root_->name + "." + loop.scheduled->name}, body,
                                vectorWidthOf(*loop.scheduled), dimension);
}

// A store to global memory: masked where axes were clamped, and made once by the threads that would
// each make it (those of a dimension of the block no enclosing loop takes its iterations from).
StmtPtr NestScheduler::globalStore(StmtPtr store, const std::vector<ExprPtr>& masks) const {
  if (!masks.empty()) store = std::make_shared<Guard>(conjunction(masks), store);
  std::vector<int> dimensions;
  for (int d = 0; d < 3; ++d)
    if (threads_[d] > 1 && !threadBound_.count(d) && !atomicDimensions_.count(d)) dimensions.push_back(d);
  return dimensions.empty() ? store : std::make_shared<SingleThread>(store, dimensions);
}

}  // namespace emmy::tile
