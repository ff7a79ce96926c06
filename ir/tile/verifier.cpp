#include "ir/tile/verifier.h"

#include <algorithm>
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
    const std::array<int, 3>& threads = nest_.threads;
    if (threads[0] < 1 || threads[1] < 1 || threads[2] < 1 || threads[0] * threads[1] * threads[2] > 1024)
      fail(fmt::format("{}x{}x{} threads per block", threads[0], threads[1], threads[2]));
    const auto* top = nest_.body->as<Loop>();
    gridBound_ = top && top->binding == Binding::GridStrided;
    check(*nest_.body, true);
  }

private:
  [[noreturn]] void fail(const std::string& message) const {
    throw InternalError(fmt::format("invalid Tile IR in {}, kernel {}: {}", program_.source.instanceName(), nest_.name,
                                    message));
  }

  void checkExpr(const ExprPtr& expr) const {
    forEachNode(*expr, [&](const Expr& node) {
      if (const auto* axis = node.as<AxisVar>(); axis && !vars_.count(axis->name) && axis->name != kLaunchSharedBytes)
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
    bool blocks = node.binding == Binding::BlockStrided || node.binding == Binding::GridStrided;
    if (blocks && insideOtherLoop_)
      fail(fmt::format("loop {} is bound to blocks or the grid inside a loop that is not", node.var));
    if (node.binding == Binding::ThreadStrided && (!blockLevel || gridBound_))
      fail(fmt::format("thread-strided loop {} is inside another thread's work", node.var));
    if (node.binding == Binding::ThreadIndex) {
      const auto* extent = node.extent->as<IntImm>();
      if (node.dimension < 0 || node.dimension > 2 || !extent || extent->value != nest_.threads[node.dimension] ||
          threadDimensionsInUse_.count(node.dimension))
        fail(fmt::format("loop {} over the thread index {} has extent {} in a block of {} along it, or is inside "
                         "another loop over that index",
                         node.var, node.dimension, printExpr(*node.extent), nest_.threads[std::clamp(node.dimension, 0, 2)]));
    }
    checkExpr(node.extent);
    const auto* extent = node.extent->as<IntImm>();
    bool lanes = node.binding == Binding::Unrolled && extent && extent->value == node.vectorWidth;
    if (node.vectorWidth != 1 && !(node.binding == Binding::GridStrided && 16 % node.vectorWidth == 0) && !lanes)
      fail(fmt::format("loop {} is vectorized by {} but is neither a grid-strided loop of 16-byte groups nor an "
                       "unrolled loop of that extent", node.var, node.vectorWidth));
    if (vars_.count(node.var)) fail(fmt::format("loop variable {} shadows another", node.var));
    vars_.insert(node.var);
    bool perThread = node.binding == Binding::ThreadIndex || node.binding == Binding::ThreadStrided ||
                     node.binding == Binding::GridStrided;
    if (perThread) threadVars_.insert(node.var);
    bool uniform = node.binding == Binding::BlockStrided || node.binding == Binding::Serial ||
                   node.binding == Binding::Unrolled || node.binding == Binding::ThreadIndex;
    bool innerBlockLevel = blockLevel && uniform && !gridBound_;
    std::set<int> outerDimensions = threadDimensionsInUse_;
    if (node.binding == Binding::ThreadIndex) threadDimensionsInUse_.insert(node.dimension);
    if (node.binding == Binding::ThreadStrided || node.binding == Binding::GridStrided) threadDimensionsInUse_ = {0, 1, 2};
    bool outerInsideOther = insideOtherLoop_;
    insideOtherLoop_ = insideOtherLoop_ || !blocks;
    check(*node.body, innerBlockLevel);
    insideOtherLoop_ = outerInsideOther;
    threadDimensionsInUse_ = outerDimensions;
    vars_.erase(node.var);
    threadVars_.erase(node.var);
  }
  void checkNode(const Let& node, bool) {
    checkExpr(node.value);
    if (vars_.count(node.var)) fail(fmt::format("let {} shadows another variable", node.var));
    vars_.insert(node.var);
    if (!uniform(*node.value)) threadVars_.insert(node.var);
  }
  // The same in every thread of the block: no thread's own variable, and no buffer (registers differ).
  bool uniform(const Expr& expr) const {
    bool same = true;
    forEachNode(expr, [&](const Expr& node) {
      const auto* axis = node.as<AxisVar>();
      same = same && !node.as<Load>() && !(axis && threadVars_.count(axis->name));
    });
    return same;
  }
  void checkNode(const Allocate& node, bool blockLevel) {
    if (buffers_.count(node.buffer)) fail(fmt::format("buffer {} shadows another", node.buffer));
    if (node.sizedAtLaunch) {
      if (node.scope != MemoryScope::Shared) fail(fmt::format("buffer {} is sized at launch but not shared", node.buffer));
      checkExpr(node.sizedAtLaunch);
    }
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
    if (!blockLevel || threadDimensionsInUse_.count(node.dimension))
      fail(fmt::format("the combine of {} is not reached by every thread of the block, or is inside a loop over the "
                       "{} index it combines across", node.buffer, "xyz"[node.dimension]));
    if (!buffers_.count(node.buffer)) fail(fmt::format("combines {}, which is not in scope", node.buffer));
  }
  void checkNode(const SingleThread& node, bool) {
    for (int dimension : node.dimensions)
      if (threadDimensionsInUse_.count(dimension))
        fail("a single-thread section inside a loop over the thread index it selects by");
    check(*node.body, false);
  }
  void checkNode(const Guard& node, bool blockLevel) {
    checkExpr(node.condition);
    check(*node.body, blockLevel && uniform(*node.condition));
  }
  void checkNode(const CopyAsync& node, bool) {
    if (!buffers_.count(node.buffer) || !buffers_.count(node.source))
      fail(fmt::format("copies {} into {}, one of which is not in scope", node.source, node.buffer));
    for (const ExprPtr& index : node.indices) checkExpr(index);
    for (const ExprPtr& index : node.sourceIndices) checkExpr(index);
    checkExpr(node.condition);
    if ((node.lanes > 1) != (node.lanesInside != nullptr)) fail(fmt::format("a copy into {} of {} lanes", node.buffer, node.lanes));
    if (node.lanesInside) checkExpr(node.lanesInside);
  }
  void checkNode(const WaitForCopies&, bool) {}
  void checkNode(const MatrixProduct& node, bool blockLevel) {
    if (!blockLevel) fail(fmt::format("the tensor-core product of {} is not reached by every thread of the block", node.name));
    if (nest_.threads != std::array<int, 3>{32, static_cast<int>(node.blockCols / node.warpCols),
                                            static_cast<int>(node.blockRows / node.warpRows)})
      fail(fmt::format("the block of {} is not a grid of its warp tiles", node.name));
    for (const ExprPtr& e : {node.rowBase, node.colBase, node.rows, node.cols, node.depth}) checkExpr(e);
    std::set<std::string> outerVars = vars_, outerBuffers = buffers_;
    vars_.insert({node.row, node.col, node.k});
    for (const auto* axes : {&node.rowAxes, &node.colAxes, &node.depthAxes})
      for (const auto& [axis, value] : *axes) {
        checkExpr(value);
        vars_.insert(axis);
      }
    for (const MatrixOperand* operand : {&node.a, &node.b}) {
      if (!buffers_.count(operand->tensor)) fail(fmt::format("the tensor cores read {}, which is not in scope", operand->tensor));
      for (const ExprPtr& index : operand->indices) checkExpr(index);
      if (operand->mask) {
        checkExpr(operand->mask);
        if (operand->mask->dtype != DType::Bool) fail(fmt::format("the mask of {} in {} is not a condition", operand->tensor, node.name));
      }
    }
    buffers_.insert(node.accumulator);
    for (const ExprPtr& index : node.outputIndices) checkExpr(index);
    checkExpr(node.value);
    vars_ = outerVars, buffers_ = outerBuffers;
  }
  void checkNode(const Block& node, bool blockLevel) {
    // Lets are scoped to their block.
    std::set<std::string> outer = vars_, outerThreadVars = threadVars_;
    for (const StmtPtr& stmt : node.stmts) check(*stmt, blockLevel);
    vars_ = outer, threadVars_ = outerThreadVars;
  }

  const Program& program_;
  const TileNest& nest_;
  bool gridBound_ = false;
  bool insideOtherLoop_ = false;        // inside a loop not bound to blocks or the grid
  std::set<int> threadDimensionsInUse_;  // thread indices that enclosing loops take their iterations from
  std::set<std::string> vars_;
  std::set<std::string> threadVars_;  // variables that differ from thread to thread
  std::set<std::string> buffers_;
};

}  // namespace

void verifyProgram(const Program& program) {
  for (const TileNest& nest : program.kernels) Verifier(program, nest).checkKernel();
}

}  // namespace emmy::tile
