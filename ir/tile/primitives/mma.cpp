// mma (matrix_product.h): the check of which loops of a contraction run as a block-level product (on the
// tensor cores for f16 and bf16, on the CUDA cores for f32) and of the tiles' shapes, and the Tile IR
// MatrixProduct that replaces those loops.
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/schedule_checker.h"
#include "ir/tile/matrix_product.h"

namespace emmy::tile {

namespace {

// The axis a loop moves with coefficient 1 and alone, or "".
std::string onlyAxis(const ScheduledLoop& loop) {
  if (loop.fused || loop.coefficients.size() != 1 || loop.coefficients.begin()->second != 1) return "";
  return loop.coefficients.begin()->first;
}

// What a loop of the product steps through one element at a time: an axis, or a loop `fuse` made (the
// loop itself, or the one it is the inner part of a split of); "" else.
std::string productAxis(const StageSchedule& stage, const ScheduledLoop& loop) {
  if (std::string axis = onlyAxis(loop); !axis.empty()) return axis;
  std::string parent = loop.name;
  for (const LoopDerivation& derivation : stage.derivations)
    if (derivation.factor > 0 && derivation.to[1] == loop.name) parent = derivation.from[0];
  for (const LoopDerivation& derivation : stage.derivations)
    if (derivation.factor == 0 && derivation.to[0] == parent) return parent;
  return "";
}

// The axes of a root's loops: its own, and the reduction axes of the stage whose sum it computes.
std::set<std::string> rootAxes(const Stage& root, const Stage& reduction) {
  std::set<std::string> axes;
  for (const Axis& axis : root.axes) axes.insert(axis.name);
  if (reduction.reduction)
    for (const Axis& axis : reduction.reduction->axes) axes.insert(axis.name);
  return axes;
}

// The axes of `reduction` at the places of `rootAxes` among the root's: a root that applies its
// expression to a reduction has the reduction's pure axes, in order, under its own names.
std::set<std::string> reductionAxes(const Stage& root, const Stage& reduction, const std::set<std::string>& rootAxes) {
  if (&root == &reduction) return rootAxes;
  std::set<std::string> axes;
  for (size_t a = 0; a < root.axes.size(); ++a)
    if (rootAxes.count(root.axes[a].name)) axes.insert(a < reduction.axes.size() ? reduction.axes[a].name : root.axes[a].name);
  for (const std::string& axis : rootAxes)
    if (reduction.reduction)
      for (const Axis& reduced : reduction.reduction->axes)
        if (reduced.name == axis) axes.insert(axis);
  return axes;
}

std::string listed(const std::set<std::string>& axes) {
  std::string text;
  for (const std::string& axis : axes) text += (text.empty() ? "" : ", ") + axis;
  return text;
}

constexpr int64_t kMaxStages = 4;
constexpr int64_t kMaxWarps = 32;

}  // namespace

// ---- checking ----

std::set<std::string> ScheduleChecker::globalTensors() const {
  std::set<std::string> global;
  for (const TensorParam& input : kernel_.inputs) global.insert(input.name);
  for (const loop::Temporary& temporary : program_.temporaries) global.insert(temporary.name);
  return global;
}

void ScheduleChecker::mma(const Directive& d) {
  StageSchedule* stage = findStage(d.stage);
  if (!stage) return;
  if (stage->product) {
    diagnostics_.error(d.loc, fmt::format("{} already runs as a block-level product (at line {})", stage->name, stage->product->loc.line));
    return;
  }
  const ScheduledLoop* loops[3];
  for (int l = 0; l < 3; ++l) {
    std::optional<size_t> at = findLoop(*stage, d.axes[l]);
    if (!at) return;
    loops[l] = &stage->loops[*at];
    if (!unmarked(*stage, *loops[l], d, d.axes[l])) return;
    for (int other = 0; other < l; ++other)
      if (loops[other] == loops[l]) {
        diagnostics_.error(d.axes[l].loc, fmt::format("mma names {}.{} twice", stage->name, loops[l]->name));
        return;
      }
  }
  const char* roles[3] = {"rows (m)", "columns (n)", "reduction slice (k)"};
  // The contraction: the stage's own reduction, or the one a root applies its expression to (whose axes
  // are the root's, in order).
  const Stage* reduction = kernel_.findStage(stage->epilogueReduction.empty() ? stage->name : stage->epilogueReduction);
  const Stage* root = kernel_.findStage(stage->name);
  std::string axes[3];
  std::set<std::string> covered[3];
  for (int l = 0; l < 3; ++l) {
    axes[l] = productAxis(*stage, *loops[l]);
    bool wantReduction = l == 2;
    if (axes[l].empty() || loops[l]->reduction != wantReduction || !loops[l]->extent) {
      diagnostics_.error(d.axes[l].loc,
                         fmt::format("mma's {} loop must be a {} loop of constant extent that steps one {} at a time (an "
                                     "axis, or a loop that fuse made, or the inner loop of a split of one); {}.{} is not "
                                     "(loops of {}: {})", roles[l], wantReduction ? "reduction" : "pure",
                                     wantReduction ? "reduced element" : "output element", stage->name, loops[l]->name,
                                     stage->name, loopNames(stage->loops)));
      return;
    }
    std::map<std::string, ExprPtr> under = axesUnder(stage->derivations, axes[l], nullptr, nullptr, rootAxes(*root, *reduction));
    if (under.empty()) {
      diagnostics_.error(d.axes[l].loc, fmt::format("{}.{} fuses part of an axis (split before the fuse), and mma's {} loop "
                                                    "must run over whole axes", stage->name, axes[l], roles[l]));
      return;
    }
    for (const auto& [axis, _] : under) covered[l].insert(axis);
  }
  auto fed = productContraction(*reduction, reductionAxes(*root, *reduction, covered[0]),
                                reductionAxes(*root, *reduction, covered[1]), globalTensors());
  if (auto* why = std::get_if<std::string>(&fed)) {
    diagnostics_.error(d.loc, fmt::format("{} cannot run as a block-level product: {}", stage->name, *why));
    return;
  }
  const ProductContraction& contraction = std::get<ProductContraction>(fed);
  if (reductionAxes(*root, *reduction, covered[2]) != contraction.k) {
    diagnostics_.error(d.axes[2].loc, fmt::format("{}.{} runs over {}, and the product's depth is all of {}'s reduction "
                                                  "axes ({}): fuse them into one loop", stage->name, loops[2]->name,
                                                  listed(covered[2]), reduction->name, listed(contraction.k)));
    return;
  }
  int64_t blockRows = *loops[0]->extent, blockCols = *loops[1]->extent, depth = *loops[2]->extent;
  int64_t warpRows = d.factors[0].value, warpCols = d.factors[1].value, stages = d.factors[2].value;
  // The tensor cores take fragments of 16 x 16 (A) and 16 x 16 (B, two n8 tiles) per 16 of k; the CUDA
  // cores kLaneRows x kLaneCols lanes of 4 x 4 groups, k 8 at a time where a copy transposes.
  bool tensorCores = onTensorCores(contraction.dtype);
  int64_t rowUnit = tensorCores ? kMmaRows : kLaneRows * kLaneGroup;
  int64_t colUnit = tensorCores ? 2 * kMmaCols : kLaneCols * kLaneGroup;
  int64_t depthUnit = tensorCores ? kMmaDepth : kTransposeDepth;
  // A transposed f32 operand's shared rows get kLaneGroup more elements (its copies' bank conflicts).
  int64_t paddedRows = blockRows + (!tensorCores && contraction.aKContiguous ? kLaneGroup : 0);
  int64_t paddedCols = blockCols + (!tensorCores && contraction.bKContiguous ? kLaneGroup : 0);
  std::string shapes = fmt::format(
      "for {} operands, warp tiles WM x WN with WM a multiple of {} and WN of {} that divide the block's {} x {} outputs, "
      "at most {} warps and {} accumulators a thread; a slice of k a multiple of {}; 2 to {} stages of shared memory "
      "within {} bytes",
      dtypeName(contraction.dtype), rowUnit, colUnit, blockRows, blockCols, kMaxWarps, kMaxRegisterElements, depthUnit,
      kMaxStages, kStaticSharedMemoryBytes);
  auto refuse = [&](const SourceLoc& loc, const std::string& why) {
    diagnostics_.error(loc, fmt::format("mma {}: {} (legal: {})", stage->name, why, shapes));
  };
  if (warpRows < rowUnit || warpRows % rowUnit != 0 || blockRows % warpRows != 0)
    return refuse(d.factors[0].loc, fmt::format("a warp tile of {} rows does not fit the block's {}", warpRows, blockRows));
  if (warpCols < colUnit || warpCols % colUnit != 0 || blockCols % warpCols != 0)
    return refuse(d.factors[1].loc, fmt::format("a warp tile of {} columns does not fit the block's {}", warpCols, blockCols));
  if (depth % depthUnit != 0)
    return refuse(d.axes[2].loc, fmt::format("{}.{} has {} iterations, not a multiple of {}", stage->name, loops[2]->name,
                                             depth, depthUnit));
  if (stages < 2 || stages > kMaxStages) return refuse(d.factors[2].loc, fmt::format("{} stages", stages));
  int64_t warps = (blockRows / warpRows) * (blockCols / warpCols);
  if (warps > kMaxWarps) return refuse(d.loc, fmt::format("{} warps", warps));
  if (warpRows * warpCols / 32 > kMaxRegisterElements)
    return refuse(d.loc, fmt::format("{} accumulators a thread", warpRows * warpCols / 32));
  int64_t bytes = (paddedRows + paddedCols) * depth * dtypeBytes(contraction.dtype) * stages;
  if (bytes > kStaticSharedMemoryBytes) return refuse(d.loc, fmt::format("{} bytes of shared memory", bytes));
  stage->product = ProductTile{loops[0]->name, loops[1]->name, loops[2]->name, axes[0], axes[1], axes[2],
                                      warpRows, warpCols, stages, d.loc};
}

// ---- applying ----

// The loops `mma` takes are the root's innermost: before them only loops bound to blocks, and among
// them at most one more, serial, over the rest of k (the slices).
void NestScheduler::placeMatrixProduct() {
  const std::optional<ProductTile>& tile = model_.stages.at(root_->name).product;
  if (!tile) return;
  const std::vector<FinalLoop>& loops = root_loops_.loops;
  auto refuse = [&](const std::string& why) { cannot(tile->loc, fmt::format("mma {}: {}", root_->name, why)); };
  refuseOtherWork(refuse, "product", "the operands");
  std::optional<size_t> first;
  int sliceLoops = 0;
  for (size_t k = 0; k < loops.size(); ++k) {
    const ScheduledLoop& loop = *loops[k].scheduled;
    bool taken = loop.name == tile->rowLoop || loop.name == tile->colLoop || loop.name == tile->depthLoop;
    bool slices = loop.reduction && !taken;
    if (taken || slices) {
      if (loop.binding || loop.unrolled || loop.vectorized)
        refuse(fmt::format("{}.{} runs in the block-level product, and cannot be bound, unrolled or vectorized too", root_->name, loop.name));
      if (slices && ++sliceLoops > 1) refuse(fmt::format("{} is split into more than the slices and {}", tile->k, tile->depthLoop));
      bool splitFromDepth = false;
      for (const LoopDerivation& derivation : model_.stages.at(root_->name).derivations)
        splitFromDepth = splitFromDepth || (derivation.factor > 0 && derivation.from[0] == tile->k &&
                                            derivation.to == std::vector<std::string>{loop.name, tile->depthLoop});
      if (slices && !splitFromDepth)
        refuse(fmt::format("{}.{} must be the loop over the slices of {}, split from it with {}", root_->name, loop.name,
                           tile->k, tile->depthLoop));
      if (!first) first = k;
      continue;
    }
    if (first || !boundToBlocks(loop) || boundToGrid(loop))
      refuse(fmt::format("{}.{} must be bound to a block and outside the loops of the product ({}, {}, {})", root_->name,
                         loop.name, tile->rowLoop, tile->colLoop, tile->depthLoop));
  }
  if (loops.back().scheduled->name != tile->depthLoop)
    refuse(fmt::format("{}.{} must be the innermost loop", root_->name, tile->depthLoop));
  productPosition_ = *first;
  const ScheduledLoop* rows = nullptr;
  const ScheduledLoop* cols = nullptr;
  for (const FinalLoop& loop : loops) {
    if (loop.scheduled->name == tile->rowLoop) rows = loop.scheduled;
    if (loop.scheduled->name == tile->colLoop) cols = loop.scheduled;
  }
  threads_ = {32, static_cast<int>(*cols->extent / tile->warpCols), static_cast<int>(*rows->extent / tile->warpRows)};
}

StmtPtr NestScheduler::matrixProduct() {
  const ProductTile& tile = *model_.stages.at(root_->name).product;
  std::map<std::string, const FinalLoop*> byName;
  for (const FinalLoop& loop : root_loops_.loops) byName[loop.scheduled->name] = &loop;
  const FinalLoop& rows = *byName.at(tile.rowLoop);
  const FinalLoop& cols = *byName.at(tile.colLoop);
  const FinalLoop& depth = *byName.at(tile.depthLoop);
  // The operands as Loop IR reads them: acc + f32(x) * f32(y) (or where(mask, f32(x) * f32(y), 0)), in the
  // order of the Tensor IR product.
  const auto* sum = parts_.root.update->value->as<Binary>();
  ExprPtr mask;
  const Binary* product = sum ? summedProduct(sum->rhs, &mask) : nullptr;
  EMMY_INTERNAL_ASSERT(product, "the update of {} is not acc + x * y", root_->name);
  const Stage& root = *kernel_.findStage(root_->name);
  const StageSchedule& schedule = model_.stages.at(root_->name);
  // Each of m, n and k as one variable: an axis's own, or a fused loop's, whose axes' values over it the
  // node carries.
  std::set<std::string> covered[3];
  std::vector<std::pair<std::string, ExprPtr>> fusedAxes[3];
  auto productVar = [&](const std::string& axis, int role) {
    bool fused = !root_loops_.axisVars.count(axis);
    std::string name = fused ? uniqueVar(axis) : root_loops_.axisVars.at(axis);
    for (const auto& [under, value] : axesUnder(schedule.derivations, axis, var(name), &root_loops_.extents, rootAxes(root, *contraction_))) {
      covered[role].insert(under);
      if (fused) fusedAxes[role].push_back({root_loops_.axisVars.at(under), value});
    }
    return name;
  };
  std::string m = productVar(tile.m, 0), n = productVar(tile.n, 1), k = productVar(tile.k, 2);
  std::set<std::string> global;
  for (const TensorParam& input : kernel_.inputs) global.insert(input.name);
  for (const loop::Temporary& temporary : program_.temporaries) global.insert(temporary.name);
  auto fed = productContraction(*contraction_, reductionAxes(root, *contraction_, covered[0]),
                                reductionAxes(root, *contraction_, covered[1]), global);
  EMMY_INTERNAL_ASSERT(std::holds_alternative<ProductContraction>(fed), "mma {} was checked", root_->name);
  const ProductContraction& contraction = std::get<ProductContraction>(fed);
  ExprPtr tensorMask;
  const Binary* tensorProduct = summedProduct(contraction_->body, &tensorMask);
  EMMY_INTERNAL_ASSERT(!tensorMask == !mask, "the Loop IR of {} masks its product otherwise", root_->name);
  auto loopRead = [&](const Load* tensorRead) {
    const ExprPtr& factor = productOperand(tensorProduct->lhs) == tensorRead ? product->lhs : product->rhs;
    const Load* load = productOperand(factor);
    EMMY_INTERNAL_ASSERT(load && load->tensor == tensorRead->tensor, "the Loop IR of {} reads other operands", root_->name);
    return load;
  };
  auto node = std::make_shared<MatrixProduct>();
  node->name = root_->name;
  node->row = m, node->col = n, node->k = k;
  node->rowAxes = fusedAxes[0], node->colAxes = fusedAxes[1], node->depthAxes = fusedAxes[2];
  node->a = {contraction.a->tensor, contraction.dtype, loopRead(contraction.a)->indices, contraction.aKContiguous,
             contraction.a->padValue != nullptr, contraction.aMask ? mask : nullptr};
  node->b = {contraction.b->tensor, contraction.dtype, loopRead(contraction.b)->indices, contraction.bKContiguous,
             contraction.b->padValue != nullptr, contraction.bMask ? mask : nullptr};
  std::map<std::string, ExprPtr> atStart{{rows.var, i64(0)}, {cols.var, i64(0)}};
  node->rowBase = substitute(root_loops_.values.at(tile.m), atStart);
  node->colBase = substitute(root_loops_.values.at(tile.n), atStart);
  node->rows = root_loops_.extents.at(tile.m);
  node->cols = root_loops_.extents.at(tile.n);
  node->depth = root_loops_.extents.at(tile.k);
  node->blockRows = *rows.scheduled->extent;
  node->blockCols = *cols.scheduled->extent;
  node->blockDepth = *depth.scheduled->extent;
  node->warpRows = tile.warpRows, node->warpCols = tile.warpCols, node->stages = tile.stages;
  node->accumulator = parts_.root.accumulator;
  const loop::Store& store = *parts_.root.finalize;
  node->output = store.buffer;
  node->outputIndices = store.indices;
  node->value = store.value;
  return node;
}

}  // namespace emmy::tile
