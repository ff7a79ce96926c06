// Tile IR: the loops of Loop IR, fused, split and bound to the GPU's grid, blocks and threads, with each
// buffer's memory placed (registers or shared memory) and the cross-thread combines of cooperative
// reductions made explicit. Every schedule decision lives here; Kernel IR below only spells them out
// per thread. apply_schedule.cpp builds it from a kernel's schedule, completed by the default policy.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/loop/nodes.h"

namespace emmy::tile {

using tensor::Dim;
using tensor::ExprPtr;

#define EMMY_TILE_STMT_NODES(X) \
  X(Loop)                       \
  X(Let)                        \
  X(Allocate)                   \
  X(Store)                      \
  X(CrossThreadReduce)          \
  X(SingleThread)               \
  X(Guard)                      \
  X(CopyAsync)                  \
  X(WaitForCopies)              \
  X(MatrixProduct)              \
  X(Block)

enum class StmtKind {
#define EMMY_ENUM_ENTRY(Node) Node,
  EMMY_TILE_STMT_NODES(EMMY_ENUM_ENTRY)
#undef EMMY_ENUM_ENTRY
};

struct Stmt {
  explicit Stmt(StmtKind kind) : kind(kind) {}
  virtual ~Stmt() = default;
  const StmtKind kind;

  template <typename T>
  const T* as() const { return kind == T::kKind ? static_cast<const T*>(this) : nullptr; }
};
using StmtPtr = std::shared_ptr<const Stmt>;

// How the iterations of a loop are shared out.
enum class Binding {
  Serial,         // every thread runs all of them
  GridStrided,    // across every thread of the grid (blocks x threads), striding by the grid's size
  BlockStrided,   // one iteration per block along the loop's `dimension`, striding by the blocks along it
  ThreadStrided,  // across all the threads of a block, striding by the block's size
  ThreadIndex,    // the iteration at the thread's own index along `dimension`: the extent is the block's
                  // size along it, so every thread runs exactly one and no control flow depends on it
  Unrolled,       // every thread runs all of them, fully unrolled (a constant extent)
};
const char* bindingName(Binding binding);

// for var in [0, extent), shared out by `binding`. `axes` names the Loop IR loops (stage.axis) fused
// into this one, outermost first; Lets inside recover their variables. A grid-strided loop whose body
// ends in a store to var's element may be `vectorWidth` wide: each thread takes that many consecutive
// iterations, and the store and the reads of tensors shaped like it use 16-byte accesses where the
// pointers allow (Kernel IR checks at run time and falls back to single elements). An unrolled loop
// of extent `vectorWidth` (`vectorize`) is a vector of lanes: its store to consecutive elements of a
// global tensor, and the reads of consecutive elements, become one access each where the addresses
// and the bounds allow.
struct Loop final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Loop;
  Loop(std::string var, ExprPtr extent, Binding binding, std::vector<std::string> axes, StmtPtr body,
       int vectorWidth = 1, int dimension = 0)
      : Stmt(kKind), var(std::move(var)), extent(std::move(extent)), binding(binding), axes(std::move(axes)),
        body(std::move(body)), vectorWidth(vectorWidth), dimension(dimension) {}
  const std::string var;
  const ExprPtr extent;
  const Binding binding;
  const std::vector<std::string> axes;
  const StmtPtr body;
  const int vectorWidth;
  const int dimension;  // 0, 1, 2 for x, y, z: of BlockStrided and ThreadIndex loops
};

// var = value (i64) for the statements after it in its block.
struct Let final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Let;
  Let(std::string var, ExprPtr value) : Stmt(kKind), var(std::move(var)), value(std::move(value)) {}
  const std::string var;
  const ExprPtr value;
};

enum class MemoryScope { Registers, Shared };

// The bytes of shared memory the launch gave the kernel's copies sized at launch (Allocate::sizedAtLaunch):
// what they all take at the launch's sizes, or 0 where the device has too little. Kernel IR reads it
// from the hardware (%dynamic_smem_size).
inline constexpr const char* kLaunchSharedBytes = "launch.sharedBytes";

// A buffer for `body`, in each thread's registers or in the block's shared memory. `sizedAtLaunch`: of a
// shared buffer whose size is decided at launch, the elements it has there (over the sizes; at most the
// shape's, which bounds every index); null for a buffer of the shape's size.
struct Allocate final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Allocate;
  Allocate(std::string buffer, DType dtype, std::vector<Dim> shape, MemoryScope scope, StmtPtr body,
           ExprPtr sizedAtLaunch = nullptr)
      : Stmt(kKind), buffer(std::move(buffer)), dtype(dtype), shape(std::move(shape)), scope(scope),
        body(std::move(body)), sizedAtLaunch(std::move(sizedAtLaunch)) {}
  const std::string buffer;
  const DType dtype;
  const std::vector<Dim> shape;
  const MemoryScope scope;
  const StmtPtr body;
  const ExprPtr sizedAtLaunch;
};

// buffer[indices] = value; with `atomic`, buffer[indices] = op(buffer[indices], value) as one atomic
// operation on global memory (the partial results of a reduction bound with `atomic`).
struct Store final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Store;
  Store(std::string buffer, std::vector<ExprPtr> indices, ExprPtr value, std::optional<tensor::ReduceOp> atomic = std::nullopt)
      : Stmt(kKind), buffer(std::move(buffer)), indices(std::move(indices)), value(std::move(value)), atomic(atomic) {}
  const std::string buffer;
  const std::vector<ExprPtr> indices;
  const ExprPtr value;
  const std::optional<tensor::ReduceOp> atomic;
};

// Each thread of the block holds a partial result of `op` in the register buffer `buffer` (rank 0);
// afterwards every thread holds the combination of the partial results of the threads that differ from
// it only in their x index (with a one-dimensional block: of every thread of the block).
struct CrossThreadReduce final : Stmt {
  static constexpr StmtKind kKind = StmtKind::CrossThreadReduce;
  CrossThreadReduce(std::string buffer, DType dtype, tensor::ReduceOp op, int dimension = 0)
      : Stmt(kKind), buffer(std::move(buffer)), dtype(dtype), op(op), dimension(dimension) {}
  const std::string buffer;
  const DType dtype;
  const tensor::ReduceOp op;
  const int dimension;  // the threads combined differ only in this index (0, 1, 2: x, y, z)
};

// `body` runs only in the threads whose index is 0 along each of `dimensions` (by default: in one
// thread of the block), so that a result many threads hold is stored once.
struct SingleThread final : Stmt {
  static constexpr StmtKind kKind = StmtKind::SingleThread;
  explicit SingleThread(StmtPtr body, std::vector<int> dimensions = {0, 1, 2})
      : Stmt(kKind), body(std::move(body)), dimensions(std::move(dimensions)) {}
  const StmtPtr body;
  const std::vector<int> dimensions;
};

// `body` runs only where `condition` holds: the ragged edge of a tile.
struct Guard final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Guard;
  Guard(ExprPtr condition, StmtPtr body) : Stmt(kKind), condition(std::move(condition)), body(std::move(body)) {}
  const ExprPtr condition;
  const StmtPtr body;
};

// Starts copying source[sourceIndices] (or 0 where `condition` fails) into buffer[indices], a shared
// buffer: the copy may complete at any time until a WaitForCopies that covers it (double buffering).
// With `lanes` > 1 it copies that many consecutive elements (one 16-byte copy where it can), those of
// them from the first up to `lanesInside` (a count) where `condition` holds, and 0 for the others.
struct CopyAsync final : Stmt {
  static constexpr StmtKind kKind = StmtKind::CopyAsync;
  CopyAsync(std::string buffer, std::vector<ExprPtr> indices, std::string source, std::vector<ExprPtr> sourceIndices,
            ExprPtr condition, DType dtype, int lanes = 1, ExprPtr lanesInside = nullptr)
      : Stmt(kKind), buffer(std::move(buffer)), indices(std::move(indices)), source(std::move(source)),
        sourceIndices(std::move(sourceIndices)), condition(std::move(condition)), dtype(dtype), lanes(lanes),
        lanesInside(std::move(lanesInside)) {}
  const std::string buffer;
  const std::vector<ExprPtr> indices;
  const std::string source;
  const std::vector<ExprPtr> sourceIndices;
  const ExprPtr condition;
  const DType dtype;
  const int lanes;
  const ExprPtr lanesInside;  // with lanes > 1
};

// Closes the group of copies this thread started since the last one and waits until at most `pending`
// groups are still in flight.
struct WaitForCopies final : Stmt {
  static constexpr StmtKind kKind = StmtKind::WaitForCopies;
  explicit WaitForCopies(int pending) : Stmt(kKind), pending(pending) {}
  const int pending;
};

// An operand of a MatrixProduct: `tensor`, a global f16, bf16 or f32 tensor, read at `indices` (over the
// product's row or column variable and its k variable).
struct MatrixOperand {
  std::string tensor;
  DType dtype;
  std::vector<ExprPtr> indices;
  bool kContiguous;  // its slices are laid out along k (else along the rows or columns)
  bool padded;       // read as 0 outside the tensor
  ExprPtr mask;      // read as 0 where this is false (a masked product's, matrix_product.h); null: nowhere
};

// One block's tile of a contraction as a block-level product (`mma`, matrix_product.h: on the tensor
// cores for f16 and bf16 operands, on the CUDA cores for f32): for the rows
// rowBase + [0, blockRows) and columns colBase + [0, blockCols) inside `rows` x `cols`, the sum over k in
// [0, depth) of a(row, k) * b(k, col) in f32, each result then stored as output[outputIndices] = value
// (which reads it as the rank-0 `accumulator`). The block's warps form a grid of blockRows / warpRows by
// blockCols / warpCols warp tiles (threads: 32 lanes along x, the warp's column along y, its row along
// z); k goes by slices of blockDepth, copied into shared memory `stages` slices ahead. The variables
// `row`, `col` and `k` are those of a, b, the output's indices and value; the others there are defined
// around it.
struct MatrixProduct final : Stmt {
  static constexpr StmtKind kKind = StmtKind::MatrixProduct;
  MatrixProduct() : Stmt(kKind) {}
  std::string name;  // the stage's: generated names start with it
  MatrixOperand a, b;
  std::string row, col, k;
  // Where row, col or k runs over a loop that `fuse` made: the axes fused into it (Loop IR variables,
  // which the operands, the output's indices and its value read), each with its value over it.
  std::vector<std::pair<std::string, ExprPtr>> rowAxes, colAxes, depthAxes;
  ExprPtr rowBase, colBase;
  ExprPtr rows, cols, depth;
  int64_t blockRows = 0, blockCols = 0, blockDepth = 0, warpRows = 0, warpCols = 0, stages = 0;
  std::string accumulator;
  std::string output;
  std::vector<ExprPtr> outputIndices;
  ExprPtr value;
};

struct Block final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Block;
  explicit Block(std::vector<StmtPtr> stmts) : Stmt(kKind), stmts(std::move(stmts)) {}
  const std::vector<StmtPtr> stmts;
};

template <typename Visitor>
decltype(auto) dispatch(const Stmt& stmt, Visitor&& visitor) {
  switch (stmt.kind) {
#define EMMY_DISPATCH_CASE(Node) \
  case StmtKind::Node: return visitor(static_cast<const Node&>(stmt));
    EMMY_TILE_STMT_NODES(EMMY_DISPATCH_CASE)
#undef EMMY_DISPATCH_CASE
  }
  __builtin_unreachable();
}

struct TileNest {
  std::string name;
  std::vector<std::string> stages;
  std::array<int, 3> threads;  // the block's size along x, y and z
  StmtPtr body;                // loops bound to blocks or the grid enclose every other loop
  // 32: its index arithmetic is 32-bit where the sizes allow (ir/kernel/index_widths.h); 64: never
  // (`index_bits ROOT 64`).
  int narrowestIndexBits = 32;
};

struct Program {
  tensor::Kernel source;
  std::vector<loop::Temporary> temporaries;
  std::vector<TileNest> kernels;
  // The schedule these loops follow, one directive of section 5 of the language a line (`emmy build
  // --emit schedule`): the kernel's own directives, then the default policy's for what they leave open,
  // and the params the default policy declared (`-D` sets them, `emmy tune` searches them).
  std::vector<std::string> schedule;
  std::vector<tensor::ScheduleParam> params;
};

}  // namespace emmy::tile
