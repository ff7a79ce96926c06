// Tile IR -> Kernel IR: bindings become index arithmetic on the thread's and block's indices, global
// buffers are indexed flat (row-major), padded reads become guarded ones, single-thread sections become
// `if (threadIdx.x == 0)`, and each cross-thread combine becomes two rounds of warp shuffles around a
// shared array of one partial result per warp. Barriers come later (place_barriers.cpp).
#include "ir/kernel/lower_tile_to_kernel.h"

#include "ir/kernel/lower_matrix_product.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/printer.h"
#include "ir/tensor/scalar_ops.h"
#include "ir/tensor/simplify.h"
#include "support/diagnostics.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

// Most blocks a launch asks for; grid- and block-strided loops cover any size with fewer.
constexpr int64_t kMaxBlocks = 65535;
// The 16-byte groups each thread of a vectorized grid-strided loop reads before it computes any of them,
// so that that many loads are in flight per thread.
constexpr int64_t kGroupsInFlight = 4;
constexpr int kWarpSize = 32;

ExprPtr i64(int64_t value) { return std::make_shared<IntImm>(DType::I64, value); }
ExprPtr arithmetic(BinaryOp op, ExprPtr a, ExprPtr b) {
  return simplifyIndex(std::make_shared<Binary>(DType::I64, op, std::move(a), std::move(b)));
}
ExprPtr compare(BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, op, a, b); }
ExprPtr conjunction(const std::vector<ExprPtr>& terms) {
  ExprPtr all;
  for (const ExprPtr& term : terms) all = all ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, all, term) : term;
  return all;
}

class Lowering {
public:
  Lowering(const tile::Program& program, const tile::TileNest& nest) : program_(program), nest_(nest) {
    for (const TensorParam& input : program.source.inputs) shapes_[input.name] = input.shape;
    for (const TensorParam& output : program.source.outputs) shapes_[output.name] = output.shape;
    for (const loop::Temporary& temporary : program.temporaries) shapes_[temporary.name] = temporary.shape;
  }

  Function lower() {
    const std::array<int, 3>& threads = nest_.threads;
    std::array<ExprPtr, 3> blocks{i64(1), i64(1), i64(1)};
    findBlockLoops(*nest_.body, blocks);
    // Always launched, 64-bit until the pass index-widths says otherwise.
    return Function{nest_.name, nest_.stages, threads, blocks, withoutUnusedLets(lowerStmt(*nest_.body)),
                    nullptr, 64, nullptr, nest_.narrowestIndexBits};
  }

private:
  // The grid: along each dimension, as many blocks as the loop bound to it has iterations (a grid-strided
  // loop: enough blocks of the block's threads for all of them), at most kMaxBlocks.
  void findBlockLoops(const tile::Stmt& stmt, std::array<ExprPtr, 3>& blocks) {
    const auto* loop = stmt.as<tile::Loop>();
    if (const auto* block = stmt.as<tile::Block>())
      for (const tile::StmtPtr& inner : block->stmts) findBlockLoops(*inner, blocks);
    if (const auto* let = stmt.as<tile::Allocate>()) findBlockLoops(*let->body, blocks);
    if (!loop || (loop->binding != tile::Binding::BlockStrided && loop->binding != tile::Binding::GridStrided)) return;
    ExprPtr count = loop->extent;
    if (loop->binding == tile::Binding::GridStrided) {
      int threads = nest_.threads[0] * nest_.threads[1] * nest_.threads[2];
      count = arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, count, i64(threads - 1)), i64(threads));
    }
    if (loop->vectorWidth > 1) {
      int64_t perThread = loop->vectorWidth * kGroupsInFlight;
      count = arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, count, i64(perThread - 1)), i64(perThread));
    }
    blocks[loop->dimension] = arithmetic(BinaryOp::Min, arithmetic(BinaryOp::Max, count, i64(1)), i64(kMaxBlocks));
    findBlockLoops(*loop->body, blocks);
  }

  bool flatBlock() const { return nest_.threads[1] == 1 && nest_.threads[2] == 1; }

  // The thread's position among all the threads of its block, and their number.
  ExprPtr linearThreadIndex() const {
    if (flatBlock()) return threadIndex();
    const std::array<int, 3>& t = nest_.threads;
    return arithmetic(BinaryOp::Add, threadIndex(0),
                      arithmetic(BinaryOp::Mul, i64(t[0]),
                                 arithmetic(BinaryOp::Add, threadIndex(1), arithmetic(BinaryOp::Mul, i64(t[1]), threadIndex(2)))));
  }
  ExprPtr threadCount() const {
    return flatBlock() ? blockSize() : i64(nest_.threads[0] * nest_.threads[1] * nest_.threads[2]);
  }

  StmtPtr lowerStmt(const tile::Stmt& stmt) {
    return tile::dispatch(stmt, [&](const auto& node) -> StmtPtr { return lowerNode(node); });
  }

  StmtPtr lowerNode(const tile::Loop& node) {
    if (node.vectorWidth > 1 && node.binding == tile::Binding::GridStrided)
      if (StmtPtr vectorized = lowerVectorized(node)) return vectorized;
    if (node.vectorWidth > 1 && node.binding == tile::Binding::Unrolled)
      if (StmtPtr vectorized = lowerVectorLanes(node)) return vectorized;
    ExprPtr begin, step;
    switch (node.binding) {
      case tile::Binding::Serial:
      case tile::Binding::Unrolled: begin = i64(0), step = i64(1); break;
      case tile::Binding::GridStrided:
        begin = arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, blockIndex(), threadCount()), linearThreadIndex());
        step = arithmetic(BinaryOp::Mul, gridSize(), threadCount());
        break;
      case tile::Binding::BlockStrided: begin = blockIndex(node.dimension), step = gridSize(node.dimension); break;
      case tile::Binding::ThreadStrided:
        if (StmtPtr counted = lowerCountedThreadStrided(node)) return counted;
        begin = linearThreadIndex(), step = threadCount();
        break;
      case tile::Binding::ThreadIndex:
        return std::make_shared<Block>(
            std::vector<StmtPtr>{std::make_shared<Let>(node.var, threadIndex(node.dimension)), lowerStmt(*node.body)});
    }
    return std::make_shared<For>(node.var, begin, expr(node.extent), step, lowerStmt(*node.body),
                                 node.binding == tile::Binding::Unrolled);
  }

  // A thread-strided loop of a constant extent that the block's threads divide: each thread's iterations
  // counted from 0, so that the CUDA compiler sees their number (and unrolls them without a remainder)
  // rather than a bound on an index that starts at the thread's. Null for any other.
  StmtPtr lowerCountedThreadStrided(const tile::Loop& node) {
    const auto* extent = node.extent->as<IntImm>();
    if (flatBlock() || !extent) return nullptr;
    int64_t threads = int64_t{nest_.threads[0]} * nest_.threads[1] * nest_.threads[2];
    int64_t iterations = static_cast<int64_t>(extent->value);
    if (iterations % threads != 0) return nullptr;
    if (iterations == threads)  // one each
      return std::make_shared<Block>(std::vector<StmtPtr>{std::make_shared<Let>(node.var, linearThreadIndex()), lowerStmt(*node.body)});
    std::string trip = node.var + "__trip";
    ExprPtr iteration = arithmetic(BinaryOp::Add, linearThreadIndex(), arithmetic(BinaryOp::Mul, std::make_shared<AxisVar>(trip), i64(threads)));
    return std::make_shared<For>(trip, i64(0), i64(iterations / threads), i64(1),
                                 std::make_shared<Block>(std::vector<StmtPtr>{std::make_shared<Let>(node.var, iteration), lowerStmt(*node.body)}),
                                 false);
  }

  // A grid-strided loop whose body ends in stores `out[indices] = value` (a root's, and its companions'
  // beside it, at the same indices, of elements of one size): when each `out` and every tensor that a
  // `value` reads at the same indices (with elements of that size) start on 16-byte boundaries,
  // each thread takes groups of `vectorWidth` consecutive elements, read and written 16 bytes at a time
  // through local arrays, kGroupsInFlight groups a grid's stride apart at once (all of their reads
  // first, so that they are in flight together), and the elements after the last whole group one by
  // one; otherwise every element one by one. Null when the loop does not have that shape.
  StmtPtr lowerVectorized(const tile::Loop& node) {
    // The body: the stores alone, or statements (the Lets of the axes) ending in them.
    std::vector<tile::StmtPtr> flat;
    std::function<void(const tile::StmtPtr&)> flatten = [&](const tile::StmtPtr& stmt) {
      if (const auto* inner = stmt->as<tile::Block>())
        for (const tile::StmtPtr& each : inner->stmts) flatten(each);
      else
        flat.push_back(stmt);
    };
    flatten(node.body);
    std::vector<const tile::Store*> stores;
    size_t lets = flat.size();
    while (lets > 0 && flat[lets - 1]->as<tile::Store>()) stores.insert(stores.begin(), flat[--lets]->as<tile::Store>());
    if (stores.empty() || !shapes_.count(stores[0]->buffer)) return nullptr;
    const tile::Store* store = stores[0];
    const Shape shape = shapes_.at(store->buffer);
    std::map<std::string, DType> outTypes;
    for (const tile::Store* each : stores) {
      const Stage* out = program_.source.findStage(each->buffer);
      if (!out || !shapes_.count(each->buffer) || shapes_.at(each->buffer) != shape ||
          dtypeBytes(out->dtype) != dtypeBytes(program_.source.findStage(store->buffer)->dtype) ||
          !sameIndices(each->indices, store->indices))
        return nullptr;
      outTypes[each->buffer] = out->dtype;
    }
    int elementBytes = dtypeBytes(outTypes.begin()->second);
    int width = node.vectorWidth;
    std::vector<std::string> aligned;
    for (const tile::Store* each : stores) aligned.push_back(each->buffer);
    std::map<std::string, DType> vectorReads;
    for (const tile::Store* each : stores)
      forEachNode(*each->value, [&](const Expr& e) {
        const auto* load = e.as<Load>();
        if (!load || load->padValue || !shapes_.count(load->tensor) || shapes_.at(load->tensor) != shape ||
            dtypeBytes(load->dtype) != elementBytes || !sameIndices(load->indices, store->indices))
          return;
        if (vectorReads.emplace(load->tensor, load->dtype).second) aligned.push_back(load->tensor);
      });
    auto local = [](const std::string& buffer) { return buffer + "__vector"; };
    auto var = [](const std::string& name) { return std::make_shared<AxisVar>(name); };
    std::string first = node.var + "__first", slot = node.var + "__slot", group = node.var + "__group", lane = node.var + "__lane";
    int64_t slots = kGroupsInFlight * width;  // elements of each local array
    for (const auto& [tensor, dtype] : vectorReads) shapes_[local(tensor)] = {Dim::constant(slots)};
    for (const tile::Store* each : stores) shapes_[local(each->buffer)] = {Dim::constant(slots)};

    ExprPtr slotStart = arithmetic(BinaryOp::Mul, var(slot), i64(width));
    std::vector<ExprPtr> laneIndex{arithmetic(BinaryOp::Add, slotStart, var(lane))};
    const std::vector<tile::StmtPtr> axisLets(flat.begin(), flat.begin() + lets);
    ExprPtr gridBegin = arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, blockIndex(), blockSize()), threadIndex());
    ExprPtr gridStep = arithmetic(BinaryOp::Mul, gridSize(), blockSize());
    ExprPtr total = expr(node.extent);
    ExprPtr groups = arithmetic(BinaryOp::Div, total, i64(width));
    ExprPtr groupStart = arithmetic(BinaryOp::Mul, var(group), i64(width));
    ExprPtr element = arithmetic(BinaryOp::Add, groupStart, var(lane));
    // Each slot: its group (a grid's stride after the previous slot's), and `body` where it exists.
    auto eachSlot = [&](StmtPtr inside) -> StmtPtr {
      ExprPtr groupOfSlot = arithmetic(BinaryOp::Add, var(first), arithmetic(BinaryOp::Mul, var(slot), gridStep));
      StmtPtr slotBody = std::make_shared<Block>(std::vector<StmtPtr>{
          std::make_shared<Let>(group, groupOfSlot),
          std::make_shared<If>(std::make_shared<Binary>(DType::Bool, BinaryOp::Lt, var(group), groups), inside)});
      return std::make_shared<For>(slot, i64(0), i64(kGroupsInFlight), i64(1), slotBody, true);
    };
    // The loop over groups, where every group lies in one row of each divisor (`inRows`: the divisors
    // are multiples of the width) or may end in the next one. In rows, a tensor read at the element's
    // remainder (a row vector b[d] beside x[n, d]) is read 16 bytes a group too.
    auto groupLoop = [&](bool inRows, std::vector<ExprPtr>& conditions, std::vector<std::string>& alignedBuffers) -> StmtPtr {
      std::vector<tile::StmtPtr> laneStmts = axisLets;
      DivisionsByLane divisions = divideOnceAGroup(laneStmts, node.var, lane, width, inRows);
      conditions = divisions.conditions;
      alignedBuffers = aligned;
      std::map<std::string, ExprPtr> defined{{node.var, element}};
      std::set<std::string> narrowing;  // outputs whose vectors are rounded from f32 a pair at a time
      for (const tile::StmtPtr& stmt : laneStmts)
        if (const auto* let = stmt->as<tile::Let>()) defined[let->var] = replaceVars(expr(let->value), defined);
      // The group's first element of a tensor read a row at a time, by tensor.
      std::map<std::string, std::pair<ExprPtr, DType>> rowReads;
      auto rowRead = [&](const Load& load) -> ExprPtr {
        if (!inRows || load.padValue || vectorReads.count(load.tensor) || !isGlobal(load.tensor) ||
            dtypeBytes(load.dtype) * width != 16)
          return nullptr;
        ExprPtr index = replaceVars(flatIndex(load.tensor, load.indices), defined);
        if (coefficientOf(*index, lane) != 1) return nullptr;
        ExprPtr start = replaceVars(index, {{lane, i64(0)}});
        return std::find(divisions.remainders.begin(), divisions.remainders.end(), printExpr(*start)) != divisions.remainders.end()
                   ? start
                   : nullptr;
      };
      for (const tile::Store* each : stores) {
        ExprPtr value = rewrite(each->value, [&](const Expr& e) -> ExprPtr {
          const auto* load = e.as<Load>();
          if (!load) return nullptr;
          if (ExprPtr start = rowRead(*load)) {
            rowReads.emplace(load->tensor, std::make_pair(start, load->dtype));
            return std::make_shared<Load>(load->dtype, local(load->tensor), laneIndex);
          }
          if (!vectorReads.count(load->tensor) || !sameIndices(load->indices, store->indices)) return nullptr;
          return std::make_shared<Load>(load->dtype, local(load->tensor), laneIndex);
        });
        ExprPtr wide = roundedFromF32(value, outTypes.at(each->buffer));
        if (wide) narrowing.insert(each->buffer);
        laneStmts.push_back(std::make_shared<tile::Store>(local(each->buffer), laneIndex, wide ? wide : value));
      }
      if (inRows && rowReads.empty()) return nullptr;  // the carrying loop does as well
      std::vector<StmtPtr> reads, compute;
      for (const auto& [tensor, dtype] : vectorReads) {
        reads.push_back(std::make_shared<Declare>(local(tensor), dtype, slots, Memory::Local));
        compute.push_back(std::make_shared<VectorLoad>(local(tensor), tensor, groupStart, 16, slotStart));
      }
      if (!compute.empty()) reads.push_back(eachSlot(std::make_shared<Block>(compute)));
      for (const tile::Store* each : stores)
        reads.push_back(std::make_shared<Declare>(local(each->buffer), narrowing.count(each->buffer) ? DType::F32 : outTypes.at(each->buffer),
                                                  slots, Memory::Local));
      std::vector<StmtPtr> computeSlot;
      for (const auto& [name, value] : divisions.ofGroup) computeSlot.push_back(std::make_shared<Let>(name, value(groupStart)));
      for (const auto& [tensor, read] : rowReads) {
        shapes_[local(tensor)] = {Dim::constant(slots)};
        reads.push_back(std::make_shared<Declare>(local(tensor), read.second, slots, Memory::Local));
        computeSlot.push_back(std::make_shared<VectorLoad>(local(tensor), tensor, read.first, 16, slotStart));
        alignedBuffers.push_back(tensor);
      }
      computeSlot.push_back(std::make_shared<For>(
          lane, i64(0), i64(width), i64(1),
          std::make_shared<Block>(std::vector<StmtPtr>{std::make_shared<Let>(node.var, element), lowerStmt(tile::Block(laneStmts))}),
          true));
      for (const tile::Store* each : stores)
        computeSlot.push_back(std::make_shared<VectorStore>(each->buffer, groupStart, local(each->buffer), 16, slotStart,
                                                            narrowing.count(each->buffer) > 0));
      reads.push_back(eachSlot(std::make_shared<Block>(computeSlot)));
      return std::make_shared<For>(first, gridBegin, groups, arithmetic(BinaryOp::Mul, gridStep, i64(kGroupsInFlight)),
                                   std::make_shared<Block>(reads));
    };
    StmtPtr tail = std::make_shared<For>(node.var, arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, groups, i64(width)), gridBegin),
                                         total, gridStep, lowerStmt(*node.body));
    auto addressesOf = [](const std::vector<std::string>& buffers) {
      std::vector<Address> addresses;
      for (const std::string& buffer : buffers) addresses.push_back({buffer, nullptr});
      return addresses;
    };
    std::vector<ExprPtr> conditions;
    std::vector<std::string> alignedBuffers;
    StmtPtr carrying = groupLoop(false, conditions, alignedBuffers);
    StmtPtr result = std::make_shared<IfAligned>(addressesOf(alignedBuffers), 16, conjunction(conditions),
                                                 std::make_shared<Block>(std::vector<StmtPtr>{carrying, tail}),
                                                 std::make_shared<For>(node.var, gridBegin, total, gridStep, lowerStmt(*node.body)));
    if (StmtPtr inRows = groupLoop(true, conditions, alignedBuffers))
      result = std::make_shared<IfAligned>(addressesOf(alignedBuffers), 16, conjunction(conditions),
                                           std::make_shared<Block>(std::vector<StmtPtr>{inRows, tail}), result);
    return result;
  }

  // The quotients and remainders of a flat index by sizes, which a fused axis's Lets compute for every
  // element (i = ij / D, j = ij % D: two 64-bit divisions, some 70 instructions), divided once a group of
  // `width` consecutive elements instead: an element's are the group's first element's, its lane added
  // to the remainder. Where the divisors are multiples of the width (`inRows`), a group lies in one row
  // and that is all; otherwise the lane is carried into the quotient once, which suffices when the
  // divisor is at least the width. `conditions` say which the vector path requires.
  struct DivisionsByLane {
    std::vector<std::pair<std::string, std::function<ExprPtr(const ExprPtr&)>>> ofGroup;  // a Let's name, its value from the group's first element
    std::vector<std::string> remainders;  // the remainders' names
    std::vector<ExprPtr> conditions;
  };
  // `flat` is the element's index, `lane` its index in its group.
  DivisionsByLane divideOnceAGroup(std::vector<tile::StmtPtr>& laneStmts, const std::string& flat, const std::string& lane,
                                   int width, bool inRows) {
    DivisionsByLane divisions;
    std::vector<ExprPtr> divisors;
    auto var = [](const std::string& name) { return std::make_shared<AxisVar>(name); };
    auto divisorIndex = [&](const ExprPtr& divisor) {
      for (size_t k = 0; k < divisors.size(); ++k)
        if (sameIndex(*divisors[k], *divisor)) return k;
      size_t k = divisors.size();
      divisors.push_back(divisor);
      std::string quotient = fmt::format("{}__quotient{}", flat, k), remainder = fmt::format("{}__remainder{}", flat, k);
      divisions.ofGroup.push_back({quotient, [divisor](const ExprPtr& first) { return arithmetic(BinaryOp::Div, first, divisor); }});
      divisions.ofGroup.push_back({remainder, [divisor](const ExprPtr& first) { return arithmetic(BinaryOp::Mod, first, divisor); }});
      divisions.remainders.push_back(remainder);
      divisions.conditions.push_back(inRows ? compare(BinaryOp::Eq, arithmetic(BinaryOp::Mod, divisor, i64(width)), i64(0))
                                            : compare(BinaryOp::Ge, divisor, i64(width)));
      return k;
    };
    for (tile::StmtPtr& stmt : laneStmts) {
      const auto* let = stmt->as<tile::Let>();
      if (!let) continue;
      ExprPtr value = rewrite(let->value, [&](const Expr& e) -> ExprPtr {
        const auto* binary = e.as<Binary>();
        const auto* dividend = binary ? binary->lhs->as<AxisVar>() : nullptr;
        if (!dividend || dividend->name != flat || binary->dtype != DType::I64 ||
            (binary->op != BinaryOp::Div && binary->op != BinaryOp::Mod) || binary->rhs->as<IntImm>())
          return nullptr;
        bool sizesOnly = true;
        forEachNode(*binary->rhs, [&](const Expr& node) { sizesOnly = sizesOnly && (node.as<SizeVar>() || node.as<IntImm>() || node.as<Binary>()); });
        if (!sizesOnly) return nullptr;
        size_t k = divisorIndex(binary->rhs);
        ExprPtr quotient = var(fmt::format("{}__quotient{}", flat, k));
        ExprPtr sum = arithmetic(BinaryOp::Add, var(divisions.remainders[k]), var(lane));
        if (inRows) return binary->op == BinaryOp::Div ? quotient : sum;
        ExprPtr carried = compare(BinaryOp::Ge, sum, binary->rhs);
        if (binary->op == BinaryOp::Div) return arithmetic(BinaryOp::Add, quotient, std::make_shared<Select>(carried, i64(1), i64(0)));
        return arithmetic(BinaryOp::Sub, sum, std::make_shared<Select>(carried, binary->rhs, i64(0)));
      });
      if (value != let->value) stmt = std::make_shared<tile::Let>(let->var, value);
    }
    return divisions;
  }

  // Are `a` and `b` the same axis variables, one by one?
  static bool sameIndices(const std::vector<ExprPtr>& a, const std::vector<ExprPtr>& b) {
    if (a.size() != b.size()) return false;
    for (size_t d = 0; d < a.size(); ++d) {
      const auto* x = a[d]->as<AxisVar>();
      const auto* y = b[d]->as<AxisVar>();
      if (!x || !y || x->name != y->name) return false;
    }
    return true;
  }

  // Is `e` a multiple of `n` for every value of its variables?
  static bool multipleOf(const Expr& e, int64_t n) {
    if (const auto* constant = e.as<IntImm>()) return constant->value % n == 0;
    const auto* binary = e.as<Binary>();
    if (!binary || binary->dtype != DType::I64) return false;
    if (binary->op == BinaryOp::Mul) return multipleOf(*binary->lhs, n) || multipleOf(*binary->rhs, n);
    if (binary->op == BinaryOp::Add || binary->op == BinaryOp::Sub) return multipleOf(*binary->lhs, n) && multipleOf(*binary->rhs, n);
    return false;
  }

  static ExprPtr replaceVars(const ExprPtr& e, const std::map<std::string, ExprPtr>& values) {
    return simplifyIndex(rewrite(e, [&](const Expr& node) -> ExprPtr {
      const auto* axis = node.as<AxisVar>();
      auto value = axis ? values.find(axis->name) : values.end();
      return value == values.end() ? nullptr : value->second;
    }));
  }

  // A vectorized unrolled loop (`vectorize`) whose body is Lets and Guards around one store, to a global
  // tensor at consecutive elements or to a thread's own accumulator: when the addresses are aligned and
  // every lane is in bounds, the global store and the reads of consecutive elements of the same size
  // become vector accesses through local arrays (one of 8 or 16 bytes, or two of 16 for 8 floats);
  // otherwise the lanes run one by one. Before an accumulator's store, stores to shared elements that
  // the lanes read (a term kept in a row's copy) go to the read's local array, stored back whole after
  // the lanes. Null when the body has another shape.
  StmtPtr lowerVectorLanes(const tile::Loop& node) {
    const std::string& lane = node.var;
    int width = node.vectorWidth;
    std::vector<const tile::Let*> lets;
    std::vector<ExprPtr> guards;
    std::vector<const tile::Store*> stores;
    std::function<bool(const tile::Stmt&)> flatten = [&](const tile::Stmt& stmt) {
      if (const auto* block = stmt.as<tile::Block>())
        return std::all_of(block->stmts.begin(), block->stmts.end(), [&](const tile::StmtPtr& s) { return flatten(*s); });
      if (const auto* let = stmt.as<tile::Let>()) return lets.push_back(let), stores.empty();
      if (const auto* guard = stmt.as<tile::Guard>()) return guards.push_back(guard->condition), stores.empty() && flatten(*guard->body);
      if (const auto* found = stmt.as<tile::Store>()) return stores.push_back(found), true;
      return false;
    };
    if (!flatten(*node.body) || stores.empty()) return nullptr;
    const tile::Store* store = stores.back();
    const std::vector<const tile::Store*> writeBacks(stores.begin(), stores.end() - 1);
    bool globalStore = isGlobal(store->buffer);
    if (globalStore && !writeBacks.empty()) return nullptr;
    // Every variable the lanes define, as an expression of the lane and what is outside.
    std::map<std::string, ExprPtr> defined;
    for (const tile::Let* let : lets) defined[let->var] = replaceVars(expr(let->value), defined);
    auto resolved = [&](const ExprPtr& e) { return replaceVars(e, defined); };
    auto at = [&](const ExprPtr& e, int64_t value) { return replaceVars(e, {{lane, i64(value)}}); };
    // A read of consecutive elements, of global memory or of a shared buffer at whole vectors (whose
    // alignment is then known: it needs no test).
    auto consecutive = [&](const Load& load) {
      bool shared = shared_.count(load.tensor) > 0;
      if (load.padValue || (!isGlobal(load.tensor) && !shared)) return false;
      ExprPtr index = resolved(flatIndex(load.tensor, load.indices));
      return coefficientOf(*index, lane) == 1 && (!shared || multipleOf(*at(index, 0), width));
    };
    // The element the vectors hold: the stored one, or for an accumulator, the first one read.
    std::optional<DType> elementType;
    if (globalStore)
      elementType = program_.source.findStage(store->buffer) ? program_.source.findStage(store->buffer)->dtype : store->value->dtype;
    else
      forEachNode(*store->value, [&](const Expr& e) {
        if (const auto* load = e.as<Load>(); load && !elementType && consecutive(*load)) elementType = load->dtype;
      });
    if (!elementType) return nullptr;
    // One access of 8 or 16 bytes, or 16-byte accesses for 32 (8 floats).
    int bytes = width * dtypeBytes(*elementType);
    ExprPtr storeIndex = globalStore ? resolved(flatIndex(store->buffer, store->indices)) : nullptr;
    if ((bytes != 8 && bytes != 16 && bytes != 32) || (globalStore && coefficientOf(*storeIndex, lane) != 1)) return nullptr;
    int access = std::min(bytes, 16), pieces = bytes / access, piece = width / pieces;
    // Every lane in bounds: a comparison that is affine in the lane holds at every lane where it holds at
    // its tightest end, the last lane for one that tightens as the lane grows, else the first.
    std::function<ExprPtr(const ExprPtr&)> atEveryLane = [&](const ExprPtr& condition) -> ExprPtr {
      // not (a < b) is a >= b, and so on.
      static const std::map<BinaryOp, BinaryOp> kNegated = {
          {BinaryOp::Lt, BinaryOp::Ge}, {BinaryOp::Ge, BinaryOp::Lt}, {BinaryOp::Le, BinaryOp::Gt}, {BinaryOp::Gt, BinaryOp::Le}};
      if (const auto* unary = condition->as<Unary>(); unary && unary->op == UnaryOp::Not) {
        const auto* compared = unary->operand->as<Binary>();
        auto negated = compared ? kNegated.find(compared->op) : kNegated.end();
        if (negated != kNegated.end())
          return atEveryLane(std::make_shared<Binary>(DType::Bool, negated->second, compared->lhs, compared->rhs));
      }
      const auto* binary = condition->as<Binary>();
      if (binary && binary->op == BinaryOp::And) {
        ExprPtr lhs = atEveryLane(binary->lhs), rhs = atEveryLane(binary->rhs);
        return lhs && rhs ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, lhs, rhs) : nullptr;
      }
      if (coefficientOf(*condition, lane) == 0) return condition;
      bool comparison = binary && (binary->op == BinaryOp::Lt || binary->op == BinaryOp::Le ||
                                   binary->op == BinaryOp::Gt || binary->op == BinaryOp::Ge);
      std::optional<int64_t> lhs = comparison ? coefficientOf(*binary->lhs, lane) : std::nullopt;
      std::optional<int64_t> rhs = comparison ? coefficientOf(*binary->rhs, lane) : std::nullopt;
      if (!lhs || !rhs) return nullptr;
      bool below = binary->op == BinaryOp::Lt || binary->op == BinaryOp::Le;
      return at(condition, below == (*lhs >= *rhs) ? width - 1 : 0);
    };
    std::vector<ExprPtr> inBounds;
    for (const ExprPtr& guard : guards) {
      ExprPtr everyLane = atEveryLane(resolved(expr(guard)));
      if (!everyLane) return nullptr;
      inBounds.push_back(everyLane);
    }
    // The reads of consecutive elements of the same size: read whole before the lanes, each into a local
    // array of its own dtype (an i32 read next to an f32 store is not a float).
    struct VectorRead {
      ExprPtr first;  // its first element
      DType dtype;
    };
    std::map<std::string, VectorRead> vectorReads;  // by tensor
    bool consistent = true;
    for (const tile::Store* each : stores)
      forEachNode(*each->value, [&](const Expr& e) {
        const auto* load = e.as<Load>();
        if (!load || !consecutive(*load) || dtypeBytes(load->dtype) != dtypeBytes(*elementType)) return;
        ExprPtr first = at(resolved(flatIndex(load->tensor, load->indices)), 0);
        auto [it, fresh] = vectorReads.emplace(load->tensor, VectorRead{first, load->dtype});
        consistent = consistent && (fresh || sameIndex(*it->second.first, *first));
      });
    // A store back is to the element the lanes read, of its type.
    for (const tile::Store* writeBack : writeBacks) {
      auto read = vectorReads.find(writeBack->buffer);
      ExprPtr index = resolved(flatIndex(writeBack->buffer, writeBack->indices));
      consistent = consistent && shared_.count(writeBack->buffer) && read != vectorReads.end() &&
                   read->second.dtype == writeBack->value->dtype && coefficientOf(*index, lane) == 1 &&
                   sameIndex(*at(index, 0), *read->second.first);
    }
    if (!consistent) return nullptr;
    // A vector read happens whole, before the lanes. One of the stored element of a tensor shaped like the
    // store's is inside where the store is; any other under a select may be inside only where the select
    // takes its branch, which must then hold at every lane.
    auto mayLeave = [&](const Expr& e) {
      bool found = false;
      forEachNode(e, [&](const Expr& node) {
        const auto* load = node.as<Load>();
        if (!load || !vectorReads.count(load->tensor)) return;
        bool likeStore = globalStore && shapes_.count(load->tensor) && shapes_.count(store->buffer) &&
                         shapes_.at(load->tensor) == shapes_.at(store->buffer) &&
                         sameIndex(*resolved(flatIndex(load->tensor, load->indices)), *storeIndex);
        found = found || !likeStore;
      });
      return found;
    };
    bool selectsHold = true;
    std::map<const Select*, ExprPtr> takenBranch;  // a select that holds at every lane of the vector path
    for (const tile::Store* each : stores)
      forEachNode(*each->value, [&](const Expr& e) {
        const auto* select = e.as<Select>();
        if (!select || !selectsHold) return;
        bool whenTrue = mayLeave(*select->ifTrue), whenFalse = mayLeave(*select->ifFalse);
        if (!whenTrue && !whenFalse) return;
        ExprPtr taken = whenTrue ? select->condition : std::make_shared<Unary>(DType::Bool, UnaryOp::Not, select->condition);
        ExprPtr everyLane = whenTrue != whenFalse && !mayLeave(*select->condition) ? atEveryLane(resolved(taken)) : nullptr;
        selectsHold = everyLane != nullptr;
        if (everyLane) inBounds.push_back(everyLane);
        if (everyLane) takenBranch[select] = whenTrue ? select->ifTrue : select->ifFalse;
      });
    if (!selectsHold) return nullptr;
    auto local = [](const std::string& buffer) { return buffer + "__lanes"; };
    std::vector<ExprPtr> laneIndex{std::make_shared<AxisVar>(lane)};
    // In the vector path, the vector reads from the local arrays, and the selects the path's test decides
    // by their branch (so that a lane is not tested again, nor the loaded vector used before it is stored).
    std::function<ExprPtr(const Expr&)> inVectorPath = [&](const Expr& e) -> ExprPtr {
      if (const auto* select = e.as<Select>(); select && takenBranch.count(select)) return rewrite(takenBranch.at(select), inVectorPath);
      const auto* load = e.as<Load>();
      if (!load || !vectorReads.count(load->tensor) || load->padValue) return nullptr;
      ExprPtr index = resolved(flatIndex(load->tensor, load->indices));
      if (coefficientOf(*index, lane) != 1) return nullptr;
      return std::make_shared<Load>(load->dtype, local(load->tensor), laneIndex);
    };
    ExprPtr value = rewrite(store->value, inVectorPath);
    if (!globalStore && vectorReads.empty()) return nullptr;
    for (const auto& [tensor, read] : vectorReads) shapes_[local(tensor)] = {Dim::constant(width)};
    std::vector<Address> addresses;
    if (globalStore) addresses.push_back({store->buffer, at(storeIndex, 0)});
    std::vector<StmtPtr> vectorPath;
    for (const auto& [tensor, read] : vectorReads) {
      if (!shared_.count(tensor)) addresses.push_back({tensor, read.first});
      vectorPath.push_back(std::make_shared<Declare>(local(tensor), read.dtype, width, Memory::Local));
      for (int k = 0; k < pieces; ++k)
        vectorPath.push_back(std::make_shared<VectorLoad>(local(tensor), tensor, arithmetic(BinaryOp::Add, read.first, i64(k * piece)),
                                                          access, k ? i64(k * piece) : nullptr));
    }
    std::vector<tile::StmtPtr> laneStmts;
    for (const tile::Let* let : lets) laneStmts.push_back(std::make_shared<tile::Let>(let->var, let->value));
    for (const tile::Store* writeBack : writeBacks)
      laneStmts.push_back(std::make_shared<tile::Store>(local(writeBack->buffer), laneIndex, rewrite(writeBack->value, inVectorPath)));
    ExprPtr wide = globalStore ? roundedFromF32(value, *elementType) : nullptr;
    if (globalStore) {
      shapes_[local(store->buffer)] = {Dim::constant(width)};
      vectorPath.push_back(std::make_shared<Declare>(local(store->buffer), wide ? DType::F32 : *elementType, width, Memory::Local));
      laneStmts.push_back(std::make_shared<tile::Store>(local(store->buffer), laneIndex, wide ? wide : value));
    } else {
      laneStmts.push_back(std::make_shared<tile::Store>(store->buffer, store->indices, value));
    }
    vectorPath.push_back(std::make_shared<For>(lane, i64(0), i64(width), i64(1), lowerStmt(tile::Block(laneStmts)), true));
    if (!writeBacks.empty()) {
      for (const tile::Store* writeBack : writeBacks)
        for (int k = 0; k < pieces; ++k)
          vectorPath.push_back(std::make_shared<VectorStore>(
              writeBack->buffer, arithmetic(BinaryOp::Add, vectorReads.at(writeBack->buffer).first, i64(k * piece)),
              local(writeBack->buffer), access, k ? i64(k * piece) : nullptr, false));
    } else if (StmtPtr combined = globalStore ? nullptr : combineLanes(*store, value, lane, width)) {
      vectorPath.back() = combined;
    } else if (globalStore) {
      for (int k = 0; k < pieces; ++k)
        vectorPath.push_back(std::make_shared<VectorStore>(store->buffer, arithmetic(BinaryOp::Add, at(storeIndex, 0), i64(k * piece)),
                                                           local(store->buffer), access, k ? i64(k * piece) : nullptr,
                                                           wide != nullptr));
    }
    if (addresses.empty() && inBounds.empty()) return std::make_shared<Block>(vectorPath);
    StmtPtr lanes = std::make_shared<For>(lane, i64(0), i64(width), i64(1), lowerStmt(*node.body), true);
    return std::make_shared<IfAligned>(addresses, access, inBounds.empty() ? nullptr : conjunction(inBounds),
                                       std::make_shared<Block>(vectorPath), lanes);
  }

  // The lanes of a vector path whose store only folds the vector's f16 or bf16 lanes into an f32 max or min,
  // acc = max(acc, f32(v[lane])): one CombineLanes, a pair of lanes at a time. Null for any other store.
  StmtPtr combineLanes(const tile::Store& store, const ExprPtr& value, const std::string& lane, int width) {
    const auto* fold = value->as<Binary>();
    if (!fold || (fold->op != BinaryOp::Max && fold->op != BinaryOp::Min) || fold->dtype != DType::F32 || width % 2 != 0)
      return nullptr;
    auto isAccumulator = [&](const ExprPtr& e) {
      const auto* load = e->as<Load>();
      return load && load->tensor == store.buffer && sameIndices(load->indices, store.indices);
    };
    auto laneRead = [&](const ExprPtr& e) -> const Load* {
      const auto* cast = e->as<Cast>();
      const auto* load = cast && cast->dtype == DType::F32 ? cast->operand->as<Load>() : nullptr;
      if (!load || (load->dtype != DType::F16 && load->dtype != DType::BF16) || load->indices.size() != 1) return nullptr;
      const auto* index = load->indices[0]->as<AxisVar>();
      return index && index->name == lane ? load : nullptr;
    };
    const Load* lanes = isAccumulator(fold->lhs) ? laneRead(fold->rhs) : isAccumulator(fold->rhs) ? laneRead(fold->lhs) : nullptr;
    if (!lanes) return nullptr;
    return std::make_shared<CombineLanes>(store.buffer, flatIndex(store.buffer, store.indices), fold->op, lanes->tensor, width);
  }

  // The f32 value `v` of a store's value f16(v) or bf16(v): the vector's values are kept in f32 and its
  // store rounds them a pair at a time (VectorStore::narrowing). Null where the store rounds no f32 value.
  static ExprPtr roundedFromF32(const ExprPtr& value, DType stored) {
    const auto* cast = value->as<Cast>();
    if ((stored != DType::F16 && stored != DType::BF16) || !cast || cast->dtype != stored || cast->operand->dtype != DType::F32)
      return nullptr;
    return cast->operand;
  }

  bool isGlobal(const std::string& buffer) const {
    const Kernel& source = program_.source;
    auto named = [&](const TensorParam& p) { return p.name == buffer; };
    return std::any_of(source.inputs.begin(), source.inputs.end(), named) ||
           std::any_of(source.outputs.begin(), source.outputs.end(), named) ||
           std::any_of(program_.temporaries.begin(), program_.temporaries.end(),
                       [&](const loop::Temporary& t) { return t.name == buffer; });
  }

  StmtPtr lowerNode(const tile::Let& node) { return std::make_shared<Let>(node.var, expr(node.value)); }

  StmtPtr lowerNode(const tile::Allocate& node) {
    int64_t count = 1;
    for (const Dim& dim : node.shape) {
      EMMY_INTERNAL_ASSERT(dim.isConstant(), "buffer {} has a symbolic extent", node.buffer);
      count *= dim.factor;
    }
    if (!node.shape.empty()) shapes_[node.buffer] = node.shape;
    if (node.scope == tile::MemoryScope::Shared) shared_.insert(node.buffer);
    StmtPtr declare = std::make_shared<Declare>(node.buffer, node.dtype, count,
                                                node.scope == tile::MemoryScope::Shared ? Memory::Shared : Memory::Local,
                                                node.sizedAtLaunch);
    return std::make_shared<Block>(std::vector<StmtPtr>{declare, lowerStmt(*node.body)});
  }

  StmtPtr lowerNode(const tile::Store& node) {
    return std::make_shared<Store>(node.buffer, flatIndex(node.buffer, node.indices), expr(node.value), node.atomic);
  }

  StmtPtr lowerNode(const tile::SingleThread& node) {
    ExprPtr first;
    for (int dimension : node.dimensions) {
      if (nest_.threads[dimension] == 1) continue;
      ExprPtr atZero = compare(BinaryOp::Eq, threadIndex(dimension), i64(0));
      first = first ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, first, atZero) : atZero;
    }
    return first ? std::make_shared<If>(first, lowerStmt(*node.body)) : lowerStmt(*node.body);
  }

  // A combine across the threads that differ only in x (or y, or z). The barriers around shared arrays
  // are placed by place_barriers.cpp.
  StmtPtr lowerNode(const tile::CrossThreadReduce& node) {
    const std::array<int, 3>& t = nest_.threads;
    if (node.dimension != 0) return combineThroughSharedMemory(node);
    int rows = t[1] * t[2];
    bool powerOfTwo = (t[0] & (t[0] - 1)) == 0;
    // (A block of one warp is combined by its shuffles alone, with no shared memory or barrier.)
    if (t[0] <= kWarpSize && powerOfTwo && (t[0] * rows) % kWarpSize == 0) return combineWithinWarps(node);
    if (rows == 1 && t[0] % kWarpSize == 0) return combineBlock(node);
    return combineThroughSharedMemory(node);
  }

  // Each row of x lanes lies within one warp: shuffles over the lanes of the row.
  StmtPtr combineWithinWarps(const tile::CrossThreadReduce& node) {
    std::vector<StmtPtr> stmts;
    for (int mask = nest_.threads[0] / 2; mask >= 1; mask /= 2)
      stmts.push_back(std::make_shared<ShuffleCombine>(node.buffer, node.dtype, reductionStep(node.op), mask));
    return std::make_shared<Block>(stmts);
  }

  // Any shape: every thread publishes its partial result, then folds those of its row (the threads that
  // differ only in the combined index) in order.
  StmtPtr combineThroughSharedMemory(const tile::CrossThreadReduce& node) {
    const std::array<int, 3>& t = nest_.threads;
    std::string partials = node.buffer + "__partials", lane = node.buffer + "__lane";
    ExprPtr own = std::make_shared<Load>(node.dtype, node.buffer, std::vector<ExprPtr>{});
    int64_t stride = node.dimension == 0 ? 1 : node.dimension == 1 ? t[0] : t[0] * t[1];
    ExprPtr rowStart = arithmetic(BinaryOp::Sub, linearThreadIndex(),
                                  arithmetic(BinaryOp::Mul, threadIndex(node.dimension), i64(stride)));
    ExprPtr published = std::make_shared<Load>(
        node.dtype, partials,
        std::vector<ExprPtr>{arithmetic(BinaryOp::Add, rowStart,
                                        arithmetic(BinaryOp::Mul, std::make_shared<AxisVar>(lane), i64(stride)))});
    return std::make_shared<Block>(std::vector<StmtPtr>{
        std::make_shared<Declare>(partials, node.dtype, t[0] * t[1] * t[2], Memory::Shared),
        std::make_shared<Store>(partials, linearThreadIndex(), own),
        std::make_shared<Store>(node.buffer, nullptr, immediateOf(reductionIdentity(node.op, node.dtype))),
        std::make_shared<For>(lane, i64(0), i64(t[node.dimension]), i64(1),
                              std::make_shared<Store>(node.buffer, nullptr,
                                                      std::make_shared<Binary>(node.dtype, reductionStep(node.op), own,
                                                                               published)))});
  }

  // A one-dimensional block of whole warps: every warp combines its lanes; lane 0 of each warp
  // publishes its warp's result; then every warp combines the published results, so that every thread
  // ends with the total.
  StmtPtr combineBlock(const tile::CrossThreadReduce& node) {
    BinaryOp step = reductionStep(node.op);
    int warps = (nest_.threads[0] + kWarpSize - 1) / kWarpSize;
    std::string partials = node.buffer + "__partials";
    auto combineWarp = [&](std::vector<StmtPtr>& out) {
      for (int mask = kWarpSize / 2; mask >= 1; mask /= 2)
        out.push_back(std::make_shared<ShuffleCombine>(node.buffer, node.dtype, step, mask));
    };
    ExprPtr lane = arithmetic(BinaryOp::Mod, threadIndex(), i64(kWarpSize));
    ExprPtr warp = arithmetic(BinaryOp::Div, threadIndex(), i64(kWarpSize));
    ExprPtr own = std::make_shared<Load>(node.dtype, node.buffer, std::vector<ExprPtr>{});
    std::vector<StmtPtr> stmts;
    combineWarp(stmts);
    stmts.push_back(std::make_shared<Declare>(partials, node.dtype, warps, Memory::Shared));
    stmts.push_back(std::make_shared<If>(compare(BinaryOp::Eq, lane, i64(0)),
                                         std::make_shared<Store>(partials, warp, own)));
    ExprPtr published = std::make_shared<Load>(node.dtype, partials, std::vector<ExprPtr>{lane});
    stmts.push_back(std::make_shared<Store>(
        node.buffer, nullptr,
        std::make_shared<Select>(compare(BinaryOp::Lt, lane, i64(warps)), published,
                                 immediateOf(reductionIdentity(node.op, node.dtype)))));
    combineWarp(stmts);
    return std::make_shared<Block>(stmts);
  }

  StmtPtr lowerNode(const tile::CopyAsync& node) {
    return std::make_shared<CopyAsync>(node.buffer, flatIndex(node.buffer, node.indices), node.source,
                                       flatIndex(node.source, node.sourceIndices), expr(node.condition), node.dtype,
                                       node.lanes, node.lanesInside ? expr(node.lanesInside) : nullptr);
  }

  StmtPtr lowerNode(const tile::WaitForCopies& node) { return std::make_shared<WaitForCopies>(node.pending); }

  StmtPtr lowerNode(const tile::MatrixProduct& node) {
    GlobalIndexing indexing{[&](const std::string& tensor, const std::vector<ExprPtr>& indices) { return flatIndex(tensor, indices); },
                            [&](const ExprPtr& e) { return expr(e); },
                            [&](const std::string& tensor, const std::vector<ExprPtr>& indices) { return inBounds(tensor, indices); }};
    return lowerMatrixProduct(node, indexing);
  }

  StmtPtr lowerNode(const tile::Guard& node) {
    return std::make_shared<If>(expr(node.condition), lowerStmt(*node.body));
  }

  StmtPtr lowerNode(const tile::Block& node) {
    std::vector<StmtPtr> stmts;
    for (const tile::StmtPtr& inner : node.stmts) stmts.push_back(lowerStmt(*inner));
    return std::make_shared<Block>(stmts);
  }

  // The row-major position of `indices` in `buffer`, or null for a scalar local.
  ExprPtr flatIndex(const std::string& buffer, const std::vector<ExprPtr>& indices) {
    auto shape = shapes_.find(buffer);
    if (shape == shapes_.end()) {
      EMMY_INTERNAL_ASSERT(indices.empty(), "local {} is indexed", buffer);
      return nullptr;
    }
    ExprPtr flat;
    for (size_t d = 0; d < indices.size(); ++d) {
      ExprPtr index = expr(indices[d]);
      flat = flat ? arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, flat, dimValue(shape->second[d])), index)
                  : index;
    }
    return flat ? flat : i64(0);  // a rank-0 global
  }

  // Loads indexed flat; a padded load reads only when it is in bounds.
  ExprPtr expr(const ExprPtr& e) {
    return rewrite(e, [&](const Expr& node) -> ExprPtr {
      const auto* load = node.as<Load>();
      if (!load) return nullptr;
      ExprPtr index = flatIndex(load->tensor, load->indices);
      ExprPtr flat = std::make_shared<Load>(load->dtype, load->tensor,
                                            index ? std::vector<ExprPtr>{index} : std::vector<ExprPtr>{});
      if (!load->padValue) return flat;
      return std::make_shared<Select>(inBounds(load->tensor, load->indices), flat, expr(load->padValue));
    });
  }

  // Every index of a read of `tensor` is inside its dimension.
  ExprPtr inBounds(const std::string& tensor, const std::vector<ExprPtr>& indices) {
    ExprPtr inside;
    const Shape& shape = shapes_.at(tensor);
    for (size_t d = 0; d < indices.size(); ++d) {
      ExprPtr index = expr(indices[d]);
      ExprPtr ok = std::make_shared<Binary>(DType::Bool, BinaryOp::And, compare(BinaryOp::Ge, index, i64(0)),
                                            compare(BinaryOp::Lt, index, dimValue(shape[d])));
      inside = inside ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, inside, ok) : ok;
    }
    return inside;
  }

  const tile::Program& program_;
  const tile::TileNest& nest_;
  std::map<std::string, Shape> shapes_;  // of global buffers (and shaped locals)
  std::set<std::string> shared_;         // shared buffers (each starts on a 16-byte boundary)
};

}  // namespace

Program lowerTileToKernel(const tile::Program& program) {
  Program lowered{program.source, program.temporaries, {}};
  for (const tile::TileNest& nest : program.kernels) lowered.functions.push_back(Lowering(program, nest).lower());
  return lowered;
}

}  // namespace emmy::kernel
