#include "ir/tile/verifier.h"

#include <set>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "support/diagnostics.h"

namespace emmy::tile {

using namespace tensor;

namespace {

class Verifier {
public:
  Verifier(const Program& program, const TileNest& nest) : program_(program), nest_(nest) {
    for (const TensorParam& input : program.source.inputs) buffers_.insert(input.name);
    for (const TensorParam& output : program.source.outputs) buffers_.insert(output.name);
    for (const loop::Temporary& temporary : program.temporaries) buffers_.insert(temporary.name);
  }

  void checkKernel() {
    const auto* top = nest_.body->as<Loop>();
    if (!top || (top->binding != Binding::BlockStrided && top->binding != Binding::GridStrided))
      fail("its outermost statement must be a loop bound to blocks or to the grid");
    if (nest_.threadsPerBlock < 1 || nest_.threadsPerBlock > 1024 || nest_.threadsPerBlock % 32 != 0)
      fail(fmt::format("{} threads per block", nest_.threadsPerBlock));
    gridBound_ = top->binding == Binding::GridStrided;
    check(*nest_.body, true);
  }

private:
  [[noreturn]] void fail(const std::string& message) const {
    throw InternalError(fmt::format("invalid Tile IR in {}, kernel {}: {}", program_.source.instanceName(), nest_.name,
                                    message));
  }

  void checkExpr(const ExprPtr& expr) const {
    forEachNode(*expr, [&](const Expr& node) {
      if (const auto* axis = node.as<AxisVar>(); axis && !vars_.count(axis->name))
        fail(fmt::format("{} uses {} outside its scope", printExpr(*expr), axis->name));
      if (const auto* load = node.as<Load>(); load && !buffers_.count(load->tensor))
        fail(fmt::format("{} reads {}, which is not in scope", printExpr(*expr), load->tensor));
    });
  }

  // `blockLevel`: every thread of the block runs this statement together.
  void check(const Stmt& stmt, bool blockLevel) {
    dispatch(stmt, [&](const auto& node) { checkNode(node, blockLevel); });
  }

  void checkNode(const Loop& node, bool blockLevel) {
    bool top = &node == nest_.body.get();
    if ((node.binding == Binding::BlockStrided || node.binding == Binding::GridStrided) && !top)
      fail(fmt::format("loop {} is bound to blocks or the grid but is not the outermost", node.var));
    if (node.binding == Binding::ThreadStrided && (!blockLevel || gridBound_))
      fail(fmt::format("thread-strided loop {} is inside another thread's work", node.var));
    checkExpr(node.extent);
    if (node.vectorWidth != 1 && (node.binding != Binding::GridStrided || 16 % node.vectorWidth != 0))
      fail(fmt::format("loop {} is vectorized by {} but is not a grid-strided loop of 16-byte groups", node.var,
                       node.vectorWidth));
    if (vars_.count(node.var)) fail(fmt::format("loop variable {} shadows another", node.var));
    vars_.insert(node.var);
    bool uniform = node.binding == Binding::BlockStrided || node.binding == Binding::Serial ||
                   node.binding == Binding::Unrolled;
    bool innerBlockLevel = blockLevel && uniform && !gridBound_;
    check(*node.body, innerBlockLevel);
    vars_.erase(node.var);
  }
  void checkNode(const Let& node, bool) {
    checkExpr(node.value);
    if (vars_.count(node.var)) fail(fmt::format("let {} shadows another variable", node.var));
    vars_.insert(node.var);
  }
  void checkNode(const Allocate& node, bool blockLevel) {
    if (buffers_.count(node.buffer)) fail(fmt::format("buffer {} shadows another", node.buffer));
    buffers_.insert(node.buffer);
    check(*node.body, blockLevel);
    buffers_.erase(node.buffer);
  }
  void checkNode(const Store& node, bool) {
    if (!buffers_.count(node.buffer)) fail(fmt::format("stores to {}, which is not in scope", node.buffer));
    for (const ExprPtr& index : node.indices) checkExpr(index);
    checkExpr(node.value);
  }
  void checkNode(const CrossThreadReduce& node, bool blockLevel) {
    if (!blockLevel) fail(fmt::format("the combine of {} is not reached by every thread of the block", node.buffer));
    if (!buffers_.count(node.buffer)) fail(fmt::format("combines {}, which is not in scope", node.buffer));
  }
  void checkNode(const SingleThread& node, bool blockLevel) {
    if (!blockLevel) fail("a single-thread section inside a thread's own loop");
    check(*node.body, false);
  }
  void checkNode(const Guard& node, bool) {
    checkExpr(node.condition);
    check(*node.body, false);
  }
  void checkNode(const Block& node, bool blockLevel) {
    // Lets are scoped to their block.
    std::set<std::string> outer = vars_;
    for (const StmtPtr& stmt : node.stmts) check(*stmt, blockLevel);
    vars_ = outer;
  }

  const Program& program_;
  const TileNest& nest_;
  bool gridBound_ = false;
  std::set<std::string> vars_;
  std::set<std::string> buffers_;
};

}  // namespace

void verifyProgram(const Program& program) {
  for (const TileNest& nest : program.kernels) Verifier(program, nest).checkKernel();
}

}  // namespace emmy::tile
