// Loop IR: each future CUDA kernel as a loop nest over named axes, with its stores, its reductions as
// accumulate loops, and its local buffers. Decided here: fusion (an elementwise stage is inlined into its
// consumers; a reduction over the leading axes of its one consumer is computed inside that consumer's
// loop) and kernel boundaries (every other stage is a root: a kernel of its own that stores to global
// memory). Scalar expressions are Tensor IR's (tensor::Expr): loop variables are AxisVars, reads of
// buffers are Loads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/tensor/nodes.h"

namespace emmy::loop {

using tensor::Dim;
using tensor::ExprPtr;

#define EMMY_LOOP_STMT_NODES(X) \
  X(For)                        \
  X(Allocate)                   \
  X(Store)                      \
  X(Block)

enum class StmtKind {
#define EMMY_ENUM_ENTRY(Node) Node,
  EMMY_LOOP_STMT_NODES(EMMY_ENUM_ENTRY)
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

// for var in [0, extent): body. `stage` and `axis` say which stage's axis the loop runs over, so that
// schedule directives can name it (`y.n`); a reduction axis is one of the stage's too.
struct For final : Stmt {
  static constexpr StmtKind kKind = StmtKind::For;
  For(std::string var, Dim extent, std::string stage, std::string axis, StmtPtr body)
      : Stmt(kKind), var(std::move(var)), extent(std::move(extent)), stage(std::move(stage)), axis(std::move(axis)),
        body(std::move(body)) {}
  const std::string var;
  const Dim extent;
  const std::string stage, axis;
  const StmtPtr body;
};

// A buffer that lives while `body` runs: a stage computed inside a consumer's loop, or an accumulator.
// It is per iteration of the loops around it, so its shape is only what one iteration needs.
struct Allocate final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Allocate;
  Allocate(std::string buffer, DType dtype, std::vector<Dim> shape, StmtPtr body)
      : Stmt(kKind), buffer(std::move(buffer)), dtype(dtype), shape(std::move(shape)), body(std::move(body)) {}
  const std::string buffer;
  const DType dtype;
  const std::vector<Dim> shape;
  const StmtPtr body;
};

// buffer[indices] = value (value has the buffer's dtype).
struct Store final : Stmt {
  static constexpr StmtKind kKind = StmtKind::Store;
  Store(std::string buffer, std::vector<ExprPtr> indices, ExprPtr value)
      : Stmt(kKind), buffer(std::move(buffer)), indices(std::move(indices)), value(std::move(value)) {}
  const std::string buffer;
  const std::vector<ExprPtr> indices;
  const ExprPtr value;
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
    EMMY_LOOP_STMT_NODES(EMMY_DISPATCH_CASE)
#undef EMMY_DISPATCH_CASE
  }
  __builtin_unreachable();
}

// A global tensor between two kernels: a root stage that is not an output.
struct Temporary {
  std::string name;
  DType dtype;
  std::vector<Dim> shape;
};

// One future CUDA kernel.
struct LoopNest {
  std::string name;                 // softmax_k0, softmax_k1, ...
  std::vector<std::string> stages;  // the Tensor IR stages it computes, in order; the last is its root
  StmtPtr body;
};

struct Program {
  tensor::Kernel source;  // the kernel's signature and stages, as elaborated
  std::vector<Temporary> temporaries;
  std::vector<LoopNest> kernels;  // launched in this order
};

}  // namespace emmy::loop
