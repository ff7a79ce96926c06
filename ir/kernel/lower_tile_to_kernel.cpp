// Tile IR -> Kernel IR: bindings become index arithmetic on the thread's and block's indices, global
// buffers are indexed flat (row-major), padded reads become guarded ones, single-thread sections become
// `if (threadIdx.x == 0)`, and each cross-thread combine becomes two rounds of warp shuffles around a
// shared array of one partial result per warp. Barriers come later (place_barriers.cpp).
#include "ir/kernel/lower_tile_to_kernel.h"

#include <map>

#include <fmt/format.h>

#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"
#include "support/diagnostics.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

// Most blocks a launch asks for; grid- and block-strided loops cover any size with fewer.
constexpr int64_t kMaxBlocks = 65535;
constexpr int kWarpSize = 32;

ExprPtr i64(int64_t value) { return std::make_shared<IntImm>(DType::I64, value); }
ExprPtr arithmetic(BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::I64, op, a, b); }
ExprPtr compare(BinaryOp op, ExprPtr a, ExprPtr b) { return std::make_shared<Binary>(DType::Bool, op, a, b); }

class Lowering {
public:
  Lowering(const tile::Program& program, const tile::TileNest& nest) : program_(program), nest_(nest) {
    for (const TensorParam& input : program.source.inputs) shapes_[input.name] = input.shape;
    for (const TensorParam& output : program.source.outputs) shapes_[output.name] = output.shape;
    for (const loop::Temporary& temporary : program.temporaries) shapes_[temporary.name] = temporary.shape;
  }

  Function lower() {
    const auto* top = nest_.body->as<tile::Loop>();
    EMMY_INTERNAL_ASSERT(top != nullptr, "kernel {} does not start with its grid loop", nest_.name);
    ExprPtr threads = i64(nest_.threadsPerBlock);
    ExprPtr blocks = top->binding == tile::Binding::GridStrided
                         ? arithmetic(BinaryOp::Div, arithmetic(BinaryOp::Add, top->extent, i64(nest_.threadsPerBlock - 1)),
                                      threads)
                         : top->extent;
    blocks = arithmetic(BinaryOp::Min, arithmetic(BinaryOp::Max, blocks, i64(1)), i64(kMaxBlocks));
    return Function{nest_.name, nest_.stages, nest_.threadsPerBlock, blocks, lowerStmt(*nest_.body)};
  }

private:
  StmtPtr lowerStmt(const tile::Stmt& stmt) {
    return tile::dispatch(stmt, [&](const auto& node) -> StmtPtr { return lowerNode(node); });
  }

  StmtPtr lowerNode(const tile::Loop& node) {
    ExprPtr begin, step;
    switch (node.binding) {
      case tile::Binding::Serial:
      case tile::Binding::Unrolled: begin = i64(0), step = i64(1); break;
      case tile::Binding::GridStrided:
        begin = arithmetic(BinaryOp::Add, arithmetic(BinaryOp::Mul, blockIndex(), blockSize()), threadIndex());
        step = arithmetic(BinaryOp::Mul, gridSize(), blockSize());
        break;
      case tile::Binding::BlockStrided: begin = blockIndex(), step = gridSize(); break;
      case tile::Binding::ThreadStrided: begin = threadIndex(), step = blockSize(); break;
    }
    return std::make_shared<For>(node.var, begin, expr(node.extent), step, lowerStmt(*node.body),
                                 node.binding == tile::Binding::Unrolled);
  }

  StmtPtr lowerNode(const tile::Let& node) { return std::make_shared<Let>(node.var, expr(node.value)); }

  StmtPtr lowerNode(const tile::Allocate& node) {
    int64_t count = 1;
    for (const Dim& dim : node.shape) {
      EMMY_INTERNAL_ASSERT(dim.isConstant(), "buffer {} has a symbolic extent", node.buffer);
      count *= dim.factor;
    }
    if (!node.shape.empty()) shapes_[node.buffer] = node.shape;
    StmtPtr declare = std::make_shared<Declare>(
        node.buffer, node.dtype, count, node.scope == tile::MemoryScope::Shared ? Memory::Shared : Memory::Local);
    return std::make_shared<Block>(std::vector<StmtPtr>{declare, lowerStmt(*node.body)});
  }

  StmtPtr lowerNode(const tile::Store& node) {
    return std::make_shared<Store>(node.buffer, flatIndex(node.buffer, node.indices), expr(node.value));
  }

  StmtPtr lowerNode(const tile::SingleThread& node) {
    return std::make_shared<If>(compare(BinaryOp::Eq, threadIndex(), i64(0)), lowerStmt(*node.body));
  }

  StmtPtr lowerNode(const tile::CrossThreadReduce& node) {
    // Every warp combines its lanes; lane 0 of each warp publishes its warp's result; then every warp
    // combines the published results, so that every thread ends with the total. The barriers around
    // the shared array are placed by place_barriers.cpp.
    BinaryOp step = reductionStep(node.op);
    int warps = (nest_.threadsPerBlock + kWarpSize - 1) / kWarpSize;
    std::string partials = node.buffer + "_partials";
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
      ExprPtr inside;
      const Shape& shape = shapes_.at(load->tensor);
      for (size_t d = 0; d < load->indices.size(); ++d) {
        ExprPtr index = expr(load->indices[d]);
        ExprPtr ok = std::make_shared<Binary>(DType::Bool, BinaryOp::And, compare(BinaryOp::Ge, index, i64(0)),
                                              compare(BinaryOp::Lt, index, dimValue(shape[d])));
        inside = inside ? std::make_shared<Binary>(DType::Bool, BinaryOp::And, inside, ok) : ok;
      }
      return std::make_shared<Select>(inside, flat, expr(load->padValue));
    });
  }

  const tile::Program& program_;
  const tile::TileNest& nest_;
  std::map<std::string, Shape> shapes_;  // of global buffers (and shaped locals)
};

}  // namespace

Program lowerTileToKernel(const tile::Program& program) {
  Program lowered{program.source, program.temporaries, {}};
  for (const tile::TileNest& nest : program.kernels) lowered.functions.push_back(Lowering(program, nest).lower());
  return lowered;
}

}  // namespace emmy::kernel
