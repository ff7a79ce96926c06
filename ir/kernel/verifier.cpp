#include "ir/kernel/verifier.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "ir/tensor/rewrite.h"
#include "support/diagnostics.h"

namespace emmy::kernel {

using namespace tensor;

namespace {

class Verifier {
public:
  Verifier(const Program& program, const Function& function) : program_(program), function_(function) {
    for (const TensorParam& input : program.source.inputs) globals_[input.name] = input.dtype;
    for (const TensorParam& output : program.source.outputs) globals_[output.name] = output.dtype;
    for (const loop::Temporary& temporary : program.temporaries) globals_[temporary.name] = temporary.dtype;
  }

  void check() {
    for (const ExprPtr& blocks : function_.gridBlocks) checkExpr(blocks);
    check(*function_.body, false);
  }

private:
  [[noreturn]] void fail(const std::string& message) const {
    throw InternalError(fmt::format("invalid Kernel IR in {}, kernel {}: {}", program_.source.instanceName(),
                                    function_.name, message));
  }

  // True when `expr` depends on the thread's index within its block (directly or through variables).
  bool threadDependent(const Expr& expr) const {
    bool dependent = false;
    forEachNode(expr, [&](const Expr& node) {
      if (const auto* var = node.as<AxisVar>())
        dependent |= isThreadIndex(var->name) || threadDependentVars_.count(var->name);
    });
    return dependent;
  }

  void checkExpr(const ExprPtr& expr) const {
    forEachNode(*expr, [&](const Expr& node) {
      if (const auto* var = node.as<AxisVar>();
          var && !isHardwareIndex(var->name) && !isLaunchSharedBytes(var->name) && !vars_.count(var->name))
        fail(fmt::format("{} uses {} outside its scope", printExpr(*expr), var->name));
      if (const auto* load = node.as<Load>()) checkAccess(load->tensor, load->indices.size(), printExpr(node));
    });
  }

  void checkAccess(const std::string& buffer, size_t indexCount, const std::string& what) const {
    if (globals_.count(buffer) || shared_.count(buffer)) {
      if (indexCount != 1) fail(fmt::format("{} must index {} with one flat index", what, buffer));
    } else if (auto local = locals_.find(buffer); local != locals_.end()) {
      if (indexCount != (local->second == 1 ? 0 : 1)) fail(fmt::format("{} indexes local {} wrongly", what, buffer));
    } else {
      fail(fmt::format("{} uses {}, which is not in scope", what, buffer));
    }
  }

  // `divergent`: inside a condition or loop that not every thread of the block takes alike.
  void check(const Stmt& stmt, bool divergent) {
    dispatch(stmt, [&](const auto& node) { checkNode(node, divergent); });
  }

  void checkNode(const For& node, bool divergent) {
    checkExpr(node.begin);
    checkExpr(node.end);
    checkExpr(node.step);
    bool dependent = threadDependent(*node.begin) || threadDependent(*node.end) || threadDependent(*node.step);
    vars_.insert(node.var);
    if (dependent) threadDependentVars_.insert(node.var);
    check(*node.body, divergent || dependent);
    vars_.erase(node.var);
    threadDependentVars_.erase(node.var);
  }
  void checkNode(const Let& node, bool) {
    checkExpr(node.value);
    vars_.insert(node.var);
    if (threadDependent(*node.value)) threadDependentVars_.insert(node.var);
  }
  void checkNode(const Declare& node, bool) {
    if (node.count < 1) fail(fmt::format("buffer {} has {} elements", node.buffer, node.count));
    if (node.sizedAtLaunch) {
      if (node.memory != Memory::Shared) fail(fmt::format("buffer {} is sized at launch but not shared", node.buffer));
      forEachNode(*node.sizedAtLaunch, [&](const Expr& inner) {
        if (!inner.as<SizeVar>() && !inner.as<IntImm>() && !inner.as<Binary>())
          fail(fmt::format("buffer {} is sized at launch by {}, which is not arithmetic of sizes", node.buffer,
                           printExpr(*node.sizedAtLaunch)));
      });
    }
    (node.memory == Memory::Shared ? shared_ : locals_)[node.buffer] = node.count;
    (node.memory == Memory::Local ? localTypes_ : sharedTypes_)[node.buffer] = node.dtype;
  }
  void checkNode(const Store& node, bool) {
    checkAccess(node.buffer, node.index ? 1 : 0, "a store to " + node.buffer);
    if (node.index) checkExpr(node.index);
    checkExpr(node.value);
  }
  void checkNode(const If& node, bool divergent) {
    checkExpr(node.condition);
    check(*node.body, divergent || threadDependent(*node.condition));
  }
  void checkNode(const Barrier&, bool divergent) {
    if (divergent) fail("a barrier that only some threads of the block reach");
  }
  void checkNode(const ShuffleCombine& node, bool divergent) {
    if (divergent) fail(fmt::format("a shuffle of {} that only some lanes reach", node.buffer));
    checkAccess(node.buffer, 0, "a shuffle");
  }
  void checkNode(const CopyAsync& node, bool) {
    if (!shared_.count(node.buffer)) fail(fmt::format("a copy into {}, which is not a shared buffer in scope", node.buffer));
    checkAccess(node.source, 1, "a copy from " + node.source);
    checkExpr(node.index);
    checkExpr(node.sourceIndex);
    checkExpr(node.condition);
    if ((node.lanes > 1) != (node.lanesInside != nullptr)) fail(fmt::format("a copy into {} of {} lanes", node.buffer, node.lanes));
    if (node.lanesInside) checkExpr(node.lanesInside);
  }
  void checkNode(const WaitForCopies&, bool) {}
  void checkNode(const LoadMatrix& node, bool divergent) {
    if (divergent) fail(fmt::format("an ldmatrix of {} that only some lanes reach", node.buffer));
    if (!shared_.count(node.buffer)) fail(fmt::format("an ldmatrix of {}, which is not a shared buffer in scope", node.buffer));
    checkAccess(node.fragment, 1, "an ldmatrix");
    checkExpr(node.fragmentElement), checkExpr(node.element);
  }
  void checkNode(const MultiplyAccumulate& node, bool divergent) {
    if (divergent) fail(fmt::format("an mma into {} that only some lanes reach", node.accumulator));
    for (const std::string* local : {&node.accumulator, &node.a, &node.b}) checkAccess(*local, 1, "an mma");
    checkExpr(node.accumulatorElement), checkExpr(node.aElement), checkExpr(node.bElement);
  }
  void checkNode(const TransposeQuad& node, bool divergent) {
    if (divergent) fail(fmt::format("a quad transpose of {} that only some lanes reach", node.local));
    if (!locals_.count(node.local) || locals_.at(node.local) * dtypeBytes(localTypes_.at(node.local)) != 16)
      fail(fmt::format("a quad transpose of {}, which is not a local array of 16 bytes", node.local));
    checkExpr(node.lane);
  }
  void checkNode(const CombineLanes& node, bool) {
    checkAccess(node.accumulator, node.element ? 1 : 0, "a combine of lanes into " + node.accumulator);
    if (node.element) checkExpr(node.element);
    if (localTypes_.count(node.accumulator) && localTypes_.at(node.accumulator) != DType::F32)
      fail(fmt::format("a combine of lanes into {}, which is not f32", node.accumulator));
    if (node.op != BinaryOp::Max && node.op != BinaryOp::Min) fail("a combine of lanes that is neither max nor min");
    auto local = locals_.find(node.local);
    if (local == locals_.end() || local->second < node.lanes || node.lanes < 2 || node.lanes % 2 != 0 ||
        (localTypes_.at(node.local) != DType::F16 && localTypes_.at(node.local) != DType::BF16))
      fail(fmt::format("a combine of {} lanes of {}, which is no local array of as many f16 or bf16 pairs", node.lanes, node.local));
  }
  void checkNode(const VectorLoad& node, bool) {
    checkVector(node.local, node.buffer, node.element, node.bytes, node.localElement, true, false);
  }
  void checkNode(const VectorStore& node, bool) {
    checkVector(node.local, node.buffer, node.element, node.bytes, node.localElement, false, node.narrowing);
  }
  void checkVector(const std::string& local, const std::string& buffer, const ExprPtr& element, int bytes,
                   const ExprPtr& localElement, bool load, bool narrowing) {
    bool shared = shared_.count(buffer) && !narrowing;
    if (!globals_.count(buffer) && !shared)
      fail(fmt::format("a vector access to {}, which is not a global buffer or a shared one in scope", buffer));
    if (!locals_.count(local) || locals_.at(local) < 2) fail(fmt::format("a vector access through {}, not a local array", local));
    if (bytes != 4 && bytes != 8 && bytes != 16) fail(fmt::format("a vector access of {} bytes", bytes));
    // The access copies bits: the local array must hold the buffer's dtype, or every element is misread.
    // A narrowing store rounds f32 values to the buffer's 16-bit float.
    DType dtype = shared ? sharedTypes_.at(buffer) : globals_.at(buffer);
    if (narrowing && dtype != DType::F16 && dtype != DType::BF16)
      fail(fmt::format("a narrowing vector store to {}, which is {}, not f16 or bf16", buffer, dtypeName(dtype)));
    if (narrowing) dtype = DType::F32;
    if (localTypes_.at(local) != dtype)
      fail(fmt::format("a vector access of {} ({}) through {} ({})", buffer, dtypeName(dtype), local,
                       dtypeName(localTypes_.at(local))));
    checkExpr(element);
    if (localElement) checkExpr(localElement);
  }
  void checkNode(const IfAligned& node, bool divergent) {
    for (const Address& address : node.addresses) {
      if (!globals_.count(address.buffer))
        fail(fmt::format("an alignment test of {}, which is not a global buffer", address.buffer));
      if (address.element) checkExpr(address.element);
    }
    if (node.condition) checkExpr(node.condition);
    check(*node.aligned, divergent);
    check(*node.otherwise, divergent);
  }
  void checkNode(const Block& node, bool divergent) {
    auto vars = vars_;
    auto dependentVars = threadDependentVars_;
    auto locals = locals_;
    auto localTypes = localTypes_;
    auto shared = shared_;
    auto sharedTypes = sharedTypes_;
    for (const StmtPtr& stmt : node.stmts) check(*stmt, divergent);
    vars_ = vars, threadDependentVars_ = dependentVars, locals_ = locals, localTypes_ = localTypes, shared_ = shared;
    sharedTypes_ = sharedTypes;
  }

  const Program& program_;
  const Function& function_;
  std::map<std::string, DType> globals_, localTypes_, sharedTypes_;
  std::map<std::string, int64_t> locals_, shared_;
  std::set<std::string> vars_, threadDependentVars_;
};

}  // namespace

void verifyProgram(const Program& program) {
  const std::vector<Function>& functions = program.functions;
  for (size_t f = 0; f < functions.size(); ++f) {
    Verifier(program, functions[f]).check();
    // A kernel with 32-bit indices and its 64-bit twin stand together: the launcher chooses between them.
    const Function& function = functions[f];
    EMMY_INTERNAL_ASSERT(function.indexBits == 32 || function.indexBits == 64, "kernel {} has {}-bit indices",
                         function.name, function.indexBits);
    if (!function.indicesFit) continue;
    const Function* twin = function.indexBits == 32 ? (f + 1 < functions.size() ? &functions[f + 1] : nullptr)
                                                    : (f > 0 ? &functions[f - 1] : nullptr);
    EMMY_INTERNAL_ASSERT(twin && twin->indicesFit == function.indicesFit && twin->indexBits != function.indexBits &&
                             twin->launchWhen == function.launchWhen,
                         "kernel {} has no twin of the other index width beside it", function.name);
  }
}

}  // namespace emmy::kernel
