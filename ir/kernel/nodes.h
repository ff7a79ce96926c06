// Kernel IR: what each thread of a CUDA kernel does. Loops run from a begin to an end by a step written
// in terms of the thread's and block's indices; global buffers are read and written at flat row-major
// positions; the cross-thread combines of Tile IR are spelled out as warp shuffles, shared memory and
// barriers. The CUDA printer (backend/cuda) turns this level into text and decides nothing.
//
// Expressions are Tensor IR's. The hardware indices are the variables threadIdx.x ... gridDim.z (i64);
// every other AxisVar is a loop variable or a Let.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/loop/nodes.h"

namespace emmy::kernel {

using tensor::ExprPtr;

bool isHardwareIndex(const std::string& name);
bool isThreadIndex(const std::string& name);  // threadIdx.x, .y or .z
// The hardware indices along `dimension` (0, 1, 2 for x, y, z).
ExprPtr threadIndex(int dimension = 0);
ExprPtr blockIndex(int dimension = 0);
ExprPtr blockSize(int dimension = 0);
ExprPtr gridSize(int dimension = 0);
// The bytes of shared memory sized at launch that the launch gave the kernel (tile::kLaunchSharedBytes):
// like the hardware indices, a value every thread reads (CUDA's %dynamic_smem_size).
ExprPtr launchSharedBytes();
bool isLaunchSharedBytes(const std::string& name);

#define EMMY_KERNEL_STMT_NODES(X) \
  X(For)                          \
  X(Let)                          \
  X(Declare)                      \
  X(Store)                        \
  X(If)                           \
  X(Barrier)                      \
  X(ShuffleCombine)               \
  X(VectorLoad)                   \
  X(VectorStore)                  \
  X(IfAligned)                    \
  X(CopyAsync)                    \
  X(WaitForCopies)                \
  X(LoadMatrix)                   \
  X(MultiplyAccumulate)           \
  X(TransposeQuad)                \
  X(CombineLanes)                 \
  X(Block)

enum class StmtKind {
#define EMMY_ENUM_ENTRY(Node) Node,
  EMMY_KERNEL_STMT_NODES(EMMY_ENUM_ENTRY)
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

// for (var = begin; var < end; var += step) body; `unroll`: fully unrolled (constant bounds); `rolled`:
// never unrolled (nvcc unrolls short loops by itself, which can keep every iteration's values live).
struct For final : Stmt {
  static constexpr StmtKind kKind = StmtKind::For;
  For(std::string var, ExprPtr begin, ExprPtr end, ExprPtr step, StmtPtr body, bool unroll = false, bool rolled = false)
      : Stmt(kKind), var(std::move(var)), begin(std::move(begin)), end(std::move(end)), step(std::move(step)),
        body(std::move(body)), unroll(unroll), rolled(rolled) {}
  const std::string var;
  const ExprPtr begin, end, step;
  const StmtPtr body;
  const bool unroll;
  const bool rolled;
};

// const int64_t var = value; for the rest of the block.
struct Let final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Let;
  Let(std::string var, ExprPtr value) : Stmt(kKind), var(std::move(var)), value(std::move(value)) {}
  const std::string var;
  const ExprPtr value;
};

enum class Memory { Local, Shared };

// A buffer of `count` elements for the rest of the block: a thread's own (Local; count 1 is a scalar,
// read as a Load with no index) or the block's (Shared). A shared buffer `sizedAtLaunch` lies in the
// shared memory the launch sizes: it has that many elements there (an i64 expression of the sizes, at
// most `count`, the bound of every index), after the kernel's earlier such buffers.
struct Declare final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Declare;
  Declare(std::string buffer, DType dtype, int64_t count, Memory memory, ExprPtr sizedAtLaunch = nullptr)
      : Stmt(kKind), buffer(std::move(buffer)), dtype(dtype), count(count), memory(memory),
        sizedAtLaunch(std::move(sizedAtLaunch)) {}
  const std::string buffer;
  const DType dtype;
  const int64_t count;
  const Memory memory;
  const ExprPtr sizedAtLaunch;
};

// buffer[index] = value, or buffer = value for a scalar local (index null).
// buffer[index] = value; with `atomic`, one atomic buffer[index] = op(buffer[index], value) (see tile::Store).
struct Store final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Store;
  Store(std::string buffer, ExprPtr index, ExprPtr value, std::optional<tensor::ReduceOp> atomic = std::nullopt)
      : Stmt(kKind), buffer(std::move(buffer)), index(std::move(index)), value(std::move(value)), atomic(atomic) {}
  const std::string buffer;
  const ExprPtr index;
  const ExprPtr value;
  const std::optional<tensor::ReduceOp> atomic;
};

struct If final : Stmt {
  static constexpr StmtKind kKind = StmtKind::If;
  If(ExprPtr condition, StmtPtr body) : Stmt(kKind), condition(std::move(condition)), body(std::move(body)) {}
  const ExprPtr condition;
  const StmtPtr body;
};

// __syncthreads(): reached by every thread of the block (Tile IR guarantees it).
struct Barrier final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Barrier;
  Barrier() : Stmt(kKind) {}
};

// buffer = op(buffer, the value of `buffer` in the lane `laneMask` away, by xor), in every lane of the
// warp together.
struct ShuffleCombine final : Stmt {
  static constexpr StmtKind kKind = StmtKind::ShuffleCombine;
  ShuffleCombine(std::string buffer, DType dtype, tensor::BinaryOp op, int laneMask)
      : Stmt(kKind), buffer(std::move(buffer)), dtype(dtype), op(op), laneMask(laneMask) {}
  const std::string buffer;
  const DType dtype;
  const tensor::BinaryOp op;
  const int laneMask;
};

// Starts copying source[sourceIndex] (or 0 where `condition` fails) into the shared buffer[index]; it
// may complete at any time until a WaitForCopies covers it (cp.async on sm_80 and later). With `lanes`
// > 1, that many consecutive elements, of which the first `lanesInside` (a count) are read where
// `condition` holds: one 16-byte copy when all are and the source is aligned, lane by lane otherwise.
struct CopyAsync final : Stmt {
  static constexpr StmtKind kKind = StmtKind::CopyAsync;
  CopyAsync(std::string buffer, ExprPtr index, std::string source, ExprPtr sourceIndex, ExprPtr condition, DType dtype,
            int lanes = 1, ExprPtr lanesInside = nullptr)
      : Stmt(kKind), buffer(std::move(buffer)), index(std::move(index)), source(std::move(source)),
        sourceIndex(std::move(sourceIndex)), condition(std::move(condition)), dtype(dtype), lanes(lanes),
        lanesInside(std::move(lanesInside)) {}
  const std::string buffer;
  const ExprPtr index;
  const std::string source;
  const ExprPtr sourceIndex;
  const ExprPtr condition;
  const DType dtype;
  const int lanes;
  const ExprPtr lanesInside;  // with lanes > 1
};

// Closes the thread's current group of copies and waits until at most `pending` groups are in flight.
struct WaitForCopies final : Stmt {
  static constexpr StmtKind kKind = StmtKind::WaitForCopies;
  explicit WaitForCopies(int pending) : Stmt(kKind), pending(pending) {}
  const int pending;
};

// ldmatrix.sync.aligned.m8n8.x`count`[.trans].shared.b16, in every lane of the warp together: `count`
// 8x8 matrices of the 16-bit elements of the shared `buffer`, each row of matrix i starting at the
// `element` that lane 8 * i + row gives, into the fragment registers fragment[fragmentElement + i]
// (two elements each; with `transpose`, of the transposed matrix). `fragment` is a local array of i32.
struct LoadMatrix final : Stmt {
  static constexpr StmtKind kKind = StmtKind::LoadMatrix;
  LoadMatrix(std::string fragment, ExprPtr fragmentElement, std::string buffer, ExprPtr element, int count, bool transpose)
      : Stmt(kKind), fragment(std::move(fragment)), fragmentElement(std::move(fragmentElement)), buffer(std::move(buffer)),
        element(std::move(element)), count(count), transpose(transpose) {}
  const std::string fragment;
  const ExprPtr fragmentElement;
  const std::string buffer;
  const ExprPtr element;
  const int count;
  const bool transpose;
};

// mma.sync.aligned.m16n8k16.row.col.f32.`dtype`.`dtype`.f32, in every lane of the warp together: the
// four f32 accumulators accumulator[accumulatorElement ..] += the 16x16 A of the four registers
// a[aElement ..] times the 16x8 B of the two b[bElement ..] (the PTX ISA's fragment layouts).
struct MultiplyAccumulate final : Stmt {
  static constexpr StmtKind kKind = StmtKind::MultiplyAccumulate;
  MultiplyAccumulate(std::string accumulator, ExprPtr accumulatorElement, std::string a, ExprPtr aElement, std::string b,
                     ExprPtr bElement, DType dtype)
      : Stmt(kKind), accumulator(std::move(accumulator)), accumulatorElement(std::move(accumulatorElement)), a(std::move(a)),
        aElement(std::move(aElement)), b(std::move(b)), bElement(std::move(bElement)), dtype(dtype) {}
  const std::string accumulator;
  const ExprPtr accumulatorElement;
  const std::string a;
  const ExprPtr aElement;
  const std::string b;
  const ExprPtr bElement;
  const DType dtype;  // of A and B: f16 or bf16
};

// In every lane of the warp together: the local array `local`, as 4 words of 32 bits, is transposed across
// each quad (the 4 lanes from a multiple of 4): word j of the quad's lane i becomes word i of its lane j.
// `lane` is the thread's lane in its warp.
struct TransposeQuad final : Stmt {
  static constexpr StmtKind kKind = StmtKind::TransposeQuad;
  TransposeQuad(std::string local, ExprPtr lane) : Stmt(kKind), local(std::move(local)), lane(std::move(lane)) {}
  const std::string local;
  const ExprPtr lane;
};

// accumulator[element] (a local; no element for a scalar) = op(it, the op of the `lanes` f16 or bf16
// values of the local array `local`, each widened to f32), op Max or Min and NaN-propagating like the
// language's: on sm_80 and later a pair of lanes at a time (max.NaN.f16x2) and one widening of the last
// pair, where each lane took a widening and an f32 max.
struct CombineLanes final : Stmt {
  static constexpr StmtKind kKind = StmtKind::CombineLanes;
  CombineLanes(std::string accumulator, ExprPtr element, tensor::BinaryOp op, std::string local, int lanes)
      : Stmt(kKind), accumulator(std::move(accumulator)), element(std::move(element)), op(op), local(std::move(local)),
        lanes(lanes) {}
  const std::string accumulator;
  const ExprPtr element;
  const tensor::BinaryOp op;
  const std::string local;
  const int lanes;
};

// `bytes` (8 or 16) bytes of the global or shared `buffer` from element `element` (an address aligned
// to them) into the local array `local`, from its element `localElement` (0 when null).
struct VectorLoad final : Stmt {
  static constexpr StmtKind kKind = StmtKind::VectorLoad;
  VectorLoad(std::string local, std::string buffer, ExprPtr element, int bytes, ExprPtr localElement = nullptr)
      : Stmt(kKind), local(std::move(local)), buffer(std::move(buffer)), element(std::move(element)), bytes(bytes),
        localElement(std::move(localElement)) {}
  const std::string local, buffer;
  const ExprPtr element;
  const int bytes;
  const ExprPtr localElement;
};

// The local array `local`, from its element `localElement` (0 when null), into `bytes` bytes (4, 8 or
// 16) of the global or shared `buffer` from element `element`. A `narrowing` store's local array holds f32 values
// that it rounds to the buffer's f16 or bf16 a pair at a time (one paired conversion where each value
// would take one).
struct VectorStore final : Stmt {
  static constexpr StmtKind kKind = StmtKind::VectorStore;
  VectorStore(std::string buffer, ExprPtr element, std::string local, int bytes, ExprPtr localElement = nullptr,
              bool narrowing = false)
      : Stmt(kKind), buffer(std::move(buffer)), element(std::move(element)), local(std::move(local)), bytes(bytes),
        localElement(std::move(localElement)), narrowing(narrowing) {}
  const std::string buffer;
  const ExprPtr element;
  const std::string local;
  const int bytes;
  const ExprPtr localElement;
  const bool narrowing;
};

// An address a vector access uses: `buffer`, or its element `element` when there is one.
struct Address {
  std::string buffer;
  ExprPtr element;
};

// `aligned` when every one of `addresses` (there may be none) is a multiple of `bytes` and `condition`
// (if any) holds, `otherwise` else.
struct IfAligned final : Stmt {
  static constexpr StmtKind kKind = StmtKind::IfAligned;
  IfAligned(std::vector<Address> addresses, int bytes, ExprPtr condition, StmtPtr aligned, StmtPtr otherwise)
      : Stmt(kKind), addresses(std::move(addresses)), bytes(bytes), condition(std::move(condition)),
        aligned(std::move(aligned)), otherwise(std::move(otherwise)) {}
  const std::vector<Address> addresses;
  const int bytes;
  const ExprPtr condition;
  const StmtPtr aligned, otherwise;
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
    EMMY_KERNEL_STMT_NODES(EMMY_DISPATCH_CASE)
#undef EMMY_DISPATCH_CASE
  }
  __builtin_unreachable();
}

// Calls `visit` on every expression of `stmt` and of the statements inside it.
void forEachExpr(const Stmt& stmt, const std::function<void(const ExprPtr&)>& visit);
// Calls `visit` on `stmt` and on every statement inside it, in the order they stand.
void forEachStmt(const Stmt& stmt, const std::function<void(const Stmt&)>& visit);

// `stmt` with each statement directly inside it (a For's, If's or Block's body, an IfAligned's two
// sides) replaced by `replace` of it, called in the order the statements stand; any other statement
// as it is. The passes that rewrite some statements and recurse through the rest share it.
StmtPtr withChildren(const StmtPtr& stmt, const std::function<StmtPtr(const StmtPtr&)>& replace);

// `stmt` without the Lets whose variable nothing after them reads. The lowering binds every index of an
// iteration, and code that never needs one would make nvcc warn that it is never referenced.
StmtPtr withoutUnusedLets(const StmtPtr& stmt);

// One CUDA kernel: launched with a grid of `gridBlocks` blocks along x, y and z (i64 expressions of
// the sizes) of `blockThreads` threads along x, y and z; it receives every input, output, temporary,
// scalar and size.
struct Function {
  std::string name;
  std::vector<std::string> stages;
  std::array<int, 3> blockThreads;
  std::array<ExprPtr, 3> gridBlocks;
  StmtPtr body;
  // A Bool expression of sizes: the launcher runs this kernel only where it holds (the kernel belongs to
  // one of several launch variants, ir/tensor/launch_variants.h); null: always.
  ExprPtr launchWhen;
  // The width of its index arithmetic, 64 or 32 (index_widths.h). A kernel with 32-bit indices and its
  // 64-bit twin, which follows it, share `indicesFit`: a Bool expression of the sizes under which the
  // launcher runs the first, and the second where it fails; null for a kernel without a twin.
  int indexBits = 64;
  ExprPtr indicesFit;
  // 64 where the schedule keeps its index arithmetic 64-bit at every size (`index_bits ROOT 64`): the
  // pass then leaves it as it is.
  int narrowestIndexBits = 32;

  // The 64-bit twin of the kernel before it, which the launcher runs where that one's indices do not fit.
  bool isWideTwin() const { return indicesFit && indexBits == 64; }
  int threadsPerBlock() const { return blockThreads[0] * blockThreads[1] * blockThreads[2]; }
  // The shared buffers sized at launch, one after another in the launch's shared memory: each with its
  // first byte there (an i64 expression of the sizes).
  struct SizedAtLaunch {
    const Declare* buffer;
    ExprPtr offset;
  };
  std::vector<SizedAtLaunch> sharedSizedAtLaunch() const;
  // The bytes they take on each path a block may take (the sides of launch variants, tested on the
  // bytes the launch gave: one path per choice of sides) that has some, as i64 expressions of the sizes.
  // The launch gives the most of them that the device allows, or 0.
  std::vector<ExprPtr> launchSharedChoices() const;
  // The most they take on any path (an i64 expression of the sizes; null when there are none), and at most.
  ExprPtr launchSharedBytes() const;
  int64_t mostLaunchSharedBytes() const;
  // The shared memory it declares with a constant size, every buffer counted (at most what ptxas reports).
  int64_t declaredSharedBytes() const;
  // Only x has more than one block (or thread): printers then show one number.
  bool flatGrid() const;
  bool flatBlock() const { return blockThreads[1] == 1 && blockThreads[2] == 1; }
};

struct Program {
  tensor::Kernel source;
  std::vector<loop::Temporary> temporaries;
  std::vector<Function> functions;  // launched in this order
};

}  // namespace emmy::kernel
