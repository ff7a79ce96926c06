#include "ir/tile/default_policy.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/rewrite.h"
#include "ir/tensor/simplify.h"
#include "ir/tile/nest_parts.h"
#include "ir/tile/matrix_product.h"
#include "ir/tile/prefix_scan.h"
#include "support/text.h"

namespace emmy::tile {

using namespace tensor;

namespace {

// The block's threads when the loops spread over them have no constant length, and the fewest.
constexpr int64_t kRowThreads = 256, kWarp = 32;
const std::vector<int64_t> kThreadCandidates{32, 64, 128, 256, 512, 1024};
const std::vector<int64_t> kRowCandidates{1, 2, 4, 8, 16, 32};
// A contraction's tiles: kTile x kTile outputs per block, kRegister x kRegister per thread, slices of
// kSlice along the reduction.
constexpr int64_t kTile = 64, kRegister = 4, kSlice = 16;
// A block-level scan's elements a thread per tile: enough that the threads' log2(threads) steps over their
// totals cost less than their folds.
constexpr int64_t kScanItems = 8;
// A reduction over at most kSerialReduction elements (a pooling window, a short constant row) stays in
// its thread: spread over a warp's lanes, most of them would idle. So does one of up to
// kSerialCoalescedReduction elements (a convolution's channels and window) whose reads neighbouring
// threads make from neighbouring elements, where there are at least kSerialOutputs outputs to share out.
constexpr int64_t kSerialReduction = 32, kSerialCoalescedReduction = 4096, kSerialOutputs = 16384;

bool free(const ScheduledLoop& loop) { return !loop.binding && !loop.unrolled && !loop.vectorized; }

// out[..., i, j] = sum over k of lhs(..., i, k) * rhs(..., k, j), as Loop IR computes it.
struct Contraction {
  const loop::For* reduction;  // the loop over k
  ExprPtr lhs, rhs;            // lhs uses no j, rhs no i
};

class DefaultPolicy {
public:
  DefaultPolicy(loop::Program& program, const ScheduleModel& model, std::vector<ScheduleParam>& params)
      : program_(program), kernel_(program.source), model_(model), params_(params) {}

  ScheduleModel run() {
    for (const loop::LoopNest& nest : program_.kernels)
      if (!scheduleNames(kernel_, nest)) shape(nest);
    model_ = commit();
    for (const loop::LoopNest& nest : program_.kernels) fill(nest);
    for (const loop::LoopNest& nest : program_.kernels) indexBits(nest);
    ScheduleModel completed = commit();
    completed.notes = notes_;
    return completed;
  }

private:
  // ---- a whole schedule, for a nest no directive names ----

  void shape(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    const Stage& stage = *kernel_.findStage(root);
    if (onlineAttention(nest)) return;
    if (runningReduction(nest)) return;
    if (contraction(nest)) return;
    if (implicitProduct(nest)) return;
    std::vector<std::string> pure, reductions;
    for (const ScheduledLoop& loop : model_.stages.at(root).loops) (loop.reduction ? reductions : pure).push_back(loop.name);
    // An elementwise root, and the outputs stored beside it (their elements of its size).
    bool companions = std::all_of(nest.stages.begin(), nest.stages.end() - 1, [&](const std::string& name) { return kernel_.isOutput(name); });
    if (companions && !stage.reduction) {
      if (!pure.empty()) elementwise(root, pure, stage.dtype, /*vectorized=*/true);
      return;
    }
    if (!pure.empty() && reducedInThreads(nest)) {
      elementwise(root, pure, stage.dtype, /*vectorized=*/false);
      return;
    }
    shaped_.insert(nest.name);
    NestParts parts = parseNest(kernel_, nest);
    size_t rows = pure.size();
    for (const Member& member : parts.members)
      if (!folded(member.computation.stage->name)) rows = std::min(rows, member.depth);
    bool deeper = std::any_of(parts.members.begin(), parts.members.end(), [&](const Member& member) {
      return !folded(member.computation.stage->name) && member.depth > rows;
    });
    if (rows > 0) rowsLoop_[nest.name] = fuse(root, {pure.begin(), pure.begin() + rows});  // bound by fill()
    if (!deeper && pure.size() > rows + 1) fuse(root, {pure.begin() + rows, pure.end()});
    if (reductions.size() > 1) fuse(root, reductions);
    for (const Member& member : parts.members) {
      const std::string& name = member.computation.stage->name;
      if (folded(name)) continue;
      std::vector<std::string> loops;
      for (const ScheduledLoop& loop : model_.stages.at(name).loops)
        if (loop.reduction) loops.push_back(loop.name);
      if (loops.size() > 1) fuse(name, loops);
    }
  }

  // A member the root computes as its own reduction, or online in its reduction loops.
  bool folded(const std::string& stage) const {
    const StageSchedule& schedule = model_.stages.at(stage);
    return !schedule.epilogueOf.empty() || !schedule.onlineIn.empty();
  }

  // Does each thread best reduce its own element (kSerialReduction above)? For a nest of one stage, or
  // of a root and the reduction it is the epilogue of, whose reduction loops are free and constant.
  bool reducedInThreads(const loop::LoopNest& nest) const {
    const std::string& root = nest.stages.back();
    for (const std::string& member : nest.stages)
      if (member != root && model_.stages.at(member).epilogueOf != root) return false;
    int64_t elements = 1, outputs = 1;
    bool any = false;
    for (const ScheduledLoop& loop : model_.stages.at(root).loops) {
      if (loop.reduction && (!loop.extent || !free(loop))) return false;
      if (loop.reduction) any = true, elements *= *loop.extent;
      else outputs *= loop.extent.value_or(kSerialOutputs);
      if (elements > kSerialCoalescedReduction) return false;
    }
    if (!any) return false;
    if (elements <= kSerialReduction) return true;
    if (outputs < kSerialOutputs) return false;
    return std::all_of(nest.stages.begin(), nest.stages.end(),
                       [&](const std::string& member) { return coalescedReads(*kernel_.findStage(member)); });
  }

  // Does every read of `stage` move by one element, or not at all, along the stage's last axis (which
  // neighbouring threads take when its loops are fused and spread over the grid)?
  static bool coalescedReads(const Stage& stage) {
    if (stage.axes.empty()) return false;
    const std::string& along = stage.axes.back().name;
    bool coalesced = true;
    forEachNode(*stage.body, [&](const Expr& node) {
      const auto* load = node.as<Load>();
      if (!load) return;
      for (size_t d = 0; d < load->indices.size(); ++d) {
        std::optional<int64_t> step = coefficientOf(*load->indices[d], along);
        bool last = d + 1 == load->indices.size();
        if (!step || (*step != 0 && !(last && *step == 1))) coalesced = false;
      }
    });
    return coalesced;
  }

  // Every element on its own: one loop over all of them, shared out over the whole grid, each thread
  // taking 16-byte groups where the element type allows and `vectorized` asks (an element with a
  // reduction of its own is one at a time).
  void elementwise(const std::string& root, const std::vector<std::string>& pure, DType dtype, bool vectorized) {
    std::string all = fuse(root, pure);
    Directive threads = directive(DirectiveKind::Threads, root);
    threads.factors = {declare(root + "_threads", kThreadCandidates, kGridThreads)};
    add(threads);
    add(bind(root, all, {HardwareScope::Grid, 0}));
    int bytes = dtypeBytes(dtype);
    if (!vectorized || bytes < 2 || dtype == DType::Bool) return;
    int64_t width = kVectorGroupBytes / bytes;
    Directive vectorize = directive(DirectiveKind::Vectorize, root);
    vectorize.axes = {{all, {}}};
    vectorize.factors = {declare(root + "_vector", {1, width}, width)};
    add(vectorize);
  }

  // The width of a kernel's index arithmetic, where the schedule does not give it: 32 bits where the
  // launcher sees that every index fits, a param so that `emmy tune` may keep 64 for a shape.
  void indexBits(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    if (model_.stages.at(root).indexBits) return;
    Directive bits = directive(DirectiveKind::IndexBits, root);
    bits.factors = {declare(root + "_index_bits", {32, 64}, 32)};
    add(bits);
  }

  // The reduction of a nest of one stage that has one, or of a root and the reduction it is the epilogue
  // of; null for any other nest.
  const Stage* reductionOf(const loop::LoopNest& nest) const {
    const std::string& root = nest.stages.back();
    const std::string& epilogueOf = model_.stages.at(root).epilogueReduction;
    const Stage* reduction = kernel_.findStage(epilogueOf.empty() ? root : epilogueOf);
    if (!reduction->reduction || nest.stages.size() != (epilogueOf.empty() ? 1u : 2u)) return nullptr;
    return reduction;
  }

  // A running reduction (prefix_scan.h), and its epilogue, as a block-level scan: kScanItems elements a
  // thread per tile, and threads enough for a constant row up to kRowThreads; fill() binds the other
  // loops to blocks. False, writing nothing, for any other nest.
  bool runningReduction(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    const Stage& stage = *kernel_.findStage(root);
    const Stage* found = reductionOf(nest);
    if (!found) return false;
    const Stage& reduction = *found;
    for (size_t a = 0; a < stage.axes.size() && a < reduction.axes.size(); ++a) {
      if (!std::holds_alternative<PrefixReduction>(prefixReduction(reduction, reduction.axes[a].name))) continue;
      std::optional<int64_t> extent = stage.axes[a].extent.isConstant() ? std::optional(stage.axes[a].extent.factor) : std::nullopt;
      int64_t threads = extent ? std::clamp<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>((*extent + kScanItems - 1) / kScanItems, 1))),
                                                     kWarp, kRowThreads)
                               : kRowThreads;
      Directive scan = directive(DirectiveKind::Scan, root);
      scan.axes = {{stage.axes[a].name, {}}};
      scan.factors = {declare(root + "_scan_threads", kThreadCandidates, threads),
                      declare(root + "_scan_items", {1, 2, 4, 8, 16}, kScanItems)};
      if (std::optional<std::string> why = whyIllegal({scan})) {
        notes_.push_back(fmt::format("{}: not a block-level scan: {}", root, *why));
        return false;
      }
      add(scan);
      return true;
    }
    return false;
  }

  // A root whose sum computes a softmax online (nest_parts.h: attention's weighted sum of v), as the
  // stdlib's attend: a block takes BQ of the queries (the root's second-to-last axis) of one of the rest
  // (its other axes, fused on block.y) and EB of the features (its last axis), each thread one query and
  // 4 features, kept in registers; the keys (the sum's axis) go by in tiles of BL, and each tile of what
  // its reductions read from memory over them (the logits, v) is copied into shared memory a tile ahead. (Not the
  // stdlib attention's `compute scores at o.lo`: the default policy comes after the kernels are cut.)
  // Params `ROOT_queries`, `ROOT_keys` and `ROOT_features`. False, writing nothing, where the nest is
  // not of this shape or that is illegal.
  bool onlineAttention(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    bool online = std::any_of(nest.stages.begin(), nest.stages.end(),
                              [&](const std::string& member) { return model_.stages.at(member).onlineIn == root; });
    const std::string& summed = model_.stages.at(root).epilogueReduction;
    const Stage* sum = kernel_.findStage(summed.empty() ? root : summed);
    if (!online || !sum->reduction || sum->reduction->axes.size() != 1) return false;
    std::vector<std::string> pure;
    for (const ScheduledLoop& loop : model_.stages.at(root).loops)
      if (!loop.reduction) pure.push_back(loop.name);
    if (pure.size() < 2) return false;
    const std::string keys = sum->reduction->axes[0].name, queries = pure[pure.size() - 2], features = pure.back();
    std::vector<std::string> batch(pure.begin(), pure.end() - 2);
    // The tensors its reductions read from memory over the keys (Loop IR: inputs, and stages other kernels
    // compute; the stages inlined into them, p = exp(logits - m), read through).
    std::vector<std::string> read;
    std::set<std::string> alongKeys;  // those whose rows run along the keys (the logits)
    NestParts parts = parseNest(kernel_, nest);
    std::vector<const Computation*> reductions{&parts.root};
    for (const Member& member : parts.members) reductions.push_back(&member.computation);
    for (const Computation* reduction : reductions) {
      if (!reduction->update) continue;
      forEachNode(*reduction->update->value, [&](const Expr& node) {
        const auto* load = node.as<Load>();
        if (!load || (!kernel_.findInput(load->tensor) && !computedByANest(load->tensor))) return;
        auto overKeys = [&](const ExprPtr& index) {
          return std::any_of(reduction->reductionLoops.begin(), reduction->reductionLoops.end(),
                             [&](const loop::For* loop) { return mentionsAxis(*index, loop->var); });
        };
        if (!std::any_of(load->indices.begin(), load->indices.end(), overKeys)) return;
        if (std::find(read.begin(), read.end(), load->tensor) == read.end()) read.push_back(load->tensor);
        if (!load->indices.empty() && overKeys(load->indices.back())) alongKeys.insert(load->tensor);
      });
    }
    std::vector<Directive> directives;
    std::swap(directives, pending_);
    std::vector<std::string> order;
    if (!batch.empty()) {
      std::string fused = fuse(root, batch);
      add(bind(root, fused, {HardwareScope::Block, 1}));
      order.push_back(fused);
    }
    std::string queryBlock = fresh(root, queries + "_block"), query = fresh(root, queries + "_thread"),
                featureBlock = fresh(root, features + "_block"), featuresIn = fresh(root, features + "_in"),
                featureThread = fresh(root, features + "_thread"), feature = fresh(root, features + "_register"),
                keyTile = fresh(root, keys + "_tile"), key = fresh(root, keys + "_in");
    add(split(root, queries, declare(root + "_queries", {8, 16, 32}, 16), queryBlock, query));
    add(bind(root, queryBlock, {HardwareScope::Block, 0}));
    add(split(root, features, declare(root + "_features", {32, 64, 128}, 64), featureBlock, featuresIn));
    add(split(root, featuresIn, {kRegister, {}, ""}, featureThread, feature));
    add(split(root, keys, declare(root + "_keys", {16, 32, 64}, 32), keyTile, key));
    add(bind(root, query, {HardwareScope::Thread, 1}));
    add(bind(root, featureThread, {HardwareScope::Thread, 0}));
    Directive reorder = directive(DirectiveKind::Reorder, root);
    for (const std::string& loop : {queryBlock, featureBlock, keyTile, query, featureThread, key, feature}) order.push_back(loop);
    for (const std::string& loop : order) reorder.axes.push_back({loop, {}});
    add(reorder);
    add(cache(root, CacheMemory::Registers, root, featureBlock));
    // The features' registers read v by vectors (16 bytes of f32 from the shared tile: no bank
    // conflicts), or one by one where vectors are illegal.
    Directive registers = directive(DirectiveKind::Vectorize, root);
    registers.axes = {{feature, {}}};
    add(registers);
    std::swap(directives, pending_);
    if (whyIllegal(directives)) directives.back().kind = DirectiveKind::Unroll;
    if (std::optional<std::string> why = whyIllegal(directives)) {
      notes_.push_back(fmt::format("{}: not as attention: {}", root, *why));
      return false;
    }
    pending_.insert(pending_.end(), directives.begin(), directives.end());
    // Each tile of what it reads over the keys (the logits, v), where legal with the shape above.
    for (const std::string& tensor : read) {
      Directive copy = cache(tensor, CacheMemory::Shared, root, keyTile);
      std::string name = defaultCacheName(tensor, CacheMemory::Shared, [&](const std::string& taken) { return nameTaken(taken); });
      copy.results = {{name, {}}};
      Directive ahead = directive(DirectiveKind::DoubleBuffer, name);
      // A tile whose rows run along the keys is read down its columns by the rows of queries a warp
      // holds: rows a word longer put them in different banks.
      Directive pad = directive(DirectiveKind::Pad, name);
      pad.factors = {{std::max<int64_t>(1, 4 / dtypeBytes(dtypeOf(tensor))), {}, ""}};
      std::vector<Directive> copies{copy, ahead};
      if (alongKeys.count(tensor) && !whyIllegal({copy, ahead, pad})) copies.push_back(pad);
      if (whyIllegal(copies)) continue;
      usedCaches_.insert(name);
      for (Directive& d : copies) add(d);
    }
    return true;
  }

  DType dtypeOf(const std::string& tensor) const {
    if (const TensorParam* input = kernel_.findInput(tensor)) return input->dtype;
    return kernel_.findStage(tensor)->dtype;
  }

  // Is `stage` computed by a kernel (and not inlined into its readers)?
  bool computedByANest(const std::string& stage) const {
    return std::any_of(program_.kernels.begin(), program_.kernels.end(), [&](const loop::LoopNest& nest) {
      return std::find(nest.stages.begin(), nest.stages.end(), stage) != nest.stages.end();
    });
  }

  // The defaults of a block-level product's params (the candidates are the same but for the warp's rows).
  struct ProductShape {
    int64_t tileRows, tileColumns;
    std::vector<int64_t> warpRowCandidates;
    int64_t warpRows, stages;
  };

  // A block-level product of the loops `rows` and `columns` (axes, or loops fuse made) over `depth`: its
  // tiles on blocks (the loops `batch` fused on block.z), `depth` in slices of 16 (tensor cores) or 8,
  // `mma` of the inner loops in warp tiles of 64 columns; params `ROOT_tile_m`, `ROOT_tile_n`,
  // `ROOT_tile_k`, `ROOT_warp_m`, `ROOT_warp_n` and `ROOT_stages`.
  void tiledProduct(const std::string& root, const std::string& rows, const std::string& columns, const std::string& depth,
                    const std::vector<std::string>& batch, bool tensorCores, const ProductShape& shape) {
    std::string rowTile = fresh(root, rows + "_tile"), columnTile = fresh(root, columns + "_tile"),
                rowIn = fresh(root, rows + "_in"), columnIn = fresh(root, columns + "_in"),
                slice = fresh(root, depth + "_slice"), inSlice = fresh(root, depth + "_in");
    Directive tiles = tile(root, {rows, columns}, 0, {rowTile, columnTile, rowIn, columnIn});
    tiles.factors = {declare(root + "_tile_m", {64, 128}, shape.tileRows), declare(root + "_tile_n", {64, 128, 256}, shape.tileColumns)};
    add(tiles);
    if (!batch.empty()) add(bind(root, fuse(root, batch), {HardwareScope::Block, 2}));
    add(bind(root, rowTile, {HardwareScope::Block, 1}));
    add(bind(root, columnTile, {HardwareScope::Block, 0}));
    add(split(root, depth, tensorCores ? declare(root + "_tile_k", {16, 32}, 16) : declare(root + "_tile_k", {8, 16}, 8), slice,
              inSlice));
    Directive mma = directive(DirectiveKind::Mma, root);
    mma.axes = {{rowIn, {}}, {columnIn, {}}, {inSlice, {}}};
    mma.factors = {declare(root + "_warp_m", shape.warpRowCandidates, shape.warpRows), declare(root + "_warp_n", {32, 64}, 64),
                   declare(root + "_stages", {2, 3, 4}, shape.stages)};
    add(mma);
  }

  // A sum of products of two tensors read at other subscripts than a matrix's, such as a convolution's:
  // an implicit GEMM (matrix_product.h): blocks of 64 x 128 outputs in four 32 x 64 warp tiles, slices
  // of 16 (tensor cores) or 8 (CUDA cores) in a ring of three, as the stdlib's convolutions. Its columns are the
  // output's axes that only the operand reading its last axis reads, but those before the first row (an
  // image's n, which keeps the columns adjacent in memory); its rows those only the other reads; the rest
  // fused and bound to block.z; every reduction axis fused into its depth. False, writing nothing, where
  // the nest is not of this shape or the product is illegal.
  bool implicitProduct(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    const Stage& stage = *kernel_.findStage(root);
    const Stage* found = reductionOf(nest);
    if (!found || stage.axes.empty()) return false;
    const Stage& reduction = *found;
    ExprPtr mask;
    const Binary* product = summedProduct(reduction.body, &mask);
    if (!product) return false;
    const Load* lhs = productOperand(product->lhs);
    const Load* rhs = productOperand(product->rhs);
    if (!lhs || !rhs) return false;
    // The root's axes each operand reads (the reduction's pure axes are the root's, in order).
    auto reads = [&](const Load& load) {
      std::set<std::string> axes;
      for (size_t a = 0; a < stage.axes.size() && a < reduction.axes.size(); ++a)
        for (const ExprPtr& index : load.indices)
          forEachNode(*index, [&](const Expr& node) {
            if (const auto* axis = node.as<AxisVar>(); axis && axis->name == reduction.axes[a].name) axes.insert(stage.axes[a].name);
          });
      return axes;
    };
    std::set<std::string> lhsAxes = reads(*lhs), rhsAxes = reads(*rhs);
    const std::string& last = stage.axes.back().name;
    if (lhsAxes.count(last) == rhsAxes.count(last)) return false;
    const std::set<std::string>& columnAxes = rhsAxes.count(last) ? rhsAxes : lhsAxes;
    const std::set<std::string>& rowAxes = rhsAxes.count(last) ? lhsAxes : rhsAxes;
    std::vector<std::string> rows, columns, batch;
    for (const Axis& axis : stage.axes) {
      bool row = rowAxes.count(axis.name) && !columnAxes.count(axis.name);
      bool column = columnAxes.count(axis.name) && !rowAxes.count(axis.name) && !rows.empty();
      (row ? rows : column ? columns : batch).push_back(axis.name);
    }
    // A tile of mma.sync takes 16 rows and columns: a depthwise convolution (one output channel a
    // group) is better a reduction in each thread.
    auto fewer = [&](const std::vector<std::string>& axes) {
      int64_t constant = 1;
      for (const Axis& axis : stage.axes)
        if (std::count(axes.begin(), axes.end(), axis.name)) {
          if (!axis.extent.isConstant()) return false;
          constant *= axis.extent.factor;
        }
      return constant < kMmaRows;
    };
    if (rows.empty() || columns.empty() || fewer(rows) || fewer(columns)) return false;
    std::set<std::string> global;
    for (const TensorParam& input : kernel_.inputs) global.insert(input.name);
    for (const loop::Temporary& temporary : program_.temporaries) global.insert(temporary.name);
    auto reductionNames = [&](const std::vector<std::string>& axes) {
      std::set<std::string> names;
      for (size_t a = 0; a < stage.axes.size(); ++a)
        if (std::count(axes.begin(), axes.end(), stage.axes[a].name)) names.insert(reduction.axes[a].name);
      return names;
    };
    auto fed = productContraction(reduction, reductionNames(rows), reductionNames(columns), global);
    if (!std::holds_alternative<ProductContraction>(fed)) return false;
    bool tensorCores = onTensorCores(std::get<ProductContraction>(fed).dtype);
    std::vector<Directive> directives;
    std::swap(directives, pending_);
    Directive reorder = directive(DirectiveKind::Reorder, root);
    std::vector<std::string> order;
    for (const auto* group : {&batch, &rows, &columns})
      for (const std::string& axis : *group) {
        reorder.axes.push_back({axis, {}});
        order.push_back(axis);
      }
    std::vector<std::string> written;
    for (const Axis& axis : stage.axes) written.push_back(axis.name);
    if (order != written) add(reorder);
    std::string rowLoop = fuse(root, rows), columnLoop = fuse(root, columns);
    std::vector<std::string> reduced;
    for (const Axis& axis : reduction.reduction->axes) reduced.push_back(axis.name);
    std::string depth = fuse(root, reduced);
    tiledProduct(root, rowLoop, columnLoop, depth, batch, tensorCores, {64, 128, {16, 32, 64}, 32, 3});
    std::swap(directives, pending_);
    if (std::optional<std::string> why = whyIllegal(directives)) {
      notes_.push_back(fmt::format("{}: not an implicit GEMM: {}", root, *why));
      return false;
    }
    pending_.insert(pending_.end(), directives.begin(), directives.end());
    return true;
  }

  // A contraction and its epilogue, tiled (default_policy.h); false, writing nothing, for any other nest
  // or where the tiles do not fit.
  bool contraction(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    const Stage& stage = *kernel_.findStage(root);
    std::vector<const loop::For*> loops;
    const loop::Stmt* body = nest.body.get();
    while (const auto* loop = body->as<loop::For>()) {
      if (loop->stage != root || loops.size() == stage.axes.size()) break;
      loops.push_back(loop);
      body = loop->body.get();
    }
    if (loops.size() < 2 || loops.size() != stage.axes.size()) return false;
    std::optional<Contraction> found = findContraction(*body, loops);
    if (!found) return false;
    const std::string& reduction = found->reduction->stage;
    if (reduction != root && model_.stages.at(root).epilogueReduction != reduction) return false;
    const std::string i = loops[loops.size() - 2]->axis, j = loops.back()->axis, k = found->reduction->axis;
    std::vector<std::string> batch;
    for (size_t d = 0; d + 2 < loops.size(); ++d) batch.push_back(loops[d]->axis);
    if (matrixProduct(root, *kernel_.findStage(reduction), loops.size() - 2, i, j, k, batch)) return true;
    std::vector<Directive> directives;
    std::swap(directives, pending_);
    std::string iTile = fresh(root, i + "_tile"), jTile = fresh(root, j + "_tile"), iIn = fresh(root, i + "_in"),
                jIn = fresh(root, j + "_in");
    add(tile(root, {i, j}, kTile, {iTile, jTile, iIn, jIn}));
    if (!batch.empty()) add(bind(root, fuse(root, batch), {HardwareScope::Block, 2}));
    add(bind(root, iTile, {HardwareScope::Block, 1}));
    add(bind(root, jTile, {HardwareScope::Block, 0}));
    std::string iThread = fresh(root, i + "_thread"), jThread = fresh(root, j + "_thread"),
                iRegister = fresh(root, i + "_register"), jRegister = fresh(root, j + "_register");
    add(tile(root, {iIn, jIn}, kRegister, {iThread, jThread, iRegister, jRegister}));
    add(bind(root, iThread, {HardwareScope::Thread, 1}));
    add(bind(root, jThread, {HardwareScope::Thread, 0}));
    std::string slice = fresh(root, k + "_slice"), inSlice = fresh(root, k + "_in");
    add(split(root, k, {kSlice, {}, ""}, slice, inSlice));
    Directive reorder = directive(DirectiveKind::Reorder, root);
    for (const std::string& loop : {iThread, jThread, slice, inSlice, iRegister, jRegister}) reorder.axes.push_back({loop, {}});
    add(reorder);
    std::optional<std::string> lhs = operandTensor(found->lhs), rhs = operandTensor(found->rhs);
    for (const ExprPtr& operand : {found->lhs, found->rhs}) {
      std::optional<std::string> tensor = operandTensor(operand);
      if (!tensor || lhs == rhs) continue;
      Directive copy = cache(*tensor, CacheMemory::Shared, root, slice);
      std::string name = defaultCacheName(*tensor, CacheMemory::Shared, [&](const std::string& taken) { return nameTaken(taken); });
      usedCaches_.insert(name);
      copy.results = {{name, {}}};
      add(copy);
      // A copy whose rows run along k (`w[j, k]` of a linear layer) is read down its columns by the
      // threads of a warp: a row of kSlice + 1 elements puts them in different banks.
      if (readAlongRows(operand, found->reduction->var)) {
        Directive pad = directive(DirectiveKind::Pad, name);
        pad.factors = {{1, {}, ""}};
        add(pad);
      }
    }
    add(cache(root, CacheMemory::Registers, root, jThread));
    for (const std::string& loop : {inSlice, iRegister, jRegister}) {
      Directive unroll = directive(DirectiveKind::Unroll, root);
      unroll.axes = {{loop, {}}};
      add(unroll);
    }
    // Where the tiles do not fit the schedule (shared memory, a copy of no constant shape), the nest is
    // scheduled as rows instead.
    std::swap(directives, pending_);
    if (whyIllegal(directives)) return false;
    pending_.insert(pending_.end(), directives.begin(), directives.end());
    return true;
  }

  // The first error of the schedule with what is pending and then `directives` (one nest's), if any.
  std::optional<std::string> whyIllegal(const std::vector<Directive>& directives) const {
    Diagnostics errors;
    loop::Program trial = program_;
    trial.source.schedule.insert(trial.source.schedule.end(), pending_.begin(), pending_.end());
    trial.source.schedule.insert(trial.source.schedule.end(), directives.begin(), directives.end());
    checkSchedule(trial, errors);
    if (!errors.hasErrors()) return std::nullopt;
    std::string text = errors.render();
    return text.substr(0, text.find('\n'));
  }

  // A contraction as a block-level product (matrix_product.h): f16 or bf16 on the tensor cores, 128 x 256
  // outputs a block in eight 64 x 64 warp tiles, slices of 16 along k in a ring of four (48 KiB of shared
  // memory); f32 on the CUDA cores, 128 x 128 outputs a block in eight 32 x 64 warp tiles (8 x 8 results a
  // thread), slices of 8 in a ring of three. False, writing nothing, where the operands cannot be fed:
  // for 16-bit operands the schedule then says why.
  bool matrixProduct(const std::string& root, const Stage& reduction, size_t rowPosition, const std::string& i,
                     const std::string& j, const std::string& k, const std::vector<std::string>& batch) {
    std::set<std::string> global;
    for (const TensorParam& input : kernel_.inputs) global.insert(input.name);
    for (const loop::Temporary& temporary : program_.temporaries) global.insert(temporary.name);
    auto fed = productContraction(reduction, {reduction.axes[rowPosition].name}, {reduction.axes[rowPosition + 1].name}, global);
    // Other products (matrix_product.h) take mma by directive.
    if (auto* product = std::get_if<ProductContraction>(&fed); product && (!product->aPlain || !product->bPlain))
      fed = fmt::format("the last two subscripts of {} are not {} and one axis of {} (each used there only, unpadded)",
                        product->aPlain ? product->b->tensor : product->a->tensor, *product->k.begin(), reduction.name);
    if (auto* why = std::get_if<std::string>(&fed)) {
      if (sixteenBitOperands(reduction)) notes_.push_back(fmt::format("{}: not on the tensor cores: {}", root, *why));
      return false;
    }
    bool tensorCores = onTensorCores(std::get<ProductContraction>(fed).dtype);
    std::vector<Directive> directives;
    std::swap(directives, pending_);
    tiledProduct(root, i, j, k, batch, tensorCores,
            tensorCores ? ProductShape{128, 256, {32, 64}, 64, 4} : ProductShape{128, 128, {16, 32}, 32, 3});
    std::swap(directives, pending_);
    if (std::optional<std::string> why = whyIllegal(directives)) {
      if (tensorCores) notes_.push_back(fmt::format("{}: not on the tensor cores: {}", root, *why));
      return false;
    }
    pending_.insert(pending_.end(), directives.begin(), directives.end());
    return true;
  }

  // Are both factors of the reduction's product f16 or bf16 values (the products tensor cores are for)?
  static bool sixteenBitOperands(const Stage& reduction) {
    const auto* product = reduction.body->as<Binary>();
    if (!product || product->op != BinaryOp::Mul) return false;
    for (const ExprPtr& factor : {product->lhs, product->rhs}) {
      const Expr* value = factor->as<Cast>() ? factor->as<Cast>()->operand.get() : factor.get();
      if (value->dtype != DType::F16 && value->dtype != DType::BF16) return false;
    }
    return true;
  }

  // The one reduction loop below the root's loops `loops`, if its update is `acc + lhs * rhs` with lhs
  // free of j and rhs of i (either way round).
  std::optional<Contraction> findContraction(const loop::Stmt& body, const std::vector<const loop::For*>& loops) const {
    std::vector<const loop::For*> reductions;
    std::function<void(const loop::Stmt&)> find = [&](const loop::Stmt& stmt) {
      loop::dispatch(stmt, [&](const auto& node) {
        using Node = std::decay_t<decltype(node)>;
        if constexpr (std::is_same_v<Node, loop::For>) reductions.push_back(&node);
        if constexpr (std::is_same_v<Node, loop::Allocate>) find(*node.body);
        if constexpr (std::is_same_v<Node, loop::Block>)
          for (const loop::StmtPtr& inner : node.stmts) find(*inner);
      });
    };
    find(body);
    if (reductions.size() != 1) return std::nullopt;
    const loop::For& reduction = *reductions[0];
    const Stage* stage = kernel_.findStage(reduction.stage);
    const auto* update = reduction.body->as<loop::Store>();
    if (!stage || !stage->reduction || stage->reduction->op != ReduceOp::Sum || !update) return std::nullopt;
    const auto* sum = update->value->as<Binary>();
    const auto* product = sum ? sum->rhs->as<Binary>() : nullptr;
    if (!sum || sum->op != BinaryOp::Add || !product || product->op != BinaryOp::Mul) return std::nullopt;
    const auto* current = sum->lhs->as<Load>();
    if (!current || current->tensor != update->buffer) return std::nullopt;
    std::set<std::string> allowedLhs{reduction.var, loops[loops.size() - 2]->var}, allowedRhs{reduction.var, loops.back()->var};
    for (size_t d = 0; d + 2 < loops.size(); ++d) allowedLhs.insert(loops[d]->var), allowedRhs.insert(loops[d]->var);
    auto within = [](const ExprPtr& operand, const std::set<std::string>& allowed) {
      bool inside = true;
      forEachNode(*operand, [&](const Expr& node) {
        if (const auto* axis = node.as<AxisVar>()) inside = inside && allowed.count(axis->name);
        if (const auto* load = node.as<Load>(); load && load->indices.empty()) inside = false;  // a local
      });
      return inside;
    };
    ExprPtr lhs = product->lhs, rhs = product->rhs;
    if (!within(lhs, allowedLhs) || !within(rhs, allowedRhs)) std::swap(lhs, rhs);
    if (!within(lhs, allowedLhs) || !within(rhs, allowedRhs)) return std::nullopt;
    return Contraction{&reduction, lhs, rhs};
  }

  // The tensor an operand reads, when it is one read (perhaps converted): what `cache` can copy.
  static std::optional<std::string> operandTensor(const ExprPtr& operand) {
    const Expr* e = operand.get();
    if (const auto* cast = e->as<Cast>()) e = cast->operand.get();
    if (const auto* load = e->as<Load>()) return load->tensor;
    return std::nullopt;
  }

  // Does `operand` (a read, perhaps converted) step along its last dimension with `k`?
  static bool readAlongRows(const ExprPtr& operand, const std::string& k) {
    const Expr* e = operand.get();
    if (const auto* cast = e->as<Cast>()) e = cast->operand.get();
    const auto* load = e->as<Load>();
    const auto* last = load && !load->indices.empty() ? load->indices.back()->as<AxisVar>() : nullptr;
    return last && last->name == k;
  }

  // Is `name` a tensor, stage or cache of the kernel (a cache name the policy gives must be new)?
  bool nameTaken(const std::string& name) const {
    if (kernel_.findStage(name) || kernel_.findInput(name) || usedCaches_.count(name)) return true;
    return std::any_of(model_.caches.begin(), model_.caches.end(), [&](const CacheStage& c) { return c.name == name; });
  }

  // ---- what every nest's schedule lacks ----

  void fill(const loop::LoopNest& nest) {
    const std::string& root = nest.stages.back();
    const std::vector<ScheduledLoop>& loops = model_.stages.at(root).loops;
    if (std::any_of(loops.begin(), loops.end(), boundToGrid)) return;
    // The tensor cores take the innermost loops, and every other must be bound to blocks by the schedule.
    if (model_.stages.at(root).product) return;
    // A scan takes the innermost two, and the rows the others make go to blocks.
    if (model_.stages.at(root).scan) return scanRows(root);
    // (A reduction loop bound to blocks with `atomic` leaves the pure loops to place.) A row kernel the
    // policy shaped whose members leave no rows runs in one block.
    bool blocks = std::any_of(loops.begin(), loops.end(), [](const ScheduledLoop& l) { return !l.reduction && boundToBlocks(l); });
    auto rowsLoop = rowsLoop_.find(nest.name);
    size_t firstFree = rowsLoop == rowsLoop_.end() ? 0 : 1;
    if (!blocks && !shaped_.count(nest.name) && !loops.empty() && !loops[0].reduction && free(loops[0])) {
      std::set<int> taken;
      for (const ScheduledLoop& loop : loops)
        if (loop.binding && loop.binding->scope == HardwareScope::Block) taken.insert(loop.binding->dimension);
      int dimension = 0;
      while (taken.count(dimension)) ++dimension;
      add(bind(root, loops[0].name, {HardwareScope::Block, dimension}));
      firstFree = 1;
    }
    std::array<int64_t, 3> threads{0, 0, 0};
    std::optional<Number> lanesWritten;  // how the schedule wrote the lanes' extent (LANES, a param chosen at launch)
    for (const std::string& stage : nest.stages)
      for (const ScheduledLoop& loop : model_.stages.at(stage).loops)
        if (boundToThreads(loop)) {
          int dimension = loop.binding->scope == HardwareScope::Warp ? 0 : loop.binding->dimension;
          threads[dimension] = *loop.extent;
          if (dimension == 0 && loop.written && !loop.written->param.empty()) lanesWritten = loop.written;
        }
    int64_t others = std::max<int64_t>(threads[1], 1) * std::max<int64_t>(threads[2], 1);
    bool rootThreads = std::any_of(loops.begin(), loops.end(), boundToThreads);
    // The loops to spread over the lanes (thread.x), stage by stage.
    std::vector<std::pair<std::string, const ScheduledLoop*>> spread;
    std::optional<size_t> laneAt;
    if (!rootThreads)
      for (size_t k = loops.size(); k-- > firstFree;)
        if (!loops[k].reduction && free(loops[k])) {
          laneAt = k;
          spread.push_back({root, &loops[k]});
          break;
        }
    // A root that is a reduction over everything its blocks leave is combined across its threads.
    bool pureLeft = std::any_of(loops.begin() + firstFree, loops.end(),
                                [](const ScheduledLoop& l) { return !l.reduction && !boundToBlocks(l); });
    if (!rootThreads && !laneAt && !pureLeft)
      if (const ScheduledLoop* reduction = reductionToSpread(root)) spread.push_back({root, reduction});
    NestParts parts = parseNest(kernel_, nest);
    // A stage computed into a copy element by element (compute S at R.a) takes one thread an element: its
    // reductions are not spread.
    auto computedWhole = [&](const std::string& stage) {
      return std::any_of(parts.wholes.begin(), parts.wholes.end(),
                         [&](const WholeMember& whole) { return whole.computation.stage->name == stage; });
    };
    for (const std::string& member : nest.stages)
      if (member != root && !folded(member) && !computedWhole(member) && !memberInsideLanes(root, member, loops, laneAt, parts))
        if (const ScheduledLoop* reduction = reductionToSpread(member)) spread.push_back({member, reduction});
    if (spread.empty()) {
      if (rowsLoop != rowsLoop_.end()) add(bind(root, rowsLoop->second, {HardwareScope::Block, 0}));
      return;
    }
    Number lanes = lanesWritten ? Number{threads[0], {}, lanesWritten->param, lanesWritten->atLaunch} : Number{threads[0], {}, ""};
    std::optional<Number> rowsPerBlock;
    Number vector{1, {}, ""};
    // The policy's own row kernel: it chooses the lanes, the vectors and the copies.
    bool ownRows = shaped_.count(nest.name) && threads[0] == 0;
    if (ownRows) vector = rowVector(root, spread);
    if (threads[0] == 0) {
      int64_t longest = 0;
      bool constant = true;
      for (const auto& [stage, loop] : spread) {
        constant = constant && loop->extent.has_value();
        longest = std::max(longest, loop->extent.value_or(0));
      }
      longest = (longest + vector.value - 1) / vector.value;
      int64_t fewest = constant ? std::clamp<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(longest, 1))),
                                                      kWarp, kRowThreads)
                                : kRowThreads;
      lanes = declare(root + "_threads", kThreadCandidates, fewest);
      // Short rows: several to a block (along thread.y), so that a block has kRowThreads threads.
      if (rowsLoop != rowsLoop_.end() && fewest < kRowThreads) {
        rowsPerBlock = declare(root + "_rows", kRowCandidates, kRowThreads / fewest);
        if (lanes.value * rowsPerBlock->value > kMaxThreadsPerBlock)
          throw UsageError(fmt::format("-D {}={} and {}={}: blocks of {} threads, more than the {} a block may have",
                                       lanes.param, lanes.value, rowsPerBlock->param, rowsPerBlock->value,
                                       lanes.value * rowsPerBlock->value, kMaxThreadsPerBlock));
      }
    }
    if (rowsLoop != rowsLoop_.end()) placeRows(root, rowsLoop->second, rowsPerBlock);
    if (lanes.value * others > kMaxThreadsPerBlock) return;
    for (const auto& [stage, loop] : spread) spreadOverLanes(stage, *loop, lanes, vector);
    if (ownRows && !rowsPerBlock && rowsLoop != rowsLoop_.end())
      copyRows(root, rowsLoop->second, parts);
  }

  // The elements of a row a lane takes at a time, read and written 16 bytes at a time (`vectorize`), in
  // the loops of a row kernel the policy shaped: the root's lane loop and its members' reductions, each
  // over one axis along which the stage reads memory element after element (param ROOT_vector; 1 for
  // rows of other loops or of elements of 1 byte).
  Number rowVector(const std::string& root, const std::vector<std::pair<std::string, const ScheduledLoop*>>& spread) {
    DType dtype = kernel_.findStage(root)->dtype;
    int bytes = dtypeBytes(dtype);
    bool along = bytes >= 2 && dtype != DType::Bool;
    for (const auto& [stage, loop] : spread) {
      std::string axis = loop->coefficients.size() == 1 && loop->coefficients.begin()->second == 1 && !loop->fused
                             ? loop->coefficients.begin()->first
                             : "";
      along = along && !axis.empty() && readsAlong(*kernel_.findStage(stage), axis);
    }
    if (!along) return {1, {}, ""};
    return declare(root + "_vector", {1, 2, 4, 8}, std::min<int64_t>(8, kVectorGroupBytes / bytes));
  }

  // Does `stage` read some tensor element after element along `axis` (its last subscript moves by one)?
  static bool readsAlong(const Stage& stage, const std::string& axis) {
    bool found = false;
    forEachNode(*stage.body, [&](const Expr& node) {
      const auto* load = node.as<Load>();
      std::optional<int64_t> step = load && !load->indices.empty() ? coefficientOf(*load->indices.back(), axis) : std::nullopt;
      found = found || (step && *step == 1);
    });
    return found;
  }

  // A copy in shared memory of the row of each input that more than one pass over the rows reads (the
  // members' and the root's), where legal: rows that fit are read from memory once (sized at launch;
  // longer ones are read by each pass).
  void copyRows(const std::string& root, const std::string& rows, const NestParts& parts) {
    for (const TensorParam& input : kernel_.inputs) {
      int passes = 0;
      for (const Member& member : parts.members)
        if (!folded(member.computation.stage->name) && reads(member.computation, input.name)) ++passes;
      for (const Computation& companion : parts.companions) passes += reads(companion, input.name);
      passes += reads(parts.root, input.name);
      if (passes < 2) continue;
      Directive copy = cache(input.name, CacheMemory::Shared, root, rows);
      std::string name = defaultCacheName(input.name, CacheMemory::Shared, [&](const std::string& taken) { return nameTaken(taken); });
      copy.results = {{name, {}}};
      if (whyIllegal({copy})) continue;
      usedCaches_.insert(name);
      add(copy);
    }
  }

  // The loops of a block-level scan's root other than its two, free ones fused into one loop over the
  // rows (after the ones bound to blocks, the scan's two last) and bound to blocks along the first free
  // dimension. Where the schedule put one of them elsewhere (a thread, unrolled), no row placement is
  // legal: the scan's own check says why.
  void scanRows(const std::string& root) {
    const StageSchedule& schedule = model_.stages.at(root);
    std::vector<std::string> order, rows;
    std::set<int> taken;
    for (const ScheduledLoop& loop : schedule.loops) {
      if (loop.name == schedule.scan->axis || loop.name == schedule.scan->k) continue;
      if (!free(loop) && (!boundToBlocks(loop) || boundToGrid(loop))) return;
      if (loop.binding) taken.insert(loop.binding->dimension);
      (free(loop) ? rows : order).push_back(loop.name);
    }
    if (rows.empty()) return;
    order.insert(order.end(), rows.begin(), rows.end());
    order.push_back(schedule.scan->axis);
    order.push_back(schedule.scan->k);
    bool inOrder = true;
    for (size_t k = 0; k < order.size(); ++k) inOrder = inOrder && schedule.loops[k].name == order[k];
    if (!inOrder) {
      Directive reorder = directive(DirectiveKind::Reorder, root);
      for (const std::string& loop : order) reorder.axes.push_back({loop, {}});
      add(reorder);
    }
    int dimension = 0;
    while (taken.count(dimension)) ++dimension;
    add(bind(root, fuse(root, rows), {HardwareScope::Block, dimension}));
  }

  // The rows of a row kernel: one to a block, or `perBlock` to a block along thread.y.
  void placeRows(const std::string& root, const std::string& rows, const std::optional<Number>& perBlock) {
    if (!perBlock) {
      add(bind(root, rows, {HardwareScope::Block, 0}));
      return;
    }
    std::string blocks = fresh(root, rows + "_block"), row = fresh(root, rows + "_row");
    add(split(root, rows, *perBlock, blocks, row));
    add(bind(root, blocks, {HardwareScope::Block, 0}));
    add(bind(root, row, {HardwareScope::Thread, 1}));
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
    size_t depth = kernel_.findStage(member)->axes.size();
    const std::vector<Axis>& rootAxes = kernel_.findStage(root)->axes;
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

  // The innermost free reduction loop of `stage`, unless one of its reduction loops is bound.
  const ScheduledLoop* reductionToSpread(const std::string& stage) const {
    const std::vector<ScheduledLoop>& loops = model_.stages.at(stage).loops;
    if (std::any_of(loops.begin(), loops.end(), [](const ScheduledLoop& l) { return l.reduction && l.binding; })) return nullptr;
    for (size_t k = loops.size(); k-- > 0;)
      if (loops[k].reduction && free(loops[k])) return &loops[k];
    return nullptr;
  }

  // `loop` of `stage` over `lanes` threads along x: split, the lanes outside the steps; bound directly
  // when it has exactly the lanes a schedule's own loops bound. With a `vector` of more than one element,
  // each lane takes that many consecutive elements at a time (vectorized).
  void spreadOverLanes(const std::string& stage, const ScheduledLoop& loop, const Number& lanes, const Number& vector) {
    if (lanes.param.empty() && loop.extent == lanes.value && vector.value == 1) {
      add(bind(stage, loop.name, {HardwareScope::Thread, 0}));
      return;
    }
    std::string grouped = loop.name, element;
    if (vector.value > 1) {
      grouped = fresh(stage, loop.name + "_vector"), element = fresh(stage, loop.name + "_element");
      add(split(stage, loop.name, vector, grouped, element));
    }
    std::string step = fresh(stage, loop.name + "_step"), lane = fresh(stage, loop.name + "_lane");
    add(split(stage, grouped, lanes, step, lane));
    Directive reorder = directive(DirectiveKind::Reorder, stage);
    reorder.axes = {{lane, {}}, {step, {}}};
    if (!element.empty()) reorder.axes.push_back({element, {}});
    add(reorder);
    add(bind(stage, lane, {HardwareScope::Thread, 0}));
    if (element.empty()) return;
    Directive vectorize = directive(DirectiveKind::Vectorize, stage);
    vectorize.axes = {{element, {}}};
    add(vectorize);
  }

  // ---- directives ----

  // `fuse` of `loops` (adjacent, in order) into one, pairwise: the fused loop's name.
  std::string fuse(const std::string& stage, const std::vector<std::string>& loops) {
    std::string fused = loops[0];
    for (size_t k = 1; k < loops.size(); ++k) {
      Directive d = directive(DirectiveKind::Fuse, stage);
      d.axes = {{fused, {}}, {loops[k], {}}};
      fused = fresh(stage, fused + "_" + loops[k]);
      d.results = {{fused, {}}};
      add(d);
    }
    return fused;
  }

  static Directive split(const std::string& stage, const std::string& loop, const Number& factor, const std::string& outer,
                         const std::string& inner) {
    Directive d = directive(DirectiveKind::Split, stage);
    d.axes = {{loop, {}}};
    d.factors = {factor};
    d.results = {{outer, {}}, {inner, {}}};
    return d;
  }

  static Directive tile(const std::string& stage, const std::vector<std::string>& axes, int64_t factor,
                        const std::vector<std::string>& results) {
    Directive d = directive(DirectiveKind::Tile, stage);
    for (const std::string& axis : axes) d.axes.push_back({axis, {}});
    d.factors = {{factor, {}, ""}, {factor, {}, ""}};
    for (const std::string& result : results) d.results.push_back({result, {}});
    return d;
  }

  static Directive cache(const std::string& source, CacheMemory memory, const std::string& stage, const std::string& loop) {
    Directive d = directive(DirectiveKind::Cache, source);
    d.memory = memory;
    d.atStage = {stage, {}};
    d.atAxis = {loop, {}};
    return d;
  }

  static Directive bind(const std::string& stage, const std::string& loop, HardwareIndex target) {
    Directive d = directive(DirectiveKind::Bind, stage);
    d.axes = {{loop, {}}};
    d.target = target;
    return d;
  }

  static Directive directive(DirectiveKind kind, const std::string& stage) {
    Directive d;
    d.kind = kind;
    d.stage = {stage, {}};
    d.byDefault = true;
    return d;
  }

  void add(Directive d) { pending_.push_back(std::move(d)); }

  // A loop name new to `stage`.
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

  // A param of the policy's: its value (-D's, else `value`) under a name no other param has.
  Number declare(const std::string& base, std::vector<int64_t> candidates, int64_t value) {
    auto taken = [&](const std::string& name) {
      return std::any_of(params_.begin(), params_.end(), [&](const ScheduleParam& p) { return p.name == name; });
    };
    std::string name = base;
    for (int k = 1; taken(name); ++k) name = fmt::format("{}_{}", base, k);
    params_.push_back({name, candidates, value});
    if (auto given = kernel_.paramValues.find(name); given != kernel_.paramValues.end()) {
      if (std::find(candidates.begin(), candidates.end(), given->second) == candidates.end()) {
        std::vector<std::string> texts;
        for (int64_t candidate : candidates) texts.push_back(std::to_string(candidate));
        throw UsageError(fmt::format("-D {}={} is not one of the candidates [{}] of param '{}' of the default schedule of {}",
                                     name, given->second, join(texts, ", "), name, kernel_.instanceName()));
      }
      value = given->second;
    }
    return {value, {}, name};
  }

  // The schedule with the pending directives, checked.
  ScheduleModel commit() {
    program_.source.schedule.insert(program_.source.schedule.end(), pending_.begin(), pending_.end());
    pending_.clear();
    Diagnostics errors;
    ScheduleModel model = checkSchedule(program_, errors);
    EMMY_INTERNAL_ASSERT(!errors.hasErrors(), "the default policy wrote illegal directives:\n{}", errors.render());
    return model;
  }

  loop::Program& program_;
  const Kernel& kernel_;
  ScheduleModel model_;
  std::vector<ScheduleParam>& params_;
  std::vector<Directive> pending_;
  std::set<std::string> shaped_;                    // nests shape() scheduled as rows
  std::map<std::string, std::string> rowsLoop_;     // of those with rows: their fused loop, by nest
  std::set<std::string> used_;    // loop names given, as stage.loop
  std::set<std::string> usedCaches_;  // cache names given
  std::vector<std::string> notes_;    // why a contraction is not on the tensor cores
};

}  // namespace

ScheduleModel completeSchedule(loop::Program& program, const ScheduleModel& model, std::vector<ScheduleParam>& params) {
  return DefaultPolicy(program, model, params).run();
}

}  // namespace emmy::tile
