// mma (tensor_cores.h): the check of which loops of a contraction run on the tensor cores and of the
// tiles' shapes, and the Tile IR MatrixProduct that replaces those loops.
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/schedule_checker.h"
#include "ir/tile/tensor_cores.h"

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
  if (stage->tensorCores) {
    diagnostics_.error(d.loc, fmt::format("{} already runs on the tensor cores (at line {})", stage->name, stage->tensorCores->loc.line));
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
  auto fed = tensorCoreContraction(*reduction, rowAxis, globalTensors());
  if (auto* why = std::get_if<std::string>(&fed)) {
    diagnostics_.error(d.loc, fmt::format("{} cannot run on the tensor cores: {}", stage->name, *why));
    return;
  }
  const TensorCoreContraction& contraction = std::get<TensorCoreContraction>(fed);
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
  std::string shapes = fmt::format(
      "warp tiles WM x WN with WM and WN multiples of 16 that divide the block's {} x {} outputs, at most {} warps and "
      "{} accumulators a thread; a slice of k a multiple of 16; 2 to {} stages of shared memory within {} bytes",
      blockRows, blockCols, kMaxWarps, kMaxRegisterElements, kMaxStages, kStaticSharedMemoryBytes);
  auto refuse = [&](const SourceLoc& loc, const std::string& why) {
    diagnostics_.error(loc, fmt::format("mma {}: {} (legal: {})", stage->name, why, shapes));
  };
  if (warpRows < kMmaRows || warpRows % kMmaRows != 0 || blockRows % warpRows != 0)
    return refuse(d.factors[0].loc, fmt::format("a warp tile of {} rows does not fit the block's {}", warpRows, blockRows));
  if (warpCols < 2 * kMmaCols || warpCols % (2 * kMmaCols) != 0 || blockCols % warpCols != 0)
    return refuse(d.factors[1].loc, fmt::format("a warp tile of {} columns does not fit the block's {}", warpCols, blockCols));
  if (depth % kMmaDepth != 0)
    return refuse(d.axes[2].loc, fmt::format("{}.{} has {} iterations, not a multiple of 16", stage->name, loops[2]->name, depth));
  if (stages < 2 || stages > kMaxStages) return refuse(d.factors[2].loc, fmt::format("{} stages", stages));
  int64_t warps = (blockRows / warpRows) * (blockCols / warpCols);
  if (warps > kMaxWarps) return refuse(d.loc, fmt::format("{} warps", warps));
  if (warpRows * warpCols / 32 > kMaxRegisterElements)
    return refuse(d.loc, fmt::format("{} accumulators a thread", warpRows * warpCols / 32));
  int64_t bytes = (blockRows + blockCols) * depth * dtypeBytes(contraction.dtype) * stages;
  if (bytes > kStaticSharedMemoryBytes) return refuse(d.loc, fmt::format("{} bytes of shared memory", bytes));
  stage->tensorCores = TensorCoreTile{loops[0]->name, loops[1]->name, loops[2]->name, axes[0], axes[1], axes[2],
                                      warpRows, warpCols, stages, d.loc};
}

// ---- applying ----

// The loops `mma` takes are the root's innermost: before them only loops bound to blocks, and among
// them at most one more, serial, over the rest of k (the slices).
void NestScheduler::placeTensorCores() {
  const std::optional<TensorCoreTile>& tile = model_.stages.at(root_->name).tensorCores;
  if (!tile) return;
  const std::vector<FinalLoop>& loops = root_loops_.loops;
  auto refuse = [&](const std::string& why) { cannot(tile->loc, fmt::format("mma {}: {}", root_->name, why)); };
  if (!parts_.members.empty() || !parts_.wholes.empty())
    refuse("the nest computes other stages among its loops, which the tensor cores do not");
  for (const CacheStage& cache : model_.caches)
    if (cache.atStage == root_->name)
      refuse(fmt::format("the tensor cores stage the operands in shared memory themselves; leave out 'cache {}'", cache.source));
  std::optional<size_t> first;
  int sliceLoops = 0;
  for (size_t k = 0; k < loops.size(); ++k) {
    const ScheduledLoop& loop = *loops[k].scheduled;
    bool taken = loop.name == tile->rowLoop || loop.name == tile->colLoop || loop.name == tile->depthLoop;
    bool slices = loop.reduction && !taken;
    if (taken || slices) {
      if (loop.binding || loop.unrolled || loop.vectorized)
        refuse(fmt::format("{}.{} runs on the tensor cores, and cannot be bound, unrolled or vectorized too", root_->name, loop.name));
      if (slices && ++sliceLoops > 1) refuse(fmt::format("{} is split into more than the slices and {}", tile->k, tile->depthLoop));
      if (slices && (loop.fused || loop.coefficients.size() != 1 || !loop.coefficients.count(tile->k)))
        refuse(fmt::format("{}.{} must be the loop over the slices of {}", root_->name, loop.name, tile->k));
      if (!first) first = k;
      continue;
    }
    if (first || !boundToBlocks(loop) || boundToGrid(loop))
      refuse(fmt::format("{}.{} must be bound to a block and outside the loops on the tensor cores ({}, {}, {})", root_->name,
                         loop.name, tile->rowLoop, tile->colLoop, tile->depthLoop));
  }
  if (loops.back().scheduled->name != tile->depthLoop)
    refuse(fmt::format("{}.{} must be the innermost loop", root_->name, tile->depthLoop));
  tensorCorePosition_ = *first;
  const ScheduledLoop* rows = nullptr;
  const ScheduledLoop* cols = nullptr;
  for (const FinalLoop& loop : loops) {
    if (loop.scheduled->name == tile->rowLoop) rows = loop.scheduled;
    if (loop.scheduled->name == tile->colLoop) cols = loop.scheduled;
  }
  threads_ = {32, static_cast<int>(*cols->extent / tile->warpCols), static_cast<int>(*rows->extent / tile->warpRows)};
}

StmtPtr NestScheduler::matrixProduct() {
  const TensorCoreTile& tile = *model_.stages.at(root_->name).tensorCores;
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
  auto fed = tensorCoreContraction(*contraction_, rowAxis, global);
  EMMY_INTERNAL_ASSERT(std::holds_alternative<TensorCoreContraction>(fed), "mma {} was checked", root_->name);
  const TensorCoreContraction& contraction = std::get<TensorCoreContraction>(fed);
  const auto* tensorProduct = contraction_->body->as<Binary>();
  auto loopRead = [&](const Load* tensorRead) {
    const ExprPtr& factor = tensorProduct->lhs->as<Cast>()->operand.get() == tensorRead ? product->lhs : product->rhs;
    const auto* load = factor->as<Cast>()->operand->as<Load>();
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
