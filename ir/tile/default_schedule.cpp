// Loop IR -> Tile IR with the default schedule.
//
//  - A nest with no reduction (elementwise or broadcast work): its loops are fused into one flat loop
//    over every element, shared out across the whole grid.
//  - Any other nest is a row kernel: the root's loops above its first computed-in-place reduction
//    (all of them, for a reduction root) are fused into rows, one block per row. A reduction at that
//    level is cooperative: the block's threads stride over its axes, each folding a partial result,
//    and a cross-thread combine gives every thread the total. The root's loops below the rows are fused
//    and strided over the threads; whatever lies inside them runs serially in each thread.
//  - Rank-0 results run as one row (one block) or one element.
#include "ir/tile/default_schedule.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "support/diagnostics.h"
#include "support/text.h"

namespace emmy::tile {

using namespace tensor;

namespace {

constexpr int kThreadsPerBlock = 256;

// A chain of directly nested Loop IR loops, fused into one.
struct Fused {
  std::vector<const loop::For*> loops;
  const loop::Stmt* body;  // inside the innermost
};

// Lets that recover each fused loop's variable from the fused one (row-major, last fastest).
std::vector<StmtPtr> unflatten(const std::string& fusedVar, const std::vector<const loop::For*>& loops) {
  std::vector<StmtPtr> lets;
  ExprPtr stride;  // product of the extents after the current loop
  std::vector<ExprPtr> strides(loops.size());
  for (size_t k = loops.size(); k-- > 0;) {
    strides[k] = stride;
    ExprPtr extent = dimValue(loops[k]->extent);
    stride = stride ? std::make_shared<Binary>(DType::I64, BinaryOp::Mul, extent, stride) : extent;
  }
  for (size_t k = 0; k < loops.size(); ++k) {
    ExprPtr value = std::make_shared<AxisVar>(fusedVar);
    if (strides[k]) value = std::make_shared<Binary>(DType::I64, BinaryOp::Div, value, strides[k]);
    if (k > 0) value = std::make_shared<Binary>(DType::I64, BinaryOp::Mod, value, dimValue(loops[k]->extent));
    lets.push_back(std::make_shared<Let>(loops[k]->var, value));
  }
  return lets;
}

ExprPtr totalExtent(const std::vector<const loop::For*>& loops) {
  Dim total = Dim::constant(1);
  for (const loop::For* loop : loops) total = total * loop->extent;
  return dimValue(total);
}

class DefaultScheduler {
public:
  explicit DefaultScheduler(const loop::Program& program, std::vector<std::string>& directives)
      : program_(program), directives_(directives) {}

  TileNest schedule(const loop::LoopNest& nest) {
    root_ = program_.source.findStage(nest.stages.back());
    collectLoopVars(*nest.body);
    EMMY_INTERNAL_ASSERT(root_ != nullptr, "nest {} has no root stage", nest.name);
    if (std::optional<TileNest> tiled = tiledContraction(nest)) return *tiled;
    bool reduces = nest.stages.size() > 1 || root_->reduction.has_value();
    // The root's loops down to the first Allocate (a stage computed in place) or to the root itself.
    Fused rows = pureRootLoops(*nest.body);
    std::vector<std::string> axes;
    for (const loop::For* loop : rows.loops) axes.push_back(loop->stage + "." + loop->axis);
    // Elementwise work moves 16 bytes per access: 4 f32, 8 f16 or bf16, 2 f64 or i64 per thread.
    int bytes = dtypeBytes(root_->dtype);
    int vectorWidth = !reduces && bytes >= 2 && root_->dtype != DType::Bool ? 16 / bytes : 1;
    for (const std::string& member : nest.stages)
      if (member != root_->name) {
        const Stage* stage = program_.source.findStage(member);
        directives_.push_back(
            fmt::format("compute {} at {}.{}", member, root_->name, root_->axes[stage->axes.size() - 1].name));
      }
    if (!axes.empty()) {
      std::string fused = fuseDirective(axes);
      std::string name = root_->name;
      if (reduces) {
        directives_.push_back(fmt::format("bind {}.{} to block.x", name, fused));
      } else {
        std::string groups = fused;
        if (vectorWidth > 1) {
          groups = fused + "_group";
          directives_.push_back(fmt::format("split {}.{} by {} -> ({}, {}_lane)", name, fused, vectorWidth, groups, fused));
          directives_.push_back(fmt::format("vectorize {}.{}_lane", name, fused));
        }
        directives_.push_back(fmt::format("split {}.{} by {} -> ({}_block, {}_thread)", name, groups,
                                          kThreadsPerBlock, groups, groups));
        directives_.push_back(fmt::format("bind {}.{}_block to block.x", name, groups));
        directives_.push_back(fmt::format("bind {}.{}_thread to thread.x", name, groups));
      }
    }
    std::string var = uniqueVar(reduces ? "row" : "element");
    std::vector<StmtPtr> body = unflatten(var, rows.loops);
    body.push_back(reduces ? rowLevel(*rows.body) : threadLevel(*rows.body));
    StmtPtr top = std::make_shared<Loop>(var, totalExtent(rows.loops),
                                         reduces ? Binding::BlockStrided : Binding::GridStrided, axes,
                                         std::make_shared<Block>(body), vectorWidth);
    return TileNest{nest.name, nest.stages, {reduces ? threadsForRows(*top) : kThreadsPerBlock, 1, 1}, top};
  }

private:
  // ---- contractions: out[..., i, j] = sum over k of lhs(i, k) * rhs(k, j), then any elementwise
  // epilogue. Each block computes a kTile x kTile tile of the output, each thread kRegister x kRegister
  // elements of it in registers, from kSlice-deep slices of lhs and rhs staged in shared memory.
  static constexpr int kTile = 64, kRegister = 4, kSlice = 16;

  struct Contraction {
    const loop::For* reduction;  // the loop over k
    std::string accumulator;     // its rank-0 accumulator buffer
    DType accumulatorType;
    ExprPtr lhs, rhs;            // lhs uses no j, rhs no i
  };

  std::set<std::string> varsOf(const ExprPtr& expr) const {
    std::set<std::string> vars;
    forEachNode(*expr, [&](const Expr& node) {
      if (const auto* axis = node.as<AxisVar>()) vars.insert(axis->name);
      if (const auto* load = node.as<Load>(); load && load->indices.empty()) vars.insert("local " + load->tensor);
    });
    return vars;
  }

  // The one reduction loop of the nest below the root's loops, if it is a contraction over i and j.
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
    const Stage* stage = program_.source.findStage(reduction.stage);
    const auto* update = reduction.body->as<loop::Store>();
    if (!stage || !stage->reduction || stage->reduction->op != ReduceOp::Sum || !update) return std::nullopt;
    const auto* sum = update->value->as<Binary>();
    const auto* product = sum ? sum->rhs->as<Binary>() : nullptr;
    if (!sum || sum->op != BinaryOp::Add || !product || product->op != BinaryOp::Mul) return std::nullopt;
    const auto* current = sum->lhs->as<Load>();
    if (!current || current->tensor != update->buffer) return std::nullopt;
    const std::string& i = loops[loops.size() - 2]->var;
    const std::string& j = loops.back()->var;
    const std::string& k = reduction.var;
    std::set<std::string> allowedLhs{k, i}, allowedRhs{k, j};
    for (size_t d = 0; d + 2 < loops.size(); ++d) allowedLhs.insert(loops[d]->var), allowedRhs.insert(loops[d]->var);
    auto within = [](const std::set<std::string>& vars, const std::set<std::string>& allowed) {
      return std::all_of(vars.begin(), vars.end(), [&](const std::string& v) { return allowed.count(v) > 0; });
    };
    ExprPtr lhs = product->lhs, rhs = product->rhs;
    if (!within(varsOf(lhs), allowedLhs) || !within(varsOf(rhs), allowedRhs)) std::swap(lhs, rhs);
    if (!within(varsOf(lhs), allowedLhs) || !within(varsOf(rhs), allowedRhs)) return std::nullopt;
    return Contraction{&reduction, update->buffer, stage->reduction->accumulator, lhs, rhs};
  }

  // The statements after the contraction, per output element: the reduction loop and the store that
  // initialises its accumulator become one load of the element's register.
  StmtPtr epilogue(const loop::Stmt& stmt, const Contraction& contraction, const ExprPtr& element) {
    if (const auto* block = stmt.as<loop::Block>()) {
      std::vector<StmtPtr> stmts;
      for (size_t s = 0; s < block->stmts.size(); ++s) {
        const loop::StmtPtr& inner = block->stmts[s];
        bool initialises = s + 1 < block->stmts.size() && block->stmts[s + 1].get() == contraction.reduction;
        if (initialises) continue;
        if (inner.get() == contraction.reduction)
          stmts.push_back(std::make_shared<Store>(contraction.accumulator, std::vector<ExprPtr>{}, element));
        else
          stmts.push_back(epilogue(*inner, contraction, element));
      }
      return std::make_shared<Block>(stmts);
    }
    if (const auto* allocate = stmt.as<loop::Allocate>())
      return std::make_shared<Allocate>(allocate->buffer, allocate->dtype, allocate->shape, MemoryScope::Registers,
                                        epilogue(*allocate->body, contraction, element));
    return threadLevel(stmt);
  }

  std::optional<TileNest> tiledContraction(const loop::LoopNest& nest) {
    Fused loops = pureRootLoops(*nest.body);
    if (loops.loops.size() < 2 || loops.loops.size() != root_->axes.size()) return std::nullopt;
    std::optional<Contraction> contraction = findContraction(*loops.body, loops.loops);
    if (!contraction) return std::nullopt;

    auto imm = [](int64_t v) { return std::make_shared<IntImm>(DType::I64, v); };
    auto var = [](const std::string& name) { return std::make_shared<AxisVar>(name); };
    auto op = [](BinaryOp o, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::I64, o, a, b); };
    auto cmp = [](BinaryOp o, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, o, a, b); };
    auto both = [](ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, BinaryOp::And, a, b); };
    auto ceilDiv = [&](ExprPtr a, int64_t b) { return op(BinaryOp::Div, op(BinaryOp::Add, a, imm(b - 1)), imm(b)); };
    auto block = [](std::vector<StmtPtr> stmts) { return std::make_shared<Block>(std::move(stmts)); };

    const loop::For& iLoop = *loops.loops[loops.loops.size() - 2];
    const loop::For& jLoop = *loops.loops.back();
    const loop::For& kLoop = *contraction->reduction;
    ExprPtr extentI = dimValue(iLoop.extent), extentJ = dimValue(jLoop.extent), extentK = dimValue(kLoop.extent);
    int threads = (kTile / kRegister) * (kTile / kRegister);
    DType type = contraction->accumulatorType;

    // Tiles: the batch loops, then the tile rows and columns, fused into the block-strided loop.
    std::string tile = uniqueVar("tile"), tileI = uniqueVar("tile_i"), tileJ = uniqueVar("tile_j");
    std::vector<StmtPtr> top;
    ExprPtr tilesI = ceilDiv(extentI, kTile), tilesJ = ceilDiv(extentJ, kTile);
    ExprPtr perBatch = op(BinaryOp::Mul, tilesI, tilesJ);
    ExprPtr batchIndex = op(BinaryOp::Div, var(tile), perBatch);
    std::vector<const loop::For*> batch(loops.loops.begin(), loops.loops.end() - 2);
    Dim batchCount = Dim::constant(1);
    for (const loop::For* b : batch) batchCount = batchCount * b->extent;
    std::vector<StmtPtr> batchLets = unflatten("tile_batch", batch);
    if (!batch.empty()) top.push_back(std::make_shared<Let>("tile_batch", batchIndex));
    for (const StmtPtr& let : batchLets) top.push_back(let);
    top.push_back(std::make_shared<Let>(tileI, op(BinaryOp::Mod, op(BinaryOp::Div, var(tile), tilesJ), tilesI)));
    top.push_back(std::make_shared<Let>(tileJ, op(BinaryOp::Mod, var(tile), tilesJ)));

    // Each thread's kRegister x kRegister elements: rows ty*kRegister + r, columns tx*kRegister + c.
    std::string accumulators = uniqueVar(contraction->accumulator + "__tile");
    std::string t = uniqueVar("thread"), ty = uniqueVar("thread_row"), tx = uniqueVar("thread_col");
    std::string r = uniqueVar("r"), c = uniqueVar("c");
    auto perThread = [&](std::vector<StmtPtr> body) {
      std::vector<StmtPtr> stmts{std::make_shared<Let>(ty, op(BinaryOp::Div, var(t), imm(kTile / kRegister))),
                                 std::make_shared<Let>(tx, op(BinaryOp::Mod, var(t), imm(kTile / kRegister)))};
      stmts.insert(stmts.end(), body.begin(), body.end());
      return std::make_shared<Loop>(t, imm(threads), Binding::ThreadStrided, std::vector<std::string>{}, block(stmts));
    };
    auto overRegisters = [&](StmtPtr body) {
      return std::make_shared<Loop>(r, imm(kRegister), Binding::Unrolled, std::vector<std::string>{},
                                    std::make_shared<Loop>(c, imm(kRegister), Binding::Unrolled,
                                                           std::vector<std::string>{}, body));
    };
    std::vector<ExprPtr> rc{var(r), var(c)};
    ExprPtr own = std::make_shared<Load>(type, accumulators, rc);

    // The slices of lhs and rhs in shared memory, loaded by every thread of the block together.
    std::string slice = uniqueVar("slice"), e = uniqueVar("e"), ii = uniqueVar("ii"), jj = uniqueVar("jj"),
                kk = uniqueVar("kk");
    std::string lhsTile = uniqueVar(contraction->accumulator + "__lhs");
    std::string rhsTile = uniqueVar(contraction->accumulator + "__rhs");
    auto rowOf = [&](const std::string& tileVar, ExprPtr offset) {
      return op(BinaryOp::Add, op(BinaryOp::Mul, var(tileVar), imm(kTile)), offset);
    };
    ExprPtr kOf = op(BinaryOp::Add, op(BinaryOp::Mul, var(slice), imm(kSlice)), var(kk));
    StmtPtr loadLhs = std::make_shared<Loop>(
        e, imm(kTile * kSlice), Binding::ThreadStrided, std::vector<std::string>{},
        block({std::make_shared<Let>(ii, op(BinaryOp::Div, var(e), imm(kSlice))),
               std::make_shared<Let>(kk, op(BinaryOp::Mod, var(e), imm(kSlice))),
               std::make_shared<Let>(iLoop.var, rowOf(tileI, var(ii))), std::make_shared<Let>(kLoop.var, kOf),
               std::make_shared<Store>(lhsTile, std::vector<ExprPtr>{var(ii), var(kk)},
                                       std::make_shared<Select>(both(cmp(BinaryOp::Lt, var(iLoop.var), extentI),
                                                                     cmp(BinaryOp::Lt, var(kLoop.var), extentK)),
                                                                contraction->lhs, immediate(type, 0)))}));
    StmtPtr loadRhs = std::make_shared<Loop>(
        e, imm(kTile * kSlice), Binding::ThreadStrided, std::vector<std::string>{},
        block({std::make_shared<Let>(kk, op(BinaryOp::Div, var(e), imm(kTile))),
               std::make_shared<Let>(jj, op(BinaryOp::Mod, var(e), imm(kTile))),
               std::make_shared<Let>(jLoop.var, rowOf(tileJ, var(jj))), std::make_shared<Let>(kLoop.var, kOf),
               std::make_shared<Store>(rhsTile, std::vector<ExprPtr>{var(kk), var(jj)},
                                       std::make_shared<Select>(both(cmp(BinaryOp::Lt, var(jLoop.var), extentJ),
                                                                     cmp(BinaryOp::Lt, var(kLoop.var), extentK)),
                                                                contraction->rhs, immediate(type, 0)))}));
    ExprPtr a = std::make_shared<Load>(
        type, lhsTile,
        std::vector<ExprPtr>{op(BinaryOp::Add, op(BinaryOp::Mul, var(ty), imm(kRegister)), var(r)), var(kk)});
    ExprPtr b = std::make_shared<Load>(
        type, rhsTile,
        std::vector<ExprPtr>{var(kk), op(BinaryOp::Add, op(BinaryOp::Mul, var(tx), imm(kRegister)), var(c))});
    StmtPtr multiply = perThread({std::make_shared<Loop>(
        kk, imm(kSlice), Binding::Unrolled, std::vector<std::string>{},
        overRegisters(std::make_shared<Store>(
            accumulators, rc,
            std::make_shared<Binary>(type, BinaryOp::Add, own, std::make_shared<Binary>(type, BinaryOp::Mul, a, b)))))});
    StmtPtr slices = std::make_shared<Loop>(
        slice, ceilDiv(extentK, kSlice), Binding::Serial, std::vector<std::string>{kLoop.stage + "." + kLoop.axis},
        std::make_shared<Allocate>(lhsTile, type, std::vector<Dim>{Dim::constant(kTile), Dim::constant(kSlice)},
                                   MemoryScope::Shared,
                                   std::make_shared<Allocate>(rhsTile, type,
                                                              std::vector<Dim>{Dim::constant(kSlice), Dim::constant(kTile)},
                                                              MemoryScope::Shared, block({loadLhs, loadRhs, multiply}))));

    // The results: each in-range element goes through the nest's own statements after the reduction.
    ExprPtr row = op(BinaryOp::Add, op(BinaryOp::Mul, var(ty), imm(kRegister)), var(r));
    ExprPtr column = op(BinaryOp::Add, op(BinaryOp::Mul, var(tx), imm(kRegister)), var(c));
    StmtPtr store = perThread({overRegisters(block(
        {std::make_shared<Let>(iLoop.var, rowOf(tileI, row)), std::make_shared<Let>(jLoop.var, rowOf(tileJ, column)),
         std::make_shared<Guard>(both(cmp(BinaryOp::Lt, var(iLoop.var), extentI), cmp(BinaryOp::Lt, var(jLoop.var), extentJ)),
                                 epilogue(*loops.body, *contraction, own))}))});

    StmtPtr initialise =
        perThread({overRegisters(std::make_shared<Store>(accumulators, rc, immediate(type, 0)))});
    top.push_back(std::make_shared<Allocate>(accumulators, type, std::vector<Dim>{Dim::constant(kRegister), Dim::constant(kRegister)},
                                             MemoryScope::Registers, block({initialise, slices, store})));
    std::vector<std::string> axes;
    for (const loop::For* loop : loops.loops) axes.push_back(loop->stage + "." + loop->axis);
    recordContraction(*contraction, iLoop.axis, jLoop.axis, batch);
    ExprPtr tiles = batch.empty() ? perBatch : op(BinaryOp::Mul, dimValue(batchCount), perBatch);
    return TileNest{nest.name, nest.stages, {threads, 1, 1},
                    std::make_shared<Loop>(tile, tiles, Binding::BlockStrided, axes, block(top))};
  }

  // The tensor an operand reads, when it is one read (perhaps converted), for `cache ... in shared`.
  static std::optional<std::string> operandTensor(const ExprPtr& operand) {
    const Expr* e = operand.get();
    if (const auto* cast = e->as<Cast>()) e = cast->operand.get();
    if (const auto* load = e->as<Load>()) return load->tensor;
    return std::nullopt;
  }

  void recordContraction(const Contraction& contraction, const std::string& i, const std::string& j,
                         const std::vector<const loop::For*>& batch) {
    const std::string& root = root_->name;
    const std::string& stage = contraction.reduction->stage;
    const std::string& k = contraction.reduction->axis;
    auto add = [&](std::string directive) { directives_.push_back(std::move(directive)); };
    add(fmt::format("tile {} ({}, {}) by ({}, {}) -> ({}_tile, {}_tile, {}_in, {}_in)", root, i, j, kTile, kTile, i, j, i, j));
    std::vector<std::string> blockAxes;
    for (const loop::For* b : batch) blockAxes.push_back(root + "." + b->axis);
    blockAxes.push_back(fmt::format("{}.{}_tile", root, i));
    blockAxes.push_back(fmt::format("{}.{}_tile", root, j));
    add(fmt::format("bind {}.{} to block.x", root, fuseDirective(blockAxes)));
    add(fmt::format("tile {} ({}_in, {}_in) by ({}, {}) -> ({}_thread, {}_thread, {}_register, {}_register)", root, i, j,
                    kRegister, kRegister, i, j, i, j));
    std::string threadAxis =
        fuseDirective({fmt::format("{}.{}_thread", root, i), fmt::format("{}.{}_thread", root, j)});
    add(fmt::format("bind {}.{} to thread.x", root, threadAxis));
    if (stage != root) add(fmt::format("compute {} at {}.{}_register", stage, root, j));
    add(fmt::format("split {}.{} by {} -> ({}_slice, {}_in)", stage, k, kSlice, k, k));
    for (const ExprPtr& operand : {contraction.lhs, contraction.rhs}) {
      if (std::optional<std::string> tensor = operandTensor(operand))
        add(fmt::format("cache {} in shared at {}.{}_slice", *tensor, stage, k));
      else
        add(fmt::format("# the operand {} is computed into shared memory at {}.{}_slice", printExpr(*operand), stage, k));
    }
    add(fmt::format("cache {} in registers at {}.{}", stage, root, threadAxis));
    add(fmt::format("unroll {}.{}_in", stage, k));
    add(fmt::format("unroll {}.{}_register", root, i));
    add(fmt::format("unroll {}.{}_register", root, j));
  }

  bool isPureRootLoop(const loop::Stmt& stmt) const {
    const auto* loop = stmt.as<loop::For>();
    if (!loop || loop->stage != root_->name) return false;
    for (const Axis& axis : root_->axes)
      if (axis.name == loop->axis) return true;
    return false;
  }

  Fused pureRootLoops(const loop::Stmt& stmt) const {
    Fused fused{{}, &stmt};
    while (isPureRootLoop(*fused.body)) {
      const auto* loop = fused.body->as<loop::For>();
      fused.loops.push_back(loop);
      fused.body = loop->body.get();
    }
    return fused;
  }

  void collectLoopVars(const loop::Stmt& stmt) {
    loop::dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, loop::For>) {
        taken_.insert(node.var);
        collectLoopVars(*node.body);
      } else if constexpr (std::is_same_v<Node, loop::Allocate>) {
        collectLoopVars(*node.body);
      } else if constexpr (std::is_same_v<Node, loop::Block>) {
        for (const loop::StmtPtr& inner : node.stmts) collectLoopVars(*inner);
      }
    });
  }

  // A loop variable name no other loop of the nest uses.
  std::string uniqueVar(const std::string& base) {
    std::string name = base;
    for (int k = 1; taken_.count(name) || program_.source.findStage(name); ++k) name = fmt::format("{}_{}", base, k);
    taken_.insert(name);
    return name;
  }

  // Statements at the level of a row: every thread of the block runs them together.
  StmtPtr rowLevel(const loop::Stmt& stmt) {
    if (const auto* block = stmt.as<loop::Block>()) {
      std::vector<StmtPtr> stmts;
      for (const loop::StmtPtr& inner : block->stmts) {
        stmts.push_back(rowLevel(*inner));
        if (const auto* reduction = inner->as<loop::For>(); reduction && !isPureRootLoop(*inner))
          stmts.push_back(combineAfter(*reduction));
      }
      return std::make_shared<Block>(stmts);
    }
    if (const auto* allocate = stmt.as<loop::Allocate>())
      return std::make_shared<Allocate>(allocate->buffer, allocate->dtype, allocate->shape, MemoryScope::Registers,
                                        rowLevel(*allocate->body));
    if (const auto* store = stmt.as<loop::Store>()) {
      StmtPtr copy = std::make_shared<Store>(store->buffer, store->indices, store->value);
      // A result every thread holds is written to global memory once.
      return store->indices.empty() && isLocal(store->buffer) ? copy : std::make_shared<SingleThread>(copy);
    }
    const auto* loop = stmt.as<loop::For>();
    EMMY_INTERNAL_ASSERT(loop != nullptr, "unexpected Loop IR statement at row level");
    // The root's loops below the rows, or a reduction's loops: fused and strided over the threads.
    Fused fused{{}, &stmt};
    const std::string stage = loop->stage;
    bool pure = isPureRootLoop(stmt);
    while (const auto* inner = fused.body->as<loop::For>()) {
      if (inner->stage != stage || isPureRootLoop(*inner) != pure) break;
      fused.loops.push_back(inner);
      fused.body = inner->body.get();
    }
    std::string var = uniqueVar(pure ? "element" : "part");
    std::vector<StmtPtr> body = unflatten(var, fused.loops);
    body.push_back(threadLevel(*fused.body));
    std::vector<std::string> axes;
    for (const loop::For* inner : fused.loops) axes.push_back(inner->stage + "." + inner->axis);
    recordThreadBinding(axes);
    return std::make_shared<Loop>(var, totalExtent(fused.loops), Binding::ThreadStrided, axes,
                                  std::make_shared<Block>(body));
  }

  // Short rows of constant length take a warp (or the fewest warps that cover them) rather than a
  // block of kThreadsPerBlock threads, most of which would have nothing to do.
  static int threadsForRows(const Stmt& stmt) {
    int64_t longest = 0;
    bool constant = true;
    std::function<void(const Stmt&)> visit = [&](const Stmt& s) {
      dispatch(s, [&](const auto& node) {
        using Node = std::decay_t<decltype(node)>;
        if constexpr (std::is_same_v<Node, Loop>) {
          if (node.binding == Binding::ThreadStrided) {
            const auto* extent = node.extent->template as<IntImm>();
            constant = constant && extent != nullptr;
            if (extent) longest = std::max(longest, extent->value);
          }
          visit(*node.body);
        } else if constexpr (std::is_same_v<Node, Allocate> || std::is_same_v<Node, SingleThread> ||
                             std::is_same_v<Node, Guard>) {
          visit(*node.body);
        } else if constexpr (std::is_same_v<Node, Block>) {
          for (const StmtPtr& inner : node.stmts) visit(*inner);
        }
      });
    };
    visit(stmt);
    int threads = 32;
    while (constant && threads < kThreadsPerBlock && threads < longest) threads *= 2;
    return constant ? threads : kThreadsPerBlock;
  }

  // `bind S.a to thread.x` for loops strided over the threads (fused first when there are several).
  void recordThreadBinding(const std::vector<std::string>& axes) {
    std::string stage = axes[0].substr(0, axes[0].find('.'));
    directives_.push_back(fmt::format("bind {}.{} to thread.x", stage, fuseDirective(axes)));
  }

  // The combine after a cooperative reduction loop: its accumulator is the buffer its update stores.
  StmtPtr combineAfter(const loop::For& reduction) {
    const loop::Stmt* body = reduction.body.get();
    while (const auto* inner = body->as<loop::For>()) body = inner->body.get();
    const auto* update = body->as<loop::Store>();
    EMMY_INTERNAL_ASSERT(update != nullptr, "reduction loop over {}.{} does not end in its update", reduction.stage,
                         reduction.axis);
    const Stage* stage = program_.source.findStage(reduction.stage);
    return std::make_shared<CrossThreadReduce>(update->buffer, stage->reduction->accumulator, stage->reduction->op);
  }

  // Statements inside a thread's own loop: copied, every loop serial.
  StmtPtr threadLevel(const loop::Stmt& stmt) {
    return loop::dispatch(stmt, [&](const auto& node) -> StmtPtr { return threadNode(node); });
  }
  StmtPtr threadNode(const loop::For& node) {
    return std::make_shared<Loop>(node.var, dimValue(node.extent), Binding::Serial,
                                  std::vector<std::string>{node.stage + "." + node.axis}, threadLevel(*node.body));
  }
  StmtPtr threadNode(const loop::Allocate& node) {
    return std::make_shared<Allocate>(node.buffer, node.dtype, node.shape, MemoryScope::Registers,
                                      threadLevel(*node.body));
  }
  StmtPtr threadNode(const loop::Store& node) { return std::make_shared<Store>(node.buffer, node.indices, node.value); }
  StmtPtr threadNode(const loop::Block& node) {
    std::vector<StmtPtr> stmts;
    for (const loop::StmtPtr& inner : node.stmts) stmts.push_back(threadLevel(*inner));
    return std::make_shared<Block>(stmts);
  }

  bool isLocal(const std::string& buffer) const {
    for (const loop::Temporary& temporary : program_.temporaries)
      if (temporary.name == buffer) return false;
    for (const TensorParam& output : program_.source.outputs)
      if (output.name == buffer) return false;
    return true;
  }

  // The directives that say what this nest does, in the syntax of section 5 of the language: `fuse`
  // for loops fused into one (returning the fused axis), then the caller's `split`s and `bind`s.
  std::string fuseDirective(const std::vector<std::string>& axes) {
    std::string stage = axes[0].substr(0, axes[0].find('.'));
    std::vector<std::string> names;
    for (const std::string& axis : axes) names.push_back(axis.substr(axis.find('.') + 1));
    std::string fused = join(names, "_");
    if (axes.size() > 1) directives_.push_back(fmt::format("fuse {} ({}) -> {}", stage, join(names, ", "), fused));
    return fused;
  }

  const loop::Program& program_;
  std::vector<std::string>& directives_;
  const Stage* root_ = nullptr;
  std::set<std::string> taken_;  // loop variables in use
};

}  // namespace

TileNest scheduleNestByDefault(const loop::Program& program, const loop::LoopNest& nest,
                               std::vector<std::string>& directives) {
  return DefaultScheduler(program, directives).schedule(nest);
}

Program scheduleDefault(const loop::Program& program) {
  Program tiled{program.source, program.temporaries, {}, {}, {}};
  // Stages in no nest were inlined; non-output roots are kernels of their own.
  std::set<std::string> computed;
  for (const loop::LoopNest& nest : program.kernels) computed.insert(nest.stages.begin(), nest.stages.end());
  std::vector<std::string>& directives = tiled.defaultSchedule;
  for (const Stage& stage : program.source.stages)
    if (!computed.count(stage.name) && !stage.reduction) directives.push_back("inline " + stage.name);
  for (const loop::Temporary& temporary : program.temporaries) directives.push_back("root " + temporary.name);
  for (const loop::LoopNest& nest : program.kernels) tiled.kernels.push_back(scheduleNestByDefault(program, nest, directives));
  return tiled;
}

}  // namespace emmy::tile
