// cache (in shared memory or registers), pad and double_buffer: the footprint of a copy and its limits
// (the model), and the copies Tile IR makes: by the block or by each thread, whole rows with a second
// path where they do not fit, double-buffered with asynchronous copies, or a stage computed there.
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/schedule_checker.h"
#include "ir/tensor/launch_variants.h"

namespace emmy::tile {

namespace {

constexpr int64_t kWarpThreads = 32;
// The vectors of a plain shared copy each thread reads before it stores them (64 bytes).
constexpr int64_t kVectorsInFlight = 4;
constexpr int64_t kBanks = 32;  // of 4 bytes

// The shared-memory wavefronts of one warp's stores of a block's vector copy, lane by lane, when a warp
// takes rows `step` apart: thread t stores vector t % vectorsPerRow of row (t / vectorsPerRow) * step, an
// element of `elementBytes` (at most 4) a lane, rows `rowElements` apart.
int64_t warpStoreWavefronts(int64_t step, int64_t rowElements, int64_t vectorsPerRow, int lanes, int elementBytes) {
  int64_t total = 0;
  for (int lane = 0; lane < lanes; ++lane) {
    std::map<int64_t, std::set<int64_t>> wordsByBank;
    for (int64_t t = 0; t < kWarpThreads; ++t) {
      int64_t word = ((t / vectorsPerRow) * step * rowElements + (t % vectorsPerRow) * lanes + lane) * elementBytes / 4;
      wordsByBank[word % kBanks].insert(word);
    }
    size_t most = 0;
    for (const auto& [bank, words] : wordsByBank) most = std::max(most, words.size());
    total += static_cast<int64_t>(most);
  }
  return total;
}

}  // namespace

// ---- checking ----

// "y.d_lane, y.d_step": the loops of `d`'s stage at which its cache fits.
std::string ScheduleChecker::legalCachePlaces(const Directive& d) {
  const StageSchedule& at = model_.stages.at(d.atStage.text);
  std::vector<std::string> places;
  for (size_t k = 0; k < at.loops.size(); ++k) {
    Directive elsewhere = d;
    elsewhere.atAxis.text = at.loops[k].name;
    if (fitCopy(elsewhere, at, k, false)) places.push_back(at.name + "." + at.loops[k].name);
  }
  return places.empty() ? "none" : join(places, ", ");
}

// A copy's size depends on the loops inside and around its place, which later directives (and the
// default policy) may still split, bind or reorder: each copy is sized again once all are applied,
// at the innermost of the loops its loop became (a place inside a loop is inside all of its parts).
void ScheduleChecker::refitCopies() {
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
size_t ScheduleChecker::finalLoop(const StageSchedule& stage, const std::string& name) {
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
std::vector<const ScheduledLoop*> ScheduleChecker::varyingLoops(const StageSchedule& stage, size_t loopAt, CacheMemory memory) {
  std::vector<const ScheduledLoop*> varying;
  for (size_t k = 0; k < stage.loops.size(); ++k) {
    const ScheduledLoop& loop = stage.loops[k];
    bool threads = boundToThreads(loop);
    if (memory == CacheMemory::Shared ? (k > loopAt || threads) : (k > loopAt && !threads)) varying.push_back(&loop);
  }
  return varying;
}

// Where a stage computed at loop `loopAt` of `at` lives: in shared memory, computed by the block's
// threads together, outside every thread loop; in each thread's registers inside one.
CacheMemory ScheduleChecker::memoryAt(const StageSchedule& at, size_t loopAt) {
  for (size_t k = 0; k <= loopAt; ++k)
    if (at.loops[k].binding && at.loops[k].binding->scope != HardwareScope::Block) return CacheMemory::Registers;
  return CacheMemory::Shared;
}

// The part of the tensor that `d` caches (or computes, for `compute ... at`) that `at` reads in one
// iteration of its loop `loopAt`: the union of what each of its reads takes there. Nullopt when it
// has no constant size, or too many elements for registers; then, with `report`, an error says why.
std::optional<ScheduleChecker::CopyFit> ScheduleChecker::fitCopy(const Directive& d, const StageSchedule& at, size_t loopAt, bool report) {
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
  // A copy of whole rows holds them in whole 16-byte vectors, sized at launch to the row: shared memory a
  // block does not use would only limit how many blocks an SM holds (a launch variant's rows of up to 2048
  // f32 took 8 KiB each, for rows of 256 too). shape.back() bounds the row: a launch variant's longest row
  // where that is at most kWholeRowCacheBytes (every launch gives it), else the most any device allows.
  std::optional<int64_t> rowBound;
  if (!compute && fit.memory == CacheMemory::Shared && !own) {
    int64_t lanes = std::max<int64_t>(1, 16 / dtypeBytes(dtype));
    auto roundedUp = [&](int64_t elements) { return (std::max<int64_t>(elements, 1) + lanes - 1) / lanes * lanes; };
    std::optional<int64_t> longest = largestExtent(shape.back(), kernel_);
    if (longest && roundedUp(*longest) * dtypeBytes(dtype) <= kWholeRowCacheBytes) {
      rowBound = roundedUp(*longest);
    } else {
      rowBound = kMostSharedBytesPerBlock / dtypeBytes(dtype) / lanes * lanes;
      if (longest) rowBound = std::min(*rowBound, roundedUp(*longest));
    }
  }
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
bool ScheduleChecker::readsWhole(const Expr& index, const StageSchedule& stage, const std::vector<const ScheduledLoop*>& varying) {
  const auto* axis = index.as<AxisVar>();
  if (!axis) return false;
  for (const ScheduledLoop& loop : stage.loops)
    if (loop.coefficients.count(axis->name) &&
        std::find(varying.begin(), varying.end(), &loop) == varying.end())
      return false;
  return true;
}

// The reads of `source` that `stage`'s expression makes, with indices over the stage's axes.
std::vector<std::vector<ExprPtr>> ScheduleChecker::readsOf(const Stage& stage, const std::string& source) const {
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

void ScheduleChecker::cache(const Directive& d) {
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
  // A callee's cache that the caller makes impossible (an epilogue that reads the source elsewhere too)
  // was advice for the callee's own loops: it is passed over, with its pad and double_buffer.
  std::optional<CopyFit> fit = fitCopy(d, *at, loopAt - at->loops.begin(), !d.fromCallee);
  if (!fit) {
    if (d.fromCallee) skippedCaches_.insert(name);
    return;
  }
  DType dtype = sourceStage ? sourceStage->dtype : input->dtype;
  model_.caches.push_back(CacheStage{name, source, at->name, d.atAxis.text, d.memory, fit->extents, 0, false,
                                     dtypeBytes(dtype), d.loc, fit->wholeRows});
  copies_.push_back({d, name});
}

// Whether a tensor, size or scalar of the kernel, or a cache made so far, is named `name`.
bool ScheduleChecker::nameTaken(const std::string& name) {
  const auto& scalars = kernel_.scalars;
  return kernel_.findStage(name) || kernel_.findInput(name) || findCache(name) ||
         std::find(kernel_.sizes.begin(), kernel_.sizes.end(), name) != kernel_.sizes.end() || kernel_.findDerivedSize(name) ||
         std::any_of(scalars.begin(), scalars.end(), [&](const ScalarParamDecl& s) { return s.name == name; });
}

// `pad S by N` and `double_buffer S`: S is a shared-memory cache; `pad` also takes a stage computed at a
// loop into shared memory (`compute S at R.a`, the block's part of S: attention's tile of scores).
void ScheduleChecker::shapeCache(const Directive& d) {
  CacheStage* cache = findCache(d.stage.text);
  const char* word = directiveWord(d.kind);
  auto computed = model_.stages.find(d.stage.text);
  if (!cache && d.kind == DirectiveKind::Pad && computed != model_.stages.end() &&
      computed->second.placement == Placement::ComputeAt && computed->second.memory == CacheMemory::Shared) {
    computed->second.pad = d.factors[0].value;
    return;
  }
  if (!cache || cache->memory != CacheMemory::Shared) {
    std::vector<std::string> shared;
    for (const CacheStage& c : model_.caches)
      if (c.memory == CacheMemory::Shared) shared.push_back(c.name);
    for (const auto& [name, stage] : model_.stages)
      if (d.kind == DirectiveKind::Pad && stage.placement == Placement::ComputeAt && stage.memory == CacheMemory::Shared)
        shared.push_back(name);
    std::string what = cache ? fmt::format("{} is a register cache", cache->name)
                             : fmt::format("{} is not a cache", d.stage.text);
    bool pad = d.kind == DirectiveKind::Pad;
    diagnostics_.error(d.stage.loc, withSuggestion(fmt::format("{} applies to a shared-memory cache made by an earlier "
                                                               "'cache ... in shared'{}, and {} (shared {}: {})", word,
                                                               pad ? " or a stage 'compute ... at' puts in shared memory" : "",
                                                               what, pad ? "caches and stages" : "caches",
                                                               shared.empty() ? "none" : join(shared, ", ")),
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

// The static shared memory of each kernel within what a block may declare; the copies of whole rows
// that a launch variant bounds (kWholeRowCacheBytes) always fit where they all fit beside it, and are
// otherwise tested at launch like longer rows.
void ScheduleChecker::checkSharedMemory() {
  for (const loop::LoopNest& nest : program_.kernels) {
    int64_t bytes = 0;
    std::vector<std::string> parts;
    const SourceLoc* last = nullptr;
    int64_t boundedRows = 0;
    std::vector<CacheStage*> bounded;
    for (CacheStage& cache : model_.caches) {
      if (cache.memory != CacheMemory::Shared ||
          std::find(nest.stages.begin(), nest.stages.end(), cache.atStage) == nest.stages.end())
        continue;
      int64_t elements = 1;
      for (size_t dim = 0; dim < cache.shape.size(); ++dim)
        elements *= cache.shape[dim] + (dim + 1 == cache.shape.size() ? cache.pad : 0);
      int64_t size = elements * cache.elementBytes * (cache.doubleBuffered ? 2 : 1);
      if (cache.wholeRows) {
        if (cache.shape.back() * cache.elementBytes <= kWholeRowCacheBytes) {
          boundedRows += size;
          bounded.push_back(&cache);
        }
        continue;
      }
      bytes += size;
      parts.push_back(fmt::format("{} {} bytes", cache.name, size));
      last = &cache.loc;
    }
    // Stages computed at a block-level loop of the nest's root live in shared memory too.
    for (const std::string& name : nest.stages) {
      const StageSchedule& stage = model_.stages.at(name);
      if (stage.placement != Placement::ComputeAt || stage.memory != CacheMemory::Shared) continue;
      int64_t elements = 1;
      for (size_t dim = 0; dim < stage.footprint.size(); ++dim)
        elements *= stage.footprint[dim] + (dim + 1 == stage.footprint.size() ? stage.pad : 0);
      int64_t size = elements * dtypeBytes(kernel_.findStage(name)->dtype);
      bytes += size;
      parts.push_back(fmt::format("{} {} bytes", name, size));
      last = &stage.placedAt;
    }
    if (bytes > kStaticSharedMemoryBytes)
      diagnostics_.error(*last, fmt::format("the shared-memory caches of {} take {} bytes ({}), more than the {} bytes "
                                                "of shared memory a block may declare", nest.name, bytes,
                                                join(parts, ", "), kStaticSharedMemoryBytes));
    for (CacheStage* cache : bounded) cache->alwaysFits = bytes + boundedRows <= kStaticSharedMemoryBytes;
  }
}

// ---- applying ----

void NestScheduler::placeCaches() {
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
                                         schedule.footprint, schedule.memory == CacheMemory::Shared ? schedule.pad : 0, false,
                                         dtypeBytes(stage.dtype), schedule.placedAt});
    PlacedCache placed = placeCopy(computedCopies_.back(), positionAfter(schedule.atLoop));
    placed.computes = &whole;
    caches_.push_back(placed);
  }
}

// A copy of `source` at `position`: it starts, along each dimension, where the first of the root's
// reads there is when the loops that vary within it are at 0 (the model made the reads of one
// dimension a constant distance apart). Outside the source it holds the pad value of padded reads.
NestScheduler::PlacedCache NestScheduler::placeCopy(const CacheStage& cache, size_t position) {
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
  std::map<std::string, ExprPtr> axisValues = rootAxisValues(atStart);
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
std::vector<const Load*> NestScheduler::rootReadsOf(const std::string& tensor) const {
  std::vector<const Load*> found;
  std::vector<const loop::Store*> stores{parts_.root.store, parts_.root.update, parts_.root.finalize};
  for (const Computation& companion : parts_.companions) stores.push_back(companion.store);
  for (const loop::Store* store : stores)
    if (store)
      forEachNode(*store->value, [&](const Expr& node) {
        if (const auto* load = node.as<Load>(); load && load->tensor == tensor) found.push_back(load);
      });
  return found;
}

// A copy of whole rows at `position`: the code from there on twice, reading through the copy where the
// rows fit in it, and reading the source where they do not. Inside a variant whose test is the same,
// the side that variant took.
//
// The launch's shared memory holds the copies in use around this one, then this one. The copies made
// further in go first: a copy fits where the launch gave the bytes of those around it, its own, and
// those of every copy of whole rows inside it (a layer norm's rows of x, copied per row, before w and
// b, copied once for a block's rows), so that a launch that cannot give all takes the inner ones. The
// host function gives the bytes of the path that takes the most the device allows
// (kernel::Function::launchSharedChoices).
StmtPtr NestScheduler::rowVariants(const PlacedCache& cache, const Defined& defined, const std::vector<ExprPtr>& masks) {
  size_t position = cache.position;
  // Copies at one place are made in the order of caches_, the first outermost.
  ExprPtr needed;
  for (const PlacedCache& other : caches_) {
    bool inside = other.position > position || (other.position == position && &other > &cache);
    auto used = wholeRowsInUse_.find(&other);
    if (!other.cache->wholeRows || !(&other == &cache || inside || (used != wholeRowsInUse_.end() && used->second)))
      continue;
    ExprPtr bytes = arithmetic(BinaryOp::Mul, elementsAtLaunch(other), i64(other.cache->elementBytes));
    needed = needed ? arithmetic(BinaryOp::Add, needed, bytes) : bytes;
  }
  ExprPtr fits = compare(BinaryOp::Le, needed, var(kLaunchSharedBytes));
  std::string test = printExpr(*fits);
  auto variant = [&](bool copy) {
    wholeRowsInUse_[&cache] = copy;
    auto [known, added] = rowsFit_.emplace(test, copy);
    StmtPtr code = generate(position, defined, masks);
    if (added) rowsFit_.erase(known);
    wholeRowsInUse_.erase(&cache);
    return code;
  };
  if (auto known = rowsFit_.find(test); known != rowsFit_.end()) return variant(known->second);
  // Where the sizes bound the rows to kWholeRowCacheBytes (a launch variant for short rows), every launch
  // gives the copy its bytes.
  std::optional<int64_t> longest = largestExtent(sourceShape(cache).back(), kernel_);
  if (longest && *longest <= cache.cache->shape.back() && cache.cache->alwaysFits) return variant(true);
  StmtPtr copied = variant(true);
  StmtPtr direct = variant(false);
  return block({std::make_shared<Guard>(fits, copied),
                std::make_shared<Guard>(std::make_shared<Unary>(DType::Bool, UnaryOp::Not, fits), direct)});
}

bool NestScheduler::inUse(const PlacedCache& cache) const {
  return !cache.cache->wholeRows || wholeRowsInUse_.at(&cache);
}

// `cache S ... at R.a`: the copy, filled before `rest` reads it.
// Whole rows are copied asynchronously, 16 bytes at a time where aligned, and waited for at once.
StmtPtr NestScheduler::cacheCopy(const PlacedCache& placed, StmtPtr rest) {
  bool shared = placed.cache->memory == CacheMemory::Shared;
  bool rows = placed.cache->wholeRows;
  std::vector<StmtPtr> stmts{fill(placed, placed.base, nullptr, rows)};
  if (rows) stmts.push_back(std::make_shared<WaitForCopies>(0));
  stmts.push_back(rest);
  return std::make_shared<Allocate>(placed.cache->name, placed.dtype, cacheShape(placed),
                                    shared ? MemoryScope::Shared : MemoryScope::Registers, block(stmts),
                                    placed.cache->wholeRows ? elementsAtLaunch(placed) : nullptr);
}

// The elements of a copy sized at launch: the row in whole 16-byte vectors (as the copy and the reads
// through it take it), and its pad.
ExprPtr NestScheduler::elementsAtLaunch(const PlacedCache& placed) const {
  int64_t lanes = std::max(1, 16 / placed.cache->elementBytes);
  ExprPtr vectors = arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, dimValue(sourceShape(placed).back()), i64(lanes - 1)),
                               i64(lanes));
  return arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, vectors, i64(lanes)), i64(placed.cache->pad));
}

// The copy's shape: its footprint, rows widened by `pad`, and two stages when double-buffered.
std::vector<Dim> NestScheduler::cacheShape(const PlacedCache& placed) {
  const CacheStage& cache = *placed.cache;
  std::vector<Dim> shape;
  if (single(placed)) return shape;
  if (cache.doubleBuffered) shape.push_back(Dim::constant(2));
  for (size_t d = 0; d < cache.shape.size(); ++d)
    shape.push_back(Dim::constant(cache.shape[d] + (d + 1 == cache.shape.size() ? cache.pad : 0)));
  return shape;
}

// A register copy of one element is a scalar (a shared one stays an array: shared memory is indexed).
bool NestScheduler::single(const PlacedCache& placed) {
  const CacheStage& cache = *placed.cache;
  return cache.memory == CacheMemory::Registers && !cache.doubleBuffered && std::all_of(cache.shape.begin(), cache.shape.end(), [](int64_t e) { return e == 1; });
}

// The loop that copies the footprint starting at `base` (into stage `stage` of a double-buffered
// copy, by asynchronous copies when `async`, copyLanes elements at a time): by the whole block for a
// shared copy, by each thread for a register copy. Elements outside the source read as 0.
StmtPtr NestScheduler::fill(const PlacedCache& placed, const std::vector<ExprPtr>& base, const ExprPtr& stage, bool async) {
  const CacheStage& cache = *placed.cache;
  // Asynchronous copies fill what is outside the source with zeros, and only after its start.
  async = async && !placed.padValue &&
          std::all_of(placed.baseRead.begin(), placed.baseRead.end(), [](const ExprPtr& index) { return nonNegative(*index); });
  bool shared = cache.memory == CacheMemory::Shared;
  // A block's plain copy reads its source 16 bytes at a time where aligned and inside (Kernel IR's vector
  // lanes), so that a thread has whole vectors in flight rather than single elements.
  bool vectorReads = !async && shared && !placed.computes && !single(placed);
  int lanes = async ? copyLanes(placed) : vectorReads ? readLanes(placed) : 1;
  int64_t elements = 1;
  for (int64_t extent : cache.shape) elements *= extent;
  const Shape sourceShape = this->sourceShape(placed);
  // The element `element` of the copy: its coordinates (named by Lets added to `stmts`), where it is in the
  // copy and in the source, and whether it is inside the source.
  struct Element {
    std::vector<ExprPtr> local, global, inside;
  };
  auto elementAt = [&](const std::string& element, std::vector<StmtPtr>& stmts) {
    Element at;
    if (stage) at.local.push_back(stage);
    std::vector<ExprPtr> coordinates;
    int64_t stride = elements;
    for (size_t d = 0; d < cache.shape.size(); ++d) {
      stride /= cache.shape[d];
      ExprPtr coordinate = i64(0);  // along a dimension of extent 1
      if (cache.wholeRows && d + 1 == cache.shape.size()) {
        coordinate = var(element);  // one row, copied where it fits: the element is inside it
      } else if (cache.shape[d] > 1) {
        std::string name = uniqueVar(fmt::format("{}_{}", cache.name, d));
        stmts.push_back(std::make_shared<Let>(
            name, arithmetic(BinaryOp::Mod, arithmetic(BinaryOp::Div, var(element), i64(stride)), i64(cache.shape[d]))));
        coordinate = var(name);
      }
      coordinates.push_back(coordinate);
      at.global.push_back(arithmetic(BinaryOp::Add, base[d], coordinate));
      at.inside.push_back(inBounds(placed, d, at.global.back(), sourceShape));
    }
    if (!single(placed)) at.local.insert(at.local.end(), coordinates.begin(), coordinates.end());
    return at;
  };
  // The first element of a vector of `lanes` (the element itself when 1).
  auto firstElement = [&](const std::string& vector, std::vector<StmtPtr>& stmts) {
    if (lanes == 1) return vector;
    std::string element = uniqueVar(cache.name + "_element");
    stmts.push_back(std::make_shared<Let>(element, vectorReads ? vectorStart(placed, var(vector), lanes)
                                                               : arithmetic(BinaryOp::Mul, var(vector), i64(lanes))));
    return element;
  };
  // The lanes of a vector: consecutive elements of the last dimension, each `lane` after `at`.
  auto atLane = [&](Element at, const std::string& lane) {
    at.local.back() = arithmetic(BinaryOp::Add, at.local.back(), var(lane));
    at.global.back() = arithmetic(BinaryOp::Add, at.global.back(), var(lane));
    at.inside.back() = inBounds(placed, cache.shape.size() - 1, at.global.back(), sourceShape);
    return at;
  };
  Binding binding = shared ? Binding::ThreadStrided : placed.computes ? Binding::Serial : Binding::Unrolled;
  int64_t vectors = elements / lanes;
  // A plain shared copy whose threads each read `group` vectors into registers, then store them: a thread
  // stalls at the first use of a load, so a store right after each load kept one vector in flight per
  // thread (16 bytes: on an H200 about half the bytes an SM must keep in flight to reach the bandwidth,
  // with the few warps a transpose's tile leaves resident). Thread t's vectors are t, t + n, ...,
  // t + (group - 1) n for n = vectors / group, its next group n further: a warp's loads of one slot are
  // consecutive vectors.
  if (int64_t group = vectorReads && !cache.wholeRows ? vectorsInFlight(vectors) : 1; group > 1) {
    std::string batch = uniqueVar(cache.name + "_batch"), staged = uniqueVar(cache.name + "_staged");
    int64_t stride = vectors / group, columns = cache.shape.back();
    // Where the vectors a slot apart are whole rows apart in the order vectorStart takes them, each slot's
    // vector is its batch's first, rows further: its coordinates are computed once, not per slot.
    std::vector<StmtPtr> batchStmts;
    std::optional<Element> batchFirst;
    if (cache.shape.size() == 2 && stride % vectorOrderPeriod(placed, lanes) == 0 && (stride * lanes) % columns == 0)
      batchFirst = elementAt(firstElement(batch, batchStmts), batchStmts);
    // One pass over the slots: each vector read into its slot of `staged`, or stored from it into the copy.
    auto pass = [&](bool read) {
      std::string slot = uniqueVar(cache.name + "_slot"), lane = uniqueVar(cache.name + "_lane");
      std::vector<StmtPtr> stmts;
      Element first;
      if (batchFirst) {
        ExprPtr rows = arithmetic(BinaryOp::Mul, var(slot), i64(stride * lanes / columns));
        first = *batchFirst;
        first.local[first.local.size() - 2] = arithmetic(BinaryOp::Add, first.local[first.local.size() - 2], rows);
        first.global[0] = arithmetic(BinaryOp::Add, first.global[0], rows);
        first.inside[0] = inBounds(placed, 0, first.global[0], sourceShape);
      } else {
        std::string vector = uniqueVar(cache.name + "_vector");
        stmts.push_back(std::make_shared<Let>(vector, arithmetic(BinaryOp::Add, var(batch), arithmetic(BinaryOp::Mul, var(slot), i64(stride)))));
        first = elementAt(firstElement(vector, stmts), stmts);
      }
      Element element = atLane(first, lane);
      std::vector<ExprPtr> inSlot{var(slot), var(lane)};
      StmtPtr store = read ? std::make_shared<Store>(staged, inSlot, copiedValue(placed, element.global, element.inside))
                           : std::make_shared<Store>(cache.name, element.local, std::make_shared<Load>(placed.dtype, staged, inSlot));
      stmts.push_back(std::make_shared<Loop>(lane, i64(lanes), Binding::Unrolled, std::vector<std::string>{}, store,
                                             read ? lanes : 1));
      return std::make_shared<Loop>(slot, i64(group), Binding::Unrolled, std::vector<std::string>{}, block(stmts));
    };
    batchStmts.push_back(pass(true));
    batchStmts.push_back(pass(false));
    StmtPtr body = std::make_shared<Allocate>(staged, placed.dtype, std::vector<Dim>{Dim::constant(group), Dim::constant(lanes)},
                                              MemoryScope::Registers, block(batchStmts));
    return std::make_shared<Loop>(batch, i64(stride), Binding::ThreadStrided, std::vector<std::string>{}, body);
  }

  std::string vector = uniqueVar(cache.name + (lanes > 1 ? "_vector" : "_element"));
  std::vector<StmtPtr> stmts;
  Element at = elementAt(firstElement(vector, stmts), stmts);
  if (placed.computes) {
    stmts.push_back(computeElement(placed, at.local, at.global, sourceShape));
  } else if (async && lanes > 1) {
    // The rows inside, and of each row, the lanes before the source's end.
    ExprPtr lanesInside = arithmetic(BinaryOp::Sub, dimValue(sourceShape.back()), at.global.back());
    at.inside.pop_back();
    ExprPtr rowInside = at.inside.empty() ? immediate(DType::Bool, 1) : conjunction(at.inside);
    stmts.push_back(std::make_shared<CopyAsync>(cache.name, at.local, cache.source, at.global, rowInside, placed.dtype, lanes,
                                                lanesInside));
  } else if (async) {
    stmts.push_back(std::make_shared<CopyAsync>(cache.name, at.local, cache.source, at.global, conjunction(at.inside), placed.dtype));
  } else if (lanes > 1) {
    std::string lane = uniqueVar(cache.name + "_lane");
    Element element = atLane(at, lane);
    stmts.push_back(std::make_shared<Loop>(lane, i64(lanes), Binding::Unrolled, std::vector<std::string>{},
                                           std::make_shared<Store>(cache.name, element.local,
                                                                   copiedValue(placed, element.global, element.inside)),
                                           lanes));
  } else {
    stmts.push_back(std::make_shared<Store>(cache.name, at.local, copiedValue(placed, at.global, at.inside)));
  }
  // Whole rows: only the row's own elements (it fits: its rows are read through the copy only then).
  ExprPtr extent = cache.wholeRows ? arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, dimValue(sourceShape.back()), i64(lanes - 1)),
                                                i64(lanes))
                                   : i64(vectors);
  return std::make_shared<Loop>(vector, extent, binding, std::vector<std::string>{}, block(stmts));
}

// How many of a block's plain copy of `vectors` vectors each thread reads before it stores them (fill): up
// to kVectorsInFlight, where the block's threads take the copy in whole groups (then no thread's group runs
// past the copy, and each warp's vectors are as many and as ordered as when it takes one at a time).
int64_t NestScheduler::vectorsInFlight(int64_t vectors) const {
  int64_t threads = int64_t{threads_[0]} * threads_[1] * threads_[2];
  for (int64_t group = kVectorsInFlight; group > 1; group /= 2)
    if (vectors % (group * threads) == 0 && (vectors / group) % kWarpThreads == 0) return group;
  return 1;
}

// The first element of vector `vector` of a block's copy that reads by vectors and stores their lanes one
// by one: the vectors in row-major order, but where one warp's stores would meet in a bank (a padded row
// that keeps column reads free of conflicts, as a transpose's), each warp takes rows `step` apart: in each
// group of step x (rows a warp takes) rows, rows 0, step, 2 step, ... first, then 1, step + 1, ...
ExprPtr NestScheduler::vectorStart(const PlacedCache& placed, const ExprPtr& vector, int lanes) {
  const CacheStage& cache = *placed.cache;
  int64_t columns = cache.shape.back();
  int64_t vectorsPerRow = columns / lanes;
  if (int64_t step = rowStep(placed, lanes); step > 1) {
    int64_t rowsPerWarp = kWarpThreads / vectorsPerRow, group = step * rowsPerWarp;
    ExprPtr row = arithmetic(BinaryOp::Div, vector, i64(vectorsPerRow));
    ExprPtr within = arithmetic(BinaryOp::Mod, row, i64(group));
    ExprPtr ordered = arithmetic(
        BinaryOp::Add, arithmetic(BinaryOp::Mul, arithmetic(BinaryOp::Div, row, i64(group)), i64(group)),
        arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, arithmetic(BinaryOp::Mod, within, i64(rowsPerWarp)), i64(step)),
                   arithmetic(BinaryOp::Div, within, i64(rowsPerWarp))));
    return arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, ordered, i64(columns)),
                      arithmetic(BinaryOp::Mul, arithmetic(BinaryOp::Mod, vector, i64(vectorsPerRow)), i64(lanes)));
  }
  return arithmetic(BinaryOp::Mul, vector, i64(lanes));
}

// How many rows apart vectorStart has each warp take (1: consecutive rows), the fewest store wavefronts.
int64_t NestScheduler::rowStep(const PlacedCache& placed, int lanes) {
  const CacheStage& cache = *placed.cache;
  int64_t columns = cache.shape.back(), rows = 1;
  for (size_t d = 0; d + 1 < cache.shape.size(); ++d) rows *= cache.shape[d];
  int64_t vectorsPerRow = columns / lanes;
  int elementBytes = dtypeBytes(placed.dtype);
  int64_t step = 1;
  if (elementBytes <= 4 && kWarpThreads % vectorsPerRow == 0) {
    int64_t rowsPerWarp = kWarpThreads / vectorsPerRow, rowElements = columns + cache.pad;
    int64_t fewest = warpStoreWavefronts(1, rowElements, vectorsPerRow, lanes, elementBytes);
    for (int64_t candidate : {2, 4, 8}) {
      int64_t wavefronts = warpStoreWavefronts(candidate, rowElements, vectorsPerRow, lanes, elementBytes);
      if (rows % (candidate * rowsPerWarp) == 0 && wavefronts < fewest) {
        step = candidate;
        fewest = wavefronts;
      }
    }
  }
  return step;
}

// The vectors after which vectorStart's order repeats, rows further: a group of rows its warps take
// `step` apart, or a vector where they take consecutive rows.
int64_t NestScheduler::vectorOrderPeriod(const PlacedCache& placed, int lanes) {
  int64_t step = rowStep(placed, lanes);
  return step > 1 ? step * kWarpThreads : 1;
}

// The source's element at `global` where it is `inside`, else the pad value (0 by default).
ExprPtr NestScheduler::copiedValue(const PlacedCache& placed, const std::vector<ExprPtr>& global, const std::vector<ExprPtr>& inside) {
  return std::make_shared<Select>(conjunction(inside), std::make_shared<Load>(placed.dtype, placed.cache->source, global),
                                  placed.padValue ? placed.padValue : immediate(placed.dtype, 0));
}

// `index` < the extent of dimension `d`, and >= 0 where a padded read or one at a negative offset (under
// a `where`) may start the copy before the source.
ExprPtr NestScheduler::inBounds(const PlacedCache& placed, size_t d, const ExprPtr& index, const Shape& shape) const {
  ExprPtr below = compare(BinaryOp::Lt, index, dimValue(shape[d]));
  if (!placed.padValue && nonNegative(*placed.baseRead[d])) return below;
  return std::make_shared<Binary>(DType::Bool, BinaryOp::And, compare(BinaryOp::Ge, index, i64(0)), below);
}

// One element of a computed copy: the stage's axes at `global`, and where they are `inside` the stage,
// its value (its reduction loops as its schedule makes them: split, unrolled, its reads along one
// vectorized) stored at `local`; outside, the pad value of padded reads.
StmtPtr NestScheduler::computeElement(const PlacedCache& placed, const std::vector<ExprPtr>& local, const std::vector<ExprPtr>& global,
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
    MemberLoops loops = reductionLoopsOf(computation, whole.axisVars, true);
    std::set<std::string> open;
    for (const Axis& axis : computation.stage->axes) open.insert(axis.name);
    const loop::Store& init = *computation.init;
    const loop::Store& update = *computation.update;
    StmtPtr reduce = memberLoopNest(loops, name, 0, loops.reductions.size(), open, Defined(open.begin(), open.end()),
                                    [&](const std::set<std::string>&, const Defined&) -> StmtPtr {
                                      return std::make_shared<Store>(update.buffer, update.indices, update.value);
                                    });
    value = std::make_shared<Allocate>(
        computation.accumulator, computation.accumulatorType, std::vector<Dim>{}, MemoryScope::Registers,
        block({std::make_shared<Store>(init.buffer, init.indices, init.value), reduce,
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
StmtPtr NestScheduler::doubleBufferedCopies(const std::vector<const PlacedCache*>& caches, StmtPtr loop) {
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

// In the iterations of the loop at `loop` but the last, the copies of the next one's parts start (the
// last would copy only zeros, past the end).
StmtPtr NestScheduler::prefetchNext(const std::vector<const PlacedCache*>& caches, size_t loop, StmtPtr rest) {
  std::vector<StmtPtr> fills;
  ExprPtr next = arithmetic(BinaryOp::Add, var(root_loops_.loops[loop].var), i64(1));
  for (const PlacedCache* placed : caches) {
    EMMY_INTERNAL_ASSERT(placed->stageVar == root_loops_.loops[loop].var, "{} is double-buffered at another loop", placed->cache->name);
    std::vector<ExprPtr> base;
    for (const ExprPtr& index : placed->base) base.push_back(substitute(index, {{placed->stageVar, next}}));
    fills.push_back(fill(*placed, base, arithmetic(BinaryOp::Mod, next, i64(2)), true));
  }
  return block({std::make_shared<Guard>(compare(BinaryOp::Lt, next, loopEnd(loop)), block(fills)),
                std::make_shared<WaitForCopies>(1), rest});
}

// The shape of what a copy copies (or computes).
Shape NestScheduler::sourceShape(const PlacedCache& placed) const {
  if (placed.computes) return placed.computes->computation.stage->shape();
  if (const TensorParam* input = kernel_.findInput(placed.cache->source)) return input->shape;
  const Stage* stored = kernel_.findStage(placed.cache->source);  // by an earlier kernel
  EMMY_INTERNAL_ASSERT(stored != nullptr, "{} is not an input or a stage", placed.cache->source);
  return stored->shape();
}

// Elements a 16-byte read takes, where whole vectors tile the copy's rows (its pad aside); else 1.
int NestScheduler::readLanes(const PlacedCache& placed) {
  int lanes = 16 / dtypeBytes(placed.dtype);
  const std::vector<int64_t>& shape = placed.cache->shape;
  return lanes > 1 && !shape.empty() && shape.back() % lanes == 0 ? lanes : 1;
}

// How many consecutive elements one asynchronous copy takes: 16 bytes where the copy's rows (padded)
// and the footprint's are whole vectors, so that every vector starts aligned in shared memory.
int NestScheduler::copyLanes(const PlacedCache& placed) {
  int lanes = readLanes(placed);
  return placed.cache->pad % lanes == 0 ? lanes : 1;
}

}  // namespace emmy::tile
