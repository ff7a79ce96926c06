// The tensor-core product of one block's tile (tile::MatrixProduct), thread by thread.
//
// Shared memory holds `stages` slices of each operand, as rows of 16-byte chunks along the operand's
// contiguous dimension (k, or its rows or columns). Chunk c of row r sits at chunk (c + shift(r)) % C of
// its row (C chunks a row), the shift growing by one every 128 bytes of rows: the 8 rows an ldmatrix
// phase reads, and the 8 chunks a phase of copies writes, then lie in the 8 different 16-byte groups of
// the 32 banks (a rotation, which does what the usual XOR swizzle does with + and % only).
//
// The k loop keeps `stages` - 1 slices in flight: before slice s is used, the copies of slice
// s + stages - 1 (if there is one) start into the stage slice s - 1 used (the one barrier a slice
// place-barriers puts before them keeps every warp's reads of it before), each step having waited until
// the copies of slice s are done. Each stage is a buffer of its own and the loop is unrolled by the
// ring's depth, so that the barrier analysis, which knows buffers and not their parts, needs no barrier
// between a step's copies and its reads. Each warp then loads, per 16 of k, its A fragments (one ldmatrix.x4 per 16 rows) and its B
// fragments (one per 16 columns, two n8 tiles), and issues one mma.sync per 16 x 8 accumulator tile.
#include "ir/kernel/lower_matrix_product.h"

#include <fmt/format.h>

#include "ir/tensor/rewrite.h"
#include "ir/tensor/simplify.h"
#include "ir/tile/tensor_cores.h"
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
StmtPtr unrolled(const std::string& name, int64_t count, StmtPtr body) {
  return std::make_shared<For>(name, i64(0), i64(count), i64(1), std::move(body), true);
}

constexpr int64_t kWarp = 32;

// One operand's slices in shared memory: `outer` rows of `inner` elements each.
struct OperandTiles {
  const tile::MatrixOperand* operand;
  std::string buffer;
  std::string var;        // its row (or column) variable in the operand's indices
  ExprPtr base, limit;    // the block's first row (or column), and their number
  int64_t extent;         // rows (or columns) in the block's tile
  int64_t outer, inner;   // the slice's shape in shared memory: kContiguous ? extent x depth : depth x extent
  int64_t chunks() const { return inner / tile::kMatrixRowElements; }
  std::string stageBuffer(int64_t stage) const { return fmt::format("{}_{}", buffer, stage); }
  // Where the thread's chunks of a slice are, when the block's threads take whole rounds of rows whose
  // rotation repeats (the usual tiles): the row, column and shared element of its first chunk (Lets made
  // once, before the k loop), each round `rowsPerRound` rows further; `rounds` is 0 otherwise.
  int64_t rounds = 0, rowsPerRound = 0;
  std::string firstRow, column, firstElement;
  int64_t sliceElements() const { return outer * inner; }
  // Where chunk `chunk` of row `row` is: rotated by one chunk for every 128 bytes of rows.
  ExprPtr element(const ExprPtr& row, const ExprPtr& chunk) const {
    int64_t rowsPer128Bytes = std::max<int64_t>(1, tile::kMatrixRowElements / chunks());
    ExprPtr shift = mod(div(row, rowsPer128Bytes), std::min<int64_t>(chunks(), tile::kMatrixRowElements));
    return add(mul(row, inner), mul(mod(add(chunk, shift), chunks()), tile::kMatrixRowElements));
  }
};

class ProductLowering {
public:
  ProductLowering(const tile::MatrixProduct& node, const GlobalIndexing& indexing) : node_(node), indexing_(indexing) {
    const std::string& p = node.name + "__";
    lane_ = p + "lane", warpRow_ = p + "warp_row", warpCol_ = p + "warp_col", thread_ = p + "thread";
    accumulators_ = p + "accumulators", aFragments_ = p + "a_fragments", bFragments_ = p + "b_fragments";
    slice_ = p + "slice", slices_ = p + "slices";
    a_ = tiles(node.a, p + "a_slices", node.row, node.rowBase, node.rows, node.blockRows);
    b_ = tiles(node.b, p + "b_slices", node.col, node.colBase, node.cols, node.blockCols);
    rowTiles_ = node.warpRows / tile::kMmaRows;
    colTiles_ = node.warpCols / tile::kMmaCols;
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
    int64_t accumulators = rowTiles_ * colTiles_ * 4;
    stmts.push_back(std::make_shared<Declare>(accumulators_, DType::F32, accumulators, Memory::Local));
    std::string e = node_.name + "__element";
    stmts.push_back(unrolled(e, accumulators, std::make_shared<Store>(accumulators_, var(e), std::make_shared<FloatImm>(DType::F32, 0.0))));
    stmts.push_back(std::make_shared<Declare>(aFragments_, DType::I32, rowTiles_ * 4, Memory::Local));
    stmts.push_back(std::make_shared<Declare>(bFragments_, DType::I32, colTiles_ / 2 * 4, Memory::Local));
    stmts.push_back(let(slices_, div(add(node_.depth, i64(node_.blockDepth - 1)), node_.blockDepth)));
    for (OperandTiles* tiles : {&a_, &b_}) placeChunks(*tiles, stmts);
    // The first stages - 1 slices, each its own group of copies but the last (the loop closes it).
    for (int64_t s = 0; s + 1 < node_.stages; ++s) {
      stmts.push_back(std::make_shared<If>(less(i64(s), var(slices_)), copies(i64(s), s)));
      if (s + 2 < node_.stages) stmts.push_back(std::make_shared<WaitForCopies>(node_.stages - 1));
    }
    // The loop over slices, unrolled by the ring's depth so that each step names its stages' buffers:
    // place-barriers then sees that a step's copies and its reads use different buffers.
    std::vector<StmtPtr> steps;
    for (int64_t stage = 0; stage < node_.stages; ++stage) {
      ExprPtr slice = add(var(slice_), i64(stage)), ahead = add(slice, i64(node_.stages - 1));
      std::vector<StmtPtr> step = {std::make_shared<WaitForCopies>(node_.stages - 2),
                                   std::make_shared<If>(less(ahead, var(slices_)), copies(ahead, (stage + node_.stages - 1) % node_.stages)),
                                   multiply(stage)};
      steps.push_back(std::make_shared<If>(less(slice, var(slices_)), block(step)));
    }
    stmts.push_back(std::make_shared<For>(slice_, i64(0), var(slices_), i64(node_.stages), block(steps)));
    // Nothing is in flight any more (slices past the end are not copied), but a group the wait above
    // left open: closed here, so that the next tile of a block-strided loop starts with none.
    stmts.push_back(std::make_shared<WaitForCopies>(0));
    stmts.push_back(epilogue());
    return block(stmts);
  }

private:
  OperandTiles tiles(const tile::MatrixOperand& operand, const std::string& buffer, const std::string& var, ExprPtr base,
                     ExprPtr limit, int64_t extent) const {
    OperandTiles t{&operand, buffer, var, std::move(base), std::move(limit), extent, 0, 0};
    t.outer = operand.kContiguous ? extent : node_.blockDepth;
    t.inner = operand.kContiguous ? node_.blockDepth : extent;
    return t;
  }

  int64_t threads() const { return kWarp * (node_.blockRows / node_.warpRows) * (node_.blockCols / node_.warpCols); }

  // The Lets of OperandTiles::firstRow, column and firstElement, where the tile allows: every round of
  // chunks is whole rows, and rows a round apart are rotated alike.
  void placeChunks(OperandTiles& t, std::vector<StmtPtr>& stmts) const {
    int64_t chunks = t.chunks(), count = t.outer * chunks;
    int64_t rowsPer128Bytes = std::max<int64_t>(1, tile::kMatrixRowElements / chunks);
    int64_t rotationPeriod = rowsPer128Bytes * std::min<int64_t>(chunks, tile::kMatrixRowElements);
    if (threads() % chunks != 0 || count % threads() != 0 || (threads() / chunks) % rotationPeriod != 0) return;
    t.rounds = count / threads();
    t.rowsPerRound = threads() / chunks;
    t.firstRow = t.buffer + "_first_row", t.column = t.buffer + "_column", t.firstElement = t.buffer + "_first_element";
    stmts.push_back(let(t.firstRow, div(var(thread_), chunks)));
    stmts.push_back(let(t.column, mod(var(thread_), chunks)));
    stmts.push_back(let(t.firstElement, t.element(var(t.firstRow), var(t.column))));
  }

  // The block's copies of slice `slice` of both operands into the buffers of `stage`: each thread takes
  // 16-byte chunks (8 elements along the contiguous dimension), the elements past the tensor's end 0.
  // Where placeChunks placed them, a thread's chunks are its first one's, a round of rows apart (a
  // multiply-add each); elsewhere each chunk's row and column are divided out of its number.
  StmtPtr copies(const ExprPtr& slice, int64_t stage) {
    std::vector<StmtPtr> stmts;
    for (const OperandTiles* t : {&a_, &b_}) {
      std::string chunk = t->buffer + "_chunk", row = t->buffer + "_row", column = t->buffer + "_column";
      ExprPtr first = mul(slice, node_.blockDepth);
      bool kContiguous = t->operand->kContiguous;
      ExprPtr rowStart = var(row), columnStart = mul(var(t->rounds ? t->column : column), tile::kMatrixRowElements);
      ExprPtr along = kContiguous ? add(t->base, rowStart) : add(t->base, columnStart);
      ExprPtr k = kContiguous ? add(first, columnStart) : add(first, rowStart);
      std::vector<StmtPtr> body;
      ExprPtr shared;
      if (t->rounds) {
        body.push_back(let(row, add(var(t->firstRow), mul(var(chunk), t->rowsPerRound))));
        shared = add(var(t->firstElement), mul(var(chunk), t->rowsPerRound * t->inner));
      } else {
        body.push_back(let(row, div(var(chunk), t->chunks())));
        body.push_back(let(column, mod(var(chunk), t->chunks())));
        shared = t->element(var(row), var(column));
      }
      body.push_back(let(t->var, along));
      body.push_back(let(node_.k, k));
      ExprPtr inside = both(less(var(t->var), t->limit), less(var(node_.k), node_.depth));
      ExprPtr lanesInside = kContiguous ? op(BinaryOp::Sub, node_.depth, var(node_.k)) : op(BinaryOp::Sub, t->limit, var(t->var));
      body.push_back(std::make_shared<CopyAsync>(t->stageBuffer(stage), shared, t->operand->tensor,
                                                 indexing_.flatIndex(t->operand->tensor, t->operand->indices), inside,
                                                 t->operand->dtype, static_cast<int>(tile::kMatrixRowElements), lanesInside));
      // Kept rolled: unrolled, nvcc keeps every round's addresses live across the k loop, and spills.
      int64_t count = t->outer * t->chunks();
      stmts.push_back(t->rounds ? std::make_shared<For>(chunk, i64(0), i64(t->rounds), i64(1), block(body), false, true)
                                : std::make_shared<For>(chunk, var(thread_), i64(count), i64(threads()), block(body), false, true));
    }
    return block(stmts);
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

  // Each accumulator where mma's C fragment puts it: c0, c1 at row lane / 4 and columns 2 (lane % 4) + 0, 1
  // of its 16 x 8 tile, c2, c3 eight rows below. The two of a row are stored with one 4- or 8-byte store
  // where the output's last index is the column, the address is aligned and both are inside.
  StmtPtr epilogue() {
    const std::string p = node_.name + "__";
    std::string rowTile = p + "row_tile", colTile = p + "col_tile", half = p + "half";
    ExprPtr row = add(add(add(node_.rowBase, mul(var(warpRow_), node_.warpRows)),
                          add(mul(var(rowTile), tile::kMmaRows), mul(var(half), 8))),
                      div(var(lane_), 4));
    ExprPtr col = add(add(add(node_.colBase, mul(var(warpCol_), node_.warpCols)), mul(var(colTile), tile::kMmaCols)),
                      mul(mod(var(lane_), 4), 2));
    // The result of the pair's element `e` (its column is col + e).
    auto result = [&](int64_t e) {
      ExprPtr element = add(add(mul(add(mul(var(rowTile), colTiles_), var(colTile)), 4), mul(var(half), 2)), i64(e));
      return rewrite(indexing_.lowerExpr(node_.value), [&](const Expr& node) -> ExprPtr {
        if (const auto* load = node.as<Load>(); load && load->tensor == node_.accumulator)
          return std::make_shared<Load>(DType::F32, accumulators_, std::vector<ExprPtr>{element});
        if (const auto* axis = node.as<AxisVar>(); axis && axis->name == node_.col && e > 0) return add(var(node_.col), i64(e));
        return nullptr;
      });
    };
    ExprPtr first = indexing_.flatIndex(node_.output, node_.outputIndices);
    auto inside = [&](int64_t e) { return less(add(var(node_.col), i64(e)), node_.cols); };
    StmtPtr each = block({std::make_shared<If>(inside(0), std::make_shared<Store>(node_.output, first, result(0))),
                          std::make_shared<If>(inside(1), std::make_shared<Store>(node_.output, add(first, i64(1)), result(1)))});
    DType dtype = node_.value->dtype;
    int bytes = 2 * dtypeBytes(dtype);
    if (pairsAreAdjacent() && (bytes == 4 || bytes == 8)) {
      std::string pair = p + "pair";
      StmtPtr together = block({std::make_shared<Declare>(pair, dtype, 2, Memory::Local),
                                std::make_shared<Store>(pair, i64(0), result(0)), std::make_shared<Store>(pair, i64(1), result(1)),
                                std::make_shared<VectorStore>(node_.output, first, pair, bytes)});
      each = std::make_shared<IfAligned>(std::vector<Address>{{node_.output, first}}, bytes, inside(1), together, each);
    }
    StmtPtr perPair = block({let(node_.row, row), std::make_shared<If>(less(var(node_.row), node_.rows),
                                                                       block({let(node_.col, col), each}))});
    return unrolled(rowTile, rowTiles_, unrolled(colTile, colTiles_, unrolled(half, 2, perPair)));
  }

  // Are the two columns of a pair adjacent in the output: its last index the column, the others free of it?
  bool pairsAreAdjacent() const {
    const auto* last = node_.outputIndices.back()->as<AxisVar>();
    if (!last || last->name != node_.col) return false;
    for (size_t d = 0; d + 1 < node_.outputIndices.size(); ++d) {
      bool mentions = false;
      forEachNode(*node_.outputIndices[d], [&](const Expr& e) {
        if (const auto* axis = e.as<AxisVar>(); axis && axis->name == node_.col) mentions = true;
      });
      if (mentions) return false;
    }
    return true;
  }

  const tile::MatrixProduct& node_;
  const GlobalIndexing& indexing_;
  std::string lane_, warpRow_, warpCol_, thread_, accumulators_, aFragments_, bFragments_, slice_, slices_;
  OperandTiles a_, b_;
  int64_t rowTiles_ = 0, colTiles_ = 0;
};

}  // namespace

StmtPtr lowerMatrixProduct(const tile::MatrixProduct& product, const GlobalIndexing& indexing) {
  return ProductLowering(product, indexing).lower();
}

}  // namespace emmy::kernel
