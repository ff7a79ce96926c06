// scan (prefix_scan.h): the check that a running reduction's loops can run as a block-level scan, and
// the Tile IR that does it. Per tile of THREADS x ITEMS elements of the row: the threads copy the
// elements' values into shared memory together (thread j takes elements j, j + THREADS, ..., so that
// neighbouring threads read neighbouring elements), each thread folds its ITEMS consecutive elements in
// its registers, the threads scan their totals in shared memory in log2(THREADS) steps (step s adds the
// total 2^s threads before, Hillis and Steele), and each element becomes carry + the totals of the
// threads before its own + its own fold, in a second buffer; the stores then go back out as the loads
// came in, and the carry grows by the tile's total. With the results apart from the values, the next
// tile's loads overwrite nothing a store still reads, and need no barrier. Shared indices skip one
// element in 33 (`skewed`), so that the threads' consecutive runs lie in different banks. Barriers are
// Kernel IR's to place (place_barriers.h).
#include "ir/tile/nest_scheduler.h"
#include "ir/tile/prefix_scan.h"
#include "ir/tile/schedule_checker.h"

namespace emmy::tile {

// ---- checking ----

void ScheduleChecker::scan(const Directive& d) {
  StageSchedule* stage = findStage(d.stage);
  if (!stage) return;
  if (stage->scan || stage->product) {
    SourceLoc earlier = stage->scan ? stage->scan->loc : stage->product->loc;
    diagnostics_.error(d.loc, fmt::format("{} already runs as a block-level {} (at line {})", stage->name,
                                          stage->scan ? "scan" : "product", earlier.line));
    return;
  }
  std::optional<size_t> at = findLoop(*stage, d.axes[0]);
  if (!at) return;
  const ScheduledLoop& loop = stage->loops[*at];
  if (!unmarked(*stage, loop, d, d.axes[0])) return;
  const Stage* root = kernel_.findStage(stage->name);
  const Stage* reduction = kernel_.findStage(stage->epilogueReduction.empty() ? stage->name : stage->epilogueReduction);
  // The axis of the reduction at the root's axis's position (a root applies its expression to a
  // reduction of the same axes).
  std::optional<size_t> position;
  for (size_t a = 0; a < root->axes.size(); ++a)
    if (root->axes[a].name == loop.name) position = a;
  if (loop.reduction || !position || *position >= reduction->axes.size()) {
    diagnostics_.error(d.axes[0].loc, fmt::format("scan's loop must be an axis of {} as written, not split, fused or "
                                                  "reduced; {}.{} is not (axes of {}: {})", stage->name, stage->name,
                                                  loop.name, stage->name, loopNames(stage->loops)));
    return;
  }
  auto found = prefixReduction(*reduction, reduction->axes[*position].name);
  if (auto* why = std::get_if<std::string>(&found)) {
    diagnostics_.error(d.loc, fmt::format("{} cannot run as a block-level scan: {}", stage->name, *why));
    return;
  }
  const PrefixReduction& prefix = std::get<PrefixReduction>(found);
  const ScheduledLoop* reductionLoop = nullptr;
  for (const ScheduledLoop& other : stage->loops)
    if (other.name == prefix.k && other.coefficients.size() == 1 && other.coefficients.count(prefix.k) && !other.fused)
      reductionLoop = &other;
  if (!reductionLoop || !unmarked(*stage, *reductionLoop, d, d.axes[0])) {
    if (!reductionLoop)
      diagnostics_.error(d.loc, fmt::format("scan {}.{} takes the reduction loop {} whole, and it is split or fused "
                                            "(loops of {}: {})", stage->name, loop.name, prefix.k, stage->name,
                                            loopNames(stage->loops)));
    return;
  }
  int64_t threads = d.factors[0].value, items = d.factors[1].value;
  int64_t elementBytes = dtypeBytes(reduction->reduction->accumulator);
  int64_t bytes = (2 * (threads * items + threads * items / 32 + 1) + 2 * threads) * elementBytes;
  std::string legal = fmt::format("legal: THREADS a multiple of 32 up to {}, ITEMS from 1 to {}, and both within {} "
                                  "bytes of shared memory", kMaxThreadsPerBlock, kMaxScanItems, kStaticSharedMemoryBytes);
  if (threads < 32 || threads % 32 != 0 || threads > kMaxThreadsPerBlock)
    return diagnostics_.error(d.factors[0].loc, fmt::format("scan {}: a block of {} threads ({})", stage->name, threads, legal));
  if (items < 1 || items > kMaxScanItems)
    return diagnostics_.error(d.factors[1].loc, fmt::format("scan {}: {} elements a thread ({})", stage->name, items, legal));
  if (bytes > kStaticSharedMemoryBytes)
    return diagnostics_.error(d.loc, fmt::format("scan {}: {} bytes of shared memory ({})", stage->name, bytes, legal));
  stage->scan = ScanTile{loop.name, prefix.k, threads, items, prefix.inclusive, d.loc};
}

// ---- applying ----

// The two loops `scan` takes are the root's innermost; every loop before them is bound to blocks.
void NestScheduler::placePrefixScan() {
  const std::optional<ScanTile>& scan = model_.stages.at(root_->name).scan;
  if (!scan) return;
  auto refuse = [&](const std::string& why) { cannot(scan->loc, fmt::format("scan {}: {}", root_->name, why)); };
  refuseOtherWork(refuse, "scan", "its row");
  const std::vector<FinalLoop>& loops = root_loops_.loops;
  size_t count = loops.size();
  auto isScanned = [&](const FinalLoop& loop) { return loop.scheduled->name == scan->axis || loop.scheduled->name == scan->k; };
  if (count < 2 || !isScanned(loops[count - 1]) || !isScanned(loops[count - 2]))
    refuse(fmt::format("{}.{} and {}.{} must be the innermost loops (loops of {}: {})", root_->name, scan->axis, root_->name,
                       scan->k, root_->name, loopNames(model_.stages.at(root_->name).loops)));
  for (size_t k = 0; k + 2 < count; ++k) {
    const ScheduledLoop& loop = *loops[k].scheduled;
    if (!boundToBlocks(loop) || boundToGrid(loop))
      refuse(fmt::format("{}.{} must be bound to a block: a block scans one row", root_->name, loop.name));
  }
  scanPosition_ = count - 2;
  threads_ = {static_cast<int>(scan->threads), 1, 1};
}

StmtPtr NestScheduler::prefixScan() {
  const ScanTile& scan = *model_.stages.at(root_->name).scan;
  const ReduceOp op = contraction_->reduction->op;
  const DType accumulator = parts_.root.accumulatorType;
  // The Loop IR update is acc = step(acc, where(k < t + c, v, identity)).
  const auto* update = parts_.root.update->value->as<Binary>();
  EMMY_INTERNAL_ASSERT(update != nullptr, "the update of {} is not a reduction step", root_->name);
  const ExprPtr& value = scannedValue(*update->rhs);
  const std::string& t = root_loops_.axisVars.at(scan.axis);
  const std::string& k = root_loops_.axisVars.at(scan.k);
  const ExprPtr extent = root_loops_.extents.at(scan.axis);
  const int64_t threads = scan.threads, items = scan.items, tileElements = threads * items;
  const ExprPtr identity = immediateOf(reductionIdentity(op, accumulator));
  auto combine = [&](ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(accumulator, reductionStep(op), std::move(a), std::move(b)); };
  auto read = [&](const std::string& buffer, std::vector<ExprPtr> index) { return std::make_shared<Load>(accumulator, buffer, std::move(index)); };
  auto set = [](const std::string& buffer, std::vector<ExprPtr> index, ExprPtr v) {
    return std::make_shared<Store>(buffer, std::move(index), std::move(v));
  };
  const std::string prefix = root_->name + "__";
  const std::string totals[2] = {uniqueVar(prefix + "totals"), uniqueVar(prefix + "totals")};
  const std::string values = uniqueVar(prefix + "scan"), results = uniqueVar(prefix + "scanned"), carry = uniqueVar(prefix + "carry"), run = uniqueVar(prefix + "run"), before = uniqueVar(prefix + "before"),
                    result = uniqueVar(prefix + "result"), folds = uniqueVar(prefix + "folds");
  const std::string lane = uniqueVar("lane"), tileVar = uniqueVar("scan_tile"), item = uniqueVar("item"),
                    element = uniqueVar("element"), first = uniqueVar("tile_start");
  auto skewed = [&](ExprPtr e) { return arithmetic(BinaryOp::Add, e, arithmetic(BinaryOp::Div, e, i64(32))); };
  auto overItems = [&](ExprPtr position, std::vector<StmtPtr> body) {
    body.insert(body.begin(), std::make_shared<Let>(element, std::move(position)));
    return std::make_shared<Loop>(item, i64(items), Binding::Unrolled, std::vector<std::string>{}, block(std::move(body)));
  };
  // Element e of the tile, in the order the threads load and store: thread `lane` takes every threads-th.
  ExprPtr strided = arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, var(item), i64(threads)), var(lane));
  ExprPtr consecutive = arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, var(lane), i64(items)), var(item));
  ExprPtr position = arithmetic(BinaryOp::Add, var(first), var(element));
  std::vector<StmtPtr> tile;
  tile.push_back(std::make_shared<Let>(first, arithmetic(BinaryOp::Mul, var(tileVar), i64(tileElements))));
  tile.push_back(overItems(strided, {std::make_shared<Let>(k, position),
                                     set(values, {skewed(var(element))},
                                         std::make_shared<Select>(compare(BinaryOp::Lt, var(k), extent), value, identity))}));
  // (A register buffer of one element is a scalar.)
  const std::vector<ExprPtr> foldIndex = items == 1 ? std::vector<ExprPtr>{} : std::vector<ExprPtr>{var(item)};
  // The thread's own elements are folded in its registers: shared memory is read once, and written
  // once, so that no barrier falls among them.
  tile.push_back(set(run, {}, identity));
  tile.push_back(overItems(consecutive, {set(run, {}, combine(read(run, {}), read(values, {skewed(var(element))}))),
                                         set(folds, foldIndex, read(run, {}))}));
  // The steps alternate between two buffers of totals, reading one and writing the other, so that one
  // barrier (before the next step reads what this one wrote) keeps each step apart.
  tile.push_back(set(totals[0], {var(lane)}, read(run, {})));
  int steps = 0;
  for (int64_t offset = 1; offset < threads; offset *= 2, ++steps) {
    ExprPtr earlier = read(totals[steps % 2], {arithmetic(BinaryOp::Sub, var(lane), i64(offset))});
    tile.push_back(set(before, {}, std::make_shared<Select>(compare(BinaryOp::Ge, var(lane), i64(offset)), earlier, identity)));
    tile.push_back(set(run, {}, combine(read(before, {}), read(run, {}))));
    tile.push_back(set(totals[(steps + 1) % 2], {var(lane)}, read(run, {})));
  }
  const std::string& scanned = totals[steps % 2];
  ExprPtr previousTotal = read(scanned, {arithmetic(BinaryOp::Sub, var(lane), i64(1))});
  tile.push_back(set(before, {}, combine(read(carry, {}), std::make_shared<Select>(compare(BinaryOp::Ge, var(lane), i64(1)),
                                                                                 previousTotal, identity))));
  tile.push_back(overItems(consecutive, {set(results, {skewed(var(element))}, combine(read(before, {}), read(folds, foldIndex)))}));
  // The result at element e: its inclusive value, or for an exclusive scan the one before it (the carry
  // at the tile's first).
  ExprPtr resultValue = read(results, {skewed(var(element))});
  if (!scan.inclusive) {
    ExprPtr previous = read(results, {skewed(arithmetic(BinaryOp::Sub, var(element), i64(1)))});
    resultValue = std::make_shared<Select>(compare(BinaryOp::Ge, var(element), i64(1)), previous, read(carry, {}));
  }
  const loop::Store& finalize = *parts_.root.finalize;
  ExprPtr stored = rewrite(finalize.value, [&](const Expr& node) -> ExprPtr {
    const auto* load = node.as<Load>();
    return load && load->tensor == parts_.root.accumulator ? read(result, {}) : nullptr;
  });
  tile.push_back(overItems(strided, {std::make_shared<Let>(t, position),
                                     std::make_shared<Guard>(compare(BinaryOp::Lt, var(t), extent),
                                                             block({set(result, {}, resultValue),
                                                                    set(finalize.buffer, finalize.indices, stored)}))}));
  tile.push_back(set(carry, {}, combine(read(carry, {}), read(scanned, {i64(threads - 1)}))));
  ExprPtr tiles = arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, extent, i64(tileElements - 1)), i64(tileElements));
  StmtPtr body = block({set(carry, {}, identity),
                        std::make_shared<Loop>(tileVar, tiles, Binding::Serial, std::vector<std::string>{}, block(std::move(tile)))});
  body = std::make_shared<Loop>(lane, i64(threads), Binding::ThreadIndex, std::vector<std::string>{}, body, 1, 0);
  for (const std::string& local : {result, before, run, carry})
    body = std::make_shared<Allocate>(local, accumulator, std::vector<Dim>{}, MemoryScope::Registers, body);
  body = std::make_shared<Allocate>(folds, accumulator, items == 1 ? std::vector<Dim>{} : std::vector<Dim>{Dim::constant(items)},
                                    MemoryScope::Registers, body);
  for (const std::string& buffer : totals)
    body = std::make_shared<Allocate>(buffer, accumulator, std::vector<Dim>{Dim::constant(threads)}, MemoryScope::Shared, body);
  for (const std::string& buffer : {results, values})
    body = std::make_shared<Allocate>(buffer, accumulator, std::vector<Dim>{Dim::constant(tileElements + tileElements / 32 + 1)},
                                      MemoryScope::Shared, body);
  return body;
}

}  // namespace emmy::tile
