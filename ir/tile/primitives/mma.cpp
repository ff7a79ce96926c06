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
  std::string axes[3];
  for (int l = 0; l < 3; ++l) {
    axes[l] = onlyAxis(*loops[l]);
    bool wantReduction = l == 2;
    if (axes[l].empty() || loops[l]->reduction != wantReduction || !loops[l]->extent) {
      diagnostics_.error(d.axes[l].loc,
                         fmt::format("mma's {} loop must be a {} loop of constant extent that steps one {} at a time; "
                                     "{}.{} is not (loops of {}: {})", roles[l], wantReduction ? "reduction" : "pure",
                                     wantReduction ? "reduced element" : "output element", stage->name, loops[l]->name,
                                     stage->name, loopNames(stage->loops)));
      return;
    }
  }
  // The contraction: the stage's own reduction, or the one a root applies its expression to (whose axes
  // are the root's, in order).
  const Stage* reduction = kernel_.findStage(stage->epilogueReduction.empty() ? stage->name : stage->epilogueReduction);
  const Stage* root = kernel_.findStage(stage->name);
  std::string rowAxis = axes[0];
  for (size_t a = 0; a < root->axes.size() && reduction != root; ++a)
    if (root->axes[a].name == axes[0] && a < reduction->axes.size()) rowAxis = reduction->axes[a].name;
  auto fed = productContraction(*reduction, rowAxis, globalTensors());
  if (auto* why = std::get_if<std::string>(&fed)) {
    diagnostics_.error(d.loc, fmt::format("{} cannot run as a block-level product: {}", stage->name, *why));
    return;
  }
  const ProductContraction& contraction = std::get<ProductContraction>(fed);
  std::string colAxis = axes[1];
  for (size_t a = 0; a < root->axes.size() && reduction != root; ++a)
    if (root->axes[a].name == axes[1] && a < reduction->axes.size()) colAxis = reduction->axes[a].name;
  if (colAxis != contraction.n) {
    diagnostics_.error(d.axes[1].loc, fmt::format("{}.{} runs over {}, and the columns of the product are {} ({} reads {})",
                                                  stage->name, loops[1]->name, axes[1], contraction.n,
                                                  contraction.b->tensor, contraction.n));
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
      if (slices && (loop.fused || loop.coefficients.size() != 1 || !loop.coefficients.count(tile->k)))
        refuse(fmt::format("{}.{} must be the loop over the slices of {}", root_->name, loop.name, tile->k));
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
  const FinalLoop* slices = nullptr;
  for (const FinalLoop& loop : root_loops_.loops) {
    byName[loop.scheduled->name] = &loop;
    if (loop.scheduled->reduction && loop.scheduled->name != tile.depthLoop) slices = &loop;
  }
  const FinalLoop& rows = *byName.at(tile.rowLoop);
  const FinalLoop& cols = *byName.at(tile.colLoop);
  const FinalLoop& depth = *byName.at(tile.depthLoop);
  // The operands as Loop IR reads them: acc + f32(x) * f32(y), in the order of the Tensor IR product.
  const auto* sum = parts_.root.update->value->as<Binary>();
  const auto* product = sum ? sum->rhs->as<Binary>() : nullptr;
  EMMY_INTERNAL_ASSERT(product && product->op == BinaryOp::Mul, "the update of {} is not acc + x * y", root_->name);
  std::string rowAxis = tile.m;
  const Stage& root = *kernel_.findStage(root_->name);
  for (size_t a = 0; a < root.axes.size() && contraction_->name != root.name; ++a)
    if (root.axes[a].name == tile.m) rowAxis = contraction_->axes[a].name;
  std::set<std::string> global;
  for (const TensorParam& input : kernel_.inputs) global.insert(input.name);
  for (const loop::Temporary& temporary : program_.temporaries) global.insert(temporary.name);
  auto fed = productContraction(*contraction_, rowAxis, global);
  EMMY_INTERNAL_ASSERT(std::holds_alternative<ProductContraction>(fed), "mma {} was checked", root_->name);
  const ProductContraction& contraction = std::get<ProductContraction>(fed);
  const auto* tensorProduct = contraction_->body->as<Binary>();
  auto loopRead = [&](const Load* tensorRead) {
    const ExprPtr& factor = productOperand(tensorProduct->lhs) == tensorRead ? product->lhs : product->rhs;
    const Load* load = productOperand(factor);
    EMMY_INTERNAL_ASSERT(load && load->tensor == tensorRead->tensor, "the Loop IR of {} reads other operands", root_->name);
    return load;
  };
  auto node = std::make_shared<MatrixProduct>();
  node->name = root_->name;
  const std::string& m = root_loops_.axisVars.at(tile.m);
  const std::string& n = root_loops_.axisVars.at(tile.n);
  const std::string& k = root_loops_.axisVars.at(tile.k);
  node->row = m, node->col = n, node->k = k;
  node->a = {contraction.a->tensor, contraction.dtype, loopRead(contraction.a)->indices, contraction.aKContiguous};
  node->b = {contraction.b->tensor, contraction.dtype, loopRead(contraction.b)->indices, contraction.bKContiguous};
  std::map<std::string, ExprPtr> atStart{{rows.var, i64(0)}, {cols.var, i64(0)}};
  node->rowBase = substitute(root_loops_.values.at(tile.m), atStart);
  node->colBase = substitute(root_loops_.values.at(tile.n), atStart);
  node->rows = root_loops_.extents.at(tile.m);
  node->cols = root_loops_.extents.at(tile.n);
  node->depth = root_loops_.extents.at(tile.k);
  node->blockRows = *rows.scheduled->extent;
  node->blockCols = *cols.scheduled->extent;
  node->blockDepth = *depth.scheduled->extent;
  EMMY_INTERNAL_ASSERT(!slices || slices->scheduled->coefficients.at(tile.k) == node->blockDepth,
                       "the slices of {} are not {} apart", root_->name, node->blockDepth);
  node->warpRows = tile.warpRows, node->warpCols = tile.warpCols, node->stages = tile.stages;
  node->accumulator = parts_.root.accumulator;
  const loop::Store& store = *parts_.root.finalize;
  node->output = store.buffer;
  node->outputIndices = store.indices;
  node->value = store.value;
  return node;
}

}  // namespace emmy::tile
