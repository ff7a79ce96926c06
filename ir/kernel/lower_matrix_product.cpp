// The block-level product of one block's tile (tile::MatrixProduct), thread by thread: on the tensor
// cores for f16 and bf16 operands, on the CUDA cores for f32.
//
// Tensor cores: shared memory holds `stages` slices of each operand, as rows of 16-byte chunks along the
// operand's contiguous dimension (k, or its rows or columns). Chunk c of row r sits at chunk
// (c + shift(r)) % C of its row (C chunks a row), the shift growing by one every 128 bytes of rows: the 8
// rows an ldmatrix phase reads, and the 8 chunks a phase of copies writes, then lie in the 8 different
// 16-byte groups of the 32 banks (a rotation, which does what the usual XOR swizzle does with + and %
// only).
//
// CUDA cores: both operands' slices are k-major in shared memory (a row per k), so that each lane reads
// its 4 x 4 groups of A and B with 16-byte loads (tile::kLaneRows). An operand whose k is contiguous in
// memory is transposed by its copies, an element each, the 32 lanes of a warp taking 8 of k by 4 rows
// (whole 32-byte sectors of global memory); its shared rows get 4 more elements, so that those 32
// writes fall in 32 banks. The fragments of the next k are loaded before the multiplications of this
// one (two sets of registers), and every step multiplies without a guard: a slice's elements past the
// end of k are copied as zeros.
//
// The k loop keeps `stages` - 1 slices in flight: before slice s is used, the copies of slice
// s + stages - 1 (if there is one) start into the stage slice s - 1 used, each step having waited until
// its own copies of slice s are done and then passed one barrier (after which every thread's are, and
// every warp's reads of slice s - 1 are over). Each stage is a buffer of its own and the loop is unrolled by the
// ring's depth, so that the barrier analysis, which knows buffers and not their parts, needs no barrier
// between a step's copies and its reads. Each warp then loads, per 16 of k, its A fragments (one ldmatrix.x4 per 16 rows) and its B
// fragments (one per 16 columns, two n8 tiles), and issues one mma.sync per 16 x 8 accumulator tile.
#include "ir/kernel/lower_matrix_product.h"

#include <functional>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/simplify.h"
#include "ir/tile/matrix_product.h"
#include "support/diagnostics.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

ExprPtr i64(int64_t value) { return std::make_shared<IntImm>(DType::I64, value); }
ExprPtr var(const std::string& name) { return std::make_shared<AxisVar>(name); }
ExprPtr op(BinaryOp o, ExprPtr a, ExprPtr b) { return simplifyIndex(std::make_shared<Binary>(DType::I64, o, std::move(a), std::move(b))); }
ExprPtr add(ExprPtr a, ExprPtr b) { return op(BinaryOp::Add, std::move(a), std::move(b)); }
ExprPtr mul(ExprPtr a, int64_t b) { return op(BinaryOp::Mul, std::move(a), i64(b)); }
ExprPtr div(ExprPtr a, int64_t b) { return op(BinaryOp::Div, std::move(a), i64(b)); }
ExprPtr mod(ExprPtr a, int64_t b) { return op(BinaryOp::Mod, std::move(a), i64(b)); }
ExprPtr less(ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, BinaryOp::Lt, std::move(a), std::move(b)); }
ExprPtr both(ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, BinaryOp::And, std::move(a), std::move(b)); }
StmtPtr block(std::vector<StmtPtr> stmts) { return std::make_shared<Block>(std::move(stmts)); }
StmtPtr let(const std::string& name, ExprPtr value) { return std::make_shared<Let>(name, std::move(value)); }
void appendTo(std::vector<StmtPtr>& stmts, std::vector<StmtPtr> more) {
  stmts.insert(stmts.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}
StmtPtr unrolled(const std::string& name, int64_t count, StmtPtr body) {
  return std::make_shared<For>(name, i64(0), i64(count), i64(1), std::move(body), true);
}

constexpr int64_t kWarp = 32;

// One operand's slices in shared memory: `outer` rows of `inner` elements each, `stride` apart.
struct OperandTiles {
  const tile::MatrixOperand* operand;
  const std::vector<std::pair<std::string, ExprPtr>>* axes;  // fused into its row (or column) variable
  std::string buffer;
  std::string var;        // its row (or column) variable in the operand's indices
  ExprPtr base, limit;    // the block's first row (or column), and their number
  int64_t extent;         // rows (or columns) in the block's tile
  int64_t outer, inner;   // the slice's shape in shared memory: kContiguous ? extent x depth : depth x extent
  int64_t stride;         // of its rows: inner, and more for the rows an f32 transposing copy writes
  bool rotated;           // chunks rotated by their row (the tensor cores' layout)
  bool transposed;        // copied an element at a time into a k-major slice (f32 with k contiguous)
  int64_t chunkElements() const { return 16 / dtypeBytes(operand->dtype); }
  int64_t chunks() const { return inner / chunkElements(); }
  std::string stageBuffer(int64_t stage) const { return fmt::format("{}_{}", buffer, stage); }
  // Where the thread's copies of a slice are, when the block's threads take whole rounds whose layout
  // repeats (the usual tiles): the row, column and shared element of its first (Lets made once, before
  // the k loop), each round `rowsPerRound` rows (transposed: columns) further; `rounds` is 0 otherwise.
  int64_t rounds = 0, rowsPerRound = 0;
  std::string firstRow, column, firstElement;
  // On the CUDA cores, with rounds: each round's first row (or column) and global element, and the
  // global elements from one slice to the next, are Lets too, so that a copy costs a few instructions.
  bool hoisted = false;
  // The slice's rows are contiguous in memory too (the flat index steps by one along them, no padding):
  // copied 16 bytes at a time; gathered an element at a time otherwise.
  bool chunked = true;
  bool affineInK = true;  // the flat index steps by the same amount for every k, and no padding
  std::string along(int64_t round) const { return fmt::format("{}_along_{}", buffer, round); }
  std::string source(int64_t round) const { return fmt::format("{}_source_{}", buffer, round); }
  std::string sliceStep() const { return buffer + "_slice_step"; }
  std::string staging() const { return buffer + "_staging"; }
  int64_t sliceElements() const { return outer * stride; }
  // Where chunk `chunk` of row `row` is; rotated, by one chunk for every 128 bytes of rows.
  ExprPtr element(const ExprPtr& row, const ExprPtr& chunk) const {
    if (!rotated) return add(mul(row, stride), mul(chunk, chunkElements()));
    int64_t rowsPer128Bytes = std::max<int64_t>(1, tile::kMatrixRowElements / chunks());
    ExprPtr shift = mod(div(row, rowsPer128Bytes), std::min<int64_t>(chunks(), tile::kMatrixRowElements));
    return add(mul(row, inner), mul(mod(add(chunk, shift), chunks()), tile::kMatrixRowElements));
  }
};

class ProductLowering {
public:
  ProductLowering(const tile::MatrixProduct& node, const GlobalIndexing& indexing)
      : node_(node), indexing_(indexing), tensorCores_(tile::onTensorCores(node.a.dtype)) {
    const std::string& p = node.name + "__";
    lane_ = p + "lane", warpRow_ = p + "warp_row", warpCol_ = p + "warp_col", thread_ = p + "thread";
    accumulators_ = p + "accumulators", aFragments_ = p + "a_fragments", bFragments_ = p + "b_fragments";
    slice_ = p + "slice", slices_ = p + "slices";
    for (const auto* axes : {&node.rowAxes, &node.colAxes, &node.depthAxes})
      for (const auto& [axis, value] : *axes) axisValues_[axis] = value;
    a_ = tiles(node.a, &node.rowAxes, p + "a_slices", node.row, node.rowBase, node.rows, node.blockRows);
    b_ = tiles(node.b, &node.colAxes, p + "b_slices", node.col, node.colBase, node.cols, node.blockCols);
    if (tensorCores_) {
      rowTiles_ = node.warpRows / tile::kMmaRows;
      colTiles_ = node.warpCols / tile::kMmaCols;
    } else {
      laneRow_ = p + "lane_row", laneCol_ = p + "lane_col";
      rowGroups_ = node.warpRows / (tile::kLaneRows * tile::kLaneGroup);
      colGroups_ = node.warpCols / (tile::kLaneCols * tile::kLaneGroup);
    }
  }

  StmtPtr lower() {
    std::vector<StmtPtr> stmts;
    int64_t warpCols = node_.blockCols / node_.warpCols;
    stmts.push_back(let(lane_, threadIndex(0)));
    stmts.push_back(let(warpCol_, threadIndex(1)));
    stmts.push_back(let(warpRow_, threadIndex(2)));
    stmts.push_back(let(thread_, add(var(lane_), mul(add(var(warpCol_), mul(var(warpRow_), warpCols)), kWarp))));
    for (const OperandTiles* tiles : {&a_, &b_})
      for (int64_t stage = 0; stage < node_.stages; ++stage)
        stmts.push_back(std::make_shared<Declare>(tiles->stageBuffer(stage), tiles->operand->dtype, tiles->sliceElements(), Memory::Shared));
    int64_t accumulators = node_.warpRows * node_.warpCols / kWarp;
    stmts.push_back(std::make_shared<Declare>(accumulators_, DType::F32, accumulators, Memory::Local));
    std::string e = node_.name + "__element";
    stmts.push_back(unrolled(e, accumulators, std::make_shared<Store>(accumulators_, var(e), std::make_shared<FloatImm>(DType::F32, 0.0))));
    if (tensorCores_) {
      stmts.push_back(std::make_shared<Declare>(aFragments_, DType::I32, rowTiles_ * 4, Memory::Local));
      stmts.push_back(std::make_shared<Declare>(bFragments_, DType::I32, colTiles_ / 2 * 4, Memory::Local));
    } else {
      // Two sets of each: the next k's, loaded while this one's are multiplied.
      stmts.push_back(let(laneRow_, div(var(lane_), tile::kLaneCols)));
      stmts.push_back(let(laneCol_, mod(var(lane_), tile::kLaneCols)));
      stmts.push_back(std::make_shared<Declare>(aFragments_, DType::F32, 2 * rowGroups_ * tile::kLaneGroup, Memory::Local));
      stmts.push_back(std::make_shared<Declare>(bFragments_, DType::F32, 2 * colGroups_ * tile::kLaneGroup, Memory::Local));
    }
    stmts.push_back(let(slices_, div(add(node_.depth, i64(node_.blockDepth - 1)), node_.blockDepth)));
    for (OperandTiles* tiles : {&a_, &b_}) placeCopies(*tiles, stmts);
    for (const OperandTiles* tiles : {&a_, &b_}) {
      if (staged(*tiles))
        stmts.push_back(std::make_shared<Declare>(tiles->staging(), tiles->operand->dtype, tiles->rounds * tiles->chunkElements(),
                                                  Memory::Local));
      if (rowsHoisted(*tiles)) hoistStagedRows(*tiles, stmts);
    }
    // The first stages - 1 slices, each its own group of copies but the last (the loop closes it), all
    // in one test of the first (the loop has nothing to wait for without it), so that the one barrier
    // before the first copies keeps the previous tile's reads of every stage before them; slices past the
    // end are not copied, but their groups are closed all the same (the loop's waits count them).
    std::vector<StmtPtr> prologue;
    for (int64_t s = 0; s + 1 < node_.stages; ++s) {
      StmtPtr slice = block({copies(i64(s), s), gather(i64(s)), deposit(s)});
      prologue.push_back(s == 0 ? slice : std::make_shared<If>(less(i64(s), var(slices_)), slice));
      if (s + 2 < node_.stages && copiesAsynchronously()) prologue.push_back(std::make_shared<WaitForCopies>(node_.stages - 1));
    }
    stmts.push_back(std::make_shared<If>(less(i64(0), var(slices_)), block(prologue)));
    // The loop over slices, unrolled by the ring's depth so that each step names its stages' buffers:
    // place-barriers then sees that a step's copies and its reads use different buffers. Each step waits
    // for its slice's copies, then passes the one barrier a slice takes (written here, as only here is
    // it known to do both jobs): after it every thread's copies of the slice are visible, and every
    // thread is done with the stage the next copies overwrite (read the step before).
    std::vector<StmtPtr> steps;
    for (int64_t stage = 0; stage < node_.stages; ++stage) {
      ExprPtr slice = add(var(slice_), i64(stage)), ahead = add(slice, i64(node_.stages - 1));
      int64_t aheadStage = (stage + node_.stages - 1) % node_.stages;
      std::vector<StmtPtr> step;
      if (copiesAsynchronously()) step.push_back(std::make_shared<WaitForCopies>(node_.stages - 2));
      step.push_back(std::make_shared<Barrier>());
      step.push_back(std::make_shared<If>(less(ahead, var(slices_)), block({copies(ahead, aheadStage), gather(ahead)})));
      step.push_back(tensorCores_ ? multiply(stage) : multiplyOnCudaCores(stage));
      if (staged(a_) || staged(b_)) step.push_back(std::make_shared<If>(less(ahead, var(slices_)), deposit(aheadStage)));
      steps.push_back(std::make_shared<If>(less(slice, var(slices_)), block(step)));
    }
    stmts.push_back(std::make_shared<For>(slice_, i64(0), var(slices_), i64(node_.stages), block(steps)));
    // Nothing is in flight any more (slices past the end are not copied), but a group the wait above
    // left open: closed here, so that the next tile of a block-strided loop starts with none.
    if (copiesAsynchronously()) stmts.push_back(std::make_shared<WaitForCopies>(0));
    stmts.push_back(tensorCores_ ? epilogue() : epilogueOnCudaCores());
    return block(stmts);
  }

private:
  OperandTiles tiles(const tile::MatrixOperand& operand, const std::vector<std::pair<std::string, ExprPtr>>* axes,
                     const std::string& buffer, const std::string& var, ExprPtr base, ExprPtr limit, int64_t extent) const {
    OperandTiles t{&operand, axes, buffer, var, std::move(base), std::move(limit), extent, 0, 0, 0, tensorCores_, false, 0, 0, {}, {}, {}, false};
    bool kRows = tensorCores_ && operand.kContiguous;  // else a row per k
    t.outer = kRows ? extent : node_.blockDepth;
    t.inner = kRows ? node_.blockDepth : extent;
    t.transposed = !tensorCores_ && operand.kContiguous;
    t.stride = t.inner + (t.transposed ? tile::kLaneGroup : 0);
    ExprPtr flat = indexing_.flatIndex(operand.tensor, expanded(operand.indices));
    std::optional<int64_t> alongRows = coefficientOf(*flat, operand.kContiguous ? node_.k : var);
    bool everyElement = !operand.padded && !operand.mask;
    t.chunked = everyElement && alongRows == 1;
    t.affineInK = everyElement && affineIn(*flat, node_.k);
    return t;
  }

  int64_t threads() const { return kWarp * (node_.blockRows / node_.warpRows) * (node_.blockCols / node_.warpCols); }

  // The k-groups of a transposing copy's slice (kTransposeDepth of k by kLaneRows rows a warp).
  int64_t transposeGroups() const { return node_.blockDepth / tile::kTransposeDepth; }

  // The Lets of OperandTiles::firstRow, column and firstElement, where the tile allows: every round of
  // copies is whole rows (transposed: whole groups of columns), and rows a round apart are laid out alike.
  void placeCopies(OperandTiles& t, std::vector<StmtPtr>& stmts) const {
    t.firstRow = t.buffer + "_first_row", t.column = t.buffer + "_column", t.firstElement = t.buffer + "_first_element";
    if (t.transposed) {
      if (!t.affineInK) return;  // hoisting needs one step from slice to slice
      // Copy e: k = (e / 32 % groups) * 8 + e % 8, column = (e / 32 / groups) * 4 + e / 8 % 4; the same k
      // for a thread in every round when the block's warps are whole groups.
      int64_t count = t.outer * t.inner, warps = threads() / kWarp;
      if (count % threads() != 0 || warps % transposeGroups() != 0) return;
      t.rounds = count / threads();
      t.rowsPerRound = warps / transposeGroups() * tile::kLaneRows;
      ExprPtr warp = div(var(thread_), kWarp);
      stmts.push_back(let(t.firstRow, add(mul(mod(warp, transposeGroups()), tile::kTransposeDepth), mod(var(thread_), tile::kTransposeDepth))));
      stmts.push_back(let(t.column, add(mul(div(warp, transposeGroups()), tile::kLaneRows),
                                        mod(div(var(thread_), tile::kTransposeDepth), tile::kLaneRows))));
      stmts.push_back(let(t.firstElement, add(mul(var(t.firstRow), t.stride), var(t.column))));
      hoistSources(t, stmts);
      return;
    }
    int64_t chunks = t.chunks(), count = t.outer * chunks;
    int64_t rowsPer128Bytes = std::max<int64_t>(1, tile::kMatrixRowElements / chunks);
    int64_t rotationPeriod = t.rotated ? rowsPer128Bytes * std::min<int64_t>(chunks, tile::kMatrixRowElements) : 1;
    if (threads() % chunks != 0 || count % threads() != 0 || (threads() / chunks) % rotationPeriod != 0) return;
    t.rounds = count / threads();
    t.rowsPerRound = threads() / chunks;
    stmts.push_back(let(t.firstRow, div(var(thread_), chunks)));
    stmts.push_back(let(t.column, mod(var(thread_), chunks)));
    stmts.push_back(let(t.firstElement, t.element(var(t.firstRow), var(t.column))));
    if (!tensorCores_ && t.chunked && t.affineInK) hoistSources(t, stmts);
  }

  // Round `round` of a thread's copies of slice 0 (placeCopies' layout): the operand's row (or column)
  // and the slice's k it reads, and the shared element it writes.
  struct RoundStart {
    ExprPtr along, k, shared;
  };
  RoundStart roundStart(const OperandTiles& t, int64_t round) const {
    if (t.transposed)
      return {add(t.base, add(var(t.column), i64(round * t.rowsPerRound))), var(t.firstRow),
              add(var(t.firstElement), i64(round * t.rowsPerRound))};
    ExprPtr row = add(var(t.firstRow), i64(round * t.rowsPerRound)), columnStart = mul(var(t.column), t.chunkElements());
    ExprPtr shared = add(var(t.firstElement), i64(round * t.rowsPerRound * t.stride));
    if (t.operand->kContiguous) return {add(t.base, row), columnStart, shared};
    return {add(t.base, columnStart), row, shared};
  }

  // The element at the operand's variable and k (Lets around the copy) is inside the product, inside the
  // tensor where the read is padded (0 outside), and where the mask holds.
  ExprPtr elementInside(const OperandTiles& t) const {
    ExprPtr inside = both(less(var(t.var), t.limit), less(var(node_.k), node_.depth));
    if (t.operand->padded) inside = both(inside, indexing_.inBounds(t.operand->tensor, t.operand->indices));
    return t.operand->mask ? both(inside, t.operand->mask) : inside;
  }

  // The operand's flat index at row (or column) `along` and k `k`.
  ExprPtr sourceAt(const OperandTiles& t, const ExprPtr& along, const ExprPtr& k) const {
    std::vector<ExprPtr> indices;
    for (const ExprPtr& index : expanded(t.operand->indices))
      indices.push_back(simplifyIndex(rewrite(index, [&](const Expr& node) -> ExprPtr {
        const auto* axis = node.as<AxisVar>();
        if (!axis) return nullptr;
        return axis->name == t.var ? along : axis->name == node_.k ? k : nullptr;
      })));
    return indexing_.flatIndex(t.operand->tensor, indices);
  }

  // The Lets of OperandTiles::hoisted (registers the tensor cores' kernels have no room for).
  void hoistSources(OperandTiles& t, std::vector<StmtPtr>& stmts) const {
    t.hoisted = true;
    for (int64_t round = 0; round < t.rounds; ++round) {
      RoundStart start = roundStart(t, round);
      stmts.push_back(let(t.along(round), start.along));
      stmts.push_back(let(t.source(round), sourceAt(t, var(t.along(round)), start.k)));
    }
    // The operand is affine in k: the same step for every round.
    RoundStart first = roundStart(t, 0);
    stmts.push_back(let(t.sliceStep(), op(BinaryOp::Sub, sourceAt(t, var(t.along(0)), add(first.k, i64(node_.blockDepth))),
                                          var(t.source(0)))));
  }

  // A hoisted operand's copies of slice `slice`: a CopyAsync per round, no loop.
  StmtPtr hoistedCopies(const OperandTiles& t, const ExprPtr& slice, int64_t stage) const {
    std::vector<StmtPtr> stmts;
    int lanes = t.transposed ? 1 : static_cast<int>(t.chunkElements());
    for (int64_t round = 0; round < t.rounds; ++round) {
      RoundStart start = roundStart(t, round);
      ExprPtr k = add(mul(slice, node_.blockDepth), start.k);
      ExprPtr inside = both(less(var(t.along(round)), t.limit), less(k, node_.depth));
      ExprPtr lanesInside = lanes == 1                 ? nullptr
                            : t.operand->kContiguous ? op(BinaryOp::Sub, node_.depth, k)
                                                     : op(BinaryOp::Sub, t.limit, var(t.along(round)));
      ExprPtr source = add(var(t.source(round)), op(BinaryOp::Mul, slice, var(t.sliceStep())));
      stmts.push_back(std::make_shared<CopyAsync>(t.stageBuffer(stage), start.shared, t.operand->tensor, source, inside,
                                                  t.operand->dtype, lanes, lanesInside));
    }
    return block(stmts);
  }

  // The block's copies of slice `slice` of both operands into the buffers of `stage`, the elements past
  // the tensor's end 0: 16-byte chunks along the contiguous dimension, or (transposed) an element each.
  // Where placeCopies placed them, a thread's copies are its first one's, a round apart (a multiply-add
  // each); elsewhere each one's row and column are divided out of its number.
  StmtPtr copies(const ExprPtr& slice, int64_t stage) {
    std::vector<StmtPtr> stmts;
    for (const OperandTiles* t : {&a_, &b_}) {
      if (staged(*t)) continue;
      if (t->hoisted) {
        stmts.push_back(hoistedCopies(*t, slice, stage));
        continue;
      }
      std::string chunk = t->buffer + "_chunk", row = t->buffer + "_row", column = t->buffer + "_column";
      ExprPtr first = mul(slice, node_.blockDepth);
      std::vector<StmtPtr> body;
      ExprPtr shared, along, k;
      int lanes = static_cast<int>(t->chunkElements());
      if (t->transposed) {
        // Without rounds (with them, hoistedCopies): row, the slice's k; column, the operand's row (or column).
        ExprPtr group = div(var(chunk), kWarp);
        body.push_back(let(row, add(mul(mod(group, transposeGroups()), tile::kTransposeDepth), mod(var(chunk), tile::kTransposeDepth))));
        body.push_back(let(column, add(mul(div(group, transposeGroups()), tile::kLaneRows),
                                       mod(div(var(chunk), tile::kTransposeDepth), tile::kLaneRows))));
        shared = add(mul(var(row), t->stride), var(column));
        k = add(first, var(row));
        along = add(t->base, var(column));
        lanes = 1;
      } else {
        bool kContiguous = t->operand->kContiguous;
        ExprPtr rowStart = var(row), columnStart = mul(var(t->rounds ? t->column : column), t->chunkElements());
        along = kContiguous ? add(t->base, rowStart) : add(t->base, columnStart);
        k = kContiguous ? add(first, columnStart) : add(first, rowStart);
        if (t->rounds) {
          body.push_back(let(row, add(var(t->firstRow), mul(var(chunk), t->rowsPerRound))));
          shared = add(var(t->firstElement), mul(var(chunk), t->rowsPerRound * t->stride));
        } else {
          body.push_back(let(row, div(var(chunk), t->chunks())));
          body.push_back(let(column, mod(var(chunk), t->chunks())));
          shared = t->element(var(row), var(column));
        }
      }
      // Of the element (or chunk) at t->var and k: the elements outside the tensor (a padded read's) are 0.
      auto copy = [&](const ExprPtr& sharedAt, int copyLanes) {
        ExprPtr inside = elementInside(*t);
        ExprPtr lanesInside = copyLanes == 1             ? nullptr
                              : t->operand->kContiguous ? op(BinaryOp::Sub, node_.depth, var(node_.k))
                                                        : op(BinaryOp::Sub, t->limit, var(t->var));
        return std::make_shared<CopyAsync>(t->stageBuffer(stage), sharedAt, t->operand->tensor,
                                           indexing_.flatIndex(t->operand->tensor, t->operand->indices), inside,
                                           t->operand->dtype, copyLanes, lanesInside);
      };
      if (!t->chunked && lanes > 1) {
        // A chunk of a gathered operand an element at a time, each at its own row (or column) and k.
        std::string element = t->buffer + "_element";
        bool kContiguous = t->operand->kContiguous;
        std::vector<StmtPtr> each = axisLets(t->var, kContiguous ? along : add(along, var(element)), *t->axes);
        appendTo(each, axisLets(node_.k, kContiguous ? add(k, var(element)) : k, node_.depthAxes));
        each.push_back(copy(add(shared, var(element)), 1));
        body.push_back(unrolled(element, lanes, block(std::move(each))));
      } else {
        appendTo(body, axisLets(t->var, along, *t->axes));
        appendTo(body, axisLets(node_.k, k, node_.depthAxes));
        body.push_back(copy(shared, lanes));
      }
      // Kept rolled: unrolled, nvcc keeps every round's addresses live across the k loop, and spills.
      int64_t count = t->transposed ? t->outer * t->inner : t->outer * t->chunks();
      stmts.push_back(t->rounds ? std::make_shared<For>(chunk, i64(0), i64(t->rounds), i64(1), block(body), false, true)
                                : std::make_shared<For>(chunk, var(thread_), i64(count), i64(threads()), block(body), false, true));
    }
    return block(stmts);
  }

  // A gathered operand whose copies take whole rounds goes through registers: each thread loads its
  // elements of the slice a step starts (gather) before that step's multiplications and stores them into
  // shared memory (deposit) after, so that the tensor cores' work hides the loads' latency (a 16-bit
  // element has no asynchronous copy). The stage they go to was read the step before, behind the
  // barrier, and is read stages - 1 steps later, behind another.
  bool staged(const OperandTiles& t) const { return !t.chunked && !t.transposed && t.rounds > 0; }
  // Where both are staged (a transposed convolution's), no group of copies is ever in flight to wait for.
  bool copiesAsynchronously() const { return !staged(a_) || !staged(b_); }

  // Element `element` of round `round` of the thread's copies of a staged operand: its row (or column)
  // and k in slice `slice`, and its place in the stage.
  struct StagedElement {
    ExprPtr along, k, shared;
  };
  StagedElement stagedElement(const OperandTiles& t, const ExprPtr& slice, const ExprPtr& round, const ExprPtr& element) const {
    ExprPtr row = add(var(t.firstRow), mul(round, t.rowsPerRound)), columnStart = mul(var(t.column), t.chunkElements());
    ExprPtr first = mul(slice, node_.blockDepth);
    ExprPtr shared = add(add(var(t.firstElement), mul(round, t.rowsPerRound * t.stride)), element);
    if (t.operand->kContiguous) return {add(t.base, row), add(add(first, columnStart), element), shared};
    return {add(add(t.base, columnStart), element), add(first, row), shared};
  }

  // A staged operand laid out along its rows (or columns): each element of a thread's chunk is at the
  // same row (or column) in every round and slice, so that it and the axes fused into it are computed
  // once, before the k loop, into arrays indexed by the element (registers, once unrolled).
  bool rowsHoisted(const OperandTiles& t) const { return staged(t) && !t.operand->kContiguous; }
  std::string hoistedArray(const OperandTiles& t, const std::string& var) const { return t.buffer + "_" + var; }

  void hoistStagedRows(const OperandTiles& t, std::vector<StmtPtr>& stmts) const {
    std::string element = t.buffer + "_element";
    std::vector<std::pair<std::string, ExprPtr>> values{{t.var, stagedElement(t, i64(0), i64(0), var(element)).along}};
    for (const auto& [axis, value] : *t.axes) values.push_back({axis, value});
    std::vector<StmtPtr> fill;
    for (const auto& [name, value] : values) {
      stmts.push_back(std::make_shared<Declare>(hoistedArray(t, name), DType::I64, t.chunkElements(), Memory::Local));
      fill.push_back(let(name, value));
      fill.push_back(std::make_shared<Store>(hoistedArray(t, name), var(element), var(name)));
    }
    stmts.push_back(unrolled(element, t.chunkElements(), block(std::move(fill))));
  }

  StmtPtr gather(const ExprPtr& slice) const {
    std::vector<StmtPtr> stmts;
    for (const OperandTiles* t : {&a_, &b_}) {
      if (!staged(*t)) continue;
      std::string round = t->buffer + "_round", element = t->buffer + "_element";
      StagedElement at = stagedElement(*t, slice, var(round), var(element));
      ExprPtr inside = elementInside(*t);
      ExprPtr read = std::make_shared<Load>(t->operand->dtype, t->operand->tensor,
                                            std::vector<ExprPtr>{indexing_.flatIndex(t->operand->tensor, t->operand->indices)});
      ExprPtr value = std::make_shared<Select>(inside, read, immediate(t->operand->dtype, 0.0));
      ExprPtr local = add(mul(var(round), t->chunkElements()), var(element));
      std::vector<StmtPtr> perRound, perElement;
      if (rowsHoisted(*t)) {
        // k, and the axes fused into it, once a round.
        perRound = axisLets(node_.k, at.k, node_.depthAxes);
        for (const std::string& name : hoistedVars(*t))
          perElement.push_back(let(name, std::make_shared<Load>(DType::I64, hoistedArray(*t, name), std::vector<ExprPtr>{var(element)})));
      } else {
        perElement = axisLets(t->var, at.along, *t->axes);
        appendTo(perElement, axisLets(node_.k, at.k, node_.depthAxes));
      }
      perElement.push_back(std::make_shared<Store>(t->staging(), local, value));
      perRound.push_back(unrolled(element, t->chunkElements(), block(std::move(perElement))));
      stmts.push_back(unrolled(round, t->rounds, block(std::move(perRound))));
    }
    return block(stmts);
  }

  std::vector<std::string> hoistedVars(const OperandTiles& t) const {
    std::vector<std::string> names{t.var};
    for (const auto& [axis, _] : *t.axes) names.push_back(axis);
    return names;
  }

  // Let `var` = `value`, then each axis fused into it.
  std::vector<StmtPtr> axisLets(const std::string& name, const ExprPtr& value, const std::vector<std::pair<std::string, ExprPtr>>& axes) const {
    std::vector<StmtPtr> lets{let(name, value)};
    for (const auto& [axis, axisValue] : axes) lets.push_back(let(axis, axisValue));
    return lets;
  }

  // With every axis fused into row, col or k replaced by its value over them.
  ExprPtr expanded(const ExprPtr& e) const {
    if (axisValues_.empty()) return e;
    return simplifyIndex(rewrite(e, [&](const Expr& node) -> ExprPtr {
      const auto* axis = node.as<AxisVar>();
      if (!axis) return nullptr;
      auto value = axisValues_.find(axis->name);
      return value == axisValues_.end() ? nullptr : value->second;
    }));
  }
  std::vector<ExprPtr> expanded(const std::vector<ExprPtr>& indices) const {
    std::vector<ExprPtr> result;
    for (const ExprPtr& index : indices) result.push_back(expanded(index));
    return result;
  }

  StmtPtr deposit(int64_t stage) const {
    std::vector<StmtPtr> stmts;
    for (const OperandTiles* t : {&a_, &b_}) {
      if (!staged(*t)) continue;
      // A chunk a 16-byte store: its elements one at a time would hit every bank 4 times.
      std::string round = t->buffer + "_round";
      StagedElement at = stagedElement(*t, i64(0), var(round), i64(0));
      stmts.push_back(unrolled(round, t->rounds, std::make_shared<VectorStore>(t->stageBuffer(stage), at.shared, t->staging(), 16,
                                                                               mul(var(round), t->chunkElements()))));
    }
    return block(stmts);
  }

  // One slice on the CUDA cores: per k, each lane's groups of A (4 rows each, kLaneRows * 4 apart) and of
  // B (4 columns each, kLaneCols * 4 apart) from the k-major slices with 16-byte loads, the next k's
  // into the other set of fragments before this one's are multiplied.
  StmtPtr multiplyOnCudaCores(int64_t stage) {
    const std::string p = node_.name + "__";
    std::string rowGroup = p + "row_group", colGroup = p + "col_group", row = p + "row_in_group", col = p + "col_in_group";
    int64_t group = tile::kLaneGroup, aSet = rowGroups_ * group, bSet = colGroups_ * group;
    auto load = [&](int64_t k) {
      int64_t set = k % 2;
      ExprPtr aFirst = add(mul(var(warpRow_), node_.warpRows), mul(var(laneRow_), group));
      ExprPtr bFirst = add(mul(var(warpCol_), node_.warpCols), mul(var(laneCol_), group));
      StmtPtr loadA = std::make_shared<VectorLoad>(
          aFragments_, a_.stageBuffer(stage),
          add(add(i64(k * a_.stride), aFirst), mul(var(rowGroup), tile::kLaneRows * group)), 16,
          add(i64(set * aSet), mul(var(rowGroup), group)));
      StmtPtr loadB = std::make_shared<VectorLoad>(
          bFragments_, b_.stageBuffer(stage),
          add(add(i64(k * b_.stride), bFirst), mul(var(colGroup), tile::kLaneCols * group)), 16,
          add(i64(set * bSet), mul(var(colGroup), group)));
      return block({unrolled(rowGroup, rowGroups_, loadA), unrolled(colGroup, colGroups_, loadB)});
    };
    std::vector<StmtPtr> steps = {load(0)};
    int64_t resultCols = colGroups_ * group;
    for (int64_t k = 0; k < node_.blockDepth; ++k) {
      if (k + 1 < node_.blockDepth) steps.push_back(load(k + 1));
      int64_t set = k % 2;
      ExprPtr aElement = add(i64(set * aSet), add(mul(var(rowGroup), group), var(row)));
      ExprPtr bElement = add(i64(set * bSet), add(mul(var(colGroup), group), var(col)));
      ExprPtr accumulator = add(mul(add(mul(var(rowGroup), group), var(row)), resultCols), add(mul(var(colGroup), group), var(col)));
      ExprPtr product = std::make_shared<Binary>(DType::F32, BinaryOp::Mul, std::make_shared<Load>(DType::F32, aFragments_, std::vector<ExprPtr>{aElement}),
                                                 std::make_shared<Load>(DType::F32, bFragments_, std::vector<ExprPtr>{bElement}));
      ExprPtr sum = std::make_shared<Binary>(DType::F32, BinaryOp::Add,
                                             std::make_shared<Load>(DType::F32, accumulators_, std::vector<ExprPtr>{accumulator}), product);
      steps.push_back(unrolled(rowGroup, rowGroups_, unrolled(row, group, unrolled(colGroup, colGroups_, unrolled(col, group,
                               std::make_shared<Store>(accumulators_, accumulator, sum))))));
    }
    return block(steps);
  }

  // The ldmatrix row each lane gives for the x4 load of 16 rows (or columns) from `first` and 16 of k
  // from `kFirst` of an operand's slice: matrix lane / 8 of the four, row lane % 8 of it.
  // For A the matrices are (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15),
  // a0..a3 of mma's A; for B (columns 0-7, k 0-7), (columns 0-7, k 8-15), (columns 8-15, k 0-7), (columns
  // 8-15, k 8-15): b0, b1 of two n8 tiles. An operand stored k by k is read transposed.
  ExprPtr fragmentRow(const OperandTiles& t, bool isA, const ExprPtr& first, const ExprPtr& kFirst) {
    ExprPtr matrix = div(var(lane_), 8), rowInMatrix = mod(var(lane_), 8);
    ExprPtr rowHalf = mul(isA ? mod(matrix, 2) : div(matrix, 2), 8);
    ExprPtr kHalf = mul(isA ? div(matrix, 2) : mod(matrix, 2), 8);
    ExprPtr row, chunk;
    if (t.operand->kContiguous) {
      row = add(add(first, rowHalf), rowInMatrix);
      chunk = div(add(kFirst, kHalf), tile::kMatrixRowElements);
    } else {
      row = add(add(kFirst, kHalf), rowInMatrix);
      chunk = div(add(first, rowHalf), tile::kMatrixRowElements);
    }
    return t.element(row, chunk);
  }

  StmtPtr multiply(int64_t stage) {
    std::string step = node_.name + "__k_step", rowTile = node_.name + "__row_tile", colTile = node_.name + "__col_tile";
    ExprPtr kFirst = mul(var(step), tile::kMmaDepth);
    ExprPtr warpRowFirst = mul(var(warpRow_), node_.warpRows), warpColFirst = mul(var(warpCol_), node_.warpCols);
    StmtPtr loadA = std::make_shared<LoadMatrix>(
        aFragments_, mul(var(rowTile), 4), a_.stageBuffer(stage),
        fragmentRow(a_, true, add(warpRowFirst, mul(var(rowTile), tile::kMmaRows)), kFirst), 4, !a_.operand->kContiguous);
    StmtPtr loadB = std::make_shared<LoadMatrix>(
        bFragments_, mul(var(colTile), 4), b_.stageBuffer(stage),
        fragmentRow(b_, false, add(warpColFirst, mul(var(colTile), 2 * tile::kMmaCols)), kFirst), 4,
        !b_.operand->kContiguous);
    StmtPtr mma = std::make_shared<MultiplyAccumulate>(
        accumulators_, mul(add(mul(var(rowTile), colTiles_), var(colTile)), 4), aFragments_, mul(var(rowTile), 4),
        bFragments_, add(mul(div(var(colTile), 2), 4), mul(mod(var(colTile), 2), 2)), node_.a.dtype);
    return unrolled(step, node_.blockDepth / tile::kMmaDepth,
                    block({unrolled(rowTile, rowTiles_, loadA), unrolled(colTile, colTiles_ / 2, loadB),
                           unrolled(rowTile, rowTiles_, unrolled(colTile, colTiles_, mma))}));
  }

  // The output's value for the accumulator `element`, at column col + `offset`.
  ExprPtr result(const ExprPtr& element, int64_t offset) const {
    return rewrite(indexing_.lowerExpr(expanded(node_.value)), [&](const Expr& node) -> ExprPtr {
      if (const auto* load = node.as<Load>(); load && load->tensor == node_.accumulator)
        return std::make_shared<Load>(DType::F32, accumulators_, std::vector<ExprPtr>{element});
      if (const auto* axis = node.as<AxisVar>(); axis && axis->name == node_.col && offset > 0) return add(var(node_.col), i64(offset));
      return nullptr;
    });
  }

  // The stores of `count` results of one row at columns col, col + 1, ... (the accumulators from `first`).
  StmtPtr storeRun(const ExprPtr& first, int64_t count) const {
    const std::string vector = node_.name + "__vector";
    std::vector<StmtPtr> fill{std::make_shared<Declare>(vector, node_.value->dtype, count, Memory::Local)};
    for (int64_t e = 0; e < count; ++e) fill.push_back(std::make_shared<Store>(vector, i64(e), result(add(first, i64(e)), e)));
    return storeColumns(count, vector, std::move(fill), [&](int64_t e) { return result(add(first, i64(e)), e); });
  }

  // The stores of `count` values of one row at columns col, col + 1, ... (value(e) the one at col + e):
  // one 4-, 8- or 16-byte store of the local array `vector` (after the statements `fill`, which put them
  // there) where the columns are adjacent in memory, the address is aligned and all are inside; each
  // inside one alone, at its own address, otherwise.
  StmtPtr storeColumns(int64_t count, const std::string& vector, std::vector<StmtPtr> fill,
                       const std::function<ExprPtr(int64_t)>& value) const {
    ExprPtr address = indexing_.flatIndex(node_.output, expanded(node_.outputIndices));
    // Of the result at column col + e: the first's + e where the columns are adjacent.
    bool adjacent = columnsAreAdjacent();
    auto addressAt = [&](int64_t e) {
      if (adjacent || e == 0) return add(address, i64(e));
      std::vector<ExprPtr> indices;
      for (const ExprPtr& index : expanded(node_.outputIndices))
        indices.push_back(rewrite(index, [&](const Expr& node) -> ExprPtr {
          const auto* axis = node.as<AxisVar>();
          return axis && axis->name == node_.col ? add(var(node_.col), i64(e)) : nullptr;
        }));
      return indexing_.flatIndex(node_.output, indices);
    };
    auto inside = [&](int64_t e) { return less(add(var(node_.col), i64(e)), node_.cols); };
    std::vector<StmtPtr> each;
    for (int64_t e = 0; e < count; ++e)
      each.push_back(std::make_shared<If>(inside(e), std::make_shared<Store>(node_.output, addressAt(e), value(e))));
    int bytes = static_cast<int>(count * dtypeBytes(node_.value->dtype));
    if (!adjacent || (bytes != 4 && bytes != 8 && bytes != 16)) return block(each);
    fill.push_back(std::make_shared<VectorStore>(node_.output, address, vector, bytes));
    return std::make_shared<IfAligned>(std::vector<Address>{{node_.output, address}}, bytes, inside(count - 1), block(fill),
                                       block(each));
  }

  // Each accumulator where mma's C fragment puts it: c0, c1 at row lane / 4 and columns 2 (lane % 4) + 0, 1
  // of its 16 x 8 tile, c2, c3 eight rows below; stored a pair at a time, or 16 bytes at a time
  // (quadEpilogue) for 16-bit results.
  StmtPtr epilogue() {
    if (dtypeBytes(node_.value->dtype) == 2 && columnsAreAdjacent()) return quadEpilogue();
    const std::string p = node_.name + "__";
    std::string rowTile = p + "row_tile", colTile = p + "col_tile", half = p + "half";
    ExprPtr first = add(mul(add(mul(var(rowTile), colTiles_), var(colTile)), 4), mul(var(half), 2));
    StmtPtr perPair = block({let(node_.row, fragmentRow(var(rowTile), var(half))), std::make_shared<If>(less(var(node_.row), node_.rows),
        block({let(node_.col, fragmentCol(var(colTile))), storeRun(first, 2)}))});
    return unrolled(rowTile, rowTiles_, unrolled(colTile, colTiles_, unrolled(half, 2, perPair)));
  }

  // The output row of the C fragment's half `half` of row tile `rowTile`, and the column of its first
  // result in column tile `colTile`, for this lane.
  ExprPtr fragmentRow(const ExprPtr& rowTile, const ExprPtr& half) const {
    return add(add(add(node_.rowBase, mul(var(warpRow_), node_.warpRows)), add(mul(rowTile, tile::kMmaRows), mul(half, 8))),
               div(var(lane_), 4));
  }
  ExprPtr fragmentCol(const ExprPtr& colTile) const {
    return add(add(add(node_.colBase, mul(var(warpCol_), node_.warpCols)), mul(colTile, tile::kMmaCols)),
               mul(mod(var(lane_), 4), 2));
  }

  // 16-bit results, 16 bytes a lane: a quad's 4 lanes hold 2 rows x 16 columns of a row tile's halves and
  // a pair of column tiles, a pair of results of each (row, tile) a lane. They exchange them (TransposeQuad)
  // so that lane i holds 8 columns of one row: of half i / 2 and tile i % 2, lanes 2r and 2r + 1 of a
  // quad writing 32 adjacent bytes. The results are computed before the exchange, which every lane must
  // reach: where that reads a tensor other than the accumulators, only inside the output.
  StmtPtr quadEpilogue() {
    const std::string p = node_.name + "__";
    std::string rowTile = p + "row_tile", colPair = p + "col_pair", half = p + "half", parity = p + "parity";
    std::string words = p + "quad";
    ExprPtr colTile = add(mul(var(colPair), 2), var(parity));
    ExprPtr first = add(mul(add(mul(var(rowTile), colTiles_), colTile), 4), mul(var(half), 2));
    ExprPtr word = add(mul(var(half), 2), var(parity));
    bool readsTensors = false;
    forEachNode(*node_.value, [&](const Expr& e) {
      if (const auto* load = e.as<Load>(); load && load->tensor != node_.accumulator) readsTensors = true;
    });
    std::vector<StmtPtr> pair{let(node_.row, fragmentRow(var(rowTile), var(half))), let(node_.col, fragmentCol(colTile))};
    for (int64_t e = 0; e < 2; ++e) {
      ExprPtr value = result(add(first, i64(e)), e);
      if (readsTensors)
        value = std::make_shared<Select>(both(less(var(node_.row), node_.rows), less(add(var(node_.col), i64(e)), node_.cols)),
                                         value, immediate(value->dtype, 0.0));
      pair.push_back(std::make_shared<Store>(words, add(mul(word, 2), i64(e)), value));
    }
    ExprPtr laneInQuad = mod(var(lane_), 4);
    ExprPtr row = fragmentRow(var(rowTile), div(laneInQuad, 2));
    ExprPtr col = add(add(add(node_.colBase, mul(var(warpCol_), node_.warpCols)), mul(var(colPair), 2 * tile::kMmaCols)),
                      mul(mod(var(lane_), 2), tile::kMmaCols));
    StmtPtr store = block({let(node_.row, row), std::make_shared<If>(less(var(node_.row), node_.rows),
                                                                     block({let(node_.col, col), storeColumns(tile::kMmaCols, words, {}, [&](int64_t e) {
      return std::make_shared<Load>(node_.value->dtype, words, std::vector<ExprPtr>{i64(e)});
    })}))});
    StmtPtr perTiles = block({std::make_shared<Declare>(words, node_.value->dtype, tile::kMmaCols, Memory::Local),
                              unrolled(half, 2, unrolled(parity, 2, block(std::move(pair)))),
                              std::make_shared<TransposeQuad>(words, var(lane_)), store});
    return unrolled(rowTile, rowTiles_, unrolled(colPair, colTiles_ / 2, perTiles));
  }

  // Each lane's results, a row of 4 of each group at a time (multiplyOnCudaCores' layout).
  StmtPtr epilogueOnCudaCores() {
    const std::string p = node_.name + "__";
    std::string rowGroup = p + "row_group", colGroup = p + "col_group", rowInGroup = p + "row_in_group";
    int64_t group = tile::kLaneGroup;
    ExprPtr row = add(add(add(node_.rowBase, mul(var(warpRow_), node_.warpRows)), mul(var(rowGroup), tile::kLaneRows * group)),
                      add(mul(var(laneRow_), group), var(rowInGroup)));
    ExprPtr col = add(add(add(node_.colBase, mul(var(warpCol_), node_.warpCols)), mul(var(colGroup), tile::kLaneCols * group)),
                      mul(var(laneCol_), group));
    ExprPtr first = add(mul(add(mul(var(rowGroup), group), var(rowInGroup)), colGroups_ * group), mul(var(colGroup), group));
    StmtPtr perRun = block({let(node_.col, col), storeRun(first, group)});
    return unrolled(rowGroup, rowGroups_, unrolled(rowInGroup, group, block({let(node_.row, row),
        std::make_shared<If>(less(var(node_.row), node_.rows), unrolled(colGroup, colGroups_, perRun))})));
  }

  // Are neighbouring columns adjacent in the output: its flat index steps by one with the column?
  bool columnsAreAdjacent() const {
    return coefficientOf(*indexing_.flatIndex(node_.output, expanded(node_.outputIndices)), node_.col) == 1;
  }

  const tile::MatrixProduct& node_;
  std::map<std::string, ExprPtr> axisValues_;  // of the axes fused into row, col and k
  const GlobalIndexing& indexing_;
  const bool tensorCores_;
  std::string lane_, warpRow_, warpCol_, thread_, accumulators_, aFragments_, bFragments_, slice_, slices_;
  OperandTiles a_, b_;
  int64_t rowTiles_ = 0, colTiles_ = 0;     // tensor cores: mma tiles of a warp
  std::string laneRow_, laneCol_;           // CUDA cores: the lane's place among kLaneRows x kLaneCols
  int64_t rowGroups_ = 0, colGroups_ = 0;   // and its groups of 4 x 4 results
};

}  // namespace

StmtPtr lowerMatrixProduct(const tile::MatrixProduct& product, const GlobalIndexing& indexing) {
  return ProductLowering(product, indexing).lower();
}

}  // namespace emmy::kernel
